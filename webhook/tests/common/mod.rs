//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::Value;

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn fixture(name: &str) -> Value {
    let path = fixtures_dir().join(format!("{name}.json"));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

pub fn fixture_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".json")
                .to_string()
        })
        .collect();
    names.sort();
    names
}

/// The decoded JSON patch of a response review, if any.
pub fn response_patch(review: &Value) -> Option<json_patch::Patch> {
    let b64 = review["response"]["patch"].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).unwrap();
    Some(serde_json::from_slice(&bytes).unwrap())
}

/// POST `review` to /validate of a router over `state` (no TLS) and return the answering review;
/// the HTTP status must be 200.
pub async fn validate_review(state: captf_webhook::AppState, review: &Value) -> Value {
    use axum::body::Body;
    use axum::http::{Method, Request, StatusCode, header};
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let req = Request::builder()
        .method(Method::POST)
        .uri(captf_webhook::VALIDATE_PATH)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(review).unwrap()))
        .unwrap();
    let resp = captf_webhook::router(state).oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap()
}

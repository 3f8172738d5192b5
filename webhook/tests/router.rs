//! Router tests: captured AdmissionReview fixtures through `router()` with `oneshot`, no TLS.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use captf_shared::defaults::apply_defaults;
use captf_shared::types::CaptfObject;
use captf_webhook::admission::{KindLabel, OperationLabel, ResultLabel, Route};
use captf_webhook::metrics::{Metrics, RequestLabels};
use captf_webhook::{AppState, HEALTHZ_PATH, MAX_BODY_BYTES, MUTATE_PATH, READYZ_PATH, VALIDATE_PATH, router};
use common::{fixture, fixture_names, response_patch};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

fn state() -> AppState {
    AppState::new(Arc::new(Metrics::new()))
}

async fn send(state: &AppState, req: Request<Body>) -> (StatusCode, Vec<u8>, axum::http::HeaderMap) {
    let resp = router(state.clone()).oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes().to_vec();
    (status, body, headers)
}

fn post(path: &str, body: impl Into<Body>) -> Request<Body> {
    Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.into())
        .unwrap()
}

async fn review(path: &str, review: &Value) -> Value {
    let (status, body, _) = send(&state(), post(path, serde_json::to_vec(review).unwrap())).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

fn kind_of(review: &Value) -> String {
    review["request"]["kind"]["kind"].as_str().unwrap().to_string()
}

fn parse(review: &Value, obj: &Value) -> CaptfObject {
    CaptfObject::from_kind_value(&kind_of(review), obj.clone()).unwrap()
}

#[tokio::test]
async fn every_accepted_fixture_is_allowed_with_its_uid_echoed() {
    let names: Vec<_> = fixture_names()
        .into_iter()
        .filter(|n| n.ends_with("-accepted"))
        .collect();
    assert_eq!(names.len(), 8, "one per kind, create and update: {names:?}");
    for name in names {
        let req = fixture(&name);
        for path in [VALIDATE_PATH, MUTATE_PATH] {
            let resp = review(path, &req).await;
            assert_eq!(resp["apiVersion"], "admission.k8s.io/v1", "{name}");
            assert_eq!(resp["kind"], "AdmissionReview", "{name}");
            assert_eq!(resp["response"]["uid"], req["request"]["uid"], "{name} {path}");
            assert_eq!(resp["response"]["allowed"], true, "{name} {path}: {resp}");
        }
    }
}

/// The field paths each rejected fixture must name (every violation, in one message).
const REJECTED: [(&str, &[&str]); 8] = [
    (
        "cluster-create-rejected",
        &["spec.module.source", "spec.jobs.lockTimeoutSeconds"],
    ),
    ("cluster-update-rejected", &["spec.controlPlaneEndpoint"]),
    (
        "machinepool-create-rejected",
        &["spec.variables", "spec.drift.interval"],
    ),
    ("machinepool-update-rejected", &["spec.jobs.failedJobsHistoryLimit"]),
    (
        "machine-create-rejected",
        &["spec.jobs.activeDeadlineSeconds", "spec.jobs.env"],
    ),
    ("machine-update-rejected", &["spec.providerID"]),
    ("machinetemplate-create-rejected", &["spec.template.spec.variablesFrom"]),
    (
        "machinetemplate-update-rejected",
        &["spec: is immutable", "spec.template.spec.jobs.lockTimeoutSeconds"],
    ),
];

#[tokio::test]
async fn every_rejected_fixture_is_denied_422_invalid_naming_every_violated_field() {
    let names: Vec<_> = fixture_names()
        .into_iter()
        .filter(|n| n.ends_with("-rejected"))
        .collect();
    assert_eq!(names.len(), REJECTED.len());
    for (name, fields) in REJECTED {
        let req = fixture(name);
        let resp = review(VALIDATE_PATH, &req).await;
        let r = &resp["response"];
        assert_eq!(r["uid"], req["request"]["uid"], "{name}");
        assert_eq!(r["allowed"], false, "{name}: {resp}");
        assert_eq!(r["status"]["code"], 422, "{name}");
        assert_eq!(r["status"]["reason"], "Invalid", "{name}");
        let message = r["status"]["message"].as_str().unwrap();
        assert!(!message.contains('\n'), "{name}: one line: {message}");
        for field in fields {
            assert!(message.contains(field), "{name}: {field} missing from {message:?}");
        }
    }
}

#[tokio::test]
async fn lock_timeout_of_4000_is_denied_with_the_design_message() {
    // DESIGN.md §2.1's own example. Needs captf-shared's validation (not the webhook's code).
    let mut req = fixture("cluster-create-accepted");
    req["request"]["object"]["spec"]["jobs"] = json!({"lockTimeoutSeconds": 4000});
    let resp = review(VALIDATE_PATH, &req).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    assert_eq!(
        resp["response"]["status"]["message"],
        "spec.jobs.lockTimeoutSeconds: must be less than spec.jobs.activeDeadlineSeconds (3600) (got 4000)"
    );
}

#[tokio::test]
async fn mutate_patch_applied_to_the_request_object_equals_apply_defaults() {
    for name in fixture_names().into_iter().filter(|n| n.contains("-create-")) {
        let req = fixture(&name);
        let resp = review(MUTATE_PATH, &req).await;
        let object = &req["request"]["object"];
        let Ok(parsed) = CaptfObject::from_kind_value(&kind_of(&req), object.clone()) else {
            continue; // a rejected fixture may not parse; it must then carry no patch
        };
        assert_eq!(resp["response"]["allowed"], true, "{name}");
        assert_eq!(resp["response"]["patchType"], "JSONPatch", "{name}");
        let patch = response_patch(&resp).unwrap();
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        let mut expected = parsed;
        apply_defaults(&mut expected);
        assert_eq!(parse(&req, &patched), expected, "{name}");
        // Nothing outside the spec moves: metadata (managedFields, annotations) is untouched.
        assert_eq!(patched["metadata"], object["metadata"], "{name}");
        for op in &patch.0 {
            let op = serde_json::to_value(op).unwrap();
            assert!(op["path"].as_str().unwrap().starts_with("/spec/"), "{name}: {op}");
        }
    }
}

#[tokio::test]
async fn an_already_defaulted_object_gets_no_patch() {
    for name in fixture_names().into_iter().filter(|n| n.ends_with("-update-accepted")) {
        let resp = review(MUTATE_PATH, &fixture(&name)).await;
        assert_eq!(resp["response"]["allowed"], true, "{name}");
        assert!(resp["response"].get("patch").is_none(), "{name}: {resp}");
        assert!(resp["response"].get("patchType").is_none(), "{name}");
    }
}

#[tokio::test]
async fn dry_run_is_answered_exactly_like_a_real_request() {
    // The webhook has no side effects, so there is nothing for dryRun to skip.
    for name in ["cluster-create-accepted", "machine-update-rejected"] {
        let mut req = fixture(name);
        for path in [MUTATE_PATH, VALIDATE_PATH] {
            req["request"]["dryRun"] = json!(false);
            let real = review(path, &req).await;
            req["request"]["dryRun"] = json!(true);
            let dry = review(path, &req).await;
            assert_eq!(real, dry, "{name} {path}");
        }
    }
}

#[tokio::test]
async fn unknown_kind_is_allowed_unchanged_with_a_warning() {
    let mut req = fixture("cluster-create-accepted");
    req["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "ConfigMap"});
    for path in [MUTATE_PATH, VALIDATE_PATH] {
        let resp = review(path, &req).await;
        assert_eq!(resp["response"]["allowed"], true);
        assert!(resp["response"].get("patch").is_none());
        let warning = resp["response"]["warnings"][0].as_str().unwrap();
        assert!(warning.contains("ConfigMap"), "{warning}");
    }
}

#[tokio::test]
async fn a_served_kind_name_in_another_group_is_unknown() {
    let mut req = fixture("cluster-create-rejected");
    req["request"]["kind"]["group"] = json!("example.com");
    let resp = review(VALIDATE_PATH, &req).await;
    assert_eq!(resp["response"]["allowed"], true);
    assert!(resp["response"]["warnings"].is_array());
}

#[tokio::test]
async fn a_spec_value_of_the_wrong_type_is_denied_naming_the_field_and_not_defaulted() {
    let mut req = fixture("cluster-create-accepted");
    req["request"]["object"]["spec"]["jobs"] = json!({"activeDeadlineSeconds": "1h"});
    let resp = review(VALIDATE_PATH, &req).await;
    let r = &resp["response"];
    assert_eq!(r["allowed"], false);
    assert_eq!(r["status"]["code"], 422);
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(msg.starts_with("spec.jobs.activeDeadlineSeconds: "), "{msg}");
    assert!(msg.contains("\"1h\""), "{msg}");
    let mutated = review(MUTATE_PATH, &req).await;
    assert_eq!(
        mutated["response"]["allowed"], true,
        "validation, not defaulting, rejects it"
    );
    assert!(mutated["response"].get("patch").is_none());
}

#[tokio::test]
async fn an_update_that_leaves_the_spec_alone_is_allowed_even_if_the_stored_spec_is_invalid() {
    // E.g. the controller removing its finalizer from an object stored before a rule tightened.
    let mut req = fixture("cluster-update-rejected");
    let old = req["request"]["oldObject"].clone();
    let mut new = old.clone();
    new["spec"]["jobs"]["lockTimeoutSeconds"] = json!(4000);
    req["request"]["oldObject"] = new.clone();
    new["metadata"]["finalizers"] = json!([]);
    req["request"]["object"] = new;
    let resp = review(VALIDATE_PATH, &req).await;
    assert_eq!(resp["response"]["allowed"], true, "{resp}");
}

/// The template fixture as another template kind (same `spec.template.spec` shape).
fn as_kind(mut req: Value, kind: &str) -> Value {
    let resource = format!("{}s", kind.to_lowercase());
    for key in ["kind", "requestKind"] {
        req["request"][key]["kind"] = json!(kind);
    }
    for key in ["resource", "requestResource"] {
        req["request"][key]["resource"] = json!(resource);
    }
    for key in ["object", "oldObject"] {
        req["request"][key]["kind"] = json!(kind);
    }
    req
}

#[tokio::test]
async fn template_spec_is_immutable_but_metadata_is_editable() {
    for kind in [
        "TerraformMachineTemplate",
        "TerraformClusterTemplate",
        "TerraformMachinePoolTemplate",
    ] {
        // Metadata only: a label added.
        let req = as_kind(fixture("machinetemplate-update-accepted"), kind);
        let resp = review(VALIDATE_PATH, &req).await;
        assert_eq!(resp["response"]["allowed"], true, "{kind}: {resp}");
        // A valid spec change: refused with the contract's reason.
        let mut req = req;
        req["request"]["object"]["spec"]["template"]["spec"]["variables"]["size"] = json!("large");
        let resp = review(VALIDATE_PATH, &req).await;
        assert_eq!(resp["response"]["allowed"], false, "{kind}: {resp}");
        assert_eq!(resp["response"]["status"]["code"], 422, "{kind}");
        let message = resp["response"]["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("spec: is immutable: a template cannot be changed in place"),
            "{kind}: {message}"
        );
    }
}

#[tokio::test]
async fn status_subresource_and_delete_are_allowed_unchanged() {
    let mut req = fixture("cluster-update-rejected");
    req["request"]["subResource"] = json!("status");
    let resp = review(VALIDATE_PATH, &req).await;
    assert_eq!(resp["response"]["allowed"], true);
    let mut req = fixture("cluster-update-accepted");
    req["request"]["operation"] = json!("DELETE");
    req["request"]["object"] = Value::Null;
    let resp = review(VALIDATE_PATH, &req).await;
    assert_eq!(resp["response"]["allowed"], true);
}

// ---- bad input: status codes and one-line reasons ----

async fn rejected(req: Request<Body>) -> (StatusCode, String) {
    let (status, body, headers) = send(&state(), req).await;
    let text = String::from_utf8(body).unwrap();
    assert!(text.ends_with('\n') && text.lines().count() == 1, "one line: {text:?}");
    assert!(
        headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    (status, text)
}

#[tokio::test]
async fn wrong_method_is_405_with_allow_post() {
    for method in [Method::GET, Method::PUT, Method::DELETE] {
        let req = Request::builder()
            .method(method)
            .uri(VALIDATE_PATH)
            .body(Body::empty())
            .unwrap();
        let (status, body, headers) = send(&state(), req).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(headers[header::ALLOW], "POST");
        assert!(String::from_utf8(body).unwrap().contains("use POST"));
    }
}

#[tokio::test]
async fn wrong_or_missing_content_type_is_415() {
    let body = serde_json::to_vec(&fixture("cluster-create-accepted")).unwrap();
    let req = Request::builder()
        .method(Method::POST)
        .uri(MUTATE_PATH)
        .header(header::CONTENT_TYPE, "text/yaml")
        .body(Body::from(body.clone()))
        .unwrap();
    let (status, text) = rejected(req).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert!(text.contains("text/yaml"), "{text}");
    let req = Request::builder()
        .method(Method::POST)
        .uri(MUTATE_PATH)
        .body(Body::from(body.clone()))
        .unwrap();
    assert_eq!(rejected(req).await.0, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // Parameters are fine.
    let req = Request::builder()
        .method(Method::POST)
        .uri(MUTATE_PATH)
        .header(header::CONTENT_TYPE, "application/json; charset=utf-8")
        .body(Body::from(body))
        .unwrap();
    assert_eq!(send(&state(), req).await.0, StatusCode::OK);
}

#[tokio::test]
async fn body_over_3_mib_is_413_whether_declared_or_streamed() {
    let big = vec![b' '; MAX_BODY_BYTES + 1];
    // Declared by Content-Length.
    let (status, text) = rejected(post(VALIDATE_PATH, big.clone())).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{text}");
    // Streamed without a length: stops reading at the limit.
    let (tx, body) = http_body_util::channel::Channel::<axum::body::Bytes, std::convert::Infallible>::new(4);
    let feeder = tokio::spawn(async move {
        let mut tx = tx;
        for chunk in big.chunks(64 * 1024) {
            if tx.send_data(axum::body::Bytes::copy_from_slice(chunk)).await.is_err() {
                break;
            }
        }
    });
    let (status, _) = rejected(post(VALIDATE_PATH, Body::new(body))).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    feeder.await.unwrap();
    // Exactly 3 MiB of whitespace is read (and then is not JSON).
    let (status, _) = rejected(post(VALIDATE_PATH, vec![b' '; MAX_BODY_BYTES])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn body_that_never_finishes_is_408() {
    let st = state().with_body_timeout(std::time::Duration::from_millis(50));
    let (mut tx, body) = http_body_util::channel::Channel::<axum::body::Bytes, std::convert::Infallible>::new(1);
    tx.send_data(axum::body::Bytes::from_static(b"{\"kind\":"))
        .await
        .unwrap();
    let (status, body, _) = send(&st, post(VALIDATE_PATH, Body::new(body))).await;
    assert_eq!(
        status,
        StatusCode::REQUEST_TIMEOUT,
        "{}",
        String::from_utf8_lossy(&body)
    );
    drop(tx);
}

#[tokio::test]
async fn malformed_json_not_a_review_and_missing_request_are_400_with_a_reason() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"{not json".to_vec(), "not JSON"),
        (b"".to_vec(), "not JSON"),
        (b"[1,2]".to_vec(), "not an admission.k8s.io/v1 AdmissionReview"),
        (
            serde_json::to_vec(
                &json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}),
            )
            .unwrap(),
            "admission.k8s.io/v1beta1",
        ),
        (
            serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Pod"})).unwrap(),
            "not an admission.k8s.io/v1 AdmissionReview",
        ),
        (
            serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})).unwrap(),
            "has no request",
        ),
        (
            serde_json::to_vec(
                &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": null}),
            )
            .unwrap(),
            "has no request",
        ),
        (
            serde_json::to_vec(
                &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": "x"}),
            )
            .unwrap(),
            "does not parse",
        ),
        (
            serde_json::to_vec(
                &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u"}}),
            )
            .unwrap(),
            "does not parse",
        ),
    ];
    for (body, reason) in cases {
        for path in [MUTATE_PATH, VALIDATE_PATH] {
            let (status, text) = rejected(post(path, body.clone())).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
            assert!(text.contains(reason), "{reason:?} not in {text:?}");
        }
    }
    let mut no_object = fixture("cluster-create-accepted");
    no_object["request"]["object"] = Value::Null;
    let (status, text) = rejected(post(VALIDATE_PATH, serde_json::to_vec(&no_object).unwrap())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(text.contains("CREATE has no object"), "{text}");
}

#[tokio::test]
async fn unknown_path_is_404_with_a_reason() {
    let (status, body, _) = send(&state(), post("/nope", "{}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(String::from_utf8(body).unwrap(), "no route for /nope\n");
}

#[tokio::test]
async fn health_and_readiness_answer_and_readiness_fails_once_shutdown_begins() {
    let st = state();
    let get = |p: &str| Request::builder().uri(p).body(Body::empty()).unwrap();
    assert_eq!(send(&st, get(HEALTHZ_PATH)).await.0, StatusCode::OK);
    assert_eq!(send(&st, get(READYZ_PATH)).await.0, StatusCode::OK);
    st.ready.store(false, Ordering::Relaxed);
    assert_eq!(send(&st, get(READYZ_PATH)).await.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(send(&st, get(HEALTHZ_PATH)).await.0, StatusCode::OK);
}

#[tokio::test]
async fn requests_are_counted_by_route_kind_operation_and_result() {
    let st = state();
    let body = serde_json::to_vec(&fixture("machine-create-accepted")).unwrap();
    send(&st, post(MUTATE_PATH, body.clone())).await;
    send(&st, post(MUTATE_PATH, body)).await;
    send(&st, post(VALIDATE_PATH, "nope")).await;
    let patched = RequestLabels {
        route: Route::Mutate,
        kind: KindLabel::TerraformMachine,
        operation: OperationLabel::Create,
        result: ResultLabel::Patched,
    };
    assert_eq!(st.metrics.requests(&patched), 2);
    let rejected = RequestLabels {
        route: Route::Validate,
        kind: KindLabel::None,
        operation: OperationLabel::None,
        result: ResultLabel::Rejected,
    };
    assert_eq!(st.metrics.requests(&rejected), 1);
    let text = st.metrics.encode().unwrap();
    assert!(
        text.contains(
            r#"captf_webhook_requests_total{route="mutate",kind="TerraformMachine",operation="CREATE",result="patched"} 2"#
        ),
        "{text}"
    );
    assert!(text.contains("captf_webhook_request_duration_seconds_bucket"), "{text}");
}

#[tokio::test]
async fn legal_but_doubtful_values_are_allowed_with_warnings() {
    let mut req = fixture("cluster-create-accepted");
    req["request"]["object"]["spec"]["drift"] = json!({"interval": "2m"});
    let resp = review(VALIDATE_PATH, &req).await;
    assert_eq!(resp["response"]["allowed"], true, "{resp}");
    let warnings = resp["response"]["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w.as_str().unwrap().contains("drift.interval")),
        "{warnings:?}"
    );
}

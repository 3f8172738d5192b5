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
use captf_webhook::{
    AppState, CONVERT_PATH, DEFAULT_MAX_BODY_BYTES, HEALTHZ_PATH, MUTATE_PATH, READYZ_PATH, VALIDATE_PATH, router,
};
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
    // docs/api.md's own example. Needs captf-shared's validation (not the webhook's code).
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
async fn body_over_the_limit_is_413_whether_declared_or_streamed() {
    let big = vec![b' '; DEFAULT_MAX_BODY_BYTES + 1];
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
    // From the API server: any other address is held to its share of bytes first.
    let mut streamed = post(VALIDATE_PATH, Body::new(body));
    streamed.extensions_mut().insert(captf_webhook::routes::Trusted);
    let (status, _) = rejected(streamed).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    feeder.await.unwrap();
    // Exactly the limit's worth of whitespace is read (and then is not JSON), from the API
    // server (any one address holds less).
    let mut whole = post(VALIDATE_PATH, vec![b' '; DEFAULT_MAX_BODY_BYTES]);
    whole.extensions_mut().insert(captf_webhook::routes::Trusted);
    let (status, _) = rejected(whole).await;
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

// ---- bounded answers ----

#[tokio::test]
async fn update_without_old_object_is_refused_with_400() {
    for oldobject in [None, Some(Value::Null)] {
        let mut req = fixture("cluster-update-accepted");
        let r = req["request"].as_object_mut().unwrap();
        match &oldobject {
            None => {
                r.remove("oldObject");
            }
            Some(v) => {
                r.insert("oldObject".into(), v.clone());
            }
        }
        for path in [VALIDATE_PATH, MUTATE_PATH] {
            let (status, text) = rejected(post(path, serde_json::to_vec(&req).unwrap())).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {oldobject:?}");
            assert!(text.contains("UPDATE has no oldObject"), "{text}");
        }
    }
}

fn with_bad_variable_names(n: usize) -> Value {
    let mut req = fixture("cluster-create-accepted");
    let vars: serde_json::Map<String, Value> = (0..n).map(|i| (format!("-{i:06}"), json!(0))).collect();
    req["request"]["object"]["spec"]["variables"] = Value::Object(vars);
    req
}

#[tokio::test]
async fn denial_lists_at_most_n_violations_and_counts_the_rest() {
    use captf_webhook::admission::MAX_LISTED_VIOLATIONS;
    let resp = review(VALIDATE_PATH, &with_bad_variable_names(30_000)).await;
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert_eq!(msg.matches("name must match").count(), MAX_LISTED_VIOLATIONS, "{msg}");
    assert!(msg.starts_with("spec.variables[-000000]: "), "{msg}");
    assert!(
        msg.ends_with(&format!("; and {} more", 30_000 - MAX_LISTED_VIOLATIONS)),
        "{msg}"
    );
}

#[tokio::test]
async fn a_denial_is_a_few_kilobytes_whatever_the_violations() {
    use captf_webhook::admission::MAX_MESSAGE_BYTES;
    let mut req = fixture("cluster-create-accepted");
    let vars: serde_json::Map<String, Value> = (0..20)
        .map(|i| (format!("-{i}{}", "\u{7}x".repeat(10_000)), json!(0)))
        .collect();
    req["request"]["object"]["spec"]["variables"] = Value::Object(vars);
    let (status, body, _) = send(&state(), post(VALIDATE_PATH, serde_json::to_vec(&req).unwrap())).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.len() < MAX_MESSAGE_BYTES + 1024, "{} bytes", body.len());
    let resp: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(resp["response"]["allowed"], false);
}

#[tokio::test]
async fn warnings_are_cut_and_an_unknown_kind_is_not_echoed_verbatim() {
    use captf_webhook::admission::MAX_WARNING_BYTES;
    let mut req = fixture("cluster-create-accepted");
    let kind = format!("Evil\nKind\u{1b}[31m{}", "K".repeat(5_000));
    req["request"]["kind"] = json!({"group": "x\ny", "version": "v1", "kind": kind});
    let resp = review(VALIDATE_PATH, &req).await;
    let warnings = resp["response"]["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1);
    let w = warnings[0].as_str().unwrap();
    assert!(w.len() <= MAX_WARNING_BYTES, "{} bytes", w.len());
    assert!(!w.chars().any(char::is_control), "{w:?}");
    assert!(!w.contains(&kind), "{w}");
    assert!(w.contains(r#""Evil\nKind\u001b[31mKKK"#), "quoted and escaped: {w}");
}

#[tokio::test]
async fn at_most_ten_warnings_are_returned_and_the_last_counts_the_rest() {
    use captf_webhook::admission::bounded_warnings;
    let many: Vec<String> = (0..25).map(|i| format!("w{i}\r\n")).collect();
    let out = bounded_warnings(many, 3);
    assert_eq!(out.len(), 10);
    assert_eq!(out[0], "w0  ");
    assert_eq!(out[9], "and 19 more warnings");
}

#[tokio::test]
async fn a_spec_larger_than_the_inputs_secret_is_denied_and_not_defaulted() {
    use captf_webhook::admission::MAX_SPEC_BYTES;
    let mut req = fixture("cluster-create-accepted");
    req["request"]["object"]["spec"]["variables"] = json!({"x": vec![0; MAX_SPEC_BYTES / 2 + 1]});
    req["request"]["object"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("paused");
    let resp = review(VALIDATE_PATH, &req).await;
    assert_eq!(resp["response"]["allowed"], false);
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with(&format!("spec: must be at most {MAX_SPEC_BYTES} bytes")),
        "{msg}"
    );
    let mutated = review(MUTATE_PATH, &req).await;
    assert_eq!(mutated["response"]["allowed"], true);
    assert!(mutated["response"].get("patch").is_none());
}

#[tokio::test]
async fn a_large_spec_within_the_limit_is_defaulted_like_a_small_one() {
    let mut small = fixture("cluster-create-accepted");
    let spec = small["request"]["object"]["spec"].as_object_mut().unwrap();
    spec.remove("paused");
    spec.remove("jobs");
    let mut large = small.clone();
    large["request"]["object"]["spec"]["variables"] = json!({"x": vec![0; 90_000], "y": {"z": [1, 2]}});
    let a = review(MUTATE_PATH, &small).await;
    let b = review(MUTATE_PATH, &large).await;
    assert!(a["response"]["patch"].is_string(), "{a}");
    assert_eq!(a["response"]["patch"], b["response"]["patch"]);
}

#[tokio::test]
async fn a_large_body_the_fast_path_refuses_is_400_without_a_second_parse() {
    use captf_webhook::admission::MAX_SLOW_PATH_BYTES;
    let mut req = fixture("cluster-create-accepted");
    // kube's types take an object that is a list; the fast path does not.
    req["request"]["object"] = json!(vec![""; MAX_SLOW_PATH_BYTES / 2]);
    let (status, text) = rejected(post(VALIDATE_PATH, serde_json::to_vec(&req).unwrap())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(text.contains("does not parse as an AdmissionReview"), "{text}");
}

#[tokio::test]
async fn a_spec_that_does_not_parse_is_reported_by_field_without_its_status() {
    let mut req = fixture("cluster-create-accepted");
    req["request"]["object"]["spec"]["jobs"] = json!({"activeDeadlineSeconds": "1h"});
    req["request"]["object"]["status"] = json!({"junk": vec![0; 500_000]});
    let resp = review(VALIDATE_PATH, &req).await;
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.starts_with("spec.jobs.activeDeadlineSeconds: "), "{msg}");
}

// ---- body limit, in-flight budget, large reviews ----

/// The defaults as a server that cannot tell the API server apart runs them (no reserve).
fn limits() -> captf_webhook::routes::Limits {
    captf_webhook::routes::Limits::default().without_reserve()
}

#[tokio::test]
async fn an_update_of_an_object_near_etcds_limit_fits_the_body_limit() {
    let mut req = fixture("cluster-update-accepted");
    let padding = "x".repeat(1_500_000);
    req["request"]["object"]["metadata"]["annotations"] = json!({"big": padding});
    req["request"]["oldObject"]["metadata"]["annotations"] = json!({"big": padding});
    let body = serde_json::to_vec(&req).unwrap();
    assert!(body.len() > 3_000_000);
    let (status, body, _) = send(&state(), post(VALIDATE_PATH, body)).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
}

/// Yield to the request's task until `cond` holds, or fail after 5 s (wall time) naming `what`.
async fn until(what: &str, cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "not within 5 s: {what}");
        tokio::task::yield_now().await;
    }
}

fn pending_body() -> (http_body_util::channel::Sender<axum::body::Bytes>, Body) {
    let (tx, body) = http_body_util::channel::Channel::<axum::body::Bytes, std::convert::Infallible>::new(1);
    (tx, Body::new(body))
}

#[tokio::test]
async fn requests_past_the_in_flight_bound_get_429_with_a_reason() {
    let st = state().with_limits(captf_webhook::routes::Limits {
        max_in_flight_requests: 1,
        ..limits()
    });
    let (tx, body) = pending_body();
    let held = tokio::spawn({
        let st = st.clone();
        async move { send(&st, post(VALIDATE_PATH, body)).await }
    });
    until("the held request counted in flight", || st.budget.in_flight().0 > 0).await;
    let (status, body, headers) = send(&st, post(VALIDATE_PATH, b"{}".to_vec())).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers[header::RETRY_AFTER], "1");
    let text = String::from_utf8(body).unwrap();
    assert!(
        text.contains("too many review requests in flight (at most 1)"),
        "{text}"
    );
    drop(tx);
    assert_eq!(held.await.unwrap().0, StatusCode::BAD_REQUEST);
    assert_eq!(st.budget.in_flight(), (0, 0), "everything is given back");
    assert_eq!(
        send(&st, post(VALIDATE_PATH, b"{}".to_vec())).await.0,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn bodies_past_the_in_flight_byte_bound_get_429_with_a_reason() {
    let st = state().with_limits(captf_webhook::routes::Limits {
        max_in_flight_bytes: 1000,
        ..limits()
    });
    let (status, text) = post(VALIDATE_PATH, vec![b' '; 1001]).await_with(&st).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(text.contains("would exceed 1000 bytes"), "{text}");
    // Streamed without a length: counted chunk by chunk.
    let (mut tx, body) = pending_body();
    let feeder = tokio::spawn(async move {
        for _ in 0..3 {
            if tx.send_data(axum::body::Bytes::from(vec![b' '; 400])).await.is_err() {
                break;
            }
        }
    });
    let (status, _, _) = send(&st, post(VALIDATE_PATH, body)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    feeder.await.unwrap();
    assert_eq!(st.budget.in_flight(), (0, 0));
}

fn post_declaring(path: &str, declared: usize, body: Body) -> Request<Body> {
    let mut req = post(path, body);
    req.headers_mut()
        .insert(header::CONTENT_LENGTH, declared.to_string().parse().unwrap());
    req
}

#[tokio::test]
async fn a_declared_length_holds_no_budget_until_its_bytes_arrive() {
    let st = state();
    let (mut tx, body) = pending_body();
    let held = tokio::spawn({
        let st = st.clone();
        async move { send(&st, post_declaring(VALIDATE_PATH, 7 * 1024 * 1024, body)).await }
    });
    tx.send_data(axum::body::Bytes::from_static(b"{\"kind\""))
        .await
        .unwrap();
    // The channel holds one frame: once a second is taken, the first has been read and counted.
    tx.send_data(axum::body::Bytes::from_static(b":")).await.unwrap();
    until("the first 7 body bytes counted in flight", || {
        st.budget.in_flight().1 >= 7
    })
    .await;
    let (requests, bytes) = st.budget.in_flight();
    assert_eq!(requests, 1);
    assert!(
        bytes <= 8,
        "a 7 MiB declaration holds only what arrived, not {bytes} bytes"
    );
    // Meanwhile the rest of the budget still fits other bodies, each address up to its share.
    use captf_webhook::budget::Who;
    let share = st.limits.max_peer_in_flight_bytes;
    let mut a = st.budget.admit(Who::Peer(Some([10, 0, 0, 1].into()))).unwrap();
    let mut b = st.budget.admit(Who::Peer(Some([10, 0, 0, 2].into()))).unwrap();
    a.reserve(share).unwrap();
    b.reserve(share).unwrap();
    drop((a, b));
    drop(tx);
    assert_eq!(held.await.unwrap().0, StatusCode::BAD_REQUEST);
    assert_eq!(st.budget.in_flight(), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_body_slower_than_the_minimum_rate_gets_408_once_its_grace_has_passed() {
    let st = state().with_limits(captf_webhook::routes::Limits {
        min_body_rate: captf_webhook::rate::MinRate {
            bytes_per_sec: 100,
            grace: std::time::Duration::from_secs(1),
        },
        ..limits()
    });
    let (mut tx, body) = pending_body();
    let started = tokio::time::Instant::now();
    let feeder = tokio::spawn(async move {
        // Ten bytes a second, a tenth of the rate.
        loop {
            if tx.send_data(axum::body::Bytes::from_static(b" ")).await.is_err() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });
    let (status, body, headers) = send(&st, post_declaring(VALIDATE_PATH, 7 * 1024 * 1024, body)).await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    assert_eq!(headers[header::CONNECTION], "close");
    let text = String::from_utf8(body).unwrap();
    assert!(text.contains("slower than 100 bytes/s"), "{text}");
    // Cut off after the grace and the bytes' worth of time, well before the 10 s body timeout.
    assert!(
        took > std::time::Duration::from_secs(1) && took < std::time::Duration::from_secs(2),
        "{took:?}"
    );
    feeder.abort();
    assert_eq!(st.budget.in_flight(), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_body_at_the_minimum_rate_is_read_whole() {
    let st = state().with_limits(captf_webhook::routes::Limits {
        min_body_rate: captf_webhook::rate::MinRate {
            bytes_per_sec: 1000,
            grace: std::time::Duration::from_millis(500),
        },
        ..limits()
    });
    let review = serde_json::to_vec(&fixture("cluster-create-accepted")).unwrap();
    let (mut tx, body) = pending_body();
    let len = review.len();
    let feeder = tokio::spawn(async move {
        // 200 bytes every 100 ms: twice the rate, over more than the grace.
        for chunk in review.chunks(200) {
            tx.send_data(axum::body::Bytes::copy_from_slice(chunk)).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });
    let (status, body, _) = send(&st, post_declaring(VALIDATE_PATH, len, body)).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    assert!(len > 1000, "the body spans more than the grace");
    feeder.await.unwrap();
}

#[tokio::test]
async fn one_address_past_its_share_gets_429_while_another_is_answered() {
    use captf_webhook::routes::Peer;
    let st = state().with_limits(captf_webhook::routes::Limits {
        max_peer_in_flight_requests: 1,
        ..limits()
    });
    let attacker = Peer([10, 0, 0, 66].into());
    let api_server = Peer([10, 0, 0, 1].into());
    let (tx, body) = pending_body();
    let mut req = post(VALIDATE_PATH, body);
    req.extensions_mut().insert(attacker);
    let held = tokio::spawn({
        let st = st.clone();
        async move { send(&st, req).await }
    });
    until("the held request counted in flight", || st.budget.in_flight().0 > 0).await;
    let valid = serde_json::to_vec(&fixture("cluster-create-accepted")).unwrap();
    let mut again = post(VALIDATE_PATH, valid.clone());
    again.extensions_mut().insert(attacker);
    let (status, text) = again.await_with(&st).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(text.contains("from this address (at most 1)"), "{text}");
    let mut other = post(VALIDATE_PATH, valid);
    other.extensions_mut().insert(api_server);
    assert_eq!(other.await_with(&st).await.0, StatusCode::OK);
    drop(tx);
    held.await.unwrap();
    assert_eq!(st.budget.in_flight(), (0, 0));
}

trait AwaitWith {
    async fn await_with(self, st: &captf_webhook::AppState) -> (StatusCode, String);
}

impl AwaitWith for Request<Body> {
    async fn await_with(self, st: &captf_webhook::AppState) -> (StatusCode, String) {
        let (status, body, _) = send(st, self).await;
        (status, String::from_utf8(body).unwrap())
    }
}

#[tokio::test]
async fn a_large_review_is_answered_off_the_async_workers_exactly_as_inline() {
    let inline = state();
    let pooled = state().with_limits(captf_webhook::routes::Limits {
        inline_body_bytes: 0,
        ..limits()
    });
    for name in fixture_names() {
        let body = serde_json::to_vec(&fixture(&name)).unwrap();
        for path in [VALIDATE_PATH, MUTATE_PATH] {
            let a = send(&inline, post(path, body.clone())).await;
            let b = send(&pooled, post(path, body.clone())).await;
            assert_eq!((a.0, a.1), (b.0, b.1), "{name} {path}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_large_review_with_no_free_slot_in_time_gets_503_with_a_reason() {
    let st = state().with_limits(captf_webhook::routes::Limits {
        inline_body_bytes: 0,
        large_reviews: 1,
        large_review_wait: std::time::Duration::from_secs(5),
        ..limits()
    });
    let slot = st.large_slots.clone().acquire_owned().await.unwrap();
    let body = serde_json::to_vec(&fixture("cluster-create-accepted")).unwrap();
    let (status, text) = post(VALIDATE_PATH, body.clone()).await_with(&st).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(text.contains("no slot for a large review within 5s"), "{text}");
    drop(slot);
    assert_eq!(post(VALIDATE_PATH, body).await_with(&st).await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_spec_with_too_many_values_is_denied_before_it_is_built() {
    use captf_webhook::admission::MAX_SPEC_VALUES;
    let mut req = fixture("cluster-create-accepted");
    req["request"]["object"]["spec"]["variables"] = json!({"x": vec![0; MAX_SPEC_VALUES]});
    let resp = review(VALIDATE_PATH, &req).await;
    assert_eq!(resp["response"]["allowed"], false);
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with(&format!("spec: must hold at most {MAX_SPEC_VALUES} JSON values")),
        "{msg}"
    );
    // Just under the limit it is built and validated as usual.
    req["request"]["object"]["spec"]["variables"] = json!({"x": vec![0; MAX_SPEC_VALUES - 1000]});
    let resp = review(VALIDATE_PATH, &req).await;
    assert_eq!(resp["response"]["allowed"], true, "{}", resp["response"]["status"]);
}

#[tokio::test]
async fn object_keys_count_towards_the_spec_value_limit() {
    use captf_webhook::admission::MAX_SPEC_VALUES;
    let mut req = fixture("cluster-create-accepted");
    let vars: serde_json::Map<String, Value> = (0..MAX_SPEC_VALUES / 2).map(|i| (format!("v{i}"), json!(0))).collect();
    req["request"]["object"]["spec"]["variables"] = Value::Object(vars);
    let resp = review(VALIDATE_PATH, &req).await;
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.starts_with("spec: must hold at most"), "{msg}");
}

/// `/convert`: the CRDs' conversion webhook answers a ConversionReview with every object at the
/// desired version, and refuses what is not one as the admission routes do (415, 413, 400).
#[tokio::test]
async fn convert_answers_a_conversion_review_and_refuses_bad_bodies_with_their_status() {
    let object = json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformMachine",
        "metadata": {"name": "m-1", "namespace": "default"},
        "spec": {"module": {"source": "git::https://example.com/m.git"}},
        "status": {"ready": true, "initialization": {"provisioned": true}},
    });
    let request = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "c-1", "desiredAPIVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "objects": [object]},
    });
    let state = state();
    let (status, body, _) = send(&state, post(CONVERT_PATH, serde_json::to_vec(&request).unwrap())).await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["response"]["uid"], "c-1");
    assert_eq!(answer["response"]["result"]["status"], "Success");
    assert_eq!(
        answer["response"]["convertedObjects"][0]["apiVersion"],
        "infrastructure.cluster.x-k8s.io/v1beta1"
    );
    let labels = RequestLabels {
        route: Route::Convert,
        kind: KindLabel::TerraformMachine,
        operation: OperationLabel::None,
        result: ResultLabel::Allowed,
    };
    assert_eq!(state.metrics.requests(&labels), 1);

    let mut wrong_type = post(CONVERT_PATH, serde_json::to_vec(&request).unwrap());
    wrong_type
        .headers_mut()
        .insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
    assert_eq!(rejected(wrong_type).await.0, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let (status, text) = rejected(post(CONVERT_PATH, vec![b' '; DEFAULT_MAX_BODY_BYTES + 1])).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{text}");
    let (status, text) = rejected(post(
        CONVERT_PATH,
        r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#,
    ))
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(
        text.contains("not an apiextensions.k8s.io/v1 ConversionReview"),
        "{text}"
    );
    let get = Request::builder()
        .method(Method::GET)
        .uri(CONVERT_PATH)
        .body(Body::empty())
        .unwrap();
    assert_eq!(rejected(get).await.0, StatusCode::METHOD_NOT_ALLOWED);
}

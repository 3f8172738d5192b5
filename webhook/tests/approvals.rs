//! Approvals through the router with a fake authorizer: an approval, or a guard set to `Allow`,
//! is admitted only when the authorizer says the user may `approve`; refused, with a message
//! that names the verb, the resource and what to grant, when it says no or cannot be asked.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use captf_webhook::approval::{Approvals, ApproveCheck, AuthorizeError, AuthorizeFuture, Authorizer, Reason, Verdict};
use captf_webhook::metrics::Metrics;
use captf_webhook::{AppState, MUTATE_PATH, VALIDATE_PATH, router};
use common::fixture;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

/// Answers as told and records every question.
#[derive(Debug)]
struct Fake {
    answer: Result<bool, ()>,
    asked: Mutex<Vec<ApproveCheck>>,
}

impl Authorizer for Fake {
    fn authorize<'a>(&'a self, check: &'a ApproveCheck) -> AuthorizeFuture<'a> {
        self.asked.lock().unwrap().push(check.clone());
        let answer = match self.answer {
            Ok(allowed) => Ok(Verdict {
                allowed,
                reason: (!allowed).then(|| "no RBAC rule allowed it".to_string()),
            }),
            Err(()) => Err(AuthorizeError::Api("connection refused".into())),
        };
        Box::pin(async move { answer })
    }
}

fn fake(answer: Result<bool, ()>) -> Arc<Fake> {
    Arc::new(Fake {
        answer,
        asked: Mutex::new(Vec::new()),
    })
}

fn state(authorizer: Option<Arc<Fake>>) -> AppState {
    AppState::new(Arc::new(Metrics::new())).with_approvals(Approvals {
        authorizer: authorizer.map(|a| a as Arc<dyn Authorizer>),
        approver_role: "captf-approver".into(),
    })
}

async fn send(state: &AppState, path: &str, review: &Value) -> Value {
    let req = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(review).unwrap()))
        .unwrap();
    let resp = router(state.clone()).oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap()
}

/// The cluster update fixture by an editor, the new object annotated with `annotations`.
fn update(old_annotations: Value, annotations: Value) -> Value {
    let mut review = fixture("cluster-update-accepted");
    review["request"]["userInfo"] = json!({
        "username": "eve", "uid": "u-eve", "groups": ["team-a-editors", "system:authenticated"],
        "extra": {"authentication.kubernetes.io/credential-id": ["X509SHA256=ab"]}
    });
    review["request"]["oldObject"]["metadata"]["annotations"] = old_annotations;
    review["request"]["object"]["metadata"]["annotations"] = annotations;
    review
}

fn approving(hash: &str) -> Value {
    json!({"captf.io/approve-plan": hash})
}

fn message(resp: &Value) -> String {
    resp["response"]["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn an_editor_who_may_patch_cannot_approve_without_the_approve_verb() {
    let no = fake(Ok(false));
    let st = state(Some(no.clone()));
    let resp = send(&st, VALIDATE_PATH, &update(json!({}), approving("h1"))).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    assert_eq!(resp["response"]["status"]["code"], 403);
    assert_eq!(resp["response"]["status"]["reason"], "Forbidden");
    let m = message(&resp);
    for part in [
        "\"eve\"",
        "may not approve plan \"h1\"",
        "\"approve\" verb",
        "terraformclusters.infrastructure.cluster.x-k8s.io \"prod-eu\" in namespace \"default\"",
        "ClusterRole \"captf-approver\"",
        "no RBAC rule allowed it",
    ] {
        assert!(m.contains(part), "{part:?} not in {m}");
    }
    // The question named the user as the API server sent it, and the object.
    let asked = no.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].user.username.as_deref(), Some("eve"));
    assert_eq!(asked[0].user.uid.as_deref(), Some("u-eve"));
    assert_eq!(asked[0].user.groups.as_ref().unwrap()[0], "team-a-editors");
    assert!(
        asked[0]
            .user
            .extra
            .as_ref()
            .unwrap()
            .contains_key("authentication.kubernetes.io/credential-id")
    );
    assert_eq!(asked[0].target.resource, "terraformclusters");
    assert_eq!(
        (asked[0].target.namespace.as_str(), asked[0].target.name.as_str()),
        ("default", "prod-eu")
    );
    assert_eq!(asked[0].reasons, [Reason::Approval { plan: "h1".into() }]);

    // An approver is let through, and the mutating webhook still stamps who approved.
    let yes = state(Some(fake(Ok(true))));
    let resp = send(&yes, VALIDATE_PATH, &update(json!({}), approving("h1"))).await;
    assert_eq!(resp["response"]["allowed"], true, "{resp}");
    let mutated = send(&yes, MUTATE_PATH, &update(json!({}), approving("h1"))).await;
    assert!(mutated["response"]["patch"].is_string(), "{mutated}");

    // Replacing an approval with another hash is a new approval.
    let resp = send(&st, VALIDATE_PATH, &update(approving("h1"), approving("h2"))).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
}

#[tokio::test]
async fn setting_the_guard_to_allow_needs_the_approve_verb() {
    let no = fake(Ok(false));
    let st = state(Some(no.clone()));
    let mut review = update(json!({}), json!({}));
    review["request"]["object"]["spec"]["guard"]["destructive"] = json!("Allow");
    let resp = send(&st, VALIDATE_PATH, &review).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    assert!(
        message(&resp)
            .contains("may not set spec.guard to let every plan through (approval Never, or destructive Allow)"),
        "{resp}"
    );
    assert_eq!(no.asked.lock().unwrap()[0].reasons, [Reason::GuardAllow]);

    // On a template, the guard its machines get.
    let mut template = fixture("machinetemplate-create-accepted");
    template["request"]["object"]["spec"]["template"]["spec"]["guard"] = json!({"destructive": "Allow"});
    let resp = send(&st, VALIDATE_PATH, &template).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    assert!(message(&resp).contains("terraformmachinetemplates."), "{resp}");

    // Leaving Allow as it was, or going back to Block, asks nothing.
    let asked = no.asked.lock().unwrap().len();
    let mut kept = update(json!({}), json!({"x": "y"}));
    kept["request"]["oldObject"]["spec"]["guard"]["destructive"] = json!("Allow");
    kept["request"]["object"]["spec"]["guard"]["destructive"] = json!("Allow");
    assert_eq!(send(&st, VALIDATE_PATH, &kept).await["response"]["allowed"], true);
    let mut back = kept.clone();
    back["request"]["object"]["spec"]["guard"]["destructive"] = json!("Block");
    assert_eq!(send(&st, VALIDATE_PATH, &back).await["response"]["allowed"], true);
    assert_eq!(no.asked.lock().unwrap().len(), asked);
}

#[tokio::test]
async fn removing_an_approval_needs_no_check() {
    let no = fake(Ok(false));
    let st = state(Some(no.clone()));
    // Setting one is asked about (and refused); taking it away again is not.
    let resp = send(&st, VALIDATE_PATH, &update(json!({}), approving("h1"))).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    assert_eq!(no.asked.lock().unwrap().len(), 1);
    for (old, new) in [
        (approving("h1"), json!({})),
        (approving("h1"), approving("h1")),
        (json!({}), json!({"team": "a"})),
    ] {
        let resp = send(&st, VALIDATE_PATH, &update(old, new)).await;
        assert_eq!(resp["response"]["allowed"], true, "{resp}");
    }
    assert_eq!(no.asked.lock().unwrap().len(), 1);
    // The mutating webhook never asks: the validating one sees the final object.
    send(&st, MUTATE_PATH, &update(json!({}), approving("h1"))).await;
    assert_eq!(no.asked.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn an_approval_that_cannot_be_checked_is_refused() {
    let st = state(Some(fake(Err(()))));
    let resp = send(&st, VALIDATE_PATH, &update(json!({}), approving("h1"))).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    let m = message(&resp);
    assert!(
        m.contains("cannot check whether user \"eve\" may approve plan \"h1\""),
        "{m}"
    );
    assert!(
        m.contains("connection refused") && m.contains("subjectaccessreviews"),
        "{m}"
    );
}

#[tokio::test]
async fn with_the_check_off_an_approval_is_admitted_as_before() {
    let resp = send(&state(None), VALIDATE_PATH, &update(json!({}), approving("h1"))).await;
    assert_eq!(resp["response"]["allowed"], true, "{resp}");
}

#[tokio::test]
async fn an_invalid_request_is_denied_by_validation_without_asking() {
    // An invalid request is denied by validation; the authorizer is not asked.
    let no = fake(Ok(true));
    let st = state(Some(no.clone()));
    let mut review = fixture("cluster-update-rejected");
    review["request"]["object"]["metadata"]["annotations"] = approving("h1");
    let resp = send(&st, VALIDATE_PATH, &review).await;
    assert_eq!(resp["response"]["allowed"], false);
    assert!(no.asked.lock().unwrap().is_empty());
}

//! Authorization over HTTP: ServiceAccount tokens, RBAC decisions and 403 answers, through
//! kube-rs as a controller or runner would see them.
#![allow(clippy::unwrap_used)]

use captf_sim::Sim;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchParams};
use serde_json::json;

const RBAC: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: runner, namespace: tenant-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: runner, namespace: tenant-a}
rules:
  - apiGroups: [""]
    resources: ["secrets"]
    resourceNames: ["mine"]
    verbs: ["get", "list", "watch", "update", "delete"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: runner, namespace: tenant-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: runner}
subjects:
  - {kind: ServiceAccount, name: runner, namespace: tenant-a}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: skipped, namespace: tenant-a}
"#;

fn secret(name: &str) -> Secret {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "tenant-a"}, "stringData": {"k": "v"}}))
        .unwrap()
}

async fn sim() -> Sim {
    let sim = Sim::start().await.unwrap();
    assert_eq!(sim.load_rbac(RBAC).unwrap(), 3, "the Deployment is skipped");
    sim.create_namespace("tenant-b");
    for (ns, name) in [("tenant-a", "mine"), ("tenant-a", "theirs"), ("tenant-b", "mine")] {
        let mut s = serde_json::to_value(secret(name)).unwrap();
        s["metadata"]["namespace"] = json!(ns);
        sim.put(s).unwrap();
    }
    sim
}

fn status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test]
async fn a_service_account_gets_only_what_its_role_grants() {
    let sim = sim().await;
    let secrets: Api<Secret> = Api::namespaced(sim.client_as("tenant-a", "runner").unwrap(), "tenant-a");
    assert!(secrets.get("mine").await.is_ok());
    let e = status(secrets.get("theirs").await.unwrap_err());
    assert_eq!(e.code, 403);
    assert_eq!(e.reason, "Forbidden");
    assert_eq!(
        e.message,
        "secrets \"theirs\" is forbidden: User \"system:serviceaccount:tenant-a:runner\" cannot get resource \"secrets\" in API group \"\" in the namespace \"tenant-a\""
    );
    let other_ns: Api<Secret> = Api::namespaced(sim.client_as("tenant-a", "runner").unwrap(), "tenant-b");
    assert_eq!(status(other_ns.get("mine").await.unwrap_err()).code, 403);
    assert_eq!(sim.denied().len(), 2, "every denial is kept: {:?}", sim.denied());
    assert_eq!(sim.denied()[0], e.message);
    assert_eq!(
        sim.used_rights("tenant-a", "runner"),
        ["get /secrets".to_string()].into(),
        "what was allowed is recorded"
    );
}

#[tokio::test]
async fn resource_names_cannot_restrict_create_over_http() {
    let sim = sim().await;
    let secrets: Api<Secret> = Api::namespaced(sim.client_as("tenant-a", "runner").unwrap(), "tenant-a");
    let e = status(
        secrets
            .create(&PostParams::default(), &secret("mine"))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403);
    assert!(
        e.message.contains("cannot create resource \"secrets\""),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn resource_names_allow_a_list_or_watch_only_with_a_name_field_selector() {
    let sim = sim().await;
    let secrets: Api<Secret> = Api::namespaced(sim.client_as("tenant-a", "runner").unwrap(), "tenant-a");
    let e = status(secrets.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(e.code, 403);
    assert_eq!(
        e.message,
        "secrets is forbidden: User \"system:serviceaccount:tenant-a:runner\" cannot list resource \"secrets\" in API group \"\" in the namespace \"tenant-a\""
    );
    let mine = secrets
        .list(&ListParams::default().fields("metadata.name=mine"))
        .await
        .unwrap();
    assert_eq!(mine.items.len(), 1);
    assert_eq!(
        status(
            secrets
                .list(&ListParams::default().fields("metadata.name=theirs"))
                .await
                .unwrap_err()
        )
        .code,
        403
    );
    assert!(secrets.watch(&WatchParams::default(), "0").await.is_err());
    let mut w = secrets
        .watch(&WatchParams::default().fields("metadata.name=mine"), "0")
        .await
        .unwrap()
        .boxed();
    assert!(w.next().await.is_some(), "the named watch streams the object");
}

#[tokio::test]
async fn delete_does_not_grant_deletecollection_over_http() {
    let sim = sim().await;
    let secrets: Api<Secret> = Api::namespaced(sim.client_as("tenant-a", "runner").unwrap(), "tenant-a");
    let e = status(
        secrets
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403);
    assert!(e.message.contains("cannot deletecollection"), "{}", e.message);
    secrets.delete("mine", &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn create_without_resource_names_is_allowed_and_other_verbs_are_not() {
    let sim = sim().await;
    let leases: Api<Lease> = Api::namespaced(sim.client_as("tenant-a", "runner").unwrap(), "tenant-a");
    let l: Lease = serde_json::from_value(json!({"metadata": {"name": "l"}})).unwrap();
    leases.create(&PostParams::default(), &l).await.unwrap();
    let e = status(leases.get("l").await.unwrap_err());
    assert_eq!(
        e.message,
        "leases.coordination.k8s.io \"l\" is forbidden: User \"system:serviceaccount:tenant-a:runner\" cannot get resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"tenant-a\""
    );
}

#[tokio::test]
async fn the_admin_client_is_allowed_everything() {
    let sim = sim().await;
    let secrets: Api<Secret> = Api::all(sim.client().unwrap());
    assert_eq!(secrets.list(&ListParams::default()).await.unwrap().items.len(), 3);
}

#[tokio::test]
async fn an_unknown_token_is_unauthorized() {
    let sim = sim().await;
    let mut c = sim.config();
    c.auth_info.token = Some("guessed".to_string().into());
    let secrets: Api<Secret> = Api::namespaced(kube::Client::try_from(c).unwrap(), "tenant-a");
    assert_eq!(status(secrets.get("mine").await.unwrap_err()).code, 401);
}

#[tokio::test]
async fn discovery_is_open_to_every_service_account() {
    let sim = sim().await;
    let c = sim.client_as("tenant-a", "runner").unwrap();
    assert_eq!(c.apiserver_version().await.unwrap().major, "1");
    assert!(c.list_api_groups().await.is_ok());
}

#[tokio::test]
async fn the_token_subresource_hands_out_a_token_of_an_existing_service_account() {
    let sim = sim().await;
    let admin = sim.client().unwrap();
    let req = http::Request::post("/api/v1/namespaces/tenant-a/serviceaccounts/runner/token")
        .header("content-type", "application/json")
        .body(br#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}"#.to_vec())
        .unwrap();
    let tr: serde_json::Value = admin.request(req).await.unwrap();
    let token = tr["status"]["token"].as_str().unwrap().to_string();
    let mut c = sim.config();
    c.auth_info.token = Some(token.into());
    let secrets: Api<Secret> = Api::namespaced(kube::Client::try_from(c).unwrap(), "tenant-a");
    assert!(secrets.get("mine").await.is_ok());

    let missing = http::Request::post("/api/v1/namespaces/tenant-a/serviceaccounts/nobody/token")
        .header("content-type", "application/json")
        .body(b"{}".to_vec())
        .unwrap();
    let e = admin.request::<serde_json::Value>(missing).await.unwrap_err();
    assert_eq!(status(e).code, 404);
}

#[tokio::test]
async fn a_service_account_cannot_mint_tokens_without_a_grant() {
    let sim = sim().await;
    let runner = sim.client_as("tenant-a", "runner").unwrap();
    let req = http::Request::post("/api/v1/namespaces/tenant-a/serviceaccounts/runner/token")
        .header("content-type", "application/json")
        .body(b"{}".to_vec())
        .unwrap();
    let e = status(runner.request::<serde_json::Value>(req).await.unwrap_err());
    assert_eq!(e.code, 403);
    assert!(
        e.message.contains("cannot create resource \"serviceaccounts/token\""),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn events_are_authorized_in_the_group_they_were_asked_in() {
    let sim = sim().await;
    sim.load_rbac(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: events}
rules:
  - {apiGroups: ["events.k8s.io"], resources: ["events"], verbs: ["create"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: events}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: events}
subjects: [{kind: ServiceAccount, name: runner, namespace: tenant-a}]
"#,
    )
    .unwrap();
    let c = sim.client_as("tenant-a", "runner").unwrap();
    let v1: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(c.clone(), "tenant-a");
    let ev: k8s_openapi::api::events::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": "e1"}, "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "x", "reportingInstance": "x", "action": "A", "reason": "R", "type": "Normal",
        "regarding": {"kind": "Secret", "name": "mine", "namespace": "tenant-a"},
    }))
    .unwrap();
    v1.create(&PostParams::default(), &ev).await.unwrap();
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(c, "tenant-a");
    assert_eq!(status(core.list(&ListParams::default()).await.unwrap_err()).code, 403);
}

/// The policy is compiled once per change of the RBAC objects: a binding made or deleted
/// through the API grants or takes away at the very next request.
#[tokio::test]
async fn a_grant_or_a_revocation_counts_from_the_next_request() {
    use k8s_openapi::api::rbac::v1::RoleBinding;
    let sim = sim().await;
    let theirs: Api<Secret> = Api::namespaced(sim.client_as("tenant-a", "runner").unwrap(), "tenant-b");
    assert_eq!(status(theirs.get("mine").await.unwrap_err()).code, 403);
    let admin: Api<RoleBinding> = Api::namespaced(sim.client().unwrap(), "tenant-b");
    let grant: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "read", "namespace": "tenant-b"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view-secrets"},
        "subjects": [{"kind": "ServiceAccount", "name": "runner", "namespace": "tenant-a"}],
    }))
    .unwrap();
    sim.put(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "view-secrets"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
    }))
    .unwrap();
    admin.create(&PostParams::default(), &grant).await.unwrap();
    assert!(theirs.get("mine").await.is_ok(), "granted at once");
    admin.delete("read", &DeleteParams::default()).await.unwrap();
    assert_eq!(
        status(theirs.get("mine").await.unwrap_err()).code,
        403,
        "revoked at once"
    );
}

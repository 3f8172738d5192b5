//! The person on call on the real API server: the real webhook, registered as the chart
//! registers it (every CAPTF kind, CREATE and UPDATE, `failurePolicy: Fail`), defaults and refuses
//! specs, and records who approved a plan from the request's user; `kubectl captf approve` run
//! as a ServiceAccount approves exactly the plan that waits. The simulator plays none of this
//! (it calls webhooks, but its users are tokens it names itself). Without the binaries these
//! tests fail under `CI` and skip elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use captf_kubetest::ControlPlane;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "team-a";
const PATIENCE: Duration = Duration::from_secs(60);

fn clusters(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "infrastructure.cluster.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
        kind: "TerraformCluster".into(),
        plural: "terraformclusters".into(),
    };
    Api::namespaced_with(client.clone(), NS, &ar)
}

fn cluster(name: &str, variables: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
        "metadata": {"name": name},
        "spec": {"module": {"source": "git::https://example.com/modules/cluster.git"}, "variables": variables},
    }))
    .unwrap()
}

/// The ServiceAccount `alice` in [`NS`], who may read what `kubectl captf` reads there and patch
/// CAPTF's objects.
async fn alice(cp: &ControlPlane, admin: &kube::Client) -> PathBuf {
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "alice"}})).unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), NS)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "on-call"},
        "rules": [
            {"apiGroups": ["infrastructure.cluster.x-k8s.io"], "resources": ["*"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["pods", "pods/log", "secrets", "configmaps"], "verbs": ["get", "list"]},
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["list"]},
        ],
    }))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), NS)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "on-call"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "on-call"},
        "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": NS}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), NS)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    cp.service_account_kubeconfig(NS, "alice").await.unwrap()
}

fn annotation(o: &DynamicObject, key: &str) -> Option<String> {
    o.metadata.annotations.as_ref()?.get(key).cloned()
}

#[tokio::test]
async fn the_real_webhook_defaults_refuses_and_records_who_approved_and_the_plugin_approves_as_its_user() {
    let Some((cp, admin)) = common::control_plane_with_namespace(NS).await else {
        return;
    };
    common::chart::crds(&admin).await;
    let dir = tempfile::tempdir().unwrap();
    let hook = common::webhook::start_webhook(dir.path());
    common::webhook::register(&admin, &hook).await;
    let api = clusters(&admin);

    // The webhook's configuration takes a moment to reach the API server's admission: until a
    // bad spec is refused, the registration is not in force yet.
    let started = Instant::now();
    // A variable no Terraform module can declare: the CRD's schema allows it (variables are free
    // form), the webhook does not.
    let refusal = loop {
        match api
            .create(&PostParams::default(), &cluster("bad", json!({"9 lives": "x"})))
            .await
        {
            Err(kube::Error::Api(s)) if s.message.contains("admission webhook") => break s,
            Err(e) => panic!("refused, but not by the webhook: {e}"),
            Ok(_) => {
                api.delete("bad", &Default::default()).await.unwrap();
            }
        }
        assert!(started.elapsed() < PATIENCE, "the webhook never refused the bad spec");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(refusal.code, 422, "the webhook's own code: {refusal:?}");
    assert!(
        refusal
            .message
            .contains("admission webhook \"validate.infrastructure.cluster.x-k8s.io\" denied the request"),
        "{}",
        refusal.message
    );
    assert!(refusal.message.contains("spec.variables"), "{}", refusal.message);

    // A minimal spec is accepted and defaulted by the mutating webhook.
    let created = api
        .create(
            &PostParams::default(),
            &cluster("prod-eu", json!({"region": "eu-west-1"})),
        )
        .await
        .unwrap();
    assert!(
        created.data["spec"]["jobs"]["activeDeadlineSeconds"].is_number(),
        "defaulted: {}",
        created.data["spec"]
    );

    // A plan waits (as the controller writes it), and alice approves it with the plugin.
    let pending = json!({"status": {"pendingPlan": {"hash": "h1", "add": 0, "change": 0, "destroy": 1, "replace": 0, "job": "tc-prod-eu-apply-1"}}});
    api.patch_status("prod-eu", &PatchParams::default(), &Patch::Merge(&pending))
        .await
        .unwrap();
    let kubeconfig = alice(&cp, &admin).await;
    let out = std::process::Command::new(common::webhook::binary("kubectl-captf"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["-n", NS, "approve", "tfc/prod-eu", "--hash", "h1"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let alice_name = format!("system:serviceaccount:{NS}:alice");
    assert!(
        stdout.starts_with(&format!(
            "Approved plan h1 on TerraformCluster {NS}/prod-eu as {alice_name}"
        )),
        "the plugin knows its user from the API server: {stdout}"
    );
    let o = api.get("prod-eu").await.unwrap();
    assert_eq!(annotation(&o, "captf.io/approve-plan").as_deref(), Some("h1"));
    assert_eq!(
        annotation(&o, "captf.io/approved-by").as_deref(),
        Some(alice_name.as_str())
    );

    // Somebody else writes another name beside alice's approval: never that name. Writing one is
    // approving as oneself: the webhook records the requesting user (the admin), and alice stays
    // among the plan's approvers.
    let forged = json!({"metadata": {"annotations": {"captf.io/approved-by": "bob"}}});
    let o = api
        .patch("prod-eu", &PatchParams::default(), &Patch::Merge(&forged))
        .await
        .unwrap();
    let by = annotation(&o, "captf.io/approved-by").unwrap_or_default();
    assert!(
        by != "bob" && !by.is_empty() && by != alice_name,
        "the admin's own name: {by}"
    );
    let approvers: Vec<String> =
        serde_json::from_str(&annotation(&o, "captf.io/approvers").unwrap_or_default()).unwrap();
    assert_eq!(approvers, [alice_name.clone(), by]);

    // The admin approves another plan with kubectl's annotate: recorded as the admin, whatever
    // name the request carries.
    let other = json!({"metadata": {"annotations": {"captf.io/approve-plan": "h2", "captf.io/approved-by": "nobody"}}});
    let o = api
        .patch("prod-eu", &PatchParams::default(), &Patch::Merge(&other))
        .await
        .unwrap();
    let by = annotation(&o, "captf.io/approved-by").unwrap_or_default();
    assert!(
        by != "nobody" && !by.is_empty() && by != alice_name,
        "the admin's own name: {by}"
    );
}

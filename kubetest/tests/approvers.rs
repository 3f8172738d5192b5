//! Who may approve, on the real API server: the real webhook with `--authorize-approvals`, under
//! the chart's webhook account (its only right: create subjectaccessreviews), asks kube-apiserver's
//! RBAC authorizer whether the requesting user may `approve` the object. An editor (a namespace
//! Role with patch on CAPTF's kinds) is refused approving a plan and turning the guard off, with
//! the webhook's message, also through `kubectl captf approve`; a user bound to the chart's
//! approver ClusterRole as well approves, and is recorded as the approver. The simulator serves
//! no SubjectAccessReviews, so this runs on the real server only. Without the binaries these
//! tests fail under `CI` and skip elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use captf_chart_tests::{NAMESPACE, helm_template};
use captf_kubetest::ControlPlane;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "team-a";
const PATIENCE: Duration = Duration::from_secs(60);
const WEBHOOK: &str = "captf-webhook";
const APPROVER_ROLE: &str = "captf-approver";

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

/// The chart's webhook account, its SubjectAccessReview rights and the approver ClusterRole, as
/// `helm template` renders them by default, created by the admin.
async fn install_chart_rbac(admin: &kube::Client) {
    common::namespace(admin, NAMESPACE).await;
    let rendered = helm_template(&[]).unwrap();
    let wanted = |d: &&Value| {
        let kind = d["kind"].as_str().unwrap_or_default();
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        matches!(kind, "ServiceAccount" | "ClusterRole" | "ClusterRoleBinding")
            && (name == WEBHOOK || name == APPROVER_ROLE)
    };
    let docs: Vec<&Value> = rendered.docs.iter().filter(wanted).collect();
    let names: Vec<(String, String)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap().to_string(),
                d["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        docs.len(),
        4,
        "the webhook's account, ClusterRole and binding, the approver ClusterRole: {names:?}"
    );
    for doc in docs {
        common::chart::create(admin, doc).await.unwrap();
    }
}

async fn person(cp: &ControlPlane, admin: &kube::Client, name: &str, approver: bool) -> PathBuf {
    common::people::person(cp, admin, NS, name, approver.then_some(APPROVER_ROLE)).await
}

fn annotation(o: &DynamicObject, key: &str) -> Option<String> {
    o.metadata.annotations.as_ref()?.get(key).cloned()
}

fn approve(hash: &str) -> Value {
    json!({"metadata": {"annotations": {"captf.io/approve-plan": hash}}})
}

fn guard(value: &str) -> Value {
    json!({"spec": {"guard": {"destructive": value}}})
}

/// The webhook's refusal of a patch: a 403 whose message names the verb, the resource and the
/// role to grant.
async fn refused(api: &Api<DynamicObject>, patch: &Value, what: &str) -> String {
    match api
        .patch("prod-eu", &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{what}: {s:?}");
            let m = s.message;
            for part in [
                "admission webhook \"validate.infrastructure.cluster.x-k8s.io\" denied the request",
                &format!("user \"system:serviceaccount:{NS}:editor\" may not {what}"),
                "the \"approve\" verb on terraformclusters.infrastructure.cluster.x-k8s.io \"prod-eu\"",
                "ClusterRole \"captf-approver\"",
            ] {
                assert!(m.contains(part), "{part:?} not in {m}");
            }
            m
        }
        Ok(_) => panic!("an editor was let {what}"),
        Err(e) => panic!("refused, but not by the webhook: {e}"),
    }
}

#[tokio::test]
async fn an_editor_is_refused_approving_and_a_user_bound_to_the_approver_role_approves() {
    let Some((cp, admin)) = common::control_plane_with_namespace(NS).await else {
        return;
    };
    common::chart::crds(&admin).await;
    install_chart_rbac(&admin).await;
    let webhook_kubeconfig = cp.service_account_kubeconfig(NAMESPACE, WEBHOOK).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let hook = common::webhook::start_webhook_with(
        dir.path(),
        // The policy allows a guard that lets every plan through: what this test asks is who may
        // set one.
        &[
            "--authorize-approvals=true",
            "--approver-cluster-role",
            APPROVER_ROLE,
            "--allow-approval-never=true",
        ],
        &[("KUBECONFIG", webhook_kubeconfig.as_path())],
    );
    common::webhook::register(&admin, &hook).await;
    let editor_kubeconfig = person(&cp, &admin, "editor", false).await;
    let approver_kubeconfig = person(&cp, &admin, "approver", true).await;
    let editor = clusters(&common::people::client(&editor_kubeconfig).await);
    let approver = clusters(&common::people::client(&approver_kubeconfig).await);
    let api = clusters(&admin);

    // Until the webhook refuses a bad spec, its registration is not in force yet.
    let started = Instant::now();
    loop {
        match api
            .create(&PostParams::default(), &cluster("bad", json!({"9 lives": "x"})))
            .await
        {
            Err(kube::Error::Api(s)) if s.message.contains("admission webhook") => break,
            Err(e) => panic!("refused, but not by the webhook: {e}"),
            Ok(_) => api.delete("bad", &Default::default()).await.map(drop).unwrap(),
        }
        assert!(started.elapsed() < PATIENCE, "the webhook never refused the bad spec");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The editor creates the object and edits it: writing is theirs.
    editor
        .create(
            &PostParams::default(),
            &cluster("prod-eu", json!({"region": "eu-west-1"})),
        )
        .await
        .unwrap();
    editor
        .patch(
            "prod-eu",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"variables": {"region": "eu-west-2"}}})),
        )
        .await
        .unwrap();

    // Approving is not: the API server's authorizer says the editor may not `approve`.
    refused(&editor, &approve("h1"), "approve plan \"h1\"").await;
    refused(&editor, &guard("Allow"), "set spec.guard to let every plan through").await;
    // Nor may an editor create an object that comes approved, or with the guard off.
    let mut preapproved = cluster("other", json!({}));
    preapproved.metadata.annotations = Some([("captf.io/approve-plan".to_string(), "h1".to_string())].into());
    let err = editor.create(&PostParams::default(), &preapproved).await.unwrap_err();
    assert!(err.to_string().contains("may not approve plan"), "{err}");
    let o = api.get("prod-eu").await.unwrap();
    assert_eq!(annotation(&o, "captf.io/approve-plan"), None);
    assert_ne!(o.data["spec"]["guard"]["destructive"], "Allow");

    // The plugin's approve verb prints the webhook's refusal as it came.
    let pending = json!({"status": {"pendingPlan": {"hash": "h1", "add": 0, "change": 0, "destroy": 1, "replace": 0, "job": "tc-prod-eu-apply-1"}}});
    api.patch_status("prod-eu", &PatchParams::default(), &Patch::Merge(&pending))
        .await
        .unwrap();
    let out = std::process::Command::new(common::webhook::binary("kubectl-captf"))
        .arg("--kubeconfig")
        .arg(&editor_kubeconfig)
        .args(["-n", NS, "approve", "tfc/prod-eu", "--hash", "h1"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("denied the request: user \"system:serviceaccount:team-a:editor\" may not approve plan \"h1\"")
            && stderr.contains("ClusterRole \"captf-approver\""),
        "{stderr}"
    );
    assert!(
        !stderr.contains("verbs: [\"patch\"]"),
        "no patch rule is suggested: {stderr}"
    );

    // A user bound to the approver ClusterRole approves, and is recorded as the approver.
    let approved = common::wait_within("the approver's approval admitted", PATIENCE, || {
        let approver = approver.clone();
        async move {
            approver
                .patch("prod-eu", &PatchParams::default(), &Patch::Merge(&approve("h1")))
                .await
                .ok()
        }
    })
    .await;
    assert_eq!(annotation(&approved, "captf.io/approve-plan").as_deref(), Some("h1"));
    assert_eq!(
        annotation(&approved, "captf.io/approved-by").as_deref(),
        Some(format!("system:serviceaccount:{NS}:approver").as_str())
    );
    let allowed = approver
        .patch("prod-eu", &PatchParams::default(), &Patch::Merge(&guard("Allow")))
        .await
        .unwrap();
    assert_eq!(allowed.data["spec"]["guard"]["destructive"], "Allow");

    // What needs no approval stays the editor's: another edit with the approval and the guard as
    // they are, the guard back to Block, the approval removed.
    editor
        .patch(
            "prod-eu",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await
        .unwrap();
    editor
        .patch("prod-eu", &PatchParams::default(), &Patch::Merge(&guard("Block")))
        .await
        .unwrap();
    let removed = editor
        .patch(
            "prod-eu",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"annotations": {"captf.io/approve-plan": null}}})),
        )
        .await
        .unwrap();
    assert_eq!(annotation(&removed, "captf.io/approve-plan"), None);
}

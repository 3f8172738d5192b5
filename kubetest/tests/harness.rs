//! The harness against the real binaries: the control plane comes up ready, answers the admin
//! and the service accounts it mints kubeconfigs for, its controllers run, and dropping it
//! leaves no process behind. Without the binaries these tests fail under `CI` and skip elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use captf_kubetest::{ControlPlane, Options, tools_or_skip};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use common::{TEST_READY_TIMEOUT, namespace, processes_mentioning};

/// Upper bound on any one wait for a controller; a test that reaches it fails.
const PATIENCE: Duration = Duration::from_secs(90);

async fn start() -> Option<ControlPlane> {
    let tools = tools_or_skip()?;
    let mut opts = Options::new(tools);
    opts.ready_timeout = TEST_READY_TIMEOUT;
    Some(ControlPlane::start(opts).await.unwrap())
}

/// The version pinned in the wrapper module: the `require k8s.io/kubernetes vX.Y.Z` line.
fn pinned_kubernetes_version() -> String {
    let go_mod =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../realparts/kubernetes/go.mod")).unwrap();
    go_mod
        .lines()
        .find_map(|l| l.trim().strip_prefix("require k8s.io/kubernetes "))
        .unwrap()
        .trim()
        .to_string()
}

async fn wait_for<T, F, Fut>(what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    common::wait_within(what, PATIENCE, probe).await
}

#[tokio::test]
async fn the_api_server_is_ready_and_reports_the_pinned_version() {
    let Some(cp) = start().await else { return };
    let admin = cp.admin_client().await.unwrap();
    let readyz = admin
        .request_text(http::Request::get("/readyz").body(Vec::new()).unwrap())
        .await
        .unwrap();
    assert_eq!(readyz.trim(), "ok");
    let version = admin.apiserver_version().await.unwrap();
    assert_eq!(version.git_version, pinned_kubernetes_version());
    let t = cp.timings();
    assert!(t.etcd <= t.apiserver && t.apiserver <= t.controller_manager, "{t:?}");
}

#[tokio::test]
async fn a_minted_kubeconfig_authenticates_as_its_service_account() {
    let Some(cp) = start().await else { return };
    let admin = cp.admin_client().await.unwrap();
    namespace(&admin, "team-a").await;
    let sa: ServiceAccount = serde_json::from_value(json!({ "metadata": { "name": "runner" } })).unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), "team-a")
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    let client = cp.service_account_client("team-a", "runner").await.unwrap();
    let review: SelfSubjectReview =
        serde_json::from_value(json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview" }))
            .unwrap();
    let me = Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    let user = me.status.unwrap().user_info.unwrap();
    assert_eq!(user.username.as_deref(), Some("system:serviceaccount:team-a:runner"));
    let groups = user.groups.unwrap_or_default();
    assert!(
        groups.iter().any(|g| g == "system:serviceaccounts:team-a"),
        "{groups:?}"
    );
}

#[tokio::test]
async fn a_token_for_a_service_account_that_does_not_exist_is_refused() {
    let Some(cp) = start().await else { return };
    let err = cp.service_account_kubeconfig("default", "nobody").await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("default/nobody"), "{msg}");
    assert!(
        matches!(err, captf_kubetest::MintKubeconfigError::TokenRequest { .. }),
        "{msg}"
    );
}

#[tokio::test]
async fn the_job_controller_makes_a_pod_and_the_garbage_collector_removes_it_with_its_job() {
    let Some(cp) = start().await else { return };
    let admin = cp.admin_client().await.unwrap();
    let jobs: Api<Job> = Api::namespaced(admin.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let job: Job = serde_json::from_value(json!({
        "metadata": { "name": "hello" },
        "spec": {
            "backoffLimit": 0,
            "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{ "name": "c", "image": "example.invalid/hello:1" }],
            }},
        },
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let selector = ListParams::default().labels("job-name=hello");
    let pod = wait_for("the Job's pod", || {
        let pods = pods.clone();
        let selector = selector.clone();
        async move { pods.list(&selector).await.unwrap().items.into_iter().next() }
    })
    .await;
    let owner = &pod.metadata.owner_references.unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Job", "hello"));

    jobs.delete("hello", &DeleteParams::background()).await.unwrap();
    wait_for("the garbage collector removing the Job's pod", || {
        let pods = pods.clone();
        let selector = selector.clone();
        async move { pods.list(&selector).await.unwrap().items.is_empty().then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn dropping_the_control_plane_leaves_no_process_behind() {
    let Some(tools) = tools_or_skip() else { return };
    let parent = tempfile::tempdir().unwrap();
    let mut opts = Options::new(tools);
    opts.ready_timeout = TEST_READY_TIMEOUT;
    opts.work_parent = Some(parent.path().to_path_buf());
    let cp = ControlPlane::start(opts).await.unwrap();
    let pids = cp.pids();
    let names: Vec<&str> = pids.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["etcd", "kube-apiserver", "kube-controller-manager"]);
    assert_eq!(
        processes_mentioning(parent.path()).len(),
        3,
        "{:?}",
        processes_mentioning(parent.path())
    );
    drop(cp);
    for (name, pid) in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "{name} ({pid}) is still there"
        );
    }
    assert_eq!(processes_mentioning(parent.path()), Vec::new());
}

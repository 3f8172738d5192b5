//! `helm install` of the chart on the real control plane, its pods run by the process kubelet:
//! the webhook's and the controller's Deployments start the workspace's binaries as the chart
//! says (args, env, volumes, service account, user), the API server calls the webhook through its
//! Service, and the controller starts real runner Jobs (OpenTofu and the test provider).
//!
//! What stands in (said in the README): cert-manager's controllers, whose commands cannot be built
//! here, by [`captf_kubetest::standin`] (it issues the Secrets of the chart's Certificates and
//! injects the CA bundles after the real cert-manager CRDs are installed); and, since the process
//! kubelet's pods share the host's network and have loopback addresses (which an EndpointSlice
//! may not hold), the chart's ports are set to free ones, the webhook runs one replica, and its
//! Service is routed to the host's address by an EndpointSlice the test writes. Without the binaries or root these tests fail under `CI` and skip elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use captf_kubetest::standin::{CertStandIn, host_address, route_service};
use captf_kubetest::{ControlPlane, Options, tools_or_skip};
use captf_sim::process_kubelet::ProcessImage;
use captf_testprovider::runner_image::{ModuleServer, THING_MODULE, runner_image, tar_gz};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use common::{TEST_READY_TIMEOUT, free_port, run_ok as run};

const PATIENCE: Duration = Duration::from_secs(240);
const RELEASE_NAMESPACE: &str = "captf-system";

/// Waits (wall time) until `probe` gives a value, failing with `what` and `context()`.
async fn until<T, F, Fut>(what: &str, context: impl Fn() -> String, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(v) = probe().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("{what}: not within {PATIENCE:?}\n{}", context()))
}

fn is_ready(o: &Value) -> bool {
    o["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// The pods of the release, with their phase and container states, for a failure message.
async fn pods_report(admin: &kube::Client) -> String {
    let pods = Api::<Pod>::namespaced(admin.clone(), RELEASE_NAMESPACE)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let slices = Api::<EndpointSlice>::namespaced(admin.clone(), RELEASE_NAMESPACE)
        .list(&ListParams::default())
        .await
        .map(|l| serde_json::to_string(&l.items).unwrap_or_default())
        .unwrap_or_else(|e| e.to_string());
    let pods = pods
        .iter()
        .map(|p| {
            let st = p.status.clone().unwrap_or_default();
            format!(
                "{}: {:?} {}",
                p.metadata.name.clone().unwrap_or_default(),
                st.phase,
                serde_json::to_string(&st.container_statuses).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    format!("{pods}\nEndpointSlices: {slices}")
}

/// The holder of the controller's leader Lease once it is held by another than `old` (`""`: by
/// anyone).
async fn leader_other_than(leases: &Api<Lease>, old: &str, what: &str) -> String {
    until(what, String::new, || async move {
        leases
            .get_opt("captf-controller-leader")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec.and_then(|s| s.holder_identity))
            .filter(|h| h != old)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_runs_the_charts_pods_which_refuse_a_bad_spec_apply_a_good_one_and_survive_uninstall_and_reinstall()
 {
    let Some(tools) = tools_or_skip() else { return };
    let bin = tools.etcd.parent().unwrap().to_path_buf();
    let tools_root = bin.parent().unwrap().to_path_buf();
    for needed in ["helm", "kubectl"] {
        if !bin.join(needed).is_file() {
            captf_testsupport::cannot_run(format!(
                "{needed} is not in {} (run `bash scripts/setup-tools.sh`)",
                bin.display()
            ));
            return;
        }
    }
    if let Some(why) = captf_sim::process_kubelet::namespaces_unavailable() {
        captf_testsupport::cannot_run(format!("{why}; the process kubelet needs root for its containers"));
        return;
    }
    let files = tempfile::tempdir().unwrap();
    let runner = match runner_image(files.path()) {
        Ok(image) => image,
        Err(e) => {
            captf_testsupport::cannot_run(format!("the runner's image cannot be assembled: {e}"));
            return;
        }
    };
    let archive = tar_gz(&files.path().join("module"), THING_MODULE).unwrap();
    let modules = ModuleServer::start(vec![("cluster.tar.gz".into(), archive)])
        .await
        .unwrap();
    let mut opts = Options::new(tools);
    opts.ready_timeout = TEST_READY_TIMEOUT;
    let cp = ControlPlane::start(opts).await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let kubeconfig = cp.admin_kubeconfig();

    // The chart's images are the workspace's binaries (the host-binary image mode).
    let controller = common::controller_binary();
    let webhook = common::webhook::binary("captf-webhook");
    let root = tempfile::tempdir().unwrap();
    let _kubelet = cp
        .start_kubelet(
            cp.kubelet_options("helm", root.path())
                .image(common::chart::default_image("runner"), runner.image.clone())
                .image(
                    common::chart::default_image("controller"),
                    ProcessImage::new("/captf-controller").file("/captf-controller", &controller),
                )
                .image(
                    common::chart::default_image("webhook"),
                    ProcessImage::new("/captf-webhook").file("/captf-webhook", &webhook),
                ),
        )
        .await
        .unwrap();

    // cert-manager's CRDs, then the chart with its defaults but for the ports and the webhook's
    // replicas (the pods share the host's network here).
    run(std::process::Command::new(bin.join("kubectl"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["apply", "--server-side", "-f"])
        .arg(tools_root.join("cert-manager/crds")));
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/captf");
    let install = |extra: &[String]| {
        let mut cmd = std::process::Command::new(bin.join("helm"));
        cmd.arg("install")
            .arg("captf")
            .arg(&chart)
            .args(["-n", RELEASE_NAMESPACE, "--create-namespace", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(extra);
        run(&mut cmd)
    };
    let webhook_port = free_port();
    let ports = [
        format!("webhook.port={webhook_port}"),
        format!("webhook.metricsPort={}", free_port()),
        format!("controller.metricsPort={}", free_port()),
        format!("controller.healthPort={}", free_port()),
        "webhook.replicas=1".to_string(),
    ];
    let set: Vec<String> = ports.iter().flat_map(|p| ["--set".to_string(), p.clone()]).collect();
    install(&set);

    // cert-manager's part: the chart's Certificates issued, the CA bundles injected.
    let standin = CertStandIn::new().unwrap();
    let issued = standin.issue(&admin).await.unwrap();
    assert!(
        !issued.is_empty(),
        "the chart asks cert-manager for the webhook's certificate"
    );
    let injected = standin.inject(&admin).await.unwrap();
    assert!(
        injected.iter().any(|o| o.contains("MutatingWebhookConfiguration"))
            && injected.iter().any(|o| o.contains("ValidatingWebhookConfiguration")),
        "both webhook configurations take the CA from the chart's Certificate: {injected:?}"
    );

    // Pods have loopback addresses here, which an EndpointSlice may not hold: the webhook's
    // Service is routed to the host's address and the port its pod listens on.
    let host = match host_address() {
        Ok(ip) => ip.to_string(),
        Err(e) => {
            captf_testsupport::cannot_run(e.to_string());
            return;
        }
    };
    route_service(&admin, RELEASE_NAMESPACE, "captf-webhook", &host, webhook_port)
        .await
        .unwrap();

    // The webhook answers through its Service: a bad spec is refused with its message (a rule the
    // CRD's schema cannot say, so the answer is the webhook's).
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), RELEASE_NAMESPACE, &common::terraform_clusters());
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformCluster",
        "metadata": { "name": "bad", "namespace": RELEASE_NAMESPACE },
        "spec": {
            "module": { "source": modules.url("cluster.tar.gz") },
            "jobs": { "podLabels": { "captf.io/op": "apply" } },
        },
    }))
    .unwrap();
    let mut last_error = String::new();
    let refused = tokio::time::timeout(PATIENCE, async {
        loop {
            match api.create(&PostParams::default(), &bad).await {
                Err(kube::Error::Api(e)) if e.message.contains("podLabels") => return e.message,
                Ok(_) => panic!("a bad spec was accepted"),
                Err(e) => last_error = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await;
    let refusal = match refused {
        Ok(message) => message,
        Err(_) => panic!(
            "the webhook did not refuse a bad spec within {PATIENCE:?}; last answer: {last_error}\npods:\n{}",
            pods_report(&admin).await
        ),
    };
    assert!(
        refusal.contains("denied the request: spec.jobs.podLabels[captf.io/op]: is the controller's"),
        "{refusal}"
    );

    // The minimal object is accepted and defaulted, and the controller's pod applies it.
    let good: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformCluster",
        "metadata": { "name": "demo", "namespace": RELEASE_NAMESPACE },
        "spec": {
            "module": { "source": modules.url("cluster.tar.gz") },
            "variables": { "name": "demo" },
        },
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &good).await.unwrap();
    let created = serde_json::to_value(&created).unwrap();
    assert_eq!(created["spec"]["jobs"]["activeDeadlineSeconds"], 3600, "{created}");
    assert_eq!(created["spec"]["deletionPolicy"], "Destroy", "{created}");
    let leases = Api::<Lease>::namespaced(admin.clone(), RELEASE_NAMESPACE);
    let holder = leader_other_than(&leases, "", "the controller takes its leader Lease").await;
    assert!(holder.starts_with("captf-controller-"), "{holder}");
    let mut last = Value::Null;
    let ready = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Ok(o) = api.get("demo").await {
                last = serde_json::to_value(&o).unwrap();
                if is_ready(&last) {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await;
    if ready.is_err() {
        panic!(
            "the example is not Ready within {PATIENCE:?}: {last}\npods:\n{}",
            pods_report(&admin).await
        );
    }
    let jobs = Api::<Job>::namespaced(admin.clone(), RELEASE_NAMESPACE)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        jobs.iter().any(|j| j
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.get("captf.io/op").is_some_and(|op| op == "apply"))),
        "a runner apply Job ran"
    );

    // `helm uninstall` keeps the state; installing again picks the object up without an apply.
    run(std::process::Command::new(bin.join("helm"))
        .args(["uninstall", "captf", "-n", RELEASE_NAMESPACE, "--kubeconfig"])
        .arg(&kubeconfig));
    let secrets = Api::<Secret>::namespaced(admin.clone(), RELEASE_NAMESPACE);
    let states: Vec<String> = secrets
        .list(&ListParams::default().labels("tfstate=true"))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    assert_eq!(
        states.len(),
        1,
        "the state Secret stays after helm uninstall: {states:?}"
    );
    let before = api.get("demo").await.unwrap();
    let last_seq = before.data["status"]["lastJobSeq"].as_u64().unwrap();

    // Installed again, a new controller pod takes the Lease once the old holder's term is over,
    // and serves the object from its state: a change is applied by exactly one new Job (a
    // reinstall that re-applied the unchanged inputs would add another).
    install(&set);
    standin.issue(&admin).await.unwrap();
    standin.inject(&admin).await.unwrap();
    route_service(&admin, RELEASE_NAMESPACE, "captf-webhook", &host, webhook_port)
        .await
        .unwrap();
    leader_other_than(&leases, &holder, "the reinstalled controller takes the Lease").await;
    let changed = until("the webhook takes a change again", String::new, || {
        let api = api.clone();
        async move {
            api.patch(
                "demo",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"variables": {"content": "v2"}}})),
            )
            .await
            .ok()
        }
    })
    .await;
    let generation = changed.metadata.generation.unwrap();
    let after = until("the change applied by the new controller", String::new, || {
        let api = api.clone();
        async move {
            let o = serde_json::to_value(api.get("demo").await.ok()?).ok()?;
            (is_ready(&o) && o["status"]["observedGeneration"] == generation).then_some(o)
        }
    })
    .await;
    let new_jobs = after["status"]["lastJobSeq"].as_u64().unwrap() - last_seq;
    assert_eq!(new_jobs, 1, "one Job after the reinstall, the change's apply: {after}");
}

//! Installing CAPTF as its users do, on the real control plane: `helm install cert-manager` from
//! cert-manager's own chart (its controller, webhook and cainjector built from its released
//! source), then `helm install captf charts/captf`, every pod run by the process kubelet. The
//! real cert-manager issues the webhook's certificate for its Service's names and cainjector
//! writes the CA bundle into both webhook configurations; the webhook's pod becomes Ready through
//! its own probes and the EndpointSlice controller puts it behind its Service; the API server
//! calls it there; the controller starts real runner Jobs (OpenTofu and the test provider).
//!
//! What differs from a cluster (said in docs/playground.md): the process kubelet's pods share the host's
//! network, so the chart's ports are set to free ones and the webhook runs one replica. Without
//! the binaries or root these tests fail under `CI` and skip elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use captf_kubetest::cert_manager::{CertManager, prerequisites_or_skip};
use captf_kubetest::{ControlPlane, Options, tools_or_skip};
use captf_sim::process_kubelet::ProcessImage;
use captf_testprovider::runner_image::{ModuleServer, THING_MODULE, runner_image, tar_gz};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use common::{TEST_READY_TIMEOUT, run_ok as run};

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

/// A pod's (or any object's) `Ready` condition is True.
fn is_ready(o: &Value) -> bool {
    o["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// A CAPTF object is Ready and up to date: `Ready` alone stays True from the first apply on,
/// while a later change waits; `UpToDate` says the newest inputs are applied.
fn is_applied(o: &Value) -> bool {
    is_ready(o)
        && o["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "UpToDate" && c["status"] == "True"))
}

/// The DNS names of a PEM certificate.
fn dns_names(pem: &[u8]) -> Vec<String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem).unwrap();
    let cert = pem.parse_x509().unwrap();
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::DNSName(d) => Some((*d).to_string()),
            _ => None,
        })
        .collect()
}

/// The pods of `namespace`, with their phase, container states and the end of their logs (in
/// `logs`, the kubelet's folder), for a failure message.
async fn pods_report(admin: &kube::Client, namespace: &str, logs: &Path) -> String {
    let pods = Api::<Pod>::namespaced(admin.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let slices = Api::<EndpointSlice>::namespaced(admin.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map(|l| serde_json::to_string(&l.items).unwrap_or_default())
        .unwrap_or_else(|e| e.to_string());
    let pods = pods
        .iter()
        .map(|p| {
            let st = p.status.clone().unwrap_or_default();
            let name = p.metadata.name.clone().unwrap_or_default();
            let log = std::fs::read_to_string(logs.join(format!("{namespace}_{name}.log"))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            format!(
                "{name}: {:?} {}\n  log: {}",
                st.phase,
                serde_json::to_string(&st.container_statuses).unwrap_or_default(),
                tail.join("\n  log: ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    format!("{pods}\nEndpointSlices: {slices}")
}

/// The holder of the controller's leader Lease once it is held by another than `old` (`""`: by
/// anyone).
async fn leader_other_than(leases: &Api<Lease>, old: &str, what: &str) -> String {
    leader_outside(leases, &[old.to_string()], what).await
}

/// The leader Lease's holder once it is none of `old`. During a rolling upgrade the lead may pass
/// first to the other old replica and only later to a new pod, so a test that wants the new pods
/// to lead waits for a holder outside the whole old set, not merely another one.
async fn leader_outside(leases: &Api<Lease>, old: &[String], what: &str) -> String {
    until(what, String::new, || async move {
        leases
            .get_opt("captf-controller-leader")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec.and_then(|s| s.holder_identity))
            .filter(|h| !h.is_empty() && !old.contains(h))
    })
    .await
}

/// A control plane with the real cert-manager and CAPTF installed by helm, as docs/install.md says.
struct Installed {
    /// When cert-manager's helm install began.
    installing: std::time::Instant,
    cp: ControlPlane,
    admin: kube::Client,
    kubeconfig: std::path::PathBuf,
    bin: std::path::PathBuf,
    chart: std::path::PathBuf,
    /// The `--set` arguments of CAPTF's install.
    set: Vec<String>,
    modules: ModuleServer,
    _kubelet: captf_kubetest::Kubelet,
    root: tempfile::TempDir,
    _files: tempfile::TempDir,
}

impl Installed {
    /// `helm install cert-manager` (its chart, built binaries), waits for its webhook, then
    /// `helm install captf charts/captf` with the chart's defaults but for `values`. Every pod has
    /// a network of its own, so the defaults' ports and replicas serve as in a cluster.
    /// `trust_api_server`: the chart's `webhook.apiServerCIDRs` names the address the API server
    /// calls the webhook from (the pods' bridge here), as docs/operating.md tells an operator to do.
    async fn start(trust_api_server: bool, values: &[&str]) -> Option<Installed> {
        let tools = tools_or_skip()?;
        let bin = tools.etcd.parent().unwrap().to_path_buf();
        let (cert_manager, _) = prerequisites_or_skip(&bin, &["helm", "kubectl"])?;
        let files = tempfile::tempdir().unwrap();
        let runner = match runner_image(files.path()) {
            Ok(image) => image,
            Err(e) => {
                captf_testsupport::cannot_run(format!("the runner's image cannot be assembled: {e}"));
                return None;
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

        // The chart's images are the workspace's binaries (the host-binary image mode); the
        // runners fetch their module from this machine's loopback.
        let controller = common::controller_binary();
        let webhook = common::webhook::binary("captf-webhook");
        let root = tempfile::tempdir().unwrap();
        let mut kubelet_options = cp.kubelet_options("helm", root.path()).pod_network([modules.port()]);
        for (image, files) in cert_manager.images() {
            kubelet_options = kubelet_options.image(image, files);
        }
        let kubelet = cp
            .start_kubelet(
                kubelet_options
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

        // cert-manager from its chart, as docs/install.md says; CAPTF's chart once its webhook answers.
        let installing = std::time::Instant::now();
        cert_manager.helm_install(&kubeconfig).unwrap();
        if let Err(e) = CertManager::until_ready(&admin, PATIENCE).await {
            panic!(
                "{e}\npods:\n{}",
                pods_report(
                    &admin,
                    captf_kubetest::cert_manager::NAMESPACE,
                    &root.path().join("logs")
                )
                .await
            );
        }
        eprintln!("cert-manager answers {:?} after its helm install", installing.elapsed());
        let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/captf");
        let mut values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        if trust_api_server {
            let gateway = kubelet.pod_gateway().unwrap();
            values.push(format!("webhook.apiServerCIDRs={{{gateway}/32}}"));
        }
        let set: Vec<String> = values.iter().flat_map(|p| ["--set".to_string(), p.clone()]).collect();
        let installed = Installed {
            installing,
            cp,
            admin,
            kubeconfig,
            bin,
            chart,
            set,
            modules,
            _kubelet: kubelet,
            root,
            _files: files,
        };
        installed.helm_install_captf();
        Some(installed)
    }

    fn helm_install_captf(&self) {
        run(std::process::Command::new(self.bin.join("helm"))
            .arg("install")
            .arg("captf")
            .arg(&self.chart)
            .args(["-n", RELEASE_NAMESPACE, "--create-namespace", "--kubeconfig"])
            .arg(&self.kubeconfig)
            .args(&self.set));
    }

    async fn report(&self, namespace: &str) -> String {
        pods_report(&self.admin, namespace, &self.root.path().join("logs")).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_runs_the_charts_pods_which_refuse_a_bad_spec_apply_a_good_one_and_survive_uninstall_and_reinstall()
 {
    let Some(inst) = Installed::start(false, &[]).await else {
        return;
    };
    let Installed {
        cp: _cp,
        admin,
        kubeconfig,
        bin,
        modules,
        root,
        ..
    } = &inst;
    let (admin, kubeconfig, bin, root) = (admin.clone(), kubeconfig.clone(), bin.clone(), root);

    // The real cert-manager issues the webhook's certificate for its Service's names, and
    // cainjector writes its CA into both webhook configurations.
    let secrets = Api::<Secret>::namespaced(admin.clone(), RELEASE_NAMESPACE);
    let tls = until("cert-manager issues the webhook's certificate", String::new, || {
        let secrets = secrets.clone();
        async move { secrets.get_opt("captf-webhook-tls").await.ok().flatten() }
    })
    .await;
    let data = tls.data.unwrap_or_default();
    let ca = data.get("ca.crt").map(|b| b.0.clone()).unwrap_or_default();
    assert!(!ca.is_empty(), "the issued Secret carries the CA");
    let names = dns_names(&data["tls.crt"].0);
    for name in [
        "captf-webhook",
        "captf-webhook.captf-system",
        "captf-webhook.captf-system.svc",
    ] {
        assert!(
            names.iter().any(|n| n == name),
            "the certificate names {name}: {names:?}"
        );
    }
    let mutating = Api::<MutatingWebhookConfiguration>::all(admin.clone());
    let validating = Api::<ValidatingWebhookConfiguration>::all(admin.clone());
    until(
        "cainjector writes the CA into both webhook configurations",
        String::new,
        || {
            let (mutating, validating, ca) = (mutating.clone(), validating.clone(), ca.clone());
            async move {
                let m = mutating.get("captf-webhook").await.ok()?;
                let v = validating.get("captf-webhook").await.ok()?;
                let bundles: Vec<Vec<u8>> = m
                    .webhooks
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|w| w.client_config.ca_bundle.map(|b| b.0))
                    .chain(
                        v.webhooks
                            .unwrap_or_default()
                            .into_iter()
                            .filter_map(|w| w.client_config.ca_bundle.map(|b| b.0)),
                    )
                    .collect();
                (bundles.len() >= 2 && bundles.iter().all(|b| *b == ca)).then_some(())
            }
        },
    )
    .await;

    // The webhook's pod is Ready through its own readiness probe, and the EndpointSlice
    // controller puts it behind its Service.
    let pods = Api::<Pod>::namespaced(admin.clone(), RELEASE_NAMESPACE);
    let webhook_pod = until("the webhook's pod is Ready", String::new, || {
        let pods = pods.clone();
        async move {
            pods.list(&ListParams::default().labels("app.kubernetes.io/component=webhook"))
                .await
                .ok()?
                .items
                .into_iter()
                .find(|p| serde_json::to_value(p).is_ok_and(|v| is_ready(&v)))
        }
    })
    .await;
    let container = &webhook_pod.spec.as_ref().unwrap().containers[0];
    assert!(
        container.readiness_probe.is_some(),
        "the chart's readiness probe made it Ready"
    );
    let slices = Api::<EndpointSlice>::namespaced(admin.clone(), RELEASE_NAMESPACE);
    until(
        "the webhook's Service has its pod as a ready endpoint",
        String::new,
        || {
            let slices = slices.clone();
            async move {
                let list = slices
                    .list(&ListParams::default().labels("kubernetes.io/service-name=captf-webhook"))
                    .await
                    .ok()?;
                list.items
                    .iter()
                    .flat_map(|s| s.endpoints.iter())
                    .any(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                    .then_some(())
            }
        },
    )
    .await;

    // The webhook answers through its Service: a bad spec is refused with its message (a rule the
    // CRD's schema cannot say, so the answer is the webhook's).
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), RELEASE_NAMESPACE, &common::terraform_clusters());
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
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
            pods_report(&admin, RELEASE_NAMESPACE, &root.path().join("logs")).await
        ),
    };
    assert!(
        refusal.contains("denied the request: spec.jobs.podLabels[captf.io/op]: is the controller's"),
        "{refusal}"
    );

    // The minimal object is accepted and defaulted, and the controller's pod applies it.
    let good: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
        "metadata": { "name": "demo", "namespace": RELEASE_NAMESPACE },
        "spec": {
            "module": { "source": modules.url("cluster.tar.gz") },
            "variables": { "name": "demo" },
        },
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &good).await.unwrap();
    eprintln!(
        "first object admitted {:?} after cert-manager's helm install began",
        inst.installing.elapsed()
    );
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
                if is_applied(&last) {
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
            pods_report(&admin, RELEASE_NAMESPACE, &root.path().join("logs")).await
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

    // Conversion through the webhook: cainjector puts the CA into every CRD's conversion
    // webhook, and a client of the deprecated v1alpha1 reads and writes through it while every
    // object is stored as v1beta1.
    let crds = Api::<CustomResourceDefinition>::all(admin.clone());
    until(
        "cainjector writes the CA into every CRD's conversion webhook",
        String::new,
        || {
            let (crds, ca) = (crds.clone(), ca.clone());
            async move {
                let list = crds.list(&ListParams::default()).await.ok()?;
                let ours: Vec<_> = list
                    .items
                    .iter()
                    .filter(|c| c.spec.group == "infrastructure.cluster.x-k8s.io")
                    .collect();
                let injected = ours.iter().all(|c| {
                    c.spec
                        .conversion
                        .as_ref()
                        .and_then(|c| c.webhook.as_ref()?.client_config.as_ref()?.ca_bundle.as_ref())
                        .is_some_and(|b| b.0 == ca)
                });
                (ours.len() == 6 && injected).then_some(())
            }
        },
    )
    .await;
    let old_clusters = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("infrastructure.cluster.x-k8s.io", "v1alpha1", "TerraformCluster"),
        "terraformclusters",
    );
    let old_api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), RELEASE_NAMESPACE, &old_clusters);
    let old = serde_json::to_value(old_api.get("demo").await.unwrap()).unwrap();
    assert_eq!(old["apiVersion"], "infrastructure.cluster.x-k8s.io/v1alpha1", "{old}");
    assert_eq!(old["status"]["ready"], true, "{old}");
    let now = serde_json::to_value(api.get("demo").await.unwrap()).unwrap();
    assert_eq!(old["spec"], now["spec"], "the spec reads the same in both versions");
    assert_eq!(
        old["status"], now["status"],
        "and so does a status without a pending plan"
    );
    let labelled = old_api
        .patch(
            "demo",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"team": "old-client"}}})),
        )
        .await
        .unwrap();
    assert_eq!(labelled.metadata.generation, now["metadata"]["generation"].as_i64());
    let relabelled = serde_json::to_value(api.get("demo").await.unwrap()).unwrap();
    assert_eq!(relabelled["metadata"]["labels"]["team"], "old-client");
    assert_eq!(
        relabelled["status"], now["status"],
        "a v1alpha1 write keeps the status: {relabelled}"
    );
    // An old manifest is admitted and defaulted through conversion (a dry run: nothing is made).
    let legacy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformCluster",
        "metadata": { "name": "legacy", "namespace": RELEASE_NAMESPACE },
        "spec": { "module": { "source": modules.url("cluster.tar.gz") }, "variables": { "name": "legacy" } },
    }))
    .unwrap();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let admitted = serde_json::to_value(old_api.create(&dry, &legacy).await.unwrap()).unwrap();
    assert_eq!(admitted["apiVersion"], "infrastructure.cluster.x-k8s.io/v1alpha1");
    assert_eq!(admitted["spec"]["jobs"]["activeDeadlineSeconds"], 3600, "{admitted}");
    let mut bad_old = serde_json::to_value(&bad).unwrap();
    bad_old["apiVersion"] = json!("infrastructure.cluster.x-k8s.io/v1alpha1");
    let refused = old_api
        .create(&dry, &serde_json::from_value(bad_old).unwrap())
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("spec.jobs.podLabels[captf.io/op]"), "{refused}");

    // A chart value that cannot work is refused with a message that names it: a serving
    // certificate shorter than its renewal window, refused by cert-manager's own webhook when
    // the rendered chart is sent to the API server.
    let rendered = std::process::Command::new(bin.join("helm"))
        .args(["template", "captf"])
        .arg(&inst.chart)
        .args(["-n", RELEASE_NAMESPACE, "--set", "webhook.tls.certManager.duration=1h"])
        .output()
        .unwrap();
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let rendered = String::from_utf8(rendered.stdout).unwrap();
    let mut apply = std::process::Command::new(bin.join("kubectl"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["apply", "--dry-run=server", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut apply.stdin.take().unwrap(), rendered.as_bytes()).unwrap();
    let refused = apply.wait_with_output().unwrap();
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "a certificate shorter than its renewal window is refused"
    );
    assert!(
        message.contains("webhook.cert-manager.io") && message.contains("renewBefore"),
        "cert-manager's webhook names the renewal window: {message}"
    );

    // An issuer that does not exist: the chart renders (the name is only a reference), and the
    // real cert-manager's CertificateRequest says which issuer it cannot find. Applied in a
    // namespace of its own, where nothing else uses the certificate.
    let check = "captf-issuer-check";
    let rendered = std::process::Command::new(bin.join("helm"))
        .args(["template", "captf"])
        .arg(&inst.chart)
        .args([
            "-n",
            check,
            "--show-only",
            "templates/certificates.yaml",
            "--set",
            "webhook.tls.certManager.issuerRef.name=missing-issuer",
        ])
        .output()
        .unwrap();
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": check } })).unwrap(),
        )
        .await
        .unwrap();
    let mut apply = std::process::Command::new(bin.join("kubectl"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut apply.stdin.take().unwrap(), &rendered.stdout).unwrap();
    let applied = apply.wait_with_output().unwrap();
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    let requests: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        check,
        &ApiResource {
            kind: "CertificateRequest".into(),
            plural: "certificaterequests".into(),
            ..certificates()
        },
    );
    let message = until("cert-manager says the issuer does not exist", String::new, || {
        let requests = requests.clone();
        async move {
            let list = requests.list(&ListParams::default()).await.ok()?;
            list.items.iter().find_map(|r| {
                let conditions = r.data["status"]["conditions"].as_array()?;
                conditions.iter().find_map(|c| {
                    (c["type"] == "Ready" && c["status"] == "False" && c["reason"] == "Pending")
                        .then(|| c["message"].as_str().unwrap_or_default().to_string())
                        .filter(|m| m.contains("not found"))
                })
            })
        }
    })
    .await;
    assert!(
        message.contains(r#"Referenced "Issuer" not found"#) && message.contains(r#""missing-issuer" not found"#),
        "the CertificateRequest names the missing issuer: {message}"
    );

    // `helm uninstall` keeps the state; installing again picks the object up without an apply.
    run(std::process::Command::new(bin.join("helm"))
        .args(["uninstall", "captf", "-n", RELEASE_NAMESPACE, "--kubeconfig"])
        .arg(&kubeconfig));
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
    inst.helm_install_captf();
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
            (is_applied(&o) && o["status"]["observedGeneration"] == generation).then_some(o)
        }
    })
    .await;
    let new_jobs = after["status"]["lastJobSeq"].as_u64().unwrap() - last_seq;
    assert_eq!(new_jobs, 1, "one Job after the reinstall, the change's apply: {after}");
}

/// The certificates of cert-manager's `Certificate` kind.
fn certificates() -> ApiResource {
    ApiResource {
        group: "cert-manager.io".into(),
        version: "v1".into(),
        api_version: "cert-manager.io/v1".into(),
        kind: "Certificate".into(),
        plural: "certificates".into(),
    }
}

/// Asks cert-manager to issue the Certificate `name` again now, as `cmctl renew` does: its
/// `Issuing` condition set by hand.
async fn renew(admin: &kube::Client, name: &str) {
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), RELEASE_NAMESPACE, &certificates());
    let current = api.get_status(name).await.unwrap();
    let mut conditions = current.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c["type"] != "Issuing");
    conditions.push(json!({
        "type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
        "message": "Certificate re-issuance manually triggered",
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        "observedGeneration": current.metadata.generation,
    }));
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": { "conditions": conditions } })),
    )
    .await
    .unwrap();
}

/// The serial numbers of the certificates of a PEM text.
fn serials(pem: &[u8]) -> String {
    x509_parser::pem::Pem::iter_from_buffer(pem)
        .filter_map(Result::ok)
        .filter_map(|p| p.parse_x509().ok().map(|c| c.raw_serial_as_string()))
        .collect::<Vec<_>>()
        .join("+")
}

/// The DER of the first certificate of a PEM text.
fn der(pem: &[u8]) -> Vec<u8> {
    x509_parser::pem::parse_x509_pem(pem).unwrap().1.contents
}

/// The Secret `name`'s key `key`.
async fn secret_key(admin: &kube::Client, name: &str, key: &str) -> Vec<u8> {
    let secret = Api::<Secret>::namespaced(admin.clone(), RELEASE_NAMESPACE)
        .get(name)
        .await
        .unwrap();
    secret
        .data
        .unwrap_or_default()
        .get(key)
        .map(|b| b.0.clone())
        .unwrap_or_default()
}

/// Sends `per_second` dry-run creates of a valid object (each is reviewed by the mutating and
/// the validating webhook) until `stop`; the failures' messages, and how many were sent.
fn review_load(
    api: Api<DynamicObject>,
    object: DynamicObject,
    per_second: u32,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<(u64, Vec<String>)> {
    tokio::spawn(async move {
        let failures = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut sent = 0u64;
        let mut tick = tokio::time::interval(Duration::from_secs(1) / per_second);
        let mut requests = tokio::task::JoinSet::new();
        while !*stop.borrow() {
            tick.tick().await;
            let (api, object, failures) = (api.clone(), object.clone(), failures.clone());
            sent += 1;
            requests.spawn(async move {
                let params = PostParams {
                    dry_run: true,
                    ..PostParams::default()
                };
                if let Err(e) = api.create(&params, &object).await {
                    failures.lock().unwrap().push(e.to_string());
                }
            });
        }
        while requests.join_next().await.is_some() {}
        let failures = failures.lock().unwrap().clone();
        (sent, failures)
    })
}

/// The load's tally: none of the `sent` dry-run creates failed (`during` says when; the failures
/// are summed up by what the API server said of the webhook call), and they came at least 20 a
/// second over `seconds`.
fn assert_every_review_passed(during: &str, sent: u64, failures: &[String], seconds: f64) {
    let mut kinds: Vec<&str> = failures
        .iter()
        .map(|f| {
            f.split("failed to call webhook: ")
                .nth(1)
                .unwrap_or(f)
                .split(':')
                .next()
                .unwrap_or(f)
        })
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    assert!(
        failures.is_empty(),
        "{} of {sent} dry-run creates failed {during}; kinds: {kinds:?}; first: {:?}",
        failures.len(),
        failures.first()
    );
    assert!(
        sent as f64 / seconds >= 20.0,
        "the load was at least 20 a second {during}: {sent} in {seconds:.1} s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewed_serving_certificates_and_a_renewed_ca_are_served_without_a_restart_while_no_review_fails() {
    // The API server told apart by its address (docs/operating.md). With the defaults it is one
    // address among others, held to one address's share of connections and reviews in flight;
    // on a loaded machine 23 of 368 creates then failed, the API server writing to a connection
    // the webhook had closed.
    let Some(inst) = Installed::start(true, &[]).await else {
        return;
    };
    let admin = inst.admin.clone();
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), RELEASE_NAMESPACE, &common::terraform_clusters());
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
        "metadata": { "name": "rotation", "namespace": RELEASE_NAMESPACE },
        "spec": { "module": { "source": inst.modules.url("cluster.tar.gz") } },
    }))
    .unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let report = inst.report(RELEASE_NAMESPACE).await;
    until(
        "the webhook answers through its Service",
        move || report.clone(),
        || {
            let (api, object, dry_run) = (api.clone(), object.clone(), dry_run.clone());
            async move { api.create(&dry_run, &object).await.ok() }
        },
    )
    .await;
    let pods = Api::<Pod>::namespaced(admin.clone(), RELEASE_NAMESPACE);
    let webhook_pods = || async {
        pods.list(&ListParams::default().labels("app.kubernetes.io/component=webhook"))
            .await
            .unwrap()
            .items
    };
    // The certificate every webhook pod serves on its TLS port, when they all serve the same.
    let served = || async {
        let mut certificates = BTreeSet::new();
        for p in webhook_pods().await {
            let ip = p.status.as_ref()?.pod_ip.clone()?;
            let port = p.spec.as_ref()?.containers[0]
                .ports
                .as_ref()?
                .iter()
                .find(|port| port.name.as_deref() == Some("https"))?
                .container_port;
            let port = u16::try_from(port).ok()?;
            certificates.insert(captf_kubetest::probe::served_certificate(&ip, port).await.ok()?);
        }
        (certificates.len() == 1).then(|| certificates.pop_first()).flatten()
    };
    // Each webhook pod's uid, restarts and container state: the same containers throughout.
    let webhook_pod = || async {
        let list = webhook_pods().await;
        assert_eq!(list.len(), 2, "the chart's two webhook pods");
        let mut containers: Vec<_> = list
            .iter()
            .map(|p| {
                let status = p
                    .status
                    .clone()
                    .unwrap_or_default()
                    .container_statuses
                    .unwrap_or_default();
                (
                    p.metadata.uid.clone().unwrap_or_default(),
                    status.first().map(|c| (c.restart_count, c.state.clone())),
                )
            })
            .collect();
        containers.sort_by(|a, b| a.0.cmp(&b.0));
        containers
    };
    let before = webhook_pod().await;
    let first = der(&secret_key(&admin, "captf-webhook-tls", "tls.crt").await);
    assert_eq!(
        served().await,
        Some(first.clone()),
        "both webhook pods serve the issued certificate"
    );

    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let started = std::time::Instant::now();
    let load = review_load(api.clone(), object.clone(), 25, stop);

    // A renewal of the serving certificate: the webhook serves the new one without a restart.
    renew(&admin, "captf-webhook").await;
    let second = until("cert-manager issues the serving certificate again", String::new, || {
        let (admin, first) = (admin.clone(), first.clone());
        async move {
            let now = der(&secret_key(&admin, "captf-webhook-tls", "tls.crt").await);
            (now != first).then_some(now)
        }
    })
    .await;
    until("both webhook pods serve the renewed certificate", String::new, || {
        let second = second.clone();
        async move { (served().await == Some(second)).then_some(()) }
    })
    .await;

    // A renewal of the issuing CA, then of the serving certificate it signs: the new leaf chains
    // to the new CA, the webhook serves it, and cainjector puts the new CA in the bundle.
    let old_ca = secret_key(&admin, "captf-ca", "tls.crt").await;
    renew(&admin, "captf-ca").await;
    let new_ca = until("cert-manager issues the CA again", String::new, || {
        let (admin, old_ca) = (admin.clone(), old_ca.clone());
        async move {
            let now = secret_key(&admin, "captf-ca", "tls.crt").await;
            (!now.is_empty() && now != old_ca).then_some(now)
        }
    })
    .await;
    renew(&admin, "captf-webhook").await;
    let third = until("the serving certificate is issued by the new CA", String::new, || {
        let (admin, new_ca) = (admin.clone(), new_ca.clone());
        async move {
            let ca = secret_key(&admin, "captf-webhook-tls", "ca.crt").await;
            serials(&ca)
                .split('+')
                .any(|s| s == serials(&new_ca))
                .then_some(der(&secret_key(&admin, "captf-webhook-tls", "tls.crt").await))
        }
    })
    .await;
    until(
        "both webhook pods serve the certificate of the new CA",
        String::new,
        || {
            let third = third.clone();
            async move { (served().await == Some(third)).then_some(()) }
        },
    )
    .await;
    let validating = Api::<ValidatingWebhookConfiguration>::all(admin.clone());
    // (cert-manager keeps the old CA beside the new one in `ca.crt`, so clients that still
    // hold an older leaf go on verifying.)
    until("cainjector puts the new CA in the bundle", String::new, || {
        let (validating, new_ca) = (validating.clone(), new_ca.clone());
        async move {
            let v = validating.get("captf-webhook").await.ok()?;
            let new_serial = serials(&new_ca);
            v.webhooks
                .unwrap_or_default()
                .iter()
                .all(|w| {
                    w.client_config
                        .ca_bundle
                        .as_ref()
                        .is_some_and(|b| serials(&b.0).split('+').any(|s| s == new_serial))
                })
                .then_some(())
        }
    })
    .await;
    // A few seconds more of reviews on the new CA, then the tally.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop_tx.send(true).unwrap();
    let (sent, failures) = load.await.unwrap();
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("{sent} dry-run creates in {seconds:.1} s through both rotations");
    assert_every_review_passed("during the rotations", sent, &failures, seconds);
    assert_eq!(
        webhook_pod().await,
        before,
        "the same webhook containers served throughout"
    );
}

/// Watches the runner Jobs of `namespace` until `stop`, and records every moment an object had
/// two unfinished Jobs at once (a Job is unfinished until its Complete or Failed condition is
/// True, or it is deleted): each as the object's id and the Jobs' names. Also returns how many
/// Jobs it saw created.
fn two_jobs_watch(
    jobs: Api<Job>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<(usize, Vec<String>)> {
    use futures::StreamExt as _;
    tokio::spawn(async move {
        let finished = |j: &Job| {
            j.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
                c.iter()
                    .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
            })
        };
        let object_of = |j: &Job| {
            j.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("captf.io/object").cloned())
        };
        // name → (object, unfinished)
        let mut known: std::collections::BTreeMap<String, (String, bool)> = Default::default();
        let mut overlaps = Vec::new();
        let mut created = 0usize;
        let list = jobs.list(&ListParams::default()).await.unwrap();
        let mut version = list.metadata.resource_version.clone().unwrap_or_default();
        for j in &list.items {
            if let (Some(name), Some(object)) = (j.metadata.name.clone(), object_of(j)) {
                known.insert(name, (object, !finished(j)));
            }
        }
        while !*stop.borrow() {
            let params = kube::api::WatchParams::default().timeout(30);
            let Ok(stream) = jobs.watch(&params, &version).await else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let mut stream = stream.boxed();
            let mut stop = stop.clone();
            loop {
                let event = tokio::select! {
                    e = stream.next() => e,
                    _ = stop.changed() => None,
                };
                let Some(Ok(event)) = event else { break };
                let (job, gone) = match event {
                    kube::api::WatchEvent::Added(j) | kube::api::WatchEvent::Modified(j) => (j, false),
                    kube::api::WatchEvent::Deleted(j) => (j, true),
                    kube::api::WatchEvent::Bookmark(b) => {
                        version = b.metadata.resource_version;
                        continue;
                    }
                    kube::api::WatchEvent::Error(e) => panic!("the Job watch failed: {e:?}"),
                };
                version = job.metadata.resource_version.clone().unwrap_or_default();
                let (Some(name), Some(object)) = (job.metadata.name.clone(), object_of(&job)) else {
                    continue;
                };
                if gone {
                    known.remove(&name);
                    continue;
                }
                if !known.contains_key(&name) {
                    created += 1;
                }
                known.insert(name, (object.clone(), !finished(&job)));
                let unfinished: Vec<&String> = known
                    .iter()
                    .filter(|(_, (o, running))| *o == object && *running)
                    .map(|(n, _)| n)
                    .collect();
                if unfinished.len() > 1 {
                    overlaps.push(format!("{object}: {unfinished:?}"));
                }
            }
        }
        (created, overlaps)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_upgrade_with_changed_values_and_two_replicas_hands_leadership_over_with_one_job_per_object_and_no_failed_review()
 {
    let Some(inst) = Installed::start(true, &["controller.replicas=2"]).await else {
        return;
    };
    let admin = inst.admin.clone();
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), RELEASE_NAMESPACE, &common::terraform_clusters());
    let names = ["up-a", "up-b", "up-c"];
    let object = |name: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
            "metadata": { "name": name, "namespace": RELEASE_NAMESPACE },
            "spec": {
                "module": { "source": inst.modules.url("cluster.tar.gz") },
                "variables": { "name": name, "content": "v1" },
            },
        }))
        .unwrap()
    };
    for name in names {
        let report = inst.report(RELEASE_NAMESPACE).await;
        let (api, o) = (api.clone(), object(name));
        until(
            "the webhook admits the object",
            move || report.clone(),
            || {
                let (api, o) = (api.clone(), o.clone());
                async move { api.create(&PostParams::default(), &o).await.ok() }
            },
        )
        .await;
    }
    // Every object Ready with its generation applied: (name, generation) → the object.
    let all_applied = |content: &'static str| {
        let api = api.clone();
        async move {
            let mut done = Vec::new();
            for name in names {
                let o = serde_json::to_value(api.get(name).await.ok()?).ok()?;
                let applied = is_applied(&o)
                    && o["status"]["observedGeneration"] == o["metadata"]["generation"]
                    && o["spec"]["variables"]["content"] == content;
                if !applied {
                    return None;
                }
                done.push(o);
            }
            Some(done)
        }
    };
    let report = inst.report(RELEASE_NAMESPACE).await;
    until(
        "the three objects applied",
        move || report.clone(),
        || all_applied("v1"),
    )
    .await;
    let pods = Api::<Pod>::namespaced(admin.clone(), RELEASE_NAMESPACE);
    let pod_names = |component: &'static str| {
        let pods = pods.clone();
        async move {
            let mut names: Vec<String> = pods
                .list(&ListParams::default().labels(&format!("app.kubernetes.io/component={component}")))
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.metadata.name)
                .collect();
            names.sort();
            names
        }
    };
    let old_controllers = pod_names("controller").await;
    let old_webhooks = pod_names("webhook").await;
    assert_eq!(old_controllers.len(), 2, "two controller pods: {old_controllers:?}");
    assert_eq!(old_webhooks.len(), 2, "two webhook pods: {old_webhooks:?}");
    let leases = Api::<Lease>::namespaced(admin.clone(), RELEASE_NAMESPACE);
    let holder = leader_other_than(&leases, "", "a controller leads").await;
    assert!(
        old_controllers.contains(&holder),
        "{holder} is one of {old_controllers:?}"
    );

    // Reviews all along, and every Job watched, while the objects change and the chart is
    // upgraded with changed values (a new pod template for both Deployments: a rollout).
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let jobs = two_jobs_watch(Api::namespaced(admin.clone(), RELEASE_NAMESPACE), stop.clone());
    let started = std::time::Instant::now();
    let probe_object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
        "metadata": { "name": "upgrade-probe", "namespace": RELEASE_NAMESPACE },
        "spec": { "module": { "source": inst.modules.url("cluster.tar.gz") } },
    }))
    .unwrap();
    let load = review_load(api.clone(), probe_object, 25, stop);
    let change = {
        let api = api.clone();
        move |content: String| {
            let api = api.clone();
            async move {
                for name in names {
                    api.patch(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(&json!({"spec": {"variables": {"content": content}}})),
                    )
                    .await
                    .unwrap();
                }
            }
        }
    };
    // Changes every second and a half for as long as the upgrade lasts, so that Jobs are queued
    // and running while the controller pods are replaced and the lead changes hands.
    let (upgraded_tx, mut upgraded) = tokio::sync::watch::channel(false);
    let churn = tokio::spawn({
        let change = change.clone();
        async move {
            let mut round = 0;
            while !*upgraded.borrow() {
                round += 1;
                change(format!("v1.{round}")).await;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(1500)) => {}
                    _ = upgraded.changed() => {}
                }
            }
            round
        }
    });
    let upgrading = std::time::Instant::now();
    run(std::process::Command::new(inst.bin.join("helm"))
        .args(["upgrade", "captf"])
        .arg(&inst.chart)
        .args(["-n", RELEASE_NAMESPACE, "--reuse-values", "--wait", "--timeout", "4m"])
        .args(["--set", "controller.concurrency=3", "--set", "webhook.logFormat=text"])
        .args(["--kubeconfig"])
        .arg(&inst.kubeconfig));
    eprintln!("helm upgrade --wait took {:?}", upgrading.elapsed());
    upgraded_tx.send(true).unwrap();
    let rounds = churn.await.unwrap();
    change("v2".into()).await;
    let new_holder = leader_outside(&leases, &old_controllers, "a new controller pod takes the lead").await;
    let report = inst.report(RELEASE_NAMESPACE).await;
    until(
        "the changes applied across the upgrade",
        move || report.clone(),
        || all_applied("v2"),
    )
    .await;
    // After the upgrade, each object's next change is applied once more.
    change("v3".into()).await;
    let report = inst.report(RELEASE_NAMESPACE).await;
    let done = until(
        "a change applied after the upgrade",
        move || report.clone(),
        || all_applied("v3"),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_tx.send(true).unwrap();
    let (sent, failures) = load.await.unwrap();
    let (created, overlaps) = jobs.await.unwrap();
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "{sent} dry-run creates, {rounds} rounds of changes and {created} Jobs in {seconds:.1} s across the upgrade"
    );

    // The new pods run the new values; the old ones are gone.
    let new_controllers = pod_names("controller").await;
    let new_webhooks = pod_names("webhook").await;
    assert_eq!(new_controllers.len(), 2, "{new_controllers:?}");
    assert_eq!(new_webhooks.len(), 2, "{new_webhooks:?}");
    assert!(
        new_controllers.iter().all(|p| !old_controllers.contains(p))
            && new_webhooks.iter().all(|p| !old_webhooks.contains(p)),
        "every pod replaced: controllers {old_controllers:?} → {new_controllers:?}, webhooks {old_webhooks:?} → {new_webhooks:?}"
    );
    assert!(
        new_controllers.contains(&new_holder),
        "the lead passed to a new pod: {new_holder} of {new_controllers:?}"
    );
    for (component, flag) in [("controller", "--concurrency=3"), ("webhook", "--log-format=text")] {
        for p in pods
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/component={component}")))
            .await
            .unwrap()
        {
            let args = p.spec.unwrap().containers[0].args.clone().unwrap_or_default();
            assert!(args.iter().any(|a| a == flag), "{component} runs with {flag}: {args:?}");
        }
    }
    assert!(overlaps.is_empty(), "an object had two Jobs at once: {overlaps:?}");
    for o in &done {
        let seq = o["status"]["lastJobSeq"].as_u64().unwrap();
        assert!(seq >= 3, "each object applied v1, v2 and v3: {o}");
    }
    assert!(created >= names.len() * 2, "the changes ran Jobs: {created}");
    assert_every_review_passed("across the upgrade", sent, &failures, seconds);
}

//! The real Cluster API on the real control plane: `clusterctl init` (v1.14, offline, from local
//! repositories: the core and kubeadm bootstrap providers' components rendered from their pinned
//! module, CAPTF's from the repository's `clusterctl/` tree) installs the three providers; Cluster
//! API's core manager, its kubeadm bootstrap provider (CABPK) and CAPTF's controller and webhook
//! run with the arguments and service accounts of the Deployments clusterctl installed, and the
//! process kubelet runs CAPTF's runner Jobs (real OpenTofu and the test provider). Then a Cluster
//! whose infrastructure is a TerraformCluster is reconciled by them, and CABPK writes the join data
//! of its worker Machine, which CAPTF hands to the machine's module.
//!
//! `clusterctl init` installs the real cert-manager first, as it does for every user (from a local
//! repository: cert-manager's chart rendered to one manifest, its binaries built from its released
//! source; [`captf_kubetest::cert_manager`]), and cert-manager issues every provider's serving
//! certificate and injects their CA bundles. What differs from a cluster (said in docs/playground.md): the
//! managers run as processes, not as the pods of their Deployments, with their Services'
//! EndpointSlices pointing at them ([`captf_kubetest::route`]). Without the binaries or root these
//! tests fail under `CI` and skip elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use captf_kubetest::cert_manager::prerequisites_or_skip;
use captf_kubetest::route::{route_service, tls_files};
use captf_kubetest::{ControlPlane, Kubelet, Options, Tools, tools_or_skip};
use captf_sim::process_kubelet::ProcessImage;
use captf_testprovider::hypervisor::{BootRequest, Hypervisor};
use captf_testprovider::runner_image::{ModuleServer, THING_MODULE, WORLD_INSIDE, runner_image, tar_gz};
use captf_testprovider::world::{HOLD_ENV, World};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use common::{TEST_READY_TIMEOUT, free_port, run_ok as run};

/// Upper bound on a wait for a reconcile that runs real OpenTofu in a pod.
const PATIENCE: Duration = Duration::from_secs(240);
const NODE: &str = "cluster-api";
/// The runner image CAPTF's components are installed with (clusterctl variable
/// `CAPTF_RUNNER_IMAGE`), mapped by the kubelet to the runner's files.
const RUNNER_IMAGE: &str = "ghcr.io/captf/runner:cluster-api";
/// The release clusterctl installs: this workspace's, from its folder in the repository.
const CAPTF_VERSION: &str = concat!("v", env!("CARGO_PKG_VERSION"));
const NAMESPACE: &str = "default";

/// The tests here take turns: each runs one or two whole management clusters (a control plane,
/// Cluster API's manager, CAPTF, real OpenTofu), and several at once on a small machine starve
/// each other's webhooks into timeouts, which Cluster API answers with its growing backoff.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How CAPTF is installed on a management cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Install {
    /// `clusterctl init --infrastructure terraform`, its webhook and controller run as processes.
    Clusterctl,
    /// `helm install` of the chart, its pods run by the kubelet.
    Helm,
}
/// The API groups of the control plane and bootstrap providers the ClusterClass test stands in for.
const STAND_IN_CONTROL_PLANE_GROUP: &str = "controlplane.test.captf.io";
const STAND_IN_BOOTSTRAP_GROUP: &str = "bootstrap.test.captf.io";
/// The file in the world folder every change of the test provider waits for.
const GATE: &str = "gate";

/// The thing module with failure domains, as an infrastructure cluster's module would give them,
/// and two outputs its members receive (`spec.exports`): a network's ID and a sensitive join secret.
fn cluster_module() -> String {
    format!(
        "{THING_MODULE}\noutput \"failure_domains\" {{\n  value = {{\n    \"zone-a\" = {{ control_plane = true }}\n    \"zone-b\" = {{ control_plane = false, attributes = {{ rack = \"r2\" }} }}\n  }}\n}}\n{CLUSTER_EXPORTS_MODULE}"
    )
}

/// The outputs of [`cluster_module`] its members receive, and their declarations.
const CLUSTER_EXPORTS_MODULE: &str = r#"
output "network_id" {
  value = "net-${captftest_thing.main.id}"
}

output "join_secret" {
  value     = "js-${var.name}-0f3a"
  sensitive = true
}
"#;
const CLUSTER_EXPORTS: [&str; 2] = ["network_id", "join_secret"];

/// A machine's module: one thing holding the bootstrap data it was given (as a VM's user data),
/// the provider ID and addresses a cloud would give.
const MACHINE_MODULE: &str = r#"terraform {
  required_providers {
    captftest = { source = "captf.io/test/captftest" }
  }
}

variable "name" {
  type = string
}

variable "bootstrap_data_secret" {
  type = string
}

variable "bootstrap_data" {
  type      = string
  sensitive = true
}

variable "bootstrap_format" {
  type = string
}

variable "cluster_network_id" {
  type    = string
  default = ""
}

variable "cluster_join_secret" {
  type      = string
  default   = ""
  sensitive = true
}

resource "captftest_thing" "machine" {
  name    = var.name
  content = "${var.bootstrap_data_secret} ${var.bootstrap_format}\n${var.bootstrap_data}${var.cluster_network_id} ${var.cluster_join_secret}"
}

output "provider_id" {
  value = "captftest:///${captftest_thing.machine.id}"
}

output "addresses" {
  value = [
    { type = "InternalIP", address = "10.0.0.7" },
    { type = "Hostname", address = captftest_thing.machine.id },
  ]
}
"#;

/// The machine module the README shows: a VM that boots from the bootstrap data (the test's
/// hypervisor runs a node agent for it) and a network interface on the cluster's exported network.
const VM_MODULE: &str = include_str!("../../examples/modules/machine/main.tf");

/// A machine pool's module: one thing per replica, and their provider IDs.
const POOL_MODULE: &str = r#"terraform {
  required_providers {
    captftest = { source = "captf.io/test/captftest" }
  }
}

variable "name" {
  type = string
}

variable "replicas" {
  type    = number
  default = 1
}

resource "captftest_thing" "node" {
  count   = var.replicas
  name    = "${var.name}-${count.index}"
  content = var.name
}

output "provider_id_list" {
  value = [for n in captftest_thing.node : "captftest:///${n.id}"]
}
"#;

/// The cluster module for the cluster templates, which pass no variables: the thing is named after
/// the cluster (`cluster_name`, which CAPTF always passes).
fn template_cluster_module() -> String {
    cluster_module()
        .replace("variable \"name\"", "variable \"cluster_name\"")
        .replace("var.name", "var.cluster_name")
}

/// The bootstrap data of the Secret `name` ([`Management::create_bootstrap_data`]).
fn bootstrap_value(name: &str) -> String {
    format!("#cloud-config\nhostname: {name}\nruncmd: [kubeadm join]\n")
}

fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn capi_clusters() -> ApiResource {
    resource("cluster.x-k8s.io/v1beta2", "Cluster", "clusters")
}

fn capi_machines() -> ApiResource {
    resource("cluster.x-k8s.io/v1beta2", "Machine", "machines")
}

fn capi_machine_pools() -> ApiResource {
    resource("cluster.x-k8s.io/v1beta2", "MachinePool", "machinepools")
}

fn kubeadm_configs() -> ApiResource {
    resource("bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfig", "kubeadmconfigs")
}

fn terraform_machines() -> ApiResource {
    resource(
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "TerraformMachine",
        "terraformmachines",
    )
}

fn terraform_machine_pools() -> ApiResource {
    resource(
        "infrastructure.cluster.x-k8s.io/v1beta1",
        "TerraformMachinePool",
        "terraformmachinepools",
    )
}

/// `args` with every flag named in `replace` dropped and the replacements appended.
fn with_flags(args: &[String], drop: &[&str], add: &[String]) -> Vec<String> {
    args.iter()
        .filter(|a| !drop.iter().any(|d| *a == d || a.starts_with(&format!("{d}="))))
        .cloned()
        .chain(add.iter().cloned())
        .collect()
}

/// A control plane of the test's binaries, given the time a loaded machine needs to start it.
fn control_plane_options(tools: &Tools) -> Options {
    let mut opts = Options::new(tools.clone());
    opts.ready_timeout = TEST_READY_TIMEOUT;
    opts
}

fn spawn(program: &Path, args: &[String], env: &[(&str, String)], log: &Path) -> tokio::process::Child {
    let log = std::fs::File::create(log).unwrap();
    tokio::process::Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// One of Cluster API's managers as clusterctl installs it (the core provider's, or the kubeadm
/// bootstrap provider's, both built from the same module): the names its components give it.
struct CapiManager {
    /// The binary in `.tools/bin`, and its log in the control plane's work dir (`<binary>.log`).
    binary: &'static str,
    namespace: &'static str,
    deployment: &'static str,
    service_account: &'static str,
    /// The Secret cert-manager issues its webhook's serving certificate into.
    cert_secret: &'static str,
    webhook_service: &'static str,
}

const CORE_MANAGER: CapiManager = CapiManager {
    binary: "capi-manager",
    namespace: "capi-system",
    deployment: "capi-controller-manager",
    service_account: "capi-manager",
    cert_secret: "capi-webhook-service-cert",
    webhook_service: "capi-webhook-service",
};

/// CABPK, the kubeadm bootstrap provider (`clusterctl init --bootstrap kubeadm`).
const KUBEADM_BOOTSTRAP: CapiManager = CapiManager {
    binary: "capi-kubeadm-bootstrap",
    namespace: "capi-kubeadm-bootstrap-system",
    deployment: "capi-kubeadm-bootstrap-controller-manager",
    service_account: "capi-kubeadm-bootstrap-manager",
    cert_secret: "capi-kubeadm-bootstrap-webhook-service-cert",
    webhook_service: "capi-kubeadm-bootstrap-webhook-service",
};

/// What cert-manager made of a namespace's certificates, and how its own pods are, for a failure
/// that waited on it: each Certificate's and CertificateRequest's conditions, each pod's phase.
async fn cert_manager_report(admin: &kube::Client, namespace: &str) -> String {
    let mut out = Vec::new();
    for (plural, kind) in [
        ("certificates", "Certificate"),
        ("certificaterequests", "CertificateRequest"),
    ] {
        let ar = ApiResource {
            group: "cert-manager.io".into(),
            version: "v1".into(),
            api_version: "cert-manager.io/v1".into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        match Api::<DynamicObject>::namespaced_with(admin.clone(), namespace, &ar)
            .list(&ListParams::default())
            .await
        {
            Ok(list) => {
                for o in list.items {
                    let name = o.metadata.name.clone().unwrap_or_default();
                    out.push(format!("{kind} {namespace}/{name}: {}", o.data["status"]["conditions"]));
                }
            }
            Err(e) => out.push(format!("{kind}s in {namespace}: {e}")),
        }
    }
    match Api::<k8s_openapi::api::core::v1::Pod>::namespaced(admin.clone(), "cert-manager")
        .list(&ListParams::default())
        .await
    {
        Ok(pods) => {
            for p in pods.items {
                let status = p.status.unwrap_or_default();
                out.push(format!(
                    "pod cert-manager/{}: {:?} {:?}",
                    p.metadata.name.unwrap_or_default(),
                    status.phase,
                    status
                        .conditions
                        .unwrap_or_default()
                        .iter()
                        .map(|c| format!("{}={}", c.type_, c.status))
                        .collect::<Vec<_>>()
                ));
            }
        }
        Err(e) => out.push(format!("cert-manager's pods: {e}")),
    }
    out.join("\n")
}

impl CapiManager {
    /// Runs the manager as its Deployment runs it, under its own account, with the serving
    /// certificate cert-manager issued for its webhook Service, which is routed to it.
    async fn start(&self, cp: &ControlPlane, admin: &kube::Client, bin: &Path, host: &str) -> tokio::process::Child {
        let work = cp.work_dir();
        let args = common::clusterctl::deployment_args(admin, self.namespace, self.deployment, "manager").await;
        let certs = work.join(format!("{}-serving-certs", self.binary));
        std::fs::create_dir_all(&certs).unwrap();
        let issued = match tls_files(admin, self.namespace, self.cert_secret, PATIENCE).await {
            Ok(files) => files,
            Err(e) => panic!("{e}\n{}", cert_manager_report(admin, self.namespace).await),
        };
        for (k, v) in issued {
            std::fs::write(certs.join(k), v).unwrap();
        }
        let webhook_port = free_port();
        let kubeconfig = cp
            .service_account_kubeconfig(self.namespace, self.service_account)
            .await
            .unwrap();
        let child = spawn(
            &bin.join(self.binary),
            &with_flags(
                &args,
                // Leader election needs the pod's namespace, which a process out of a pod
                // cannot find; there is one manager of each.
                &["--leader-elect", "--diagnostics-address", "--insecure-diagnostics"],
                &[
                    format!("--kubeconfig={}", kubeconfig.display()),
                    format!("--webhook-port={webhook_port}"),
                    format!("--webhook-cert-dir={}", certs.display()),
                    // Ports nothing here reads: the kernel's choice at bind, so no other process
                    // can take them between a free_port() and the manager's bind (one that did
                    // stopped CABPK with "address already in use").
                    "--health-addr=127.0.0.1:0".into(),
                    "--diagnostics-address=127.0.0.1:0".into(),
                    "--insecure-diagnostics=true".into(),
                ],
            ),
            &[
                ("POD_NAMESPACE", self.namespace.into()),
                ("POD_NAME", self.deployment.into()),
            ],
            &work.join(format!("{}.log", self.binary)),
        );
        route_service(admin, self.namespace, self.webhook_service, host, webhook_port)
            .await
            .unwrap();
        child
    }
}

struct Management {
    // Dropped in this order: the managers and the kubelet before the control plane.
    _capi: tokio::process::Child,
    /// CABPK, when this management cluster has it ([`Management::start`]'s; the move tests' do
    /// not need it).
    _kubeadm_bootstrap: Option<tokio::process::Child>,
    // CAPTF's webhook and controller as processes (installed by clusterctl), or none (installed
    // by Helm: the kubelet runs the chart's pods).
    _webhook: Option<tokio::process::Child>,
    _controller: Option<tokio::process::Child>,
    _kubelet: Kubelet,
    cp: ControlPlane,
    admin: kube::Client,
    modules: ModuleServer,
    /// What `clusterctl init` printed.
    init_output: String,
    /// The runner image the kubelet runs (shared by a second management cluster, so that the
    /// runners of both manage one world).
    image: ProcessImage,
    /// The world folder the test provider manages, and the gate every change of it waits for
    /// ([`HOLD_ENV`]): open unless a test removes it.
    world_dir: PathBuf,
    gate: PathBuf,
    /// `.tools/bin`, where clusterctl is.
    bin: PathBuf,
    /// The local clusterctl repository `clusterctl init` installed from.
    repo: PathBuf,
    /// The kubeadm providers' CRDs setup-tools rendered.
    kubeadm_crds: PathBuf,
    /// Set once the stand-in providers are installed ([`Management::install_stand_in_providers`]).
    stand_ins: tokio::sync::OnceCell<()>,
    /// The control plane's binaries, for a workload cluster's control plane of a check.
    tools: Tools,
    files: tempfile::TempDir,
    _root: tempfile::TempDir,
}

impl Management {
    /// The shared management cluster: with the kubeadm bootstrap provider.
    async fn start() -> Option<Management> {
        Management::start_with(None, Install::Clusterctl, true).await
    }

    /// A management cluster whose kubelet runs `image` (another one's, see [`Management::image`]),
    /// or a runner image of its own.
    /// With `kubeadm`, clusterctl also installs Cluster API's kubeadm bootstrap provider, which
    /// runs beside the core manager.
    async fn start_with(image: Option<(ProcessImage, PathBuf)>, install: Install, kubeadm: bool) -> Option<Management> {
        let tools = tools_or_skip()?;
        let bin = tools.etcd.parent().unwrap().to_path_buf();
        let tools_root = bin.parent().unwrap().to_path_buf();
        // The pods (cert-manager's, the chart's) share the host's network at its address, one an
        // EndpointSlice may hold; the managers run as processes serve there too.
        let (cert_manager, host) = prerequisites_or_skip(
            &bin,
            &[
                "clusterctl",
                CORE_MANAGER.binary,
                KUBEADM_BOOTSTRAP.binary,
                "kubectl",
                "helm",
            ],
        )?;
        let files = tempfile::tempdir().unwrap();
        let (image, world_dir) = match image {
            Some(shared) => shared,
            None => match runner_image(files.path()) {
                Ok(own) => (own.image.env(HOLD_ENV, format!("{WORLD_INSIDE}/{GATE}")), own.world),
                Err(e) => {
                    captf_testsupport::cannot_run(format!("the runner's image cannot be assembled: {e}"));
                    return None;
                }
            },
        };
        let gate = world_dir.join(GATE);
        std::fs::write(&gate, "").unwrap();
        let mut archives = Vec::new();
        for (name, text) in [
            ("cluster", cluster_module()),
            ("machine", MACHINE_MODULE.to_string()),
            ("pool", POOL_MODULE.to_string()),
            ("template-cluster", template_cluster_module()),
            ("vm", VM_MODULE.to_string()),
        ] {
            let archive = tar_gz(&files.path().join("modules").join(name), &text).unwrap();
            archives.push((format!("{name}.tar.gz"), archive));
        }
        let modules = ModuleServer::start(archives).await.unwrap();
        let cp = ControlPlane::start(control_plane_options(&tools)).await.unwrap();
        let admin = cp.admin_client().await.unwrap();
        let root = tempfile::tempdir().unwrap();
        let mut kubelet_options = cp
            .kubelet_options(NODE, root.path())
            .host_network(host)
            .image(RUNNER_IMAGE, image.clone());
        for (name, files) in cert_manager.images() {
            kubelet_options = kubelet_options.image(name, files);
        }
        if install == Install::Helm {
            // The chart's images are the workspace's binaries and the runner's image.
            kubelet_options = kubelet_options
                .image(common::chart::default_image("runner"), image.clone())
                .image(
                    common::chart::default_image("controller"),
                    ProcessImage::new("/captf-controller").file("/captf-controller", common::controller_binary()),
                )
                .image(
                    common::chart::default_image("webhook"),
                    ProcessImage::new("/captf-webhook")
                        .file("/captf-webhook", common::webhook::binary("captf-webhook")),
                );
        }
        let kubelet = cp.start_kubelet(kubelet_options).await.unwrap();
        let kubeconfig = cp.admin_kubeconfig();

        let repo = common::clusterctl::local_repository(&tools_root, files.path(), &cert_manager, &[CAPTF_VERSION]);
        let infrastructure = match install {
            Install::Clusterctl => vec!["--infrastructure".to_string(), format!("terraform:{CAPTF_VERSION}")],
            Install::Helm => vec![],
        };
        let release = common::clusterctl::capi_version(&tools_root);
        // The kubeadm bootstrap provider of the same release (CABPK); no control plane provider:
        // the tests stand in for one.
        let bootstrap = if kubeadm {
            format!("kubeadm:{release}")
        } else {
            "-".to_string()
        };
        let init_output = run(std::process::Command::new(bin.join("clusterctl"))
            .args(["init", "--config"])
            .arg(repo.join("clusterctl.yaml"))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--core", &format!("cluster-api:{release}")])
            .args(&infrastructure)
            .args(["--bootstrap", &bootstrap, "--control-plane", "-"])
            .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
            .env("XDG_CONFIG_HOME", files.path().join("config"))
            .env("CAPTF_RUNNER_IMAGE", RUNNER_IMAGE)
            // ClusterClass topology, as most management clusters run it.
            .env("CLUSTER_TOPOLOGY", "true"));

        let host = host.to_string();

        // Cluster API's core manager and its kubeadm bootstrap provider, as their Deployments run
        // them, under their own accounts.
        let (capi, kubeadm_bootstrap) = tokio::join!(CORE_MANAGER.start(&cp, &admin, &bin, &host), async {
            match kubeadm {
                true => Some(KUBEADM_BOOTSTRAP.start(&cp, &admin, &bin, &host).await),
                false => None,
            }
        });

        let (webhook, controller) = match install {
            Install::Clusterctl => {
                let (w, c) = start_clusterctl_installed_captf(&cp, &admin, &host).await;
                (Some(w), Some(c))
            }
            Install::Helm => {
                helm_install_captf(&cp, &bin).await;
                (None, None)
            }
        };
        let m = Management {
            _capi: capi,
            _kubeadm_bootstrap: kubeadm_bootstrap,
            _webhook: webhook,
            _controller: controller,
            _kubelet: kubelet,
            cp,
            admin,
            modules,
            init_output,
            image,
            world_dir,
            gate,
            kubeadm_crds: tools_root.join("capi/kubeadm-crds"),
            stand_ins: tokio::sync::OnceCell::new(),
            tools,
            repo,
            bin,
            files,
            _root: root,
        };
        m.until_cluster_api_serves().await;
        Some(m)
    }

    /// Waits until Cluster API's webhooks answer: a dry-run create of a Cluster goes through the
    /// core manager's defaulting webhook, one of a KubeadmConfig through CABPK's validating one.
    async fn until_cluster_api_serves(&self) {
        let cluster = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": { "name": "probe", "namespace": NAMESPACE },
            "spec": {
                "paused": true,
                "infrastructureRef": {
                    "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformCluster", "name": "probe",
                },
            },
        });
        // Its schema wants a spec with at least one field.
        let kubeadm_config = json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
            "metadata": { "name": "probe", "namespace": NAMESPACE },
            "spec": { "format": "cloud-config" },
        });
        let mut probes = vec![(capi_clusters(), cluster, &CORE_MANAGER)];
        if self._kubeadm_bootstrap.is_some() {
            probes.push((kubeadm_configs(), kubeadm_config, &KUBEADM_BOOTSTRAP));
        }
        for (ar, probe, manager) in probes {
            let probe: DynamicObject = serde_json::from_value(probe).unwrap();
            let log = self.cp.work_dir().join(format!("{}.log", manager.binary));
            let deadline = std::time::Instant::now() + PATIENCE;
            loop {
                match self
                    .api(&ar)
                    .create(
                        &PostParams {
                            dry_run: true,
                            ..Default::default()
                        },
                        &probe,
                    )
                    .await
                {
                    Ok(_) => break,
                    Err(e) if std::time::Instant::now() > deadline => panic!(
                        "{}'s webhook did not answer within {PATIENCE:?}: {e}\n{} log:\n{}",
                        manager.binary,
                        manager.binary,
                        std::fs::read_to_string(&log).unwrap_or_default()
                    ),
                    Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            }
        }
    }

    fn api(&self, ar: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.admin.clone(), NAMESPACE, ar)
    }

    /// A TerraformCluster of the module with failure domains, and a Cluster naming it as its
    /// infrastructure.
    async fn create_cluster(&self, name: &str) {
        let infra: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
            "metadata": { "name": name, "namespace": NAMESPACE },
            "spec": {
                "module": { "source": self.modules.url("cluster.tar.gz") },
                "variables": { "name": name },
                "exports": CLUSTER_EXPORTS,
            },
        }))
        .unwrap();
        self.api(&common::terraform_clusters())
            .create(&PostParams::default(), &infra)
            .await
            .unwrap();
        let cluster: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": { "name": name, "namespace": NAMESPACE },
            "spec": {
                "infrastructureRef": {
                    "apiGroup": "infrastructure.cluster.x-k8s.io",
                    "kind": "TerraformCluster",
                    "name": name,
                },
            },
        }))
        .unwrap();
        self.api(&capi_clusters())
            .create(&PostParams::default(), &cluster)
            .await
            .unwrap();
    }

    /// Creates `o` (a JSON object with apiVersion, kind and metadata) in the test namespace.
    async fn create(&self, ar: &ApiResource, o: Value) {
        let o: DynamicObject = serde_json::from_value(o).unwrap();
        self.api(ar).create(&PostParams::default(), &o).await.unwrap();
    }

    /// A bootstrap data Secret of Cluster `cluster`, as a bootstrap provider would write it: its
    /// value is [`bootstrap_value`] of `name`.
    async fn create_bootstrap_data(&self, cluster: &str, name: &str) {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {
                "name": name, "namespace": NAMESPACE,
                "labels": { "cluster.x-k8s.io/cluster-name": cluster },
            },
            "type": "cluster.x-k8s.io/secret",
            "stringData": { "value": bootstrap_value(name), "format": "cloud-config" },
        }))
        .unwrap();
        Api::<Secret>::namespaced(self.admin.clone(), NAMESPACE)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    /// The workload cluster's kubeconfig Secret (`<cluster>-kubeconfig`), as a control plane
    /// provider would write it, naming this same API server: Cluster API's MachinePool controller
    /// reads the nodes of the workload cluster before it copies the provider IDs, so it needs one
    /// it can reach.
    async fn create_workload_kubeconfig(&self, cluster: &str) {
        let kubeconfig = std::fs::read_to_string(self.cp.admin_kubeconfig()).unwrap();
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {
                "name": format!("{cluster}-kubeconfig"), "namespace": NAMESPACE,
                "labels": { "cluster.x-k8s.io/cluster-name": cluster },
            },
            "type": "cluster.x-k8s.io/secret",
            "stringData": { "value": kubeconfig },
        }))
        .unwrap();
        Api::<Secret>::namespaced(self.admin.clone(), NAMESPACE)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    /// A Machine `name` of Cluster `cluster` whose infrastructure is the TerraformMachine `name`
    /// of the machine module, with bootstrap data made here (no bootstrap provider runs); one of
    /// the control plane when `control_plane`.
    async fn create_machine(&self, cluster: &str, name: &str, control_plane: bool) {
        let bootstrap = format!("{name}-bootstrap");
        self.create_bootstrap_data(cluster, &bootstrap).await;
        self.create(
            &terraform_machines(),
            json!({
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformMachine",
                "metadata": { "name": name, "namespace": NAMESPACE },
                "spec": {
                    "module": { "source": self.modules.url("machine.tar.gz") },
                    "variables": { "name": name },
                },
            }),
        )
        .await;
        let labels = if control_plane {
            json!({ "cluster.x-k8s.io/control-plane": "" })
        } else {
            json!({})
        };
        self.create(
            &capi_machines(),
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
                "metadata": { "name": name, "namespace": NAMESPACE, "labels": labels },
                "spec": {
                    "clusterName": cluster,
                    "bootstrap": { "dataSecretName": bootstrap },
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "TerraformMachine",
                        "name": name,
                    },
                },
            }),
        )
        .await;
        // Owned within the Machine's graph, as a bootstrap provider's Secret is (through its
        // bootstrap config), so `clusterctl move` takes it along.
        let machine = self.api(&capi_machines()).get(name).await.unwrap();
        Api::<Secret>::namespaced(self.admin.clone(), NAMESPACE)
            .patch(
                &bootstrap,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "metadata": { "ownerReferences": [{
                    "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": name,
                    "uid": machine.metadata.uid,
                }] } })),
            )
            .await
            .unwrap();
    }

    /// The first object of `ar` labelled with Cluster `cluster` that satisfies `f`, waiting (wall
    /// time) until there is one.
    async fn until_one_of(&self, ar: &ApiResource, cluster: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let api = self.api(ar);
        let params = ListParams::default().labels(&format!("cluster.x-k8s.io/cluster-name={cluster}"));
        let found = tokio::time::timeout(PATIENCE, async {
            loop {
                if let Ok(list) = api.list(&params).await {
                    for o in list {
                        let v = serde_json::to_value(&o).unwrap();
                        if f(&v) {
                            return v;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
        .await;
        found.unwrap_or_else(|_| {
            let log = std::fs::read_to_string(self.cp.work_dir().join("capi-manager.log")).unwrap_or_default();
            panic!(
                "{} of Cluster {cluster}: {what} not within {PATIENCE:?}\ncapi-manager log (tail):\n{}",
                ar.kind,
                tail(&log, 80)
            )
        })
    }

    /// Cluster API's manager may use the objects of `groups`, through its aggregated role, as a
    /// provider's components grant it.
    async fn grant_cluster_api(&self, name: &str, groups: &[&str]) {
        let role: ClusterRole = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": { "cluster.x-k8s.io/aggregate-to-manager": "true" },
            },
            "rules": [{ "apiGroups": groups, "resources": ["*"], "verbs": ["*"] }],
        }))
        .unwrap();
        Api::<ClusterRole>::all(self.admin.clone())
            .create(&PostParams::default(), &role)
            .await
            .unwrap();
    }

    /// The kubeadm control plane provider's CRDs, without its controller (the cluster templates
    /// name its kinds), and Cluster API's rights on them. The kubeadm bootstrap provider's CRDs
    /// came with the provider (`clusterctl init --bootstrap kubeadm`): applying the bare CRDs over
    /// them would fight clusterctl over their conversion webhook's Service.
    async fn install_kubeadm_crds(&self) {
        run(std::process::Command::new(self.bin.join("kubectl"))
            .arg("--kubeconfig")
            .arg(self.cp.admin_kubeconfig())
            .args(["apply", "--server-side", "-f"])
            .arg(self.kubeadm_crds.join("controlplane.yaml")));
        self.grant_cluster_api("captf-test-kubeadm", &["controlplane.cluster.x-k8s.io"])
            .await;
        // Polled, not `kubectl wait`: that fails at once on a CRD whose status has no conditions
        // yet, as one just applied may not.
        let crds: Api<CustomResourceDefinition> = Api::all(self.admin.clone());
        for name in [
            "kubeadmcontrolplanes.controlplane.cluster.x-k8s.io",
            "kubeadmcontrolplanetemplates.controlplane.cluster.x-k8s.io",
            "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
            "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
        ] {
            let established = || async {
                crds.get_opt(name).await.ok().flatten().is_some_and(|c| {
                    c.status
                        .and_then(|s| s.conditions)
                        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"))
                })
            };
            tokio::time::timeout(PATIENCE, async {
                while !established().await {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("the CRD {name} not Established within {PATIENCE:?}"));
        }
    }

    /// `clusterctl generate cluster <args>` from the local repository, with the cluster templates'
    /// CAPTF variables set to the test's modules: what it printed.
    fn generate_cluster(&self, args: &[&str]) -> String {
        run(std::process::Command::new(self.bin.join("clusterctl"))
            .args(["generate", "cluster"])
            .args(args)
            .arg("--config")
            .arg(self.repo.join("clusterctl.yaml"))
            .arg("--kubeconfig")
            .arg(self.cp.admin_kubeconfig())
            .args(["--infrastructure", &format!("terraform:{CAPTF_VERSION}")])
            .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
            .env("XDG_CONFIG_HOME", self.files.path().join("config"))
            .env("CAPTF_CLUSTER_MODULE", self.modules.url("template-cluster.tar.gz"))
            .env("CAPTF_MACHINE_MODULE", self.modules.url("machine.tar.gz")))
    }

    /// `kubectl apply --server-side` of `yaml`: what it printed.
    fn apply(&self, yaml: &str) -> String {
        let file = self.files.path().join("apply.yaml");
        std::fs::write(&file, yaml).unwrap();
        run(std::process::Command::new(self.bin.join("kubectl"))
            .arg("--kubeconfig")
            .arg(self.cp.admin_kubeconfig())
            .args(["apply", "--server-side", "-f"])
            .arg(&file))
    }

    /// A control plane provider and a bootstrap provider as far as ClusterClass topology and the
    /// kubeadm bootstrap provider need them: their template and object CRDs (any fields, Cluster
    /// API's contract label), the rights Cluster API's manager gets for them through its aggregated
    /// role, and CABPK's reading of the control plane kind. Nothing reconciles their objects: the
    /// test plays that part. Installed once, by the first check that needs them.
    async fn install_stand_in_providers(&self) {
        self.stand_ins.get_or_init(|| self.install_stand_ins()).await;
    }

    async fn install_stand_ins(&self) {
        let crds = Api::<DynamicObject>::all_with(
            self.admin.clone(),
            &resource(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "customresourcedefinitions",
            ),
        );
        for (group, kind) in [
            (STAND_IN_CONTROL_PLANE_GROUP, "TestControlPlaneTemplate"),
            (STAND_IN_CONTROL_PLANE_GROUP, "TestControlPlane"),
            (STAND_IN_BOOTSTRAP_GROUP, "TestConfigTemplate"),
            (STAND_IN_BOOTSTRAP_GROUP, "TestConfig"),
        ] {
            let plural = format!("{}s", kind.to_lowercase());
            let crd: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {
                    "name": format!("{plural}.{group}"),
                    "labels": { "cluster.x-k8s.io/v1beta2": "v1alpha1" },
                },
                "spec": {
                    "group": group,
                    "scope": "Namespaced",
                    "names": {
                        "kind": kind, "listKind": format!("{kind}List"),
                        "plural": plural, "singular": kind.to_lowercase(),
                    },
                    "versions": [{
                        "name": "v1alpha1", "served": true, "storage": true,
                        "subresources": { "status": {} },
                        "schema": { "openAPIV3Schema": {
                            "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        } },
                    }],
                },
            }))
            .unwrap();
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
        self.grant_cluster_api(
            "captf-test-stand-in-providers",
            &[STAND_IN_CONTROL_PLANE_GROUP, STAND_IN_BOOTSTRAP_GROUP],
        )
        .await;
        // CABPK (v1.14) reads the Cluster's control plane object for its version, whatever its
        // kind, but its own role grants only KubeadmControlPlanes: a control plane provider of
        // another kind grants CABPK's account the reading of its kind, as this one does.
        let name = "captf-test-stand-in-control-plane-for-kubeadm-bootstrap";
        let role: ClusterRole = serde_json::from_value(json!({
            "metadata": { "name": name },
            "rules": [{
                "apiGroups": [STAND_IN_CONTROL_PLANE_GROUP],
                "resources": ["testcontrolplanes"],
                "verbs": ["get", "list", "watch"],
            }],
        }))
        .unwrap();
        Api::<ClusterRole>::all(self.admin.clone())
            .create(&PostParams::default(), &role)
            .await
            .unwrap();
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": { "name": name },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name },
            "subjects": [{
                "kind": "ServiceAccount",
                "namespace": KUBEADM_BOOTSTRAP.namespace,
                "name": KUBEADM_BOOTSTRAP.service_account,
            }],
        }))
        .unwrap();
        Api::<ClusterRoleBinding>::all(self.admin.clone())
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
        // Served once the API server has established them.
        let templates = self.api(&resource(
            &format!("{STAND_IN_BOOTSTRAP_GROUP}/v1alpha1"),
            "TestConfig",
            "testconfigs",
        ));
        tokio::time::timeout(PATIENCE, async {
            while templates.list(&ListParams::default()).await.is_err() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("the stand-in CRDs are served");
    }

    /// Waits (wall time) until the object satisfies `f`, failing with the managers' logs.
    async fn until(&self, ar: &ApiResource, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let api = self.api(ar);
        let found = tokio::time::timeout(PATIENCE, async {
            loop {
                if let Ok(o) = api.get(name).await {
                    let v = serde_json::to_value(&o).unwrap();
                    if f(&v) {
                        return v;
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
        .await;
        match found {
            Ok(v) => v,
            Err(_) => {
                let last = api.get(name).await.map(|o| serde_json::to_value(o).unwrap());
                let log = |f: &str| std::fs::read_to_string(self.cp.work_dir().join(f)).unwrap_or_default();
                panic!(
                    "{} {name}: {what} not within {PATIENCE:?}; the object: {last:?}\ncaptf-controller log:\n{}\ncapi-manager log (tail):\n{}\ncapi-kubeadm-bootstrap log (tail):\n{}",
                    ar.kind,
                    log("captf-controller.log"),
                    tail(&log("capi-manager.log"), 60),
                    tail(&log("capi-kubeadm-bootstrap.log"), 40),
                )
            }
        }
    }

    /// The Jobs in the test namespace: name and `captf.io/op`.
    async fn jobs_with_ops(&self) -> Vec<(String, String)> {
        Api::<Job>::namespaced(self.admin.clone(), NAMESPACE)
            .list(&ListParams::default())
            .await
            .unwrap()
            .into_iter()
            .map(|j| {
                let op = j
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("captf.io/op").cloned())
                    .unwrap_or_default();
                (j.metadata.name.unwrap_or_default(), op)
            })
            .collect()
    }

    fn clusterctl(&self) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(self.bin.join("clusterctl"));
        c.env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
            .env("XDG_CONFIG_HOME", self.files.path().join("config"))
            .kill_on_drop(true);
        c
    }

    async fn jobs(&self) -> Vec<String> {
        Api::<Job>::namespaced(self.admin.clone(), NAMESPACE)
            .list(&ListParams::default())
            .await
            .unwrap()
            .into_iter()
            .filter_map(|j| j.metadata.name)
            .collect()
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The version of the core provider's local repository setup-tools rendered.
fn condition<'a>(o: &'a Value, kind: &str) -> Option<&'a Value> {
    o["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
}

fn is_true(o: &Value, kind: &str) -> bool {
    condition(o, kind).is_some_and(|c| c["status"] == "True")
}

/// One management cluster (`clusterctl init` of Cluster API's core and kubeadm bootstrap providers
/// and CAPTF with cert-manager, Cluster API's managers, CAPTF) serves the five checks below in
/// turn: starting one costs about as much as a check, and none of them needs a cluster of its own.
/// Each check names its objects apart (`first`, `fleet`, `classy`, `prod`, `topo` and `joined`).
/// The move tests start their own pairs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_management_cluster_serves_init_machines_a_cluster_class_the_cluster_templates_and_kubeadm_join_data() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let t = std::time::Instant::now();
    let Some(m) = Management::start().await else { return };
    eprintln!("the management cluster started in {:.1?}", t.elapsed());
    // First: it counts the Jobs, which no other check's objects have started yet.
    timed(
        "clusterctl init's check",
        clusterctl_init_installs_the_providers_and_cluster_api_takes_the_terraform_cluster_as_its_infrastructure(&m),
    )
    .await;
    timed(
        "the machines' check",
        machines_get_provider_id_and_addresses_and_a_machine_pool_scales_from_two_to_three(&m),
    )
    .await;
    timed(
        "the ClusterClass check",
        a_cluster_class_on_terraform_templates_creates_the_objects_and_a_template_change_rolls_out(&m),
    )
    .await;
    timed(
        "the cluster templates' check",
        the_cluster_templates_clusterctl_generates_apply_and_captf_provisions_their_infrastructure(&m),
    )
    .await;
    timed(
        "the kubeadm bootstrap check",
        kubeadm_bootstrap_writes_join_data_for_a_worker_of_a_terraform_cluster(&m),
    )
    .await;
}

/// Runs one check and prints how long it took.
async fn timed(what: &str, check: impl std::future::Future<Output = ()>) {
    let t = std::time::Instant::now();
    check.await;
    eprintln!("{what} in {:.1?}", t.elapsed());
}

async fn clusterctl_init_installs_the_providers_and_cluster_api_takes_the_terraform_cluster_as_its_infrastructure(
    m: &Management,
) {
    assert!(
        m.init_output
            .contains("Your management cluster has been initialized successfully!"),
        "{}",
        m.init_output
    );
    assert!(
        !m.init_output.contains("unrecognized format"),
        "the API server warned about the CRDs:\n{}",
        m.init_output
    );
    assert!(
        m.init_output.contains("Installing cert-manager"),
        "clusterctl installs cert-manager itself:\n{}",
        m.init_output
    );
    for provider in ["cluster-api", "bootstrap-kubeadm", "infrastructure-terraform"] {
        assert!(
            m.init_output.contains(&format!("Installing provider=\"{provider}\"")),
            "clusterctl installs {provider}:\n{}",
            m.init_output
        );
    }
    // Every provider's serving certificate is issued by the real cert-manager (Ready, with the
    // issuer's CA in the Secret), for the names of its webhook Service.
    let certificates: Api<DynamicObject> = Api::all_with(
        m.admin.clone(),
        &ApiResource {
            group: "cert-manager.io".into(),
            version: "v1".into(),
            api_version: "cert-manager.io/v1".into(),
            kind: "Certificate".into(),
            plural: "certificates".into(),
        },
    );
    // cert-manager issues them shortly after the providers' Deployments are up: polled, bounded.
    let wanted = [
        "capi-system/capi-serving-cert",
        "capi-kubeadm-bootstrap-system/capi-kubeadm-bootstrap-serving-cert",
        "captf-system/captf-webhook",
    ];
    let deadline = std::time::Instant::now() + PATIENCE;
    let issued: Vec<String> = loop {
        let issued: Vec<String> = certificates
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|c| is_true(&serde_json::to_value(c).unwrap(), "Ready"))
            .map(|c| {
                format!(
                    "{}/{}",
                    c.metadata.namespace.clone().unwrap_or_default(),
                    c.metadata.name.clone().unwrap_or_default()
                )
            })
            .collect();
        if wanted.iter().all(|w| issued.iter().any(|c| c == w)) || std::time::Instant::now() > deadline {
            break issued;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    for wanted in wanted {
        assert!(
            issued.iter().any(|c| c == wanted),
            "{wanted} issued by cert-manager: {issued:?}"
        );
    }
    m.create_cluster("first").await;

    // CAPTF applies under the Cluster: Ready, with the endpoint and failure domains of the outputs.
    let infra = m
        .until(
            &common::terraform_clusters(),
            "first",
            "Ready with Cluster API's owner",
            |o| {
                is_true(o, "Ready")
                    && o["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|r| r.iter().any(|r| r["kind"] == "Cluster" && r["name"] == "first"))
            },
        )
        .await;
    let host = infra["spec"]["controlPlaneEndpoint"]["host"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(host.ends_with(".example"), "{infra}");

    // Cluster API reads the contract: provisioned, the endpoint copied, the failure domains shown.
    let cluster = m
        .until(&capi_clusters(), "first", "infrastructure provisioned", |o| {
            o["status"]["initialization"]["infrastructureProvisioned"] == true
                && o["spec"]["controlPlaneEndpoint"]["host"].is_string()
                && o["status"]["failureDomains"].is_array()
        })
        .await;
    assert_eq!(
        cluster["spec"]["controlPlaneEndpoint"],
        json!({"host": host, "port": 6443})
    );
    let domains = cluster["status"]["failureDomains"].as_array().unwrap();
    let names: Vec<&str> = domains.iter().filter_map(|d| d["name"].as_str()).collect();
    assert_eq!(names, ["zone-a", "zone-b"], "{cluster}");
    assert_eq!(domains[0]["controlPlane"], true);
    assert_eq!(domains[1]["attributes"]["rack"], "r2");

    // Pause through the Cluster: an input change starts no Job until the Cluster is unpaused.
    m.api(&capi_clusters())
        .patch(
            "first",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"paused": true}})),
        )
        .await
        .unwrap();
    m.until(&common::terraform_clusters(), "first", "Paused", |o| {
        is_true(o, "Paused")
    })
    .await;
    let jobs_before = m.jobs().await;
    let changed = m
        .api(&common::terraform_clusters())
        .patch(
            "first",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"variables": {"content": "v2"}}})),
        )
        .await
        .unwrap();
    let generation = changed.metadata.generation.unwrap();
    // The controller has seen the change (it reports the generation it observed) and holds it.
    m.until(
        &common::terraform_clusters(),
        "first",
        "the change observed while paused",
        |o| is_true(o, "Paused") && condition(o, "Paused").is_some_and(|c| c["observedGeneration"] == generation),
    )
    .await;
    assert_eq!(m.jobs().await, jobs_before, "no Job starts while the Cluster is paused");
    m.api(&capi_clusters())
        .patch(
            "first",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"paused": false}})),
        )
        .await
        .unwrap();
    m.until(
        &common::terraform_clusters(),
        "first",
        "the change applied after unpausing",
        |o| {
            is_true(o, "Ready")
                && is_true(o, "UpToDate")
                && !is_true(o, "Paused")
                && o["status"]["observedGeneration"] == generation
        },
    )
    .await;
    // Finished Jobs are pruned to the history limit, so count names, not Jobs: a new one ran.
    let jobs_after = m.jobs().await;
    assert!(
        jobs_after.iter().any(|j| !jobs_before.contains(j)),
        "unpausing ran the change: no new Job among {jobs_after:?} (before: {jobs_before:?})"
    );
}

async fn machines_get_provider_id_and_addresses_and_a_machine_pool_scales_from_two_to_three(m: &Management) {
    m.create_cluster("fleet").await;
    m.until(&capi_clusters(), "fleet", "infrastructure provisioned", |o| {
        o["status"]["initialization"]["infrastructureProvisioned"] == true
    })
    .await;

    // A Machine whose infrastructure is a TerraformMachine, with bootstrap data made here (no
    // bootstrap provider runs).
    m.create_machine("fleet", "fleet-m0", false).await;

    // Cluster API owns and labels the TerraformMachine; CAPTF applies it with the bootstrap data
    // Secret's name and sets the provider ID and addresses from the outputs.
    let infra = m
        .until(
            &terraform_machines(),
            "fleet-m0",
            "provisioned under its Machine",
            |o| {
                o["status"]["initialization"]["provisioned"] == true
                    && o["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "fleet"
                    && o["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|r| r.iter().any(|r| r["kind"] == "Machine" && r["name"] == "fleet-m0"))
            },
        )
        .await;
    assert_eq!(infra["spec"]["providerID"], "captftest:///thing-fleet-m0", "{infra}");
    // The module got the bootstrap data by value: the "VM" holds its Secret's name, its format and
    // the cloud-config itself.
    let vm = World::new(&m.world_dir)
        .read("fleet-m0")
        .unwrap()
        .expect("the machine's thing");
    // And its cluster's exports: the network's ID and the sensitive join secret, which reaches
    // neither the machine's status nor the cluster's.
    assert_eq!(
        vm.content,
        format!(
            "fleet-m0-bootstrap cloud-config\n{}net-thing-fleet js-fleet-0f3a",
            bootstrap_value("fleet-m0-bootstrap")
        )
    );
    let fleet = m.api(&common::terraform_clusters()).get("fleet").await.unwrap();
    for status in [
        infra["status"].to_string(),
        serde_json::to_string(&fleet.data["status"]).unwrap(),
    ] {
        assert!(!status.contains("js-fleet-0f3a"), "{status}");
    }
    assert_eq!(
        infra["status"]["outputs"]["provider_id"], "captftest:///thing-fleet-m0",
        "{infra}"
    );

    // Cluster API's Machine controller reads the contract: provisioned, the provider ID and the
    // addresses copied onto the Machine.
    let machine = m
        .until(
            &capi_machines(),
            "fleet-m0",
            "the provider ID and addresses copied",
            |o| {
                o["status"]["initialization"]["infrastructureProvisioned"] == true
                    && o["spec"]["providerID"].is_string()
                    && o["status"]["addresses"].is_array()
            },
        )
        .await;
    assert_eq!(
        machine["spec"]["providerID"], "captftest:///thing-fleet-m0",
        "{machine}"
    );
    assert_eq!(
        machine["status"]["addresses"],
        json!([
            { "type": "InternalIP", "address": "10.0.0.7" },
            { "type": "Hostname", "address": "thing-fleet-m0" },
        ]),
        "{machine}"
    );

    // A MachinePool of 2 whose infrastructure is a TerraformMachinePool: the module gets the
    // replicas, Cluster API gets the provider ID list (once it can reach the workload cluster,
    // played by this same API server).
    m.create_workload_kubeconfig("fleet").await;
    m.create_bootstrap_data("fleet", "fleet-pool-bootstrap").await;
    m.create(
        &terraform_machine_pools(),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformMachinePool",
            "metadata": { "name": "fleet-pool", "namespace": NAMESPACE },
            "spec": {
                "module": { "source": m.modules.url("pool.tar.gz") },
                "variables": { "name": "fleet-pool" },
            },
        }),
    )
    .await;
    m.create(
        &capi_machine_pools(),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
            "metadata": { "name": "fleet-pool", "namespace": NAMESPACE },
            "spec": {
                "clusterName": "fleet",
                "replicas": 2,
                "template": { "spec": {
                    "clusterName": "fleet",
                    "bootstrap": { "dataSecretName": "fleet-pool-bootstrap" },
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "TerraformMachinePool",
                        "name": "fleet-pool",
                    },
                } },
            },
        }),
    )
    .await;
    let ids = |n: usize| -> Value {
        json!(
            (0..n)
                .map(|i| format!("captftest:///thing-fleet-pool-{i}"))
                .collect::<Vec<_>>()
        )
    };
    let pool = m
        .until(
            &terraform_machine_pools(),
            "fleet-pool",
            "two replicas provisioned",
            |o| o["status"]["initialization"]["provisioned"] == true && o["spec"]["providerIDList"] == ids(2),
        )
        .await;
    assert_eq!(pool["status"]["replicas"], 2, "{pool}");
    m.until(
        &capi_machine_pools(),
        "fleet-pool",
        "the two provider IDs copied",
        |o| o["spec"]["providerIDList"] == ids(2),
    )
    .await;

    // Scaling the MachinePool changes the module's `replicas`: one more thing, one more ID.
    m.api(&capi_machine_pools())
        .patch(
            "fleet-pool",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    let pool = m
        .until(
            &terraform_machine_pools(),
            "fleet-pool",
            "three replicas provisioned",
            // Up to date: Ready alone stays True while the scale-up is applied, and the new IDs
            // reach the spec just before the status of the pass that booked them.
            |o| {
                is_true(o, "Ready")
                    && is_true(o, "UpToDate")
                    && o["spec"]["providerIDList"] == ids(3)
                    && o["status"]["replicas"] == 3
            },
        )
        .await;
    assert_eq!(pool["status"]["replicas"], 3, "{pool}");
    // Each machine as Cluster API's InfraMachinePool contract describes an instance.
    let instances: Vec<(Value, Value, Value)> = pool["status"]["instances"]
        .as_array()
        .unwrap_or_else(|| panic!("status.instances: {pool}"))
        .iter()
        .map(|i| (i["instanceName"].clone(), i["providerID"].clone(), i["ready"].clone()))
        .collect();
    let want: Vec<(Value, Value, Value)> = (0..3)
        .map(|i| {
            let id = format!("captftest:///thing-fleet-pool-{i}");
            (json!(format!("thing-fleet-pool-{i}")), json!(id), json!(true))
        })
        .collect();
    assert_eq!(instances, want, "{pool}");
    m.until(
        &capi_machine_pools(),
        "fleet-pool",
        "the three provider IDs copied",
        |o| o["spec"]["providerIDList"] == ids(3),
    )
    .await;
}

fn printed(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// CAPTF's webhook and controller as the Deployments clusterctl installed run them, as processes
/// under their own accounts, the webhook's Service routed to it.
async fn start_clusterctl_installed_captf(
    cp: &ControlPlane,
    admin: &kube::Client,
    host: &str,
) -> (tokio::process::Child, tokio::process::Child) {
    let admin = admin.clone();
    let work = cp.work_dir().to_path_buf();
    // CAPTF's webhook, with the certificate issued for its Service.
    let tls = work.join("captf-webhook-tls");
    std::fs::create_dir_all(&tls).unwrap();
    for (k, v) in tls_files(&admin, "captf-system", "captf-webhook-tls", PATIENCE)
        .await
        .unwrap()
    {
        std::fs::write(tls.join(k), v).unwrap();
    }
    let webhook_args = common::clusterctl::deployment_args(&admin, "captf-system", "captf-webhook", "webhook").await;
    // Under its own account too: it asks the API server who may approve (SubjectAccessReview).
    let webhook_kubeconfig = cp
        .service_account_kubeconfig("captf-system", "captf-webhook")
        .await
        .unwrap();
    let webhook_port = free_port();
    let webhook = spawn(
        &common::webhook::binary("captf-webhook"),
        &with_flags(
            &webhook_args,
            &[
                "--addr",
                "--metrics-addr",
                "--tls-cert-file",
                "--tls-key-file",
                "--log-format",
            ],
            &[
                format!("--addr={host}:{webhook_port}"),
                "--metrics-addr=127.0.0.1:0".into(),
                format!("--tls-cert-file={}", tls.join("tls.crt").display()),
                format!("--tls-key-file={}", tls.join("tls.key").display()),
                "--log-format=text".into(),
            ],
        ),
        &[("KUBECONFIG", webhook_kubeconfig.display().to_string())],
        &work.join("captf-webhook.log"),
    );
    route_service(&admin, "captf-system", "captf-webhook", host, webhook_port)
        .await
        .unwrap();

    // CAPTF's controller, as its Deployment runs it, under its own account.
    let controller_args =
        common::clusterctl::deployment_args(&admin, "captf-system", "captf-controller", "manager").await;
    let controller_kubeconfig = cp
        .service_account_kubeconfig("captf-system", "captf-controller")
        .await
        .unwrap();
    let controller = spawn(
        &common::controller_binary(),
        &with_flags(
            &controller_args,
            &["--metrics-addr", "--health-addr", "--log-format"],
            &[
                "--metrics-addr=127.0.0.1:0".into(),
                "--health-addr=127.0.0.1:0".into(),
                "--log-format=text".into(),
            ],
        ),
        &[
            ("KUBECONFIG", controller_kubeconfig.display().to_string()),
            ("POD_NAMESPACE", "captf-system".into()),
            ("POD_NAME", "captf-controller".into()),
            ("RUST_LOG", "info".into()),
        ],
        &work.join("captf-controller.log"),
    );
    (webhook, controller)
}

/// CAPTF installed with `helm install` of the chart (watching every namespace), its pods run by
/// the kubelet: the ports free ones and one webhook replica (the pods share the host's network).
/// cert-manager issues the webhook's certificate, and the webhook's pod is put behind its Service
/// once its readiness probe passes.
async fn helm_install_captf(cp: &ControlPlane, bin: &Path) {
    let webhook_port = free_port();
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/captf");
    run(std::process::Command::new(bin.join("helm"))
        .arg("install")
        .arg("captf")
        .arg(&chart)
        .args(["-n", "captf-system", "--create-namespace", "--kubeconfig"])
        .arg(cp.admin_kubeconfig())
        .args(["--set", &format!("webhook.port={webhook_port}")])
        .args(["--set", &format!("webhook.metricsPort={}", free_port())])
        .args(["--set", &format!("controller.metricsPort={}", free_port())])
        .args(["--set", &format!("controller.healthPort={}", free_port())])
        .args([
            "--set",
            "webhook.replicas=1",
            "--set",
            "controller.watchAllNamespaces=true",
        ]));
}

/// Waits (wall time) until `path` exists.
async fn until_file(path: &Path, what: &str) {
    tokio::time::timeout(PATIENCE, async {
        while !path.exists() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: {} did not appear within {PATIENCE:?}", path.display()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_move_waits_for_a_running_apply_then_the_target_applies_nothing_and_the_source_destroys_nothing() {
    move_while_an_apply_runs(Install::Clusterctl).await;
}

/// The same move between two management clusters whose CAPTF was installed by Helm: clusterctl
/// finds CAPTF's kinds by the label on the chart's CRDs, not by a provider it installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_move_of_captf_installed_by_helm_takes_its_objects_and_their_state_along() {
    move_while_an_apply_runs(Install::Helm).await;
}

async fn move_while_an_apply_runs(install: Install) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let Some(source) = Management::start_with(None, install, false).await else {
        return;
    };
    let Some(target) =
        Management::start_with(Some((source.image.clone(), source.world_dir.clone())), install, false).await
    else {
        return;
    };
    let world = World::new(&source.world_dir);
    source.create_cluster("prod").await;
    // clusterctl moves only a Cluster whose control plane is initialized and whose Machines have
    // Nodes: a control-plane Machine on CAPTF, and its Node (by provider ID) in the workload
    // cluster, played by the source's own API server.
    source.create_workload_kubeconfig("prod").await;
    let node: Node = serde_json::from_value(json!({
        "metadata": { "name": "prod-cp0" },
        "spec": { "providerID": "captftest:///thing-prod-cp0" },
    }))
    .unwrap();
    Api::<Node>::all(source.admin.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    source.create_machine("prod", "prod-cp0", true).await;
    source
        .until(&capi_clusters(), "prod", "control plane initialized", |o| {
            is_true(o, "ControlPlaneInitialized")
        })
        .await;
    source
        .until(&common::terraform_clusters(), "prod", "Ready", |o| is_true(o, "Ready"))
        .await;

    // An input change whose apply holds in the middle of its change (the gate is closed).
    std::fs::remove_file(&source.gate).unwrap();
    source
        .api(&common::terraform_clusters())
        .patch(
            "prod",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"variables": {"content": "v2"}}})),
        )
        .await
        .unwrap();
    until_file(&world.busy_marker("prod").unwrap(), "the apply holds").await;

    // clusterctl moves the Cluster while that apply runs: it pauses the Cluster, then waits for
    // the TerraformCluster's block-move annotation, which stays while the Job runs.
    let mut mv = source.clusterctl();
    mv.arg("move")
        .arg("--kubeconfig")
        .arg(source.cp.admin_kubeconfig())
        .arg("--to-kubeconfig")
        .arg(target.cp.admin_kubeconfig())
        .args(["--namespace", NAMESPACE]);
    let mut mv = tokio::spawn(async move { mv.output().await.unwrap() });
    let clusters = capi_clusters();
    tokio::select! {
        _ = source.until(&clusters, "prod", "paused by clusterctl move", |o| o["spec"]["paused"] == true) => {}
        out = &mut mv => panic!("clusterctl move ended before it paused the Cluster:\n{}", printed(&out.unwrap())),
    }
    assert!(
        world.busy_marker("prod").unwrap().exists(),
        "the apply still holds when the Cluster is paused"
    );
    std::fs::write(&source.gate, "").unwrap();
    let out = mv.await.unwrap();
    assert!(out.status.success(), "clusterctl move failed:\n{}", printed(&out));

    // The source deleted its copy without a destroy: the thing is there, with the held change.
    tokio::time::timeout(PATIENCE, async {
        while source
            .api(&common::terraform_clusters())
            .get_opt("prod")
            .await
            .unwrap()
            .is_some()
        {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await
    .expect("the source's TerraformCluster is deleted by the move");
    let thing = world.read("prod").unwrap().expect("the source destroyed nothing");
    assert_eq!(thing.content, "v2", "the apply that ran during the move finished");

    // The target takes over from what moved: Ready without an apply (the held apply was booked
    // before the copy), the outputs read again by a refresh, and Cluster API's fields with them.
    let infra = target
        .until(
            &common::terraform_clusters(),
            "prod",
            "Ready with its outputs again",
            |o| is_true(o, "Ready") && o["status"]["outputs"]["control_plane_endpoint"].is_object(),
        )
        .await;
    assert_eq!(infra["spec"]["variables"]["content"], "v2", "{infra}");
    let cluster = target
        .until(&capi_clusters(), "prod", "provisioned with its failure domains", |o| {
            o["status"]["initialization"]["infrastructureProvisioned"] == true
                && o["status"]["failureDomains"].as_array().is_some_and(|d| d.len() == 2)
        })
        .await;
    assert_ne!(
        cluster["spec"]["paused"], true,
        "clusterctl unpaused the target: {cluster}"
    );
    target
        .until(&terraform_machines(), "prod-cp0", "Ready with its outputs again", |o| {
            is_true(o, "Ready") && o["status"]["outputs"]["provider_id"].is_string()
        })
        .await;
    let jobs = target.jobs_with_ops().await;
    assert!(!jobs.is_empty(), "the target read its outputs again with a refresh Job");
    assert!(
        jobs.iter().all(|(_, op)| op == "refresh"),
        "the target ran only refreshes: {jobs:?}"
    );
    assert_eq!(world.read("prod").unwrap().unwrap().content, "v2");
}

async fn a_cluster_class_on_terraform_templates_creates_the_objects_and_a_template_change_rolls_out(m: &Management) {
    m.install_stand_in_providers().await;
    let template = |kind: &str, name: &str, spec: Value| {
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": kind,
            "metadata": { "name": name, "namespace": NAMESPACE },
            "spec": { "template": { "spec": spec } },
        })
    };
    let templates = |kind: &str, plural: &str| resource("infrastructure.cluster.x-k8s.io/v1beta1", kind, plural);
    let machine_templates = templates("TerraformMachineTemplate", "terraformmachinetemplates");
    m.create(
        &templates("TerraformClusterTemplate", "terraformclustertemplates"),
        template(
            "TerraformClusterTemplate",
            "tf-cluster",
            json!({ "module": { "source": m.modules.url("cluster.tar.gz") }, "variables": { "name": "classy" } }),
        ),
    )
    .await;
    for (name, size) in [("tf-md-v1", "small"), ("tf-md-v2", "large")] {
        m.create(
            &machine_templates,
            template(
                "TerraformMachineTemplate",
                name,
                json!({
                    "module": { "source": m.modules.url("machine.tar.gz") },
                    "variables": { "name": "md", "size": size },
                }),
            ),
        )
        .await;
    }
    for (group, kind, plural) in [
        (
            STAND_IN_CONTROL_PLANE_GROUP,
            "TestControlPlaneTemplate",
            "testcontrolplanetemplates",
        ),
        (STAND_IN_BOOTSTRAP_GROUP, "TestConfigTemplate", "testconfigtemplates"),
    ] {
        let api_version = format!("{group}/v1alpha1");
        m.create(
            &resource(&api_version, kind, plural),
            json!({
                "apiVersion": api_version, "kind": kind,
                "metadata": { "name": "stand-in", "namespace": NAMESPACE },
                "spec": { "template": { "spec": {} } },
            }),
        )
        .await;
    }
    let class_ref = |api_version: String, kind: &str, name: &str| json!({ "templateRef": { "apiVersion": api_version, "kind": kind, "name": name } });
    let infra = "infrastructure.cluster.x-k8s.io/v1beta1".to_string();
    let class = resource("cluster.x-k8s.io/v1beta2", "ClusterClass", "clusterclasses");
    m.create(
        &class,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "ClusterClass",
            "metadata": { "name": "with-stand-ins", "namespace": NAMESPACE },
            "spec": {
                "infrastructure": class_ref(infra.clone(), "TerraformClusterTemplate", "tf-cluster"),
                "controlPlane": class_ref(format!("{STAND_IN_CONTROL_PLANE_GROUP}/v1alpha1"), "TestControlPlaneTemplate", "stand-in"),
                "workers": { "machineDeployments": [{
                    "class": "general",
                    "bootstrap": class_ref(format!("{STAND_IN_BOOTSTRAP_GROUP}/v1alpha1"), "TestConfigTemplate", "stand-in"),
                    "infrastructure": class_ref(infra.clone(), "TerraformMachineTemplate", "tf-md-v1"),
                }] },
            },
        }),
    )
    .await;
    // Cluster API refuses a Cluster of a class it has not reconciled yet: try until it takes it.
    let cluster: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": { "name": "classy", "namespace": NAMESPACE },
        "spec": { "topology": {
            "classRef": { "name": "with-stand-ins" },
            "version": "v1.30.0",
            "controlPlane": { "replicas": 1 },
            "workers": { "machineDeployments": [{ "class": "general", "name": "md-0", "replicas": 0 }] },
        } },
    }))
    .unwrap();
    tokio::time::timeout(PATIENCE, async {
        loop {
            match m.api(&capi_clusters()).create(&PostParams::default(), &cluster).await {
                Ok(_) => return,
                Err(e) => {
                    eprintln!("Cluster not taken yet: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    })
    .await
    .expect("Cluster API takes a Cluster of the class");

    // The topology makes the TerraformCluster from its template, and CAPTF applies it.
    let created = m
        .until(&capi_clusters(), "classy", "its infrastructure named", |o| {
            o["spec"]["infrastructureRef"]["name"].is_string()
        })
        .await;
    let infra_name = created["spec"]["infrastructureRef"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let tc = m
        .until(&common::terraform_clusters(), &infra_name, "Ready", |o| {
            is_true(o, "Ready")
        })
        .await;
    assert_eq!(tc["spec"]["variables"]["name"], "classy", "{tc}");

    // The control plane (nobody reconciles it here) reports its version, so the topology sees it
    // provisioned and creates the MachineDeployment.
    let control_planes = resource(
        &format!("{STAND_IN_CONTROL_PLANE_GROUP}/v1alpha1"),
        "TestControlPlane",
        "testcontrolplanes",
    );
    let cp = m
        .until_one_of(&control_planes, "classy", "the control plane made", |_| true)
        .await;
    let cp_name = cp["metadata"]["name"].as_str().unwrap();
    m.api(&control_planes)
        .patch_status(
            cp_name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": {
                "version": "v1.30.0",
                "replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "upToDateReplicas": 1,
                "initialization": { "controlPlaneInitialized": true },
            } })),
        )
        .await
        .unwrap();
    let deployments = resource("cluster.x-k8s.io/v1beta2", "MachineDeployment", "machinedeployments");
    let md = m
        .until_one_of(&deployments, "classy", "the MachineDeployment made", |_| true)
        .await;
    let md_name = md["metadata"]["name"].as_str().unwrap().to_string();
    let first = md["spec"]["template"]["spec"]["infrastructureRef"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let first_template = m
        .until(&machine_templates, &first, "the class's template copied", |_| true)
        .await;
    assert_eq!(first_template["spec"]["template"]["spec"]["variables"]["size"], "small");

    // A change of the class: the topology dry-runs the changed template against the current one
    // (the webhook lets that through), then makes a new template and rolls the MachineDeployment
    // over to it.
    m.api(&class)
        .patch(
            "with-stand-ins",
            &PatchParams::default(),
            // A merge patch replaces the list: the class's one worker class, on the new template.
            &Patch::Merge(&json!({ "spec": { "workers": { "machineDeployments": [{
                "class": "general",
                "bootstrap": class_ref(format!("{STAND_IN_BOOTSTRAP_GROUP}/v1alpha1"), "TestConfigTemplate", "stand-in"),
                "infrastructure": class_ref(infra.clone(), "TerraformMachineTemplate", "tf-md-v2"),
            }] } } })),
        )
        .await
        .unwrap();
    let rolled = m
        .until(&deployments, &md_name, "rolled over to a new template", |o| {
            o["spec"]["template"]["spec"]["infrastructureRef"]["name"]
                .as_str()
                .is_some_and(|n| n != first)
        })
        .await;
    let second = rolled["spec"]["template"]["spec"]["infrastructureRef"]["name"]
        .as_str()
        .unwrap();
    let second_template = m.until(&machine_templates, second, "the new template", |_| true).await;
    assert_eq!(
        second_template["spec"]["template"]["spec"]["variables"]["size"],
        "large"
    );
}

async fn the_cluster_templates_clusterctl_generates_apply_and_captf_provisions_their_infrastructure(m: &Management) {
    m.install_kubeadm_crds().await;
    let counts = [
        "--kubernetes-version",
        "v1.30.0",
        "--control-plane-machine-count",
        "1",
        "--worker-machine-count",
        "1",
        "--target-namespace",
        NAMESPACE,
    ];
    // The variables a user must set are the module sources.
    let listed = m.generate_cluster(&["prod", "--list-variables"]);
    for v in ["CAPTF_CLUSTER_MODULE", "CAPTF_MACHINE_MODULE"] {
        assert!(listed.contains(v), "{listed}");
    }

    // The default flavor, as `clusterctl generate cluster | kubectl apply -f -`: the API server
    // takes every object without a warning, and CAPTF provisions the infrastructure.
    let yaml = m.generate_cluster(&[&["prod"][..], &counts].concat());
    let applied = m.apply(&yaml);
    assert!(!applied.to_lowercase().contains("warning"), "{applied}");
    m.until(&common::terraform_clusters(), "prod", "Ready", |o| is_true(o, "Ready"))
        .await;
    let cluster = m
        .until(&capi_clusters(), "prod", "infrastructure provisioned", |o| {
            o["status"]["initialization"]["infrastructureProvisioned"] == true
                && o["spec"]["controlPlaneEndpoint"]["host"] == "thing-prod.example"
        })
        .await;
    assert_eq!(cluster["spec"]["controlPlaneRef"]["kind"], "KubeadmControlPlane");

    // The topology flavor brings the ClusterClass with it; the class makes the TerraformCluster.
    let yaml = m.generate_cluster(&[&["topo", "--flavor", "topology"][..], &counts].concat());
    assert!(yaml.contains("kind: ClusterClass"), "{yaml}");
    let applied = m.apply(&yaml);
    assert!(!applied.to_lowercase().contains("warning"), "{applied}");
    let cluster = m
        .until(
            &capi_clusters(),
            "topo",
            "its infrastructure made by the topology",
            |o| o["spec"]["infrastructureRef"]["name"].is_string(),
        )
        .await;
    let infra = cluster["spec"]["infrastructureRef"]["name"].as_str().unwrap();
    m.until(&common::terraform_clusters(), infra, "Ready", |o| is_true(o, "Ready"))
        .await;
    m.until(&capi_clusters(), "topo", "infrastructure provisioned", |o| {
        o["status"]["initialization"]["infrastructureProvisioned"] == true
            && o["spec"]["controlPlaneEndpoint"]["host"] == "thing-topo.example"
    })
    .await;
}

/// kubeadm's pin of a CA (`caCertHashes`): `sha256:` and the hex SHA-256 of the CA certificate's
/// SubjectPublicKeyInfo.
fn ca_cert_hash(ca_pem: &str) -> String {
    use sha2::Digest;
    let (_, pem) = x509_parser::pem::parse_x509_pem(ca_pem.as_bytes()).unwrap();
    let cert = pem.parse_x509().unwrap();
    let digest = sha2::Sha256::digest(cert.tbs_certificate.subject_pki.raw);
    format!(
        "sha256:{}",
        digest.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

/// The real kubeadm bootstrap provider (CABPK) writes a worker's join data for a Machine of a
/// CAPTF cluster, and CAPTF hands that data to the machine's module. The workload cluster's API
/// server is a second real control plane started here; what a control plane provider would do is
/// played by the test: a stand-in control plane object says the control plane is initialized, and
/// the Secrets such a provider writes (`<cluster>-ca`, `<cluster>-kubeconfig`) name that second
/// control plane. The Cluster's endpoint is set on the TerraformCluster (CAPTF keeps a set one
/// rather than its module's), so Cluster API copies it onto the Cluster and CABPK writes it into
/// the join configuration.
async fn kubeadm_bootstrap_writes_join_data_for_a_worker_of_a_terraform_cluster(m: &Management) {
    const MACHINE: &str = "joined-m0";
    m.install_stand_in_providers().await;
    // Machines join it as `kubeadm join` would (bootstrap tokens, CSR approval and signing, the
    // node lifecycle controller), with what `kubeadm init` would have written.
    let mut options = control_plane_options(&m.tools);
    options.node_joins = true;
    let workload = ControlPlane::start(options).await.unwrap();
    workload.prepare_for_joins().await.unwrap();
    let workload_admin = workload.admin_client().await.unwrap();
    let port: u16 = workload
        .server_url()
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap();
    let endpoint = format!("127.0.0.1:{port}");

    // The workload cluster's CA with its key (CABPK refuses a CA Secret without the key, and pins
    // the certificate in the join configuration) and an admin kubeconfig of it (CABPK creates the
    // bootstrap token through it). Made before the Cluster: Cluster API's cluster cache connects
    // as soon as the infrastructure is provisioned, and after a failed attempt it waits before the
    // next.
    let secrets = Api::<Secret>::namespaced(m.admin.clone(), NAMESPACE);
    for (suffix, data) in [
        (
            "ca",
            json!({ "tls.crt": workload.ca_pem(), "tls.key": workload.ca_key_pem() }),
        ),
        (
            "kubeconfig",
            json!({ "value": std::fs::read_to_string(workload.admin_kubeconfig()).unwrap() }),
        ),
    ] {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {
                "name": format!("{JOINED}-{suffix}"), "namespace": NAMESPACE,
                "labels": { "cluster.x-k8s.io/cluster-name": JOINED },
            },
            "type": "cluster.x-k8s.io/secret",
            "stringData": data,
        }))
        .unwrap();
        secrets.create(&PostParams::default(), &secret).await.unwrap();
    }

    // The control plane object, initialized as Cluster API v1.14's contract (v1beta2) asks of a
    // control plane provider: `status.initialization.controlPlaneInitialized`, and managed
    // (`status.externalManagedControlPlane`).
    let control_planes = resource(
        &format!("{STAND_IN_CONTROL_PLANE_GROUP}/v1alpha1"),
        "TestControlPlane",
        "testcontrolplanes",
    );
    m.create(
        &control_planes,
        json!({
            "apiVersion": format!("{STAND_IN_CONTROL_PLANE_GROUP}/v1alpha1"), "kind": "TestControlPlane",
            "metadata": { "name": JOINED, "namespace": NAMESPACE },
            "spec": {},
        }),
    )
    .await;
    m.api(&control_planes)
        .patch_status(
            JOINED,
            &PatchParams::default(),
            // Its control plane runs outside the cluster's Machines (a second control plane the
            // test started), as a managed one does: Cluster API then drains and deletes a worker's
            // Node when it deletes the Machine, which it never does while no control plane
            // Machine exists and the control plane is not said to be managed.
            &Patch::Merge(&json!({ "status": {
                "initialization": { "controlPlaneInitialized": true },
                "externalManagedControlPlane": true,
            } })),
        )
        .await
        .unwrap();
    m.create(
        &common::terraform_clusters(),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
            "metadata": { "name": JOINED, "namespace": NAMESPACE },
            "spec": {
                "module": { "source": m.modules.url("cluster.tar.gz") },
                "variables": { "name": JOINED },
                "exports": CLUSTER_EXPORTS,
                "controlPlaneEndpoint": { "host": "127.0.0.1", "port": port },
            },
        }),
    )
    .await;
    m.create(
        &capi_clusters(),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": { "name": JOINED, "namespace": NAMESPACE },
            "spec": {
                "controlPlaneRef": {
                    "apiGroup": STAND_IN_CONTROL_PLANE_GROUP, "kind": "TestControlPlane", "name": JOINED,
                },
                "infrastructureRef": {
                    "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformCluster", "name": JOINED,
                },
            },
        }),
    )
    .await;
    // What CABPK waits for before it writes a worker's join data: the infrastructure provisioned,
    // the control plane initialized (the Cluster's condition) and the endpoint on the Cluster.
    m.until(
        &capi_clusters(),
        JOINED,
        "provisioned, its control plane initialized and the endpoint copied",
        |o| {
            o["status"]["initialization"]["infrastructureProvisioned"] == true
                && o["status"]["initialization"]["controlPlaneInitialized"] == true
                && is_true(o, "ControlPlaneInitialized")
                && o["spec"]["controlPlaneEndpoint"] == json!({ "host": "127.0.0.1", "port": port })
        },
    )
    .await;

    // A worker Machine of the workload cluster's version, its bootstrap a KubeadmConfig with only
    // its format set (its schema wants one field): CABPK fills in the join configuration's
    // discovery (endpoint, token, CA pin).
    let version = workload_admin.apiserver_version().await.unwrap().git_version;
    m.create(
        &kubeadm_configs(),
        json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
            "metadata": { "name": MACHINE, "namespace": NAMESPACE },
            "spec": { "format": "cloud-config" },
        }),
    )
    .await;
    m.create(
        &terraform_machines(),
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformMachine",
            "metadata": { "name": MACHINE, "namespace": NAMESPACE },
            "spec": {
                "module": { "source": m.modules.url("machine.tar.gz") },
                "variables": { "name": MACHINE },
            },
        }),
    )
    .await;
    m.create(
        &capi_machines(),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
            "metadata": { "name": MACHINE, "namespace": NAMESPACE },
            "spec": {
                "clusterName": JOINED,
                "version": version,
                "bootstrap": { "configRef": {
                    "apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": MACHINE,
                } },
                "infrastructureRef": {
                    "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformMachine", "name": MACHINE,
                },
            },
        }),
    )
    .await;

    // CABPK reports the data written (the bootstrap config contract), in a Secret of the config's
    // name.
    m.until(&kubeadm_configs(), MACHINE, "its bootstrap data written", |o| {
        o["status"]["initialization"]["dataSecretCreated"] == true && o["status"]["dataSecretName"] == MACHINE
    })
    .await;
    let data = secrets.get(MACHINE).await.unwrap();
    assert_eq!(data.type_.as_deref(), Some("cluster.x-k8s.io/secret"));
    let field = |k: &str| -> String {
        let v = data
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .unwrap_or_else(|| panic!("{k} in {data:?}"));
        String::from_utf8(v.0.clone()).unwrap()
    };
    assert_eq!(field("format"), "cloud-config");
    let value = field("value");
    assert!(value.lines().any(|l| l == "#cloud-config"), "{value}");
    // The cloud-config writes the join configuration and runs `kubeadm join` with it.
    let cloud_config: Value = serde_yaml_ng::from_str(&value).unwrap();
    let join_file = cloud_config["write_files"]
        .as_array()
        .and_then(|files| {
            files
                .iter()
                .find(|f| f["path"] == "/run/kubeadm/kubeadm-join-config.yaml")
        })
        .unwrap_or_else(|| panic!("no join configuration among the files:\n{value}"));
    assert!(
        cloud_config["runcmd"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c.as_str().is_some_and(|c| c.contains("kubeadm join")))),
        "{value}"
    );
    let join: Value = serde_yaml_ng::from_str(join_file["content"].as_str().unwrap()).unwrap();
    assert_eq!(join["kind"], "JoinConfiguration", "{join}");
    let discovery = &join["discovery"]["bootstrapToken"];
    assert_eq!(discovery["apiServerEndpoint"], endpoint.as_str(), "{join}");
    assert_eq!(
        discovery["caCertHashes"],
        json!([ca_cert_hash(workload.ca_pem())]),
        "{join}"
    );
    assert!(discovery["unsafeSkipCAVerification"] != true, "{join}");

    // The token it names is a bootstrap token of the workload cluster.
    let token = discovery["token"].as_str().unwrap();
    let (id, token_secret) = token.split_once('.').unwrap();
    let stored = Api::<Secret>::namespaced(workload_admin.clone(), "kube-system")
        .get(&format!("bootstrap-token-{id}"))
        .await
        .unwrap();
    assert_eq!(stored.type_.as_deref(), Some("bootstrap.kubernetes.io/token"));
    let stored_field = |k: &str| {
        stored
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|v| String::from_utf8(v.0.clone()).unwrap())
    };
    assert_eq!(stored_field("token-id").as_deref(), Some(id));
    assert_eq!(stored_field("token-secret").as_deref(), Some(token_secret));
    assert_eq!(stored_field("usage-bootstrap-authentication").as_deref(), Some("true"));

    // Cluster API puts the Secret on the Machine, and CAPTF gives it to the machine's module: the
    // "VM" holds the Secret's name, its format and the cloud-config itself (with the cluster's
    // exports after it).
    m.until(&capi_machines(), MACHINE, "its bootstrap data Secret named", |o| {
        o["spec"]["bootstrap"]["dataSecretName"] == MACHINE
            && o["status"]["initialization"]["bootstrapDataSecretCreated"] == true
    })
    .await;
    m.until(&terraform_machines(), MACHINE, "provisioned", |o| {
        o["status"]["initialization"]["provisioned"] == true
    })
    .await;
    let vm = World::new(&m.world_dir)
        .read(MACHINE)
        .unwrap()
        .expect("the machine's thing");
    assert_eq!(
        vm.content,
        format!("{MACHINE} cloud-config\n{value}net-thing-{JOINED} js-{JOINED}-0f3a")
    );

    // The machines of the checks below are VMs the hypervisor boots from the machine records the
    // test provider writes: node agents that join the workload cluster.
    let workers = Workers::start(m, workload_admin.clone(), &version);
    timed(
        "the joining machines' check",
        a_machine_deployment_of_two_boots_from_kubeadm_join_data_and_its_machines_join_as_nodes(&workers, &version),
    )
    .await;
    timed(
        "the health check's check",
        a_health_check_replaces_the_machine_whose_node_died_while_the_cluster_awaits_approval(&workers),
    )
    .await;
    timed(
        "the export's check",
        approving_the_clusters_change_moves_its_export_and_every_machine_follows(&workers),
    )
    .await;
    timed(
        "the rollout's check",
        a_rollout_to_a_new_template_joins_each_new_machine_before_an_old_one_goes(&workers),
    )
    .await;
    timed(
        "the scaling and deletion check",
        scaling_to_three_and_to_one_then_deleting_the_cluster_leaves_nothing_running(&workers),
    )
    .await;
}

/// A MachineDeployment of two on a TerraformMachineTemplate whose module is the README's machine
/// module, in the `joined` cluster of the check above: each Machine gets CABPK's join data, CAPTF
/// applies the module with it, the test's hypervisor boots the VM from that user data (a node
/// agent that discovers the API server by the token and its CA pin, gets its client certificate
/// through a CSR the workload cluster's controller manager approves and signs, and registers its
/// Node with the module's provider ID), and Cluster API matches the Node to the Machine by that ID:
/// both Machines reach `Running` with a `nodeRef`. The VMs hold exactly the bootstrap data of
/// their Machines, and the cluster's export reaches each machine's network interface.
async fn a_machine_deployment_of_two_boots_from_kubeadm_join_data_and_its_machines_join_as_nodes(
    w: &Workers<'_>,
    version: &str,
) {
    let m = w.m;
    w.create_vm_template(DEPLOYMENT).await;
    m.create(
        &resource(
            "bootstrap.cluster.x-k8s.io/v1beta2",
            "KubeadmConfigTemplate",
            "kubeadmconfigtemplates",
        ),
        json!({
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfigTemplate",
            "metadata": { "name": DEPLOYMENT, "namespace": NAMESPACE },
            "spec": { "template": { "spec": { "format": "cloud-config" } } },
        }),
    )
    .await;
    let labels = json!({ "cluster.x-k8s.io/cluster-name": JOINED, "pool": DEPLOYMENT });
    m.create(
        &resource("cluster.x-k8s.io/v1beta2", "MachineDeployment", "machinedeployments"),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
            "metadata": { "name": DEPLOYMENT, "namespace": NAMESPACE },
            "spec": {
                "clusterName": JOINED,
                "replicas": 2,
                // What the rollout's check holds it to: never more than one machine beyond the
                // replicas, never fewer than the replicas available.
                "rollout": { "strategy": {
                    "type": "RollingUpdate", "rollingUpdate": { "maxSurge": 1, "maxUnavailable": 0 },
                } },
                "selector": { "matchLabels": labels },
                "template": {
                    "metadata": { "labels": labels },
                    "spec": {
                        "clusterName": JOINED,
                        "version": version,
                        "bootstrap": { "configRef": {
                            "apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": DEPLOYMENT,
                        } },
                        "infrastructureRef": {
                            "apiGroup": "infrastructure.cluster.x-k8s.io",
                            "kind": "TerraformMachineTemplate",
                            "name": DEPLOYMENT,
                        },
                    },
                },
            },
        }),
    )
    .await;

    // Both Machines run, each with the Node of its own VM, each VM booted from exactly its
    // Machine's bootstrap data, and the cluster's exported network reaches each machine.
    let running = w
        .until_running(2, "the MachineDeployment's two Machines run with their Nodes")
        .await;
    let secrets = Api::<Secret>::namespaced(m.admin.clone(), NAMESPACE);
    let world = World::new(&m.world_dir);
    for machine in &running {
        let vm = w.check_joined(machine).await;
        let data = secrets.get(&vm).await.unwrap();
        let value = data
            .data
            .as_ref()
            .and_then(|d| d.get("value"))
            .map(|v| v.0.clone())
            .unwrap();
        assert_eq!(std::fs::read(w.vms.join(&vm).join("user-data")).unwrap(), value, "{vm}");
        let nic = world
            .read(&format!("{vm}-nic"))
            .unwrap()
            .expect("the machine's interface");
        assert_eq!(nic.content, format!("net-thing-{JOINED}"));
    }
}

/// The joining checks' cluster, and the MachineDeployment and selector of its workers.
const JOINED: &str = "joined";
const DEPLOYMENT: &str = "joined-md";
const WORKERS: &str = "pool=joined-md";

/// What the joining checks share: the management cluster, the workload cluster's API, and the
/// hypervisor that boots the machines' VMs as node agents joining it.
struct Workers<'a> {
    m: &'a Management,
    workload: kube::Client,
    hypervisor: Hypervisor,
    /// The VMs' folders (`<vm>/user-data`, `<vm>/agent.log`).
    vms: PathBuf,
}

impl<'a> Workers<'a> {
    /// The VMs' kubelets report `version` (the Machines' version), which Cluster API compares
    /// with the Machine's to call it up to date.
    fn start(m: &'a Management, workload: kube::Client, version: &str) -> Workers<'a> {
        let agent = PathBuf::from(env!("CARGO_BIN_EXE_captf-node-agent"));
        let version = version.to_string();
        let vms = m.files.path().join("vms");
        let hypervisor = Hypervisor::start(World::new(&m.world_dir), &vms, move |r: &BootRequest<'_>| {
            let mut c = tokio::process::Command::new(&agent);
            c.arg("--bootstrap-data")
                .arg(r.user_data)
                .args(["--format", "cloud-config", "--node-name", &r.machine.name])
                .args(["--provider-id", &r.machine.provider_id])
                .args(["--kubelet-version", &version])
                .arg("--state-dir")
                .arg(r.dir);
            c
        });
        Workers {
            m,
            workload,
            hypervisor,
            vms,
        }
    }

    /// A TerraformMachineTemplate of the README's machine module.
    async fn create_vm_template(&self, name: &str) {
        self.m
            .create(
                &resource(
                    "infrastructure.cluster.x-k8s.io/v1beta1",
                    "TerraformMachineTemplate",
                    "terraformmachinetemplates",
                ),
                json!({
                    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformMachineTemplate",
                    "metadata": { "name": name, "namespace": NAMESPACE },
                    "spec": { "template": { "spec": { "module": { "source": self.m.modules.url("vm.tar.gz") } } } },
                }),
            )
            .await;
    }

    /// The workers' Machines now.
    async fn machines(&self) -> Vec<Value> {
        self.m
            .api(&capi_machines())
            .list(&ListParams::default().labels(WORKERS))
            .await
            .unwrap()
            .items
            .iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect()
    }

    /// Wait until exactly `n` workers exist, none being deleted, each `Running` with a `nodeRef`;
    /// they are returned. On timeout the failure shows the Machines and the running VMs' logs.
    async fn until_running(&self, n: usize, what: &str) -> Vec<Value> {
        self.until_machines(what, |ms| {
            ms.len() == n
                && ms
                    .iter()
                    .all(|o| o["metadata"]["deletionTimestamp"].is_null() && joined(o))
        })
        .await
    }

    /// Poll the workers until `f` holds of them (bounded by [`PATIENCE`]).
    async fn until_machines(&self, what: &str, f: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let ms = self.machines().await;
            if f(&ms) {
                return ms;
            }
            if std::time::Instant::now() > deadline {
                panic!("{what}: never; the Machines: {ms:#?}\n{}", self.vm_logs());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The running VMs and the end of each one's log.
    fn vm_logs(&self) -> String {
        let running = self.hypervisor.running();
        let logs: Vec<String> = running
            .iter()
            .map(|n| {
                format!(
                    "{n}:\n{}",
                    tail(&std::fs::read_to_string(self.hypervisor.log(n)).unwrap_or_default(), 20)
                )
            })
            .collect();
        format!("VMs running: {running:?}\n{}", logs.join("\n"))
    }

    /// The Machine is the VM's: its provider ID is the module's, and the Node Cluster API found is
    /// the one its VM registered, with that provider ID and Ready. Returns the VM's name.
    async fn check_joined(&self, machine: &Value) -> String {
        let vm = machine["spec"]["bootstrap"]["dataSecretName"]
            .as_str()
            .unwrap()
            .to_string();
        let provider_id = format!("captftest:///machine-{vm}");
        assert_eq!(machine["spec"]["providerID"], provider_id.as_str(), "{machine:#}");
        let node_name = machine["status"]["nodeRef"]["name"].as_str().unwrap();
        assert_eq!(node_name, vm, "the VM registers its Node under its own name");
        let node = Api::<Node>::all(self.workload.clone()).get(node_name).await.unwrap();
        assert_eq!(
            node.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
            Some(provider_id.as_str())
        );
        assert_eq!(node_ready(&node).as_deref(), Some("True"), "{node:?}");
        assert!(self.hypervisor.running().contains(&vm), "{vm}: {}", self.vm_logs());
        vm
    }

    /// Set the workers' replicas.
    async fn scale(&self, replicas: i64) {
        self.m
            .api(&resource(
                "cluster.x-k8s.io/v1beta2",
                "MachineDeployment",
                "machinedeployments",
            ))
            .patch(
                DEPLOYMENT,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "spec": { "replicas": replicas } })),
            )
            .await
            .unwrap();
    }

    /// The VM names (bootstrap Secrets) of these Machines, sorted.
    fn vm_names(machines: &[Value]) -> Vec<String> {
        let mut names: Vec<String> = machines
            .iter()
            .filter_map(|o| o["spec"]["bootstrap"]["dataSecretName"].as_str().map(str::to_string))
            .collect();
        names.sort();
        names
    }

    /// Wait until the VMs running and the world's machine records are exactly `vms`: the others
    /// were destroyed (their records deleted) and powered off.
    async fn until_only_vms(&self, vms: &[String], what: &str) {
        let world = World::new(&self.m.world_dir);
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let records: Vec<String> = world.machines().into_iter().map(|m| m.name).collect();
            if self.hypervisor.running() == vms && records == vms {
                return;
            }
            if std::time::Instant::now() > deadline {
                panic!("{what}: never; want {vms:?}, records {records:?}\n{}", self.vm_logs());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Running with a `nodeRef`: Cluster API found its Node.
fn joined(machine: &Value) -> bool {
    machine["status"]["phase"] == "Running" && machine["status"]["nodeRef"]["name"].is_string()
}

fn node_ready(node: &Node) -> Option<String> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone())
}

/// A MachineHealthCheck of the workers replaces the machine whose node agent died, while the
/// cluster's own change waits for approval: CAPTF's TerraformCluster stays `Ready` (only
/// `UpToDate` says a plan awaits approval), so Cluster API keeps the Cluster's infrastructure
/// ready and the health check keeps judging. The dead machine's Node goes `Unknown`, the check
/// marks it, its MachineSet deletes it, CAPTF destroys its TerraformMachine (the VM record goes),
/// and a replacement boots and joins; the cluster's plan is still not applied.
async fn a_health_check_replaces_the_machine_whose_node_died_while_the_cluster_awaits_approval(w: &Workers<'_>) {
    let m = w.m;
    // A destructive change of the cluster (its thing renamed): held for approval.
    m.api(&common::terraform_clusters())
        .patch(
            JOINED,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": { "variables": { "name": "joined-renamed" } } })),
        )
        .await
        .unwrap();
    let held = m
        .until(
            &common::terraform_clusters(),
            JOINED,
            "its destructive plan awaiting approval",
            |o| condition(o, "UpToDate").is_some_and(|c| c["status"] == "False" && c["reason"] == "AwaitingApproval"),
        )
        .await;
    assert!(
        is_true(&held, "Ready"),
        "provisioned infrastructure stays Ready: {held:#}"
    );
    let cluster = m.api(&capi_clusters()).get(JOINED).await.unwrap();
    let cluster = serde_json::to_value(&cluster).unwrap();
    assert!(is_true(&cluster, "InfrastructureReady"), "{cluster:#}");

    m.create(
        &resource("cluster.x-k8s.io/v1beta2", "MachineHealthCheck", "machinehealthchecks"),
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
            "metadata": { "name": DEPLOYMENT, "namespace": NAMESPACE },
            "spec": {
                "clusterName": JOINED,
                "selector": { "matchLabels": { "pool": DEPLOYMENT } },
                "checks": { "unhealthyNodeConditions": [
                    { "type": "Ready", "status": "Unknown", "timeoutSeconds": 5 },
                    { "type": "Ready", "status": "False", "timeoutSeconds": 5 },
                ] },
            },
        }),
    )
    .await;
    let mhc = resource("cluster.x-k8s.io/v1beta2", "MachineHealthCheck", "machinehealthchecks");
    m.until(&mhc, DEPLOYMENT, "both workers judged healthy", |o| {
        o["status"]["expectedMachines"] == 2 && o["status"]["currentHealthy"] == 2
    })
    .await;

    let before = w.machines().await;
    let victim = before[0]["metadata"]["name"].as_str().unwrap().to_string();
    let victim_vm = before[0]["spec"]["bootstrap"]["dataSecretName"]
        .as_str()
        .unwrap()
        .to_string();
    let survivor_vm = before[1]["spec"]["bootstrap"]["dataSecretName"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(w.hypervisor.crash(&victim_vm), "{}", w.vm_logs());

    // Replaced: two workers run again, the victim is gone, and so are its VM and its record.
    let after = w
        .until_machines("the dead machine replaced by one that joined", |ms| {
            ms.len() == 2
                && ms
                    .iter()
                    .all(|o| o["metadata"]["deletionTimestamp"].is_null() && joined(o))
                && ms.iter().all(|o| o["metadata"]["name"] != victim.as_str())
        })
        .await;
    let mut vms = Vec::new();
    for machine in &after {
        vms.push(w.check_joined(machine).await);
    }
    vms.sort();
    assert!(vms.contains(&survivor_vm) && !vms.contains(&victim_vm), "{vms:?}");
    w.until_only_vms(&vms, "the dead machine destroyed").await;
    assert!(
        Api::<Node>::all(w.workload.clone())
            .get_opt(&victim_vm)
            .await
            .unwrap()
            .is_none(),
        "Cluster API deletes the Node of the Machine it deleted"
    );

    // Meanwhile the cluster's change was not applied: still held, its thing not renamed.
    let still = m.api(&common::terraform_clusters()).get(JOINED).await.unwrap();
    let still = serde_json::to_value(&still).unwrap();
    assert!(
        condition(&still, "UpToDate").is_some_and(|c| c["reason"] == "AwaitingApproval"),
        "{still:#}"
    );
    let world = World::new(&m.world_dir);
    assert!(world.read(JOINED).unwrap().is_some() && world.read("joined-renamed").unwrap().is_none());
}

/// The cluster's held change, approved, replaces its network: the export `network_id` changes,
/// which changes every machine's inputs, and each machine's interface moves to the new network by
/// its own apply (an update in place: the VMs keep running, their Nodes stay).
async fn approving_the_clusters_change_moves_its_export_and_every_machine_follows(w: &Workers<'_>) {
    let m = w.m;
    let before = w.machines().await;
    let vms = Workers::vm_names(&before);
    let cluster = m.api(&common::terraform_clusters()).get(JOINED).await.unwrap();
    let cluster = serde_json::to_value(&cluster).unwrap();
    let hash = cluster["status"]["pendingPlan"]["hash"].as_str().unwrap().to_string();
    m.api(&common::terraform_clusters())
        .patch(
            JOINED,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "metadata": { "annotations": { "captf.io/approve-plan": hash } } })),
        )
        .await
        .unwrap();
    m.until(
        &common::terraform_clusters(),
        JOINED,
        "its approved change applied",
        |o| is_true(o, "UpToDate"),
    )
    .await;
    let world = World::new(&m.world_dir);
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let nics: Vec<Option<String>> = vms
            .iter()
            .map(|vm| world.read(&format!("{vm}-nic")).unwrap().map(|t| t.content))
            .collect();
        if nics.iter().all(|c| c.as_deref() == Some("net-thing-joined-renamed")) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the machines' interfaces never moved to the new network: {nics:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The same machines, still joined: an export change re-plans a machine, it does not replace it.
    let after = w.until_running(2, "the same two workers").await;
    assert_eq!(Workers::vm_names(&after), vms);
    w.until_only_vms(&vms, "the same VMs").await;
}

/// A rollout to a new TerraformMachineTemplate (maxSurge 1, maxUnavailable 0): each old machine
/// goes only after a new one joined. Watched throughout: never more than three workers that are
/// not being deleted, never fewer than two joined ones; and each old Machine's deletion comes
/// after the creation of a new Node (the n-th deletion after the n-th new Node).
async fn a_rollout_to_a_new_template_joins_each_new_machine_before_an_old_one_goes(w: &Workers<'_>) {
    let m = w.m;
    let old: Vec<String> = w
        .machines()
        .await
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    let next = format!("{DEPLOYMENT}-2");
    w.create_vm_template(&next).await;
    m.api(&resource(
        "cluster.x-k8s.io/v1beta2",
        "MachineDeployment",
        "machinedeployments",
    ))
    .patch(
        DEPLOYMENT,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "spec": { "template": { "spec": { "infrastructureRef": {
                "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformMachineTemplate", "name": next,
            } } } } })),
    )
    .await
    .unwrap();

    let mut deletions: std::collections::BTreeMap<String, String> = Default::default();
    let deadline = std::time::Instant::now() + PATIENCE;
    let done = loop {
        let ms = w.machines().await;
        let live: Vec<&Value> = ms
            .iter()
            .filter(|o| o["metadata"]["deletionTimestamp"].is_null())
            .collect();
        assert!(live.len() <= 3, "more than replicas + maxSurge: {ms:#?}");
        let joined_live = live.iter().filter(|o| joined(o)).count();
        assert!(joined_live >= 2, "fewer than replicas - maxUnavailable joined: {ms:#?}");
        for o in &ms {
            if let Some(t) = o["metadata"]["deletionTimestamp"].as_str() {
                deletions
                    .entry(o["metadata"]["name"].as_str().unwrap().to_string())
                    .or_insert(t.to_string());
            }
        }
        let rolled = live.len() == 2
            && ms.len() == 2
            && live.iter().all(|o| {
                joined(o) && is_true(o, "UpToDate") && !old.iter().any(|n| o["metadata"]["name"] == n.as_str())
            });
        if rolled {
            break ms;
        }
        if std::time::Instant::now() > deadline {
            panic!("the rollout never finished: {ms:#?}\n{}", w.vm_logs());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let mut vms = Vec::new();
    let mut joins = Vec::new();
    for machine in &done {
        let vm = w.check_joined(machine).await;
        let node = Api::<Node>::all(w.workload.clone()).get(&vm).await.unwrap();
        joins.push(node.metadata.creation_timestamp.unwrap().0.to_string());
        vms.push(vm);
    }
    vms.sort();
    joins.sort();
    let mut deleted: Vec<String> = old
        .iter()
        .map(|n| {
            deletions
                .get(n)
                .cloned()
                .unwrap_or_else(|| panic!("{n}'s deletion never seen: {deletions:?}"))
        })
        .collect();
    deleted.sort();
    for (join, deletion) in joins.iter().zip(&deleted) {
        let (join, deletion): (k8s_openapi::jiff::Timestamp, k8s_openapi::jiff::Timestamp) =
            (join.parse().unwrap(), deletion.parse().unwrap());
        assert!(
            deletion >= join,
            "an old machine went ({deletion}) before a new one joined ({join})"
        );
    }
    w.until_only_vms(&vms, "the old machines destroyed").await;
}

/// Scaling the workers to three and to one joins a third machine and then destroys two; deleting
/// the Cluster then destroys every machine and the cluster itself: no VM runs, no record or
/// thing of the cluster is left in the world, no TerraformMachine or TerraformCluster remains.
async fn scaling_to_three_and_to_one_then_deleting_the_cluster_leaves_nothing_running(w: &Workers<'_>) {
    let m = w.m;
    w.scale(3).await;
    let three = w.until_running(3, "three workers").await;
    for machine in &three {
        w.check_joined(machine).await;
    }
    w.until_only_vms(&Workers::vm_names(&three), "three VMs").await;

    w.scale(1).await;
    let one = w.until_running(1, "one worker").await;
    w.check_joined(&one[0]).await;
    w.until_only_vms(&Workers::vm_names(&one), "two machines destroyed")
        .await;

    m.api(&capi_clusters())
        .delete(JOINED, &Default::default())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let machines = m
            .api(&terraform_machines())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        let left: Vec<String> = machines
            .iter()
            .filter(|o| o.metadata.name.as_deref().is_some_and(|n| n.starts_with(JOINED)))
            .filter_map(|o| o.metadata.name.clone())
            .collect();
        let cluster = m.api(&common::terraform_clusters()).get_opt(JOINED).await.unwrap();
        if left.is_empty() && cluster.is_none() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the cluster's deletion never finished: machines {left:?}, TerraformCluster left: {}",
            cluster.is_some()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    w.until_only_vms(&[], "every machine destroyed").await;
    let world = World::new(&m.world_dir);
    assert_eq!(world.read(JOINED).unwrap(), None, "the cluster's thing destroyed");
    let leftovers: Vec<String> = std::fs::read_dir(&m.world_dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.starts_with(JOINED))
        .collect();
    assert!(leftovers.is_empty(), "the world still holds {leftovers:?}");
}

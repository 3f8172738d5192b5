//! Upgrading CAPTF from an earlier release, as the Helm and clusterctl upgrade tests both play
//! it: the release as built by `scripts/build-release.sh`, the runner images of both releases,
//! and objects in every state an upgrade must carry (applied and Ready; a plan awaiting
//! approval; failing in backoff; an apply in flight; being deleted), with what each must look like
//! once the new release runs.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use captf_kubetest::cert_manager::CertManager;
use captf_kubetest::{ControlPlane, Options, Tools};
use captf_sim::process_kubelet::ProcessImage;
use captf_testprovider::runner_image::{ModuleServer, RUNNER_INSIDE, THING_MODULE, WORLD_INSIDE, runner_image, tar_gz};
use captf_testprovider::world::{HOLD_ENV, World};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Upper bound on one wait of an upgrade test.
pub const PATIENCE: Duration = Duration::from_secs(240);
pub use captf_shared::keys::GROUP;
/// The release the tests upgrade from.
pub const FROM: &str = "0.1.0";

/// The name of every CAPTF CRD (`terraformclusters.infrastructure.cluster.x-k8s.io`).
pub fn crd_names() -> Vec<String> {
    captf_shared::types::SERVED_KINDS
        .iter()
        .map(|k| captf_shared::types::crd_name(k).unwrap())
        .collect()
}
/// The file whose presence lets the test provider's changes go on ([`HOLD_ENV`]).
const GATE: &str = "gate";

/// An earlier release as `scripts/build-release.sh` left it.
pub struct Release {
    /// `captf-webhook`, `captf-controller`, `captf-runner`.
    pub bin: PathBuf,
    /// Its source tree (its chart, its clusterctl folder).
    pub src: PathBuf,
}

impl Release {
    /// `version`, built; `None` (after `cannot_run`) when it is not.
    pub fn built(version: &str) -> Option<Release> {
        let dir = match std::env::var_os("CAPTF_RELEASES_DIR") {
            Some(d) => PathBuf::from(d).join(version),
            None => std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"))
                .join("captf/releases")
                .join(version),
        };
        let release = Release {
            bin: dir.join("bin"),
            src: dir.join("src"),
        };
        let built = ["captf-webhook", "captf-controller", "captf-runner"]
            .iter()
            .all(|b| release.bin.join(b).is_file());
        if !built {
            captf_testsupport::cannot_run(format!(
                "release {version} is not built at {}: run `bash scripts/build-release.sh {version}`",
                dir.display()
            ));
            return None;
        }
        Some(release)
    }

    pub fn chart(&self) -> PathBuf {
        self.src.join("charts/captf")
    }
}

/// The runner images of both releases over one world of the test provider, whose changes wait
/// while the gate is closed.
pub struct Runners {
    /// The workspace's runner.
    pub new: ProcessImage,
    /// The release's runner program in the same image.
    pub old: ProcessImage,
    world: PathBuf,
    _files: tempfile::TempDir,
}

impl Runners {
    /// `None` (after `cannot_run`) when the runner's image cannot be assembled.
    pub fn assemble(release: &Release) -> Option<Runners> {
        let files = tempfile::tempdir().unwrap();
        let image = match runner_image(files.path()) {
            Ok(image) => image,
            Err(e) => {
                captf_testsupport::cannot_run(format!("the runner's image cannot be assembled: {e}"));
                return None;
            }
        };
        let new = image.image.env(HOLD_ENV, format!("{WORLD_INSIDE}/{GATE}"));
        let mut old = new.clone();
        for (inside, local) in &mut old.files {
            if inside == RUNNER_INSIDE {
                *local = release.bin.join("captf-runner");
            }
        }
        let runners = Runners {
            new,
            old,
            world: image.world,
            _files: files,
        };
        runners.open_gate();
        Some(runners)
    }

    pub fn open_gate(&self) {
        std::fs::write(self.world.join(GATE), "").unwrap();
    }

    pub fn close_gate(&self) {
        std::fs::remove_file(self.world.join(GATE)).unwrap();
    }

    /// A change of the thing `name` has begun and waits at the closed gate.
    fn held(&self, name: &str) -> bool {
        World::new(&self.world).busy_marker(name).unwrap().exists()
    }
}

/// The images of one release's runner, controller and webhook, by name.
pub struct Images {
    pub runner: String,
    pub controller: String,
    pub webhook: String,
}

impl Images {
    /// The controller's and the webhook's.
    pub fn serving(&self) -> [String; 2] {
        [self.controller.clone(), self.webhook.clone()]
    }
}

/// A control plane for an upgrade: cert-manager's images, and both releases' under their names
/// (`old`: the release's programs and runner; `new`: the workspace's), in pods with networks of
/// their own, and a module server holding `cluster.tar.gz` (the test provider's one thing).
pub struct Stage {
    pub cp: ControlPlane,
    pub admin: kube::Client,
    pub kubeconfig: PathBuf,
    pub modules: ModuleServer,
    /// The kubelet's folder (its pod logs under `logs/`).
    pub root: tempfile::TempDir,
    _kubelet: captf_kubetest::Kubelet,
    _files: tempfile::TempDir,
}

impl Stage {
    pub async fn start(
        tools: Tools,
        cert_manager: &CertManager,
        release: &Release,
        runners: &Runners,
        old: &Images,
        new: &Images,
    ) -> Stage {
        let files = tempfile::tempdir().unwrap();
        let archive = tar_gz(&files.path().join("module"), THING_MODULE).unwrap();
        let modules = ModuleServer::start(vec![("cluster.tar.gz".into(), archive)])
            .await
            .unwrap();
        let mut opts = Options::new(tools);
        opts.ready_timeout = super::TEST_READY_TIMEOUT;
        let cp = ControlPlane::start(opts).await.unwrap();
        let admin = cp.admin_client().await.unwrap();
        let kubeconfig = cp.admin_kubeconfig();
        let root = tempfile::tempdir().unwrap();
        let mut kubelet_options = cp.kubelet_options("upgrade", root.path()).pod_network([modules.port()]);
        for (image, files) in cert_manager.images() {
            kubelet_options = kubelet_options.image(image, files);
        }
        let kubelet = cp
            .start_kubelet(
                kubelet_options
                    .image(&old.runner, runners.old.clone())
                    .image(
                        &old.controller,
                        program("/captf-controller", release.bin.join("captf-controller")),
                    )
                    .image(
                        &old.webhook,
                        program("/captf-webhook", release.bin.join("captf-webhook")),
                    )
                    .image(&new.runner, runners.new.clone())
                    .image(
                        &new.controller,
                        program("/captf-controller", super::controller_binary()),
                    )
                    .image(
                        &new.webhook,
                        program("/captf-webhook", super::webhook::binary("captf-webhook")),
                    ),
            )
            .await
            .unwrap();
        Stage {
            cp,
            admin,
            kubeconfig,
            modules,
            root,
            _kubelet: kubelet,
            _files: files,
        }
    }

    pub fn logs(&self) -> PathBuf {
        self.root.path().join("logs")
    }
}

/// A process image whose entrypoint is one program.
pub fn program(inside: &str, local: PathBuf) -> ProcessImage {
    ProcessImage::new(inside).file(inside, local)
}

pub fn clusters(client: &kube::Client, ns: &str, version: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, version, "TerraformCluster");
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, "terraformclusters"),
    )
}

pub async fn until<T, F, Fut>(what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    until_or(what, probe, || async { String::new() }).await
}

/// [`until`], failing with what `context` finds then.
pub async fn until_or<T, F, Fut, C, CFut>(what: &str, mut probe: F, context: C) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
    C: FnOnce() -> CFut,
    CFut: std::future::Future<Output = String>,
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
    match found {
        Ok(v) => v,
        Err(_) => panic!("{what}: not within {PATIENCE:?}\n{}", context().await),
    }
}

/// An object's status, its Jobs with their pods' states, and what the controllers' logs in `logs`
/// say of it, for a failure message.
pub async fn report(admin: &kube::Client, ns: &str, name: &str, logs: &Path) -> String {
    let mut said = String::new();
    for entry in std::fs::read_dir(logs).into_iter().flatten().flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if file.contains("controller") {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let lines: Vec<&str> = text.lines().filter(|l| l.contains(name)).collect();
            let tail = &lines[lines.len().saturating_sub(30)..];
            said.push_str(&format!("{file}:\n  {}\n", tail.join("\n  ")));
        }
    }
    let object = get(&clusters(admin, ns, "v1beta1"), name).await;
    let jobs = jobs_of(admin, ns, name).await;
    let pods: Vec<String> = Api::<Pod>::namespaced(admin.clone(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.contains(name)))
        .map(|p| {
            format!(
                "{}: {}",
                p.metadata.name.unwrap_or_default(),
                serde_json::to_string(&p.status).unwrap_or_default()
            )
        })
        .collect();
    format!(
        "{name}: {}\nJobs: {jobs:?}\npods:\n{}\nlogs:\n{said}",
        object.map(|o| o["status"].to_string()).unwrap_or_default(),
        pods.join("\n")
    )
}

fn condition(o: &Value, type_: &str) -> bool {
    o["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == type_ && c["status"] == "True"))
}

pub fn applied(o: &Value) -> bool {
    condition(o, "Ready") && condition(o, "UpToDate")
}

pub async fn get(api: &Api<DynamicObject>, name: &str) -> Option<Value> {
    api.get(name).await.ok().map(|o| serde_json::to_value(o).unwrap())
}

/// Every state Secret of `ns` by name, with its data.
pub async fn states(admin: &kube::Client, ns: &str) -> BTreeMap<String, BTreeMap<String, Vec<u8>>> {
    Api::<Secret>::namespaced(admin.clone(), ns)
        .list(&ListParams::default().labels("tfstate=true"))
        .await
        .unwrap()
        .into_iter()
        .map(|s| {
            let data = s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
            (s.metadata.name.unwrap(), data)
        })
        .collect()
}

/// The names of the Jobs of one TerraformCluster, sorted.
pub async fn jobs_of(admin: &kube::Client, ns: &str, object: &str) -> Vec<String> {
    let id = captf_shared::names::object_id(captf_shared::kind::Kind::TerraformCluster, ns, object);
    let mut names: Vec<String> = Api::<Job>::namespaced(admin.clone(), ns)
        .list(&ListParams::default().labels(&format!("captf.io/object={id}")))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect();
    names.sort();
    names
}

fn applies(jobs: &[String]) -> usize {
    jobs.iter().filter(|j| j.contains("-apply-")).count()
}

/// The images CAPTF's webhook and controller pods of `ns` run (pods not being deleted), each
/// with whether its pod is Ready.
pub async fn pod_images(admin: &kube::Client, ns: &str) -> Vec<(String, bool)> {
    Api::<Pod>::namespaced(admin.clone(), ns)
        .list(&ListParams::default().labels("app.kubernetes.io/component in (controller,webhook)"))
        .await
        .unwrap()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .flat_map(|p| {
            let ready = p
                .status
                .and_then(|s| s.conditions)
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            p.spec
                .unwrap()
                .containers
                .into_iter()
                .filter_map(move |c| c.image.map(|i| (i, ready)))
        })
        .collect()
}

/// Waits until every such pod runs one of `images` and each of `images` runs in a Ready pod.
pub async fn until_only(admin: &kube::Client, ns: &str, images: &[String], what: &str) {
    until(what, || async move {
        let running = pod_images(admin, ns).await;
        let all_of_them = running.iter().all(|(i, _)| images.contains(i));
        let each_ready = images.iter().all(|i| running.iter().any(|(r, ready)| r == i && *ready));
        (all_of_them && each_ready).then_some(())
    })
    .await;
}

/// The objects the upgrade carries, as they were before it.
pub struct Seeded {
    pub ns: String,
    /// Each object's last look at `v1alpha1` before the upgrade.
    pub before: BTreeMap<&'static str, Value>,
    /// The plan `awaiting` waits on.
    pub hash: String,
    /// `failing`'s count of failed applies before the upgrade.
    pub failures: u64,
    pub states: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    pub jobs: BTreeMap<&'static str, Vec<String>>,
}

/// Every object's name.
const OBJECTS: [&str; 5] = ["ready", "awaiting", "failing", "inflight", "doomed"];

/// With the earlier release serving `ns` at `v1alpha1`: `ready` applied (and checked for drift,
/// which follows a first apply, so nothing more is due), `awaiting` stopped for approval
/// (`approval: Always`), `failing` in backoff (its module cannot be fetched), then, with the gate
/// closed, `inflight`'s first apply and `doomed`'s destroy held in the middle of their change.
/// Leaves the gate closed.
pub async fn seed(admin: &kube::Client, ns: &str, modules: &ModuleServer, runners: &Runners) -> Seeded {
    let module = "cluster.tar.gz";
    let alpha = clusters(admin, ns, "v1alpha1");
    let object = |name: &str, source: String, guard: Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "TerraformCluster",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"module": {"source": source}, "variables": {"name": name}, "guard": guard},
        }))
        .unwrap()
    };
    let create = |o: DynamicObject| {
        let alpha = alpha.clone();
        async move {
            let name = o.metadata.name.clone().unwrap();
            until(&format!("the earlier release's webhook admits {name}"), || {
                let (alpha, o) = (alpha.clone(), o.clone());
                async move { alpha.create(&PostParams::default(), &o).await.ok() }
            })
            .await;
        }
    };
    for (name, source, guard) in [
        ("ready", modules.url(module), json!({})),
        ("doomed", modules.url(module), json!({})),
        ("awaiting", modules.url(module), json!({"approval": "Always"})),
        ("failing", modules.url("missing.tar.gz"), json!({})),
    ] {
        create(object(name, source, guard)).await;
    }
    for name in ["ready", "doomed"] {
        until(
            &format!("the earlier release applies {name} and checks it for drift"),
            || {
                let alpha = alpha.clone();
                async move {
                    get(&alpha, name)
                        .await
                        .filter(|o| applied(o) && o["status"]["lastDriftCheckTime"].is_string())
                }
            },
        )
        .await;
    }
    let awaiting = until("the earlier release stops `awaiting` for approval", || {
        let alpha = alpha.clone();
        async move {
            get(&alpha, "awaiting")
                .await
                .filter(|o| o["status"]["pendingPlan"]["hash"].is_string())
        }
    })
    .await;
    assert!(
        awaiting["status"]["pendingPlan"]["adds"].as_u64() >= Some(1),
        "{awaiting}"
    );
    until("the earlier release backs off `failing`", || {
        let alpha = alpha.clone();
        async move {
            get(&alpha, "failing")
                .await
                .filter(|o| o["status"]["consecutiveFailures"]["apply"].as_u64() >= Some(1))
        }
    })
    .await;

    // Held in the middle: a first apply, and a destroy.
    runners.close_gate();
    create(object("inflight", modules.url(module), json!({}))).await;
    alpha.delete("doomed", &Default::default()).await.unwrap();
    for name in ["inflight", "doomed"] {
        until(&format!("{name}'s change is held at the gate"), || async move {
            runners.held(name).then_some(())
        })
        .await;
    }

    let mut before = BTreeMap::new();
    let mut jobs = BTreeMap::new();
    for name in OBJECTS {
        before.insert(name, get(&alpha, name).await.unwrap());
        jobs.insert(name, jobs_of(admin, ns, name).await);
    }
    assert!(before["doomed"]["metadata"]["deletionTimestamp"].is_string());
    Seeded {
        ns: ns.to_string(),
        hash: awaiting["status"]["pendingPlan"]["hash"].as_str().unwrap().to_string(),
        failures: before["failing"]["status"]["consecutiveFailures"]["apply"]
            .as_u64()
            .unwrap(),
        before,
        states: states(admin, ns).await,
        jobs,
    }
}

impl Seeded {
    /// Once the new release runs: every object unchanged at both versions (through the new
    /// webhook's conversion), the awaiting plan still awaiting the same hash, the backoff going
    /// on from its count; then, with the gate open, the held apply booked once and the deletion
    /// done; the plan approved by a `v1alpha1` client applied once; nothing run for `ready`; and
    /// every state Secret byte-identical where no apply ran. Leaves the gate open.
    /// `logs`: the kubelet's folder of pod logs, for a failure message.
    pub async fn check_after_upgrade(&self, admin: &kube::Client, runners: &Runners, logs: &Path) {
        let ns = self.ns.as_str();
        let alpha = clusters(admin, ns, "v1alpha1");
        let beta = clusters(admin, ns, "v1beta1");
        for (name, was) in &self.before {
            // Stored at v1alpha1, read at v1beta1 through the new webhook's conversion (once
            // cainjector has put its CA into the CRDs and its pod is behind its Service).
            let at_beta = until(&format!("{name} reads at v1beta1 through conversion"), || {
                let beta = beta.clone();
                async move { get(&beta, name).await }
            })
            .await;
            assert_eq!(at_beta["spec"], was["spec"], "{name}");
            assert_eq!(at_beta["metadata"]["uid"], was["metadata"]["uid"], "{name}");
            assert_eq!(get(&alpha, name).await.unwrap()["spec"], was["spec"], "{name}");
        }
        let awaiting = get(&beta, "awaiting").await.unwrap();
        assert_eq!(
            awaiting["status"]["pendingPlan"]["hash"],
            self.hash.as_str(),
            "{awaiting}"
        );
        assert_eq!(
            awaiting["status"]["pendingPlan"]["add"], self.before["awaiting"]["status"]["pendingPlan"]["adds"],
            "the counts under v1beta1's names"
        );
        let failures = self.failures;
        until(
            "the new release retries `failing` after its backoff, counting on",
            || {
                let beta = beta.clone();
                async move {
                    get(&beta, "failing")
                        .await
                        .filter(|o| o["status"]["consecutiveFailures"]["apply"].as_u64() > Some(failures))
                }
            },
        )
        .await;

        // The held changes end: the apply is booked once, the deletion completes.
        runners.open_gate();
        let inflight = until_or(
            "the held apply ends and is booked",
            || {
                let beta = beta.clone();
                async move { get(&beta, "inflight").await.filter(applied) }
            },
            || report(admin, ns, "inflight", logs),
        )
        .await;
        let inflight_jobs = jobs_of(admin, ns, "inflight").await;
        assert_eq!(applies(&inflight_jobs), 1, "one apply Job: {inflight_jobs:?}");
        assert_eq!(inflight_jobs[..1], self.jobs["inflight"][..1], "the one held");
        // The held Job (the first) is booked; a drift check may have followed it.
        assert!(
            inflight["status"]["lastBookedJobSeq"].as_u64() >= Some(1),
            "{}",
            inflight["status"]
        );
        assert_eq!(
            inflight["status"]["consecutiveFailures"]["apply"].as_u64().unwrap_or(0),
            0,
            "{inflight}"
        );
        until("the held deletion completes", || {
            let alpha = alpha.clone();
            async move { matches!(alpha.get("doomed").await, Err(kube::Error::Api(s)) if s.code == 404).then_some(()) }
        })
        .await;

        // An old client approves the awaiting plan; the new controller applies it once.
        alpha
            .patch(
                "awaiting",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"captf.io/approve-plan": self.hash}}})),
            )
            .await
            .unwrap();
        until("the new release applies the approved plan", || {
            let beta = beta.clone();
            async move { get(&beta, "awaiting").await.filter(applied) }
        })
        .await;
        let approved = jobs_of(admin, ns, "awaiting").await;
        assert_eq!(
            applies(&approved),
            applies(&self.jobs["awaiting"]) + 1,
            "one apply Job after the approval: {:?} -> {approved:?}",
            self.jobs["awaiting"]
        );

        // Nothing ran for the Ready object, and where no apply ran the state is byte-identical.
        assert_eq!(jobs_of(admin, ns, "ready").await, self.jobs["ready"]);
        let after = states(admin, ns).await;
        for name in ["ready", "failing"] {
            let secret = format!("tfstate-default-{name}-tc");
            assert!(self.states.contains_key(&secret), "{:?}", self.states.keys());
            assert_eq!(after.get(&secret), self.states.get(&secret), "state Secret {secret}");
        }
    }
}

/// `helm` with `args` on the release namespace `ns`.
pub fn helm(bin: &Path, kubeconfig: &Path, ns: &str, args: &[&str]) -> String {
    super::run_ok(
        std::process::Command::new(bin.join("helm"))
            .args(args)
            .args(["-n", ns, "--kubeconfig"])
            .arg(kubeconfig),
    )
}

/// `kubectl captf` with `args`.
pub fn plugin(kubeconfig: &Path, args: &[&str]) -> String {
    super::run_ok(
        std::process::Command::new(super::webhook::binary("kubectl-captf"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args),
    )
}

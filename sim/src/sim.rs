//! [`Sim`]: start a simulator in-process and drive it from a test.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};

use crate::error::ApiError;
use crate::faults::Faults;
use crate::https::HttpsEndpoint;
use crate::resources::{Registry, RegistryError};
use crate::runner::{JobMatch, RunnerScript};
use crate::server::{Shared, router};
use crate::store::{World, later_or_max};

/// Failed to start or drive the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("failed to bind the simulator's listener on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("failed to load CRDs: {0}")]
    Crds(#[from] RegistryError),
    #[error("failed to build a kube client for the simulator: {0}")]
    Client(#[from] kube::Error),
    #[error("failed to write kubeconfig {0}: {1}")]
    WriteKubeconfig(PathBuf, std::io::Error),
    #[error("simulator API error: {0}")]
    Api(#[from] ApiError),
    #[error("simulator object is not a {0}: {1}")]
    Decode(&'static str, serde_json::Error),
    #[error("failed to start the simulator's HTTPS port: {0}")]
    Https(#[from] crate::https::HttpsError),
    #[error("SimBuilder::process_image needs a working root: set SimBuilder::process_root")]
    ProcessRoot,
}

/// Options for [`Sim::builder`].
#[derive(Clone, Debug)]
pub struct SimBuilder {
    addr: SocketAddr,
    start_time: Option<Timestamp>,
    seed: u64,
    crd_dir: Option<PathBuf>,
    history: usize,
    https: bool,
    process_images: std::collections::BTreeMap<String, crate::process_kubelet::ProcessImage>,
    process_root: Option<PathBuf>,
}

impl Default for SimBuilder {
    fn default() -> Self {
        SimBuilder {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            start_time: None,
            seed: 0x5eed,
            crd_dir: None,
            history: 10_000,
            https: false,
            process_images: Default::default(),
            process_root: None,
        }
    }
}

static DEFAULT_REGISTRY: LazyLock<Result<Registry, String>> =
    LazyLock::new(|| registry_for(None).map_err(|e| e.to_string()));

/// The built-in resources, CAPTF's CRDs as `captf-shared` generates them (each served at its
/// stored version, v1beta1: conversion is the real API server's, exercised on the real control
/// plane), and the CRDs of `dir`.
fn registry_for(dir: Option<&Path>) -> Result<Registry, RegistryError> {
    let mut registry = Registry::builtin();
    for crd in captf_shared::crd::crds() {
        registry.add_crd(&crd)?;
    }
    if let Some(dir) = dir {
        registry.load_crd_dir(dir)?;
    }
    Ok(registry)
}

impl SimBuilder {
    /// Listen here (default `127.0.0.1:0`, a random port).
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }
    /// The simulated clock's start (default: the wall clock, whole seconds).
    pub fn start_time(mut self, ts: Timestamp) -> Self {
        self.start_time = Some(ts);
        self
    }
    /// Seed of generated names, uids and lock IDs (deterministic per seed).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    /// Serve the CRDs of this directory too (Cluster API's, say), besides CAPTF's.
    pub fn crd_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.crd_dir = Some(dir.into());
        self
    }
    /// How many events watches can replay before `410 Gone` (default 10,000).
    pub fn history(mut self, events: usize) -> Self {
        self.history = events;
        self
    }

    /// Also serve the API over HTTPS on another random port of 127.0.0.1, with a CA made for
    /// this simulator ([`Sim::https`]), for processes that use in-cluster configuration.
    pub fn https(mut self) -> Self {
        self.https = true;
        self
    }

    /// Run the pods whose container image is `image` as real processes (the process kubelet,
    /// `crate::process`) instead of scripted runners. Needs [`Self::process_root`]; turns on
    /// [`Self::https`], which the processes reach the API through.
    pub fn process_image(mut self, image: impl Into<String>, files: crate::process_kubelet::ProcessImage) -> Self {
        self.process_images.insert(image.into(), files);
        self.https = true;
        self
    }

    /// The folder where the process kubelet keeps its pods' volumes, roots and files.
    pub fn process_root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.process_root = Some(dir.into());
        self
    }

    pub async fn start(self) -> Result<Sim, SimError> {
        if !self.process_images.is_empty() && self.process_root.is_none() {
            return Err(SimError::ProcessRoot);
        }
        let registry = match &self.crd_dir {
            Some(dir) => registry_for(Some(dir))?,
            // Parsed once per process: hundreds of simulators in one test binary share it.
            None => DEFAULT_REGISTRY
                .as_ref()
                .map_err(|e| SimError::Crds(RegistryError::Cached(e.clone())))?
                .clone(),
        };
        let now = self.start_time.unwrap_or_else(|| {
            let n = Timestamp::now();
            Timestamp::from_second(n.as_second()).unwrap_or(n)
        });
        let world = World::new(registry, now, self.seed, self.history);
        let shared = Arc::new(Shared {
            world: Mutex::new(world),
            faults: Faults::default(),
            services: Default::default(),
            activity: Default::default(),
            auth: Default::default(),
        });
        let listener = tokio::net::TcpListener::bind(self.addr)
            .await
            .map_err(|e| SimError::Bind(self.addr, e))?;
        let addr = listener.local_addr().map_err(|e| SimError::Bind(self.addr, e))?;
        let (stop, stopped) = oneshot::channel::<()>();
        let app = router(shared.clone());
        let (https, https_stop) = if self.https {
            let bind = SocketAddr::new(self.addr.ip(), 0);
            let listener = tokio::net::TcpListener::bind(bind)
                .await
                .map_err(|e| SimError::Bind(bind, e))?;
            let (stop, stopped) = oneshot::channel::<()>();
            (Some(crate::https::serve(listener, app.clone(), stopped)?), Some(stop))
        } else {
            (None, None)
        };
        if let (Some(root), Some(endpoint)) = (self.process_root.clone(), https.clone())
            && !self.process_images.is_empty()
        {
            let pk = crate::process_kubelet::ProcessKubelet::new(
                self.process_images.clone(),
                root,
                endpoint,
                shared.auth.clone(),
                Arc::downgrade(&shared),
            );
            shared.world.lock().unwrap_or_else(|p| p.into_inner()).kubelet.process = Some(Arc::new(pk));
        }
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(Sim {
            shared,
            addr,
            stop: Some(stop),
            https,
            https_stop,
        })
    }
}

/// A running simulator. Dropping it stops the server.
pub struct Sim {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    https: Option<HttpsEndpoint>,
    https_stop: Option<oneshot::Sender<()>>,
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.stop_processes();
        // End the long-lived streams (watches, clock) so the server's connections close.
        self.shared.faults.drop_watches();
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(s) = self.https_stop.take() {
            let _ = s.send(());
        }
    }
}

impl Sim {
    /// Start with defaults: a random port on 127.0.0.1, the chart's CRDs, the wall clock.
    pub async fn start() -> Result<Sim, SimError> {
        SimBuilder::default().start().await
    }

    pub fn builder() -> SimBuilder {
        SimBuilder::default()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The HTTPS port, when the simulator was built with [`SimBuilder::https`].
    pub fn https(&self) -> Option<&HttpsEndpoint> {
        self.https.as_ref()
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube `Config` for the simulator (namespace `default`).
    pub fn config(&self) -> kube::Config {
        let uri = self.url().parse().unwrap_or_default();
        let mut c = kube::Config::new(uri);
        c.default_namespace = "default".into();
        c
    }

    /// A kube `Client` for the simulator.
    pub fn client(&self) -> Result<kube::Client, SimError> {
        Ok(kube::Client::try_from(self.config())?)
    }

    /// A kubeconfig document (cluster, user and context `captf-sim`).
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: captf-sim\n  cluster:\n    server: {}\nusers:\n- name: captf-sim\n  user:\n    token: captf-sim\ncontexts:\n- name: captf-sim\n  context:\n    cluster: captf-sim\n    user: captf-sim\n    namespace: default\ncurrent-context: captf-sim\npreferences: {{}}\n",
            self.url()
        )
    }

    /// Write the kubeconfig for child processes and `kubectl`.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> Result<(), SimError> {
        let path = path.as_ref();
        std::fs::write(path, self.kubeconfig_yaml()).map_err(|e| SimError::WriteKubeconfig(path.into(), e))
    }

    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        // A panic while holding the lock is a bug in the simulator; keep serving the state.
        self.shared.world.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ---- the clock ----

    /// The simulated time.
    pub fn now(&self) -> Timestamp {
        self.world().now()
    }

    /// Advance the clock, running every runner step and deadline on the way (each at its own
    /// time).
    pub fn advance(&self, d: Duration) {
        let mut w = self.world();
        let target = later_or_max(w.now(), d);
        w.advance_to(target);
    }

    /// Advance the clock to a time (no-op when it is in the past).
    pub fn advance_to(&self, ts: Timestamp) {
        self.world().advance_to(ts);
    }

    /// A receiver that sees every clock change (as `GET /sim/v1/clock?watch=true` does).
    pub fn clock_watch(&self) -> watch::Receiver<Timestamp> {
        self.world().clock.subscribe()
    }

    /// Nothing is in progress: no request in flight, and every watch has taken every published
    /// event and handed it to its connection (see `activity`). The simulated runners and
    /// kubelet work synchronously, so they have nothing pending by construction; the process
    /// kubelet's containers run in wall time and are not counted (wait for what they do).
    pub fn quiet(&self) -> bool {
        let published = {
            let w = self.world();
            crate::activity::Published {
                events: w.published,
                clock_changes: w.clock_changes,
            }
        };
        self.shared.activity.quiet(published)
    }

    /// Requests received so far: it changes whenever a client does anything.
    pub fn requests(&self) -> u64 {
        self.shared.activity.requests()
    }

    /// Requests received so far by `VERB resource` (`GET secrets`, `PATCH terraformclusters/status`).
    pub fn requests_by_kind(&self) -> std::collections::BTreeMap<String, u64> {
        self.shared.activity.requests_by_kind()
    }

    /// The next time a runner has something to do, if any.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.world().next_due()
    }

    /// Advance the clock in real time: every `tick` of wall time, `tick × speed` of simulated
    /// time (for the demo). The task stops with the simulator.
    pub fn run_clock(&self, tick: Duration, speed: u32) {
        let weak = Arc::downgrade(&self.shared);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(tick);
            loop {
                every.tick().await;
                let Some(sh) = weak.upgrade() else { return };
                let mut w = sh.world.lock().unwrap_or_else(|p| p.into_inner());
                let target = later_or_max(w.now(), tick.saturating_mul(speed));
                w.advance_to(target);
            }
        });
    }

    // ---- runner scripts ----

    /// Queue a script for the next Job that matches (used once).
    pub fn script(&self, m: JobMatch, s: RunnerScript) {
        self.world().scripts.push(m, s);
    }

    /// Choose scripts with a closure over the Job (`None` falls through to the default).
    pub fn script_with(&self, rule: impl Fn(&Job) -> Option<RunnerScript> + Send + Sync + 'static) {
        self.world().scripts.set_rule(Arc::new(rule));
    }

    /// The script of Jobs nothing else chose (initially [`RunnerScript::realistic`]).
    pub fn set_default_script(&self, s: RunnerScript) {
        self.world().scripts.set_default(s);
    }

    /// From now on, a CAPTF object's `sim.captf.io/outcome` annotation chooses what the
    /// simulated runner of its next Jobs does (`succeed`, `fail`, `block`, `drift`, `hang`: see
    /// [`crate::runner::outcome_script`]), after any queued script and before the rule and the
    /// default. Jobs the process kubelet runs as real processes are not affected.
    pub fn honour_outcome_annotations(&self) {
        let outcomes = crate::runner::Outcomes::default();
        let mut w = self.world();
        let defs: Vec<_> = w
            .registry
            .all()
            .iter()
            .filter(|d| d.group == captf_shared::keys::GROUP)
            .cloned()
            .collect();
        for def in &defs {
            for o in w.list(def, None) {
                outcomes.note(&o, false);
            }
        }
        w.scripts.set_outcomes(outcomes.clone());
        w.observe(Box::new(move |_, ev| {
            outcomes.note(&ev.object, ev.kind == crate::store::EventType::Deleted)
        }));
    }

    /// Queued scripts not used yet.
    pub fn pending_scripts(&self) -> usize {
        self.world().scripts.pending()
    }

    /// Evict a running runner pod now. False when no runner runs in it.
    pub fn evict(&self, namespace: &str, pod: &str) -> bool {
        self.world().evict(namespace, pod)
    }

    /// Give a pod the log `GET pods/<name>/log` serves (else one is made from the pod).
    pub fn set_pod_log(&self, namespace: &str, pod: &str, text: &str) {
        self.world()
            .kubelet
            .logs
            .insert((namespace.to_string(), pod.to_string()), text.to_string());
    }

    /// SIGKILL the container process of a pod now (it dies holding whatever it held, as on an
    /// out-of-memory kill). False when no container process runs in that pod.
    pub fn kill_container(&self, namespace: &str, pod: &str) -> bool {
        self.world().kill_container(namespace, pod)
    }

    /// Kill every container process of the process kubelet and wait until each is reaped (the
    /// simulator does this when it stops). Their pods stay as they were.
    pub fn stop_processes(&self) {
        let pk = self.world().kubelet.process.clone();
        if let Some(pk) = pk {
            pk.stop_all();
        }
    }

    /// The outermost pid of every container process the process kubelet still runs.
    pub fn process_pids(&self) -> Vec<i32> {
        let pk = self.world().kubelet.process.clone();
        pk.map(|pk| pk.pids()).unwrap_or_default()
    }

    /// Pods whose container runs as a real process right now (the process kubelet), as
    /// `(namespace, name)`: a SIGTERMed container counts until its process has ended.
    pub fn process_pods(&self) -> Vec<(String, String)> {
        self.world().kubelet.process_pods()
    }

    /// Whether the Job's pod was started as a real process rather than played by a script
    /// (its image is mapped with [`SimBuilder::process_image`] and no queued script matched it).
    pub fn job_ran_as_process(&self, namespace: &str, job: &str) -> bool {
        self.world()
            .kubelet
            .process_jobs
            .contains(&(namespace.to_string(), job.to_string()))
    }

    /// Pods whose runner is still running, as `(namespace, name)`.
    pub fn running_pods(&self) -> Vec<(String, String)> {
        self.world().kubelet.running()
    }

    // ---- the Terraform state lock ----

    /// Make someone else (a workstation) hold the state lock of `suffix`: the Lease
    /// `lock-tfstate-default-<suffix>` with `holderIdentity` = `lock_id` and lock info whose
    /// `Who` is `who` (e.g. `alice@laptop`).
    pub fn hold_lock(&self, namespace: &str, suffix: &str, lock_id: &str, who: &str) {
        self.world()
            .hold_lock(namespace, suffix, lock_id, who, "OperationTypeApply");
    }

    /// Take `suffix`'s lock as [`Sim::hold_lock`] does, but only when nobody holds it (as
    /// Terraform would): returns whether it was taken.
    pub fn hold_lock_if_free(&self, namespace: &str, suffix: &str, lock_id: &str, who: &str) -> bool {
        let mut w = self.world();
        let name = captf_shared::names::lock_lease_name(suffix);
        let held = w
            .try_get("coordination.k8s.io/leases", namespace, &name)
            .and_then(|l| l.pointer("/spec/holderIdentity"))
            .and_then(Value::as_str)
            .is_some_and(|h| !h.is_empty());
        if !held {
            w.hold_lock(namespace, suffix, lock_id, who, "OperationTypeApply");
        }
        !held
    }

    /// Remove Events last seen more than `ttl` ago (simulated time), as kube-apiserver's
    /// `--event-ttl` (default one hour) does; returns how many went. Long runs call it so the
    /// store doesn't grow with time.
    pub fn expire_events(&self, ttl: Duration) -> usize {
        let mut w = self.world();
        let Ok(def) = w.def("/events") else { return 0 };
        let Some(cutoff) = w
            .now()
            .checked_sub(jiff::SignedDuration::try_from(ttl).unwrap_or(jiff::SignedDuration::MAX))
            .ok()
        else {
            return 0;
        };
        let seen = |e: &Value| -> Option<Timestamp> {
            [
                "/series/lastObservedTime",
                "/lastTimestamp",
                "/eventTime",
                "/metadata/creationTimestamp",
            ]
            .iter()
            .filter_map(|p| e.pointer(p).and_then(Value::as_str)?.parse::<Timestamp>().ok())
            .max()
        };
        let old: Vec<(String, String)> = w
            .list_where(&def, None, |e| seen(e).is_some_and(|t| t < cutoff))
            .iter()
            .map(|e| {
                let m = &e["metadata"];
                (
                    m["namespace"].as_str().unwrap_or_default().to_string(),
                    m["name"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        for (ns, name) in &old {
            let _ = w.delete(&def, ns, name, &crate::store::DeleteOpts::default());
        }
        old.len()
    }

    /// Terraform's unlock of `suffix`'s lock (holder and lock info cleared, Lease kept).
    pub fn release_lock(&self, namespace: &str, suffix: &str) {
        self.world()
            .unlock_lease(namespace, &captf_shared::names::lock_lease_name(suffix));
    }

    // ---- objects ----

    /// Read any object by store id (`batch/jobs`, `/pods`, `coordination.k8s.io/leases`,
    /// `infrastructure.cluster.x-k8s.io/terraformclusters`).
    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        self.world().try_get(resource, namespace, name).cloned()
    }

    /// List objects of a store id in a namespace (`None`: all namespaces).
    pub fn list(&self, resource: &str, namespace: Option<&str>) -> Vec<Value> {
        let w = self.world();
        match w.def(resource) {
            Ok(def) => w.list(&def, namespace),
            Err(_) => vec![],
        }
    }

    /// How many objects of a store id in a namespace (`None`: all) satisfy `keep`, without
    /// copying any (cheap enough to poll while thousands of objects exist).
    pub fn count_where(&self, resource: &str, namespace: Option<&str>, keep: impl Fn(&Value) -> bool) -> usize {
        let w = self.world();
        match w.def(resource) {
            Ok(def) => w.count_where(&def, namespace, keep),
            Err(_) => 0,
        }
    }

    /// Every change from now on, as watches see them, each stamped with the wall-clock instant
    /// it was made (for measurements). A receiver that falls more than 16,384 changes behind
    /// gets `Lagged`.
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<Arc<crate::store::WatchEvent>> {
        self.world().tx.subscribe()
    }

    /// Call `observer` with the simulated time and every change from now on, in order and
    /// without loss (unlike [`Sim::changes`], which drops what a slow receiver can't keep up
    /// with). It runs under the simulator's lock, before the change is answered or sent to any
    /// watch: keep it short, and never call back into the simulator from it.
    pub fn observe(&self, observer: impl FnMut(Timestamp, &crate::store::WatchEvent) + Send + 'static) {
        self.world().observe(Box::new(observer));
    }

    /// Create or replace an object directly (no admission, no faults). Its resource is found
    /// from `apiVersion` and `kind`.
    pub fn put(&self, obj: Value) -> Result<Value, SimError> {
        let mut w = self.world();
        let av = obj.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
        let id = w
            .registry
            .by_kind(av, kind)
            .map(|d| d.id())
            .ok_or_else(|| ApiError::bad_request(format!("no resource serves {av} {kind}")))?;
        Ok(w.put(&id, obj)?)
    }

    /// Create a namespace (no-op when it exists).
    pub fn create_namespace(&self, name: &str) {
        self.world().ensure_namespace(name);
    }

    /// The pods of a Job (by the `batch.kubernetes.io/job-name` label).
    pub fn pods_of_job(&self, namespace: &str, job: &str) -> Result<Vec<Pod>, SimError> {
        self.list("/pods", Some(namespace))
            .into_iter()
            .filter(|p| {
                p.pointer("/metadata/labels/batch.kubernetes.io~1job-name")
                    .and_then(Value::as_str)
                    == Some(job)
            })
            .map(|p| serde_json::from_value(p).map_err(|e| SimError::Decode("Pod", e)))
            .collect()
    }

    /// Every Job in a namespace, oldest first.
    pub fn jobs(&self, namespace: &str) -> Result<Vec<Job>, SimError> {
        let mut jobs = self.list("batch/jobs", Some(namespace));
        jobs.sort_by(|a, b| {
            let k = |o: &Value| {
                (
                    o.pointer("/metadata/creationTimestamp")
                        .cloned()
                        .unwrap_or(json!(""))
                        .to_string(),
                    o.pointer("/metadata/resourceVersion")
                        .and_then(Value::as_str)
                        .and_then(|s| s.parse::<u64>().ok()),
                )
            };
            k(a).cmp(&k(b))
        });
        jobs.into_iter()
            .map(|j| serde_json::from_value(j).map_err(|e| SimError::Decode("Job", e)))
            .collect()
    }

    /// Events in a namespace, in the events.k8s.io/v1 shape (`regarding`, `note`, ...): one
    /// store serves both views, as in kube-apiserver.
    pub fn events(&self, namespace: &str) -> Vec<Value> {
        self.list("/events", Some(namespace))
            .iter()
            .map(crate::events::to_events_v1)
            .collect()
    }

    /// Events in a namespace, in the core/v1 shape (`involvedObject`, `message`, ...).
    pub fn core_events(&self, namespace: &str) -> Vec<Value> {
        self.list("/events", Some(namespace))
    }

    /// Forget the watch history: a watch from any older resourceVersion gets 410 Gone.
    pub fn compact(&self) {
        self.world().compact();
    }

    /// The newest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.world().resource_version()
    }

    // ---- faults and admission ----

    /// The fault injector.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    // ---- identities and RBAC ----

    /// A new bearer token of the ServiceAccount `namespace/name` (as a TokenRequest gives):
    /// requests with it are authorized by the Roles, ClusterRoles and bindings the simulator
    /// holds, and answered 403 in Kubernetes' words when none allows them.
    pub fn token_for(&self, namespace: &str, name: &str) -> String {
        self.shared.auth.mint(namespace, name)
    }

    /// The 403 message of every request RBAC denied so far, oldest first (a test running a
    /// component under its ServiceAccount expects none).
    pub fn denied(&self) -> Vec<String> {
        self.shared.auth.denied()
    }

    /// Every `<verb> <group>/<resource>` the ServiceAccount `namespace/name` was allowed so far
    /// (`group` empty for the core group; `resource/subresource` for a subresource).
    pub fn used_rights(&self, namespace: &str, name: &str) -> std::collections::BTreeSet<String> {
        self.shared
            .auth
            .used(&crate::rbac::UserInfo::service_account(namespace, name).name)
    }

    /// [`Sim::config`] authenticated as the ServiceAccount `namespace/name` (a new token).
    pub fn config_as(&self, namespace: &str, name: &str) -> kube::Config {
        let mut c = self.config();
        c.auth_info.token = Some(self.token_for(namespace, name).into());
        c
    }

    /// A kube `Client` authenticated as the ServiceAccount `namespace/name`.
    pub fn client_as(&self, namespace: &str, name: &str) -> Result<kube::Client, SimError> {
        Ok(kube::Client::try_from(self.config_as(namespace, name))?)
    }

    /// [`Sim::kubeconfig_yaml`] whose user is the ServiceAccount `namespace/name` (a new token).
    pub fn kubeconfig_yaml_as(&self, namespace: &str, name: &str) -> String {
        let token = self.token_for(namespace, name);
        self.kubeconfig_yaml()
            .replace("    token: captf-sim\n", &format!("    token: {token}\n"))
    }

    /// Store the ServiceAccounts, Roles, ClusterRoles, RoleBindings and ClusterRoleBindings of a
    /// multi-document YAML stream (e.g. `helm template` of a chart), creating their namespaces;
    /// every other document is skipped. Returns how many objects were stored.
    pub fn load_rbac(&self, yaml: &str) -> Result<usize, SimError> {
        const KINDS: [&str; 5] = [
            "ServiceAccount",
            "Role",
            "ClusterRole",
            "RoleBinding",
            "ClusterRoleBinding",
        ];
        let mut n = 0;
        for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
            let v: Value = serde::Deserialize::deserialize(doc)
                .map_err(|e| SimError::Api(ApiError::bad_request(format!("a document is not YAML: {e}"))))?;
            let kind = v.get("kind").and_then(Value::as_str).unwrap_or_default();
            if !KINDS.contains(&kind) {
                continue;
            }
            if let Some(ns) = v.pointer("/metadata/namespace").and_then(Value::as_str) {
                self.create_namespace(ns);
            }
            self.put(v)?;
            n += 1;
        }
        Ok(n)
    }

    /// Where a webhook configuration's `service: {namespace, name}` points (e.g. a webhook
    /// child process listening on 127.0.0.1). The TLS server name is `<name>.<namespace>.svc`.
    pub fn register_service(&self, namespace: &str, name: &str, addr: SocketAddr) {
        self.shared.services.register(namespace, name, addr);
    }
}

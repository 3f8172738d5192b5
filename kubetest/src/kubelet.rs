//! A kubelet for the real control plane: the simulator's process kubelet
//! ([`captf_sim::process_kubelet::ProcessRuntime`]: a pod's first container as a real process in private
//! mount, UTS and PID namespaces) driven through a real API server.
//!
//! It registers a Node (Ready, capacity, addresses) and renews its Lease in `kube-node-lease`;
//! binds the pods nobody scheduled (no `nodeName`; no scheduler runs) to that Node through
//! `pods/binding`; runs each bound pod whose image is mapped to local files, with a projected
//! service-account token minted through TokenRequest; reports `pods/status` (phase, conditions,
//! container state, exit code, termination message, start time, a loopback pod IP of its own);
//! and on a pod's deletion (or an eviction, which is a deletion) sends SIGTERM, SIGKILL when the
//! grace period ends, and then deletes the pod for good as a kubelet does.
//!
//! It runs the readiness and liveness probes a pod's container declares ([`crate::probe`]): a
//! pod with a readiness probe is Ready only while the probe passes, so a Service's endpoints
//! leave it when it fails; a failed liveness probe ends the container with SIGTERM. This kubelet
//! does not restart containers: the pod ends `Failed`, and its ReplicaSet makes a new one.
//!
//! Pods get a loopback address of their own (`127.0.x.y`) and share this machine's network;
//! or, with [`KubeletOptions::host_network`], this machine's address, as every pod shared the
//! host's network (`hostNetwork: true`): then the EndpointSlice controller can put them behind
//! their Services (the API server refuses loopback addresses in an EndpointSlice), and their
//! ports must not collide; or, with [`KubeletOptions::pod_network`], a network namespace and an
//! address of their own on a bridge ([`crate::podnet`]), so that replicas may use the same
//! ports.
//!
//! It polls the pod list (every [`KubeletOptions::sync_every`]) instead of watching. What to do
//! with a pod is decided by pure functions ([`next_action`], [`grace_period`],
//! [`running_status`], [`waiting_status`], [`terminated_status`], [`next_pod_ip`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use captf_sim::ProcessImage;
use captf_sim::process_kubelet::{ApiAccess, ContainerEvents, Exit, Objects, PodKey, ProcessRuntime};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, ServiceAccount};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::podnet::{PodNet, PodNetwork, next_pod_address};
use crate::probe::{Kind, Tracker, check, probe_of};

/// The namespace of the nodes' Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// The host IP of every pod: the node is this machine's loopback.
pub const HOST_IP: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// The grace period of a pod that says none.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);
/// The exit code of a container that could not be started (as container runtimes report it).
pub const CANNOT_RUN_EXIT_CODE: i32 = captf_sim::process_kubelet::CANNOT_RUN_EXIT_CODE;
/// The most of a container's log that `FallbackToLogsOnError` puts in its termination message.
pub const FALLBACK_LOG_BYTES: usize = 2048;

/// How to run a kubelet.
#[derive(Clone, Debug)]
pub struct KubeletOptions {
    pub node_name: String,
    /// Image → what runs for it (the simulator's `SimBuilder::process_image` mapping).
    pub images: BTreeMap<String, ProcessImage>,
    /// Where the pods' folders and logs go.
    pub root: PathBuf,
    /// The API server as a container reaches it (`KUBERNETES_SERVICE_HOST`/`PORT`).
    pub api_host: String,
    pub api_port: u16,
    /// The API server's CA: `ca.crt` comes from `kube-root-ca.crt`, this is for completeness of
    /// the in-cluster access the runtime is given.
    pub ca_pem: String,
    /// The Lease's `leaseDurationSeconds`.
    pub lease_duration_seconds: i32,
    /// How often the Lease is renewed.
    pub renew_every: Duration,
    /// How often the Node's status (its Ready heartbeat) is written.
    pub status_every: Duration,
    /// How often the pods are listed and the grace periods checked.
    pub sync_every: Duration,
    /// Every pod's address, as if each had `hostNetwork: true` (this machine's own address, one
    /// an EndpointSlice may hold); `None`: a loopback address of its own per pod.
    pub host_network: Option<Ipv4Addr>,
    /// Each pod in a network of its own ([`crate::podnet`]); the ports listed are this
    /// machine's loopback ports a pod reaches on its own loopback (the API server's always is).
    /// `None`: the pods share this machine's network.
    pub pod_network: Option<Vec<u16>>,
    /// How often the Secret and ConfigMap volumes of running pods are written again from the API
    /// (a kubelet's is about a minute; shorter here, so that a renewed certificate reaches its
    /// pod within a test's patience).
    pub volume_sync_every: Duration,
}

impl KubeletOptions {
    /// A kubelet named `node_name` for the API server on `127.0.0.1:<api_port>`, with a kubelet's
    /// usual Lease (40 s, renewed every 10 s) and a Node status every minute.
    pub fn new(
        node_name: impl Into<String>,
        root: impl Into<PathBuf>,
        api_port: u16,
        ca_pem: impl Into<String>,
    ) -> Self {
        KubeletOptions {
            node_name: node_name.into(),
            images: BTreeMap::new(),
            root: root.into(),
            api_host: HOST_IP.to_string(),
            api_port,
            ca_pem: ca_pem.into(),
            lease_duration_seconds: 40,
            renew_every: Duration::from_secs(10),
            status_every: Duration::from_secs(60),
            sync_every: Duration::from_millis(200),
            host_network: None,
            pod_network: None,
            volume_sync_every: Duration::from_secs(3),
        }
    }

    /// Every pod shares the host's network at `address` (see [`KubeletOptions::host_network`]).
    pub fn host_network(mut self, address: Ipv4Addr) -> Self {
        self.host_network = Some(address);
        self
    }

    /// Every pod gets a network namespace and an address of its own (see
    /// [`KubeletOptions::pod_network`]); `forward`: this machine's loopback ports the pods need
    /// besides the API server's (a module server's, say).
    pub fn pod_network(mut self, forward: impl IntoIterator<Item = u16>) -> Self {
        self.pod_network = Some(forward.into_iter().collect());
        self
    }

    /// Run the pods whose first container's image is `image` as `files` says.
    pub fn image(mut self, image: impl Into<String>, files: ProcessImage) -> Self {
        self.images.insert(image.into(), files);
        self
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("failed to prepare the kubelet's folder {path}: {source}")]
    Prepare {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to make the pods' network: {0}")]
    PodNetwork(#[from] crate::podnet::PodNetError),
    #[error("failed to register the Node {node}: {source}")]
    Register {
        node: String,
        #[source]
        source: kube::Error,
    },
}

/// A running kubelet. Dropping it stops it and kills (and reaps) every container process.
pub struct Kubelet {
    node: String,
    runtime: Arc<ProcessRuntime>,
    network: Option<Arc<PodNetwork>>,
    logs: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Kubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelet")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.task.abort();
        // Refuses new containers, then kills and reaps every one it knows.
        self.runtime.stop_all();
    }
}

impl Kubelet {
    /// Registers the Node and its Lease as `client` (an admin: the kubelet has no node
    /// credentials of its own), then runs in the background.
    pub async fn start(client: kube::Client, opts: KubeletOptions) -> Result<Kubelet, KubeletError> {
        let logs = opts.root.join("logs");
        std::fs::create_dir_all(&logs).map_err(|source| KubeletError::Prepare {
            path: logs.clone(),
            source,
        })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let events = Arc::new(Events {
            logs: logs.clone(),
            exits: tx,
        });
        let runtime = Arc::new(ProcessRuntime::new(opts.images.clone(), opts.root.clone(), events));
        let network = match &opts.pod_network {
            Some(forward) => {
                let mut ports = forward.clone();
                ports.push(opts.api_port);
                ports.sort_unstable();
                ports.dedup();
                Some(Arc::new(PodNetwork::new(ports)?))
            }
            None => None,
        };
        let node_uid = register_node(&client, &opts)
            .await
            .map_err(|source| KubeletError::Register {
                node: opts.node_name.clone(),
                source,
            })?;
        let mut state = State {
            client,
            opts: opts.clone(),
            runtime: runtime.clone(),
            node_uid,
            network: network.clone(),
            pods: BTreeMap::new(),
            last_status: None,
        };
        state.renew_lease().await;
        let task = tokio::spawn(state.run(rx));
        Ok(Kubelet {
            node: opts.node_name,
            runtime,
            network,
            logs,
            task,
        })
    }

    pub fn node_name(&self) -> &str {
        &self.node
    }

    /// With [`KubeletOptions::pod_network`], the pods' bridge address: what this machine sends
    /// to a pod (an API server's webhook call, say) comes from it.
    pub fn pod_gateway(&self) -> Option<Ipv4Addr> {
        self.network.as_ref().map(|n| n.gateway())
    }

    /// The outermost pid of every container process running now.
    pub fn pids(&self) -> Vec<i32> {
        self.runtime.pids()
    }

    /// The file holding a pod's stdout and stderr.
    pub fn log_path(&self, namespace: &str, pod: &str) -> PathBuf {
        self.logs.join(format!("{namespace}_{pod}.log"))
    }
}

/// The runtime's events: output appended to the pod's log file, ends sent to the loop.
struct Events {
    logs: PathBuf,
    exits: mpsc::UnboundedSender<(PodKey, Exit)>,
}

impl ContainerEvents for Events {
    fn output(&self, key: &PodKey, text: &str) {
        use std::io::Write as _;
        let path = self.logs.join(format!("{}_{}.log", key.0, key.1));
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = f.write_all(text.as_bytes());
        }
    }

    fn exited(&self, key: &PodKey, exit: Exit) {
        let _ = self.exits.send((key.clone(), exit));
    }
}

/// What the kubelet knows of a pod it took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Local {
    /// Not started: waiting for something (an image, a Secret), with the reason written.
    Waiting(String),
    /// Its container runs; `kill_at` once it got SIGTERM.
    Running { kill_at: Option<Instant>, killed: bool },
    /// Its container ended and the pod's status says so.
    Ended,
}

struct PodState {
    uid: String,
    /// The pod as it was when its container started (its spec does not change).
    pod: Value,
    ip: Ipv4Addr,
    started_at: String,
    local: Local,
    /// A status not written yet (the API server did not take it): written again at every sync,
    /// and before the pod is deleted for good.
    unwritten: Option<Value>,
    /// The running container's probes.
    probes: BTreeMap<Kind, Tracker>,
    /// The pod's own network namespace, held (and deleted when the pod is forgotten) for as long
    /// as its container may run in it.
    _net: Option<PodNet>,
}

/// One probe's result for the pod `key` (the pod of uid `uid`).
struct ProbeResult {
    key: PodKey,
    uid: String,
    kind: Kind,
    ok: bool,
}

/// What to do with a pod now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Nothing,
    /// Bind it to this node (`pods/binding`).
    Bind,
    /// Start its container (again, when it waits).
    Start,
    /// SIGTERM its container; SIGKILL after `grace`.
    Terminate {
        grace: Duration,
    },
    /// Delete it for good (`gracePeriodSeconds=0`): it is being deleted and nothing runs.
    Delete,
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

fn is_terminal(pod: &Value) -> bool {
    matches!(str_at(pod, "/status/phase"), "Succeeded" | "Failed")
}

/// The rule for a pod, from the pod and what this kubelet knows of it: an unscheduled pod for
/// the default scheduler is bound here; a pod bound here starts unless it ended; a pod being
/// deleted gets SIGTERM while its container runs, and is deleted for good once nothing runs.
pub fn next_action(pod: &Value, node: &str, local: Option<&Local>) -> Action {
    let bound_to = str_at(pod, "/spec/nodeName");
    let deleting = pod.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null());
    if bound_to.is_empty() {
        let scheduler = str_at(pod, "/spec/schedulerName");
        let ours = scheduler.is_empty() || scheduler == "default-scheduler";
        return if ours && !deleting && !is_terminal(pod) {
            Action::Bind
        } else {
            Action::Nothing
        };
    }
    if bound_to != node {
        return Action::Nothing;
    }
    if deleting {
        return match local {
            Some(Local::Running { kill_at: None, .. }) => Action::Terminate {
                grace: grace_period(pod),
            },
            Some(Local::Running { .. }) => Action::Nothing,
            _ => Action::Delete,
        };
    }
    match local {
        None | Some(Local::Waiting(_)) if !is_terminal(pod) => Action::Start,
        _ => Action::Nothing,
    }
}

/// The time between SIGTERM and SIGKILL: the deletion's grace period (what the API server
/// recorded from the delete or eviction), else the pod's `terminationGracePeriodSeconds`, else
/// 30 s.
pub fn grace_period(pod: &Value) -> Duration {
    let seconds = pod
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        });
    match seconds {
        Some(s) => Duration::from_secs(u64::try_from(s).unwrap_or(0)),
        None => DEFAULT_GRACE,
    }
}

/// The first loopback address `127.0.x.y` (x 1..=255, y 1..=254) not in `used`.
pub fn next_pod_ip(used: &BTreeSet<Ipv4Addr>) -> Option<Ipv4Addr> {
    (1..=255u8)
        .flat_map(|x| (1..=254u8).map(move |y| Ipv4Addr::new(127, 0, x, y)))
        .find(|ip| !used.contains(ip))
}

/// The pod with `status.podIP` and `status.hostIP` set (when it is an object, as a pod is).
fn with_addresses(pod: &mut Value, ip: Ipv4Addr) {
    let Some(o) = pod.as_object_mut() else { return };
    let status = o.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    if let Some(st) = status.as_object_mut() {
        st.insert("podIP".into(), json!(ip.to_string()));
        st.insert("hostIP".into(), json!(HOST_IP.to_string()));
    }
}

fn container_of(pod: &Value) -> (String, String) {
    (
        str_at(pod, "/spec/containers/0/name").to_string(),
        str_at(pod, "/spec/containers/0/image").to_string(),
    )
}

fn ips(ip: Ipv4Addr) -> Value {
    json!([{ "ip": ip.to_string() }])
}

fn condition(type_: &str, status: bool, reason: Option<&str>, now: &str) -> Value {
    let mut c = json!({ "type": type_, "status": if status { "True" } else { "False" },
                        "lastProbeTime": null, "lastTransitionTime": now });
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    c
}

/// The status a pod's container waiting to start reports (a strategic merge patch body).
pub fn waiting_status(pod: &Value, ip: Ipv4Addr, reason: &str, message: &str, now: &str) -> Value {
    let (name, image) = container_of(pod);
    json!({ "status": {
        "phase": "Pending", "hostIP": HOST_IP.to_string(), "hostIPs": ips(HOST_IP),
        "podIP": ip.to_string(), "podIPs": ips(ip), "startTime": now,
        "conditions": [
            condition("PodReadyToStartContainers", true, None, now),
            condition("Initialized", true, None, now),
            condition("ContainersReady", false, Some("ContainersNotReady"), now),
            condition("Ready", false, Some("ContainersNotReady"), now),
        ],
        "containerStatuses": [{ "name": name, "image": image, "imageID": "", "ready": false,
            "started": false, "restartCount": 0,
            "state": { "running": null, "terminated": null,
                       "waiting": { "reason": reason, "message": message } } }],
    }})
}

/// The status of a pod whose container runs (a strategic merge patch body): Ready as `ready`
/// says (since `ready_since`; its readiness probe passes, or it has none).
pub fn running_status(
    pod: &Value,
    ip: Ipv4Addr,
    container_id: &str,
    started_at: &str,
    ready: bool,
    ready_since: &str,
) -> Value {
    let (name, image) = container_of(pod);
    let not_ready = (!ready).then_some("ContainersNotReady");
    json!({ "status": {
        "phase": "Running", "hostIP": HOST_IP.to_string(), "hostIPs": ips(HOST_IP),
        "podIP": ip.to_string(), "podIPs": ips(ip), "startTime": started_at,
        "conditions": [
            condition("PodReadyToStartContainers", true, None, started_at),
            condition("Initialized", true, None, started_at),
            condition("ContainersReady", ready, not_ready, ready_since),
            condition("Ready", ready, not_ready, ready_since),
        ],
        "containerStatuses": [{ "name": name, "image": image, "imageID": "", "containerID": container_id,
            "ready": ready, "started": true, "restartCount": 0,
            "state": { "waiting": null, "terminated": null, "running": { "startedAt": started_at } } }],
    }})
}

/// How a container ended, as its status says it: exit code, reason, message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerEnd {
    pub exit_code: i32,
    pub reason: &'static str,
    pub message: Option<String>,
}

/// A process's end as a kubelet reports it: `Completed` for exit 0, `Error` otherwise, the
/// termination message file's text; with `FallbackToLogsOnError` and no message, a failed
/// container's last output (at most [`FALLBACK_LOG_BYTES`]). A container whose set-up failed
/// is `ContainerCannotRun` (exit 128) with why.
pub fn container_end(pod: &Value, exit: &Exit) -> ContainerEnd {
    if !exit.started {
        return ContainerEnd {
            exit_code: CANNOT_RUN_EXIT_CODE,
            reason: "ContainerCannotRun",
            message: Some(format!(
                "the container could not be started: its set-up failed with exit code {}: {}",
                exit.code,
                exit.output_tail.trim()
            )),
        };
    }
    let fallback = str_at(pod, "/spec/containers/0/terminationMessagePolicy") == "FallbackToLogsOnError";
    let message = match &exit.message {
        Some(m) => Some(m.clone()),
        None if fallback && exit.code != 0 && !exit.output_tail.is_empty() => {
            let tail = &exit.output_tail;
            let mut cut = tail.len().saturating_sub(FALLBACK_LOG_BYTES);
            while !tail.is_char_boundary(cut) {
                cut += 1;
            }
            Some(tail[cut..].to_string())
        }
        None => None,
    };
    ContainerEnd {
        exit_code: exit.code,
        reason: if exit.code == 0 { "Completed" } else { "Error" },
        message,
    }
}

/// The status of a pod whose container ended (a strategic merge patch body): `Succeeded` after
/// exit 0, else `Failed`; not ready; the container `terminated` with its end.
pub fn terminated_status(
    pod: &Value,
    ip: Ipv4Addr,
    end: &ContainerEnd,
    container_id: &str,
    started_at: &str,
    now: &str,
) -> Value {
    let (name, image) = container_of(pod);
    let mut terminated = json!({ "exitCode": end.exit_code, "reason": end.reason,
        "startedAt": started_at, "finishedAt": now, "containerID": container_id });
    if let Some(m) = &end.message {
        terminated["message"] = json!(m);
    }
    json!({ "status": {
        "phase": if end.exit_code == 0 { "Succeeded" } else { "Failed" },
        "hostIP": HOST_IP.to_string(), "hostIPs": ips(HOST_IP),
        "podIP": ip.to_string(), "podIPs": ips(ip), "startTime": started_at,
        "conditions": [
            condition("PodReadyToStartContainers", false, None, now),
            condition("ContainersReady", false, Some("PodCompleted"), now),
            condition("Ready", false, Some("PodCompleted"), now),
        ],
        "containerStatuses": [{ "name": name, "image": image, "imageID": "", "containerID": container_id,
            "ready": false, "started": false, "restartCount": 0,
            "state": { "waiting": null, "running": null, "terminated": terminated } }],
    }})
}

/// `now` in RFC 3339, whole seconds (a `Time`).
pub(crate) fn now_time() -> String {
    let now = Timestamp::now();
    Timestamp::from_second(now.as_second()).unwrap_or(now).to_string()
}

/// `now` with microseconds (a `MicroTime`).
pub(crate) fn now_micro() -> String {
    let now = Timestamp::now();
    let secs = Timestamp::from_second(now.as_second()).unwrap_or(now);
    format!(
        "{}.{:06}Z",
        secs.strftime("%Y-%m-%dT%H:%M:%S"),
        now.subsec_microsecond()
    )
}

fn container_id(key: &PodKey) -> String {
    format!("captf-process://{}_{}", key.0, key.1)
}

/// The Node's status: Ready, no pressure, this machine's CPUs and memory, its `address`.
pub fn node_status(node: &str, address: Ipv4Addr, now: &str) -> Value {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let memory_ki = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(1024 * 1024);
    let resources = json!({ "cpu": cpus.to_string(), "memory": format!("{memory_ki}Ki"), "pods": "110",
                            "ephemeral-storage": "10Gi" });
    let cond = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({ "type": type_, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now })
    };
    json!({
        "capacity": resources, "allocatable": resources,
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "addresses": [{ "type": "InternalIP", "address": address.to_string() },
                      { "type": "Hostname", "address": node }],
        "daemonEndpoints": { "kubeletEndpoint": { "Port": 0 } },
        "nodeInfo": { "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
            "osImage": "captf process kubelet", "containerRuntimeVersion": "captf-process://1",
            "kubeletVersion": "v0.0.0-captf", "kubeProxyVersion": "", "operatingSystem": "linux",
            "architecture": std::env::consts::ARCH },
    })
}

/// Creates the Node (or finds it), writes its status; its uid.
async fn register_node(client: &kube::Client, opts: &KubeletOptions) -> Result<String, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let name = &opts.node_name;
    let node: Node = serde_json::from_value(json!({
        "metadata": { "name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": std::env::consts::ARCH } },
    }))
    .map_err(kube::Error::SerdeError)?;
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e),
    }
    let patched = nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": node_status(name, opts.host_network.unwrap_or(HOST_IP), &now_time()) })),
        )
        .await?;
    Ok(patched.metadata.uid.unwrap_or_default())
}

struct State {
    client: kube::Client,
    opts: KubeletOptions,
    runtime: Arc<ProcessRuntime>,
    node_uid: String,
    /// The pods' bridge, when each pod has a network of its own (dropped after the pods').
    network: Option<Arc<PodNetwork>>,
    pods: BTreeMap<PodKey, PodState>,
    last_status: Option<Instant>,
}

impl State {
    async fn run(mut self, mut exits: mpsc::UnboundedReceiver<(PodKey, Exit)>) {
        let (probe_tx, mut probe_rx) = mpsc::unbounded_channel();
        let mut volumes = tokio::time::interval(self.opts.volume_sync_every);
        volumes.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sync = tokio::time::interval(self.opts.sync_every);
        sync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut renew = tokio::time::interval(self.opts.renew_every);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.last_status = Some(Instant::now());
        loop {
            // Ends first, so that a container's end is written at once even while syncs are
            // due back to back (many pods): the lease next, the sync last.
            tokio::select! {
                biased;
                Some((key, exit)) = exits.recv() => self.exited(key, exit).await,
                Some(result) = probe_rx.recv() => self.probed(result).await,
                _ = renew.tick() => {
                    self.renew_lease().await;
                    if self.last_status.is_none_or(|t| t.elapsed() >= self.opts.status_every) {
                        self.write_node_status().await;
                    }
                }
                _ = sync.tick() => {
                    self.sync(&mut exits).await;
                    self.start_due_probes(&probe_tx);
                }
                _ = volumes.tick() => self.refresh_volumes().await,
            }
        }
    }

    fn pods_api(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    async fn renew_lease(&mut self) {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), NODE_LEASE_NAMESPACE);
        let name = &self.opts.node_name;
        let renew = json!({ "spec": { "holderIdentity": name, "renewTime": now_micro(),
                                      "leaseDurationSeconds": self.opts.lease_duration_seconds } });
        match leases.patch(name, &PatchParams::default(), &Patch::Merge(&renew)).await {
            Err(kube::Error::Api(s)) if s.code == 404 => {
                let mut lease = renew.clone();
                lease["metadata"] = json!({ "name": name, "namespace": NODE_LEASE_NAMESPACE,
                    "ownerReferences": [{ "apiVersion": "v1", "kind": "Node", "name": name, "uid": self.node_uid }] });
                if let Ok(lease) = serde_json::from_value::<Lease>(lease) {
                    let _ = leases.create(&PostParams::default(), &lease).await;
                }
            }
            _ => {}
        }
    }

    async fn write_node_status(&mut self) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let name = &self.opts.node_name;
        let address = self.opts.host_network.unwrap_or(HOST_IP);
        let body = json!({ "status": node_status(name, address, &now_time()) });
        if nodes
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .is_ok()
        {
            self.last_status = Some(Instant::now());
        }
    }

    /// SIGKILL to every container whose grace period ended (whether or not the API answers).
    fn kill_due(&mut self) {
        let now = Instant::now();
        for (key, p) in &mut self.pods {
            if let Local::Running {
                kill_at: Some(at),
                killed: false,
            } = p.local
                && at <= now
            {
                self.runtime.kill(key);
                p.local = Local::Running {
                    kill_at: Some(at),
                    killed: true,
                };
            }
        }
    }

    /// Lists every pod and does what each needs; kills containers whose grace ended. The ends
    /// of containers that came meanwhile are written after each pod it started, so a pass that
    /// starts many pods does not hold back the ends of those that already finished.
    async fn sync(&mut self, exits: &mut mpsc::UnboundedReceiver<(PodKey, Exit)>) {
        self.kill_due();
        let all: Api<Pod> = Api::all(self.client.clone());
        let Ok(list) = all.list(&ListParams::default()).await else {
            return;
        };
        let mut seen = BTreeSet::new();
        for pod in list.items {
            let Ok(pod) = serde_json::to_value(&pod) else { continue };
            let key = (
                str_at(&pod, "/metadata/namespace").to_string(),
                str_at(&pod, "/metadata/name").to_string(),
            );
            let uid = str_at(&pod, "/metadata/uid").to_string();
            if self.pods.get(&key).is_some_and(|p| p.uid != uid) {
                // Another pod of the same name: the one this kubelet ran is gone.
                self.forget_pod(&key);
            }
            seen.insert(key.clone());
            if !self.write_unwritten(&key).await {
                // Nothing more for this pod until the API server took its status.
                continue;
            }
            let local = self.pods.get(&key).map(|p| p.local.clone());
            match next_action(&pod, &self.opts.node_name, local.as_ref()) {
                Action::Nothing => {}
                Action::Bind => self.bind(&key, &uid).await,
                Action::Start => {
                    self.start(&key, pod).await;
                    while let Ok((key, exit)) = exits.try_recv() {
                        self.exited(key, exit).await;
                    }
                }
                Action::Terminate { grace } => {
                    self.runtime.terminate(&key);
                    if let Some(p) = self.pods.get_mut(&key) {
                        p.local = Local::Running {
                            kill_at: Some(Instant::now() + grace),
                            killed: false,
                        };
                    }
                }
                Action::Delete => {
                    let params = DeleteParams {
                        grace_period_seconds: Some(0),
                        preconditions: Some(Preconditions {
                            uid: Some(uid),
                            resource_version: None,
                        }),
                        ..DeleteParams::default()
                    };
                    let _ = self.pods_api(&key.0).delete(&key.1, &params).await;
                }
            }
        }
        // Pods gone from the API: their containers (if any still run) are killed.
        let gone: Vec<PodKey> = self.pods.keys().filter(|k| !seen.contains(*k)).cloned().collect();
        for key in gone {
            self.forget_pod(&key);
        }
    }

    fn forget_pod(&mut self, key: &PodKey) {
        if let Some(p) = self.pods.remove(key)
            && matches!(p.local, Local::Running { .. })
        {
            self.runtime.kill(key);
        }
    }

    async fn bind(&self, key: &PodKey, uid: &str) {
        let binding = json!({ "apiVersion": "v1", "kind": "Binding",
            "metadata": { "name": key.1, "namespace": key.0, "uid": uid },
            "target": { "apiVersion": "v1", "kind": "Node", "name": self.opts.node_name } });
        let _ = self
            .pods_api(&key.0)
            .create_subresource::<Value, Value>("binding", &key.1, &PostParams::default(), &binding)
            .await;
    }

    async fn patch_status(&self, key: &PodKey, body: &Value) -> bool {
        self.pods_api(&key.0)
            .patch_status(&key.1, &PatchParams::default(), &Patch::Strategic(body))
            .await
            .is_ok()
    }

    /// Writes the pod's status that was not written yet; true when none is left.
    async fn write_unwritten(&mut self, key: &PodKey) -> bool {
        let Some(body) = self.pods.get(key).and_then(|p| p.unwritten.clone()) else {
            return true;
        };
        let written = self.patch_status(key, &body).await;
        if written
            && let Some(p) = self.pods.get_mut(key)
            && p.unwritten.as_ref() == Some(&body)
        {
            p.unwritten = None;
        }
        written
    }

    /// Records `body` as the pod's status and writes it (again at the next sync if that fails).
    async fn set_status(&mut self, key: &PodKey, body: Value) {
        if let Some(p) = self.pods.get_mut(key) {
            p.unwritten = Some(body);
        }
        self.write_unwritten(key).await;
    }

    fn ip_for(&mut self, key: &PodKey) -> Option<Ipv4Addr> {
        if let Some(p) = self.pods.get(key) {
            return Some(p.ip);
        }
        if let Some(address) = self.opts.host_network {
            return Some(address);
        }
        let used: BTreeSet<Ipv4Addr> = self.pods.values().map(|p| p.ip).collect();
        match &self.network {
            Some(net) => next_pod_address(net.subnet(), &used),
            None => next_pod_ip(&used),
        }
    }

    async fn wait(&mut self, key: &PodKey, pod: &Value, ip: Ipv4Addr, reason: &str, message: String) {
        let already = self
            .pods
            .get(key)
            .is_some_and(|p| p.local == Local::Waiting(format!("{reason}: {message}")));
        let written = already
            || self
                .patch_status(key, &waiting_status(pod, ip, reason, &message, &now_time()))
                .await;
        if written {
            self.pods.insert(
                key.clone(),
                PodState {
                    uid: str_at(pod, "/metadata/uid").to_string(),
                    pod: pod.clone(),
                    ip,
                    started_at: now_time(),
                    local: Local::Waiting(format!("{reason}: {message}")),
                    unwritten: None,
                    probes: BTreeMap::new(),
                    _net: None,
                },
            );
        }
    }

    /// Starts a pod's container, or says why it waits or cannot run.
    async fn start(&mut self, key: &PodKey, mut pod: Value) {
        let Some(ip) = self.ip_for(key) else { return };
        let Some(image) = self.runtime.image_of(&pod).cloned() else {
            let image = container_of(&pod).1;
            let message = format!("image {image:?} is not mapped to local files by this kubelet");
            self.wait(key, &pod, ip, "ErrImagePull", message).await;
            return;
        };
        let objects = match self.fetch(&pod).await {
            Ok(o) => o,
            Err(message) => {
                self.wait(key, &pod, ip, "CreateContainerConfigError", message).await;
                return;
            }
        };
        // The fields a container reads through env `fieldRef` or the downward API.
        with_addresses(&mut pod, ip);
        let access = ApiAccess {
            service_env: vec![
                ("KUBERNETES_SERVICE_HOST".into(), self.opts.api_host.clone()),
                ("KUBERNETES_SERVICE_PORT".into(), self.opts.api_port.to_string()),
            ],
            ca_pem: self.opts.ca_pem.clone(),
            automount_token: None,
        };
        let started_at = now_time();
        let id = container_id(key);
        let uid = str_at(&pod, "/metadata/uid").to_string();
        let mut net = None;
        let spawned = self
            .runtime
            .prepare(&objects, &pod, &image, &access)
            .and_then(|prep| match &self.network {
                Some(network) => {
                    let attached = network.attach(ip).map_err(|e| e.to_string())?;
                    let prep = prep.in_network_namespace(attached.path());
                    net = Some(attached);
                    Ok(prep)
                }
                None => Ok(prep),
            })
            .and_then(|prep| self.runtime.spawn(key.clone(), prep));
        let mut probes = BTreeMap::new();
        let (local, body) = match spawned {
            Ok(_) => {
                let now = Instant::now();
                for kind in [Kind::Readiness, Kind::Liveness] {
                    match probe_of(&pod, kind, ip) {
                        None => {}
                        Some(Ok(probe)) => {
                            probes.insert(kind, Tracker::new(probe, kind, now));
                        }
                        // A probe this kubelet cannot run has no tracker: a readiness probe
                        // then keeps the pod unready (below), as a failing one would; the pod's
                        // log says why.
                        Some(Err(why)) => self.note(key, &why),
                    }
                }
                // Ready at once only without a readiness probe; else when its tracker passes.
                let ready = probe_of(&pod, Kind::Readiness, ip).is_none();
                (
                    Local::Running {
                        kill_at: None,
                        killed: false,
                    },
                    running_status(&pod, ip, &id, &started_at, ready, &started_at),
                )
            }
            Err(why) => {
                let end = ContainerEnd {
                    exit_code: CANNOT_RUN_EXIT_CODE,
                    reason: "ContainerCannotRun",
                    message: Some(format!("the container could not be started: {why}")),
                };
                (
                    Local::Ended,
                    terminated_status(&pod, ip, &end, &id, &started_at, &started_at),
                )
            }
        };
        self.pods.insert(
            key.clone(),
            PodState {
                uid,
                pod,
                ip,
                started_at,
                local,
                unwritten: None,
                probes,
                _net: net,
            },
        );
        self.set_status(key, body).await;
    }

    /// A line of the kubelet's own in the pod's log.
    fn note(&self, key: &PodKey, text: &str) {
        use std::io::Write as _;
        let path = self.opts.root.join("logs").join(format!("{}_{}.log", key.0, key.1));
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = writeln!(f, "kubelet: {text}");
        }
    }

    /// Starts every probe that is due, each in a task of its own (a slow probe holds nothing
    /// else up); the results come back through `results`.
    fn start_due_probes(&mut self, results: &mpsc::UnboundedSender<ProbeResult>) {
        let now = Instant::now();
        for (key, p) in &mut self.pods {
            if !matches!(p.local, Local::Running { kill_at: None, .. }) {
                continue;
            }
            for (kind, tracker) in &mut p.probes {
                if tracker.take_due(now) {
                    let probe = tracker.probe.clone();
                    let (key, uid, kind, results) = (key.clone(), p.uid.clone(), *kind, results.clone());
                    tokio::spawn(async move {
                        let ok = check(&probe).await;
                        let _ = results.send(ProbeResult { key, uid, kind, ok });
                    });
                }
            }
        }
    }

    /// A probe's result: a readiness change is written to the pod's status; a failed liveness
    /// probe ends the container (SIGTERM, SIGKILL after the grace period).
    async fn probed(&mut self, result: ProbeResult) {
        let Some(p) = self.pods.get_mut(&result.key) else {
            return;
        };
        if p.uid != result.uid || !matches!(p.local, Local::Running { kill_at: None, .. }) {
            return;
        }
        let Some(tracker) = p.probes.get_mut(&result.kind) else {
            return;
        };
        let Some(passing) = tracker.record(result.ok, Instant::now()) else {
            return;
        };
        match result.kind {
            Kind::Readiness => {
                let body = running_status(
                    &p.pod,
                    p.ip,
                    &container_id(&result.key),
                    &p.started_at,
                    passing,
                    &now_time(),
                );
                self.set_status(&result.key, body).await;
            }
            Kind::Liveness => {
                p.local = Local::Running {
                    kill_at: Some(Instant::now() + grace_period(&p.pod)),
                    killed: false,
                };
                self.runtime.terminate(&result.key);
                self.note(&result.key, "the liveness probe failed: the container is ended");
            }
        }
    }

    /// The Secret and ConfigMap volumes of every running pod, written again from the API.
    async fn refresh_volumes(&mut self) {
        let running: Vec<Value> = self
            .pods
            .values()
            .filter(|p| matches!(p.local, Local::Running { kill_at: None, .. }))
            .filter(|p| {
                p.pod["spec"]["volumes"].as_array().is_some_and(|v| {
                    v.iter()
                        .any(|v| v.get("secret").is_some() || v.get("configMap").is_some())
                })
            })
            .map(|p| p.pod.clone())
            .collect();
        for pod in running {
            let Ok(objects) = self.fetch_objects(&pod).await else {
                continue;
            };
            let _ = self.runtime.refresh_volumes(&objects, &pod);
        }
    }

    /// The Secrets and ConfigMaps a pod needs, and its projected tokens (TokenRequest, bound to
    /// the pod). An error names what is missing.
    async fn fetch(&self, pod: &Value) -> Result<Objects, String> {
        let mut out = self.fetch_objects(pod).await?;
        let ns = str_at(pod, "/metadata/namespace");
        let sa = match str_at(pod, "/spec/serviceAccountName") {
            "" => "default",
            s => s,
        };
        for (audience, expiration) in captf_sim::process_kubelet::token_audiences(pod) {
            let request = TokenRequest {
                spec: TokenRequestSpec {
                    audiences: if audience.is_empty() {
                        Vec::new()
                    } else {
                        vec![audience.clone()]
                    },
                    expiration_seconds: expiration,
                    bound_object_ref: Some(BoundObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Pod".into()),
                        name: Some(str_at(pod, "/metadata/name").to_string()),
                        uid: Some(str_at(pod, "/metadata/uid").to_string()),
                    }),
                },
                ..Default::default()
            };
            let answer = Api::<ServiceAccount>::namespaced(self.client.clone(), ns)
                .create_token_request(sa, &PostParams::default(), &request)
                .await
                .map_err(|e| format!("a token of the service account {sa:?}: {e}"))?;
            let token = answer.status.map(|s| s.token).unwrap_or_default();
            out.tokens.insert(audience, token);
        }
        Ok(out)
    }

    /// The Secrets and ConfigMaps a pod names (not its tokens).
    async fn fetch_objects(&self, pod: &Value) -> Result<Objects, String> {
        let ns = str_at(pod, "/metadata/namespace");
        let mut out = Objects::default();
        for (resource, name, optional) in captf_sim::process_kubelet::referenced_objects(pod) {
            let got = if resource == "/secrets" {
                Api::<Secret>::namespaced(self.client.clone(), ns)
                    .get_opt(&name)
                    .await
                    .map(|o| o.and_then(|o| serde_json::to_value(o).ok()))
            } else {
                Api::<ConfigMap>::namespaced(self.client.clone(), ns)
                    .get_opt(&name)
                    .await
                    .map(|o| o.and_then(|o| serde_json::to_value(o).ok()))
            };
            let kind = if resource == "/secrets" { "secret" } else { "configmap" };
            match got {
                Ok(Some(v)) => {
                    out.objects.insert((resource.to_string(), ns.to_string(), name), v);
                }
                Ok(None) if optional => {}
                Ok(None) => return Err(format!("{kind} {name:?} not found")),
                Err(e) => return Err(format!("{kind} {name:?}: {e}")),
            }
        }
        Ok(out)
    }

    /// A container ended: its pod's status says how (the next sync deletes a pod being
    /// deleted, once that status is written).
    async fn exited(&mut self, key: PodKey, exit: Exit) {
        self.runtime.forget(&key);
        let Some(p) = self.pods.get_mut(&key) else { return };
        if !matches!(p.local, Local::Running { .. }) {
            return;
        }
        p.local = Local::Ended;
        let end = container_end(&p.pod, &exit);
        let body = terminated_status(&p.pod, p.ip, &end, &container_id(&key), &p.started_at, &now_time());
        self.set_status(&key, body).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pod(v: Value) -> Value {
        let mut p = json!({ "metadata": { "name": "p", "namespace": "default", "uid": "u" },
            "spec": { "containers": [{ "name": "c", "image": "i" }] }, "status": { "phase": "Pending" } });
        json_patch_merge(&mut p, &v);
        p
    }

    fn json_patch_merge(a: &mut Value, b: &Value) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    json_patch_merge(a.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
            (a, b) => *a = b.clone(),
        }
    }

    const RUNNING: Local = Local::Running {
        kill_at: None,
        killed: false,
    };

    #[test]
    fn an_unscheduled_pod_for_the_default_scheduler_is_bound_and_others_are_left_alone() {
        assert_eq!(next_action(&pod(json!({})), "n", None), Action::Bind);
        let default = pod(json!({ "spec": { "schedulerName": "default-scheduler" } }));
        assert_eq!(next_action(&default, "n", None), Action::Bind);
        let other = pod(json!({ "spec": { "schedulerName": "volcano" } }));
        assert_eq!(next_action(&other, "n", None), Action::Nothing);
        let deleting = pod(json!({ "metadata": { "deletionTimestamp": "2026-01-01T00:00:00Z" } }));
        assert_eq!(next_action(&deleting, "n", None), Action::Nothing);
        let done = pod(json!({ "status": { "phase": "Failed" } }));
        assert_eq!(next_action(&done, "n", None), Action::Nothing);
    }

    #[test]
    fn a_pod_bound_elsewhere_is_not_this_kubelets() {
        let p = pod(json!({ "spec": { "nodeName": "other" } }));
        assert_eq!(next_action(&p, "n", None), Action::Nothing);
    }

    #[test]
    fn a_pod_bound_here_starts_once_and_a_waiting_one_tries_again() {
        let p = pod(json!({ "spec": { "nodeName": "n" } }));
        assert_eq!(next_action(&p, "n", None), Action::Start);
        assert_eq!(next_action(&p, "n", Some(&Local::Waiting("x".into()))), Action::Start);
        assert_eq!(next_action(&p, "n", Some(&RUNNING)), Action::Nothing);
        assert_eq!(next_action(&p, "n", Some(&Local::Ended)), Action::Nothing);
        let done = pod(json!({ "spec": { "nodeName": "n" }, "status": { "phase": "Succeeded" } }));
        assert_eq!(next_action(&done, "n", None), Action::Nothing);
    }

    #[test]
    fn a_pod_being_deleted_gets_sigterm_once_and_is_deleted_for_good_once_nothing_runs() {
        let p = pod(
            json!({ "spec": { "nodeName": "n", "terminationGracePeriodSeconds": 30 },
            "metadata": { "deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 7 } }),
        );
        assert_eq!(
            next_action(&p, "n", Some(&RUNNING)),
            Action::Terminate {
                grace: Duration::from_secs(7)
            }
        );
        let terminating = Local::Running {
            kill_at: Some(Instant::now()),
            killed: false,
        };
        assert_eq!(next_action(&p, "n", Some(&terminating)), Action::Nothing);
        assert_eq!(next_action(&p, "n", Some(&Local::Ended)), Action::Delete);
        assert_eq!(next_action(&p, "n", None), Action::Delete);
        assert_eq!(next_action(&p, "n", Some(&Local::Waiting("x".into()))), Action::Delete);
    }

    #[test]
    fn the_grace_period_is_the_deletions_else_the_pods_else_thirty_seconds() {
        assert_eq!(grace_period(&pod(json!({}))), DEFAULT_GRACE);
        let spec = pod(json!({ "spec": { "terminationGracePeriodSeconds": 5 } }));
        assert_eq!(grace_period(&spec), Duration::from_secs(5));
        let both = pod(json!({ "spec": { "terminationGracePeriodSeconds": 5 },
                               "metadata": { "deletionGracePeriodSeconds": 0 } }));
        assert_eq!(grace_period(&both), Duration::ZERO);
        let negative = pod(json!({ "spec": { "terminationGracePeriodSeconds": -3 } }));
        assert_eq!(grace_period(&negative), Duration::ZERO);
    }

    #[test]
    fn pod_ips_are_distinct_loopback_addresses_skipping_the_used_ones() {
        let mut used = BTreeSet::new();
        for _ in 0..300 {
            let ip = next_pod_ip(&used).unwrap();
            assert!(ip.is_loopback() && ip != HOST_IP, "{ip}");
            let [_, _, x, y] = ip.octets();
            assert!(x >= 1 && (1..=254).contains(&y), "{ip}");
            assert!(used.insert(ip), "{ip} given twice");
        }
        assert_eq!(used.len(), 300);
    }

    #[test]
    fn no_pod_ip_is_left_when_every_one_is_used() {
        let all: BTreeSet<Ipv4Addr> = (1..=255u8)
            .flat_map(|x| (1..=254u8).map(move |y| Ipv4Addr::new(127, 0, x, y)))
            .collect();
        assert_eq!(next_pod_ip(&all), None);
    }

    fn exit(code: i32, message: Option<&str>, tail: &str) -> Exit {
        Exit {
            code,
            message: message.map(String::from),
            started: true,
            output_tail: tail.to_string(),
        }
    }

    #[test]
    fn exit_zero_is_completed_and_succeeded_any_other_is_error_and_failed() {
        let p = pod(json!({}));
        let ok = container_end(&p, &exit(0, Some("done"), ""));
        assert_eq!(
            (ok.exit_code, ok.reason, ok.message.as_deref()),
            (0, "Completed", Some("done"))
        );
        let s = terminated_status(&p, Ipv4Addr::new(127, 0, 1, 1), &ok, "id", "t0", "t1");
        assert_eq!(s["status"]["phase"], "Succeeded");
        let bad = container_end(&p, &exit(3, Some("hi\n"), "x"));
        assert_eq!((bad.exit_code, bad.reason), (3, "Error"));
        let s = terminated_status(&p, Ipv4Addr::new(127, 0, 1, 1), &bad, "id", "t0", "t1");
        assert_eq!(s["status"]["phase"], "Failed");
        let t = &s["status"]["containerStatuses"][0]["state"];
        assert_eq!(t["terminated"]["exitCode"], 3);
        assert_eq!(t["terminated"]["message"], "hi\n");
        assert!(
            t["running"].is_null() && t.get("running").is_some(),
            "running is removed: {t}"
        );
        let ready = s["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(
            (ready["status"].as_str(), ready["reason"].as_str()),
            (Some("False"), Some("PodCompleted"))
        );
    }

    #[test]
    fn fallback_to_logs_on_error_uses_the_end_of_the_output_only_when_failed_without_a_message() {
        let p = pod(json!({ "spec": { "containers": [{ "name": "c", "image": "i",
            "terminationMessagePolicy": "FallbackToLogsOnError" }] } }));
        let long = "é".repeat(FALLBACK_LOG_BYTES);
        let end = container_end(&p, &exit(1, None, &long));
        let m = end.message.unwrap();
        assert!(m.len() <= FALLBACK_LOG_BYTES && long.ends_with(&m), "{}", m.len());
        assert_eq!(container_end(&p, &exit(0, None, "out")).message, None);
        assert_eq!(
            container_end(&p, &exit(1, Some("own"), "out")).message.as_deref(),
            Some("own")
        );
        assert_eq!(container_end(&pod(json!({})), &exit(1, None, "out")).message, None);
    }

    #[test]
    fn a_container_whose_set_up_failed_cannot_run_with_exit_128() {
        let mut e = exit(1, None, "mount: permission denied\n");
        e.started = false;
        let end = container_end(&pod(json!({})), &e);
        assert_eq!((end.exit_code, end.reason), (128, "ContainerCannotRun"));
        assert!(end.message.unwrap().contains("mount: permission denied"));
    }

    #[test]
    fn a_running_pod_reports_its_ip_the_host_ip_and_ready_conditions() {
        let s = running_status(&pod(json!({})), Ipv4Addr::new(127, 0, 1, 2), "id", "t", true, "t");
        let st = &s["status"];
        assert_eq!(
            (st["phase"].as_str(), st["podIP"].as_str()),
            (Some("Running"), Some("127.0.1.2"))
        );
        assert_eq!(st["podIPs"], json!([{ "ip": "127.0.1.2" }]));
        assert_eq!(st["hostIP"], "127.0.0.1");
        for c in ["Initialized", "ContainersReady", "Ready"] {
            let cond = st["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["type"] == c)
                .unwrap();
            assert_eq!(cond["status"], "True", "{c}");
        }
        assert_eq!(st["containerStatuses"][0]["state"]["running"]["startedAt"], "t");
    }

    fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-z0-9:.-]{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("metadata".to_string()),
                        Just("spec".to_string()),
                        Just("status".to_string()),
                        Just("containers".to_string()),
                        Just("nodeName".to_string()),
                        Just("deletionTimestamp".to_string()),
                        Just("deletionGracePeriodSeconds".to_string()),
                        Just("terminationGracePeriodSeconds".to_string()),
                        Just("phase".to_string()),
                        "[a-z]{1,4}",
                    ],
                    inner,
                    0..5,
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn any_pod_json_gets_an_action_and_statuses_without_panicking(pod in any_json(), code in -1i32..300) {
            for local in [None, Some(RUNNING), Some(Local::Ended), Some(Local::Waiting("w".into()))] {
                let _ = next_action(&pod, "n", local.as_ref());
            }
            let _ = grace_period(&pod);
            let ip = Ipv4Addr::new(127, 0, 1, 1);
            let _ = running_status(&pod, ip, "id", "t", false, "t");
            let _ = waiting_status(&pod, ip, "r", "m", "t");
            let end = container_end(&pod, &exit(code, None, "tail"));
            let _ = terminated_status(&pod, ip, &end, "id", "t", "t");
            let mut p = pod.clone();
            with_addresses(&mut p, ip);
            if p.is_object() {
                proptest::prop_assert_eq!(p["status"]["podIP"].as_str(), Some("127.0.1.1"));
            }
        }
    }

    #[test]
    fn a_micro_time_has_exactly_six_fractional_digits() {
        let t = now_micro();
        let frac = t.split('.').nth(1).unwrap();
        assert_eq!(frac.len(), 7, "{t}");
        assert!(frac.ends_with('Z'));
    }
}

//! The process kubelet: a pod whose container image is one the test mapped to local files runs
//! a real process, the way a kubelet runs a container, instead of a [`crate::RunnerScript`].
//! One exception: a script queued for the Job ([`crate::Sim::script`] with a matching
//! [`crate::JobMatch`]) wins over the image, so a test or the demo can play one Job scripted
//! among real ones ([`crate::Sim::job_ran_as_process`] tells which way a Job went).
//!
//! For such a pod the simulator
//! - builds the container's environment: the image's own variables, then the container's
//!   `envFrom` (every key of a Secret or ConfigMap, after the entry's prefix), then its `env`
//!   (literal values, `secretKeyRef`, `configMapKeyRef` and `fieldRef` resolved from the store),
//!   `HOSTNAME`, and `KUBERNETES_SERVICE_HOST`/`PORT` naming the simulator's HTTPS port;
//! - materialises each volume in the pod's folder under the working root: Secret and ConfigMap
//!   volumes as files with their modes, emptyDirs as fresh folders, projected volumes (Secret,
//!   ConfigMap, downward API and service-account token sources; the simulator makes no token
//!   for the last, so such a pod cannot run here);
//! - starts the image's entrypoint (or the container's `command`) with the container's `args` in
//!   new mount, UTS and PID namespaces (`unshare`), with a root of its own: a tmpfs holding the
//!   machine's top-level folders (bound, except those a volume or an image file takes), a small
//!   `/dev`, `/proc`, each volume at its `mountPath`, the image's files at their paths, the
//!   service-account files (a real token of the pod's ServiceAccount, so RBAC applies, the
//!   simulator's `ca.crt`, the `namespace`) at the in-cluster path, and the container's
//!   `terminationMessagePath`. The process is PID 1 of its namespace and the pod's name is its
//!   hostname; it shares the machine's network, so it reaches the HTTPS port on 127.0.0.1;
//! - keeps stdout and stderr as the pod's log (`GET pods/<name>/log`), and when the process
//!   ends, reads at most 4096 bytes of the termination message file into
//!   `state.terminated.message` with the real exit code.
//!
//! A deadline, an eviction or the pod's deletion sends SIGTERM; after the pod's
//! `terminationGracePeriodSeconds` on the simulated clock, SIGKILL. A container that cannot be
//! started (a missing file, an unsupported volume, a missing Secret key) ends its pod at once as
//! `ContainerCannotRun` with a message saying why. When the simulator stops, every process is
//! killed and reaped.
//!
//! The setup needs root (mounts in a private mount namespace): [`namespaces_unavailable`] says
//! why a machine cannot run it.
//!
//! Two parts, so that one implementation serves the simulator and a real API server:
//! [`ProcessRuntime`] turns a pod into a running process (environment, volumes, tokens,
//! namespaces, the exit code and termination message, SIGTERM and SIGKILL) and tells a
//! [`ContainerEvents`] about output and ends; it reads Secrets, ConfigMaps and tokens through a
//! [`Store`] and reaches the API as an [`ApiAccess`] says. The simulator's driver is
//! [`ProcessKubelet`] with `crate::kubelet` (the in-memory store, the simulated clock);
//! `captf-kubetest`'s `kubelet` module drives the same runtime through kube-rs against a real
//! kube-apiserver (pods bound through `pods/binding`, status through `pods/status`).

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;

use crate::auth::Auth;
use crate::https::{HttpsEndpoint, SERVICE_ACCOUNT_DIR};
use crate::server::Shared;

/// The most of a termination message a kubelet keeps (bytes).
pub const TERMINATION_MESSAGE_MAX: usize = 4096;
/// Where a container's termination message goes unless its spec says otherwise.
pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// The grace period of a pod that does not set `terminationGracePeriodSeconds`.
pub const DEFAULT_GRACE_SECONDS: i64 = 30;
/// The exit code of a container that could not be started, as container runtimes report it.
pub const CANNOT_RUN_EXIT_CODE: i32 = 128;
/// `PATH` when neither the image nor the container sets one (the container runtimes' default).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// How long the end of a container's output is awaited after its process ended.
const READERS_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);
/// Device nodes every container gets.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// What an image holds: its entrypoint, its files (local paths made visible at paths inside the
/// container) and its environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessImage {
    /// The program the container runs unless its `command` says otherwise (a path inside).
    pub entrypoint: String,
    /// `(path inside the container, local path)`: files or folders bound into the container.
    /// Put them under a top-level folder of their own (e.g. `/image`): that folder hides the
    /// machine's folder of the same name inside the container.
    pub files: Vec<(String, PathBuf)>,
    /// The image's environment (`ENV`), under the container's own `env`.
    pub env: Vec<(String, String)>,
    /// The image's `USER` as (uid, gid), unless the pod says otherwise (default root).
    pub user: (u32, u32),
    /// The image's `WORKDIR`, unless the container sets `workingDir` (default `/`).
    pub working_dir: Option<String>,
    /// Run a real OCI image instead of the machine's files: see [`OciImage`]. Its entrypoint,
    /// `Cmd`, environment, user and working directory are the image's; `entrypoint`, `user` and
    /// `working_dir` above are not used. `files` are bound over the image's root (files read-only,
    /// folders writable) and
    /// `env` is added after the image's environment (under the container's): what a cluster
    /// would add through volumes and env, such as a provider mirror where no registry is
    /// reachable; the image's own files stay as they ship.
    pub oci: Option<OciImage>,
}

/// An image from an OCI archive (an OCI image layout in one tar, as `scripts/release.sh` writes
/// and `skopeo copy oci-archive:` reads). The runtime unpacks it once with `umoci unpack` and runs
/// each pod over that root filesystem: an overlay (the pod's writes stay its own, and the root is
/// read-only when the container says so), `/dev`, `/proc`, `/run`, the volumes, the service
/// account files and the termination message mounted on it, then the image's entrypoint (or the
/// container's `command`) inside it (`chroot`), as the image's user (or the pod's), in the
/// image's working directory, with the image's environment under the container's. Supplementary
/// groups other than the primary one are not set in this mode.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct OciImage {
    /// The archive (`*.oci.tar`).
    pub archive: PathBuf,
    /// The reference inside it (`org.opencontainers.image.ref.name`, e.g. the version).
    pub reference: String,
}

/// What a pod's container runs from an unpacked OCI image.
#[derive(Clone, Debug)]
struct Unpacked {
    rootfs: PathBuf,
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    env: Vec<(String, String)>,
    user: (u32, u32),
    working_dir: String,
}

impl ProcessImage {
    pub fn new(entrypoint: impl Into<String>) -> Self {
        ProcessImage {
            entrypoint: entrypoint.into(),
            ..Default::default()
        }
    }

    /// Bind the local file or folder `local` at `inside`.
    pub fn file(mut self, inside: impl Into<String>, local: impl Into<PathBuf>) -> Self {
        self.files.push((inside.into(), local.into()));
        self
    }

    /// The image's user and group IDs.
    pub fn user(mut self, uid: u32, gid: u32) -> Self {
        self.user = (uid, gid);
        self
    }

    /// The image's working directory.
    pub fn working_dir(mut self, dir: impl Into<String>) -> Self {
        self.working_dir = Some(dir.into());
        self
    }

    /// An environment variable of the image.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// The image `reference` of the OCI archive `archive` (see [`OciImage`]).
    pub fn oci(archive: impl Into<PathBuf>, reference: impl Into<String>) -> Self {
        ProcessImage {
            oci: Some(OciImage {
                archive: archive.into(),
                reference: reference.into(),
            }),
            ..Default::default()
        }
    }
}

/// A JSON array of strings (absent: empty).
fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
        .unwrap_or_default()
}

/// `USER` of an image as (uid, gid): numbers, or names looked up in its `/etc/passwd` and
/// `/etc/group`.
fn image_user(user: &str, rootfs: &Path) -> Result<(u32, u32), String> {
    if user.is_empty() {
        return Ok((0, 0));
    }
    let (u, g) = user.split_once(':').map_or((user, None), |(u, g)| (u, Some(g)));
    let lookup = |file: &str, name: &str| -> Option<(u32, u32)> {
        let text = std::fs::read_to_string(rootfs.join(file)).ok()?;
        text.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&name) && f.len() > 2)
                .then(|| Some((f[2].parse().ok()?, f.get(3).and_then(|g| g.parse().ok()).unwrap_or(0))))
                .flatten()
        })
    };
    let (uid, passwd_gid) = match u.parse::<u32>() {
        Ok(n) => (n, n),
        Err(_) => lookup("etc/passwd", u).ok_or_else(|| format!("the image's user {u:?} is not in its /etc/passwd"))?,
    };
    let gid = match g {
        None => passwd_gid,
        Some(g) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => {
                lookup("etc/group", g)
                    .ok_or_else(|| format!("the image's group {g:?} is not in its /etc/group"))?
                    .0
            }
        },
    };
    Ok((uid, gid))
}

/// Unpacks an OCI archive's image into `dir` (once) and reads its configuration.
fn unpack(oci: &OciImage, dir: &Path) -> Result<Unpacked, String> {
    let what = format!("image {} of {}", oci.reference, oci.archive.display());
    let layout = dir.join("layout");
    let bundle = dir.join("bundle");
    if !bundle.join("rootfs").is_dir() {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(&layout).map_err(|e| format!("{}: {e}", layout.display()))?;
        let run = |cmd: &mut Command| -> Result<(), String> {
            let out = cmd.output().map_err(|e| format!("{what}: {cmd:?}: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{what}: {cmd:?} failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        run(Command::new("tar").arg("-xf").arg(&oci.archive).arg("-C").arg(&layout))?;
        let image = format!("{}:{}", layout.display(), oci.reference);
        run(Command::new("umoci").args(["unpack", "--image", &image]).arg(&bundle))?;
    }
    // The image's configuration: index.json -> the manifest named `reference` -> its config.
    let blob = |digest: &str| -> Result<Value, String> {
        let hex = digest
            .strip_prefix("sha256:")
            .ok_or_else(|| format!("{what}: digest {digest:?}"))?;
        let path = layout.join("blobs/sha256").join(hex);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{what}: {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{what}: {}: {e}", path.display()))
    };
    let index_path = layout.join("index.json");
    let index: Value = serde_json::from_str(
        &std::fs::read_to_string(&index_path).map_err(|e| format!("{what}: {}: {e}", index_path.display()))?,
    )
    .map_err(|e| format!("{what}: index.json: {e}"))?;
    let manifest = index
        .get("manifests")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|m| {
            m.pointer("/annotations/org.opencontainers.image.ref.name")
                .and_then(Value::as_str)
                == Some(&oci.reference)
        })
        .ok_or_else(|| format!("{what}: no manifest of that reference in index.json"))?;
    let manifest = blob(str_at(manifest, "/digest"))?;
    let config = blob(str_at(&manifest, "/config/digest"))?;
    let c = config.get("config").cloned().unwrap_or(Value::Null);
    let rootfs = bundle.join("rootfs");
    let env = strings(c.get("Env"))
        .into_iter()
        .map(|kv| {
            kv.split_once('=')
                .map_or((kv.clone(), String::new()), |(k, v)| (k.into(), v.into()))
        })
        .collect();
    Ok(Unpacked {
        user: image_user(str_at(&c, "/User"), &rootfs)?,
        working_dir: Some(str_at(&c, "/WorkingDir"))
            .filter(|w| !w.is_empty())
            .unwrap_or("/")
            .to_string(),
        entrypoint: strings(c.get("Entrypoint")),
        cmd: strings(c.get("Cmd")),
        env,
        rootfs,
    })
}

/// Where `program` is inside an image's root (a path, or a name looked up on its `PATH`).
fn program_in(rootfs: &Path, program: &str, path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let inside = |p: &str| {
        // Symlinks inside the image point inside it: resolve them against its root.
        let mut at = PathBuf::from(p);
        for _ in 0..16 {
            let local = rootfs.join(at.strip_prefix("/").unwrap_or(&at));
            match std::fs::read_link(&local) {
                Ok(t) if t.is_absolute() => at = t,
                Ok(t) => at = at.parent().unwrap_or(Path::new("/")).join(t),
                Err(_) => {
                    return std::fs::metadata(&local)
                        .ok()
                        .filter(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                        .map(|_| local);
                }
            }
        }
        None
    };
    if program.contains('/') {
        inside(program)
    } else {
        path.split(':').find_map(|d| inside(&format!("{d}/{program}")))
    }
}

/// Why this machine cannot run containers as processes, if it cannot: the private mount, UTS
/// and PID namespaces need root.
pub fn namespaces_unavailable() -> Option<String> {
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--uts",
            "--pid",
            "--fork",
            "--propagation",
            "private",
            "true",
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "unshare cannot make mount/UTS/PID namespaces here ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("unshare is not available: {e}")),
    }
}

/// How a container process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    /// The exit code; `128 + n` when signal `n` killed it.
    pub code: i32,
    /// The termination message (at most [`TERMINATION_MESSAGE_MAX`] bytes), if not empty.
    pub message: Option<String>,
    /// The entrypoint was reached (false: the container's setup failed).
    pub started: bool,
    /// The end of the output, for a setup failure's message.
    pub output_tail: String,
}

/// One container process and the threads that wait for it and read its output.
struct Proc {
    pid: i32,
    threads: Vec<JoinHandle<()>>,
}

/// A container's key: `(namespace, pod name)`.
pub type PodKey = (String, String);

/// What the driver of a [`ProcessRuntime`] hears from its containers: their output as it comes
/// and their end. Called from the runtime's own threads (never from the caller's): an
/// implementation may take the driver's locks and call [`ProcessRuntime::forget`], but must not
/// wait for anything that holds such a lock while calling [`ProcessRuntime::spawn`].
pub trait ContainerEvents: Send + Sync {
    /// A piece of a container's stdout or stderr.
    fn output(&self, key: &PodKey, text: &str);
    /// A container's outermost process ended (not called once [`ProcessRuntime::stop_all`]
    /// began).
    fn exited(&self, key: &PodKey, exit: Exit);
}

/// How a container reaches the API server: the in-cluster environment and, for a driver that
/// mounts the service-account files itself (the simulator: its pods carry no projected token
/// volume), the token to put there.
#[derive(Clone, Debug, Default)]
pub struct ApiAccess {
    /// `KUBERNETES_SERVICE_HOST`/`PORT` (over the container's own values).
    pub service_env: Vec<(String, String)>,
    /// The CA of the API server (`ca.crt` of the automounted files).
    pub ca_pem: String,
    /// `Some(token)`: write `token`, `ca.crt` and `namespace` at the in-cluster path. `None`:
    /// the pod's own volumes (a projected token volume) provide them, or nothing does.
    pub automount_token: Option<String>,
}

/// The part of the process kubelet that turns a pod into a running process, whoever stores the
/// pod: which images run as processes, where their pods' folders go, and the processes running.
/// The simulator's [`ProcessKubelet`] and `captf-kubetest`'s kubelet for a real API server both
/// drive one.
pub struct ProcessRuntime {
    images: BTreeMap<String, ProcessImage>,
    root: PathBuf,
    events: Arc<dyn ContainerEvents>,
    procs: Mutex<BTreeMap<PodKey, Proc>>,
    stopping: Arc<std::sync::atomic::AtomicBool>,
    /// OCI images unpacked so far, by archive and reference.
    unpacked: Mutex<BTreeMap<OciImage, Result<Unpacked, String>>>,
}

impl std::fmt::Debug for ProcessRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessRuntime")
            .field("images", &self.images)
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// The process kubelet of a simulator: the [`ProcessRuntime`], the simulator's HTTPS endpoint
/// and tokens, and the store its containers' output and ends go to.
pub struct ProcessKubelet {
    runtime: ProcessRuntime,
    https: HttpsEndpoint,
    auth: Arc<Auth>,
}

impl std::fmt::Debug for ProcessKubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessKubelet")
            .field("runtime", &self.runtime)
            .finish_non_exhaustive()
    }
}

/// The simulator's side of a container's events: its output is the pod's log, its end goes to
/// the simulated kubelet.
struct SimEvents {
    shared: Weak<Shared>,
}

impl ContainerEvents for SimEvents {
    fn output(&self, key: &PodKey, text: &str) {
        let Some(shared) = self.shared.upgrade() else { return };
        let mut w = shared.world.lock().unwrap_or_else(|p| p.into_inner());
        w.kubelet.logs.entry(key.clone()).or_default().push_str(text);
    }

    fn exited(&self, key: &PodKey, exit: Exit) {
        let Some(shared) = self.shared.upgrade() else { return };
        let mut w = shared.world.lock().unwrap_or_else(|p| p.into_inner());
        w.process_exited(key, exit);
    }
}

/// Quote a word for `sh`.
fn q(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn qp(p: &Path) -> String {
    q(&p.display().to_string())
}

/// The string at a JSON pointer, or `""`.
fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// A path inside the container must be absolute and plain (no `..`).
fn check_inside(what: &str, p: &str) -> Result<(), String> {
    if !p.starts_with('/') || p.split('/').any(|c| c == ".." || c == ".") {
        return Err(format!("{what} {p:?} must be an absolute path without . or .."));
    }
    Ok(())
}

fn top_level(p: &str) -> &str {
    p.trim_start_matches('/').split('/').next().unwrap_or_default()
}

/// The data of a Secret or ConfigMap key (Secret `data` is base64).
fn key_data(obj: &Value, key: &str, secret: bool) -> Result<Option<Vec<u8>>, String> {
    if secret {
        if let Some(s) = obj.pointer("/data").and_then(|d| d.get(key)).and_then(Value::as_str) {
            return B64
                .decode(s)
                .map(Some)
                .map_err(|e| format!("key {key} is not base64: {e}"));
        }
        if let Some(s) = obj
            .pointer("/stringData")
            .and_then(|d| d.get(key))
            .and_then(Value::as_str)
        {
            return Ok(Some(s.as_bytes().to_vec()));
        }
        return Ok(None);
    }
    if let Some(s) = obj.pointer("/data").and_then(|d| d.get(key)).and_then(Value::as_str) {
        return Ok(Some(s.as_bytes().to_vec()));
    }
    if let Some(s) = obj
        .pointer("/binaryData")
        .and_then(|d| d.get(key))
        .and_then(Value::as_str)
    {
        return B64
            .decode(s)
            .map(Some)
            .map_err(|e| format!("binaryData key {key} is not base64: {e}"));
    }
    Ok(None)
}

/// Every key of a Secret (`data`, `stringData`) or ConfigMap (`data`, `binaryData`).
fn all_keys(obj: &Value, secret: bool) -> Vec<String> {
    let fields: &[&str] = if secret {
        &["data", "stringData"]
    } else {
        &["data", "binaryData"]
    };
    let mut keys: Vec<String> = fields
        .iter()
        .filter_map(|f| obj.get(*f).and_then(Value::as_object))
        .flat_map(|m| m.keys().cloned())
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Where a Secret (`true`) or a ConfigMap lives in the store, and its kind for messages.
fn source(secret: bool) -> (&'static str, &'static str) {
    if secret {
        ("/secrets", "Secret")
    } else {
        ("/configmaps", "ConfigMap")
    }
}

/// What the store holds that a pod's container needs: Secrets (`"/secrets"`) and ConfigMaps
/// (`"/configmaps"`), and tokens for its projected service-account token volumes. The simulator
/// reads them under its lock; a driver for a real API server fetches them first
/// ([`referenced_objects`], [`token_audiences`]) into an [`Objects`].
pub trait Store {
    fn object(&self, resource: &str, ns: &str, name: &str) -> Option<Value>;
    /// A token of the pod's ServiceAccount for `audience` (`""`: the API server's own), for a
    /// projected `serviceAccountToken` source. `None`: this store cannot make one.
    fn token(&self, _audience: &str) -> Option<String> {
        None
    }
}

/// Objects fetched ahead of a container's start, keyed by `(resource, namespace, name)`, and
/// tokens by audience.
#[derive(Clone, Debug, Default)]
pub struct Objects {
    pub objects: BTreeMap<(String, String, String), Value>,
    pub tokens: BTreeMap<String, String>,
}

impl Store for Objects {
    fn object(&self, resource: &str, ns: &str, name: &str) -> Option<Value> {
        self.objects
            .get(&(resource.to_string(), ns.to_string(), name.to_string()))
            .cloned()
    }

    fn token(&self, audience: &str) -> Option<String> {
        self.tokens.get(audience).cloned()
    }
}

/// A Secret or ConfigMap a pod's first container needs: `(resource, name, optional)`, with
/// `resource` `"/secrets"` or `"/configmaps"` (in the pod's namespace).
pub fn referenced_objects(pod: &Value) -> Vec<(&'static str, String, bool)> {
    let mut out: Vec<(&'static str, String, bool)> = Vec::new();
    let optional = |r: &Value| r.get("optional").and_then(Value::as_bool) == Some(true);
    let mut add = |secret: bool, name: &str, opt: bool| {
        let resource = source(secret).0;
        if !name.is_empty() && !out.iter().any(|(r, n, _)| *r == resource && n == name) {
            out.push((resource, name.to_string(), opt));
        } else if let Some(e) = out.iter_mut().find(|(r, n, _)| *r == resource && n == name) {
            e.2 &= opt;
        }
    };
    let container = pod.pointer("/spec/containers/0").cloned().unwrap_or(Value::Null);
    for e in container.get("envFrom").and_then(Value::as_array).into_iter().flatten() {
        if let Some(r) = e.get("secretRef").filter(|r| !r.is_null()) {
            add(true, str_at(r, "/name"), optional(r));
        }
        if let Some(r) = e.get("configMapRef").filter(|r| !r.is_null()) {
            add(false, str_at(r, "/name"), optional(r));
        }
    }
    for e in container.get("env").and_then(Value::as_array).into_iter().flatten() {
        if let Some(r) = e.pointer("/valueFrom/secretKeyRef") {
            add(true, str_at(r, "/name"), optional(r));
        }
        if let Some(r) = e.pointer("/valueFrom/configMapKeyRef") {
            add(false, str_at(r, "/name"), optional(r));
        }
    }
    for v in pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(s) = v.get("secret") {
            add(true, str_at(s, "/secretName"), optional(s));
        }
        if let Some(c) = v.get("configMap") {
            add(false, str_at(c, "/name"), optional(c));
        }
        for src in v
            .pointer("/projected/sources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(s) = src.get("secret") {
                add(true, str_at(s, "/name"), optional(s));
            }
            if let Some(c) = src.get("configMap") {
                add(false, str_at(c, "/name"), optional(c));
            }
        }
    }
    out
}

/// The audiences (`""`: the API server's own) and lifetimes of the pod's projected
/// `serviceAccountToken` sources.
pub fn token_audiences(pod: &Value) -> Vec<(String, Option<i64>)> {
    let mut out: Vec<(String, Option<i64>)> = Vec::new();
    for v in pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for src in v
            .pointer("/projected/sources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(t) = src.get("serviceAccountToken") {
                let audience = str_at(t, "/audience").to_string();
                if !out.iter().any(|(a, _)| *a == audience) {
                    out.push((audience, t.get("expirationSeconds").and_then(Value::as_i64)));
                }
            }
        }
    }
    out
}

impl Store for crate::store::World {
    fn object(&self, resource: &str, ns: &str, name: &str) -> Option<Value> {
        self.try_get(resource, ns, name).cloned()
    }
}

/// The container's environment as the kubelet builds it: the image's, then the container's
/// `env` with references resolved.
pub(crate) fn container_env(
    store: &dyn Store,
    pod: &Value,
    container: &Value,
    image: &ProcessImage,
) -> Result<Vec<(String, String)>, String> {
    let ns = str_at(pod, "/metadata/namespace");
    let mut env: Vec<(String, String)> = image.env.clone();
    let setenv = |env: &mut Vec<(String, String)>, k: String, v: String| {
        env.retain(|(n, _)| *n != k);
        env.push((k, v));
    };
    // `envFrom` first, in order (a later source wins a name), then `env` over all of it.
    for (i, e) in container
        .get("envFrom")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let (r, secret) = match (e.get("secretRef"), e.get("configMapRef")) {
            (Some(r), None) if !r.is_null() => (r, true),
            (None, Some(r)) if !r.is_null() => (r, false),
            _ => return Err(format!("envFrom[{i}]: exactly one of secretRef and configMapRef")),
        };
        let (resource, kind) = source(secret);
        let obj_name = str_at(r, "/name");
        let optional = r.get("optional").and_then(Value::as_bool) == Some(true);
        let Some(obj) = store.object(resource, ns, obj_name) else {
            if optional {
                continue;
            }
            return Err(format!("envFrom[{i}]: {kind} {ns}/{obj_name} not found"));
        };
        let prefix = e.get("prefix").and_then(Value::as_str).unwrap_or_default();
        for key in all_keys(&obj, secret) {
            let name = format!("{prefix}{key}");
            // The kubelet skips names that are not valid env names.
            if name.is_empty() || name.contains('=') {
                continue;
            }
            let data = key_data(&obj, &key, secret).map_err(|e| format!("envFrom[{i}]: {kind} {obj_name}: {e}"))?;
            if let Some(d) = data {
                setenv(&mut env, name, String::from_utf8_lossy(&d).into_owned());
            }
        }
    }
    for (i, e) in container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = e.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
        let field = format!("env[{i}] ({name})");
        if let Some(v) = e.get("value").and_then(Value::as_str) {
            setenv(&mut env, name, v.to_string());
            continue;
        }
        let Some(from) = e.get("valueFrom").filter(|v| !v.is_null()) else {
            setenv(&mut env, name, String::new());
            continue;
        };
        let value = if let Some(r) = from.get("secretKeyRef").or_else(|| from.get("configMapKeyRef")) {
            let secret = from.get("secretKeyRef").is_some();
            let (resource, kind) = source(secret);
            let obj_name = str_at(r, "/name");
            let key = str_at(r, "/key");
            let optional = r.get("optional").and_then(Value::as_bool) == Some(true);
            let data = match store.object(resource, ns, obj_name) {
                Some(obj) => key_data(&obj, key, secret).map_err(|e| format!("{field}: {kind} {obj_name}: {e}"))?,
                None => None,
            };
            match data {
                Some(d) => String::from_utf8_lossy(&d).into_owned(),
                None if optional => continue,
                None => return Err(format!("{field}: {kind} {ns}/{obj_name} has no key {key:?}")),
            }
        } else if let Some(r) = from.get("fieldRef") {
            let path = str_at(r, "/fieldPath");
            match field_of(pod, path) {
                Some(v) => v,
                None => return Err(format!("{field}: fieldRef {path:?} is not supported")),
            }
        } else {
            return Err(format!(
                "{field}: only secretKeyRef, configMapKeyRef and fieldRef are supported"
            ));
        };
        setenv(&mut env, name, value);
    }
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    Ok(env)
}

/// Who the container runs as: `runAsUser`/`runAsGroup` of the container, else of the pod, else
/// the image's user; the pod's `fsGroup` and `supplementalGroups` as extra groups.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    pub fs_group: Option<u32>,
    pub no_new_privs: bool,
    pub read_only_root: bool,
}

fn id_field(what: &str, v: Option<&Value>) -> Result<Option<u32>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| format!("{what} must be a user or group ID (got {v})")),
    }
}

/// A `command` or `args` entry with its `$(VAR)` references expanded from the container's
/// environment, as a kubelet does: a variable the environment does not define is left as written,
/// and `$$` is a literal `$` (so `$$(VAR)` stays `$(VAR)`).
pub fn expand_references(text: &str, env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(close) = inner.find(')')
        {
            let name = &inner[..close];
            match env.iter().rev().find(|(k, _)| k == name) {
                Some((_, value)) => out.push_str(value),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[close + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

pub(crate) fn identity(pod: &Value, container: &Value, image: &ProcessImage) -> Result<Identity, String> {
    let c = container.get("securityContext");
    let p = pod.pointer("/spec/securityContext");
    let pick = |field: &str| -> Result<Option<u32>, String> {
        Ok(
            id_field(&format!("securityContext.{field}"), c.and_then(|c| c.get(field)))?.or(id_field(
                &format!("spec.securityContext.{field}"),
                p.and_then(|p| p.get(field)),
            )?),
        )
    };
    let uid = pick("runAsUser")?.unwrap_or(image.user.0);
    let gid = pick("runAsGroup")?.unwrap_or(image.user.1);
    let fs_group = id_field("spec.securityContext.fsGroup", p.and_then(|p| p.get("fsGroup")))?;
    let mut groups: Vec<u32> = fs_group.into_iter().collect();
    for (i, g) in p
        .and_then(|p| p.get("supplementalGroups"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        groups.extend(id_field(
            &format!("spec.securityContext.supplementalGroups[{i}]"),
            Some(g),
        )?);
    }
    let non_root = c
        .and_then(|c| c.get("runAsNonRoot"))
        .or_else(|| p.and_then(|p| p.get("runAsNonRoot")))
        .and_then(Value::as_bool)
        == Some(true);
    if non_root && uid == 0 {
        return Err("runAsNonRoot is set but the container would run as root (uid 0)".into());
    }
    Ok(Identity {
        uid,
        gid,
        groups,
        fs_group,
        no_new_privs: c
            .and_then(|c| c.get("allowPrivilegeEscalation"))
            .and_then(Value::as_bool)
            == Some(false),
        read_only_root: c.and_then(|c| c.get("readOnlyRootFilesystem")).and_then(Value::as_bool) == Some(true),
    })
}

fn service_account(pod: &Value) -> String {
    let sa = str_at(pod, "/spec/serviceAccountName");
    if sa.is_empty() { "default" } else { sa }.to_string()
}

/// One volume's files, written into `dir`.
fn materialise(store: &dyn Store, pod: &Value, vol: &Value, dir: &Path, fs_group: Option<u32>) -> Result<(), String> {
    let ns = str_at(pod, "/metadata/namespace");
    let name = str_at(vol, "/name");
    let io = |e: std::io::Error| format!("volume {name}: {}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(io)?;
    let group = |p: &Path| match fs_group {
        Some(g) => std::os::unix::fs::chown(p, None, Some(g)),
        None => Ok(()),
    };
    if vol.get("emptyDir").is_some() {
        // As the kubelet makes them: writable by every user of the pod.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).map_err(io)?;
        return group(dir).map_err(io);
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).map_err(io)?;
    group(dir).map_err(io)?;
    if let Some(projected) = vol.get("projected").filter(|p| !p.is_null()) {
        return materialise_projected(store, pod, projected, name, dir, fs_group);
    }
    let (src, secret) = match (vol.get("secret"), vol.get("configMap")) {
        (Some(s), _) => (s, true),
        (_, Some(c)) => (c, false),
        _ => {
            return Err(format!(
                "volume {name}: only secret, configMap, projected and emptyDir volumes are supported by the process kubelet"
            ));
        }
    };
    let obj_name = if secret {
        str_at(src, "/secretName")
    } else {
        str_at(src, "/name")
    };
    let (resource, kind) = source(secret);
    let optional = src.get("optional").and_then(Value::as_bool) == Some(true);
    let default_mode = src.get("defaultMode").and_then(Value::as_u64).unwrap_or(0o644) as u32;
    let Some(obj) = store.object(resource, ns, obj_name) else {
        if optional {
            return Ok(());
        }
        return Err(format!("volume {name}: {kind} {ns}/{obj_name} not found"));
    };
    let items: Vec<(String, String, u32)> = match src.get("items").and_then(Value::as_array) {
        Some(items) => items
            .iter()
            .map(|i| {
                (
                    str_at(i, "/key").to_string(),
                    str_at(i, "/path").to_string(),
                    i.get("mode").and_then(Value::as_u64).map_or(default_mode, |m| m as u32),
                )
            })
            .collect(),
        None => all_keys(&obj, secret)
            .into_iter()
            .map(|k| (k.clone(), k, default_mode))
            .collect(),
    };
    for (key, path, mode) in items {
        let data = key_data(&obj, &key, secret)
            .map_err(|e| format!("volume {name}: {kind} {obj_name}: {e}"))?
            .ok_or_else(|| format!("volume {name}: {kind} {ns}/{obj_name} has no key {key:?}"))?;
        write_item(name, dir, &path, &data, mode, fs_group)?;
    }
    Ok(())
}

/// Makes the files under `to` those under `from`: a file that differs or is new is renamed from
/// `from` into place, one `from` lacks is removed. Whether anything changed.
fn replace_changed(from: &Path, to: &Path) -> std::io::Result<bool> {
    fn files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let path = e.path();
            if e.file_type()?.is_dir() {
                files(root, &path, out)?;
            } else if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_path_buf());
            }
        }
        Ok(())
    }
    let (mut new, mut old) = (Vec::new(), Vec::new());
    files(from, from, &mut new)?;
    files(to, to, &mut old)?;
    let mut changed = false;
    for rel in &new {
        let (src, dst) = (from.join(rel), to.join(rel));
        if std::fs::read(&dst).ok() != Some(std::fs::read(&src)?) {
            if let Some(parent) = dst.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::rename(&src, &dst)?;
            changed = true;
        }
    }
    for rel in old.iter().filter(|r| !new.contains(r)) {
        std::fs::remove_file(to.join(rel))?;
        changed = true;
    }
    Ok(changed)
}

/// One file of a volume: `path` (relative, no `..`) under `dir` with `mode`, group `fs_group`.
fn write_item(
    volume: &str,
    dir: &Path,
    path: &str,
    data: &[u8],
    mode: u32,
    fs_group: Option<u32>,
) -> Result<(), String> {
    let io = |e: std::io::Error| format!("volume {volume}: {}: {e}", dir.display());
    if path.is_empty() || path.starts_with('/') || path.split('/').any(|c| c == "..") {
        return Err(format!(
            "volume {volume}: item path {path:?} must be relative without .."
        ));
    }
    let file = dir.join(path);
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    std::fs::write(&file, data).map_err(io)?;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode & 0o7777)).map_err(io)?;
    if let Some(g) = fs_group {
        std::os::unix::fs::chown(&file, None, Some(g)).map_err(io)?;
    }
    Ok(())
}

/// The value of a `fieldRef` of the pod (env or downward API).
fn field_of(pod: &Value, path: &str) -> Option<String> {
    Some(match path {
        "metadata.name" => str_at(pod, "/metadata/name").to_string(),
        "metadata.namespace" => str_at(pod, "/metadata/namespace").to_string(),
        "metadata.uid" => str_at(pod, "/metadata/uid").to_string(),
        "spec.serviceAccountName" => service_account(pod),
        "spec.nodeName" => str_at(pod, "/spec/nodeName").to_string(),
        "status.podIP" => str_at(pod, "/status/podIP").to_string(),
        "status.hostIP" => str_at(pod, "/status/hostIP").to_string(),
        _ => return None,
    })
}

/// A projected volume: its Secret, ConfigMap, downward API and service-account token sources,
/// in one folder.
fn materialise_projected(
    store: &dyn Store,
    pod: &Value,
    projected: &Value,
    name: &str,
    dir: &Path,
    fs_group: Option<u32>,
) -> Result<(), String> {
    let ns = str_at(pod, "/metadata/namespace");
    let default_mode = projected.get("defaultMode").and_then(Value::as_u64).unwrap_or(0o644) as u32;
    let mode_of = |i: &Value| i.get("mode").and_then(Value::as_u64).map_or(default_mode, |m| m as u32);
    for (n, src) in projected
        .get("sources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let what = format!("volume {name}: sources[{n}]");
        if let Some(t) = src.get("serviceAccountToken").filter(|t| !t.is_null()) {
            let audience = str_at(t, "/audience");
            let token = store
                .token(audience)
                .ok_or_else(|| format!("{what}: no service-account token for audience {audience:?}"))?;
            write_item(name, dir, str_at(t, "/path"), token.as_bytes(), default_mode, fs_group)?;
        } else if let Some(d) = src.get("downwardAPI").filter(|d| !d.is_null()) {
            for i in d.get("items").and_then(Value::as_array).into_iter().flatten() {
                let field = str_at(i, "/fieldRef/fieldPath");
                let value = field_of(pod, field)
                    .ok_or_else(|| format!("{what}: downwardAPI fieldRef {field:?} is not supported"))?;
                write_item(name, dir, str_at(i, "/path"), value.as_bytes(), mode_of(i), fs_group)?;
            }
        } else {
            let (s, secret) = match (src.get("secret"), src.get("configMap")) {
                (Some(s), _) if !s.is_null() => (s, true),
                (_, Some(c)) if !c.is_null() => (c, false),
                _ => {
                    return Err(format!(
                        "{what}: only secret, configMap, downwardAPI and serviceAccountToken sources are supported"
                    ));
                }
            };
            let (resource, kind) = source(secret);
            let obj_name = str_at(s, "/name");
            let Some(obj) = store.object(resource, ns, obj_name) else {
                if s.get("optional").and_then(Value::as_bool) == Some(true) {
                    continue;
                }
                return Err(format!("{what}: {kind} {ns}/{obj_name} not found"));
            };
            let items: Vec<(String, String, u32)> = match s.get("items").and_then(Value::as_array) {
                Some(items) => items
                    .iter()
                    .map(|i| {
                        (
                            str_at(i, "/key").to_string(),
                            str_at(i, "/path").to_string(),
                            mode_of(i),
                        )
                    })
                    .collect(),
                None => all_keys(&obj, secret)
                    .into_iter()
                    .map(|k| (k.clone(), k, default_mode))
                    .collect(),
            };
            for (key, path, mode) in items {
                let data = key_data(&obj, &key, secret)
                    .map_err(|e| format!("{what}: {kind} {obj_name}: {e}"))?
                    .ok_or_else(|| format!("{what}: {kind} {ns}/{obj_name} has no key {key:?}"))?;
                write_item(name, dir, &path, &data, mode, fs_group)?;
            }
        }
    }
    Ok(())
}

/// The first of these that exists.
fn find_program(candidates: &[&str]) -> Option<String> {
    candidates
        .iter()
        .find(|p| Path::new(p).is_file())
        .map(|p| p.to_string())
}

/// Where the in-cluster service-account folder lands under the new root `r`: `/var/run` is a
/// link to `/run` on most machines, and `/run` is a fresh tmpfs in the container.
fn service_account_target() -> &'static str {
    "/run/secrets/kubernetes.io/serviceaccount"
}

/// A container ready to start: the setup script and its arguments.
pub struct Prepared {
    script: String,
    env: Vec<(String, String)>,
    pod_dir: PathBuf,
    termination: PathBuf,
    /// The network namespace (a file such as `/run/netns/<name>`) the container joins; `None`:
    /// this machine's.
    netns: Option<PathBuf>,
}

impl Prepared {
    /// Run the container in the network namespace `path` (made by whoever gives the pod its
    /// network, as a CNI plugin does) instead of this machine's.
    pub fn in_network_namespace(mut self, path: impl Into<PathBuf>) -> Self {
        self.netns = Some(path.into());
        self
    }
}

impl ProcessKubelet {
    pub(crate) fn new(
        images: BTreeMap<String, ProcessImage>,
        root: PathBuf,
        https: HttpsEndpoint,
        auth: Arc<Auth>,
        shared: Weak<Shared>,
    ) -> Self {
        ProcessKubelet {
            runtime: ProcessRuntime::new(images, root, Arc::new(SimEvents { shared })),
            https,
            auth,
        }
    }

    /// The image a pod's first container runs, when it is one that runs as a process.
    pub(crate) fn image_of(&self, pod: &Value) -> Option<&ProcessImage> {
        self.runtime.image_of(pod)
    }

    /// Everything short of starting, with the simulator's HTTPS endpoint and (unless the pod
    /// says `automountServiceAccountToken: false`) a new token of the pod's ServiceAccount.
    pub(crate) fn prepare(&self, store: &dyn Store, pod: &Value, image: &ProcessImage) -> Result<Prepared, String> {
        let automount = pod
            .pointer("/spec/automountServiceAccountToken")
            .and_then(Value::as_bool)
            != Some(false);
        let ns = str_at(pod, "/metadata/namespace");
        let access = ApiAccess {
            service_env: self
                .https
                .service_env()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            ca_pem: self.https.ca_pem.clone(),
            automount_token: automount.then(|| self.auth.mint(ns, &service_account(pod))),
        };
        self.runtime.prepare(store, pod, image, &access)
    }

    pub(crate) fn spawn(&self, key: PodKey, p: Prepared) -> Result<i32, String> {
        self.runtime.spawn(key, p)
    }

    pub(crate) fn terminate(&self, key: &PodKey) {
        self.runtime.terminate(key);
    }

    pub(crate) fn kill(&self, key: &PodKey) {
        self.runtime.kill(key);
    }

    pub(crate) fn forget(&self, key: &PodKey) {
        self.runtime.forget(key);
    }

    /// The outermost pid of every container process still known.
    pub fn pids(&self) -> Vec<i32> {
        self.runtime.pids()
    }

    /// Kill every container process and wait until each is reaped. Call without holding the
    /// simulator's lock.
    pub fn stop_all(&self) {
        self.runtime.stop_all();
    }
}

/// Where a path inside the container lands under its new root: `/var/run` is a link to `/run`
/// on most machines, and `/run` is a fresh tmpfs in the container, so a mount under
/// `/var/run/` goes to `/run/` there (and the machine's `/var` stays visible).
fn mount_target(inside: &str) -> String {
    match inside.strip_prefix("/var/run/") {
        Some(rest) if std::fs::read_link("/var/run").is_ok() => format!("/run/{rest}"),
        _ => inside.to_string(),
    }
}

/// Set-up commands: a small `/dev` (the [`DEVICES`] bound from the machine and the fd links),
/// `/proc` and a fresh `/run` under the container's root `r` (quoted).
fn mount_dev_proc_run(s: &mut String, r: &str) {
    s.push_str(&format!("mkdir -p {r}/dev {r}/proc {r}/run\n"));
    s.push_str(&format!("mount -t tmpfs -o mode=0755 captf-dev {r}/dev\n"));
    for d in DEVICES {
        s.push_str(&format!("touch {r}/dev/{d}\nmount --bind /dev/{d} {r}/dev/{d}\n"));
    }
    s.push_str(&format!(
        "ln -s /proc/self/fd {r}/dev/fd\nln -s /proc/self/fd/0 {r}/dev/stdin\nln -s /proc/self/fd/1 {r}/dev/stdout\nln -s /proc/self/fd/2 {r}/dev/stderr\n"
    ));
    s.push_str(&format!("mount -t proc proc {r}/proc\n"));
    s.push_str(&format!("mount -t tmpfs -o mode=0755 captf-run {r}/run\n"));
}

/// Set-up commands binding the local file or folder `local` at `inside` under the root `r`
/// (quoted), read-only when `ro`.
fn bind_into(s: &mut String, r: &str, inside: &str, local: &Path, ro: bool) {
    let target = format!("{r}{}", q(inside));
    if local.is_dir() {
        s.push_str(&format!("mkdir -p {target}\n"));
    } else {
        s.push_str(&format!("mkdir -p \"$(dirname {target})\"\ntouch {target}\n"));
    }
    s.push_str(&format!("mount --bind {} {target}\n", qp(local)));
    if ro {
        s.push_str(&format!("mount -o remount,bind,ro {target}\n"));
    }
}

/// What a pod's container gets besides its image, made under the pod's folder: each volume
/// materialised and the container's mounts of them (`(path inside, local, read-only)`, the path
/// through `target`), the service-account files (written when a token is automounted) and the
/// empty termination message file, with the path inside where each goes.
struct PodFiles {
    mounts: Vec<(String, PathBuf, bool)>,
    sa_dir: PathBuf,
    termination_inside: String,
    termination: PathBuf,
}

fn pod_files(
    store: &dyn Store,
    pod: &Value,
    container: &Value,
    pod_dir: &Path,
    fs_group: Option<u32>,
    access: &ApiAccess,
    target: impl Fn(&str) -> String,
) -> Result<PodFiles, String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let vol_dir = pod_dir.join("volumes");
    let mut volumes: BTreeMap<String, PathBuf> = BTreeMap::new();
    for vol in pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let vname = str_at(vol, "/name");
        let dir = vol_dir.join(vname);
        materialise(store, pod, vol, &dir, fs_group)?;
        volumes.insert(vname.to_string(), dir);
    }
    let mut mounts: Vec<(String, PathBuf, bool)> = Vec::new();
    for (i, m) in container
        .get("volumeMounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let vname = str_at(m, "/name");
        let path = str_at(m, "/mountPath");
        check_inside(&format!("volumeMounts[{i}].mountPath"), path)?;
        let mut src = volumes
            .get(vname)
            .cloned()
            .ok_or_else(|| format!("volumeMounts[{i}]: no volume named {vname:?}"))?;
        let sub = str_at(m, "/subPath");
        if !sub.is_empty() {
            src = src.join(sub);
        }
        mounts.push((
            target(path),
            src,
            m.get("readOnly").and_then(Value::as_bool) == Some(true),
        ));
    }

    // Service-account files (a real token of the pod's account: RBAC applies).
    let sa_dir = pod_dir.join("serviceaccount");
    if let Some(token) = &access.automount_token {
        std::fs::create_dir_all(&sa_dir).map_err(|e| io(&sa_dir, e))?;
        for (file, body) in [
            ("token", token.as_str()),
            ("ca.crt", access.ca_pem.as_str()),
            ("namespace", str_at(pod, "/metadata/namespace")),
        ] {
            let path = sa_dir.join(file);
            std::fs::write(&path, body).map_err(|e| io(&path, e))?;
        }
    }
    let termination_inside = container
        .get("terminationMessagePath")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(DEFAULT_TERMINATION_MESSAGE_PATH)
        .to_string();
    check_inside("terminationMessagePath", &termination_inside)?;
    let termination = pod_dir.join("termination-log");
    std::fs::write(&termination, "").map_err(|e| io(&termination, e))?;
    // Whoever the container runs as may write its termination message.
    std::fs::set_permissions(&termination, std::fs::Permissions::from_mode(0o666)).map_err(|e| io(&termination, e))?;
    Ok(PodFiles {
        mounts,
        sa_dir,
        termination_inside,
        termination,
    })
}

impl ProcessRuntime {
    /// A runtime for `images`, keeping its pods' folders under `root`, telling `events` about
    /// its containers.
    pub fn new(images: BTreeMap<String, ProcessImage>, root: PathBuf, events: Arc<dyn ContainerEvents>) -> Self {
        ProcessRuntime {
            images,
            root,
            events,
            procs: Mutex::new(BTreeMap::new()),
            stopping: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            unpacked: Mutex::new(BTreeMap::new()),
        }
    }

    /// The image a pod's first container runs, when it is one that runs as a process.
    pub fn image_of(&self, pod: &Value) -> Option<&ProcessImage> {
        self.images.get(str_at(pod, "/spec/containers/0/image"))
    }

    /// Writes the Secret and ConfigMap volumes of a pod that runs again from `store`, as a
    /// kubelet keeps them current: each file whose content changed is replaced by a rename into
    /// its folder (the container sees the new file at once, never a half-written one), a key
    /// that is gone is removed. A volume whose object cannot be read now keeps its files, and
    /// projected and emptyDir volumes are left alone. The names of the volumes that changed.
    pub fn refresh_volumes(&self, store: &dyn Store, pod: &Value) -> Result<Vec<String>, String> {
        let ns = str_at(pod, "/metadata/namespace");
        let name = str_at(pod, "/metadata/name");
        let uid = str_at(pod, "/metadata/uid");
        let vol_dir = self
            .root
            .join("pods")
            .join(format!("{ns}_{name}_{uid}"))
            .join("volumes");
        let fs_group = pod
            .pointer("/spec/securityContext/fsGroup")
            .and_then(Value::as_u64)
            .and_then(|g| u32::try_from(g).ok());
        let mut changed = Vec::new();
        for vol in pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|v| v.get("secret").is_some() || v.get("configMap").is_some())
        {
            let vname = str_at(vol, "/name");
            let dir = vol_dir.join(vname);
            if vname.is_empty() || !dir.is_dir() {
                continue;
            }
            let next = vol_dir.join(format!(".{vname}.next"));
            let _ = std::fs::remove_dir_all(&next);
            if materialise(store, pod, vol, &next, fs_group).is_ok()
                && replace_changed(&next, &dir).map_err(|e| format!("volume {vname}: {}: {e}", dir.display()))?
            {
                changed.push(vname.to_string());
            }
            let _ = std::fs::remove_dir_all(&next);
        }
        Ok(changed)
    }

    /// Everything short of starting: the environment, the volumes, the service-account files,
    /// the root's layout. An error is the reason the container cannot run.
    pub fn prepare(
        &self,
        store: &dyn Store,
        pod: &Value,
        image: &ProcessImage,
        access: &ApiAccess,
    ) -> Result<Prepared, String> {
        if let Some(oci) = &image.oci {
            return self.prepare_oci(store, pod, image, oci, access);
        }
        let ns = str_at(pod, "/metadata/namespace");
        let name = str_at(pod, "/metadata/name");
        let container = pod.pointer("/spec/containers/0").cloned().unwrap_or(Value::Null);
        let uid = str_at(pod, "/metadata/uid");
        let pod_dir = self.root.join("pods").join(format!("{ns}_{name}_{uid}"));
        let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
        std::fs::create_dir_all(&pod_dir).map_err(|e| io(&pod_dir, e))?;
        let mut env = container_env(store, pod, &container, image)?;
        let who = identity(pod, &container, image)?;
        env.push(("HOSTNAME".into(), name.to_string()));
        for (k, v) in &access.service_env {
            env.retain(|(n, _)| n != k);
            env.push((k.clone(), v.clone()));
        }

        // The program and its arguments.
        let command: Vec<String> = container
            .get("command")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
            .unwrap_or_default();
        let args: Vec<String> = container
            .get("args")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
            .unwrap_or_default();
        let mut argv = if command.is_empty() {
            vec![image.entrypoint.clone()]
        } else {
            command
        };
        argv.extend(args);
        let argv: Vec<String> = argv.iter().map(|a| expand_references(a, &env)).collect();
        let program = argv.first().cloned().unwrap_or_default();
        check_inside("the container's program", &program)?;
        let program_local = image.files.iter().find_map(|(inside, local)| {
            let rest = Path::new(&program).strip_prefix(inside).ok()?;
            let p = if rest.as_os_str().is_empty() {
                local.clone()
            } else {
                local.join(rest)
            };
            Some(p)
        });
        match program_local {
            Some(p) if p.is_file() => {}
            Some(p) => {
                return Err(format!(
                    "the container's program {program}: its local file {} does not exist",
                    p.display()
                ));
            }
            None => {
                return Err(format!(
                    "the container's program {program} is not among the image's files"
                ));
            }
        }
        for (inside, local) in &image.files {
            check_inside("image file", inside)?;
            if !local.exists() {
                return Err(format!(
                    "image file {inside}: the local path {} does not exist",
                    local.display()
                ));
            }
        }

        let PodFiles {
            mounts,
            sa_dir,
            termination_inside,
            termination,
        } = pod_files(store, pod, &container, &pod_dir, who.fs_group, access, mount_target)?;
        let automount = access.automount_token.is_some();

        let chroot = find_program(&["/usr/sbin/chroot", "/usr/bin/chroot", "/sbin/chroot", "/bin/chroot"])
            .ok_or("chroot is not installed on this machine")?;

        // The root: a tmpfs with the machine's top-level folders bound, except those taken.
        let taken: std::collections::BTreeSet<String> = mounts
            .iter()
            .map(|(p, _, _)| top_level(p).to_string())
            .chain(image.files.iter().map(|(p, _)| top_level(p).to_string()))
            .chain(["dev", "proc", "run"].map(String::from))
            .collect();
        let rootfs = pod_dir.join("rootfs");
        std::fs::create_dir_all(&rootfs).map_err(|e| io(&rootfs, e))?;
        let r = qp(&rootfs);
        // Set-up commands come from the machine's folders; the container keeps its own PATH.
        let mut s = String::from("set -e\n__path=\"$PATH\"\nPATH=/usr/sbin:/usr/bin:/sbin:/bin\n");
        s.push_str(&format!("mount -t tmpfs -o mode=0755 captf-rootfs {r}\n"));
        let mut entries: Vec<_> = std::fs::read_dir("/")
            .map_err(|e| io(Path::new("/"), e))?
            .filter_map(Result::ok)
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let n = e.file_name().to_string_lossy().into_owned();
            if taken.contains(&n) {
                continue;
            }
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_symlink() {
                if let Ok(target) = std::fs::read_link(e.path()) {
                    s.push_str(&format!("ln -s {} {r}/{}\n", qp(&target), q(&n)));
                }
            } else if ft.is_dir() {
                s.push_str(&format!(
                    "mkdir {r}/{n}\nmount --rbind {} {r}/{n}\n",
                    q(&format!("/{n}")),
                    n = q(&n)
                ));
            }
        }
        mount_dev_proc_run(&mut s, &r);
        // A volume under `/var` (cert-manager's config at `/var/cert-manager/config`) takes the
        // machine's `/var`, and with it the `/var/run` link every image has: made again, so that
        // what lands under `/var/run/` (the service-account token) is found there.
        if taken.contains("var") && std::fs::read_link("/var/run").is_ok() {
            s.push_str(&format!(
                "mkdir -p {r}/var
ln -s /run {r}/var/run
"
            ));
        }
        let bind = |s: &mut String, inside: &str, local: &Path, ro: bool| bind_into(s, &r, inside, local, ro);
        for (path, src, ro) in &mounts {
            bind(&mut s, path, src, *ro);
        }
        for (inside, local) in &image.files {
            bind(&mut s, inside, local, false);
        }
        if automount {
            // `/var/run` links to `/run` (a fresh tmpfs here) on the machines this runs on; a
            // machine where it does not gets the folder on the tmpfs all the same.
            let target = if std::fs::read_link("/var/run").is_ok() {
                service_account_target().to_string()
            } else {
                s.push_str(&format!("mount -t tmpfs -o mode=0755 captf-var-run {r}/var/run\n"));
                SERVICE_ACCOUNT_DIR.to_string()
            };
            bind(&mut s, &target, &sa_dir, true);
        }
        bind(&mut s, &termination_inside, &termination, false);
        s.push_str(&format!("hostname {}\n", q(name)));
        s.push_str(&format!("touch {}\n", qp(&pod_dir.join("started"))));
        let workdir = container
            .get("workingDir")
            .and_then(Value::as_str)
            .filter(|w| !w.is_empty())
            .or(image.working_dir.as_deref())
            .unwrap_or("/");
        if who.read_only_root {
            s.push_str(&format!("mount -o remount,ro {r}\n"));
        }
        let setpriv = if who == Identity::default() {
            String::new()
        } else {
            let groups = if who.groups.is_empty() {
                "--clear-groups".to_string()
            } else {
                format!(
                    "--groups={}",
                    who.groups.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                )
            };
            format!(
                // Changing the user clears the parent-death signal `unshare --kill-child` set:
                // keep it, so the container still dies with its outermost process.
                "/usr/bin/setpriv --reuid={} --regid={} {groups} --pdeathsig keep{} ",
                who.uid,
                who.gid,
                if who.no_new_privs { " --no-new-privs" } else { "" }
            )
        };
        s.push_str(&format!(
            "PATH=\"$__path\"\nexec {} {r} {setpriv}/bin/sh -c 'cd \"$0\" && exec \"$@\"' {} {}\n",
            q(&chroot),
            q(workdir),
            argv.iter().map(|a| q(a)).collect::<Vec<_>>().join(" ")
        ));
        Ok(Prepared {
            script: s,
            env,
            pod_dir,
            termination,
            netns: None,
        })
    }

    /// [`Self::prepare`] for an [`OciImage`]: the image's root filesystem instead of the
    /// machine's, its configuration instead of the [`ProcessImage`] fields.
    fn prepare_oci(
        &self,
        store: &dyn Store,
        pod: &Value,
        added: &ProcessImage,
        oci: &OciImage,
        access: &ApiAccess,
    ) -> Result<Prepared, String> {
        let ns = str_at(pod, "/metadata/namespace");
        let name = str_at(pod, "/metadata/name");
        let container = pod.pointer("/spec/containers/0").cloned().unwrap_or(Value::Null);
        let uid = str_at(pod, "/metadata/uid");
        let pod_dir = self.root.join("pods").join(format!("{ns}_{name}_{uid}"));
        let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
        std::fs::create_dir_all(&pod_dir).map_err(|e| io(&pod_dir, e))?;

        let unpacked = {
            let mut cache = self.unpacked.lock().unwrap_or_else(|p| p.into_inner());
            let n = cache.len();
            cache
                .entry(oci.clone())
                .or_insert_with(|| unpack(oci, &self.root.join("images").join(n.to_string())))
                .clone()?
        };
        let image = ProcessImage {
            entrypoint: unpacked.entrypoint.first().cloned().unwrap_or_default(),
            env: unpacked.env.iter().chain(&added.env).cloned().collect(),
            user: unpacked.user,
            working_dir: Some(unpacked.working_dir.clone()),
            ..Default::default()
        };
        let mut env = container_env(store, pod, &container, &image)?;
        let who = identity(pod, &container, &image)?;
        env.push(("HOSTNAME".into(), name.to_string()));
        for (k, v) in &access.service_env {
            env.retain(|(n, _)| n != k);
            env.push((k.clone(), v.clone()));
        }

        // `command` replaces the image's Entrypoint, `args` its Cmd (as a kubelet does).
        let command = strings(container.get("command"));
        let args = strings(container.get("args"));
        let mut argv = if command.is_empty() {
            unpacked.entrypoint.clone()
        } else {
            command.clone()
        };
        argv.extend(if args.is_empty() && command.is_empty() {
            unpacked.cmd.clone()
        } else {
            args
        });
        let argv: Vec<String> = argv.iter().map(|a| expand_references(a, &env)).collect();
        let program = argv
            .first()
            .cloned()
            .ok_or("the image has no entrypoint and the container no command")?;
        let path = env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map_or(DEFAULT_PATH, |(_, v)| v.as_str());
        if program_in(&unpacked.rootfs, &program, path).is_none() {
            return Err(format!(
                "the container's program {program} is not an executable file in image {} of {}",
                oci.reference,
                oci.archive.display()
            ));
        }

        let PodFiles {
            mounts,
            sa_dir,
            termination_inside,
            termination,
        } = pod_files(store, pod, &container, &pod_dir, who.fs_group, access, str::to_string)?;

        // The root: an overlay of the image's files and the pod's own upper folder.
        let rootfs = pod_dir.join("rootfs");
        let (upper, work) = (pod_dir.join("upper"), pod_dir.join("overlay-work"));
        for d in [&rootfs, &upper, &work] {
            std::fs::create_dir_all(d).map_err(|e| io(d, e))?;
        }
        let r = qp(&rootfs);
        let mut s = String::from("set -e\n__path=\"$PATH\"\nPATH=/usr/sbin:/usr/bin:/sbin:/bin\n");
        s.push_str(&format!(
            "mount -t overlay captf-image -o {} {r}\n",
            q(&format!(
                "lowerdir={},upperdir={},workdir={}",
                unpacked.rootfs.display(),
                upper.display(),
                work.display()
            ))
        ));
        mount_dev_proc_run(&mut s, &r);
        let bind = |s: &mut String, inside: &str, local: &Path, ro: bool| bind_into(s, &r, inside, local, ro);
        for (inside, local) in &added.files {
            check_inside("an added file", inside)?;
            // A file read-only, a folder writable (as a volume would be).
            bind(&mut s, inside, local, !local.is_dir());
        }
        for (path, src, ro) in &mounts {
            bind(&mut s, path, src, *ro);
        }
        if access.automount_token.is_some() {
            bind(&mut s, SERVICE_ACCOUNT_DIR, &sa_dir, true);
        }
        bind(&mut s, &termination_inside, &termination, false);
        s.push_str(&format!("hostname {}\n", q(name)));
        s.push_str(&format!("touch {}\n", qp(&pod_dir.join("started"))));
        let workdir = container
            .get("workingDir")
            .and_then(Value::as_str)
            .filter(|w| !w.is_empty())
            .unwrap_or(&unpacked.working_dir)
            .to_string();
        if who.read_only_root {
            s.push_str(&format!("mount -o remount,ro {r}\n"));
        }
        // unshare (no new namespace) changes the root and the directory and then the user; the
        // machine's setpriv before it sets no_new_privs, which survives both.
        let nnp = if who.no_new_privs {
            "/usr/bin/setpriv --no-new-privs "
        } else {
            ""
        };
        let user = if (who.uid, who.gid) == (0, 0) {
            String::new()
        } else {
            format!("--setgid {} --setuid {} ", who.gid, who.uid)
        };
        s.push_str(&format!(
            "PATH=\"$__path\"\nexec {nnp}unshare --root={r} --wd={} {user}-- {}\n",
            q(&workdir),
            argv.iter().map(|a| q(a)).collect::<Vec<_>>().join(" ")
        ));
        Ok(Prepared {
            script: s,
            env,
            pod_dir,
            termination,
            netns: None,
        })
    }

    /// Start a prepared container: its process and the threads that keep its output and wait
    /// for its end. Returns the pid of its outermost process.
    pub fn spawn(&self, key: PodKey, p: Prepared) -> Result<i32, String> {
        // Held until the container is known: [`Self::stop_all`] either sees it or refuses it.
        let mut procs = self.procs.lock().unwrap_or_else(|p| p.into_inner());
        if self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            return Err("the kubelet is stopping".to_string());
        }
        // nsenter joins the pod's network namespace and then becomes unshare (no fork), so the
        // outermost pid is the same either way.
        let mut cmd = match &p.netns {
            Some(netns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net={}", netns.display())).arg("unshare");
                c
            }
            None => Command::new("unshare"),
        };
        cmd.args([
            "--mount",
            "--propagation",
            "private",
            "--uts",
            "--pid",
            "--fork",
            "--kill-child",
            "sh",
            "-c",
            &p.script,
        ])
        .env_clear()
        .envs(p.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&p.pod_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child: Child = cmd.spawn().map_err(|e| format!("failed to start unshare: {e}"))?;
        let pid = i32::try_from(child.id()).map_err(|e| e.to_string())?;
        let tail = Arc::new(Mutex::new(String::new()));
        let mut threads = Vec::new();
        for out in [
            child.stdout.take().map(|o| Box::new(o) as Box<dyn Read + Send>),
            child.stderr.take().map(|o| Box::new(o) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let events = self.events.clone();
            let key = key.clone();
            let tail = tail.clone();
            threads.push(std::thread::spawn(move || read_output(out, &*events, &key, &tail)));
        }
        let events = self.events.clone();
        let stopping = self.stopping.clone();
        let started = p.pod_dir.join("started");
        let termination = p.termination.clone();
        let readers: Vec<JoinHandle<()>> = std::mem::take(&mut threads);
        let waiter_key = key.clone();
        threads.push(std::thread::spawn(move || {
            let status = child.wait();
            // The output is complete once every process of the container is gone, which the
            // end of its namespace's first process brings; wait a bounded time all the same.
            let until = std::time::Instant::now() + READERS_PATIENCE;
            while readers.iter().any(|r| !r.is_finished()) && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let code = match status {
                Ok(s) => {
                    use std::os::unix::process::ExitStatusExt;
                    s.code().or_else(|| s.signal().map(|n| 128 + n)).unwrap_or(-1)
                }
                Err(_) => -1,
            };
            let message = read_termination(&termination);
            let exit = Exit {
                code,
                message,
                started: started.exists(),
                output_tail: tail.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            };
            if stopping.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            events.exited(&waiter_key, exit);
        }));
        procs.insert(key, Proc { pid, threads });
        Ok(pid)
    }

    /// The container's first process (PID 1 of its namespace), as the machine numbers it.
    fn container_pid(outer: i32) -> Option<i32> {
        let children = std::fs::read_to_string(format!("/proc/{outer}/task/{outer}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    /// The outermost pid of a container still known.
    fn pid(&self, key: &(String, String)) -> Option<i32> {
        self.procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .map(|p| p.pid)
    }

    /// SIGTERM to the container's first process (as a kubelet stops a container).
    pub fn terminate(&self, key: &PodKey) {
        if let Some(inner) = self.pid(key).and_then(Self::container_pid) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(inner), nix::sys::signal::Signal::SIGTERM);
        }
    }

    /// SIGKILL: the outermost process dies, and with it every process of the container's PID
    /// namespace.
    pub fn kill(&self, key: &PodKey) {
        if let Some(pid) = self.pid(key) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }

    /// Forget a container that ended (its threads have done their work).
    pub fn forget(&self, key: &PodKey) {
        self.procs.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }

    /// The outermost pid of every container process still known.
    pub fn pids(&self) -> Vec<i32> {
        self.procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|p| p.pid)
            .collect()
    }

    /// Kill every container process and wait until each is reaped. Call without holding the
    /// simulator's lock.
    pub fn stop_all(&self) {
        self.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
        let procs = std::mem::take(&mut *self.procs.lock().unwrap_or_else(|p| p.into_inner()));
        for p in procs.values() {
            kill_container(p.pid);
        }
        for (_, p) in procs {
            for t in p.threads {
                let _ = t.join();
            }
        }
    }
}

/// SIGKILL to the container's first process (which ends its PID namespace and every process in
/// it), then to the outermost process.
fn kill_container(outer: i32) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if let Some(inner) = ProcessRuntime::container_pid(outer) {
        let _ = kill(Pid::from_raw(inner), Signal::SIGKILL);
    }
    let _ = kill(Pid::from_raw(outer), Signal::SIGKILL);
}

fn read_termination(path: &Path) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut buf = Vec::new();
    let _ = (&mut f).take(TERMINATION_MESSAGE_MAX as u64).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    (!text.is_empty()).then_some(text)
}

/// Keep a container's output as its pod's log, and its last 2 KiB for a setup failure.
fn read_output(mut out: Box<dyn Read + Send>, events: &dyn ContainerEvents, key: &PodKey, tail: &Mutex<String>) {
    let mut buf = [0u8; 8192];
    loop {
        let n = match out.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        {
            let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
            t.push_str(&text);
            if t.len() > 2048 {
                let cut = t.len() - 2048;
                let cut = (cut..t.len()).find(|i| t.is_char_boundary(*i)).unwrap_or(t.len());
                t.drain(..cut);
            }
        }
        events.output(key, &text);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn args_expand_the_containers_variables_leave_unknown_ones_and_unescape_double_dollars() {
        let env = vec![
            ("POD_NAMESPACE".to_string(), "cert-manager".to_string()),
            ("A".to_string(), "old".to_string()),
            ("A".to_string(), "new".to_string()),
        ];
        for (arg, want) in [
            ("--namespace=$(POD_NAMESPACE)", "--namespace=cert-manager"),
            ("$(A)-$(A)", "new-new"),
            ("$(MISSING)", "$(MISSING)"),
            ("$$(POD_NAMESPACE)", "$(POD_NAMESPACE)"),
            ("cost $5 and $", "cost $5 and $"),
            ("$(unclosed", "$(unclosed"),
            ("", ""),
        ] {
            assert_eq!(expand_references(arg, &env), want, "{arg}");
        }
    }

    proptest::proptest! {
        #[test]
        fn text_without_a_dollar_is_kept_as_it_is(text in "[^$]{0,40}") {
            proptest::prop_assert_eq!(expand_references(&text, &[]), text);
        }
    }

    fn pod() -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {
                "serviceAccountName": "runner", "nodeName": "n",
                "containers": [{"name": "c", "image": "i",
                    "envFrom": [{"secretRef": {"name": "s1"}}, {"configMapRef": {"name": "c1", "optional": true}}],
                    "env": [
                        {"name": "A", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "k", "optional": true}}},
                        {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "c2", "key": "k"}}},
                    ]}],
                "volumes": [
                    {"name": "v1", "secret": {"secretName": "s2", "optional": true}},
                    {"name": "v2", "emptyDir": {}},
                    {"name": "api", "projected": {"defaultMode": 0o640, "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"serviceAccountToken": {"audience": "vault", "path": "vault-token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
                    ]}},
                ],
            },
        })
    }

    #[test]
    fn referenced_objects_names_each_secret_and_configmap_once_optional_only_if_every_reference_is() {
        let refs = referenced_objects(&pod());
        assert_eq!(
            refs,
            vec![
                ("/secrets", "s1".to_string(), false),
                ("/configmaps", "c1".to_string(), true),
                ("/configmaps", "c2".to_string(), false),
                ("/secrets", "s2".to_string(), true),
                ("/configmaps", "kube-root-ca.crt".to_string(), false),
            ]
        );
    }

    #[test]
    fn token_audiences_lists_each_projected_audience_once_with_its_lifetime() {
        assert_eq!(
            token_audiences(&pod()),
            vec![(String::new(), Some(3607)), ("vault".to_string(), None)]
        );
    }

    #[test]
    fn referenced_objects_and_audiences_of_arbitrary_json_never_panic() {
        for v in [
            json!(null),
            json!([1]),
            json!({"spec": {"volumes": [{"projected": 3}]}}),
            json!("x"),
        ] {
            let _ = referenced_objects(&v);
            let _ = token_audiences(&v);
        }
    }

    #[test]
    fn a_projected_volume_holds_its_tokens_configmap_keys_and_downward_api_fields() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Objects::default();
        store.objects.insert(
            ("/configmaps".into(), "ns".into(), "kube-root-ca.crt".into()),
            json!({"data": {"ca.crt": "CA", "other": "x"}}),
        );
        store.tokens.insert(String::new(), "tok".into());
        store.tokens.insert("vault".into(), "vtok".into());
        let p = pod();
        let vol = &p["spec"]["volumes"][2];
        materialise(&store, &p, vol, dir.path(), None).unwrap();
        let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
        assert_eq!(read("token"), "tok");
        assert_eq!(read("vault-token"), "vtok");
        assert_eq!(read("ca.crt"), "CA");
        assert_eq!(read("namespace"), "ns");
        assert!(!dir.path().join("other").exists());
        let mode = std::fs::metadata(dir.path().join("token"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
    }

    struct NoEvents;
    impl ContainerEvents for NoEvents {
        fn output(&self, _: &PodKey, _: &str) {}
        fn exited(&self, _: &PodKey, _: Exit) {}
    }

    #[test]
    fn a_secret_volume_is_refreshed_in_place_with_changed_keys_replaced_and_gone_keys_removed() {
        let root = tempfile::tempdir().unwrap();
        let runtime = ProcessRuntime::new(BTreeMap::new(), root.path().to_path_buf(), Arc::new(NoEvents));
        let p = json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"volumes": [{"name": "tls", "secret": {"secretName": "cert"}}]},
        });
        let mut store = Objects::default();
        let secret = |crt: &str, extra: Option<&str>| {
            let mut data = json!({"tls.crt": B64.encode(crt), "tls.key": B64.encode("key")});
            if let Some(x) = extra {
                data["old"] = json!(B64.encode(x));
            }
            json!({"data": data})
        };
        store.objects.insert(
            ("/secrets".into(), "ns".into(), "cert".into()),
            secret("one", Some("x")),
        );
        let dir = root.path().join("pods/ns_p_u/volumes/tls");
        materialise(&store, &p, &p["spec"]["volumes"][0], &dir, None).unwrap();
        let held = std::fs::File::open(&dir).unwrap();
        assert_eq!(
            runtime.refresh_volumes(&store, &p).unwrap(),
            Vec::<String>::new(),
            "nothing changed"
        );
        store
            .objects
            .insert(("/secrets".into(), "ns".into(), "cert".into()), secret("two", None));
        assert_eq!(runtime.refresh_volumes(&store, &p).unwrap(), vec!["tls".to_string()]);
        assert_eq!(std::fs::read_to_string(dir.join("tls.crt")).unwrap(), "two");
        assert_eq!(std::fs::read_to_string(dir.join("tls.key")).unwrap(), "key");
        assert!(!dir.join("old").exists(), "a key that is gone is removed");
        drop(held);
        store.objects.clear();
        assert!(
            runtime.refresh_volumes(&store, &p).unwrap().is_empty(),
            "an unreadable Secret keeps the files"
        );
        assert_eq!(std::fs::read_to_string(dir.join("tls.crt")).unwrap(), "two");
    }

    #[test]
    fn a_projected_token_the_store_cannot_make_stops_the_container_saying_which() {
        let dir = tempfile::tempdir().unwrap();
        let p = pod();
        let err = materialise(&Objects::default(), &p, &p["spec"]["volumes"][2], dir.path(), None).unwrap_err();
        assert!(
            err.contains("volume api: sources[0]: no service-account token"),
            "{err}"
        );
    }

    #[test]
    fn a_mount_under_var_run_lands_in_the_containers_run_when_var_run_is_a_link() {
        let target = mount_target("/var/run/secrets/kubernetes.io/serviceaccount");
        if std::fs::read_link("/var/run").is_ok() {
            assert_eq!(target, "/run/secrets/kubernetes.io/serviceaccount");
        } else {
            assert_eq!(target, "/var/run/secrets/kubernetes.io/serviceaccount");
        }
        assert_eq!(mount_target("/work"), "/work");
        assert_eq!(mount_target("/var/runner"), "/var/runner");
    }
}

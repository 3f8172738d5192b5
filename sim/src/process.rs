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
//!   volumes as files with their modes, emptyDirs as fresh folders;
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

/// The process kubelet of a simulator: which images run as processes, where their pods' folders
/// go, and the processes running.
pub struct ProcessKubelet {
    images: BTreeMap<String, ProcessImage>,
    root: PathBuf,
    https: HttpsEndpoint,
    auth: Arc<Auth>,
    shared: Weak<Shared>,
    procs: Mutex<BTreeMap<(String, String), Proc>>,
    stopping: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for ProcessKubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessKubelet")
            .field("images", &self.images)
            .field("root", &self.root)
            .finish_non_exhaustive()
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

/// What the store holds that a pod's container needs, read under the simulator's lock.
pub(crate) trait Store {
    fn object(&self, resource: &str, ns: &str, name: &str) -> Option<Value>;
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
            match path {
                "metadata.name" => str_at(pod, "/metadata/name").to_string(),
                "metadata.namespace" => ns.to_string(),
                "metadata.uid" => str_at(pod, "/metadata/uid").to_string(),
                "spec.serviceAccountName" => service_account(pod),
                "spec.nodeName" => str_at(pod, "/spec/nodeName").to_string(),
                "status.podIP" => str_at(pod, "/status/podIP").to_string(),
                "status.hostIP" => str_at(pod, "/status/hostIP").to_string(),
                other => return Err(format!("{field}: fieldRef {other:?} is not supported")),
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
fn materialise(store: &dyn Store, ns: &str, vol: &Value, dir: &Path, fs_group: Option<u32>) -> Result<(), String> {
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
    let (src, secret) = match (vol.get("secret"), vol.get("configMap")) {
        (Some(s), _) => (s, true),
        (_, Some(c)) => (c, false),
        _ => {
            return Err(format!(
                "volume {name}: only secret, configMap and emptyDir volumes are supported by the process kubelet"
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
        if path.is_empty() || path.starts_with('/') || path.split('/').any(|c| c == "..") {
            return Err(format!("volume {name}: item path {path:?} must be relative without .."));
        }
        let data = key_data(&obj, &key, secret)
            .map_err(|e| format!("volume {name}: {kind} {obj_name}: {e}"))?
            .ok_or_else(|| format!("volume {name}: {kind} {ns}/{obj_name} has no key {key:?}"))?;
        let file = dir.join(&path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(&file, data).map_err(io)?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode & 0o7777)).map_err(io)?;
        group(&file).map_err(io)?;
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
pub(crate) struct Prepared {
    script: String,
    env: Vec<(String, String)>,
    pod_dir: PathBuf,
    termination: PathBuf,
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
            images,
            root,
            https,
            auth,
            shared,
            procs: Mutex::new(BTreeMap::new()),
            stopping: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The image a pod's first container runs, when it is one that runs as a process.
    pub(crate) fn image_of(&self, pod: &Value) -> Option<&ProcessImage> {
        self.images.get(str_at(pod, "/spec/containers/0/image"))
    }

    /// Everything short of starting: the environment, the volumes, the service-account files,
    /// the root's layout. An error is the reason the container cannot run.
    pub(crate) fn prepare(&self, store: &dyn Store, pod: &Value, image: &ProcessImage) -> Result<Prepared, String> {
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
        for (k, v) in self.https.service_env() {
            env.retain(|(n, _)| n != k);
            env.push((k.to_string(), v));
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

        // Volumes.
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
            materialise(store, ns, vol, &dir, who.fs_group)?;
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
            let path = str_at(m, "/mountPath").to_string();
            check_inside(&format!("volumeMounts[{i}].mountPath"), &path)?;
            let mut src = volumes
                .get(vname)
                .cloned()
                .ok_or_else(|| format!("volumeMounts[{i}]: no volume named {vname:?}"))?;
            let sub = str_at(m, "/subPath");
            if !sub.is_empty() {
                src = src.join(sub);
            }
            mounts.push((path, src, m.get("readOnly").and_then(Value::as_bool) == Some(true)));
        }

        // Service-account files (a real token of the pod's account: RBAC applies).
        let automount = pod
            .pointer("/spec/automountServiceAccountToken")
            .and_then(Value::as_bool)
            != Some(false);
        let sa_dir = pod_dir.join("serviceaccount");
        if automount {
            let token = self.auth.mint(ns, &service_account(pod));
            self.https
                .write_service_account_files(&sa_dir, ns, &token)
                .map_err(|e| e.to_string())?;
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
        std::fs::set_permissions(&termination, std::fs::Permissions::from_mode(0o666))
            .map_err(|e| io(&termination, e))?;

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
        s.push_str(&format!("mkdir {r}/dev {r}/proc {r}/run\n"));
        s.push_str(&format!("mount -t tmpfs -o mode=0755 captf-dev {r}/dev\n"));
        for d in DEVICES {
            s.push_str(&format!("touch {r}/dev/{d}\nmount --bind /dev/{d} {r}/dev/{d}\n"));
        }
        s.push_str(&format!(
            "ln -s /proc/self/fd {r}/dev/fd\nln -s /proc/self/fd/0 {r}/dev/stdin\nln -s /proc/self/fd/1 {r}/dev/stdout\nln -s /proc/self/fd/2 {r}/dev/stderr\n"
        ));
        s.push_str(&format!("mount -t proc proc {r}/proc\n"));
        s.push_str(&format!("mount -t tmpfs -o mode=0755 captf-run {r}/run\n"));
        let bind = |s: &mut String, inside: &str, local: &Path, ro: bool| {
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
        };
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
        })
    }

    /// Start a prepared container: its process and the threads that keep its output and wait
    /// for its end. Returns the pid of its outermost process.
    pub(crate) fn spawn(&self, key: (String, String), p: Prepared) -> Result<i32, String> {
        let mut cmd = Command::new("unshare");
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
            let shared = self.shared.clone();
            let key = key.clone();
            let tail = tail.clone();
            threads.push(std::thread::spawn(move || read_output(out, &shared, &key, &tail)));
        }
        let shared = self.shared.clone();
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
            let Some(shared) = shared.upgrade() else { return };
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
            let mut w = shared.world.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(pk) = w.kubelet.process.clone()
                && pk.stopping.load(std::sync::atomic::Ordering::SeqCst)
            {
                return;
            }
            w.process_exited(&waiter_key, exit);
        }));
        self.procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, Proc { pid, threads });
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
    pub(crate) fn terminate(&self, key: &(String, String)) {
        if let Some(inner) = self.pid(key).and_then(Self::container_pid) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(inner), nix::sys::signal::Signal::SIGTERM);
        }
    }

    /// SIGKILL: the outermost process dies, and with it every process of the container's PID
    /// namespace.
    pub(crate) fn kill(&self, key: &(String, String)) {
        if let Some(pid) = self.pid(key) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }

    /// Forget a container that ended (its threads have done their work).
    pub(crate) fn forget(&self, key: &(String, String)) {
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
    if let Some(inner) = ProcessKubelet::container_pid(outer) {
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
fn read_output(mut out: Box<dyn Read + Send>, shared: &Weak<Shared>, key: &(String, String), tail: &Mutex<String>) {
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
        let Some(shared) = shared.upgrade() else { continue };
        let mut w = shared.world.lock().unwrap_or_else(|p| p.into_inner());
        w.kubelet.logs.entry(key.clone()).or_default().push_str(&text);
    }
}

//! A real Kubernetes control plane for the tests: etcd, kube-apiserver and
//! kube-controller-manager, built from their Go modules by `scripts/setup-tools.sh` (see
//! `realparts/`), started on free loopback ports with a PKI of their own, and killed (every
//! process, by process group) when the [`ControlPlane`] is dropped. With
//! [`Options::node_joins`] machines can join it as `kubeadm join` joins them: the
//! `captf-node-agent` binary ([`node_agent`]) is such a machine.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let Some(tools) = captf_kubetest::tools_or_skip() else { return Ok(()) };
//! let cp = captf_kubetest::ControlPlane::start(captf_kubetest::Options::new(tools)).await?;
//! let admin = cp.admin_client().await?;
//! let sa_kubeconfig = cp.service_account_kubeconfig("default", "default").await?;
//! # Ok(()) }
//! ```

pub mod args;
pub mod cert_manager;
pub mod join;
pub mod kubeconfig;
pub mod kubelet;
pub mod node_agent;
pub mod node_bootstrap;
pub mod pki;
pub mod podnet;
pub mod ports;
pub mod probe;
pub mod process;
pub mod route;
pub mod tools;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

pub use args::Layout;
pub use kubeconfig::Credentials;
pub use kubelet::{Kubelet, KubeletError, KubeletOptions};
pub use pki::Pki;
pub use process::Component;
pub use tools::{LocateToolsError, Tools, tools_or_skip};

/// How long a start may take, from the call to every component ready (all attempts), unless told otherwise:
/// short enough that a start that fails by timing out still reports within 60 s.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(50);
/// How often readiness is probed.
const POLL: Duration = Duration::from_millis(100);
/// The longest one probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a minted service-account token lives.
const TOKEN_SECONDS: i64 = 3600;

/// How to start a control plane.
#[derive(Clone, Debug)]
pub struct Options {
    pub tools: Tools,
    /// The start fails, naming the component it waited for, if it is not ready by then.
    pub ready_timeout: Duration,
    /// The API server's secure port; `None`: a free one.
    pub apiserver_port: Option<u16>,
    /// The etcd the API server stores in; `None`: an etcd started for it. When set, no etcd is
    /// started.
    pub etcd_servers: Option<String>,
    /// Arguments appended to etcd's own (a later flag overrides an earlier one).
    pub extra_etcd_args: Vec<String>,
    /// Arguments appended to kube-apiserver's own.
    pub extra_apiserver_args: Vec<String>,
    /// The folder the control plane's temporary directory is made in; `None`: the system's.
    pub work_parent: Option<PathBuf>,
    /// Nodes may join as `kubeadm join` joins them (off by default): kube-apiserver
    /// authenticates bootstrap tokens, and kube-controller-manager also runs the
    /// [`args::NODE_JOIN_CONTROLLERS`] (CSR approval and signing with the control plane's CA, the
    /// bootstrap signer and token cleaner, the node lifecycle controller with a 20 s grace).
    /// After the start, [`ControlPlane::prepare_for_joins`] writes what `kubeadm init` would
    /// (the `cluster-info` ConfigMap and the bootstrap tokens' RBAC).
    pub node_joins: bool,
}

impl Options {
    pub fn new(tools: Tools) -> Options {
        Options {
            tools,
            ready_timeout: DEFAULT_READY_TIMEOUT,
            apiserver_port: None,
            etcd_servers: None,
            extra_etcd_args: Vec::new(),
            extra_apiserver_args: Vec::new(),
            work_parent: None,
            node_joins: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("failed to prepare the control plane's files in {path}: {source}")]
    Prepare {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to find a free loopback port: {0}")]
    Port(#[source] std::io::Error),
    #[error("failed to generate the control plane's certificates: {0}")]
    Certs(#[from] rcgen::Error),
    #[error("failed to render a kubeconfig: {0}")]
    Kubeconfig(#[from] serde_yaml_ng::Error),
    #[error("failed to start {component} ({program}): {source}")]
    Spawn {
        component: &'static str,
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{component} exited ({status}) before the control plane was ready; the last lines of its log:\n{log_tail}")]
    Exited {
        component: &'static str,
        status: String,
        log_tail: String,
    },
    #[error(
        "{component} was not ready after {waited:?} (last probe: {last_probe}); the last lines of its log:\n{log_tail}"
    )]
    NotReady {
        component: &'static str,
        waited: Duration,
        last_probe: String,
        log_tail: String,
    },
    #[error("failed to connect as the admin: {0}")]
    Client(#[from] ClientError),
}

impl StartError {
    /// The component the start failed on, when it failed on one.
    pub fn component(&self) -> Option<&'static str> {
        match self {
            StartError::Spawn { component, .. }
            | StartError::Exited { component, .. }
            | StartError::NotReady { component, .. } => Some(component),
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("failed to read the kubeconfig {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("failed to build a client: {0}")]
    Build(#[from] kube::Error),
}

#[derive(Debug, thiserror::Error)]
pub enum StartKubeletError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Kubelet(#[from] KubeletError),
}

#[derive(Debug, thiserror::Error)]
pub enum PrepareJoinsError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Prepare(#[from] node_bootstrap::PrepareError),
}

#[derive(Debug, thiserror::Error)]
pub enum MintKubeconfigError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("failed to request a token for the service account {namespace}/{name}: {source}")]
    TokenRequest {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the token request for {namespace}/{name} came back without a token")]
    NoToken { namespace: String, name: String },
    #[error("failed to render the kubeconfig: {0}")]
    Render(#[from] serde_yaml_ng::Error),
    #[error("failed to write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// When each component was ready, counted from the start call.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    pub etcd: Duration,
    /// `/readyz` answered `ok`.
    pub apiserver: Duration,
    /// The service-account controller made the `default` namespace's `default` account.
    pub controller_manager: Duration,
}

/// A running control plane. Dropping it kills every process it started.
#[derive(Debug)]
pub struct ControlPlane {
    /// In start order; killed in reverse.
    components: Vec<Component>,
    layout: Layout,
    pki: Pki,
    timings: Timings,
    // Removed after the processes are gone (fields drop after `Drop::drop`).
    _dir: tempfile::TempDir,
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        while let Some(c) = self.components.pop() {
            drop(c);
        }
    }
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver and kube-controller-manager and waits for each to be ready.
    /// On any failure every process already started is killed and the error names the
    /// component and carries the last lines of its log.
    ///
    /// The ports are found free a moment before the components bind them, so another process
    /// may take one in between: a component that exits because a port the harness chose is in
    /// use is started again on fresh ports (up to [`START_ATTEMPTS`] times, within the same
    /// timeout).
    pub async fn start(opts: Options) -> Result<ControlPlane, StartError> {
        let began = Instant::now();
        let deadline = began + opts.ready_timeout;
        let mut attempt = 1;
        loop {
            match ControlPlane::start_once(&opts, began, deadline).await {
                Err(e) if attempt < START_ATTEMPTS && lost_a_chosen_port(&e, &opts) => attempt += 1,
                other => return other,
            }
        }
    }

    async fn start_once(opts: &Options, began: Instant, deadline: Instant) -> Result<ControlPlane, StartError> {
        let mut builder = tempfile::Builder::new();
        builder.prefix("captf-kubetest-");
        let parent = opts.work_parent.clone().unwrap_or_else(std::env::temp_dir);
        let dir = builder.tempdir_in(&parent).map_err(|source| StartError::Prepare {
            path: parent.clone(),
            source,
        })?;
        let layout = layout(dir.path(), opts)?;
        let pki = Pki::generate()?;
        write_files(&layout, &pki)?;

        let mut starting = Starting {
            components: Vec::new(),
            deadline,
            began,
        };
        let mut timings = Timings::default();
        if opts.etcd_servers.is_none() {
            let mut etcd_args = args::etcd(&layout);
            etcd_args.extend(opts.extra_etcd_args.iter().cloned());
            starting.spawn("etcd", &opts.tools.etcd, &etcd_args, layout.log("etcd"))?;
            let port = layout.etcd_client_port;
            starting.wait_for("etcd", || etcd_health(port)).await?;
            timings.etcd = began.elapsed();
        }

        let mut apiserver_args = args::apiserver(&layout);
        apiserver_args.extend(opts.extra_apiserver_args.iter().cloned());
        starting.spawn(
            "kube-apiserver",
            &opts.tools.kube_apiserver,
            &apiserver_args,
            layout.log("kube-apiserver"),
        )?;
        let admin = client_from_kubeconfig(&layout.admin_kubeconfig()).await?;
        starting.wait_for("kube-apiserver", || readyz(admin.clone())).await?;
        timings.apiserver = began.elapsed();

        starting.spawn(
            "kube-controller-manager",
            &opts.tools.kube_controller_manager,
            &args::controller_manager(&layout),
            layout.log("kube-controller-manager"),
        )?;
        starting
            .wait_for("kube-controller-manager", || default_service_account(admin.clone()))
            .await?;
        timings.controller_manager = began.elapsed();

        Ok(ControlPlane {
            components: std::mem::take(&mut starting.components),
            layout,
            pki,
            timings,
            _dir: dir,
        })
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> String {
        self.layout.server_url()
    }

    /// The control plane's CA (PEM): it signed the API server's serving certificate and the
    /// admin's and the controller manager's client certificates.
    pub fn ca_pem(&self) -> &str {
        &self.pki.ca_pem
    }

    /// The private key of [`ControlPlane::ca_pem`] (PEM), as a cluster's CA Secret holds it
    /// beside the certificate. Written to `pki/ca.key` only with [`Options::node_joins`], where
    /// kube-controller-manager signs nodes' certificates with it.
    pub fn ca_key_pem(&self) -> &str {
        &self.pki.ca_key_pem
    }

    /// A kubeconfig for a cluster admin (client certificate, group `system:masters`).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.layout.admin_kubeconfig()
    }

    pub async fn admin_client(&self) -> Result<kube::Client, ClientError> {
        client_from_kubeconfig(&self.layout.admin_kubeconfig()).await
    }

    /// The folder holding the control plane's files (removed on drop).
    pub fn work_dir(&self) -> &Path {
        &self.layout.dir
    }

    /// `http://127.0.0.1:<port>` of the etcd this start runs (its `/health` and `/metrics` are
    /// there too); `None` when the API server stores in an etcd given by `Options::etcd_servers`.
    pub fn etcd_client_url(&self) -> Option<String> {
        self.layout
            .etcd_servers
            .is_none()
            .then(|| self.layout.etcd_client_url())
    }

    /// Each component's name and process id.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        self.components.iter().map(|c| (c.name, c.pid())).collect()
    }

    /// The path of a component's log.
    pub fn log(&self, component: &str) -> PathBuf {
        self.layout.log(component)
    }

    pub fn timings(&self) -> Timings {
        self.timings
    }

    /// Sets up what nodes need to join with bootstrap tokens, as `kubeadm init` does
    /// ([`node_bootstrap::prepare`]): the `cluster-info` ConfigMap naming [`Self::server_url`]
    /// and [`Self::ca_pem`], readable anonymously, and the RBAC for the CSRs of node tokens and
    /// of nodes. The control plane must have been started with [`Options::node_joins`] for a
    /// join to go through (bootstrap tokens, CSR approval and signing). Applying again changes
    /// nothing.
    pub async fn prepare_for_joins(&self) -> Result<(), PrepareJoinsError> {
        let admin = self.admin_client().await?;
        Ok(node_bootstrap::prepare(&admin, &self.server_url(), &self.pki.ca_pem).await?)
    }

    /// Options for a [`Kubelet`] named `node` on this control plane, keeping its pods under
    /// `root`: its containers reach the API server on `127.0.0.1` with this control plane's CA.
    pub fn kubelet_options(&self, node: &str, root: &Path) -> KubeletOptions {
        KubeletOptions::new(node, root, self.layout.apiserver_port, self.pki.ca_pem.clone())
    }

    /// Starts a [`Kubelet`] with `opts` as the admin.
    pub async fn start_kubelet(&self, opts: KubeletOptions) -> Result<Kubelet, StartKubeletError> {
        let admin = self.admin_client().await?;
        Ok(Kubelet::start(admin, opts).await?)
    }

    /// Writes a kubeconfig that authenticates as the ServiceAccount `namespace/name` with a
    /// token from its TokenRequest (one hour, the API server's audience). The account must exist.
    pub async fn service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<PathBuf, MintKubeconfigError> {
        let token = self.service_account_token(namespace, name).await?;
        let user = format!("system:serviceaccount:{namespace}:{name}");
        let text = kubeconfig::render(
            &self.server_url(),
            &self.pki.ca_pem,
            &user,
            &Credentials::Token(&token),
            namespace,
        )?;
        let path = self.layout.dir.join(format!("sa-{namespace}-{name}.kubeconfig"));
        std::fs::write(&path, text).map_err(|source| MintKubeconfigError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    /// A bearer token of the ServiceAccount `namespace/name` from its TokenRequest (one hour, the
    /// API server's audience), as a pod's projected token is. The account must exist.
    pub async fn service_account_token(&self, namespace: &str, name: &str) -> Result<String, MintKubeconfigError> {
        let admin = self.admin_client().await?;
        let api: Api<ServiceAccount> = Api::namespaced(admin, namespace);
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![args::SERVICE_ACCOUNT_ISSUER.to_string()],
                expiration_seconds: Some(TOKEN_SECONDS),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = api
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .map_err(|source| MintKubeconfigError::TokenRequest {
                namespace: namespace.to_string(),
                name: name.to_string(),
                source,
            })?;
        answer
            .status
            .map(|s| s.token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| MintKubeconfigError::NoToken {
                namespace: namespace.to_string(),
                name: name.to_string(),
            })
    }

    /// A client authenticated as the ServiceAccount `namespace/name` (see
    /// [`ControlPlane::service_account_kubeconfig`]).
    pub async fn service_account_client(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<kube::Client, MintKubeconfigError> {
        let path = self.service_account_kubeconfig(namespace, name).await?;
        Ok(client_from_kubeconfig(&path).await?)
    }
}

/// How many times a start is tried when a port the harness chose was taken before it was bound.
pub const START_ATTEMPTS: u32 = 3;

/// Whether `err` is a component exiting because a port was in use that the harness chose (not
/// one the caller fixed in `opts`): then starting again on fresh ports is worth it.
pub fn lost_a_chosen_port(err: &StartError, opts: &Options) -> bool {
    match err {
        StartError::Exited {
            component, log_tail, ..
        } => {
            log_tail.contains("address already in use")
                && !(*component == "kube-apiserver" && opts.apiserver_port.is_some())
        }
        _ => false,
    }
}

/// A client for the kubeconfig at `path`, with timeouts so that no call hangs a test.
pub async fn client_from_kubeconfig(path: &Path) -> Result<kube::Client, ClientError> {
    let kc = Kubeconfig::read_from(path).map_err(|source| ClientError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|source| ClientError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    config.connect_timeout = Some(PROBE_TIMEOUT);
    config.read_timeout = Some(Duration::from_secs(60));
    Ok(kube::Client::try_from(config)?)
}

/// The layout of one start: free loopback ports (never one given out before) and the
/// folder's paths.
fn layout(dir: &Path, opts: &Options) -> Result<Layout, StartError> {
    let ports = (0..4)
        .map(|_| ports::free_port_on(Ipv4Addr::LOCALHOST))
        .collect::<Result<Vec<_>, _>>()
        .map_err(StartError::Port)?;
    Ok(Layout {
        dir: dir.to_path_buf(),
        etcd_client_port: ports[0],
        etcd_peer_port: ports[1],
        apiserver_port: opts.apiserver_port.unwrap_or(ports[2]),
        controller_manager_port: ports[3],
        etcd_servers: opts.etcd_servers.clone(),
        node_joins: opts.node_joins,
    })
}

fn write_files(layout: &Layout, pki: &Pki) -> Result<(), StartError> {
    let write =
        |path: PathBuf, text: &str| std::fs::write(&path, text).map_err(|source| StartError::Prepare { path, source });
    let pki_dir = layout.dir.join("pki");
    std::fs::create_dir_all(&pki_dir).map_err(|source| StartError::Prepare { path: pki_dir, source })?;
    write(layout.pki("ca.crt"), &pki.ca_pem)?;
    if layout.node_joins {
        write(layout.pki("ca.key"), &pki.ca_key_pem)?;
    }
    write(layout.pki("apiserver.crt"), &pki.serving.cert_pem)?;
    write(layout.pki("apiserver.key"), &pki.serving.key_pem)?;
    write(layout.pki("sa.key"), &pki.sa_private_pem)?;
    write(layout.pki("sa.pub"), &pki.sa_public_pem)?;
    let server = layout.server_url();
    let admin = kubeconfig::render(
        &server,
        &pki.ca_pem,
        pki::ADMIN_USER,
        &Credentials::ClientCert {
            cert_pem: &pki.admin.cert_pem,
            key_pem: &pki.admin.key_pem,
        },
        "default",
    )?;
    write(layout.admin_kubeconfig(), &admin)?;
    let cm = kubeconfig::render(
        &server,
        &pki.ca_pem,
        "system:kube-controller-manager",
        &Credentials::ClientCert {
            cert_pem: &pki.controller_manager.cert_pem,
            key_pem: &pki.controller_manager.key_pem,
        },
        "kube-system",
    )?;
    write(layout.controller_manager_kubeconfig(), &cm)
}

/// The processes of a start in progress; dropped (killed) if the start fails.
struct Starting {
    components: Vec<Component>,
    deadline: Instant,
    began: Instant,
}

impl Starting {
    fn spawn(&mut self, name: &'static str, program: &Path, args: &[String], log: PathBuf) -> Result<(), StartError> {
        let c = Component::spawn(name, program, args, log).map_err(|source| StartError::Spawn {
            component: name,
            program: program.to_path_buf(),
            source,
        })?;
        self.components.push(c);
        Ok(())
    }

    /// Every started process is still running: the first that ended fails the start.
    fn all_running(&mut self) -> Result<(), StartError> {
        for c in &mut self.components {
            if let Some(status) = c.exited() {
                return Err(StartError::Exited {
                    component: c.name,
                    status: status.to_string(),
                    log_tail: c.log_tail(),
                });
            }
        }
        Ok(())
    }

    /// Probes until `probe` says ready, a process ends, or the deadline passes.
    async fn wait_for<F, Fut>(&mut self, component: &'static str, mut probe: F) -> Result<(), StartError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        let mut last_probe = String::from("not probed yet");
        loop {
            self.all_running()?;
            let now = Instant::now();
            if now >= self.deadline {
                let log_tail = self
                    .components
                    .iter()
                    .find(|c| c.name == component)
                    .map_or_else(String::new, Component::log_tail);
                return Err(StartError::NotReady {
                    component,
                    waited: self.began.elapsed(),
                    last_probe,
                    log_tail,
                });
            }
            let budget = PROBE_TIMEOUT.min(self.deadline - now);
            match tokio::time::timeout(budget, probe()).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => last_probe = e,
                Err(_) => last_probe = format!("no answer within {budget:?}"),
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// etcd's `/health` says `"health":"true"`.
async fn etcd_health(port: u16) -> Result<(), String> {
    let mut stream = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    stream
        .take(64 * 1024)
        .read_to_end(&mut answer)
        .await
        .map_err(|e| format!("read: {e}"))?;
    let answer = String::from_utf8_lossy(&answer);
    if answer.contains(r#""health":"true""#) {
        Ok(())
    } else {
        Err(process::last_lines(&answer, 1))
    }
}

/// `/readyz` answers `ok`.
async fn readyz(client: kube::Client) -> Result<(), String> {
    let request = http::Request::get("/readyz")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match client.request_text(request).await {
        Ok(body) if body.trim() == "ok" => Ok(()),
        Ok(body) => Err(process::last_lines(&body, 3)),
        Err(e) => Err(e.to_string()),
    }
}

/// The service-account controller has made `default/default`: the controller manager runs
/// and reaches the API server.
async fn default_service_account(client: kube::Client) -> Result<(), String> {
    let api: Api<ServiceAccount> = Api::namespaced(client, "default");
    match api.get_opt("default").await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err("no ServiceAccount default/default yet".to_string()),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(apiserver_port: Option<u16>) -> Options {
        let mut o = Options::new(Tools {
            etcd: "etcd".into(),
            kube_apiserver: "kube-apiserver".into(),
            kube_controller_manager: "kube-controller-manager".into(),
        });
        o.apiserver_port = apiserver_port;
        o
    }

    fn exited(component: &'static str, log_tail: &str) -> StartError {
        StartError::Exited {
            component,
            status: "exit status: 1".into(),
            log_tail: log_tail.into(),
        }
    }

    const IN_USE: &str = "listen tcp 127.0.0.1:40000: bind: address already in use";

    #[test]
    fn a_port_the_harness_chose_that_got_taken_is_retried_but_one_the_caller_fixed_is_not() {
        assert!(lost_a_chosen_port(&exited("etcd", IN_USE), &options(None)));
        assert!(lost_a_chosen_port(&exited("etcd", IN_USE), &options(Some(6443))));
        assert!(lost_a_chosen_port(&exited("kube-apiserver", IN_USE), &options(None)));
        assert!(lost_a_chosen_port(
            &exited("kube-controller-manager", IN_USE),
            &options(Some(6443))
        ));
        assert!(!lost_a_chosen_port(
            &exited("kube-apiserver", IN_USE),
            &options(Some(6443))
        ));
    }

    #[test]
    fn a_start_that_failed_for_another_reason_is_not_retried() {
        assert!(!lost_a_chosen_port(
            &exited("etcd", "cannot access data directory"),
            &options(None)
        ));
        let not_ready = StartError::NotReady {
            component: "kube-apiserver",
            waited: Duration::from_secs(50),
            last_probe: "address already in use".into(),
            log_tail: IN_USE.into(),
        };
        assert!(!lost_a_chosen_port(&not_ready, &options(None)));
    }
}

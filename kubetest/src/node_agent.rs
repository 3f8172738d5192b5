//! The node agent: what a machine booted from Cluster API's kubeadm bootstrap data does to become
//! a Node, the way `kubeadm join` and a kubelet do it, without running anything else.
//!
//! 1. **Read** the JoinConfiguration from the bootstrap data ([`crate::join`]).
//! 2. **Discover** the cluster: get `kube-public/cluster-info` anonymously over TLS without
//!    trusting the server yet, check the bootstrap signer's signature of its kubeconfig with the
//!    discovery token, and check that the CA it names has the public key one of `caCertHashes`
//!    pins (refusing to go on otherwise); then get it again trusting that CA, and trust only that
//!    CA from then on.
//! 3. **TLS bootstrap**: make a key (ECDSA P-256) and a CertificateSigningRequest for the
//!    `kubernetes.io/kube-apiserver-client-kubelet` signer as `CN=system:node:<name>,
//!    O=system:nodes`, created with the bootstrap token; wait until kube-controller-manager
//!    approves and signs it. The key, the certificate and a kubeconfig with them are kept in the
//!    state directory.
//! 4. **Register** the Node as `system:node:<name>`, with its `spec.providerID` and the
//!    JoinConfiguration's taints; then keep it alive as a kubelet does: renew its Lease in
//!    `kube-node-lease` and post its `Ready=True` condition with a fresh heartbeat, until told to
//!    stop. Stopping leaves the Node: a machine that is shut down just goes quiet, and the node
//!    lifecycle controller marks it `Ready=Unknown`.
//!
//! Every wait has a deadline ([`AgentOptions::join_timeout`] for discovery and the certificate).
//! Each step is one line on stderr and in `agent.log` of the state directory; the token and the
//! key are never written there.

use std::future::Future;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Taint};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

use crate::join::{self, ClusterInfo, JoinConfiguration, JoinError};
use crate::kubeconfig::{self, Credentials};
use crate::kubelet::{NODE_LEASE_NAMESPACE, now_micro, now_time};

/// The signer of kubelet client certificates.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The usages that signer's approver accepts for an ECDSA key.
pub const KUBELET_CLIENT_USAGES: [&str; 2] = ["digital signature", "client auth"];
/// How often discovery asks again and the CSR is looked at.
const POLL: Duration = Duration::from_millis(500);
/// The longest one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// How to run the agent.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// The bootstrap data (a bootstrap data Secret's `value`).
    pub bootstrap_data: PathBuf,
    /// Its format (the Secret's `format`); only `cloud-config` is read.
    pub format: String,
    /// The machine's host name: the Node's name unless `nodeRegistration.name` says otherwise.
    pub hostname: String,
    /// The Node's `spec.providerID`.
    pub provider_id: String,
    /// Where the key, the certificate, the kubeconfig and `agent.log` are kept.
    pub state_dir: PathBuf,
    /// The deadline of discovery and, again, of the certificate's approval and signing.
    pub join_timeout: Duration,
    /// How often the Lease is renewed.
    pub renew_every: Duration,
    /// How often the Node's status (its Ready heartbeat) is posted.
    pub status_every: Duration,
    /// The Lease's `leaseDurationSeconds`.
    pub lease_duration_seconds: i32,
    /// The Node's `InternalIP` address, if any.
    pub internal_ip: Option<String>,
    /// The `status.nodeInfo.kubeletVersion` posted.
    pub kubelet_version: String,
}

impl AgentOptions {
    /// Options with a kubelet's usual Lease (40 s) renewed every 5 s, a status every 10 s, and two
    /// minutes for discovery and for the certificate each.
    pub fn new(
        bootstrap_data: impl Into<PathBuf>,
        hostname: impl Into<String>,
        provider_id: impl Into<String>,
        state_dir: impl Into<PathBuf>,
    ) -> AgentOptions {
        AgentOptions {
            bootstrap_data: bootstrap_data.into(),
            format: join::CLOUD_CONFIG.to_string(),
            hostname: hostname.into(),
            provider_id: provider_id.into(),
            state_dir: state_dir.into(),
            join_timeout: Duration::from_secs(120),
            renew_every: Duration::from_secs(5),
            status_every: Duration::from_secs(10),
            lease_duration_seconds: 40,
            internal_ip: None,
            kubelet_version: "v0.0.0-captf-node-agent".to_string(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("failed to read the bootstrap data {path}: {source}")]
    ReadBootstrapData {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Join(#[from] JoinError),
    #[error("failed to write {path}: {source}")]
    State {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to make a client for {server}: {reason}")]
    Client { server: String, reason: String },
    #[error("discovery at {endpoint} did not succeed within {waited:?}; last: {last}")]
    DiscoveryTimedOut {
        endpoint: String,
        waited: Duration,
        last: String,
    },
    #[error("cluster-info read again over TLS verified with its CA differs from the one discovered: refusing to go on")]
    ClusterInfoChanged,
    #[error("failed to read cluster-info over TLS verified with its CA: {0}")]
    ClusterInfoVerified(String),
    #[error("failed to make the node's key or certificate request: {0}")]
    Key(#[from] rcgen::Error),
    #[error("failed to create the CertificateSigningRequest: {0}")]
    CreateCsr(#[source] kube::Error),
    #[error("the CertificateSigningRequest {name} was {condition}: {message}")]
    CsrRefused {
        name: String,
        condition: String,
        message: String,
    },
    #[error("the CertificateSigningRequest {name} was not signed within {waited:?}; last: {last}")]
    CsrTimedOut {
        name: String,
        waited: Duration,
        last: String,
    },
    #[error("failed to register the Node {name}: {source}")]
    Register {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("a Node {name} already exists with providerID {existing:?}, not {wanted:?}: refusing to take it over")]
    NodeTaken {
        name: String,
        existing: Option<String>,
        wanted: String,
    },
}

/// One line per step, to stderr and to `agent.log` in the state directory.
#[derive(Debug)]
pub struct Log {
    file: Option<std::fs::File>,
}

impl Log {
    /// A log appending to `<state_dir>/agent.log` (made if missing); stderr only when it cannot be
    /// opened (said on stderr).
    pub fn open(state_dir: &Path) -> Log {
        let path = state_dir.join("agent.log");
        let file = std::fs::create_dir_all(state_dir)
            .and_then(|()| std::fs::OpenOptions::new().create(true).append(true).open(&path));
        match file {
            Ok(f) => Log { file: Some(f) },
            Err(e) => {
                let log = Log { file: None };
                log.line(format!("cannot write {}: {e}; logging to stderr only", path.display()));
                log
            }
        }
    }

    /// Writes one line. A stderr or log file that cannot be written (a parent that closed the
    /// pipe) does not stop the agent.
    pub fn line(&self, text: impl std::fmt::Display) {
        let line = format!("{} captf-node-agent: {text}", now_time());
        let _ = writeln!(std::io::stderr(), "{line}");
        if let Some(mut f) = self.file.as_ref() {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// Joins and keeps the Node alive until `stop` resolves (to what stopped it: logged, and the
/// agent returns `Ok`). A join that fails returns its error at once.
pub async fn run(opts: &AgentOptions, log: &Log, stop: impl Future<Output = String>) -> Result<(), AgentError> {
    tokio::select! {
        result = join_and_serve(opts, log) => result,
        why = stop => {
            log.line(format!("stopping on {why}; the Node is left as it is"));
            Ok(())
        }
    }
}

async fn join_and_serve(opts: &AgentOptions, log: &Log) -> Result<(), AgentError> {
    let data = std::fs::read_to_string(&opts.bootstrap_data).map_err(|source| AgentError::ReadBootstrapData {
        path: opts.bootstrap_data.clone(),
        source,
    })?;
    let config = join::parse_bootstrap_data(&opts.format, &data)?;
    let name = join::node_name(config.node_name.as_deref(), &opts.hostname)?;
    log.line(format!(
        "read the {} JoinConfiguration from {}: API server {}, bootstrap token {}, {} CA pin(s); node {name}",
        config.api_version,
        opts.bootstrap_data.display(),
        config.api_server_endpoint,
        config.discovery_token.id,
        config.ca_cert_hashes.len()
    ));
    let info = discover(&config, log, Instant::now() + opts.join_timeout).await?;
    let node_client = tls_bootstrap(&config, &info, &name, opts, log).await?;
    let mut node = Heartbeat::register(node_client, &name, opts, &config.taints, log).await?;
    node.serve(opts, log).await
}

/// A client for `server` that does not authenticate: trusting `ca` (DER), or, with `None`,
/// any certificate (only for reading `cluster-info` before its CA is known).
fn anonymous_client(server: &str, ca: Option<&[Vec<u8>]>) -> Result<kube::Client, AgentError> {
    let err = |reason: String| AgentError::Client {
        server: server.to_string(),
        reason,
    };
    let uri: http::Uri = server.parse().map_err(|e: http::uri::InvalidUri| err(e.to_string()))?;
    let mut config = kube::Config::new(uri);
    match ca {
        Some(ca) => config.root_cert = Some(ca.to_vec()),
        None => config.accept_invalid_certs = true,
    }
    config.connect_timeout = Some(REQUEST_TIMEOUT);
    config.read_timeout = Some(REQUEST_TIMEOUT);
    kube::Client::try_from(config).map_err(|e| err(e.to_string()))
}

/// A client for the kubeconfig `text`.
async fn kubeconfig_client(server: &str, text: &str) -> Result<kube::Client, AgentError> {
    let err = |reason: String| AgentError::Client {
        server: server.to_string(),
        reason,
    };
    let kc = Kubeconfig::from_yaml(text).map_err(|e| err(e.to_string()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    config.connect_timeout = Some(REQUEST_TIMEOUT);
    config.read_timeout = Some(REQUEST_TIMEOUT);
    kube::Client::try_from(config).map_err(|e| err(e.to_string()))
}

/// `cluster-info`'s `kubeconfig` and its signature by `token_id`, or why not yet.
async fn cluster_info(client: &kube::Client, token_id: &str) -> Result<(String, Option<String>), String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), crate::node_bootstrap::CLUSTER_INFO_NAMESPACE);
    let cm = api
        .get_opt(crate::node_bootstrap::CLUSTER_INFO)
        .await
        .map_err(|e| format!("reading cluster-info: {e}"))?
        .ok_or_else(|| "there is no cluster-info ConfigMap in kube-public".to_string())?;
    let mut data = cm.data.unwrap_or_default();
    let kubeconfig = data
        .remove("kubeconfig")
        .ok_or_else(|| "cluster-info has no kubeconfig".to_string())?;
    Ok((kubeconfig, data.remove(&format!("{}{token_id}", join::JWS_KEY_PREFIX))))
}

async fn discover(config: &JoinConfiguration, log: &Log, deadline: Instant) -> Result<ClusterInfo, AgentError> {
    let began = Instant::now();
    let endpoint = format!("https://{}", config.api_server_endpoint);
    let insecure = anonymous_client(&endpoint, None)?;
    let token = &config.discovery_token;
    let mut last = String::new();
    let (kubeconfig, signature) = loop {
        let why = match cluster_info(&insecure, &token.id).await {
            Ok((kubeconfig, Some(signature))) => break (kubeconfig, signature),
            Ok((_, None)) => format!("cluster-info is not signed by bootstrap token {} (yet)", token.id),
            Err(why) => why,
        };
        if why != last {
            log.line(format!("discovery at {endpoint}: waiting: {why}"));
            last = why;
        }
        if Instant::now() >= deadline {
            return Err(AgentError::DiscoveryTimedOut {
                endpoint,
                waited: began.elapsed(),
                last,
            });
        }
        tokio::time::sleep(POLL).await;
    };
    join::verify_detached_jws(&signature, &kubeconfig, token)?;
    let info = join::parse_cluster_info(&kubeconfig)?;
    if config.ca_cert_hashes.is_empty() && config.unsafe_skip_ca_verification {
        log.line("discovery: unsafeSkipCAVerification is set and there are no CA pins: trusting cluster-info's CA unverified");
    } else {
        let pin = join::verify_ca_pins(&info.ca_certificates, &config.ca_cert_hashes)?;
        log.line(format!(
            "discovery: cluster-info is signed by bootstrap token {} and its CA's public key matches the pin {pin}",
            token.id
        ));
    }
    let verified = anonymous_client(&endpoint, Some(&info.ca_certificates))?;
    let (again, _) = cluster_info(&verified, &token.id)
        .await
        .map_err(AgentError::ClusterInfoVerified)?;
    if again != kubeconfig {
        return Err(AgentError::ClusterInfoChanged);
    }
    log.line(format!(
        "discovery: trusting that CA from now on; the API server is {}",
        info.server
    ));
    Ok(info)
}

/// The subject a kubelet's client certificate must have: `CN=system:node:<name>, O=system:nodes`.
pub fn csr_pem(node: &str, key: &rcgen::KeyPair) -> Result<String, rcgen::Error> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    dn.push(rcgen::DnType::OrganizationName, "system:nodes");
    params.distinguished_name = dn;
    params.serialize_request(key)?.pem()
}

/// The CertificateSigningRequest for a kubelet client certificate of `request_pem`.
pub fn csr_object(request_pem: &str) -> Value {
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": { "generateName": "node-csr-" },
        "spec": {
            "request": STANDARD.encode(request_pem),
            "signerName": KUBELET_CLIENT_SIGNER,
            "usages": KUBELET_CLIENT_USAGES,
        },
    })
}

/// Where a CSR stands: its certificate (PEM) once signed, or why it never will be.
pub fn csr_outcome(csr: &CertificateSigningRequest) -> Option<Result<String, (String, String)>> {
    let status = csr.status.as_ref()?;
    for c in status.conditions.iter().flatten() {
        if (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True" {
            return Some(Err((c.type_.clone(), c.message.clone().unwrap_or_default())));
        }
    }
    let cert = status.certificate.as_ref().filter(|c| !c.0.is_empty())?;
    Some(Ok(String::from_utf8_lossy(&cert.0).into_owned()))
}

fn write_private(path: &Path, text: &str) -> Result<(), AgentError> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|source| AgentError::State {
            path: path.to_path_buf(),
            source,
        })
}

/// Gets a client certificate through a CSR made with the bootstrap token; a client with it.
async fn tls_bootstrap(
    config: &JoinConfiguration,
    info: &ClusterInfo,
    node: &str,
    opts: &AgentOptions,
    log: &Log,
) -> Result<kube::Client, AgentError> {
    let began = Instant::now();
    let deadline = began + opts.join_timeout;
    let bearer = config.tls_bootstrap_token.bearer();
    let bootstrap_user = format!("system:bootstrap:{}", config.tls_bootstrap_token.id);
    let text = kubeconfig::render(
        &info.server,
        &info.ca_pem,
        &bootstrap_user,
        &Credentials::Token(&bearer),
        "default",
    )
    .map_err(|e| AgentError::Client {
        server: info.server.clone(),
        reason: e.to_string(),
    })?;
    let bootstrap = kubeconfig_client(&info.server, &text).await?;
    let key = rcgen::KeyPair::generate()?;
    let csr: CertificateSigningRequest = serde_json::from_value(csr_object(&csr_pem(node, &key)?))
        .map_err(|e| AgentError::CreateCsr(kube::Error::SerdeError(e)))?;
    let csrs: Api<CertificateSigningRequest> = Api::all(bootstrap);
    let created = csrs
        .create(&PostParams::default(), &csr)
        .await
        .map_err(AgentError::CreateCsr)?;
    let name = created.metadata.name.unwrap_or_default();
    log.line(format!(
        "requested a client certificate for system:node:{node} as {bootstrap_user}: CertificateSigningRequest {name} ({KUBELET_CLIENT_SIGNER})"
    ));
    let cert_pem = loop {
        let last = match csrs.get(&name).await {
            Ok(csr) => match csr_outcome(&csr) {
                Some(Ok(cert)) => break cert,
                Some(Err((condition, message))) => {
                    return Err(AgentError::CsrRefused {
                        name,
                        condition,
                        message,
                    });
                }
                None => "not approved and signed yet".to_string(),
            },
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(AgentError::CsrTimedOut {
                name,
                waited: began.elapsed(),
                last,
            });
        }
        tokio::time::sleep(POLL).await;
    };
    log.line(format!("the CertificateSigningRequest {name} was approved and signed"));
    let key_pem = key.serialize_pem();
    let state = &opts.state_dir;
    write_private(&state.join("kubelet-client.key"), &key_pem)?;
    write_private(&state.join("kubelet-client.crt"), &cert_pem)?;
    write_private(&state.join("ca.crt"), &info.ca_pem)?;
    let user = format!("system:node:{node}");
    let kubeconfig = kubeconfig::render(
        &info.server,
        &info.ca_pem,
        &user,
        &Credentials::ClientCert {
            cert_pem: &cert_pem,
            key_pem: &key_pem,
        },
        "default",
    )
    .map_err(|e| AgentError::Client {
        server: info.server.clone(),
        reason: e.to_string(),
    })?;
    let path = state.join("kubelet.kubeconfig");
    write_private(&path, &kubeconfig)?;
    log.line(format!("wrote the key, the certificate and {}", path.display()));
    kubeconfig_client(&info.server, &kubeconfig).await
}

/// Go's name of this machine's architecture (the `kubernetes.io/arch` label's values).
pub fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// The Node a kubelet registers: its name, the well-known labels, the provider ID and taints.
pub fn node_object(name: &str, provider_id: &str, taints: &[Taint]) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": name, "labels": {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": go_arch(std::env::consts::ARCH),
        } },
        "spec": { "providerID": provider_id, "taints": taints },
    })
}

/// The Node's status: Ready and no pressure, heartbeat `now`, in that state since `since`.
pub fn node_status(name: &str, internal_ip: Option<&str>, kubelet_version: &str, now: &str, since: &str) -> Value {
    let cond = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({ "type": type_, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": since })
    };
    let mut addresses = vec![json!({ "type": "Hostname", "address": name })];
    if let Some(ip) = internal_ip {
        addresses.insert(0, json!({ "type": "InternalIP", "address": ip }));
    }
    let resources = json!({ "cpu": "2", "memory": "4Gi", "pods": "110", "ephemeral-storage": "10Gi" });
    json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        ],
        "addresses": addresses,
        "daemonEndpoints": { "kubeletEndpoint": { "Port": 0 } },
        "nodeInfo": { "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
            "osImage": "captf node agent", "containerRuntimeVersion": "",
            "kubeletVersion": kubelet_version, "kubeProxyVersion": "", "operatingSystem": "linux",
            "architecture": go_arch(std::env::consts::ARCH) },
    })
}

/// The registered Node, kept alive.
struct Heartbeat {
    client: kube::Client,
    name: String,
    uid: String,
    /// When the Node became Ready (its conditions' `lastTransitionTime`).
    since: String,
    lease_failing: bool,
    status_failing: bool,
}

impl Heartbeat {
    /// Creates the Node (or takes over one of the same name and provider ID, a machine that
    /// joined before), its Lease, and its first Ready status.
    async fn register(
        client: kube::Client,
        name: &str,
        opts: &AgentOptions,
        taints: &[Taint],
        log: &Log,
    ) -> Result<Heartbeat, AgentError> {
        let fail = |source| AgentError::Register {
            name: name.to_string(),
            source,
        };
        let nodes: Api<Node> = Api::all(client.clone());
        let node: Node = serde_json::from_value(node_object(name, &opts.provider_id, taints))
            .map_err(|e| fail(kube::Error::SerdeError(e)))?;
        let node = match nodes.create(&PostParams::default(), &node).await {
            Ok(node) => {
                log.line(format!("registered the Node {name} (providerID {})", opts.provider_id));
                node
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let existing = nodes.get(name).await.map_err(fail)?;
                let existing_id = existing.spec.as_ref().and_then(|s| s.provider_id.clone());
                if existing_id.as_deref() != Some(opts.provider_id.as_str()) {
                    return Err(AgentError::NodeTaken {
                        name: name.to_string(),
                        existing: existing_id,
                        wanted: opts.provider_id.clone(),
                    });
                }
                log.line(format!(
                    "the Node {name} exists with providerID {}: taking it over",
                    opts.provider_id
                ));
                existing
            }
            Err(e) => return Err(fail(e)),
        };
        let heartbeat = Heartbeat {
            client,
            name: name.to_string(),
            uid: node.metadata.uid.unwrap_or_default(),
            since: now_time(),
            lease_failing: false,
            status_failing: false,
        };
        heartbeat.renew_lease(opts).await.map_err(fail)?;
        heartbeat.post_status(opts).await.map_err(fail)?;
        log.line(format!(
            "the Node {name} is Ready; renewing its Lease every {:?} and posting its status every {:?}",
            opts.renew_every, opts.status_every
        ));
        Ok(heartbeat)
    }

    async fn renew_lease(&self, opts: &AgentOptions) -> Result<(), kube::Error> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), NODE_LEASE_NAMESPACE);
        let spec = json!({ "holderIdentity": self.name, "renewTime": now_micro(),
                           "leaseDurationSeconds": opts.lease_duration_seconds });
        match leases
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 404 => {
                let lease: Lease = serde_json::from_value(json!({
                    "metadata": { "name": self.name, "namespace": NODE_LEASE_NAMESPACE,
                        "ownerReferences": [{ "apiVersion": "v1", "kind": "Node",
                                              "name": self.name, "uid": self.uid }] },
                    "spec": spec,
                }))
                .map_err(kube::Error::SerdeError)?;
                leases.create(&PostParams::default(), &lease).await.map(|_| ())
            }
            other => other.map(|_| ()),
        }
    }

    async fn post_status(&self, opts: &AgentOptions) -> Result<(), kube::Error> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let status = node_status(
            &self.name,
            opts.internal_ip.as_deref(),
            &opts.kubelet_version,
            &now_time(),
            &self.since,
        );
        nodes
            .patch_status(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .map(|_| ())
    }

    /// Renews and posts forever; a failure is logged once, and its end too.
    async fn serve(&mut self, opts: &AgentOptions, log: &Log) -> Result<(), AgentError> {
        let mut renew = tokio::time::interval(opts.renew_every);
        renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut status = tokio::time::interval(opts.status_every);
        status.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Both were just done by `register`.
        renew.tick().await;
        status.tick().await;
        loop {
            tokio::select! {
                _ = renew.tick() => {
                    let result = self.renew_lease(opts).await;
                    self.lease_failing = note(log, "renewing the Lease", self.lease_failing, result);
                }
                _ = status.tick() => {
                    let result = self.post_status(opts).await;
                    self.status_failing = note(log, "posting the Node's status", self.status_failing, result);
                }
            }
        }
    }
}

/// Logs a failure when one starts and the recovery when it ends; whether it is failing now.
fn note(log: &Log, what: &str, was_failing: bool, result: Result<(), kube::Error>) -> bool {
    match (was_failing, result) {
        (false, Err(e)) => {
            log.line(format!("{what} failed (trying again): {e}"));
            true
        }
        (true, Ok(())) => {
            log.line(format!("{what} works again"));
            false
        }
        (_, r) => r.is_err(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_csr_asks_the_kubelet_client_signer_for_a_node_client_certificate() {
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = csr_pem("node-a", &key).unwrap();
        let csr: CertificateSigningRequest = serde_json::from_value(csr_object(&pem)).unwrap();
        assert_eq!(csr.spec.signer_name, "kubernetes.io/kube-apiserver-client-kubelet");
        assert_eq!(
            csr.spec.usages.as_deref(),
            Some(&["digital signature".to_string(), "client auth".to_string()][..])
        );
        assert_eq!(csr.spec.request.0, pem.as_bytes());
        assert_eq!(csr.metadata.generate_name.as_deref(), Some("node-csr-"));

        let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
        let (_, request) =
            <x509_parser::certification_request::X509CertificationRequest as x509_parser::prelude::FromDer<
                '_,
                x509_parser::error::X509Error,
            >>::from_der(&block.contents)
            .unwrap();
        let subject = &request.certification_request_info.subject;
        let cn: Vec<_> = subject.iter_common_name().map(|a| a.as_str().unwrap()).collect();
        let o: Vec<_> = subject.iter_organization().map(|a| a.as_str().unwrap()).collect();
        assert_eq!(cn, vec!["system:node:node-a"]);
        assert_eq!(o, vec!["system:nodes"]);
        // No names: the approver refuses a kubelet client CSR with any subject alternative name.
        assert!(request.requested_extensions().is_none_or(|mut e| e.next().is_none()));
    }

    fn csr_with(status: Value) -> CertificateSigningRequest {
        serde_json::from_value(json!({
            "metadata": { "name": "node-csr-x" },
            "spec": { "request": "", "signerName": KUBELET_CLIENT_SIGNER },
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_csr_is_done_when_signed_and_refused_when_denied_or_failed() {
        assert_eq!(csr_outcome(&csr_with(json!({}))), None);
        let approved = json!({ "conditions": [{ "type": "Approved", "status": "True" }] });
        assert_eq!(csr_outcome(&csr_with(approved)), None);
        let signed = json!({ "conditions": [{ "type": "Approved", "status": "True" }],
                             "certificate": STANDARD.encode("CERT") });
        assert_eq!(csr_outcome(&csr_with(signed)), Some(Ok("CERT".to_string())));
        let denied = json!({ "conditions": [{ "type": "Denied", "status": "True", "message": "no" }] });
        assert_eq!(
            csr_outcome(&csr_with(denied)),
            Some(Err(("Denied".to_string(), "no".to_string())))
        );
    }

    #[test]
    fn the_node_carries_its_provider_id_taints_and_well_known_labels() {
        let taint = Taint {
            key: "node.cluster.x-k8s.io/uninitialized".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let node: Node =
            serde_json::from_value(node_object("n1", "captf://x/1", std::slice::from_ref(&taint))).unwrap();
        let spec = node.spec.unwrap();
        assert_eq!(spec.provider_id.as_deref(), Some("captf://x/1"));
        assert_eq!(spec.taints, Some(vec![taint]));
        let labels = node.metadata.labels.unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], "n1");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert!(!labels["kubernetes.io/arch"].is_empty());
    }

    #[test]
    fn the_status_is_ready_with_a_fresh_heartbeat_and_a_steady_transition_time() {
        let status = node_status(
            "n1",
            Some("10.0.0.5"),
            "v1.36.3",
            "2026-01-01T00:00:10Z",
            "2026-01-01T00:00:00Z",
        );
        let ready = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "True");
        assert_eq!(ready["lastHeartbeatTime"], "2026-01-01T00:00:10Z");
        assert_eq!(ready["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(status["addresses"][0]["type"], "InternalIP");
        assert_eq!(status["nodeInfo"]["kubeletVersion"], "v1.36.3");
        let no_ip = node_status("n1", None, "v1", "t", "t");
        assert_eq!(no_ip["addresses"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn architectures_are_named_as_go_names_them() {
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(go_arch("s390x"), "s390x");
    }
}

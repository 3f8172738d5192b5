//! The node's side of `kubeadm join`, as pure functions: reading the kubeadm JoinConfiguration
//! out of the bootstrap data Cluster API's kubeadm bootstrap provider writes (a cloud-config whose
//! `write_files` holds it), and the checks of token discovery: the `cluster-info` ConfigMap's
//! detached JWS signature by the bootstrap token, and the pin of the cluster CA's public key
//! (`caCertHashes`). [`crate::node_agent`] does the I/O around them.
//!
//! Only what a join needs is read: `discovery.bootstrapToken` (`apiServerEndpoint`, `token`,
//! `caCertHashes`, `unsafeSkipCAVerification`), `discovery.tlsBootstrapToken`, and
//! `nodeRegistration` (`name`, `taints`), of `kubeadm.k8s.io/v1beta3` (Kubernetes 1.22 to 1.30)
//! and `v1beta4` (1.31 on), the versions Cluster API writes.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use k8s_openapi::api::core::v1::Taint;
use serde::Deserialize as _;
use serde_yaml_ng::Value;

/// The only bootstrap data format read (Cluster API's `format: cloud-config`).
pub const CLOUD_CONFIG: &str = "cloud-config";
/// Where Cluster API's kubeadm bootstrap provider writes the JoinConfiguration on the machine.
pub const JOIN_CONFIGURATION_PATH: &str = "/run/kubeadm/kubeadm-join-config.yaml";
/// The kubeadm API versions read.
pub const KUBEADM_API_VERSIONS: [&str; 2] = ["kubeadm.k8s.io/v1beta3", "kubeadm.k8s.io/v1beta4"];
/// The prefix of the `cluster-info` ConfigMap's keys holding a bootstrap token's signature of its
/// `kubeconfig`, followed by the token's ID.
pub const JWS_KEY_PREFIX: &str = "jws-kubeconfig-";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JoinError {
    #[error("bootstrap data of format {0:?} is not supported: only {CLOUD_CONFIG} is")]
    Format(String),
    #[error("the bootstrap data is not a cloud-config: {0}")]
    NotCloudConfig(String),
    #[error("the cloud-config has no kubeadm JoinConfiguration in its write_files{0}")]
    NoJoinConfiguration(String),
    #[error("the write_files entry {path} cannot be read: {reason}")]
    Content { path: String, reason: String },
    #[error("the JoinConfiguration is not valid: {0}")]
    Invalid(String),
    #[error("the node name {0:?} is a template this agent cannot render")]
    NameTemplate(String),
    #[error("the cluster-info ConfigMap's kubeconfig is not valid: {0}")]
    ClusterInfo(String),
    #[error("the cluster-info ConfigMap's signature by bootstrap token {token_id} is not valid: {reason}")]
    Signature { token_id: String, reason: String },
    #[error(
        "the cluster CA's public key hash is {found}, which is not one of the caCertHashes {pinned:?}: refusing to trust this API server"
    )]
    CaPinMismatch { found: String, pinned: Vec<String> },
    #[error("{0}")]
    Certificate(String),
}

/// A bootstrap token, `<id>.<secret>`. Only the ID is ever shown (`Debug` hides the secret).
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    pub id: String,
    secret: String,
}

impl std::fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BootstrapToken({}.<hidden>)", self.id)
    }
}

impl BootstrapToken {
    /// A token of the form `[a-z0-9]{6}.[a-z0-9]{16}`; the error names `field`, never the value.
    pub fn parse(field: &str, text: &str) -> Result<BootstrapToken, JoinError> {
        let ok =
            |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        match text.split_once('.') {
            Some((id, secret)) if ok(id, 6) && ok(secret, 16) => Ok(BootstrapToken {
                id: id.to_string(),
                secret: secret.to_string(),
            }),
            _ => Err(JoinError::Invalid(format!(
                "{field} is not a bootstrap token of the form [a-z0-9]{{6}}.[a-z0-9]{{16}}"
            ))),
        }
    }

    /// The token's secret part: the key of its `cluster-info` signature.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The whole token, as a bearer token.
    pub fn bearer(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }
}

/// What a join needs from the kubeadm JoinConfiguration.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinConfiguration {
    pub api_version: String,
    /// `host:port` of the API server discovery asks (`discovery.bootstrapToken.apiServerEndpoint`).
    pub api_server_endpoint: String,
    /// The token discovery verifies `cluster-info` with (`discovery.bootstrapToken.token`).
    pub discovery_token: BootstrapToken,
    /// The token the TLS bootstrap authenticates with: `discovery.tlsBootstrapToken` when set, else
    /// the discovery token (as kubeadm does).
    pub tls_bootstrap_token: BootstrapToken,
    /// `sha256:<hex>` pins of the cluster CA's public key, lower case.
    pub ca_cert_hashes: Vec<String>,
    /// Discovery may trust the CA without a pin (`unsafeSkipCAVerification`); only allowed when
    /// there are no pins, as Cluster API writes it.
    pub unsafe_skip_ca_verification: bool,
    /// `nodeRegistration.name`, when set: the Node's name (it may be a cloud-init template).
    pub node_name: Option<String>,
    /// `nodeRegistration.taints`: the Node is registered with them.
    pub taints: Vec<Taint>,
}

/// The JoinConfiguration in bootstrap data of `format` (a Cluster API bootstrap data Secret's
/// `format` and `value`).
pub fn parse_bootstrap_data(format: &str, data: &str) -> Result<JoinConfiguration, JoinError> {
    if format != CLOUD_CONFIG {
        return Err(JoinError::Format(format.to_string()));
    }
    join_configuration_from_cloud_config(data)
}

/// The JoinConfiguration a cloud-config writes: the `write_files` entry at
/// [`JOIN_CONFIGURATION_PATH`], else the first entry holding a YAML document of
/// `kind: JoinConfiguration`. The cloud-config's first line is `#cloud-config`, after an optional
/// `## template: jinja` line (Cluster API's header).
pub fn join_configuration_from_cloud_config(text: &str) -> Result<JoinConfiguration, JoinError> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let mut first = lines.next().unwrap_or_default().trim_end();
    if first.starts_with("## template:") {
        first = lines.next().unwrap_or_default().trim_end();
    }
    if first != "#cloud-config" {
        return Err(JoinError::NotCloudConfig(
            "its first line is not #cloud-config".to_string(),
        ));
    }
    let doc: Value = serde_yaml_ng::from_str(text).map_err(|e| JoinError::NotCloudConfig(e.to_string()))?;
    let files = match doc.get("write_files") {
        None | Some(Value::Null) => return Err(JoinError::NoJoinConfiguration(" (it has no write_files)".into())),
        Some(Value::Sequence(files)) => files,
        Some(_) => return Err(JoinError::NotCloudConfig("write_files is not a list".to_string())),
    };
    let path_of = |f: &Value| f.get("path").and_then(Value::as_str).unwrap_or_default().to_string();
    // The known path first: its errors are the answer. Other files are only looked into.
    if let Some(file) = files.iter().find(|f| path_of(f) == JOIN_CONFIGURATION_PATH) {
        let content = file_content(file, JOIN_CONFIGURATION_PATH)?;
        return parse_join_configuration(&content)?.ok_or_else(|| {
            JoinError::NoJoinConfiguration(format!(" ({JOIN_CONFIGURATION_PATH} holds no kind: JoinConfiguration)"))
        });
    }
    for file in files {
        let Ok(content) = file_content(file, &path_of(file)) else {
            continue;
        };
        if let Ok(Some(config)) = parse_join_configuration(&content) {
            return Ok(config);
        }
    }
    Err(JoinError::NoJoinConfiguration(String::new()))
}

/// A `write_files` entry's content, decoded as cloud-init decodes its `encoding`: none (or
/// `text/plain`), `b64`/`base64`, or `gz+b64`/`gzip+base64` (and their mixes).
pub fn file_content(file: &Value, path: &str) -> Result<String, JoinError> {
    let err = |reason: String| JoinError::Content {
        path: path.to_string(),
        reason,
    };
    let content = match file.get("content") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(err("its content is not a string".to_string())),
    };
    let encoding = file
        .get("encoding")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_ascii_lowercase();
    let base64 = || {
        let packed: String = content.chars().filter(|c| !c.is_whitespace()).collect();
        STANDARD
            .decode(packed)
            .map_err(|e| err(format!("its {encoding} content does not decode: {e}")))
    };
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).map_err(|_| err("its content is not UTF-8".to_string()));
    match encoding.as_str() {
        "" | "text/plain" => Ok(content.to_string()),
        "b64" | "base64" => text(base64()?),
        "gz+b64" | "gz+base64" | "gzip+b64" | "gzip+base64" => {
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(base64()?.as_slice()), &mut out)
                .map_err(|e| err(format!("its {encoding} content does not decompress: {e}")))?;
            text(out)
        }
        other => Err(err(format!("its encoding {other:?} is not supported"))),
    }
}

/// The JoinConfiguration among the YAML documents of `text`; `None` when none is of
/// `kind: JoinConfiguration`.
pub fn parse_join_configuration(text: &str) -> Result<Option<JoinConfiguration>, JoinError> {
    let mut found = None;
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let doc = Value::deserialize(doc).map_err(|e| JoinError::Invalid(e.to_string()))?;
        if doc.get("kind").and_then(Value::as_str) == Some("JoinConfiguration") {
            found = Some(doc);
            break;
        }
    }
    let Some(doc) = found else { return Ok(None) };
    let str_at = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    let api_version = str_at(&doc, "apiVersion").unwrap_or_default();
    if !KUBEADM_API_VERSIONS.contains(&api_version.as_str()) {
        return Err(JoinError::Invalid(format!(
            "apiVersion {api_version:?} is not one of {KUBEADM_API_VERSIONS:?}"
        )));
    }
    let discovery = doc.get("discovery").cloned().unwrap_or(Value::Null);
    if discovery.get("file").is_some_and(|f| !f.is_null()) {
        return Err(JoinError::Invalid(
            "discovery.file is not supported: only discovery.bootstrapToken".to_string(),
        ));
    }
    let Some(bt) = discovery.get("bootstrapToken").filter(|v| v.is_mapping()) else {
        return Err(JoinError::Invalid("discovery.bootstrapToken is missing".to_string()));
    };
    let api_server_endpoint = str_at(bt, "apiServerEndpoint")
        .filter(|e| !e.is_empty())
        .ok_or_else(|| JoinError::Invalid("discovery.bootstrapToken.apiServerEndpoint is missing".to_string()))?;
    let discovery_token = BootstrapToken::parse(
        "discovery.bootstrapToken.token",
        &str_at(bt, "token").unwrap_or_default(),
    )?;
    let tls_bootstrap_token = match str_at(&discovery, "tlsBootstrapToken").filter(|t| !t.is_empty()) {
        Some(t) => BootstrapToken::parse("discovery.tlsBootstrapToken", &t)?,
        None => discovery_token.clone(),
    };
    let mut ca_cert_hashes = Vec::new();
    for hash in bt
        .get("caCertHashes")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
    {
        let hash = hash.as_str().unwrap_or_default();
        ca_cert_hashes.push(parse_pin(hash)?);
    }
    let unsafe_skip_ca_verification = bt
        .get("unsafeSkipCAVerification")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if ca_cert_hashes.is_empty() && !unsafe_skip_ca_verification {
        return Err(JoinError::Invalid(
            "discovery.bootstrapToken has no caCertHashes and does not set unsafeSkipCAVerification".to_string(),
        ));
    }
    let registration = doc.get("nodeRegistration").cloned().unwrap_or(Value::Null);
    let node_name = str_at(&registration, "name").filter(|n| !n.is_empty());
    let taints = match registration.get("taints") {
        None | Some(Value::Null) => Vec::new(),
        Some(t) => serde_yaml_ng::from_value(t.clone())
            .map_err(|e| JoinError::Invalid(format!("nodeRegistration.taints: {e}")))?,
    };
    Ok(Some(JoinConfiguration {
        api_version,
        api_server_endpoint,
        discovery_token,
        tls_bootstrap_token,
        ca_cert_hashes,
        unsafe_skip_ca_verification,
        node_name,
        taints,
    }))
}

/// A CA pin `sha256:<64 hex digits>`, lower-cased (kubeadm's only pin type).
pub fn parse_pin(text: &str) -> Result<String, JoinError> {
    let pin = text.trim().to_ascii_lowercase();
    match pin.strip_prefix("sha256:") {
        Some(hex) if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(pin),
        _ => Err(JoinError::Invalid(format!(
            "caCertHashes entry {text:?} is not of the form sha256:<64 hex digits>"
        ))),
    }
}

/// The Node's name: `nodeRegistration.name` when set, else `hostname`. A name that is a
/// cloud-init template of the machine's host name (`{{ ds.meta_data.local_hostname }}`,
/// `{{ v1.local_hostname }}`, as infrastructure providers write it) is rendered as `hostname`;
/// any other template is an error.
pub fn node_name(configured: Option<&str>, hostname: &str) -> Result<String, JoinError> {
    let Some(name) = configured else {
        return Ok(hostname.to_string());
    };
    if !name.contains("{{") && !name.contains("{%") {
        return Ok(name.to_string());
    }
    let variable = name
        .trim()
        .strip_prefix("{{")
        .and_then(|n| n.strip_suffix("}}"))
        .map(str::trim);
    const HOSTNAME_VARIABLES: [&str; 4] = [
        "ds.meta_data.local_hostname",
        "ds.meta_data.hostname",
        "v1.local_hostname",
        "local_hostname",
    ];
    match variable {
        Some(v) if HOSTNAME_VARIABLES.contains(&v) => Ok(hostname.to_string()),
        _ => Err(JoinError::NameTemplate(name.to_string())),
    }
}

/// What discovery reads from the `cluster-info` ConfigMap's `kubeconfig`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterInfo {
    /// The API server's URL: the TLS bootstrap talks to it.
    pub server: String,
    /// The CA bundle (PEM) of the first cluster.
    pub ca_pem: String,
    /// Its certificates, DER.
    pub ca_certificates: Vec<Vec<u8>>,
}

/// The server and CA of the first cluster of a kubeconfig.
pub fn parse_cluster_info(kubeconfig: &str) -> Result<ClusterInfo, JoinError> {
    let err = |m: &str| JoinError::ClusterInfo(m.to_string());
    let doc: Value = serde_yaml_ng::from_str(kubeconfig).map_err(|e| JoinError::ClusterInfo(e.to_string()))?;
    let cluster = doc
        .get("clusters")
        .and_then(Value::as_sequence)
        .and_then(|c| c.first())
        .and_then(|c| c.get("cluster"))
        .ok_or_else(|| err("it has no cluster"))?;
    let server = cluster
        .get("server")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| err("its cluster has no server"))?
        .to_string();
    let data = cluster
        .get("certificate-authority-data")
        .and_then(Value::as_str)
        .ok_or_else(|| err("its cluster has no certificate-authority-data"))?;
    let ca_pem = STANDARD
        .decode(data.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| err("its certificate-authority-data is not base64 of PEM"))?;
    let ca_certificates = certificates_from_pem(&ca_pem).map_err(|e| JoinError::ClusterInfo(e.to_string()))?;
    Ok(ClusterInfo {
        server,
        ca_pem,
        ca_certificates,
    })
}

/// The certificates (DER) of a PEM bundle; at least one.
pub fn certificates_from_pem(pem: &str) -> Result<Vec<Vec<u8>>, JoinError> {
    let mut certs = Vec::new();
    for block in x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes()) {
        let block = block.map_err(|e| JoinError::Certificate(format!("the CA is not PEM: {e}")))?;
        if block.label == "CERTIFICATE" {
            certs.push(block.contents);
        }
    }
    if certs.is_empty() {
        return Err(JoinError::Certificate("the CA bundle holds no certificate".to_string()));
    }
    Ok(certs)
}

/// `sha256:<hex>` of a certificate's DER SubjectPublicKeyInfo: the pin kubeadm's `caCertHashes`
/// hold.
pub fn public_key_pin(cert_der: &[u8]) -> Result<String, JoinError> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert_der)
        .map_err(|e| JoinError::Certificate(format!("the CA certificate does not parse: {e}")))?;
    let digest = ring::digest::digest(&ring::digest::SHA256, cert.public_key().raw);
    Ok(format!("sha256:{}", hex(digest.as_ref())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The pin of the CA certificate that one of `pins` names (any certificate of the bundle may); an
/// error naming the first certificate's pin otherwise.
pub fn verify_ca_pins(ca_certificates: &[Vec<u8>], pins: &[String]) -> Result<String, JoinError> {
    let mut first = None;
    for cert in ca_certificates {
        let pin = public_key_pin(cert)?;
        if pins.contains(&pin) {
            return Ok(pin);
        }
        first.get_or_insert(pin);
    }
    Err(JoinError::CaPinMismatch {
        found: first.unwrap_or_default(),
        pinned: pins.to_vec(),
    })
}

/// Checks a detached JWS (`<header>..<signature>`, RFC 7515 appendix F) of `content` as the
/// bootstrap signer writes it into `cluster-info`: HS256, keyed with the token's secret, the
/// header's `kid` the token's ID.
pub fn verify_detached_jws(jws: &str, content: &str, token: &BootstrapToken) -> Result<(), JoinError> {
    let fail = |reason: &str| JoinError::Signature {
        token_id: token.id.clone(),
        reason: reason.to_string(),
    };
    let mut parts = jws.trim().split('.');
    let (Some(header_b64), Some(""), Some(signature_b64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(fail("it is not a detached JWS <header>..<signature>"));
    };
    let header = URL_SAFE_NO_PAD
        .decode(header_b64)
        .map_err(|_| fail("its header is not base64url"))?;
    let header: serde_json::Value = serde_json::from_slice(&header).map_err(|_| fail("its header is not JSON"))?;
    if header.get("alg").and_then(serde_json::Value::as_str) != Some("HS256") {
        return Err(fail("its algorithm is not HS256"));
    }
    if header.get("kid").and_then(serde_json::Value::as_str) != Some(token.id.as_str()) {
        return Err(fail("its key ID is not the token's ID"));
    }
    let signature = URL_SAFE_NO_PAD
        .decode(signature_b64)
        .map_err(|_| fail("its signature is not base64url"))?;
    let signed = format!("{header_b64}.{}", URL_SAFE_NO_PAD.encode(content));
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, token.secret().as_bytes());
    ring::hmac::verify(&key, signed.as_bytes(), &signature)
        .map_err(|_| fail("it does not match the content and the token"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const TOKEN: &str = "abcdef.0123456789abcdef";
    const PIN: &str = "sha256:0f2c4b0e5e2f6a1b7c3d9e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3";

    /// A JoinConfiguration as Cluster API marshals it for a worker of Kubernetes 1.31 or later.
    fn join_v1beta4(name: &str) -> String {
        format!(
            "apiVersion: kubeadm.k8s.io/v1beta4
discovery:
  bootstrapToken:
    apiServerEndpoint: 10.0.0.10:6443
    caCertHashes:
    - {PIN}
    token: {TOKEN}
kind: JoinConfiguration
nodeRegistration:
  imagePullPolicy: IfNotPresent
  imagePullSerial: true
  kubeletExtraArgs:
  - name: cloud-provider
    value: external
  name: '{name}'
  taints:
  - effect: NoSchedule
    key: node.cluster.x-k8s.io/uninitialized
timeouts:
  controlPlaneComponentHealthCheck: 4m0s
"
        )
    }

    fn indent(text: &str, by: usize) -> String {
        let pad = " ".repeat(by);
        text.lines().map(|l| format!("{pad}{l}\n")).collect()
    }

    /// Bootstrap data in the shape of Cluster API's worker cloud-config: its header, the user's
    /// files first, the JoinConfiguration after a `---`, the placeholder file, then runcmd.
    fn cloud_config(join: &str, extra_files: &str) -> String {
        format!(
            "## template: jinja
#cloud-config

write_files:
{extra_files}-   path: /run/kubeadm/kubeadm-join-config.yaml
    owner: root:root
    permissions: '0640'
    content: |
      ---
{}-   path: /run/cluster-api/placeholder
    owner: root:root
    permissions: '0640'
    content: \"This placeholder file is used to create the /run/cluster-api sub directory in a way that is compatible with both Linux and Windows (mkdir -p /run/cluster-api does not work with Windows)\"
runcmd:
  - kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete
",
            indent(join, 6)
        )
    }

    #[test]
    fn cluster_apis_worker_cloud_config_gives_the_endpoint_token_pins_name_and_taints() {
        let extra =
            "-   path: /etc/motd\n    encoding: \"base64\"\n    owner: root:root\n    content: |\n      aGVsbG8K\n";
        let config = parse_bootstrap_data(CLOUD_CONFIG, &cloud_config(&join_v1beta4("node-a"), extra)).unwrap();
        assert_eq!(config.api_version, "kubeadm.k8s.io/v1beta4");
        assert_eq!(config.api_server_endpoint, "10.0.0.10:6443");
        assert_eq!(config.discovery_token.id, "abcdef");
        assert_eq!(config.discovery_token.bearer(), TOKEN);
        assert_eq!(config.tls_bootstrap_token, config.discovery_token);
        assert_eq!(config.ca_cert_hashes, vec![PIN.to_string()]);
        assert!(!config.unsafe_skip_ca_verification);
        assert_eq!(config.node_name.as_deref(), Some("node-a"));
        assert_eq!(config.taints.len(), 1);
        assert_eq!(config.taints[0].key, "node.cluster.x-k8s.io/uninitialized");
        assert_eq!(config.taints[0].effect, "NoSchedule");
    }

    #[test]
    fn a_v1beta3_join_configuration_without_a_name_reads_the_same() {
        let join = format!(
            "apiVersion: kubeadm.k8s.io/v1beta3
discovery:
  bootstrapToken:
    apiServerEndpoint: lb.example.com:6443
    caCertHashes:
    - {}
    token: {TOKEN}
kind: JoinConfiguration
nodeRegistration:
  kubeletExtraArgs:
    cloud-provider: external
  taints: null
",
            PIN.to_uppercase().replace("SHA256", "sha256")
        );
        let config = parse_bootstrap_data(CLOUD_CONFIG, &cloud_config(&join, "")).unwrap();
        assert_eq!(config.api_server_endpoint, "lb.example.com:6443");
        assert_eq!(config.ca_cert_hashes, vec![PIN.to_string()]);
        assert_eq!(config.node_name, None);
        assert!(config.taints.is_empty());
    }

    #[test]
    fn a_join_configuration_written_base64_or_gzip_base64_is_decoded() {
        let join = join_v1beta4("n");
        let b64 = STANDARD.encode(&join);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, join.as_bytes()).unwrap();
        let gz_b64 = STANDARD.encode(gz.finish().unwrap());
        for (encoding, content) in [
            ("b64", &b64),
            ("base64", &b64),
            ("gzip+base64", &gz_b64),
            ("gz+b64", &gz_b64),
        ] {
            let text = format!(
                "#cloud-config\nwrite_files:\n- path: {JOIN_CONFIGURATION_PATH}\n  encoding: {encoding}\n  content: |\n{}",
                indent(content, 4)
            );
            let config = join_configuration_from_cloud_config(&text).unwrap();
            assert_eq!(config.discovery_token.id, "abcdef", "{encoding}");
        }
    }

    #[test]
    fn a_join_configuration_at_another_path_is_found_by_its_kind() {
        let text = format!(
            "#cloud-config\nwrite_files:\n- path: /etc/other\n  content: \"key: [\"\n- path: /tmp/join.yaml\n  content: |\n{}",
            indent(&join_v1beta4("n"), 4)
        );
        assert_eq!(
            join_configuration_from_cloud_config(&text).unwrap().api_server_endpoint,
            "10.0.0.10:6443"
        );
    }

    #[test]
    fn other_formats_and_cloud_configs_without_a_join_are_refused_clearly() {
        let err = parse_bootstrap_data("ignition", "{}").unwrap_err();
        assert_eq!(err, JoinError::Format("ignition".into()));
        assert!(err.to_string().contains("only cloud-config"), "{err}");

        let err = parse_bootstrap_data(CLOUD_CONFIG, "#!/bin/sh\necho hi\n").unwrap_err();
        assert!(matches!(err, JoinError::NotCloudConfig(_)), "{err}");

        let init = "#cloud-config\nwrite_files:\n- path: /run/kubeadm/kubeadm.yaml\n  content: |\n    apiVersion: kubeadm.k8s.io/v1beta4\n    kind: InitConfiguration\n";
        let err = parse_bootstrap_data(CLOUD_CONFIG, init).unwrap_err();
        assert!(matches!(err, JoinError::NoJoinConfiguration(_)), "{err}");
        assert!(err.to_string().contains("no kubeadm JoinConfiguration"), "{err}");

        let err = parse_bootstrap_data(CLOUD_CONFIG, "#cloud-config\nruncmd: [ls]\n").unwrap_err();
        assert!(matches!(err, JoinError::NoJoinConfiguration(_)), "{err}");

        let bad_encoding =
            format!("#cloud-config\nwrite_files:\n- path: {JOIN_CONFIGURATION_PATH}\n  encoding: zstd\n  content: x\n");
        let err = parse_bootstrap_data(CLOUD_CONFIG, &bad_encoding).unwrap_err();
        assert!(err.to_string().contains("\"zstd\" is not supported"), "{err}");
    }

    #[test]
    fn file_discovery_a_bad_token_or_a_bad_pin_is_invalid_and_the_token_is_never_shown() {
        let file = join_v1beta4("n").replace(
            "  bootstrapToken:\n",
            "  file:\n    kubeConfigPath: /etc/k.conf\n  bootstrapToken:\n",
        );
        let err = parse_join_configuration(&file).unwrap_err();
        assert!(err.to_string().contains("discovery.file"), "{err}");

        let secret_like = "abcdef.0123456789ABCDEF";
        let err = parse_join_configuration(&join_v1beta4("n").replace(TOKEN, secret_like)).unwrap_err();
        assert!(err.to_string().contains("discovery.bootstrapToken.token"), "{err}");
        assert!(!err.to_string().contains("0123456789"), "{err}");

        let err = parse_join_configuration(&join_v1beta4("n").replace(PIN, "md5:abc")).unwrap_err();
        assert!(err.to_string().contains("sha256:<64 hex digits>"), "{err}");

        let no_pins = join_v1beta4("n").replace(&format!("    caCertHashes:\n    - {PIN}\n"), "");
        assert!(parse_join_configuration(&no_pins).is_err());
        let skip = no_pins.replace("    token:", "    unsafeSkipCAVerification: true\n    token:");
        assert!(
            parse_join_configuration(&skip)
                .unwrap()
                .unwrap()
                .unsafe_skip_ca_verification
        );

        let token = BootstrapToken::parse("t", TOKEN).unwrap();
        assert_eq!(format!("{token:?}"), "BootstrapToken(abcdef.<hidden>)");
    }

    #[test]
    fn a_tls_bootstrap_token_is_used_for_the_csr_when_set() {
        let join = join_v1beta4("n").replace(
            "discovery:\n",
            "discovery:\n  tlsBootstrapToken: zyxwvu.0123456789abcdef\n",
        );
        let config = parse_join_configuration(&join).unwrap().unwrap();
        assert_eq!(config.tls_bootstrap_token.id, "zyxwvu");
        assert_eq!(config.discovery_token.id, "abcdef");
    }

    #[test]
    fn the_node_name_is_the_configured_one_or_the_rendered_host_name_template() {
        assert_eq!(node_name(None, "host-1").unwrap(), "host-1");
        assert_eq!(node_name(Some("worker-7"), "host-1").unwrap(), "worker-7");
        assert_eq!(
            node_name(Some("{{ ds.meta_data.local_hostname }}"), "host-1").unwrap(),
            "host-1"
        );
        assert_eq!(node_name(Some("{{v1.local_hostname}}"), "host-1").unwrap(), "host-1");
        let err = node_name(Some("{{ ds.meta_data.instance_id }}"), "host-1").unwrap_err();
        assert!(matches!(err, JoinError::NameTemplate(_)), "{err}");
    }

    fn self_signed() -> (String, rcgen::KeyPair) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        (params.self_signed(&key).unwrap().pem(), key)
    }

    #[test]
    fn the_pin_is_the_sha256_of_the_cas_subject_public_key_info() {
        let (pem, key) = self_signed();
        let der = certificates_from_pem(&pem).unwrap();
        let expected = format!(
            "sha256:{}",
            hex(ring::digest::digest(
                &ring::digest::SHA256,
                &rcgen::PublicKeyData::subject_public_key_info(&key)
            )
            .as_ref())
        );
        assert_eq!(public_key_pin(&der[0]).unwrap(), expected);
        assert_eq!(verify_ca_pins(&der, &[PIN.into(), expected.clone()]).unwrap(), expected);
        let err = verify_ca_pins(&der, &[PIN.into()]).unwrap_err();
        assert_eq!(
            err,
            JoinError::CaPinMismatch {
                found: expected,
                pinned: vec![PIN.into()]
            }
        );
        assert!(err.to_string().contains("refusing"), "{err}");
    }

    #[test]
    fn any_certificate_of_a_ca_bundle_may_match_a_pin() {
        let (first, _) = self_signed();
        let (second, _) = self_signed();
        let bundle = certificates_from_pem(&format!("{first}{second}")).unwrap();
        assert_eq!(bundle.len(), 2);
        let pin = public_key_pin(&bundle[1]).unwrap();
        assert_eq!(verify_ca_pins(&bundle, std::slice::from_ref(&pin)).unwrap(), pin);
        assert!(certificates_from_pem("no pem here").is_err());
    }

    #[test]
    fn cluster_info_gives_the_server_and_the_ca() {
        let (pem, _) = self_signed();
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: https://127.0.0.1:6443\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\nusers: null\n",
            STANDARD.encode(&pem)
        );
        let info = parse_cluster_info(&kubeconfig).unwrap();
        assert_eq!(info.server, "https://127.0.0.1:6443");
        assert_eq!(info.ca_pem, pem);
        assert_eq!(info.ca_certificates.len(), 1);
        assert!(parse_cluster_info("apiVersion: v1\nclusters: []\n").is_err());
    }

    /// A detached HS256 JWS of `content`, as RFC 7515 defines it (header `{"alg","kid"}`).
    fn sign(content: &str, kid: &str, alg: &str, secret: &str) -> String {
        let header = URL_SAFE_NO_PAD.encode(format!(r#"{{"alg":"{alg}","kid":"{kid}"}}"#));
        let input = format!("{header}.{}", URL_SAFE_NO_PAD.encode(content));
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
        let tag = ring::hmac::sign(&key, input.as_bytes());
        format!("{header}..{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    #[test]
    fn the_cluster_info_signature_must_be_the_tokens_over_this_content() {
        let token = BootstrapToken::parse("t", TOKEN).unwrap();
        let content = "apiVersion: v1\nkind: Config\n";
        verify_detached_jws(&sign(content, "abcdef", "HS256", "0123456789abcdef"), content, &token).unwrap();
        for (jws, why) in [
            (sign("other", "abcdef", "HS256", "0123456789abcdef"), "does not match"),
            (sign(content, "abcdef", "HS256", "0123456789abcdeX"), "does not match"),
            (sign(content, "zzzzzz", "HS256", "0123456789abcdef"), "key ID"),
            (sign(content, "abcdef", "none", "0123456789abcdef"), "HS256"),
            ("a.b.c".to_string(), "detached"),
        ] {
            let err = verify_detached_jws(&jws, content, &token).unwrap_err();
            assert!(err.to_string().contains(why), "{why}: {err}");
            assert!(!err.to_string().contains("0123456789abcdef"), "{err}");
        }
    }
}

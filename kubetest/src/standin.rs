//! Stand-ins for two parts of a cluster the harness does not run, for components installed as
//! their manifests say (by `clusterctl init` or `helm install`):
//!
//! - **cert-manager's issuing and CA injection.** cert-manager's commands live in Go modules the
//!   module proxy reachable here does not serve, so nothing issues the `Certificate`s the
//!   manifests ask for. [`CertStandIn::issue`] does what cert-manager would have done for each:
//!   a Secret named by `spec.secretName` with `tls.crt`, `tls.key` and `ca.crt`, for its
//!   `dnsNames`, signed by one CA of its own (a CA `Certificate` gets that CA). Then
//!   [`CertStandIn::inject`] does what cainjector does: every webhook configuration and CRD
//!   annotated `cert-manager.io/inject-ca-from: <namespace>/<certificate>` gets that
//!   Certificate's CA as its `caBundle`. It runs once when asked, not as a controller: no renewal.
//! - **A Service's endpoints for a process on this machine.** A component the tests run as a
//!   process (not a pod) serves on this machine's own address ([`host_address`]: the API server
//!   refuses loopback addresses in an EndpointSlice); [`route_service`] writes the Service's
//!   EndpointSlice to that address, and the API server, started with aggregator routing, calls
//!   the webhooks and conversion behind the Service there, as it would call the pods.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::{Value, json};

/// The annotation cainjector reads.
pub const INJECT_CA_FROM: &str = "cert-manager.io/inject-ca-from";
/// The field manager of every write here.
const MANAGER: &str = "captf-kubetest-standin";

#[derive(Debug, thiserror::Error)]
pub enum StandInError {
    #[error("failed to make a certificate: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> StandInError {
    let what = what.into();
    move |source| StandInError::Api { what, source }
}

/// What cert-manager's issuing and cainjector would do, once, with one CA.
pub struct CertStandIn {
    issuer: Issuer<'static, KeyPair>,
    ca_pem: String,
    ca_key_pem: String,
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version,
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn certificates() -> ApiResource {
    resource("cert-manager.io", "v1", "Certificate", "certificates")
}

impl CertStandIn {
    pub fn new() -> Result<CertStandIn, StandInError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "captf-kubetest-cert-manager-standin");
        params.distinguished_name = dn;
        let key = KeyPair::generate()?;
        let ca_pem = params.self_signed(&key)?.pem();
        let ca_key_pem = key.serialize_pem();
        Ok(CertStandIn {
            issuer: Issuer::new(params, key),
            ca_pem,
            ca_key_pem,
        })
    }

    /// The CA every issued certificate chains to.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// For every Certificate in the cluster whose Secret does not exist yet, creates it:
    /// `tls.crt`, `tls.key` and `ca.crt`. Returns the Secrets made, as `namespace/name`.
    pub async fn issue(&self, client: &kube::Client) -> Result<Vec<String>, StandInError> {
        let certs: Api<DynamicObject> = Api::all_with(client.clone(), &certificates());
        let list = certs
            .list(&ListParams::default())
            .await
            .map_err(api_err("listing Certificates"))?;
        let mut made = Vec::new();
        for cert in list {
            let ns = cert.metadata.namespace.clone().unwrap_or_default();
            let name = cert.metadata.name.clone().unwrap_or_default();
            let spec = &cert.data["spec"];
            let Some(secret_name) = spec["secretName"].as_str() else {
                return Err(StandInError::Invalid(format!(
                    "Certificate {ns}/{name} has no spec.secretName"
                )));
            };
            let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
            if secrets
                .get_opt(secret_name)
                .await
                .map_err(api_err(format!("reading Secret {ns}/{secret_name}")))?
                .is_some()
            {
                continue;
            }
            let (cert_pem, key_pem) = if spec["isCA"].as_bool() == Some(true) {
                // A CA Certificate (the root of a CA Issuer): the stand-in's own CA stands for it.
                (self.ca_pem.clone(), self.ca_key_pem.clone())
            } else {
                let dns: Vec<String> = spec["dnsNames"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                    .unwrap_or_default();
                let mut params = CertificateParams::new(dns)?;
                let mut dn = DistinguishedName::new();
                dn.push(DnType::CommonName, spec["commonName"].as_str().unwrap_or(&name));
                params.distinguished_name = dn;
                params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
                params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
                let key = KeyPair::generate()?;
                (params.signed_by(&key, &self.issuer)?.pem(), key.serialize_pem())
            };
            let secret: Secret = serde_json::from_value(json!({
                "metadata": {
                    "name": secret_name,
                    "namespace": ns,
                    "annotations": {
                        "cert-manager.io/certificate-name": name,
                        "cert-manager.io/issuer-name": spec["issuerRef"]["name"],
                    },
                },
                "type": "kubernetes.io/tls",
                "stringData": { "tls.crt": cert_pem, "tls.key": key_pem, "ca.crt": self.ca_pem },
            }))
            .map_err(|e| StandInError::Invalid(e.to_string()))?;
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .map_err(api_err(format!("creating Secret {ns}/{secret_name}")))?;
            made.push(format!("{ns}/{secret_name}"));
        }
        Ok(made)
    }

    /// Writes the CA of the Certificate each names into every webhook configuration and CRD
    /// annotated [`INJECT_CA_FROM`] (after [`CertStandIn::issue`], so the Secrets exist). Returns
    /// the objects written, as `kind/name`.
    pub async fn inject(&self, client: &kube::Client) -> Result<Vec<String>, StandInError> {
        let bundle = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        let mut written = Vec::new();
        let kinds = [
            resource(
                "admissionregistration.k8s.io",
                "v1",
                "MutatingWebhookConfiguration",
                "mutatingwebhookconfigurations",
            ),
            resource(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingWebhookConfiguration",
                "validatingwebhookconfigurations",
            ),
            resource(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
                "customresourcedefinitions",
            ),
        ];
        for ar in kinds {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(api_err(format!("listing {}s", ar.kind)))?;
            for obj in list {
                let annotations = obj.metadata.annotations.clone().unwrap_or_default();
                if !annotations.contains_key(INJECT_CA_FROM) {
                    continue;
                }
                let name = obj.metadata.name.clone().unwrap_or_default();
                let patch = if ar.kind == "CustomResourceDefinition" {
                    if obj.data["spec"]["conversion"]["strategy"] != "Webhook" {
                        continue;
                    }
                    json!({"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": bundle}}}}})
                } else {
                    let webhooks: Vec<Value> = obj.data["webhooks"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .into_iter()
                        .map(|mut w| {
                            w["clientConfig"]["caBundle"] = json!(bundle);
                            w
                        })
                        .collect();
                    json!({"webhooks": webhooks})
                };
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(api_err(format!("injecting the CA into {} {name}", ar.kind)))?;
                written.push(format!("{}/{name}", ar.kind));
            }
        }
        Ok(written)
    }
}

/// This machine's first global IPv4 address (`ip -4 -o addr show scope global`), where a process
/// the tests run serves a Service: EndpointSlices may not name a loopback address.
pub fn host_address() -> Result<std::net::Ipv4Addr, StandInError> {
    let out = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .map_err(|e| StandInError::Invalid(format!("cannot run `ip` to find this machine's address: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    first_global_ipv4(&text).ok_or_else(|| {
        StandInError::Invalid(format!(
            "this machine has no global IPv4 address for a Service's endpoints (`ip -4 -o addr show scope global` said {text:?})"
        ))
    })
}

/// The first address of `ip -4 -o addr` output (`2: eth0    inet 192.0.2.2/24 brd ...`).
fn first_global_ipv4(text: &str) -> Option<std::net::Ipv4Addr> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        words.find(|w| *w == "inet")?;
        words.next()?.split('/').next()?.parse().ok()
    })
}

/// Points the Service `namespace/name` at `ip:port`: an EndpointSlice (label
/// `kubernetes.io/service-name`) with one ready endpoint and, for each of the Service's ports,
/// a port of the same name. Replaces the slice this wrote before.
pub async fn route_service(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    ip: &str,
    port: u16,
) -> Result<(), StandInError> {
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), namespace);
    let svc = services
        .get(name)
        .await
        .map_err(api_err(format!("reading Service {namespace}/{name}")))?;
    let ports: Vec<Value> = svc
        .spec
        .and_then(|s| s.ports)
        .unwrap_or_default()
        .into_iter()
        .map(|p| json!({"name": p.name.unwrap_or_default(), "port": port, "protocol": "TCP"}))
        .collect();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{name}-standin"),
            "namespace": namespace,
            "labels": {
                "kubernetes.io/service-name": name,
                "endpointslice.kubernetes.io/managed-by": MANAGER,
            },
        },
        "addressType": "IPv4",
        "endpoints": [{ "addresses": [ip], "conditions": { "ready": true } }],
        "ports": ports,
    }))
    .map_err(|e| StandInError::Invalid(e.to_string()))?;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    slices
        .patch(
            &format!("{name}-standin"),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&slice),
        )
        .await
        .map_err(api_err(format!(
            "writing the EndpointSlice of Service {namespace}/{name}"
        )))?;
    Ok(())
}

/// The `tls.crt`, `tls.key` and `ca.crt` of a TLS Secret, as text, for a process that reads
/// them from files.
pub async fn tls_files(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<BTreeMap<String, String>, StandInError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = secrets
        .get(name)
        .await
        .map_err(api_err(format!("reading Secret {namespace}/{name}")))?;
    let mut out = BTreeMap::new();
    for (k, v) in secret.data.unwrap_or_default() {
        out.insert(k, String::from_utf8_lossy(&v.0).into_owned());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_first_global_address_is_read_from_ip_addr_output() {
        let text = "2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\\       valid_lft forever preferred_lft forever\n3: eth1    inet 10.1.2.3/8 scope global eth1\n";
        assert_eq!(first_global_ipv4(text), Some(std::net::Ipv4Addr::new(192, 0, 2, 2)));
        assert_eq!(first_global_ipv4(""), None);
        assert_eq!(first_global_ipv4("2: eth0    inet6 fd00::2/64 scope global"), None);
    }
}

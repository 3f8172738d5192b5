//! Routing for a component the tests run as a process on this machine, not as a pod: its
//! Service's EndpointSlice points at this machine's own address ([`host_address`]: the API server
//! refuses loopback addresses in an EndpointSlice), and the API server, started with aggregator
//! routing, calls the webhooks and conversion behind the Service there, as it would call pods.
//! [`tls_files`] hands such a process the serving certificate cert-manager issued for its
//! Service, waiting until it is issued.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// The field manager of every write here.
const MANAGER: &str = "captf-kubetest-route";

#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> RouteError {
    let what = what.into();
    move |source| RouteError::Api { what, source }
}

/// This machine's first global IPv4 address (`ip -4 -o addr show scope global`), where a process
/// the tests run serves a Service: EndpointSlices may not name a loopback address.
pub fn host_address() -> Result<std::net::Ipv4Addr, RouteError> {
    let out = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .map_err(|e| RouteError::Invalid(format!("cannot run `ip` to find this machine's address: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    first_global_ipv4(&text).ok_or_else(|| {
        RouteError::Invalid(format!(
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
) -> Result<(), RouteError> {
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
            "name": format!("{name}-process"),
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
    .map_err(|e| RouteError::Invalid(e.to_string()))?;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    slices
        .patch(
            &format!("{name}-process"),
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&slice),
        )
        .await
        .map_err(api_err(format!(
            "writing the EndpointSlice of Service {namespace}/{name}"
        )))?;
    Ok(())
}

/// The `tls.crt`, `tls.key` and `ca.crt` of the TLS Secret cert-manager issues for a
/// Certificate, as text, for a process that reads them from files: waits up to `within` for
/// cert-manager to write it.
pub async fn tls_files(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    within: Duration,
) -> Result<BTreeMap<String, String>, RouteError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let issued = tokio::time::timeout(within, async {
        loop {
            match secrets.get_opt(name).await {
                Ok(Some(secret)) if secret.data.as_ref().is_some_and(|d| d.contains_key("tls.crt")) => {
                    return Ok(secret);
                }
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await
    .map_err(|_| {
        RouteError::Invalid(format!(
            "cert-manager did not issue the Secret {namespace}/{name} within {within:?}"
        ))
    })?
    .map_err(api_err(format!("reading Secret {namespace}/{name}")))?;
    let mut out = BTreeMap::new();
    for (k, v) in issued.data.unwrap_or_default() {
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

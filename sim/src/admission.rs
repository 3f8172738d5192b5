//! Admission webhooks: the simulator calls the webhooks of its Mutating/Validating
//! WebhookConfiguration objects over HTTPS with a real AdmissionReview v1, trusting the
//! configuration's `caBundle`, applies JSON patches from mutating webhooks, and rejects the way
//! kube-apiserver does (`admission webhook "<name>" denied the request: <message>`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::resources::ResourceDef;
use crate::selectors::LabelSelector;
use crate::store::World;

/// Where `service` references of webhook configurations point: `(namespace, name)` → address.
#[derive(Debug, Default)]
pub struct Services(Mutex<HashMap<(String, String), SocketAddr>>);

impl Services {
    pub fn register(&self, ns: &str, name: &str, addr: SocketAddr) {
        if let Ok(mut m) = self.0.lock() {
            m.insert((ns.into(), name.into()), addr);
        }
    }
    fn get(&self, ns: &str, name: &str) -> Option<SocketAddr> {
        self.0.lock().ok()?.get(&(ns.to_string(), name.to_string())).copied()
    }
}

/// One admission request, before it is sent.
pub struct Attributes<'a> {
    pub def: &'a ResourceDef,
    pub subresource: Option<&'a str>,
    pub operation: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub object: Option<Value>,
    pub old_object: Option<Value>,
}

#[derive(Clone, Debug)]
struct Hook {
    name: String,
    config: Value,
    mutating: bool,
}

fn rule_matches(rule: &Value, a: &Attributes) -> bool {
    let list = |k: &str| -> Vec<String> {
        rule.get(k)
            .and_then(Value::as_array)
            .map(|x| x.iter().filter_map(|v| v.as_str().map(String::from)).collect())
            .unwrap_or_default()
    };
    let any = |l: &[String], v: &str| l.iter().any(|x| x == "*" || x == v);
    let res = match a.subresource {
        Some(s) => format!("{}/{s}", a.def.plural),
        None => a.def.plural.clone(),
    };
    let res_ok = list("resources").iter().any(|r| {
        r == &res || r == "*/*" || (r == "*" && a.subresource.is_none()) || r.strip_prefix("*/") == a.subresource
    });
    let scope = rule.get("scope").and_then(Value::as_str).unwrap_or("*");
    let scope_ok = scope == "*" || (scope == "Namespaced") == a.def.namespaced;
    any(&list("apiGroups"), &a.def.group)
        && any(&list("apiVersions"), &a.def.version)
        && any(&list("operations"), a.operation)
        && res_ok
        && scope_ok
}

fn hooks(world: &World, a: &Attributes) -> Vec<Hook> {
    let mut out = Vec::new();
    for (id, mutating) in [
        ("admissionregistration.k8s.io/mutatingwebhookconfigurations", true),
        ("admissionregistration.k8s.io/validatingwebhookconfigurations", false),
    ] {
        let Ok(def) = world.def(id) else { continue };
        for cfg in world.list(&def, None) {
            for wh in cfg.get("webhooks").and_then(Value::as_array).into_iter().flatten() {
                let rules = wh.get("rules").and_then(Value::as_array).cloned().unwrap_or_default();
                if !rules.iter().any(|r| rule_matches(r, a)) {
                    continue;
                }
                if let Some(sel) = wh.get("objectSelector")
                    && let Ok(sel) = LabelSelector::from_object(sel)
                {
                    let obj = a.object.as_ref().or(a.old_object.as_ref());
                    if !obj.is_some_and(|o| sel.matches(o)) {
                        continue;
                    }
                }
                out.push(Hook {
                    name: wh.get("name").and_then(Value::as_str).unwrap_or_default().to_string(),
                    config: wh.clone(),
                    mutating,
                });
            }
        }
    }
    out
}

tokio::task_local! {
    /// The warnings of the request being served (the webhooks', and its custom resource's unknown
    /// fields): the server sends them as `Warning: 299 - "<text>"` headers, as kube-apiserver
    /// does, and kubectl prints them.
    pub static WARNINGS: std::cell::RefCell<Vec<String>>;
}

/// Adds warnings to the current request's [`WARNINGS`] (none outside a request).
pub fn warn(texts: impl IntoIterator<Item = String>) {
    let _ = WARNINGS.try_with(|w| w.borrow_mut().extend(texts));
}

/// Run the admission chain. Returns the (possibly mutated) object. The webhooks' warnings go to
/// [`WARNINGS`] when the request is served within it.
pub async fn admit(
    world: &Mutex<World>,
    services: &Services,
    mut a: Attributes<'_>,
    uid: String,
) -> Result<Option<Value>, ApiError> {
    if a.def.group == "admissionregistration.k8s.io" {
        return Ok(a.object);
    }
    let list = match world.lock() {
        Ok(w) => hooks(&w, &a),
        Err(_) => return Err(ApiError::internal("simulator state poisoned")),
    };
    for hook in list
        .iter()
        .filter(|h| h.mutating)
        .chain(list.iter().filter(|h| !h.mutating))
    {
        let review = review(&a, &uid);
        let fail = hook.config.get("failurePolicy").and_then(Value::as_str) != Some("Ignore");
        let answer = match call(&hook.config, services, &review).await {
            Ok(v) => v,
            Err(e) if fail => {
                return Err(ApiError::internal(format!(
                    "failed calling webhook \"{}\": {e}",
                    hook.name
                )));
            }
            Err(_) => continue,
        };
        let resp = &answer["response"];
        if let Some(warnings) = resp.get("warnings").and_then(Value::as_array) {
            warn(warnings.iter().filter_map(Value::as_str).map(str::to_string));
        }
        if resp.get("allowed").and_then(Value::as_bool) != Some(true) {
            return Err(denied(&hook.name, resp.get("status")));
        }
        if hook.mutating
            && let Some(p) = resp.get("patch").and_then(Value::as_str)
            && let Some(obj) = a.object.as_mut()
        {
            let bytes = B64.decode(p).map_err(|e| {
                ApiError::internal(format!(
                    "webhook \"{}\" returned a patch that is not base64: {e}",
                    hook.name
                ))
            })?;
            let patch: json_patch::Patch = serde_json::from_slice(&bytes).map_err(|e| {
                ApiError::internal(format!("webhook \"{}\" returned an invalid JSON patch: {e}", hook.name))
            })?;
            json_patch::patch(obj, &patch).map_err(|e| {
                ApiError::internal(format!("failed to apply the patch of webhook \"{}\": {e}", hook.name))
            })?;
        }
    }
    Ok(a.object)
}

/// As kube-apiserver's `ToStatusErr`.
fn denied(name: &str, status: Option<&Value>) -> ApiError {
    let status = status.cloned().unwrap_or_else(|| json!({}));
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .filter(|c| *c >= 400)
        .unwrap_or(400) as u16;
    let message = status.get("message").and_then(Value::as_str).filter(|m| !m.is_empty());
    let reason = status.get("reason").and_then(Value::as_str).filter(|m| !m.is_empty());
    let denied_by = format!("admission webhook \"{name}\" denied the request");
    let text = match (message, reason) {
        (Some(m), _) => format!("{denied_by}: {m}"),
        (None, Some(r)) => format!("{denied_by}: {r}"),
        _ => format!("{denied_by} without explanation"),
    };
    let mut e = ApiError::new(code, reason.unwrap_or(""), text);
    e.details = status.get("details").cloned();
    e
}

fn review(a: &Attributes, uid: &str) -> Value {
    let gvk = json!({"group": a.def.group, "version": a.def.version, "kind": a.def.kind});
    let gvr = json!({"group": a.def.group, "version": a.def.version, "resource": a.def.plural});
    let mut req = json!({
        "uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": a.name, "operation": a.operation,
        "userInfo": {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]},
        "object": a.object, "oldObject": a.old_object, "dryRun": false,
        "options": match a.operation {
            "CREATE" => json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}),
            "UPDATE" => json!({"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}),
            _ => json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}),
        },
    });
    if a.def.namespaced {
        req["namespace"] = json!(a.namespace);
    }
    if let Some(s) = a.subresource {
        req["subResource"] = json!(s);
        req["requestSubResource"] = json!(s);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

async fn call(webhook: &Value, services: &Services, review: &Value) -> Result<Value, String> {
    let cc = &webhook["clientConfig"];
    let ca = cc.get("caBundle").and_then(Value::as_str).unwrap_or_default();
    let ca = B64
        .decode(ca.trim())
        .map_err(|e| format!("caBundle is not base64: {e}"))?;
    let (addr, host, path) = if let Some(svc) = cc.get("service") {
        let ns = svc.get("namespace").and_then(Value::as_str).unwrap_or_default();
        let name = svc.get("name").and_then(Value::as_str).unwrap_or_default();
        let path = svc.get("path").and_then(Value::as_str).unwrap_or("/").to_string();
        let addr = services
            .get(ns, name)
            .ok_or_else(|| format!("service \"{ns}/{name}\" has no registered address in the simulator"))?;
        // A registered service address carries its own port; the service's `port` is not used.
        (addr.to_string(), format!("{name}.{ns}.svc"), path)
    } else if let Some(url) = cc.get("url").and_then(Value::as_str) {
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| format!("webhook url {url:?} is not https"))?;
        let (hostport, path) = rest
            .split_once('/')
            .map(|(h, p)| (h, format!("/{p}")))
            .unwrap_or((rest, "/".into()));
        let host = hostport.rsplit_once(':').map(|(h, _)| h).unwrap_or(hostport);
        let addr = if hostport.contains(':') {
            hostport.to_string()
        } else {
            format!("{hostport}:443")
        };
        (addr, host.trim_matches(['[', ']']).to_string(), path)
    } else {
        return Err("webhook clientConfig has neither service nor url".into());
    };
    let timeout = Duration::from_secs(webhook.get("timeoutSeconds").and_then(Value::as_u64).unwrap_or(10));
    let url = format!("https://{host}{path}");
    tokio::time::timeout(timeout, post(&addr, &host, &path, &ca, review))
        .await
        .map_err(|_| format!("failed to call webhook: Post \"{url}\": context deadline exceeded"))?
        .map_err(|e| format!("failed to call webhook: Post \"{url}\": {e}"))
}

async fn post(addr: &str, host: &str, path: &str, ca_pem: &[u8], review: &Value) -> Result<Value, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        let cert = cert.map_err(|e| format!("caBundle is not PEM: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("caBundle certificate rejected: {e}"))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let server_name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let body = serde_json::to_vec(review).map_err(|e| e.to_string())?;
    let req = hyper::Request::post(path)
        .header("host", host)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let bytes = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    if !status.is_success() {
        return Err(format!("the server responded with status {status}"));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("the response is not an AdmissionReview: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_reads_as_kube_apiserver_words_it() {
        let e = denied(
            "validate.captf.io",
            Some(&json!({"code": 422, "message": "spec.module.source: Required value"})),
        );
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "admission webhook \"validate.captf.io\" denied the request: spec.module.source: Required value"
        );
        let e = denied("v", None);
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "admission webhook \"v\" denied the request without explanation"
        );
    }
}

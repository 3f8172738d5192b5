//! The loopback proxy through which Terraform's kubernetes backend reaches the API server.
//!
//! Each object's runner pods run under the object's own ServiceAccount, whose Role names the
//! object's state Secret, outputs Secret and lock Lease one by one (`resourceNames`), so the
//! runner of one object can neither read nor change another's. The backend lists Secrets by
//! label when it initialises (its workspace listing), and RBAC cannot narrow a `list` by name
//! unless the request selects one name with a `metadata.name=` field selector. This proxy adds
//! exactly that selector to the backend's Secret listings, naming the state Secret; the
//! backend's other requests pass through unchanged, with the pod's credentials. It grants
//! nothing: the API server's RBAC still decides every request, and the answer to the narrowed
//! listing is what the backend would have found anyway (its own state Secret, the only one
//! with its labels).
//!
//! It speaks for the backend only: a request for anything but listing or creating the
//! namespace's Secrets, creating a Lease, the state Secret and the lock Lease is refused with
//! 403 before it leaves, so whatever reaches its loopback port (another process that found the
//! port, a module's own provider pointed at it) cannot use the pod's token for anything else.
//!
//! It also checks whose state it hands the backend: the controller binds the state Secret and
//! the lock Lease to their object by the annotation `captf.io/owner-uid` (`captf_shared::binding`).
//! A read of either that is bound to another object than the run's (`CAPTF_OWNER_UID`) is
//! answered with 409 Conflict instead, so Terraform never plans, applies or destroys against
//! another object's state, nor takes or breaks its lock.
//!
//! The client is built on the first request, so a run that never reaches the backend (a fake
//! binary in tests, a local run) needs no cluster.

use std::convert::Infallible;
use std::net::SocketAddr;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::OnceCell;

/// The largest body forwarded either way: a state Secret is at most 1 MiB of data, which base64
/// and JSON make about 1.4 MB; anything beyond this is refused, not buffered.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// What the proxy narrows: the Secret listings of `namespace` to the Secret `state_secret`;
/// and whose state it passes: with an `owner_uid`, reads of the state Secret and of the lock
/// Lease `lock_lease` bound to another object are refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Narrowing {
    pub namespace: String,
    pub state_secret: String,
    pub lock_lease: String,
    pub owner_uid: Option<String>,
}

/// Why a request is refused before it reaches the API server.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("a Secret listing with its own field selector cannot be narrowed to the state Secret")]
    OwnFieldSelector,
    #[error(
        "{method} {path} is not a request of the state backend: this proxy forwards only \
         listings and creates of Secrets and creates of Leases in {namespace}, and requests for \
         the state Secret {state_secret} and the lock Lease {lock_lease}"
    )]
    OutOfScope {
        method: String,
        path: String,
        namespace: String,
        state_secret: String,
        lock_lease: String,
    },
}

impl Narrowing {
    /// The path and query to send for a request of `method` to `path_and_query`: a request for
    /// anything but the backend's own objects is refused (see [`Self::in_scope`]); a listing of
    /// the namespace's Secrets gets `fieldSelector=metadata.name=<state Secret>`; the rest is
    /// unchanged.
    pub fn narrow(&self, method: &str, path_and_query: &str) -> Result<String, Refusal> {
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        if !self.in_scope(method, path) {
            return Err(Refusal::OutOfScope {
                method: method.chars().take(16).collect(),
                path: path.chars().take(256).collect(),
                namespace: self.namespace.clone(),
                state_secret: self.state_secret.clone(),
                lock_lease: self.lock_lease.clone(),
            });
        }
        if method != "GET" || path.trim_end_matches('/') != self.secrets_path() {
            return Ok(path_and_query.to_string());
        }
        let selector = format!("fieldSelector=metadata.name%3D{}", self.state_secret);
        match query.filter(|q| !q.is_empty()) {
            None => Ok(format!("{path}?{selector}")),
            Some(q)
                if q.split('&')
                    .any(|kv| kv == "fieldSelector" || kv.starts_with("fieldSelector=")) =>
            {
                Err(Refusal::OwnFieldSelector)
            }
            Some(q) => Ok(format!("{path}?{q}&{selector}")),
        }
    }
}

impl Narrowing {
    /// The namespace's Secrets collection.
    fn secrets_path(&self) -> String {
        format!("/api/v1/namespaces/{}/secrets", self.namespace)
    }

    /// The namespace's Leases collection.
    fn leases_path(&self) -> String {
        format!("/apis/coordination.k8s.io/v1/namespaces/{}/leases", self.namespace)
    }

    /// Is a request of `method` to `path` (no query) one the state backend makes: listing the
    /// namespace's Secrets (its workspaces) or creating one (the first write of its state),
    /// creating a Lease (taking the lock), and any request for the state Secret or the lock
    /// Lease by name (PURE).
    pub fn in_scope(&self, method: &str, path: &str) -> bool {
        let path = path.trim_end_matches('/');
        let (secrets, leases) = (self.secrets_path(), self.leases_path());
        let named = |collection: &str, name: &str| {
            path.strip_prefix(collection)
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|rest| rest == name)
        };
        (path == secrets && matches!(method, "GET" | "POST"))
            || (path == leases && method == "POST")
            || named(&secrets, &self.state_secret)
            || named(&leases, &self.lock_lease)
    }

    /// Why the answer `body` to a successful `GET` of `path` (no query) must not reach the
    /// backend: the state Secret or lock Lease it holds (alone, or in a listing) is bound to
    /// another object. `None`: pass it (PURE).
    pub fn foreign_state(&self, method: &str, path: &str, body: &[u8]) -> Option<String> {
        let own = self.owner_uid.as_deref()?;
        let path = path.split('?').next().unwrap_or(path).trim_end_matches('/');
        let secrets = self.secrets_path();
        let state = format!("{secrets}/{}", self.state_secret);
        let lock = format!("{}/{}", self.leases_path(), self.lock_lease);
        if method != "GET" || ![secrets.as_str(), state.as_str(), lock.as_str()].contains(&path) {
            return None;
        }
        let doc: serde_json::Value = serde_json::from_slice(body).ok()?;
        let items: Vec<&serde_json::Value> = match doc.get("items").and_then(|i| i.as_array()) {
            Some(items) => items.iter().collect(),
            None => vec![&doc],
        };
        items.into_iter().find_map(|o| {
            let m = o.get("metadata")?;
            let bound = m
                .get("annotations")?
                .get(captf_shared::keys::ANNOTATION_OWNER_UID)?
                .as_str()?;
            (bound != own).then(|| {
                format!(
                    "{} {}/{} is bound to another object ({} {bound}), not to this run's ({own})",
                    o.get("kind").and_then(|k| k.as_str()).unwrap_or("object"),
                    self.namespace,
                    m.get("name").and_then(|n| n.as_str()).unwrap_or("?"),
                    captf_shared::keys::ANNOTATION_OWNER_UID,
                )
            })
        })
    }
}

/// A running proxy: the address Terraform's backend is pointed at (`http://<addr>`).
pub struct StateProxy {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl StateProxy {
    /// The backend's `host`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for StateProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Shared {
    narrowing: Narrowing,
    client: OnceCell<Result<kube::Client, String>>,
}

impl Shared {
    /// The pod's own configuration (in-cluster service-account token and CA, else a kubeconfig
    /// for a local run), inferred on the first request.
    async fn client(&self) -> Result<kube::Client, String> {
        self.client
            .get_or_init(|| async {
                let config = kube::Config::infer().await.map_err(|e| e.to_string())?;
                kube::Client::try_from(config).map_err(|e| e.to_string())
            })
            .await
            .clone()
    }
}

/// Start the proxy on a loopback port of its own.
pub async fn start(narrowing: Narrowing) -> std::io::Result<StateProxy> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let shared = std::sync::Arc::new(Shared {
        narrowing,
        client: OnceCell::new(),
    });
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let shared = shared.clone();
                    async move { Ok::<_, Infallible>(forward(&shared, req).await) }
                });
                // A connection error only ends that connection; the backend retries or fails
                // its step, which the runner reports.
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(StateProxy { addr, task })
}

type ProxyBody = Full<Bytes>;

fn text(status: StatusCode, message: String) -> Response<ProxyBody> {
    // The Kubernetes Status shape, so client-go reports the message.
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": format!("captf-runner state proxy: {message}"), "code": status.as_u16(),
    })
    .to_string();
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

async fn forward(shared: &Shared, req: Request<Incoming>) -> Response<ProxyBody> {
    let path_and_query = req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let (method, path) = (req.method().as_str().to_string(), req.uri().path().to_string());
    let target = match shared.narrowing.narrow(req.method().as_str(), path_and_query) {
        Ok(t) => t,
        Err(e @ Refusal::OutOfScope { .. }) => return text(StatusCode::FORBIDDEN, e.to_string()),
        Err(e) => return text(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let client = match shared.client().await {
        Ok(c) => c,
        Err(e) => return text(StatusCode::BAD_GATEWAY, format!("no API server configuration: {e}")),
    };
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return text(StatusCode::PAYLOAD_TOO_LARGE, format!("request body refused: {e}")),
    };
    let mut builder = hyper::Request::builder().method(parts.method).uri(target);
    // The client adds the credentials and the server's address; only the content headers pass.
    for name in [hyper::header::CONTENT_TYPE, hyper::header::ACCEPT] {
        if let Some(v) = parts.headers.get(&name) {
            builder = builder.header(name, v);
        }
    }
    let upstream = match builder.body(kube::client::Body::from(body.to_vec())) {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("request refused: {e}")),
    };
    let resp = match client.send(upstream).await {
        Ok(resp) => resp,
        Err(e) => return text(StatusCode::BAD_GATEWAY, format!("API server unreachable: {e}")),
    };
    let (mut parts, body) = resp.into_parts();
    // Hop-by-hop framing is the server's own; the length comes from the collected body.
    for h in [
        hyper::header::TRANSFER_ENCODING,
        hyper::header::CONNECTION,
        hyper::header::CONTENT_LENGTH,
    ] {
        parts.headers.remove(h);
    }
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(b) => {
            let b = b.to_bytes();
            if parts.status.is_success()
                && let Some(why) = shared.narrowing.foreign_state(&method, &path, &b)
            {
                return text(StatusCode::CONFLICT, why);
            }
            Response::from_parts(parts, Full::new(b))
        }
        Err(e) => text(StatusCode::BAD_GATEWAY, format!("answer refused: {e}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn n() -> Narrowing {
        Narrowing {
            namespace: "team-a".into(),
            state_secret: "tfstate-default-prod-eu-tc".into(),
            lock_lease: "lock-tfstate-default-prod-eu-tc".into(),
            owner_uid: Some("uid-victim".into()),
        }
    }

    fn bound(kind: &str, name: &str, uid: Option<&str>) -> serde_json::Value {
        let mut o = serde_json::json!({"kind": kind, "metadata": {"name": name, "annotations": {}}});
        if let Some(u) = uid {
            o["metadata"]["annotations"]["captf.io/owner-uid"] = u.into();
        }
        o
    }

    #[test]
    fn a_state_secret_or_lock_bound_to_another_object_is_refused() {
        let secret = "/api/v1/namespaces/team-a/secrets/tfstate-default-prod-eu-tc";
        let lease = "/apis/coordination.k8s.io/v1/namespaces/team-a/leases/lock-tfstate-default-prod-eu-tc";
        let theirs = bound("Secret", "tfstate-default-prod-eu-tc", Some("uid-attacker")).to_string();
        let why = n().foreign_state("GET", secret, theirs.as_bytes()).unwrap();
        assert!(why.contains("uid-attacker") && why.contains("uid-victim"), "{why}");
        let lock = bound("Lease", "lock-tfstate-default-prod-eu-tc", Some("uid-attacker")).to_string();
        assert!(n().foreign_state("GET", lease, lock.as_bytes()).is_some());
        let listing = serde_json::json!({"kind": "SecretList", "items": [bound("Secret", "tfstate-default-prod-eu-tc", Some("uid-attacker"))]});
        assert!(
            n().foreign_state(
                "GET",
                "/api/v1/namespaces/team-a/secrets",
                listing.to_string().as_bytes()
            )
            .is_some()
        );
    }

    #[test]
    fn the_runs_own_state_an_unbound_one_and_a_run_by_hand_pass() {
        let secret = "/api/v1/namespaces/team-a/secrets/tfstate-default-prod-eu-tc";
        for uid in [Some("uid-victim"), None] {
            let body = bound("Secret", "tfstate-default-prod-eu-tc", uid).to_string();
            assert_eq!(n().foreign_state("GET", secret, body.as_bytes()), None);
        }
        let theirs = bound("Secret", "tfstate-default-prod-eu-tc", Some("uid-attacker")).to_string();
        let by_hand = Narrowing { owner_uid: None, ..n() };
        assert_eq!(by_hand.foreign_state("GET", secret, theirs.as_bytes()), None);
        // Only the run's own state objects are judged.
        assert_eq!(
            n().foreign_state("GET", "/api/v1/namespaces/team-a/secrets/other", theirs.as_bytes()),
            None
        );
    }

    #[test]
    fn the_backends_secret_listing_is_narrowed_to_the_state_secret() {
        assert_eq!(
            n().narrow(
                "GET",
                "/api/v1/namespaces/team-a/secrets?labelSelector=tfstate%3Dtrue%2CtfstateSecretSuffix%3Dprod-eu-tc"
            )
            .unwrap(),
            "/api/v1/namespaces/team-a/secrets?labelSelector=tfstate%3Dtrue%2CtfstateSecretSuffix%3Dprod-eu-tc\
             &fieldSelector=metadata.name%3Dtfstate-default-prod-eu-tc"
        );
        assert_eq!(
            n().narrow("GET", "/api/v1/namespaces/team-a/secrets").unwrap(),
            "/api/v1/namespaces/team-a/secrets?fieldSelector=metadata.name%3Dtfstate-default-prod-eu-tc"
        );
    }

    #[test]
    fn a_listing_with_its_own_field_selector_is_refused() {
        assert_eq!(
            n().narrow(
                "GET",
                "/api/v1/namespaces/team-a/secrets?fieldSelector=metadata.name%3Dother"
            ),
            Err(Refusal::OwnFieldSelector)
        );
    }

    #[test]
    fn the_backends_requests_for_its_own_objects_pass_unchanged() {
        for (method, p) in [
            ("GET", "/api/v1/namespaces/team-a/secrets/tfstate-default-prod-eu-tc"),
            ("PUT", "/api/v1/namespaces/team-a/secrets/tfstate-default-prod-eu-tc"),
            ("DELETE", "/api/v1/namespaces/team-a/secrets/tfstate-default-prod-eu-tc"),
            ("POST", "/api/v1/namespaces/team-a/secrets"),
            ("POST", "/apis/coordination.k8s.io/v1/namespaces/team-a/leases"),
            (
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/team-a/leases/lock-tfstate-default-prod-eu-tc",
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/team-a/leases/lock-tfstate-default-prod-eu-tc",
            ),
            (
                "DELETE",
                "/apis/coordination.k8s.io/v1/namespaces/team-a/leases/lock-tfstate-default-prod-eu-tc/",
            ),
        ] {
            assert_eq!(n().narrow(method, p).unwrap(), p, "{method} {p}");
        }
    }

    #[test]
    fn a_request_for_anything_but_the_backends_own_objects_is_refused() {
        for (method, p) in [
            // Another process that reached the loopback port: a controller's leader Lease.
            (
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/captf-system/leases/captf-controller-leader",
            ),
            ("GET", "/api/v1/namespaces/team-b/secrets"),
            ("GET", "/api/v1/secrets"),
            ("GET", "/api/v1/namespaces/team-a/secrets/outputs-default-prod-eu-tc"),
            ("GET", "/api/v1/namespaces/team-a/secrets/tfstate-default-prod-eu-tc-x"),
            (
                "GET",
                "/api/v1/namespaces/team-a/secrets/tfstate-default-prod-eu-tc/extra",
            ),
            ("GET", "/apis/coordination.k8s.io/v1/namespaces/team-a/leases/other"),
            ("GET", "/apis/coordination.k8s.io/v1/namespaces/team-a/leases"),
            ("DELETE", "/api/v1/namespaces/team-a/secrets"),
            ("GET", "/api/v1/namespaces/team-a/pods"),
            ("GET", "/version"),
            ("GET", "/"),
        ] {
            let err = n().narrow(method, p).unwrap_err();
            assert!(matches!(err, Refusal::OutOfScope { .. }), "{method} {p}: {err}");
        }
        let why = n()
            .narrow(
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/captf-system/leases/x?watch=1",
            )
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("GET /apis/coordination.k8s.io/v1/namespaces/captf-system/leases/x is not")
                && why.contains("lock-tfstate-default-prod-eu-tc"),
            "{why}"
        );
    }

    proptest! {
        /// Whatever path and method arrive, what leaves names only the backend's own objects:
        /// the namespace's Secrets or Leases collections or the two objects by name.
        #[test]
        fn only_the_backends_own_objects_are_forwarded(
            method in prop::sample::select(vec!["GET", "POST", "PUT", "PATCH", "DELETE"]),
            segments in prop::collection::vec(prop::sample::select(vec![
                "api", "v1", "apis", "coordination.k8s.io", "namespaces", "team-a", "team-b",
                "secrets", "leases", "tfstate-default-prod-eu-tc", "lock-tfstate-default-prod-eu-tc",
                "..", "",
            ]), 0..8),
        ) {
            let path = format!("/{}", segments.join("/"));
            if let Ok(out) = n().narrow(method, &path) {
                let out = out.split('?').next().unwrap_or_default().trim_end_matches('/').to_string();
                prop_assert!([
                    "/api/v1/namespaces/team-a/secrets",
                    "/api/v1/namespaces/team-a/secrets/tfstate-default-prod-eu-tc",
                    "/apis/coordination.k8s.io/v1/namespaces/team-a/leases",
                    "/apis/coordination.k8s.io/v1/namespaces/team-a/leases/lock-tfstate-default-prod-eu-tc",
                ].contains(&out.as_str()), "{} {} left as {}", method, path, out);
            }
        }

        /// Whatever query the backend sends, a Secret listing of the namespace always leaves
        /// with exactly one field selector, naming the state Secret.
        #[test]
        fn every_secret_listing_leaves_with_the_state_secrets_name(q in "[a-zA-Z0-9%=&.-]{0,40}") {
            let p = format!("/api/v1/namespaces/team-a/secrets?{q}");
            if let Ok(out) = n().narrow("GET", &p) {
                let selectors: Vec<_> = out.split(['?', '&']).filter(|kv| *kv == "fieldSelector" || kv.starts_with("fieldSelector="))
                    .collect();
                prop_assert_eq!(selectors, vec!["fieldSelector=metadata.name%3Dtfstate-default-prod-eu-tc"]);
            }
        }
    }
}

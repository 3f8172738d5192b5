//! Admission: the simulator calls webhooks over TLS (trusting the configuration's caBundle),
//! applies mutating patches and rejects with the webhook's message.
#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use captf_sim::Sim;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::ApiResource;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};

struct Webhook {
    addr: SocketAddr,
    ca_pem: String,
    calls: Arc<AtomicUsize>,
}

async fn review(req: Request<Incoming>, calls: Arc<AtomicUsize>) -> Result<Response<Full<Bytes>>, Infallible> {
    calls.fetch_add(1, Ordering::SeqCst);
    let path = req.uri().path().to_string();
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let review: Value = serde_json::from_slice(&body).unwrap();
    let request = &review["request"];
    let uid = request["uid"].clone();
    let obj = &request["object"];
    let response = match path.as_str() {
        "/mutate" => {
            // The second op adds a field the CRD's schema does not declare.
            let patch = json!([
                {"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}},
                {"op": "add", "path": "/spec/addedByTheWebhook", "value": true},
            ]);
            json!({"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": B64.encode(patch.to_string())})
        }
        _ if request["operation"] == "DELETE" => json!({"uid": uid, "allowed": true}),
        _ if obj.pointer("/spec/module/source").and_then(Value::as_str) == Some("warn") => json!({
            "uid": uid, "allowed": true, "warnings": ["a \"quoted\" warning", "another"]
        }),
        _ if obj.pointer("/spec/module/source").and_then(Value::as_str) == Some("bad") => json!({
            "uid": uid, "allowed": false,
            "status": {"code": 422, "reason": "Invalid", "message": "spec.module.source: Invalid value: \"bad\": not a module source"}
        }),
        _ => json!({"uid": uid, "allowed": true}),
    };
    let out = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response});
    Ok(Response::new(Full::new(Bytes::from(out.to_string()))))
}

/// A TLS webhook server with a certificate for `captf-webhook.captf-system.svc`.
async fn webhook() -> Webhook {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["captf-webhook.captf-system.svc".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone(), ca.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let acceptor = acceptor.clone();
            let c = c.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let svc = hyper::service::service_fn(move |req| review(req, c.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    Webhook {
        addr,
        ca_pem: ca.pem(),
        calls,
    }
}

fn configs(ca_pem: &str, failure_policy: &str) -> (Value, Value) {
    let ca = B64.encode(ca_pem);
    let rules = json!([{"apiGroups": ["infrastructure.cluster.x-k8s.io"], "apiVersions": ["v1beta1"],
                        "operations": ["CREATE", "UPDATE"], "resources": ["terraformclusters"], "scope": "Namespaced"}]);
    let hook = |name: &str, path: &str| {
        json!({"name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": failure_policy,
               "timeoutSeconds": 5, "rules": rules,
               "clientConfig": {"caBundle": ca, "service": {"namespace": "captf-system", "name": "captf-webhook", "path": path, "port": 443}}})
    };
    (
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
               "metadata": {"name": "captf-mutating"}, "webhooks": [hook("default.captf.io", "/mutate")]}),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
               "metadata": {"name": "captf-validating"}, "webhooks": [hook("validate.captf.io", "/validate")]}),
    )
}

fn tc(name: &str, source: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
        "metadata": {"name": name}, "spec": {"module": {"source": source}},
    }))
    .unwrap()
}

fn tcs(sim: &Sim) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("infrastructure.cluster.x-k8s.io", "v1beta1", "TerraformCluster"),
        "terraformclusters",
    );
    Api::default_namespaced_with(sim.client().unwrap(), &ar)
}

async fn install(sim: &Sim, mutating: Value, validating: Value) {
    let client = sim.client().unwrap();
    let m: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
        )),
    );
    let v: Api<DynamicObject> = Api::all_with(
        client,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
        )),
    );
    m.create(&PostParams::default(), &serde_json::from_value(mutating).unwrap())
        .await
        .unwrap();
    v.create(&PostParams::default(), &serde_json::from_value(validating).unwrap())
        .await
        .unwrap();
}

#[tokio::test]
async fn webhooks_are_called_over_tls_mutate_and_reject_with_the_webhooks_message() {
    let wh = webhook().await;
    let sim = Sim::start().await.unwrap();
    sim.register_service("captf-system", "captf-webhook", wh.addr);
    let (m, v) = configs(&wh.ca_pem, "Fail");
    install(&sim, m, v).await;
    let api = tcs(&sim);

    let made = api
        .create(&PostParams::default(), &tc("good", "git::https://example.com/m.git"))
        .await
        .unwrap();
    assert_eq!(
        made.metadata.labels.unwrap()["mutated"],
        "yes",
        "the mutating webhook's JSON patch was applied"
    );
    // What it added that the schema does not declare is dropped, as kube-apiserver drops it (no
    // warning: `a_webhooks_warnings_reach_the_client_…` counts them).
    assert!(made.data["spec"].get("addedByTheWebhook").is_none(), "{:?}", made.data);
    let stored = sim
        .get("infrastructure.cluster.x-k8s.io/terraformclusters", "default", "good")
        .unwrap();
    assert!(stored["spec"].get("addedByTheWebhook").is_none(), "{stored}");
    assert_eq!(wh.calls.load(Ordering::SeqCst), 2);

    let err = match api
        .create(&PostParams::default(), &tc("broken", "bad"))
        .await
        .unwrap_err()
    {
        kube::Error::Api(s) => s,
        other => panic!("{other}"),
    };
    assert_eq!(err.code, 422);
    assert_eq!(
        err.message,
        "admission webhook \"validate.captf.io\" denied the request: spec.module.source: Invalid value: \"bad\": not a module source"
    );
    assert!(api.get_opt("broken").await.unwrap().is_none());

    // Updates go through admission too; status writes do not match a `terraformclusters` rule.
    let e = api
        .patch(
            "good",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"module": {"source": "bad"}}})),
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("denied the request"), "{e}");
    let before = wh.calls.load(Ordering::SeqCst);
    api.patch_status(
        "good",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"ready": true}})),
    )
    .await
    .unwrap();
    assert_eq!(wh.calls.load(Ordering::SeqCst), before);
    api.delete("good", &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn a_webhooks_warnings_reach_the_client_as_warning_headers_as_kube_apiserver_sends_them() {
    let wh = webhook().await;
    let sim = Sim::start().await.unwrap();
    sim.register_service("captf-system", "captf-webhook", wh.addr);
    let (m, v) = configs(&wh.ca_pem, "Fail");
    install(&sim, m, v).await;
    let body = serde_json::to_vec(&tc("warned", "warn")).unwrap();
    let request =
        http::Request::post("/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/default/terraformclusters")
            .header("content-type", "application/json")
            .body(kube::client::Body::from(body))
            .unwrap();
    let response = sim.client().unwrap().send(request).await.unwrap();
    assert_eq!(response.status(), 201);
    let warnings: Vec<String> = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    assert_eq!(warnings, [r#"299 - "a \"quoted\" warning""#, r#"299 - "another""#]);
    // A request no webhook warns about has none.
    let response = sim
        .client()
        .unwrap()
        .send(
            http::Request::get("/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/default/terraformclusters")
                .body(kube::client::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(response.headers().get("warning").is_none());
}

#[tokio::test]
async fn an_unreachable_webhook_with_failure_policy_fail_rejects_and_ignore_admits() {
    let sim = Sim::start().await.unwrap();
    let wh = webhook().await;
    // No service registered: the call fails.
    let (m, v) = configs(&wh.ca_pem, "Fail");
    install(&sim, m, v).await;
    let err = match tcs(&sim)
        .create(&PostParams::default(), &tc("a", "ok"))
        .await
        .unwrap_err()
    {
        kube::Error::Api(s) => s,
        other => panic!("{other}"),
    };
    assert_eq!(err.code, 500);
    assert!(
        err.message.contains("failed calling webhook \"default.captf.io\""),
        "{}",
        err.message
    );

    let sim = Sim::start().await.unwrap();
    let (m, v) = configs(&wh.ca_pem, "Ignore");
    install(&sim, m, v).await;
    tcs(&sim).create(&PostParams::default(), &tc("a", "ok")).await.unwrap();
}

#[tokio::test]
async fn a_webhook_whose_certificate_is_not_signed_by_the_ca_bundle_is_not_trusted() {
    let sim = Sim::start().await.unwrap();
    let wh = webhook().await;
    let other = webhook().await;
    sim.register_service("captf-system", "captf-webhook", wh.addr);
    let (m, v) = configs(&other.ca_pem, "Fail");
    install(&sim, m, v).await;
    let e = tcs(&sim)
        .create(&PostParams::default(), &tc("a", "ok"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("failed calling webhook"), "{e}");
    assert_eq!(wh.calls.load(Ordering::SeqCst), 0);
}

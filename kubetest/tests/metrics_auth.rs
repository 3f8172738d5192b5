//! The controller's `/metrics` behind `--metrics-auth=kubernetes` on the real API server: the
//! shipped controller binary, under the chart's RBAC and admission policy as `helm template`
//! renders them (with a reader bound through `controller.metrics.readers`), authenticates each
//! scrape's bearer token with a TokenReview and authorizes it with a SubjectAccessReview for
//! `get` on `/metrics`. Without the binaries these tests fail under `CI` and skip elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use captf_chart_tests::{NAMESPACE, RBAC_KINDS, helm_template};
use captf_kubetest::{ControlPlane, Options, tools_or_skip};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use common::{TEST_READY_TIMEOUT, namespace};

/// Upper bound on any one wait; a test that reaches it fails.
const PATIENCE: Duration = Duration::from_secs(90);
/// The chart's controller account (release `captf`).
const CONTROLLER: &str = "captf-controller";
/// The account the chart binds to `captf-metrics-reader` (`controller.metrics.readers`).
const READER: (&str, &str) = ("monitoring", "prometheus");
/// An account with no binding to it.
const STRANGER: (&str, &str) = ("default", "stranger");

async fn wait_for<T, F, Fut>(what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    common::wait_within(what, PATIENCE, probe).await
}

/// Creates a rendered document as the admin.
async fn create(client: &kube::Client, doc: &Value) {
    let kind = doc["kind"].as_str().unwrap();
    let (plural, namespaced) = match kind {
        "ServiceAccount" => ("serviceaccounts", true),
        "Role" => ("roles", true),
        "RoleBinding" => ("rolebindings", true),
        "ClusterRole" => ("clusterroles", false),
        "ClusterRoleBinding" => ("clusterrolebindings", false),
        "ValidatingAdmissionPolicy" => ("validatingadmissionpolicies", false),
        "ValidatingAdmissionPolicyBinding" => ("validatingadmissionpolicybindings", false),
        other => panic!("no resource known for {other}"),
    };
    let api_version = doc["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(
            client.clone(),
            doc["metadata"]["namespace"].as_str().unwrap(),
            &resource,
        )
    } else {
        Api::all_with(client.clone(), &resource)
    };
    let object: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("{kind} {}: {e}", doc["metadata"]["name"]));
}

/// Whether the API server says `user` may do what `attributes` name (the RBAC caches have caught
/// up with new bindings).
async fn allowed(admin: &kube::Client, user: &str, resource: Option<ResourceAttributes>) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_string()),
            groups: Some(vec!["system:serviceaccounts".into(), "system:authenticated".into()]),
            non_resource_attributes: resource.is_none().then(|| NonResourceAttributes {
                path: Some("/metrics".into()),
                verb: Some("get".into()),
            }),
            resource_attributes: resource,
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await
        .ok()
        .and_then(|r| r.status)
        .is_some_and(|s| s.allowed)
}

fn free_port() -> u16 {
    captf_kubetest::ports::free_port_on(Ipv4Addr::LOCALHOST).unwrap()
}

/// `GET /metrics` with an optional `Authorization` header: the status code and the body.
async fn scrape(addr: SocketAddr, authorization: Option<&str>) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let header = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n{header}\r\n").as_bytes())
        .await?;
    let mut answer = Vec::new();
    stream.take(4 << 20).read_to_end(&mut answer).await?;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {text:?}")))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// With `--metrics-auth=kubernetes`, under the chart's RBAC: no token (or one the API server does
/// not accept) is 401, the token of an account without the metrics-reader binding is 403, and
/// the token of the account the chart binds to `<release>-metrics-reader` gets the metrics. The
/// admission policy on the controller's account lets its TokenReviews and SubjectAccessReviews
/// through, and no token reaches its log.
#[tokio::test]
async fn metrics_need_a_token_allowed_to_get_metrics_under_the_charts_rbac_on_the_real_api_server() {
    let Some(tools) = tools_or_skip() else { return };
    let mut opts = Options::new(tools);
    opts.ready_timeout = TEST_READY_TIMEOUT;
    let cp = ControlPlane::start(opts).await.unwrap();
    let admin = cp.admin_client().await.unwrap();

    let rendered = helm_template(&[
        "--set",
        "controller.metrics.auth=kubernetes",
        "--set",
        "controller.metrics.readers[0].kind=ServiceAccount",
        "--set",
        &format!("controller.metrics.readers[0].name={}", READER.1),
        "--set",
        &format!("controller.metrics.readers[0].namespace={}", READER.0),
    ])
    .unwrap();
    let controller = rendered.get("Deployment", CONTROLLER).unwrap();
    let args = captf_chart_tests::strings(&controller["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(args.iter().any(|a| a == "--metrics-auth=kubernetes"), "{args:?}");
    // Every RBAC document of the chart (both components' accounts, the controller's roles and
    // bindings, the metrics roles and the reader's binding) and the controller's admission policy.
    let mut kinds = RBAC_KINDS.to_vec();
    kinds.extend(["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]);
    let docs: Vec<&Value> = rendered
        .docs
        .iter()
        .filter(|d| kinds.contains(&d["kind"].as_str().unwrap_or_default()))
        .collect();
    for name in ["captf-metrics-auth", "captf-metrics-reader"] {
        for kind in ["ClusterRole", "ClusterRoleBinding"] {
            assert!(rendered.get(kind, name).is_some(), "the chart renders no {kind} {name}");
        }
    }
    // The release namespace, the reader's, and any other the chart binds the controller in.
    let mut namespaces = vec![NAMESPACE, READER.0];
    for ns in docs.iter().filter_map(|d| d["metadata"]["namespace"].as_str()) {
        if ns != "default" && !namespaces.contains(&ns) {
            namespaces.push(ns);
        }
    }
    for ns in namespaces {
        namespace(&admin, ns).await;
    }
    for doc in &docs {
        create(&admin, doc).await;
    }
    for (ns, name) in [READER, STRANGER] {
        create(
            &admin,
            &json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": name, "namespace": ns } }),
        )
        .await;
    }
    let user = |(ns, name): (&str, &str)| format!("system:serviceaccount:{ns}:{name}");
    // The API server's RBAC caches have the new bindings before the controller asks.
    wait_for("the reader may get /metrics", || {
        let admin = admin.clone();
        let reader = user(READER);
        async move { allowed(&admin, &reader, None).await.then_some(()) }
    })
    .await;
    wait_for("the controller may create TokenReviews", || {
        let admin = admin.clone();
        let controller = user((NAMESPACE, CONTROLLER));
        async move {
            let tokenreviews = ResourceAttributes {
                group: Some("authentication.k8s.io".into()),
                resource: Some("tokenreviews".into()),
                verb: Some("create".into()),
                ..Default::default()
            };
            allowed(&admin, &controller, Some(tokenreviews)).await.then_some(())
        }
    })
    .await;
    assert!(!allowed(&admin, &user(STRANGER), None).await);

    let kubeconfig = cp.service_account_kubeconfig(NAMESPACE, CONTROLLER).await.unwrap();
    let reader_token = cp.service_account_token(READER.0, READER.1).await.unwrap();
    let stranger_token = cp.service_account_token(STRANGER.0, STRANGER.1).await.unwrap();
    let log_path = cp.work_dir().join("captf-controller.log");
    let metrics = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let mut process = common::spawn_controller(
        &kubeconfig,
        &log_path,
        &[
            &format!("--namespace={NAMESPACE}"),
            &format!("--metrics-addr={metrics}"),
            "--metrics-auth=kubernetes",
            "--health-addr=127.0.0.1:0",
            "--log-format=text",
        ],
        // Debug: every refusal is logged (with its reason, never the token).
        &[
            ("POD_NAMESPACE", NAMESPACE),
            ("RUST_LOG", "info,captf_controller::runtime::metrics_auth=debug"),
        ],
    );
    let log_text = || std::fs::read_to_string(&log_path).unwrap_or_default();

    // No token: 401, before any review.
    let (status, body) = wait_for("the metrics port", || async move { scrape(metrics, None).await.ok() }).await;
    assert_eq!(status, 401, "{body}\n{}", log_text());
    assert!(body.contains("no bearer token"), "{body}");
    // A token the API server does not accept: 401.
    // The reader's token with the first character of its signature changed.
    let (signed, signature) = reader_token.rsplit_once('.').unwrap();
    let other = if signature.starts_with('A') { 'B' } else { 'A' };
    let forged = format!("{signed}.{other}{}", &signature[1..]);
    let (status, body) = scrape(metrics, Some(&format!("Bearer {forged}"))).await.unwrap();
    assert_eq!(status, 401, "{body}\n{}", log_text());
    assert!(body.contains("did not accept"), "{body}");
    // A valid token of an account without the metrics-reader binding: 403, naming the user.
    let (status, body) = scrape(metrics, Some(&format!("Bearer {stranger_token}")))
        .await
        .unwrap();
    assert_eq!(status, 403, "{body}\n{}", log_text());
    assert!(body.contains(&user(STRANGER)), "{body}");
    // The account bound to the metrics-reader ClusterRole: the metrics.
    let (status, body) = scrape(metrics, Some(&format!("Bearer {reader_token}"))).await.unwrap();
    assert_eq!(status, 200, "{body}\n{}", log_text());
    assert!(body.contains("captf_leader") && body.contains("# EOF"), "{body}");

    assert!(
        process.try_wait().unwrap().is_none(),
        "the controller exited: {}",
        log_text()
    );
    process.kill().await.unwrap();
    let text = log_text();
    assert!(text.contains("refused a /metrics request"), "{text}");
    for token in [&reader_token, &stranger_token, &forged] {
        assert!(!text.contains(token.as_str()), "a token reached the log:\n{text}");
    }
    assert!(
        !text.contains("cannot review a /metrics request"),
        "a review failed (forbidden to the controller?):\n{text}"
    );
}

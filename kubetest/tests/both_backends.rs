//! The same test against the simulator and the real API server: where CAPTF relies on the
//! simulator behaving as kube-apiserver does, both must answer alike. The real-server half
//! fails under `CI` and skips elsewhere without the binaries.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use captf_kubetest::{ControlPlane, Options, tools_or_skip};
use captf_sim::Sim;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, PostParams};
use serde_json::json;

use common::TEST_READY_TIMEOUT;

const PATIENCE: Duration = Duration::from_secs(60);

enum Backend {
    Sim(Sim),
    Real(Box<ControlPlane>),
}

impl Backend {
    async fn sim() -> Backend {
        Backend::Sim(Sim::start().await.unwrap())
    }

    async fn real() -> Option<Backend> {
        let tools = tools_or_skip()?;
        let mut opts = Options::new(tools);
        opts.ready_timeout = TEST_READY_TIMEOUT;
        Some(Backend::Real(Box::new(ControlPlane::start(opts).await.unwrap())))
    }

    async fn admin(&self) -> kube::Client {
        match self {
            Backend::Sim(sim) => sim.client().unwrap(),
            Backend::Real(cp) => cp.admin_client().await.unwrap(),
        }
    }

    async fn as_service_account(&self, namespace: &str, name: &str) -> kube::Client {
        match self {
            Backend::Sim(sim) => sim.client_as(namespace, name).unwrap(),
            Backend::Real(cp) => cp.service_account_client(namespace, name).await.unwrap(),
        }
    }
}

async fn create<K>(client: &kube::Client, namespace: &str, object: serde_json::Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let object: K = serde_json::from_value(object).unwrap();
    Api::<K>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
}

fn forbidden_get(user: &str, secret: &str) -> String {
    format!(
        "secrets \"{secret}\" is forbidden: User \"{user}\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\""
    )
}

/// 403 with kube-apiserver's message on a Secret without a Role; 200 once a Role naming it is
/// bound; 403 again on a Secret the Role does not name.
async fn a_token_reaches_a_secret_only_through_a_role_naming_it(backend: Backend) {
    let admin = backend.admin().await;
    create::<ServiceAccount>(&admin, "default", json!({ "metadata": { "name": "runner" } })).await;
    create::<Secret>(
        &admin,
        "default",
        json!({ "metadata": { "name": "tfstate-default-prod" }, "stringData": { "tfstate": "{}" } }),
    )
    .await;
    let user = "system:serviceaccount:default:runner";
    let as_runner: Api<Secret> = Api::namespaced(backend.as_service_account("default", "runner").await, "default");

    match as_runner.get("tfstate-default-prod").await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert_eq!(status.reason, "Forbidden");
            assert_eq!(status.message, forbidden_get(user, "tfstate-default-prod"));
        }
        other => panic!("without a Role: {other:?}"),
    }

    create::<Role>(
        &admin,
        "default",
        json!({
            "metadata": { "name": "state" },
            "rules": [{ "apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["tfstate-default-prod"] }],
        }),
    )
    .await;
    create::<RoleBinding>(
        &admin,
        "default",
        json!({
            "metadata": { "name": "state" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "state" },
            "subjects": [{ "kind": "ServiceAccount", "name": "runner", "namespace": "default" }],
        }),
    )
    .await;

    // kube-apiserver's RBAC authorizer reads Roles from its informer cache: a grant takes
    // effect shortly after it is stored, not at once.
    let deadline = Instant::now() + PATIENCE;
    let got = loop {
        match as_runner.get("tfstate-default-prod").await {
            Ok(s) => break s,
            Err(kube::Error::Api(status)) if status.code == 403 => {
                assert!(
                    Instant::now() < deadline,
                    "still 403 {PATIENCE:?} after the RoleBinding"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("with the Role: {e}"),
        }
    };
    assert_eq!(got.metadata.name.as_deref(), Some("tfstate-default-prod"));

    match as_runner.get("someone-elses").await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert_eq!(status.message, forbidden_get(user, "someone-elses"));
        }
        other => panic!("a Secret the Role does not name: {other:?}"),
    }
}

#[tokio::test]
async fn on_the_simulator_a_token_reaches_a_secret_only_through_a_role_naming_it() {
    a_token_reaches_a_secret_only_through_a_role_naming_it(Backend::sim().await).await;
}

#[tokio::test]
async fn on_the_real_api_server_a_token_reaches_a_secret_only_through_a_role_naming_it() {
    let Some(backend) = Backend::real().await else { return };
    a_token_reaches_a_secret_only_through_a_role_naming_it(backend).await;
}

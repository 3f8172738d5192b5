//! First scenarios on the real API server: the chart's CRDs are accepted (structural schemas,
//! CEL rules that compile) and their CEL rules refuse a bad TerraformCluster. The simulator
//! checks neither (it evaluates no CRD schema or CEL rule), so these run on the real server
//! only. Without the binaries these tests fail under `CI` and skip elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use captf_kubetest::{ControlPlane, Options, tools_or_skip};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};

use common::TEST_READY_TIMEOUT;

const PATIENCE: Duration = Duration::from_secs(60);

async fn start() -> Option<ControlPlane> {
    let tools = tools_or_skip()?;
    let mut opts = Options::new(tools);
    opts.ready_timeout = TEST_READY_TIMEOUT;
    Some(ControlPlane::start(opts).await.unwrap())
}

fn chart_crds() -> Vec<CustomResourceDefinition> {
    captf_shared::crd::crds()
}

/// Creates the chart's CRDs and waits until each is Established; returns their names.
async fn apply_crds(client: &kube::Client) -> Vec<String> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for crd in chart_crds() {
        let name = crd.metadata.name.clone().unwrap();
        if let Err(e) = api.create(&PostParams::default(), &crd).await {
            panic!("the API server refused the CRD {name}: {e}");
        }
        names.push(name);
    }
    for name in &names {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let crd = api.get(name).await.unwrap();
            let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
            if let Some(bad) = conditions
                .iter()
                .find(|c| c.type_ == "NonStructuralSchema" && c.status == "True")
            {
                panic!("{name} has a non-structural schema: {:?}", bad.message);
            }
            if conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name} not Established within {PATIENCE:?}: {conditions:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    names
}

fn terraform_clusters(client: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "infrastructure.cluster.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
        kind: "TerraformCluster".into(),
        plural: "terraformclusters".into(),
    };
    Api::namespaced_with(client.clone(), "default", &resource)
}

fn terraform_cluster(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "TerraformCluster",
        "metadata": { "name": name },
        "spec": spec,
    }))
    .unwrap()
}

#[tokio::test]
async fn the_charts_crds_are_accepted_and_established_by_the_real_api_server() {
    let Some(cp) = start().await else { return };
    let admin = cp.admin_client().await.unwrap();
    let names = apply_crds(&admin).await;
    assert!(
        names.contains(&"terraformclusters.infrastructure.cluster.x-k8s.io".to_string()),
        "{names:?}"
    );
}

#[tokio::test]
async fn a_terraformcluster_breaking_a_crd_cel_rule_is_refused_by_the_real_api_server() {
    let Some(cp) = start().await else { return };
    let admin = cp.admin_client().await.unwrap();
    apply_crds(&admin).await;
    let api = terraform_clusters(&admin);
    let module = json!({ "source": "git::https://example.com/modules/cluster.git" });

    let good = terraform_cluster(
        "good",
        json!({ "module": module, "jobs": { "lockTimeoutSeconds": 60, "activeDeadlineSeconds": 600 } }),
    );
    api.create(&PostParams::default(), &good).await.unwrap();

    let cases = [
        (
            "lock-outlasts-deadline",
            json!({ "module": module, "jobs": { "lockTimeoutSeconds": 900, "activeDeadlineSeconds": 600 } }),
            "spec.jobs.lockTimeoutSeconds must be less than spec.jobs.activeDeadlineSeconds",
        ),
        (
            "reserved-env",
            json!({ "module": module, "jobs": { "env": [{ "name": "CAPTF_PHASE", "value": "x" }] } }),
            "env names must not start with CAPTF_",
        ),
    ];
    for (name, spec, message) in cases {
        match api.create(&PostParams::default(), &terraform_cluster(name, spec)).await {
            Ok(_) => panic!("{name}: the API server accepted it"),
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{name}: {status:?}");
                assert!(status.message.contains(message), "{name}: {}", status.message);
            }
            Err(e) => panic!("{name}: {e}"),
        }
    }
}

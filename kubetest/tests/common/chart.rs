//! The chart as the tests install it on the real control plane: its CRDs (with the Cluster API
//! CRDs the controller watches) and the controller's RBAC and admission policy as `helm template`
//! renders them.
#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

use captf_chart_tests::{NAMESPACE, capi_crd, helm_template};
use captf_kubetest::ControlPlane;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};

/// Upper bound on any one wait; a test that reaches it fails.
const PATIENCE: Duration = Duration::from_secs(90);
/// The chart's controller account (release `captf`).
pub const CONTROLLER: &str = "captf-controller";

/// The image the chart's defaults name for a component (by tag, or by digest on a release
/// commit): what the kubelet maps to the workspace's files when the tests install the chart.
pub fn default_image(component: &str) -> String {
    captf_chart_tests::default_image(component).unwrap_or_else(|e| panic!("{e}"))
}

/// The API resource of a document the tests create, by its apiVersion and kind.
pub fn resource_of(doc: &Value) -> (ApiResource, bool) {
    let api_version = doc["apiVersion"].as_str().unwrap();
    let kind = doc["kind"].as_str().unwrap();
    let (plural, namespaced) = match kind {
        "ServiceAccount" => ("serviceaccounts", true),
        "Secret" => ("secrets", true),
        "Lease" => ("leases", true),
        "Job" => ("jobs", true),
        "ClusterRole" => ("clusterroles", false),
        "ClusterRoleBinding" => ("clusterrolebindings", false),
        "Role" => ("roles", true),
        "RoleBinding" => ("rolebindings", true),
        "ValidatingAdmissionPolicy" => ("validatingadmissionpolicies", false),
        "ValidatingAdmissionPolicyBinding" => ("validatingadmissionpolicybindings", false),
        "CustomResourceDefinition" => ("customresourcedefinitions", false),
        "TerraformCluster" => ("terraformclusters", true),
        other => panic!("no resource known for {other}"),
    };
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    (resource, namespaced)
}

pub async fn create(client: &kube::Client, doc: &Value) -> Result<(), kube::Error> {
    let (resource, namespaced) = resource_of(doc);
    let object: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
    let api: Api<DynamicObject> = if namespaced {
        let ns = doc["metadata"]["namespace"].as_str().unwrap_or("default");
        Api::namespaced_with(client.clone(), ns, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    api.create(&PostParams::default(), &object).await.map(drop)
}

/// The chart's six CRDs and the Cluster API CRDs the controller watches, Established.
pub async fn crds(client: &kube::Client) {
    let mut docs: Vec<Value> = captf_shared::crd::crds()
        .iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect();
    for file in [
        "cluster.x-k8s.io_clusters.yaml",
        "cluster.x-k8s.io_machines.yaml",
        "cluster.x-k8s.io_machinepools.yaml",
    ] {
        docs.push(capi_crd(file).unwrap());
    }
    for doc in &docs {
        create(client, doc).await.unwrap();
    }
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for doc in &docs {
        let name = doc["metadata"]["name"].as_str().unwrap().to_string();
        super::wait_within(&format!("{name} Established"), PATIENCE, || {
            let (api, name) = (api.clone(), name.clone());
            async move {
                let crd = api.get(&name).await.ok()?;
                crd.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            }
        })
        .await;
    }
}

/// The chart's RBAC for the controller and its admission policy, as `helm template` renders them
/// with the controller bound in every namespace (`controller.watchAllNamespaces=true`), created
/// by the admin; returns the controller's client once the policy is enforced.
pub async fn install_controller_rights(cp: &ControlPlane, admin: &kube::Client) -> kube::Client {
    install_controller_rights_with(
        cp,
        admin,
        &["--set", "controller.watchAllNamespaces=true"],
        &[
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ],
        "default",
    )
    .await
}

/// The chart's RBAC for the controller and its admission policy, as `helm template` renders them
/// with these values (every one of the `wanted` kinds, and only those), created by the admin;
/// returns the controller's client once the policy is enforced in `probe_namespace`, one where
/// the controller is bound (the API server loads a new policy shortly after it is stored, not at
/// once).
pub async fn install_controller_rights_with(
    cp: &ControlPlane,
    admin: &kube::Client,
    values: &[&str],
    wanted: &[&str],
    probe_namespace: &str,
) -> kube::Client {
    super::namespace(admin, NAMESPACE).await;
    let rendered = helm_template(values).unwrap();
    let docs: Vec<&Value> = rendered
        .docs
        .iter()
        .filter(|d| wanted.contains(&d["kind"].as_str().unwrap_or_default()))
        .filter(|d| {
            d["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .starts_with(CONTROLLER)
        })
        .collect();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    for kind in wanted {
        assert!(
            kinds.contains(kind),
            "the chart renders no {kind} for the controller: {kinds:?}"
        );
    }
    for doc in docs {
        create(admin, doc).await.unwrap();
    }
    let client = cp.service_account_client(NAMESPACE, CONTROLLER).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), probe_namespace);
    let admin_secrets: Api<Secret> = Api::namespaced(admin.clone(), probe_namespace);
    let probe: Secret = serde_json::from_value(json!({ "metadata": { "name": "not-captfs" } })).unwrap();
    super::wait_within("the admission policy enforced", PATIENCE, || {
        let (secrets, admin_secrets, probe) = (secrets.clone(), admin_secrets.clone(), probe.clone());
        async move {
            match secrets.create(&PostParams::default(), &probe).await {
                Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("ValidatingAdmissionPolicy") => {
                    Some(())
                }
                // Not yet loaded (or RBAC not yet cached): remove what got through and ask again.
                Ok(_) => {
                    admin_secrets.delete("not-captfs", &Default::default()).await.unwrap();
                    None
                }
                Err(_) => None,
            }
        }
    })
    .await;
    client
}

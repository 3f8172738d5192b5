//! Upgrading the API on the real control plane. Objects stored at `v1alpha1` by CRDs that served
//! `v1alpha1` alone stay readable and writable at both versions once the CRDs serve `v1beta1`
//! (stored) too, through the real webhook's `/convert` called by the real API server; `kubectl
//! captf migrate-storage` then writes every object again at `v1beta1` and leaves each CRD's
//! `status.storedVersions` as `["v1beta1"]`, which is proven by reading everything at `v1beta1`
//! with the webhook stopped (an object still encoded at `v1alpha1` would need it). Without the
//! binaries this test fails under `CI` and skips elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use captf_shared::keys::GROUP;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, WebhookClientConfig,
};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "team-a";
const PATIENCE: Duration = Duration::from_secs(60);

fn api(client: &kube::Client, version: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, version, kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, &captf_shared::types::plural(kind).unwrap());
    Api::namespaced_with(client.clone(), NS, &ar)
}

/// The CRDs as a release that served and stored `v1alpha1` alone had them.
fn v1alpha1_only(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let mut old = crd.spec.versions.remove(0);
    assert_eq!(old.name, "v1alpha1");
    old.storage = true;
    old.deprecated = None;
    old.deprecation_warning = None;
    crd.spec.versions = vec![old];
    crd.spec.conversion = None;
    crd.metadata.annotations = None;
    crd
}

async fn get_json(api: &Api<DynamicObject>, name: &str) -> Result<Value, kube::Error> {
    api.get(name).await.map(|o| serde_json::to_value(o).unwrap())
}

async fn stored_versions(crds: &Api<CustomResourceDefinition>, name: &str) -> Vec<String> {
    crds.get(name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.stored_versions)
        .unwrap_or_default()
}

fn migrate_storage(kubeconfig: &std::path::Path) -> String {
    let out = std::process::Command::new(common::webhook::binary("kubectl-captf"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("migrate-storage")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[tokio::test]
async fn objects_stored_at_v1alpha1_convert_through_the_webhook_and_migrate_storage_leaves_only_v1beta1() {
    let Some((cp, admin)) = common::control_plane_with_namespace(NS).await else {
        return;
    };
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());

    // Before: the CRDs of a release that knew only v1alpha1, and objects stored at it.
    for crd in captf_shared::crd::crds() {
        crds.create(&PostParams::default(), &v1alpha1_only(crd)).await.unwrap();
    }
    let old = api(&admin, "v1alpha1", "TerraformCluster");
    common::wait_within("v1alpha1 is served", PATIENCE, || {
        let old = old.clone();
        async move { old.list(&Default::default()).await.ok() }
    })
    .await;
    let spec =
        json!({"module": {"source": "git::https://example.com/modules/cluster.git"}, "variables": {"name": "prod"}});
    for (name, status) in [
        (
            "prod",
            json!({"ready": true, "initialization": {"provisioned": true}, "observedGeneration": 1,
                   "pendingPlan": {"hash": "h1", "adds": 1, "changes": 0, "destroys": 2, "replaces": 0, "job": "tc-prod-apply-2"}}),
        ),
        ("plain", json!({"ready": true, "initialization": {"provisioned": true}})),
    ] {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "TerraformCluster",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        old.create(&PostParams::default(), &object).await.unwrap();
        old.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
            .await
            .unwrap();
    }
    let template: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "TerraformMachineTemplate",
        "metadata": {"name": "workers"}, "spec": {"template": {"spec": {"module": {"source": "git::https://example.com/modules/machine.git"}}}},
    }))
    .unwrap();
    api(&admin, "v1alpha1", "TerraformMachineTemplate")
        .create(&PostParams::default(), &template)
        .await
        .unwrap();
    let before_prod = get_json(&old, "prod").await.unwrap();

    // The upgrade: the CRDs serve v1beta1 (stored) beside v1alpha1, converted by the webhook.
    let dir = tempfile::tempdir().unwrap();
    let mut hook = common::webhook::start_webhook(dir.path());
    for mut crd in captf_shared::crd::crds() {
        let name = crd.metadata.name.clone().unwrap();
        if let Some(w) = crd.spec.conversion.as_mut().and_then(|c| c.webhook.as_mut()) {
            w.client_config = Some(WebhookClientConfig {
                url: Some(format!("{}/convert", hook.url)),
                ca_bundle: Some(k8s_openapi::ByteString(hook.ca.clone())),
                service: None,
            });
        }
        crd.metadata.resource_version = crds.get(&name).await.unwrap().metadata.resource_version;
        crds.replace(&name, &PostParams::default(), &crd).await.unwrap();
    }
    let new = api(&admin, "v1beta1", "TerraformCluster");
    let prod = common::wait_within("prod reads at v1beta1 through conversion", PATIENCE, || {
        let new = new.clone();
        async move { get_json(&new, "prod").await.ok() }
    })
    .await;
    assert_eq!(prod["apiVersion"], format!("{GROUP}/v1beta1"));
    assert_eq!(
        prod["status"]["pendingPlan"],
        json!({"hash": "h1", "add": 1, "change": 0, "destroy": 2, "replace": 0, "job": "tc-prod-apply-2"})
    );
    assert_eq!(prod["status"]["ready"], true, "{prod}");
    assert_eq!(prod["spec"], before_prod["spec"]);
    assert_eq!(prod["metadata"]["annotations"], before_prod["metadata"]["annotations"]);
    // Read back at v1alpha1 through the webhook, the old names again.
    assert_eq!(get_json(&old, "prod").await.unwrap()["status"], before_prod["status"]);
    // An old client still writes: a label at v1alpha1, read at v1beta1, the status untouched.
    old.patch(
        "prod",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .unwrap();
    let relabelled = get_json(&new, "prod").await.unwrap();
    assert_eq!(relabelled["metadata"]["labels"]["team"], "a");
    assert_eq!(relabelled["status"], prod["status"]);
    let crd_name = format!("terraformclusters.{GROUP}");
    assert_eq!(stored_versions(&crds, &crd_name).await, ["v1alpha1", "v1beta1"]);

    // The migration: every object written again at v1beta1, then storedVersions set.
    let out = migrate_storage(&cp.admin_kubeconfig());
    assert!(
        out.contains(&format!(
            "{crd_name}: 2 object(s) written at v1beta1 (0 changed or removed meanwhile); storedVersions [v1alpha1, v1beta1] -> [v1beta1]"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("terraformmachinetemplates.{GROUP}: 1 object(s) written")),
        "{out}"
    );
    for crd in captf_shared::crd::crds() {
        let name = crd.metadata.name.unwrap();
        assert_eq!(stored_versions(&crds, &name).await, ["v1beta1"], "{name}");
    }
    // Idempotent.
    let again = migrate_storage(&cp.admin_kubeconfig());
    assert!(
        again.contains(&format!(
            "{crd_name}: storedVersions is already [v1beta1]; nothing to do"
        )),
        "{again}"
    );
    let migrated = get_json(&new, "prod").await.unwrap();
    assert_eq!(
        migrated["metadata"]["generation"], prod["metadata"]["generation"],
        "no spec change"
    );
    assert_eq!(migrated["status"], prod["status"]);

    // What is stored is v1beta1 now: with the webhook gone, everything still reads at v1beta1
    // (an object still encoded at v1alpha1 could not be read without it), and v1alpha1 does not.
    hook.stop();
    for name in ["prod", "plain"] {
        get_json(&new, name).await.unwrap();
    }
    new.list(&Default::default()).await.unwrap();
    api(&admin, "v1beta1", "TerraformMachineTemplate")
        .get("workers")
        .await
        .unwrap();
    let unreachable = get_json(&old, "prod").await.unwrap_err().to_string();
    assert!(unreachable.contains("conversion webhook"), "{unreachable}");
}

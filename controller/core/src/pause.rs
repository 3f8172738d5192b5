//! Cluster API pause (docs/api.md): an object is paused by its own `spec.paused`, its
//! `cluster.x-k8s.io/paused` annotation (both read in [`super::snapshot`]), or its Cluster API
//! `Cluster`'s `spec.paused`, read here. Same rule as Cluster API's `annotations.IsPaused`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

/// The Cluster API group.
pub const CAPI_GROUP: &str = "cluster.x-k8s.io";
/// The versions tried, in order, when the object names no owning Cluster yet (Cluster API sets
/// the ownerReference only once it reconciled the Cluster): the current one, then the deprecated
/// one older releases serve alone.
pub const CAPI_API_VERSIONS: [&str; 2] = ["cluster.x-k8s.io/v1beta2", "cluster.x-k8s.io/v1beta1"];

/// The object's Cluster API `Cluster` ownerReference, if it has one (Cluster API sets it on
/// infrastructure clusters).
fn cluster_owner(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "Cluster" && o.api_version.split_once('/').is_some_and(|(g, _)| g == CAPI_GROUP))
}

/// The apiVersions to read the owning Cluster with, in order: the one of the object's `Cluster`
/// ownerReference, else v1beta2 and then v1beta1 (PURE).
pub fn cluster_api_versions(meta: &ObjectMeta) -> Vec<String> {
    match cluster_owner(meta) {
        Some(o) => vec![o.api_version.clone()],
        None => CAPI_API_VERSIONS.iter().map(|v| v.to_string()).collect(),
    }
}

/// Whether the object is managed by Cluster API at all: it has the `cluster.x-k8s.io/cluster-name`
/// label or a Cluster API `Cluster` owner. Only then is there a Cluster to read (PURE).
pub fn under_cluster_api(meta: &ObjectMeta) -> bool {
    meta.labels.as_ref().is_some_and(|l| {
        l.get(captf_shared::keys::LABEL_CLUSTER_NAME)
            .is_some_and(|v| !v.is_empty())
    }) || cluster_owner(meta).is_some()
}

/// Whether the object pauses itself: its `spec.paused` or the `cluster.x-k8s.io/paused`
/// annotation (PURE; the Cluster's pause is [`cluster_paused`]).
pub fn object_paused(object: &captf_shared::types::CaptfObject) -> bool {
    object.terraform_spec().paused.unwrap_or(false)
        || object
            .metadata()
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(captf_shared::keys::ANNOTATION_CAPI_PAUSED))
}

/// Whether a Cluster API `Cluster` (as JSON) says its infrastructure is provisioned: v1beta2's
/// `status.initialization.infrastructureProvisioned`, else v1beta1's `status.infrastructureReady`
/// (PURE). Missing reads as not yet.
pub fn cluster_infrastructure_provisioned(cluster: &Value) -> bool {
    cluster
        .pointer("/status/initialization/infrastructureProvisioned")
        .or_else(|| cluster.pointer("/status/infrastructureReady"))
        .and_then(Value::as_bool)
        == Some(true)
}

/// Whether a Cluster API `Cluster` (as JSON, any version) is paused: `spec.paused: true` (PURE).
pub fn cluster_paused(cluster: &Value) -> bool {
    cluster.pointer("/spec/paused").and_then(Value::as_bool) == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn owned_by(api_version: &str, kind: &str) -> ObjectMeta {
        ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                api_version: api_version.into(),
                kind: kind.into(),
                name: "prod".into(),
                uid: "u".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn only_objects_with_the_cluster_name_label_or_a_cluster_owner_have_a_cluster_to_read() {
        assert!(!under_cluster_api(&ObjectMeta::default()));
        assert!(under_cluster_api(&owned_by("cluster.x-k8s.io/v1beta1", "Cluster")));
        assert!(!under_cluster_api(&owned_by("example.com/v1", "Cluster")));
        let labelled = ObjectMeta {
            labels: Some([(captf_shared::keys::LABEL_CLUSTER_NAME.to_string(), "prod".to_string())].into()),
            ..Default::default()
        };
        assert!(under_cluster_api(&labelled));
    }

    #[test]
    fn a_paused_cluster_pauses_its_members() {
        assert!(cluster_paused(&json!({"spec": {"paused": true}})));
    }

    #[test]
    fn an_unpaused_or_unspecified_cluster_does_not() {
        assert!(!cluster_paused(&json!({"spec": {"paused": false}})));
        assert!(!cluster_paused(&json!({"spec": {}})));
        assert!(!cluster_paused(&json!({"spec": {"paused": "true"}})));
    }

    #[test]
    fn the_cluster_is_read_with_the_version_of_the_owner_reference_else_v1beta2_then_v1beta1() {
        assert_eq!(
            cluster_api_versions(&owned_by("cluster.x-k8s.io/v1beta1", "Cluster")),
            ["cluster.x-k8s.io/v1beta1"]
        );
        assert_eq!(
            cluster_api_versions(&ObjectMeta::default()),
            ["cluster.x-k8s.io/v1beta2", "cluster.x-k8s.io/v1beta1"]
        );
        // Another group's Cluster is not Cluster API's.
        assert_eq!(
            cluster_api_versions(&owned_by("example.com/v1", "Cluster")),
            CAPI_API_VERSIONS
        );
    }

    #[test]
    fn the_clusters_infrastructure_is_provisioned_by_either_versions_field() {
        assert!(cluster_infrastructure_provisioned(
            &json!({"status": {"initialization": {"infrastructureProvisioned": true}}})
        ));
        assert!(cluster_infrastructure_provisioned(
            &json!({"status": {"infrastructureReady": true}})
        ));
        assert!(!cluster_infrastructure_provisioned(
            &json!({"status": {"initialization": {"infrastructureProvisioned": false}}})
        ));
        assert!(
            !cluster_infrastructure_provisioned(&json!({"spec": {}})),
            "no status yet"
        );
    }
}

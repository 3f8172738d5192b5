//! Deletion (docs/rules.md): the finalizer `captf.io/destroy` is added to every object; on
//! deletion `decide` starts a destroy (or holds, or finalizes for `Orphan`), and after a
//! successful destroy the finalizer is removed (not added while the object is paused:
//! `captf_core::moving`). Finalizer writes carry the read resourceVersion. Also the clusterctl
//! block-move annotation, the other metadata the controller writes on the object.

use kube::api::{Api, Patch, PatchParams};
use kube::core::DynamicObject;
use serde_json::json;

use captf_shared::keys;
use captf_shared::types::CaptfObject;

use captf_core::finalizer::{with_finalizer, without_finalizer};
use captf_core::ident::Ident;
use captf_read::errors::{self, ApiAction, Error};
use captf_read::kinds::api_resource;

/// A merge patch of the object itself.
async fn merge_patch(client: &kube::Client, id: &Ident, patch: &serde_json::Value) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &id.namespace, &api_resource(id.kind));
    api.patch(&id.name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
}

async fn set_finalizers(
    client: &kube::Client,
    id: &Ident,
    object: &CaptfObject,
    f: Vec<String>,
) -> Result<bool, Error> {
    let patch = json!({"metadata": {"finalizers": f, "resourceVersion": object.metadata().resource_version}});
    match merge_patch(client, id, &patch).await {
        Ok(_) => Ok(true),
        Err(e) if errors::is_conflict(&e) || errors::is_not_found(&e) => Ok(false),
        Err(e) => Err(Error::api(ApiAction::PatchObject, id.what(), e)),
    }
}

/// Add (`block`) or remove the clusterctl block-move annotation when it differs from what the
/// object carries (`captf_core::moving::blocks_move`).
pub async fn set_block_move(client: &kube::Client, id: &Ident, object: &CaptfObject, block: bool) -> Result<(), Error> {
    let has = object
        .metadata()
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(keys::ANNOTATION_BLOCK_MOVE));
    if has == block {
        return Ok(());
    }
    let value = if block { json!("") } else { serde_json::Value::Null };
    let patch = json!({"metadata": {"annotations": {keys::ANNOTATION_BLOCK_MOVE: value}}});
    match merge_patch(client, id, &patch).await {
        Ok(_) => Ok(()),
        // Gone: nothing to move. The next pass sees the annotation as written or not.
        Err(e) if errors::is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::api(ApiAction::PatchObject, id.what(), e)),
    }
}

/// The merge patch that removes the request annotations `keys` from `object`, with the
/// resourceVersion read as a precondition; `None` when none of them is there.
pub fn remove_requests_patch(object: &CaptfObject, keys: &[&str]) -> Option<serde_json::Value> {
    let meta = object.metadata();
    let annotations = meta.annotations.as_ref()?;
    let gone: serde_json::Map<String, serde_json::Value> = keys
        .iter()
        .filter(|k| annotations.contains_key(**k))
        .map(|k| (k.to_string(), serde_json::Value::Null))
        .collect();
    (!gone.is_empty()).then(|| json!({"metadata": {"resourceVersion": meta.resource_version, "annotations": gone}}))
}

/// Remove the request annotations a booked Job used up, only from the object as read: a
/// conflict (the object changed since, perhaps by a new request) or an object gone leaves them,
/// and the next pass looks again.
pub async fn remove_used_requests(
    client: &kube::Client,
    id: &Ident,
    object: &CaptfObject,
    keys: &[&str],
) -> Result<(), Error> {
    let Some(patch) = remove_requests_patch(object, keys) else {
        return Ok(());
    };
    match merge_patch(client, id, &patch).await {
        Ok(()) => {
            tracing::info!("removed the used request annotations {keys:?} of {}", id.what());
            Ok(())
        }
        Err(e) if errors::is_not_found(&e) || errors::is_conflict(&e) => Ok(()),
        Err(e) => Err(Error::api(ApiAction::PatchObject, id.what(), e)),
    }
}

/// Add the finalizer if missing. False when the write lost a race (requeue).
pub async fn ensure_finalizer(client: &kube::Client, id: &Ident, object: &CaptfObject) -> Result<bool, Error> {
    let current = object.metadata().finalizers.clone().unwrap_or_default();
    match with_finalizer(&current) {
        None => Ok(true),
        Some(f) => set_finalizers(client, id, object, f).await,
    }
}

/// Remove the finalizer: the object goes, with its inputs and outputs Secrets (owned).
pub async fn remove_finalizer(client: &kube::Client, id: &Ident, object: &CaptfObject) -> Result<bool, Error> {
    let current = object.metadata().finalizers.clone().unwrap_or_default();
    match without_finalizer(&current) {
        None => Ok(true),
        Some(f) => set_finalizers(client, id, object, f).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_used_request_is_removed_only_from_the_object_as_read() {
        let object: captf_shared::types::TerraformCluster = serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "TerraformCluster",
            "metadata": {"name": "a", "namespace": "default", "resourceVersion": "42",
                         "annotations": {"captf.io/approve-plan": "h1", "keep": "me"}},
            "spec": {"module": {"source": "git::https://example.com/m.git"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let object = CaptfObject::Cluster(object);
        assert_eq!(
            super::remove_requests_patch(&object, &[keys::ANNOTATION_APPROVE_PLAN, keys::ANNOTATION_REFRESH]),
            Some(json!({"metadata": {"resourceVersion": "42", "annotations": {"captf.io/approve-plan": null}}}))
        );
        assert_eq!(super::remove_requests_patch(&object, &[keys::ANNOTATION_REFRESH]), None);
    }
}

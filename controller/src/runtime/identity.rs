//! Before each Job: the object's own runner identity (when its pods run as it) and its state
//! objects (`captf_shared::runner_identity`, docs/trust.md).
//!
//! Everything here is created when absent and otherwise left alone, except the Role's rules,
//! which are set again so a Role from an older version (or edited by hand) grants exactly what
//! this version's runner needs. The state Secret, lock Lease and outputs Secret are never
//! overwritten: they may hold state, a lock or outputs.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

use captf_shared::keys;
use captf_shared::runner_identity::{runner_identity, state_objects};

use super::errors::{self, ApiAction, Error};
use super::gather::Ident;
use super::job::owner_reference;

/// Create `obj`; when an object of its name exists, apply `on_conflict` to it as a merge patch
/// (None: leave it alone).
async fn create_or_merge<K>(
    client: &kube::Client,
    id: &Ident,
    action: ApiAction,
    obj: &K,
    on_conflict: Option<serde_json::Value>,
) -> Result<(), Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), &id.namespace);
    let name = obj.meta().name.clone().unwrap_or_default();
    let written = match api.create(&PostParams::default(), obj).await {
        Err(e) if errors::is_conflict(&e) => match on_conflict {
            Some(patch) => api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ()),
            None => Ok(()),
        },
        other => other.map(|_| ()),
    };
    written.map_err(|e| Error::api(action, format!("{}/{name}", id.namespace), e))
}

/// Create `obj` unless an object of its name exists.
async fn create_absent<K>(client: &kube::Client, id: &Ident, action: ApiAction, obj: &K) -> Result<(), Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    create_or_merge(client, id, action, obj, None).await
}

/// The labels of what is made for the object.
fn labels(id: &Ident) -> BTreeMap<String, String> {
    BTreeMap::from([
        (keys::LABEL_KIND.to_string(), id.kind.as_str().to_string()),
        (keys::LABEL_OBJECT.to_string(), id.object_id.clone()),
    ])
}

/// The object's ServiceAccount, Role and RoleBinding `captf-runner-<suffix>`, owned by it. The
/// ServiceAccount carries `annotations` (workload identity), set again on an existing one.
pub async fn ensure_identity(
    client: &kube::Client,
    id: &Ident,
    annotations: &BTreeMap<String, String>,
) -> Result<(), Error> {
    let owner = owner_reference(id.kind, &id.name, &id.uid);
    let mut identity = runner_identity(&id.namespace, &id.suffix, &labels(id), Some(&owner));
    if !annotations.is_empty() {
        identity.service_account.metadata.annotations = Some(annotations.clone());
    }
    let annotate = (!annotations.is_empty()).then(|| serde_json::json!({"metadata": {"annotations": annotations}}));
    create_or_merge(
        client,
        id,
        ApiAction::WriteIdentity,
        &identity.service_account,
        annotate,
    )
    .await?;
    let rules = serde_json::json!({"rules": identity.role.rules});
    create_or_merge(client, id, ApiAction::WriteIdentity, &identity.role, Some(rules)).await?;
    create_absent::<RoleBinding>(client, id, ApiAction::WriteIdentity, &identity.role_binding).await
}

/// The object's state Secret, lock Lease and outputs Secret, when absent. The two Secrets carry
/// the clusterctl move label, so `clusterctl move` takes them with the object.
pub async fn ensure_state_objects(client: &kube::Client, id: &Ident) -> Result<(), Error> {
    let owner = owner_reference(id.kind, &id.name, &id.uid);
    // Not the captf.io labels: the controller's label-selected Secret watch must not carry state.
    let extra = BTreeMap::from([(keys::LABEL_CLUSTERCTL_MOVE.to_string(), String::new())]);
    let s = state_objects(&id.namespace, &id.suffix, &extra, Some(&owner));
    create_absent::<Secret>(client, id, ApiAction::WriteSecret, &s.state_secret).await?;
    create_absent::<Lease>(client, id, ApiAction::WriteLease, &s.lock_lease).await?;
    create_absent::<Secret>(client, id, ApiAction::WriteSecret, &s.outputs_secret).await?;
    Ok(())
}

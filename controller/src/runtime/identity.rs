//! Before each Job: the object's own runner identity (when its pods run as it) and its state
//! objects (`captf_shared::runner_identity`, docs/trust.md).
//!
//! Everything here is created when absent and otherwise left alone, except the Role's rules,
//! which are set again so a Role from an older version (or edited by hand) grants exactly what
//! this version's runner needs. The state Secret, lock Lease and outputs Secret are never
//! overwritten: they may hold state, a lock or outputs.
//!
//! Before any of it, [`check`] reads what is under the object's names and holds the object
//! (`NameConflict`) when any of it is bound to another object (`captf_shared::binding`), or
//! (`ReleasedStateNotAdopted`) when it is state an earlier object of the name released and this
//! one does not adopt (`captf_core::adoption`): nothing of another object is ever adopted,
//! written to or handed to a runner without the object asking for it by UID.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

use captf_shared::binding::{self, Binding, History, Verdict};
use captf_shared::runner_identity::{runner_identity, state_objects};
use captf_shared::{keys, names};

use captf_core::adoption::{self, NameHold};
use captf_core::ident::Ident;
use captf_core::job::owner_reference;
use captf_read::errors::{ApiAction, Error};

/// Make `obj` when [`check`] found nothing under its name (`found` false), or merge `patch` into
/// the one it found and judged the object's own (`None`: leave it alone).
///
/// A create that meets `AlreadyExists` is an error, not "made": the object under that name
/// appeared after the check, nobody has judged whose it is, and a Job started now could run
/// with a lock Lease or state Secret bound to another object, or patch another's Role. The pass
/// ends as a conflict (a requeue) and the next one checks it before any Job. Any other refusal,
/// a 409 `Conflict` included, is an error too: nothing was made, and the Job must not start as
/// if it had been (its runner would make the lock Lease or state Secret itself, unbound, and
/// the object's successor would be held).
async fn create_or_merge<K>(
    client: &kube::Client,
    id: &Ident,
    action: ApiAction,
    obj: &K,
    found: bool,
    patch: Option<serde_json::Value>,
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
    let written = match (found, patch) {
        (false, _) => api.create(&PostParams::default(), obj).await.map(|_| ()),
        (true, Some(patch)) => api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ()),
        (true, None) => Ok(()),
    };
    written.map_err(|e| Error::api(action, format!("{}/{name}", id.namespace), e))
}

/// Create `obj`, which [`check`] found absent.
async fn create_absent<K>(client: &kube::Client, id: &Ident, action: ApiAction, obj: &K) -> Result<(), Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    create_or_merge(client, id, action, obj, false, None).await
}

/// The labels of what is made for the object.
fn labels(id: &Ident) -> BTreeMap<String, String> {
    BTreeMap::from([
        (keys::LABEL_KIND.to_string(), id.kind.as_str().to_string()),
        (keys::LABEL_OBJECT.to_string(), id.object_id.clone()),
    ])
}

/// The object's ServiceAccount, Role and RoleBinding `captf-runner-<suffix>`, owned by it. The
/// ServiceAccount carries `annotations` (workload identity), set again on an existing one. What
/// [`check`] found already there and as wanted is not written again.
pub async fn ensure_identity(
    client: &kube::Client,
    id: &Ident,
    annotations: &BTreeMap<String, String>,
    found: &Found,
) -> Result<(), Error> {
    let owner = owner_reference(id.kind, &id.name, &id.uid);
    let mut identity = runner_identity(&id.namespace, &id.suffix, &labels(id), Some(&owner));
    if !annotations.is_empty() {
        identity.service_account.metadata.annotations = Some(annotations.clone());
    }
    let annotated = found.service_account.as_ref().is_some_and(|sa| {
        annotations
            .iter()
            .all(|(k, v)| sa.metadata.annotations.as_ref().and_then(|a| a.get(k)) == Some(v))
    });
    if !annotated {
        let annotate = (!annotations.is_empty()).then(|| serde_json::json!({"metadata": {"annotations": annotations}}));
        create_or_merge(
            client,
            id,
            ApiAction::WriteIdentity,
            &identity.service_account,
            found.service_account.is_some(),
            annotate,
        )
        .await?;
    }
    if found.role.as_ref().is_none_or(|r| r.rules != identity.role.rules) {
        let rules = serde_json::json!({"rules": identity.role.rules});
        create_or_merge(
            client,
            id,
            ApiAction::WriteIdentity,
            &identity.role,
            found.role.is_some(),
            Some(rules),
        )
        .await?;
    }
    if !found.role_binding {
        create_absent::<RoleBinding>(client, id, ApiAction::WriteIdentity, &identity.role_binding).await?;
    }
    Ok(())
}

/// The object's state Secret, lock Lease and outputs Secret, when absent (as [`check`] found
/// them). The two Secrets carry the clusterctl move label, so `clusterctl move` takes them with
/// the object.
pub async fn ensure_state_objects(client: &kube::Client, id: &Ident, found: &Found) -> Result<(), Error> {
    let owner = owner_reference(id.kind, &id.name, &id.uid);
    // Not the captf.io labels: the controller's label-selected Secret watch must not carry state.
    let extra = BTreeMap::from([(keys::LABEL_CLUSTERCTL_MOVE.to_string(), String::new())]);
    let s = state_objects(&id.namespace, &id.suffix, &extra, Some(&owner));
    if !found.state_secret {
        create_absent::<Secret>(client, id, ApiAction::WriteSecret, &s.state_secret).await?;
    }
    if !found.lock_lease {
        create_absent::<Lease>(client, id, ApiAction::WriteLease, &s.lock_lease).await?;
    }
    if !found.outputs_secret {
        create_absent::<Secret>(client, id, ApiAction::WriteSecret, &s.outputs_secret).await?;
    }
    Ok(())
}

/// What [`check`] found under the object's names and judged the object's own: what is already
/// there is not created again.
#[derive(Clone, Debug, Default)]
pub struct Found {
    pub state_secret: bool,
    pub lock_lease: bool,
    pub outputs_secret: bool,
    /// Read only when the object's pods run as its own identity.
    pub service_account: Option<ServiceAccount>,
    pub role: Option<Role>,
    pub role_binding: bool,
}

/// What is under the object's names, as read before a Job starts.
#[derive(Debug)]
pub enum Claims {
    /// Absent or the object's own; the state objects that still need its UID stamped.
    Bound {
        state_secret: Option<Box<Secret>>,
        lock_lease: Option<Box<Lease>>,
        /// The run lease as read (`None`: absent), for taking it without reading it again.
        run_lease: Option<Box<Lease>>,
        found: Box<Found>,
    },
    /// Bound to another object, or released state not adopted: the hold naming it.
    Held(NameHold),
}

async fn get_opt<K>(client: &kube::Client, ns: &str, name: &str, action: ApiAction) -> Result<Option<K>, Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| Error::api(action, format!("{} {ns}/{name}", K::kind(&())), e))
}

/// Read what is under the object's names (its inputs Secret as this pass read it) and judge it:
/// the inputs and outputs Secrets, the run lease and, when its pods run as it, the runner
/// ServiceAccount, Role and RoleBinding must be owned by the object; the state Secret and lock
/// Lease must carry its UID, or be stamped: see `captf_shared::binding::verdict`, and for state
/// released by an earlier object of the name, `captf_core::adoption::judge` with the UID the
/// object's `captf.io/adopt-state` names (`adopt`).
pub async fn check(
    client: &kube::Client,
    id: &Ident,
    inputs_secret: Option<&Secret>,
    own_identity: bool,
    adopt: Option<&str>,
) -> Result<Claims, Error> {
    let ns = id.namespace.as_str();
    let history = History::of_inputs(inputs_secret.map(|s| &s.metadata), &id.uid);
    let (inputs, outputs, state, lock, run) = (
        names::inputs_secret_name(&id.suffix),
        names::outputs_secret_name(&id.suffix),
        names::state_secret_name(&id.suffix),
        names::lock_lease_name(&id.suffix),
        names::run_lease_name(&id.suffix),
    );
    let outputs_secret: Option<Secret> = get_opt(client, ns, &outputs, ApiAction::GetSecret).await?;
    let state_secret: Option<Secret> = get_opt(client, ns, &state, ApiAction::GetSecret).await?;
    let lock_lease: Option<Lease> = get_opt(client, ns, &lock, ApiAction::GetLease).await?;
    let run_lease: Option<Lease> = get_opt(client, ns, &run, ApiAction::GetLease).await?;
    let account = names::runner_service_account_name(&id.suffix);
    let (sa, role, rb) = if own_identity {
        (
            get_opt::<ServiceAccount>(client, ns, &account, ApiAction::GetObject).await?,
            get_opt::<Role>(client, ns, &account, ApiAction::GetObject).await?,
            get_opt::<RoleBinding>(client, ns, &account, ApiAction::GetObject).await?,
        )
    } else {
        (None, None, None)
    };
    let owned = |kind, name, meta, empty| adoption::Found {
        kind,
        name,
        meta,
        binding: Binding::Owner,
        empty,
        state: false,
    };
    let found = [
        owned("Secret", inputs.as_str(), inputs_secret.map(|s| &s.metadata), false),
        owned(
            "Secret",
            outputs.as_str(),
            outputs_secret.as_ref().map(|s| &s.metadata),
            false,
        ),
        adoption::Found {
            kind: "Secret",
            name: state.as_str(),
            meta: state_secret.as_ref().map(|s| &s.metadata),
            binding: Binding::Annotation,
            empty: state_secret.as_ref().is_none_or(secret_is_empty),
            state: true,
        },
        adoption::Found {
            kind: "Lease",
            name: lock.as_str(),
            meta: lock_lease.as_ref().map(|l| &l.metadata),
            binding: Binding::Annotation,
            empty: lock_lease.as_ref().is_none_or(lease_is_free),
            state: false,
        },
        owned("Lease", run.as_str(), run_lease.as_ref().map(|l| &l.metadata), false),
        owned(
            "ServiceAccount",
            account.as_str(),
            sa.as_ref().map(|o| &o.metadata),
            false,
        ),
        owned("Role", account.as_str(), role.as_ref().map(|o| &o.metadata), false),
        owned("RoleBinding", account.as_str(), rb.as_ref().map(|o| &o.metadata), false),
    ];
    let present = Found {
        state_secret: state_secret.is_some(),
        lock_lease: lock_lease.is_some(),
        outputs_secret: outputs_secret.is_some(),
        service_account: sa.clone(),
        role: role.clone(),
        role_binding: rb.is_some(),
    };
    Ok(match adoption::judge(ns, &found, &id.uid, &history, adopt) {
        Err(hold) => Claims::Held(hold),
        Ok(v) => Claims::Bound {
            found: Box::new(present),
            state_secret: state_secret.filter(|_| v[2] == Verdict::Stamp).map(Box::new),
            lock_lease: lock_lease.filter(|_| v[3] == Verdict::Stamp).map(Box::new),
            run_lease: run_lease.map(Box::new),
        },
    })
}

/// A state Secret that holds no state (what the controller makes, or empties on release).
fn secret_is_empty(s: &Secret) -> bool {
    s.data.as_ref().is_none_or(BTreeMap::is_empty) && s.string_data.as_ref().is_none_or(BTreeMap::is_empty)
}

/// A lock Lease nobody holds.
fn lease_is_free(l: &Lease) -> bool {
    l.spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .is_none_or(str::is_empty)
}

/// Stamp the object's UID on the state Secret and lock Lease [`check`] found unstamped (made by
/// an older CAPTF or the backend for this object, moved with it, or released and taken over:
/// the `captf.io/released-by` goes). Each write carries the read resourceVersion, so an object
/// replaced meanwhile is not stamped (the write fails).
pub async fn stamp(
    client: &kube::Client,
    id: &Ident,
    state_secret: Option<Box<Secret>>,
    lock_lease: Option<Box<Lease>>,
) -> Result<(), Error> {
    let ns = id.namespace.as_str();
    if let Some(s) = state_secret {
        let name = s.metadata.name.clone().unwrap_or_default();
        let patch = serde_json::json!({"metadata": {
            "resourceVersion": s.metadata.resource_version,
            "annotations": {keys::ANNOTATION_OWNER_UID: id.uid, keys::ANNOTATION_RELEASED_BY: null},
        }});
        Api::<Secret>::namespaced(client.clone(), ns)
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::api(ApiAction::WriteSecret, format!("{ns}/{name}"), e))?;
        tracing::info!("bound the state Secret {ns}/{name} to {} (uid {})", id.what(), id.uid);
    }
    if let Some(mut l) = lock_lease {
        let name = l.metadata.name.clone().unwrap_or_default();
        let a = l.metadata.annotations.get_or_insert_with(BTreeMap::new);
        a.insert(keys::ANNOTATION_OWNER_UID.to_string(), id.uid.clone());
        a.remove(keys::ANNOTATION_RELEASED_BY);
        l.metadata.managed_fields = None;
        Api::<Lease>::namespaced(client.clone(), ns)
            .replace(&name, &PostParams::default(), &*l)
            .await
            .map_err(|e| Error::api(ApiAction::WriteLease, format!("{ns}/{name}"), e))?;
        tracing::info!("bound the lock Lease {ns}/{name} to {} (uid {})", id.what(), id.uid);
    }
    Ok(())
}

/// Release the object's state Secret and lock Lease just before its finalizer goes: the UID
/// binding is replaced by `captf.io/released-by`, so the next object of the name is not held
/// with `NameConflict` forever. With `empty` (its destroy succeeded) the state Secret's data
/// goes in the same write: the next object takes over nothing, as if it were new, and no state
/// the destroy Job's module may have written is handed on. Without it (`deletionPolicy: Orphan`
/// kept the infrastructure) the state stays, for an object that adopts it by this object's UID
/// (`captf_core::adoption`). What is absent, or bound to another object, is left alone. A state
/// whose finalizer a person removed by hand is never released: it may still hold resources.
pub async fn release(client: &kube::Client, id: &Ident, empty: bool) -> Result<(), Error> {
    let ns = id.namespace.as_str();
    let (state, lock) = (names::state_secret_name(&id.suffix), names::lock_lease_name(&id.suffix));
    let ours = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        binding::annotation(m) == Some(id.uid.as_str())
    };
    if let Some(s) = get_opt::<Secret>(client, ns, &state, ApiAction::GetSecret).await?
        && ours(&s.metadata)
    {
        let mut patch = serde_json::json!({"metadata": {
            "resourceVersion": s.metadata.resource_version,
            "annotations": {keys::ANNOTATION_OWNER_UID: null, keys::ANNOTATION_RELEASED_BY: id.uid},
        }});
        if empty {
            patch["data"] = serde_json::Value::Null;
        }
        Api::<Secret>::namespaced(client.clone(), ns)
            .patch(&state, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::api(ApiAction::WriteSecret, format!("{ns}/{state}"), e))?;
    }
    if let Some(mut l) = get_opt::<Lease>(client, ns, &lock, ApiAction::GetLease).await?
        && ours(&l.metadata)
    {
        let a = l.metadata.annotations.get_or_insert_with(BTreeMap::new);
        a.remove(keys::ANNOTATION_OWNER_UID);
        a.insert(keys::ANNOTATION_RELEASED_BY.to_string(), id.uid.clone());
        l.metadata.managed_fields = None;
        Api::<Lease>::namespaced(client.clone(), ns)
            .replace(&lock, &PostParams::default(), &l)
            .await
            .map_err(|e| Error::api(ApiAction::WriteLease, format!("{ns}/{lock}"), e))?;
    }
    Ok(())
}

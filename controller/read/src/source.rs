//! The one read of an object's pass (docs/architecture.md, "Reading an object"). [`read`] makes
//! every read a pass needs, in the pass's order, and builds the snapshot the core plans from.
//! Whoever reads, the same function decides what is read, when the state lock is checked and
//! how an inputs Secret of another object is treated; a [`Source`] supplies only what differs:
//!
//! | | the controller's pass | a person's live read ([`crate::live`]) |
//! | --- | --- | --- |
//! | Jobs and pods, a cluster's members | the reflector stores | listed live |
//! | an active Job that vanished | checked live and recorded | checked live, not recorded |
//! | outputs that did not fit a result | read from the outputs Secret | not read (they change what booking stores, never the decision) |
//! | tenant policy, name conflict, runner configuration | checked (the controller holds the flags) | the verdict the controller last wrote |
//!
//! Offline `explain` builds the same snapshot from files with the same pure assembly
//! (`captf_core::assemble`) and the same lock rule ([`captf_core::assemble::lock_is_checked`]).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};

use captf_shared::binding::{self, Binding, History, Verdict};
use captf_shared::inputs::Inputs;
use captf_shared::names;
use captf_shared::types::{CaptfObject, TerraformStatus};

use captf_core::assemble::{self, records_of, snapshot_of};
use captf_core::ident::Ident;
use captf_core::interrupted::Checked;
use captf_core::lock::LockState;
use captf_core::record::{self, JobRecord};
use captf_core::snapshot::{Holds, InputsHash, Snapshot, object_status};

use crate::api;
use crate::errors::Error;
use crate::pause;

/// The verdicts that belong to whoever holds the controller's configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdicts {
    /// The tenant policy's message for a spec outside it.
    pub policy_violation: Option<String>,
    /// Something under the object's names is another object's.
    pub name_conflict: Option<String>,
    /// State released under the object's names that it does not adopt (`captf_core::adoption`).
    pub unadopted_state: Option<String>,
    /// What the runner pods mount from the namespace is missing.
    pub runner_config_unavailable: Option<String>,
}

/// What differs between readers (see the module doc).
#[allow(async_fn_in_trait)]
pub trait Source {
    /// The client for the reads every reader makes live.
    fn client(&self) -> &kube::Client;

    /// The object's Jobs (only names it can produce, owned by it) and their pods. `None`: not
    /// known yet (the stores lag the live status); look again shortly.
    async fn jobs_and_pods(&self, id: &Ident, status: &TerraformStatus) -> Result<Option<(Vec<Job>, Vec<Pod>)>, Error>;

    /// The check of `status.activeJob` when it is not among the `listed` Jobs.
    async fn check_active(&self, id: &Ident, active: Option<&str>, listed: &[String]) -> Result<Checked, Error>;

    /// The outputs that did not fit a runner's result, for the Jobs this pass books, with
    /// `from_secrets` (the inputs' values that came from Secrets) masked in them.
    async fn read_outputs(
        &self,
        id: &Ident,
        records: &mut [JobRecord],
        baseline: u32,
        from_secrets: &[String],
    ) -> Result<(), Error>;

    /// A cluster's members and their active Jobs, or a member's cluster lease.
    async fn member_holds(&self, id: &Ident, deleting: bool) -> Result<Holds, Error>;

    /// The verdicts of the controller's configuration. `foreign_inputs` is the conflict found
    /// in this read (the inputs Secret is another object's), which stands whoever reads.
    async fn verdicts(
        &self,
        object: &CaptfObject,
        id: &Ident,
        inputs_secret: Option<&Secret>,
        foreign_inputs: Option<String>,
    ) -> Result<Verdicts, Error>;
}

/// Everything one read of an object found.
#[derive(Clone, Debug)]
pub struct Read {
    pub id: Ident,
    pub jobs: Vec<Job>,
    pub pods: Vec<Pod>,
    /// The object's inputs Secret (`None` when absent or another object's).
    pub inputs_secret: Option<Secret>,
    /// What the check of an active Job that vanished did.
    pub checked: Checked,
    /// The inputs, or why they do not resolve.
    pub resolved: Result<Inputs, String>,
    /// The status as read.
    pub original: TerraformStatus,
    pub snap: Snapshot,
}

/// Why a read has no snapshot yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pending {
    /// The Jobs are not known yet (the stores lag): look again shortly.
    Sync,
    /// Our copy of the object is older than the live one: look again.
    Stale,
}

/// The inputs Secret, unless it is another object's: then the conflict's message.
fn own_inputs_secret(id: &Ident, secret: Option<Secret>) -> (Option<Secret>, Option<String>) {
    let Some(s) = secret else { return (None, None) };
    if binding::owned_by(&s.metadata, &id.uid) {
        return (Some(s), None);
    }
    let why = match binding::verdict(Some(&s.metadata), Binding::Owner, &id.uid, &History::default()) {
        Verdict::Foreign(why) => why,
        _ => "is not owned by this object".to_string(),
    };
    let what = format!("Secret {}/{}", id.namespace, names::inputs_secret_name(&id.suffix));
    (None, Some(binding::conflict_message(&what, &why)))
}

/// Read everything one pass over `object` needs from `source`, and build its snapshot.
pub async fn read(source: &impl Source, object: &CaptfObject, id: Ident) -> Result<Result<Read, Pending>, Error> {
    let client = source.client();
    let original = object_status(object).cloned().unwrap_or_default();
    let Some((jobs, pods)) = source.jobs_and_pods(&id, &original).await? else {
        return Ok(Err(Pending::Sync));
    };
    let found = records_of(&id, &jobs, &pods);
    for e in &found.ignored {
        tracing::warn!("ignoring a Job of {}: {e}", id.what());
    }
    let mut records = found.records;
    let secret = api::secret(client, &id.namespace, &names::inputs_secret_name(&id.suffix)).await?;
    let (inputs_secret, foreign_inputs) = own_inputs_secret(&id, secret);

    // An apply Job deleted while it ran (docs/rules.md).
    let listed: Vec<String> = records.iter().map(|r| r.name.clone()).collect();
    let checked = source
        .check_active(&id, original.active_job.as_deref(), &listed)
        .await?;
    if checked == Checked::Stale {
        return Ok(Err(Pending::Stale));
    }
    let mut status = original.clone();
    if matches!(checked, Checked::Recorded(_) | Checked::Forgot(_)) {
        status.active_job = None;
    }

    // Outputs that did not fit a result, for the Jobs this pass books: the values the Jobs were
    // given from Secrets (the inputs Secret they mounted) are masked in them.
    let baseline = record::watermark_baseline(&records, record::status_watermark(&status));
    let from_secrets = inputs_secret
        .as_ref()
        .and_then(captf_core::inputs_secret::stored_inputs)
        .map(|inputs| captf_core::inputs::secret_input_values(object.terraform_spec(), &inputs))
        .unwrap_or_default();
    source.read_outputs(&id, &mut records, baseline, &from_secrets).await?;

    // The lock check, only when no Job is active (docs/rules.md).
    let lock = if assemble::lock_is_checked(&records, status.active_job.as_deref()) {
        api::lock_state(client, &id).await?
    } else {
        LockState::Free
    };

    let cluster = pause::cluster_view(client, object, &id).await;
    let resolved = api::resolve_inputs(client, object, &id, &cluster).await?;
    let inputs_hash = match &resolved {
        Ok(i) => InputsHash::Known(i.hash()),
        Err(e) => InputsHash::Unresolved(e.to_string()),
    };
    let deleting = object.metadata().deletion_timestamp.is_some();
    let mut holds = source.member_holds(&id, deleting).await?;
    pause::live_holds(client, object, &id, &cluster, &mut holds).await?;
    let mut snap = snapshot_of(
        object,
        records,
        inputs_secret.as_ref(),
        &checked,
        inputs_hash,
        lock,
        holds,
    )
    .map_err(|source| Error::Snapshot {
        kind: id.kind,
        name: id.name.clone(),
        source,
    })?;
    // References to CAPTF's own Secrets, by name and by what the named Secrets carry now.
    snap.forbidden_reference = api::forbidden_references(client, object, &id).await?;
    let v = source
        .verdicts(object, &id, inputs_secret.as_ref(), foreign_inputs)
        .await?;
    snap.policy_violation = v.policy_violation;
    snap.name_conflict = v.name_conflict;
    snap.unadopted_state = v.unadopted_state;
    snap.runner_config_unavailable = v.runner_config_unavailable;
    Ok(Ok(Read {
        id,
        jobs,
        pods,
        inputs_secret,
        checked,
        resolved: resolved.map_err(|e| e.to_string()),
        original,
        snap,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    fn id() -> Ident {
        Ident {
            kind: captf_shared::Kind::TerraformCluster,
            namespace: "default".into(),
            name: "prod-eu".into(),
            uid: "u1".into(),
            suffix: "prod-eu-tc".into(),
            object_id: "225654031b7f".into(),
            cluster_name: None,
        }
    }

    fn secret_owned_by(uid: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("captf-inputs-prod-eu-tc".into()),
                namespace: Some("default".into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "infrastructure.cluster.x-k8s.io/v1beta2".into(),
                    kind: "TerraformCluster".into(),
                    name: "prod-eu".into(),
                    uid: uid.into(),
                    controller: Some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn an_inputs_secret_of_another_object_is_neither_record_nor_inputs_but_a_name_conflict() {
        let (own, conflict) = own_inputs_secret(&id(), Some(secret_owned_by("u1")));
        assert!(own.is_some());
        assert_eq!(conflict, None);
        let (own, conflict) = own_inputs_secret(&id(), Some(secret_owned_by("someone-else")));
        assert!(own.is_none());
        let m = conflict.unwrap_or_default();
        assert!(m.contains("Secret default/captf-inputs-prod-eu-tc"), "{m}");
        assert_eq!(own_inputs_secret(&id(), None), (None, None));
    }
}

//! One object's pass read live and planned without writing anything: what a person's tool
//! (`kubectl captf`) shows. The reads are the reconcile pass's ([`super::controller`]) made
//! without the reflector caches: the object's Jobs and pods, the inputs Secret, the check of an
//! active Job that vanished, the state lock and its holder pod, the inputs, the holds and the
//! owning Cluster's pause. The vanished-Job check is decided, not recorded, and outputs kept in
//! the outputs Secret are not read (they change what booking stores, never the decision).
//!
//! The snapshot is built by the same [`captf_core::assemble::snapshot_of`] the pass uses, so
//! [`captf_core::plan::plan`] of it is the controller's plan for the object at that time.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams};

use captf_shared::conditions;
use captf_shared::types::{CaptfObject, TerraformCluster, TerraformMachine, TerraformMachinePool};
use captf_shared::{Kind, keys, names};

use super::errors::{ApiAction, Error};
use super::gather;
use super::kinds::CaptfKind;
use super::pause;
use captf_core::assemble::{records_of, snapshot_of};
use captf_core::ident::Ident;
use captf_core::interrupted::Checked;
use captf_core::interrupted::{ActiveJobCheck, ActiveJobReads, LiveJob, check_active_job};
use captf_core::lock::LockState;
use captf_core::record::JobRecord;
use captf_core::snapshot::{Holds, InputsHash, Snapshot, object_status};

/// What one object's pass would read now.
#[derive(Clone, Debug)]
pub struct LiveRead {
    pub object: CaptfObject,
    pub id: Ident,
    /// The object's Jobs (only names it can produce) and their pods, listed live.
    pub jobs: Vec<Job>,
    pub pods: Vec<Pod>,
    pub inputs_secret: Option<Secret>,
    /// What the check of an active Job that vanished decides (not recorded).
    pub active_check: ActiveJobCheck,
    pub snap: Snapshot,
}

async fn get_typed<K: CaptfKind>(client: &kube::Client, ns: &str, name: &str) -> Result<Option<CaptfObject>, Error> {
    Api::<K>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map(|o| o.map(|o| o.to_object()))
        .map_err(|e| Error::api(ApiAction::GetObject, format!("{} {ns}/{name}", K::KIND), e))
}

/// An object of a Job-running kind, read live; `None` when it does not exist.
pub async fn get_object(client: &kube::Client, kind: Kind, ns: &str, name: &str) -> Result<Option<CaptfObject>, Error> {
    match kind {
        Kind::TerraformCluster => get_typed::<TerraformCluster>(client, ns, name).await,
        Kind::TerraformMachinePool => get_typed::<TerraformMachinePool>(client, ns, name).await,
        Kind::TerraformMachine => get_typed::<TerraformMachine>(client, ns, name).await,
    }
}

async fn list_typed<K: CaptfKind>(
    client: &kube::Client,
    ns: Option<&str>,
    lp: &ListParams,
) -> Result<Vec<CaptfObject>, Error> {
    let api = match ns {
        Some(ns) => Api::<K>::namespaced(client.clone(), ns),
        None => Api::<K>::all(client.clone()),
    };
    let what = match ns {
        Some(ns) => format!("{} in namespace {ns}", K::KIND.plural()),
        None => format!("{} in all namespaces", K::KIND.plural()),
    };
    api.list(lp)
        .await
        .map(|l| l.items.iter().map(CaptfKind::to_object).collect())
        .map_err(|e| Error::api(ApiAction::ListMembers, what, e))
}

/// The objects of a kind in a namespace (`None`: all namespaces), read live.
pub async fn list_objects(
    client: &kube::Client,
    kind: Kind,
    ns: Option<&str>,
    lp: &ListParams,
) -> Result<Vec<CaptfObject>, Error> {
    match kind {
        Kind::TerraformCluster => list_typed::<TerraformCluster>(client, ns, lp).await,
        Kind::TerraformMachinePool => list_typed::<TerraformMachinePool>(client, ns, lp).await,
        Kind::TerraformMachine => list_typed::<TerraformMachine>(client, ns, lp).await,
    }
}

/// The holds of docs/rules.md, every one read live (the pass takes a cluster's members and
/// their Jobs from its caches).
pub async fn holds(client: &kube::Client, id: &Ident, deleting: bool) -> Result<Holds, Error> {
    let mut holds = Holds::default();
    let Some(cluster) = id.cluster_name.as_deref() else {
        return Ok(holds);
    };
    match id.kind {
        Kind::TerraformCluster => {
            let lp = ListParams::default().labels(&format!("{}={cluster}", keys::LABEL_CLUSTER_NAME));
            let mut candidates = Vec::new();
            for kind in [Kind::TerraformMachinePool, Kind::TerraformMachine] {
                if deleting {
                    for o in list_objects(client, kind, Some(&id.namespace), &lp).await? {
                        candidates.push((kind, o.metadata().clone()));
                    }
                }
                if holds.member_job_active.is_none() {
                    let lp = ListParams::default().labels(&format!(
                        "{}={},{}={cluster}",
                        keys::LABEL_KIND,
                        kind.as_str(),
                        keys::LABEL_CLUSTER_NAME
                    ));
                    let jobs = Api::<Job>::namespaced(client.clone(), &id.namespace)
                        .list(&lp)
                        .await
                        .map_err(|e| Error::api(ApiAction::ListJobs, format!("of the members of {}", id.what()), e))?;
                    holds.member_job_active = jobs
                        .items
                        .into_iter()
                        .find(|j| captf_core::outcome::terminal(j).is_none())
                        .and_then(|j| j.metadata.name);
                }
            }
            holds.members = gather::verified_members(client, id, cluster, candidates).await?;
        }
        Kind::TerraformMachinePool | Kind::TerraformMachine => {
            holds.cluster_lease_holder = gather::cluster_lease_holder(client, &id.namespace, cluster).await?;
        }
    }
    Ok(holds)
}

/// The tenant policy is the controller's (its flags): the verdict it last wrote,
/// `Ready=False/PolicyViolation`, stands for it.
fn policy_violation(object: &CaptfObject) -> Option<String> {
    let cs = object_status(object)?.conditions.as_deref()?;
    let ready = conditions::find(cs, conditions::READY)?;
    (ready.status == "False" && ready.reason == conditions::reason::POLICY_VIOLATION).then(|| ready.message.clone())
}

/// What is under the object's names is read before a Job starts: the verdict the controller last
/// wrote, `Ready=False/NameConflict`, stands for it.
fn name_conflict(object: &CaptfObject) -> Option<String> {
    let cs = object_status(object)?.conditions.as_deref()?;
    let ready = conditions::find(cs, conditions::READY)?;
    (ready.status == "False" && ready.reason == conditions::reason::NAME_CONFLICT).then(|| ready.message.clone())
}

/// The platform's default Terraform CLI configuration is the controller's (its flags): the
/// verdict it last wrote, `Ready=False/RunnerConfigUnavailable`, stands for it.
fn runner_config_unavailable(object: &CaptfObject) -> Option<String> {
    let cs = object_status(object)?.conditions.as_deref()?;
    let ready = conditions::find(cs, conditions::READY)?;
    (ready.status == "False" && ready.reason == conditions::reason::RUNNER_CONFIG_UNAVAILABLE)
        .then(|| ready.message.clone())
}

/// Read everything one pass over `object` reads, live, and build its snapshot. Writes nothing.
pub async fn read(client: &kube::Client, object: CaptfObject) -> Result<LiveRead, Error> {
    let Some(kind) = object.job_kind() else {
        return Err(Error::Snapshot {
            kind: Kind::TerraformCluster,
            name: object.metadata().name.clone().unwrap_or_default(),
            source: captf_core::snapshot::SnapshotError::NotAJobKind {
                kind: object.kind_name(),
                name: object.metadata().name.clone().unwrap_or_default(),
            },
        });
    };
    let id = Ident::of(&object, kind)?;
    let (jobs, pods) = gather::live_jobs_and_pods(client, &id).await?;
    let read = records_of(&id, &jobs, &pods);
    for e in &read.ignored {
        tracing::warn!("ignoring a Job of {}: {e}", id.what());
    }
    let records = read.records;
    let inputs_secret = gather::secret(client, &id.namespace, &names::inputs_secret_name(&id.suffix)).await?;
    let status = object_status(&object).cloned().unwrap_or_default();

    // An active Job that vanished (docs/rules.md), decided from live reads; the object was
    // just read, so its status is the live one.
    let named_active = status
        .active_job
        .as_deref()
        .filter(|a| !a.is_empty() && !records.iter().any(|r| r.name == *a));
    let mut active_check = ActiveJobCheck::Nothing;
    if let Some(active) = named_active {
        let live_job = match gather::job(client, &id.namespace, active).await? {
            Some(_) => LiveJob::Found,
            None => LiveJob::NotFound,
        };
        active_check = check_active_job(&ActiveJobReads {
            kind,
            namespace: &id.namespace,
            name: &id.name,
            active_job: Some(active),
            live_job,
            live_active_job: Some(active),
            deleted_by_controller: false,
        });
    }
    let checked = match &active_check {
        ActiveJobCheck::Nothing => Checked::Nothing,
        ActiveJobCheck::RecordInterruptedApply { job } => Checked::Recorded(job.clone()),
        ActiveJobCheck::Forget { job } => Checked::Forgot(job.clone()),
    };

    // The lock check, only when no Job is active (docs/rules.md).
    let still_named = named_active.filter(|_| checked == Checked::Nothing);
    let lock = if records.iter().all(JobRecord::is_finished) && still_named.is_none() {
        gather::lock_state(client, &id).await?
    } else {
        LockState::Free
    };

    let resolved = gather::resolve_inputs(client, &object, &id).await?;
    let inputs_hash = match &resolved {
        Ok(i) => InputsHash::Known(i.hash()),
        Err(e) => InputsHash::Unresolved(e.to_string()),
    };
    let mut holds = holds(client, &id, object.metadata().deletion_timestamp.is_some()).await?;
    pause::live_holds(client, &object, &id, &mut holds).await?;
    let mut snap = snapshot_of(
        &object,
        records,
        inputs_secret.as_ref(),
        &checked,
        inputs_hash,
        lock,
        holds,
    )
    .map_err(|source| Error::Snapshot {
        kind,
        name: id.name.clone(),
        source,
    })?;
    snap.policy_violation = policy_violation(&object);
    snap.forbidden_reference = gather::forbidden_references(client, &object, &id).await?;
    snap.runner_config_unavailable = runner_config_unavailable(&object);
    snap.name_conflict = name_conflict(&object);
    Ok(LiveRead {
        object,
        id,
        jobs,
        pods,
        inputs_secret,
        active_check,
        snap,
    })
}

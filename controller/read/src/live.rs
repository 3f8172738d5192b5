//! One object's pass read live and planned without writing anything: what a person's tool
//! (`kubectl captf`) shows. It is the controller's read ([`crate::source::read`]) over a
//! [`Live`] source: the object's Jobs and pods and a cluster's members listed live instead of
//! from the reflector stores, the check of an active Job that vanished decided but not
//! recorded, outputs kept in the outputs Secret not read (they change what booking stores,
//! never the decision), and the verdicts of the controller's flags taken from what it last
//! wrote. So [`captf_core::plan::plan`] of the snapshot is the controller's plan for the object
//! at that time.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams};

use captf_shared::conditions;
use captf_shared::types::{CaptfObject, TerraformCluster, TerraformMachine, TerraformMachinePool, TerraformStatus};
use captf_shared::{Kind, keys};

use crate::api as gather;
use crate::errors::{ApiAction, Error};
use crate::kinds::CaptfKind;
use crate::source::{self, Pending, Source, Verdicts};
use captf_core::ident::Ident;
use captf_core::interrupted::{ActiveJobCheck, ActiveJobReads, Checked, LiveJob, check_active_job};
use captf_core::lock::LockState;
use captf_core::record::JobRecord;
use captf_core::snapshot::{Holds, Snapshot, object_status};

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
    /// While a Job of the object runs, a lock on its state held by someone else: the Job waits
    /// for it (up to `lockTimeoutSeconds`). Read for a person only: the pass checks the lock
    /// only while no Job is active, so the snapshot says nothing of it then.
    pub waited_on: Option<LockState>,
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
                    // Only a verified member's Job holds the cluster; the labels are a claim.
                    for j in jobs
                        .items
                        .into_iter()
                        .filter(|j| captf_core::outcome::terminal(j).is_none())
                    {
                        if gather::is_member_job(client, id, cluster, &j.metadata, None).await? {
                            holds.member_job_active = j.metadata.name;
                            break;
                        }
                    }
                }
            }
            let m = gather::verified_members(client, id, cluster, candidates).await?;
            (holds.members, holds.unverified_members) = (m.members, m.unverified);
        }
        Kind::TerraformMachinePool | Kind::TerraformMachine => {
            holds.cluster_lease_holder = gather::cluster_lease_holder(client, &id.namespace, cluster).await?;
        }
    }
    Ok(holds)
}

/// The verdict the controller last wrote as `UpToDate=False/<reason>`, which stands for its
/// check of its own flags.
fn last_verdict(object: &CaptfObject, reason: &str) -> Option<String> {
    let cs = object_status(object)?.conditions.as_deref()?;
    let up = conditions::find(cs, conditions::UP_TO_DATE)?;
    (up.status == "False" && up.reason == reason).then(|| up.message.clone())
}

/// A person's live source of a pass's reads (see the module doc).
pub struct Live<'a> {
    pub client: &'a kube::Client,
}

impl Source for Live<'_> {
    fn client(&self) -> &kube::Client {
        self.client
    }

    async fn jobs_and_pods(
        &self,
        id: &Ident,
        _status: &TerraformStatus,
    ) -> Result<Option<(Vec<Job>, Vec<Pod>)>, Error> {
        gather::live_jobs_and_pods(self.client, id).await.map(Some)
    }

    async fn check_active(&self, id: &Ident, active: Option<&str>, listed: &[String]) -> Result<Checked, Error> {
        let Some(active) = active.filter(|a| !a.is_empty() && !listed.iter().any(|l| l == a)) else {
            return Ok(Checked::Nothing);
        };
        let live_job = match gather::job(self.client, &id.namespace, active).await? {
            Some(_) => LiveJob::Found,
            None => LiveJob::NotFound,
        };
        // The object was just read: its status is the live one.
        let decided = check_active_job(&ActiveJobReads {
            kind: id.kind,
            namespace: &id.namespace,
            name: &id.name,
            active_job: Some(active),
            live_job,
            live_active_job: Some(active),
            deleted_by_controller: false,
        });
        Ok(match decided {
            ActiveJobCheck::Nothing => Checked::Nothing,
            ActiveJobCheck::RecordInterruptedApply { job } => Checked::Recorded(job),
            ActiveJobCheck::Forget { job } => Checked::Forgot(job),
        })
    }

    async fn read_outputs(
        &self,
        _id: &Ident,
        _records: &mut [JobRecord],
        _baseline: u32,
        _from_secrets: &[String],
    ) -> Result<(), Error> {
        Ok(())
    }

    async fn member_holds(&self, id: &Ident, deleting: bool) -> Result<Holds, Error> {
        holds(self.client, id, deleting).await
    }

    async fn verdicts(
        &self,
        object: &CaptfObject,
        _id: &Ident,
        _inputs_secret: Option<&Secret>,
        foreign_inputs: Option<String>,
    ) -> Result<Verdicts, Error> {
        Ok(Verdicts {
            policy_violation: last_verdict(object, conditions::reason::POLICY_VIOLATION),
            name_conflict: foreign_inputs.or_else(|| last_verdict(object, conditions::reason::NAME_CONFLICT)),
            unadopted_state: last_verdict(object, conditions::reason::RELEASED_STATE_NOT_ADOPTED),
            runner_config_unavailable: last_verdict(object, conditions::reason::RUNNER_CONFIG_UNAVAILABLE),
        })
    }
}

/// What the check of an active Job that vanished decided, as `explain` renders it.
fn active_check_of(checked: &Checked) -> ActiveJobCheck {
    match checked {
        Checked::Recorded(job) => ActiveJobCheck::RecordInterruptedApply { job: job.clone() },
        Checked::Forgot(job) => ActiveJobCheck::Forget { job: job.clone() },
        Checked::Nothing | Checked::Stale => ActiveJobCheck::Nothing,
    }
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
    let what = id.what();
    // The live source lists the Jobs and never finds its copy stale: neither happens here.
    let read = source::read(&Live { client }, &object, id)
        .await?
        .map_err(|p| Error::Pending {
            what,
            why: match p {
                Pending::Sync => "its Jobs are not listed",
                Pending::Stale => "its copy is older than the live object",
            },
        })?;
    let waited_on = match read.snap.active_job() {
        Some(_) => match gather::lock_state(client, &read.id).await? {
            held @ (LockState::Foreign { .. } | LockState::Unparsable { .. }) => Some(held),
            _ => None,
        },
        None => None,
    };
    Ok(LiveRead {
        waited_on,
        active_check: active_check_of(&read.checked),
        object,
        id: read.id,
        jobs: read.jobs,
        pods: read.pods,
        inputs_secret: read.inputs_secret,
        snap: read.snap,
    })
}

//! The plain-data view of an object and its Jobs that `decide` takes, and the pure helpers that
//! build it from what the reconciler (or `explain`) read.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::jiff::Timestamp;

use captf_shared::conditions;
use captf_shared::defaults::{self, Effective};
use captf_shared::keys;
use captf_shared::names;
use captf_shared::types::{CaptfObject, TerraformStatus};
use captf_shared::validation;
use captf_shared::{Kind, Op};

use super::lock::{HolderPod, LockLease, LockState};
use super::record::{self, JobRecord};

/// The durable record on the inputs Secret (docs/api.md).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DurableRecord {
    pub applied_inputs_hash: Option<String>,
    pub interrupted_apply: Option<String>,
    pub last_drift_check: Option<Timestamp>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SnapshotError {
    #[error(
        "{kind} {name} runs no Jobs: explain and decide take a TerraformCluster, TerraformMachinePool or TerraformMachine"
    )]
    NotAJobKind { kind: &'static str, name: String },
    #[error("metadata.{0} is missing")]
    MissingMeta(&'static str),
    #[error("metadata.annotations.{annotation}: {value:?} is not an RFC 3339 time")]
    BadTime { annotation: &'static str, value: String },
}

impl DurableRecord {
    /// Read the record from the inputs Secret's annotations.
    pub fn from_secret(secret: &Secret) -> Result<DurableRecord, SnapshotError> {
        let ann = secret.metadata.annotations.as_ref();
        let get = |k: &str| ann.and_then(|a| a.get(k)).filter(|v| !v.is_empty()).cloned();
        let last_drift_check = match get(keys::ANNOTATION_LAST_DRIFT_CHECK) {
            Some(v) => Some(v.parse::<Timestamp>().map_err(|_| SnapshotError::BadTime {
                annotation: keys::ANNOTATION_LAST_DRIFT_CHECK,
                value: v.clone(),
            })?),
            None => None,
        };
        Ok(DurableRecord {
            applied_inputs_hash: get(keys::ANNOTATION_APPLIED_INPUTS_HASH),
            interrupted_apply: get(keys::ANNOTATION_INTERRUPTED_APPLY),
            last_drift_check,
        })
    }
}

/// The current inputs hash, or why it could not be computed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InputsHash {
    Known(String),
    Unresolved(String),
}

impl InputsHash {
    pub fn known(&self) -> Option<&str> {
        match self {
            InputsHash::Known(h) => Some(h),
            InputsHash::Unresolved(_) => None,
        }
    }
}

/// Facts from outside the object that hold a Job back (docs/rules.md).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holds {
    /// The state cannot be read (`StateUnreadable`): holds a deletion. [`Snapshot::new`] also
    /// sets it when the state is empty although inputs were applied
    /// ([`super::state::missing_after_apply`]).
    pub state_unreadable: Option<String>,
    /// The state Secret holds no state (read on deletion, with `state_unreadable`).
    pub state_empty: bool,
    /// A TerraformCluster's member machine pools and machines that still exist: hold its deletion.
    pub members: Vec<String>,
    /// Read with `members`: the machine pools and machines labelled with the cluster that are not
    /// verified members (`crate::membership`). They hold nothing; a person is told so.
    pub unverified_members: Vec<crate::membership::Unverified>,
    /// A member's or machine's Job may not start: the cluster lease is held by this live Job.
    pub cluster_lease_holder: Option<String>,
    /// A TerraformCluster's apply or destroy may not start: this member has an active Job.
    pub member_job_active: Option<String>,
    /// Cluster API pause (`Cluster.spec.paused`).
    pub cluster_paused: bool,
    /// The Cluster API `Cluster` exists and its infrastructure is not provisioned yet: a machine
    /// pool's or machine's first apply waits.
    pub cluster_infrastructure_pending: bool,
    /// A `Start` may not run yet: the limits on running Jobs are reached (`Queued`). The
    /// object's place, in words (`crate::queue::Place`); set by the controller, which alone
    /// counts every namespace's Jobs.
    pub queued: Option<String>,
}

/// Everything `decide` looks at.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub generation: Option<i64>,
    pub deletion_timestamp: Option<Timestamp>,
    /// `captf.io/approve-plan`.
    pub approve_plan: Option<String>,
    /// `captf.io/approved-by`: who approved it.
    pub approved_by: Option<String>,
    /// `captf.io/approvals-required`, read (`captf_shared::approvals`; a value that does not read
    /// counts as the most any policy asks), `captf.io/approvers` and `captf.io/spec-changed-by`.
    pub approvals_required: Option<u32>,
    pub approvers: Vec<String>,
    pub spec_changed_by: Option<String>,
    /// `captf.io/refresh`, parsed (an unparsable value is no request).
    pub refresh_requested: Option<Timestamp>,
    /// `captf.io/reconcile-now`, parsed (an unparsable value is no request), with who and why.
    pub reconcile_requested: Option<Timestamp>,
    pub reconcile_by: Option<String>,
    pub reconcile_reason: Option<String>,
    pub spec: Effective,
    /// The validation message when the spec is invalid.
    pub invalid: Option<String>,
    /// The tenant policy's message when the spec chooses what it does not allow (set by the
    /// caller, which holds the policy; see `captf_shared::policy`).
    pub policy_violation: Option<String>,
    /// The spec's references to CAPTF's own Secrets, by name or by what the Secret carries,
    /// naming each field and Secret (set by the caller, which reads the Secrets; see
    /// `captf_shared::references`).
    pub forbidden_reference: Option<String>,
    /// Why the runner pods cannot get what they mount from the object's namespace (the Terraform
    /// CLI configuration's ConfigMap or key is missing), naming the field; set by the caller,
    /// which reads the ConfigMap (see `captf_shared::pod::cli_config_problem`).
    pub runner_config_unavailable: Option<String>,
    /// Something under the object's names belongs to another object (`captf_shared::binding`),
    /// naming it; set by the caller, which reads those objects.
    pub name_conflict: Option<String>,
    /// State released under the object's names by an earlier object of its name, which the
    /// object does not adopt (`crate::adoption`), saying how to; set by the caller.
    pub unadopted_state: Option<String>,
    /// `spec.paused`, the Cluster API pause annotation or the paused Cluster.
    pub paused: bool,
    pub status: TerraformStatus,
    pub durable: DurableRecord,
    pub inputs_hash: InputsHash,
    /// The hash of the inputs the inputs Secret holds (what a destroy runs with when the spec's
    /// inputs no longer resolve, and what a successful apply records as applied).
    pub stored_inputs_hash: Option<String>,
    /// The object's Jobs, newest first.
    pub jobs: Vec<JobRecord>,
    pub lock: LockState,
    pub holds: Holds,
}

impl Snapshot {
    /// Build the snapshot of a Job-running object. `jobs` may come in any order.
    pub fn new(
        object: &CaptfObject,
        mut jobs: Vec<JobRecord>,
        durable: DurableRecord,
        inputs_hash: InputsHash,
        lock: LockState,
        mut holds: Holds,
    ) -> Result<Snapshot, SnapshotError> {
        let meta = object.metadata();
        let name = meta.name.clone().ok_or(SnapshotError::MissingMeta("name"))?;
        let kind = object.job_kind().ok_or_else(|| SnapshotError::NotAJobKind {
            kind: object.kind_name(),
            name: name.clone(),
        })?;
        let namespace = meta.namespace.clone().unwrap_or_else(|| "default".to_string());
        let ann = |k: &str| meta.annotations.as_ref().and_then(|a| a.get(k)).cloned();
        let spec = defaults::effective(object.terraform_spec());
        let report = validation::validate_create(object);
        let status = object_status(object).cloned().unwrap_or_default();
        record::sort_newest_first(&mut jobs);
        if holds.state_unreadable.is_none() {
            // The durable record moves with the object (the status does not): either says so.
            let applied = durable
                .applied_inputs_hash
                .as_deref()
                .or(status.applied_inputs_hash.as_deref());
            let secret = names::state_secret_name(&names::suffix(kind, &namespace, &name));
            holds.state_unreadable = super::state::missing_after_apply(&secret, holds.state_empty, applied);
        }
        Ok(Snapshot {
            kind,
            namespace,
            generation: meta.generation,
            deletion_timestamp: meta.deletion_timestamp.as_ref().map(|t| t.0),
            approve_plan: ann(keys::ANNOTATION_APPROVE_PLAN).filter(|v| !v.is_empty()),
            approved_by: ann(keys::ANNOTATION_APPROVED_BY).filter(|v| !v.is_empty()),
            approvals_required: captf_shared::approvals::approvals_required_or_strictest(
                ann(keys::ANNOTATION_APPROVALS_REQUIRED).as_deref(),
            ),
            approvers: captf_shared::approvals::parse_approvers(ann(keys::ANNOTATION_APPROVERS).as_deref()),
            spec_changed_by: ann(keys::ANNOTATION_SPEC_CHANGED_BY).filter(|v| !v.is_empty()),
            refresh_requested: ann(keys::ANNOTATION_REFRESH).and_then(|v| v.parse().ok()),
            reconcile_requested: ann(keys::ANNOTATION_RECONCILE_NOW).and_then(|v| v.parse().ok()),
            reconcile_by: ann(keys::ANNOTATION_RECONCILE_NOW_BY).filter(|v| !v.is_empty()),
            reconcile_reason: ann(keys::ANNOTATION_RECONCILE_NOW_REASON).filter(|v| !v.is_empty()),
            paused: super::pause::object_paused(object) || holds.cluster_paused,
            spec,
            invalid: (!report.is_valid()).then(|| report.message()),
            policy_violation: None,
            forbidden_reference: None,
            runner_config_unavailable: None,
            name_conflict: None,
            unadopted_state: None,
            status,
            durable,
            inputs_hash,
            stored_inputs_hash: None,
            jobs,
            lock,
            holds,
            name,
        })
    }

    /// The newest success of `op`: the newest succeeded Job, or `status.lastSuccessTime`.
    pub fn last_success(&self, op: Op) -> Option<Timestamp> {
        let from_jobs = self
            .jobs
            .iter()
            .find(|r| r.op == op && r.succeeded())
            .and_then(JobRecord::time);
        let from_status = self
            .status
            .last_success_time
            .as_ref()
            .and_then(|m| m.get(op.as_str()))
            .map(|t| t.0);
        from_jobs.max(from_status)
    }

    /// The last successful drift check: the durable record, the status, or the newest succeeded drift Job.
    pub fn last_drift_check(&self) -> Option<Timestamp> {
        self.durable
            .last_drift_check
            .max(self.status.last_drift_check_time.as_ref().map(|t| t.0))
            .max(self.last_success(Op::Drift))
    }

    /// The Job that is active: an unfinished Job, or `status.activeJob` unless it is booked finished.
    pub fn active_job(&self) -> Option<&str> {
        if let Some(r) = self.jobs.iter().find(|r| !r.is_finished()) {
            return Some(&r.name);
        }
        let named = self.status.active_job.as_deref().filter(|j| !j.is_empty())?;
        (!self.jobs.iter().any(|r| r.name == named)).then_some(named)
    }

    /// Has an apply succeeded since the last successful drift check (finished at `check`)? By Job
    /// order while that check's Job is listed: an object's Jobs run one at a time, so a newer
    /// Job ran after it even when both finished within the same second (timestamps have
    /// seconds). Else by time.
    pub fn applied_since_drift_check(&self, check: Timestamp) -> bool {
        let newer_apply = self
            .jobs
            .iter()
            .take_while(|r| !(r.op == Op::Drift && r.succeeded()))
            .any(|r| r.op == Op::Apply && r.succeeded());
        let listed = self.jobs.iter().any(|r| r.op == Op::Drift && r.succeeded());
        (listed && newer_apply) || self.last_success(Op::Apply).is_some_and(|t| t > check)
    }

    /// Did the newest successful drift check find drift? From its runner result, else `DriftDetected`.
    pub fn drift_found(&self) -> bool {
        let newest = self.jobs.iter().find(|r| r.op == Op::Drift && r.succeeded());
        if let Some(drift) = newest.and_then(|r| r.result.as_ref()).and_then(|res| res.drift) {
            return drift;
        }
        self.status
            .conditions
            .as_deref()
            .and_then(|cs| conditions::find(cs, conditions::DRIFT_DETECTED))
            .is_some_and(|c| c.status == "True")
    }
}

/// The status of any of the kinds.
pub fn object_status(object: &CaptfObject) -> Option<&TerraformStatus> {
    match object {
        CaptfObject::Cluster(o) => o.status.as_ref(),
        CaptfObject::MachinePool(o) => o.status.as_ref(),
        CaptfObject::Machine(o) => o.status.as_ref(),
        CaptfObject::MachineTemplate(_) | CaptfObject::ClusterTemplate(_) | CaptfObject::MachinePoolTemplate(_) => None,
    }
}

/// The lock Lease's holder and lock info.
pub fn lock_lease(lease: &Lease) -> LockLease {
    LockLease {
        holder_identity: lease.spec.as_ref().and_then(|s| s.holder_identity.clone()),
        lock_info: lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::ANNOTATION_TF_LOCK_INFO))
            .cloned(),
    }
}

/// The holder pod view of a pod read live (`None`: NotFound).
pub fn holder_pod(pod: Option<&Pod>) -> HolderPod {
    match pod {
        None => HolderPod::Gone,
        Some(p) => HolderPod::Present {
            phase: p.status.as_ref().and_then(|s| s.phase.clone()),
            terminating: p.metadata.deletion_timestamp.is_some(),
        },
    }
}

/// The name of the Job a pod belongs to: the `batch.kubernetes.io/job-name` (or `job-name`) label,
/// else its Job ownerReference.
pub fn pod_job_name(pod: &Pod) -> Option<&str> {
    let labels = pod.metadata.labels.as_ref();
    labels
        .and_then(|l| l.get("batch.kubernetes.io/job-name").or_else(|| l.get("job-name")))
        .map(String::as_str)
        .or_else(|| {
            pod.metadata
                .owner_references
                .as_ref()?
                .iter()
                .find(|o| o.kind == "Job")
                .map(|o| o.name.as_str())
        })
}

/// Index pods by their Job, keeping the newest pod (by creation time) of each Job.
pub fn pods_by_job(pods: &[Pod]) -> BTreeMap<&str, &Pod> {
    let mut out: BTreeMap<&str, &Pod> = BTreeMap::new();
    for p in pods {
        let Some(job) = pod_job_name(p) else { continue };
        let newer = out
            .get(job)
            .is_none_or(|old| p.metadata.creation_timestamp >= old.metadata.creation_timestamp);
        if newer {
            out.insert(job, p);
        }
    }
    out
}

//! `decide` (docs/rules.md): the ordered rules over a [`Snapshot`] and a time.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use captf_shared::types::{DeletionPolicy, Remediation};
use captf_shared::{Kind, Op};

use super::backoff::{self, Backoff};
use super::interrupted;
use super::outcome::Outcome;
use super::reason::Reason;
use super::record::JobRecord;
use super::remediation;
use super::snapshot::{InputsHash, Snapshot};

/// How often a hold that no watch resolves is looked at again (`InputsUnresolved`, deletion holds).
pub const HOLD_REQUEUE: Duration = Duration::from_secs(30);
/// How often a Job held back by the cluster lease or a member's Job is looked at again.
pub const CLUSTER_REQUEUE: Duration = Duration::from_secs(10);

/// Do nothing now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    pub reason: Reason,
    /// The op that is waiting (backoff, cluster holds), if any.
    pub op: Option<Op>,
    /// When to look again without a watch event; `None`: watch-driven.
    pub requeue_after: Option<Duration>,
    /// During backoff: when the op may start.
    pub not_before: Option<Timestamp>,
    /// The retry number the op will carry when it starts (backoff only).
    pub attempt: Option<u32>,
}

/// Start a Job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    pub op: Op,
    pub reason: Reason,
    /// The retry number: 1 + the failed Jobs of the op since its last success.
    pub attempt: u32,
    pub drift_remediation: bool,
    /// A stale lock's ID for `force-unlock` before the op.
    pub force_unlock_id: Option<String>,
    /// The approved plan hash the apply carries.
    pub approved_plan: Option<String>,
    /// Who approved it (`captf.io/approved-by`), when it carries one.
    pub approved_by: Option<String>,
    /// The end of the backoff this Job does not wait for, because a person asked for it
    /// (`captf.io/reconcile-now`, [`skips_backoff`]).
    pub skipped_backoff: Option<Timestamp>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Wait(Wait),
    Start(Start),
    /// Remove the finalizer.
    Finalize,
}

impl Decision {
    pub fn reason(&self) -> Option<Reason> {
        match self {
            Decision::Wait(w) => Some(w.reason),
            Decision::Start(s) => Some(s.reason),
            Decision::Finalize => None,
        }
    }

    pub fn is_start(&self) -> bool {
        matches!(self, Decision::Start(_))
    }
}

fn wait(reason: Reason, requeue_after: Option<Duration>) -> Decision {
    Decision::Wait(Wait {
        reason,
        op: None,
        requeue_after,
        not_before: None,
        attempt: None,
    })
}

/// How long from `now` until `t` (zero when `t` is past).
pub fn until(now: Timestamp, t: Timestamp) -> Duration {
    Duration::try_from(t.duration_since(now)).unwrap_or(Duration::ZERO)
}

/// The backoff of `op` in this snapshot.
pub fn backoff_of(s: &Snapshot, op: Op) -> Backoff {
    let booked = s.status.consecutive_failures.map_or(0, |c| c.get(op));
    backoff::backoff(&s.jobs, op, s.spec.failed_limit, s.last_success(op)).with_booked(booked)
}

/// A person's `captf.io/reconcile-now` skips the rest of a backoff, once: only the backoff of
/// failures that finished before the request. The retry it lets start counts as the next attempt,
/// and if it fails, its own backoff (longer, up to the cap) holds again until somebody asks
/// again with a newer time: a request cannot make a loop.
pub fn skips_backoff(s: &Snapshot, b: &Backoff) -> bool {
    s.reconcile_requested
        .zip(b.newest_failure)
        .is_some_and(|(asked, failed)| asked >= failed)
        || approval_skips_backoff(s, b)
}

/// An approved apply never waits out the backoff of failures older than the plan it applies: the
/// approval names a plan a later Job made (and stopped on) after those failures, and a person
/// gave it after reading that plan, so it is as much a request to go on as `reconcile-now`. Only
/// failures that finished before that Job are skipped: if the approved apply fails, its own
/// backoff holds, and the approval (bound to the plan's hash) cannot start a second Job of it.
pub fn approval_skips_backoff(s: &Snapshot, b: &Backoff) -> bool {
    if b.op != Op::Apply || approved_plan(s).is_none() {
        return false;
    }
    let stopped = s
        .jobs
        .iter()
        .find(|r| r.op == Op::Apply && matches!(r.outcome, Some(Outcome::Blocked | Outcome::PlanChanged)))
        .and_then(JobRecord::time);
    stopped
        .zip(b.newest_failure)
        .is_some_and(|(stopped, failed)| stopped >= failed)
}

/// Any `Start` passes the backoff of its op, then the cluster holds of docs/rules.md.
fn start(s: &Snapshot, now: Timestamp, op: Op, reason: Reason, drift_remediation: bool) -> Decision {
    let b = backoff_of(s, op);
    let skipped_backoff = (b.waiting(now) && skips_backoff(s, &b))
        .then_some(b.not_before)
        .flatten();
    if b.waiting(now) && skipped_backoff.is_none() {
        return Decision::Wait(Wait {
            reason: reason.backoff().unwrap_or(reason),
            op: Some(op),
            requeue_after: b.not_before.map(|nb| until(now, nb)),
            not_before: b.not_before,
            attempt: Some(b.attempt),
        });
    }
    let held = match s.kind {
        Kind::TerraformMachinePool | Kind::TerraformMachine => {
            s.holds.cluster_lease_holder.as_ref().map(|_| Reason::ClusterBusy)
        }
        Kind::TerraformCluster if matches!(op, Op::Apply | Op::Destroy) => {
            s.holds.member_job_active.as_ref().map(|_| Reason::MemberJobActive)
        }
        Kind::TerraformCluster => None,
    };
    if let Some(reason) = held {
        return Decision::Wait(Wait {
            reason,
            op: Some(op),
            requeue_after: Some(CLUSTER_REQUEUE),
            not_before: None,
            attempt: Some(b.attempt),
        });
    }
    Decision::Start(Start {
        op,
        reason,
        attempt: b.attempt,
        drift_remediation,
        force_unlock_id: s.lock.force_unlock_id().map(str::to_string),
        approved_plan: (op == Op::Apply).then(|| approved_plan(s)).flatten(),
        approved_by: (op == Op::Apply)
            .then(|| approved_plan(s).and_then(|_| approved_by(s)))
            .flatten(),
        skipped_backoff,
    })
}

/// Who approved the plan an apply carries, for its Job and its Event: everyone counted, in order
/// (`alice, bob`), else `captf.io/approved-by`.
fn approved_by(s: &Snapshot) -> Option<String> {
    let counted = approvals(s).counted;
    if counted.is_empty() {
        s.approved_by.clone()
    } else {
        Some(counted.join(", "))
    }
}

/// The op of the running Job `job`: from its record, else from its name.
fn active_op(s: &Snapshot, job: &str) -> Option<Op> {
    s.jobs
        .iter()
        .find(|r| r.name == job)
        .map(|r| r.op)
        .or_else(|| captf_shared::names::parse_job_name(s.kind, &s.namespace, &s.name, job).map(|(op, _)| op))
}

fn newest_finished(s: &Snapshot, op: Op) -> Option<&JobRecord> {
    s.jobs.iter().find(|r| r.op == op && r.is_finished())
}

/// The approvals of the plan `captf.io/approve-plan` names, counted (`captf_shared::approvals`).
pub fn approvals(s: &Snapshot) -> captf_shared::approvals::Tally {
    captf_shared::approvals::tally(
        s.approvals_required,
        &s.approvers,
        s.approved_by.as_deref(),
        s.spec_changed_by.as_deref(),
    )
}

/// The approval an apply carries: `captf.io/approve-plan` when it names the pending plan (or the
/// plan the newest apply stopped on), never a stale one, and only once enough people approved it
/// ([`approvals`]; one, unless `captf.io/approvals-required` asks for more).
pub fn approved_plan(s: &Snapshot) -> Option<String> {
    approval_names_the_waiting_plan(s).filter(|_| approvals(s).enough())
}

/// `captf.io/approve-plan` when it names the pending plan or the plan the newest apply stopped on,
/// however many approved it.
pub fn approval_names_the_waiting_plan(s: &Snapshot) -> Option<String> {
    let approval = s.approve_plan.as_deref()?;
    let pending = s.status.pending_plan.as_ref().map(|p| p.hash.as_str());
    let stopped_on = newest_finished(s, Op::Apply)
        .filter(|r| matches!(r.outcome, Some(Outcome::Blocked | Outcome::PlanChanged)))
        .and_then(|r| r.result.as_ref()?.plan_hash.as_deref());
    (pending == Some(approval) || stopped_on == Some(approval)).then(|| approval.to_string())
}

/// Are the current inputs the applied ones? The newest successful apply's `captf.io/inputs-hash`
/// label decides when it is there (booking writes its hash), else the durable record, else status.
pub fn inputs_applied(s: &Snapshot, current: &str) -> bool {
    let newest_success = s.jobs.iter().find(|r| r.op == Op::Apply && r.succeeded());
    if let Some(label) = newest_success
        .and_then(|r| r.inputs_hash.as_deref())
        .filter(|l| !l.is_empty())
    {
        return current.starts_with(label);
    }
    s.durable
        .applied_inputs_hash
        .as_deref()
        .or(s.status.applied_inputs_hash.as_deref())
        == Some(current)
}

/// Cluster API: a machine pool's or machine's infrastructure is made only once its Cluster's is
/// provisioned. Only the first apply waits (nothing was ever applied); later applies of a
/// machine whose Cluster is being changed are not held.
pub fn first_apply_waits_for_the_cluster(s: &Snapshot) -> bool {
    s.kind != Kind::TerraformCluster
        && s.holds.cluster_infrastructure_pending
        && s.durable.applied_inputs_hash.is_none()
        && s.status.applied_inputs_hash.is_none()
        && s.last_success(Op::Apply).is_none()
}

/// Rule 4: the newest apply stopped for a person and nothing they could change has changed.
fn awaiting_person(s: &Snapshot, current: &str) -> Option<Reason> {
    let newest = newest_finished(s, Op::Apply)?;
    let reason = match newest.outcome? {
        Outcome::Blocked => Reason::AwaitingApproval,
        Outcome::PlanChanged => Reason::PlanChanged,
        // A policy denied the plan: it waits for new inputs, or for a person to ask for a new
        // plan once the policy changed (policies are no inputs: `captf.io/reconcile-now`).
        Outcome::PolicyDenied => {
            let asked_since = s
                .reconcile_requested
                .zip(newest.time())
                .is_some_and(|(asked, denied)| asked > denied);
            if asked_since {
                return None;
            }
            Reason::PolicyDenied
        }
        _ => return None,
    };
    let inputs_changed = match newest.inputs_hash.as_deref().filter(|l| !l.is_empty()) {
        Some(label) => !current.starts_with(label),
        // Without the label: new inputs clear `pendingPlan`.
        None => s.status.pending_plan.is_none(),
    };
    // An approval that does not have its approvers yet changes nothing: the plan waits on.
    // Nor does any approval lift a policy's denial: a person approves plans, not exceptions.
    let approval_changed = reason != Reason::PolicyDenied
        && s.approve_plan.is_some()
        && s.approve_plan != newest.approved_plan
        && approvals(s).enough();
    (!inputs_changed && !approval_changed).then_some(reason)
}

/// Rule 8: a refresh requested after the last successful refresh, or outputs missing after a
/// successful apply that no refresh has followed. An apply known only from the durable record
/// (the status was lost: the object was moved by clusterctl or restored from a backup, and its
/// Jobs stayed behind) counts too: its outputs are read again by a refresh, never by re-applying.
fn refresh_due(s: &Snapshot) -> bool {
    let last_refresh = s.last_success(Op::Refresh);
    if let Some(asked) = s.refresh_requested
        && last_refresh.is_none_or(|t| asked > t)
    {
        return true;
    }
    let Some(applied) = s.last_success(Op::Apply) else {
        return s.durable.applied_inputs_hash.is_some() && s.status.outputs.is_none() && last_refresh.is_none();
    };
    let result_has_outputs = s
        .jobs
        .iter()
        .find(|r| r.op == Op::Apply && r.succeeded())
        .and_then(|r| r.result.as_ref())
        .is_some_and(|res| res.outputs.is_some() || res.outputs_in_secret);
    s.status.outputs.is_none() && !result_has_outputs && last_refresh.is_none_or(|t| t < applied)
}

/// When the next drift check is due (`None`: drift checks are disabled).
pub fn next_drift_check(s: &Snapshot, now: Timestamp) -> Option<Timestamp> {
    let interval = SignedDuration::try_from(s.spec.drift_interval?).ok()?;
    Some(match s.last_drift_check() {
        None => now,
        Some(last) => last.checked_add(interval).unwrap_or(Timestamp::MAX),
    })
}

/// The ordered rules of docs/rules.md. First rule that applies wins.
pub fn decide(s: &Snapshot, now: Timestamp) -> Decision {
    // 1.
    if s.invalid.is_some() {
        return wait(Reason::InvalidSpec, None);
    }
    // No Job of a spec outside the tenant policy starts, a destroy included: the webhook can be
    // bypassed, so this is where the policy holds.
    if s.policy_violation.is_some() {
        return wait(Reason::PolicyViolation, None);
    }
    // No Job, a destroy included, may read another object's state, inputs or outputs. A Secret
    // can gain or lose CAPTF's marks without a watch event here: look again now and then.
    if s.forbidden_reference.is_some() {
        return wait(Reason::ForbiddenReference, Some(HOLD_REQUEUE));
    }
    // Something under the object's names is another object's: no Job may use it, a destroy
    // least of all (it would destroy the other object's infrastructure). Looked at again now
    // and then: removing the conflicting object sends no event of the object's own.
    if s.name_conflict.is_some() {
        return wait(Reason::NameConflict, Some(HOLD_REQUEUE));
    }
    // State an earlier object of the name released and this one does not adopt
    // (`crate::adoption`): no Job may use it. The object never bound it, so it has nothing of
    // its own to destroy: deleted, it just goes (its finalizer leaves the state as it is).
    if s.unadopted_state.is_some() {
        if s.deletion_timestamp.is_some() && !s.paused && s.active_job().is_none() {
            return Decision::Finalize;
        }
        return wait(Reason::ReleasedStateNotAdopted, Some(HOLD_REQUEUE));
    }
    // A pod that mounts a missing ConfigMap never starts: no Job, a destroy included, until it
    // is there. ConfigMaps are not watched, so look again now and then.
    if s.runner_config_unavailable.is_some() {
        return wait(Reason::RunnerConfigUnavailable, Some(HOLD_REQUEUE));
    }
    if s.paused {
        // A paused Cluster API Cluster is not watched: look again now and then. The object's own
        // spec.paused and annotation come with a watch event when they change.
        return wait(Reason::Paused, s.holds.cluster_paused.then_some(HOLD_REQUEUE));
    }
    // 2.
    if let Some(job) = s.active_job() {
        // The wait names the running Job's op (`kubectl get`'s OP column shows it).
        return Decision::Wait(Wait {
            reason: Reason::JobActive,
            op: active_op(s, job),
            requeue_after: None,
            not_before: None,
            attempt: None,
        });
    }
    // 3.
    if let Some(deleted) = s.deletion_timestamp {
        if s.spec.deletion_policy == DeletionPolicy::Orphan {
            return Decision::Finalize;
        }
        let destroyed = s
            .jobs
            .iter()
            .any(|r| r.op == Op::Destroy && r.succeeded() && r.time().is_none_or(|t| t >= deleted))
            || s.last_success(Op::Destroy).is_some_and(|t| t >= deleted);
        if destroyed {
            return Decision::Finalize;
        }
        if s.holds.state_unreadable.is_some() {
            return wait(Reason::StateUnreadable, Some(HOLD_REQUEUE));
        }
        if !s.holds.members.is_empty() {
            return wait(Reason::MembersExist, Some(HOLD_REQUEUE));
        }
        // A destroy runs with the spec's inputs, or with those the inputs Secret holds when the
        // spec's no longer resolve; with neither there is nothing to run it with.
        if matches!(s.inputs_hash, InputsHash::Unresolved(_)) && s.stored_inputs_hash.is_none() {
            return match start(s, now, Op::Destroy, Reason::Deleting, false) {
                Decision::Start(st) => Decision::Wait(Wait {
                    reason: Reason::InputsUnresolved,
                    op: Some(st.op),
                    requeue_after: Some(HOLD_REQUEUE),
                    not_before: None,
                    attempt: Some(st.attempt),
                }),
                waiting => waiting,
            };
        }
        return start(s, now, Op::Destroy, Reason::Deleting, false);
    }
    let current = match &s.inputs_hash {
        InputsHash::Known(h) => h.as_str(),
        InputsHash::Unresolved(_) => return wait(Reason::InputsUnresolved, Some(HOLD_REQUEUE)),
    };
    // 4.
    if let Some(reason) = awaiting_person(s, current) {
        return wait(reason, None);
    }
    // 5.
    if interrupted::interrupted_apply_pending(
        s.kind,
        &s.namespace,
        &s.name,
        s.durable.interrupted_apply.as_deref(),
        &s.jobs,
    ) {
        return start(s, now, Op::Apply, Reason::InterruptedApply, false);
    }
    // 6.
    if !inputs_applied(s, current) {
        if first_apply_waits_for_the_cluster(s) {
            return Decision::Wait(Wait {
                reason: Reason::ClusterInfrastructurePending,
                op: Some(Op::Apply),
                requeue_after: Some(HOLD_REQUEUE),
                not_before: None,
                attempt: None,
            });
        }
        return start(s, now, Op::Apply, Reason::InputsChanged, false);
    }
    // 7.
    let last_check = s.last_drift_check();
    // Drift found by the last successful check and no apply has succeeded since.
    let drift_pending = last_check.is_some_and(|check| s.drift_found() && !s.applied_since_drift_check(check));
    let mut at_remediation_limit = false;
    if drift_pending && s.spec.remediation == Remediation::Auto {
        if remediation::remediation(&s.jobs, last_check, s.spec.failed_limit).allowed() {
            return start(s, now, Op::Apply, Reason::DriftRemediation, true);
        }
        // At the limit the drift stays pending; the drift check (rule 9) must still run to reset it.
        at_remediation_limit = true;
    }
    // 8.
    if refresh_due(s) {
        return start(s, now, Op::Refresh, Reason::RefreshRequested, false);
    }
    // 9.
    let next_check = next_drift_check(s, now);
    if next_check.is_some_and(|t| t <= now) {
        return start(s, now, Op::Drift, Reason::DriftCheckDue, false);
    }
    // 10.
    let reason = if at_remediation_limit {
        Reason::RemediationLimit
    } else {
        Reason::Idle
    };
    wait(reason, next_check.map(|t| until(now, t)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::lock::LockState;
    use crate::record::tests::rec;
    use crate::snapshot::{DurableRecord, Holds};
    use captf_shared::protocol::{Phase, RunResult, RunnerResult};
    use captf_shared::types::{
        CaptfObject, DriftSpec, JobsSpec, ModuleSpec, PendingPlan, TerraformCluster, TerraformClusterSpec,
        TerraformSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use proptest::prelude::*;

    const HASH: &str = "aaaaaaaaaaaaaaaabbbbbbbbbbbbbbbbccccccccccccccccdddddddddddddddd";
    const OTHER: &str = "eeeeeeeeeeeeeeeebbbbbbbbbbbbbbbbccccccccccccccccdddddddddddddddd";

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn object(limit: i32) -> CaptfObject {
        let mut tc = TerraformCluster::new(
            "prod-eu",
            TerraformClusterSpec {
                terraform: TerraformSpec {
                    module: ModuleSpec {
                        source: "git::https://example.com/m.git".into(),
                        ..Default::default()
                    },
                    jobs: Some(JobsSpec {
                        failed_jobs_history_limit: Some(limit),
                        ..Default::default()
                    }),
                    drift: Some(DriftSpec {
                        interval: Some("30m".into()),
                        remediation: None,
                    }),
                    ..Default::default()
                },
                control_plane_endpoint: None,
                exports: None,
            },
        );
        tc.metadata.namespace = Some("default".into());
        CaptfObject::Cluster(tc)
    }

    /// A converged object: inputs applied, outputs present, drift checked at `checked`.
    fn snap(limit: i32, jobs: Vec<JobRecord>, checked: i64) -> Snapshot {
        let mut s = Snapshot::new(
            &object(limit),
            jobs,
            DurableRecord {
                applied_inputs_hash: Some(HASH.into()),
                interrupted_apply: None,
                last_drift_check: Some(ts(checked)),
            },
            InputsHash::Known(HASH.into()),
            LockState::Free,
            Holds::default(),
        )
        .unwrap();
        s.status.outputs = Some(Default::default());
        s
    }

    fn failing(op: Op, seqs: std::ops::RangeInclusive<u32>) -> Vec<JobRecord> {
        seqs.rev().map(|i| rec(op, i, Some(Outcome::Failed))).collect()
    }

    fn as_wait(d: Decision) -> Wait {
        match d {
            Decision::Wait(w) => w,
            other => panic!("expected a wait, got {other:?}"),
        }
    }

    fn as_start(d: Decision) -> Start {
        match d {
            Decision::Start(s) => s,
            other => panic!("expected a start, got {other:?}"),
        }
    }

    #[test]
    fn a_converged_object_is_idle_until_the_next_drift_check() {
        let s = snap(3, vec![], 10_000);
        let w = as_wait(decide(&s, ts(10_600)));
        assert_eq!(
            (w.reason, w.requeue_after),
            (Reason::Idle, Some(Duration::from_secs(1200)))
        );
        let st = as_start(decide(&s, ts(11_800)));
        assert_eq!((st.op, st.reason, st.attempt), (Op::Drift, Reason::DriftCheckDue, 1));
    }

    #[test]
    fn new_inputs_start_an_apply_and_failures_back_off_1m_2m_10m_with_limit_3() {
        let mut s = snap(3, vec![], 10_000);
        s.inputs_hash = InputsHash::Known(OTHER.into());
        assert_eq!(as_start(decide(&s, ts(10_001))).reason, Reason::InputsChanged);
        for (n, minutes) in [(1u32, 1i64), (2, 2), (3, 10)] {
            s.jobs = failing(Op::Apply, 1..=n);
            let finished = s.jobs[0].finished.unwrap();
            let w = as_wait(decide(&s, finished));
            assert_eq!(w.reason, Reason::InputsChangedBackoff);
            assert_eq!(
                w.not_before,
                Some(finished + SignedDuration::from_mins(minutes)),
                "n={n}"
            );
            assert_eq!(w.attempt, Some(n + 1));
            let go = as_start(decide(&s, finished + SignedDuration::from_mins(minutes)));
            assert_eq!((go.reason, go.attempt), (Reason::InputsChanged, n + 1));
        }
    }

    #[test]
    fn a_reconcile_request_skips_the_backoff_of_failures_before_it_once_and_the_next_failure_backs_off_again() {
        let mut s = snap(3, failing(Op::Apply, 1..=3), 10_000);
        s.inputs_hash = InputsHash::Known(OTHER.into());
        let failed = s.jobs[0].finished.unwrap();
        let now = failed + SignedDuration::from_mins(1);
        assert_eq!(
            as_wait(decide(&s, now)).reason,
            Reason::InputsChangedBackoff,
            "10 minutes after 3 failures"
        );
        // Asked before the newest failure finished: that failure's backoff holds.
        s.reconcile_requested = Some(failed - SignedDuration::from_secs(1));
        assert_eq!(as_wait(decide(&s, now)).reason, Reason::InputsChangedBackoff);
        // Asked after it: the retry starts now, as attempt 4, saying until when it would have waited.
        s.reconcile_requested = Some(failed + SignedDuration::from_secs(30));
        let st = as_start(decide(&s, now));
        assert_eq!(
            (st.reason, st.attempt, st.skipped_backoff),
            (Reason::InputsChanged, 4, Some(failed + SignedDuration::from_mins(10)))
        );
        // That retry fails too: the same request does not skip its backoff (still 10 minutes, the cap).
        let mut again = failing(Op::Apply, 1..=4);
        again[0].created = Some(now);
        again[0].finished = Some(now + SignedDuration::from_secs(20));
        s.jobs = again;
        let w = as_wait(decide(&s, now + SignedDuration::from_mins(1)));
        assert_eq!(
            (w.reason, w.not_before),
            (
                Reason::InputsChangedBackoff,
                Some(now + SignedDuration::from_secs(20) + SignedDuration::from_mins(10))
            )
        );
        // Outside a backoff the request changes nothing.
        let idle = snap(3, vec![], 10_000);
        let mut asked = idle.clone();
        asked.reconcile_requested = Some(ts(10_500));
        assert_eq!(decide(&asked, ts(10_600)), decide(&idle, ts(10_600)));
    }

    #[test]
    fn limit_5_backs_off_1m_2m_4m_8m_10m_and_limit_0_10m() {
        for (limit, expected) in [(5, vec![1i64, 2, 4, 8, 10]), (0, vec![10])] {
            let mut s = snap(limit, vec![], 10_000);
            s.inputs_hash = InputsHash::Known(OTHER.into());
            for (i, minutes) in expected.into_iter().enumerate() {
                s.jobs = failing(Op::Apply, 1..=(i as u32 + 1));
                let finished = s.jobs[0].finished.unwrap();
                let w = as_wait(decide(&s, finished));
                assert_eq!(w.not_before, Some(finished + SignedDuration::from_mins(minutes)));
            }
        }
    }

    #[test]
    fn a_failing_drift_check_never_delays_an_apply() {
        let mut s = snap(3, failing(Op::Drift, 1..=3), 10_000);
        s.inputs_hash = InputsHash::Known(OTHER.into());
        let st = as_start(decide(&s, s.jobs[0].finished.unwrap()));
        assert_eq!((st.op, st.attempt), (Op::Apply, 1));
    }

    /// Apply 4 of the inputs `OTHER`, stopped with `outcome` (its result `result`) on `plan-1`.
    fn stopped_apply(outcome: Outcome, result: RunResult) -> JobRecord {
        let mut r = rec(Op::Apply, 4, Some(outcome));
        r.inputs_hash = Some(OTHER[..16].into());
        let mut res = RunnerResult::new(result, Phase::Guard, "stopped");
        res.plan_hash = Some("plan-1".into());
        r.result = Some(res);
        r
    }

    #[test]
    fn a_blocked_apply_waits_for_approval_without_backoff() {
        let blocked = stopped_apply(Outcome::Blocked, RunResult::Blocked);
        let mut s = snap(3, vec![blocked.clone()], 10_000);
        s.inputs_hash = InputsHash::Known(OTHER.into());
        s.status.pending_plan = Some(PendingPlan {
            hash: "plan-1".into(),
            job: blocked.name.clone(),
            ..Default::default()
        });
        let w = as_wait(decide(&s, ts(20_000)));
        assert_eq!(
            (w.reason, w.requeue_after, w.not_before),
            (Reason::AwaitingApproval, None, None)
        );
        // Approved: the apply starts at once, carrying the hash, attempt 1 (blocked counts toward nothing).
        s.approve_plan = Some("plan-1".into());
        s.approved_by = Some("alice@example.com".into());
        let st = as_start(decide(&s, blocked.finished.unwrap()));
        assert_eq!(
            (
                st.reason,
                st.attempt,
                st.approved_plan.as_deref(),
                st.approved_by.as_deref()
            ),
            (Reason::InputsChanged, 1, Some("plan-1"), Some("alice@example.com"))
        );
        // The approved apply then finds another plan: wait again, for a new approval or new inputs.
        let mut changed = rec(Op::Apply, 5, Some(Outcome::PlanChanged));
        changed.inputs_hash = Some(OTHER[..16].into());
        changed.approved_plan = Some("plan-1".into());
        s.jobs.insert(0, changed);
        assert_eq!(as_wait(decide(&s, ts(20_000))).reason, Reason::PlanChanged);
        // New inputs: an apply of them starts, not carrying the stale approval.
        s.inputs_hash = InputsHash::Known(HASH.replace('a', "f"));
        s.status.pending_plan = None;
        let st = as_start(decide(&s, ts(20_000)));
        assert_eq!(
            (st.reason, st.approved_plan, st.approved_by),
            (Reason::InputsChanged, None, None)
        );
    }

    #[test]
    fn approvals_required_holds_the_plan_until_that_many_people_other_than_the_author_approved() {
        let blocked = stopped_apply(Outcome::Blocked, RunResult::Blocked);
        let mut s = snap(3, vec![blocked.clone()], 10_000);
        s.inputs_hash = InputsHash::Known(OTHER.into());
        s.status.pending_plan = Some(PendingPlan {
            hash: "plan-1".into(),
            job: blocked.name.clone(),
            ..Default::default()
        });
        s.approvals_required = Some(2);
        s.spec_changed_by = Some("alice".into());
        s.approve_plan = Some("plan-1".into());
        let now = blocked.finished.unwrap();
        // The author and one other: one approval that counts, of two.
        for approvers in [&["alice"][..], &["alice", "bob"], &["bob", "bob"]] {
            s.approvers = approvers.iter().map(|a| a.to_string()).collect();
            s.approved_by = s.approvers.last().cloned();
            let w = as_wait(decide(&s, now));
            assert_eq!(w.reason, Reason::AwaitingApproval, "{approvers:?}");
            assert_eq!(approved_plan(&s), None);
        }
        // A second person: the apply starts, carrying the plan and both approvers.
        s.approvers = vec!["alice".into(), "bob".into(), "carol".into()];
        s.approved_by = Some("carol".into());
        let st = as_start(decide(&s, now));
        assert_eq!(
            (st.approved_plan.as_deref(), st.approved_by.as_deref()),
            (Some("plan-1"), Some("bob, carol"))
        );
        // Without approvals-required, one approval by anyone, the author too, as always.
        s.approvals_required = None;
        s.approvers = vec!["alice".into()];
        s.approved_by = Some("alice".into());
        assert_eq!(as_start(decide(&s, now)).approved_plan.as_deref(), Some("plan-1"));
    }

    #[test]
    fn a_plan_a_policy_denied_waits_for_new_inputs_or_a_newer_reconcile_request() {
        let denied = stopped_apply(Outcome::PolicyDenied, RunResult::PolicyDenied);
        let mut s = snap(3, vec![denied.clone()], 10_000);
        s.inputs_hash = InputsHash::Known(OTHER.into());
        let at = denied.finished.unwrap();
        let w = as_wait(decide(&s, at + SignedDuration::from_hours(5)));
        assert_eq!(
            (w.reason, w.requeue_after),
            (Reason::PolicyDenied, None),
            "no timer, no retry"
        );
        // An approval cannot overrule a policy.
        s.approve_plan = Some("plan-1".into());
        assert_eq!(as_wait(decide(&s, at)).reason, Reason::PolicyDenied);
        s.approve_plan = None;
        // A reconcile request older than the denial does nothing; a newer one plans again, once.
        s.reconcile_requested = Some(at - SignedDuration::from_secs(1));
        assert_eq!(as_wait(decide(&s, at)).reason, Reason::PolicyDenied);
        s.reconcile_requested = Some(at + SignedDuration::from_secs(1));
        let st = as_start(decide(&s, at + SignedDuration::from_secs(2)));
        assert_eq!((st.op, st.reason), (Op::Apply, Reason::InputsChanged));
        // New inputs plan again.
        s.reconcile_requested = None;
        s.inputs_hash = InputsHash::Known(HASH.replace('a', "f"));
        assert!(decide(&s, at).is_start());
    }

    #[test]
    fn an_approved_apply_skips_the_backoff_of_failures_older_than_its_plan_but_not_its_own() {
        // Three failed applies (the cap, 10m, from the third: not before 1180 + 600), then an apply
        // a reconcile request let start at once, which stopped on a destructive plan.
        let blocked = stopped_apply(Outcome::Blocked, RunResult::Blocked);
        let mut jobs = vec![blocked.clone()];
        jobs.extend(failing(Op::Apply, 1..=3));
        let mut s = snap(3, jobs, 10_000);
        s.inputs_hash = InputsHash::Known(OTHER.into());
        s.status.pending_plan = Some(PendingPlan {
            hash: "plan-1".into(),
            job: blocked.name.clone(),
            ..Default::default()
        });
        let now = ts(1_300);
        assert_eq!(as_wait(decide(&s, now)).reason, Reason::AwaitingApproval);
        // Approved: it starts now, not at 1780, and says which backoff it skipped.
        s.approve_plan = Some("plan-1".into());
        s.approved_by = Some("alice@example.com".into());
        let st = as_start(decide(&s, now));
        assert_eq!(
            (st.attempt, st.approved_plan.as_deref(), st.skipped_backoff),
            (4, Some("plan-1"), Some(ts(1_780)))
        );
        // The approved apply fails: its own backoff holds (the cap after 4 failures).
        let mut failed = rec(Op::Apply, 5, Some(Outcome::Failed));
        failed.inputs_hash = Some(OTHER[..16].into());
        failed.approved_plan = Some("plan-1".into());
        s.jobs.insert(0, failed.clone());
        let w = as_wait(decide(&s, failed.finished.unwrap()));
        assert_eq!(
            (w.reason, w.not_before),
            (
                Reason::InputsChangedBackoff,
                Some(failed.finished.unwrap() + SignedDuration::from_mins(10))
            )
        );
    }

    #[test]
    fn a_running_job_is_waited_on_under_its_op() {
        let s = snap(
            3,
            vec![rec(Op::Drift, 2, None), rec(Op::Apply, 1, Some(Outcome::Succeeded))],
            10_000,
        );
        let w = as_wait(decide(&s, ts(20_000)));
        assert_eq!((w.reason, w.op), (Reason::JobActive, Some(Op::Drift)));
        // Known from the status only (its Job not listed yet): the op is read from its name.
        let mut s = snap(3, vec![], 10_000);
        s.status.active_job = Some(captf_shared::names::job_name(
            Kind::TerraformCluster,
            "default",
            "prod-eu",
            Op::Refresh,
            3,
        ));
        let w = as_wait(decide(&s, ts(20_000)));
        assert_eq!((w.reason, w.op), (Reason::JobActive, Some(Op::Refresh)));
    }

    #[test]
    fn an_interrupted_apply_is_due_even_when_the_inputs_equal_the_states() {
        let mut s = snap(3, vec![], 10_000);
        let job = captf_shared::names::job_name(Kind::TerraformCluster, "default", "prod-eu", Op::Apply, 7);
        s.durable.interrupted_apply = Some(job);
        assert_eq!(as_start(decide(&s, ts(10_001))).reason, Reason::InterruptedApply);
        s.jobs = vec![rec(Op::Apply, 8, Some(Outcome::Succeeded))];
        s.jobs[0].inputs_hash = Some(HASH[..16].into());
        assert_eq!(as_wait(decide(&s, ts(10_001))).reason, Reason::Idle);
    }

    fn drifted(limit: i32, remediations: &[Outcome]) -> Snapshot {
        let mut check = rec(Op::Drift, 2, Some(Outcome::Succeeded));
        let mut res = RunnerResult::new(RunResult::Succeeded, Phase::Drift, "drift");
        res.drift = Some(true);
        check.result = Some(res);
        let mut jobs: Vec<JobRecord> = remediations
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let mut r = rec(Op::Apply, 3 + i as u32, Some(*o));
                r.drift_remediation = true;
                r.inputs_hash = Some(HASH[..16].into());
                r
            })
            .collect();
        jobs.reverse();
        jobs.push(check.clone());
        let mut s = snap(limit, jobs, 0);
        s.durable.last_drift_check = check.finished;
        s
    }

    #[test]
    fn remediation_stops_at_the_limit_and_resumes_after_a_successful_drift_check() {
        let s = drifted(3, &[]);
        let now = ts(2_000);
        let st = as_start(decide(&s, now));
        assert_eq!((st.reason, st.drift_remediation), (Reason::DriftRemediation, true));
        // Two failed remediations: a third may run after its backoff.
        let s = drifted(3, &[Outcome::Failed, Outcome::Failed]);
        // The newest failure finished at 1_240: 2m of backoff.
        let w = as_wait(decide(&s, ts(1_300)));
        assert_eq!(
            (w.reason, w.not_before),
            (Reason::DriftRemediationBackoff, Some(ts(1_360)))
        );
        assert_eq!(as_start(decide(&s, ts(1_360))).reason, Reason::DriftRemediation);
        // Three: at the limit; no more remediation, not an unconverged apply, and the drift check still runs.
        let s = drifted(3, &[Outcome::Failed, Outcome::Deadline, Outcome::Failed]);
        let w = as_wait(decide(&s, ts(1_400)));
        assert_eq!(w.reason, Reason::RemediationLimit);
        let due = s.last_drift_check().unwrap() + SignedDuration::from_mins(30);
        assert_eq!(w.requeue_after, Some(until(ts(1_400), due)));
        assert_eq!(as_start(decide(&s, due)).op, Op::Drift);
        // The next successful drift check (still finding drift) resets the count.
        let mut s = s;
        let mut recheck = rec(Op::Drift, 9, Some(Outcome::Succeeded));
        let mut res = RunnerResult::new(RunResult::Succeeded, Phase::Drift, "drift");
        res.drift = Some(true);
        recheck.result = Some(res);
        s.jobs.insert(0, recheck);
        let st = as_start(decide(&s, ts(100_000)));
        assert_eq!((st.reason, st.attempt), (Reason::DriftRemediation, 4));
    }

    #[test]
    fn a_remediation_that_succeeded_within_the_drift_checks_second_ends_the_drift() {
        // Real runs can be that quick; timestamps have seconds.
        let mut s = drifted(3, &[Outcome::Succeeded]);
        let check = s.last_drift_check().unwrap();
        s.jobs[0].finished = Some(check);
        s.jobs[0].inputs_hash = Some(HASH[..16].into());
        assert_eq!(as_wait(decide(&s, check)).reason, Reason::Idle);
        // Without the remediation, the same drift is still pending.
        s.jobs.remove(0);
        assert_eq!(as_start(decide(&s, check)).reason, Reason::DriftRemediation);
    }

    #[test]
    fn blocked_and_plan_changed_remediations_do_not_count_toward_the_cap() {
        let s = drifted(1, &[Outcome::Blocked]);
        assert_eq!(as_wait(decide(&s, ts(2_000))).reason, Reason::AwaitingApproval);
        let s = drifted(1, &[Outcome::Interrupted]);
        assert_eq!(as_start(decide(&s, ts(2_000))).reason, Reason::DriftRemediation);
    }

    #[test]
    fn manual_remediation_only_reports_drift() {
        let mut s = drifted(3, &[]);
        s.spec.remediation = Remediation::Manual;
        assert_eq!(as_wait(decide(&s, ts(2_000))).reason, Reason::Idle);
    }

    #[test]
    fn a_stale_lock_id_rides_on_the_next_job() {
        let mut s = snap(3, vec![], 0);
        s.lock = LockState::Stale {
            id: "lock-1".into(),
            holder: "h".into(),
            why: String::new(),
        };
        assert_eq!(
            as_start(decide(&s, ts(10_000))).force_unlock_id.as_deref(),
            Some("lock-1")
        );
        s.lock = LockState::Foreign {
            holder: "alice@laptop".into(),
            id: "lock-2".into(),
            operation: "OperationTypeApply".into(),
            created: String::new(),
        };
        let st = as_start(decide(&s, ts(10_000)));
        assert_eq!(
            (st.op, st.force_unlock_id),
            (Op::Drift, None),
            "a foreign lock keeps Jobs starting"
        );
    }

    #[test]
    fn deletion_destroys_then_finalizes_and_orphan_finalizes_at_once() {
        let mut s = snap(3, vec![], 10_000);
        s.deletion_timestamp = Some(ts(20_000));
        assert_eq!(as_start(decide(&s, ts(20_001))).reason, Reason::Deleting);
        s.holds.members = vec!["TerraformMachinePool/default/w".into()];
        assert_eq!(as_wait(decide(&s, ts(20_001))).reason, Reason::MembersExist);
        s.holds.members.clear();
        s.jobs = vec![rec(Op::Destroy, 400, Some(Outcome::Failed))];
        assert_eq!(as_wait(decide(&s, ts(25_000))).reason, Reason::DeletingBackoff);
        s.jobs.insert(0, rec(Op::Destroy, 401, Some(Outcome::Succeeded)));
        assert_eq!(decide(&s, ts(25_000)), Decision::Finalize);
        let mut s = snap(3, vec![], 10_000);
        s.deletion_timestamp = Some(ts(20_000));
        s.spec.deletion_policy = DeletionPolicy::Orphan;
        assert_eq!(decide(&s, ts(20_001)), Decision::Finalize);
    }

    #[test]
    fn invalid_paused_and_unresolved_inputs_wait() {
        let mut s = snap(3, vec![], 0);
        s.invalid = Some("spec.x: bad (got 1)".into());
        assert_eq!(as_wait(decide(&s, ts(1))).reason, Reason::InvalidSpec);
        let mut s = snap(3, vec![], 0);
        s.paused = true;
        assert_eq!(as_wait(decide(&s, ts(1))).reason, Reason::Paused);
        let mut s = snap(3, vec![], 0);
        s.inputs_hash = InputsHash::Unresolved("spec.variablesFrom[0]".into());
        let w = as_wait(decide(&s, ts(1)));
        assert_eq!(
            (w.reason, w.requeue_after),
            (Reason::InputsUnresolved, Some(HOLD_REQUEUE))
        );
    }

    #[test]
    fn a_destroy_runs_with_the_stored_inputs_and_waits_when_neither_the_spec_nor_the_secret_has_them() {
        let mut s = snap(3, vec![], 10_000);
        s.deletion_timestamp = Some(ts(20_000));
        s.inputs_hash = InputsHash::Unresolved("spec.variablesFrom[0]: Secret default/vars not found".into());
        s.stored_inputs_hash = Some("a".repeat(64));
        let st = as_start(decide(&s, ts(20_001)));
        assert_eq!((st.op, st.reason), (Op::Destroy, Reason::Deleting));
        s.stored_inputs_hash = None;
        let w = as_wait(decide(&s, ts(20_001)));
        assert_eq!(
            (w.reason, w.op, w.requeue_after, w.attempt),
            (Reason::InputsUnresolved, Some(Op::Destroy), Some(HOLD_REQUEUE), Some(1))
        );
        // A destroy still backing off says so first.
        s.jobs = vec![rec(Op::Destroy, 400, Some(Outcome::Failed))];
        assert_eq!(as_wait(decide(&s, ts(25_000))).reason, Reason::DeletingBackoff);
    }

    #[test]
    fn a_name_conflict_starts_no_job_not_even_a_destroy() {
        let mut s = snap(3, vec![], 0);
        s.name_conflict = Some("Secret default/tfstate-default-x-tc is bound to another object".into());
        let w = as_wait(decide(&s, ts(1)));
        assert_eq!((w.reason, w.requeue_after), (Reason::NameConflict, Some(HOLD_REQUEUE)));
        s.deletion_timestamp = Some(ts(1));
        assert_eq!(as_wait(decide(&s, ts(2))).reason, Reason::NameConflict);
    }

    #[test]
    fn released_state_not_adopted_starts_no_job_and_its_deletion_destroys_nothing() {
        let mut s = snap(3, vec![], 0);
        s.unadopted_state = Some("Secret default/tfstate-default-x-tc was released".into());
        let w = as_wait(decide(&s, ts(1)));
        assert_eq!(
            (w.reason, w.requeue_after),
            (Reason::ReleasedStateNotAdopted, Some(HOLD_REQUEUE))
        );
        // Deleted: no destroy of the released state (a co-tenant's way to destroy what was kept).
        s.deletion_timestamp = Some(ts(1));
        assert_eq!(decide(&s, ts(2)), Decision::Finalize);
        s.paused = true;
        assert_eq!(as_wait(decide(&s, ts(2))).reason, Reason::ReleasedStateNotAdopted);
    }

    #[test]
    fn a_policy_violation_starts_no_job_not_even_a_destroy() {
        let mut s = snap(3, vec![], 0);
        s.policy_violation = Some("spec.jobs.image: outside the runner image policy".into());
        assert_eq!(as_wait(decide(&s, ts(1))).reason, Reason::PolicyViolation);
        s.deletion_timestamp = Some(ts(1));
        let w = as_wait(decide(&s, ts(2)));
        assert_eq!((w.reason, w.requeue_after), (Reason::PolicyViolation, None));
    }

    #[test]
    fn a_forbidden_reference_starts_no_job_not_even_a_destroy_and_is_looked_at_again() {
        let mut s = snap(3, vec![], 0);
        s.forbidden_reference =
            Some("spec.variablesFrom[0].secretRef: Secret \"captf-outputs-x-tc\" is CAPTF's own".into());
        let w = as_wait(decide(&s, ts(1)));
        assert_eq!(
            (w.reason, w.requeue_after),
            (Reason::ForbiddenReference, Some(HOLD_REQUEUE))
        );
        s.deletion_timestamp = Some(ts(1));
        assert_eq!(as_wait(decide(&s, ts(2))).reason, Reason::ForbiddenReference);
    }

    #[test]
    fn a_missing_runner_config_starts_no_job_not_even_a_destroy_and_is_looked_at_again() {
        let mut s = snap(3, vec![], 0);
        s.runner_config_unavailable =
            Some("spec.jobs.terraformCliConfig: ConfigMap default/mirror does not exist (yet)".into());
        let w = as_wait(decide(&s, ts(1)));
        assert_eq!(
            (w.reason, w.requeue_after),
            (Reason::RunnerConfigUnavailable, Some(HOLD_REQUEUE))
        );
        s.deletion_timestamp = Some(ts(1));
        assert_eq!(as_wait(decide(&s, ts(2))).reason, Reason::RunnerConfigUnavailable);
    }

    #[test]
    fn a_pause_from_the_unwatched_cluster_api_cluster_is_looked_at_again_an_own_pause_waits_for_an_event() {
        let mut s = snap(3, vec![], 0);
        s.paused = true;
        assert_eq!(as_wait(decide(&s, ts(1))).requeue_after, None);
        s.holds.cluster_paused = true;
        let w = as_wait(decide(&s, ts(1)));
        assert_eq!((w.reason, w.requeue_after), (Reason::Paused, Some(HOLD_REQUEUE)));
    }

    #[test]
    fn a_refresh_request_newer_than_the_last_refresh_starts_one() {
        let mut s = snap(3, vec![rec(Op::Refresh, 3, Some(Outcome::Succeeded))], 10_000);
        s.refresh_requested = Some(ts(1_000));
        assert_eq!(as_wait(decide(&s, ts(10_001))).reason, Reason::Idle);
        s.refresh_requested = Some(ts(5_000));
        assert_eq!(as_start(decide(&s, ts(10_001))).reason, Reason::RefreshRequested);
    }

    #[test]
    fn outputs_lost_with_the_status_are_read_again_by_a_refresh_not_an_apply() {
        // Moved or restored: no Jobs, an empty status, the durable record of the applied inputs.
        let mut s = snap(3, vec![], 10_000);
        s.status = Default::default();
        let st = as_start(decide(&s, ts(10_001)));
        assert_eq!((st.op, st.reason), (Op::Refresh, Reason::RefreshRequested));
        // Once a refresh succeeded (its outputs booked), the object is idle again.
        let mut after = snap(3, vec![rec(Op::Refresh, 1, Some(Outcome::Succeeded))], 10_000);
        after.status.outputs = None;
        assert_eq!(as_wait(decide(&after, ts(10_001))).reason, Reason::Idle);
        // Without the durable record nothing says an apply ever ran: inputs not applied, apply.
        s.durable.applied_inputs_hash = None;
        assert_eq!(as_start(decide(&s, ts(10_001))).op, Op::Apply);
    }

    #[test]
    fn a_machines_first_apply_waits_for_its_clusters_infrastructure() {
        let mut s = snap(3, vec![], 10_000);
        s.kind = Kind::TerraformMachine;
        s.durable.applied_inputs_hash = None;
        s.holds.cluster_infrastructure_pending = true;
        let w = as_wait(decide(&s, ts(10_001)));
        assert_eq!(
            (w.reason, w.op, w.requeue_after),
            (
                Reason::ClusterInfrastructurePending,
                Some(Op::Apply),
                Some(HOLD_REQUEUE)
            )
        );
        // Provisioned: the apply starts.
        s.holds.cluster_infrastructure_pending = false;
        assert_eq!(as_start(decide(&s, ts(10_001))).reason, Reason::InputsChanged);
        // A later apply (something was applied before) is not held, nor is a TerraformCluster.
        s.holds.cluster_infrastructure_pending = true;
        s.durable.applied_inputs_hash = Some(OTHER.into());
        assert_eq!(as_start(decide(&s, ts(10_001))).reason, Reason::InputsChanged);
        s.durable.applied_inputs_hash = None;
        s.kind = Kind::TerraformCluster;
        assert_eq!(as_start(decide(&s, ts(10_001))).reason, Reason::InputsChanged);
    }

    #[test]
    fn a_member_waits_for_the_cluster_lease() {
        let mut s = snap(3, vec![], 0);
        s.kind = Kind::TerraformMachinePool;
        s.holds.cluster_lease_holder = Some("tc-prod-eu-225654031b7f-apply-7".into());
        let w = as_wait(decide(&s, ts(10_000)));
        assert_eq!((w.reason, w.op), (Reason::ClusterBusy, Some(Op::Drift)));
    }

    fn arb_record() -> impl Strategy<Value = (usize, Option<usize>, bool)> {
        (0usize..4, prop::option::weighted(0.85, 0usize..6), any::<bool>())
    }

    proptest! {
        #[test]
        fn decide_never_starts_a_job_while_one_is_active(
            records in prop::collection::vec(arb_record(), 0..12),
            active_at in 0usize..12, limit in 0i32..5, now in 0i64..200_000,
            changed in any::<bool>(), deleting in any::<bool>(), status_active in any::<bool>(),
        ) {
            let len = records.len();
            let mut jobs: Vec<JobRecord> = records.iter().enumerate().map(|(i, (op, o, rem))| {
                let mut r = rec(Op::ALL[*op], (len - i) as u32, o.map(|o| Outcome::ALL[o]));
                r.drift_remediation = *rem;
                r
            }).collect();
            let mut s = snap(limit, vec![], 0);
            let has_active = jobs.iter().any(|r| !r.is_finished()) || status_active || active_at < len;
            if active_at < len { jobs[active_at].outcome = None; }
            s.jobs = jobs;
            if status_active { s.status.active_job = Some("tc-prod-eu-000000-apply-999".into()); }
            if changed { s.inputs_hash = InputsHash::Known(OTHER.into()); }
            if deleting { s.deletion_timestamp = Some(ts(1)); }
            let d = decide(&s, ts(now));
            if has_active {
                prop_assert!(!d.is_start(), "started while a Job is active: {:?}", d);
            }
        }

        #[test]
        fn only_a_stale_lock_ever_puts_a_force_unlock_id_on_a_job(
            who in "[a-z@-]{0,20}", own in any::<bool>(), gone in any::<bool>(),
            phase in prop::sample::select(vec!["Running", "Pending", "Succeeded", "Failed"]), terminating in any::<bool>(),
        ) {
            use crate::lock::{HolderPod, LockLease, check_lock};
            let pattern = captf_shared::names::RunnerPattern::new(Kind::TerraformCluster, "default", "prod-eu");
            let host = if own {
                format!("{}-x2k9q", captf_shared::names::job_name(Kind::TerraformCluster, "default", "prod-eu", Op::Apply, 3))
            } else {
                who.clone()
            };
            let info = serde_json::json!({"ID": "id-1", "Operation": "OperationTypeApply", "Who": format!("{who}@{host}"), "Created": "t"});
            let lease = LockLease { holder_identity: Some("id-1".into()), lock_info: Some(info.to_string()) };
            let pod = if gone { HolderPod::Gone } else { HolderPod::Present { phase: Some(phase.to_string()), terminating } };
            let mut s = snap(3, vec![], 0);
            s.lock = check_lock(Some(&lease), &pattern, &pod);
            let stale = matches!(s.lock, LockState::Stale { .. });
            if let Decision::Start(st) = decide(&s, ts(10_000)) {
                prop_assert_eq!(st.force_unlock_id.is_some(), stale);
                if !pattern.matches(&host) {
                    prop_assert_eq!(st.force_unlock_id, None);
                }
            }
        }

        #[test]
        fn decide_never_starts_inside_the_backoff(
            outcomes in prop::collection::vec(0usize..6, 1..10), limit in 0i32..5, after in 0i64..1_000,
        ) {
            let len = outcomes.len();
            let jobs: Vec<JobRecord> = outcomes.iter().enumerate()
                .map(|(i, o)| rec(Op::Apply, (len - i) as u32, Some(Outcome::ALL[*o]))).collect();
            let mut s = snap(limit, jobs, 0);
            s.inputs_hash = InputsHash::Known(OTHER.into());
            let b = backoff_of(&s, Op::Apply);
            let newest_failure = s.jobs.iter().take_while(|r| !r.succeeded()).find(|r| r.failed()).and_then(|r| r.finished);
            let now = newest_failure.unwrap_or(ts(0)) + SignedDuration::from_secs(after);
            if let Decision::Start(st) = decide(&s, now) && st.op == Op::Apply && let Some(f) = newest_failure {
                let min = backoff::delay(b.n, captf_shared::defaults::failed_limit(limit));
                prop_assert!(now >= f + SignedDuration::try_from(min).unwrap());
            }
        }
    }

    #[test]
    fn status_last_success_time_is_used_when_the_success_was_pruned() {
        let mut s = snap(3, failing(Op::Apply, 1..=2), 10_000);
        s.inputs_hash = InputsHash::Known(OTHER.into());
        s.status.last_success_time = Some([("apply".to_string(), Time(ts(5_000)))].into());
        let st = as_start(decide(&s, s.jobs[0].finished.unwrap()));
        assert_eq!(st.attempt, 1);
    }
}

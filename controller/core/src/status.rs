//! The status of an object (docs/api.md), computed PURELY from the snapshot after booking,
//! the decision and the lock check; written as one merge patch of the status subresource.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use captf_shared::conditions::{self, Status, reason as reasons};
use captf_shared::protocol::{CONDITION_MESSAGE_LIMIT, bounded_message};
use captf_shared::types::{Initialization, NextAction, TerraformStatus};
use captf_shared::{Kind, Op};

use crate::interrupted;
use crate::snapshot::InputsHash;
use crate::{Decision, Outcome, Reason, Snapshot};

/// The RFC 7386 merge patch that turns `old` into `new`: changed keys, `null` for removed
/// ones, recursing into objects (arrays are replaced whole) (PURE).
pub fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut out = serde_json::Map::new();
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                out.insert(k.clone(), Value::Null);
            }
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) => {
                        if let Some(d) = merge_diff(ov, nv) {
                            out.insert(k.clone(), d);
                        }
                    }
                    None => {
                        out.insert(k.clone(), nv.clone());
                    }
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        (o, n) if o == n => None,
        (_, n) => Some(n.clone()),
    }
}

/// The status merge patch body `{"status": …}` from the status read to the computed one, or
/// `None` when nothing changed.
pub fn status_patch(old: &TerraformStatus, new: &TerraformStatus) -> Result<Option<Value>, serde_json::Error> {
    let (o, n) = (serde_json::to_value(old)?, serde_json::to_value(new)?);
    Ok(merge_diff(&o, &n).map(|d| serde_json::json!({ "status": d })))
}

/// The reasons that keep `Ready` False (as opposed to a ready object idling or checking drift).
fn blocks_ready(reason: Reason) -> bool {
    !matches!(
        reason,
        Reason::Idle
            | Reason::DriftCheckDue
            | Reason::DriftCheckDueBackoff
            | Reason::RefreshRequested
            | Reason::RefreshRequestedBackoff
            | Reason::DriftRemediation
            | Reason::DriftRemediationBackoff
            | Reason::RemediationLimit
            | Reason::ClusterBusy
            | Reason::MemberJobActive
    )
}

fn set(
    c: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    t: &str,
    s: Status,
    r: &str,
    m: &str,
    g: Option<i64>,
    now: Timestamp,
) {
    conditions::set_condition(c, t, s, r, m, g, now);
}

/// Compute the new status. `active_job` is the Job now running (or just created), if any.
pub fn compute(
    s: &Snapshot,
    decision: &Decision,
    active_job: Option<&str>,
    current_inputs_hash: Option<&str>,
    lock_checked: bool,
    now: Timestamp,
) -> TerraformStatus {
    let mut st = s.status.clone();
    let g = s.generation;
    st.observed_generation = g;
    st.active_job = active_job.map(str::to_string);
    st.applied_inputs_hash = s.durable.applied_inputs_hash.clone().or(st.applied_inputs_hash);
    if let Some(t) = s.last_drift_check() {
        st.last_drift_check_time = Some(Time(t));
    }
    let mut cs = st.conditions.take().unwrap_or_default();

    // The conditions, one phase each; `Ready` last, from the others and the decision.
    let interrupted_pending = interrupted::interrupted_apply_pending(
        s.kind,
        &s.namespace,
        &s.name,
        s.durable.interrupted_apply.as_deref(),
        &s.jobs,
    );
    apply_job_condition(&mut cs, s, interrupted_pending, g, now);
    drift_condition(&mut cs, s, g, now);
    state_condition(&mut cs, s, lock_checked, g, now);
    paused_condition(&mut cs, s, g, now);
    set(
        &mut cs,
        conditions::RECONCILED,
        Status::True,
        reasons::RECONCILE_SUCCEEDED,
        "",
        g,
        now,
    );
    let up_to_date = up_to_date(s, decision, active_job, current_inputs_hash, interrupted_pending);
    let provisioned = s.status.applied_inputs_hash.is_some()
        || s.durable.applied_inputs_hash.is_some()
        || s.last_success(Op::Apply).is_some();
    let (ready_status, ready_reason, ready_message) = ready(s, provisioned, &up_to_date);
    let (u_status, u_reason, u_message) = up_to_date;
    set(&mut cs, conditions::UP_TO_DATE, u_status, &u_reason, &u_message, g, now);
    set(
        &mut cs,
        conditions::READY,
        ready_status,
        &ready_reason,
        &ready_message,
        g,
        now,
    );
    st.conditions = Some(cs);

    if provisioned {
        st.ready = Some(true);
        st.initialization = Some(Initialization {
            provisioned: Some(true),
        });
    }

    st.next_action = match decision {
        Decision::Start(x) => Some(NextAction {
            op: Some(x.op),
            reason: x.reason.as_str().to_string(),
            not_before: None,
        }),
        Decision::Wait(w) => Some(NextAction {
            op: w.op,
            reason: w.reason.as_str().to_string(),
            not_before: w.not_before.map(Time),
        }),
        Decision::Finalize => None,
    };
    if s.kind == Kind::TerraformMachinePool
        && let Some(list) = &st
            .outputs
            .as_ref()
            .and_then(|o| o.get(super::book::OUTPUT_PROVIDER_ID_LIST))
            .and_then(|v| v.as_array())
    {
        st.replicas = i32::try_from(list.len()).ok();
    }
    if s.kind == Kind::TerraformMachinePool
        && let Some(instances) = st.outputs.as_ref().and_then(super::book::instances_from_outputs)
    {
        st.instances = Some(instances);
    }
    st
}

type Conditions = Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>;

/// The status after a pass that failed: the status as read with `Reconciled=False`, naming the
/// failure (`what`, e.g. the API call, and its message, bounded). Nothing else changes: a pass
/// that failed part way cannot say what its writes came to, and the next pass computes the
/// rest. Writing it again for the same failure changes nothing, so a failing API server gets
/// no write from a repeated error ([`status_patch`] is `None`).
pub fn failed_pass(
    old: &TerraformStatus,
    what: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> TerraformStatus {
    let mut st = old.clone();
    let mut cs = st.conditions.take().unwrap_or_default();
    let text = bounded_message(&format!("{what}: {message}"), CONDITION_MESSAGE_LIMIT);
    set(
        &mut cs,
        conditions::RECONCILED,
        Status::False,
        reasons::RECONCILE_ERROR,
        &text,
        generation,
        now,
    );
    st.conditions = Some(cs);
    st
}

/// `ApplyJobSucceeded`: the newest finished apply, or the interrupted-apply record.
fn apply_job_condition(cs: &mut Conditions, s: &Snapshot, interrupted_pending: bool, g: Option<i64>, now: Timestamp) {
    let newest_apply = s
        .jobs
        .iter()
        .find(|r| r.op == Op::Apply && r.is_finished() && r.outcome != Some(Outcome::Interrupted));
    if let (true, Some(job)) = (interrupted_pending, s.durable.interrupted_apply.as_deref()) {
        set(
            cs,
            conditions::APPLY_JOB_SUCCEEDED,
            Status::False,
            reasons::APPLY_FAILED,
            &interrupted::interrupted_apply_message(job),
            g,
            now,
        );
    } else if let Some(r) = newest_apply {
        let msg = r.result.as_ref().map(|x| x.message.clone()).unwrap_or_default();
        let (status, reason, message) = match r.outcome {
            Some(Outcome::Succeeded) => (
                Status::True,
                reasons::APPLY_SUCCEEDED,
                format!("Job {} succeeded", r.name),
            ),
            Some(Outcome::Blocked) => (
                Status::False,
                reasons::DESTRUCTIVE_PLAN_BLOCKED,
                format!(
                    "Job {}: the plan deletes or replaces resources; approve it with the annotation captf.io/approve-plan={}",
                    r.name,
                    r.result.as_ref().and_then(|x| x.plan_hash.clone()).unwrap_or_default()
                ),
            ),
            Some(Outcome::PolicyDenied) => (Status::False, reasons::POLICY_DENIED, format!("Job {}: {msg}", r.name)),
            Some(Outcome::PlanChanged) => (
                Status::False,
                reasons::PLAN_CHANGED,
                format!(
                    "Job {}: the plan differs from the approved plan; approve the new plan {}",
                    r.name,
                    r.result.as_ref().and_then(|x| x.plan_hash.clone()).unwrap_or_default()
                ),
            ),
            Some(Outcome::Deadline) => (
                Status::False,
                reasons::APPLY_FAILED,
                format!("Job {}: exceeded its deadline {msg}", r.name)
                    .trim_end()
                    .to_string(),
            ),
            _ => (
                Status::False,
                reasons::APPLY_FAILED,
                format!("Job {} failed: {msg}", r.name)
                    .trim_end_matches([' ', ':'])
                    .to_string(),
            ),
        };
        // Never more than a bounded part of what a runner reported.
        let message = bounded_message(&message, CONDITION_MESSAGE_LIMIT);
        set(cs, conditions::APPLY_JOB_SUCCEEDED, status, reason, &message, g, now);
    }
}

/// `DriftDetected`: from the newest successful drift check.
fn drift_condition(cs: &mut Conditions, s: &Snapshot, g: Option<i64>, now: Timestamp) {
    match s.last_drift_check() {
        None => set(
            cs,
            conditions::DRIFT_DETECTED,
            Status::Unknown,
            reasons::NEVER_CHECKED,
            "no drift check has succeeded yet",
            g,
            now,
        ),
        Some(_) if s.drift_found() && !drift_resolved(s) => set(
            cs,
            conditions::DRIFT_DETECTED,
            Status::True,
            reasons::DRIFT_FOUND,
            "the last drift check found changes",
            g,
            now,
        ),
        Some(_) => set(
            cs,
            conditions::DRIFT_DETECTED,
            Status::False,
            reasons::NO_DRIFT,
            "the state matches the infrastructure",
            g,
            now,
        ),
    }
}

/// `StateReadable`: an unreadable state (read on deletion) first; otherwise only from a lock
/// check (none runs while a Job is active: keep it).
fn state_condition(cs: &mut Conditions, s: &Snapshot, lock_checked: bool, g: Option<i64>, now: Timestamp) {
    if let Some(why) = &s.holds.state_unreadable {
        set(
            cs,
            conditions::STATE_READABLE,
            Status::False,
            reasons::STATE_UNREADABLE,
            why,
            g,
            now,
        );
    } else if lock_checked {
        match s.lock.state_locked_message() {
            Some(m) => set(
                cs,
                conditions::STATE_READABLE,
                Status::False,
                reasons::STATE_LOCKED,
                &m,
                g,
                now,
            ),
            None => set(
                cs,
                conditions::STATE_READABLE,
                Status::True,
                reasons::STATE_READABLE,
                "",
                g,
                now,
            ),
        }
    }
}

/// `Paused`: say which pause, so a person knows what to undo.
fn paused_condition(cs: &mut Conditions, s: &Snapshot, g: Option<i64>, now: Timestamp) {
    if s.paused {
        let why = if s.spec.paused {
            "spec.paused is true"
        } else if s.holds.cluster_paused {
            "the Cluster API Cluster is paused (its spec.paused)"
        } else {
            "the annotation cluster.x-k8s.io/paused is set"
        };
        set(cs, conditions::PAUSED, Status::True, reasons::PAUSED, why, g, now);
    } else {
        set(cs, conditions::PAUSED, Status::False, "NotPaused", "", g, now);
    }
}

/// `Ready`: whether the infrastructure is there to use (what Cluster API mirrors into the
/// Cluster's and the Machine's `InfrastructureReady`, and what a MachineHealthCheck needs True
/// before it judges any Machine). Before the first successful apply it is `UpToDate`; from then on
/// True until a deletion begins, whatever later change is queued, running, failing, blocked or
/// awaiting approval, with `UpToDate`'s reason in its message when that is False.
fn ready(s: &Snapshot, provisioned: bool, up_to_date: &(Status, String, String)) -> (Status, String, String) {
    let (u_status, u_reason, u_message) = up_to_date;
    if !provisioned || s.deletion_timestamp.is_some() {
        return up_to_date.clone();
    }
    let message = match u_status {
        Status::True if u_message.is_empty() => String::new(),
        Status::True => u_message.clone(),
        _ if u_message.is_empty() => format!("provisioned; not up to date: {u_reason}"),
        _ => format!("provisioned; not up to date: {u_reason}: {u_message}"),
    };
    (Status::True, reasons::READY.to_string(), message)
}

/// `UpToDate`: status, reason and message.
fn up_to_date(
    s: &Snapshot,
    decision: &Decision,
    active_job: Option<&str>,
    current_inputs_hash: Option<&str>,
    interrupted_pending: bool,
) -> (Status, String, String) {
    let applied = current_inputs_hash.is_some_and(|h| crate::decide::inputs_applied(s, h));
    let reason = decision.reason();
    if let Some(inv) = &s.invalid {
        (Status::False, reasons::INVALID_SPEC.to_string(), inv.clone())
    } else if let Some(v) = &s.policy_violation {
        (Status::False, reasons::POLICY_VIOLATION.to_string(), v.clone())
    } else if let Some(v) = &s.forbidden_reference {
        (Status::False, reasons::FORBIDDEN_REFERENCE.to_string(), v.clone())
    } else if let Some(v) = &s.name_conflict {
        (Status::False, reasons::NAME_CONFLICT.to_string(), v.clone())
    } else if let Some(v) = &s.unadopted_state {
        (
            Status::False,
            reasons::RELEASED_STATE_NOT_ADOPTED.to_string(),
            v.clone(),
        )
    } else if let Some(v) = &s.runner_config_unavailable {
        (Status::False, reasons::RUNNER_CONFIG_UNAVAILABLE.to_string(), v.clone())
    } else if s.paused {
        (Status::False, reasons::PAUSED.to_string(), "paused".to_string())
    } else if let (Some(Reason::Queued), Some(place)) = (reason, &s.holds.queued) {
        // Waiting for a runner slot. An object whose current inputs are applied stays Ready
        // (its drift check or refresh waits), saying so; any other waits Queued.
        if applied && s.deletion_timestamp.is_none() && !interrupted_pending {
            (Status::True, reasons::READY.to_string(), place.clone())
        } else {
            (Status::False, reasons::QUEUED.to_string(), place.clone())
        }
    } else if s.deletion_timestamp.is_some() {
        match reason {
            Some(r @ (Reason::StateUnreadable | Reason::MembersExist)) => (
                Status::False,
                reasons::DELETION_HELD.to_string(),
                match r {
                    Reason::MembersExist => {
                        format!("deletion held: members still exist: {}", s.holds.members.join(", "))
                    }
                    _ => format!(
                        "deletion held: {}",
                        s.holds
                            .state_unreadable
                            .as_deref()
                            .unwrap_or("the state cannot be read")
                    ),
                },
            ),
            _ => (Status::False, reasons::DELETING.to_string(), "destroying".to_string()),
        }
    } else if interrupted_pending {
        (
            Status::False,
            Reason::InterruptedApply.as_str().to_string(),
            "an interrupted apply must be re-run".to_string(),
        )
    } else if active_job.is_some() && !applied {
        (
            Status::False,
            Reason::JobActive.as_str().to_string(),
            format!("Job {} is running", active_job.unwrap_or_default()),
        )
    } else if !applied {
        let r = reason.filter(|r| blocks_ready(*r)).map_or("NotApplied", Reason::as_str);
        let message = match (&s.inputs_hash, reason) {
            // Say which reference is missing or unusable, naming its field.
            (InputsHash::Unresolved(why), Some(Reason::InputsUnresolved)) => {
                format!("the inputs cannot be resolved: {why}")
            }
            // Which rule denied what, as the runner said it.
            (_, Some(Reason::PolicyDenied)) => s
                .jobs
                .iter()
                .find(|r| r.op == Op::Apply && r.outcome == Some(Outcome::PolicyDenied))
                .and_then(|r| r.result.as_ref())
                .map_or_else(|| "a policy denied the plan".to_string(), |r| r.message.clone()),
            _ => "the current inputs are not applied yet".to_string(),
        };
        (Status::False, r.to_string(), message)
    } else {
        (Status::True, reasons::READY.to_string(), String::new())
    }
}

/// Drift found by the newest check but remediated by a later successful apply.
fn drift_resolved(s: &Snapshot) -> bool {
    match (s.last_success(Op::Apply), s.last_drift_check()) {
        (Some(a), Some(c)) => a > c,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_patch_sets_changes_and_clears_removed_fields_with_null() {
        let old = TerraformStatus {
            active_job: Some("tc-x-apply-1".into()),
            next_action: Some(NextAction {
                op: Some(Op::Apply),
                reason: "InputsChangedBackoff".into(),
                not_before: Some(Time(Timestamp::UNIX_EPOCH)),
            }),
            ..Default::default()
        };
        let new = TerraformStatus {
            next_action: Some(NextAction {
                op: Some(Op::Apply),
                reason: "InputsChanged".into(),
                not_before: None,
            }),
            ..Default::default()
        };
        let p = status_patch(&old, &new).unwrap_or_default().unwrap_or_default();
        assert_eq!(
            p,
            serde_json::json!({"status": {"activeJob": null, "nextAction": {"reason": "InputsChanged", "notBefore": null}}})
        );
        assert_eq!(status_patch(&new, &new).ok().flatten(), None);
    }

    fn reconciled(st: &TerraformStatus) -> Option<(String, String, String, Timestamp)> {
        let c = conditions::find(st.conditions.as_deref()?, conditions::RECONCILED)?;
        Some((
            c.status.clone(),
            c.reason.clone(),
            c.message.clone(),
            c.last_transition_time.0,
        ))
    }

    #[test]
    fn a_failed_pass_says_so_in_reconciled_false_and_a_repeated_failure_writes_nothing() {
        let t = |s: i64| Timestamp::from_second(1_800_000_000 + s).unwrap_or(Timestamp::UNIX_EPOCH);
        let old = TerraformStatus {
            active_job: Some("tc-x-apply-1".into()),
            ..Default::default()
        };
        let failed = failed_pass(
            &old,
            "CreateJob",
            "Internal error occurred: etcd timeout",
            Some(3),
            t(10),
        );
        assert_eq!(
            reconciled(&failed),
            Some((
                "False".into(),
                reasons::RECONCILE_ERROR.into(),
                "CreateJob: Internal error occurred: etcd timeout".into(),
                t(10)
            ))
        );
        assert_eq!(failed.active_job, old.active_job, "nothing else changes");
        // The same failure again, later: no patch at all.
        let again = failed_pass(
            &failed,
            "CreateJob",
            "Internal error occurred: etcd timeout",
            Some(3),
            t(70),
        );
        assert_eq!(status_patch(&failed, &again).ok().flatten(), None);
        // A different failure changes the message, not the transition time.
        let other = failed_pass(&failed, "PatchStatus", "the server is currently unable", Some(3), t(80));
        let (_, _, message, since) = reconciled(&other).unwrap_or_else(|| panic!("no Reconciled"));
        assert_eq!(
            (message.as_str(), since),
            ("PatchStatus: the server is currently unable", t(10))
        );
        // A message of any length is bounded.
        let long = failed_pass(&old, "GetSecret", &"x".repeat(100_000), None, t(1));
        assert!(reconciled(&long).is_some_and(|(_, _, m, _)| m.len() <= CONDITION_MESSAGE_LIMIT + 64));
    }

    mod queued {
        #![allow(clippy::unwrap_used)]
        use super::super::*;
        use crate::lock::LockState;
        use crate::snapshot::{DurableRecord, Holds, InputsHash};
        use crate::{Start, queue};
        use captf_shared::types::{CaptfObject, ModuleSpec, TerraformCluster, TerraformClusterSpec, TerraformSpec};

        const HASH: &str = "aaaaaaaaaaaaaaaabbbbbbbbbbbbbbbbccccccccccccccccdddddddddddddddd";
        const PLACE: &str = "waiting for a runner slot: 3 of 7 queued in namespace team-a (10 of 10 running)";

        fn snapshot(applied: bool, deleting: bool) -> Snapshot {
            let mut tc = TerraformCluster::new(
                "net",
                TerraformClusterSpec {
                    terraform: TerraformSpec {
                        module: ModuleSpec {
                            source: "git::https://example.com/m.git".into(),
                            ..Default::default()
                        },
                        ..Default::default()
                    },
                    control_plane_endpoint: None,
                    exports: None,
                },
            );
            tc.metadata.namespace = Some("team-a".into());
            if deleting {
                tc.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
            }
            Snapshot::new(
                &CaptfObject::Cluster(tc),
                vec![],
                DurableRecord {
                    applied_inputs_hash: applied.then(|| HASH.into()),
                    ..Default::default()
                },
                InputsHash::Known(HASH.into()),
                LockState::Free,
                Holds {
                    queued: Some(PLACE.into()),
                    ..Default::default()
                },
            )
            .unwrap()
        }

        fn ready(s: &Snapshot, op: Op, reason: Reason) -> (String, String, String, Option<String>) {
            let start = Start {
                op,
                reason,
                attempt: 1,
                drift_remediation: false,
                force_unlock_id: None,
                approved_plan: None,
                approved_by: None,
                skipped_backoff: None,
            };
            let d = Decision::Wait(queue::queued(&start));
            let st = compute(s, &d, None, Some(HASH), false, Timestamp::UNIX_EPOCH);
            let c = conditions::find(st.conditions.as_deref().unwrap(), conditions::READY).unwrap();
            (
                c.status.clone(),
                c.reason.clone(),
                c.message.clone(),
                st.next_action.map(|n| n.reason),
            )
        }

        #[test]
        fn runner_slots_a_queued_object_that_never_applied_is_not_ready_and_says_its_place() {
            let (status, reason, message, next) = ready(&snapshot(false, false), Op::Apply, Reason::InputsChanged);
            assert_eq!((status.as_str(), reason.as_str()), ("False", "Queued"));
            assert_eq!(message, PLACE);
            assert_eq!(next.as_deref(), Some("Queued"));
        }

        #[test]
        fn runner_slots_a_queued_destroy_is_not_ready_and_says_its_place() {
            let (status, reason, message, _) = ready(&snapshot(true, true), Op::Destroy, Reason::Deleting);
            assert_eq!(
                (status.as_str(), reason.as_str(), message.as_str()),
                ("False", "Queued", PLACE)
            );
        }

        /// Both conditions after a pass that waits for `reason`, of an object that applied an older
        /// hash (`provisioned`) or none.
        fn ready_and_up_to_date(provisioned: bool, deleting: bool, reason: Reason) -> [(String, String, String); 2] {
            let mut s = snapshot(false, deleting);
            s.holds.queued = None;
            s.durable.applied_inputs_hash = provisioned.then(|| "0".repeat(64));
            let d = Decision::Wait(crate::decide::Wait {
                reason,
                op: Some(Op::Apply),
                requeue_after: None,
                not_before: None,
                attempt: None,
            });
            let st = compute(&s, &d, None, Some(HASH), false, Timestamp::UNIX_EPOCH);
            [conditions::READY, conditions::UP_TO_DATE].map(|t| {
                let c = conditions::find(st.conditions.as_deref().unwrap(), t).unwrap();
                (c.status.clone(), c.reason.clone(), c.message.clone())
            })
        }

        #[test]
        fn ready_stays_true_once_provisioned_while_a_change_waits_and_up_to_date_says_why() {
            for reason in [
                Reason::AwaitingApproval,
                Reason::InputsUnresolved,
                Reason::InputsChangedBackoff,
                Reason::Paused,
            ] {
                let [ready, up] = ready_and_up_to_date(true, false, reason);
                assert_eq!((ready.0.as_str(), ready.1.as_str()), ("True", "Ready"), "{reason:?}");
                assert_eq!(up.0, "False", "{reason:?}");
                assert!(
                    ready.2.starts_with("provisioned; not up to date: ") && ready.2.contains(&up.1),
                    "{reason:?}: {ready:?} {up:?}"
                );
            }
        }

        #[test]
        fn ready_is_up_to_date_until_the_first_apply_and_false_once_a_deletion_begins() {
            let [ready, up] = ready_and_up_to_date(false, false, Reason::AwaitingApproval);
            assert_eq!(ready, up);
            assert_eq!((ready.0.as_str(), ready.1.as_str()), ("False", "AwaitingApproval"));
            let [ready, up] = ready_and_up_to_date(true, true, Reason::Deleting);
            assert_eq!(ready, up);
            assert_eq!((ready.0.as_str(), ready.1.as_str()), ("False", "Deleting"));
        }

        #[test]
        fn runner_slots_an_applied_object_whose_drift_check_is_queued_stays_ready_and_says_so() {
            let (status, reason, message, next) = ready(&snapshot(true, false), Op::Drift, Reason::DriftCheckDue);
            assert_eq!(
                (status.as_str(), reason.as_str(), message.as_str()),
                ("True", "Ready", PLACE)
            );
            assert_eq!(next.as_deref(), Some("Queued"));
        }
    }

    #[test]
    fn merge_diff_applied_to_old_gives_new() {
        let old = serde_json::json!({"a": 1, "b": {"c": 2, "d": [1, 2]}, "e": "x"});
        let new = serde_json::json!({"a": 1, "b": {"d": [3]}, "f": true});
        let d = merge_diff(&old, &new).unwrap_or_default();
        let mut merged = old.clone();
        json_merge(&mut merged, &d);
        assert_eq!(merged, new);
    }

    fn json_merge(target: &mut Value, patch: &Value) {
        match (target, patch) {
            (Value::Object(t), Value::Object(p)) => {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        json_merge(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
            (t, p) => *t = p.clone(),
        }
    }
}

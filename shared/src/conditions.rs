//! Condition types and reasons (docs/api.md), and the pure setter that keeps
//! `lastTransitionTime` honest.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// What Cluster API mirrors into the Cluster's and Machine's `InfrastructureReady`: whether the
/// infrastructure is there to use. True from the first successful apply until a deletion begins,
/// whatever later change is queued, running, failing or awaiting approval (`UpToDate` says that).
pub const READY: &str = "Ready";
/// Whether the current inputs are applied and nothing blocks: False with the reason that holds
/// the object (a queued, running or blocked apply, a bad spec, a pause…), as `Ready` is before
/// the first apply.
pub const UP_TO_DATE: &str = "UpToDate";
pub const APPLY_JOB_SUCCEEDED: &str = "ApplyJobSucceeded";
pub const DRIFT_DETECTED: &str = "DriftDetected";
pub const STATE_READABLE: &str = "StateReadable";
pub const PAUSED: &str = "Paused";
/// Whether the controller's last pass over the object got through: `False` names the API call
/// that failed (the pass is retried with a capped backoff).
pub const RECONCILED: &str = "Reconciled";

/// Condition reasons.
pub mod reason {
    pub const APPLY_SUCCEEDED: &str = "ApplySucceeded";
    pub const APPLY_FAILED: &str = "ApplyFailed";
    pub const DESTRUCTIVE_PLAN_BLOCKED: &str = "DestructivePlanBlocked";
    pub const PLAN_CHANGED: &str = "PlanChanged";
    pub const POLICY_DENIED: &str = "PolicyDenied";
    pub const DRIFT_FOUND: &str = "DriftFound";
    pub const NO_DRIFT: &str = "NoDrift";
    pub const NEVER_CHECKED: &str = "NeverChecked";
    pub const STATE_READABLE: &str = "StateReadable";
    pub const STATE_LOCKED: &str = "StateLocked";
    pub const STATE_UNREADABLE: &str = "StateUnreadable";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The spec chooses what the platform team's tenant policy does not allow (no Job starts).
    pub const POLICY_VIOLATION: &str = "PolicyViolation";
    /// What the runner pods mount from the object's namespace is missing (the Terraform CLI
    /// configuration's ConfigMap or its key; no Job starts).
    pub const RUNNER_CONFIG_UNAVAILABLE: &str = "RunnerConfigUnavailable";
    /// The spec names a Secret that is CAPTF's own (another object's state, inputs or outputs),
    /// by its name or by what it carries (no Job starts).
    pub const FORBIDDEN_REFERENCE: &str = "ForbiddenReference";
    /// Something under the object's names belongs to another object (no Job starts).
    pub const NAME_CONFLICT: &str = "NameConflict";
    /// State released under the object's names by a deleted object of the same name is not
    /// adopted by this one (`captf.io/adopt-state`; no Job starts).
    pub const RELEASED_STATE_NOT_ADOPTED: &str = "ReleasedStateNotAdopted";
    pub const PAUSED: &str = "Paused";
    pub const DELETION_HELD: &str = "DeletionHeld";
    /// The object is due to start a Job and waits for a runner slot (the limits on running
    /// Jobs); the message gives its place.
    pub const QUEUED: &str = "Queued";
    pub const PROVISIONED: &str = "Provisioned";
    /// `UpToDate=True` and `Ready=True` with nothing pending.
    pub const READY: &str = "Ready";
    /// `Ready=False` while the object's infrastructure is destroyed.
    pub const DELETING: &str = "Deleting";
    /// `Reconciled=True`: the last pass read, decided and wrote everything it needed to.
    pub const RECONCILE_SUCCEEDED: &str = "ReconcileSucceeded";
    /// `Reconciled=False`: the last pass failed; the message says which call and why.
    pub const RECONCILE_ERROR: &str = "ReconcileError";
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

/// Set (or add) a condition. `lastTransitionTime` moves only when the status changes.
/// Returns true when anything changed.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: Status,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: Timestamp,
) -> bool {
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        let changed_status = c.status != status.as_str();
        let changed = changed_status
            || c.reason != reason
            || c.message != message
            || c.observed_generation != observed_generation;
        if changed_status {
            c.last_transition_time = Time(now);
        }
        c.status = status.as_str().to_string();
        c.reason = reason.to_string();
        c.message = message.to_string();
        c.observed_generation = observed_generation;
        changed
    } else {
        conditions.push(Condition {
            type_: type_.to_string(),
            status: status.as_str().to_string(),
            reason: reason.to_string(),
            message: message.to_string(),
            observed_generation,
            last_transition_time: Time(now),
        });
        true
    }
}

/// Find a condition by type.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_transition_time_moves_only_on_a_status_change() {
        let t0 = Timestamp::from_second(1_000).unwrap();
        let t1 = Timestamp::from_second(2_000).unwrap();
        let t2 = Timestamp::from_second(3_000).unwrap();
        let mut cs = vec![];
        assert!(set_condition(
            &mut cs,
            READY,
            Status::False,
            "ApplyFailed",
            "a",
            Some(1),
            t0
        ));
        assert!(set_condition(
            &mut cs,
            READY,
            Status::False,
            "ApplyFailed",
            "b",
            Some(1),
            t1
        ));
        assert_eq!(cs[0].last_transition_time, Time(t0));
        assert!(!set_condition(
            &mut cs,
            READY,
            Status::False,
            "ApplyFailed",
            "b",
            Some(1),
            t1
        ));
        assert!(set_condition(
            &mut cs,
            READY,
            Status::True,
            "ApplySucceeded",
            "",
            Some(1),
            t2
        ));
        assert_eq!(cs[0].last_transition_time, Time(t2));
        assert_eq!(cs.len(), 1);
    }
}

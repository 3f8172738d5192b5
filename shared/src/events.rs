//! The reasons and actions of the Events the controller publishes (docs/operating.md), one
//! home each: the controller emits them, and `kubectl captf` and the tests look them up by these
//! names.

/// `Event.reason`: what happened.
pub mod reason {
    /// A Job started (note: op, why, attempt).
    pub const JOB_STARTED: &str = "JobStarted";
    /// A Job failed (Warning).
    pub const JOB_FAILED: &str = "JobFailed";
    /// A Job ran out of its `activeDeadlineSeconds` (Warning).
    pub const JOB_DEADLINE_EXCEEDED: &str = "JobDeadlineExceeded";
    /// A Job was interrupted (its pod evicted or deleted); not counted as a failure (Normal).
    pub const JOB_INTERRUPTED: &str = "JobInterrupted";
    /// A plan deletes or replaces resources and waits for a person (Warning).
    pub const DESTRUCTIVE_PLAN_BLOCKED: &str = "DestructivePlanBlocked";
    /// An approved plan no longer matched what the Job planned: nothing applied, the new plan
    /// waits for its own approval (Warning).
    pub const PLAN_CHANGED: &str = "PlanChanged";
    /// A policy on the plan denied it: nothing applied (Warning; note: each rule, address and
    /// message).
    pub const POLICY_DENIED: &str = "PolicyDenied";
    /// A policy on the plan warned about it; the plan went on (Warning; note: the warnings).
    pub const POLICY_WARNING: &str = "PolicyWarning";
    /// An apply Job starts with the plan a person approved (note: the plan hash, by whom).
    pub const PLAN_APPROVED: &str = "PlanApproved";
    /// A Job starts before its backoff ended because a person asked (note: who, why, the time
    /// it would have waited for).
    pub const BACKOFF_SKIPPED: &str = "BackoffSkipped";
    /// An apply succeeded (Normal).
    pub const APPLIED: &str = "Applied";
    /// A drift check found the infrastructure no longer matches the inputs (Warning).
    pub const DRIFT_FOUND: &str = "DriftFound";
    /// A drift-remediation apply succeeded (Normal).
    pub const DRIFT_REMEDIATED: &str = "DriftRemediated";
    /// A refresh succeeded (Normal).
    pub const REFRESHED: &str = "Refreshed";
    /// A destroy succeeded: the infrastructure is gone (Normal).
    pub const DESTROYED: &str = "Destroyed";
    /// A person's request (`captf.io/refresh`, `captf.io/reconcile-now`) is dated later than the
    /// controller's clock allows, and is ignored (Warning; once per value).
    pub const REQUEST_IGNORED: &str = "RequestIgnored";
    /// A Job force-unlocks a stale state lock left by a dead runner (Warning).
    pub const FORCE_UNLOCKED: &str = "ForceUnlocked";
    /// Something under the object's names belongs to another object (Warning).
    pub const NAME_CONFLICT: &str = crate::conditions::reason::NAME_CONFLICT;
    /// Released state under the object's names is not adopted by it (Warning).
    pub const RELEASED_STATE_NOT_ADOPTED: &str = crate::conditions::reason::RELEASED_STATE_NOT_ADOPTED;
    /// Somebody else holds the state lock (Warning).
    pub const STATE_LOCKED: &str = crate::conditions::reason::STATE_LOCKED;
    /// A machine pool or machine labelled with a TerraformCluster's cluster is not a verified
    /// member, so it does not hold the cluster's deletion (Warning, on both; once per deletion).
    pub const UNVERIFIED_MEMBER: &str = "UnverifiedMember";
    /// Warning: a successful apply's outputs lack an output the cluster exports; its members wait.
    pub const EXPORT_MISSING: &str = "ExportMissing";
}

/// `Event.action`: what the controller was doing.
pub mod action {
    pub const BOOK: &str = "Book";
    pub const START_JOB: &str = "StartJob";
    pub const CHECK_NAMES: &str = "CheckNames";
    pub const CHECK_LOCK: &str = "CheckLock";
    /// Reading the object's requests and spec in a pass.
    pub const RECONCILE: &str = "Reconcile";
}

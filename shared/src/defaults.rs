//! Defaults (docs/api.md): `apply_defaults` fills every unset field, and [`Effective`]
//! is the spec as the controller uses it, with the same defaults.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::types::{
    ApprovalMode, CaptfObject, DeletionPolicy, DestructiveGuard, DriftSpec, EncryptionMode, GuardSpec, JobsSpec,
    Remediation, TerraformSpec,
};

/// The default Job deadline as a literal, so the CRD's CEL rule (`types::resources`) is built
/// from the same number at compile time: `concat!(…, default_active_deadline_seconds!(), …)`.
#[macro_export]
macro_rules! default_active_deadline_seconds {
    () => {
        3600
    };
}

pub const DEFAULT_ACTIVE_DEADLINE_SECONDS: i64 = default_active_deadline_seconds!();
/// The lock timeout default is `min(300, activeDeadlineSeconds / 2)`.
pub const MAX_DEFAULT_LOCK_TIMEOUT_SECONDS: i64 = 300;
pub const DEFAULT_FAILED_JOBS_HISTORY_LIMIT: i32 = 3;
pub const DEFAULT_SUCCESSFUL_JOBS_HISTORY_LIMIT: i32 = 1;
pub const DEFAULT_DRIFT_INTERVAL: &str = "30m";

/// The derived default: a lock wait may use at most half the deadline, and never more than 5 minutes.
pub fn default_lock_timeout_seconds(active_deadline_seconds: i64) -> i64 {
    MAX_DEFAULT_LOCK_TIMEOUT_SECONDS.min(active_deadline_seconds / 2)
}

/// A lock timeout nobody chose follows a lowered deadline (docs/api.md, "Defaults on update"):
/// on an update that changes `activeDeadlineSeconds` and leaves `lockTimeoutSeconds` as it was,
/// when that value is the default of the old deadline and is not below the new one (so the
/// update would be refused for a value the user most likely never set), it becomes the default of
/// the new deadline. A value that is not the old default, or that still fits, is kept. Returns
/// `(old value, new value)` when it changes.
pub fn rederived_lock_timeout(old: &JobsSpec, new: &JobsSpec) -> Option<(i64, i64)> {
    let old_deadline = old.active_deadline_seconds.unwrap_or(DEFAULT_ACTIVE_DEADLINE_SECONDS);
    let new_deadline = new.active_deadline_seconds.unwrap_or(DEFAULT_ACTIVE_DEADLINE_SECONDS);
    let lock = new.lock_timeout_seconds?;
    let rederive = old_deadline != new_deadline
        && old.lock_timeout_seconds == Some(lock)
        && lock == default_lock_timeout_seconds(old_deadline)
        && lock >= new_deadline
        && new_deadline >= crate::limits::MIN_ACTIVE_DEADLINE_SECONDS;
    rederive.then(|| (lock, default_lock_timeout_seconds(new_deadline)))
}

/// Fill in every default of a Terraform spec. Values already set are never changed.
pub fn apply_spec_defaults(spec: &mut TerraformSpec) {
    spec.variables.get_or_insert_with(BTreeMap::new);
    spec.variables_from.get_or_insert_with(Vec::new);
    let jobs = spec.jobs.get_or_insert_with(JobsSpec::default);
    let deadline = *jobs
        .active_deadline_seconds
        .get_or_insert(DEFAULT_ACTIVE_DEADLINE_SECONDS);
    jobs.lock_timeout_seconds
        .get_or_insert(default_lock_timeout_seconds(deadline));
    jobs.failed_jobs_history_limit
        .get_or_insert(DEFAULT_FAILED_JOBS_HISTORY_LIMIT);
    jobs.successful_jobs_history_limit
        .get_or_insert(DEFAULT_SUCCESSFUL_JOBS_HISTORY_LIMIT);
    let drift = spec.drift.get_or_insert_with(DriftSpec::default);
    drift.interval.get_or_insert_with(|| DEFAULT_DRIFT_INTERVAL.to_string());
    drift.remediation.get_or_insert(Remediation::Auto);
    spec.guard
        .get_or_insert_with(GuardSpec::default)
        .destructive
        .get_or_insert(DestructiveGuard::Block);
    spec.deletion_policy.get_or_insert(DeletionPolicy::Destroy);
    spec.paused.get_or_insert(false);
    if let Some(e) = spec.state_encryption.as_mut() {
        e.mode.get_or_insert(EncryptionMode::Encrypt);
    }
}

/// Fill in every default of an object (a template's `spec.template.spec` included).
pub fn apply_defaults(obj: &mut CaptfObject) {
    apply_spec_defaults(obj.terraform_spec_mut());
}

/// The spec with every default resolved, as the controller acts on it. Built once per pass by
/// [`effective`]; every derived setting has its one owner here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effective {
    pub active_deadline_seconds: i64,
    pub lock_timeout_seconds: i64,
    /// The failed-Jobs limit as backoff, remediation and pruning use it: a `failedJobsHistoryLimit`
    /// of 0 counts as 1 (pruning always keeps the newest unresolved failure), applied here and
    /// nowhere else.
    pub failed_limit: NonZeroU32,
    pub successful_jobs_history_limit: u32,
    /// `None` when drift checks are disabled (`0`) or the interval does not parse.
    pub drift_interval: Option<Duration>,
    pub remediation: Remediation,
    /// Which plans wait for approval ([`crate::types::GuardSpec::mode`]).
    pub guard: ApprovalMode,
    pub deletion_policy: DeletionPolicy,
    pub paused: bool,
}

/// Resolve the effective spec. Negative numbers (rejected by validation) are clamped to 0.
pub fn effective(spec: &TerraformSpec) -> Effective {
    let jobs = spec.jobs.clone().unwrap_or_default();
    let drift = spec.drift.clone().unwrap_or_default();
    let deadline = jobs.active_deadline_seconds.unwrap_or(DEFAULT_ACTIVE_DEADLINE_SECONDS);
    let interval = drift.interval.as_deref().unwrap_or(DEFAULT_DRIFT_INTERVAL);
    Effective {
        active_deadline_seconds: deadline,
        lock_timeout_seconds: jobs
            .lock_timeout_seconds
            .unwrap_or_else(|| default_lock_timeout_seconds(deadline)),
        failed_limit: failed_limit(
            jobs.failed_jobs_history_limit
                .unwrap_or(DEFAULT_FAILED_JOBS_HISTORY_LIMIT),
        ),
        successful_jobs_history_limit: clamp_u32(
            jobs.successful_jobs_history_limit
                .unwrap_or(DEFAULT_SUCCESSFUL_JOBS_HISTORY_LIMIT),
        ),
        drift_interval: crate::duration::parse(interval).ok().filter(|d| !d.is_zero()),
        remediation: drift.remediation.unwrap_or_default(),
        guard: spec.guard.as_ref().map(GuardSpec::mode).unwrap_or_default(),
        deletion_policy: spec.deletion_policy.unwrap_or_default(),
        paused: spec.paused.unwrap_or(false),
    }
}

fn clamp_u32(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

/// `failedJobsHistoryLimit` as the rules use it: 0 (and a negative number, which validation
/// rejects) counts as 1.
pub fn failed_limit(v: i32) -> NonZeroU32 {
    NonZeroU32::new(clamp_u32(v)).unwrap_or(NonZeroU32::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ModuleSpec;

    fn minimal() -> TerraformSpec {
        TerraformSpec {
            module: ModuleSpec {
                source: "git::https://example.com/m.git".into(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn every_default_of_the_table_is_filled_in() {
        let mut s = minimal();
        apply_spec_defaults(&mut s);
        let jobs = s.jobs.clone().unwrap_or_default();
        assert_eq!(jobs.active_deadline_seconds, Some(3600));
        assert_eq!(jobs.lock_timeout_seconds, Some(300));
        assert_eq!(jobs.failed_jobs_history_limit, Some(3));
        assert_eq!(jobs.successful_jobs_history_limit, Some(1));
        assert_eq!(jobs.image, None, "image stays unset: the controller's --runner-image");
        assert_eq!(jobs.service_account_name, None);
        let drift = s.drift.clone().unwrap_or_default();
        assert_eq!(drift.interval.as_deref(), Some("30m"));
        assert_eq!(drift.remediation, Some(Remediation::Auto));
        assert_eq!(
            s.guard.as_ref().and_then(|g| g.destructive),
            Some(DestructiveGuard::Block)
        );
        assert_eq!(
            s.guard.as_ref().and_then(|g| g.approval),
            None,
            "approval stays unset: a default would contradict a later destructive: Allow"
        );
        assert_eq!(s.deletion_policy, Some(DeletionPolicy::Destroy));
        assert_eq!(s.paused, Some(false));
        assert_eq!(s.variables, Some(BTreeMap::new()));
        assert_eq!(s.variables_from, Some(vec![]));
    }

    fn jobs(deadline: Option<i64>, lock: Option<i64>) -> JobsSpec {
        JobsSpec {
            active_deadline_seconds: deadline,
            lock_timeout_seconds: lock,
            ..Default::default()
        }
    }

    #[test]
    fn a_defaulted_lock_timeout_follows_a_deadline_lowered_below_it() {
        // The seed's numbers: the deadline defaults to 3600 and the lock timeout to 300; lowered
        // to 120, the lock timeout becomes 60 instead of refusing the update.
        assert_eq!(
            rederived_lock_timeout(&jobs(Some(3600), Some(300)), &jobs(Some(120), Some(300))),
            Some((300, 60))
        );
        // An unset deadline is the default one.
        assert_eq!(
            rederived_lock_timeout(&jobs(None, Some(300)), &jobs(Some(200), Some(300))),
            Some((300, 100))
        );
        // Still below the new deadline: kept.
        assert_eq!(
            rederived_lock_timeout(&jobs(Some(3600), Some(300)), &jobs(Some(600), Some(300))),
            None
        );
        // Not the old default (the user chose it), changed by this update, or no deadline change:
        // kept, and validation says what is wrong.
        assert_eq!(
            rederived_lock_timeout(&jobs(Some(3600), Some(250)), &jobs(Some(120), Some(250))),
            None
        );
        assert_eq!(
            rederived_lock_timeout(&jobs(Some(3600), Some(300)), &jobs(Some(120), Some(200))),
            None
        );
        assert_eq!(
            rederived_lock_timeout(&jobs(Some(600), Some(300)), &jobs(Some(600), Some(300))),
            None
        );
        // A deadline below the minimum is refused by validation, not papered over.
        assert_eq!(
            rederived_lock_timeout(&jobs(Some(3600), Some(300)), &jobs(Some(30), Some(300))),
            None
        );
    }

    proptest::proptest! {
        /// Whatever the update, a rederived lock timeout is the new deadline's default, below it,
        /// and only replaces the old deadline's default left unchanged.
        #[test]
        fn a_rederived_lock_timeout_is_the_new_default_and_fits(
            old_deadline in proptest::option::of(-10i64..100_000),
            new_deadline in proptest::option::of(-10i64..100_000),
            lock in proptest::option::of(-10i64..100_000),
            new_lock in proptest::option::of(-10i64..100_000),
        ) {
            let old = jobs(old_deadline, lock);
            for new in [jobs(new_deadline, lock), jobs(new_deadline, new_lock)] {
                if let Some((was, now)) = rederived_lock_timeout(&old, &new) {
                    let d_old = old_deadline.unwrap_or(DEFAULT_ACTIVE_DEADLINE_SECONDS);
                    let d_new = new_deadline.unwrap_or(DEFAULT_ACTIVE_DEADLINE_SECONDS);
                    proptest::prop_assert_eq!(Some(was), lock);
                    proptest::prop_assert_eq!(new.lock_timeout_seconds, lock);
                    proptest::prop_assert_eq!(was, default_lock_timeout_seconds(d_old));
                    proptest::prop_assert_eq!(now, default_lock_timeout_seconds(d_new));
                    proptest::prop_assert!(now < d_new && now >= 0);
                }
            }
        }
    }

    #[test]
    fn lock_timeout_default_is_min_300_and_half_the_deadline() {
        assert_eq!(default_lock_timeout_seconds(3600), 300);
        assert_eq!(default_lock_timeout_seconds(600), 300);
        assert_eq!(default_lock_timeout_seconds(400), 200);
        assert_eq!(default_lock_timeout_seconds(60), 30);
        let mut s = minimal();
        s.jobs = Some(JobsSpec {
            active_deadline_seconds: Some(120),
            ..Default::default()
        });
        apply_spec_defaults(&mut s);
        assert_eq!(s.jobs.and_then(|j| j.lock_timeout_seconds), Some(60));
    }

    #[test]
    fn defaults_never_change_values_that_are_set() {
        let mut s = minimal();
        s.jobs = Some(JobsSpec {
            active_deadline_seconds: Some(900),
            lock_timeout_seconds: Some(10),
            failed_jobs_history_limit: Some(0),
            ..Default::default()
        });
        s.paused = Some(true);
        let before = s.clone();
        apply_spec_defaults(&mut s);
        let jobs = s.jobs.clone().unwrap_or_default();
        assert_eq!(jobs.active_deadline_seconds, Some(900));
        assert_eq!(jobs.lock_timeout_seconds, Some(10));
        assert_eq!(jobs.failed_jobs_history_limit, Some(0));
        assert_eq!(s.paused, before.paused);
        // Idempotent.
        let once = s.clone();
        apply_spec_defaults(&mut s);
        assert_eq!(s, once);
    }

    #[test]
    fn effective_matches_apply_defaults() {
        let raw = minimal();
        let mut defaulted = raw.clone();
        apply_spec_defaults(&mut defaulted);
        assert_eq!(effective(&raw), effective(&defaulted));
        let e = effective(&raw);
        assert_eq!(e.drift_interval, Some(Duration::from_secs(1800)));
        assert_eq!(e.failed_limit.get(), 3);
    }

    #[test]
    fn failed_limit_zero_counts_like_one() {
        let mut s = minimal();
        s.jobs = Some(JobsSpec {
            failed_jobs_history_limit: Some(0),
            ..Default::default()
        });
        assert_eq!(effective(&s).failed_limit.get(), 1);
    }

    #[test]
    fn failed_limit_is_the_set_value_from_one_up() {
        for (set, effective) in [(-1, 1), (0, 1), (1, 1), (3, 3), (5, 5)] {
            assert_eq!(failed_limit(set).get(), effective, "failedJobsHistoryLimit {set}");
        }
    }

    #[test]
    fn the_crd_cel_rule_uses_the_default_deadline_constant() {
        let fallback = format!(": {DEFAULT_ACTIVE_DEADLINE_SECONDS})");
        assert!(
            crate::types::CEL_LOCK_TIMEOUT_BELOW_DEADLINE.ends_with(&fallback),
            "{}",
            crate::types::CEL_LOCK_TIMEOUT_BELOW_DEADLINE
        );
    }

    #[test]
    fn drift_interval_zero_disables_drift_checks() {
        let mut s = minimal();
        s.drift = Some(DriftSpec {
            interval: Some("0".into()),
            remediation: None,
        });
        assert_eq!(effective(&s).drift_interval, None);
    }

    #[test]
    fn the_approval_mode_is_approval_when_set_else_what_destructive_spells() {
        use DestructiveGuard::{Allow, Block};
        let cases = [
            (None, None, ApprovalMode::Destructive),
            (None, Some(Block), ApprovalMode::Destructive),
            (None, Some(Allow), ApprovalMode::Never),
            (Some(ApprovalMode::Always), Some(Block), ApprovalMode::Always),
            (Some(ApprovalMode::Never), Some(Block), ApprovalMode::Never),
            (Some(ApprovalMode::Destructive), None, ApprovalMode::Destructive),
        ];
        for (approval, destructive, want) in cases {
            let mut s = minimal();
            s.guard = Some(GuardSpec {
                destructive,
                approval,
                policy_refs: None,
            });
            assert_eq!(
                effective(&s).guard,
                want,
                "approval {approval:?}, destructive {destructive:?}"
            );
        }
        assert_eq!(effective(&minimal()).guard, ApprovalMode::Destructive);
    }

    #[test]
    fn the_runner_reads_back_every_mode_the_controller_writes() {
        for mode in [ApprovalMode::Destructive, ApprovalMode::Always, ApprovalMode::Never] {
            assert_eq!(ApprovalMode::from_runner_value(mode.runner_value()), Some(mode));
            assert_eq!(ApprovalMode::from_runner_value(mode.as_str()), Some(mode));
        }
        assert_eq!(
            ApprovalMode::Destructive.runner_value(),
            "Block",
            "what every runner release reads"
        );
        assert_eq!(ApprovalMode::Never.runner_value(), "Allow");
        assert_eq!(ApprovalMode::from_runner_value("always"), None);
    }
}

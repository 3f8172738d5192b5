//! The drift-remediation cap (docs/rules.md rule 7).

use std::num::NonZeroU32;

use k8s_openapi::jiff::Timestamp;

use captf_shared::Op;

use super::outcome::Outcome;
use super::record::JobRecord;

/// Where remediation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remediation {
    /// Failed apply Jobs that finished after the last successful drift check, back to an apply success.
    pub count: u32,
    /// The effective failed-Jobs limit (0 counts as 1, see `Effective::failed_limit`).
    pub limit: NonZeroU32,
}

impl Remediation {
    /// May another remediating apply start?
    pub fn allowed(&self) -> bool {
        self.count < self.limit.get()
    }
}

/// Count the failed apply Jobs (any apply, remediating or not) that finished after the last
/// successful drift check, newest first, stopping at an apply success. Blocked, plan-changed and
/// interrupted applies do not count.
pub fn remediation_count(history: &[JobRecord], last_drift_check: Option<Timestamp>) -> u32 {
    let mut count = 0u32;
    for r in history.iter().filter(|r| r.op == Op::Apply) {
        if let (Some(check), Some(t)) = (last_drift_check, r.time())
            && t <= check
        {
            break;
        }
        match r.outcome {
            Some(Outcome::Succeeded) => break,
            Some(o) if o.counts_as_failure() => count = count.saturating_add(1),
            _ => {}
        }
    }
    count
}

/// The remediation state of the object.
pub fn remediation(
    history: &[JobRecord],
    last_drift_check: Option<Timestamp>,
    failed_limit: NonZeroU32,
) -> Remediation {
    Remediation {
        count: remediation_count(history, last_drift_check),
        limit: failed_limit,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::record::tests::rec;

    fn remediating(seq: u32, outcome: Outcome) -> JobRecord {
        let mut r = rec(Op::Apply, seq, Some(outcome));
        r.drift_remediation = true;
        r
    }

    #[test]
    fn remediation_stops_at_the_limit_and_resumes_after_a_successful_drift_check() {
        // Limit 3: a drift check (seq 2) found drift, then three remediating applies failed.
        let check = rec(Op::Drift, 2, Some(Outcome::Succeeded));
        let mut h = vec![
            remediating(5, Outcome::Failed),
            remediating(4, Outcome::Deadline),
            remediating(3, Outcome::Failed),
            check.clone(),
            rec(Op::Apply, 1, Some(Outcome::Succeeded)),
        ];
        let r = remediation(&h, check.finished, captf_shared::defaults::failed_limit(3));
        assert_eq!((r.count, r.allowed()), (3, false));
        // Two failures: one more may run.
        assert!(remediation(&h[1..], check.finished, captf_shared::defaults::failed_limit(3)).allowed());
        // The next successful drift check resets the count.
        let recheck = rec(Op::Drift, 6, Some(Outcome::Succeeded));
        h.insert(0, recheck.clone());
        let r = remediation(&h, recheck.finished, captf_shared::defaults::failed_limit(3));
        assert_eq!((r.count, r.allowed()), (0, true));
    }

    #[test]
    fn blocked_and_plan_changed_remediations_do_not_count() {
        let check = rec(Op::Drift, 1, Some(Outcome::Succeeded));
        let h = vec![
            remediating(4, Outcome::Blocked),
            remediating(3, Outcome::PlanChanged),
            remediating(2, Outcome::Failed),
            check.clone(),
        ];
        assert_eq!(remediation_count(&h, check.finished), 1);
    }

    #[test]
    fn a_remediation_limit_of_0_counts_as_1() {
        let check = rec(Op::Drift, 1, Some(Outcome::Succeeded));
        let h = vec![remediating(2, Outcome::Failed), check.clone()];
        let r = remediation(&h, check.finished, captf_shared::defaults::failed_limit(0));
        assert_eq!((r.count, r.limit.get(), r.allowed()), (1, 1, false));
        assert!(remediation(&h[1..], check.finished, captf_shared::defaults::failed_limit(0)).allowed());
    }

    #[test]
    fn the_count_stops_at_an_apply_success() {
        let check = rec(Op::Drift, 1, Some(Outcome::Succeeded));
        let h = vec![
            remediating(4, Outcome::Failed),
            remediating(3, Outcome::Succeeded),
            remediating(2, Outcome::Failed),
            check.clone(),
        ];
        assert_eq!(remediation_count(&h, check.finished), 1);
    }
}

//! Failure counting and backoff per op (docs/rules.md, "Retries and backoff" and "Failure
//! counts"). The one failure count is the booked `status.consecutiveFailures`; the history count
//! here only stands in for it when the status lost it, and the retry number and the delay are
//! both derived from the result.

use std::num::NonZeroU32;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use captf_shared::Op;

use super::outcome::Outcome;
use super::record::JobRecord;

/// The compiled-in base delay: one minute.
pub const BASE: Duration = Duration::from_secs(60);
/// The compiled-in cap: ten minutes.
pub const CAP: Duration = Duration::from_secs(600);

/// The backoff of one op over the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub op: Op,
    /// Consecutive failed Jobs of the op since its last success (blocked, plan-changed, interrupted
    /// skipped): the larger of the booked count and the failures still in the history.
    pub n: u32,
    /// The retry number of the next Job: `1 + n` (the `captf.io/attempt` label, `captf_job_attempts`).
    pub attempt: u32,
    /// The delay after `n` failures (zero when `n` is 0).
    pub delay: Duration,
    /// When the next Job of the op may start: the newest failure's finish time plus the delay.
    pub not_before: Option<Timestamp>,
    /// When the newest failed Job of the op in the history finished.
    pub newest_failure: Option<Timestamp>,
    limit: NonZeroU32,
}

impl Backoff {
    /// Which part of the rule gave [`Backoff::delay`] ([`delay_rule`]).
    pub fn rule(&self) -> String {
        delay_rule(self.n, self.limit)
    }

    /// Is `now` still inside the delay?
    pub fn waiting(&self, now: Timestamp) -> bool {
        self.not_before.is_some_and(|nb| now < nb)
    }

    /// The backoff with the booked failure count (`status.consecutiveFailures` of the op), which
    /// pruning never caps: `n` becomes the larger of the two, and the retry number keeps counting
    /// past the history limit. The delay is the same either way from the limit on (the cap).
    pub fn with_booked(self, booked: u32) -> Backoff {
        let n = self.n.max(booked);
        let delay = delay(n, self.limit);
        let not_before = self
            .newest_failure
            .and_then(|t| t.checked_add(SignedDuration::try_from(delay).ok()?).ok());
        Backoff {
            n,
            attempt: n.saturating_add(1),
            delay,
            not_before,
            ..self
        }
    }
}

/// `min(1m × 2^(n-1), 10m)`, and 10m straight away once `n` reaches the limit (the effective
/// limit, where 0 already counts as 1).
pub fn delay(n: u32, failed_limit: NonZeroU32) -> Duration {
    if n == 0 {
        return Duration::ZERO;
    }
    if n >= failed_limit.get() {
        return CAP;
    }
    // 2^(n-1) minutes passes the cap from n = 5 on; stop shifting before it could overflow.
    let exp = (n - 1).min(10);
    BASE.saturating_mul(1u32 << exp).min(CAP)
}

/// Which part of [`delay`]'s rule gave the delay after `n` failures in a row, in words (what
/// `explain` and `status` say after the delay).
pub fn delay_rule(n: u32, failed_limit: NonZeroU32) -> String {
    let limit = failed_limit.get();
    let cap = CAP.as_secs() / 60;
    if n == 0 {
        "no failure in a row, no delay".to_string()
    } else if n >= limit {
        format!("{n} failures in a row reached failedJobsHistoryLimit ({limit}), so the delay is the cap, {cap}m")
    } else if delay(n, failed_limit) == CAP {
        format!("1m doubled with each failure after the first reaches the cap, {cap}m")
    } else if n == 1 {
        format!(
            "1m after the first failure, doubling with each next one, and the cap ({cap}m) from failure {limit} in a row (failedJobsHistoryLimit)"
        )
    } else {
        format!(
            "1m doubled with each of the {} failures after the first, and the cap ({cap}m) from failure {limit} in a row (failedJobsHistoryLimit)",
            n - 1
        )
    }
}

/// Count the op's failures newest first until a success of that op.
///
/// `history` is newest first. `last_success` (from `status.lastSuccessTime`) stops the count at
/// failures that finished before a success whose Job was pruned.
pub fn count_failures(history: &[JobRecord], op: Op, last_success: Option<Timestamp>) -> (u32, Option<&JobRecord>) {
    let mut n = 0u32;
    let mut newest = None;
    for r in history.iter().filter(|r| r.op == op) {
        match r.outcome {
            None => continue,
            Some(Outcome::Succeeded) => break,
            Some(o) if o.counts_as_failure() => {
                if let (Some(ls), Some(t)) = (last_success, r.time())
                    && t <= ls
                {
                    break;
                }
                n = n.saturating_add(1);
                newest.get_or_insert(r);
            }
            Some(_) => continue,
        }
    }
    (n, newest)
}

/// The backoff of `op` over `history` (newest first).
pub fn backoff(history: &[JobRecord], op: Op, failed_limit: NonZeroU32, last_success: Option<Timestamp>) -> Backoff {
    let (n, newest) = count_failures(history, op, last_success);
    Backoff {
        op,
        n: 0,
        attempt: 1,
        delay: Duration::ZERO,
        not_before: None,
        newest_failure: newest.and_then(JobRecord::time),
        limit: failed_limit,
    }
    .with_booked(n)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_delay_rule_names_the_part_that_applied_with_the_seeds_numbers() {
        // The seed: failedJobsHistoryLimit 3, so 1m, 2m, then the cap of 10m.
        let limit = std::num::NonZeroU32::new(3).unwrap();
        assert_eq!(super::delay(1, limit).as_secs(), 60);
        assert!(super::delay_rule(1, limit).starts_with("1m after the first failure"));
        assert_eq!(super::delay(2, limit).as_secs(), 120);
        assert!(super::delay_rule(2, limit).starts_with("1m doubled with each of the 1 failures"));
        assert_eq!(super::delay(3, limit).as_secs(), 600);
        assert_eq!(
            super::delay_rule(3, limit),
            "3 failures in a row reached failedJobsHistoryLimit (3), so the delay is the cap, 10m"
        );
        // A high limit: the doubling itself reaches the cap (16m > 10m at the fifth failure).
        let high = std::num::NonZeroU32::new(10).unwrap();
        assert_eq!(super::delay(5, high).as_secs(), 600);
        assert!(super::delay_rule(5, high).ends_with("reaches the cap, 10m"));
        assert_eq!(super::delay_rule(0, limit), "no failure in a row, no delay");
    }

    use crate::record::tests::rec;
    use proptest::prelude::*;

    const M: u64 = 60;

    fn lim(n: i32) -> NonZeroU32 {
        captf_shared::defaults::failed_limit(n)
    }

    fn mins(d: Duration) -> u64 {
        d.as_secs() / M
    }

    #[test]
    fn limit_3_gives_1m_2m_then_10m() {
        assert_eq!([1, 2, 3].map(|n| mins(delay(n, lim(3)))), [1, 2, 10]);
    }

    #[test]
    fn limit_5_gives_1m_2m_4m_8m_10m() {
        assert_eq!([1, 2, 3, 4, 5].map(|n| mins(delay(n, lim(5)))), [1, 2, 4, 8, 10]);
    }

    #[test]
    fn limit_0_counts_as_1_and_gives_10m_straight_away() {
        assert_eq!(mins(delay(1, lim(0))), 10);
        assert_eq!(mins(delay(2, lim(0))), 10);
        assert_eq!(delay(0, lim(0)), Duration::ZERO);
    }

    #[test]
    fn the_delay_counts_from_the_newest_failed_jobs_finish() {
        // Newest first: apply 3 failed, apply 2 failed, apply 1 succeeded.
        let h = vec![
            rec(Op::Apply, 3, Some(Outcome::Failed)),
            rec(Op::Apply, 2, Some(Outcome::Deadline)),
            rec(Op::Apply, 1, Some(Outcome::Succeeded)),
        ];
        let b = backoff(&h, Op::Apply, lim(3), None);
        assert_eq!((b.n, b.attempt, mins(b.delay)), (2, 3, 2));
        assert_eq!(
            b.not_before,
            Some(h[0].finished.unwrap() + SignedDuration::from_secs(120))
        );
        assert!(b.waiting(h[0].finished.unwrap() + SignedDuration::from_secs(119)));
        assert!(!b.waiting(h[0].finished.unwrap() + SignedDuration::from_secs(120)));
    }

    #[test]
    fn a_failing_drift_check_never_delays_an_apply() {
        let h = vec![
            rec(Op::Drift, 5, Some(Outcome::Failed)),
            rec(Op::Drift, 4, Some(Outcome::Deadline)),
            rec(Op::Drift, 3, Some(Outcome::Failed)),
            rec(Op::Apply, 2, Some(Outcome::Succeeded)),
        ];
        let apply = backoff(&h, Op::Apply, lim(3), None);
        assert_eq!((apply.n, apply.attempt, apply.not_before), (0, 1, None));
        assert_eq!(backoff(&h, Op::Drift, lim(3), None).n, 3);
    }

    #[test]
    fn blocked_plan_changed_and_interrupted_count_toward_nothing() {
        let h = vec![
            rec(Op::Apply, 6, Some(Outcome::Blocked)),
            rec(Op::Apply, 5, Some(Outcome::PlanChanged)),
            rec(Op::Apply, 4, Some(Outcome::Interrupted)),
            rec(Op::Apply, 3, Some(Outcome::Failed)),
            rec(Op::Apply, 2, Some(Outcome::Succeeded)),
        ];
        let b = backoff(&h, Op::Apply, lim(3), None);
        assert_eq!((b.n, b.attempt), (1, 2));
        // The delay still counts from the failed Job, not from the skipped ones.
        assert_eq!(
            b.not_before,
            Some(h[3].finished.unwrap() + SignedDuration::from_secs(60))
        );
    }

    #[test]
    fn a_success_resets_the_count() {
        let h = vec![
            rec(Op::Apply, 4, Some(Outcome::Succeeded)),
            rec(Op::Apply, 3, Some(Outcome::Failed)),
            rec(Op::Apply, 2, Some(Outcome::Failed)),
        ];
        assert_eq!(backoff(&h, Op::Apply, lim(3), None).n, 0);
        // A success whose Job was pruned still resets, through status.lastSuccessTime.
        let pruned = &h[1..];
        let b = backoff(pruned, Op::Apply, lim(3), h[0].finished);
        assert_eq!((b.n, b.not_before), (0, None));
    }

    #[test]
    fn an_active_job_is_not_counted() {
        let h = vec![rec(Op::Apply, 3, None), rec(Op::Apply, 2, Some(Outcome::Failed))];
        assert_eq!(backoff(&h, Op::Apply, lim(3), None).n, 1);
    }

    #[test]
    fn the_retry_number_counts_the_booked_failures_past_the_history_limit() {
        // Limit 3 after pruning: three failures left in the history, seven booked in the status.
        let h = vec![
            rec(Op::Apply, 9, Some(Outcome::Failed)),
            rec(Op::Apply, 8, Some(Outcome::Failed)),
            rec(Op::Apply, 7, Some(Outcome::Deadline)),
        ];
        let b = backoff(&h, Op::Apply, lim(3), None).with_booked(7);
        assert_eq!((b.n, b.attempt, mins(b.delay)), (7, 8, 10));
        assert_eq!(
            b.not_before,
            Some(h[0].finished.unwrap() + SignedDuration::from_secs(600))
        );
    }

    #[test]
    fn a_status_that_lost_its_count_falls_back_to_the_history() {
        let h = vec![
            rec(Op::Apply, 3, Some(Outcome::Failed)),
            rec(Op::Apply, 2, Some(Outcome::Failed)),
        ];
        let b = backoff(&h, Op::Apply, lim(3), None).with_booked(0);
        assert_eq!((b.n, b.attempt, mins(b.delay)), (2, 3, 2));
    }

    proptest! {
        #[test]
        fn the_booked_count_never_lowers_n_and_the_delay_is_the_same_from_the_limit_on(
            history_n in 0u32..6, booked in 0u32..40, limit in 0i32..6,
        ) {
            let h: Vec<JobRecord> = (0..history_n).map(|i| rec(Op::Apply, 100 - i, Some(Outcome::Failed))).collect();
            let plain = backoff(&h, Op::Apply, lim(limit), None);
            let b = plain.clone().with_booked(booked);
            prop_assert_eq!(b.n, history_n.max(booked));
            prop_assert_eq!(b.attempt, b.n + 1);
            if history_n >= lim(limit).get() {
                prop_assert_eq!(b.delay, plain.delay);
            }
        }

        #[test]
        fn backoff_is_monotone_in_n_and_never_below_the_formula(n in 0u32..200, limit in 0u32..50) {
            let d = delay(n, lim(limit as i32));
            let next = delay(n + 1, lim(limit as i32));
            prop_assert!(next >= d, "delay({}) = {:?} > delay({}) = {:?}", n, d, n + 1, next);
            if n > 0 {
                let formula = if n > 10 { CAP } else { (BASE * (1u32 << (n - 1))).min(CAP) };
                prop_assert!(d >= formula);
                prop_assert!(d <= CAP);
            }
        }

        #[test]
        fn n_counts_exactly_the_failures_before_the_newest_success(outcomes in prop::collection::vec(0usize..6, 0..20), limit in 0u32..6) {
            let h: Vec<JobRecord> = outcomes.iter().enumerate()
                .map(|(i, o)| rec(Op::Apply, (outcomes.len() - i) as u32, Some(Outcome::ALL[*o])))
                .collect();
            let expected = h.iter().take_while(|r| !r.succeeded()).filter(|r| r.failed()).count() as u32;
            let b = backoff(&h, Op::Apply, lim(limit as i32), None);
            prop_assert_eq!(b.n, expected);
            prop_assert_eq!(b.attempt, expected + 1);
            prop_assert_eq!(b.not_before.is_some(), expected > 0);
        }
    }
}

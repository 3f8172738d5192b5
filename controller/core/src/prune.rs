//! Pruning (docs/rules.md): which finished Jobs to delete after booking.
//!
//! Per op: keep the newest `successfulJobsHistoryLimit` succeeded Jobs, the newest effective
//! failed-Jobs limit of failures (`failed` and `deadline` together, so the history's failure
//! count never exceeds the limit), and the newest effective-limit of each other outcome. Never the newest Job of an op that is unresolved, never an active Job, and
//! never a finished Job whose booking effects are not accounted in the status yet
//! (`JobRecord::accounted`): its annotation says it was booked, but only the Job itself still
//! lets a later pass replay what the status lost. Such a Job still takes its place in the
//! counts, so pruning the others is unchanged.

use std::collections::HashMap;
use std::num::NonZeroU32;

use captf_shared::Op;

use super::outcome::Outcome;
use super::record::JobRecord;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Class {
    Success,
    Failure,
    Other(Outcome),
}

fn class(o: Outcome) -> Class {
    match o {
        Outcome::Succeeded => Class::Success,
        o if o.counts_as_failure() => Class::Failure,
        o => Class::Other(o),
    }
}

/// The names of the Jobs to delete. `history` is newest first.
pub fn prune(history: &[JobRecord], successful_limit: u32, failed_limit: NonZeroU32) -> Vec<String> {
    let failed_limit = failed_limit.get();
    let mut kept: HashMap<(Op, Class), u32> = HashMap::new();
    let mut newest_seen: HashMap<Op, ()> = HashMap::new();
    let mut out = Vec::new();
    for r in history {
        let Some(outcome) = r.outcome else { continue };
        let newest_of_op = newest_seen.insert(r.op, ()).is_none();
        if r.deleting {
            continue;
        }
        let c = class(outcome);
        let limit = if c == Class::Success {
            successful_limit
        } else {
            failed_limit
        };
        let n = kept.entry((r.op, c)).or_insert(0);
        let unresolved_newest = newest_of_op && c != Class::Success;
        if *n < limit || unresolved_newest {
            *n += 1;
        } else if r.accounted {
            out.push(r.name.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::backoff;
    use crate::record::tests::rec;
    use proptest::prelude::*;

    fn lim(n: i32) -> NonZeroU32 {
        captf_shared::defaults::failed_limit(n)
    }

    #[test]
    fn keeps_the_newest_of_each_outcome_per_op() {
        let h = vec![
            rec(Op::Drift, 9, Some(Outcome::Succeeded)),
            rec(Op::Apply, 8, Some(Outcome::Succeeded)),
            rec(Op::Drift, 7, Some(Outcome::Succeeded)),
            rec(Op::Apply, 6, Some(Outcome::Succeeded)),
            rec(Op::Apply, 5, Some(Outcome::Blocked)),
            rec(Op::Apply, 4, Some(Outcome::Blocked)),
        ];
        let gone = prune(&h, 1, lim(1));
        assert_eq!(gone, vec![h[2].name.clone(), h[3].name.clone(), h[5].name.clone()]);
    }

    #[test]
    fn n_never_exceeds_the_limit_after_pruning() {
        // Five apply failures, limit 3: pruning leaves three, and n is 3 (the 10m cap).
        let h: Vec<JobRecord> = (1..=5)
            .rev()
            .map(|s| {
                rec(
                    Op::Apply,
                    s,
                    Some(if s % 2 == 0 { Outcome::Deadline } else { Outcome::Failed }),
                )
            })
            .collect();
        let gone = prune(&h, 1, lim(3));
        let left: Vec<JobRecord> = h.iter().filter(|r| !gone.contains(&r.name)).cloned().collect();
        let b = backoff(&left, Op::Apply, lim(3), None);
        assert_eq!((b.n, b.delay.as_secs()), (3, 600));
    }

    #[test]
    fn a_limit_of_0_keeps_the_newest_unresolved_failure() {
        let h = vec![
            rec(Op::Apply, 2, Some(Outcome::Failed)),
            rec(Op::Apply, 1, Some(Outcome::Failed)),
        ];
        assert_eq!(prune(&h, 0, lim(0)), vec![h[1].name.clone()]);
        // The newest Job of an unresolved op survives even a successful limit of 0 elsewhere.
        let h = vec![
            rec(Op::Apply, 2, Some(Outcome::Blocked)),
            rec(Op::Apply, 1, Some(Outcome::Succeeded)),
        ];
        assert_eq!(prune(&h, 0, lim(0)), vec![h[1].name.clone()]);
    }

    #[test]
    fn active_and_already_deleting_jobs_are_left_alone() {
        let mut old = rec(Op::Apply, 1, Some(Outcome::Failed));
        old.deleting = true;
        let h = vec![rec(Op::Apply, 3, None), rec(Op::Apply, 2, Some(Outcome::Failed)), old];
        assert!(prune(&h, 1, lim(1)).is_empty());
    }

    #[test]
    fn a_job_whose_effects_are_not_accounted_is_never_pruned() {
        // Limit 1: 4 is kept, 3 and 2 are beyond the limit, but 2 was booked by a pass whose
        // status write was lost: 3 (accounted) goes, 2 (not accounted) stays.
        let mut h = vec![
            rec(Op::Apply, 4, Some(Outcome::Failed)),
            rec(Op::Apply, 3, Some(Outcome::Failed)),
            rec(Op::Apply, 2, Some(Outcome::Failed)),
        ];
        h[2].accounted = false;
        assert_eq!(prune(&h, 1, lim(1)), vec![h[1].name.clone()]);
        // Once the watermark covers it, the next pass prunes it.
        h[2].accounted = true;
        assert_eq!(prune(&h, 1, lim(1)), vec![h[1].name.clone(), h[2].name.clone()]);
    }

    #[test]
    fn an_unaccounted_job_still_counts_toward_the_limit() {
        // Success limit 1: the newest success (5) was just booked and is not accounted; the
        // older accounted success (3) is pruned as before.
        let mut h = vec![
            rec(Op::Apply, 5, Some(Outcome::Succeeded)),
            rec(Op::Apply, 3, Some(Outcome::Succeeded)),
        ];
        h[0].accounted = false;
        assert_eq!(prune(&h, 1, lim(1)), vec![h[1].name.clone()]);
    }

    proptest! {
        #[test]
        fn pruning_never_deletes_an_unaccounted_job_and_otherwise_is_unchanged(
            jobs in prop::collection::vec((0usize..6, 0usize..4, any::<bool>()), 0..30),
            limit in 0u32..5,
            slimit in 0u32..3,
        ) {
            let len = jobs.len();
            let h: Vec<JobRecord> = jobs.iter().enumerate()
                .map(|(i, (o, op, accounted))| JobRecord {
                    accounted: *accounted,
                    ..rec(Op::ALL[*op], (len - i) as u32, Some(Outcome::ALL[*o]))
                })
                .collect();
            let all_accounted: Vec<JobRecord> = h.iter().cloned().map(|r| JobRecord { accounted: true, ..r }).collect();
            let gone = prune(&h, slimit, lim(limit as i32));
            let want: Vec<String> = prune(&all_accounted, slimit, lim(limit as i32))
                .into_iter()
                .filter(|n| h.iter().any(|r| &r.name == n && r.accounted))
                .collect();
            prop_assert_eq!(gone, want);
        }

        #[test]
        fn after_pruning_n_is_at_most_the_limit(outcomes in prop::collection::vec((0usize..6, 0usize..4), 0..30), limit in 0u32..5, slimit in 0u32..3) {
            let len = outcomes.len();
            let h: Vec<JobRecord> = outcomes.iter().enumerate()
                .map(|(i, (o, op))| rec(Op::ALL[*op], (len - i) as u32, Some(Outcome::ALL[*o])))
                .collect();
            let gone = prune(&h, slimit, lim(limit as i32));
            let left: Vec<JobRecord> = h.iter().filter(|r| !gone.contains(&r.name)).cloned().collect();
            for op in Op::ALL {
                prop_assert!(backoff(&left, op, lim(limit as i32), None).n <= lim(limit as i32).get());
                // The newest finished Job of each op is kept unless it is a success.
                if let Some(newest) = h.iter().find(|r| r.op == op) && !newest.succeeded() {
                    prop_assert!(!gone.contains(&newest.name));
                }
            }
        }
    }
}

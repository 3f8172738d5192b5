//! What the controller tells people (docs/notifications.md), decided here (PURE): from what a
//! pass booked or found to the [`captf_notify::Event`] sent, or none. Sending is
//! [`super::notifiers`]'s and never waits.

use captf_core::Outcome;
use captf_core::ident::Ident;
use captf_core::lock::LockState;
use captf_core::plan::Accounted;
use captf_core::record::JobRecord;
use captf_notify::{Event, ObjectRef, PlanCounts};
use captf_shared::Op;
use captf_shared::types::TerraformStatus;

/// Something a pass booked or found that may be worth a notification.
#[derive(Clone, Copy, Debug)]
pub enum Happened<'a> {
    /// A finished Job booked now (the write that set `captf.io/outcome`; never a replay, so a
    /// crash between the booking and its Event does not notify twice).
    Booked {
        rec: &'a JobRecord,
        outcome: Outcome,
        /// The object's status after the booking (its pending plan).
        status: &'a TerraformStatus,
        /// The Job's op's consecutive failures right after this Job was booked (see
        /// [`failures_after`]); `None` when it cannot be told.
        failures: Option<u32>,
    },
    /// The state lock became held (or changed hands) by something that is not this object's
    /// runner: the `StateLocked` Event's transition.
    StateLocked { lock: &'a LockState },
}

/// The notification for `what` happening to `id`, if any. `notify_after_failures` is
/// `--notify-after-failures`: an apply that fails that many times in a row is told once, when
/// the count reaches it, not at each failure after (nor before).
pub fn event_for(id: &Ident, what: &Happened<'_>, notify_after_failures: u32) -> Option<Event> {
    let object = ObjectRef::new(id.kind, id.namespace.clone(), id.name.clone());
    match *what {
        Happened::Booked {
            rec,
            outcome,
            status,
            failures,
        } => booked(object, rec, outcome, status, failures, notify_after_failures),
        Happened::StateLocked { lock } => match lock {
            LockState::Foreign { holder, id, .. } => Some(Event::StateLockedBySomeoneElse {
                object,
                lock_id: id.clone(),
                who: holder.clone(),
            }),
            _ => None,
        },
    }
}

fn booked(
    object: ObjectRef,
    rec: &JobRecord,
    outcome: Outcome,
    status: &TerraformStatus,
    failures: Option<u32>,
    after: u32,
) -> Option<Event> {
    let result = rec.result.as_ref();
    let summary = result.and_then(|r| r.summary);
    match outcome {
        // Both leave a plan waiting for a person: a PlanChanged apply applied nothing and its
        // new plan needs an approval of its own.
        Outcome::Blocked | Outcome::PlanChanged => {
            let (hash, counts) = match &status.pending_plan {
                Some(p) => (
                    p.hash.clone(),
                    PlanCounts {
                        add: p.add,
                        change: p.change,
                        destroy: p.destroy,
                        replace: p.replace,
                    },
                ),
                None => (
                    result.and_then(|r| r.plan_hash.clone())?,
                    summary.map(counts_of).unwrap_or_default(),
                ),
            };
            // Without a hash there is no line that approves it: nothing a person can act on.
            (!hash.is_empty()).then(|| Event::awaiting_approval(object, hash, counts))
        }
        // The runner says each denial (rule, resource, message) in its result's message, bounded:
        // the notification carries that text whole rather than one denial of it.
        Outcome::PolicyDenied => Some(Event::PolicyDenied {
            object,
            rule: "the policies on the plan".to_string(),
            address: result
                .and_then(|r| r.plan_hash.clone())
                .map(|h| format!("plan {h}"))
                .unwrap_or_default(),
            message: result.map(|r| r.message.clone()).unwrap_or_default(),
        }),
        Outcome::Failed | Outcome::Deadline if rec.op == Op::Apply => {
            let n = failures?;
            (n == after).then(|| Event::ApplyFailed {
                object,
                failures: n,
                reason: captf_core::book::event_note(rec, outcome),
            })
        }
        Outcome::Succeeded => match rec.op {
            Op::Drift if result.and_then(|r| r.drift) == Some(true) => Some(Event::DriftFound {
                object,
                counts: summary.map(counts_of).unwrap_or_default(),
            }),
            Op::Destroy => Some(Event::Destroyed { object }),
            _ => None,
        },
        _ => None,
    }
}

fn counts_of(s: captf_shared::protocol::PlanSummary) -> PlanCounts {
    PlanCounts {
        add: s.add,
        change: s.change,
        destroy: s.destroy,
        replace: s.replace,
    }
}

/// The consecutive failures of the op of `accounting[i]` right after that Job was booked, from
/// `status` (after every booking of the pass): the count less the failures of the same op
/// booked after it in the same pass. `None` when a later Job of that op succeeded (the count
/// was reset since) or `i` is out of range.
pub fn failures_after(accounting: &[Accounted], i: usize, status: &TerraformStatus) -> Option<u32> {
    let op = accounting.get(i)?.op;
    let mut n = status.consecutive_failures.map_or(0, |c| c.get(op));
    for later in accounting.iter().skip(i + 1).filter(|a| a.op == op) {
        if later.outcome == Outcome::Succeeded {
            return None;
        }
        if later.outcome.counts_as_failure() {
            n = n.checked_sub(1)?;
        }
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use captf_core::record::Accounting;
    use captf_notify::EventKind;
    use captf_shared::Kind;
    use captf_shared::protocol::{Phase, PlanSummary, RunResult, RunnerResult};
    use captf_shared::types::{OpCounts, PendingPlan};

    fn id() -> Ident {
        Ident::new(
            Kind::TerraformCluster,
            "team-a".into(),
            "prod-eu".into(),
            "uid-1".into(),
            None,
        )
    }

    fn rec(op: Op, result: Option<RunnerResult>) -> JobRecord {
        JobRecord {
            name: "prod-eu-apply-3".into(),
            op,
            seq: 3,
            created: None,
            started: None,
            active_deadline_seconds: None,
            finished: None,
            outcome: None,
            booked: false,
            accounted: false,
            drift_remediation: false,
            approved_plan: None,
            approved_by: None,
            force_unlock_id: None,
            inputs_hash: None,
            deleting: false,
            result,
        }
    }

    fn summary() -> PlanSummary {
        PlanSummary {
            add: 1,
            change: 0,
            destroy: 2,
            replace: 0,
        }
    }

    fn failed_with(n: u32) -> TerraformStatus {
        TerraformStatus {
            consecutive_failures: Some(OpCounts {
                apply: n,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn booked(rec: &JobRecord, outcome: Outcome, status: &TerraformStatus, failures: Option<u32>) -> Option<Event> {
        let what = Happened::Booked {
            rec,
            outcome,
            status,
            failures,
        };
        event_for(&id(), &what, 3)
    }

    #[test]
    fn a_plan_a_policy_denied_is_told_with_the_runners_words() {
        let mut r = RunnerResult::new(
            RunResult::PolicyDenied,
            Phase::Guard,
            "policy denied plan h1: data.main.deny: captftest_thing.main: open to the world",
        );
        r.plan_hash = Some("h1".into());
        let e = booked(
            &rec(Op::Apply, Some(r)),
            Outcome::PolicyDenied,
            &TerraformStatus::default(),
            Some(0),
        )
        .unwrap();
        let Event::PolicyDenied { address, message, .. } = e else {
            panic!("not a denial: {e:?}");
        };
        assert_eq!(address, "plan h1");
        assert!(message.contains("captftest_thing.main: open to the world"), "{message}");
    }

    #[test]
    fn a_blocked_plan_is_told_with_the_pending_plans_hash_counts_and_approve_line() {
        let mut r = RunnerResult::new(RunResult::Blocked, Phase::Guard, "blocked");
        r.plan_hash = Some("older".into());
        let status = TerraformStatus {
            pending_plan: Some(PendingPlan {
                hash: "3f2a9c".into(),
                add: 1,
                change: 0,
                destroy: 2,
                replace: 0,
                job: "prod-eu-apply-3".into(),
            }),
            ..Default::default()
        };
        let e = booked(&rec(Op::Apply, Some(r)), Outcome::Blocked, &status, Some(0)).unwrap();
        let Event::AwaitingApproval {
            plan_hash,
            counts,
            approve_command,
            ..
        } = e
        else {
            panic!("not awaiting approval: {e:?}");
        };
        assert_eq!(plan_hash, "3f2a9c");
        assert_eq!(
            counts,
            PlanCounts {
                add: 1,
                destroy: 2,
                ..Default::default()
            }
        );
        assert_eq!(
            approve_command,
            "kubectl captf approve terraformcluster/prod-eu -n team-a --hash 3f2a9c"
        );
    }

    #[test]
    fn without_a_pending_plan_the_runners_hash_and_summary_are_told_and_without_a_hash_nothing() {
        let mut r = RunnerResult::new(RunResult::PlanChanged, Phase::Guard, "changed");
        r.plan_hash = Some("h2".into());
        r.summary = Some(summary());
        let e = booked(
            &rec(Op::Apply, Some(r)),
            Outcome::PlanChanged,
            &TerraformStatus::default(),
            Some(0),
        )
        .unwrap();
        assert_eq!(e.kind(), EventKind::AwaitingApproval);
        assert!(
            e.summary().contains("1 to add, 0 to change, 2 to destroy"),
            "{}",
            e.summary()
        );
        let none = booked(
            &rec(Op::Apply, None),
            Outcome::Blocked,
            &TerraformStatus::default(),
            None,
        );
        assert_eq!(none, None);
    }

    #[test]
    fn found_drift_is_told_with_its_counts_and_a_clean_drift_check_is_not() {
        let mut r = RunnerResult::new(RunResult::Succeeded, Phase::Drift, "drift");
        r.drift = Some(true);
        r.summary = Some(summary());
        let e = booked(
            &rec(Op::Drift, Some(r.clone())),
            Outcome::Succeeded,
            &TerraformStatus::default(),
            Some(0),
        );
        assert!(matches!(e, Some(Event::DriftFound { counts, .. }) if counts.destroy == 2));
        r.drift = Some(false);
        let clean = booked(
            &rec(Op::Drift, Some(r)),
            Outcome::Succeeded,
            &TerraformStatus::default(),
            Some(0),
        );
        assert_eq!(clean, None);
    }

    #[test]
    fn a_destroy_is_told_and_a_plain_apply_or_refresh_is_not() {
        let s = TerraformStatus::default();
        let e = booked(&rec(Op::Destroy, None), Outcome::Succeeded, &s, Some(0));
        assert!(matches!(e, Some(Event::Destroyed { .. })));
        for op in [Op::Apply, Op::Refresh] {
            assert_eq!(booked(&rec(op, None), Outcome::Succeeded, &s, Some(0)), None);
        }
        assert_eq!(booked(&rec(Op::Apply, None), Outcome::Interrupted, &s, Some(0)), None);
    }

    #[test]
    fn failing_applies_are_told_exactly_once_when_the_count_reaches_n() {
        let r = RunnerResult::new(RunResult::Failed, Phase::Apply, "Error: quota exceeded");
        let told: Vec<u32> = (1..=6)
            .filter_map(|n| {
                booked(
                    &rec(Op::Apply, Some(r.clone())),
                    Outcome::Failed,
                    &failed_with(n),
                    Some(n),
                )
            })
            .map(|e| match e {
                Event::ApplyFailed { failures, reason, .. } => {
                    assert!(reason.contains("Error: quota exceeded"), "{reason}");
                    failures
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(told, vec![3]);
        // A deadline counts as a failure too; a destroy's failures are not an apply's.
        let s = failed_with(3);
        assert!(booked(&rec(Op::Apply, None), Outcome::Deadline, &s, Some(3)).is_some());
        assert_eq!(booked(&rec(Op::Destroy, None), Outcome::Failed, &s, Some(3)), None);
        assert_eq!(booked(&rec(Op::Apply, None), Outcome::Failed, &s, None), None);
    }

    #[test]
    fn a_lock_held_by_someone_else_is_told_and_our_own_is_not() {
        let foreign = LockState::Foreign {
            holder: "laptop-of-sam".into(),
            id: "lock-7".into(),
            operation: "OperationTypeApply".into(),
            created: "2026-01-01".into(),
        };
        let e = event_for(&id(), &Happened::StateLocked { lock: &foreign }, 3);
        assert!(matches!(
            e,
            Some(Event::StateLockedBySomeoneElse { ref lock_id, ref who, .. }) if lock_id == "lock-7" && who == "laptop-of-sam"
        ));
        let own = LockState::OwnAlive {
            holder: "runner".into(),
            why: String::new(),
        };
        assert_eq!(event_for(&id(), &Happened::StateLocked { lock: &own }, 3), None);
    }

    #[test]
    fn the_failures_after_each_job_of_a_pass_subtract_the_later_failures_of_its_op() {
        let a = |op, outcome| Accounted {
            job: String::new(),
            op,
            seq: 0,
            outcome,
            step: Accounting::Book,
        };
        let pass = [
            a(Op::Apply, Outcome::Failed),
            a(Op::Refresh, Outcome::Failed),
            a(Op::Apply, Outcome::Deadline),
        ];
        let s = failed_with(3);
        assert_eq!(failures_after(&pass, 0, &s), Some(2));
        assert_eq!(failures_after(&pass, 2, &s), Some(3));
        assert_eq!(failures_after(&pass, 9, &s), None);
        let reset = [a(Op::Apply, Outcome::Failed), a(Op::Apply, Outcome::Succeeded)];
        assert_eq!(failures_after(&reset, 0, &TerraformStatus::default()), None);
    }
}

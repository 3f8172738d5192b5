//! When `approve`, `refresh` and `reconcile` write, and when they refuse (PURE). Each asks the
//! controller's own rules: the approval must be one `decide::approval_names_the_waiting_plan` names, and a
//! refresh or reconcile request is written only when `decide` would act on it.

use k8s_openapi::jiff::Timestamp;

use captf_core::decide::{Decision, approval_names_the_waiting_plan};
use captf_core::lock::LockState;
use captf_core::plan::{self, Plan};
use captf_core::{Reason, Snapshot};
use captf_shared::Op;
use captf_shared::types::PendingPlan;

use crate::words;

/// What `approve` does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Approval {
    /// Write `captf.io/approve-plan=<hash>`.
    Write(PendingPlan),
    /// The annotation already names this plan: nothing to write.
    Already(PendingPlan),
}

/// Why `approve` writes nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no plan waits for approval on {what}: {next}")]
    NoPendingPlan { what: String, next: String },
    #[error(
        "--hash {given} is not the plan waiting for approval on {what} (planned by Job {job}); nothing was approved. Review the plan that waits with `kubectl captf plan` and approve its hash"
    )]
    HashMismatch {
        what: String,
        given: String,
        pending: String,
        job: String,
    },
    #[error("the controller would not carry an approval of {hash} on {what}: {why}")]
    NotCarried { what: String, hash: String, why: String },
}

/// The approval of the plan waiting on the object as booked (`plan.booked`: a blocked apply
/// not booked yet counts), checked against `--hash` and against the controller's own rule.
pub fn approval(booked: &Snapshot, given: Option<&str>, now: Timestamp) -> Result<Approval, Refusal> {
    let what = format!("{} {}/{}", booked.kind, booked.namespace, booked.name);
    let Some(pending) = booked.status.pending_plan.clone().filter(|p| !p.hash.is_empty()) else {
        let d = captf_core::decide(booked, now);
        return Err(Refusal::NoPendingPlan {
            what,
            next: words::next_sentence(&d, booked, now),
        });
    };
    if let Some(given) = given.map(str::trim)
        && given != pending.hash
    {
        return Err(Refusal::HashMismatch {
            what,
            given: given.to_string(),
            pending: pending.hash,
            job: pending.job,
        });
    }
    // Approved and enough approvers: nothing to add. Approved by fewer than
    // `captf.io/approvals-required` asks: this approval adds to theirs.
    if booked.approve_plan.as_deref() == Some(pending.hash.as_str()) && captf_core::decide::approvals(booked).enough() {
        return Ok(Approval::Already(pending));
    }
    let mut with = booked.clone();
    with.approve_plan = Some(pending.hash.clone());
    if approval_names_the_waiting_plan(&with).as_deref() != Some(pending.hash.as_str()) {
        return Err(Refusal::NotCarried {
            what,
            hash: pending.hash,
            why: "it is neither the pending plan nor the plan the newest apply stopped on".into(),
        });
    }
    Ok(Approval::Write(pending))
}

/// What `refresh` and `reconcile` do with a person's request.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    /// Write the request (`captf.io/refresh=<now>`, `captf.io/reconcile-now=<now>`); the words
    /// say what follows.
    Write { words: String },
    /// Write nothing; the words say why and what to do.
    Refuse { words: String },
}

/// The plan of the object with a refresh requested at `now`, and whether to request it.
pub fn refresh(snap: &Snapshot, now: Timestamp) -> (Request, Plan) {
    let mut with = snap.clone();
    with.refresh_requested = Some(now);
    let p = plan::plan(&with, now);
    let s = &p.booked;
    let what = format!("{} {}/{}", s.kind, s.namespace, s.name);
    let lock_note = match &s.lock {
        LockState::Foreign { .. } => format!(
            " The state lock is {}: the Job waits lockTimeoutSeconds for it and fails if it is still held; a refresh does not unlock it.",
            s.lock.why()
        ),
        _ => String::new(),
    };
    let verdict = match &p.decision {
        Decision::Start(st) if st.op == Op::Refresh => Request::Write {
            words: format!(
                "refresh requested on {what}: the controller starts a refresh Job (attempt {}) at its next pass.{lock_note}",
                st.attempt
            ),
        },
        Decision::Wait(w) if w.reason == Reason::RefreshRequestedBackoff => Request::Write {
            words: format!(
                "refresh requested on {what}: it starts {} (the refresh failed before and backs off; once the cause is fixed, `kubectl captf reconcile` skips the rest).{lock_note}",
                words::when_words(&p.decision, now)
            ),
        },
        Decision::Wait(w) if w.reason == Reason::JobActive => Request::Write {
            words: format!(
                "refresh requested on {what}: Job {} is running; the controller decides again when it finishes.",
                s.active_job().unwrap_or("?")
            ),
        },
        Decision::Wait(w)
            if matches!(w.reason, Reason::ClusterBusy | Reason::MemberJobActive) && w.op == Some(Op::Refresh) =>
        {
            Request::Write {
                words: format!(
                    "refresh requested on {what}: it starts when {}.",
                    words::hold_words(w.reason, s)
                ),
            }
        }
        Decision::Wait(w) if matches!(w.reason, Reason::AwaitingApproval | Reason::PlanChanged) => Request::Refuse {
            words: format!(
                "no refresh requested on {what}: {}. A refresh would not run before that, and never bypasses an approval: review with `kubectl captf plan`, then `kubectl captf approve`.",
                words::reason_words(w.reason)
            ),
        },
        d => Request::Refuse {
            words: format!(
                "no refresh requested on {what}: a refresh would not change what happens next. {}",
                words::next_sentence(d, s, now)
            ),
        },
    };
    (verdict, p)
}

/// The plan of the object with a reconcile requested at `now`, and whether to request it: only
/// when the request would start a Job that otherwise waits out its backoff.
pub fn reconcile(snap: &Snapshot, now: Timestamp) -> (Request, Plan) {
    let mut with = snap.clone();
    with.reconcile_requested = Some(now);
    let p = plan::plan(&with, now);
    let s = &p.booked;
    let what = format!("{} {}/{}", s.kind, s.namespace, s.name);
    // As the controller would decide without the request: on the booked snapshot (a denied apply
    // that finished but is not booked yet counts), like the plan with it.
    let denied = matches!(
        plan::plan(snap, now).decision,
        Decision::Wait(w) if w.reason == Reason::PolicyDenied
    );
    let verdict = match &p.decision {
        Decision::Start(st) if denied => Request::Write {
            words: format!(
                "reconcile requested on {what}: the controller starts {} at its next pass, and its new plan is checked against the policies as they are now.",
                st.op
            ),
        },
        Decision::Start(st) if st.skipped_backoff.is_some() => Request::Write {
            words: format!(
                "reconcile requested on {what}: the controller starts {} (attempt {}) at its next pass instead of {}. If it fails, it backs off again.",
                st.op,
                st.attempt,
                st.skipped_backoff
                    .map(|t| format!("at {t}, the end of its backoff"))
                    .unwrap_or_default()
            ),
        },
        Decision::Wait(w) if matches!(w.reason, Reason::AwaitingApproval | Reason::PlanChanged) => Request::Refuse {
            words: format!(
                "no reconcile requested on {what}: {}. Reconcile skips a backoff, never an approval: review with `kubectl captf plan`, then `kubectl captf approve`.",
                words::reason_words(w.reason)
            ),
        },
        d => Request::Refuse {
            words: format!(
                "no reconcile requested on {what}: nothing waits out a backoff. {}",
                words::next_sentence(d, s, now)
            ),
        },
    };
    (verdict, p)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use captf_core::lock::LockState;
    use captf_core::snapshot::{DurableRecord, Holds, InputsHash};
    use captf_shared::types::{CaptfObject, ModuleSpec, TerraformCluster, TerraformClusterSpec, TerraformSpec};

    const HASH: &str = "aaaaaaaaaaaaaaaabbbbbbbbbbbbbbbbccccccccccccccccdddddddddddddddd";

    fn now() -> Timestamp {
        "2026-03-01T10:00:00Z".parse().unwrap()
    }

    fn snapshot() -> Snapshot {
        let mut tc = TerraformCluster::new(
            "prod-eu",
            TerraformClusterSpec {
                terraform: TerraformSpec {
                    module: ModuleSpec {
                        source: "git::https://example.com/m.git".into(),
                        ..Default::default()
                    },
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        tc.metadata.namespace = Some("default".into());
        Snapshot::new(
            &CaptfObject::Cluster(tc),
            vec![],
            DurableRecord::default(),
            InputsHash::Known(HASH.into()),
            LockState::Free,
            Holds::default(),
        )
        .unwrap()
    }

    fn pending(hash: &str) -> PendingPlan {
        PendingPlan {
            hash: hash.into(),
            add: 0,
            change: 1,
            destroy: 1,
            replace: 0,
            job: "tc-prod-eu-apply-1".into(),
        }
    }

    #[test]
    fn approve_writes_the_hash_of_the_pending_plan_when_none_is_given() {
        let mut s = snapshot();
        s.status.pending_plan = Some(pending("p1"));
        assert_eq!(approval(&s, None, now()), Ok(Approval::Write(pending("p1"))));
        assert_eq!(approval(&s, Some("p1"), now()), Ok(Approval::Write(pending("p1"))));
    }

    #[test]
    fn approve_refuses_a_hash_that_is_not_the_pending_plan_without_giving_the_right_one_away() {
        let mut s = snapshot();
        s.status.pending_plan = Some(pending("p1"));
        let e = approval(&s, Some("p0"), now()).unwrap_err();
        assert!(matches!(e, Refusal::HashMismatch { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("--hash p0 is not the plan waiting for approval"),
            "{text}"
        );
        assert!(text.contains("(planned by Job tc-prod-eu-apply-1)"), "{text}");
        assert!(
            !text.contains("p1"),
            "the hash to approve is read with the plan, not copied from an error: {text}"
        );
    }

    #[test]
    fn approve_refuses_when_no_plan_waits_and_says_what_happens_instead() {
        let e = approval(&snapshot(), Some("p1"), now()).unwrap_err();
        assert!(matches!(e, Refusal::NoPendingPlan { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.starts_with("no plan waits for approval on TerraformCluster default/prod-eu: "),
            "{text}"
        );
        assert!(text.contains("apply"), "{text}");
    }

    #[test]
    fn approve_of_an_already_approved_plan_writes_nothing() {
        let mut s = snapshot();
        s.status.pending_plan = Some(pending("p1"));
        s.approve_plan = Some("p1".into());
        assert_eq!(approval(&s, None, now()), Ok(Approval::Already(pending("p1"))));
    }

    #[test]
    fn approve_adds_an_approval_while_fewer_than_approvals_required_approved() {
        let mut s = snapshot();
        s.status.pending_plan = Some(pending("p1"));
        s.approve_plan = Some("p1".into());
        s.approvals_required = Some(2);
        s.spec_changed_by = Some("alice".into());
        s.approvers = vec!["bob".into()];
        assert_eq!(approval(&s, Some("p1"), now()), Ok(Approval::Write(pending("p1"))));
        let words = crate::words::approvals_words(&s).unwrap();
        assert_eq!(
            words,
            "1 of 2 approvals (bob); 1 more needed, from someone other than alice, who last changed the spec"
        );
        s.approvers.push("carol".into());
        assert_eq!(approval(&s, None, now()), Ok(Approval::Already(pending("p1"))));
        assert_eq!(
            crate::words::approvals_words(&s).unwrap(),
            "2 of 2 approvals (bob, carol)"
        );
    }

    #[test]
    fn refresh_requests_a_refresh_when_the_controller_would_start_one() {
        let mut s = snapshot();
        s.durable.applied_inputs_hash = Some(HASH.into());
        s.status.outputs = Some(Default::default());
        let (r, p) = refresh(&s, now());
        assert!(matches!(r, Request::Write { .. }), "{r:?}");
        assert!(matches!(&p.decision, Decision::Start(st) if st.op == Op::Refresh));
    }

    /// Apply 1 of the current inputs, booked with `outcome`.
    fn stopped_apply(s: &Snapshot, outcome: captf_core::Outcome) -> captf_core::record::JobRecord {
        captf_core::record::JobRecord {
            name: captf_shared::names::job_name(s.kind, "default", "prod-eu", Op::Apply, 1),
            op: Op::Apply,
            seq: 1,
            created: Some("2026-03-01T09:00:00Z".parse().unwrap()),
            started: None,
            active_deadline_seconds: None,
            finished: Some("2026-03-01T09:01:00Z".parse().unwrap()),
            outcome: Some(outcome),
            booked: true,
            accounted: true,
            drift_remediation: false,
            approved_plan: None,
            approved_by: None,
            force_unlock_id: None,
            inputs_hash: Some(HASH[..16].to_string()),
            deleting: false,
            result: None,
        }
    }

    #[test]
    fn refresh_never_bypasses_a_wait_for_approval() {
        let mut s = snapshot();
        s.durable.applied_inputs_hash = Some(HASH.into());
        s.jobs = vec![stopped_apply(&s, captf_core::Outcome::Blocked)];
        s.status.pending_plan = Some(pending("p1"));
        let (r, _) = refresh(&s, now());
        let Request::Refuse { words } = r else { panic!("{r:?}") };
        assert!(words.contains("never bypasses an approval"), "{words}");
    }

    #[test]
    fn reconcile_asks_for_a_new_plan_after_a_policy_denied_one() {
        let mut s = snapshot();
        s.jobs = vec![stopped_apply(&s, captf_core::Outcome::PolicyDenied)];
        assert!(matches!(
            captf_core::decide(&s, now()),
            Decision::Wait(w) if w.reason == Reason::PolicyDenied
        ));
        let (r, p) = reconcile(&s, now());
        let Request::Write { words } = r else { panic!("{r:?}") };
        assert!(
            words.contains("checked against the policies as they are now"),
            "{words}"
        );
        assert!(matches!(&p.decision, Decision::Start(st) if st.op == Op::Apply));
    }

    #[test]
    fn refresh_says_a_foreign_lock_is_not_unlocked() {
        let mut s = snapshot();
        s.durable.applied_inputs_hash = Some(HASH.into());
        s.status.outputs = Some(Default::default());
        s.lock = LockState::Foreign {
            holder: "alice@laptop".into(),
            id: "lock-2".into(),
            operation: "OperationTypeApply".into(),
            created: "2026-03-01T09:00:00Z".into(),
        };
        let (r, _) = refresh(&s, now());
        let Request::Write { words } = r else { panic!("{r:?}") };
        assert!(words.contains("held by alice@laptop"), "{words}");
        assert!(words.contains("a refresh does not unlock it"), "{words}");
    }

    #[test]
    fn reconcile_requests_only_what_skips_a_backoff() {
        // An apply that failed 30 seconds ago waits out its backoff: reconcile would start it now.
        let mut s = snapshot();
        s.jobs = vec![captf_core::record::JobRecord {
            name: captf_shared::names::job_name(s.kind, "default", "prod-eu", Op::Apply, 1),
            op: Op::Apply,
            seq: 1,
            created: Some("2026-03-01T09:59:00Z".parse().unwrap()),
            started: None,
            active_deadline_seconds: None,
            finished: Some("2026-03-01T09:59:30Z".parse().unwrap()),
            outcome: Some(captf_core::Outcome::Failed),
            booked: true,
            accounted: true,
            drift_remediation: false,
            approved_plan: None,
            approved_by: None,
            force_unlock_id: None,
            inputs_hash: Some(HASH[..16].to_string()),
            deleting: false,
            result: None,
        }];
        let (r, p) = reconcile(&s, now());
        let Request::Write { words } = r else { panic!("{r:?}") };
        assert!(words.contains("instead of at"), "{words}");
        assert!(matches!(p.decision, Decision::Start(_)));
        // Nothing backs off: nothing to skip.
        let (r, _) = reconcile(&snapshot(), now());
        let Request::Refuse { words } = r else { panic!("{r:?}") };
        assert!(words.contains("nothing waits out a backoff"), "{words}");
    }
}

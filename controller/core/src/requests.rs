//! A person's requests on the object, and when a booked Job has used them up (docs/api.md,
//! "Annotations"): `captf.io/approve-plan` once the apply that carried the approved plan
//! succeeded or found the plan changed (the approval can do nothing more), and
//! `captf.io/refresh` once a refresh that started after the request succeeded, and
//! `captf.io/reconcile-now` (with who and why) once a Job was created after it. The controller
//! removes a used request only if it still holds the value read, so a new request made
//! meanwhile stays.

use captf_shared::{Op, keys};

use crate::outcome::Outcome;
use crate::snapshot::Snapshot;

/// The request annotations the booked Jobs of `s` used up.
pub fn used(s: &Snapshot) -> Vec<&'static str> {
    let mut out = Vec::new();
    if let Some(hash) = s.approve_plan.as_deref()
        && s.jobs.iter().any(|r| {
            r.op == Op::Apply
                && r.approved_plan.as_deref() == Some(hash)
                && matches!(r.outcome, Some(Outcome::Succeeded | Outcome::PlanChanged))
        })
    {
        out.push(keys::ANNOTATION_APPROVE_PLAN);
    }
    if let Some(asked) = s.reconcile_requested
        && s.jobs.iter().any(|r| r.created.is_some_and(|c| c >= asked))
    {
        out.extend([
            keys::ANNOTATION_RECONCILE_NOW,
            keys::ANNOTATION_RECONCILE_NOW_BY,
            keys::ANNOTATION_RECONCILE_NOW_REASON,
        ]);
    }
    if let Some(asked) = s.refresh_requested
        && s.jobs
            .iter()
            .any(|r| r.op == Op::Refresh && r.succeeded() && r.created.is_some_and(|c| c >= asked))
    {
        out.push(keys::ANNOTATION_REFRESH);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::record::tests::rec;
    use k8s_openapi::jiff::Timestamp;

    pub(crate) fn base() -> Snapshot {
        let object: captf_shared::types::TerraformCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "TerraformCluster",
            "metadata": {"name": "prod-eu", "namespace": "default"},
            "spec": {"module": {"source": "git::https://example.com/m.git"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        Snapshot::new(
            &captf_shared::types::CaptfObject::Cluster(object),
            vec![],
            Default::default(),
            crate::snapshot::InputsHash::Known("a".repeat(64)),
            crate::lock::LockState::Free,
            Default::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_approval_is_used_up_by_the_apply_that_carried_it_once_it_succeeded_or_found_the_plan_changed() {
        let mut s = base();
        s.approve_plan = Some("h1".into());
        let mut apply = rec(Op::Apply, 2, Some(Outcome::Failed));
        apply.approved_plan = Some("h1".into());
        s.jobs = vec![apply.clone()];
        assert!(used(&s).is_empty(), "a failed apply is retried with the approval");
        for done in [Outcome::Succeeded, Outcome::PlanChanged] {
            apply.outcome = Some(done);
            s.jobs = vec![apply.clone()];
            assert_eq!(used(&s), [keys::ANNOTATION_APPROVE_PLAN]);
        }
        s.approve_plan = Some("h2".into());
        assert!(used(&s).is_empty(), "a new approval is not the used one");
    }

    #[test]
    fn a_refresh_request_is_used_up_by_a_refresh_that_started_after_it_and_succeeded() {
        let mut s = base();
        let refresh = rec(Op::Refresh, 3, Some(Outcome::Succeeded));
        let started = refresh.created.unwrap_or(Timestamp::UNIX_EPOCH);
        s.jobs = vec![refresh];
        s.refresh_requested = Some(started);
        assert_eq!(used(&s), [keys::ANNOTATION_REFRESH]);
        s.refresh_requested = started.checked_add(jiff::SignedDuration::from_secs(1)).ok();
        assert!(used(&s).is_empty(), "asked after that refresh started");
    }

    #[test]
    fn a_reconcile_request_is_used_up_by_the_first_job_created_after_it() {
        let mut s = base();
        let job = rec(Op::Apply, 3, Some(Outcome::Failed));
        let created = job.created.unwrap_or_else(|| panic!("rec sets created"));
        s.jobs = vec![job];
        s.reconcile_requested = Some(created);
        assert_eq!(
            used(&s),
            [
                keys::ANNOTATION_RECONCILE_NOW,
                keys::ANNOTATION_RECONCILE_NOW_BY,
                keys::ANNOTATION_RECONCILE_NOW_REASON
            ]
        );
        s.reconcile_requested = created.checked_add(jiff::SignedDuration::from_secs(1)).ok();
        assert!(used(&s).is_empty(), "no Job since the request");
    }
}

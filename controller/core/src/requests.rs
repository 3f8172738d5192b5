//! A person's requests on the object, and when a booked Job has used them up (docs/api.md,
//! "Annotations"): `captf.io/approve-plan` once the apply that carried the approved plan
//! succeeded or found the plan changed (the approval can do nothing more), and
//! `captf.io/refresh` once a refresh that started after the request succeeded, and
//! `captf.io/reconcile-now` (with who and why) once a Job was created after it. The controller
//! removes a used request only if it still holds the value read, so a new request made
//! meanwhile stays.

use captf_shared::{Op, keys};
use jiff::{SignedDuration, Timestamp};

use crate::outcome::Outcome;
use crate::snapshot::Snapshot;

/// How far past the controller's clock a request's time may be and still count: the clocks of
/// the requester's machine, the API server and the controller differ by that much at most.
pub const MAX_REQUEST_SKEW: SignedDuration = SignedDuration::from_secs(120);

/// A request annotation whose time is later than the controller's clock allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FutureRequest {
    pub key: &'static str,
    pub at: Timestamp,
}

/// The requests of `s` dated later than `now` plus [`MAX_REQUEST_SKEW`], taken out of `s`: such
/// a request is no request. A refresh asked for in the year 9999 would otherwise be due after
/// every refresh (none starts after it), and a reconcile-now would skip every backoff (no Job is
/// created after it), for ever. The annotation stays; the controller says why it is ignored.
/// PURE.
pub fn take_future(s: &mut Snapshot, now: Timestamp) -> Vec<FutureRequest> {
    let limit = now.checked_add(MAX_REQUEST_SKEW).unwrap_or(now);
    let mut out = Vec::new();
    for (key, asked) in [
        (keys::ANNOTATION_REFRESH, &mut s.refresh_requested),
        (keys::ANNOTATION_RECONCILE_NOW, &mut s.reconcile_requested),
    ] {
        if let Some(at) = *asked
            && at > limit
        {
            *asked = None;
            out.push(FutureRequest { key, at });
        }
    }
    out
}

/// The note of the Event that says a request is ignored.
pub fn future_request_note(r: &FutureRequest, now: Timestamp) -> String {
    format!(
        "{}={} is ignored: it is dated later than the controller's clock ({now}) allows ({}s ahead at most); \
         set it to the current time (kubectl captf {}) to ask again",
        r.key,
        r.at,
        MAX_REQUEST_SKEW.as_secs(),
        if r.key == keys::ANNOTATION_REFRESH {
            "refresh"
        } else {
            "reconcile"
        },
    )
}

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

    /// The attack: `captf.io/refresh` and `captf.io/reconcile-now` dated in the year 9999 would
    /// never be used up (no Job starts after them), so refreshes would run back to back and
    /// backoff would be off for good. Later than now plus the skew, a request is no request.
    #[test]
    fn a_request_dated_past_the_clock_skew_is_no_request_and_one_within_it_counts() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap_or_else(|e| panic!("{e}"));
        let far: Timestamp = "9999-01-01T00:00:00Z".parse().unwrap_or_else(|e| panic!("{e}"));
        let mut s = base();
        s.refresh_requested = Some(far);
        s.reconcile_requested = Some(far);
        let taken = take_future(&mut s, now);
        assert_eq!(
            taken.iter().map(|r| r.key).collect::<Vec<_>>(),
            [keys::ANNOTATION_REFRESH, keys::ANNOTATION_RECONCILE_NOW]
        );
        assert_eq!((s.refresh_requested, s.reconcile_requested), (None, None));
        assert!(future_request_note(&taken[0], now).contains("captf.io/refresh=9999-01-01T00:00:00Z is ignored"));
        // At the edge of the skew a request still counts; a second past it does not.
        let edge = now.checked_add(MAX_REQUEST_SKEW).unwrap_or_else(|e| panic!("{e}"));
        s.refresh_requested = Some(edge);
        s.reconcile_requested = edge.checked_add(SignedDuration::from_secs(1)).ok();
        let taken = take_future(&mut s, now);
        assert_eq!(
            taken.iter().map(|r| r.key).collect::<Vec<_>>(),
            [keys::ANNOTATION_RECONCILE_NOW]
        );
        assert_eq!(s.refresh_requested, Some(edge));
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

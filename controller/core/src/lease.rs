//! CAPTF's own leases as data: the run lease `captf-run-<suffix>` taken before a Job exists
//! (holder = the Job's name) and the cluster lease `captf-cluster-<hash>` with its member Jobs.
//! Taking, joining and releasing them is the controller's (`runtime/leases.rs`); who may take a
//! lease and what a lease holds is decided here.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;

use captf_shared::keys;

/// Whether the current holder of a lease may be replaced: nobody holds it, we already do, or
/// its holder Job is not in flight (gone, or finished) and is not the object's
/// `status.activeJob` (PURE).
pub fn may_take(holder: Option<&str>, me: &str, holder_in_flight: bool, active_job: Option<&str>) -> bool {
    match holder.filter(|h| !h.is_empty()) {
        None => true,
        Some(h) if h == me => true,
        Some(h) => !holder_in_flight && active_job != Some(h),
    }
}

/// How long a claim another controller instance made on a run lease, for a Job that does not
/// exist yet, counts as that instance's pass still on its way to creating the Job. Two instances
/// serve one object only around a relabel (docs/operating.md "Sharding"): the one it left may be
/// in the middle of a pass that claimed the lease, and the Job it creates next must find its
/// claims in place. A pass takes seconds; this is far beyond one with API calls that time out.
pub const FOREIGN_CLAIM_GRACE: std::time::Duration = std::time::Duration::from_secs(600);

/// Whether the claim on a run lease, for a Job that does not exist, is over and may be given up
/// or taken over (PURE). A claim this instance made is over at once: this instance runs one pass
/// of an object at a time, so no pass of its own is about to create that Job. So is one that
/// does not say who made it (made before claims said so). Another instance's claim is over once
/// it is older than [`FOREIGN_CLAIM_GRACE`], or when its time is unknown.
pub fn unstarted_claim_over(claimed_by: Option<&str>, me: &str, acquired: Option<Timestamp>, now: Timestamp) -> bool {
    match claimed_by.filter(|c| !c.is_empty()) {
        None => true,
        Some(c) if c == me => true,
        Some(_) => acquired.is_none_or(|t| {
            now.duration_since(t)
                .try_into()
                .is_ok_and(|age: std::time::Duration| age >= FOREIGN_CLAIM_GRACE)
        }),
    }
}

/// Whether a waiting object's run lease must be read again for a claim to give up (PURE). A
/// pass that waits gives up the claims its object holds for a Job that was never created; once
/// this process has read the lease and found none (or given it up), no new one appears without
/// this process knowing, except one another process made: the other replica of a leader term
/// this process did not hold, or another instance around a relabel, whose claim is not over
/// before [`FOREIGN_CLAIM_GRACE`] anyway. So the lease is read again when this process leads in
/// another term than when it read it, or once that grace has passed since; otherwise a wait
/// costs no read (the runner-slot queue looks at every waiting object every few seconds).
pub fn recheck_claims(read_at: Option<(Timestamp, u64)>, now: Timestamp, term: u64) -> bool {
    match read_at {
        None => true,
        Some((at, t)) => {
            t != term
                || now
                    .duration_since(at)
                    .try_into()
                    .map_or(true, |age: std::time::Duration| age >= FOREIGN_CLAIM_GRACE)
        }
    }
}

/// Who claimed a run lease (`captf.io/claimed-by`: the claiming instance's leader Lease name).
pub fn claimed_by(lease: &Lease) -> Option<&str> {
    lease
        .metadata
        .annotations
        .as_ref()?
        .get(keys::ANNOTATION_CLAIMED_BY)
        .map(String::as_str)
}

/// When a lease was taken by its holder.
pub fn acquired(lease: &Lease) -> Option<Timestamp> {
    lease.spec.as_ref()?.acquire_time.as_ref().map(|t| t.0)
}

/// Record which instance claims `lease` (PURE).
pub fn set_claimed_by(lease: &mut Lease, instance: &str) {
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(keys::ANNOTATION_CLAIMED_BY.to_string(), instance.to_string());
}

/// A new Lease object (PURE).
pub fn new_lease(ns: &str, name: &str, holder: &str, owner: Option<OwnerReference>, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(ns.to_string()),
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_string()),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// The member Jobs that joined a cluster lease, with their run leases (PURE). An annotation
/// that doesn't parse counts as none: its Jobs are still seen by the member-Job listing.
pub fn members(lease: &Lease) -> BTreeMap<String, String> {
    lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::ANNOTATION_CLUSTER_MEMBERS))
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default()
}

/// Write the member list into the lease (PURE); none removes the annotation.
pub fn set_members(lease: &mut Lease, members: &BTreeMap<String, String>) {
    let a = lease.metadata.annotations.get_or_insert_with(Default::default);
    if members.is_empty() {
        a.remove(keys::ANNOTATION_CLUSTER_MEMBERS);
    } else if let Ok(v) = serde_json::to_string(members) {
        a.insert(keys::ANNOTATION_CLUSTER_MEMBERS.to_string(), v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn an_unstarted_claim_of_another_instance_is_given_up_only_once_older_than_any_pass() {
        let now = t("2026-01-05T12:00:00Z");
        let me = "captf-controller-leader-aaaa";
        let other = "captf-controller-leader-bbbb";
        // Our own, or one made before claims said who made them: over at once.
        assert!(unstarted_claim_over(Some(me), me, Some(now), now));
        assert!(unstarted_claim_over(None, me, Some(now), now));
        assert!(unstarted_claim_over(Some(""), me, Some(now), now));
        // Another instance's: over at 10 minutes, not a second before.
        assert!(!unstarted_claim_over(Some(other), me, Some(now), now));
        assert!(!unstarted_claim_over(
            Some(other),
            me,
            Some(t("2026-01-05T11:50:01Z")),
            now
        ));
        assert!(unstarted_claim_over(
            Some(other),
            me,
            Some(t("2026-01-05T11:50:00Z")),
            now
        ));
        assert!(unstarted_claim_over(Some(other), me, None, now));
        // A claim from the future (clocks apart) is not over.
        assert!(!unstarted_claim_over(
            Some(other),
            me,
            Some(t("2026-01-05T12:05:00Z")),
            now
        ));
    }

    #[test]
    fn a_waiting_object_reads_its_run_lease_again_only_in_a_new_term_or_after_the_grace() {
        let read = t("2026-01-05T12:00:00Z");
        assert!(recheck_claims(None, read, 1), "never read");
        assert!(!recheck_claims(Some((read, 1)), read, 1));
        assert!(!recheck_claims(Some((read, 1)), t("2026-01-05T12:09:59Z"), 1));
        assert!(recheck_claims(Some((read, 1)), t("2026-01-05T12:10:00Z"), 1));
        assert!(recheck_claims(Some((read, 1)), read, 2), "another term");
        // A clock that went back does not keep it from being read.
        assert!(recheck_claims(Some((read, 1)), t("2026-01-05T11:00:00Z"), 1));
    }

    #[test]
    fn a_claim_says_which_instance_made_it_and_when() {
        let now = t("2026-01-05T12:00:00Z");
        let mut l = new_lease("ns", "captf-run-x", "job-1", None, now);
        assert_eq!(claimed_by(&l), None);
        set_claimed_by(&mut l, "captf-controller-leader");
        assert_eq!(claimed_by(&l), Some("captf-controller-leader"));
        assert_eq!(acquired(&l), Some(now));
    }

    #[test]
    fn a_lease_whose_holder_job_is_gone_and_not_active_is_taken_over() {
        assert!(may_take(None, "tc-a-apply-2", false, None));
        assert!(may_take(Some(""), "tc-a-apply-2", false, None));
        assert!(may_take(Some("tc-a-apply-2"), "tc-a-apply-2", true, None));
        assert!(may_take(Some("tc-a-apply-1"), "tc-a-apply-2", false, None));
        assert!(!may_take(Some("tc-a-apply-1"), "tc-a-apply-2", true, None));
        assert!(!may_take(
            Some("tc-a-apply-1"),
            "tc-a-apply-2",
            false,
            Some("tc-a-apply-1")
        ));
    }

    #[test]
    fn the_member_list_of_a_cluster_lease_round_trips_and_a_bad_one_reads_as_none() {
        let mut l = new_lease(
            "default",
            "captf-cluster-x",
            "tc-a-apply-1",
            None,
            Timestamp::UNIX_EPOCH,
        );
        assert!(members(&l).is_empty());
        let m = BTreeMap::from([("tmp-p-apply-1".to_string(), "captf-run-p".to_string())]);
        set_members(&mut l, &m);
        assert_eq!(members(&l), m);
        set_members(&mut l, &BTreeMap::new());
        assert!(
            l.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| !a.contains_key(keys::ANNOTATION_CLUSTER_MEMBERS))
        );
        l.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(keys::ANNOTATION_CLUSTER_MEMBERS.into(), "not json".into());
        assert!(members(&l).is_empty());
    }

    #[test]
    fn a_new_lease_names_the_job_as_holder() {
        let l = new_lease(
            "default",
            "captf-run-prod-eu-tc",
            "tc-prod-eu-225654031b7f-apply-7",
            None,
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(
            l.spec.and_then(|s| s.holder_identity).as_deref(),
            Some("tc-prod-eu-225654031b7f-apply-7")
        );
    }
}

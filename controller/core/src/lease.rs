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

//! Which machine pools and machines hold a TerraformCluster's deletion (docs/rules.md,
//! "Deletion"; docs/trust.md).
//!
//! A TerraformCluster is not destroyed while its members exist: their infrastructure usually
//! stands on the cluster's. Members are found by the label `cluster.x-k8s.io/cluster-name`, but
//! a label is only a claim: anyone who may create a TerraformMachinePool in the namespace could
//! label it with another team's cluster and hold that cluster's deletion for as long as they
//! like. So a labelled object holds the deletion only when its membership is verified:
//!
//! - it has an owner reference to the TerraformCluster itself (its UID), which only someone who
//!   can read that object can write and which the owner's deletion then cascades through; or
//! - it is controlled by a Cluster API `Machine` or `MachinePool` that carries the same
//!   cluster label (Cluster API sets and keeps that label from the owner's `spec.clusterName`;
//!   this is how every object Cluster API makes from a template is tied to its cluster).
//!
//! Everything else is an unverified claim: it never holds the deletion. The controller says so
//! where a person looks (a Warning Event on the cluster and on the claimant, [`unverified_note`]),
//! and `kubectl captf tree` draws such objects apart from the cluster's members.
//!
//! The same goes for a member's running Job holding the cluster's own apply and destroy
//! (`MemberJobActive`, and the members that joined the cluster lease): a Job counts only when
//! it is the Job of a verified member. A Job is recognised by its controller owner reference
//! ([`job_owner`]) and the owner's UID, never by its labels or its name: anyone who may create
//! Jobs in the namespace can copy those.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use captf_shared::{Kind, keys, names};

/// The Cluster API API group of `Machine` and `MachinePool`.
pub const CAPI_GROUP: &str = "cluster.x-k8s.io";

/// The member's controller owner reference when it is a Cluster API `Machine` or
/// `MachinePool` (any version of the group) (PURE).
pub fn capi_controller(member: &ObjectMeta) -> Option<&OwnerReference> {
    member.owner_references.iter().flatten().find(|o| {
        o.controller == Some(true)
            && o.api_version.split('/').next() == Some(CAPI_GROUP)
            && matches!(o.kind.as_str(), "Machine" | "MachinePool")
    })
}

/// Whether `member`, labelled with the cluster `cluster_name`, belongs to the TerraformCluster
/// of UID `cluster_uid`: owned by it, or controlled by a Cluster API owner (`capi_owner`, read
/// live: `None` when it has none or it does not exist) of the same UID as its controller
/// reference that carries the label `cluster_name` (PURE).
pub fn belongs(member: &ObjectMeta, cluster_uid: &str, cluster_name: &str, capi_owner: Option<&ObjectMeta>) -> bool {
    let labelled = |m: &ObjectMeta| {
        m.labels
            .as_ref()
            .and_then(|l| l.get(keys::LABEL_CLUSTER_NAME))
            .is_some_and(|c| c == cluster_name)
    };
    if !labelled(member) {
        return false;
    }
    if !cluster_uid.is_empty() && member.owner_references.iter().flatten().any(|o| o.uid == cluster_uid) {
        return true;
    }
    match (capi_controller(member), capi_owner) {
        (Some(r), Some(owner)) => owner.uid.as_deref() == Some(r.uid.as_str()) && labelled(owner),
        _ => false,
    }
}

/// A machine pool or machine labelled with a TerraformCluster's cluster name that does not
/// [`belong`](belongs) to it: it does not hold the cluster's deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unverified {
    pub kind: Kind,
    pub name: String,
    pub uid: String,
}

/// Why the unverified member `member` (in the namespace `namespace`) does not hold the deletion
/// of the TerraformCluster `cluster_object` of the cluster `cluster_name`, and how to make it a
/// member if it is one (PURE): the note of the Warning Events about it.
pub fn unverified_note(member: &Unverified, namespace: &str, cluster_object: &str, cluster_name: &str) -> String {
    format!(
        "{kind} {namespace}/{name} is labelled {label}={cluster_name} but is neither owned by TerraformCluster {namespace}/{cluster_object} nor controlled by a Cluster API Machine or MachinePool of cluster {cluster_name}: it does not hold the deletion of TerraformCluster {namespace}/{cluster_object}, which goes on without waiting for it. If it is a member, give it an owner reference to that TerraformCluster",
        kind = member.kind,
        name = member.name,
        label = keys::LABEL_CLUSTER_NAME,
    )
}

/// The CAPTF object a Job was created for, as its controller owner reference says: one of
/// `kinds`, in CAPTF's API group, and an object whose Job names include this Job's name (PURE).
/// `None` for anything else. The reference is only a claim until its UID is checked against the
/// object itself (a co-tenant who can read an object can copy its UID), but a Job with no such
/// reference is never one of the controller's.
pub fn job_owner<'a>(job: &'a ObjectMeta, kinds: &[Kind]) -> Option<(Kind, &'a OwnerReference)> {
    let group = |v: &str| v.split('/').next().map(str::to_owned);
    let ns = job.namespace.as_deref()?;
    let name = job.name.as_deref()?;
    let r = job
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))?;
    let kind = kinds.iter().copied().find(|k| k.as_str() == r.kind)?;
    let ours = group(&r.api_version) == group(keys::API_VERSION)
        && !r.uid.is_empty()
        && names::parse_job_name(kind, ns, &r.name, name).is_some();
    ours.then_some((kind, r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn labelled(cluster: &str) -> ObjectMeta {
        ObjectMeta {
            labels: Some(BTreeMap::from([(
                keys::LABEL_CLUSTER_NAME.to_string(),
                cluster.to_string(),
            )])),
            ..ObjectMeta::default()
        }
    }

    fn owned(mut m: ObjectMeta, api_version: &str, kind: &str, uid: &str, controller: bool) -> ObjectMeta {
        m.owner_references.get_or_insert_with(Vec::new).push(OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: "owner".into(),
            uid: uid.into(),
            controller: Some(controller),
            ..OwnerReference::default()
        });
        m
    }

    fn capi(uid: &str, cluster: &str) -> ObjectMeta {
        ObjectMeta {
            uid: Some(uid.into()),
            ..labelled(cluster)
        }
    }

    #[test]
    fn a_member_owned_by_its_terraform_cluster_holds_its_deletion() {
        let m = owned(
            labelled("prod"),
            "infrastructure.cluster.x-k8s.io/v1beta2",
            "TerraformCluster",
            "tc-uid",
            false,
        );
        assert!(belongs(&m, "tc-uid", "prod", None));
        // Owned by another TerraformCluster: not this one's.
        assert!(!belongs(&m, "other-uid", "prod", None));
    }

    #[test]
    fn a_member_controlled_by_a_cluster_api_owner_of_the_cluster_holds_its_deletion() {
        for (v, kind) in [
            ("cluster.x-k8s.io/v1beta2", "MachinePool"),
            ("cluster.x-k8s.io/v1beta1", "Machine"),
        ] {
            let m = owned(labelled("prod"), v, kind, "mp-uid", true);
            assert!(belongs(&m, "tc-uid", "prod", Some(&capi("mp-uid", "prod"))), "{kind}");
            // The owner belongs to another cluster, is another object, or is gone.
            assert!(!belongs(&m, "tc-uid", "prod", Some(&capi("mp-uid", "staging"))));
            assert!(!belongs(&m, "tc-uid", "prod", Some(&capi("another-uid", "prod"))));
            assert!(!belongs(&m, "tc-uid", "prod", None));
        }
    }

    fn job(ns: &str, name: &str, owner: Option<(&str, &str, &str, &str)>) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            owner_references: owner.map(|(v, kind, n, uid)| {
                vec![OwnerReference {
                    api_version: v.into(),
                    kind: kind.into(),
                    name: n.into(),
                    uid: uid.into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]
            }),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_job_is_recognised_by_its_controller_owner_not_by_its_labels_or_name() {
        let kinds = [Kind::TerraformMachinePool, Kind::TerraformMachine];
        let pool = Kind::TerraformMachinePool;
        let name = names::job_name(pool, "team-a", "workers", captf_shared::Op::Apply, 3);
        let v = keys::API_VERSION;
        // The controller's own Job: owned by the object whose name it carries.
        let own = job("team-a", &name, Some((v, pool.as_str(), "workers", "pool-uid")));
        let (kind, r) = job_owner(&own, &kinds).expect("the controller's Job");
        assert_eq!((kind, r.uid.as_str()), (pool, "pool-uid"));
        // The same name and labels with no owner, another group, a kind not asked for, an owner
        // whose Jobs have other names, an owner reference that is not the controller, or no UID.
        assert!(job_owner(&job("team-a", &name, None), &kinds).is_none());
        let other_group = job("team-a", &name, Some(("example.com/v1", pool.as_str(), "workers", "u")));
        assert!(job_owner(&other_group, &kinds).is_none());
        assert!(job_owner(&own, &[Kind::TerraformCluster]).is_none());
        let other_owner = job("team-a", &name, Some((v, pool.as_str(), "other-pool", "u")));
        assert!(job_owner(&other_owner, &kinds).is_none());
        let other_namespace = job("team-b", &name, Some((v, pool.as_str(), "workers", "u")));
        assert!(job_owner(&other_namespace, &kinds).is_none());
        let no_uid = job("team-a", &name, Some((v, pool.as_str(), "workers", "")));
        assert!(job_owner(&no_uid, &kinds).is_none());
        let mut not_controller = own.clone();
        if let Some(r) = not_controller.owner_references.as_mut().and_then(|o| o.first_mut()) {
            r.controller = Some(false);
        }
        assert!(job_owner(&not_controller, &kinds).is_none());
    }

    #[test]
    fn a_cluster_label_alone_never_holds_a_deletion() {
        // A co-tenant's pool labelled with another team's cluster.
        assert!(!belongs(&labelled("prod"), "tc-uid", "prod", None));
        // Not a controller reference, or not Cluster API's kinds.
        let not_controller = owned(labelled("prod"), "cluster.x-k8s.io/v1beta2", "MachinePool", "mp", false);
        assert!(!belongs(&not_controller, "tc-uid", "prod", Some(&capi("mp", "prod"))));
        let other_group = owned(labelled("prod"), "example.com/v1", "MachinePool", "mp", true);
        assert!(!belongs(&other_group, "tc-uid", "prod", Some(&capi("mp", "prod"))));
        let other_kind = owned(labelled("prod"), "cluster.x-k8s.io/v1beta2", "Cluster", "c", true);
        assert!(!belongs(&other_kind, "tc-uid", "prod", Some(&capi("c", "prod"))));
        // Owned by the cluster but labelled with another: not a member of this one at all.
        let relabelled = owned(labelled("staging"), "x/v1", "TerraformCluster", "tc-uid", false);
        assert!(!belongs(&relabelled, "tc-uid", "prod", None));
        // An empty UID never matches.
        let empty = owned(labelled("prod"), "x/v1", "TerraformCluster", "", false);
        assert!(!belongs(&empty, "", "prod", None));
    }
}

//! CAPTF's own leases (docs/rules.md): the run lease `captf-run-<suffix>` taken before a Job
//! exists (holder = the Job's name) and the cluster lease `captf-cluster-<hash>` held by a
//! TerraformCluster's Jobs. Taking one is a create, or an update with the read
//! resourceVersion; a 409 means somebody else won.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

use super::errors::{self, ApiAction, Error};
use super::gather;

/// What taking a lease came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Take {
    Taken,
    /// Held by a live holder, or somebody else won the write (409).
    Held(String),
}

/// Whether the current holder of a lease may be replaced: nobody holds it, we already do, or
/// its holder Job no longer exists and is not the object's `status.activeJob` (PURE).
pub fn may_take(holder: Option<&str>, me: &str, holder_job_exists: bool, active_job: Option<&str>) -> bool {
    match holder.filter(|h| !h.is_empty()) {
        None => true,
        Some(h) if h == me => true,
        Some(h) => !holder_job_exists && active_job != Some(h),
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

/// Take `name` for the Job `me`.
pub async fn take(
    client: &kube::Client,
    ns: &str,
    name: &str,
    me: &str,
    active_job: Option<&str>,
    owner: Option<OwnerReference>,
    now: Timestamp,
) -> Result<Take, Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    let what = format!("{ns}/{name}");
    let Some(mut lease) = gather::lease(client, ns, name).await? else {
        return match api
            .create(&PostParams::default(), &new_lease(ns, name, me, owner, now))
            .await
        {
            Ok(_) => Ok(Take::Taken),
            Err(e) if errors::is_conflict(&e) => Ok(Take::Held(format!("{name} was taken first by someone else"))),
            Err(e) => Err(Error::api(ApiAction::WriteLease, what, e)),
        };
    };
    let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
    let holder_exists = match holder.as_deref().filter(|h| !h.is_empty() && *h != me) {
        Some(h) => gather::job(client, ns, h).await?.is_some(),
        None => false,
    };
    if !may_take(holder.as_deref(), me, holder_exists, active_job) {
        return Ok(Take::Held(format!("{name} is held by {}", holder.unwrap_or_default())));
    }
    if holder.as_deref() == Some(me) {
        return Ok(Take::Taken);
    }
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some(me.to_string());
    spec.acquire_time = Some(MicroTime(now));
    spec.renew_time = Some(MicroTime(now));
    // `replace` sends the read resourceVersion: a 409 means somebody else wrote first.
    match api.replace(name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(Take::Taken),
        Err(e) if errors::is_conflict(&e) => Ok(Take::Held(format!("{name} changed while taking it"))),
        Err(e) => Err(Error::api(ApiAction::WriteLease, what, e)),
    }
}

/// Release `name` if `holder` holds it. A 409 or a missing Lease is fine: the next pass looks
/// again (and a lease whose holder Job is gone is taken over anyway).
pub async fn release(client: &kube::Client, ns: &str, name: &str, holder: &str) -> Result<(), Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    let Some(mut lease) = gather::lease(client, ns, name).await? else {
        return Ok(());
    };
    let current = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
    if current != Some(holder) {
        return Ok(());
    }
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = None;
        spec.acquire_time = None;
        spec.renew_time = None;
    }
    match api.replace(name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(()),
        Err(e) if errors::is_conflict(&e) || errors::is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::api(ApiAction::WriteLease, format!("{ns}/{name}"), e)),
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
    fn a_new_lease_names_the_job_as_holder() {
        let l = new_lease(
            "default",
            "captf-run-prod-eu-tc",
            "tc-prod-eu-225654-apply-7",
            None,
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(
            l.spec.and_then(|s| s.holder_identity).as_deref(),
            Some("tc-prod-eu-225654-apply-7")
        );
    }
}

//! CAPTF's own leases (docs/rules.md): the run lease `captf-run-<suffix>` taken before a Job
//! exists (holder = the Job's name) and the cluster lease `captf-cluster-<hash>`, held by a
//! TerraformCluster's Jobs and joined by its members' Jobs. Taking or joining one is a create,
//! or an update with the read resourceVersion; a 409 means somebody else won.
//!
//! The cluster lease is what makes "a member's Job never runs beside its cluster's apply" true
//! between two reconciles running at once: the cluster Job takes it as holder, each member Job
//! joins it (`captf.io/member-jobs`), and each side checks the other in the same read it
//! writes back. A holder or member counts while its Job runs, or, before the Job exists, while
//! its object's run lease still names it (`captf.io/holder-run-lease` for the holder).

use captf_read::api;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

use std::collections::BTreeMap;

use captf_shared::keys;

use captf_core::ident::Ident;
use captf_core::lease::{
    acquired, claimed_by, may_take, members, new_lease, set_claimed_by, set_members, unstarted_claim_over,
};
use captf_core::outcome;
use captf_read::errors::{self, ApiAction, Error};

/// What taking a lease came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Take {
    Taken,
    /// Held by a live holder, or somebody else won the write (409).
    Held(String),
}

/// Take the run lease `name` for the Job `me`, as the controller instance `instance`.
#[allow(clippy::too_many_arguments)]
pub async fn take(
    client: &kube::Client,
    ns: &str,
    name: &str,
    me: &str,
    active_job: Option<&str>,
    owner: Option<OwnerReference>,
    instance: &str,
    now: Timestamp,
) -> Result<Take, Error> {
    let read = api::lease(client, ns, name).await?;
    take_read(client, read, ns, name, me, active_job, owner, instance, now).await
}

/// [`take`], with the run lease as this pass already read it (`None`: absent). The write carries
/// that read's resourceVersion (a create fails when it exists), so a lease changed since is a 409
/// and `Held`, as with a fresh read.
#[allow(clippy::too_many_arguments)]
pub async fn take_read(
    client: &kube::Client,
    read: Option<Lease>,
    ns: &str,
    name: &str,
    me: &str,
    active_job: Option<&str>,
    owner: Option<OwnerReference>,
    instance: &str,
    now: Timestamp,
) -> Result<Take, Error> {
    let Some(mut lease) = read else {
        let mut l = new_lease(ns, name, me, owner, now);
        set_claimed_by(&mut l, instance);
        return create_claim(client, &l, "was taken first by someone else").await;
    };
    let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
    // A finished holder counts as over, like a gone one: its release is a write that can fail
    // after the booking is accounted (a 409 or a 500), and no later pass would release it again,
    // so a Job kept by the history would hold the object's next start off for good. Without a
    // run lease to witness it, a holder Job that does not exist is over too, unless another
    // instance's pass claimed it moments ago and is about to create it (a relabel).
    let holder_in_flight = match holder.as_deref().filter(|h| !h.is_empty() && *h != me) {
        Some(h) => match api::job(client, ns, h).await? {
            Some(j) => outcome::terminal(&j).is_none(),
            None => !unstarted_claim_over(claimed_by(&lease), instance, acquired(&lease), now),
        },
        None => false,
    };
    if !may_take(holder.as_deref(), me, holder_in_flight, active_job) {
        return Ok(Take::Held(format!("{name} is held by {}", holder.unwrap_or_default())));
    }
    if holder.as_deref() == Some(me) {
        return Ok(Take::Taken);
    }
    let spec = lease.spec.get_or_insert_with(Default::default);
    spec.holder_identity = Some(me.to_string());
    spec.acquire_time = Some(MicroTime(now));
    spec.renew_time = Some(MicroTime(now));
    set_claimed_by(&mut lease, instance);
    write_claim(client, &lease, "changed while taking it").await
}

fn annotation<'a>(lease: &'a Lease, key: &str) -> Option<&'a str> {
    lease.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Where a holder's or member's Job is (read live).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Its Job does not exist yet, and its object's run lease still names it.
    Starting,
    /// Its Job exists and has not finished.
    Running,
    /// Finished, or gone, or given up before it was created.
    Over,
}

async fn phase(client: &kube::Client, ns: &str, job: &str, run_lease: Option<&str>) -> Result<Phase, Error> {
    if let Some(j) = api::job(client, ns, job).await? {
        return Ok(if outcome::terminal(&j).is_none() {
            Phase::Running
        } else {
            Phase::Over
        });
    }
    let Some(rl) = run_lease else { return Ok(Phase::Over) };
    let holder = api::lease(client, ns, rl).await?.and_then(|l| l.spec?.holder_identity);
    Ok(if holder.as_deref() == Some(job) {
        Phase::Starting
    } else {
        Phase::Over
    })
}

/// Is `job` starting or running?
async fn in_flight(client: &kube::Client, ns: &str, job: &str, run_lease: Option<&str>) -> Result<bool, Error> {
    Ok(phase(client, ns, job, run_lease).await? != Phase::Over)
}

/// The members still starting or running, with where each is. With `cluster` (the
/// TerraformCluster taking the lease, and its cluster name), only verified members count
/// ([`verified_member_phase`]): anyone whose machine pool carries the cluster's label can join.
async fn live_members(
    client: &kube::Client,
    ns: &str,
    lease: &Lease,
    cluster: Option<(&Ident, &str)>,
) -> Result<BTreeMap<String, (String, Phase)>, Error> {
    let mut live = BTreeMap::new();
    for (job, run_lease) in members(lease) {
        let p = match cluster {
            Some((id, c)) => verified_member_phase(client, id, c, &job, &run_lease).await?,
            None => phase(client, ns, &job, Some(&run_lease)).await?,
        };
        if p != Phase::Over {
            live.insert(job, (run_lease, p));
        }
    }
    Ok(live)
}

/// Where a member that joined the cluster lease of `id` is ([`phase`]), counting it only when it
/// is a verified member of the cluster `cluster`: a running Job by its controller owner
/// (`api::is_member_job`); a Job not created yet by the owner of the run lease that names it
/// (the controller takes it with the object's owner reference). Any other member is `Over`,
/// so it neither holds the cluster's apply nor stays in the lease.
async fn verified_member_phase(
    client: &kube::Client,
    id: &Ident,
    cluster: &str,
    job: &str,
    run_lease: &str,
) -> Result<Phase, Error> {
    let ns = id.namespace.as_str();
    if let Some(j) = api::job(client, ns, job).await? {
        if outcome::terminal(&j).is_some() {
            return Ok(Phase::Over);
        }
        let member = api::is_member_job(client, id, cluster, &j.metadata, None).await?;
        if !member {
            tracing::info!(
                "Job {ns}/{job} joined the cluster lease of {} but is not the Job of a verified member: it does not hold the cluster",
                id.what()
            );
        }
        return Ok(if member { Phase::Running } else { Phase::Over });
    }
    let Some(lease) = api::lease(client, ns, run_lease).await? else {
        return Ok(Phase::Over);
    };
    if lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) != Some(job) {
        return Ok(Phase::Over);
    }
    // The run lease stands for the Job: it must be the lease of the object that will own it,
    // and that object a verified member.
    let as_job = ObjectMeta {
        name: Some(job.to_string()),
        namespace: Some(ns.to_string()),
        owner_references: lease.metadata.owner_references.clone(),
        ..Default::default()
    };
    let Some((kind, r)) = captf_core::membership::job_owner(
        &as_job,
        &[
            captf_shared::Kind::TerraformMachinePool,
            captf_shared::Kind::TerraformMachine,
        ],
    ) else {
        return Ok(Phase::Over);
    };
    let own_lease = captf_shared::names::run_lease_name(&captf_shared::names::suffix(kind, ns, &r.name));
    if own_lease != run_lease {
        return Ok(Phase::Over);
    }
    Ok(if api::is_member_job(client, id, cluster, &as_job, None).await? {
        Phase::Starting
    } else {
        Phase::Over
    })
}

fn run_leases(live: &BTreeMap<String, (String, Phase)>) -> BTreeMap<String, String> {
    live.iter().map(|(j, (rl, _))| (j.clone(), rl.clone())).collect()
}

/// A TerraformCluster's Job `me` (run lease `my_run_lease`, already taken) takes the cluster
/// lease `name`. A member Job still starting holds it off (a member never starts beside a
/// cluster Job); with `exclusive`, an apply or destroy, so does a member Job still running. Only
/// verified members of `id` (the TerraformCluster, of the cluster `cluster`) count.
#[allow(clippy::too_many_arguments)]
pub async fn take_cluster(
    client: &kube::Client,
    id: &Ident,
    cluster: &str,
    name: &str,
    me: &str,
    my_run_lease: &str,
    active_job: Option<&str>,
    exclusive: bool,
    now: Timestamp,
) -> Result<Take, Error> {
    let ns = id.namespace.as_str();
    let Some(mut lease) = api::lease(client, ns, name).await? else {
        let mut l = new_lease(ns, name, me, None, now);
        l.metadata.annotations = Some(BTreeMap::from([(
            keys::ANNOTATION_HOLDER_RUN_LEASE.to_string(),
            my_run_lease.to_string(),
        )]));
        return create_claim(client, &l, "was taken first by someone else").await;
    };
    let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
    if let Some(h) = holder.as_deref().filter(|h| !h.is_empty() && *h != me) {
        let witness = annotation(&lease, keys::ANNOTATION_HOLDER_RUN_LEASE).map(String::from);
        let live = in_flight(client, ns, h, witness.as_deref()).await?;
        if !may_take(Some(h), me, live, active_job) {
            return Ok(Take::Held(format!("{name} is held by {h}")));
        }
    }
    let live = live_members(client, ns, &lease, Some((id, cluster))).await?;
    if let Some((job, (_, p))) = live.iter().find(|(_, (_, p))| exclusive || *p == Phase::Starting) {
        let doing = if *p == Phase::Starting { "starting" } else { "running" };
        return Ok(Take::Held(format!("member Job {job} is {doing}")));
    }
    set_members(&mut lease, &run_leases(&live));
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(keys::ANNOTATION_HOLDER_RUN_LEASE.to_string(), my_run_lease.to_string());
    let spec = lease.spec.get_or_insert_with(Default::default);
    if spec.holder_identity.as_deref() != Some(me) {
        spec.holder_identity = Some(me.to_string());
        spec.acquire_time = Some(MicroTime(now));
    }
    spec.renew_time = Some(MicroTime(now));
    // A member that joined since makes it a 409.
    write_claim(client, &lease, "changed while taking it").await
}

/// A member's Job `me` (run lease `my_run_lease`, already taken) joins the cluster lease
/// `name`: refused while a cluster Job holds it and is starting or running.
pub async fn join_cluster(
    client: &kube::Client,
    ns: &str,
    name: &str,
    me: &str,
    my_run_lease: &str,
) -> Result<Take, Error> {
    let Some(mut lease) = api::lease(client, ns, name).await? else {
        let mut l = Lease {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(ns.to_string()),
                ..Default::default()
            },
            spec: Some(LeaseSpec::default()),
        };
        set_members(&mut l, &BTreeMap::from([(me.to_string(), my_run_lease.to_string())]));
        return create_claim(client, &l, "was created first by someone else").await;
    };
    let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
    if let Some(h) = holder.as_deref().filter(|h| !h.is_empty()) {
        let witness = annotation(&lease, keys::ANNOTATION_HOLDER_RUN_LEASE).map(String::from);
        if in_flight(client, ns, h, witness.as_deref()).await? {
            return Ok(Take::Held(format!("cluster Job {h} holds {name}")));
        }
    }
    let mut live = run_leases(&live_members(client, ns, &lease, None).await?);
    if live.get(me).map(String::as_str) == Some(my_run_lease) && live.len() == members(&lease).len() {
        return Ok(Take::Taken);
    }
    live.insert(me.to_string(), my_run_lease.to_string());
    set_members(&mut lease, &live);
    // A cluster Job that took it since makes it a 409.
    write_claim(client, &lease, "changed while joining it").await
}

/// Create `lease`, read as absent: a create that lost to another is `Held` (`lost` says how).
async fn create_claim(client: &kube::Client, lease: &Lease, lost: &str) -> Result<Take, Error> {
    let (ns, name) = lease_name(lease);
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    match api.create(&PostParams::default(), lease).await {
        Ok(_) => Ok(Take::Taken),
        Err(e) if errors::is_conflict(&e) => Ok(Take::Held(format!("{name} {lost}"))),
        Err(e) => Err(Error::api(ApiAction::WriteLease, format!("{ns}/{name}"), e)),
    }
}

/// Write back `lease` as changed from what was read. `replace` sends the read resourceVersion,
/// so a 409 means somebody else wrote first: `Held` (`lost` says how).
async fn write_claim(client: &kube::Client, lease: &Lease, lost: &str) -> Result<Take, Error> {
    let (ns, name) = lease_name(lease);
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    match api.replace(name, &PostParams::default(), lease).await {
        Ok(_) => Ok(Take::Taken),
        Err(e) if errors::is_conflict(&e) => Ok(Take::Held(format!("{name} {lost}"))),
        Err(e) => Err(Error::api(ApiAction::WriteLease, format!("{ns}/{name}"), e)),
    }
}

fn lease_name(lease: &Lease) -> (&str, &str) {
    (
        lease.metadata.namespace.as_deref().unwrap_or_default(),
        lease.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// The member Job `me` leaves the cluster lease `name` (booked or gone). A 409 or a missing
/// Lease is fine: a member whose Job finished no longer counts anyway.
pub async fn leave_cluster(client: &kube::Client, ns: &str, name: &str, me: &str) -> Result<(), Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    let Some(mut lease) = api::lease(client, ns, name).await? else {
        return Ok(());
    };
    let mut m = members(&lease);
    if m.remove(me).is_none() {
        return Ok(());
    }
    set_members(&mut lease, &m);
    match api.replace(name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(()),
        Err(e) if errors::is_conflict(&e) || errors::is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::api(ApiAction::WriteLease, format!("{ns}/{name}"), e)),
    }
}

/// Everything the Job `job` of `id` held, given up once it is booked or found gone: the run
/// lease, and the cluster lease (a TerraformCluster's Job releases it, a member's Job leaves it).
/// True when this released the run lease (it names no Job now).
pub async fn release_job(client: &kube::Client, id: &Ident, job: &str) -> Result<bool, Error> {
    let released = release(
        client,
        &id.namespace,
        &captf_shared::names::run_lease_name(&id.suffix),
        job,
    )
    .await?;
    if let Some(c) = &id.cluster_name {
        let cl = captf_shared::names::cluster_lease_name(&id.namespace, c);
        if id.kind == captf_shared::Kind::TerraformCluster {
            release(client, &id.namespace, &cl, job).await?;
        } else {
            leave_cluster(client, &id.namespace, &cl, job).await?;
        }
    }
    Ok(released)
}

/// A pass that decides not to start gives up the claims its object still holds for a Job that
/// was never created: an earlier pass took the run lease and claimed the cluster lease, then
/// failed before the Job existed (an API error, or its leader died). While the run lease names
/// that Job, the other side of the cluster lease counts it as starting and waits for it, and
/// nothing else would ever give it up. Another instance's claim is left alone while its pass
/// may still be creating the Job (`captf_core::lease::unstarted_claim_over`).
pub async fn give_up_unstarted(
    client: &kube::Client,
    id: &Ident,
    instance: &str,
    now: Timestamp,
) -> Result<Unstarted, Error> {
    let run_lease = captf_shared::names::run_lease_name(&id.suffix);
    let Some(lease) = api::lease(client, &id.namespace, &run_lease).await? else {
        return Ok(Unstarted::None);
    };
    let holder = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty());
    let Some(job) = holder else {
        return Ok(Unstarted::None);
    };
    if api::job(client, &id.namespace, &job).await?.is_some() {
        return Ok(Unstarted::None);
    }
    if !unstarted_claim_over(claimed_by(&lease), instance, acquired(&lease), now) {
        return Ok(Unstarted::Left(job));
    }
    release_job(client, id, &job).await?;
    Ok(Unstarted::GaveUp(job))
}

/// What [`give_up_unstarted`] found on the object's run lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unstarted {
    /// No claim for a Job that does not exist.
    None,
    /// The claims of this Job, never created, were given up.
    GaveUp(String),
    /// Another instance's pass claimed it for this Job moments ago: left to it.
    Left(String),
}

/// Release `name` if `holder` holds it. A 409 or a missing Lease is fine: the next pass looks
/// again (and a lease whose holder Job is gone is taken over anyway). True when this write
/// released it.
pub async fn release(client: &kube::Client, ns: &str, name: &str, holder: &str) -> Result<bool, Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), ns);
    let Some(mut lease) = api::lease(client, ns, name).await? else {
        return Ok(false);
    };
    let current = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
    if current != Some(holder) {
        return Ok(false);
    }
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = None;
        spec.acquire_time = None;
        spec.renew_time = None;
    }
    if let Some(a) = lease.metadata.annotations.as_mut() {
        a.remove(keys::ANNOTATION_HOLDER_RUN_LEASE);
        a.remove(keys::ANNOTATION_CLAIMED_BY);
    }
    match api.replace(name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(true),
        Err(e) if errors::is_conflict(&e) || errors::is_not_found(&e) => Ok(false),
        Err(e) => Err(Error::api(ApiAction::WriteLease, format!("{ns}/{name}"), e)),
    }
}

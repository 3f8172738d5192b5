//! Names that cannot collide and what is made under them bound to the object's UID
//! (docs/api.md "Names", docs/trust.md): a tenant who picks a name shaped like another object's
//! hashed suffix, or creates objects under another object's names before it, gets nothing of
//! it; a Job with another object's name and labels is never booked as its own.

use anyhow::Result;
use serde_json::{Value, json};

use captf_shared::types::TerraformCluster;
use captf_shared::{Kind, Op, names};
use captf_sim::{FaultRule, Verb};

use super::support::*;

const VICTIM: &str = "production-eu-west-1-primary-cluster-a";
/// The victim's hashed suffix without its kind: what the old scheme gave as a plain suffix.
const ATTACKER: &str = "production-eu-west-1-prima-fcdd74ef";
const K: Kind = Kind::TerraformCluster;

fn suffix(name: &str) -> String {
    names::suffix(K, NS, name)
}

fn pod_of(job: &k8s_openapi::api::batch::v1::Job) -> &k8s_openapi::api::core::v1::PodSpec {
    job.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn env_var<'a>(job: &'a k8s_openapi::api::batch::v1::Job, name: &str) -> Option<&'a str> {
    pod_of(job).containers[0]
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .as_deref()
}

/// The attack pair of one namespace: the attacker's runner never runs as the victim's account
/// nor on its state or inputs, and deleting the attacker destroys only the attacker's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_shaped_like_another_objects_hashed_suffix_never_gets_its_identity_or_state() -> Result<()> {
    assert_eq!(
        suffix(VICTIM),
        format!("{ATTACKER}-tc"),
        "the attack pair of the old scheme"
    );
    let env = Env::with_realistic_runners().await?;
    let v1 = env.create_applied_cluster(VICTIM).await?;
    env.until_ready(VICTIM).await?;
    let victim_inputs = env
        .sim
        .get("/secrets", NS, &names::inputs_secret_name(&suffix(VICTIM)))
        .unwrap();
    let victim_state = env
        .sim
        .get("/secrets", NS, &names::state_secret_name(&suffix(VICTIM)))
        .unwrap();

    let a1 = env
        .create_cluster(ATTACKER, json!({"variables": {"region": "us-east-1"}}))
        .await?;
    assert_ne!(suffix(ATTACKER), suffix(VICTIM));
    let victims_account = names::runner_service_account_name(&suffix(VICTIM));
    assert_eq!(
        pod_of(&v1).service_account_name.as_deref(),
        Some(victims_account.as_str())
    );
    assert_eq!(
        pod_of(&a1).service_account_name.as_deref(),
        Some(names::runner_service_account_name(&suffix(ATTACKER)).as_str())
    );
    assert_eq!(env_var(&a1, "CAPTF_STATE_SUFFIX"), Some(suffix(ATTACKER).as_str()));
    env.run_until_booked(&a1, "succeeded").await?;

    // Deleting the attacker runs its destroy on its own state.
    env.delete::<TerraformCluster>(ATTACKER).await?;
    let d = env.job(K, ATTACKER, Op::Destroy, 2).await?;
    assert_eq!(env_var(&d, "CAPTF_STATE_SUFFIX"), Some(suffix(ATTACKER).as_str()));
    assert_ne!(
        pod_of(&d).service_account_name.as_deref(),
        Some(victims_account.as_str())
    );
    // A destroy that succeeded removes the finalizer, and the object and its Jobs go: that the
    // attacker is gone is the proof (its booked Job may be collected before a test reads it).
    env.advance(30);
    env.until("the attacker gone", |e| e.object(TC, ATTACKER).is_none().then_some(()))
        .await?;

    // The victim's inputs, record and state are untouched; it is still Ready.
    let inputs_now = env
        .sim
        .get("/secrets", NS, &names::inputs_secret_name(&suffix(VICTIM)))
        .unwrap();
    assert_eq!(inputs_now["data"], victim_inputs["data"]);
    assert_eq!(
        inputs_now["metadata"]["annotations"],
        victim_inputs["metadata"]["annotations"]
    );
    let state_now = env
        .sim
        .get("/secrets", NS, &names::state_secret_name(&suffix(VICTIM)))
        .unwrap();
    assert_eq!(
        state_now["metadata"]["resourceVersion"],
        victim_state["metadata"]["resourceVersion"]
    );
    env.until_ready(VICTIM).await?;
    assert_eq!(
        env.job_names(K, VICTIM),
        vec![names::job_name(K, NS, VICTIM, Op::Apply, 1)]
    );
    env.no_denials()?;
    Ok(())
}

/// What an attacker plants under a victim's names before the victim exists.
fn planted(resource_kind: &str, api_version: &str, name: &str, metadata_extra: Value) -> Value {
    let mut o = json!({
        "apiVersion": api_version, "kind": resource_kind,
        "metadata": {"name": name, "namespace": NS},
    });
    if let (Some(m), Some(extra)) = (o["metadata"].as_object_mut(), metadata_extra.as_object()) {
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
    }
    o
}

/// Delete what was planted, as its planter would.
async fn remove(env: &Env, resource: &str, name: &str) -> Result<()> {
    use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
    use kube::Api;
    let client = env.sim.client()?;
    let dp = Default::default();
    match resource {
        "/serviceaccounts" => drop(Api::<ServiceAccount>::namespaced(client, NS).delete(name, &dp).await?),
        "/secrets" => drop(Api::<Secret>::namespaced(client, NS).delete(name, &dp).await?),
        other => anyhow::bail!("no delete for {other}"),
    }
    Ok(())
}

/// Plant `object`, create the victim, and wait for `Ready=False/NameConflict` naming it (and its
/// event), with no Job; then remove it and see the victim's first Job start.
async fn held_until_removed(object: Value, resource: &str) -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    env.sim.put(object)?;
    env.sim.put(cluster_json(VICTIM, json!({})))?;
    let c = env.until_reason(VICTIM, "Ready", "NameConflict").await?;
    let (status, _, message) = condition(&c, "Ready").unwrap();
    assert_eq!(status, "False");
    assert!(
        message.contains(&format!("{NS}/{name}")),
        "names the conflicting object: {message}"
    );
    env.until("a NameConflict event", |e| {
        e.events("NameConflict")
            .into_iter()
            .find(|ev| ev["note"].as_str().is_some_and(|n| n.contains(&name)))
    })
    .await?;
    assert!(env.job_names(K, VICTIM).is_empty(), "no Job starts");
    // Never adopted: the planted object is as it was (no owner of the victim's, no stamp).
    let still = env.sim.get(resource, NS, &name).unwrap();
    let victim_uid = env.cluster(VICTIM)["metadata"]["uid"].clone();
    assert_ne!(still.pointer("/metadata/ownerReferences/0/uid"), Some(&victim_uid));
    assert_ne!(
        still.pointer("/metadata/annotations/captf.io~1owner-uid"),
        Some(&victim_uid)
    );

    remove(&env, resource, &name).await?;
    env.advance(30);
    let j = env.job(K, VICTIM, Op::Apply, 1).await?;
    env.run_until_booked(&j, "succeeded").await?;
    env.until_ready(VICTIM).await?;
    env.no_denials()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_account_planted_under_the_victims_name_holds_the_victim_with_name_conflict() -> Result<()> {
    let account = names::runner_service_account_name(&suffix(VICTIM));
    held_until_removed(planted("ServiceAccount", "v1", &account, json!({})), "/serviceaccounts").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_secret_planted_under_the_victims_name_holds_the_victim_with_name_conflict() -> Result<()> {
    let state = names::state_secret_name(&suffix(VICTIM));
    let theirs = json!({"annotations": {"captf.io/owner-uid": "uid-of-the-attacker"}});
    held_until_removed(planted("Secret", "v1", &state, theirs), "/secrets").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbound_state_secret_older_than_the_objects_first_job_is_not_adopted() -> Result<()> {
    let state = names::state_secret_name(&suffix(VICTIM));
    held_until_removed(planted("Secret", "v1", &state, json!({})), "/secrets").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inputs_secret_owned_by_another_object_holds_the_victim_with_name_conflict() -> Result<()> {
    let inputs = names::inputs_secret_name(&suffix(VICTIM));
    let owner = json!({"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x",
        "uid": "uid-of-the-attacker", "controller": true}]});
    held_until_removed(planted("Secret", "v1", &inputs, owner), "/secrets").await
}

/// A state Secret and lock Lease an older CAPTF made (no owner-UID annotation) for an object
/// that ran before keep serving it: they are bound to it, not renamed, not refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_an_older_version_made_for_the_object_is_kept_and_bound_to_it() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    env.create_applied_cluster("prod-eu").await?;
    let uid = env.cluster("prod-eu")["metadata"]["uid"].clone();
    let state_name = names::state_secret_name("prod-eu-tc");
    let lock_name = names::lock_lease_name("prod-eu-tc");
    for (resource, name) in [("/secrets", &state_name), ("coordination.k8s.io/leases", &lock_name)] {
        let mut o = env.sim.get(resource, NS, name).unwrap();
        assert_eq!(
            o.pointer("/metadata/annotations/captf.io~1owner-uid"),
            Some(&uid),
            "{o}"
        );
        o["metadata"]["annotations"] = json!({});
        env.sim.put(o)?;
    }
    let state_data = env.sim.get("/secrets", NS, &state_name).unwrap()["data"].clone();
    env.merge_patch::<TerraformCluster>("prod-eu", json!({"spec": {"variables": {"size": "large"}}}))
        .await?;
    let j2 = env.job(K, "prod-eu", Op::Apply, 2).await?;
    for (resource, name) in [("/secrets", &state_name), ("coordination.k8s.io/leases", &lock_name)] {
        let o = env.sim.get(resource, NS, name).unwrap();
        assert_eq!(
            o.pointer("/metadata/annotations/captf.io~1owner-uid"),
            Some(&uid),
            "{o}"
        );
    }
    assert_eq!(env.sim.get("/secrets", NS, &state_name).unwrap()["data"], state_data);
    env.run_until_booked(&j2, "succeeded").await?;
    env.until_ready("prod-eu").await?;
    env.no_denials()?;
    Ok(())
}

/// A Job under the victim's next name, with its labels, owned by another UID (what a 24-bit
/// token collision or a tenant who may create Jobs gives): never booked as the victim's, never
/// pruned, and the victim is held naming it rather than waiting for it forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_with_the_objects_name_and_labels_owned_by_another_uid_is_never_booked_as_its_own() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    env.create_applied_cluster("prod-eu").await?;
    let mine = names::job_name(K, NS, "prod-eu", Op::Apply, 1);
    let planted_name = names::job_name(K, NS, "prod-eu", Op::Apply, 2);
    let mut planted = env.sim.get("batch/jobs", NS, &mine).unwrap();
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "annotations",
        "managedFields",
    ] {
        planted["metadata"].as_object_mut().unwrap().remove(k);
    }
    planted.as_object_mut().unwrap().remove("status");
    planted["metadata"]["name"] = json!(planted_name);
    planted["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
        "name": "attacker", "uid": "uid-of-the-attacker", "controller": true}]);
    env.sim.put(planted)?;
    env.advance(30);
    env.merge_patch::<TerraformCluster>("prod-eu", json!({"spec": {"variables": {"size": "large"}}}))
        .await?;
    // Provisioned: Ready stays True, and UpToDate says what holds the change.
    let c = env.until_reason("prod-eu", "UpToDate", "NameConflict").await?;
    let (_, _, message) = condition(&c, "UpToDate").unwrap();
    assert!(message.contains(&format!("Job {NS}/{planted_name}")), "{message}");
    assert_eq!(condition(&c, "Ready").unwrap().0, "True");
    env.until_idle().await?;
    let live = env.sim.get("batch/jobs", NS, &planted_name).expect("never pruned");
    assert_eq!(
        live.pointer("/metadata/annotations/captf.io~1outcome"),
        None,
        "never booked: {live}"
    );
    assert_eq!(c.pointer("/status/activeJob"), None, "{c}");
    assert_eq!(c.pointer("/status/lastJobSeq"), Some(&json!(1)), "{c}");
    Ok(())
}

/// Delete the cluster `name`, let its destroy (Job `seq`) run, and wait until the object is gone.
async fn destroyed(env: &Env, name: &str, seq: u32) -> Result<()> {
    env.delete::<TerraformCluster>(name).await?;
    env.job(K, name, Op::Destroy, seq).await?;
    env.advance(30);
    env.until("the object gone", |e| e.object(TC, name).is_none().then_some(()))
        .await
}

/// Deleted after a successful destroy and created again under the same name (as a GitOps tool
/// does): the state its predecessor released was emptied as it was released, so the new object
/// takes it over as if new and becomes Ready; a state bound to a live other object is still
/// never taken (the tests above), nor one that still holds what an orphaning kept (below).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_created_again_after_its_destroy_takes_over_the_released_state() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    env.create_applied_cluster("again").await?;
    env.until_ready("again").await?;
    destroyed(&env, "again", 2).await?;
    let state = names::state_secret_name(&suffix("again"));
    let released = env.sim.get("/secrets", NS, &state).unwrap();
    assert!(
        released["metadata"]["annotations"]["captf.io/released-by"].is_string()
            && released["metadata"]["annotations"]["captf.io/owner-uid"].is_null(),
        "{released}"
    );
    assert!(
        released["data"].as_object().is_none_or(serde_json::Map::is_empty),
        "emptied as it was released: {released}"
    );

    env.create_applied_cluster("again").await?;
    let c = env.until_ready("again").await?;
    let uid = c["metadata"]["uid"].as_str().unwrap().to_string();
    let bound = env.sim.get("/secrets", NS, &state).unwrap();
    assert_eq!(bound["metadata"]["annotations"]["captf.io/owner-uid"], uid.as_str());
    env.no_denials()?;
    Ok(())
}

/// A create of the state Secret or lock Lease refused with a 409 `Conflict` (not
/// `AlreadyExists`) made nothing, so the Job waits until both are made, bound to the object.
/// Started without them, its runner would make them itself, unbound; the object's destroy could
/// not release them, and the next object of its name would be held with `NameConflict`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_object_whose_create_met_a_conflict_is_made_before_the_job_starts() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    let state = names::state_secret_name(&suffix("refused"));
    let lock = names::lock_lease_name(&suffix("refused"));
    env.sim
        .faults()
        .inject(FaultRule::new(Verb::Create, "secrets", 409, 1).named(&state));
    env.sim
        .faults()
        .inject(FaultRule::new(Verb::Create, "leases", 409, 1).named(&lock));
    env.create_applied_cluster("refused").await?;
    assert_eq!(env.sim.faults().remaining(), 0, "both creates were refused once");
    let uid = env.cluster("refused")["metadata"]["uid"].as_str().unwrap().to_string();
    for (resource, name) in [("/secrets", &state), ("coordination.k8s.io/leases", &lock)] {
        let o = env.sim.get(resource, NS, name).unwrap();
        assert_eq!(o["metadata"]["annotations"]["captf.io/owner-uid"], uid.as_str(), "{o}");
    }

    env.until_ready("refused").await?;
    destroyed(&env, "refused", 2).await?;
    env.create_applied_cluster("refused").await?;
    env.until_ready("refused").await?;
    env.no_denials()?;
    Ok(())
}

/// A lock Lease of another object's that appears between the check before the first Job and the
/// create of the object's own (here: the pass's reads answered 404 while it was there: the lock
/// check's and the name check's) is not taken as made: the create's `AlreadyExists` ends the
/// pass, the next pass judges the Lease and holds the object with `NameConflict`, and no Job
/// ever runs against it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_object_that_appeared_after_the_check_is_judged_before_any_job() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    let lock = names::lock_lease_name(&suffix(VICTIM));
    let theirs = json!({"annotations": {"captf.io/owner-uid": "uid-of-the-attacker"}});
    env.sim.put(planted("Lease", "coordination.k8s.io/v1", &lock, theirs))?;
    env.sim
        .faults()
        .inject(FaultRule::new(Verb::Get, "leases", 404, 2).named(&lock));
    env.sim.put(cluster_json(VICTIM, json!({})))?;
    let c = env.until_reason(VICTIM, "Ready", "NameConflict").await?;
    assert_eq!(env.sim.faults().remaining(), 0, "the first pass read it as absent");
    let (_, _, message) = condition(&c, "Ready").unwrap();
    assert!(message.contains(&format!("{NS}/{lock}")), "{message}");
    assert!(env.job_names(K, VICTIM).is_empty(), "no Job starts");
    let still = env.sim.get("coordination.k8s.io/leases", NS, &lock).unwrap();
    assert_eq!(
        still["metadata"]["annotations"]["captf.io/owner-uid"], "uid-of-the-attacker",
        "{still}"
    );
    env.no_denials()?;
    Ok(())
}

/// An object deleted with `deletionPolicy: Orphan` keeps its infrastructure, and its released
/// state describes it. Whoever creates the name next (a co-tenant racing the GitOps re-create,
/// or having released crafted state under a name another team will create) gets nothing by the
/// name alone: the new object is held with `Ready=False/ReleasedStateNotAdopted`, saying which
/// annotation and UID adopt it, starts no Job (deleting it destroys nothing) and leaves the
/// state as it was. Only the annotation naming the releasing object's UID takes it over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_kept_by_an_orphan_deletion_is_not_taken_by_whoever_creates_the_name_next() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    let kept = "kept";
    let first = env.create_cluster(kept, json!({"deletionPolicy": "Orphan"})).await?;
    env.run_until_booked(&first, "succeeded").await?;
    env.until_ready(kept).await?;
    let old_uid = env.cluster(kept)["metadata"]["uid"].as_str().unwrap().to_string();
    env.delete::<TerraformCluster>(kept).await?;
    env.until("the object gone", |e| e.object(TC, kept).is_none().then_some(()))
        .await?;
    let state = names::state_secret_name(&suffix(kept));
    let lock = names::lock_lease_name(&suffix(kept));
    let released = env.sim.get("/secrets", NS, &state).unwrap();
    assert_eq!(
        released["metadata"]["annotations"]["captf.io/released-by"],
        old_uid.as_str()
    );
    assert!(
        released["data"]["tfstate"].is_string(),
        "the kept state stays: {released}"
    );

    // The next object of the name, without the annotation: held, no Job, nothing touched.
    env.sim.put(cluster_json(kept, json!({"deletionPolicy": "Orphan"})))?;
    let c = env.until_reason(kept, "Ready", "ReleasedStateNotAdopted").await?;
    let (status, _, message) = condition(&c, "Ready").unwrap();
    assert_eq!(status, "False");
    assert!(message.contains(&format!("{NS}/{state}")), "{message}");
    assert!(
        message.contains(&format!("captf.io/adopt-state={old_uid}")),
        "says how to adopt: {message}"
    );
    env.until("a ReleasedStateNotAdopted event", |e| {
        e.events("ReleasedStateNotAdopted").into_iter().next()
    })
    .await?;
    let untouched = |env: &Env| {
        for (resource, name) in [("/secrets", &state), ("coordination.k8s.io/leases", &lock)] {
            let o = env.sim.get(resource, NS, name).unwrap();
            assert!(o["metadata"]["annotations"]["captf.io/owner-uid"].is_null(), "{o}");
            assert_eq!(
                o["metadata"]["annotations"]["captf.io/released-by"],
                old_uid.as_str(),
                "{o}"
            );
        }
        assert_eq!(env.sim.get("/secrets", NS, &state).unwrap()["data"], released["data"]);
    };
    env.advance(60);
    env.until_idle().await?;
    assert!(env.job_names(K, kept).is_empty(), "no Job starts");
    untouched(&env);

    // Naming another UID adopts nothing either.
    env.merge_patch::<TerraformCluster>(
        kept,
        json!({"metadata": {"annotations": {"captf.io/adopt-state": "some-other-uid"}}}),
    )
    .await?;
    env.until_cluster(kept, "the wrong UID named", |c| {
        condition(c, "Ready").is_some_and(|(_, r, m)| r == "ReleasedStateNotAdopted" && m.contains("some-other-uid"))
    })
    .await?;
    assert!(env.job_names(K, kept).is_empty(), "no Job starts");
    untouched(&env);

    // Deleted while held: it goes without a destroy of what it never adopted.
    env.delete::<TerraformCluster>(kept).await?;
    env.until("the held object gone", |e| e.object(TC, kept).is_none().then_some(()))
        .await?;
    assert!(env.job_names(K, kept).is_empty(), "no destroy Job");
    untouched(&env);

    // Adopted deliberately, by the releasing object's UID: bound to the new object, which runs.
    let mut adopting = cluster_json(kept, json!({"deletionPolicy": "Orphan"}));
    adopting["metadata"]["annotations"] = json!({"captf.io/adopt-state": old_uid});
    env.sim.put(adopting)?;
    let j = env.job(K, kept, Op::Apply, 1).await?;
    let new_uid = env.cluster(kept)["metadata"]["uid"].as_str().unwrap().to_string();
    assert_ne!(new_uid, old_uid);
    for (resource, name) in [("/secrets", &state), ("coordination.k8s.io/leases", &lock)] {
        let o = env.sim.get(resource, NS, name).unwrap();
        assert_eq!(
            o["metadata"]["annotations"]["captf.io/owner-uid"],
            new_uid.as_str(),
            "{o}"
        );
        assert!(o["metadata"]["annotations"]["captf.io/released-by"].is_null(), "{o}");
    }
    assert_eq!(env.sim.get("/secrets", NS, &state).unwrap()["data"], released["data"]);
    env.run_until_booked(&j, "succeeded").await?;
    env.until_ready(kept).await?;
    env.no_denials()?;
    Ok(())
}

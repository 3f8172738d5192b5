//! What holds an object back from outside it: a paused Cluster API `Cluster` (docs/api.md) and a state
//! that cannot be read, which holds a deletion (docs/rules.md).

use anyhow::Result;
use serde_json::{Value, json};

use captf_shared::types::TerraformCluster;
use captf_shared::{Kind, Op, names};

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_cluster_api_cluster_pauses_its_terraform_cluster_until_unpaused() -> Result<()> {
    let env = Env::new().await?;
    env.sim.put(capi_cluster_crd())?;
    env.sim.put(capi_cluster("prod", true))?;
    let mut tc = cluster_json("prod-infra", json!({}));
    tc["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "prod"});
    env.sim.put(tc)?;
    let msg = env
        .until("Paused=True", |e| {
            let (st, reason, msg) = condition(&e.cluster("prod-infra"), "Paused")?;
            (st == "True" && reason == "Paused").then_some(msg)
        })
        .await?;
    assert!(msg.contains("Cluster API Cluster is paused"), "{msg}");
    let (st, reason, _) = condition(&env.cluster("prod-infra"), "Ready").expect("Ready");
    assert_eq!((st.as_str(), reason.as_str()), ("False", "Paused"));
    env.until_idle().await?;
    assert!(
        env.job_names(Kind::TerraformCluster, "prod-infra").is_empty(),
        "no Job while the Cluster API Cluster is paused"
    );

    env.sim.put(capi_cluster("prod", false))?;
    // The Cluster is not watched: the paused object looks again within its hold requeue.
    env.advance(30);
    env.job(Kind::TerraformCluster, "prod-infra", Op::Apply, 1).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_state_holds_the_deletion_until_it_reads_again() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    let k = Kind::TerraformCluster;
    env.create_applied_cluster("held").await?;

    // Somebody overwrote the state with plain JSON: Terraform cannot read it.
    let state = names::state_secret_name(&names::suffix(k, NS, "held"));
    let secret = |data: &[u8]| secret_json(&state, "tfstate", data);
    env.sim.put(secret(br#"{"version": 4}"#)?)?;
    env.delete::<TerraformCluster>("held").await?;
    let msg = env
        .until("DeletionHeld", |e| {
            let (st, reason, msg) = condition(&e.cluster("held"), "Ready")?;
            (st == "False" && reason == "DeletionHeld").then_some(msg)
        })
        .await?;
    assert!(msg.contains(&state) && msg.contains("not gzip"), "{msg}");
    let (st, reason, _) = condition(&env.cluster("held"), "StateReadable").expect("StateReadable");
    assert_eq!((st.as_str(), reason.as_str()), ("False", "StateUnreadable"));
    env.until_idle().await?;
    assert_eq!(
        env.job_names(k, "held").len(),
        1,
        "no destroy Job while the state cannot be read"
    );

    // The state is restored (gzip again): the destroy runs and the finalizer goes.
    env.sim.put(secret(&[0x1f, 0x8b, 0x08, 0x00, 0x00])?)?;
    env.advance(30);
    env.job(k, "held", Op::Destroy, 2).await?;
    env.advance(30);
    env.until("object gone", |e| e.object(TC, "held").is_none().then_some(()))
        .await?;
    Ok(())
}

/// A state that is gone although inputs were applied (an object moved without its state Secret,
/// or the Secret emptied by hand) holds the deletion: a destroy against it would delete nothing
/// and let the finalizer go, leaving the infrastructure behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_state_after_an_apply_holds_the_deletion_until_the_state_is_restored() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    let k = Kind::TerraformCluster;
    env.create_applied_cluster("lost").await?;
    let state = names::state_secret_name(&names::suffix(k, NS, "lost"));
    let applied = env
        .sim
        .get("/secrets", NS, &state)
        .and_then(|s| s.pointer("/data/tfstate").and_then(|v| v.as_str()).map(String::from))
        .expect("the apply wrote a state");
    env.sim.put(secret_json(&state, "tfstate", b"")?)?;
    env.delete::<TerraformCluster>("lost").await?;
    let msg = env
        .until("DeletionHeld", |e| {
            let (st, reason, msg) = condition(&e.cluster("lost"), "Ready")?;
            (st == "False" && reason == "DeletionHeld").then_some(msg)
        })
        .await?;
    assert!(msg.contains(&state) && msg.contains("holds no state"), "{msg}");
    env.until_idle().await?;
    assert_eq!(
        env.job_names(k, "lost").len(),
        1,
        "no destroy Job against the empty state"
    );

    // The state is put back: the destroy runs against it and the finalizer goes.
    let mut restored = secret_json(&state, "tfstate", b"")?;
    restored["data"]["tfstate"] = json!(applied);
    env.sim.put(restored)?;
    env.advance(30);
    env.job(k, "lost", Op::Destroy, 2).await?;
    env.advance(30);
    env.until("object gone", |e| e.object(TC, "lost").is_none().then_some(()))
        .await?;
    Ok(())
}

/// A TerraformMachine's first apply waits until its Cluster API Cluster says its infrastructure
/// is provisioned (read with the pause, every 30 s while held).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machines_first_apply_waits_until_its_clusters_infrastructure_is_provisioned() -> Result<()> {
    let env = Env::new().await?;
    env.sim.put(capi_cluster_crd())?;
    env.sim.put(capi_machine_crd())?;
    let mut cluster = capi_cluster("c1", false);
    cluster["status"] = json!({"initialization": {"infrastructureProvisioned": false}});
    env.sim.put(cluster.clone())?;
    env.sim.put(machine_with_terraform_machine(&env.sim, "m1", "c1")?)?;
    const TM: &str = "infrastructure.cluster.x-k8s.io/terraformmachines";
    env.until("Ready=False/ClusterInfrastructurePending", |e| {
        let (st, reason, _) = condition(&e.object(TM, "m1")?, "Ready")?;
        (st == "False" && reason == "ClusterInfrastructurePending").then_some(())
    })
    .await?;
    env.until_idle().await?;
    assert!(
        env.job_names(Kind::TerraformMachine, "m1").is_empty(),
        "no Job before the Cluster's infrastructure"
    );

    cluster["status"] = json!({"initialization": {"infrastructureProvisioned": true}});
    env.sim.put(cluster)?;
    env.advance(30);
    env.job(Kind::TerraformMachine, "m1", Op::Apply, 1).await?;
    env.no_denials()?;
    Ok(())
}

/// With Cluster API served when the controller starts, its Clusters are watched (metadata only):
/// unpausing one wakes its TerraformCluster at once, with no clock advance, where without the
/// watch the held object would look again only after its 30 s requeue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_cluster_wakes_its_objects_when_it_is_unpaused() -> Result<()> {
    let dir = crd_dir_with(&[("zz-clusters.yaml", capi_cluster_crd())])?;
    let env = Env::with(captf_sim::Sim::builder().crd_dir(dir.path())).await?;
    env.sim.put(capi_cluster("prod", true))?;
    let mut tc = cluster_json("prod-infra", json!({}));
    tc["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "prod"});
    env.sim.put(tc)?;
    env.until_reason("prod-infra", "Ready", "Paused").await?;
    env.until_idle().await?;
    assert!(env.job_names(Kind::TerraformCluster, "prod-infra").is_empty());

    env.sim.put(capi_cluster("prod", false))?;
    env.job(Kind::TerraformCluster, "prod-infra", Op::Apply, 1).await?;
    env.no_denials()?;
    let used = env.sim.used_rights(CONTROLLER_SA.0, CONTROLLER_SA.1);
    assert!(used.contains("watch cluster.x-k8s.io/clusters"), "{used:?}");
    Ok(())
}

/// Found by the soak, twice: a member's reconcile read the cluster lease as free while the
/// cluster's reconcile was between taking it and creating its Job, and the two Jobs ran at once;
/// then a cluster drift check took the lease between a member's join and its Job's creation.
/// Each side now writes its claim into the same Lease it checked (a 409 if the other wrote
/// first), a holder or member whose Job does not exist yet still counts while its object's run
/// lease names it, and a starting member holds off even a drift check. This plays the interleavings one step at a time, under the chart's RBAC.
/// A pool in the cluster's namespace, labelled `name`'s member; with `owned`, owned by the
/// TerraformCluster `name` (a verified member); without, only labelled (a co-tenant's claim).
fn member_pool(env: &Env, pool: &str, cluster: &str, owned: bool) -> Value {
    let mut p = cluster_json(pool, json!({}));
    p["kind"] = json!("TerraformMachinePool");
    p["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": cluster});
    if owned {
        p["metadata"]["ownerReferences"] = owned_by_cluster(env, cluster);
    }
    p
}

/// What the cluster's next start came to: its Job, or the reason it waits.
async fn next_apply_or_wait(env: &Env, name: &str, seq: u32) -> Result<Result<String, String>> {
    env.until(&format!("{name}'s apply {seq} or a wait"), |e| {
        let job = names::job_name(Kind::TerraformCluster, NS, name, Op::Apply, seq);
        if e.job_names(Kind::TerraformCluster, name).contains(&job) {
            return Some(Ok(job));
        }
        let c = e.cluster(name);
        let reason = c.pointer("/status/nextAction/reason")?.as_str()?;
        (reason == "MemberJobActive").then(|| Err(reason.to_string()))
    })
    .await
}

/// A co-tenant who may create TerraformMachinePools in the namespace labels one with another
/// team's cluster and keeps its Job running: only a verified member's running Job holds the
/// cluster's apply, so the victim's change still starts; a member its cluster owns still holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_co_tenants_pool_labelled_with_another_teams_cluster_does_not_hold_its_apply() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    env.create_applied_cluster("victim").await?;
    // The co-tenant's pool: its Job runs (the clock stands still).
    env.create(
        Kind::TerraformMachinePool,
        member_pool(&env, "squatter", "victim", false),
    )
    .await?;
    env.merge_patch::<TerraformCluster>("victim", json!({"spec": {"variables": {"region": "eu-west-2"}}}))
        .await?;
    let started = next_apply_or_wait(&env, "victim", 2).await?;
    assert!(
        started.is_ok(),
        "the squatter's Job held the victim's apply: {started:?}"
    );
    let j2 = env.job(Kind::TerraformCluster, "victim", Op::Apply, 2).await?;
    env.run_until_booked(&j2, "succeeded").await?;

    // A member the cluster owns: its running Job holds the cluster's next apply.
    env.create(Kind::TerraformMachinePool, member_pool(&env, "workers", "victim", true))
        .await?;
    env.merge_patch::<TerraformCluster>("victim", json!({"spec": {"variables": {"region": "eu-west-3"}}}))
        .await?;
    let held = next_apply_or_wait(&env, "victim", 3).await?;
    assert_eq!(held, Err("MemberJobActive".to_string()));
    env.no_denials()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_and_its_cluster_never_start_jobs_at_once_whoever_reaches_the_cluster_lease_first() -> Result<()> {
    use captf_controller::runtime::leases::{self, Take};
    use captf_core::job::owner_reference;
    let mut env = Env::with(captf_sim::SimBuilder::default()).await?;
    // The controller's own reconciles are not part of this: only the lease steps run, for
    // objects that exist (a member counts only when its cluster owns it).
    if let Some(h) = env.handle.take() {
        h.abort();
    }
    let client = env.controller_client()?;
    let now = env.now();
    env.sim.put(cluster_json("prod", json!({})))?;
    env.sim.put(member_pool(&env, "pool", "prod", true))?;
    let object = |kind: Kind, name: &str| ident(&env, kind, name);
    let (tc, pool) = (
        object(Kind::TerraformCluster, "prod")?,
        object(Kind::TerraformMachinePool, "pool")?,
    );
    let cl = names::cluster_lease_name(NS, "prod");
    let tc_job = |op: Op, seq: u32| names::job_name(tc.kind, NS, &tc.name, op, seq);
    let tc_run = names::run_lease_name(&tc.suffix);
    let pool_job = names::job_name(pool.kind, NS, &pool.name, Op::Apply, 1);
    let pool_run = names::run_lease_name(&pool.suffix);
    let tc_owner = || Some(owner_reference(tc.kind, &tc.name, &tc.uid));
    let taken = |t: Take| t == Take::Taken;
    let leader = "captf-controller-leader";

    // 1. The cluster's start took its run lease and the cluster lease; its Job is not created
    //    yet. A member may not join.
    let first = tc_job(Op::Apply, 1);
    assert!(taken(
        leases::take(&client, NS, &tc_run, &first, None, tc_owner(), leader, now).await?
    ));
    assert!(taken(
        leases::take_cluster(&client, &tc, "prod", &cl, &first, &tc_run, None, true, now).await?
    ));
    let pool_owner = Some(owner_reference(pool.kind, &pool.name, &pool.uid));
    assert!(taken(
        leases::take(&client, NS, &pool_run, &pool_job, None, pool_owner, leader, now).await?
    ));
    let refused = leases::join_cluster(&client, NS, &cl, &pool_job, &pool_run).await?;
    assert!(
        matches!(&refused, Take::Held(why) if why.contains(&first)),
        "{refused:?}"
    );

    // 2. The cluster's start gave up (its run lease moved on): the member joins.
    leases::release(&client, NS, &tc_run, &first).await?;
    assert!(taken(
        leases::join_cluster(&client, NS, &cl, &pool_job, &pool_run).await?
    ));

    // 3. The member joined; its Job is not created yet. Neither the cluster's apply nor its
    //    drift check may take the lease: a member never starts beside a cluster Job.
    for (job, exclusive) in [(tc_job(Op::Apply, 2), true), (tc_job(Op::Drift, 2), false)] {
        assert!(taken(
            leases::take(&client, NS, &tc_run, &job, None, tc_owner(), leader, now).await?
        ));
        let refused = leases::take_cluster(&client, &tc, "prod", &cl, &job, &tc_run, None, exclusive, now).await?;
        assert!(
            matches!(&refused, Take::Held(why) if why.contains(&format!("{pool_job} is starting"))),
            "{refused:?}"
        );
        leases::release(&client, NS, &tc_run, &job).await?;
    }
    // Once the member's Job runs, the cluster's drift check may overlap it (it only reads), its
    // apply may not.
    let runner = |name: &str, owner: Value| {
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NS, "ownerReferences": owner},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "runner", "image": "captf-runner:dev"}]}}}})
    };
    let pool_ref = json!([{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformMachinePool",
        "name": "pool", "uid": pool.uid, "controller": true}]);
    env.sim.put(runner(&pool_job, pool_ref))?;
    let apply3 = tc_job(Op::Apply, 3);
    assert!(taken(
        leases::take(&client, NS, &tc_run, &apply3, None, tc_owner(), leader, now).await?
    ));
    let refused = leases::take_cluster(&client, &tc, "prod", &cl, &apply3, &tc_run, None, true, now).await?;
    assert!(
        matches!(&refused, Take::Held(why) if why.contains(&format!("{pool_job} is running"))),
        "{refused:?}"
    );
    leases::release(&client, NS, &tc_run, &apply3).await?;
    let drift3 = tc_job(Op::Drift, 3);
    assert!(taken(
        leases::take(&client, NS, &tc_run, &drift3, None, tc_owner(), leader, now).await?
    ));
    assert!(taken(
        leases::take_cluster(&client, &tc, "prod", &cl, &drift3, &tc_run, None, false, now).await?
    ));
    let lease = env
        .sim
        .get("coordination.k8s.io/leases", NS, &cl)
        .expect("the cluster lease");
    assert!(
        lease["metadata"]["annotations"]["captf.io/member-jobs"]
            .as_str()
            .is_some_and(|m| m.contains(&pool_job)),
        "{lease}"
    );
    leases::release(&client, NS, &cl, &drift3).await?;
    leases::release(&client, NS, &tc_run, &drift3).await?;

    // 4. The member's Job is gone (booked and pruned) and its run lease released: it no longer
    //    holds the cluster's apply off, and leaving removes it.
    kube::Api::<k8s_openapi::api::batch::v1::Job>::namespaced(env.sim.client()?, NS)
        .delete(&pool_job, &Default::default())
        .await?;
    leases::release(&client, NS, &pool_run, &pool_job).await?;
    let apply4 = tc_job(Op::Apply, 4);
    assert!(taken(
        leases::take(&client, NS, &tc_run, &apply4, None, tc_owner(), leader, now).await?
    ));
    assert!(taken(
        leases::take_cluster(&client, &tc, "prod", &cl, &apply4, &tc_run, None, true, now).await?
    ));
    leases::leave_cluster(&client, NS, &cl, &pool_job).await?;
    let lease = env
        .sim
        .get("coordination.k8s.io/leases", NS, &cl)
        .expect("the cluster lease");
    assert!(
        lease.pointer("/metadata/annotations/captf.io~1member-jobs").is_none(),
        "{lease}"
    );
    leases::release(&client, NS, &cl, &apply4).await?;
    leases::release(&client, NS, &tc_run, &apply4).await?;

    // 5. A co-tenant's pool, only labelled with the cluster, joins the lease and runs a Job; a
    //    Job made by hand with the member's name and labels joins too. Neither holds the
    //    cluster's apply, and taking the lease drops them from it.
    env.sim.put(member_pool(&env, "squatter", "prod", false))?;
    let squatter = object(Kind::TerraformMachinePool, "squatter")?;
    let sq_job = names::job_name(squatter.kind, NS, "squatter", Op::Apply, 1);
    let sq_run = names::run_lease_name(&squatter.suffix);
    let sq_owner = Some(owner_reference(squatter.kind, "squatter", &squatter.uid));
    assert!(taken(
        leases::take(&client, NS, &sq_run, &sq_job, None, sq_owner, leader, now).await?
    ));
    assert!(taken(leases::join_cluster(&client, NS, &cl, &sq_job, &sq_run).await?));
    let sq_ref = json!([{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformMachinePool",
        "name": "squatter", "uid": squatter.uid, "controller": true}]);
    env.sim.put(runner(&sq_job, sq_ref))?;
    let forged = names::job_name(pool.kind, NS, &pool.name, Op::Apply, 9);
    env.sim.put(runner(&forged, json!([])))?;
    assert!(taken(leases::join_cluster(&client, NS, &cl, &forged, &pool_run).await?));
    let apply5 = tc_job(Op::Apply, 5);
    assert!(taken(
        leases::take(&client, NS, &tc_run, &apply5, None, tc_owner(), leader, now).await?
    ));
    let took = leases::take_cluster(&client, &tc, "prod", &cl, &apply5, &tc_run, None, true, now).await?;
    assert_eq!(took, Take::Taken, "an unverified member held the cluster's apply");
    let lease = env
        .sim
        .get("coordination.k8s.io/leases", NS, &cl)
        .expect("the cluster lease");
    assert!(
        lease.pointer("/metadata/annotations/captf.io~1member-jobs").is_none(),
        "{lease}"
    );
    env.no_denials()?;
    Ok(())
}

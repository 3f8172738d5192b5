//! `clusterctl move` (docs/api.md, "Moving with clusterctl"), played on two simulators the way
//! clusterctl does it: pause the Cluster, wait for no block-move annotation, copy the objects
//! without status (owner references rebuilt, Jobs and Leases left behind), remove their
//! finalizers in the source and delete them there, unpause in the target.

use anyhow::Result;
use serde_json::{Value, json};

use captf_shared::protocol::PlanSummary;
use captf_shared::types::TerraformCluster;
use captf_shared::{Kind, Op, keys};
use captf_sim::{JobMatch, RunnerScript};

use super::support::*;

const BLOCK: &str = "/metadata/annotations/clusterctl.cluster.x-k8s.io~1block-move";
const STATE: &str = "tfstate-default-prod-eu-tc";
const INPUTS: &str = "captf-inputs-prod-eu-tc";
const OUTPUTS: &str = "captf-outputs-prod-eu-tc";

/// A TerraformCluster of the Cluster API Cluster `prod`.
fn prod_eu() -> Value {
    let mut tc = cluster_json("prod-eu", json!({}));
    tc["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "prod"});
    tc
}

/// What clusterctl copies: the object as stored, without what the server owns or the status.
fn copied(mut o: Value) -> Value {
    if let Some(m) = o["metadata"].as_object_mut() {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "finalizers",
        ] {
            m.remove(k);
        }
    }
    if let Some(m) = o.as_object_mut() {
        m.remove("status");
    }
    o
}

fn has_block_move(o: &Value) -> bool {
    o.pointer(BLOCK).is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_blocks_move_unless_it_is_paused_idle_and_unlocked() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    let job = env.create_cluster("prod-eu", json!({})).await?;
    env.until_cluster("prod-eu", "block-move while the apply runs", has_block_move)
        .await?;
    env.run_until_booked(&job, "succeeded").await?;
    env.until_ready("prod-eu").await?;
    // Idle but not paused: a Job could start at any moment (a drift check, a change), and
    // clusterctl notes the blocking objects before it pauses, so the annotation stays.
    assert!(has_block_move(&env.cluster("prod-eu")), "unpaused: still blocks move");
    env.merge_patch::<TerraformCluster>("prod-eu", json!({"spec": {"paused": true}}))
        .await?;
    env.until_cluster("prod-eu", "no block-move once paused and idle", |o| !has_block_move(o))
        .await?;

    // A workstation takes the state lock: the Lease does not move, so neither may the object.
    env.sim.hold_lock(NS, "prod-eu-tc", "lock-1", "alice@laptop");
    env.merge_patch::<TerraformCluster>("prod-eu", json!({"metadata": {"labels": {"wake": "1"}}}))
        .await?;
    env.until_cluster("prod-eu", "block-move while the lock is held", has_block_move)
        .await?;
    env.sim.release_lock(NS, "prod-eu-tc");
    env.merge_patch::<TerraformCluster>("prod-eu", json!({"metadata": {"labels": {"wake": "2"}}}))
        .await?;
    env.until_cluster("prod-eu", "no block-move once the lock is free", |o| !has_block_move(o))
        .await?;
    // Unpaused again: blocks move again.
    env.merge_patch::<TerraformCluster>("prod-eu", json!({"spec": {"paused": false}}))
        .await?;
    env.until_cluster("prod-eu", "block-move once unpaused", has_block_move)
        .await?;
    env.no_denials()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_started_after_clusterctl_built_its_graph_is_waited_for() -> Result<()> {
    // clusterctl notes the objects carrying block-move, then pauses the Cluster, then waits for
    // those only. An idle, unpaused object is noted; a Job that starts before the pause lands
    // keeps the annotation until it is booked.
    let k = Kind::TerraformCluster;
    let env = Env::with_realistic_runners().await?;
    env.sim.put(capi_cluster_crd())?;
    env.sim.put(capi_cluster("prod", false))?;
    let j1 = env.create(k, prod_eu()).await?;
    env.run_until_booked(&j1, "succeeded").await?;
    env.until_ready("prod-eu").await?;
    // clusterctl builds its graph: the idle object is noted as blocking.
    assert!(has_block_move(&env.cluster("prod-eu")), "noted in the graph");
    // A change starts an apply before the pause lands.
    env.merge_patch::<TerraformCluster>("prod-eu", json!({"spec": {"variables": {"region": "eu-west-2"}}}))
        .await?;
    let j2 = env.job(k, "prod-eu", Op::Apply, 2).await?;
    env.sim.put(capi_cluster("prod", true))?;
    // clusterctl waits on the noted object: the annotation stays while apply 2 runs.
    env.merge_patch::<TerraformCluster>("prod-eu", json!({"metadata": {"labels": {"wake": "1"}}}))
        .await?;
    env.until_idle().await?;
    assert!(
        has_block_move(&env.cluster("prod-eu")),
        "apply 2 runs: still blocks move"
    );
    env.run_until_booked(&j2, "succeeded").await?;
    env.until_cluster("prod-eu", "free to move once apply 2 is booked", |o| !has_block_move(o))
        .await?;
    env.no_denials()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_keeps_the_state_runs_no_destroy_in_the_source_and_reads_outputs_again_in_the_target() -> Result<()> {
    let k = Kind::TerraformCluster;
    let src = Env::with_realistic_runners().await?;
    src.sim.put(capi_cluster_crd())?;
    src.sim.put(capi_cluster("prod", false))?;
    let j1 = src.create(k, prod_eu()).await?;
    src.run_until_booked(&j1, "succeeded").await?;
    src.until_ready("prod-eu").await?;
    // What Terraform's backend left in the state Secret the controller made.
    let mut state = src.sim.get("/secrets", NS, STATE).expect("state Secret");
    state["data"] = json!({"tfstate": "H4sIAAAAAAAA/6uuBQBDv6ajAgAAAA=="});
    src.sim.put(state)?;

    // A change starts an apply; clusterctl pauses the Cluster while it runs.
    src.merge_patch::<TerraformCluster>("prod-eu", json!({"spec": {"variables": {"region": "eu-west-2"}}}))
        .await?;
    let j2 = src.job(k, "prod-eu", Op::Apply, 2).await?;
    src.sim.put(capi_cluster("prod", true))?;
    src.until_cluster("prod-eu", "block-move while apply 2 runs", has_block_move)
        .await?;
    // The running apply finishes and is booked; only then may the move go on.
    src.run_until_booked(&j2, "succeeded").await?;
    src.until_cluster("prod-eu", "no block-move once idle", |o| !has_block_move(o))
        .await?;
    src.until_idle().await?;

    // Move to the target as clusterctl does; the paused source adds no finalizer back, so its
    // copy goes at once.
    let dst = Env::with_realistic_runners().await?;
    move_prod_eu(&src, &dst).await?;
    assert!(
        src.job_names(k, "prod-eu").iter().all(|j| !j.contains("-destroy-")),
        "no destroy in the source: {:?}",
        src.job_names(k, "prod-eu")
    );

    // Paused in the target: no Job, no finalizer yet.
    dst.until_idle().await?;
    assert!(dst.job_names(k, "prod-eu").is_empty());
    assert_eq!(dst.cluster("prod-eu").pointer("/metadata/finalizers"), None);

    // Unpaused: the controller adds its finalizer, applies nothing (the moved inputs Secret says
    // these inputs were applied) and reads the outputs again with a refresh.
    dst.sim.put(capi_cluster("prod", false))?;
    dst.advance(30);
    let refresh = dst.job(k, "prod-eu", Op::Refresh, 1).await?;
    dst.run_until_booked(&refresh, "succeeded").await?;
    let c = dst
        .until_cluster("prod-eu", "outputs read again", |o| {
            o.pointer("/status/outputs").is_some()
        })
        .await?;
    assert_eq!(c.pointer("/metadata/finalizers/0"), Some(&json!(keys::FINALIZER)));
    assert_eq!(c.pointer("/status/initialization/provisioned"), Some(&json!(true)));
    dst.until_idle().await?;
    assert_eq!(
        dst.job_names(k, "prod-eu"),
        vec![refresh.metadata.name.clone().unwrap()],
        "no apply and no destroy in the target"
    );
    // The state travelled as it was: the controller's own pre-creation left it alone.
    let moved = dst.sim.get("/secrets", NS, STATE).unwrap();
    assert_eq!(moved["data"], json!({"tfstate": "H4sIAAAAAAAA/6uuBQBDv6ajAgAAAA=="}));
    src.no_denials()?;
    dst.no_denials()?;
    Ok(())
}

/// Copy what clusterctl moves of `prod-eu` from `src` to `dst` (the Cluster paused in both),
/// then delete it in the source as clusterctl does.
async fn move_prod_eu(src: &Env, dst: &Env) -> Result<()> {
    dst.sim.put(capi_cluster_crd())?;
    dst.sim.put(capi_cluster("prod", true))?;
    dst.sim.put(copied(src.cluster("prod-eu")))?;
    let uid = dst.cluster("prod-eu")["metadata"]["uid"].clone();
    // Its Secrets: the inputs and outputs Secrets by owner, the state Secret by the move label.
    for name in [INPUTS, OUTPUTS, STATE] {
        let secret = src.sim.get("/secrets", NS, name).unwrap();
        let labelled = secret
            .pointer(&format!(
                "/metadata/labels/{}",
                keys::LABEL_CLUSTERCTL_MOVE.replace('/', "~1")
            ))
            .is_some();
        let owned = secret.pointer("/metadata/ownerReferences/0/name") == Some(&json!("prod-eu"));
        assert!(labelled || owned, "clusterctl would not move {name}: {secret}");
        let mut c = copied(secret);
        if owned {
            c["metadata"]["ownerReferences"][0]["uid"] = uid.clone();
        }
        dst.sim.put(c)?;
    }
    src.merge_patch::<TerraformCluster>("prod-eu", json!({"metadata": {"finalizers": null}}))
        .await?;
    src.delete::<TerraformCluster>("prod-eu").await?;
    src.until("the source copy is gone", |e| {
        e.object(TC, "prod-eu").is_none().then_some(())
    })
    .await?;
    Ok(())
}

/// A destructive plan waiting for approval when the Cluster is moved: the pending plan is status
/// and does not move, so the target's apply plans again and stops for a person again; an approval
/// of that plan's hash lets exactly it apply. Nothing is applied unapproved on either side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_awaiting_approval_when_moved_waits_for_approval_again_in_the_target() -> Result<()> {
    let k = Kind::TerraformCluster;
    let destructive = PlanSummary {
        add: 0,
        change: 0,
        destroy: 1,
        replace: 0,
    };
    let src = Env::with_realistic_runners().await?;
    src.sim.put(capi_cluster_crd())?;
    src.sim.put(capi_cluster("prod", false))?;
    let j1 = src.create(k, prod_eu()).await?;
    src.run_until_booked(&j1, "succeeded").await?;
    src.sim.script(
        JobMatch::object(k, NS, "prod-eu").op(Op::Apply),
        RunnerScript::blocked("hash-1", destructive),
    );
    src.merge_patch::<TerraformCluster>("prod-eu", json!({"spec": {"variables": {"region": "eu-west-2"}}}))
        .await?;
    let j2 = src.job(k, "prod-eu", Op::Apply, 2).await?;
    src.run_until_booked(&j2, "blocked").await?;
    src.until_next_action("prod-eu", "AwaitingApproval").await?;
    src.sim.put(capi_cluster("prod", true))?;
    src.until_cluster("prod-eu", "free to move", |o| !has_block_move(o))
        .await?;

    let dst = Env::with_realistic_runners().await?;
    dst.sim.script(
        JobMatch::object(k, NS, "prod-eu").op(Op::Apply),
        RunnerScript::blocked("hash-1", destructive),
    );
    move_prod_eu(&src, &dst).await?;
    assert!(src.job_names(k, "prod-eu").iter().all(|j| !j.contains("-destroy-")));

    dst.sim.put(capi_cluster("prod", false))?;
    dst.advance(30);
    let t1 = dst.job(k, "prod-eu", Op::Apply, 1).await?;
    assert_eq!(annotations(&t1)["captf.io/reason"], "InputsChanged");
    assert!(
        !annotations(&t1).contains_key("captf.io/approved-plan"),
        "no approval moved with the status"
    );
    dst.run_until_booked(&t1, "blocked").await?;
    let c = dst.until_next_action("prod-eu", "AwaitingApproval").await?;
    assert_eq!(c.pointer("/status/pendingPlan/hash"), Some(&json!("hash-1")));
    dst.merge_patch::<TerraformCluster>(
        "prod-eu",
        json!({"metadata": {"annotations": {"captf.io/approve-plan": "hash-1"}}}),
    )
    .await?;
    let t2 = dst.job(k, "prod-eu", Op::Apply, 2).await?;
    assert_eq!(annotations(&t2)["captf.io/approved-plan"], "hash-1");
    dst.run_until_booked(&t2, "succeeded").await?;
    dst.until_ready("prod-eu").await?;
    src.no_denials()?;
    dst.no_denials()?;
    Ok(())
}

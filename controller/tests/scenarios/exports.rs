//! Cluster exports (docs/api.md): the outputs a TerraformCluster names in `spec.exports` reach its
//! verified members as `cluster_<output>`, a sensitive one masked; a member waits while its cluster
//! has no outputs, and a changed export re-applies the members.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use serde_json::{Value, json};

use captf_shared::types::TerraformCluster;
use captf_shared::{Kind, Op};
use captf_sim::{JobMatch, RunnerScript};

use super::support::*;

const TMP: &str = "infrastructure.cluster.x-k8s.io/terraformmachinepools";

fn net_outputs(vpc: &str) -> BTreeMap<String, Value> {
    BTreeMap::from([
        ("vpc_id".to_string(), json!(vpc)),
        ("db_password".to_string(), json!("pw-0f3a9")),
        ("not_exported".to_string(), json!(1)),
    ])
}

/// A TerraformMachinePool of the cluster `cluster`: labelled, and owned by it when `owned`.
fn pool_of(env: &Env, name: &str, cluster: &str, owned: bool) -> Value {
    let mut pool = cluster_json(name, json!({}));
    pool["kind"] = json!("TerraformMachinePool");
    pool["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": cluster});
    if owned {
        pool["metadata"]["ownerReferences"] = owned_by_cluster(env, cluster);
    }
    pool
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_waits_for_its_clusters_exports_receives_them_and_re_applies_when_they_change() -> Result<()> {
    // Runners with outputs, so no apply is followed by a refresh that reads them.
    let env = Env::with_realistic_runners().await?;
    let (tc, tmp) = (Kind::TerraformCluster, Kind::TerraformMachinePool);
    // The cluster's first apply takes 45 s, longer than a member's 30 s wait for its inputs.
    env.sim.script(
        JobMatch::object(tc, NS, "net").op(Op::Apply),
        RunnerScript {
            duration: Duration::from_secs(45),
            ..RunnerScript::realistic_with_sensitive_outputs(net_outputs("vpc-1"), &["db_password"])
        },
    );
    env.sim
        .put(cluster_json("net", json!({"exports": ["vpc_id", "db_password"]})))?;
    let c1 = env.job(tc, "net", Op::Apply, 1).await?;
    let t0 = env.now();
    env.sim.put(pool_of(&env, "workers", "net", true))?;
    let waiting = env
        .until("the pool waiting for its cluster's exports", |e| {
            let o = e.object(TMP, "workers")?;
            (o.pointer("/status/nextAction/reason")? == "InputsUnresolved").then_some(o)
        })
        .await?;
    let (_, _, message) = condition(&waiting, "Ready").expect("a Ready condition");
    assert_eq!(
        message,
        "the inputs cannot be resolved: cluster exports: TerraformCluster net has no outputs yet (it exports vpc_id, db_password): waiting for its apply"
    );
    // Its next look at 30 s finds them still missing.
    env.advance(30);
    env.until_idle().await?;
    assert!(env.job_names(tmp, "workers").is_empty(), "no Job without the exports");
    // The cluster's apply ends at 45 s: the pool is looked at then, not at its next look (60 s).
    env.advance(15);
    env.booked(job_name(&c1), "succeeded").await?;
    let p1 = env.job(tmp, "workers", Op::Apply, 1).await?;
    assert_eq!(
        ts(&p1),
        t0 + jiff::SignedDuration::from_secs(45),
        "created as the cluster's apply was booked"
    );
    let inputs = inputs_json(&env, "captf-inputs-workers-tmp")?;
    assert_eq!(inputs["variables"]["cluster_vpc_id"], "vpc-1");
    assert_eq!(inputs["variables"]["cluster_db_password"], "pw-0f3a9");
    assert!(inputs["variables"].get("cluster_not_exported").is_none());
    assert_eq!(inputs["publicVariables"], json!(["cluster_vpc_id"]));
    // The sensitive export, and only it, is masked by the runner.
    assert_eq!(
        job_env(&p1, captf_shared::protocol::env::SENSITIVE_VARIABLES).as_deref(),
        Some("cluster_db_password")
    );
    // The sensitive output never reaches the cluster's status.
    let outputs = env.cluster("net")["status"]["outputs"].clone();
    assert_eq!(outputs, json!({"not_exported": 1, "vpc_id": "vpc-1"}));
    env.run_until_booked(&p1, "succeeded").await?;

    // The cluster's module changes an exported output: the pool re-applies with the new value.
    env.sim.script(
        JobMatch::object(tc, NS, "net").op(Op::Apply),
        RunnerScript::realistic_with_sensitive_outputs(net_outputs("vpc-2"), &["db_password"]),
    );
    env.merge_patch::<TerraformCluster>("net", json!({"spec": {"variables": {"region": "eu-west-2"}}}))
        .await?;
    let c2 = env.job(tc, "net", Op::Apply, 2).await?;
    env.run_until_booked(&c2, "succeeded").await?;
    let p2 = env.job(tmp, "workers", Op::Apply, 2).await?;
    assert_eq!(annotations(&p2)["captf.io/reason"], "InputsChanged");
    assert_eq!(
        inputs_json(&env, "captf-inputs-workers-tmp")?["variables"]["cluster_vpc_id"],
        "vpc-2"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_not_verified_as_the_clusters_receives_none_of_its_exports() -> Result<()> {
    let env = Env::new().await?;
    env.sim.script(
        JobMatch::object(Kind::TerraformCluster, NS, "net").op(Op::Apply),
        RunnerScript::realistic_with_sensitive_outputs(net_outputs("vpc-1"), &["db_password"]),
    );
    env.sim
        .put(cluster_json("net", json!({"exports": ["vpc_id", "db_password"]})))?;
    let c1 = env.job(Kind::TerraformCluster, "net", Op::Apply, 1).await?;
    env.run_until_booked(&c1, "succeeded").await?;
    // Labelled with the cluster, but neither owned by it nor made by Cluster API for it.
    env.sim.put(pool_of(&env, "intruder", "net", false))?;
    let held = env
        .until("the claimant refused the exports", |e| {
            let o = e.object(TMP, "intruder")?;
            (o.pointer("/status/nextAction/reason")? == "InputsUnresolved").then_some(o)
        })
        .await?;
    let (_, _, message) = condition(&held, "Ready").expect("a Ready condition");
    assert!(
        message.starts_with(
            "the inputs cannot be resolved: cluster exports: not a verified member of TerraformCluster net, so it receives none of its exports"
        ),
        "{message}"
    );
    env.until_idle().await?;
    assert!(env.job_names(Kind::TerraformMachinePool, "intruder").is_empty());
    assert!(
        env.sim
            .get("/secrets", NS, "captf-inputs-intruder-tmp")
            .is_none_or(|s| { !s.to_string().contains("cluster_db_password") })
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_the_cluster_module_lacks_is_named_on_the_cluster_and_its_members_wait() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    env.sim.script(
        JobMatch::object(Kind::TerraformCluster, NS, "net").op(Op::Apply),
        RunnerScript::realistic_with_sensitive_outputs(net_outputs("vpc-1"), &["db_password"]),
    );
    env.sim
        .put(cluster_json("net", json!({"exports": ["vpc_id", "subnet_ids"]})))?;
    let c1 = env.job(Kind::TerraformCluster, "net", Op::Apply, 1).await?;
    env.run_until_booked(&c1, "succeeded").await?;
    let warned = env
        .until("the ExportMissing Warning", |e| {
            e.events("ExportMissing").into_iter().next()
        })
        .await?;
    assert_eq!(warned["type"], "Warning");
    let note = warned["note"]
        .as_str()
        .or(warned["message"].as_str())
        .unwrap_or_default();
    assert!(note.contains("spec.exports[1] \"subnet_ids\""), "{warned}");
    env.sim.put(pool_of(&env, "workers", "net", true))?;
    let waiting = env
        .until("the member waiting for the missing export", |e| {
            let o = e.object(TMP, "workers")?;
            (o.pointer("/status/nextAction/reason")? == "InputsUnresolved").then_some(o)
        })
        .await?;
    let (_, _, message) = condition(&waiting, "UpToDate").expect("an UpToDate condition");
    assert!(
        message
            .contains("cluster_subnet_ids: TerraformCluster net exports the output \"subnet_ids\" (spec.exports[1])"),
        "{message}"
    );
    env.until_idle().await?;
    assert!(env.job_names(Kind::TerraformMachinePool, "workers").is_empty());
    assert_eq!(env.events("ExportMissing").len(), 1, "one Warning per apply");
    Ok(())
}

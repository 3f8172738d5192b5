//! The lifecycle scenarios of docs/rules.md, one per rule that involves the API.

use std::sync::Arc;

use anyhow::Result;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use serde_json::{Value, json};

use captf_controller::runtime::{self, clock::WatchClock};
use captf_shared::protocol::PlanSummary;
use captf_shared::types::{TerraformCluster, TerraformMachinePool};
use captf_shared::{Kind, Op, names};
use captf_sim::{FaultRule, JobMatch, RunnerScript, Sim, Verb};

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_apply_success_ready_with_endpoint_from_outputs() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    let job = env.create_cluster("prod-eu", json!({})).await?;
    assert_eq!(job.metadata.name.as_deref(), Some("tc-prod-eu-225654031b7f-apply-1"));
    let health = env.handle.as_ref().unwrap().health_addr;
    env.until("ready after the first sync", |e| {
        e.handle
            .as_ref()?
            .ready
            .load(std::sync::atomic::Ordering::SeqCst)
            .then_some(())
    })
    .await?;
    let readyz = http_get(health, "/readyz").await?;
    assert!(readyz.starts_with("HTTP/1.1 200"), "{readyz}");
    let c = env.cluster("prod-eu");
    assert_eq!(c.pointer("/metadata/finalizers/0"), Some(&json!("captf.io/destroy")));
    assert!(
        env.sim.get("/secrets", NS, "captf-inputs-prod-eu-tc").is_some(),
        "inputs Secret written first"
    );
    assert_eq!(
        env.lease_holder("captf-run-prod-eu-tc")?,
        json!("tc-prod-eu-225654031b7f-apply-1")
    );
    env.until_field("prod-eu", "/status/activeJob", json!("tc-prod-eu-225654031b7f-apply-1"))
        .await?;
    assert_eq!(env.events("JobStarted").len(), 1);

    env.run_until_booked(&job, "succeeded").await?;
    let c = env.until_ready("prod-eu").await?;
    assert_eq!(condition(&c, "ApplyJobSucceeded").unwrap().1, "ApplySucceeded");
    assert_eq!(c.pointer("/status/initialization/provisioned"), Some(&json!(true)));
    assert_eq!(c.pointer("/status/initialization/provisioned"), Some(&json!(true)));
    assert_eq!(
        c.pointer("/status/outputs/control_plane_endpoint/host"),
        Some(&json!("10.0.0.1"))
    );
    assert_eq!(
        c.pointer("/spec/controlPlaneEndpoint"),
        Some(&json!({"host": "10.0.0.1", "port": 6443}))
    );
    let secret = env.sim.get("/secrets", NS, "captf-inputs-prod-eu-tc").unwrap();
    assert!(
        secret
            .pointer("/metadata/annotations/captf.io~1applied-inputs-hash")
            .is_some()
    );
    assert!(
        env.lease_holder("captf-run-prod-eu-tc")?.is_null(),
        "run lease released"
    );
    env.until_idle().await?;
    assert_eq!(
        env.job_names(Kind::TerraformCluster, "prod-eu").len(),
        1,
        "no second Job while idle"
    );
    assert!(
        env.metrics()
            .contains("captf_jobs_finished_total{kind=\"TerraformCluster\",op=\"apply\",outcome=\"succeeded\"} 1")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_apply_is_retried_at_1m_then_2m_then_10m() -> Result<()> {
    let env = Env::new().await?;
    env.sim.set_default_script(RunnerScript::fail("terraform exploded"));
    let k = Kind::TerraformCluster;
    let mut prev = env.create_cluster("retry", json!({})).await?;
    for (seq, delay) in [(2u32, 60i64), (3, 120), (4, 600)] {
        env.run_until_booked(&prev, "failed").await?;
        let fin = finished(&live(&env, job_name(&prev)));

        // Just before the delay ends: nothing starts.
        let wait = env
            .until("nextAction backoff", |e| {
                let c = e.cluster("retry");
                let na = c.pointer("/status/nextAction")?;
                (na["reason"] == "InputsChangedBackoff").then(|| na["notBefore"].as_str().map(str::to_string))?
            })
            .await?;
        let not_before: Timestamp = wait.parse()?;
        assert_eq!((not_before - fin).get_seconds(), delay, "delay before attempt {seq}");
        env.sim.advance_to(not_before - jiff::SignedDuration::from_secs(1));
        env.until_idle().await?;
        assert_eq!(
            env.job_names(k, "retry").len() as u32,
            seq - 1,
            "no retry before notBefore"
        );
        env.sim.advance_to(not_before);
        let j = env.job(k, "retry", Op::Apply, seq).await?;
        assert_eq!((ts(&j) - fin).get_seconds(), delay);
        assert_eq!(labels(&j)["captf.io/attempt"], seq.to_string());
        prev = j;
    }
    let c = env.cluster("retry");
    assert_eq!(c.pointer("/status/consecutiveFailures/apply"), Some(&json!(3)));
    assert_eq!(env.events("JobFailed").len(), 3);
    // Events are stamped with the controller's (here the simulator's) clock, not the wall clock.
    for e in env.events("JobFailed") {
        let at: Timestamp = e["eventTime"].as_str().expect("eventTime").parse()?;
        assert!(
            at >= T0.parse()? && at <= env.now(),
            "event at {at}, simulated now {}",
            env.now()
        );
    }
    assert!(env.metrics().contains(
        "captf_consecutive_failures{kind=\"TerraformCluster\",namespace=\"default\",name=\"retry\",op=\"apply\"} 3"
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_kill_counted_though_runner_reported_interrupted() -> Result<()> {
    let env = Env::new().await?;
    env.sim.set_default_script(RunnerScript::hang());
    let j = env
        .create_cluster(
            "slow",
            json!({"jobs": {"activeDeadlineSeconds": 60, "lockTimeoutSeconds": 30}}),
        )
        .await?;
    assert_eq!(j.spec.as_ref().unwrap().active_deadline_seconds, Some(60));
    env.advance(61);
    env.advance(200);
    env.booked(job_name(&j), "deadline").await?;
    // The runner caught the deadline's SIGTERM and reported `interrupted`; it still counts.
    let pods = env.sim.pods_of_job(NS, job_name(&j))?;
    let message = pods
        .iter()
        .flat_map(|p| p.status.iter().flat_map(|s| s.container_statuses.iter().flatten()))
        .find_map(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())
        .expect("a termination message");
    let reported = captf_shared::protocol::RunnerResult::parse(&message)?;
    assert_eq!(reported.result, captf_shared::protocol::RunResult::Interrupted);
    env.until_field("slow", "/status/consecutiveFailures/apply", json!(1))
        .await?;
    assert_eq!(env.events("JobDeadlineExceeded").len(), 1);
    assert!(env.events("JobInterrupted").is_empty());
    assert!(env.metrics().contains("outcome=\"deadline\"} 1"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_is_not_counted_and_retries_at_once() -> Result<()> {
    let env = Env::new().await?;
    let k = Kind::TerraformCluster;
    env.sim.script(
        JobMatch::object(k, NS, "evicted").op(Op::Apply),
        RunnerScript::evicted(),
    );
    let j = env.create_cluster("evicted", json!({})).await?;
    env.run_until_booked(&j, "interrupted").await?;
    let j2 = env.job(k, "evicted", Op::Apply, 2).await?;
    assert_eq!(ts(&j2), env.now(), "no backoff after an eviction");
    assert_eq!(labels(&j2)["captf.io/attempt"], "1");
    assert_eq!(env.events("JobInterrupted").len(), 1);
    let c = env.cluster("evicted");
    assert_eq!(apply_failures(&c), json!(0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_lock_of_a_dead_runner_is_handed_to_the_next_job_once() -> Result<()> {
    let env = Env::new().await?;
    let k = Kind::TerraformCluster;
    env.sim.script(
        JobMatch::object(k, NS, "locky").op(Op::Apply),
        RunnerScript::die_holding_lock_id("0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55"),
    );
    let j1 = env.create_cluster("locky", json!({})).await?;
    env.run_until_booked(&j1, "failed").await?;
    let fin = finished(&live(&env, job_name(&j1)));
    env.sim.advance_to(fin + jiff::SignedDuration::from_secs(60));
    let j2 = env.job(k, "locky", Op::Apply, 2).await?;
    assert_eq!(
        annotations(&j2).get("captf.io/force-unlock").map(String::as_str),
        Some("0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55")
    );
    env.until("ForceUnlocked event", |e| {
        (e.events("ForceUnlocked").len() == 1).then_some(())
    })
    .await?;
    env.run_until_booked(&j2, "succeeded").await?;
    env.until_idle().await?;
    assert_eq!(env.events("ForceUnlocked").len(), 1, "emitted once");
    assert!(
        env.metrics()
            .contains("captf_force_unlocks_total{kind=\"TerraformCluster\"} 1")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workstation_lock_reports_state_locked_and_is_never_unlocked() -> Result<()> {
    let env = Env::new().await?;
    let k = Kind::TerraformCluster;
    env.sim
        .hold_lock(NS, "ws-tc", "11111111-2222-3333-4444-555555555555", "alice@laptop");
    env.sim
        .put(cluster_json("ws", json!({"jobs": {"lockTimeoutSeconds": 60}})))?;
    // A lock Lease older than the object's first Job is not taken for its own until a person
    // binds it to the object.
    let c = env.until_reason("ws", "Ready", "NameConflict").await?;
    assert!(
        condition(&c, "Ready")
            .unwrap()
            .2
            .contains("Lease default/lock-tfstate-default-ws-tc")
    );
    bind_to_object(&env, "coordination.k8s.io/leases", "lock-tfstate-default-ws-tc", "ws")?;
    // The hold's retry is set when its pass ends: move the clock only once the pass has ended.
    env.until_idle().await?;
    env.advance(30);
    let j1 = env.job(k, "ws", Op::Apply, 1).await?;
    assert!(annotations(&j1).get("captf.io/force-unlock").is_none());
    let c = env.until_reason("ws", "StateReadable", "StateLocked").await?;
    let (status, _, message) = condition(&c, "StateReadable").unwrap();
    assert_eq!(status, "False");
    assert!(
        message.contains("alice@laptop") && message.contains("OperationTypeApply"),
        "{message}"
    );
    env.advance(61);
    env.booked(job_name(&j1), "failed").await?;
    env.advance(60);
    let j2 = env.job(k, "ws", Op::Apply, 2).await?;
    assert!(
        annotations(&j2).get("captf.io/force-unlock").is_none(),
        "never unlocked"
    );
    assert_eq!(env.events("StateLocked").len(), 1);
    assert_eq!(
        env.lease_holder("lock-tfstate-default-ws-tc")?,
        json!("11111111-2222-3333-4444-555555555555")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_job_deleted_while_running_records_interrupted_apply_until_next_success() -> Result<()> {
    let env = Env::new().await?;
    let k = Kind::TerraformCluster;
    env.sim
        .script(JobMatch::object(k, NS, "gone").op(Op::Apply), RunnerScript::hang());
    let j1 = env.create_cluster("gone", json!({})).await?;
    let name = j1.metadata.name.clone().unwrap();
    env.until_field("gone", "/status/activeJob", json!(name)).await?;
    // Someone deletes the running Job (no background GC wait: the Job is simply gone).
    env.delete::<Job>(&name).await?;
    let want = format!(
        "Job {name}: disappeared while it ran and may have applied part of its change; an apply of the current inputs is due."
    );
    let j2 = env.job(k, "gone", Op::Apply, 2).await?;
    assert_eq!(annotations(&j2)["captf.io/reason"], "InterruptedApply");
    let secret = env.sim.get("/secrets", NS, "captf-inputs-gone-tc").unwrap();
    assert_eq!(
        secret.pointer("/metadata/annotations/captf.io~1interrupted-apply"),
        Some(&json!(name))
    );
    env.until("the interrupted-apply message", |e| {
        let (st, reason, msg) = condition(&e.cluster("gone"), "ApplyJobSucceeded")?;
        (st == "False" && reason == "ApplyFailed" && msg == want).then_some(())
    })
    .await?;
    env.run_until_booked(&j2, "succeeded").await?;
    env.until("record cleared", |e| {
        let s = e.sim.get("/secrets", NS, "captf-inputs-gone-tc")?;
        s.pointer("/metadata/annotations/captf.io~1interrupted-apply")
            .is_none()
            .then_some(())
    })
    .await?;
    env.until_reason("gone", "ApplyJobSucceeded", "ApplySucceeded").await?;
    Ok(())
}

/// Cluster API mirrors `Ready` into the Cluster's `InfrastructureReady`, which a MachineHealthCheck
/// needs True before it judges any Machine: a provisioned cluster whose next change waits for a
/// person stays Ready, and `UpToDate` says what holds the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioned_object_stays_ready_while_its_destructive_change_awaits_approval() -> Result<()> {
    let env = Env::new().await?;
    let k = Kind::TerraformCluster;
    let m = || JobMatch::object(k, NS, "steady").op(Op::Apply);
    let s = PlanSummary {
        add: 0,
        change: 0,
        destroy: 1,
        replace: 0,
    };
    // With outputs, so no refresh follows the first apply.
    env.sim.script(m(), RunnerScript::succeed_with_outputs(outputs()));
    env.sim.script(m(), RunnerScript::blocked("hash-9", s));
    env.sim.script(m(), RunnerScript::succeed_with_outputs(outputs()));
    let j1 = env.create_cluster("steady", json!({})).await?;
    env.run_until_booked(&j1, "succeeded").await?;
    env.until_ready("steady").await?;
    env.merge_patch::<TerraformCluster>("steady", json!({"spec": {"variables": {"region": "eu-west-2"}}}))
        .await?;
    let j2 = env.job(k, "steady", Op::Apply, 2).await?;
    env.run_until_booked(&j2, "blocked").await?;
    let c = env.until_next_action("steady", "AwaitingApproval").await?;
    let (ready, reason, message) = condition(&c, "Ready").unwrap();
    assert_eq!((ready.as_str(), reason.as_str()), ("True", "Ready"), "{message}");
    assert!(
        message.starts_with("provisioned; not up to date: AwaitingApproval"),
        "{message}"
    );
    let (up, up_reason, _) = condition(&c, "UpToDate").unwrap();
    assert_eq!((up.as_str(), up_reason.as_str()), ("False", "AwaitingApproval"));
    assert_eq!(c.pointer("/status/initialization/provisioned"), Some(&json!(true)));
    // Approved and applied: up to date again, and Ready never left True.
    env.merge_patch::<TerraformCluster>(
        "steady",
        json!({"metadata": {"annotations": {"captf.io/approve-plan": "hash-9"}}}),
    )
    .await?;
    let j3 = env.job(k, "steady", Op::Apply, 3).await?;
    env.run_until_booked(&j3, "succeeded").await?;
    let c = env.until_reason("steady", "UpToDate", "Ready").await?;
    let ready = c["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["message"], "");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destructive_plan_blocked_then_approved_then_plan_changed_then_approved_again() -> Result<()> {
    let env = Env::new().await?;
    let k = Kind::TerraformCluster;
    let s = PlanSummary {
        add: 0,
        change: 1,
        destroy: 1,
        replace: 0,
    };
    let m = || JobMatch::object(k, NS, "guarded").op(Op::Apply);
    env.sim.script(m(), RunnerScript::blocked("hash-1", s));
    env.sim.script(m(), RunnerScript::plan_changed("hash-2", s));
    env.sim.script(m(), RunnerScript::succeed());
    let j1 = env.create_cluster("guarded", json!({})).await?;
    env.run_until_booked(&j1, "blocked").await?;
    let c = env.until_next_action("guarded", "AwaitingApproval").await?;
    assert_eq!(c.pointer("/status/pendingPlan/hash"), Some(&json!("hash-1")));
    assert_eq!(condition(&c, "ApplyJobSucceeded").unwrap().1, "DestructivePlanBlocked");
    assert_eq!(env.events("DestructivePlanBlocked").len(), 1);
    env.advance(3600);
    env.until_idle().await?;
    assert_eq!(env.job_names(k, "guarded").len(), 1, "waits for a person, not a timer");

    let approve = |h: &str| json!({"metadata": {"annotations": {"captf.io/approve-plan": h}}});
    env.merge_patch::<TerraformCluster>("guarded", approve("hash-1"))
        .await?;
    let j2 = env.job(k, "guarded", Op::Apply, 2).await?;
    assert_eq!(annotations(&j2)["captf.io/approved-plan"], "hash-1");
    env.run_until_booked(&j2, "plan-changed").await?;
    env.until_next_action("guarded", "PlanChanged").await?;
    // The approval did what it could: the controller removes it.
    let approval = |c: &Value| c.pointer("/metadata/annotations/captf.io~1approve-plan").cloned();
    env.until_cluster("guarded", "the used approval removed", |c| approval(c).is_none())
        .await?;
    env.merge_patch::<TerraformCluster>("guarded", approve("hash-2"))
        .await?;
    let j3 = env.job(k, "guarded", Op::Apply, 3).await?;
    assert_eq!(annotations(&j3)["captf.io/approved-plan"], "hash-2");
    env.run_until_booked(&j3, "succeeded").await?;
    let c = env.until_ready("guarded").await?;
    assert!(c.pointer("/status/pendingPlan").is_none_or(Value::is_null));
    env.until_cluster("guarded", "the used approval removed", |c| approval(c).is_none())
        .await?;
    let c = env.cluster("guarded");
    assert_eq!(apply_failures(&c), json!(0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_runs_destroy_then_removes_the_finalizer() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    let k = Kind::TerraformCluster;
    env.create_applied_cluster("bye").await?;
    env.until_ready("bye").await?;
    env.delete::<TerraformCluster>("bye").await?;
    let d = env.job(k, "bye", Op::Destroy, 2).await?;
    assert!(
        env.object(TC, "bye").is_some(),
        "held by the finalizer while destroying"
    );
    assert_eq!(annotations(&d)["captf.io/reason"], "Deleting");
    env.advance(30);
    // Booking the destroy removes the finalizer; the object and its Jobs then go.
    env.until("object gone", |e| e.object(TC, "bye").is_none().then_some(()))
        .await?;
    // One Event per booked Job, success included.
    assert_eq!(env.events("Applied").len(), 1);
    assert_eq!(env.events("Destroyed").len(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_deletion_is_held_while_a_machine_pool_exists() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    let k = Kind::TerraformCluster;
    env.create_applied_cluster("held").await?;
    let mut pool = cluster_json("held-pool", json!({}));
    pool["kind"] = json!("TerraformMachinePool");
    pool["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "held"});
    pool["metadata"]["ownerReferences"] = owned_by_cluster(&env, "held");
    let p1 = env.create(Kind::TerraformMachinePool, pool).await?;
    env.run_until_booked(&p1, "succeeded").await?;
    env.delete::<TerraformCluster>("held").await?;
    let c = env.until_reason("held", "Ready", "DeletionHeld").await?;
    assert!(
        condition(&c, "Ready")
            .unwrap()
            .2
            .contains("TerraformMachinePool/held-pool")
    );
    assert!(
        env.events("UnverifiedMember").is_empty(),
        "a verified member is no unverified one"
    );
    env.advance(120);
    env.until_idle().await?;
    assert!(
        !env.job_names(k, "held").iter().any(|n| n.contains("-destroy-")),
        "no destroy while members exist"
    );
    env.delete::<TerraformMachinePool>("held-pool").await?;
    let pd = env.job(Kind::TerraformMachinePool, "held-pool", Op::Destroy, 2).await?;
    assert!(pd.metadata.name.is_some());
    env.advance(30);
    env.until("pool gone", |e| e.object(TMP, "held-pool").is_none().then_some(()))
        .await?;
    env.advance(30);
    let _ = env.job(k, "held", Op::Destroy, 2).await?;
    Ok(())
}

/// A co-tenant's pool labelled with another team's cluster name, owned neither by that
/// TerraformCluster nor by a Cluster API MachinePool of the cluster, does not hold the
/// cluster's deletion: the label alone is a claim anyone in the namespace can make. The
/// controller says so where people look: one Warning Event `UnverifiedMember` on the cluster and
/// one on the pool, however many passes the deletion takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_that_only_carries_the_clusters_label_does_not_hold_its_deletion() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    let k = Kind::TerraformCluster;
    env.create_applied_cluster("victim").await?;
    let mut pool = cluster_json("squatter", json!({}));
    pool["kind"] = json!("TerraformMachinePool");
    pool["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "victim"});
    let p1 = env.create(Kind::TerraformMachinePool, pool).await?;
    env.run_until_booked(&p1, "succeeded").await?;
    env.delete::<TerraformCluster>("victim").await?;
    let d = env.job(k, "victim", Op::Destroy, 2).await?;
    assert_eq!(annotations(&d)["captf.io/reason"], "Deleting");
    env.advance(30);
    env.until("the cluster gone", |e| e.object(TC, "victim").is_none().then_some(()))
        .await?;
    assert!(env.object(TMP, "squatter").is_some(), "the squatter is left alone");
    let warnings = env.events("UnverifiedMember");
    let about = |kind: &str, name: &str| {
        warnings
            .iter()
            .filter(|e| {
                e.pointer("/regarding/kind") == Some(&json!(kind)) && e.pointer("/regarding/name") == Some(&json!(name))
            })
            .collect::<Vec<_>>()
    };
    for (kind, name) in [("TerraformCluster", "victim"), ("TerraformMachinePool", "squatter")] {
        let on = about(kind, name);
        assert_eq!(on.len(), 1, "one Warning on {kind}/{name}: {warnings:#?}");
        assert_eq!(on[0]["type"], json!("Warning"));
        let note = on[0]["note"].as_str().unwrap_or_default();
        assert!(
            note.contains("TerraformMachinePool default/squatter")
                && note.contains("does not hold the deletion of TerraformCluster default/victim"),
            "{note}"
        );
    }
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    env.no_denials()?;
    Ok(())
}

/// A TerraformMachine controlled by a Cluster API Machine of the cluster (as Cluster API makes
/// it) holds its TerraformCluster's deletion; the cluster is destroyed once the machine is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_of_a_cluster_api_machine_of_the_cluster_holds_its_deletion() -> Result<()> {
    let (_crds, env) = env_with_capi_machines().await?;
    env.sim
        .set_default_script(RunnerScript::realistic_with_outputs(outputs()));
    let mut tc = cluster_json("c1", json!({}));
    tc["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "c1"});
    let j = env.create(Kind::TerraformCluster, tc).await?;
    env.run_until_booked(&j, "succeeded").await?;
    let m = env
        .create(
            Kind::TerraformMachine,
            machine_with_terraform_machine(&env.sim, "m1", "c1")?,
        )
        .await?;
    env.run_until_booked(&m, "succeeded").await?;
    env.delete::<TerraformCluster>("c1").await?;
    let c = env.until_reason("c1", "Ready", "DeletionHeld").await?;
    assert!(condition(&c, "Ready").unwrap().2.contains("TerraformMachine/m1"), "{c}");
    env.delete::<captf_shared::types::TerraformMachine>("m1").await?;
    env.job(Kind::TerraformMachine, "m1", Op::Destroy, 2).await?;
    // A destroy booked as succeeded removes the finalizer and the machine's Jobs are collected
    // with it, often before a test could read the booking: wait for the machine to be gone.
    env.advance(30);
    const TM: &str = "infrastructure.cluster.x-k8s.io/terraformmachines";
    env.until("the machine gone", |e| e.object(TM, "m1").is_none().then_some(()))
        .await?;
    env.advance(30);
    env.job(Kind::TerraformCluster, "c1", Op::Destroy, 2).await?;
    env.no_denials()?;
    Ok(())
}

/// A cluster's start that claimed its run lease and the cluster lease and then died before its
/// Job existed leaves a claim the pool would count as a cluster Job starting. Once the cluster
/// decides to wait instead (here: deleted, it waits for its pool to go), it gives the claim up,
/// so the pool's destroy is not held off by a Job that will never exist, and both deletions end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_for_a_job_never_created_is_given_up_when_its_object_waits() -> Result<()> {
    use captf_controller::runtime::leases::{self, Take};
    use captf_shared::names;
    let mut env = Env::with_realistic_runners().await?;
    let k = Kind::TerraformCluster;
    env.create_applied_cluster("stale").await?;
    let mut pool = cluster_json("stale-pool", json!({}));
    pool["kind"] = json!("TerraformMachinePool");
    pool["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": "stale"});
    pool["metadata"]["ownerReferences"] = owned_by_cluster(&env, "stale");
    let p1 = env.create(Kind::TerraformMachinePool, pool).await?;
    env.run_until_booked(&p1, "succeeded").await?;
    env.until_idle().await?;
    // A pass of the cluster's apply 2 took both leases, then its leader died before the create.
    let client = env.controller_client()?;
    let never = names::job_name(k, NS, "stale", Op::Apply, 2);
    let run = names::run_lease_name(&names::suffix(k, NS, "stale"));
    let cl = names::cluster_lease_name(NS, "stale");
    let now = env.now();
    assert_eq!(
        leases::take(&client, NS, &run, &never, None, None, "captf-controller-leader", now).await?,
        Take::Taken
    );
    assert_eq!(
        leases::take_cluster(
            &client,
            &ident(&env, k, "stale")?,
            "stale",
            &cl,
            &never,
            &run,
            None,
            true,
            now
        )
        .await?,
        Take::Taken
    );
    // The controller that takes over is a new process: it knows nothing of its predecessor's
    // claims and reads them.
    env.handle.take().unwrap().abort();
    env.start_controller().await?;
    env.delete::<TerraformCluster>("stale").await?;
    env.until_reason("stale", "Ready", "DeletionHeld").await?;
    env.delete::<TerraformMachinePool>("stale-pool").await?;
    // Booking a destroy removes the finalizer, and the object and its Jobs go at once.
    env.job(Kind::TerraformMachinePool, "stale-pool", Op::Destroy, 2)
        .await?;
    env.advance(30);
    env.until("pool gone", |e| e.object(TMP, "stale-pool").is_none().then_some(()))
        .await?;
    env.advance(30);
    env.job(k, "stale", Op::Destroy, 2).await?;
    env.advance(30);
    env.until("cluster gone", |e| e.object(TC, "stale").is_none().then_some(()))
        .await?;
    Ok(())
}

/// Booking releases the run lease with a write that can fail after the booking is accounted (a
/// 409 here); no later pass releases it again, and the finished Job stays in the history. A
/// finished holder counts as over, so the next change still starts its apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_lease_left_naming_a_finished_job_does_not_hold_off_the_next_start() -> Result<()> {
    use captf_shared::names;
    let env = Env::with_realistic_runners().await?;
    let k = Kind::TerraformCluster;
    let run = names::run_lease_name(&names::suffix(k, NS, "kept"));
    let j1 = env.create_cluster("kept", json!({})).await?;
    env.sim
        .faults()
        .inject(FaultRule::new(Verb::Update, "leases", 409, 1).named(&run));
    env.run_until_booked(&j1, "succeeded").await?;
    env.until_ready("kept").await?;
    assert_eq!(env.lease_holder(&run)?, json!(job_name(&j1)), "the release was lost");
    env.merge_patch::<TerraformCluster>("kept", json!({"spec": {"variables": {"size": "large"}}}))
        .await?;
    let j2 = env.job(k, "kept", Op::Apply, 2).await?;
    assert_eq!(env.lease_holder(&run)?, json!(job_name(&j2)));
    env.run_until_booked(&j2, "succeeded").await?;
    env.until_ready("kept").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_restarted_mid_job_starts_no_second_job() -> Result<()> {
    let mut env = Env::with_realistic_runners().await?;
    let k = Kind::TerraformCluster;
    let j1 = env.create_cluster("restart", json!({})).await?;
    env.handle.take().unwrap().abort();
    env.start_controller().await?;
    env.until_idle().await?;
    assert_eq!(env.job_names(k, "restart").len(), 1);
    env.run_until_booked(&j1, "succeeded").await?;
    env.until_ready("restart").await?;
    assert_eq!(env.job_names(k, "restart").len(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_500s_and_dropped_watches_lose_nothing() -> Result<()> {
    let env = Env::new().await?;
    let k = Kind::TerraformCluster;
    env.sim.set_default_script(RunnerScript::fail("boom"));
    env.sim.faults().inject(FaultRule::new(Verb::Create, "jobs", 500, 2));
    env.sim.faults().inject(FaultRule::new(Verb::Patch, "jobs", 500, 2));
    env.sim
        .faults()
        .inject(FaultRule::new(Verb::Patch, "terraformclusters", 500, 1));
    let j1 = env.create_cluster("faulty", json!({})).await?;
    env.sim.faults().drop_watches();
    env.run_until_booked(&j1, "failed").await?;
    env.sim.faults().drop_watches();
    env.until_field("faulty", "/status/consecutiveFailures/apply", json!(1))
        .await?;
    assert_eq!(env.events("JobFailed").len(), 1, "booked exactly once");
    assert!(env.metrics().contains("outcome=\"failed\"} 1"));
    env.advance(60);
    let _ = env.job(k, "faulty", Op::Apply, 2).await?;
    env.until_idle().await?;
    assert_eq!(env.job_names(k, "faulty").len(), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pass_is_reported_as_reconciled_false_and_the_next_good_pass_clears_it() -> Result<()> {
    let env = Env::new().await?;
    // Creating the Job fails twice: each of those passes fails at the same call.
    env.sim.faults().inject(FaultRule::new(Verb::Create, "jobs", 500, 2));
    env.sim.put(cluster_json("failing", json!({})))?;
    let c = env.until_reason("failing", "Reconciled", "ReconcileError").await?;
    let (status, _, message) = condition(&c, "Reconciled").unwrap_or_default();
    assert_eq!(status, "False");
    assert!(message.starts_with("CreateJob: "), "{message}");
    assert!(message.contains("injected fault"), "{message}");
    assert_eq!(
        c.pointer("/status/nextAction/reason"),
        None,
        "a failed pass writes only what it knows"
    );
    // The faults run out: the Job is created and the condition says the pass got through.
    let _ = env.job(Kind::TerraformCluster, "failing", Op::Apply, 1).await?;
    let c = env.until_reason("failing", "Reconciled", "ReconcileSucceeded").await?;
    assert_eq!(condition(&c, "Reconciled").map(|(s, _, _)| s), Some("True".into()));
    Ok(())
}

fn drift_cluster(name: &str, extra: Value) -> Value {
    let mut c = cluster_json(name, extra);
    c["spec"]["drift"] = json!({"interval": "5m", "remediation": "Auto"});
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_drift_check_never_delays_an_apply() -> Result<()> {
    let env = Env::new().await?;
    let k = Kind::TerraformCluster;
    let m = |op| JobMatch::object(k, NS, "drifty").op(op);
    env.sim
        .script(m(Op::Apply), RunnerScript::succeed_with_outputs(outputs()));
    env.sim.script(
        m(Op::Drift),
        RunnerScript::fail_in(captf_shared::protocol::Phase::Drift, "plan failed"),
    );
    env.sim
        .script(m(Op::Apply), RunnerScript::succeed_with_outputs(outputs()));
    let a1 = env.create(k, drift_cluster("drifty", json!({}))).await?;
    env.run_until_booked(&a1, "succeeded").await?;
    let d2 = env.job(k, "drifty", Op::Drift, 2).await?;
    env.run_until_booked(&d2, "failed").await?;
    env.until_next_action("drifty", "DriftCheckDueBackoff").await?;
    // New inputs: the apply starts at once, the drift failure does not count for it.
    let change = json!({"spec": {"variables": {"region": "eu-central-1"}}});
    env.merge_patch::<TerraformCluster>("drifty", change).await?;
    let a3 = env.job(k, "drifty", Op::Apply, 3).await?;
    assert_eq!(ts(&a3), env.now(), "no delay from the failed drift check");
    assert_eq!(labels(&a3)["captf.io/attempt"], "1");
    assert_eq!(annotations(&a3)["captf.io/reason"], "InputsChanged");
    let c = env.cluster("drifty");
    assert_eq!(c.pointer("/status/consecutiveFailures/drift"), Some(&json!(1)));
    assert_eq!(c.pointer("/status/consecutiveFailures/apply"), Some(&json!(0)));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_found_is_remediated_up_to_the_cap_and_a_successful_check_resets_it() -> Result<()> {
    let env = Env::new().await?;
    let k = Kind::TerraformCluster;
    let m = |op| JobMatch::object(k, NS, "remedy").op(op);
    env.sim
        .script(m(Op::Apply), RunnerScript::succeed_with_outputs(outputs()));
    env.sim.script(m(Op::Apply), RunnerScript::fail("apply failed"));
    env.sim.script(m(Op::Apply), RunnerScript::fail("apply failed again"));
    env.sim
        .script(m(Op::Apply), RunnerScript::succeed_with_outputs(outputs()));
    env.sim.script(m(Op::Drift), RunnerScript::drift(true));
    env.sim.script(m(Op::Drift), RunnerScript::drift(true));
    let t0 = env.now();
    let remedy = drift_cluster("remedy", json!({"jobs": {"failedJobsHistoryLimit": 2}}));
    let a1 = env.create(k, remedy).await?;
    env.run_until_booked(&a1, "succeeded").await?;
    let d2 = env.job(k, "remedy", Op::Drift, 2).await?;
    env.run_until_booked(&d2, "succeeded").await?;
    let a3 = env.job(k, "remedy", Op::Apply, 3).await?;
    let ann = annotations(&a3);
    assert_eq!(ann["captf.io/reason"], "DriftRemediation");
    assert_eq!(ann["captf.io/drift-remediation"], "true");
    env.until_reason("remedy", "DriftDetected", "DriftFound").await?;
    env.run_until_booked(&a3, "failed").await?;
    env.advance(60);
    let a4 = env.job(k, "remedy", Op::Apply, 4).await?;
    assert_eq!(annotations(&a4)["captf.io/reason"], "DriftRemediation");
    env.run_until_booked(&a4, "failed").await?;
    // Two failed remediations = the limit (failedJobsHistoryLimit 2): wait, drift stays found.
    let c = env.until_next_action("remedy", "RemediationLimit").await?;
    assert_eq!(condition(&c, "DriftDetected").unwrap().0, "True");
    // The next drift check is due 5m after the last successful one (t0+60s).
    env.sim.advance_to(t0 + jiff::SignedDuration::from_secs(60 + 300 - 1));
    env.until_idle().await?;
    assert_eq!(env.job_names(k, "remedy").len(), 4, "no remediation at the cap");
    env.sim.advance_to(t0 + jiff::SignedDuration::from_secs(60 + 300));
    let d5 = env.job(k, "remedy", Op::Drift, 5).await?;
    env.run_until_booked(&d5, "succeeded").await?;
    // The successful check reset the count: remediation is allowed again, after the apply
    // backoff (2 failures ≥ limit 2: 10m from the last failure).
    let c = env.until_next_action("remedy", "DriftRemediationBackoff").await?;
    let nb: Timestamp = c
        .pointer("/status/nextAction/notBefore")
        .and_then(Value::as_str)
        .unwrap()
        .parse()?;
    env.sim.advance_to(nb);
    let a6 = env.job(k, "remedy", Op::Apply, 6).await?;
    assert_eq!(annotations(&a6)["captf.io/drift-remediation"], "true");
    assert_eq!(env.events("DriftFound").len(), 2, "one per check that found drift");
    assert_eq!(env.events("Applied").len(), 1);
    assert_eq!(env.events("DriftRemediated").len(), 0, "both remediations failed");
    Ok(())
}

/// Cluster API providers wait for a machine's bootstrap data; CAPTF waits for its Secret too
/// (`InputsUnresolved`, looked at again 30 s later), then passes it to the module by value,
/// sensitive, with its format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terraform_machine_waits_for_its_bootstrap_data_then_its_module_gets_it_by_value() -> Result<()> {
    let (_crds, env) = env_with_capi_machines().await?;
    let k = Kind::TerraformMachine;
    let tm = machine_with_terraform_machine(&env.sim, "m2", "c1")?;
    // The bootstrap provider has not written the Secret yet.
    env.delete::<k8s_openapi::api::core::v1::Secret>("m2-bootstrap").await?;
    env.sim.put(tm)?;
    const TM: &str = "infrastructure.cluster.x-k8s.io/terraformmachines";
    let waiting = env
        .until("the machine waiting for its bootstrap data", |e| {
            let o = e.object(TM, "m2")?;
            (o.pointer("/status/nextAction/reason")? == "InputsUnresolved").then_some(o)
        })
        .await?;
    let (_, reason, message) = condition(&waiting, "Ready").expect("a Ready condition");
    assert_eq!(reason, "InputsUnresolved");
    assert_eq!(
        message,
        "the inputs cannot be resolved: bootstrap_data: Secret m2-bootstrap does not exist (yet)"
    );
    env.until_idle().await?;
    assert!(env.job_names(k, "m2").is_empty(), "no Job without the bootstrap data");
    // Written: the next look, 30 s later, applies with the data.
    env.sim.put(bootstrap_secret_json("m2")?)?;
    env.advance(30);
    let job = env.job(k, "m2", Op::Apply, 1).await?;
    let inputs = inputs_json(&env, "captf-inputs-m2-tm")?;
    assert_eq!(inputs["variables"]["bootstrap_data_secret"], "m2-bootstrap");
    assert_eq!(inputs["variables"]["bootstrap_data"], bootstrap_value("m2"));
    assert_eq!(inputs["variables"]["bootstrap_format"], "cloud-config");
    // The runner masks it: the Job names it (and only it) as sensitive.
    assert_eq!(
        job_env(&job, captf_shared::protocol::env::SENSITIVE_VARIABLES).as_deref(),
        Some("bootstrap_data")
    );
    Ok(())
}

/// Cluster API deletes a Machine's bootstrap config, and with it the bootstrap data Secret, beside
/// its infrastructure: the destroy does not wait for the Secret, it runs with the inputs the
/// inputs Secret holds (the bootstrap data of the last apply).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_terraform_machine_is_destroyed_when_its_bootstrap_data_is_gone() -> Result<()> {
    let (_crds, env) = env_with_capi_machines().await?;
    let k = Kind::TerraformMachine;
    let tm = machine_with_terraform_machine(&env.sim, "m3", "c1")?;
    let apply = env.create(k, tm).await?;
    env.run_until_booked(&apply, "succeeded").await?;
    env.delete::<k8s_openapi::api::core::v1::Secret>("m3-bootstrap").await?;
    env.delete::<captf_shared::types::TerraformMachine>("m3").await?;
    // The apply gave no outputs, so a refresh is due after it: Job 2 is that refresh when its
    // last look came before the deletion, and the destroy follows (Job 3); when the deletion came
    // first, Job 2 is the destroy. Either way the destroy runs without the bootstrap Secret.
    let second = env
        .until("Job 2 of the machine", |e| {
            [Op::Refresh, Op::Destroy].into_iter().find_map(|op| {
                let want = names::job_name(k, NS, "m3", op, 2);
                e.jobs_of(k, "m3")
                    .into_iter()
                    .find(|j| j.metadata.name.as_deref() == Some(&want))
                    .map(|j| (op, j))
            })
        })
        .await?;
    if let (Op::Refresh, refresh) = second {
        env.run_until_booked(&refresh, "succeeded").await?;
        env.job(k, "m3", Op::Destroy, 3).await?;
    }
    // Its success removes the finalizer, and the object goes (with its Jobs, so their booking is
    // not waited for: the collector may take the Job first).
    env.advance(30);
    env.until("the TerraformMachine gone", |e| {
        e.object("infrastructure.cluster.x-k8s.io/terraformmachines", "m3")
            .is_none()
            .then_some(())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terraform_machines_deleted_apply_job_records_nothing() -> Result<()> {
    let (_crds, env) = env_with_capi_machines().await?;
    let k = Kind::TerraformMachine;
    let tm = machine_with_terraform_machine(&env.sim, "m1", "c1")?;
    env.sim
        .script(JobMatch::object(k, NS, "m1").op(Op::Apply), RunnerScript::hang());
    let j1 = env.create(k, tm).await?;
    let name = j1.metadata.name.clone().unwrap();
    let inputs = inputs_json(&env, "captf-inputs-m1-tm")?;
    assert_eq!(inputs["variables"]["bootstrap_data_secret"], "m1-bootstrap");
    assert_eq!(inputs["variables"]["cluster_name"], "c1");
    assert_eq!(inputs["variables"]["bootstrap_data"], bootstrap_value("m1"));
    const TM: &str = "infrastructure.cluster.x-k8s.io/terraformmachines";
    env.until("activeJob", |e| {
        (e.object(TM, "m1")?.pointer("/status/activeJob")? == &json!(name.clone())).then_some(())
    })
    .await?;
    env.delete::<Job>(&name).await?;
    let j2 = env.job(k, "m1", Op::Apply, 2).await?;
    assert_eq!(annotations(&j2)["captf.io/reason"], "InputsChanged");
    let secret = env.sim.get("/secrets", NS, "captf-inputs-m1-tm").unwrap();
    assert!(
        secret
            .pointer("/metadata/annotations/captf.io~1interrupted-apply")
            .is_none()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_and_a_standby_takes_over_when_the_lease_lapses() -> Result<()> {
    let sim = Sim::builder().start_time(T0.parse()?).start().await?;
    sim.create_namespace(NS);
    sim.load_rbac(CHART_RBAC)?;
    let env = Env { sim, handle: None };
    let start = |who: &str| {
        let mut a = args();
        a.leader_elect = true;
        a.leader_namespace = Some(NS.into());
        a.leader_lease_seconds = 2;
        a.leader_identity = Some(who.into());
        let clock = Arc::new(WatchClock::new(env.sim.clock_watch()));
        let client = env.controller_client();
        async move { Ok::<_, anyhow::Error>(runtime::start(client?, &a, clock).await?) }
    };
    let a = start("replica-a").await?;
    env.until("replica-a leads", |e| {
        let l = e.sim.get("coordination.k8s.io/leases", NS, "captf-controller-leader")?;
        (l.pointer("/spec/holderIdentity")? == "replica-a").then_some(())
    })
    .await?;
    let b = start("replica-b").await?;
    let k = Kind::TerraformCluster;
    let j1 = env.create_cluster("led", json!({})).await?;
    env.until_idle().await?;
    assert_eq!(env.job_names(k, "led").len(), 1, "one writer, one Job");
    // The leader crashes without releasing the lease; the standby takes over after it lapses.
    a.abort();
    env.until("replica-b leads", |e| {
        let l = e.sim.get("coordination.k8s.io/leases", NS, "captf-controller-leader")?;
        (l.pointer("/spec/holderIdentity")? == "replica-b").then_some(())
    })
    .await?;
    env.run_until_booked(&j1, "succeeded").await?;
    b.shutdown().await;
    Ok(())
}

/// A replica that becomes the leader again looks at every object at once: what it decided in
/// its earlier term, or saw as a standby, may be stale, and nothing else would wake an object
/// that is waiting for a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_becomes_the_leader_again_looks_at_every_object() -> Result<()> {
    let sim = Sim::builder().start_time(T0.parse()?).start().await?;
    sim.create_namespace(NS);
    sim.load_rbac(CHART_RBAC)?;
    let mut a = args();
    a.leader_elect = true;
    a.leader_namespace = Some(NS.into());
    a.leader_lease_seconds = 2;
    a.leader_identity = Some("replica-a".into());
    let clock = Arc::new(WatchClock::new(sim.clock_watch()));
    let mut env = Env { sim, handle: None };
    env.handle = Some(runtime::start(env.controller_client()?, &a, clock).await?);
    let metric = |e: &Env, name: &str| -> Option<f64> {
        e.metrics()
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    env.until("replica-a leads", |e| {
        (metric(e, "captf_leader ")? == 1.0).then_some(())
    })
    .await?;
    let k = Kind::TerraformCluster;
    let m = |op| JobMatch::object(k, NS, "again").op(op);
    env.sim
        .script(m(Op::Apply), RunnerScript::succeed_with_outputs(outputs()));
    let a1 = env.create(k, drift_cluster("again", json!({}))).await?;
    env.run_until_booked(&a1, "succeeded").await?;
    let d2 = env.job(k, "again", Op::Drift, 2).await?;
    env.run_until_booked(&d2, "succeeded").await?;
    env.until_next_action("again", "Idle").await?;
    env.until_idle().await?;
    let passes = |e: &Env| metric(e, "captf_reconcile_duration_seconds_count{kind=\"TerraformCluster\"}");
    // Somebody else holds the leader Lease for an hour: replica-a stands by.
    let lease = |holder: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "captf-controller-leader", "namespace": NS},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 3600,
                        "renewTime": Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()}})
    };
    env.sim.put(lease("intruder"))?;
    env.until("replica-a stands by", |e| {
        (metric(e, "captf_leader ")? == 0.0).then_some(())
    })
    .await?;
    env.until_idle().await?;
    let before = passes(&env).unwrap_or(0.0);
    // It lets go: replica-a leads again and looks at its object, which nothing else wakes.
    env.sim.put(lease(""))?;
    env.until("replica-a leads again", |e| {
        (metric(e, "captf_leader ")? == 1.0).then_some(())
    })
    .await?;
    env.until("a pass over the object in the new term", |e| {
        (passes(e)? > before).then_some(())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_too_large_for_the_result_are_read_from_the_outputs_secret() -> Result<()> {
    use captf_shared::protocol::{Phase, RunResult, RunnerResult};
    let env = Env::new().await?;
    let k = Kind::TerraformCluster;
    let mut r = RunnerResult::new(RunResult::Succeeded, Phase::Apply, "");
    r.outputs_in_secret = true;
    env.sim
        .script(JobMatch::object(k, NS, "big").op(Op::Apply), RunnerScript::result(r));
    let doc = json!({
        "control_plane_endpoint": {"sensitive": false, "value": {"host": "api.big", "port": 443}},
        "admin_token": {"sensitive": true, "value": "do-not-copy"},
    });
    let j1 = env.create_cluster("big", json!({})).await?;
    // What the runner does: the document into the outputs Secret the controller made (and owns).
    let mut outputs = env
        .sim
        .get("/secrets", NS, "captf-outputs-big-tc")
        .expect("made before the Job");
    outputs["data"] = secret_json("x", "outputs.json", &serde_json::to_vec(&doc)?)?["data"].clone();
    env.sim.put(outputs)?;
    env.run_until_booked(&j1, "succeeded").await?;
    let c = env
        .until_cluster("big", "endpoint from the outputs Secret", |c| {
            c.pointer("/spec/controlPlaneEndpoint/host").is_some()
        })
        .await?;
    assert_eq!(
        c.pointer("/spec/controlPlaneEndpoint"),
        Some(&json!({"host": "api.big", "port": 443}))
    );
    let c = env
        .until_cluster("big", "status.outputs", |c| c.pointer("/status/outputs").is_some())
        .await?;
    assert!(
        c.pointer("/status/outputs/admin_token").is_none(),
        "sensitive outputs stay in the Secret"
    );
    Ok(())
}

/// The whole lifecycle (inputs from a Secret and a ConfigMap, apply, Ready, delete, destroy,
/// finalizer removed) under the chart's controller ServiceAccount: every call it makes is one
/// the chart's RBAC allows (`Env::until` fails on the first 403).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_under_chart_rbac_runs_the_lifecycle() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    env.sim
        .put(secret_json("creds", "vars.json", br#"{"token": "s3cr3t"}"#)?)?;
    env.sim.put(json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "sizes", "namespace": NS},
                       "data": {"vars.json": "{\"size\": \"small\"}"}}))?;
    let k = Kind::TerraformCluster;
    let j1 = env
        .create_cluster(
            "ruled",
            json!({"variablesFrom": [{"secretRef": {"name": "creds", "key": "vars.json"}},
                                      {"configMapRef": {"name": "sizes", "key": "vars.json"}}]}),
        )
        .await?;
    env.run_until_booked(&j1, "succeeded").await?;
    env.until_ready("ruled").await?;
    env.delete::<TerraformCluster>("ruled").await?;
    env.job(k, "ruled", Op::Destroy, 2).await?;
    env.advance(30);
    env.until("object gone", |e| e.object(TC, "ruled").is_none().then_some(()))
        .await?;
    env.no_denials()?;
    let used = env.sim.used_rights(CONTROLLER_SA.0, CONTROLLER_SA.1);
    for right in [
        "create batch/jobs",
        "watch batch/jobs",
        "create /secrets",
        "create events.k8s.io/events",
        "watch infrastructure.cluster.x-k8s.io/terraformclusters",
    ] {
        assert!(
            used.contains(right),
            "the controller ran under its token: {right} in {used:?}"
        );
    }
    eprintln!("rights used: {used:#?}");
    Ok(())
}

/// Before an object's first Job the controller, under the chart's RBAC (which Kubernetes lets
/// write a Role only with rights it holds), makes the object's own runner ServiceAccount, Role
/// and RoleBinding, and its empty state Secret, free lock Lease and empty outputs Secret; the
/// Job runs as that account. A second object gets its own, and a spec naming the first one's
/// account is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_objects_runner_runs_as_its_own_account_made_before_its_first_job() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    let j1 = env.create_cluster("prod-eu", json!({})).await?;
    let account = "captf-runner-prod-eu-tc";
    let pod = j1.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some(account));
    for resource in [
        "/serviceaccounts",
        "rbac.authorization.k8s.io/roles",
        "rbac.authorization.k8s.io/rolebindings",
    ] {
        let o = env
            .sim
            .get(resource, NS, account)
            .unwrap_or_else(|| panic!("no {resource} {account}"));
        assert_eq!(
            o.pointer("/metadata/ownerReferences/0/name"),
            Some(&json!("prod-eu")),
            "{o}"
        );
    }
    let role = env.sim.get("rbac.authorization.k8s.io/roles", NS, account).unwrap();
    assert_eq!(
        role.pointer("/rules/0/resourceNames"),
        Some(&json!(["tfstate-default-prod-eu-tc", "captf-outputs-prod-eu-tc"]))
    );
    let state = env
        .sim
        .get("/secrets", NS, "tfstate-default-prod-eu-tc")
        .expect("state Secret made");
    assert_eq!(state.pointer("/metadata/labels/tfstate"), Some(&json!("true")));
    assert_eq!(
        state.pointer("/metadata/labels/clusterctl.cluster.x-k8s.io~1move"),
        Some(&json!(""))
    );
    assert_eq!(
        state.pointer("/metadata/ownerReferences"),
        None,
        "state is never garbage-collected"
    );
    assert!(
        env.sim
            .get("coordination.k8s.io/leases", NS, "lock-tfstate-default-prod-eu-tc")
            .is_some()
    );
    assert!(env.sim.get("/secrets", NS, "captf-outputs-prod-eu-tc").is_some());
    env.run_until_booked(&j1, "succeeded").await?;
    env.until_ready("prod-eu").await?;

    // The workload-identity annotation of the flag is on the account.
    let sa = env.sim.get("/serviceaccounts", NS, account).unwrap();
    assert_eq!(sa["metadata"]["annotations"][IRSA], "arn:aws:iam::1:role/tf");
    // A Role edited by hand is set back to exactly the runner's rules before the next Job, and
    // the account's annotation too.
    let mut widened = role.clone();
    widened["rules"][0]["verbs"] = json!(["*"]);
    env.sim.put(widened)?;
    let mut stripped = sa.clone();
    stripped["metadata"]["annotations"] = json!({});
    env.sim.put(stripped)?;
    env.merge_patch::<TerraformCluster>("prod-eu", json!({"spec": {"variables": {"size": "large"}}}))
        .await?;
    let apply2 = env.job(Kind::TerraformCluster, "prod-eu", Op::Apply, 2).await?;
    let role_again = env.sim.get("rbac.authorization.k8s.io/roles", NS, account).unwrap();
    assert_eq!(role_again["rules"], role["rules"]);
    let sa_again = env.sim.get("/serviceaccounts", NS, account).unwrap();
    assert_eq!(sa_again["metadata"]["annotations"][IRSA], "arn:aws:iam::1:role/tf");
    // Nothing edited since: the next Job creates and patches none of them again.
    env.run_until_booked(&apply2, "succeeded").await?;
    env.until_ready("prod-eu").await?;
    let before = env.sim.requests_by_kind();
    env.merge_patch::<TerraformCluster>("prod-eu", json!({"spec": {"variables": {"size": "xlarge"}}}))
        .await?;
    env.job(Kind::TerraformCluster, "prod-eu", Op::Apply, 3).await?;
    let after = env.sim.requests_by_kind();
    for write in [
        "CREATE serviceaccounts",
        "PATCH serviceaccounts",
        "CREATE roles",
        "PATCH roles",
        "CREATE rolebindings",
        "CREATE secrets",
        "CREATE leases",
    ] {
        let n = |m: &std::collections::BTreeMap<String, u64>| m.get(write).copied().unwrap_or(0);
        assert_eq!(n(&after), n(&before), "{write} again for a third Job");
    }

    let j2 = env.create_cluster("prod-us", json!({})).await?;
    let pod = j2.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("captf-runner-prod-us-tc"));
    env.sim
        .put(cluster_json("thief", json!({"jobs": {"serviceAccountName": account}})))?;
    let c = env.until_reason("thief", "Ready", "PolicyViolation").await?;
    let (_, _, message) = condition(&c, "Ready").unwrap();
    assert!(message.contains("reserved"), "{message}");
    assert!(env.job_names(Kind::TerraformCluster, "thief").is_empty());
    env.no_denials()?;
    let used = env.sim.used_rights(CONTROLLER_SA.0, CONTROLLER_SA.1);
    for right in [
        "create /serviceaccounts",
        "patch /serviceaccounts",
        "create rbac.authorization.k8s.io/roles",
        "patch rbac.authorization.k8s.io/roles",
        "create rbac.authorization.k8s.io/rolebindings",
        "create coordination.k8s.io/leases",
    ] {
        assert!(used.contains(right), "{right} in {used:?}");
    }
    Ok(())
}

/// The controller checks the tenant policy itself (the webhook can be bypassed): a spec with an
/// image outside it gets `Ready=False/PolicyViolation` naming the field, and no Job; once the
/// spec is back inside the policy the apply starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_outside_the_policy_gets_policy_violation_and_no_job() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    let k = Kind::TerraformCluster;
    env.sim.put(cluster_json(
        "rogue",
        json!({"jobs": {"image": "evil.example/miner:1"}}),
    ))?;
    let c = env.until_reason("rogue", "Ready", "PolicyViolation").await?;
    let (status, _, message) = condition(&c, "Ready").unwrap();
    assert_eq!(status, "False");
    assert!(message.contains("spec.jobs.image"), "{message}");
    assert!(message.contains("runner:test"), "names the policy: {message}");
    // The status is written after the decision in the same reconcile: no Job was created.
    assert!(env.job_names(k, "rogue").is_empty());
    env.merge_patch::<TerraformCluster>("rogue", json!({"spec": {"jobs": {"image": "runner:test"}}}))
        .await?;
    env.job(k, "rogue", Op::Apply, 1).await?;
    Ok(())
}

/// The controller refuses a spec past the JSON value limit itself (the webhook can be bypassed):
/// `Ready=False/InvalidSpec` naming the limit, and no Job; nothing is built from its variables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_past_max_spec_values_json_values_gets_invalid_spec_and_no_job() -> Result<()> {
    use captf_shared::validation::MAX_SPEC_VALUES;
    let env = Env::new().await?;
    env.sim.put(cluster_json(
        "huge",
        json!({"variables": {"x": vec![0; MAX_SPEC_VALUES]}}),
    ))?;
    let c = env.until_reason("huge", "Ready", "InvalidSpec").await?;
    let (status, _, message) = condition(&c, "Ready").unwrap();
    assert_eq!(status, "False");
    assert!(
        message.contains(&format!("spec: must hold at most {MAX_SPEC_VALUES} JSON values")),
        "{message}"
    );
    assert!(env.job_names(Kind::TerraformCluster, "huge").is_empty());
    Ok(())
}

/// Env from a Secret is refused when the policy says so (the scenarios run with
/// `allow_env_from_secrets: false`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_from_a_secret_outside_the_policy_gets_policy_violation() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    env.sim.put(cluster_json(
        "peek",
        json!({"jobs": {"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "other", "key": "k"}}}]}}),
    ))?;
    let c = env.until_reason("peek", "Ready", "PolicyViolation").await?;
    let (_, _, message) = condition(&c, "Ready").unwrap();
    assert!(message.contains("spec.jobs.env[0].valueFrom.secretKeyRef"), "{message}");
    assert!(env.job_names(Kind::TerraformCluster, "peek").is_empty());
    Ok(())
}

/// The controller copies no more than a bounded part of the runner's message into the
/// `ApplyJobSucceeded` condition and the `JobFailed` event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_message_is_copied_into_conditions_and_events_bounded() -> Result<()> {
    let env = Env::new().await?;
    let k = Kind::TerraformCluster;
    let long = format!("Error: {}", "x".repeat(3500));
    env.sim.script(
        JobMatch::object(k, NS, "loud").op(Op::Apply),
        RunnerScript::fail(&long).after(std::time::Duration::from_secs(30)),
    );
    let j1 = env.create_cluster("loud", json!({})).await?;
    env.run_until_booked(&j1, "failed").await?;
    let c = env.until_reason("loud", "ApplyJobSucceeded", "ApplyFailed").await?;
    let (_, _, message) = condition(&c, "ApplyJobSucceeded").unwrap();
    assert!(message.contains("Error: xxx"), "{message}");
    assert!(
        message.len() <= captf_shared::protocol::CONDITION_MESSAGE_LIMIT,
        "{}",
        message.len()
    );
    let events = env.events("JobFailed");
    assert!(!events.is_empty());
    for e in events {
        assert!(e["note"].as_str().unwrap_or_default().len() <= 1024);
    }
    Ok(())
}

/// The module credentials Secret is checked before any Job: missing, then without
/// `known_hosts`, the object waits with `InputsUnresolved` naming the field and no Job starts;
/// once usable, the first Job mounts it for the runner. Under the chart's RBAC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_unusable_module_credentials_secret_holds_the_object_and_starts_no_job() -> Result<()> {
    // Module credentials are a Secret the runner pod reads: the chart's default policy allows
    // that, the scenarios' restrictive one does not.
    let mut allowing = args();
    allowing.policy.allow_env_from_secrets = true;
    let env = Env::with_args(captf_sim::Sim::builder(), &allowing).await?;
    env.sim
        .set_default_script(captf_sim::RunnerScript::realistic_with_outputs(outputs()));
    let creds = json!({"credentials": {"secretRef": {"name": "git-ssh"}}});
    let mut spec = json!({"source": "git::ssh://git@git.example.com/net.git"});
    spec.as_object_mut().unwrap().extend(creds.as_object().unwrap().clone());
    env.sim.put(cluster_json("private", json!({"module": spec})))?;
    let held = |why: &'static str| {
        move |c: &Value| {
            c.pointer("/status/nextAction/reason") == Some(&json!("InputsUnresolved"))
                && condition(c, "Ready").is_some_and(|(_, _, m)| {
                    m.contains("spec.module.credentials.secretRef: Secret git-ssh") && m.contains(why)
                })
        }
    };
    env.until_cluster("private", "held: no Secret", held("does not exist"))
        .await?;
    env.until_idle().await?;
    assert!(env.jobs_of(Kind::TerraformCluster, "private").is_empty());

    env.sim.put(secret_json(
        "git-ssh",
        "ssh-privatekey",
        b"-----BEGIN OPENSSH PRIVATE KEY-----",
    )?)?;
    env.advance(30);
    env.until_cluster("private", "held: no known_hosts", held("host keys are always checked"))
        .await?;
    env.until_idle().await?;
    assert!(env.jobs_of(Kind::TerraformCluster, "private").is_empty());

    let usable = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("git-ssh".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        data: Some(
            [
                ("ssh-privatekey", "-----BEGIN OPENSSH PRIVATE KEY-----"),
                ("known_hosts", "git.example.com ssh-ed25519 AAAA"),
            ]
            .map(|(k, v)| (k.to_string(), k8s_openapi::ByteString(v.as_bytes().to_vec())))
            .into(),
        ),
        ..Default::default()
    };
    env.sim.put(serde_json::to_value(usable)?)?;
    env.advance(30);
    let job = env.job(Kind::TerraformCluster, "private", Op::Apply, 1).await?;
    let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert!(
        pod.volumes.iter().flatten().any(|v| v
            .secret
            .as_ref()
            .is_some_and(|s| s.secret_name.as_deref() == Some("git-ssh"))),
        "the Job mounts the Secret"
    );
    env.no_denials()?;
    Ok(())
}

/// A Terraform CLI configuration whose ConfigMap, or its key, is missing holds the object at
/// `Ready=False/RunnerConfigUnavailable` naming the field, and starts no Job; once it is there the
/// apply starts with it mounted. The controller reads it under the chart's RBAC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_terraform_cli_config_holds_the_object_until_it_exists() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    let k = Kind::TerraformCluster;
    env.sim.put(cluster_json(
        "mirrored",
        json!({"jobs": {"terraformCliConfig": {"name": "tf-mirror"}}}),
    ))?;
    let c = env.until_reason("mirrored", "Ready", "RunnerConfigUnavailable").await?;
    let (status, _, message) = condition(&c, "Ready").unwrap();
    assert_eq!(status, "False");
    assert!(
        message.starts_with("spec.jobs.terraformCliConfig: ConfigMap default/tf-mirror does not exist"),
        "{message}"
    );
    assert!(env.job_names(k, "mirrored").is_empty());

    let config_map = |key: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "tf-mirror", "namespace": NS},
               "data": {key: "provider_installation {\n  network_mirror {\n    url = \"https://mirror.example/\"\n  }\n}\n"}})
    };
    env.sim.put(config_map("wrong.rc"))?;
    env.advance(30);
    env.until_cluster("mirrored", "the missing key named", |c| {
        condition(c, "Ready").is_some_and(|(_, _, m)| m.contains("has no key \"terraform.rc\""))
    })
    .await?;
    assert!(env.job_names(k, "mirrored").is_empty());

    env.sim.put(config_map("terraform.rc"))?;
    env.advance(30);
    let job = env.job(k, "mirrored", Op::Apply, 1).await?;
    let pod = job.spec.unwrap().template.spec.unwrap();
    let volume = pod
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == "terraform-cli-config")
        .unwrap();
    assert_eq!(volume.config_map.unwrap().name, "tf-mirror");
    let env_vars = pod.containers[0].env.clone().unwrap();
    assert!(
        env_vars
            .iter()
            .any(|e| e.name == "TF_CLI_CONFIG_FILE" && e.value.as_deref() == Some("/captf/terraform/terraform.rc"))
    );
    Ok(())
}

/// Under a simulated clock a converged object costs nothing until its next drift check: a clock
/// step that reaches no wake reconciles nothing (not one request), and the step that reaches the
/// checks starts every one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_step_reconciles_only_the_objects_whose_wake_it_reached() -> Result<()> {
    let env = Env::new().await?;
    let k = Kind::TerraformCluster;
    let names = ["quiet-a", "quiet-b", "quiet-c"];
    for name in names {
        env.sim.script(
            JobMatch::object(k, NS, name).op(Op::Apply),
            RunnerScript::succeed_with_outputs(outputs()),
        );
        let a1 = env.create(k, drift_cluster(name, json!({}))).await?;
        env.run_until_booked(&a1, "succeeded").await?;
        let d2 = env.job(k, name, Op::Drift, 2).await?;
        env.run_until_booked(&d2, "succeeded").await?;
    }
    for name in names {
        env.until_next_action(name, "Idle").await?;
    }
    env.until_idle().await?;
    // The checks are due 5m after each one finished; 2 minutes on, nothing is due. One snapshot
    // of the count by kind holds every request (resources and every other path).
    let before = env.sim.requests_by_kind();
    env.advance(120);
    env.until_idle().await?;
    let after = env.sim.requests_by_kind();
    // Which requests came, if any: a failure says what sent them. Discovery is not the clock's
    // doing: with no Cluster API served here, the controller asks for its kinds again on wall
    // time (after 1 s, doubling to a minute), which a slow machine reaches during this step.
    let sent: Vec<String> = after
        .iter()
        .filter(|(kind, _)| kind.as_str() != "GET discovery")
        .filter_map(|(kind, &n)| {
            let was = before.get(kind).copied().unwrap_or(0);
            (n != was).then(|| format!("{kind} +{}", n - was))
        })
        .collect();
    assert!(
        sent.is_empty(),
        "a clock step that reaches no object's wake sends the API server nothing; it sent {sent:?}"
    );
    // 5 minutes on, every check is due and starts.
    env.advance(180);
    for name in names {
        env.job(k, name, Op::Drift, 3).await?;
    }
    Ok(())
}

/// Hold the create of the object's inputs Secret, which only a pass that starts the object's
/// first Job makes, so the test can change the world while that pass runs.
fn hold_the_start_of(env: &Env, name: &str) -> captf_sim::Hold {
    let suffix = captf_shared::names::suffix(Kind::TerraformCluster, NS, name);
    let inputs = captf_shared::names::inputs_secret_name(&suffix);
    env.sim
        .faults()
        .hold(FaultRule::new(Verb::Create, "secrets", 0, 1).named(&inputs))
}

/// An Env whose runners run as one shared account, so that a pass creates nothing of the
/// object's own before its Job but Secrets and Leases.
async fn env_with_a_shared_runner_account() -> Result<Env> {
    let mut a = args();
    a.policy.runner_service_account = "terraform".into();
    Env::with_args(Sim::builder(), &a).await
}

/// Every Job ever created, as (name, owner uid).
type CreatedJobs = Arc<std::sync::Mutex<Vec<(String, String)>>>;

/// Record every Job created: a Job created for an object that is gone is collected at once, so
/// only its creation shows it.
fn record_created_jobs(env: &Env) -> CreatedJobs {
    let created = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = created.clone();
    env.sim.observe(move |_, ev| {
        if ev.res == "batch/jobs" && ev.kind == captf_sim::store::EventType::Added {
            let s = |p: &str| {
                ev.object
                    .pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            if let Ok(mut c) = seen.lock() {
                c.push((s("/metadata/name"), s("/metadata/ownerReferences/0/uid")));
            }
        }
    });
    created
}

/// What another controller instance does when it has destroyed an object: its finalizer goes,
/// and the object with it.
async fn remove_for_good(env: &Env, name: &str) -> Result<()> {
    env.delete::<TerraformCluster>(name).await?;
    env.merge_patch::<TerraformCluster>(name, json!({"metadata": {"finalizers": null}}))
        .await?;
    assert!(env.object("terraformclusters", name).is_none());
    Ok(())
}

/// A cluster `name` created, and removed for good while the pass starting its first Job is held:
/// the environment, the Jobs it ever created, and the hold to release that pass with.
async fn removed_while_its_first_pass_starts(name: &str) -> Result<(Env, CreatedJobs, captf_sim::Hold)> {
    let env = env_with_a_shared_runner_account().await?;
    let created = record_created_jobs(&env);
    let hold = hold_the_start_of(&env, name);
    env.sim.put(cluster_json(name, json!({})))?;
    hold.reached().await;
    remove_for_good(&env, name).await?;
    Ok((env, created, hold))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_job_is_created_for_an_object_removed_while_its_pass_ran() -> Result<()> {
    let (env, created, hold) = removed_while_its_first_pass_starts("gone").await?;
    hold.release();
    env.until_idle().await?;
    let created = created.lock().map(|c| c.clone()).unwrap_or_default();
    assert!(
        created.is_empty(),
        "a Job was created for an object that is gone: {created:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_created_again_while_a_pass_of_the_old_one_ran_gets_its_own_job() -> Result<()> {
    let (env, created, hold) = removed_while_its_first_pass_starts("again").await?;
    env.sim.put(cluster_json("again", json!({})))?;
    let uid = env.cluster("again")["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    hold.release();
    let job = env.job(Kind::TerraformCluster, "again", Op::Apply, 1).await?;
    env.run_until_booked(&job, "succeeded").await?;
    env.until_ready("again").await?;
    let created = created.lock().map(|c| c.clone()).unwrap_or_default();
    assert!(
        created.iter().all(|(_, owner)| *owner == uid),
        "a Job of the old object was created: {created:?} (the new one is {uid})"
    );
    Ok(())
}

/// The attack: `captf.io/refresh` dated in the year 9999 is never used up (no refresh starts
/// after it), so refreshes would run back to back for ever, each a Job and a provider API round.
/// Dated later than the clock allows, the request is ignored with one Warning Event, and the
/// object stays idle; a later pass says nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_request_dated_in_the_far_future_is_ignored_with_one_event_not_run_for_ever() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    env.create_applied_cluster("later").await?;
    env.until_ready("later").await?;
    let far = "9999-01-01T00:00:00Z";
    env.merge_patch::<TerraformCluster>(
        "later",
        json!({"metadata": {"annotations": {"captf.io/refresh": far, "captf.io/reconcile-now": far}}}),
    )
    .await?;
    let ignored = captf_shared::events::reason::REQUEST_IGNORED;
    env.until("both requests ignored", |e| {
        (e.events(ignored).len() == 2).then_some(())
    })
    .await?;
    for _ in 0..3 {
        env.advance(60);
        env.until_idle().await?;
    }
    let names = env.job_names(Kind::TerraformCluster, "later");
    assert_eq!(names.len(), 1, "only the first apply ran: {names:?}");
    let events = env.events(ignored);
    assert_eq!(events.len(), 2, "said once per request: {events:?}");
    for key in ["captf.io/refresh", "captf.io/reconcile-now"] {
        let said = format!("{key}={far} is ignored");
        assert!(
            events
                .iter()
                .any(|e| e["type"] == "Warning" && e["note"].as_str().is_some_and(|n| n.contains(&said))),
            "{said}: {events:?}"
        );
    }
    Ok(())
}

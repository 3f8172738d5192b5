//! Sharding (docs/operating.md, "Sharding"): an instance serves only the objects its label
//! selector matches, each shard elects its own leader, and an object relabelled from one shard to
//! another is handed over: the new shard serves it, the old one lets it go, and no two Jobs of it
//! ever run at once.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use serde_json::{Value, json};

use captf_controller::runtime::clock::WatchClock;
use captf_controller::runtime::{self, RunArgs};
use captf_core::sharding::{SHARD_LABEL, leader_lease_name};
use captf_shared::Kind;
use captf_shared::types::TerraformCluster;
use captf_sim::Sim;
use captf_sim::store::EventType;

use crate::support::*;

fn shard_args(selector: &str, leader: bool) -> RunArgs {
    let mut a = args();
    a.watch_label_selector = selector.to_string();
    if leader {
        a.leader_elect = true;
        a.leader_namespace = Some(NS.to_string());
        a.leader_identity = Some(format!("replica-of-{selector}"));
    }
    a
}

fn labelled(name: &str, shard: Option<&str>) -> Value {
    let mut c = cluster_json(name, json!({}));
    if let Some(s) = shard {
        c["metadata"]["labels"] = json!({ SHARD_LABEL: s });
    }
    c
}

fn ready(env: &Env, name: &str) -> bool {
    condition(&env.cluster(name), "Ready").is_some_and(|(s, _, _)| s == "True")
}

/// The value of the metric line that starts with `series` (0 when there is none).
fn metric(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn applies_booked(metrics: &str) -> u64 {
    metric(
        metrics,
        "captf_jobs_finished_total{kind=\"TerraformCluster\",op=\"apply\",outcome=\"succeeded\"}",
    )
}

/// A simulator with the chart's RBAC whose runners succeed after 30 s.
async fn sim_with_runners() -> Result<Sim> {
    let sim = Sim::builder().start_time(T0.parse()?).start().await?;
    sim.create_namespace(NS);
    sim.load_rbac(CHART_RBAC)?;
    let mut script = captf_sim::RunnerScript::succeed_with_outputs(outputs());
    script.duration = std::time::Duration::from_secs(30);
    sim.set_default_script(script);
    Ok(sim)
}

/// [`sim_with_runners`] and a controller serving shard `a`.
async fn shard_a() -> Result<Env> {
    let mut env = Env {
        sim: sim_with_runners().await?,
        handle: None,
    };
    env.start_controller_with(&shard_args(&format!("{SHARD_LABEL}=a"), false))
        .await?;
    Ok(env)
}

#[tokio::test]
async fn a_shard_serves_only_the_objects_its_selector_matches_and_takes_one_relabelled_into_it() -> Result<()> {
    let env = shard_a().await?;
    env.sim.put(labelled("mine", Some("a")))?;
    env.sim.put(labelled("unlabelled", None))?;
    env.sim.put(labelled("theirs", Some("b")))?;
    env.until("a Job of mine", |e| {
        (!e.job_names(Kind::TerraformCluster, "mine").is_empty()).then_some(())
    })
    .await?;
    env.advance(30);
    env.until("mine Ready", |e| ready(e, "mine").then_some(())).await?;
    env.advance(60);
    env.until_idle().await?;
    for other in ["unlabelled", "theirs"] {
        let o = env.cluster(other);
        assert!(env.jobs_of(Kind::TerraformCluster, other).is_empty(), "{o}");
        assert_eq!(o.pointer("/metadata/finalizers"), None, "untouched: {o}");
        assert_eq!(o.get("status"), None, "untouched: {o}");
    }

    // Relabelled into the shard: it is served at once.
    env.merge_patch::<TerraformCluster>("theirs", json!({"metadata": {"labels": {SHARD_LABEL: "a"}}}))
        .await?;
    env.until("a Job of theirs", |e| {
        (!e.job_names(Kind::TerraformCluster, "theirs").is_empty()).then_some(())
    })
    .await?;
    env.advance(30);
    env.until("theirs Ready", |e| ready(e, "theirs").then_some(())).await?;
    env.no_denials()?;
    Ok(())
}

#[tokio::test]
async fn two_shards_elect_their_own_leaders_and_hand_a_relabelled_object_over_without_two_jobs_at_once() -> Result<()> {
    let sim = sim_with_runners().await?;
    // Every Job of the object that runs, from every change the simulator made.
    let running: Arc<Mutex<(BTreeSet<String>, usize)>> = Arc::default();
    let r = running.clone();
    sim.observe(move |_, ev| {
        if ev.res != "batch/jobs" {
            return;
        }
        let name = ev
            .object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let done = ev.kind == EventType::Deleted
            || ev
                .object
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["status"] == "True" && matches!(c["type"].as_str(), Some("Complete" | "Failed")))
                });
        let mut r = r.lock().unwrap_or_else(|p| p.into_inner());
        if done {
            r.0.remove(name);
        } else {
            r.0.insert(name.to_string());
        }
        r.1 = r.1.max(r.0.len());
    });
    let mut env = Env { sim, handle: None };
    let (sel_a, sel_b) = (format!("{SHARD_LABEL}=a"), format!("{SHARD_LABEL}=b"));
    env.start_controller_with(&shard_args(&sel_a, true)).await?;
    let clock = Arc::new(WatchClock::new(env.sim.clock_watch()));
    let b = runtime::start(env.controller_client()?, &shard_args(&sel_b, true), clock).await?;

    // Each shard leads its own Lease: both lead at once.
    let (lease_a, lease_b) = (leader_lease_name(Some(&sel_a)), leader_lease_name(Some(&sel_b)));
    env.until("both shards lead", |e| {
        (e.lease_holder(&lease_a).ok()? == format!("replica-of-{sel_a}")
            && e.lease_holder(&lease_b).ok()? == format!("replica-of-{sel_b}"))
        .then_some(())
    })
    .await?;

    env.sim.put(labelled("moving", Some("a")))?;
    env.until("a Job of moving", |e| {
        (!e.job_names(Kind::TerraformCluster, "moving").is_empty()).then_some(())
    })
    .await?;
    env.advance(30);
    env.until("moving Ready on shard a", |e| ready(e, "moving").then_some(()))
        .await?;
    env.until_idle().await?;
    assert_eq!(applies_booked(&env.metrics()), 1, "{}", env.metrics());
    assert_eq!(applies_booked(&b.metrics.encode()), 0);

    // Relabelled to shard b together with a change: b applies it, a no longer looks.
    env.merge_patch::<TerraformCluster>(
        "moving",
        json!({"metadata": {"labels": {SHARD_LABEL: "b"}}, "spec": {"variables": {"region": "eu-central-1"}}}),
    )
    .await?;
    env.until("a second Job of moving", |e| {
        (e.job_names(Kind::TerraformCluster, "moving").len() == 2).then_some(())
    })
    .await?;
    env.advance(30);
    env.until("b booked the apply", |_| {
        (applies_booked(&b.metrics.encode()) == 1).then_some(())
    })
    .await?;
    env.until("moving Ready again", |e| {
        let c = e.cluster("moving");
        (ready(e, "moving") && c.pointer("/status/observedGeneration") == c.pointer("/metadata/generation"))
            .then_some(())
    })
    .await?;
    env.until_idle().await?;
    assert_eq!(
        applies_booked(&env.metrics()),
        1,
        "shard a booked nothing after the handover"
    );
    assert_eq!(
        running.lock().unwrap_or_else(|p| p.into_inner()).1,
        1,
        "never two Jobs of one object at once"
    );
    b.shutdown().await;
    env.no_denials()?;
    Ok(())
}

#[tokio::test]
async fn a_selector_the_api_server_refuses_stops_the_controller_with_the_reason() -> Result<()> {
    let sim = Sim::builder().start_time(T0.parse()?).start().await?;
    sim.create_namespace(NS);
    sim.load_rbac(CHART_RBAC)?;
    let env = Env { sim, handle: None };
    let clock = Arc::new(WatchClock::new(env.sim.clock_watch()));
    let err = match runtime::start(
        env.controller_client()?,
        &shard_args("sharding.captf.io/key in (a", false),
        clock,
    )
    .await
    {
        Ok(_) => anyhow::bail!("a controller started with a selector the API server refuses"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.starts_with(
            "--watch-label-selector/--watch-filter \"sharding.captf.io/key in (a\": the API server refuses it: "
        ),
        "{err}"
    );
    let clock = Arc::new(WatchClock::new(env.sim.clock_watch()));
    let mut bad_filter = args();
    bad_filter.watch_filter = "not a value".into();
    let err = match runtime::start(env.controller_client()?, &bad_filter, clock).await {
        Ok(_) => anyhow::bail!("a controller started with a watch filter that is no label value"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.starts_with("--watch-filter \"not a value\" is not a valid label value"),
        "{err}"
    );
    Ok(())
}

/// How many passes over TerraformClusters the metrics count.
fn cluster_passes(metrics: &str) -> u64 {
    metric(
        metrics,
        "captf_reconcile_duration_seconds_count{kind=\"TerraformCluster\"}",
    )
}

/// The watch says the object is the shard's, but it was relabelled away since: the pass reads
/// it live, sees the label, and leaves it alone (its Job's end and its new spec are the other
/// shard's to act on).
#[tokio::test]
async fn a_pass_leaves_alone_an_object_relabelled_out_of_its_shard_before_its_watch_said_so() -> Result<()> {
    use captf_sim::faults::{FaultRule, Verb};
    let env = shard_a().await?;
    env.sim.put(labelled("leaving", Some("a")))?;
    env.until("a Job of leaving", |e| {
        (!e.job_names(Kind::TerraformCluster, "leaving").is_empty()).then_some(())
    })
    .await?;
    env.until_idle().await?;
    let status = env.cluster("leaving")["status"].clone();
    // The shard's watch of TerraformClusters breaks and cannot come back, so its cache keeps
    // the object as labelled for it; its Jobs' watch still works.
    env.sim
        .faults()
        .inject(FaultRule::new(Verb::Watch, "terraformclusters", 500, u32::MAX));
    env.sim.faults().drop_watches();
    env.merge_patch::<TerraformCluster>(
        "leaving",
        json!({"metadata": {"labels": {SHARD_LABEL: "b"}}, "spec": {"variables": {"region": "eu-central-1"}}}),
    )
    .await?;
    let before = cluster_passes(&env.metrics());
    // The Job ends: its watch event brings the object's pass.
    env.advance(30);
    env.until("a pass after the Job ended", |e| {
        (cluster_passes(&e.metrics()) > before).then_some(())
    })
    .await?;
    env.until_idle().await?;
    assert_eq!(
        env.job_names(Kind::TerraformCluster, "leaving").len(),
        1,
        "the shard it left started the new spec's apply"
    );
    assert_eq!(
        env.cluster("leaving")["status"],
        status,
        "the shard it left wrote the status (booked the Job)"
    );
    env.sim.faults().clear();
    Ok(())
}

/// Another shard's pass claimed the object's run lease moments ago and is about to create its
/// Job: this shard neither gives the claim up nor takes the lease over until the claim is older
/// than any pass, then it starts its own Job.
#[tokio::test]
async fn a_claim_another_shard_just_made_is_left_to_it_until_older_than_any_pass() -> Result<()> {
    use captf_controller::runtime::leases::{self, Take};
    use captf_core::lease::FOREIGN_CLAIM_GRACE;
    use captf_shared::names;
    let sim = Sim::builder().start_time(T0.parse()?).start().await?;
    sim.create_namespace(NS);
    sim.load_rbac(CHART_RBAC)?;
    let mut env = Env { sim, handle: None };
    let (sel_a, sel_b) = (format!("{SHARD_LABEL}=a"), format!("{SHARD_LABEL}=b"));
    let k = Kind::TerraformCluster;
    let run = names::run_lease_name(&names::suffix(k, NS, "claimed"));
    let theirs = names::job_name(k, NS, "claimed", captf_shared::Op::Apply, 9);
    env.start_controller_with(&shard_args(&sel_a, false)).await?;
    // Shard b's (not running here): its pass took the run lease for its Job, then the object
    // moved to shard a.
    env.sim.put(labelled("claimed", Some("b")))?;
    let uid = env.cluster("claimed")["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let client = env.controller_client()?;
    let owner = captf_core::job::owner_reference(k, "claimed", &uid);
    let other = leader_lease_name(Some(&sel_b));
    assert_eq!(
        leases::take(&client, NS, &run, &theirs, None, Some(owner), &other, env.now()).await?,
        Take::Taken
    );
    env.merge_patch::<TerraformCluster>("claimed", json!({"metadata": {"labels": {SHARD_LABEL: "a"}}}))
        .await?;
    env.until("a pass of claimed", |e| {
        (cluster_passes(&e.metrics()) > 0).then_some(())
    })
    .await?;
    env.until_idle().await?;
    assert!(
        env.job_names(k, "claimed").is_empty(),
        "started beside the other shard's claim"
    );
    assert_eq!(
        env.lease_holder(&run)?,
        json!(theirs),
        "the other shard's claim was given up"
    );
    // Ten minutes on, the claim is over: its Job never came.
    env.advance(FOREIGN_CLAIM_GRACE.as_secs());
    env.until("a Job of claimed", |e| {
        (!e.job_names(k, "claimed").is_empty()).then_some(())
    })
    .await?;
    assert_ne!(env.lease_holder(&run)?, json!(theirs));
    env.no_denials()?;
    Ok(())
}

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

fn applies_booked(metrics: &str) -> u64 {
    metrics
        .lines()
        .find(|l| {
            l.starts_with("captf_jobs_finished_total{kind=\"TerraformCluster\",op=\"apply\",outcome=\"succeeded\"}")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_shard_serves_only_the_objects_its_selector_matches_and_takes_one_relabelled_into_it() -> Result<()> {
    let sim = Sim::builder().start_time(T0.parse()?).start().await?;
    sim.create_namespace(NS);
    sim.load_rbac(CHART_RBAC)?;
    let mut script = captf_sim::RunnerScript::succeed_with_outputs(outputs());
    script.duration = std::time::Duration::from_secs(30);
    sim.set_default_script(script);
    let mut env = Env { sim, handle: None };
    env.start_controller_with(&shard_args(&format!("{SHARD_LABEL}=a"), false))
        .await?;
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
    let sim = Sim::builder().start_time(T0.parse()?).start().await?;
    sim.create_namespace(NS);
    sim.load_rbac(CHART_RBAC)?;
    let mut script = captf_sim::RunnerScript::succeed_with_outputs(outputs());
    script.duration = std::time::Duration::from_secs(30);
    sim.set_default_script(script);
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

//! Scale measurement (docs/architecture.md), ignored by default.

use std::time::Duration;

use anyhow::{Result, bail};
use serde_json::{Value, json};

use captf_sim::RunnerScript;

use super::support::*;

/// A measurement, not a check of timings: `CAPTF_SCALE_OBJECTS=500 cargo test -p
/// captf-controller --test scenarios many_objects -- --ignored --nocapture` prints how long N
/// objects take from creation to Ready, and from their apply Jobs finishing to the next Job.
/// The controller runs in this process here; `controller/benches/scale.rs` runs it as its own
/// process and reports its memory and the finish → next-Job latency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run by hand"]
async fn many_objects_reach_ready() -> Result<()> {
    let n: usize = std::env::var("CAPTF_SCALE_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    // Every object's Job at once: what is measured is the controller, not the runner slots.
    let mut a = args();
    a.max_running_jobs_per_namespace = 0;
    let env = Env::with_args(captf_sim::Sim::builder(), &a).await?;
    env.sim
        .set_default_script(RunnerScript::succeed_with_outputs(outputs()));
    let started = std::time::Instant::now();
    for i in 0..n {
        env.sim
            .put(cluster_json(&format!("c{i}"), json!({"drift": {"interval": "30m"}})))?;
    }
    // Counted in place: copying every Job each 20 ms would measure the poller, not the controller.
    let jobs = |e: &Env| e.sim.count_where("batch/jobs", Some(NS), |_| true);
    let count = |e: &Env, op: &str| {
        e.sim.count_where("batch/jobs", Some(NS), |j| {
            j.pointer("/metadata/labels/captf.io~1op").and_then(Value::as_str) == Some(op)
        })
    };
    let wait = |what: &'static str, f: Box<dyn Fn(&Env) -> bool>| {
        let env = &env;
        async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(120);
            while !f(env) {
                if std::time::Instant::now() > deadline {
                    bail!("timed out waiting for {what}");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(())
        }
    };
    wait("every apply Job", Box::new(move |e| count(e, "apply") >= n)).await?;
    let created = started.elapsed();
    let t = std::time::Instant::now();
    env.advance(30);
    wait("every drift Job", Box::new(move |e| count(e, "drift") >= n)).await?;
    let next = t.elapsed();
    let ready = |e: &Env| {
        e.sim
            .count_where(TC, Some(NS), |c| condition(c, "Ready").is_some_and(|r| r.0 == "True"))
    };
    wait("all Ready", Box::new(move |e| ready(e) >= n)).await?;
    println!(
        "{n} objects: {} Jobs; all apply Jobs created {:.2}s after creation; all {n} next Jobs (drift) created {:.2}s after the applies finished (one clock jump); total {:.2}s",
        jobs(&env),
        created.as_secs_f64(),
        next.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

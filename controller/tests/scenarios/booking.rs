//! Booking that survives a crash after the outcome annotation (docs/rules.md, docs/architecture.md): the `captf.io/outcome` annotation is the once of the once-only metrics (a booking's Event is created just before it, under a fixed name), and
//! `status.lastBookedJobSeq` says which booked Jobs have their effects in the status. A Job
//! annotated above it is replayed, without events, by the next pass or the next controller.

use anyhow::Result;
use serde_json::{Value, json};

use captf_shared::types::TerraformCluster;
use captf_shared::{Kind, Op};
use captf_sim::{FaultRule, RunnerScript, Verb};

use super::support::*;

const K: Kind = Kind::TerraformCluster;

/// Every status write of this TerraformCluster fails with a 500 until the faults are cleared.
fn lose_status_writes(env: &Env, name: &str) {
    env.sim
        .faults()
        .inject(FaultRule::new(Verb::Patch, "terraformclusters/status", 500, 10_000).named(name));
}

/// Start the object and wait until Job 1 runs and the status says so (with its watermark), so
/// the next status write is the booking's.
async fn running(env: &Env, name: &str) -> Result<String> {
    env.sim.put(cluster_json(name, json!({})))?;
    let job = env.job(K, name, Op::Apply, 1).await?;
    let job = job.metadata.name.unwrap_or_default();
    env.until("activeJob and the watermark 0 in the status", |e| {
        let c = e.cluster(name);
        (c.pointer("/status/activeJob") == Some(&json!(job))
            && c.pointer("/status/lastBookedJobSeq") == Some(&json!(0)))
        .then_some(())
    })
    .await?;
    Ok(job)
}

/// Failed passes back off in wall time (seconds, doubling): touch the object, as any change in a
/// cluster would, until every injected fault has fired, so the test doesn't wait on the backoff.
async fn wake_until_faults_used(env: &Env, name: &str) -> Result<()> {
    for touch in 0..200 {
        if env.sim.faults().remaining() == 0 {
            return Ok(());
        }
        env.merge_patch::<TerraformCluster>(
            name,
            json!({"metadata": {"annotations": {"example.com/touched": touch.to_string()}}}),
        )
        .await?;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    anyhow::bail!("the injected faults never fired")
}

fn failures(env: &Env, name: &str) -> Option<Value> {
    env.cluster(name).pointer("/status/consecutiveFailures/apply").cloned()
}

fn finished_line(outcome: &str) -> String {
    format!("captf_jobs_finished_total{{kind=\"TerraformCluster\",op=\"apply\",outcome=\"{outcome}\"}} 1")
}

fn run_lease_holder(env: &Env, suffix: &str) -> Option<Value> {
    env.sim
        .get("coordination.k8s.io/leases", NS, &format!("captf-run-{suffix}"))?
        .pointer("/spec/holderIdentity")
        .filter(|h| !h.is_null())
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_apply_whose_status_write_is_lost_is_counted_exactly_once() -> Result<()> {
    let env = Env::new().await?;
    env.sim.set_default_script(RunnerScript::fail("terraform exploded"));
    let j1 = running(&env, "lost-fail").await?;
    lose_status_writes(&env, "lost-fail");
    env.advance(30);
    env.booked(&j1, "failed").await?;
    env.until_idle().await?;
    // The annotation landed, the counts did not: without a replay they would be lost for good.
    assert_eq!(failures(&env, "lost-fail"), None, "the status write was lost");
    assert_eq!(env.events("JobFailed").len(), 1);

    env.sim.faults().clear();
    // The failed status writes put the object into its error backoff (seconds of wall time,
    // growing with every failure); a change to the object wakes it at once, as in a cluster, so
    // the replay does not depend on how many failures a loaded machine saw.
    env.merge_patch::<TerraformCluster>(
        "lost-fail",
        json!({"metadata": {"annotations": {"example.com/touched": "1"}}}),
    )
    .await?;
    env.until("consecutiveFailures=1 and the watermark 1", |e| {
        let c = e.cluster("lost-fail");
        (c.pointer("/status/consecutiveFailures/apply") == Some(&json!(1))
            && c.pointer("/status/lastBookedJobSeq") == Some(&json!(1)))
        .then_some(())
    })
    .await?;
    env.until_idle().await?;
    assert_eq!(
        failures(&env, "lost-fail"),
        Some(json!(1)),
        "replayed once, not per pass"
    );
    assert_eq!(env.events("JobFailed").len(), 1, "no event on replay");
    let m = env.metrics();
    assert!(m.contains(&finished_line("failed")), "{m}");
    assert!(
        m.contains("captf_job_attempts_count{kind=\"TerraformCluster\",op=\"apply\"} 1"),
        "{m}"
    );
    assert!(m.contains(
        "captf_consecutive_failures{kind=\"TerraformCluster\",namespace=\"default\",name=\"lost-fail\",op=\"apply\"} 1"
    ));

    // The retry still comes 1m after the failure, and its failure counts on top: 2, not 3.
    env.advance(60);
    let j2 = env.job(K, "lost-fail", Op::Apply, 2).await?;
    env.advance(30);
    env.booked(j2.metadata.name.as_deref().unwrap_or_default(), "failed")
        .await?;
    env.until("consecutiveFailures=2", |e| {
        (failures(e, "lost-fail") == Some(json!(2))).then_some(())
    })
    .await?;
    env.until_idle().await?;
    assert_eq!(failures(&env, "lost-fail"), Some(json!(2)));
    assert_eq!(env.events("JobFailed").len(), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_objects_booking_is_replayed_even_when_no_status_write_ever_landed() -> Result<()> {
    let env = Env::new().await?;
    env.sim.set_default_script(RunnerScript::fail("terraform exploded"));
    // From the very start no status write lands: the object never gets a watermark.
    lose_status_writes(&env, "never-written");
    env.sim.put(cluster_json("never-written", json!({})))?;
    let j1 = env.job(K, "never-written", Op::Apply, 1).await?;
    let j1 = j1.metadata.name.unwrap_or_default();
    env.advance(30);
    env.booked(&j1, "failed").await?;
    env.until_idle().await?;
    assert_eq!(env.cluster("never-written").pointer("/status/conditions"), None);
    assert_eq!(env.events("JobFailed").len(), 1);

    env.sim.faults().clear();
    // The failed status writes put the object into its error backoff (seconds of wall time,
    // growing with every failure); any change to the object wakes it at once, as it would in
    // a cluster, so the replay does not depend on how many failures a loaded machine saw.
    env.merge_patch::<TerraformCluster>(
        "never-written",
        json!({"metadata": {"annotations": {"example.com/touched": "1"}}}),
    )
    .await?;
    env.until("consecutiveFailures=1 and the watermark 1", |e| {
        let c = e.cluster("never-written");
        (c.pointer("/status/consecutiveFailures/apply") == Some(&json!(1))
            && c.pointer("/status/lastBookedJobSeq") == Some(&json!(1)))
        .then_some(())
    })
    .await?;
    env.until_idle().await?;
    assert_eq!(failures(&env, "never-written"), Some(json!(1)));
    assert_eq!(env.events("JobFailed").len(), 1, "no event on replay");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_replays_a_lost_booking_without_counting_it_again() -> Result<()> {
    let mut env = Env::new().await?;
    env.sim.set_default_script(RunnerScript::fail("terraform exploded"));
    let j1 = running(&env, "lost-restart").await?;
    lose_status_writes(&env, "lost-restart");
    env.advance(30);
    env.booked(&j1, "failed").await?;
    env.until_idle().await?;
    assert_eq!(failures(&env, "lost-restart"), None, "the status write was lost");
    assert!(env.metrics().contains(&finished_line("failed")));

    // The controller dies; a new one starts against a healthy API server.
    env.handle.take().expect("running controller").abort();
    env.sim.faults().clear();
    env.start_controller().await?;
    env.until("consecutiveFailures=1 after the restart", |e| {
        (failures(e, "lost-restart") == Some(json!(1))).then_some(())
    })
    .await?;
    env.until_idle().await?;
    let c = env.cluster("lost-restart");
    assert_eq!(c.pointer("/status/consecutiveFailures/apply"), Some(&json!(1)));
    assert_eq!(c.pointer("/status/lastBookedJobSeq"), Some(&json!(1)));
    assert_eq!(
        env.events("JobFailed").len(),
        1,
        "the new controller emits no second event"
    );
    let m = env.metrics();
    assert!(
        !m.contains("captf_jobs_finished_total{"),
        "the new controller did not count the Job again: {m}"
    );
    assert!(
        m.contains(
            "captf_consecutive_failures{kind=\"TerraformCluster\",namespace=\"default\",name=\"lost-restart\",op=\"apply\"} 1"
        ),
        "the gauge is set again: {m}"
    );
    assert_eq!(env.job_names(K, "lost-restart").len(), 1, "the replay starts no Job");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_apply_whose_booking_died_after_the_annotation_is_completed_by_the_replay() -> Result<()> {
    let env = Env::new().await?;
    env.sim
        .set_default_script(RunnerScript::realistic_with_outputs(outputs()));
    let j1 = running(&env, "lost-ok").await?;
    // The Cluster API spec patch right after the annotation fails: the pass ends there, before
    // the inputs Secret annotation, the lease release and the status write.
    env.sim
        .faults()
        .inject(FaultRule::new(Verb::Patch, "terraformclusters", 500, 10_000).named("lost-ok"));
    env.advance(30);
    env.booked(&j1, "succeeded").await?;
    env.until_idle().await?;
    let secret = || {
        env.sim
            .get("/secrets", NS, "captf-inputs-lost-ok-tc")
            .unwrap_or(Value::Null)
    };
    let applied = |s: &Value| {
        s.pointer("/metadata/annotations/captf.io~1applied-inputs-hash")
            .cloned()
    };
    assert_eq!(applied(&secret()), None, "nothing after the annotation happened");
    assert_eq!(run_lease_holder(&env, "lost-ok-tc"), Some(json!(j1)));
    assert_eq!(env.cluster("lost-ok").pointer("/spec/controlPlaneEndpoint"), None);
    assert_ne!(
        condition(&env.cluster("lost-ok"), "Ready").map(|c| c.0),
        Some("True".into())
    );

    env.sim.faults().clear();
    // The failed status writes put the object into its error backoff (seconds of wall time,
    // growing with every failure); a change to the object wakes it at once, as in a cluster, so
    // the replay does not depend on how many failures a loaded machine saw.
    env.merge_patch::<TerraformCluster>(
        "lost-ok",
        json!({"metadata": {"annotations": {"example.com/touched": "1"}}}),
    )
    .await?;
    let c = env
        .until("Ready=True after the replay", |e| {
            let c = e.cluster("lost-ok");
            (condition(&c, "Ready")?.0 == "True").then_some(c)
        })
        .await?;
    assert_eq!(
        c.pointer("/spec/controlPlaneEndpoint"),
        Some(&json!({"host": "10.0.0.1", "port": 6443}))
    );
    assert_eq!(c.pointer("/status/initialization/provisioned"), Some(&json!(true)));
    assert_eq!(c.pointer("/status/lastBookedJobSeq"), Some(&json!(1)));
    assert!(c.pointer("/status/lastSuccessTime/apply").is_some());
    let hash = applied(&secret());
    assert!(
        hash.as_ref().and_then(Value::as_str).is_some_and(|h| h.len() == 64),
        "applied-inputs-hash recorded: {hash:?}"
    );
    assert_eq!(c.pointer("/status/appliedInputsHash"), hash.as_ref());
    assert_eq!(run_lease_holder(&env, "lost-ok-tc"), None, "run lease released");
    env.until_idle().await?;
    assert!(env.metrics().contains(&finished_line("succeeded")));
    assert_eq!(
        env.job_names(K, "lost-ok").len(),
        1,
        "no second apply of the same inputs"
    );
    Ok(())
}

/// Found by the soak: a booking's Event was written after the outcome annotation, as a
/// courtesy, so a controller killed between the two, or an Events API that failed once, lost it
/// for good. It is now created first, under a name of its own (the Job's name and uid): a
/// booking that fails or dies before its annotation is done again, and its Event is then a 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_booking_whose_event_write_fails_is_done_again_and_emits_its_event_exactly_once() -> Result<()> {
    let env = Env::new().await?;
    env.sim.set_default_script(RunnerScript::fail("terraform exploded"));
    let j1 = running(&env, "event-lost").await?;
    // The Event's write fails once, then the annotation's write once: the second failure comes
    // after the Event landed, as when a booking dies between the two.
    env.sim.faults().inject(FaultRule::new(Verb::Create, "events", 500, 1));
    env.sim
        .faults()
        .inject(FaultRule::new(Verb::Patch, "jobs", 500, 1).named(&j1));
    env.advance(30);
    wake_until_faults_used(&env, "event-lost").await?;
    env.booked(&j1, "failed").await?;
    env.until("consecutiveFailures=1", |e| {
        (failures(e, "event-lost") == Some(json!(1))).then_some(())
    })
    .await?;
    env.until_idle().await?;
    let events = env.events("JobFailed");
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(
        events[0].pointer("/related/name").and_then(Value::as_str),
        Some(j1.as_str())
    );
    let m = env.metrics();
    assert!(m.contains(&finished_line("failed")), "{m}");
    Ok(())
}

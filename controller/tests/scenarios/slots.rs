//! Runner slots (docs/rules.md, "Runner slots"): the limits on runner Jobs running at once, the
//! queue's order and places, and the wake of the next object when a slot frees.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use serde_json::Value;

use captf_sim::store::EventType;
use captf_sim::{RunnerScript, Sim};

use crate::support::*;

const TEAM: &str = "team-a";
/// A queued object looks again every 30 s (`captf_core::queue::QUEUE_LOOK`), refreshing its
/// place.
const LOOK: u64 = 30;
/// The runners here take 45 s: a queued object that starts when a Job finishes, 15 s before
/// its own next look, was woken by the freed slot.
const RUN: u64 = 45;

/// The most Jobs that ever ran at once, in all namespaces and per namespace, from every change
/// the simulator made (its lossless observer).
#[derive(Default)]
struct Peak {
    running: BTreeSet<(String, String)>,
    total: usize,
    per_namespace: BTreeMap<String, usize>,
}

fn finished(job: &Value) -> bool {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| matches!(c["type"].as_str(), Some("Complete" | "Failed")) && c["status"] == "True")
        })
}

fn watch_peak(sim: &Sim) -> Arc<Mutex<Peak>> {
    let peak = Arc::new(Mutex::new(Peak::default()));
    let p = peak.clone();
    sim.observe(move |_, ev| {
        if ev.res != "batch/jobs" {
            return;
        }
        let name = ev
            .object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let key = (ev.ns.clone(), name.to_string());
        let mut p = p.lock().unwrap();
        if ev.kind == EventType::Deleted || finished(&ev.object) {
            p.running.remove(&key);
        } else {
            p.running.insert(key);
        }
        p.total = p.total.max(p.running.len());
        let here = p.running.iter().filter(|(n, _)| *n == ev.ns).count();
        let e = p.per_namespace.entry(ev.ns.clone()).or_default();
        *e = (*e).max(here);
    });
    peak
}

fn cluster_in(ns: &str, name: &str) -> Value {
    let mut c = cluster_json(name, serde_json::json!({}));
    c["metadata"]["namespace"] = ns.into();
    c
}

fn jobs_in(env: &Env, ns: &str) -> usize {
    env.sim.jobs(ns).unwrap_or_default().len()
}

/// The Ready condition of the clusters in `ns` whose reason is `Queued`: name → message.
fn queued_in(env: &Env, ns: &str, names: &[String]) -> BTreeMap<String, String> {
    names
        .iter()
        .filter_map(|n| {
            let tc = env.sim.get(TC, ns, n)?;
            let (status, reason, message) = condition(&tc, "Ready")?;
            (status == "False" && reason == "Queued").then(|| (n.clone(), message))
        })
        .collect()
}

fn ready_in(env: &Env, ns: &str, names: &[String]) -> usize {
    names
        .iter()
        .filter(|n| {
            env.sim
                .get(TC, ns, n)
                .and_then(|tc| condition(&tc, "Ready"))
                .is_some_and(|(s, _, _)| s == "True")
        })
        .count()
}

fn quick_runners(sim: &Sim) {
    let mut script = RunnerScript::succeed_with_outputs(outputs());
    script.duration = Duration::from_secs(RUN);
    sim.set_default_script(script);
}

#[tokio::test]
async fn with_two_slots_per_namespace_five_new_objects_run_two_at_a_time_queue_with_places_and_all_become_ready()
-> Result<()> {
    let mut a = args();
    a.max_running_jobs_per_namespace = 2;
    let sim = Sim::builder().start_time(T0.parse()?).start().await?;
    sim.create_namespace(NS);
    sim.load_rbac(CHART_RBAC)?;
    quick_runners(&sim);
    let peak = watch_peak(&sim);
    let mut env = Env { sim, handle: None };
    env.start_controller_with(&a).await?;
    let names: Vec<String> = (0..5).map(|i| format!("c{i}")).collect();
    for n in &names {
        env.sim.put(cluster_in(NS, n))?;
    }

    // Two Jobs start; the three others wait, each saying its place (as of its last look:
    // one that joined the queue before the others says so until it looks again).
    env.until("two Jobs and three objects Queued", |e| {
        (jobs_in(e, NS) == 2 && queued_in(e, NS, &names).len() == 3).then_some(())
    })
    .await?;
    env.until_idle().await?;
    env.advance(LOOK);
    env.until_idle().await?;
    assert_eq!(jobs_in(&env, NS), 2, "nothing more starts while two run");
    assert!(
        env.metrics().lines().any(|l| l == "captf_queued_objects 3"),
        "{}",
        env.metrics()
    );
    let queued = queued_in(&env, NS, &names);
    let mut places: Vec<String> = queued.values().cloned().collect();
    places.sort();
    assert_eq!(
        places,
        (1..=3)
            .map(|i| format!("waiting for a runner slot: {i} of 3 queued in namespace {NS} (2 of 2 running)"))
            .collect::<Vec<_>>(),
        "{queued:?}"
    );
    // Oldest first, then by name: all began to wait at the same simulated time.
    let first = queued
        .iter()
        .find(|(_, m)| m.contains(": 1 of 3"))
        .map(|(n, _)| n.clone())
        .unwrap();
    let next = env.sim.get(TC, NS, &first).unwrap();
    assert_eq!(
        next.pointer("/status/nextAction/reason"),
        Some(&Value::from("Queued")),
        "{next}"
    );

    // The two Jobs finish: the next two start at once (their own look would come 15 s later).
    env.advance(RUN - LOOK);
    env.until("four Jobs", |e| (jobs_in(e, NS) == 4).then_some(())).await?;
    env.until_idle().await?;
    assert_eq!(jobs_in(&env, NS), 4);
    assert!(
        env.sim
            .get(TC, NS, &first)
            .and_then(|tc| tc.pointer("/status/activeJob").cloned())
            .is_some(),
        "the first in the queue started"
    );
    // The last one's place is refreshed at its next look.
    env.advance(2 * LOOK - RUN);
    env.until_idle().await?;
    let queued = queued_in(&env, NS, &names);
    assert_eq!(
        queued.values().collect::<Vec<_>>(),
        [&format!(
            "waiting for a runner slot: 1 of 1 queued in namespace {NS} (2 of 2 running)"
        )],
        "{queued:?}"
    );
    assert_eq!(jobs_in(&env, NS), 4);

    env.advance(RUN - (2 * LOOK - RUN));
    env.until("five Jobs", |e| (jobs_in(e, NS) == 5).then_some(())).await?;
    env.advance(RUN);
    env.until("all five Ready", |e| (ready_in(e, NS, &names) == 5).then_some(()))
        .await?;
    env.until_idle().await?;
    let p = peak.lock().unwrap();
    assert_eq!(
        p.per_namespace.get(NS),
        Some(&2),
        "at most two at once, and two did run at once"
    );
    assert!(queued_in(&env, NS, &names).is_empty());
    assert!(env.metrics().lines().any(|l| l == "captf_queued_objects 0"));
    env.no_denials()
}

/// A controller watching `NS` and `TEAM` with two runner slots in all (no per-namespace limit),
/// quick runners, and the peak of what ran at once.
async fn two_namespaces_two_slots() -> Result<(Env, Arc<Mutex<Peak>>)> {
    let mut a = args();
    a.namespace = vec![NS.into(), TEAM.into()];
    a.max_running_jobs = 2;
    a.max_running_jobs_per_namespace = 0;
    let sim = Sim::builder().start_time(T0.parse()?).start().await?;
    for ns in [NS, TEAM] {
        sim.create_namespace(ns);
    }
    sim.load_rbac(CHART_RBAC)?;
    quick_runners(&sim);
    let peak = watch_peak(&sim);
    let mut env = Env { sim, handle: None };
    env.start_controller_with(&a).await?;
    Ok((env, peak))
}

#[tokio::test]
async fn under_the_controller_wide_limit_two_namespaces_take_turns() -> Result<()> {
    let (env, peak) = two_namespaces_two_slots().await?;

    // Four objects in the first namespace: two run, two wait.
    let many: Vec<String> = (0..4).map(|i| format!("a{i}")).collect();
    for n in &many {
        env.sim.put(cluster_in(NS, n))?;
    }
    env.until("two Jobs and two Queued", |e| {
        (jobs_in(e, NS) == 2 && queued_in(e, NS, &many).len() == 2).then_some(())
    })
    .await?;
    env.until_idle().await?;

    // One object in the second namespace, later: it waits too, first in line overall, because
    // its namespace runs nothing.
    let one = vec!["b0".to_string()];
    env.sim.put(cluster_in(TEAM, "b0"))?;
    env.until("b0 Queued", |e| (queued_in(e, TEAM, &one).len() == 1).then_some(()))
        .await?;
    env.until_idle().await?;
    assert_eq!(jobs_in(&env, TEAM), 0);
    assert_eq!(
        queued_in(&env, TEAM, &one)["b0"],
        format!(
            "waiting for a runner slot: 1 of 1 queued in namespace {TEAM} (0 running in {TEAM}, 2 of 2 in all namespaces; 1 of 3 queued in all)"
        )
    );

    // Both Jobs finish: the second namespace gets one of the two slots although its object came
    // last; the first namespace's last object waits.
    env.advance(RUN);
    env.until("b0's Job and a third Job in the first namespace", |e| {
        (jobs_in(e, TEAM) == 1 && jobs_in(e, NS) == 3).then_some(())
    })
    .await?;
    env.until_idle().await?;
    assert_eq!((jobs_in(&env, NS), jobs_in(&env, TEAM)), (3, 1));
    assert_eq!(queued_in(&env, NS, &many).len(), 1);

    env.advance(RUN);
    env.until("four Jobs in the first namespace", |e| {
        (jobs_in(e, NS) == 4).then_some(())
    })
    .await?;
    env.advance(RUN);
    env.until("all Ready", |e| {
        (ready_in(e, NS, &many) == 4 && ready_in(e, TEAM, &one) == 1).then_some(())
    })
    .await?;
    env.until_idle().await?;
    let p = peak.lock().unwrap();
    assert_eq!(
        p.total, 2,
        "never more than two at once in all namespaces, and two did run"
    );
    env.no_denials()
}

/// A tenant who may create Jobs (the built-in `edit` role may) makes unfinished Jobs with
/// CAPTF's labels and Job names. They are not the controller's (no controller owner reference to
/// a watched object of that UID), so they take no runner slot: another namespace's object starts
/// at once under a controller-wide limit they would otherwise fill.
#[tokio::test]
async fn a_tenants_fake_jobs_with_captf_labels_do_not_fill_the_runner_slots() -> Result<()> {
    use captf_shared::{Kind, Op, names};
    let (env, _) = two_namespaces_two_slots().await?;
    let fake = |object: &str, owner: Value| {
        let name = names::job_name(Kind::TerraformCluster, TEAM, object, Op::Apply, 1);
        serde_json::json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": TEAM, "ownerReferences": owner, "labels": {
                "captf.io/kind": "TerraformCluster",
                "captf.io/object": names::object_id(Kind::TerraformCluster, TEAM, object),
                "captf.io/op": "apply"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "runner", "image": "captf-runner:dev"}]}}}})
    };
    env.sim.put(fake("ghost-0", serde_json::json!([])))?;
    for ghost in ["ghost-1", "ghost-2"] {
        env.sim.put(fake(
            ghost,
            serde_json::json!([{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "TerraformCluster", "name": ghost, "uid": "made-up", "controller": true}]),
        ))?;
    }
    assert_eq!(jobs_in(&env, TEAM), 3);
    env.until_idle().await?;

    let victim = vec!["victim".to_string()];
    env.sim.put(cluster_in(NS, "victim"))?;
    let started = env
        .until("victim's Job or its place in the queue", |e| {
            if jobs_in(e, NS) == 1 {
                return Some(Ok(()));
            }
            queued_in(e, NS, &victim).remove("victim").map(Err)
        })
        .await?;
    assert_eq!(started, Ok(()), "the fake Jobs took the runner slots");
    env.no_denials()?;
    Ok(())
}

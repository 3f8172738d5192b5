//! Which namespaces the controller works in: one set of controllers per watched namespace, under
//! the chart's RBAC as `charts/tests/rendered/rbac.yaml` binds it (RoleBindings in `default`,
//! `soak` and `team-a`; nothing in `team-b`). A call into a namespace the controller has no
//! binding in is a 403 the simulator records, so [`Env::until`] fails on it.

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Result, bail};
use serde_json::Value;

use captf_shared::{Kind, Op, keys, names};
use captf_sim::Sim;

use crate::support::*;

const WATCHED: &str = "team-a";
const UNWATCHED: &str = "team-b";

/// The simulator with `default`, `team-a` and `team-b` and the chart's RBAC, and a controller
/// running with these arguments.
async fn env_with_namespaces(a: &captf_controller::runtime::RunArgs) -> Result<Env> {
    let sim = Sim::builder().start_time(T0.parse()?).start().await?;
    for ns in [NS, WATCHED, UNWATCHED] {
        sim.create_namespace(ns);
    }
    sim.load_rbac(CHART_RBAC)?;
    let mut env = Env { sim, handle: None };
    env.start_controller_with(a).await?;
    Ok(env)
}

fn cluster_in(ns: &str, name: &str) -> Value {
    let mut c = cluster_json(name, serde_json::json!({}));
    c["metadata"]["namespace"] = ns.into();
    c
}

/// The object's Jobs in its namespace, by the object label.
fn jobs_in(env: &Env, ns: &str, name: &str) -> Vec<String> {
    let id = names::object_id(Kind::TerraformCluster, ns, name);
    env.sim
        .jobs(ns)
        .unwrap_or_default()
        .into_iter()
        .filter(|j| j.metadata.labels.as_ref().and_then(|l| l.get(keys::LABEL_OBJECT)) == Some(&id))
        .filter_map(|j| j.metadata.name)
        .collect()
}

async fn first_job_in(env: &Env, ns: &str, name: &str) -> Result<String> {
    let want = names::job_name(Kind::TerraformCluster, ns, name, Op::Apply, 1);
    env.until(&format!("Job {ns}/{want}"), |e| {
        jobs_in(e, ns, name).into_iter().find(|j| *j == want)
    })
    .await
}

#[tokio::test]
async fn a_controller_watching_two_namespaces_reconciles_objects_in_both_and_ignores_a_third() -> Result<()> {
    let mut a = args();
    a.namespace = vec![NS.into(), WATCHED.into()];
    let env = env_with_namespaces(&a).await?;
    for ns in [NS, WATCHED, UNWATCHED] {
        env.sim.put(cluster_in(ns, "net"))?;
    }

    // Both watched namespaces: the object gets its finalizer, its runner identity and its first
    // Job, and the Job is booked back into its status.
    for ns in [NS, WATCHED] {
        let job = first_job_in(&env, ns, "net").await?;
        let tc = env
            .until(&format!("{ns}/net status.activeJob {job}"), |e| {
                let tc = e.sim.get(TC, ns, "net")?;
                (tc.pointer("/status/activeJob") == Some(&Value::from(job.clone()))).then_some(tc)
            })
            .await?;
        assert!(
            tc.pointer("/metadata/finalizers")
                .is_some_and(|f| !f.as_array().unwrap().is_empty()),
            "{ns}: {tc}"
        );
    }
    env.advance(30);
    for ns in [NS, WATCHED] {
        env.until(&format!("{ns}/net Ready"), |e| {
            let tc = e.sim.get(TC, ns, "net")?;
            condition(&tc, "Ready").filter(|(s, _, _)| s == "True")
        })
        .await?;
    }
    env.until_idle().await?;

    // The third namespace: untouched, and never asked about (RBAC would have refused any call).
    let ignored = env.sim.get(TC, UNWATCHED, "net").unwrap();
    assert!(ignored.get("status").is_none_or(Value::is_null), "{ignored}");
    assert!(ignored.pointer("/metadata/finalizers").is_none(), "{ignored}");
    assert!(jobs_in(&env, UNWATCHED, "net").is_empty());
    for resource in [
        "/secrets",
        "/serviceaccounts",
        "coordination.k8s.io/leases",
        "batch/jobs",
    ] {
        let made = env.sim.list(resource, Some(UNWATCHED));
        assert!(made.is_empty(), "{resource} in {UNWATCHED}: {made:?}");
    }
    env.no_denials()?;
    assert!(env.handle.as_ref().unwrap().ready.load(Ordering::SeqCst));
    Ok(())
}

/// `/readyz` reports ready only once every watched namespace's caches have listed: a namespace
/// the controller may not list keeps it unready, while the namespaces it can work in are
/// reconciled meanwhile.
#[tokio::test]
async fn readiness_waits_for_every_watched_namespace_and_one_it_cannot_list_blocks_no_other() -> Result<()> {
    let mut a = args();
    a.namespace = vec![NS.into(), UNWATCHED.into()];
    let env = env_with_namespaces(&a).await?;
    env.sim.put(cluster_in(NS, "net"))?;
    let want = names::job_name(Kind::TerraformCluster, NS, "net", Op::Apply, 1);
    let deadline = std::time::Instant::now() + WAIT;
    while !jobs_in(&env, NS, "net").contains(&want) {
        if std::time::Instant::now() > deadline {
            bail!("no first Job in {NS} while {UNWATCHED} cannot be listed");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Not ready after the controller has been refused each of its lists in {UNWATCHED} twice
    // (its first try, and a retry after the watchers' backoff): waiting on those attempts rather
    // than on a fixed time, so a controller that turned ready after a refused list is caught.
    // The watchers' backoff makes that take seconds (about 9 s here), hence the longer bound.
    let deadline = std::time::Instant::now() + 4 * WAIT;
    loop {
        let denied: Vec<String> = env.sim.denied().into_iter().filter(|d| d.contains(UNWATCHED)).collect();
        if !denied.is_empty() && denied.iter().all(|d| denied.iter().filter(|x| *x == d).count() >= 2) {
            break;
        }
        if std::time::Instant::now() > deadline {
            bail!("the controller did not retry each of its refused lists in {UNWATCHED}: {denied:#?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let h = env.handle.as_ref().unwrap();
    assert!(!h.ready.load(Ordering::SeqCst), "ready without {UNWATCHED}'s caches");
    let readyz = http_get(h.health_addr, "/readyz").await?;
    assert!(!readyz.starts_with("HTTP/1.1 200"), "{readyz}");
    let denied = env.sim.denied();
    assert!(
        !denied.is_empty() && denied.iter().all(|d| d.contains(UNWATCHED)),
        "only {UNWATCHED} is refused: {denied:?}"
    );

    // The same controller for the namespaces it is bound in turns ready.
    let mut a = args();
    a.namespace = vec![NS.into(), WATCHED.into()];
    let env = env_with_namespaces(&a).await?;
    env.until("ready", |e| {
        e.handle.as_ref().unwrap().ready.load(Ordering::SeqCst).then_some(())
    })
    .await?;
    let readyz = http_get(env.handle.as_ref().unwrap().health_addr, "/readyz").await?;
    assert!(readyz.starts_with("HTTP/1.1 200"), "{readyz}");
    Ok(())
}

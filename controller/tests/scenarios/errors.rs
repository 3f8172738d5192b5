//! Reconcile errors back off per object (docs/rules.md, "Reconcile errors").

use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::json;

use captf_sim::{FaultRule, Verb};

use super::support::*;

/// A fault budget no test exhausts: `BUDGET - remaining` is how many requests it answered.
const BUDGET: u32 = 100_000;
/// How long the retries are counted, from the first failed request.
const WINDOW: Duration = Duration::from_secs(10);

/// Every pass of a TerraformCluster starts with a live GET of it; a 403 there (an RBAC rule
/// missing) fails every pass. A flat 2 s retry would GET it 1 + 10/2 = 6 times in 10 s; the
/// backoff waits at least 1 s, 2 s, 4 s, 8 s (half of 2 s, 4 s, 8 s, 16 s), so at most 4 GETs
/// fit in the window (at 0 s, ≥ 1 s, ≥ 3 s, ≥ 7 s), and at least 3 (at most 2 s, then 4 s later).
#[tokio::test]
async fn a_persistent_403_backs_off_instead_of_retrying_every_two_seconds() -> Result<()> {
    let env = Env::new().await?;
    env.sim
        .faults()
        .inject(FaultRule::new(Verb::Get, "terraformclusters", 403, BUDGET).named("forbidden"));
    let calls = |e: &Env| BUDGET - e.sim.faults().remaining();
    env.sim.put(cluster_json("forbidden", json!({})))?;
    env.until("the first 403", |e| (calls(e) >= 1).then_some(())).await?;
    let first = Instant::now();

    // The measurement window is wall time because the controller retries API errors on wall
    // time; it counts requests, it does not stand for "nothing happened".
    tokio::time::sleep_until((first + WINDOW).into()).await;
    let n = calls(&env);
    assert!(
        n <= 4,
        "{n} GETs in {WINDOW:?}: a flat 2 s retry makes 5 or 6, the backoff at most 4"
    );
    assert!(n >= 3, "{n} GETs in {WINDOW:?}: the object is still retried");

    let metrics = env.metrics();
    assert!(
        metrics.contains(&format!("captf_reconcile_errors_total{{category=\"GetObject\"}} {n}")),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!("captf_reconcile_error_backoff_seconds_count {n}")),
        "one delay per failed pass: {metrics}"
    );
    assert!(
        env.jobs_of(captf_shared::Kind::TerraformCluster, "forbidden")
            .is_empty()
    );
    Ok(())
}

/// The backoff delays the object, it does not give up on it: once the error goes away its first
/// Job starts.
#[tokio::test]
async fn an_object_whose_error_goes_away_starts_its_job() -> Result<()> {
    let env = Env::new().await?;
    env.sim
        .faults()
        .inject(FaultRule::new(Verb::Get, "terraformclusters", 403, 2).named("recovers"));
    env.sim.put(cluster_json("recovers", json!({})))?;
    env.job(
        captf_shared::Kind::TerraformCluster,
        "recovers",
        captf_shared::Op::Apply,
        1,
    )
    .await?;
    assert_eq!(env.sim.faults().remaining(), 0);
    Ok(())
}

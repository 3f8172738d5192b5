//! The short soaks `cargo test` runs: a fixed seed, a few simulated hours, three groups of
//! objects, every fault at four times its default rate and every runner behaviour frequent; once
//! with two replicas serving every object, once with three shards and the rest, groups moving
//! between them. The long runs are `scripts/soak.sh` (docs/soak.md).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use captf_soak::chaos::{Rates, Runner, RunnerWeights};
use captf_soak::harness::{self, Config, Report};

/// The folder holding this workspace's binaries (`cargo test --workspace` builds them).
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let dir = exe
        .parent()
        .map(|d| {
            if d.ends_with("deps") {
                d.parent().unwrap_or(d)
            } else {
                d
            }
        })
        .expect("the test's folder")
        .to_path_buf();
    for (bin, package) in [
        ("captf-controller-sim", "captf-demo"),
        ("captf-webhook", "captf-webhook"),
    ] {
        assert!(
            dir.join(bin).is_file(),
            "{} not found: build it with `cargo build -p {package}` (cargo test --workspace does)",
            dir.join(bin).display()
        );
    }
    dir
}

/// One soak at a time: each runs its controllers on wall-clock leases and settles within
/// wall-clock patience, so two at once on a small machine would make each other slow.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Every runner behaviour frequent: the first Jobs of the run take each in turn, so each shows
/// however many Jobs the controllers' timing allows; after that each Job's behaviour is the
/// seed's choice by its name, with every failure behaviour weighted about one Job in nine so
/// that they stay frequent. Blocked and plan-changed plans only come from applies.
fn frequent_failures() -> RunnerWeights {
    let weight = |r: Runner| match r {
        Runner::Success => 10,
        _ => 12,
    };
    RunnerWeights(BTreeMap::from(Runner::ALL.map(|r| (r, weight(r)))))
}

/// What both short soaks share: three groups, every fault at four times its rate, frequent
/// runner failures, and runner limits low enough to bind (three groups could run six Jobs at
/// once).
fn short() -> Config {
    Config {
        groups: 3,
        step: Duration::from_secs(300),
        rates: Rates::default().scaled(4.0),
        runners: frequent_failures(),
        bin_dir: Some(bin_dir()),
        // Keep the controllers' and webhook's logs to read a failure.
        logs: std::env::var_os("CAPTF_SOAK_LOGS").map(PathBuf::from),
        runner_limits: captf_soak::invariants::RunnerLimits {
            total: 3,
            per_namespace: 2,
        },
        ..Config::default()
    }
}

/// Run a soak, print its report, and fail on any invariant violation.
async fn run_without_violations(cfg: Config) -> Report {
    let report = harness::run(cfg).await.expect("the soak runs");
    println!("{}", report.render());
    assert!(
        report.violations.is_empty(),
        "invariant violations:\n{}",
        report.render()
    );
    report
}

/// What both soaks must have exercised: Jobs of every ending, leaders killed and replaced,
/// metrics scraped, and objects that waited for a runner slot. How many Jobs run in the
/// simulated hours depends on how fast the machine lets the controllers work (44 on a loaded CI
/// machine, 74 on an idle one), so the checks are on what ran, not on counts.
fn exercised_in_both(report: &Report) {
    for end in ["succeeded", "failed", "neither"] {
        assert!(
            report.ends.get(end).copied().unwrap_or(0) > 0,
            "no Job {end}:\n{}",
            report.render()
        );
    }
    assert!(
        report.leader_changes >= 1 && report.restarts >= 1,
        "{}",
        report.render()
    );
    assert!(!report.metrics.is_empty(), "{}", report.render());
    assert!(
        report.queued > 0,
        "nothing ever waited for a runner slot:\n{}",
        report.render()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_fixed_seed_soak_with_every_fault_keeps_every_invariant() {
    let _one = ONE_AT_A_TIME.lock().await;
    let report = run_without_violations(Config {
        seed: 20_261_130,
        duration: Duration::from_secs(8 * 3600),
        drain: Duration::from_secs(3 * 3600),
        ..short()
    })
    .await;
    // It did exercise what it claims to: the runner behaviours and every fault, besides what
    // `exercised_in_both` checks.
    // A plan-changed apply needs a blocked plan approved and applied within the run, which the
    // controllers' timing decides; the first Jobs take every other behaviour in turn.
    for r in Runner::ALL.into_iter().filter(|r| *r != Runner::PlanChanged) {
        assert!(
            report.runners.get(&r).copied().unwrap_or(0) > 0,
            "no {:?}:\n{}",
            r,
            report.render()
        );
    }
    for fault in [
        "spec change",
        "deletion (re-created later)",
        "workstation takes the state lock",
        "API latency",
        "watches dropped",
        "watches expired (410 Gone)",
        "running pod evicted",
        "kill -9 of the leader (Anytime)",
    ] {
        assert!(
            report.faults.get(fault).copied().unwrap_or(0) > 0,
            "no {fault}:\n{}",
            report.render()
        );
    }
    for code in [409, 429, 500, 503] {
        assert!(
            report.faults.contains_key(&format!("API error {code}")),
            "{}",
            report.render()
        );
    }
    // The runner limits bound (and the invariant above held).
    exercised_in_both(&report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_fixed_seed_soak_with_shards_and_relabelling_keeps_every_invariant() {
    let _one = ONE_AT_A_TIME.lock().await;
    let report = run_without_violations(Config {
        seed: 20_260_611,
        // Shorter than the soak above: four instances of two replicas each take about twice
        // the processor time of two replicas, on the same two cores.
        duration: Duration::from_secs(6 * 3600),
        drain: Duration::from_secs(2 * 3600),
        // Each shard counts the others' Jobs against the limits.
        shards: 3,
        ..short()
    })
    .await;
    // Groups moved between shards, and objects were served by more than one shard's leader.
    assert!(
        report
            .faults
            .get("relabel (a group moves to another shard)")
            .is_some_and(|n| *n > 0),
        "no relabel:\n{}",
        report.render()
    );
    assert!(
        report.served_by_several > 0,
        "no object's Jobs were started by two instances:\n{}",
        report.render()
    );
    let serving = report.instances.iter().filter(|(_, _, _, jobs)| *jobs > 0).count();
    assert!(serving > 1, "one instance started every Job:\n{}", report.render());
    // Each instance elected a leader; leaders were killed and replaced.
    assert_eq!(report.instances.len(), 4, "{}", report.render());
    assert!(
        report.instances.iter().all(|(_, _, leaders, _)| *leaders > 0),
        "an instance never led:\n{}",
        report.render()
    );
    // The runner limits bound, each instance counting the others' Jobs too.
    exercised_in_both(&report);
}

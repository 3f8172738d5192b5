//! The short soak `cargo test` runs: a fixed seed, a few simulated hours, three groups of
//! objects, every fault at four times its default rate and every runner behaviour frequent.
//! The long runs are `scripts/soak.sh` (docs/soak.md).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use captf_soak::chaos::{Rates, Runner, RunnerWeights};
use captf_soak::harness::{self, Config};

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
    for bin in ["captf-controller", "captf-webhook"] {
        assert!(
            dir.join(bin).is_file(),
            "{} not found: build it with `cargo build -p {bin}` (cargo test --workspace does)",
            dir.join(bin).display()
        );
    }
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_fixed_seed_soak_with_every_fault_keeps_every_invariant() {
    // The first Jobs of the run take each runner behaviour in turn, so each shows however many
    // Jobs the controllers' timing allows; after that each Job's behaviour is the seed's choice
    // by its name, with every failure behaviour weighted about one Job in nine so that they stay
    // frequent. Blocked and plan-changed plans only come from applies.
    let weight = |r: Runner| match r {
        Runner::Success => 10,
        _ => 12,
    };
    let weights = RunnerWeights(BTreeMap::from(Runner::ALL.map(|r| (r, weight(r)))));
    let cfg = Config {
        seed: 20_261_130,
        duration: Duration::from_secs(8 * 3600),
        drain: Duration::from_secs(3 * 3600),
        groups: 3,
        step: Duration::from_secs(300),
        rates: Rates::default().scaled(4.0),
        runners: weights,
        bin_dir: Some(bin_dir()),
        // Low enough to bind: three groups could run six Jobs at once.
        runner_limits: captf_soak::invariants::RunnerLimits {
            total: 3,
            per_namespace: 2,
        },
        ..Config::default()
    };
    let report = harness::run(cfg).await.expect("the soak runs");
    println!("{}", report.render());
    assert!(
        report.violations.is_empty(),
        "invariant violations:\n{}",
        report.render()
    );
    // It did exercise what it claims to: Jobs of every ending, the runner behaviours, every
    // fault, failovers. How many Jobs run in the simulated hours depends on how fast the machine
    // lets the controllers work (44 on a loaded CI machine, 74 on an idle one), so the check is
    // on what ran, not on a count.
    for end in ["succeeded", "failed", "neither"] {
        assert!(
            report.ends.get(end).copied().unwrap_or(0) > 0,
            "no Job {end}:\n{}",
            report.render()
        );
    }
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
    assert!(
        report.leader_changes >= 1 && report.restarts >= 1,
        "{}",
        report.render()
    );
    assert!(!report.metrics.is_empty(), "{}", report.render());
    // The runner limits bound: objects waited for a slot (and the invariant above held).
    assert!(
        report.queued > 0,
        "nothing ever waited for a runner slot:\n{}",
        report.render()
    );
}

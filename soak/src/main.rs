//! `captf-soak`: run the chaos soak with a seed and a duration; prints the figures and every
//! invariant violation, and exits 1 when there was one.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use captf_soak::harness::{self, Config};

#[derive(Parser, Debug)]
#[command(
    name = "captf-soak",
    version,
    about = "Chaos soak: real controller replicas (two, or a few per shard), the webhook and the simulator, days of simulated time with faults"
)]
struct Cli {
    /// The seed of every random choice (faults, runner behaviours, object settings).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Simulated hours with faults.
    #[arg(long, default_value_t = 24.0)]
    hours: f64,
    /// Simulated hours at the end with faults off, for everything to settle before the checks.
    #[arg(long, default_value_t = 4.0)]
    drain_hours: f64,
    /// Objects (rounded up to whole groups of a cluster, a machine pool and a machine).
    #[arg(long, default_value_t = 12)]
    objects: usize,
    /// Multiply every fault rate by this.
    #[arg(long, default_value_t = 1.0)]
    fault_scale: f64,
    /// `kill -9`s of the leader per simulated hour, instead of the default rate times
    /// `--fault-scale` (0: one replica leads throughout, so its memory is watched over the whole
    /// run).
    #[arg(long)]
    kills_per_hour: Option<f64>,
    /// The longest ordinary stretch of simulated time between two looks (seconds).
    #[arg(long, default_value_t = 300)]
    step_seconds: u64,
    /// The controllers' `--max-running-jobs` (0: no controller-wide limit).
    #[arg(long, default_value_t = 0)]
    max_running_jobs: u32,
    /// The controllers' `--max-running-jobs-per-namespace` (0: no limit).
    #[arg(long, default_value_t = 10)]
    max_running_jobs_per_namespace: u32,
    /// Shards: 0 runs two replicas serving every object; N runs an instance per shard
    /// (`sharding.captf.io/key=shard-<i>`) and one for the rest (`!sharding.captf.io/key`),
    /// each group of objects in one of them, and moves groups between them by relabelling.
    #[arg(long, default_value_t = 0)]
    shards: usize,
    /// Replicas of each shard's instance (the rest's has two).
    #[arg(long, default_value_t = 2)]
    shard_replicas: usize,
    /// Keep the controllers' and the webhook's logs in this folder.
    #[arg(long)]
    logs: Option<PathBuf>,
    /// Print a line per simulated hour: the wall clock (to find it in the `--logs`), Jobs,
    /// changes, the leader, and the watch drops and expiries so far.
    #[arg(long)]
    progress: bool,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let defaults = Config::default();
    let mut rates = defaults.rates.scaled(cli.fault_scale);
    if let Some(k) = cli.kills_per_hour {
        rates.kill_leader = k.max(0.0);
    }
    let cfg = Config {
        seed: cli.seed,
        duration: Duration::from_secs_f64(cli.hours.max(0.0) * 3600.0),
        drain: Duration::from_secs_f64(cli.drain_hours.max(0.0) * 3600.0),
        groups: cli.objects.div_ceil(3).max(1),
        step: Duration::from_secs(cli.step_seconds.max(20)),
        rates,
        logs: cli.logs,
        progress: cli.progress,
        runner_limits: captf_soak::invariants::RunnerLimits {
            total: cli.max_running_jobs,
            per_namespace: cli.max_running_jobs_per_namespace,
        },
        shards: cli.shards,
        shard_replicas: cli.shard_replicas,
        ..defaults
    };
    match harness::run(cfg).await {
        Ok(report) => {
            print!("{}", report.render());
            if report.violations.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("captf-soak: {e:#}");
            ExitCode::from(2)
        }
    }
}

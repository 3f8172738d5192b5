//! Controller scale (docs/architecture.md, "Targets"; the figures in docs/performance.md),
//! a measurement that prints figures and asserts no timing:
//!
//! ```text
//! scripts/bench-scale.sh                       # 1,000, 10,000 and 100,000 objects; 1, 2, 4 shards on 10,000
//! CAPTF_SCALE_SIZES=1000 CAPTF_SCALE_SHARDS=1,2 scripts/bench-scale.sh
//! ```
//!
//! For each size N (`CAPTF_SCALE_SIZES`, comma-separated): a simulator in this process and one
//! real `captf-controller` process; N TerraformClusters (drift checks off, runner scripted to
//! succeed at once) until every one is `Ready=True`; then R of them (`CAPTF_SCALE_RUNNING`,
//! 1,000, at most N) get new inputs and a runner that hangs, and E (`CAPTF_SCALE_EVICTIONS`,
//! 300) of their Jobs are ended one by one by evicting the pod at `CAPTF_SCALE_RATE` (20) per
//! second: the wall time from each eviction to the object's next Job, while about R Jobs run.
//! Printed per size: time to all Ready, requests per object, controller CPU and memory, the
//! latency percentiles; then how each grows from the smallest size to the others.
//!
//! Then sharding: `CAPTF_SCALE_SHARD_OBJECTS` (10,000) objects spread over S shard labels, one
//! controller per shard (`--watch-label-selector sharding.captf.io/key=shard-<i>`), for each S
//! in `CAPTF_SCALE_SHARDS` (`1,2,4`; empty: none): applies per minute and CPU per shard.
//!
//! Other knobs: `CAPTF_SCALE_CONCURRENCY` (each controller's `--concurrency`, 8),
//! `CAPTF_SCALE_TIMEOUT` (seconds one wait may take; default grows with N), `CAPTF_SCALE_LOGS`
//! (keep the controllers' logs in that folder; `RUST_LOG` sets their level, default warn).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod measure;

use std::time::Duration;

use anyhow::Result;

use measure::{LatencyPhase, Options, SizeRun};

/// The simulator runs in this process: with glibc's malloc, a tenth of its time went to the
/// kernel handing back pages malloc had returned (the controller uses mimalloc too).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn list(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .filter_map(|s| s.trim().replace('_', "").parse().ok())
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn print_size(r: &SizeRun) {
    let l = &r.latency;
    println!(
        "N={}: all Ready in {:.1}s (creating them took {:.1}s), {} Jobs, {} more once the simulator was quiet; \
         {:.1} API requests per object; controller CPU {:.1}s to Ready ({:.2} ms per object), simulator {:.1}s, \
         VmRSS {:.1} MiB at Ready ({:.1} KiB per object)",
        r.objects,
        r.ready.as_secs_f64(),
        r.created.as_secs_f64(),
        r.jobs,
        r.jobs_after_ready,
        r.requests_per_object,
        r.cpu_to_ready,
        r.cpu_to_ready * 1000.0 / r.objects as f64,
        r.sim_cpu_to_ready,
        r.rss_ready_mib,
        r.rss_ready_mib * 1024.0 / r.objects as f64,
    );
    println!(
        "  requests per object by kind: {}",
        r.requests_by_kind
            .iter()
            .filter(|(_, x)| *x >= 0.005)
            .map(|(k, x)| format!("{k} {x:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  finish → next Job with {} running ({} evictions, at least {} running at each): p50 {:.0} ms, \
         p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms; {} without a next Job within 30 s; {} events lost by the stamp listener",
        r.running,
        l.evictions,
        l.min_running,
        ms(l.p50),
        ms(l.p90),
        ms(l.p99),
        ms(l.max),
        l.missing,
        l.lagged
    );
    println!(
        "  controller VmHWM {:.1} MiB (peak of the whole run), CPU {:.1}s in all; {} WARN/ERROR log lines{}",
        r.hwm_mib,
        r.cpu_total,
        r.warnings,
        r.first_warning
            .as_deref()
            .map(|w| format!(", first: {w}"))
            .unwrap_or_default()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let sizes = list("CAPTF_SCALE_SIZES", "1000,10000,100000");
    let shard_counts = list("CAPTF_SCALE_SHARDS", "1,2,4");
    let shard_objects = env_or("CAPTF_SCALE_SHARD_OBJECTS", 10_000) as usize;
    let phase = LatencyPhase {
        running: env_or("CAPTF_SCALE_RUNNING", 1000) as usize,
        evictions: env_or("CAPTF_SCALE_EVICTIONS", 300) as usize,
        rate: env_or("CAPTF_SCALE_RATE", 20),
    };
    let timeout_for = |n: usize| Duration::from_secs(env_or("CAPTF_SCALE_TIMEOUT", 300 + n as u64 / 20));
    let logs = std::env::var_os("CAPTF_SCALE_LOGS").map(std::path::PathBuf::from);
    if let Some(dir) = &logs {
        std::fs::create_dir_all(dir)?;
    }
    let opts = |n: usize| Options {
        controller_bin: measure::controller_bin(),
        concurrency: env_or("CAPTF_SCALE_CONCURRENCY", 8),
        timeout: timeout_for(n),
        logs: logs.clone(),
    };
    println!(
        "scale: sizes {sizes:?}, R={} running, E={} evictions at {}/s, --concurrency {}; shards {shard_counts:?} on {shard_objects} objects; {} cores",
        phase.running,
        phase.evictions,
        phase.rate,
        opts(0).concurrency,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );

    let mut runs = Vec::new();
    for &n in &sizes {
        let r = measure::size_run(&opts(n), n, &phase).await?;
        print_size(&r);
        runs.push(r);
    }
    if let Some(base) = runs.first().filter(|_| runs.len() > 1) {
        println!(
            "growth from N={} (×: the figure at N over the figure at N={}; per object: flat is 1.0):",
            base.objects, base.objects
        );
        for r in &runs[1..] {
            let k = r.objects as f64 / base.objects as f64;
            let per = |at_n: f64, at_base: f64| (at_n / k) / at_base.max(f64::EPSILON);
            println!(
                "  N={} ({k:.0}× the objects): time to Ready per object ×{:.2}, controller CPU per object ×{:.2}, \
                 requests per object ×{:.2}, VmRSS per object ×{:.2}, VmHWM ×{:.2}; finish → next Job p50 ×{:.2}, p99 ×{:.2}",
                r.objects,
                per(r.ready.as_secs_f64(), base.ready.as_secs_f64()),
                per(r.cpu_to_ready, base.cpu_to_ready),
                r.requests_per_object / base.requests_per_object.max(f64::EPSILON),
                per(r.rss_ready_mib, base.rss_ready_mib),
                r.hwm_mib / base.hwm_mib.max(f64::EPSILON),
                ms(r.latency.p50) / ms(base.latency.p50).max(f64::EPSILON),
                ms(r.latency.p99) / ms(base.latency.p99).max(f64::EPSILON),
            );
        }
    }

    for &s in &shard_counts {
        let r = measure::shard_run(&opts(shard_objects), shard_objects, s).await?;
        let per: Vec<String> = r
            .per_shard
            .iter()
            .enumerate()
            .map(|(i, f)| {
                format!(
                    "shard-{i}: {} objects, {} Jobs, CPU {:.1}s, VmHWM {:.0} MiB, {} WARN/ERROR",
                    f.objects, f.jobs, f.cpu, f.hwm_mib, f.warnings
                )
            })
            .collect();
        println!(
            "shards={}: {} objects Ready in {:.1}s = {:.0} applies per minute; simulator + harness CPU {:.1}s; {}",
            r.shards,
            r.objects,
            r.ready.as_secs_f64(),
            r.applies_per_minute,
            r.sim_cpu,
            per.join("; ")
        );
    }
    Ok(())
}

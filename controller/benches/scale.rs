//! Controller scale (docs/architecture.md), a measurement that prints figures and asserts no timing:
//!
//! ```text
//! CAPTF_SCALE_OBJECTS=1000 cargo bench -p captf-controller --bench scale
//! ```
//! (or `scripts/bench-scale.sh 1000`). The simulator runs in this process; the controller is the
//! real `captf-controller` binary in its own process (KUBECONFIG at the simulator, the hidden
//! `--sim-clock-url`), so its memory is its own: VmHWM from `/proc/<pid>/status`.
//!
//! 1. **Steady state**: N TerraformClusters (drift checks off), runner scripted to succeed at
//!    once; the time until all N are `Ready=True`, then the controller's VmRSS and VmHWM.
//! 2. **Finish → next Job**: R of them (default 1,000) get new inputs and a runner that hangs,
//!    so R Jobs run. Then E of those Jobs are ended one by one by evicting their pod (at a set
//!    rate, wall time; the simulated clock never moves, so no clock jump re-reconciles
//!    everything): an interrupted apply is retried at once, and the simulator stamps the wall
//!    instant the next Job of the object is created. Printed: p50/p90/p99/max of eviction →
//!    next-Job creation, while about R Jobs keep running.
//!
//! Knobs (env): `CAPTF_SCALE_OBJECTS` (N, 1000), `CAPTF_SCALE_RUNNING` (R, 1000, at most N),
//! `CAPTF_SCALE_EVICTIONS` (E, 300), `CAPTF_SCALE_RATE` (evictions per second, 20),
//! `CAPTF_SCALE_CONCURRENCY` (the controller's `--concurrency`, 8), `CAPTF_SCALE_SLOTS` (the
//! controller's `--max-running-jobs-per-namespace`, 0: no limit, so R Jobs run), `CAPTF_SCALE_TIMEOUT`
//! (seconds per phase, 900), `CAPTF_SCALE_LOG` (keep the controller's log there; `RUST_LOG`
//! sets its level, default warn).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use captf_sim::{RunnerScript, Sim};

const NS: &str = "default";
const TC: &str = "infrastructure.cluster.x-k8s.io/terraformclusters";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn cluster(name: &str, region: &str) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "TerraformCluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "module": {"source": "git::https://example.com/net.git"},
            "variables": {"region": region},
            "drift": {"interval": "0"},
        },
    })
}

fn ready(c: &Value) -> bool {
    c.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// `VmRSS` and `VmHWM` of a process, in MiB.
fn memory_mib(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// User + system CPU seconds of a process so far.
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

async fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> Result<Duration> {
    let t = Instant::now();
    while !done() {
        if t.elapsed() > timeout {
            bail!("timed out after {:.0}s waiting for {what}", timeout.as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(t.elapsed())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let n = env_or("CAPTF_SCALE_OBJECTS", 1000) as usize;
    let running = (env_or("CAPTF_SCALE_RUNNING", 1000) as usize).min(n);
    let evictions = env_or("CAPTF_SCALE_EVICTIONS", 300) as usize;
    let rate = env_or("CAPTF_SCALE_RATE", 20).max(1);
    let concurrency = env_or("CAPTF_SCALE_CONCURRENCY", 8);
    let timeout = Duration::from_secs(env_or("CAPTF_SCALE_TIMEOUT", 900));

    let sim = Sim::builder()
        .start_time("2026-01-01T00:00:00Z".parse()?)
        // Enough replay for watches that fall behind a burst of N objects' writes.
        .history((n * 40).max(10_000))
        .start()
        .await?;
    sim.create_namespace(NS);
    sim.set_default_script(
        RunnerScript::succeed_with_outputs(BTreeMap::from([(
            "control_plane_endpoint".to_string(),
            json!({"host": "10.0.0.1", "port": 6443}),
        )]))
        .after(Duration::ZERO),
    );
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig)?;
    // `CAPTF_SCALE_LOG=<file>` keeps the controller's log (with `RUST_LOG`).
    let log_path = std::env::var("CAPTF_SCALE_LOG")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| dir.path().join("controller.log"));
    let log = std::fs::File::create(&log_path)?;
    let child = Command::new(env!("CARGO_BIN_EXE_captf-controller"))
        .args([
            "run",
            "--namespace",
            NS,
            "--metrics-addr",
            "127.0.0.1:0",
            "--health-addr",
            "127.0.0.1:0",
        ])
        .args(["--sim-clock-url", &sim.url(), "--concurrency", &concurrency.to_string()])
        .args([
            "--max-running-jobs-per-namespace".to_string(),
            env_or("CAPTF_SCALE_SLOTS", 0).to_string(),
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("failed to start captf-controller")?;
    let controller = Controller(child);
    let pid = controller.0.id();
    println!(
        "scale: N={n} objects, R={running} running, E={evictions} evictions at {rate}/s, --concurrency {concurrency}, controller pid {pid}"
    );

    // ---- 1. steady state ----
    let t0 = Instant::now();
    for i in 0..n {
        sim.put(cluster(&format!("c{i}"), "eu-west-1"))?;
    }
    let created = t0.elapsed();
    wait_until("every object Ready", timeout, || {
        sim.count_where(TC, Some(NS), ready) >= n
    })
    .await?;
    let all_ready = t0.elapsed();
    let jobs = sim.count_where("batch/jobs", Some(NS), |_| true);
    let (rss, hwm) = memory_mib(pid).unwrap_or_default();
    println!(
        "steady state: {n} objects Ready {:.1}s after the first was created (creating them took {:.1}s); {jobs} Jobs; controller VmRSS {rss:.1} MiB, VmHWM {hwm:.1} MiB",
        all_ready.as_secs_f64(),
        created.as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = sim.count_where("batch/jobs", Some(NS), |_| true);
    let (rss2, hwm2) = memory_mib(pid).unwrap_or_default();
    println!(
        "  2s later: {later} Jobs (steady: {}); VmRSS {rss2:.1} MiB, VmHWM {hwm2:.1} MiB",
        later == jobs
    );

    // ---- 2. finish → next Job with R Jobs running ----
    sim.set_default_script(RunnerScript::hang());
    let t1 = Instant::now();
    for i in 0..running {
        sim.put(cluster(&format!("c{i}"), "eu-west-2"))?;
    }
    wait_until(&format!("{running} Jobs running"), timeout, || {
        sim.running_pods().len() >= running
    })
    .await?;
    println!(
        "{running} apply Jobs running {:.1}s after their inputs changed",
        t1.elapsed().as_secs_f64()
    );

    // The wall instant each object's Jobs were created, stamped by the simulator.
    let created_at: Arc<Mutex<HashMap<String, Vec<Instant>>>> = Arc::default();
    let lagged = Arc::new(Mutex::new(0u64));
    let mut changes = sim.changes();
    let listener = {
        let created_at = created_at.clone();
        let lagged = lagged.clone();
        tokio::spawn(async move {
            loop {
                match changes.recv().await {
                    Ok(e) => {
                        if e.res != "batch/jobs" || e.kind != captf_sim::store::EventType::Added {
                            continue;
                        }
                        if let Some(obj) = e
                            .object
                            .pointer("/metadata/labels/captf.io~1object")
                            .and_then(Value::as_str)
                        {
                            created_at
                                .lock()
                                .unwrap()
                                .entry(obj.to_string())
                                .or_default()
                                .push(e.wall);
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(k)) => *lagged.lock().unwrap() += k,
                    Err(_) => return,
                }
            }
        })
    };
    let mut evicted: Vec<(String, Instant)> = Vec::with_capacity(evictions);
    let every = Duration::from_secs_f64(1.0 / rate as f64);
    let mut tick = tokio::time::interval(every);
    let mut min_running = usize::MAX;
    for k in 0..evictions {
        tick.tick().await;
        let pods = sim.running_pods();
        min_running = min_running.min(pods.len());
        let Some((ns, pod)) = pods.get((k * 7919) % pods.len().max(1)).cloned() else {
            continue;
        };
        let Some(obj) = sim.get("/pods", &ns, &pod).and_then(|p| {
            p.pointer("/metadata/labels/captf.io~1object")
                .and_then(Value::as_str)
                .map(String::from)
        }) else {
            continue;
        };
        let at = Instant::now();
        if sim.evict(&ns, &pod) {
            evicted.push((obj, at));
        }
    }
    // Let the last ones get their next Job.
    let next_of = |obj: &str, at: Instant| -> Option<Duration> {
        let m = created_at.lock().unwrap();
        m.get(obj)?
            .iter()
            .filter(|t| **t >= at)
            .min()
            .map(|t| t.duration_since(at))
    };
    let _ = wait_until("a next Job for every eviction", Duration::from_secs(30), || {
        evicted.iter().all(|(o, at)| next_of(o, *at).is_some())
    })
    .await;
    listener.abort();
    let mut lat: Vec<Duration> = evicted.iter().filter_map(|(o, at)| next_of(o, *at)).collect();
    lat.sort();
    let missing = evicted.len() - lat.len();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (rss3, hwm3) = memory_mib(pid).unwrap_or_default();
    println!(
        "finish → next Job (wall, {} evictions, at least {min_running} Jobs running at each): p50 {:.0} ms, p90 {:.0} ms, p99 {:.0} ms, max {:.0} ms; {missing} without a next Job within 30s; {} change events lost by the stamp listener",
        evicted.len(),
        ms(percentile(&lat, 0.50)),
        ms(percentile(&lat, 0.90)),
        ms(percentile(&lat, 0.99)),
        ms(lat.last().copied().unwrap_or_default()),
        *lagged.lock().unwrap()
    );
    println!("controller at the end: VmRSS {rss3:.1} MiB, VmHWM {hwm3:.1} MiB (peak of the whole run)");
    println!(
        "CPU seconds: controller {:.1}, simulator + this harness {:.1}, wall {:.1}",
        cpu_seconds(&pid.to_string()).unwrap_or_default(),
        cpu_seconds("self").unwrap_or_default(),
        t0.elapsed().as_secs_f64()
    );
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let warnings = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .count();
    println!("controller log: {warnings} WARN/ERROR lines");
    if let Some(first) = log.lines().find(|l| l.contains("WARN") || l.contains("ERROR")) {
        println!("  first: {}", first.chars().take(300).collect::<String>());
    }
    drop(controller);
    Ok(())
}

//! The scale runs, shared by the bench that prints their figures (`benches/scale/main.rs`) and
//! the short version `cargo test` runs (`tests/scale.rs`). Each run starts its own simulator in
//! this process and the real `captf-controller` binary as its own processes (KUBECONFIG at the
//! simulator, through `captf-controller-sim`: the controller's runtime with the simulator's clock,
//! built by scripts/bench-scale.sh next to `captf-controller`), so a controller's memory and CPU are its own.
//!
//! Nothing here judges a figure: a run fails only when what it waits for never happens.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use captf_shared::{Kind, names};
use captf_sim::{RunnerScript, Sim};

pub const NS: &str = "default";
const TC: &str = "infrastructure.cluster.x-k8s.io/terraformclusters";
/// The shard label (the convention the controller's docs describe).
pub const SHARD_LABEL: &str = "sharding.captf.io/key";

pub fn cluster(name: &str, region: &str, shard: Option<&str>) -> Value {
    let mut metadata = json!({"name": name, "namespace": NS});
    if let Some(s) = shard {
        metadata["labels"] = json!({ SHARD_LABEL: s });
    }
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "TerraformCluster",
        "metadata": metadata,
        "spec": {
            "module": {"source": "git::https://example.com/net.git"},
            "variables": {"region": region},
            "drift": {"interval": "0"},
        },
    })
}

pub fn ready(c: &Value) -> bool {
    c.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// `VmRSS` and `VmHWM` of a process (`pid` or `self`), in MiB.
pub fn memory_mib(pid: &str) -> Option<(f64, f64)> {
    captf_testsupport::proc_stats::memory_mib(pid)
}

/// User + system CPU seconds of a process (`pid` or `self`) so far.
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    captf_testsupport::proc_stats::cpu_seconds(pid).map(|(own, _)| own)
}

async fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> Result<Duration> {
    let t = Instant::now();
    while !done() {
        if t.elapsed() > timeout {
            bail!("timed out after {:.0}s waiting for {what}", timeout.as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(t.elapsed())
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// A controller process, killed when dropped.
struct Controller {
    child: Child,
    log: PathBuf,
}

impl Controller {
    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    fn warnings(&self) -> (usize, Option<String>) {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let bad = |l: &&str| l.contains("WARN") || l.contains("ERROR");
        let first = log.lines().find(bad).map(|l| l.chars().take(300).collect());
        (log.lines().filter(bad).count(), first)
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The watch events the simulator keeps for replay with N objects.
fn history_for(n: usize) -> usize {
    (n * 16).clamp(10_000, 200_000)
}

/// What every run shares.
#[derive(Clone, Debug)]
pub struct Options {
    pub controller_bin: PathBuf,
    /// `--concurrency` of each controller.
    pub concurrency: u64,
    /// How long one wait may take.
    pub timeout: Duration,
    /// Keep the controllers' logs in this folder (else a temporary one).
    pub logs: Option<PathBuf>,
}

struct World {
    sim: Sim,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

async fn world(history: usize) -> Result<World> {
    let sim = Sim::builder()
        .start_time("2026-01-01T00:00:00Z".parse()?)
        .history(history)
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
    Ok(World { sim, dir, kubeconfig })
}

fn start_controller(o: &Options, w: &World, name: &str, selector: Option<&str>) -> Result<Controller> {
    let log = o.logs.as_deref().unwrap_or(w.dir.path()).join(format!("{name}.log"));
    let file = std::fs::File::create(&log)?;
    let mut cmd = Command::new(&o.controller_bin);
    cmd.args([
        "run",
        "--namespace",
        NS,
        "--metrics-addr",
        "127.0.0.1:0",
        "--health-addr",
        "127.0.0.1:0",
    ])
    .args([
        "--sim-clock-url",
        &w.sim.url(),
        "--concurrency",
        &o.concurrency.to_string(),
    ])
    // No runner slots: what is measured is the controller, not the limits.
    .args(["--max-running-jobs-per-namespace", "0"]);
    if let Some(s) = selector {
        cmd.args(["--watch-label-selector", s]);
    }
    let child = cmd
        .env("KUBECONFIG", &w.kubeconfig)
        .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .with_context(|| format!("failed to start {}", o.controller_bin.display()))?;
    Ok(Controller { child, log })
}

/// Finish → next-Job latency of one run.
#[derive(Clone, Debug, Default)]
pub struct Latency {
    pub evictions: usize,
    /// Evictions whose object got no next Job within 30 s.
    pub missing: usize,
    /// The fewest Jobs running at an eviction.
    pub min_running: usize,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
    /// Change events the stamping listener missed (its figures are then partial).
    pub lagged: u64,
}

/// The figures of one run at one size.
#[derive(Clone, Debug, Default)]
pub struct SizeRun {
    pub objects: usize,
    /// From the first create to every object `Ready=True`.
    pub ready: Duration,
    /// Creating the objects (in this process, through the simulator's store).
    pub created: Duration,
    pub jobs: usize,
    /// Requests the simulator served until every object was Ready, per object.
    pub requests_per_object: f64,
    /// The same by `VERB resource`, most first.
    pub requests_by_kind: Vec<(String, f64)>,
    /// Controller CPU seconds until every object was Ready.
    pub cpu_to_ready: f64,
    /// CPU seconds of this process (the simulator, and the harness) until then.
    pub sim_cpu_to_ready: f64,
    /// Controller VmRSS when every object was Ready, and VmHWM over the whole run (MiB).
    pub rss_ready_mib: f64,
    pub hwm_mib: f64,
    /// Jobs made after every object was Ready, counted once the simulator is quiet (0: nothing
    /// more to do).
    pub jobs_after_ready: usize,
    pub running: usize,
    pub latency: Latency,
    pub cpu_total: f64,
    pub warnings: usize,
    pub first_warning: Option<String>,
}

/// The finish → next-Job phase's shape.
#[derive(Clone, Debug)]
pub struct LatencyPhase {
    /// Jobs kept running (at most the objects).
    pub running: usize,
    pub evictions: usize,
    /// Evictions per second (wall).
    pub rate: u64,
}

/// N TerraformClusters to Ready on one controller, then R of them running a Job that hangs
/// while E are ended one by one by evicting their pod (an interrupted apply is retried at
/// once): the wall time from each eviction to the object's next Job.
pub async fn size_run(o: &Options, n: usize, phase: &LatencyPhase) -> Result<SizeRun> {
    // Enough replay for watches that fall behind a burst of writes (each object makes about a
    // dozen events); a watch further behind gets 410 Gone and lists again, as on a real server.
    // Capped: every event keeps its object and the one it replaced, and 1.6 million of them (at
    // 100,000 objects) do not fit in 24 GiB.
    let w = world(history_for(n)).await?;
    let c = start_controller(o, &w, &format!("controller-{n}"), None)?;
    let pid = c.pid();
    let sim = &w.sim;
    let mut out = SizeRun {
        objects: n,
        ..SizeRun::default()
    };

    let requests0 = sim.requests();
    let by_kind0 = sim.requests_by_kind();
    let sim_cpu0 = cpu_seconds("self").unwrap_or_default();
    let t0 = Instant::now();
    for i in 0..n {
        sim.put(cluster(&format!("c{i}"), "eu-west-1", None))?;
    }
    out.created = t0.elapsed();
    wait_until("every object Ready", o.timeout, || {
        sim.count_where(TC, Some(NS), ready) >= n
    })
    .await?;
    out.ready = t0.elapsed();
    out.requests_per_object = (sim.requests() - requests0) as f64 / n as f64;
    out.requests_by_kind = per_object_by_kind(&by_kind0, &sim.requests_by_kind(), n);
    out.cpu_to_ready = cpu_seconds(&pid).unwrap_or_default();
    out.sim_cpu_to_ready = cpu_seconds("self").unwrap_or_default() - sim_cpu0;
    out.rss_ready_mib = memory_mib(&pid).unwrap_or_default().0;
    out.jobs = sim.count_where("batch/jobs", Some(NS), |_| true);
    // Whatever the Ready writes set off has been delivered and answered: no request in flight,
    // every watch drained, and no request between two looks.
    let mut seen = sim.requests();
    wait_until("the simulator quiet after every object was Ready", o.timeout, || {
        let now = sim.requests();
        let settled = now == seen && sim.quiet();
        seen = now;
        settled
    })
    .await?;
    out.jobs_after_ready = sim.count_where("batch/jobs", Some(NS), |_| true) - out.jobs;

    // ---- finish → next Job with R Jobs running ----
    let running = phase.running.min(n);
    out.running = running;
    sim.set_default_script(RunnerScript::hang());
    for i in 0..running {
        sim.put(cluster(&format!("c{i}"), "eu-west-2", None))?;
    }
    wait_until(&format!("{running} Jobs running"), o.timeout, || {
        sim.running_pods().len() >= running
    })
    .await?;
    out.latency = evictions(sim, phase).await;
    let (_, hwm) = memory_mib(&pid).unwrap_or_default();
    out.hwm_mib = hwm;
    out.cpu_total = cpu_seconds(&pid).unwrap_or_default();
    (out.warnings, out.first_warning) = c.warnings();
    drop(c);
    Ok(out)
}

/// The requests made between two counts by `VERB resource`, per object, most first.
pub fn per_object_by_kind(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    n: usize,
) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = after
        .iter()
        .map(|(k, a)| {
            (
                k.clone(),
                a.saturating_sub(before.get(k).copied().unwrap_or(0)) as f64 / n.max(1) as f64,
            )
        })
        .filter(|(_, x)| *x > 0.0)
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

async fn evictions(sim: &Sim, phase: &LatencyPhase) -> Latency {
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
    let mut evicted: Vec<(String, Instant)> = Vec::with_capacity(phase.evictions);
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / phase.rate.max(1) as f64));
    let mut min_running = usize::MAX;
    for k in 0..phase.evictions {
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
    let next_of = |obj: &str, at: Instant| -> Option<Duration> {
        let m = created_at.lock().unwrap();
        m.get(obj)?
            .iter()
            .filter(|t| **t >= at)
            .min()
            .map(|t| t.duration_since(at))
    };
    // Let the last ones get their next Job.
    let _ = wait_until("a next Job for every eviction", Duration::from_secs(30), || {
        evicted.iter().all(|(o, at)| next_of(o, *at).is_some())
    })
    .await;
    listener.abort();
    let mut lat: Vec<Duration> = evicted.iter().filter_map(|(o, at)| next_of(o, *at)).collect();
    lat.sort();
    Latency {
        evictions: evicted.len(),
        missing: evicted.len() - lat.len(),
        min_running: if min_running == usize::MAX { 0 } else { min_running },
        p50: percentile(&lat, 0.50),
        p90: percentile(&lat, 0.90),
        p99: percentile(&lat, 0.99),
        max: lat.last().copied().unwrap_or_default(),
        lagged: *lagged.lock().unwrap(),
    }
}

/// The figures of one sharded run.
#[derive(Clone, Debug, Default)]
pub struct ShardRun {
    pub shards: usize,
    pub objects: usize,
    /// From the first create to every object `Ready=True`.
    pub ready: Duration,
    /// Applies (objects made Ready by their first apply) per minute of that time.
    pub applies_per_minute: f64,
    /// Per shard: objects labelled with it, apply Jobs its objects got, CPU seconds, VmHWM MiB.
    pub per_shard: Vec<ShardFigures>,
    /// CPU seconds of this process (the simulator) during the run.
    pub sim_cpu: f64,
}

#[derive(Clone, Debug, Default)]
pub struct ShardFigures {
    pub objects: usize,
    pub jobs: usize,
    pub cpu: f64,
    pub hwm_mib: f64,
    pub warnings: usize,
}

/// N TerraformClusters spread evenly over `shards` shard labels, one controller per shard
/// serving `sharding.captf.io/key=shard-<i>`: the time until every object is Ready.
pub async fn shard_run(o: &Options, n: usize, shards: usize) -> Result<ShardRun> {
    let shards = shards.max(1);
    let w = world(history_for(n)).await?;
    let mut controllers = Vec::with_capacity(shards);
    for s in 0..shards {
        let selector = format!("{SHARD_LABEL}=shard-{s}");
        controllers.push(start_controller(
            o,
            &w,
            &format!("shards-{shards}-{s}"),
            Some(&selector),
        )?);
    }
    let sim = &w.sim;
    let sim_cpu0 = cpu_seconds("self").unwrap_or_default();
    let t0 = Instant::now();
    for i in 0..n {
        let shard = format!("shard-{}", i % shards);
        sim.put(cluster(&format!("c{i}"), "eu-west-1", Some(&shard)))?;
    }
    wait_until("every object Ready", o.timeout, || {
        sim.count_where(TC, Some(NS), ready) >= n
    })
    .await?;
    let ready = t0.elapsed();
    let mut per_shard = Vec::with_capacity(shards);
    // Each object's id (the `captf.io/object` label of its Jobs) → its shard.
    let shard_of: HashMap<String, usize> = (0..n)
        .map(|i| {
            (
                names::object_id(Kind::TerraformCluster, NS, &format!("c{i}")),
                i % shards,
            )
        })
        .collect();
    for (s, c) in controllers.iter().enumerate() {
        let pid = c.pid();
        let jobs = sim.count_where("batch/jobs", Some(NS), |j| {
            j.pointer("/metadata/labels/captf.io~1object")
                .and_then(Value::as_str)
                .and_then(|id| shard_of.get(id))
                == Some(&s)
        });
        per_shard.push(ShardFigures {
            objects: (0..n).filter(|i| i % shards == s).count(),
            jobs,
            cpu: cpu_seconds(&pid).unwrap_or_default(),
            hwm_mib: memory_mib(&pid).unwrap_or_default().1,
            warnings: c.warnings().0,
        });
    }
    Ok(ShardRun {
        shards,
        objects: n,
        ready,
        applies_per_minute: n as f64 / ready.as_secs_f64().max(f64::EPSILON) * 60.0,
        per_shard,
        sim_cpu: cpu_seconds("self").unwrap_or_default() - sim_cpu0,
    })
}

/// The demo's `captf-controller-sim` (the controller's runtime following the simulator's clock),
/// next to the controller binary cargo built for this package's benches: scripts/bench-scale.sh
/// builds it there first.
pub fn controller_bin() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_captf-controller")).with_file_name("captf-controller-sim")
}

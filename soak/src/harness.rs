//! The soak driver (I/O): the simulator in this process with the real webhook registered, real
//! controller replicas with leader election under the chart's RBAC (two, or with shards a few
//! per shard and for the rest), and the seeded faults of [`crate::chaos`] played over simulated
//! time, every change recorded into a [`History`].

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use captf_core::sharding::{SHARD_LABEL, leader_lease_name};
use captf_demo::procs::{self, ControllerEnv, Proc};
use captf_demo::{certs, setup};
use captf_shared::{Kind, keys, names};
use captf_sim::store::{EventType, Rng, WatchEvent};
use captf_sim::{FaultRule, Sim};
use jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use crate::chaos::{self, Action, KillPoint, Rates, Runner, RunnerWeights};
use crate::history::{History, condition_true};
use crate::invariants::{self, Violation};

/// The namespace the soak's objects live in.
pub const NS: &str = "soak";
/// Where the simulated clock starts.
pub const START_TIME: &str = "2026-01-05T00:00:00Z";
/// kube-apiserver's default `--event-ttl`.
const EVENT_TTL: Duration = Duration::from_secs(3600);
/// How long one settle may take (wall time) before the clock moves on anyway: moving on while
/// the controller is still busy is one more fault, not an error.
const SETTLE_PATIENCE: Duration = Duration::from_secs(5);
/// How long a stretch of the drain waits (wall time) for the controller to settle.
const DRAIN_PATIENCE: Duration = Duration::from_secs(30);
/// How long the end of the drain waits (wall time) for the controller to settle.
const FINAL_PATIENCE: Duration = Duration::from_secs(120);

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    pub seed: u64,
    /// Simulated time with faults.
    pub duration: Duration,
    /// Simulated time at the end with no faults and only succeeding runners, for everything
    /// to settle before the end-state checks.
    pub drain: Duration,
    /// Groups of objects: each is a TerraformCluster, a TerraformMachinePool and a
    /// TerraformMachine of one cluster.
    pub groups: usize,
    /// The longest ordinary stretch of simulated time between two looks.
    pub step: Duration,
    pub rates: Rates,
    pub runners: RunnerWeights,
    /// The controllers' leader lease (wall seconds).
    pub lease_seconds: u64,
    /// Where `captf-controller-sim` and `captf-webhook` are (default: next to this executable).
    pub bin_dir: Option<PathBuf>,
    /// Keep the controllers' and webhook's logs in this folder.
    pub logs: Option<PathBuf>,
    /// Print a line per simulated hour.
    pub progress: bool,
    /// The controllers' limits on running runner Jobs (`--max-running-jobs`,
    /// `--max-running-jobs-per-namespace`), checked by
    /// `invariants::never_more_running_jobs_than_the_limits`.
    pub runner_limits: invariants::RunnerLimits,
    /// Shards: 0 runs one instance (two replicas, no selector); `n` runs an instance per shard
    /// (`sharding.captf.io/key=shard-<i>`) and one for the rest (`!sharding.captf.io/key`),
    /// each group of objects labelled with one of them, and relabels groups
    /// ([`Rates::relabel`]).
    pub shards: usize,
    /// Replicas of each shard's instance (the rest's, or the only instance, has two).
    pub shard_replicas: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            seed: 1,
            duration: Duration::from_secs(24 * 3600),
            drain: Duration::from_secs(4 * 3600),
            groups: 4,
            step: Duration::from_secs(300),
            rates: Rates::default(),
            runners: RunnerWeights::default(),
            lease_seconds: 2,
            bin_dir: None,
            logs: None,
            progress: false,
            // The controller's defaults.
            runner_limits: invariants::RunnerLimits {
                total: 0,
                per_namespace: 10,
            },
            shards: 0,
            shard_replicas: 2,
        }
    }
}

/// What a soak did and found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub simulated_hours: f64,
    pub wall: Duration,
    /// Objects at the start, and objects created again after a deletion.
    pub objects: usize,
    pub recreated: usize,
    pub jobs: usize,
    /// Jobs by how they ended (the rules' classification).
    pub ends: BTreeMap<&'static str, usize>,
    pub runners: BTreeMap<Runner, usize>,
    pub faults: BTreeMap<String, usize>,
    pub leader_changes: usize,
    pub restarts: usize,
    /// Ticks whose settle ran out of patience.
    pub unsettled: usize,
    /// Times an object waited for a runner slot (Queued).
    pub queued: usize,
    pub changes: u64,
    pub violations: Vec<Violation>,
    /// The highest resident set of any controller process (MiB).
    pub peak_rss_mib: f64,
    /// The longest-lived controller process: (simulated hours lived, RSS after a quarter of
    /// its life, RSS at its end), MiB.
    pub rss_growth: Option<(f64, f64, f64)>,
    /// The longest-lived controller process's RSS (MiB) at most every 6 simulated hours, to tell
    /// a plateau from a leak.
    pub rss_series: Vec<f64>,
    /// `captf_jobs_finished_total` of the replicas alive at the end, the bookings the history
    /// shows only it made, and those it or another instance's leader made (right after a
    /// relabel; none without shards).
    pub metrics: Vec<(String, u64, usize, usize)>,
    /// Shards run (0: one instance serves every object).
    pub shards: usize,
    /// Per controller instance: its name, replicas, leaders it had and Jobs started for the
    /// objects it served then.
    pub instances: Vec<(String, usize, usize, usize)>,
    /// Objects (incarnations) whose Jobs were started by more than one instance.
    pub served_by_several: usize,
}

impl Report {
    /// A readable summary.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut line = |l: String| {
            s.push_str(&l);
            s.push('\n');
        };
        line(format!(
            "seed {}: {:.1} simulated hours ({:.1} days) in {:.0}s of wall time",
            self.seed,
            self.simulated_hours,
            self.simulated_hours / 24.0,
            self.wall.as_secs_f64()
        ));
        line(format!(
            "objects: {} at the start, {} created again after a deletion; {} changes recorded",
            self.objects, self.recreated, self.changes
        ));
        line(format!("Jobs: {} created; ended {:?}", self.jobs, self.ends));
        line(format!(
            "objects that waited for a runner slot (Queued): {}",
            self.queued
        ));
        line("runner behaviours:".into());
        for (r, n) in &self.runners {
            line(format!("  {:>6}  {}", n, r.name()));
        }
        line("faults:".into());
        for (f, n) in &self.faults {
            line(format!("  {n:>6}  {f}"));
        }
        line(format!(
            "leader changes: {}; controller restarts after kill -9: {}; ticks that did not settle: {}",
            self.leader_changes, self.restarts, self.unsettled
        ));
        line(format!("controller peak RSS: {:.1} MiB", self.peak_rss_mib));
        if let Some((h, a, b)) = self.rss_growth {
            line(format!(
                "longest-lived controller process: {h:.1} simulated hours, RSS {a:.1} MiB after a quarter of it, {b:.1} MiB at its end"
            ));
            let series: Vec<String> = self.rss_series.iter().map(|m| format!("{m:.0}")).collect();
            line(format!(
                "  its RSS every 6 simulated hours (MiB): {}",
                series.join(", ")
            ));
        }
        if self.shards > 0 {
            line(format!("{} shards:", self.shards));
            for (name, replicas, leaders, jobs) in &self.instances {
                line(format!(
                    "  {name}: {replicas} replicas, {leaders} leaders, {jobs} Jobs started for the objects it served"
                ));
            }
            line(format!(
                "objects whose Jobs were started by more than one instance: {}",
                self.served_by_several
            ));
        }
        for (id, metric, booked, maybe) in &self.metrics {
            let maybe = if *maybe > 0 {
                format!(" and {maybe} it or another instance's leader made")
            } else {
                String::new()
            };
            line(format!(
                "replica {id}: captf_jobs_finished_total {metric}, bookings made while it led {booked}{maybe}"
            ));
        }
        line(format!("invariant violations: {}", self.violations.len()));
        for v in &self.violations {
            line(format!("  VIOLATION seed {} {v}", self.seed));
        }
        s
    }
}

/// A leader kill waiting for its moment, and who is which process.
#[derive(Default)]
struct Trap {
    armed: Option<KillPoint>,
    pids: HashMap<String, u32>,
    fired: Vec<KillPoint>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn kill9(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// Does this change open the window a kill point waits for?
fn at_point(point: KillPoint, ev: &WatchEvent) -> bool {
    let ann = |o: &Value| {
        o.pointer("/metadata/annotations")
            .and_then(|a| a.get(keys::ANNOTATION_OUTCOME))
            .is_some()
    };
    let holder = |o: &Value| {
        o.pointer("/spec/holderIdentity")
            .and_then(Value::as_str)
            .filter(|h| !h.is_empty())
            .map(String::from)
    };
    match point {
        KillPoint::Anytime => true,
        KillPoint::AfterOutcome => {
            ev.res == "batch/jobs"
                && ev.kind == EventType::Modified
                && ann(&ev.object)
                && !ev.old.as_ref().is_some_and(ann)
        }
        KillPoint::AfterRunLease => {
            ev.res == "coordination.k8s.io/leases"
                && ev.object["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("captf-run-"))
                && holder(&ev.object).is_some()
                && ev.old.as_ref().and_then(holder) != holder(&ev.object)
        }
        KillPoint::AfterJobCreate => ev.res == "batch/jobs" && ev.kind == EventType::Added,
    }
}

/// One controller instance: the objects of one selector, with its own leader Lease and
/// replicas.
#[derive(Clone, Debug)]
struct Instance {
    /// `shard-<i>`, `rest`, or `all` without shards.
    name: String,
    /// The shard label of the objects it serves (None: no shard).
    label: Option<String>,
    /// `--watch-label-selector`.
    selector: Option<String>,
    lease: String,
    replicas: usize,
}

/// The instances of a soak with `shards` shards: index `i < shards` is shard `i`, index
/// `shards` the rest (or, without shards, the only instance).
fn instances(shards: usize, shard_replicas: usize) -> Vec<Instance> {
    let mut out: Vec<Instance> = (0..shards)
        .map(|i| {
            let label = format!("shard-{i}");
            let selector = format!("{SHARD_LABEL}={label}");
            Instance {
                name: label.clone(),
                label: Some(label),
                lease: leader_lease_name(Some(&selector)),
                selector: Some(selector),
                replicas: shard_replicas.max(1),
            }
        })
        .collect();
    let selector = (shards > 0).then(|| format!("!{SHARD_LABEL}"));
    out.push(Instance {
        name: if shards > 0 { "rest" } else { "all" }.into(),
        label: None,
        lease: leader_lease_name(selector.as_deref()),
        selector,
        replicas: 2,
    });
    out
}

/// The index of the instance serving an object with shard label `label`.
fn serving(shards: usize, label: Option<&str>) -> usize {
    label
        .and_then(|l| l.strip_prefix("shard-"))
        .and_then(|n| n.parse().ok())
        .filter(|n| *n < shards)
        .unwrap_or(shards)
}

/// One controller process.
struct Replica {
    identity: String,
    /// Its instance (an index into `Soak::instances`).
    instance: usize,
    proc: Proc,
    metrics: SocketAddr,
    started: Timestamp,
    /// (simulated time, RSS MiB).
    rss: Vec<(Timestamp, f64)>,
    hwm: f64,
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

async fn metric(addr: SocketAddr, name: &str) -> Option<f64> {
    let body = captf_demo::lifecycle::metrics_text(addr).await?;
    let mut total = None;
    for (key, value) in body.lines().filter_map(|l| l.rsplit_once(' ')) {
        if key.split('{').next() == Some(name) {
            *total.get_or_insert(0.0) += value.trim().parse::<f64>().ok()?;
        }
    }
    total
}

/// One member of a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Member {
    Cluster,
    Pool,
    Machine,
}

impl Member {
    const ALL: [Member; 3] = [Member::Cluster, Member::Pool, Member::Machine];

    fn kind(self) -> Kind {
        match self {
            Member::Cluster => Kind::TerraformCluster,
            Member::Pool => Kind::TerraformMachinePool,
            Member::Machine => Kind::TerraformMachine,
        }
    }

    fn name(self, group: usize) -> String {
        match self {
            Member::Cluster => format!("g{group}"),
            Member::Pool => format!("g{group}-pool"),
            Member::Machine => format!("g{group}-m"),
        }
    }
}

/// Something due at a simulated time.
#[derive(Clone, Debug)]
enum Later {
    ReleaseLock {
        suffix: String,
    },
    Recreate {
        group: usize,
        member: Member,
    },
    ClearLatency,
    /// Label the group's members with its shard again: a patch of a relabel failed.
    Relabel {
        group: usize,
    },
}

struct Soak {
    cfg: Config,
    sim: Sim,
    client: kube::Client,
    history: Arc<Mutex<History>>,
    trap: Arc<Mutex<Trap>>,
    calm: Arc<AtomicBool>,
    runners: Arc<Mutex<BTreeMap<Runner, usize>>>,
    replicas: Vec<Replica>,
    instances: Vec<Instance>,
    /// Each group's instance (an index into `instances`).
    group_instance: Vec<usize>,
    /// Leader kills at any moment so far: each takes the next instance's leader in turn.
    kills: usize,
    controller_kubeconfig: PathBuf,
    logs: PathBuf,
    bin_dir: PathBuf,
    started: u32,
    rng: Rng,
    later: Vec<(Timestamp, Later)>,
    machine_uids: HashMap<usize, String>,
    report: Report,
    _work: tempfile::TempDir,
    _webhook: Proc,
}

fn resource(kind: Kind) -> ApiResource {
    let plural = match kind {
        Kind::TerraformCluster => "terraformclusters",
        Kind::TerraformMachinePool => "terraformmachinepools",
        _ => "terraformmachines",
    };
    ApiResource {
        group: keys::GROUP.into(),
        version: keys::VERSION.into(),
        api_version: keys::API_VERSION.into(),
        kind: kind.as_str().into(),
        plural: plural.into(),
    }
}

fn machine_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "machines.cluster.x-k8s.io"},
        "spec": {"group": "cluster.x-k8s.io", "scope": "Namespaced",
            "names": {"plural": "machines", "singular": "machine", "kind": "Machine", "listKind": "MachineList"},
            "versions": [{"name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    })
}

/// Run a soak.
pub async fn run(cfg: Config) -> Result<Report> {
    let wall = Instant::now();
    let mut soak = Soak::start(cfg).await?;
    soak.play().await?;
    soak.drain().await?;
    let mut report = soak.finish().await;
    report.wall = wall.elapsed();
    Ok(report)
}

impl Soak {
    async fn start(mut cfg: Config) -> Result<Soak> {
        if cfg.shards == 0 {
            cfg.rates.relabel = 0.0;
        }
        let work = tempfile::Builder::new().prefix("captf-soak-").tempdir()?;
        let logs = cfg.logs.clone().unwrap_or_else(|| work.path().to_path_buf());
        std::fs::create_dir_all(&logs)?;
        let bin_dir = match &cfg.bin_dir {
            Some(d) => d.clone(),
            None => procs::sibling("captf-controller-sim")?
                .parent()
                .map(PathBuf::from)
                .context("the folder of captf-controller-sim")?,
        };
        let sim = Sim::builder()
            .start_time(START_TIME.parse()?)
            .seed(cfg.seed)
            .history(100_000)
            .start()
            .await?;
        let history = Arc::new(Mutex::new(History::default()));
        let trap = Arc::new(Mutex::new(Trap::default()));
        let instances = instances(cfg.shards, cfg.shard_replicas);
        {
            let (history, trap) = (history.clone(), trap.clone());
            let (shards, leases) = (
                cfg.shards,
                instances.iter().map(|i| i.lease.clone()).collect::<Vec<_>>(),
            );
            sim.observe(move |now, ev| {
                let mut h = lock(&history);
                h.record(now, ev);
                let mut t = lock(&trap);
                if let Some(point) = t.armed
                    && point != KillPoint::Anytime
                    && at_point(point, ev)
                    // The change was made by the leader of the instance serving its object.
                    && let Some(lease) = if shards == 0 {
                        leases.first()
                    } else {
                        h.owner_shard_at(&ev.object, ev.rv)
                            .and_then(|label| leases.get(serving(shards, label)))
                    }
                    && let Some(pid) = h.leader(lease).and_then(|l| t.pids.get(l).copied())
                {
                    // Under the simulator's lock: the change is made, its answer not sent yet.
                    kill9(pid);
                    t.armed = None;
                    t.fired.push(point);
                }
            });
        }
        sim.create_namespace(NS);
        sim.create_namespace(setup::WEBHOOK_NAMESPACE);
        sim.load_rbac(setup::CHART_RBAC)?;
        sim.put(machine_crd())?;
        let controller_kubeconfig = work.path().join("controller.kubeconfig");
        std::fs::write(
            &controller_kubeconfig,
            sim.kubeconfig_yaml_as(setup::CONTROLLER_SA.0, setup::CONTROLLER_SA.1),
        )?;
        // The webhook, registered as the chart registers it.
        let dns = format!("{}.{}.svc", setup::WEBHOOK_SERVICE, setup::WEBHOOK_NAMESPACE);
        let serving = certs::generate(&dns)?;
        let (cert, key) = certs::write(work.path(), &serving)?;
        let (webhook, addr) =
            procs::start_webhook(&bin_dir.join("captf-webhook"), &cert, &key, logs.join("webhook.log")).await?;
        sim.register_service(setup::WEBHOOK_NAMESPACE, setup::WEBHOOK_SERVICE, addr);
        let client = sim.client()?;
        for obj in setup::webhook_configurations(&serving.ca_pem) {
            setup::create_cluster_scoped(&client, obj).await?;
        }
        // Each Job's runner is chosen from the seed and the Job's name, except that the first
        // Jobs take each behaviour in turn (`chaos::unseen`).
        let calm = Arc::new(AtomicBool::new(false));
        let runners = Arc::new(Mutex::new(BTreeMap::new()));
        {
            let (calm, runners, weights, seed) = (calm.clone(), runners.clone(), cfg.runners.clone(), cfg.seed);
            sim.script_with(move |job| {
                let meta = &job.metadata;
                let (ns, name) = (meta.namespace.as_deref()?, meta.name.as_deref()?);
                let op = meta.labels.as_ref()?.get(keys::LABEL_OP)?.clone();
                let approved = meta
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(keys::ANNOTATION_APPROVED_PLAN));
                let calm = calm.load(Ordering::SeqCst);
                let mut seen = lock(&runners);
                let r = if calm {
                    Runner::Success
                } else {
                    chaos::unseen(&weights, &seen, &op, approved)
                        .unwrap_or_else(|| chaos::runner_for(seed, &weights, ns, name, &op, approved))
                };
                *seen.entry(r).or_default() += 1;
                drop(seen);
                let mut rng = Rng::new(seed ^ name.len() as u64 ^ u64::from(name.bytes().map(u32::from).sum::<u32>()));
                let run = Duration::from_secs(10 + rng.next_u64() % 290);
                let drift = !calm && rng.next_u64().is_multiple_of(4);
                Some(chaos::script(r, &op, run, drift))
            });
        }
        let group_instance = (0..cfg.groups)
            .map(|g| chaos::first_instance(cfg.seed, g, instances.len()))
            .collect();
        let mut soak = Soak {
            rng: Rng::new(cfg.seed),
            cfg,
            sim,
            client,
            history,
            trap,
            calm,
            runners,
            replicas: Vec::new(),
            instances,
            group_instance,
            kills: 0,
            controller_kubeconfig,
            logs,
            bin_dir,
            started: 0,
            later: Vec::new(),
            machine_uids: HashMap::new(),
            report: Report::default(),
            _work: work,
            _webhook: webhook,
        };
        for i in 0..soak.instances.len() {
            for _ in 0..soak.instances[i].replicas {
                let r = soak.start_replica(i).await?;
                soak.replicas.push(r);
            }
        }
        for g in 0..soak.cfg.groups {
            for m in Member::ALL {
                soak.create(g, m).await?;
            }
        }
        soak.report.objects = soak.cfg.groups * 3;
        Ok(soak)
    }

    async fn start_replica(&mut self, instance: usize) -> Result<Replica> {
        self.started += 1;
        let identity = if self.cfg.shards == 0 {
            format!("replica-{}", self.started)
        } else {
            format!("{}-replica-{}", self.instances[instance].name, self.started)
        };
        let mut extra_env = vec![
            ("CAPTF_LEADER_ELECT".into(), "true".into()),
            ("CAPTF_LEADER_NAMESPACE".into(), setup::WEBHOOK_NAMESPACE.into()),
            ("CAPTF_LEADER_LEASE_SECONDS".into(), self.cfg.lease_seconds.to_string()),
            ("CAPTF_LEADER_IDENTITY".into(), identity.clone()),
            (
                "CAPTF_MAX_RUNNING_JOBS".into(),
                self.cfg.runner_limits.total.to_string(),
            ),
            (
                "CAPTF_MAX_RUNNING_JOBS_PER_NAMESPACE".into(),
                self.cfg.runner_limits.per_namespace.to_string(),
            ),
        ];
        if let Some(selector) = &self.instances[instance].selector {
            extra_env.push(("CAPTF_WATCH_LABEL_SELECTOR".into(), selector.clone()));
        }
        let env = ControllerEnv {
            kubeconfig: self.controller_kubeconfig.clone(),
            namespace: NS.into(),
            sim_url: self.sim.url(),
            metrics_addr: procs::free_addr()?,
            health_addr: procs::free_addr()?,
            extra_env,
        };
        let log = self.logs.join(format!("{identity}.log"));
        // The controller's runtime on the simulator's clock (the demo's captf-controller-sim).
        let proc = procs::start_controller(&self.bin_dir.join("captf-controller-sim"), &["run"], &env, log).await?;
        if let Some(pid) = proc.pid() {
            lock(&self.trap).pids.insert(identity.clone(), pid);
        }
        Ok(Replica {
            identity,
            instance,
            proc,
            metrics: env.metrics_addr,
            started: self.sim.now(),
            rss: Vec::new(),
            hwm: 0.0,
        })
    }

    fn object_json(&mut self, group: usize, member: Member) -> Value {
        let cluster = Member::Cluster.name(group);
        let name = member.name(group);
        let pick = |rng: &mut Rng, options: &[&'static str]| options[(rng.next_u64() % options.len() as u64) as usize];
        let drift = pick(&mut self.rng, &["30m", "1h", "2h", "6h"]);
        let failed: i64 = [0, 1, 3, 5][(self.rng.next_u64() % 4) as usize];
        let successful: i64 = [0, 1, 2][(self.rng.next_u64() % 3) as usize];
        let orphan = self.rng.next_u64().is_multiple_of(5);
        let deadline: i64 = [900, 1800, 3600][(self.rng.next_u64() % 3) as usize];
        let mut labels = json!({keys::LABEL_CLUSTER_NAME: cluster});
        // Every member of a group in its cluster's shard.
        if let Some(shard) = &self.instances[self.group_instance[group]].label {
            labels[SHARD_LABEL] = json!(shard);
        }
        let mut obj = json!({
            "apiVersion": keys::API_VERSION,
            "kind": member.kind().as_str(),
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {
                "module": {"source": "git::https://example.com/infra.git"},
                "variables": {"v": 0},
                "drift": {"interval": drift},
                "jobs": {"failedJobsHistoryLimit": failed, "successfulJobsHistoryLimit": successful,
                         "activeDeadlineSeconds": deadline},
                "deletionPolicy": if orphan { "Orphan" } else { "Destroy" },
            },
        });
        let mut owners = Vec::new();
        if member == Member::Machine
            && let Some(uid) = self.machine_uids.get(&group)
        {
            owners.push(json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine", "name": name, "uid": uid}));
        }
        // A member holds its cluster's deletion only when it belongs to it: owned by it.
        if member != Member::Cluster
            && let Some(uid) = self
                .sim
                .get(
                    &format!("{}/{}", keys::GROUP, resource(Kind::TerraformCluster).plural),
                    NS,
                    &cluster,
                )
                .and_then(|c| c.pointer("/metadata/uid").cloned())
        {
            owners.push(
                json!({"apiVersion": keys::API_VERSION, "kind": "TerraformCluster", "name": cluster, "uid": uid}),
            );
        }
        if !owners.is_empty() {
            obj["metadata"]["ownerReferences"] = Value::Array(owners);
        }
        obj
    }

    /// Create a member through the API (the webhook defaults and validates it).
    async fn create(&mut self, group: usize, member: Member) -> Result<bool> {
        if member == Member::Machine && !self.machine_uids.contains_key(&group) {
            let name = member.name(group);
            self.sim.put(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("{name}-bootstrap"), "namespace": NS},
                "data": {"value": "IyEvYmluL3NoCg=="}}))?;
            let m = self.sim.put(json!({
                "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"clusterName": Member::Cluster.name(group), "bootstrap": {"dataSecretName": format!("{name}-bootstrap")}},
            }))?;
            let uid = m["metadata"]["uid"].as_str().unwrap_or_default().to_string();
            self.machine_uids.insert(group, uid);
        }
        let mut obj = self.object_json(group, member);
        // State an orphaning released under the name still holds what was kept: the person
        // re-creating the object adopts it deliberately, by the UID that released it.
        let state = names::state_secret_name(&names::suffix(member.kind(), NS, &member.name(group)));
        if let Some(s) = self.sim.get("/secrets", NS, &state)
            && s["metadata"]["annotations"][keys::ANNOTATION_OWNER_UID].is_null()
            && let Some(by) = s["metadata"]["annotations"][keys::ANNOTATION_RELEASED_BY].as_str()
        {
            obj["metadata"]["annotations"] = json!({keys::ANNOTATION_ADOPT_STATE: by});
        }
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), NS, &resource(member.kind()));
        let dynamic: DynamicObject = serde_json::from_value(obj)?;
        match api.create(&PostParams::default(), &dynamic).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 || e.code >= 429 => Ok(false),
            Err(e) => Err(e).with_context(|| format!("creating {}", member.name(group))),
        }
    }

    fn fault(&mut self, name: impl Into<String>) {
        *self.report.faults.entry(name.into()).or_default() += 1;
    }

    /// Every live (not deleting) object: its kind, name and pending plan's hash. Read once per
    /// stretch, in place: copying hundreds of objects for each action made the harness the load.
    fn live_objects(&self) -> Vec<(Kind, String, Option<String>)> {
        let out = std::cell::RefCell::new(Vec::new());
        for kind in [
            Kind::TerraformCluster,
            Kind::TerraformMachinePool,
            Kind::TerraformMachine,
        ] {
            let id = format!("{}/{}", keys::GROUP, resource(kind).plural);
            self.sim.count_where(&id, Some(NS), |o| {
                if o.pointer("/metadata/deletionTimestamp").is_none() {
                    let name = o["metadata"]["name"].as_str().unwrap_or_default().to_string();
                    let hash = o
                        .pointer("/status/pendingPlan/hash")
                        .and_then(Value::as_str)
                        .map(String::from);
                    out.borrow_mut().push((kind, name, hash));
                }
                false
            });
        }
        out.into_inner()
    }

    /// The group's cluster exists and is not being deleted.
    fn cluster_live(&self, group: usize) -> bool {
        let id = format!("{}/terraformclusters", keys::GROUP);
        self.sim
            .get(&id, NS, &Member::Cluster.name(group))
            .is_some_and(|c| c.pointer("/metadata/deletionTimestamp").is_none())
    }

    fn pick<T: Clone>(&self, items: &[T], pick: u64) -> Option<T> {
        (!items.is_empty()).then(|| items[(pick % items.len() as u64) as usize].clone())
    }

    /// The process of instance `instance`'s leader.
    fn leader_pid(&self, instance: usize) -> Option<u32> {
        let leader = lock(&self.history)
            .leader(&self.instances[instance].lease)
            .map(String::from)?;
        lock(&self.trap).pids.get(&leader).copied()
    }

    /// The metrics address of each instance's leader that is one of the replicas.
    fn leader_metrics(&self) -> Vec<SocketAddr> {
        let h = lock(&self.history);
        self.instances
            .iter()
            .filter_map(|i| {
                let leader = h.leader(&i.lease)?;
                self.replicas.iter().find(|r| r.identity == leader).map(|r| r.metrics)
            })
            .collect()
    }

    /// Give every member of `group` that exists the shard label of the group's instance (none
    /// for the rest), by a merge patch through the webhook. False when a patch kept failing
    /// (injected API errors).
    async fn label_group(&mut self, group: usize) -> bool {
        let label = self.instances[self.group_instance[group]].label.clone();
        let patch = json!({"metadata": {"labels": {SHARD_LABEL: label}}});
        let mut all = true;
        for m in Member::ALL {
            let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), NS, &resource(m.kind()));
            let mut done = false;
            for _ in 0..3 {
                match api
                    .patch(&m.name(group), &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => done = true,
                    // Deleted: it comes back with the group's label.
                    Err(kube::Error::Api(e)) if e.code == 404 => done = true,
                    Err(_) => continue,
                }
                break;
            }
            all &= done;
        }
        all
    }

    async fn play_action(&mut self, a: Action, live: &[(Kind, String, Option<String>)]) {
        let now = self.sim.now();
        match a {
            Action::SpecChange { pick, value } => {
                let Some((kind, name, _)) = self.pick(live, pick) else {
                    return;
                };
                let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), NS, &resource(kind));
                let patch = json!({"spec": {"variables": {"v": value}}});
                if api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .is_ok()
                {
                    self.fault(a.name());
                }
            }
            Action::Delete { pick } => {
                let group = (pick % self.cfg.groups as u64) as usize;
                // A whole group a third of the time (the Cluster API cluster is deleted), else
                // a pool or a machine alone.
                let members: Vec<Member> = match (pick / 7) % 3 {
                    0 => Member::ALL.to_vec(),
                    1 => vec![Member::Pool],
                    _ => vec![Member::Machine],
                };
                for m in members {
                    let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), NS, &resource(m.kind()));
                    if api.delete(&m.name(group), &DeleteParams::default()).await.is_ok() {
                        self.fault(a.name());
                        let back = Duration::from_secs(600 + self.rng.next_u64() % (3 * 3600));
                        self.later.push((at(now, back), Later::Recreate { group, member: m }));
                    }
                }
            }
            Action::WorkstationLock { pick, hold } => {
                let Some((kind, name, _)) = self.pick(live, pick) else {
                    return;
                };
                let suffix = names::suffix(kind, NS, &name);
                // A person locks a state CAPTF already made (its lock Lease exists). A Lease made
                // by someone else before the object's first Job is held as foreign until a person
                // removes or binds it (the identity rule), which a soak with no person cannot
                // play: with runner slots, an object may wait long enough for its first Job to
                // meet one.
                let lease = names::lock_lease_name(&suffix);
                if self.sim.get("coordination.k8s.io/leases", NS, &lease).is_none() {
                    return;
                }
                let id = format!("workstation-{}", self.rng.next_u64() % 1_000_000);
                if self.sim.hold_lock_if_free(NS, &suffix, &id, "alice@workstation") {
                    self.fault(a.name());
                    self.later.push((at(now, hold), Later::ReleaseLock { suffix }));
                }
            }
            Action::ApiError {
                verb,
                resource,
                status,
                count,
            } => {
                self.sim.faults().inject(FaultRule {
                    verb: Some(chaos::ERROR_VERBS[verb]),
                    resource: Some(chaos::ERROR_RESOURCES[resource].into()),
                    namespace: None,
                    name: None,
                    status,
                    count,
                });
                self.fault(a.name());
            }
            Action::Latency { millis, for_ticks } => {
                self.sim.faults().set_latency(Duration::from_millis(millis));
                let until = at(now, self.cfg.step * for_ticks);
                self.later.push((until, Later::ClearLatency));
                self.fault(a.name());
            }
            Action::DropWatches => {
                self.sim.faults().drop_watches();
                self.fault(a.name());
            }
            Action::ExpireWatches => {
                self.sim.compact();
                self.sim.faults().drop_watches();
                self.fault(a.name());
            }
            Action::KillLeader(KillPoint::Anytime) => {
                let instance = self.kills % self.instances.len();
                self.kills += 1;
                if let Some(pid) = self.leader_pid(instance) {
                    kill9(pid);
                    self.fault(a.name());
                }
            }
            Action::KillLeader(p) => {
                let mut t = lock(&self.trap);
                if t.armed.is_none() {
                    t.armed = Some(p);
                }
            }
            Action::Evict { pick } => {
                let Some((ns, pod)) = self.pick(&self.sim.running_pods(), pick) else {
                    return;
                };
                if self.sim.evict(&ns, &pod) {
                    self.fault(a.name());
                }
            }
            Action::Relabel { pick, to } => {
                if self.instances.len() < 2 {
                    return;
                }
                // The whole group moves: a cluster and its members in one shard.
                let group = (pick % self.cfg.groups as u64) as usize;
                self.group_instance[group] =
                    chaos::relabel_target(self.group_instance[group], self.instances.len(), to);
                self.fault(a.name());
                if !self.label_group(group).await {
                    self.later
                        .push((at(now, Duration::from_secs(60)), Later::Relabel { group }));
                }
            }
        }
    }

    async fn run_later(&mut self) {
        let now = self.sim.now();
        let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.later)
            .into_iter()
            .partition(|(t, _)| *t <= now);
        self.later = rest;
        for (_, l) in due {
            self.do_later(l).await;
        }
    }

    async fn do_later(&mut self, l: Later) {
        let now = self.sim.now();
        match l {
            Later::ReleaseLock { suffix } => self.sim.release_lock(NS, &suffix),
            Later::ClearLatency => self.sim.faults().set_latency(Duration::ZERO),
            Later::Relabel { group } => {
                if !self.label_group(group).await {
                    self.later
                        .push((at(now, Duration::from_secs(60)), Later::Relabel { group }));
                }
            }
            Later::Recreate { group, member } if member != Member::Cluster && !self.cluster_live(group) => {
                // Like a person, wait for the cluster to be back first: members created under
                // a cluster being deleted would (rightly) hold its deletion forever.
                self.later
                    .push((at(now, Duration::from_secs(600)), Later::Recreate { group, member }));
            }
            Later::Recreate { group, member } => match self.create(group, member).await {
                Ok(true) => self.report.recreated += 1,
                // Still being deleted (or an injected error): try again later.
                _ => self
                    .later
                    .push((at(now, Duration::from_secs(600)), Later::Recreate { group, member })),
            },
        }
    }

    /// Approve each pending destructive plan with this chance.
    async fn approve(&mut self, chance: f64, live: &[(Kind, String, Option<String>)]) {
        for (kind, name, hash) in live {
            let Some(hash) = hash else { continue };
            if chaos::unit(&mut self.rng) >= chance {
                continue;
            }
            let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), NS, &resource(*kind));
            let patch = json!({"metadata": {"annotations": {keys::ANNOTATION_APPROVE_PLAN: hash}}});
            if api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .is_ok()
            {
                self.fault("destructive plan approved");
            }
        }
    }

    /// Wait (bounded) until the simulator is quiet, every instance's leader has no reconcile in
    /// flight and no request arrived for a few looks.
    async fn settle(&mut self) {
        self.settle_within(SETTLE_PATIENCE).await;
    }

    /// [`Soak::settle`] with its own patience; false when it ran out.
    async fn settle_within(&mut self, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        let leaders = self.leader_metrics();
        let (mut last, mut calm) = (None, 0);
        loop {
            let requests = self.sim.requests();
            let mut busy = false;
            for addr in &leaders {
                if metric(*addr, "captf_reconciles_in_flight")
                    .await
                    .is_none_or(|n| n > 0.0)
                {
                    busy = true;
                    break;
                }
            }
            calm = if self.sim.quiet() && !busy && last == Some(requests) {
                calm + 1
            } else {
                0
            };
            if calm >= 3 {
                return true;
            }
            if Instant::now() > deadline {
                self.report.unsettled += 1;
                return false;
            }
            last = Some(requests);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Restart replicas that died; sample memory.
    async fn tend(&mut self) -> Result<()> {
        let now = self.sim.now();
        for i in 0..self.replicas.len() {
            if self.replicas[i].proc.exited().is_some() {
                self.finish_replica(i);
                let r = self.start_replica(self.replicas[i].instance).await?;
                self.replicas[i] = r;
                self.report.restarts += 1;
                continue;
            }
            let r = &mut self.replicas[i];
            if let Some((rss, hwm)) = r.proc.pid().and_then(memory_mib) {
                r.hwm = r.hwm.max(hwm);
                if r.rss
                    .last()
                    .is_none_or(|(t, _)| now.duration_since(*t).as_secs() >= 3600)
                {
                    r.rss.push((now, rss));
                }
            }
        }
        Ok(())
    }

    /// Account for a replica that is gone.
    fn finish_replica(&mut self, i: usize) {
        let r = &self.replicas[i];
        self.report.peak_rss_mib = self.report.peak_rss_mib.max(r.hwm);
        if let (Some(first), Some(last)) = (r.rss.first(), r.rss.last()) {
            let lived = last.0.duration_since(r.started).as_secs_f64() / 3600.0;
            if self.report.rss_growth.is_none_or(|(h, _, _)| lived > h) {
                let quarter = at(first.0, Duration::from_secs_f64(lived * 3600.0 / 4.0));
                let early = r.rss.iter().find(|(t, _)| *t >= quarter).map_or(first.1, |s| s.1);
                self.report.rss_growth = Some((lived, early, last.1));
                let mut next = r.started;
                self.report.rss_series = r
                    .rss
                    .iter()
                    .filter(|(t, _)| {
                        let take = *t >= next;
                        if take {
                            next = at(*t, Duration::from_secs(6 * 3600));
                        }
                        take
                    })
                    .map(|(_, mib)| *mib)
                    .collect();
            }
        }
    }

    async fn play(&mut self) -> Result<()> {
        let start = self.sim.now();
        let end = at(start, self.cfg.duration);
        let mut next_progress = at(start, Duration::from_secs(3600));
        while self.sim.now() < end {
            let (dt, jumped) = chaos::stretch(&mut self.rng, &self.cfg.rates, self.cfg.step);
            let live = self.live_objects();
            for a in chaos::actions(&mut self.rng, &self.cfg.rates.clone(), dt) {
                self.play_action(a, &live).await;
            }
            let chance = self.cfg.rates.approve;
            self.approve(chance, &live).await;
            self.run_later().await;
            self.sim.advance(dt);
            if jumped {
                self.fault("clock jump (1 to 4 hours at once)");
            }
            self.settle().await;
            self.tend().await?;
            self.sim.expire_events(EVENT_TTL);
            if self.cfg.progress && self.sim.now() >= next_progress {
                next_progress = at(self.sim.now(), Duration::from_secs(3600));
                let h = lock(&self.history);
                let fault = |name: &str| self.report.faults.get(name).copied().unwrap_or(0);
                let leaders: Vec<&str> = self
                    .instances
                    .iter()
                    .map(|i| h.leader(&i.lease).unwrap_or("-"))
                    .collect();
                eprintln!(
                    "soak: {:.1}h simulated (wall clock {}), {} Jobs, {} changes, leader {}, {} watch drops, {} expiries",
                    self.sim.now().duration_since(start).as_secs_f64() / 3600.0,
                    Timestamp::now().strftime("%H:%M:%S"),
                    h.jobs.len(),
                    h.changes,
                    leaders.join(" "),
                    fault("watches dropped"),
                    fault("watches expired (410 Gone)")
                );
            }
        }
        Ok(())
    }

    /// Faults off, every runner succeeds, every plan is approved, everything deleted comes
    /// back: let the controller bring every object home.
    async fn drain(&mut self) -> Result<()> {
        self.calm.store(true, Ordering::SeqCst);
        lock(&self.trap).armed = None;
        self.sim.faults().clear();
        let pending = std::mem::take(&mut self.later);
        for (_, l) in pending {
            self.do_later(l).await;
        }
        let end = at(self.sim.now(), self.cfg.drain);
        while self.sim.now() < end {
            self.drain_step(Duration::from_secs(120)).await?;
        }
        // A controller still catching up (a watch reconnecting after its backoff, a retry after
        // an API error waiting out its own backoff) gets real time to, with the clock moving on
        // in small steps so its timed looks come too.
        let patience = Instant::now() + FINAL_PATIENCE;
        while !self.at_rest() && Instant::now() < patience {
            self.drain_step(Duration::from_secs(30)).await?;
        }
        // The end-state checks look at a controller that has caught up, however loaded it was.
        if !self.settle_within(FINAL_PATIENCE).await {
            eprintln!("captf-soak: the controller was still busy {FINAL_PATIENCE:?} after the drain; checking anyway");
        }
        Ok(())
    }

    /// One stretch of the drain: every pending plan approved, re-creations due done, the clock
    /// moved by `step`, then a wait for a loaded controller to catch up (no faults any more).
    /// Locks of a workstation stay released; re-creations retry until they succeed.
    async fn drain_step(&mut self, step: Duration) -> Result<()> {
        let live = self.live_objects();
        self.approve(1.0, &live).await;
        self.run_later().await;
        self.sim.advance(step);
        self.settle_within(DRAIN_PATIENCE).await;
        self.tend().await?;
        self.sim.expire_events(EVENT_TTL);
        Ok(())
    }

    /// Nothing left to do: every object up to date and none being deleted, every finished Job
    /// booked.
    fn at_rest(&self) -> bool {
        let unsettled = [
            Kind::TerraformCluster,
            Kind::TerraformMachinePool,
            Kind::TerraformMachine,
        ]
        .into_iter()
        .map(|kind| {
            let id = format!("{}/{}", keys::GROUP, resource(kind).plural);
            self.sim.count_where(&id, Some(NS), |o| {
                condition_true(o, "UpToDate").is_none() || o.pointer("/metadata/deletionTimestamp").is_some()
            })
        })
        .sum::<usize>();
        let unbooked = self.sim.count_where("batch/jobs", Some(NS), |j| {
            let finished = condition_true(j, "Complete").is_some() || condition_true(j, "Failed").is_some();
            finished && j.pointer("/metadata/annotations/captf.io~1outcome").is_none()
        });
        unsettled == 0 && unbooked == 0
    }

    /// The Jobs of an object as they are now, with their pods' phases: what a convergence
    /// violation needs to be understood.
    fn jobs_at_rest(&self, kind: Kind, name: &str) -> String {
        let id = names::object_id(kind, NS, name);
        let jobs = self.sim.jobs(NS).unwrap_or_default();
        let mut out = Vec::new();
        for j in jobs
            .iter()
            .filter(|j| j.metadata.labels.as_ref().and_then(|l| l.get(keys::LABEL_OBJECT)) == Some(&id))
        {
            let job = j.metadata.name.clone().unwrap_or_default();
            let st = j.status.clone().unwrap_or_default();
            let pods: Vec<String> = self
                .sim
                .pods_of_job(NS, &job)
                .unwrap_or_default()
                .iter()
                .map(|p| p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default())
                .collect();
            out.push(format!(
                "{job} (active {}, succeeded {}, failed {}, pods {pods:?})",
                st.active.unwrap_or(0),
                st.succeeded.unwrap_or(0),
                st.failed.unwrap_or(0)
            ));
        }
        if out.is_empty() { "none".into() } else { out.join(", ") }
    }

    async fn finish(mut self) -> Report {
        let now = self.sim.now();
        // Every live object came home: Ready=True.
        let mut violations = Vec::new();
        let id = |k: Kind| format!("{}/{}", keys::GROUP, resource(k).plural);
        for (kind, name, _) in self.live_objects() {
            let o = self.sim.get(&id(kind), NS, &name).unwrap_or_default();
            let ready = o
                .get("status")
                .and_then(|st| crate::history::condition(st, "UpToDate"))
                .cloned();
            if ready.as_ref().and_then(|r| r["status"].as_str()) != Some("True") {
                // Held for a name conflict: how the state Secret's binding came to be.
                let trace = if ready.as_ref().and_then(|r| r["reason"].as_str()) == Some("NameConflict") {
                    let state = names::state_secret_name(&names::suffix(kind, NS, &name));
                    let h = lock(&self.history);
                    let lines = h.bindings.get(&format!("{NS}/{state}"));
                    format!(
                        "; the state Secret's binding and the objects of its name:\n      {}",
                        lines.map_or("nothing recorded".to_string(), |l| l
                            .iter()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join("\n      "))
                    )
                } else {
                    String::new()
                };
                violations.push(Violation {
                    invariant: "every_live_object_converges_once_the_faults_stop",
                    at: now,
                    object: format!("{}/{NS}/{name}", kind.as_str()),
                    detail: format!(
                        "Ready is {}; nextAction {}; Jobs: {}",
                        ready.map_or("missing".to_string(), |r| r.to_string()),
                        o.pointer("/status/nextAction").unwrap_or(&Value::Null),
                        self.jobs_at_rest(kind, &name)
                    ) + &trace,
                });
            }
        }
        let shards = self.cfg.shards;
        let lease_of = |label: Option<&str>| self.instances[serving(shards, label)].lease.clone();
        let mut counts = BTreeMap::new();
        for r in &self.replicas {
            if let Some(total) = metric(r.metrics, "captf_jobs_finished_total").await {
                counts.insert(r.identity.clone(), total as u64);
            }
        }
        let bookers = lock(&self.history).bookers(lease_of);
        let metrics = counts
            .iter()
            .map(|(id, total)| {
                let mine = bookers.iter().filter(|b| b.contains(id));
                let only = mine.clone().filter(|b| b.len() == 1).count();
                (id.clone(), *total, only, mine.count() - only)
            })
            .collect();
        violations.extend(invariants::finished_counts_match_the_bookings(&bookers, &counts, now));
        for i in 0..self.replicas.len() {
            self.finish_replica(i);
        }
        if let Some((lived, early, last)) = self.report.rss_growth
            && lived >= 12.0
            && last > early * 1.5 + 16.0
        {
            violations.push(Violation {
                invariant: "controller_memory_does_not_grow_with_simulated_time",
                at: now,
                object: "controller".into(),
                detail: format!("RSS went from {early:.1} MiB to {last:.1} MiB over {lived:.1} simulated hours"),
            });
        }
        // All at once: with shards there are many.
        let stops: Vec<_> = std::mem::take(&mut self.replicas)
            .into_iter()
            .map(|r| tokio::spawn(r.proc.stop(Duration::from_secs(5))))
            .collect();
        for s in stops {
            let _ = s.await;
        }
        let h = lock(&self.history);
        violations.extend(invariants::always(&h));
        violations.extend(invariants::never_more_running_jobs_than_the_limits(
            &h,
            self.cfg.runner_limits,
            self.instances.len(),
        ));
        violations.extend(invariants::at_rest(&h, now));
        let mut report = std::mem::take(&mut self.report);
        report.seed = self.cfg.seed;
        report.simulated_hours = h
            .first
            .zip(h.last)
            .map_or(0.0, |(a, b)| b.duration_since(a).as_secs_f64() / 3600.0);
        report.jobs = h.jobs.len();
        report.ends = h.ends();
        report.leader_changes = h.leader_changes();
        report.shards = self.cfg.shards;
        // Who started each Job: the instance serving its object when it was created.
        let mut jobs = vec![0; self.instances.len()];
        let mut starters: HashMap<&str, std::collections::BTreeSet<usize>> = HashMap::new();
        for j in &h.jobs {
            let label = h.object_by_uid(&j.owner_uid).and_then(|o| o.shard_at(j.created_rv));
            let i = serving(shards, label);
            jobs[i] += 1;
            starters.entry(&j.owner_uid).or_default().insert(i);
        }
        report.served_by_several = starters.values().filter(|s| s.len() > 1).count();
        report.instances = self
            .instances
            .iter()
            .zip(jobs)
            .map(|(i, n)| {
                let leaders: std::collections::BTreeSet<&str> = h
                    .leaders
                    .get(&i.lease)
                    .map(|l| l.iter().map(|(_, id)| id.as_str()).collect())
                    .unwrap_or_default();
                (i.name.clone(), i.replicas, leaders.len(), n)
            })
            .collect();
        report.changes = h.changes;
        report.queued = h.queued;
        report.runners = lock(&self.runners).clone();
        for p in &lock(&self.trap).fired {
            *report.faults.entry(Action::KillLeader(*p).name()).or_default() += 1;
        }
        report.metrics = metrics;
        report.violations = violations;
        report
    }
}

fn at(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_add(SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX))
        .unwrap_or(t)
}

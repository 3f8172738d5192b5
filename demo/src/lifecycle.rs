//! The lifecycle the README lists, step by step, against the simulator with the real webhook
//! and controller processes. Time moves only when a step advances the simulated clock; every
//! wait polls for a bounded real time and fails the step with what it waited for.
//!
//! With [`Demo::real`] set, runner pods run the real `captf-runner` with real Terraform
//! ([`crate::real`]): the cluster's and the pool's applies, the drift checks (the drift is an
//! edit of the test provider's world), the blocked destructive plan and its approved apply, and
//! the destroys. A step queues a script for the Jobs that show what a real process can't do on
//! cue (the failed applies, the eviction, the runner dying with the lock, the runner waiting on
//! a workstation's lock): a queued script wins over the real runner. A real runner ends in wall
//! time; the simulated clock never moves while one runs (see `settle`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use captf_shared::protocol::PlanSummary;
use captf_shared::{Kind, Op, names};
use captf_sim::{JobMatch, RunnerScript, Sim};
use jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use crate::real::{self, RealTerraform};
use crate::summary::Row;
use crate::timeline::{Snapshot, Timeline, clip};

pub const NS: &str = "default";
/// Every namespace the demo's controller watches: the samples', and `team-a`, where the
/// examples' workload-identity objects go (the chart's rendered RBAC binds the controller in
/// both).
pub const WATCHED: [&str; 2] = [NS, "team-a"];
pub const CLUSTER: &str = "demo";
pub const POOL: &str = "demo-workers";
/// The lock ID the OOM-killed runner leaves behind.
const DEAD_RUNNER_LOCK: &str = "0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55";
/// The lock ID of alice's workstation.
const WORKSTATION_LOCK: &str = "11111111-2222-3333-4444-555555555555";
/// The plan hash of the destructive change.
const PLAN_HASH: &str = "9f2c4e1ab37d";
const GROUP: &str = "infrastructure.cluster.x-k8s.io";
const TC: &str = "infrastructure.cluster.x-k8s.io/terraformclusters";
const TMP: &str = "infrastructure.cluster.x-k8s.io/terraformmachinepools";
const TM: &str = "infrastructure.cluster.x-k8s.io/terraformmachines";
/// Real time a single wait may take before its step fails.
const WAIT: Duration = Duration::from_secs(20);
/// Real time a wait that includes a real Terraform run may take (a run takes seconds; this
/// leaves room for a busy machine).
const REAL_WAIT: Duration = Duration::from_secs(180);
/// Polls in a row with nothing in progress before the demo counts the moment as settled.
const CALM_POLLS: u32 = 5;

/// The examples the README shows, used as they are.
pub const MINIMAL_CLUSTER: &str = include_str!("../../examples/terraformcluster-minimal.yaml");
pub const MACHINE_POOL: &str = include_str!("../../examples/terraformmachinepool.yaml");

/// Why a step did not behave as expected.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("timed out after {secs}s waiting for {what}")]
    Timeout { what: String, secs: u64 },
    #[error("{0}")]
    Unexpected(String),
    #[error("failed to {action}: {source}")]
    Api {
        action: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("failed to read an example: {0}")]
    Example(#[from] serde_yaml_ng::Error),
}

fn unexpected(msg: impl Into<String>) -> StepError {
    StepError::Unexpected(msg.into())
}

fn api_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> StepError {
    let action = action.into();
    move |e| StepError::Api {
        action,
        source: Box::new(e),
    }
}

/// One step of the script: a name, what it should show, and the code that checks it.
pub struct StepSpec {
    pub name: &'static str,
    pub expected: &'static str,
}

pub const STEPS: &[StepSpec] = &[
    StepSpec {
        name: "1 admission",
        expected: "bad spec rejected with the webhook's message; minimal spec accepted and defaulted",
    },
    StepSpec {
        name: "2 apply retries",
        expected: "apply fails twice, retried 1m then 2m after each failure, then Ready with the control-plane endpoint",
    },
    StepSpec {
        name: "3 machine pool lock",
        expected: "eviction not counted (retry at once); runner dies holding the lock; next Job clears it (ForceUnlocked)",
    },
    StepSpec {
        name: "4 drift and guard",
        expected: "drift found and remediated; a destructive plan waits for approval, then applies",
    },
    StepSpec {
        name: "5 workstation lock",
        expected: "StateLocked naming the holder, lock never unlocked, the next Job backs off 1m",
    },
    StepSpec {
        name: "6 deletion",
        expected: "cluster deletion held while the pool exists; pool then cluster destroyed; finalizers removed",
    },
];

/// The demo's view of the world: the simulator, an API client, the timeline.
pub struct Demo<'a> {
    pub sim: &'a Sim,
    client: kube::Client,
    timeline: Timeline,
    /// Print timeline lines as they happen.
    pub echo: bool,
    /// Where the controller serves `/metrics`, to see whether it is still reconciling.
    pub controller_metrics: Option<std::net::SocketAddr>,
    /// Real Terraform in the runner pods (the simulator maps the runner image); None: every
    /// runner is scripted.
    pub real: Option<RealTerraform>,
    /// Every Job seen so far, and whether its runner was real (Jobs are pruned and collected
    /// with their object, so a step's Jobs are counted as they are seen).
    jobs_seen: BTreeMap<String, bool>,
    /// Every Job seen so far as it was last seen: a Job whose real runner ends within a poll
    /// can be booked, pruned or collected with its object before the next look.
    jobs_last_seen: std::sync::Arc<std::sync::Mutex<BTreeMap<String, Value>>>,
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1beta1", kind), plural)
}

fn condition(obj: &Value, type_: &str) -> Option<(String, String, String)> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            let f = |k: &str| c[k].as_str().unwrap_or("").to_string();
            (f("status"), f("reason"), f("message"))
        })
}

/// The text of a controller's `/metrics` page; None when it cannot be read.
pub async fn metrics_text(addr: std::net::SocketAddr) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: controller\r\n\r\n")
        .await
        .ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await.ok()?;
    Some(body)
}

/// The controller's `captf_reconciles_in_flight` gauge, read from its `/metrics`; None when it
/// cannot be read.
async fn reconciles_in_flight(addr: std::net::SocketAddr) -> Option<u64> {
    metrics_text(addr)
        .await?
        .lines()
        .find_map(|l| l.strip_prefix("captf_reconciles_in_flight "))
        .and_then(|v| v.trim().parse().ok())
}

fn job_finish_time(j: &Value) -> Option<Timestamp> {
    j.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| (c["type"] == "Failed" || c["type"] == "Complete") && c["status"] == "True")?
        .get("lastTransitionTime")?
        .as_str()?
        .parse()
        .ok()
}

fn created(j: &Value) -> Option<Timestamp> {
    j.pointer("/metadata/creationTimestamp")?.as_str()?.parse().ok()
}

fn annotation<'a>(j: &'a Value, key: &str) -> Option<&'a str> {
    j.get("metadata")?.get("annotations")?.get(key)?.as_str()
}

fn job_name(j: &Value) -> String {
    j.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn fmt_t(t: Timestamp) -> String {
    t.strftime("%H:%M:%S").to_string()
}

fn yaml_object(text: &str) -> Result<Value, StepError> {
    Ok(serde_yaml_ng::from_str::<Value>(text)?)
}

/// The outputs of the simulated cluster module.
pub fn cluster_outputs() -> BTreeMap<String, Value> {
    BTreeMap::from([(
        "control_plane_endpoint".to_string(),
        json!({"host": "10.0.0.1", "port": 6443}),
    )])
}

impl<'a> Demo<'a> {
    pub fn new(sim: &'a Sim, client: kube::Client) -> Self {
        // The simulated runner: a cluster module returns its endpoint, the others a name; each
        // step queues the special behaviour it shows.
        sim.script_with(move |job| {
            let labels = job.metadata.labels.as_ref()?;
            (labels.get(captf_shared::keys::LABEL_KIND).map(String::as_str) == Some(Kind::TerraformCluster.as_str()))
                .then(|| RunnerScript::realistic_with_outputs(cluster_outputs()))
        });
        sim.set_default_script(RunnerScript::realistic_with_outputs(BTreeMap::from([(
            "node_group".to_string(),
            json!("demo-workers-ng"),
        )])));
        Demo {
            sim,
            client,
            timeline: Timeline::new(),
            echo: true,
            controller_metrics: None,
            real: None,
            jobs_seen: BTreeMap::new(),
            jobs_last_seen: Default::default(),
        }
    }

    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    fn snapshot(&self) -> Snapshot {
        let mut objects = self.sim.list(TC, Some(NS));
        objects.extend(self.sim.list(TMP, Some(NS)));
        objects.extend(self.sim.list(TM, Some(NS)));
        let jobs: Vec<Value> = self
            .sim
            .jobs(NS)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|j| serde_json::to_value(j).ok())
            .collect();
        let real_jobs = jobs
            .iter()
            .map(job_name)
            .filter(|n| self.sim.job_ran_as_process(NS, n))
            .collect();
        Snapshot {
            objects,
            jobs,
            events: self.sim.events(NS),
            real_jobs,
        }
    }

    /// Look at the simulator and print what changed.
    pub fn observe(&mut self) {
        let snap = self.snapshot();
        for j in &snap.jobs {
            let name = job_name(j);
            let real = snap.real_jobs.contains(&name);
            self.jobs_seen.entry(name).or_insert(real);
        }
        if let Ok(mut seen) = self.jobs_last_seen.lock() {
            for j in &snap.jobs {
                seen.insert(job_name(j), j.clone());
            }
        }
        let lines = self.timeline.observe(self.sim.now(), &snap);
        if self.echo {
            for l in lines {
                println!("{}", l.render());
            }
        }
    }

    /// A note in the timeline (what the script does next).
    fn say(&self, what: &str) {
        if self.echo {
            println!("{}  {:<36} {}", fmt_t(self.sim.now()), "--", what);
        }
    }

    /// Let what is still happening at the current time finish (printing it), then move the clock.
    async fn advance(&mut self, d: Duration) -> Result<(), StepError> {
        self.settle().await?;
        self.sim.advance(d);
        self.say(&format!("(clock +{}s)", d.as_secs()));
        self.observe();
        Ok(())
    }

    async fn advance_to(&mut self, t: Timestamp) -> Result<(), StepError> {
        self.settle().await?;
        self.sim.advance_to(t);
        self.say("(clock moved)");
        self.observe();
        Ok(())
    }

    /// Poll until `f` returns Some, observing as we go; at most [`WAIT`] of real time.
    async fn until<T>(&mut self, what: &str, f: impl FnMut(&Sim) -> Option<T>) -> Result<T, StepError> {
        self.until_for(what, WAIT, f).await
    }

    /// Poll until `f` returns Some, observing as we go; at most `wait` of real time.
    async fn until_for<T>(
        &mut self,
        what: &str,
        wait: Duration,
        mut f: impl FnMut(&Sim) -> Option<T>,
    ) -> Result<T, StepError> {
        let deadline = Instant::now() + wait;
        loop {
            self.observe();
            if let Some(v) = f(self.sim) {
                // Print what made it true before the script goes on.
                self.observe();
                return Ok(v);
            }
            if Instant::now() > deadline {
                return Err(StepError::Timeout {
                    what: what.to_string(),
                    secs: wait.as_secs(),
                });
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Wait until nothing is in progress, observing: the simulator quiet (no request in flight,
    /// every watch event delivered) with no new request, no runner running as a real process,
    /// and no reconcile pass running in the controller (its `captf_reconciles_in_flight` gauge,
    /// when the demo knows where its metrics are), [`CALM_POLLS`] polls in a row. What the
    /// controller does about the current moment is then done: a check that nothing happened is a
    /// check, not a guess after a pause. Every move of the clock settles first, so the simulated
    /// clock never moves while a real runner runs.
    async fn settle(&mut self) -> Result<(), StepError> {
        let wait = if self.real.is_some() { REAL_WAIT } else { WAIT };
        let deadline = Instant::now() + wait;
        let (mut last, mut calm) = (None, 0);
        loop {
            self.observe();
            let requests = self.sim.requests();
            let in_flight = match self.controller_metrics {
                Some(addr) => reconciles_in_flight(addr).await,
                None => Some(0),
            };
            let runners = self.sim.process_pods().len();
            let busy = in_flight.is_none_or(|n| n > 0) || runners > 0;
            let quiet = self.sim.quiet();
            let steady = last == Some(requests);
            calm = if quiet && !busy && steady { calm + 1 } else { 0 };
            if calm >= CALM_POLLS {
                return Ok(());
            }
            last = Some(requests);
            if Instant::now() > deadline {
                // Say what was still going on: it is what the controller's log must explain.
                let controller = match in_flight {
                    Some(n) => format!("{n} reconcile(s) in flight"),
                    None => "its metrics unreadable".to_string(),
                };
                let simulator = if quiet { "quiet" } else { "busy" };
                let requests = if steady { "steady" } else { "still arriving" };
                return Err(StepError::Timeout {
                    what: format!(
                        "the simulator and the controller to settle (last look: simulator {simulator}, \
                         controller {controller}, requests {requests}, {runners} real runner(s) running)"
                    ),
                    secs: wait.as_secs(),
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn object(&self, kind: Kind, name: &str) -> Option<Value> {
        let store = match kind {
            Kind::TerraformCluster => TC,
            Kind::TerraformMachinePool => TMP,
            Kind::TerraformMachine => TM,
        };
        self.sim.get(store, NS, name)
    }

    /// The object's Jobs as `(op, seq, job)`, by sequence number.
    fn jobs_of(sim: &Sim, kind: Kind, name: &str) -> Vec<(Op, u32, Value)> {
        let mut v: Vec<(Op, u32, Value)> = sim
            .list("batch/jobs", Some(NS))
            .into_iter()
            .filter_map(|j| {
                let jn = j.pointer("/metadata/name")?.as_str()?.to_string();
                let (op, seq) = names::parse_job_name(kind, NS, name, &jn)?;
                Some((op, seq, j))
            })
            .collect();
        v.sort_by_key(|(_, seq, _)| *seq);
        v
    }

    fn last_seq(&self, kind: Kind, name: &str) -> u32 {
        Self::jobs_of(self.sim, kind, name)
            .last()
            .map(|(_, s, _)| *s)
            .unwrap_or(0)
    }

    /// The object's Jobs that exist now, and those seen before that went since (as last seen),
    /// by sequence number.
    fn jobs_ever(
        sim: &Sim,
        seen: &std::sync::Mutex<BTreeMap<String, Value>>,
        kind: Kind,
        name: &str,
    ) -> Vec<(Op, u32, Value)> {
        let mut v = Self::jobs_of(sim, kind, name);
        let live: std::collections::BTreeSet<u32> = v.iter().map(|(_, s, _)| *s).collect();
        if let Ok(seen) = seen.lock() {
            for (jn, j) in seen.iter() {
                if let Some((op, seq)) = names::parse_job_name(kind, NS, name, jn)
                    && !live.contains(&seq)
                {
                    v.push((op, seq, j.clone()));
                }
            }
        }
        v.sort_by_key(|(_, seq, _)| *seq);
        v
    }

    /// Wait for the object's next Job of `op` with a sequence number above `after` (one that
    /// already came and went counts).
    async fn next_job(&mut self, kind: Kind, name: &str, op: Op, after: u32) -> Result<(u32, Value), StepError> {
        let what = format!("a {} Job of {}/{name} after #{after}", op.as_str(), kind.as_str());
        let seen = self.jobs_last_seen.clone();
        self.until(&what, |sim| {
            Self::jobs_ever(sim, &seen, kind, name)
                .into_iter()
                .find(|(o, s, _)| *o == op && *s > after)
                .map(|(_, s, j)| (s, j))
        })
        .await
    }

    /// Wait until the Job is booked (`captf.io/outcome`), and check the outcome.
    async fn booked(&mut self, job: &Value, outcome: &str) -> Result<Value, StepError> {
        let name = job
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let got = self
            .until(&format!("Job {name} to be booked"), |sim| {
                let j = sim.get("batch/jobs", NS, &name)?;
                annotation(&j, "captf.io/outcome").map(|o| (o.to_string(), j.clone()))
            })
            .await?;
        if got.0 != outcome {
            return Err(unexpected(format!(
                "Job {name} booked as {}, expected {outcome}",
                got.0
            )));
        }
        Ok(got.1)
    }

    /// Whether the Job's pod runs the real runner (else a scripted one).
    fn is_real(&self, job: &Value) -> bool {
        self.sim.job_ran_as_process(NS, &job_name(job))
    }

    /// Let a started Job run to its end. A scripted runner plays on the simulated clock: 30s
    /// pass. A real runner ends in wall time (bounded) while the clock stands still.
    async fn run(&mut self, job: &Value) -> Result<(), StepError> {
        if !self.is_real(job) {
            return self.advance(Duration::from_secs(30)).await;
        }
        let name = job_name(job);
        let pod_prefix = format!("{name}-");
        self.until_for(&format!("the real runner of Job {name} to end"), REAL_WAIT, |sim| {
            (!sim.process_pods().iter().any(|(_, p)| p.starts_with(&pod_prefix))).then_some(())
        })
        .await
    }

    /// The thing the test provider's world holds (real Terraform only).
    fn thing(&self, name: &str) -> Option<captf_testprovider::world::Thing> {
        self.real.as_ref().and_then(|r| r.thing(name))
    }

    /// Check what real Terraform left in the test provider's world (nothing to check when the
    /// runners are scripted).
    fn expect_things(&self, want: &[(&str, Option<&str>)]) -> Result<(), StepError> {
        if self.real.is_none() {
            return Ok(());
        }
        for (name, content) in want {
            let got = self.thing(name).map(|t| t.content);
            if got.as_deref() != *content {
                return Err(unexpected(format!(
                    "the test provider's thing {name} is {got:?}, expected {content:?}"
                )));
            }
        }
        Ok(())
    }

    async fn condition_is(
        &mut self,
        kind: Kind,
        name: &str,
        type_: &str,
        status: &str,
        reason: &str,
    ) -> Result<(String, String, String), StepError> {
        let store = match kind {
            Kind::TerraformCluster => TC,
            Kind::TerraformMachinePool => TMP,
            Kind::TerraformMachine => TM,
        };
        let what = format!("{}/{name} {type_}={status}/{reason}", kind.as_str());
        self.until(&what, |sim| {
            let o = sim.get(store, NS, name)?;
            let c = condition(&o, type_)?;
            (c.0 == status && c.1 == reason).then_some(c)
        })
        .await
    }

    fn api(&self, kind: Kind) -> Api<DynamicObject> {
        let ar = match kind {
            Kind::TerraformCluster => resource("TerraformCluster", "terraformclusters"),
            Kind::TerraformMachinePool => resource("TerraformMachinePool", "terraformmachinepools"),
            Kind::TerraformMachine => resource("TerraformMachine", "terraformmachines"),
        };
        Api::namespaced_with(self.client.clone(), NS, &ar)
    }

    async fn create(&self, kind: Kind, obj: Value) -> Result<DynamicObject, kube::Error> {
        let obj: DynamicObject = serde_json::from_value(obj).map_err(kube::Error::SerdeError)?;
        self.api(kind).create(&PostParams::default(), &obj).await
    }

    async fn merge_patch(&self, kind: Kind, name: &str, patch: Value) -> Result<(), StepError> {
        self.api(kind)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(api_err(format!("patch {}/{name}", kind.as_str())))?;
        Ok(())
    }

    /// Run every step; stops at the first failure. Rows for steps not run say so.
    pub async fn run_script(&mut self) -> Vec<Row> {
        let mut rows = Vec::new();
        let mut failed = false;
        for spec in STEPS {
            if failed {
                rows.push(Row {
                    step: spec.name.into(),
                    expected: spec.expected.into(),
                    observed: "not run (an earlier step failed)".into(),
                    ok: false,
                    ..Row::default()
                });
                continue;
            }
            if self.echo {
                println!("\n== step {}: {}", spec.name, spec.expected);
            }
            self.observe();
            let before: std::collections::BTreeSet<String> = self.jobs_seen.keys().cloned().collect();
            let result = match spec.name.as_bytes().first() {
                Some(b'1') => self.step1().await,
                Some(b'2') => self.step2().await,
                Some(b'3') => self.step3().await,
                Some(b'4') => self.step4().await,
                Some(b'5') => self.step5().await,
                _ => self.step6().await,
            };
            self.observe();
            let new: Vec<bool> = self
                .jobs_seen
                .iter()
                .filter(|(n, _)| !before.contains(*n))
                .map(|(_, real)| *real)
                .collect();
            let real_jobs = new.iter().filter(|real| **real).count();
            let (observed, ok) = match result {
                Ok(o) => (o, true),
                Err(e) => {
                    failed = true;
                    (e.to_string(), false)
                }
            };
            rows.push(Row {
                step: spec.name.into(),
                expected: spec.expected.into(),
                observed,
                ok,
                real_jobs,
                scripted_jobs: new.len() - real_jobs,
            });
        }
        rows
    }

    /// Step 1: a bad spec is rejected with the webhook's message; the minimal example is
    /// accepted and defaulted by the mutating webhook.
    async fn step1(&mut self) -> Result<String, StepError> {
        let mut bad = yaml_object(MINIMAL_CLUSTER)?;
        bad["metadata"]["name"] = json!("broken");
        bad["spec"]["module"]["source"] = json!("./modules/cluster");
        bad["spec"]["jobs"] = json!({"activeDeadlineSeconds": 3600, "lockTimeoutSeconds": 4000});
        self.say("create TerraformCluster/broken (local module path, lockTimeoutSeconds 4000 > deadline 3600)");
        let message = match self.create(Kind::TerraformCluster, bad).await {
            Ok(_) => return Err(unexpected("TerraformCluster/broken was accepted")),
            Err(kube::Error::Api(s)) => format!("{} {}", s.code, s.message),
            Err(e) => return Err(api_err("create TerraformCluster/broken")(e)),
        };
        self.say(&format!("rejected: {message}"));
        for want in [
            "denied the request",
            "spec.module.source",
            "spec.jobs.lockTimeoutSeconds",
        ] {
            if !message.contains(want) {
                return Err(unexpected(format!("rejection does not mention {want:?}: {message}")));
            }
        }
        if self.object(Kind::TerraformCluster, "broken").is_some() {
            return Err(unexpected("TerraformCluster/broken exists after its rejection"));
        }

        let mut obj = yaml_object(MINIMAL_CLUSTER)?;
        match &self.real {
            Some(real) => {
                // The example's git source needs the network; the same module interface is
                // served here, with the test provider's things standing in for the cloud.
                obj["spec"]["module"]["source"] = json!(real.cluster_source());
                self.say("create TerraformCluster/demo from examples/terraformcluster-minimal.yaml, its module served locally (cluster.tar.gz)");
            }
            None => self.say("create TerraformCluster/demo from examples/terraformcluster-minimal.yaml"),
        }
        let created = self
            .create(Kind::TerraformCluster, obj)
            .await
            .map_err(api_err("create TerraformCluster/demo"))?;
        let spec = created.data.get("spec").cloned().unwrap_or(Value::Null);
        let checks = [
            ("/jobs/activeDeadlineSeconds", json!(3600)),
            ("/jobs/lockTimeoutSeconds", json!(300)),
            ("/drift/interval", json!("30m")),
            ("/drift/remediation", json!("Auto")),
            ("/guard/destructive", json!("Block")),
            ("/deletionPolicy", json!("Destroy")),
        ];
        let mut shown = Vec::new();
        for (ptr, want) in checks {
            let got = spec.pointer(ptr).cloned().unwrap_or(Value::Null);
            if got != want {
                return Err(unexpected(format!(
                    "default spec{} is {got}, expected {want}",
                    ptr.replace('/', ".")
                )));
            }
            shown.push(format!("{}={}", ptr.trim_start_matches('/'), got));
        }
        self.say(&format!("accepted and defaulted: {}", shown.join(" ")));
        let first_line = message.lines().next().unwrap_or("").to_string();
        Ok(format!(
            "rejected ({}); demo defaulted: deadline 3600s, lock timeout 300s, drift 30m Auto, guard Block",
            clip(&first_line, 160)
        ))
    }

    /// Step 2: the apply fails twice, is retried 1m and 2m after each failure, then succeeds:
    /// Ready, with the control-plane endpoint from the outputs.
    async fn step2(&mut self) -> Result<String, StepError> {
        let k = Kind::TerraformCluster;
        // The two failures come from the scripts queued in `prepare`, before the object existed.
        let mut delays = Vec::new();
        let (mut seq, mut job) = self.next_job(k, CLUSTER, Op::Apply, 0).await?;
        for (n, want) in [(1, 60i64), (2, 120)] {
            self.run(&job).await?;
            let j = self.booked(&job, "failed").await?;
            let fin = job_finish_time(&j).ok_or_else(|| unexpected("failed Job has no finish time"))?;
            let nb = self
                .until("nextAction InputsChangedBackoff", |sim| {
                    let o = sim.get(TC, NS, CLUSTER)?;
                    let na = o.pointer("/status/nextAction")?;
                    if na["reason"] != "InputsChangedBackoff" {
                        return None;
                    }
                    na["notBefore"].as_str()?.parse::<Timestamp>().ok()
                })
                .await?;
            if (nb - fin).get_seconds() != want {
                return Err(unexpected(format!(
                    "failure {n}: notBefore is {}s after the failure, expected {want}s",
                    (nb - fin).get_seconds()
                )));
            }
            self.advance_to(nb - SignedDuration::from_secs(1)).await?;
            self.settle().await?;
            if self.last_seq(k, CLUSTER) != seq {
                return Err(unexpected(format!("failure {n}: a retry started before notBefore")));
            }
            self.advance_to(nb).await?;
            let (s2, j2) = self.next_job(k, CLUSTER, Op::Apply, seq).await?;
            let started = created(&j2).ok_or_else(|| unexpected("Job without creationTimestamp"))?;
            let d = (started - fin).get_seconds();
            if d != want {
                return Err(unexpected(format!(
                    "retry {n} started {d}s after the failure, expected {want}s"
                )));
            }
            delays.push(format!("{}s", d));
            seq = s2;
            job = j2;
        }
        self.run(&job).await?;
        self.booked(&job, "succeeded").await?;
        self.condition_is(k, CLUSTER, "UpToDate", "True", "Ready").await?;
        let c = self
            .until("spec.controlPlaneEndpoint", |sim| {
                let c = sim.get(TC, NS, CLUSTER)?;
                c.pointer("/spec/controlPlaneEndpoint/host")?;
                Some(c)
            })
            .await?;
        let ep = c.pointer("/spec/controlPlaneEndpoint").cloned().unwrap_or(Value::Null);
        let host = ep["host"].as_str().unwrap_or("");
        let port = ep["port"].as_i64().unwrap_or(0);
        let want_host = if self.real.is_some() {
            real::ENDPOINT_HOST
        } else {
            "10.0.0.1"
        };
        if (host, port) != (want_host, 6443) {
            return Err(unexpected(format!("controlPlaneEndpoint is {ep}")));
        }
        self.expect_things(&[
            (real::LOAD_BALANCER, Some("port 6443")),
            (real::CONTROL_PLANE, Some("kubernetes 1.32")),
        ])?;
        // The first drift check runs at once (never checked); it finds nothing.
        let (_, drift) = self.next_job(k, CLUSTER, Op::Drift, seq).await?;
        self.run(&drift).await?;
        self.booked(&drift, "succeeded").await?;
        self.condition_is(k, CLUSTER, "DriftDetected", "False", "NoDrift")
            .await?;
        let from = if self.real.is_some() {
            "real Terraform outputs"
        } else {
            "the outputs"
        };
        Ok(format!(
            "2 failures, retries after {}; Ready=True, endpoint {host}:{port} from {from}; first drift check: NoDrift",
            delays.join(" and ")
        ))
    }

    /// Jobs of the namespace not booked yet (no `captf.io/outcome`).
    fn unbooked(sim: &Sim) -> Vec<Value> {
        sim.list("batch/jobs", Some(NS))
            .into_iter()
            .filter(|j| annotation(j, "captf.io/outcome").is_none())
            .collect()
    }

    /// Let every running Job finish (30s of simulated time each, or its real runner's end)
    /// until nothing runs.
    async fn quiesce(&mut self) -> Result<(), StepError> {
        for _ in 0..10 {
            self.settle().await?;
            let open = Self::unbooked(self.sim);
            let Some(job) = open.first().cloned() else {
                return Ok(());
            };
            self.run(&job).await?;
            let name = job
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            self.until(&format!("Job {name} to be booked"), |sim| {
                let j = sim.get("batch/jobs", NS, &name)?;
                annotation(&j, "captf.io/outcome").map(|_| ())
            })
            .await?;
        }
        Err(unexpected("Jobs kept starting while the demo waited for quiet"))
    }

    /// Advance the clock by `step` until `f` holds (at most `max` steps).
    async fn advance_until<T>(
        &mut self,
        what: &str,
        step: Duration,
        max: u32,
        mut f: impl FnMut(&Sim) -> Option<T>,
    ) -> Result<T, StepError> {
        for _ in 0..max {
            let end = Instant::now() + Duration::from_millis(200);
            while Instant::now() < end {
                self.observe();
                if let Some(v) = f(self.sim) {
                    self.observe();
                    return Ok(v);
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            self.advance(step).await?;
        }
        self.until(what, f).await
    }

    /// Step 3: the machine pool's first runner is evicted (not counted: the retry starts at
    /// once with attempt 1), the second dies holding the state lock (counted: 1m backoff), and
    /// the third is handed the lock ID and clears it (`ForceUnlocked`).
    async fn step3(&mut self) -> Result<String, StepError> {
        let k = Kind::TerraformMachinePool;
        let m = || JobMatch::object(k, NS, POOL).op(Op::Apply);
        self.sim.script(m(), RunnerScript::evicted());
        self.sim
            .script(m(), RunnerScript::die_holding_lock_id(DEAD_RUNNER_LOCK));
        let mut pool = yaml_object(MACHINE_POOL)?;
        match &self.real {
            Some(real) => {
                pool["spec"]["module"]["source"] = json!(real.pool_source());
                self.say("create TerraformMachinePool/demo-workers from examples/terraformmachinepool.yaml, its module served locally (pool.tar.gz)");
            }
            None => self.say("create TerraformMachinePool/demo-workers from examples/terraformmachinepool.yaml"),
        }
        // Owned by its TerraformCluster, as the example says: the label alone would not hold the
        // cluster's deletion (docs/rules.md, "Deletion").
        let uid = self
            .sim
            .get(TC, NS, CLUSTER)
            .and_then(|c| c.pointer("/metadata/uid").and_then(Value::as_str).map(String::from))
            .ok_or_else(|| unexpected("TerraformCluster demo has no uid"))?;
        pool["metadata"]["ownerReferences"] = json!([{
            "apiVersion": captf_shared::keys::API_VERSION, "kind": "TerraformCluster",
            "name": CLUSTER, "uid": uid,
        }]);
        self.create(k, pool)
            .await
            .map_err(api_err("create TerraformMachinePool/demo-workers"))?;
        let (s1, j1) = self.next_job(k, POOL, Op::Apply, 0).await?;
        self.say("the node is drained: the runner pod is evicted");
        self.run(&j1).await?;
        self.booked(&j1, "interrupted").await?;
        let evicted_at = self.sim.now();
        let (s2, j2) = self.next_job(k, POOL, Op::Apply, s1).await?;
        if created(&j2) != Some(evicted_at) {
            return Err(unexpected("the retry after an eviction did not start at once"));
        }
        let attempt = j2.pointer("/metadata/labels/captf.io~1attempt").and_then(Value::as_str);
        if attempt != Some("1") {
            return Err(unexpected(format!(
                "retry after an eviction has attempt {attempt:?}, expected 1"
            )));
        }
        self.say("the next runner takes the state lock and is OOM-killed");
        self.run(&j2).await?;
        let j2 = self.booked(&j2, "failed").await?;
        let fin = job_finish_time(&j2).ok_or_else(|| unexpected("failed Job has no finish time"))?;
        let lease = names::lock_lease_name(&names::suffix(k, NS, POOL));
        let holder = self.sim.get("coordination.k8s.io/leases", NS, &lease).and_then(|l| {
            l.pointer("/spec/holderIdentity")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
        if holder.as_deref() != Some(DEAD_RUNNER_LOCK) {
            return Err(unexpected(format!(
                "lock {lease} holder is {holder:?} after the runner died"
            )));
        }
        self.advance_to(fin + SignedDuration::from_secs(60)).await?;
        let (_, j3) = self.next_job(k, POOL, Op::Apply, s2).await?;
        if annotation(&j3, "captf.io/force-unlock") != Some(DEAD_RUNNER_LOCK) {
            return Err(unexpected("the next Job does not carry the dead runner's lock ID"));
        }
        self.until("event ForceUnlocked", |sim| {
            sim.events(NS)
                .iter()
                .any(|e| e["reason"] == "ForceUnlocked")
                .then_some(())
        })
        .await?;
        self.run(&j3).await?;
        self.booked(&j3, "succeeded").await?;
        self.condition_is(k, POOL, "UpToDate", "True", "Ready").await?;
        self.expect_things(&[(real::WORKERS, Some("3 x m6i.large"))])?;
        self.quiesce().await?;
        let holder = self.sim.get("coordination.k8s.io/leases", NS, &lease).and_then(|l| {
            l.pointer("/spec/holderIdentity")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
        if holder.as_deref() == Some(DEAD_RUNNER_LOCK) {
            return Err(unexpected(format!("lock {lease} still held by the dead runner")));
        }
        let fails = self
            .object(k, POOL)
            .and_then(|o| o.pointer("/status/consecutiveFailures/apply").and_then(Value::as_i64))
            .unwrap_or(0);
        Ok(format!(
            "eviction: retried at once (attempt 1); dead runner's lock {}… handed to the next Job 60s later: ForceUnlocked, Ready (failures now {fails})",
            &DEAD_RUNNER_LOCK[..8]
        ))
    }

    /// Step 4: the next drift check finds drift; an apply remediates it. Then a change whose
    /// plan destroys a resource is blocked until a person approves its plan hash.
    async fn step4(&mut self) -> Result<String, StepError> {
        let k = Kind::TerraformCluster;
        let c = self.object(k, CLUSTER).unwrap_or(Value::Null);
        let last: Timestamp = c
            .pointer("/status/lastDriftCheckTime")
            .and_then(Value::as_str)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| unexpected("status.lastDriftCheckTime is not set"))?;
        let due = last + SignedDuration::from_mins(30);
        match &self.real {
            Some(real) => {
                real.edit(real::CONTROL_PLANE, "kubernetes 1.31 (edited by hand)")
                    .map_err(|e| unexpected(format!("failed to edit the test provider's world: {e}")))?;
                self.say(&format!(
                    "someone edits the control plane by hand (its thing in the test provider's world); the next drift check is due at {}",
                    fmt_t(due)
                ));
            }
            None => {
                self.sim.script(
                    JobMatch::object(k, NS, CLUSTER).op(Op::Drift),
                    RunnerScript::drift(true),
                );
                self.say(&format!(
                    "someone edits the infrastructure by hand; the next drift check is due at {}",
                    fmt_t(due)
                ));
            }
        }
        let seq = self.last_seq(k, CLUSTER);
        self.advance_to(due).await?;
        let (s, drift) = self.next_job(k, CLUSTER, Op::Drift, seq).await?;
        self.run(&drift).await?;
        self.booked(&drift, "succeeded").await?;
        self.condition_is(k, CLUSTER, "DriftDetected", "True", "DriftFound")
            .await?;
        let (s, fix) = self.next_job(k, CLUSTER, Op::Apply, s).await?;
        if annotation(&fix, "captf.io/drift-remediation") != Some("true")
            || annotation(&fix, "captf.io/reason") != Some("DriftRemediation")
        {
            return Err(unexpected("the apply after drift is not a DriftRemediation"));
        }
        self.run(&fix).await?;
        self.booked(&fix, "succeeded").await?;
        self.condition_is(k, CLUSTER, "UpToDate", "True", "Ready").await?;
        self.expect_things(&[(real::CONTROL_PLANE, Some("kubernetes 1.32"))])?;

        if self.real.is_none() {
            let summary = PlanSummary {
                add: 1,
                change: 0,
                destroy: 1,
                replace: 1,
            };
            self.sim.script(
                JobMatch::object(k, NS, CLUSTER).op(Op::Apply),
                RunnerScript::blocked(PLAN_HASH, summary),
            );
        }
        self.say("change spec.variables.control_plane_instance_type: the plan replaces the control plane");
        self.merge_patch(
            k,
            CLUSTER,
            json!({"spec": {"variables": {"control_plane_instance_type": "m6i.xlarge"}}}),
        )
        .await?;
        let (s, blocked) = self.next_job(k, CLUSTER, Op::Apply, s).await?;
        self.run(&blocked).await?;
        self.booked(&blocked, "blocked").await?;
        self.condition_is(k, CLUSTER, "ApplyJobSucceeded", "False", "DestructivePlanBlocked")
            .await?;
        let c = self
            .until("nextAction AwaitingApproval", |sim| {
                let c = sim.get(TC, NS, CLUSTER)?;
                (c.pointer("/status/nextAction/reason")? == "AwaitingApproval").then_some(c)
            })
            .await?;
        let plan = c.pointer("/status/pendingPlan").cloned().unwrap_or(Value::Null);
        let hash = plan["hash"].as_str().unwrap_or("").to_string();
        let (destroys, replaces) = (
            plan["destroy"].as_u64().unwrap_or(0),
            plan["replace"].as_u64().unwrap_or(0),
        );
        // A scripted plan has the script's hash; a real one, Terraform's.
        let hash_ok = match self.real {
            None => hash == PLAN_HASH,
            Some(_) => !hash.is_empty(),
        };
        if !hash_ok || destroys + replaces == 0 {
            return Err(unexpected(format!("status.pendingPlan is {plan}")));
        }
        self.expect_things(&[
            (real::CONTROL_PLANE, Some("kubernetes 1.32")),
            (real::CONTROL_PLANE_XLARGE, None),
        ])?;
        self.say("an hour passes: nobody approved, so nothing runs");
        self.advance(Duration::from_secs(3600)).await?;
        self.settle().await?;
        if self.last_seq(k, CLUSTER) != s {
            return Err(unexpected("a Job started while the plan waited for approval"));
        }
        self.say(&format!(
            "kubectl annotate terraformcluster demo captf.io/approve-plan={hash}"
        ));
        self.merge_patch(
            k,
            CLUSTER,
            json!({"metadata": {"annotations": {"captf.io/approve-plan": hash}}}),
        )
        .await?;
        let (_, approved) = self.next_job(k, CLUSTER, Op::Apply, s).await?;
        if annotation(&approved, "captf.io/approved-plan") != Some(hash.as_str()) {
            return Err(unexpected(
                "the apply after approval does not carry the approved plan hash",
            ));
        }
        self.run(&approved).await?;
        self.booked(&approved, "succeeded").await?;
        self.condition_is(k, CLUSTER, "ApplyJobSucceeded", "True", "ApplySucceeded")
            .await?;
        self.expect_things(&[
            (real::CONTROL_PLANE, None),
            (real::CONTROL_PLANE_XLARGE, Some("kubernetes 1.32")),
        ])?;
        self.quiesce().await?;
        let drift = if self.real.is_some() {
            "real drift (the control plane edited by hand) found → DriftRemediation apply restored it"
        } else {
            "DriftFound → DriftRemediation apply succeeded"
        };
        Ok(format!(
            "{drift}; plan {} blocked ({}), no Job for 1h, approved → applied",
            clip(&hash, 12),
            [(destroys, "destroy"), (replaces, "replace")]
                .iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, what)| format!("{n} {what}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }

    /// Step 5: a person's workstation holds the state lock. The controller reports
    /// `StateLocked` with the holder, never unlocks it, and its failed Job backs off.
    async fn step5(&mut self) -> Result<String, StepError> {
        let k = Kind::TerraformCluster;
        let suffix = names::suffix(k, NS, CLUSTER);
        let lease = names::lock_lease_name(&suffix);
        self.say("alice runs `tofu apply` from her laptop: she holds the state lock");
        self.sim.hold_lock(NS, &suffix, WORKSTATION_LOCK, "alice@laptop");
        // The first runner waits out its 300s lock timeout: scripted, on the simulated clock.
        self.sim.script(
            JobMatch::object(k, NS, CLUSTER).op(Op::Apply),
            RunnerScript::realistic_with_outputs(cluster_outputs()),
        );
        let seq = self.last_seq(k, CLUSTER);
        self.say("change spec.variables.kubernetes_version");
        self.merge_patch(
            k,
            CLUSTER,
            json!({"spec": {"variables": {"kubernetes_version": "1.33"}}}),
        )
        .await?;
        let (s1, j1) = self.next_job(k, CLUSTER, Op::Apply, seq).await?;
        if annotation(&j1, "captf.io/force-unlock").is_some() {
            return Err(unexpected("a Job was handed a workstation's lock"));
        }
        let (_, _, msg) = self
            .condition_is(k, CLUSTER, "StateReadable", "False", "StateLocked")
            .await?;
        if !msg.contains("alice@laptop") {
            return Err(unexpected(format!(
                "StateLocked message does not name the holder: {msg}"
            )));
        }
        self.say("the runner waits lockTimeoutSeconds (300s) for the lock, then fails");
        let name = j1
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let j1 = self
            .advance_until(&format!("Job {name} to be booked"), Duration::from_secs(60), 8, |sim| {
                let j = sim.get("batch/jobs", NS, &name)?;
                annotation(&j, "captf.io/outcome").is_some().then_some(j)
            })
            .await?;
        if annotation(&j1, "captf.io/outcome") != Some("failed") {
            return Err(unexpected("the Job that waited for the lock was not booked as failed"));
        }
        let fin = job_finish_time(&j1).ok_or_else(|| unexpected("failed Job has no finish time"))?;
        self.advance_to(fin + SignedDuration::from_secs(59)).await?;
        self.settle().await?;
        if self.last_seq(k, CLUSTER) != s1 {
            return Err(unexpected("a retry started before its 1m backoff"));
        }
        self.advance_to(fin + SignedDuration::from_secs(60)).await?;
        let (_, j2) = self.next_job(k, CLUSTER, Op::Apply, s1).await?;
        if annotation(&j2, "captf.io/force-unlock").is_some() {
            return Err(unexpected("the retry was handed the workstation's lock"));
        }
        let holder = self.sim.get("coordination.k8s.io/leases", NS, &lease).and_then(|l| {
            l.pointer("/spec/holderIdentity")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
        if holder.as_deref() != Some(WORKSTATION_LOCK) {
            return Err(unexpected(format!(
                "the workstation's lock was touched: holder {holder:?}"
            )));
        }
        self.say("alice's apply finishes and releases the lock");
        self.sim.release_lock(NS, &suffix);
        if self.is_real(&j2) {
            // Real Terraform retries the lock in wall time and gets it once alice let go.
            self.run(&j2).await?;
        } else {
            // The scripted runner retries the lock on the simulated clock.
            let name2 = job_name(&j2);
            self.advance_until(
                &format!("Job {name2} to be booked"),
                Duration::from_secs(60),
                12,
                |sim| {
                    let j = sim.get("batch/jobs", NS, &name2)?;
                    annotation(&j, "captf.io/outcome").map(|_| ())
                },
            )
            .await?;
        }
        self.booked(&j2, "succeeded").await?;
        self.condition_is(k, CLUSTER, "UpToDate", "True", "Ready").await?;
        self.expect_things(&[(real::CONTROL_PLANE_XLARGE, Some("kubernetes 1.33"))])?;
        self.quiesce().await?;
        Ok("StateLocked naming alice@laptop; Job failed after the 300s lock wait; retry 60s later without force-unlock; lock untouched until alice released it; then Ready".to_string())
    }

    /// Step 6: deleting the cluster is held while its machine pool exists; deleting the pool
    /// destroys it, then the cluster is destroyed and both finalizers are removed.
    async fn step6(&mut self) -> Result<String, StepError> {
        self.quiesce().await?;
        let tc = Kind::TerraformCluster;
        let tmp = Kind::TerraformMachinePool;
        let seq = self.last_seq(tc, CLUSTER);
        self.say("kubectl delete terraformcluster demo");
        self.delete(tc, CLUSTER).await?;
        let (_, _, msg) = self.condition_is(tc, CLUSTER, "Ready", "False", "DeletionHeld").await?;
        if !msg.contains(POOL) {
            return Err(unexpected(format!("DeletionHeld does not name the pool: {msg}")));
        }
        self.advance(Duration::from_secs(120)).await?;
        self.settle().await?;
        if self.last_seq(tc, CLUSTER) != seq {
            return Err(unexpected("the cluster started a Job while its pool exists"));
        }
        let pseq = self.last_seq(tmp, POOL);
        self.say("kubectl delete terraformmachinepool demo-workers");
        self.delete(tmp, POOL).await?;
        let (_, pd) = self.next_job(tmp, POOL, Op::Destroy, pseq).await?;
        self.run(&pd).await?;
        self.until("TerraformMachinePool/demo-workers to be gone", |sim| {
            sim.get(TMP, NS, POOL).is_none().then_some(())
        })
        .await?;
        self.expect_things(&[
            (real::WORKERS, None),
            (real::CONTROL_PLANE_XLARGE, Some("kubernetes 1.33")),
        ])?;
        let seen = self.jobs_last_seen.clone();
        let (_, _, cd) = self
            .advance_until("the cluster's destroy Job", Duration::from_secs(30), 4, |sim| {
                Self::jobs_ever(sim, &seen, tc, CLUSTER)
                    .into_iter()
                    .find(|(o, s, _)| *o == Op::Destroy && *s > seq)
            })
            .await?;
        self.run(&cd).await?;
        self.until("TerraformCluster/demo to be gone", |sim| {
            sim.get(TC, NS, CLUSTER).is_none().then_some(())
        })
        .await?;
        self.expect_things(&[(real::CONTROL_PLANE_XLARGE, None), (real::LOAD_BALANCER, None)])?;
        let destroyed = if self.real.is_some() {
            "destroyed by real Terraform"
        } else {
            "destroyed"
        };
        Ok(format!(
            "DeletionHeld naming the pool; pool {destroyed} and gone, then cluster {destroyed} and gone (finalizers removed)"
        ))
    }

    /// Queue the runner behaviour the script needs before the objects exist.
    pub fn prepare(&self) {
        let m = || JobMatch::object(Kind::TerraformCluster, NS, CLUSTER).op(Op::Apply);
        self.sim.script(
            m(),
            RunnerScript::fail("Error: creating EC2 VPC: RequestLimitExceeded: Request limit exceeded"),
        );
        self.sim.script(
            m(),
            RunnerScript::fail("Error: creating EC2 Subnet: InvalidVpcID.NotFound: The vpc ID does not exist"),
        );
    }

    /// Delete an object through the API.
    pub async fn delete(&self, kind: Kind, name: &str) -> Result<(), StepError> {
        self.api(kind)
            .delete(name, &DeleteParams::default())
            .await
            .map_err(api_err(format!("delete {}/{name}", kind.as_str())))?;
        Ok(())
    }
}

//! The scripted lifecycle of issue 9, step by step, against the simulator with the real webhook
//! and controller processes. Time moves only when a step advances the simulated clock; every
//! wait polls for a bounded real time and fails the step with what it waited for.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use captf_shared::{Kind, Op, names};
use captf_sim::{JobMatch, RunnerScript, Sim};
use jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use crate::summary::Row;
use crate::timeline::{Snapshot, Timeline};

pub const NS: &str = "default";
pub const CLUSTER: &str = "demo";
pub const POOL: &str = "demo-workers";
const GROUP: &str = "infrastructure.cluster.x-k8s.io";
const TC: &str = "infrastructure.cluster.x-k8s.io/terraformclusters";
const TMP: &str = "infrastructure.cluster.x-k8s.io/terraformmachinepools";
const TM: &str = "infrastructure.cluster.x-k8s.io/terraformmachines";
/// Real time a single wait may take before its step fails.
const WAIT: Duration = Duration::from_secs(20);
/// Real time given to the controller to act (or not) after the clock moved.
const SETTLE: Duration = Duration::from_millis(500);

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
    // Steps 3-6 follow in the next commit.
];

/// The demo's view of the world: the simulator, an API client, the timeline.
pub struct Demo<'a> {
    pub sim: &'a Sim,
    client: kube::Client,
    timeline: Timeline,
    /// Print timeline lines as they happen.
    pub echo: bool,
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1alpha1", kind), plural)
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
        // The simulated runner: the cluster module returns its endpoint, the pool module a name;
        // each step queues the special behaviour it shows.
        let cluster_id = names::object_id(Kind::TerraformCluster, NS, CLUSTER);
        sim.script_with(move |job| {
            let labels = job.metadata.labels.as_ref()?;
            (labels.get("captf.io/object") == Some(&cluster_id))
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
        }
    }

    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    fn snapshot(&self) -> Snapshot {
        let mut objects = self.sim.list(TC, Some(NS));
        objects.extend(self.sim.list(TMP, Some(NS)));
        objects.extend(self.sim.list(TM, Some(NS)));
        let jobs = self
            .sim
            .jobs(NS)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|j| serde_json::to_value(j).ok())
            .collect();
        Snapshot {
            objects,
            jobs,
            events: self.sim.events(NS),
        }
    }

    /// Look at the simulator and print what changed.
    pub fn observe(&mut self) {
        let snap = self.snapshot();
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

    fn advance(&mut self, d: Duration) {
        self.sim.advance(d);
        self.say(&format!("(clock +{}s)", d.as_secs()));
        self.observe();
    }

    fn advance_to(&mut self, t: Timestamp) {
        self.sim.advance_to(t);
        self.say("(clock moved)");
        self.observe();
    }

    /// Poll until `f` returns Some, observing as we go; at most [`WAIT`] of real time.
    async fn until<T>(&mut self, what: &str, mut f: impl FnMut(&Sim) -> Option<T>) -> Result<T, StepError> {
        let deadline = Instant::now() + WAIT;
        loop {
            self.observe();
            if let Some(v) = f(self.sim) {
                return Ok(v);
            }
            if Instant::now() > deadline {
                return Err(StepError::Timeout {
                    what: what.to_string(),
                    secs: WAIT.as_secs(),
                });
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Give the controller a moment to act, observing.
    async fn settle(&mut self) {
        let end = Instant::now() + SETTLE;
        while Instant::now() < end {
            self.observe();
            tokio::time::sleep(Duration::from_millis(25)).await;
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

    /// Wait for the object's next Job of `op` with a sequence number above `after`.
    async fn next_job(&mut self, kind: Kind, name: &str, op: Op, after: u32) -> Result<(u32, Value), StepError> {
        let what = format!("a {} Job of {}/{name} after #{after}", op.as_str(), kind.as_str());
        self.until(&what, |sim| {
            Self::jobs_of(sim, kind, name)
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
                });
                continue;
            }
            if self.echo {
                println!("\n== step {}: {}", spec.name, spec.expected);
            }
            let result = match spec.name.as_bytes().first() {
                Some(b'1') => self.step1().await,
                Some(b'2') => self.step2().await,
                Some(b'3') => self.step3().await,
                Some(b'4') => self.step4().await,
                Some(b'5') => self.step5().await,
                _ => self.step6().await,
            };
            self.observe();
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

        self.say("create TerraformCluster/demo from examples/terraformcluster-minimal.yaml");
        let obj = yaml_object(MINIMAL_CLUSTER)?;
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
            self.advance(Duration::from_secs(30));
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
            self.advance_to(nb - SignedDuration::from_secs(1));
            self.settle().await;
            if self.last_seq(k, CLUSTER) != seq {
                return Err(unexpected(format!("failure {n}: a retry started before notBefore")));
            }
            self.advance_to(nb);
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
        self.advance(Duration::from_secs(30));
        self.booked(&job, "succeeded").await?;
        self.condition_is(k, CLUSTER, "Ready", "True", "Ready").await?;
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
        if (host, port) != ("10.0.0.1", 6443) {
            return Err(unexpected(format!("controlPlaneEndpoint is {ep}")));
        }
        // The first drift check runs at once (never checked); it finds nothing.
        let (_, drift) = self.next_job(k, CLUSTER, Op::Drift, seq).await?;
        self.advance(Duration::from_secs(30));
        self.booked(&drift, "succeeded").await?;
        self.condition_is(k, CLUSTER, "DriftDetected", "False", "NoDrift")
            .await?;
        Ok(format!(
            "2 failures, retries after {}; Ready=True, endpoint {host}:{port}; first drift check: NoDrift",
            delays.join(" and ")
        ))
    }

    async fn step3(&mut self) -> Result<String, StepError> {
        Err(unexpected("not written yet"))
    }

    async fn step4(&mut self) -> Result<String, StepError> {
        Err(unexpected("not written yet"))
    }

    async fn step5(&mut self) -> Result<String, StepError> {
        Err(unexpected("not written yet"))
    }

    async fn step6(&mut self) -> Result<String, StepError> {
        Err(unexpected("not written yet"))
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

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n).collect();
        t.push('…');
        t
    }
}

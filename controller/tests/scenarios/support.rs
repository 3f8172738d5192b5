//! What every scenario shares: the simulator with the real controller runtime started against it,
//! and small readers of what the API holds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use serde_json::{Value, json};

use captf_controller::runtime::clock::WatchClock;
use captf_controller::runtime::{self, Handle, LogFormat, RunArgs};
use captf_shared::{Kind, Op, names};
use captf_sim::Sim;

pub(crate) const NS: &str = "default";
pub(crate) const TC: &str = "infrastructure.cluster.x-k8s.io/terraformclusters";
pub(crate) const TMP: &str = "infrastructure.cluster.x-k8s.io/terraformmachinepools";
pub(crate) const T0: &str = "2026-01-01T00:00:00Z";
pub(crate) const WAIT: Duration = Duration::from_secs(15);

pub(crate) fn args() -> RunArgs {
    RunArgs {
        namespace: Some(NS.into()),
        runner_image: "runner:test".into(),
        runner_service_account: "captf-runner".into(),
        metrics_addr: "127.0.0.1:0".parse().unwrap(),
        health_addr: "127.0.0.1:0".parse().unwrap(),
        leader_elect: false,
        leader_namespace: None,
        leader_lease_seconds: 15,
        leader_identity: None,
        concurrency: 4,
        log_format: LogFormat::Text,
        sim_clock_url: None,
    }
}

pub(crate) struct Env {
    pub(crate) sim: Sim,
    pub(crate) handle: Option<Handle>,
}

impl Env {
    pub(crate) async fn new() -> Result<Env> {
        Env::with(Sim::builder()).await
    }

    pub(crate) async fn with(builder: captf_sim::SimBuilder) -> Result<Env> {
        if std::env::var_os("RUST_LOG").is_some() {
            runtime::init_logging(LogFormat::Text);
        }
        let sim = builder.start_time(T0.parse()?).start().await?;
        sim.create_namespace(NS);
        let mut env = Env { sim, handle: None };
        env.start_controller().await?;
        Ok(env)
    }

    pub(crate) async fn start_controller(&mut self) -> Result<()> {
        let clock = Arc::new(WatchClock::new(self.sim.clock_watch()));
        let handle = runtime::start(self.sim.client()?, &args(), clock).await?;
        self.handle = Some(handle);
        Ok(())
    }

    pub(crate) fn metrics(&self) -> String {
        self.handle.as_ref().map(|h| h.metrics.encode()).unwrap_or_default()
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.sim.now()
    }

    pub(crate) fn advance(&self, secs: u64) {
        self.sim.advance(Duration::from_secs(secs));
    }

    pub(crate) fn object(&self, resource: &str, name: &str) -> Option<Value> {
        self.sim.get(resource, NS, name)
    }

    pub(crate) fn cluster(&self, name: &str) -> Value {
        self.object(TC, name).unwrap_or(Value::Null)
    }

    pub(crate) fn jobs_of(&self, kind: Kind, name: &str) -> Vec<Job> {
        let id = names::object_id(kind, NS, name);
        self.sim
            .jobs(NS)
            .unwrap_or_default()
            .into_iter()
            .filter(|j| j.metadata.labels.as_ref().and_then(|l| l.get("captf.io/object")) == Some(&id))
            .collect()
    }

    pub(crate) fn job_names(&self, kind: Kind, name: &str) -> Vec<String> {
        self.jobs_of(kind, name)
            .into_iter()
            .filter_map(|j| j.metadata.name)
            .collect()
    }

    /// Events with this reason, one entry per emission (a series counts its `count`).
    pub(crate) fn events(&self, reason: &str) -> Vec<Value> {
        self.sim
            .events(NS)
            .into_iter()
            .filter(|e| e.get("reason").and_then(Value::as_str) == Some(reason))
            .flat_map(|e| {
                let n = e.pointer("/series/count").and_then(Value::as_u64).unwrap_or(1);
                std::iter::repeat_n(e, n as usize)
            })
            .collect()
    }

    /// Poll until `f` returns Some (wall time ≤ WAIT).
    pub(crate) async fn until<T>(&self, what: &str, mut f: impl FnMut(&Env) -> Option<T>) -> Result<T> {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(v) = f(self) {
                return Ok(v);
            }
            if std::time::Instant::now() > deadline {
                bail!("timed out waiting for {what}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Wait for the object's Job with this op and sequence number to exist.
    pub(crate) async fn job(&self, kind: Kind, name: &str, op: Op, seq: u32) -> Result<Job> {
        let want = names::job_name(kind, NS, name, op, seq);
        self.until(&format!("Job {want}"), |e| {
            e.jobs_of(kind, name)
                .into_iter()
                .find(|j| j.metadata.name.as_deref() == Some(&want))
        })
        .await
    }

    /// Wait for a Job to be booked with this outcome.
    pub(crate) async fn booked(&self, job: &str, outcome: &str) -> Result<()> {
        self.until(&format!("Job {job} booked as {outcome}"), |e| {
            let j = e.sim.get("batch/jobs", NS, job)?;
            (j.pointer("/metadata/annotations/captf.io~1outcome")?.as_str()? == outcome).then_some(())
        })
        .await
    }

    /// Make sure nothing new happens for a moment (the controller had its chance to act).
    pub(crate) async fn settle(&self) {
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
}

/// A plain HTTP/1.1 GET (no client crate needed for one request).
pub(crate) async fn http_get(addr: std::net::SocketAddr, path: &str) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}

pub(crate) fn condition(obj: &Value, type_: &str) -> Option<(String, String, String)> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_string(),
                c["reason"].as_str().unwrap_or("").to_string(),
                c["message"].as_str().unwrap_or("").to_string(),
            )
        })
}

pub(crate) fn cluster_json(name: &str, spec_extra: Value) -> Value {
    let mut spec = json!({
        "module": {"source": "git::https://example.com/net.git"},
        "variables": {"region": "eu-west-1"},
        "drift": {"interval": "0"},
    });
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
        "kind": "TerraformCluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    })
}

pub(crate) fn outputs() -> BTreeMap<String, Value> {
    BTreeMap::from([(
        "control_plane_endpoint".to_string(),
        json!({"host": "10.0.0.1", "port": 6443}),
    )])
}

pub(crate) fn ts(j: &Job) -> Timestamp {
    j.metadata.creation_timestamp.as_ref().unwrap().0
}

pub(crate) fn finished(j: &Job) -> Timestamp {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| (c.type_ == "Failed" || c.type_ == "Complete") && c.status == "True")
        })
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
        .unwrap()
}

pub(crate) fn live(env: &Env, job: &str) -> Job {
    serde_json::from_value(env.sim.get("batch/jobs", NS, job).unwrap()).unwrap()
}

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

/// The chart's RBAC, as `helm template` renders it with default values (a chart test keeps the
/// file current). The controller runs under its ServiceAccount: a call the chart does not allow
/// is a 403, and [`Env::until`] fails the test on the first one.
pub(crate) const CHART_RBAC: &str = include_str!("../../../charts/tests/rendered/rbac.yaml");
/// The controller's ServiceAccount in the chart (release `captf` in `captf-system`).
pub(crate) const CONTROLLER_SA: (&str, &str) = ("captf-system", "captf-controller");

/// The workload-identity annotation the scenarios' controller puts on every runner account.
pub(crate) const IRSA: &str = "eks.amazonaws.com/role-arn";

pub(crate) fn args() -> RunArgs {
    RunArgs::from_flags(flags()).expect("the scenarios' controller flags parse")
}

/// The scenarios' controller flags, for a test that adds its own.
pub(crate) fn flags() -> Vec<String> {
    vec![
        format!("--namespace={NS}"),
        "--runner-image=runner:test".into(),
        format!("--runner-service-account-annotations={IRSA}=arn:aws:iam::1:role/tf"),
        "--metrics-addr=127.0.0.1:0".into(),
        "--health-addr=127.0.0.1:0".into(),
        "--concurrency=4".into(),
        "--log-format=text".into(),
        "--allow-env-from-secrets=false".into(),
    ]
}

/// A namespaced kind the scenarios reach through kube::Api (the Terraform kinds, Jobs, Secrets).
pub(crate) trait ApiKind:
    kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> ApiKind for K where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

pub(crate) struct Env {
    pub(crate) sim: Sim,
    pub(crate) handle: Option<Handle>,
}

impl Env {
    pub(crate) async fn new() -> Result<Env> {
        Env::with(Sim::builder()).await
    }

    /// An Env whose runners behave like tofu and report the control-plane endpoint `outputs()`.
    pub(crate) async fn with_realistic_runners() -> Result<Env> {
        let env = Env::new().await?;
        env.sim
            .set_default_script(captf_sim::RunnerScript::realistic_with_outputs(outputs()));
        Ok(env)
    }

    pub(crate) async fn with(builder: captf_sim::SimBuilder) -> Result<Env> {
        Env::with_args(builder, &args()).await
    }

    /// An Env whose controller runs with these arguments.
    pub(crate) async fn with_args(builder: captf_sim::SimBuilder, a: &RunArgs) -> Result<Env> {
        if std::env::var_os("RUST_LOG").is_some() {
            runtime::init_logging(LogFormat::Text);
        }
        let sim = builder.start_time(T0.parse()?).start().await?;
        sim.create_namespace(NS);
        sim.load_rbac(CHART_RBAC)?;
        let mut env = Env { sim, handle: None };
        env.start_controller_with(a).await?;
        Ok(env)
    }

    pub(crate) async fn start_controller(&mut self) -> Result<()> {
        self.start_controller_with(&args()).await
    }

    /// Start a controller with these arguments.
    pub(crate) async fn start_controller_with(&mut self, a: &RunArgs) -> Result<()> {
        let clock = Arc::new(WatchClock::new(self.sim.clock_watch()));
        let handle = runtime::start(self.controller_client()?, a, clock).await?;
        self.handle = Some(handle);
        Ok(())
    }

    /// A client with the chart's controller ServiceAccount's rights (a new token).
    pub(crate) fn controller_client(&self) -> Result<kube::Client> {
        Ok(self.sim.client_as(CONTROLLER_SA.0, CONTROLLER_SA.1)?)
    }

    /// Fail when RBAC denied any request so far (the controller needs a right the chart does
    /// not give it).
    pub(crate) fn no_denials(&self) -> Result<()> {
        let denied = self.sim.denied();
        if let Some(first) = denied.first() {
            bail!(
                "the chart's RBAC denied {} request(s); the first: {first}",
                denied.len()
            );
        }
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
            self.no_denials()?;
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

    /// Wait until the simulator and the controller are idle, so that what a test sees next is
    /// everything they will do without a new cause: no request in flight at the simulator, every
    /// watch event taken and handed to the controller's connections, no reconcile pass running,
    /// and no new request for a few polls in a row spanning 60 ms (a watch event handed over a
    /// moment ago has started its pass, whose first act is a request: the window covers the
    /// controller's reading of its connection, which on a loaded machine was seen to take longer
    /// than five 5 ms polls). Fails when that never happens.
    pub(crate) async fn until_idle(&self) -> Result<()> {
        const CALM_POLLS: u32 = 5;
        const CALM: Duration = Duration::from_millis(60);
        let deadline = std::time::Instant::now() + WAIT;
        let (mut last, mut calm, mut calm_since) = (None, 0, std::time::Instant::now());
        loop {
            let requests = self.sim.requests();
            let idle = self.sim.quiet() && self.handle.as_ref().is_none_or(|h| h.reconciles_in_flight() == 0);
            calm = if idle && last == Some(requests) { calm + 1 } else { 0 };
            if calm == 0 {
                calm_since = std::time::Instant::now();
            }
            if calm >= CALM_POLLS && calm_since.elapsed() >= CALM {
                return Ok(());
            }
            last = Some(requests);
            if std::time::Instant::now() > deadline {
                bail!("the simulator and the controller never became idle");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Let a running Job's runner finish (the simulated runners take 30s) and wait until the
    /// controller has booked it with this outcome.
    pub(crate) async fn run_until_booked(&self, job: &Job, outcome: &str) -> Result<()> {
        self.advance(30);
        self.booked(job_name(job), outcome).await
    }

    /// Create an object of this kind and wait for its first Job (apply 1).
    pub(crate) async fn create(&self, kind: Kind, obj: Value) -> Result<Job> {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
        self.sim.put(obj)?;
        self.job(kind, &name, Op::Apply, 1).await
    }

    /// Create a TerraformCluster (`cluster_json`) and wait for its first apply Job.
    pub(crate) async fn create_cluster(&self, name: &str, spec_extra: Value) -> Result<Job> {
        self.create(Kind::TerraformCluster, cluster_json(name, spec_extra))
            .await
    }

    /// Create a TerraformCluster and let its first apply Job run until it is booked as succeeded.
    pub(crate) async fn create_applied_cluster(&self, name: &str) -> Result<Job> {
        let job = self.create_cluster(name, json!({})).await?;
        self.run_until_booked(&job, "succeeded").await?;
        Ok(job)
    }

    /// Wait until the TerraformCluster `name` satisfies `f`; returns it as it was then.
    pub(crate) async fn until_cluster(&self, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Result<Value> {
        self.until(&format!("TerraformCluster {name}: {what}"), |e| {
            let c = e.cluster(name);
            f(&c).then_some(c)
        })
        .await
    }

    /// Wait until the TerraformCluster is `Ready=True`; returns it.
    pub(crate) async fn until_ready(&self, name: &str) -> Result<Value> {
        // Ready alone stays True from the first apply on: up to date too, so the newest inputs
        // are applied and nothing holds them.
        self.until_cluster(name, "Ready=True and UpToDate=True", |c| {
            ["Ready", "UpToDate"]
                .iter()
                .all(|t| condition(c, t).is_some_and(|(status, _, _)| status == "True"))
        })
        .await
    }

    /// Wait until the TerraformCluster's condition `type_` has this reason; returns it.
    pub(crate) async fn until_reason(&self, name: &str, type_: &str, reason: &str) -> Result<Value> {
        self.until_cluster(name, &format!("{type_} reason {reason}"), |c| {
            condition(c, type_).is_some_and(|(_, r, _)| r == reason)
        })
        .await
    }

    /// Wait until the TerraformCluster's `status.nextAction.reason` is this; returns it.
    pub(crate) async fn until_next_action(&self, name: &str, reason: &str) -> Result<Value> {
        self.until_cluster(name, &format!("nextAction {reason}"), |c| {
            c.pointer("/status/nextAction/reason").is_some_and(|r| r == reason)
        })
        .await
    }

    /// Wait until the TerraformCluster holds `value` at the JSON `pointer`; returns it.
    pub(crate) async fn until_field(&self, name: &str, pointer: &str, value: Value) -> Result<Value> {
        self.until_cluster(name, &format!("{pointer}={value}"), |c| {
            c.pointer(pointer) == Some(&value)
        })
        .await
    }

    /// A namespaced kube::Api of the simulator's client (what a person or another controller uses).
    pub(crate) fn api<K: ApiKind>(&self) -> Result<kube::Api<K>> {
        Ok(kube::Api::namespaced(self.sim.client()?, NS))
    }

    /// Delete an object through the API (kube::Api, as a person or another controller would).
    pub(crate) async fn delete<K: ApiKind>(&self, name: &str) -> Result<()> {
        let api = self.api::<K>()?;
        api.delete(name, &Default::default()).await?;
        Ok(())
    }

    /// Merge-patch an object through the API (kube::Api).
    pub(crate) async fn merge_patch<K: ApiKind>(&self, name: &str, patch: Value) -> Result<()> {
        let api = self.api::<K>()?;
        api.patch(name, &Default::default(), &kube::api::Patch::Merge(patch))
            .await?;
        Ok(())
    }

    /// The holder of a Lease (`Value::Null` when nobody holds it); an error if there is no Lease.
    pub(crate) fn lease_holder(&self, lease: &str) -> Result<Value> {
        let Some(l) = self.sim.get("coordination.k8s.io/leases", NS, lease) else {
            bail!("no Lease {lease}");
        };
        Ok(l.pointer("/spec/holderIdentity").cloned().unwrap_or(Value::Null))
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
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
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

/// A Job's name ("" for a Job without one, which the API never returns).
pub(crate) fn job_name(j: &Job) -> &str {
    j.metadata.name.as_deref().unwrap_or_default()
}

/// A Job's annotations (the controller always writes some).
/// The value of the environment variable `name` in the Job's runner container.
pub(crate) fn job_env(job: &Job, name: &str) -> Option<String> {
    job.spec.as_ref()?.template.spec.as_ref()?.containers[0]
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .clone()
}

pub(crate) fn annotations(j: &Job) -> &BTreeMap<String, String> {
    j.metadata.annotations.as_ref().expect("the Job has annotations")
}

/// A Job's labels (the controller always writes some).
pub(crate) fn labels(j: &Job) -> &BTreeMap<String, String> {
    j.metadata.labels.as_ref().expect("the Job has labels")
}

/// A Secret with one data key, as the JSON the simulator takes.
pub(crate) fn secret_json(name: &str, key: &str, data: &[u8]) -> Result<Value> {
    let s = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        data: Some([(key.to_string(), k8s_openapi::ByteString(data.to_vec()))].into()),
        ..Default::default()
    };
    Ok(serde_json::to_value(s)?)
}

/// Bind an object made outside CAPTF to the TerraformCluster `object`, as a person does for a
/// state Secret or lock Lease that is that object's (docs/api.md "Bound to the object").
pub(crate) fn bind_to_object(env: &Env, resource: &str, name: &str, object: &str) -> Result<()> {
    let uid = env.cluster(object)["metadata"]["uid"].clone();
    let mut o = env
        .sim
        .get(resource, NS, name)
        .ok_or_else(|| anyhow::anyhow!("no {resource} {name}"))?;
    o["metadata"]["annotations"]["captf.io/owner-uid"] = uid;
    env.sim.put(o)?;
    Ok(())
}

/// `status.consecutiveFailures.apply` of an object, 0 when the status does not have it yet.
pub(crate) fn apply_failures(obj: &Value) -> Value {
    obj.pointer("/status/consecutiveFailures/apply")
        .cloned()
        .unwrap_or(json!(0))
}

/// The Cluster API `Cluster` CRD, as much of it as the simulator needs to serve the kind.
pub(crate) fn capi_cluster_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "clusters.cluster.x-k8s.io"},
        "spec": {
            "group": "cluster.x-k8s.io",
            "scope": "Namespaced",
            "names": {"kind": "Cluster", "listKind": "ClusterList", "plural": "clusters", "singular": "cluster"},
            "versions": [{
                "name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
            }],
        },
    })
}

pub(crate) fn capi_cluster(name: &str, paused: bool) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"paused": paused},
    })
}

/// The Cluster API `Machine` CRD, as much of it as the simulator needs to serve the kind.
pub(crate) fn capi_machine_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "machines.cluster.x-k8s.io"},
        "spec": {"group": "cluster.x-k8s.io", "scope": "Namespaced",
            "names": {"plural": "machines", "singular": "machine", "kind": "Machine", "listKind": "MachineList"},
            "versions": [{"name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    })
}

/// A simulator that serves Cluster API's `Machine` too, and the controller on it; keep the CRD
/// folder alive while it runs.
pub(crate) async fn env_with_capi_machines() -> Result<(tempfile::TempDir, Env)> {
    let dir = crd_dir_with(&[("zz-machines.yaml", capi_machine_crd())])?;
    let env = Env::with(captf_sim::Sim::builder().crd_dir(dir.path())).await?;
    Ok((dir, env))
}

/// The inputs document (`inputs.json`) of the inputs Secret `name`.
pub(crate) fn inputs_json(env: &Env, name: &str) -> Result<Value> {
    let Some(secret) = env.sim.get("/secrets", NS, name) else {
        bail!("no inputs Secret {name}");
    };
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(secret)?;
    let Some(doc) = secret.data.as_ref().and_then(|d| d.get("inputs.json")) else {
        bail!("the inputs Secret {name} has no inputs.json");
    };
    Ok(serde_json::from_slice(&doc.0)?)
}

/// The bootstrap data Secret `<machine>-bootstrap` of a Cluster API Machine, as its bootstrap
/// provider writes it: `value` (a cloud-config naming the machine) and `format`.
pub(crate) fn bootstrap_secret_json(machine: &str) -> Result<Value> {
    let s = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{machine}-bootstrap")),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        type_: Some("cluster.x-k8s.io/secret".into()),
        data: Some(
            [
                ("value", bootstrap_value(machine)),
                ("format", "cloud-config".to_string()),
            ]
            .map(|(k, v)| (k.to_string(), k8s_openapi::ByteString(v.into_bytes())))
            .into(),
        ),
        ..Default::default()
    };
    Ok(serde_json::to_value(s)?)
}

/// The bootstrap data [`bootstrap_secret_json`] holds for `machine`.
pub(crate) fn bootstrap_value(machine: &str) -> String {
    format!("#cloud-config\nhostname: {machine}\nruncmd: [kubeadm join]\n")
}

/// Store a Cluster API `Machine` `name` of Cluster `cluster` and its bootstrap data Secret
/// `<name>-bootstrap` ([`bootstrap_secret_json`]), and return the TerraformMachine it owns, not
/// yet stored.
pub(crate) fn machine_with_terraform_machine(sim: &captf_sim::Sim, name: &str, cluster: &str) -> Result<Value> {
    sim.put(bootstrap_secret_json(name)?)?;
    // As Cluster API makes them: the Machine labelled with its cluster, the infrastructure
    // machine labelled too and controlled by the Machine.
    let machine = sim.put(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
        "metadata": {"name": name, "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
        "spec": {"clusterName": cluster, "bootstrap": {"dataSecretName": format!("{name}-bootstrap")}},
    }))?;
    let mut tm = cluster_json(name, json!({}));
    tm["kind"] = json!("TerraformMachine");
    tm["metadata"]["labels"] = json!({"cluster.x-k8s.io/cluster-name": cluster});
    tm["metadata"]["ownerReferences"] = json!([{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
        "name": name, "uid": machine["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]);
    Ok(tm)
}

/// An ownerReference list naming the TerraformCluster `name` (by its uid): a member so owned
/// holds the cluster's deletion.
pub(crate) fn owned_by_cluster(env: &Env, name: &str) -> Value {
    let uid = env.cluster(name)["metadata"]["uid"].clone();
    json!([{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
            "name": name, "uid": uid}])
}

/// A CRD folder for the simulator: `extra` (file name, CRD) served besides CAPTF's, such as
/// Cluster API's kinds ([`capi_cluster_crd`], [`capi_machine_crd`]). Keep it alive while the
/// simulator starts.
pub(crate) fn crd_dir_with(extra: &[(&str, Value)]) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for (name, crd) in extra {
        std::fs::write(dir.path().join(name), crd.to_string())?;
    }
    Ok(dir)
}

/// Who the stored TerraformCluster or TerraformMachinePool `name` is, as a pass sees it.
pub(crate) fn ident(env: &Env, kind: Kind, name: &str) -> Result<captf_core::ident::Ident> {
    use captf_shared::types::CaptfObject;
    let resource = match kind {
        Kind::TerraformCluster => TC,
        Kind::TerraformMachinePool => TMP,
        Kind::TerraformMachine => "infrastructure.cluster.x-k8s.io/terraformmachines",
    };
    let v = env
        .object(resource, name)
        .ok_or_else(|| anyhow::anyhow!("{kind} {name} is not stored"))?;
    let o = match kind {
        Kind::TerraformCluster => CaptfObject::Cluster(serde_json::from_value(v)?),
        Kind::TerraformMachinePool => CaptfObject::MachinePool(serde_json::from_value(v)?),
        Kind::TerraformMachine => CaptfObject::Machine(serde_json::from_value(v)?),
    };
    Ok(captf_core::ident::Ident::of(&o, kind)?)
}

//! The whole path on the real binaries: the controller's Job → the simulator's process kubelet
//! (pod env, volumes, service account) → the real `captf-runner` → the real OpenTofu the runner
//! image ships (`harness::DEFAULT_TOFU`) with the test provider → the kubernetes backend's state Secret and lock Lease through the
//! simulator's HTTPS port → the termination message → the controller's booking.
//!
//! Modules come from a local HTTP server serving `.tar.gz` archives, the provider from a
//! filesystem mirror: no network (the image and the server are `captf_testprovider::runner_image`,
//! which the demo uses too). The runner and the test provider are binaries of this
//! workspace (`cargo build -p captf-runner -p captf-testprovider`; `cargo test --workspace`
//! builds them). Where namespaces can't be made (no root), each test says so and skips, except
//! under `CI`, where that fails it (`captf_testsupport::cannot_run`, the workspace's one rule).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use captf_controller::runtime::RunArgs;
use captf_shared::types::TerraformCluster;
use captf_shared::{Kind, Op};
use captf_sim::Sim;
use captf_testprovider::harness;
use captf_testprovider::runner_image::{ModuleServer, RunnerImage, THING_MODULE, WORLD_INSIDE, runner_image, tar_gz};
use captf_testprovider::world::{HOLD_ENV, Thing, World};
use k8s_openapi::api::batch::v1::Job;

use super::support::*;

/// Upper bound on a wait for real Terraform; a test that hits it fails, it never passes by it.
const PATIENCE: Duration = Duration::from_secs(180);

/// The file in the world folder whose absence holds every change of the runners' Terraform.
const GATE: &str = "gate";

/// A module that renders a Secret's multi-line value (an SSH key) into a thing's content, so
/// Terraform prints it in the plan as a heredoc, one line at a time, and builds a public output
/// from a Secret's password; `padding` makes the outputs too large for the runner's result, so
/// the controller reads them back from the outputs Secret.
const SECRETS_MODULE: &str = r#"terraform {
  required_providers {
    captftest = { source = "captf.io/test/captftest" }
  }
}

variable "name" {
  type = string
}

variable "ssh_key" {
  type = string
}

variable "password" {
  type = string
}

resource "captftest_thing" "main" {
  name    = var.name
  content = var.ssh_key
}

output "control_plane_endpoint" {
  value = { host = "${captftest_thing.main.id}.example", port = 6443 }
}

output "db_url" {
  value = "postgres://app:${var.password}@db.internal:5432/app"
}

output "padding" {
  value = join("", [for i in range(600) : "padding-"])
}
"#;

macro_rules! require_namespaces {
    () => {
        if let Some(why) = captf_sim::process_kubelet::namespaces_unavailable() {
            captf_testsupport::cannot_run(format!(
                "{why}; running the real runner as a pod needs root for a private mount namespace"
            ));
            return Ok(());
        }
    };
}

/// The scenarios' simulator and controller, with the runner image run as a real process.
struct Real {
    env: Env,
    modules: ModuleServer,
    world: PathBuf,
    _dir: tempfile::TempDir,
}

impl Real {
    async fn start() -> Result<Real> {
        Real::start_with(&args()).await
    }

    /// The same, with the controller run with these arguments.
    async fn start_with(a: &RunArgs) -> Result<Real> {
        let dir = tempfile::tempdir()?;
        let base = dir.path().to_path_buf();
        let RunnerImage { image, world, .. } = runner_image(&base)?;
        // Every change waits for the gate, which stays open unless a test closes it.
        let image = image.env(HOLD_ENV, format!("{WORLD_INSIDE}/{GATE}"));
        std::fs::write(world.join(GATE), "")?;
        let builder = Sim::builder()
            .process_image(args().policy.runner_image, image)
            .process_root(base.join("kubelet"));
        let env = Env::with_args(builder, a).await?;
        let modules = ModuleServer::start(vec![
            ("thing.tar.gz".into(), tar_gz(&base.join("module"), THING_MODULE)?),
            (
                "secrets.tar.gz".into(),
                tar_gz(&base.join("secrets-module"), SECRETS_MODULE)?,
            ),
        ])
        .await?;
        Ok(Real {
            env,
            modules,
            world,
            _dir: dir,
        })
    }

    fn thing(&self, name: &str) -> Option<Thing> {
        World::new(&self.world).read(name).ok().flatten()
    }

    /// Wait (wall time, bounded) until `f` returns Some; fails at the first RBAC denial.
    async fn until<T>(&self, what: &str, mut f: impl FnMut(&Env) -> Option<T>) -> Result<T> {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            self.env.no_denials()?;
            if let Some(v) = f(&self.env) {
                return Ok(v);
            }
            if std::time::Instant::now() > deadline {
                bail!("timed out waiting for {what}:\n{}", self.pod_logs());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every pod's log (for a failure's message).
    fn pod_logs(&self) -> String {
        self.env
            .sim
            .list("/pods", Some(NS))
            .iter()
            .map(|p| {
                let term = p.pointer("/status/containerStatuses/0/state/terminated").cloned();
                format!(
                    "pod {}: {}\n",
                    p["metadata"]["name"].as_str().unwrap_or_default(),
                    term.unwrap_or(Value::Null)
                )
            })
            .collect()
    }

    /// Wait until the Job is booked with this outcome.
    async fn booked(&self, job: &str, outcome: &str) -> Result<()> {
        self.until(&format!("Job {job} booked as {outcome}"), |e| {
            let j = e.sim.get("batch/jobs", NS, job)?;
            (j.pointer("/metadata/annotations/captf.io~1outcome")?.as_str()? == outcome).then_some(())
        })
        .await
    }

    /// The spec fields of a cluster of the thing module with these variables.
    fn spec(&self, vars: Value) -> Value {
        json!({"module": {"source": self.modules.url("thing.tar.gz")}, "variables": vars})
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_runner_create_applies_with_real_terraform_and_the_cluster_is_ready_with_the_endpoint_from_real_outputs()
-> Result<()> {
    require_namespaces!();
    let real = Real::start().await?;
    let env = &real.env;
    let job = env
        .create_cluster("prod-eu", real.spec(json!({"name": "a", "content": "one"})))
        .await?;
    let name = job_name(&job).to_string();
    real.booked(&name, "succeeded").await?;
    let c = real
        .until("Ready=True", |e| {
            let c = e.cluster("prod-eu");
            condition(&c, "Ready").is_some_and(|(s, _, _)| s == "True").then_some(c)
        })
        .await?;
    // The real thing exists, and the endpoint came from Terraform's real outputs.
    assert_eq!(
        real.thing("a"),
        Some(Thing {
            name: "a".into(),
            content: "one".into()
        })
    );
    assert_eq!(
        c.pointer("/spec/controlPlaneEndpoint"),
        Some(&json!({"host": "thing-a.example", "port": 6443}))
    );
    // The state is in the backend's Secret; the lock Lease was taken and released.
    let state = env
        .sim
        .get("/secrets", NS, "tfstate-default-prod-eu-tc")
        .context("the state Secret")?;
    assert!(
        state
            .pointer("/data/tfstate")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    );
    assert!(env.lease_holder("lock-tfstate-default-prod-eu-tc")?.is_null());
    // The pod's log is the real runner's.
    let pod = env.sim.pods_of_job(NS, &name)?;
    let pod_name = pod[0].metadata.name.clone().unwrap_or_default();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = env.api()?;
    let log = pods.logs(&pod_name, &Default::default()).await?;
    assert!(log.contains("captf-runner"), "{log}");
    assert!(!log.contains("(simulated runner)"), "{log}");
    // The runner worked as its own ServiceAccount, within the Role the controller gave it.
    let rights = env.sim.used_rights(NS, "captf-runner-prod-eu-tc");
    for want in ["get /secrets", "update coordination.k8s.io/leases"] {
        assert!(rights.contains(want), "{want} not among {rights:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_runner_values_env_from_brings_from_a_secret_are_masked_in_the_runners_log() -> Result<()> {
    require_namespaces!();
    let mut a = args();
    a.policy.allow_env_from_secrets = true;
    let real = Real::start_with(&a).await?;
    let env = &real.env;
    // The variable `content` comes from a Secret through envFrom (TF_VAR_content), so Terraform
    // prints it in the plan; the runner must mask it as it masks a secretKeyRef's value.
    const SECRET: &str = "s3cr3t-from-env-from";
    env.sim.put(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "tf-env", "namespace": NS}, "stringData": {"content": SECRET}}))?;
    let mut spec = real.spec(json!({"name": "a"}));
    spec["jobs"] = json!({"envFrom": [{"prefix": "TF_VAR_", "secretRef": {"name": "tf-env"}}]});
    let job = env.create_cluster("prod-eu", spec).await?;
    let name = job_name(&job).to_string();
    real.booked(&name, "succeeded").await?;
    // Terraform got the value: the thing holds it.
    assert_eq!(real.content("a").as_deref(), Some(SECRET));
    let pod = env.sim.pods_of_job(NS, &name)?;
    let pod_name = pod[0].metadata.name.clone().unwrap_or_default();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = env.api()?;
    let log = pods.logs(&pod_name, &Default::default()).await?;
    assert!(log.contains("+ content") && log.contains("***"), "{log}");
    assert!(!log.contains(SECRET), "{log}");
    // The controller named it to the runner.
    let vars = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|p| p.containers[0].env.clone().unwrap_or_default())
        .unwrap_or_default();
    let sensitive = vars.iter().find(|v| v.name == "CAPTF_SENSITIVE_ENV");
    assert_eq!(sensitive.and_then(|v| v.value.as_deref()), Some("TF_VAR_content"));
    Ok(())
}

impl Real {
    /// Create a cluster of the thing module and wait until its first apply made it Ready.
    async fn create_ready(&self, name: &str, vars: Value, extra: Value) -> Result<Value> {
        let mut spec = self.spec(vars);
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        let job = self.env.create_cluster(name, spec).await?;
        self.booked(job_name(&job), "succeeded").await?;
        self.until_ready(name).await
    }

    async fn until_ready(&self, name: &str) -> Result<Value> {
        self.until(&format!("{name} Ready=True"), |e| {
            let c = e.cluster(name);
            condition(&c, "Ready").is_some_and(|(s, _, _)| s == "True").then_some(c)
        })
        .await
    }

    /// Wait for the object's Job with this op and sequence number, then for its booking.
    async fn job_booked(&self, name: &str, op: Op, seq: u32, outcome: &str) -> Result<Job> {
        let want = captf_shared::names::job_name(Kind::TerraformCluster, NS, name, op, seq);
        let job = self
            .until(&format!("Job {want}"), |e| {
                e.jobs_of(Kind::TerraformCluster, name)
                    .into_iter()
                    .find(|j| j.metadata.name.as_deref() == Some(&want))
            })
            .await?;
        self.booked(&want, outcome).await?;
        Ok(job)
    }

    fn content(&self, name: &str) -> Option<String> {
        self.thing(name).map(|t| t.content)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_runner_an_input_change_is_applied_by_a_new_job() -> Result<()> {
    require_namespaces!();
    let real = Real::start().await?;
    real.create_ready("prod-eu", json!({"name": "a", "content": "one"}), json!({}))
        .await?;
    real.env
        .merge_patch::<TerraformCluster>("prod-eu", json!({"spec": {"variables": {"content": "two"}}}))
        .await?;
    let j2 = real.job_booked("prod-eu", Op::Apply, 2, "succeeded").await?;
    assert_eq!(annotations(&j2)["captf.io/reason"], "InputsChanged");
    assert_eq!(real.content("a").as_deref(), Some("two"));
    real.until_ready("prod-eu").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_runner_real_drift_is_found_and_remediated() -> Result<()> {
    require_namespaces!();
    let real = Real::start().await?;
    let drift = json!({"drift": {"interval": "5m", "remediation": "Auto"}});
    real.create_ready("prod-eu", json!({"name": "a", "content": "one"}), drift)
        .await?;
    // Someone changes the thing behind Terraform's back.
    World::new(&real.world).write(&Thing {
        name: "a".into(),
        content: "tampered".into(),
    })?;
    real.env.advance(300);
    real.job_booked("prod-eu", Op::Drift, 2, "succeeded").await?;
    let a3 = real.job_booked("prod-eu", Op::Apply, 3, "succeeded").await?;
    assert_eq!(annotations(&a3)["captf.io/reason"], "DriftRemediation");
    assert_eq!(real.content("a").as_deref(), Some("one"), "the drift was remediated");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_runner_a_destructive_change_is_blocked_then_applied_once_approved() -> Result<()> {
    require_namespaces!();
    let real = Real::start().await?;
    real.create_ready("prod-eu", json!({"name": "a", "content": "one"}), json!({}))
        .await?;
    // A new name replaces the thing: the guard blocks the plan.
    real.env
        .merge_patch::<TerraformCluster>("prod-eu", json!({"spec": {"variables": {"name": "b"}}}))
        .await?;
    real.job_booked("prod-eu", Op::Apply, 2, "blocked").await?;
    let c = real
        .until("the pending plan", |e| {
            let c = e.cluster("prod-eu");
            c.pointer("/status/pendingPlan/hash")?.as_str().map(String::from)
        })
        .await?;
    assert!(
        real.thing("b").is_none() && real.thing("a").is_some(),
        "nothing applied unapproved"
    );
    real.env
        .merge_patch::<TerraformCluster>(
            "prod-eu",
            json!({"metadata": {"annotations": {"captf.io/approve-plan": c}}}),
        )
        .await?;
    let a3 = real.job_booked("prod-eu", Op::Apply, 3, "succeeded").await?;
    assert_eq!(annotations(&a3)["captf.io/approved-plan"], c);
    assert!(real.thing("a").is_none(), "the old thing was replaced");
    assert_eq!(real.content("b").as_deref(), Some("one"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_runner_deletion_destroys_and_removes_the_finalizer() -> Result<()> {
    require_namespaces!();
    let real = Real::start().await?;
    real.create_ready("prod-eu", json!({"name": "a", "content": "one"}), json!({}))
        .await?;
    real.env.delete::<TerraformCluster>("prod-eu").await?;
    real.until("the object gone", |e| e.object(TC, "prod-eu").is_none().then_some(()))
        .await?;
    assert!(real.thing("a").is_none(), "destroyed by real Terraform");
    Ok(())
}

impl Real {
    fn close_gate(&self) -> Result<()> {
        Ok(std::fs::remove_file(self.world.join(GATE))?)
    }

    fn open_gate(&self) -> Result<()> {
        Ok(std::fs::write(self.world.join(GATE), "")?)
    }

    /// The lock info on the object's lock Lease.
    fn lock_info(&self, suffix: &str) -> Option<Value> {
        let lease = self.env.sim.get(
            "coordination.k8s.io/leases",
            NS,
            &format!("lock-tfstate-default-{suffix}"),
        )?;
        let info = lease
            .pointer("/metadata/annotations/app.terraform.io~1lock-info")?
            .as_str()?;
        serde_json::from_str(info).ok()
    }

    /// Advance the simulated clock a minute at a time until the object's Job `seq` exists.
    async fn advance_until_job(&self, name: &str, op: Op, seq: u32) -> Result<Job> {
        let want = captf_shared::names::job_name(Kind::TerraformCluster, NS, name, op, seq);
        for _ in 0..120 {
            if let Some(j) = self
                .env
                .jobs_of(Kind::TerraformCluster, name)
                .into_iter()
                .find(|j| j.metadata.name.as_deref() == Some(&want))
            {
                return Ok(j);
            }
            self.env.until_idle().await?;
            self.env.advance(60);
        }
        bail!("no Job {want} within two simulated hours")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_runner_killed_mid_apply_hands_its_lock_to_the_next_job_which_force_unlocks_it() -> Result<()> {
    require_namespaces!();
    let real = Real::start().await?;
    let env = &real.env;
    real.close_gate()?;
    let job = env
        .create_cluster("prod-eu", real.spec(json!({"name": "a", "content": "one"})))
        .await?;
    let name = job_name(&job).to_string();
    let busy = World::new(&real.world).busy_marker("a")?;
    real.until("the apply holding in the middle of its change", |_| {
        busy.exists().then_some(())
    })
    .await?;
    let info = real.lock_info("prod-eu-tc").context("the runner holds the lock")?;
    let id = info["ID"].as_str().unwrap_or_default().to_string();
    let pod = env.sim.pods_of_job(NS, &name)?[0]
        .metadata
        .name
        .clone()
        .unwrap_or_default();
    assert_eq!(
        info["Who"].as_str().unwrap_or_default().rsplit('@').next(),
        Some(pod.as_str()),
        "Who names the pod"
    );
    // The container dies at once: Terraform never gets to unlock.
    assert!(env.sim.kill_container(NS, &pod));
    let outcome = real
        .until("the killed Job booked", |e| {
            let j = e.sim.get("batch/jobs", NS, &name)?;
            j.pointer("/metadata/annotations/captf.io~1outcome")?
                .as_str()
                .map(String::from)
        })
        .await?;
    assert_eq!(outcome, "failed");
    let term = env.sim.pods_of_job(NS, &name)?[0].clone();
    let term = term.status.and_then(|s| s.container_statuses).unwrap_or_default()[0]
        .state
        .clone()
        .and_then(|s| s.terminated)
        .context("terminated")?;
    assert_eq!((term.exit_code, term.message), (137, None));
    assert_eq!(
        env.lease_holder("lock-tfstate-default-prod-eu-tc")?,
        json!(id),
        "left held"
    );
    real.open_gate()?;
    let j2 = real.advance_until_job("prod-eu", Op::Apply, 2).await?;
    assert_eq!(annotations(&j2)["captf.io/force-unlock"], id);
    real.booked(job_name(&j2), "succeeded").await?;
    assert!(env.lease_holder("lock-tfstate-default-prod-eu-tc")?.is_null());
    assert_eq!(real.content("a").as_deref(), Some("one"));
    real.until_ready("prod-eu").await?;
    Ok(())
}

/// A workstation's Terraform on the object's state, outside any pod: it reaches the simulator
/// through a kubeconfig and holds the lock while its apply waits on its own gate.
struct Workstation {
    child: tokio::process::Child,
    gate: PathBuf,
    _sb: harness::Sandbox,
}

impl Workstation {
    async fn hold_lock(real: &Real, suffix: &str) -> Result<Workstation> {
        let sb = harness::Sandbox::new()?;
        let dir = sb.path().join("workstation");
        std::fs::create_dir_all(&dir)?;
        let kubeconfig = dir.join("kubeconfig");
        real.env.sim.write_kubeconfig(&kubeconfig)?;
        std::fs::write(dir.join("main.tf"), THING_MODULE)?;
        std::fs::write(
            dir.join("backend.tf"),
            format!(
                "terraform {{\n  backend \"kubernetes\" {{\n    secret_suffix = \"{suffix}\"\n    namespace = \"{NS}\"\n    config_path = \"{}\"\n  }}\n}}\n",
                kubeconfig.display()
            ),
        )?;
        let gate = sb.path().join("gate");
        let tf = |args: &[&str]| {
            let mut c = tokio::process::Command::new(&sb.terraform);
            c.args(args)
                .current_dir(&dir)
                .envs(sb.env())
                .env(HOLD_ENV, &gate)
                .stdin(std::process::Stdio::null())
                .kill_on_drop(true);
            c
        };
        let init = tf(&["init", "-input=false", "-no-color"]).output().await?;
        if !init.status.success() {
            bail!("workstation init: {}", String::from_utf8_lossy(&init.stderr));
        }
        let child = tf(&["apply", "-auto-approve", "-input=false", "-no-color", "-var", "name=w"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        let busy = World::new(&sb.world).busy_marker("w")?;
        real.until("the workstation holding the lock", |_| busy.exists().then_some(()))
            .await?;
        Ok(Workstation { child, gate, _sb: sb })
    }

    async fn release(mut self) -> Result<()> {
        std::fs::write(&self.gate, "")?;
        let status = tokio::time::timeout(PATIENCE, self.child.wait()).await??;
        if !status.success() {
            bail!("the workstation's apply failed: {status}");
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_runner_a_workstation_holding_the_lock_is_reported_as_state_locked_and_never_unlocked() -> Result<()> {
    require_namespaces!();
    let real = Real::start().await?;
    let env = &real.env;
    let ws = Workstation::hold_lock(&real, "prod-eu-tc").await?;
    let info = real.lock_info("prod-eu-tc").context("the workstation holds the lock")?;
    let id = info["ID"].as_str().unwrap_or_default().to_string();
    let who = info["Who"].as_str().unwrap_or_default().to_string();
    let mut spec = real.spec(json!({"name": "a", "content": "one"}));
    spec["jobs"] = json!({"lockTimeoutSeconds": 2});
    env.sim.put(cluster_json("prod-eu", spec))?;
    // The workstation's backend made the state Secret and lock Lease before the object existed:
    // held until a person binds them to it.
    env.until_reason("prod-eu", "Ready", "NameConflict").await?;
    bind_to_object(env, "/secrets", "tfstate-default-prod-eu-tc", "prod-eu")?;
    bind_to_object(
        env,
        "coordination.k8s.io/leases",
        "lock-tfstate-default-prod-eu-tc",
        "prod-eu",
    )?;
    // The hold is retried after a simulated delay; a pass still finishing when the clock moved
    // would set its retry after the move, so wait for quiet before each step of the clock.
    let j1 = real.advance_until_job("prod-eu", Op::Apply, 1).await?;
    assert!(annotations(&j1).get("captf.io/force-unlock").is_none());
    // The runner waits its lock timeout (real time, 2s) and fails; the controller names the holder.
    real.booked(job_name(&j1), "failed").await?;
    let c = real
        .until("StateLocked", |e| {
            let c = e.cluster("prod-eu");
            condition(&c, "StateReadable")
                .filter(|(_, r, _)| r == "StateLocked")
                .map(|(s, _, m)| (s, m))
        })
        .await?;
    assert_eq!(c.0, "False");
    assert!(c.1.contains(&who), "{} does not name {who}", c.1);
    assert_eq!(
        env.lease_holder("lock-tfstate-default-prod-eu-tc")?,
        json!(id),
        "never unlocked"
    );
    assert!(real.thing("a").is_none(), "nothing applied under a foreign lock");
    // Once the workstation is done, the next Job proceeds without any force-unlock.
    ws.release().await?;
    let j2 = real.advance_until_job("prod-eu", Op::Apply, 2).await?;
    assert!(annotations(&j2).get("captf.io/force-unlock").is_none());
    real.booked(job_name(&j2), "succeeded").await?;
    assert_eq!(real.content("a").as_deref(), Some("one"));
    Ok(())
}

impl Real {
    /// Create a cluster whose first apply is held in the middle of its change; returns the
    /// Job's and the pod's names once the change is under way (the lock taken).
    async fn create_held(&self, extra: Value) -> Result<(String, String)> {
        self.close_gate()?;
        let mut spec = self.spec(json!({"name": "a", "content": "one"}));
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        let job = self.env.create_cluster("prod-eu", spec).await?;
        let name = job_name(&job).to_string();
        let busy = World::new(&self.world).busy_marker("a")?;
        self.until("the apply holding in the middle of its change", |_| {
            busy.exists().then_some(())
        })
        .await?;
        let pod = self.env.sim.pods_of_job(NS, &name)?[0]
            .metadata
            .name
            .clone()
            .unwrap_or_default();
        Ok((name, pod))
    }

    /// The outcome the controller booked a Job with.
    async fn outcome(&self, job: &str) -> Result<String> {
        self.until(&format!("Job {job} booked"), |e| {
            let j = e.sim.get("batch/jobs", NS, job)?;
            j.pointer("/metadata/annotations/captf.io~1outcome")?
                .as_str()
                .map(String::from)
        })
        .await
    }

    /// The runner's result in the pod's termination message.
    fn result(&self, job: &str) -> Result<captf_shared::protocol::RunnerResult> {
        let pod = self.env.sim.pods_of_job(NS, job)?.remove(0);
        let msg = pod
            .status
            .and_then(|s| s.container_statuses)
            .and_then(|mut c| c.remove(0).state)
            .and_then(|s| s.terminated)
            .and_then(|t| t.message)
            .context("a termination message")?;
        Ok(captf_shared::protocol::RunnerResult::parse(&msg)?)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_runner_evicted_mid_apply_reports_interrupted_unlocks_and_is_retried_at_once() -> Result<()> {
    require_namespaces!();
    let real = Real::start().await?;
    let env = &real.env;
    let (job, pod) = real.create_held(json!({})).await?;
    assert!(env.sim.evict(NS, &pod));
    // Terraform finishes the change under way, then stops and unlocks.
    real.open_gate()?;
    assert_eq!(real.outcome(&job).await?, "interrupted");
    let r = real.result(&job)?;
    assert_eq!(r.result, captf_shared::protocol::RunResult::Interrupted, "{r:?}");
    assert!(
        env.lease_holder("lock-tfstate-default-prod-eu-tc")?.is_null(),
        "unlocked"
    );
    // Not a failure: the next apply starts without any wait on the clock.
    let j2 = real.job_booked("prod-eu", Op::Apply, 2, "succeeded").await?;
    assert!(annotations(&j2).get("captf.io/force-unlock").is_none());
    assert_eq!(apply_failures(&env.cluster("prod-eu")), json!(0));
    assert_eq!(real.content("a").as_deref(), Some("one"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_runner_killed_at_its_deadline_mid_apply_is_booked_as_deadline_and_unlocks() -> Result<()> {
    require_namespaces!();
    let real = Real::start().await?;
    let env = &real.env;
    let (job, _pod) = real
        .create_held(json!({"jobs": {"activeDeadlineSeconds": 600}}))
        .await?;
    env.advance(600);
    real.open_gate()?;
    assert_eq!(real.outcome(&job).await?, "deadline");
    let j = env.sim.get("batch/jobs", NS, &job).context("the Job")?;
    let reasons: Vec<&str> = j["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["reason"].as_str())
        .collect();
    assert_eq!(reasons, ["DeadlineExceeded", "DeadlineExceeded"]);
    assert_eq!(
        real.result(&job)?.result,
        captf_shared::protocol::RunResult::Interrupted
    );
    assert!(
        env.lease_holder("lock-tfstate-default-prod-eu-tc")?.is_null(),
        "unlocked"
    );
    // The outcome annotation is booked first, the status after it: wait for the count.
    real.until("consecutiveFailures.apply=1", |e| {
        (apply_failures(&e.cluster("prod-eu")) == json!(1)).then_some(())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_runner_a_lock_left_on_a_state_never_written_is_released_before_init_by_the_next_job() -> Result<()> {
    require_namespaces!();
    let real = Real::start().await?;
    let env = &real.env;
    const DEAD: &str = "0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55";
    // The first runner (scripted: a script queued for a Job wins over the runner image) dies
    // holding the lock before any state was written; Terraform's init needs that lock to write
    // the first state, so a force-unlock after init could never run.
    env.sim.script(
        captf_sim::JobMatch::any(),
        captf_sim::RunnerScript::die_holding_lock_id(DEAD),
    );
    let j1 = env
        .create_cluster("prod-eu", real.spec(json!({"name": "a", "content": "one"})))
        .await?;
    assert!(!env.sim.job_ran_as_process(NS, job_name(&j1)));
    env.advance(30);
    real.booked(job_name(&j1), "failed").await?;
    assert_eq!(env.lease_holder("lock-tfstate-default-prod-eu-tc")?, json!(DEAD));
    let j2 = real.advance_until_job("prod-eu", Op::Apply, 2).await?;
    assert_eq!(annotations(&j2)["captf.io/force-unlock"], DEAD);
    assert!(env.sim.job_ran_as_process(NS, job_name(&j2)), "the real runner");
    real.booked(job_name(&j2), "succeeded").await?;
    assert!(env.lease_holder("lock-tfstate-default-prod-eu-tc")?.is_null());
    assert_eq!(real.content("a").as_deref(), Some("one"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_runner_a_multi_line_key_and_a_password_in_a_url_reach_no_log_termination_message_status_or_event()
-> Result<()> {
    require_namespaces!();
    let mut a = args();
    a.policy.allow_env_from_secrets = true;
    let real = Real::start_with(&a).await?;
    let env = &real.env;
    const KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\n\
        b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n\
        QyNTUxOQAAACDkY2FwdGYtdGVzdC1rZXktbm90LWEtcmVhbC1vbmUtYXQtYWxsAAAAmLk\n\
        -----END OPENSSH PRIVATE KEY-----\n";
    const PASSWORD: &str = "Tr0ub4dor-and-3-horses";
    env.sim.put(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "tf-secrets", "namespace": NS},
        "stringData": {"ssh_key": KEY, "password": PASSWORD}}))?;
    let mut spec = json!({"module": {"source": real.modules.url("secrets.tar.gz")}, "variables": {"name": "a"}});
    spec["jobs"] = json!({"envFrom": [{"prefix": "TF_VAR_", "secretRef": {"name": "tf-secrets"}}]});
    let job = env.create_cluster("prod-eu", spec).await?;
    let name = job_name(&job).to_string();
    real.booked(&name, "succeeded").await?;
    // Terraform got both: the thing holds the key.
    assert_eq!(real.content("a").as_deref(), Some(KEY));
    let c = real
        .until("status.outputs", |e| {
            let c = e.cluster("prod-eu");
            c.pointer("/status/outputs/db_url").is_some().then_some(c)
        })
        .await?;
    assert_eq!(
        c.pointer("/status/outputs/db_url"),
        Some(&json!("postgres://app:***@db.internal:5432/app")),
        "read back from the outputs Secret, masked"
    );
    let pod = env.sim.pods_of_job(NS, &name)?;
    let pod_name = pod[0].metadata.name.clone().unwrap_or_default();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = env.api()?;
    let log = pods.logs(&pod_name, &Default::default()).await?;
    assert!(log.contains("+ content") && log.contains("***"), "{log}");
    let termination = env
        .sim
        .get("/pods", NS, &pod_name)
        .and_then(|p| {
            p.pointer("/status/containerStatuses/0/state/terminated/message")
                .cloned()
        })
        .context("the termination message")?;
    assert!(
        termination.as_str().is_some_and(|t| t.contains("outputsInSecret")),
        "{termination}"
    );
    let events = serde_json::to_string(&env.sim.events(NS))?;
    let status = c["status"].to_string();
    let needles: Vec<&str> = KEY.lines().map(str::trim).chain([PASSWORD]).collect();
    for (what, text) in [
        ("the pod log", log.as_str()),
        ("the termination message", termination.as_str().unwrap_or_default()),
        ("the status", status.as_str()),
        ("the events", events.as_str()),
    ] {
        for needle in &needles {
            assert!(!text.contains(needle), "{needle:?} in {what}:\n{text}");
        }
    }
    Ok(())
}

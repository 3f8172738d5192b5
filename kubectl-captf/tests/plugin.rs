//! Each subcommand against the simulator over HTTPS, through a kubeconfig as a person's would
//! be, with the real controller runtime running where a scenario needs it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Parser;
use serde_json::{Value, json};

use captf_controller::runtime::clock::WatchClock;
use captf_controller::runtime::{self, Handle, RunArgs};
use captf_core::explain::{ExplainInput, explain};
use captf_shared::protocol::PlanSummary;
use captf_shared::{Kind, Op, names};
use captf_sim::{JobMatch, RunnerScript, Sim};
use kubectl_captf::cli::Cli;
use kubectl_captf::errors::PluginError;
use kubectl_captf::{Printed, connect, run};

const NS: &str = "default";
const TC: &str = "infrastructure.cluster.x-k8s.io/terraformclusters";
const T0: &str = "2026-01-01T00:00:00Z";
/// How long a test waits for the controller to react (wall time; it usually takes milliseconds).
const WAIT: Duration = Duration::from_secs(15);

fn args() -> RunArgs {
    RunArgs::from_flags([
        "--runner-image=runner:test",
        "--runner-service-account=captf-runner",
        "--metrics-addr=127.0.0.1:0",
        "--health-addr=127.0.0.1:0",
        "--concurrency=4",
        "--log-format=text",
        // The chart's default: runner pods may read Secrets a spec names (state encryption's
        // passphrase among them).
        "--allow-env-from-secrets=true",
        "--runner-requests=cpu=100m",
    ])
    .expect("the plugin tests' controller flags parse")
}

struct Env {
    sim: Sim,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    controller: Option<Handle>,
    /// How `approve` is answered when it asks (never the test's own terminal).
    confirm: kubectl_captf::Confirm,
}

/// A kubeconfig for the simulator's HTTPS port, trusting only its CA, with this token.
fn write_kubeconfig(sim: &Sim, dir: &Path, file: &str, token: &str) -> PathBuf {
    let https = sim.https().unwrap();
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, &https.ca_pem).unwrap();
    let path = dir.join(file);
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: {}\n    certificate-authority: {}\n\
             users:\n- name: me\n  user:\n    token: {token}\ncontexts:\n- name: sim\n  context:\n    cluster: sim\n    user: me\n    namespace: {NS}\n\
             - name: elsewhere\n  context:\n    cluster: sim\n    user: me\n    namespace: team-b\ncurrent-context: sim\n",
            https.url(),
            ca.display()
        ),
    )
    .unwrap();
    path
}

impl Env {
    async fn new(with_controller: bool) -> Result<Env> {
        let sim = Sim::builder().https().start_time(T0.parse()?).start().await?;
        sim.create_namespace("team-b");
        let dir = tempfile::tempdir()?;
        let kubeconfig = write_kubeconfig(&sim, dir.path(), "kubeconfig", "captf-sim");
        let mut env = Env {
            sim,
            dir,
            kubeconfig,
            controller: None,
            confirm: kubectl_captf::Confirm::Answer(false),
        };
        if with_controller {
            let clock = Arc::new(WatchClock::new(env.sim.clock_watch()));
            env.controller = Some(runtime::start(env.sim.client()?, &args(), clock).await?);
        }
        Ok(env)
    }

    /// `kubectl captf <args>` with this kubeconfig, deciding at the simulator's time.
    async fn captf(&self, args: &[&str]) -> Result<Printed, PluginError> {
        self.captf_with(&self.kubeconfig, args).await
    }

    async fn captf_with(&self, kubeconfig: &Path, args: &[&str]) -> Result<Printed, PluginError> {
        let now = self.sim.now().to_string();
        let mut argv = vec![
            "kubectl-captf",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--now",
            &now,
        ];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv).map_err(|e| PluginError::Usage(e.to_string()))?;
        let mut conn = connect(&cli).await?;
        conn.confirm = self.confirm;
        run(&cli, &conn).await
    }

    fn create_cluster(&self, name: &str, ns: &str) -> Result<()> {
        self.sim.put(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "TerraformCluster",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"module": {"source": "git::https://example.com/net.git"},
                     "variables": {"region": "eu-west-1"}, "drift": {"interval": "0"}},
        }))?;
        Ok(())
    }

    fn cluster(&self, name: &str) -> Value {
        self.sim.get(TC, NS, name).unwrap_or(Value::Null)
    }

    /// Poll until `f` holds (the controller reacts to watch events; wall time ≤ WAIT).
    async fn until<T>(&self, what: &str, mut f: impl FnMut(&Env) -> Option<T>) -> Result<T> {
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

    async fn until_next_action(&self, name: &str, reason: &str) -> Result<Value> {
        self.until(&format!("{name}: nextAction {reason}"), |e| {
            let c = e.cluster(name);
            (c.pointer("/status/nextAction/reason") == Some(&json!(reason))).then_some(c)
        })
        .await
    }

    async fn until_job(&self, name: &str, op: Op, seq: u32) -> Result<Value> {
        let job = names::job_name(Kind::TerraformCluster, NS, name, op, seq);
        self.until(&format!("Job {job}"), |e| e.sim.get("batch/jobs", NS, &job))
            .await
    }

    /// Let the running Job's runner finish (the default script takes 30 s) and wait for its booking.
    async fn finish_job(&self, name: &str, op: Op, seq: u32, outcome: &str) -> Result<()> {
        let job = names::job_name(Kind::TerraformCluster, NS, name, op, seq);
        self.until_job(name, op, seq).await?;
        self.sim.advance(Duration::from_secs(30));
        self.until(&format!("Job {job} booked {outcome}"), |e| {
            let j = e.sim.get("batch/jobs", NS, &job)?;
            (j.pointer("/metadata/annotations/captf.io~1outcome") == Some(&json!(outcome))).then_some(())
        })
        .await
    }

    async fn applied_cluster(&self, name: &str) -> Result<()> {
        self.create_cluster(name, NS)?;
        self.finish_job(name, Op::Apply, 1, "succeeded").await?;
        self.until(&format!("{name} idle"), |e| {
            let c = e.cluster(name);
            (c.pointer("/status/nextAction/reason") == Some(&json!("Idle")) && c.pointer("/status/outputs").is_some())
                .then_some(())
        })
        .await
    }

    async fn stop_controller(&mut self) {
        if let Some(h) = self.controller.take() {
            h.shutdown().await;
        }
    }
}

fn summary() -> PlanSummary {
    PlanSummary {
        add: 1,
        change: 0,
        destroy: 1,
        replace: 0,
    }
}

fn outputs() -> std::collections::BTreeMap<String, Value> {
    [("endpoint".to_string(), json!("10.0.0.1"))].into()
}

fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_reads_live_and_answers_as_the_offline_explain_does_on_the_same_objects() -> Result<()> {
    let mut env = Env::new(true).await?;
    env.sim
        .set_default_script(RunnerScript::realistic_with_outputs(outputs()));
    env.sim.script(
        JobMatch::object(Kind::TerraformCluster, NS, "prod-eu").op(Op::Apply),
        RunnerScript::fail("Error: boom"),
    );
    env.create_cluster("prod-eu", NS)?;
    env.finish_job("prod-eu", Op::Apply, 1, "failed").await?;
    env.until_next_action("prod-eu", "InputsChangedBackoff").await?;
    let suffix = names::suffix(Kind::TerraformCluster, NS, "prod-eu");
    env.sim.hold_lock(NS, &suffix, "lock-1", "alice@laptop");
    env.stop_controller().await;

    let printed = env.captf(&["explain", "terraformcluster/prod-eu"]).await?;
    let text = printed.stdout;
    assert!(text.starts_with("TerraformCluster default/prod-eu\n"), "{text}");
    assert!(
        text.contains("Next:         apply after backoff (InputsChangedBackoff)"),
        "{text}"
    );
    assert!(text.contains("When:         at 2026-01-01T00:01:30Z (in 1m)"), "{text}");
    assert!(text.contains("apply failed 1 time in a row"), "{text}");
    // The rule that gave the delay, with the default failedJobsHistoryLimit (3).
    assert!(
        text.contains(
            "waits 1m after the newest failure (1m after the first failure, doubling with each next one, and the cap (10m) from failure 3 in a row (failedJobsHistoryLimit);"
        ),
        "{text}"
    );
    assert!(text.contains("held by alice@laptop"), "{text}");
    assert!(text.contains("Failures:     apply:1"), "{text}");
    // Which state is the object's, to label or restore it.
    assert!(
        text.contains(
            "State:        Secret tfstate-default-prod-eu-tc (labels tfstate=true,tfstateSecretSuffix=prod-eu-tc)"
        ),
        "{text}"
    );

    let live: Value = serde_json::from_str(&env.captf(&["explain", "tfc/prod-eu", "-o", "json"]).await?.stdout)?;
    // The same objects, exported to files, through the offline explain.
    let dir = env.dir.path();
    let write = |file: &str, v: Value| {
        let p = dir.join(file);
        std::fs::write(&p, v.to_string()).unwrap();
        p.to_string_lossy().into_owned()
    };
    let object = write("object.json", env.cluster("prod-eu"));
    let jobs = write("jobs.json", list(env.sim.list("batch/jobs", Some(NS))));
    let pods = write("pods.json", list(env.sim.list("/pods", Some(NS))));
    let lease = write(
        "lease.json",
        env.sim
            .get("coordination.k8s.io/leases", NS, &names::lock_lease_name(&suffix))
            .unwrap(),
    );
    let secret = write(
        "secret.json",
        env.sim
            .get("/secrets", NS, &names::inputs_secret_name(&suffix))
            .unwrap(),
    );
    let offline = explain(&ExplainInput {
        object,
        jobs,
        pods: Some(pods),
        lease: Some(lease),
        secret: Some(secret),
        now: Some(env.sim.now().to_string()),
        inputs_hash: None,
    })?;
    assert_eq!(live, offline.json);
    assert_eq!(live["action"], "wait");
    assert_eq!(live["stateLock"]["holder"], "alice@laptop");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_the_runner_kept_is_shown_after_its_pod_is_gone() -> Result<()> {
    use k8s_openapi::api::core::v1::{Pod, Secret};
    use kube::api::{Api, DeleteParams, Patch, PatchParams};
    let env = Env::new(true).await?;
    let m = || JobMatch::object(Kind::TerraformCluster, NS, "kept").op(Op::Apply);
    env.sim.script(m(), RunnerScript::blocked("hash-k", summary()));
    env.create_cluster("kept", NS)?;
    env.finish_job("kept", Op::Apply, 1, "blocked").await?;
    env.until_next_action("kept", "AwaitingApproval").await?;

    // What the runner writes beside the outputs when its plan waits (a merge patch of two keys).
    let secret = kubectl_captf::kept::secret_name(Kind::TerraformCluster, NS, "kept");
    let record = captf_shared::protocol::KeptPlan {
        hash: "hash-k".into(),
        summary: summary(),
        changes: vec![captf_shared::protocol::PlannedChange {
            address: "null_resource.old".into(),
            actions: vec!["delete".into()],
        }],
        more: 0,
        truncated: false,
        policy_warnings: vec![],
    };
    let text = "  # null_resource.old will be destroyed\n  - resource \"null_resource\" \"old\" {\n      - id = \"1\" -> null\n    }\n";
    let b64 = |b: Vec<u8>| serde_json::to_value(k8s_openapi::ByteString(b)).unwrap();
    let client = env.sim.client()?;
    Api::<Secret>::namespaced(client.clone(), NS)
        .patch(
            &secret,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {
                "plan.json": b64(serde_json::to_vec(&record)?),
                "plan.txt": b64(text.as_bytes().to_vec()),
            }})),
        )
        .await?;
    let job1 = names::job_name(Kind::TerraformCluster, NS, "kept", Op::Apply, 1);
    for pod in env.sim.pods_of_job(NS, &job1)? {
        let name = pod.metadata.name.clone().unwrap();
        Api::<Pod>::namespaced(client.clone(), NS)
            .delete(&name, &DeleteParams::default())
            .await?;
    }

    let plan = env.captf(&["plan", "tfc/kept"]).await?.stdout;
    assert!(
        plan.contains(&format!("Resource changes (kept in Secret default/{secret})")),
        "{plan}"
    );
    assert!(plan.contains("destroy   null_resource.old"), "{plan}");
    assert!(
        plan.contains("- id = \"1\" -> null"),
        "the attribute-level change: {plan}"
    );
    assert!(!plan.contains("is gone"), "nothing is missing: {plan}");

    // Another plan kept than the one waiting: the plugin says so and falls back on the log.
    let other = captf_shared::protocol::KeptPlan {
        hash: "hash-old".into(),
        ..record
    };
    Api::<Secret>::namespaced(client, NS)
        .patch(
            &secret,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"plan.json": b64(serde_json::to_vec(&other)?)}})),
        )
        .await?;
    let plan = env.captf(&["plan", "tfc/kept"]).await?.stdout;
    assert!(plan.contains("keeps plan hash-old, not this one"), "{plan}");
    assert!(plan.contains(&format!("the pod of Job {job1} is gone")), "{plan}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_plan_approved_through_the_plugin_goes_on_to_apply() -> Result<()> {
    let env = Env::new(true).await?;
    let m = || JobMatch::object(Kind::TerraformCluster, NS, "guarded").op(Op::Apply);
    env.sim.script(m(), RunnerScript::blocked("hash-1", summary()));
    env.sim.script(m(), RunnerScript::succeed());
    env.create_cluster("guarded", NS)?;
    env.finish_job("guarded", Op::Apply, 1, "blocked").await?;
    env.until_next_action("guarded", "AwaitingApproval").await?;

    // plan: the counts, the addresses in the runner's log, how to read it and approve it.
    let job1 = names::job_name(Kind::TerraformCluster, NS, "guarded", Op::Apply, 1);
    let pod = env.sim.pods_of_job(NS, &job1)?[0].metadata.name.clone().unwrap();
    env.sim.set_pod_log(
        NS,
        &pod,
        "  # null_resource.old will be destroyed\n  # null_resource.new will be created\n",
    );
    let plan = env.captf(&["plan", "tfc/guarded"]).await?.stdout;
    assert!(
        plan.starts_with("Plan hash-1 waits for approval on TerraformCluster default/guarded"),
        "{plan}"
    );
    assert!(
        plan.contains("1 to add, 0 to change, 1 to destroy, 0 to replace"),
        "{plan}"
    );
    assert!(plan.contains("destroy   null_resource.old"), "{plan}");
    assert!(
        plan.contains(&format!("kubectl logs -n default {pod} -c runner")),
        "{plan}"
    );
    assert!(
        plan.contains("kubectl captf approve tfc/guarded --hash hash-1"),
        "{plan}"
    );

    // A hash that is not the pending plan's is refused, and nothing is written.
    let err = env
        .captf(&["approve", "tfc/guarded", "--hash", "hash-0"])
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::Refused(_)), "{err}");
    assert!(
        !err.to_string().contains("hash-1"),
        "the error does not give the right hash away: {err}"
    );
    assert!(
        env.cluster("guarded")
            .pointer("/metadata/annotations/captf.io~1approve-plan")
            .is_none()
    );

    let out = env.captf(&["approve", "tfc/guarded", "--hash", "hash-1"]).await?.stdout;
    assert!(
        out.starts_with("Approved plan hash-1 on TerraformCluster default/guarded"),
        "{out}"
    );
    assert!(out.contains("start apply"), "{out}");
    let job2 = env.until_job("guarded", Op::Apply, 2).await?;
    assert_eq!(job2["metadata"]["annotations"]["captf.io/approved-plan"], "hash-1");
    env.finish_job("guarded", Op::Apply, 2, "succeeded").await?;
    let c = env
        .until("guarded ready", |e| {
            let c = e.cluster("guarded");
            (c.pointer("/status/initialization/provisioned") == Some(&json!(true))).then_some(c)
        })
        .await?;
    assert!(c.pointer("/status/pendingPlan").is_none_or(Value::is_null));
    // Nothing waits any more.
    let err = env.captf(&["approve", "tfc/guarded"]).await.unwrap_err();
    assert!(err.to_string().starts_with("no plan waits for approval"), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_shows_the_newest_jobs_runner_log_and_previous_the_one_before() -> Result<()> {
    let env = Env::new(true).await?;
    env.sim.script(
        JobMatch::object(Kind::TerraformCluster, NS, "logged").op(Op::Apply),
        RunnerScript::fail("Error: boom"),
    );
    env.create_cluster("logged", NS)?;
    env.finish_job("logged", Op::Apply, 1, "failed").await?;
    env.sim.advance(Duration::from_secs(60));
    env.finish_job("logged", Op::Apply, 2, "succeeded").await?;

    let newest = env.captf(&["logs", "tfc/logged", "--op", "apply"]).await?;
    let job2 = names::job_name(Kind::TerraformCluster, NS, "logged", Op::Apply, 2);
    assert!(
        newest
            .stderr
            .starts_with(&format!("==> Job {job2} (apply, #2), pod {job2}-")),
        "{newest:?}"
    );
    assert!(newest.stdout.contains("result succeeded"), "{newest:?}");
    let previous = env
        .captf(&["logs", "tfc/logged", "--op", "apply", "--previous"])
        .await?;
    assert!(previous.stdout.contains("Error: boom"), "{previous:?}");
    assert!(previous.stdout.contains("result failed"), "{previous:?}");
    let err = env.captf(&["logs", "tfc/logged", "--op", "drift"]).await.unwrap_err();
    assert!(err.to_string().contains("has no drift Job"), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_every_object_with_its_next_step_and_a_foreign_lock_holder() -> Result<()> {
    let mut env = Env::new(true).await?;
    env.sim
        .set_default_script(RunnerScript::realistic_with_outputs(outputs()));
    env.applied_cluster("calm").await?;
    env.applied_cluster("locked").await?;
    env.stop_controller().await;
    env.sim.hold_lock(
        NS,
        &names::suffix(Kind::TerraformCluster, NS, "locked"),
        "lock-9",
        "bob@desk",
    );
    env.create_cluster("elsewhere", "team-b")?;

    let here = env.captf(&["status"]).await?.stdout;
    let lines: Vec<&str> = here.lines().collect();
    assert_eq!(lines.len(), 3, "{here}");
    assert!(lines[0].starts_with("KIND"), "{here}");
    assert!(lines[1].contains("calm") && lines[1].contains("wait (Idle)"), "{here}");
    assert!(lines[2].contains("locked") && lines[2].contains("bob@desk"), "{here}");

    let all: Value = serde_json::from_str(
        &env.captf(&["status", "-A", "-o", "json", "--sort-by", "last-success"])
            .await?
            .stdout,
    )?;
    let names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["elsewhere", "calm", "locked"], "never succeeded first");
    // No controller watches team-b: the object is not observed, whatever a controller would do.
    assert_eq!(all[0]["next"], "not observed");
    assert_eq!(all[0]["observed"], false);
    assert_eq!(all[1]["observed"], true);
    assert_eq!(all[0]["namespace"], "team-b");

    let wide = env.captf(&["status", "-A", "-o", "wide"]).await?.stdout;
    assert!(wide.starts_with("NAMESPACE"), "{wide}");
    assert!(wide.contains("ACTIVE JOB"), "{wide}");
    // Another context's namespace.
    let other = env.captf(&["--context", "elsewhere", "status"]).await?.stdout;
    assert!(other.contains("elsewhere") && !other.contains("calm"), "{other}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waiting_on_someone_elses_lock_shows_the_holder_the_lock_id_and_how_to_release_it() -> Result<()> {
    let env = Env::new(true).await?;
    env.create_cluster("waiting", NS)?;
    let job = names::job_name(Kind::TerraformCluster, NS, "waiting", Op::Apply, 1);
    env.until_job("waiting", Op::Apply, 1).await?;
    let suffix = names::suffix(Kind::TerraformCluster, NS, "waiting");
    env.sim.hold_lock(NS, &suffix, "lock-7", "bob@desk");

    let text = env.captf(&["explain", "tfc/waiting"]).await?.stdout;
    assert!(
        text.contains("held by bob@desk (lock ID lock-7, operation OperationTypeApply"),
        "{text}"
    );
    assert!(
        text.contains(&format!("Job {job} waits up to lockTimeoutSeconds")),
        "{text}"
    );
    assert!(text.contains("`tofu force-unlock lock-7`"), "{text}");
    let status = env.captf(&["status"]).await?.stdout;
    let line = status.lines().find(|l| l.contains("waiting")).unwrap_or_default();
    assert!(line.contains("bob@desk"), "{status}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_lists_what_happened_to_one_object_oldest_first() -> Result<()> {
    let env = Env::new(true).await?;
    env.sim
        .set_default_script(RunnerScript::realistic_with_outputs(outputs()));
    env.applied_cluster("told").await?;
    env.applied_cluster("other").await?;
    let job = names::job_name(Kind::TerraformCluster, NS, "told", Op::Apply, 1);
    let out = env.captf(&["events", "tfc/told"]).await?.stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("AGE") && lines[0].contains("REASON"), "{out}");
    let reasons: Vec<&str> = lines[1..].iter().filter_map(|l| l.split_whitespace().nth(3)).collect();
    // The controller may stamp JobStarted after the test moved the clock on: the two can share a
    // time, and then either may come first.
    let mut sorted = reasons.clone();
    sorted.sort();
    assert_eq!(sorted, ["Applied", "JobStarted"], "{out}");
    assert!(lines[1..].iter().all(|l| l.contains(&job)), "{out}");
    assert!(!out.contains("other"), "only the object's own Events: {out}");
    let json: Value = serde_json::from_str(&env.captf(&["events", "tfc/told", "-o", "json"]).await?.stdout)?;
    let items = json.as_array().cloned().unwrap_or_default();
    let times: Vec<jiff::Timestamp> = items.iter().filter_map(|e| e["time"].as_str()?.parse().ok()).collect();
    assert_eq!(times.len(), 2, "{json}");
    assert!(times[0] <= times[1], "oldest first: {json}");
    let applied = items
        .iter()
        .find(|e| e["reason"] == "Applied")
        .cloned()
        .unwrap_or_default();
    assert_eq!(applied["job"], job.as_str());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_says_when_no_controller_has_observed_the_object() -> Result<()> {
    let env = Env::new(false).await?;
    env.create_cluster("unseen", NS)?;
    let text = env.captf(&["explain", "tfc/unseen"]).await?.stdout;
    assert!(
        text.starts_with("Note: not observed: no controller has looked at this object"),
        "{text}"
    );
    let status = env.captf(&["status"]).await?.stdout;
    assert!(
        status.lines().nth(1).is_some_and(|l| l.contains("not observed")),
        "{status}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_sees_the_cluster_lease_and_a_members_running_job_live() -> Result<()> {
    let env = Env::new(true).await?;
    env.sim
        .set_default_script(RunnerScript::realistic_with_outputs(outputs()));
    env.create_cluster("c", NS)?;
    let cluster_job = env.until_job("c", Op::Apply, 1).await?;
    // A member the cluster owns (a label alone would be a claim that holds nothing).
    let owner = json!([{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
        "name": "c", "uid": env.cluster("c")["metadata"]["uid"]}]);
    env.sim.put(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "TerraformMachinePool",
        "metadata": {"name": "p", "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": "c"},
            "ownerReferences": owner},
        "spec": {"module": {"source": "git::https://example.com/pool.git"}, "drift": {"interval": "0"}},
    }))?;
    let pools = "infrastructure.cluster.x-k8s.io/terraformmachinepools";
    env.until("pool held by the cluster lease", |e| {
        let p = e.sim.get(pools, NS, "p")?;
        (p.pointer("/status/nextAction/reason") == Some(&json!("ClusterBusy"))).then_some(())
    })
    .await?;
    let text = env.captf(&["explain", "tfmp/p"]).await?.stdout;
    assert!(text.contains("apply held (ClusterBusy)"), "{text}");
    assert!(
        text.contains(&format!(
            "the cluster's Job {} releases the cluster lease",
            cluster_job["metadata"]["name"].as_str().unwrap()
        )),
        "{text}"
    );

    // The cluster's apply ends; the pool's starts; new inputs of the cluster wait for it.
    env.sim.advance(Duration::from_secs(30));
    let pool_job = names::job_name(Kind::TerraformMachinePool, NS, "p", Op::Apply, 1);
    env.until("the pool's apply", |e| e.sim.get("batch/jobs", NS, &pool_job))
        .await?;
    let api: kube::Api<captf_shared::types::TerraformCluster> = kube::Api::namespaced(env.sim.client()?, NS);
    api.patch(
        "c",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"variables": {"region": "eu-central-1"}}})),
    )
    .await?;
    env.until_next_action("c", "MemberJobActive").await?;
    let text = env.captf(&["explain", "tfc/c"]).await?.stdout;
    assert!(text.contains("apply held (MemberJobActive)"), "{text}");
    assert!(
        text.contains(&format!("the member's Job {pool_job} finishes")),
        "{text}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_requests_a_refresh_the_controller_runs_and_refuses_while_a_plan_waits() -> Result<()> {
    let env = Env::new(true).await?;
    env.sim
        .set_default_script(RunnerScript::realistic_with_outputs(outputs()));
    env.applied_cluster("fresh").await?;
    env.sim.advance(Duration::from_secs(60));
    let out = env.captf(&["refresh", "tfc/fresh"]).await?.stdout;
    assert!(
        out.starts_with("refresh requested on TerraformCluster default/fresh"),
        "{out}"
    );
    let c = env.cluster("fresh");
    assert_eq!(
        c.pointer("/metadata/annotations/captf.io~1refresh"),
        Some(&json!(env.sim.now().to_string()))
    );
    let refresh = env.until_job("fresh", Op::Refresh, 2).await?;
    assert_eq!(
        refresh["metadata"]["annotations"]["captf.io/reason"],
        "RefreshRequested"
    );

    env.sim.script(
        JobMatch::object(Kind::TerraformCluster, NS, "waiting").op(Op::Apply),
        RunnerScript::blocked("hash-7", summary()),
    );
    env.create_cluster("waiting", NS)?;
    env.finish_job("waiting", Op::Apply, 1, "blocked").await?;
    env.until_next_action("waiting", "AwaitingApproval").await?;
    let err = env.captf(&["refresh", "tfc/waiting"]).await.unwrap_err();
    assert!(matches!(err, PluginError::Refused(_)), "{err}");
    assert!(err.to_string().contains("never bypasses an approval"), "{err}");
    // The old verb says which of the two new ones does what.
    let err = env.captf(&["retry", "tfc/waiting"]).await.unwrap_err();
    assert!(matches!(err, PluginError::Usage(_)), "{err}");
    assert!(err.to_string().contains("kubectl captf reconcile tfc/waiting"), "{err}");
    assert!(
        env.cluster("waiting")
            .pointer("/metadata/annotations/captf.io~1refresh")
            .is_none(),
        "nothing written"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_starts_the_retry_of_a_failure_now_once_with_who_and_why_recorded() -> Result<()> {
    let env = Env::new(true).await?;
    let m = || JobMatch::object(Kind::TerraformCluster, NS, "flaky").op(Op::Apply);
    env.sim.script(m(), RunnerScript::fail("Error: quota exceeded"));
    env.sim.script(m(), RunnerScript::fail("Error: quota exceeded"));
    env.create_cluster("flaky", NS)?;
    env.finish_job("flaky", Op::Apply, 1, "failed").await?;
    env.until_next_action("flaky", "InputsChangedBackoff").await?;

    // Nothing to skip while the object is not backing off is refused elsewhere; here it is.
    let out = env
        .captf(&["reconcile", "tfc/flaky", "--reason", "quota raised"])
        .await?
        .stdout;
    assert!(
        out.starts_with("reconcile requested on TerraformCluster default/flaky"),
        "{out}"
    );
    assert!(out.contains("instead of at"), "{out}");
    let c = env.cluster("flaky");
    assert_eq!(
        c.pointer("/metadata/annotations/captf.io~1reconcile-now"),
        Some(&json!(env.sim.now().to_string()))
    );
    assert_eq!(
        c.pointer("/metadata/annotations/captf.io~1reconcile-now-reason"),
        Some(&json!("quota raised"))
    );
    assert!(c.pointer("/metadata/annotations/captf.io~1reconcile-now-by").is_some());
    // The retry starts without the clock moving: the backoff was skipped.
    env.until_job("flaky", Op::Apply, 2).await?;
    env.until("the BackoffSkipped Event", |e| {
        e.sim
            .events(NS)
            .iter()
            .any(|ev| ev["reason"] == "BackoffSkipped")
            .then_some(())
    })
    .await?;
    let events = env.captf(&["events", "tfc/flaky"]).await?.stdout;
    assert!(events.contains("BackoffSkipped"), "{events}");
    assert!(events.contains("quota raised"), "{events}");
    // It fails again: the same request skips nothing more, and it was removed once used.
    env.finish_job("flaky", Op::Apply, 2, "failed").await?;
    env.until_next_action("flaky", "InputsChangedBackoff").await?;
    env.until("the used request removed", |e| {
        e.cluster("flaky")
            .pointer("/metadata/annotations/captf.io~1reconcile-now")
            .is_none()
            .then_some(())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_without_a_hash_shows_the_plan_and_asks_and_records_who_approved() -> Result<()> {
    let mut env = Env::new(true).await?;
    let m = || JobMatch::object(Kind::TerraformCluster, NS, "asked").op(Op::Apply);
    env.sim.script(m(), RunnerScript::blocked("hash-a", summary()));
    env.sim.script(m(), RunnerScript::succeed());
    env.create_cluster("asked", NS)?;
    env.finish_job("asked", Op::Apply, 1, "blocked").await?;
    env.until_next_action("asked", "AwaitingApproval").await?;

    // No terminal to ask on (the binary with stdin from /dev/null) and no --hash or --yes:
    // refused, saying how.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-captf"))
        .args(["--kubeconfig", env.kubeconfig.to_str().unwrap(), "approve", "tfc/asked"])
        .stdin(std::process::Stdio::null())
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("no terminal to ask on") && stderr.contains("--hash"),
        "{stderr}"
    );
    // The person says no: nothing written.
    let err = env.captf(&["approve", "tfc/asked"]).await.unwrap_err();
    assert!(
        err.to_string().contains("was not approved; nothing was written"),
        "{err}"
    );
    assert!(
        env.cluster("asked")
            .pointer("/metadata/annotations/captf.io~1approve-plan")
            .is_none()
    );
    // Yes: the approval and who gave it (the simulator has no SelfSubjectReview: the
    // kubeconfig's user).
    env.confirm = kubectl_captf::Confirm::Answer(true);
    let out = env.captf(&["approve", "tfc/asked"]).await?.stdout;
    assert!(
        out.starts_with("Approved plan hash-a on TerraformCluster default/asked as me (kubeconfig user)"),
        "{out}"
    );
    let c = env.cluster("asked");
    assert_eq!(
        c.pointer("/metadata/annotations/captf.io~1approve-plan"),
        Some(&json!("hash-a"))
    );
    assert_eq!(
        c.pointer("/metadata/annotations/captf.io~1approved-by"),
        Some(&json!("me (kubeconfig user)"))
    );
    let job2 = env.until_job("asked", Op::Apply, 2).await?;
    assert_eq!(
        job2["metadata"]["annotations"]["captf.io/approved-by"],
        "me (kubeconfig user)"
    );
    // Events are published after the Job is created.
    env.until("the PlanApproved Event", |e| {
        e.sim
            .events(NS)
            .iter()
            .any(|ev| ev["reason"] == "PlanApproved")
            .then_some(())
    })
    .await?;
    let events = env.captf(&["events", "tfc/asked"]).await?.stdout;
    assert!(events.contains("PlanApproved"), "{events}");
    assert!(events.contains("approved by me (kubeconfig user)"), "{events}");
    Ok(())
}

#[tokio::test]
async fn a_missing_object_names_the_namespace_it_was_looked_for_in() -> Result<()> {
    let env = Env::new(false).await?;
    let err = env.captf(&["explain", "tfc/nope", "-n", "team-b"]).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "TerraformCluster \"nope\" not found in namespace \"team-b\"; pass -n NAMESPACE, or list what exists with `kubectl captf status -A`"
    );
    Ok(())
}

#[tokio::test]
async fn explain_says_when_the_controller_leaves_an_object_alone() -> Result<()> {
    let env = Env::new(false).await?;
    env.sim.put(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "TerraformCluster",
        "metadata": {"name": "theirs", "namespace": NS, "labels": {"cluster.x-k8s.io/managed-by": "other"}},
        "spec": {"module": {"source": "git::https://example.com/net.git"}},
    }))?;
    let text = env.captf(&["explain", "tfc/theirs"]).await?.stdout;
    assert!(
        text.starts_with("Note: labelled cluster.x-k8s.io/managed-by=other: the controller leaves this object alone"),
        "{text}"
    );
    let status = env.captf(&["status"]).await?;
    assert!(status.stdout.is_empty(), "{status:?}");
    assert!(status.stderr.starts_with("No TerraformClusters"), "{status:?}");
    assert!(
        status
            .stderr
            .contains("Left out: 1 object(s) labelled cluster.x-k8s.io/managed-by"),
        "{status:?}"
    );
    Ok(())
}

/// A TerraformCluster whose Jobs may run `deadline` seconds, its first apply created and
/// started (the simulator's runner hangs until the deadline): the Job's name and start.
async fn hung_apply(env: &Env, name: &str, deadline: u32) -> Result<(String, String)> {
    env.sim.set_default_script(RunnerScript::hang());
    env.sim.put(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "TerraformCluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"module": {"source": "git::https://example.com/net.git"},
                 "variables": {"region": "eu-west-1"}, "drift": {"interval": "0"},
                 "jobs": {"activeDeadlineSeconds": deadline}},
    }))?;
    let job = names::job_name(Kind::TerraformCluster, NS, name, Op::Apply, 1);
    let started = env
        .until(&format!("Job {job} started"), |e| {
            let j = e.sim.get("batch/jobs", NS, &job)?;
            j.pointer("/status/startTime")?.as_str().map(str::to_string)
        })
        .await?;
    Ok((job, started))
}

fn plus(t: &str, secs: i64) -> String {
    let t: k8s_openapi::jiff::Timestamp = t.parse().unwrap();
    (t + k8s_openapi::jiff::SignedDuration::from_secs(secs)).to_string()
}

/// A running Job, hung or not: explain says since when it runs and when its deadline stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_when_the_running_job_started_and_when_its_deadline_stops_it() -> Result<()> {
    let env = Env::new(true).await?;
    let (job, started) = hung_apply(&env, "hung", 600).await?;
    env.sim.advance(Duration::from_secs(120));
    let text = env.captf(&["explain", "tfc/hung"]).await?.stdout;
    let deadline = plus(&started, 600);
    let want = format!(
        "Running:      apply Job {job} running since {started} (2m ago); its deadline is {started}+10m, at {deadline} (in 8m): Kubernetes then stops it (DeadlineExceeded) and it counts as a failure"
    );
    assert!(text.contains(&want), "{want}\nin\n{text}");
    Ok(())
}

/// `-o json` carries the active Job the text shows, with the same start and deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_json_carries_the_active_job_the_text_shows() -> Result<()> {
    let env = Env::new(true).await?;
    let (job, started) = hung_apply(&env, "hung", 600).await?;
    let text = env.captf(&["explain", "tfc/hung"]).await?.stdout;
    assert!(
        text.contains(&format!("Running:      apply Job {job} running since {started}")),
        "{text}"
    );
    let json: Value = serde_json::from_str(&env.captf(&["explain", "tfc/hung", "-o", "json"]).await?.stdout)?;
    assert_eq!(
        json["activeJob"],
        json!({"job": job, "found": true, "op": "apply", "since": started,
               "activeDeadlineSeconds": 600, "deadline": plus(&started, 600)}),
        "{json}"
    );
    Ok(())
}

/// A Job Kubernetes stopped at its deadline: explain gives that as the cause of the failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_names_the_deadline_as_the_cause_of_a_job_killed_at_it() -> Result<()> {
    let env = Env::new(true).await?;
    let (job, _) = hung_apply(&env, "slow", 60).await?;
    env.sim.advance(Duration::from_secs(61));
    env.until(&format!("Job {job} booked deadline"), |e| {
        let j = e.sim.get("batch/jobs", NS, &job)?;
        (j.pointer("/metadata/annotations/captf.io~1outcome") == Some(&json!("deadline"))).then_some(())
    })
    .await?;
    env.until_next_action("slow", "InputsChangedBackoff").await?;
    let text = env.captf(&["explain", "tfc/slow"]).await?.stdout;
    let want = format!(
        "Last failure: apply Job {job} was stopped at its deadline (DeadlineExceeded): it ran longer than its activeDeadlineSeconds (1m)"
    );
    assert!(text.contains(&want), "{want}\nin\n{text}");
    let json: Value = serde_json::from_str(&env.captf(&["explain", "tfc/slow", "-o", "json"]).await?.stdout)?;
    assert_eq!(json["lastFailure"]["reason"], json!("DeadlineExceeded"), "{json}");
    Ok(())
}

/// A suspended object: explain says so and gives the command that undoes it.
#[tokio::test]
async fn explain_of_a_suspended_object_says_how_to_resume_it() -> Result<()> {
    let env = Env::new(false).await?;
    env.create_cluster("held", NS)?;
    env.captf(&["suspend", "tfc/held"]).await?;
    let text = env.captf(&["explain", "tfc/held"]).await?.stdout;
    assert!(text.contains("Next:         wait (Paused)"), "{text}");
    assert!(
        text.contains("Why:          the object is suspended (spec.paused: true)"),
        "{text}"
    );
    assert!(
        text.contains("\nResume it with `kubectl captf resume tfc/held`.\n"),
        "{text}"
    );
    env.captf(&["resume", "tfc/held"]).await?;
    let text = env.captf(&["explain", "tfc/held"]).await?.stdout;
    assert!(!text.contains("resume"), "{text}");
    Ok(())
}

/// A TerraformMachine no Cluster API Machine owns yet lacks its Machine, not a Secret.
#[tokio::test]
async fn explain_of_a_terraform_machine_no_machine_owns_says_that_cluster_api_makes_the_machine() -> Result<()> {
    let env = Env::new(false).await?;
    env.sim.put(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "TerraformMachine",
        "metadata": {"name": "m", "namespace": NS, "labels": {"cluster.x-k8s.io/cluster-name": "c"}},
        "spec": {"module": {"source": "git::https://example.com/vm.git"}},
    }))?;
    let text = env.captf(&["explain", "tfm/m"]).await?.stdout;
    assert!(text.contains("Next:         wait (InputsUnresolved)"), "{text}");
    assert!(
        text.contains(
            "Why:          the inputs cannot be resolved: no Machine owns it yet: Cluster API creates the Machine and its bootstrap Secret"
        ),
        "{text}"
    );
    assert!(!text.contains("Secret or ConfigMap is missing"), "{text}");
    Ok(())
}

#[tokio::test]
async fn a_forbidden_read_names_the_verb_the_resource_and_the_rbac_rule_needed() -> Result<()> {
    let env = Env::new(false).await?;
    env.create_cluster("secret-ish", NS)?;
    let token = env.sim.token_for(NS, "oncall");
    let kc = write_kubeconfig(&env.sim, env.dir.path(), "oncall", &token);
    let err = env.captf_with(&kc, &["explain", "tfc/secret-ish"]).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("forbidden: you may not get terraformclusters in namespace \"default\"."),
        "{text}"
    );
    assert!(
        text.contains("resources: [\"terraformclusters\"], verbs: [\"get\"]"),
        "{text}"
    );
    assert!(
        text.contains("kubectl auth can-i get terraformclusters.infrastructure.cluster.x-k8s.io -n default"),
        "{text}"
    );

    // Allowed to list the objects but not to read their Jobs: status still lists every object,
    // marks the ones it could not read, and says what is missing.
    env.sim.load_rbac(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: look, namespace: default}\n\
         rules:\n- apiGroups: [infrastructure.cluster.x-k8s.io]\n  resources: [terraformclusters, terraformmachinepools, terraformmachines]\n  verbs: [get, list]\n\
         ---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: look, namespace: default}\n\
         roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: look}\n\
         subjects:\n- {kind: ServiceAccount, name: oncall, namespace: default}\n",
    )?;
    let status = env.captf_with(&kc, &["status"]).await?;
    assert!(status.partial, "{status:?}");
    assert!(
        status
            .stdout
            .lines()
            .any(|l| l.contains("secret-ish") && l.contains("unknown (cannot read; see below)")),
        "{status:?}"
    );
    assert!(
        status
            .stderr
            .starts_with("cannot read TerraformCluster default/secret-ish: forbidden: you may not list jobs in namespace \"default\"."),
        "{status:?}"
    );
    Ok(())
}

#[test]
fn completion_and_help_need_no_cluster() {
    use clap::CommandFactory;
    let mut buf = Vec::new();
    kubectl_captf::completion_script::write(clap_complete::Shell::Bash, &mut buf).unwrap();
    let script = String::from_utf8(buf).unwrap();
    assert!(script.contains("complete -F _kubectl__captf"), "{script}");
    // A subcommand's dispatch names the case its options are listed under.
    assert!(script.contains("cmd=\"kubectl__captf__subcmd__status\""), "{script}");
    assert!(script.contains("        kubectl__captf__subcmd__status)\n"), "{script}");
    let help = Cli::command().render_long_help().to_string();
    assert!(help.contains("Examples:"), "{help}");
    assert!(
        help.contains("kubectl captf explain terraformcluster/prod-eu"),
        "{help}"
    );
}

/// With `spec.stateEncryption` the state Secret holds ciphertext the controller and the plugin
/// cannot read: `status` and `explain` never read the state's contents, so they answer as for
/// any object, the passphrase appears in neither, and a deletion still destroys (an encrypted
/// state is a state, not an empty one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_explain_work_on_an_object_whose_state_is_encrypted() -> Result<()> {
    let env = Env::new(true).await?;
    env.sim
        .set_default_script(RunnerScript::realistic_with_outputs(outputs()));
    const PASSPHRASE: &str = "correct horse battery staple";
    env.sim.put(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "state-key", "namespace": NS},
        "data": {"passphrase": k8s_openapi::ByteString(PASSPHRASE.into())}}))?;
    env.sim.put(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "TerraformCluster",
        "metadata": {"name": "sealed", "namespace": NS},
        "spec": {"module": {"source": "git::https://example.com/net.git"},
                 "drift": {"interval": "0"},
                 "stateEncryption": {"passphraseSecretRef": {"name": "state-key"}}},
    }))?;
    env.finish_job("sealed", Op::Apply, 1, "succeeded").await?;
    // What OpenTofu writes with encryption on: a JSON envelope around AES-GCM ciphertext.
    let state = names::state_secret_name(&names::suffix(Kind::TerraformCluster, NS, "sealed"));
    let mut secret = env.sim.get("/secrets", NS, &state).expect("the state Secret");
    let envelope = json!({"meta": {"key_provider.pbkdf2.passphrase": "eyJzYWx0Ijoi"},
        "encrypted_data": "q83vEjRWeJASNFZ4kKvN7w==", "encryption_version": "v0"});
    // The kubernetes backend gzips the document, encrypted or not.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, envelope.to_string().as_bytes())?;
    secret["data"] = json!({"tfstate": k8s_openapi::ByteString(gz.finish()?)});
    env.sim.put(secret)?;

    let status = env.captf(&["status", "-o", "wide"]).await?;
    assert!(status.stdout.contains("sealed"), "{}", status.stdout);
    let explain = env.captf(&["explain", "tfc/sealed"]).await?;
    assert!(!explain.partial, "{}", explain.stderr);
    for out in [&status.stdout, &status.stderr, &explain.stdout, &explain.stderr] {
        assert!(!out.contains(PASSPHRASE), "the passphrase leaked: {out}");
    }

    let api: kube::Api<captf_shared::types::TerraformCluster> = kube::Api::namespaced(env.sim.client()?, NS);
    api.delete("sealed", &Default::default()).await?;
    if let Err(e) = env.until_job("sealed", Op::Destroy, 2).await {
        bail!("{e}: {}", env.cluster("sealed")["status"]);
    }
    Ok(())
}

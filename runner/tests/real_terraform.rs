//! The runner with each real binary of the matrix (`captf_testprovider::harness::MATRIX`:
//! Terraform 1.0.3 and every pinned OpenTofu, from `scripts/setup-tools.sh`), its real
//! kubernetes backend (client-go inside the binary) and the test provider, against the
//! simulator's HTTPS port through in-cluster configuration, as in a pod. Every test is written
//! once, taking the binary, and runs once per binary in the modules `terraform_1_0`,
//! `tofu_1_10` and `tofu_1_12` at the end of this file.
//!
//! Each run happens the way a kubelet runs a container: in new mount, UTS and PID namespaces
//! (`unshare`), with the runner as PID 1, the pod's name as hostname, and the service-account
//! files (`token`, `ca.crt`, `namespace`) bind-mounted at the fixed in-cluster path over a
//! private tmpfs, so the machine's own `/var/run/secrets` is never touched. Killing the
//! namespace's first process kills every process in it, as a container's death does. Where
//! namespaces can't be made (no root), each test says so and skips, except under `CI`, where
//! that fails it (`captf_testsupport::cannot_run`, the workspace's one rule). A missing binary always fails the test, naming it.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::collections::BTreeMap;

use captf_shared::protocol::{Phase, RunResult, RunnerResult};
use captf_shared::runner_identity::{runner_identity, state_objects};
use captf_shared::{keys, names};
use captf_sim::Sim;
use captf_testprovider::harness::{Binary, Sandbox, THING_MODULE};
use captf_testprovider::world::{HOLD_ENV, Thing, World};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

const NS: &str = "default";
const SUFFIX: &str = "prod-eu-tc";
const STATE_SECRET: &str = "tfstate-default-prod-eu-tc";
const LOCK_LEASE: &str = "lock-tfstate-default-prod-eu-tc";
const OUTPUTS_SECRET: &str = "captf-outputs-prod-eu-tc";
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Upper bound on any one wait for a process; a test that hits it fails, it never passes by it.
const PATIENCE: Duration = Duration::from_secs(120);

/// Why these tests can't run here, if they can't: making the namespaces needs root (the
/// simulator's process kubelet has the same need and the same check).
fn namespaces_unavailable() -> Option<String> {
    captf_sim::process_kubelet::namespaces_unavailable()
}

/// What the controller makes before an object's first Job: its runner ServiceAccount, Role and
/// RoleBinding, and its empty state Secret, free lock Lease and empty outputs Secret.
fn provision(sim: &Sim, suffix: &str) {
    let id = runner_identity(NS, suffix, &BTreeMap::new(), None);
    let move_label = BTreeMap::from([(keys::LABEL_CLUSTERCTL_MOVE.to_string(), String::new())]);
    let state = state_objects(NS, suffix, &move_label, None);
    for obj in [
        serde_json::to_value(&id.service_account).unwrap(),
        serde_json::to_value(&id.role).unwrap(),
        serde_json::to_value(&id.role_binding).unwrap(),
        serde_json::to_value(&state.state_secret).unwrap(),
        serde_json::to_value(&state.lock_lease).unwrap(),
        serde_json::to_value(&state.outputs_secret).unwrap(),
    ] {
        sim.put(obj).unwrap();
    }
}

/// Outside CI, a machine that can't make the namespaces skips these tests and says why; under
/// `CI` they must run, so there it is a failure (`captf_testsupport::cannot_run`).
macro_rules! require_namespaces {
    () => {
        if let Some(why) = namespaces_unavailable() {
            captf_testsupport::cannot_run(format!(
                "{why}; the real-binary runner tests need root for a private mount namespace"
            ));
            return;
        }
    };
}

/// A simulator with its HTTPS port, a Terraform sandbox, and the inputs of one object.
struct Env {
    sim: Sim,
    sb: Sandbox,
    module: PathBuf,
    runs: usize,
    /// The pod's service-account token: the simulator's admin, or a ServiceAccount's.
    token: String,
    /// `stateEncryption` of the inputs, and the passphrases mounted for the runner.
    encryption: Option<(Value, Vec<(&'static str, String)>)>,
}

/// One finished runner: exit code, parsed result, and everything it printed.
struct Ran {
    code: Option<i32>,
    result: RunnerResult,
    termination_log: String,
    output: String,
}

impl Ran {
    fn outcome(&self) -> (Option<i32>, RunResult, Phase) {
        (self.code, self.result.result, self.result.phase)
    }
}

/// A runner started and still running.
struct Running {
    child: Child,
    output: Arc<Mutex<String>>,
    termination_log: PathBuf,
}

fn collect(r: impl AsyncRead + Unpin + Send + 'static, into: Arc<Mutex<String>>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(r).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut s = into.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
}

impl Running {
    fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// Wait until the runner's output contains `text`.
    async fn until_output(&mut self, text: &str) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !self.output().contains(text) {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("runner exited ({status}) before printing {text:?}:\n{}", self.output());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "never printed {text:?}:\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Wait until `path` exists (a file the test provider writes mid-change).
    async fn until_file(&mut self, path: &Path) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !path.exists() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "runner exited ({status}) before {} appeared:\n{}",
                    path.display(),
                    self.output()
                );
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} never appeared",
                path.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The runner's pid outside its PID namespace (where it is PID 1).
    fn runner_pid(&self) -> Pid {
        let unshare = self.child.id().unwrap();
        let children = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children")).unwrap();
        let pid: i32 = children.split_whitespace().next().unwrap().parse().unwrap();
        Pid::from_raw(pid)
    }

    /// What a kubelet does on a deadline or an eviction: SIGTERM to the container's PID 1.
    fn sigterm(&self) {
        kill(self.runner_pid(), Signal::SIGTERM).unwrap();
    }

    /// The container dies at once (OOM kill): SIGKILL to `unshare`, whose `--kill-child` takes
    /// the whole PID namespace with it.
    async fn kill_9(mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }

    async fn finish(mut self) -> Ran {
        let status = tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .expect("runner did not finish")
            .unwrap();
        // The output readers end when the pipes close (every process of the namespace died with
        // its PID 1); give them the bound to do so, and fail past it rather than read a partial
        // output.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while Arc::strong_count(&self.output) > 1 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the runner's output pipes were still open 10 s after it exited ({status}):\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let output = self.output();
        let termination_log = std::fs::read_to_string(&self.termination_log).unwrap_or_default();
        let result = RunnerResult::parse(&termination_log)
            .unwrap_or_else(|e| panic!("no valid result ({e}): {termination_log:?}\n{output}"));
        eprintln!("runner {status}: {termination_log}\n{output}");
        Ran {
            code: status.code(),
            result,
            termination_log,
            output,
        }
    }
}

impl Env {
    async fn new(bin: Binary) -> Env {
        let sim = Sim::builder().https().start().await.unwrap();
        let sb = Sandbox::with(bin).unwrap();
        let module = sb.module("thing", THING_MODULE).unwrap();
        Env {
            sim,
            sb,
            module,
            runs: 0,
            token: captf_sim::auth::ADMIN_TOKEN.to_string(),
            encryption: None,
        }
    }

    /// The runner runs as its object's own ServiceAccount, with the Role, RoleBinding and
    /// pre-created state objects the controller makes for it (`captf_shared::runner_identity`),
    /// authorized by the simulator as a real API server would.
    async fn under_own_identity(bin: Binary) -> Env {
        let mut env = Env::new(bin).await;
        provision(&env.sim, SUFFIX);
        env.token = env.sim.token_for(NS, &names::runner_service_account_name(SUFFIX));
        env
    }

    fn world(&self) -> World {
        World::new(&self.sb.world)
    }

    fn thing(&self, name: &str) -> Option<Thing> {
        self.sb.thing(name)
    }

    fn get(&self, resource: &str, name: &str) -> Option<Value> {
        self.sim.get(resource, NS, name)
    }

    /// The lock Lease's holder, or None when it is free (or does not exist).
    fn lock_holder(&self) -> Option<String> {
        self.get("coordination.k8s.io/leases", LOCK_LEASE)
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
            .filter(|h| !h.is_empty())
    }

    fn lock_info(&self) -> Value {
        let lease = self.get("coordination.k8s.io/leases", LOCK_LEASE).unwrap();
        let info = lease["metadata"]["annotations"]["app.terraform.io/lock-info"]
            .as_str()
            .unwrap();
        serde_json::from_str(info).unwrap()
    }

    /// Start the runner for `op` with these variables and extra environment.
    fn start(&mut self, op: &str, vars: Value, extra: &[(&str, &str)]) -> Running {
        self.runs += 1;
        let run = self.sb.path().join(format!("run-{}", self.runs));
        let inputs = run.join("inputs");
        let sa = run.join("serviceaccount");
        std::fs::create_dir_all(&inputs).unwrap();
        let mut doc = json!({"module": {"source": self.module.display().to_string()}, "variables": vars});
        let mut encryption_env = vec![];
        if let Some((inputs, files)) = &self.encryption {
            doc["stateEncryption"] = inputs.clone();
            let mount = run.join("state-encryption");
            std::fs::create_dir_all(&mount).unwrap();
            for (file, value) in files {
                std::fs::write(mount.join(file), value).unwrap();
            }
            encryption_env.push(("CAPTF_STATE_ENCRYPTION_DIR", mount.display().to_string()));
        }
        std::fs::write(inputs.join("inputs.json"), doc.to_string()).unwrap();
        let https = self.sim.https().unwrap();
        https.write_service_account_files(&sa, NS, &self.token).unwrap();
        let termination_log = run.join("termination-log");
        let pod = format!("tc-prod-eu-225654031b7f-{op}-{}-x2k9q", self.runs);
        let p = |s: &Path| s.display().to_string();
        let mut cmd = Command::new("unshare");
        cmd.args([
            "--mount",
            "--propagation",
            "private",
            "--uts",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "sh",
            "-c",
            &format!(
                "set -e; mount -t tmpfs tmpfs /var/run; mkdir -p {SA_DIR}; mount --bind \"$1\" {SA_DIR}; \
                 hostname \"$2\"; shift 2; exec \"$@\""
            ),
            "sh",
        ])
        .arg(&sa)
        .arg(&pod)
        .arg(env!("CARGO_BIN_EXE_captf-runner"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("TMPDIR", &run)
        .env("HOME", &run)
        .envs(https.service_env())
        .envs(self.sb.env())
        .env("CAPTF_OP", op)
        .env("CAPTF_STATE_SUFFIX", SUFFIX)
        .env("CAPTF_NAMESPACE", NS)
        .env("CAPTF_LOCK_TIMEOUT", "2s")
        .env("CAPTF_INPUTS_DIR", p(&inputs))
        .env("CAPTF_TF_BINARY", p(&self.sb.terraform))
        .env("CAPTF_WORK_DIR", p(&run.join("work")))
        .env("CAPTF_TERMINATION_LOG", p(&termination_log))
        .envs(encryption_env)
        .envs(extra.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let output = Arc::new(Mutex::new(String::new()));
        collect(child.stdout.take().unwrap(), output.clone());
        collect(child.stderr.take().unwrap(), output.clone());
        Running {
            child,
            output,
            termination_log,
        }
    }

    /// Start an apply of `a` with content `held` that holds in the middle of its change (lock
    /// taken) until `gate` exists; returns once the change is under way.
    async fn start_held_apply(&mut self, gate: &Path) -> Running {
        let gate_text = gate.display().to_string();
        let mut running = self.start("apply", a("held"), &[(HOLD_ENV, &gate_text)]);
        running.until_file(&self.world().busy_marker("a").unwrap()).await;
        running
    }

    /// A runner killed mid-apply, as a container dies: returns the lock ID it left held.
    async fn die_mid_apply(&mut self) -> String {
        let gate = self.sb.path().join("never-opened");
        self.start_held_apply(&gate).await.kill_9().await;
        self.lock_holder()
            .expect("a runner killed mid-apply leaves the lock held")
    }

    async fn run(&mut self, op: &str, vars: Value, extra: &[(&str, &str)]) -> Ran {
        self.start(op, vars, extra).finish().await
    }

    async fn apply(&mut self, vars: Value) -> Ran {
        self.run("apply", vars, &[]).await
    }
}

fn a(content: &str) -> Value {
    json!({"name": "a", "content": content})
}

/// A workstation's Terraform on the same state, outside any pod: it reaches the simulator
/// through a kubeconfig and holds the lock while its apply waits on `gate`.
struct Workstation {
    child: tokio::process::Child,
    dir: PathBuf,
}

impl Workstation {
    async fn hold_lock(env: &Env, gate: &Path) -> Workstation {
        let dir = env.sb.path().join("workstation");
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        env.sim.write_kubeconfig(&kubeconfig).unwrap();
        std::fs::write(dir.join("main.tf"), THING_MODULE).unwrap();
        std::fs::write(
            dir.join("backend.tf"),
            format!(
                "terraform {{\n  backend \"kubernetes\" {{\n    secret_suffix = \"{SUFFIX}\"\n    namespace = \"{NS}\"\n    config_path = \"{}\"\n  }}\n}}\n",
                kubeconfig.display()
            ),
        )
        .unwrap();
        let tf = |args: &[&str]| {
            let mut c = Command::new(&env.sb.terraform);
            c.args(args)
                .current_dir(&dir)
                .envs(env.sb.env())
                .env(HOLD_ENV, gate)
                .stdin(Stdio::null())
                .kill_on_drop(true);
            c
        };
        let init = tf(&["init", "-input=false", "-no-color"]).output().await.unwrap();
        assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
        let child = tf(&["apply", "-auto-approve", "-input=false", "-no-color", "-var", "name=w"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let busy = env.world().busy_marker("w").unwrap();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !busy.exists() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the workstation never took the lock"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Workstation { child, dir }
    }
}

async fn apply_creates_the_state_secret_and_takes_and_releases_the_lease(bin: Binary) {
    require_namespaces!();
    let mut env = Env::new(bin).await;
    let mut changes = env.sim.changes();
    let ran = env.apply(a("one")).await;
    assert_eq!(ran.outcome(), (Some(0), RunResult::Succeeded, Phase::Apply));
    assert_eq!(env.thing("a").unwrap().content, "one");

    let state = env.get("/secrets", STATE_SECRET).expect("the state Secret");
    assert_eq!(state["metadata"]["labels"]["tfstateSecretSuffix"], SUFFIX);
    assert!(state["data"]["tfstate"].as_str().is_some_and(|s| !s.is_empty()));

    let mut held = false;
    while let Ok(event) = changes.try_recv() {
        let obj = &event.object;
        if obj["kind"] == "Lease" && obj["metadata"]["name"] == LOCK_LEASE {
            held |= obj["spec"]["holderIdentity"].as_str().is_some_and(|h| !h.is_empty());
        }
    }
    assert!(held, "the Lease was never taken");
    assert_eq!(env.lock_holder(), None, "the Lease was not released");

    // Outputs: the endpoint in the result; the sensitive one only in the outputs Secret.
    let outputs = ran.result.outputs.clone().unwrap();
    assert_eq!(outputs["endpoint"], "thing-a.example:6443");
    assert!(!outputs.contains_key("secret"));
    assert!(!ran.termination_log.contains("s3cr3t-a"));
    let secret = env.get("/secrets", OUTPUTS_SECRET).expect("the outputs Secret");
    let doc = secret["data"]["outputs.json"].as_str().unwrap();
    let doc: Value = serde_json::from_slice(&base64_decode(doc)).unwrap();
    assert_eq!(doc["secret"]["sensitive"], true);
    assert_eq!(doc["secret"]["value"], "s3cr3t-a");
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

async fn refresh_reads_the_world_into_the_state_and_reports_the_outputs(bin: Binary) {
    require_namespaces!();
    let mut env = Env::new(bin).await;
    assert_eq!(
        env.apply(a("one")).await.outcome(),
        (Some(0), RunResult::Succeeded, Phase::Apply)
    );
    let ran = env.run("refresh", a("one"), &[]).await;
    assert_eq!(ran.outcome(), (Some(0), RunResult::Succeeded, Phase::Refresh));
    assert_eq!(ran.result.outputs.unwrap()["endpoint"], "thing-a.example:6443");
    assert_eq!(env.lock_holder(), None);
}

async fn drift_is_found_from_a_real_world_change_and_none_when_nothing_changed(bin: Binary) {
    require_namespaces!();
    let mut env = Env::new(bin).await;
    assert_eq!(env.apply(a("one")).await.result.result, RunResult::Succeeded);
    let ran = env.run("drift", a("one"), &[]).await;
    assert_eq!(ran.outcome(), (Some(0), RunResult::Succeeded, Phase::Drift));
    assert_eq!(ran.result.drift, Some(false));

    env.world()
        .write(&Thing {
            name: "a".into(),
            content: "edited by hand".into(),
        })
        .unwrap();
    let ran = env.run("drift", a("one"), &[]).await;
    assert_eq!(ran.outcome(), (Some(0), RunResult::Succeeded, Phase::Drift));
    assert_eq!(ran.result.drift, Some(true));
    // A drift check changes nothing; the apply after it puts the content back.
    assert_eq!(env.thing("a").unwrap().content, "edited by hand");
    assert_eq!(env.apply(a("one")).await.result.result, RunResult::Succeeded);
    assert_eq!(env.thing("a").unwrap().content, "one");
}

async fn destroy_removes_what_the_apply_made(bin: Binary) {
    require_namespaces!();
    let mut env = Env::new(bin).await;
    assert_eq!(env.apply(a("one")).await.result.result, RunResult::Succeeded);
    let ran = env.run("destroy", a("one"), &[]).await;
    assert_eq!(ran.outcome(), (Some(0), RunResult::Succeeded, Phase::Destroy));
    assert_eq!(env.thing("a"), None);
    assert_eq!(env.lock_holder(), None);
}

async fn a_replace_is_blocked_with_the_plan_hash_and_the_approved_hash_applies(bin: Binary) {
    require_namespaces!();
    let mut env = Env::new(bin).await;
    assert_eq!(env.apply(a("one")).await.result.result, RunResult::Succeeded);
    let b = json!({"name": "b", "content": "one"});
    let blocked = env.apply(b.clone()).await;
    assert_eq!(blocked.outcome(), (Some(3), RunResult::Blocked, Phase::Guard));
    let hash = blocked.result.plan_hash.clone().unwrap();
    let summary = blocked.result.summary.unwrap();
    assert_eq!(
        (summary.add, summary.destroy, summary.replace),
        (0, 0, 1),
        "{summary:?}"
    );
    assert!(
        env.thing("a").is_some() && env.thing("b").is_none(),
        "a blocked plan changes nothing"
    );

    let ran = env.run("apply", b, &[("CAPTF_APPROVED_PLAN", &hash)]).await;
    assert_eq!(ran.outcome(), (Some(0), RunResult::Succeeded, Phase::Apply));
    assert!(env.thing("a").is_none() && env.thing("b").is_some());
}

async fn a_different_plan_after_approval_is_plan_changed(bin: Binary) {
    require_namespaces!();
    let mut env = Env::new(bin).await;
    assert_eq!(env.apply(a("one")).await.result.result, RunResult::Succeeded);
    let blocked = env.apply(json!({"name": "b", "content": "one"})).await;
    let hash = blocked.result.plan_hash.unwrap();
    // The approval was for replacing a with b; the plan now replaces a with c.
    let ran = env
        .run(
            "apply",
            json!({"name": "c", "content": "one"}),
            &[("CAPTF_APPROVED_PLAN", &hash)],
        )
        .await;
    assert_eq!(ran.outcome(), (Some(4), RunResult::PlanChanged, Phase::Guard));
    assert_ne!(ran.result.plan_hash.as_deref(), Some(hash.as_str()));
    assert!(env.thing("a").is_some() && env.thing("c").is_none());
}

async fn kill_9_mid_apply_leaves_the_lock_held_and_the_next_run_force_unlocks_it_and_applies(bin: Binary) {
    require_namespaces!();
    let mut env = Env::new(bin).await;
    let held = env.die_mid_apply().await;
    let info = env.lock_info();
    assert_eq!(info["ID"], held.as_str(), "the Lease holder is Terraform's lock ID");
    assert!(
        info["Who"]
            .as_str()
            .unwrap()
            .ends_with("@tc-prod-eu-225654031b7f-apply-1-x2k9q"),
        "Who names the pod: {info}"
    );

    // The shape the simulator's scripted runners copy.
    let keys: Vec<&str> = info.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["Created", "ID", "Info", "Operation", "Path", "Version", "Who"],
        "{info}"
    );
    assert_eq!(info["Operation"], "OperationTypeApply");
    assert_eq!(info["Version"], bin.version().unwrap().as_str());

    let ran = env.run("apply", a("one"), &[("CAPTF_FORCE_UNLOCK_ID", &held)]).await;
    assert_eq!(ran.outcome(), (Some(0), RunResult::Succeeded, Phase::Apply));
    assert!(ran.output.contains("force-unlock"), "{}", ran.output);
    let lease = env
        .get("coordination.k8s.io/leases", LOCK_LEASE)
        .expect("the Lease is kept");
    eprintln!("lease after unlock and apply: {lease}");
    assert!(
        lease["metadata"]["annotations"]
            .get("app.terraform.io/lock-info")
            .is_none(),
        "{lease}"
    );
    assert_eq!(env.thing("a").unwrap().content, "one");
    assert_eq!(env.lock_holder(), None);
}

async fn a_wrong_force_unlock_id_is_tolerated_and_the_held_lock_then_fails_the_op(bin: Binary) {
    require_namespaces!();
    let mut env = Env::new(bin).await;
    let held = env.die_mid_apply().await;

    let wrong = "11111111-2222-3333-4444-555555555555";
    let ran = env.run("apply", a("one"), &[("CAPTF_FORCE_UNLOCK_ID", wrong)]).await;
    assert_eq!(
        ran.outcome(),
        (Some(1), RunResult::Failed, Phase::Plan),
        "{}",
        ran.result.message
    );
    assert!(
        ran.result.message.contains("Error acquiring the state lock"),
        "{}",
        ran.result.message
    );
    assert_eq!(
        env.lock_holder().as_deref(),
        Some(held.as_str()),
        "the held lock is untouched"
    );
}

async fn a_foreign_lock_fails_the_op_after_the_lock_timeout_naming_its_holder_and_is_never_unlocked(bin: Binary) {
    require_namespaces!();
    let mut env = Env::new(bin).await;
    let gate = env.sb.path().join("workstation-done");
    let mut ws = Workstation::hold_lock(&env, &gate).await;
    let holder = env.lock_holder().expect("the workstation holds the lock");
    let who = env.lock_info()["Who"].as_str().unwrap().to_string();

    let ran = env.apply(a("one")).await;
    assert_eq!(ran.outcome(), (Some(1), RunResult::Failed, Phase::Plan));
    assert!(
        ran.result.message.contains("Error acquiring the state lock"),
        "{}",
        ran.result.message
    );
    assert!(
        ran.result.message.contains(&who),
        "names the holder {who}: {}",
        ran.result.message
    );
    assert_eq!(env.lock_holder(), Some(holder), "a foreign lock is never unlocked");

    std::fs::write(&gate, b"").unwrap();
    let status = tokio::time::timeout(PATIENCE, ws.child.wait()).await.unwrap().unwrap();
    assert!(
        status.success(),
        "the workstation's apply finishes ({})",
        ws.dir.display()
    );
    assert_eq!(env.lock_holder(), None);
}

async fn sigterm_mid_apply_interrupts_terraform_once_and_it_releases_its_lock(bin: Binary) {
    require_namespaces!();
    let mut env = Env::new(bin).await;
    let gate = env.sb.path().join("gate");
    let mut running = env.start_held_apply(&gate).await;
    assert!(env.lock_holder().is_some(), "the apply holds the lock");

    running.sigterm();
    // Terraform says it got the interrupt, then waits for the change in flight to finish.
    running.until_output("Interrupt received").await;
    std::fs::write(&gate, b"").unwrap();
    let ran = running.finish().await;

    assert_eq!(ran.outcome(), (Some(5), RunResult::Interrupted, Phase::Apply));
    assert_eq!(ran.output.matches("Interrupt received").count(), 1, "{}", ran.output);
    assert_eq!(env.lock_holder(), None, "Terraform released its lock on the way out");
}

async fn under_its_own_identity_every_step_works_and_these_are_the_calls_the_backend_makes(bin: Binary) {
    require_namespaces!();
    let mut env = Env::under_own_identity(bin).await;
    assert_eq!(env.apply(a("one")).await.result.result, RunResult::Succeeded);
    assert_eq!(
        env.run("drift", a("one"), &[]).await.result.result,
        RunResult::Succeeded
    );
    let held = env.die_mid_apply().await;
    let ran = env.run("apply", a("one"), &[("CAPTF_FORCE_UNLOCK_ID", &held)]).await;
    assert_eq!(ran.result.result, RunResult::Succeeded);
    assert_eq!(
        env.run("destroy", a("one"), &[]).await.result.result,
        RunResult::Succeeded
    );
    assert_eq!(
        env.sim.denied(),
        Vec::<String>::new(),
        "the object's own Role allows every call"
    );

    // What the runner (its outputs Secret) and Terraform's kubernetes backend need, all limited
    // by name: the backend's workspace listing goes through the runner's state proxy, which
    // selects the state Secret by name; nothing is created, because the controller made the
    // Secrets and the Lease beforehand.
    let used = env.sim.used_rights(NS, &names::runner_service_account_name(SUFFIX));
    eprintln!("rights used: {used:?}");
    let expected = [
        "get /secrets",
        "get coordination.k8s.io/leases",
        "list /secrets",
        "patch /secrets",
        "update /secrets",
        "update coordination.k8s.io/leases",
    ];
    assert_eq!(used.iter().map(String::as_str).collect::<Vec<_>>(), expected);
    let state = env.get("/secrets", STATE_SECRET).unwrap();
    assert_eq!(state["metadata"]["labels"]["tfstateSecretSuffix"], SUFFIX);
    assert_eq!(
        state["metadata"]["labels"][keys::LABEL_CLUSTERCTL_MOVE],
        "",
        "the backend's writes keep the controller's labels: {state}"
    );
}

/// Another object's runner, with the same rights over its own things, in the same namespace:
/// everything of the first object is out of its reach, whatever module code does with its token.
async fn a_runner_gets_403_on_another_objects_state_lock_outputs_and_inputs(bin: Binary) {
    require_namespaces!();
    let mut env = Env::under_own_identity(bin).await;
    assert_eq!(env.apply(a("one")).await.result.result, RunResult::Succeeded);
    env.sim
        .put(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": names::inputs_secret_name(SUFFIX), "namespace": NS},
            "data": {"inputs.json": "e30="}}))
        .unwrap();
    let other = "other-tc";
    provision(&env.sim, other);
    let client = kube::Client::try_from(env.sim.config_as(NS, &names::runner_service_account_name(other))).unwrap();
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(client.clone(), NS);
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> = kube::Api::namespaced(client, NS);
    let forbidden = |r: Result<_, kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.code == 403);

    // Its own state is readable: the Role works, and what follows is refused for the right reason.
    assert!(secrets.get(&names::state_secret_name(other)).await.is_ok());
    for name in [
        STATE_SECRET.to_string(),
        OUTPUTS_SECRET.to_string(),
        names::inputs_secret_name(SUFFIX),
    ] {
        assert!(forbidden(secrets.get(&name).await.map(|_| ())), "get {name}");
        let patch = kube::api::Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}));
        assert!(
            forbidden(
                secrets
                    .patch(&name, &kube::api::PatchParams::default(), &patch)
                    .await
                    .map(|_| ())
            ),
            "patch {name}"
        );
        assert!(
            forbidden(secrets.delete(&name, &Default::default()).await.map(|_| ())),
            "delete {name}"
        );
        let by_name = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
        assert!(forbidden(secrets.list(&by_name).await.map(|_| ())), "list {name}");
    }
    assert!(
        forbidden(secrets.list(&Default::default()).await.map(|_| ())),
        "list of every Secret"
    );
    let planted = serde_json::from_value(json!({"metadata": {"name": "tfstate-default-new-tc"}})).unwrap();
    assert!(
        forbidden(secrets.create(&Default::default(), &planted).await.map(|_| ())),
        "create"
    );
    assert!(forbidden(leases.get(LOCK_LEASE).await.map(|_| ())), "get the lock");
    let take =
        serde_json::from_value(json!({"metadata": {"name": LOCK_LEASE}, "spec": {"holderIdentity": "x"}})).unwrap();
    assert!(
        forbidden(leases.replace(LOCK_LEASE, &Default::default(), &take).await.map(|_| ())),
        "take the lock"
    );
    // And the first object's state is as its own runner left it.
    assert_eq!(env.thing("a").unwrap().content, "one");
    assert_eq!(env.lock_holder(), None);
}

/// `clusterctl move` takes the state Secret (it carries the move label) to another cluster,
/// where the controller makes the object's identity and free lock again and leaves the moved
/// Secret alone. There the next apply plans against the moved state: nothing to create, and a
/// destroy removes what the first cluster's apply made.
async fn a_state_moved_to_another_cluster_plans_no_creates_there_and_destroys_what_was_made(bin: Binary) {
    require_namespaces!();
    let mut env = Env::under_own_identity(bin).await;
    assert_eq!(env.apply(a("one")).await.result.result, RunResult::Succeeded);
    let mut moved = env.get("/secrets", STATE_SECRET).unwrap();
    assert_eq!(
        moved["metadata"]["labels"][keys::LABEL_CLUSTERCTL_MOVE],
        "",
        "labelled to move"
    );
    for k in ["uid", "resourceVersion", "creationTimestamp", "managedFields"] {
        moved["metadata"].as_object_mut().unwrap().remove(k);
    }

    // The target cluster: the same cloud (the provider's world), another API server.
    env.sim = Sim::builder().https().start().await.unwrap();
    provision(&env.sim, SUFFIX);
    env.sim.put(moved.clone()).unwrap();
    env.token = env.sim.token_for(NS, &names::runner_service_account_name(SUFFIX));

    let ran = env.apply(a("one")).await;
    assert_eq!(ran.outcome(), (Some(0), RunResult::Succeeded, Phase::Apply));
    let summary = ran.result.summary.unwrap();
    assert_eq!(
        (summary.add, summary.change, summary.destroy, summary.replace),
        (0, 0, 0, 0),
        "{summary:?}"
    );
    assert_eq!(env.thing("a").unwrap().content, "one");
    assert_eq!(env.sim.denied(), Vec::<String>::new());

    assert_eq!(
        env.run("destroy", a("one"), &[]).await.result.result,
        RunResult::Succeeded
    );
    assert!(
        env.thing("a").is_none(),
        "the destroy in the target removed what the source made"
    );
}

/// One state backend: a module's own `backend` block (in `main.tf`) or `cloud` block (in another
/// file) is refused in `init`, naming the file and line, before any backend is configured: no
/// state Secret is written and nothing is made. Terraform 1.0 does not even know the `cloud`
/// block; the refusal is the same.
async fn a_module_with_its_own_backend_or_cloud_block_is_refused_in_init_naming_the_file(bin: Binary) {
    require_namespaces!();
    let mut env = Env::new(bin).await;
    let state_before = env.get("/secrets", STATE_SECRET);
    env.module = env
        .sb
        .module(
            "own-backend",
            &format!(
                "{THING_MODULE}\nterraform {{\n  backend \"local\" {{\n    path = \"elsewhere.tfstate\"\n  }}\n}}\n"
            ),
        )
        .unwrap();
    let backend_line = THING_MODULE.lines().count() + 3;
    let ran = env.apply(a("one")).await;
    assert_eq!(
        ran.outcome(),
        (Some(1), RunResult::Failed, Phase::Init),
        "{}",
        ran.result.message
    );
    assert!(
        ran.result.message.starts_with(&format!(
            "the module declares its own backend \"local\" block in main.tf line {backend_line}; CAPTF keeps every state in the kubernetes backend"
        )),
        "{}",
        ran.result.message
    );

    env.module = env.sb.module("own-cloud", THING_MODULE).unwrap();
    std::fs::write(
        env.module.join("cloud.tf"),
        "terraform {\n  cloud {\n    organization = \"example\"\n    workspaces {\n      name = \"w\"\n    }\n  }\n}\n",
    )
    .unwrap();
    let ran = env.apply(a("one")).await;
    assert_eq!(
        ran.outcome(),
        (Some(1), RunResult::Failed, Phase::Init),
        "{}",
        ran.result.message
    );
    assert!(
        ran.result
            .message
            .starts_with("the module declares its own cloud block in cloud.tf line 2; "),
        "{}",
        ran.result.message
    );
    assert_eq!(env.thing("a"), None, "nothing was made");
    assert_eq!(env.get("/secrets", STATE_SECRET), state_before, "no state was written");
    assert_eq!(env.lock_holder(), None);
}

/// Bind one of the object's state objects to `uid`, as the controller does
/// (`captf.io/owner-uid`).
fn bind(env: &Env, resource: &str, name: &str, uid: &str) {
    let mut o = env.get(resource, name).unwrap();
    o["metadata"]["annotations"]["captf.io/owner-uid"] = json!(uid);
    env.sim.put(o).unwrap();
}

/// A run for one object never plans, applies or locks on a state Secret or lock Lease bound to
/// another object: the state proxy answers 409 naming the binding, the run fails in init, and
/// neither the world nor the state changes. The object's own binding runs.
async fn a_state_secret_or_lock_bound_to_another_object_is_refused_and_nothing_is_applied(bin: Binary) {
    require_namespaces!();
    let mut env = Env::under_own_identity(bin).await;
    bind(&env, "/secrets", STATE_SECRET, "uid-of-the-owner");
    bind(&env, "coordination.k8s.io/leases", LOCK_LEASE, "uid-of-the-owner");
    let state_before = env.get("/secrets", STATE_SECRET).unwrap();
    let ran = env
        .run("apply", a("one"), &[("CAPTF_OWNER_UID", "uid-of-the-intruder")])
        .await;
    assert_ne!(ran.code, Some(0), "{}", ran.output);
    assert_eq!(ran.result.result, RunResult::Failed, "{}", ran.output);
    assert!(
        ran.termination_log.contains("is bound to another object"),
        "{}",
        ran.termination_log
    );
    assert!(env.thing("a").is_none(), "nothing applied on another object's state");
    let state_after = env.get("/secrets", STATE_SECRET).unwrap();
    assert_eq!(
        state_after["metadata"]["resourceVersion"],
        state_before["metadata"]["resourceVersion"]
    );
    assert_eq!(env.lock_holder(), None, "another object's lock is never taken");

    let ran = env
        .run("apply", a("one"), &[("CAPTF_OWNER_UID", "uid-of-the-owner")])
        .await;
    assert_eq!(
        ran.outcome(),
        (Some(0), RunResult::Succeeded, Phase::Apply),
        "{}",
        ran.output
    );
    assert_eq!(env.thing("a").unwrap().content, "one");
    // The backend's writes keep the binding.
    let state = env.get("/secrets", STATE_SECRET).unwrap();
    assert_eq!(
        state["metadata"]["annotations"]["captf.io/owner-uid"],
        "uid-of-the-owner"
    );
    let lease = env.get("coordination.k8s.io/leases", LOCK_LEASE).unwrap();
    assert_eq!(
        lease["metadata"]["annotations"]["captf.io/owner-uid"],
        "uid-of-the-owner"
    );
}

/// A `TF_CLI_CONFIG_FILE` that names a missing file: OpenTofu 1.12 then warns on stdout, ahead of
/// the JSON of `show -json` and `output -json`; the runner still reads the plan and the outputs.
/// The provider comes from the implicit plugin folder `$HOME/.terraform.d/plugins` instead.
async fn a_missing_cli_configuration_file_still_applies_and_reads_the_outputs(bin: Binary) {
    require_namespaces!();
    let mut env = Env::new(bin).await;
    let home = env.sb.path().join("home");
    std::fs::create_dir_all(home.join(".terraform.d")).unwrap();
    std::os::unix::fs::symlink(env.sb.path().join("mirror"), home.join(".terraform.d/plugins")).unwrap();
    let missing = env.sb.path().join("no-such-terraform.rc");
    let home = home.display().to_string();
    let missing = missing.display().to_string();
    let ran = env
        .run("apply", a("one"), &[("HOME", &home), ("TF_CLI_CONFIG_FILE", &missing)])
        .await;
    assert_eq!(
        ran.outcome(),
        (Some(0), RunResult::Succeeded, Phase::Apply),
        "{}",
        ran.result.message
    );
    assert_eq!(ran.result.outputs.unwrap()["endpoint"], "thing-a.example:6443");
    // OpenTofu 1.12 puts the warning on stdout (1.10 on stderr, Terraform 1.0 says nothing): the
    // runner found the JSON after it and logged what came before.
    assert_eq!(
        ran.output.contains("printed this before its JSON output:"),
        bin == Binary::Tofu("1.12"),
        "{}",
        ran.output
    );
}

/// What the state Secret's `tfstate` holds, decompressed (the first part of a large state).
fn state_text(env: &Env) -> String {
    use std::io::Read;
    let state = env.get("/secrets", STATE_SECRET).expect("the state Secret");
    let gz = base64_decode(state["data"]["tfstate"].as_str().unwrap_or_default());
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..]).read_to_string(&mut text).unwrap();
    text
}

/// With a quote, a backslash and an HCL template sequence, which must reach OpenTofu as written.
const PASSPHRASE_1: &str = r#"first "passphrase" \ ${var.x} %{if} 0c2f9a7e"#;
const PASSPHRASE_2: &str = "second passphrase, 5d41e8b3";
/// A value the apply writes into the state (the thing's content), so its absence shows.
const KNOWN: &str = "a-known-attribute-value-3f1c";

/// The Secret key each passphrase is kept in, as the inputs name them.
fn secret_key_of(passphrase: &str) -> &'static str {
    if passphrase == PASSPHRASE_2 {
        "state-key-2/passphrase"
    } else {
        "state-key/passphrase"
    }
}

/// Encrypt (or `mode`) with `current`, and `previous` during a rotation, each from its own
/// Secret key (a rotation moves to a new Secret, as docs/state-encryption.md has it).
fn encrypt_with(env: &mut Env, mode: &str, current: &str, previous: Option<&str>) {
    let mut inputs = json!({"mode": mode, "passphrase": secret_key_of(current)});
    let mut files = vec![("passphrase", current.to_string())];
    if let Some(p) = previous {
        inputs["previousPassphrase"] = json!(secret_key_of(p));
        files.push(("previous-passphrase", p.to_string()));
    }
    env.encryption = Some((inputs, files));
}

fn is_encrypted(text: &str) -> bool {
    text.contains("\"encrypted_data\"") && !text.contains(KNOWN)
}

async fn an_encrypted_state_holds_no_plaintext_and_every_step_still_works(bin: Binary) {
    require_namespaces!();
    let mut env = Env::new(bin).await;
    encrypt_with(&mut env, "Encrypt", PASSPHRASE_1, None);
    if !bin.is_tofu() {
        let ran = env.apply(a(KNOWN)).await;
        assert_eq!(ran.outcome(), (Some(1), RunResult::Failed, Phase::Init));
        assert!(
            ran.result
                .message
                .starts_with("spec.stateEncryption needs OpenTofu 1.7 or later, but CAPTF_TF_BINARY runs Terraform"),
            "{}",
            ran.result.message
        );
        assert!(env.get("/secrets", STATE_SECRET).is_none(), "no state was written");
        assert!(env.thing("a").is_none(), "nothing was applied");
        return;
    }
    let started = std::time::Instant::now();
    let ran = env.apply(a(KNOWN)).await;
    let encrypted_apply = started.elapsed();
    assert_eq!(
        ran.outcome(),
        (Some(0), RunResult::Succeeded, Phase::Apply),
        "{}",
        ran.output
    );
    assert_eq!(env.thing("a").unwrap().content, KNOWN);
    let text = state_text(&env);
    assert!(is_encrypted(&text), "the state Secret holds plaintext:\n{text}");
    assert!(!text.contains("s3cr3t-a"), "nor the sensitive output");
    assert!(
        !ran.output.contains(PASSPHRASE_1) && !ran.termination_log.contains(PASSPHRASE_1),
        "{}",
        ran.output
    );
    assert_eq!(ran.result.outputs.clone().unwrap()["endpoint"], "thing-a.example:6443");
    for (op, phase) in [("refresh", Phase::Refresh), ("drift", Phase::Drift)] {
        let ran = env.run(op, a(KNOWN), &[]).await;
        assert_eq!(ran.outcome(), (Some(0), RunResult::Succeeded, phase), "{}", ran.output);
    }
    assert!(is_encrypted(&state_text(&env)), "still encrypted after a refresh");
    // The cost: the same apply again on a plaintext state of its own.
    let mut plain = Env::new(bin).await;
    let started = std::time::Instant::now();
    assert_eq!(plain.apply(a(KNOWN)).await.result.result, RunResult::Succeeded);
    let plain_apply = started.elapsed();
    assert!(state_text(&plain).contains(KNOWN));
    eprintln!("FIGURE {bin}: first apply {encrypted_apply:?} encrypted, {plain_apply:?} plaintext");
    let ran = env.run("destroy", a(KNOWN), &[]).await;
    assert_eq!(
        ran.outcome(),
        (Some(0), RunResult::Succeeded, Phase::Destroy),
        "{}",
        ran.output
    );
    assert!(env.thing("a").is_none());
}

async fn a_wrong_or_missing_passphrase_fails_the_step_and_leaves_the_state_untouched(bin: Binary) {
    require_namespaces!();
    let mut env = Env::new(bin).await;
    encrypt_with(&mut env, "Encrypt", PASSPHRASE_1, None);
    assert_eq!(env.apply(a(KNOWN)).await.result.result, RunResult::Succeeded);
    let before = env.get("/secrets", STATE_SECRET).unwrap()["data"].clone();
    encrypt_with(&mut env, "Encrypt", PASSPHRASE_2, None);
    let ran = env.apply(a("changed")).await;
    assert_eq!(ran.result.result, RunResult::Failed, "{}", ran.output);
    assert_eq!(
        ran.result.phase,
        Phase::Init,
        "init reads the state: {}",
        ran.result.message
    );
    assert!(
        ran.result.message.to_lowercase().contains("decrypt"),
        "{}",
        ran.result.message
    );
    assert!(!ran.output.contains(PASSPHRASE_2), "{}", ran.output);
    assert_eq!(
        env.get("/secrets", STATE_SECRET).unwrap()["data"],
        before,
        "the state is untouched"
    );
    assert_eq!(env.thing("a").unwrap().content, KNOWN, "nothing was applied");
    assert_eq!(env.lock_holder(), None);
    // A passphrase missing from the mount fails init before any command.
    env.encryption.as_mut().unwrap().1.clear();
    let ran = env.apply(a("changed")).await;
    assert_eq!(ran.outcome(), (Some(1), RunResult::Failed, Phase::Init));
    assert!(
        ran.result
            .message
            .contains("(Secret key state-key-2/passphrase) is not mounted"),
        "{}",
        ran.result.message
    );
    assert_eq!(env.get("/secrets", STATE_SECRET).unwrap()["data"], before);
}

async fn turning_encryption_on_migrates_a_plaintext_state_and_decrypt_turns_it_back(bin: Binary) {
    require_namespaces!();
    let mut env = Env::new(bin).await;
    assert_eq!(env.apply(a(KNOWN)).await.result.result, RunResult::Succeeded);
    assert!(state_text(&env).contains(KNOWN), "plaintext before");
    // Turned on: the same inputs otherwise, so the plan has no changes, and still the state is
    // written encrypted.
    encrypt_with(&mut env, "Encrypt", PASSPHRASE_1, None);
    let ran = env.apply(a(KNOWN)).await;
    assert_eq!(
        ran.outcome(),
        (Some(0), RunResult::Succeeded, Phase::Apply),
        "{}",
        ran.output
    );
    assert!(ran.output.contains("the state is plaintext"), "{}", ran.output);
    assert!(is_encrypted(&state_text(&env)), "migrated:\n{}", state_text(&env));
    // The next run reads it encrypted, with no plaintext fallback any more.
    let ran = env.run("drift", a(KNOWN), &[]).await;
    assert_eq!(
        ran.outcome(),
        (Some(0), RunResult::Succeeded, Phase::Drift),
        "{}",
        ran.output
    );
    assert!(!ran.output.contains("Unencrypted method"), "{}", ran.output);
    // Decrypt: written back in plaintext, readable with no encryption at all.
    encrypt_with(&mut env, "Decrypt", PASSPHRASE_1, None);
    let ran = env.apply(a(KNOWN)).await;
    assert_eq!(
        ran.outcome(),
        (Some(0), RunResult::Succeeded, Phase::Apply),
        "{}",
        ran.output
    );
    assert!(
        state_text(&env).contains(KNOWN),
        "plaintext again:\n{}",
        state_text(&env)
    );
    env.encryption = None;
    let ran = env.run("drift", a(KNOWN), &[]).await;
    assert_eq!(
        ran.outcome(),
        (Some(0), RunResult::Succeeded, Phase::Drift),
        "{}",
        ran.output
    );
}

async fn a_passphrase_rotation_reads_with_the_previous_and_writes_with_the_new(bin: Binary) {
    require_namespaces!();
    let mut env = Env::new(bin).await;
    encrypt_with(&mut env, "Encrypt", PASSPHRASE_1, None);
    assert_eq!(env.apply(a(KNOWN)).await.result.result, RunResult::Succeeded);
    encrypt_with(&mut env, "Encrypt", PASSPHRASE_2, Some(PASSPHRASE_1));
    let ran = env.apply(a(KNOWN)).await;
    assert_eq!(
        ran.outcome(),
        (Some(0), RunResult::Succeeded, Phase::Apply),
        "{}",
        ran.output
    );
    // Now only the new passphrase reads it, and the old one no longer does.
    encrypt_with(&mut env, "Encrypt", PASSPHRASE_2, None);
    let ran = env.run("drift", a(KNOWN), &[]).await;
    assert_eq!(
        ran.outcome(),
        (Some(0), RunResult::Succeeded, Phase::Drift),
        "{}",
        ran.output
    );
    encrypt_with(&mut env, "Encrypt", PASSPHRASE_1, None);
    let ran = env.run("drift", a(KNOWN), &[]).await;
    assert_eq!(ran.result.result, RunResult::Failed, "{}", ran.output);
    assert!(is_encrypted(&state_text(&env)));
}

/// One module of tests per binary of the matrix: `terraform_1_0::…`, `tofu_1_10::…`,
/// `tofu_1_12::…`, each running every test above with that binary.
macro_rules! on_binary {
    ($module:ident, $bin:expr; $($test:ident),* $(,)?) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test($bin).await
                }
            )*
        }
    };
}

macro_rules! matrix {
    ($($module:ident => $bin:expr),* $(,)? ; $tests:tt) => {
        /// The binaries the modules below run, in order.
        const TESTED: &[Binary] = &[$($bin),*];
        $( matrix!(@one $module, $bin, $tests); )*
    };
    (@one $module:ident, $bin:expr, [$($test:ident),* $(,)?]) => {
        on_binary!($module, $bin; $($test),*);
    };
}

matrix!(
    terraform_1_0 => captf_testprovider::harness::Binary::Terraform,
    tofu_1_10 => captf_testprovider::harness::Binary::Tofu("1.10"),
    tofu_1_12 => captf_testprovider::harness::Binary::Tofu("1.12");
    [
        apply_creates_the_state_secret_and_takes_and_releases_the_lease,
        refresh_reads_the_world_into_the_state_and_reports_the_outputs,
        drift_is_found_from_a_real_world_change_and_none_when_nothing_changed,
        destroy_removes_what_the_apply_made,
        a_replace_is_blocked_with_the_plan_hash_and_the_approved_hash_applies,
        a_different_plan_after_approval_is_plan_changed,
        kill_9_mid_apply_leaves_the_lock_held_and_the_next_run_force_unlocks_it_and_applies,
        a_wrong_force_unlock_id_is_tolerated_and_the_held_lock_then_fails_the_op,
        a_foreign_lock_fails_the_op_after_the_lock_timeout_naming_its_holder_and_is_never_unlocked,
        sigterm_mid_apply_interrupts_terraform_once_and_it_releases_its_lock,
        under_its_own_identity_every_step_works_and_these_are_the_calls_the_backend_makes,
        a_runner_gets_403_on_another_objects_state_lock_outputs_and_inputs,
        a_state_moved_to_another_cluster_plans_no_creates_there_and_destroys_what_was_made,
        a_module_with_its_own_backend_or_cloud_block_is_refused_in_init_naming_the_file,
        a_state_secret_or_lock_bound_to_another_object_is_refused_and_nothing_is_applied,
        a_missing_cli_configuration_file_still_applies_and_reads_the_outputs,
        an_encrypted_state_holds_no_plaintext_and_every_step_still_works,
    ]
);

/// State encryption is OpenTofu's alone (Terraform's refusal is tested above): these run on
/// every pinned OpenTofu.
macro_rules! on_every_tofu {
    ($($module:ident => $minor:literal),* $(,)? ; $tests:tt) => {
        /// The OpenTofu minors the encryption modules run.
        const TESTED_TOFU: &[&str] = &[$($minor),*];
        $( on_every_tofu!(@one $module, $minor, $tests); )*
    };
    (@one $module:ident, $minor:literal, [$($test:ident),* $(,)?]) => {
        on_binary!($module, captf_testprovider::harness::Binary::Tofu($minor); $($test),*);
    };
}

on_every_tofu!(
    tofu_1_10_encryption => "1.10",
    tofu_1_12_encryption => "1.12";
    [
        a_wrong_or_missing_passphrase_fails_the_step_and_leaves_the_state_untouched,
        turning_encryption_on_migrates_a_plaintext_state_and_decrypt_turns_it_back,
        a_passphrase_rotation_reads_with_the_previous_and_writes_with_the_new,
    ]
);

#[test]
fn the_matrix_runs_every_pinned_binary() {
    assert_eq!(TESTED, &captf_testprovider::harness::MATRIX[..]);
    let tofu: Vec<Binary> = TESTED_TOFU.iter().map(|m| Binary::Tofu(m)).collect();
    let pinned: Vec<Binary> = TESTED.iter().copied().filter(|b| b.is_tofu()).collect();
    assert_eq!(tofu, pinned, "the encryption tests run on every pinned OpenTofu");
}

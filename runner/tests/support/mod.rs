//! What the runner's end-to-end tests share: one runner invocation in its own temporary
//! directory (`Case`), what it left behind (`Ran`), and the plans the fake `tofu` shows.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use captf_shared::protocol::{Phase, RunResult, RunnerResult};
use nix::unistd::Pid;
use serde_json::{Value, json};

pub const SECRET_VAR: &str = "hunter2-variable-value";
pub const SECRET_OUTPUT: &str = "s3cr3t-output-value";
pub const LOCK_ID: &str = "0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55";
/// A lock ID that is not the one handed over: somebody else holds the state.
pub const OTHER_LOCK_ID: &str = "11111111-2222-3333-4444-555555555555";
pub const SOURCE: &str = "git::https://example.com/modules/cluster.git?ref=v1.2.0";

pub const INIT_FROM_MODULE: &str =
    "init -input=false -no-color -backend=false -from-module=git::https://example.com/modules/cluster.git?ref=v1.2.0";
pub const INIT: &str = "init -input=false -no-color";
pub const FLAGS: &str = "-lock-timeout=300s -input=false -no-color";

pub fn fake_tofu() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake/tofu")
}

/// One runner invocation's environment, in its own temporary directory.
pub struct Case {
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
}

pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub termination_log: String,
    pub result: RunnerResult,
    pub argv: Vec<String>,
    /// The kept plan's record and text (`outputs.json.plan.json`, `.plan.txt`), if written.
    pub kept_plan: Option<(String, String)>,
}

impl Ran {
    /// The exit code, the result and the phase, to compare in one assertion.
    pub fn outcome(&self) -> (Option<i32>, RunResult, Phase) {
        (self.code, self.result.result, self.result.phase)
    }
}

impl Case {
    pub fn new(op: &str) -> Case {
        let dir = tempfile::tempdir().unwrap();
        let inputs = dir.path().join("inputs");
        fs::create_dir(&inputs).unwrap();
        fs::write(
            inputs.join("inputs.json"),
            json!({"module": {"source": SOURCE}, "variables": {"password": SECRET_VAR, "replicas": 3}}).to_string(),
        )
        .unwrap();
        let p = |name: &str| dir.path().join(name).display().to_string();
        let env = vec![
            ("CAPTF_OP", op.to_string()),
            ("CAPTF_STATE_SUFFIX", "prod-eu-tc".to_string()),
            ("CAPTF_NAMESPACE", "team-a".to_string()),
            ("CAPTF_LOCK_TIMEOUT", "300s".to_string()),
            ("CAPTF_INPUTS_DIR", p("inputs")),
            ("CAPTF_TF_BINARY", fake_tofu().display().to_string()),
            ("CAPTF_WORK_DIR", p("work")),
            ("CAPTF_TERMINATION_LOG", p("termination-log")),
            ("CAPTF_OUTPUTS_FILE", p("outputs.json")),
            ("FAKE_TOFU_LOG", p("argv")),
            ("FAKE_MARKER", p("started")),
            ("FAKE_SIGNALS", p("signals")),
        ];
        Case {
            env: env.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            dir,
        }
    }

    /// Replace the module source in inputs.json.
    pub fn source(&mut self, source: &str) -> &mut Case {
        fs::write(
            self.path("inputs/inputs.json"),
            json!({"module": {"source": source}, "variables": {"password": SECRET_VAR}}).to_string(),
        )
        .unwrap();
        self
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn set(&mut self, k: &str, v: &str) -> &mut Case {
        self.env.retain(|(key, _)| key != k);
        self.env.push((k.to_string(), v.to_string()));
        self
    }

    pub fn unset(&mut self, k: &str) -> &mut Case {
        self.env.retain(|(key, _)| key != k);
        self
    }

    /// Write a file in the case directory and point an env var at it.
    pub fn file_env(&mut self, k: &str, name: &str, content: &str) -> &mut Case {
        let path = self.path(name);
        fs::write(&path, content).unwrap();
        self.set(k, &path.display().to_string())
    }

    /// The fake `tofu` shows this plan (`show -json`).
    pub fn plan(&mut self, changes: &[Value]) -> &mut Case {
        self.file_env("FAKE_PLAN_JSON", "plan.json", &plan_json(changes))
    }

    /// The fake `tofu` reports these outputs (`output -json`).
    pub fn outputs(&mut self, outputs: &Value) -> &mut Case {
        self.file_env("FAKE_OUTPUTS_JSON", "fake-outputs.json", &outputs.to_string())
    }

    /// The fake `tofu`'s state is locked with this lock ID.
    pub fn locked_by(&mut self, lock_id: &str) -> &mut Case {
        self.file_env("FAKE_LOCK_FILE", "lock", lock_id)
    }

    pub fn command(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_captf-runner"));
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("TMPDIR", self.dir.path())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Start the runner and wait until the fake `tofu` has started the step it hangs on.
    pub fn spawn_until_started(&self) -> (Child, Pid) {
        let mut child = self.command().spawn().unwrap();
        wait_for(&self.path("started"), &mut child);
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
        (child, pid)
    }

    pub fn finish(&self, out: Output) -> Ran {
        let termination_log = fs::read_to_string(self.path("termination-log")).unwrap_or_default();
        let result = RunnerResult::parse(&termination_log)
            .unwrap_or_else(|e| panic!("no valid result ({e}): {termination_log:?}"));
        let argv = fs::read_to_string(self.path("argv"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        Ran {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            termination_log,
            result,
            argv,
            kept_plan: fs::read_to_string(self.path("outputs.json.plan.json"))
                .ok()
                .zip(fs::read_to_string(self.path("outputs.json.plan.txt")).ok()),
        }
    }

    pub fn run(&self) -> Ran {
        let out = self.command().output().unwrap();
        self.finish(out)
    }
}

/// Wait (at most 20s of wall time) for a file the fake `tofu` writes, failing if the runner exits.
pub fn wait_for(path: &Path, child: &mut Child) {
    let start = Instant::now();
    while !path.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("runner exited early with {status}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn rc(addr: &str, actions: &[&str]) -> Value {
    json!({"address": addr, "mode": "managed", "type": "null_resource", "name": addr,
           "change": {"actions": actions, "before": {"id": "1"}, "after": {"id": "2"}}})
}

pub fn plan_json(changes: &[Value]) -> String {
    json!({"format_version": "1.2", "terraform_version": "1.9.5", "resource_changes": changes}).to_string()
}

pub fn destructive_changes() -> Vec<Value> {
    vec![
        rc("keep", &["create"]),
        rc("old", &["delete"]),
        rc("swap", &["create", "delete"]),
    ]
}

pub fn with_flags(head: &str, tail: &str) -> String {
    format!("{head} {FLAGS}{tail}")
}

pub fn assert_no_secrets(r: &Ran) {
    for s in [SECRET_VAR, SECRET_OUTPUT] {
        assert!(!r.stdout.contains(s), "{s} in stdout:\n{}", r.stdout);
        assert!(!r.stderr.contains(s), "{s} in stderr:\n{}", r.stderr);
        assert!(
            !r.termination_log.contains(s),
            "{s} in termination log: {}",
            r.termination_log
        );
    }
}

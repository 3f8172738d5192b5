//! What the plugin's tests share: a simulator over HTTPS with a kubeconfig as a person's would
//! be, the real controller runtime where a scenario needs it, and the built plugin run as a
//! child process for the commands that keep printing.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Parser;
use serde_json::{Value, json};

use captf_controller::runtime::clock::WatchClock;
use captf_controller::runtime::{self, Handle, RunArgs};
use captf_shared::{Kind, Op, names};
use captf_sim::Sim;
use kubectl_captf::cli::Cli;
use kubectl_captf::errors::PluginError;
use kubectl_captf::{Printed, connect, run};

pub const NS: &str = "default";
pub const TC: &str = "infrastructure.cluster.x-k8s.io/terraformclusters";
pub const T0: &str = "2026-01-01T00:00:00Z";
/// How long a test waits for the controller or a child process to react (wall time; it
/// usually takes milliseconds).
pub const WAIT: Duration = Duration::from_secs(60);

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

pub struct Env {
    pub sim: Sim,
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    pub controller: Option<Handle>,
}

/// A kubeconfig for the simulator's HTTPS port, trusting only its CA, with this token.
pub fn write_kubeconfig(sim: &Sim, dir: &Path, file: &str, token: &str) -> PathBuf {
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
    pub async fn new(with_controller: bool) -> Result<Env> {
        let sim = Sim::builder().https().start_time(T0.parse()?).start().await?;
        sim.create_namespace("team-b");
        let dir = tempfile::tempdir()?;
        let kubeconfig = write_kubeconfig(&sim, dir.path(), "kubeconfig", "captf-sim");
        let mut env = Env {
            sim,
            dir,
            kubeconfig,
            controller: None,
        };
        if with_controller {
            let clock = Arc::new(WatchClock::new(env.sim.clock_watch()));
            env.controller = Some(runtime::start(env.sim.client()?, &args(), clock).await?);
        }
        Ok(env)
    }

    /// `kubectl captf <args>` in-process with this kubeconfig; no `--now`: the plugin finds
    /// the simulator's clock itself.
    pub async fn captf(&self, args: &[&str]) -> Result<Printed, PluginError> {
        let mut argv = vec!["kubectl-captf", "--kubeconfig", self.kubeconfig.to_str().unwrap()];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv).map_err(|e| PluginError::Usage(e.to_string()))?;
        let conn = connect(&cli).await?;
        run(&cli, &conn).await
    }

    /// The built plugin as a child process with this kubeconfig.
    pub fn spawn(&self, args: &[&str]) -> Result<Plugin> {
        Plugin::spawn(&self.kubeconfig, args)
    }

    pub fn put_kind(&self, kind: Kind, name: &str, labels: Value, owners: Value) -> Result<Value> {
        Ok(self.sim.put(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": kind.as_str(),
            "metadata": {"name": name, "namespace": NS, "labels": labels, "ownerReferences": owners},
            "spec": {"module": {"source": format!("git::https://example.com/{name}.git")},
                     "variables": {"region": "eu-west-1"}, "drift": {"interval": "0"}},
        }))?)
    }

    pub fn create_cluster(&self, name: &str) -> Result<()> {
        self.put_kind(Kind::TerraformCluster, name, json!({}), json!([]))?;
        Ok(())
    }

    pub fn object(&self, kind: Kind, name: &str) -> Value {
        let res = format!("infrastructure.cluster.x-k8s.io/{}", kind.plural());
        self.sim.get(&res, NS, name).unwrap_or(Value::Null)
    }

    pub fn cluster(&self, name: &str) -> Value {
        self.sim.get(TC, NS, name).unwrap_or(Value::Null)
    }

    /// Poll until `f` holds (the controller reacts to watch events; wall time ≤ WAIT).
    pub async fn until<T>(&self, what: &str, mut f: impl FnMut(&Env) -> Option<T>) -> Result<T> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(v) = f(self) {
                return Ok(v);
            }
            if Instant::now() > deadline {
                bail!("timed out waiting for {what}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn until_next_action(&self, kind: Kind, name: &str, reason: &str) -> Result<Value> {
        self.until(&format!("{kind} {name}: nextAction {reason}"), |e| {
            let c = e.object(kind, name);
            (c.pointer("/status/nextAction/reason") == Some(&json!(reason))).then_some(c)
        })
        .await
    }

    pub async fn until_job(&self, kind: Kind, name: &str, op: Op, seq: u32) -> Result<Value> {
        let job = names::job_name(kind, NS, name, op, seq);
        self.until(&format!("Job {job}"), |e| e.sim.get("batch/jobs", NS, &job))
            .await
    }

    /// Let the running Job's runner finish (the default script takes 30 s) and wait for its booking.
    pub async fn finish_job(&self, kind: Kind, name: &str, op: Op, seq: u32, outcome: &str) -> Result<()> {
        let job = names::job_name(kind, NS, name, op, seq);
        self.until_job(kind, name, op, seq).await?;
        self.sim.advance(Duration::from_secs(30));
        self.until(&format!("Job {job} booked {outcome}"), |e| {
            let j = e.sim.get("batch/jobs", NS, &job)?;
            (j.pointer("/metadata/annotations/captf.io~1outcome") == Some(&json!(outcome))).then_some(())
        })
        .await
    }

    pub async fn applied_cluster(&self, name: &str) -> Result<()> {
        self.create_cluster(name)?;
        self.finish_job(Kind::TerraformCluster, name, Op::Apply, 1, "succeeded")
            .await?;
        self.until_next_action(Kind::TerraformCluster, name, "Idle").await?;
        Ok(())
    }
}

pub fn outputs() -> std::collections::BTreeMap<String, Value> {
    [("endpoint".to_string(), json!("10.0.0.1"))].into()
}

/// The built `kubectl-captf` running as a child process; its stdout is read as it comes. It is
/// killed when dropped.
pub struct Plugin {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Everything it printed on stdout so far.
    pub stdout: String,
    stderr: Arc<Mutex<String>>,
}

impl Plugin {
    pub fn spawn(kubeconfig: &Path, args: &[&str]) -> Result<Plugin> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-captf"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (err, sink) = (child.stderr.take().unwrap(), stderr.clone());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(err).lines() {
                let Ok(line) = line else { return };
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Ok(Plugin {
            child,
            lines,
            stdout: String::new(),
            stderr,
        })
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Read stdout until a line printed from now on satisfies `f` (within WAIT); returns the
    /// text read meanwhile, that line included.
    pub fn until_line(&mut self, what: &str, f: impl Fn(&str) -> bool) -> Result<String> {
        let deadline = Instant::now() + WAIT;
        let mut read = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    read.push_str(&line);
                    read.push('\n');
                    self.stdout.push_str(&line);
                    self.stdout.push('\n');
                    if f(&line) {
                        return Ok(read);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    bail!(
                        "timed out waiting for {what}; read:\n{read}\nstderr:\n{}",
                        self.stderr()
                    )
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    bail!(
                        "the plugin ended before {what}; read:\n{read}\nstderr:\n{}",
                        self.stderr()
                    )
                }
            }
        }
    }

    /// Wait (within WAIT) for the process to end by itself, reading the rest of its stdout.
    pub fn until_exit(&mut self) -> Result<std::process::ExitStatus> {
        let deadline = Instant::now() + WAIT;
        loop {
            while let Ok(line) = self.lines.try_recv() {
                self.stdout.push_str(&line);
                self.stdout.push('\n');
            }
            if let Some(status) = self.child.try_wait()? {
                // The reader thread has seen EOF once the pipe closes: drain what is left.
                while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
                    self.stdout.push_str(&line);
                    self.stdout.push('\n');
                }
                return Ok(status);
            }
            if Instant::now() > deadline {
                bail!(
                    "the plugin did not end; stdout:\n{}\nstderr:\n{}",
                    self.stdout,
                    self.stderr()
                );
            }
            match self.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => {
                    self.stdout.push_str(&line);
                    self.stdout.push('\n');
                }
                Err(_) => continue,
            }
        }
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

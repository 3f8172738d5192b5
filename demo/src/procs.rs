//! The child processes: the real `captf-webhook` and `captf-controller` binaries, found next to
//! this executable, with their logs in files of the demo's work directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("failed to find {name} next to {exe}: build it first (`cargo build -p {name}`)")]
    Missing { name: String, exe: PathBuf },
    #[error("failed to find this executable's directory: {0}")]
    CurrentExe(#[source] std::io::Error),
    #[error("failed to start {what}: {source}")]
    Spawn {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to open the log file {path}: {source}")]
    Log {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} exited before it was ready ({status}); its log: {log}")]
    Exited { what: String, status: String, log: PathBuf },
    #[error("{what} was not ready within {secs}s; its log: {log}")]
    NotReady { what: String, secs: u64, log: PathBuf },
    #[error("failed to find a free port on 127.0.0.1: {0}")]
    Port(#[source] std::io::Error),
}

/// A started child process; killed when dropped.
#[derive(Debug)]
pub struct Proc {
    pub what: String,
    pub log: PathBuf,
    child: Child,
}

impl Proc {
    /// SIGTERM, then SIGKILL after `grace`.
    pub async fn stop(mut self, grace: Duration) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        if tokio::time::timeout(grace, self.child.wait()).await.is_err() {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The exit status, if the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

/// `<dir of this executable>/<name>`.
pub fn sibling(name: &str) -> Result<PathBuf, ProcError> {
    let exe = std::env::current_exe().map_err(ProcError::CurrentExe)?;
    let path = exe
        .parent()
        .map(|d| d.join(name))
        .unwrap_or_else(|| PathBuf::from(name));
    if path.is_file() {
        Ok(path)
    } else {
        Err(ProcError::Missing {
            name: name.to_string(),
            exe,
        })
    }
}

/// A port that was free a moment ago on 127.0.0.1 (for children that do not print theirs).
pub fn free_addr() -> Result<SocketAddr, ProcError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(ProcError::Port)?;
    l.local_addr().map_err(ProcError::Port)
}

fn log_file(path: &Path) -> Result<std::fs::File, ProcError> {
    std::fs::File::create(path).map_err(|source| ProcError::Log {
        path: path.to_path_buf(),
        source,
    })
}

/// The runner policy, which the webhook and the controller must read alike (the same `CAPTF_*`
/// variables, declared once in captf-shared): the demo's runner image is every object's
/// default, and any tag of the runner image may be named, as the examples do. The only place
/// the demo sets it; both children get it.
pub fn runner_policy_env() -> [(&'static str, String); 2] {
    [
        ("CAPTF_RUNNER_IMAGE", crate::real::RUNNER_IMAGE.to_string()),
        (
            "CAPTF_ALLOWED_RUNNER_IMAGE_PREFIXES",
            crate::real::RUNNER_REPOSITORY_TAGS.to_string(),
        ),
    ]
}

/// The webhook on `127.0.0.1:0`; returns it and the address it printed.
pub async fn start_webhook(bin: &Path, cert: &Path, key: &Path, log: PathBuf) -> Result<(Proc, SocketAddr), ProcError> {
    let what = "captf-webhook".to_string();
    let stderr = log_file(&log)?;
    let mut child = Command::new(bin)
        .args(["--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"])
        .arg("--tls-cert-file")
        .arg(cert)
        .arg("--tls-key-file")
        .arg(key)
        .args(["--shutdown-delay", "0s", "--shutdown-grace", "2s"])
        // The simulator serves no SubjectAccessReviews, so the webhook does not ask who may
        // approve (the chart turns the check on); it still records who approved.
        .arg("--authorize-approvals=false")
        .envs(runner_policy_env())
        // The namespaces the demo's controller watches (its CAPTF_NAMESPACE): an object created
        // elsewhere is admitted with a warning.
        .env("CAPTF_WEBHOOK_WATCHED_NAMESPACES", crate::lifecycle::WATCHED.join(","))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ProcError::Spawn {
            what: what.clone(),
            source,
        })?;
    let Some(stdout) = child.stdout.take() else {
        return Err(ProcError::NotReady { what, secs: 0, log });
    };
    let mut lines = BufReader::new(stdout).lines();
    let secs = 15;
    let found = tokio::time::timeout(Duration::from_secs(secs), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(addr) = line.strip_prefix("listening on https://") {
                return addr.trim().parse::<SocketAddr>().ok();
            }
        }
        None
    })
    .await;
    let addr = match found {
        Ok(Some(addr)) => addr,
        Ok(None) => {
            let status = child.wait().await.map(|s| s.to_string()).unwrap_or_default();
            return Err(ProcError::Exited { what, status, log });
        }
        Err(_) => return Err(ProcError::NotReady { what, secs, log }),
    };
    // Keep draining stdout into the log so the child never blocks on a full pipe.
    let log2 = log.clone();
    tokio::spawn(async move {
        let Ok(mut f) = tokio::fs::OpenOptions::new().append(true).open(&log2).await else {
            return;
        };
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = f.write_all(format!("{line}\n").as_bytes()).await;
        }
    });
    Ok((Proc { what, log, child }, addr))
}

/// What a controller child needs.
#[derive(Clone, Debug)]
pub struct ControllerEnv {
    pub kubeconfig: PathBuf,
    pub namespace: String,
    pub sim_url: String,
    pub metrics_addr: SocketAddr,
    pub health_addr: SocketAddr,
    /// More environment for the controller (e.g. leader election's variables).
    pub extra_env: Vec<(String, String)>,
}

/// Start `program args… ` as the controller (every flag through its env var, so the command line
/// is `captf-controller run`), and wait until its health port accepts connections.
pub async fn start_controller(
    program: &Path,
    args: &[&str],
    env: &ControllerEnv,
    log: PathBuf,
) -> Result<Proc, ProcError> {
    let what = format!("{} {}", program.display(), args.join(" "));
    let out = log_file(&log)?;
    let err = out.try_clone().map_err(|source| ProcError::Log {
        path: log.clone(),
        source,
    })?;
    let child = Command::new(program)
        .args(args)
        .env("KUBECONFIG", &env.kubeconfig)
        .env("CAPTF_NAMESPACE", &env.namespace)
        .env("CAPTF_SIM_CLOCK_URL", &env.sim_url)
        .env("CAPTF_METRICS_ADDR", env.metrics_addr.to_string())
        .env("CAPTF_HEALTH_ADDR", env.health_addr.to_string())
        .envs(runner_policy_env())
        .env("CAPTF_CONCURRENCY", "4")
        .envs(env.extra_env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ProcError::Spawn {
            what: what.clone(),
            source,
        })?;
    let mut proc = Proc { what, log, child };
    let secs = 15;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(status) = proc.exited() {
            return Err(ProcError::Exited {
                what: proc.what.clone(),
                status: status.to_string(),
                log: proc.log.clone(),
            });
        }
        if tokio::net::TcpStream::connect(env.health_addr).await.is_ok() {
            return Ok(proc);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(ProcError::NotReady {
                what: proc.what.clone(),
                secs,
                log: proc.log.clone(),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

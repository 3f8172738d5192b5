//! The controller runtime (DESIGN.md §4, §5, §8, §10): kube-rs controllers over the three
//! kinds that carry out the pure core's decisions against the API.
//!
//! | module | what |
//! | --- | --- |
//! | [`kinds`] | one trait over TerraformCluster / TerraformMachinePool / TerraformMachine |
//! | [`controller`] | the three `Controller`s, the shared context and the reconcile pass |
//! | [`clock`] | system time, or the simulator's clock (whose jumps re-reconcile everything) |
//! | [`gather`] | the reads of one pass: Jobs, pods and members from reflector stores; Secrets, lock Lease, holder pod live |
//! | [`book`] | bookkeeping exactly once per Job, outputs and Cluster API fields, pruning |
//! | [`leases`] | run lease and cluster lease |
//! | [`job`] | the PURE Job builder |
//! | [`inputs`] | the durable inputs Secret |
//! | [`status`] | conditions, nextAction, activeJob: the status patch |
//! | [`deletion`] | the finalizer |
//! | [`pause`], [`state`] | live reads of the owning Cluster's pause and of the state Secret |
//! | [`events`] | Events stamped with the controller's clock |
//! | [`interrupted`] | an apply Job deleted while it ran: the live reads |
//! | [`metrics`], [`http`] | `/metrics`, `/healthz`, `/readyz` |
//! | [`leader`] | leader election |
//! | [`errors`] | typed errors with a category |

pub mod book;
pub mod clock;
pub mod controller;
pub mod deletion;
pub mod errors;
pub mod events;
pub mod gather;
pub mod http;
pub mod inputs;
pub mod interrupted;
pub mod job;
pub mod kinds;
pub mod leader;
pub mod leases;
pub mod metrics;
pub mod pause;
pub mod state;
pub mod status;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::sync::watch;

use clock::{SharedClock, SystemClock, WatchClock};
pub use controller::{Config, Ctx, run_controllers};

/// The flags of `captf-controller run` (each with an env var).
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// Watch one namespace (default, or empty as clusterctl passes it: all namespaces).
    #[arg(long, visible_alias = "watch-namespace", env = "CAPTF_NAMESPACE")]
    pub namespace: Option<String>,
    /// The runner image of Jobs whose spec.jobs.image is unset.
    #[arg(long, env = "CAPTF_RUNNER_IMAGE", default_value = concat!("ghcr.io/captf/runner:", env!("CARGO_PKG_VERSION")))]
    pub runner_image: String,
    /// The service account of runner pods whose spec.jobs.serviceAccountName is unset (the chart's
    /// `captf-runner`, which may touch only state Secrets and lock Leases); empty: the namespace's default.
    #[arg(long, env = "CAPTF_RUNNER_SERVICE_ACCOUNT", default_value = "captf-runner")]
    pub runner_service_account: String,
    /// Where /metrics is served.
    #[arg(long, env = "CAPTF_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Where /healthz and /readyz are served.
    #[arg(long, env = "CAPTF_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    pub health_addr: SocketAddr,
    /// Elect a leader through the Lease captf-controller-leader; only the leader writes.
    #[arg(long, env = "CAPTF_LEADER_ELECT", default_value_t = false)]
    pub leader_elect: bool,
    /// The namespace of the leader Lease (default: POD_NAMESPACE, else --namespace, else default).
    #[arg(long, env = "CAPTF_LEADER_NAMESPACE")]
    pub leader_namespace: Option<String>,
    /// Leader lease duration in seconds (the leader renews every third of it).
    #[arg(long, env = "CAPTF_LEADER_LEASE_SECONDS", default_value_t = 15, hide = true)]
    pub leader_lease_seconds: u64,
    /// Identity in leader election (default: POD_NAME, else captf-controller-<pid>).
    #[arg(long, env = "CAPTF_LEADER_IDENTITY", hide = true)]
    pub leader_identity: Option<String>,
    /// Objects reconciled at the same time, per kind.
    #[arg(long, env = "CAPTF_CONCURRENCY", default_value_t = 8)]
    pub concurrency: u16,
    /// Log format.
    #[arg(long, env = "CAPTF_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Test and demo only: follow the simulator's clock at this URL (`http://127.0.0.1:port`).
    #[arg(long, env = "CAPTF_SIM_CLOCK_URL", hide = true)]
    pub sim_clock_url: Option<String>,
}

impl RunArgs {
    /// The one namespace to watch; `None` (all namespaces) when `--namespace` is unset or empty.
    pub fn watch_namespace(&self) -> Option<String> {
        self.namespace.clone().filter(|n| !n.is_empty())
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("failed to build a Kubernetes client (KUBECONFIG or in-cluster config): {0}")]
    Client(#[source] kube::Error),
    #[error(transparent)]
    Clock(#[from] clock::ClockError),
    #[error(transparent)]
    Bind(#[from] http::BindError),
    #[error("failed to wait for SIGTERM: {0}")]
    Signal(#[source] std::io::Error),
}

/// Initialise logging per `--log-format` (RUST_LOG filters; default info).
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = match format {
        LogFormat::Json => b.json().try_init(),
        LogFormat::Text => b.try_init(),
    };
}

/// A running runtime (for tests and the process).
pub struct Handle {
    pub metrics_addr: SocketAddr,
    pub health_addr: SocketAddr,
    pub metrics: Arc<metrics::Metrics>,
    pub ready: Arc<AtomicBool>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    elector: Option<tokio::task::JoinHandle<()>>,
}

impl Handle {
    /// Graceful shutdown: stop taking work, let writes in flight finish.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    /// Stop at once (a crash, for restart tests): in-flight reconciles are dropped.
    pub fn abort(self) {
        // Like a crash: the leader Lease is not given up; a standby waits for it to lapse.
        if let Some(e) = &self.elector {
            e.abort();
        }
        let _ = self.stop.send(true);
        self.task.abort();
    }
}

/// Start the runtime with a client and a clock.
pub async fn start(client: kube::Client, args: &RunArgs, clock: SharedClock) -> Result<Handle, RunError> {
    let metrics = Arc::new(metrics::Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    let leader = Arc::new(AtomicBool::new(!args.leader_elect));
    let (stop, stop_rx) = watch::channel(false);
    let metrics_addr = http::serve(
        args.metrics_addr,
        http::metrics_router(metrics.clone()),
        stop_rx.clone(),
    )
    .await?;
    let health_addr = http::serve(args.health_addr, http::health_router(ready.clone()), stop_rx.clone()).await?;
    let mut elector = None;
    if args.leader_elect {
        let ns = args
            .leader_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .or_else(|| args.watch_namespace())
            .unwrap_or_else(|| "default".into());
        let me = args
            .leader_identity
            .clone()
            .or_else(|| std::env::var("POD_NAME").ok())
            .unwrap_or_else(|| format!("captf-controller-{}", std::process::id()));
        let duration = Duration::from_secs(args.leader_lease_seconds.max(1));
        elector = Some(tokio::spawn(leader::run(
            client.clone(),
            ns,
            me,
            duration,
            leader.clone(),
            stop_rx.clone(),
        )));
    }
    let config = Config {
        namespace: args.watch_namespace(),
        runner_image: args.runner_image.clone(),
        runner_service_account: Some(args.runner_service_account.clone()),
        concurrency: args.concurrency,
    };
    let (ctx, feeds) = Ctx::new(client, config, clock, metrics.clone(), leader);
    let task = tokio::spawn(run_controllers(Arc::new(ctx), feeds, stop_rx, ready.clone()));
    Ok(Handle {
        metrics_addr,
        health_addr,
        metrics,
        ready,
        stop,
        task,
        elector,
    })
}

/// `captf-controller run`: the process (client from KUBECONFIG or in-cluster), until SIGTERM
/// or Ctrl-C.
pub async fn run(args: RunArgs) -> Result<(), RunError> {
    init_logging(args.log_format);
    let client = kube::Client::try_default().await.map_err(RunError::Client)?;
    let clock: SharedClock = match &args.sim_clock_url {
        Some(url) => Arc::new(WatchClock::from_sim_url(client.clone(), url, Duration::from_millis(100)).await?),
        None => Arc::new(SystemClock),
    };
    let handle = start(client, &args, clock).await?;
    tracing::info!(metrics = %handle.metrics_addr, health = %handle.health_addr, "captf-controller running");
    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(RunError::Signal)?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
    handle.shutdown().await;
    Ok(())
}

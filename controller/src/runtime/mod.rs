//! The controller runtime (docs/rules.md, docs/operating.md): kube-rs controllers over the three
//! kinds that carry out the decisions of the pure core (`captf-core`) against the API. How one
//! object is read is `captf-read`'s; this module runs the passes and makes the writes.
//!
//! | module | what |
//! | --- | --- |
//! | [`controller`] | the three `Controller`s and the reconcile pass, over the caches' source of `captf_read::source::read` |
//! | [`ctx`] | what every pass shares: configuration, client, clock, caches, metrics, events, simulated wakes |
//! | [`clock`] | system time, or the simulator's clock (whose jumps re-reconcile everything) |
//! | [`gather`] | the reflector stores: an object's Jobs and pods, a cluster's members and their Jobs |
//! | [`book`] | the writes of booking, exactly once per Job; outputs and Cluster API fields, pruning |
//! | [`leases`] | run lease and cluster lease |
//! | [`inputs`] | writing the durable inputs Secret |
//! | [`identity`] | each object's runner ServiceAccount and Role, its pre-created state objects |
//! | [`deletion`] | the finalizer, the block-move annotation, a used request removed |
//! | [`owners`] | metadata watches of the Cluster API owners that wake their objects |
//! | [`events`] | Events stamped with the controller's clock |
//! | [`notifications`] | what is worth a notification, from what a pass booked or found (pure) |
//! | [`notifiers`] | the notification targets (cluster-wide and per namespace) and sending, which never waits |
//! | [`flags`] | the flags of `captf-controller run` and their parsers |
//! | [`interrupted`] | an apply Job deleted while it ran: the live reads and the record |
//! | [`metrics`], [`http`] | `/metrics`, `/healthz`, `/readyz` |
//! | [`metrics_auth`] | who may read `/metrics` (`--metrics-auth`): TokenReview, SubjectAccessReview, a short cache |
//! | [`leader`] | leader election |
//! | [`retry`] | per-object exponential backoff with jitter after a failed pass |
//! | [`slots`] | runner slots: the one admission point of Job starts under the limits, the queue, its wakes |
//! | [`stored`] | what the stores keep of a Job and a pod: metadata and the status a pass reads |

pub mod book;
pub mod clock;
pub mod controller;
pub mod ctx;
pub mod deletion;
pub mod events;
pub mod flags;
pub mod gather;
pub mod http;
pub mod identity;
pub mod inputs;
pub mod interrupted;
pub mod leader;
pub mod leases;
mod locking;
pub mod metrics;
pub mod metrics_auth;
pub mod notifications;
pub mod notifiers;
pub mod owners;
pub mod plan_policies;
pub mod retry;
pub mod slots;
pub mod stored;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::sync::watch;

use clock::{SharedClock, SystemClock};
pub use controller::run_controllers;
pub use ctx::{Config, Ctx};
pub use flags::{Annotations, LogFormat, Quantities, RunArgs, parse_annotations, parse_namespace, parse_quantities};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("failed to build a Kubernetes client (KUBECONFIG or in-cluster config): {0}")]
    Client(#[source] kube::Error),
    #[error(transparent)]
    Clock(#[from] captf_read::sim_clock::ClockError),
    #[error(transparent)]
    Bind(#[from] http::BindError),
    #[error("failed to wait for SIGTERM: {0}")]
    Signal(#[source] std::io::Error),
    #[error(transparent)]
    Selector(#[from] captf_core::sharding::SelectorError),
    #[error("--watch-label-selector/--watch-filter {selector:?}: the API server refuses it: {source}")]
    SelectorRefused {
        selector: String,
        #[source]
        source: kube::Error,
    },
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
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    elector: Option<tokio::task::JoinHandle<()>>,
}

impl Handle {
    /// Reconcile passes running now.
    pub fn reconciles_in_flight(&self) -> usize {
        self.in_flight.load(std::sync::atomic::Ordering::SeqCst)
    }

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
    let selector = captf_core::sharding::object_selector(&args.watch_label_selector, &args.watch_filter)?;
    if let Some(s) = &selector {
        check_selector(&client, args.watch_namespaces().first().map(String::as_str), s).await?;
    }
    // The API server took it; the controller reads it too, to check each object it reads live.
    let served = selector
        .as_deref()
        .map(captf_core::sharding::ObjectSelector::parse)
        .transpose()?;
    let metrics = Arc::new(metrics::Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    let leader = Arc::new(AtomicBool::new(!args.leader_elect));
    metrics.leader.set(i64::from(!args.leader_elect));
    let (terms_tx, terms) = watch::channel(0u64);
    let (stop, stop_rx) = watch::channel(false);
    let metrics_router = match args.metrics_auth {
        metrics_auth::MetricsAuth::None => http::metrics_router(metrics.clone()),
        metrics_auth::MetricsAuth::Kubernetes => metrics_auth::guard(
            http::metrics_router(metrics.clone()),
            Arc::new(metrics_auth::Authorizer::new(metrics_auth::KubeReviewer::new(
                client.clone(),
            ))),
        ),
    };
    let metrics_addr = http::serve(args.metrics_addr, metrics_router, stop_rx.clone()).await?;
    let health_addr = http::serve(args.health_addr, http::health_router(ready.clone()), stop_rx.clone()).await?;
    let mut elector = None;
    if args.leader_elect {
        let ns = args
            .leader_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .or_else(|| args.watch_namespaces().into_iter().next())
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
            captf_core::sharding::leader_lease_name(selector.as_deref()),
            me,
            duration,
            leader::Signals {
                leader: leader.clone(),
                gauge: metrics.leader.clone(),
                terms: terms_tx,
            },
            stop_rx.clone(),
        )));
    }
    // One set of controllers per watched namespace (each with its own caches, watches and
    // wakes), or one over all namespaces; they share the client, clock, metrics and leadership.
    let namespaces: Vec<Option<String>> = match args.watch_namespaces() {
        all if all.is_empty() => vec![None],
        some => some.into_iter().map(Some).collect(),
    };
    // Read once for every namespace; a target that cannot be used is left out, never fatal.
    let notifications = Arc::new(
        notifiers::Notifications::start(
            &client,
            &args.notification_targets_file,
            &args.notification_secrets_namespace,
            args.namespace_notification_targets,
            args.notify_after_failures,
            &metrics,
            clock.clone(),
        )
        .await,
    );
    let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // One admission point for every watched namespace: the controller-wide limit spans them.
    let slots = Arc::new(slots::Slots::new(args.runner_slots()));
    let mut runs = vec![];
    let mut synced = vec![];
    for namespace in namespaces {
        let config = Config {
            namespace,
            runner_image: args.policy.runner_image.clone(),
            runner_service_account: Some(args.policy.runner_service_account.clone()),
            runner_account_annotations: args.runner_service_account_annotations.0.clone(),
            concurrency: args.concurrency,
            policy: args.policy.to_policy(),
            runner_pod: args.runner_pod(),
            selector: selector.clone(),
            served: served.clone(),
            instance: captf_core::sharding::leader_lease_name(selector.as_deref()),
            plan_policies_dir: Some(args.plan_policies_dir.trim())
                .filter(|d| !d.is_empty())
                .map(std::path::PathBuf::from),
        };
        let (mut ctx, feeds) = Ctx::new(
            client.clone(),
            config,
            clock.clone(),
            metrics.clone(),
            leader.clone(),
            terms.clone(),
        );
        ctx.in_flight = in_flight.clone();
        slots.register(ctx.caches.running());
        ctx.slots = slots.clone();
        ctx.notifications = notifications.clone();
        let ns_ready = Arc::new(AtomicBool::new(false));
        synced.push(ns_ready.clone());
        runs.push(run_controllers(Arc::new(ctx), feeds, stop_rx.clone(), ns_ready));
    }
    let task = tokio::spawn(run_all(runs, synced, ready.clone(), stop_rx));
    Ok(Handle {
        metrics_addr,
        health_addr,
        metrics,
        ready,
        in_flight,
        stop,
        task,
        elector,
    })
}

/// Asks the API server whether it takes `selector` (one list of at most one Job with it): a
/// selector it refuses would fail every watch, so the controller stops at once and says why.
async fn check_selector(client: &kube::Client, namespace: Option<&str>, selector: &str) -> Result<(), RunError> {
    let jobs: kube::Api<k8s_openapi::api::batch::v1::Job> = match namespace {
        Some(n) => kube::Api::namespaced(client.clone(), n),
        None => kube::Api::all(client.clone()),
    };
    match jobs
        .list_metadata(&kube::api::ListParams::default().labels(selector).limit(1))
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 400 => Err(RunError::SelectorRefused {
            selector: selector.to_string(),
            source: kube::Error::Api(e),
        }),
        // Anything else (a 403, an unreachable server) is for the watches to retry and report.
        _ => Ok(()),
    }
}

/// Run every namespace's controllers until they stop; `ready` turns true once every one of
/// them has listed its stores once.
async fn run_all(
    runs: Vec<impl std::future::Future<Output = ()>>,
    synced: Vec<Arc<AtomicBool>>,
    ready: Arc<AtomicBool>,
    mut stop: watch::Receiver<bool>,
) {
    let all_synced = async move {
        tokio::select! {
            () = async {
                while !synced.iter().all(|s| s.load(std::sync::atomic::Ordering::SeqCst)) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                ready.store(true, std::sync::atomic::Ordering::SeqCst);
            } => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    };
    futures::join!(futures::future::join_all(runs), all_synced);
}

/// `captf-controller run`: the process (client from KUBECONFIG or in-cluster), until SIGTERM
/// or Ctrl-C, on the system clock. The binary has no way to take another clock: one served over
/// HTTP could be moved by whoever reaches it.
pub async fn run(args: RunArgs) -> Result<(), RunError> {
    run_with_sim_clock(args, None).await
}

/// [`run`], following the simulator's clock at `sim_clock_url` (`http://127.0.0.1:port`) when
/// given: for the demo's `captf-controller-sim` and the scale bench, which run the controller
/// against the simulator. Never reachable from the `captf-controller` binary.
pub async fn run_with_sim_clock(args: RunArgs, sim_clock_url: Option<&str>) -> Result<(), RunError> {
    init_logging(args.log_format);
    let client = kube::Client::try_default().await.map_err(RunError::Client)?;
    let clock: SharedClock = match sim_clock_url {
        Some(url) => Arc::new(clock::WatchClock::from_sim_url(client.clone(), url, Duration::from_millis(100)).await?),
        None => Arc::new(SystemClock),
    };
    let handle = start(client, &args, clock).await?;
    tracing::info!(
        metrics = %handle.metrics_addr,
        metrics_auth = ?args.metrics_auth,
        health = %handle.health_addr,
        "captf-controller running"
    );
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

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
pub mod gather;
pub mod http;
pub mod identity;
pub mod inputs;
pub mod interrupted;
pub mod leader;
pub mod leases;
pub mod metrics;
pub mod metrics_auth;
pub mod owners;
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

/// The flags of `captf-controller run` (each with an env var).
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// The namespaces to watch: repeat the flag or separate them with commas (`--namespace a,b`).
    /// None, or only empty values as clusterctl passes them (`--namespace=""`): all namespaces.
    #[arg(
        long,
        visible_alias = "watch-namespace",
        env = "CAPTF_NAMESPACE",
        value_delimiter = ',',
        value_parser = parse_namespace
    )]
    pub namespace: Vec<String>,
    // The runner image and service account (`--runner-image`, `--runner-service-account`) and
    // what tenants may choose for runner pods: the webhook's flags, declared once in captf-shared,
    // so both read the same values into the same policy (`TenantPolicyArgs::to_policy`).
    #[command(flatten)]
    pub policy: captf_shared::policy::TenantPolicyArgs,
    /// Annotations of every object's own runner ServiceAccount (`key=value,...`), for workload
    /// identity (e.g. `eks.amazonaws.com/role-arn=arn:aws:iam::1:role/tf`); set again before each
    /// Job. Values may not contain commas.
    #[arg(long, env = "CAPTF_RUNNER_SERVICE_ACCOUNT_ANNOTATIONS", default_value = "", value_parser = parse_annotations)]
    pub runner_service_account_annotations: Annotations,
    /// Where /metrics is served.
    #[arg(long, env = "CAPTF_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Who may read /metrics. `none`: anyone who reaches --metrics-addr (the metrics name every
    /// object). `kubernetes`: a bearer token the API server authenticates (TokenReview) and
    /// authorizes for get on the non-resource URL /metrics (SubjectAccessReview); else 401 or 403.
    #[arg(long, env = "CAPTF_METRICS_AUTH", value_enum, default_value_t = metrics_auth::MetricsAuth::None)]
    pub metrics_auth: metrics_auth::MetricsAuth,
    /// Where /healthz and /readyz are served.
    #[arg(long, env = "CAPTF_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    pub health_addr: SocketAddr,
    /// Serve only the objects whose labels match this Kubernetes label selector
    /// (`sharding.captf.io/key=shard-1` on a shard, `!sharding.captf.io/key` on the instance that
    /// serves the rest; docs/operating.md "Sharding"). Empty: every object.
    #[arg(long, env = "CAPTF_WATCH_LABEL_SELECTOR", default_value = "", value_parser = captf_shared::policy::parse_flag_text)]
    pub watch_label_selector: String,
    /// Cluster API's convention: serve only the objects labelled
    /// cluster.x-k8s.io/watch-filter=<value> (with --watch-label-selector too, when both are set).
    /// Empty, or `""` as clusterctl passes an unset variable: no filter.
    #[arg(long, env = "CAPTF_WATCH_FILTER", default_value = "", value_parser = captf_shared::policy::parse_flag_text)]
    pub watch_filter: String,
    /// Elect a leader through the Lease captf-controller-leader (with a selector, a Lease of that
    /// selector's own: captf-controller-leader-<hash>); only the leader writes.
    #[arg(long, env = "CAPTF_LEADER_ELECT", default_value_t = false)]
    pub leader_elect: bool,
    /// The namespace of the leader Lease (default: POD_NAMESPACE, else the first --namespace, else
    /// default).
    #[arg(long, env = "CAPTF_LEADER_NAMESPACE")]
    pub leader_namespace: Option<String>,
    /// Leader lease duration in seconds (the leader renews every third of it).
    #[arg(long, env = "CAPTF_LEADER_LEASE_SECONDS", default_value_t = 15, hide = true)]
    pub leader_lease_seconds: u64,
    /// Identity in leader election (default: POD_NAME, else captf-controller-<pid>).
    #[arg(long, env = "CAPTF_LEADER_IDENTITY", hide = true)]
    pub leader_identity: Option<String>,
    /// Objects reconciled at the same time, per kind (and per watched namespace).
    #[arg(long, env = "CAPTF_CONCURRENCY", default_value_t = 8)]
    pub concurrency: u16,
    /// Runner Jobs running at once in all namespaces together; an object due to start one
    /// beyond it waits (Ready=False/Queued, docs/rules.md "Runner slots"). 0: no limit.
    #[arg(long, env = "CAPTF_MAX_RUNNING_JOBS", default_value_t = 0)]
    pub max_running_jobs: u32,
    /// Runner Jobs running at once in one namespace; an object due to start one beyond it
    /// waits (Ready=False/Queued). 0: no limit.
    #[arg(long, env = "CAPTF_MAX_RUNNING_JOBS_PER_NAMESPACE", default_value_t = 10)]
    pub max_running_jobs_per_namespace: u32,
    /// Log format.
    #[arg(long, env = "CAPTF_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Resource requests of runner pods (`cpu=100m,memory=256Mi`); a resource spec.jobs.resources
    /// names replaces its default. Empty: none.
    #[arg(long, env = "CAPTF_RUNNER_REQUESTS", default_value = "cpu=100m,memory=256Mi", value_parser = parse_quantities)]
    pub runner_requests: Quantities,
    /// Resource limits of runner pods (`memory=2Gi`). Empty: none.
    #[arg(long, env = "CAPTF_RUNNER_LIMITS", default_value = "memory=2Gi", value_parser = parse_quantities)]
    pub runner_limits: Quantities,
    /// sizeLimit of the runner's work emptyDir (providers, modules, plans). Empty: none.
    #[arg(long, env = "CAPTF_RUNNER_WORK_SIZE_LIMIT", default_value = "4Gi")]
    pub runner_work_size_limit: String,
    /// sizeLimit of the runner's /tmp emptyDir. Empty: none.
    #[arg(long, env = "CAPTF_RUNNER_TMP_SIZE_LIMIT", default_value = "1Gi")]
    pub runner_tmp_size_limit: String,
    /// A ConfigMap, in each object's namespace, holding the Terraform CLI configuration of runner
    /// pods whose spec.jobs.terraformCliConfig is unset (provider mirrors). Empty: none. While it
    /// or its key is missing, such objects get Ready=False/RunnerConfigUnavailable and no Job.
    #[arg(long, env = "CAPTF_RUNNER_TERRAFORM_CLI_CONFIG", default_value = "")]
    pub runner_terraform_cli_config: String,
    /// The key of --runner-terraform-cli-config holding the configuration.
    #[arg(long, env = "CAPTF_RUNNER_TERRAFORM_CLI_CONFIG_KEY", default_value = "terraform.rc")]
    pub runner_terraform_cli_config_key: String,
}

/// `name=quantity` pairs of a resource list.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Quantities(pub std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>);

/// `key=value` annotations of a flag.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Annotations(pub std::collections::BTreeMap<String, String>);

/// Parse `key=value,key2=value2` (empty: none); keys are checked as Kubernetes checks annotation
/// keys (an optional DNS subdomain prefix and a name of at most 63 characters).
pub fn parse_annotations(s: &str) -> Result<Annotations, String> {
    let mut out = std::collections::BTreeMap::new();
    for pair in captf_shared::policy::flag_text(s)
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let (k, v) = pair.split_once('=').ok_or_else(|| {
            format!("{pair:?} is not key=value (e.g. eks.amazonaws.com/role-arn=arn:aws:iam::1:role/tf)")
        })?;
        let k = k.trim();
        let (prefix, name) = match k.rsplit_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, k),
        };
        let name_ok = !name.is_empty()
            && name.len() <= 63
            && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !name_ok || prefix.is_some_and(|p| !captf_shared::names::is_dns1123_subdomain(p)) {
            return Err(format!("{k:?} is not a valid annotation key"));
        }
        out.insert(k.to_string(), v.trim().to_string());
    }
    Ok(Annotations(out))
}

/// One `--namespace` value: a namespace name (a DNS-1123 label), blanks around it ignored; empty
/// is kept, and so is `""` (clusterctl passes `--namespace=""` for all namespaces).
pub fn parse_namespace(s: &str) -> Result<String, String> {
    let n = captf_shared::policy::flag_text(s).trim();
    if n.is_empty() || captf_shared::names::is_dns1123_label(n) {
        Ok(n.to_string())
    } else {
        Err(format!(
            "{n:?} is not a namespace name (lowercase letters, digits and '-', at most 63, starting and ending with a letter or digit)"
        ))
    }
}

/// Parse `cpu=100m,memory=256Mi` (empty: none).
pub fn parse_quantities(s: &str) -> Result<Quantities, String> {
    let mut out = std::collections::BTreeMap::new();
    for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?} is not name=quantity (e.g. memory=256Mi)"))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '.') {
            return Err(format!("{pair:?} is not name=quantity (e.g. memory=256Mi)"));
        }
        out.insert(
            k.to_string(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.to_string()),
        );
    }
    Ok(Quantities(out))
}

impl RunArgs {
    /// The limits on running runner Jobs of the flags (0: none).
    pub fn runner_slots(&self) -> captf_core::queue::Limits {
        captf_core::queue::Limits::from_flags(self.max_running_jobs, self.max_running_jobs_per_namespace)
    }

    /// The runner pods' defaults of the flags.
    pub fn runner_pod(&self) -> captf_core::job::RunnerPodDefaults {
        let q = |s: &str| {
            let s = s.trim();
            (!s.is_empty()).then(|| k8s_openapi::apimachinery::pkg::api::resource::Quantity(s.to_string()))
        };
        captf_core::job::RunnerPodDefaults {
            requests: self.runner_requests.0.clone(),
            limits: self.runner_limits.0.clone(),
            work_size_limit: q(&self.runner_work_size_limit),
            tmp_size_limit: q(&self.runner_tmp_size_limit),
            terraform_cli_config: Some(self.runner_terraform_cli_config.trim())
                .filter(|n| !n.is_empty())
                .map(|name| captf_shared::types::CliConfigRef {
                    name: name.to_string(),
                    key: Some(self.runner_terraform_cli_config_key.trim())
                        .filter(|k| !k.is_empty())
                        .map(str::to_string),
                }),
        }
    }
}

impl RunArgs {
    /// The flags of `captf-controller run` (without the subcommand), parsed exactly as the binary
    /// parses them: every flag not given takes its default or its `CAPTF_*` environment variable.
    /// For programs that embed the runtime ([`start`]) and for checking the arguments a manifest
    /// passes; the one place a `RunArgs` is built, so a new flag needs no change anywhere else.
    pub fn from_flags<I, T>(flags: I) -> Result<RunArgs, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString>,
    {
        #[derive(clap::Parser)]
        #[command(name = "captf-controller run")]
        struct Run {
            #[command(flatten)]
            run: RunArgs,
        }
        let argv = std::iter::once(std::ffi::OsString::from("run")).chain(flags.into_iter().map(Into::into));
        <Run as clap::Parser>::try_parse_from(argv).map(|r| r.run)
    }

    /// The namespaces to watch, in the order given, each once; empty (all namespaces) when
    /// `--namespace` is unset or names only empty values.
    pub fn watch_namespaces(&self) -> Vec<String> {
        let mut out: Vec<String> = vec![];
        for n in self.namespace.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
            if !out.iter().any(|o| o == n) {
                out.push(n.to_string());
            }
        }
        out
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

#[cfg(test)]
mod quantity_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn runner_account_annotations_parse_as_key_value_pairs_with_valid_keys() {
        let a = parse_annotations(
            "eks.amazonaws.com/role-arn=arn:aws:iam::1:role/tf, azure.workload.identity/client-id=abc",
        )
        .unwrap();
        assert_eq!(a.0["eks.amazonaws.com/role-arn"], "arn:aws:iam::1:role/tf");
        assert_eq!(a.0["azure.workload.identity/client-id"], "abc");
        assert_eq!(parse_annotations("").unwrap(), Annotations::default());
        assert_eq!(
            parse_annotations("\"\"").unwrap(),
            Annotations::default(),
            "as clusterctl leaves it"
        );
        for bad in ["no-equals", "=v", "Bad_Prefix!/x=1", "x/-bad=1"] {
            assert!(parse_annotations(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn resource_flags_are_name_quantity_pairs_and_a_bad_pair_is_named() {
        let q = parse_quantities("cpu=100m, memory=256Mi").unwrap();
        assert_eq!(q.0["cpu"].0, "100m");
        assert_eq!(q.0["memory"].0, "256Mi");
        assert!(parse_quantities("").unwrap().0.is_empty());
        let e = parse_quantities("memory").unwrap_err();
        assert!(e.contains("\"memory\""), "{e}");
        assert!(parse_quantities("memory=1 Gi; rm").is_err());
    }
}

#[cfg(test)]
mod namespace_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn watched(flags: &[&str]) -> Vec<String> {
        let argv = std::iter::once("captf-controller").chain(flags.iter().copied());
        Cli::try_parse_from(argv).unwrap().run.watch_namespaces()
    }

    #[test]
    fn watch_filter_and_label_selector_read_the_quotes_clusterctl_leaves_as_empty() {
        let parse = |flags: &[&str]| {
            let argv = std::iter::once("captf-controller").chain(flags.iter().copied());
            let run = Cli::try_parse_from(argv).unwrap().run;
            captf_core::sharding::object_selector(&run.watch_label_selector, &run.watch_filter).unwrap()
        };
        assert_eq!(parse(&["--watch-filter=\"\"", "--watch-label-selector=\"\""]), None);
        assert_eq!(
            parse(&["--watch-filter=team-a"]),
            Some("cluster.x-k8s.io/watch-filter=team-a".to_string())
        );
    }

    #[test]
    fn namespace_flag_may_be_repeated_and_comma_separated() {
        assert_eq!(watched(&["--namespace", "team-a"]), ["team-a"]);
        assert_eq!(watched(&["--namespace=team-a,team-b"]), ["team-a", "team-b"]);
        assert_eq!(
            watched(&["--namespace", "team-a", "--watch-namespace", "team-b,team-c"]),
            ["team-a", "team-b", "team-c"]
        );
        // Order kept, each once, blanks around names ignored.
        assert_eq!(watched(&["--namespace= team-b , team-a,team-b"]), ["team-b", "team-a"]);
    }

    #[test]
    fn a_namespace_flag_that_is_not_a_namespace_name_is_refused_naming_it() {
        for bad in ["Team-A", "team_a", "-team", "a/b", &"n".repeat(64)] {
            let flag = format!("--namespace={bad}");
            let argv = ["captf-controller", flag.as_str()];
            let err = Cli::try_parse_from(argv)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.contains(&format!("{bad:?} is not a namespace name")),
                "{bad}: {err}"
            );
        }
        let argv = ["captf-controller", "--namespace=team-a,Bad"];
        assert!(Cli::try_parse_from(argv).is_err(), "one bad name in a list is refused");
        assert_eq!(watched(&["--namespace", &"n".repeat(63)]), ["n".repeat(63)]);
    }

    #[test]
    fn namespace_flag_unset_or_empty_watches_all_namespaces() {
        assert!(watched(&[]).is_empty());
        assert!(watched(&["--namespace="]).is_empty());
        // As clusterctl's components pass it with CAPTF_WATCH_NAMESPACE at its default.
        assert!(watched(&["--namespace=\"\""]).is_empty());
        assert!(watched(&["--namespace", ""]).is_empty());
        assert!(watched(&["--namespace=,"]).is_empty());
    }

    /// clap reads `CAPTF_NAMESPACE` from the process's environment, which a test cannot set
    /// without `unsafe`: this test runs its own binary again with the variable set.
    #[test]
    fn namespace_env_var_is_comma_separated_like_the_flag() {
        const EXPECT: &str = "CAPTF_TEST_EXPECTED_NAMESPACES";
        if let Ok(expect) = std::env::var(EXPECT) {
            assert_eq!(watched(&[]).join(","), expect);
            return;
        }
        let me = "runtime::namespace_tests::namespace_env_var_is_comma_separated_like_the_flag";
        for (value, expect) in [
            ("team-a", "team-a"),
            ("team-a,team-b", "team-a,team-b"),
            (" a , ,b,a", "a,b"),
            ("", ""),
        ] {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([me, "--exact", "--test-threads=1"])
                .env("CAPTF_NAMESPACE", value)
                .env(EXPECT, expect)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("1 passed"),
                "CAPTF_NAMESPACE={value:?}: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[cfg(test)]
mod clock_flag_tests {
    /// Whoever could serve the URL of `--sim-clock-url` could move the controller's clock (start
    /// drift checks and retries early, or never): a controller built as it ships has no such flag,
    /// so passing it is an error, not a hidden switch.
    #[test]
    fn a_shipped_controller_refuses_the_simulator_clock_flag() {
        let err = super::RunArgs::from_flags(["--sim-clock-url", "http://127.0.0.1:9"])
            .err()
            .unwrap_or_else(|| panic!("--sim-clock-url was accepted"));
        assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument, "{err}");
    }
}

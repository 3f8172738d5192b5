//! What every reconcile pass shares: the configuration from the flags, the client, the clock,
//! the caches, the metrics and the event publisher, and the schedule of simulated wakes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use tokio::sync::watch;

use captf_core::ident::Ident;
use captf_core::wake::{Schedule, Wake};
use captf_shared::Kind;
use captf_shared::policy::TenantPolicy;

use super::clock::SharedClock;
use super::events::{Emission, Events};
use super::gather::{self, Caches, Feeds};
use super::locking::lock;
use super::metrics::Metrics;
use super::notifications::{self, Happened};
use super::notifiers::Notifications;
use super::retry::{ErrorBackoff, ObjectKey};
use super::slots::Slots;

/// Requeue while the stores have not listed once, or lag the live status (they usually catch up
/// within milliseconds, and the Job's own watch event triggers the object before this).
pub const SYNC_REQUEUE: Duration = Duration::from_millis(250);

/// How the runtime is configured (from the flags).
#[derive(Clone, Debug)]
pub struct Config {
    /// Watch one namespace, or all when `None`.
    pub namespace: Option<String>,
    pub runner_image: String,
    /// The runner pods' service account when `spec.jobs.serviceAccountName` is unset.
    pub runner_service_account: Option<String>,
    /// Annotations of every object's own runner ServiceAccount (workload identity).
    pub runner_account_annotations: std::collections::BTreeMap<String, String>,
    pub concurrency: u16,
    /// What a spec may choose for its runner pods (checked before every Job).
    pub policy: TenantPolicy,
    /// Resources and emptyDir size limits of runner pods, unless the spec says otherwise.
    pub runner_pod: captf_core::job::RunnerPodDefaults,
    /// Serve only the objects this label selector matches (`captf_core::sharding`); `None`: all.
    pub selector: Option<String>,
    /// The same selector, read: each pass checks the object it read live against it.
    pub served: Option<captf_core::sharding::ObjectSelector>,
    /// This instance's name among the instances serving a part of the objects (its leader
    /// Lease's name, the same on every replica): what its claims on run leases say.
    pub instance: String,
    /// The platform's policies on plans (`plan_policies`), when a directory is given.
    pub plan_policies_dir: Option<std::path::PathBuf>,
}

/// How many changed clusters the members' controllers may fall behind by; one that falls further
/// behind misses some, whose members see the change at their next look (at most the 30 s of a
/// wait for inputs, else the drift check).
const EXPORTS_CHANGED_CAPACITY: usize = 1024;

/// What every reconcile shares.
pub struct Ctx {
    pub client: kube::Client,
    pub config: Config,
    pub clock: SharedClock,
    pub metrics: Arc<Metrics>,
    pub events: Events,
    /// True while this replica may write (leader election, or always without it).
    pub leader: Arc<AtomicBool>,
    /// Counts the terms this replica began as the leader.
    pub terms: watch::Receiver<u64>,
    /// The reflector stores of the kinds, their Jobs and pods (see `gather`).
    pub caches: Caches,
    /// Consecutive failed passes per object, for the error policy's backoff.
    pub errors: ErrorBackoff,
    /// Reconcile passes running now (tests wait for 0 to know the controller is idle).
    pub in_flight: Arc<AtomicUsize>,
    /// Under a simulated clock: the objects to look at again when that clock reaches a time.
    pub wakes: Mutex<Schedule<ObjectKey>>,
    /// The runner slots: whether a pass may create a Job (shared by every watched namespace).
    pub slots: Arc<Slots>,
    /// When (and in which leader term) a waiting pass last read each object's run lease and
    /// left it with no claim for a Job never created (`captf_core::lease::recheck_claims`).
    pub claims_read: Mutex<HashMap<ObjectKey, (Timestamp, u64)>>,
    /// (namespace, cluster name) of each TerraformCluster whose exported outputs may have
    /// changed in a pass (`captf_core::exports::outputs_may_have_changed`): the machine pool and
    /// machine controllers look at that cluster's members at once.
    pub exports_changed: tokio::sync::broadcast::Sender<(String, String)>,
    /// Where notifications go (shared by every watched namespace).
    pub notifications: Arc<Notifications>,
}

/// Counts a reconcile pass as running until dropped (also when its future is cancelled).
pub(super) struct Running(Arc<AtomicUsize>, prometheus_client::metrics::gauge::Gauge);

impl Running {
    pub(super) fn start(n: &Arc<AtomicUsize>, gauge: &prometheus_client::metrics::gauge::Gauge) -> Running {
        n.fetch_add(1, Ordering::SeqCst);
        gauge.inc();
        Running(n.clone(), gauge.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
        self.1.dec();
    }
}

impl Ctx {
    pub fn new(
        client: kube::Client,
        config: Config,
        clock: SharedClock,
        metrics: Arc<Metrics>,
        leader: Arc<AtomicBool>,
        terms: watch::Receiver<u64>,
    ) -> (Ctx, Feeds) {
        let instance = std::env::var("POD_NAME").unwrap_or_else(|_| "captf-controller".into());
        let (caches, feeds) = gather::caches(config.selector.is_some());
        let ctx = Ctx {
            events: Events::new(client.clone(), instance),
            client,
            config,
            clock,
            metrics,
            leader,
            terms,
            caches,
            errors: ErrorBackoff::default(),
            in_flight: Arc::default(),
            wakes: Mutex::default(),
            slots: Arc::new(Slots::new(captf_core::queue::Limits::default())),
            claims_read: Mutex::default(),
            exports_changed: tokio::sync::broadcast::channel(EXPORTS_CHANGED_CAPACITY).0,
            notifications: Arc::new(Notifications::none(3)),
        };
        (ctx, feeds)
    }

    /// Whether a waiting pass over `key` reads its run lease for claims to give up.
    pub fn recheck_claims(&self, key: &ObjectKey, now: Timestamp) -> bool {
        let read = lock(&self.claims_read).get(key).copied();
        captf_core::lease::recheck_claims(read, now, *self.terms.borrow())
    }

    /// A waiting pass read `key`'s run lease at `now` and left no claim of a Job never created.
    pub fn claims_read(&self, key: ObjectKey, now: Timestamp) {
        let term = *self.terms.borrow();
        lock(&self.claims_read).insert(key, (now, term));
    }

    /// This process claims `key`'s run lease, or the object went: read it again next time.
    pub fn forget_claims_read(&self, key: &ObjectKey) {
        lock(&self.claims_read).remove(key);
    }

    /// Publish an event about the object, related to one of its Jobs when it concerns a Job,
    /// stamped with the controller's clock. Failures to publish are logged, never fatal.
    pub async fn event(&self, id: &Ident, warning: bool, reason: &str, action: &str, note: &str, job: Option<&str>) {
        let e = Emission {
            warning,
            reason,
            action,
            note,
            job,
        };
        self.events.publish(id, &e, self.clock.now()).await;
    }

    /// Publish a Warning about the object under the fixed `name`, once: the same name again (the
    /// next pass that sees the same thing) creates nothing. Failures are logged, never fatal.
    pub async fn event_once(&self, id: &Ident, reason: &str, note: &str, name: &str) {
        let e = Emission {
            warning: true,
            reason,
            action: captf_shared::events::action::RECONCILE,
            note,
            job: None,
        };
        if let Err(err) = self.events.publish_once(id, &e, self.clock.now(), name).await {
            tracing::warn!(error = %err, reason, "failed to publish event for {}", id.what());
        }
    }

    /// Notify of what happened to `id`, when it is worth it (`notifications::event_for`). Never
    /// waits: the event is queued, the namespace's targets read in the background.
    pub fn notify(&self, id: &Ident, what: &Happened<'_>) {
        if let Some(event) = notifications::event_for(id, what, self.notifications.after_failures()) {
            self.notifications.send(event);
        }
    }

    /// How the pass over `id` ends for its [`Wake`]. With the system clock a wake at a time is
    /// a requeue. Under a simulated clock it waits for that clock (see [`Ctx::due`]), so an
    /// object whose next look is hours away costs nothing until the clock gets there.
    pub fn look_again(&self, id: &Ident, wake: Wake) -> Action {
        let key = ObjectKey::of(id);
        if !self.clock.simulated() {
            return match wake {
                Wake::At(t) => {
                    Action::requeue(captf_core::decide::until(self.clock.now(), t).max(Duration::from_secs(1)))
                }
                Wake::OnChange => Action::await_change(),
            };
        }
        let mut wakes = lock(&self.wakes);
        match wake {
            // Read the clock under the lock: a clock change either sees this entry or comes
            // before this read, which then finds the wake due.
            Wake::At(t) => {
                if wakes.set(key, t, self.clock.now()) {
                    Action::await_change()
                } else {
                    Action::requeue(SYNC_REQUEUE)
                }
            }
            Wake::OnChange => {
                wakes.clear(&key);
                Action::await_change()
            }
        }
    }

    /// The objects of `kind` whose simulated wake the clock has reached, each once.
    pub fn due(&self, kind: Kind) -> Vec<ObjectKey> {
        let mut wakes = lock(&self.wakes);
        let now = self.clock.now();
        wakes.take_due(now, |k| k.kind == kind)
    }
}

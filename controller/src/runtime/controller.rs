//! Three kube-rs `Controller`s (one per kind) sharing one [`Ctx`], and the reconcile pass:
//! read → book finished Jobs → check the lock → `decide` → act → write status.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use tokio::sync::watch;

use captf_shared::conditions::{self, reason as reasons};
use captf_shared::inputs::Inputs;
use captf_shared::types::{CaptfObject, TerraformCluster, TerraformMachine, TerraformMachinePool, TerraformStatus};
use captf_shared::{Kind, keys, names};

use super::book;
use super::clock::SharedClock;
use super::deletion;
use super::errors::{self, ApiAction, Error};
use super::events::{Emission, Events};
use super::gather::{self, Caches, FeedStreams, Feeds, Ident, Meta};
use super::inputs;
use super::interrupted::{self, Checked};
use super::job::{JobParams, build_job, owner_reference};
use super::kinds::{CaptfKind, api_resource};
use super::leases::{self, Take};
use super::metrics::Metrics;
use super::pause;
use super::state;
use super::status;
use crate::core::lock::LockState;
use crate::core::record::{self, JobRecord};
use crate::core::snapshot::{self, DurableRecord, InputsHash, Snapshot, object_status};
use crate::core::{Decision, Reason, Start, Wait, decide};
use captf_shared::policy::{self, TenantPolicy};

/// How the runtime is configured (from the flags).
#[derive(Clone, Debug)]
pub struct Config {
    /// Watch one namespace, or all when `None`.
    pub namespace: Option<String>,
    pub runner_image: String,
    /// The runner pods' service account when `spec.jobs.serviceAccountName` is unset.
    pub runner_service_account: Option<String>,
    pub concurrency: u16,
    /// What a spec may choose for its runner pods (checked before every Job).
    pub policy: TenantPolicy,
    /// Resources and emptyDir size limits of runner pods, unless the spec says otherwise.
    pub runner_pod: crate::runtime::job::RunnerPodDefaults,
}

/// What every reconcile shares.
pub struct Ctx {
    pub client: kube::Client,
    pub config: Config,
    pub clock: SharedClock,
    pub metrics: Arc<Metrics>,
    pub events: Events,
    /// True while this replica may write (leader election, or always without it).
    pub leader: Arc<AtomicBool>,
    /// The reflector stores of the kinds, their Jobs and pods (see `gather`).
    pub caches: Caches,
}

impl Ctx {
    pub fn new(
        client: kube::Client,
        config: Config,
        clock: SharedClock,
        metrics: Arc<Metrics>,
        leader: Arc<AtomicBool>,
    ) -> (Ctx, Feeds) {
        let instance = std::env::var("POD_NAME").unwrap_or_else(|_| "captf-controller".into());
        let (caches, feeds) = gather::caches();
        let ctx = Ctx {
            events: Events::new(client.clone(), instance),
            client,
            config,
            clock,
            metrics,
            leader,
            caches,
        };
        (ctx, feeds)
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
}

/// Requeue after a lost race (409, lease held by somebody else).
const RACE_REQUEUE: Duration = Duration::from_secs(2);
/// Requeue while the stores have not listed once, or lag the live status (they usually catch up
/// within milliseconds, and the Job's own watch event triggers the object before this).
const SYNC_REQUEUE: Duration = Duration::from_millis(250);
/// Requeue while a Job runs (its watch event usually comes first).
const ACTIVE_REQUEUE: Duration = Duration::from_secs(300);

/// The reconcile of one object of kind `K`.
pub async fn reconcile<K: CaptfKind>(obj: Arc<Meta<K>>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if !ctx.leader.load(Ordering::SeqCst) {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let started = Instant::now();
    // The cached object may lag behind our own last status write: read it live, so counters
    // such as consecutiveFailures are never computed from (and written back over) a stale copy.
    let ns = obj.metadata.namespace.clone().unwrap_or_default();
    let name = obj.metadata.name.clone().unwrap_or_default();
    let live = Api::<K>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&name)
        .await
        .map_err(|e| Error::api(ApiAction::GetObject, format!("{} {ns}/{name}", K::KIND), e));
    let out = match live {
        Ok(Some(o)) => reconcile_object(&ctx, o.to_object()).await,
        Ok(None) => Ok(Action::await_change()),
        Err(e) => Err(e),
    };
    ctx.metrics.observe_reconcile(K::KIND, started.elapsed().as_secs_f64());
    match out {
        Err(e) if e.is_conflict() => Ok(Action::requeue(RACE_REQUEUE)),
        other => other,
    }
}

/// The error policy: count, log, retry soon.
pub fn error_policy<K: CaptfKind>(obj: Arc<Meta<K>>, e: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.metrics.reconcile_error(e.category());
    tracing::warn!(
        kind = %K::KIND,
        namespace = obj.metadata.namespace.as_deref().unwrap_or(""),
        name = obj.metadata.name.as_deref().unwrap_or(""),
        category = e.category(),
        "reconcile failed: {e}"
    );
    Action::requeue(Duration::from_secs(2))
}

fn requeue_for(wait: &Wait, simulated: bool) -> Action {
    let d = match wait.reason {
        Reason::JobActive => Some(ACTIVE_REQUEUE),
        _ => wait.requeue_after,
    };
    match d {
        // With a simulated clock every jump re-reconciles everything; keep real waits short.
        Some(d) if simulated => Action::requeue(d.min(Duration::from_secs(5))),
        Some(d) => Action::requeue(d.max(Duration::from_secs(1))),
        None => Action::await_change(),
    }
}

/// The reconcile pass over one object.
pub async fn reconcile_object(ctx: &Ctx, object: CaptfObject) -> Result<Action, Error> {
    let Some(kind) = object.job_kind() else {
        return Ok(Action::await_change());
    };
    let id = Ident::of(&object, kind)?;
    let meta = object.metadata();
    if meta
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(keys::LABEL_MANAGED_BY))
    {
        return Ok(Action::await_change());
    }
    let deleting = meta.deletion_timestamp.is_some();
    if !deleting && !deletion::ensure_finalizer(&ctx.client, &id, &object).await? {
        return Ok(Action::requeue(RACE_REQUEUE));
    }

    // ---- read ----
    let live_status = object_status(&object);
    let (last_job_seq, live_active) = (
        live_status.and_then(|s| s.last_job_seq),
        live_status.and_then(|s| s.active_job.as_deref()),
    );
    let Some((jobs, pods)) = gather::jobs_and_pods(&ctx.client, &ctx.caches, &id, last_job_seq, live_active).await?
    else {
        return Ok(Action::requeue(SYNC_REQUEUE));
    };
    let by_job = snapshot::pods_by_job(&pods);
    let mut records: Vec<JobRecord> = Vec::with_capacity(jobs.len());
    for j in &jobs {
        let pod = j.metadata.name.as_deref().and_then(|n| by_job.get(n).copied());
        match JobRecord::from_job(kind, &id.namespace, &id.name, j, pod) {
            Ok(r) => records.push(r),
            Err(e) => tracing::warn!("ignoring a Job of {}: {e}", id.what()),
        }
    }
    record::sort_newest_first(&mut records);
    let inputs_name = names::inputs_secret_name(&id.suffix);
    let mut inputs_secret = gather::secret(&ctx.client, &id.namespace, &inputs_name).await?;
    let durable_of = |s: Option<&Secret>| -> Result<DurableRecord, Error> {
        s.map(DurableRecord::from_secret)
            .transpose()
            .map(Option::unwrap_or_default)
            .map_err(|source| Error::Snapshot {
                kind,
                name: id.name.clone(),
                source,
            })
    };
    let mut durable = durable_of(inputs_secret.as_ref())?;
    let original = object_status(&object).cloned().unwrap_or_default();
    let mut status = original.clone();

    // ---- an apply Job deleted while it ran (§5.6) ----
    let listed: Vec<String> = records.iter().map(|r| r.name.clone()).collect();
    match interrupted::check(ctx, &id, status.active_job.as_deref(), &listed).await? {
        Checked::Nothing => {}
        Checked::Stale => return Ok(Action::requeue(RACE_REQUEUE)),
        Checked::Recorded(job) => {
            durable.interrupted_apply = Some(job);
            status.active_job = None;
        }
        Checked::Forgot(_) => status.active_job = None,
    }

    // ---- book finished Jobs (§5.2) ----
    let applied_hash = inputs_secret.as_ref().and_then(inputs::stored_inputs).map(|i| i.hash());
    let booking = book::book_all(
        ctx,
        &id,
        &object,
        &jobs,
        &mut records,
        &mut status,
        applied_hash.as_deref(),
        durable.interrupted_apply.as_deref(),
    )
    .await?;
    if !booking.booked.is_empty() {
        inputs_secret = gather::secret(&ctx.client, &id.namespace, &inputs_name).await?;
        durable = durable_of(inputs_secret.as_ref())?;
    }
    let active = records.iter().find(|r| !r.is_finished()).map(|r| r.name.clone());
    status.active_job = match active.clone() {
        Some(a) => Some(a),
        // A Job listed as finished is no longer active; one not listed was handled above.
        None => status.active_job.filter(|a| !a.is_empty() && !listed.contains(a)),
    };
    let spec = captf_shared::defaults::effective(object.terraform_spec());
    book::prune(
        ctx,
        &id,
        &records,
        spec.successful_jobs_history_limit,
        spec.failed_limit(),
    )
    .await?;

    // ---- the lock check, only when no Job is active (§4) ----
    let lock_checked = active.is_none();
    let lock = if lock_checked {
        gather::lock_state(&ctx.client, &id).await?
    } else {
        LockState::Free
    };

    // ---- inputs, holds, decide ----
    let resolved = gather::resolve_inputs(&ctx.client, &object, &id).await?;
    let inputs_hash = match &resolved {
        Ok(i) => InputsHash::Known(i.hash()),
        Err(e) => InputsHash::Unresolved(e.to_string()),
    };
    let mut holds = gather::holds(&ctx.client, &ctx.caches, &id).await?;
    holds.cluster_paused = pause::cluster_paused(&ctx.client, &object, &id).await;
    if deleting {
        // Only a deletion is held by an unreadable state (§8); other ops find out themselves.
        holds.state_unreadable = state::unreadable(&ctx.client, &id).await?;
    }
    let mut snap =
        Snapshot::new(&object, records, durable, inputs_hash, lock, holds).map_err(|source| Error::Snapshot {
            kind,
            name: id.name.clone(),
            source,
        })?;
    snap.status = status;
    let violations = ctx.config.policy.check(&object);
    if !violations.is_empty() {
        snap.policy_violation = Some(policy::message(&violations));
    }
    let now = ctx.clock.now();
    let mut decision = decide(&snap, now);
    tracing::debug!(object = %id.what(), ?decision, "decided");

    // ---- act ----
    let mut active_job = snap.status.active_job.clone().filter(|a| !a.is_empty());
    let mut action = match &decision {
        Decision::Wait(w) => requeue_for(w, ctx.clock.simulated()),
        Decision::Start(_) => Action::requeue(ACTIVE_REQUEUE),
        Decision::Finalize => {
            if deletion::remove_finalizer(&ctx.client, &id, &object).await? {
                ctx.metrics.forget_object(kind, &id.namespace, &id.name);
                tracing::info!("removed the finalizer of {}", id.what());
                return Ok(Action::await_change());
            }
            return Ok(Action::requeue(RACE_REQUEUE));
        }
    };
    if let Decision::Start(start) = decision.clone() {
        // A destroy of an object whose inputs no longer resolve runs with the stored inputs.
        let inputs = resolved
            .as_ref()
            .ok()
            .cloned()
            .or_else(|| inputs_secret.as_ref().and_then(inputs::stored_inputs));
        let seq = snap
            .jobs
            .iter()
            .map(|r| r.seq)
            .chain(snap.status.last_job_seq)
            .max()
            .unwrap_or(0)
            .saturating_add(1);
        match inputs {
            None => {
                decision = Decision::Wait(Wait {
                    reason: Reason::InputsUnresolved,
                    op: Some(start.op),
                    requeue_after: Some(crate::core::decide::HOLD_REQUEUE),
                    not_before: None,
                    attempt: Some(start.attempt),
                });
                action = Action::requeue(crate::core::decide::HOLD_REQUEUE);
            }
            Some(inputs) => {
                match start_job(ctx, &id, &object, &snap, &start, &inputs, inputs_secret.as_ref(), seq).await? {
                    Some(name) => {
                        active_job = Some(name);
                        snap.status.last_job_seq = Some(seq);
                    }
                    None => action = Action::requeue(RACE_REQUEUE),
                }
            }
        }
    }
    if booking.conflict {
        action = Action::requeue(RACE_REQUEUE);
    }

    // ---- write status ----
    let current = snap.inputs_hash.known().map(str::to_string);
    let new = status::compute(
        &snap,
        &decision,
        active_job.as_deref(),
        current.as_deref(),
        lock_checked,
        now,
    );
    write_status(ctx, &id, &original, &new).await?;
    if let Some(msg) = state_locked_transition(&original, &new) {
        ctx.event(&id, true, reasons::STATE_LOCKED, "CheckLock", &msg, None)
            .await;
    }
    Ok(action)
}

/// The StateLocked message when the condition just became StateLocked (or its holder changed).
fn state_locked_transition(old: &TerraformStatus, new: &TerraformStatus) -> Option<String> {
    let find = |s: &TerraformStatus| {
        s.conditions
            .as_deref()
            .and_then(|c| conditions::find(c, conditions::STATE_READABLE))
            .map(|c| (c.reason.clone(), c.message.clone()))
    };
    let (reason, message) = find(new)?;
    (reason == reasons::STATE_LOCKED && find(old) != Some((reason, message.clone()))).then_some(message)
}

async fn write_status(ctx: &Ctx, id: &Ident, old: &TerraformStatus, new: &TerraformStatus) -> Result<(), Error> {
    let body = status::status_patch(old, new).map_err(|source| Error::Serialize { what: "status", source })?;
    let Some(body) = body else {
        return Ok(());
    };
    tracing::debug!(object = %id.what(), patch = %body, "status patch");
    let api: Api<kube::core::DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &id.namespace, &api_resource(id.kind));
    api.patch_status(&id.name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .map(|_| ())
        .map_err(|e| Error::api(ApiAction::PatchStatus, id.what(), e))
}

/// §5.1: write the inputs Secret, take the cluster lease (a TerraformCluster) and the run lease,
/// create the Job, emit `JobStarted` (and `ForceUnlocked`). `None` when a lease is held or the
/// Job already exists (requeue, no failure).
#[allow(clippy::too_many_arguments)]
async fn start_job(
    ctx: &Ctx,
    id: &Ident,
    object: &CaptfObject,
    snap: &Snapshot,
    start: &Start,
    inputs_doc: &Inputs,
    existing_secret: Option<&Secret>,
    seq: u32,
) -> Result<Option<String>, Error> {
    let job_name = names::job_name(id.kind, &id.namespace, &id.name, start.op, seq);
    inputs::write(&ctx.client, id, inputs_doc, existing_secret).await?;
    let now = ctx.clock.now();
    let active = snap.status.active_job.as_deref();
    let cluster_lease = match (id.kind, &id.cluster_name) {
        (Kind::TerraformCluster, Some(c)) => Some(names::cluster_lease_name(&id.namespace, c)),
        _ => None,
    };
    if let Some(cl) = &cluster_lease
        && let Take::Held(why) = leases::take(&ctx.client, &id.namespace, cl, &job_name, active, None, now).await?
    {
        tracing::info!("not starting {job_name}: {why}");
        return Ok(None);
    }
    let owner = owner_reference(id.kind, &id.name, &id.uid);
    let run_lease = names::run_lease_name(&id.suffix);
    if let Take::Held(why) = leases::take(
        &ctx.client,
        &id.namespace,
        &run_lease,
        &job_name,
        active,
        Some(owner),
        now,
    )
    .await?
    {
        tracing::info!("not starting {job_name}: {why}");
        if let Some(cl) = &cluster_lease {
            leases::release(&ctx.client, &id.namespace, cl, &job_name).await?;
        }
        return Ok(None);
    }
    let spec = object.terraform_spec();
    let hash = inputs_doc.hash();
    let sensitive = crate::core::inputs::sensitive_variables(spec, inputs_doc);
    let job = build_job(&JobParams {
        kind: id.kind,
        namespace: &id.namespace,
        name: &id.name,
        uid: &id.uid,
        seq,
        start,
        effective: &snap.spec,
        jobs: spec.jobs.as_ref(),
        inputs_hash: &hash,
        cluster_name: id.cluster_name.as_deref(),
        runner_image: &ctx.config.runner_image,
        runner_service_account: ctx.config.runner_service_account.as_deref().filter(|s| !s.is_empty()),
        sensitive_variables: &sensitive,
        pod_defaults: &ctx.config.runner_pod,
    });
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &id.namespace);
    match api.create(&PostParams::default(), &job).await {
        Ok(_) => {}
        Err(e) if errors::is_conflict(&e) => return Ok(None),
        Err(e) => {
            return Err(Error::api(
                ApiAction::CreateJob,
                format!("{}/{job_name}", id.namespace),
                e,
            ));
        }
    }
    tracing::info!(job = %job_name, op = %start.op, reason = %start.reason, attempt = start.attempt, "started Job for {}", id.what());
    ctx.event(
        id,
        false,
        "JobStarted",
        "StartJob",
        &format!(
            "started Job {job_name} ({} because {}, attempt {})",
            start.op, start.reason, start.attempt
        ),
        Some(&job_name),
    )
    .await;
    if let Some(lock_id) = &start.force_unlock_id {
        ctx.metrics.force_unlock(id.kind);
        let holder = snap.lock.holder().unwrap_or("");
        ctx.event(
            id,
            true,
            "ForceUnlocked",
            "StartJob",
            &format!("Job {job_name} force-unlocks the stale state lock {lock_id} held by {holder}"),
            Some(&job_name),
        )
        .await;
    }
    Ok(Some(job_name))
}

/// A controller for one kind: its objects from the kind's store, triggered by them, by its Jobs
/// (the Jobs store of the kind, deletions included) and by its inputs Secrets (metadata only).
fn controller_for<K: CaptfKind>(
    ctx: Arc<Ctx>,
    feeds: &FeedStreams,
    objects: (Writer<Meta<K>>, Store<Meta<K>>),
    jobs: Writer<Job>,
    shutdown: watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> + Send + use<K> {
    let client = ctx.client.clone();
    let ns = ctx.config.namespace.clone();
    let api: Api<Meta<K>> = match &ns {
        Some(n) => Api::namespaced(client.clone(), n),
        None => Api::all(client.clone()),
    };
    let jobs_api: Api<Job> = match &ns {
        Some(n) => Api::namespaced(client.clone(), n),
        None => Api::all(client.clone()),
    };
    let secrets: Api<Secret> = match &ns {
        Some(n) => Api::namespaced(client.clone(), n),
        None => Api::all(client.clone()),
    };
    let selector = format!("{}={}", keys::LABEL_KIND, K::KIND.as_str());
    let (writer, reader) = objects;
    let controller = Controller::for_stream(feeds.kind_stream(writer, api), reader)
        .owns_stream(feeds.jobs_stream(K::KIND, jobs, jobs_api))
        .owns(secrets, watcher::Config::default().labels(&selector))
        .with_config(ControllerConfig::default().concurrency(ctx.config.concurrency))
        .reconcile_all_on(ctx.clock.jumps())
        .graceful_shutdown_on(async move {
            let mut rx = shutdown;
            let _ = rx.wait_for(|stop| *stop).await;
        });
    controller
        .run(reconcile::<K>, error_policy::<K>, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!("controller event: {e}");
            }
        })
}

/// Run the three controllers (and the pod watch) until `shutdown` turns true; `ready` turns
/// true once every store has listed once.
pub async fn run_controllers(ctx: Arc<Ctx>, feeds: Feeds, shutdown: watch::Receiver<bool>, ready: Arc<AtomicBool>) {
    let watch_ready = {
        let caches = ctx.caches.clone();
        async move {
            loop {
                if caches.synced() {
                    ready.store(true, Ordering::SeqCst);
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    tokio::spawn(watch_ready);
    let pods_api: Api<Pod> = match &ctx.config.namespace {
        Some(n) => Api::namespaced(ctx.client.clone(), n),
        None => Api::all(ctx.client.clone()),
    };
    let Feeds {
        clusters,
        pools,
        machines,
        jobs: [j_clusters, j_pools, j_machines],
        pods,
        streams: feeds,
    } = feeds;
    let pods_feed = {
        let mut stop = shutdown.clone();
        feeds
            .pods_stream(pods, pods_api)
            .take_until(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .for_each(|()| async {})
    };
    let c = ctx.caches.clone();
    futures::join!(
        controller_for::<TerraformCluster>(
            ctx.clone(),
            &feeds,
            (clusters, c.clusters.clone()),
            j_clusters,
            shutdown.clone()
        ),
        controller_for::<TerraformMachinePool>(
            ctx.clone(),
            &feeds,
            (pools, c.pools.clone()),
            j_pools,
            shutdown.clone()
        ),
        controller_for::<TerraformMachine>(ctx, &feeds, (machines, c.machines.clone()), j_machines, shutdown),
        pods_feed,
    );
}

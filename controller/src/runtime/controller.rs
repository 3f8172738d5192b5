//! Three kube-rs `Controller`s (one per kind) sharing one [`Ctx`], and the reconcile pass:
//! read → book finished Jobs → check the lock → `decide` → act → write status.

use captf_read::api;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::{DynamicObject, PartialObjectMeta};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use tokio::sync::watch;

use captf_shared::binding::{self, Binding, History, Verdict};
use captf_shared::conditions::{self, reason as reasons};
use captf_shared::inputs::Inputs;
use captf_shared::types::{CaptfObject, TerraformCluster, TerraformMachine, TerraformMachinePool, TerraformStatus};
use captf_shared::{Kind, Op, events, keys, names};

use super::book;
use super::ctx::{Ctx, Running, SYNC_REQUEUE};
use super::deletion;
use super::gather::{self, FeedStreams, Feeds, Meta};
use super::identity::{self, Claims};
use super::inputs;
use super::interrupted;
use super::leases::{self, Take};
use super::notifications::Happened;
use super::owners::{self, OwnerKind};
use super::retry::ObjectKey;
use super::slots::Ask;
use super::stored::StoredJob;
use captf_core::adoption::{self, NameHold};
use captf_core::fence;
use captf_core::ident::Ident;
use captf_core::interrupted::Checked;
use captf_core::job::{JobParams, build_job, owner_reference, runner_account};
use captf_core::moving;
use captf_core::plan::{self, Plan};
use captf_core::record::JobRecord;
use captf_core::snapshot::{Holds, Snapshot, object_status};
use captf_core::status;
use captf_core::wake::{self, ACTIVE_REQUEUE, Wake};
use captf_core::{Decision, Reason, Start, Wait};
use captf_read::errors::{self, ApiAction, Error};
use captf_read::kinds::{CaptfKind, api_resource};
use captf_read::pause;
use captf_read::source::{self, Pending, Read, Source, Verdicts};
use captf_shared::policy;

/// A pass that failed still says so on the object: `Reconciled=False` with the failure, on the
/// status as read. The write is skipped when the condition already says the same (a repeated
/// error writes nothing), and it happens once per failed pass, which the error policy's capped
/// backoff paces; a failure to write it is only logged (the API server may be what failed).
async fn report_failure(ctx: &Ctx, object: &CaptfObject, e: &Error) {
    let Some(kind) = object.job_kind() else { return };
    let Ok(id) = Ident::of(object, kind) else { return };
    let old = object_status(object).cloned().unwrap_or_default();
    let new = status::failed_pass(
        &old,
        e.category(),
        &e.to_string(),
        object.metadata().generation,
        ctx.clock.now(),
    );
    if let Err(w) = write_status(ctx, &id, &old, &new).await {
        tracing::debug!("could not report the failed pass of {}: {w}", id.what());
    }
}

/// Requeue after a lost race (409, lease held by somebody else).
const RACE_REQUEUE: Duration = Duration::from_secs(2);

/// The reconcile of one object of kind `K`.
pub async fn reconcile<K: CaptfKind>(obj: Arc<Meta<K>>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let _running = Running::start(&ctx.in_flight, &ctx.metrics.reconciles_in_flight);
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
        // Relabelled out of this instance's selector since the watch said otherwise: the
        // instance it now matches serves it, and this one no longer acts on it (its watch drops
        // it next).
        Ok(Some(o)) if !captf_core::sharding::serves(ctx.config.served.as_ref(), o.meta().labels.as_ref()) => {
            tracing::debug!("{} {ns}/{name} left this instance's selector", K::KIND);
            forget_slot(&ctx, &object_key::<K>(&obj));
            Ok(Action::await_change())
        }
        Ok(Some(o)) => {
            let object = o.to_object();
            let out = reconcile_object(&ctx, object.clone()).await;
            if let Err(e) = &out
                && !e.is_conflict()
            {
                report_failure(&ctx, &object, e).await;
            }
            out
        }
        Ok(None) => {
            forget_slot(&ctx, &object_key::<K>(&obj));
            ctx.forget_claims_read(&object_key::<K>(&obj));
            Ok(Action::await_change())
        }
        Err(e) => Err(e),
    };
    ctx.metrics.observe_reconcile(K::KIND, started.elapsed().as_secs_f64());
    let out = match out {
        Err(e) if e.is_conflict() => Ok(Action::requeue(RACE_REQUEUE)),
        other => other,
    };
    if out.is_ok() {
        ctx.errors.succeeded(&object_key::<K>(&obj));
    }
    out
}

/// The object no longer waits for a runner slot here.
fn forget_slot(ctx: &Ctx, key: &ObjectKey) {
    ctx.slots.forget(key);
    ctx.metrics
        .queued
        .set(i64::try_from(ctx.slots.queued()).unwrap_or(i64::MAX));
}

fn object_key<K: CaptfKind>(obj: &Meta<K>) -> ObjectKey {
    ObjectKey {
        kind: K::KIND,
        namespace: obj.metadata.namespace.clone().unwrap_or_default(),
        name: obj.metadata.name.clone().unwrap_or_default(),
    }
}

/// The error policy: count, log why, and retry the object after its own growing, jittered delay
/// (docs/rules.md, "Reconcile errors"), so a persistent error does not hot-loop.
pub fn error_policy<K: CaptfKind>(obj: Arc<Meta<K>>, e: &Error, ctx: Arc<Ctx>) -> Action {
    let key = object_key::<K>(&obj);
    let (n, delay) = ctx.errors.failed(&key);
    ctx.metrics.reconcile_error(e.category(), delay);
    tracing::warn!(
        kind = %K::KIND,
        namespace = %key.namespace,
        name = %key.name,
        category = e.category(),
        errors_in_a_row = n,
        retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        "reconcile failed: {e}; retrying in {delay:?} (error {n} in a row, backing off up to {:?})",
        super::retry::ERROR_CAP
    );
    Action::requeue(delay)
}

/// The reconcile pass over one object, in phases: read what the pass needs, [`plan::plan`] it
/// (PURE), then carry the plan out: book, prune, act on the decision, write the status.
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
    if !deleting && !captf_core::finalizer::has_finalizer(&object) {
        // The Cluster is read only when the finalizer is missing (a new or a moving object).
        let paused =
            captf_core::pause::object_paused(&object) || pause::cluster_paused(&ctx.client, &object, &id).await;
        if moving::may_add_finalizer(paused) && !deletion::ensure_finalizer(&ctx.client, &id, &object).await? {
            return Ok(Action::requeue(RACE_REQUEUE));
        }
    }

    let read = match read_pass(ctx, &id, &object).await? {
        Ok(read) => read,
        Err(action) => return Ok(action),
    };
    let now = ctx.clock.now();
    let plan = plan::plan(&read.snap, now);
    tracing::debug!(object = %id.what(), decision = ?plan.decision, prune = ?plan.prune, "planned");
    for r in &plan.future_requests {
        ctx.event_once(
            &id,
            captf_shared::events::reason::REQUEST_IGNORED,
            &captf_core::requests::future_request_note(r, now),
            &super::events::request_event_name(&id, r.key, &r.at.to_string()),
        )
        .await;
    }
    warn_unverified_members(ctx, &id, &read.snap).await;

    // Before any write to the object in this pass, so the resourceVersion read still holds.
    deletion::remove_used_requests(&ctx.client, &id, &object, &plan.used_requests).await?;
    if !book::execute(ctx, &id, &object, &read.jobs, &plan).await? {
        return Ok(Action::requeue(RACE_REQUEUE));
    }
    book::prune(ctx, &id, &plan.prune).await?;
    let acted = match act(ctx, &id, &object, &read, &plan, now).await? {
        Ok(acted) => acted,
        Err(over) => return Ok(over),
    };
    let new = if acted.as_planned {
        plan.status.clone()
    } else if let Some(place) = &acted.queued {
        let mut held = plan.clone();
        held.booked.holds.queued = Some(place.clone());
        plan::status_with(&held, &acted.decision, acted.active_job.as_deref(), now)
    } else if let Some(hold) = &acted.name_hold {
        let mut held = plan.clone();
        hold.set_on(&mut held.booked);
        plan::status_with(&held, &acted.decision, acted.active_job.as_deref(), now)
    } else {
        plan::status_with(&plan, &acted.decision, acted.active_job.as_deref(), now)
    };
    write_status(ctx, &id, &read.original, &new).await?;
    if let Some(cluster) = id.cluster_name.as_ref().filter(|_| id.kind == Kind::TerraformCluster)
        && captf_core::exports::outputs_may_have_changed(
            object.exports(),
            read.original.last_success_time.as_ref(),
            new.last_success_time.as_ref(),
        )
    {
        // No receiver (no member controller yet) is nothing to tell.
        let _ = ctx.exports_changed.send((id.namespace.clone(), cluster.clone()));
    }
    let block = moving::blocks_move(read.snap.paused, acted.active_job.as_deref(), read.snap.lock.holder());
    deletion::set_block_move(&ctx.client, &id, &object, block).await?;
    if let Some((reason, msg)) = name_hold_transition(&read.original, &new) {
        tracing::warn!("holding {}: {msg}", id.what());
        ctx.event(&id, true, reason, events::action::CHECK_NAMES, &msg, None)
            .await;
    }
    if let Some(msg) = state_locked_transition(&read.original, &new) {
        ctx.notify(&id, &Happened::StateLocked { lock: &read.snap.lock });
        ctx.event(
            &id,
            true,
            events::reason::STATE_LOCKED,
            events::action::CHECK_LOCK,
            &msg,
            None,
        )
        .await;
    }
    Ok(acted.action)
}

/// A TerraformCluster being deleted met machine pools or machines labelled with its cluster that
/// are not verified members (`captf_core::membership`): they do not hold the deletion, and a
/// Warning on the cluster and on each of them says why, once per deletion.
async fn warn_unverified_members(ctx: &Ctx, id: &Ident, snap: &captf_core::Snapshot) {
    let Some(cluster) = id.cluster_name.as_deref() else {
        return;
    };
    if snap.deletion_timestamp.is_none() {
        return;
    }
    for member in &snap.holds.unverified_members {
        let note = captf_core::membership::unverified_note(member, &id.namespace, &id.name, cluster);
        let member_id = Ident::new(
            member.kind,
            id.namespace.clone(),
            member.name.clone(),
            member.uid.clone(),
            Some(cluster.to_string()),
        );
        for regarding in [id, &member_id] {
            let name = super::events::unverified_member_event_name(regarding, &id.uid, member);
            ctx.event_once(regarding, events::reason::UNVERIFIED_MEMBER, &note, &name)
                .await;
        }
    }
}

/// The controller's source of a pass's reads (`captf_read::source`): the Jobs, pods and a
/// cluster's members from the reflector stores, an active Job that vanished checked live and
/// recorded, the outputs read for booking, and the verdicts of the controller's own flags.
struct Cached<'a> {
    ctx: &'a Ctx,
}

impl Source for Cached<'_> {
    fn client(&self) -> &kube::Client {
        &self.ctx.client
    }

    async fn jobs_and_pods(&self, id: &Ident, status: &TerraformStatus) -> Result<Option<(Vec<Job>, Vec<Pod>)>, Error> {
        let ctx = self.ctx;
        gather::jobs_and_pods(
            &ctx.client,
            &ctx.caches,
            id,
            status.last_job_seq,
            status.active_job.as_deref(),
        )
        .await
    }

    async fn check_active(&self, id: &Ident, active: Option<&str>, listed: &[String]) -> Result<Checked, Error> {
        interrupted::check(self.ctx, id, active, listed).await
    }

    async fn read_outputs(
        &self,
        id: &Ident,
        records: &mut [JobRecord],
        baseline: u32,
        from_secrets: &[String],
    ) -> Result<(), Error> {
        book::read_outputs(self.ctx, id, records, baseline, from_secrets).await
    }

    async fn member_holds(&self, id: &Ident, deleting: bool) -> Result<Holds, Error> {
        gather::holds(&self.ctx.client, &self.ctx.caches, id, deleting).await
    }

    async fn verdicts(
        &self,
        object: &CaptfObject,
        id: &Ident,
        inputs_secret: Option<&Secret>,
        foreign_inputs: Option<String>,
    ) -> Result<Verdicts, Error> {
        let ctx = self.ctx;
        // The tenant policy again, for a spec that reached the API past the webhook: no Job starts.
        let violations = ctx.config.policy.check(object);
        let policy_violation = (!violations.is_empty()).then(|| policy::message(&violations));
        // A hold for a name conflict or released state is lifted only by reading the names
        // again (the object's adopt-state annotation as this pass read it).
        let original = object_status(object).cloned().unwrap_or_default();
        let hold = match foreign_inputs {
            Some(m) => Some(NameHold::Conflict(m)),
            None if held_for_names(&original) => name_hold(ctx, id, object, inputs_secret).await?,
            None => None,
        };
        let (name_conflict, unadopted_state) = match hold {
            Some(NameHold::Conflict(m)) => (Some(m), None),
            Some(NameHold::NotAdopted(m)) => (None, Some(m)),
            None => (None, None),
        };
        let runner_config_unavailable = api::runner_config_problem(
            &ctx.client,
            object,
            id,
            ctx.config.runner_pod.terraform_cli_config.as_ref(),
        )
        .await?;
        Ok(Verdicts {
            policy_violation,
            name_conflict,
            unadopted_state,
            runner_config_unavailable,
        })
    }
}

/// Read what one pass needs (`captf_read::source::read` over the caches). `Err`: how to look
/// again when there is nothing to decide from yet.
async fn read_pass(ctx: &Ctx, id: &Ident, object: &CaptfObject) -> Result<Result<Read, Action>, Error> {
    Ok(match source::read(&Cached { ctx }, object, id.clone()).await? {
        Ok(read) => Ok(read),
        Err(Pending::Sync) => Err(Action::requeue(SYNC_REQUEUE)),
        Err(Pending::Stale) => Err(Action::requeue(RACE_REQUEUE)),
    })
}

/// Held by what is under the object's names: another object's, or released and not adopted.
fn held_for_names(status: &TerraformStatus) -> bool {
    status
        .conditions
        .as_deref()
        .and_then(|cs| conditions::find(cs, conditions::READY))
        .is_some_and(|c| c.status == "False" && NAME_HOLDS.contains(&c.reason.as_str()))
}

/// The Ready reasons of a hold by what is under the object's names (each also an Event's).
const NAME_HOLDS: [&str; 2] = [reasons::NAME_CONFLICT, reasons::RELEASED_STATE_NOT_ADOPTED];

/// Whether the object's pods run as its own runner identity.
fn own_identity(ctx: &Ctx, object: &CaptfObject, id: &Ident) -> bool {
    runner_account(
        object.terraform_spec().jobs.as_ref(),
        ctx.config.runner_service_account.as_deref(),
        &id.suffix,
    )
    .own
}

/// The hold by what is under the object's names, if any (`identity::check`).
async fn name_hold(
    ctx: &Ctx,
    id: &Ident,
    object: &CaptfObject,
    inputs_secret: Option<&Secret>,
) -> Result<Option<NameHold>, Error> {
    let adopt = adoption::adopts(object.metadata());
    Ok(
        match identity::check(&ctx.client, id, inputs_secret, own_identity(ctx, object, id), adopt).await? {
            Claims::Held(hold) => Some(hold),
            Claims::Bound { .. } => None,
        },
    )
}

/// The reason and message when the object just became held by what is under its names (or the
/// message changed): `NameConflict` or `ReleasedStateNotAdopted`.
fn name_hold_transition(old: &TerraformStatus, new: &TerraformStatus) -> Option<(&'static str, String)> {
    let ready = |s: &TerraformStatus| {
        s.conditions
            .as_deref()
            .and_then(|cs| conditions::find(cs, conditions::READY))
            .filter(|c| c.status == "False")
            .and_then(|c| {
                NAME_HOLDS
                    .iter()
                    .find(|r| **r == c.reason)
                    .map(|r| (*r, c.message.clone()))
            })
    };
    let now = ready(new)?;
    (ready(old).as_ref() != Some(&now)).then_some(now)
}

/// What acting on the decision came to.
struct Acted {
    action: Action,
    /// The decision as carried out: the plan's, or a wait when the inputs were missing.
    decision: Decision,
    active_job: Option<String>,
    /// The plan's status applies unchanged.
    as_planned: bool,
    /// The Job did not start: something under the object's names is another object's, or
    /// released state the object does not adopt.
    name_hold: Option<NameHold>,
    /// The Job did not start: no runner slot (the object's place, in words).
    queued: Option<String>,
}

/// A pass that waits gives up the claims its object holds for a Job never created
/// (`leases::give_up_unstarted`), reading the run lease only when this process cannot know it
/// holds none (`captf_core::lease::recheck_claims`). `waits` says what for, in the log.
async fn give_up_unstarted(ctx: &Ctx, id: &Ident, key: &ObjectKey, now: Timestamp, waits: &str) -> Result<(), Error> {
    if !ctx.recheck_claims(key, now) {
        return Ok(());
    }
    match leases::give_up_unstarted(&ctx.client, id, &ctx.config.instance, now).await? {
        leases::Unstarted::None => ctx.claims_read(key.clone(), now),
        leases::Unstarted::GaveUp(job) => {
            tracing::info!(
                "gave up the leases {job} held: it was never created and {} {waits}",
                id.what()
            );
            ctx.claims_read(key.clone(), now);
        }
        leases::Unstarted::Left(job) => {
            tracing::info!(
                "left the claims of {job} to the instance that made them moments ago; {} {waits}",
                id.what()
            );
            ctx.forget_claims_read(key);
        }
    }
    Ok(())
}

/// Act phase: start the Job of a `Start`, remove the finalizer of a `Finalize`, or requeue for
/// a `Wait`. `Err`: the pass is over, with this action, and writes nothing more.
async fn act(
    ctx: &Ctx,
    id: &Ident,
    object: &CaptfObject,
    read: &Read,
    plan: &Plan,
    now: Timestamp,
) -> Result<Result<Acted, Action>, Error> {
    let booked_active = plan.booked.active_job().map(str::to_string);
    let mut acted = Acted {
        // Each arm below says how the pass ends.
        action: Action::await_change(),
        decision: plan.decision.clone(),
        active_job: booked_active.clone(),
        as_planned: true,
        name_hold: None,
        queued: None,
    };
    let key = ObjectKey::of(id);
    if !matches!(plan.decision, Decision::Start(_)) {
        // Only a start waits for a runner slot.
        ctx.slots.forget(&key);
        ctx.metrics
            .queued
            .set(i64::try_from(ctx.slots.queued()).unwrap_or(i64::MAX));
    }
    match &plan.decision {
        Decision::Wait(w) => {
            if w.reason != Reason::JobActive {
                give_up_unstarted(ctx, id, &key, now, "waits").await?;
            }
            acted.action = ctx.look_again(id, wake::wake(w, now));
        }
        Decision::Finalize => {
            // A destroyed object's state is emptied as it is released; an orphaned one describes
            // what it kept, for an object that adopts it by this object's UID (docs/trust.md).
            identity::release(&ctx.client, id, adoption::release_empties(&plan.booked)).await?;
            if deletion::remove_finalizer(&ctx.client, id, object).await? {
                ctx.metrics.forget_object(id.kind, &id.namespace, &id.name);
                ctx.forget_claims_read(&key);
                tracing::info!("removed the finalizer of {}", id.what());
                return Ok(Err(Action::await_change()));
            }
            acted.action = Action::requeue(RACE_REQUEUE);
        }
        Decision::Start(start) => {
            // A destroy of an object whose inputs no longer resolve runs with the stored inputs;
            // `decide` waits when there are none, so this finds them unless the Secret changed
            // between the read and now (a look again later, as `decide` would have said).
            let inputs = read.resolved.as_ref().ok().cloned().or_else(|| {
                read.inputs_secret
                    .as_ref()
                    .and_then(captf_core::inputs_secret::stored_inputs)
            });
            match inputs {
                None => {
                    ctx.slots.forget(&key);
                    acted.decision = Decision::Wait(Wait {
                        reason: Reason::InputsUnresolved,
                        op: Some(start.op),
                        requeue_after: Some(captf_core::decide::HOLD_REQUEUE),
                        not_before: None,
                        attempt: Some(start.attempt),
                    });
                    acted.action = ctx.look_again(id, Wake::At(wake::after(now, captf_core::decide::HOLD_REQUEUE)));
                    acted.as_planned = false;
                }
                Some(inputs) => {
                    // The one admission point (`slots`): a slot is taken before the Job is
                    // created, and given back if it is not.
                    let class = captf_core::queue::class_of(start, &plan.booked);
                    let job_name = names::job_name(id.kind, &id.namespace, &id.name, start.op, plan.next_seq);
                    let asked = ctx.slots.ask(&key, class, &job_name, now);
                    ctx.metrics
                        .queued
                        .set(i64::try_from(ctx.slots.queued()).unwrap_or(i64::MAX));
                    let permit = match asked {
                        Ask::Start(permit) => permit,
                        Ask::Queued(place) => {
                            let place = place.to_string();
                            tracing::debug!("{} waits: {place}", id.what());
                            // Waiting is not starting: claims of an earlier pass that never
                            // created its Job are given up, as for any other wait.
                            give_up_unstarted(ctx, id, &key, now, "waits for a runner slot").await?;
                            acted.decision = Decision::Wait(captf_core::queue::queued(start));
                            acted.action =
                                ctx.look_again(id, Wake::At(wake::after(now, captf_core::queue::QUEUE_LOOK)));
                            acted.as_planned = false;
                            acted.queued = Some(place);
                            return Ok(Ok(acted));
                        }
                    };
                    let started = start_job(
                        ctx,
                        id,
                        object,
                        &plan.booked,
                        start,
                        inputs,
                        read.inputs_secret.as_ref(),
                        plan.next_seq,
                    )
                    .await?;
                    match started {
                        Started::Job(name, uid) => {
                            permit.commit(uid);
                            acted.active_job = Some(name);
                            acted.action = ctx.look_again(id, Wake::At(wake::after(now, ACTIVE_REQUEUE)));
                        }
                        Started::Later => {
                            acted.action = Action::requeue(RACE_REQUEUE);
                            acted.as_planned = false;
                        }
                        // What this pass would write describes an object that moved on (or
                        // another incarnation of its name): the next pass starts afresh.
                        Started::Moved => return Ok(Err(Action::requeue(RACE_REQUEUE))),
                        Started::Held(name_hold) => {
                            let hold = captf_core::decide::HOLD_REQUEUE;
                            acted.decision = Decision::Wait(Wait {
                                reason: name_hold.reason(),
                                op: Some(start.op),
                                requeue_after: Some(hold),
                                not_before: None,
                                attempt: Some(start.attempt),
                            });
                            acted.action = ctx.look_again(id, Wake::At(wake::after(now, hold)));
                            acted.as_planned = false;
                            acted.name_hold = Some(name_hold);
                        }
                    }
                }
            }
        }
    }
    Ok(Ok(acted))
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

/// Read the object live and compare it with the object the pass planned from
/// (`captf_core::fence::may_create`).
async fn still_as_read(ctx: &Ctx, id: &Ident, object: &CaptfObject) -> Result<Result<(), fence::Moved>, Error> {
    let live = api::object(&ctx.client, id).await?;
    let read = object_status(object);
    let planned = fence::Seen {
        uid: &id.uid,
        deleting: object.metadata().deletion_timestamp.is_some(),
        active_job: read.and_then(|s| s.active_job.as_deref()),
        last_job_seq: read.and_then(|s| s.last_job_seq),
        served: true,
    };
    let now = live.as_ref().map(|o| fence::Seen {
        uid: o.metadata.uid.as_deref().unwrap_or_default(),
        deleting: o.metadata.deletion_timestamp.is_some(),
        active_job: o.data.pointer("/status/activeJob").and_then(|v| v.as_str()),
        last_job_seq: o
            .data
            .pointer("/status/lastJobSeq")
            .and_then(serde_json::Value::as_u64)
            .and_then(|n| u32::try_from(n).ok()),
        served: captf_core::sharding::serves(ctx.config.served.as_ref(), o.metadata.labels.as_ref()),
    });
    Ok(fence::may_create(&planned, now.as_ref()))
}

/// What starting a Job came to.
enum Started {
    /// The Job's name and the UID the create answered with.
    Job(String, Option<String>),
    /// A lease is held or the Job already exists: requeue, no failure.
    Later,
    /// The object moved on since the pass read it (`captf_core::fence`): the pass ends without
    /// writing its status.
    Moved,
    /// Something under the object's names is another object's, or released state the object
    /// does not adopt (the message names it).
    Held(NameHold),
}

/// docs/rules.md: check what is under the object's names (nothing of another object is used),
/// write the inputs Secret, take the cluster lease (a TerraformCluster) and the run lease, look
/// at the object once more (`captf_core::fence`), create the Job, emit `JobStarted` (and
/// `ForceUnlocked`).
#[allow(clippy::too_many_arguments)]
async fn start_job(
    ctx: &Ctx,
    id: &Ident,
    object: &CaptfObject,
    snap: &Snapshot,
    start: &Start,
    mut inputs_doc: Inputs,
    existing_secret: Option<&Secret>,
    seq: u32,
) -> Result<Started, Error> {
    let job_name = names::job_name(id.kind, &id.namespace, &id.name, start.op, seq);
    let own = own_identity(ctx, object, id);
    let adopt = adoption::adopts(object.metadata());
    let (run_lease_read, found) = match identity::check(&ctx.client, id, existing_secret, own, adopt).await? {
        Claims::Held(hold) => return Ok(Started::Held(hold)),
        Claims::Bound {
            state_secret,
            lock_lease,
            run_lease,
            found,
        } => {
            // Binding the state to this object outlives it (the state Secret has no owner): not
            // for an object that went meanwhile (`captf_core::fence`). Nothing is taken yet.
            if (state_secret.is_some() || lock_lease.is_some())
                && let Err(moved) = still_as_read(ctx, id, object).await?
            {
                tracing::info!("not starting {job_name}: {moved}");
                return Ok(Started::Moved);
            }
            identity::stamp(&ctx.client, id, state_secret, lock_lease).await?;
            (run_lease, found)
        }
    };
    // The platform's policies beside the object's own, for an apply: read now, so a changed
    // policy reaches this plan. Without them no apply starts (a plan is never let through
    // unchecked); the pass fails and is retried.
    if let (Some(dir), Op::Apply) = (&ctx.config.plan_policies_dir, start.op) {
        let platform = super::plan_policies::load(dir).map_err(|why| Error::Pending {
            what: format!("the platform's policies on plans ({why})"),
            why: "they cannot be read",
        })?;
        inputs_doc.policies.extend(platform);
    }
    let inputs_doc = &inputs_doc;
    inputs::write(&ctx.client, id, inputs_doc, existing_secret).await?;
    // Read before any lease is taken, like the inputs: a failed read leaves nothing to undo.
    let env_from_secret_names =
        api::env_from_secret_names(&ctx.client, &id.namespace, object.terraform_spec().jobs.as_ref()).await?;
    let now = ctx.clock.now();
    let active = snap.status.active_job.as_deref();
    let owner = owner_reference(id.kind, &id.name, &id.uid);
    let run_lease = names::run_lease_name(&id.suffix);
    // From here this process may leave a claim behind: the next wait reads the lease again.
    ctx.forget_claims_read(&ObjectKey::of(id));
    if let Take::Held(why) = leases::take_read(
        &ctx.client,
        run_lease_read.map(|l| *l),
        &id.namespace,
        &run_lease,
        &job_name,
        active,
        Some(owner),
        &ctx.config.instance,
        now,
    )
    .await?
    {
        tracing::info!("not starting {job_name}: {why}");
        return Ok(Started::Later);
    }
    // The cluster lease: a TerraformCluster's Job takes it, a member's Job joins it; either is
    // refused while the other side runs (an apply or destroy of the cluster waits for members).
    if let Some(c) = &id.cluster_name {
        let cl = names::cluster_lease_name(&id.namespace, c);
        let took = match id.kind {
            Kind::TerraformCluster => {
                let exclusive = matches!(start.op, Op::Apply | Op::Destroy);
                leases::take_cluster(&ctx.client, id, c, &cl, &job_name, &run_lease, active, exclusive, now).await?
            }
            _ => leases::join_cluster(&ctx.client, &id.namespace, &cl, &job_name, &run_lease).await?,
        };
        if let Take::Held(why) = took {
            tracing::info!("not starting {job_name}: {why}");
            leases::release(&ctx.client, &id.namespace, &run_lease, &job_name).await?;
            return Ok(Started::Later);
        }
    }
    // The last look (`captf_core::fence`): the object may have moved on while this pass ran.
    // Before the runner identity and the state objects, which would outlive an object that is
    // gone (the state Secret has no owner) and bind its name to it.
    if let Err(moved) = still_as_read(ctx, id, object).await? {
        tracing::info!("not starting {job_name}: {moved}");
        leases::release_job(&ctx.client, id, &job_name).await?;
        return Ok(Started::Moved);
    }
    let spec = object.terraform_spec();
    if own {
        identity::ensure_identity(&ctx.client, id, &ctx.config.runner_account_annotations, &found).await?;
    }
    identity::ensure_state_objects(&ctx.client, id, &found).await?;
    let hash = inputs_doc.hash();
    let sensitive = captf_core::inputs::sensitive_variables(spec, inputs_doc);
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
        module_credentials: spec.module.credentials.as_ref().map(|c| c.secret_ref.name.as_str()),
        state_encryption: spec.state_encryption.as_ref(),
        env_from_secret_names: &env_from_secret_names,
    });
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &id.namespace);
    let uid = match api.create(&PostParams::default(), &job).await {
        Ok(created) => created.metadata.uid,
        Err(e) if errors::is_conflict(&e) => {
            // Ours (a pass before this one created it): its watch event follows. Another
            // object's, under this object's next name: never booked, and no Job of ours can
            // take that name.
            let existing = api::job(&ctx.client, &id.namespace, &job_name).await?;
            if let Some(j) = existing.filter(|j| !binding::owned_by(&j.metadata, &id.uid)) {
                leases::release(&ctx.client, &id.namespace, &run_lease, &job_name).await?;
                let why = match binding::verdict(Some(&j.metadata), Binding::Owner, &id.uid, &History::default()) {
                    Verdict::Foreign(why) => why,
                    _ => "is not owned by this object".to_string(),
                };
                return Ok(Started::Held(NameHold::Conflict(binding::conflict_message(
                    &format!("Job {}/{job_name}", id.namespace),
                    &why,
                ))));
            }
            return Ok(Started::Later);
        }
        Err(e) => {
            return Err(Error::api(
                ApiAction::CreateJob,
                format!("{}/{job_name}", id.namespace),
                e,
            ));
        }
    };
    tracing::info!(job = %job_name, op = %start.op, reason = %start.reason, attempt = start.attempt, "started Job for {}", id.what());
    ctx.event(
        id,
        false,
        events::reason::JOB_STARTED,
        events::action::START_JOB,
        &format!(
            "started Job {job_name} ({} because {}, attempt {})",
            start.op, start.reason, start.attempt
        ),
        Some(&job_name),
    )
    .await;
    if let Some(note) = captf_core::book::backoff_skipped_note(start, snap, &job_name) {
        ctx.event(
            id,
            true,
            events::reason::BACKOFF_SKIPPED,
            events::action::START_JOB,
            &note,
            Some(&job_name),
        )
        .await;
    }
    if let Some(note) = captf_core::book::approval_note(start, &job_name) {
        ctx.event(
            id,
            false,
            events::reason::PLAN_APPROVED,
            events::action::START_JOB,
            &note,
            Some(&job_name),
        )
        .await;
    }
    if let Some(lock_id) = &start.force_unlock_id {
        ctx.metrics.force_unlock(id.kind);
        let holder = snap.lock.holder().unwrap_or("");
        ctx.event(
            id,
            true,
            events::reason::FORCE_UNLOCKED,
            events::action::START_JOB,
            &format!("Job {job_name} force-unlocks the stale state lock {lock_id} held by {holder}"),
            Some(&job_name),
        )
        .await;
    }
    Ok(Started::Job(job_name, uid))
}

/// A controller for one kind: its objects from the kind's store, triggered by them, by its Jobs
/// (the Jobs store of the kind, deletions included), by its inputs Secrets and by the Cluster API
/// owners that concern it (metadata only, [`owners`]).
fn controller_for<K: CaptfKind>(
    ctx: Arc<Ctx>,
    feeds: &FeedStreams,
    objects: (Writer<Meta<K>>, Store<Meta<K>>),
    jobs: Writer<StoredJob>,
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
    let store = reader.clone();
    // Under a simulated clock: on every change of it, the objects whose wake it reached.
    let wakes = {
        let ctx = ctx.clone();
        ctx.clock.jumps().flat_map(move |()| {
            let due = ctx.due(K::KIND);
            futures::stream::iter(
                due.into_iter()
                    .map(|k| ObjectRef::<Meta<K>>::new(&k.name).within(&k.namespace)),
            )
        })
    };
    // When a runner slot frees (a Job finished or went, a start was given up): the objects of
    // this kind that may take it now, at once rather than at their next look.
    let slot_wakes = {
        let ctx = ctx.clone();
        let ns = ns.clone();
        ctx.slots.freed().flat_map(move |()| {
            let due = ctx.slots.due(K::KIND, ns.as_deref(), ctx.clock.now());
            futures::stream::iter(
                due.into_iter()
                    .map(|k| ObjectRef::<Meta<K>>::new(&k.name).within(&k.namespace)),
            )
        })
    };
    // A member kind: the members of a cluster whose exported outputs may have changed, at once.
    let export_wakes = {
        let store = store.clone();
        let rx = (K::KIND != Kind::TerraformCluster).then(|| ctx.exports_changed.subscribe());
        futures::stream::unfold(rx, |rx| async move {
            let mut rx = rx?;
            loop {
                match rx.recv().await {
                    Ok(changed) => return Some((changed, Some(rx))),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .flat_map(move |(ns, cluster)| {
            futures::stream::iter(
                store
                    .state()
                    .into_iter()
                    .filter(|o| {
                        o.metadata.namespace.as_deref() == Some(ns.as_str())
                            && o.metadata.labels.as_ref().and_then(|l| l.get(keys::LABEL_CLUSTER_NAME))
                                == Some(&cluster)
                    })
                    .map(|o| ObjectRef::from_obj(&*o))
                    .collect::<Vec<_>>(),
            )
        })
    };
    // Jobs and Secrets wake the object that owns them by group and kind, whatever API version
    // the reference names: those an earlier release made name its version (`owns` would match
    // the version too, and an upgrade would leave them waking nothing).
    fn owner<K: CaptfKind>(meta: &kube::core::ObjectMeta) -> Option<ObjectRef<Meta<K>>> {
        let name = captf_core::job::owner_name(meta.owner_references.as_deref().unwrap_or_default(), K::KIND)?;
        Some(ObjectRef::new(name).within(meta.namespace.as_deref()?))
    }
    let mut controller = Controller::for_stream(feeds.kind_stream(writer, api, ctx.config.selector.as_deref()), reader)
        .watches_stream(
            feeds.jobs_stream(K::KIND, jobs, jobs_api).map(|j| {
                j.map(|j| {
                    kube::core::PartialObjectMetaExt::into_request_partial::<Job>(kube::Resource::meta(&j).clone())
                })
            }),
            |j: PartialObjectMeta<Job>| owner::<K>(&j.metadata),
        )
        .watches(secrets, watcher::Config::default().labels(&selector), |s: Secret| {
            owner::<K>(&s.metadata)
        });
    for owner in OwnerKind::ALL.into_iter().filter(|o| o.concerns(K::KIND)) {
        let store = store.clone();
        let trigger = owners::owner_changes(client.clone(), ns.clone(), owner);
        controller = controller.watches_stream_with(
            trigger,
            move |o: PartialObjectMeta<DynamicObject>| {
                let ns = o.metadata.namespace.clone().unwrap_or_default();
                let name = o.metadata.name.clone().unwrap_or_default();
                store
                    .state()
                    .into_iter()
                    .filter(|obj| owners::wakes(owner, &ns, &name, &obj.metadata))
                    .map(|obj| ObjectRef::from_obj(&*obj))
                    .collect::<Vec<_>>()
            },
            // Names the owner in the controller's reconcile reasons only; the watch uses the
            // version discovery found.
            owners::owner_api(owner, "v1beta2"),
        );
    }
    let controller = controller
        .with_config(ControllerConfig::default().concurrency(ctx.config.concurrency))
        .reconcile_on(wakes)
        .reconcile_on(slot_wakes)
        .reconcile_on(export_wakes)
        // Each time this replica becomes the leader.
        .reconcile_all_on(super::clock::changes(ctx.terms.clone()))
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

//! The bookkeeping pass's writes (docs/rules.md): every finished Job without
//! `captf.io/outcome` is booked once, oldest first. The annotation write with the Job's
//! resourceVersion is the "once": events and metrics are emitted only by the write that set it.
//! What booking changes is `captf_core::book`'s; this module makes the writes.

use captf_read::api;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PropagationPolicy};
use serde_json::{Value, json};

use captf_shared::types::{CaptfObject, TerraformStatus};
use captf_shared::{Op, keys, names};

use super::ctx::Ctx;
use super::events::{self, Emission};
use super::leases;
use super::notifications::{self, Happened};
use captf_core::Outcome;
use captf_core::book::{attempt_of, booking_event, capi_spec_patch, status_outputs};
use captf_core::ident::Ident;
use captf_core::plan::{Accounted, Plan};
use captf_core::record::{self, Accounting, JobRecord};
use captf_read::errors::{self, ApiAction, Error};

/// Carry out the booking of a [`Plan`], oldest first: for a `Book`, the annotation write with the
/// Job's resourceVersion is the "once" of the once-only metrics (`captf_jobs_finished_total`,
/// `captf_job_attempts`); for both, the outcome's Event under a fixed name (AlreadyExists when a
/// replay makes it again), the gauges, the Cluster API
/// fields and the lease release follow, then the durable annotations on the inputs Secret. The
/// status effects are already in the plan's status: they only count once the status patch at
/// the end of the pass carries them together with the new watermark, so a pass that dies after
/// an annotation is replayed by the next one. `false` when a finished Job could not be booked
/// (409: another writer booked it, or it changed): the pass stops and is retried.
pub async fn execute(ctx: &Ctx, id: &Ident, object: &CaptfObject, jobs: &[Job], plan: &Plan) -> Result<bool, Error> {
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &id.namespace);
    for (i, a) in plan.accounting.iter().enumerate() {
        let Some(job) = jobs.iter().find(|j| j.metadata.name.as_deref() == Some(a.job.as_str())) else {
            continue;
        };
        match a.step {
            Accounting::Book => {
                let patch = json!({"metadata": {
                    "resourceVersion": job.metadata.resource_version,
                    "annotations": {keys::ANNOTATION_OUTCOME: a.outcome.as_str()},
                }});
                match api.patch(&a.job, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(_) => {}
                    Err(e) if errors::is_conflict(&e) || errors::is_not_found(&e) => return Ok(false),
                    Err(e) => {
                        return Err(Error::api(
                            ApiAction::PatchJob,
                            format!("{}/{}", id.namespace, a.job),
                            e,
                        ));
                    }
                }
                // This write set the outcome: the once-only metrics happen here only.
                tracing::info!(job = %a.job, outcome = %a.outcome, "booked Job");
                ctx.metrics.job_finished(id.kind, a.op, a.outcome, attempt_of(job));
                // Once, with the booking: a replay does not notify again. Only queued here.
                if let Some(rec) = plan.booked.jobs.iter().find(|r| r.name == a.job) {
                    let status = &plan.booked.status;
                    ctx.notify(
                        id,
                        &Happened::Booked {
                            rec,
                            outcome: a.outcome,
                            status,
                            failures: notifications::failures_after(&plan.accounting, i, status),
                        },
                    );
                }
            }
            Accounting::Replay => {
                tracing::info!(job = %a.job, outcome = %a.outcome, "replaying the booking effects of Job");
            }
        }
        // The outcome's Event, after the outcome is written (so it says what was booked) and
        // again on every replay, under a name of its own: a pass that died or failed before the
        // status took the booking in replays it, and an Event already made is AlreadyExists.
        let rec = plan.booked.jobs.iter().find(|r| r.name == a.job);
        if let Some(ev) = rec.and_then(|r| booking_event(r, a.outcome)) {
            let name = events::booking_event_name(&a.job, job.metadata.uid.as_deref().unwrap_or_default());
            let note = ev.note;
            let e = Emission {
                warning: ev.warning,
                reason: ev.reason,
                action: captf_shared::events::action::BOOK,
                note: &note,
                job: Some(&a.job),
            };
            ctx.events
                .publish_once(id, &e, ctx.clock.now(), &name)
                .await
                .map_err(|e| Error::api(ApiAction::CreateEvent, format!("{}/{}", id.namespace, a.job), e))?;
        }
        record_effects(ctx, id, object, a, &plan.booked.status).await?;
        if leases::release_job(&ctx.client, id, &a.job).await? {
            // The run lease names no Job: this pass's wait has no claim to look for.
            ctx.claims_read(super::retry::ObjectKey::of(id), ctx.clock.now());
        }
    }
    super::inputs::annotate(&ctx.client, id, &plan.durable_changes).await?;
    Ok(true)
}

/// Read the outputs that did not fit a runner's result from the outputs Secret, for the
/// succeeded applies and refreshes this pass will book or replay (part of the pass's reads), with
/// `from_secrets` (the inputs' values that came from Secrets) masked in them.
pub async fn read_outputs(
    ctx: &Ctx,
    id: &Ident,
    records: &mut [JobRecord],
    baseline: u32,
    from_secrets: &[String],
) -> Result<(), Error> {
    for (i, _) in record::accounting_plan(records, baseline) {
        if let Some(outcome) = records[i].outcome {
            read_outputs_secret(ctx, id, &mut records[i], outcome, from_secrets).await?;
        }
    }
    Ok(())
}

/// A successful apply or refresh whose outputs did not fit the runner's result: read them from
/// the outputs Secret the runner wrote.
async fn read_outputs_secret(
    ctx: &Ctx,
    id: &Ident,
    rec: &mut JobRecord,
    outcome: Outcome,
    from_secrets: &[String],
) -> Result<(), Error> {
    if outcome == Outcome::Succeeded
        && matches!(rec.op, Op::Apply | Op::Refresh)
        && let Some(result) = rec.result.as_mut()
        && result.outputs_in_secret
        && result.outputs.is_none()
    {
        let name = names::outputs_secret_name(&id.suffix);
        let secret = api::secret(&ctx.client, &id.namespace, &name).await?;
        result.outputs = secret
            .and_then(|s| s.data)
            .and_then(|data| status_outputs(&data, from_secrets));
    }
    Ok(())
}

/// The idempotent side effects of one booked Job beyond the status: the gauges and the
/// object's Cluster API fields (the same whether booked now or replayed). `status` is the
/// status after booking.
async fn record_effects(
    ctx: &Ctx,
    id: &Ident,
    object: &CaptfObject,
    a: &Accounted,
    status: &TerraformStatus,
) -> Result<(), Error> {
    let n = status.consecutive_failures.map_or(0, |c| c.get(a.op));
    ctx.metrics
        .set_consecutive_failures(id.kind, &id.namespace, &id.name, a.op, n);
    if a.outcome == Outcome::Succeeded {
        if let Some(when) = status.last_success_time.as_ref().and_then(|m| m.get(a.op.as_str())) {
            ctx.metrics.set_last_success(
                id.kind,
                &id.namespace,
                &id.name,
                a.op,
                when.0.as_millisecond() as f64 / 1000.0,
            );
        }
        if a.op == Op::Apply
            && let Some(outputs) = status.outputs.clone()
            && let Some(p) = capi_spec_patch(object, &outputs)
        {
            patch_object(ctx, id, &p).await?;
        }
        if a.op == Op::Apply && !object.exports().is_empty() {
            warn_missing_exports(ctx, id, object, &a.job).await?;
        }
    }
    Ok(())
}

/// After a TerraformCluster's successful apply: a Warning (once per apply) naming each export its
/// outputs Secret lacks, since its members wait for them (`captf_core::exports::missing_exports`).
async fn warn_missing_exports(ctx: &Ctx, id: &Ident, object: &CaptfObject, job: &str) -> Result<(), Error> {
    let Some(doc) = api::outputs_document(&ctx.client, &id.namespace, &id.suffix, &id.uid).await? else {
        return Ok(());
    };
    let missing = captf_core::exports::missing_exports(object.exports(), &doc);
    if !missing.is_empty() {
        let note = captf_core::exports::missing_exports_note(job, &missing);
        let event = format!("{}.export-missing", job.trim_end_matches(['.', '-']));
        ctx.event_once(id, captf_shared::events::reason::EXPORT_MISSING, &note, &event)
            .await;
    }
    Ok(())
}

/// Merge-patch the object itself (the Cluster API spec fields).
pub async fn patch_object(ctx: &Ctx, id: &Ident, patch: &Value) -> Result<(), Error> {
    let api: Api<kube::core::DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &id.namespace,
        &captf_read::kinds::api_resource(id.kind),
    );
    api.patch(&id.name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
        .map_err(|e| Error::api(ApiAction::PatchObject, id.what(), e))
}

/// Delete the Jobs the plan prunes (docs/rules.md, "Pruning"), with propagationPolicy
/// Background; 404 is success.
pub async fn prune(ctx: &Ctx, id: &Ident, names: &[String]) -> Result<(), Error> {
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &id.namespace);
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    for name in names {
        match api.delete(name, &dp).await {
            Ok(_) => tracing::debug!(job = %name, "pruned Job"),
            Err(e) if errors::is_not_found(&e) => {}
            Err(e) => return Err(Error::api(ApiAction::DeleteJob, format!("{}/{name}", id.namespace), e)),
        }
    }
    Ok(())
}

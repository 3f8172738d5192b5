//! An apply Job deleted while it ran (docs/rules.md): confirmed with live reads (the
//! Job is NotFound, and the object's live `status.activeJob` still names it), then recorded on
//! the durable inputs Secret. The rule itself is the core's `check_active_job`.

use captf_read::api;
use std::collections::BTreeMap;

use captf_shared::keys;

use super::ctx::Ctx;
use super::leases;
use captf_core::ident::Ident;
use captf_core::interrupted::{ActiveJobCheck, ActiveJobReads, Checked, LiveJob, check_active_job};
use captf_read::errors::Error;

/// Run the check for a `status.activeJob` that is not among the listed Jobs.
pub async fn check(ctx: &Ctx, id: &Ident, active_job: Option<&str>, listed: &[String]) -> Result<Checked, Error> {
    let Some(job) = active_job.filter(|j| !j.is_empty()) else {
        return Ok(Checked::Nothing);
    };
    if listed.iter().any(|n| n == job) {
        return Ok(Checked::Nothing);
    }
    let live_job = match api::job(&ctx.client, &id.namespace, job).await? {
        Some(_) => LiveJob::Found,
        None => LiveJob::NotFound,
    };
    let live = api::object(&ctx.client, id).await?;
    let live_active = live
        .as_ref()
        .and_then(|o| o.data.pointer("/status/activeJob"))
        .and_then(|v| v.as_str())
        .map(str::to_string);
    let reads = ActiveJobReads {
        kind: id.kind,
        namespace: &id.namespace,
        name: &id.name,
        active_job: Some(job),
        live_job,
        live_active_job: live_active.as_deref(),
        deleted_by_controller: false,
    };
    let out = match check_active_job(&reads) {
        ActiveJobCheck::Nothing if live_job == LiveJob::NotFound => return Ok(Checked::Stale),
        ActiveJobCheck::Nothing => return Ok(Checked::Nothing),
        ActiveJobCheck::RecordInterruptedApply { job } => {
            let ann = BTreeMap::from([(keys::ANNOTATION_INTERRUPTED_APPLY, Some(job.clone()))]);
            super::inputs::annotate(&ctx.client, id, &ann).await?;
            tracing::warn!(job = %job, "{}", captf_core::interrupted::interrupted_apply_message(&job));
            Checked::Recorded(job)
        }
        ActiveJobCheck::Forget { job } => Checked::Forgot(job),
    };
    let job = match &out {
        Checked::Recorded(j) | Checked::Forgot(j) => j.as_str(),
        _ => return Ok(out),
    };
    leases::release_job(&ctx.client, id, job).await?;
    Ok(out)
}

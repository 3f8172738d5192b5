//! One reconcile pass, planned: [`plan`] is the single PURE function that says everything a pass
//! does with what it read (docs/architecture.md, "The path of one object"). The controller
//! executes a [`Plan`] against the API; `captf-controller explain` prints the same [`Plan`]
//! computed from files. Neither assembles booking, pruning, the decision or the status itself,
//! so the two cannot drift apart (a property test in `tests/plan_agreement.rs` holds them to it).
//!
//! The order is the controller's: book (and replay) finished Jobs into the status and the
//! durable record, then decide on the history as read, then prune what the rules no longer
//! need, then compute the status to write.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;

use captf_shared::Op;
use captf_shared::keys;
use captf_shared::types::TerraformStatus;

use crate::core::record::{self, Accounting};
use crate::core::snapshot::DurableRecord;
use crate::core::{Decision, Outcome, Snapshot, decide, prune};
use crate::runtime::{book, status};

/// One finished Job the pass books (or whose booking effects it replays).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accounted {
    pub job: String,
    pub op: Op,
    pub seq: u32,
    pub outcome: Outcome,
    /// `Book`: write `captf.io/outcome`, then the events and once-only metrics; `Replay`: only
    /// the idempotent effects again.
    pub step: Accounting,
}

/// Everything one pass does.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The finished Jobs to book or replay, oldest first.
    pub accounting: Vec<Accounted>,
    /// The annotations booking writes on the inputs Secret (`None` removes one).
    pub durable_changes: BTreeMap<&'static str, Option<String>>,
    /// The snapshot after booking: the status and durable record with the booking effects, the
    /// booked Jobs marked. This is what `decide` saw.
    pub booked: Snapshot,
    /// Whether the state lock was checked (only while no Job of the object is active).
    pub lock_checked: bool,
    pub decision: Decision,
    /// The sequence number a `Start` gives its Job: one more than any seen.
    pub next_seq: u32,
    /// The Jobs to delete after booking.
    pub prune: Vec<String>,
    /// The status to write, when a `Start` creates its Job (see [`status_with`] otherwise).
    pub status: TerraformStatus,
}

impl Plan {
    /// The name of the Job a `Start` creates.
    pub fn new_job(&self) -> Option<String> {
        match &self.decision {
            Decision::Start(st) => Some(captf_shared::names::job_name(
                self.booked.kind,
                &self.booked.namespace,
                &self.booked.name,
                st.op,
                self.next_seq,
            )),
            _ => None,
        }
    }
}

/// Plan one pass over `snap` (the object, its Jobs as read, the status and durable record as
/// read, the lock and the holds) at `now`. `stored_inputs_hash` is the hash of the inputs now in
/// the inputs Secret, which a successful apply records as applied when it ran with them.
pub fn plan(snap: &Snapshot, stored_inputs_hash: Option<&str>, now: Timestamp) -> Plan {
    let (booked, accounting, durable_changes) = book_pass(snap, stored_inputs_hash, now);
    let lock_checked = booked.active_job().is_none();
    let decision = decide(&booked, now);
    let next_seq = booked
        .jobs
        .iter()
        .map(|r| r.seq)
        .chain(booked.status.last_job_seq)
        .max()
        .unwrap_or(0)
        .saturating_add(1);
    let prunable: Vec<_> = booked
        .jobs
        .iter()
        .filter(|r| r.booked || !r.is_finished())
        .cloned()
        .collect();
    let prune = prune::prune(
        &prunable,
        booked.spec.successful_jobs_history_limit,
        booked.spec.failed_limit,
    );
    let mut p = Plan {
        accounting,
        durable_changes,
        booked,
        lock_checked,
        decision,
        next_seq,
        prune,
        status: TerraformStatus::default(),
    };
    let active = p.new_job().or_else(|| p.booked.active_job().map(str::to_string));
    p.status = status_with(&p, &p.decision, active.as_deref(), now);
    if p.decision.is_start() {
        p.status.last_job_seq = Some(p.next_seq);
    }
    p
}

/// The status to write after a pass that ended with `decision` and `active_job` (the plan's own
/// when the `Start` created its Job; the controller's when a lease was held or the inputs were
/// missing).
pub fn status_with(p: &Plan, decision: &Decision, active_job: Option<&str>, now: Timestamp) -> TerraformStatus {
    let current = p.booked.inputs_hash.known();
    status::compute(&p.booked, decision, active_job, current, p.lock_checked, now)
}

/// Booking, PURE: the effects of every finished Job to book or replay, oldest first, on the
/// status and the durable record.
fn book_pass(
    snap: &Snapshot,
    stored_inputs_hash: Option<&str>,
    now: Timestamp,
) -> (Snapshot, Vec<Accounted>, BTreeMap<&'static str, Option<String>>) {
    let mut s = snap.clone();
    let baseline = record::watermark_baseline(&s.jobs, record::status_watermark(&s.status));
    record::mark_accounted(&mut s.jobs, baseline);
    let recorded_interrupted = s.durable.interrupted_apply.clone();
    let mut watermark = baseline;
    let mut accounting = Vec::new();
    let mut changes = BTreeMap::new();
    for (i, step) in record::accounting_plan(&s.jobs, baseline) {
        let rec = &s.jobs[i];
        let Some(outcome) = rec.outcome else { continue };
        book::apply_to_status(&mut s.status, rec, outcome, now);
        changes.extend(book::durable_changes(
            s.kind,
            &s.namespace,
            &s.name,
            rec,
            outcome,
            stored_inputs_hash,
            recorded_interrupted.as_deref(),
        ));
        accounting.push(Accounted {
            job: rec.name.clone(),
            op: rec.op,
            seq: rec.seq,
            outcome,
            step,
        });
        watermark = record::watermark_after(watermark, [rec.seq]);
        s.jobs[i].booked = true;
    }
    s.status.last_booked_job_seq = Some(watermark);
    s.status.active_job = s.active_job().map(str::to_string);
    apply_durable(&mut s.durable, &changes);
    (s, accounting, changes)
}

/// The durable record after the annotations booking writes.
fn apply_durable(d: &mut DurableRecord, changes: &BTreeMap<&'static str, Option<String>>) {
    for (k, v) in changes {
        let v = v.clone().filter(|v| !v.is_empty());
        match *k {
            keys::ANNOTATION_APPLIED_INPUTS_HASH => d.applied_inputs_hash = v,
            keys::ANNOTATION_INTERRUPTED_APPLY => d.interrupted_apply = v,
            keys::ANNOTATION_LAST_DRIFT_CHECK => d.last_drift_check = v.and_then(|t| t.parse().ok()),
            _ => {}
        }
    }
}

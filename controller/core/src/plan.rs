//! One reconcile pass, planned: [`plan`] is the single PURE function that says everything a pass
//! does with what it read (docs/architecture.md, "The path of one object"). The controller
//! executes a [`Plan`] against the API; `captf-controller explain` prints the same [`Plan`]
//! computed from files. Neither assembles booking, pruning, the decision or the status itself,
//! so the two cannot drift apart (the property test `explain_plans_exactly_what_a_controller_pass_does`
//! below holds them to it).
//!
//! The order is the controller's: book (and replay) finished Jobs into the status and the
//! durable record, then decide on the history as read, then prune what the rules no longer
//! need, then compute the status to write.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;

use captf_shared::Op;
use captf_shared::keys;
use captf_shared::types::TerraformStatus;

use crate::record::{self, Accounting};
use crate::snapshot::DurableRecord;
use crate::{Decision, Outcome, Snapshot, decide, prune};
use crate::{book, status};

/// One finished Job the pass books (or whose booking effects it replays).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accounted {
    pub job: String,
    pub op: Op,
    pub seq: u32,
    pub outcome: Outcome,
    /// `Book`: write `captf.io/outcome`, then the once-only metrics and the outcome's Event (a
    /// fixed name); `Replay`: the Event again (AlreadyExists once made) and
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
    /// The request annotations a booked Job used up, to remove from the object
    /// ([`crate::requests`]).
    pub used_requests: Vec<&'static str>,
    /// The requests dated later than the clock allows, which this pass ignored
    /// ([`crate::requests::take_future`]).
    pub future_requests: Vec<crate::requests::FutureRequest>,
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
/// read, the lock and the holds) at `now`. The hash of the inputs now in the inputs Secret
/// ([`Snapshot::stored_inputs_hash`]) is what a successful apply records as applied when it ran
/// with them.
pub fn plan(snap: &Snapshot, now: Timestamp) -> Plan {
    let (booked, accounting, durable_changes, future_requests) = book_pass(snap, now);
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
        used_requests: Vec::new(),
        future_requests,
    };
    p.used_requests = crate::requests::used(&p.booked);
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
#[allow(clippy::type_complexity)]
fn book_pass(
    snap: &Snapshot,
    now: Timestamp,
) -> (
    Snapshot,
    Vec<Accounted>,
    BTreeMap<&'static str, Option<String>>,
    Vec<crate::requests::FutureRequest>,
) {
    let mut s = snap.clone();
    let future = crate::requests::take_future(&mut s, now);
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
            s.stored_inputs_hash.as_deref(),
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
    (s, accounting, changes, future)
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

#[cfg(test)]
mod agreement {
    //! `explain` and a controller pass agree. The controller side is what `reconcile_object`
    //! runs between its reads and its writes (`records_of`, `snapshot_of`, then `plan`); its
    //! result is the list of API calls the pass makes (outcome annotations, Job deletions, the
    //! Job it creates, the status patch). The `explain` side is the CLI's code over the same
    //! objects written to files.
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::assemble::{records_of, snapshot_of};
    use crate::explain::{ExplainInput, explain};
    use crate::ident::Ident;
    use crate::interrupted::Checked;
    use crate::lock::LockState;
    use crate::snapshot::{Holds, InputsHash};
    use captf_shared::types::CaptfObject;
    use captf_shared::validation::parse_object;
    use captf_shared::{Kind, names};
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Secret;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    const NS: &str = "default";
    const NAME: &str = "prod-eu";
    const CURRENT: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const OTHER: &str = "2222222222222222222222222222222222222222222222222222222222222222";
    const T0: i64 = 1_800_000_000;

    fn at(secs: i64) -> String {
        Timestamp::from_second(T0 + secs).unwrap().to_string()
    }

    /// One generated Job: op, outcome index (into `Outcome::ALL`, or none: still active),
    /// booked, minutes after T0 it finished, a remediating apply.
    type GenJob = (usize, Option<usize>, bool, i64, bool);

    fn job_json(seq: u32, (op, outcome, booked, minutes, remediating): GenJob) -> Value {
        let op = Op::ALL[op % Op::ALL.len()];
        let name = names::job_name(Kind::TerraformCluster, NS, NAME, op, seq);
        let mut annotations = serde_json::Map::new();
        let mut conditions = vec![];
        if let Some(o) = outcome {
            let o = Outcome::ALL[o % Outcome::ALL.len()];
            if booked {
                annotations.insert("captf.io/outcome".into(), json!(o.as_str()));
            }
            let (t, reason) = match o {
                Outcome::Succeeded => ("Complete", None),
                Outcome::Deadline => ("Failed", Some("DeadlineExceeded")),
                _ => ("Failed", Some("BackoffLimitExceeded")),
            };
            conditions
                .push(json!({"type": t, "status": "True", "reason": reason, "lastTransitionTime": at(minutes * 60)}));
        }
        if remediating && op == Op::Apply {
            annotations.insert("captf.io/drift-remediation".into(), json!("true"));
        }
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {
                "name": name, "namespace": NS,
                "creationTimestamp": at(minutes * 60 - 30),
                "labels": {"captf.io/kind": "TerraformCluster", "captf.io/object": names::object_id(Kind::TerraformCluster, NS, NAME), "captf.io/op": op.as_str()},
                "annotations": annotations,
            },
            "status": {"conditions": conditions},
        })
    }

    #[derive(Debug, Clone)]
    struct Case {
        failed_limit: i32,
        successful_limit: i32,
        remediation_auto: bool,
        jobs: Vec<GenJob>,
        consecutive: u32,
        watermark: Option<u32>,
        written: bool,
        applied_current: bool,
        drift_check: Option<i64>,
        now_minutes: i64,
    }

    fn cases() -> impl Strategy<Value = Case> {
        (
            (0i32..4, 0i32..3, any::<bool>()),
            prop::collection::vec(
                (
                    0usize..4,
                    prop::option::weighted(0.9, 0usize..6),
                    any::<bool>(),
                    0i64..5,
                    any::<bool>(),
                ),
                0..9,
            ),
            (
                0u32..8,
                prop::option::of(0u32..10),
                any::<bool>(),
                any::<bool>(),
                prop::option::of(0i64..60),
            ),
            0i64..200,
        )
            .prop_map(
                |(
                    (failed_limit, successful_limit, remediation_auto),
                    jobs,
                    (consecutive, watermark, written, applied_current, drift_check),
                    now_minutes,
                )| Case {
                    failed_limit,
                    successful_limit,
                    remediation_auto,
                    jobs,
                    consecutive,
                    watermark,
                    written,
                    applied_current,
                    drift_check,
                    now_minutes,
                },
            )
    }

    /// The objects of a case: the TerraformCluster, its Jobs (finished in order of their
    /// sequence numbers, the newest one possibly still active) and its inputs Secret.
    fn objects(c: &Case) -> (Value, Vec<Value>, Value) {
        let n = c.jobs.len();
        let mut minutes = 0;
        let jobs: Vec<Value> = c
            .jobs
            .iter()
            .enumerate()
            .map(|(i, j)| {
                minutes += j.3 + 1;
                // Only the newest Job may still be running.
                let outcome = if i + 1 == n { j.1 } else { j.1.or(Some(1)) };
                job_json((i + 1) as u32, (j.0, outcome, j.2, minutes, j.4))
            })
            .collect();
        let mut status = json!({});
        if c.written {
            status = json!({
                "conditions": [{"type": "Ready", "status": "False", "reason": "NotApplied", "message": "", "lastTransitionTime": at(0)}],
                "consecutiveFailures": {"apply": c.consecutive, "refresh": 0, "drift": 0, "destroy": 0},
            });
            if let Some(w) = c.watermark {
                status["lastBookedJobSeq"] = json!(w.min(n as u32));
            }
        }
        let object = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
            "metadata": {"name": NAME, "namespace": NS, "generation": 1, "uid": "u-1"},
            "spec": {
                "module": {"source": "git::https://example.com/m.git"},
                "jobs": {"failedJobsHistoryLimit": c.failed_limit, "successfulJobsHistoryLimit": c.successful_limit},
                "drift": {"interval": "30m", "remediation": if c.remediation_auto { "Auto" } else { "Manual" }},
            },
            "status": status,
        });
        let mut annotations = serde_json::Map::new();
        annotations.insert(
            "captf.io/applied-inputs-hash".into(),
            json!(if c.applied_current { CURRENT } else { OTHER }),
        );
        if let Some(m) = c.drift_check {
            annotations.insert("captf.io/last-drift-check".into(), json!(at(m * 60)));
        }
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": names::inputs_secret_name(&names::suffix(Kind::TerraformCluster, NS, NAME)), "namespace": NS, "annotations": annotations},
        });
        (object, jobs, secret)
    }

    /// What the controller's pass plans over these objects.
    fn controller_plan(object: &Value, jobs: &[Value], secret: &Value, now: Timestamp) -> Plan {
        let object: CaptfObject = parse_object("TerraformCluster", object).unwrap();
        let id = Ident::of(&object, Kind::TerraformCluster).unwrap();
        let jobs: Vec<Job> = jobs
            .iter()
            .map(|j| serde_json::from_value(j.clone()).unwrap())
            .collect();
        let secret: Secret = serde_json::from_value(secret.clone()).unwrap();
        let records = records_of(&id, &jobs, &[]).records;
        let snap = snapshot_of(
            &object,
            records,
            Some(&secret),
            &Checked::Nothing,
            InputsHash::Known(CURRENT.into()),
            LockState::Free,
            Holds::default(),
        )
        .unwrap();
        plan(&snap, now)
    }

    /// What `explain` prints over the same objects, from files.
    fn explain_plan(object: &Value, jobs: &[Value], secret: &Value, now: Timestamp) -> Plan {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, v: &Value| {
            let p = dir.path().join(name);
            std::fs::write(&p, serde_json::to_string(v).unwrap()).unwrap();
            p.to_string_lossy().into_owned()
        };
        let input = ExplainInput {
            object: write("object.json", object),
            jobs: write("jobs.json", &json!({"apiVersion": "v1", "kind": "List", "items": jobs})),
            secret: Some(write("secret.json", secret)),
            now: Some(now.to_string()),
            inputs_hash: Some(CURRENT.into()),
            ..Default::default()
        };
        explain(&input).unwrap().plan
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn explain_plans_exactly_what_a_controller_pass_does(c in cases()) {
            let (object, jobs, secret) = objects(&c);
            let now = Timestamp::from_second(T0 + c.now_minutes * 60).unwrap();
            let pass = controller_plan(&object, &jobs, &secret, now);
            let explained = explain_plan(&object, &jobs, &secret, now);
            prop_assert_eq!(&explained.decision, &pass.decision);
            prop_assert_eq!(&explained.prune, &pass.prune);
            prop_assert_eq!(&explained.accounting, &pass.accounting);
            prop_assert_eq!(&explained.durable_changes, &pass.durable_changes);
            prop_assert_eq!(&explained.status, &pass.status);
            prop_assert_eq!(explained, pass);
        }
    }
}

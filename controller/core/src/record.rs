//! A booked Job: what the decision needs to know about one of the object's Jobs.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use captf_shared::keys;
use captf_shared::names;
use captf_shared::protocol::RunnerResult;
use captf_shared::types::TerraformStatus;
use captf_shared::{Kind, Op};

use super::outcome::{self, Outcome};

/// One Job of the object, finished (with its outcome) or still active (`outcome: None`).
#[derive(Clone, Debug, PartialEq)]
pub struct JobRecord {
    pub name: String,
    pub op: Op,
    /// The object's Job sequence number (orders the history).
    pub seq: u32,
    pub created: Option<Timestamp>,
    /// When it started running (`status.startTime`), from which Kubernetes counts its deadline.
    pub started: Option<Timestamp>,
    /// Its `spec.activeDeadlineSeconds`: how long it may run before Kubernetes stops it.
    pub active_deadline_seconds: Option<i64>,
    pub finished: Option<Timestamp>,
    /// `None` while the Job is not finished.
    pub outcome: Option<Outcome>,
    /// True when the outcome came from the `captf.io/outcome` annotation (already booked).
    pub booked: bool,
    /// True when the booking's effects are known to be recorded in the status (its sequence
    /// number is at most `status.lastBookedJobSeq` read at the start of the pass). Pruning never
    /// deletes a finished Job that is not accounted. [`JobRecord::from_job`] cannot see the
    /// status and assumes `booked`; the bookkeeping pass refines it with [`mark_accounted`].
    pub accounted: bool,
    pub drift_remediation: bool,
    /// The approved plan hash the Job carried (`captf.io/approved-plan`).
    pub approved_plan: Option<String>,
    /// Who approved it (`captf.io/approved-by`).
    pub approved_by: Option<String>,
    /// The lock ID the Job was handed (`captf.io/force-unlock`).
    pub force_unlock_id: Option<String>,
    /// The first 16 hex of the inputs hash it ran with (`captf.io/inputs-hash`).
    pub inputs_hash: Option<String>,
    /// The Job is being deleted.
    pub deleting: bool,
    /// The runner's result, when its pod was still there.
    pub result: Option<RunnerResult>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("Job has no metadata.name")]
    NoName,
    #[error("Job {job} is not one of this object's Jobs (expected a name like {expected})")]
    NotOurs { job: String, expected: String },
    #[error("Job {job}: label {label}={value:?} disagrees with its name")]
    LabelMismatch {
        job: String,
        label: &'static str,
        value: String,
    },
    #[error("Job {job}: annotation {annotation}={value:?} is not an outcome")]
    BadOutcome {
        job: String,
        annotation: &'static str,
        value: String,
    },
}

impl JobRecord {
    /// Build the record of one of the object's Jobs (and its pod, when it still exists).
    /// An outcome already booked (`captf.io/outcome`) wins over a new classification.
    pub fn from_job(
        kind: Kind,
        namespace: &str,
        object: &str,
        job: &Job,
        pod: Option<&Pod>,
    ) -> Result<JobRecord, RecordError> {
        let name = job.metadata.name.clone().ok_or(RecordError::NoName)?;
        let (op, seq) = names::parse_job_name(kind, namespace, object, &name).ok_or_else(|| RecordError::NotOurs {
            job: name.clone(),
            expected: names::job_name(kind, namespace, object, Op::Apply, 1),
        })?;
        let labels = job.metadata.labels.as_ref();
        if let Some(v) = labels.and_then(|l| l.get(keys::LABEL_OP))
            && v != op.as_str()
        {
            return Err(RecordError::LabelMismatch {
                job: name,
                label: keys::LABEL_OP,
                value: v.clone(),
            });
        }
        let annotations = job.metadata.annotations.as_ref();
        let ann = |k: &str| annotations.and_then(|a| a.get(k)).filter(|v| !v.is_empty()).cloned();
        let booked = match ann(keys::ANNOTATION_OUTCOME) {
            Some(v) => Some(v.parse::<Outcome>().map_err(|_| RecordError::BadOutcome {
                job: name.clone(),
                annotation: keys::ANNOTATION_OUTCOME,
                value: v.clone(),
            })?),
            None => None,
        };
        // Parse the termination message once: it serves the classification and the record.
        let result = pod.and_then(outcome::runner_result);
        let outcome = booked.or_else(|| {
            let terminal = outcome::terminal(job)?;
            Some(outcome::classify_terminal(
                terminal,
                result.as_ref().map(|r| r.result),
                pod.is_some_and(outcome::disrupted),
            ))
        });
        Ok(JobRecord {
            op,
            seq,
            created: job.metadata.creation_timestamp.as_ref().map(|t| t.0),
            started: job.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0),
            active_deadline_seconds: job.spec.as_ref().and_then(|s| s.active_deadline_seconds),
            finished: outcome::finished_at(job),
            outcome,
            booked: booked.is_some(),
            accounted: booked.is_some(),
            drift_remediation: ann(keys::ANNOTATION_DRIFT_REMEDIATION).as_deref() == Some("true"),
            approved_plan: ann(keys::ANNOTATION_APPROVED_PLAN),
            approved_by: ann(keys::ANNOTATION_APPROVED_BY),
            force_unlock_id: ann(keys::ANNOTATION_FORCE_UNLOCK),
            inputs_hash: labels.and_then(|l| l.get(keys::LABEL_INPUTS_HASH)).cloned(),
            deleting: job.metadata.deletion_timestamp.is_some(),
            result,
            name,
        })
    }

    pub fn is_finished(&self) -> bool {
        self.outcome.is_some()
    }

    pub fn succeeded(&self) -> bool {
        self.outcome == Some(Outcome::Succeeded)
    }

    pub fn failed(&self) -> bool {
        self.outcome.is_some_and(Outcome::counts_as_failure)
    }

    /// The time that orders it against other facts: finished, else created.
    pub fn time(&self) -> Option<Timestamp> {
        self.finished.or(self.created)
    }
}

/// Sort a history newest first: by sequence number, then creation time, then name.
pub fn sort_newest_first(records: &mut [JobRecord]) {
    records.sort_by(|a, b| {
        b.seq
            .cmp(&a.seq)
            .then_with(|| b.created.cmp(&a.created))
            .then_with(|| b.name.cmp(&a.name))
    });
}

/// What the bookkeeping pass does with one finished Job (docs/rules.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accounting {
    /// No `captf.io/outcome` yet: write it (the "once"), then emit the events and the once-only
    /// metrics, then record the effects.
    Book,
    /// Booked (annotated) by an earlier pass whose effects never reached the status (the
    /// controller died, or an API call or the status write failed, after the annotation):
    /// record the idempotent effects again, without events and without the once-only metrics.
    Replay,
}

/// The watermark a pass starts from: `status.lastBookedJobSeq` when the status has one.
///
/// An object written before the watermark existed has none. Its counts were then written by
/// the same passes that annotated its Jobs, so a missing watermark means "every annotated Job
/// is accounted": the highest annotated sequence number (0 when none) is the baseline, and
/// nothing is replayed. Replaying instead would count every failure still in the history a
/// second time on upgrade. The pass writes the baseline back, so the object has a watermark
/// from its first status write on (PURE).
pub fn watermark_baseline(records: &[JobRecord], status_watermark: Option<u32>) -> u32 {
    status_watermark.unwrap_or_else(|| records.iter().filter(|r| r.booked).map(|r| r.seq).max().unwrap_or(0))
}

/// The watermark a status carries for [`watermark_baseline`] (PURE): its
/// `lastBookedJobSeq`, or 0 for a status no controller has written yet (no conditions). A
/// controller writes conditions on its first pass, with the watermark since it exists, so a
/// status without conditions accounts for no Job: every annotated Job is replayed. This closes
/// the window where a new object's first status write is lost. Only a status written by an older
/// controller (conditions, no watermark) falls back to "everything annotated is accounted".
pub fn status_watermark(status: &TerraformStatus) -> Option<u32> {
    status
        .last_booked_job_seq
        .or_else(|| status.conditions.as_ref().is_none_or(Vec::is_empty).then_some(0))
}

/// Mark which records are accounted at the start of the pass: booked and at most `baseline`.
/// A Job booked or replayed in this pass stays unaccounted until a later pass reads the
/// watermark that covers it, so it is not pruned before its effects are in the status (PURE).
pub fn mark_accounted(records: &mut [JobRecord], baseline: u32) {
    for r in records {
        r.accounted = r.booked && r.seq <= baseline;
    }
}

/// The finished Jobs to book or replay, oldest first, as indices into `records` (PURE).
/// Active Jobs and Jobs accounted at `baseline` are left out.
pub fn accounting_plan(records: &[JobRecord], baseline: u32) -> Vec<(usize, Accounting)> {
    let mut plan: Vec<(usize, Accounting)> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.is_finished())
        .filter_map(|(i, r)| match (r.booked, r.seq > baseline) {
            (false, _) => Some((i, Accounting::Book)),
            (true, true) => Some((i, Accounting::Replay)),
            (true, false) => None,
        })
        .collect();
    plan.sort_by(|(a, _), (b, _)| {
        let (a, b) = (&records[*a], &records[*b]);
        a.seq
            .cmp(&b.seq)
            .then_with(|| a.created.cmp(&b.created))
            .then_with(|| a.name.cmp(&b.name))
    });
    plan
}

/// The watermark after a pass that booked or replayed the Jobs with these sequence numbers:
/// the highest accounted one. It never goes down (PURE).
pub fn watermark_after(baseline: u32, accounted: impl IntoIterator<Item = u32>) -> u32 {
    accounted.into_iter().fold(baseline, u32::max)
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// A finished record for tests; `seq` orders it, `finished` is `seq` minutes after epoch+1000s.
    pub fn rec(op: Op, seq: u32, outcome: Option<Outcome>) -> JobRecord {
        JobRecord {
            name: names::job_name(Kind::TerraformCluster, "default", "prod-eu", op, seq),
            op,
            seq,
            created: Some(Timestamp::from_second(1_000 + i64::from(seq) * 60 - 30).unwrap()),
            started: None,
            active_deadline_seconds: None,
            finished: outcome.map(|_| Timestamp::from_second(1_000 + i64::from(seq) * 60).unwrap()),
            outcome,
            booked: true,
            accounted: true,
            drift_remediation: false,
            approved_plan: None,
            approved_by: None,
            force_unlock_id: None,
            inputs_hash: None,
            deleting: false,
            result: None,
        }
    }

    fn unbooked(op: Op, seq: u32, outcome: Option<Outcome>) -> JobRecord {
        JobRecord {
            booked: false,
            accounted: false,
            ..rec(op, seq, outcome)
        }
    }

    fn seqs(records: &[JobRecord], plan: &[(usize, Accounting)]) -> Vec<(u32, Accounting)> {
        plan.iter().map(|(i, a)| (records[*i].seq, *a)).collect()
    }

    #[test]
    fn a_missing_watermark_counts_every_annotated_job_as_accounted_so_an_upgrade_replays_nothing() {
        let h = vec![
            unbooked(Op::Apply, 4, Some(Outcome::Failed)),
            rec(Op::Apply, 3, Some(Outcome::Failed)),
            rec(Op::Apply, 2, Some(Outcome::Deadline)),
            rec(Op::Apply, 1, Some(Outcome::Succeeded)),
        ];
        let baseline = watermark_baseline(&h, None);
        assert_eq!(baseline, 3);
        assert_eq!(seqs(&h, &accounting_plan(&h, baseline)), vec![(4, Accounting::Book)]);
        // A brand-new object: no Jobs, no watermark: the baseline 0 is written back.
        assert_eq!(watermark_baseline(&[], None), 0);
        assert_eq!(
            watermark_baseline(&[unbooked(Op::Apply, 1, Some(Outcome::Failed))], None),
            0
        );
    }

    #[test]
    fn a_status_no_controller_has_written_accounts_for_nothing_so_a_lost_first_write_is_replayed() {
        use captf_shared::types::TerraformStatus;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
        // Never written: every annotated Job is replayed.
        let empty = TerraformStatus::default();
        assert_eq!(status_watermark(&empty), Some(0));
        let h = vec![rec(Op::Apply, 1, Some(Outcome::Failed))];
        let baseline = watermark_baseline(&h, status_watermark(&empty));
        assert_eq!(seqs(&h, &accounting_plan(&h, baseline)), vec![(1, Accounting::Replay)]);
        // Written by an older controller (conditions, no watermark): nothing is replayed.
        let older = TerraformStatus {
            conditions: Some(vec![Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: "JobActive".into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    Timestamp::from_second(0).unwrap(),
                ),
                observed_generation: None,
            }]),
            ..Default::default()
        };
        assert_eq!(status_watermark(&older), None);
        assert!(accounting_plan(&h, watermark_baseline(&h, status_watermark(&older))).is_empty());
        // A watermark is taken as it is.
        let marked = TerraformStatus {
            last_booked_job_seq: Some(7),
            ..Default::default()
        };
        assert_eq!(status_watermark(&marked), Some(7));
    }

    #[test]
    fn annotated_jobs_above_the_watermark_are_replayed_oldest_first_among_new_bookings() {
        // Watermark 1: Jobs 2 and 3 were annotated by a pass whose status write was lost, 4 just
        // finished, 5 runs.
        let h = vec![
            unbooked(Op::Apply, 5, None),
            unbooked(Op::Drift, 4, Some(Outcome::Succeeded)),
            rec(Op::Apply, 3, Some(Outcome::Failed)),
            rec(Op::Apply, 2, Some(Outcome::Failed)),
            rec(Op::Apply, 1, Some(Outcome::Succeeded)),
        ];
        let baseline = watermark_baseline(&h, Some(1));
        assert_eq!(baseline, 1);
        let plan = accounting_plan(&h, baseline);
        assert_eq!(
            seqs(&h, &plan),
            vec![(2, Accounting::Replay), (3, Accounting::Replay), (4, Accounting::Book)]
        );
        assert_eq!(watermark_after(baseline, plan.iter().map(|(i, _)| h[*i].seq)), 4);
    }

    #[test]
    fn jobs_at_or_below_the_watermark_are_accounted_and_never_replayed() {
        let mut h = vec![
            unbooked(Op::Apply, 4, Some(Outcome::Failed)),
            rec(Op::Apply, 3, Some(Outcome::Failed)),
            rec(Op::Apply, 2, Some(Outcome::Failed)),
        ];
        mark_accounted(&mut h, 2);
        let accounted: Vec<(u32, bool)> = h.iter().map(|r| (r.seq, r.accounted)).collect();
        assert_eq!(accounted, vec![(4, false), (3, false), (2, true)]);
        assert_eq!(
            seqs(&h, &accounting_plan(&h, 2)),
            vec![(3, Accounting::Replay), (4, Accounting::Book)]
        );
        assert!(accounting_plan(&h[1..], 3).is_empty());
    }

    #[test]
    fn the_watermark_never_goes_down() {
        assert_eq!(watermark_after(7, [3, 5]), 7);
        assert_eq!(watermark_after(7, []), 7);
        assert_eq!(watermark_after(0, [2, 9, 4]), 9);
    }

    proptest::proptest! {
        #[test]
        fn every_finished_job_is_booked_replayed_or_accounted_exactly_once(
            jobs in proptest::collection::vec((proptest::option::of(0usize..6), proptest::bool::ANY), 0..20),
            watermark in proptest::option::of(0u32..25),
        ) {
            let len = jobs.len() as u32;
            let mut h: Vec<JobRecord> = jobs
                .iter()
                .enumerate()
                .map(|(i, (o, booked))| {
                    let outcome = o.map(|o| Outcome::ALL[o]);
                    let seq = len - i as u32;
                    if *booked && outcome.is_some() { rec(Op::Apply, seq, outcome) } else { unbooked(Op::Apply, seq, outcome) }
                })
                .collect();
            let baseline = watermark_baseline(&h, watermark);
            mark_accounted(&mut h, baseline);
            let plan = accounting_plan(&h, baseline);
            let planned: Vec<u32> = plan.iter().map(|(i, _)| h[*i].seq).collect();
            proptest::prop_assert!(planned.windows(2).all(|w| w[0] < w[1]), "oldest first: {planned:?}");
            for (i, r) in h.iter().enumerate() {
                let step = plan.iter().find(|(j, _)| *j == i).map(|(_, a)| *a);
                let want = match (r.is_finished(), r.booked, r.accounted) {
                    (false, _, _) => None,
                    (true, false, _) => Some(Accounting::Book),
                    (true, true, false) => Some(Accounting::Replay),
                    (true, true, true) => None,
                };
                proptest::prop_assert_eq!(step, want, "Job {}", r.seq);
            }
            if watermark.is_none() {
                proptest::prop_assert!(plan.iter().all(|(_, a)| *a == Accounting::Book), "no replay on upgrade");
            }
            let after = watermark_after(baseline, planned.iter().copied());
            proptest::prop_assert!(after >= baseline && planned.iter().all(|s| *s <= after));
        }
    }

    #[test]
    fn a_booked_outcome_wins_and_labels_must_agree_with_the_name() {
        let name = names::job_name(Kind::TerraformCluster, "default", "prod-eu", Op::Drift, 4);
        let mut job = crate::outcome::tests::job_with(&[("Failed", Some("BackoffLimitExceeded"))], 50);
        job.metadata = ObjectMeta {
            name: Some(name.clone()),
            annotations: Some([(keys::ANNOTATION_OUTCOME.to_string(), "interrupted".to_string())].into()),
            ..Default::default()
        };
        let r = JobRecord::from_job(Kind::TerraformCluster, "default", "prod-eu", &job, None).unwrap();
        assert_eq!(
            (r.op, r.seq, r.outcome, r.booked),
            (Op::Drift, 4, Some(Outcome::Interrupted), true)
        );
        job.metadata.labels = Some([(keys::LABEL_OP.to_string(), "apply".to_string())].into());
        assert!(matches!(
            JobRecord::from_job(Kind::TerraformCluster, "default", "prod-eu", &job, None),
            Err(RecordError::LabelMismatch { .. })
        ));
        assert!(matches!(
            JobRecord::from_job(Kind::TerraformCluster, "default", "prod", &job, None),
            Err(RecordError::NotOurs { .. })
        ));
    }
}

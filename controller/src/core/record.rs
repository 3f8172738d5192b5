//! A booked Job: what the decision needs to know about one of the object's Jobs.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use captf_shared::keys;
use captf_shared::names;
use captf_shared::protocol::RunnerResult;
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
    pub finished: Option<Timestamp>,
    /// `None` while the Job is not finished.
    pub outcome: Option<Outcome>,
    /// True when the outcome came from the `captf.io/outcome` annotation (already booked).
    pub booked: bool,
    pub drift_remediation: bool,
    /// The approved plan hash the Job carried (`captf.io/approved-plan`).
    pub approved_plan: Option<String>,
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
            finished: outcome::finished_at(job),
            outcome,
            booked: booked.is_some(),
            drift_remediation: ann(keys::ANNOTATION_DRIFT_REMEDIATION).as_deref() == Some("true"),
            approved_plan: ann(keys::ANNOTATION_APPROVED_PLAN),
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
            finished: outcome.map(|_| Timestamp::from_second(1_000 + i64::from(seq) * 60).unwrap()),
            outcome,
            booked: true,
            drift_remediation: false,
            approved_plan: None,
            force_unlock_id: None,
            inputs_hash: None,
            deleting: false,
            result: None,
        }
    }

    #[test]
    fn a_booked_outcome_wins_and_labels_must_agree_with_the_name() {
        let name = names::job_name(Kind::TerraformCluster, "default", "prod-eu", Op::Drift, 4);
        let mut job = crate::core::outcome::tests::job_with(&[("Failed", Some("BackoffLimitExceeded"))], 50);
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

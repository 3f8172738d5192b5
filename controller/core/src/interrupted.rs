//! An apply Job deleted while it ran (docs/rules.md), as a pure check over what the
//! live reads returned.

use captf_shared::names;
use captf_shared::{Kind, Op};

use super::record::JobRecord;

/// The message of `ApplyJobSucceeded=False/ApplyFailed` for an interrupted apply.
pub fn interrupted_apply_message(job: &str) -> String {
    format!(
        "Job {job}: disappeared while it ran and may have applied part of its change; an apply of the current inputs is due."
    )
}

/// What a live read of the Job named by `status.activeJob` returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveJob {
    Found,
    NotFound,
}

/// The facts the check needs, all from live reads except `deleted_by_controller`, which comes
/// from the Job as last seen (the controller marks `captf.io/deleted-by: controller` before it deletes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveJobReads<'a> {
    pub kind: Kind,
    pub namespace: &'a str,
    pub name: &'a str,
    /// `status.activeJob` as the reconciler saw it.
    pub active_job: Option<&'a str>,
    /// The live read of that Job.
    pub live_job: LiveJob,
    /// `status.activeJob` from a live read of the object.
    pub live_active_job: Option<&'a str>,
    pub deleted_by_controller: bool,
}

/// What to do about `status.activeJob`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActiveJobCheck {
    /// Nothing to do: no active Job, the Job exists, or the live status no longer names it.
    Nothing,
    /// Record `captf.io/interrupted-apply=<job>`, clear `activeJob`, release the leases.
    RecordInterruptedApply { job: String },
    /// Clear `activeJob` and release the leases, record nothing (not an apply, a
    /// TerraformMachine, or a Job the controller deleted itself).
    Forget { job: String },
}

/// The check of docs/rules.md.
pub fn check_active_job(r: &ActiveJobReads<'_>) -> ActiveJobCheck {
    let Some(job) = r.active_job.filter(|j| !j.is_empty()) else {
        return ActiveJobCheck::Nothing;
    };
    if r.live_job == LiveJob::Found || r.live_active_job != Some(job) {
        return ActiveJobCheck::Nothing;
    }
    let is_apply = matches!(
        names::parse_job_name(r.kind, r.namespace, r.name, job),
        Some((Op::Apply, _))
    );
    let kind_records = matches!(r.kind, Kind::TerraformCluster | Kind::TerraformMachinePool);
    if is_apply && kind_records && !r.deleted_by_controller {
        ActiveJobCheck::RecordInterruptedApply { job: job.to_string() }
    } else {
        ActiveJobCheck::Forget { job: job.to_string() }
    }
}

/// Is the recorded interrupted apply still due? It clears when an apply started after it
/// (a higher sequence number) succeeds.
pub fn interrupted_apply_pending(
    kind: Kind,
    namespace: &str,
    name: &str,
    recorded: Option<&str>,
    history: &[JobRecord],
) -> bool {
    let Some(job) = recorded.filter(|j| !j.is_empty()) else {
        return false;
    };
    let seq = names::parse_job_name(kind, namespace, name, job).map_or(0, |(_, s)| s);
    !history
        .iter()
        .any(|r| r.op == Op::Apply && r.seq > seq && r.succeeded())
}

/// What the check of an active Job that vanished did (read and recorded by the controller).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checked {
    /// `status.activeJob` is empty or names a Job that exists.
    Nothing,
    /// Recorded `captf.io/interrupted-apply=<job>`; `activeJob` must be cleared.
    Recorded(String),
    /// The Job is gone and records nothing (not an apply, a TerraformMachine, or deleted by
    /// CAPTF); `activeJob` must be cleared.
    Forgot(String),
    /// Our copy of the object is older than the live one: look again.
    Stale,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;
    use crate::record::tests::rec;

    fn reads(kind: Kind, job: &str) -> ActiveJobReads<'_> {
        ActiveJobReads {
            kind,
            namespace: "default",
            name: "prod-eu",
            active_job: Some(job),
            live_job: LiveJob::NotFound,
            live_active_job: Some(job),
            deleted_by_controller: false,
        }
    }

    fn apply_job(kind: Kind) -> String {
        names::job_name(kind, "default", "prod-eu", Op::Apply, 7)
    }

    #[test]
    fn an_apply_deleted_while_it_ran_is_recorded_for_clusters_and_pools() {
        for kind in [Kind::TerraformCluster, Kind::TerraformMachinePool] {
            let job = apply_job(kind);
            assert_eq!(
                check_active_job(&reads(kind, &job)),
                ActiveJobCheck::RecordInterruptedApply { job: job.clone() }
            );
        }
        assert!(interrupted_apply_message("j").starts_with("Job j: disappeared while it ran"));
    }

    #[test]
    fn a_machine_or_a_job_the_controller_deleted_records_nothing() {
        let job = apply_job(Kind::TerraformMachine);
        assert_eq!(
            check_active_job(&reads(Kind::TerraformMachine, &job)),
            ActiveJobCheck::Forget { job: job.clone() }
        );
        let job = apply_job(Kind::TerraformCluster);
        let mut r = reads(Kind::TerraformCluster, &job);
        r.deleted_by_controller = true;
        assert_eq!(check_active_job(&r), ActiveJobCheck::Forget { job: job.clone() });
        let drift = names::job_name(Kind::TerraformCluster, "default", "prod-eu", Op::Drift, 7);
        assert_eq!(
            check_active_job(&reads(Kind::TerraformCluster, &drift)),
            ActiveJobCheck::Forget { job: drift.clone() }
        );
    }

    #[test]
    fn both_live_reads_must_confirm() {
        let job = apply_job(Kind::TerraformCluster);
        let mut r = reads(Kind::TerraformCluster, &job);
        r.live_job = LiveJob::Found;
        assert_eq!(check_active_job(&r), ActiveJobCheck::Nothing);
        let mut r = reads(Kind::TerraformCluster, &job);
        r.live_active_job = None;
        assert_eq!(check_active_job(&r), ActiveJobCheck::Nothing);
        r.active_job = None;
        assert_eq!(check_active_job(&r), ActiveJobCheck::Nothing);
    }

    #[test]
    fn the_record_clears_when_an_apply_started_afterwards_succeeds() {
        let job = apply_job(Kind::TerraformCluster); // seq 7
        let pending =
            |h: &[JobRecord]| interrupted_apply_pending(Kind::TerraformCluster, "default", "prod-eu", Some(&job), h);
        assert!(pending(&[rec(Op::Apply, 6, Some(Outcome::Succeeded))]));
        assert!(pending(&[rec(Op::Apply, 8, Some(Outcome::Failed))]));
        assert!(pending(&[rec(Op::Drift, 8, Some(Outcome::Succeeded))]));
        assert!(!pending(&[rec(Op::Apply, 8, Some(Outcome::Succeeded))]));
    }
}

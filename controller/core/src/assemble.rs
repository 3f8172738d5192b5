//! The snapshot a pass plans from, assembled from what was read: every reader (the
//! controller's caches, a person's live reads, files for offline `explain`) builds it here, so
//! the three cannot differ in how they turn objects into a [`Snapshot`].

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};

use captf_shared::types::CaptfObject;

use crate::ident::Ident;
use crate::inputs_secret;
use crate::interrupted::Checked;
use crate::lock::LockState;
use crate::record::{self, JobRecord, RecordError};
use crate::snapshot::{self, DurableRecord, Holds, InputsHash, Snapshot, SnapshotError, object_status};

/// The object's Jobs as records, and the Jobs left out.
#[derive(Debug, Default)]
pub struct Records {
    /// Newest first.
    pub records: Vec<JobRecord>,
    /// Jobs under the object's labels that are not the object's (their names or labels say
    /// otherwise): left out, for the caller to log.
    pub ignored: Vec<RecordError>,
}

/// The object's Jobs as records, newest first, each with its pod . A Job that is not the
/// object's is left out, with why.
pub fn records_of(id: &Ident, jobs: &[Job], pods: &[Pod]) -> Records {
    let by_job = snapshot::pods_by_job(pods);
    let mut out = Records::default();
    for j in jobs {
        let pod = j.metadata.name.as_deref().and_then(|n| by_job.get(n).copied());
        match JobRecord::from_job(id.kind, &id.namespace, &id.name, j, pod) {
            Ok(r) => out.records.push(r),
            Err(e) => out.ignored.push(e),
        }
    }
    record::sort_newest_first(&mut out.records);
    out
}

/// Whether a pass checks the state lock (docs/rules.md): only while no Job of the object is
/// active, that is every Job read has finished and `active_job` (the status's, after the check
/// of an active Job that vanished) names none that was not read. A Job that runs holds the lock
/// itself, so a check then would see its own runner.
pub fn lock_is_checked(records: &[JobRecord], active_job: Option<&str>) -> bool {
    let unread_active = active_job.filter(|a| !a.is_empty() && !records.iter().any(|r| r.name == *a));
    records.iter().all(JobRecord::is_finished) && unread_active.is_none()
}

/// The snapshot a pass plans from: the object with its status as read, less an active
/// Job the vanished-Job check resolved (`checked`), the durable record of the inputs Secret
/// (with an interrupted apply just recorded), and what else was read. Also the hash of the
/// inputs the Secret holds (in [`Snapshot::stored_inputs_hash`]).
pub fn snapshot_of(
    object: &CaptfObject,
    records: Vec<JobRecord>,
    inputs_secret: Option<&Secret>,
    checked: &Checked,
    inputs_hash: InputsHash,
    lock: LockState,
    holds: Holds,
) -> Result<Snapshot, SnapshotError> {
    let mut durable = inputs_secret
        .map(DurableRecord::from_secret)
        .transpose()?
        .unwrap_or_default();
    let mut status = object_status(object).cloned().unwrap_or_default();
    match checked {
        Checked::Recorded(job) => {
            durable.interrupted_apply = Some(job.clone());
            status.active_job = None;
        }
        Checked::Forgot(_) => status.active_job = None,
        Checked::Nothing | Checked::Stale => {}
    }
    let mut snap = Snapshot::new(object, records, durable, inputs_hash, lock, holds)?;
    snap.status = status;
    snap.stored_inputs_hash = inputs_secret.and_then(inputs_secret::stored_inputs).map(|i| i.hash());
    Ok(snap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;
    use crate::record::tests::rec;
    use captf_shared::Op;

    #[test]
    fn the_lock_is_checked_only_while_no_job_of_the_object_is_active() {
        let done = rec(Op::Apply, 1, Some(Outcome::Succeeded));
        let running = rec(Op::Apply, 2, None);
        assert!(lock_is_checked(&[], None));
        assert!(lock_is_checked(&[], Some("")));
        assert!(lock_is_checked(std::slice::from_ref(&done), None));
        assert!(lock_is_checked(std::slice::from_ref(&done), Some(done.name.as_str())));
        assert!(!lock_is_checked(&[done.clone(), running.clone()], None));
        // The status names a Job that was not read: it may run, so no check.
        assert!(!lock_is_checked(&[done], Some("tc-prod-eu-apply-9")));
    }
}

//! `clusterctl move` (docs/api.md, "Moving with clusterctl"): when an object must not be moved,
//! and whether the finalizer may be added.
//!
//! clusterctl pauses the Cluster, waits until no object it moves carries the
//! `clusterctl.cluster.x-k8s.io/block-move` annotation, copies the objects (without status) to
//! the target cluster, removes their finalizers in the source and deletes them there. Jobs and
//! Leases do not move. So an object blocks the move while one of its Jobs runs (its outcome would
//! be booked nowhere) or its state lock is held (the lock would be lost, and with it the
//! protection of whoever holds it).

/// Whether the object must carry the block-move annotation now: a Job of it is active (or just
/// started), or its state lock has a holder, whoever that is.
pub fn blocks_move(active_job: Option<&str>, lock_holder: Option<&str>) -> bool {
    active_job.is_some() || lock_holder.is_some_and(|h| !h.is_empty())
}

/// Whether the finalizer may be added to an object that lacks it: not while it is paused. A
/// paused object is being moved (or held by a person); clusterctl removes the finalizers in the
/// source before deleting, and a finalizer added back then would leave the source copy stuck in
/// deletion (a paused object runs no destroy).
pub fn may_add_finalizer(paused: bool) -> bool {
    !paused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_blocks_move_while_a_job_runs_or_its_lock_is_held() {
        assert!(!blocks_move(None, None), "idle and unlocked: free to move");
        assert!(blocks_move(Some("tc-prod-eu-225654031b7f-apply-3"), None));
        assert!(
            blocks_move(None, Some("tc-prod-eu-225654031b7f-apply-2-x2k9q")),
            "a dead runner's lock"
        );
        assert!(blocks_move(None, Some("alice@laptop")), "a workstation's lock");
        assert!(!blocks_move(None, Some("")), "an empty holder is a free lock");
    }

    #[test]
    fn the_finalizer_is_not_added_while_paused() {
        assert!(may_add_finalizer(false));
        assert!(!may_add_finalizer(true));
    }
}

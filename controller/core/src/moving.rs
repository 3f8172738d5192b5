//! `clusterctl move` (docs/api.md, "Moving with clusterctl"): when an object must not be moved,
//! and whether the finalizer may be added.
//!
//! clusterctl builds its graph of the objects to move (noting which carry the
//! `clusterctl.cluster.x-k8s.io/block-move` annotation), then pauses the Cluster, waits until
//! none of the noted objects carries the annotation, copies the objects (without status) to the
//! target cluster, removes their finalizers in the source and deletes them there. Jobs and Leases
//! do not move. So an object must not move while one of its Jobs runs (its outcome would be booked
//! nowhere, and the copied state could be older than the runner's last write) or its state lock
//! is held (the lock would be lost, and with it the protection of whoever holds it).
//!
//! clusterctl waits only for the objects that carried the annotation when it built the graph,
//! before the pause: a Job may start in between (a drift check runs on its own schedule). So the
//! annotation is there whenever the object is not both paused and idle: an unpaused object always
//! carries it, and clusterctl always waits for it until the pause has stopped new Jobs and the
//! last one has been booked.

/// Whether the object must carry the block-move annotation now: it is not paused (a Job could
/// start at any moment), a Job of it is active (or just started), or its state lock has a holder,
/// whoever that is.
pub fn blocks_move(paused: bool, active_job: Option<&str>, lock_holder: Option<&str>) -> bool {
    !paused || active_job.is_some() || lock_holder.is_some_and(|h| !h.is_empty())
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
    fn an_object_blocks_move_unless_it_is_paused_idle_and_unlocked() {
        assert!(
            !blocks_move(true, None, None),
            "paused, idle and unlocked: free to move"
        );
        assert!(blocks_move(true, Some("tc-prod-eu-225654031b7f-apply-3"), None));
        assert!(
            blocks_move(true, None, Some("tc-prod-eu-225654031b7f-apply-2-x2k9q")),
            "a dead runner's lock"
        );
        assert!(blocks_move(true, None, Some("alice@laptop")), "a workstation's lock");
        assert!(!blocks_move(true, None, Some("")), "an empty holder is a free lock");
    }

    #[test]
    fn an_unpaused_object_blocks_move_even_when_idle_so_clusterctl_always_waits_for_it() {
        // clusterctl notes the blocking objects before it pauses the Cluster; a Job may start in
        // between. Unpaused, the object is always noted, whatever it is doing.
        for (job, holder) in [
            (None, None),
            (Some("tc-prod-eu-225654031b7f-drift-4"), None),
            (None, Some("")),
        ] {
            assert!(blocks_move(false, job, holder), "{job:?} {holder:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn an_object_free_to_move_is_paused_idle_and_unlocked(
            paused in proptest::bool::ANY,
            job in proptest::option::of("[a-z0-9-]{1,20}"),
            holder in proptest::option::of("[a-z@.-]{0,12}"),
        ) {
            let free = !blocks_move(paused, job.as_deref(), holder.as_deref());
            let locked = holder.as_deref().is_some_and(|h| !h.is_empty());
            proptest::prop_assert_eq!(free, paused && job.is_none() && !locked);
        }
    }

    #[test]
    fn the_finalizer_is_not_added_while_paused() {
        assert!(may_add_finalizer(false));
        assert!(!may_add_finalizer(true));
    }
}

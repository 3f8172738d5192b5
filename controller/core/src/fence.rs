//! The last look before a Job is created (docs/rules.md, "Starting a Job"): the object, read
//! live once the leases are taken, must still be the object the pass planned from.
//!
//! A pass reads its object at its start and creates the Job at its end, seconds later when the
//! API is slow. Meanwhile another controller instance may have started, run and booked a Job of
//! the same object (around a relabel between shards), and even removed its finalizer: the object
//! is then gone, the API server's garbage collector has deleted its Jobs and leases, and nothing
//! else would stop this pass from creating a Job for an object that no longer exists (a destroy
//! run twice, or an apply that builds infrastructure nobody owns). The run lease cannot say so:
//! it went with the object. So the pass reads the object once more and creates nothing unless it
//! is the same incarnation, still served here, and no Job was started or deletion asked since.

/// What the check compares, as the pass read the object and as it is now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen<'a> {
    pub uid: &'a str,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `status.activeJob` (an empty name counts as none).
    pub active_job: Option<&'a str>,
    /// `status.lastJobSeq`.
    pub last_job_seq: Option<u32>,
    /// This controller instance's selector matches the object's labels.
    pub served: bool,
}

/// Why the Job is not created after all; the next pass decides again from a fresh read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Moved {
    #[error("the object is gone")]
    Gone,
    #[error("the object was deleted and created again (uid {0})")]
    Replaced(String),
    #[error("the object left this controller instance's selector")]
    NotServed,
    #[error("the object's deletion was asked since this pass read it")]
    DeletionAsked,
    #[error("another Job was started since this pass read the object (status.lastJobSeq {0:?}, activeJob {1:?})")]
    Started(Option<u32>, Option<String>),
}

/// Whether the Job planned from `planned` may be created, given the object as read `live`
/// (`None`: not found).
pub fn may_create(planned: &Seen, live: Option<&Seen>) -> Result<(), Moved> {
    let live = live.ok_or(Moved::Gone)?;
    if live.uid != planned.uid {
        return Err(Moved::Replaced(live.uid.to_string()));
    }
    if !live.served {
        return Err(Moved::NotServed);
    }
    if live.deleting && !planned.deleting {
        return Err(Moved::DeletionAsked);
    }
    let active = |s: &Seen| s.active_job.filter(|j| !j.is_empty()).map(str::to_string);
    if live.last_job_seq != planned.last_job_seq || active(live) != active(planned) {
        return Err(Moved::Started(live.last_job_seq, active(live)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn seen(seq: Option<u32>, active: Option<&'static str>) -> Seen<'static> {
        Seen {
            uid: "u1",
            deleting: false,
            active_job: active,
            last_job_seq: seq,
            served: true,
        }
    }

    #[test]
    fn a_job_is_created_for_the_object_as_the_pass_read_it() {
        let planned = seen(Some(4), None);
        assert_eq!(may_create(&planned, Some(&planned.clone())), Ok(()));
        // An empty activeJob is none.
        assert_eq!(may_create(&planned, Some(&seen(Some(4), Some("")))), Ok(()));
        let deleting = Seen {
            deleting: true,
            ..seen(Some(4), None)
        };
        assert_eq!(may_create(&deleting, Some(&deleting.clone())), Ok(()));
    }

    #[test]
    fn no_job_is_created_for_an_object_that_is_gone_or_was_created_again() {
        let planned = seen(Some(4), None);
        assert_eq!(may_create(&planned, None), Err(Moved::Gone));
        let again = Seen {
            uid: "u2",
            ..seen(None, None)
        };
        assert_eq!(may_create(&planned, Some(&again)), Err(Moved::Replaced("u2".into())));
    }

    #[test]
    fn no_job_is_created_for_an_object_relabelled_out_of_this_instances_selector() {
        let planned = seen(Some(4), None);
        let left = Seen {
            served: false,
            ..planned.clone()
        };
        assert_eq!(may_create(&planned, Some(&left)), Err(Moved::NotServed));
    }

    #[test]
    fn no_job_is_created_when_deletion_was_asked_since_the_read() {
        let planned = seen(Some(4), None);
        let deleting = Seen {
            deleting: true,
            ..planned.clone()
        };
        assert_eq!(may_create(&planned, Some(&deleting)), Err(Moved::DeletionAsked));
    }

    #[test]
    fn no_job_is_created_when_another_job_was_started_since_the_read() {
        let planned = seen(Some(4), None);
        assert_eq!(
            may_create(&planned, Some(&seen(Some(5), Some("j-destroy-5")))),
            Err(Moved::Started(Some(5), Some("j-destroy-5".into())))
        );
        // Started and already booked: only the sequence number tells.
        assert_eq!(
            may_create(&planned, Some(&seen(Some(5), None))),
            Err(Moved::Started(Some(5), None))
        );
    }

    proptest! {
        /// Any difference in what the check compares refuses the create; none allows it.
        #[test]
        fn the_create_is_allowed_exactly_when_nothing_compared_changed(
            uid in prop::sample::select(vec!["u1", "u2"]),
            deleting in any::<bool>(),
            seq in prop::option::of(0u32..3),
            active in prop::option::of(prop::sample::select(vec!["a", "b"])),
            served in any::<bool>(),
            planned_deleting in any::<bool>(),
            planned_seq in prop::option::of(0u32..3),
            planned_active in prop::option::of(prop::sample::select(vec!["a", "b"])),
        ) {
            let planned = Seen { uid: "u1", deleting: planned_deleting, active_job: planned_active, last_job_seq: planned_seq, served: true };
            let live = Seen { uid, deleting, active_job: active, last_job_seq: seq, served };
            let same = uid == "u1" && served && (deleting == planned_deleting || !deleting)
                && seq == planned_seq && active == planned_active;
            prop_assert_eq!(may_create(&planned, Some(&live)).is_ok(), same);
        }
    }
}

//! When a waiting object is looked at again (docs/architecture.md, "Looking again"): the wake a
//! decision needs, and the schedule of wakes that follow a simulated clock.
//!
//! A wait ends either at a time, or only with a watch event. The times are a backoff's end, the
//! next drift check, the safety look at a running Job (its watch events normally come first),
//! and the next look at a hold no watch reports (the cluster lease, a member's Job, an inputs
//! Secret's key, a paused Cluster API Cluster). All of them are times on the controller's clock:
//! under a simulated clock they come when that clock reaches them, never before, and a
//! controller whose objects are all waiting does nothing while that clock stands still.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::decide::Wait;
use super::reason::Reason;

/// How long after its start a running Job is looked at again if no watch event came first.
pub const ACTIVE_REQUEUE: Duration = Duration::from_secs(300);

/// What of an object's metadata its watch event must change to bring a pass (PURE): everything
/// but what a status write alone changes (`resourceVersion`, `managedFields`). A spec change moves
/// `generation`; labels, annotations (an approval, a request), finalizers, owners and the
/// deletion are read by the pass. An event that changes none of these is the controller's own
/// status write coming back, and a pass over it would read the object again to find nothing to
/// do. (A status written by somebody else is read at the object's next pass.)
pub fn acted_on(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let parts = serde_json::to_vec(&(
        &meta.uid,
        meta.generation,
        &meta.labels,
        &meta.annotations,
        &meta.finalizers,
        &meta.owner_references,
        &meta.deletion_timestamp,
    ))
    .unwrap_or_default();
    h.write(&parts);
    h.finish()
}

/// How a waiting object is looked at again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// At this time on the controller's clock.
    At(Timestamp),
    /// Only when a watch event comes.
    OnChange,
}

/// The wake of a wait decided at `now` (PURE).
pub fn wake(wait: &Wait, now: Timestamp) -> Wake {
    if wait.reason == Reason::JobActive {
        return Wake::At(after(now, ACTIVE_REQUEUE));
    }
    match (wait.not_before, wait.requeue_after) {
        (Some(not_before), _) => Wake::At(not_before),
        (None, Some(d)) => Wake::At(after(now, d)),
        (None, None) => Wake::OnChange,
    }
}

/// `now + d`, at the end of time when that overflows.
pub fn after(now: Timestamp, d: Duration) -> Timestamp {
    now.checked_add(d).unwrap_or(Timestamp::MAX)
}

/// The wakes waiting for the clock: each key at most once, at its latest scheduled time (PURE).
#[derive(Debug)]
pub struct Schedule<K> {
    at: HashMap<K, Timestamp>,
}

impl<K> Default for Schedule<K> {
    fn default() -> Self {
        Schedule { at: HashMap::new() }
    }
}

impl<K: Eq + Hash + Clone> Schedule<K> {
    /// Wake `key` at `t`, replacing what it had: the newest decision about an object is the one
    /// that counts. False (nothing kept) when `t` is not after `now`: the wake is due already.
    pub fn set(&mut self, key: K, t: Timestamp, now: Timestamp) -> bool {
        if t <= now {
            self.at.remove(&key);
            return false;
        }
        self.at.insert(key, t);
        true
    }

    /// Forget `key`'s wake (the object decided something that needs none).
    pub fn clear(&mut self, key: &K) {
        self.at.remove(key);
    }

    /// Take every wake due at `now` among the keys `pick` selects, each once.
    pub fn take_due(&mut self, now: Timestamp, mut pick: impl FnMut(&K) -> bool) -> Vec<K> {
        let mut due = Vec::new();
        self.at.retain(|k, t| {
            let take = *t <= now && pick(k);
            if take {
                due.push(k.clone());
            }
            !take
        });
        due
    }

    pub fn len(&self) -> usize {
        self.at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use captf_shared::Op;
    use proptest::prelude::*;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn wait(reason: Reason, requeue_after: Option<u64>, not_before: Option<i64>) -> Wait {
        Wait {
            reason,
            op: Some(Op::Apply),
            requeue_after: requeue_after.map(Duration::from_secs),
            not_before: not_before.map(ts),
            attempt: None,
        }
    }

    #[test]
    fn a_backoff_wakes_at_its_not_before_on_the_controllers_clock() {
        // The seed's 1m, 2m, ... backoff: a failure at 1000 waits until 1060.
        let w = wait(Reason::InputsChangedBackoff, Some(60), Some(1_060));
        assert_eq!(wake(&w, ts(1_000)), Wake::At(ts(1_060)));
    }

    #[test]
    fn a_converged_object_wakes_for_its_next_drift_check() {
        // A 30m drift interval, checked at 10000: due at 11800, decided at 10600.
        let w = wait(Reason::Idle, Some(1_200), None);
        assert_eq!(wake(&w, ts(10_600)), Wake::At(ts(11_800)));
        let w = wait(Reason::RemediationLimit, Some(1_200), None);
        assert_eq!(wake(&w, ts(10_600)), Wake::At(ts(11_800)));
    }

    #[test]
    fn a_running_job_is_looked_at_again_after_five_minutes_of_the_clock() {
        let w = wait(Reason::JobActive, None, None);
        assert_eq!(wake(&w, ts(1_000)), Wake::At(ts(1_300)));
    }

    #[test]
    fn holds_no_watch_reports_are_looked_at_again_on_the_clock() {
        // The cluster holds every 10 s, the other holds every 30 s.
        for (reason, every) in [
            (Reason::ClusterBusy, 10),
            (Reason::MemberJobActive, 10),
            (Reason::InputsUnresolved, 30),
            (Reason::Paused, 30),
        ] {
            let w = wait(reason, Some(every), None);
            assert_eq!(wake(&w, ts(1_000)), Wake::At(ts(1_000 + every as i64)), "{reason:?}");
        }
    }

    #[test]
    fn waits_for_a_person_or_a_fix_end_only_with_a_watch_event() {
        for reason in [Reason::AwaitingApproval, Reason::InvalidSpec, Reason::PolicyViolation] {
            assert_eq!(wake(&wait(reason, None, None), ts(1_000)), Wake::OnChange, "{reason:?}");
        }
    }

    #[test]
    fn a_wake_that_is_already_due_is_not_kept() {
        let mut s = Schedule::default();
        assert!(!s.set("a", ts(100), ts(100)));
        assert!(s.set("b", ts(101), ts(100)));
        assert_eq!(s.len(), 1);
        // A later decision that needs no wake of the clock replaces the earlier one.
        assert!(!s.set("b", ts(50), ts(100)));
        assert!(s.is_empty());
    }

    #[test]
    fn only_the_picked_keys_are_taken() {
        let mut s = Schedule::default();
        s.set(("pool", "a"), ts(10), ts(0));
        s.set(("machine", "a"), ts(10), ts(0));
        assert_eq!(s.take_due(ts(10), |k| k.0 == "pool"), vec![("pool", "a")]);
        assert_eq!(s.take_due(ts(10), |_| true), vec![("machine", "a")]);
        assert!(s.is_empty());
    }

    proptest! {
        /// Every key is taken exactly once, at the first look at or after its newest time, and
        /// never before it.
        #[test]
        fn a_wake_comes_once_never_early_never_lost(
            sets in proptest::collection::vec((0u8..8, 1i64..500), 0..40),
            looks in proptest::collection::vec(1i64..600, 1..20),
        ) {
            let mut s = Schedule::default();
            let mut want: HashMap<u8, i64> = HashMap::new();
            for (k, t) in &sets {
                s.set(*k, ts(*t), ts(0));
                want.insert(*k, *t);
            }
            let mut looks = looks;
            looks.sort_unstable();
            let mut taken: HashMap<u8, i64> = HashMap::new();
            for now in &looks {
                for k in s.take_due(ts(*now), |_| true) {
                    prop_assert!(taken.insert(k, *now).is_none(), "{k} taken twice");
                }
            }
            let last = *looks.last().unwrap();
            for (k, t) in &want {
                match taken.get(k) {
                    Some(at) => {
                        prop_assert!(at >= t, "{k} woke at {at}, before {t}");
                        let first_look = looks.iter().find(|l| *l >= t).unwrap();
                        prop_assert_eq!(at, first_look);
                    }
                    None => prop_assert!(*t > last, "{k} due at {t} was never taken"),
                }
            }
        }
    }
}

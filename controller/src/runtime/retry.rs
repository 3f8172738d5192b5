//! Reconcile errors back off per object (docs/rules.md, "Reconcile errors"): exponentially from
//! [`ERROR_BASE`] to [`ERROR_CAP`], with jitter, reset by the object's next successful pass. A
//! persistent 403 or 500 then costs a few requests per object every few minutes instead of one
//! every two seconds, and many failing objects do not retry in lockstep.
//!
//! The delay is a PURE function of the error count and a random sample; [`ErrorBackoff`] only
//! keeps the counts.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use captf_shared::Kind;

/// The first retry after an error waits up to this long.
pub const ERROR_BASE: Duration = Duration::from_secs(2);
/// No retry after an error waits longer than this.
pub const ERROR_CAP: Duration = Duration::from_secs(300);

/// The longest delay after the `n`-th consecutive error (`n` ≥ 1): `min(base × 2^(n-1), cap)`.
pub fn error_ceiling(n: u32) -> Duration {
    let exp = n.saturating_sub(1).min(20);
    ERROR_BASE.saturating_mul(1u32 << exp).min(ERROR_CAP)
}

/// The delay after the `n`-th consecutive error, "equal jitter": half the ceiling plus a random
/// part of the other half, chosen by `sample` (any `u64`). Never below half the ceiling, so the
/// backoff still grows; never above the ceiling.
pub fn error_delay(n: u32, sample: u64) -> Duration {
    let ceiling = error_ceiling(n);
    let half = ceiling / 2;
    let spread = u64::try_from((ceiling - half).as_millis()).unwrap_or(u64::MAX);
    half + Duration::from_millis(sample % spread.saturating_add(1))
}

/// The object a count belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn of(id: &captf_core::ident::Ident) -> ObjectKey {
        ObjectKey {
            kind: id.kind,
            namespace: id.namespace.clone(),
            name: id.name.clone(),
        }
    }
}

/// Consecutive reconcile errors per object, and when the retry of the newest is due. An object
/// has an entry only while it is failing.
#[derive(Debug, Default)]
pub struct ErrorBackoff {
    errors: Mutex<HashMap<ObjectKey, (u32, Instant)>>,
    random: RandomState,
}

/// The count after one more error at `now`, given the count so far and when its retry was due
/// (PURE). A pass that a watch event started before that retry was due is not a retry: its error
/// keeps the count, so a burst of events during one transient error (a Cluster API controller
/// updating the object while the API server still refuses a write) does not push the next retry
/// minutes away.
pub fn next_error_count(previous: Option<(u32, Instant)>, now: Instant) -> u32 {
    match previous {
        Some((n, due)) if now < due => n.max(1),
        Some((n, _)) => n.saturating_add(1),
        None => 1,
    }
}

impl ErrorBackoff {
    /// Count one more error of `key` now; the number of errors in a row and the delay before the
    /// retry.
    pub fn failed(&self, key: &ObjectKey) -> (u32, Duration) {
        self.failed_at(key, Instant::now())
    }

    /// [`ErrorBackoff::failed`] at `now` (see [`next_error_count`]).
    pub fn failed_at(&self, key: &ObjectKey, now: Instant) -> (u32, Duration) {
        let Ok(mut m) = self.errors.lock() else {
            return (1, error_delay(1, 0));
        };
        let n = next_error_count(m.get(key).copied(), now);
        // A sample per object and count, from this process's random hash keys: objects that
        // failed together spread out instead of retrying in lockstep.
        let mut h = self.random.build_hasher();
        h.write_u32(n);
        h.write(key.namespace.as_bytes());
        h.write(key.name.as_bytes());
        let delay = error_delay(n, h.finish());
        m.insert(key.clone(), (n, now + delay));
        (n, delay)
    }

    /// A pass of `key` succeeded: its next error starts from the base again.
    pub fn succeeded(&self, key: &ObjectKey) {
        if let Ok(mut m) = self.errors.lock() {
            m.remove(key);
        }
    }

    /// How many errors in a row `key` has had.
    pub fn count(&self, key: &ObjectKey) -> u32 {
        self.errors
            .lock()
            .ok()
            .and_then(|m| m.get(key).map(|e| e.0))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> ObjectKey {
        ObjectKey {
            kind: Kind::TerraformCluster,
            namespace: "default".into(),
            name: "prod-eu".into(),
        }
    }

    #[test]
    fn the_ceiling_doubles_from_2s_to_the_5_minute_cap() {
        let secs: Vec<u64> = (1..=10).map(|n| error_ceiling(n).as_secs()).collect();
        assert_eq!(secs, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(error_ceiling(u32::MAX), ERROR_CAP);
    }

    #[test]
    fn errors_of_passes_woken_before_their_retry_was_due_do_not_grow_the_backoff() {
        let b = ErrorBackoff::default();
        let t0 = Instant::now();
        let (n, first) = b.failed_at(&key(), t0);
        assert_eq!(n, 1);
        // Eight watch events within four seconds, each pass failing: still the first error.
        let mut last = (1, first);
        for ms in [50, 800, 1_000, 3_000] {
            let at = t0 + Duration::from_millis(ms);
            if at < t0 + first {
                last = b.failed_at(&key(), at);
                assert_eq!(last.0, 1, "at {ms} ms");
            }
        }
        // The retry that was due fails: now the second in a row, and the delay grows.
        let (n, d) = b.failed_at(&key(), t0 + last.1 + Duration::from_secs(5));
        assert_eq!(n, 2);
        assert!(d >= error_ceiling(2) / 2, "{d:?}");
    }

    #[test]
    fn a_success_resets_the_count_and_the_delay() {
        let b = ErrorBackoff::default();
        let t0 = Instant::now();
        for want in 1..=4u32 {
            // Each error when the retry before it was due (the ceiling is past by then).
            let at = t0 + Duration::from_secs(600) * want;
            assert_eq!(b.failed_at(&key(), at).0, want);
        }
        b.succeeded(&key());
        assert_eq!(b.count(&key()), 0);
        let (n, d) = b.failed(&key());
        assert_eq!(n, 1);
        assert!(d <= ERROR_BASE, "{d:?}");
    }

    #[test]
    fn objects_back_off_independently() {
        let b = ErrorBackoff::default();
        let other = ObjectKey {
            name: "other".into(),
            ..key()
        };
        b.failed(&key());
        b.failed(&key());
        assert_eq!(b.failed(&other).0, 1);
    }

    proptest! {
        #[test]
        fn the_jittered_delay_lies_between_half_the_ceiling_and_the_ceiling(n in 1u32..40, sample in any::<u64>()) {
            let d = error_delay(n, sample);
            prop_assert!(d >= error_ceiling(n) / 2 && d <= error_ceiling(n), "{:?} for n = {}", d, n);
        }

        #[test]
        fn the_smallest_delay_never_shrinks_as_errors_continue(n in 1u32..40) {
            prop_assert!(error_ceiling(n + 1) / 2 >= error_ceiling(n) / 2);
        }
    }
}

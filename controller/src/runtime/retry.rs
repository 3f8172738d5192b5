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
use std::time::Duration;

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

/// Consecutive reconcile errors per object. An object has an entry only while it is failing.
#[derive(Debug, Default)]
pub struct ErrorBackoff {
    errors: Mutex<HashMap<ObjectKey, u32>>,
    random: RandomState,
}

impl ErrorBackoff {
    /// Count one more error of `key`; the number of errors in a row and the delay before the retry.
    pub fn failed(&self, key: &ObjectKey) -> (u32, Duration) {
        let n = match self.errors.lock() {
            Ok(mut m) => {
                let n = m.entry(key.clone()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            }
            Err(_) => 1,
        };
        // A sample per object and count, from this process's random hash keys: objects that
        // failed together spread out instead of retrying in lockstep.
        let mut h = self.random.build_hasher();
        h.write_u32(n);
        h.write(key.namespace.as_bytes());
        h.write(key.name.as_bytes());
        (n, error_delay(n, h.finish()))
    }

    /// A pass of `key` succeeded: its next error starts from the base again.
    pub fn succeeded(&self, key: &ObjectKey) {
        if let Ok(mut m) = self.errors.lock() {
            m.remove(key);
        }
    }

    /// How many errors in a row `key` has had.
    pub fn count(&self, key: &ObjectKey) -> u32 {
        self.errors.lock().ok().and_then(|m| m.get(key).copied()).unwrap_or(0)
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
    fn a_success_resets_the_count_and_the_delay() {
        let b = ErrorBackoff::default();
        for want in 1..=4 {
            assert_eq!(b.failed(&key()).0, want);
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

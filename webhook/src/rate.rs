//! The minimum receive rate of a request body.
//!
//! A body must arrive at [`MinRate::bytes_per_sec`] on average once its grace has passed: by
//! `grace + t` after its headers, at least `bytes_per_sec × t` bytes. A body that falls behind is
//! answered 408 and its connection closed, so a client that declares a large body and dribbles it
//! holds a request slot for about the grace, not the whole body timeout. The decision is the pure
//! [`MinRate::deadline`]: the time by which the body must have sent more than it has.

use std::time::Duration;

/// Default: bytes per second a body must average after its grace.
pub const DEFAULT_MIN_BODY_RATE: u64 = 64 * 1024;
/// Default: how long a body may lag before the rate applies.
pub const DEFAULT_MIN_BODY_RATE_GRACE: Duration = Duration::from_secs(2);

/// The rule's two knobs; a rate of 0 turns it off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MinRate {
    pub bytes_per_sec: u64,
    pub grace: Duration,
}

impl Default for MinRate {
    fn default() -> Self {
        MinRate {
            bytes_per_sec: DEFAULT_MIN_BODY_RATE,
            grace: DEFAULT_MIN_BODY_RATE_GRACE,
        }
    }
}

impl MinRate {
    /// With `received` bytes in, the time (since the body began) at which the body is too slow
    /// unless more has arrived; `None` when the rule is off.
    pub fn deadline(&self, received: usize) -> Option<Duration> {
        if self.bytes_per_sec == 0 {
            return None;
        }
        let received = u64::try_from(received).unwrap_or(u64::MAX);
        let secs = received / self.bytes_per_sec;
        let rest = received % self.bytes_per_sec;
        // rest < bytes_per_sec, so the nanos are below 1e9 and the product fits in u128.
        let nanos = u64::try_from(u128::from(rest) * 1_000_000_000 / u128::from(self.bytes_per_sec)).unwrap_or(0);
        Some(
            self.grace
                .saturating_add(Duration::from_secs(secs))
                .saturating_add(Duration::from_nanos(nanos)),
        )
    }

    /// Whether `received` bytes by `elapsed` since the body began is too slow.
    pub fn too_slow(&self, received: usize, elapsed: Duration) -> bool {
        self.deadline(received).is_some_and(|d| elapsed > d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const RULE: MinRate = MinRate {
        bytes_per_sec: 1000,
        grace: Duration::from_secs(2),
    };

    #[test]
    fn a_body_that_sends_nothing_is_too_slow_right_after_the_grace() {
        assert!(!RULE.too_slow(0, Duration::from_secs(2)));
        assert!(RULE.too_slow(0, Duration::from_millis(2001)));
    }

    #[test]
    fn each_byte_buys_its_share_of_a_second_after_the_grace() {
        assert_eq!(RULE.deadline(500), Some(Duration::from_millis(2500)));
        assert_eq!(RULE.deadline(3000), Some(Duration::from_secs(5)));
        assert!(!RULE.too_slow(3000, Duration::from_secs(5)));
        assert!(RULE.too_slow(2999, Duration::from_secs(5)));
    }

    #[test]
    fn a_rate_of_zero_turns_the_rule_off() {
        let off = MinRate {
            bytes_per_sec: 0,
            grace: Duration::ZERO,
        };
        assert_eq!(off.deadline(0), None);
        assert!(!off.too_slow(0, Duration::MAX));
    }

    #[test]
    fn huge_counts_do_not_overflow() {
        assert!(RULE.deadline(usize::MAX).is_some());
        assert!(!RULE.too_slow(usize::MAX, Duration::from_secs(3600)));
    }

    proptest! {
        /// A body at or above the rate is never too slow; one below it is, once the grace and its
        /// bytes' worth of time have passed.
        #[test]
        fn the_rate_is_an_average_after_the_grace(rate in 1u64..1_000_000, secs in 0u64..100, grace_ms in 0u64..10_000) {
            let rule = MinRate { bytes_per_sec: rate, grace: Duration::from_millis(grace_ms) };
            let elapsed = Duration::from_millis(grace_ms) + Duration::from_secs(secs);
            let enough = usize::try_from(rate * secs).unwrap();
            prop_assert!(!rule.too_slow(enough, elapsed));
            if enough > 0 {
                prop_assert!(rule.too_slow(enough - 1, elapsed));
            }
            // Exactly on time at `elapsed`, so too slow a moment later.
            prop_assert!(rule.too_slow(enough, elapsed + Duration::from_millis(1)));
        }
    }
}

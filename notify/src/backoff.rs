//! When a failed delivery is tried again: a pure function of the attempt number.

use std::time::Duration;

/// Capped exponential backoff without jitter: `first`, `2 × first`, `4 × first`, … never more
/// than `cap`, and no attempt after `max_attempts`. Notifications are few and go to different
/// receivers, so there is no herd for jitter to spread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    pub first: Duration,
    pub cap: Duration,
    /// Attempts in all, the first one included; 0 is taken as 1.
    pub max_attempts: u32,
}

impl Default for RetryPolicy {
    /// 1 s, 2 s, 4 s … 60 s, eight attempts: a receiver may be away for about two minutes.
    fn default() -> Self {
        RetryPolicy {
            first: Duration::from_secs(1),
            cap: Duration::from_secs(60),
            max_attempts: 8,
        }
    }
}

impl RetryPolicy {
    /// The wait after attempt `attempt` (1 for the first) failed, or `None` when it was the last.
    pub fn delay_after(&self, attempt: u32) -> Option<Duration> {
        if attempt == 0 || attempt >= self.max_attempts.max(1) {
            return None;
        }
        // 2^31 × any non-zero `first` is past any sensible cap; the shift stays in range.
        let factor = 1u32 << (attempt - 1).min(31);
        Some(self.first.saturating_mul(factor).min(self.cap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_from_the_first_and_stops_at_the_cap() {
        let p = RetryPolicy::default();
        let delays: Vec<_> = (1..8).map(|a| p.delay_after(a).map(|d| d.as_secs())).collect();
        assert_eq!(
            delays,
            [Some(1), Some(2), Some(4), Some(8), Some(16), Some(32), Some(60)]
        );
    }

    #[test]
    fn there_is_no_attempt_after_the_last() {
        let p = RetryPolicy::default();
        assert_eq!(p.delay_after(8), None);
        assert_eq!(p.delay_after(u32::MAX), None);
        let once = RetryPolicy { max_attempts: 1, ..p };
        assert_eq!(once.delay_after(1), None);
        let zero = RetryPolicy { max_attempts: 0, ..p };
        assert_eq!(zero.delay_after(1), None);
    }

    #[test]
    fn huge_attempt_numbers_and_durations_never_overflow() {
        let p = RetryPolicy {
            first: Duration::MAX,
            cap: Duration::from_secs(60),
            max_attempts: u32::MAX,
        };
        assert_eq!(p.delay_after(1), Some(Duration::from_secs(60)));
        assert_eq!(p.delay_after(u32::MAX - 1), Some(Duration::from_secs(60)));
        let ms = RetryPolicy {
            first: Duration::from_millis(1),
            cap: Duration::from_secs(3600),
            max_attempts: u32::MAX,
        };
        assert_eq!(ms.delay_after(40), Some(Duration::from_secs(3600)));
    }
}

//! Remembering what was sent: a map of keys to when they were first sent, bounded in age and
//! in size.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::event::DedupKey;

/// Keys seen within `window`, at most `capacity` of them. When full, the oldest is forgotten
/// first (its duplicate may then be sent again, which beats growing without bound).
#[derive(Debug)]
pub(crate) struct DedupWindow {
    window: Duration,
    capacity: usize,
    seen: HashMap<DedupKey, Instant>,
    /// Keys in the order they were seen; `now` never goes back, so also oldest first.
    order: VecDeque<(DedupKey, Instant)>,
}

impl DedupWindow {
    pub(crate) fn new(window: Duration, capacity: usize) -> Self {
        DedupWindow {
            window,
            capacity: capacity.max(1),
            seen: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Whether `key` is news at `now`; if it is, it is remembered from `now`.
    pub(crate) fn first_seen(&mut self, key: DedupKey, now: Instant) -> bool {
        while let Some(&(k, at)) = self.order.front() {
            if now.saturating_duration_since(at) < self.window {
                break;
            }
            self.order.pop_front();
            self.seen.remove(&k);
        }
        if self.seen.contains_key(&key) {
            return false;
        }
        if self.window.is_zero() {
            return true;
        }
        while self.order.len() >= self.capacity {
            if let Some((k, _)) = self.order.pop_front() {
                self.seen.remove(&k);
            }
        }
        self.seen.insert(key, now);
        self.order.push_back((key, now));
        true
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.seen.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, ObjectRef};
    use captf_shared::Kind;

    fn key(n: u32) -> DedupKey {
        Event::ApplyFailed {
            object: ObjectRef::new(Kind::TerraformCluster, "ns", "c"),
            failures: n,
            reason: String::new(),
        }
        .dedup_key()
    }

    #[test]
    fn a_key_seen_within_the_window_is_a_duplicate_and_after_it_is_news() {
        let t0 = Instant::now();
        let mut d = DedupWindow::new(Duration::from_secs(60), 10);
        assert!(d.first_seen(key(1), t0));
        assert!(!d.first_seen(key(1), t0 + Duration::from_secs(59)));
        assert!(d.first_seen(key(2), t0 + Duration::from_secs(59)));
        assert!(d.first_seen(key(1), t0 + Duration::from_secs(60)));
        // Seen again at 60 s: a duplicate until 120 s.
        assert!(!d.first_seen(key(1), t0 + Duration::from_secs(119)));
    }

    #[test]
    fn memory_is_bounded_by_the_capacity_forgetting_the_oldest() {
        let t0 = Instant::now();
        let mut d = DedupWindow::new(Duration::from_secs(3600), 3);
        for n in 0..100 {
            assert!(d.first_seen(key(n), t0));
            assert!(d.len() <= 3);
        }
        assert!(!d.first_seen(key(99), t0));
        assert!(d.first_seen(key(0), t0), "the oldest was forgotten");
    }

    #[test]
    fn expired_keys_are_forgotten_without_a_lookup_of_them() {
        let t0 = Instant::now();
        let mut d = DedupWindow::new(Duration::from_secs(1), 100);
        for n in 0..50 {
            d.first_seen(key(n), t0);
        }
        d.first_seen(key(1000), t0 + Duration::from_secs(2));
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn a_zero_window_remembers_nothing() {
        let t0 = Instant::now();
        let mut d = DedupWindow::new(Duration::ZERO, 10);
        assert!(d.first_seen(key(1), t0));
        assert!(d.first_seen(key(1), t0));
        assert_eq!(d.len(), 0);
    }
}

//! The in-flight budget: how many requests, and how many body bytes, the server holds at once.
//!
//! Each review request takes an [`Admission`] before its body is read and reserves its body's
//! bytes as they are known (the declared length up front, or each chunk as it arrives); dropping
//! the admission gives everything back. Past either bound the request is refused (429) instead of
//! queued, so a burst of large bodies cannot grow memory without limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Defaults: the API server rarely has more than a handful of reviews in flight per replica.
pub const DEFAULT_MAX_IN_FLIGHT_REQUESTS: usize = 64;
/// Four bodies at the default body limit (7 MiB).
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: usize = 28 * 1024 * 1024;

/// Why a request was refused by the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("too many review requests in flight (at most {max}); retry shortly")]
    Requests { max: usize },
    #[error("review request bodies in flight would exceed {max} bytes; retry shortly")]
    Bytes { max: usize },
}

/// The counters, shared by every connection.
#[derive(Debug)]
pub struct Budget {
    max_requests: usize,
    max_bytes: usize,
    requests: AtomicUsize,
    bytes: AtomicUsize,
}

impl Budget {
    pub fn new(max_requests: usize, max_bytes: usize) -> Arc<Self> {
        Arc::new(Budget {
            max_requests,
            max_bytes,
            requests: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
        })
    }

    /// Requests and bytes held now.
    pub fn in_flight(&self) -> (usize, usize) {
        (
            self.requests.load(Ordering::Acquire),
            self.bytes.load(Ordering::Acquire),
        )
    }

    /// Take a request slot.
    pub fn admit(self: &Arc<Self>) -> Result<Admission, Refused> {
        take(&self.requests, 1, self.max_requests).map_err(|()| Refused::Requests { max: self.max_requests })?;
        Ok(Admission {
            budget: self.clone(),
            bytes: 0,
        })
    }
}

/// Add `n` to `counter` unless that passes `max`.
fn take(counter: &AtomicUsize, n: usize, max: usize) -> Result<(), ()> {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
            cur.checked_add(n).filter(|total| *total <= max)
        })
        .map(|_| ())
        .map_err(|_| ())
}

/// One request's share of the budget; dropping it gives the share back.
#[derive(Debug)]
pub struct Admission {
    budget: Arc<Budget>,
    bytes: usize,
}

impl Admission {
    /// Reserve `n` more body bytes for this request.
    pub fn reserve(&mut self, n: usize) -> Result<(), Refused> {
        take(&self.budget.bytes, n, self.budget.max_bytes).map_err(|()| Refused::Bytes {
            max: self.budget.max_bytes,
        })?;
        self.bytes += n;
        Ok(())
    }

    /// Bytes this request holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.budget.bytes.fetch_sub(self.bytes, Ordering::AcqRel);
        self.budget.requests.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_request_past_the_request_bound_is_refused_until_one_ends() {
        let b = Budget::new(2, 100);
        let first = b.admit().unwrap();
        let _second = b.admit().unwrap();
        assert_eq!(b.admit().unwrap_err(), Refused::Requests { max: 2 });
        drop(first);
        assert!(b.admit().is_ok());
    }

    #[test]
    fn bytes_past_the_byte_bound_are_refused_and_given_back_when_the_request_ends() {
        let b = Budget::new(10, 100);
        let mut a = b.admit().unwrap();
        a.reserve(60).unwrap();
        let mut c = b.admit().unwrap();
        assert_eq!(c.reserve(41).unwrap_err(), Refused::Bytes { max: 100 });
        c.reserve(40).unwrap();
        assert_eq!(b.in_flight(), (2, 100));
        drop(a);
        assert_eq!(b.in_flight(), (1, 40));
        drop(c);
        assert_eq!(b.in_flight(), (0, 0));
    }

    #[test]
    fn a_reservation_that_would_overflow_is_refused() {
        let b = Budget::new(1, usize::MAX);
        let mut a = b.admit().unwrap();
        a.reserve(usize::MAX).unwrap();
        assert!(a.reserve(1).is_err());
    }
}

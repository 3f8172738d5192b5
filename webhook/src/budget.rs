//! The in-flight budget: how many requests, and how many body bytes, the server holds at once, in
//! all and per source address.
//!
//! Each review request takes an [`Admission`] before its body is read and reserves its body's
//! bytes as they arrive (never the declared `Content-Length`: a client that declares the largest
//! body and sends one byte holds one byte); dropping the admission gives everything back. Past
//! any bound the request is refused (429) instead of queued, so a burst of large bodies cannot
//! grow memory without limit, and one source address (a pod that is not the API server) can hold
//! at most its share: the rest stays free for everyone else.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// Defaults: the API server rarely has more than a handful of reviews in flight per replica.
pub const DEFAULT_MAX_IN_FLIGHT_REQUESTS: usize = 64;
/// Four bodies at the default body limit (7 MiB).
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: usize = 28 * 1024 * 1024;
/// Half the requests: one address never holds all of them.
pub const DEFAULT_MAX_PEER_IN_FLIGHT_REQUESTS: usize = 32;
/// Two bodies at the default body limit: half the bytes.
pub const DEFAULT_MAX_PEER_IN_FLIGHT_BYTES: usize = 14 * 1024 * 1024;

/// Why a request was refused by the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("too many review requests in flight (at most {max}); retry shortly")]
    Requests { max: usize },
    #[error("review request bodies in flight would exceed {max} bytes; retry shortly")]
    Bytes { max: usize },
    #[error("too many review requests in flight from this address (at most {max}); retry shortly")]
    PeerRequests { max: usize },
    #[error("review request bodies in flight from this address would exceed {max} bytes; retry shortly")]
    PeerBytes { max: usize },
}

/// The bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub requests: usize,
    pub bytes: usize,
    pub peer_requests: usize,
    pub peer_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            requests: DEFAULT_MAX_IN_FLIGHT_REQUESTS,
            bytes: DEFAULT_MAX_IN_FLIGHT_BYTES,
            peer_requests: DEFAULT_MAX_PEER_IN_FLIGHT_REQUESTS,
            peer_bytes: DEFAULT_MAX_PEER_IN_FLIGHT_BYTES,
        }
    }
}

/// Requests and bytes held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Held {
    requests: usize,
    bytes: usize,
}

#[derive(Debug, Default)]
struct Counters {
    total: Held,
    /// Only peers holding something: at most one entry per request in flight.
    peers: HashMap<Option<IpAddr>, Held>,
}

/// The counters, shared by every connection.
#[derive(Debug)]
pub struct Budget {
    bounds: Bounds,
    counters: Mutex<Counters>,
}

impl Budget {
    pub fn new(bounds: Bounds) -> Arc<Self> {
        Arc::new(Budget {
            bounds,
            counters: Mutex::new(Counters::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counters> {
        // The counters are consistent after every critical section: a panic elsewhere leaves
        // nothing half-done.
        self.counters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Requests and bytes held now, in all.
    pub fn in_flight(&self) -> (usize, usize) {
        let c = self.lock();
        (c.total.requests, c.total.bytes)
    }

    /// Requests and bytes `peer` holds now.
    pub fn peer_in_flight(&self, peer: Option<IpAddr>) -> (usize, usize) {
        let c = self.lock();
        c.peers.get(&peer).map_or((0, 0), |h| (h.requests, h.bytes))
    }

    /// Take a request slot for a request from `peer` (`None`: address unknown, one shared peer).
    pub fn admit(self: &Arc<Self>, peer: Option<IpAddr>) -> Result<Admission, Refused> {
        let b = self.bounds;
        let mut c = self.lock();
        if c.total.requests >= b.requests {
            return Err(Refused::Requests { max: b.requests });
        }
        let held = c.peers.get(&peer).copied().unwrap_or_default();
        if held.requests >= b.peer_requests {
            return Err(Refused::PeerRequests { max: b.peer_requests });
        }
        c.total.requests += 1;
        c.peers.entry(peer).or_default().requests += 1;
        Ok(Admission {
            budget: self.clone(),
            peer,
            bytes: 0,
        })
    }

    fn reserve(&self, peer: Option<IpAddr>, n: usize) -> Result<(), Refused> {
        let b = self.bounds;
        let mut c = self.lock();
        if c.total.bytes.checked_add(n).is_none_or(|t| t > b.bytes) {
            return Err(Refused::Bytes { max: b.bytes });
        }
        let held = c.peers.get(&peer).copied().unwrap_or_default();
        if held.bytes.checked_add(n).is_none_or(|t| t > b.peer_bytes) {
            return Err(Refused::PeerBytes { max: b.peer_bytes });
        }
        c.total.bytes += n;
        c.peers.entry(peer).or_default().bytes += n;
        Ok(())
    }

    fn release(&self, peer: Option<IpAddr>, bytes: usize) {
        let mut c = self.lock();
        c.total.requests = c.total.requests.saturating_sub(1);
        c.total.bytes = c.total.bytes.saturating_sub(bytes);
        if let Some(h) = c.peers.get_mut(&peer) {
            h.requests = h.requests.saturating_sub(1);
            h.bytes = h.bytes.saturating_sub(bytes);
            if h.requests == 0 {
                c.peers.remove(&peer);
            }
        }
    }
}

/// One request's share of the budget; dropping it gives the share back.
#[derive(Debug)]
pub struct Admission {
    budget: Arc<Budget>,
    peer: Option<IpAddr>,
    bytes: usize,
}

impl Admission {
    /// Reserve `n` more body bytes for this request (as they arrive).
    pub fn reserve(&mut self, n: usize) -> Result<(), Refused> {
        self.budget.reserve(self.peer, n)?;
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
        self.budget.release(self.peer, self.bytes);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn bounds(requests: usize, bytes: usize, peer_requests: usize, peer_bytes: usize) -> Bounds {
        Bounds {
            requests,
            bytes,
            peer_requests,
            peer_bytes,
        }
    }

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn a_request_past_the_request_bound_is_refused_until_one_ends() {
        let b = Budget::new(bounds(2, 100, 10, 100));
        let first = b.admit(ip(1)).unwrap();
        let _second = b.admit(ip(2)).unwrap();
        assert_eq!(b.admit(ip(3)).unwrap_err(), Refused::Requests { max: 2 });
        drop(first);
        assert!(b.admit(ip(3)).is_ok());
    }

    #[test]
    fn bytes_past_the_byte_bound_are_refused_and_given_back_when_the_request_ends() {
        let b = Budget::new(bounds(10, 100, 10, 100));
        let mut a = b.admit(ip(1)).unwrap();
        a.reserve(60).unwrap();
        let mut c = b.admit(ip(2)).unwrap();
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
        let b = Budget::new(bounds(1, usize::MAX, 1, usize::MAX));
        let mut a = b.admit(None).unwrap();
        a.reserve(usize::MAX).unwrap();
        assert!(a.reserve(1).is_err());
    }

    #[test]
    fn one_peer_holds_at_most_its_share_and_others_still_get_in() {
        let b = Budget::new(bounds(4, 100, 2, 50));
        let mut first = b.admit(ip(1)).unwrap();
        let _second = b.admit(ip(1)).unwrap();
        assert_eq!(b.admit(ip(1)).unwrap_err(), Refused::PeerRequests { max: 2 });
        first.reserve(50).unwrap();
        assert_eq!(first.reserve(1).unwrap_err(), Refused::PeerBytes { max: 50 });
        let mut other = b.admit(ip(2)).unwrap();
        other.reserve(50).unwrap();
        assert_eq!(b.peer_in_flight(ip(1)), (2, 50));
        assert_eq!(b.peer_in_flight(ip(2)), (1, 50));
    }

    #[test]
    fn a_peer_that_holds_nothing_leaves_no_entry_behind() {
        let b = Budget::new(Bounds::default());
        for last in 0..=255u8 {
            let mut a = b.admit(ip(last)).unwrap();
            a.reserve(10).unwrap();
        }
        assert!(b.lock().peers.is_empty());
        assert_eq!(b.in_flight(), (0, 0));
    }

    proptest! {
        /// Whatever peers admit and reserve, no bound is ever passed, and once every admission
        /// is dropped nothing is held.
        #[test]
        fn no_bound_is_ever_passed_and_everything_comes_back(
            steps in proptest::collection::vec((0u8..4, 0usize..40, any::<bool>()), 1..60)
        ) {
            let bounds = bounds(6, 100, 3, 60);
            let b = Budget::new(bounds);
            let mut held: Vec<Admission> = vec![];
            for (peer, n, drop_one) in steps {
                if drop_one && !held.is_empty() {
                    held.remove(n % held.len());
                    continue;
                }
                if let Ok(mut a) = b.admit(ip(peer)) {
                    let _ = a.reserve(n);
                    held.push(a);
                }
                let (requests, bytes) = b.in_flight();
                prop_assert!(requests <= bounds.requests && bytes <= bounds.bytes);
                for p in 0..4 {
                    let (r, by) = b.peer_in_flight(ip(p));
                    prop_assert!(r <= bounds.peer_requests && by <= bounds.peer_bytes);
                }
            }
            drop(held);
            prop_assert_eq!(b.in_flight(), (0, 0));
        }
    }
}

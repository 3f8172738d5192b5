//! The in-flight budget: how many requests, and how many body bytes, the server holds at once, in
//! all, for the API server's identity, and per source address.
//!
//! Each review request takes an [`Admission`] before its body is read and reserves its body's
//! bytes as they arrive (never the declared `Content-Length`: a client that declares the largest
//! body and sends one byte holds one byte); dropping the admission gives everything back. Past
//! any bound the request is refused (429) instead of queued, so a burst of large bodies cannot
//! grow memory without limit.
//!
//! Who asks decides the bounds ([`Who`]). A *trusted* client (one the server can tell is the API
//! server: a verified client certificate, or a configured address) is bounded only by the bounds
//! in all, and part of them (the reserve) is never given to anyone else. Every other source
//! address holds at most its small share, and all of them together at most the bounds less the
//! reserve. So whatever other pods hold, the API server finds its reserve free; and without a
//! trusted identity, the shares are small enough that many pods leave room for it. The decision
//! is the pure [`decide`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// Defaults: the API server rarely has more than a handful of reviews in flight per replica.
pub const DEFAULT_MAX_IN_FLIGHT_REQUESTS: usize = 64;
/// Four bodies at the default body limit (7 MiB).
pub const DEFAULT_MAX_IN_FLIGHT_BYTES: usize = 28 * 1024 * 1024;
/// A sixteenth of the requests: eight addresses at their share leave half of them.
pub const DEFAULT_MAX_PEER_IN_FLIGHT_REQUESTS: usize = 4;
/// An UPDATE of two objects at etcd's 1.5 MiB: eight addresses at their share leave 4 MiB.
pub const DEFAULT_MAX_PEER_IN_FLIGHT_BYTES: usize = 3 * 1024 * 1024;
/// Requests only a trusted client may hold (when one is configured): a quarter.
pub const DEFAULT_RESERVED_IN_FLIGHT_REQUESTS: usize = 16;
/// Bytes only a trusted client may hold (when one is configured): two bodies at the body limit.
pub const DEFAULT_RESERVED_IN_FLIGHT_BYTES: usize = 14 * 1024 * 1024;

/// Who a request (or connection) counts against.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Who {
    /// The API server's identity: a verified client certificate or a configured address.
    Trusted,
    /// Anyone else, by source address (`None`: unknown, one shared peer).
    Peer(Option<IpAddr>),
}

/// Why a request was refused by the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("too many review requests in flight (at most {max}); retry shortly")]
    Requests { max: usize },
    #[error("review request bodies in flight would exceed {max} bytes; retry shortly")]
    Bytes { max: usize },
    #[error("too many review requests in flight from clients other than the API server (at most {max}); retry shortly")]
    SharedRequests { max: usize },
    #[error(
        "review request bodies in flight from clients other than the API server would exceed {max} bytes; retry shortly"
    )]
    SharedBytes { max: usize },
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
    /// Of `requests`, held back for [`Who::Trusted`] (0: no reserve, e.g. nobody is trusted).
    pub reserved_requests: usize,
    /// Of `bytes`, held back for [`Who::Trusted`].
    pub reserved_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            requests: DEFAULT_MAX_IN_FLIGHT_REQUESTS,
            bytes: DEFAULT_MAX_IN_FLIGHT_BYTES,
            peer_requests: DEFAULT_MAX_PEER_IN_FLIGHT_REQUESTS,
            peer_bytes: DEFAULT_MAX_PEER_IN_FLIGHT_BYTES,
            reserved_requests: 0,
            reserved_bytes: 0,
        }
    }
}

/// Requests and bytes held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub requests: usize,
    pub bytes: usize,
}

/// What [`decide`] reads: what is held in all, by the trusted identity, and by the asker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub total: Held,
    pub trusted: Held,
    /// What the asker holds (for [`Who::Trusted`], the same as `trusted`).
    pub asker: Held,
}

/// One dimension of the rule: may `add` more be taken? `Err(which)`: 0 the bound in all, 1 the
/// shared pool, 2 the asker's share.
fn allows(bound: usize, reserved: usize, share: usize, trusted: bool, c: [usize; 3], add: usize) -> Result<(), u8> {
    let [total, trusted_held, asker] = c;
    if total.checked_add(add).is_none_or(|t| t > bound) {
        return Err(0);
    }
    if trusted {
        return Ok(());
    }
    // What everyone but the trusted identity's reserve holds: the others, and whatever the
    // trusted identity holds past its reserve.
    let reserved = reserved.min(bound);
    let shared = total.saturating_sub(trusted_held.min(reserved));
    if shared.checked_add(add).is_none_or(|s| s > bound - reserved) {
        return Err(1);
    }
    if asker.checked_add(add).is_none_or(|a| a > share) {
        return Err(2);
    }
    Ok(())
}

/// The decision, pure: may `who`, given `counts`, take `add` more (requests and bytes)?
pub fn decide(b: &Bounds, who: Who, counts: Counts, add: Held) -> Result<(), Refused> {
    let trusted = matches!(who, Who::Trusted);
    let c = |f: fn(&Held) -> usize| [f(&counts.total), f(&counts.trusted), f(&counts.asker)];
    let shared_requests = b.requests - b.reserved_requests.min(b.requests);
    let shared_bytes = b.bytes - b.reserved_bytes.min(b.bytes);
    allows(
        b.requests,
        b.reserved_requests,
        b.peer_requests,
        trusted,
        c(|h| h.requests),
        add.requests,
    )
    .map_err(|which| match which {
        0 => Refused::Requests { max: b.requests },
        1 => Refused::SharedRequests { max: shared_requests },
        _ => Refused::PeerRequests { max: b.peer_requests },
    })?;
    allows(
        b.bytes,
        b.reserved_bytes,
        b.peer_bytes,
        trusted,
        c(|h| h.bytes),
        add.bytes,
    )
    .map_err(|which| match which {
        0 => Refused::Bytes { max: b.bytes },
        1 => Refused::SharedBytes { max: shared_bytes },
        _ => Refused::PeerBytes { max: b.peer_bytes },
    })
}

#[derive(Debug, Default)]
struct Counters {
    total: Held,
    /// Only askers holding something: at most one entry per request in flight.
    held: HashMap<Who, Held>,
}

impl Counters {
    fn counts(&self, who: Who) -> Counts {
        let of = |w: &Who| self.held.get(w).copied().unwrap_or_default();
        Counts {
            total: self.total,
            trusted: of(&Who::Trusted),
            asker: of(&who),
        }
    }
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

    /// Requests and bytes `who` holds now.
    pub fn held_by(&self, who: Who) -> (usize, usize) {
        let c = self.lock();
        c.held.get(&who).map_or((0, 0), |h| (h.requests, h.bytes))
    }

    /// Requests and bytes the address `peer` holds now (as an untrusted peer).
    pub fn peer_in_flight(&self, peer: Option<IpAddr>) -> (usize, usize) {
        self.held_by(Who::Peer(peer))
    }

    /// Take a request slot for a request from `who`.
    pub fn admit(self: &Arc<Self>, who: Who) -> Result<Admission, Refused> {
        let mut c = self.lock();
        let one = Held { requests: 1, bytes: 0 };
        decide(&self.bounds, who, c.counts(who), one)?;
        c.total.requests += 1;
        c.held.entry(who).or_default().requests += 1;
        Ok(Admission {
            budget: self.clone(),
            who,
            bytes: 0,
        })
    }

    fn reserve(&self, who: Who, n: usize) -> Result<(), Refused> {
        let mut c = self.lock();
        decide(&self.bounds, who, c.counts(who), Held { requests: 0, bytes: n })?;
        c.total.bytes += n;
        c.held.entry(who).or_default().bytes += n;
        Ok(())
    }

    fn release(&self, who: Who, bytes: usize) {
        let mut c = self.lock();
        c.total.requests = c.total.requests.saturating_sub(1);
        c.total.bytes = c.total.bytes.saturating_sub(bytes);
        if let Some(h) = c.held.get_mut(&who) {
            h.requests = h.requests.saturating_sub(1);
            h.bytes = h.bytes.saturating_sub(bytes);
            if h.requests == 0 {
                c.held.remove(&who);
            }
        }
    }
}

/// One request's share of the budget; dropping it gives the share back.
#[derive(Debug)]
pub struct Admission {
    budget: Arc<Budget>,
    who: Who,
    bytes: usize,
}

impl Admission {
    /// Reserve `n` more body bytes for this request (as they arrive).
    pub fn reserve(&mut self, n: usize) -> Result<(), Refused> {
        self.budget.reserve(self.who, n)?;
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
        self.budget.release(self.who, self.bytes);
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
            reserved_requests: 0,
            reserved_bytes: 0,
        }
    }

    fn ip(last: u8) -> Who {
        Who::Peer(Some(IpAddr::from([10, 0, 0, last])))
    }

    const MI: usize = 1024 * 1024;

    /// The defaults, with the reserve a trusted identity gets.
    fn reserved() -> Bounds {
        Bounds {
            reserved_requests: DEFAULT_RESERVED_IN_FLIGHT_REQUESTS,
            reserved_bytes: DEFAULT_RESERVED_IN_FLIGHT_BYTES,
            ..Bounds::default()
        }
    }

    /// Every peer in `peers` takes as many requests, and as many bytes on them, as it may.
    fn fill(b: &Arc<Budget>, peers: impl IntoIterator<Item = Who>) -> Vec<Admission> {
        let mut held = vec![];
        for who in peers {
            while let Ok(mut a) = b.admit(who) {
                let mut chunk = MI;
                while chunk > 0 {
                    if a.reserve(chunk).is_err() {
                        chunk /= 2;
                    }
                }
                held.push(a);
            }
        }
        held
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
        let mut a = b.admit(Who::Peer(None)).unwrap();
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
        assert_eq!(b.held_by(ip(1)), (2, 50));
        assert_eq!(b.held_by(ip(2)), (1, 50));
    }

    #[test]
    fn a_peer_that_holds_nothing_leaves_no_entry_behind() {
        let b = Budget::new(Bounds::default());
        for last in 0..=255u8 {
            let mut a = b.admit(ip(last)).unwrap();
            a.reserve(10).unwrap();
        }
        assert!(b.lock().held.is_empty());
        assert_eq!(b.in_flight(), (0, 0));
    }

    #[test]
    fn eight_addresses_at_their_default_share_leave_room_for_a_ninth() {
        let b = Budget::new(Bounds::default());
        let held = fill(&b, (1..=8).map(ip));
        assert_eq!(b.in_flight(), (8 * 4, 8 * 3 * MI));
        let mut api_server = b.admit(ip(100)).unwrap();
        api_server.reserve(3 * MI).unwrap();
        drop(held);
    }

    #[test]
    fn with_a_reserve_no_number_of_addresses_takes_the_trusted_share() {
        let b = Budget::new(reserved());
        let held = fill(&b, (1..=200).map(ip));
        // The others together hold the bounds less the reserve, and no more.
        assert_eq!(b.in_flight(), (64 - 16, 28 * MI - 14 * MI));
        assert_eq!(b.admit(ip(201)).unwrap_err(), Refused::SharedRequests { max: 48 });
        let mut trusted: Vec<Admission> = (0..16).map(|_| b.admit(Who::Trusted).unwrap()).collect();
        trusted[0].reserve(7 * MI).unwrap();
        trusted[1].reserve(7 * MI).unwrap();
        assert_eq!(trusted[2].reserve(1).unwrap_err(), Refused::Bytes { max: 28 * MI });
        assert_eq!(b.admit(Who::Trusted).unwrap_err(), Refused::Requests { max: 64 });
        drop(held);
        // Once the others let go, the trusted identity may use the whole budget.
        trusted.extend((0..48).map(|_| b.admit(Who::Trusted).unwrap()));
        trusted[2].reserve(14 * MI).unwrap();
        assert_eq!(b.held_by(Who::Trusted), (64, 28 * MI));
    }

    #[test]
    fn what_the_trusted_identity_holds_past_its_reserve_comes_out_of_the_shared_pool() {
        let b = Budget::new(bounds(10, 100, 10, 100));
        let b = Budget::new(Bounds {
            reserved_requests: 4,
            reserved_bytes: 40,
            ..b.bounds
        });
        let _trusted: Vec<Admission> = (0..6).map(|_| b.admit(Who::Trusted).unwrap()).collect();
        // 2 past the reserve: the others share 6 - 2.
        let _others: Vec<Admission> = (0..4).map(|i| b.admit(ip(i)).unwrap()).collect();
        assert_eq!(b.admit(ip(9)).unwrap_err(), Refused::Requests { max: 10 });
    }

    #[test]
    fn a_reserve_larger_than_the_bound_leaves_the_others_nothing_and_does_not_panic() {
        let b = Budget::new(Bounds {
            reserved_requests: usize::MAX,
            reserved_bytes: usize::MAX,
            ..bounds(2, 10, 2, 10)
        });
        assert_eq!(b.admit(ip(1)).unwrap_err(), Refused::SharedRequests { max: 0 });
        let mut t = b.admit(Who::Trusted).unwrap();
        t.reserve(10).unwrap();
    }

    proptest! {
        /// Whatever the other addresses (and the trusted identity itself) hold, the trusted
        /// identity can still top itself up to its whole reserve of requests and bytes.
        #[test]
        fn the_reserve_is_always_free_for_the_trusted_identity(
            reserved_requests in 1usize..8,
            reserved_bytes in 0usize..100,
            steps in proptest::collection::vec((0u8..6, 0usize..60, 0u8..4), 1..80)
        ) {
            let bounds = Bounds { reserved_requests, reserved_bytes, ..bounds(8, 100, 3, 40) };
            let b = Budget::new(bounds);
            let mut held: Vec<Admission> = vec![];
            for (peer, n, action) in steps {
                let who = if action == 1 { Who::Trusted } else { ip(peer) };
                if action == 0 && !held.is_empty() {
                    held.remove(n % held.len());
                } else if let Ok(mut a) = b.admit(who) {
                    let _ = a.reserve(n);
                    held.push(a);
                }
                let (requests, bytes) = b.in_flight();
                prop_assert!(requests <= bounds.requests && bytes <= bounds.bytes);
                let (tr, tb) = b.held_by(Who::Trusted);
                let mut top = vec![];
                for _ in tr..reserved_requests {
                    let a = b.admit(Who::Trusted);
                    prop_assert!(a.is_ok(), "{:?}", a.err());
                    top.extend(a);
                }
                if let Some(a) = top.first_mut().or_else(|| held.iter_mut().find(|a| a.who == Who::Trusted)) {
                    let r = a.reserve(reserved_bytes.saturating_sub(tb));
                    prop_assert!(r.is_ok(), "{:?}", r);
                }
            }
        }
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
                    let (r, by) = b.held_by(ip(p));
                    prop_assert!(r <= bounds.peer_requests && by <= bounds.peer_bytes);
                }
            }
            drop(held);
            prop_assert_eq!(b.in_flight(), (0, 0));
        }
    }
}

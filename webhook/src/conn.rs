//! Per-connection limits that no trickle of bytes and no HTTP/2 PING can stretch.
//!
//! Timers here count requests, not bytes: a connection is *idle* while no request is being
//! answered, however many bytes or pings arrive, and it is closed (gracefully: HTTP/1 after the
//! response in flight, HTTP/2 with GOAWAY) when
//! - it has not started its first request within the header timeout of the TLS handshake,
//! - it has been idle for the idle timeout since its last request ended (a request whose headers
//!   trickle in is not started, so it does not count),
//! - it has been open for the maximum age, or
//! - it has started the maximum number of requests.
//!
//! Once asked to close, it gets a short grace to finish, then it is dropped. The decision is the
//! pure [`check`] over times measured from the connection's start; [`Activity`] is what the
//! service updates and the connection's task reads.
//!
//! [`PeerConnections`] counts the connections open from each source address: past its bound a new
//! one is closed right after accept, so one pod cannot take the whole connection cap.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Default: connections open at once; past it new ones are closed right after accept.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// Default: a connection is closed (gracefully) after this long, whatever it does.
pub const DEFAULT_MAX_CONNECTION_AGE: Duration = Duration::from_secs(600);
/// Default: a connection is closed (gracefully) after this many requests.
pub const DEFAULT_MAX_REQUESTS_PER_CONNECTION: u64 = 1000;
/// Default: HTTP/2 streams a client may have open on one connection.
pub const DEFAULT_HTTP2_MAX_STREAMS: u32 = 32;
/// Default: connections open at once from one source address (an eighth of the cap: the API
/// server, which keeps a few connections per replica, has room to spare, and one pod holds at
/// most this much).
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 32;

/// Connections open per source address, bounded.
#[derive(Debug)]
pub struct PeerConnections {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl PeerConnections {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(PeerConnections {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for one more connection from `peer`, or `None` when it has `max` open.
    pub fn open(self: &Arc<Self>, peer: IpAddr) -> Option<PeerSlot> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(peer).or_insert(0);
        if *n >= self.max {
            if *n == 0 {
                open.remove(&peer);
            }
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            peers: self.clone(),
            peer,
        })
    }

    /// Connections open from `peer` now.
    pub fn open_from(&self, peer: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(&peer).copied().unwrap_or(0)
    }

    /// Addresses with a connection open now.
    pub fn peers(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

/// One connection's place in [`PeerConnections`]; dropping it frees the place.
#[derive(Debug)]
pub struct PeerSlot {
    peers: Arc<PeerConnections>,
    peer: IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.peer);
            }
        }
    }
}

/// The per-connection knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// The first request must start within this of the handshake.
    pub first_request_timeout: Duration,
    /// With no request in flight for this long since the last one ended, the connection closes.
    pub idle_timeout: Duration,
    /// The connection closes after this long.
    pub max_age: Duration,
    /// The connection closes after this many requests.
    pub max_requests: u64,
    /// How long a closing connection gets to finish before it is dropped.
    pub close_grace: Duration,
}

/// Why a connection is closed (the `reason` of `captf_webhook_connections_closed_total`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum CloseReason {
    NoRequest,
    Idle,
    MaxAge,
    MaxRequests,
    /// The server is shutting down (never a [`check`] verdict).
    Shutdown,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::NoRequest => "no request within the header timeout",
            CloseReason::Idle => "idle",
            CloseReason::MaxAge => "maximum age",
            CloseReason::MaxRequests => "maximum requests",
            CloseReason::Shutdown => "server shutting down",
        }
    }
}

/// What to do with a connection now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Keep it; look again at this time (since the connection's start) or on activity.
    KeepUntil(Duration),
    Close(CloseReason),
}

/// The connection's state as [`check`] reads it, all times since the connection's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub now: Duration,
    pub in_flight: usize,
    pub started: u64,
    /// When the last request ended (or the connection started, before any).
    pub last_end: Duration,
}

/// The decision, pure: time is a parameter.
pub fn check(limits: &ConnLimits, seen: Seen) -> Verdict {
    if seen.now >= limits.max_age {
        return Verdict::Close(CloseReason::MaxAge);
    }
    if seen.started >= limits.max_requests {
        return Verdict::Close(CloseReason::MaxRequests);
    }
    if seen.in_flight > 0 {
        return Verdict::KeepUntil(limits.max_age);
    }
    let (deadline, reason) = if seen.started == 0 {
        (limits.first_request_timeout, CloseReason::NoRequest)
    } else {
        (seen.last_end.saturating_add(limits.idle_timeout), CloseReason::Idle)
    };
    if seen.now >= deadline {
        Verdict::Close(reason)
    } else {
        Verdict::KeepUntil(deadline.min(limits.max_age))
    }
}

/// What the service records about one connection's requests.
#[derive(Debug)]
pub struct Activity {
    start: Instant,
    in_flight: AtomicUsize,
    started: AtomicU64,
    last_end_ms: AtomicU64,
    changed: Notify,
}

impl Activity {
    pub fn new(start: Instant) -> Self {
        Activity {
            start,
            in_flight: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            last_end_ms: AtomicU64::new(0),
            changed: Notify::new(),
        }
    }

    /// A request starts; the guard marks its end when dropped.
    pub fn begin(self: &std::sync::Arc<Self>) -> RequestGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.started.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_one();
        RequestGuard { activity: self.clone() }
    }

    /// The state at `now`.
    pub fn seen(&self, now: Instant) -> Seen {
        Seen {
            now: now.saturating_duration_since(self.start),
            in_flight: self.in_flight.load(Ordering::Acquire),
            started: self.started.load(Ordering::Acquire),
            last_end: Duration::from_millis(self.last_end_ms.load(Ordering::Acquire)),
        }
    }

    /// The instant `since_start` after the connection's start.
    pub fn at(&self, since_start: Duration) -> Instant {
        self.start + since_start
    }

    /// Resolves when a request starts or ends.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

/// Marks the end of a request when dropped.
#[derive(Debug)]
pub struct RequestGuard {
    activity: std::sync::Arc<Activity>,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let a = &self.activity;
        let ms = u64::try_from(Instant::now().saturating_duration_since(a.start).as_millis()).unwrap_or(u64::MAX);
        a.last_end_ms.store(ms, Ordering::Release);
        a.in_flight.fetch_sub(1, Ordering::AcqRel);
        a.changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: ConnLimits = ConnLimits {
        first_request_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        max_age: Duration::from_secs(600),
        max_requests: 100,
        close_grace: Duration::from_secs(5),
    };

    fn seen(now: u64, in_flight: usize, started: u64, last_end: u64) -> Seen {
        Seen {
            now: Duration::from_secs(now),
            in_flight,
            started,
            last_end: Duration::from_secs(last_end),
        }
    }

    #[test]
    fn a_peer_past_its_connection_bound_is_refused_and_others_are_not() {
        let peers = PeerConnections::new(2);
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let first = peers.open(a).unwrap();
        let _second = peers.open(a).unwrap();
        assert!(peers.open(a).is_none());
        assert!(peers.open(b).is_some());
        drop(first);
        assert_eq!(peers.open_from(a), 1);
        assert!(peers.open(a).is_some());
    }

    #[test]
    fn closed_connections_leave_no_address_behind() {
        let peers = PeerConnections::new(1);
        for last in 0..=255u8 {
            drop(peers.open([10, 0, 1, last].into()));
        }
        assert!(peers.open([10, 0, 0, 9].into()).is_some_and(|_| peers.peers() == 1));
        assert_eq!(peers.peers(), 0);
        let none = PeerConnections::new(0);
        assert!(none.open([10, 0, 0, 1].into()).is_none());
        assert_eq!(none.peers(), 0);
    }

    #[test]
    fn a_connection_without_a_first_request_closes_at_the_header_timeout_whatever_it_sends() {
        assert_eq!(
            check(&LIMITS, seen(3, 0, 0, 0)),
            Verdict::KeepUntil(Duration::from_secs(10))
        );
        // Bytes and pings change nothing check reads: only a started request would.
        assert_eq!(
            check(&LIMITS, seen(10, 0, 0, 0)),
            Verdict::Close(CloseReason::NoRequest)
        );
    }

    #[test]
    fn an_idle_connection_closes_the_idle_timeout_after_its_last_request_ended() {
        assert_eq!(
            check(&LIMITS, seen(100, 0, 3, 50)),
            Verdict::KeepUntil(Duration::from_secs(110))
        );
        assert_eq!(check(&LIMITS, seen(110, 0, 3, 50)), Verdict::Close(CloseReason::Idle));
    }

    #[test]
    fn a_request_in_flight_keeps_the_connection_until_its_maximum_age() {
        assert_eq!(
            check(&LIMITS, seen(500, 1, 3, 0)),
            Verdict::KeepUntil(Duration::from_secs(600))
        );
        assert_eq!(check(&LIMITS, seen(600, 1, 3, 0)), Verdict::Close(CloseReason::MaxAge));
    }

    #[test]
    fn a_busy_connection_closes_at_its_maximum_age_and_request_count() {
        assert_eq!(
            check(&LIMITS, seen(600, 0, 3, 599)),
            Verdict::Close(CloseReason::MaxAge)
        );
        assert_eq!(
            check(&LIMITS, seen(5, 0, 100, 5)),
            Verdict::Close(CloseReason::MaxRequests)
        );
        assert_eq!(
            check(&LIMITS, seen(590, 0, 3, 589)),
            Verdict::KeepUntil(Duration::from_secs(600))
        );
    }
}

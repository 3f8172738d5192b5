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
//! [`ConnTable`] counts the connections open, by source address and for the API server's
//! identity, and [`place`] decides, purely, whether a new one is admitted, admitted in place of an
//! idle one, or closed right after accept: one pod cannot take the whole connection cap, and no
//! flood of idle connections can keep the API server out.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
/// Default: connections only the trusted identity (the API server) may hold, when one is
/// configured.
pub const DEFAULT_RESERVED_CONNECTIONS: usize = 32;

/// The connection bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnBounds {
    /// Connections open at once.
    pub max: usize,
    /// Connections open at once from one untrusted source address.
    pub per_peer: usize,
    /// Of `max`, held back for the trusted identity (0: no reserve).
    pub reserved: usize,
}

/// What [`place`] reads about the open connections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnCounts {
    /// Open in all.
    pub total: usize,
    /// Open as the trusted identity, and how many of those are idle.
    pub trusted: usize,
    pub trusted_idle: usize,
    /// Open from the new connection's address (untrusted), and how many of those are idle.
    pub peer: usize,
    pub peer_idle: usize,
    /// Of the other untrusted addresses that have an idle connection, the most connections one
    /// of them has open (0: none has an idle connection).
    pub busiest_idle: usize,
}

/// Which idle connection makes room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Victim {
    /// The oldest idle connection of the newcomer's own address (or of the trusted identity,
    /// for a trusted newcomer).
    Own,
    /// The oldest idle connection of the untrusted address with the most connections open.
    Busiest,
    /// The oldest idle connection of the trusted identity, which holds more than its reserve.
    TrustedSurplus,
}

/// What to do with a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Admit,
    /// Close that idle connection (it has no request in flight) and admit the new one.
    Evict(Victim),
    Refuse,
}

/// The decision for a new connection, pure. `trusted`: it is the API server's (known at accept
/// only by address; a connection whose client certificate proves it is promoted after its
/// handshake).
///
/// - Untrusted connections together hold at most `max - reserved`, and one address at most
///   `per_peer`; the trusted identity may hold any free connection.
/// - When there is no room, an *idle* connection (no request in flight: a handshake, a request
///   whose headers have not all arrived, or a keep-alive connection between requests) is closed
///   to make it: the oldest of the address with the most connections, as long as that address
///   holds more than the newcomer's would; else one the trusted identity holds past its reserve;
///   else the newcomer's own oldest. A connection with a request in flight is never closed for
///   another.
///
/// So a flood of idle connections, from any number of addresses or from the API server's own,
/// never refuses the API server: its new connection takes the place of the flood's oldest.
pub fn place(b: &ConnBounds, trusted: bool, c: ConnCounts) -> Place {
    let reserved = b.reserved.min(b.max);
    if trusted {
        return if c.total < b.max {
            Place::Admit
        } else if c.busiest_idle > 0 {
            Place::Evict(Victim::Busiest)
        } else if c.trusted_idle > 0 {
            Place::Evict(Victim::Own)
        } else {
            Place::Refuse
        };
    }
    let own = if c.peer_idle > 0 {
        Place::Evict(Victim::Own)
    } else {
        Place::Refuse
    };
    if c.peer >= b.per_peer {
        return own;
    }
    // What the untrusted addresses hold, with whatever the trusted identity holds past its
    // reserve.
    let shared = c.total.saturating_sub(c.trusted.min(reserved));
    if shared < b.max - reserved && c.total < b.max {
        return Place::Admit;
    }
    if c.busiest_idle > c.peer.saturating_add(1) {
        Place::Evict(Victim::Busiest)
    } else if c.trusted > reserved && c.trusted_idle > 0 {
        Place::Evict(Victim::TrustedSurplus)
    } else {
        own
    }
}

/// Whom a connection counts against: the trusted identity or its source address.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Owner {
    Trusted,
    Peer(IpAddr),
}

/// What the table and a connection's task share.
#[derive(Debug, Default)]
pub struct ConnHandle {
    in_flight: AtomicUsize,
    evicted: AtomicBool,
    evict: Notify,
}

impl ConnHandle {
    /// A request starts on the connection; the guard marks its end when dropped.
    pub fn begin(self: &Arc<Self>) -> BusyGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        BusyGuard { handle: self.clone() }
    }

    fn idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }

    /// Whether the connection was closed to make room for another.
    pub fn is_evicted(&self) -> bool {
        self.evicted.load(Ordering::Acquire)
    }

    /// Resolves once the connection is closed to make room for another.
    pub async fn evicted(&self) {
        loop {
            let notified = self.evict.notified();
            if self.is_evicted() {
                return;
            }
            notified.await;
        }
    }
}

/// Marks a request's end on its connection when dropped.
#[derive(Debug)]
pub struct BusyGuard {
    handle: Arc<ConnHandle>,
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.handle.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Debug)]
struct Entry {
    id: u64,
    owner: Owner,
    handle: Arc<ConnHandle>,
}

#[derive(Debug, Default)]
struct Open {
    next_id: u64,
    /// In the order they were opened: the oldest first. At most `max` entries.
    entries: Vec<Entry>,
}

impl Open {
    fn counts(&self, peer: IpAddr) -> ConnCounts {
        let mut c = ConnCounts {
            total: self.entries.len(),
            ..ConnCounts::default()
        };
        let mut others: HashMap<IpAddr, (usize, bool)> = HashMap::new();
        for e in &self.entries {
            let idle = e.handle.idle();
            match e.owner {
                Owner::Trusted => {
                    c.trusted += 1;
                    c.trusted_idle += usize::from(idle);
                }
                Owner::Peer(p) if p == peer => {
                    c.peer += 1;
                    c.peer_idle += usize::from(idle);
                }
                Owner::Peer(p) => {
                    let o = others.entry(p).or_default();
                    o.0 += 1;
                    o.1 |= idle;
                }
            }
        }
        c.busiest_idle = others.values().filter(|o| o.1).map(|o| o.0).max().unwrap_or(0);
        c
    }

    /// The oldest idle connection of the victim's owner, taken out of the table.
    fn evict(&mut self, victim: Victim, trusted: bool, peer: IpAddr) -> bool {
        let owner = match victim {
            Victim::Own if trusted => Some(Owner::Trusted),
            Victim::Own => Some(Owner::Peer(peer)),
            Victim::TrustedSurplus => Some(Owner::Trusted),
            Victim::Busiest => {
                let mut open: HashMap<IpAddr, (usize, bool)> = HashMap::new();
                for e in &self.entries {
                    if let Owner::Peer(p) = e.owner
                        && p != peer
                    {
                        let o = open.entry(p).or_default();
                        o.0 += 1;
                        o.1 |= e.handle.idle();
                    }
                }
                open.into_iter()
                    .filter(|(_, o)| o.1)
                    .max_by_key(|(_, o)| o.0)
                    .map(|(p, _)| Owner::Peer(p))
            }
        };
        let Some(i) = owner.and_then(|owner| self.entries.iter().position(|e| e.owner == owner && e.handle.idle()))
        else {
            return false;
        };
        let e = self.entries.remove(i);
        e.handle.evicted.store(true, Ordering::Release);
        e.handle.evict.notify_one();
        true
    }
}

/// The open connections, by owner, bounded by [`ConnBounds`] and placed by [`place`].
#[derive(Debug)]
pub struct ConnTable {
    bounds: ConnBounds,
    open: Mutex<Open>,
}

impl ConnTable {
    pub fn new(bounds: ConnBounds) -> Arc<Self> {
        Arc::new(ConnTable {
            bounds,
            open: Mutex::new(Open::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a new connection from `peer` (`trusted`: known by its address to be the API
    /// server's), closing an idle one to make it if need be; `None` when it is refused.
    pub fn open(self: &Arc<Self>, peer: IpAddr, trusted: bool) -> Option<ConnSlot> {
        let mut open = self.lock();
        match place(&self.bounds, trusted, open.counts(peer)) {
            Place::Admit => {}
            Place::Evict(victim) => {
                if !open.evict(victim, trusted, peer) {
                    return None;
                }
            }
            Place::Refuse => return None,
        }
        let id = open.next_id;
        open.next_id = open.next_id.wrapping_add(1);
        let handle = Arc::new(ConnHandle::default());
        open.entries.push(Entry {
            id,
            owner: if trusted { Owner::Trusted } else { Owner::Peer(peer) },
            handle: handle.clone(),
        });
        Some(ConnSlot {
            table: self.clone(),
            id,
            handle,
        })
    }

    /// Connections open now (closed-to-make-room ones no longer count).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Connections open now from `peer` as an untrusted address, and as the trusted identity.
    pub fn open_from(&self, peer: IpAddr) -> (usize, usize) {
        let open = self.lock();
        let from = open.entries.iter().filter(|e| e.owner == Owner::Peer(peer)).count();
        let trusted = open.entries.iter().filter(|e| e.owner == Owner::Trusted).count();
        (from, trusted)
    }
}

/// One connection's place in the [`ConnTable`]; dropping it frees the place.
#[derive(Debug)]
pub struct ConnSlot {
    table: Arc<ConnTable>,
    id: u64,
    handle: Arc<ConnHandle>,
}

impl ConnSlot {
    pub fn handle(&self) -> &Arc<ConnHandle> {
        &self.handle
    }

    /// The connection proved to be the API server's (its client certificate): count it as the
    /// trusted identity's from now on. It keeps its place: the total does not change.
    pub fn promote(&self) {
        let mut open = self.table.lock();
        if let Some(e) = open.entries.iter_mut().find(|e| e.id == self.id) {
            e.owner = Owner::Trusted;
        }
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut open = self.table.lock();
        if let Some(i) = open.entries.iter().position(|e| e.id == self.id) {
            open.entries.remove(i);
        }
    }
}

/// The per-connection knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// The first request must start within this of the handshake.
    pub first_request_timeout: Duration,
    /// With no request in flight for this long since the last one ended, the connection closes.
    /// Keep it longer than the client keeps an idle connection (the API server: 90 s), so that
    /// the client closes first (see [`check`]).
    pub idle_timeout: Duration,
    /// The connection closes after this long: with the response to its next request.
    pub max_age: Duration,
    /// The connection closes after this many requests: with the response to the last.
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
    /// The server is shutting down: with the response in flight while it waits for the
    /// endpoints to drop it ([`check`] while draining), then every connection left.
    Shutdown,
    /// Closed while idle to make room for a new connection ([`place`]; never a [`check`]
    /// verdict).
    Evicted,
}

impl CloseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::NoRequest => "no request within the header timeout",
            CloseReason::Idle => "idle",
            CloseReason::MaxAge => "maximum age",
            CloseReason::MaxRequests => "maximum requests",
            CloseReason::Shutdown => "server shutting down",
            CloseReason::Evicted => "closed while idle to make room for another connection",
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
    /// Its requests are HTTP/2 (false before the first request and for HTTP/1.x).
    pub http2: bool,
    pub in_flight: usize,
    pub started: u64,
    /// When the last request ended (or the connection started, before any).
    pub last_end: Duration,
}

/// Why a connection should end now, if it should: the server is draining (told to shut down,
/// it waits for the endpoints to drop it), or the connection is past its age or request count.
pub fn retire_reason(limits: &ConnLimits, seen: Seen, draining: bool) -> Option<CloseReason> {
    if draining {
        Some(CloseReason::Shutdown)
    } else if seen.now >= limits.max_age {
        Some(CloseReason::MaxAge)
    } else if seen.started >= limits.max_requests {
        Some(CloseReason::MaxRequests)
    } else {
        None
    }
}

/// The decision, pure: time is a parameter. `draining`: see [`retire_reason`].
///
/// A connection to retire ([`retire_reason`]) must not be closed while idle if it speaks
/// HTTP/1.1: closing an idle HTTP/1.1 connection races the client's next request on it, which
/// then fails with `broken pipe`. The API server talks HTTP/1.1 to webhooks, keeps idle
/// connections 90 s and does not retry a failed review, so the user's write would fail. So an
/// HTTP/1.1 connection ends with the response to its next request instead, which the service
/// marks `Connection: close` ([`retire_reason`] again, per request); here it is kept until its
/// idle timeout, which should exceed the client's. An HTTP/2 connection is closed gracefully
/// at once: a GOAWAY tells the client which streams were served, and it sends the rest anew.
pub fn check(limits: &ConnLimits, seen: Seen, draining: bool) -> Verdict {
    let retire = retire_reason(limits, seen, draining);
    if let Some(reason) = retire
        && seen.http2
    {
        return Verdict::Close(reason);
    }
    if seen.in_flight > 0 {
        // The request's end wakes the connection's loop anyway; past the age, look again no
        // sooner than an idle timeout from now (never a deadline already passed).
        return Verdict::KeepUntil(if retire.is_some() {
            seen.now.saturating_add(limits.idle_timeout)
        } else {
            limits.max_age
        });
    }
    let (deadline, reason) = if seen.started == 0 {
        (limits.first_request_timeout, CloseReason::NoRequest)
    } else {
        (seen.last_end.saturating_add(limits.idle_timeout), CloseReason::Idle)
    };
    if seen.now >= deadline {
        Verdict::Close(reason)
    } else if retire.is_some() || seen.now >= limits.max_age {
        Verdict::KeepUntil(deadline)
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
    http2: std::sync::atomic::AtomicBool,
    changed: Notify,
}

impl Activity {
    pub fn new(start: Instant) -> Self {
        Activity {
            start,
            in_flight: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            last_end_ms: AtomicU64::new(0),
            http2: std::sync::atomic::AtomicBool::new(false),
            changed: Notify::new(),
        }
    }

    /// A request starts (over HTTP/2 or not); the guard marks its end when dropped.
    pub fn begin(self: &std::sync::Arc<Self>, http2: bool) -> RequestGuard {
        if http2 {
            self.http2.store(true, Ordering::Release);
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.started.fetch_add(1, Ordering::AcqRel);
        self.changed.notify_one();
        RequestGuard { activity: self.clone() }
    }

    /// The state at `now`.
    pub fn seen(&self, now: Instant) -> Seen {
        Seen {
            now: now.saturating_duration_since(self.start),
            http2: self.http2.load(Ordering::Acquire),
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
            http2: false,
            in_flight,
            started,
            last_end: Duration::from_secs(last_end),
        }
    }

    fn addr(last: u8) -> IpAddr {
        [10, 0, 0, last].into()
    }

    const API_SERVER: u8 = 200;

    /// The defaults: 256 connections, 32 per address, and 32 for the API server when it is known.
    fn defaults(reserved: usize) -> ConnBounds {
        ConnBounds {
            max: DEFAULT_MAX_CONNECTIONS,
            per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            reserved,
        }
    }

    /// `peers` addresses open `each` connections, kept idle (no request in flight).
    fn flood(t: &Arc<ConnTable>, peers: std::ops::Range<u8>, each: usize) -> Vec<ConnSlot> {
        let mut held = vec![];
        for p in peers {
            for _ in 0..each {
                held.extend(t.open(addr(p), false));
            }
        }
        held
    }

    #[test]
    fn a_peer_past_its_connection_bound_is_refused_while_busy_and_others_are_not() {
        let t = ConnTable::new(ConnBounds {
            max: 10,
            per_peer: 2,
            reserved: 0,
        });
        let first = t.open(addr(1), false).unwrap();
        let second = t.open(addr(1), false).unwrap();
        let _busy = (first.handle().begin(), second.handle().begin());
        assert!(t.open(addr(1), false).is_none());
        assert!(t.open(addr(2), false).is_some());
        drop(first);
        assert_eq!(t.open_from(addr(1)), (1, 0));
        assert!(t.open(addr(1), false).is_some());
    }

    #[test]
    fn a_peer_past_its_bound_replaces_its_own_oldest_idle_connection() {
        let t = ConnTable::new(ConnBounds {
            max: 10,
            per_peer: 2,
            reserved: 0,
        });
        let oldest = t.open(addr(1), false).unwrap();
        let next = t.open(addr(1), false).unwrap();
        let newest = t.open(addr(1), false).unwrap();
        assert!(oldest.handle().is_evicted());
        assert!(!next.handle().is_evicted() && !newest.handle().is_evicted());
        assert_eq!(t.open_from(addr(1)), (2, 0));
        // The evicted slot's drop frees nothing twice.
        drop(oldest);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn closed_connections_leave_nothing_behind() {
        let t = ConnTable::new(ConnBounds {
            max: 4,
            per_peer: 1,
            reserved: 0,
        });
        for last in 0..=255u8 {
            drop(t.open(addr(last), false));
        }
        assert!(t.is_empty());
        let none = ConnTable::new(ConnBounds {
            max: 0,
            per_peer: 0,
            reserved: 0,
        });
        assert!(none.open(addr(1), false).is_none());
        assert!(none.open(addr(1), true).is_none());
        assert!(none.is_empty());
    }

    #[test]
    fn eight_addresses_with_32_idle_connections_each_cannot_refuse_the_api_server() {
        for reserved in [0, DEFAULT_RESERVED_CONNECTIONS] {
            let t = ConnTable::new(defaults(reserved));
            let flood = flood(&t, 1..9, 32);
            let live = |f: &[ConnSlot]| f.iter().filter(|s| !s.handle().is_evicted()).count();
            assert_eq!(live(&flood), 256 - reserved, "reserve {reserved}");
            // Known by its address, or (reserve 0, or a client certificate still to be shown)
            // as one more address.
            let mut api = vec![];
            for (n, trusted) in [true, false].into_iter().enumerate() {
                api.extend(t.open(addr(API_SERVER), trusted));
                assert_eq!(api.len(), n + 1, "reserve {reserved}, trusted {trusted}");
                assert!(t.len() <= 256);
            }
            // Without a reserve each took the place of a flood connection; with one, the trusted
            // connection took a reserved place and only the other had to.
            let evicted = 256 - reserved - live(&flood);
            assert_eq!(evicted, if reserved == 0 { 2 } else { 1 });
        }
    }

    #[test]
    fn with_a_reserve_the_api_server_needs_no_eviction_and_others_get_no_more_than_the_rest() {
        let t = ConnTable::new(defaults(32));
        let _flood = flood(&t, 1..100, 32);
        assert_eq!(t.len(), 224);
        let api: Vec<ConnSlot> = (0..32).filter_map(|_| t.open(addr(API_SERVER), true)).collect();
        assert_eq!(api.len(), 32);
        assert!(api.iter().all(|s| !s.handle().is_evicted()));
        assert_eq!(t.len(), 256);
    }

    #[test]
    fn an_idle_flood_from_the_api_servers_own_address_cannot_refuse_it() {
        let t = ConnTable::new(defaults(32));
        let flood: Vec<ConnSlot> = (0..300).filter_map(|_| t.open(addr(API_SERVER), true)).collect();
        assert!(t.len() <= 256);
        let api = t.open(addr(API_SERVER), true).unwrap();
        assert!(!api.handle().is_evicted());
        assert!(flood.iter().any(|s| s.handle().is_evicted()));
    }

    #[test]
    fn busy_connections_are_never_closed_for_another() {
        let t = ConnTable::new(ConnBounds {
            max: 4,
            per_peer: 4,
            reserved: 0,
        });
        let busy: Vec<ConnSlot> = (0..4).map(|i| t.open(addr(i), false).unwrap()).collect();
        let _guards: Vec<BusyGuard> = busy.iter().map(|s| s.handle().begin()).collect();
        assert!(t.open(addr(9), false).is_none());
        assert!(t.open(addr(9), true).is_none());
        assert!(busy.iter().all(|s| !s.handle().is_evicted()));
    }

    #[test]
    fn a_promoted_connection_counts_as_the_trusted_identity() {
        let t = ConnTable::new(defaults(32));
        let slot = t.open(addr(API_SERVER), false).unwrap();
        assert_eq!(t.open_from(addr(API_SERVER)), (1, 0));
        slot.promote();
        assert_eq!(t.open_from(addr(API_SERVER)), (0, 1));
        drop(slot);
        assert!(t.is_empty());
    }

    #[test]
    fn the_decision_with_the_default_numbers() {
        let b = defaults(32);
        let full = |peer, peer_idle, busiest_idle| ConnCounts {
            total: 224,
            peer,
            peer_idle,
            busiest_idle,
            ..ConnCounts::default()
        };
        // Seven addresses at 32: the untrusted part (224) is full; the reserve is free.
        assert_eq!(place(&b, true, full(0, 0, 32)), Place::Admit);
        assert_eq!(place(&b, false, full(0, 0, 32)), Place::Evict(Victim::Busiest));
        assert_eq!(place(&b, false, full(0, 0, 0)), Place::Refuse);
        // An address as busy as the busiest does not take from it.
        assert_eq!(place(&b, false, full(31, 0, 32)), Place::Refuse);
        assert_eq!(place(&b, false, full(31, 1, 32)), Place::Evict(Victim::Own));
        assert_eq!(place(&b, false, full(32, 0, 32)), Place::Refuse);
        // Everything taken, the trusted identity past its reserve.
        let all = ConnCounts {
            total: 256,
            trusted: 40,
            trusted_idle: 1,
            ..ConnCounts::default()
        };
        assert_eq!(place(&b, true, all), Place::Evict(Victim::Own));
        assert_eq!(place(&b, false, all), Place::Evict(Victim::TrustedSurplus));
        assert_eq!(place(&b, false, ConnCounts { trusted: 32, ..all }), Place::Refuse);
        // A reserve larger than the cap is the cap.
        let odd = ConnBounds {
            max: 2,
            per_peer: 2,
            reserved: 9,
        };
        assert_eq!(place(&odd, false, ConnCounts::default()), Place::Refuse);
        assert_eq!(place(&odd, true, ConnCounts::default()), Place::Admit);
    }

    proptest::proptest! {
        /// Whatever connections come and go, and whichever are busy: the cap and the per-address
        /// bound hold, the untrusted ones never take the reserve, and the API server is refused
        /// only when every connection it could take the place of is busy.
        #[test]
        fn the_api_server_is_refused_only_when_everything_is_busy(
            reserved in 0usize..6,
            steps in proptest::collection::vec((0u8..5, 0usize..100, 0u8..5), 1..120)
        ) {
            let b = ConnBounds { max: 12, per_peer: 4, reserved };
            let t = ConnTable::new(b);
            let mut held: Vec<(ConnSlot, Option<BusyGuard>)> = vec![];
            for (peer, n, action) in steps {
                match action {
                    0 if !held.is_empty() => {
                        held.remove(n % held.len());
                    }
                    1 if !held.is_empty() => {
                        let i = n % held.len();
                        let busy = if held[i].1.is_some() { None } else { Some(held[i].0.handle().begin()) };
                        held[i].1 = busy;
                    }
                    2 => {
                        let all_busy = held.iter().filter(|h| !h.0.handle().is_evicted()).all(|h| h.1.is_some());
                        let trusted_before = t.open_from(addr(API_SERVER)).1;
                        let slot = t.open(addr(API_SERVER), true);
                        proptest::prop_assert!(slot.is_some() || (all_busy && trusted_before >= reserved.min(12)));
                        held.extend(slot.map(|s| (s, None)));
                    }
                    _ => {
                        held.extend(t.open(addr(peer), false).map(|s| (s, None)));
                    }
                }
                held.retain(|h| !h.0.handle().is_evicted());
                proptest::prop_assert_eq!(t.len(), held.len());
                proptest::prop_assert!(t.len() <= b.max);
                let (_, trusted) = t.open_from(addr(API_SERVER));
                proptest::prop_assert!(t.len() - trusted.min(reserved) <= b.max - reserved.min(b.max));
                for p in 0..5 {
                    proptest::prop_assert!(t.open_from(addr(p)).0 <= b.per_peer);
                }
            }
        }
    }

    #[test]
    fn a_connection_without_a_first_request_closes_at_the_header_timeout_whatever_it_sends() {
        assert_eq!(
            check(&LIMITS, seen(3, 0, 0, 0), false),
            Verdict::KeepUntil(Duration::from_secs(10))
        );
        // Bytes and pings change nothing check reads: only a started request would.
        assert_eq!(
            check(&LIMITS, seen(10, 0, 0, 0), false),
            Verdict::Close(CloseReason::NoRequest)
        );
    }

    #[test]
    fn an_idle_connection_closes_the_idle_timeout_after_its_last_request_ended() {
        assert_eq!(
            check(&LIMITS, seen(100, 0, 3, 50), false),
            Verdict::KeepUntil(Duration::from_secs(110))
        );
        assert_eq!(
            check(&LIMITS, seen(110, 0, 3, 50), false),
            Verdict::Close(CloseReason::Idle)
        );
    }

    #[test]
    fn a_request_in_flight_keeps_the_connection_until_its_maximum_age() {
        assert_eq!(
            check(&LIMITS, seen(500, 1, 3, 0), false),
            Verdict::KeepUntil(Duration::from_secs(600))
        );
    }

    #[test]
    fn a_connection_retires_past_its_age_or_request_count_and_while_the_server_drains() {
        assert_eq!(
            retire_reason(&LIMITS, seen(600, 0, 3, 599), false),
            Some(CloseReason::MaxAge)
        );
        assert_eq!(
            retire_reason(&LIMITS, seen(5, 0, 100, 5), false),
            Some(CloseReason::MaxRequests)
        );
        assert_eq!(
            retire_reason(&LIMITS, seen(5, 0, 3, 5), true),
            Some(CloseReason::Shutdown)
        );
        assert_eq!(retire_reason(&LIMITS, seen(599, 0, 99, 5), false), None);
    }

    #[test]
    fn an_http1_connection_to_retire_is_never_closed_while_idle_only_at_its_idle_timeout() {
        // Its next response says `Connection: close` (the service adds it); until then it is
        // kept, and looked at again no sooner than the idle timeout.
        assert_eq!(
            check(&LIMITS, seen(600, 1, 3, 599), false),
            Verdict::KeepUntil(Duration::from_secs(660))
        );
        assert_eq!(
            check(&LIMITS, seen(600, 0, 3, 599), false),
            Verdict::KeepUntil(Duration::from_secs(659))
        );
        assert_eq!(
            check(&LIMITS, seen(5, 0, 100, 5), false),
            Verdict::KeepUntil(Duration::from_secs(65))
        );
        assert_eq!(
            check(&LIMITS, seen(20, 0, 3, 10), true),
            Verdict::KeepUntil(Duration::from_secs(70))
        );
        assert_eq!(
            check(&LIMITS, seen(659, 0, 3, 599), false),
            Verdict::Close(CloseReason::Idle)
        );
        assert_eq!(
            check(&LIMITS, seen(590, 0, 3, 589), false),
            Verdict::KeepUntil(Duration::from_secs(600))
        );
    }

    #[test]
    fn an_http2_connection_to_retire_is_closed_gracefully_at_once() {
        let h2 = |s: Seen| Seen { http2: true, ..s };
        assert_eq!(
            check(&LIMITS, h2(seen(600, 0, 3, 599)), false),
            Verdict::Close(CloseReason::MaxAge)
        );
        assert_eq!(
            check(&LIMITS, h2(seen(5, 1, 100, 4)), false),
            Verdict::Close(CloseReason::MaxRequests)
        );
        assert_eq!(
            check(&LIMITS, h2(seen(20, 0, 3, 10)), true),
            Verdict::Close(CloseReason::Shutdown)
        );
    }

    proptest::proptest! {
        /// Whatever its age, requests and the server's state, an HTTP/1.1 connection is closed
        /// only by its idle (or first-request) timeout, and is never to be looked at again at a
        /// time already passed.
        #[test]
        fn an_http1_connection_is_closed_only_by_its_timeouts(
            now in 0u64..2000, in_flight in 0usize..3, started in 0u64..300, last_end in 0u64..2000, draining: bool,
        ) {
            let last_end = last_end.min(now);
            match check(&LIMITS, seen(now, in_flight, started, last_end), draining) {
                Verdict::Close(reason) => proptest::prop_assert!(
                    in_flight == 0 && matches!(reason, CloseReason::Idle | CloseReason::NoRequest),
                    "{reason:?}"
                ),
                Verdict::KeepUntil(at) => proptest::prop_assert!(at > Duration::from_secs(now), "{at:?} at {now}"),
            }
        }
    }
}

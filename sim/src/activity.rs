//! What the simulator is still doing, so a test can wait until nothing more will happen instead
//! of sleeping: requests being handled, and watch events not yet handed to their connections.
//!
//! The simulator's own work (the Job controller, the kubelet, the runners) is synchronous: it
//! happens inside the request or the clock step that causes it. What remains asynchronous is the
//! HTTP requests in flight and the watch streams. Every event the store publishes is counted;
//! each watch counts the events it has taken from the store and the lines it has queued and
//! written. The simulator is quiet when no request is in flight and every live watch has taken
//! every published event and written every line it queued. Clock watches (`/sim/v1/clock?watch`)
//! are tracked the same way against the clock's changes, so a client following the clock has
//! been sent the new time before the simulator counts as quiet.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Progress of one watch connection.
#[derive(Debug, Default)]
pub struct WatchProgress {
    /// Store events this watch has taken (matching or not), counted like `World::published`.
    pub taken: AtomicU64,
    /// Lines queued for the connection.
    pub queued: AtomicU64,
    /// Lines handed to the connection's body.
    pub written: AtomicU64,
    /// The watch ended (its connection no longer takes events).
    pub done: AtomicBool,
    /// A clock watch: `taken` counts clock changes rather than store events.
    pub clock: bool,
}

/// What the simulator has published so far: store events and clock changes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Published {
    pub events: u64,
    pub clock_changes: u64,
}

impl WatchProgress {
    fn caught_up(&self, published: Published) -> bool {
        let done = self.done.load(Ordering::SeqCst);
        let drained = self.queued.load(Ordering::SeqCst) <= self.written.load(Ordering::SeqCst);
        let target = if self.clock {
            published.clock_changes
        } else {
            published.events
        };
        (done || self.taken.load(Ordering::SeqCst) >= target) && drained
    }
}

/// The simulator's activity counters.
#[derive(Debug, Default)]
pub struct Activity {
    in_flight: AtomicUsize,
    requests: AtomicU64,
    /// Requests by verb and resource (`GET secrets`), for a measurement to say where they go.
    by_kind: Mutex<HashMap<(&'static str, String), u64>>,
    watches: Mutex<Vec<Weak<WatchProgress>>>,
}

/// Counts a request as in flight until dropped.
pub struct InFlight<'a>(&'a Activity);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Activity {
    /// A request arrived; it is in flight until the guard drops (for a watch: until the stream is set up).
    pub fn request(&self) -> InFlight<'_> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self)
    }

    /// Count a request by its verb and resource (see [`verb_and_resource`]).
    pub fn count(&self, verb: &'static str, resource: &str) {
        if let Ok(mut m) = self.by_kind.lock() {
            match m.get_mut(&(verb, resource.to_string())) {
                Some(n) => *n += 1,
                None => {
                    m.insert((verb, resource.to_string()), 1);
                }
            }
        }
    }

    /// Requests so far by `VERB resource` (`GET secrets`, `WATCH jobs`), and every other request
    /// by its class (see [`request_kind`]): one snapshot whose sum is every request counted.
    pub fn requests_by_kind(&self) -> BTreeMap<String, u64> {
        self.by_kind
            .lock()
            .map(|m| m.iter().map(|((v, r), n)| (format!("{v} {r}"), *n)).collect())
            .unwrap_or_default()
    }

    /// A new watch that has taken `taken` of the published events so far.
    pub fn watch(&self, taken: u64) -> Arc<WatchProgress> {
        self.register(WatchProgress {
            taken: AtomicU64::new(taken),
            ..Default::default()
        })
    }

    /// A new clock watch that has taken `taken` of the clock's changes so far.
    pub fn clock_watch(&self, taken: u64) -> Arc<WatchProgress> {
        self.register(WatchProgress {
            taken: AtomicU64::new(taken),
            clock: true,
            ..Default::default()
        })
    }

    fn register(&self, p: WatchProgress) -> Arc<WatchProgress> {
        let p = Arc::new(p);
        if let Ok(mut w) = self.watches.lock() {
            w.retain(|x| x.strong_count() > 0);
            w.push(Arc::downgrade(&p));
        }
        p
    }

    /// Requests received so far (a test sees that something happened when it changes).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    /// No request in flight, and every live watch has taken all it was `published` (events, or
    /// clock changes for a clock watch) and written every line it queued.
    pub fn quiet(&self, published: Published) -> bool {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return false;
        }
        self.watches
            .lock()
            .is_ok_and(|w| w.iter().filter_map(Weak::upgrade).all(|p| p.caught_up(published)))
    }
}

/// How a request is counted: by [`verb_and_resource`] for a resource, or, for any other path, by
/// its method and one of a few fixed classes (`GET /sim/v1`, `GET discovery`, `GET other`), so
/// that every request is in the count by kind and a client sending odd paths adds no new keys.
pub fn request_kind(method: &str, segs: &[&str], watching: bool) -> (&'static str, String) {
    if let Some(kind) = verb_and_resource(method, segs, watching) {
        return kind;
    }
    let verb = match method {
        "GET" => "GET",
        "POST" => "POST",
        _ => "OTHER",
    };
    let class = match segs {
        ["sim", "v1", ..] => "/sim/v1",
        ["api" | "apis", ..] | ["version"] | ["openapi", ..] => "discovery",
        _ => "other",
    };
    (verb, class.to_string())
}

/// The Kubernetes verb and the resource (with its subresource: `terraformclusters/status`) of a
/// request to an API path, as the API server's audit log names them; `None` for a path that is
/// not a resource (discovery, `/sim/v1`, health).
pub fn verb_and_resource(method: &str, segs: &[&str], watching: bool) -> Option<(&'static str, String)> {
    let rest = match segs {
        ["api", _v, rest @ ..] => rest,
        ["apis", _g, _v, rest @ ..] => rest,
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _ns, r, more @ ..] => std::iter::once(*r).chain(more.iter().copied()).collect::<Vec<_>>(),
        r => r.to_vec(),
    };
    let (resource, named) = match rest.as_slice() {
        [] => return None,
        [r] => ((*r).to_string(), false),
        [r, _name] => ((*r).to_string(), true),
        [r, _name, sub, ..] => (format!("{r}/{sub}"), true),
    };
    let verb = match (method, named, watching) {
        ("GET", _, true) => "WATCH",
        ("GET", true, false) => "GET",
        ("GET", false, false) => "LIST",
        ("POST", ..) => "CREATE",
        ("PUT", ..) => "UPDATE",
        ("PATCH", ..) => "PATCH",
        ("DELETE", true, _) => "DELETE",
        ("DELETE", false, _) => "DELETECOLLECTION",
        _ => "OTHER",
    };
    Some((verb, resource))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_counted_by_the_verb_and_resource_the_api_server_would_log() {
        let v = |m: &str, p: &str, w: bool| {
            let segs: Vec<&str> = p.split('/').filter(|s| !s.is_empty()).collect();
            verb_and_resource(m, &segs, w).map(|(v, r)| format!("{v} {r}"))
        };
        assert_eq!(
            v("GET", "/api/v1/namespaces/a/secrets/s", false).as_deref(),
            Some("GET secrets")
        );
        assert_eq!(
            v("GET", "/api/v1/namespaces/a/secrets", false).as_deref(),
            Some("LIST secrets")
        );
        assert_eq!(v("GET", "/apis/batch/v1/jobs", true).as_deref(), Some("WATCH jobs"));
        assert_eq!(
            v(
                "PATCH",
                "/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/a/terraformclusters/c/status",
                false
            )
            .as_deref(),
            Some("PATCH terraformclusters/status")
        );
        assert_eq!(
            v("POST", "/api/v1/namespaces", false).as_deref(),
            Some("CREATE namespaces")
        );
        assert_eq!(
            v("PUT", "/apis/coordination.k8s.io/v1/namespaces/a/leases/l", false).as_deref(),
            Some("UPDATE leases")
        );
        assert_eq!(
            v("DELETE", "/api/v1/namespaces/a/pods/p", false).as_deref(),
            Some("DELETE pods")
        );
        assert_eq!(v("GET", "/apis", false), None);
        assert_eq!(v("GET", "/sim/v1/clock", false), None);
        let k = |m: &str, p: &str| {
            let segs: Vec<&str> = p.split('/').filter(|s| !s.is_empty()).collect();
            let (v, r) = request_kind(m, &segs, false);
            format!("{v} {r}")
        };
        assert_eq!(k("GET", "/sim/v1/clock"), "GET /sim/v1");
        assert_eq!(k("GET", "/apis"), "GET discovery");
        assert_eq!(k("GET", "/healthz"), "GET other");
        assert_eq!(k("PROPFIND", "/anything/at/all"), "OTHER other");
        assert_eq!(k("GET", "/api/v1/namespaces/a/secrets/s"), "GET secrets");
        let a = Activity::default();
        a.count("GET", "secrets");
        a.count("GET", "secrets");
        a.count("LIST", "jobs");
        assert_eq!(
            a.requests_by_kind(),
            BTreeMap::from([("GET secrets".to_string(), 2), ("LIST jobs".to_string(), 1)])
        );
    }

    fn events(n: u64) -> Published {
        Published {
            events: n,
            clock_changes: 0,
        }
    }

    #[test]
    fn a_request_in_flight_is_not_quiet() {
        let a = Activity::default();
        let g = a.request();
        assert!(!a.quiet(events(0)));
        drop(g);
        assert!(a.quiet(events(0)));
        assert_eq!(a.requests(), 1);
    }

    #[test]
    fn a_watch_behind_the_store_or_with_lines_unwritten_is_not_quiet() {
        let a = Activity::default();
        let w = a.watch(5);
        assert!(a.quiet(events(5)));
        assert!(!a.quiet(events(6)), "an event published but not taken");
        w.taken.fetch_add(1, Ordering::SeqCst);
        w.queued.fetch_add(1, Ordering::SeqCst);
        assert!(!a.quiet(events(6)), "a line queued but not written");
        w.written.fetch_add(1, Ordering::SeqCst);
        assert!(a.quiet(events(6)));
        w.done.store(true, Ordering::SeqCst);
        assert!(a.quiet(events(7)), "an ended watch takes nothing more");
        drop(w);
        assert!(a.quiet(events(100)), "a dropped watch is forgotten");
    }

    #[test]
    fn a_clock_watch_not_yet_sent_the_new_time_is_not_quiet() {
        let a = Activity::default();
        let c = a.clock_watch(2);
        let at = |events, clock_changes| Published { events, clock_changes };
        assert!(a.quiet(at(0, 2)));
        assert!(a.quiet(at(9, 2)), "store events are not a clock watch's business");
        assert!(!a.quiet(at(0, 3)), "the clock moved and the watch has not taken it");
        c.taken.store(3, Ordering::SeqCst);
        c.queued.fetch_add(1, Ordering::SeqCst);
        assert!(!a.quiet(at(0, 3)), "the new time queued but not written");
        c.written.fetch_add(1, Ordering::SeqCst);
        assert!(a.quiet(at(0, 3)));
    }
}

//! Fault injection: error responses on chosen requests, dropped watch streams, added latency,
//! and requests held until a test lets them through.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::error::ApiError;

/// The verb of an API request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
}

/// Answer matching requests with an error, `count` times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultRule {
    pub verb: Option<Verb>,
    /// The plural resource name (`jobs`), with `/status` for the status subresource.
    pub resource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// 500, 429 (sent with `Retry-After: 1`), 409, or any other code.
    pub status: u16,
    pub count: u32,
}

impl FaultRule {
    /// Fail the next `count` requests of `verb` on `resource` with `status`.
    pub fn new(verb: Verb, resource: &str, status: u16, count: u32) -> Self {
        FaultRule {
            verb: Some(verb),
            resource: Some(resource.into()),
            namespace: None,
            name: None,
            status,
            count,
        }
    }

    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }

    pub fn in_namespace(mut self, ns: &str) -> Self {
        self.namespace = Some(ns.into());
        self
    }

    fn matches(&self, verb: Verb, resource: &str, ns: &str, name: &str) -> bool {
        self.count > 0
            && self.verb.is_none_or(|v| v == verb)
            && self.resource.as_deref().is_none_or(|r| r == resource)
            && self.namespace.as_deref().is_none_or(|n| n == ns)
            && self.name.as_deref().is_none_or(|n| n == name)
    }

    fn error(&self) -> ApiError {
        match self.status {
            429 => ApiError::new(
                429,
                "TooManyRequests",
                "the server has received too many requests and has asked us to try again later (injected fault)",
            ),
            409 => ApiError::new(
                409,
                "Conflict",
                "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again (injected fault)",
            ),
            404 => ApiError::new(404, "NotFound", "not found (injected fault)"),
            503 => ApiError::new(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request (injected fault)",
            ),
            code => ApiError::new(code, "InternalError", "Internal error occurred: injected fault"),
        }
    }
}

/// A request held before the API server acts on it: a test waits until a client's request
/// reaches the server ([`Hold::reached`]), changes the world meanwhile, then lets it through
/// ([`Hold::release`]). It holds the first matching request only.
#[derive(Clone, Debug)]
pub struct Hold {
    reached: Arc<Notify>,
    released: Arc<Notify>,
}

impl Hold {
    /// Wait until a matching request is held.
    pub async fn reached(&self) {
        self.reached.notified().await;
    }

    /// Let the held request through (or the next one, when none is held yet).
    pub fn release(&self) {
        self.released.notify_one();
    }
}

/// The fault injector of a simulator.
#[derive(Debug)]
pub struct Faults {
    rules: Mutex<Vec<FaultRule>>,
    holds: Mutex<Vec<(FaultRule, Hold)>>,
    latency: Mutex<Duration>,
    drops: watch::Sender<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            rules: Mutex::new(Vec::new()),
            holds: Mutex::new(Vec::new()),
            latency: Mutex::new(Duration::ZERO),
            drops: watch::channel(0).0,
        }
    }
}

impl Faults {
    /// Add a rule.
    pub fn inject(&self, rule: FaultRule) {
        if let Ok(mut r) = self.rules.lock() {
            r.push(rule);
        }
    }

    /// Hold the next request that `rule` matches (its status and count are not used) until the
    /// returned [`Hold`] is released.
    pub fn hold(&self, rule: FaultRule) -> Hold {
        let hold = Hold {
            reached: Arc::new(Notify::new()),
            released: Arc::new(Notify::new()),
        };
        if let Ok(mut h) = self.holds.lock() {
            h.push((FaultRule { count: 1, ..rule }, hold.clone()));
        }
        hold
    }

    /// If a hold matches this request, say it was reached and wait for its release.
    pub(crate) async fn wait_if_held(&self, verb: Verb, resource: &str, ns: &str, name: &str) {
        let hold = self.holds.lock().ok().and_then(|mut holds| {
            let i = holds.iter().position(|(r, _)| r.matches(verb, resource, ns, name))?;
            Some(holds.remove(i).1)
        });
        if let Some(h) = hold {
            h.reached.notify_one();
            h.released.notified().await;
        }
    }

    /// Remove every rule and the latency.
    pub fn clear(&self) {
        if let Ok(mut r) = self.rules.lock() {
            r.clear();
        }
        self.set_latency(Duration::ZERO);
    }

    /// Faults not used up yet.
    pub fn remaining(&self) -> u32 {
        self.rules.lock().map(|r| r.iter().map(|x| x.count).sum()).unwrap_or(0)
    }

    /// Add this (real-time) delay before every API answer.
    pub fn set_latency(&self, d: Duration) {
        if let Ok(mut l) = self.latency.lock() {
            *l = d;
        }
    }

    pub fn latency(&self) -> Duration {
        self.latency.lock().map(|l| *l).unwrap_or_default()
    }

    /// End every open watch stream now (clients see the connection end and re-watch).
    pub fn drop_watches(&self) {
        self.drops.send_modify(|n| *n += 1);
    }

    pub(crate) fn drop_signal(&self) -> watch::Receiver<u64> {
        self.drops.subscribe()
    }

    /// The error to answer with, if a rule matches (and counts it).
    pub(crate) fn check(&self, verb: Verb, resource: &str, ns: &str, name: &str) -> Option<ApiError> {
        let mut rules = self.rules.lock().ok()?;
        let rule = rules.iter_mut().find(|r| r.matches(verb, resource, ns, name))?;
        rule.count -= 1;
        let e = rule.error();
        rules.retain(|r| r.count > 0);
        Some(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_fires_count_times_on_matching_requests_only() {
        let f = Faults::default();
        f.inject(FaultRule::new(Verb::Create, "jobs", 500, 2));
        assert_eq!(f.check(Verb::Get, "jobs", "d", "x"), None);
        assert_eq!(f.check(Verb::Create, "pods", "d", "x"), None);
        assert_eq!(f.check(Verb::Create, "jobs", "d", "x").map(|e| e.code), Some(500));
        assert_eq!(f.check(Verb::Create, "jobs", "d", "y").map(|e| e.code), Some(500));
        assert_eq!(f.check(Verb::Create, "jobs", "d", "x"), None);
        assert_eq!(f.remaining(), 0);
    }

    #[tokio::test]
    async fn a_held_request_waits_for_its_release_and_only_the_first_match_is_held() {
        let f = Arc::new(Faults::default());
        let hold = f.hold(FaultRule::new(Verb::Create, "jobs", 0, 1).named("x"));
        // Not matching: through at once.
        f.wait_if_held(Verb::Create, "jobs", "d", "y").await;
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let held = {
            let f = f.clone();
            tokio::spawn(async move {
                f.wait_if_held(Verb::Create, "jobs", "d", "x").await;
                let _ = tx.send(());
            })
        };
        hold.reached().await;
        assert!(
            rx.try_recv().is_err(),
            "the held request went through before its release"
        );
        // A second match is not held.
        f.wait_if_held(Verb::Create, "jobs", "d", "x").await;
        hold.release();
        held.await.expect("the held request ends");
        assert!(rx.try_recv().is_ok());
    }
}

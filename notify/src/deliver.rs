//! Delivery: a handle whose `notify` only queues, and the tasks that send.
//!
//! ```text
//! notify() ──try_send──▶ [queue] ──▶ dispatcher ──try_send──▶ [target queue] ──▶ target worker
//!                                    (dedup,                                    ≤ N deliveries
//!                                     id, time)                                 at once, each
//!                                                                               with retries
//! ```
//!
//! Every target has its own queue and its own bound on deliveries in flight, so a receiver that
//! hangs fills only its own queue: the dispatcher never waits for it, and neither does the
//! caller.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, USER_AGENT};
use hyper::{Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::backoff::RetryPolicy;
use crate::config::Target;
use crate::dedup::DedupWindow;
use crate::event::{Event, EventKind};
use crate::metrics::{Metrics, Outcome};
use crate::payload::{Notification, render};

/// Bounds and timings of delivery.
#[derive(Clone, Debug)]
pub struct Options {
    /// Events accepted by `notify` and not yet dispatched.
    pub queue_capacity: usize,
    /// Notifications waiting for one target.
    pub target_queue_capacity: usize,
    /// Deliveries to one target in flight at once (each with its retries).
    pub target_concurrency: usize,
    /// One attempt: connecting, sending and reading the answer.
    pub request_timeout: Duration,
    pub retry: RetryPolicy,
    /// The same news is sent once per window.
    pub dedup_window: Duration,
    /// The most keys remembered for deduplication.
    pub dedup_capacity: usize,
    /// The most of a response body read (only the status matters; the rest is discarded).
    pub max_response_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            queue_capacity: 1024,
            target_queue_capacity: 256,
            target_concurrency: 4,
            request_timeout: Duration::from_secs(5),
            retry: RetryPolicy::default(),
            dedup_window: Duration::from_secs(3600),
            dedup_capacity: 4096,
            max_response_bytes: 16 * 1024,
        }
    }
}

/// What [`Notifier::notify`] did with an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queued {
    /// Accepted; it is sent to each target that wants it, unless it is a duplicate.
    Queued,
    /// No target wants this event.
    NoTarget,
    /// The queue was full: dropped and counted for each target that wanted it.
    DroppedQueueFull,
    /// Delivery has stopped (its task ended or was aborted).
    Closed,
}

/// The handle the controller keeps. Cloning is cheap; all clones feed one queue.
#[derive(Clone, Debug)]
pub struct Notifier {
    tx: mpsc::Sender<Event>,
    /// Each target's name and event filter, to count a drop where it would have gone.
    targets: Arc<[(String, Vec<EventKind>)]>,
    metrics: Metrics,
}

impl Notifier {
    /// Queue `event` for delivery. Never waits: not for the network, not for a full queue.
    pub fn notify(&self, event: Event) -> Queued {
        let kind = event.kind();
        let wanting = || {
            self.targets
                .iter()
                .filter(move |(_, events)| events.is_empty() || events.contains(&kind))
                .map(|(name, _)| name.as_str())
        };
        if wanting().next().is_none() {
            return Queued::NoTarget;
        }
        match self.tx.try_send(event) {
            Ok(()) => Queued::Queued,
            Err(mpsc::error::TrySendError::Full(_)) => {
                for name in wanting() {
                    self.metrics.inc(name, kind, Outcome::DroppedQueueFull);
                }
                tracing::warn!(event = kind.as_str(), "notification queue full; notification dropped");
                Queued::DroppedQueueFull
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Queued::Closed,
        }
    }
}

/// The task that delivers. It ends once every [`Notifier`] is dropped and what was queued has
/// been delivered or given up; dropping or aborting it stops all deliveries at once.
#[derive(Debug)]
pub struct Delivery {
    handle: JoinHandle<()>,
}

impl Delivery {
    /// Wait until delivery has ended.
    pub async fn finished(mut self) {
        // The task only ends by returning or by `abort`; neither is an error to report.
        let _ = (&mut self.handle).await;
    }

    /// Stop delivering now; notifications in flight or queued are lost.
    pub fn abort(&self) {
        self.handle.abort();
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Why delivery could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("failed to build the TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Start delivering to `targets`. Needs a Tokio runtime.
///
/// https receivers are checked against the system's roots (`SSL_CERT_FILE`, `SSL_CERT_DIR` or
/// the distribution's bundle). When none can be read, http receivers still work and https
/// attempts fail (and are counted) until the pod has roots.
pub fn start(targets: Vec<Target>, options: Options, metrics: Metrics) -> Result<(Notifier, Delivery), StartError> {
    let client = http_client()?;
    Ok(start_with_client(targets, options, metrics, client))
}

fn http_client() -> Result<HttpClient, StartError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = match hyper_rustls::HttpsConnectorBuilder::new().with_provider_and_native_roots(provider.clone()) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "no CA certificates found; https notification targets will fail");
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config)
        }
    };
    let connector = builder.https_or_http().enable_http1().build();
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(2)
        .build(connector))
}

fn start_with_client(
    targets: Vec<Target>,
    options: Options,
    metrics: Metrics,
    client: HttpClient,
) -> (Notifier, Delivery) {
    let (tx, rx) = mpsc::channel(options.queue_capacity.max(1));
    let filters: Arc<[(String, Vec<EventKind>)]> = targets.iter().map(|t| (t.name.clone(), t.events.clone())).collect();
    let handle = tokio::spawn(dispatch(rx, targets, options, metrics.clone(), client));
    (
        Notifier {
            tx,
            targets: filters,
            metrics,
        },
        Delivery { handle },
    )
}

struct TargetQueue {
    target: Arc<Target>,
    tx: mpsc::Sender<Arc<Notification>>,
}

async fn dispatch(
    mut rx: mpsc::Receiver<Event>,
    targets: Vec<Target>,
    options: Options,
    metrics: Metrics,
    client: HttpClient,
) {
    // Owned here, so aborting the dispatcher aborts every worker and, through theirs, every
    // delivery in flight.
    let mut workers = JoinSet::new();
    let mut queues = Vec::with_capacity(targets.len());
    for target in targets {
        let target = Arc::new(target);
        let (tx, target_rx) = mpsc::channel(options.target_queue_capacity.max(1));
        workers.spawn(work(
            target.clone(),
            target_rx,
            options.clone(),
            metrics.clone(),
            client.clone(),
        ));
        queues.push(TargetQueue { target, tx });
    }
    let ids = IdSource::new();
    let mut dedup = DedupWindow::new(options.dedup_window, options.dedup_capacity);
    while let Some(event) = rx.recv().await {
        let kind = event.kind();
        let wanting: Vec<&TargetQueue> = queues.iter().filter(|q| q.target.wants(kind)).collect();
        if wanting.is_empty() {
            continue;
        }
        if !dedup.first_seen(event.dedup_key(), Instant::now()) {
            for q in &wanting {
                metrics.inc(&q.target.name, kind, Outcome::SuppressedDuplicate);
            }
            continue;
        }
        let n = Arc::new(Notification {
            event,
            id: ids.next(),
            time: jiff::Timestamp::now(),
        });
        for q in wanting {
            if q.tx.try_send(n.clone()).is_err() {
                metrics.inc(&q.target.name, kind, Outcome::DroppedQueueFull);
                tracing::warn!(target = %q.target.name, event = kind.as_str(), "target's notification queue full; dropped");
            }
        }
    }
    // Every notifier is gone: close the targets' queues and let them finish.
    drop(queues);
    while workers.join_next().await.is_some() {}
}

async fn work(
    target: Arc<Target>,
    mut rx: mpsc::Receiver<Arc<Notification>>,
    options: Options,
    metrics: Metrics,
    client: HttpClient,
) {
    let slots = Arc::new(Semaphore::new(options.target_concurrency.max(1)));
    let mut deliveries = JoinSet::new();
    while let Some(n) = rx.recv().await {
        // Waiting here leaves this target's notifications in its queue; no other target waits.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let (target, options, metrics, client) = (target.clone(), options.clone(), metrics.clone(), client.clone());
        deliveries.spawn(async move {
            deliver(&target, &n, &options, &metrics, &client).await;
            drop(slot);
        });
        while deliveries.try_join_next().is_some() {}
    }
    while deliveries.join_next().await.is_some() {}
}

/// Why one attempt failed. Never holds the URL, a header or the receiver's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AttemptError {
    Timeout,
    Connect,
    Request,
    Status(StatusCode),
}

impl AttemptError {
    /// A 4xx other than 408 and 429 says the request itself is wrong: sending it again would
    /// get the same answer.
    fn is_permanent(self) -> bool {
        match self {
            AttemptError::Status(s) => {
                (s.is_client_error() && s != StatusCode::REQUEST_TIMEOUT && s != StatusCode::TOO_MANY_REQUESTS)
                    || s.is_redirection()
            }
            _ => false,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            AttemptError::Timeout => "timeout",
            AttemptError::Connect => "connect",
            AttemptError::Request => "request",
            AttemptError::Status(_) => "status",
        }
    }
}

async fn deliver(target: &Target, n: &Notification, options: &Options, metrics: &Metrics, client: &HttpClient) {
    let kind = n.event.kind();
    let (content_type, body) = render(target.kind, n);
    let body = Bytes::from(body);
    let mut attempt = 1u32;
    loop {
        let result = tokio::time::timeout(
            options.request_timeout,
            attempt_once(target, content_type, &body, options, client),
        )
        .await
        .unwrap_or(Err(AttemptError::Timeout));
        let err = match result {
            Ok(()) => {
                metrics.inc(&target.name, kind, Outcome::Delivered);
                tracing::debug!(target = %target.name, event = kind.as_str(), id = %n.id, attempt, "notification delivered");
                return;
            }
            Err(e) => e,
        };
        metrics.inc(&target.name, kind, Outcome::FailedAttempt);
        let status = match err {
            AttemptError::Status(s) => s.as_u16(),
            _ => 0,
        };
        let delay = if err.is_permanent() {
            None
        } else {
            options.retry.delay_after(attempt)
        };
        let Some(delay) = delay else {
            metrics.inc(&target.name, kind, Outcome::GivenUp);
            tracing::warn!(
                target = %target.name, event = kind.as_str(), id = %n.id, attempt,
                error = err.as_str(), status, "notification given up"
            );
            return;
        };
        tracing::debug!(
            target = %target.name, event = kind.as_str(), id = %n.id, attempt,
            error = err.as_str(), status, retry_in_ms = delay.as_millis() as u64, "notification attempt failed"
        );
        tokio::time::sleep(delay).await;
        attempt = attempt.saturating_add(1);
    }
}

async fn attempt_once(
    target: &Target,
    content_type: &'static str,
    body: &Bytes,
    options: &Options,
    client: &HttpClient,
) -> Result<(), AttemptError> {
    let mut req = Request::post(target.url.uri().clone())
        .header(CONTENT_TYPE, HeaderValue::from_static(content_type))
        .header(
            USER_AGENT,
            HeaderValue::from_static(concat!("captf-notify/", env!("CARGO_PKG_VERSION"))),
        )
        .body(Full::new(body.clone()))
        .map_err(|_| AttemptError::Request)?;
    if let Some((_, value)) = &target.authorization {
        req.headers_mut().insert(AUTHORIZATION, value.clone());
    }
    let resp = client.request(req).await.map_err(|e| {
        if e.is_connect() {
            AttemptError::Connect
        } else {
            AttemptError::Request
        }
    })?;
    let status = resp.status();
    // Read a little so a small answer leaves the connection reusable; never a large one.
    let _ = Limited::new(resp.into_body(), options.max_response_bytes)
        .collect()
        .await;
    if status.is_success() {
        Ok(())
    } else {
        Err(AttemptError::Status(status))
    }
}

/// Notification ids: unique per process run (a random start) and per notification (a counter).
struct IdSource {
    start: u64,
    next: AtomicU64,
}

impl IdSource {
    fn new() -> Self {
        // The standard library seeds `RandomState` from the OS: random enough to keep two runs'
        // ids apart, without a crate for it.
        let start = RandomState::new().hash_one(std::process::id());
        IdSource {
            start,
            next: AtomicU64::new(0),
        }
    }

    fn next(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{:016x}-{n:08x}", self.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_within_a_run_and_differ_between_runs() {
        let a = IdSource::new();
        let b = IdSource::new();
        let x = a.next();
        assert_ne!(x, a.next());
        assert_ne!(x, b.next());
    }

    #[test]
    fn only_a_client_error_other_than_timeout_or_rate_limit_is_final() {
        let s = |c: u16| AttemptError::Status(StatusCode::from_u16(c).unwrap());
        assert!(s(400).is_permanent());
        assert!(s(404).is_permanent());
        assert!(s(301).is_permanent());
        assert!(!s(408).is_permanent());
        assert!(!s(429).is_permanent());
        assert!(!s(500).is_permanent());
        assert!(!s(503).is_permanent());
        assert!(!AttemptError::Timeout.is_permanent());
        assert!(!AttemptError::Connect.is_permanent());
    }
}

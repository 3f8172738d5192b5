//! Metrics (prometheus-client) on the separate plain port: requests by route, kind, operation and
//! result, and a latency histogram by route. Every label is a bounded enum.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::METRICS_PATH;
use crate::admission::{KindLabel, OperationLabel, ResultLabel, Route};
use crate::conn::CloseReason;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub route: Route,
    pub kind: KindLabel,
    pub operation: OperationLabel,
    pub result: ResultLabel,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: Route,
}

/// The webhook's metrics and the registry that holds them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram>,
    cert_reloads: Family<ReloadLabels, Counter>,
    connections_open: Gauge,
    connections_refused: Counter,
    connections_closed: Family<ClosedLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClosedLabels {
    pub reason: CloseReason,
}

impl prometheus_client::encoding::EncodeLabelValue for CloseReason {
    fn encode(&self, encoder: &mut prometheus_client::encoding::LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(
            encoder,
            match self {
                CloseReason::NoRequest => "no_request",
                CloseReason::Idle => "idle",
                CloseReason::MaxAge => "max_age",
                CloseReason::MaxRequests => "max_requests",
                CloseReason::Shutdown => "shutdown",
                CloseReason::Evicted => "evicted",
            },
        )
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    pub result: ReloadResult,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ReloadResult {
    Reloaded,
    Rejected,
    /// The files could not be read (a key missing mid-rotation): counted once per such spell.
    Unreadable,
}

impl prometheus_client::encoding::EncodeLabelValue for ReloadResult {
    fn encode(&self, encoder: &mut prometheus_client::encoding::LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(
            encoder,
            match self {
                ReloadResult::Reloaded => "reloaded",
                ReloadResult::Rejected => "rejected",
                ReloadResult::Unreadable => "unreadable",
            },
        )
    }
}

fn latency_histogram() -> Histogram {
    // 50 µs .. ~1.6 s.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = Family::<RouteLabels, Histogram>::new_with_constructor(latency_histogram as fn() -> Histogram);
        let cert_reloads = Family::<ReloadLabels, Counter>::default();
        let sub = registry.sub_registry_with_prefix("captf_webhook");
        sub.register(
            "requests",
            "Admission requests by route, kind, operation and result",
            requests.clone(),
        );
        sub.register(
            "request_duration_seconds",
            "Time to answer an admission request, body read included",
            latency.clone(),
        );
        sub.register(
            "certificate_reloads",
            "Serving certificate changes seen on disk, by whether the new pair was taken (or the files could not be read)",
            cert_reloads.clone(),
        );
        let connections_open = Gauge::default();
        let connections_refused = Counter::default();
        sub.register(
            "connections_open",
            "TLS connections open (handshake under way included)",
            connections_open.clone(),
        );
        sub.register(
            "connections_refused",
            "Connections closed right after accept because the connection limit was reached",
            connections_refused.clone(),
        );
        let connections_closed = Family::<ClosedLabels, Counter>::default();
        sub.register(
            "connections_closed",
            "Served connections the server began to close gracefully, by reason",
            connections_closed.clone(),
        );
        Self {
            registry,
            requests,
            latency,
            cert_reloads,
            connections_open,
            connections_refused,
            connections_closed,
        }
    }

    pub fn observe(&self, labels: RequestLabels, elapsed: Duration) {
        self.latency
            .get_or_create(&RouteLabels { route: labels.route })
            .observe(elapsed.as_secs_f64());
        self.requests.get_or_create(&labels).inc();
    }

    pub fn cert_reload(&self, result: ReloadResult) {
        self.cert_reloads.get_or_create(&ReloadLabels { result }).inc();
    }

    /// A connection was accepted (`true`) or has ended (`false`).
    pub fn connection(&self, opened: bool) {
        if opened {
            self.connections_open.inc();
        } else {
            self.connections_open.dec();
        }
    }

    /// A connection was refused at the connection limit.
    pub fn connection_refused(&self) {
        self.connections_refused.inc();
    }

    /// The server began to close a served connection gracefully, for this reason.
    pub fn connection_closing(&self, reason: CloseReason) {
        self.connections_closed.get_or_create(&ClosedLabels { reason }).inc();
    }

    /// Connections open now (tests).
    pub fn connections_open(&self) -> i64 {
        self.connections_open.get()
    }

    /// The count of one request series (tests).
    pub fn requests(&self, labels: &RequestLabels) -> u64 {
        self.requests.get_or_create(labels).get()
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// The plain-HTTP metrics router: `GET /metrics`, and `/healthz` and `/readyz` as on the TLS port
/// (for the kubelet's probes when the TLS port requires client certificates, which the kubelet
/// does not present). `ready` is the TLS port's readiness flag.
pub fn metrics_router(metrics: Arc<Metrics>, ready: Arc<AtomicBool>) -> Router {
    Router::new()
        .route(METRICS_PATH, get(serve_metrics))
        .with_state(metrics)
        .route(crate::HEALTHZ_PATH, get(|| async { "ok\n" }))
        .route(
            crate::READYZ_PATH,
            get(move || {
                let ready = ready.load(Ordering::Relaxed);
                async move {
                    if ready {
                        (StatusCode::OK, "ok\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
                    }
                }
            }),
        )
}

async fn serve_metrics(State(metrics): State<Arc<Metrics>>) -> Response {
    match metrics.encode() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("failed to encode metrics: {e}\n"),
        )
            .into_response(),
    }
}

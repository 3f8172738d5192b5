//! The axum router on the TLS port: `/mutate`, `/validate`, `/convert`, `/healthz`, `/readyz`.
//!
//! Every bad input gets its status code and a one-line reason: wrong method 405, wrong content
//! type 415, body over the limit 413 (after reading and discarding a bounded amount of the rest,
//! so the client is still listening for it), a body that does not arrive in time or arrives slower
//! than the minimum rate ([`crate::rate`]) 408, a body that is not an AdmissionReview 400, past
//! the in-flight budget (in all or for the client's address) 429, no slot for a large review in
//! time 503. Nothing here panics on any input (a property test checks it).
//!
//! A review whose body is over [`Limits::inline_body_bytes`] is answered on the blocking pool, at
//! most [`Limits::large_reviews`] at a time, so the async workers keep answering small reviews
//! while large ones parse, and the memory large ones take at once is bounded.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::BodyExt;

use crate::admission::{self, KindLabel, OperationLabel, ResultLabel, Route};
use crate::approval::Approvals;
use crate::budget::{
    Admission, Bounds, Budget, DEFAULT_MAX_IN_FLIGHT_BYTES, DEFAULT_MAX_IN_FLIGHT_REQUESTS,
    DEFAULT_MAX_PEER_IN_FLIGHT_BYTES, DEFAULT_MAX_PEER_IN_FLIGHT_REQUESTS, DEFAULT_RESERVED_IN_FLIGHT_BYTES,
    DEFAULT_RESERVED_IN_FLIGHT_REQUESTS, Refused, Who,
};
use crate::metrics::{Metrics, RequestLabels};
use crate::rate::MinRate;
use crate::{CONVERT_PATH, DEFAULT_MAX_BODY_BYTES, HEALTHZ_PATH, MUTATE_PATH, READYZ_PATH, VALIDATE_PATH};
use captf_shared::policy::TenantPolicy;

/// How long a client may take to send the body once its headers are in, by default.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Bodies up to this size are answered on the async worker that read them (64 KiB: every
/// ordinary review; the fixtures are about 2 KiB).
pub const DEFAULT_INLINE_BODY_BYTES: usize = 64 * 1024;
/// Large reviews answered at once, by default.
pub const DEFAULT_LARGE_REVIEWS: usize = 2;
/// How long a large review waits for its turn by default before 503.
pub const DEFAULT_LARGE_REVIEW_WAIT: Duration = Duration::from_secs(5);

/// The request-size knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Larger bodies get 413.
    pub max_body_bytes: usize,
    /// Bodies up to this are answered inline; larger ones on the blocking pool.
    pub inline_body_bytes: usize,
    /// Large reviews answered at the same time.
    pub large_reviews: usize,
    /// How long a large review may wait for a slot before 503.
    pub large_review_wait: Duration,
    /// Review requests in flight at once; more get 429.
    pub max_in_flight_requests: usize,
    /// Body bytes held by requests in flight at once; more get 429.
    pub max_in_flight_bytes: usize,
    /// Review requests in flight at once from one source address; more get 429.
    pub max_peer_in_flight_requests: usize,
    /// Body bytes held at once by requests from one source address; more get 429.
    pub max_peer_in_flight_bytes: usize,
    /// Of the requests in flight, those only the trusted identity (the API server) may hold.
    pub reserved_in_flight_requests: usize,
    /// Of the body bytes in flight, those only the trusted identity may hold.
    pub reserved_in_flight_bytes: usize,
    /// The rate a body must arrive at after its grace; slower ones get 408.
    pub min_body_rate: MinRate,
}

impl Limits {
    /// The budget's bounds.
    pub fn bounds(&self) -> Bounds {
        Bounds {
            requests: self.max_in_flight_requests,
            bytes: self.max_in_flight_bytes,
            peer_requests: self.max_peer_in_flight_requests,
            peer_bytes: self.max_peer_in_flight_bytes,
            reserved_requests: self.reserved_in_flight_requests,
            reserved_bytes: self.reserved_in_flight_bytes,
        }
    }

    /// The same limits without a reserve: when no client can be trusted, nobody would use it.
    pub fn without_reserve(self) -> Self {
        Limits {
            reserved_in_flight_requests: 0,
            reserved_in_flight_bytes: 0,
            ..self
        }
    }
}

/// The source address of the connection a request came on, put in the request's extensions by
/// the server (absent when a test drives the router directly: all such requests share one peer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer(pub std::net::IpAddr);

/// Put in a request's extensions by the server when its connection is the API server's: it
/// presented a verified client certificate, or comes from a configured API server address. Such
/// a request may use the budget's reserve and is not held to an address's share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trusted;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            inline_body_bytes: DEFAULT_INLINE_BODY_BYTES,
            large_reviews: DEFAULT_LARGE_REVIEWS,
            large_review_wait: DEFAULT_LARGE_REVIEW_WAIT,
            max_in_flight_requests: DEFAULT_MAX_IN_FLIGHT_REQUESTS,
            max_in_flight_bytes: DEFAULT_MAX_IN_FLIGHT_BYTES,
            max_peer_in_flight_requests: DEFAULT_MAX_PEER_IN_FLIGHT_REQUESTS,
            max_peer_in_flight_bytes: DEFAULT_MAX_PEER_IN_FLIGHT_BYTES,
            reserved_in_flight_requests: DEFAULT_RESERVED_IN_FLIGHT_REQUESTS,
            reserved_in_flight_bytes: DEFAULT_RESERVED_IN_FLIGHT_BYTES,
            min_body_rate: MinRate::default(),
        }
    }
}

/// What the handlers share.
#[derive(Clone, Debug)]
pub struct AppState {
    pub metrics: Arc<Metrics>,
    /// False once shutdown has begun: `/readyz` answers 503.
    pub ready: Arc<AtomicBool>,
    pub body_timeout: Duration,
    pub limits: Limits,
    /// Requests and body bytes in flight.
    pub budget: Arc<Budget>,
    /// Slots for large reviews.
    pub large_slots: Arc<Semaphore>,
    /// What tenants may choose for runner pods.
    pub policy: Arc<TenantPolicy>,
    /// The namespaces a controller watches.
    pub watched: Arc<crate::watched::Watched>,
    /// Whether and how approvals are authorized (the `approve` verb).
    pub approvals: Approvals,
}

impl AppState {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            metrics,
            ready: Arc::new(AtomicBool::new(true)),
            body_timeout: DEFAULT_BODY_TIMEOUT,
            limits: Limits::default(),
            budget: Budget::new(Limits::default().bounds()),
            large_slots: Arc::new(Semaphore::new(DEFAULT_LARGE_REVIEWS)),
            policy: Arc::new(TenantPolicy::unrestricted()),
            watched: Arc::new(crate::watched::Watched::all()),
            approvals: Approvals::default(),
        }
    }

    pub fn with_approvals(mut self, approvals: Approvals) -> Self {
        self.approvals = approvals;
        self
    }

    pub fn with_policy(mut self, policy: TenantPolicy) -> Self {
        self.policy = Arc::new(policy);
        self
    }

    pub fn with_watched(mut self, watched: crate::watched::Watched) -> Self {
        self.watched = Arc::new(watched);
        self
    }

    pub fn with_body_timeout(mut self, body_timeout: Duration) -> Self {
        self.body_timeout = body_timeout;
        self
    }

    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self.budget = Budget::new(limits.bounds());
        self.large_slots = Arc::new(Semaphore::new(limits.large_reviews));
        self
    }
}

/// An HTTP request rejected before (or instead of) a review.
#[derive(Debug, thiserror::Error)]
pub enum RejectError {
    #[error("method {0} is not allowed: use POST")]
    MethodNotAllowed(String),
    #[error("content type must be application/json (got {0})")]
    UnsupportedMediaType(String),
    #[error("request body is larger than {0} bytes")]
    TooLarge(usize),
    #[error(transparent)]
    Budget(#[from] Refused),
    #[error("no slot for a large review within {0:?}: {1} large reviews are being answered; retry shortly")]
    Busy(Duration, usize),
    #[error("the review failed unexpectedly: {0}")]
    Internal(String),
    #[error("request body did not arrive within {0:?}")]
    BodyTimeout(Duration),
    #[error("request body arrived slower than {bytes_per_sec} bytes/s after a grace of {grace:?}")]
    TooSlow { bytes_per_sec: u64, grace: Duration },
    #[error("failed to read the request body: {0}")]
    BodyRead(String),
    #[error(transparent)]
    Review(#[from] admission::ReviewError),
}

impl RejectError {
    pub fn status(&self) -> StatusCode {
        match self {
            RejectError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            RejectError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            RejectError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            RejectError::Budget(_) => StatusCode::TOO_MANY_REQUESTS,
            RejectError::Busy(..) => StatusCode::SERVICE_UNAVAILABLE,
            RejectError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            RejectError::BodyTimeout(_) | RejectError::TooSlow { .. } => StatusCode::REQUEST_TIMEOUT,
            RejectError::BodyRead(_) | RejectError::Review(_) => StatusCode::BAD_REQUEST,
        }
    }
}

impl IntoResponse for RejectError {
    fn into_response(self) -> Response {
        let status = self.status();
        let line = one_line(&self.to_string());
        let mut resp = (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], line).into_response();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST"));
        }
        if matches!(status, StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE) {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if matches!(status, StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT) {
            // The rest of the body was not read: this connection carries no further request.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

fn one_line(s: &str) -> String {
    let mut line: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    line.push('\n');
    line
}

/// The router on the TLS port. Tests drive it with `tower::ServiceExt::oneshot`.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route(MUTATE_PATH, post(mutate).fallback(method_not_allowed))
        .route(VALIDATE_PATH, post(validate).fallback(method_not_allowed))
        .route(CONVERT_PATH, post(convert).fallback(method_not_allowed))
        .route(HEALTHZ_PATH, get(healthz))
        .route(READYZ_PATH, get(readyz))
        .fallback(not_found)
        // The limit is enforced by `read_body` (413 with a reason), not by axum's default.
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

async fn mutate(State(state): State<AppState>, req: Request) -> Response {
    handle(Route::Mutate, &state, req).await
}

async fn validate(State(state): State<AppState>, req: Request) -> Response {
    handle(Route::Validate, &state, req).await
}

async fn convert(State(state): State<AppState>, req: Request) -> Response {
    handle(Route::Convert, &state, req).await
}

async fn method_not_allowed(req: Request) -> Response {
    RejectError::MethodNotAllowed(req.method().to_string()).into_response()
}

async fn not_found(req: Request) -> Response {
    let line = one_line(&format!("no route for {}", req.uri().path()));
    (StatusCode::NOT_FOUND, line).into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<AppState>) -> Response {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response()
    }
}

async fn handle(route: Route, state: &AppState, req: Request) -> Response {
    let start = Instant::now();
    let outcome = answer(route, state, req).await;
    let (labels, response) = match outcome {
        Ok(reviewed) => (
            RequestLabels {
                route,
                kind: reviewed.kind,
                operation: reviewed.operation,
                result: reviewed.result,
            },
            ([(header::CONTENT_TYPE, "application/json")], reviewed.body).into_response(),
        ),
        Err(e) => {
            tracing::info!(
                route = route.as_str(),
                status = e.status().as_u16(),
                "rejected {} request: {e}",
                if route == Route::Convert {
                    "conversion"
                } else {
                    "admission"
                }
            );
            (
                RequestLabels {
                    route,
                    kind: KindLabel::None,
                    operation: OperationLabel::None,
                    result: ResultLabel::Rejected,
                },
                e.into_response(),
            )
        }
    };
    state.metrics.observe(labels, start.elapsed());
    response
}

async fn answer(route: Route, state: &AppState, req: Request) -> Result<admission::Reviewed, RejectError> {
    check_content_type(req.headers())?;
    let who = if req.extensions().get::<Trusted>().is_some() {
        Who::Trusted
    } else {
        Who::Peer(req.extensions().get::<Peer>().map(|p| p.0))
    };
    let (parts, mut body) = req.into_parts();
    let mut admission = match state.budget.admit(who) {
        Ok(a) => a,
        Err(refused) => {
            // Read and drop (at most a body's worth) so the client reads the 429.
            discard(&mut body, state, BodyClock::start(state)).await;
            return Err(refused.into());
        }
    };
    let body = read_body(&parts.headers, body, state, &mut admission).await?;
    let reviewed = if body.len() <= state.limits.inline_body_bytes {
        review_body(route, &body, &state.policy, &state.watched)?
    } else {
        review_large(route, state, body).await?
    };
    drop(admission);
    // The body is no longer held: only the check (user and object) waits for the API server.
    let refused = match reviewed.approve.as_ref() {
        Some(check) => crate::approval::enforce(check, &state.approvals).await,
        None => None,
    };
    let reviewed = match refused {
        Some(message) => reviewed.refused(&message),
        None => reviewed,
    };
    match &reviewed.message {
        Some(message) => tracing::info!(
            route = route.as_str(),
            kind = reviewed.kind.as_str(),
            namespace = %reviewed.namespace,
            name = %reviewed.name,
            uid = %reviewed.uid,
            "denied: {message}"
        ),
        None => tracing::debug!(
            route = route.as_str(),
            kind = reviewed.kind.as_str(),
            namespace = %reviewed.namespace,
            name = %reviewed.name,
            uid = %reviewed.uid,
            operation = reviewed.operation.as_str(),
            result = reviewed.result.as_str(),
            "answered"
        ),
    }
    Ok(reviewed)
}

fn check_content_type(headers: &HeaderMap) -> Result<(), RejectError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(RejectError::UnsupportedMediaType("none".into()));
    };
    let text = value.to_str().unwrap_or("<not text>");
    let essence = text.split(';').next().unwrap_or_default().trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(RejectError::UnsupportedMediaType(format!("{text:?}")))
    }
}

/// The answer to one body: a ConversionReview's on `/convert`, else an AdmissionReview's.
fn review_body(
    route: Route,
    body: &[u8],
    policy: &TenantPolicy,
    watched: &crate::watched::Watched,
) -> Result<admission::Reviewed, admission::ReviewError> {
    match route {
        Route::Convert => crate::convert::review(body),
        Route::Mutate | Route::Validate => admission::review_in(route, body, policy, watched),
    }
}

/// A large review on the blocking pool, once one of the large-review slots is free.
async fn review_large(route: Route, state: &AppState, body: Bytes) -> Result<admission::Reviewed, RejectError> {
    let wait = state.limits.large_review_wait;
    let permit = match tokio::time::timeout(wait, state.large_slots.clone().acquire_owned()).await {
        Ok(Ok(permit)) => permit,
        Ok(Err(_)) | Err(_) => return Err(RejectError::Busy(wait, state.limits.large_reviews)),
    };
    let (policy, watched) = (state.policy.clone(), state.watched.clone());
    let answer = tokio::task::spawn_blocking(move || {
        let answer = review_body(route, &body, &policy, &watched);
        drop(permit);
        answer
    })
    .await
    .map_err(|e| RejectError::Internal(e.to_string()))?;
    Ok(answer?)
}

/// When a body must be in: the body timeout, and the minimum rate over what has arrived.
#[derive(Clone, Copy, Debug)]
struct BodyClock {
    start: tokio::time::Instant,
    timeout: tokio::time::Instant,
    rate: MinRate,
}

/// Why a body stopped being waited for.
enum Late {
    Timeout,
    TooSlow,
}

impl BodyClock {
    fn start(state: &AppState) -> Self {
        let start = tokio::time::Instant::now();
        BodyClock {
            start,
            timeout: start + state.body_timeout,
            rate: state.limits.min_body_rate,
        }
    }

    /// Wait for the next frame, with `received` bytes in so far.
    async fn frame(
        &self,
        body: &mut Body,
        received: usize,
    ) -> Result<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>, Late> {
        let slow = self
            .rate
            .deadline(received)
            .map(|d| self.start + d)
            .filter(|at| *at < self.timeout);
        let (until, late) = match slow {
            Some(at) => (at, Late::TooSlow),
            None => (self.timeout, Late::Timeout),
        };
        tokio::time::timeout_at(until, body.frame()).await.map_err(|_| late)
    }
}

/// Read the body within the body timeout and at the minimum rate, reserving its bytes in the
/// budget as they arrive. A body over the limit gets 413 after at most another limit's worth of it
/// is read and thrown away (or none, when the client waits for `100 Continue`), so a client that
/// streams it still reads the answer instead of a reset connection.
async fn read_body(
    headers: &HeaderMap,
    mut body: Body,
    state: &AppState,
    admission: &mut Admission,
) -> Result<Bytes, RejectError> {
    let max = state.limits.max_body_bytes;
    let clock = BodyClock::start(state);
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        let expects_continue = headers
            .get(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        if !expects_continue {
            discard(&mut body, state, clock).await;
        }
        return Err(RejectError::TooLarge(max));
    }
    // The declared length is only a hint for the first allocation (at most an inline body's
    // worth): what is held, and reserved, is what has arrived.
    let hint = declared.map_or(0, |n| {
        usize::try_from(n).unwrap_or(max).min(state.limits.inline_body_bytes)
    });
    let mut buf: Vec<u8> = Vec::with_capacity(hint);
    loop {
        let frame = match clock.frame(&mut body, buf.len()).await {
            Err(Late::Timeout) => return Err(RejectError::BodyTimeout(state.body_timeout)),
            Err(Late::TooSlow) => {
                return Err(RejectError::TooSlow {
                    bytes_per_sec: clock.rate.bytes_per_sec,
                    grace: clock.rate.grace,
                });
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(RejectError::BodyRead(e.to_string())),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if buf.len() + data.len() > max {
            discard(&mut body, state, clock).await;
            return Err(RejectError::TooLarge(max));
        }
        if let Err(refused) = admission.reserve(data.len()) {
            discard(&mut body, state, clock).await;
            return Err(refused.into());
        }
        buf.extend_from_slice(&data);
    }
    Ok(Bytes::from(buf))
}

/// Read and drop up to a body's worth of the rest of a body, while it keeps to the body timeout
/// and the minimum rate.
async fn discard(body: &mut Body, state: &AppState, clock: BodyClock) {
    let max = state.limits.max_body_bytes;
    let mut seen = 0usize;
    while seen < max {
        match clock.frame(body, seen).await {
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    seen = seen.saturating_add(data.len());
                }
            }
            _ => return,
        }
    }
}

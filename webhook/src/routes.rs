//! The axum router on the TLS port: `/mutate`, `/validate`, `/healthz`, `/readyz`.
//!
//! Every bad input gets its status code and a one-line reason: wrong method 405, wrong content
//! type 415, body over [`MAX_BODY_BYTES`] 413, a body that does not arrive in time 408, a body that
//! is not an AdmissionReview 400. Nothing here panics on any input (a property test checks it).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::admission::{self, KindLabel, OperationLabel, ResultLabel, Route};
use crate::metrics::{Metrics, RequestLabels};
use crate::{HEALTHZ_PATH, MAX_BODY_BYTES, MUTATE_PATH, READYZ_PATH, VALIDATE_PATH};
use captf_shared::policy::TenantPolicy;

/// How long a client may take to send the body once its headers are in, by default.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// What the handlers share.
#[derive(Clone, Debug)]
pub struct AppState {
    pub metrics: Arc<Metrics>,
    /// False once shutdown has begun: `/readyz` answers 503.
    pub ready: Arc<AtomicBool>,
    pub body_timeout: Duration,
    /// What tenants may choose for runner pods.
    pub policy: Arc<TenantPolicy>,
}

impl AppState {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            metrics,
            ready: Arc::new(AtomicBool::new(true)),
            body_timeout: DEFAULT_BODY_TIMEOUT,
            policy: Arc::new(TenantPolicy::unrestricted()),
        }
    }

    pub fn with_policy(mut self, policy: TenantPolicy) -> Self {
        self.policy = Arc::new(policy);
        self
    }

    pub fn with_body_timeout(mut self, body_timeout: Duration) -> Self {
        self.body_timeout = body_timeout;
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
    #[error("request body is larger than {MAX_BODY_BYTES} bytes")]
    TooLarge,
    #[error("request body did not arrive within {0:?}")]
    BodyTimeout(Duration),
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
            RejectError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            RejectError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
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
                "rejected admission request: {e}"
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
    let (parts, body) = req.into_parts();
    let body = read_body(&parts.headers, body, state.body_timeout).await?;
    let reviewed = admission::review_with(route, &body, &state.policy)?;
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

async fn read_body(headers: &HeaderMap, body: Body, timeout: Duration) -> Result<Bytes, RejectError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(RejectError::TooLarge);
    }
    let collect = Limited::new(body, MAX_BODY_BYTES).collect();
    match tokio::time::timeout(timeout, collect).await {
        Err(_) => Err(RejectError::BodyTimeout(timeout)),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(RejectError::TooLarge),
        Ok(Err(e)) => Err(RejectError::BodyRead(e.to_string())),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

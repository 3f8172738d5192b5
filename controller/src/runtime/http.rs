//! `/metrics` on `--metrics-addr`; `/healthz` and `/readyz` on `--health-addr` (ready after the
//! first sync of all three controllers).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;

use super::metrics::Metrics;

/// The metrics router.
pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    Router::new().route(
        "/metrics",
        get(|State(m): State<Arc<Metrics>>| async move {
            (
                [(
                    header::CONTENT_TYPE,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                )],
                m.encode(),
            )
        })
        .with_state(metrics),
    )
}

/// The health router.
pub fn health_router(ready: Arc<AtomicBool>) -> Router {
    Router::new().route("/healthz", get(|| async { "ok" })).route(
        "/readyz",
        get(|State(r): State<Arc<AtomicBool>>| async move {
            if r.load(Ordering::SeqCst) {
                (StatusCode::OK, "ok").into_response()
            } else {
                (StatusCode::SERVICE_UNAVAILABLE, "not synced yet").into_response()
            }
        })
        .with_state(ready),
    )
}

#[derive(Debug, thiserror::Error)]
#[error("failed to listen on {addr}: {source}")]
pub struct BindError {
    pub addr: SocketAddr,
    #[source]
    pub source: std::io::Error,
}

/// Bind and serve a router until shutdown; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    router: Router,
    mut shutdown: watch::Receiver<bool>,
) -> Result<SocketAddr, BindError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| BindError { addr, source })?;
    let bound = listener.local_addr().map_err(|source| BindError { addr, source })?;
    tokio::spawn(async move {
        // With the client's address, which the metrics guard bounds reviews by.
        let _ = axum::serve(listener, router.into_make_service_with_connect_info::<SocketAddr>())
            .with_graceful_shutdown(async move {
                let _ = shutdown.wait_for(|s| *s).await;
            })
            .await;
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    #[tokio::test]
    async fn readyz_is_unavailable_until_the_first_sync() {
        let ready = Arc::new(AtomicBool::new(false));
        let app = health_router(ready.clone());
        let req = || Request::get("/readyz").body(Body::empty()).unwrap();
        assert_eq!(
            app.clone().oneshot(req()).await.unwrap().status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        ready.store(true, Ordering::SeqCst);
        assert_eq!(app.clone().oneshot(req()).await.unwrap().status(), StatusCode::OK);
        let h = Request::get("/healthz").body(Body::empty()).unwrap();
        assert_eq!(app.oneshot(h).await.unwrap().status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn metrics_are_served_as_openmetrics_text() {
        let m = Arc::new(Metrics::new());
        m.force_unlock(captf_shared::Kind::TerraformCluster);
        let res = metrics_router(m)
            .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let body = axum::body::to_bytes(res.into_body(), 1 << 20).await.unwrap();
        assert!(String::from_utf8_lossy(&body).contains("captf_force_unlocks_total{kind=\"TerraformCluster\"} 1"));
    }
}

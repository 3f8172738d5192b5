//! The server: bind, accept TLS connections, serve the router with timeouts, shut down gracefully.
//!
//! [`bind`] binds both ports and loads the certificate (so a caller learns the bound addresses,
//! e.g. with port 0, before serving); [`Bound::run`] serves until the shutdown future resolves,
//! then stops accepting, answers `/readyz` with 503, and lets open connections finish their
//! requests (within `shutdown_grace`). [`serve`] does both.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::idle::IdleTimeout;
use crate::metrics::{Metrics, metrics_router};
use crate::routes::{AppState, DEFAULT_BODY_TIMEOUT, router};
use crate::tls::{CertFiles, CertReloader, DEFAULT_RELOAD_INTERVAL, TlsError, server_config};
use captf_shared::policy::TenantPolicy;

/// Everything the server needs; [`Config::new`] fills in the defaults.
#[derive(Clone, Debug)]
pub struct Config {
    pub addr: SocketAddr,
    /// `None`: no metrics server.
    pub metrics_addr: Option<SocketAddr>,
    pub cert_files: CertFiles,
    /// How often the certificate files are re-read.
    pub reload_interval: Duration,
    /// A client must complete the TLS handshake within this.
    pub handshake_timeout: Duration,
    /// A client must send a request's headers within this (HTTP/1).
    pub header_read_timeout: Duration,
    /// A client must send a request's body within this after its headers.
    pub body_timeout: Duration,
    /// A connection on which nothing is read or written for this long is closed.
    pub idle_timeout: Duration,
    /// After the shutdown signal, how long to keep accepting while `/readyz` fails, so the
    /// Service's endpoints drop this pod before connections are refused.
    pub shutdown_delay: Duration,
    /// How long open connections get to finish after accepting stops.
    pub shutdown_grace: Duration,
    /// What tenants may choose for runner pods (default: anything; the binary's flags narrow it).
    pub policy: TenantPolicy,
}

impl Config {
    pub fn new(addr: SocketAddr, cert_files: CertFiles) -> Self {
        Self {
            addr,
            metrics_addr: None,
            cert_files,
            reload_interval: DEFAULT_RELOAD_INTERVAL,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            body_timeout: DEFAULT_BODY_TIMEOUT,
            idle_timeout: Duration::from_secs(60),
            shutdown_delay: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(20),
            policy: TenantPolicy::unrestricted(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("failed to bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to load the serving certificate: {0}")]
    Certificate(#[from] TlsError),
    #[error("failed to serve metrics: {0}")]
    Metrics(#[source] std::io::Error),
}

/// A server whose ports are bound and whose certificate is loaded, ready to [`run`](Bound::run).
pub struct Bound {
    config: Config,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    local_addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    acceptor: TlsAcceptor,
    reloader: CertReloader,
    state: AppState,
}

async fn bind_addr(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), ServeError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;
    Ok((listener, local))
}

/// Load the certificate and bind both ports.
pub async fn bind(config: Config) -> Result<Bound, ServeError> {
    let metrics = Arc::new(Metrics::new());
    let (reloader, resolver) = CertReloader::load(config.cert_files.clone())?;
    let reloader = reloader.with_metrics(metrics.clone());
    let acceptor = TlsAcceptor::from(Arc::new(server_config(resolver)?));
    let (listener, local_addr) = bind_addr(config.addr).await?;
    let (metrics_listener, metrics_addr) = match config.metrics_addr {
        Some(addr) => {
            let (l, a) = bind_addr(addr).await?;
            (Some(l), Some(a))
        }
        None => (None, None),
    };
    let state = AppState::new(metrics)
        .with_body_timeout(config.body_timeout)
        .with_policy(config.policy.clone());
    Ok(Bound {
        config,
        listener,
        metrics_listener,
        local_addr,
        metrics_addr,
        acceptor,
        reloader,
        state,
    })
}

/// Bind and serve until `shutdown` resolves.
pub async fn serve(config: Config, shutdown: impl Future<Output = ()> + Send) -> Result<(), ServeError> {
    bind(config).await?.run(shutdown).await
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound")
            .field("local_addr", &self.local_addr)
            .field("metrics_addr", &self.metrics_addr)
            .finish_non_exhaustive()
    }
}

impl Bound {
    /// The TLS port's bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The metrics port's bound address, if metrics are served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The metrics (tests read them directly).
    pub fn metrics(&self) -> Arc<Metrics> {
        self.state.metrics.clone()
    }

    /// Serve until `shutdown` resolves, then drain.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), ServeError> {
        let Bound {
            config,
            listener,
            metrics_listener,
            acceptor,
            reloader,
            state,
            ..
        } = self;
        let reload_task = tokio::spawn(reloader.run(config.reload_interval));
        let (metrics_stop, metrics_stopped) = tokio::sync::watch::channel(false);
        let metrics_task = metrics_listener.map(|l| {
            let app = metrics_router(state.metrics.clone());
            let mut stopped = metrics_stopped.clone();
            tokio::spawn(async move {
                axum::serve(l, app)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.wait_for(|s| *s).await;
                    })
                    .await
            })
        });

        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(config.header_read_timeout)
            .keep_alive(true);
        builder.http2().timer(TokioTimer::new());
        let service = TowerToHyperService::new(router(state.clone()));
        let graceful = GracefulShutdown::new();

        tokio::pin!(shutdown);
        let mut signalled = false;
        let drain = tokio::time::sleep(Duration::from_secs(86_400));
        tokio::pin!(drain);
        loop {
            let (tcp, peer) = tokio::select! {
                () = &mut shutdown, if !signalled => {
                    signalled = true;
                    state.ready.store(false, Ordering::Relaxed);
                    if config.shutdown_delay.is_zero() {
                        break;
                    }
                    tracing::info!("shutdown signalled: /readyz fails, still accepting for {:?}", config.shutdown_delay);
                    drain.as_mut().reset(tokio::time::Instant::now() + config.shutdown_delay);
                    continue;
                }
                () = &mut drain, if signalled => break,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // E.g. too many open files: do not spin.
                        tracing::warn!("failed to accept a connection: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let builder = builder.clone();
            let service = service.clone();
            let watcher = graceful.watcher();
            let handshake_timeout = config.handshake_timeout;
            let idle_timeout = config.idle_timeout;
            tokio::spawn(async move {
                let tls = match tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, "TLS handshake failed: {e}");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
                let conn = builder
                    .serve_connection(TokioIo::new(IdleTimeout::new(tls, idle_timeout)), service)
                    .into_owned();
                if let Err(e) = watcher.watch(conn).await {
                    tracing::debug!(%peer, "connection ended: {e}");
                }
            });
        }

        tracing::info!("shutting down: no new connections, draining open ones");
        state.ready.store(false, Ordering::Relaxed);
        drop(listener);
        if tokio::time::timeout(config.shutdown_grace, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("connections still open after {:?}; closing them", config.shutdown_grace);
        }
        reload_task.abort();
        let _ = metrics_stop.send(true);
        if let Some(task) = metrics_task
            && let Ok(Err(e)) = task.await
        {
            return Err(ServeError::Metrics(e));
        }
        Ok(())
    }
}

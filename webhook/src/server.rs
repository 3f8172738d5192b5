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
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt as _;

use crate::approval::Approvals;
use crate::conn::{
    Activity, CloseReason, ConnBounds, ConnHandle, ConnLimits, ConnTable, DEFAULT_HTTP2_MAX_STREAMS,
    DEFAULT_MAX_CONNECTION_AGE, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_PEER,
    DEFAULT_MAX_REQUESTS_PER_CONNECTION, DEFAULT_RESERVED_CONNECTIONS, Verdict, check, retire_reason,
};
use crate::metrics::{Metrics, metrics_router};
use crate::routes::{AppState, DEFAULT_BODY_TIMEOUT, Limits, Peer, Trusted, router};
use crate::tls::{CertFiles, CertReloader, DEFAULT_RELOAD_INTERVAL, TlsError, client_verifier, server_config};
use crate::trust::ApiServerAddresses;
use captf_shared::policy::TenantPolicy;

/// Everything the server needs; [`Config::new`] fills in the defaults.
#[derive(Clone, Debug)]
pub struct Config {
    pub addr: SocketAddr,
    /// `None`: no metrics server.
    pub metrics_addr: Option<SocketAddr>,
    pub cert_files: CertFiles,
    /// PEM CA bundle that client certificates must chain to; `None`: no client certificate asked
    /// for. Read once at start. A connection whose certificate it verified is the API server's:
    /// it may use the reserved shares.
    pub client_ca_file: Option<std::path::PathBuf>,
    /// Source addresses whose connections are the API server's (may use the reserved shares),
    /// for clusters where it cannot present a client certificate.
    pub api_server_addresses: ApiServerAddresses,
    /// Of `max_connections`, those only the API server may hold (with a client CA or API server
    /// addresses; else none are held back).
    pub reserved_connections: usize,
    /// How often the certificate files are re-read.
    pub reload_interval: Duration,
    /// A client must complete the TLS handshake within this.
    pub handshake_timeout: Duration,
    /// A client must send a request's headers within this: the first request's since the
    /// handshake (HTTP/1 and HTTP/2), a later HTTP/1 request's since it began.
    pub header_read_timeout: Duration,
    /// A client must send a request's body within this after its headers.
    pub body_timeout: Duration,
    /// A connection with no request in flight for this long since its last one ended is closed,
    /// whatever bytes or pings it sends meanwhile.
    pub idle_timeout: Duration,
    /// After the shutdown signal, how long to keep accepting while `/readyz` fails, so the
    /// Service's endpoints drop this pod before connections are refused.
    pub shutdown_delay: Duration,
    /// How long open connections get to finish after accepting stops.
    pub shutdown_grace: Duration,
    /// Body size, in-flight budget and large-review knobs.
    pub limits: Limits,
    /// Connections open at once; past it new ones are closed right after accept.
    pub max_connections: usize,
    /// Connections open at once from one source address; past it new ones from that address are
    /// closed right after accept.
    pub max_connections_per_peer: usize,
    /// A connection is closed (gracefully) after this long.
    pub max_connection_age: Duration,
    /// A connection is closed (gracefully) after this many requests.
    pub max_requests_per_connection: u64,
    /// HTTP/2 streams a client may have open on one connection.
    pub http2_max_streams: u32,
    /// How long a connection asked to close (idle, age, requests) gets before it is dropped.
    pub close_grace: Duration,
    /// What tenants may choose for runner pods (default: anything; the binary's flags narrow it).
    pub policy: TenantPolicy,
    /// The namespaces a controller watches (an object created elsewhere is admitted with a
    /// warning); empty: every namespace.
    pub watched: crate::watched::Watched,
    /// Whether and how plan approvals and `guard.destructive: Allow` are authorized (default:
    /// not checked; the binary's `--authorize-approvals` turns it on).
    pub approvals: Approvals,
}

impl Config {
    pub fn new(addr: SocketAddr, cert_files: CertFiles) -> Self {
        Self {
            addr,
            metrics_addr: None,
            cert_files,
            client_ca_file: None,
            api_server_addresses: ApiServerAddresses::default(),
            reserved_connections: DEFAULT_RESERVED_CONNECTIONS,
            reload_interval: DEFAULT_RELOAD_INTERVAL,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            body_timeout: DEFAULT_BODY_TIMEOUT,
            idle_timeout: Duration::from_secs(120),
            shutdown_delay: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(20),
            limits: Limits::default(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            max_connection_age: DEFAULT_MAX_CONNECTION_AGE,
            max_requests_per_connection: DEFAULT_MAX_REQUESTS_PER_CONNECTION,
            http2_max_streams: DEFAULT_HTTP2_MAX_STREAMS,
            close_grace: Duration::from_secs(5),
            policy: TenantPolicy::unrestricted(),
            watched: crate::watched::Watched::all(),
            approvals: Approvals::default(),
        }
    }
}

impl Config {
    /// Whether the server can tell the API server from other clients (a client CA, or API server
    /// addresses). Without it nobody may use the reserved shares, so none are held back.
    pub fn knows_the_api_server(&self) -> bool {
        self.client_ca_file.is_some() || !self.api_server_addresses.is_empty()
    }

    /// The connection bounds, with the reserve only when the API server can be told apart.
    pub fn conn_bounds(&self) -> ConnBounds {
        ConnBounds {
            max: self.max_connections,
            per_peer: self.max_connections_per_peer,
            reserved: if self.knows_the_api_server() {
                self.reserved_connections
            } else {
                0
            },
        }
    }

    /// The request limits, with the reserve only when the API server can be told apart.
    pub fn effective_limits(&self) -> Limits {
        if self.knows_the_api_server() {
            self.limits
        } else {
            self.limits.without_reserve()
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
    let clients = match &config.client_ca_file {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|source| TlsError::Read {
                path: path.clone(),
                source,
            })?;
            Some(client_verifier(&pem)?)
        }
        None => None,
    };
    let acceptor = TlsAcceptor::from(Arc::new(server_config(resolver, clients)?));
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
        .with_limits(config.effective_limits())
        .with_policy(config.policy.clone())
        .with_watched(config.watched.clone())
        .with_approvals(config.approvals.clone());
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
            let app = metrics_router(state.metrics.clone(), state.ready.clone());
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
            // hyper's header timer starts as soon as it waits for a request, so on a kept
            // connection it is also an idle timeout: never shorter than ours (conn::check says
            // why an idle connection must outlive the client's idea of it). The first request's
            // headers keep their own, shorter bound (conn::check, `NoRequest`).
            .header_read_timeout(config.header_read_timeout.max(config.idle_timeout))
            .max_buf_size(64 * 1024)
            .keep_alive(true);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(config.http2_max_streams)
            .max_header_list_size(64 * 1024);
        let app = router(state.clone());
        let limits = ConnLimits {
            first_request_timeout: config.header_read_timeout,
            idle_timeout: config.idle_timeout,
            max_age: config.max_connection_age,
            max_requests: config.max_requests_per_connection,
            close_grace: config.close_grace,
        };
        let table = ConnTable::new(config.conn_bounds());
        // Every connection's task holds a sender: once all are gone, every connection has ended.
        let (alive, mut all_ended) = mpsc::channel::<()>(1);
        let (stop_tx, stop_rx) = watch::channel(false);
        // Set when the shutdown is signalled: while the endpoints drop this pod, each connection
        // is retired with its next response.
        let (drain_tx, drain_rx) = watch::channel(false);

        tokio::pin!(shutdown);
        let mut signalled = false;
        let drain = tokio::time::sleep(Duration::from_secs(86_400));
        tokio::pin!(drain);
        loop {
            let (tcp, peer) = tokio::select! {
                () = &mut shutdown, if !signalled => {
                    signalled = true;
                    state.ready.store(false, Ordering::Relaxed);
                    let _ = drain_tx.send(true);
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
            let ip = peer.ip().to_canonical();
            let by_address = config.api_server_addresses.contains(ip);
            let Some(slot) = table.open(ip, by_address) else {
                // No room, and every connection that could make it has a request in flight:
                // closed at once (the client can retry another replica) rather than left
                // waiting in the backlog.
                state.metrics.connection_refused();
                tracing::debug!(%peer, "connection refused: no room ({} connections open)", table.len());
                drop(tcp);
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let builder = builder.clone();
            let app = app.clone();
            let stop = (stop_rx.clone(), drain_rx.clone());
            let metrics = state.metrics.clone();
            let handshake_timeout = config.handshake_timeout;
            let shutdown_grace = config.shutdown_grace;
            let alive = alive.clone();
            metrics.connection(true);
            tokio::spawn(async move {
                let handle = slot.handle().clone();
                let tls = tokio::select! {
                    r = tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)) => match r {
                        Ok(Ok(tls)) => Some(tls),
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, "TLS handshake failed: {e}");
                            None
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            None
                        }
                    },
                    () = handle.evicted() => {
                        tracing::debug!(%peer, "closing connection: {}", CloseReason::Evicted.as_str());
                        metrics.connection_closing(CloseReason::Evicted);
                        None
                    }
                };
                if let Some(tls) = tls {
                    // With a client CA every handshake that completes verified a certificate.
                    let certified = tls.get_ref().1.peer_certificates().is_some_and(|c| !c.is_empty());
                    if certified {
                        slot.promote();
                    }
                    let who = Who {
                        peer,
                        trusted: by_address || certified,
                        handle,
                    };
                    serve_connection(&builder, tls, app, limits, (stop, shutdown_grace), who, &metrics).await;
                }
                metrics.connection(false);
                drop(slot);
                drop(alive);
            });
        }

        tracing::info!("shutting down: no new connections, draining open ones");
        state.ready.store(false, Ordering::Relaxed);
        drop(listener);
        let _ = stop_tx.send(true);
        drop(alive);
        if tokio::time::timeout(config.shutdown_grace, all_ended.recv())
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

/// Whose a connection is: its peer, whether it is the API server's, and its place in the table.
struct Who {
    peer: SocketAddr,
    trusted: bool,
    handle: Arc<ConnHandle>,
}

/// Serve one TLS connection under its [`ConnLimits`], until it ends, is closed by them (then
/// within the close grace), is closed to make room for another (at once when it has no request
/// in flight, else within the close grace), or the server stops (then within the shutdown
/// grace). A close is counted by its reason when it begins.
async fn serve_connection<IO>(
    builder: &auto::Builder<TokioExecutor>,
    io: IO,
    app: axum::Router,
    limits: ConnLimits,
    ((mut stop, mut draining), shutdown_grace): ((watch::Receiver<bool>, watch::Receiver<bool>), Duration),
    who: Who,
    metrics: &Arc<Metrics>,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Who { peer, trusted, handle } = who;
    let activity = Arc::new(Activity::new(tokio::time::Instant::now()));
    let service = hyper::service::service_fn({
        let activity = activity.clone();
        let handle = handle.clone();
        let draining = draining.clone();
        let metrics = metrics.clone();
        move |mut req: hyper::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(Peer(peer.ip().to_canonical()));
            if trusted {
                req.extensions_mut().insert(Trusted);
            }
            let http2 = req.version() == hyper::Version::HTTP_2;
            let guard = (activity.begin(http2), handle.begin());
            let (app, activity, draining, metrics) = (app.clone(), activity.clone(), draining.clone(), metrics.clone());
            async move {
                let mut resp = app.oneshot(req).await;
                // An HTTP/1.1 connection to retire ends with this response (conn::check says
                // why it is never closed while idle): the client sends nothing more on it.
                if !http2
                    && let Ok(r) = resp.as_mut()
                    && let Some(reason) =
                        retire_reason(&limits, activity.seen(tokio::time::Instant::now()), *draining.borrow())
                {
                    r.headers_mut().insert(
                        axum::http::header::CONNECTION,
                        axum::http::HeaderValue::from_static("close"),
                    );
                    metrics.connection_closing(reason);
                }
                drop(guard);
                resp
            }
        }
    });
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let (reason, grace) = loop {
        if *stop.borrow() {
            break (CloseReason::Shutdown, shutdown_grace);
        }
        let drain = *draining.borrow();
        let until = match check(&limits, activity.seen(tokio::time::Instant::now()), drain) {
            // Nothing is in flight on a connection closed for its timeouts: it goes at once (a
            // request whose headers are still arriving is not one to wait for).
            Verdict::Close(reason @ (CloseReason::NoRequest | CloseReason::Idle)) => break (reason, Duration::ZERO),
            Verdict::Close(reason) => break (reason, limits.close_grace),
            Verdict::KeepUntil(at) => activity.at(at),
        };
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(%peer, "connection ended: {e}");
                }
                return;
            }
            () = tokio::time::sleep_until(until) => {}
            () = activity.changed() => {}
            _ = stop.changed() => {}
            _ = draining.changed(), if !drain => {}
            () = handle.evicted() => {
                // Its place is already another's: an idle connection goes at once.
                let grace = if activity.seen(tokio::time::Instant::now()).in_flight == 0 {
                    Duration::ZERO
                } else {
                    limits.close_grace
                };
                break (CloseReason::Evicted, grace);
            }
        }
    };
    tracing::debug!(%peer, "closing connection: {}", reason.as_str());
    metrics.connection_closing(reason);
    conn.as_mut().graceful_shutdown();
    match tokio::time::timeout(grace, conn).await {
        Ok(Err(e)) => tracing::debug!(%peer, "connection ended: {e}"),
        Ok(Ok(())) => {}
        Err(_) => tracing::debug!(%peer, "connection dropped after {grace:?}"),
    }
}

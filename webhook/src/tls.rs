//! TLS the cert-manager way (docs/conventions.md).
//!
//! The server resolves its certificate through [`ReloadingResolver`], an `ArcSwap` of the current
//! pair: every handshake reads it, [`CertReloader`] swaps it. The reloader re-reads the files'
//! *contents* on a short poll, because a Secret volume changes by swapping its `..data` symlink,
//! which path watches miss. A new pair that does not parse or whose key does not match the
//! certificate is logged and the old pair kept. Open connections are never touched: they keep the
//! session they negotiated, and only new handshakes see the new pair.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::metrics::{Metrics, ReloadResult};

/// How often the files are re-read by default.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("failed to read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse the certificate chain: {0}")]
    ParseChain(#[source] rustls_pki_types::pem::Error),
    #[error("the certificate file holds no certificate")]
    EmptyChain,
    #[error("failed to parse the private key: {0}")]
    ParseKey(#[source] rustls_pki_types::pem::Error),
    #[error("the certificate and key do not make a usable pair: {0}")]
    Pair(#[source] rustls::Error),
    #[error("failed to build the TLS configuration: {0}")]
    Config(#[source] rustls::Error),
    #[error("failed to parse the client CA bundle: {0}")]
    ParseClientCa(#[source] rustls_pki_types::pem::Error),
    #[error("the client CA bundle holds no usable CA certificate")]
    EmptyClientCa,
    #[error("failed to build the client certificate verifier: {0}")]
    ClientVerifier(String),
}

/// The crypto provider used everywhere in this crate (ring).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate chain (leaf first, intermediates after: full chains are served as given) and
/// its private key, from PEM.
pub fn certified_key_from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(TlsError::ParseChain)?;
    if chain.is_empty() {
        return Err(TlsError::EmptyChain);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(TlsError::ParseKey)?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(TlsError::Pair)
}

/// The certificate and key files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    fn read(&self) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|source| TlsError::Read {
                path: p.to_path_buf(),
                source,
            })
        };
        Ok((read(&self.cert)?, read(&self.key)?))
    }
}

/// Serves whatever pair is current; swapped atomically by [`CertReloader`].
#[derive(Debug)]
pub struct ReloadingResolver {
    current: ArcSwap<CertifiedKey>,
}

impl ReloadingResolver {
    pub fn new(initial: CertifiedKey) -> Self {
        Self {
            current: ArcSwap::from_pointee(initial),
        }
    }

    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.load_full()
    }

    pub fn swap(&self, new: CertifiedKey) {
        self.current.store(Arc::new(new));
    }
}

impl ResolvesServerCert for ReloadingResolver {
    fn resolve(&self, _client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// A verifier that requires every client to present a certificate chaining to one of the CAs in
/// `ca_pem` (PEM, one or more certificates).
pub fn client_verifier(ca_pem: &[u8]) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        let cert = cert.map_err(TlsError::ParseClientCa)?;
        roots.add(cert).map_err(|e| TlsError::ClientVerifier(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(TlsError::EmptyClientCa);
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| TlsError::ClientVerifier(e.to_string()))
}

/// The server configuration: TLS 1.3 and 1.2, ALPN h2 and http/1.1; client certificates required
/// when a verifier is given (see [`client_verifier`]), else none asked for.
pub fn server_config(
    resolver: Arc<ReloadingResolver>,
    clients: Option<Arc<dyn ClientCertVerifier>>,
) -> Result<rustls::ServerConfig, TlsError> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(TlsError::Config)?;
    let builder = match clients {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// What one poll found.
#[derive(Debug)]
pub enum PollOutcome {
    /// The files hold what they held at the last poll.
    Unchanged,
    /// A new, valid pair is now served.
    Reloaded,
    /// The files changed but the new pair is unusable; the old pair is still served.
    Rejected(TlsError),
    /// The files could not be read (e.g. mid-rotation); the old pair is still served, and the
    /// next poll tries again.
    Unreadable(TlsError),
}

/// Re-reads the files and swaps the resolver's pair when their contents change.
#[derive(Debug)]
pub struct CertReloader {
    files: CertFiles,
    resolver: Arc<ReloadingResolver>,
    /// The contents last tried, taken or not (so a broken pair is logged once, not every poll).
    last: (Vec<u8>, Vec<u8>),
    metrics: Option<Arc<Metrics>>,
}

impl CertReloader {
    /// Load the initial pair; failing here fails startup.
    pub fn load(files: CertFiles) -> Result<(Self, Arc<ReloadingResolver>), TlsError> {
        let (cert, key) = files.read()?;
        let pair = certified_key_from_pem(&cert, &key)?;
        let resolver = Arc::new(ReloadingResolver::new(pair));
        let reloader = Self {
            files,
            resolver: resolver.clone(),
            last: (cert, key),
            metrics: None,
        };
        Ok((reloader, resolver))
    }

    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Read the files once and swap when they hold a new valid pair.
    pub fn poll_once(&mut self) -> PollOutcome {
        let (cert, key) = match self.files.read() {
            Ok(contents) => contents,
            Err(e) => return PollOutcome::Unreadable(e),
        };
        if cert == self.last.0 && key == self.last.1 {
            return PollOutcome::Unchanged;
        }
        let outcome = match certified_key_from_pem(&cert, &key) {
            Ok(pair) => {
                self.resolver.swap(pair);
                PollOutcome::Reloaded
            }
            Err(e) => PollOutcome::Rejected(e),
        };
        self.last = (cert, key);
        outcome
    }

    /// Poll every `interval` until the task is dropped, logging what changes.
    pub async fn run(mut self, interval: Duration) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        let mut unreadable_logged = false;
        loop {
            ticker.tick().await;
            match self.poll_once() {
                PollOutcome::Unchanged => unreadable_logged = false,
                PollOutcome::Reloaded => {
                    unreadable_logged = false;
                    tracing::info!(cert = %self.files.cert.display(), "serving certificate reloaded");
                    if let Some(m) = &self.metrics {
                        m.cert_reload(ReloadResult::Reloaded);
                    }
                }
                PollOutcome::Rejected(e) => {
                    unreadable_logged = false;
                    tracing::error!(cert = %self.files.cert.display(), "new serving certificate rejected, keeping the old one: {e}");
                    if let Some(m) = &self.metrics {
                        m.cert_reload(ReloadResult::Rejected);
                    }
                }
                PollOutcome::Unreadable(e) => {
                    if !unreadable_logged {
                        tracing::warn!("serving certificate unreadable, keeping the old one: {e}");
                        unreadable_logged = true;
                        if let Some(m) = &self.metrics {
                            m.cert_reload(ReloadResult::Unreadable);
                        }
                    }
                }
            }
        }
    }
}

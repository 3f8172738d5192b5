//! The simulator's HTTPS port: the same API as the plain port, behind TLS with a CA made for
//! this simulator alone, so a process can be given real in-cluster configuration
//! (`KUBERNETES_SERVICE_HOST`/`PORT` plus `token`, `ca.crt` and `namespace` files) and use it
//! exactly as it would in a pod: client-go inside Terraform's kubernetes backend, or kube-rs.
//!
//! The serving certificate names `127.0.0.1`, `localhost` and the in-cluster names of the
//! `kubernetes` Service. HTTP/2 and HTTP/1.1 are offered through ALPN, as kube-apiserver does.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

/// The in-cluster files' folder in a pod, which client-go and kube-rs read from this fixed path.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

#[derive(Debug, thiserror::Error)]
pub enum HttpsError {
    #[error("failed to make the simulator's certificates: {0}")]
    Certs(#[from] captf_certs::DevCertsError),
    #[error("failed to load the simulator's serving certificate: {0}")]
    Pem(#[from] rustls_pki_types::pem::Error),
    #[error("failed to configure TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("failed to write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// What a client needs to reach the HTTPS port.
#[derive(Clone, Debug)]
pub struct HttpsEndpoint {
    pub addr: SocketAddr,
    /// The CA that signed the serving certificate (PEM): the pod's `ca.crt`.
    pub ca_pem: String,
}

impl HttpsEndpoint {
    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The environment a kubelet gives a container for in-cluster configuration.
    pub fn service_env(&self) -> [(&'static str, String); 2] {
        [
            ("KUBERNETES_SERVICE_HOST", self.addr.ip().to_string()),
            ("KUBERNETES_SERVICE_PORT", self.addr.port().to_string()),
        ]
    }

    /// Write the service-account files a pod sees at [`SERVICE_ACCOUNT_DIR`] (`token`,
    /// `ca.crt`, `namespace`) into `dir`, to be mounted there.
    pub fn write_service_account_files(&self, dir: &Path, namespace: &str, token: &str) -> Result<(), HttpsError> {
        let write = |name: &str, body: &str| {
            let path = dir.join(name);
            std::fs::write(&path, body).map_err(|source| HttpsError::Write { path, source })
        };
        std::fs::create_dir_all(dir).map_err(|source| HttpsError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
        write("token", token)?;
        write("ca.crt", &self.ca_pem)?;
        write("namespace", namespace)
    }
}

/// A fresh CA and a serving certificate for the simulator.
fn tls_config() -> Result<(rustls::ServerConfig, String), HttpsError> {
    let names = [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    .map(String::from);
    let certs = captf_certs::generate("captf-sim CA", &names, &[IpAddr::V4(Ipv4Addr::LOCALHOST)])?;
    let chain = CertificateDer::pem_slice_iter(certs.cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(certs.key_pem.as_bytes())?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((config, certs.ca_pem))
}

/// Serve `app` over TLS on `listener` until `stop` fires; then every connection is closed.
pub fn serve(
    listener: TcpListener,
    app: axum::Router,
    stop: oneshot::Receiver<()>,
) -> Result<HttpsEndpoint, HttpsError> {
    let (config, ca_pem) = tls_config()?;
    let addr = listener.local_addr().map_err(|source| HttpsError::Write {
        path: PathBuf::from("<https listener>"),
        source,
    })?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    tokio::spawn(async move {
        let mut connections = JoinSet::new();
        let mut stop = stop;
        loop {
            let (tcp, _) = tokio::select! {
                _ = &mut stop => break,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(_) => continue,
                },
            };
            let acceptor = acceptor.clone();
            let app = app.clone();
            connections.spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let service = TowerToHyperService::new(app);
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(tls), service)
                    .await;
            });
            // Forget the connections that have ended.
            while connections.try_join_next().is_some() {}
        }
        connections.abort_all();
    });
    Ok(HttpsEndpoint { addr, ca_pem })
}

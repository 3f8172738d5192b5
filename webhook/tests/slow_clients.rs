//! Slow and greedy clients against the real server on loopback: a loop of small valid reviews
//! from the API server's address keeps passing while attackers, from other source addresses,
//! hold slow connections that declare the largest body and dribble it, send most of a large body
//! and stall, open many connections from one address, or fill the connection cap with idle
//! ones. Every 127.0.0.0/8 address is local on Linux, so each "peer" binds its own. The API
//! server is told apart in the two ways the webhook supports: its address (`api_server_addresses`)
//! or its client certificate (`client_ca_file`); and not at all, with the defaults.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use captf_webhook::devcerts::{self, DevCerts};
use captf_webhook::tls::CertFiles;
use captf_webhook::{Config, VALIDATE_PATH};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// The API server's address in these tests.
const API_SERVER: [u8; 4] = [127, 0, 0, 2];

struct Server {
    addr: SocketAddr,
    metrics: Arc<captf_webhook::metrics::Metrics>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), captf_webhook::ServeError>>,
    _dir: tempfile::TempDir,
}

fn certs() -> DevCerts {
    devcerts::generate(
        "slow clients CA",
        &["localhost".into()],
        &["127.0.0.1".parse().unwrap()],
    )
    .unwrap()
}

fn files(certs: &DevCerts) -> (tempfile::TempDir, CertFiles) {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");
    std::fs::write(&cert, &certs.cert_pem).unwrap();
    std::fs::write(&key, &certs.key_pem).unwrap();
    (dir, CertFiles { cert, key })
}

/// The binary's defaults, on an ephemeral port.
fn default_config(files: CertFiles) -> Config {
    let mut c = Config::new("127.0.0.1:0".parse().unwrap(), files);
    c.shutdown_delay = Duration::ZERO;
    c.shutdown_grace = Duration::from_secs(2);
    c
}

async fn start(config: Config, dir: tempfile::TempDir) -> Server {
    let bound = captf_webhook::bind(config).await.unwrap();
    let addr = bound.local_addr();
    let metrics = bound.metrics();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(bound.run(async move {
        let _ = stopped.await;
    }));
    Server {
        addr,
        metrics,
        stop,
        task,
        _dir: dir,
    }
}

impl Server {
    async fn shutdown(self) {
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), self.task).await;
    }
}

fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(
            CertificateDer::pem_slice_iter(ca_pem.as_bytes())
                .next()
                .unwrap()
                .unwrap(),
        )
        .unwrap();
    let mut c = rustls::ClientConfig::builder_with_provider(captf_webhook::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(c)
}

/// A TCP connection from `from` (any 127/8 address) to the server.
async fn tcp_from(from: [u8; 4], to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(IpAddr::from(from), 0))?;
    socket.connect(to).await
}

async fn tls_from(
    from: [u8; 4],
    to: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = tcp_from(from, to).await?;
    TlsConnector::from(config)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// One small valid review on a fresh connection from the API server's address: `Ok` when it was
/// answered 200 and allowed, else what went wrong.
async fn one_review(to: SocketAddr, config: Arc<rustls::ClientConfig>) -> Result<(), String> {
    one_review_from(API_SERVER, to, config).await
}

async fn one_review_from(from: [u8; 4], to: SocketAddr, config: Arc<rustls::ClientConfig>) -> Result<(), String> {
    let tls = tls_from(from, to, config).await.map_err(|e| format!("connect: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(conn);
    let body = serde_json::to_vec(&common::fixture("cluster-create-accepted")).unwrap();
    let req = hyper::Request::post(VALIDATE_PATH)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = sender.send_request(req).await.map_err(|e| format!("send: {e}"))?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    if status != 200 {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body).trim()));
    }
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| format!("json: {e}"))?;
    if v["response"]["allowed"] != true {
        return Err(format!("not allowed: {v}"));
    }
    Ok(())
}

/// Reviews one after another until `stop`; (answered, failures with their reasons).
async fn review_loop(to: SocketAddr, config: Arc<rustls::ClientConfig>) -> (usize, Vec<String>) {
    let start = std::time::Instant::now();
    let mut ok = 0;
    let mut failures = vec![];
    // At least REVIEWS answers over at least ATTACKED of attack, whatever the machine's speed;
    // a machine too slow for REVIEWS answers within LIMIT fails the count below.
    while (ok < REVIEWS || start.elapsed() < ATTACKED) && start.elapsed() < LIMIT {
        match tokio::time::timeout(Duration::from_secs(5), one_review(to, config.clone())).await {
            Ok(Ok(())) => ok += 1,
            Ok(Err(e)) => failures.push(e),
            Err(_) => failures.push("no answer within 5s".into()),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (ok, failures)
}

/// Valid reviews a review loop must see answered while it is attacked.
const REVIEWS: usize = 10;
/// How long the loop runs under attack at least.
const ATTACKED: Duration = Duration::from_secs(4);
/// How long it may take for its answers.
const LIMIT: Duration = Duration::from_secs(60);

/// Open a connection from `from`, declare the largest body, then send one byte every `every`
/// until the server closes it; again and again until `stop`. Counts the connections that the
/// server accepted and then closed.
async fn slow_body_attacker(
    from: [u8; 4],
    to: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    every: Duration,
    stop: Arc<AtomicBool>,
    closed: Arc<AtomicUsize>,
) {
    let head = format!(
        "POST {VALIDATE_PATH} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        7 * 1024 * 1024
    );
    while !stop.load(Ordering::Relaxed) {
        let Ok(tls) = tls_from(from, to, config.clone()).await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let (mut rd, mut wr) = tokio::io::split(tls);
        if wr.write_all(head.as_bytes()).await.is_err() {
            continue;
        }
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            while let Ok(n) = rd.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        });
        while !stop.load(Ordering::Relaxed) && !reader.is_finished() {
            if wr.write_all(b" ").await.is_err() || wr.flush().await.is_err() {
                break;
            }
            tokio::time::sleep(every).await;
        }
        if reader.is_finished() {
            closed.fetch_add(1, Ordering::Relaxed);
        }
        reader.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_reviews_keep_passing_while_slow_clients_declare_the_largest_body_and_dribble_it() {
    let certs = certs();
    let (dir, files) = files(&certs);
    let server = start(default_config(files), dir).await;
    let config = client_config(&certs.ca_pem);

    // The API server gets through before the attack.
    one_review(server.addr, config.clone()).await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let closed = Arc::new(AtomicUsize::new(0));
    // Four attackers, as many as the body budget holds at the largest body, plus two more, each
    // from its own address.
    let mut attackers = vec![];
    for i in 0..6u8 {
        attackers.push(tokio::spawn(slow_body_attacker(
            [127, 0, 1, 10 + i],
            server.addr,
            config.clone(),
            Duration::from_millis(200),
            stop.clone(),
            closed.clone(),
        )));
    }
    // Let every attacker hold its request before the first valid review of the attack.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (ok, failures) = review_loop(server.addr, config.clone()).await;
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.await.unwrap();
    }
    assert!(
        failures.is_empty(),
        "{} of {} valid reviews failed: {:?}",
        failures.len(),
        ok + failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(ok >= REVIEWS, "only {ok} valid reviews were answered within {LIMIT:?}");
    // The slow bodies were cut off (the minimum rate), not held for the body timeout.
    assert!(
        closed.load(Ordering::Relaxed) >= 6,
        "the server closed only {} slow connections",
        closed.load(Ordering::Relaxed)
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_reviews_keep_passing_while_one_peer_opens_many_slow_connections() {
    let certs = certs();
    let (dir, files) = files(&certs);
    let server = start(default_config(files), dir).await;
    let config = client_config(&certs.ca_pem);
    one_review(server.addr, config.clone()).await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let closed = Arc::new(AtomicUsize::new(0));
    // More connections from one address than the server holds requests in flight.
    let mut attackers = vec![];
    for _ in 0..100 {
        attackers.push(tokio::spawn(slow_body_attacker(
            [127, 0, 2, 10],
            server.addr,
            config.clone(),
            Duration::from_millis(200),
            stop.clone(),
            closed.clone(),
        )));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (ok, failures) = review_loop(server.addr, config.clone()).await;
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.await.unwrap();
    }
    assert!(
        failures.is_empty(),
        "{} of {} valid reviews failed: {:?}",
        failures.len(),
        ok + failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(ok >= REVIEWS, "only {ok} valid reviews were answered within {LIMIT:?}");
    server.shutdown().await;
}

// ---- many addresses against the API server's share ----

/// The binary's defaults, the API server known by its address.
fn api_server_by_address(files: CertFiles) -> Config {
    let mut c = default_config(files);
    c.api_server_addresses = captf_webhook::trust::ApiServerAddresses(vec!["127.0.0.2/32".parse().unwrap()]);
    c
}

/// Poll (bounded) until `what` holds.
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting until {what}");
}

/// Open a connection from `from`, declare the largest body, send `first` bytes of it at once,
/// then one byte every 200 ms until the server answers or closes; again and again until `stop`.
/// Counts the answers that were 429 (the address past its share).
async fn stalling_body_attacker(
    from: [u8; 4],
    to: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    first: usize,
    stop: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
) {
    let head = format!(
        "POST {VALIDATE_PATH} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        7 * 1024 * 1024
    );
    let chunk = vec![b' '; first];
    while !stop.load(Ordering::Relaxed) {
        let Ok(tls) = tls_from(from, to, config.clone()).await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let (mut rd, mut wr) = tokio::io::split(tls);
        let refused = refused.clone();
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            if let Ok(n) = rd.read(&mut buf).await
                && buf[..n].starts_with(b"HTTP/1.1 429")
            {
                refused.fetch_add(1, Ordering::Relaxed);
            }
        });
        if wr.write_all(head.as_bytes()).await.is_ok() && wr.write_all(&chunk).await.is_ok() {
            while !stop.load(Ordering::Relaxed) && !reader.is_finished() {
                if wr.write_all(b" ").await.is_err() || wr.flush().await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        reader.abort();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Eight addresses, each with four connections that send 1.5 MiB of a declared 7 MiB body and
/// then stall: together far more than the bytes in flight. Meanwhile the API server's review
/// loop must see no failure.
async fn eight_slow_peers_beside_a_review_loop(
    config: Config,
    dir: tempfile::TempDir,
    client: Arc<rustls::ClientConfig>,
    attacker: Arc<rustls::ClientConfig>,
) {
    let server = start(config, dir).await;
    one_review(server.addr, client.clone()).await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(AtomicUsize::new(0));
    let mut attackers = vec![];
    for peer in 0..8u8 {
        for _ in 0..4 {
            attackers.push(tokio::spawn(stalling_body_attacker(
                [127, 0, 3, 10 + peer],
                server.addr,
                attacker.clone(),
                1024 * 1024 + 512 * 1024,
                stop.clone(),
                refused.clone(),
            )));
        }
    }
    // The attack is on once the addresses are being held to their shares.
    until("the attackers are refused past their shares", || {
        refused.load(Ordering::Relaxed) >= 8
    })
    .await;
    let (ok, failures) = review_loop(server.addr, client.clone()).await;
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.await.unwrap();
    }
    assert!(
        failures.is_empty(),
        "{} of {} valid reviews failed: {:?}",
        failures.len(),
        ok + failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(ok >= REVIEWS, "only {ok} valid reviews were answered within {LIMIT:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_slow_peers_cannot_keep_the_api_server_from_its_reviews() {
    let certs = certs();
    let (dir, files) = files(&certs);
    let config = client_config(&certs.ca_pem);
    eight_slow_peers_beside_a_review_loop(api_server_by_address(files), dir, config.clone(), config).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_slow_peers_cannot_keep_an_api_server_the_webhook_cannot_tell_apart_from_its_reviews() {
    let certs = certs();
    let (dir, files) = files(&certs);
    let config = client_config(&certs.ca_pem);
    eight_slow_peers_beside_a_review_loop(default_config(files), dir, config.clone(), config).await;
}

/// `each` TLS connections from each of `peers` that complete the handshake and send nothing.
async fn idle_flood(
    peers: &[[u8; 4]],
    each: usize,
    to: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> Vec<TlsStream<TcpStream>> {
    let mut held = vec![];
    for &peer in peers {
        for _ in 0..each {
            if let Ok(tls) = tls_from(peer, to, config.clone()).await {
                held.push(tls);
            }
        }
    }
    held
}

fn eight_peers() -> Vec<[u8; 4]> {
    (0..8u8).map(|i| [127, 0, 4, 10 + i]).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_flood_cannot_refuse_a_review() {
    let certs = certs();
    let (dir, files) = files(&certs);
    let server = start(default_config(files), dir).await;
    let config = client_config(&certs.ca_pem);
    let _flood = idle_flood(&eight_peers(), 32, server.addr, config.clone()).await;
    let metrics = server.metrics.clone();
    until("the flood holds every connection", || metrics.connections_open() == 256).await;
    one_review(server.addr, config.clone()).await.unwrap();
    // Once more from an address of the flood: it takes its own oldest idle one's place.
    one_review_from([127, 0, 4, 10], server.addr, config).await.unwrap();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_flood_from_the_api_servers_own_address_cannot_refuse_its_review() {
    let certs = certs();
    let (dir, files) = files(&certs);
    let server = start(api_server_by_address(files), dir).await;
    let config = client_config(&certs.ca_pem);
    // Seven addresses at their share, and whatever else from the API server's address (pods on
    // a control-plane node's host network look the same).
    let mut peers = eight_peers();
    peers.truncate(7);
    let mut flood = idle_flood(&peers, 32, server.addr, config.clone()).await;
    flood.extend(idle_flood(&[API_SERVER], 64, server.addr, config.clone()).await);
    let metrics = server.metrics.clone();
    until("the flood holds every connection", || metrics.connections_open() == 256).await;
    for _ in 0..3 {
        one_review(server.addr, config.clone()).await.unwrap();
    }
    server.shutdown().await;
}

/// A CA, a client certificate it signed (clientAuth), and its key, as PEM.
fn client_ca_and_cert(cn: &str) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{cn} CA"));
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let mut leaf_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf_params.distinguished_name.push(rcgen::DnType::CommonName, cn);
    leaf_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
    (ca.pem(), leaf.pem(), leaf_key.serialize_pem())
}

fn client_config_with_cert(ca_pem: &str, cert_pem: &str, key_pem: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::PrivateKeyDer;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(
            CertificateDer::pem_slice_iter(ca_pem.as_bytes())
                .next()
                .unwrap()
                .unwrap(),
        )
        .unwrap();
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let mut c = rustls::ClientConfig::builder_with_provider(captf_webhook::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_ca_unfinished_handshakes_cannot_refuse_the_api_server() {
    let certs = certs();
    let (dir, files) = files(&certs);
    let (client_ca, cert, key) = client_ca_and_cert("kube-apiserver");
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, &client_ca).unwrap();
    let mut config = default_config(files);
    config.client_ca_file = Some(ca_file);
    let server = start(config, dir).await;
    let api_server = client_config_with_cert(&certs.ca_pem, &cert, &key);
    one_review(server.addr, api_server.clone()).await.unwrap();

    // Without a certificate no one else gets past the handshake, but a connection that never
    // starts one holds its place until the header timeout: eight addresses, and the API server's
    // own, fill every place open to a connection not yet known to be the API server's (all but
    // the reserve).
    let mut flood = vec![];
    for peer in eight_peers().into_iter().chain([API_SERVER]) {
        for _ in 0..32 {
            flood.extend(tcp_from(peer, server.addr).await.ok());
        }
    }
    let metrics = server.metrics.clone();
    until("the flood holds every place but the reserve", || {
        metrics.connections_open() >= 224
    })
    .await;
    for _ in 0..3 {
        one_review(server.addr, api_server.clone()).await.unwrap();
    }
    server.shutdown().await;
}

//! The real server on 127.0.0.1 over TLS: certificate rotation with an open connection, broken
//! pairs, TLS versions, full chains, slow clients, graceful shutdown, metrics, the binary.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use captf_webhook::devcerts::{self, DevCerts};
use captf_webhook::tls::CertFiles;
use captf_webhook::{Config, HEALTHZ_PATH, VALIDATE_PATH};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

fn certs(name: &str) -> DevCerts {
    devcerts::generate(name, &["localhost".into()], &["127.0.0.1".parse().unwrap()]).unwrap()
}

fn leaf_der(pem: &str) -> CertificateDer<'static> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes()).next().unwrap().unwrap()
}

/// A Secret volume as the kubelet lays it out: `tls.crt -> ..data/tls.crt`, `..data -> ..<ts>/`,
/// rotated by writing a new timestamped directory and renaming a new `..data` symlink over the old.
struct SecretVolume {
    dir: tempfile::TempDir,
    generation: u32,
}

impl SecretVolume {
    fn new(cert_pem: &str, key_pem: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut v = SecretVolume { dir, generation: 0 };
        v.rotate(cert_pem, key_pem);
        for name in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(Path::new("..data").join(name), v.dir.path().join(name)).unwrap();
        }
        v
    }

    fn rotate(&mut self, cert_pem: &str, key_pem: &str) {
        self.generation += 1;
        let ts = format!("..2026_11_29_15_00_{:02}.{}", self.generation, self.generation);
        let data = self.dir.path().join(&ts);
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("tls.crt"), cert_pem).unwrap();
        std::fs::write(data.join("tls.key"), key_pem).unwrap();
        let tmp = self.dir.path().join("..data_tmp");
        std::os::unix::fs::symlink(&ts, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.path().join("..data")).unwrap();
    }

    fn files(&self) -> CertFiles {
        CertFiles {
            cert: self.dir.path().join("tls.crt"),
            key: self.dir.path().join("tls.key"),
        }
    }
}

fn test_config(files: CertFiles) -> Config {
    let mut c = Config::new("127.0.0.1:0".parse().unwrap(), files);
    c.metrics_addr = Some("127.0.0.1:0".parse().unwrap());
    c.reload_interval = Duration::from_millis(50);
    c.handshake_timeout = Duration::from_millis(500);
    c.header_read_timeout = Duration::from_millis(300);
    c.body_timeout = Duration::from_millis(300);
    c.idle_timeout = Duration::from_secs(3);
    c.shutdown_delay = Duration::ZERO;
    c.shutdown_grace = Duration::from_secs(5);
    c
}

struct Running {
    addr: SocketAddr,
    metrics_addr: SocketAddr,
    metrics: Arc<captf_webhook::metrics::Metrics>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), captf_webhook::ServeError>>,
}

async fn start(config: Config) -> Running {
    let bound = captf_webhook::bind(config).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let addr = bound.local_addr();
    let metrics_addr = bound.metrics_addr().unwrap();
    let metrics = bound.metrics();
    let task = tokio::spawn(bound.run(async move {
        let _ = stopped.await;
    }));
    Running {
        addr,
        metrics_addr,
        metrics,
        stop: Some(stop),
        task,
    }
}

impl Running {
    async fn shutdown(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

fn client_config(cas: &[&str], versions: &[&'static rustls::SupportedProtocolVersion]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        roots.add(leaf_der(ca)).unwrap();
    }
    let mut c = rustls::ClientConfig::builder_with_provider(captf_webhook::tls::provider())
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    // A resumed session presents no certificate; every test connection does a full handshake.
    c.resumption = rustls::client::Resumption::disabled();
    Arc::new(c)
}

const BOTH: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];

async fn tls_connect(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    TlsConnector::from(config)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

/// One keep-alive HTTP/1.1 connection and the leaf certificate the server presented on it.
struct Conn {
    sender: SendRequest<Full<Bytes>>,
    leaf: CertificateDer<'static>,
    version: rustls::ProtocolVersion,
}

async fn connect(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> Conn {
    let tls = tls_connect(addr, config).await;
    let (_, session) = tls.get_ref();
    let leaf = session.peer_certificates().unwrap()[0].clone();
    let version = session.protocol_version().unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    Conn { sender, leaf, version }
}

impl Conn {
    async fn post(&mut self, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
        let req = hyper::Request::post(path)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        self.sender.ready().await.unwrap();
        let resp = self.sender.send_request(req).await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.into_body().collect().await.unwrap().to_bytes().to_vec())
    }

    async fn review_allowed(&mut self) -> bool {
        let body = serde_json::to_vec(&common::fixture("cluster-create-accepted")).unwrap();
        let (status, body) = self.post(VALIDATE_PATH, body).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        v["response"]["allowed"] == true
    }
}

/// Connect again and again until the server presents `want` (or fail after 5 s).
async fn wait_for_leaf(addr: SocketAddr, config: Arc<rustls::ClientConfig>, want: &CertificateDer<'_>) -> Conn {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let c = connect(addr, config.clone()).await;
        if &c.leaf == want {
            return c;
        }
        assert!(Instant::now() < deadline, "the new certificate was never served");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Wait until the metrics hold `line` as one whole line (so `… 1` is not met by `… 10`), or fail
/// after 5 s naming it.
async fn wait_for_metric(metrics: &captf_webhook::metrics::Metrics, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = metrics.encode().unwrap();
        if text.lines().any(|l| l == line) {
            return;
        }
        assert!(Instant::now() < deadline, "{line} never appeared in 5 s:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `GET path` over plain HTTP (the metrics port), answered and closed: the whole response.
async fn plain_get(addr: SocketAddr, path: &str) -> String {
    let mut tcp = TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: connecting to {addr}: {e}"));
    tcp.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap_or_else(|e| panic!("GET {path} on {addr}: {e}"));
    String::from_utf8_lossy(&read_until_closed(&mut tcp, Duration::from_secs(3)).await).into_owned()
}

/// Wait until the server's readiness (on the metrics port) fails, i.e. the shutdown signal has
/// been taken, or fail after 5 s.
async fn wait_until_unready(metrics_addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = plain_get(metrics_addr, captf_webhook::READYZ_PATH).await;
        if got.starts_with("HTTP/1.1 503") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz never failed within 5 s of the shutdown signal: {got}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Wait until the TLS port refuses connections (the listener is closed), or fail after 5 s.
async fn wait_until_refused(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "{addr} still accepted connections 5 s after the shutdown signal"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn rotation_keeps_the_open_connection_working_and_new_connections_get_the_new_certificate() {
    let (a, b) = (certs("CA A"), certs("CA B"));
    let mut volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let server = start(test_config(volume.files())).await;
    let client = client_config(&[&a.ca_pem, &b.ca_pem], BOTH);

    let mut old = connect(server.addr, client.clone()).await;
    assert_eq!(old.leaf, leaf_der(&a.cert_pem));
    assert!(old.review_allowed().await);

    volume.rotate(&b.cert_pem, &b.key_pem);
    let mut new = wait_for_leaf(server.addr, client.clone(), &leaf_der(&b.cert_pem)).await;
    assert!(new.review_allowed().await);
    // The connection opened before the rotation still answers, on the same session.
    for _ in 0..3 {
        assert!(old.review_allowed().await);
    }
    wait_for_metric(
        &server.metrics,
        r#"captf_webhook_certificate_reloads_total{result="reloaded"} 1"#,
    )
    .await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_broken_new_pair_is_rejected_and_the_old_one_kept_until_a_good_pair_arrives() {
    let (a, b) = (certs("CA A"), certs("CA B"));
    let mut volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let server = start(test_config(volume.files())).await;
    let client = client_config(&[&a.ca_pem, &b.ca_pem], BOTH);

    // B's certificate with A's key: parses, but is not a pair.
    volume.rotate(&b.cert_pem, &a.key_pem);
    wait_for_metric(
        &server.metrics,
        r#"captf_webhook_certificate_reloads_total{result="rejected"} 1"#,
    )
    .await;
    let mut c = connect(server.addr, client.clone()).await;
    assert_eq!(c.leaf, leaf_der(&a.cert_pem));
    assert!(c.review_allowed().await);

    // Garbage.
    volume.rotate(
        "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n",
        "not a key",
    );
    wait_for_metric(
        &server.metrics,
        r#"captf_webhook_certificate_reloads_total{result="rejected"} 2"#,
    )
    .await;
    assert_eq!(connect(server.addr, client.clone()).await.leaf, leaf_der(&a.cert_pem));

    // A good pair is taken.
    volume.rotate(&b.cert_pem, &b.key_pem);
    wait_for_leaf(server.addr, client, &leaf_der(&b.cert_pem)).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_key_missing_mid_rotation_keeps_the_old_pair() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let server = start(test_config(volume.files())).await;
    std::fs::remove_file(volume.dir.path().join("tls.key")).unwrap();
    // The reloader has seen the missing key (and kept the old pair) before the client connects.
    wait_for_metric(
        &server.metrics,
        r#"captf_webhook_certificate_reloads_total{result="unreadable"} 1"#,
    )
    .await;
    let mut c = connect(server.addr, client_config(&[&a.ca_pem], BOTH)).await;
    assert_eq!(c.leaf, leaf_der(&a.cert_pem));
    assert!(c.review_allowed().await);
    server.shutdown().await;
}

#[tokio::test]
async fn tls_1_2_and_tls_1_3_clients_both_connect() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let server = start(test_config(volume.files())).await;
    for (version, want) in [
        (&rustls::version::TLS12, rustls::ProtocolVersion::TLSv1_2),
        (&rustls::version::TLS13, rustls::ProtocolVersion::TLSv1_3),
    ] {
        let mut c = connect(server.addr, client_config(&[&a.ca_pem], &[version])).await;
        assert_eq!(c.version, want);
        assert!(c.review_allowed().await);
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_full_chain_with_an_intermediate_is_served_and_verifies_against_the_root() {
    let mut root_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    root_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let root_key = KeyPair::generate().unwrap();
    let root = root_params.self_signed(&root_key).unwrap();
    let root_issuer = Issuer::new(root_params, root_key);
    let mut mid_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    mid_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    let mid_key = KeyPair::generate().unwrap();
    let mid = mid_params.signed_by(&mid_key, &root_issuer).unwrap();
    let mid_issuer = Issuer::new(mid_params, mid_key);
    let leaf_params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = leaf_params.signed_by(&leaf_key, &mid_issuer).unwrap();

    let chain = format!("{}{}", leaf.pem(), mid.pem());
    let volume = SecretVolume::new(&chain, &leaf_key.serialize_pem());
    let server = start(test_config(volume.files())).await;
    let tls = tls_connect(server.addr, client_config(&[&root.pem()], BOTH)).await;
    let presented = tls.get_ref().1.peer_certificates().unwrap().to_vec();
    assert_eq!(presented, vec![leaf.der().clone(), mid.der().clone()]);
    server.shutdown().await;
}

async fn read_until_closed(stream: &mut (impl AsyncReadExt + Unpin), within: Duration) -> Vec<u8> {
    let mut out = Vec::new();
    tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the server never closed the connection");
    out
}

#[tokio::test]
async fn a_client_that_never_starts_the_handshake_is_dropped() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let server = start(test_config(volume.files())).await;
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    read_until_closed(&mut tcp, Duration::from_secs(3)).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let mut config = test_config(volume.files());
    // Only the header timeout can end this connection: no other timer is due while the test
    // waits, so a server that let it stay open would fail the wait below.
    config.idle_timeout = Duration::from_secs(600);
    config.body_timeout = Duration::from_secs(600);
    config.max_connection_age = Duration::from_secs(600);
    let server = start(config).await;
    let mut tls = tls_connect(server.addr, client_config(&[&a.ca_pem], BOTH)).await;
    tls.write_all(b"POST /validate HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    let got = read_until_closed(&mut tls, Duration::from_secs(60)).await;
    // Closed without an answer: a request whose headers never end is never handled.
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_that_never_finishes_its_body_gets_408() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let server = start(test_config(volume.files())).await;
    let mut tls = tls_connect(server.addr, client_config(&[&a.ca_pem], BOTH)).await;
    tls.write_all(
        b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"kind\":",
    )
    .await
    .unwrap();
    let got = read_until_closed(&mut tls, Duration::from_secs(3)).await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    server.shutdown().await;
}

/// Read exactly `n` bytes, or fail after `within`.
async fn read_exactly(stream: &mut (impl AsyncReadExt + Unpin), n: usize, within: Duration) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    tokio::time::timeout(within, stream.read_exact(&mut buf))
        .await
        .unwrap_or_else(|_| panic!("fewer than {n} bytes within {within:?}"))
        .unwrap();
    buf
}

#[tokio::test]
async fn shutdown_lets_the_request_in_flight_finish_then_refuses_connections() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let mut config = test_config(volume.files());
    config.body_timeout = Duration::from_secs(5);
    let server = start(config).await;
    let addr = server.addr;
    let body = serde_json::to_vec(&common::fixture("cluster-create-accepted")).unwrap();
    let mut tls = tls_connect(addr, client_config(&[&a.ca_pem], BOTH)).await;
    // `Expect: 100-continue`: the server answers `100 Continue` once the handler asks for the
    // body, which makes "the request is in flight" something the client sees.
    let head = format!(
        "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(&body[..10]).await.unwrap();
    const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";
    let got = read_exactly(&mut tls, CONTINUE.len(), Duration::from_secs(5)).await;
    assert_eq!(got, CONTINUE, "{}", String::from_utf8_lossy(&got));

    // The shutdown has begun (the listener is closed) and the connection has taken it (its
    // graceful close is counted) while the body is still incomplete.
    let metrics = server.metrics.clone();
    let shutdown = tokio::spawn(server.shutdown());
    wait_until_refused(addr).await;
    wait_for_metric(
        &metrics,
        r#"captf_webhook_connections_closed_total{reason="shutdown"} 1"#,
    )
    .await;
    assert!(
        !shutdown.is_finished(),
        "the shutdown did not wait for the request in flight"
    );
    tls.write_all(&body[10..]).await.unwrap();
    let got = read_until_closed(&mut tls, Duration::from_secs(5)).await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains(r#""allowed":true"#), "{text}");
    // Answered while draining: the connection is not kept alive.
    assert!(text.to_ascii_lowercase().contains("connection: close"), "{text}");
    shutdown.await.unwrap();
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "still accepting after shutdown"
    );
}

#[tokio::test]
async fn metrics_are_served_as_plain_http_on_their_own_port() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let server = start(test_config(volume.files())).await;
    let mut c = connect(server.addr, client_config(&[&a.ca_pem], BOTH)).await;
    assert!(c.review_allowed().await);
    let mut tcp = TcpStream::connect(server.metrics_addr).await.unwrap();
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let text = String::from_utf8(read_until_closed(&mut tcp, Duration::from_secs(3)).await).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.contains(r#"captf_webhook_requests_total{route="validate",kind="TerraformCluster",operation="CREATE",result="allowed"} 1"#),
        "{text}"
    );
    server.shutdown().await;
}

#[test]
fn the_binary_prints_its_bound_address_serves_and_exits_cleanly_on_sigterm() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let a = certs("CA A");
    let files = devcerts::write(dir.path(), &a).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_captf-webhook"))
        .args([
            "--addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ])
        .arg("--tls-cert-file")
        .arg(&files.cert)
        .arg("--tls-key-file")
        .arg(&files.key)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let addr: SocketAddr = line
        .trim()
        .strip_prefix("listening on https://")
        .unwrap()
        .parse()
        .unwrap();

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = connect(addr, client_config(&[&a.ca_pem], BOTH)).await;
        let req = hyper::Request::get(HEALTHZ_PATH)
            .header("host", "localhost")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = c.sender.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert!(c.review_allowed().await);
    });

    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "{exit:?}");
}

#[test]
fn dev_certs_subcommand_writes_a_usable_pair() {
    let dir = tempfile::tempdir().unwrap();
    let out: PathBuf = dir.path().join("dev");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_captf-webhook"))
        .arg("dev-certs")
        .arg("--out-dir")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let cert = std::fs::read(out.join("tls.crt")).unwrap();
    let key = std::fs::read(out.join("tls.key")).unwrap();
    captf_webhook::tls::certified_key_from_pem(&cert, &key).unwrap();
    assert!(out.join("ca.crt").exists());
}

#[tokio::test]
async fn a_client_that_completes_the_handshake_and_sends_nothing_is_disconnected() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let mut config = test_config(volume.files());
    config.idle_timeout = Duration::from_millis(300);
    let server = start(config).await;
    let mut tls = tls_connect(server.addr, client_config(&[&a.ca_pem], BOTH)).await;
    read_until_closed(&mut tls, Duration::from_secs(3)).await;
    server.shutdown().await;
}

#[tokio::test]
async fn after_the_signal_readyz_fails_but_connections_are_accepted_for_the_shutdown_delay() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let mut config = test_config(volume.files());
    config.shutdown_delay = Duration::from_millis(600);
    let server = start(config).await;
    let (addr, client) = (server.addr, client_config(&[&a.ca_pem], BOTH));
    let metrics_addr = server.metrics_addr;
    let shutdown = tokio::spawn(server.shutdown());
    // The signal has been taken (readiness fails) before the new connection below.
    wait_until_unready(metrics_addr).await;
    let mut c = connect(addr, client.clone()).await;
    let req = hyper::Request::get(captf_webhook::READYZ_PATH)
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let answer = c.sender.send_request(req).await.unwrap();
    assert_eq!(answer.status(), 503);
    // Each connection is retired with its next answer, so the client opens a new one rather than
    // sending on one the server is about to close.
    assert_eq!(
        answer.headers().get("connection").map(|v| v.to_str().unwrap()),
        Some("close")
    );
    drop(c);
    let mut c = connect(addr, client.clone()).await;
    assert!(
        c.review_allowed().await,
        "still answering reviews while endpoints catch up"
    );
    drop(c);
    shutdown.await.unwrap();
    // The port is free again, so another process on the machine may have taken it: what must
    // hold is that nothing serves this webhook's certificate there any more.
    let after = tokio::time::timeout(Duration::from_secs(5), async {
        let tcp = TcpStream::connect(addr).await?;
        TlsConnector::from(client)
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
    })
    .await;
    assert!(
        !matches!(after, Ok(Ok(_))),
        "the webhook still served after its shutdown"
    );
}

#[tokio::test]
async fn an_http2_client_negotiated_by_alpn_is_served() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let server = start(test_config(volume.files())).await;
    let mut config = (*client_config(&[&a.ca_pem], BOTH)).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tls = tls_connect(server.addr, Arc::new(config)).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let body = serde_json::to_vec(&common::fixture("machine-update-rejected")).unwrap();
    for _ in 0..3 {
        let req = hyper::Request::post(format!("https://localhost{VALIDATE_PATH}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.clone())))
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        let v: serde_json::Value =
            serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(v["response"]["allowed"], false);
        assert_eq!(v["response"]["status"]["code"], 422);
    }
    server.shutdown().await;
}

// ---- connection limits: counted in requests, not bytes ----

/// Write `byte` every `every` until the server closes the connection (or `max` bytes are sent);
/// how many bytes went out before the server closed it.
async fn trickle(tls: TlsStream<TcpStream>, bytes: &[u8], every: Duration) -> usize {
    let (mut rd, mut wr) = tokio::io::split(tls);
    let closed = tokio::spawn(async move {
        let mut buf = [0u8; 1024];
        while let Ok(n) = rd.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    });
    let mut sent = 0;
    for b in bytes {
        if closed.is_finished() || wr.write_all(&[*b]).await.is_err() || wr.flush().await.is_err() {
            break;
        }
        sent += 1;
        tokio::time::sleep(every).await;
    }
    sent
}

#[tokio::test]
async fn a_trickle_of_bytes_does_not_extend_the_header_timeout() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let mut config = test_config(volume.files());
    config.header_read_timeout = Duration::from_millis(300);
    config.idle_timeout = Duration::from_secs(60);
    let server = start(config).await;
    let tls = tls_connect(server.addr, client_config(&[&a.ca_pem], BOTH)).await;
    // 200 header bytes, one every 25 ms: 5 s of trickle against a 300 ms header timeout.
    let header = "POST /validate HTTP/1.1\r\nHost: localhost\r\nX-Slow: ".to_string() + &"a".repeat(150);
    let sent = trickle(tls, header.as_bytes(), Duration::from_millis(25)).await;
    assert!(sent < header.len(), "the whole trickle was accepted");
    server.shutdown().await;
}

#[tokio::test]
async fn a_trickle_of_bytes_after_a_request_does_not_extend_the_idle_timeout() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let mut config = test_config(volume.files());
    config.header_read_timeout = Duration::from_secs(60);
    config.idle_timeout = Duration::from_millis(300);
    let server = start(config).await;
    let mut tls = tls_connect(server.addr, client_config(&[&a.ca_pem], BOTH)).await;
    tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let n = tls.read(&mut buf).await.unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    let header = "POST /validate HTTP/1.1\r\nHost: localhost\r\nX-Slow: ".to_string() + &"a".repeat(150);
    let sent = trickle(tls, header.as_bytes(), Duration::from_millis(25)).await;
    assert!(sent < header.len(), "the whole trickle was accepted");
    server.shutdown().await;
}

#[tokio::test]
async fn http2_pings_do_not_keep_an_idle_connection_open() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let mut config = test_config(volume.files());
    config.idle_timeout = Duration::from_millis(300);
    let server = start(config).await;
    let mut client = (*client_config(&[&a.ca_pem], BOTH)).clone();
    client.alpn_protocols = vec![b"h2".to_vec()];
    let tls = tls_connect(server.addr, Arc::new(client)).await;
    let (mut sender, conn) = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Duration::from_millis(20))
        .keep_alive_timeout(Duration::from_secs(5))
        .keep_alive_while_idle(true)
        .handshake(TokioIo::new(tls))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let req = hyper::Request::get(format!("https://localhost{HEALTHZ_PATH}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(sender.send_request(req).await.unwrap().status(), 200);
    // PINGs every 20 ms from here on; the server still ends the connection once it is idle.
    tokio::time::timeout(Duration::from_secs(10), conn)
        .await
        .expect("PINGs kept the idle connection open")
        .unwrap()
        .ok();
    server.shutdown().await;
}

#[tokio::test]
async fn a_connection_is_closed_after_its_maximum_number_of_requests() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let mut config = test_config(volume.files());
    config.max_requests_per_connection = 3;
    let server = start(config).await;
    let mut tls = tls_connect(server.addr, client_config(&[&a.ca_pem], BOTH)).await;
    let mut answers = Vec::new();
    for _ in 0..10 {
        if tls
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .is_err()
        {
            break;
        }
        let mut buf = [0u8; 512];
        match tls.read(&mut buf).await {
            Ok(n) if n > 0 => answers.push(String::from_utf8_lossy(&buf[..n]).to_lowercase()),
            _ => break,
        }
    }
    assert_eq!(answers.len(), 3);
    // The last answer tells the client the connection ends, so it never sends on it again.
    assert!(!answers[1].contains("connection: close"), "{}", answers[1]);
    assert!(answers[2].contains("connection: close"), "{}", answers[2]);
    server.shutdown().await;
}

#[tokio::test]
async fn an_idle_connection_past_its_age_is_kept_for_its_next_request_whose_answer_ends_it() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let mut config = test_config(volume.files());
    config.max_connection_age = Duration::from_millis(200);
    let server = start(config).await;
    let mut tls = tls_connect(server.addr, client_config(&[&a.ca_pem], BOTH)).await;
    let get = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let mut buf = [0u8; 512];
    tls.write_all(get).await.unwrap();
    let n = tls.read(&mut buf).await.unwrap();
    assert!(
        !String::from_utf8_lossy(&buf[..n])
            .to_lowercase()
            .contains("connection: close")
    );
    // Idle well past its age: still open, and the next request is answered, saying it ends.
    tokio::time::sleep(Duration::from_millis(600)).await;
    tls.write_all(get).await.unwrap();
    let n = tls.read(&mut buf).await.unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]).to_lowercase();
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    // Then it is closed.
    let closed = tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf))
        .await
        .unwrap();
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_busy_connection_is_closed_at_its_maximum_age() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let mut config = test_config(volume.files());
    config.max_connection_age = Duration::from_millis(300);
    let server = start(config).await;
    let mut c = connect(server.addr, client_config(&[&a.ca_pem], BOTH)).await;
    let mut answered = 0;
    // A request every 10 ms for up to 10 s: the connection must end long before.
    for _ in 0..1000 {
        let req = hyper::Request::get(HEALTHZ_PATH)
            .header("host", "localhost")
            .body(Full::new(Bytes::new()))
            .unwrap();
        if c.sender.ready().await.is_err() {
            break;
        }
        match c.sender.send_request(req).await {
            Ok(_) => answered += 1,
            Err(_) => break,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(answered > 0 && answered < 1000, "{answered} requests on one connection");
    server.shutdown().await;
}

#[tokio::test]
async fn connections_past_the_cap_are_refused_while_none_is_idle_until_one_closes() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let mut config = test_config(volume.files());
    config.max_connections = 2;
    let server = start(config).await;
    let client = client_config(&[&a.ca_pem], BOTH);
    // Two connections, each with a request in flight (its body still to come): neither is idle,
    // so neither may be closed to make room.
    let head = format!(
        "POST {VALIDATE_PATH} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n"
    );
    let mut busy = vec![];
    for _ in 0..2 {
        let mut tls = tls_connect(server.addr, client.clone()).await;
        tls.write_all(head.as_bytes()).await.unwrap();
        tls.flush().await.unwrap();
        // `100 Continue` comes once the handler reads the body: the request is in flight.
        let mut got = vec![];
        while !String::from_utf8_lossy(&got).contains("100 Continue") {
            let mut buf = [0u8; 256];
            let n = tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf))
                .await
                .expect("100 Continue within 5 s")
                .unwrap();
            assert!(n > 0, "closed before 100 Continue: {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        tls.write_all(b"{").await.unwrap();
        busy.push(tls);
    }
    // The third is closed right after accept: its handshake fails.
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let third = TlsConnector::from(client.clone())
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await;
    assert!(third.is_err(), "a third connection was served");
    wait_for_metric(&server.metrics, "captf_webhook_connections_refused_total 1").await;
    drop(busy.remove(0));
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.metrics.connections_open() > 1 {
        assert!(
            Instant::now() < deadline,
            "the server still counted {} connections open 5 s after the first closed",
            server.metrics.connections_open()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut fourth = connect(server.addr, client).await;
    assert!(fourth.review_allowed().await);
    server.shutdown().await;
}

// ---- 413 that the client reads ----

async fn read_response_head(tls: &mut TlsStream<TcpStream>) -> String {
    let got = read_until_closed(tls, Duration::from_secs(5)).await;
    String::from_utf8_lossy(&got).to_string()
}

#[tokio::test]
async fn a_client_streaming_an_over_limit_body_reads_the_413() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let mut config = test_config(volume.files());
    config.body_timeout = Duration::from_secs(5);
    config.limits.max_body_bytes = 64 * 1024;
    let server = start(config).await;
    let body = vec![b' '; 100 * 1024];
    for chunked in [false, true] {
        let mut tls = tls_connect(server.addr, client_config(&[&a.ca_pem], BOTH)).await;
        let head = if chunked {
            "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".to_string()
        } else {
            format!(
                "POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
        };
        tls.write_all(head.as_bytes()).await.unwrap();
        for chunk in body.chunks(8 * 1024) {
            if chunked {
                tls.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                    .await
                    .unwrap();
                tls.write_all(chunk).await.unwrap();
                tls.write_all(b"\r\n").await.unwrap();
            } else {
                tls.write_all(chunk).await.unwrap();
            }
        }
        if chunked {
            tls.write_all(b"0\r\n\r\n").await.unwrap();
        }
        let text = read_response_head(&mut tls).await;
        assert!(text.starts_with("HTTP/1.1 413"), "chunked={chunked}: {text:?}");
        assert!(text.contains("larger than 65536 bytes"), "{text}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_waiting_for_100_continue_gets_413_before_sending_the_body() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let mut config = test_config(volume.files());
    config.limits.max_body_bytes = 64 * 1024;
    let server = start(config).await;
    let mut tls = tls_connect(server.addr, client_config(&[&a.ca_pem], BOTH)).await;
    tls.write_all(
        b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 10000000\r\nExpect: 100-continue\r\n\r\n",
    )
    .await
    .unwrap();
    let text = read_response_head(&mut tls).await;
    assert!(text.starts_with("HTTP/1.1 413"), "{text:?}");
    assert!(!text.contains("100 Continue"), "{text}");
    server.shutdown().await;
}

// ---- client certificates: only the API server gets in ----

/// A CA and a client certificate it signed (clientAuth), as PEM: (ca, cert, key).
fn client_ca_and_cert(cn: &str) -> (String, String, String) {
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
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(leaf_der(ca_pem)).unwrap();
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let mut c = rustls::ClientConfig::builder_with_provider(captf_webhook::tls::provider())
        .with_protocol_versions(BOTH)
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(c)
}

/// Whether a review over a fresh connection with `config` is answered (the handshake and a
/// request both succeed).
async fn answered_with(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> bool {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let Ok(tls) = TlsConnector::from(config)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
    else {
        return false;
    };
    let Ok((mut sender, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await else {
        return false;
    };
    tokio::spawn(conn);
    let body = serde_json::to_vec(&common::fixture("cluster-create-accepted")).unwrap();
    let req = hyper::Request::post(VALIDATE_PATH)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    // TLS 1.3 reports a refused client certificate after the handshake, on the first read.
    matches!(sender.send_request(req).await, Ok(resp) if resp.status() == 200)
}

#[tokio::test]
async fn with_a_client_ca_only_clients_holding_a_certificate_it_signed_are_served() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let (api_ca, api_cert, api_key) = client_ca_and_cert("kube-apiserver");
    let (_, other_cert, other_key) = client_ca_and_cert("some pod");
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, &api_ca).unwrap();
    let mut config = test_config(volume.files());
    config.client_ca_file = Some(ca_file);
    let server = start(config).await;

    assert!(answered_with(server.addr, client_config_with_cert(&a.ca_pem, &api_cert, &api_key)).await);
    assert!(
        !answered_with(server.addr, client_config(&[&a.ca_pem], BOTH)).await,
        "a client without a certificate is refused"
    );
    assert!(
        !answered_with(server.addr, client_config_with_cert(&a.ca_pem, &other_cert, &other_key)).await,
        "a client whose certificate another CA signed is refused"
    );
    // The kubelet presents no certificate: its probes go to the plain metrics port.
    for path in [captf_webhook::HEALTHZ_PATH, captf_webhook::READYZ_PATH] {
        let mut tcp = TcpStream::connect(server.metrics_addr).await.unwrap();
        tcp.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let text = String::from_utf8(read_until_closed(&mut tcp, Duration::from_secs(3)).await).unwrap();
        assert!(text.starts_with("HTTP/1.1 200"), "{path}: {text}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn without_a_client_ca_a_client_without_a_certificate_is_served() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let server = start(test_config(volume.files())).await;
    assert!(answered_with(server.addr, client_config(&[&a.ca_pem], BOTH)).await);
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_ca_file_without_a_certificate_fails_startup_with_a_reason() {
    let a = certs("CA A");
    let volume = SecretVolume::new(&a.cert_pem, &a.key_pem);
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, "not a certificate\n").unwrap();
    let mut config = test_config(volume.files());
    config.client_ca_file = Some(ca_file);
    let err = captf_webhook::bind(config).await.unwrap_err().to_string();
    assert!(err.contains("client CA bundle holds no usable CA certificate"), "{err}");
}

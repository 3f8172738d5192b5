//! AdmissionReviews per second and latency percentiles over TLS keep-alive (HTTP/1.1), for
//! captf-webhook and, in the same run, a bare axum + rustls endpoint that answers a constant
//! body (the ceiling: TLS, HTTP and axum with no admission work). Also the p99 at a paced
//! 1,000 reviews/s and the RSS of the real binary under load. docs/architecture.md has the targets.
//!
//! `cargo bench -p captf-webhook --bench throughput` (env: BENCH_SECS, BENCH_CONNS).
//! Prints figures; asserts nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use captf_webhook::tls::{CertFiles, provider};
use captf_webhook::{Config, MUTATE_PATH, VALIDATE_PATH};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// The binary's allocator, so the in-process servers (bare and webhook alike) run as it does
/// (remove these two lines to compare with the system allocator).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.json"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    serde_json::to_vec(&v).unwrap()
}

/// The bare endpoint: rustls + hyper-util + axum, a handler that reads the body and returns a
/// constant allowed review.
async fn bare_server(cert_pem: &str, key_pem: &str, app: Option<Router>) -> SocketAddr {
    let chain: Vec<_> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    const ANSWER: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"x","allowed":true,"status":{}}}"#;
    let app = app.unwrap_or_else(|| {
        Router::new().route(
            VALIDATE_PATH,
            post(|body: Bytes| async move {
                std::hint::black_box(body);
                // BENCH_BARE_SPIN_US: calibration, a bare handler that burns this much CPU per
                // request (how throughput falls with handler cost alone, TLS and HTTP unchanged).
                let spin = Duration::from_micros(env_num("BENCH_BARE_SPIN_US", 0));
                let start = Instant::now();
                while start.elapsed() < spin {
                    std::hint::spin_loop();
                }
                ([(axum::http::header::CONTENT_TYPE, "application/json")], ANSWER)
            }),
        )
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let service = TowerToHyperService::new(app);
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let service = service.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                }
            });
        }
    });
    addr
}

fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let mut c = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(c)
}

async fn connection(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let stream = TlsConnector::from(tls)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

/// One keep-alive connection that opens a new one when the server ends it, as the API server's
/// client does: the webhook closes a connection after `--max-requests-per-connection` requests
/// (and at its maximum age), saying `Connection: close` on the last answer.
struct Conn {
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    closing: bool,
}

impl Conn {
    async fn open(addr: SocketAddr, tls: Arc<rustls::ClientConfig>) -> Conn {
        let sender = connection(addr, tls.clone()).await;
        Conn {
            addr,
            tls,
            sender,
            closing: false,
        }
    }

    /// One review; the time from sending to the whole answer (a reconnect is not counted). A
    /// connection the server closed between two requests (its keep-alive limits) is opened again
    /// and the review sent on the new one.
    async fn one(&mut self, path: &str, body: &Bytes) -> Duration {
        let mut tries = 0;
        let (start, resp) = loop {
            if self.closing || self.sender.is_closed() {
                self.sender = connection(self.addr, self.tls.clone()).await;
                self.closing = false;
            }
            let req = hyper::Request::post(path)
                .header("host", "localhost")
                .header("content-type", "application/json")
                .body(Full::new(body.clone()))
                .unwrap();
            let start = Instant::now();
            let sent = match self.sender.ready().await {
                Ok(()) => self.sender.send_request(req).await,
                Err(e) => Err(e),
            };
            match sent {
                Ok(resp) => break (start, resp),
                Err(e) if tries < 3 && (e.is_incomplete_message() || e.is_closed() || e.is_canceled()) => {
                    tries += 1;
                    self.closing = true;
                }
                Err(e) => panic!("review failed: {e}"),
            }
        };
        assert_eq!(resp.status(), 200);
        self.closing = resp
            .headers()
            .get(hyper::header::CONNECTION)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        std::hint::black_box(bytes);
        start.elapsed()
    }
}

struct Figures {
    requests: usize,
    per_sec: f64,
    p50: Duration,
    p99: Duration,
}

fn figures(mut lat: Vec<Duration>, elapsed: Duration) -> Figures {
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    Figures {
        requests: lat.len(),
        per_sec: lat.len() as f64 / elapsed.as_secs_f64(),
        p50: pct(0.50),
        p99: pct(0.99),
    }
}

/// `conns` keep-alive connections sending back to back for `secs`.
async fn saturate(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    path: &'static str,
    body: Bytes,
    conns: u64,
    secs: u64,
) -> (Vec<Duration>, Duration) {
    // Warm up.
    let mut s = Conn::open(addr, tls.clone()).await;
    for _ in 0..200 {
        s.one(path, &body).await;
    }
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (tls, body) = (tls.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = Conn::open(addr, tls).await;
            let mut lat = Vec::with_capacity(100_000);
            while Instant::now() < end {
                lat.push(s.one(path, &body).await);
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    (all, start.elapsed())
}

/// User + system CPU seconds of this process so far.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or_default();
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the command name; 100 ticks/s.
    (ticks(11) + ticks(12)) / 100.0
}

/// `rate` reviews/s spread over `conns` connections, for `secs`.
async fn paced(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    path: &'static str,
    body: Bytes,
    rate: u64,
    conns: u64,
    secs: u64,
) -> Figures {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..conns {
        let (tls, body) = (tls.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = Conn::open(addr, tls).await;
            let period = Duration::from_secs_f64(conns as f64 / rate as f64);
            let first = tokio::time::Instant::now() + period.mul_f64(i as f64 / conns as f64);
            let mut ticker = tokio::time::interval_at(first, period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let n = rate * secs / conns;
            let mut lat = Vec::with_capacity(n as usize);
            for _ in 0..n {
                ticker.tick().await;
                lat.push(s.one(path, &body).await);
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    figures(all, start.elapsed())
}

fn print(name: &str, f: &Figures) {
    println!(
        "{name:<34} {:>9} req  {:>9.0} req/s  p50 {:>7.0} µs  p99 {:>7.0} µs",
        f.requests,
        f.per_sec,
        f.p50.as_secs_f64() * 1e6,
        f.p99.as_secs_f64() * 1e6
    );
}

fn main() {
    let secs = env_num("BENCH_SECS", 5);
    let conns = env_num("BENCH_CONNS", 16);
    let certs = captf_webhook::devcerts::generate("bench CA", &["localhost".into()], &[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = captf_webhook::devcerts::write(dir.path(), &certs).unwrap();
    let validate_body = Bytes::from(fixture("cluster-create-accepted"));
    let tls = client_config(&certs.ca_pem);
    println!(
        "captf-webhook throughput: {} CPUs, {conns} keep-alive HTTP/1.1 connections over TLS, {secs}s per phase, body {} bytes",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        validate_body.len()
    );

    // BENCH_ONLY=handler: only the pure handler, BENCH_N times per route (for a profiler such as
    // `valgrind --tool=callgrind`).
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "handler") {
        let n = env_num("BENCH_N", 1000);
        for route in [
            captf_webhook::admission::Route::Validate,
            captf_webhook::admission::Route::Mutate,
        ] {
            for _ in 0..n {
                std::hint::black_box(captf_webhook::admission::review(route, &validate_body).unwrap());
            }
        }
        return;
    }
    // BENCH_ONLY=router: the router (no TLS, no HTTP parsing) BENCH_N times per route.
    if std::env::var("BENCH_ONLY").is_ok_and(|v| v == "router") {
        let n = env_num("BENCH_N", 1000);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let app = captf_webhook::router(captf_webhook::AppState::new(Arc::new(
            captf_webhook::metrics::Metrics::new(),
        )));
        rt.block_on(async {
            for path in [VALIDATE_PATH, MUTATE_PATH] {
                for _ in 0..n {
                    let req = hyper::Request::post(path)
                        .header("content-type", "application/json")
                        .body(axum::body::Body::from(validate_body.clone()))
                        .unwrap();
                    let resp = tower::ServiceExt::oneshot(app.clone(), req).await.unwrap();
                    std::hint::black_box(resp.into_body().collect().await.unwrap().to_bytes());
                }
            }
        });
        return;
    }

    let only_phase = std::env::var("BENCH_PHASE").ok().and_then(|v| v.parse::<u64>().ok());
    // The pure handler alone, one thread: what one review costs without TLS and HTTP.
    for (name, route) in [
        ("validate", captf_webhook::admission::Route::Validate),
        ("mutate", captf_webhook::admission::Route::Mutate),
    ]
    .into_iter()
    .filter(|_| only_phase.is_none())
    {
        let n = 20_000;
        let start = Instant::now();
        for _ in 0..n {
            std::hint::black_box(captf_webhook::admission::review(route, &validate_body).unwrap());
        }
        println!(
            "admission::review {name:<8} (no TLS/HTTP)  {:>7.1} µs/review",
            start.elapsed().as_secs_f64() * 1e6 / n as f64
        );
    }

    if std::env::var("BENCH_PARTS").is_ok() {
        let t = |name: &str, f: &mut dyn FnMut()| {
            let n = 20_000;
            let start = Instant::now();
            for _ in 0..n {
                f();
            }
            println!(
                "  part {name:<28} {:>7.1} µs",
                start.elapsed().as_secs_f64() * 1e6 / n as f64
            );
        };
        let v: serde_json::Value = serde_json::from_slice(&validate_body).unwrap();
        let obj = v["request"]["object"].clone();
        t("from_slice Value", &mut || {
            std::hint::black_box(serde_json::from_slice::<serde_json::Value>(&validate_body).unwrap());
        });
        t("review from_value", &mut || {
            let mut v = v.clone();
            v["request"].as_object_mut().unwrap().remove("object");
            std::hint::black_box(
                serde_json::from_value::<kube::core::admission::AdmissionReview<kube::core::DynamicObject>>(v).unwrap(),
            );
        });
        t("parse_object", &mut || {
            std::hint::black_box(captf_shared::validation::parse_object("TerraformCluster", &obj).unwrap());
        });
        let parsed = captf_shared::validation::parse_object("TerraformCluster", &obj).unwrap();
        t("validate_create", &mut || {
            std::hint::black_box(captf_shared::validation::validate_create(&parsed));
        });
        t("defaults_patch", &mut || {
            std::hint::black_box(captf_webhook::patch::defaults_patch(&obj["spec"], parsed.clone()));
        });
        t("to_value", &mut || {
            std::hint::black_box(parsed.to_value());
        });
    }

    // Servers and clients on separate runtimes (the machine's cores are shared either way).
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (webhook_addr, bare_addr, router_on_bare_addr) = server_rt.block_on(async {
        let mut config = Config::new(
            "127.0.0.1:0".parse().unwrap(),
            CertFiles {
                cert: files.cert.clone(),
                key: files.key.clone(),
            },
        );
        config.metrics_addr = None;
        let bound = captf_webhook::bind(config).await.unwrap();
        let addr = bound.local_addr();
        tokio::spawn(bound.run(std::future::pending()));
        (
            addr,
            bare_server(&certs.cert_pem, &certs.key_pem, None).await,
            bare_server(
                &certs.cert_pem,
                &certs.key_pem,
                Some(captf_webhook::router(captf_webhook::AppState::new(Arc::new(
                    captf_webhook::metrics::Metrics::new(),
                )))),
            )
            .await,
        )
    });

    // Saturated phases alternate (bare, validate, mutate) for BENCH_ROUNDS rounds, so background
    // load on the machine hits each alike; CPU per request is this process's (client + server).
    let rounds = env_num("BENCH_ROUNDS", 3);
    // BENCH_PHASE=0..3: only that saturated phase (bare, validate, mutate, router in the bare loop),
    // for a profiler such as `perf record`; prints its figures and stops.
    let mut acc: [(Vec<Duration>, Duration, f64); 4] = Default::default();
    for _ in 0..rounds {
        for (i, (addr, path)) in [
            (bare_addr, VALIDATE_PATH),
            (webhook_addr, VALIDATE_PATH),
            (webhook_addr, MUTATE_PATH),
            (router_on_bare_addr, VALIDATE_PATH),
        ]
        .into_iter()
        .enumerate()
        {
            if only_phase.is_some_and(|p| p != i as u64) {
                continue;
            }
            let cpu0 = cpu_secs();
            let (lat, elapsed) =
                client_rt.block_on(saturate(addr, tls.clone(), path, validate_body.clone(), conns, secs));
            acc[i].2 += cpu_secs() - cpu0;
            acc[i].1 += elapsed;
            acc[i].0.extend(lat);
        }
    }
    if let Some(p) = only_phase {
        let (lat, elapsed, cpu) = std::mem::take(&mut acc[p.min(3) as usize]);
        let n = lat.len().max(1);
        print(&format!("phase {p}"), &figures(lat, elapsed));
        println!("CPU per request (client+server): {:.0} µs", cpu * 1e6 / n as f64);
        return;
    }
    let [bare, validate, mutate, router_on_bare] = acc.map(|(lat, elapsed, cpu)| {
        let n = lat.len();
        (figures(lat, elapsed), cpu * 1e6 / n as f64)
    });
    let (paced_webhook, paced_bare) = client_rt.block_on(async {
        let w = paced(
            webhook_addr,
            tls.clone(),
            VALIDATE_PATH,
            validate_body.clone(),
            1000,
            4,
            secs,
        )
        .await;
        let b = paced(
            bare_addr,
            tls.clone(),
            VALIDATE_PATH,
            validate_body.clone(),
            1000,
            4,
            secs,
        )
        .await;
        (w, b)
    });
    print("bare axum+rustls (saturated)", &bare.0);
    print("captf-webhook /validate (saturated)", &validate.0);
    print("captf-webhook /mutate (saturated)", &mutate.0);
    print("webhook router in the bare loop", &router_on_bare.0);
    print("bare axum+rustls @ 1000/s", &paced_bare);
    print("captf-webhook /validate @ 1000/s", &paced_webhook);
    println!(
        "CPU per request (client+server): bare {:.0} µs, validate {:.0} µs, mutate {:.0} µs, router in bare loop {:.0} µs",
        bare.1, validate.1, mutate.1, router_on_bare.1
    );
    println!(
        "ratio webhook/bare throughput: validate {:.1}%  mutate {:.1}%",
        100.0 * validate.0.per_sec / bare.0.per_sec,
        100.0 * mutate.0.per_sec / bare.0.per_sec
    );
    drop(server_rt);

    // RSS of the real binary (release when run by `cargo bench`) under the saturating load.
    let (mut child, addr) = common::spawn_webhook(Path::new(env!("CARGO_BIN_EXE_captf-webhook")), &files);
    let idle_rss = common::status_kib(child.id(), "VmRSS:");
    let (lat, elapsed) = client_rt.block_on(saturate(
        addr,
        tls.clone(),
        VALIDATE_PATH,
        validate_body.clone(),
        conns,
        secs.min(3),
    ));
    let (rss, hwm) = (
        common::status_kib(child.id(), "VmRSS:"),
        common::status_kib(child.id(), "VmHWM:"),
    );
    let loaded = figures(lat, elapsed);
    print("captf-webhook binary /validate", &loaded);
    println!(
        "binary RSS: idle {} KiB, under load {} KiB, peak (VmHWM) {} KiB",
        idle_rss.unwrap_or(0),
        rss.unwrap_or(0),
        hwm.unwrap_or(0)
    );
    let _ = child.kill();
    let _ = child.wait();
}

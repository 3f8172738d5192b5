//! Readiness and liveness probes, as a kubelet runs them for a pod's first container.
//!
//! [`probe_of`] reads a probe from the pod (`httpGet` over HTTP or HTTPS, `tcpSocket`; a named
//! port is the container's port of that name; the host is the pod's IP unless the probe names
//! one) with Kubernetes' defaults: no initial delay, every 10 s, a 1 s timeout, one success to
//! pass, three failures to fail. [`Tracker`] holds a probe's counts and says when it is due and
//! when its verdict changes: a readiness probe starts failing (the pod is not Ready until it
//! passes), a liveness probe starts passing. [`check`] does one probe: an HTTP answer from 200 to
//! 399 passes, as does a TCP connection; an HTTPS probe does not verify the server's certificate,
//! as a kubelet does not.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// What a probe does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handler {
    Http {
        https: bool,
        host: String,
        port: u16,
        path: String,
        headers: Vec<(String, String)>,
    },
    Tcp {
        host: String,
        port: u16,
    },
}

/// A probe of a pod, with its timing and thresholds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    pub handler: Handler,
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

/// Which probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Readiness,
    Liveness,
}

impl Kind {
    fn field(self) -> &'static str {
        match self {
            Kind::Readiness => "readinessProbe",
            Kind::Liveness => "livenessProbe",
        }
    }
}

fn seconds(probe: &Value, field: &str, default: u64, least: u64) -> Duration {
    let s = probe.get(field).and_then(Value::as_u64).unwrap_or(default).max(least);
    Duration::from_secs(s)
}

fn count(probe: &Value, field: &str, default: u32) -> u32 {
    probe
        .get(field)
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(default)
        .max(1)
}

/// The port a probe names: a number, or the name of one of the container's ports.
fn port_of(container: &Value, port: &Value) -> Result<u16, String> {
    if let Some(n) = port.as_u64() {
        return u16::try_from(n)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("port {n} is out of range"));
    }
    let name = port.as_str().ok_or("the probe names no port")?;
    if let Ok(n) = name.parse::<u16>() {
        return Ok(n);
    }
    container["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
        .and_then(|n| u16::try_from(n).ok())
        .ok_or_else(|| format!("the container has no port named {name:?}"))
}

/// The probe `kind` of the pod's first container, for a pod at `ip`: `None` when it has none, an
/// error saying why when it cannot be run (an exec or gRPC probe, a port that does not resolve).
pub fn probe_of(pod: &Value, kind: Kind, ip: Ipv4Addr) -> Option<Result<Probe, String>> {
    let container = pod.pointer("/spec/containers/0")?;
    let probe = container.get(kind.field()).filter(|p| p.is_object())?;
    let handler = (|| {
        if let Some(http) = probe.get("httpGet") {
            let https = http["scheme"].as_str().is_some_and(|s| s.eq_ignore_ascii_case("HTTPS"));
            let headers = http["httpHeaders"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|h| Some((h["name"].as_str()?.to_string(), h["value"].as_str()?.to_string())))
                .collect();
            let path = match http["path"].as_str().unwrap_or("/") {
                p if p.starts_with('/') => p.to_string(),
                p => format!("/{p}"),
            };
            return Ok(Handler::Http {
                https,
                host: http["host"]
                    .as_str()
                    .filter(|h| !h.is_empty())
                    .map_or_else(|| ip.to_string(), str::to_string),
                port: port_of(container, &http["port"])?,
                path,
                headers,
            });
        }
        if let Some(tcp) = probe.get("tcpSocket") {
            return Ok(Handler::Tcp {
                host: tcp["host"]
                    .as_str()
                    .filter(|h| !h.is_empty())
                    .map_or_else(|| ip.to_string(), str::to_string),
                port: port_of(container, &tcp["port"])?,
            });
        }
        Err(format!(
            "{}: only httpGet and tcpSocket probes are run by this kubelet",
            kind.field()
        ))
    })();
    Some(handler.map(|handler| Probe {
        handler,
        initial_delay: seconds(probe, "initialDelaySeconds", 0, 0),
        period: seconds(probe, "periodSeconds", 10, 1),
        timeout: seconds(probe, "timeoutSeconds", 1, 1),
        // A liveness probe's success threshold must be 1 (the API server says so).
        success_threshold: if kind == Kind::Liveness {
            1
        } else {
            count(probe, "successThreshold", 1)
        },
        failure_threshold: count(probe, "failureThreshold", 3),
    }))
}

/// One probe's state: when it runs next, its consecutive results and its verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracker {
    pub probe: Probe,
    next_at: Instant,
    in_flight: bool,
    successes: u32,
    failures: u32,
    passing: bool,
}

impl Tracker {
    /// A tracker for a container started at `started`: a readiness probe starts failing, a
    /// liveness probe passing.
    pub fn new(probe: Probe, kind: Kind, started: Instant) -> Tracker {
        Tracker {
            next_at: started + probe.initial_delay,
            probe,
            in_flight: false,
            successes: 0,
            failures: 0,
            passing: kind == Kind::Liveness,
        }
    }

    pub fn passing(&self) -> bool {
        self.passing
    }

    /// Whether the probe should run at `now` (none runs while one is in flight); when it should,
    /// it is marked in flight.
    pub fn take_due(&mut self, now: Instant) -> bool {
        if self.in_flight || now < self.next_at {
            return false;
        }
        self.in_flight = true;
        true
    }

    /// Records a result at `now`; the new verdict when it changed.
    pub fn record(&mut self, ok: bool, now: Instant) -> Option<bool> {
        self.in_flight = false;
        self.next_at = now + self.probe.period;
        if ok {
            self.successes = self.successes.saturating_add(1);
            self.failures = 0;
        } else {
            self.failures = self.failures.saturating_add(1);
            self.successes = 0;
        }
        let verdict = if self.passing {
            self.failures < self.probe.failure_threshold
        } else {
            self.successes >= self.probe.success_threshold
        };
        (verdict != self.passing).then(|| {
            self.passing = verdict;
            verdict
        })
    }
}

/// A TLS client that takes any server certificate: a kubelet's HTTPS probe does not verify it.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn tls_connector() -> Result<tokio_rustls::TlsConnector, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

async fn http_get<S>(io: S, host: &str, port: u16, path: &str, headers: &[(String, String)]) -> Result<u16, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut request = http::Request::get(path)
        .header(http::header::HOST, format!("{host}:{port}"))
        .header(http::header::USER_AGENT, "kube-probe/captf");
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| e.to_string())?;
    let answer = sender.send_request(request).await.map_err(|e| e.to_string())?;
    Ok(answer.status().as_u16())
}

/// The certificate (DER) a TLS server at `host:port` serves, without verifying it: how a test
/// sees which certificate a webhook serves now.
pub async fn served_certificate(host: &str, port: u16) -> Result<Vec<u8>, String> {
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
    let tls = tls_connector()?.connect(name, tcp).await.map_err(|e| e.to_string())?;
    let (_, session) = tls.get_ref();
    session
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.as_ref().to_vec())
        .ok_or_else(|| "the server sent no certificate".to_string())
}

/// Runs a probe once, within its timeout: whether it passed.
pub async fn check(probe: &Probe) -> bool {
    let attempt = async {
        match &probe.handler {
            Handler::Tcp { host, port } => tokio::net::TcpStream::connect((host.as_str(), *port))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Handler::Http {
                https,
                host,
                port,
                path,
                headers,
            } => {
                let tcp = tokio::net::TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(|e| e.to_string())?;
                let status = if *https {
                    let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| e.to_string())?;
                    let tls = tls_connector()?.connect(name, tcp).await.map_err(|e| e.to_string())?;
                    http_get(tls, host, *port, path, headers).await?
                } else {
                    http_get(tcp, host, *port, path, headers).await?
                };
                if (200..400).contains(&status) {
                    Ok(())
                } else {
                    Err(format!("HTTP {status}"))
                }
            }
        }
    };
    matches!(tokio::time::timeout(probe.timeout, attempt).await, Ok(Ok(())))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 7);

    fn pod(container: Value) -> Value {
        json!({ "spec": { "containers": [container] } })
    }

    #[test]
    fn an_http_probe_on_a_named_port_takes_the_containers_port_and_kubernetes_defaults() {
        let p = pod(json!({
            "ports": [{ "name": "healthz", "containerPort": 6080 }],
            "readinessProbe": { "httpGet": { "path": "healthz", "port": "healthz" } },
        }));
        let probe = probe_of(&p, Kind::Readiness, IP).unwrap().unwrap();
        assert_eq!(
            probe,
            Probe {
                handler: Handler::Http {
                    https: false,
                    host: IP.to_string(),
                    port: 6080,
                    path: "/healthz".into(),
                    headers: vec![],
                },
                initial_delay: Duration::ZERO,
                period: Duration::from_secs(10),
                timeout: Duration::from_secs(1),
                success_threshold: 1,
                failure_threshold: 3,
            }
        );
        assert_eq!(probe_of(&p, Kind::Liveness, IP), None, "no liveness probe: none");
    }

    #[test]
    fn an_https_probe_keeps_its_scheme_and_a_tcp_probe_its_numbered_port() {
        let p = pod(json!({
            "livenessProbe": { "httpGet": { "scheme": "HTTPS", "port": 9443, "path": "/healthz" },
                               "periodSeconds": 2, "failureThreshold": 1, "successThreshold": 4 },
            "readinessProbe": { "tcpSocket": { "port": 8080 }, "initialDelaySeconds": 5 },
        }));
        let live = probe_of(&p, Kind::Liveness, IP).unwrap().unwrap();
        assert!(matches!(
            live.handler,
            Handler::Http {
                https: true,
                port: 9443,
                ..
            }
        ));
        assert_eq!(live.success_threshold, 1, "a liveness probe passes on one success");
        let ready = probe_of(&p, Kind::Readiness, IP).unwrap().unwrap();
        assert_eq!(
            ready.handler,
            Handler::Tcp {
                host: IP.to_string(),
                port: 8080
            }
        );
        assert_eq!(ready.initial_delay, Duration::from_secs(5));
    }

    #[test]
    fn a_probe_that_cannot_run_says_why() {
        let exec = pod(json!({ "readinessProbe": { "exec": { "command": ["true"] } } }));
        let err = probe_of(&exec, Kind::Readiness, IP).unwrap().unwrap_err();
        assert!(err.contains("only httpGet and tcpSocket"), "{err}");
        let unnamed = pod(json!({ "readinessProbe": { "httpGet": { "port": "https" } } }));
        let err = probe_of(&unnamed, Kind::Readiness, IP).unwrap().unwrap_err();
        assert!(err.contains("no port named \"https\""), "{err}");
    }

    fn probe(success: u32, failure: u32) -> Probe {
        Probe {
            handler: Handler::Tcp {
                host: IP.to_string(),
                port: 1,
            },
            initial_delay: Duration::from_secs(3),
            period: Duration::from_secs(10),
            timeout: Duration::from_secs(1),
            success_threshold: success,
            failure_threshold: failure,
        }
    }

    #[test]
    fn a_readiness_probe_fails_until_its_success_threshold_and_passes_until_its_failure_threshold() {
        let t0 = Instant::now();
        let mut t = Tracker::new(probe(2, 3), Kind::Readiness, t0);
        assert!(!t.passing(), "not ready before a probe passed");
        assert!(!t.take_due(t0), "not before the initial delay");
        assert!(t.take_due(t0 + Duration::from_secs(3)));
        assert!(!t.take_due(t0 + Duration::from_secs(4)), "not while one is in flight");
        assert_eq!(t.record(true, t0 + Duration::from_secs(3)), None, "one success of two");
        assert!(
            !t.take_due(t0 + Duration::from_secs(12)),
            "the period is from the last result"
        );
        assert!(t.take_due(t0 + Duration::from_secs(13)));
        assert_eq!(t.record(true, t0 + Duration::from_secs(13)), Some(true));
        for n in 0..2 {
            assert_eq!(t.record(false, t0), None, "failure {n} of three");
        }
        assert_eq!(t.record(true, t0), None, "a success resets the failures");
        assert_eq!(t.record(false, t0), None);
        assert_eq!(t.record(false, t0), None);
        assert_eq!(t.record(false, t0), Some(false));
    }

    #[test]
    fn a_liveness_probe_passes_until_its_failure_threshold() {
        let t0 = Instant::now();
        let mut t = Tracker::new(probe(1, 2), Kind::Liveness, t0);
        assert!(t.passing());
        assert_eq!(t.record(false, t0), None);
        assert_eq!(t.record(false, t0), Some(false));
    }

    proptest! {
        #[test]
        fn any_container_json_gets_a_probe_or_a_reason_without_panicking(
            port in prop_oneof![
                Just(json!(null)), (0u64..70000).prop_map(|n| json!(n)), "[a-z0-9]{0,6}".prop_map(|s| json!(s)),
            ],
            period in proptest::option::of(0u64..100),
            threshold in proptest::option::of(0u64..u64::from(u32::MAX) + 5),
        ) {
            let p = pod(json!({
                "ports": [{ "name": "web", "containerPort": 8080 }],
                "readinessProbe": { "httpGet": { "port": port }, "periodSeconds": period,
                                    "failureThreshold": threshold },
            }));
            if let Some(Ok(probe)) = probe_of(&p, Kind::Readiness, IP) {
                prop_assert!(probe.period >= Duration::from_secs(1));
                prop_assert!(probe.failure_threshold >= 1);
            }
        }
    }

    #[tokio::test]
    async fn a_tcp_probe_passes_while_something_listens_and_fails_after() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut p = probe(1, 1);
        p.handler = Handler::Tcp {
            host: "127.0.0.1".into(),
            port,
        };
        assert!(check(&p).await);
        drop(listener);
        assert!(!check(&p).await);
    }

    #[tokio::test]
    async fn an_http_probe_passes_on_2xx_and_3xx_and_fails_on_500() {
        for (status, passes) in [(200u16, true), (302, true), (500, false)] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let answer = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n");
                s.write_all(answer.as_bytes()).await.unwrap();
            });
            let mut p = probe(1, 1);
            p.handler = Handler::Http {
                https: false,
                host: "127.0.0.1".into(),
                port,
                path: "/healthz".into(),
                headers: vec![],
            };
            assert_eq!(check(&p).await, passes, "HTTP {status}");
        }
    }
}

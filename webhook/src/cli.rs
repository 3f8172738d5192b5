//! Command-line flags (clap derive, every flag with an env var) and logging setup.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use captf_shared::policy::TenantPolicyArgs;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::server::Config;
use crate::tls::CertFiles;
use crate::trust::{ApiServerAddresses, Cidr};
use crate::{DEFAULT_ADDR, DEFAULT_METRICS_ADDR};

#[derive(Debug, Parser)]
#[command(
    name = "captf-webhook",
    version,
    about = "CAPTF's admission webhook: defaults and validation over TLS",
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(flatten)]
    pub serve: ServeArgs,
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a development CA and serving certificate (ca.crt, tls.crt, tls.key) into a directory.
    DevCerts(DevCertsArgs),
}

#[derive(Debug, Args)]
pub struct DevCertsArgs {
    /// Directory to write into (created if missing).
    #[arg(long, default_value = "certs/dev")]
    pub out_dir: PathBuf,
    /// DNS names of the serving certificate.
    #[arg(long = "dns", default_values_t = ["localhost".to_string()])]
    pub dns: Vec<String>,
    /// IP addresses of the serving certificate.
    #[arg(long = "ip", default_values_t = ["127.0.0.1".parse::<IpAddr>().unwrap_or(IpAddr::from([127, 0, 0, 1]))])]
    pub ips: Vec<IpAddr>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address of the TLS server (webhooks, /healthz, /readyz).
    #[arg(long, env = "CAPTF_WEBHOOK_ADDR", default_value = DEFAULT_ADDR)]
    pub addr: SocketAddr,
    /// PEM certificate chain (leaf first).
    #[arg(long, env = "CAPTF_WEBHOOK_TLS_CERT_FILE", required = true)]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key.
    #[arg(long, env = "CAPTF_WEBHOOK_TLS_KEY_FILE", required = true)]
    pub tls_key_file: Option<PathBuf>,
    /// Address of the plain metrics server (/metrics).
    #[arg(long, env = "CAPTF_WEBHOOK_METRICS_ADDR", default_value = DEFAULT_METRICS_ADDR)]
    pub metrics_addr: SocketAddr,
    /// How often the certificate files are re-read (Go duration, e.g. 2s).
    #[arg(long, env = "CAPTF_WEBHOOK_CERT_RELOAD_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub cert_reload_interval: Duration,
    /// Time a client has to finish the TLS handshake, then to send its first request's headers
    /// (and a later HTTP/1 request's headers once begun). Bytes trickling in do not extend it.
    #[arg(long, env = "CAPTF_WEBHOOK_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// Time a client has to send a request's body, from its headers.
    #[arg(long, env = "CAPTF_WEBHOOK_BODY_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub body_timeout: Duration,
    /// A connection with no request in flight for this long since its last one is closed;
    /// bytes, partial requests and HTTP/2 PINGs do not count as requests. Longer than the 90 s
    /// the API server keeps an idle connection, so that it closes first: a connection closed by
    /// the server just as the client sends on it fails that review.
    #[arg(long, env = "CAPTF_WEBHOOK_IDLE_TIMEOUT", default_value = "120s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// A connection is closed (gracefully) after this long, however busy.
    #[arg(long, env = "CAPTF_WEBHOOK_MAX_CONNECTION_AGE", default_value = "10m", value_parser = parse_duration)]
    pub max_connection_age: Duration,
    /// A connection is closed (gracefully) after this many requests.
    #[arg(long, env = "CAPTF_WEBHOOK_MAX_REQUESTS_PER_CONNECTION", default_value_t = crate::conn::DEFAULT_MAX_REQUESTS_PER_CONNECTION)]
    pub max_requests_per_connection: u64,
    /// Connections open at once; past it new connections are closed right after accept.
    #[arg(long, env = "CAPTF_WEBHOOK_MAX_CONNECTIONS", default_value_t = crate::conn::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Connections open at once from one source address (other than the API server's); past
    /// it, a new one from it takes the place of its oldest idle one, or is closed right after
    /// accept. When all connections are open, a new one takes the place of an idle one of the
    /// address with the most; one is refused only when none it could replace is idle.
    #[arg(long, env = "CAPTF_WEBHOOK_MAX_CONNECTIONS_PER_PEER", default_value_t = crate::conn::DEFAULT_MAX_CONNECTIONS_PER_PEER)]
    pub max_connections_per_peer: usize,
    /// Of --max-connections, those only the API server may hold. Applies only when the webhook
    /// can tell the API server apart (--client-ca-file or --api-server-cidrs).
    #[arg(long, env = "CAPTF_WEBHOOK_RESERVED_CONNECTIONS", default_value_t = crate::conn::DEFAULT_RESERVED_CONNECTIONS)]
    pub reserved_connections: usize,
    /// HTTP/2 streams (concurrent requests) a client may open on one connection.
    #[arg(long, env = "CAPTF_WEBHOOK_HTTP2_MAX_STREAMS", default_value_t = crate::conn::DEFAULT_HTTP2_MAX_STREAMS)]
    pub http2_max_streams: u32,
    /// Largest request body (bytes, or with a Ki/Mi suffix); larger ones get 413.
    #[arg(long, env = "CAPTF_WEBHOOK_MAX_BODY_BYTES", default_value = "7Mi", value_parser = parse_bytes)]
    pub max_body_bytes: usize,
    /// Review requests in flight at once; past it requests get 429.
    #[arg(long, env = "CAPTF_WEBHOOK_MAX_IN_FLIGHT_REQUESTS", default_value_t = crate::budget::DEFAULT_MAX_IN_FLIGHT_REQUESTS)]
    pub max_in_flight_requests: usize,
    /// Request body bytes held at once (bytes, or Ki/Mi), counted as they arrive; past it
    /// requests get 429.
    #[arg(long, env = "CAPTF_WEBHOOK_MAX_IN_FLIGHT_BYTES", default_value = "28Mi", value_parser = parse_bytes)]
    pub max_in_flight_bytes: usize,
    /// Review requests in flight at once from one source address (other than the API
    /// server's); past it its requests get 429.
    #[arg(long, env = "CAPTF_WEBHOOK_MAX_PEER_IN_FLIGHT_REQUESTS", default_value_t = crate::budget::DEFAULT_MAX_PEER_IN_FLIGHT_REQUESTS)]
    pub max_peer_in_flight_requests: usize,
    /// Request body bytes held at once by one source address other than the API server's
    /// (bytes, or Ki/Mi); past it its requests get 429.
    #[arg(long, env = "CAPTF_WEBHOOK_MAX_PEER_IN_FLIGHT_BYTES", default_value = "3Mi", value_parser = parse_bytes)]
    pub max_peer_in_flight_bytes: usize,
    /// Of --max-in-flight-requests, those only the API server may hold: whatever other clients
    /// hold, this many are free for it. Applies only when the webhook can tell the API server
    /// apart (--client-ca-file or --api-server-cidrs).
    #[arg(long, env = "CAPTF_WEBHOOK_RESERVED_IN_FLIGHT_REQUESTS", default_value_t = crate::budget::DEFAULT_RESERVED_IN_FLIGHT_REQUESTS)]
    pub reserved_in_flight_requests: usize,
    /// Of --max-in-flight-bytes, those only the API server may hold (bytes, or Ki/Mi). Applies
    /// only when the webhook can tell the API server apart.
    #[arg(long, env = "CAPTF_WEBHOOK_RESERVED_IN_FLIGHT_BYTES", default_value = "14Mi", value_parser = parse_bytes)]
    pub reserved_in_flight_bytes: usize,
    /// Bytes per second a request body must average once its grace has passed (bytes, or
    /// Ki/Mi; 0: no minimum); slower bodies get 408 and their connection is closed.
    #[arg(long, env = "CAPTF_WEBHOOK_MIN_BODY_RATE", default_value = "64Ki", value_parser = parse_bytes)]
    pub min_body_rate: usize,
    /// How long a request body may lag behind the minimum rate before it applies.
    #[arg(long, env = "CAPTF_WEBHOOK_MIN_BODY_RATE_GRACE", default_value = "2s", value_parser = parse_duration)]
    pub min_body_rate_grace: Duration,
    /// PEM CA bundle: when set, every client (the API server) must present a certificate that
    /// chains to it, and the handshake fails for any other. Read once at start. The recommended
    /// way to tell the API server apart: its connections may use the reserved shares.
    #[arg(long, env = "CAPTF_WEBHOOK_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// Comma-separated addresses or address blocks (10.0.0.5, 10.0.0.0/24, fd00::/64) the API
    /// server connects from, where it cannot present a client certificate: their connections
    /// may use the reserved shares and are not held to one address's share. Everything else
    /// sending from them is trusted too.
    #[arg(long, env = "CAPTF_WEBHOOK_API_SERVER_CIDRS", value_delimiter = ',', value_parser = parse_cidr)]
    pub api_server_cidrs: Vec<Cidr>,
    /// The namespaces a CAPTF controller watches, comma-separated (the list its `--namespace`
    /// gets); an object of a kind the controller acts on, created in any other namespace, is
    /// admitted with a warning that nothing will act on it. Empty: every namespace.
    #[arg(long, env = "CAPTF_WEBHOOK_WATCHED_NAMESPACES", value_delimiter = ',', value_parser = captf_shared::policy::parse_namespace)]
    pub watched_namespaces: Vec<String>,
    /// Reviews with bodies over 64 KiB answered at once (on the blocking pool).
    #[arg(long, env = "CAPTF_WEBHOOK_LARGE_REVIEWS", default_value_t = crate::routes::DEFAULT_LARGE_REVIEWS, value_parser = parse_at_least_one)]
    pub large_reviews: usize,
    /// How long a large review waits for its turn before 503.
    #[arg(long, env = "CAPTF_WEBHOOK_LARGE_REVIEW_WAIT", default_value = "5s", value_parser = parse_duration)]
    pub large_review_wait: Duration,
    /// After SIGTERM, time to keep accepting while /readyz fails (endpoints propagation).
    #[arg(long, env = "CAPTF_WEBHOOK_SHUTDOWN_DELAY", default_value = "5s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,
    /// Time open connections get to finish on shutdown.
    #[arg(long, env = "CAPTF_WEBHOOK_SHUTDOWN_GRACE", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// Approving a destructive plan (`captf.io/approve-plan`) and setting
    /// `spec.guard.destructive: Allow` need the `approve` verb on the object's kind, checked with a
    /// SubjectAccessReview (the webhook's account needs `create` on subjectaccessreviews; the
    /// API server is found by KUBECONFIG or in-cluster). A check that cannot be made refuses the
    /// request. Off by default here, so the webhook runs without an API server (tests, the demo
    /// on the simulator); the chart turns it on.
    #[arg(long, env = "CAPTF_WEBHOOK_AUTHORIZE_APPROVALS", default_value_t = false, action = clap::ArgAction::Set)]
    pub authorize_approvals: bool,
    /// The ClusterRole that grants `approve`, named in a refusal (the chart's `<release>-approver`).
    #[arg(long, env = "CAPTF_WEBHOOK_APPROVER_CLUSTER_ROLE", default_value = crate::approval::DEFAULT_APPROVER_ROLE)]
    pub approver_cluster_role: String,
    /// How long an approval's SubjectAccessReview may take before the request is refused.
    #[arg(long, env = "CAPTF_WEBHOOK_AUTHORIZE_TIMEOUT", default_value = "3s", value_parser = parse_duration)]
    pub authorize_timeout: Duration,
    // What tenants may choose for runner pods: the controller's flags, declared once in
    // captf-shared, so both read the same values the same way (`--runner-image` and
    // `--runner-service-account` included: a spec may always name them).
    #[command(flatten)]
    pub policy: TenantPolicyArgs,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Log format.
    #[arg(long, env = "CAPTF_WEBHOOK_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    captf_shared::duration::parse(s).map_err(|e| e.to_string())
}

fn parse_cidr(s: &str) -> Result<Cidr, String> {
    s.parse()
}

fn parse_at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{s:?} is not a whole number of at least 1")),
    }
}

/// A byte count: digits, optionally followed by `Ki` or `Mi`.
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let (digits, unit) = match s.strip_suffix("Mi") {
        Some(d) => (d, 1024 * 1024),
        None => match s.strip_suffix("Ki") {
            Some(d) => (d, 1024),
            None => (s, 1),
        },
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("{s:?} is not a byte count (e.g. 7340032, 7168Ki or 7Mi)"))
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("--tls-cert-file and --tls-key-file are required to serve")]
    MissingCertificate,
    #[error("--authorize-approvals needs the API server (KUBECONFIG or the pod's in-cluster account): {0}")]
    NoApiServer(String),
}

impl ServeArgs {
    pub fn to_config(&self) -> Result<Config, CliError> {
        let (Some(cert), Some(key)) = (self.tls_cert_file.clone(), self.tls_key_file.clone()) else {
            return Err(CliError::MissingCertificate);
        };
        let mut config = Config::new(self.addr, CertFiles { cert, key });
        config.metrics_addr = Some(self.metrics_addr);
        config.reload_interval = self.cert_reload_interval;
        config.handshake_timeout = self.header_read_timeout;
        config.header_read_timeout = self.header_read_timeout;
        config.body_timeout = self.body_timeout;
        config.idle_timeout = self.idle_timeout;
        config.shutdown_delay = self.shutdown_delay;
        config.shutdown_grace = self.shutdown_grace;
        config.max_connection_age = self.max_connection_age;
        config.max_requests_per_connection = self.max_requests_per_connection;
        config.max_connections = self.max_connections;
        config.max_connections_per_peer = self.max_connections_per_peer;
        config.reserved_connections = self.reserved_connections;
        config.client_ca_file = self.client_ca_file.clone();
        config.api_server_addresses = ApiServerAddresses(self.api_server_cidrs.clone());
        config.http2_max_streams = self.http2_max_streams;
        config.limits = crate::routes::Limits {
            max_body_bytes: self.max_body_bytes,
            inline_body_bytes: crate::routes::DEFAULT_INLINE_BODY_BYTES,
            large_reviews: self.large_reviews,
            large_review_wait: self.large_review_wait,
            max_in_flight_requests: self.max_in_flight_requests,
            max_in_flight_bytes: self.max_in_flight_bytes,
            max_peer_in_flight_requests: self.max_peer_in_flight_requests,
            max_peer_in_flight_bytes: self.max_peer_in_flight_bytes,
            reserved_in_flight_requests: self.reserved_in_flight_requests,
            reserved_in_flight_bytes: self.reserved_in_flight_bytes,
            min_body_rate: crate::rate::MinRate {
                bytes_per_sec: u64::try_from(self.min_body_rate).unwrap_or(u64::MAX),
                grace: self.min_body_rate_grace,
            },
        };
        config.policy = self.policy.to_policy();
        config.watched = crate::watched::Watched::only(&self.watched_namespaces);
        config.approvals.approver_role = self.approver_cluster_role.clone();
        Ok(config)
    }

    /// With `--authorize-approvals`, the client that asks the API server (KUBECONFIG, else the
    /// pod's in-cluster account): set on the config, which leaves approvals unchecked otherwise.
    pub async fn connect_authorizer(&self, config: &mut Config) -> Result<(), CliError> {
        if !self.authorize_approvals {
            return Ok(());
        }
        let client = kube::Client::try_default()
            .await
            .map_err(|e| CliError::NoApiServer(e.to_string()))?;
        config.approvals.authorizer = Some(std::sync::Arc::new(crate::approval::KubeAuthorizer::new(
            client,
            self.authorize_timeout,
        )));
        Ok(())
    }
}

/// Install the global tracing subscriber (`RUST_LOG` filters, default `info`), logging to stderr.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn flags_parse_with_defaults_from_the_chart_constants() {
        let cli =
            Cli::try_parse_from(["captf-webhook", "--tls-cert-file", "c.pem", "--tls-key-file", "k.pem"]).unwrap();
        let config = cli.serve.to_config().unwrap();
        assert_eq!(config.addr.to_string(), DEFAULT_ADDR);
        assert_eq!(config.metrics_addr.unwrap().to_string(), DEFAULT_METRICS_ADDR);
        assert_eq!(config.reload_interval, Duration::from_secs(2));
        assert_eq!(cli.log.log_format, LogFormat::Text);
    }

    #[test]
    fn the_limit_flags_default_to_the_documented_values() {
        let cli =
            Cli::try_parse_from(["captf-webhook", "--tls-cert-file", "c.pem", "--tls-key-file", "k.pem"]).unwrap();
        let config = cli.serve.to_config().unwrap();
        let defaults = Config::new(config.addr, config.cert_files.clone());
        assert_eq!(config.limits, crate::routes::Limits::default());
        assert_eq!(config.limits.max_body_bytes, 7 * 1024 * 1024);
        assert_eq!(config.max_connections, defaults.max_connections);
        assert_eq!(config.max_connections_per_peer, defaults.max_connections_per_peer);
        assert_eq!(config.client_ca_file, None);
        assert_eq!(config.max_connection_age, defaults.max_connection_age);
        assert_eq!(config.max_requests_per_connection, defaults.max_requests_per_connection);
        assert_eq!(config.http2_max_streams, defaults.http2_max_streams);
        assert_eq!(config.idle_timeout, defaults.idle_timeout);
        assert_eq!(config.header_read_timeout, defaults.header_read_timeout);
    }

    #[test]
    fn byte_flags_take_plain_counts_and_ki_or_mi() {
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("64Ki"), Ok(65_536));
        assert_eq!(parse_bytes("7Mi"), Ok(7_340_032));
        assert!(parse_bytes("7MB").is_err());
        assert!(parse_bytes("99999999999999999999Mi").is_err());
        let cli = Cli::try_parse_from([
            "captf-webhook",
            "--tls-cert-file",
            "c",
            "--tls-key-file",
            "k",
            "--max-body-bytes",
            "1Mi",
            "--max-connections",
            "10",
        ])
        .unwrap();
        assert_eq!(cli.serve.max_body_bytes, 1024 * 1024);
        assert_eq!(cli.serve.to_config().unwrap().max_connections, 10);
    }

    #[test]
    fn the_api_server_is_told_apart_by_a_client_ca_or_addresses_and_only_then_gets_a_reserve() {
        let base = ["captf-webhook", "--tls-cert-file", "c", "--tls-key-file", "k"];
        let config = Cli::try_parse_from(base).unwrap().serve.to_config().unwrap();
        assert!(!config.knows_the_api_server());
        assert_eq!(config.conn_bounds().reserved, 0);
        assert_eq!(config.effective_limits().bounds().reserved_bytes, 0);
        assert_eq!(config.limits.reserved_in_flight_bytes, 14 * 1024 * 1024);
        assert_eq!(config.reserved_connections, 32);

        let by_address = Cli::try_parse_from(base.into_iter().chain(["--api-server-cidrs", "10.0.0.0/24,192.0.2.7"]))
            .unwrap()
            .serve
            .to_config()
            .unwrap();
        assert!(by_address.knows_the_api_server());
        assert!(by_address.api_server_addresses.contains([10, 0, 0, 9].into()));
        assert!(by_address.api_server_addresses.contains([192, 0, 2, 7].into()));
        assert!(!by_address.api_server_addresses.contains([192, 0, 2, 8].into()));
        assert_eq!(by_address.conn_bounds().reserved, 32);
        assert_eq!(by_address.effective_limits().bounds().reserved_requests, 16);

        let by_certificate = Cli::try_parse_from(base.into_iter().chain(["--client-ca-file", "ca.crt"]))
            .unwrap()
            .serve
            .to_config()
            .unwrap();
        assert!(by_certificate.knows_the_api_server());

        let bad = Cli::try_parse_from(base.into_iter().chain(["--api-server-cidrs", "10.0.0.0/33"])).unwrap_err();
        assert!(bad.to_string().contains("not an address"), "{bad}");
    }

    #[test]
    fn approvals_are_authorized_only_when_asked_and_refusals_name_the_approver_role() {
        let base = ["captf-webhook", "--tls-cert-file", "c", "--tls-key-file", "k"];
        let cli = Cli::try_parse_from(base).unwrap();
        assert!(!cli.serve.authorize_approvals);
        assert_eq!(cli.serve.authorize_timeout, crate::approval::DEFAULT_AUTHORIZE_TIMEOUT);
        assert_eq!(cli.serve.authorize_timeout, Duration::from_secs(3));
        let config = cli.serve.to_config().unwrap();
        assert!(config.approvals.authorizer.is_none());
        assert_eq!(config.approvals.approver_role, "captf-approver");
        let on = Cli::try_parse_from(base.into_iter().chain([
            "--authorize-approvals=true",
            "--approver-cluster-role",
            "x-approver",
        ]))
        .unwrap();
        assert!(on.serve.authorize_approvals);
        assert_eq!(on.serve.to_config().unwrap().approvals.approver_role, "x-approver");
    }

    #[test]
    fn serving_without_certificate_flags_is_a_usage_error() {
        assert!(Cli::try_parse_from(["captf-webhook"]).is_err());
    }

    #[test]
    fn dev_certs_needs_no_certificate_flags() {
        let cli = Cli::try_parse_from(["captf-webhook", "dev-certs", "--out-dir", "/tmp/x"]).unwrap();
        assert!(matches!(cli.command, Some(Command::DevCerts(_))));
    }

    #[test]
    fn flags_take_go_durations_and_log_format() {
        let cli = Cli::try_parse_from([
            "captf-webhook",
            "--addr",
            "127.0.0.1:0",
            "--tls-cert-file",
            "c",
            "--tls-key-file",
            "k",
            "--cert-reload-interval",
            "500ms",
            "--log-format",
            "json",
        ])
        .unwrap();
        assert_eq!(cli.serve.cert_reload_interval, Duration::from_millis(500));
        assert_eq!(cli.log.log_format, LogFormat::Json);
        assert!(
            Cli::try_parse_from([
                "captf-webhook",
                "--tls-cert-file",
                "c",
                "--tls-key-file",
                "k",
                "--log-format",
                "xml"
            ])
            .is_err()
        );
    }
}

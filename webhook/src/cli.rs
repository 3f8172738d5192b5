//! Command-line flags (clap derive, every flag with an env var) and logging setup.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use captf_shared::policy::TenantPolicy;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::server::Config;
use crate::tls::CertFiles;
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
    /// Time a client has to send a request's headers (and to finish the TLS handshake).
    #[arg(long, env = "CAPTF_WEBHOOK_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// Time a client has to send a request's body.
    #[arg(long, env = "CAPTF_WEBHOOK_BODY_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub body_timeout: Duration,
    /// Time after which a connection with no traffic is closed.
    #[arg(long, env = "CAPTF_WEBHOOK_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// After SIGTERM, time to keep accepting while /readyz fails (endpoints propagation).
    #[arg(long, env = "CAPTF_WEBHOOK_SHUTDOWN_DELAY", default_value = "5s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,
    /// Time open connections get to finish on shutdown.
    #[arg(long, env = "CAPTF_WEBHOOK_SHUTDOWN_GRACE", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

/// What tenants may choose for runner pods (the same flags as the controller's).
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// Image prefixes spec.jobs.image may start with (comma-separated; `*`: any). Empty: it may
    /// not be set.
    #[arg(long, env = "CAPTF_ALLOWED_RUNNER_IMAGE_PREFIXES", value_delimiter = ',')]
    pub allowed_runner_image_prefixes: Vec<String>,
    /// Names spec.jobs.serviceAccountName may be (comma-separated; `*`: any). Empty: it may not
    /// be set.
    #[arg(long, env = "CAPTF_ALLOWED_RUNNER_SERVICE_ACCOUNTS", value_delimiter = ',')]
    pub allowed_runner_service_accounts: Vec<String>,
    /// Whether spec.jobs.env may take values from Secrets (valueFrom.secretKeyRef).
    #[arg(long, env = "CAPTF_ALLOW_ENV_FROM_SECRETS", default_value_t = true, action = clap::ArgAction::Set)]
    pub allow_env_from_secrets: bool,
}

impl PolicyArgs {
    pub fn to_policy(&self) -> TenantPolicy {
        TenantPolicy {
            runner_image_prefixes: self
                .allowed_runner_image_prefixes
                .iter()
                .filter(|p| !p.is_empty())
                .cloned()
                .collect(),
            runner_service_accounts: self
                .allowed_runner_service_accounts
                .iter()
                .filter(|p| !p.is_empty())
                .cloned()
                .collect(),
            env_from_secrets: self.allow_env_from_secrets,
        }
    }
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

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("--tls-cert-file and --tls-key-file are required to serve")]
    MissingCertificate,
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
        config.policy = self.policy.to_policy();
        Ok(config)
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

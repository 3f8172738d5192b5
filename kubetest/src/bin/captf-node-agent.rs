//! `captf-node-agent`: a test-only stand-in for a machine booting from Cluster API's kubeadm
//! bootstrap data. It joins the control plane the bootstrap data names as `kubeadm join` and a
//! kubelet do (token discovery with the CA pin, TLS bootstrap through a CSR), registers the Node
//! with the given provider ID and keeps it Ready until SIGTERM or SIGINT, which leave the Node as
//! it is. See `captf_kubetest::node_agent`. Exits 1 with the reason when the join fails.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use captf_kubetest::node_agent::{AgentOptions, Log, run};
use clap::Parser;
use tokio::signal::unix::{SignalKind, signal};

#[derive(Parser, Debug)]
#[command(
    name = "captf-node-agent",
    about = "Join a control plane from Cluster API's kubeadm bootstrap data and keep the Node Ready (tests only)"
)]
struct Cli {
    /// The bootstrap data: the `value` of a Cluster API bootstrap data Secret.
    #[arg(long)]
    bootstrap_data: PathBuf,
    /// Its format (the Secret's `format`); only `cloud-config` is supported.
    #[arg(long, default_value = "cloud-config")]
    format: String,
    /// The machine's host name: the Node's name, unless the JoinConfiguration's
    /// `nodeRegistration.name` names another.
    #[arg(long)]
    node_name: String,
    /// The Node's `spec.providerID`.
    #[arg(long)]
    provider_id: String,
    /// Where the node's key, certificate, kubeconfig and `agent.log` are kept (made if missing).
    #[arg(long)]
    state_dir: PathBuf,
    /// The deadline of discovery, and again of the certificate's approval, in seconds.
    #[arg(long, default_value_t = 120)]
    join_timeout_seconds: u64,
    /// How often the Node's Lease is renewed, in seconds.
    #[arg(long, default_value_t = 5)]
    renew_seconds: u64,
    /// How often the Node's status (its Ready heartbeat) is posted, in seconds.
    #[arg(long, default_value_t = 10)]
    status_seconds: u64,
    /// The Node's InternalIP address.
    #[arg(long)]
    internal_ip: Option<String>,
    /// The kubelet version the Node reports.
    #[arg(long)]
    kubelet_version: Option<String>,
}

/// Handles SIGTERM and SIGINT from now on; the future says which came.
fn stop_signal() -> std::io::Result<impl std::future::Future<Output = String>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => "SIGTERM".to_string(),
            _ = int.recv() => "SIGINT".to_string(),
        }
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut opts = AgentOptions::new(cli.bootstrap_data, cli.node_name, cli.provider_id, cli.state_dir);
    opts.format = cli.format;
    opts.join_timeout = Duration::from_secs(cli.join_timeout_seconds);
    opts.renew_every = Duration::from_secs(cli.renew_seconds.max(1));
    opts.status_every = Duration::from_secs(cli.status_seconds.max(1));
    opts.internal_ip = cli.internal_ip;
    if let Some(v) = cli.kubelet_version {
        opts.kubelet_version = v;
    }
    let log = Log::open(&opts.state_dir);
    // Before the join starts, so that a signal during it stops the agent cleanly too.
    let stop = match stop_signal() {
        Ok(stop) => stop,
        Err(e) => {
            log.line(format!("error: cannot handle SIGTERM and SIGINT: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match run(&opts, &log, stop).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log.line(format!("error: {e}"));
            ExitCode::FAILURE
        }
    }
}

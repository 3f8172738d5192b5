//! `captf-sim`: run the simulator as a process, with a kubeconfig for `kubectl` and other
//! processes. The clock advances in real time × `--speed`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// A Kubernetes API server and Job/Pod simulator (a test double, not a cluster).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Listen address (port 0: a random port).
    #[arg(long, env = "CAPTF_SIM_ADDR", default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// Write a kubeconfig for the simulator here.
    #[arg(long, env = "CAPTF_SIM_KUBECONFIG", default_value = "captf-sim.kubeconfig")]
    kubeconfig: PathBuf,
    /// Simulated seconds per wall-clock second (0: the clock moves only through
    /// `POST /sim/v1/clock/advance?by=5m`).
    #[arg(long, env = "CAPTF_SIM_SPEED", default_value_t = 1)]
    speed: u32,
    /// Directory of CRD YAML files to serve besides CAPTF's own.
    #[arg(long, env = "CAPTF_SIM_CRDS")]
    crds: Option<PathBuf>,
    /// How many changes watches can replay before `410 Gone` (raise it for thousands of objects).
    #[arg(long, env = "CAPTF_SIM_HISTORY", default_value_t = 10_000)]
    history: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let args = Args::parse();
    let mut b = captf_sim::Sim::builder().addr(args.addr).history(args.history);
    if let Some(dir) = args.crds {
        b = b.crd_dir(dir);
    }
    let sim = b.start().await?;
    sim.write_kubeconfig(&args.kubeconfig)?;
    if args.speed > 0 {
        sim.run_clock(Duration::from_millis(200), args.speed);
    }
    println!(
        "captf-sim serving on {} (kubeconfig: {})",
        sim.url(),
        args.kubeconfig.display()
    );
    tokio::signal::ctrl_c().await?;
    Ok(())
}

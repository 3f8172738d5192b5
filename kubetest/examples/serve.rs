//! Starts one control plane (etcd, kube-apiserver, kube-controller-manager) and keeps it up until
//! interrupted, printing the admin kubeconfig's path: for poking at the real API server by hand
//! with `kubectl`, `clusterctl` or the CAPTF binaries.
//!
//!   cargo run -p captf-kubetest --example serve

use std::time::Duration;

use captf_kubetest::{ControlPlane, Options, Tools};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut opts = Options::new(Tools::locate()?);
    opts.ready_timeout = Duration::from_secs(300);
    let cp = ControlPlane::start(opts).await?;
    println!("export KUBECONFIG={}", cp.admin_kubeconfig().display());
    println!("logs in {}; interrupt to stop", cp.work_dir().display());
    tokio::signal::ctrl_c().await?;
    drop(cp);
    Ok(())
}

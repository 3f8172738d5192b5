//! Measures how long the control plane takes to come up: prints, for each of `--runs N` starts
//! (default 3), when etcd was healthy, when kube-apiserver's `/readyz` said ok, and when
//! kube-controller-manager's service-account controller had made `default/default`, counted
//! from the start call. A measurement, not a test: nothing here asserts a time.
//!
//!   cargo run -p captf-kubetest --example readyz -- --runs 3

use std::time::{Duration, Instant};

use captf_kubetest::{ControlPlane, Options, Tools};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut runs = 3usize;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().ok_or("--runs needs a number")?.parse()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let tools = Tools::locate()?;
    let mut opts = Options::new(tools);
    opts.ready_timeout = Duration::from_secs(300);
    let mut readyz = Vec::new();
    for run in 1..=runs {
        let began = Instant::now();
        let cp = ControlPlane::start(opts.clone()).await?;
        let t = cp.timings();
        drop(cp);
        println!(
            "run {run}: etcd healthy {:.2}s, /readyz ok {:.2}s, controllers ready {:.2}s (stopped at {:.2}s)",
            t.etcd.as_secs_f64(),
            t.apiserver.as_secs_f64(),
            t.controller_manager.as_secs_f64(),
            began.elapsed().as_secs_f64()
        );
        readyz.push(t.apiserver.as_secs_f64());
    }
    readyz.sort_by(f64::total_cmp);
    if let Some(median) = readyz.get(readyz.len() / 2) {
        println!("control plane start to /readyz: median {median:.2}s over {runs} runs");
    }
    Ok(())
}

use std::io::Write as _;
use std::process::ExitCode;

use captf_webhook::cli::{Cli, Command, init_logging};
use clap::Parser as _;

/// mimalloc rather than the system allocator: a review is many small allocations freed on
/// whichever worker thread finishes the request (see webhook/README.md for the figures).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log.log_format);
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("captf-webhook: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(Command::DevCerts(args)) = cli.command {
        let certs = captf_webhook::devcerts::generate("captf-webhook dev CA", &args.dns, &args.ips)?;
        let files = captf_webhook::devcerts::write(&args.out_dir, &certs)?;
        println!(
            "wrote {}, {}, {}",
            files.ca.display(),
            files.cert.display(),
            files.key.display()
        );
        return Ok(());
    }
    let mut config = cli.serve.to_config()?;
    cli.serve.connect_authorizer(&mut config).await?;
    if !cli.serve.authorize_approvals {
        tracing::warn!(
            "approvals are not authorized (--authorize-approvals=false): whoever may write an object may approve its destructive plans"
        );
    }
    let bound = captf_webhook::bind(config).await?;
    // One line on stdout, so a parent process started with `--addr 127.0.0.1:0` finds the port.
    // Written without `println!`: a parent that closed the pipe after reading must not kill us.
    let mut out = std::io::stdout();
    let _ = writeln!(out, "listening on https://{}", bound.local_addr());
    if let Some(m) = bound.metrics_addr() {
        let _ = writeln!(out, "metrics on http://{m}{}", captf_webhook::METRICS_PATH);
    }
    let _ = out.flush();
    tracing::info!(addr = %bound.local_addr(), "serving admission webhooks");
    bound.run(shutdown_signal()).await?;
    Ok(())
}

/// SIGTERM (the kubelet) or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

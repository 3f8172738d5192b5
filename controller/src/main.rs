//! `captf-controller`: `run` (the controller, `runtime/`) and `explain`.

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use captf_core::explain::{ExplainInput, explain};

/// mimalloc rather than the system allocator: with glibc's malloc the resident memory of a
/// long-running controller kept rising while its live heap stayed flat; the freed memory stayed
/// in the per-thread arenas (docs/soak.md has the measurements).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "captf-controller",
    version,
    about = "CAPTF's controller: runs Terraform steps as Kubernetes Jobs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller.
    Run(Box<captf_controller::runtime::RunArgs>),
    /// Explain what the controller would do for an object, offline, from files.
    Explain(ExplainArgs),
}

#[derive(Args, Debug)]
struct ExplainArgs {
    /// The TerraformCluster, TerraformMachinePool or TerraformMachine (YAML or JSON, `-` for stdin).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    object: String,
    /// The object's Jobs (`kubectl get jobs -o yaml`; a `kind: List` or documents).
    #[arg(long, value_name = "FILE")]
    jobs: String,
    /// The Jobs' pods (their termination messages carry the runner's result).
    #[arg(long, value_name = "FILE")]
    pods: Option<String>,
    /// The Terraform lock Lease `lock-tfstate-default-<suffix>` (and optionally the cluster lease).
    #[arg(long, value_name = "FILE")]
    lease: Option<String>,
    /// The inputs Secret `captf-inputs-<suffix>` (the durable record).
    #[arg(long, value_name = "FILE")]
    secret: Option<String>,
    /// The time to decide at (RFC 3339); default now.
    #[arg(long, value_name = "RFC3339")]
    now: Option<String>,
    /// The current inputs hash, when variablesFrom makes it impossible to compute offline.
    #[arg(long, value_name = "SHA256")]
    inputs_hash: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => {
            let rt = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("captf-controller run: failed to start the async runtime: {e}");
                    return ExitCode::from(1);
                }
            };
            match rt.block_on(captf_controller::runtime::run(*args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("captf-controller run: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Explain(a) => {
            let input = ExplainInput {
                object: a.object,
                jobs: a.jobs,
                pods: a.pods,
                lease: a.lease,
                secret: a.secret,
                now: a.now,
                inputs_hash: a.inputs_hash,
            };
            match explain(&input) {
                Ok(e) => {
                    let text = serde_json::to_string_pretty(&e.json).unwrap_or_else(|_| e.json.to_string());
                    println!("{text}");
                    eprintln!("{}", e.summary);
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("captf-controller explain: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

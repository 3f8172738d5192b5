//! `captf-controller-sim run`: the controller's runtime, with every flag of `captf-controller run`,
//! following the simulator's clock (`--sim-clock-url`, `CAPTF_SIM_CLOCK_URL`) instead of the
//! system clock. The demo and the scale bench run it against the simulator, whose time moves only
//! when a step advances it. It is not released: the shipped `captf-controller` has no way to take
//! a clock served over plain HTTP, which whoever reaches it could move.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "captf-controller-sim",
    about = "CAPTF's controller on the simulator's clock (the demo's; never released)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller, following the simulator's clock.
    Run {
        /// The simulator's URL (`http://127.0.0.1:port`): its clock at `/sim/v1/clock`.
        #[arg(long, env = "CAPTF_SIM_CLOCK_URL")]
        sim_clock_url: String,
        #[command(flatten)]
        args: Box<captf_controller::runtime::RunArgs>,
    },
}

fn main() -> ExitCode {
    let Command::Run { sim_clock_url, args } = Cli::parse().command;
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("captf-controller-sim: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(captf_controller::runtime::run_with_sim_clock(
        *args,
        Some(&sim_clock_url),
    )) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("captf-controller-sim: {e}");
            ExitCode::FAILURE
        }
    }
}

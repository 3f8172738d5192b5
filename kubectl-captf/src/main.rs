//! `kubectl-captf`: on PATH, `kubectl captf …` runs it (see the README).

use std::io::Write;
use std::process::ExitCode;

use kubectl_captf::cli::{Cli, Command};
use kubectl_captf::{connect, run};

fn main() -> ExitCode {
    let cli = Cli::parse_args();
    if let Command::Completion { shell } = cli.command {
        return match kubectl_captf::cli::completion(shell, &mut std::io::stdout()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: cannot write the script: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let conn = connect(&cli).await?;
        run(&cli, &conn).await
    });
    match result {
        Ok(printed) => {
            eprint!("{}", printed.stderr);
            print!("{}", printed.stdout);
            let _ = std::io::stdout().flush();
            if printed.partial {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

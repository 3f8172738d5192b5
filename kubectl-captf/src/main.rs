//! `kubectl-captf`: on PATH, `kubectl captf …` runs it (see the README).

use std::io::Write;
use std::process::ExitCode;

use kubectl_captf::cli::{Cli, Command};
use kubectl_captf::{connect, run};

fn main() -> ExitCode {
    // `kubectl_complete-captf` runs `kubectl-captf __complete <words>`: the words are what a
    // person typed, taken as they are (no parsing, no error: completion never fails loudly).
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("__complete") {
        return complete(&argv[2..]);
    }
    let cli = Cli::parse_args();
    if let Command::Complete { words } = &cli.command {
        // Connection flags given before `__complete` count as if typed.
        let mut all = Vec::new();
        if let Some(k) = &cli.kubeconfig {
            all.extend(["--kubeconfig".to_string(), k.display().to_string()]);
        }
        if let Some(c) = &cli.context {
            all.extend(["--context".to_string(), c.clone()]);
        }
        if let Some(n) = &cli.namespace {
            all.extend(["--namespace".to_string(), n.clone()]);
        }
        all.extend(words.iter().cloned());
        return complete(&all);
    }
    if let Command::Completion { shell } = cli.command {
        return match kubectl_captf::completion_script::write(shell, &mut std::io::stdout()) {
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
    if kubectl_captf::watch::streams(&cli) {
        let result = runtime.block_on(async {
            let conn = connect(&cli).await?;
            let mut partial = false;
            kubectl_captf::watch::run_streaming(&cli, &conn, &mut |p| {
                eprint!("{}", p.stderr);
                print!("{}", p.stdout);
                let _ = std::io::stdout().flush();
                partial |= p.partial;
            })
            .await?;
            Ok::<bool, kubectl_captf::errors::PluginError>(partial)
        });
        return match result {
            Ok(false) => ExitCode::SUCCESS,
            Ok(true) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(e.exit_code())
            }
        };
    }
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

/// `kubectl-captf __complete <words>`: cobra's completion output (see `complete.rs`).
fn complete(words: &[String]) -> ExitCode {
    let out = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt.block_on(kubectl_captf::complete::complete(words)),
        Err(e) => (
            format!(":{}\n", kubectl_captf::complete::directive::ERROR),
            format!("cannot start: {e}\n"),
        ),
    };
    eprint!("{}", out.1);
    print!("{}", out.0);
    let _ = std::io::stdout().flush();
    ExitCode::SUCCESS
}

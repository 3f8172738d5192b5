//! `captf-demo`: CAPTF's main job on the embedded simulator. Starts captf-sim, the real
//! captf-webhook and captf-controller binaries (found next to this executable), plays the
//! lifecycle the README lists, with a readable timeline and a summary table, and can keep serving.
//! Runner pods run the real captf-runner with real OpenTofu (the runner image's default binary)
//! where the machine allows it (root, and captf-runner, terraform-provider-captftest next to this
//! executable, OpenTofu from `scripts/setup-tools.sh`); the steps that show what a real process
//! can't do on cue are scripted, and so is everything else when a real binary is not available or
//! `--scripted` says so.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use captf_demo::lifecycle::Demo;
use captf_demo::real::RealTerraform;
use captf_demo::setup::Runners;
use captf_demo::{playground, setup, summary};

#[derive(Parser, Debug)]
#[command(
    name = "captf-demo",
    version,
    about = "CAPTF's main job: a real lifecycle on the embedded Kubernetes simulator"
)]
struct Cli {
    /// Keep the simulator, webhook and controller running after the script, until Ctrl-C.
    #[arg(long)]
    serve: bool,
    /// With --serve: skip the scripted lifecycle, just serve.
    #[arg(long, requires = "serve")]
    no_script: bool,
    /// With --serve: where to write the kubeconfig for kubectl.
    #[arg(long, default_value = "captf-demo.kubeconfig")]
    kubeconfig: PathBuf,
    /// With --serve: simulated seconds per real second once the script is over.
    #[arg(long, default_value_t = 10)]
    speed: u32,
    /// Print only the summary table, not the timeline.
    #[arg(long, short)]
    quiet: bool,
    /// Play every step with scripted runners, even where real Terraform could run. With --serve
    /// the runners are always scripted (what you apply yourself names modules that can't be
    /// fetched offline).
    #[arg(long)]
    scripted: bool,
    /// Run the runner pods from this released runner image (an OCI archive:
    /// `dist/images/runner.oci.tar` of `scripts/release.sh`) instead of the workspace's binaries.
    /// Needs root, as any real runner here.
    #[arg(long, value_name = "ARCHIVE", conflicts_with_all = ["scripted", "serve"])]
    runner_image: Option<PathBuf>,
    /// With --runner-image: the image's reference inside the archive (the release's version).
    #[arg(long, default_value = env!("CARGO_PKG_VERSION"), requires = "runner_image")]
    runner_image_version: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("captf-demo: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode, setup::SetupError> {
    let quiet = cli.quiet;
    let say = move |s: &str| {
        if !quiet {
            println!("   {s}");
        }
    };
    if !quiet {
        println!("== starting the simulator, the webhook and the controller");
    }
    let released = cli.runner_image.clone().map(|archive| setup::ReleasedRunner {
        archive,
        version: cli.runner_image_version.clone(),
    });
    let scripted_because = if cli.scripted {
        Some("--scripted")
    } else if cli.serve {
        Some("--serve: the objects you apply yourself name modules that can't be fetched offline")
    } else {
        None
    };
    // The scripted lifecycle starts at a fixed time, so its timeline reads the same every run;
    // serving alone starts at the wall clock, so that with --speed 1 the ages kubectl computes
    // from the machine's clock (kubectl describe) read as on a cluster.
    let mut stack = if cli.no_script {
        let now = k8s_openapi::jiff::Timestamp::from_second(k8s_openapi::jiff::Timestamp::now().as_second())
            .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now());
        setup::start_at(None, &say, scripted_because, released.as_ref(), now).await?
    } else {
        setup::start(None, &say, scripted_because, released.as_ref()).await?
    };
    // One line, even with --quiet: it says what the summary's "runners" column means.
    match &stack.runners {
        Runners::Real { binary, .. } => println!(
            "   runners: real captf-runner with {binary} and the test provider, as processes \
             of the simulator's kubelet (the failures shown on cue stay scripted)"
        ),
        Runners::Scripted { why } if cli.scripted || cli.serve => {
            println!("   runners: scripted ({why})")
        }
        Runners::Scripted { why } => {
            println!("   runners: real OpenTofu is not available here, every step plays with scripted runners: {why}")
        }
    }
    let real = match &stack.runners {
        Runners::Real { world, .. } => Some(
            RealTerraform::start(&stack.work.path().join("modules"), world.clone())
                .await
                .map_err(setup::SetupError::Modules)?,
        ),
        Runners::Scripted { .. } => None,
    };
    let client = stack.sim.client()?;
    let mut demo = Demo::new(&stack.sim, client);
    demo.real = real;
    demo.echo = !quiet;
    demo.controller_metrics = Some(stack.controller_env.metrics_addr);
    let mut code = ExitCode::SUCCESS;

    if !cli.no_script {
        demo.prepare();
        let rows = demo.run_script().await;
        println!("\n== summary (simulated time {})", stack.sim.now().strftime("%H:%M:%S"));
        println!("{}", summary::render(&rows, 60));
        let binary = match &stack.runners {
            Runners::Real { binary, .. } => binary.as_str(),
            Runners::Scripted { .. } => "a real binary",
        };
        println!("{}", summary::runners_line(&rows, binary));
        let denied = stack.sim.denied();
        match rows.iter().find(|r| !r.ok) {
            None if !denied.is_empty() => {
                println!(
                    "the chart's RBAC denied {} request(s) of the controller; the first: {}",
                    denied.len(),
                    denied[0]
                );
                code = ExitCode::FAILURE;
            }
            None => println!("all {} steps behaved as expected", rows.len()),
            Some(r) => {
                println!("step \"{}\" FAILED: {}", r.step, r.observed);
                // The logs are what tells why: keep the work directory they live in.
                stack.work.disable_cleanup(true);
                println!(
                    "logs: {} and {}",
                    stack.webhook.log.display(),
                    stack.controller.log.display()
                );
                code = ExitCode::FAILURE;
            }
        }
    }

    if cli.serve {
        if let Err(e) = stack.sim.write_kubeconfig(&cli.kubeconfig) {
            eprintln!("captf-demo: {e}");
            return Ok(ExitCode::from(2));
        }
        // Each object's sim.captf.io/outcome annotation chooses what its next Jobs do; the
        // samples show one of each.
        stack.sim.honour_outcome_annotations();
        let samples = match playground::create_samples(&stack.sim.client()?).await {
            Ok(objects) => playground::describe_samples(&objects),
            Err(e) => {
                eprintln!("captf-demo: {e}");
                return Ok(ExitCode::from(2));
            }
        };
        // The SIGINT stream is made once, before the commands are printed: a `ctrl_c()` future
        // made anew in each turn of the loop listens only while it exists, so a Ctrl-C that came
        // while `observe` ran was lost and the demo never stopped.
        let mut interrupt = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("captf-demo: cannot listen for Ctrl-C: {e}");
                return Ok(ExitCode::from(2));
            }
        };
        stack.sim.run_clock(Duration::from_secs(1), cli.speed);
        let kc = std::fs::canonicalize(&cli.kubeconfig).unwrap_or(cli.kubeconfig.clone());
        println!(
            "\n== serving (the simulated clock runs at {}x); Ctrl-C stops everything",
            cli.speed
        );
        for line in playground::serving_lines(&kc, &stack.webhook.log, &stack.controller.log, &samples) {
            println!("   {line}");
        }
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tokio::select! {
                _ = tick.tick() => demo.observe(),
                _ = interrupt.recv() => break,
            }
        }
        println!("\n== stopping");
    }
    drop(demo);
    stack.stop().await;
    Ok(code)
}

//! Runs the demo exactly as the README states it (`./scripts/demo.sh` from the repository root)
//! and checks its exit status and its summary table.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use captf_demo::lifecycle::STEPS;

#[test]
fn readme_main_command_plays_every_step_and_exits_zero() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        readme.contains("./scripts/demo.sh"),
        "the README names the main command"
    );
    let started = Instant::now();
    let out = Command::new("./scripts/demo.sh")
        .current_dir(&root)
        .output()
        .expect("run ./scripts/demo.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}\n{stdout}\n{stderr}", out.status);
    let summary = stdout
        .split("== summary")
        .nth(1)
        .unwrap_or_else(|| panic!("no summary in:\n{stdout}"));
    for step in STEPS {
        let row = summary
            .lines()
            .find(|l| l.starts_with(&format!("| {} ", step.name)))
            .unwrap_or_else(|| panic!("no row for step {} in:\n{summary}", step.name));
        let verdict = row.trim_end_matches('|').rsplit('|').next().unwrap_or("").trim();
        assert_eq!(verdict, "ok", "step {} in:\n{summary}", step.name);
    }
    assert!(summary.contains(&format!("all {} steps behaved as expected", STEPS.len())));
    // The timeline is stamped with the simulated clock, which starts at 10:00:00.
    assert!(stdout.contains("10:00:00  TerraformCluster/demo"), "{stdout}");
    println!("demo took {:?} of real time (build included)", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(600));
}

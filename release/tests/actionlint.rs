//! The GitHub Actions workflows (`.github/workflows/*.yml`) run only on GitHub: actionlint, built
//! from its Go module (realparts/actionlint), checks them here.

use std::process::Command;

use captf_release_tests::{tools_bin, workspace_root};

#[test]
fn actionlint_passes_on_every_workflow() {
    let actionlint = tools_bin().join("actionlint");
    if !actionlint.is_file() {
        captf_testsupport::cannot_run(format!(
            "actionlint not found at {} (run `bash scripts/setup-tools.sh`, or set CAPTF_TOOLS_BIN)",
            actionlint.display()
        ));
        return;
    }
    let dir = workspace_root().join(".github/workflows");
    let mut workflows: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
        .collect();
    workflows.sort();
    assert!(
        workflows.iter().any(|p| p.ends_with("release.yml")),
        "no release workflow in {}",
        dir.display()
    );
    let out = Command::new(&actionlint)
        .current_dir(workspace_root())
        .arg("-no-color")
        .args(&workflows)
        .output()
        .expect("actionlint");
    assert!(
        out.status.success(),
        "actionlint found problems in {workflows:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

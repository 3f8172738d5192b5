//! What the harness's tests share: finding the processes a start left behind.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

/// The start timeout the tests give a control plane that should come up: wider than the
/// default, because the tests share two cores with everything else the suite runs.
pub const TEST_READY_TIMEOUT: Duration = Duration::from_secs(180);

/// The live processes (not zombies, not this test) whose command line mentions `dir`: every
/// component's arguments name a file in its control plane's folder, so this is what a start
/// under `dir` left running.
pub fn processes_mentioning(dir: &Path) -> Vec<(u32, String)> {
    let needle = dir.display().to_string();
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) {
            found.push((pid, cmdline));
        }
    }
    found
}

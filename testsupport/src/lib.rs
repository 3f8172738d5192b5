//! The one rule for a test that cannot run on this machine (no root for a private namespace, a
//! tool that is not installed, no binaries for the real control plane): outside CI it prints
//! `SKIPPED: <why>` and returns, so it passes unrun but says so; under CI it **fails** with the
//! reason, since a CI run must run every test. "Under CI" means the environment variable `CI`
//! is set to anything but empty, `0` or `false` (any case, surrounding spaces ignored): see
//! [`is_ci_value`].
//!
//! Every test of the workspace that can skip goes through [`cannot_run`] (a test crate has this
//! crate as a dev-dependency; `captf-kubetest`, itself test-only, as a dependency). No shipped
//! binary links it.
//!
//! ```
//! fn namespaces_unavailable() -> Option<String> {
//!     None
//! }
//!
//! fn a_test() {
//!     if let Some(why) = namespaces_unavailable() {
//!         captf_testsupport::cannot_run(format!("{why}; this test needs a private mount namespace"));
//!         return;
//!     }
//!     // ... the test ...
//! }
//! # a_test();
//! ```

pub mod proc_stats;

use std::fmt::Display;

/// Clears from `cmd` the variables cargo sets for a test it runs (`CARGO_MANIFEST_DIR`,
/// `CARGO_PKG_NAME`, `CARGO_CRATE_NAME`, ...; `scripts/run-tests.py` sets the same; a user's
/// own settings such as `CARGO_HOME` or `CARGO_TARGET_DIR` stay), for a command that runs cargo
/// itself (a script such as
/// `scripts/demo.sh`, or `cargo build`). Build scripts watch some of them (`ring`'s watches
/// `CARGO_MANIFEST_DIR` and `CARGO_PKG_NAME`): a cargo started with a test's values sees them
/// changed and rebuilds that crate and everything above it, and the next cargo started without
/// them rebuilds it all again, minutes each time on a small machine.
pub fn without_test_cargo_env(cmd: &mut std::process::Command) -> &mut std::process::Command {
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let set_by_cargo = ["CARGO_PKG_", "CARGO_BIN_EXE_", "CARGO_MANIFEST_"]
            .iter()
            .any(|p| key.starts_with(p))
            || [
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
                "OUT_DIR",
            ]
            .contains(&key);
        if set_by_cargo {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// A tool `scripts/setup-tools.sh` installs (`kubectl`, `helm`, ...): in `$CAPTF_TOOLS_BIN`,
/// else in the workspace's `.tools/bin`; an error naming where it looked and how to install it.
pub fn installed_tool(name: &str) -> Result<std::path::PathBuf, String> {
    let dir = std::env::var_os("CAPTF_TOOLS_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/bin"));
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{name} not found at {}: run `bash scripts/setup-tools.sh` (or set CAPTF_TOOLS_BIN)",
            path.display()
        ))
    }
}

/// The environment variable that marks a CI run.
pub const CI_VAR: &str = "CI";

/// Whether a value of `CI` marks a CI run: set, and not empty, `0` or `false` (any case,
/// surrounding spaces ignored).
pub fn is_ci_value(ci: Option<&str>) -> bool {
    ci.map(str::trim)
        .is_some_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// `CI` of this process, as text (a value that is not UTF-8 is read lossily, so it still counts
/// as set).
fn ci_value() -> Option<String> {
    std::env::var_os(CI_VAR).map(|v| v.to_string_lossy().into_owned())
}

/// Whether this process runs under CI ([`is_ci_value`] of `CI`).
pub fn is_ci() -> bool {
    is_ci_value(ci_value().as_deref())
}

/// What a test that cannot run does, under a value of `CI`.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Outside CI: print this line (`SKIPPED: <why>`) and return.
    Skip(String),
    /// Under CI: fail with this message.
    Fail(String),
}

/// The rule, pure: the verdict for a test that cannot run because of `why` when `CI` is `ci`.
pub fn verdict(ci: Option<&str>, why: &str) -> Verdict {
    if is_ci_value(ci) {
        Verdict::Fail(format!(
            "this test cannot run here, and {CI_VAR}={:?} marks a CI run, where it fails instead of being skipped: {why}",
            ci.unwrap_or_default()
        ))
    } else {
        Verdict::Skip(format!("SKIPPED: {why}"))
    }
}

/// The rule, applied: the calling test cannot run here because of `why`. Outside CI this prints
/// `SKIPPED: <why>` and returns (the caller then returns, or skips the part that cannot run);
/// under CI it panics with the reason, failing the test.
#[track_caller]
pub fn cannot_run(why: impl Display) {
    match verdict(ci_value().as_deref(), &why.to_string()) {
        Verdict::Skip(line) => eprintln!("{line}"),
        Verdict::Fail(message) => panic!("{message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cargo (and scripts/run-tests.py) runs this test with `CARGO_PKG_NAME` and
    /// `CARGO_MANIFEST_DIR` set: a command for cargo drops them and keeps the rest.
    #[test]
    fn a_command_that_runs_cargo_loses_the_variables_cargo_sets_for_a_test() {
        for var in ["CARGO_PKG_NAME", "CARGO_MANIFEST_DIR"] {
            assert!(std::env::var_os(var).is_some(), "{var} is not set for this test");
        }
        let mut cmd = std::process::Command::new("cargo");
        cmd.env("CARGO_TARGET_DIR", "/somewhere");
        without_test_cargo_env(&mut cmd);
        let envs: Vec<(String, Option<String>)> = cmd
            .get_envs()
            .map(|(k, v)| (k.to_string_lossy().into(), v.map(|v| v.to_string_lossy().into())))
            .collect();
        for var in ["CARGO_PKG_NAME", "CARGO_MANIFEST_DIR"] {
            assert!(envs.contains(&(var.to_string(), None)), "{var} is kept: {envs:?}");
        }
        assert!(
            envs.contains(&("CARGO_TARGET_DIR".to_string(), Some("/somewhere".to_string()))),
            "{envs:?}"
        );
        assert!(!envs.iter().any(|(k, _)| k == "CARGO_HOME" || k == "PATH"), "{envs:?}");
    }

    #[test]
    fn ci_is_any_value_but_empty_zero_or_false() {
        for ci in ["true", "1", "yes", "TRUE", "github", " true ", "no"] {
            assert!(is_ci_value(Some(ci)), "CI={ci:?}");
        }
        for not_ci in [
            None,
            Some(""),
            Some("  "),
            Some("0"),
            Some("false"),
            Some("FALSE"),
            Some(" False "),
        ] {
            assert!(!is_ci_value(not_ci), "CI={not_ci:?}");
        }
    }

    #[test]
    fn under_ci_a_test_that_cannot_run_fails_with_the_reason() {
        match verdict(Some("true"), "no root") {
            Verdict::Fail(message) => {
                assert!(message.ends_with(": no root"), "{message}");
                assert!(message.contains("CI=\"true\""), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn elsewhere_it_is_skipped_and_says_why() {
        for not_ci in [None, Some(""), Some("0"), Some("false")] {
            assert_eq!(
                verdict(not_ci, "no root"),
                Verdict::Skip("SKIPPED: no root".into()),
                "CI={not_ci:?}"
            );
        }
    }
}

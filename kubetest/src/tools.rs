//! Where the control plane's binaries are, and what a test does when they are not there.

use std::path::{Path, PathBuf};

/// The binaries `scripts/setup-tools.sh` builds from their Go modules (see `realparts/`).
pub const BINARIES: [&str; 3] = ["etcd", "kube-apiserver", "kube-controller-manager"];

#[derive(Debug, thiserror::Error)]
pub enum LocateToolsError {
    #[error(
        "{} not found in {dir} (run `bash scripts/setup-tools.sh`, or set CAPTF_TOOLS_BIN to the folder holding them)",
        missing.join(", ")
    )]
    Missing { dir: PathBuf, missing: Vec<&'static str> },
}

/// The control plane's binaries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tools {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
}

impl Tools {
    /// The binaries in `$CAPTF_TOOLS_BIN`, else in the workspace's `.tools/bin`.
    pub fn locate() -> Result<Tools, LocateToolsError> {
        let dir = std::env::var_os("CAPTF_TOOLS_BIN")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/bin"));
        Tools::locate_in(&dir)
    }

    /// The binaries in `dir`; every one that is missing (or not a file) is named.
    pub fn locate_in(dir: &Path) -> Result<Tools, LocateToolsError> {
        let missing: Vec<&'static str> = BINARIES.into_iter().filter(|name| !dir.join(name).is_file()).collect();
        if !missing.is_empty() {
            return Err(LocateToolsError::Missing {
                dir: dir.to_path_buf(),
                missing,
            });
        }
        Ok(Tools {
            etcd: dir.join("etcd"),
            kube_apiserver: dir.join("kube-apiserver"),
            kube_controller_manager: dir.join("kube-controller-manager"),
        })
    }
}

/// What a test does when the binaries are not found: the workspace's one rule for a test that
/// cannot run ([`captf_testsupport::verdict`]): under CI it fails (a test that cannot run must
/// not pass); elsewhere it is skipped, and says why.
pub use captf_testsupport::Verdict as Missing;

/// The decision for a lookup result under a `CI` value: `None` when the tools are there.
pub fn missing_verdict(ci: Option<&str>, located: &Result<Tools, LocateToolsError>) -> Option<Missing> {
    let err = located.as_ref().err()?;
    Some(captf_testsupport::verdict(
        ci,
        &format!("the real control plane cannot start: {err}"),
    ))
}

/// For tests: the binaries, or `None` after printing why the test is skipped; under CI a
/// missing binary panics, so the test fails instead of passing unrun
/// ([`captf_testsupport::cannot_run`]).
#[track_caller]
pub fn tools_or_skip() -> Option<Tools> {
    match Tools::locate() {
        Ok(tools) => Some(tools),
        Err(err) => {
            captf_testsupport::cannot_run(format!("the real control plane cannot start: {err}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn dir_with(names: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for n in names {
            std::fs::write(dir.path().join(n), "").unwrap();
        }
        dir
    }

    #[test]
    fn every_missing_binary_is_named_with_the_folder_searched() {
        let dir = dir_with(&["etcd"]);
        let err = Tools::locate_in(dir.path()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("kube-apiserver, kube-controller-manager"), "{msg}");
        assert!(!msg.contains("etcd,"), "{msg}");
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
    }

    #[test]
    fn all_three_binaries_present_locate_to_their_paths() {
        let dir = dir_with(&BINARIES);
        let tools = Tools::locate_in(dir.path()).unwrap();
        assert_eq!(tools.kube_apiserver, dir.path().join("kube-apiserver"));
        assert_eq!(tools.etcd, dir.path().join("etcd"));
    }

    #[test]
    fn a_directory_named_like_a_binary_is_not_the_binary() {
        let dir = dir_with(&["etcd", "kube-apiserver"]);
        std::fs::create_dir(dir.path().join("kube-controller-manager")).unwrap();
        assert!(Tools::locate_in(dir.path()).is_err());
    }

    #[test]
    fn under_ci_missing_binaries_fail_the_test_instead_of_skipping_it() {
        let empty = tempfile::tempdir().unwrap();
        let located = Tools::locate_in(empty.path());
        for ci in ["true", "1", "yes"] {
            assert!(
                matches!(missing_verdict(Some(ci), &located), Some(Missing::Fail(_))),
                "CI={ci}"
            );
        }
        for not_ci in [None, Some(""), Some("0"), Some("false"), Some("FALSE")] {
            match missing_verdict(not_ci, &located) {
                Some(Missing::Skip(why)) => assert!(why.starts_with("SKIPPED: "), "{why}"),
                other => panic!("CI={not_ci:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn present_binaries_give_no_verdict_even_under_ci() {
        let dir = dir_with(&BINARIES);
        assert_eq!(missing_verdict(Some("true"), &Tools::locate_in(dir.path())), None);
    }
}

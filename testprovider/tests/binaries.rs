//! The pinned binaries themselves: each reports the version its pin says, as a release (an
//! OpenTofu built without `-X github.com/opentofu/opentofu/version.dev=no` says `1.12.6-dev`),
//! and `tofu`, the runner's default, is the newest pinned OpenTofu.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use captf_testprovider::harness::{Binary, DEFAULT_TOFU, MATRIX, tools_bin};

fn reported_version(bin: Binary) -> String {
    let out = Command::new(bin.path().unwrap())
        .args(["version", "-json"])
        .env("CHECKPOINT_DISABLE", "1")
        // OpenTofu 1.12 prints problems of the CLI configuration (a missing file) on stdout, before the
        // JSON; this is about the version only.
        .env_remove("TF_CLI_CONFIG_FILE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{bin} version -json: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["terraform_version"].as_str().unwrap().to_string()
}

#[test]
fn every_pinned_binary_reports_its_pinned_version_as_a_release() {
    for bin in MATRIX {
        assert_eq!(reported_version(bin), bin.version().unwrap(), "{bin}");
    }
}

#[test]
fn tofu_is_the_newest_pinned_opentofu() {
    let tofu = tools_bin().join("tofu");
    let target = std::fs::read_link(&tofu).unwrap();
    assert_eq!(
        target,
        std::path::PathBuf::from(DEFAULT_TOFU.file_name()),
        "{}",
        tofu.display()
    );
}

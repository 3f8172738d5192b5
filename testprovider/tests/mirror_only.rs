//! `terraform init` with providers from a filesystem mirror named ONLY by a CLI configuration
//! file (`TF_CLI_CONFIG_FILE`, as runner pods get it from `spec.jobs.terraformCliConfig`) needs
//! no network: it runs in a new network namespace, which has no interface but a down loopback,
//! with an empty `HOME` and no other environment, so neither `~/.terraformrc`, the implicit
//! plugin directories nor a plugin cache can stand in for the mirror.
//!
//! Making a network namespace needs root (CAP_SYS_ADMIN); where it can't be made the test says
//! so and skips, except under `CI`, where that fails it (`captf_testsupport::cannot_run`, the
//! rule the runner's real-Terraform tests follow too).

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};

use captf_testprovider::harness::{PROVIDER_SOURCE, PROVIDER_VERSION, Sandbox, THING_MODULE};

/// Why a network namespace can't be made here, if it can't.
fn no_network_namespace() -> Option<String> {
    match Command::new("unshare").args(["--net", "true"]).output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "unshare --net fails here ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("unshare is not available: {e}")),
    }
}

/// `terraform init` of `module` in `work`, without any network, with `cli_config` as the only
/// configuration.
fn offline_init(sb: &Sandbox, work: &Path, module: &Path, cli_config: &Path) -> Output {
    let home = work.with_extension("home");
    std::fs::create_dir_all(&home).unwrap();
    let from = format!("-from-module={}", module.display());
    let out = Command::new("unshare")
        .arg("--net")
        .arg("--")
        .arg(&sb.terraform)
        .args(["init", "-input=false", "-no-color", &from])
        .current_dir(work)
        .env_clear()
        .env("HOME", &home)
        .env("TF_CLI_CONFIG_FILE", cli_config)
        .env("CHECKPOINT_DISABLE", "1")
        .env("TF_IN_AUTOMATION", "1")
        .output()
        .unwrap();
    eprintln!(
        "terraform init: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn init_installs_providers_from_a_filesystem_mirror_named_only_by_the_cli_config_without_network() {
    if let Some(why) = no_network_namespace() {
        captf_testsupport::cannot_run(format!("{why}; this test needs a network namespace of its own"));
        return;
    }
    let sb = Sandbox::new().unwrap();
    let module = sb.module("thing", THING_MODULE).unwrap();
    // The CLI configuration as a runner pod gets it: its own read-only file, naming the mirror
    // (a volume in a pod) and nothing else.
    let config_dir = sb.path().join("captf-terraform");
    std::fs::create_dir_all(&config_dir).unwrap();
    let cli_config = config_dir.join("terraform.rc");
    std::fs::copy(&sb.cli_config, &cli_config).unwrap();
    let text = std::fs::read_to_string(&cli_config).unwrap();
    assert!(text.contains("filesystem_mirror"), "{text}");

    let work = sb.path().join("mirrored");
    std::fs::create_dir_all(&work).unwrap();
    let out = offline_init(&sb, &work, &module, &cli_config);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("Installing {PROVIDER_SOURCE} v{PROVIDER_VERSION}")),
        "{stdout}"
    );
    let lock = std::fs::read_to_string(work.join(".terraform.lock.hcl")).unwrap();
    assert!(lock.contains(PROVIDER_SOURCE), "{lock}");

    // The same init without the mirror in the configuration fails: the network really is gone,
    // so the mirror is what made the first one work.
    let bare = config_dir.join("bare.rc");
    std::fs::write(&bare, "# no provider_installation\n").unwrap();
    let work = sb.path().join("bare");
    std::fs::create_dir_all(&work).unwrap();
    let out = offline_init(&sb, &work, &module, &bare);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(PROVIDER_SOURCE), "{stderr}");
    assert!(stderr.contains("could not connect to captf.io"), "{stderr}");
}

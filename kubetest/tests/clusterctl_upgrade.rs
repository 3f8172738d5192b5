//! `clusterctl upgrade` from CAPTF 0.1.0 on the real control plane, with the real clusterctl and
//! cert-manager: `clusterctl init --infrastructure terraform:v0.1.0` from a local repository
//! holding the committed v0.1.0 and v0.2.0 folders (the metadata of v0.2.0 names both release
//! series), objects in every state (`common::upgrade::seed`), then `clusterctl upgrade apply` to
//! v0.2.0 and everything `Seeded::check_after_upgrade` asks. The Deployments clusterctl installs
//! run as pods of the process kubelet: 0.1.0's images are its webhook, controller and runner built
//! from its release commit (`scripts/build-release.sh`), 0.2.0's the workspace's.
//!
//! The variables live in `clusterctl.yaml`, as docs/install.md tells users: a non-default value
//! set at `init` is in the upgraded Deployment's flags, and a variable only 0.2.0 has takes
//! effect at the upgrade. clusterctl upgrades the CRDs itself; `kubectl captf migrate-storage`
//! then leaves `v1beta1` alone stored.
//!
//! Without the binaries or the built release this test fails under `CI` and skips elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use captf_kubetest::cert_manager::prerequisites_or_skip;
use captf_kubetest::tools_or_skip;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;

use common::run_ok as run;
use common::upgrade::{FROM, GROUP, Images, Release, Runners, Stage, crd_names, plugin, seed, until_only};

const NS: &str = "default";
const SYSTEM: &str = "captf-system";
/// The release upgraded to: this workspace's.
const TO: &str = concat!("v", env!("CARGO_PKG_VERSION"));
/// Variables in clusterctl.yaml: one both releases have, not at its default (10), and one only
/// 0.2.0 has (default 8).
const VARIABLES: &str = "CAPTF_MAX_RUNNING_JOBS_PER_NAMESPACE: \"7\"\nCAPTF_CONCURRENCY: \"3\"\n";

/// The image a release's components name for a component by default.
fn default_image(components: &str, variable: &str) -> String {
    let marker = format!("${{{variable}:=");
    let at = components
        .find(&marker)
        .unwrap_or_else(|| panic!("the components do not name ${{{variable}}}"));
    let rest = &components[at + marker.len()..];
    rest[..rest.find('}').unwrap()].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusterctl_upgrade_from_0_1_0_keeps_every_object_state_and_variable() {
    let Some(tools) = tools_or_skip() else {
        return;
    };
    let bin = tools.etcd.parent().unwrap().to_path_buf();
    let tools_root = bin.parent().unwrap().to_path_buf();
    let Some((cert_manager, _)) = prerequisites_or_skip(&bin, &["clusterctl", "kubectl"]) else {
        return;
    };
    let Some(release) = Release::built(FROM) else {
        return;
    };
    let Some(runners) = Runners::assemble(&release) else {
        return;
    };
    let folder = |v: &str| {
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../clusterctl/infrastructure-terraform")
                .join(v)
                .join("infrastructure-components.yaml"),
        )
        .unwrap()
    };
    let images = |v: &str| {
        let components = folder(v);
        let of = |c: &str| default_image(&components, &format!("CAPTF_{c}_IMAGE"));
        Images {
            runner: of("RUNNER"),
            controller: of("CONTROLLER"),
            webhook: of("WEBHOOK"),
        }
    };
    let (old, new) = (images(&format!("v{FROM}")), images(TO));
    let stage = Stage::start(tools, &cert_manager, &release, &runners, &old, &new).await;
    let (admin, kubeconfig) = (stage.admin.clone(), stage.kubeconfig.clone());
    let files = tempfile::tempdir().unwrap();

    let repo = common::clusterctl::local_repository_with(
        &tools_root,
        files.path(),
        &cert_manager,
        &[&format!("v{FROM}"), TO],
        VARIABLES,
    );
    let clusterctl = |args: &[&str]| {
        run(std::process::Command::new(bin.join("clusterctl"))
            .args(args)
            .arg("--config")
            .arg(repo.join("clusterctl.yaml"))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
            .env("XDG_CONFIG_HOME", files.path().join("config")))
    };
    let core = format!("cluster-api:{}", common::clusterctl::capi_version(&tools_root));
    clusterctl(&[
        "init",
        "--core",
        &core,
        "--infrastructure",
        &format!("terraform:v{FROM}"),
        "--bootstrap",
        "-",
        "--control-plane",
        "-",
    ]);
    let args = || common::clusterctl::deployment_args(&admin, SYSTEM, "captf-controller", "manager");
    let before = args().await;
    assert!(
        before.contains(&"--max-running-jobs-per-namespace=7".to_string()),
        "{before:?}"
    );
    until_only(&admin, SYSTEM, &old.serving(), "0.1.0's pods run").await;

    let seeded = seed(&admin, NS, &stage.modules, &runners).await;

    let plan = clusterctl(&["upgrade", "plan"]);
    assert!(plan.contains(TO), "clusterctl offers {TO}: {plan}");
    clusterctl(&[
        "upgrade",
        "apply",
        "--infrastructure",
        &format!("{SYSTEM}/terraform:{TO}"),
    ]);
    until_only(&admin, SYSTEM, &new.serving(), "only 0.2.0's pods run").await;
    let after = args().await;
    for flag in ["--max-running-jobs-per-namespace=7", "--concurrency=3"] {
        assert!(after.contains(&flag.to_string()), "{flag} after the upgrade: {after:?}");
    }
    seeded.check_after_upgrade(&admin, &runners, &stage.logs()).await;

    // clusterctl kept v1alpha1 stored beside v1beta1 (it migrates only what an earlier upgrade
    // left); the documented step leaves v1beta1 alone.
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let stored = |crd: CustomResourceDefinition| crd.status.unwrap().stored_versions.unwrap();
    let crd = crds.get(&format!("terraformclusters.{GROUP}")).await.unwrap();
    assert_eq!(stored(crd), ["v1alpha1", "v1beta1"]);
    let out = plugin(&kubeconfig, &["migrate-storage"]);
    assert!(out.contains("storedVersions [v1alpha1, v1beta1] -> [v1beta1]"), "{out}");
    for name in crd_names() {
        let crd = crds.get(&name).await.unwrap();
        assert_eq!(stored(crd), ["v1beta1"], "{name}");
    }
}

//! Upgrading a Helm release of CAPTF 0.1.0 to this chart, and going back, on the real control
//! plane with the real cert-manager: the sequence docs/install.md ("Upgrading" and "Going back to
//! 0.1") and the README tell Helm users, played step by step.
//!
//! 0.1.0 is the release `release/released.txt` names: its chart (CRDs in `crds/`, serving and
//! storing `v1alpha1` alone) and its webhook, controller and runner built from that commit by
//! `scripts/build-release.sh`, run by the process kubelet under the chart's image names, beside
//! this workspace's binaries under the new chart's. Objects in every state
//! (`common::upgrade::seed`) live through:
//! - the upgrade: the CRDs adopted by Helm, `helm upgrade`, then everything
//!   `Seeded::check_after_upgrade` asks, then `kubectl captf migrate-storage`;
//! - going back: `kubectl captf migrate-storage --to v1alpha1`, then `helm rollback` to 0.1.0,
//!   whose controller and webhook serve every object again and apply a new one.
//!
//! Without the binaries or the built release this test fails under `CI` and skips elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use captf_kubetest::cert_manager::{CertManager, prerequisites_or_skip};
use captf_kubetest::tools_or_skip;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;

use common::run_ok as run;
use common::upgrade::{
    FROM, GROUP, Images, PATIENCE, Release, Runners, Stage, applied, clusters, crd_names, get, helm, jobs_of, plugin,
    seed, states, until, until_only,
};

const NS: &str = "captf-system";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_upgrade_from_0_1_0_loses_nothing_and_a_rollback_after_migrating_storage_back_serves_every_object() {
    let Some(tools) = tools_or_skip() else {
        return;
    };
    let bin = tools.etcd.parent().unwrap().to_path_buf();
    let Some((cert_manager, _)) = prerequisites_or_skip(&bin, &["helm", "kubectl"]) else {
        return;
    };
    let Some(release) = Release::built(FROM) else {
        return;
    };
    let Some(runners) = Runners::assemble(&release) else {
        return;
    };
    let old_chart = release.chart();
    let new_chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/captf");
    let images = |chart: &Path| {
        let of = |c: &str| captf_chart_tests::default_image_of(chart, c).unwrap();
        Images {
            runner: of("runner"),
            controller: of("controller"),
            webhook: of("webhook"),
        }
    };
    let (old, new) = (images(&old_chart), images(&new_chart));
    assert_ne!(old.controller, new.controller);
    let stage = Stage::start(tools, &cert_manager, &release, &runners, &old, &new).await;
    let Stage {
        admin,
        kubeconfig,
        modules,
        ..
    } = &stage;
    let (admin, kubeconfig) = (admin.clone(), kubeconfig.clone());
    cert_manager.helm_install(&kubeconfig).unwrap();
    CertManager::until_ready(&admin, PATIENCE).await.unwrap();

    // 0.1.0, as its README said: `helm install`, objects at v1alpha1.
    let old_chart_arg = old_chart.to_str().unwrap();
    helm(
        &bin,
        &kubeconfig,
        NS,
        &[
            "install",
            "captf",
            old_chart_arg,
            "--create-namespace",
            "--wait",
            "--timeout",
            "4m",
        ],
    );
    let seeded = seed(&admin, NS, modules, &runners).await;

    // The upgrade, as the README says: Helm adopts the CRDs 0.1.0 kept in `crds/`, then
    // `helm upgrade` with this chart.
    for name in crd_names() {
        let crd = format!("crd/{name}");
        let kubectl = || {
            let mut c = std::process::Command::new(bin.join("kubectl"));
            c.arg("--kubeconfig").arg(&kubeconfig);
            c
        };
        run(kubectl()
            .args(["label", &crd])
            .args(["app.kubernetes.io/managed-by=Helm", "--overwrite"]));
        run(kubectl().args(["annotate", &crd, "--overwrite"]).args([
            "meta.helm.sh/release-name=captf",
            &format!("meta.helm.sh/release-namespace={NS}"),
        ]));
    }
    let new_chart_arg = new_chart.to_str().unwrap();
    helm(
        &bin,
        &kubeconfig,
        NS,
        &["upgrade", "captf", new_chart_arg, "--wait", "--timeout", "4m"],
    );
    until_only(&admin, NS, &new.serving(), "only 0.2.0's pods run").await;
    seeded.check_after_upgrade(&admin, &runners, &stage.logs()).await;

    // Storage migrated: v1beta1 alone.
    let out = plugin(&kubeconfig, &["migrate-storage"]);
    assert!(out.contains("storedVersions [v1alpha1, v1beta1] -> [v1beta1]"), "{out}");
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    for name in crd_names() {
        let crd = crds.get(&name).await.unwrap();
        assert_eq!(crd.status.unwrap().stored_versions.unwrap(), ["v1beta1"], "{name}");
    }

    // Going back, as docs/install.md says: store v1alpha1 alone first, then `helm rollback`.
    let alpha = clusters(&admin, NS, "v1alpha1");
    let beta = clusters(&admin, NS, "v1beta1");
    let names = ["ready", "awaiting", "failing", "inflight"];
    let mut specs = BTreeMap::new();
    for name in names {
        specs.insert(name, get(&beta, name).await.unwrap()["spec"].clone());
    }
    let ready_jobs = jobs_of(&admin, NS, "ready").await;
    let states_before = states(&admin, NS).await;
    let out = plugin(&kubeconfig, &["migrate-storage", "--to", "v1alpha1"]);
    assert!(
        out.contains("storedVersions [v1beta1] -> [v1alpha1]; v1alpha1 served alone"),
        "{out}"
    );
    helm(
        &bin,
        &kubeconfig,
        NS,
        &["rollback", "captf", "1", "--wait", "--timeout", "4m"],
    );
    until_only(&admin, NS, &old.serving(), "only 0.1.0's pods run again").await;
    // The CRDs were kept (their resource policy), storing and serving v1alpha1 alone.
    for name in crd_names() {
        let crd = crds.get(&name).await.unwrap();
        let served: Vec<&str> = crd
            .spec
            .versions
            .iter()
            .filter(|v| v.served)
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(served, ["v1alpha1"], "{name}");
        assert_eq!(crd.status.unwrap().stored_versions.unwrap(), ["v1alpha1"], "{name}");
    }
    for name in names {
        let o = get(&alpha, name).await.unwrap();
        assert_eq!(o["spec"], specs[name], "{name}");
    }
    assert_eq!(
        states(&admin, NS).await,
        states_before,
        "no state changed on the way back"
    );
    // 0.1.0 serves: its webhook admits a new object and its controller applies it.
    let again: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "TerraformCluster",
        "metadata": {"name": "again", "namespace": NS},
        "spec": {"module": {"source": modules.url("cluster.tar.gz")}, "variables": {"name": "again"}},
    }))
    .unwrap();
    until("0.1.0's webhook admits a new object", || {
        let (alpha, again) = (alpha.clone(), again.clone());
        async move { alpha.create(&PostParams::default(), &again).await.ok() }
    })
    .await;
    until("0.1.0 applies it", || {
        let alpha = alpha.clone();
        async move { get(&alpha, "again").await.filter(applied) }
    })
    .await;
    assert_eq!(
        jobs_of(&admin, NS, "ready").await,
        ready_jobs,
        "still nothing ran for `ready`"
    );
}

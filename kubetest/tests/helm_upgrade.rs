//! Upgrading a Helm release of CAPTF 0.1.0 to this chart, and going back, on the real control
//! plane with the real cert-manager: the sequence docs/install.md ("Upgrading" and "Going back")
//! tells Helm users, played step by step.
//!
//! 0.1.0 is the release `release/released.txt` names: its chart (CRDs in `crds/`, serving and
//! storing `v1alpha1` alone) and its webhook, controller and runner built from that commit by
//! `scripts/build-release.sh`, run by the process kubelet under the chart's image names, beside
//! this workspace's binaries under the new chart's. Objects in three states (applied and Ready; a
//! plan awaiting approval; failing in backoff) live through:
//! - the upgrade: the CRDs adopted by Helm, `helm upgrade`, the old objects read and written at
//!   both versions through the new webhook's `/convert`; no Job for the Ready object, the awaiting
//!   plan still awaiting the same hash (and applied once approved through a `v1alpha1` client),
//!   the backoff going on from its count, and every state Secret byte-identical where no apply
//!   ran; then `kubectl captf migrate-storage`;
//! - going back: `kubectl captf migrate-storage --to v1alpha1`, then `helm rollback` to 0.1.0,
//!   whose controller and webhook serve every object again and apply a new one.
//!
//! Without the binaries or the built release this test fails under `CI` and skips elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use captf_kubetest::cert_manager::{CertManager, prerequisites_or_skip};
use captf_kubetest::{ControlPlane, Options, tools_or_skip};
use captf_sim::process_kubelet::ProcessImage;
use captf_testprovider::runner_image::{ModuleServer, RUNNER_INSIDE, THING_MODULE, runner_image, tar_gz};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use common::{TEST_READY_TIMEOUT, run_ok as run};

const PATIENCE: Duration = Duration::from_secs(240);
const NS: &str = "captf-system";
const GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// The release upgraded from.
const FROM: &str = "0.1.0";
const KINDS: [&str; 6] = [
    "terraformclusters",
    "terraformmachinepools",
    "terraformmachines",
    "terraformmachinetemplates",
    "terraformclustertemplates",
    "terraformmachinepooltemplates",
];

fn clusters(client: &kube::Client, version: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, version, "TerraformCluster");
    Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::from_gvk_with_plural(&gvk, "terraformclusters"),
    )
}

/// Where `scripts/build-release.sh` put a release: its binaries and its source tree.
fn release_dir(version: &str) -> PathBuf {
    if let Some(d) = std::env::var_os("CAPTF_RELEASES_DIR") {
        return PathBuf::from(d).join(version);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"));
    cache.join("captf/releases").join(version)
}

async fn until<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(v) = probe().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: not within {PATIENCE:?}"))
}

fn condition(o: &Value, type_: &str) -> bool {
    o["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == type_ && c["status"] == "True"))
}

fn applied(o: &Value) -> bool {
    condition(o, "Ready") && condition(o, "UpToDate")
}

async fn get(api: &Api<DynamicObject>, name: &str) -> Option<Value> {
    api.get(name).await.ok().map(|o| serde_json::to_value(o).unwrap())
}

/// Every state Secret by name, with its data.
async fn states(admin: &kube::Client) -> BTreeMap<String, BTreeMap<String, Vec<u8>>> {
    Api::<Secret>::namespaced(admin.clone(), NS)
        .list(&ListParams::default().labels("tfstate=true"))
        .await
        .unwrap()
        .into_iter()
        .map(|s| {
            let data = s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
            (s.metadata.name.unwrap(), data)
        })
        .collect()
}

/// The names of the Jobs of one object.
async fn jobs_of(admin: &kube::Client, object: &str) -> Vec<String> {
    let mut names: Vec<String> = Api::<Job>::namespaced(admin.clone(), NS)
        .list(&ListParams::default().labels(&format!(
            "captf.io/object={}",
            captf_shared::names::object_id(captf_shared::kind::Kind::TerraformCluster, NS, object)
        )))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect();
    names.sort();
    names
}

/// The images the release's pods run now, with whether each pod is Ready.
async fn pod_images(admin: &kube::Client) -> Vec<String> {
    Api::<Pod>::namespaced(admin.clone(), NS)
        .list(&ListParams::default().labels("app.kubernetes.io/component in (controller,webhook)"))
        .await
        .unwrap()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .flat_map(|p| p.spec.unwrap().containers.into_iter().filter_map(|c| c.image))
        .collect()
}

fn helm(bin: &Path, kubeconfig: &Path, args: &[&str]) -> String {
    run(std::process::Command::new(bin.join("helm"))
        .args(args)
        .args(["-n", NS, "--kubeconfig"])
        .arg(kubeconfig))
}

fn plugin(kubeconfig: &Path, args: &[&str]) -> String {
    run(std::process::Command::new(common::webhook::binary("kubectl-captf"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_upgrade_from_0_1_0_loses_nothing_and_a_rollback_after_migrating_storage_back_serves_every_object() {
    let Some(tools) = tools_or_skip() else {
        return;
    };
    let bin = tools.etcd.parent().unwrap().to_path_buf();
    let Some((cert_manager, _)) = prerequisites_or_skip(&bin, &["helm", "kubectl"]) else {
        return;
    };
    let old = release_dir(FROM);
    let old_bin = old.join("bin");
    if !["captf-webhook", "captf-controller", "captf-runner"]
        .iter()
        .all(|b| old_bin.join(b).is_file())
    {
        captf_testsupport::cannot_run(format!(
            "release {FROM} is not built at {}: run `bash scripts/build-release.sh {FROM}`",
            old.display()
        ));
        return;
    }
    let old_chart = old.join("src/charts/captf");
    let new_chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/captf");
    let image_of = |chart: &Path, c: &str| captf_chart_tests::default_image_of(chart, c).unwrap();
    assert_ne!(image_of(&old_chart, "controller"), image_of(&new_chart, "controller"));

    let files = tempfile::tempdir().unwrap();
    let runner = match runner_image(files.path()) {
        Ok(image) => image.image,
        Err(e) => {
            captf_testsupport::cannot_run(format!("the runner's image cannot be assembled: {e}"));
            return;
        }
    };
    // The release's runner: the same image with its own runner program.
    let mut old_runner = runner.clone();
    for (inside, local) in &mut old_runner.files {
        if inside == RUNNER_INSIDE {
            *local = old_bin.join("captf-runner");
        }
    }
    let archive = tar_gz(&files.path().join("module"), THING_MODULE).unwrap();
    let modules = ModuleServer::start(vec![("cluster.tar.gz".into(), archive)])
        .await
        .unwrap();
    let mut opts = Options::new(tools);
    opts.ready_timeout = TEST_READY_TIMEOUT;
    let cp = ControlPlane::start(opts).await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let kubeconfig = cp.admin_kubeconfig();
    let root = tempfile::tempdir().unwrap();
    let mut kubelet_options = cp.kubelet_options("upgrade", root.path()).pod_network([modules.port()]);
    for (image, files) in cert_manager.images() {
        kubelet_options = kubelet_options.image(image, files);
    }
    let program = |inside: &str, local: PathBuf| ProcessImage::new(inside).file(inside, local);
    let _kubelet = cp
        .start_kubelet(
            kubelet_options
                .image(image_of(&old_chart, "runner"), old_runner)
                .image(
                    image_of(&old_chart, "controller"),
                    program("/captf-controller", old_bin.join("captf-controller")),
                )
                .image(
                    image_of(&old_chart, "webhook"),
                    program("/captf-webhook", old_bin.join("captf-webhook")),
                )
                .image(image_of(&new_chart, "runner"), runner)
                .image(
                    image_of(&new_chart, "controller"),
                    program("/captf-controller", common::controller_binary()),
                )
                .image(
                    image_of(&new_chart, "webhook"),
                    program("/captf-webhook", common::webhook::binary("captf-webhook")),
                ),
        )
        .await
        .unwrap();
    cert_manager.helm_install(&kubeconfig).unwrap();
    CertManager::until_ready(&admin, PATIENCE).await.unwrap();

    // 0.1.0, as its README said: `helm install`, objects at v1alpha1.
    helm(
        &bin,
        &kubeconfig,
        &[
            "install",
            "captf",
            old_chart.to_str().unwrap(),
            "--create-namespace",
            "--wait",
            "--timeout",
            "4m",
        ],
    );
    let alpha = clusters(&admin, "v1alpha1");
    let object = |name: &str, source: String, guard: Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "TerraformCluster",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"module": {"source": source}, "variables": {"name": name}, "guard": guard},
        }))
        .unwrap()
    };
    for (name, source, guard) in [
        ("ready", modules.url("cluster.tar.gz"), json!({})),
        ("awaiting", modules.url("cluster.tar.gz"), json!({"approval": "Always"})),
        ("failing", modules.url("missing.tar.gz"), json!({})),
    ] {
        let o = object(name, source, guard);
        until(&format!("0.1.0's webhook admits {name}"), || {
            let (alpha, o) = (alpha.clone(), o.clone());
            async move { alpha.create(&PostParams::default(), &o).await.ok() }
        })
        .await;
    }
    // Applied, and checked for drift once (which follows a first apply): nothing more is due.
    until("0.1.0 applies `ready` and checks it for drift", || {
        let alpha = alpha.clone();
        async move {
            get(&alpha, "ready")
                .await
                .filter(|o| applied(o) && o["status"]["lastDriftCheckTime"].is_string())
        }
    })
    .await;
    let awaiting = until("0.1.0 stops `awaiting` for approval", || {
        let alpha = alpha.clone();
        async move {
            get(&alpha, "awaiting")
                .await
                .filter(|o| o["status"]["pendingPlan"]["hash"].is_string())
        }
    })
    .await;
    let hash = awaiting["status"]["pendingPlan"]["hash"].as_str().unwrap().to_string();
    assert!(
        awaiting["status"]["pendingPlan"]["adds"].as_u64() >= Some(1),
        "{awaiting}"
    );
    let failing = until("0.1.0 backs off `failing`", || {
        let alpha = alpha.clone();
        async move {
            get(&alpha, "failing")
                .await
                .filter(|o| o["status"]["consecutiveFailures"]["apply"].as_u64() >= Some(1))
        }
    })
    .await;
    let failures = failing["status"]["consecutiveFailures"]["apply"].as_u64().unwrap();
    let before: BTreeMap<&str, Value> = [
        ("ready", get(&alpha, "ready").await.unwrap()),
        ("awaiting", get(&alpha, "awaiting").await.unwrap()),
        ("failing", failing.clone()),
    ]
    .into();
    let states_before = states(&admin).await;
    assert_eq!(states_before.len(), 3, "one per object: {:?}", states_before.keys());
    let ready_jobs = jobs_of(&admin, "ready").await;
    let awaiting_jobs = jobs_of(&admin, "awaiting").await;

    // The upgrade, as docs/install.md says: Helm adopts the CRDs 0.1.0 kept in `crds/`, then
    // `helm upgrade` with this chart.
    for kind in KINDS {
        let crd = format!("crd/{kind}.{GROUP}");
        run(std::process::Command::new(bin.join("kubectl"))
            .args(["--kubeconfig", kubeconfig.to_str().unwrap(), "label", &crd])
            .args(["app.kubernetes.io/managed-by=Helm", "--overwrite"]));
        run(std::process::Command::new(bin.join("kubectl"))
            .args([
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "annotate",
                &crd,
                "--overwrite",
            ])
            .args([
                "meta.helm.sh/release-name=captf",
                &format!("meta.helm.sh/release-namespace={NS}"),
            ]));
    }
    helm(
        &bin,
        &kubeconfig,
        &[
            "upgrade",
            "captf",
            new_chart.to_str().unwrap(),
            "--wait",
            "--timeout",
            "4m",
        ],
    );
    let new_images = [image_of(&new_chart, "controller"), image_of(&new_chart, "webhook")];
    until("only 0.2.0's pods run", || {
        let (admin, new_images) = (admin.clone(), new_images.clone());
        async move {
            let images = pod_images(&admin).await;
            (!images.is_empty() && images.iter().all(|i| new_images.contains(i))).then_some(())
        }
    })
    .await;
    let beta = clusters(&admin, "v1beta1");
    // Every object reads at both versions through the new webhook (once cainjector has put the
    // CA into the CRDs' conversion), unchanged.
    for (name, was) in &before {
        let now = until(&format!("{name} reads at v1alpha1 through conversion"), || {
            let alpha = alpha.clone();
            async move { get(&alpha, name).await }
        })
        .await;
        assert_eq!(now["spec"], was["spec"], "{name}");
        assert_eq!(now["metadata"]["uid"], was["metadata"]["uid"], "{name}");
        let at_beta = get(&beta, name).await.unwrap();
        assert_eq!(at_beta["spec"], was["spec"], "{name}");
    }
    let awaiting_now = get(&beta, "awaiting").await.unwrap();
    assert_eq!(
        awaiting_now["status"]["pendingPlan"]["hash"],
        hash.as_str(),
        "{awaiting_now}"
    );
    assert_eq!(
        awaiting_now["status"]["pendingPlan"]["add"], before["awaiting"]["status"]["pendingPlan"]["adds"],
        "the counts under v1beta1's names"
    );

    // The backoff goes on from its count under the new controller.
    let failing_now = until("0.2.0 retries `failing` after its backoff", || {
        let beta = beta.clone();
        async move {
            get(&beta, "failing")
                .await
                .filter(|o| o["status"]["consecutiveFailures"]["apply"].as_u64() > Some(failures))
        }
    })
    .await;
    assert_eq!(
        failing_now["status"]["lastSuccessTime"], before["failing"]["status"]["lastSuccessTime"],
        "{failing_now}"
    );

    // An old client approves the awaiting plan; the new controller applies it once.
    alpha
        .patch(
            "awaiting",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"captf.io/approve-plan": hash}}})),
        )
        .await
        .unwrap();
    until("0.2.0 applies the approved plan", || {
        let beta = beta.clone();
        async move { get(&beta, "awaiting").await.filter(applied) }
    })
    .await;
    // Applied once: one apply Job more than before (a drift check may follow it, as after any
    // apply whose object was never checked for drift).
    let applies = |jobs: &[String]| jobs.iter().filter(|j| j.contains("-apply-")).count();
    let applied_jobs = jobs_of(&admin, "awaiting").await;
    assert_eq!(
        applies(&applied_jobs),
        applies(&awaiting_jobs) + 1,
        "one apply Job after the approval: {awaiting_jobs:?} -> {applied_jobs:?}"
    );
    // The Ready object ran nothing, and its state is byte-identical.
    assert_eq!(jobs_of(&admin, "ready").await, ready_jobs);
    // Where no apply ran (all but the approved plan's), every state Secret is byte-identical.
    let states_after = states(&admin).await;
    assert_eq!(states_after.len(), 3, "{:?}", states_after.keys());
    for (name, data) in states_before.iter().filter(|(n, _)| !n.contains("awaiting")) {
        assert_eq!(states_after.get(name), Some(data), "state Secret {name}");
    }
    assert_eq!(get(&beta, "ready").await.unwrap()["spec"], before["ready"]["spec"]);

    // Storage migrated: v1beta1 alone.
    let out = plugin(&kubeconfig, &["migrate-storage"]);
    assert!(out.contains("storedVersions [v1alpha1, v1beta1] -> [v1beta1]"), "{out}");
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    for kind in KINDS {
        let crd = crds.get(&format!("{kind}.{GROUP}")).await.unwrap();
        assert_eq!(crd.status.unwrap().stored_versions.unwrap(), ["v1beta1"], "{kind}");
    }

    // Going back, as docs/install.md says: store v1alpha1 alone first, then `helm rollback`.
    let mut specs = BTreeMap::new();
    for name in ["ready", "awaiting", "failing"] {
        specs.insert(name, get(&beta, name).await.unwrap()["spec"].clone());
    }
    let out = plugin(&kubeconfig, &["migrate-storage", "--to", "v1alpha1"]);
    assert!(
        out.contains("storedVersions [v1beta1] -> [v1alpha1]; v1alpha1 served alone"),
        "{out}"
    );
    helm(
        &bin,
        &kubeconfig,
        &["rollback", "captf", "1", "--wait", "--timeout", "4m"],
    );
    let old_images = [image_of(&old_chart, "controller"), image_of(&old_chart, "webhook")];
    until("only 0.1.0's pods run again", || {
        let (admin, old_images) = (admin.clone(), old_images.clone());
        async move {
            let images = pod_images(&admin).await;
            (!images.is_empty() && images.iter().all(|i| old_images.contains(i))).then_some(())
        }
    })
    .await;
    // The CRDs were kept (their resource policy), storing and serving v1alpha1 alone.
    for kind in KINDS {
        let crd = crds.get(&format!("{kind}.{GROUP}")).await.unwrap();
        let served: Vec<&str> = crd
            .spec
            .versions
            .iter()
            .filter(|v| v.served)
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(served, ["v1alpha1"], "{kind}");
        assert_eq!(crd.status.unwrap().stored_versions.unwrap(), ["v1alpha1"], "{kind}");
    }
    let states_back = states(&admin).await;
    for name in ["ready", "awaiting", "failing"] {
        let o = get(&alpha, name).await.unwrap();
        assert_eq!(o["spec"], specs[name], "{name}");
    }
    assert_eq!(states_back, states_after, "no state changed on the way back");
    // 0.1.0 serves: its webhook admits a new object and its controller applies it.
    let again = object("again", modules.url("cluster.tar.gz"), json!({}));
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
        jobs_of(&admin, "ready").await,
        ready_jobs,
        "still nothing ran for `ready`"
    );
}

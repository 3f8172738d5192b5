//! A local clusterctl repository, as the tests that run the real clusterctl install from.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use captf_kubetest::cert_manager::CertManager;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;

/// The Cluster API release setup-tools rendered the providers of (the newest folder).
pub fn capi_version(tools_root: &Path) -> String {
    let dir = tools_root.join("capi/repository/cluster-api");
    let mut versions: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (run `bash scripts/setup-tools.sh`)", dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    versions.sort();
    versions.pop().unwrap()
}

/// A local clusterctl repository under `dir`: the core and kubeadm bootstrap providers from
/// setup-tools, CAPTF's `captf_versions` (`v0.1.0`, ...) from the repository's `clusterctl/` tree
/// (as committed, so the test installs what users get; the last one is the provider's URL, and
/// clusterctl finds the others beside it), cert-manager, and a `clusterctl.yaml` naming them with
/// `variables` (`NAME: value` lines) after them.
pub fn local_repository_with(
    tools_root: &Path,
    dir: &Path,
    cert_manager: &CertManager,
    captf_versions: &[&str],
    variables: &str,
) -> PathBuf {
    let repo = dir.join("repository");
    let capi_version = capi_version(tools_root);
    // Cluster API's providers in clusterctl's layout, `<type>-<name>/<version>/` (the core
    // provider's folder is its name alone).
    let copy_capi = |folder: &str, components: &str| -> PathBuf {
        let to = repo.join(folder).join(&capi_version);
        std::fs::create_dir_all(&to).unwrap();
        for f in [components, "metadata.yaml"] {
            let from = tools_root
                .join("capi/repository")
                .join(folder)
                .join(&capi_version)
                .join(f);
            std::fs::copy(&from, to.join(f))
                .unwrap_or_else(|e| panic!("{}: {e} (run `bash scripts/setup-tools.sh`)", from.display()));
        }
        to.join(components)
    };
    let core = copy_capi("cluster-api", "core-components.yaml");
    let kubeadm_bootstrap = copy_capi("bootstrap-kubeadm", "bootstrap-components.yaml");
    let mut captf = PathBuf::new();
    for version in captf_versions {
        captf = repo.join("infrastructure-terraform").join(version);
        std::fs::create_dir_all(&captf).unwrap();
        let committed = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../clusterctl/infrastructure-terraform")
            .join(version);
        // Every file of the provider's repository: components, metadata, cluster templates and
        // the ClusterClass.
        for entry in std::fs::read_dir(&committed).unwrap_or_else(|e| panic!("{}: {e}", committed.display())) {
            let path = entry.unwrap().path();
            std::fs::copy(&path, captf.join(path.file_name().unwrap())).unwrap();
        }
    }
    // cert-manager, which clusterctl installs before any provider: its chart rendered to the one
    // manifest clusterctl reads, in the repository layout it expects.
    let cm = repo.join("cert-manager").join(&cert_manager.version);
    std::fs::create_dir_all(&cm).unwrap();
    std::fs::write(cm.join("cert-manager.yaml"), cert_manager.manifest().unwrap()).unwrap();
    std::fs::write(
        repo.join("clusterctl.yaml"),
        format!(
            "providers:\n  - name: cluster-api\n    url: file://{}\n    type: CoreProvider\n  - name: kubeadm\n    url: file://{}\n    type: BootstrapProvider\n  - name: terraform\n    url: file://{}\n    type: InfrastructureProvider\ncert-manager:\n  url: file://{}\n  version: {}\n{variables}",
            core.display(),
            kubeadm_bootstrap.display(),
            captf.join("infrastructure-components.yaml").display(),
            cm.join("cert-manager.yaml").display(),
            cert_manager.version,
        ),
    )
    .unwrap();
    repo
}

/// [`local_repository_with`] without variables.
pub fn local_repository(tools_root: &Path, dir: &Path, cert_manager: &CertManager, captf_versions: &[&str]) -> PathBuf {
    local_repository_with(tools_root, dir, cert_manager, captf_versions, "")
}

/// The container `name`'s args in the Deployment `namespace/deployment`, as clusterctl installed it.
pub async fn deployment_args(admin: &kube::Client, namespace: &str, deployment: &str, container: &str) -> Vec<String> {
    let d = Api::<Deployment>::namespaced(admin.clone(), namespace)
        .get(deployment)
        .await
        .unwrap();
    let spec = d.spec.unwrap().template.spec.unwrap();
    let c = spec.containers.into_iter().find(|c| c.name == container).unwrap();
    c.args.unwrap_or_default()
}

//! The real cert-manager on the real control plane: its controller, webhook and cainjector, built
//! from cert-manager's released source by `scripts/build-cert-manager.sh`, installed from
//! cert-manager's own chart (rendered as its release renders it) by `helm install`, or by
//! `clusterctl init` from the same chart rendered to one manifest. The process kubelet runs their
//! pods with the chart's images mapped to the built binaries ([`CertManager::images`]).
//!
//! The pods share the host's network ([`crate::kubelet::KubeletOptions::host_network`]), so the
//! EndpointSlice controller can put cert-manager's webhook behind its Service, and the API server
//! calls it there, trusting it through the CA bundle cainjector writes. Several cert-managers may
//! run on one machine (two management clusters in one test, test binaries side by side), so each
//! gets free ports through the chart's values ([`CertManager::values`]): the webhook's serving
//! and health ports, the controller's metrics and health addresses. The chart fixes the
//! controller's health port in its liveness probe (9403), so that probe is off; the webhook's
//! probes follow its ports and run. Also off: Prometheus metrics for the webhook and cainjector
//! (both would listen on 9402) and the start-up API check Job (its binary is not built; callers
//! wait for the webhook with [`CertManager::until_ready`] instead).

use std::path::{Path, PathBuf};
use std::time::Duration;

use captf_sim::ProcessImage;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::json;

/// The namespace cert-manager is installed in (the one clusterctl uses too).
pub const NAMESPACE: &str = "cert-manager";
/// The helm release's name: the chart names its objects `cert-manager*` with it.
pub const RELEASE: &str = "cert-manager";
/// The user cert-manager's images run as.
const IMAGE_USER: (u32, u32) = (1000, 1000);
/// cert-manager's components, by the binary and image name.
pub const COMPONENTS: [&str; 3] = ["controller", "webhook", "cainjector"];

#[derive(Debug, thiserror::Error)]
pub enum CertManagerError {
    #[error(
        "cert-manager is not built: {0} is missing (run `bash scripts/setup-tools.sh`, which builds it from its source tree)"
    )]
    Missing(PathBuf),
    #[error("failed to find a free port for cert-manager: {0}")]
    Port(std::io::Error),
    #[error("{0}")]
    Command(String),
    #[error("cert-manager's webhook did not answer within {within:?}: {last}")]
    NotReady { within: Duration, last: String },
}

/// What a test that installs cert-manager needs before it starts: the binaries `needed` in
/// `bin` (`.tools/bin`), root for the process kubelet's containers, the built cert-manager and
/// this machine's address for the pods' shared network. `None` once `cannot_run` has said what is
/// missing (a failure under `CI`).
pub fn prerequisites_or_skip(bin: &Path, needed: &[&str]) -> Option<(CertManager, std::net::Ipv4Addr)> {
    for name in needed {
        if !bin.join(name).is_file() {
            captf_testsupport::cannot_run(format!(
                "{name} is not in {} (run `bash scripts/setup-tools.sh`)",
                bin.display()
            ));
            return None;
        }
    }
    if let Some(why) = captf_sim::process_kubelet::namespaces_unavailable() {
        captf_testsupport::cannot_run(format!("{why}; the process kubelet needs root for its containers"));
        return None;
    }
    let found = CertManager::locate(bin)
        .map_err(|e| e.to_string())
        .and_then(|c| Ok((c, crate::route::host_address().map_err(|e| e.to_string())?)));
    match found {
        Ok(found) => Some(found),
        Err(why) => {
            captf_testsupport::cannot_run(why);
            None
        }
    }
}

/// A built cert-manager, with the ports one installation of it takes.
#[derive(Clone, Debug)]
pub struct CertManager {
    /// The folder of the built binaries (`.tools/bin`).
    bin: PathBuf,
    /// The rendered chart.
    pub chart: PathBuf,
    /// The version the binaries and chart carry (`v1.20.3`).
    pub version: String,
    /// The webhook's serving and health ports, the controller's metrics and health ports.
    ports: [u16; 4],
}

fn free_port() -> Result<u16, CertManagerError> {
    crate::ports::free_port().map_err(CertManagerError::Port)
}

impl CertManager {
    /// Finds the build under `tools_bin` (`.tools/bin`; the chart and version beside it in
    /// `.tools/cert-manager`) and picks free ports for one installation.
    pub fn locate(tools_bin: &Path) -> Result<CertManager, CertManagerError> {
        let root = tools_bin.parent().unwrap_or(tools_bin).join("cert-manager");
        let chart = root.join("chart");
        let version_file = root.join("version");
        for needed in COMPONENTS
            .iter()
            .map(|c| tools_bin.join(format!("cert-manager-{c}")))
            .chain([chart.join("Chart.yaml"), version_file.clone()])
        {
            if !needed.is_file() {
                return Err(CertManagerError::Missing(needed));
            }
        }
        let version = std::fs::read_to_string(&version_file)
            .map_err(|_| CertManagerError::Missing(version_file.clone()))?
            .trim()
            .to_string();
        let ports = [free_port()?, free_port()?, free_port()?, free_port()?];
        Ok(CertManager {
            bin: tools_bin.to_path_buf(),
            chart,
            version,
            ports,
        })
    }

    /// The chart's image of `component` (its default registry and namespace, the chart's
    /// version as the tag).
    pub fn image(&self, component: &str) -> String {
        format!("quay.io/jetstack/cert-manager-{component}:{}", self.version)
    }

    /// Each image the chart names, with what the process kubelet runs for it.
    pub fn images(&self) -> Vec<(String, ProcessImage)> {
        COMPONENTS
            .iter()
            .map(|c| {
                let inside = format!("/app/cmd/{c}");
                let files = ProcessImage::new(&inside)
                    .file(&inside, self.bin.join(format!("cert-manager-{c}")))
                    .user(IMAGE_USER.0, IMAGE_USER.1);
                (self.image(c), files)
            })
            .collect()
    }

    /// The chart's values set here (as `--set` pairs): the CRDs from the chart, this
    /// installation's ports, and off what cannot share a host network or was not built (see the
    /// module's docs).
    pub fn values(&self) -> Vec<String> {
        let [secure, healthz, metrics, live] = self.ports;
        vec![
            "crds.enabled=true".into(),
            "prometheus.enabled=false".into(),
            "startupapicheck.enabled=false".into(),
            format!("webhook.config.securePort={secure}"),
            format!("webhook.config.healthzPort={healthz}"),
            format!("config.metricsListenAddress=0.0.0.0:{metrics}"),
            format!("config.healthzListenAddress=0.0.0.0:{live}"),
            "livenessProbe.enabled=false".into(),
        ]
    }

    fn helm(&self, args: &[&str], kubeconfig: Option<&Path>) -> Result<String, CertManagerError> {
        let mut cmd = std::process::Command::new(self.bin.join("helm"));
        cmd.args(args).arg(&self.chart).args(["-n", NAMESPACE]);
        for v in self.values() {
            cmd.arg("--set").arg(v);
        }
        if let Some(k) = kubeconfig {
            cmd.arg("--kubeconfig").arg(k);
        }
        let out = cmd
            .output()
            .map_err(|e| CertManagerError::Command(format!("cannot run helm: {e}")))?;
        if !out.status.success() {
            return Err(CertManagerError::Command(format!(
                "helm {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `helm install cert-manager <chart> -n cert-manager --create-namespace --wait`, as the
    /// README says: helm waits until cert-manager's Deployments are available (the webhook's pod
    /// Ready through its readiness probe).
    pub fn helm_install(&self, kubeconfig: &Path) -> Result<(), CertManagerError> {
        self.helm(&["install", RELEASE, "--create-namespace", "--wait"], Some(kubeconfig))
            .map(drop)
    }

    /// The chart rendered to one manifest (with its namespace), as clusterctl installs
    /// cert-manager from a URL.
    pub fn manifest(&self) -> Result<String, CertManagerError> {
        let rendered = self.helm(&["template", RELEASE], None)?;
        Ok(format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n---\n{rendered}"
        ))
    }

    /// Waits until cert-manager's webhook answers through its Service: a dry-run create of a
    /// self-signed Issuer is admitted (the API server calls the webhook for it, trusting the CA
    /// bundle cainjector wrote).
    pub async fn until_ready(client: &kube::Client, within: Duration) -> Result<(), CertManagerError> {
        let issuers = ApiResource {
            group: "cert-manager.io".into(),
            version: "v1".into(),
            api_version: "cert-manager.io/v1".into(),
            kind: "Issuer".into(),
            plural: "issuers".into(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &issuers);
        let probe: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cert-manager.io/v1", "kind": "Issuer",
            "metadata": { "name": "captf-readiness-check", "namespace": NAMESPACE },
            "spec": { "selfSigned": {} },
        }))
        .map_err(|e| CertManagerError::Command(e.to_string()))?;
        let params = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let mut last = String::from("no answer yet");
        let answered = tokio::time::timeout(within, async {
            loop {
                match api.create(&params, &probe).await {
                    Ok(_) => return,
                    Err(e) => last = e.to_string(),
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
        .await;
        answered.map_err(|_| CertManagerError::NotReady { within, last })
    }
}

//! Start everything: the simulator in-process, the real webhook binary (registered through a
//! ValidatingWebhookConfiguration and a MutatingWebhookConfiguration whose caBundle is a CA made
//! on the fly), and the real controller binary following the simulator's clock.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use captf_sim::Sim;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use crate::certs::{self, CertsError};
use crate::procs::{self, ControllerEnv, Proc, ProcError};

/// Where the webhook "Service" lives (its certificate is for `<name>.<namespace>.svc`).
pub const WEBHOOK_NAMESPACE: &str = "captf-system";
pub const WEBHOOK_SERVICE: &str = "captf-webhook";
/// The chart's RBAC as `helm template` renders it with default values (a chart test keeps the
/// file current): the controller runs under its ServiceAccount's rules, so a call the chart
/// does not allow is a 403 the demo reports.
pub const CHART_RBAC: &str = include_str!("../../charts/tests/rendered/rbac.yaml");
/// The controller's ServiceAccount in the chart (release `captf` in `captf-system`).
pub const CONTROLLER_SA: (&str, &str) = ("captf-system", "captf-controller");
/// The simulated clock starts here, so every run prints the same times.
pub const START_TIME: &str = "2026-03-01T10:00:00Z";

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("failed to start the simulator: {0}")]
    Sim(#[from] captf_sim::SimError),
    #[error(transparent)]
    Certs(#[from] CertsError),
    #[error(transparent)]
    Proc(#[from] ProcError),
    #[error("failed to create {what}: {source}")]
    Create {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("failed to create the work directory: {0}")]
    WorkDir(#[source] std::io::Error),
    #[error("failed to write the controller's kubeconfig: {0}")]
    Kubeconfig(#[source] std::io::Error),
    #[error("failed to serve the demo's Terraform modules: {0}")]
    Modules(#[source] std::io::Error),
    #[error("failed to parse the sample objects: {0}")]
    Samples(#[source] serde_yaml_ng::Error),
    #[error("cannot run the runner image {archive}: {why}")]
    RunnerImage { archive: PathBuf, why: String },
}

/// The released runner image to run instead of the workspace's binaries (`--runner-image`).
#[derive(Clone, Debug)]
pub struct ReleasedRunner {
    /// The OCI archive (`dist/images/runner.oci.tar`).
    pub archive: PathBuf,
    /// The image's reference inside it (the release's version).
    pub version: String,
}

/// How the runner pods run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Runners {
    /// The real `captf-runner` with a real binary (the simulator's process kubelet), except for
    /// the Jobs a step scripts; the test provider's world folder, and which binary the image
    /// runs (`OpenTofu 1.12.6`).
    Real { world: PathBuf, binary: String },
    /// Every runner is scripted, and why.
    Scripted { why: String },
}

/// The running pieces. Dropping it kills the children; [`Stack::stop`] stops them gracefully.
pub struct Stack {
    pub sim: Sim,
    pub webhook: Proc,
    pub controller: Proc,
    pub controller_env: ControllerEnv,
    pub work: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    pub runners: Runners,
}

impl Stack {
    pub async fn stop(self) {
        self.controller.stop(Duration::from_secs(5)).await;
        self.webhook.stop(Duration::from_secs(5)).await;
        drop(self.sim);
    }
}

fn webhook_configuration(kind: &str, webhook: &str, path: &str, ca_bundle: &str) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "captf-webhook"},
        "webhooks": [{
            "name": webhook,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
            "clientConfig": {
                "caBundle": ca_bundle,
                "service": {"namespace": WEBHOOK_NAMESPACE, "name": WEBHOOK_SERVICE, "path": path, "port": 443},
            },
            "rules": [{
                "apiGroups": ["infrastructure.cluster.x-k8s.io"],
                "apiVersions": ["v1beta1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["terraformclusters", "terraformmachinepools", "terraformmachines", "terraformmachinetemplates", "terraformclustertemplates", "terraformmachinepooltemplates"],
                "scope": "Namespaced",
            }],
        }],
    })
}

/// The two configurations, as the chart renders them (caBundle = the CA, base64).
pub fn webhook_configurations(ca_pem: &str) -> [Value; 2] {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    [
        webhook_configuration(
            "ValidatingWebhookConfiguration",
            "validate.infrastructure.cluster.x-k8s.io",
            "/validate",
            &ca,
        ),
        webhook_configuration(
            "MutatingWebhookConfiguration",
            "default.infrastructure.cluster.x-k8s.io",
            "/mutate",
            &ca,
        ),
    ]
}

/// Create a cluster-scoped admissionregistration object (a webhook configuration).
pub async fn create_cluster_scoped(client: &kube::Client, obj: Value) -> Result<(), SetupError> {
    let kind = obj["kind"].as_str().unwrap_or_default().to_string();
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", &kind));
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let dynamic: DynamicObject = serde_json::from_value(obj).map_err(|e| SetupError::Create {
        what: kind.clone(),
        source: Box::new(kube::Error::SerdeError(e)),
    })?;
    api.create(&PostParams::default(), &dynamic)
        .await
        .map_err(|e| SetupError::Create {
            what: kind,
            source: Box::new(e),
        })?;
    Ok(())
}

/// Start the simulator, the webhook and the controller. `say` prints progress. The runner pods
/// run real Terraform where the machine allows it ([`crate::real::runner_image_here`]), unless
/// `scripted_because` gives a reason not to; with `released`, from the released runner image,
/// which must then be able to run.
pub async fn start(
    bin_dir_hint: Option<&Path>,
    say: &dyn Fn(&str),
    scripted_because: Option<&str>,
    released: Option<&ReleasedRunner>,
) -> Result<Stack, SetupError> {
    let start = START_TIME
        .parse()
        .map_err(|_| SetupError::WorkDir(std::io::Error::other("bad start time")))?;
    start_at(bin_dir_hint, say, scripted_because, released, start).await
}

/// [`start`] with the simulated clock starting at `start`.
pub async fn start_at(
    bin_dir_hint: Option<&Path>,
    say: &dyn Fn(&str),
    scripted_because: Option<&str>,
    released: Option<&ReleasedRunner>,
    start: k8s_openapi::jiff::Timestamp,
) -> Result<Stack, SetupError> {
    let work = tempfile::Builder::new()
        .prefix("captf-demo-")
        .tempdir()
        .map_err(SetupError::WorkDir)?;
    let mut builder = Sim::builder().start_time(start).seed(9);
    let image = match (scripted_because, released) {
        (Some(why), _) => Err(why.to_string()),
        (None, None) => crate::real::runner_image_here(&work.path().join("runner")),
        (None, Some(r)) => Ok(crate::real::released_runner_image_here(
            &work.path().join("runner"),
            &r.archive,
            &r.version,
        )
        .map_err(|why| SetupError::RunnerImage {
            archive: r.archive.clone(),
            why,
        })?),
    };
    let runners = match image {
        Ok(image) => {
            let binary = match released {
                Some(r) => format!("{} (the runner image {})", image.describe(), r.archive.display()),
                None => image.describe(),
            };
            builder = builder
                .process_image(crate::real::RUNNER_IMAGE, image.image)
                .process_root(work.path().join("kubelet"));
            Runners::Real {
                world: image.world,
                binary,
            }
        }
        Err(why) => Runners::Scripted { why },
    };
    let sim = builder.start().await?;
    for ns in crate::lifecycle::WATCHED {
        sim.create_namespace(ns);
    }
    sim.create_namespace(WEBHOOK_NAMESPACE);
    sim.load_rbac(CHART_RBAC)?;
    let kubeconfig = work.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig)?;
    let controller_kubeconfig = work.path().join("controller.kubeconfig");
    std::fs::write(
        &controller_kubeconfig,
        sim.kubeconfig_yaml_as(CONTROLLER_SA.0, CONTROLLER_SA.1),
    )
    .map_err(SetupError::Kubeconfig)?;
    say(&format!("captf-sim serving the Kubernetes API on {}", sim.url()));

    let find = |name: &str| match bin_dir_hint {
        Some(d) => Ok(d.join(name)),
        None => procs::sibling(name),
    };

    let dns = format!("{WEBHOOK_SERVICE}.{WEBHOOK_NAMESPACE}.svc");
    let serving = certs::generate(&dns)?;
    let (cert, key) = certs::write(work.path(), &serving)?;
    let (webhook, addr) =
        procs::start_webhook(&find("captf-webhook")?, &cert, &key, work.path().join("webhook.log")).await?;
    sim.register_service(WEBHOOK_NAMESPACE, WEBHOOK_SERVICE, addr);
    let client = sim.client()?;
    for obj in webhook_configurations(&serving.ca_pem) {
        create_cluster_scoped(&client, obj).await?;
    }
    say(&format!(
        "captf-webhook listening on https://{addr} (certificate for {dns}, signed by a CA made just now); registered as Validating- and MutatingWebhookConfiguration captf-webhook"
    ));

    let env = ControllerEnv {
        kubeconfig: controller_kubeconfig.clone(),
        namespace: crate::lifecycle::WATCHED.join(","),
        sim_url: sim.url(),
        metrics_addr: procs::free_addr()?,
        health_addr: procs::free_addr()?,
        extra_env: Vec::new(),
    };
    let log = work.path().join("controller.log");
    // The controller's runtime with the simulator's clock (the shipped captf-controller only
    // runs on the system clock).
    let real = find("captf-controller-sim")?;
    let controller = procs::start_controller(&real, &["run"], &env, log).await?;
    say(&format!(
        "captf-controller running as ServiceAccount {}/{} under the chart's RBAC (KUBECONFIG={}, following the simulator's clock; metrics on http://{}/metrics)",
        CONTROLLER_SA.0,
        CONTROLLER_SA.1,
        controller_kubeconfig.display(),
        env.metrics_addr
    ));
    Ok(Stack {
        sim,
        webhook,
        controller,
        controller_env: env,
        work,
        kubeconfig,
        runners,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn both_configurations_send_every_served_kind_to_the_service_with_the_ca() {
        let [v, m] = webhook_configurations("PEM");
        assert_eq!(v["kind"], "ValidatingWebhookConfiguration");
        assert_eq!(m["kind"], "MutatingWebhookConfiguration");
        for (c, path) in [(&v, "/validate"), (&m, "/mutate")] {
            let h = &c["webhooks"][0];
            assert_eq!(h["clientConfig"]["caBundle"], "UEVN");
            assert_eq!(h["clientConfig"]["service"]["path"], path);
            assert_eq!(h["clientConfig"]["service"]["name"], WEBHOOK_SERVICE);
            assert_eq!(h["failurePolicy"], "Fail");
            assert_eq!(
                h["rules"][0]["resources"].as_array().unwrap().len(),
                captf_shared::types::SERVED_KINDS.len()
            );
        }
    }
}

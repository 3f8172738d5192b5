//! What `--serve` leaves to play with: sample objects (a cluster with a machine pool that
//! succeed, and one cluster per scripted outcome; no TerraformMachine, which applies only once a
//! Cluster API Machine owns it), and what the demo prints about them. The simulator honours each object's `sim.captf.io/outcome` annotation in this mode
//! (`Sim::honour_outcome_annotations`).

use std::path::Path;

use captf_shared::keys;
use captf_sim::runner::{OUTCOME_ANNOTATION, Outcome};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::Value;

use crate::lifecycle::NS;
use crate::setup::SetupError;

/// The sample objects, in the controller's namespace. Their modules are never fetched: the
/// runners are scripted in `--serve`.
pub const SAMPLES: &str = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: TerraformCluster
metadata:
  name: playground
spec:
  module:
    source: git::https://github.com/captf/terraform-modules.git//cluster/kind?ref=v0.1.0
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: TerraformMachinePool
metadata:
  name: playground-workers
  labels:
    cluster.x-k8s.io/cluster-name: playground
spec:
  module:
    source: git::https://github.com/captf/terraform-modules.git//machinepool/kind?ref=v0.1.0
  variables:
    replicas: 3
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: TerraformCluster
metadata:
  name: outcome-fail
  annotations:
    sim.captf.io/outcome: fail
spec:
  module:
    source: git::https://github.com/captf/terraform-modules.git//cluster/kind?ref=v0.1.0
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: TerraformCluster
metadata:
  name: outcome-block
  annotations:
    sim.captf.io/outcome: block
spec:
  module:
    source: git::https://github.com/captf/terraform-modules.git//cluster/kind?ref=v0.1.0
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: TerraformCluster
metadata:
  name: outcome-drift
  annotations:
    sim.captf.io/outcome: drift
spec:
  module:
    source: git::https://github.com/captf/terraform-modules.git//cluster/kind?ref=v0.1.0
  drift:
    interval: 10m
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: TerraformCluster
metadata:
  name: outcome-hang
  annotations:
    sim.captf.io/outcome: hang
spec:
  module:
    source: git::https://github.com/captf/terraform-modules.git//cluster/kind?ref=v0.1.0
  jobs:
    activeDeadlineSeconds: 600
"#;

/// The sample objects, parsed.
pub fn samples() -> Result<Vec<Value>, serde_yaml_ng::Error> {
    SAMPLES.split("\n---\n").map(serde_yaml_ng::from_str::<Value>).collect()
}

/// `kind/name (outcome)` of each sample, as the demo lists them.
pub fn describe_samples(samples: &[Value]) -> Vec<String> {
    samples
        .iter()
        .map(|o| {
            let text = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default();
            let outcome = o
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(OUTCOME_ANNOTATION))
                .and_then(Value::as_str)
                .unwrap_or("succeed");
            format!(
                "{}/{} ({outcome})",
                text("/kind").to_lowercase(),
                text("/metadata/name")
            )
        })
        .collect()
}

/// Create the samples through the API (the webhook admits and defaults them).
pub async fn create_samples(client: &kube::Client) -> Result<Vec<Value>, SetupError> {
    let objects = samples().map_err(SetupError::Samples)?;
    for o in &objects {
        let kind = o.get("kind").and_then(Value::as_str).unwrap_or_default();
        let name = o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let what = format!("{kind}/{name}");
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(keys::GROUP, "v1beta1", kind),
            &format!("{}s", kind.to_lowercase()),
        );
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &ar);
        let dynamic: DynamicObject = serde_json::from_value(o.clone()).map_err(|e| SetupError::Create {
            what: what.clone(),
            source: Box::new(kube::Error::SerdeError(e)),
        })?;
        api.create(&PostParams::default(), &dynamic)
            .await
            .map_err(|e| SetupError::Create {
                what,
                source: Box::new(e),
            })?;
    }
    Ok(objects)
}

/// What the demo prints when it serves (PURE): where to look and how to choose outcomes. The
/// first `kubectl --kubeconfig` line is the `get terraformclusters` one.
pub fn serving_lines(kubeconfig: &Path, webhook_log: &Path, controller_log: &Path, samples: &[String]) -> Vec<String> {
    let kc = kubeconfig.display();
    let mut lines = vec![
        format!(
            "the controller watches namespaces {} (every example in examples/ goes to one of them)",
            crate::lifecycle::WATCHED.join(", ")
        ),
        format!("controller log: {}", controller_log.display()),
        format!("webhook log:    {}", webhook_log.display()),
        format!("kubectl --kubeconfig {kc} get terraformclusters"),
        format!("kubectl captf --kubeconfig {kc} status -A   (kubectl-captf on PATH: see the README)"),
        format!("kubectl --kubeconfig {kc} explain terraformcluster.spec.drift"),
        format!("kubectl --kubeconfig {kc} get events"),
        format!("kubectl --kubeconfig {kc} describe terraformcluster outcome-fail"),
    ];
    if !samples.is_empty() {
        lines.push(format!("sample objects in {NS}: {}", samples.join(", ")));
    }
    lines.push(format!(
        "choose what an object's next Jobs do with the annotation {OUTCOME_ANNOTATION}: {}",
        Outcome::NAMES.join(" | ")
    ));
    lines.push(format!(
        "kubectl --kubeconfig {kc} annotate terraformcluster playground {OUTCOME_ANNOTATION}=fail --overwrite"
    ));
    lines.push(
        "(kubectl get events shows ages on the simulated clock; kubectl describe computes them from this machine's clock)"
            .to_string(),
    );
    lines
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use captf_shared::types::CaptfObject;

    #[test]
    fn the_samples_are_valid_objects_one_per_outcome_with_a_cluster_and_its_pool() {
        let objects = samples().unwrap();
        for o in &objects {
            let kind = o["kind"].as_str().unwrap();
            CaptfObject::from_kind_value(kind, o.clone()).unwrap_or_else(|e| panic!("{o}: {e}"));
        }
        let shown = describe_samples(&objects);
        for outcome in Outcome::NAMES {
            assert!(
                shown.iter().any(|s| s.ends_with(&format!("({outcome})"))),
                "{outcome} missing from {shown:?}"
            );
        }
        for kind in ["terraformcluster/", "terraformmachinepool/"] {
            assert!(
                shown.iter().any(|s| s.starts_with(kind)),
                "{kind} missing from {shown:?}"
            );
        }
    }

    #[test]
    fn serving_names_the_namespace_the_logs_and_the_outcomes() {
        let lines = serving_lines(
            Path::new("/k/kc"),
            Path::new("/w/webhook.log"),
            Path::new("/w/controller.log"),
            &["terraformcluster/outcome-fail (fail)".to_string()],
        );
        assert_eq!(
            lines[0],
            "the controller watches namespaces default, team-a (every example in examples/ goes to one of them)"
        );
        assert!(lines.contains(&"controller log: /w/controller.log".to_string()));
        assert!(lines.contains(&"webhook log:    /w/webhook.log".to_string()));
        let first_kubectl = lines.iter().find(|l| l.starts_with("kubectl --kubeconfig")).unwrap();
        assert_eq!(first_kubectl, "kubectl --kubeconfig /k/kc get terraformclusters");
        assert!(
            lines.contains(
                &"choose what an object's next Jobs do with the annotation sim.captf.io/outcome: succeed | fail | block | drift | hang"
                    .to_string()
            ),
            "{lines:?}"
        );
    }
}

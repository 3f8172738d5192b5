//! Every pod the chart runs is restricted (non-root, read-only root, no privilege escalation,
//! seccomp RuntimeDefault, no capabilities), has resources set and a pinned image.

#![allow(clippy::unwrap_used)]

use captf_chart_tests::features::OWN_CERTIFICATE;
use captf_chart_tests::{helm_template, strings};
use serde_json::Value;

fn scenarios() -> Vec<captf_chart_tests::Rendered> {
    vec![helm_template(&[]).unwrap(), helm_template(OWN_CERTIFICATE).unwrap()]
}

fn containers(pod: &Value) -> Vec<&Value> {
    let mut all: Vec<&Value> = pod["containers"].as_array().unwrap().iter().collect();
    if let Some(init) = pod["initContainers"].as_array() {
        all.extend(init);
    }
    all
}

#[test]
fn every_container_runs_non_root_with_a_read_only_root_and_no_privilege_escalation() {
    for r in scenarios() {
        let pods = r.pod_specs();
        assert_eq!(pods.len(), 2, "webhook and controller");
        for (name, pod) in pods {
            let psc = &pod["securityContext"];
            assert_eq!(psc["runAsNonRoot"], true, "{name}");
            assert_eq!(psc["seccompProfile"]["type"], "RuntimeDefault", "{name}");
            assert_ne!(psc["runAsUser"], 0, "{name}");
            assert_eq!(pod["hostNetwork"], Value::Null, "{name}");
            for c in containers(pod) {
                let sc = &c["securityContext"];
                let who = format!("{name}/{}", c["name"]);
                assert_eq!(sc["allowPrivilegeEscalation"], false, "{who}");
                assert_eq!(sc["readOnlyRootFilesystem"], true, "{who}");
                assert_eq!(sc["runAsNonRoot"], true, "{who}");
                assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"], "{who}");
                assert!(sc["capabilities"]["add"].is_null(), "{who}");
                assert_ne!(sc["privileged"], true, "{who}");
            }
        }
    }
}

#[test]
fn every_container_has_requests_and_a_memory_limit() {
    let r = helm_template(&[]).unwrap();
    for (name, pod) in r.pod_specs() {
        for c in containers(pod) {
            let res = &c["resources"];
            assert!(res["requests"]["cpu"].is_string(), "{name}: {res}");
            assert!(res["requests"]["memory"].is_string(), "{name}: {res}");
            assert!(res["limits"]["memory"].is_string(), "{name}: {res}");
        }
    }
}

#[test]
fn images_are_pinned_to_the_chart_app_version_or_a_release_digest_by_default() {
    let r = helm_template(&[]).unwrap();
    let chart: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(captf_chart_tests::chart_dir().join("Chart.yaml")).unwrap())
            .unwrap();
    let version = chart["appVersion"].as_str().unwrap();
    let mut images: Vec<String> = vec![];
    for (_, pod) in r.pod_specs() {
        for c in containers(pod) {
            images.push(c["image"].as_str().unwrap().to_string());
            assert_eq!(c["imagePullPolicy"], "IfNotPresent");
            for a in strings(&c["args"]) {
                if let Some(img) = a.strip_prefix("--runner-image=") {
                    images.push(img.to_string());
                }
            }
        }
    }
    assert_eq!(
        images.len(),
        4,
        "webhook, controller, and the runner (--runner-image of both): {images:?}"
    );
    // By tag, the chart's appVersion; or, on a release commit, by the digest the release built.
    for image in images {
        match image.split_once('@') {
            Some((_, digest)) => {
                let hex = digest.strip_prefix("sha256:").unwrap_or_default();
                assert!(
                    hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
                    "{image}"
                );
            }
            None => assert_eq!(image.rsplit_once(':').unwrap().1, version, "{image}"),
        }
    }
    // The tags stay the appVersion when digests are pinned.
    for component in ["webhook", "controller", "runner"] {
        assert_eq!(chart_values()[component]["image"]["tag"], version, "{component}");
    }
}

fn chart_values() -> Value {
    serde_yaml_ng::from_str(&std::fs::read_to_string(captf_chart_tests::chart_dir().join("values.yaml")).unwrap())
        .unwrap()
}

#[test]
fn the_webhook_spreads_its_two_replicas_over_nodes_by_default() {
    let r = helm_template(&[]).unwrap();
    let d = r.get("Deployment", "captf-webhook").unwrap();
    let terms = &d["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(terms[0]["podAffinityTerm"]["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(
        terms[0]["podAffinityTerm"]["labelSelector"]["matchLabels"],
        d["spec"]["selector"]["matchLabels"]
    );
}

fn admission_policies(r: &captf_chart_tests::Rendered) -> Vec<&Value> {
    r.docs
        .iter()
        .filter(|d| {
            d["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("ValidatingAdmissionPolicy"))
        })
        .collect()
}

/// The policy that holds the controller's account to CAPTF's names is on by default where the
/// API server has ValidatingAdmissionPolicy v1 (1.30), off before, and can be turned off; the
/// runner accounts the values name are the ones its Job rule lets through. What it refuses is
/// shown on the real API server (kubetest/tests/controller_rights.rs).
#[test]
fn the_controllers_admission_policy_is_rendered_from_kubernetes_1_30_unless_turned_off() {
    let r = helm_template(&[]).unwrap();
    let docs = admission_policies(&r);
    assert_eq!(docs.len(), 2, "the policy and its binding");
    let (policy, binding) = (docs[0], docs[1]);
    assert_eq!(policy["kind"], "ValidatingAdmissionPolicy");
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(strings(&binding["spec"]["validationActions"]), ["Deny"]);
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    let matched = policy["spec"]["matchConditions"][0]["expression"].as_str().unwrap();
    assert!(matched.contains("':captf-controller'"), "{matched}");

    assert!(admission_policies(&helm_template(&["--kube-version", "1.29.0"]).unwrap()).is_empty());
    let off = helm_template(&["--set", "controller.admissionPolicy.enabled=false"]).unwrap();
    assert!(admission_policies(&off).is_empty());

    let shared = helm_template(&[
        "--set",
        "runner.serviceAccount.name=shared-runner",
        "--set",
        "runner.policy.allowedServiceAccounts={terraform}",
    ])
    .unwrap();
    let text = serde_json::to_string(admission_policies(&shared)[0]).unwrap();
    for account in ["shared-runner", "terraform"] {
        assert!(
            text.contains(&format!("variables.pod.serviceAccountName == \\\"{account}\\\"")),
            "{account} not let through: {text}"
        );
    }
}

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
fn images_are_pinned_to_the_chart_app_version_by_default() {
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
    assert_eq!(images.len(), 3, "webhook, controller, runner: {images:?}");
    for image in images {
        let (_, tag) = image.rsplit_once(':').unwrap();
        assert_eq!(tag, version, "{image}");
    }
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

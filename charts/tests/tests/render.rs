//! `helm template` with the defaults and with each optional feature, every manifest validated
//! against the Kubernetes 1.30 schemas by `kubernetes-validate` (strict), CRDs included.

#![allow(clippy::unwrap_used)]

use captf_chart_tests::features::{
    MONITORING, ONE_NAMESPACE, OWN_CERTIFICATE, PROMETHEUS_RULE, SERVICE_MONITOR, WEBHOOK_LOCKDOWN,
};
use captf_chart_tests::{KINDS_WITHOUT_OFFLINE_SCHEMA, Rendered, helm_template, kubernetes_validate};

/// Each optional feature, on its own, plus all of them at once.
const SCENARIOS: &[(&str, &[&str])] = &[
    ("defaults", &[]),
    ("service-monitor", SERVICE_MONITOR),
    ("prometheus-rule", PROMETHEUS_RULE),
    ("own-certificate", OWN_CERTIFICATE),
    ("one-namespace", ONE_NAMESPACE),
    ("webhook-lockdown", WEBHOOK_LOCKDOWN),
    ("no-leader-election", &["--set", "controller.leaderElect=false"]),
    (
        "digests-and-pull-secrets",
        &[
            "--set",
            "webhook.image.digest=sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "--set",
            "controller.image.digest=sha256:1111111111111111111111111111111111111111111111111111111111111111",
            "--set",
            "runner.image.digest=sha256:2222222222222222222222222222222222222222222222222222222222222222",
            "--set",
            "imagePullSecrets[0].name=registry",
        ],
    ),
    (
        "scheduling",
        &[
            "--set",
            "webhook.nodeSelector.kubernetes\\.io/os=linux",
            "--set",
            "controller.tolerations[0].key=dedicated",
            "--set",
            "controller.tolerations[0].operator=Exists",
            "--set",
            "webhook.priorityClassName=system-cluster-critical",
            "--set",
            "controller.podAnnotations.team=platform",
            "--set",
            "commonLabels.owner=platform",
        ],
    ),
    (
        "everything",
        &[
            "--set",
            "metrics.serviceMonitor.enabled=true",
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            "controller.watchNamespace=tenant-a",
            "--set",
            "runner.serviceAccount.name=platform-runner",
        ],
    ),
];

fn validate_all(name: &str, rendered: &Rendered) {
    let v = kubernetes_validate(&rendered.yaml).unwrap();
    assert!(
        v.exit_ok && v.errors.is_empty(),
        "{name}: kubernetes-validate failed:\n{}",
        v.output
    );
    for kind in &v.no_schema {
        assert!(
            KINDS_WITHOUT_OFFLINE_SCHEMA.contains(&kind.as_str()),
            "{name}: no Kubernetes schema for {kind}:\n{}",
            v.output
        );
    }
    let checked = v.passed.len() + v.no_schema.len();
    assert_eq!(
        checked,
        rendered.docs.len(),
        "{name}: every document is validated or named as a CRD kind: {:?}\n{}",
        rendered.summary(),
        v.output
    );
}

#[test]
fn every_rendered_manifest_validates_against_kubernetes_1_30_in_every_scenario() {
    for (name, extra) in SCENARIOS {
        let rendered = helm_template(extra).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!rendered.docs.is_empty(), "{name}: nothing rendered");
        assert!(
            !rendered.yaml.contains("<no value>"),
            "{name}: a template used a missing value"
        );
        validate_all(name, &rendered);
    }
}

#[test]
fn crds_render_with_include_crds_and_validate_against_kubernetes_1_30() {
    let rendered = helm_template(&["--include-crds"]).unwrap();
    let crds = rendered.of_kind("CustomResourceDefinition");
    let mut names: Vec<&str> = crds.iter().filter_map(|c| c["metadata"]["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "terraformclusters.infrastructure.cluster.x-k8s.io",
            "terraformclustertemplates.infrastructure.cluster.x-k8s.io",
            "terraformmachinepools.infrastructure.cluster.x-k8s.io",
            "terraformmachinepooltemplates.infrastructure.cluster.x-k8s.io",
            "terraformmachines.infrastructure.cluster.x-k8s.io",
            "terraformmachinetemplates.infrastructure.cluster.x-k8s.io",
        ]
    );
    let v = kubernetes_validate(&rendered.yaml).unwrap();
    assert!(v.exit_ok && v.errors.is_empty(), "{}", v.output);
    for name in names {
        assert!(
            v.passed.contains(&format!("customresourcedefinition/{name}")),
            "{name} was not validated:\n{}",
            v.output
        );
    }
}

#[test]
fn the_crds_in_the_chart_are_the_generated_ones() {
    let rendered = helm_template(&["--include-crds"]).unwrap();
    for crd in captf_shared::crd::crds() {
        let want = serde_json::to_value(&crd).unwrap();
        let name = want["metadata"]["name"].as_str().unwrap();
        let have = rendered.get("CustomResourceDefinition", name).unwrap();
        assert_eq!(
            have, &want,
            "{name} in the chart differs from captf_shared::crd::crds()"
        );
    }
}

#[test]
fn optional_features_render_only_when_enabled() {
    let defaults = helm_template(&[]).unwrap();
    assert!(defaults.of_kind("ServiceMonitor").is_empty());
    assert!(defaults.of_kind("PrometheusRule").is_empty());
    assert_eq!(defaults.of_kind("Certificate").len(), 2, "CA and serving certificate");
    assert_eq!(defaults.of_kind("Issuer").len(), 2, "self-signed and CA issuer");
    let on = helm_template(MONITORING).unwrap();
    assert_eq!(on.of_kind("ServiceMonitor").len(), 1);
    assert_eq!(on.of_kind("PrometheusRule").len(), 1);
}

#[test]
fn default_install_has_both_deployments_services_pdb_and_both_webhook_configurations() {
    let r = helm_template(&[]).unwrap();
    let names = r.summary();
    for want in [
        "Deployment/captf-system/captf-webhook",
        "Deployment/captf-system/captf-controller",
        "Service/captf-system/captf-webhook",
        "Service/captf-system/captf-webhook-metrics",
        "Service/captf-system/captf-controller-metrics",
        "PodDisruptionBudget/captf-system/captf-webhook",
        "ServiceAccount/captf-system/captf-webhook",
        "ServiceAccount/captf-system/captf-controller",
        "ClusterRole/-/captf-controller",
        "ClusterRoleBinding/-/captf-controller",
        "MutatingWebhookConfiguration/-/captf-webhook",
        "ValidatingWebhookConfiguration/-/captf-webhook",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
    }
    let webhook = r.get("Deployment", "captf-webhook").unwrap();
    assert_eq!(webhook["spec"]["replicas"], 2);
    let pdb = r.get("PodDisruptionBudget", "captf-webhook").unwrap();
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"], webhook["spec"]["selector"]["matchLabels"],
        "the PDB covers the webhook pods"
    );
}

#[test]
fn controller_runs_with_leader_election_and_the_pinned_runner_image() {
    let r = helm_template(&[]).unwrap();
    let d = r.get("Deployment", "captf-controller").unwrap();
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    let args = captf_chart_tests::strings(&c["args"]);
    for want in [
        "--leader-elect",
        "--runner-image=ghcr.io/captf/runner:0.1.0",
        "--metrics-addr=0.0.0.0:8080",
        "--health-addr=0.0.0.0:8081",
        "--concurrency=4",
        "--log-format=json",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} missing from {args:?}");
    }
    assert!(
        !args.iter().any(|a| a.starts_with("--namespace")),
        "all namespaces by default: {args:?}"
    );
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "health");
}

#[test]
fn watch_namespace_passes_the_flag_and_binds_the_role_in_that_namespace_only() {
    let r = helm_template(ONE_NAMESPACE).unwrap();
    let d = r.get("Deployment", "captf-controller").unwrap();
    let args = captf_chart_tests::strings(&d["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(args.iter().any(|a| a == "--namespace=tenant-a"), "{args:?}");
    assert!(r.of_kind("ClusterRoleBinding").is_empty(), "no cluster-wide binding");
    let rb = r
        .of_kind("RoleBinding")
        .into_iter()
        .find(|b| b["metadata"]["name"] == "captf-controller")
        .unwrap();
    assert_eq!(rb["metadata"]["namespace"], "tenant-a");
    assert_eq!(rb["roleRef"]["name"], "captf-controller");
    let le = r.get("Role", "captf-controller-leader-election").unwrap();
    assert_eq!(
        le["metadata"]["namespace"], "captf-system",
        "leader election in its own namespace"
    );
}

#[test]
fn digests_replace_tags_in_every_image_reference() {
    let digest = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
    let r = helm_template(&["--set", &format!("runner.image.digest={digest}")]).unwrap();
    let d = r.get("Deployment", "captf-controller").unwrap();
    let args = captf_chart_tests::strings(&d["spec"]["template"]["spec"]["containers"][0]["args"]);
    let want = format!("--runner-image=ghcr.io/captf/runner@{digest}");
    assert!(args.contains(&want), "{args:?}");
}

/// A DNS-1123 label: what Service names (and every name here) must be.
use captf_shared::names::is_dns1123_label as is_dns_label;

#[test]
fn every_name_is_a_dns_label_for_release_names_up_to_helms_limit_of_53() {
    let long = "a".repeat(53);
    let with_chart = format!("{}-captf-{}", "b".repeat(20), "c".repeat(26));
    for release in ["x", "captf", "platform-captf", with_chart.as_str(), long.as_str()] {
        let r = captf_chart_tests::helm_template_release(release, &[]).unwrap();
        for doc in &r.docs {
            let name = doc["metadata"]["name"].as_str().unwrap();
            assert!(is_dns_label(name), "release {release}: {} name {name:?}", doc["kind"]);
        }
        let cert = r
            .of_kind("Certificate")
            .into_iter()
            .find(|c| c["spec"]["isCA"] != true)
            .unwrap();
        for dns in captf_chart_tests::strings(&cert["spec"]["dnsNames"]) {
            assert!(dns.split('.').all(is_dns_label), "release {release}: dnsName {dns}");
        }
    }
}

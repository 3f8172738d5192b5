//! `helm template` with the defaults and with each optional feature, every manifest validated
//! against the Kubernetes 1.30 schemas by `kubernetes-validate` (strict), CRDs included.

#![allow(clippy::unwrap_used)]

use captf_chart_tests::features::{
    ALL_NAMESPACES, MONITORING, ONE_NAMESPACE, OWN_CERTIFICATE, OWN_ISSUER, PROMETHEUS_RULE, SERVICE_MONITOR, SHARDS,
    TWO_NAMESPACES, WEBHOOK_LOCKDOWN,
};
use captf_chart_tests::{
    KINDS_WITHOUT_OFFLINE_SCHEMA, NAMESPACE, Rendered, helm_template, helm_template_error, kubernetes_validate,
};
use serde_json::json;

/// Each optional feature, on its own, plus all of them at once.
const SCENARIOS: &[(&str, &[&str])] = &[
    ("defaults", &[]),
    ("service-monitor", SERVICE_MONITOR),
    ("prometheus-rule", PROMETHEUS_RULE),
    ("own-certificate", OWN_CERTIFICATE),
    ("own-issuer", OWN_ISSUER),
    ("one-namespace", ONE_NAMESPACE),
    ("two-namespaces", TWO_NAMESPACES),
    ("all-namespaces", ALL_NAMESPACES),
    (
        "deprecated-watch-namespace",
        &["--set", "controller.watchNamespace=tenant-a"],
    ),
    ("webhook-lockdown", WEBHOOK_LOCKDOWN),
    ("shards", SHARDS),
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
            "controller.watchNamespaces={tenant-a,tenant-b}",
            "--set",
            "runner.serviceAccount.name=platform-runner",
            "--set",
            "controller.shards={blue,green}",
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
fn the_crds_in_the_chart_are_the_generated_ones_kept_on_uninstall() {
    let rendered = helm_template(&[]).unwrap();
    for crd in captf_shared::crd::crds() {
        let want = serde_json::to_value(&crd).unwrap();
        let name = want["metadata"]["name"].as_str().unwrap();
        let mut have = rendered.get("CustomResourceDefinition", name).unwrap().clone();
        // Uninstalling the chart must not delete the CRDs, and with them every object.
        let keep = have["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove("helm.sh/resource-policy");
        assert_eq!(keep, Some(json!("keep")), "{name}");
        assert_eq!(have, want, "{name} in the chart differs from captf_shared::crd::crds()");
    }
}

#[test]
fn the_crds_conversion_webhook_is_the_releases_service_with_its_ca() {
    let r = captf_chart_tests::helm_template_release("platform", &["--namespace", "infra"]).unwrap();
    for crd in r.of_kind("CustomResourceDefinition") {
        let webhook = &crd["spec"]["conversion"]["webhook"];
        assert_eq!(
            webhook["clientConfig"]["service"],
            json!({"name": "platform-captf-webhook", "namespace": "infra", "path": "/convert", "port": 443}),
            "{crd}"
        );
        assert_eq!(
            crd["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "infra/platform-captf-webhook"
        );
    }
    // Without cert-manager, the CA given for the admission webhooks.
    let r = captf_chart_tests::helm_template_release(
        "platform",
        &[
            "--set",
            "webhook.tls.certManager.enabled=false",
            "--set",
            "webhook.tls.caBundle=Q0E=",
            "--set",
            "webhook.tls.existingSecret=tls",
        ],
    )
    .unwrap();
    for crd in r.of_kind("CustomResourceDefinition") {
        assert_eq!(crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"], "Q0E=");
        assert!(
            crd["metadata"]["annotations"]
                .get("cert-manager.io/inject-ca-from")
                .is_none()
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
        "RoleBinding/captf-system/captf-controller",
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
    let runner = format!("--runner-image={}", captf_chart_tests::default_image("runner").unwrap());
    for want in [
        "--leader-elect",
        &runner,
        "--metrics-addr=0.0.0.0:8080",
        "--health-addr=0.0.0.0:8081",
        "--concurrency=4",
        "--max-running-jobs=0",
        "--max-running-jobs-per-namespace=10",
        "--log-format=json",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} missing from {args:?}");
    }
    assert!(
        args.iter().any(|a| a == "--namespace=captf-system"),
        "the release namespace by default: {args:?}"
    );
    assert_eq!(
        c["image"].as_str(),
        Some(captf_chart_tests::default_image("controller").unwrap().as_str())
    );
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "health");
}

fn controller_args(r: &Rendered) -> Vec<String> {
    let d = r.get("Deployment", "captf-controller").unwrap();
    captf_chart_tests::strings(&d["spec"]["template"]["spec"]["containers"][0]["args"])
}

/// The ClusterRoleBindings of the controller's own ClusterRole (its rules in every namespace).
fn controller_cluster_role_bindings(r: &Rendered) -> Vec<&serde_json::Value> {
    r.of_kind("ClusterRoleBinding")
        .into_iter()
        .filter(|b| b["roleRef"]["name"] == "captf-controller")
        .collect()
}

/// The namespaces where a RoleBinding binds the controller's ClusterRole.
fn controller_role_bindings(r: &Rendered) -> Vec<String> {
    r.of_kind("RoleBinding")
        .into_iter()
        .filter(|b| b["roleRef"]["kind"] == "ClusterRole" && b["roleRef"]["name"] == "captf-controller")
        .inspect(|b| {
            assert_eq!(
                b["subjects"],
                serde_json::json!([{"kind": "ServiceAccount", "name": "captf-controller", "namespace": NAMESPACE}])
            );
        })
        .map(|b| b["metadata"]["namespace"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn by_default_the_controller_watches_only_the_release_namespace_through_a_role_binding_there() {
    let r = helm_template(&[]).unwrap();
    assert!(
        controller_cluster_role_bindings(&r).is_empty(),
        "no cluster-wide binding"
    );
    assert_eq!(controller_role_bindings(&r), [NAMESPACE]);
    let args = controller_args(&r);
    let flags: Vec<&String> = args.iter().filter(|a| a.starts_with("--namespace=")).collect();
    assert_eq!(flags, ["--namespace=captf-system"]);
    assert!(
        r.get("Role", "captf-controller-leader-election").is_none(),
        "the binding in the release namespace covers the leader Lease"
    );
}

#[test]
fn a_namespace_list_renders_one_role_binding_per_namespace_and_passes_them_all_to_the_controller() {
    let r = helm_template(TWO_NAMESPACES).unwrap();
    assert!(
        controller_cluster_role_bindings(&r).is_empty(),
        "no cluster-wide binding"
    );
    assert_eq!(controller_role_bindings(&r), ["tenant-a", "tenant-b"]);
    assert!(controller_args(&r).iter().any(|a| a == "--namespace=tenant-a,tenant-b"));
    // The release namespace is not watched: leader election gets a Role of its own there.
    let le = r.get("Role", "captf-controller-leader-election").unwrap();
    assert_eq!(le["metadata"]["namespace"], NAMESPACE);
    let rb = r.get("RoleBinding", "captf-controller-leader-election").unwrap();
    assert_eq!(rb["metadata"]["namespace"], NAMESPACE);
    assert_eq!(rb["roleRef"]["name"], "captf-controller-leader-election");
    // Listing the release namespace too: its binding covers the Lease.
    let r = helm_template(&["--set", "controller.watchNamespaces={tenant-a,captf-system}"]).unwrap();
    assert_eq!(controller_role_bindings(&r), ["tenant-a", "captf-system"]);
    assert!(r.get("Role", "captf-controller-leader-election").is_none());
}

#[test]
fn the_deprecated_watch_namespace_is_a_one_element_list() {
    let r = helm_template(&["--set", "controller.watchNamespace=tenant-a"]).unwrap();
    assert_eq!(controller_role_bindings(&r), ["tenant-a"]);
    assert!(controller_args(&r).iter().any(|a| a == "--namespace=tenant-a"));
    assert!(controller_cluster_role_bindings(&r).is_empty());
    // Together with the list: added to it, once.
    let r = helm_template(&[
        "--set",
        "controller.watchNamespace=tenant-b",
        "--set",
        "controller.watchNamespaces={tenant-a,tenant-b}",
    ])
    .unwrap();
    assert_eq!(controller_role_bindings(&r), ["tenant-a", "tenant-b"]);
    assert!(controller_args(&r).iter().any(|a| a == "--namespace=tenant-a,tenant-b"));
}

#[test]
fn watch_all_namespaces_renders_the_cluster_role_binding_and_no_namespace_flag() {
    let r = helm_template(ALL_NAMESPACES).unwrap();
    let crbs = controller_cluster_role_bindings(&r);
    assert_eq!(crbs.len(), 1, "one cluster-wide binding of the controller's rules");
    let crb = crbs[0];
    assert_eq!(crb["metadata"]["name"], "captf-controller");
    assert_eq!(crb["roleRef"]["kind"], "ClusterRole");
    assert_eq!(crb["roleRef"]["name"], "captf-controller");
    assert_eq!(crb["subjects"][0]["namespace"], NAMESPACE);
    assert!(controller_role_bindings(&r).is_empty());
    assert!(r.get("Role", "captf-controller-leader-election").is_none());
    assert!(
        !controller_args(&r).iter().any(|a| a.starts_with("--namespace=")),
        "all namespaces: {:?}",
        controller_args(&r)
    );
}

#[test]
fn watch_all_namespaces_together_with_a_namespace_list_fails_the_render_with_a_message() {
    for list in [
        "controller.watchNamespaces={tenant-a}",
        "controller.watchNamespace=tenant-a",
    ] {
        let err = helm_template_error(&["--set", "controller.watchAllNamespaces=true", "--set", list])
            .unwrap()
            .unwrap_or_else(|| panic!("watchAllNamespaces with {list} rendered"));
        assert!(
            err.contains("controller.watchAllNamespaces=true watches every namespace")
                && err.contains("also lists tenant-a: set one or the other"),
            "{list}: {err}"
        );
    }
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
        // CRDs are named `<plural>.<group>`, whatever the release.
        for doc in r.docs.iter().filter(|d| d["kind"] != "CustomResourceDefinition") {
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

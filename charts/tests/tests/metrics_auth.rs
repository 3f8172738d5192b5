//! Who may read the controller's `/metrics` (`controller.metrics.auth`): the flag the chart passes,
//! the review rights it gives the controller, the ClusterRole it renders for scrapers and the
//! binding of `controller.metrics.readers`, and the ServiceMonitor's token going to the controller
//! only. That the controller then answers 401, 403 and 200 on the real API server under exactly
//! these objects is `kubetest/tests/metrics_auth.rs`.

#![allow(clippy::unwrap_used)]

use captf_chart_tests::features::{ALL_NAMESPACES, ONE_NAMESPACE, SERVICE_MONITOR, TWO_NAMESPACES};
use captf_chart_tests::{Rendered, helm_template, helm_template_error, kubernetes_validate, strings};
use serde_json::{Value, json};

const AUTH: &str = "captf-metrics-auth";
const READER: &str = "captf-metrics-reader";

fn controller_args(r: &Rendered) -> Vec<String> {
    let d = r.get("Deployment", "captf-controller").unwrap();
    strings(&d["spec"]["template"]["spec"]["containers"][0]["args"])
}

fn metrics_auth_of(r: &Rendered) -> captf_controller::runtime::metrics_auth::MetricsAuth {
    let args = controller_args(r);
    let Some(("run", flags)) = args.split_first().map(|(first, rest)| (first.as_str(), rest)) else {
        panic!("the chart's controller args do not start with `run`: {args:?}");
    };
    captf_controller::runtime::RunArgs::from_flags(flags)
        .unwrap_or_else(|e| panic!("captf-controller rejects the chart's args {args:?}: {e}"))
        .metrics_auth
}

#[test]
fn metrics_auth_is_kubernetes_by_default_and_the_controller_parses_the_flag() {
    use captf_controller::runtime::metrics_auth::MetricsAuth;
    let r = helm_template(&[]).unwrap();
    assert!(controller_args(&r).contains(&"--metrics-auth=kubernetes".to_string()));
    assert_eq!(metrics_auth_of(&r), MetricsAuth::Kubernetes);
    let none = helm_template(&["--set", "controller.metrics.auth=none"]).unwrap();
    assert_eq!(metrics_auth_of(&none), MetricsAuth::None);
    let err = helm_template_error(&["--set", "controller.metrics.auth=basic"])
        .unwrap()
        .unwrap();
    assert!(err.contains("controller.metrics.auth"), "{err}");
}

#[test]
fn the_controller_may_create_token_and_access_reviews_cluster_wide_and_nothing_more() {
    // Reviews are cluster-scoped: the binding is a ClusterRoleBinding whatever is watched.
    for extra in [&[][..], ONE_NAMESPACE, TWO_NAMESPACES, ALL_NAMESPACES] {
        let r = helm_template(extra).unwrap();
        let role = r
            .get("ClusterRole", AUTH)
            .unwrap_or_else(|| panic!("{extra:?}: no {AUTH}"));
        assert_eq!(
            role["rules"],
            json!([
                { "apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"] },
                { "apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"] },
            ]),
            "{extra:?}"
        );
        let binding = r.get("ClusterRoleBinding", AUTH).unwrap();
        assert_eq!(
            binding["roleRef"],
            json!({ "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AUTH })
        );
        assert_eq!(
            binding["subjects"],
            json!([{ "kind": "ServiceAccount", "name": "captf-controller", "namespace": "captf-system" }])
        );
    }
}

#[test]
fn the_metrics_reader_role_grants_only_get_on_metrics_and_is_bound_to_the_listed_readers_only() {
    let r = helm_template(&[]).unwrap();
    let reader = r.get("ClusterRole", READER).unwrap();
    assert_eq!(
        reader["rules"],
        json!([{ "nonResourceURLs": ["/metrics"], "verbs": ["get"] }])
    );
    assert!(
        r.get("ClusterRoleBinding", READER).is_none(),
        "nobody is bound by default"
    );

    let r = helm_template(&[
        "--set-json",
        r#"controller.metrics.readers=[{"kind":"ServiceAccount","name":"prometheus-k8s","namespace":"monitoring"},{"kind":"Group","name":"sre"},{"kind":"User","name":"alice@example.com"}]"#,
    ])
    .unwrap();
    let binding = r.get("ClusterRoleBinding", READER).unwrap();
    assert_eq!(binding["roleRef"]["name"], READER);
    assert_eq!(
        binding["subjects"],
        json!([
            { "kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring" },
            { "kind": "Group", "name": "sre", "apiGroup": "rbac.authorization.k8s.io" },
            { "kind": "User", "name": "alice@example.com", "apiGroup": "rbac.authorization.k8s.io" },
        ])
    );
    let v = kubernetes_validate(&r.yaml).unwrap();
    assert!(v.exit_ok && v.errors.is_empty(), "{}", v.output);

    let err = helm_template_error(&[
        "--set-json",
        r#"controller.metrics.readers=[{"kind":"ServiceAccount","name":"prometheus"}]"#,
    ])
    .unwrap()
    .unwrap();
    assert!(err.contains("a ServiceAccount needs its namespace"), "{err}");
    let err = helm_template_error(&[
        "--set-json",
        r#"controller.metrics.readers=[{"kind":"Pod","name":"x"}]"#,
    ])
    .unwrap()
    .unwrap();
    assert!(err.contains("controller.metrics.readers"), "{err}");
}

#[test]
fn metrics_auth_none_renders_no_review_rights_no_reader_role_and_no_token() {
    let r = helm_template(&[
        "--set",
        "controller.metrics.auth=none",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set-json",
        r#"controller.metrics.readers=[{"kind":"Group","name":"sre"}]"#,
    ])
    .unwrap();
    assert!(controller_args(&r).contains(&"--metrics-auth=none".to_string()));
    for kind in ["ClusterRole", "ClusterRoleBinding"] {
        for name in [AUTH, READER] {
            assert!(r.get(kind, name).is_none(), "{kind} {name} rendered with auth none");
        }
    }
    let sm = r.of_kind("ServiceMonitor")[0];
    for e in sm["spec"]["endpoints"].as_array().unwrap() {
        assert!(
            e.get("bearerTokenFile").is_none() && e.get("authorization").is_none(),
            "{e}"
        );
    }
}

/// The endpoint of the ServiceMonitor that keeps the Service with this component label.
fn endpoint_of<'a>(sm: &'a Value, component: &str) -> &'a Value {
    let endpoints = sm["spec"]["endpoints"].as_array().unwrap();
    let keeping: Vec<&Value> = endpoints
        .iter()
        .filter(|e| {
            e["relabelings"].as_array().unwrap().iter().any(|r| {
                r["action"] == "keep"
                    && strings(&r["sourceLabels"]) == ["__meta_kubernetes_service_label_app_kubernetes_io_component"]
                    && r["regex"] == component
            })
        })
        .collect();
    assert_eq!(
        keeping.len(),
        1,
        "one endpoint keeps the {component} Service: {endpoints:?}"
    );
    keeping[0]
}

#[test]
fn the_service_monitor_sends_prometheus_token_to_the_controller_only() {
    let r = helm_template(SERVICE_MONITOR).unwrap();
    let sm = r.of_kind("ServiceMonitor")[0];
    assert_eq!(sm["spec"]["endpoints"].as_array().unwrap().len(), 2);
    // Each metrics Service carries the component label the endpoints keep.
    for (service, component) in [
        ("captf-controller-metrics", "controller"),
        ("captf-webhook-metrics", "webhook"),
    ] {
        let svc = r.get("Service", service).unwrap();
        assert_eq!(svc["metadata"]["labels"]["app.kubernetes.io/component"], component);
    }
    let controller = endpoint_of(sm, "controller");
    assert_eq!(
        controller["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    assert_eq!(controller["path"], "/metrics");
    let webhook = endpoint_of(sm, "webhook");
    assert!(
        webhook.get("bearerTokenFile").is_none() && webhook.get("authorization").is_none(),
        "the webhook's plain metrics get no token: {webhook}"
    );

    let r = helm_template(&[
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.serviceMonitor.bearerTokenSecret.name=prometheus-token",
    ])
    .unwrap();
    let controller = endpoint_of(r.of_kind("ServiceMonitor")[0], "controller");
    assert!(controller.get("bearerTokenFile").is_none(), "{controller}");
    assert_eq!(
        controller["authorization"],
        json!({ "type": "Bearer", "credentials": { "name": "prometheus-token", "key": "token" } })
    );
}

#[test]
fn the_controllers_admission_policy_does_not_match_token_or_access_reviews() {
    let r = helm_template(&[]).unwrap();
    let policy = r.get("ValidatingAdmissionPolicy", "captf-controller-writes").unwrap();
    let rules = policy["spec"]["matchConstraints"]["resourceRules"].as_array().unwrap();
    for rule in rules {
        let groups = strings(&rule["apiGroups"]);
        let resources = strings(&rule["resources"]);
        assert!(
            !groups
                .iter()
                .any(|g| g == "*" || g.starts_with("authentication") || g.starts_with("authorization")),
            "{rule}"
        );
        assert!(
            !resources
                .iter()
                .any(|r| r == "*" || r == "tokenreviews" || r == "subjectaccessreviews"),
            "{rule}"
        );
    }
}

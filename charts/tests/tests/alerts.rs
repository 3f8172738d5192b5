//! The optional ServiceMonitor scrapes both metrics Services, and the PrometheusRule carries the
//! three alerts with expressions Prometheus parses.

#![allow(clippy::unwrap_used)]

use captf_chart_tests::features::{PROMETHEUS_RULE, SERVICE_MONITOR};
use captf_chart_tests::helm_template;
use serde_json::Value;

fn rule_set() -> Vec<Value> {
    let r = helm_template(PROMETHEUS_RULE).unwrap();
    let rule = r.of_kind("PrometheusRule")[0].clone();
    rule["spec"]["groups"][0]["rules"].as_array().unwrap().clone()
}

fn alert<'a>(rules: &'a [Value], name: &str) -> &'a Value {
    rules
        .iter()
        .find(|r| r["alert"] == name)
        .unwrap_or_else(|| panic!("no alert {name}"))
}

#[test]
fn prometheus_rule_has_the_three_alerts_and_every_expression_parses_as_promql() {
    let rules = rule_set();
    let names: Vec<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    assert_eq!(
        names,
        [
            "CaptfLastSuccessTooOld",
            "CaptfConsecutiveFailures",
            "CaptfJobPastDeadline"
        ]
    );
    for rule in &rules {
        let expr = rule["expr"].as_str().unwrap();
        promql_parser::parser::parse(expr).unwrap_or_else(|e| panic!("{}: {e}\n{expr}", rule["alert"]));
        assert!(
            rule["for"].is_string() && rule["labels"]["severity"].is_string(),
            "{rule}"
        );
        assert!(rule["annotations"]["summary"].is_string(), "{rule}");
    }
}

#[test]
fn alerts_use_the_controllers_metrics_and_the_configured_thresholds() {
    let r = helm_template(&[
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "metrics.prometheusRule.lastSuccessMaxAgeSeconds=7200",
        "--set",
        "metrics.prometheusRule.consecutiveFailures=5",
    ])
    .unwrap();
    let rules = r.of_kind("PrometheusRule")[0]["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .clone();
    let old = alert(&rules, "CaptfLastSuccessTooOld")["expr"].as_str().unwrap();
    assert!(
        old.contains("captf_last_success_timestamp_seconds") && old.contains("> 7200"),
        "{old}"
    );
    let failing = alert(&rules, "CaptfConsecutiveFailures")["expr"].as_str().unwrap();
    assert!(
        failing.contains("captf_consecutive_failures") && failing.contains(">= 5"),
        "{failing}"
    );
    let late = alert(&rules, "CaptfJobPastDeadline")["expr"].as_str().unwrap();
    assert!(late.contains("kube_job_spec_active_deadline_seconds"), "{late}");
}

/// The Job-name filter of CaptfJobPastDeadline matches every Job name CAPTF makes (docs/api.md).
#[test]
fn the_past_deadline_alert_selects_captf_job_names_and_no_others() {
    let rules = rule_set();
    let expr = alert(&rules, "CaptfJobPastDeadline")["expr"].as_str().unwrap();
    let pattern = expr.split("job_name=~\"").nth(1).unwrap().split('"').next().unwrap();
    let re = regex_lite(pattern);
    for kind in captf_shared::Kind::ALL {
        for op in captf_shared::Op::ALL {
            let name = captf_shared::names::job_name(kind, "default", "prod-eu", op, 7);
            assert!(re(&name), "{name} not matched by {pattern}");
        }
    }
    for other in [
        "coredns",
        "backup-nightly-29000",
        "tc-apply",
        "tc-prod-eu-225654031b7f-apply",
    ] {
        assert!(!re(other), "{other} matched by {pattern}");
    }
}

/// Prometheus anchors label regexes: `^(?:pattern)$`.
fn regex_lite(pattern: &str) -> impl Fn(&str) -> bool {
    let re = regex::Regex::new(&format!("^(?:{pattern})$")).unwrap();
    move |s| re.is_match(s)
}

#[test]
fn service_monitor_scrapes_the_metrics_port_of_both_metrics_services() {
    let r = helm_template(SERVICE_MONITOR).unwrap();
    let sm = r.of_kind("ServiceMonitor")[0];
    let selector = sm["spec"]["selector"]["matchLabels"].as_object().unwrap();
    let port = sm["spec"]["endpoints"][0]["port"].as_str().unwrap();
    assert_eq!(sm["spec"]["endpoints"][0]["path"], captf_webhook::METRICS_PATH);
    let mut selected = vec![];
    for svc in r.of_kind("Service") {
        let labels = &svc["metadata"]["labels"];
        if selector.iter().all(|(k, v)| &labels[k] == v) {
            let ports = svc["spec"]["ports"].as_array().unwrap();
            assert!(
                ports.iter().any(|p| p["name"] == port),
                "{} has no port {port}",
                svc["metadata"]["name"]
            );
            selected.push(svc["metadata"]["name"].as_str().unwrap().to_string());
        }
    }
    selected.sort();
    assert_eq!(selected, ["captf-controller-metrics", "captf-webhook-metrics"]);
}

/// Every vector selector of an expression with the labels the expression relies on: its own
/// matchers and the `by (...)` / `on (...)` labels around it.
fn selectors(expr: &promql_parser::parser::Expr, around: &[String], out: &mut Vec<(String, Vec<String>)>) {
    use promql_parser::parser::{Expr, LabelModifier};
    match expr {
        Expr::Aggregate(a) => {
            let mut labels = around.to_vec();
            if let Some(LabelModifier::Include(by)) = &a.modifier {
                labels.extend(by.labels.iter().cloned());
            }
            selectors(&a.expr, &labels, out);
        }
        Expr::Binary(b) => {
            let mut labels = around.to_vec();
            if let Some(LabelModifier::Include(on)) = b.modifier.as_ref().and_then(|m| m.matching.as_ref()) {
                labels.extend(on.labels.iter().cloned());
            }
            selectors(&b.lhs, &labels, out);
            selectors(&b.rhs, &labels, out);
        }
        Expr::Paren(p) => selectors(&p.expr, around, out),
        Expr::Unary(u) => selectors(&u.expr, around, out),
        Expr::Call(c) => {
            for arg in &c.args.args {
                selectors(arg, around, out);
            }
        }
        Expr::VectorSelector(v) => {
            let mut labels = around.to_vec();
            labels.extend(v.matchers.matchers.iter().map(|m| m.name.clone()));
            out.push((v.name.clone().unwrap_or_default(), labels));
        }
        _ => {}
    }
}

/// The alerts on CAPTF's own metrics select series the controller really exports, by labels
/// those series really have (checked against the controller's prometheus-client registry).
#[test]
fn alerts_select_metrics_and_labels_the_controller_exports() {
    use captf_shared::{Kind, Op};
    let metrics = captf_controller::runtime::metrics::Metrics::new();
    metrics.set_consecutive_failures(Kind::TerraformCluster, "default", "prod-eu", Op::Apply, 3);
    metrics.set_last_success(Kind::TerraformCluster, "default", "prod-eu", Op::Drift, 1.7e9);
    let exposition = metrics.encode();
    let mut used = vec![];
    for rule in rule_set() {
        let expr = promql_parser::parser::parse(rule["expr"].as_str().unwrap()).unwrap();
        selectors(&expr, &[], &mut used);
    }
    let captf: Vec<_> = used.iter().filter(|(name, _)| name.starts_with("captf_")).collect();
    assert_eq!(captf.len(), 2, "{used:?}");
    for (name, labels) in captf {
        let series = exposition
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{")))
            .unwrap_or_else(|| panic!("the controller exports no {name}:\n{exposition}"));
        for label in labels {
            assert!(
                series.contains(&format!("{label}=\"")),
                "{name} has no label {label}: {series}"
            );
        }
    }
}

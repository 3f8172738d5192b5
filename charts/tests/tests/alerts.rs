//! The optional ServiceMonitor scrapes both metrics Services, and the PrometheusRule carries the
//! three alerts with expressions Prometheus parses.

#![allow(clippy::unwrap_used)]

use captf_chart_tests::helm_template;
use serde_json::Value;

fn rule_set() -> Vec<Value> {
    let r = helm_template(&["--set", "metrics.prometheusRule.enabled=true"]).unwrap();
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

/// The Job-name filter of CaptfJobPastDeadline matches every Job name CAPTF makes (DESIGN §3).
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
    for other in ["coredns", "backup-nightly-29000", "tc-apply", "tc-prod-eu-225654-apply"] {
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
    let r = helm_template(&["--set", "metrics.serviceMonitor.enabled=true"]).unwrap();
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

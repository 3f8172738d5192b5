//! `values.schema.json` rejects values of the wrong type (every leaf of `values.yaml`), unknown
//! keys and unsafe settings, and accepts the documented overrides; `values.yaml` documents every key.

#![allow(clippy::unwrap_used)]

use captf_chart_tests::{chart_dir, helm_template, helm_template_error};
use serde_json::{Value, json};

const SCHEMA_ERROR: &str = "values don't meet the specifications of the schema";

fn default_values() -> Value {
    let text = std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap();
    serde_yaml_ng::from_str(&text).unwrap()
}

/// Every leaf of the values (scalars, lists, empty maps), as a dotted path and its default.
fn leaves(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(map) if !map.is_empty() => {
            for (k, child) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(&path, child, out);
            }
        }
        _ => out.push((prefix.to_string(), v.clone())),
    }
}

/// A value of another JSON type than the default, that no schema branch of that key accepts.
fn wrong_type(default: &Value) -> Value {
    match default {
        Value::String(_) => json!(true),
        Value::Bool(_) => json!("yes"),
        Value::Number(_) => json!("many"),
        Value::Array(_) | Value::Object(_) | Value::Null => json!("not-a-list-or-map"),
    }
}

fn rejected(extra: &[&str]) -> String {
    helm_template_error(extra)
        .unwrap()
        .unwrap_or_else(|| panic!("helm template {extra:?} was accepted"))
}

#[test]
fn a_value_of_the_wrong_type_is_rejected_for_every_key_of_values_yaml() {
    let mut all = vec![];
    leaves("", &default_values(), &mut all);
    assert!(all.len() > 50, "values.yaml has {} leaves", all.len());
    let mut accepted = vec![];
    for (path, default) in &all {
        let bad = wrong_type(default);
        let arg = format!("{path}={bad}");
        match helm_template_error(&["--set-json", &arg]).unwrap() {
            None => accepted.push(arg),
            Some(err) => {
                assert!(err.contains(SCHEMA_ERROR), "{arg}: not a schema error: {err}");
                assert!(
                    err.contains(path.as_str()),
                    "{arg}: the error does not name {path}: {err}"
                );
            }
        }
    }
    assert!(accepted.is_empty(), "wrong types accepted: {accepted:?}");
}

#[test]
fn an_unknown_key_is_rejected_at_every_level() {
    for arg in [
        "replica=2",
        "webhook.replica=2",
        "controller.image.version=1",
        "metrics.serviceMonitor.enable=true",
    ] {
        let err = rejected(&["--set", arg]);
        assert!(err.contains("Additional property"), "{arg}: {err}");
    }
}

#[test]
fn unsafe_or_unpinned_settings_are_rejected() {
    for arg in [
        "webhook.image.tag=latest",
        "controller.image.tag=",
        "runner.image.digest=abc",
        "podSecurityContext.runAsNonRoot=false",
        "podSecurityContext.runAsUser=0",
        "podSecurityContext.seccompProfile.type=Unconfined",
        "containerSecurityContext.allowPrivilegeEscalation=true",
        "containerSecurityContext.readOnlyRootFilesystem=false",
        "containerSecurityContext.capabilities.drop={NET_RAW}",
        "webhook.logFormat=xml",
        "webhook.replicas=0",
        "webhook.port=70000",
        "controller.concurrency=0",
        "controller.maxRunningJobs.total=-1",
        "controller.maxRunningJobs.perNamespace=-1",
        "controller.maxRunningJobs.perNamespace=2.5",
        "controller.maxRunningJobs.total=4294967296",
        "runner.serviceAccount.name=Not_An_Account",
        "webhook.tls.certManager.duration=90days",
        "webhook.tls.certManager.issuerRef.name=Corp_CA",
        "webhook.tls.certManager.issuerRef.kind=clusterissuer",
        "webhook.tls.certManager.issuerRef.group=",
        "webhook.tls.certManager.issuerRef.namespace=cert-manager",
        "metrics.prometheusRule.consecutiveFailures=0",
        "webhook.limits.maxBodyBytes=7MB",
        "webhook.limits.idleTimeout=60",
        "webhook.limits.maxConnections=0",
        "webhook.limits.largeReviews=0",
    ] {
        let err = rejected(&["--set", arg]);
        assert!(err.contains(SCHEMA_ERROR), "{arg}: {err}");
    }
}

#[test]
fn own_certificate_without_its_secret_or_ca_bundle_fails_with_a_clear_message() {
    let err = rejected(&["--set", "webhook.tls.certManager.enabled=false"]);
    assert!(err.contains("webhook.tls.existingSecret is required"), "{err}");
    let err = rejected(&[
        "--set",
        "webhook.tls.certManager.enabled=false",
        "--set",
        "webhook.tls.existingSecret=mine",
    ]);
    assert!(err.contains("webhook.tls.caBundle is required"), "{err}");
}

#[test]
fn documented_overrides_of_every_type_are_accepted() {
    helm_template(&[
        "--set",
        "webhook.replicas=3",
        "--set",
        "webhook.podDisruptionBudget.minAvailable=50%",
        "--set",
        "webhook.resources.limits.cpu=1",
        "--set",
        "controller.resources.requests.memory=128Mi",
        "--set",
        "controller.logFormat=text",
        "--set",
        "controller.replicas=2",
        "--set",
        "metrics.prometheusRule.for=30m",
        "--set-json",
        "controller.affinity={\"nodeAffinity\":{}}",
        "--set",
        "fullnameOverride=infra",
    ])
    .unwrap();
}

/// Every key in values.yaml has a comment on the line above it (list items excepted).
#[test]
fn every_key_of_values_yaml_is_documented_on_the_line_above() {
    let text = std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut undocumented = vec![];
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if t.is_empty() || t.starts_with('#') || t.starts_with("- ") || !t.contains(':') {
            continue;
        }
        let above = i.checked_sub(1).map(|j| lines[j].trim_start()).unwrap_or("");
        if !above.starts_with('#') {
            undocumented.push(format!("line {}: {t}", i + 1));
        }
    }
    assert!(undocumented.is_empty(), "undocumented keys: {undocumented:#?}");
}

//! The chart's notification targets (docs/notifications.md): none by default; with
//! `notifications.targets`, a ConfigMap the controller mounts and reads at start, and a Role that
//! lets it get the Secrets those targets name, and no other Secret.

#![allow(clippy::unwrap_used)]

use captf_chart_tests::{Rendered, helm_template, strings};
use serde_json::{Value, json};

const TARGETS: &str = r#"notifications.targets=[
  {"name": "platform-slack", "kind": "Slack", "urlSecret": {"name": "captf-notify", "key": "slack-url"}, "events": ["awaiting-approval"]},
  {"name": "audit", "kind": "CloudEvents", "urlSecret": {"name": "captf-notify", "key": "audit-url"}, "tokenSecret": {"name": "audit-token", "key": "token"}}
]"#;

fn controller(r: &Rendered) -> &Value {
    r.get("Deployment", "captf-controller").unwrap()
}

fn args(r: &Rendered) -> Vec<String> {
    strings(&controller(r)["spec"]["template"]["spec"]["containers"][0]["args"])
}

fn parse(args: &[String]) -> captf_controller::runtime::RunArgs {
    captf_controller::runtime::RunArgs::from_flags(&args[1..]).unwrap()
}

#[test]
fn by_default_there_is_no_target_no_configmap_and_no_extra_right() {
    let r = helm_template(&[]).unwrap();
    assert!(r.get("ConfigMap", "captf-controller-notifications").is_none());
    assert!(r.get("Role", "captf-controller-notifications").is_none());
    let run = parse(&args(&r));
    assert_eq!(run.notification_targets_file, "");
    assert!(run.namespace_notification_targets);
    assert_eq!(run.notify_after_failures, 3);
}

#[test]
fn targets_are_mounted_read_at_start_and_only_their_secrets_may_be_read() {
    let r = helm_template(&[
        "--set-json",
        TARGETS,
        "--set",
        "notifications.namespaceTargets=false",
        "--set",
        "notifications.afterFailures=5",
    ])
    .unwrap();
    let cm = r.get("ConfigMap", "captf-controller-notifications").unwrap();
    let listed: Value = serde_yaml_ng::from_str(cm["data"]["targets.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(listed[1]["tokenSecret"], json!({"name": "audit-token", "key": "token"}));
    assert_eq!(listed.as_array().unwrap().len(), 2);

    let role = r.get("Role", "captf-controller-notifications").unwrap();
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["audit-token", "captf-notify"], "verbs": ["get"]}])
    );
    let binding = r.get("RoleBinding", "captf-controller-notifications").unwrap();
    assert_eq!(binding["roleRef"]["name"], "captf-controller-notifications");
    assert_eq!(binding["subjects"][0]["name"], "captf-controller");

    let run = parse(&args(&r));
    assert_eq!(run.notification_targets_file, "/etc/captf/notifications/targets.yaml");
    assert!(!run.namespace_notification_targets);
    assert_eq!(run.notify_after_failures, 5);
    let pod = &controller(&r)["spec"]["template"];
    assert_eq!(
        pod["spec"]["volumes"][0]["configMap"]["name"],
        "captf-controller-notifications"
    );
    assert_eq!(
        pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
        "/etc/captf/notifications"
    );
    // Read only at start: a changed list must restart the pods.
    let sum = &pod["metadata"]["annotations"]["captf.io/notification-targets-checksum"];
    assert!(sum.as_str().is_some_and(|s| s.len() == 64), "{sum}");
}

#[test]
fn a_target_that_breaks_the_schema_is_refused_at_install() {
    for bad in [
        r#"notifications.targets=[{"name": "Bad_Name", "kind": "Slack", "urlSecret": {"name": "s", "key": "k"}}]"#,
        r#"notifications.targets=[{"name": "x", "kind": "Email", "urlSecret": {"name": "s", "key": "k"}}]"#,
        r#"notifications.targets=[{"name": "x", "kind": "Slack"}]"#,
        r#"notifications.targets=[{"name": "x", "kind": "Slack", "urlSecret": {"name": "s", "key": "k"}, "events": ["everything"]}]"#,
        r#"notifications.targets=[{"name": "x", "kind": "Slack", "urlSecret": {"name": "s", "key": "k"}, "url": "https://x"}]"#,
    ] {
        let err = captf_chart_tests::helm_template_error(&["--set-json", bad]).unwrap();
        assert!(err.is_some(), "accepted: {bad}");
    }
    let err = captf_chart_tests::helm_template_error(&["--set", "notifications.afterFailures=0"]).unwrap();
    assert!(err.is_some());
}

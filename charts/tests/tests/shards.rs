//! `controller.shards`: one controller Deployment per shard besides the main one
//! (docs/operating.md, "Sharding"). A shard serves the objects labelled
//! `sharding.captf.io/key=<shard>` and the main controller those without the label; each has pod
//! labels of its own (so no Deployment, Service or ServiceMonitor endpoint takes in another's
//! pods) and its own leader Lease, and otherwise runs exactly as the main controller. Names that
//! would make a bad label or object name, and a `watchLabelSelector` set together with shards,
//! are refused with a message that says why. That a shard and the main controller really hand an
//! object over is `controller/tests/scenarios/sharding.rs` and `kubetest/tests/controller_rights.rs`.

#![allow(clippy::unwrap_used)]

use captf_chart_tests::features::SHARDS;
use captf_chart_tests::{
    KINDS_WITHOUT_OFFLINE_SCHEMA, Rendered, helm_template, helm_template_error, helm_template_release,
    kubernetes_validate, rbac_documents, strings,
};
use captf_core::sharding::{SHARD_LABEL, leader_lease_name, object_selector};
use captf_shared::names::is_dns1123_label;
use serde_json::{Value, json};

const SCHEMA_ERROR: &str = "values don't meet the specifications of the schema";
/// The main controller's Deployment, and the shards' of [`SHARDS`].
const MAIN: &str = "captf-controller";
const BLUE: &str = "captf-controller-shard-blue";
const GREEN: &str = "captf-controller-shard-green";

fn deployment<'a>(r: &'a Rendered, name: &str) -> &'a Value {
    r.get("Deployment", name)
        .unwrap_or_else(|| panic!("no Deployment {name} in {:?}", r.summary()))
}

fn args(d: &Value) -> Vec<String> {
    strings(&d["spec"]["template"]["spec"]["containers"][0]["args"])
}

/// `captf-controller run <flags>`, parsed as the binary parses it.
fn parse(d: &Value) -> captf_controller::runtime::RunArgs {
    let args = args(d);
    let Some(("run", flags)) = args.split_first().map(|(first, rest)| (first.as_str(), rest)) else {
        panic!("the chart's controller args do not start with `run`: {args:?}");
    };
    captf_controller::runtime::RunArgs::from_flags(flags)
        .unwrap_or_else(|e| panic!("captf-controller rejects the chart's args {args:?}: {e}"))
}

/// The `--watch-label-selector` flags of a Deployment.
fn selector_flags(d: &Value) -> Vec<String> {
    args(d)
        .into_iter()
        .filter(|a| a.starts_with("--watch-label-selector"))
        .collect()
}

/// The controller Deployments (the main one and the shards'), by name: all but the webhook's.
fn controllers(r: &Rendered) -> Vec<String> {
    let mut names: Vec<String> = r
        .of_kind("Deployment")
        .into_iter()
        .filter_map(|d| d["metadata"]["name"].as_str())
        .filter(|n| !n.ends_with("-webhook"))
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

/// Whether a `matchLabels` map (or a Service's selector) selects these labels.
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_object().unwrap();
    !selector.is_empty() && selector.iter().all(|(k, v)| &labels[k] == v)
}

fn pod_labels(d: &Value) -> &Value {
    &d["spec"]["template"]["metadata"]["labels"]
}

fn rejected(extra: &[&str]) -> String {
    helm_template_error(extra)
        .unwrap()
        .unwrap_or_else(|| panic!("helm template {extra:?} was accepted"))
}

/// The same values without the schema: the template's own check must refuse them too.
fn rejected_without_schema(extra: &[&str]) -> String {
    let mut all = vec!["--skip-schema-validation"];
    all.extend_from_slice(extra);
    rejected(&all)
}

#[test]
fn without_shards_the_chart_renders_one_controller_deployment_serving_every_object() {
    let r = helm_template(&["--set", "metrics.serviceMonitor.enabled=true"]).unwrap();
    assert_eq!(controllers(&r), [MAIN]);
    assert!(selector_flags(deployment(&r, MAIN)).is_empty());
    assert_eq!(parse(deployment(&r, MAIN)).watch_label_selector, "");
    assert!(
        r.docs
            .iter()
            .all(|d| d["metadata"]["labels"]["app.kubernetes.io/component"] != "controller-shard"),
        "{:?}",
        r.summary()
    );
    let sm = r.of_kind("ServiceMonitor")[0];
    assert_eq!(sm["spec"]["endpoints"].as_array().unwrap().len(), 2);
}

#[test]
fn each_shard_renders_its_own_deployment_serving_the_objects_labelled_with_its_name() {
    let r = helm_template(SHARDS).unwrap();
    assert_eq!(controllers(&r), [MAIN, BLUE, GREEN]);
    for (name, shard) in [(BLUE, "blue"), (GREEN, "green")] {
        let d = deployment(&r, name);
        assert_eq!(d["metadata"]["namespace"], "captf-system");
        assert_eq!(
            selector_flags(d),
            [format!("--watch-label-selector={SHARD_LABEL}={shard}")],
            "{name}"
        );
        assert_eq!(parse(d).watch_label_selector, format!("sharding.captf.io/key={shard}"));
    }
}

#[test]
fn with_shards_the_main_controller_serves_the_objects_of_no_shard() {
    let r = helm_template(SHARDS).unwrap();
    let main = deployment(&r, MAIN);
    assert_eq!(selector_flags(main), ["--watch-label-selector=!sharding.captf.io/key"]);
    assert_eq!(parse(main).watch_label_selector, format!("!{SHARD_LABEL}"));
}

#[test]
fn each_controller_deployment_selects_its_own_pods_and_no_other_deployments() {
    let r = helm_template(SHARDS).unwrap();
    let deployments = r.of_kind("Deployment");
    assert_eq!(deployments.len(), 4, "the webhook, the main controller and two shards");
    for d in &deployments {
        let name = d["metadata"]["name"].as_str().unwrap();
        let selector = &d["spec"]["selector"]["matchLabels"];
        assert!(selects(selector, pod_labels(d)), "{name} does not select its own pods");
        for other in &deployments {
            let other_name = other["metadata"]["name"].as_str().unwrap();
            if other_name != name {
                assert!(
                    !selects(selector, pod_labels(other)),
                    "{name}'s selector {selector} takes in the pods of {other_name}"
                );
            }
        }
    }
    // The main controller's selector is the one it had before shards: Kubernetes never lets a
    // Deployment's selector change, so an upgrade that adds shards must keep it.
    let before = helm_template(&[]).unwrap();
    assert_eq!(
        deployment(&r, MAIN)["spec"]["selector"],
        deployment(&before, MAIN)["spec"]["selector"]
    );
    for (name, shard) in [(BLUE, "blue"), (GREEN, "green")] {
        let labels = pod_labels(deployment(&r, name));
        assert_eq!(labels["captf.io/shard"], shard, "{name}");
        assert_eq!(labels["app.kubernetes.io/component"], "controller-shard", "{name}");
        assert_eq!(
            deployment(&r, name)["metadata"]["labels"]["captf.io/shard"],
            shard,
            "{name}"
        );
    }
}

/// A Deployment with what may differ between the main controller and a shard taken out: its
/// name, labels, selector and `--watch-label-selector`.
fn without_identity(d: &Value) -> Value {
    let mut d = d.clone();
    d["metadata"]["name"] = Value::Null;
    d["metadata"]["labels"] = Value::Null;
    d["spec"]["selector"] = Value::Null;
    d["spec"]["template"]["metadata"]["labels"] = Value::Null;
    let container = &mut d["spec"]["template"]["spec"]["containers"][0];
    let kept: Vec<Value> = strings(&container["args"])
        .into_iter()
        .filter(|a| !a.starts_with("--watch-label-selector"))
        .map(Value::from)
        .collect();
    container["args"] = Value::from(kept);
    d
}

#[test]
fn a_shard_runs_exactly_as_the_main_controller_but_for_its_name_labels_and_selector() {
    let r = helm_template(&[
        "--set",
        "controller.shards={blue,green}",
        "--set",
        "controller.replicas=2",
        "--set",
        "controller.resources.requests.memory=128Mi",
        "--set",
        "controller.watchNamespaces={tenant-a,tenant-b}",
        "--set",
        "controller.podAnnotations.team=platform",
        "--set",
        "controller.tolerations[0].key=dedicated",
        "--set",
        "controller.tolerations[0].operator=Exists",
        "--set",
        "controller.priorityClassName=platform",
        "--set",
        "imagePullSecrets[0].name=registry",
        "--set",
        "controller.image.digest=sha256:1111111111111111111111111111111111111111111111111111111111111111",
        "--set",
        "runner.serviceAccount.name=platform-runner",
    ])
    .unwrap();
    let main = without_identity(deployment(&r, MAIN));
    assert_eq!(main["spec"]["replicas"], 2);
    assert_eq!(
        main["spec"]["template"]["spec"]["serviceAccountName"],
        "captf-controller"
    );
    for name in [BLUE, GREEN] {
        let shard = without_identity(deployment(&r, name));
        assert_eq!(shard, main, "{name} differs from the main controller");
    }
}

#[test]
fn shards_use_the_main_controllers_account_and_rbac_unchanged() {
    let without = rbac_documents(&helm_template(&[]).unwrap());
    let with = rbac_documents(&helm_template(SHARDS).unwrap());
    assert!(with == without, "shards changed the RBAC");
    let two = rbac_documents(&helm_template(&["--set", "controller.watchNamespaces={a,b}"]).unwrap());
    let two_sharded = rbac_documents(
        &helm_template(&[
            "--set",
            "controller.watchNamespaces={a,b}",
            "--set",
            "controller.shards={blue}",
        ])
        .unwrap(),
    );
    assert!(two == two_sharded, "shards changed the RBAC of listed namespaces");
}

#[test]
fn each_shard_elects_its_own_leader_through_a_lease_the_admission_policy_lets_it_write() {
    let r = helm_template(SHARDS).unwrap();
    let mut leases = vec![];
    for name in controllers(&r) {
        let run = parse(deployment(&r, &name));
        assert!(run.leader_elect, "{name}");
        let selector = object_selector(&run.watch_label_selector, &run.watch_filter).unwrap();
        let lease = leader_lease_name(selector.as_deref());
        assert!(lease.starts_with("captf-controller-leader-"), "{name}: {lease}");
        leases.push(lease);
    }
    let mut distinct = leases.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "one leader Lease per controller: {leases:?}");
    let policy = r.get("ValidatingAdmissionPolicy", "captf-controller-writes").unwrap();
    let rules = serde_json::to_string(&policy["spec"]["validations"]).unwrap();
    let leases_rule = policy["spec"]["validations"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["expression"].as_str())
        .find(|e| e.starts_with("variables.kind != 'leases'"))
        .unwrap_or_else(|| panic!("no rule on Leases: {rules}"));
    assert!(
        leases_rule.contains("variables.name.startsWith('captf-controller-leader-')")
            && leases_rule.contains("request.namespace == variables.home"),
        "the policy does not let the controller write its shards' leader Leases: {leases_rule}"
    );
    let matched = policy["spec"]["matchConditions"][0]["expression"].as_str().unwrap();
    assert!(
        matched.contains("':captf-controller'"),
        "the shards' account is held to the policy: {matched}"
    );
}

#[test]
fn shards_keep_the_watch_filter_on_every_controller() {
    let r = helm_template(&[
        "--set",
        "controller.shards={blue,green}",
        "--set",
        "controller.watchFilter=team-a",
    ])
    .unwrap();
    for name in controllers(&r) {
        assert_eq!(parse(deployment(&r, &name)).watch_filter, "team-a", "{name}");
    }
}

#[test]
fn each_shard_has_a_metrics_service_of_its_pods_only_which_the_service_monitor_scrapes_with_the_token() {
    let r = helm_template(&[
        "--set",
        "controller.shards={blue,green}",
        "--set",
        "metrics.serviceMonitor.enabled=true",
    ])
    .unwrap();
    let deployments = r.of_kind("Deployment");
    // Every Service selects the pods of exactly one Deployment.
    for svc in r.of_kind("Service") {
        let name = svc["metadata"]["name"].as_str().unwrap();
        let owners: Vec<&str> = deployments
            .iter()
            .filter(|d| selects(&svc["spec"]["selector"], pod_labels(d)))
            .filter_map(|d| d["metadata"]["name"].as_str())
            .collect();
        assert_eq!(owners.len(), 1, "{name} selects the pods of {owners:?}");
    }
    for (service, deploy) in [
        ("captf-controller-metrics", MAIN),
        ("captf-controller-shard-blue-metrics", BLUE),
        ("captf-controller-shard-green-metrics", GREEN),
    ] {
        let svc = r
            .get("Service", service)
            .unwrap_or_else(|| panic!("no Service {service}"));
        assert!(selects(&svc["spec"]["selector"], pod_labels(deployment(&r, deploy))));
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics");
    }
    // The ServiceMonitor selects the three controller Services and the webhook's.
    let sm = r.of_kind("ServiceMonitor")[0];
    let mut selected: Vec<&str> = r
        .of_kind("Service")
        .into_iter()
        .filter(|s| selects(&sm["spec"]["selector"]["matchLabels"], &s["metadata"]["labels"]))
        .filter_map(|s| s["metadata"]["name"].as_str())
        .collect();
    selected.sort_unstable();
    assert_eq!(
        selected,
        [
            "captf-controller-metrics",
            "captf-controller-shard-blue-metrics",
            "captf-controller-shard-green-metrics",
            "captf-webhook-metrics"
        ]
    );
    // Each selected Service is kept by one endpoint, and the controllers' endpoints carry the token.
    let endpoints = sm["spec"]["endpoints"].as_array().unwrap();
    for svc in r
        .of_kind("Service")
        .into_iter()
        .filter(|s| selected.contains(&s["metadata"]["name"].as_str().unwrap()))
    {
        let component = &svc["metadata"]["labels"]["app.kubernetes.io/component"];
        let keeping: Vec<&Value> = endpoints
            .iter()
            .filter(|e| {
                e["relabelings"].as_array().unwrap().iter().any(|rl| {
                    rl["action"] == "keep"
                        && strings(&rl["sourceLabels"])
                            == ["__meta_kubernetes_service_label_app_kubernetes_io_component"]
                        && &rl["regex"] == component
                })
            })
            .collect();
        assert_eq!(keeping.len(), 1, "{}: {endpoints:?}", svc["metadata"]["name"]);
        let token = keeping[0].get("bearerTokenFile").is_some();
        assert_eq!(
            token,
            component != "webhook",
            "{}: {}",
            svc["metadata"]["name"],
            keeping[0]
        );
    }
    // Without metrics authentication no endpoint carries a token.
    let none = helm_template(&[
        "--set",
        "controller.shards={blue}",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "controller.metrics.auth=none",
    ])
    .unwrap();
    for e in none.of_kind("ServiceMonitor")[0]["spec"]["endpoints"]
        .as_array()
        .unwrap()
    {
        assert!(
            e.get("bearerTokenFile").is_none() && e.get("authorization").is_none(),
            "{e}"
        );
    }
}

#[test]
fn shard_deployments_and_services_validate_against_kubernetes_1_30() {
    let r = helm_template(&[
        "--set",
        "controller.shards={blue,green,7}",
        "--set",
        "metrics.serviceMonitor.enabled=true",
    ])
    .unwrap();
    let v = kubernetes_validate(&r.yaml).unwrap();
    assert!(v.exit_ok && v.errors.is_empty(), "{}", v.output);
    for kind in &v.no_schema {
        assert!(KINDS_WITHOUT_OFFLINE_SCHEMA.contains(&kind.as_str()), "{}", v.output);
    }
    assert_eq!(v.passed.len() + v.no_schema.len(), r.docs.len(), "{}", v.output);
    for shard in ["blue", "green", "7"] {
        for want in [
            format!("deployment/captf-controller-shard-{shard}"),
            format!("service/captf-controller-shard-{shard}-metrics"),
        ] {
            assert!(v.passed.contains(&want), "{want} was not validated:\n{}", v.output);
        }
    }
}

#[test]
fn a_numeric_shard_name_is_taken_as_its_digits() {
    let r = helm_template(&["--set", "controller.shards={7}"]).unwrap();
    let d = deployment(&r, "captf-controller-shard-7");
    assert_eq!(pod_labels(d)["captf.io/shard"], json!("7"), "a string label value");
    assert_eq!(parse(d).watch_label_selector, "sharding.captf.io/key=7");
    let err = rejected(&["--set-json", r#"controller.shards=["7",7]"#]);
    assert!(err.contains("controller.shards: \"7\" is listed twice"), "{err}");
    let err = rejected(&["--set-json", "controller.shards=[-1]"]);
    assert!(
        err.contains(SCHEMA_ERROR) && err.contains("controller.shards.0"),
        "{err}"
    );
}

#[test]
fn a_shard_name_that_is_not_a_lowercase_dns_label_is_refused() {
    let long = "a".repeat(64);
    for bad in ["Shard_1", "", "-a", "a-", "a.b", "shard 1", long.as_str()] {
        let list = serde_json::to_string(&[bad]).unwrap();
        let arg = format!("controller.shards={list}");
        let err = rejected(&["--set-json", &arg]);
        assert!(
            err.contains(SCHEMA_ERROR) && err.contains("controller.shards.0"),
            "{bad:?}: {err}"
        );
        let err = rejected_without_schema(&["--set-json", &arg]);
        if bad.len() <= 63 {
            assert!(
                err.contains(&format!(
                    "controller.shards: {list_item} is not a valid shard name: use lowercase letters, digits and '-'",
                    list_item = serde_json::to_string(bad).unwrap()
                )),
                "{bad:?}: {err}"
            );
        } else {
            assert!(err.contains("controller.shards: \"aaaa"), "{bad:?}: {err}");
        }
    }
}

#[test]
fn a_shard_listed_twice_is_refused() {
    let err = rejected(&["--set", "controller.shards={blue,green,blue}"]);
    assert!(
        err.contains(SCHEMA_ERROR) && err.contains("controller.shards: array items[0,2] must be unique"),
        "{err}"
    );
    let err = rejected_without_schema(&["--set", "controller.shards={blue,green,blue}"]);
    assert!(
        err.contains("controller.shards: \"blue\" is listed twice: each shard is one Deployment"),
        "{err}"
    );
}

#[test]
fn a_shard_name_too_long_for_63_character_object_names_is_refused() {
    // "captf-controller-shard-" + name + "-metrics": 32 characters of name fit.
    let fits = "s".repeat(32);
    let r = helm_template(&["--set", &format!("controller.shards={{{fits}}}")]).unwrap();
    let service = format!("captf-controller-shard-{fits}-metrics");
    assert_eq!(service.len(), 63);
    assert!(r.get("Service", &service).is_some(), "{:?}", r.summary());
    let over = "s".repeat(33);
    let err = rejected(&["--set", &format!("controller.shards={{{over}}}")]);
    assert!(
        err.contains(&format!("controller.shards: \"{over}\" is too long: its Deployment captf-controller-shard-{over} and metrics Service captf-controller-shard-{over}-metrics must stay within Kubernetes' 63 characters, so with this release name a shard name has at most 32 characters")),
        "{err}"
    );
    // A release name of 40 characters (the chart's longest prefix) leaves no room.
    let err = rejected(&[
        "--set",
        &format!("fullnameOverride={}", "f".repeat(40)),
        "--set",
        "controller.shards={a}",
    ]);
    assert!(
        err.contains("which no shard name fits with this release name: shorten the release name"),
        "{err}"
    );
    // Whatever the release name, every name rendered with the longest shard name that fits is a DNS label.
    for release in ["x", "captf", "platform-captf", &"r".repeat(30)] {
        let room = 63 - format!("{}-controller-shard--metrics", prefix(release)).len();
        let shard = "s".repeat(room);
        let r = helm_template_release(release, &["--set", &format!("controller.shards={{{shard}}}")])
            .unwrap_or_else(|e| panic!("release {release}, shard of {room}: {e}"));
        // CRDs are named `<plural>.<group>`, whatever the release.
        for doc in r.docs.iter().filter(|d| d["kind"] != "CustomResourceDefinition") {
            let name = doc["metadata"]["name"].as_str().unwrap();
            assert!(
                is_dns1123_label(name),
                "release {release}: {} name {name:?}",
                doc["kind"]
            );
        }
        assert_eq!(controllers(&r).len(), 2, "release {release}");
    }
}

/// The chart's name prefix of a release ("<release>-captf", or the release when it contains "captf").
fn prefix(release: &str) -> String {
    if release.contains("captf") {
        release.to_string()
    } else {
        format!("{release}-captf")
    }
}

#[test]
fn shards_together_with_a_watch_label_selector_are_refused() {
    let err = rejected(&[
        "--set",
        "controller.shards={blue}",
        "--set",
        "controller.watchLabelSelector=team=a",
    ]);
    assert!(
        err.contains("controller.shards sets each controller's --watch-label-selector itself")
            && err.contains("controller.watchLabelSelector (\"team=a\") cannot be set with it: unset one of them"),
        "{err}"
    );
    // Each alone renders.
    helm_template(&["--set", "controller.watchLabelSelector=team=a"]).unwrap();
    helm_template(&["--set", "controller.shards={blue}"]).unwrap();
}

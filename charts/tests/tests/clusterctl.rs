//! The clusterctl provider repository (`clusterctl/infrastructure-terraform/<version>/`): the
//! committed files are what the generator writes, and the components file follows the clusterctl
//! provider contract (one Namespace, every namespaced object in it, the provider label on every
//! object, the controller container named `manager` with `--namespace`, `${VAR:=default}`
//! variables) and validates against the Kubernetes 1.30 schemas once the variables are filled in.
//! `metadata.yaml` follows clusterctl's Metadata schema (`clusterctl.cluster.x-k8s.io/v1alpha3`).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use captf_chart_tests::clusterctl::{
    self, COMPONENTS_FILE, COMPONENTS_VALUES, FIXED_CONTROLLER_FLAGS, METADATA_FILE, PROVIDER, PROVIDER_LABEL, Sets,
    TARGET_NAMESPACE, VARIABLES,
};
use captf_chart_tests::{
    KINDS_WITHOUT_OFFLINE_SCHEMA, default_image, helm_template, kubernetes_validate, strings, workspace_root,
};
use captf_controller::runtime::RunArgs;
use serde::Deserialize;
use serde_json::Value;

fn committed(file: &str) -> String {
    let dir = clusterctl::repository_dir(&clusterctl::chart_version().unwrap());
    std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| {
        panic!("{file} is missing ({e}): run `cargo run -p captf-chart-tests --bin captf-components`")
    })
}

fn components() -> Vec<Value> {
    clusterctl::parse_components(&committed(COMPONENTS_FILE)).unwrap()
}

/// Cluster-scoped kinds in the components file; everything else is namespaced.
const CLUSTER_SCOPED: [&str; 8] = [
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

#[test]
fn components_yaml_is_fresh() {
    for (path, want) in clusterctl::generate().unwrap() {
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{} is stale: run `cargo run -p captf-chart-tests --bin captf-components`",
            path.display()
        );
    }
}

#[test]
fn components_declare_exactly_one_namespace_and_put_every_namespaced_object_in_it() {
    let docs = components();
    let namespaces: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "Namespace").collect();
    assert_eq!(namespaces.len(), 1, "clusterctl aborts on more than one Namespace");
    assert_eq!(namespaces[0]["metadata"]["name"], TARGET_NAMESPACE);
    for d in &docs {
        let kind = d["kind"].as_str().unwrap();
        let ns = &d["metadata"]["namespace"];
        if CLUSTER_SCOPED.contains(&kind) {
            assert!(ns.is_null(), "{kind} {} is cluster-scoped", d["metadata"]["name"]);
        } else {
            assert_eq!(ns, TARGET_NAMESPACE, "{kind} {}", d["metadata"]["name"]);
        }
    }
}

#[test]
fn every_component_carries_the_provider_label() {
    for d in components() {
        assert_eq!(
            d["metadata"]["labels"][PROVIDER_LABEL], PROVIDER,
            "{} {}",
            d["kind"], d["metadata"]["name"]
        );
        assert!(
            d["metadata"]["labels"]["helm.sh/chart"].is_null(),
            "clusterctl installs it, not Helm"
        );
    }
}

#[test]
fn components_install_every_crd_with_the_contract_labels() {
    let docs = components();
    let crds: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .collect();
    let mut want: Vec<String> = captf_shared::crd::crds()
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    let mut have: Vec<String> = crds
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    want.sort();
    have.sort();
    assert_eq!(have, want);
    for c in crds {
        assert_eq!(c["metadata"]["labels"]["cluster.x-k8s.io/v1beta2"], "v1alpha1_v1beta1");
    }
}

fn manager(docs: &[Value]) -> Value {
    let managers: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "Deployment")
        .flat_map(|d| d["spec"]["template"]["spec"]["containers"].as_array().unwrap())
        .filter(|c| c["name"] == "manager")
        .collect();
    assert_eq!(managers.len(), 1, "one container named manager (the controller)");
    managers[0].clone()
}

/// The manager's `captf-controller run <flags>`, parsed as the binary parses it.
fn run_args(manager: &Value) -> captf_controller::runtime::RunArgs {
    let args = strings(&manager["args"]);
    let Some(("run", flags)) = args.split_first().map(|(first, rest)| (first.as_str(), rest)) else {
        panic!("the manager's args do not start with `run`: {args:?}");
    };
    captf_controller::runtime::RunArgs::from_flags(flags)
        .unwrap_or_else(|e| panic!("captf-controller rejects the components' args: {e}"))
}

#[test]
fn the_controller_container_is_named_manager_and_takes_the_watch_namespace_variable() {
    let text = committed(COMPONENTS_FILE);
    let docs = components();
    let m = manager(&docs);
    assert!(strings(&m["args"]).contains(&"--namespace=${CAPTF_WATCH_NAMESPACE:=\"\"}".to_string()));
    let webhook = docs
        .iter()
        .filter(|d| d["kind"] == "Deployment")
        .map(|d| &d["spec"]["template"]["spec"]["containers"][0])
        .find(|c| c["name"] == "webhook")
        .expect("the webhook's Deployment");
    assert!(
        strings(&webhook["args"]).contains(&"--watched-namespaces=${CAPTF_WATCH_NAMESPACE:=\"\"}".to_string()),
        "the webhook is told the same namespaces: {}",
        webhook["args"]
    );
    // As clusterctl installs it (every variable at its default): all namespaces.
    let installed = clusterctl::parse_components(&clusterctl::substitute(&text, &BTreeMap::new()).unwrap()).unwrap();
    let run = run_args(&manager(&installed));
    assert_eq!(run.namespace, [""], "`--namespace=\"\"` reads as empty");
    assert!(
        run.watch_namespaces().is_empty(),
        "an empty --namespace watches all namespaces"
    );
    assert_eq!(run.policy.runner_image, default_image("runner").unwrap());
    assert_eq!(run.policy.runner_service_account, "", "each object's own account");
    // With the variables set.
    let values = BTreeMap::from([
        ("CAPTF_WATCH_NAMESPACE", "tenant-a"),
        ("CAPTF_RUNNER_IMAGE", "registry.example/runner:1"),
    ]);
    let installed = clusterctl::parse_components(&clusterctl::substitute(&text, &values).unwrap()).unwrap();
    let run = run_args(&manager(&installed));
    assert_eq!(run.watch_namespaces(), ["tenant-a"]);
    assert_eq!(run.policy.runner_image, "registry.example/runner:1");
    let values = BTreeMap::from([("CAPTF_WATCH_NAMESPACE", "tenant-a,tenant-b")]);
    let installed = clusterctl::parse_components(&clusterctl::substitute(&text, &values).unwrap()).unwrap();
    assert_eq!(
        run_args(&manager(&installed)).watch_namespaces(),
        ["tenant-a", "tenant-b"]
    );
    // The webhook, as installed, is told the same namespaces: every one when the variable is
    // unset (its `""`), else the listed ones.
    let webhook_watched = |values: &BTreeMap<&str, &str>| {
        let installed = clusterctl::parse_components(&clusterctl::substitute(&text, values).unwrap()).unwrap();
        let c = installed
            .iter()
            .filter(|d| d["kind"] == "Deployment")
            .map(|d| d["spec"]["template"]["spec"]["containers"][0].clone())
            .find(|c| c["name"] == "webhook")
            .unwrap();
        let args = std::iter::once("captf-webhook".to_string()).chain(strings(&c["args"]));
        let cli = <captf_webhook::cli::Cli as clap::Parser>::try_parse_from(args).unwrap();
        cli.serve.to_config().unwrap().watched
    };
    assert_eq!(
        webhook_watched(&BTreeMap::new()),
        captf_webhook::watched::Watched::all()
    );
    assert_eq!(
        webhook_watched(&values),
        captf_webhook::watched::Watched::only(["tenant-a", "tenant-b"])
    );
}

#[test]
fn the_runner_job_limits_are_variables_with_the_charts_defaults() {
    let text = committed(COMPONENTS_FILE);
    let args = strings(&manager(&components())["args"]);
    assert!(
        args.contains(&"--max-running-jobs=${CAPTF_MAX_RUNNING_JOBS:=0}".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--max-running-jobs-per-namespace=${CAPTF_MAX_RUNNING_JOBS_PER_NAMESPACE:=10}".to_string()),
        "{args:?}"
    );
    let installed = clusterctl::parse_components(&clusterctl::substitute(&text, &BTreeMap::new()).unwrap()).unwrap();
    let run = run_args(&manager(&installed));
    assert_eq!((run.max_running_jobs, run.max_running_jobs_per_namespace), (0, 10));
    let values = BTreeMap::from([
        ("CAPTF_MAX_RUNNING_JOBS", "40"),
        ("CAPTF_MAX_RUNNING_JOBS_PER_NAMESPACE", "0"),
    ]);
    let installed = clusterctl::parse_components(&clusterctl::substitute(&text, &values).unwrap()).unwrap();
    let run = run_args(&manager(&installed));
    assert_eq!((run.max_running_jobs, run.max_running_jobs_per_namespace), (40, 0));
}

#[test]
fn the_watch_filter_is_a_variable_that_leaves_every_object_served_when_unset() {
    let text = committed(COMPONENTS_FILE);
    let args = strings(&manager(&components())["args"]);
    assert!(
        args.contains(&"--watch-filter=${CAPTF_WATCH_FILTER:=\"\"}".to_string()),
        "{args:?}"
    );
    let selector = |values: &BTreeMap<&str, &str>| {
        let installed = clusterctl::parse_components(&clusterctl::substitute(&text, values).unwrap()).unwrap();
        let run = run_args(&manager(&installed));
        captf_core::sharding::object_selector(&run.watch_label_selector, &run.watch_filter).unwrap()
    };
    assert_eq!(selector(&BTreeMap::new()), None);
    assert_eq!(
        selector(&BTreeMap::from([("CAPTF_WATCH_FILTER", "mgmt-a")])),
        Some("cluster.x-k8s.io/watch-filter=mgmt-a".to_string())
    );
}

/// The webhook takes the controller's runner image and service account, as the same variables:
/// once installed, both read the same tenant policy flags into the same policy, so a spec naming
/// the runner image `CAPTF_RUNNER_IMAGE` sets is allowed by both.
#[test]
fn the_webhook_takes_the_runner_variables_too_and_reads_the_same_policy() {
    use clap::Parser;
    let text = committed(COMPONENTS_FILE);
    let webhook_args = |docs: &[Value]| -> Vec<String> {
        let c = docs
            .iter()
            .filter(|d| d["kind"] == "Deployment")
            .flat_map(|d| d["spec"]["template"]["spec"]["containers"].as_array().unwrap())
            .find(|c| c["name"] == "webhook")
            .unwrap();
        strings(&c["args"])
    };
    let args = webhook_args(&components());
    let chart_runner = default_image("runner").unwrap();
    for want in [
        format!("--runner-image=${{CAPTF_RUNNER_IMAGE:={chart_runner}}}"),
        "--runner-service-account=${CAPTF_RUNNER_SERVICE_ACCOUNT:=\"\"}".to_string(),
    ] {
        assert!(args.contains(&want), "{want} missing from {args:?}");
    }
    for values in [
        BTreeMap::new(),
        BTreeMap::from([
            ("CAPTF_RUNNER_IMAGE", "registry.example/runner:1"),
            ("CAPTF_RUNNER_SERVICE_ACCOUNT", "runners"),
        ]),
    ] {
        let installed = clusterctl::parse_components(&clusterctl::substitute(&text, &values).unwrap()).unwrap();
        let run = run_args(&manager(&installed));
        let argv = std::iter::once("captf-webhook".to_string()).chain(webhook_args(&installed));
        let webhook = captf_webhook::cli::Cli::try_parse_from(argv).unwrap();
        assert_eq!(webhook.serve.policy, run.policy, "{values:?}");
        let policy = webhook.serve.to_config().unwrap().policy;
        assert_eq!(policy, run.policy.to_policy(), "{values:?}");
        let image = values.get("CAPTF_RUNNER_IMAGE").copied().unwrap_or(&chart_runner);
        assert_eq!(policy.runner_image_prefixes, [image], "{values:?}");
    }
}

/// The components as clusterctl installs them with these variables set (the rest at their
/// defaults).
fn installed(values: &BTreeMap<&str, &str>) -> Vec<Value> {
    let text = clusterctl::substitute(&committed(COMPONENTS_FILE), values).unwrap();
    clusterctl::parse_components(&text).unwrap()
}

fn webhook_container(docs: &[Value]) -> Value {
    docs.iter()
        .filter(|d| d["kind"] == "Deployment")
        .flat_map(|d| d["spec"]["template"]["spec"]["containers"].as_array().unwrap())
        .find(|c| c["name"] == "webhook")
        .expect("the webhook's Deployment")
        .clone()
}

/// The webhook's flags, parsed as the binary parses them.
fn webhook_args(container: &Value) -> captf_webhook::cli::ServeArgs {
    let argv = std::iter::once("captf-webhook".to_string()).chain(strings(&container["args"]));
    <captf_webhook::cli::Cli as clap::Parser>::try_parse_from(argv)
        .unwrap_or_else(|e| panic!("captf-webhook rejects the args: {e}"))
        .serve
}

/// What the controller's flags say, to compare: the namespaces as the controller reads them
/// (no `--namespace` and `--namespace=""` both mean all).
fn said(run: &RunArgs) -> String {
    let mut run = run.clone();
    run.namespace = run.watch_namespaces();
    format!("{run:?}")
}

/// What the webhook's flags say, to compare, the namespaces read the same way.
fn webhook_said(mut serve: captf_webhook::cli::ServeArgs) -> String {
    serve.watched_namespaces.retain(|n| !n.is_empty());
    format!("{serve:?}")
}

/// The long names of a clap command's flags, without clap's own.
fn long_flags(command: &clap::Command) -> Vec<String> {
    command
        .get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|l| !["help", "version"].contains(l))
        .map(str::to_string)
        .collect()
}

/// The flags of `captf-controller run`, from its clap definition.
fn controller_flags() -> Vec<String> {
    long_flags(&<RunArgs as clap::Args>::augment_args(clap::Command::new("run")))
}

/// The webhook's flags, from its clap definition.
fn webhook_flags() -> Vec<String> {
    long_flags(&<captf_webhook::cli::Cli as clap::CommandFactory>::command())
}

/// The variables that set a flag: each with its flag, chart value and webhook flag.
fn flag_variables() -> Vec<(&'static str, &'static str, &'static str, Option<&'static str>)> {
    VARIABLES
        .iter()
        .filter_map(|v| match v.sets {
            Sets::Flag { flag, chart, webhook } => Some((v.name, flag, chart, webhook)),
            _ => None,
        })
        .collect()
}

/// The arguments of `args` that give `--<flag>`.
fn giving<'a>(args: &'a [String], flag: &str) -> Vec<&'a String> {
    let given = format!("--{flag}=");
    args.iter()
        .filter(|a| **a == format!("--{flag}") || a.starts_with(&given))
        .collect()
}

/// The chart rendered as the components are, with `extra` values.
fn chart_rendered(extra: &[&str]) -> Vec<Value> {
    let mut args: Vec<&str> = COMPONENTS_VALUES.to_vec();
    args.extend(extra);
    helm_template(&args).unwrap().docs
}

/// `clusterctl upgrade` renders the components again from the variables alone, so a flag a user
/// edited into the Deployment is lost: every flag of `captf-controller run` (as clap declares
/// them, so a flag added later fails here until it is one or the other) is either set by exactly
/// one variable, which a chart value sets too, or fixed, with why.
#[test]
fn every_user_settable_controller_flag_is_a_clusterctl_variable_and_a_chart_value() {
    let flags = controller_flags();
    let variables = flag_variables();
    for (flag, why) in FIXED_CONTROLLER_FLAGS {
        assert!(
            flags.iter().any(|f| f == flag),
            "FIXED_CONTROLLER_FLAGS names --{flag}, which captf-controller run does not take"
        );
        assert!(!why.is_empty(), "--{flag} is fixed without a reason");
    }
    for (name, flag, ..) in &variables {
        assert!(
            flags.iter().any(|f| f == flag),
            "{name} sets --{flag}, which captf-controller run does not take"
        );
    }
    for flag in &flags {
        let by: Vec<&str> = variables
            .iter()
            .filter(|(_, f, ..)| f == flag)
            .map(|(name, ..)| *name)
            .collect();
        let fixed = FIXED_CONTROLLER_FLAGS.iter().filter(|(f, _)| f == flag).count();
        assert!(
            by.len() + fixed == 1,
            "--{flag}: set by {by:?}, {fixed} time(s) in FIXED_CONTROLLER_FLAGS; a flag a user may set is one \
             clusterctl variable (clusterctl::VARIABLES), any other is in FIXED_CONTROLLER_FLAGS with why"
        );
    }

    let text = committed(COMPONENTS_FILE);
    let defaults: BTreeMap<String, String> = clusterctl::variable_references(&text)
        .into_iter()
        .filter_map(|r| r.split_once(":=").map(|(n, d)| (n.to_string(), d.to_string())))
        .collect();
    let docs = components();
    let manager_args = strings(&manager(&docs)["args"]);
    let webhook_args = strings(&webhook_container(&docs)["args"]);
    let webhook_flags = webhook_flags();
    let values: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(captf_chart_tests::chart_dir().join("values.yaml")).unwrap())
            .unwrap();
    for (name, flag, chart, webhook) in &variables {
        let want = format!("--{flag}=${{{name}:={}}}", defaults[*name]);
        assert_eq!(giving(&manager_args, flag), [&want], "the controller's --{flag}");
        assert!(
            !values
                .pointer(&format!("/{}", chart.replace('.', "/")))
                .unwrap_or(&Value::Null)
                .is_null(),
            "{name}: the chart has no value {chart}"
        );
        // A flag both binaries read (the tenant policy) is given the same value in both.
        if webhook_flags.iter().any(|f| f == flag) {
            assert_eq!(*webhook, Some(*flag), "{name}: the webhook takes --{flag} too");
        }
        if let Some(w) = webhook {
            assert!(webhook_flags.iter().any(|f| f == w), "the webhook has no --{w}");
            let want = format!("--{w}=${{{name}:={}}}", defaults[*name]);
            assert_eq!(giving(&webhook_args, w), [&want], "the webhook's --{w}");
        }
    }
    // A fixed flag is what the chart renders, whatever the variables.
    let chart_args = strings(&manager(&chart_rendered(&[]))["args"]);
    for (flag, _) in FIXED_CONTROLLER_FLAGS {
        assert_eq!(giving(&manager_args, flag), giving(&chart_args, flag), "--{flag}");
        assert!(
            giving(&manager_args, flag).iter().all(|a| !a.contains("${")),
            "--{flag} is fixed"
        );
    }
}

/// Installed with every variable at its default, the controller and the webhook read their flags
/// as they read the chart's own rendering (with its defaults): the defaults are the chart's.
#[test]
fn the_variables_default_to_what_the_chart_renders() {
    let chart = chart_rendered(&[]);
    let docs = installed(&BTreeMap::new());
    assert_eq!(said(&run_args(&manager(&docs))), said(&run_args(&manager(&chart))));
    assert_eq!(
        webhook_said(webhook_args(&webhook_container(&docs))),
        webhook_said(webhook_args(&webhook_container(&chart)))
    );
}

/// A value other than a variable's default, the chart values that say the same, and how the
/// controller reads it.
struct Setting {
    variable: &'static str,
    value: &'static str,
    chart: &'static [&'static str],
    reads: fn(&RunArgs) -> bool,
}

/// `name=quantity,...` of a resource list, sorted.
fn quantities(q: &captf_controller::runtime::flags::Quantities) -> String {
    q.0.iter()
        .map(|(k, v)| format!("{k}={}", v.0))
        .collect::<Vec<_>>()
        .join(",")
}

fn settings() -> Vec<Setting> {
    use captf_controller::runtime::metrics_auth::MetricsAuth;
    vec![
        Setting {
            variable: "CAPTF_RUNNER_IMAGE",
            value: "registry.example/runner:1",
            chart: &[
                "--set",
                "runner.image.repository=registry.example/runner",
                "--set-string",
                "runner.image.tag=1",
                "--set",
                "runner.image.digest=",
            ],
            reads: |r| r.policy.runner_image == "registry.example/runner:1",
        },
        Setting {
            variable: "CAPTF_WATCH_NAMESPACE",
            value: "tenant-a,tenant-b",
            chart: &[
                "--set",
                "controller.watchAllNamespaces=false",
                "--set",
                "controller.watchNamespaces={tenant-a,tenant-b}",
            ],
            reads: |r| r.watch_namespaces() == ["tenant-a", "tenant-b"],
        },
        Setting {
            variable: "CAPTF_WATCH_FILTER",
            value: "mgmt-a",
            chart: &["--set", "controller.watchFilter=mgmt-a"],
            reads: |r| r.watch_filter == "mgmt-a",
        },
        Setting {
            variable: "CAPTF_RUNNER_SERVICE_ACCOUNT",
            value: "runners",
            chart: &["--set", "runner.serviceAccount.name=runners"],
            reads: |r| r.policy.runner_service_account == "runners",
        },
        Setting {
            variable: "CAPTF_RUNNER_SERVICE_ACCOUNT_ANNOTATIONS",
            value: "eks.amazonaws.com/role-arn=arn:aws:iam::1:role/tf",
            chart: &[
                "--set-json",
                r#"runner.serviceAccount.annotations={"eks.amazonaws.com/role-arn":"arn:aws:iam::1:role/tf"}"#,
            ],
            reads: |r| {
                r.runner_service_account_annotations.0
                    == BTreeMap::from([("eks.amazonaws.com/role-arn".into(), "arn:aws:iam::1:role/tf".into())])
            },
        },
        Setting {
            variable: "CAPTF_MAX_RUNNING_JOBS",
            value: "40",
            chart: &["--set", "controller.maxRunningJobs.total=40"],
            reads: |r| r.max_running_jobs == 40,
        },
        Setting {
            variable: "CAPTF_MAX_RUNNING_JOBS_PER_NAMESPACE",
            value: "0",
            chart: &["--set", "controller.maxRunningJobs.perNamespace=0"],
            reads: |r| r.max_running_jobs_per_namespace == 0,
        },
        Setting {
            variable: "CAPTF_WATCH_LABEL_SELECTOR",
            value: "sharding.captf.io/key=shard-1",
            chart: &[
                "--set-json",
                r#"controller.watchLabelSelector="sharding.captf.io/key=shard-1""#,
            ],
            reads: |r| r.watch_label_selector == "sharding.captf.io/key=shard-1",
        },
        Setting {
            variable: "CAPTF_CONCURRENCY",
            value: "16",
            chart: &["--set", "controller.concurrency=16"],
            reads: |r| r.concurrency == 16,
        },
        Setting {
            variable: "CAPTF_METRICS_AUTH",
            value: "none",
            chart: &["--set", "controller.metrics.auth=none"],
            reads: |r| r.metrics_auth == MetricsAuth::None,
        },
        Setting {
            variable: "CAPTF_ALLOWED_RUNNER_IMAGE_PREFIXES",
            value: "registry.corp/,mirror.corp/captf/",
            chart: &[
                "--set",
                "runner.policy.allowedImagePrefixes={registry.corp/,mirror.corp/captf/}",
            ],
            reads: |r| r.policy.allowed_runner_image_prefixes == ["registry.corp/", "mirror.corp/captf/"],
        },
        Setting {
            variable: "CAPTF_ALLOWED_RUNNER_SERVICE_ACCOUNTS",
            value: "deployer,ops",
            chart: &["--set", "runner.policy.allowedServiceAccounts={deployer,ops}"],
            reads: |r| r.policy.allowed_runner_service_accounts == ["deployer", "ops"],
        },
        Setting {
            variable: "CAPTF_ALLOW_ENV_FROM_SECRETS",
            value: "false",
            chart: &["--set", "runner.policy.allowEnvFromSecrets=false"],
            reads: |r| !r.policy.allow_env_from_secrets,
        },
        Setting {
            variable: "CAPTF_ALLOW_VARIABLES_FROM_SECRETS",
            value: "false",
            chart: &["--set", "runner.policy.allowVariablesFromSecrets=false"],
            reads: |r| !r.policy.allow_variables_from_secrets,
        },
        Setting {
            variable: "CAPTF_ALLOWED_RUNNER_PRIORITY_CLASSES",
            value: "runner-low",
            chart: &["--set", "runner.policy.allowedPriorityClasses={runner-low}"],
            reads: |r| r.policy.allowed_runner_priority_classes == ["runner-low"],
        },
        Setting {
            variable: "CAPTF_ALLOWED_RUNNER_NODE_LABEL_KEYS",
            value: "topology.kubernetes.io/zone,pool.example.com/name",
            chart: &[
                "--set",
                "runner.policy.allowedNodeLabelKeys={topology.kubernetes.io/zone,pool.example.com/name}",
            ],
            reads: |r| {
                r.policy.allowed_runner_node_label_keys == ["topology.kubernetes.io/zone", "pool.example.com/name"]
            },
        },
        Setting {
            variable: "CAPTF_ALLOW_RUNNER_NODE_MATCH_FIELDS",
            value: "true",
            chart: &["--set", "runner.policy.allowNodeMatchFields=true"],
            reads: |r| r.policy.allow_runner_node_match_fields,
        },
        Setting {
            variable: "CAPTF_ALLOWED_RUNNER_TOLERATION_KEYS",
            value: "dedicated",
            chart: &["--set", "runner.policy.allowedTolerationKeys={dedicated}"],
            reads: |r| r.policy.allowed_runner_toleration_keys == ["dedicated"],
        },
        Setting {
            variable: "CAPTF_ALLOW_RUNNER_CROSS_NAMESPACE_POD_AFFINITY",
            value: "true",
            chart: &["--set", "runner.policy.allowCrossNamespacePodAffinity=true"],
            reads: |r| r.policy.allow_runner_cross_namespace_pod_affinity,
        },
        Setting {
            variable: "CAPTF_ALLOW_APPROVAL_NEVER",
            value: "true",
            chart: &["--set", "approvals.allowNever=true"],
            reads: |r| r.policy.allow_approval_never,
        },
        Setting {
            variable: "CAPTF_MAX_APPROVALS_REQUIRED",
            value: "5",
            chart: &["--set", "approvals.maxRequired=5"],
            reads: |r| r.policy.max_approvals_required == 5,
        },
        Setting {
            variable: "CAPTF_RUNNER_REQUESTS",
            value: "cpu=250m,memory=512Mi",
            chart: &[
                "--set",
                "runner.resources.requests.cpu=250m",
                "--set",
                "runner.resources.requests.memory=512Mi",
            ],
            reads: |r| quantities(&r.runner_requests) == "cpu=250m,memory=512Mi",
        },
        Setting {
            variable: "CAPTF_RUNNER_LIMITS",
            value: "cpu=1500m,memory=4Gi",
            chart: &[
                "--set",
                "runner.resources.limits.cpu=1500m",
                "--set",
                "runner.resources.limits.memory=4Gi",
            ],
            reads: |r| quantities(&r.runner_limits) == "cpu=1500m,memory=4Gi",
        },
        Setting {
            variable: "CAPTF_RUNNER_WORK_SIZE_LIMIT",
            value: "8Gi",
            chart: &["--set", "runner.workSizeLimit=8Gi"],
            reads: |r| r.runner_work_size_limit == "8Gi",
        },
        Setting {
            variable: "CAPTF_RUNNER_TMP_SIZE_LIMIT",
            value: "2Gi",
            chart: &["--set", "runner.tmpSizeLimit=2Gi"],
            reads: |r| r.runner_tmp_size_limit == "2Gi",
        },
        Setting {
            variable: "CAPTF_RUNNER_TERRAFORM_CLI_CONFIG",
            value: "terraform-mirror",
            chart: &["--set", "runner.terraformCliConfig.configMapName=terraform-mirror"],
            reads: |r| r.runner_terraform_cli_config == "terraform-mirror",
        },
        Setting {
            variable: "CAPTF_RUNNER_TERRAFORM_CLI_CONFIG_KEY",
            value: "mirror.rc",
            chart: &["--set", "runner.terraformCliConfig.key=mirror.rc"],
            reads: |r| r.runner_terraform_cli_config_key == "mirror.rc",
        },
        Setting {
            variable: "CAPTF_NAMESPACE_NOTIFICATION_TARGETS",
            value: "false",
            chart: &["--set", "notifications.namespaceTargets=false"],
            reads: |r| !r.namespace_notification_targets,
        },
        Setting {
            variable: "CAPTF_NOTIFY_AFTER_FAILURES",
            value: "5",
            chart: &["--set", "notifications.afterFailures=5"],
            reads: |r| r.notify_after_failures == 5,
        },
    ]
}

/// Each variable set to a value other than its default reaches the controller's flag (parsed by
/// the real parser) with that value, and the webhook reads the same policy; all of them set
/// together say what the chart values they stand for say.
#[test]
fn each_variable_set_to_another_value_reaches_its_flag_as_the_chart_value_does() {
    let settings = settings();
    let mut named: Vec<&str> = settings.iter().map(|s| s.variable).collect();
    let mut want: Vec<&str> = flag_variables().into_iter().map(|(name, ..)| name).collect();
    named.sort();
    want.sort();
    assert_eq!(named, want, "one setting for each variable that sets a flag");

    let defaults = run_args(&manager(&installed(&BTreeMap::new())));
    for s in &settings {
        let chart_value = flag_variables().into_iter().find(|(n, ..)| *n == s.variable).unwrap().2;
        assert!(
            s.chart.iter().any(|a| a.contains(chart_value)),
            "{}: the setting sets no {chart_value}",
            s.variable
        );
        assert!(!(s.reads)(&defaults), "{}={} is its default", s.variable, s.value);
        let docs = installed(&BTreeMap::from([(s.variable, s.value)]));
        let run = run_args(&manager(&docs));
        assert!((s.reads)(&run), "{}={}: {run:?}", s.variable, s.value);
        let webhook = webhook_args(&webhook_container(&docs));
        assert_eq!(
            webhook.policy, run.policy,
            "{}: the webhook reads the same policy",
            s.variable
        );
        assert_eq!(
            webhook.to_config().unwrap().watched,
            if run.watch_namespaces().is_empty() {
                captf_webhook::watched::Watched::all()
            } else {
                captf_webhook::watched::Watched::only(run.watch_namespaces())
            },
            "{}: the webhook is told the controller's namespaces",
            s.variable
        );
    }

    let values: BTreeMap<&str, &str> = settings.iter().map(|s| (s.variable, s.value)).collect();
    let docs = installed(&values);
    let chart_values: Vec<&str> = settings.iter().flat_map(|s| s.chart.iter().copied()).collect();
    let chart = chart_rendered(&chart_values);
    let run = run_args(&manager(&docs));
    for s in &settings {
        assert!((s.reads)(&run), "{} set with the others", s.variable);
    }
    assert_eq!(said(&run), said(&run_args(&manager(&chart))));
    assert_eq!(
        webhook_said(webhook_args(&webhook_container(&docs))),
        webhook_said(webhook_args(&webhook_container(&chart)))
    );
}

/// A user who wants a flag empty sets its variable to `""` (an empty value is taken for unset):
/// every flag that takes an empty value reads `""` as it, in the controller and the webhook. The
/// variables whose default is `""` are among them.
#[test]
fn a_variable_set_to_empty_quotes_reads_as_its_flag_given_empty() {
    let text = committed(COMPONENTS_FILE);
    let docs = installed(&BTreeMap::new());
    let manager_args = strings(&manager(&docs)["args"]);
    let webhook = webhook_container(&docs);
    let mut read = vec![];
    for (name, flag, _, webhook_flag) in flag_variables() {
        let emptied = |args: &[String], flag: &str| -> Vec<String> {
            let given = format!("--{flag}=");
            args.iter()
                .map(|a| {
                    if a.starts_with(&given) {
                        given.clone()
                    } else {
                        a.clone()
                    }
                })
                .collect()
        };
        let Ok(given_empty) = RunArgs::from_flags(&emptied(&manager_args, flag)[1..]) else {
            continue;
        };
        let quoted = installed(&BTreeMap::from([(name, "\"\"")]));
        let run = run_args(&manager(&quoted));
        assert_eq!(said(&run), said(&given_empty), "{name}=\"\"");
        if let Some(w) = webhook_flag {
            let mut emptied_webhook = webhook.clone();
            emptied_webhook["args"] = serde_json::json!(emptied(&strings(&webhook["args"]), w));
            assert_eq!(
                webhook_said(webhook_args(&webhook_container(&quoted))),
                webhook_said(webhook_args(&emptied_webhook)),
                "{name}=\"\" in the webhook"
            );
        }
        read.push(name);
    }
    for r in clusterctl::variable_references(&text) {
        if let Some(name) = r.strip_suffix(":=\"\"") {
            assert!(
                read.contains(&name),
                "{name} defaults to \"\" but its flag takes no empty value"
            );
        }
    }
}

/// clusterctl installs providers cluster-wide: the components bind the controller's ClusterRole
/// with a ClusterRoleBinding, whatever the chart's default (the release namespace only) is.
#[test]
fn components_bind_the_controller_in_every_namespace_as_clusterctl_providers_are() {
    let docs = components();
    let of = |kind: &str| -> Vec<&Value> {
        docs.iter()
            .filter(|d| d["kind"] == kind && d["roleRef"]["name"] == "captf-controller")
            .collect()
    };
    let crb = of("ClusterRoleBinding");
    assert_eq!(crb.len(), 1);
    assert_eq!(crb[0]["roleRef"]["kind"], "ClusterRole");
    assert_eq!(crb[0]["subjects"][0]["namespace"], TARGET_NAMESPACE);
    assert!(of("RoleBinding").is_empty(), "no per-namespace bindings");
}

#[test]
fn every_variable_has_a_default_and_the_readme_documents_it() {
    let text = committed(COMPONENTS_FILE);
    let readme = std::fs::read_to_string(workspace_root().join("docs/install.md")).unwrap();
    let refs = clusterctl::variable_references(&text);
    for r in &refs {
        let (name, default) = r.split_once(":=").unwrap_or_else(|| panic!("${{{r}}} has no default"));
        // clusterctl takes an empty default for none and refuses to install until it is set.
        assert!(
            !default.is_empty(),
            "${{{r}}}: an empty default makes the variable required"
        );
        assert!(name.starts_with("CAPTF_"), "{name}: prefixed with the provider's name");
        assert!(VARIABLES.iter().any(|v| v.name == name), "{name} is not in VARIABLES");
    }
    for v in VARIABLES {
        assert!(
            refs.iter().any(|r| r.starts_with(&format!("{}:=", v.name))),
            "{} is unused",
            v.name
        );
        assert!(readme.contains(v.name), "docs/install.md does not document {}", v.name);
        // Its row of the variables table: its default, and the flag and chart value it sets.
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` |", v.name)))
            .unwrap_or_else(|| panic!("docs/install.md's table of variables has no row for {}", v.name));
        if !matches!(v.default, clusterctl::DefaultValue::ChartImage(_)) {
            let default = refs
                .iter()
                .find_map(|r| r.strip_prefix(&format!("{}:=", v.name)))
                .unwrap();
            assert!(row.contains(&format!("`{default}`")), "{row}: no default `{default}`");
        }
        if let Sets::Flag { flag, chart, .. } = v.sets {
            assert!(row.contains(&format!("`--{flag}`")), "{row}: no `--{flag}`");
            assert!(row.contains(&format!("`{chart}`")), "{row}: no chart value `{chart}`");
        }
    }
    // The images and the log level are variables.
    let docs = components();
    for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
        for c in d["spec"]["template"]["spec"]["containers"].as_array().unwrap() {
            assert!(c["image"].as_str().unwrap().starts_with("${CAPTF_"), "{}", c["name"]);
            let env = c["env"].as_array().unwrap();
            assert!(
                env.iter()
                    .any(|e| e["name"] == "RUST_LOG" && e["value"] == "${CAPTF_LOG_LEVEL:=info}"),
                "{}",
                c["name"]
            );
        }
    }
}

#[test]
fn components_validate_against_kubernetes_1_30_once_installed() {
    let text = clusterctl::substitute(&committed(COMPONENTS_FILE), &BTreeMap::new()).unwrap();
    let v = kubernetes_validate(&text).unwrap();
    assert!(v.errors.is_empty() && v.exit_ok, "{}", v.output);
    for kind in &v.no_schema {
        assert!(
            KINDS_WITHOUT_OFFLINE_SCHEMA.contains(&kind.as_str()),
            "no schema for {kind}"
        );
    }
    assert!(v.passed.iter().any(|p| p.starts_with("namespace/")), "{}", v.output);
    assert!(v.passed.iter().any(|p| p.starts_with("deployment/")), "{}", v.output);
}

#[test]
fn cert_manager_issues_the_webhook_certificate_in_the_target_namespace() {
    let docs = components();
    let cert = docs
        .iter()
        .find(|d| d["kind"] == "Certificate" && d["spec"]["isCA"].is_null())
        .expect("a serving Certificate");
    assert_eq!(cert["apiVersion"], "cert-manager.io/v1");
    let cert_name = cert["metadata"]["name"].as_str().unwrap();
    let dns = strings(&cert["spec"]["dnsNames"]);
    assert!(
        dns.contains(&format!("captf-webhook.{TARGET_NAMESPACE}.svc")),
        "{dns:?}"
    );
    for kind in ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"] {
        let w = docs.iter().find(|d| d["kind"] == kind).unwrap();
        assert_eq!(
            w["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            format!("{TARGET_NAMESPACE}/{cert_name}")
        );
        assert_eq!(
            w["webhooks"][0]["clientConfig"]["service"]["namespace"],
            TARGET_NAMESPACE
        );
    }
}

/// clusterctl's Metadata (`cmd/clusterctl/api/v1alpha3`), strictly.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Metadata {
    api_version: String,
    kind: String,
    release_series: Vec<ReleaseSeries>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct ReleaseSeries {
    major: i32,
    minor: i32,
    contract: String,
}

#[test]
fn metadata_maps_the_charts_release_series_to_the_v1beta2_contract() {
    let text = std::fs::read_to_string(workspace_root().join(METADATA_FILE)).unwrap();
    let m: Metadata = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(m.api_version, "clusterctl.cluster.x-k8s.io/v1alpha3");
    assert_eq!(m.kind, "Metadata");
    let version = clusterctl::chart_version().unwrap();
    let mut parts = version.split('.').map(|p| p.parse::<i32>().unwrap());
    let (major, minor) = (parts.next().unwrap(), parts.next().unwrap());
    let series = m
        .release_series
        .iter()
        .find(|s| s.major == major && s.minor == minor)
        .unwrap_or_else(|| panic!("no release series for the chart's {version}"));
    assert_eq!(series.contract, "v1beta2");
}

/// Every field of `value` is declared in `schema` with the right type (the subset of OpenAPI v3
/// clusterctl's Metadata CRD uses: object properties, arrays, strings, integers).
fn check_schema(path: &str, value: &Value, schema: &Value, errors: &mut Vec<String>) {
    let ty = schema["type"].as_str().unwrap_or("");
    let ok = match value {
        Value::Object(map) => {
            for (k, v) in map {
                let sub = &schema["properties"][k];
                if sub.is_null() {
                    if schema["x-kubernetes-preserve-unknown-fields"] != true && k != "metadata" {
                        errors.push(format!("{path}.{k}: unknown field"));
                    }
                } else {
                    check_schema(&format!("{path}.{k}"), v, sub, errors);
                }
            }
            ty == "object"
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                check_schema(&format!("{path}[{i}]"), v, &schema["items"], errors);
            }
            ty == "array"
        }
        Value::String(_) => ty == "string",
        Value::Number(n) => ty == "integer" && n.is_i64() || ty == "number",
        Value::Bool(_) => ty == "boolean",
        Value::Null => true,
    };
    if !ok {
        errors.push(format!("{path}: {value} is not of type {ty}"));
    }
}

#[test]
fn metadata_matches_the_real_clusterctl_metadata_crd_schema() {
    let crd =
        captf_chart_tests::capi_crd("clusterctl.cluster.x-k8s.io_metadata.yaml").unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(workspace_root().join(METADATA_FILE)).unwrap();
    let metadata: Value = serde_yaml_ng::from_str(&text).unwrap();
    let version = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "v1alpha3")
        .expect("the CRD serves v1alpha3");
    let mut errors = vec![];
    check_schema("", &metadata, &version["schema"]["openAPIV3Schema"], &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        metadata["apiVersion"],
        format!("{}/v1alpha3", crd["spec"]["group"].as_str().unwrap())
    );
    assert_eq!(metadata["kind"], crd["spec"]["names"]["kind"]);
}

/// A release commit pins the chart's default images and the components' ones together
/// (`scripts/release/pin.sh`): the components file it writes is what the generator makes of the
/// pinned chart, so the freshness check above holds on a release commit too, and the chart and
/// clusterctl name the same images.
#[test]
fn pinning_a_release_keeps_the_components_file_generated_from_the_chart() {
    let tmp = tempfile::tempdir().unwrap();
    let chart = tmp.path().join("captf");
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(captf_chart_tests::chart_dir())
        .arg(&chart)
        .status()
        .unwrap();
    assert!(copied.success());
    let components = tmp.path().join(COMPONENTS_FILE);
    std::fs::write(&components, committed(COMPONENTS_FILE)).unwrap();
    let digest = |c: char| format!("sha256:{}", c.to_string().repeat(64));
    let images = tmp.path().join("images.txt");
    std::fs::write(
        &images,
        format!(
            "controller registry.example/captf/controller@{} 1 2\nwebhook registry.example/captf/webhook@{} 1 2\n\
             runner registry.example/captf/runner@{} 1 2\n",
            digest('a'),
            digest('b'),
            digest('c')
        ),
    )
    .unwrap();
    let version = clusterctl::chart_version().unwrap();
    let pin = std::process::Command::new("python3")
        .arg(workspace_root().join("scripts/release/imagetool.py"))
        .arg("pin")
        .arg("--values")
        .arg(chart.join("values.yaml"))
        .arg("--images")
        .arg(&images)
        .args(["--tag", &version])
        .arg(&components)
        .output()
        .unwrap();
    assert!(pin.status.success(), "{}", String::from_utf8_lossy(&pin.stderr));

    let pinned = std::fs::read_to_string(&components).unwrap();
    assert_eq!(
        pinned,
        clusterctl::components_yaml_of(&chart).unwrap(),
        "the pinned components file is not what the generator makes of the pinned chart"
    );
    for (component, c) in [("controller", 'a'), ("webhook", 'b'), ("runner", 'c')] {
        let want = format!("registry.example/captf/{component}@{}", digest(c));
        assert_eq!(captf_chart_tests::default_image_of(&chart, component).unwrap(), want);
        assert!(pinned.contains(&want), "the components do not name {want}");
    }
    assert!(
        !pinned.contains("ghcr.io/captf/"),
        "an image reference was left unpinned"
    );
    // The chart renders the pinned images, and nothing by tag.
    let rendered = captf_chart_tests::helm_template_chart("captf", &chart, &[]).unwrap();
    assert!(
        rendered
            .yaml
            .contains(&format!("registry.example/captf/runner@{}", digest('c')))
    );
    assert!(!rendered.yaml.contains("ghcr.io/captf/"));
}

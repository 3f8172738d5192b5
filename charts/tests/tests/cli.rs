//! The arguments the chart passes are accepted by the binaries' own flag parsers (clap), and
//! mean what the values say.

#![allow(clippy::unwrap_used)]

use captf_chart_tests::{default_image, helm_template, strings};
use clap::Parser;

fn args_of(extra: &[&str], deployment: &str) -> Vec<String> {
    let r = helm_template(extra).unwrap();
    let d = r.get("Deployment", deployment).unwrap();
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert!(c["command"].is_null(), "the image's entrypoint is the binary");
    strings(&c["args"])
}

/// `captf-controller run <flags>`, parsed as the binary parses it.
fn parse_controller(args: &[String]) -> captf_controller::runtime::RunArgs {
    let Some(("run", flags)) = args.split_first().map(|(first, rest)| (first.as_str(), rest)) else {
        panic!("the chart's controller args do not start with `run`: {args:?}");
    };
    captf_controller::runtime::RunArgs::from_flags(flags)
        .unwrap_or_else(|e| panic!("captf-controller rejects the chart's args {args:?}: {e}"))
}

#[test]
fn controller_accepts_the_charts_arguments_with_leader_election_on() {
    let run = parse_controller(&args_of(&[], "captf-controller"));
    assert!(run.leader_elect);
    assert_eq!(run.watch_namespaces(), ["captf-system"], "the release namespace");
    assert_eq!(run.policy.runner_image, default_image("runner").unwrap());
    assert_eq!(run.metrics_addr.port(), 8080);
    assert_eq!(run.health_addr.port(), 8081);
    assert_eq!(run.concurrency, 4);
    assert_eq!(run.log_format, captf_controller::runtime::LogFormat::Json);
    assert_eq!((run.max_running_jobs, run.max_running_jobs_per_namespace), (0, 10));
}

#[test]
fn controller_takes_the_charts_watch_selector_and_watch_filter() {
    let run = parse_controller(&args_of(&[], "captf-controller"));
    assert_eq!((run.watch_label_selector.as_str(), run.watch_filter.as_str()), ("", ""));
    let run = parse_controller(&args_of(
        &[
            "--set-string",
            "controller.watchLabelSelector=!sharding.captf.io/key",
            "--set",
            "controller.watchFilter=team-a",
        ],
        "captf-controller",
    ));
    assert_eq!(run.watch_label_selector, "!sharding.captf.io/key");
    assert_eq!(run.watch_filter, "team-a");
}

#[test]
fn controller_takes_the_charts_runner_job_limits() {
    let run = parse_controller(&args_of(
        &[
            "--set",
            "controller.maxRunningJobs.total=50",
            "--set",
            "controller.maxRunningJobs.perNamespace=0",
        ],
        "captf-controller",
    ));
    assert_eq!((run.max_running_jobs, run.max_running_jobs_per_namespace), (50, 0));
    // A large value renders as an integer, not in exponent notation.
    let run = parse_controller(&args_of(
        &["--set", "controller.maxRunningJobs.total=4000000"],
        "captf-controller",
    ));
    assert_eq!(run.max_running_jobs, 4_000_000);
}

#[test]
fn controller_accepts_the_charts_arguments_for_listed_namespaces_without_leader_election() {
    let args = args_of(
        &[
            "--set",
            "controller.watchNamespaces={tenant-a,tenant-b}",
            "--set",
            "controller.leaderElect=false",
            "--set",
            "controller.logFormat=text",
        ],
        "captf-controller",
    );
    let run = parse_controller(&args);
    assert!(!run.leader_elect);
    assert_eq!(run.watch_namespaces(), ["tenant-a", "tenant-b"]);
    assert_eq!(run.log_format, captf_controller::runtime::LogFormat::Text);
    // Every namespace: no flag, which the controller reads as all namespaces.
    let run = parse_controller(&args_of(
        &["--set", "controller.watchAllNamespaces=true"],
        "captf-controller",
    ));
    assert!(run.watch_namespaces().is_empty(), "all namespaces");
}

#[test]
fn the_webhook_is_told_the_namespaces_the_controller_watches() {
    use captf_webhook::watched::Watched;
    let watched = |extra: &[&str]| {
        parse_webhook(&args_of(extra, "captf-webhook"))
            .serve
            .to_config()
            .unwrap()
            .watched
    };
    assert_eq!(watched(&[]), Watched::only([captf_chart_tests::NAMESPACE]));
    assert_eq!(
        watched(captf_chart_tests::features::TWO_NAMESPACES),
        Watched::only(["tenant-a", "tenant-b"])
    );
    assert_eq!(watched(captf_chart_tests::features::ALL_NAMESPACES), Watched::all());
    let controller = parse_controller(&args_of(
        captf_chart_tests::features::TWO_NAMESPACES,
        "captf-controller",
    ));
    assert_eq!(controller.watch_namespaces(), ["tenant-a", "tenant-b"]);
}

#[test]
fn webhook_accepts_the_charts_arguments() {
    let args = args_of(&[], "captf-webhook");
    let argv = std::iter::once("captf-webhook".to_string()).chain(args.iter().cloned());
    let cli = captf_webhook::cli::Cli::try_parse_from(argv)
        .unwrap_or_else(|e| panic!("captf-webhook rejects the chart's args {args:?}: {e}"));
    assert!(cli.command.is_none(), "serves");
    assert_eq!(cli.log.log_format, captf_webhook::cli::LogFormat::Json);
    let serve = &cli.serve;
    assert_eq!(serve.addr.to_string(), captf_webhook::DEFAULT_ADDR);
    assert_eq!(serve.metrics_addr.to_string(), captf_webhook::DEFAULT_METRICS_ADDR);
    assert_eq!(
        serve.tls_cert_file.as_deref(),
        Some(std::path::Path::new("/etc/captf/tls/tls.crt"))
    );
    assert_eq!(
        serve.tls_key_file.as_deref(),
        Some(std::path::Path::new("/etc/captf/tls/tls.key"))
    );
    serve.to_config().unwrap();
}

/// `captf-webhook <flags>`, parsed as the binary parses it.
fn parse_webhook(args: &[String]) -> captf_webhook::cli::Cli {
    let argv = std::iter::once("captf-webhook".to_string()).chain(args.iter().cloned());
    captf_webhook::cli::Cli::try_parse_from(argv)
        .unwrap_or_else(|e| panic!("captf-webhook rejects the args {args:?}: {e}"))
}

#[test]
fn both_binaries_get_the_same_tenant_policy_with_the_runner_defaults_allowed() {
    let extra = [
        "--set",
        "runner.image.repository=registry.corp/captf/runner",
        "--set",
        "runner.serviceAccount.name=runners",
        "--set",
        "runner.policy.allowedImagePrefixes={registry.corp/}",
        "--set",
        "runner.policy.allowedServiceAccounts={deployer}",
        "--set",
        "runner.policy.allowEnvFromSecrets=false",
        "--set",
        "runner.policy.allowVariablesFromSecrets=false",
        "--set",
        "runner.policy.allowedPriorityClasses={batch-low}",
        "--set",
        "runner.policy.allowedNodeLabelKeys={pool.corp/dedicated,kubernetes.io/os}",
        "--set",
        "runner.policy.allowNodeMatchFields=true",
        "--set",
        "runner.policy.allowedTolerationKeys={dedicated}",
        "--set",
        "runner.policy.allowCrossNamespacePodAffinity=true",
        "--set",
        "approvals.allowNever=true",
        "--set",
        "approvals.maxRequired=5",
    ];
    let run = parse_controller(&args_of(&extra, "captf-controller"));
    let webhook = parse_webhook(&args_of(&extra, "captf-webhook"));
    assert_eq!(webhook.serve.policy, run.policy, "the same flags, the same values");
    let from_webhook = webhook.serve.to_config().unwrap().policy;
    let from_controller = run.policy.to_policy();
    assert_eq!(from_webhook, from_controller);
    assert_eq!(
        from_controller.runner_image_prefixes,
        [
            default_image("runner")
                .unwrap()
                .replacen("ghcr.io/captf/runner", "registry.corp/captf/runner", 1),
            "registry.corp/".to_string()
        ]
    );
    assert_eq!(from_controller.runner_service_accounts, ["runners", "deployer"]);
    assert!(!from_controller.env_from_secrets);
    assert!(!from_controller.variables_from_secrets);
    assert_eq!(from_controller.priority_classes, ["batch-low"]);
    assert_eq!(
        from_controller.node_label_keys,
        ["pool.corp/dedicated", "kubernetes.io/os"]
    );
    assert!(from_controller.node_match_fields);
    assert_eq!(from_controller.toleration_keys, ["dedicated"]);
    assert!(from_controller.cross_namespace_pod_affinity);
    assert!(from_controller.approval_never);
    assert_eq!(from_controller.max_approvals_required, 5);
}

#[test]
fn by_default_only_the_charts_runner_image_may_be_named_and_no_service_account() {
    let run = parse_controller(&args_of(&[], "captf-controller"));
    assert_eq!(run.policy.runner_service_account, "", "each object's own account");
    let p = run.policy.to_policy();
    let webhook = parse_webhook(&args_of(&[], "captf-webhook"));
    assert_eq!(
        webhook.serve.to_config().unwrap().policy,
        p,
        "the webhook's is the same"
    );
    assert_eq!(p.runner_image_prefixes, [default_image("runner").unwrap()]);
    assert_eq!(p.runner_service_accounts, Vec::<String>::new());
    assert!(p.env_from_secrets);
    assert!(p.variables_from_secrets, "variablesFrom may read Secrets by default");
    assert!(p.priority_classes.is_empty(), "no priority class by default");
    assert_eq!(p.node_label_keys, captf_shared::policy::DEFAULT_NODE_LABEL_KEYS);
    assert_eq!(p.toleration_keys, captf_shared::policy::DEFAULT_TOLERATION_KEYS);
    assert!(!p.node_match_fields && !p.cross_namespace_pod_affinity);
    assert_eq!(
        p,
        captf_controller::runtime::RunArgs::from_flags(["--runner-image", p.runner_image_prefixes[0].as_str()])
            .unwrap()
            .policy
            .to_policy(),
        "the chart's defaults are the flags' own"
    );
}

#[test]
fn runner_pod_resources_and_size_limits_come_from_the_values() {
    let run = parse_controller(&args_of(
        &[
            "--set",
            "runner.resources.limits.cpu=2",
            "--set",
            "runner.workSizeLimit=10Gi",
        ],
        "captf-controller",
    ));
    let d = run.runner_pod();
    assert_eq!(d.requests["memory"].0, "256Mi");
    assert_eq!(d.limits["memory"].0, "2Gi");
    assert_eq!(d.limits["cpu"].0, "2");
    assert_eq!(d.work_size_limit.unwrap().0, "10Gi");
    assert_eq!(d.tmp_size_limit.unwrap().0, "1Gi");
}

#[test]
fn runner_account_annotations_come_from_the_values() {
    let none = parse_controller(&args_of(&[], "captf-controller"));
    assert!(none.runner_service_account_annotations.0.is_empty());
    let run = parse_controller(&args_of(
        &[
            "--set",
            "runner.serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::123456789012:role/tf",
            "--set",
            "runner.serviceAccount.annotations.azure\\.workload\\.identity/client-id=00000000-1111",
        ],
        "captf-controller",
    ));
    let a = &run.runner_service_account_annotations.0;
    assert_eq!(a["eks.amazonaws.com/role-arn"], "arn:aws:iam::123456789012:role/tf");
    assert_eq!(a["azure.workload.identity/client-id"], "00000000-1111");
}

#[test]
fn the_runners_terraform_cli_config_comes_from_the_values() {
    let none = parse_controller(&args_of(&[], "captf-controller")).runner_pod();
    assert_eq!(none.terraform_cli_config, None, "none by default");
    let args = args_of(
        &[
            "--set",
            "runner.terraformCliConfig.configMapName=terraform-mirror",
            "--set",
            "runner.terraformCliConfig.key=mirror.tfrc",
        ],
        "captf-controller",
    );
    let c = parse_controller(&args).runner_pod().terraform_cli_config.unwrap();
    assert_eq!(
        (c.name.as_str(), c.key_or_default()),
        ("terraform-mirror", "mirror.tfrc")
    );
}

/// The tenant policy flags are one struct (captf-shared's `TenantPolicyArgs`) flattened into both
/// binaries: the same command-line values give the webhook and the controller the same
/// `TenantPolicy`, whatever the chart passes. Above all, the runner image and service account
/// the controller uses by default are allowed by both, with or without the allow lists.
#[test]
fn the_same_policy_flags_give_both_binaries_the_same_policy() {
    use captf_shared::policy::TenantPolicy;
    use captf_shared::types::{JobsSpec, TerraformSpec};

    let cases: [&[&str]; 6] = [
        &[],
        // The own image and account, no lists: a spec may name them and nothing else.
        &[
            "--runner-image=registry.corp/runner:2",
            "--runner-service-account=runners",
        ],
        &[
            "--runner-image=registry.corp/runner:2",
            "--runner-service-account=runners",
            "--allowed-runner-image-prefixes=",
            "--allowed-runner-service-accounts=",
        ],
        &[
            "--runner-image=registry.corp/runner:2",
            "--allowed-runner-image-prefixes=mirror.corp/,registry.corp/runner:2",
            "--allowed-runner-service-accounts=deployer,,deployer",
            "--allow-env-from-secrets=false",
            "--allow-variables-from-secrets=false",
            "--allowed-runner-priority-classes=batch-low",
            "--allowed-runner-node-label-keys=pool.corp/dedicated",
            "--allow-runner-node-match-fields=true",
            "--allowed-runner-toleration-keys=*",
            "--allow-runner-cross-namespace-pod-affinity=true",
        ],
        &[
            "--allowed-runner-image-prefixes=*",
            "--allowed-runner-service-accounts=*",
        ],
        &[
            "--allowed-runner-priority-classes=",
            "--allowed-runner-node-label-keys=",
            "--allowed-runner-toleration-keys=",
        ],
    ];
    let policies = |flags: &[&str]| -> (TenantPolicy, TenantPolicy) {
        let mut webhook_args = vec!["--tls-cert-file=c".to_string(), "--tls-key-file=k".to_string()];
        webhook_args.extend(flags.iter().map(|f| f.to_string()));
        let webhook = parse_webhook(&webhook_args).serve.to_config().unwrap().policy;
        let controller = captf_controller::runtime::RunArgs::from_flags(flags.iter().copied())
            .unwrap_or_else(|e| panic!("captf-controller rejects {flags:?}: {e}"))
            .policy
            .to_policy();
        (webhook, controller)
    };
    for flags in cases {
        let (webhook, controller) = policies(flags);
        assert_eq!(webhook, controller, "{flags:?}");
    }
    let jobs = |image: &str, sa: Option<&str>| TerraformSpec {
        jobs: Some(JobsSpec {
            image: Some(image.to_string()),
            service_account_name: sa.map(str::to_string),
            ..JobsSpec::default()
        }),
        ..TerraformSpec::default()
    };
    // The own-image case: what the controller runs by default, both binaries allow by name.
    let (webhook, controller) = policies(cases[1]);
    for p in [&webhook, &controller] {
        assert!(
            p.check_spec(&jobs("registry.corp/runner:2", Some("runners")), "spec")
                .is_empty(),
            "{p:?}"
        );
        assert_eq!(p.check_spec(&jobs("registry.corp/runner:3", None), "spec").len(), 1);
        assert_eq!(
            p.check_spec(&jobs("registry.corp/runner:2", Some("deployer")), "spec")
                .len(),
            1
        );
    }
    // With no flags at all, the release's runner image.
    let (webhook, _) = policies(cases[0]);
    assert!(
        webhook
            .check_spec(&jobs(captf_shared::policy::DEFAULT_RUNNER_IMAGE, None), "spec")
            .is_empty()
    );
}

#[test]
fn the_platforms_plan_policies_are_mounted_where_the_controller_reads_them() {
    assert_eq!(
        parse_controller(&args_of(&[], "captf-controller")).plan_policies_dir,
        "",
        "no policies by default"
    );
    let extra = ["--set", "planPolicies.configMaps={guardrails,tags}"];
    let run = parse_controller(&args_of(&extra, "captf-controller"));
    let r = helm_template(&extra).unwrap();
    let pod = &r.get("Deployment", "captf-controller").unwrap()["spec"]["template"]["spec"];
    let mount = &pod["containers"][0]["volumeMounts"][0];
    assert_eq!(mount["mountPath"], run.plan_policies_dir.as_str());
    assert_eq!(mount["readOnly"], true);
    let sources = &pod["volumes"][0]["projected"]["sources"];
    assert_eq!(sources[0]["configMap"]["name"], "guardrails");
    assert_eq!(sources[1]["configMap"]["name"], "tags");
}

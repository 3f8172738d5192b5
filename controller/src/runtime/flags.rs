//! The flags of `captf-controller run`, each with its `CAPTF_*` environment variable, their
//! parsers, and what the runtime takes from them (the runner slots, the runner pods' defaults,
//! the namespaces to watch). Start-up from them is the runtime's ([`super::start`]).

use std::net::SocketAddr;

use super::metrics_auth;

/// The flags of `captf-controller run` (each with an env var).
#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// The namespaces to watch: repeat the flag or separate them with commas (`--namespace a,b`).
    /// None, or only empty values as clusterctl passes them (`--namespace=""`): all namespaces.
    #[arg(
        long,
        visible_alias = "watch-namespace",
        env = "CAPTF_NAMESPACE",
        value_delimiter = ',',
        value_parser = parse_namespace
    )]
    pub namespace: Vec<String>,
    // The runner image and service account (`--runner-image`, `--runner-service-account`) and
    // what tenants may choose for runner pods: the webhook's flags, declared once in captf-shared,
    // so both read the same values into the same policy (`TenantPolicyArgs::to_policy`).
    #[command(flatten)]
    pub policy: captf_shared::policy::TenantPolicyArgs,
    /// Annotations of every object's own runner ServiceAccount (`key=value,...`), for workload
    /// identity (e.g. `eks.amazonaws.com/role-arn=arn:aws:iam::1:role/tf`); set again before each
    /// Job. Values may not contain commas.
    #[arg(long, env = "CAPTF_RUNNER_SERVICE_ACCOUNT_ANNOTATIONS", default_value = "", value_parser = parse_annotations)]
    pub runner_service_account_annotations: Annotations,
    /// Where /metrics is served.
    #[arg(long, env = "CAPTF_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Who may read /metrics. `none`: anyone who reaches --metrics-addr (the metrics name every
    /// object). `kubernetes`: a bearer token the API server authenticates (TokenReview) and
    /// authorizes for get on the non-resource URL /metrics (SubjectAccessReview); else 401 or 403.
    #[arg(long, env = "CAPTF_METRICS_AUTH", value_enum, default_value_t = metrics_auth::MetricsAuth::None)]
    pub metrics_auth: metrics_auth::MetricsAuth,
    /// Where /healthz and /readyz are served.
    #[arg(long, env = "CAPTF_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    pub health_addr: SocketAddr,
    /// Serve only the objects whose labels match this Kubernetes label selector
    /// (`sharding.captf.io/key=shard-1` on a shard, `!sharding.captf.io/key` on the instance that
    /// serves the rest; docs/operating.md "Sharding"). Empty: every object.
    #[arg(long, env = "CAPTF_WATCH_LABEL_SELECTOR", default_value = "", value_parser = captf_shared::policy::parse_flag_text)]
    pub watch_label_selector: String,
    /// Cluster API's convention: serve only the objects labelled
    /// cluster.x-k8s.io/watch-filter=<value> (with --watch-label-selector too, when both are set).
    /// Empty, or `""` as clusterctl passes an unset variable: no filter.
    #[arg(long, env = "CAPTF_WATCH_FILTER", default_value = "", value_parser = captf_shared::policy::parse_flag_text)]
    pub watch_filter: String,
    /// Elect a leader through the Lease captf-controller-leader (with a selector, a Lease of that
    /// selector's own: captf-controller-leader-<hash>); only the leader writes.
    #[arg(long, env = "CAPTF_LEADER_ELECT", default_value_t = false)]
    pub leader_elect: bool,
    /// The namespace of the leader Lease (default: POD_NAMESPACE, else the first --namespace, else
    /// default).
    #[arg(long, env = "CAPTF_LEADER_NAMESPACE")]
    pub leader_namespace: Option<String>,
    /// Leader lease duration in seconds (the leader renews every third of it).
    #[arg(long, env = "CAPTF_LEADER_LEASE_SECONDS", default_value_t = 15, hide = true)]
    pub leader_lease_seconds: u64,
    /// Identity in leader election (default: POD_NAME, else captf-controller-<pid>).
    #[arg(long, env = "CAPTF_LEADER_IDENTITY", hide = true)]
    pub leader_identity: Option<String>,
    /// Objects reconciled at the same time, per kind (and per watched namespace).
    #[arg(long, env = "CAPTF_CONCURRENCY", default_value_t = 8)]
    pub concurrency: u16,
    /// Runner Jobs running at once in all namespaces together; an object due to start one
    /// beyond it waits (Ready=False/Queued, docs/rules.md "Runner slots"). 0: no limit.
    #[arg(long, env = "CAPTF_MAX_RUNNING_JOBS", default_value_t = 0)]
    pub max_running_jobs: u32,
    /// Runner Jobs running at once in one namespace; an object due to start one beyond it
    /// waits (Ready=False/Queued). 0: no limit.
    #[arg(long, env = "CAPTF_MAX_RUNNING_JOBS_PER_NAMESPACE", default_value_t = 10)]
    pub max_running_jobs_per_namespace: u32,
    /// Log format.
    #[arg(long, env = "CAPTF_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Resource requests of runner pods (`cpu=100m,memory=256Mi`); a resource spec.jobs.resources
    /// names replaces its default. Empty: none.
    #[arg(long, env = "CAPTF_RUNNER_REQUESTS", default_value = "cpu=100m,memory=256Mi", value_parser = parse_quantities)]
    pub runner_requests: Quantities,
    /// Resource limits of runner pods (`memory=2Gi`). Empty: none.
    #[arg(long, env = "CAPTF_RUNNER_LIMITS", default_value = "memory=2Gi", value_parser = parse_quantities)]
    pub runner_limits: Quantities,
    /// sizeLimit of the runner's work emptyDir (providers, modules, plans). Empty: none.
    #[arg(long, env = "CAPTF_RUNNER_WORK_SIZE_LIMIT", default_value = "4Gi", value_parser = captf_shared::policy::parse_flag_text)]
    pub runner_work_size_limit: String,
    /// sizeLimit of the runner's /tmp emptyDir. Empty: none.
    #[arg(long, env = "CAPTF_RUNNER_TMP_SIZE_LIMIT", default_value = "1Gi", value_parser = captf_shared::policy::parse_flag_text)]
    pub runner_tmp_size_limit: String,
    /// A ConfigMap, in each object's namespace, holding the Terraform CLI configuration of runner
    /// pods whose spec.jobs.terraformCliConfig is unset (provider mirrors). Empty: none. While it
    /// or its key is missing, such objects get Ready=False/RunnerConfigUnavailable and no Job.
    #[arg(long, env = "CAPTF_RUNNER_TERRAFORM_CLI_CONFIG", default_value = "", value_parser = captf_shared::policy::parse_flag_text)]
    pub runner_terraform_cli_config: String,
    /// The key of --runner-terraform-cli-config holding the configuration.
    #[arg(long, env = "CAPTF_RUNNER_TERRAFORM_CLI_CONFIG_KEY", default_value = "terraform.rc", value_parser = captf_shared::policy::parse_flag_text)]
    pub runner_terraform_cli_config_key: String,
    /// A directory whose .rego files are policies every plan is checked against before it is
    /// applied, besides an object's own spec.guard.policyRefs (the chart mounts the ConfigMaps of
    /// planPolicies.configMaps here). Read again before every apply. Empty: none.
    #[arg(long, env = "CAPTF_PLAN_POLICIES_DIR", default_value = "", value_parser = captf_shared::policy::parse_flag_text)]
    pub plan_policies_dir: String,
    /// A file holding the cluster-wide notification targets (a YAML list, docs/notifications.md),
    /// read once at start; the chart mounts its ConfigMap there. Their Secrets are read in
    /// --notification-secrets-namespace. Empty: no cluster-wide targets.
    #[arg(long, env = "CAPTF_NOTIFICATION_TARGETS_FILE", default_value = "")]
    pub notification_targets_file: String,
    /// The namespace of the cluster-wide targets' Secrets: the controller's own (POD_NAMESPACE).
    #[arg(long, env = "POD_NAMESPACE", default_value = "")]
    pub notification_secrets_namespace: String,
    /// Whether a namespace's ConfigMap captf-notifications adds targets for its objects (their
    /// Secrets in that namespace). `false`: only the cluster-wide targets are sent to.
    #[arg(long, env = "CAPTF_NAMESPACE_NOTIFICATION_TARGETS", default_value_t = true, action = clap::ArgAction::Set)]
    pub namespace_notification_targets: bool,
    /// Applies that fail this many times in a row send one apply-failed notification (when the
    /// count reaches it, not again for each failure after).
    #[arg(long, env = "CAPTF_NOTIFY_AFTER_FAILURES", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub notify_after_failures: u32,
}

/// `name=quantity` pairs of a resource list.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Quantities(pub std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>);

/// `key=value` annotations of a flag.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Annotations(pub std::collections::BTreeMap<String, String>);

/// Parse `key=value,key2=value2` (empty: none); keys are checked as Kubernetes checks annotation
/// keys (an optional DNS subdomain prefix and a name of at most 63 characters).
pub fn parse_annotations(s: &str) -> Result<Annotations, String> {
    let mut out = std::collections::BTreeMap::new();
    for pair in captf_shared::policy::flag_text(s)
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let (k, v) = pair.split_once('=').ok_or_else(|| {
            format!("{pair:?} is not key=value (e.g. eks.amazonaws.com/role-arn=arn:aws:iam::1:role/tf)")
        })?;
        let k = k.trim();
        let (prefix, name) = match k.rsplit_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, k),
        };
        let name_ok = !name.is_empty()
            && name.len() <= 63
            && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !name_ok || prefix.is_some_and(|p| !captf_shared::names::is_dns1123_subdomain(p)) {
            return Err(format!("{k:?} is not a valid annotation key"));
        }
        out.insert(k.to_string(), v.trim().to_string());
    }
    Ok(Annotations(out))
}

/// One `--namespace` value: a namespace name (a DNS-1123 label), blanks around it ignored; empty
/// is kept, and so is `""` (clusterctl passes `--namespace=""` for all namespaces).
pub fn parse_namespace(s: &str) -> Result<String, String> {
    captf_shared::policy::parse_namespace(s)
}

/// Parse `cpu=100m,memory=256Mi` (empty, or `""` as clusterctl passes an empty variable: none).
pub fn parse_quantities(s: &str) -> Result<Quantities, String> {
    let mut out = std::collections::BTreeMap::new();
    for pair in captf_shared::policy::flag_text(s)
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?} is not name=quantity (e.g. memory=256Mi)"))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '.') {
            return Err(format!("{pair:?} is not name=quantity (e.g. memory=256Mi)"));
        }
        out.insert(
            k.to_string(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.to_string()),
        );
    }
    Ok(Quantities(out))
}

impl RunArgs {
    /// The limits on running runner Jobs of the flags (0: none).
    pub fn runner_slots(&self) -> captf_core::queue::Limits {
        captf_core::queue::Limits::from_flags(self.max_running_jobs, self.max_running_jobs_per_namespace)
    }

    /// The runner pods' defaults of the flags.
    pub fn runner_pod(&self) -> captf_core::job::RunnerPodDefaults {
        let q = |s: &str| {
            let s = s.trim();
            (!s.is_empty()).then(|| k8s_openapi::apimachinery::pkg::api::resource::Quantity(s.to_string()))
        };
        captf_core::job::RunnerPodDefaults {
            requests: self.runner_requests.0.clone(),
            limits: self.runner_limits.0.clone(),
            work_size_limit: q(&self.runner_work_size_limit),
            tmp_size_limit: q(&self.runner_tmp_size_limit),
            terraform_cli_config: Some(self.runner_terraform_cli_config.trim())
                .filter(|n| !n.is_empty())
                .map(|name| captf_shared::types::CliConfigRef {
                    name: name.to_string(),
                    key: Some(self.runner_terraform_cli_config_key.trim())
                        .filter(|k| !k.is_empty())
                        .map(str::to_string),
                }),
        }
    }
}

impl RunArgs {
    /// The flags of `captf-controller run` (without the subcommand), parsed exactly as the binary
    /// parses them: every flag not given takes its default or its `CAPTF_*` environment variable.
    /// For programs that embed the runtime ([`start`]) and for checking the arguments a manifest
    /// passes; the one place a `RunArgs` is built, so a new flag needs no change anywhere else.
    pub fn from_flags<I, T>(flags: I) -> Result<RunArgs, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString>,
    {
        #[derive(clap::Parser)]
        #[command(name = "captf-controller run")]
        struct Run {
            #[command(flatten)]
            run: RunArgs,
        }
        let argv = std::iter::once(std::ffi::OsString::from("run")).chain(flags.into_iter().map(Into::into));
        <Run as clap::Parser>::try_parse_from(argv).map(|r| r.run)
    }

    /// The namespaces to watch, in the order given, each once; empty (all namespaces) when
    /// `--namespace` is unset or names only empty values.
    pub fn watch_namespaces(&self) -> Vec<String> {
        let mut out: Vec<String> = vec![];
        for n in self.namespace.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
            if !out.iter().any(|o| o == n) {
                out.push(n.to_string());
            }
        }
        out
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

#[cfg(test)]
mod quantity_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn runner_account_annotations_parse_as_key_value_pairs_with_valid_keys() {
        let a = parse_annotations(
            "eks.amazonaws.com/role-arn=arn:aws:iam::1:role/tf, azure.workload.identity/client-id=abc",
        )
        .unwrap();
        assert_eq!(a.0["eks.amazonaws.com/role-arn"], "arn:aws:iam::1:role/tf");
        assert_eq!(a.0["azure.workload.identity/client-id"], "abc");
        assert_eq!(parse_annotations("").unwrap(), Annotations::default());
        assert_eq!(
            parse_annotations("\"\"").unwrap(),
            Annotations::default(),
            "as clusterctl leaves it"
        );
        for bad in ["no-equals", "=v", "Bad_Prefix!/x=1", "x/-bad=1"] {
            assert!(parse_annotations(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn resource_flags_are_name_quantity_pairs_and_a_bad_pair_is_named() {
        let q = parse_quantities("cpu=100m, memory=256Mi").unwrap();
        assert_eq!(q.0["cpu"].0, "100m");
        assert_eq!(q.0["memory"].0, "256Mi");
        assert!(parse_quantities("").unwrap().0.is_empty());
        assert!(
            parse_quantities("\"\"").unwrap().0.is_empty(),
            "as clusterctl leaves it"
        );
        let e = parse_quantities("memory").unwrap_err();
        assert!(e.contains("\"memory\""), "{e}");
        assert!(parse_quantities("memory=1 Gi; rm").is_err());
    }
}

#[cfg(test)]
mod namespace_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn watched(flags: &[&str]) -> Vec<String> {
        let argv = std::iter::once("captf-controller").chain(flags.iter().copied());
        Cli::try_parse_from(argv).unwrap().run.watch_namespaces()
    }

    #[test]
    fn watch_filter_and_label_selector_read_the_quotes_clusterctl_leaves_as_empty() {
        let parse = |flags: &[&str]| {
            let argv = std::iter::once("captf-controller").chain(flags.iter().copied());
            let run = Cli::try_parse_from(argv).unwrap().run;
            captf_core::sharding::object_selector(&run.watch_label_selector, &run.watch_filter).unwrap()
        };
        assert_eq!(parse(&["--watch-filter=\"\"", "--watch-label-selector=\"\""]), None);
        assert_eq!(
            parse(&["--watch-filter=team-a"]),
            Some("cluster.x-k8s.io/watch-filter=team-a".to_string())
        );
    }

    #[test]
    fn namespace_flag_may_be_repeated_and_comma_separated() {
        assert_eq!(watched(&["--namespace", "team-a"]), ["team-a"]);
        assert_eq!(watched(&["--namespace=team-a,team-b"]), ["team-a", "team-b"]);
        assert_eq!(
            watched(&["--namespace", "team-a", "--watch-namespace", "team-b,team-c"]),
            ["team-a", "team-b", "team-c"]
        );
        // Order kept, each once, blanks around names ignored.
        assert_eq!(watched(&["--namespace= team-b , team-a,team-b"]), ["team-b", "team-a"]);
    }

    #[test]
    fn a_namespace_flag_that_is_not_a_namespace_name_is_refused_naming_it() {
        for bad in ["Team-A", "team_a", "-team", "a/b", &"n".repeat(64)] {
            let flag = format!("--namespace={bad}");
            let argv = ["captf-controller", flag.as_str()];
            let err = Cli::try_parse_from(argv)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.contains(&format!("{bad:?} is not a namespace name")),
                "{bad}: {err}"
            );
        }
        let argv = ["captf-controller", "--namespace=team-a,Bad"];
        assert!(Cli::try_parse_from(argv).is_err(), "one bad name in a list is refused");
        assert_eq!(watched(&["--namespace", &"n".repeat(63)]), ["n".repeat(63)]);
    }

    #[test]
    fn namespace_flag_unset_or_empty_watches_all_namespaces() {
        assert!(watched(&[]).is_empty());
        assert!(watched(&["--namespace="]).is_empty());
        // As clusterctl's components pass it with CAPTF_WATCH_NAMESPACE at its default.
        assert!(watched(&["--namespace=\"\""]).is_empty());
        assert!(watched(&["--namespace", ""]).is_empty());
        assert!(watched(&["--namespace=,"]).is_empty());
    }

    /// clap reads `CAPTF_NAMESPACE` from the process's environment, which a test cannot set
    /// without `unsafe`: this test runs its own binary again with the variable set.
    #[test]
    fn namespace_env_var_is_comma_separated_like_the_flag() {
        const EXPECT: &str = "CAPTF_TEST_EXPECTED_NAMESPACES";
        if let Ok(expect) = std::env::var(EXPECT) {
            assert_eq!(watched(&[]).join(","), expect);
            return;
        }
        let me = "runtime::flags::namespace_tests::namespace_env_var_is_comma_separated_like_the_flag";
        for (value, expect) in [
            ("team-a", "team-a"),
            ("team-a,team-b", "team-a,team-b"),
            (" a , ,b,a", "a,b"),
            ("", ""),
        ] {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([me, "--exact", "--test-threads=1"])
                .env("CAPTF_NAMESPACE", value)
                .env(EXPECT, expect)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("1 passed"),
                "CAPTF_NAMESPACE={value:?}: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[cfg(test)]
mod clock_flag_tests {
    /// Whoever could serve the URL of `--sim-clock-url` could move the controller's clock (start
    /// drift checks and retries early, or never): a controller built as it ships has no such flag,
    /// so passing it is an error, not a hidden switch.
    #[test]
    fn a_shipped_controller_refuses_the_simulator_clock_flag() {
        let err = super::RunArgs::from_flags(["--sim-clock-url", "http://127.0.0.1:9"])
            .err()
            .unwrap_or_else(|| panic!("--sim-clock-url was accepted"));
        assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument, "{err}");
    }
}

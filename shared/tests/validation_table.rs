//! Every row of docs/api.md, at and around each boundary, each rejection naming its field path.
#![allow(clippy::unwrap_used)]

use captf_shared::types::{
    ApiEndpoint, ApprovalMode, CaptfObject, DestructiveGuard, DriftSpec, GuardSpec, JobsSpec, ModuleSpec, PolicyRef,
    Remediation, TerraformCluster, TerraformClusterSpec, TerraformClusterTemplate, TerraformClusterTemplateResource,
    TerraformClusterTemplateSpec, TerraformMachine, TerraformMachinePoolSpec, TerraformMachinePoolTemplate,
    TerraformMachinePoolTemplateResource, TerraformMachinePoolTemplateSpec, TerraformMachineSpec,
    TerraformMachineTemplate, TerraformMachineTemplateResource, TerraformMachineTemplateSpec, TerraformSpec,
    VariablesFrom, VariablesRef,
};
use captf_shared::validation::{Report, validate_create, validate_spec, validate_update};
use k8s_openapi::api::core::v1::EnvVar;
use serde_json::json;

fn spec() -> TerraformSpec {
    TerraformSpec {
        module: ModuleSpec {
            source: "git::https://example.com/modules/vpc.git?ref=v1.2.0".into(),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn cluster(terraform: TerraformSpec) -> CaptfObject {
    CaptfObject::Cluster(TerraformCluster::new(
        "prod-eu",
        TerraformClusterSpec {
            terraform,
            control_plane_endpoint: None,
            exports: None,
        },
    ))
}

fn machine(terraform: TerraformSpec, provider_id: Option<&str>) -> CaptfObject {
    CaptfObject::Machine(TerraformMachine::new(
        "m-0",
        TerraformMachineSpec {
            terraform,
            provider_id: provider_id.map(str::to_string),
        },
    ))
}

fn template(terraform: TerraformSpec) -> CaptfObject {
    CaptfObject::MachineTemplate(TerraformMachineTemplate::new(
        "workers",
        TerraformMachineTemplateSpec {
            template: TerraformMachineTemplateResource {
                metadata: None,
                spec: TerraformMachineSpec {
                    terraform,
                    provider_id: None,
                },
            },
        },
    ))
}

fn with_jobs(jobs: JobsSpec) -> TerraformSpec {
    TerraformSpec {
        jobs: Some(jobs),
        ..spec()
    }
}

fn with_interval(interval: &str) -> TerraformSpec {
    TerraformSpec {
        drift: Some(DriftSpec {
            interval: Some(interval.into()),
            remediation: None,
        }),
        ..spec()
    }
}

fn with_source(source: &str) -> TerraformSpec {
    TerraformSpec {
        module: ModuleSpec {
            source: source.into(),
            ..Default::default()
        },
        ..spec()
    }
}

fn check(s: &TerraformSpec) -> Report {
    validate_create(&cluster(s.clone()))
}

/// The spec is accepted.
#[track_caller]
fn accepted(s: TerraformSpec) {
    let r = check(&s);
    assert!(r.is_valid(), "expected valid, got: {}", r.message());
}

/// The spec is rejected with exactly one violation at `field`; returns its message.
#[track_caller]
fn rejected_at(s: TerraformSpec, field: &str) -> String {
    let r = check(&s);
    assert_eq!(
        r.violations.iter().map(|v| v.field.as_str()).collect::<Vec<_>>(),
        [field],
        "{}",
        r.message()
    );
    let msg = r.message();
    assert!(msg.starts_with(&format!("{field}: ")), "{msg}");
    msg
}

// ---- module.source ----------------------------------------------------------------------------

#[test]
fn module_source_is_required_and_non_empty() {
    let msg = rejected_at(with_source(""), "spec.module.source");
    assert_eq!(msg, "spec.module.source: is required and must not be empty (got \"\")");
}

#[test]
fn module_source_may_have_2048_characters_but_not_2049() {
    let base = "https://example.com/";
    let at = format!("{base}{}", "a".repeat(2048 - base.len()));
    assert_eq!(at.chars().count(), 2048);
    accepted(with_source(&at));
    let over = format!("{at}b");
    let msg = rejected_at(with_source(&over), "spec.module.source");
    assert!(msg.contains("must be at most 2048 characters"), "{msg}");
    assert!(msg.ends_with("…)"), "a long value is cut in the message: {msg}");
}

#[test]
fn module_source_length_counts_characters_not_bytes() {
    let base = "https://example.com/";
    let at = format!("{base}{}", "é".repeat(2048 - base.len()));
    assert!(at.len() > 2048);
    accepted(with_source(&at));
}

#[test]
fn module_source_rejects_whitespace_and_control_characters() {
    for bad in [
        "git::https://example.com/a b.git",
        " hashicorp/consul/aws",
        "hashicorp/consul/aws\n",
        "hashicorp/consul/aws\t",
        "https://example.com/m\u{7}.zip",
    ] {
        let msg = rejected_at(with_source(bad), "spec.module.source");
        assert!(
            msg.contains("must not contain whitespace or control characters"),
            "{msg}"
        );
    }
}

#[test]
fn module_source_rejects_local_paths() {
    for bad in ["./modules/vpc", "../vpc", "/srv/modules/vpc", "file:///srv/m", "."] {
        let msg = rejected_at(with_source(bad), "spec.module.source");
        assert!(msg.contains("must not be a local path"), "{msg}");
    }
}

#[test]
fn module_source_accepts_every_documented_remote_address() {
    for ok in [
        "hashicorp/consul/aws",
        "app.terraform.io/example-corp/k8s-cluster/azurerm",
        "hashicorp/consul/aws//modules/consul-cluster",
        "github.com/hashicorp/example",
        "bitbucket.org/hashicorp/terraform-consul-aws",
        "git::https://example.com/vpc.git",
        "git::ssh://username@example.com/storage.git",
        "git@github.com:hashicorp/example.git",
        "hg::http://example.com/vpc.hg",
        "https://example.com/vpc-module.zip",
        "s3::https://s3-eu-west-1.amazonaws.com/examplecorp-terraform-modules/vpc.zip",
        "gcs::https://www.googleapis.com/storage/v1/modules/foomodule.zip",
        "oci://example.com/repository-name",
    ] {
        accepted(with_source(ok));
    }
}

#[test]
fn module_source_rejects_what_is_not_a_module_address() {
    for bad in [
        "vpc",
        "hashicorp/consul",
        "svn::https://example.com/x",
        "ftp://example.com/m.zip",
        "github.com/x",
    ] {
        let msg = rejected_at(with_source(bad), "spec.module.source");
        assert!(
            msg.contains("must be a module address tofu init -from-module accepts"),
            "{msg}"
        );
    }
}

// ---- variables ----------------------------------------------------------------------------------

fn with_variables(vars: serde_json::Value) -> TerraformSpec {
    TerraformSpec {
        variables: Some(serde_json::from_value(vars).unwrap()),
        ..spec()
    }
}

#[test]
fn variable_names_must_match_the_pattern() {
    accepted(with_variables(
        json!({"region": "eu", "_x": 1, "instance-count": 3, "A9": {"nested.ok": true}}),
    ));
    for bad in ["1x", "-x", "a.b", "a b", ""] {
        let r = check(&with_variables(json!({ bad: 1 })));
        assert_eq!(r.violations.len(), 1, "{bad}: {}", r.message());
        let v = &r.violations[0];
        assert!(v.field.starts_with("spec.variables["), "{}", v.field);
        assert!(v.rule.contains("^[A-Za-z_][A-Za-z0-9_-]*$"), "{}", v.rule);
        assert_eq!(v.value, serde_json::to_string(bad).unwrap());
    }
    let msg = rejected_at(with_variables(json!({"a.b": 1})), "spec.variables[a.b]");
    assert_eq!(
        msg,
        "spec.variables[a.b]: name must match ^[A-Za-z_][A-Za-z0-9_-]*$ (got \"a.b\")"
    );
}

/// Variables `{"v": "<n x's>"}` whose JSON is exactly `len` bytes.
fn variables_of_size(len: usize) -> TerraformSpec {
    let overhead = r#"{"v":""}"#.len();
    let s = with_variables(json!({ "v": "x".repeat(len - overhead) }));
    assert_eq!(serde_json::to_vec(s.variables.as_ref().unwrap()).unwrap().len(), len);
    s
}

#[test]
fn variables_may_serialize_to_512_kib_but_not_one_byte_more() {
    accepted(variables_of_size(512 * 1024));
    let msg = rejected_at(variables_of_size(512 * 1024 + 1), "spec.variables");
    assert!(msg.contains("at most 524288 bytes"), "{msg}");
    assert!(
        msg.ends_with("(got 524289)"),
        "the value is the size, not 512 KiB of JSON: {msg}"
    );
}

// ---- variablesFrom --------------------------------------------------------------------------------

fn secret(name: &str, key: Option<&str>) -> Option<VariablesRef> {
    Some(VariablesRef {
        name: name.into(),
        key: key.map(str::to_string),
    })
}

fn with_from(entries: Vec<VariablesFrom>) -> TerraformSpec {
    TerraformSpec {
        variables_from: Some(entries),
        ..spec()
    }
}

#[test]
fn variables_from_accepts_one_ref_per_entry() {
    accepted(with_from(vec![
        VariablesFrom {
            secret_ref: secret("cloud-creds", None),
            config_map_ref: None,
        },
        VariablesFrom {
            secret_ref: None,
            config_map_ref: secret("vpc.vars", Some("vars.json")),
        },
    ]));
}

#[test]
fn variables_from_entry_needs_exactly_one_ref() {
    let msg = rejected_at(with_from(vec![VariablesFrom::default()]), "spec.variablesFrom[0]");
    assert_eq!(
        msg,
        "spec.variablesFrom[0]: must set exactly one of secretRef or configMapRef (got {})"
    );
    let both = VariablesFrom {
        secret_ref: secret("a", None),
        config_map_ref: secret("b", None),
    };
    let ok = VariablesFrom {
        secret_ref: secret("a", None),
        config_map_ref: None,
    };
    let msg = rejected_at(with_from(vec![ok, both]), "spec.variablesFrom[1]");
    assert!(msg.contains("not both"), "{msg}");
}

#[test]
fn variables_from_names_are_dns1123_subdomains() {
    for good in ["a", "cloud-creds", "a.b-c", &"a".repeat(63)] {
        accepted(with_from(vec![VariablesFrom {
            secret_ref: secret(good, None),
            config_map_ref: None,
        }]));
    }
    for bad in ["", "Creds", "creds_", "-creds", "creds-", "a..b", &"a".repeat(64)] {
        let msg = rejected_at(
            with_from(vec![VariablesFrom {
                secret_ref: None,
                config_map_ref: secret(bad, None),
            }]),
            "spec.variablesFrom[0].configMapRef.name",
        );
        assert!(msg.contains("DNS-1123 subdomain"), "{msg}");
    }
}

#[test]
fn variables_from_key_must_be_a_data_key_when_set() {
    for good in ["vars.json", "VARS", "a_b-c.d"] {
        accepted(with_from(vec![VariablesFrom {
            secret_ref: secret("s", Some(good)),
            config_map_ref: None,
        }]));
    }
    for bad in ["", ".", "..", "a/b", "a b", &"k".repeat(254)] {
        let msg = rejected_at(
            with_from(vec![VariablesFrom {
                secret_ref: secret("s", Some(bad)),
                config_map_ref: None,
            }]),
            "spec.variablesFrom[0].secretRef.key",
        );
        assert!(msg.contains("data key"), "{msg}");
    }
}

// ---- jobs ---------------------------------------------------------------------------------------

fn deadline(d: i64) -> TerraformSpec {
    // No lock timeout set, so only the deadline rule is exercised.
    with_jobs(JobsSpec {
        active_deadline_seconds: Some(d),
        ..Default::default()
    })
}

#[test]
fn active_deadline_is_between_60_and_604800() {
    accepted(deadline(60));
    accepted(deadline(3600));
    accepted(deadline(604_800));
    for bad in [59, 0, -1, 604_801, i64::MAX, i64::MIN] {
        let msg = rejected_at(deadline(bad), "spec.jobs.activeDeadlineSeconds");
        assert_eq!(
            msg,
            format!("spec.jobs.activeDeadlineSeconds: must be between 60 and 604800 seconds (got {bad})")
        );
    }
}

fn lock(deadline: Option<i64>, lock: i64) -> TerraformSpec {
    with_jobs(JobsSpec {
        active_deadline_seconds: deadline,
        lock_timeout_seconds: Some(lock),
        ..Default::default()
    })
}

#[test]
fn lock_timeout_may_be_deadline_minus_one_but_not_the_deadline() {
    accepted(lock(Some(600), 599));
    accepted(lock(Some(60), 59));
    let msg = rejected_at(lock(Some(600), 600), "spec.jobs.lockTimeoutSeconds");
    assert_eq!(
        msg,
        "spec.jobs.lockTimeoutSeconds: must be less than spec.jobs.activeDeadlineSeconds (600) (got 600)"
    );
    rejected_at(lock(Some(60), 60), "spec.jobs.lockTimeoutSeconds");
}

#[test]
fn lock_timeout_compares_with_the_default_deadline_when_it_is_unset() {
    accepted(lock(None, 3599));
    rejected_at(lock(None, 3600), "spec.jobs.lockTimeoutSeconds");
    let msg = rejected_at(lock(None, 4000), "spec.jobs.lockTimeoutSeconds");
    assert_eq!(
        msg,
        "spec.jobs.lockTimeoutSeconds: must be less than spec.jobs.activeDeadlineSeconds (3600) (got 4000)"
    );
}

#[test]
fn lock_timeout_zero_is_allowed_and_negative_is_not() {
    accepted(lock(None, 0));
    let msg = rejected_at(lock(None, -1), "spec.jobs.lockTimeoutSeconds");
    assert_eq!(msg, "spec.jobs.lockTimeoutSeconds: must be at least 0 (got -1)");
}

#[test]
fn lock_timeout_above_3600_is_fine_under_a_larger_deadline() {
    accepted(lock(Some(7200), 4000));
    accepted(lock(Some(604_800), 604_799));
}

#[test]
fn history_limits_may_be_zero_but_not_negative() {
    accepted(with_jobs(JobsSpec {
        failed_jobs_history_limit: Some(0),
        successful_jobs_history_limit: Some(0),
        ..Default::default()
    }));
    let msg = rejected_at(
        with_jobs(JobsSpec {
            failed_jobs_history_limit: Some(-1),
            ..Default::default()
        }),
        "spec.jobs.failedJobsHistoryLimit",
    );
    assert_eq!(msg, "spec.jobs.failedJobsHistoryLimit: must be at least 0 (got -1)");
    let msg = rejected_at(
        with_jobs(JobsSpec {
            successful_jobs_history_limit: Some(-1),
            ..Default::default()
        }),
        "spec.jobs.successfulJobsHistoryLimit",
    );
    assert_eq!(msg, "spec.jobs.successfulJobsHistoryLimit: must be at least 0 (got -1)");
}

fn image(i: &str) -> TerraformSpec {
    with_jobs(JobsSpec {
        image: Some(i.into()),
        ..Default::default()
    })
}

#[test]
fn image_must_be_a_valid_reference_when_set() {
    accepted(with_jobs(JobsSpec::default()));
    for ok in [
        "ghcr.io/captf/runner:0.1.0",
        "registry.example.com:5000/captf/runner",
        "runner@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    ] {
        accepted(image(ok));
    }
    for bad in [
        "",
        "Runner:1",
        "runner:",
        "ghcr.io/captf/runner:1 ",
        "runner@sha256:xyz",
    ] {
        let msg = rejected_at(image(bad), "spec.jobs.image");
        assert!(msg.contains("must be a valid image reference"), "{msg}");
    }
}

#[test]
fn service_account_name_is_a_dns1123_subdomain() {
    let sa = |n: &str| {
        with_jobs(JobsSpec {
            service_account_name: Some(n.into()),
            ..Default::default()
        })
    };
    accepted(sa("captf-runner"));
    accepted(sa("runner.v2"));
    for bad in ["", "Runner", "runner_1", "-runner", &"a".repeat(254)] {
        rejected_at(sa(bad), "spec.jobs.serviceAccountName");
    }
}

#[test]
fn env_names_must_not_start_with_captf_() {
    let env = |names: &[&str]| {
        with_jobs(JobsSpec {
            env: Some(
                names
                    .iter()
                    .map(|n| EnvVar {
                        name: n.to_string(),
                        value: Some("v".into()),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        })
    };
    accepted(env(&["TF_LOG", "captf_lower_is_not_reserved", "XCAPTF_", "CAPTF"]));
    let msg = rejected_at(env(&["TF_LOG", "CAPTF_PHASE"]), "spec.jobs.env[1].name");
    assert_eq!(
        msg,
        "spec.jobs.env[1].name: must not start with CAPTF_ (reserved for the runner) (got \"CAPTF_PHASE\")"
    );
}

// ---- drift --------------------------------------------------------------------------------------

#[test]
fn drift_interval_is_zero_or_between_1m_and_168h() {
    for ok in ["0", "1m", "60s", "30m", "1h30m", "168h", "167h59m59s", "5m"] {
        accepted(with_interval(ok));
    }
    for bad in ["59s", "169h", "168h1s", "0s", "1ms"] {
        let msg = rejected_at(with_interval(bad), "spec.drift.interval");
        assert_eq!(
            msg,
            format!("spec.drift.interval: must be 0 (off) or between 1m and 168h (got \"{bad}\")")
        );
    }
    for junk in ["", "30", "1d", "-5m", "abc", "1h 30m"] {
        let msg = rejected_at(with_interval(junk), "spec.drift.interval");
        assert!(msg.contains("must be 0 or a duration like 30m or 1h30m"), "{msg}");
    }
}

#[test]
fn enums_accept_every_value() {
    for (remediation, guard) in [
        (Remediation::Auto, DestructiveGuard::Block),
        (Remediation::Manual, DestructiveGuard::Allow),
        (Remediation::Manual, DestructiveGuard::Block),
    ] {
        let s = TerraformSpec {
            drift: Some(DriftSpec {
                interval: None,
                remediation: Some(remediation),
            }),
            guard: Some(GuardSpec {
                destructive: Some(guard),
                approval: None,
                policy_refs: None,
            }),
            ..spec()
        };
        let r = check(&s);
        assert!(r.is_valid() && r.warnings.is_empty(), "{r:?}");
    }
}

// ---- warnings -----------------------------------------------------------------------------------

#[test]
fn drift_interval_under_5m_warns_but_zero_does_not() {
    for warn in ["1m", "4m59s", "90s"] {
        let r = check(&with_interval(warn));
        assert!(r.is_valid(), "{warn}");
        assert_eq!(r.warnings.len(), 1, "{warn}");
        assert!(
            r.warnings[0].starts_with("spec.drift.interval: under 5m"),
            "{}",
            r.warnings[0]
        );
        assert!(
            r.warnings[0].ends_with(&format!("(got \"{warn}\")")),
            "{}",
            r.warnings[0]
        );
    }
    for quiet in ["0", "5m", "30m"] {
        assert!(check(&with_interval(quiet)).warnings.is_empty(), "{quiet}");
    }
    // An invalid interval is a violation, not also a warning.
    assert!(check(&with_interval("59s")).warnings.is_empty());
}

fn guard(destructive: DestructiveGuard, remediation: Option<Remediation>) -> TerraformSpec {
    TerraformSpec {
        guard: Some(GuardSpec {
            destructive: Some(destructive),
            approval: None,
            policy_refs: None,
        }),
        drift: Some(DriftSpec {
            interval: None,
            remediation,
        }),
        ..spec()
    }
}

#[test]
fn allow_destructive_with_auto_remediation_warns() {
    for remediation in [Some(Remediation::Auto), None] {
        let r = check(&guard(DestructiveGuard::Allow, remediation));
        assert!(r.is_valid());
        assert_eq!(r.warnings.len(), 1, "{remediation:?}");
        assert!(
            r.warnings[0].starts_with("spec.guard.destructive: Allow together with spec.drift.remediation Auto"),
            "{}",
            r.warnings[0]
        );
    }
    assert!(
        check(&guard(DestructiveGuard::Allow, Some(Remediation::Manual)))
            .warnings
            .is_empty()
    );
    assert!(
        check(&guard(DestructiveGuard::Block, Some(Remediation::Auto)))
            .warnings
            .is_empty()
    );
}

fn approval(mode: ApprovalMode, destructive: Option<DestructiveGuard>) -> TerraformSpec {
    TerraformSpec {
        guard: Some(GuardSpec {
            destructive,
            approval: Some(mode),
            policy_refs: None,
        }),
        drift: Some(DriftSpec {
            interval: None,
            remediation: Some(Remediation::Manual),
        }),
        ..spec()
    }
}

#[test]
fn an_approval_mode_that_holds_plans_is_not_contradicted_by_destructive_allow() {
    for mode in [ApprovalMode::Destructive, ApprovalMode::Always] {
        let r = check(&approval(mode, Some(DestructiveGuard::Allow)));
        let v = r.violation_at("spec.guard.destructive").expect("refused");
        assert!(
            v.to_string()
                .contains(&format!("spec.guard.approval {}", mode.as_str())),
            "{v}"
        );
        assert_eq!(r.violation_count(), 1);
    }
    // Block (what the defaults write) never contradicts an approval mode, not even Never: the
    // mode decides.
    for mode in [ApprovalMode::Destructive, ApprovalMode::Always, ApprovalMode::Never] {
        assert!(
            check(&approval(mode, Some(DestructiveGuard::Block))).is_valid(),
            "{mode:?}"
        );
        assert!(check(&approval(mode, None)).is_valid(), "{mode:?}");
    }
    assert!(check(&approval(ApprovalMode::Never, Some(DestructiveGuard::Allow))).is_valid());
}

#[test]
fn approval_never_with_auto_remediation_warns_at_approval() {
    let mut s = approval(ApprovalMode::Never, Some(DestructiveGuard::Block));
    s.drift = None;
    let r = check(&s);
    assert!(r.is_valid());
    assert_eq!(r.warnings.len(), 1);
    assert!(
        r.warnings[0].starts_with("spec.guard.approval: Never together with spec.drift.remediation Auto"),
        "{}",
        r.warnings[0]
    );
    s.guard = Some(GuardSpec {
        destructive: None,
        approval: Some(ApprovalMode::Always),
        policy_refs: None,
    });
    assert!(check(&s).warnings.is_empty());
}

#[test]
fn policy_refs_name_at_most_eight_configmaps() {
    let with = |names: &[&str]| TerraformSpec {
        guard: Some(GuardSpec {
            policy_refs: Some(names.iter().map(|n| PolicyRef { name: n.to_string() }).collect()),
            ..Default::default()
        }),
        ..spec()
    };
    assert!(check(&with(&["guardrails", "team.a"])).is_valid());
    let r = check(&with(&["Bad_Name"]));
    assert!(r.violation_at("spec.guard.policyRefs[0].name").is_some(), "{r:?}");
    let r = check(&with(&["a", "a"]));
    assert!(r.violation_at("spec.guard.policyRefs[1].name").is_some(), "{r:?}");
    let nine: Vec<String> = (0..9).map(|i| format!("p{i}")).collect();
    let nine: Vec<&str> = nine.iter().map(String::as_str).collect();
    let r = check(&with(&nine));
    assert!(r.violation_at("spec.guard.policyRefs").is_some(), "{r:?}");
}

// ---- everything together ------------------------------------------------------------------------

#[test]
fn every_violation_is_reported_together() {
    let s = TerraformSpec {
        module: ModuleSpec {
            source: "./local".into(),
            ..Default::default()
        },
        variables: Some(serde_json::from_value(json!({"1bad": 1})).unwrap()),
        variables_from: Some(vec![VariablesFrom::default()]),
        jobs: Some(JobsSpec {
            active_deadline_seconds: Some(59),
            lock_timeout_seconds: Some(4000),
            failed_jobs_history_limit: Some(-1),
            successful_jobs_history_limit: Some(-1),
            image: Some("Bad Image".into()),
            service_account_name: Some("Bad_SA".into()),
            env: Some(vec![EnvVar {
                name: "CAPTF_X".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        drift: Some(DriftSpec {
            interval: Some("169h".into()),
            remediation: Some(Remediation::Auto),
        }),
        guard: Some(GuardSpec {
            destructive: Some(DestructiveGuard::Allow),
            approval: None,
            policy_refs: None,
        }),
        ..Default::default()
    };
    let r = check(&s);
    let fields: Vec<&str> = r.violations.iter().map(|v| v.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.module.source",
            "spec.variables[1bad]",
            "spec.variablesFrom[0]",
            "spec.jobs.activeDeadlineSeconds",
            "spec.jobs.lockTimeoutSeconds",
            "spec.jobs.failedJobsHistoryLimit",
            "spec.jobs.successfulJobsHistoryLimit",
            "spec.jobs.image",
            "spec.jobs.serviceAccountName",
            "spec.jobs.env[0].name",
            "spec.drift.interval",
        ]
    );
    let msg = r.message();
    assert_eq!(msg.split("; ").count(), fields.len(), "{msg}");
    assert!(
        msg.contains("spec.jobs.lockTimeoutSeconds: must be less than spec.jobs.activeDeadlineSeconds (59) (got 4000)"),
        "{msg}"
    );
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
}

#[test]
fn a_minimal_spec_and_its_defaulted_form_are_valid_without_warnings() {
    let mut obj = cluster(spec());
    let r = validate_create(&obj);
    assert!(r.is_valid() && r.warnings.is_empty(), "{r:?}");
    captf_shared::defaults::apply_defaults(&mut obj);
    let r = validate_create(&obj);
    assert!(r.is_valid() && r.warnings.is_empty(), "{r:?}");
}

// ---- templates ----------------------------------------------------------------------------------

#[test]
fn template_paths_start_with_spec_template_spec() {
    let r = validate_create(&template(lock(None, 4000)));
    assert_eq!(
        r.message(),
        "spec.template.spec.jobs.lockTimeoutSeconds: must be less than spec.template.spec.jobs.activeDeadlineSeconds (3600) (got 4000)"
    );
    let r = validate_create(&template(with_source("")));
    assert_eq!(r.violations[0].field, "spec.template.spec.module.source");
    let r = validate_create(&template(with_interval("2m")));
    assert!(
        r.warnings[0].starts_with("spec.template.spec.drift.interval:"),
        "{:?}",
        r.warnings
    );
}

#[test]
fn validate_spec_takes_the_path_prefix_for_the_controller() {
    let r = validate_spec(&deadline(59), "spec.template.spec");
    assert_eq!(r.violations[0].field, "spec.template.spec.jobs.activeDeadlineSeconds");
    let r = validate_spec(&deadline(59), "spec");
    assert_eq!(r.violations[0].field, "spec.jobs.activeDeadlineSeconds");
}

#[test]
fn every_kind_is_validated() {
    let bad = deadline(59);
    let pool = CaptfObject::MachinePool(captf_shared::types::TerraformMachinePool::new(
        "p",
        captf_shared::types::TerraformMachinePoolSpec {
            terraform: bad.clone(),
            provider_id_list: None,
        },
    ));
    for obj in [cluster(bad.clone()), machine(bad.clone(), None), pool, template(bad)] {
        assert!(!validate_create(&obj).is_valid(), "{}", obj.kind_name());
    }
}

// ---- updates ------------------------------------------------------------------------------------

fn cluster_with_endpoint(endpoint: Option<(&str, i32)>) -> CaptfObject {
    CaptfObject::Cluster(TerraformCluster::new(
        "prod-eu",
        TerraformClusterSpec {
            terraform: spec(),
            control_plane_endpoint: endpoint.map(|(host, port)| ApiEndpoint {
                host: host.into(),
                port,
            }),
            exports: None,
        },
    ))
}

#[test]
fn control_plane_endpoint_is_immutable_once_set() {
    let set = cluster_with_endpoint(Some(("api.prod.example.com", 6443)));
    // Setting it the first time, or over an empty host, is allowed.
    assert!(validate_update(&cluster_with_endpoint(None), &set).is_valid());
    assert!(validate_update(&cluster_with_endpoint(Some(("", 0))), &set).is_valid());
    assert!(validate_update(&set, &set.clone()).is_valid());
    let r = validate_update(&set, &cluster_with_endpoint(Some(("api.other.example.com", 6443))));
    assert_eq!(
        r.message(),
        "spec.controlPlaneEndpoint: is immutable once set (was {\"host\":\"api.prod.example.com\",\"port\":6443}) \
         (got {\"host\":\"api.other.example.com\",\"port\":6443})"
    );
    let r = validate_update(&set, &cluster_with_endpoint(Some(("api.prod.example.com", 443))));
    assert_eq!(r.violations[0].field, "spec.controlPlaneEndpoint");
    let r = validate_update(&set, &cluster_with_endpoint(None));
    assert!(r.message().ends_with("(got null)"), "{}", r.message());
}

#[test]
fn provider_id_is_immutable_once_set() {
    let set = machine(spec(), Some("aws:///eu-west-1a/i-0abc"));
    assert!(validate_update(&machine(spec(), None), &set).is_valid());
    assert!(validate_update(&machine(spec(), Some("")), &set).is_valid());
    assert!(validate_update(&set, &set.clone()).is_valid());
    let r = validate_update(&set, &machine(spec(), Some("aws:///eu-west-1b/i-0def")));
    assert_eq!(
        r.message(),
        "spec.providerID: is immutable once set (was \"aws:///eu-west-1a/i-0abc\") (got \"aws:///eu-west-1b/i-0def\")"
    );
    assert!(!validate_update(&set, &machine(spec(), None)).is_valid());
}

#[test]
fn update_checks_everything_create_checks() {
    let old = cluster(spec());
    let r = validate_update(&old, &cluster(lock(None, 4000)));
    assert_eq!(
        r.message(),
        "spec.jobs.lockTimeoutSeconds: must be less than spec.jobs.activeDeadlineSeconds (3600) (got 4000)"
    );
    // Both kinds of violation together.
    let old = machine(spec(), Some("p-1"));
    let r = validate_update(&old, &machine(deadline(59), Some("p-2")));
    let fields: Vec<&str> = r.violations.iter().map(|v| v.field.as_str()).collect();
    assert_eq!(fields, ["spec.jobs.activeDeadlineSeconds", "spec.providerID"]);
}

#[test]
fn an_update_that_leaves_the_spec_alone_is_never_refused_for_it() {
    // An object whose spec predates a rule can still lose its finalizer or get a plan approved.
    let old = cluster(deadline(59));
    let mut new = old.clone();
    if let CaptfObject::Cluster(c) = &mut new {
        c.metadata.finalizers = Some(vec![]);
    }
    assert!(validate_update(&old, &new).is_valid());
    // The controller's re-check still sees it.
    assert!(!validate_spec(new.terraform_spec(), new.spec_path()).is_valid());
}

// ---- limits the CRD schema also enforces (bounds for its CEL rules) -----------------------------

#[test]
fn variables_from_has_at_most_32_entries() {
    let entry = VariablesFrom {
        secret_ref: secret("s", None),
        config_map_ref: None,
    };
    accepted(with_from(vec![entry.clone(); 32]));
    let msg = rejected_at(with_from(vec![entry; 33]), "spec.variablesFrom");
    assert!(msg.contains("at most 32 entries") && msg.ends_with("(got 33)"), "{msg}");
}

#[test]
fn env_has_at_most_256_entries() {
    let env = |n: usize| {
        with_jobs(JobsSpec {
            env: Some(
                (0..n)
                    .map(|i| EnvVar {
                        name: format!("V{i}"),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        })
    };
    accepted(env(256));
    let msg = rejected_at(env(257), "spec.jobs.env");
    assert!(
        msg.contains("at most 256 entries") && msg.ends_with("(got 257)"),
        "{msg}"
    );
}

#[test]
fn drift_interval_has_at_most_64_characters() {
    // 32 x "1h" is 64 characters and 32h: fine. 33 x "1h" is 33h, legal as a duration, but too long.
    accepted(with_interval(&"1h".repeat(32)));
    let msg = rejected_at(with_interval(&"1h".repeat(33)), "spec.drift.interval");
    assert!(msg.contains("at most 64 characters"), "{msg}");
}

// ---- templates are immutable (Cluster API contract) ----

fn cluster_template(terraform: TerraformSpec) -> CaptfObject {
    CaptfObject::ClusterTemplate(TerraformClusterTemplate::new(
        "class-v1",
        TerraformClusterTemplateSpec {
            template: TerraformClusterTemplateResource {
                metadata: None,
                spec: TerraformClusterSpec {
                    terraform,
                    control_plane_endpoint: None,
                    exports: None,
                },
            },
        },
    ))
}

fn pool_template(terraform: TerraformSpec) -> CaptfObject {
    CaptfObject::MachinePoolTemplate(TerraformMachinePoolTemplate::new(
        "pool-v1",
        TerraformMachinePoolTemplateSpec {
            template: TerraformMachinePoolTemplateResource {
                metadata: None,
                spec: TerraformMachinePoolSpec {
                    terraform,
                    provider_id_list: None,
                },
            },
        },
    ))
}

fn with_label(mut obj: CaptfObject) -> CaptfObject {
    let labels = [("team".to_string(), "platform".to_string())].into();
    match &mut obj {
        CaptfObject::MachineTemplate(o) => o.metadata.labels = Some(labels),
        CaptfObject::ClusterTemplate(o) => o.metadata.labels = Some(labels),
        CaptfObject::MachinePoolTemplate(o) => o.metadata.labels = Some(labels),
        _ => unreachable!("templates only"),
    }
    obj
}

#[test]
fn template_spec_is_immutable_but_metadata_is_editable() {
    let make: [fn(TerraformSpec) -> CaptfObject; 3] = [template, cluster_template, pool_template];
    for make in make {
        let old = make(spec());
        let kind = old.kind_name();
        // Metadata: editable.
        assert!(validate_update(&old, &with_label(old.clone())).is_valid(), "{kind}");
        // Any spec change, even a valid one: refused at `spec` with the contract's reason.
        let r = validate_update(
            &old,
            &make(with_source("git::https://example.com/modules/vpc.git?ref=v2")),
        );
        let v = r
            .violation_at("spec")
            .unwrap_or_else(|| panic!("{kind}: {}", r.message()));
        assert!(
            v.rule
                .starts_with("is immutable: a template cannot be changed in place"),
            "{kind}: {v}"
        );
        assert!(v.rule.contains("ClusterClass"), "{kind}: names the way out: {v}");
    }
    // The kinds that run Jobs are edited in place.
    assert!(
        validate_update(
            &cluster(spec()),
            &cluster(with_source("git::https://example.com/m.git?ref=v2"))
        )
        .is_valid()
    );
}

#[test]
fn template_metadata_and_spec_round_trip_through_json() {
    let v = json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "TerraformClusterTemplate",
        "metadata": {"name": "class-v1"},
        "spec": {"template": {
            "metadata": {"labels": {"team": "platform"}, "annotations": {"a": "b"}},
            "spec": {"module": {"source": "git::https://example.com/m.git"}, "controlPlaneEndpoint": {"host": "h", "port": 6443}}
        }}
    });
    let obj = CaptfObject::from_value(v.clone()).unwrap();
    assert_eq!(obj.spec_path(), "spec.template.spec");
    assert!(obj.is_template() && obj.job_kind().is_none());
    assert_eq!(obj.to_value()["spec"], v["spec"]);
}

#[test]
fn module_credentials_name_a_secret_by_a_dns1123_subdomain() {
    use captf_shared::types::{ModuleCredentials, SecretName};
    let with = |name: &str| {
        let mut s = spec();
        s.module.credentials = Some(ModuleCredentials {
            secret_ref: SecretName { name: name.into() },
        });
        s
    };
    for good in ["git-ssh", "a.b-c", &"a".repeat(63)] {
        accepted(with(good));
    }
    for bad in ["", "Git", "git_ssh", "-git", "a..b"] {
        let msg = rejected_at(with(bad), "spec.module.credentials.secretRef.name");
        assert!(msg.contains("DNS-1123 subdomain"), "{msg}");
    }
}

fn with_encryption(e: serde_json::Value) -> TerraformSpec {
    TerraformSpec {
        state_encryption: Some(serde_json::from_value(e).unwrap()),
        ..spec()
    }
}

#[test]
fn state_encryption_needs_opentofu_and_is_refused_with_the_terraform_binary() {
    accepted(with_encryption(json!({"passphraseSecretRef": {"name": "state-key"}})));
    for binary in [None, Some("tofu")] {
        let mut s = with_encryption(json!({"passphraseSecretRef": {"name": "state-key"}}));
        s.jobs = Some(serde_json::from_value(json!({"binary": binary})).unwrap());
        accepted(s);
    }
    let mut s = with_encryption(json!({"passphraseSecretRef": {"name": "state-key"}}));
    s.jobs = Some(serde_json::from_value(json!({"binary": "terraform"})).unwrap());
    let why = rejected_at(s, "spec.stateEncryption");
    assert!(
        why.contains("needs OpenTofu") && why.contains("Terraform has no client-side state encryption"),
        "{why}"
    );
}

#[test]
fn state_encryption_secret_references_are_secret_names_and_data_keys() {
    rejected_at(
        with_encryption(json!({"passphraseSecretRef": {"name": "Not_A_Name"}})),
        "spec.stateEncryption.passphraseSecretRef.name",
    );
    rejected_at(
        with_encryption(
            json!({"passphraseSecretRef": {"name": "ok"}, "previousPassphraseSecretRef": {"name": "ok2", "key": ".."}}),
        ),
        "spec.stateEncryption.previousPassphraseSecretRef.key",
    );
}

fn ready_at(obj: &mut CaptfObject, generation: i64, ready_generation: i64) {
    let CaptfObject::Cluster(c) = obj else { unreachable!() };
    c.metadata.generation = Some(generation);
    c.status = Some(
        serde_json::from_value(json!({"conditions": [{
            "type": "Ready", "status": "True", "reason": "ApplySucceeded", "message": "",
            "lastTransitionTime": "2026-12-01T00:00:00Z", "observedGeneration": ready_generation,
        }]}))
        .unwrap(),
    );
}

#[test]
fn state_encryption_is_removed_only_after_an_apply_with_mode_decrypt() {
    let plain = cluster(spec());
    // Encrypted: never removable, Ready or not.
    let mut old = cluster(with_encryption(
        json!({"passphraseSecretRef": {"name": "state-key"}, "mode": "Encrypt"}),
    ));
    ready_at(&mut old, 4, 4);
    let r = validate_update(&old, &plain);
    let v = r.violation_at("spec.stateEncryption").expect("refused");
    assert!(v.to_string().contains("set stateEncryption.mode to Decrypt"), "{v}");
    // Decrypt set but not applied yet (Ready at an older generation, or not Ready).
    let mut old = cluster(with_encryption(
        json!({"passphraseSecretRef": {"name": "state-key"}, "mode": "Decrypt"}),
    ));
    ready_at(&mut old, 5, 4);
    let r = validate_update(&old, &plain);
    let v = r.violation_at("spec.stateEncryption").expect("refused");
    assert!(v.to_string().contains("Ready with mode Decrypt (generation 5)"), "{v}");
    // Decrypt applied: Ready at the generation that set it.
    ready_at(&mut old, 5, 5);
    assert!(validate_update(&old, &plain).is_valid());
    // Turning it on, and keeping it, are always fine.
    assert!(validate_update(&plain, &old).is_valid());
    assert!(validate_update(&old, &old.clone()).is_valid());
}

#[test]
fn a_changed_passphrase_reference_must_name_the_one_before_as_previous() {
    let old = cluster(with_encryption(json!({"passphraseSecretRef": {"name": "key-1"}})));
    let bare = cluster(with_encryption(json!({"passphraseSecretRef": {"name": "key-2"}})));
    let r = validate_update(&old, &bare);
    let v = r
        .violation_at("spec.stateEncryption.previousPassphraseSecretRef")
        .expect("refused");
    assert!(
        v.to_string()
            .contains("must name the passphrase before (key-1/passphrase)"),
        "{v}"
    );
    let rotated = cluster(with_encryption(
        json!({"passphraseSecretRef": {"name": "key-2"}, "previousPassphraseSecretRef": {"name": "key-1", "key": "passphrase"}}),
    ));
    assert!(validate_update(&old, &rotated).is_valid());
    // While a rotation is under way, the state may still be under the one before that.
    let mid = cluster(with_encryption(
        json!({"passphraseSecretRef": {"name": "key-3"}, "previousPassphraseSecretRef": {"name": "key-1"}}),
    ));
    assert!(validate_update(&rotated, &mid).is_valid());
    // Same reference (the key spelled out as its default): no rotation, nothing to name.
    let same = cluster(with_encryption(
        json!({"passphraseSecretRef": {"name": "key-1", "key": "passphrase"}}),
    ));
    assert!(validate_update(&old, &same).is_valid());
}

fn cluster_exporting(exports: &[&str]) -> CaptfObject {
    CaptfObject::Cluster(TerraformCluster::new(
        "prod-eu",
        TerraformClusterSpec {
            terraform: spec(),
            control_plane_endpoint: None,
            exports: Some(exports.iter().map(|e| e.to_string()).collect()),
        },
    ))
}

#[test]
fn exports_are_distinct_output_names() {
    for good in [
        &[][..],
        &["vpc_id", "subnet_ids"],
        &["_private", "with-dash", "name_tag"],
    ] {
        let r = validate_create(&cluster_exporting(good));
        assert!(r.is_valid(), "{good:?}: {}", r.message());
    }
    let r = validate_create(&cluster_exporting(&["vpc_id", "1st", "vpc_id", "name", "a b"]));
    assert_eq!(
        r.violations.iter().map(|v| v.field.as_str()).collect::<Vec<_>>(),
        [
            "spec.exports[1]",
            "spec.exports[2]",
            "spec.exports[3]",
            "spec.exports[4]"
        ],
        "{}",
        r.message()
    );
    assert!(
        r.message()
            .contains("spec.exports[2]: must not repeat an earlier entry"),
        "{}",
        r.message()
    );
    assert!(r.message().contains("cluster_name"), "{}", r.message());
    let long = "a".repeat(129);
    assert!(!validate_create(&cluster_exporting(&[&long])).is_valid());
    assert!(validate_create(&cluster_exporting(&[&"a".repeat(128)])).is_valid());
    // 64 entries at most, counted before any is looked at.
    let names: Vec<String> = (0..65).map(|i| format!("o{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let r = validate_create(&cluster_exporting(&refs));
    assert_eq!(r.violations.len(), 1);
    assert_eq!(r.violations[0].field, "spec.exports");
    assert!(validate_create(&cluster_exporting(&refs[..64])).is_valid());
    // A change of the exports alone is checked on update.
    let r = validate_update(&cluster_exporting(&["vpc_id"]), &cluster_exporting(&["vpc_id", "name"]));
    assert_eq!(r.violations[0].field, "spec.exports[1]");
    // An update that leaves bad exports as they were is not refused for them.
    let old = cluster_exporting(&["name"]);
    assert!(validate_update(&old, &old.clone()).is_valid());
}

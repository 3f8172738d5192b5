//! Laws of validation and defaulting over many generated specs (proptest).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use captf_shared::defaults::{apply_defaults, apply_spec_defaults, effective};
use captf_shared::types::{
    CaptfObject, DeletionPolicy, DestructiveGuard, DriftSpec, EncryptionMode, GuardSpec, JobsSpec, ModuleSpec,
    Remediation, SecretKeyRef, StateEncryption, TerraformCluster, TerraformClusterSpec, TerraformMachine,
    TerraformMachineSpec, TerraformMachineTemplate, TerraformMachineTemplateResource, TerraformMachineTemplateSpec,
    TerraformSpec, VariablesFrom, VariablesRef,
};
use captf_shared::validation::{
    count_json_values, count_serialized_values, parse_object, validate_create, validate_update,
};
use k8s_openapi::api::core::v1::EnvVar;
use proptest::prelude::*;
use serde_json::Value;

// ---- arbitrary (mostly invalid) specs ----------------------------------------------------------

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn any_ref() -> impl Strategy<Value = Option<VariablesRef>> {
    prop::option::of((".{0,20}", prop::option::of(".{0,20}")).prop_map(|(name, key)| VariablesRef { name, key }))
}

fn any_key_ref() -> impl Strategy<Value = SecretKeyRef> {
    (".{0,20}", prop::option::of(".{0,20}")).prop_map(|(name, key)| SecretKeyRef { name, key })
}

/// A `StateEncryption` whose Secret references come from `key_ref`, with any mode.
fn encryption_of<S>(key_ref: impl Fn() -> S) -> impl Strategy<Value = StateEncryption>
where
    S: Strategy<Value = SecretKeyRef>,
{
    (
        key_ref(),
        prop::option::of(key_ref()),
        prop::option::of(prop::sample::select(vec![
            EncryptionMode::Encrypt,
            EncryptionMode::Decrypt,
        ])),
    )
        .prop_map(|(p, previous, mode)| StateEncryption {
            passphrase_secret_ref: p,
            previous_passphrase_secret_ref: previous,
            mode,
        })
}

fn any_encryption() -> impl Strategy<Value = StateEncryption> {
    encryption_of(any_key_ref)
}

fn valid_key_ref() -> impl Strategy<Value = SecretKeyRef> {
    (
        "[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?",
        prop::option::of("[A-Za-z0-9_-]{1,20}"),
    )
        .prop_map(|(name, key)| SecretKeyRef { name, key })
}

fn valid_encryption() -> impl Strategy<Value = StateEncryption> {
    encryption_of(valid_key_ref)
}

fn any_jobs() -> impl Strategy<Value = JobsSpec> {
    (
        prop::option::of(any::<i64>()),
        prop::option::of(any::<i64>()),
        prop::option::of(any::<i32>()),
        prop::option::of(any::<i32>()),
        prop::option::of(".{0,30}"),
        prop::option::of(".{0,30}"),
        prop::option::of(prop::collection::vec(".{0,12}", 0..4)),
    )
        .prop_map(|(deadline, lock, failed, succeeded, image, sa, env)| JobsSpec {
            active_deadline_seconds: deadline,
            lock_timeout_seconds: lock,
            failed_jobs_history_limit: failed,
            successful_jobs_history_limit: succeeded,
            image,
            service_account_name: sa,
            env: env.map(|names| {
                names
                    .into_iter()
                    .map(|name| EnvVar {
                        name,
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        })
}

fn remediation() -> impl Strategy<Value = Remediation> {
    prop_oneof![Just(Remediation::Auto), Just(Remediation::Manual)]
}

fn destructive() -> impl Strategy<Value = DestructiveGuard> {
    prop_oneof![Just(DestructiveGuard::Block), Just(DestructiveGuard::Allow)]
}

fn deletion() -> impl Strategy<Value = DeletionPolicy> {
    prop_oneof![Just(DeletionPolicy::Destroy), Just(DeletionPolicy::Orphan)]
}

fn any_interval() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,12}",
        "[0-9]{1,25}(ns|us|ms|s|m|h)",
        "[0-9.]{1,6}[hms][0-9]{0,3}[hms]?"
    ]
}

fn any_spec() -> impl Strategy<Value = TerraformSpec> {
    (
        ".{0,40}",
        prop::option::of(prop::collection::btree_map(".{0,10}", any_json(), 0..4)),
        prop::option::of(prop::collection::vec((any_ref(), any_ref()), 0..3)),
        prop::option::of(any_jobs()),
        prop::option::of((prop::option::of(any_interval()), prop::option::of(remediation()))),
        prop::option::of(prop::option::of(destructive())),
        prop::option::of(deletion()),
        prop::option::of(any::<bool>()),
        prop::option::of(any_encryption()),
    )
        .prop_map(
            |(source, variables, from, jobs, drift, guard, deletion_policy, paused, state_encryption)| TerraformSpec {
                module: ModuleSpec {
                    source,
                    ..Default::default()
                },
                variables,
                variables_from: from.map(|v| {
                    v.into_iter()
                        .map(|(secret_ref, config_map_ref)| VariablesFrom {
                            secret_ref,
                            config_map_ref,
                        })
                        .collect()
                }),
                jobs,
                drift: drift.map(|(interval, remediation)| DriftSpec { interval, remediation }),
                guard: guard.map(|destructive| GuardSpec {
                    destructive,
                    approval: None,
                    policy_refs: None,
                }),
                deletion_policy,
                paused,
                state_encryption,
            },
        )
}

// ---- specs whose set values are all valid ------------------------------------------------------

const SOURCES: [&str; 6] = [
    "hashicorp/consul/aws",
    "git::https://example.com/vpc.git?ref=v1",
    "github.com/org/repo//modules/x",
    "https://example.com/m.zip",
    "oci://registry.example.com/modules/vpc",
    "registry.example.com/ns/name/aws",
];

fn valid_ref() -> impl Strategy<Value = VariablesRef> {
    (
        "[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?(\\.[a-z0-9]{1,5})?",
        prop::option::of("[A-Za-z0-9_-][A-Za-z0-9._-]{0,10}"),
    )
        .prop_map(|(name, key)| VariablesRef { name, key })
}

fn valid_from() -> impl Strategy<Value = VariablesFrom> {
    (valid_ref(), any::<bool>()).prop_map(|(r, secret)| VariablesFrom {
        secret_ref: secret.then(|| r.clone()),
        config_map_ref: (!secret).then_some(r),
    })
}

fn valid_jobs() -> impl Strategy<Value = JobsSpec> {
    (
        prop::option::of(60i64..=604_800),
        prop::option::of(0.0f64..1.0),
        prop::option::of(0i32..=i32::MAX),
        prop::option::of(0i32..=i32::MAX),
        prop::option::of(prop::sample::select(vec![
            "runner",
            "ghcr.io/captf/runner:0.1.0",
            "localhost:5000/captf/runner@sha256:0123456789abcdef0123456789abcdef",
        ])),
        prop::option::of("[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?"),
        prop::option::of(prop::collection::vec("[A-BD-Z_][A-Z0-9_]{0,10}", 0..4)),
    )
        .prop_map(|(deadline, lock_fraction, failed, succeeded, image, sa, env)| {
            let effective_deadline = deadline.unwrap_or(3600);
            JobsSpec {
                active_deadline_seconds: deadline,
                // Any value in 0..deadline.
                lock_timeout_seconds: lock_fraction.map(|f| (f * effective_deadline as f64) as i64),
                failed_jobs_history_limit: failed,
                successful_jobs_history_limit: succeeded,
                image: image.map(str::to_string),
                service_account_name: sa,
                env: env.map(|names| {
                    names
                        .into_iter()
                        .map(|name| EnvVar {
                            name,
                            ..Default::default()
                        })
                        .collect()
                }),
                ..Default::default()
            }
        })
}

fn valid_interval() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("0".to_string()),
        (60u64..=604_800).prop_map(|s| format!("{s}s")),
        (1u64..=10_080).prop_map(|m| format!("{m}m")),
        (1u64..=167, 0u64..60).prop_map(|(h, m)| format!("{h}h{m}m")),
    ]
}

fn valid_spec() -> impl Strategy<Value = TerraformSpec> {
    (
        prop::sample::select(SOURCES.to_vec()),
        prop::option::of(prop::collection::btree_map(
            "[A-Za-z_][A-Za-z0-9_-]{0,10}",
            any_json(),
            0..4,
        )),
        prop::option::of(prop::collection::vec(valid_from(), 0..3)),
        prop::option::of(valid_jobs()),
        prop::option::of((prop::option::of(valid_interval()), prop::option::of(remediation()))),
        prop::option::of(prop::option::of(destructive())),
        prop::option::of(deletion()),
        prop::option::of(any::<bool>()),
        prop::option::of(valid_encryption()),
    )
        .prop_map(
            |(source, variables, variables_from, jobs, drift, guard, deletion_policy, paused, state_encryption)| {
                TerraformSpec {
                    module: ModuleSpec {
                        source: source.into(),
                        ..Default::default()
                    },
                    variables,
                    variables_from,
                    jobs,
                    drift: drift.map(|(interval, remediation)| DriftSpec { interval, remediation }),
                    guard: guard.map(|destructive| GuardSpec {
                        destructive,
                        approval: None,
                        policy_refs: None,
                    }),
                    deletion_policy,
                    paused,
                    state_encryption,
                }
            },
        )
}

/// The spec inside each of the four kinds.
fn every_kind(spec: TerraformSpec, provider_id: Option<String>) -> Vec<CaptfObject> {
    vec![
        CaptfObject::Cluster(TerraformCluster::new(
            "c",
            TerraformClusterSpec {
                terraform: spec.clone(),
                control_plane_endpoint: None,
                exports: None,
            },
        )),
        CaptfObject::Machine(TerraformMachine::new(
            "m",
            TerraformMachineSpec {
                terraform: spec.clone(),
                provider_id,
            },
        )),
        CaptfObject::MachinePool(captf_shared::types::TerraformMachinePool::new(
            "p",
            captf_shared::types::TerraformMachinePoolSpec {
                terraform: spec.clone(),
                provider_id_list: None,
            },
        )),
        CaptfObject::MachineTemplate(TerraformMachineTemplate::new(
            "t",
            TerraformMachineTemplateSpec {
                template: TerraformMachineTemplateResource {
                    metadata: None,
                    spec: TerraformMachineSpec {
                        terraform: spec,
                        provider_id: None,
                    },
                },
            },
        )),
    ]
}

/// Type and enum errors a spec can be given, each at a path below the spec.
const TYPE_ERRORS: [(&[&str], &str); 8] = [
    (&["deletionPolicy"], r#""Sometimes""#),
    (&["paused"], r#""yes""#),
    (&["drift", "remediation"], r#""Off""#),
    (&["guard", "destructive"], r#""Never""#),
    (&["jobs", "binary"], r#""bash""#),
    (&["jobs", "activeDeadlineSeconds"], r#""1h""#),
    (&["jobs", "failedJobsHistoryLimit"], "3.5"),
    (&["module", "source"], "42"),
];

/// `value` with `bad` planted at `at` below its Terraform spec (`spec_path`), objects made on the way.
fn plant(value: &mut Value, spec_path: &str, at: &[&str], bad: Value) {
    let mut here = value;
    for name in spec_path.split('.').chain(at.iter().copied()) {
        if !here.is_object() {
            *here = Value::Object(serde_json::Map::new());
        }
        here = here.as_object_mut().unwrap().entry(name).or_insert(Value::Null);
    }
    *here = bad;
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn validation_never_panics_and_every_violation_names_a_field_under_the_spec(
        spec in any_spec(),
        old in any_spec(),
        pid in prop::option::of(".{0,10}"),
        old_pid in prop::option::of(".{0,10}"),
    ) {
        for (obj, old_obj) in every_kind(spec, pid).into_iter().zip(every_kind(old, old_pid)) {
            let prefix = format!("{}.", obj.spec_path());
            let create = validate_create(&obj);
            for v in &create.violations {
                prop_assert!(v.field.starts_with(&prefix), "{}", v);
                prop_assert!(!v.rule.is_empty());
                prop_assert!(serde_json::from_str::<Value>(&v.value).is_ok() || v.value.ends_with('…'), "{}", v);
                prop_assert!(!v.to_string().contains('\n'), "one line: {}", v);
            }
            let update = validate_update(&old_obj, &obj);
            prop_assert!(update.violations.len() >= create.violations.len() || old_obj.terraform_spec() == obj.terraform_spec());
        }
    }

    #[test]
    fn a_spec_whose_set_values_are_valid_validates_before_and_after_defaults(spec in valid_spec()) {
        for mut obj in every_kind(spec, Some("p-1".into())) {
            let before = validate_create(&obj);
            prop_assert!(before.is_valid(), "{}", before.message());
            apply_defaults(&mut obj);
            let after = validate_create(&obj);
            prop_assert!(after.is_valid(), "{}", after.message());
            prop_assert_eq!(before.warnings, after.warnings, "defaults add no doubtful values");
        }
    }

    #[test]
    fn counting_a_typed_spec_gives_the_count_of_its_json_text(spec in any_spec()) {
        let text = serde_json::to_string(&spec).unwrap();
        let n = count_json_values(&text, usize::MAX);
        prop_assert!(n.is_some_and(|n| n > 0));
        prop_assert_eq!(count_serialized_values(&spec, usize::MAX), n);
        // Past a limit below the count, both stop.
        let below = n.unwrap() - 1;
        prop_assert_eq!(count_serialized_values(&spec, below), None);
        prop_assert_eq!(count_json_values(&text, below), None);
        // A kind's spec holds the Terraform spec flattened among its own fields.
        let machine = TerraformMachineSpec { terraform: spec, provider_id: Some("p-1".into()) };
        let text = serde_json::to_string(&machine).unwrap();
        prop_assert_eq!(count_serialized_values(&machine, usize::MAX), count_json_values(&text, usize::MAX));
    }

    #[test]
    fn apply_defaults_is_idempotent_and_keeps_the_effective_spec(spec in any_spec()) {
        let mut once = spec.clone();
        apply_spec_defaults(&mut once);
        let mut twice = once.clone();
        apply_spec_defaults(&mut twice);
        prop_assert_eq!(&once, &twice);
        // The webhook's defaults and the controller's effective view agree.
        prop_assert_eq!(effective(&spec), effective(&once));
        // Defaults never turn a valid spec invalid, nor an invalid one valid.
        // (A derived default may add a second violation to an invalid deadline, so compare validity.)
        prop_assert_eq!(
            validate_create(&every_kind(spec, None).remove(0)).is_valid(),
            validate_create(&every_kind(once, None).remove(0)).is_valid()
        );
    }

    #[test]
    fn parse_object_never_panics_and_a_failure_always_names_a_field(
        spec in prop::collection::btree_map(
            prop::sample::select(vec!["module", "variables", "variablesFrom", "jobs", "drift", "guard",
                "deletionPolicy", "paused", "controlPlaneEndpoint", "providerID", "template"]),
            any_json(),
            0..6,
        ),
        kind in prop::sample::select(vec!["TerraformCluster", "TerraformMachinePool", "TerraformMachine",
            "TerraformMachineTemplate"]),
    ) {
        let value = serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": kind,
            "metadata": {"name": "x"},
            "spec": spec.into_iter().collect::<BTreeMap<_, _>>(),
        });
        match parse_object(kind, &value) {
            Ok(obj) => {
                let _ = validate_create(&obj);
            }
            Err(report) => {
                prop_assert!(!report.violations.is_empty());
                for v in &report.violations {
                    prop_assert!(!v.field.is_empty());
                }
            }
        }
    }
    /// A type or enum error never hides another violation: every violation the spec had without
    /// it is still in the answer, except those at (or below, or naming) the field now broken.
    #[test]
    fn adding_a_type_error_never_removes_the_other_violations(
        spec in any_spec(),
        pick in 0..TYPE_ERRORS.len(),
    ) {
        for obj in every_kind(spec.clone(), None) {
            let kind = obj.kind_name();
            let value = obj.to_value();
            let Ok(parsed) = parse_object(kind, &value) else {
                continue;
            };
            let before = validate_create(&parsed);
            prop_assume!(before.omitted_violations == 0);
            let (at, bad) = TYPE_ERRORS[pick];
            let broken_field = format!("{}.{}", obj.spec_path(), at.join("."));
            let mut broken = value.clone();
            plant(&mut broken, obj.spec_path(), at, serde_json::from_str(bad).unwrap());
            let answer = parse_object(kind, &broken).expect_err("a type error does not parse");
            prop_assert!(
                answer.violations.iter().any(|v| v.field == broken_field),
                "the type error itself is reported at {}: {}", broken_field, answer.message()
            );
            for v in &before.violations {
                let hidden_by_design = v.field == broken_field
                    || v.field.starts_with(&format!("{broken_field}."))
                    || v.field.starts_with(&format!("{broken_field}["))
                    || v.rule.contains(&broken_field);
                if !hidden_by_design {
                    prop_assert!(
                        answer.violations.contains(v),
                        "{} is missing from the answer once {} is broken: {}", v, broken_field, answer.message()
                    );
                }
            }
        }
    }
}

//! What a tenant may choose for the runner pods the controller creates: the platform team's
//! policy (chart values → the webhook's and the controller's flags, one set of them declared
//! once: `TenantPolicyArgs`, with the `cli` feature). The webhook rejects a spec outside it;
//! the controller checks again before it creates a Job (`Ready=False/PolicyViolation`, no Job),
//! because whoever may change the webhook configuration can bypass the webhook.
//!
//! The pod runs with the controller's authority to create Jobs, so each choice is a right:
//! - `spec.jobs.image`: which code runs with the runner's token and the inputs;
//! - `spec.jobs.serviceAccountName`: which rights that code has;
//! - every other Secret the spec names for the pod (`crate::references::secret_references`):
//!   `spec.jobs.env[].valueFrom.secretKeyRef`, `spec.jobs.envFrom[].secretRef`, Secret, projected
//!   and CSI volumes, `spec.module.credentials.secretRef` and the `spec.stateEncryption`
//!   passphrases: which Secrets of the namespace it reads (the module's code runs in the same pod,
//!   so it can read them too; one switch, `env_from_secrets`, for all of them);
//! - `spec.variablesFrom[].secretRef`: which Secrets the controller copies into the object's
//!   inputs for it (`variables_from_secrets`).
//!
//! Whatever the policy, no reference may name a Secret that is CAPTF's own
//! ([`crate::references`]).

use std::fmt;

use crate::types::{CaptfObject, JobsSpec, TerraformSpec};

#[cfg(feature = "cli")]
mod args;
#[cfg(feature = "cli")]
pub use args::{DEFAULT_RUNNER_IMAGE, TenantPolicyArgs, flag_text, parse_flag_text};

/// The platform team's limits on what a spec may choose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantPolicy {
    /// Image prefixes `spec.jobs.image` may start with (at a `/`, `:` or `@` boundary, or the
    /// whole image); `*` allows any image. Empty: `spec.jobs.image` may not be set.
    pub runner_image_prefixes: Vec<String>,
    /// Names `spec.jobs.serviceAccountName` may be; `*` allows any. Empty: it may not be set.
    pub runner_service_accounts: Vec<String>,
    /// Whether the runner pod may read Secrets the spec names: `spec.jobs.env[].valueFrom.secretKeyRef`,
    /// `spec.jobs.envFrom[].secretRef`, Secret, projected and CSI volumes, module credentials and
    /// state encryption passphrases.
    pub env_from_secrets: bool,
    /// Whether `spec.variablesFrom[].secretRef` may name Secrets (the controller reads them and
    /// writes their values into the object's inputs, which the runner reads).
    pub variables_from_secrets: bool,
    /// Names `spec.jobs.priorityClassName` may be; `*` allows any. Empty: it may not be set.
    /// Whatever this says, `system-` classes (`system-node-critical`, `system-cluster-critical`)
    /// are refused: they let a runner preempt or outlast the node's own critical pods.
    pub priority_classes: Vec<String>,
    /// Whether runner pods may be placed on control-plane nodes: tolerations of the
    /// control-plane taints or of every taint (an empty key with `Exists`), and node selectors or
    /// node affinity choosing control-plane nodes.
    pub control_plane_placement: bool,
}

impl TenantPolicy {
    /// No limits (what the webhook library does unless told otherwise; the binaries' flags,
    /// `TenantPolicyArgs`, default to the restrictive [`TenantPolicy::only_defaults`] of the
    /// release's runner image and no service account).
    pub fn unrestricted() -> Self {
        TenantPolicy {
            runner_image_prefixes: vec!["*".into()],
            runner_service_accounts: vec!["*".into()],
            env_from_secrets: true,
            variables_from_secrets: true,
            priority_classes: vec!["*".into()],
            control_plane_placement: true,
        }
    }

    /// Only the given runner image and runner ServiceAccount (which the controller uses when the
    /// spec leaves them unset) may be named; env and `variablesFrom` may read Secrets; any
    /// priority class but the `system-` ones; no control-plane placement.
    pub fn only_defaults(runner_image: &str, runner_service_account: &str) -> Self {
        TenantPolicy {
            runner_image_prefixes: vec![runner_image.to_string()],
            runner_service_accounts: vec![runner_service_account.to_string()],
            env_from_secrets: true,
            variables_from_secrets: true,
            priority_classes: vec!["*".into()],
            control_plane_placement: false,
        }
    }

    /// Every way `spec` leaves the policy; `prefix` is the path of the Terraform spec (`spec`,
    /// or `spec.template.spec` for a template).
    pub fn check_spec(&self, spec: &TerraformSpec, prefix: &str) -> Vec<Violation> {
        let mut out = vec![];
        // Every Secret the spec names goes through this one check, whatever field names it.
        let (variables, runner): (Vec<_>, Vec<_>) = crate::references::secret_references(spec, prefix)
            .into_iter()
            .partition(|r| r.field.starts_with(&format!("{prefix}.variablesFrom[")));
        let refuse = |out: &mut Vec<Violation>, refs: Vec<crate::references::SecretReference>, why: &str| {
            out.extend(refs.into_iter().map(|r| Violation {
                message: format!("{:?} {why}", r.name),
                field: r.field,
            }));
        };
        if !self.variables_from_secrets {
            refuse(
                &mut out,
                variables,
                "is a Secret read into the inputs, and the policy allows no variables from Secrets (a configMapRef may be used)",
            );
        }
        if let Some(jobs) = &spec.jobs {
            if let Some(image) = &jobs.image
                && !image_allowed(&self.runner_image_prefixes, image)
            {
                out.push(Violation {
                    field: format!("{prefix}.jobs.image"),
                    message: format!(
                        "image {image:?} is outside the runner image policy ({})",
                        describe(
                            &self.runner_image_prefixes,
                            "no image may be set; the controller's runner image is used"
                        )
                    ),
                });
            }
            if let Some(sa) = &jobs.service_account_name
                && sa.starts_with(OWN_RUNNER_ACCOUNT_PREFIX)
            {
                // Whatever the policy: these are the objects' own accounts, each able to touch one
                // object's state; naming one would run as another object.
                out.push(Violation {
                    field: format!("{prefix}.jobs.serviceAccountName"),
                    message: format!(
                        "service account {sa:?} is reserved: names starting with {OWN_RUNNER_ACCOUNT_PREFIX:?} are the \
                         runner accounts the controller makes for each object; leave serviceAccountName unset to run \
                         as this object's own"
                    ),
                });
            } else if let Some(sa) = &jobs.service_account_name
                && !self.runner_service_accounts.iter().any(|a| a == "*" || a == sa)
            {
                out.push(Violation {
                    field: format!("{prefix}.jobs.serviceAccountName"),
                    message: format!(
                        "service account {sa:?} is outside the runner service account policy ({})",
                        describe(
                            &self.runner_service_accounts,
                            "no service account may be set; the controller's runner service account is used"
                        )
                    ),
                });
            }
            self.check_placement(jobs, prefix, &mut out);
        }
        if !self.env_from_secrets {
            refuse(
                &mut out,
                runner,
                "is a Secret for the runner pod to read, and the policy lets runner pods read no Secret a spec names \
                 (env, envFrom, Secret volumes, module credentials, state encryption passphrases)",
            );
        }
        out
    }

    /// Where the runner pods may run and what they may preempt: `priorityClassName`,
    /// `tolerations`, `nodeSelector` and node affinity.
    fn check_placement(&self, jobs: &JobsSpec, prefix: &str, out: &mut Vec<Violation>) {
        if let Some(pc) = &jobs.priority_class_name {
            let field = format!("{prefix}.jobs.priorityClassName");
            if pc.starts_with(SYSTEM_PRIORITY_CLASS_PREFIX) {
                out.push(Violation {
                    field,
                    message: format!(
                        "priority class {pc:?} is reserved: {SYSTEM_PRIORITY_CLASS_PREFIX}* classes are for the cluster's critical pods, which a runner could preempt"
                    ),
                });
            } else if !self.priority_classes.iter().any(|a| a == "*" || a == pc) {
                out.push(Violation {
                    field,
                    message: format!(
                        "priority class {pc:?} is outside the runner priority class policy ({})",
                        describe(&self.priority_classes, "no priority class may be set")
                    ),
                });
            }
        }
        if self.control_plane_placement {
            return;
        }
        const WHY: &str = "and the policy allows no runner pods on control-plane nodes";
        for (i, t) in jobs.tolerations.iter().flatten().enumerate() {
            let key = t.key.as_deref().unwrap_or_default();
            let field = format!("{prefix}.jobs.tolerations[{i}]");
            if key.is_empty() && t.operator.as_deref() == Some("Exists") {
                out.push(Violation {
                    field,
                    message: format!(
                        "an empty key with operator Exists tolerates every taint, the control plane's included, {WHY}"
                    ),
                });
            } else if CONTROL_PLANE_NODE_KEYS.contains(&key) {
                out.push(Violation {
                    field,
                    message: format!("tolerates the control-plane taint {key:?}, {WHY}"),
                });
            }
        }
        for key in jobs.node_selector.iter().flatten().map(|(k, _)| k) {
            if CONTROL_PLANE_NODE_KEYS.contains(&key.as_str()) {
                out.push(Violation {
                    field: format!("{prefix}.jobs.nodeSelector[{key}]"),
                    message: format!("selects control-plane nodes, {WHY}"),
                });
            }
        }
        let node_affinity = jobs.affinity.as_ref().and_then(|a| a.node_affinity.as_ref());
        let required = node_affinity
            .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
            .map(|r| r.node_selector_terms.iter().collect::<Vec<_>>())
            .unwrap_or_default();
        let preferred = node_affinity
            .and_then(|n| n.preferred_during_scheduling_ignored_during_execution.as_ref())
            .map(|p| p.iter().map(|t| &t.preference).collect::<Vec<_>>())
            .unwrap_or_default();
        let terms = required
            .into_iter()
            .map(|t| ("requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms", t))
            .chain(
                preferred
                    .into_iter()
                    .map(|t| ("preferredDuringSchedulingIgnoredDuringExecution.preference", t)),
            );
        let mut counters = std::collections::BTreeMap::new();
        for (path, term) in terms {
            let n = counters.entry(path).or_insert(0usize);
            let at = *n;
            *n += 1;
            for (j, e) in term.match_expressions.iter().flatten().enumerate() {
                if CONTROL_PLANE_NODE_KEYS.contains(&e.key.as_str()) && matches!(e.operator.as_str(), "In" | "Exists") {
                    out.push(Violation {
                        field: format!("{prefix}.jobs.affinity.nodeAffinity.{path}[{at}].matchExpressions[{j}]"),
                        message: format!("selects control-plane nodes ({} {}), {WHY}", e.key, e.operator),
                    });
                }
            }
        }
    }

    /// [`TenantPolicy::check_spec`] of an object's Terraform spec.
    pub fn check(&self, object: &CaptfObject) -> Vec<Violation> {
        self.check_spec(object.terraform_spec(), object.spec_path())
    }
}

/// The prefix of each object's own runner ServiceAccount (`captf-runner-<suffix>`), which no
/// spec may name.
pub const OWN_RUNNER_ACCOUNT_PREFIX: &str = "captf-runner-";

/// Priority classes with this prefix are the cluster's own (`system-node-critical`,
/// `system-cluster-critical`); no spec may name one.
pub const SYSTEM_PRIORITY_CLASS_PREFIX: &str = "system-";

/// The node label and taint keys of control-plane nodes (kubeadm's, and the older `master`).
pub const CONTROL_PLANE_NODE_KEYS: [&str; 2] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];

/// One way a spec leaves the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The JSON path of the field (`spec.jobs.image`).
    pub field: String,
    /// What is wrong, naming the policy.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every violation, `; `-separated (for a condition message or an admission denial).
pub fn message(violations: &[Violation]) -> String {
    violations.iter().map(|v| v.to_string()).collect::<Vec<_>>().join("; ")
}

fn describe(allowed: &[String], none: &str) -> String {
    if allowed.is_empty() {
        none.to_string()
    } else {
        format!("allowed: {}", allowed.join(", "))
    }
}

/// Whether `image` starts with one of `prefixes` at a boundary: the whole image, or a prefix
/// that ends in `/`, `:` or `@` or is followed by one of them. So `ghcr.io/captf/runner` allows
/// `ghcr.io/captf/runner:1.0` and `ghcr.io/captf/runner@sha256:…` but not
/// `ghcr.io/captf/runner-evil:1.0`.
pub fn image_allowed(prefixes: &[String], image: &str) -> bool {
    prefixes.iter().any(|p| {
        if p == "*" {
            return true;
        }
        if p.is_empty() {
            return false;
        }
        match image.strip_prefix(p.as_str()) {
            None => false,
            Some("") => true,
            Some(rest) => p.ends_with(['/', ':', '@']) || rest.starts_with(['/', ':', '@']),
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::types::JobsSpec;
    use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, SecretKeySelector};
    use proptest::prelude::*;

    fn spec(jobs: JobsSpec) -> TerraformSpec {
        TerraformSpec {
            jobs: Some(jobs),
            ..TerraformSpec::default()
        }
    }

    fn policy() -> TenantPolicy {
        TenantPolicy::only_defaults("ghcr.io/captf/runner:0.1.0", "captf-runner")
    }

    #[test]
    fn image_outside_allowed_prefixes_is_rejected_naming_the_field() {
        let v = policy().check_spec(
            &spec(JobsSpec {
                image: Some("evil.example/miner:1".into()),
                ..JobsSpec::default()
            }),
            "spec",
        );
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].field, "spec.jobs.image");
        assert!(v[0].message.contains("runner image policy"), "{}", v[0]);
        assert!(v[0].message.contains("ghcr.io/captf/runner:0.1.0"), "{}", v[0]);
    }

    #[test]
    fn the_default_runner_image_and_an_unset_image_are_allowed() {
        let p = policy();
        assert!(p.check_spec(&TerraformSpec::default(), "spec").is_empty());
        assert!(p.check_spec(&spec(JobsSpec::default()), "spec").is_empty());
        let own = spec(JobsSpec {
            image: Some("ghcr.io/captf/runner:0.1.0".into()),
            ..JobsSpec::default()
        });
        assert!(p.check_spec(&own, "spec").is_empty());
    }

    #[test]
    fn a_prefix_matches_only_at_a_path_tag_or_digest_boundary() {
        let p = vec!["ghcr.io/captf/runner".to_string()];
        assert!(image_allowed(&p, "ghcr.io/captf/runner"));
        assert!(image_allowed(&p, "ghcr.io/captf/runner:1.0"));
        assert!(image_allowed(&p, "ghcr.io/captf/runner@sha256:abc"));
        assert!(image_allowed(&p, "ghcr.io/captf/runner/sub:1"));
        assert!(!image_allowed(&p, "ghcr.io/captf/runner-evil:1.0"));
        assert!(!image_allowed(&p, "ghcr.io/captf/runne"));
        let org = vec!["registry.corp/".to_string()];
        assert!(image_allowed(&org, "registry.corp/anything:1"));
        assert!(!image_allowed(&org, "registry.corpevil/x"));
    }

    #[test]
    fn no_prefixes_means_no_image_may_be_set_and_star_means_any() {
        let none = TenantPolicy {
            runner_image_prefixes: vec![],
            ..policy()
        };
        let any_image = spec(JobsSpec {
            image: Some("x".into()),
            ..JobsSpec::default()
        });
        let v = none.check_spec(&any_image, "spec");
        assert!(v[0].message.contains("no image may be set"), "{}", v[0]);
        assert!(TenantPolicy::unrestricted().check_spec(&any_image, "spec").is_empty());
    }

    #[test]
    fn service_account_outside_the_policy_is_rejected_naming_the_field() {
        let s = spec(JobsSpec {
            service_account_name: Some("cluster-admin-sa".into()),
            ..JobsSpec::default()
        });
        let v = policy().check_spec(&s, "spec.template.spec");
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].field, "spec.template.spec.jobs.serviceAccountName");
        assert!(v[0].message.contains("runner service account policy"), "{}", v[0]);
        let own = spec(JobsSpec {
            service_account_name: Some("captf-runner".into()),
            ..JobsSpec::default()
        });
        assert!(policy().check_spec(&own, "spec").is_empty());
    }

    #[test]
    fn no_spec_may_name_an_objects_own_runner_account_whatever_the_policy() {
        let s = spec(JobsSpec {
            service_account_name: Some("captf-runner-other-team-tc".into()),
            ..JobsSpec::default()
        });
        for p in [policy(), TenantPolicy::unrestricted()] {
            let v = p.check_spec(&s, "spec");
            assert_eq!(v.len(), 1, "{v:?}");
            assert_eq!(v[0].field, "spec.jobs.serviceAccountName");
            assert!(v[0].message.contains("reserved"), "{}", v[0]);
        }
    }

    fn secret_env() -> TerraformSpec {
        spec(JobsSpec {
            env: Some(vec![
                EnvVar {
                    name: "PLAIN".into(),
                    value: Some("v".into()),
                    ..EnvVar::default()
                },
                EnvVar {
                    name: "TOKEN".into(),
                    value_from: Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "other-teams-secret".into(),
                            key: "token".into(),
                            optional: None,
                        }),
                        ..EnvVarSource::default()
                    }),
                    ..EnvVar::default()
                },
            ]),
            ..JobsSpec::default()
        })
    }

    #[test]
    fn env_from_a_secret_is_rejected_when_the_policy_forbids_it() {
        let p = TenantPolicy {
            env_from_secrets: false,
            ..policy()
        };
        let v = p.check_spec(&secret_env(), "spec");
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].field, "spec.jobs.env[1].valueFrom.secretKeyRef");
        assert!(v[0].message.contains("other-teams-secret"), "{}", v[0]);
        assert!(
            policy().check_spec(&secret_env(), "spec").is_empty(),
            "allowed by default"
        );
    }

    #[test]
    fn env_from_secret_refs_and_secret_volumes_are_secret_reads_the_policy_may_forbid() {
        use k8s_openapi::api::core::v1::{
            ConfigMapEnvSource, EnvFromSource, ProjectedVolumeSource, SecretEnvSource, SecretProjection,
            SecretVolumeSource, ServiceAccountTokenProjection, Volume, VolumeProjection,
        };
        let s = spec(JobsSpec {
            env_from: Some(vec![
                EnvFromSource {
                    config_map_ref: Some(ConfigMapEnvSource {
                        name: "settings".into(),
                        optional: None,
                    }),
                    ..EnvFromSource::default()
                },
                EnvFromSource {
                    secret_ref: Some(SecretEnvSource {
                        name: "other-teams-secret".into(),
                        optional: None,
                    }),
                    ..EnvFromSource::default()
                },
            ]),
            volumes: Some(vec![
                Volume {
                    name: "creds".into(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some("cloud-creds".into()),
                        ..SecretVolumeSource::default()
                    }),
                    ..Volume::default()
                },
                Volume {
                    name: "token".into(),
                    projected: Some(ProjectedVolumeSource {
                        sources: Some(vec![
                            VolumeProjection {
                                service_account_token: Some(ServiceAccountTokenProjection {
                                    audience: Some("sts.amazonaws.com".into()),
                                    path: "token".into(),
                                    ..ServiceAccountTokenProjection::default()
                                }),
                                ..VolumeProjection::default()
                            },
                            VolumeProjection {
                                secret: Some(SecretProjection {
                                    name: "ca".into(),
                                    ..SecretProjection::default()
                                }),
                                ..VolumeProjection::default()
                            },
                        ]),
                        ..ProjectedVolumeSource::default()
                    }),
                    ..Volume::default()
                },
            ]),
            ..JobsSpec::default()
        });
        let p = TenantPolicy {
            env_from_secrets: false,
            ..policy()
        };
        let fields: Vec<String> = p.check_spec(&s, "spec").into_iter().map(|v| v.field).collect();
        assert_eq!(
            fields,
            [
                "spec.jobs.envFrom[1].secretRef",
                "spec.jobs.volumes[0].secret",
                "spec.jobs.volumes[1].projected.sources[1].secret",
            ],
            "the ConfigMap and the service account token are no Secret reads"
        );
        assert!(policy().check_spec(&s, "spec").is_empty(), "allowed by default");
    }

    #[test]
    fn variables_from_a_secret_is_refused_when_the_policy_forbids_it_and_a_config_map_never() {
        use crate::types::{VariablesFrom, VariablesRef};
        let s = TerraformSpec {
            variables_from: Some(vec![
                VariablesFrom {
                    config_map_ref: Some(VariablesRef {
                        name: "settings".into(),
                        key: None,
                    }),
                    secret_ref: None,
                },
                VariablesFrom {
                    secret_ref: Some(VariablesRef {
                        name: "other-teams-secret".into(),
                        key: None,
                    }),
                    config_map_ref: None,
                },
            ]),
            ..TerraformSpec::default()
        };
        let p = TenantPolicy {
            variables_from_secrets: false,
            ..policy()
        };
        let v = p.check_spec(&s, "spec.template.spec");
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].field, "spec.template.spec.variablesFrom[1].secretRef");
        assert!(v[0].message.contains("other-teams-secret"), "{}", v[0]);
        assert!(policy().check_spec(&s, "spec").is_empty(), "allowed by default");
        let env_only = TenantPolicy {
            env_from_secrets: false,
            ..policy()
        };
        assert!(
            env_only.check_spec(&s, "spec").is_empty(),
            "the env switch does not cover variablesFrom: each has its own"
        );
    }

    fn jobs(json: serde_json::Value) -> TerraformSpec {
        spec(serde_json::from_value(json).unwrap())
    }

    /// With both Secret switches off, a module could still read any Secret of the namespace by
    /// naming it as the previous state passphrase (or as module credentials, or a CSI volume's
    /// publish Secret): every Secret reference goes through the one check.
    #[test]
    fn state_encryption_module_credentials_and_csi_secrets_are_secret_reads_the_policy_may_forbid() {
        let s: TerraformSpec = serde_json::from_value(serde_json::json!({
            "module": {"source": "git::ssh://git@example.com/m.git", "credentials": {"secretRef": {"name": "git-key"}}},
            "stateEncryption": {
                "passphraseSecretRef": {"name": "passphrase"},
                "previousPassphraseSecretRef": {"name": "db-password", "key": "password"},
            },
            "jobs": {"volumes": [{"name": "v", "csi": {"driver": "x", "nodePublishSecretRef": {"name": "cloud-creds"}}}]},
        }))
        .unwrap();
        let closed = TenantPolicy {
            env_from_secrets: false,
            variables_from_secrets: false,
            ..policy()
        };
        let v = closed.check_spec(&s, "spec");
        let fields: Vec<&str> = v.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.module.credentials.secretRef",
                "spec.jobs.volumes[0].csi.nodePublishSecretRef",
                "spec.stateEncryption.passphraseSecretRef",
                "spec.stateEncryption.previousPassphraseSecretRef",
            ]
        );
        assert!(v[3].message.contains("\"db-password\""), "{}", v[3]);
        assert!(policy().check_spec(&s, "spec").is_empty(), "allowed by default");
    }

    #[test]
    fn system_priority_classes_are_refused_whatever_the_policy_and_others_by_the_list() {
        let critical = jobs(serde_json::json!({"priorityClassName": "system-node-critical"}));
        for p in [policy(), TenantPolicy::unrestricted()] {
            let v = p.check_spec(&critical, "spec");
            assert_eq!(v.len(), 1, "{v:?}");
            assert_eq!(v[0].field, "spec.jobs.priorityClassName");
            assert!(v[0].message.contains("reserved"), "{}", v[0]);
        }
        let batch = jobs(serde_json::json!({"priorityClassName": "batch-low"}));
        assert!(
            policy().check_spec(&batch, "spec").is_empty(),
            "any other class by default"
        );
        let listed = TenantPolicy {
            priority_classes: vec!["infra-high".into()],
            ..policy()
        };
        let v = listed.check_spec(&batch, "spec");
        assert!(v[0].message.contains("allowed: infra-high"), "{}", v[0]);
        let none = TenantPolicy {
            priority_classes: vec![],
            ..policy()
        };
        assert!(
            none.check_spec(&batch, "spec")[0]
                .message
                .contains("no priority class may be set")
        );
    }

    #[test]
    fn tolerating_every_taint_or_choosing_control_plane_nodes_is_refused_unless_the_policy_allows_it() {
        let s = jobs(serde_json::json!({
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"},
                {"operator": "Exists"},
                {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node-role.kubernetes.io/master", "operator": "Exists"},
            ],
            "nodeSelector": {"kubernetes.io/os": "linux", "node-role.kubernetes.io/control-plane": ""},
            "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [
                        {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"},
                        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
                    ]},
                ]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [
                        {"key": "node-role.kubernetes.io/master", "operator": "In", "values": [""]},
                    ]}},
                ],
            }},
        }));
        let fields: Vec<String> = policy().check_spec(&s, "spec").into_iter().map(|v| v.field).collect();
        assert_eq!(
            fields,
            [
                "spec.jobs.tolerations[1]",
                "spec.jobs.tolerations[2]",
                "spec.jobs.tolerations[3]",
                "spec.jobs.nodeSelector[node-role.kubernetes.io/control-plane]",
                "spec.jobs.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[1]",
                "spec.jobs.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution.preference[0].matchExpressions[0]",
            ],
            "a dedicated-node toleration, an OS selector and steering away from the control plane are fine"
        );
        let allowed = TenantPolicy {
            control_plane_placement: true,
            ..policy()
        };
        assert!(allowed.check_spec(&s, "spec").is_empty());
    }

    #[test]
    fn the_message_joins_every_violation_with_its_field() {
        let p = TenantPolicy {
            runner_image_prefixes: vec![],
            runner_service_accounts: vec![],
            env_from_secrets: false,
            variables_from_secrets: false,
            priority_classes: vec![],
            control_plane_placement: false,
        };
        let mut s = secret_env();
        if let Some(j) = s.jobs.as_mut() {
            j.image = Some("i".into());
            j.service_account_name = Some("sa".into());
        }
        let m = message(&p.check_spec(&s, "spec"));
        assert!(m.starts_with("spec.jobs.image: "), "{m}");
        assert!(m.contains("; spec.jobs.serviceAccountName: "), "{m}");
        assert!(m.contains("; spec.jobs.env[1].valueFrom.secretKeyRef: "), "{m}");
    }

    proptest! {
        /// An image is always allowed by a policy that lists it exactly, and never by one whose
        /// only prefix is the image with more characters that are not a boundary.
        #[test]
        fn an_image_is_allowed_by_itself_and_not_by_a_longer_name(
            image in "[a-z0-9.]{1,12}(/[a-z0-9-]{1,8}){0,2}(:[a-z0-9.]{1,6})?",
            more in "[a-z0-9-]{1,4}",
        ) {
            prop_assert!(image_allowed(std::slice::from_ref(&image), &image));
            let longer = format!("{image}{more}");
            prop_assert!(!image_allowed(std::slice::from_ref(&longer), &image));
        }

        /// The unrestricted policy accepts every spec.
        #[test]
        fn the_unrestricted_policy_accepts_any_image_and_account(
            image in "\\PC{0,30}",
            sa in "[a-z0-9-]{1,20}",
        ) {
            let s = spec(JobsSpec {
                image: Some(image),
                service_account_name: Some(sa),
                ..JobsSpec::default()
            });
            prop_assert!(TenantPolicy::unrestricted().check_spec(&s, "spec").is_empty());
        }
    }
}

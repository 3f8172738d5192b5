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
//!   inputs for it (`variables_from_secrets`);
//! - `spec.jobs.priorityClassName`, `tolerations`, `nodeSelector` and `affinity`: which pods it
//!   may preempt and which nodes it may aim at. Each is an allowlist ([`TenantPolicy::check_spec`]
//!   refuses what is not on it), so a key the list does not name (a node's hostname, the etcd or
//!   `CriticalAddonsOnly` taint, a taint that appears in a later release) is refused without the
//!   policy having to know it.
//!
//! Whatever the policy, no reference may name a Secret that is CAPTF's own
//! ([`crate::references`]).

use std::fmt;

use k8s_openapi::api::core::v1::{PodAffinityTerm, WeightedPodAffinityTerm};

use crate::types::{CaptfObject, JobsSpec, TerraformSpec};

#[cfg(feature = "cli")]
mod args;
#[cfg(feature = "cli")]
pub use args::{DEFAULT_RUNNER_IMAGE, TenantPolicyArgs, flag_text, parse_flag_text, parse_namespace};

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
    /// Node label keys `spec.jobs.nodeSelector` and the `matchExpressions` of
    /// `spec.jobs.affinity.nodeAffinity` may name, whatever the operator; `*` allows any. Empty:
    /// no node may be chosen by label. A key that names one node (`kubernetes.io/hostname`) or a
    /// node's role (`node-role.kubernetes.io/control-plane`) lets a spec aim its runner, and the
    /// module's code, at that node.
    pub node_label_keys: Vec<String>,
    /// Whether the node affinity terms of `spec.jobs.affinity.nodeAffinity` may use
    /// `matchFields`, which choose nodes by name (`metadata.name`).
    pub node_match_fields: bool,
    /// Taint keys `spec.jobs.tolerations` may name; `*` allows any, and is the only entry that
    /// allows a toleration with an empty key (which, with `Exists`, tolerates every taint).
    /// Empty: no toleration may be set. A taint keeps pods off nodes kept for others: the control
    /// plane (`node-role.kubernetes.io/control-plane`, `node-role.kubernetes.io/etcd`), the
    /// cluster's critical add-ons (`CriticalAddonsOnly`), another team's dedicated nodes.
    pub toleration_keys: Vec<String>,
    /// Whether the pod affinity and anti-affinity terms of `spec.jobs.affinity` may reach pods of
    /// other namespaces (`namespaces`, `namespaceSelector`). Without them a term means the pods of
    /// the object's own namespace, which its tenant runs anyway; with them, a runner could follow
    /// the control plane's pods (`kube-system`) onto their node, or steer off every other node
    /// until only that one is left.
    pub cross_namespace_pod_affinity: bool,
    /// Whether a spec may let every plan through without approval (`spec.guard.approval: Never`,
    /// or its older spelling `spec.guard.destructive: Allow`).
    pub approval_never: bool,
    /// The most approvers `captf.io/approvals-required` may ask for (at least 1, at most
    /// [`crate::keys::MAX_APPROVALS_REQUIRED`]).
    pub max_approvals_required: u32,
}

/// How many approvers an object may ask for unless the platform team says otherwise
/// (`--max-approvals-required`).
pub const DEFAULT_MAX_APPROVALS_REQUIRED: u32 = 3;

/// The node label keys a spec may choose nodes by unless the platform team lists others
/// (`--allowed-runner-node-label-keys`): where a node is, what it runs and what kind of machine
/// it is, none of which names one node or its role. `iam.gke.io/gke-metadata-server-enabled`
/// keeps a runner on GKE nodes whose metadata server hides the node's own credentials.
pub const DEFAULT_NODE_LABEL_KEYS: [&str; 6] = [
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "iam.gke.io/gke-metadata-server-enabled",
];

/// The taint keys a spec may tolerate unless the platform team lists others
/// (`--allowed-runner-toleration-keys`): the node lifecycle controller's taints of a node that
/// stopped answering, which every pod tolerates for 300 s anyway; tolerating them only changes
/// how long a runner stays on such a node.
pub const DEFAULT_TOLERATION_KEYS: [&str; 2] = ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"];

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
            node_label_keys: vec!["*".into()],
            node_match_fields: true,
            toleration_keys: vec!["*".into()],
            cross_namespace_pod_affinity: true,
            approval_never: true,
            max_approvals_required: crate::keys::MAX_APPROVALS_REQUIRED,
        }
    }

    /// Only the given runner image and runner ServiceAccount (which the controller uses when the
    /// spec leaves them unset) may be named; env and `variablesFrom` may read Secrets; no
    /// priority class; nodes chosen only by [`DEFAULT_NODE_LABEL_KEYS`], no `matchFields`; only
    /// [`DEFAULT_TOLERATION_KEYS`] tolerated; pod affinity only within the object's namespace.
    pub fn only_defaults(runner_image: &str, runner_service_account: &str) -> Self {
        TenantPolicy {
            runner_image_prefixes: vec![runner_image.to_string()],
            runner_service_accounts: vec![runner_service_account.to_string()],
            env_from_secrets: true,
            variables_from_secrets: true,
            priority_classes: vec![],
            node_label_keys: DEFAULT_NODE_LABEL_KEYS.map(String::from).to_vec(),
            node_match_fields: false,
            toleration_keys: DEFAULT_TOLERATION_KEYS.map(String::from).to_vec(),
            cross_namespace_pod_affinity: false,
            approval_never: false,
            max_approvals_required: DEFAULT_MAX_APPROVALS_REQUIRED,
        }
    }

    /// Every way `spec` leaves the policy; `prefix` is the path of the Terraform spec (`spec`,
    /// or `spec.template.spec` for a template).
    pub fn check_spec(&self, spec: &TerraformSpec, prefix: &str) -> Vec<Violation> {
        let mut out = vec![];
        // Every Secret the spec names goes through this one check, whatever field names it.
        let (variables, runner): (Vec<_>, Vec<_>) = crate::references::secret_references(spec, prefix)
            .into_iter()
            .partition(|r| r.reader == crate::references::Reader::Controller);
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
        if !self.approval_never
            && let Some(g) = &spec.guard
            && g.mode() == crate::types::ApprovalMode::Never
        {
            let field = match g.approval {
                Some(_) => "approval",
                None => "destructive",
            };
            out.push(Violation {
                field: format!("{prefix}.guard.{field}"),
                message: "lets every plan through without a person's approval, and the approval policy does not allow \
                          that (--allow-approval-never); use approval Destructive or Always"
                    .to_string(),
            });
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
    /// `tolerations`, `nodeSelector`, node affinity and pod (anti-)affinity. Every key is held to
    /// an allowlist, so what the list does not name is refused, however the spec names it.
    fn check_placement(&self, jobs: &JobsSpec, prefix: &str, out: &mut Vec<Violation>) {
        let mut refuse = |field: String, message: String| {
            out.push(Violation {
                field: format!("{prefix}.jobs.{field}"),
                message,
            })
        };
        if let Some(pc) = &jobs.priority_class_name {
            if pc.starts_with(SYSTEM_PRIORITY_CLASS_PREFIX) {
                refuse(
                    "priorityClassName".into(),
                    format!(
                        "priority class {pc:?} is reserved: {SYSTEM_PRIORITY_CLASS_PREFIX}* classes are for the cluster's critical pods, which a runner could preempt"
                    ),
                );
            } else if !allowed(&self.priority_classes, pc) {
                refuse(
                    "priorityClassName".into(),
                    format!(
                        "priority class {pc:?} is outside the runner priority class policy ({})",
                        describe(&self.priority_classes, "no priority class may be set")
                    ),
                );
            }
        }
        for (i, t) in jobs.tolerations.iter().flatten().enumerate() {
            let key = t.key.as_deref().unwrap_or_default();
            let tolerations = describe(&self.toleration_keys, "no toleration may be set");
            if key.is_empty() && !self.toleration_keys.iter().any(|k| k == "*") {
                refuse(
                    format!("tolerations[{i}]"),
                    format!(
                        "an empty key (with operator Exists) tolerates every taint, the control plane's included, \
                         and the runner toleration policy allows that only with \"*\" ({tolerations})"
                    ),
                );
            } else if !key.is_empty() && !allowed(&self.toleration_keys, key) {
                refuse(
                    format!("tolerations[{i}]"),
                    format!("taint key {key:?} is outside the runner toleration policy ({tolerations})"),
                );
            }
        }
        let labels = || describe(&self.node_label_keys, "no node may be chosen by label");
        for key in jobs.node_selector.iter().flatten().map(|(k, _)| k) {
            if !allowed(&self.node_label_keys, key) {
                refuse(
                    format!("nodeSelector[{key}]"),
                    format!(
                        "node label key {key:?} is outside the runner node label policy ({})",
                        labels()
                    ),
                );
            }
        }
        let affinity = jobs.affinity.as_ref();
        let node_affinity = affinity.and_then(|a| a.node_affinity.as_ref());
        let required = node_affinity
            .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
            .map(|r| r.node_selector_terms.as_slice())
            .unwrap_or_default();
        let preferred = node_affinity
            .and_then(|n| n.preferred_during_scheduling_ignored_during_execution.as_deref())
            .unwrap_or_default();
        let terms = required
            .iter()
            .enumerate()
            .map(|(i, t)| {
                (
                    format!(
                        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
                    ),
                    t,
                )
            })
            .chain(preferred.iter().enumerate().map(|(i, t)| {
                (
                    format!("affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"),
                    &t.preference,
                )
            }));
        for (path, term) in terms {
            for (j, e) in term.match_expressions.iter().flatten().enumerate() {
                if !allowed(&self.node_label_keys, &e.key) {
                    refuse(
                        format!("{path}.matchExpressions[{j}]"),
                        format!(
                            "node label key {:?} ({}) is outside the runner node label policy ({})",
                            e.key,
                            e.operator,
                            labels()
                        ),
                    );
                }
            }
            if !self.node_match_fields {
                for (j, f) in term.match_fields.iter().flatten().enumerate() {
                    refuse(
                        format!("{path}.matchFields[{j}]"),
                        format!(
                            "chooses nodes by the field {:?} ({}), and the runner node policy allows no matchFields \
                             (they choose nodes by name): choose by node label ({})",
                            f.key,
                            f.operator,
                            labels()
                        ),
                    );
                }
            }
        }
        if self.cross_namespace_pod_affinity {
            return;
        }
        let pod_affinity = affinity.and_then(|a| a.pod_affinity.as_ref());
        let pod_anti_affinity = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
        let terms = pod_affinity_terms(
            "podAffinity",
            pod_affinity.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()),
            pod_affinity.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref()),
        )
        .into_iter()
        .chain(pod_affinity_terms(
            "podAntiAffinity",
            pod_anti_affinity.and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref()),
            pod_anti_affinity.and_then(|a| a.preferred_during_scheduling_ignored_during_execution.as_ref()),
        ));
        const OWN: &str = "and the runner pod affinity policy allows terms only over the pods of the object's own \
                           namespace: leave namespaces and namespaceSelector unset, which means that namespace";
        for (path, term) in terms {
            if let Some(namespaces) = term.namespaces.as_ref().filter(|n| !n.is_empty()) {
                refuse(
                    format!("{path}.namespaces"),
                    format!("names the namespaces {namespaces:?}, {OWN}"),
                );
            }
            if term.namespace_selector.is_some() {
                refuse(
                    format!("{path}.namespaceSelector"),
                    format!("chooses namespaces by label (an empty selector: every namespace), {OWN}"),
                );
            }
        }
    }

    /// [`TenantPolicy::check_spec`] of an object's Terraform spec.
    pub fn check(&self, object: &CaptfObject) -> Vec<Violation> {
        self.check_spec(object.terraform_spec(), object.spec_path())
    }
}

/// The prefix of each object's own runner ServiceAccount, which no spec may name.
pub use crate::runner_identity::OWN_RUNNER_ACCOUNT_PREFIX;

/// Priority classes with this prefix are the cluster's own (`system-node-critical`,
/// `system-cluster-critical`); no spec may name one.
pub const SYSTEM_PRIORITY_CLASS_PREFIX: &str = "system-";

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

/// The required and preferred terms of a `podAffinity` or `podAntiAffinity` (`kind`), each with
/// its path under `jobs`.
fn pod_affinity_terms<'a>(
    kind: &str,
    required: Option<&'a Vec<PodAffinityTerm>>,
    preferred: Option<&'a Vec<WeightedPodAffinityTerm>>,
) -> Vec<(String, &'a PodAffinityTerm)> {
    let required = required.into_iter().flatten().enumerate().map(|(i, t)| {
        (
            format!("affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"),
            t,
        )
    });
    let preferred = preferred.into_iter().flatten().enumerate().map(|(i, t)| {
        (
            format!("affinity.{kind}.preferredDuringSchedulingIgnoredDuringExecution[{i}].podAffinityTerm"),
            &t.pod_affinity_term,
        )
    });
    required.chain(preferred).collect()
}

/// Whether `list` allows `name`: names it, or holds `*`.
fn allowed(list: &[String], name: &str) -> bool {
    list.iter().any(|a| a == "*" || a == name)
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
        let system_listed = TenantPolicy {
            priority_classes: vec!["system-node-critical".into()],
            ..policy()
        };
        for p in [policy(), TenantPolicy::unrestricted(), system_listed] {
            let v = p.check_spec(&critical, "spec");
            assert_eq!(v.len(), 1, "{v:?}");
            assert_eq!(v[0].field, "spec.jobs.priorityClassName");
            assert!(v[0].message.contains("reserved"), "{}", v[0]);
        }
        let batch = jobs(serde_json::json!({"priorityClassName": "batch-low"}));
        let listed = TenantPolicy {
            priority_classes: vec!["infra-high".into(), "batch-low".into()],
            ..policy()
        };
        assert!(listed.check_spec(&batch, "spec").is_empty(), "a listed class");
        let any = TenantPolicy {
            priority_classes: vec!["*".into()],
            ..policy()
        };
        assert!(any.check_spec(&batch, "spec").is_empty(), "`*`: any but system-");
    }

    /// The attack: a class the platform team keeps for its own workloads (`platform-critical`)
    /// lets a runner preempt them. Only listed classes may be named, and by default none.
    #[test]
    fn a_priority_class_outside_the_allowlist_is_refused() {
        let s = jobs(serde_json::json!({"priorityClassName": "platform-critical"}));
        let v = policy().check_spec(&s, "spec");
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].field, "spec.jobs.priorityClassName");
        assert!(v[0].message.contains("no priority class may be set"), "{}", v[0]);
        let listed = TenantPolicy {
            priority_classes: vec!["batch-low".into()],
            ..policy()
        };
        let v = listed.check_spec(&s, "spec");
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].message
                .contains("\"platform-critical\" is outside the runner priority class policy (allowed: batch-low)"),
            "{}",
            v[0]
        );
    }

    /// The attack: `kubernetes.io/hostname` names one node, so a runner (and the module's code)
    /// can be aimed at the node of a pod it wants to sit next to.
    #[test]
    fn a_node_selector_on_hostname_is_refused_by_default() {
        let s = jobs(serde_json::json!({"nodeSelector": {"kubernetes.io/hostname": "cp-0"}}));
        let v = policy().check_spec(&s, "spec");
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].field, "spec.jobs.nodeSelector[kubernetes.io/hostname]");
        assert!(
            v[0].message
                .contains("node label key \"kubernetes.io/hostname\" is outside the runner node label policy"),
            "{}",
            v[0]
        );
        assert!(
            v[0].message.contains("allowed: topology.kubernetes.io/zone"),
            "{}",
            v[0]
        );
        // The same key in node affinity, whatever the operator.
        for op in ["In", "NotIn", "Exists", "DoesNotExist"] {
            let s = jobs(serde_json::json!({"affinity": {"nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                        {"key": "kubernetes.io/hostname", "operator": op, "values": ["cp-0"]},
                    ]}},
                ],
            }}}));
            let fields: Vec<String> = policy().check_spec(&s, "spec").into_iter().map(|v| v.field).collect();
            assert_eq!(
                fields,
                [
                    "spec.jobs.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[1]"
                ],
                "{op}"
            );
        }
    }

    /// The attack: `matchFields` on `metadata.name` chooses a node by name, whatever its labels.
    #[test]
    fn match_fields_are_refused_by_default() {
        let s = jobs(serde_json::json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["cp-0"]}]},
            ]},
        }}}));
        let v = policy().check_spec(&s, "spec");
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(
            v[0].field,
            "spec.jobs.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[1].matchFields[0]"
        );
        assert!(v[0].message.contains("\"metadata.name\""), "{}", v[0]);
        assert!(v[0].message.contains("allows no matchFields"), "{}", v[0]);
        let allowed = TenantPolicy {
            node_match_fields: true,
            ..policy()
        };
        assert!(allowed.check_spec(&s, "spec").is_empty());
    }

    /// The attack: the control plane's etcd nodes and the nodes kept for the cluster's critical
    /// add-ons are tainted with keys a denylist of two control-plane keys did not know. By
    /// default a spec tolerates no taint but a node's going unreachable, and never every taint.
    #[test]
    fn the_etcd_and_critical_addons_taints_are_not_tolerated_by_default() {
        let s = jobs(serde_json::json!({"tolerations": [
            {"key": "node-role.kubernetes.io/etcd", "operator": "Exists", "effect": "NoExecute"},
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "node-role.kubernetes.io/master", "operator": "Exists"},
            {"operator": "Exists"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
        ]}));
        let v = policy().check_spec(&s, "spec");
        let fields: Vec<&str> = v.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            (0..5)
                .map(|i| format!("spec.jobs.tolerations[{i}]"))
                .collect::<Vec<_>>(),
            "all but the unreachable toleration: {v:?}"
        );
        assert!(
            v[0].message
                .contains("taint key \"node-role.kubernetes.io/etcd\" is outside the runner toleration policy"),
            "{}",
            v[0]
        );
        assert!(
            v[0].message
                .contains("allowed: node.kubernetes.io/not-ready, node.kubernetes.io/unreachable"),
            "{}",
            v[0]
        );
        assert!(v[4].message.contains("tolerates every taint"), "{}", v[4]);
        for key in [
            "node-role.kubernetes.io/control-plane",
            "node-role.kubernetes.io/master",
            "node-role.kubernetes.io/etcd",
            "CriticalAddonsOnly",
            "",
        ] {
            assert!(!DEFAULT_TOLERATION_KEYS.contains(&key), "{key}");
        }
        for key in ["kubernetes.io/hostname", "node-role.kubernetes.io/control-plane", "*"] {
            assert!(!DEFAULT_NODE_LABEL_KEYS.contains(&key), "{key}");
        }
    }

    /// The attack: a pod affinity term over `kube-system`'s API server pods puts the runner on a
    /// control-plane node (where the control plane runs untainted), and an anti-affinity term over
    /// other namespaces' pods can steer it off every other node. Terms over the object's own
    /// namespace stay allowed: its tenant's pods.
    #[test]
    fn pod_affinity_to_control_plane_pods_is_refused_by_default() {
        let s = jobs(serde_json::json!({"affinity": {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"component": "kube-apiserver"}},
                     "namespaces": ["kube-system"], "topologyKey": "kubernetes.io/hostname"},
                ],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {"component": "etcd"}},
                        "namespaceSelector": {}, "topologyKey": "kubernetes.io/hostname"}},
                ],
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"captf.io/kind": "TerraformCluster"}},
                     "topologyKey": "kubernetes.io/hostname"},
                    {"labelSelector": {"matchLabels": {"app": "web"}},
                     "namespaceSelector": {"matchLabels": {"team": "b"}}, "topologyKey": "kubernetes.io/hostname"},
                ],
            },
        }}));
        let v = policy().check_spec(&s, "spec");
        let fields: Vec<&str> = v.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.jobs.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaces",
                "spec.jobs.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.namespaceSelector",
                "spec.jobs.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[1].namespaceSelector",
            ],
            "anti-affinity among the object's own pods is fine: {v:?}"
        );
        assert!(v[0].message.contains("[\"kube-system\"]"), "{}", v[0]);
        assert!(
            v[0].message.contains("leave namespaces and namespaceSelector unset"),
            "{}",
            v[0]
        );
        let allowed = TenantPolicy {
            cross_namespace_pod_affinity: true,
            ..policy()
        };
        assert!(allowed.check_spec(&s, "spec").is_empty());
    }

    /// What a tenant places by without asking: zones, architecture, OS, instance type, the
    /// lifecycle taints, spreading and anti-affinity among its own pods.
    #[test]
    fn the_default_keys_and_own_namespace_pod_affinity_pass() {
        let s = jobs(serde_json::json!({
            "nodeSelector": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64",
                             "node.kubernetes.io/instance-type": "m7g.large"},
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
            ],
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["eu-west-1a"]},
                        {"key": "topology.kubernetes.io/region", "operator": "Exists"},
                    ]},
                ]}},
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": {"labelSelector": {"matchLabels": {"team": "a"}},
                     "namespaces": [], "topologyKey": "topology.kubernetes.io/zone"}},
                ]},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"captf.io/kind": "TerraformCluster"}},
                     "topologyKey": "kubernetes.io/hostname"},
                ]},
            },
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"},
            ],
        }));
        assert_eq!(policy().check_spec(&s, "spec"), []);
    }

    /// The platform team's own lists replace the defaults: a dedicated-node taint and label
    /// allowed, the default zone key no longer; `*` allows any key, and only `*` the toleration of
    /// every taint; empty lists allow none.
    #[test]
    fn the_platform_teams_allowlists_replace_the_defaults() {
        let s = jobs(serde_json::json!({
            "nodeSelector": {"pool.corp/dedicated": "infra"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]},
            ]}}},
        }));
        let fields =
            |p: &TenantPolicy| -> Vec<String> { p.check_spec(&s, "spec").into_iter().map(|v| v.field).collect() };
        assert_eq!(
            fields(&policy()),
            [
                "spec.jobs.tolerations[0]",
                "spec.jobs.nodeSelector[pool.corp/dedicated]"
            ],
            "not in the defaults"
        );
        let team = TenantPolicy {
            node_label_keys: vec!["pool.corp/dedicated".into()],
            toleration_keys: vec!["dedicated".into()],
            ..policy()
        };
        assert_eq!(
            fields(&team),
            [
                "spec.jobs.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]"
            ]
        );
        let v = team.check_spec(&s, "spec");
        assert!(v[0].message.contains("(allowed: pool.corp/dedicated)"), "{}", v[0]);
        let every = jobs(serde_json::json!({"tolerations": [{"operator": "Exists"}]}));
        assert_eq!(team.check_spec(&every, "spec").len(), 1, "a listed key is not `*`");
        let any = TenantPolicy {
            node_label_keys: vec!["*".into()],
            toleration_keys: vec!["*".into()],
            ..policy()
        };
        assert!(any.check_spec(&s, "spec").is_empty());
        assert!(any.check_spec(&every, "spec").is_empty());
        let none = TenantPolicy {
            node_label_keys: vec![],
            toleration_keys: vec![],
            ..policy()
        };
        let v = none.check_spec(&s, "spec");
        assert_eq!(v.len(), 3, "{v:?}");
        assert!(v[0].message.contains("no toleration may be set"), "{}", v[0]);
        assert!(v[1].message.contains("no node may be chosen by label"), "{}", v[1]);
    }

    #[test]
    fn approval_never_is_refused_unless_the_policy_allows_it() {
        use crate::types::{ApprovalMode, DestructiveGuard, GuardSpec};
        let strict = TenantPolicy::only_defaults("img", "");
        let spelled = [
            (Some(ApprovalMode::Never), None, "spec.guard.approval"),
            (None, Some(DestructiveGuard::Allow), "spec.guard.destructive"),
            (
                Some(ApprovalMode::Never),
                Some(DestructiveGuard::Block),
                "spec.guard.approval",
            ),
        ];
        for (approval, destructive, field) in spelled {
            let s = TerraformSpec {
                guard: Some(GuardSpec {
                    destructive,
                    approval,
                    policy_refs: None,
                }),
                ..TerraformSpec::default()
            };
            let v = strict.check_spec(&s, "spec");
            assert_eq!(v.len(), 1, "{v:?}");
            assert_eq!(v[0].field, field);
            assert!(v[0].message.contains("--allow-approval-never"), "{}", v[0]);
            let lenient = TenantPolicy {
                approval_never: true,
                ..strict.clone()
            };
            assert!(lenient.check_spec(&s, "spec").is_empty());
        }
        for mode in [ApprovalMode::Destructive, ApprovalMode::Always] {
            let s = TerraformSpec {
                guard: Some(GuardSpec {
                    destructive: None,
                    approval: Some(mode),
                    policy_refs: None,
                }),
                ..TerraformSpec::default()
            };
            assert!(strict.check_spec(&s, "spec").is_empty(), "{mode:?}");
        }
    }

    #[test]
    fn the_message_joins_every_violation_with_its_field() {
        let p = TenantPolicy {
            runner_image_prefixes: vec![],
            runner_service_accounts: vec![],
            env_from_secrets: false,
            variables_from_secrets: false,
            priority_classes: vec![],
            node_label_keys: vec![],
            node_match_fields: false,
            toleration_keys: vec![],
            cross_namespace_pod_affinity: false,
            approval_never: false,
            max_approvals_required: 1,
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

        /// Whatever the allowlist (the default one or a platform team's), a nodeSelector key
        /// outside it is refused at its field, and the same key listed is allowed.
        #[test]
        fn a_node_selector_key_outside_the_allowlist_is_refused(
            key in "([a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,30}[A-Za-z0-9])?",
            value in "[a-z0-9]{0,10}",
            listed in proptest::collection::vec("[a-z0-9.]{1,12}/[a-z0-9-]{1,12}", 0..4),
            own_list in any::<bool>(),
        ) {
            let base = policy();
            let keys = if own_list { listed } else { base.node_label_keys.clone() };
            prop_assume!(!keys.contains(&key));
            let s = spec(JobsSpec {
                node_selector: Some([(key.clone(), value)].into()),
                ..JobsSpec::default()
            });
            let p = TenantPolicy { node_label_keys: keys.clone(), ..base };
            let v = p.check_spec(&s, "spec");
            prop_assert_eq!(v.len(), 1, "{:?}", v);
            prop_assert_eq!(&v[0].field, &format!("spec.jobs.nodeSelector[{key}]"));
            prop_assert!(v[0].message.contains(&format!("{key:?}")), "{}", v[0]);
            let mut with_key = keys;
            with_key.push(key);
            let p = TenantPolicy { node_label_keys: with_key, ..p };
            prop_assert!(p.check_spec(&s, "spec").is_empty());
        }
    }
}

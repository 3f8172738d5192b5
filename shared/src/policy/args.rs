//! The tenant policy's command-line flags (feature `cli`): declared once, here, and flattened
//! into both binaries' flags (`captf-webhook`'s and `captf-controller run`'s), so the webhook
//! and the controller read the same values into the same [`TenantPolicy`]
//! ([`TenantPolicyArgs::to_policy`]).
//!
//! The runner image and runner ServiceAccount the controller uses when a spec leaves them unset
//! (`--runner-image`, `--runner-service-account`) are part of the policy: a spec may always name
//! them, as they are what it runs with anyway. So both binaries take these two flags as well; the
//! webhook reads them only for this, and must be given the controller's values (the chart and the
//! clusterctl components pass both the same).

use super::{DEFAULT_NODE_LABEL_KEYS, DEFAULT_TOLERATION_KEYS, TenantPolicy};

/// The runner image of Jobs whose `spec.jobs.image` is unset, unless `--runner-image` says
/// otherwise: the runner of this release.
pub const DEFAULT_RUNNER_IMAGE: &str = concat!("ghcr.io/captf/runner:", env!("CARGO_PKG_VERSION"));

/// What tenants may choose for runner pods, and the defaults they may always name; every flag
/// with its environment variable. The same flags, names and meaning in the webhook and the
/// controller.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct TenantPolicyArgs {
    /// The runner image of Jobs whose spec.jobs.image is unset; spec.jobs.image may always name
    /// it. Give the webhook the controller's value.
    #[arg(long, env = "CAPTF_RUNNER_IMAGE", default_value = DEFAULT_RUNNER_IMAGE, value_parser = parse_flag_text)]
    pub runner_image: String,
    /// The service account of runner pods whose spec.jobs.serviceAccountName is unset; a name
    /// here may always be named by spec.jobs.serviceAccountName. Empty (the default): each
    /// object's own `captf-runner-<suffix>`, which the controller creates with a Role naming only
    /// that object's state Secret, outputs Secret and lock Lease (and which no spec may name). A
    /// name: that account, with whatever rights the platform team gave it. Give the webhook the
    /// controller's value.
    #[arg(long, env = "CAPTF_RUNNER_SERVICE_ACCOUNT", default_value = "", value_parser = parse_flag_text)]
    pub runner_service_account: String,
    /// Image prefixes spec.jobs.image may start with, besides --runner-image (comma-separated;
    /// `*`: any). Empty: only --runner-image may be named.
    #[arg(long, env = "CAPTF_ALLOWED_RUNNER_IMAGE_PREFIXES", value_delimiter = ',', value_parser = parse_flag_text)]
    pub allowed_runner_image_prefixes: Vec<String>,
    /// Names spec.jobs.serviceAccountName may be, besides --runner-service-account
    /// (comma-separated; `*`: any). Empty: only --runner-service-account, if set, may be named.
    #[arg(long, env = "CAPTF_ALLOWED_RUNNER_SERVICE_ACCOUNTS", value_delimiter = ',', value_parser = parse_flag_text)]
    pub allowed_runner_service_accounts: Vec<String>,
    /// Whether runner pods may read Secrets the spec names: spec.jobs.env (valueFrom.secretKeyRef),
    /// spec.jobs.envFrom (secretRef), spec.jobs.volumes (secret, projected secret sources, CSI
    /// publish Secrets), spec.module.credentials and the spec.stateEncryption passphrases.
    #[arg(long, env = "CAPTF_ALLOW_ENV_FROM_SECRETS", default_value_t = true, action = clap::ArgAction::Set)]
    pub allow_env_from_secrets: bool,
    /// Whether spec.variablesFrom may name Secrets (secretRef): the controller reads them and
    /// writes their values into the object's inputs.
    #[arg(long, env = "CAPTF_ALLOW_VARIABLES_FROM_SECRETS", default_value_t = true, action = clap::ArgAction::Set)]
    pub allow_variables_from_secrets: bool,
    /// Names spec.jobs.priorityClassName may be (comma-separated; `*`: any). Empty (the default):
    /// no priority class may be set. `system-` classes are refused whatever this says.
    #[arg(long, env = "CAPTF_ALLOWED_RUNNER_PRIORITY_CLASSES", value_delimiter = ',', value_parser = parse_flag_text)]
    pub allowed_runner_priority_classes: Vec<String>,
    /// Node label keys spec.jobs.nodeSelector and the matchExpressions of
    /// spec.jobs.affinity.nodeAffinity may name, whatever the operator (comma-separated; `*`: any;
    /// empty: no node may be chosen by label). The default names no single node
    /// (kubernetes.io/hostname) and no node role (node-role.kubernetes.io/*).
    #[arg(
        long,
        env = "CAPTF_ALLOWED_RUNNER_NODE_LABEL_KEYS",
        value_delimiter = ',',
        value_parser = parse_flag_text,
        default_values = DEFAULT_NODE_LABEL_KEYS
    )]
    pub allowed_runner_node_label_keys: Vec<String>,
    /// Whether spec.jobs.affinity.nodeAffinity terms may use matchFields, which choose nodes by
    /// name (metadata.name).
    #[arg(long, env = "CAPTF_ALLOW_RUNNER_NODE_MATCH_FIELDS", default_value_t = false, action = clap::ArgAction::Set)]
    pub allow_runner_node_match_fields: bool,
    /// Taint keys spec.jobs.tolerations may name (comma-separated; `*`: any, and a toleration
    /// with an empty key, which tolerates every taint; empty: no toleration may be set). The
    /// default tolerates no control-plane (node-role.kubernetes.io/control-plane, master, etcd),
    /// CriticalAddonsOnly or dedicated-node taint.
    #[arg(
        long,
        env = "CAPTF_ALLOWED_RUNNER_TOLERATION_KEYS",
        value_delimiter = ',',
        value_parser = parse_flag_text,
        default_values = DEFAULT_TOLERATION_KEYS
    )]
    pub allowed_runner_toleration_keys: Vec<String>,
    /// Whether spec.jobs.affinity podAffinity and podAntiAffinity terms may reach pods of other
    /// namespaces (namespaces, namespaceSelector). False: only the pods of the object's own
    /// namespace, so a runner cannot follow another namespace's pods (the control plane's) onto
    /// their node.
    #[arg(long, env = "CAPTF_ALLOW_RUNNER_CROSS_NAMESPACE_POD_AFFINITY", default_value_t = false, action = clap::ArgAction::Set)]
    pub allow_runner_cross_namespace_pod_affinity: bool,
    /// Whether a spec may let every plan through without approval: spec.guard.approval Never,
    /// or spec.guard.destructive Allow (which also needs the approve verb).
    #[arg(long, env = "CAPTF_ALLOW_APPROVAL_NEVER", default_value_t = false, action = clap::ArgAction::Set)]
    pub allow_approval_never: bool,
    /// The most distinct approvers the captf.io/approvals-required annotation may ask for
    /// (1 to 10).
    #[arg(
        long,
        env = "CAPTF_MAX_APPROVALS_REQUIRED",
        default_value_t = super::DEFAULT_MAX_APPROVALS_REQUIRED,
        value_parser = clap::value_parser!(u32).range(1..=crate::keys::MAX_APPROVALS_REQUIRED as i64)
    )]
    pub max_approvals_required: u32,
}

impl TenantPolicyArgs {
    /// The policy of the flags, the one reading of them: `--runner-image` and a non-empty
    /// `--runner-service-account` are always allowed, before the listed extras; empty list
    /// entries (`--allowed-runner-service-accounts=`) are dropped and repeats kept once.
    pub fn to_policy(&self) -> TenantPolicy {
        TenantPolicy {
            runner_image_prefixes: listed(Some(&self.runner_image), &self.allowed_runner_image_prefixes),
            runner_service_accounts: listed(
                Some(&self.runner_service_account),
                &self.allowed_runner_service_accounts,
            ),
            env_from_secrets: self.allow_env_from_secrets,
            variables_from_secrets: self.allow_variables_from_secrets,
            priority_classes: listed(None, &self.allowed_runner_priority_classes),
            node_label_keys: listed(None, &self.allowed_runner_node_label_keys),
            node_match_fields: self.allow_runner_node_match_fields,
            toleration_keys: listed(None, &self.allowed_runner_toleration_keys),
            cross_namespace_pod_affinity: self.allow_runner_cross_namespace_pod_affinity,
            approval_never: self.allow_approval_never,
            max_approvals_required: self.max_approvals_required,
        }
    }
}

/// A flag's text, with `""` (or `''`) read as empty. clusterctl refuses a components variable
/// whose default is empty, so a variable that may be left empty defaults to `""`, and after
/// substitution the container's argument is `--flag=""` with the quotes in it: every flag a
/// clusterctl variable sets reads them as the empty value they stand for.
pub fn flag_text(s: &str) -> &str {
    match s.trim() {
        "\"\"" | "''" => "",
        _ => s,
    }
}

/// A namespace given in a flag, as clusterctl passes it (`--namespace=""` for an unset
/// variable reads as empty, meaning every namespace); a name that cannot be a namespace is an
/// error. The controller's `--namespace` and the webhook's `--watched-namespaces` both read it.
pub fn parse_namespace(s: &str) -> Result<String, String> {
    let n = flag_text(s).trim();
    if n.is_empty() || crate::names::is_dns1123_label(n) {
        Ok(n.to_string())
    } else {
        Err(format!(
            "{n:?} is not a namespace name (lowercase letters, digits and '-', at most 63, starting and ending with a letter or digit)"
        ))
    }
}

/// [`flag_text`] as a clap value parser.
pub fn parse_flag_text(s: &str) -> Result<String, std::convert::Infallible> {
    Ok(flag_text(s).to_string())
}

/// `own` (if any) then `extra`, in order, without empty entries, each once.
fn listed(own: Option<&String>, extra: &[String]) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for s in own.into_iter().chain(extra) {
        if !s.is_empty() && !out.contains(s) {
            out.push(s.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::types::{JobsSpec, TerraformSpec};

    #[test]
    fn flag_text_reads_the_quotes_clusterctl_leaves_as_empty() {
        assert_eq!(flag_text("\"\""), "");
        assert_eq!(flag_text("''"), "");
        assert_eq!(flag_text(" \"\" "), "");
        assert_eq!(flag_text(""), "");
        assert_eq!(flag_text("runners"), "runners");
        assert_eq!(
            flag_text("\"runners\""),
            "\"runners\"",
            "only the empty pair is special"
        );
    }
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        policy: TenantPolicyArgs,
    }

    fn parse(flags: &[&str]) -> TenantPolicyArgs {
        Cli::try_parse_from(std::iter::once("captf").chain(flags.iter().copied()))
            .unwrap()
            .policy
    }

    fn with(image: Option<&str>, sa: Option<&str>) -> TerraformSpec {
        TerraformSpec {
            jobs: Some(JobsSpec {
                image: image.map(str::to_string),
                service_account_name: sa.map(str::to_string),
                ..JobsSpec::default()
            }),
            ..TerraformSpec::default()
        }
    }

    #[test]
    fn by_default_only_the_releases_runner_image_may_be_named_and_no_service_account() {
        let p = parse(&[]).to_policy();
        assert_eq!(p.runner_image_prefixes, [DEFAULT_RUNNER_IMAGE]);
        assert!(p.runner_service_accounts.is_empty(), "each object's own account");
        assert!(p.env_from_secrets && p.variables_from_secrets);
        assert!(p.priority_classes.is_empty(), "no priority class");
        assert_eq!(p.node_label_keys, DEFAULT_NODE_LABEL_KEYS);
        assert_eq!(p.toleration_keys, DEFAULT_TOLERATION_KEYS);
        assert!(!p.node_match_fields && !p.cross_namespace_pod_affinity);
        assert_eq!(
            p,
            TenantPolicy {
                runner_service_accounts: vec![],
                ..TenantPolicy::only_defaults(DEFAULT_RUNNER_IMAGE, "")
            },
            "the flags' defaults are the library's"
        );
        assert!(p.check_spec(&with(Some(DEFAULT_RUNNER_IMAGE), None), "spec").is_empty());
        assert_eq!(p.check_spec(&with(Some("other/runner:1"), None), "spec").len(), 1);
        assert_eq!(p.check_spec(&with(None, Some("deployer")), "spec").len(), 1);
    }

    #[test]
    fn the_own_runner_image_and_service_account_are_allowed_besides_the_lists() {
        let p = parse(&[
            "--runner-image=registry.corp/runner:2",
            "--runner-service-account=runners",
            "--allowed-runner-image-prefixes=registry.corp/,mirror.corp/captf/",
            "--allowed-runner-service-accounts=deployer,runners",
        ])
        .to_policy();
        assert_eq!(
            p.runner_image_prefixes,
            ["registry.corp/runner:2", "registry.corp/", "mirror.corp/captf/"]
        );
        assert_eq!(p.runner_service_accounts, ["runners", "deployer"], "each once");
        for ok in [
            with(Some("registry.corp/runner:2"), Some("runners")),
            with(Some("mirror.corp/captf/runner:1"), Some("deployer")),
        ] {
            assert!(p.check_spec(&ok, "spec").is_empty());
        }
        // With nothing listed, the own image and account alone.
        let own = parse(&[
            "--runner-image=registry.corp/runner:2",
            "--runner-service-account=runners",
            "--allowed-runner-image-prefixes=",
            "--allowed-runner-service-accounts=",
        ])
        .to_policy();
        assert_eq!(own.runner_image_prefixes, ["registry.corp/runner:2"]);
        assert_eq!(own.runner_service_accounts, ["runners"]);
        assert!(
            own.check_spec(&with(Some("registry.corp/runner:2"), Some("runners")), "spec")
                .is_empty()
        );
        let v = own.check_spec(&with(Some("registry.corp/runner:3"), None), "spec");
        assert!(v[0].message.contains("allowed: registry.corp/runner:2"), "{}", v[0]);
    }

    #[test]
    fn the_switches_and_priority_classes_read_as_given() {
        let p = parse(&[
            "--allow-env-from-secrets=false",
            "--allow-variables-from-secrets=false",
            "--allowed-runner-priority-classes=batch-low,,batch-low,infra",
            "--allowed-runner-node-label-keys=pool.corp/dedicated,kubernetes.io/os",
            "--allow-runner-node-match-fields=true",
            "--allowed-runner-toleration-keys=dedicated,node-role.kubernetes.io/control-plane",
            "--allow-runner-cross-namespace-pod-affinity=true",
        ])
        .to_policy();
        assert!(!p.env_from_secrets);
        assert!(!p.variables_from_secrets);
        assert_eq!(p.priority_classes, ["batch-low", "infra"]);
        assert_eq!(p.node_label_keys, ["pool.corp/dedicated", "kubernetes.io/os"]);
        assert!(p.node_match_fields);
        assert_eq!(
            p.toleration_keys,
            ["dedicated", "node-role.kubernetes.io/control-plane"]
        );
        assert!(p.cross_namespace_pod_affinity);
        let none = parse(&[
            "--allowed-runner-priority-classes=",
            "--allowed-runner-node-label-keys=",
            "--allowed-runner-toleration-keys=",
        ])
        .to_policy();
        assert!(none.priority_classes.is_empty());
        assert!(none.node_label_keys.is_empty() && none.toleration_keys.is_empty());
    }
}

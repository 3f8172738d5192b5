//! The runner's configuration, read from the environment the controller sets (docs/runner.md).
//!
//! Parsing takes a lookup function rather than reading the process environment, so every rule
//! is tested without touching global state.

use std::path::PathBuf;

use captf_shared::Op;
use captf_shared::names::is_dns1123_label;
use captf_shared::protocol::env;
use captf_shared::types::ApprovalMode;
use captf_shared::{defaults, duration};

/// Runner-only variable: write the outputs document to this file instead of the outputs Secret.
/// Used by tests and local runs; the controller never sets it.
pub const OUTPUTS_FILE: &str = env::OUTPUTS_FILE;
/// Runner-only variable: keep the work directory after the run (tests and debugging; the
/// controller never sets it).
pub const KEEP_WORK_DIR: &str = env::KEEP_WORK_DIR;

/// Where the kubelet reads the result unless `CAPTF_TERMINATION_LOG` says otherwise.
pub const DEFAULT_TERMINATION_LOG: &str = "/dev/termination-log";
/// The binary run unless `CAPTF_TF_BINARY` says otherwise.
pub const DEFAULT_TF_BINARY: &str = "tofu";
/// The guard unless `CAPTF_GUARD` says otherwise.
pub const DEFAULT_GUARD: ApprovalMode = ApprovalMode::Destructive;
/// The lock timeout when `CAPTF_LOCK_TIMEOUT` is unset: the spec's own default for the default
/// deadline (`captf_shared::defaults`), so a runner started by hand waits as a defaulted object's
/// Job would. The controller always sets the variable from the effective spec.
pub fn default_lock_timeout() -> String {
    duration::seconds_flag(defaults::default_lock_timeout_seconds(
        defaults::DEFAULT_ACTIVE_DEADLINE_SECONDS,
    ))
}

/// The value the runner takes for the variable `name` when it is unset or empty, as text; None
/// when there is no such value (a required variable, or an optional one whose absence means
/// "nothing": no unlock, no approval, a fresh work directory). The defaults docs/runner.md states
/// (`tests/env_table.rs` checks the two against each other and against [`Config::from_lookup`]).
pub fn default_value(name: &str) -> Option<String> {
    match name {
        env::LOCK_TIMEOUT => Some(default_lock_timeout()),
        env::GUARD => Some(DEFAULT_GUARD.runner_value().to_string()),
        env::TF_BINARY => Some(DEFAULT_TF_BINARY.to_string()),
        env::TERMINATION_LOG => Some(DEFAULT_TERMINATION_LOG.to_string()),
        _ => None,
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{0} is not set")]
    Missing(&'static str),
    #[error("{name} is invalid: {why} (got {got:?})")]
    Invalid {
        name: &'static str,
        why: &'static str,
        got: String,
    },
}

/// Everything one run needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub op: Op,
    pub state_suffix: String,
    pub namespace: String,
    /// A Go duration, passed as `-lock-timeout=<this>`.
    pub lock_timeout: String,
    pub force_unlock_id: Option<String>,
    pub approved_plan: Option<String>,
    pub guard: ApprovalMode,
    pub inputs_dir: PathBuf,
    /// `tofu`, `terraform`, or a path.
    pub tf_binary: String,
    /// None: a fresh directory under the system temp dir.
    pub work_dir: Option<PathBuf>,
    pub termination_log: PathBuf,
    /// Some: write outputs to this file rather than to the outputs Secret.
    pub outputs_file: Option<PathBuf>,
    /// Variables of the inputs whose values never appear in what the runner writes.
    pub sensitive_variables: Vec<String>,
    /// Values of the env variables named by `CAPTF_SENSITIVE_ENV` (from Secrets).
    pub sensitive_env: crate::redact::Sensitive,
    /// Keep the work directory after the run (`CAPTF_KEEP_WORK_DIR=true`).
    pub keep_work_dir: bool,
    /// Where the module credentials Secret is mounted (`CAPTF_MODULE_CREDENTIALS_DIR`).
    pub module_credentials_dir: Option<PathBuf>,
    /// Where the state encryption passphrases are mounted (`CAPTF_STATE_ENCRYPTION_DIR`).
    pub state_encryption_dir: Option<PathBuf>,
    /// The UID of the object the run is for (`CAPTF_OWNER_UID`): a state Secret or lock Lease
    /// bound to another object is refused. None (a run by hand): no check.
    pub owner_uid: Option<String>,
}

/// The termination log path, readable even when the rest of the configuration is broken
/// (so a configuration error is still reported as a result).
pub fn termination_log(lookup: &impl Fn(&str) -> Option<String>) -> PathBuf {
    non_empty(lookup(env::TERMINATION_LOG))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_TERMINATION_LOG))
}

fn non_empty(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

fn required(lookup: &impl Fn(&str) -> Option<String>, name: &'static str) -> Result<String, ConfigError> {
    non_empty(lookup(name)).ok_or(ConfigError::Missing(name))
}

/// A lock ID goes to argv as a positional argument after `-force`; it must not look like a flag.
pub fn is_plausible_lock_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 256
        && !id.starts_with('-')
        && id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
}

impl Config {
    /// Read the configuration from the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(&|name| std::env::var(name).ok())
    }

    pub fn from_lookup(lookup: &impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let op_text = required(lookup, env::OP)?;
        let op: Op = op_text.parse().map_err(|_| ConfigError::Invalid {
            name: env::OP,
            why: "must be apply, refresh, drift or destroy",
            got: op_text.clone(),
        })?;
        let state_suffix = required(lookup, env::STATE_SUFFIX)?;
        // The suffix ends up in backend.tf and in Secret names; keep it a DNS label.
        if !is_dns1123_label(&state_suffix) {
            return Err(ConfigError::Invalid {
                name: env::STATE_SUFFIX,
                why: "must be a DNS-1123 label",
                got: state_suffix,
            });
        }
        let namespace = required(lookup, env::NAMESPACE)?;
        if !is_dns1123_label(&namespace) {
            return Err(ConfigError::Invalid {
                name: env::NAMESPACE,
                why: "must be a DNS-1123 label",
                got: namespace,
            });
        }
        let lock_timeout = non_empty(lookup(env::LOCK_TIMEOUT)).unwrap_or_else(default_lock_timeout);
        if duration::parse(&lock_timeout).is_err() {
            return Err(ConfigError::Invalid {
                name: env::LOCK_TIMEOUT,
                why: "must be a Go duration such as 300s",
                got: lock_timeout,
            });
        }
        let force_unlock_id = non_empty(lookup(env::FORCE_UNLOCK_ID));
        if let Some(id) = &force_unlock_id
            && !is_plausible_lock_id(id)
        {
            return Err(ConfigError::Invalid {
                name: env::FORCE_UNLOCK_ID,
                why: "must be a lock ID (letters, digits, '-', '_', '.', ':'; not starting with '-')",
                got: id.clone(),
            });
        }
        let approved_plan = non_empty(lookup(env::APPROVED_PLAN));
        let guard = match non_empty(lookup(env::GUARD)) {
            None => DEFAULT_GUARD,
            Some(v) => ApprovalMode::from_runner_value(&v).ok_or(ConfigError::Invalid {
                name: env::GUARD,
                why: "must be Block, Always or Allow (or Destructive, Never)",
                got: v,
            })?,
        };
        let inputs_dir = PathBuf::from(required(lookup, env::INPUTS_DIR)?);
        let tf_binary = non_empty(lookup(env::TF_BINARY)).unwrap_or_else(|| DEFAULT_TF_BINARY.to_string());
        let work_dir = non_empty(lookup(env::WORK_DIR)).map(PathBuf::from);
        let outputs_file = non_empty(lookup(OUTPUTS_FILE)).map(PathBuf::from);
        let names = |var: &str| -> Vec<String> {
            lookup(var)
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(String::from)
                .collect()
        };
        let sensitive_variables = names(env::SENSITIVE_VARIABLES);
        let sensitive_env = crate::redact::Sensitive(
            names(env::SENSITIVE_ENV)
                .iter()
                .filter_map(|n| lookup(n))
                .filter(|v| !v.is_empty())
                .collect(),
        );
        Ok(Config {
            op,
            state_suffix,
            namespace,
            lock_timeout,
            force_unlock_id,
            approved_plan,
            guard,
            inputs_dir,
            tf_binary,
            work_dir,
            termination_log: termination_log(lookup),
            outputs_file,
            sensitive_variables,
            sensitive_env,
            keep_work_dir: non_empty(lookup(KEEP_WORK_DIR)).is_some_and(|v| v == "true"),
            module_credentials_dir: non_empty(lookup(env::MODULE_CREDENTIALS_DIR)).map(PathBuf::from),
            state_encryption_dir: non_empty(lookup(env::STATE_ENCRYPTION_DIR)).map(PathBuf::from),
            owner_uid: non_empty(lookup(env::OWNER_UID)),
        })
    }

    /// `captf-outputs-<suffix>`: where outputs that do not fit the result go.
    pub fn outputs_secret_name(&self) -> String {
        captf_shared::names::outputs_secret_name(&self.state_suffix)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::collections::HashMap;

    fn lookup_from(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k: &str| map.get(k).cloned()
    }

    const BASE: [(&str, &str); 4] = [
        ("CAPTF_OP", "apply"),
        ("CAPTF_STATE_SUFFIX", "prod-eu-tc"),
        ("CAPTF_NAMESPACE", "default"),
        ("CAPTF_INPUTS_DIR", "/inputs"),
    ];

    #[test]
    fn minimal_environment_gets_the_documented_defaults() {
        let c = Config::from_lookup(&lookup_from(&BASE)).unwrap();
        assert_eq!(c.op, Op::Apply);
        assert_eq!(c.tf_binary, "tofu");
        assert_eq!(c.guard, ApprovalMode::Destructive);
        assert_eq!(c.lock_timeout, "300s", "the spec's default for the default deadline");
        assert_eq!(c.termination_log, PathBuf::from("/dev/termination-log"));
        assert_eq!(c.work_dir, None);
        assert_eq!(c.force_unlock_id, None);
        assert_eq!(c.approved_plan, None);
        assert_eq!(c.outputs_secret_name(), "captf-outputs-prod-eu-tc");
    }

    #[test]
    fn every_variable_is_read() {
        let mut pairs = BASE.to_vec();
        pairs.extend([
            ("CAPTF_OP", "drift"),
            ("CAPTF_LOCK_TIMEOUT", "300s"),
            ("CAPTF_FORCE_UNLOCK_ID", "0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55"),
            ("CAPTF_APPROVED_PLAN", "abc123"),
            ("CAPTF_GUARD", "Allow"),
            ("CAPTF_TF_BINARY", "terraform"),
            ("CAPTF_WORK_DIR", "/work"),
            ("CAPTF_TERMINATION_LOG", "/tmp/tl"),
            ("CAPTF_OUTPUTS_FILE", "/tmp/out.json"),
        ]);
        let c = Config::from_lookup(&lookup_from(&pairs)).unwrap();
        assert_eq!(c.op, Op::Drift);
        assert_eq!(c.lock_timeout, "300s");
        assert_eq!(
            c.force_unlock_id.as_deref(),
            Some("0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55")
        );
        assert_eq!(c.approved_plan.as_deref(), Some("abc123"));
        assert_eq!(c.guard, ApprovalMode::Never);
        assert_eq!(c.tf_binary, "terraform");
        assert_eq!(c.work_dir, Some(PathBuf::from("/work")));
        assert_eq!(c.termination_log, PathBuf::from("/tmp/tl"));
        assert_eq!(c.outputs_file, Some(PathBuf::from("/tmp/out.json")));
    }

    #[test]
    fn empty_optional_values_count_as_unset() {
        let mut pairs = BASE.to_vec();
        pairs.extend([("CAPTF_FORCE_UNLOCK_ID", ""), ("CAPTF_APPROVED_PLAN", "  ")]);
        let c = Config::from_lookup(&lookup_from(&pairs)).unwrap();
        assert_eq!(c.force_unlock_id, None);
        assert_eq!(c.approved_plan, None);
    }

    #[test]
    fn missing_op_is_named_in_the_error() {
        let err = Config::from_lookup(&lookup_from(&BASE[1..])).unwrap_err();
        assert_eq!(err, ConfigError::Missing("CAPTF_OP"));
        assert_eq!(err.to_string(), "CAPTF_OP is not set");
    }

    #[test]
    fn bad_values_are_rejected_with_the_variable_and_value() {
        for (name, value) in [
            ("CAPTF_OP", "plan"),
            ("CAPTF_GUARD", "block"),
            ("CAPTF_LOCK_TIMEOUT", "5 minutes"),
            ("CAPTF_STATE_SUFFIX", "Bad_Suffix"),
            ("CAPTF_NAMESPACE", "a\"b"),
            ("CAPTF_FORCE_UNLOCK_ID", "-lock=false"),
        ] {
            let mut pairs = BASE.to_vec();
            pairs.push((name, value));
            let err = Config::from_lookup(&lookup_from(&pairs)).unwrap_err().to_string();
            assert!(err.starts_with(name), "{err}");
            assert!(err.contains(&format!("{value:?}")), "{err}");
        }
    }

    #[test]
    fn termination_log_is_readable_without_the_rest() {
        let l = lookup_from(&[("CAPTF_TERMINATION_LOG", "/x/y")]);
        assert_eq!(termination_log(&l), PathBuf::from("/x/y"));
        assert!(Config::from_lookup(&l).is_err());
    }
}

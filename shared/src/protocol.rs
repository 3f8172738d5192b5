//! The runner protocol (docs/runner.md): the result JSON the runner writes to the termination
//! log, its exit codes, and serialisation that always fits the kubelet's 4096 bytes.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// The kubelet reads at most this many bytes of `/dev/termination-log`.
pub const TERMINATION_MESSAGE_LIMIT: usize = 4096;

/// The environment variables the runner reads, most of them set by the controller on runner
/// containers; docs/runner.md has a row for each (the runner's `tests/env_table.rs` checks it).
pub mod env {
    pub const OP: &str = "CAPTF_OP";
    pub const STATE_SUFFIX: &str = "CAPTF_STATE_SUFFIX";
    pub const NAMESPACE: &str = "CAPTF_NAMESPACE";
    pub const LOCK_TIMEOUT: &str = "CAPTF_LOCK_TIMEOUT";
    pub const FORCE_UNLOCK_ID: &str = "CAPTF_FORCE_UNLOCK_ID";
    pub const APPROVED_PLAN: &str = "CAPTF_APPROVED_PLAN";
    pub const GUARD: &str = "CAPTF_GUARD";
    pub const INPUTS_DIR: &str = "CAPTF_INPUTS_DIR";
    pub const TF_BINARY: &str = "CAPTF_TF_BINARY";
    pub const WORK_DIR: &str = "CAPTF_WORK_DIR";
    pub const TERMINATION_LOG: &str = "CAPTF_TERMINATION_LOG";
    /// The UID of the object the Job runs for: the runner refuses a state Secret or lock Lease
    /// bound to another (`crate::binding`).
    pub const OWNER_UID: &str = "CAPTF_OWNER_UID";
    /// Names (comma-separated) of the variables in the inputs whose values are sensitive: every
    /// variable that did not come from `spec.variables` as written (from a Secret through
    /// `variablesFrom`, or a ConfigMap, which is treated the same).
    pub const SENSITIVE_VARIABLES: &str = "CAPTF_SENSITIVE_VARIABLES";
    /// Names (comma-separated) of the runner's env variables whose values come from Secrets
    /// (`spec.jobs.env[].valueFrom.secretKeyRef`).
    pub const SENSITIVE_ENV: &str = "CAPTF_SENSITIVE_ENV";
    /// Where the module credentials Secret is mounted, when `spec.module.credentials` names one
    /// (see `module_credentials`).
    pub const MODULE_CREDENTIALS_DIR: &str = "CAPTF_MODULE_CREDENTIALS_DIR";
    /// Where the state encryption passphrases are mounted, when `spec.stateEncryption` is set
    /// (see `state_encryption`); the mode comes with the inputs.
    pub const STATE_ENCRYPTION_DIR: &str = "CAPTF_STATE_ENCRYPTION_DIR";
    /// Runner-only: write the outputs document to this file instead of the outputs Secret (tests
    /// and local runs; the controller never sets it).
    pub const OUTPUTS_FILE: &str = "CAPTF_OUTPUTS_FILE";
    /// Runner-only: keep the work directory after the run (tests and debugging).
    pub const KEEP_WORK_DIR: &str = "CAPTF_KEEP_WORK_DIR";
    /// Every variable the runner reads; user env must not start with this prefix.
    pub const PREFIX: &str = "CAPTF_";
    /// The variables the runner reads that the controller may leave unset (the runner takes an
    /// empty value as unset). With `spec.jobs.envFrom` the controller sets each of them, empty
    /// when unset, so a ConfigMap or Secret cannot supply one. A new optional variable belongs here.
    pub const OPTIONAL: [&str; 11] = [
        LOCK_TIMEOUT,
        FORCE_UNLOCK_ID,
        APPROVED_PLAN,
        TF_BINARY,
        TERMINATION_LOG,
        SENSITIVE_VARIABLES,
        SENSITIVE_ENV,
        OUTPUTS_FILE,
        KEEP_WORK_DIR,
        MODULE_CREDENTIALS_DIR,
        STATE_ENCRYPTION_DIR,
    ];
}

/// The most of a runner's message the controller copies into a condition (bytes; events are cut
/// at 1 KiB by the API server's limit).
pub const CONDITION_MESSAGE_LIMIT: usize = 1024;

/// `message` cut to at most `limit` bytes on a character boundary, ending in `…` when cut: what
/// the controller copies from a termination message into conditions and events, so a runner
/// can never fill the object's status.
pub fn bounded_message(message: &str, limit: usize) -> String {
    if message.len() <= limit {
        return message.to_string();
    }
    let mut end = limit.saturating_sub('…'.len_utf8());
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// What the run came to.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum RunResult {
    Succeeded,
    Failed,
    Blocked,
    PlanChanged,
    Interrupted,
    /// A policy on the plan denied it (or could not be evaluated): nothing was applied.
    PolicyDenied,
}

impl RunResult {
    /// The runner's exit code: 0 succeeded, 1 failed, 3 blocked, 4 plan-changed, 5 interrupted,
    /// 6 policy-denied.
    pub fn exit_code(self) -> i32 {
        match self {
            RunResult::Succeeded => 0,
            RunResult::Failed => 1,
            RunResult::Blocked => 3,
            RunResult::PlanChanged => 4,
            RunResult::Interrupted => 5,
            RunResult::PolicyDenied => 6,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunResult::Succeeded => "succeeded",
            RunResult::Failed => "failed",
            RunResult::Blocked => "blocked",
            RunResult::PlanChanged => "plan-changed",
            RunResult::Interrupted => "interrupted",
            RunResult::PolicyDenied => "policy-denied",
        }
    }
}

impl fmt::Display for RunResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The step the run was in when it ended.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Init,
    Unlock,
    Plan,
    Guard,
    Apply,
    Refresh,
    Drift,
    Destroy,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Init => "init",
            Phase::Unlock => "unlock",
            Phase::Plan => "plan",
            Phase::Guard => "guard",
            Phase::Apply => "apply",
            Phase::Refresh => "refresh",
            Phase::Drift => "drift",
            Phase::Destroy => "destroy",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a plan would do.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanSummary {
    pub add: u32,
    pub change: u32,
    pub destroy: u32,
    pub replace: u32,
}

impl PlanSummary {
    /// Does the plan delete or replace anything?
    pub fn is_destructive(&self) -> bool {
        self.destroy > 0 || self.replace > 0
    }
}

/// The message of a drift check that found drift (`plan -detailed-exitcode` exited 2).
pub const DRIFT_FOUND_MESSAGE: &str = "drift found: the plan has changes";
/// The message of a drift check that found none (`plan -detailed-exitcode` exited 0).
pub const NO_DRIFT_MESSAGE: &str = "no drift: the infrastructure matches the configuration";

/// The runner's one result, written to the termination log.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunnerResult {
    pub result: RunResult,
    pub phase: Phase,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<PlanSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<bool>,
    /// Non-sensitive outputs, when they fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<BTreeMap<String, serde_json::Value>>,
    /// True when the outputs did not fit and are in the Secret `captf-outputs-<suffix>` (the
    /// masked copy under [`PUBLIC_OUTPUTS_KEY`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outputs_in_secret: bool,
    /// What the policies on the plan warned about (`warn` rules), at most
    /// [`POLICY_WARNINGS_LIMIT`], each cut to [`POLICY_FINDING_BYTES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_warnings: Vec<String>,
}

/// The most policy warnings a result carries (the rest are counted in the last one).
pub const POLICY_WARNINGS_LIMIT: usize = 5;
/// The longest policy finding a result or a message carries, in bytes.
pub const POLICY_FINDING_BYTES: usize = 300;

/// The data key of the inputs Secret that holds the policies the runner checks the plan against
/// (a JSON list of [`PlanPolicy`]). Not part of the inputs hash: a policy decides whether a plan
/// may be applied, not what is planned.
pub const POLICIES_KEY: &str = "policies.json";

/// One Rego module the plan is checked against.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanPolicy {
    /// Where it came from, for messages: `<namespace>/<configmap>:<key>`.
    pub name: String,
    /// The Rego source.
    pub source: String,
}

/// The data key of the outputs Secret that holds the `output -json` document as Terraform printed
/// it (sensitive values included, with their `sensitive` flags).
pub const OUTPUTS_KEY: &str = "outputs.json";
/// The data key of the outputs Secret that holds the non-sensitive outputs (name → value) masked
/// as the runner masks its result: what may reach `status.outputs` when they did not fit the
/// result.
pub const PUBLIC_OUTPUTS_KEY: &str = "public-outputs.json";

/// The data key of the outputs Secret that holds the text of the newest plan a person must
/// approve (what `plan` printed, masked as the log is), at most [`PLAN_TEXT_LIMIT`] bytes.
pub const PLAN_TEXT_KEY: &str = "plan.txt";
/// The data key of the outputs Secret that holds that plan's [`KeptPlan`] record (JSON).
pub const PLAN_KEY: &str = "plan.json";
/// The most plan text kept; a longer plan keeps its first lines and says it was cut. With the
/// outputs beside it the Secret stays well under the API server's 1 MiB object limit.
pub const PLAN_TEXT_LIMIT: usize = 256 * 1024;
/// The most resource changes listed in a [`KeptPlan`]; the rest are counted in `more`.
pub const PLAN_CHANGES_LIMIT: usize = 1000;

/// The record of a plan that waits for approval, kept next to the object so that it can be
/// read after the runner's pod is gone.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct KeptPlan {
    /// The plan hash a person approves.
    pub hash: String,
    pub summary: PlanSummary,
    /// Each resource change (at most [`PLAN_CHANGES_LIMIT`]), in the plan's order.
    #[serde(default)]
    pub changes: Vec<PlannedChange>,
    /// Changes left out of `changes`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more: usize,
    /// The text under [`PLAN_TEXT_KEY`] was cut at [`PLAN_TEXT_LIMIT`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// What the policies on the plan warned about, as the run's result says it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_warnings: Vec<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One resource change of a plan: its address and Terraform's actions (`["delete", "create"]`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct PlannedChange {
    pub address: String,
    pub actions: Vec<String>,
}

impl PlannedChange {
    /// One word for the actions, as Terraform's summary counts them.
    pub fn action(&self) -> &'static str {
        let a: Vec<&str> = self.actions.iter().map(String::as_str).collect();
        match a.as_slice() {
            ["create"] => "create",
            ["update"] => "update",
            ["delete"] => "destroy",
            ["delete", "create"] | ["create", "delete"] => "replace",
            ["read"] => "read",
            ["no-op"] | [] => "no-op",
            _ => "other",
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("termination message is not a runner result: {0}")]
pub struct ParseResultError(#[from] serde_json::Error);

impl RunnerResult {
    pub fn new(result: RunResult, phase: Phase, message: impl Into<String>) -> Self {
        RunnerResult {
            result,
            phase,
            message: message.into(),
            plan_hash: None,
            summary: None,
            drift: None,
            outputs: None,
            outputs_in_secret: false,
            policy_warnings: Vec::new(),
        }
    }

    pub fn exit_code(&self) -> i32 {
        self.result.exit_code()
    }

    /// The last line of the runner's log (after `captf-runner: `), which the simulator's scripted
    /// runners end their logs with too: the result, its phase, the plan hash, whether a drift
    /// check found drift and the message (`result succeeded in phase drift drift=true: drift
    /// found: the plan has changes`). Carries no outputs (they may be large; sensitive ones are
    /// never in the result anyway).
    pub fn summary_line(&self) -> String {
        let mut line = format!("result {} in phase {}", self.result, self.phase);
        if let Some(hash) = &self.plan_hash {
            line.push_str(&format!(" (plan {hash})"));
        }
        if let Some(drift) = self.drift {
            line.push_str(&format!(" drift={drift}"));
        }
        if self.outputs_in_secret {
            line.push_str(" (outputs in the outputs Secret)");
        }
        if !self.message.is_empty() {
            line.push_str(&format!(": {}", self.message));
        }
        line
    }

    /// Parse a termination message.
    pub fn parse(text: &str) -> Result<Self, ParseResultError> {
        Ok(serde_json::from_str(text.trim())?)
    }

    /// Serialise to at most [`TERMINATION_MESSAGE_LIMIT`] bytes: outputs that do not fit are
    /// dropped (and flagged `outputsInSecret`), then the message is trimmed (keeping its start,
    /// at a character boundary, ending in `…`). Always valid JSON.
    pub fn to_termination_message(&self) -> String {
        self.to_limited_json(TERMINATION_MESSAGE_LIMIT)
    }

    /// As [`Self::to_termination_message`] with another byte limit (≥ 512).
    pub fn to_limited_json(&self, limit: usize) -> String {
        let full = self.to_json();
        if full.len() <= limit {
            return full;
        }
        let mut r = self.clone();
        if r.outputs.is_some() {
            r.outputs = None;
            r.outputs_in_secret = true;
            let without = r.to_json();
            if without.len() <= limit {
                return without;
            }
        }
        // Binary search the longest prefix of the message (in characters) that fits.
        let chars: Vec<char> = self.message.chars().collect();
        let (mut lo, mut hi) = (0usize, chars.len());
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            r.message = trimmed(&chars, mid);
            if r.to_json().len() <= limit {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        r.message = trimmed(&chars, lo);
        let json = r.to_json();
        if json.len() <= limit {
            json
        } else {
            // Only an absurd plan hash could get here; drop the optional fields too.
            let mut bare = RunnerResult::new(self.result, self.phase, "");
            bare.outputs_in_secret = r.outputs_in_secret;
            bare.to_json()
        }
    }

    fn to_json(&self) -> String {
        // A struct of strings, numbers and JSON values always serialises.
        serde_json::to_string(self).unwrap_or_default()
    }
}

fn trimmed(chars: &[char], n: usize) -> String {
    let mut s: String = chars[..n].iter().collect();
    if n < chars.len() {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn the_summary_line_names_result_phase_plan_and_drift() {
        let mut r = RunnerResult::new(RunResult::Succeeded, Phase::Drift, DRIFT_FOUND_MESSAGE);
        r.drift = Some(true);
        assert_eq!(
            r.summary_line(),
            "result succeeded in phase drift drift=true: drift found: the plan has changes"
        );
        let mut blocked = RunnerResult::new(
            RunResult::Blocked,
            Phase::Guard,
            "the plan deletes or replaces resources",
        );
        blocked.plan_hash = Some("abc123".into());
        assert_eq!(
            blocked.summary_line(),
            "result blocked in phase guard (plan abc123): the plan deletes or replaces resources"
        );
        // No message, no colon.
        assert_eq!(
            RunnerResult::new(RunResult::Succeeded, Phase::Apply, "").summary_line(),
            "result succeeded in phase apply"
        );
    }

    #[test]
    fn exit_codes_of_the_protocol() {
        assert_eq!(RunResult::Succeeded.exit_code(), 0);
        assert_eq!(RunResult::Failed.exit_code(), 1);
        assert_eq!(RunResult::Blocked.exit_code(), 3);
        assert_eq!(RunResult::PlanChanged.exit_code(), 4);
        assert_eq!(RunResult::Interrupted.exit_code(), 5);
    }

    #[test]
    fn result_json_shape() {
        let mut r = RunnerResult::new(RunResult::Blocked, Phase::Guard, "plan destroys 1 resource");
        r.plan_hash = Some("abc".into());
        r.summary = Some(PlanSummary {
            add: 1,
            change: 0,
            destroy: 1,
            replace: 0,
        });
        let v: serde_json::Value = serde_json::from_str(&r.to_termination_message()).unwrap();
        assert_eq!(
            v,
            json!({"result": "blocked", "phase": "guard", "message": "plan destroys 1 resource", "planHash": "abc",
                   "summary": {"add": 1, "change": 0, "destroy": 1, "replace": 0}})
        );
        assert_eq!(RunnerResult::parse(&r.to_termination_message()).unwrap(), r);
        let pc: RunnerResult = serde_json::from_value(json!({"result": "plan-changed", "phase": "guard"})).unwrap();
        assert_eq!(pc.result, RunResult::PlanChanged);
    }

    #[test]
    fn a_message_longer_than_4096_bytes_is_trimmed_to_valid_json() {
        let r = RunnerResult::new(RunResult::Failed, Phase::Apply, "é".repeat(5000));
        let text = r.to_termination_message();
        assert!(text.len() <= 4096, "{}", text.len());
        let back = RunnerResult::parse(&text).unwrap();
        assert_eq!(back.result, RunResult::Failed);
        assert!(back.message.ends_with('…'));
        assert!(back.message.starts_with("éé"));
    }

    #[test]
    fn outputs_that_do_not_fit_are_flagged_for_the_secret() {
        let mut r = RunnerResult::new(RunResult::Succeeded, Phase::Apply, "ok");
        r.outputs = Some([("big".to_string(), json!("x".repeat(5000)))].into_iter().collect());
        let back = RunnerResult::parse(&r.to_termination_message()).unwrap();
        assert_eq!(back.outputs, None);
        assert!(back.outputs_in_secret);
        assert_eq!(back.message, "ok");
    }

    #[test]
    fn a_long_runner_message_is_bounded_for_conditions() {
        assert_eq!(bounded_message("short", CONDITION_MESSAGE_LIMIT), "short");
        let cut = bounded_message(&"é".repeat(2000), CONDITION_MESSAGE_LIMIT);
        assert!(cut.len() <= CONDITION_MESSAGE_LIMIT);
        assert!(cut.ends_with('…'));
    }

    proptest! {
        #[test]
        fn a_bounded_message_never_exceeds_its_limit(m in "\\PC{0,3000}", limit in 4usize..2000) {
            let b = bounded_message(&m, limit);
            prop_assert!(b.len() <= limit);
            prop_assert!(m.len() > limit || b == m);
        }


        #[test]
        fn serialisation_always_fits_4096_bytes(message in ".{0,6000}", ctrl in "[\\x00-\\x1f\"\\\\]{0,3000}", n_out in 0usize..50) {
            let mut r = RunnerResult::new(RunResult::Failed, Phase::Plan, format!("{message}{ctrl}"));
            r.outputs = Some((0..n_out).map(|i| (format!("o{i}"), json!("v".repeat(i * 10)))).collect());
            let text = r.to_termination_message();
            prop_assert!(text.len() <= TERMINATION_MESSAGE_LIMIT);
            let back = RunnerResult::parse(&text).unwrap();
            prop_assert_eq!(back.result, RunResult::Failed);
            prop_assert_eq!(back.phase, Phase::Plan);
        }
    }
}

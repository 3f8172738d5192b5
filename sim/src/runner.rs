//! What each simulated runner pod does: a [`RunnerScript`] chosen per Job.
//!
//! Scripts are chosen, in order: the first queued script whose [`JobMatch`] matches the Job
//! (each queued script is used once), then the outcome its object's [`OUTCOME_ANNOTATION`]
//! asks for, once [`crate::Sim::honour_outcome_annotations`] turned that on
//! ([`outcome_script`]), then the rule closure if it returns one, then the default (the
//! [`RunnerScript::realistic`] runner unless changed).
//!
//! When the Job's image is one the process kubelet runs (`crate::process`), only a queued
//! script is consulted: a queued script names the Job it is for, so it wins over the real
//! process, and one Job can be played scripted among real ones. The rule and the default
//! never replace a real process.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use captf_shared::protocol::{Phase, PlanSummary, RunResult, RunnerResult};
use captf_shared::{Kind, Op, keys};
use k8s_openapi::api::batch::v1::Job;
use serde_json::Value;

/// How long a scripted runner takes unless told otherwise (simulated time).
pub const DEFAULT_RUN_DURATION: Duration = Duration::from_secs(30);

/// The result of a drift check that succeeded, as the real runner words it.
pub fn drift_result(drift: bool) -> RunnerResult {
    let message = if drift {
        captf_shared::protocol::DRIFT_FOUND_MESSAGE
    } else {
        captf_shared::protocol::NO_DRIFT_MESSAGE
    };
    let mut r = RunnerResult::new(RunResult::Succeeded, Phase::Drift, message);
    r.drift = Some(drift);
    r
}

/// What the runner does.
#[derive(Clone, Debug, PartialEq)]
pub enum RunnerAction {
    /// Exit with this result as the termination message and its exit code (0 succeeded,
    /// 1 failed, 3 blocked, 4 plan-changed, 5 interrupted).
    Finish(RunnerResult),
    /// Exit with a raw exit code and termination message (or none): e.g. a crash with no result.
    Exit { code: i32, message: Option<String> },
    /// Run until killed: at the Job's deadline, or by an eviction.
    Hang,
    /// Be evicted when the duration has passed: pod condition `DisruptionTarget`, result
    /// `interrupted`, Job Failed (`BackoffLimitExceeded`).
    Evicted,
    /// Take the Terraform state lock at start (`lock_id`, or a random UUID), then die holding
    /// it when the duration has passed: pod Failed (OOMKilled, exit 137), no result.
    DieHoldingLock { lock_id: Option<String> },
    /// Like the real runner: honours `CAPTF_FORCE_UNLOCK_ID`; takes the state lock while it
    /// runs; when someone else holds the lock it waits `CAPTF_LOCK_TIMEOUT` and then fails with
    /// `Error acquiring the state lock`; otherwise succeeds (drift check: `drift`).
    /// After a successful apply or refresh its `outputs` go, as the real runner's do, into the
    /// result (the public ones) and into the object's outputs Secret (all, each with its
    /// `sensitive` flag: true for the names in `sensitive`).
    Realistic {
        outputs: BTreeMap<String, Value>,
        sensitive: std::collections::BTreeSet<String>,
        drift: bool,
    },
}

/// One runner's script: an action and how long it takes (simulated time).
#[derive(Clone, Debug, PartialEq)]
pub struct RunnerScript {
    pub action: RunnerAction,
    pub duration: Duration,
    /// On SIGTERM (deadline kill, pod deletion) write an `interrupted` result and exit 5, as the
    /// real runner does; `false` exits 143 with no result.
    pub interrupted_on_sigterm: bool,
    /// Clear the lock named by `CAPTF_FORCE_UNLOCK_ID` at start when its ID matches (every
    /// script does, as the real runner runs `force-unlock` right after `init`).
    pub force_unlock: bool,
    /// How long the runner takes to shut down after SIGTERM (deadline kill, eviction): in that
    /// window the pod still runs and may hold the state lock, and a deadline-killed Job has
    /// only `FailureTarget`. Default zero.
    pub shutdown: Duration,
}

impl RunnerScript {
    fn new(action: RunnerAction) -> Self {
        RunnerScript {
            action,
            duration: DEFAULT_RUN_DURATION,
            interrupted_on_sigterm: true,
            force_unlock: true,
            shutdown: Duration::ZERO,
        }
    }

    /// The realistic runner with no outputs and no drift.
    pub fn realistic() -> Self {
        Self::new(RunnerAction::Realistic {
            outputs: BTreeMap::new(),
            sensitive: Default::default(),
            drift: false,
        })
    }

    /// The realistic runner returning these outputs.
    pub fn realistic_with_outputs(outputs: BTreeMap<String, Value>) -> Self {
        Self::new(RunnerAction::Realistic {
            outputs,
            sensitive: Default::default(),
            drift: false,
        })
    }

    /// The realistic runner returning these outputs, the ones named in `sensitive` marked
    /// sensitive (in the outputs Secret only, never in the result).
    pub fn realistic_with_sensitive_outputs(outputs: BTreeMap<String, Value>, sensitive: &[&str]) -> Self {
        Self::new(RunnerAction::Realistic {
            outputs,
            sensitive: sensitive.iter().map(|s| s.to_string()).collect(),
            drift: false,
        })
    }

    /// Succeed (result `succeeded`, phase of the Job's op) without touching the lock.
    pub fn succeed() -> Self {
        Self::new(RunnerAction::Finish(RunnerResult::new(
            RunResult::Succeeded,
            Phase::Apply,
            "",
        )))
    }

    /// Succeed with these outputs.
    pub fn succeed_with_outputs(outputs: BTreeMap<String, Value>) -> Self {
        let mut r = RunnerResult::new(RunResult::Succeeded, Phase::Apply, "");
        r.outputs = Some(outputs);
        Self::new(RunnerAction::Finish(r))
    }

    /// A drift check that succeeds and reports `drift`, with the real runner's message.
    pub fn drift(drift: bool) -> Self {
        Self::new(RunnerAction::Finish(drift_result(drift)))
    }

    /// Fail (exit 1) in the phase of the Job's op.
    pub fn fail(message: impl Into<String>) -> Self {
        Self::new(RunnerAction::Finish(RunnerResult::new(
            RunResult::Failed,
            Phase::Apply,
            message,
        )))
    }

    /// Fail (exit 1) in a given phase.
    pub fn fail_in(phase: Phase, message: impl Into<String>) -> Self {
        let mut s = Self::fail(message);
        if let RunnerAction::Finish(r) = &mut s.action {
            r.phase = phase;
        }
        s
    }

    /// Exit with any result.
    pub fn result(result: RunnerResult) -> Self {
        Self::new(RunnerAction::Finish(result))
    }

    /// Exit with a raw code and termination message.
    pub fn exit(code: i32, message: Option<String>) -> Self {
        Self::new(RunnerAction::Exit { code, message })
    }

    /// Hang until the deadline; reports `interrupted` on SIGTERM (see [`Self::silent_on_sigterm`]).
    pub fn hang() -> Self {
        Self::new(RunnerAction::Hang)
    }

    /// Be evicted after the duration.
    pub fn evicted() -> Self {
        Self::new(RunnerAction::Evicted)
    }

    /// Stop before applying a destructive plan: result `blocked` with the plan hash and summary.
    pub fn blocked(plan_hash: impl Into<String>, summary: PlanSummary) -> Self {
        let mut r = RunnerResult::new(
            RunResult::Blocked,
            Phase::Guard,
            "the plan deletes or replaces resources",
        );
        r.plan_hash = Some(plan_hash.into());
        r.summary = Some(summary);
        Self::new(RunnerAction::Finish(r))
    }

    /// The approved plan differs from the new plan: result `plan-changed`.
    pub fn plan_changed(new_plan_hash: impl Into<String>, summary: PlanSummary) -> Self {
        let mut r = RunnerResult::new(
            RunResult::PlanChanged,
            Phase::Guard,
            "the plan differs from the approved plan",
        );
        r.plan_hash = Some(new_plan_hash.into());
        r.summary = Some(summary);
        Self::new(RunnerAction::Finish(r))
    }

    /// Take the state lock and die holding it.
    pub fn die_holding_lock() -> Self {
        Self::new(RunnerAction::DieHoldingLock { lock_id: None })
    }

    /// Take the state lock with this ID and die holding it.
    pub fn die_holding_lock_id(lock_id: impl Into<String>) -> Self {
        Self::new(RunnerAction::DieHoldingLock {
            lock_id: Some(lock_id.into()),
        })
    }

    /// Take this long (simulated time).
    pub fn after(mut self, duration: Duration) -> Self {
        self.duration = duration;
        self
    }

    /// Exit 143 with no result on SIGTERM instead of reporting `interrupted`.
    pub fn silent_on_sigterm(mut self) -> Self {
        self.interrupted_on_sigterm = false;
        self
    }

    /// Take this long (simulated time) to shut down after SIGTERM.
    pub fn shutdown_after(mut self, d: Duration) -> Self {
        self.shutdown = d;
        self
    }

    /// Ignore `CAPTF_FORCE_UNLOCK_ID`.
    pub fn without_force_unlock(mut self) -> Self {
        self.force_unlock = false;
        self
    }
}

/// The runner phase of an op (where a scripted `Finish` with the default phase lands).
pub fn phase_of(op: Option<Op>) -> Phase {
    match op {
        Some(Op::Refresh) => Phase::Refresh,
        Some(Op::Drift) => Phase::Drift,
        Some(Op::Destroy) => Phase::Destroy,
        Some(Op::Apply) | None => Phase::Apply,
    }
}

/// The op of a Job: its `captf.io/op` label, else its container's `CAPTF_OP`.
pub fn job_op(job: &Value) -> Option<Op> {
    let label = job
        .pointer("/metadata/labels")
        .and_then(|l| l.get(captf_shared::keys::LABEL_OP))
        .and_then(Value::as_str)
        .map(String::from);
    label
        .or_else(|| job_env(job).remove(captf_shared::protocol::env::OP))
        .and_then(|s| s.parse().ok())
}

/// Literal `env` values of the Job's first container.
pub fn job_env(job: &Value) -> BTreeMap<String, String> {
    job.pointer("/spec/template/spec/containers/0/env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e.get("name")?.as_str()?.to_string(),
                e.get("value").and_then(Value::as_str).unwrap_or_default().to_string(),
            ))
        })
        .collect()
}

/// Which Jobs a queued script applies to. Empty matches every Job.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobMatch {
    namespace: Option<String>,
    object_id: Option<String>,
    op: Option<Op>,
    name_prefix: Option<String>,
}

impl JobMatch {
    pub fn any() -> Self {
        Self::default()
    }

    /// The Jobs of one CAPTF object (by its `captf.io/object` label and namespace).
    pub fn object(kind: Kind, namespace: &str, name: &str) -> Self {
        JobMatch {
            namespace: Some(namespace.into()),
            object_id: Some(captf_shared::names::object_id(kind, namespace, name)),
            ..Self::default()
        }
    }

    pub fn namespace(mut self, ns: impl Into<String>) -> Self {
        self.namespace = Some(ns.into());
        self
    }

    pub fn op(mut self, op: Op) -> Self {
        self.op = Some(op);
        self
    }

    pub fn name_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.name_prefix = Some(prefix.into());
        self
    }

    pub fn matches(&self, job: &Value) -> bool {
        let meta = |f: &str| job.pointer(&format!("/metadata/{f}")).and_then(Value::as_str);
        let label = job
            .pointer("/metadata/labels")
            .and_then(|l| l.get(captf_shared::keys::LABEL_OBJECT))
            .and_then(Value::as_str);
        self.namespace.as_deref().is_none_or(|ns| meta("namespace") == Some(ns))
            && self.object_id.as_deref().is_none_or(|id| label == Some(id))
            && self.op.is_none_or(|op| job_op(job) == Some(op))
            && self
                .name_prefix
                .as_deref()
                .is_none_or(|p| meta("name").is_some_and(|n| n.starts_with(p)))
    }
}

/// The annotation on a CAPTF object that chooses what the simulated runner of its next Jobs does
/// (one of [`Outcome`]'s names), once [`crate::Sim::honour_outcome_annotations`] turned it on.
pub const OUTCOME_ANNOTATION: &str = "sim.captf.io/outcome";

/// What [`OUTCOME_ANNOTATION`] asks of an object's Jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// As without the annotation: the rule or the default script.
    Succeed,
    /// Every Job fails (exit 1) in the phase of its op.
    Fail,
    /// An apply stops at the guard with a destructive plan (a replacement) until that plan is
    /// approved; the approved apply plays as without the annotation.
    Block,
    /// A drift check finds drift; other Jobs play as without the annotation.
    Drift,
    /// Every Job runs until its deadline.
    Hang,
}

impl Outcome {
    pub const NAMES: [&str; 5] = ["succeed", "fail", "block", "drift", "hang"];
}

impl FromStr for Outcome {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "succeed" => Ok(Outcome::Succeed),
            "fail" => Ok(Outcome::Fail),
            "block" => Ok(Outcome::Block),
            "drift" => Ok(Outcome::Drift),
            "hang" => Ok(Outcome::Hang),
            other => Err(format!(
                "{OUTCOME_ANNOTATION}: unknown outcome {other:?}, expected one of: {}",
                Outcome::NAMES.join(", ")
            )),
        }
    }
}

/// The plan a blocked outcome reports: one thing added, one destroyed, one replaced.
pub const BLOCKED_SUMMARY: PlanSummary = PlanSummary {
    add: 1,
    change: 0,
    destroy: 1,
    replace: 1,
};

/// The plan hash of an object's blocked outcome: the first 12 characters of its Job's
/// `captf.io/object` label, so the same object always blocks on the same plan and one approval
/// lets its next apply through.
pub fn outcome_plan_hash(job: &Value) -> String {
    job.pointer("/metadata/labels")
        .and_then(|l| l.get(keys::LABEL_OBJECT))
        .and_then(Value::as_str)
        .unwrap_or("0")
        .chars()
        .take(12)
        .collect()
}

/// The script an outcome annotation's `value` gives a Job (PURE), or None to play it as without
/// the annotation. An unknown value fails the Job with a message naming the annotation and the
/// values it takes.
pub fn outcome_script(value: &str, job: &Value) -> Option<RunnerScript> {
    let outcome = match value.parse::<Outcome>() {
        Ok(o) => o,
        Err(message) => return Some(RunnerScript::fail(message)),
    };
    let op = job_op(job);
    match outcome {
        Outcome::Succeed => None,
        Outcome::Fail => Some(RunnerScript::fail(format!(
            "Error: a scripted failure ({OUTCOME_ANNOTATION}: fail on the object)"
        ))),
        Outcome::Hang => Some(RunnerScript::hang()),
        Outcome::Drift => (op == Some(Op::Drift)).then(|| RunnerScript::drift(true)),
        Outcome::Block if op == Some(Op::Apply) => {
            let hash = outcome_plan_hash(job);
            let approved = job
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(keys::ANNOTATION_APPROVED_PLAN))
                .and_then(Value::as_str);
            match approved {
                None => Some(RunnerScript::blocked(hash, BLOCKED_SUMMARY)),
                Some(a) if a == hash => None,
                Some(_) => Some(RunnerScript::plan_changed(hash, BLOCKED_SUMMARY)),
            }
        }
        Outcome::Block => None,
    }
}

/// The outcome annotations of the CAPTF objects, by object id (the `captf.io/object` label of
/// their Jobs). Shared between the store's observer that keeps it and the scripts that read it.
#[derive(Clone, Debug, Default)]
pub struct Outcomes(Arc<Mutex<BTreeMap<String, String>>>);

impl Outcomes {
    /// Note an object as it is now (`deleted`: gone). Objects that are not CAPTF's are ignored.
    pub fn note(&self, object: &Value, deleted: bool) {
        let text = |p: &str| object.pointer(p).and_then(Value::as_str);
        if text("/apiVersion").is_none_or(|v| !v.starts_with(&format!("{}/", keys::GROUP))) {
            return;
        }
        let Some(kind) = text("/kind").and_then(|k| k.parse::<Kind>().ok()) else {
            return;
        };
        let (ns, name) = (
            text("/metadata/namespace").unwrap_or_default(),
            text("/metadata/name").unwrap_or_default(),
        );
        let id = captf_shared::names::object_id(kind, ns, name);
        let value = object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(OUTCOME_ANNOTATION))
            .and_then(Value::as_str)
            .filter(|_| !deleted);
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match value {
            Some(v) => map.insert(id, v.to_string()),
            None => map.remove(&id),
        };
    }

    /// The annotation's value for a Job's object, if it has one.
    pub fn for_job(&self, job: &Value) -> Option<String> {
        let id = job
            .pointer("/metadata/labels")
            .and_then(|l| l.get(keys::LABEL_OBJECT))
            .and_then(Value::as_str)?;
        self.0.lock().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
    }
}

/// A rule choosing a script from the Job (return `None` to fall through to the default).
pub type ScriptRule = Arc<dyn Fn(&Job) -> Option<RunnerScript> + Send + Sync>;

/// The scripts of the simulated runners.
#[derive(Clone)]
pub struct Scripts {
    queue: Vec<(JobMatch, RunnerScript)>,
    rule: Option<ScriptRule>,
    default: RunnerScript,
    outcomes: Option<Outcomes>,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts {
            queue: Vec::new(),
            rule: None,
            default: RunnerScript::realistic(),
            outcomes: None,
        }
    }
}

impl Scripts {
    pub fn push(&mut self, m: JobMatch, s: RunnerScript) {
        self.queue.push((m, s));
    }
    pub fn set_rule(&mut self, rule: ScriptRule) {
        self.rule = Some(rule);
    }
    pub fn set_default(&mut self, s: RunnerScript) {
        self.default = s;
    }
    /// Honour the objects' outcome annotations these hold.
    pub fn set_outcomes(&mut self, outcomes: Outcomes) {
        self.outcomes = Some(outcomes);
    }
    /// Queued scripts not used yet.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// The first queued script matching the Job, consumed; None when none matches.
    pub fn take_queued(&mut self, job: &Value) -> Option<RunnerScript> {
        let i = self.queue.iter().position(|(m, _)| m.matches(job))?;
        Some(self.queue.remove(i).1)
    }

    /// Choose (and consume, if queued) the script of a Job.
    pub fn choose(&mut self, job: &Value) -> RunnerScript {
        if let Some(s) = self.take_queued(job) {
            return s;
        }
        if let Some(value) = self.outcomes.as_ref().and_then(|o| o.for_job(job))
            && let Some(s) = outcome_script(&value, job)
        {
            return s;
        }
        if let Some(rule) = &self.rule
            && let Ok(typed) = serde_json::from_value::<Job>(job.clone())
            && let Some(s) = rule(&typed)
        {
            return s;
        }
        self.default.clone()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn job(ns: &str, name: &str, object: &str, op: &str) -> Value {
        json!({"metadata": {"namespace": ns, "name": name, "labels": {"captf.io/object": object, "captf.io/op": op}}})
    }

    #[test]
    fn queued_scripts_are_used_once_in_order_then_the_default() {
        let mut s = Scripts::default();
        let id = captf_shared::names::object_id(Kind::TerraformCluster, "default", "prod-eu");
        s.push(
            JobMatch::object(Kind::TerraformCluster, "default", "prod-eu").op(Op::Apply),
            RunnerScript::fail("boom"),
        );
        s.push(JobMatch::any(), RunnerScript::hang());
        let drift = job("default", "tc-x-drift-1", &id, "drift");
        let apply = job("default", "tc-x-apply-2", &id, "apply");
        assert_eq!(s.choose(&drift).action, RunnerAction::Hang);
        assert!(matches!(s.choose(&apply).action, RunnerAction::Finish(ref r) if r.result == RunResult::Failed));
        assert_eq!(s.choose(&apply), RunnerScript::realistic());
        assert_eq!(s.pending(), 0);
    }

    #[test]
    fn a_rule_closure_chooses_by_job_before_the_default() {
        let mut s = Scripts::default();
        s.set_rule(Arc::new(|j: &Job| {
            (j.metadata.name.as_deref() == Some("a")).then(RunnerScript::evicted)
        }));
        assert_eq!(s.choose(&job("d", "a", "x", "apply")).action, RunnerAction::Evicted);
        assert_eq!(s.choose(&job("d", "b", "x", "apply")), RunnerScript::realistic());
    }

    fn annotated_job(op: &str, approved: Option<&str>) -> Value {
        let mut j = job("d", "tc-x-1", "0123456789abcdef0123", op);
        if let Some(a) = approved {
            j["metadata"]["annotations"] = json!({"captf.io/approved-plan": a});
        }
        j
    }

    fn result_of(s: Option<RunnerScript>) -> Option<RunResult> {
        match s.map(|s| s.action) {
            Some(RunnerAction::Finish(r)) => Some(r.result),
            _ => None,
        }
    }

    #[test]
    fn fail_fails_every_op_naming_the_annotation() {
        for op in ["apply", "drift", "refresh", "destroy"] {
            let s = outcome_script("fail", &annotated_job(op, None)).unwrap();
            let RunnerAction::Finish(r) = s.action else {
                panic!("{op}: not a result")
            };
            assert_eq!(r.result, RunResult::Failed, "{op}");
            assert!(r.message.contains("sim.captf.io/outcome: fail"), "{}", r.message);
        }
    }

    #[test]
    fn block_blocks_an_apply_until_its_plan_is_approved() {
        let s = outcome_script("block", &annotated_job("apply", None)).unwrap();
        let RunnerAction::Finish(r) = s.action else {
            panic!("not a result")
        };
        assert_eq!(r.result, RunResult::Blocked);
        assert_eq!(r.plan_hash.as_deref(), Some("0123456789ab"));
        assert_eq!(r.summary, Some(BLOCKED_SUMMARY));
        // The approved apply plays as without the annotation; another hash is a changed plan.
        assert_eq!(
            outcome_script("block", &annotated_job("apply", Some("0123456789ab"))),
            None
        );
        assert_eq!(
            result_of(outcome_script("block", &annotated_job("apply", Some("ffff")))),
            Some(RunResult::PlanChanged)
        );
        assert_eq!(outcome_script("block", &annotated_job("drift", None)), None);
    }

    #[test]
    fn drift_makes_only_drift_checks_find_drift() {
        let s = outcome_script("drift", &annotated_job("drift", None)).unwrap();
        let RunnerAction::Finish(r) = s.action else {
            panic!("not a result")
        };
        assert_eq!(r.drift, Some(true));
        assert_eq!(outcome_script("drift", &annotated_job("apply", None)), None);
    }

    #[test]
    fn hang_runs_every_op_until_the_deadline_and_succeed_changes_nothing() {
        assert_eq!(
            outcome_script("hang", &annotated_job("destroy", None)).map(|s| s.action),
            Some(RunnerAction::Hang)
        );
        assert_eq!(outcome_script("succeed", &annotated_job("apply", None)), None);
    }

    #[test]
    fn an_unknown_outcome_fails_the_job_listing_the_known_ones() {
        let s = outcome_script("explode", &annotated_job("apply", None)).unwrap();
        let RunnerAction::Finish(r) = s.action else {
            panic!("not a result")
        };
        assert_eq!(r.result, RunResult::Failed);
        assert_eq!(
            r.message,
            "sim.captf.io/outcome: unknown outcome \"explode\", expected one of: succeed, fail, block, drift, hang"
        );
    }

    #[test]
    fn an_annotated_object_wins_over_the_rule_and_a_queued_script_over_it() {
        let outcomes = Outcomes::default();
        let obj = |ann: Value| {
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
                   "metadata": {"namespace": "d", "name": "x", "annotations": ann}})
        };
        outcomes.note(&obj(json!({"sim.captf.io/outcome": "hang"})), false);
        let id = captf_shared::names::object_id(Kind::TerraformCluster, "d", "x");
        let mut s = Scripts::default();
        s.set_outcomes(outcomes.clone());
        s.set_rule(Arc::new(|_: &Job| Some(RunnerScript::evicted())));
        let j = job("d", "tc-x-apply-1", &id, "apply");
        assert_eq!(s.choose(&j).action, RunnerAction::Hang);
        s.push(JobMatch::any(), RunnerScript::fail("queued"));
        assert!(matches!(s.choose(&j).action, RunnerAction::Finish(_)));
        // Removing the annotation, or deleting the object, ends it.
        outcomes.note(&obj(json!({})), false);
        assert_eq!(s.choose(&j).action, RunnerAction::Evicted);
        outcomes.note(&obj(json!({"sim.captf.io/outcome": "hang"})), false);
        outcomes.note(&obj(json!({"sim.captf.io/outcome": "hang"})), true);
        assert_eq!(s.choose(&j).action, RunnerAction::Evicted);
        // Other objects are ignored.
        outcomes.note(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"annotations": {"sim.captf.io/outcome": "fail"}}}), false);
        assert_eq!(outcomes.0.lock().unwrap().len(), 0);
    }
}

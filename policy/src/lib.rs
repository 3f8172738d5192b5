//! Checks a Terraform/OpenTofu plan against Rego policies before it is applied.
//!
//! The input is the document `tofu show -json <planfile>` prints; the policies follow conftest's
//! conventions, so a team's existing conftest policies for plans work unchanged:
//!
//! - each policy is a Rego module (Rego v1 syntax, as OPA 1.x and current conftest read it) with
//!   a name used in errors (`configmap-ns/name:key`); `input` is the plan;
//! - the rules consulted are `deny`, `violation` and `warn`, and those named with a suffix after
//!   an underscore (`deny_open_ingress`, `warn_tags`), in the package `main` and every package
//!   under it (`main.network`, `main.tags`): the namespace is [`DEFAULT_NAMESPACE`], and
//!   [`Options::namespace`] moves it. Conftest by default reads only `data.main` itself; taking
//!   the packages under it too lets a team split its policies by topic without a flag, and a
//!   conftest policy in `package main` reads the same here;
//! - `deny` and `violation` block the plan, `warn` does not;
//! - a rule yields strings, or objects whose `msg` is the message (conftest's `violation`
//!   objects); such an object's `resource` or `address` field, if it is a string, is the
//!   resource the finding is about.
//!
//! Findings are sorted by rule, then message, then address, so the same plan and policies always
//! give the same [`Decision`].
//!
//! Bounds: a policy module is at most [`MAX_MODULE_BYTES`], all policies together at most
//! [`MAX_POLICY_BYTES`], a plan at most [`MAX_PLAN_BYTES`], and an evaluation runs for at most
//! [`Options::time_limit`] (default [`DEFAULT_TIME_LIMIT`]). An evaluation that runs out of time
//! is an error, [`PolicyError::TimedOut`]: every error blocks, never lets a plan through.
//!
//! # Why regorus
//!
//! [regorus](https://github.com/microsoft/regorus) is Microsoft's Rego interpreter, written in
//! pure Rust (no Go runtime, no Wasm engine, no OPA process beside the controller), which aims at
//! OPA compatibility and runs Azure's policy evaluation. The crate's tests check its decisions
//! against the real `opa eval` on a corpus of real OpenTofu plans.
//!
//! Its features are chosen for build time: `std` (std's clock for the execution timer, and
//! threads), `arc` (shared values are `Arc`, so a prepared engine can be handed to the
//! evaluation thread) and `regex` (`regex.match` and friends, which plan policies use to match
//! names; the `regex` crate is already in the workspace's dependency graph). The rest of OPA's
//! builtins (`time`, `net`, `jsonschema`, `yaml`, `http`, ...) are left out: each brings a large
//! dependency, and plan policies rarely need them. A policy that calls one fails as a call to any
//! unknown function does: regorus resolves calls only when it evaluates them, so the evaluation
//! that reaches the call fails, naming the policy, and blocks. The core builtins (`startswith`, `contains`, `sprintf`, `count`,
//! `object.get`, `concat`, ...) are all there.

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::mpsc;
use std::time::Duration;

use regorus::utils::limits::ExecutionTimerConfig;
use regorus::{Engine, LimitError, PolicyLengthConfig, Value};

/// The largest policy module accepted, in bytes.
pub const MAX_MODULE_BYTES: usize = 256 * 1024;
/// The largest total of all policy modules of one evaluation, in bytes.
pub const MAX_POLICY_BYTES: usize = 1024 * 1024;
/// The largest plan document accepted, in bytes. A plan of 1,000 small resources is about 0.4 MiB;
/// this leaves room for plans far larger than one cluster's infrastructure, while bounding the
/// memory a parsed plan takes.
pub const MAX_PLAN_BYTES: usize = 64 * 1024 * 1024;
/// How long one evaluation may run unless [`Options::time_limit`] says otherwise. Real plan
/// policies take milliseconds; seconds mean a policy loops over something quadratic.
pub const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(10);
/// The package the rules are looked for in, with every package under it (conftest's default
/// namespace).
pub const DEFAULT_NAMESPACE: &str = "main";

/// How long past its time limit an evaluation may take before it is abandoned. The interpreter
/// checks its own clock between steps and stops itself at the limit; this covers a single step
/// that never returns to that check (one enormous builtin call).
const ABANDON_AFTER: Duration = Duration::from_secs(2);
/// Interpreter steps between two reads of the clock: reading it costs little, but not nothing.
const TIMER_CHECK_INTERVAL: NonZeroU32 = nonzero_u32(64);
/// The evaluation thread's stack: the interpreter recurses along the policy's rules and the
/// plan's nesting, and a default 2 MiB thread stack is small for a deep plan.
const EVAL_STACK_BYTES: usize = 32 * 1024 * 1024;
/// Regorus refuses policy lines longer than this (its own default is 1,024 columns, which a
/// policy holding a long literal list can pass).
const MAX_POLICY_COLUMNS: NonZeroU32 = nonzero_u32(8 * 1024);
/// Regorus refuses policies with more lines than this (its own default).
const MAX_POLICY_LINES: NonZeroUsize = nonzero_usize(20_000);

const fn nonzero_u32(n: u32) -> NonZeroU32 {
    match NonZeroU32::new(n) {
        Some(n) => n,
        None => NonZeroU32::MIN,
    }
}

const fn nonzero_usize(n: usize) -> NonZeroUsize {
    match NonZeroUsize::new(n) {
        Some(n) => n,
        None => NonZeroUsize::MIN,
    }
}

/// One Rego module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Where it came from, for errors (`configmap-ns/name:key`).
    pub name: String,
    /// The Rego source.
    pub source: String,
}

impl Policy {
    pub fn new(name: impl Into<String>, source: impl Into<String>) -> Policy {
        Policy {
            name: name.into(),
            source: source.into(),
        }
    }
}

/// What an evaluation may change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The package, dot-separated (`main`, `main.network`), whose rules and whose sub-packages'
    /// rules are consulted.
    pub namespace: String,
    /// The longest one evaluation may run; past it the evaluation fails with
    /// [`PolicyError::TimedOut`].
    pub time_limit: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            namespace: DEFAULT_NAMESPACE.to_string(),
            time_limit: DEFAULT_TIME_LIMIT,
        }
    }
}

/// One message of one rule.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Finding {
    /// The rule's full path, `data.main.deny`.
    pub rule: String,
    pub message: String,
    /// The resource it is about, when the rule yielded an object with a `resource` or `address`
    /// field.
    pub address: Option<String>,
}

/// What the policies say about one plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// From `deny` and `violation` rules: any one blocks the plan.
    pub denials: Vec<Finding>,
    /// From `warn` rules: reported, not blocking.
    pub warnings: Vec<Finding>,
}

impl Decision {
    /// Whether the plan must not be applied.
    pub fn blocks(&self) -> bool {
        !self.denials.is_empty()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("policy {policy} is {size} bytes, over the limit of {limit} bytes per policy")]
    ModuleTooLarge { policy: String, size: usize, limit: usize },
    #[error("the policies are {size} bytes together, over the limit of {limit} bytes")]
    PoliciesTooLarge { size: usize, limit: usize },
    #[error("the plan is {size} bytes, over the limit of {limit} bytes")]
    PlanTooLarge { size: usize, limit: usize },
    #[error("the namespace {namespace:?} is not a dot-separated package path of Rego identifiers")]
    BadNamespace { namespace: String },
    #[error("policy {policy} does not compile: {message}")]
    Compile { policy: String, message: String },
    #[error("the plan is not a JSON document: {message}")]
    Plan { message: String },
    #[error("evaluating the policies failed: {message}")]
    Eval { message: String },
    #[error("evaluating the policies took longer than their limit of {limit:?}")]
    TimedOut { limit: Duration },
    #[error("{rule} yielded {found}; a rule must yield a set of strings or of objects with a string msg")]
    BadResult { rule: String, found: String },
    #[error("the policy evaluation stopped unexpectedly: {message}")]
    Crashed { message: String },
}

/// Which kind of rule a name is, by conftest's naming: the kind itself, or the kind followed by
/// `_`-separated words of letters and digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Deny,
    Warn,
}

fn kind_of(rule: &str) -> Option<Kind> {
    [("deny", Kind::Deny), ("violation", Kind::Deny), ("warn", Kind::Warn)]
        .into_iter()
        .find_map(|(prefix, kind)| {
            let rest = rule.strip_prefix(prefix)?;
            if rest.is_empty() {
                return Some(kind);
            }
            let words = rest.strip_prefix('_')?;
            words
                .split('_')
                .all(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric()))
                .then_some(kind)
        })
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Loaded, compiled policies, ready to evaluate any number of plans.
#[derive(Clone)]
pub struct Evaluator {
    /// Prepared once (parsed, analysed); each evaluation works on a clone.
    engine: Engine,
    namespace: Vec<String>,
    /// The packages in the namespace, as paths relative to it (`[]` is the namespace itself),
    /// sorted.
    packages: Vec<Vec<String>>,
    time_limit: Duration,
}

impl std::fmt::Debug for Evaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evaluator")
            .field("namespace", &self.namespace)
            .field("packages", &self.packages)
            .field("time_limit", &self.time_limit)
            .finish_non_exhaustive()
    }
}

impl Evaluator {
    /// Loads and compiles `policies` with the default [`Options`].
    pub fn new(policies: &[Policy]) -> Result<Evaluator, PolicyError> {
        Evaluator::with_options(policies, Options::default())
    }

    /// Loads and compiles `policies`: a policy over its size, or one that does not parse or
    /// compile, is refused here, named.
    pub fn with_options(policies: &[Policy], options: Options) -> Result<Evaluator, PolicyError> {
        let namespace: Vec<String> = options.namespace.split('.').map(str::to_string).collect();
        if !namespace.iter().all(|c| is_identifier(c)) {
            return Err(PolicyError::BadNamespace {
                namespace: options.namespace,
            });
        }
        let mut total = 0usize;
        for p in policies {
            if p.source.len() > MAX_MODULE_BYTES {
                return Err(PolicyError::ModuleTooLarge {
                    policy: p.name.clone(),
                    size: p.source.len(),
                    limit: MAX_MODULE_BYTES,
                });
            }
            total = total.saturating_add(p.source.len());
        }
        if total > MAX_POLICY_BYTES {
            return Err(PolicyError::PoliciesTooLarge {
                size: total,
                limit: MAX_POLICY_BYTES,
            });
        }

        let mut engine = Engine::new();
        engine.set_policy_length_config(PolicyLengthConfig {
            max_col: MAX_POLICY_COLUMNS,
            max_file_bytes: nonzero_usize(MAX_MODULE_BYTES),
            max_lines: MAX_POLICY_LINES,
        });
        // OPA's default: a builtin given arguments it cannot work with is undefined, not an
        // error, so a policy behaves here as it does under conftest and `opa eval`.
        engine.set_strict_builtin_errors(false);
        for p in policies {
            engine
                .add_policy(p.name.clone(), p.source.clone())
                .map_err(|e| PolicyError::Compile {
                    policy: p.name.clone(),
                    message: format!("{e:#}"),
                })?;
        }
        // Parsing checks one module at a time; the analysis that resolves rules, functions and
        // imports across modules runs before the first query. A trivial query runs it now, so a
        // policy that cannot work is refused when loaded rather than when a plan comes.
        engine.eval_query("true".to_string(), false).map_err(|e| {
            let message = format!("{e:#}");
            // Regorus's messages start with the module's name (`name:line:col: ...`).
            let policy = policies
                .iter()
                .find(|p| message.contains(&format!("{}:", p.name)))
                .map(|p| p.name.clone())
                .unwrap_or_else(|| policies.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "));
            PolicyError::Compile { policy, message }
        })?;

        let components = engine
            .get_policy_package_components()
            .map_err(|e| PolicyError::Compile {
                policy: policies.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
                message: format!("{e:#}"),
            })?;
        let mut packages: Vec<Vec<String>> = components
            .into_iter()
            .filter_map(|p| p.components.strip_prefix(namespace.as_slice()).map(<[String]>::to_vec))
            .collect();
        packages.sort();
        packages.dedup();
        Ok(Evaluator {
            engine,
            namespace,
            packages,
            time_limit: options.time_limit,
        })
    }

    /// Evaluates the policies on one plan (`tofu show -json` output).
    pub fn evaluate(&self, plan_json: &str) -> Result<Decision, PolicyError> {
        if plan_json.len() > MAX_PLAN_BYTES {
            return Err(PolicyError::PlanTooLarge {
                size: plan_json.len(),
                limit: MAX_PLAN_BYTES,
            });
        }
        let input = Value::from_json_str(plan_json).map_err(|e| PolicyError::Plan {
            message: format!("{e:#}"),
        })?;
        if self.packages.is_empty() {
            return Ok(Decision::default());
        }
        let document = self.run(input)?;
        self.decide(&document)
    }

    /// Evaluates the namespace's document on its own thread, under the time limit.
    fn run(&self, input: Value) -> Result<serde_json::Value, PolicyError> {
        let mut engine = self.engine.clone();
        let limit = self.time_limit;
        let query = format!("data.{}", self.namespace.join("."));
        let (tx, rx) = mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("captf-policy-eval".into())
            .stack_size(EVAL_STACK_BYTES)
            .spawn(move || {
                engine.set_execution_timer_config(ExecutionTimerConfig {
                    limit,
                    check_interval: TIMER_CHECK_INTERVAL,
                });
                engine.set_input(input);
                let result = engine.eval_query(query, false);
                // The receiver may have stopped waiting (the evaluation was abandoned).
                let _ = tx.send(result);
            })
            .map_err(|e| PolicyError::Crashed {
                message: format!("could not start the evaluation thread: {e}"),
            })?;
        let outcome = rx.recv_timeout(limit.saturating_add(ABANDON_AFTER));
        let results = match outcome {
            Ok(Ok(results)) => results,
            Ok(Err(e)) if is_time_limit(&e) => return Err(PolicyError::TimedOut { limit }),
            Ok(Err(e)) => {
                return Err(PolicyError::Eval {
                    message: format!("{e:#}"),
                });
            }
            // Stuck in one step the interpreter's clock cannot interrupt: the thread is left to
            // finish on its own (a thread cannot be killed), and the plan is blocked now.
            Err(mpsc::RecvTimeoutError::Timeout) => return Err(PolicyError::TimedOut { limit }),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let message = match spawned.join() {
                    Err(panic) => panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "the evaluation panicked".to_string()),
                    Ok(()) => "the evaluation ended without a result".to_string(),
                };
                return Err(PolicyError::Crashed { message });
            }
        };
        // An undefined namespace document (no rule in it has a value) gives no result at all.
        let value = results
            .result
            .into_iter()
            .next()
            .and_then(|r| r.expressions.into_iter().next())
            .map(|e| e.value)
            .unwrap_or(Value::Undefined);
        if value == Value::Undefined {
            return Ok(serde_json::Value::Null);
        }
        serde_json::to_value(&value).map_err(|e| PolicyError::Eval {
            message: format!("the result is not a JSON document: {e}"),
        })
    }

    fn decide(&self, document: &serde_json::Value) -> Result<Decision, PolicyError> {
        let mut decision = Decision::default();
        for package in &self.packages {
            let Some(serde_json::Value::Object(rules)) = package.iter().try_fold(document, |doc, key| doc.get(key))
            else {
                continue;
            };
            let prefix: Vec<&str> = std::iter::once("data")
                .chain(self.namespace.iter().map(String::as_str))
                .chain(package.iter().map(String::as_str))
                .collect();
            for (name, value) in rules {
                let Some(kind) = kind_of(name) else { continue };
                // A sub-package named like a rule is a package, read in its own turn.
                if self
                    .packages
                    .iter()
                    .any(|p| p.len() == package.len() + 1 && p.starts_with(package) && p.last() == Some(name))
                {
                    continue;
                }
                let rule = format!("{}.{name}", prefix.join("."));
                let findings = findings(&rule, value)?;
                match kind {
                    Kind::Deny => decision.denials.extend(findings),
                    Kind::Warn => decision.warnings.extend(findings),
                }
            }
        }
        decision.denials.sort();
        decision.warnings.sort();
        Ok(decision)
    }
}

fn is_time_limit(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| matches!(c.downcast_ref::<LimitError>(), Some(LimitError::TimeLimitExceeded { .. })))
        // The interpreter may pass the limit on as text inside another error.
        || format!("{e:#}").contains("execution exceeded time limit")
}

/// The findings of one rule's value: a set (a JSON array here) of strings or of objects with a
/// string `msg`.
fn findings(rule: &str, value: &serde_json::Value) -> Result<Vec<Finding>, PolicyError> {
    let bad = |found: &serde_json::Value| PolicyError::BadResult {
        rule: rule.to_string(),
        found: describe(found),
    };
    let serde_json::Value::Array(items) = value else {
        return Err(bad(value));
    };
    items
        .iter()
        .map(|item| match item {
            serde_json::Value::String(message) => Ok(Finding {
                rule: rule.to_string(),
                message: message.clone(),
                address: None,
            }),
            serde_json::Value::Object(fields) => {
                let Some(serde_json::Value::String(message)) = fields.get("msg") else {
                    return Err(bad(item));
                };
                let address = ["resource", "address"]
                    .iter()
                    .find_map(|k| fields.get(*k).and_then(serde_json::Value::as_str))
                    .map(str::to_string);
                Ok(Finding {
                    rule: rule.to_string(),
                    message: message.clone(),
                    address,
                })
            }
            other => Err(bad(other)),
        })
        .collect()
}

/// A short account of a value for an error (the value itself may be large).
fn describe(value: &serde_json::Value) -> String {
    let text = value.to_string();
    const MAX: usize = 120;
    if text.len() <= MAX {
        return text;
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// Loads `policies` and evaluates them on one plan, with the default [`Options`].
pub fn evaluate(policies: &[Policy], plan_json: &str) -> Result<Decision, PolicyError> {
    Evaluator::new(policies)?.evaluate(plan_json)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A plan with two resources: a rule open to the world and a closed one.
    const PLAN: &str = r#"{
      "format_version": "1.2",
      "resource_changes": [
        {"address": "captftest_thing.open", "type": "captftest_thing", "name": "open",
         "change": {"actions": ["create"], "after": {"name": "open", "content": "0.0.0.0/0"}}},
        {"address": "captftest_thing.closed", "type": "captftest_thing", "name": "closed",
         "change": {"actions": ["create"], "after": {"name": "closed", "content": "10.0.0.0/8"}}}
      ]
    }"#;

    fn eval(source: &str) -> Result<Decision, PolicyError> {
        evaluate(&[Policy::new("ns/policies:main.rego", source)], PLAN)
    }

    fn messages(findings: &[Finding]) -> Vec<&str> {
        findings.iter().map(|f| f.message.as_str()).collect()
    }

    #[test]
    fn deny_blocks_with_its_messages_sorted() {
        let d = eval(
            r#"package main
deny contains msg if {
  some rc in input.resource_changes
  msg := sprintf("%s: %s", [rc.address, rc.change.after.content])
}"#,
        )
        .unwrap();
        assert!(d.blocks());
        assert_eq!(
            messages(&d.denials),
            ["captftest_thing.closed: 10.0.0.0/8", "captftest_thing.open: 0.0.0.0/0"]
        );
        assert!(
            d.denials
                .iter()
                .all(|f| f.rule == "data.main.deny" && f.address.is_none())
        );
        assert!(d.warnings.is_empty());
    }

    #[test]
    fn warn_does_not_block() {
        let d = eval(
            r#"package main
warn contains "think twice" if { count(input.resource_changes) > 1 }"#,
        )
        .unwrap();
        assert!(!d.blocks());
        assert_eq!(messages(&d.warnings), ["think twice"]);
        assert_eq!(d.warnings[0].rule, "data.main.warn");
    }

    #[test]
    fn violation_objects_give_their_msg() {
        let d = eval(
            r#"package main
violation contains {"msg": "open to the world", "resource": rc.address, "details": {"cidr": "0.0.0.0/0"}} if {
  some rc in input.resource_changes
  rc.change.after.content == "0.0.0.0/0"
}"#,
        )
        .unwrap();
        assert!(d.blocks());
        assert_eq!(
            d.denials,
            [Finding {
                rule: "data.main.violation".into(),
                message: "open to the world".into(),
                address: Some("captftest_thing.open".into()),
            }]
        );
    }

    #[test]
    fn an_object_without_msg_is_an_error_that_blocks() {
        let e = eval(
            r#"package main
deny contains {"message": "x"} if { true }"#,
        )
        .unwrap_err();
        assert!(
            matches!(e, PolicyError::BadResult { ref rule, .. } if rule == "data.main.deny"),
            "{e}"
        );
    }

    #[test]
    fn a_policy_that_does_not_compile_is_refused_with_its_error() {
        let e = Evaluator::new(&[
            Policy::new("ns/good:ok.rego", "package main\nwarn contains \"x\" if { true }\n"),
            Policy::new(
                "ns/bad:broken.rego",
                "package main\ndeny contains msg if {\n  msg := \n}\n",
            ),
        ])
        .unwrap_err();
        eprintln!("{e}");
        assert!(
            matches!(e, PolicyError::Compile { ref policy, .. } if policy == "ns/bad:broken.rego"),
            "{e}"
        );
    }

    /// Regorus resolves function calls only when it evaluates them (OPA refuses them when
    /// compiling): such a policy loads, and the evaluation that reaches the call fails, naming
    /// the policy, which blocks the plan like any error.
    #[test]
    fn a_call_to_an_unknown_function_fails_the_evaluation_naming_the_policy() {
        let e = eval("package main\ndeny contains msg if {\n  some rc in input.resource_changes\n  msg := no_such_function(rc)\n}\n")
            .unwrap_err();
        assert!(
            matches!(e, PolicyError::Eval { ref message } if message.contains("ns/policies:main.rego") && message.contains("no_such_function")),
            "{e}"
        );
    }

    #[test]
    fn an_evaluation_over_its_time_limit_blocks() {
        let slow = r#"package main
deny contains msg if {
  n := count([x | some x in numbers.range(1, 100000); some y in numbers.range(1, 100000); x == y])
  msg := sprintf("%d", [n])
}"#;
        let ev = Evaluator::with_options(
            &[Policy::new("ns/slow:slow.rego", slow)],
            Options {
                time_limit: Duration::from_millis(200),
                ..Options::default()
            },
        )
        .unwrap();
        let started = std::time::Instant::now();
        let e = ev.evaluate(PLAN).unwrap_err();
        eprintln!("{e} after {:?}", started.elapsed());
        assert!(matches!(e, PolicyError::TimedOut { .. }), "{e}");
    }

    /// docs/policy.md's worked example decides as the page says.
    #[test]
    fn the_worked_example_of_the_docs_decides_as_documented() {
        let page = include_str!("../../docs/policy.md");
        let source = page
            .split("## A worked example")
            .nth(1)
            .and_then(|section| section.split("```rego\n").nth(1))
            .and_then(|rest| rest.split("```").next())
            .unwrap();
        let plan = r#"{"resource_changes": [
          {"address": "captftest_thing.api", "type": "captftest_thing",
           "change": {"actions": ["update"], "after": {"name": "api", "content": "ingress tcp/6443 from 0.0.0.0/0"}}},
          {"address": "captftest_thing.web", "type": "captftest_thing",
           "change": {"actions": ["delete", "create"], "after": {"name": "prod-web-2", "content": "ingress tcp/443 from 0.0.0.0/0"}}}
        ]}"#;
        let evaluator = Evaluator::new(&[Policy::new("platform/plan-policies:ingress.rego", source)]).unwrap();
        let decision = evaluator.evaluate(plan).unwrap();
        assert!(decision.blocks());
        assert_eq!(
            decision.denials,
            [Finding {
                rule: "data.main.violation".into(),
                message: "captftest_thing.api opens \"ingress tcp/6443 from 0.0.0.0/0\" to the world".into(),
                address: Some("captftest_thing.api".into()),
            }]
        );
        assert_eq!(
            decision.warnings,
            [Finding {
                rule: "data.main.warn".into(),
                message: "captftest_thing.web is replaced".into(),
                address: None,
            }]
        );
    }

    #[test]
    fn rules_named_with_a_suffix_count_as_their_kind() {
        let d = eval(
            r#"package main
deny_open contains "a" if { true }
violation_prod contains "b" if { true }
warn_tags contains "c" if { true }
denied contains "not a rule conftest reads" if { true }
deny_ contains "nor this" if { true }
warning contains "nor this" if { true }"#,
        )
        .unwrap();
        assert_eq!(
            d.denials
                .iter()
                .map(|f| (f.rule.as_str(), f.message.as_str()))
                .collect::<Vec<_>>(),
            [("data.main.deny_open", "a"), ("data.main.violation_prod", "b")]
        );
        assert_eq!(
            d.warnings
                .iter()
                .map(|f| (f.rule.as_str(), f.message.as_str()))
                .collect::<Vec<_>>(),
            [("data.main.warn_tags", "c")]
        );
    }

    #[test]
    fn packages_under_main_are_consulted_and_others_only_imported() {
        let d = evaluate(
            &[
                Policy::new(
                    "net",
                    "package main.network\nimport data.lib\ndeny contains lib.greeting if { true }\n",
                ),
                Policy::new(
                    "lib",
                    "package lib\ngreeting := \"from lib\"\ndeny contains \"lib is not consulted\" if { true }\n",
                ),
                Policy::new(
                    "other",
                    "package mainframe\ndeny contains \"nor is mainframe\" if { true }\n",
                ),
            ],
            PLAN,
        )
        .unwrap();
        assert_eq!(
            d.denials,
            [Finding {
                rule: "data.main.network.deny".into(),
                message: "from lib".into(),
                address: None,
            }]
        );
    }

    #[test]
    fn another_namespace_is_consulted_when_asked_for() {
        let policies = [Policy::new(
            "p",
            "package team.plans\nwarn contains \"w\" if { true }\n",
        )];
        let options = Options {
            namespace: "team".into(),
            ..Options::default()
        };
        let d = Evaluator::with_options(&policies, options)
            .unwrap()
            .evaluate(PLAN)
            .unwrap();
        assert_eq!(d.warnings[0].rule, "data.team.plans.warn");
        // By default nothing in `team` counts.
        assert_eq!(evaluate(&policies, PLAN).unwrap(), Decision::default());
        for bad in ["", "main.", "main..x", "1main", "main-x", "data main"] {
            let options = Options {
                namespace: bad.into(),
                ..Options::default()
            };
            assert!(
                matches!(
                    Evaluator::with_options(&policies, options),
                    Err(PolicyError::BadNamespace { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn an_address_comes_from_resource_else_address() {
        let d = eval(
            r#"package main
deny contains {"msg": "r", "resource": "a.b", "address": "ignored"} if { true }
deny contains {"msg": "a", "address": "c.d"} if { true }
deny contains {"msg": "n", "resource": 7} if { true }"#,
        )
        .unwrap();
        let got: Vec<_> = d
            .denials
            .iter()
            .map(|f| (f.message.as_str(), f.address.as_deref()))
            .collect();
        assert_eq!(got, [("a", Some("c.d")), ("n", None), ("r", Some("a.b"))]);
    }

    #[test]
    fn a_rule_that_is_not_a_set_of_messages_is_an_error_that_blocks() {
        for (source, rule) in [
            ("package main\ndeny := true\n", "data.main.deny"),
            ("package main\nwarn contains 7 if { true }\n", "data.main.warn"),
            (
                "package main\nviolation contains {\"msg\": 1} if { true }\n",
                "data.main.violation",
            ),
        ] {
            let e = eval(source).unwrap_err();
            assert!(
                matches!(e, PolicyError::BadResult { rule: ref r, .. } if r == rule),
                "{source}: {e}"
            );
        }
    }

    #[test]
    fn a_builtin_given_what_it_cannot_work_with_is_undefined_as_in_opa() {
        let d = eval(
            r#"package main
deny contains "startswith on a number" if { startswith(input.format_version_number, "1") }
warn contains "reached" if { true }"#,
        )
        .unwrap();
        assert!(!d.blocks(), "{d:?}");
        assert_eq!(messages(&d.warnings), ["reached"]);
    }

    #[test]
    fn a_policy_over_its_size_is_refused() {
        let big = format!("package main\n{}", "# padding\n".repeat(MAX_MODULE_BYTES / 10));
        let e = Evaluator::new(&[Policy::new("ns/big:big.rego", big)]).unwrap_err();
        assert!(
            matches!(e, PolicyError::ModuleTooLarge { ref policy, .. } if policy == "ns/big:big.rego"),
            "{e}"
        );
    }

    #[test]
    fn policies_over_their_total_size_are_refused() {
        let one = format!("package main\n{}", "# padding\n".repeat(MAX_MODULE_BYTES / 11));
        let policies: Vec<Policy> = (0..5).map(|i| Policy::new(format!("p{i}"), one.clone())).collect();
        let e = Evaluator::new(&policies).unwrap_err();
        assert!(matches!(e, PolicyError::PoliciesTooLarge { .. }), "{e}");
    }

    #[test]
    fn a_plan_over_its_size_is_refused() {
        let ev = Evaluator::new(&[Policy::new("p", "package main\n")]).unwrap();
        let plan = format!("{{\"pad\": \"{}\"}}", "x".repeat(MAX_PLAN_BYTES));
        assert!(matches!(ev.evaluate(&plan), Err(PolicyError::PlanTooLarge { .. })));
    }

    /// Nothing a plan holds makes the evaluation panic: every prefix of a plan (almost all of
    /// them not JSON), and a plan nested far deeper than any real one.
    #[test]
    fn a_plan_that_is_not_json_is_an_error_and_never_a_panic() {
        let ev = Evaluator::new(&[Policy::new(
            "p",
            "package main\ndeny contains rc.address if { some rc in input.resource_changes }\n",
        )])
        .unwrap();
        for end in (0..PLAN.len()).filter(|&i| PLAN.is_char_boundary(i)) {
            match ev.evaluate(&PLAN[..end]) {
                Err(PolicyError::Plan { .. }) => {}
                // A prefix can be a JSON document of its own (a number, whitespace-trimmed).
                Ok(d) => assert!(!d.blocks() || end == PLAN.len(), "{end}: {d:?}"),
                Err(e) => panic!("{end}: {e}"),
            }
        }
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(ev.evaluate(&deep).is_err() || ev.evaluate(&deep).is_ok_and(|d| !d.blocks()));
    }

    #[test]
    fn no_policies_decide_nothing() {
        assert_eq!(evaluate(&[], PLAN).unwrap(), Decision::default());
    }
}

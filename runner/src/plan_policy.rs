//! The policies on the plan (docs/policy.md): read from the inputs Secret's `policies.json`,
//! evaluated on the plan's JSON before the guard, and said as the run's result. Pure except
//! [`read`]: policies and plan text in, a verdict out.

use std::path::Path;

use captf_policy::{Decision, Finding, Policy, PolicyError};
use captf_shared::protocol::{POLICIES_KEY, POLICY_FINDING_BYTES, POLICY_WARNINGS_LIMIT, PlanPolicy};
use captf_shared::validation::cut_to_bytes;

/// The most denials a message lists (the rest are counted).
const LISTED_DENIALS: usize = 5;

/// What the policies say about a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No policy denied it; the warnings, as the result carries them (bounded).
    Pass { warnings: Vec<String> },
    /// A policy denied it, or the policies could not be evaluated (which never lets a plan
    /// through): the message says which rule, resource and why.
    Denied { message: String },
}

/// The policies the controller wrote beside the inputs; none when the file is not there (no
/// policy applies to the object). A file that does not read is an error: the plan is then
/// denied, never let through unchecked.
pub fn read(inputs_dir: &Path) -> Result<Vec<PlanPolicy>, String> {
    let path = inputs_dir.join(POLICIES_KEY);
    match std::fs::read(&path) {
        Ok(text) => serde_json::from_slice(&text).map_err(|e| format!("{} does not read: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("{} cannot be read: {e}", path.display())),
    }
}

/// One finding in words: `data.main.deny: aws_security_group.web: open to the world`.
fn words(f: &Finding) -> String {
    let text = match &f.address {
        Some(a) => format!("{}: {a}: {}", f.rule, f.message),
        None => format!("{}: {}", f.rule, f.message),
    };
    cut_to_bytes(&text, POLICY_FINDING_BYTES).into_owned()
}

/// The verdict on a plan (`plan_json`, what `show -json` printed) with hash `hash`. PURE but for
/// the evaluation's own thread and time limit.
pub fn check(policies: &[PlanPolicy], plan_json: &str, hash: &str) -> Verdict {
    if policies.is_empty() {
        return Verdict::Pass { warnings: Vec::new() };
    }
    let modules: Vec<Policy> = policies.iter().map(|p| Policy::new(&p.name, &p.source)).collect();
    verdict(captf_policy::evaluate(&modules, plan_json), hash)
}

/// The verdict of an evaluation's outcome. PURE.
pub fn verdict(outcome: Result<Decision, PolicyError>, hash: &str) -> Verdict {
    match outcome {
        Err(e) => Verdict::Denied {
            message: format!(
                "the policies on plan {hash} could not be evaluated, so it is not applied: {}",
                cut_to_bytes(&e.to_string(), 2 * POLICY_FINDING_BYTES)
            ),
        },
        Ok(d) if d.blocks() => {
            let listed: Vec<String> = d.denials.iter().take(LISTED_DENIALS).map(words).collect();
            let more = d.denials.len().saturating_sub(LISTED_DENIALS);
            let more = if more > 0 {
                format!("; and {more} more")
            } else {
                String::new()
            };
            Verdict::Denied {
                message: format!("policy denied plan {hash}: {}{more}", listed.join("; ")),
            }
        }
        Ok(d) => {
            let mut warnings: Vec<String> = d.warnings.iter().take(POLICY_WARNINGS_LIMIT).map(words).collect();
            let more = d.warnings.len().saturating_sub(POLICY_WARNINGS_LIMIT);
            if more > 0
                && let Some(last) = warnings.last_mut()
            {
                last.push_str(&format!(" (and {more} more warnings)"));
            }
            Verdict::Pass { warnings }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const OPEN_TO_THE_WORLD: &str = r#"package main
import rego.v1
deny contains {"msg": "opens the thing to the world", "resource": rc.address} if {
    some rc in input.resource_changes
    contains(rc.change.after.content, "0.0.0.0/0")
}
warn contains "the plan creates something" if {
    some rc in input.resource_changes
    "create" in rc.change.actions
}
"#;

    fn plan(content: &str) -> String {
        serde_json::json!({"resource_changes": [
            {"address": "captftest_thing.main", "change": {"actions": ["create"], "after": {"content": content}}}
        ]})
        .to_string()
    }

    fn policies(source: &str) -> Vec<PlanPolicy> {
        vec![PlanPolicy {
            name: "team-a/guardrails:world.rego".into(),
            source: source.into(),
        }]
    }

    #[test]
    fn a_deny_rule_denies_the_plan_naming_the_rule_the_resource_and_the_message() {
        let v = check(&policies(OPEN_TO_THE_WORLD), &plan("0.0.0.0/0"), "h1");
        assert_eq!(
            v,
            Verdict::Denied {
                message: "policy denied plan h1: data.main.deny: captftest_thing.main: opens the thing to the world"
                    .into()
            }
        );
    }

    #[test]
    fn a_warn_rule_lets_the_plan_through_with_its_warning() {
        let v = check(&policies(OPEN_TO_THE_WORLD), &plan("10.0.0.0/8"), "h1");
        assert_eq!(
            v,
            Verdict::Pass {
                warnings: vec!["data.main.warn: the plan creates something".into()]
            }
        );
    }

    #[test]
    fn a_policy_that_does_not_compile_denies_the_plan_with_its_error() {
        let v = check(&policies("package main\ndeny contains"), &plan("x"), "h1");
        let Verdict::Denied { message } = v else {
            panic!("{v:?}")
        };
        assert!(message.contains("could not be evaluated"), "{message}");
        assert!(message.contains("team-a/guardrails:world.rego"), "{message}");
    }

    #[test]
    fn without_policies_every_plan_passes() {
        assert_eq!(check(&[], "not even json", "h"), Verdict::Pass { warnings: vec![] });
    }

    #[test]
    fn many_findings_are_bounded() {
        let many = r#"package main
import rego.v1
deny contains sprintf("denial %d", [i]) if { some i in numbers.range(1, 40) }
"#;
        let Verdict::Denied { message } = check(&policies(many), &plan("x"), "h") else {
            panic!()
        };
        assert!(message.ends_with("; and 35 more"), "{message}");
        assert!(message.len() < 6 * POLICY_FINDING_BYTES, "{}", message.len());
    }

    #[test]
    fn a_policies_file_that_does_not_read_is_an_error_and_a_missing_one_is_none() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read(d.path()), Ok(vec![]));
        std::fs::write(d.path().join(POLICIES_KEY), "{not json").unwrap();
        assert!(read(d.path()).unwrap_err().contains("does not read"));
        std::fs::write(
            d.path().join(POLICIES_KEY),
            serde_json::to_string(&policies("x")).unwrap(),
        )
        .unwrap();
        assert_eq!(read(d.path()).unwrap(), policies("x"));
    }
}

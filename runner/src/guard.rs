//! The destructive guard (docs/rules.md): the plan summary, the plan hash and the verdict.
//! Pure: plain JSON in, plain data out.

use captf_shared::inputs::canonical_hash;
use captf_shared::protocol::{KeptPlan, PLAN_CHANGES_LIMIT, PlanSummary, PlannedChange};
use captf_shared::types::ApprovalMode;
use serde_json::Value;

/// What the runner learns from `show -json <planfile>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanFacts {
    /// SHA-256 of the canonical JSON of `resource_changes` (`[]` when absent).
    pub hash: String,
    pub summary: PlanSummary,
    /// Some change's actions contain `delete` (a delete or a replace in either order).
    pub destructive: bool,
    /// The resource changes that do something (no `no-op`, no `read`), at most
    /// [`PLAN_CHANGES_LIMIT`], in the plan's order: what a person approves.
    pub changes: Vec<PlannedChange>,
    /// Such changes left out of `changes`.
    pub more: usize,
}

impl PlanFacts {
    /// Some resource change does something (not only `no-op` or `read`).
    pub fn changes_anything(&self) -> bool {
        !self.changes.is_empty() || self.more > 0
    }

    /// The record kept for a person to approve, with `secrets` (the run's masked forms,
    /// [`captf_shared::mask::mask_list`]) masked in every address: an instance key can be a
    /// value from a Secret (`module.db["<password>"]`). The hash stays the plan's own, what an
    /// approval names.
    pub fn kept(&self, truncated: bool, secrets: &[String], policy_warnings: &[String]) -> KeptPlan {
        let changes = self
            .changes
            .iter()
            .map(|c| PlannedChange {
                address: captf_shared::mask::redact(&c.address, secrets),
                actions: c.actions.clone(),
            })
            .collect();
        KeptPlan {
            hash: self.hash.clone(),
            summary: self.summary,
            changes,
            more: self.more,
            truncated,
            policy_warnings: policy_warnings.to_vec(),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GuardError {
    #[error("failed to parse the plan JSON: {0}")]
    ParsePlan(String),
    #[error("failed to read the plan JSON: resource_changes is not a list")]
    ResourceChangesNotAList,
}

/// The actions of one resource change.
fn actions(change: &Value) -> Vec<&str> {
    change
        .get("change")
        .and_then(|c| c.get("actions"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Read the facts of a plan from the text `show -json` printed.
pub fn plan_facts_from_text(text: &[u8]) -> Result<PlanFacts, GuardError> {
    let v: Value = serde_json::from_slice(text).map_err(|e| GuardError::ParsePlan(e.to_string()))?;
    plan_facts(&v)
}

/// Read the facts of a plan from its `show -json` document.
pub fn plan_facts(plan: &Value) -> Result<PlanFacts, GuardError> {
    let empty = Value::Array(Vec::new());
    let changes = match plan.get("resource_changes") {
        None | Some(Value::Null) => &empty,
        Some(v @ Value::Array(_)) => v,
        Some(_) => return Err(GuardError::ResourceChangesNotAList),
    };
    let mut summary = PlanSummary::default();
    let mut destructive = false;
    let mut listed = Vec::new();
    let mut more = 0;
    for change in changes.as_array().map(Vec::as_slice).unwrap_or_default() {
        let a = actions(change);
        if a.contains(&"delete") {
            destructive = true;
        }
        if !a.is_empty() && a != ["no-op"] && a != ["read"] {
            if listed.len() < PLAN_CHANGES_LIMIT {
                let address = change.get("address").and_then(Value::as_str).unwrap_or("(no address)");
                listed.push(PlannedChange {
                    address: address.to_string(),
                    actions: a.iter().map(|s| s.to_string()).collect(),
                });
            } else {
                more += 1;
            }
        }
        match a.as_slice() {
            ["create"] => summary.add += 1,
            ["update"] => summary.change += 1,
            ["delete"] => summary.destroy += 1,
            ["delete", "create"] | ["create", "delete"] => summary.replace += 1,
            _ => {}
        }
    }
    Ok(PlanFacts {
        hash: canonical_hash(changes),
        summary,
        destructive,
        changes: listed,
        more,
    })
}

/// What the guard says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Apply the saved plan.
    Apply,
    /// A destructive plan without an approval: stop and wait for a person.
    Blocked,
    /// A destructive plan whose hash is not the approved one: stop and wait again.
    PlanChanged,
}

fn same_hash(a: &str, b: &str) -> bool {
    a.trim().eq_ignore_ascii_case(b.trim())
}

/// The guard. `Never` applies everything. `Destructive` holds a plan that deletes or replaces
/// something, `Always` a plan that changes anything; a held plan is applied when its hash is the
/// approved one, is `PlanChanged` when another plan was approved, and `Blocked` without any
/// approval. A plan the mode does not hold is applied whatever the approval says: a stale
/// approval only ever permits, it never stops a plan.
pub fn verdict(mode: ApprovalMode, facts: &PlanFacts, approved: Option<&str>) -> Verdict {
    let held = match mode {
        ApprovalMode::Never => false,
        ApprovalMode::Destructive => facts.destructive,
        ApprovalMode::Always => facts.changes_anything(),
    };
    if !held {
        return Verdict::Apply;
    }
    match approved {
        Some(a) if same_hash(a, &facts.hash) => Verdict::Apply,
        Some(_) => Verdict::PlanChanged,
        None => Verdict::Blocked,
    }
}

/// "1 to add, 0 to change, 1 to destroy, 1 to replace": for messages.
pub fn describe(summary: &PlanSummary) -> String {
    format!(
        "{} to add, {} to change, {} to destroy, {} to replace",
        summary.add, summary.change, summary.destroy, summary.replace
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn rc(addr: &str, actions: &[&str]) -> Value {
        json!({"address": addr, "type": "null_resource", "name": addr, "change": {"actions": actions, "before": null, "after": {"id": addr}}})
    }

    fn plan(changes: Vec<Value>) -> Value {
        json!({"format_version": "1.2", "resource_changes": changes})
    }

    #[test]
    fn a_secret_in_a_resource_address_is_masked_in_the_kept_plan() {
        let secret = "hunter2-\"quoted\"-password";
        let secrets = captf_shared::mask::mask_list([secret.to_string()]);
        // Terraform quotes a string instance key: `"` and `\` are escaped in the address.
        let key = serde_json::to_string(secret).unwrap();
        let p = plan(vec![
            rc(&format!("module.db[{key}].null_resource.x"), &["delete"]),
            rc(&format!("null_resource.raw[\"{secret}\"]"), &["create"]),
            rc("null_resource.plain", &["create"]),
        ]);
        let facts = plan_facts(&p).unwrap();
        let kept = facts.kept(true, &secrets, &[]);
        let record = serde_json::to_string(&kept).unwrap();
        assert!(!record.contains("hunter2"), "{record}");
        assert_eq!(kept.changes[0].address, "module.db[\"***\"].null_resource.x");
        assert_eq!(kept.changes[2].address, "null_resource.plain");
        assert_eq!(
            (kept.hash, kept.truncated),
            (facts.hash, true),
            "the hash is the plan's"
        );
    }

    #[test]
    fn summary_counts_each_kind_of_change() {
        let p = plan(vec![
            rc("a", &["create"]),
            rc("b", &["update"]),
            rc("c", &["delete"]),
            rc("d", &["delete", "create"]),
            rc("e", &["create", "delete"]),
            rc("f", &["no-op"]),
            rc("g", &["read"]),
        ]);
        let f = plan_facts(&p).unwrap();
        assert_eq!(
            f.summary,
            PlanSummary {
                add: 1,
                change: 1,
                destroy: 1,
                replace: 2
            }
        );
        assert!(f.destructive);
        assert_eq!(
            describe(&f.summary),
            "1 to add, 1 to change, 1 to destroy, 2 to replace"
        );
    }

    #[test]
    fn replace_in_either_order_is_destructive() {
        for actions in [&["delete", "create"][..], &["create", "delete"][..], &["delete"][..]] {
            let f = plan_facts(&plan(vec![rc("a", actions)])).unwrap();
            assert!(f.destructive, "{actions:?}");
            assert_eq!(verdict(ApprovalMode::Destructive, &f, None), Verdict::Blocked);
        }
    }

    #[test]
    fn the_plan_lists_each_change_that_does_something_up_to_the_limit() {
        let mut changes = vec![
            rc("a.keep", &["no-op"]),
            rc("data.x", &["read"]),
            rc("b.gone", &["delete"]),
        ];
        changes.push(rc("c.new", &["create", "delete"]));
        let f = plan_facts(&plan(changes)).unwrap();
        let listed: Vec<(&str, &str)> = f.changes.iter().map(|c| (c.address.as_str(), c.action())).collect();
        assert_eq!(listed, [("b.gone", "destroy"), ("c.new", "replace")]);
        assert_eq!(f.more, 0);

        let many: Vec<Value> = (0..PLAN_CHANGES_LIMIT + 3)
            .map(|i| rc(&format!("r.n{i}"), &["create"]))
            .collect();
        let f = plan_facts(&plan(many)).unwrap();
        assert_eq!((f.changes.len(), f.more), (PLAN_CHANGES_LIMIT, 3));
        assert_eq!(
            f.summary.add as usize,
            PLAN_CHANGES_LIMIT + 3,
            "the counts cover every change"
        );
    }

    #[test]
    fn plans_without_deletes_are_applied_under_block() {
        let f = plan_facts(&plan(vec![rc("a", &["create"]), rc("b", &["update"])])).unwrap();
        assert!(!f.destructive);
        assert_eq!(verdict(ApprovalMode::Destructive, &f, None), Verdict::Apply);
        // A stale approval of some other plan does not stop a plan that deletes nothing.
        assert_eq!(verdict(ApprovalMode::Destructive, &f, Some("0000")), Verdict::Apply);
    }

    #[test]
    fn destructive_plan_is_applied_with_the_matching_hash() {
        let f = plan_facts(&plan(vec![rc("a", &["delete"])])).unwrap();
        assert_eq!(verdict(ApprovalMode::Destructive, &f, Some(&f.hash)), Verdict::Apply);
        assert_eq!(
            verdict(ApprovalMode::Destructive, &f, Some(&f.hash.to_uppercase())),
            Verdict::Apply
        );
    }

    #[test]
    fn destructive_plan_with_another_approved_hash_is_plan_changed() {
        let f = plan_facts(&plan(vec![rc("a", &["delete"])])).unwrap();
        let other = plan_facts(&plan(vec![rc("b", &["delete"])])).unwrap();
        assert_ne!(f.hash, other.hash);
        assert_eq!(
            verdict(ApprovalMode::Destructive, &f, Some(&other.hash)),
            Verdict::PlanChanged
        );
    }

    #[test]
    fn always_holds_a_plan_that_only_creates_until_its_hash_is_approved() {
        let f = plan_facts(&plan(vec![rc("a", &["create"]), rc("b", &["update"])])).unwrap();
        assert_eq!(verdict(ApprovalMode::Always, &f, None), Verdict::Blocked);
        assert_eq!(verdict(ApprovalMode::Always, &f, Some("0000")), Verdict::PlanChanged);
        assert_eq!(verdict(ApprovalMode::Always, &f, Some(&f.hash)), Verdict::Apply);
        // Nothing to change: nothing to approve.
        let nothing = plan_facts(&plan(vec![rc("a", &["no-op"]), rc("d", &["read"])])).unwrap();
        assert_eq!(verdict(ApprovalMode::Always, &nothing, None), Verdict::Apply);
    }

    #[test]
    fn never_applies_destructive_plans_without_approval() {
        let f = plan_facts(&plan(vec![rc("a", &["delete"])])).unwrap();
        assert_eq!(verdict(ApprovalMode::Never, &f, None), Verdict::Apply);
        assert_eq!(verdict(ApprovalMode::Never, &f, Some("other")), Verdict::Apply);
    }

    #[test]
    fn plan_hash_is_the_canonical_hash_of_resource_changes() {
        let changes = vec![rc("a", &["delete"])];
        let f = plan_facts(&plan(changes.clone())).unwrap();
        assert_eq!(f.hash, canonical_hash(&Value::Array(changes)));
        // Other parts of the plan (timestamps, versions) do not change it.
        let mut p = plan(vec![rc("a", &["delete"])]);
        p["timestamp"] = json!("2026-11-29T10:00:00Z");
        p["terraform_version"] = json!("1.9.5");
        assert_eq!(plan_facts(&p).unwrap().hash, f.hash);
    }

    #[test]
    fn a_plan_without_resource_changes_hashes_as_an_empty_list() {
        let f = plan_facts(&json!({"format_version": "1.2"})).unwrap();
        assert_eq!(f.hash, canonical_hash(&json!([])));
        assert_eq!(f.summary, PlanSummary::default());
        assert!(!f.destructive);
    }

    #[test]
    fn bad_plan_json_is_an_error_not_a_panic() {
        assert!(plan_facts_from_text(b"not json").is_err());
        assert_eq!(
            plan_facts(&json!({"resource_changes": 3})),
            Err(GuardError::ResourceChangesNotAList)
        );
    }

    fn action_set() -> impl Strategy<Value = Vec<&'static str>> {
        prop_oneof![
            Just(vec!["create"]),
            Just(vec!["update"]),
            Just(vec!["delete"]),
            Just(vec!["delete", "create"]),
            Just(vec!["create", "delete"]),
            Just(vec!["no-op"]),
            Just(vec!["read"]),
            Just(vec!["forget"]),
        ]
    }

    proptest! {
        /// Whatever instance key a value from a Secret becomes, the kept record never holds it.
        #[test]
        fn no_secret_in_an_instance_key_reaches_the_kept_plan(
            secret in "[ -~]{4,30}",
            module in "[a-z]{1,8}",
        ) {
            let secrets = captf_shared::mask::mask_list([secret.clone()]);
            let key = serde_json::to_string(&secret).unwrap();
            let facts = plan_facts(&plan(vec![rc(&format!("module.{module}[{key}].null_resource.x"), &["create"])])).unwrap();
            let kept = facts.kept(false, &secrets, &[]);
            prop_assert!(!kept.changes[0].address.contains(&secret), "{}", kept.changes[0].address);
            prop_assert!(!kept.changes[0].address.contains(&key[1..key.len() - 1]), "{}", kept.changes[0].address);
        }
        #[test]
        fn block_stops_exactly_the_plans_with_a_delete(sets in prop::collection::vec(action_set(), 0..12)) {
            let changes: Vec<Value> = sets.iter().enumerate().map(|(i, a)| rc(&format!("r{i}"), a)).collect();
            let f = plan_facts(&plan(changes)).unwrap();
            let has_delete = sets.iter().any(|a| a.contains(&"delete"));
            prop_assert_eq!(f.destructive, has_delete);
            prop_assert_eq!(f.summary.is_destructive(), has_delete);
            let v = verdict(ApprovalMode::Destructive, &f, None);
            prop_assert_eq!(v == Verdict::Blocked, has_delete);
            // The approval of this very plan always lets it through.
            prop_assert_eq!(verdict(ApprovalMode::Destructive, &f, Some(&f.hash)), Verdict::Apply);
            prop_assert_eq!(verdict(ApprovalMode::Never, &f, None), Verdict::Apply);
        }

        #[test]
        fn always_holds_exactly_the_plans_that_change_something(sets in prop::collection::vec(action_set(), 0..12)) {
            let changes: Vec<Value> = sets.iter().enumerate().map(|(i, a)| rc(&format!("r{i}"), a)).collect();
            let f = plan_facts(&plan(changes)).unwrap();
            let changes_something = sets.iter().any(|a| *a != ["no-op"] && *a != ["read"]);
            prop_assert_eq!(verdict(ApprovalMode::Always, &f, None) == Verdict::Blocked, changes_something);
            prop_assert_eq!(verdict(ApprovalMode::Always, &f, Some(&f.hash)), Verdict::Apply);
            // Always holds at least what Destructive holds.
            if verdict(ApprovalMode::Destructive, &f, None) == Verdict::Blocked {
                prop_assert_eq!(verdict(ApprovalMode::Always, &f, None), Verdict::Blocked);
            }
        }

        #[test]
        fn plan_hash_ignores_key_order(sets in prop::collection::vec(action_set(), 1..6)) {
            let changes: Vec<Value> = sets.iter().enumerate().map(|(i, a)| rc(&format!("r{i}"), a)).collect();
            let text = serde_json::to_string(&plan(changes.clone())).unwrap();
            // Re-serialise with keys in reverse order of insertion.
            let reordered: Vec<Value> = changes.iter().map(|c| {
                let mut m = serde_json::Map::new();
                let obj = c.as_object().unwrap();
                for k in obj.keys().rev() { m.insert(k.clone(), obj[k].clone()); }
                Value::Object(m)
            }).collect();
            let a = plan_facts_from_text(text.as_bytes()).unwrap();
            let b = plan_facts(&plan(reordered)).unwrap();
            prop_assert_eq!(a.hash, b.hash);
        }
    }
}

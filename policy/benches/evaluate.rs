//! One evaluation of four conftest-style policies (strings, `violation` objects, a helper
//! function, a count over the whole plan) on a plan of 1,000 resource changes, in the shape
//! `tofu show -json` prints (docs/policy.md gives the measured time):
//!
//!     cargo bench -p captf-policy --bench evaluate

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

use captf_policy::{Evaluator, Policy};

const RESOURCES: usize = 1_000;

/// A plan of creates, updates, replacements and deletes of `captftest_thing`s, one in ten open
/// to the world.
fn plan() -> String {
    let actions = [
        json!(["create"]),
        json!(["update"]),
        json!(["delete", "create"]),
        json!(["delete"]),
        json!(["no-op"]),
    ];
    let changes: Vec<_> = (0..RESOURCES)
        .map(|i| {
            let cidr = if i % 10 == 0 { "0.0.0.0/0" } else { "10.0.0.0/8" };
            let name = if i % 7 == 0 { format!("prod-{i}") } else { format!("thing-{i}") };
            json!({
                "address": format!("captftest_thing.t[{i}]"),
                "mode": "managed",
                "type": "captftest_thing",
                "name": "t",
                "index": i,
                "provider_name": "captf.io/test/captftest",
                "change": {
                    "actions": actions[i % actions.len()],
                    "before": {"id": format!("thing-{name}"), "name": name, "content": "ingress tcp/22 from 10.0.0.0/8"},
                    "after": {"name": name, "content": format!("ingress tcp/22 from {cidr}")},
                    "after_unknown": {"id": true},
                    "before_sensitive": {},
                    "after_sensitive": {}
                }
            })
        })
        .collect();
    json!({"format_version": "1.2", "terraform_version": "1.12.6", "resource_changes": changes}).to_string()
}

const POLICY: &str = r#"package main

deny contains msg if {
  some rc in input.resource_changes
  some action in rc.change.actions
  action in {"create", "update"}
  contains(rc.change.after.content, "0.0.0.0/0")
  msg := sprintf("%s opens %q to the world", [rc.address, rc.change.after.content])
}

violation contains {"msg": msg, "resource": rc.address} if {
  some rc in input.resource_changes
  "delete" in rc.change.actions
  startswith(rc.change.before.name, "prod-")
  msg := sprintf("%s would delete %s", [rc.address, rc.change.before.name])
}

replaced(actions) if actions == ["delete", "create"]

warn contains msg if {
  some rc in input.resource_changes
  replaced(rc.change.actions)
  msg := sprintf("%s is replaced", [rc.address])
}

warn_summary contains msg if {
  n := count([rc | some rc in input.resource_changes; rc.change.actions != ["no-op"]])
  msg := sprintf("%d resources change", [n])
}
"#;

fn bench(c: &mut Criterion) {
    let plan = plan();
    let evaluator = Evaluator::new(&[Policy::new("bench.rego", POLICY)]).unwrap_or_else(|e| panic!("{e}"));
    let decision = evaluator.evaluate(&plan).unwrap_or_else(|e| panic!("{e}"));
    assert!(decision.blocks() && !decision.warnings.is_empty(), "{decision:?}");
    eprintln!(
        "plan: {} bytes, {RESOURCES} resource changes; {} denials, {} warnings",
        plan.len(),
        decision.denials.len(),
        decision.warnings.len()
    );
    c.bench_function("evaluate 4 policies on a 1,000-resource plan", |b| {
        b.iter(|| evaluator.evaluate(black_box(&plan)))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);

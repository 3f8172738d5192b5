//! `explain` reads big or hostile input files in time linear in their size, or refuses them.
#![allow(clippy::unwrap_used)]

use captf_core::explain::{ExplainError, MAX_FLOW_DEPTH, flow_depth, parse_items};
use serde_json::{Value, json};

fn job(i: usize) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": format!("j-{i}"), "namespace": "default"}})
}

#[test]
fn json_and_yaml_of_the_same_list_give_the_same_items() {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [job(0), job(1)]});
    let from_json = parse_items("j.json", &serde_json::to_string_pretty(&list).unwrap()).unwrap();
    let from_yaml = parse_items("j.yaml", &serde_yaml_ng::to_string(&list).unwrap()).unwrap();
    assert_eq!(from_json, from_yaml);
    assert_eq!(from_json[1].at, "items[1]");
}

#[test]
fn several_json_documents_one_after_another_are_several_items() {
    let text = format!("{}\n{}", job(0), job(1));
    let items = parse_items("j.json", &text).unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[1].at, "document 1");
}

#[test]
fn a_20_mb_json_list_is_parsed() {
    let items: Vec<Value> = (0..220_000).map(job).collect();
    let text = serde_json::to_string(&json!({"kind": "List", "items": items})).unwrap();
    assert!(text.len() > 20_000_000, "{}", text.len());
    assert_eq!(parse_items("big.json", &text).unwrap().len(), 220_000);
}

#[test]
fn yaml_nested_deeper_than_the_limit_is_refused_unparsed() {
    // 250 KB of flow mappings nested 40,000 deep: the YAML parser took 22 s over it.
    let d = 40_000;
    let text = "{a: ".repeat(d) + "1" + &"}".repeat(d);
    let err = parse_items("deep.yaml", &text).unwrap_err();
    assert!(matches!(err, ExplainError::Syntax { .. }), "{err}");
    assert!(
        err.to_string().contains(&format!("more than {MAX_FLOW_DEPTH}")),
        "{err}"
    );
    // The same nesting as JSON is refused by the JSON parser's own depth limit, then here.
    let text = "{\"a\": ".repeat(d) + "1" + &"}".repeat(d);
    assert!(parse_items("deep.json", &text).is_err());
}

#[test]
fn flow_depth_counts_brackets_outside_quoted_strings() {
    assert_eq!(flow_depth("a: [1, {b: [2]}]"), 3);
    assert_eq!(flow_depth(r#"a: "[[[[\"[[" "#), 0);
    assert_eq!(flow_depth("a: '[[['''"), 0);
    assert_eq!(flow_depth("a: 1\nb: 2\n"), 0);
}

//! A spec holding more than `MAX_SPEC_VALUES` JSON values is refused, for that alone, before
//! anything is built from it: the webhook counts its text, the controller its typed spec, with the
//! same count and the same violation.
#![allow(clippy::unwrap_used)]

use captf_shared::types::{ModuleSpec, TerraformSpec};
use captf_shared::validation::{
    MAX_SPEC_VALUES, count_json_values, count_serialized_values, spec_has_too_many_values, validate_spec,
};
use serde_json::json;

/// A valid spec whose `variables` hold one list of `zeros` zeros.
fn spec_with_zeros(zeros: usize) -> TerraformSpec {
    TerraformSpec {
        module: ModuleSpec {
            source: "git::https://example.com/m.git".into(),
            ..Default::default()
        },
        variables: Some([("x".to_string(), json!(vec![0; zeros]))].into()),
        ..Default::default()
    }
}

#[test]
fn a_spec_holding_more_than_max_spec_values_json_values_is_refused_for_that_alone() {
    // The spec object, module (key, object, key, string), variables (key, object), x (key, list).
    let overhead = 9;
    let at_limit = spec_with_zeros(MAX_SPEC_VALUES - overhead);
    assert_eq!(count_serialized_values(&at_limit, usize::MAX), Some(MAX_SPEC_VALUES));
    assert!(!spec_has_too_many_values(&at_limit));
    assert!(validate_spec(&at_limit, "spec").is_valid());

    let past = spec_with_zeros(MAX_SPEC_VALUES - overhead + 1);
    assert!(spec_has_too_many_values(&past));
    let report = validate_spec(&past, "spec.template.spec");
    assert_eq!(report.violation_count(), 1, "{}", report.message());
    let v = &report.violations[0];
    assert_eq!(v.field, "spec.template.spec");
    assert!(
        v.rule
            .starts_with(&format!("must hold at most {MAX_SPEC_VALUES} JSON values")),
        "{v}"
    );
    assert_eq!(v.value, MAX_SPEC_VALUES.to_string());
}

#[test]
fn a_spec_past_the_value_limit_is_refused_however_many_other_rules_it_breaks() {
    let mut past = spec_with_zeros(MAX_SPEC_VALUES);
    past.module.source = String::new();
    past.variables.as_mut().unwrap().insert("-bad name".into(), json!(1));
    let report = validate_spec(&past, "spec");
    assert_eq!(report.violation_count(), 1, "{}", report.message());
    assert_eq!(report.violations[0].field, "spec");
}

#[test]
fn counting_stops_past_the_limit_in_text_and_in_typed_values_alike() {
    let text = format!("[{}0]", "0,".repeat(10_000));
    assert_eq!(count_json_values(&text, 100_000), Some(10_002));
    assert_eq!(count_json_values(&text, 10_001), None);
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(count_serialized_values(&value, 100_000), Some(10_002));
    assert_eq!(count_serialized_values(&value, 10_001), None);
    // Keys count as values; text that is not JSON counts what came before the error.
    assert_eq!(
        count_json_values(r#"{"a": [1, "x", null, {"b": true}], "c": 2.5}"#, 100),
        Some(11)
    );
    assert_eq!(count_json_values("[0, 0, oops", 100), Some(3));
}

//! A report stays small whatever the spec: it keeps the first violations and counts the rest, and
//! its bounded message lists a few by field path within a byte budget.
#![allow(clippy::unwrap_used)]

use captf_shared::types::{ModuleSpec, TerraformSpec};
use captf_shared::validation::{FieldPath, MAX_KEPT_VIOLATIONS, MAX_KEPT_WARNINGS, Report, validate_spec};
use serde_json::json;

fn spec_with_bad_variable_names(n: usize) -> TerraformSpec {
    TerraformSpec {
        module: ModuleSpec {
            source: "git::https://example.com/m.git".into(),
            ..Default::default()
        },
        variables: Some((0..n).map(|i| (format!("-{i:06}"), json!(0))).collect()),
        ..Default::default()
    }
}

#[test]
fn a_report_keeps_the_first_violations_and_counts_the_rest() {
    let r = validate_spec(&spec_with_bad_variable_names(20_000), "spec");
    assert_eq!(r.violations.len(), MAX_KEPT_VIOLATIONS);
    assert_eq!(r.violation_count(), 20_000);
    assert!(!r.is_valid());
    assert_eq!(r.violations[0].field, "spec.variables[-000000]");
}

#[test]
fn a_report_keeps_the_first_warnings_and_counts_the_rest() {
    let mut r = Report::default();
    for i in 0..MAX_KEPT_WARNINGS + 5 {
        r.warning(&FieldPath::new("spec").index(i), "doubtful", &i);
    }
    assert_eq!(r.warnings.len(), MAX_KEPT_WARNINGS);
    assert_eq!(r.omitted_warnings, 5);
    assert!(r.is_valid());
}

#[test]
fn merging_reports_keeps_the_bound_and_the_count() {
    let mut a = validate_spec(&spec_with_bad_variable_names(200), "spec");
    let b = validate_spec(&spec_with_bad_variable_names(200), "spec");
    a.merge(b);
    assert_eq!(a.violations.len(), MAX_KEPT_VIOLATIONS);
    assert_eq!(a.violation_count(), 400);
}

#[test]
fn bounded_message_lists_at_most_n_violations_by_field_path_and_counts_the_rest() {
    let mut r = Report::default();
    for field in ["spec.z", "spec.b", "spec.a", "spec.y", "spec.c"] {
        r.violation(&FieldPath::new(field), "is wrong", &1);
    }
    assert_eq!(
        r.bounded_message(2, 4096),
        "spec.a: is wrong (got 1); spec.b: is wrong (got 1); and 3 more"
    );
    assert_eq!(r.bounded_message(5, 4096).matches("is wrong").count(), 5);
    assert!(!r.bounded_message(5, 4096).contains("more"));
}

#[test]
fn bounded_message_counts_the_omitted_violations_too() {
    let r = validate_spec(&spec_with_bad_variable_names(20_000), "spec");
    let msg = r.bounded_message(20, 4096);
    assert!(msg.ends_with(&format!("; and {} more", 20_000 - 20)), "{msg}");
    assert_eq!(msg.matches("name must match").count(), 20);
}

#[test]
fn bounded_message_stays_within_its_byte_budget_even_with_huge_field_paths() {
    let mut r = Report::default();
    for i in 0..10 {
        let key = format!("{i}{}", "k".repeat(100_000));
        r.violation(&FieldPath::new("spec.variables").key(&key), "name must match", &key);
    }
    let msg = r.bounded_message(20, 4096);
    let tail = msg.rfind("; and ").unwrap();
    assert!(tail <= 4096, "{} bytes before the tail", tail);
    assert!(msg.contains('…'));
    assert!(msg.ends_with(" more"), "{msg}");
}

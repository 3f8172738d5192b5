//! Fuzz entry points: arbitrary bytes in, no panic out, plus the invariants each one asserts.
//! The coverage-guided targets under `fuzz/` call these, and so does the corpus replay test
//! (`tests/fuzz_corpus.rs`), so a crash the fuzzer finds is replayed by `cargo test` once its input
//! is in the corpus.

use serde_json::Value;

use crate::defaults::apply_defaults;
use crate::types::SERVED_KINDS;
use crate::validation::{MAX_KEPT_VIOLATIONS, MAX_KEPT_WARNINGS, parse_object, validate_create, validate_update};

/// The first byte picks the kind; the rest is the object's JSON. Parsing, defaulting and
/// validation must not panic; defaults are idempotent; a report keeps its bounds; the bounded
/// message stays within its budget.
pub fn validation(data: &[u8]) {
    let Some((&pick, json)) = data.split_first() else {
        return;
    };
    let kind = SERVED_KINDS[usize::from(pick) % SERVED_KINDS.len()];
    let Ok(value) = serde_json::from_slice::<Value>(json) else {
        return;
    };
    let parsed = match parse_object(kind, &value) {
        Ok(obj) => obj,
        Err(report) => {
            assert!(!report.is_valid(), "a failed parse reports a violation");
            check_message(&report);
            return;
        }
    };
    let mut defaulted = parsed.clone();
    apply_defaults(&mut defaulted);
    let mut twice = defaulted.clone();
    apply_defaults(&mut twice);
    assert!(twice == defaulted, "defaults are idempotent");
    for report in [
        validate_create(&parsed),
        validate_create(&defaulted),
        validate_update(&parsed, &defaulted),
        validate_update(&defaulted, &parsed),
    ] {
        assert!(report.violations.len() <= MAX_KEPT_VIOLATIONS);
        assert!(report.warnings.len() <= MAX_KEPT_WARNINGS);
        check_message(&report);
    }
    assert!(
        validate_update(&parsed, &parsed).violation_count() <= validate_create(&parsed).violation_count(),
        "an unchanged spec never gains violations on update"
    );
}

fn check_message(report: &crate::validation::Report) {
    let msg = report.bounded_message(20, 4096);
    let listed = msg.rfind("; and ").unwrap_or(msg.len());
    assert!(listed <= 4096, "bounded message is {listed} bytes");
}

/// A termination message: parsing must not panic, and a parsed result re-serialized for the
/// termination log fits its limit and parses back to the same result and phase.
pub fn runner_result(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(result) = crate::protocol::RunnerResult::parse(text) else {
        return;
    };
    let message = result.to_termination_message();
    assert!(message.len() <= crate::protocol::TERMINATION_MESSAGE_LIMIT);
    match crate::protocol::RunnerResult::parse(&message) {
        Ok(back) => assert!(back.result == result.result && back.phase == result.phase),
        Err(e) => panic!("the termination message does not parse back: {e}"),
    }
}

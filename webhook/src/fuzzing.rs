//! Fuzz entry point: an arbitrary body through both webhooks, no panic out, and the bounds of
//! every answer asserted. The coverage-guided target under `fuzz/` and the corpus replay test
//! (`tests/fuzz_corpus.rs`) both call it.

use serde_json::Value;

use crate::admission::{MAX_MESSAGE_BYTES, MAX_WARNING_BYTES, MAX_WARNINGS, Route, review};

/// Review `data` as `/mutate` and as `/validate`: an answer is a JSON AdmissionReview whose
/// denial message and warnings keep their bounds, and whose warnings hold no control character.
pub fn review_body(data: &[u8]) {
    for route in [Route::Mutate, Route::Validate] {
        let Ok(reviewed) = review(route, data) else {
            continue;
        };
        let answer: Value = match serde_json::from_slice(&reviewed.body) {
            Ok(v) => v,
            Err(e) => panic!("the answer is not JSON: {e}"),
        };
        let response = &answer["response"];
        if let Some(message) = response["status"]["message"].as_str() {
            let listed = message.rfind("; and ").unwrap_or(message.len());
            assert!(listed <= MAX_MESSAGE_BYTES, "denial message of {listed} bytes");
        }
        if let Some(warnings) = response["warnings"].as_array() {
            assert!(warnings.len() <= MAX_WARNINGS);
            for w in warnings.iter().filter_map(Value::as_str) {
                assert!(w.len() <= MAX_WARNING_BYTES, "warning of {} bytes", w.len());
                assert!(!w.chars().any(char::is_control), "control character in {w:?}");
            }
        }
    }
}

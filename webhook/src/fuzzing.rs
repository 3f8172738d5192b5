//! Fuzz entry points: an arbitrary body through both admission webhooks, or through the
//! conversion webhook, no panic out, and the bounds of every answer asserted. The coverage-guided target under `fuzz/` and the corpus replay test
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

/// Review `data` as `/convert`: an answer is a JSON ConversionReview with the request's uid that
/// either converted every object to the desired version or failed with a bounded message and no
/// object.
pub fn convert_body(data: &[u8]) {
    let Ok(reviewed) = crate::convert::review(data) else {
        return;
    };
    let answer: Value = match serde_json::from_slice(&reviewed.body) {
        Ok(v) => v,
        Err(e) => panic!("the answer is not JSON: {e}"),
    };
    assert_eq!(answer["kind"], "ConversionReview");
    let request: Value = serde_json::from_slice(data).unwrap_or_default();
    let response = &answer["response"];
    assert_eq!(response["uid"], request["request"]["uid"]);
    let converted = response["convertedObjects"].as_array().map_or(0, Vec::len);
    match response["result"]["status"].as_str() {
        Some("Success") => {
            let sent = request["request"]["objects"].as_array().map_or(0, Vec::len);
            assert_eq!(converted, sent, "every object comes back");
            for o in response["convertedObjects"].as_array().into_iter().flatten() {
                assert_eq!(o["apiVersion"], request["request"]["desiredAPIVersion"]);
            }
        }
        Some("Failure") => {
            assert_eq!(converted, 0, "a failed review converts nothing");
            let message = response["result"]["message"].as_str().unwrap_or_default();
            assert!(
                message.len() <= MAX_MESSAGE_BYTES,
                "failure message of {} bytes",
                message.len()
            );
        }
        other => panic!("result status {other:?}"),
    }
}

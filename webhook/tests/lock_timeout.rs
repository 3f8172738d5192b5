//! A lock timeout nobody chose follows a lowered deadline: an update that lowers
//! `activeDeadlineSeconds` below the defaulted `lockTimeoutSeconds` is patched by the mutating
//! route (with a warning saying so) and then admitted, instead of being refused for a value the
//! user never set. A value the user chose is kept and the refusal names it.
#![allow(clippy::unwrap_used)]

mod common;

use base64::Engine;
use captf_webhook::admission::{Route, review};
use common::fixture;
use serde_json::{Value, json};

/// The accepted update fixture (deadline 3600, lock timeout 300 on both sides) with the new
/// object's jobs set as given.
fn update_with(jobs: Value) -> Value {
    let mut r = fixture("cluster-update-accepted");
    for (k, v) in jobs.as_object().unwrap() {
        r["request"]["object"]["spec"]["jobs"][k] = v.clone();
    }
    r
}

fn answer(route: Route, r: &Value) -> Value {
    serde_json::from_slice(&review(route, &serde_json::to_vec(r).unwrap()).unwrap().body).unwrap()
}

/// The review with the mutating answer's patch applied to its object.
fn patched(r: &Value, resp: &Value) -> Value {
    let mut r = r.clone();
    if let Some(p) = resp["response"]["patch"].as_str() {
        let ops: json_patch::Patch =
            serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(p).unwrap()).unwrap();
        json_patch::patch(&mut r["request"]["object"], &ops).unwrap();
    }
    r
}

#[test]
fn lowering_the_deadline_below_a_defaulted_lock_timeout_moves_it_to_the_new_default_with_a_warning() {
    // The seed's numbers: 3600 and its default 300; the deadline lowered to 120.
    let r = update_with(json!({ "activeDeadlineSeconds": 120 }));
    let mutated = answer(Route::Mutate, &r);
    assert_eq!(mutated["response"]["allowed"], true, "{mutated}");
    let warnings = mutated["response"]["warnings"].to_string();
    assert!(
        warnings.contains("spec.jobs.lockTimeoutSeconds: 300 was the default for the old activeDeadlineSeconds")
            && warnings.contains("follows it to 60"),
        "{warnings}"
    );
    let r = patched(&r, &mutated);
    assert_eq!(r["request"]["object"]["spec"]["jobs"]["lockTimeoutSeconds"], 60);
    let validated = answer(Route::Validate, &r);
    assert_eq!(validated["response"]["allowed"], true, "{validated}");
}

#[test]
fn a_lock_timeout_the_user_sets_or_that_still_fits_is_never_changed() {
    // Changed in the same update: kept, and refused with the value named.
    let r = update_with(json!({ "activeDeadlineSeconds": 120, "lockTimeoutSeconds": 200 }));
    let mutated = answer(Route::Mutate, &r);
    let r = patched(&r, &mutated);
    assert_eq!(r["request"]["object"]["spec"]["jobs"]["lockTimeoutSeconds"], 200);
    let validated = answer(Route::Validate, &r);
    assert_eq!(validated["response"]["allowed"], false);
    assert!(
        validated["response"]["status"]["message"].as_str().unwrap().contains(
            "spec.jobs.lockTimeoutSeconds: must be less than spec.jobs.activeDeadlineSeconds (120) (got 200)"
        ),
        "{validated}"
    );
    // Still below the new deadline: nothing to do.
    let r = update_with(json!({ "activeDeadlineSeconds": 600 }));
    let mutated = answer(Route::Mutate, &r);
    assert_eq!(
        patched(&r, &mutated)["request"]["object"]["spec"]["jobs"]["lockTimeoutSeconds"],
        300
    );
    assert!(mutated["response"]["warnings"].is_null() || mutated["response"]["warnings"] == json!([]));
}

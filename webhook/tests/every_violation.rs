//! A denial lists every violation at once: a type or enum error does not hide the value rules'
//! violations elsewhere in the spec (docs/api.md, "The webhook reports every violation").
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use captf_webhook::AppState;
use captf_webhook::admission::{MAX_LISTED_VIOLATIONS, MAX_MESSAGE_BYTES};
use captf_webhook::metrics::Metrics;
use common::fixture;
use serde_json::{Value, json};

async fn validate(review: &Value) -> Value {
    common::validate_review(AppState::new(Arc::new(Metrics::new())), review).await
}

/// The denial's message, after checking it is a 422 Invalid.
fn denial(resp: &Value) -> String {
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    assert_eq!(resp["response"]["status"]["code"], 422, "{resp}");
    assert_eq!(resp["response"]["status"]["reason"], "Invalid", "{resp}");
    resp["response"]["status"]["message"].as_str().unwrap().to_string()
}

/// The user report's spec: a history limit of -1, a lock timeout not below the Job deadline and a
/// `deletionPolicy` that is no value of its enum.
fn reported_spec() -> Value {
    json!({
        "module": {"source": "hashicorp/consul/aws"},
        "jobs": {"failedJobsHistoryLimit": -1, "activeDeadlineSeconds": 3600, "lockTimeoutSeconds": 3600},
        "deletionPolicy": "Sometimes",
    })
}

const REPORTED: &str = "spec.deletionPolicy: must be one of Destroy, Orphan (got \"Sometimes\"); \
     spec.jobs.failedJobsHistoryLimit: must be at least 0 (got -1); \
     spec.jobs.lockTimeoutSeconds: must be less than spec.jobs.activeDeadlineSeconds (3600) (got 3600)";

#[tokio::test]
async fn every_violation_is_reported_in_one_answer_type_and_enum_errors_included() {
    let mut review = fixture("cluster-create-accepted");
    review["request"]["object"]["spec"] = reported_spec();
    assert_eq!(denial(&validate(&review).await), REPORTED);
}

#[tokio::test]
async fn an_update_to_a_spec_with_an_enum_error_lists_the_other_violations_too() {
    let mut review = fixture("cluster-update-accepted");
    let mut spec = reported_spec();
    // The endpoint, once set, stays (else that is one more violation, see below).
    spec["controlPlaneEndpoint"] = review["request"]["oldObject"]["spec"]["controlPlaneEndpoint"].clone();
    review["request"]["object"]["spec"] = spec;
    assert_eq!(denial(&validate(&review).await), REPORTED);
}

#[tokio::test]
async fn an_update_whose_spec_does_not_parse_still_hears_of_the_immutable_fields_it_changes() {
    let mut review = fixture("cluster-update-accepted");
    review["request"]["oldObject"]["spec"]["controlPlaneEndpoint"] = json!({"host": "10.0.0.1", "port": 6443});
    let mut spec = reported_spec();
    spec["controlPlaneEndpoint"] = json!({"host": "10.9.9.9", "port": 6443});
    review["request"]["object"]["spec"] = spec;
    let message = denial(&validate(&review).await);
    assert_eq!(
        message,
        format!(
            "spec.controlPlaneEndpoint: is immutable once set (was {{\"host\":\"10.0.0.1\",\"port\":6443}}) (got {{\"host\":\"10.9.9.9\",\"port\":6443}}); {REPORTED}"
        )
    );
    // Left as it was: only the type errors.
    review["request"]["object"]["spec"]["controlPlaneEndpoint"] = json!({"host": "10.0.0.1", "port": 6443});
    assert_eq!(denial(&validate(&review).await), REPORTED);
}

#[tokio::test]
async fn a_template_update_whose_spec_does_not_parse_also_hears_that_templates_are_immutable() {
    let mut review = fixture("machinetemplate-update-accepted");
    review["request"]["object"]["spec"]["template"]["spec"]["deletionPolicy"] = json!("Sometimes");
    let message = denial(&validate(&review).await);
    assert!(
        message.contains("deletionPolicy: must be one of Destroy, Orphan"),
        "{message}"
    );
    assert!(
        message.contains("spec: is immutable: a template cannot be changed in place"),
        "{message}"
    );
}

#[tokio::test]
async fn many_type_errors_and_many_rule_violations_still_make_a_bounded_answer() {
    let env: Vec<Value> = (0..300)
        .map(|i| {
            if i % 2 == 0 {
                json!({"name": format!("CAPTF_{i}")})
            } else {
                json!({"name": i})
            }
        })
        .collect();
    let mut review = fixture("cluster-create-accepted");
    review["request"]["object"]["spec"] = json!({
        "module": {"source": "hashicorp/consul/aws"},
        "jobs": {"failedJobsHistoryLimit": -1, "env": env},
        "deletionPolicy": "Sometimes",
    });
    let msg = denial(&validate(&review).await);
    let (listed, tail) = msg.rsplit_once("; and ").unwrap();
    assert!(listed.len() <= MAX_MESSAGE_BYTES, "{} bytes", listed.len());
    assert_eq!(listed.split("; spec.").count(), MAX_LISTED_VIOLATIONS, "{msg}");
    // Every one of them is counted: 151 type and enum errors, 150 reserved names, the env count and
    // the history limit.
    assert_eq!(tail, format!("{} more", 303 - MAX_LISTED_VIOLATIONS), "{msg}");
    // The first ones by field path: the enum error, then type errors and rule violations mixed.
    assert!(
        listed.starts_with("spec.deletionPolicy: must be one of Destroy, Orphan"),
        "{msg}"
    );
    assert!(
        listed.contains("spec.jobs.env[101].name: must be a string (got 101)"),
        "{msg}"
    );
    assert!(listed.contains("must not start with CAPTF_"), "{msg}");
}

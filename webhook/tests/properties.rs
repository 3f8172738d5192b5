//! Property tests: no body makes the webhook panic, and the defaults patch is a law over specs.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use captf_shared::defaults::apply_defaults;
use captf_shared::types::CaptfObject;
use captf_webhook::admission::{Route, review};
use captf_webhook::metrics::Metrics;
use captf_webhook::{AppState, CONVERT_PATH, MUTATE_PATH, VALIDATE_PATH, router};
use common::{fixture, response_patch};
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use tower::ServiceExt;

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("TerraformCluster"),
            Just("CREATE"),
            Just("UPDATE"),
            Just("admission.k8s.io/v1"),
            Just("30m"),
            Just("0")
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    "[a-zA-Z]{1,8}",
                    Just("spec".to_string()),
                    Just("jobs".to_string()),
                    Just("module".to_string()),
                    Just("metadata".to_string()),
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A JSON pointer into a fixture review where random JSON is planted.
fn any_place() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("/request"),
        Just("/request/uid"),
        Just("/request/kind"),
        Just("/request/kind/kind"),
        Just("/request/operation"),
        Just("/request/object"),
        Just("/request/object/spec"),
        Just("/request/object/spec/jobs"),
        Just("/request/object/spec/jobs/activeDeadlineSeconds"),
        Just("/request/object/spec/drift"),
        Just("/request/object/spec/variables"),
        Just("/request/object/spec/variablesFrom"),
        Just("/request/object/spec/module"),
        Just("/request/object/metadata"),
        Just("/request/oldObject"),
        Just("/request/oldObject/spec"),
        Just("/request/dryRun"),
        Just("/request/subResource"),
        Just("/apiVersion"),
    ]
}

fn any_fixture() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("cluster-create-accepted"),
        Just("cluster-update-rejected"),
        Just("machinepool-create-rejected"),
        Just("machine-update-accepted"),
        Just("machinetemplate-create-accepted"),
        Just("machinetemplate-update-rejected"),
    ]
}

fn check_answer(req: &Value, body: &[u8]) {
    let resp: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(resp["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(resp["response"]["uid"], req["request"]["uid"], "uid always echoed");
    if resp["response"]["allowed"] == false {
        assert_eq!(resp["response"]["status"]["code"], 422);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_byte_string_makes_the_review_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        for route in [Route::Mutate, Route::Validate] {
            let _ = review(route, &bytes);
        }
        let _ = captf_webhook::convert::review(&bytes);
    }

    #[test]
    fn no_json_planted_in_a_conversion_review_makes_it_panic_and_answers_keep_their_bounds(
        place in prop_oneof![
            Just("/request/objects/0"),
            Just("/request/objects/0/status"),
            Just("/request/objects/0/status/pendingPlan"),
            Just("/request/objects/0/metadata/annotations"),
            Just("/request/objects/0/apiVersion"),
            Just("/request/desiredAPIVersion"),
            Just("/request/uid"),
            Just("/request"),
        ],
        planted in any_json(),
    ) {
        let mut req = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "c-1", "desiredAPIVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "objects": [{
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformCluster",
                "metadata": {"name": "a", "annotations": {"x": "y"}},
                "spec": {}, "status": {"ready": true, "pendingPlan": {"adds": 1}},
            }]},
        });
        if let Some(slot) = req.pointer_mut(place) {
            *slot = planted;
        }
        captf_webhook::fuzzing::convert_body(&serde_json::to_vec(&req).unwrap());
    }

    #[test]
    fn no_json_planted_in_a_review_makes_it_panic_and_answers_echo_the_uid(
        name in any_fixture(),
        place in any_place(),
        planted in any_json(),
    ) {
        let mut req = fixture(name);
        if let Some(slot) = req.pointer_mut(place) {
            *slot = planted;
        }
        let bytes = serde_json::to_vec(&req).unwrap();
        for route in [Route::Mutate, Route::Validate] {
            if let Ok(answer) = review(route, &bytes) {
                check_answer(&req, &answer.body);
            }
        }
    }

    #[test]
    fn the_router_answers_any_body_with_a_status_and_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        content_type in prop_oneof![Just("application/json"), Just("text/plain"), Just("")],
        path in prop_oneof![Just(MUTATE_PATH), Just(VALIDATE_PATH), Just(CONVERT_PATH)],
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let status = rt.block_on(async {
            let mut req = Request::builder().method(Method::POST).uri(path);
            if !content_type.is_empty() {
                req = req.header(header::CONTENT_TYPE, content_type);
            }
            let app = router(AppState::new(Arc::new(Metrics::new())));
            app.oneshot(req.body(Body::from(bytes)).unwrap()).await.unwrap().status()
        });
        prop_assert!(
            [StatusCode::OK, StatusCode::BAD_REQUEST, StatusCode::UNSUPPORTED_MEDIA_TYPE].contains(&status),
            "{status}"
        );
    }
}

fn opt<T: Strategy>(s: T) -> impl Strategy<Value = Option<T::Value>> {
    prop::option::of(s)
}

/// Specs of every shape the types accept: each optional field set or not.
fn any_spec() -> impl Strategy<Value = Value> {
    (
        opt(prop::collection::btree_map(
            "[a-z_]{1,6}",
            any::<i32>().prop_map(|n| json!(n)),
            0..3,
        )),
        opt(opt(60i64..=604_800)),
        opt(0i64..=1000),
        opt(-1i32..=10),
        opt(prop_oneof![Just("0"), Just("30m"), Just("1h30m"), Just("2m")]),
        opt(prop_oneof![Just("Auto"), Just("Manual")]),
        opt(prop_oneof![Just("Block"), Just("Allow")]),
        opt(prop_oneof![Just("Destroy"), Just("Orphan")]),
        opt(any::<bool>()),
        any::<bool>(),
    )
        .prop_map(
            |(vars, deadline, lock, failed, interval, remediation, guard, deletion, paused, unknown)| {
                let mut spec = json!({"module": {"source": "git::https://example.com/m.git"}});
                if let Some(v) = vars {
                    spec["variables"] = json!(v);
                }
                if deadline.is_some() || lock.is_some() || failed.is_some() {
                    let mut jobs = json!({});
                    if let Some(Some(d)) = deadline {
                        jobs["activeDeadlineSeconds"] = json!(d);
                    }
                    if let Some(l) = lock {
                        jobs["lockTimeoutSeconds"] = json!(l);
                    }
                    if let Some(f) = failed {
                        jobs["failedJobsHistoryLimit"] = json!(f);
                    }
                    spec["jobs"] = jobs;
                }
                if interval.is_some() || remediation.is_some() {
                    let mut drift = json!({});
                    if let Some(i) = interval {
                        drift["interval"] = json!(i);
                    }
                    if let Some(r) = remediation {
                        drift["remediation"] = json!(r);
                    }
                    spec["drift"] = drift;
                }
                if let Some(g) = guard {
                    spec["guard"] = json!({"destructive": g});
                }
                if let Some(d) = deletion {
                    spec["deletionPolicy"] = json!(d);
                }
                if let Some(p) = paused {
                    spec["paused"] = json!(p);
                }
                if unknown {
                    spec["aFieldFromTheFuture"] = json!({"x": 1});
                }
                spec
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn for_any_spec_the_patch_applied_to_the_object_equals_apply_defaults(
        spec in any_spec(),
        name in prop_oneof![Just("cluster-create-accepted"), Just("machinetemplate-create-accepted")],
    ) {
        let mut req = fixture(name);
        if name.starts_with("machinetemplate") {
            req["request"]["object"]["spec"]["template"]["spec"] = spec;
        } else {
            req["request"]["object"]["spec"] = spec;
        }
        let object = req["request"]["object"].clone();
        let kind = req["request"]["kind"]["kind"].as_str().unwrap().to_string();
        let answer = review(Route::Mutate, &serde_json::to_vec(&req).unwrap()).unwrap();
        let resp: Value = serde_json::from_slice(&answer.body).unwrap();
        let mut patched = object.clone();
        if let Some(patch) = response_patch(&resp) {
            json_patch::patch(&mut patched, &patch).unwrap();
        }
        let mut expected = CaptfObject::from_kind_value(&kind, object.clone()).unwrap();
        apply_defaults(&mut expected);
        prop_assert_eq!(CaptfObject::from_kind_value(&kind, patched.clone()).unwrap(), expected);
        // Unknown fields survive; applying the defaults twice changes nothing.
        prop_assert_eq!(&patched["metadata"], &object["metadata"]);
        let mut again = req.clone();
        again["request"]["object"] = patched;
        let second = review(Route::Mutate, &serde_json::to_vec(&again).unwrap()).unwrap();
        let second: Value = serde_json::from_slice(&second.body).unwrap();
        prop_assert!(second["response"].get("patch").is_none(), "{}", second);
    }

    /// The patch the webhook answers (one walk, none when the defaults change nothing typed) is
    /// exactly the definition: `json_patch::diff` of the raw spec against the raw spec with every
    /// default filled in (`patch::fill_missing`), and no patch where that diff is empty.
    #[test]
    fn for_any_spec_the_answered_patch_is_the_diff_against_the_filled_spec(spec in any_spec()) {
        let mut req = fixture("cluster-create-accepted");
        req["request"]["object"]["spec"] = spec.clone();
        let object = req["request"]["object"].clone();
        let answer = review(Route::Mutate, &serde_json::to_vec(&req).unwrap()).unwrap();
        let resp: Value = serde_json::from_slice(&answer.body).unwrap();
        let mut defaulted = CaptfObject::from_kind_value("TerraformCluster", object).unwrap();
        apply_defaults(&mut defaulted);
        let defaulted_spec = match &defaulted {
            CaptfObject::Cluster(c) => serde_json::to_value(&c.spec).unwrap(),
            _ => unreachable!("a cluster fixture"),
        };
        let mut filled = spec.clone();
        captf_webhook::patch::fill_missing(&mut filled, &defaulted_spec);
        let expected = json_patch::diff(&json!({"spec": spec}), &json!({"spec": filled}));
        match response_patch(&resp) {
            Some(patch) => prop_assert_eq!(patch, expected),
            None => prop_assert!(expected.0.is_empty(), "no patch answered, but the definition gives {:?}", expected),
        }
    }
}

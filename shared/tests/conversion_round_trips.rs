//! Conversion between v1alpha1 and v1beta1 loses nothing, for every kind (docs/api.md, "Versions
//! and conversion"): v1alpha1 → v1beta1 → v1alpha1 and v1beta1 → v1alpha1 → v1beta1 give back
//! the object they started from, whatever else it carries.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use captf_shared::conversion::convert;
use captf_shared::types::SERVED_KINDS;

const ALPHA: &str = "infrastructure.cluster.x-k8s.io/v1alpha1";
const BETA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";

/// Any JSON (bounded): what a spec, a condition or a field of a later release may hold.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z0-9 ./:-]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-zA-Z]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Annotations that are absent or not empty (the API server drops an empty map).
fn annotations() -> impl Strategy<Value = Option<Value>> {
    prop::option::of(
        prop::collection::btree_map("[a-z]{1,6}\\.io/[a-z-]{1,10}", "[ -~]{0,16}", 1..4)
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k, Value::from(v))).collect())),
    )
}

/// A status of either version: the pending plan's counts under the version's names, and other
/// fields of any shape.
fn status(v1alpha1: bool) -> impl Strategy<Value = Option<Value>> {
    let counts = if v1alpha1 {
        ["adds", "changes", "destroys", "replaces"]
    } else {
        ["add", "change", "destroy", "replace"]
    };
    prop::option::of(
        (
            prop::option::of(any::<bool>()),
            prop::option::of(prop::option::of(any::<bool>())),
            prop::option::of(([any::<u32>(); 4], "[a-f0-9]{0,16}")),
            prop::collection::btree_map("[a-zA-Z]{1,12}", any_json(), 0..4),
        )
            .prop_map(move |(ready, initialization, plan, others)| {
                let mut s: Map<String, Value> = others
                    .into_iter()
                    .filter(|(k, _)| !["ready", "initialization", "pendingPlan"].contains(&k.as_str()))
                    .collect();
                if let Some(r) = ready {
                    s.insert("ready".into(), r.into());
                }
                match initialization {
                    Some(Some(p)) => {
                        s.insert("initialization".into(), json!({"provisioned": p}));
                    }
                    Some(None) => {
                        s.insert("initialization".into(), json!({}));
                    }
                    None => {}
                }
                if let Some((n, hash)) = plan {
                    let mut p = json!({"hash": hash, "job": "j-apply-1"});
                    for (name, n) in counts.iter().zip(n) {
                        p[*name] = n.into();
                    }
                    s.insert("pendingPlan".into(), p);
                }
                Value::Object(s)
            }),
    )
}

/// An object of any kind at `api_version`.
fn object(api_version: &'static str) -> impl Strategy<Value = Value> {
    (
        prop::sample::select(SERVED_KINDS.to_vec()),
        "[a-z][a-z0-9-]{0,20}",
        annotations(),
        any_json(),
        status(api_version == ALPHA),
    )
        .prop_map(move |(kind, name, annotations, spec, status)| {
            let mut o = json!({
                "apiVersion": api_version,
                "kind": kind,
                "metadata": {"name": name, "namespace": "default", "uid": "0b6f", "generation": 3},
                "spec": spec,
            });
            if let Some(a) = annotations {
                o["metadata"]["annotations"] = a;
            }
            if let Some(s) = status {
                o["status"] = s;
            }
            o
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn conversion_v1alpha1_to_v1beta1_and_back_loses_nothing(o in object(ALPHA)) {
        let there = convert(o.clone(), BETA).unwrap();
        prop_assert_eq!(&there["apiVersion"], BETA);
        prop_assert!(there.pointer("/status/pendingPlan/adds").is_none());
        let back = convert(there, ALPHA).unwrap();
        prop_assert_eq!(back, o);
    }

    #[test]
    fn conversion_v1beta1_to_v1alpha1_and_back_loses_nothing(o in object(BETA)) {
        let there = convert(o.clone(), ALPHA).unwrap();
        prop_assert_eq!(&there["apiVersion"], ALPHA);
        prop_assert_eq!(there.pointer("/status/pendingPlan/adds"), o.pointer("/status/pendingPlan/add"));
        let back = convert(there, BETA).unwrap();
        prop_assert_eq!(back, o);
    }

    #[test]
    fn conversion_changes_neither_metadata_nor_spec(o in object(ALPHA)) {
        let there = convert(o.clone(), BETA).unwrap();
        prop_assert_eq!(&there["metadata"], &o["metadata"]);
        prop_assert_eq!(&there["spec"], &o["spec"]);
    }

    #[test]
    fn conversion_to_the_version_an_object_has_is_the_identity(o in object(BETA)) {
        prop_assert_eq!(convert(o.clone(), BETA).unwrap(), o);
    }
}

//! The defaults as an RFC 6902 JSON Patch.
//!
//! `captf-shared`'s `apply_defaults` works on the typed object, which drops fields it does not
//! know. So the patch is not a diff of the raw object against the re-serialized typed one (that
//! would remove unknown fields); it is a diff of the raw `spec` against the raw `spec` with every
//! field the defaults added filled in. Only `add` (or, for an explicit `null`, `replace`) operations
//! under `/spec` result: metadata, status and unknown fields are never touched.

use captf_shared::defaults::apply_defaults;
use captf_shared::types::CaptfObject;
use serde_json::{Map, Value};

/// The patch that turns the request's object, whose raw `spec` is `raw_spec`, into its defaulted
/// form. `parsed` is that object parsed; an empty patch means nothing changes.
pub fn defaults_patch(raw_spec: &Value, parsed: CaptfObject) -> json_patch::Patch {
    let mut defaulted = parsed;
    apply_defaults(&mut defaulted);
    let defaulted_spec = spec_value(&defaulted);
    let mut filled = raw_spec.clone();
    fill_missing(&mut filled, &defaulted_spec);
    json_patch::diff(&wrap_spec(raw_spec.clone()), &wrap_spec(filled))
}

/// The object's `spec` as JSON (without serializing its metadata).
fn spec_value(obj: &CaptfObject) -> Value {
    let v = match obj {
        CaptfObject::Cluster(o) => serde_json::to_value(&o.spec),
        CaptfObject::MachinePool(o) => serde_json::to_value(&o.spec),
        CaptfObject::Machine(o) => serde_json::to_value(&o.spec),
        CaptfObject::MachineTemplate(o) => serde_json::to_value(&o.spec),
    };
    // Plain data with string keys: serializing cannot fail.
    v.unwrap_or(Value::Null)
}

fn wrap_spec(spec: Value) -> Value {
    let mut m = Map::new();
    m.insert("spec".to_string(), spec);
    Value::Object(m)
}

/// Copy into `target` every field of `source` that `target` lacks (or has as `null`), recursing
/// into objects. Values `target` already has are kept as they are, arrays included.
pub fn fill_missing(target: &mut Value, source: &Value) {
    match (target, source) {
        (Value::Object(t), Value::Object(s)) => {
            for (k, sv) in s {
                match t.get_mut(k) {
                    Some(tv) => fill_missing(tv, sv),
                    None => {
                        t.insert(k.clone(), sv.clone());
                    }
                }
            }
        }
        (t @ Value::Null, s) => *t = s.clone(),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn cluster(spec: Value) -> Value {
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "TerraformCluster",
            "metadata": {"name": "prod-eu", "namespace": "default"},
            "spec": spec
        })
    }

    fn patched(raw: &Value) -> (json_patch::Patch, Value) {
        let obj = CaptfObject::from_kind_value("TerraformCluster", raw.clone()).unwrap();
        let p = defaults_patch(&raw["spec"], obj);
        let mut doc = raw.clone();
        json_patch::patch(&mut doc, &p).unwrap();
        (p, doc)
    }

    #[test]
    fn minimal_spec_gets_every_default_as_add_operations_under_spec() {
        let raw = cluster(json!({"module": {"source": "git::https://example.com/m.git"}}));
        let (p, doc) = patched(&raw);
        assert!(!p.0.is_empty());
        for op in &p.0 {
            let v = serde_json::to_value(op).unwrap();
            assert_eq!(v["op"], "add", "{v}");
            assert!(v["path"].as_str().unwrap().starts_with("/spec/"), "{v}");
        }
        assert_eq!(doc["spec"]["jobs"]["activeDeadlineSeconds"], 3600);
        assert_eq!(doc["spec"]["jobs"]["lockTimeoutSeconds"], 300);
        assert_eq!(doc["spec"]["drift"]["interval"], "30m");
    }

    #[test]
    fn unknown_fields_and_metadata_are_never_touched() {
        let mut raw = cluster(json!({
            "module": {"source": "git::https://example.com/m.git", "futureField": 1},
            "somethingNew": {"a": [1, 2]}
        }));
        raw["metadata"]["labels"] = json!({"x": "y"});
        raw["status"] = json!({"ready": true});
        let (_, doc) = patched(&raw);
        assert_eq!(doc["spec"]["module"]["futureField"], 1);
        assert_eq!(doc["spec"]["somethingNew"], json!({"a": [1, 2]}));
        assert_eq!(doc["metadata"], raw["metadata"]);
        assert_eq!(doc["status"], raw["status"]);
    }

    #[test]
    fn explicit_null_is_replaced_by_the_default() {
        let raw = cluster(json!({"module": {"source": "git::https://example.com/m.git"}, "jobs": null}));
        let (_, doc) = patched(&raw);
        assert_eq!(doc["spec"]["jobs"]["failedJobsHistoryLimit"], 3);
    }

    #[test]
    fn fully_defaulted_spec_gives_an_empty_patch() {
        let raw = cluster(json!({"module": {"source": "git::https://example.com/m.git"}}));
        let (_, doc) = patched(&raw);
        let (again, _) = patched(&doc);
        assert!(again.0.is_empty(), "{again:?}");
    }

    #[test]
    fn set_values_are_kept_and_the_lock_timeout_follows_the_deadline() {
        let raw = cluster(json!({
            "module": {"source": "git::https://example.com/m.git"},
            "jobs": {"activeDeadlineSeconds": 400}
        }));
        let (_, doc) = patched(&raw);
        assert_eq!(doc["spec"]["jobs"]["activeDeadlineSeconds"], 400);
        assert_eq!(doc["spec"]["jobs"]["lockTimeoutSeconds"], 200);
    }
}

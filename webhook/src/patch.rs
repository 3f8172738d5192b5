//! The defaults as an RFC 6902 JSON Patch.
//!
//! `captf-shared`'s `apply_defaults` works on the typed object, which drops fields it does not
//! know. So the patch is not a diff of the raw object against the re-serialized typed one (that
//! would remove unknown fields); it is a diff of the raw `spec` against the raw `spec` with every
//! field the defaults added filled in. Only `add` (or, for an explicit `null`, `replace`) operations
//! under `/spec` result: metadata, status and unknown fields are never touched.
//!
//! The operations are produced in one walk of the two specs ([`defaults_ops`]), exactly the ones
//! (and in the order) `json_patch::diff` gives for the raw spec against [`fill_missing`]'s result,
//! without building that result or comparing the parts the defaults did not touch; a property test
//! checks the two agree.

use captf_shared::defaults::apply_defaults;
use captf_shared::types::CaptfObject;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation};
use serde_json::Value;

/// The patch that turns the request's object, whose raw `spec` is `raw_spec`, into its defaulted
/// form. `parsed` is that object parsed; an empty patch means nothing changes.
pub fn defaults_patch(raw_spec: &Value, parsed: CaptfObject) -> Patch {
    let mut defaulted = parsed;
    apply_defaults(&mut defaulted);
    patch_to_defaulted(raw_spec, &defaulted)
}

/// The patch that fills into `raw_spec` every field `defaulted` (the object after `apply_defaults`)
/// has and `raw_spec` lacks or holds as `null`.
pub fn patch_to_defaulted(raw_spec: &Value, defaulted: &CaptfObject) -> Patch {
    let mut ops = Vec::new();
    let mut pointer = PointerBuf::new();
    pointer.push_back("spec");
    defaults_ops(raw_spec, spec_value(defaulted), &mut pointer, &mut ops);
    Patch(ops)
}

/// The object's `spec` as JSON (without serializing its metadata).
fn spec_value(obj: &CaptfObject) -> Value {
    let v = match obj {
        CaptfObject::Cluster(o) => serde_json::to_value(&o.spec),
        CaptfObject::MachinePool(o) => serde_json::to_value(&o.spec),
        CaptfObject::Machine(o) => serde_json::to_value(&o.spec),
        CaptfObject::MachineTemplate(o) => serde_json::to_value(&o.spec),
        CaptfObject::ClusterTemplate(o) => serde_json::to_value(&o.spec),
        CaptfObject::MachinePoolTemplate(o) => serde_json::to_value(&o.spec),
    };
    // Plain data with string keys: serializing cannot fail.
    v.unwrap_or(Value::Null)
}

/// The operations that make `raw` (at `pointer`) hold every field of `defaulted` it lacks: an
/// `add` for a missing member, a `replace` for a `null`, recursing into objects both sides have.
/// Keys are visited in `defaulted`'s order (sorted), as `json_patch::diff` visits them.
pub fn defaults_ops(raw: &Value, defaulted: Value, pointer: &mut PointerBuf, ops: &mut Vec<PatchOperation>) {
    match (raw, defaulted) {
        (Value::Object(raw), Value::Object(defaulted)) => {
            for (key, value) in defaulted {
                pointer.push_back(&key);
                match raw.get(&key) {
                    Some(raw_value) => defaults_ops(raw_value, value, pointer, ops),
                    None => ops.push(PatchOperation::Add(AddOperation {
                        path: pointer.clone(),
                        value,
                    })),
                }
                pointer.pop_back();
            }
        }
        (Value::Null, value) if !value.is_null() => ops.push(PatchOperation::Replace(ReplaceOperation {
            path: pointer.clone(),
            value,
        })),
        _ => {}
    }
}

/// Objects deeper than this (below `spec`) are not kept by [`skeleton`]; the deepest default is
/// `spec.template.spec.jobs.<field>`, an object four levels down.
const SKELETON_DEPTH: usize = 4;

/// The raw `spec` as [`defaults_ops`] reads it, at a fraction of its full tree's memory: objects
/// down to a few levels keep their keys; every other value that is not `null` becomes `true`
/// (lists and deep objects are skipped, not built). [`defaults_ops`] recurses only into objects
/// both sides have and only tells `null` from the rest, so it gives the same operations for the
/// skeleton as for the full value.
pub fn skeleton(text: &str) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = serde::de::DeserializeSeed::deserialize(Skeleton { depth: 0 }, &mut de)?;
    de.end()?;
    Ok(value)
}

#[derive(Clone, Copy)]
struct Skeleton {
    depth: usize,
}

impl<'de> serde::de::DeserializeSeed<'de> for Skeleton {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Skeleton {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Value, E> {
        Ok(Value::Bool(true))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Value, E> {
        Ok(Value::Bool(true))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Value, E> {
        Ok(Value::Bool(true))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Value, E> {
        Ok(Value::Bool(true))
    }
    fn visit_str<E>(self, _: &str) -> Result<Value, E> {
        Ok(Value::Bool(true))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Value::Bool(true))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        if self.depth > SKELETON_DEPTH {
            while map
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {}
            return Ok(Value::Bool(true));
        }
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Skeleton { depth: self.depth + 1 })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// Copy into `target` every field of `source` that `target` lacks (or has as `null`), recursing
/// into objects. Values `target` already has are kept as they are, arrays included. (The
/// definition [`defaults_ops`] is checked against.)
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

    #[test]
    fn the_skeleton_of_a_spec_gives_the_same_operations_as_the_full_spec() {
        let defaulted = |spec: &Value| {
            let mut obj: CaptfObject = CaptfObject::from_kind_value("TerraformCluster", cluster(spec.clone())).unwrap();
            apply_defaults(&mut obj);
            obj
        };
        for spec in [
            json!({"module": {"source": "a/b/c"}}),
            json!({"module": {"source": "a/b/c"}, "jobs": null, "drift": {"interval": null}}),
            json!({"module": {"source": "a/b/c"}, "variables": {"x": [0, 1, {"a": null}], "y": {"z": {"q": {"r": {"s": 1}}}}},
                   "jobs": {"activeDeadlineSeconds": 600, "env": [{"name": "A", "value": "b"}]}, "guard": {}, "paused": null}),
        ] {
            let d = defaulted(&spec);
            let text = serde_json::to_string(&spec).unwrap();
            assert_eq!(
                patch_to_defaulted(&skeleton(&text).unwrap(), &d),
                patch_to_defaulted(&spec, &d),
                "{spec}"
            );
        }
    }

    #[test]
    fn the_skeleton_keeps_no_list_and_no_deep_object() {
        let v =
            skeleton(r#"{"a": [1, 2, 3], "b": {"c": {"d": {"e": {"f": {"g": 1}}}}}, "n": null, "s": "x"}"#).unwrap();
        assert_eq!(
            v,
            json!({"a": true, "b": {"c": {"d": {"e": {"f": true}}}}, "n": null, "s": true})
        );
    }

    fn cluster(spec: Value) -> Value {
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
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

    /// The patch as the definition gives it: `json_patch::diff` of the raw spec against the raw
    /// spec with every default filled in.
    fn by_definition(raw_spec: &Value, parsed: CaptfObject) -> json_patch::Patch {
        let mut defaulted = parsed;
        apply_defaults(&mut defaulted);
        let mut filled = raw_spec.clone();
        fill_missing(&mut filled, &spec_value(&defaulted));
        json_patch::diff(&json!({"spec": raw_spec}), &json!({"spec": filled}))
    }

    #[test]
    fn the_one_walk_patch_equals_the_diff_against_the_filled_spec() {
        for spec in [
            json!({"module": {"source": "git::https://example.com/m.git"}}),
            json!({"module": {"source": "git::https://example.com/m.git"}, "jobs": null, "drift": {"interval": null}}),
            json!({"module": {"source": "git::https://example.com/m.git", "x": 1}, "jobs": {"activeDeadlineSeconds": 400}, "new/key~": [1]}),
            json!({"module": {"source": "git::https://example.com/m.git"}, "variables": {"a": null}, "paused": true}),
        ] {
            let raw = cluster(spec);
            let obj = CaptfObject::from_kind_value("TerraformCluster", raw.clone()).unwrap();
            assert_eq!(
                defaults_patch(&raw["spec"], obj.clone()),
                by_definition(&raw["spec"], obj),
                "{raw}"
            );
        }
    }
}

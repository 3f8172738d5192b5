//! The inputs document and its hash (docs/api.md): canonical JSON (sorted keys, no
//! whitespace) and its SHA-256, stable across key order and formatting.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::types::Variables;

/// What a Job runs: the module and its resolved variables. Written to the inputs Secret
/// under `inputs.json`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Inputs {
    pub module: ModuleRef,
    pub variables: Variables,
    /// `spec.stateEncryption`, when set (absent otherwise, so objects without it keep the hash
    /// they had before the field existed).
    #[serde(default, rename = "stateEncryption", skip_serializing_if = "Option::is_none")]
    pub state_encryption: Option<crate::state_encryption::EncryptionInputs>,
    /// The variables known to hold nothing secret although no `spec.variables` literal says so:
    /// those from the cluster's non-sensitive exports. Absent when empty, so objects without them
    /// keep the hash they had before the field existed.
    #[serde(default, rename = "publicVariables", skip_serializing_if = "BTreeSet::is_empty")]
    pub public_variables: BTreeSet<String>,
    /// The policies the plan is checked against (`spec.guard.policyRefs`, then the platform's).
    /// Not part of the inputs document nor of its hash: a policy decides whether a plan may be
    /// applied, not what is planned. The inputs Secret carries them under their own key.
    #[serde(skip)]
    pub policies: Vec<crate::protocol::PlanPolicy>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleRef {
    pub source: String,
}

impl Inputs {
    pub fn to_value(&self) -> Value {
        let mut v = serde_json::json!({ "module": { "source": self.module.source }, "variables": self.variables });
        if let (Some(e), Some(map)) = (&self.state_encryption, v.as_object_mut()) {
            map.insert("stateEncryption".into(), serde_json::to_value(e).unwrap_or(Value::Null));
        }
        if let (false, Some(map)) = (self.public_variables.is_empty(), v.as_object_mut()) {
            map.insert("publicVariables".into(), serde_json::json!(self.public_variables));
        }
        v
    }

    /// The canonical JSON text of these inputs.
    pub fn canonical_json(&self) -> String {
        canonical_json(&self.to_value())
    }

    /// The inputs hash: lowercase hex SHA-256 of the canonical JSON.
    pub fn hash(&self) -> String {
        sha256_hex(self.canonical_json().as_bytes())
    }
}

/// Lowercase hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Canonical JSON: objects with keys sorted (by their UTF-8 bytes), no whitespace.
/// Independent of serde_json's `preserve_order` feature.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The hash of any JSON value's canonical form (the plan hash uses it too).
pub fn canonical_hash(value: &Value) -> String {
    sha256_hex(canonical_json(value).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let v = json!({"b": 1, "a": {"z": [3, {"y": 1, "x": 2}], "c": null}});
        assert_eq!(canonical_json(&v), r#"{"a":{"c":null,"z":[3,{"x":2,"y":1}]},"b":1}"#);
    }

    #[test]
    fn inputs_hash_is_stable_across_key_order_and_whitespace() {
        let a: Value =
            serde_json::from_str(r#"{"module":{"source":"s"},"variables":{"x":1,"y":{"b":true,"a":"q"}}}"#).unwrap();
        let b: Value = serde_json::from_str(
            "{\n  \"variables\": {\"y\": {\"a\": \"q\", \"b\": true}, \"x\": 1},\n  \"module\": {\"source\": \"s\"}\n}",
        )
        .unwrap();
        assert_eq!(canonical_hash(&a), canonical_hash(&b));
        let inputs: Inputs = serde_json::from_value(a.clone()).unwrap();
        assert_eq!(inputs.hash(), canonical_hash(&a));
        assert_eq!(inputs.hash().len(), 64);
    }

    #[test]
    fn inputs_hash_changes_with_any_value() {
        let a = json!({"module": {"source": "s"}, "variables": {"x": 1}});
        let b = json!({"module": {"source": "s"}, "variables": {"x": 2}});
        let c = json!({"module": {"source": "t"}, "variables": {"x": 1}});
        assert_ne!(canonical_hash(&a), canonical_hash(&b));
        assert_ne!(canonical_hash(&a), canonical_hash(&c));
    }

    #[test]
    fn a_float_variable_hashes_the_same_after_its_canonical_json_is_read_back() {
        // 29E40 as written by a person: read, written canonically ("2.9e41"), read again.
        let spec: Value = serde_json::from_str(r#"{"module":{"source":"s"},"variables":{"n":29E40,"x":0.1}}"#).unwrap();
        let back: Value = serde_json::from_str(&canonical_json(&spec)).unwrap();
        assert_eq!(back, spec);
        assert_eq!(canonical_hash(&back), canonical_hash(&spec));
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            "[a-zA-Z0-9 \\\\\"\\n]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,4}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn canonical_json_round_trips_and_is_a_fixed_point(v in json_value()) {
            let text = canonical_json(&v);
            let back: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(&back, &v);
            prop_assert_eq!(canonical_json(&back), text.clone());
            // Pretty printing (whitespace) does not change the hash.
            let pretty: Value = serde_json::from_str(&serde_json::to_string_pretty(&v).unwrap()).unwrap();
            prop_assert_eq!(canonical_hash(&pretty), canonical_hash(&v));
        }
    }
}

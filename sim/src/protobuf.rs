//! Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`), for
//! the one kind a client CAPTF meets sends that way: `coordination.k8s.io/v1` Lease. client-go
//! from 0.33 on makes generated (typed) clients send built-in kinds as protobuf by default, and
//! OpenTofu's kubernetes backend takes and releases its state lock through the typed Lease
//! client (its Secrets go through the dynamic client, as JSON). The simulator decodes such a
//! body into the same JSON object a JSON client would have sent; answers stay JSON, which the
//! client accepts as well (`Accept: application/vnd.kubernetes.protobuf,application/json`).
//!
//! The encoding: the 4 bytes `k8s\0`, then a `runtime.Unknown` message whose `raw` holds the
//! object's own message. Field numbers are those of Kubernetes' `generated.proto` files; fields
//! the simulator does not keep (`managedFields`) are skipped.

use prost::Message;
use serde_json::{Map, Value, json};

/// The media type of Kubernetes' protobuf encoding.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
const MAGIC: &[u8] = b"k8s\0";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtobufError {
    #[error("the protobuf body does not start with the k8s magic bytes")]
    NoMagic,
    #[error("failed to decode the protobuf body: {0}")]
    Decode(String),
    #[error("the simulator decodes protobuf bodies of coordination.k8s.io/v1 Lease only, not {0}")]
    Unsupported(String),
}

#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    raw: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    kind: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct Time {
    #[prost(int64, optional, tag = "1")]
    seconds: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    nanos: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
struct OwnerReference {
    #[prost(string, optional, tag = "1")]
    kind: Option<String>,
    #[prost(string, optional, tag = "3")]
    name: Option<String>,
    #[prost(string, optional, tag = "4")]
    uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    api_version: Option<String>,
    #[prost(bool, optional, tag = "6")]
    controller: Option<bool>,
    #[prost(bool, optional, tag = "7")]
    block_owner_deletion: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    generate_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "5")]
    uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
    #[prost(int64, optional, tag = "7")]
    generation: Option<i64>,
    #[prost(message, optional, tag = "8")]
    creation_timestamp: Option<Time>,
    #[prost(message, optional, tag = "9")]
    deletion_timestamp: Option<Time>,
    #[prost(int64, optional, tag = "10")]
    deletion_grace_period_seconds: Option<i64>,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: std::collections::BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: std::collections::BTreeMap<String, String>,
    #[prost(message, repeated, tag = "13")]
    owner_references: Vec<OwnerReference>,
    #[prost(string, repeated, tag = "14")]
    finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct LeaseSpec {
    #[prost(string, optional, tag = "1")]
    holder_identity: Option<String>,
    #[prost(int32, optional, tag = "2")]
    lease_duration_seconds: Option<i32>,
    #[prost(message, optional, tag = "3")]
    acquire_time: Option<Time>,
    #[prost(message, optional, tag = "4")]
    renew_time: Option<Time>,
    #[prost(int32, optional, tag = "5")]
    lease_transitions: Option<i32>,
    #[prost(string, optional, tag = "6")]
    strategy: Option<String>,
    #[prost(string, optional, tag = "7")]
    preferred_holder: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct Lease {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<LeaseSpec>,
}

/// Decode a protobuf request body into the JSON object a JSON client would have sent.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let rest = body.strip_prefix(MAGIC).ok_or(ProtobufError::NoMagic)?;
    let unknown = Unknown::decode(rest).map_err(|e| ProtobufError::Decode(e.to_string()))?;
    let tm = unknown.type_meta.unwrap_or_default();
    let api_version = tm.api_version.unwrap_or_default();
    let kind = tm.kind.unwrap_or_default();
    if api_version != "coordination.k8s.io/v1" || kind != "Lease" {
        return Err(ProtobufError::Unsupported(format!("{api_version}/{kind}")));
    }
    let lease =
        Lease::decode(unknown.raw.unwrap_or_default().as_slice()).map_err(|e| ProtobufError::Decode(e.to_string()))?;
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    obj.insert(
        "metadata".into(),
        Value::Object(metadata(lease.metadata.unwrap_or_default())),
    );
    if let Some(spec) = lease.spec {
        obj.insert("spec".into(), Value::Object(lease_spec(spec)));
    }
    Ok(Value::Object(obj))
}

fn put<T: Into<Value>>(m: &mut Map<String, Value>, key: &str, v: Option<T>) {
    if let Some(v) = v {
        m.insert(key.to_string(), v.into());
    }
}

/// `metav1.Time` (seconds) or `metav1.MicroTime` (microseconds) as RFC 3339, as JSON has them.
fn time(t: Time, micro: bool) -> Option<String> {
    let ts = jiff::Timestamp::new(t.seconds.unwrap_or(0), t.nanos.unwrap_or(0)).ok()?;
    let format = if micro {
        "%Y-%m-%dT%H:%M:%S%.6fZ"
    } else {
        "%Y-%m-%dT%H:%M:%SZ"
    };
    Some(ts.strftime(format).to_string())
}

fn metadata(m: ObjectMeta) -> Map<String, Value> {
    let mut out = Map::new();
    put(&mut out, "name", m.name);
    put(&mut out, "generateName", m.generate_name);
    put(&mut out, "namespace", m.namespace);
    put(&mut out, "uid", m.uid);
    put(&mut out, "resourceVersion", m.resource_version);
    put(&mut out, "generation", m.generation);
    put(
        &mut out,
        "creationTimestamp",
        m.creation_timestamp.and_then(|t| time(t, false)),
    );
    put(
        &mut out,
        "deletionTimestamp",
        m.deletion_timestamp.and_then(|t| time(t, false)),
    );
    put(&mut out, "deletionGracePeriodSeconds", m.deletion_grace_period_seconds);
    if !m.labels.is_empty() {
        out.insert("labels".into(), json!(m.labels));
    }
    if !m.annotations.is_empty() {
        out.insert("annotations".into(), json!(m.annotations));
    }
    if !m.owner_references.is_empty() {
        let refs: Vec<Value> = m
            .owner_references
            .into_iter()
            .map(|r| {
                let mut o = Map::new();
                put(&mut o, "apiVersion", r.api_version);
                put(&mut o, "kind", r.kind);
                put(&mut o, "name", r.name);
                put(&mut o, "uid", r.uid);
                put(&mut o, "controller", r.controller);
                put(&mut o, "blockOwnerDeletion", r.block_owner_deletion);
                Value::Object(o)
            })
            .collect();
        out.insert("ownerReferences".into(), Value::Array(refs));
    }
    if !m.finalizers.is_empty() {
        out.insert("finalizers".into(), json!(m.finalizers));
    }
    out
}

fn lease_spec(s: LeaseSpec) -> Map<String, Value> {
    let mut out = Map::new();
    put(&mut out, "holderIdentity", s.holder_identity);
    put(&mut out, "leaseDurationSeconds", s.lease_duration_seconds);
    put(&mut out, "acquireTime", s.acquire_time.and_then(|t| time(t, true)));
    put(&mut out, "renewTime", s.renew_time.and_then(|t| time(t, true)));
    put(&mut out, "leaseTransitions", s.lease_transitions);
    put(&mut out, "strategy", s.strategy);
    put(&mut out, "preferredHolder", s.preferred_holder);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let u = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
        };
        [MAGIC.to_vec(), u.encode_to_vec()].concat()
    }

    #[test]
    fn a_protobuf_lease_decodes_to_the_json_a_json_client_sends() {
        let lease = Lease {
            metadata: Some(ObjectMeta {
                name: Some("lock-tfstate-default-x".into()),
                namespace: Some("default".into()),
                resource_version: Some("42".into()),
                labels: [("tfstate".to_string(), "true".to_string())].into(),
                annotations: [("app.terraform.io/lock-info".to_string(), "{\"ID\":\"1\"}".to_string())].into(),
                owner_references: vec![OwnerReference {
                    api_version: Some("v1".into()),
                    kind: Some("Secret".into()),
                    name: Some("s".into()),
                    uid: Some("u".into()),
                    controller: Some(true),
                    block_owner_deletion: None,
                }],
                finalizers: vec!["f".into()],
                creation_timestamp: Some(Time {
                    seconds: Some(1_700_000_000),
                    nanos: None,
                }),
                ..Default::default()
            }),
            spec: Some(LeaseSpec {
                holder_identity: Some("0c1e3a9d".into()),
                acquire_time: Some(Time {
                    seconds: Some(1_700_000_000),
                    nanos: Some(123_456_000),
                }),
                ..Default::default()
            }),
        };
        let v = decode(&envelope("coordination.k8s.io/v1", "Lease", lease.encode_to_vec())).unwrap();
        assert_eq!(
            v,
            json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "lock-tfstate-default-x", "namespace": "default", "resourceVersion": "42",
                    "creationTimestamp": "2023-11-14T22:13:20Z",
                    "labels": {"tfstate": "true"}, "annotations": {"app.terraform.io/lock-info": "{\"ID\":\"1\"}"},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "u", "controller": true}],
                    "finalizers": ["f"]},
                "spec": {"holderIdentity": "0c1e3a9d", "acquireTime": "2023-11-14T22:13:20.123456Z"}
            })
        );
    }

    #[test]
    fn another_kind_garbage_and_a_missing_magic_are_clear_errors() {
        assert_eq!(
            decode(&envelope("v1", "Secret", vec![])),
            Err(ProtobufError::Unsupported("v1/Secret".into()))
        );
        assert_eq!(decode(b"{\"kind\":\"Lease\"}"), Err(ProtobufError::NoMagic));
        assert!(matches!(decode(b"k8s\0\xff\xff\xff"), Err(ProtobufError::Decode(_))));
    }
}

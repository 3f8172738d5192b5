//! API versions and the conversion between them (docs/api.md, "Versions and conversion").
//!
//! `v1beta1` is the hub: the version stored, and the one the controller, the webhook and the
//! plugin read and write. `v1alpha1` is still served, deprecated, for clients and manifests
//! written against it; the API server asks the webhook (`/convert`) to turn objects from one
//! into the other. Every difference between the two lives here once, twice over: as a change to
//! an object (both ways, [`convert`]) and as a change to the CRD's schema
//! ([`v1alpha1_schema`]).
//!
//! The difference (v1alpha1 → v1beta1): `status.pendingPlan`'s counts take Terraform's words, as
//! the runner's result, `kubectl captf plan` and the notifications do: `adds`, `changes`,
//! `destroys`, `replaces` become `add`, `change`, `destroy`, `replace`. Every field has a home
//! in both versions, so nothing needs carrying in an annotation; a later difference that has
//! none would carry it in one, as Cluster API's `conversion-data` does.
//!
//! (`status.ready`, Cluster API's v1beta1 contract, was to go in v1beta1, where the v1beta2
//! contract reads `status.initialization.provisioned`. It stays: Cluster API 1.14's MachinePool
//! controller reads an InfraMachinePool's `status.ready` alone, and a TerraformMachinePool
//! without it never gets its provider IDs copied.)
//!
//! The conversion works on JSON, not on the typed objects: whatever an object carries that this
//! module does not touch (fields a newer release added, a spec this release would not parse) is
//! kept as it is. Only `apiVersion` and the renamed fields change; `metadata` never does (the API
//! server refuses a conversion that changes it).

use serde_json::{Map, Value};

use crate::keys::GROUP;
use crate::types::SERVED_KINDS;

/// A version CAPTF serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// Deprecated; served, not stored.
    V1alpha1,
    /// The hub: stored.
    V1beta1,
}

impl Version {
    /// Every served version, oldest first.
    pub const ALL: [Version; 2] = [Version::V1alpha1, Version::V1beta1];
    /// The version objects are stored in.
    pub const STORED: Version = Version::V1beta1;

    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1alpha1 => "v1alpha1",
            Version::V1beta1 => "v1beta1",
        }
    }

    /// `infrastructure.cluster.x-k8s.io/<version>`.
    pub fn api_version(self) -> String {
        format!("{GROUP}/{}", self.as_str())
    }

    /// A served version by its name (`v1alpha1`).
    pub fn parse(name: &str) -> Result<Version, ConversionError> {
        Version::ALL
            .into_iter()
            .find(|v| v.as_str() == name)
            .ok_or_else(|| ConversionError::UnknownVersion(bounded(name)))
    }

    /// The version of an `apiVersion` (`infrastructure.cluster.x-k8s.io/v1beta1`).
    pub fn from_api_version(api_version: &str) -> Result<Version, ConversionError> {
        let unknown = || ConversionError::UnknownVersion(bounded(api_version));
        let (group, version) = api_version.split_once('/').ok_or_else(unknown)?;
        if group != GROUP {
            return Err(unknown());
        }
        Version::parse(version).map_err(|_| unknown())
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an object cannot be converted. The message names the problem; the object is left as it
/// was (the API server then keeps its stored form and fails the request).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    #[error("the object is not a JSON object")]
    NotAnObject,
    #[error("apiVersion {0:?} is not one CAPTF serves (infrastructure.cluster.x-k8s.io/v1alpha1 or /v1beta1)")]
    UnknownVersion(String),
    #[error("kind {0:?} is not one of CAPTF's ({kinds})", kinds = SERVED_KINDS.join(", "))]
    UnknownKind(String),
    #[error("{field} {why}")]
    Malformed { field: &'static str, why: String },
}

/// The pending plan's counts: (v1alpha1 name, v1beta1 name).
const PLAN_COUNTS: [(&str, &str); 4] = [
    ("adds", "add"),
    ("changes", "change"),
    ("destroys", "destroy"),
    ("replaces", "replace"),
];

/// Convert `object` to `desired` (an `apiVersion`). An object already at `desired` comes back
/// unchanged.
pub fn convert(mut object: Value, desired: &str) -> Result<Value, ConversionError> {
    let desired = Version::from_api_version(desired)?;
    let map = object.as_object_mut().ok_or(ConversionError::NotAnObject)?;
    let from = Version::from_api_version(map.get("apiVersion").and_then(Value::as_str).unwrap_or(""))?;
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
    if !SERVED_KINDS.contains(&kind) {
        return Err(ConversionError::UnknownKind(bounded(kind)));
    }
    match (from, desired) {
        (Version::V1alpha1, Version::V1beta1) => up(map)?,
        (Version::V1beta1, Version::V1alpha1) => down(map)?,
        _ => return Ok(object),
    }
    map.insert("apiVersion".into(), desired.api_version().into());
    Ok(object)
}

/// v1alpha1 → v1beta1.
fn up(map: &mut Map<String, Value>) -> Result<(), ConversionError> {
    rename_plan_counts(map, PLAN_COUNTS)
}

/// v1beta1 → v1alpha1.
fn down(map: &mut Map<String, Value>) -> Result<(), ConversionError> {
    rename_plan_counts(map, PLAN_COUNTS.map(|(old, new)| (new, old)))
}

/// Rename the pending plan's counts `(from, to)`, when the object has a pending plan.
fn rename_plan_counts(map: &mut Map<String, Value>, pairs: [(&str, &str); 4]) -> Result<(), ConversionError> {
    match map
        .get_mut("status")
        .and_then(Value::as_object_mut)
        .and_then(|s| s.get_mut("pendingPlan"))
        .and_then(Value::as_object_mut)
    {
        Some(plan) => rename(plan, pairs),
        None => Ok(()),
    }
}

/// Rename the keys `(from, to)` of `map`; a `to` already there would be overwritten, so it is
/// refused.
fn rename<'a>(map: &mut Map<String, Value>, pairs: [(&'a str, &'a str); 4]) -> Result<(), ConversionError> {
    if let Some((from, to)) = pairs
        .iter()
        .find(|(from, to)| map.contains_key(*from) && map.contains_key(*to))
    {
        return Err(malformed(
            "status.pendingPlan",
            &format!("has both {from} and {to}; only one of them belongs to each version"),
        ));
    }
    for (from, to) in pairs {
        if let Some(v) = map.remove(from) {
            map.insert(to.into(), v);
        }
    }
    Ok(())
}

fn malformed(field: &'static str, why: &str) -> ConversionError {
    ConversionError::Malformed {
        field,
        why: why.to_string(),
    }
}

/// At most [`MAX_ECHOED_BYTES`] of what a request sent, for a message.
fn bounded(s: &str) -> String {
    crate::limits::cut_to_bytes(s, MAX_ECHOED_BYTES).into_owned()
}

/// The most of a request's own text (a version, a kind, a name) a message quotes.
pub const MAX_ECHOED_BYTES: usize = 100;

/// The CRD schema of v1alpha1 (`openAPIV3Schema`, as JSON), from v1beta1's: the same but for the
/// difference above. Applied where the schema has it (the templates have no status).
pub fn v1alpha1_schema(schema: &mut Value) {
    let Some(plan) = schema.pointer_mut("/properties/status/properties/pendingPlan") else {
        return;
    };
    if let Some(props) = plan.get_mut("properties").and_then(Value::as_object_mut) {
        for (old, new) in PLAN_COUNTS {
            if let Some(v) = props.remove(new) {
                props.insert(old.into(), v);
            }
        }
    }
    if let Some(required) = plan.get_mut("required").and_then(Value::as_array_mut) {
        for r in required.iter_mut() {
            if let Some((old, _)) = PLAN_COUNTS.iter().find(|(_, new)| r == new) {
                *r = Value::from(*old);
            }
        }
        required.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn alpha(status: Value) -> Value {
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "TerraformCluster",
            "metadata": {"name": "prod-eu", "namespace": "default", "uid": "u-1", "resourceVersion": "7"},
            "spec": {"module": {"source": "git::https://example.com/m.git"}},
            "status": status,
        })
    }

    #[test]
    fn conversion_renames_the_pending_plans_counts_and_nothing_else() {
        let old = alpha(json!({
            "ready": true,
            "initialization": {"provisioned": true},
            "pendingPlan": {"hash": "h", "adds": 1, "changes": 0, "destroys": 2, "replaces": 0, "job": "j"},
        }));
        let new = convert(old.clone(), "infrastructure.cluster.x-k8s.io/v1beta1").unwrap();
        assert_eq!(new["apiVersion"], "infrastructure.cluster.x-k8s.io/v1beta1");
        assert_eq!(
            new["status"],
            json!({
                "ready": true,
                "initialization": {"provisioned": true},
                "pendingPlan": {"hash": "h", "add": 1, "change": 0, "destroy": 2, "replace": 0, "job": "j"},
            })
        );
        assert_eq!(new["metadata"], old["metadata"]);
        assert_eq!(new["spec"], old["spec"]);
        assert_eq!(convert(new, "infrastructure.cluster.x-k8s.io/v1alpha1").unwrap(), old);
    }

    #[test]
    fn conversion_to_the_same_version_changes_nothing() {
        let old = alpha(json!({"ready": true}));
        assert_eq!(
            convert(old.clone(), "infrastructure.cluster.x-k8s.io/v1alpha1").unwrap(),
            old
        );
    }

    #[test]
    fn conversion_refuses_what_it_cannot_convert_naming_the_problem() {
        let to = "infrastructure.cluster.x-k8s.io/v1beta1";
        assert_eq!(convert(json!([1]), to), Err(ConversionError::NotAnObject));
        let e = convert(alpha(json!({})), "infrastructure.cluster.x-k8s.io/v2").unwrap_err();
        assert!(e.to_string().contains("\"infrastructure.cluster.x-k8s.io/v2\""), "{e}");
        let mut o = alpha(json!({}));
        o["apiVersion"] = json!("apps/v1");
        assert_eq!(convert(o, to), Err(ConversionError::UnknownVersion("apps/v1".into())));
        let mut o = alpha(json!({}));
        o["kind"] = json!("Deployment");
        assert!(convert(o, to).unwrap_err().to_string().contains("TerraformCluster"));
        let o = alpha(json!({"pendingPlan": {"adds": 1, "add": 2}}));
        let e = convert(o, to).unwrap_err();
        assert!(e.to_string().contains("both adds and add"), "{e}");
        let long = "x".repeat(10_000);
        let e = convert(alpha(json!({})), &long).unwrap_err();
        assert!(e.to_string().len() < 300, "{e}");
    }

    #[test]
    fn conversion_v1alpha1_schema_has_the_old_count_names() {
        let mut schema = json!({"properties": {"status": {"properties": {
            "pendingPlan": {"properties": {"hash": {}, "add": {}, "change": {}, "destroy": {}, "replace": {}, "job": {}},
                            "required": ["add", "change", "destroy", "hash", "job", "replace"]},
        }}}});
        v1alpha1_schema(&mut schema);
        let status = &schema["properties"]["status"]["properties"];
        let plan = &status["pendingPlan"];
        assert!(plan["properties"].get("adds").is_some() && plan["properties"].get("add").is_none());
        assert_eq!(
            plan["required"],
            json!(["adds", "changes", "destroys", "hash", "job", "replaces"])
        );
    }
}

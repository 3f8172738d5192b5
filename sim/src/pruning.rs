//! Unknown fields of custom resources, as kube-apiserver treats them (checked against a real
//! v1.36 server by `kubetest/tests/conformance.rs`):
//!
//! - every create, update and patch is pruned by the CRD's structural schema
//!   (`openAPIV3Schema`): a field the schema does not declare is dropped, unless
//!   `x-kubernetes-preserve-unknown-fields: true` keeps what is below it or
//!   `additionalProperties` makes it a map; `apiVersion`, `kind` and the `metadata` fields of
//!   `ObjectMeta` are always kept (an unknown `metadata` field is dropped too);
//! - the dropped fields are reported as the request's `fieldValidation` asks: `Warn` (also when
//!   absent) with one `unknown field "spec.drfit"` warning each, `Strict` by refusing the write,
//!   `Ignore` not at all;
//! - server-side apply checks its patch first, as the field manager does, and refuses a field
//!   the schema does not declare whatever `fieldValidation` says ([`apply_errors`]).
//!
//! Pure: plain JSON in, plain JSON and paths out.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use serde_json::{Value, json};

use crate::error::ApiError;
use crate::resources::ResourceDef;

/// How many unknown fields a list of warnings or an error names; the others are counted
/// (`and 7 more unknown fields`). kube-apiserver names up to 4 KiB of them, but a kube-rs client
/// over HTTP/1.1 (the simulator's plain port) refuses a response with more than 100 headers.
pub const LISTED: usize = 50;

/// The deepest a value is walked. serde_json parses at most 128 levels, but a JSON patch can add
/// a value below an already deep one; past this depth a value is kept as it is.
const MAX_DEPTH: usize = 256;

/// `ObjectMeta` as a structural schema: what `metadata` keeps (of the object and of embedded
/// resources), whatever the CRD says of it.
static OBJECT_META: LazyLock<Value> = LazyLock::new(|| {
    let strings = json!({"type": "object", "additionalProperties": {"type": "string"}});
    let scalar = json!({});
    let fields = |names: &[&str]| -> serde_json::Map<String, Value> {
        names.iter().map(|n| (n.to_string(), scalar.clone())).collect()
    };
    let mut meta = fields(&[
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ]);
    meta.insert("labels".into(), strings.clone());
    meta.insert("annotations".into(), strings);
    meta.insert(
        "finalizers".into(),
        json!({"type": "array", "items": {"type": "string"}}),
    );
    let owner = fields(&["apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion"]);
    meta.insert(
        "ownerReferences".into(),
        json!({"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["uid"],
               "items": {"type": "object", "properties": owner}}),
    );
    let mut entry = fields(&[
        "manager",
        "operation",
        "apiVersion",
        "time",
        "fieldsType",
        "subresource",
    ]);
    entry.insert(
        "fieldsV1".into(),
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    );
    meta.insert(
        "managedFields".into(),
        json!({"type": "array", "items": {"type": "object", "properties": entry}}),
    );
    json!({"type": "object", "properties": meta})
});

/// The fields every resource has whatever its schema says.
const RESOURCE_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// What a request asks to be done about unknown fields (its `fieldValidation` parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them with a warning each (kube-apiserver's default since 1.27).
    Warn,
    /// Refuse the write.
    Strict,
}

impl FieldValidation {
    /// The parameter's value: absent or empty is `Warn`. Another value is kube-apiserver's 422
    /// on the request's options (`options`: `CreateOptions`, `UpdateOptions` or `PatchOptions`).
    pub fn parse(value: Option<&str>, options: &str) -> Result<Self, ApiError> {
        match value.unwrap_or("") {
            "" | "Warn" => Ok(FieldValidation::Warn),
            "Ignore" => Ok(FieldValidation::Ignore),
            "Strict" => Ok(FieldValidation::Strict),
            other => {
                let cause =
                    format!("Unsupported value: {other:?}: supported values: \"\", \"Ignore\", \"Strict\", \"Warn\"");
                let mut e = ApiError::new(
                    422,
                    "Invalid",
                    format!("{options}.meta.k8s.io \"\" is invalid: fieldValidation: {cause}"),
                );
                e.details = Some(json!({"group": "meta.k8s.io", "kind": options, "causes": [
                    {"reason": "FieldValueNotSupported", "message": cause, "field": "fieldValidation"}]}));
                Err(e)
            }
        }
    }
}

/// The unknown fields of one write, in kube-apiserver's order: those of the object's own
/// `metadata`, then the pruned paths sorted, then those of embedded resources' `metadata`. At
/// most [`LISTED`] are kept; `total` counts them all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnknownFields {
    listed: Vec<String>,
    total: usize,
}

impl UnknownFields {
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// How many there were.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The paths named (at most [`LISTED`]).
    pub fn listed(&self) -> &[String] {
        &self.listed
    }

    fn unlisted(&self) -> usize {
        self.total.saturating_sub(self.listed.len())
    }

    fn more(&self) -> String {
        match self.unlisted() {
            1 => "and 1 more unknown field".to_string(),
            n => format!("and {n} more unknown fields"),
        }
    }

    /// The warnings of `fieldValidation=Warn`: `unknown field "spec.drfit"` each, then one
    /// counting those not named.
    pub fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self.listed.iter().map(|p| format!("unknown field {p:?}")).collect();
        if self.unlisted() > 0 {
            out.push(self.more());
        }
        out
    }

    /// The decoder's error of `fieldValidation=Strict`:
    /// `strict decoding error: unknown field "a", unknown field "b"`.
    pub fn strict_error(&self) -> String {
        format!("strict decoding error: {}", self.warnings().join(", "))
    }
}

/// The smallest [`LISTED`] strings added, and how many were added.
#[derive(Default)]
struct Smallest {
    kept: BTreeSet<String>,
    seen: usize,
}

impl Smallest {
    fn add(&mut self, s: String) {
        self.seen += 1;
        self.kept.insert(s);
        if self.kept.len() > LISTED {
            self.kept.pop_last();
        }
    }

    fn merge(&mut self, other: Smallest) {
        self.seen += other.seen;
        self.kept.extend(other.kept);
        while self.kept.len() > LISTED {
            self.kept.pop_last();
        }
    }
}

fn flag(s: &Value, name: &str) -> bool {
    s.get(name).and_then(Value::as_bool) == Some(true)
}

fn properties(s: &Value) -> Option<&serde_json::Map<String, Value>> {
    s.get("properties").and_then(Value::as_object)
}

/// What `additionalProperties` says about fields `properties` does not name.
#[derive(Clone, Copy, PartialEq)]
enum Additional<'a> {
    /// Absent (or `false`): they are unknown.
    No,
    /// `true`: any key, its value pruned as if it had no schema.
    Any,
    /// A map: any key, its value pruned by this schema.
    Schema(&'a Value),
}

impl<'a> Additional<'a> {
    fn of(s: &'a Value) -> Self {
        match s.get("additionalProperties") {
            Some(Value::Bool(true)) => Additional::Any,
            Some(a @ Value::Object(_)) => Additional::Schema(a),
            _ => Additional::No,
        }
    }

    fn schema(self) -> Option<&'a Value> {
        match self {
            Additional::Schema(s) => Some(s),
            _ => None,
        }
    }
}

fn items(s: &Value) -> Option<&Value> {
    s.get("items").filter(|i| i.is_object())
}

/// Drops from a `metadata` what `ObjectMeta` does not have; the paths of what it dropped, each
/// below `path` (`metadata`, `spec.template.metadata`).
fn coerce_meta(meta: &mut Value, path: &str, depth: usize) -> Smallest {
    let mut w = Pruning {
        path: path.to_string(),
        ..Default::default()
    };
    w.prune(meta, Some(&OBJECT_META), depth, false);
    w.pruned
}

/// The pruning walk: the path so far (`spec.jobs.env[0]`) and what was found.
#[derive(Default)]
struct Pruning {
    path: String,
    meta: Smallest,
    pruned: Smallest,
    embedded_meta: Smallest,
}

impl Pruning {
    /// Appends `.key` (or `key` at the root) to the path; returns the length to truncate back to.
    fn push_key(&mut self, key: &str) -> usize {
        let len = self.path.len();
        if !self.path.is_empty() {
            self.path.push('.');
        }
        self.path.push_str(key);
        len
    }

    fn push_index(&mut self, i: usize) -> usize {
        let len = self.path.len();
        self.path.push_str(&format!("[{i}]"));
        len
    }

    fn drop_key(&mut self, key: &str) {
        let len = self.push_key(key);
        self.pruned.add(self.path.clone());
        self.path.truncate(len);
    }

    /// An embedded resource's `apiVersion`, `kind` (strings) and `metadata` (its `ObjectMeta`
    /// fields) stay; true when `key` is one of them.
    fn keeps_resource_field(&mut self, key: &str, child: &mut Value, root: bool, depth: usize) -> bool {
        match key {
            _ if root && RESOURCE_FIELDS.contains(&key) => true,
            "apiVersion" | "kind" => child.is_string(),
            "metadata" if child.is_object() => {
                let len = self.push_key(key);
                let dropped = coerce_meta(child, &self.path, depth + 1);
                self.embedded_meta.merge(dropped);
                self.path.truncate(len);
                true
            }
            _ => false,
        }
    }

    fn prune(&mut self, v: &mut Value, s: Option<&Value>, depth: usize, root: bool) {
        if depth > MAX_DEPTH {
            return;
        }
        if let Some(s) = s.filter(|s| flag(s, "x-kubernetes-preserve-unknown-fields")) {
            self.skip_prune(v, s, depth, root);
            return;
        }
        match v {
            Value::Object(map) => {
                let Some(s) = s else {
                    for k in map.keys() {
                        self.drop_key(k);
                    }
                    map.clear();
                    return;
                };
                let embedded = root || flag(s, "x-kubernetes-embedded-resource");
                let props = properties(s);
                let additional = Additional::of(s);
                map.retain(|k, child| {
                    if embedded && self.keeps_resource_field(k, child, root, depth) {
                        return true;
                    }
                    let schema = match (props.and_then(|p| p.get(k)), additional) {
                        (Some(p), _) => Some(p),
                        (None, Additional::Schema(a)) => Some(a),
                        (None, Additional::Any) => None,
                        (None, Additional::No) => {
                            self.drop_key(k);
                            return false;
                        }
                    };
                    let len = self.push_key(k);
                    self.prune(child, schema, depth + 1, false);
                    self.path.truncate(len);
                    true
                });
            }
            Value::Array(list) => {
                let item = s.and_then(items);
                for (i, x) in list.iter_mut().enumerate() {
                    let len = self.push_index(i);
                    self.prune(x, item, depth + 1, false);
                    self.path.truncate(len);
                }
            }
            _ => {}
        }
    }

    /// Below `x-kubernetes-preserve-unknown-fields`: unknown fields stay, the declared ones are
    /// pruned by their own schemas.
    fn skip_prune(&mut self, v: &mut Value, s: &Value, depth: usize, root: bool) {
        if depth > MAX_DEPTH {
            return;
        }
        match v {
            Value::Object(map) => {
                let embedded = root || flag(s, "x-kubernetes-embedded-resource");
                let props = properties(s);
                let additional = Additional::of(s);
                for (k, child) in map.iter_mut() {
                    if embedded && RESOURCE_FIELDS.contains(&k.as_str()) {
                        self.keeps_resource_field(k, child, root, depth);
                        continue;
                    }
                    let schema = match (props.and_then(|p| p.get(k)), additional) {
                        (Some(p), _) => Some(p),
                        (None, Additional::Schema(a)) => Some(a),
                        (None, Additional::Any) => None,
                        (None, Additional::No) => continue,
                    };
                    let len = self.push_key(k);
                    self.prune(child, schema, depth + 1, false);
                    self.path.truncate(len);
                }
            }
            Value::Array(list) => {
                let Some(item) = items(s) else { return };
                for (i, x) in list.iter_mut().enumerate() {
                    let len = self.push_index(i);
                    self.skip_prune(x, item, depth + 1, false);
                    self.path.truncate(len);
                }
            }
            _ => {}
        }
    }
}

/// Prune a custom resource (a whole object, as a request sends it) by its CRD's
/// `openAPIV3Schema`, as kube-apiserver's decoder does, and say what was dropped.
pub fn prune(schema: &Value, obj: &mut Value) -> UnknownFields {
    let mut w = Pruning::default();
    if let Some(meta) = obj.get_mut("metadata") {
        w.meta = coerce_meta(meta, "metadata", 1);
    }
    w.prune(obj, Some(schema), 0, true);
    let total = w.meta.seen + w.pruned.seen + w.embedded_meta.seen;
    let listed = [w.meta.kept, w.pruned.kept, w.embedded_meta.kept]
        .into_iter()
        .flatten()
        .take(LISTED)
        .collect();
    UnknownFields { listed, total }
}

/// Server-side apply's check of its patch against the schema, as the field manager makes it
/// (structured-merge-diff): the paths of the fields the schema does not declare, each as
/// `.spec.drfit`, `.spec.env[0].x` or `.spec.items[name="a"].x` (a list with map keys), sorted, at
/// most [`LISTED`]. Where a map has undeclared fields only the first is named and its known
/// fields are not looked into; nothing below `x-kubernetes-preserve-unknown-fields`,
/// `additionalProperties: true` or an object schema without properties is checked.
/// (structured-merge-diff names a map's first undeclared field in the patch's order, the
/// simulator in sorted order.)
pub fn apply_errors(schema: &Value, patch: &Value) -> Vec<String> {
    let mut found = Smallest::default();
    undeclared(patch, Some(schema), &mut String::new(), 0, true, &mut found);
    found.kept.into_iter().collect()
}

fn undeclared(v: &Value, s: Option<&Value>, path: &mut String, depth: usize, root: bool, found: &mut Smallest) {
    let Some(s) = s else { return };
    if depth > MAX_DEPTH || flag(s, "x-kubernetes-preserve-unknown-fields") {
        return;
    }
    match v {
        Value::Object(map) => {
            let embedded = root || flag(s, "x-kubernetes-embedded-resource");
            let props = properties(s);
            let additional = Additional::of(s);
            if !embedded && props.is_none_or(|p| p.is_empty()) && additional == Additional::No {
                return; // an object of any shape
            }
            let known = |k: &str| {
                (embedded && RESOURCE_FIELDS.contains(&k))
                    || props.is_some_and(|p| p.contains_key(k))
                    || additional != Additional::No
            };
            if let Some(k) = map.keys().find(|k| !known(k)) {
                found.add(format!("{path}.{k}"));
                return;
            }
            for (k, child) in map {
                let len = path.len();
                path.push('.');
                path.push_str(k);
                if embedded && k == "metadata" {
                    undeclared(child, Some(&OBJECT_META), path, depth + 1, false, found);
                } else if !(embedded && RESOURCE_FIELDS.contains(&k.as_str())) {
                    let schema = props.and_then(|p| p.get(k)).or(additional.schema());
                    undeclared(child, schema, path, depth + 1, false, found);
                }
                path.truncate(len);
            }
        }
        Value::Array(list) => {
            let keys: Vec<&str> = s
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .filter(|_| s.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map"))
                .map(|ks| ks.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for (i, x) in list.iter().enumerate() {
                let len = path.len();
                match x.as_object().filter(|_| !keys.is_empty()) {
                    Some(item) => {
                        let parts: Vec<String> = keys
                            .iter()
                            .map(|k| format!("{k}={}", item.get(*k).unwrap_or(&Value::Null)))
                            .collect();
                        path.push_str(&format!("[{}]", parts.join(",")));
                    }
                    None => path.push_str(&format!("[{i}]")),
                }
                undeclared(x, items(s), path, depth + 1, false, found);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// kube-apiserver's answer to an apply patch with undeclared fields ([`apply_errors`]): a 500
/// with no reason, naming the patch's object as the field manager does
/// (`failed to create typed patch object (ns/name; group/version, Kind=Kind): …`).
pub fn apply_error(def: &ResourceDef, patch: &Value, paths: &[String]) -> ApiError {
    let meta = |f: &str| {
        patch
            .pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let errors = match paths {
        [one] => format!("{one}: field not declared in schema"),
        many => {
            let lines: Vec<String> = many
                .iter()
                .map(|p| format!("\n  {p}: field not declared in schema"))
                .collect();
            format!("errors:{}", lines.concat())
        }
    };
    ApiError::new(
        500,
        "",
        format!(
            "failed to create typed patch object ({}/{}; {}/{}, Kind={}): {errors}",
            meta("namespace"),
            meta("name"),
            def.group,
            def.version,
            def.kind
        ),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    /// A schema with a field of each kind kube-apiserver prunes differently (the one the
    /// conformance suite's real server was asked about).
    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "module": {"type": "object", "properties": {"source": {"type": "string"}, "version": {"type": "string"}}},
                "m": {"type": "object", "additionalProperties": {"type": "object", "properties": {"a": {"type": "string"}}}},
                "keep": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                         "properties": {"inner": {"type": "object", "properties": {"b": {"type": "string"}}}}},
                "l": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "env": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "anyv": {"type": "object", "additionalProperties": true},
                "bare": {"type": "object"},
                "emb": {"type": "object", "x-kubernetes-embedded-resource": true,
                        "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}}},
            }},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
        }})
    }

    fn object(spec: Value) -> Value {
        json!({"apiVersion": "p.io/v1", "kind": "Probe", "metadata": {"name": "a", "labels": {"x": "y"}}, "spec": spec})
    }

    #[test]
    fn undeclared_fields_are_dropped_and_named_by_their_paths() {
        let mut obj = object(json!({
            "module": {"source": "s", "vesion": "1"}, "drfit": {"x": 1},
            "m": {"k1": {"a": "x", "z": 1}, "k.2": {"q": 1}},
            "keep": {"free": {"deep": 1}, "inner": {"b": "x", "c": 2}},
            "l": [{"name": "n1", "u": 1}], "env": [{"name": "A"}, {"name": "B", "x": 1}],
            "anyv": {"x": {"y": 1}, "s": 1}, "bare": {"x": 1},
            "emb": {"apiVersion": "v1", "kind": "Foo", "metadata": {"name": "z", "bogus": 1}, "spec": {"x": "1", "y": 2}, "other": 1},
        }));
        obj["bogus"] = json!(1);
        obj["metadata"]["foo"] = json!(1);
        let unknown = prune(&schema(), &mut obj);
        // kube-apiserver v1.36's order: the object's metadata, the pruned paths sorted, then
        // embedded metadata.
        assert_eq!(
            unknown.listed(),
            [
                "metadata.foo",
                "bogus",
                "spec.anyv.x.y",
                "spec.bare.x",
                "spec.drfit",
                "spec.emb.other",
                "spec.emb.spec.y",
                "spec.env[1].x",
                "spec.keep.inner.c",
                "spec.l[0].u",
                "spec.m.k.2.q",
                "spec.m.k1.z",
                "spec.module.vesion",
                "spec.emb.metadata.bogus",
            ]
        );
        assert_eq!(unknown.total(), 14);
        assert_eq!(
            obj,
            object(json!({
                "module": {"source": "s"},
                "m": {"k1": {"a": "x"}, "k.2": {}},
                "keep": {"free": {"deep": 1}, "inner": {"b": "x"}},
                "l": [{"name": "n1"}], "env": [{"name": "A"}, {"name": "B"}],
                "anyv": {"x": {}, "s": 1}, "bare": {},
                "emb": {"apiVersion": "v1", "kind": "Foo", "metadata": {"name": "z"}, "spec": {"x": "1"}},
            }))
        );
        assert!(
            prune(&schema(), &mut obj).is_empty(),
            "pruning twice finds nothing more"
        );
    }

    #[test]
    fn metadata_api_version_and_kind_stay_whatever_the_schema_declares() {
        // A schema that declares metadata as a bare object (as most CRDs do) or not at all.
        for schema in [
            json!({"type": "object", "properties": {"metadata": {"type": "object"}}}),
            json!({"type": "object"}),
        ] {
            let mut obj = json!({"apiVersion": "p.io/v1", "kind": "Probe",
                "metadata": {"name": "a", "namespace": "n", "labels": {"a": "b"}, "annotations": {"c": "d"},
                             "finalizers": ["f"], "ownerReferences": [{"uid": "u", "odd": 1}]},
                "spec": {"x": 1}});
            let unknown = prune(&schema, &mut obj);
            // What kube-apiserver v1.36 says of the same object.
            assert_eq!(unknown.listed(), ["metadata.ownerReferences[0].odd", "spec"]);
            assert_eq!(obj["metadata"]["ownerReferences"][0], json!({"uid": "u"}));
            assert_eq!(obj["metadata"]["labels"]["a"], "b");
            assert_eq!(obj["metadata"]["finalizers"], json!(["f"]));
            assert_eq!(
                (obj["apiVersion"].as_str(), obj["kind"].as_str()),
                (Some("p.io/v1"), Some("Probe"))
            );
        }
    }

    #[test]
    fn a_root_that_preserves_unknown_fields_still_prunes_declared_ones() {
        let schema = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}}});
        let mut obj = json!({"apiVersion": "p.io/v1", "kind": "P", "metadata": {"name": "a"},
            "free": {"x": 1}, "spec": {"a": "1", "b": 2}});
        let unknown = prune(&schema, &mut obj);
        assert_eq!(unknown.listed(), ["spec.b"]);
        assert_eq!(obj["free"], json!({"x": 1}));
    }

    #[test]
    fn warnings_and_the_strict_error_name_at_most_fifty_and_count_the_rest() {
        let fields: serde_json::Map<String, Value> = (0..300).map(|i| (format!("field{i:03}"), json!(1))).collect();
        let mut obj = object(json!({"bare": fields}));
        let unknown = prune(&schema(), &mut obj);
        assert_eq!(unknown.total(), 300);
        let warnings = unknown.warnings();
        assert_eq!(warnings.len(), LISTED + 1);
        assert_eq!(warnings[0], "unknown field \"spec.bare.field000\"");
        assert_eq!(warnings[LISTED - 1], "unknown field \"spec.bare.field049\"");
        assert_eq!(warnings[LISTED], "and 250 more unknown fields");
        let strict = unknown.strict_error();
        assert!(
            strict.starts_with(
                "strict decoding error: unknown field \"spec.bare.field000\", unknown field \"spec.bare.field001\""
            ),
            "{strict}"
        );
        assert!(
            strict.ends_with("unknown field \"spec.bare.field049\", and 250 more unknown fields"),
            "{strict}"
        );
    }

    #[test]
    fn the_strict_error_lists_every_field_when_few() {
        let mut obj = object(json!({"drfit": 1, "module": {"vesion": "1"}}));
        assert_eq!(
            prune(&schema(), &mut obj).strict_error(),
            "strict decoding error: unknown field \"spec.drfit\", unknown field \"spec.module.vesion\""
        );
    }

    #[test]
    fn field_validation_is_warn_unless_asked_and_refuses_other_values_as_kube_apiserver() {
        assert_eq!(FieldValidation::parse(None, "CreateOptions"), Ok(FieldValidation::Warn));
        assert_eq!(
            FieldValidation::parse(Some(""), "CreateOptions"),
            Ok(FieldValidation::Warn)
        );
        assert_eq!(
            FieldValidation::parse(Some("Strict"), "PatchOptions"),
            Ok(FieldValidation::Strict)
        );
        assert_eq!(
            FieldValidation::parse(Some("Ignore"), "PatchOptions"),
            Ok(FieldValidation::Ignore)
        );
        let e = FieldValidation::parse(Some("strict"), "UpdateOptions").unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
        assert_eq!(
            e.message,
            "UpdateOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \"strict\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
        );
        assert_eq!(e.details.unwrap()["causes"][0]["field"], "fieldValidation");
    }

    #[test]
    fn apply_names_the_first_undeclared_field_of_a_map_and_looks_no_further_in_it() {
        let errors = |spec: Value| apply_errors(&schema(), &object(spec));
        // What kube-apiserver v1.36 answered for the same patches.
        assert_eq!(errors(json!({"module": {"source": "x"}, "drfit": 1})), [".spec.drfit"]);
        assert_eq!(
            errors(json!({"module": {"source": "x", "vesion": 1}, "drfit": 1, "env": [{"name": "A", "x": 1}]})),
            [".spec.drfit"]
        );
        assert_eq!(
            errors(json!({"module": {"vesion": 1}, "env": [{"name": "A", "x": 1}]})),
            [".spec.env[0].x", ".spec.module.vesion"]
        );
        assert_eq!(
            errors(json!({"l": [{"name": "n1", "u": 1}]})),
            [".spec.l[name=\"n1\"].u"]
        );
        assert_eq!(errors(json!({"m": {"k1": {"z": 1}}})), [".spec.m.k1.z"]);
        // Open shapes are not looked into.
        assert!(
            errors(json!({"anyv": {"x": {"y": 1}}, "bare": {"x": 1}, "keep": {"free": 1, "inner": {"c": 1}}}))
                .is_empty()
        );
        let mut with_meta = object(json!({"drfit": 1}));
        with_meta["metadata"]["foo"] = json!(1);
        assert_eq!(apply_errors(&schema(), &with_meta), [".metadata.foo", ".spec.drfit"]);
        let mut owned = object(json!({}));
        owned["metadata"]["ownerReferences"] = json!([{"uid": "u1", "name": "cm", "odd": 1}]);
        assert_eq!(
            apply_errors(&schema(), &owned),
            [".metadata.ownerReferences[uid=\"u1\"].odd"]
        );
    }

    #[test]
    fn an_apply_error_is_the_field_managers_500_naming_the_object() {
        let mut def = crate::resources::Registry::builtin().all()[0].clone();
        (def.group, def.version, def.kind) = ("p.io".into(), "v1".into(), "Probe".into());
        let patch = object(json!({}));
        let one = apply_error(&def, &patch, &[".spec.drfit".into()]);
        assert_eq!((one.code, one.reason.as_str()), (500, ""));
        assert_eq!(
            one.message,
            "failed to create typed patch object (/a; p.io/v1, Kind=Probe): .spec.drfit: field not declared in schema"
        );
        let two = apply_error(&def, &patch, &[".metadata.foo".into(), ".spec.drfit".into()]);
        assert_eq!(
            two.message,
            "failed to create typed patch object (/a; p.io/v1, Kind=Probe): errors:\n  .metadata.foo: field not declared in schema\n  .spec.drfit: field not declared in schema"
        );
    }

    #[test]
    fn deep_values_are_walked_to_a_bound_without_overflowing_the_stack() {
        let mut deep = json!({"x": 1});
        for _ in 0..1000 {
            deep = json!([deep]);
        }
        let mut obj = object(json!({"env": deep}));
        let unknown = prune(&schema(), &mut obj);
        // Walked down to the bound, not to the object at the bottom.
        assert!(unknown.is_empty(), "{unknown:?}");
        assert!(apply_errors(&schema(), &obj).is_empty());
    }

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "[a-z]{0,3}".prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("properties".to_string()),
                        Just("items".to_string()),
                        Just("additionalProperties".to_string()),
                        Just("x-kubernetes-preserve-unknown-fields".to_string()),
                        Just("x-kubernetes-embedded-resource".to_string()),
                        Just("x-kubernetes-list-type".to_string()),
                        Just("x-kubernetes-list-map-keys".to_string()),
                        Just("metadata".to_string()),
                        "[a-c]{1,2}",
                    ],
                    inner,
                    0..5
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Any schema, any object: no panic, nothing added, a second pruning finds nothing, and
        /// at most `LISTED` paths named.
        #[test]
        fn pruning_never_panics_only_removes_and_is_idempotent(schema in any_json(), obj in any_json()) {
            let mut pruned = obj.clone();
            let unknown = prune(&schema, &mut pruned);
            prop_assert!(unknown.listed().len() <= LISTED);
            prop_assert!(unknown.listed().len() <= unknown.total());
            prop_assert!(contained(&pruned, &obj), "{pruned} is not within {obj}");
            let mut again = pruned.clone();
            prop_assert!(prune(&schema, &mut again).is_empty());
            prop_assert_eq!(again, pruned);
            let _ = apply_errors(&schema, &obj);
        }
    }

    /// Every key of `a` is in `b`, recursively (arrays item by item).
    fn contained(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => x.iter().all(|(k, v)| y.get(k).is_some_and(|w| contained(v, w))),
            (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(v, w)| contained(v, w)),
            (x, y) => x == y,
        }
    }
}

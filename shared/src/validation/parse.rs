//! Parsing raw JSON into a [`CaptfObject`] with field paths on type errors.
//!
//! serde's own error names no field (and loses the path inside the flattened common spec), so on a
//! parse failure the value is walked against the generated CRD schema, the same schema the API
//! server applies, to name each field whose JSON type is wrong. Whatever the walk cannot explain
//! (metadata, a mismatch the schema allows but serde does not) falls back to serde's message.
//!
//! A type error must not hide the other violations: the walk also notes how to repair each field it
//! reports (an optional field is removed, a required one, a list item or a map entry gets a
//! placeholder of its schema's type), and the repaired copy is parsed once more. When that parses,
//! the value rules ([`validate_create`](super::validate_create)) run on it and every violation they
//! find is added, except those the repair could have caused: at or below a repaired field, or whose
//! rule names one (`must be less than spec.jobs.activeDeadlineSeconds` when that deadline was the
//! bad field). One walk, at most one repaired copy and one more parse: bounded whatever the input.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::{FieldPath, MAX_KEPT_VIOLATIONS, Report};
use crate::types::{CaptfObject, ParseObjectError, SERVED_KINDS};

/// The root `openAPIV3Schema` of each served kind, from the generated CRDs.
static SCHEMAS: LazyLock<BTreeMap<String, JSONSchemaProps>> = LazyLock::new(|| {
    crate::crd::crds()
        .into_iter()
        .filter_map(|crd| {
            let schema = crd.spec.versions.first()?.schema.as_ref()?.open_api_v3_schema.clone()?;
            Some((crd.spec.names.kind, schema))
        })
        .collect()
});

/// Parse an object of `kind` (as in an AdmissionReview's `request.kind.kind`). A failure is a
/// [`Report`] whose violations name the fields: an unknown kind is a violation at `kind`, a value
/// of the wrong JSON type one at its path (`spec.jobs.activeDeadlineSeconds: must be an integer
/// (got "1h")`), a missing required field one at its path. The report also holds what the value
/// rules ([`validate_create`](super::validate_create)) find in every other field (see the module
/// docs), sorted by field path.
pub fn parse_object(kind: &str, value: &Value) -> Result<CaptfObject, Report> {
    let mut report = Report::default();
    if !SERVED_KINDS.contains(&kind) {
        report.violation(
            &FieldPath::new("kind"),
            format!("must be one of {}", SERVED_KINDS.join(", ")),
            &kind,
        );
        return Err(report);
    }
    if !value.is_object() {
        report.violation(
            &FieldPath::new("object"),
            format!("must be a JSON object ({kind})"),
            value,
        );
        return Err(report);
    }
    let err = match CaptfObject::from_kind_value(kind, value.clone()) {
        Ok(obj) => return Ok(obj),
        Err(ParseObjectError::Invalid { source, .. }) => source.to_string(),
        Err(other) => other.to_string(),
    };
    let mut fixes = Fixes::default();
    if let Some(meta) = value.get("metadata")
        && let Err(e) = serde_json::from_value::<ObjectMeta>(meta.clone())
    {
        report.violation(
            &FieldPath::new("metadata"),
            format!("is not valid object metadata: {e}"),
            meta,
        );
        fixes.note("/metadata", "metadata", Some(Value::Object(serde_json::Map::new())));
    }
    if let (Some(schema), Some(fields)) = (SCHEMAS.get(kind), value.as_object()) {
        for (name, field) in fields {
            // Metadata is checked above; apiVersion and kind are the API server's business.
            if matches!(name.as_str(), "metadata" | "apiVersion" | "kind") {
                continue;
            }
            if let Some(sub) = schema.properties.as_ref().and_then(|p| p.get(name)) {
                walk(
                    &mut report,
                    &mut fixes,
                    &Here {
                        path: &FieldPath::new(name),
                        pointer: &pointer_child("", name),
                    },
                    field,
                    sub,
                    is_required(schema, name),
                );
            }
        }
        missing_required(&mut report, &mut fixes, &FieldPath::new(""), "", fields, schema);
    }
    if report.violations.is_empty() {
        report.violation(
            &FieldPath::new("object"),
            format!("does not parse as a {kind}: {err}"),
            value,
        );
    } else {
        value_rules_on_the_repaired_copy(&mut report, kind, value, &fixes);
    }
    // In field-path order, as the answer lists them (stable: one field's violations keep theirs).
    report.violations.sort_by(|a, b| a.field.cmp(&b.field));
    Err(report)
}

/// At most this many repairs are noted; past it the answer is full anyway ([`MAX_KEPT_VIOLATIONS`]),
/// so the value rules are not run on a repaired copy.
const MAX_FIXES: usize = MAX_KEPT_VIOLATIONS;

/// How deep a placeholder for a required object is built (the CRD schemas are far shallower).
const MAX_PLACEHOLDER_DEPTH: usize = 16;

/// Where the walk is: the field path it reports and the JSON pointer of the value.
struct Here<'a> {
    path: &'a FieldPath,
    pointer: &'a str,
}

/// One repair: at `pointer`, put `with` (or remove the field when `None`).
struct Fix {
    pointer: String,
    /// The field path reported for it.
    field: String,
    with: Option<Value>,
}

#[derive(Default)]
struct Fixes {
    list: Vec<Fix>,
    /// More than [`MAX_FIXES`] were needed: no repaired copy is built.
    overflow: bool,
}

impl Fixes {
    fn note(&mut self, pointer: &str, field: &str, with: Option<Value>) {
        if self.list.len() < MAX_FIXES {
            self.list.push(Fix {
                pointer: pointer.to_string(),
                field: field.to_string(),
                with,
            });
        } else {
            self.overflow = true;
        }
    }

    /// A field the walk reported: a required one (or a list item, or a map entry) gets a
    /// placeholder of its schema's type, an optional one is removed.
    fn repair(&mut self, here: &Here<'_>, schema: &JSONSchemaProps, required: bool) {
        let with = required.then(|| placeholder(schema, 0));
        self.note(here.pointer, here.path.as_str(), with);
    }
}

/// `parent`'s JSON pointer extended by the object key `name` (RFC 6901 escaping).
fn pointer_child(parent: &str, name: &str) -> String {
    format!("{parent}/{}", name.replace('~', "~0").replace('/', "~1"))
}

/// The least value of a schema's type that serde takes: the first enum value, `0`, `""`, `false`,
/// `[]`, or an object holding placeholders for its required fields.
fn placeholder(schema: &JSONSchemaProps, depth: usize) -> Value {
    if let Some(first) = schema.enum_.iter().flatten().find(|a| !a.0.is_null()) {
        return first.0.clone();
    }
    if schema.x_kubernetes_int_or_string == Some(true) {
        return Value::from(0);
    }
    match schema.type_.as_deref() {
        Some("object") => {
            let mut map = serde_json::Map::new();
            if depth < MAX_PLACEHOLDER_DEPTH
                && let Some(props) = &schema.properties
            {
                for name in schema.required.iter().flatten() {
                    if let Some(sub) = props.get(name) {
                        map.insert(name.clone(), placeholder(sub, depth + 1));
                    }
                }
            }
            Value::Object(map)
        }
        Some("array") => Value::Array(Vec::new()),
        Some("string") if schema.format.as_deref() == Some("date-time") => Value::from("1970-01-01T00:00:00Z"),
        Some("string") => Value::from(""),
        Some("integer" | "number") => Value::from(0),
        Some("boolean") => Value::Bool(false),
        _ => Value::Null,
    }
}

/// Apply one repair to `value`; a pointer that no longer leads anywhere is skipped.
fn apply(value: &mut Value, fix: &Fix) {
    let Some((parent, token)) = fix.pointer.rsplit_once('/') else {
        return;
    };
    let token = token.replace("~1", "/").replace("~0", "~");
    match (value.pointer_mut(parent), &fix.with) {
        (Some(Value::Object(map)), Some(with)) => {
            map.insert(token, with.clone());
        }
        (Some(Value::Object(map)), None) => {
            map.remove(&token);
        }
        (Some(Value::Array(items)), Some(with)) => {
            if let Some(slot) = token.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                *slot = with.clone();
            }
        }
        _ => {}
    }
}

/// Whether `text` names `field` or a field below it (`spec.jobs` in `spec.jobs.binary is ...`).
fn names_field(text: &str, field: &str) -> bool {
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(field).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + field.len()..].chars().next();
        !before.is_some_and(|c| is_path_char(c) || c == '.') && !after.is_some_and(is_path_char)
    })
}

/// A violation the repair could have caused: at or below a repaired field, or naming one.
fn caused_by_repair(fixes: &Fixes, field: &str, rule: &str) -> bool {
    fixes.list.iter().any(|f| {
        let below = field
            .strip_prefix(f.field.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['));
        below || names_field(rule, &f.field)
    })
}

/// The value rules on a copy with every reported field repaired, when that copy parses: their
/// violations (and warnings) join the report, except those the repair could have caused.
fn value_rules_on_the_repaired_copy(report: &mut Report, kind: &str, value: &Value, fixes: &Fixes) {
    if fixes.overflow || fixes.list.is_empty() {
        return;
    }
    let mut repaired = value.clone();
    for fix in &fixes.list {
        apply(&mut repaired, fix);
    }
    let Ok(obj) = CaptfObject::from_kind_value(kind, repaired) else {
        return;
    };
    let found = super::validate_create(&obj);
    let mut more = Report {
        omitted_violations: found.omitted_violations,
        omitted_warnings: found.omitted_warnings,
        ..Report::default()
    };
    more.violations = found
        .violations
        .into_iter()
        .filter(|v| !caused_by_repair(fixes, &v.field, &v.rule))
        .collect();
    more.warnings = found
        .warnings
        .into_iter()
        .filter(|w| {
            let field = w.split_once(": ").map_or(w.as_str(), |(f, _)| f);
            !caused_by_repair(fixes, field, w)
        })
        .collect();
    report.merge(more);
}

fn is_required(schema: &JSONSchemaProps, name: &str) -> bool {
    schema.required.iter().flatten().any(|r| r == name)
}

/// Report (and note a placeholder for) each required field of `schema` missing from `fields`.
fn missing_required(
    report: &mut Report,
    fixes: &mut Fixes,
    path: &FieldPath,
    pointer: &str,
    fields: &serde_json::Map<String, Value>,
    schema: &JSONSchemaProps,
) {
    for name in schema.required.iter().flatten() {
        if !fields.contains_key(name) {
            let at = path.child(name);
            report.violation(&at, "is required", &Value::Null);
            let with = schema
                .properties
                .as_ref()
                .and_then(|p| p.get(name))
                .map(|sub| placeholder(sub, 0));
            fixes.note(&pointer_child(pointer, name), at.as_str(), with);
        }
    }
}

/// Check `value`'s JSON type against `schema`, recursively, recording one violation per wrong field
/// and how to repair it.
fn walk(
    report: &mut Report,
    fixes: &mut Fixes,
    here: &Here<'_>,
    value: &Value,
    schema: &JSONSchemaProps,
    required: bool,
) {
    let path = here.path;
    if value.is_null() {
        // serde takes null for every optional field; a required one is missing.
        if required && schema.nullable != Some(true) {
            report.violation(path, "is required", value);
            fixes.repair(here, schema, true);
        }
        return;
    }
    if let Some(allowed) = &schema.enum_
        && !allowed.iter().any(|a| &a.0 == value)
    {
        let names: Vec<String> = allowed
            .iter()
            .filter(|a| !a.0.is_null())
            .map(|a| a.0.as_str().map_or_else(|| a.0.to_string(), str::to_string))
            .collect();
        report.violation(path, format!("must be one of {}", names.join(", ")), value);
        fixes.repair(here, schema, required);
        return;
    }
    if schema.x_kubernetes_int_or_string == Some(true) {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            report.violation(path, "must be an integer or a string", value);
            fixes.repair(here, schema, required);
        }
        return;
    }
    let Some(type_) = schema.type_.as_deref() else {
        return;
    };
    let wrong = match type_ {
        "object" => {
            let Some(fields) = value.as_object() else {
                report.violation(path, "must be an object", value);
                fixes.repair(here, schema, required);
                return;
            };
            if let Some(props) = &schema.properties {
                for (name, field) in fields {
                    if let Some(sub) = props.get(name) {
                        let child = Here {
                            path: &path.child(name),
                            pointer: &pointer_child(here.pointer, name),
                        };
                        walk(report, fixes, &child, field, sub, is_required(schema, name));
                    }
                }
                missing_required(report, fixes, path, here.pointer, fields, schema);
            } else if let Some(JSONSchemaPropsOrBool::Schema(sub)) = &schema.additional_properties {
                for (key, field) in fields {
                    let child = Here {
                        path: &path.key(key),
                        pointer: &pointer_child(here.pointer, key),
                    };
                    walk(report, fixes, &child, field, sub, true);
                }
            }
            None
        }
        "array" => {
            let Some(items) = value.as_array() else {
                report.violation(path, "must be a list", value);
                fixes.repair(here, schema, required);
                return;
            };
            if let Some(JSONSchemaPropsOrArray::Schema(sub)) = &schema.items {
                for (i, item) in items.iter().enumerate() {
                    let child = Here {
                        path: &path.index(i),
                        pointer: &format!("{}/{i}", here.pointer),
                    };
                    walk(report, fixes, &child, item, sub, true);
                }
            }
            None
        }
        "string" => match value.as_str() {
            None => Some("must be a string"),
            Some(s) if schema.format.as_deref() == Some("date-time") && s.parse::<jiff::Timestamp>().is_err() => {
                Some("must be an RFC 3339 time like 2024-06-01T10:20:30Z")
            }
            Some(_) => None,
        },
        "integer" => integer_wrong(value, schema),
        "number" if !value.is_number() => Some("must be a number"),
        "boolean" if !value.is_boolean() => Some("must be true or false"),
        _ => None,
    };
    if let Some(what) = wrong {
        report.violation(path, what, value);
        fixes.repair(here, schema, required);
    }
}

/// What is wrong with `value` as an integer of `schema` (None: nothing), by its format. The CRDs
/// write Rust's `u32` as `int64` with `minimum: 0` and `maximum: 4294967295`, the form the API
/// server knows; that is read as `uint32` again. Other bounds are the rules' to judge.
fn integer_wrong(value: &Value, schema: &JSONSchemaProps) -> Option<&'static str> {
    let format = match schema.format.as_deref() {
        Some("int64") if schema.minimum == Some(0.0) && schema.maximum == Some(f64::from(u32::MAX)) => Some("uint32"),
        other => other,
    };
    let fits = match format {
        Some("int32") => value.as_i64().is_some_and(|v| i32::try_from(v).is_ok()),
        Some("uint32") => value.as_u64().is_some_and(|v| u32::try_from(v).is_ok()),
        Some("uint64") => value.is_u64(),
        _ => value.is_i64(),
    };
    (!fits).then_some(match format {
        Some("int32") => "must be a 32-bit integer",
        Some("uint32") => "must be a non-negative 32-bit integer",
        Some("uint64") => "must be a non-negative integer",
        _ => "must be a 64-bit integer",
    })
}

//! Parsing raw JSON into a [`CaptfObject`] with field paths on type errors.
//!
//! serde's own error names no field (and loses the path inside the flattened common spec), so on a
//! parse failure the value is walked against the generated CRD schema, the same schema the API
//! server applies, to name each field whose JSON type is wrong. Whatever the walk cannot explain
//! (metadata, a mismatch the schema allows but serde does not) falls back to serde's message.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::{FieldPath, Report};
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
/// (got "1h")`), a missing required field one at its path.
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
    if let Some(meta) = value.get("metadata")
        && let Err(e) = serde_json::from_value::<ObjectMeta>(meta.clone())
    {
        report.violation(
            &FieldPath::new("metadata"),
            format!("is not valid object metadata: {e}"),
            meta,
        );
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
                    &FieldPath::new(name),
                    field,
                    sub,
                    is_required(schema, name),
                );
            }
        }
        for name in schema.required.iter().flatten() {
            if !fields.contains_key(name) {
                report.violation(&FieldPath::new(name), "is required", &Value::Null);
            }
        }
    }
    if report.violations.is_empty() {
        report.violation(
            &FieldPath::new("object"),
            format!("does not parse as a {kind}: {err}"),
            value,
        );
    }
    Err(report)
}

fn is_required(schema: &JSONSchemaProps, name: &str) -> bool {
    schema.required.iter().flatten().any(|r| r == name)
}

/// Check `value`'s JSON type against `schema`, recursively, recording one violation per wrong field.
fn walk(report: &mut Report, path: &FieldPath, value: &Value, schema: &JSONSchemaProps, required: bool) {
    if value.is_null() {
        // serde takes null for every optional field; a required one is missing.
        if required && schema.nullable != Some(true) {
            report.violation(path, "is required", value);
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
        return;
    }
    if schema.x_kubernetes_int_or_string == Some(true) {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            report.violation(path, "must be an integer or a string", value);
        }
        return;
    }
    let Some(type_) = schema.type_.as_deref() else {
        return;
    };
    match type_ {
        "object" => {
            let Some(fields) = value.as_object() else {
                report.violation(path, "must be an object", value);
                return;
            };
            if let Some(props) = &schema.properties {
                for (name, field) in fields {
                    if let Some(sub) = props.get(name) {
                        walk(report, &path.child(name), field, sub, is_required(schema, name));
                    }
                }
                for name in schema.required.iter().flatten() {
                    if !fields.contains_key(name) {
                        report.violation(&path.child(name), "is required", &Value::Null);
                    }
                }
            } else if let Some(JSONSchemaPropsOrBool::Schema(sub)) = &schema.additional_properties {
                for (key, field) in fields {
                    walk(report, &path.key(key), field, sub, true);
                }
            }
        }
        "array" => {
            let Some(items) = value.as_array() else {
                report.violation(path, "must be a list", value);
                return;
            };
            if let Some(JSONSchemaPropsOrArray::Schema(sub)) = &schema.items {
                for (i, item) in items.iter().enumerate() {
                    walk(report, &path.index(i), item, sub, true);
                }
            }
        }
        "string" => {
            let Some(s) = value.as_str() else {
                report.violation(path, "must be a string", value);
                return;
            };
            if schema.format.as_deref() == Some("date-time") && s.parse::<jiff::Timestamp>().is_err() {
                report.violation(path, "must be an RFC 3339 time like 2024-06-01T10:20:30Z", value);
            }
        }
        "integer" => {
            let fits = match schema.format.as_deref() {
                Some("int32") => value.as_i64().is_some_and(|v| i32::try_from(v).is_ok()),
                Some("uint32") => value.as_u64().is_some_and(|v| u32::try_from(v).is_ok()),
                Some("uint64") => value.is_u64(),
                _ => value.is_i64(),
            };
            if !fits {
                let what = match schema.format.as_deref() {
                    Some("int32") => "must be a 32-bit integer",
                    Some("uint32") => "must be a non-negative 32-bit integer",
                    Some("uint64") => "must be a non-negative integer",
                    _ => "must be a 64-bit integer",
                };
                report.violation(path, what, value);
            }
        }
        "number" if !value.is_number() => report.violation(path, "must be a number", value),
        "boolean" if !value.is_boolean() => report.violation(path, "must be true or false", value),
        _ => {}
    }
}

//! `meta.k8s.io/v1` Table responses, so `kubectl get` prints a CRD's printer columns
//! (evaluated with a small JSONPath subset: `.a.b`, `[n]`, `[?(@.k=="v")]`).

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::resources::ResourceDef;

/// Evaluate a printer-column JSONPath; every match, in order.
pub fn json_path<'a>(obj: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut cur = vec![obj];
    let mut rest = path.trim().trim_start_matches('{').trim_end_matches('}');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            cur = cur.into_iter().filter_map(|v| v.get(key)).collect();
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("[?(@.") {
            let Some(end) = r.find(")]") else { return vec![] };
            let cond = &r[..end];
            let (key, want) = match cond.split_once("==") {
                Some((k, v)) => (k.trim(), v.trim().trim_matches(['"', '\''])),
                None => return vec![],
            };
            cur = cur
                .into_iter()
                .flat_map(|v| v.as_array().into_iter().flatten())
                .filter(|item| item.get(key).and_then(Value::as_str) == Some(want))
                .collect();
            rest = &r[end + 2..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else { return vec![] };
            let idx = &r[..end];
            cur = match idx.parse::<usize>() {
                Ok(i) => cur.into_iter().filter_map(|v| v.get(i)).collect(),
                Err(_) => cur
                    .into_iter()
                    .flat_map(|v| v.as_array().into_iter().flatten())
                    .collect(),
            };
            rest = &r[end + 1..];
        } else {
            return vec![];
        }
    }
    cur
}

/// `5m`, `2h3m`, `4d` — as kubectl's HumanDuration, coarsely.
pub fn human_age(now: Timestamp, then: Option<&str>) -> String {
    let Some(then) = then.and_then(|t| t.parse::<Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    let s = (now.as_second() - then.as_second()).max(0);
    match s {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d", s / 86400),
    }
}

fn cell(v: &[&Value]) -> Value {
    let texts: Vec<String> = v
        .iter()
        .map(|x| match x {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    json!(texts.join(","))
}

fn job_status(o: &Value) -> String {
    let conds = o.pointer("/status/conditions").and_then(Value::as_array);
    for t in ["Complete", "Failed", "FailureTarget"] {
        if conds.is_some_and(|c| c.iter().any(|c| c["type"] == t && c["status"] == "True")) {
            return if t == "FailureTarget" {
                "FailureTarget".into()
            } else {
                t.into()
            };
        }
    }
    "Running".into()
}

/// A built-in column: its name and how to read it.
type BuiltinColumn = (&'static str, fn(&Value) -> String);

/// A Table of these objects.
pub fn table(def: &ResourceDef, objects: &[Value], now: Timestamp, rv: u64) -> Value {
    let mut cols =
        vec![json!({"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0})];
    let builtin: Vec<BuiltinColumn> = match def.id().as_str() {
        "/pods" => vec![("Status", |o| {
            o.pointer("/status/phase").and_then(Value::as_str).unwrap_or("").into()
        })],
        "batch/jobs" => vec![("Status", job_status)],
        _ => vec![],
    };
    for (name, _) in &builtin {
        cols.push(json!({"name": name, "type": "string", "format": "", "description": "", "priority": 0}));
    }
    let mut has_age = false;
    for c in &def.columns {
        has_age |= c.json_path == ".metadata.creationTimestamp";
        cols.push(json!({"name": c.name, "type": c.type_, "format": "", "description": "", "priority": c.priority}));
    }
    if !has_age {
        cols.push(json!({"name": "Age", "type": "string", "format": "", "description": "", "priority": 0}));
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let created = o.pointer("/metadata/creationTimestamp").and_then(Value::as_str);
            let mut cells = vec![o.pointer("/metadata/name").cloned().unwrap_or(json!(""))];
            for (_, f) in &builtin {
                cells.push(json!(f(o)));
            }
            for c in &def.columns {
                if c.type_ == "date" {
                    let t = json_path(o, &c.json_path);
                    cells.push(json!(human_age(now, t.first().and_then(|v| v.as_str()))));
                } else {
                    cells.push(cell(&json_path(o, &c.json_path)));
                }
            }
            if !has_age {
                cells.push(json!(human_age(now, created)));
            }
            json!({"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                              "metadata": o.get("metadata").cloned().unwrap_or(json!({}))}})
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv.to_string()},
           "columnDefinitions": cols, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printer_column_paths_filter_conditions_by_type() {
        let o = json!({"status": {"conditions": [{"type": "Synced", "status": "True"},
                                                 {"type": "Ready", "status": "False", "reason": "JobActive"}],
                                  "nextAction": {"op": "apply"}}});
        let p = |path: &str| cell(&json_path(&o, path));
        assert_eq!(p(r#".status.conditions[?(@.type=="Ready")].status"#), json!("False"));
        assert_eq!(
            p(r#".status.conditions[?(@.type=="Ready")].reason"#),
            json!("JobActive")
        );
        assert_eq!(p(".status.nextAction.op"), json!("apply"));
        assert_eq!(p(".status.conditions[0].type"), json!("Synced"));
        assert_eq!(p(".spec.missing"), json!(""));
    }

    #[test]
    fn ages_read_like_kubectl() {
        let now: Timestamp = "2026-01-01T12:00:00Z".parse().unwrap_or_default();
        assert_eq!(human_age(now, Some("2026-01-01T11:59:30Z")), "30s");
        assert_eq!(human_age(now, Some("2026-01-01T11:55:00Z")), "5m0s");
        assert_eq!(human_age(now, Some("2026-01-01T10:00:00Z")), "120m");
        assert_eq!(human_age(now, Some("2025-12-30T12:00:00Z")), "2d");
    }
}

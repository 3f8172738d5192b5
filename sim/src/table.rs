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

/// When a core/v1 Event was first and last seen and how often, as kube-apiserver's printer reads
/// it: first seen is `firstTimestamp`, else `eventTime` (an events.k8s.io/v1 Event has only that);
/// last seen is `lastTimestamp`, else first seen; a `series` gives the last observed time and
/// the count; otherwise `count`, and a singleton without one counts 1.
pub fn event_seen(o: &Value) -> (Option<&str>, Option<&str>, i64) {
    let text = |p: &str| o.pointer(p).and_then(Value::as_str).filter(|s| !s.is_empty());
    let first = text("/firstTimestamp").or_else(|| text("/eventTime"));
    let last = text("/lastTimestamp").or(first);
    if let Some(series) = o.get("series").filter(|s| s.is_object()) {
        let last = series.get("lastObservedTime").and_then(Value::as_str).or(last);
        let count = series.get("count").and_then(Value::as_i64).unwrap_or(1);
        return (first, last, count);
    }
    let count = o.get("count").and_then(Value::as_i64).filter(|c| *c > 0).unwrap_or(1);
    (first, last, count)
}

/// Who reported a core/v1 Event: `source.component` (and `source.host`), else
/// `reportingComponent` (and `reportingInstance`), joined by `, `.
pub fn event_source(o: &Value) -> String {
    let text = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let (who, where_) = match text("/source/component") {
        "" => (text("/reportingComponent"), text("/reportingInstance")),
        component => (component, text("/source/host")),
    };
    match (who, where_) {
        (w, "") => w.to_string(),
        (w, h) => format!("{w}, {h}"),
    }
}

/// The object a core/v1 Event is about: `<kind in lower case>/<name>`.
pub fn event_object(o: &Value) -> String {
    let text = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default();
    format!(
        "{}/{}",
        text("/involvedObject/kind").to_lowercase(),
        text("/involvedObject/name")
    )
}

/// A Table of core/v1 Events with kube-apiserver's columns: `kubectl get events` prints LAST
/// SEEN, TYPE, REASON, OBJECT and MESSAGE, and `-o wide` adds the rest.
fn event_table(objects: &[Value], now: Timestamp, rv: u64) -> Value {
    let col = |name: &str, priority: i32| json!({"name": name, "type": "string", "format": "", "description": "", "priority": priority});
    let cols = vec![
        col("Last Seen", 0),
        col("Type", 0),
        col("Reason", 0),
        col("Object", 0),
        col("Subobject", 1),
        col("Source", 1),
        col("Message", 0),
        col("First Seen", 1),
        col("Count", 1),
        json!({"name": "Name", "type": "string", "format": "name", "description": "", "priority": 1}),
    ];
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let text = |p: &str| json!(o.pointer(p).and_then(Value::as_str).unwrap_or_default().trim());
            let (first, last, count) = event_seen(o);
            let cells = vec![
                json!(human_age(now, last)),
                text("/type"),
                text("/reason"),
                json!(event_object(o)),
                text("/involvedObject/fieldPath"),
                json!(event_source(o)),
                text("/message"),
                json!(human_age(now, first)),
                json!(count),
                text("/metadata/name"),
            ];
            json!({"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                              "metadata": o.get("metadata").cloned().unwrap_or(json!({}))}})
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv.to_string()},
           "columnDefinitions": cols, "rows": rows})
}

/// A Table of these objects.
pub fn table(def: &ResourceDef, objects: &[Value], now: Timestamp, rv: u64) -> Value {
    if def.group.is_empty() && def.plural == "events" {
        return event_table(objects, now, rv);
    }
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

    #[test]
    fn an_event_without_timestamps_is_first_and_last_seen_at_its_event_time_once() {
        let e = json!({"eventTime": "2026-01-01T11:59:00.000000Z"});
        assert_eq!(
            event_seen(&e),
            (
                Some("2026-01-01T11:59:00.000000Z"),
                Some("2026-01-01T11:59:00.000000Z"),
                1
            )
        );
    }

    #[test]
    fn deprecated_timestamps_and_count_win_over_event_time() {
        let e = json!({"eventTime": "2026-01-01T11:00:00Z", "firstTimestamp": "2026-01-01T10:00:00Z",
                       "lastTimestamp": "2026-01-01T11:30:00Z", "count": 4});
        assert_eq!(
            event_seen(&e),
            (Some("2026-01-01T10:00:00Z"), Some("2026-01-01T11:30:00Z"), 4)
        );
    }

    #[test]
    fn a_series_gives_the_last_observed_time_and_count() {
        let e = json!({"eventTime": "2026-01-01T11:00:00Z",
                       "series": {"count": 7, "lastObservedTime": "2026-01-01T11:50:00Z"}});
        assert_eq!(
            event_seen(&e),
            (Some("2026-01-01T11:00:00Z"), Some("2026-01-01T11:50:00Z"), 7)
        );
    }

    #[test]
    fn the_source_is_the_component_else_the_reporting_controller_and_instance() {
        assert_eq!(
            event_source(&json!({"source": {"component": "kubelet", "host": "node-1"},
                                 "reportingComponent": "x"})),
            "kubelet, node-1"
        );
        assert_eq!(
            event_source(&json!({"reportingComponent": "captf.io/controller", "reportingInstance": "captf-0"})),
            "captf.io/controller, captf-0"
        );
        assert_eq!(event_source(&json!({})), "");
    }

    #[test]
    fn the_event_table_has_kube_apiservers_columns_and_reads_an_events_v1_event() {
        let Some(def) = crate::resources::Registry::builtin().find("", "v1", "events").cloned() else {
            panic!("core/v1 events are not served")
        };
        let now: Timestamp = "2026-01-01T12:00:00Z".parse().unwrap_or_default();
        let core = crate::events::to_core(&json!({"metadata": {"name": "prod.1"}, "type": "Warning",
            "reason": "JobFailed", "note": " boom ", "eventTime": "2026-01-01T11:58:00.000000Z",
            "regarding": {"kind": "TerraformCluster", "name": "prod"},
            "reportingController": "captf.io/controller", "reportingInstance": "captf-0"}));
        let t = table(&def, &[core], now, 1);
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["priority"] == 0)
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, ["Last Seen", "Type", "Reason", "Object", "Message"]);
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "2m0s",
                "Warning",
                "JobFailed",
                "terraformcluster/prod",
                "",
                "captf.io/controller, captf-0",
                "boom",
                "2m0s",
                1,
                "prod.1"
            ])
        );
    }
}

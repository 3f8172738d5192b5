//! One Event store, two views: `events.k8s.io/v1` requests are served from the core/v1 Events
//! (as kube-apiserver does), converting field names both ways. Conversions rename only the
//! fields present, so they also apply to partial objects (merge and apply patches).

use serde_json::{Map, Value, json};

/// (events.k8s.io/v1 field, core/v1 field).
const RENAMES: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn rename(obj: &Value, to_core: bool, api_version: &str) -> Value {
    let Some(map) = obj.as_object() else {
        return obj.clone();
    };
    let mut out = Map::new();
    for (k, v) in map {
        let renamed = RENAMES
            .iter()
            .find(|(new, core)| if to_core { k == new } else { k == core })
            .map(|(new, core)| if to_core { *core } else { *new });
        out.insert(renamed.unwrap_or(k).to_string(), v.clone());
    }
    if out.contains_key("apiVersion") {
        out.insert("apiVersion".into(), json!(api_version));
    }
    Value::Object(out)
}

/// An events.k8s.io/v1 Event (or part of one) as a core/v1 Event.
pub fn to_core(obj: &Value) -> Value {
    rename(obj, true, "v1")
}

/// A core/v1 Event as an events.k8s.io/v1 Event.
pub fn to_events_v1(obj: &Value) -> Value {
    rename(obj, false, "events.k8s.io/v1")
}

/// A JSON patch on an events.k8s.io/v1 Event as one on the core/v1 Event.
pub fn json_patch_to_core(patch: &Value) -> Value {
    let Some(ops) = patch.as_array() else {
        return patch.clone();
    };
    let fix = |p: &str| -> String {
        for (new, core) in RENAMES {
            if let Some(rest) = p.strip_prefix(&format!("/{new}"))
                && (rest.is_empty() || rest.starts_with('/'))
            {
                return format!("/{core}{rest}");
            }
        }
        p.to_string()
    };
    Value::Array(
        ops.iter()
            .map(|op| {
                let mut op = op.clone();
                for key in ["path", "from"] {
                    if let Some(p) = op.get(key).and_then(Value::as_str).map(String::from) {
                        op[key] = json!(fix(&p));
                    }
                }
                op
            })
            .collect(),
    )
}

/// A field selector over events.k8s.io/v1 names as one over core/v1 names.
pub fn field_selector_to_core(sel: &str) -> String {
    sel.split(',')
        .map(|part| {
            for (new, core) in RENAMES {
                if let Some(rest) = part.strip_prefix(new)
                    && (rest.starts_with('.') || rest.starts_with('=') || rest.starts_with('!'))
                {
                    return format!("{core}{rest}");
                }
            }
            part.to_string()
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A response body of the core view (Event, EventList, watch event) in the events.k8s.io view.
pub fn response_to_events_v1(body: &Value) -> Value {
    match body.get("kind").and_then(Value::as_str) {
        Some("Event") => to_events_v1(body),
        Some("EventList") => {
            let mut list = body.clone();
            list["apiVersion"] = json!("events.k8s.io/v1");
            if let Some(items) = body.get("items").and_then(Value::as_array) {
                list["items"] = Value::Array(items.iter().map(to_events_v1).collect());
            }
            list
        }
        _ => body.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_convert_both_ways_without_loss() {
        let new = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "a.1"},
            "regarding": {"kind": "TerraformCluster", "name": "prod"}, "note": "boom", "reason": "JobFailed",
            "reportingController": "captf", "reportingInstance": "captf-0", "type": "Warning",
            "eventTime": "2026-01-01T00:00:00.000000Z", "action": "Reconcile", "series": {"count": 2}});
        let core = to_core(&new);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "prod");
        assert_eq!(core["message"], "boom");
        assert_eq!(core["reportingComponent"], "captf");
        assert_eq!(to_events_v1(&core), new);
    }

    #[test]
    fn patches_and_selectors_use_core_names() {
        let p = json_patch_to_core(&json!([{"op": "replace", "path": "/note", "value": "x"},
                                           {"op": "add", "path": "/notes", "value": 1}]));
        assert_eq!(p[0]["path"], "/message");
        assert_eq!(p[1]["path"], "/notes");
        assert_eq!(
            field_selector_to_core("regarding.name=prod,reason=JobFailed"),
            "involvedObject.name=prod,reason=JobFailed"
        );
    }

    #[test]
    fn the_core_view_invents_no_deprecated_timestamps_or_count_as_kube_apiserver() {
        let core = to_core(&json!({"kind": "Event", "eventTime": "2026-01-01T00:00:00.000000Z",
                                   "action": "Apply", "related": {"kind": "Job", "name": "j"}}));
        assert_eq!(core["eventTime"], "2026-01-01T00:00:00.000000Z");
        assert_eq!(core["action"], "Apply");
        assert_eq!(core["related"]["name"], "j");
        for absent in ["firstTimestamp", "lastTimestamp", "count", "source"] {
            assert!(core.get(absent).is_none(), "{absent} in {core}");
        }
    }

    #[test]
    fn deprecated_fields_map_to_their_core_names() {
        let core = to_core(&json!({"deprecatedSource": {"component": "kubelet"},
            "deprecatedFirstTimestamp": "2026-01-01T00:00:00Z", "deprecatedLastTimestamp": "2026-01-01T00:05:00Z",
            "deprecatedCount": 3}));
        assert_eq!(core["source"]["component"], "kubelet");
        assert_eq!(core["firstTimestamp"], "2026-01-01T00:00:00Z");
        assert_eq!(core["lastTimestamp"], "2026-01-01T00:05:00Z");
        assert_eq!(core["count"], 3);
    }
}

//! `events`: the Events about one object, oldest first.

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use serde_json::json;

use captf_shared::Kind;

use crate::conn::Conn;
use crate::errors::{PluginError, from_kube};
use crate::live_read::get_object;
use crate::printed::{Printed, pretty};
use crate::target::Target;
use crate::words;

/// One Event about an object, as `events` prints it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct EventLine {
    pub time: Option<String>,
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub job: Option<String>,
    pub note: String,
    #[serde(skip)]
    pub at: Option<Timestamp>,
}

/// The Events about the object `kind`/`name` with UID `uid` among `all`, oldest first (PURE).
/// An Event counts when it is `regarding` that object (a same-named object with another UID,
/// deleted and created again, is another object).
pub fn event_lines(
    all: &[k8s_openapi::api::events::v1::Event],
    kind: Kind,
    name: &str,
    uid: Option<&str>,
) -> Vec<EventLine> {
    let mut lines: Vec<EventLine> = all
        .iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some(kind.as_str())
                    && r.name.as_deref() == Some(name)
                    && (uid.is_none() || r.uid.is_none() || r.uid.as_deref() == uid)
            })
        })
        .map(|e| {
            let at = e
                .series
                .as_ref()
                .map(|s| s.last_observed_time.0)
                .or(e.event_time.as_ref().map(|t| t.0))
                .or(e.deprecated_last_timestamp.as_ref().map(|t| t.0));
            EventLine {
                time: at.map(|t| t.to_string()),
                type_: e.type_.clone().unwrap_or_default(),
                reason: e.reason.clone().unwrap_or_default(),
                job: e.related.as_ref().and_then(|r| r.name.clone()),
                note: e.note.clone().unwrap_or_default(),
                at,
            }
        })
        .collect();
    lines.sort_by_key(|l| l.at);
    lines
}

/// The `events` table (PURE).
pub fn events_table(lines: &[EventLine], now: Timestamp) -> String {
    let rows: Vec<Vec<String>> = lines
        .iter()
        .map(|l| {
            vec![
                l.at.map_or("-".to_string(), |t| words::age(now, t)),
                l.type_.clone(),
                l.reason.clone(),
                l.job.clone().unwrap_or_else(|| "-".into()),
                l.note.clone(),
            ]
        })
        .collect();
    words::table(&["AGE", "TYPE", "REASON", "JOB", "NOTE"], &rows)
}

pub(crate) async fn events(conn: &Conn, t: &Target, json: bool, now: Timestamp) -> Result<Printed, PluginError> {
    let ns = conn.namespace.as_str();
    let object = get_object(conn, t).await?;
    let all = Api::<k8s_openapi::api::events::v1::Event>::namespaced(conn.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| from_kube(e, "list events", ("list", "events", "events.k8s.io"), Some(ns)))?;
    let lines = event_lines(&all.items, t.kind, &t.name, object.metadata().uid.as_deref());
    if json {
        return Ok(Printed::out(pretty(&json!(lines))));
    }
    if lines.is_empty() {
        return Ok(Printed {
            stderr: format!(
                "No Events about {} {ns}/{} (Events expire, by default after an hour).\n",
                t.kind, t.name
            ),
            ..Default::default()
        });
    }
    Ok(Printed::out(events_table(&lines, now)))
}

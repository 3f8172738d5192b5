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
    /// Which occurrence of which Event this is: the Event's UID (its name without one) and its
    /// count, so an Event seen again (its series counted up) is a new line and the same one read
    /// twice is not (what `events -w` prints once).
    #[serde(skip)]
    pub key: String,
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
            let count = e.series.as_ref().map(|s| s.count).or(e.deprecated_count).unwrap_or(1);
            let id = e
                .metadata
                .uid
                .clone()
                .or_else(|| e.metadata.name.clone())
                .unwrap_or_default();
            EventLine {
                key: format!("{id}#{count}"),
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

/// The cells of the `events` table (PURE).
fn event_rows(lines: &[EventLine], now: Timestamp) -> Vec<Vec<String>> {
    lines
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
        .collect()
}

const HEADER: [&str; 5] = ["AGE", "TYPE", "REASON", "JOB", "NOTE"];

/// The `events` table (PURE).
pub fn events_table(lines: &[EventLine], now: Timestamp) -> String {
    words::table(&HEADER, &event_rows(lines, now))
}

/// The lines of the `events` table without its header, to follow a table printed before (PURE).
pub fn events_rows(lines: &[EventLine], now: Timestamp) -> String {
    let table = words::table(&HEADER, &event_rows(lines, now));
    table
        .split_once('\n')
        .map(|(_, rows)| rows.to_string())
        .unwrap_or_default()
}

/// The Events about the object `t`, oldest first, read live.
pub(crate) async fn read_events(conn: &Conn, t: &Target) -> Result<Vec<EventLine>, PluginError> {
    let ns = conn.namespace.as_str();
    let object = get_object(conn, t).await?;
    let all = Api::<k8s_openapi::api::events::v1::Event>::namespaced(conn.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| from_kube(e, "list events", ("list", "events", "events.k8s.io"), Some(ns)))?;
    Ok(event_lines(
        &all.items,
        t.kind,
        &t.name,
        object.metadata().uid.as_deref(),
    ))
}

/// What `events` prints of the Events about the object `t` in namespace `ns` (PURE).
pub fn print_events(lines: &[EventLine], ns: &str, t: &Target, json: bool, now: Timestamp) -> Printed {
    if json {
        return Printed::out(pretty(&json!(lines)));
    }
    if lines.is_empty() {
        return Printed {
            stderr: format!(
                "No Events about {} {ns}/{} (Events expire, by default after an hour).\n",
                t.kind, t.name
            ),
            ..Default::default()
        };
    }
    Printed::out(events_table(lines, now))
}

pub(crate) async fn events(conn: &Conn, t: &Target, json: bool, now: Timestamp) -> Result<Printed, PluginError> {
    let lines = read_events(conn, t).await?;
    Ok(print_events(&lines, &conn.namespace, t, json, now))
}

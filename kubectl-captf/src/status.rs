//! `status`: one line per object, what is next and when, failures and the last success.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use serde_json::json;

use captf_core::decide::Decision;
use captf_core::explain::Explanation;
use captf_core::lock::LockState;
use captf_read::live;
use captf_shared::types::CaptfObject;
use captf_shared::{Kind, keys, names};

use crate::cli::{Output, SortKey};
use crate::conn::Conn;
use crate::errors::{PluginError, from_runtime};
use crate::live_read::explanation;
use crate::printed::{Printed, pretty};
use crate::words;

/// One line of `status`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The `Ready` condition's status (`True`, `False`, `Unknown`), as `kubectl get` shows it.
    pub ready: Option<String>,
    /// `status.ready`: the infrastructure was provisioned once (Cluster API's contract field).
    pub provisioned: Option<bool>,
    /// Whether a controller has looked at the object (its finalizer or an observed generation).
    pub observed: bool,
    pub next: String,
    pub reason: Option<String>,
    /// When the next step happens (`None`: on a change, or a person's action).
    pub when: Option<String>,
    #[serde(skip)]
    pub when_at: Option<Timestamp>,
    /// When a wait ends, as a time that does not move with the clock (a backoff's end).
    #[serde(skip)]
    pub not_before: Option<Timestamp>,
    pub when_words: String,
    pub consecutive_failures: BTreeMap<String, u32>,
    pub last_success: Option<String>,
    #[serde(skip)]
    pub last_success_at: Option<Timestamp>,
    /// The state lock's holder when it is not one of the object's runners.
    pub foreign_lock_holder: Option<String>,
    pub active_job: Option<String>,
    pub pending_plan: Option<String>,
    /// What the drift checks found: see [`drift_word`].
    pub drift: String,
}

/// What the drift checks of an object found, in one word for the DRIFT column (PURE): `-`
/// (never checked), `none`, `found` (not remediated yet), `remediated` (an apply succeeded
/// since); with `(k/n)` when k of the n checks kept found drift, k ≥ 2, so drift that comes
/// back after every remediation shows.
pub fn drift_word(checks: &[bool], ever_checked: bool, found: bool, applied_since: bool) -> String {
    if checks.is_empty() && !ever_checked {
        return "-".to_string();
    }
    let word = match (found, applied_since) {
        (false, _) => "none",
        (true, false) => "found",
        (true, true) => "remediated",
    };
    let k = checks.iter().filter(|d| **d).count();
    if k >= 2 {
        format!("{word}({k}/{})", checks.len())
    } else {
        word.to_string()
    }
}

/// [`drift_word`] of a snapshot: its successful drift checks kept, newest first.
fn drift_of(s: &captf_core::Snapshot) -> String {
    let checks: Vec<bool> = s
        .jobs
        .iter()
        .filter(|r| r.op == captf_shared::Op::Drift && r.succeeded())
        .filter_map(|r| r.result.as_ref()?.drift)
        .collect();
    let last = s.last_drift_check();
    drift_word(
        &checks,
        last.is_some(),
        s.drift_found(),
        last.is_some_and(|t| s.applied_since_drift_check(t)),
    )
}

/// The `Ready` condition's status of a status, as `kubectl get` prints it.
pub fn ready_condition(s: &captf_shared::types::TerraformStatus) -> Option<String> {
    let cs = s.conditions.as_deref()?;
    captf_shared::conditions::find(cs, captf_shared::conditions::READY).map(|c| c.status.clone())
}

/// Whether a controller has looked at `object`: it carries CAPTF's finalizer, or its status an
/// observed generation (PURE). An object no controller watches has neither.
pub fn observed(object: &CaptfObject) -> bool {
    captf_core::finalizer::has_finalizer(object)
        || captf_core::snapshot::object_status(object).is_some_and(|s| s.observed_generation.is_some())
}

/// What `status` and `explain` say of an object no controller has observed.
pub const NOT_OBSERVED: &str =
    "not observed: no controller has looked at this object (none runs, or none watches its namespace)";

/// The row of one explained object (PURE). `observed`: see [`observed`].
pub fn row(e: &Explanation, observed: bool, waited_on: Option<&LockState>, now: Timestamp) -> Row {
    let s = &e.plan.booked;
    let counts = s.status.consecutive_failures.unwrap_or_default();
    let last = words::last_success(s).map(|(_, t)| t);
    let (when, when_at, when_words) = when_of(&e.decision, observed, now);
    Row {
        kind: s.kind.to_string(),
        namespace: s.namespace.clone(),
        name: s.name.clone(),
        ready: ready_condition(&s.status),
        provisioned: s.status.initialization.as_ref().and_then(|i| i.provisioned),
        observed,
        next: if observed {
            words::next_short(&e.decision)
        } else {
            "not observed".to_string()
        },
        reason: e.decision.reason().map(|r| r.to_string()),
        when,
        when_at,
        not_before: match &e.decision {
            Decision::Wait(w) => w.not_before,
            _ => None,
        },
        when_words,
        consecutive_failures: captf_shared::Op::ALL
            .iter()
            .map(|op| (op.as_str().to_string(), counts.get(*op)))
            .filter(|(_, n)| *n > 0)
            .collect(),
        last_success: last.map(|t| t.to_string()),
        last_success_at: last,
        foreign_lock_holder: match (&s.lock, waited_on) {
            (LockState::Foreign { holder, .. }, _) if s.active_job().is_none() => Some(holder.clone()),
            (_, Some(LockState::Foreign { holder, .. })) => Some(holder.clone()),
            _ => None,
        },
        active_job: s.active_job().map(str::to_string),
        pending_plan: s.status.pending_plan.as_ref().map(|p| p.hash.clone()),
        drift: drift_of(s),
    }
}

/// What an object does not observed by any controller waits for.
pub const NOT_OBSERVED_WHEN: &str = "not until a controller watches its namespace";

/// When the decision happens, as a time and in words (PURE). An object no controller has
/// observed has no "next pass" to wait for: saying "now" would promise what never comes.
pub fn when_of(decision: &Decision, observed: bool, now: Timestamp) -> (Option<String>, Option<Timestamp>, String) {
    if !observed {
        return (None, None, NOT_OBSERVED_WHEN.to_string());
    }
    let at = words::next_time(decision, now);
    let when = match decision {
        Decision::Wait(w) if w.not_before.is_none() && w.requeue_after.is_none() => None,
        _ => at.map(|t| t.to_string()),
    };
    (when, at, words::when_words(decision, now))
}

impl Row {
    /// The row without what moves with the clock alone: the times and words counted from now
    /// (a wait's fixed end stays, as `not_before`) and the last success's age (its time stays)
    /// (PURE). Two looks whose steady rows are equal show nothing new.
    pub fn steady(&self) -> Row {
        Row {
            when: None,
            when_at: None,
            when_words: String::new(),
            last_success_at: None,
            ..self.clone()
        }
    }
}

/// Order rows by `key` (PURE); ties by namespace, then name.
pub fn sort_rows(rows: &mut [Row], key: SortKey) {
    let total = |r: &Row| r.consecutive_failures.values().sum::<u32>();
    rows.sort_by(|a, b| {
        let by_name = (&a.namespace, &a.name, &a.kind).cmp(&(&b.namespace, &b.name, &b.kind));
        let first = match key {
            SortKey::Name => std::cmp::Ordering::Equal,
            SortKey::Kind => a.kind.cmp(&b.kind),
            // The soonest first; no time (a change or a person ends the wait) last.
            SortKey::Next => match (
                a.when_at.filter(|_| a.when.is_some()),
                b.when_at.filter(|_| b.when.is_some()),
            ) {
                (Some(x), Some(y)) => x.cmp(&y),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            },
            SortKey::Failures => total(b).cmp(&total(a)),
            // Never succeeded first, then the oldest success.
            SortKey::LastSuccess => a.last_success_at.cmp(&b.last_success_at),
        };
        first.then(by_name)
    });
}

/// The `status` table (PURE).
pub fn status_table(rows: &[Row], all_namespaces: bool, wide: bool, now: Timestamp) -> String {
    let mut header = vec![];
    if all_namespaces {
        header.push("NAMESPACE");
    }
    header.extend([
        "KIND",
        "NAME",
        "READY",
        "PROVISIONED",
        "NEXT",
        "WHEN",
        "FAILURES",
        "LAST SUCCESS",
        "FOREIGN LOCK",
        "DRIFT",
    ]);
    if wide {
        header.extend(["ACTIVE JOB", "PENDING PLAN"]);
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut c = vec![];
            if all_namespaces {
                c.push(r.namespace.clone());
            }
            let failures = if r.consecutive_failures.is_empty() {
                "0".to_string()
            } else {
                r.consecutive_failures
                    .iter()
                    .map(|(op, n)| format!("{op}:{n}"))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            c.extend([
                r.kind.clone(),
                r.name.clone(),
                r.ready.clone().unwrap_or_else(|| "-".to_string()),
                r.provisioned.map_or("-".to_string(), |b| b.to_string()),
                r.next.clone(),
                r.when_words.clone(),
                failures,
                r.last_success_at.map_or("never".to_string(), |t| words::age(now, t)),
                r.foreign_lock_holder.clone().unwrap_or_else(|| "-".into()),
                r.drift.clone(),
            ]);
            if wide {
                c.push(r.active_job.clone().unwrap_or_else(|| "-".into()));
                c.push(r.pending_plan.as_deref().map_or("-".to_string(), |h| names::cut(h, 12)));
            }
            c
        })
        .collect();
    words::table(&header, &cells)
}

/// What one look at every object found.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusRead {
    pub rows: Vec<Row>,
    /// The objects that could not be read, and why.
    pub unread: Vec<String>,
    /// How many objects the controller leaves alone were left out.
    pub elsewhere: usize,
    /// The namespace looked in (`None`: every namespace).
    pub namespace: Option<String>,
}

/// Read every object (of the namespace, or of all) live, each as one row.
pub(crate) async fn read_status(
    conn: &Conn,
    all_namespaces: bool,
    sort_by: SortKey,
    now: Timestamp,
) -> Result<StatusRead, PluginError> {
    let ns = (!all_namespaces).then_some(conn.namespace.as_str());
    let mut rows = Vec::new();
    let mut unread = Vec::new();
    let mut elsewhere = 0usize;
    for kind in Kind::ALL {
        let objects = live::list_objects(&conn.client, kind, ns, &ListParams::default())
            .await
            .map_err(|e| from_runtime(e, ns))?;
        for object in objects {
            let managed_elsewhere = object
                .metadata()
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(keys::LABEL_MANAGED_BY));
            if managed_elsewhere {
                elsewhere += 1;
                continue;
            }
            let meta = object.metadata().clone();
            let status = captf_core::snapshot::object_status(&object)
                .cloned()
                .unwrap_or_default();
            let seen = observed(&object);
            match live::read(&conn.client, object).await {
                Ok(r) => rows.push(row(&explanation(&r, now), seen, r.waited_on.as_ref(), now)),
                // One object that cannot be read does not hide the others.
                Err(e) => {
                    let (ns, name) = (meta.namespace.unwrap_or_default(), meta.name.unwrap_or_default());
                    unread.push(format!("{kind} {ns}/{name}: {}", from_runtime(e, Some(&ns))));
                    rows.push(unread_row(kind, ns, name, &status, seen));
                }
            }
        }
    }
    sort_rows(&mut rows, sort_by);
    Ok(StatusRead {
        rows,
        unread,
        elsewhere,
        namespace: ns.map(str::to_string),
    })
}

/// What `status` prints of a look (PURE).
pub fn print_status(read: &StatusRead, output: Option<Output>, now: Timestamp) -> Printed {
    let rows = &read.rows;
    let mut stderr = String::new();
    for u in &read.unread {
        stderr.push_str(&format!("cannot read {u}\n"));
    }
    if rows.is_empty() {
        let where_ = read
            .namespace
            .as_ref()
            .map_or("any namespace".to_string(), |n| format!("namespace {n:?}"));
        stderr.push_str(&format!(
            "No TerraformClusters, TerraformMachinePools or TerraformMachines in {where_}.\n"
        ));
    }
    if read.elsewhere > 0 {
        stderr.push_str(&format!(
            "Left out: {} object(s) labelled {}, which the controller leaves alone.\n",
            read.elsewhere,
            keys::LABEL_MANAGED_BY
        ));
    }
    let stdout = if Output::is_document(output) {
        pretty(&json!(rows))
    } else if rows.is_empty() {
        String::new()
    } else {
        status_table(rows, read.namespace.is_none(), output == Some(Output::Wide), now)
    };
    Printed {
        stdout,
        stderr,
        partial: !read.unread.is_empty(),
    }
}

pub(crate) async fn status(
    conn: &Conn,
    all_namespaces: bool,
    sort_by: SortKey,
    output: Option<Output>,
    now: Timestamp,
) -> Result<Printed, PluginError> {
    let read = read_status(conn, all_namespaces, sort_by, now).await?;
    Ok(print_status(&read, output, now))
}

/// The row of an object whose reads failed: only what its listing shows.
fn unread_row(
    kind: Kind,
    namespace: String,
    name: String,
    status: &captf_shared::types::TerraformStatus,
    observed: bool,
) -> Row {
    Row {
        kind: kind.to_string(),
        namespace,
        name,
        ready: ready_condition(status),
        provisioned: status.initialization.as_ref().and_then(|i| i.provisioned),
        observed,
        next: "unknown (cannot read; see below)".to_string(),
        reason: None,
        when: None,
        when_at: None,
        not_before: None,
        when_words: "-".to_string(),
        consecutive_failures: BTreeMap::new(),
        last_success: None,
        last_success_at: None,
        foreign_lock_holder: None,
        active_job: None,
        pending_plan: None,
        drift: "-".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str, when: Option<&str>, failures: u32, last: Option<&str>) -> Row {
        let t = |s: &str| s.parse::<Timestamp>().ok();
        Row {
            kind: "TerraformCluster".into(),
            namespace: "default".into(),
            name: name.into(),
            ready: Some("True".into()),
            provisioned: Some(true),
            observed: true,
            next: "wait (Idle)".into(),
            reason: None,
            when: when.map(String::from),
            when_at: when.and_then(t),
            not_before: None,
            when_words: String::new(),
            consecutive_failures: if failures > 0 {
                [("apply".to_string(), failures)].into()
            } else {
                BTreeMap::new()
            },
            last_success: last.map(String::from),
            last_success_at: last.and_then(t),
            foreign_lock_holder: None,
            active_job: None,
            pending_plan: None,
            drift: "none".into(),
        }
    }

    #[test]
    fn drift_that_comes_back_after_each_remediation_shows_in_the_drift_column() {
        assert_eq!(drift_word(&[], false, false, false), "-", "never checked");
        assert_eq!(drift_word(&[false], true, false, false), "none");
        assert_eq!(drift_word(&[true, false], true, true, false), "found");
        assert_eq!(drift_word(&[true, false], true, true, true), "remediated");
        // Found by three of the four checks kept: recurring, whatever the newest says.
        assert_eq!(
            drift_word(&[true, true, false, true], true, true, true),
            "remediated(3/4)"
        );
        assert_eq!(drift_word(&[false, true, true], true, false, false), "none(2/3)");
        // Checked once, its Job pruned since: still "checked".
        assert_eq!(drift_word(&[], true, false, false), "none");
    }

    #[test]
    fn status_sorts_by_the_key_asked_for_and_then_by_name() {
        let rows = vec![
            r("b", Some("2026-03-01T10:05:00Z"), 0, Some("2026-03-01T09:00:00Z")),
            r("a", None, 3, None),
            r("c", Some("2026-03-01T10:01:00Z"), 1, Some("2026-03-01T08:00:00Z")),
        ];
        let names = |key| {
            let mut rs = rows.clone();
            sort_rows(&mut rs, key);
            rs.into_iter().map(|r| r.name).collect::<Vec<_>>()
        };
        assert_eq!(names(SortKey::Name), ["a", "b", "c"]);
        assert_eq!(names(SortKey::Next), ["c", "b", "a"], "soonest first, no time last");
        assert_eq!(names(SortKey::Failures), ["a", "c", "b"]);
        assert_eq!(names(SortKey::LastSuccess), ["a", "c", "b"], "never first, then oldest");
    }

    #[test]
    fn status_shows_ready_as_kubectl_get_does_and_provisioned_under_its_own_name() {
        let now: Timestamp = "2026-03-01T10:00:00Z".parse().unwrap_or_default();
        let mut row = r("a", None, 0, None);
        row.ready = Some("False".into());
        row.provisioned = Some(true);
        let t = status_table(&[row], false, false, now);
        let lines: Vec<&str> = t.lines().collect();
        let header: Vec<&str> = lines[0].split_whitespace().collect();
        let cells: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(&header[2..4], ["READY", "PROVISIONED"], "{t}");
        assert_eq!(&cells[2..4], ["False", "true"], "{t}");
    }

    #[test]
    fn an_object_without_the_finalizer_or_an_observed_generation_was_never_observed() {
        let mut c: captf_shared::types::TerraformCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "TerraformCluster",
            "metadata": {"name": "a", "namespace": "default"},
            "spec": {"module": {"source": "git::https://example.com/m.git"}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(!observed(&CaptfObject::Cluster(c.clone())));
        c.metadata.finalizers = Some(vec![keys::FINALIZER.to_string()]);
        assert!(observed(&CaptfObject::Cluster(c.clone())));
        c.metadata.finalizers = None;
        c.status = Some(captf_shared::types::TerraformStatus {
            observed_generation: Some(1),
            ..Default::default()
        });
        assert!(observed(&CaptfObject::Cluster(c)));
    }

    #[test]
    fn an_object_no_controller_observed_waits_for_a_controller_not_for_now() {
        let now: Timestamp = "2026-03-01T10:00:00Z".parse().unwrap_or_default();
        let start = Decision::Start(captf_core::decide::Start {
            op: captf_shared::Op::Apply,
            reason: captf_core::reason::Reason::InputsChanged,
            attempt: 1,
            drift_remediation: false,
            force_unlock_id: None,
            approved_plan: None,
            approved_by: None,
            skipped_backoff: None,
        });
        let (when, at, words) = when_of(&start, true, now);
        assert_eq!(words, "now (the controller's next pass)");
        assert!(at.is_some() && when.is_some());
        assert_eq!(
            when_of(&start, false, now),
            (None, None, "not until a controller watches its namespace".to_string())
        );
    }

    #[test]
    fn status_wide_adds_the_active_job_and_the_pending_plan() {
        let now: Timestamp = "2026-03-01T10:00:00Z".parse().unwrap_or_default();
        let mut row = r("a", None, 2, Some("2026-03-01T09:00:00Z"));
        row.pending_plan = Some("0123456789abcdef".into());
        let narrow = status_table(std::slice::from_ref(&row), false, false, now);
        assert!(narrow.starts_with("KIND"), "{narrow}");
        assert!(narrow.contains("apply:2"), "{narrow}");
        assert!(narrow.contains("1h0m ago"), "{narrow}");
        assert!(!narrow.contains("PENDING PLAN"), "{narrow}");
        let wide = status_table(&[row], true, true, now);
        assert!(wide.starts_with("NAMESPACE"), "{wide}");
        assert!(wide.contains("PENDING PLAN"), "{wide}");
        assert!(wide.contains("0123456789ab"), "{wide}");
    }
}

//! The commands that keep printing: `--watch` on `status`, `tree` and `events`, and
//! `logs --follow`.
//!
//! A watch holds no copy of the objects: it watches their metadata (CAPTF's objects, their Jobs,
//! the Events, a Cluster API Cluster), and on each change looks again, exactly as the command
//! looks once. As `kubectl get -w` does, it prints only what is new:
//!
//! - `status -w` and `tree -w` print the table (or document) again only when what it shows
//!   changed, compared without what moves with the clock alone (ages, "in 2m"): [`next_print`]
//!   over [`Look`]s. One look is kept.
//! - `events -w` prints the history once, then only the Events not printed before
//!   ([`events_to_print`]): it keeps the keys of the Events it printed (UID and count).

use std::collections::BTreeSet;

use futures::stream::{BoxStream, SelectAll};
use futures::{AsyncBufReadExt, FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams, LogParams};
use kube::core::{ApiResource, GroupVersionKind, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use captf_read::kinds::api_resource;
use captf_shared::{Kind, keys};

use crate::cli::{Cli, Command, Output};
use crate::conn::Conn;
use crate::errors::{PluginError, from_kube};
use crate::events::{EventLine, events_rows, events_table, print_events, read_events};
use crate::printed::{Printed, pretty};
use crate::status::{StatusRead, print_status, read_status};
use crate::target::{Target, parse_target};
use crate::tree::{TreeNode, print_tree, read_tree};
use crate::{as_output, run};

/// Whether the command keeps printing until it is stopped (or, `logs -f`, until the log ends).
pub fn streams(cli: &Cli) -> bool {
    matches!(
        &cli.command,
        Command::Status { watch: true, .. }
            | Command::Tree { watch: true, .. }
            | Command::Events { watch: true, .. }
            | Command::Logs { follow: true, .. }
    )
}

/// One look at what a watched command shows: what it prints, and what a watch compares to tell
/// a change (`steady`: what is shown, without the ages and the times counted from now, which
/// move with the clock alone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Look {
    pub printed: Printed,
    pub steady: String,
}

/// The look of `status` (PURE): its rows compared without what moves with the clock.
pub fn status_look(read: &StatusRead, output: Option<Output>, now: Timestamp) -> Result<Look, PluginError> {
    let printed = as_output(print_status(read, output, now), output)?;
    let rows: Vec<_> = read.rows.iter().map(crate::status::Row::steady).collect();
    let steady = format!("{:?}\n{}", rows, printed.stderr);
    Ok(Look { printed, steady })
}

/// The look of `tree` (PURE): its nodes compared without what moves with the clock.
pub fn tree_look(tree: &TreeNode, output: Option<Output>) -> Result<Look, PluginError> {
    let printed = as_output(print_tree(tree, output), output)?;
    let steady = format!("{:?}", tree.steady());
    Ok(Look { printed, steady })
}

/// A look that is only what it prints (an error, said on stderr).
fn plain_look(printed: Printed) -> Look {
    let steady = format!("{}\n{}", printed.stdout, printed.stderr);
    Look { printed, steady }
}

/// What a watch prints for a new look (PURE): nothing when it shows what the last one printed
/// showed (ages and times counted from now left aside); else its rendering, set apart from the
/// one before (a blank line for text, `---` for YAML documents; JSON documents follow each
/// other).
pub fn next_print(last: Option<&Look>, new: &Look, output: Option<Output>) -> Option<Printed> {
    if last.is_some_and(|l| l.steady == new.steady) {
        return None;
    }
    let mut p = new.printed.clone();
    match output {
        Some(Output::Yaml) => p.stdout = format!("---\n{}", p.stdout),
        Some(Output::Json) => {}
        _ if last.is_some() && !p.stdout.is_empty() => p.stdout = format!("\n{}", p.stdout),
        _ => {}
    }
    // The same notes are not said again.
    if last.is_some_and(|l| l.printed.stderr == new.printed.stderr) {
        p.stderr.clear();
    }
    Some(p)
}

/// The Events of `lines` that `events -w` has not printed yet (their keys are not in
/// `printed`), oldest first (PURE).
pub fn events_to_print<'a>(printed: &BTreeSet<String>, lines: &'a [EventLine]) -> Vec<&'a EventLine> {
    lines.iter().filter(|l| !printed.contains(&l.key)).collect()
}

/// What `events -w` prints of Events not printed before (PURE): the rows under the table
/// printed before, or the table when none was (`header`: a table was printed); a JSON list of
/// them, or that list as a YAML document.
pub fn print_new_events(
    new: &[&EventLine],
    header: bool,
    output: Option<Output>,
    now: Timestamp,
) -> Result<Printed, PluginError> {
    let lines: Vec<EventLine> = new.iter().map(|l| (*l).clone()).collect();
    if lines.is_empty() {
        return Ok(Printed::default());
    }
    Ok(match output {
        Some(Output::Json) => Printed::out(pretty(&json!(lines))),
        Some(Output::Yaml) => {
            let doc = as_output(Printed::out(pretty(&json!(lines))), output)?;
            Printed::out(format!("---\n{}", doc.stdout))
        }
        _ if header => Printed::out(events_rows(&lines, now)),
        _ => Printed::out(events_table(&lines, now)),
    })
}

/// A change (`Ok`), or why a watch failed (it is retried with backoff).
type Change = Result<(), String>;
type Changes = SelectAll<BoxStream<'static, Change>>;

/// A stream that yields once for every change of an object of `ar` (metadata only).
fn watch_resource(conn: &Conn, ar: &ApiResource, ns: Option<&str>, labels: Option<&str>) -> BoxStream<'static, Change> {
    // Metadata only: a change is all a watch needs to know of.
    let api: Api<PartialObjectMeta<DynamicObject>> = match ns {
        Some(ns) => Api::namespaced_with(conn.client.clone(), ns, ar),
        None => Api::all_with(conn.client.clone(), ar),
    };
    let mut config = watcher::Config::default();
    if let Some(l) = labels {
        config = config.labels(l);
    }
    let what = match ns {
        Some(ns) => format!("{} in namespace {ns}", ar.plural),
        None => format!("{} in all namespaces", ar.plural),
    };
    // Errors are retried with backoff.
    watcher::watcher(api, config)
        .default_backoff()
        .map(move |e| e.map(|_| ()).map_err(|e| format!("cannot watch {what}: {e}")))
        .boxed()
}

fn jobs_resource() -> ApiResource {
    ApiResource::erase::<Job>(&())
}

/// The Cluster API `Cluster` resource the server serves (the newest of the two versions), if any.
async fn served_capi_cluster(conn: &Conn) -> Option<ApiResource> {
    for version in ["v1beta2", "v1beta1"] {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(captf_core::pause::CAPI_GROUP, version, "Cluster"),
            "clusters",
        );
        let api: Api<DynamicObject> = Api::namespaced_with(conn.client.clone(), &conn.namespace, &ar);
        if api.list_metadata(&ListParams::default().limit(1)).await.is_ok() {
            return Some(ar);
        }
    }
    None
}

/// The watches of what a command shows.
async fn changes(cli: &Cli, conn: &Conn) -> Changes {
    let mut all = SelectAll::new();
    let ns = conn.namespace.as_str();
    let captf_jobs = keys::LABEL_KIND;
    match &cli.command {
        Command::Status { all_namespaces, .. } => {
            let ns = (!all_namespaces).then_some(ns);
            for kind in Kind::ALL {
                all.push(watch_resource(conn, &api_resource(kind), ns, None));
            }
            all.push(watch_resource(conn, &jobs_resource(), ns, Some(captf_jobs)));
        }
        Command::Tree { target, .. } => {
            for kind in Kind::ALL {
                all.push(watch_resource(conn, &api_resource(kind), Some(ns), None));
            }
            all.push(watch_resource(conn, &jobs_resource(), Some(ns), Some(captf_jobs)));
            if crate::tree::parse_capi_cluster(target).is_some()
                && let Some(ar) = served_capi_cluster(conn).await
            {
                all.push(watch_resource(conn, &ar, Some(ns), None));
            }
        }
        Command::Events { target, .. } => {
            let ar = ApiResource::erase::<k8s_openapi::api::events::v1::Event>(&());
            all.push(watch_resource(conn, &ar, Some(ns), None));
            if let Ok(t) = parse_target(target) {
                all.push(watch_resource(conn, &api_resource(t.kind), Some(ns), None));
            }
        }
        _ => {}
    }
    all
}

/// Look at the command's objects once.
async fn try_look(cli: &Cli, conn: &Conn) -> Result<Look, PluginError> {
    let now = crate::now(cli, conn).await?;
    match &cli.command {
        Command::Status {
            all_namespaces,
            sort_by,
            ..
        } => status_look(
            &read_status(conn, *all_namespaces, *sort_by, now).await?,
            cli.output,
            now,
        ),
        Command::Tree { target, .. } => tree_look(&read_tree(conn, target, now).await?, cli.output),
        _ => run(cli, conn).await.map(plain_look),
    }
}

/// Look at the command's objects once, an error as what it prints on stderr.
async fn look(cli: &Cli, conn: &Conn) -> Look {
    match try_look(cli, conn).await {
        Ok(l) => l,
        Err(e) => plain_look(Printed {
            stderr: format!("error: {e}\n"),
            partial: true,
            ..Default::default()
        }),
    }
}

/// Run a streaming command, handing each piece to `out` as it comes. A watch ends only when
/// its process is stopped, or when it cannot watch at all.
pub async fn run_streaming(cli: &Cli, conn: &Conn, out: &mut dyn FnMut(&Printed)) -> Result<(), PluginError> {
    match &cli.command {
        Command::Logs {
            target,
            op,
            follow: true,
            ..
        } => return follow_logs(conn, &parse_target(target)?, op.map(crate::cli::OpArg::op), out).await,
        Command::Events { target, .. } => return watch_events(cli, conn, &parse_target(target)?, out).await,
        _ => {}
    }
    // The first look: a usage error or a missing object ends the watch at once.
    let first = try_look(cli, conn).await?;
    if let Some(p) = next_print(None, &first, cli.output) {
        out(&p);
    }
    let mut last = first;
    let mut changes = Watched::new(changes(cli, conn).await);
    while let Some(()) = changes.next(out).await {
        let new = look(cli, conn).await;
        if let Some(p) = next_print(Some(&last), &new, cli.output) {
            out(&p);
            last = new;
        }
    }
    Err(PluginError::Api("the watches ended; run the command again".to_string()))
}

/// The watches of a command: each change, the failures said once until they change.
struct Watched {
    changes: Changes,
    last_failure: String,
}

impl Watched {
    fn new(changes: Changes) -> Watched {
        Watched {
            changes,
            last_failure: String::new(),
        }
    }

    /// The next change (every change already arrived with it), `None` when the watches end.
    async fn next(&mut self, out: &mut dyn FnMut(&Printed)) -> Option<()> {
        while let Some(change) = self.changes.next().await {
            if let Err(why) = change {
                // Said once, until it changes; the watch retries by itself.
                if why != self.last_failure {
                    out(&Printed {
                        stderr: format!("{why} (retrying)\n"),
                        ..Default::default()
                    });
                    self.last_failure = why;
                }
                continue;
            }
            // Every change already arrived is covered by one look.
            while let Some(Some(_)) = self.changes.next().now_or_never() {}
            return Some(());
        }
        None
    }
}

/// `events -w`: the history once, then each Event not printed before as it comes.
async fn watch_events(cli: &Cli, conn: &Conn, t: &Target, out: &mut dyn FnMut(&Printed)) -> Result<(), PluginError> {
    let json = Output::is_document(cli.output);
    // The first look: a usage error or a missing object ends the watch at once.
    let now = crate::now(cli, conn).await?;
    let lines = read_events(conn, t).await?;
    let mut first = as_output(print_events(&lines, &conn.namespace, t, json, now), cli.output)?;
    if cli.output == Some(Output::Yaml) {
        first.stdout = format!("---\n{}", first.stdout);
    }
    out(&first);
    let mut printed: BTreeSet<String> = lines.iter().map(|l| l.key.clone()).collect();
    let mut header = !lines.is_empty();
    let mut last_error = String::new();
    let mut changes = Watched::new(changes(cli, conn).await);
    while let Some(()) = changes.next(out).await {
        let looked = async {
            let now = crate::now(cli, conn).await?;
            Ok::<_, PluginError>((read_events(conn, t).await?, now))
        };
        let (lines, now) = match looked.await {
            Ok(l) => l,
            Err(e) => {
                let why = format!("error: {e}\n");
                if why != last_error {
                    out(&Printed {
                        stderr: why.clone(),
                        partial: true,
                        ..Default::default()
                    });
                    last_error = why;
                }
                continue;
            }
        };
        last_error.clear();
        let new = events_to_print(&printed, &lines);
        if new.is_empty() {
            continue;
        }
        out(&print_new_events(&new, header, cli.output, now)?);
        header = true;
        printed.extend(new.iter().map(|l| l.key.clone()));
    }
    Err(PluginError::Api("the watches ended; run the command again".to_string()))
}

/// `logs --follow`: the newest runner pod's log (of one op with `--op`), streamed until its
/// container ends.
async fn follow_logs(
    conn: &Conn,
    t: &crate::target::Target,
    op: Option<captf_shared::Op>,
    out: &mut dyn FnMut(&Printed),
) -> Result<(), PluginError> {
    let ns = conn.namespace.as_str();
    let picked = crate::logs::log_pod(conn, t, op, false).await?;
    out(&Printed {
        stderr: picked.banner(),
        ..Default::default()
    });
    let lp = LogParams {
        container: Some("runner".into()),
        follow: true,
        ..Default::default()
    };
    let read_err = |e| {
        from_kube(
            e,
            &format!("follow the log of pod {ns}/{}", picked.pod),
            ("get", "pods/log", ""),
            Some(ns),
        )
    };
    let stream = Api::<Pod>::namespaced(conn.client.clone(), ns)
        .log_stream(&picked.pod, &lp)
        .await
        .map_err(read_err)?;
    let mut lines = stream.lines();
    while let Some(line) = lines
        .try_next()
        .await
        .map_err(|e| PluginError::Api(format!("the log of pod {ns}/{} broke off: {e}", picked.pod)))?
    {
        out(&Printed::out(format!("{line}\n")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::Row;

    fn p(stdout: &str, stderr: &str) -> Look {
        plain_look(Printed {
            stdout: stdout.into(),
            stderr: stderr.into(),
            partial: false,
        })
    }

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap_or_default()
    }

    #[test]
    fn a_watch_prints_a_look_only_when_it_differs_from_the_last_one_printed() {
        let a = p("A\n", "");
        assert_eq!(next_print(None, &a, None), Some(a.printed.clone()));
        assert_eq!(next_print(Some(&a), &a, None), None);
        let b = p("B\n", "");
        assert_eq!(next_print(Some(&a), &b, None).map(|p| p.stdout), Some("\nB\n".into()));
    }

    #[test]
    fn a_watch_separates_yaml_documents_and_does_not_repeat_its_notes() {
        let a = p("a: 1\n", "Left out: 1\n");
        let b = p("a: 2\n", "Left out: 1\n");
        let got = next_print(Some(&a), &b, Some(Output::Yaml));
        assert_eq!(got, Some(p("---\na: 2\n", "").printed));
        assert_eq!(
            next_print(Some(&a), &b, Some(Output::Json)).map(|p| p.stdout),
            Some("a: 2\n".into())
        );
    }

    /// A row as `status` builds it at `now`: an apply backoff ending at 10:05, the last success
    /// at 09:00.
    fn backoff_row(now: Timestamp) -> Row {
        let ends = t("2026-03-01T10:05:00Z");
        let last = t("2026-03-01T09:00:00Z");
        Row {
            kind: "TerraformCluster".into(),
            namespace: "default".into(),
            name: "a".into(),
            ready: Some("False".into()),
            provisioned: Some(true),
            observed: true,
            next: "apply after backoff (InputsChangedBackoff)".into(),
            reason: Some("InputsChangedBackoff".into()),
            when: Some(ends.to_string()),
            when_at: Some(ends),
            not_before: Some(ends),
            when_words: format!(
                "at {ends} (in {})",
                captf_core::explain::human(std::time::Duration::try_from(ends.duration_since(now)).unwrap_or_default())
            ),
            consecutive_failures: [("apply".to_string(), 1)].into(),
            last_success: Some(last.to_string()),
            last_success_at: Some(last),
            foreign_lock_holder: None,
            active_job: None,
            pending_plan: None,
            drift: "none".into(),
        }
    }

    fn read(rows: Vec<Row>) -> StatusRead {
        StatusRead {
            rows,
            unread: vec![],
            elsewhere: 0,
            namespace: Some("default".into()),
        }
    }

    #[test]
    fn status_watch_prints_nothing_when_no_row_changed() {
        let (t1, t2) = (t("2026-03-01T10:00:00Z"), t("2026-03-01T10:01:00Z"));
        for output in [None, Some(Output::Wide), Some(Output::Json), Some(Output::Yaml)] {
            let first = status_look(&read(vec![backoff_row(t1)]), output, t1).unwrap();
            // A minute later the same row: only its ages moved ("in 5m" is "in 4m" now).
            let later = status_look(&read(vec![backoff_row(t2)]), output, t2).unwrap();
            if output.is_none() {
                assert_ne!(first.printed.stdout, later.printed.stdout, "the ages moved");
            }
            assert_eq!(next_print(Some(&first), &later, output), None, "{output:?}");
            // A row that changed is printed.
            let mut started = backoff_row(t2);
            started.next = "start apply (InputsChanged)".into();
            started.not_before = None;
            let changed = status_look(&read(vec![started]), output, t2).unwrap();
            let printed = next_print(Some(&first), &changed, output).map(|p| p.stdout);
            assert!(
                printed
                    .as_deref()
                    .is_some_and(|p| p.contains("start apply (InputsChanged)")),
                "{output:?}: {printed:?}"
            );
        }
        // Another failure moves the end of the backoff: a change, though the words say the same.
        let mut longer = backoff_row(t1);
        longer.not_before = Some(t("2026-03-01T10:09:00Z"));
        let first = status_look(&read(vec![backoff_row(t1)]), None, t1).unwrap();
        let longer = status_look(&read(vec![longer]), None, t1).unwrap();
        assert!(next_print(Some(&first), &longer, None).is_some());
    }

    #[test]
    fn tree_watch_prints_nothing_when_only_the_clock_moved() {
        let node = |when: &str, next: &str| {
            let mut n = TreeNode::bare("TerraformCluster", "default", "c");
            n.ready = Some("True".into());
            n.next = Some(next.into());
            n.when = Some(when.into());
            let mut child = n.clone();
            child.kind = "TerraformMachinePool".into();
            n.children.push(child);
            n
        };
        let first = tree_look(&node("next drift check in 5m", "wait (Idle)"), None).unwrap();
        let later = tree_look(&node("next drift check in 4m", "wait (Idle)"), None).unwrap();
        assert_ne!(first.printed, later.printed);
        assert_eq!(next_print(Some(&first), &later, None), None);
        let changed = tree_look(&node("now", "start drift (DriftCheckDue)"), None).unwrap();
        assert!(next_print(Some(&first), &changed, None).is_some());
    }

    fn event(uid: &str, reason: &str, count: Option<i32>) -> k8s_openapi::api::events::v1::Event {
        serde_json::from_value(json!({
            "metadata": {"name": format!("a.{uid}"), "namespace": "default", "uid": uid},
            "eventTime": "2026-03-01T09:59:00.000000Z",
            "type": "Normal", "reason": reason, "note": reason, "action": "Book",
            "reportingController": "captf.io/controller", "reportingInstance": "x",
            "regarding": {"kind": "TerraformCluster", "name": "a", "uid": "a-uid"},
            "series": count.map(|c| json!({"count": c, "lastObservedTime": "2026-03-01T09:59:30.000000Z"})),
        }))
        .unwrap()
    }

    #[test]
    fn events_watch_prints_only_events_not_printed_before() {
        let now = t("2026-03-01T10:00:00Z");
        let lines = |events: &[k8s_openapi::api::events::v1::Event]| {
            crate::events::event_lines(events, Kind::TerraformCluster, "a", Some("a-uid"))
        };
        let history = lines(&[event("u1", "Applied", None), event("u2", "JobStarted", None)]);
        let mut printed: BTreeSet<String> = history.iter().map(|l| l.key.clone()).collect();
        // Read again with nothing new: nothing to print.
        assert!(events_to_print(&printed, &history).is_empty());
        // One new Event: only it, as a row under the table printed before.
        let now_read = lines(&[
            event("u1", "Applied", None),
            event("u2", "JobStarted", None),
            event("u3", "DriftFound", None),
        ]);
        let new = events_to_print(&printed, &now_read);
        assert_eq!(
            new.iter().map(|l| l.reason.as_str()).collect::<Vec<_>>(),
            ["DriftFound"]
        );
        let text = print_new_events(&new, true, None, now).unwrap().stdout;
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("DriftFound") && !text.contains("AGE"), "{text}");
        printed.extend(new.iter().map(|l| l.key.clone()));
        assert!(events_to_print(&printed, &now_read).is_empty());
        // The same Event seen again (its series counted up) is news; an Event of another UID
        // with the same text too.
        let again = lines(&[event("u2", "JobStarted", Some(2)), event("u4", "Applied", None)]);
        let new = events_to_print(&printed, &again);
        assert_eq!(new.len(), 2, "{new:?}");
        // Nothing printed before: the table with its header; as documents, only the new ones.
        let table = print_new_events(&new, false, None, now).unwrap().stdout;
        assert!(table.starts_with("AGE"), "{table}");
        let json: serde_json::Value =
            serde_json::from_str(&print_new_events(&new, true, Some(Output::Json), now).unwrap().stdout).unwrap();
        assert_eq!(json.as_array().map(Vec::len), Some(2));
        let yaml = print_new_events(&new, true, Some(Output::Yaml), now).unwrap().stdout;
        assert!(yaml.starts_with("---\n"), "{yaml}");
    }
}

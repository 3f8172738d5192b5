//! The commands that keep printing: `--watch` on `status`, `tree` and `events` (print, then
//! print again whenever what is shown changes), and `logs --follow`.
//!
//! A watch holds no copy of the objects: it watches their metadata (CAPTF's objects, their Jobs,
//! the Events, a Cluster API Cluster), and on each change renders the command again, exactly as
//! it prints once, and prints it only when the text differs from the last one printed. Memory
//! stays bounded by one rendering.

use futures::stream::{BoxStream, SelectAll};
use futures::{AsyncBufReadExt, FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, LogParams};
use kube::core::{ApiResource, GroupVersionKind, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};

use captf_read::kinds::api_resource;
use captf_shared::{Kind, keys};

use crate::cli::{Cli, Command, Output};
use crate::conn::Conn;
use crate::errors::{PluginError, from_kube};
use crate::printed::Printed;
use crate::run;
use crate::target::parse_target;

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

/// What a watch prints for a new rendering (PURE): nothing when it is the same as the last one
/// printed; else the rendering, set apart from the one before (a blank line for text, `---` for
/// YAML documents; JSON documents follow each other).
pub fn next_print(last: Option<&Printed>, new: &Printed, output: Option<Output>) -> Option<Printed> {
    if last == Some(new) {
        return None;
    }
    let mut p = new.clone();
    match output {
        Some(Output::Yaml) => p.stdout = format!("---\n{}", p.stdout),
        Some(Output::Json) => {}
        _ if last.is_some() && !p.stdout.is_empty() => p.stdout = format!("\n{}", p.stdout),
        _ => {}
    }
    // The same notes are not said again.
    if last.is_some_and(|l| l.stderr == new.stderr) {
        p.stderr.clear();
    }
    Some(p)
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

/// Render the command once, an error as what it prints on stderr.
async fn render(cli: &Cli, conn: &Conn) -> Printed {
    match run(cli, conn).await {
        Ok(p) => p,
        Err(e) => Printed {
            stderr: format!("error: {e}\n"),
            partial: true,
            ..Default::default()
        },
    }
}

/// Run a streaming command, handing each piece to `out` as it comes. A watch ends only when
/// its process is stopped, or when it cannot watch at all.
pub async fn run_streaming(cli: &Cli, conn: &Conn, out: &mut dyn FnMut(&Printed)) -> Result<(), PluginError> {
    if let Command::Logs {
        target,
        op,
        follow: true,
        ..
    } = &cli.command
    {
        return follow_logs(conn, &parse_target(target)?, op.map(crate::cli::OpArg::op), out).await;
    }
    // The first rendering: a usage error or a missing object ends the watch at once.
    let first = run(cli, conn).await?;
    if let Some(p) = next_print(None, &first, cli.output) {
        out(&p);
    }
    let mut last = first;
    let mut last_failure = String::new();
    let mut changes = changes(cli, conn).await;
    while let Some(change) = changes.next().await {
        if let Err(why) = change {
            // Said once, until it changes; the watch retries by itself.
            if why != last_failure {
                out(&Printed {
                    stderr: format!("{why} (retrying)\n"),
                    ..Default::default()
                });
                last_failure = why;
            }
            continue;
        }
        // Every change already arrived is covered by one rendering.
        while let Some(Some(_)) = changes.next().now_or_never() {}
        let new = render(cli, conn).await;
        if let Some(p) = next_print(Some(&last), &new, cli.output) {
            out(&p);
            last = new;
        }
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

    fn p(stdout: &str, stderr: &str) -> Printed {
        Printed {
            stdout: stdout.into(),
            stderr: stderr.into(),
            partial: false,
        }
    }

    #[test]
    fn a_watch_prints_a_rendering_only_when_it_differs_from_the_last_one_printed() {
        let a = p("A\n", "");
        assert_eq!(next_print(None, &a, None), Some(a.clone()));
        assert_eq!(next_print(Some(&a), &a, None), None);
        let b = p("B\n", "");
        assert_eq!(next_print(Some(&a), &b, None).map(|p| p.stdout), Some("\nB\n".into()));
    }

    #[test]
    fn a_watch_separates_yaml_documents_and_does_not_repeat_its_notes() {
        let a = p("a: 1\n", "Left out: 1\n");
        let b = p("a: 2\n", "Left out: 1\n");
        let got = next_print(Some(&a), &b, Some(Output::Yaml));
        assert_eq!(got, Some(p("---\na: 2\n", "")));
        assert_eq!(
            next_print(Some(&a), &b, Some(Output::Json)).map(|p| p.stdout),
            Some("a: 2\n".into())
        );
    }
}

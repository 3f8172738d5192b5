//! `kubectl captf`: CAPTF's objects for the person on call.
//!
//! Every answer is the controller's own: an object is read live with
//! [`captf_read::live::read`] (the reads of a reconcile pass, without caches and
//! without writing) and planned with [`captf_core::explain::explain_snapshot`] (the
//! [`captf_core::plan::plan`] the controller executes). `approve`, `refresh` and `reconcile` write only
//! what the controller honours, and only when its rules say it would act on it
//! ([`rules`]).

pub mod cli;
pub mod clock;
pub mod complete;
pub mod completion_script;
pub mod errors;
pub mod kept;
pub mod rules;
pub mod suspend;
pub mod target;
pub mod tree;
pub mod watch;
pub mod words;
pub mod yaml;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams, LogParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

use captf_core::decide::Decision;
use captf_core::explain::{Explanation, explain_snapshot};
use captf_core::ident::Ident;
use captf_core::lock::LockState;
use captf_core::snapshot::pods_by_job;
use captf_read::api as gather;
use captf_read::kinds::api_resource;
use captf_read::live::{self, LiveRead};
use captf_shared::types::CaptfObject;
use captf_shared::{Kind, keys, names};

use cli::{Cli, Command, Output, SortKey};
use errors::{PluginError, from_kube, from_runtime};
use target::{Target, parse_target};

/// What a command prints: `stdout` is the answer, `stderr` notes around it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Printed {
    pub stdout: String,
    pub stderr: String,
    /// Part of the answer is missing (`stderr` says which and why): exit 1.
    pub partial: bool,
}

impl Printed {
    fn out(stdout: String) -> Printed {
        Printed {
            stdout,
            ..Default::default()
        }
    }
}

/// A client for the chosen kubeconfig and context, and the namespace to use.
pub struct Conn {
    pub client: kube::Client,
    pub namespace: String,
    /// The kubeconfig's user entry, for `approved-by` when the API server cannot say who this
    /// is (no SelfSubjectReview).
    pub user: Option<String>,
    /// How `approve` asks before it writes: the terminal (stdin and stderr), or a given answer
    /// (a program embedding this library, and the tests).
    pub confirm: Confirm,
}

/// How `approve` asks a person to confirm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Confirm {
    /// Ask on the terminal; without one, refuse and say to pass `--hash`.
    #[default]
    Terminal,
    /// Answer yes or no without asking.
    Answer(bool),
}

/// Connect as kubectl would: `--kubeconfig` (else `$KUBECONFIG`, else `~/.kube/config`),
/// `--context` (else the current one), `-n` (else the context's namespace).
pub async fn connect(cli: &Cli) -> Result<Conn, PluginError> {
    let kubeconfig = match &cli.kubeconfig {
        Some(path) => {
            Kubeconfig::read_from(path).map_err(|e| PluginError::Kubeconfig(format!("{}: {e}", path.display())))?
        }
        None => Kubeconfig::read().map_err(|e| PluginError::Kubeconfig(e.to_string()))?,
    };
    let options = KubeConfigOptions {
        context: cli.context.clone(),
        cluster: None,
        user: None,
    };
    let context = cli.context.clone().or_else(|| kubeconfig.current_context.clone());
    let user = kubeconfig
        .contexts
        .iter()
        .find(|c| Some(&c.name) == context.as_ref())
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.user.clone());
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| PluginError::Kubeconfig(e.to_string()))?;
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).map_err(|e| PluginError::Kubeconfig(e.to_string()))?;
    Ok(Conn {
        client,
        namespace,
        user,
        confirm: Confirm::Terminal,
    })
}

/// Run one command (not `completion`) against a connection.
pub async fn run(cli: &Cli, conn: &Conn) -> Result<Printed, PluginError> {
    let now = match cli.now {
        Some(now) => now,
        None => clock::server_now(&conn.client).await?,
    };
    let json = Output::is_document(cli.output);
    let mut printed = match &cli.command {
        Command::Explain { target } => explain(conn, &parse_target(target)?, target, json, now).await,
        Command::Plan { target } => plan(conn, &parse_target(target)?, target, json, now).await,
        Command::Events { target, .. } => events(conn, &parse_target(target)?, json, now).await,
        Command::Approve { target, hash, yes } => {
            approve(conn, &parse_target(target)?, target, hash.as_deref(), *yes, json, now).await
        }
        Command::Logs {
            target, op, previous, ..
        } => logs(conn, &parse_target(target)?, op.map(cli::OpArg::op), *previous).await,
        Command::Status {
            all_namespaces,
            sort_by,
            ..
        } => status(conn, *all_namespaces, *sort_by, cli.output, now).await,
        Command::Tree { target, .. } => {
            let tree = tree::read_tree(conn, target, now).await?;
            Ok(Printed::out(if json {
                pretty(&json!(tree))
            } else {
                tree::render_tree(&tree, cli.output == Some(Output::Wide))
            }))
        }
        Command::Suspend { target } => suspend::set_paused(conn, &parse_target(target)?, true, json).await,
        Command::Resume { target } => suspend::set_paused(conn, &parse_target(target)?, false, json).await,
        Command::Refresh { target } => refresh(conn, &parse_target(target)?, json, now).await,
        Command::Reconcile { target, reason } => {
            reconcile(conn, &parse_target(target)?, reason.as_deref(), json, now).await
        }
        Command::Retry { target } => Err(PluginError::Usage(format!(
            "`retry` is now two commands: `kubectl captf refresh {target}` reads the state and outputs again; `kubectl captf reconcile {target} --reason <why>` starts the retry of a failure now instead of after its backoff"
        ))),
        Command::Completion { .. } | Command::Complete { .. } => Err(PluginError::Usage(
            "completion needs no cluster; run `kubectl-captf completion <shell>`".into(),
        )),
    }?;
    if cli.output == Some(Output::Yaml) {
        printed.stdout = yaml::to_yaml(&printed.stdout)?;
    }
    Ok(printed)
}

/// The target object, read live; `NotFound` names the namespace it was looked for in.
async fn get_object(conn: &Conn, t: &Target) -> Result<CaptfObject, PluginError> {
    let ns = conn.namespace.as_str();
    live::get_object(&conn.client, t.kind, ns, &t.name)
        .await
        .map_err(|e| from_runtime(e, Some(ns)))?
        .ok_or_else(|| PluginError::NotFound {
            kind: t.kind.to_string(),
            name: t.name.clone(),
            namespace: ns.to_string(),
        })
}

/// Read the object and everything its pass reads.
async fn read(conn: &Conn, t: &Target) -> Result<LiveRead, PluginError> {
    let ns = conn.namespace.as_str();
    let object = get_object(conn, t).await?;
    live::read(&conn.client, object)
        .await
        .map_err(|e| from_runtime(e, Some(ns)))
}

/// The controller's plan of a live read, explained.
pub fn explanation(r: &LiveRead, now: Timestamp) -> Explanation {
    explain_snapshot(&r.snap, &r.active_check, 0, now)
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default() + "\n"
}

async fn explain(conn: &Conn, t: &Target, typed: &str, json: bool, now: Timestamp) -> Result<Printed, PluginError> {
    let r = read(conn, t).await?;
    let e = explanation(&r, now);
    if json {
        return Ok(Printed::out(pretty(&e.json)));
    }
    let mut text = words::explain_text(&e, r.waited_on.as_ref(), typed, now);
    if !observed(&r.object) {
        text = format!("Note: {NOT_OBSERVED}; below is what a controller would do.\n{text}");
    }
    if let Some(by) = r
        .object
        .metadata()
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::LABEL_MANAGED_BY))
    {
        text = format!(
            "Note: labelled {}={by}: the controller leaves this object alone; below is what it would do otherwise.\n{text}",
            keys::LABEL_MANAGED_BY
        );
    }
    Ok(Printed::out(text))
}

/// One resource change Terraform's plan output names.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Change {
    pub action: &'static str,
    pub address: String,
}

/// The resource changes in a plan's text output (`# aws_instance.a will be destroyed`).
pub fn plan_changes(log: &str) -> Vec<Change> {
    const ENDINGS: [(&str, &str); 6] = [
        (" will be created", "create"),
        (" will be destroyed", "destroy"),
        (" will be updated in-place", "update"),
        (" is tainted, so must be replaced", "replace"),
        (" must be replaced", "replace"),
        (" will be read during apply", "read"),
    ];
    let mut out = Vec::new();
    for line in log.lines() {
        let Some(rest) = line.trim_start().strip_prefix("# ") else {
            continue;
        };
        if let Some((address, action)) = ENDINGS
            .iter()
            .find_map(|(end, action)| rest.trim_end().strip_suffix(end).map(|a| (a, *action)))
            && !address.is_empty()
            && !address.starts_with('(')
        {
            out.push(Change {
                action,
                address: address.to_string(),
            });
        }
    }
    out
}

/// The resource changes the runner's log of `pod` names, or why there are none.
async fn log_changes(conn: &Conn, ns: &str, pod: Option<&str>, job: &str) -> (Vec<Change>, String) {
    let Some(pod) = pod else {
        return (vec![], format!("the pod of Job {job} is gone, and its log with it"));
    };
    let api: Api<Pod> = Api::namespaced(conn.client.clone(), ns);
    let lp = LogParams {
        container: Some("runner".into()),
        ..Default::default()
    };
    match api.logs(pod, &lp).await {
        Ok(log) => {
            let changes = plan_changes(&log);
            let note = if changes.is_empty() {
                "the runner's log names no resource changes".to_string()
            } else {
                String::new()
            };
            (changes, note)
        }
        Err(err) => (
            vec![],
            format!(
                "cannot read the runner's log: {}",
                from_kube(err, "read the log", ("get", "pods/log", ""), Some(ns))
            ),
        ),
    }
}

async fn plan(conn: &Conn, t: &Target, typed: &str, json: bool, now: Timestamp) -> Result<Printed, PluginError> {
    let r = read(conn, t).await?;
    let e = explanation(&r, now);
    let s = &e.plan.booked;
    let what = format!("{} {}/{}", s.kind, s.namespace, s.name);
    let Some(p) = s.status.pending_plan.clone().filter(|p| !p.hash.is_empty()) else {
        let next = words::next_sentence(&e.decision, s, now);
        if json {
            return Ok(Printed::out(pretty(&json!({
                "object": what, "pendingPlan": Value::Null, "next": next,
            }))));
        }
        return Ok(Printed::out(format!("No plan waits for approval on {what}; {next}\n")));
    };
    let approved = s.approve_plan.as_deref() == Some(p.hash.as_str());
    let (secret, kept) = kept::read(&conn.client, r.id.kind, &s.namespace, &s.name, &p.hash).await;
    let by_job = pods_by_job(&r.pods);
    let pod = by_job.get(p.job.as_str()).and_then(|p| p.metadata.name.clone());
    let kept_where = format!("Secret {}/{secret}", s.namespace);
    let (changes, source, note) = match &kept {
        kept::Kept::This { plan, .. } => {
            let changes = plan
                .changes
                .iter()
                .map(|c| Change {
                    action: c.action(),
                    address: c.address.clone(),
                })
                .collect();
            let mut note = if plan.more > 0 {
                format!("{} more changes are not listed; the full plan is below", plan.more)
            } else {
                String::new()
            };
            if !kept::matches_recorded(plan, &p) {
                let unverified = "the kept list does not add up to the counts the controller recorded with the hash, \
                                  so it cannot be verified (the runner's pod wrote it)";
                note = [note.as_str(), unverified]
                    .into_iter()
                    .filter(|n| !n.is_empty())
                    .collect::<Vec<_>>()
                    .join("; ");
            }
            (changes, format!("kept in {kept_where}"), note)
        }
        other => {
            let why = match other {
                kept::Kept::Other { hash } => format!("{kept_where} keeps plan {hash}, not this one"),
                kept::Kept::Unreadable(why) => why.clone(),
                _ => format!("{kept_where} keeps no plan"),
            };
            let (changes, log_note) = log_changes(conn, &s.namespace, pod.as_deref(), &p.job).await;
            let note = [why, log_note]
                .into_iter()
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
                .join("; ");
            (changes, "from the runner's log".to_string(), note)
        }
    };
    let full = match &pod {
        Some(pod) => format!("kubectl logs -n {} {pod} -c runner", s.namespace),
        None => format!("kubectl captf logs {typed} --op apply"),
    };
    let approve = format!("kubectl captf approve {typed} --hash {}", p.hash);
    let kept_text = match &kept {
        kept::Kept::This { plan, text } => Some((plan.truncated, text.as_str())),
        _ => None,
    };
    if json {
        return Ok(Printed::out(pretty(&json!({
            "object": what,
            "pendingPlan": {"hash": p.hash, "adds": p.adds, "changes": p.changes, "destroys": p.destroys,
                            "replaces": p.replaces, "job": p.job, "pod": pod},
            "approved": approved,
            "resources": changes,
            "resourcesFrom": source,
            "keptIn": kept_where,
            "planText": kept_text.map(|(_, t)| t),
            "planTextTruncated": kept_text.map(|(cut, _)| cut),
            "logNote": if note.is_empty() { Value::Null } else { Value::String(note.clone()) },
            "fullPlan": full,
            "approve": approve,
        }))));
    }
    let mut out = format!(
        "Plan {} {} on {what}\n  {} to add, {} to change, {} to destroy, {} to replace\n  planned by Job {}\n",
        p.hash,
        if approved {
            "is approved and waits for the next apply"
        } else {
            "waits for approval"
        },
        p.adds,
        p.changes,
        p.destroys,
        p.replaces,
        p.job
    );
    if !changes.is_empty() {
        out.push_str(&format!("\nResource changes ({source}):\n"));
        let rows: Vec<Vec<String>> = changes
            .iter()
            .map(|c| vec![format!("  {}", c.action), c.address.clone()])
            .collect();
        out.push_str(&words::table(&["  ACTION", "ADDRESS"], &rows));
    }
    if !note.is_empty() {
        out.push_str(&format!("\nNote: {note}.\n"));
    }
    match kept_text {
        Some((cut, text)) => {
            out.push_str(&format!("\nThe plan, as the runner printed it ({kept_where}):\n\n"));
            out.push_str(text);
            if !text.ends_with('\n') {
                out.push('\n');
            }
            if cut {
                out.push_str(&format!("[the plan was longer than what is kept; all of it: {full}]\n"));
            }
            out.push('\n');
        }
        None => out.push_str(&format!("\nThe full plan: {full}\n")),
    }
    if !approved {
        out.push_str(&format!("Approve exactly this plan: {approve}\n"));
    }
    Ok(Printed::out(out))
}

/// Write annotations on the object, only if it is still the version that was read (a 409: it
/// changed meanwhile, and what was shown may be out of date).
async fn annotate_all(conn: &Conn, r: &LiveRead, pairs: &[(&str, &str)]) -> Result<DynamicObject, PluginError> {
    let ns = r.id.namespace.as_str();
    let api: Api<DynamicObject> = Api::namespaced_with(conn.client.clone(), ns, &api_resource(r.id.kind));
    let annotations: serde_json::Map<String, Value> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect();
    let patch = json!({"metadata": {
        "resourceVersion": r.object.metadata().resource_version,
        "annotations": annotations,
    }});
    match api
        .patch(&r.id.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(written) => Ok(written),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(PluginError::Refused(format!(
            "{} changed while this command ran; nothing was written. Run it again to see the current state.",
            r.id.what()
        ))),
        Err(err) => Err(from_kube(
            err,
            &format!("annotate {}", r.id.what()),
            ("patch", r.id.kind.plural(), keys::GROUP),
            Some(ns),
        )),
    }
}

/// Write one annotation (see [`annotate_all`]).
async fn annotate(conn: &Conn, r: &LiveRead, key: &str, value: &str) -> Result<(), PluginError> {
    annotate_all(conn, r, &[(key, value)]).await.map(drop)
}

/// The value of `key` the API server stored (an admission webhook may have replaced the one
/// written), else what was written.
fn stored(written: &DynamicObject, key: &str, sent: String) -> String {
    written
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
        .unwrap_or(sent)
}

/// Who this user is, as the API server authenticates it (SelfSubjectReview); else the
/// kubeconfig's user entry, marked as such.
async fn whoami(conn: &Conn) -> String {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api: Api<SelfSubjectReview> = Api::all(conn.client.clone());
    let review = SelfSubjectReview::default();
    if let Ok(r) = api.create(&kube::api::PostParams::default(), &review).await
        && let Some(name) = r.status.and_then(|s| s.user_info).and_then(|u| u.username)
        && !name.is_empty()
    {
        return name;
    }
    match &conn.user {
        Some(u) => format!("{u} (kubeconfig user)"),
        None => "unknown (kubeconfig user)".to_string(),
    }
}

/// Ask a person on the terminal; `None` when there is no terminal to ask on.
fn ask_terminal(question: &str) -> Option<bool> {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        return None;
    }
    let mut err = std::io::stderr();
    let _ = write!(err, "{question} [y/N] ");
    let _ = err.flush();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).ok()?;
    Some(matches!(line.trim(), "y" | "Y" | "yes" | "Yes" | "YES"))
}

/// What `approve` shows before it asks: the plan's counts and its resource changes.
pub fn approval_question(p: &captf_shared::types::PendingPlan, what: &str, kept: &kept::Kept) -> String {
    let mut q = format!(
        "Plan {} on {what}: {} to add, {} to change, {} to destroy, {} to replace (planned by Job {}).\n",
        p.hash, p.adds, p.changes, p.destroys, p.replaces, p.job
    );
    if let kept::Kept::This { plan, .. } = kept {
        if !kept::matches_recorded(plan, p) {
            q.push_str(
                "  The kept list below does not add up to these counts, which the controller recorded with the hash: \
                 it cannot be verified (the runner's pod wrote it); read the full plan before approving.\n",
            );
        }
        for c in plan.changes.iter().take(50) {
            q.push_str(&format!("  {:<8} {}\n", c.action(), c.address));
        }
        let more = plan.changes.len().saturating_sub(50) + plan.more;
        if more > 0 {
            q.push_str(&format!("  … and {more} more (kubectl captf plan shows them all)\n"));
        }
    }
    q.push_str(&format!("Approve plan {}?", p.hash));
    q
}

async fn approve(
    conn: &Conn,
    t: &Target,
    typed: &str,
    hash: Option<&str>,
    yes: bool,
    json: bool,
    now: Timestamp,
) -> Result<Printed, PluginError> {
    let r = read(conn, t).await?;
    let e = explanation(&r, now);
    let what = r.id.what();
    let (p, written, by) = match rules::approval(&e.plan.booked, hash, now) {
        Ok(rules::Approval::Write(p)) => {
            if hash.is_none() && !yes {
                let (_, kept) = kept::read(&conn.client, r.id.kind, &r.id.namespace, &r.id.name, &p.hash).await;
                let question = approval_question(&p, &what, &kept);
                let answer = match conn.confirm {
                    Confirm::Answer(a) => Some(a),
                    Confirm::Terminal => ask_terminal(&question),
                };
                match answer {
                    Some(true) => {}
                    Some(false) => {
                        return Err(PluginError::Refused(format!(
                            "plan {} on {what} was not approved; nothing was written",
                            p.hash
                        )));
                    }
                    None => {
                        return Err(PluginError::Usage(format!(
                            "no terminal to ask on: review the plan with `kubectl captf plan {typed}`, then approve it with `kubectl captf approve {typed} --hash <hash>` (or --yes)"
                        )));
                    }
                }
            }
            let by = whoami(conn).await;
            let written = annotate_all(
                conn,
                &r,
                &[
                    (keys::ANNOTATION_APPROVE_PLAN, p.hash.as_str()),
                    (keys::ANNOTATION_APPROVED_BY, by.as_str()),
                ],
            )
            .await?;
            // The webhook records the user the API server authenticated.
            (p, true, Some(stored(&written, keys::ANNOTATION_APPROVED_BY, by)))
        }
        Ok(rules::Approval::Already(p)) => (p, false, r.snap.approved_by.clone()),
        Err(refusal) => return Err(PluginError::Refused(refusal.to_string())),
    };
    // What the controller does with the approval: the same plan with the annotation set.
    let mut with = r.snap.clone();
    with.approve_plan = Some(p.hash.clone());
    let after = explain_snapshot(&with, &r.active_check, 0, now);
    let next = words::next_sentence(&after.decision, &after.plan.booked, now);
    if json {
        return Ok(Printed::out(pretty(&json!({
            "object": what, "approved": p.hash, "written": written, "approvedBy": by,
            "annotation": {keys::ANNOTATION_APPROVE_PLAN: p.hash}, "next": next,
        }))));
    }
    let by = by.map(|b| format!(" as {b}")).unwrap_or_default();
    let head = if written {
        format!("Approved plan {} on {what}{by}", p.hash)
    } else {
        format!("Plan {} on {what} was already approved{by}; nothing written", p.hash)
    };
    Ok(Printed::out(format!(
        "{head} ({} to add, {} to change, {} to destroy, {} to replace; Job {}).\nNext: {next}\nFollow it with `kubectl captf explain {typed}`.\n",
        p.adds, p.changes, p.destroys, p.replaces, p.job
    )))
}

async fn refresh(conn: &Conn, t: &Target, json: bool, now: Timestamp) -> Result<Printed, PluginError> {
    let r = read(conn, t).await?;
    let (verdict, _) = rules::refresh(&r.snap, now);
    match verdict {
        rules::Request::Write { words } => {
            let value = now.to_string();
            annotate(conn, &r, keys::ANNOTATION_REFRESH, &value).await?;
            if json {
                return Ok(Printed::out(pretty(&json!({
                    "object": r.id.what(), "annotation": {keys::ANNOTATION_REFRESH: value}, "message": words,
                }))));
            }
            Ok(Printed::out(format!("{words}\n")))
        }
        rules::Request::Refuse { words } => Err(PluginError::Refused(words)),
    }
}

async fn reconcile(
    conn: &Conn,
    t: &Target,
    reason: Option<&str>,
    json: bool,
    now: Timestamp,
) -> Result<Printed, PluginError> {
    let r = read(conn, t).await?;
    let (verdict, _) = rules::reconcile(&r.snap, now);
    match verdict {
        rules::Request::Write { words } => {
            let value = now.to_string();
            let by = whoami(conn).await;
            let reason = reason.map(str::trim).filter(|w| !w.is_empty()).unwrap_or("");
            let written = annotate_all(
                conn,
                &r,
                &[
                    (keys::ANNOTATION_RECONCILE_NOW, value.as_str()),
                    (keys::ANNOTATION_RECONCILE_NOW_BY, by.as_str()),
                    (keys::ANNOTATION_RECONCILE_NOW_REASON, reason),
                ],
            )
            .await?;
            let by = stored(&written, keys::ANNOTATION_RECONCILE_NOW_BY, by);
            if json {
                return Ok(Printed::out(pretty(&json!({
                    "object": r.id.what(), "requestedBy": by, "reason": reason,
                    "annotation": {keys::ANNOTATION_RECONCILE_NOW: value}, "message": words,
                }))));
            }
            Ok(Printed::out(format!("{words}\n")))
        }
        rules::Request::Refuse { words } => Err(PluginError::Refused(words)),
    }
}

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

async fn events(conn: &Conn, t: &Target, json: bool, now: Timestamp) -> Result<Printed, PluginError> {
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

/// The pod whose runner log `logs` shows: of the object's newest Job (of `op`), or the one
/// before it.
pub struct LogPod {
    pub job: String,
    pub op: captf_shared::Op,
    pub seq: u32,
    pub pod: String,
}

impl LogPod {
    /// The line `logs` prints on stderr above the log.
    pub fn banner(&self) -> String {
        format!(
            "==> Job {} ({}, #{}), pod {} <==\n",
            self.job, self.op, self.seq, self.pod
        )
    }
}

async fn log_pod(conn: &Conn, t: &Target, op: Option<captf_shared::Op>, previous: bool) -> Result<LogPod, PluginError> {
    let ns = conn.namespace.as_str();
    let object = get_object(conn, t).await?;
    let id = Ident::of(&object, t.kind).map_err(|e| from_runtime(e.into(), Some(ns)))?;
    let (jobs, pods) = gather::live_jobs_and_pods(&conn.client, &id)
        .await
        .map_err(|e| from_runtime(e, Some(ns)))?;
    let mut ours: Vec<(u32, captf_shared::Op, String)> = jobs
        .iter()
        .filter_map(|j| {
            let name = j.metadata.name.clone()?;
            let (jop, seq) = names::parse_job_name(id.kind, &id.namespace, &id.name, &name)?;
            op.is_none_or(|o| o == jop).then_some((seq, jop, name))
        })
        .collect();
    ours.sort_by_key(|o| std::cmp::Reverse(o.0));
    let which = if previous { "the Job before the newest" } else { "a Job" };
    let of_op = op.map(|o| format!(" {o}")).unwrap_or_default();
    let Some((seq, jop, job)) = ours.get(usize::from(previous)).cloned() else {
        return Err(PluginError::Refused(format!(
            "{} has no{of_op} Job{}: {which} was never run or was pruned (the history keeps the newest Jobs per op). `kubectl captf explain {}/{}` says what runs next.",
            id.what(),
            if previous { " before the newest" } else { "" },
            t.kind.short(),
            t.name
        )));
    };
    let by_job = pods_by_job(&pods);
    let Some(pod) = by_job.get(job.as_str()).and_then(|p| p.metadata.name.clone()) else {
        return Err(PluginError::Refused(format!(
            "the pod of Job {job} is gone, and its log with it (the Job's result is booked on the Job: `kubectl get job -n {ns} {job} -o yaml`)"
        )));
    };
    Ok(LogPod { job, op: jop, seq, pod })
}

async fn logs(conn: &Conn, t: &Target, op: Option<captf_shared::Op>, previous: bool) -> Result<Printed, PluginError> {
    let ns = conn.namespace.as_str();
    let picked = log_pod(conn, t, op, previous).await?;
    let pod = picked.pod.clone();
    let lp = LogParams {
        container: Some("runner".into()),
        ..Default::default()
    };
    let log = Api::<Pod>::namespaced(conn.client.clone(), ns)
        .logs(&pod, &lp)
        .await
        .map_err(|e| {
            from_kube(
                e,
                &format!("read the log of pod {ns}/{pod}"),
                ("get", "pods/log", ""),
                Some(ns),
            )
        })?;
    Ok(Printed {
        stdout: log,
        stderr: picked.banner(),
        partial: false,
    })
}

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
    pub when_words: String,
    pub consecutive_failures: BTreeMap<String, u32>,
    pub last_success: Option<String>,
    #[serde(skip)]
    pub last_success_at: Option<Timestamp>,
    /// The state lock's holder when it is not one of the object's runners.
    pub foreign_lock_holder: Option<String>,
    pub active_job: Option<String>,
    pub pending_plan: Option<String>,
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
    let when_at = words::next_time(&e.decision, now);
    Row {
        kind: s.kind.to_string(),
        namespace: s.namespace.clone(),
        name: s.name.clone(),
        ready: ready_condition(&s.status),
        provisioned: s.status.ready,
        observed,
        next: if observed {
            words::next_short(&e.decision)
        } else {
            "not observed".to_string()
        },
        reason: e.decision.reason().map(|r| r.to_string()),
        when: match &e.decision {
            Decision::Wait(w) if w.not_before.is_none() && w.requeue_after.is_none() => None,
            _ => when_at.map(|t| t.to_string()),
        },
        when_at,
        when_words: words::when_words(&e.decision, now),
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

async fn status(
    conn: &Conn,
    all_namespaces: bool,
    sort_by: SortKey,
    output: Option<Output>,
    now: Timestamp,
) -> Result<Printed, PluginError> {
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
    let mut stderr = String::new();
    for u in &unread {
        stderr.push_str(&format!("cannot read {u}\n"));
    }
    if rows.is_empty() {
        let where_ = ns.map_or("any namespace".to_string(), |n| format!("namespace {n:?}"));
        stderr.push_str(&format!(
            "No TerraformClusters, TerraformMachinePools or TerraformMachines in {where_}.\n"
        ));
    }
    if elsewhere > 0 {
        stderr.push_str(&format!(
            "Left out: {elsewhere} object(s) labelled {}, which the controller leaves alone.\n",
            keys::LABEL_MANAGED_BY
        ));
    }
    let stdout = if Output::is_document(output) {
        pretty(&json!(rows))
    } else if rows.is_empty() {
        String::new()
    } else {
        status_table(&rows, all_namespaces, output == Some(Output::Wide), now)
    };
    Ok(Printed {
        stdout,
        stderr,
        partial: !unread.is_empty(),
    })
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
        provisioned: status.ready,
        observed,
        next: "unknown (cannot read; see below)".to_string(),
        reason: None,
        when: None,
        when_at: None,
        when_words: "-".to_string(),
        consecutive_failures: BTreeMap::new(),
        last_success: None,
        last_success_at: None,
        foreign_lock_holder: None,
        active_job: None,
        pending_plan: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_text_names_each_resource_change_terraform_prints() {
        let log = "\
captf-runner: plan abc: 1 to add, 1 to change, 1 to destroy, 1 to replace
Terraform will perform the following actions:

  # aws_instance.web will be destroyed
  # (because aws_instance.web is not in configuration)
  - resource \"aws_instance\" \"web\" {
  # aws_s3_bucket.logs must be replaced
  # module.net.aws_vpc.main will be updated in-place
  # null_resource.new[\"a\"] will be created
  # aws_instance.old is tainted, so must be replaced
";
        let got: Vec<String> = plan_changes(log)
            .iter()
            .map(|c| format!("{} {}", c.action, c.address))
            .collect();
        assert_eq!(
            got,
            [
                "destroy aws_instance.web",
                "replace aws_s3_bucket.logs",
                "update module.net.aws_vpc.main",
                "create null_resource.new[\"a\"]",
                "replace aws_instance.old",
            ]
        );
    }

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
        }
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

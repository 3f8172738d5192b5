//! `captf-controller explain`: run the decision core offline over files (docs/rules.md).
//!
//! Reads the object, its Jobs, pods, lock Lease and inputs Secret from YAML or JSON (a single
//! object, several documents, or a `kind: List`, so `kubectl get -o yaml` output works; `-` is
//! stdin), builds the snapshot the reconciler would (classify the Jobs, the active-Job check of
//! docs/rules.md, the stale-lock check with the holder pod from the pods given), and prints the
//! [`plan::plan`] of it: the very function whose result the controller executes.

use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use captf_shared::keys;
use captf_shared::names::{self, RunnerPattern};
use captf_shared::validation::parse_object;
use captf_shared::{Kind, Op};

use crate::decide::{self, Decision};
use crate::inputs::{self, ResolveError};
use crate::interrupted::{self, ActiveJobCheck, ActiveJobReads, LiveJob};
use crate::lock::{self, HolderPod, LockState};
use crate::plan::{self, Plan};
use crate::record::{Accounting, JobRecord, RecordError};
use crate::snapshot::{self, DurableRecord, Holds, InputsHash, Snapshot};

/// Where each input comes from: a path or `-` for stdin.
#[derive(Clone, Debug, Default)]
pub struct ExplainInput {
    pub object: String,
    pub jobs: String,
    pub pods: Option<String>,
    pub lease: Option<String>,
    pub secret: Option<String>,
    /// RFC 3339; default: the current time.
    pub now: Option<String>,
    /// The current inputs hash, when the caller knows it (variablesFrom cannot be read offline).
    pub inputs_hash: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: not YAML or JSON: {why}")]
    Syntax { file: String, why: String },
    #[error("{file}: {field}: {why}")]
    Field { file: String, field: String, why: String },
    #[error("{file}: larger than {MAX_INPUT_BYTES} bytes; give the objects explain needs, not a whole dump")]
    TooLarge { file: String },
    #[error("only one input can be read from stdin (-), but {0} are")]
    TwoStdins(usize),
    #[error("--now: {0:?} is not an RFC 3339 time")]
    BadNow(String),
    #[error("--inputs-hash: {0:?} is not a 64-character lowercase hex SHA-256")]
    BadHash(String),
}

fn field(file: &str, field: impl Into<String>, why: impl ToString) -> ExplainError {
    ExplainError::Field {
        file: file.to_string(),
        field: field.into(),
        why: why.to_string(),
    }
}

/// An input file larger than this is refused (the largest `kubectl get -o yaml` output explain
/// needs is a list of one object's Jobs or pods, far below it).
pub const MAX_INPUT_BYTES: usize = 64 * 1024 * 1024;
/// YAML flow collections (`[ ]`, `{ }`) nested deeper than this are refused before parsing: the
/// YAML parser's time grows with nesting depth times size (250 KB nested 40,000 deep took 22 s),
/// and deeper than 128 levels does not deserialize anyway.
pub const MAX_FLOW_DEPTH: usize = 100;

/// One item of an input file, with its path inside the file (`items[2]`) for messages.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// Where the item is in its file (`document 1: items[2]`), empty for a lone top-level object.
    pub at: String,
    pub value: Value,
}

impl Item {
    /// The path of a field of this item: `items[2].metadata.name`, or `metadata.name` at the top.
    fn path(&self, sub: &str) -> String {
        match (self.at.is_empty(), sub.is_empty()) {
            (true, true) => "(top level)".to_string(),
            (true, false) => sub.to_string(),
            (false, true) => self.at.clone(),
            (false, false) => format!("{}.{sub}", self.at),
        }
    }
}

fn read_text(file: &str, stdin: &mut Option<String>) -> Result<String, ExplainError> {
    if file == "-" {
        if let Some(text) = stdin.take() {
            return Ok(text);
        }
        return read_bounded("-", std::io::stdin(), MAX_INPUT_BYTES);
    }
    let f = std::fs::File::open(file).map_err(|source| ExplainError::Read {
        file: file.to_string(),
        source,
    })?;
    read_bounded(file, f, MAX_INPUT_BYTES)
}

/// Read at most `limit` bytes of text; more is [`ExplainError::TooLarge`].
fn read_bounded(file: &str, r: impl Read, limit: usize) -> Result<String, ExplainError> {
    let mut text = String::new();
    r.take(limit as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|source| ExplainError::Read {
            file: file.to_string(),
            source,
        })?;
    if text.len() > limit {
        return Err(ExplainError::TooLarge { file: file.to_string() });
    }
    Ok(text)
}

/// The deepest nesting of YAML flow collections in `text`, counting `[`/`{` against `]`/`}`
/// outside quoted strings. A bracket in a plain scalar counts too, so this can over-count, never
/// under-count.
pub fn flow_depth(text: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let mut quote: Option<u8> = None;
    let mut escaped = false;
    for &b in text.as_bytes() {
        match quote {
            Some(b'"') if escaped => escaped = false,
            Some(b'"') if b == b'\\' => escaped = true,
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None => match b {
                b'"' | b'\'' => quote = Some(b),
                b'[' | b'{' => {
                    depth += 1;
                    max = max.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    max
}

/// The documents of a JSON text (one value, or several one after another), if it is JSON.
fn json_documents(text: &str) -> Option<Vec<Value>> {
    let start = text.trim_start_matches(['\u{feff}', ' ', '\t', '\r', '\n']);
    if !start.starts_with(['{', '[']) {
        return None;
    }
    serde_json::Deserializer::from_str(start)
        .into_iter::<Value>()
        .collect::<Result<Vec<_>, _>>()
        .ok()
}

/// Parse YAML or JSON text: one object, several documents, or `kind: List`s. JSON is read by a
/// JSON parser (linear time); YAML with flow collections nested too deep is refused unparsed.
pub fn parse_items(file: &str, text: &str) -> Result<Vec<Item>, ExplainError> {
    let syntax = |why: String| ExplainError::Syntax {
        file: file.to_string(),
        why,
    };
    let mut docs = Vec::new();
    if let Some(json) = json_documents(text) {
        docs.extend(json.into_iter().filter(|v| !v.is_null()));
    } else {
        let depth = flow_depth(text);
        if depth > MAX_FLOW_DEPTH {
            return Err(syntax(format!(
                "[ ] or {{ }} nested {depth} deep, more than {MAX_FLOW_DEPTH}"
            )));
        }
        for doc in serde_yaml_ng::Deserializer::from_str(text) {
            let v = Value::deserialize(doc).map_err(|e| syntax(e.to_string()))?;
            if !v.is_null() {
                docs.push(v);
            }
        }
    }
    let many = docs.len() > 1;
    let mut out = Vec::new();
    for (d, doc) in docs.into_iter().enumerate() {
        let prefix = if many { format!("document {d}: ") } else { String::new() };
        let is_list = doc
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"));
        if is_list {
            let mut doc = doc;
            let items = match doc.get_mut("items").map(Value::take) {
                Some(Value::Array(items)) => items,
                Some(Value::Null) | None => vec![],
                Some(_) => return Err(field(file, format!("{prefix}items"), "must be a list")),
            };
            out.extend(items.into_iter().enumerate().map(|(i, value)| Item {
                at: format!("{prefix}items[{i}]"),
                value,
            }));
        } else {
            let at = if many { format!("document {d}") } else { String::new() };
            out.push(Item { at, value: doc });
        }
    }
    Ok(out)
}

/// Deserialize an item as `T`, naming the field that does not fit.
fn typed<T: DeserializeOwned>(file: &str, item: &Item, kind: &str) -> Result<T, ExplainError> {
    match item.value.get("kind").and_then(Value::as_str) {
        Some(k) if k != kind => {
            return Err(field(file, item.path("kind"), format!("expected {kind}, got {k}")));
        }
        _ => {}
    }
    serde_path_to_error::deserialize(&item.value).map_err(|e| {
        let path = e.path().to_string();
        let at = item.path(if path == "." { "" } else { &path });
        field(file, at, format!("{kind} does not parse: {}", e.inner()))
    })
}

/// What `explain` found and decided: the JSON it prints and the one-line summary.
#[derive(Clone, Debug)]
pub struct Explanation {
    pub json: Value,
    pub summary: String,
    pub decision: Decision,
    /// Everything the controller's pass would do.
    pub plan: Plan,
}

fn rfc3339(t: Option<Timestamp>) -> Value {
    t.map_or(Value::Null, |t| Value::String(t.to_string()))
}

/// A duration in a person's words: `45s`, `2m`, `2m30s`, `1h5m`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

/// Run explain over the given inputs.
pub fn explain(input: &ExplainInput) -> Result<Explanation, ExplainError> {
    let files = [
        Some(&input.object),
        Some(&input.jobs),
        input.pods.as_ref(),
        input.lease.as_ref(),
        input.secret.as_ref(),
    ];
    let stdins = files.iter().flatten().filter(|f| f.as_str() == "-").count();
    if stdins > 1 {
        return Err(ExplainError::TwoStdins(stdins));
    }
    let now = match &input.now {
        Some(s) => s.parse::<Timestamp>().map_err(|_| ExplainError::BadNow(s.clone()))?,
        None => Timestamp::now(),
    };
    let mut stdin = None;
    let mut load = |file: &str| -> Result<Vec<Item>, ExplainError> {
        let text = read_text(file, &mut stdin)?;
        parse_items(file, &text)
    };

    // The object.
    let file = input.object.as_str();
    let items = load(file)?;
    let [item] = items.as_slice() else {
        return Err(field(
            file,
            "(top level)",
            format!("expected exactly one object, got {}", items.len()),
        ));
    };
    let kind_name = item.value.get("kind").and_then(Value::as_str).unwrap_or_default();
    let object = parse_object(kind_name, &item.value).map_err(|r| field(file, item.path(""), r.message()))?;
    let meta = object.metadata();
    let name = meta
        .name
        .clone()
        .ok_or_else(|| field(file, "metadata.name", "is missing"))?;
    let namespace = meta.namespace.clone().unwrap_or_else(|| "default".to_string());
    let kind = object.job_kind().ok_or_else(|| {
        field(
            file,
            "kind",
            format!("{kind_name} runs no Jobs: give a TerraformCluster, TerraformMachinePool or TerraformMachine"),
        )
    })?;
    let suffix = names::suffix(kind, &namespace, &name);
    let object_id = names::object_id(kind, &namespace, &name);

    // Pods, indexed by Job.
    let pods: Vec<Pod> = match &input.pods {
        Some(file) => load(file)?
            .iter()
            .map(|it| typed::<Pod>(file, it, "Pod"))
            .collect::<Result<_, _>>()?,
        None => vec![],
    };
    let pods_by_job = snapshot::pods_by_job(&pods);

    // Jobs: this object's, booked as the reconciler would.
    let file = input.jobs.as_str();
    let mut records = Vec::new();
    let mut ignored = 0usize;
    for it in load(file)? {
        let job: Job = typed(file, &it, "Job")?;
        let job_name = job.metadata.name.clone().unwrap_or_default();
        let labelled_ours = job
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::LABEL_OBJECT))
            .is_some_and(|v| *v == object_id);
        let ours = names::parse_job_name(kind, &namespace, &name, &job_name).is_some();
        if !ours && !labelled_ours {
            ignored += 1;
            continue;
        }
        if let Some(ns) = &job.metadata.namespace
            && *ns != namespace
        {
            return Err(field(
                file,
                it.path("metadata.namespace"),
                format!("{ns:?} is not the object's namespace {namespace:?}"),
            ));
        }
        let pod = pods_by_job.get(job_name.as_str()).copied();
        let record = JobRecord::from_job(kind, &namespace, &name, &job, pod).map_err(|e| {
            let at = match e {
                RecordError::NoName => it.path("metadata.name"),
                RecordError::NotOurs { .. } => it.path(&format!("metadata.labels.{}", keys::LABEL_OBJECT)),
                RecordError::LabelMismatch { label, .. } => it.path(&format!("metadata.labels.{label}")),
                RecordError::BadOutcome { annotation, .. } => it.path(&format!("metadata.annotations.{annotation}")),
            };
            field(file, at, e)
        })?;
        records.push(record);
    }

    // The lock Lease and the cluster lease.
    let mut lock_lease = None;
    let mut holds = Holds::default();
    let cluster = inputs::cluster_name(kind, meta);
    if let Some(file) = &input.lease {
        for it in load(file)? {
            let lease: Lease = typed(file, &it, "Lease")?;
            let lname = lease.metadata.name.clone().unwrap_or_default();
            let holder = lease
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty());
            if lname == names::lock_lease_name(&suffix) {
                lock_lease = Some(snapshot::lock_lease(&lease));
            } else if cluster
                .as_deref()
                .is_some_and(|c| lname == names::cluster_lease_name(&namespace, c))
            {
                if kind != Kind::TerraformCluster {
                    holds.cluster_lease_holder = holder;
                }
            } else if lname != names::run_lease_name(&suffix) {
                return Err(field(
                    file,
                    it.path("metadata.name"),
                    format!(
                        "{lname:?} is not this object's lock Lease ({})",
                        names::lock_lease_name(&suffix)
                    ),
                ));
            }
        }
    }

    // The durable record, and the hash of the inputs the Secret holds.
    let mut durable = DurableRecord::default();
    let mut stored_inputs_hash = None;
    if let Some(file) = &input.secret {
        let items = load(file)?;
        let [it] = items.as_slice() else {
            return Err(field(
                file,
                "(top level)",
                format!("expected exactly one Secret, got {}", items.len()),
            ));
        };
        let secret: Secret = typed(file, it, "Secret")?;
        let sname = secret.metadata.name.clone().unwrap_or_default();
        if sname != names::inputs_secret_name(&suffix) {
            return Err(field(
                file,
                it.path("metadata.name"),
                format!(
                    "{sname:?} is not this object's inputs Secret ({})",
                    names::inputs_secret_name(&suffix)
                ),
            ));
        }
        durable = DurableRecord::from_secret(&secret).map_err(|e| field(file, it.path("metadata.annotations"), e))?;
        stored_inputs_hash = crate::inputs_secret::stored_inputs(&secret).map(|i| i.hash());
    }

    // The inputs hash.
    let inputs_hash = match &input.inputs_hash {
        Some(h) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) => {
            InputsHash::Known(h.clone())
        }
        Some(h) => return Err(ExplainError::BadHash(h.clone())),
        None => match inputs::resolve_inputs(kind, meta, object.terraform_spec(), None, None, |_, _| Err(())) {
            Ok(i) => InputsHash::Known(i.hash()),
            Err(e) => InputsHash::Unresolved(offline_note(&e)),
        },
    };

    // The lock check (the holder pod "read live" from the pods given).
    let pattern = RunnerPattern::new(kind, &namespace, &name);
    let holder = match lock::holder_hostname(lock_lease.as_ref()) {
        Some(host) if input.pods.is_some() => {
            snapshot::holder_pod(pods.iter().find(|p| p.metadata.name.as_deref() == Some(host.as_str())))
        }
        _ => HolderPod::Unknown,
    };

    let mut snap = Snapshot::new(&object, records, durable, inputs_hash, LockState::Free, holds)
        .map_err(|e| field(&input.object, "(top level)", e))?;
    snap.stored_inputs_hash = stored_inputs_hash;

    // docs/rules.md: status.activeJob names a Job that is not in the Jobs given.
    let mut active_check = ActiveJobCheck::Nothing;
    if let Some(active) = snap.status.active_job.clone().filter(|j| !j.is_empty())
        && !snap.jobs.iter().any(|r| r.name == active)
    {
        active_check = interrupted::check_active_job(&ActiveJobReads {
            kind,
            namespace: &namespace,
            name: &name,
            active_job: Some(&active),
            live_job: LiveJob::NotFound,
            live_active_job: Some(&active),
            deleted_by_controller: false,
        });
        match &active_check {
            ActiveJobCheck::RecordInterruptedApply { job } => {
                snap.durable.interrupted_apply = Some(job.clone());
                snap.status.active_job = None;
            }
            ActiveJobCheck::Forget { .. } => snap.status.active_job = None,
            ActiveJobCheck::Nothing => {}
        }
    }
    // The lock is checked as every reader checks it: only while no Job is active.
    if crate::assemble::lock_is_checked(&snap.jobs, snap.status.active_job.as_deref()) {
        snap.lock = lock::check_lock(lock_lease.as_ref(), &pattern, &holder);
    }

    Ok(explain_snapshot(&snap, &active_check, ignored, now))
}

/// Explain a snapshot built from files or from live reads (`captf_read::live`): the pass planned
/// exactly as the controller plans it (booking, the decision, pruning, the status), rendered.
/// `ignored` counts the Jobs given that were not the object's.
pub fn explain_snapshot(snap: &Snapshot, active_check: &ActiveJobCheck, ignored: usize, now: Timestamp) -> Explanation {
    let p = plan::plan(snap, now);
    let json = render(&p, ignored, active_check, now);
    let summary = summarize(&p.booked, &p.decision, now);
    Explanation {
        json,
        summary,
        decision: p.decision.clone(),
        plan: p,
    }
}

/// The Job of the object that runs now, as `explain` shows it, in its text and its JSON alike.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningJob {
    pub name: String,
    /// Its op (`None`: a Job the object's records do not list).
    pub op: Option<Op>,
    /// When it started (`status.startTime`; until then, when it was created).
    pub since: Option<Timestamp>,
    /// Its `activeDeadlineSeconds`.
    pub active_deadline_seconds: Option<i64>,
    /// When Kubernetes stops it: `since` plus `activeDeadlineSeconds`. It then fails with
    /// `DeadlineExceeded` and counts as a failure, whatever the runner reports.
    pub deadline: Option<Timestamp>,
}

/// The Job of the object that runs now, if any (PURE).
pub fn running_job(s: &Snapshot) -> Option<RunningJob> {
    let name = s.active_job()?;
    let record = s.jobs.iter().find(|r| r.name == name);
    let since = record.and_then(|r| r.started.or(r.created));
    let active_deadline_seconds = record.and_then(|r| r.active_deadline_seconds);
    let deadline = since
        .zip(active_deadline_seconds)
        .and_then(|(t, secs)| t.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(secs)).ok());
    Some(RunningJob {
        name: name.to_string(),
        op: record.map(|r| r.op),
        since,
        active_deadline_seconds,
        deadline,
    })
}

/// The newest Job of the object that counts as a failure, no Job of its op having succeeded
/// since, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub name: String,
    pub op: Op,
    pub outcome: crate::Outcome,
    /// Kubernetes' reason for a Job it stopped at its deadline (`DeadlineExceeded`).
    pub reason: Option<&'static str>,
    /// Why, in a sentence.
    pub why: String,
}

/// The newest Job of the object that counts as a failure, unless a Job of its op succeeded
/// after it (PURE): the failure its op's backoff and consecutive failures come from.
pub fn last_failure(s: &Snapshot) -> Option<Failure> {
    let mut succeeded: Vec<Op> = Vec::new();
    let r = s.jobs.iter().find(|r| {
        if r.succeeded() {
            succeeded.push(r.op);
        }
        r.failed() && !succeeded.contains(&r.op)
    })?;
    let outcome = r.outcome?;
    let (reason, why) = match outcome {
        crate::Outcome::Deadline => {
            let allowed = r
                .active_deadline_seconds
                .and_then(|secs| u64::try_from(secs).ok())
                .map(|secs| format!(" ({})", human(Duration::from_secs(secs))))
                .unwrap_or_default();
            (
                Some(crate::outcome::DEADLINE_EXCEEDED),
                format!(
                    "{op} Job {job} was stopped at its deadline ({reason}): it ran longer than its activeDeadlineSeconds{allowed}, so Kubernetes ended it, and it counts as a failure whatever the runner reported",
                    op = r.op,
                    job = r.name,
                    reason = crate::outcome::DEADLINE_EXCEEDED,
                ),
            )
        }
        _ => {
            let result = r.result.as_ref();
            let phase = result
                .map(|x| format!(" in phase {}", x.phase.as_str()))
                .unwrap_or_default();
            let message = result
                .map(|x| x.message.trim())
                .filter(|m| !m.is_empty())
                .map(|m| format!(": {}", names::cut(m, 300)))
                .unwrap_or_default();
            (None, format!("{} Job {} failed{phase}{message}", r.op, r.name))
        }
    };
    Some(Failure {
        name: r.name.clone(),
        op: r.op,
        outcome,
        reason,
        why,
    })
}

fn offline_note(e: &ResolveError) -> String {
    match e {
        ResolveError::Offline { .. } => format!("{e}; pass --inputs-hash to decide with the live hash"),
        other => other.to_string(),
    }
}

fn render(p: &Plan, ignored: usize, active_check: &ActiveJobCheck, now: Timestamp) -> Value {
    let (s, d, history, pruned) = (&p.booked, &p.decision, &p.booked.jobs, &p.prune);
    let (action, op, reason, attempt, not_before, requeue, remediation, unlock, approved) = match d {
        Decision::Start(st) => (
            "start",
            Some(st.op),
            Some(st.reason),
            Some(st.attempt),
            None,
            None,
            st.drift_remediation,
            st.force_unlock_id.clone(),
            st.approved_plan.clone(),
        ),
        Decision::Wait(w) => (
            "wait",
            w.op,
            Some(w.reason),
            w.attempt,
            w.not_before,
            w.requeue_after,
            false,
            None,
            None,
        ),
        Decision::Finalize => ("finalize", None, None, None, None, None, false, None, None),
    };
    let backoff_op = op.or_else(|| history.iter().find(|r| r.is_finished()).map(|r| r.op));
    let backoff = backoff_op.map(|op| {
        let b = decide::backoff_of(s, op);
        json!({"op": op.as_str(), "n": b.n, "attempt": b.attempt, "delaySeconds": b.delay.as_secs(), "notBefore": rfc3339(b.not_before)})
    });
    let jobs: Vec<Value> = history
        .iter()
        .map(|r| {
            json!({
                "name": r.name, "op": r.op.as_str(), "seq": r.seq,
                "outcome": r.outcome.map(|o| o.as_str()),
                "countsAsFailure": r.failed(),
                "driftRemediation": r.drift_remediation,
                "finished": rfc3339(r.finished),
                "pruned": pruned.contains(&r.name),
            })
        })
        .collect();
    let active = match active_check {
        ActiveJobCheck::Nothing => match running_job(s) {
            Some(r) => json!({
                "job": r.name, "found": true, "op": r.op.map(Op::as_str),
                "since": rfc3339(r.since),
                "activeDeadlineSeconds": r.active_deadline_seconds,
                "deadline": rfc3339(r.deadline),
            }),
            None => Value::Null,
        },
        ActiveJobCheck::RecordInterruptedApply { job } => {
            json!({"job": job, "found": false, "action": "record captf.io/interrupted-apply", "message": interrupted::interrupted_apply_message(job)})
        }
        ActiveJobCheck::Forget { job } => json!({"job": job, "found": false, "action": "forget (records nothing)"}),
    };
    let (holder, stale) = (s.lock.holder(), matches!(s.lock, LockState::Stale { .. }));
    // docs/rules.md: the lock is checked only when no Job of the object is active.
    let state_lock = match s.active_job() {
        Some(job) => json!({
            "holder": Value::Null, "stale": false, "foreign": false, "checked": false,
            "why": format!("not checked while Job {job} is active"),
        }),
        None => json!({
            "holder": holder, "stale": stale, "foreign": matches!(s.lock, LockState::Foreign { .. }),
            "checked": true, "why": s.lock.why(),
        }),
    };
    json!({
        "object": format!("{} {}/{}", s.kind, s.namespace, s.name),
        "now": now.to_string(),
        "action": action,
        "op": op.map(Op::as_str),
        "reason": reason.map(|r| r.as_str()),
        "attempt": attempt,
        "driftRemediation": remediation,
        "notBefore": rfc3339(not_before),
        "requeueAfterSeconds": requeue.map(|d| d.as_secs()),
        "forceUnlockId": unlock,
        "approvedPlan": approved,
        "stateLock": state_lock,
        "inputsHash": {
            "current": s.inputs_hash.known(),
            "applied": s.durable.applied_inputs_hash.as_deref().or(s.status.applied_inputs_hash.as_deref()),
            "unresolved": match &s.inputs_hash { InputsHash::Unresolved(why) => Some(why.as_str()), InputsHash::Known(_) => None },
        },
        "invalidSpec": s.invalid,
        "activeJob": active,
        "lastFailure": last_failure(s).map(|f| json!({
            "job": f.name, "op": f.op.as_str(), "outcome": f.outcome.as_str(), "reason": f.reason, "why": f.why,
        })),
        "interruptedApply": s.durable.interrupted_apply,
        "backoff": backoff,
        "jobs": jobs,
        "prune": pruned,
        "book": p.accounting.iter().map(|a| json!({
            "job": a.job, "op": a.op.as_str(), "outcome": a.outcome.as_str(),
            "step": match a.step { Accounting::Book => "book", Accounting::Replay => "replay" },
        })).collect::<Vec<_>>(),
        "status": serde_json::to_value(&p.status).unwrap_or(Value::Null),
        "ignoredJobs": ignored,
        "lastSuccess": Op::ALL.iter().filter_map(|op| s.last_success(*op).map(|t| (op.as_str().to_string(), Value::String(t.to_string())))).collect::<BTreeMap<_, _>>(),
    })
}

fn summarize(s: &Snapshot, d: &Decision, now: Timestamp) -> String {
    let who = format!("{} {}/{}", s.kind, s.namespace, s.name);
    let what = match d {
        Decision::Finalize => "finalize: remove the finalizer".to_string(),
        Decision::Start(st) => {
            let mut line = format!("start {} ({}), attempt {}", st.op, st.reason, st.attempt);
            if st.drift_remediation {
                line.push_str(", remediating drift");
            }
            if let Some(id) = &st.force_unlock_id {
                line.push_str(&format!(", force-unlock {id} first"));
            }
            if let Some(p) = &st.approved_plan {
                line.push_str(&format!(", approved plan {p}"));
            }
            line
        }
        Decision::Wait(w) => {
            let mut line = format!("wait ({})", w.reason);
            if let (Some(op), Some(nb)) = (w.op, w.not_before) {
                let left = Duration::try_from(nb.duration_since(now)).unwrap_or_default();
                line.push_str(&format!(": {op} may start at {nb} (in {})", human(left)));
            } else if let Some(op) = w.op {
                line.push_str(&format!(": {op} held back"));
            } else if let Some(after) = w.requeue_after {
                line.push_str(&format!(", next look in {}", human(after)));
            }
            if let (crate::Reason::InputsUnresolved, InputsHash::Unresolved(why)) = (w.reason, &s.inputs_hash) {
                line.push_str(&format!(": {why}"));
            }
            if let Some(why) = &s.invalid
                && w.reason == crate::Reason::InvalidSpec
            {
                line.push_str(&format!(": {why}"));
            }
            line
        }
    };
    let lock = match &s.lock {
        _ if s.active_job().is_some() => String::new(),
        LockState::Free => String::new(),
        other => format!("; state lock: {}", other.why()),
    };
    format!("{who}: {what}{lock}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_last_failure_is_the_newest_failed_job_of_an_op_that_has_not_succeeded_since() {
        use crate::Outcome;
        use crate::record::tests::rec;
        let mut s = crate::requests::tests::base();
        s.jobs = vec![
            rec(Op::Drift, 5, Some(Outcome::Succeeded)),
            rec(Op::Apply, 4, Some(Outcome::Interrupted)),
            rec(Op::Apply, 3, Some(Outcome::Deadline)),
            rec(Op::Apply, 2, Some(Outcome::Failed)),
        ];
        s.jobs[2].active_deadline_seconds = Some(3600);
        // An interruption is free and another op's success says nothing of the apply.
        let f = last_failure(&s).unwrap();
        assert_eq!(
            (f.name.as_str(), f.reason),
            (s.jobs[2].name.as_str(), Some("DeadlineExceeded"))
        );
        assert!(
            f.why
                .ends_with("it ran longer than its activeDeadlineSeconds (1h0m), so Kubernetes ended it, and it counts as a failure whatever the runner reported"),
            "{}",
            f.why
        );
        // A failure without a deadline says it failed, and a later success of its op clears it.
        s.jobs.remove(2);
        assert_eq!(
            last_failure(&s).map(|f| f.why),
            Some(format!("apply Job {} failed", s.jobs[2].name))
        );
        s.jobs.insert(0, rec(Op::Apply, 6, Some(Outcome::Succeeded)));
        assert_eq!(last_failure(&s), None);
    }

    #[test]
    fn a_running_jobs_deadline_is_counted_from_its_start_not_its_creation() {
        use crate::record::tests::rec;
        let mut s = crate::requests::tests::base();
        let mut r = rec(Op::Apply, 1, None);
        r.started = r.created.map(|t| t + k8s_openapi::jiff::SignedDuration::from_secs(20));
        r.active_deadline_seconds = Some(600);
        s.jobs = vec![r.clone()];
        let running = running_job(&s).unwrap();
        assert_eq!(running.since, r.started);
        assert_eq!(
            running.deadline,
            r.started.map(|t| t + k8s_openapi::jiff::SignedDuration::from_secs(600))
        );
        // Not started yet: counted from its creation; no deadline given: none.
        s.jobs[0].started = None;
        s.jobs[0].active_deadline_seconds = None;
        let running = running_job(&s).unwrap();
        assert_eq!((running.since, running.deadline), (r.created, None));
        s.jobs[0].outcome = Some(crate::Outcome::Succeeded);
        assert_eq!(running_job(&s), None);
    }

    #[test]
    fn an_input_over_the_size_limit_is_refused_without_reading_it_all() {
        let text = "x".repeat(1000);
        let err = read_bounded("big.yaml", text.as_bytes(), 999).unwrap_err();
        assert!(matches!(err, ExplainError::TooLarge { .. }), "{err}");
        assert_eq!(read_bounded("ok.yaml", text.as_bytes(), 1000).unwrap().len(), 1000);
    }
}

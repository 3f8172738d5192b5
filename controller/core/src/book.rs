//! Booking, as data (docs/rules.md): what a finished Job changes in the status, the durable
//! record and the object's Cluster API fields, and the note of its Event. Every finished Job
//! without `captf.io/outcome` is booked once, oldest first; the controller's `runtime/book.rs`
//! makes the writes, and the annotation write with the Job's resourceVersion is the "once".

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use captf_shared::types::{
    CaptfObject, MachineAddress, MachinePoolInstance, NamedFailureDomain, PendingPlan, TerraformStatus,
};
use captf_shared::{Kind, Op, keys, names};

use crate::Outcome;
use crate::ident::Ident;
use crate::interrupted;
use crate::record::JobRecord;

/// Output names the controller reads after a successful apply (documented in the report and
/// the chart README): a TerraformCluster's endpoint from `control_plane_endpoint`
/// (`{"host","port"}` or `"host:port"`), else from `host` and `port`; a TerraformMachine's
/// `provider_id` and `addresses` (`[{"type","address"}]`); a TerraformMachinePool's
/// `provider_id_list`; a TerraformCluster's `failure_domains` (see [`failure_domains_from_output`]).
pub const OUTPUT_CONTROL_PLANE_ENDPOINT: &str = "control_plane_endpoint";
pub const OUTPUT_HOST: &str = "host";
pub const OUTPUT_PORT: &str = "port";
pub const OUTPUT_PROVIDER_ID: &str = "provider_id";
pub const OUTPUT_PROVIDER_ID_LIST: &str = "provider_id_list";
pub const OUTPUT_ADDRESSES: &str = "addresses";
pub const OUTPUT_FAILURE_DOMAINS: &str = "failure_domains";
/// A TerraformMachinePool's machines, when the module gives more than their provider IDs
/// (see [`instances_from_outputs`]).
pub const OUTPUT_INSTANCES: &str = "instances";
/// The bound on `status.instances`.
pub const MAX_INSTANCES: usize = 1000;
/// The Cluster API contract's bound on `status.failureDomains`.
pub const MAX_FAILURE_DOMAINS: usize = 100;

/// A TerraformCluster's failure domains from its module's `failure_domains` output (PURE): a list
/// `[{"name", "control_plane" | "controlPlane", "attributes"}]` or a map
/// `{"<name>": {"control_plane" | "controlPlane", "attributes"}}`, in the v1beta2 list form
/// Cluster API reads from `status.failureDomains` (sorted by name, names unique, at most 100).
/// `None` when the output is absent or not of either shape.
pub fn failure_domains_from_output(value: &Value) -> Option<Vec<NamedFailureDomain>> {
    fn one(name: &str, v: &Value) -> Option<NamedFailureDomain> {
        if name.is_empty() {
            return None;
        }
        let control_plane = v
            .get("control_plane")
            .or_else(|| v.get("controlPlane"))
            .map_or(Some(false), Value::as_bool)?;
        let attributes = match v.get("attributes") {
            None | Some(Value::Null) => None,
            Some(a) => Some(serde_json::from_value::<BTreeMap<String, String>>(a.clone()).ok()?),
        };
        Some(NamedFailureDomain {
            name: name.to_string(),
            control_plane,
            attributes,
        })
    }
    let mut domains: BTreeMap<String, NamedFailureDomain> = BTreeMap::new();
    match value {
        Value::Array(items) => {
            for item in items {
                let d = one(item.get("name")?.as_str()?, item)?;
                domains.insert(d.name.clone(), d);
            }
        }
        Value::Object(map) => {
            for (name, v) in map {
                let d = one(name, v)?;
                domains.insert(d.name.clone(), d);
            }
        }
        _ => return None,
    }
    Some(domains.into_values().take(MAX_FAILURE_DOMAINS).collect())
}

/// The data keys of the runner's outputs Secret `captf-outputs-<suffix>` (runner/src/outputs.rs):
/// the raw `output -json` document, and the public outputs the runner masked.
pub use captf_shared::protocol::{OUTPUTS_KEY as OUTPUTS_SECRET_KEY, PUBLIC_OUTPUTS_KEY};
/// `status.outputs` holds at most this much JSON (docs/api.md).
pub const MAX_STATUS_OUTPUTS_BYTES: usize = 64 * 1024;

/// As many of `outputs` as fit in [`MAX_STATUS_OUTPUTS_BYTES`], in name order (PURE).
fn fitting(outputs: impl IntoIterator<Item = (String, Value)>) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let mut size = 2usize;
    for (name, value) in outputs {
        let len = name.len() + value.to_string().len() + 4;
        if size + len > MAX_STATUS_OUTPUTS_BYTES {
            continue;
        }
        size += len;
        out.insert(name, value);
    }
    out
}

/// The non-sensitive outputs of a `tofu output -json` document (`{"name": {"sensitive",
/// "value"}}`; an output without a `sensitive` flag counts as sensitive), by name, as many as
/// fit in [`MAX_STATUS_OUTPUTS_BYTES`], with every value of a sensitive output and every value
/// in `from_secrets` (the inputs' values that came from Secrets,
/// [`crate::inputs::secret_input_values`]) masked in them in each form it may take
/// ([`captf_shared::mask`]): a public output built from a secret (`postgres://app:<password>@host`)
/// never carries it into the status (PURE).
pub fn outputs_from_doc(doc: &Value, from_secrets: &[String]) -> BTreeMap<String, Value> {
    let secrets = secrets_of(doc, from_secrets);
    let entries = doc.as_object().into_iter().flatten();
    fitting(entries.filter(|(_, e)| !is_sensitive(e)).filter_map(|(name, e)| {
        let mut value = e.get("value")?.clone();
        captf_shared::mask::redact_json(&mut value, &secrets);
        Some((name.clone(), value))
    }))
}

/// The public outputs the controller puts in the status from the outputs Secret's data (PURE):
/// the runner's masked copy ([`PUBLIC_OUTPUTS_KEY`], masked like its result: every value from a
/// Secret) when there is one; else, from a runner that wrote none, the raw document read with
/// [`outputs_from_doc`]. Either way the values of sensitive outputs and `from_secrets` (the
/// inputs' values that came from Secrets) are masked in them. `None` when neither parses.
pub fn status_outputs(
    data: &BTreeMap<String, k8s_openapi::ByteString>,
    from_secrets: &[String],
) -> Option<BTreeMap<String, Value>> {
    let doc = data
        .get(OUTPUTS_SECRET_KEY)
        .and_then(|b| serde_json::from_slice::<Value>(&b.0).ok());
    if let Some(public) = data.get(PUBLIC_OUTPUTS_KEY)
        && let Ok(map) = serde_json::from_slice::<BTreeMap<String, Value>>(&public.0)
    {
        // Masked again here, for a runner that knew fewer secrets than the document holds.
        let secrets = secrets_of(doc.as_ref().unwrap_or(&Value::Null), from_secrets);
        let masked = map.into_iter().map(|(k, mut v)| {
            captf_shared::mask::redact_json(&mut v, &secrets);
            (k, v)
        });
        return Some(fitting(masked));
    }
    Some(outputs_from_doc(&doc?, from_secrets))
}

/// Every form of every value of the document's sensitive outputs and of `from_secrets` (PURE).
fn secrets_of(doc: &Value, from_secrets: &[String]) -> Vec<String> {
    let sensitive = doc
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, e)| is_sensitive(e))
        .filter_map(|(_, e)| e.get("value"))
        .flat_map(captf_shared::mask::value_strings);
    captf_shared::mask::mask_list(sensitive.chain(from_secrets.iter().cloned()))
}

/// Whether an `output -json` entry is sensitive (no flag: it is).
fn is_sensitive(entry: &Value) -> bool {
    entry.get("sensitive").and_then(Value::as_bool).unwrap_or(true)
}

/// What booking one Job changes in the status (PURE). `applied` is the inputs hash of a
/// successful apply (from the inputs Secret the Job mounted).
pub fn apply_to_status(st: &mut TerraformStatus, rec: &JobRecord, outcome: Outcome, now: Timestamp) {
    let when = rec.finished.or(rec.created).unwrap_or(now);
    let counts = st.consecutive_failures.get_or_insert_with(Default::default);
    match outcome {
        Outcome::Succeeded => *counts.get_mut(rec.op) = 0,
        o if o.counts_as_failure() => *counts.get_mut(rec.op) = counts.get(rec.op).saturating_add(1),
        _ => {}
    }
    if outcome == Outcome::Succeeded {
        st.last_success_time
            .get_or_insert_with(BTreeMap::new)
            .insert(rec.op.as_str().to_string(), Time(when));
    }
    let result = rec.result.as_ref();
    match (rec.op, outcome) {
        (Op::Apply, Outcome::Succeeded) => {
            st.pending_plan = None;
            if let Some(outputs) = result.and_then(|r| r.outputs.clone()) {
                st.outputs = Some(outputs);
            }
            publish_outputs_to_cluster_api(st);
        }
        // A refresh reads the outputs of the state as it is: after a move (which copies no
        // status) it is what rebuilds the Cluster API fields, so new Machines get failure
        // domains again without an apply.
        (Op::Refresh, Outcome::Succeeded) => {
            if let Some(outputs) = result.and_then(|r| r.outputs.clone()) {
                st.outputs = Some(outputs);
            }
            publish_outputs_to_cluster_api(st);
        }
        (Op::Drift, Outcome::Succeeded) => st.last_drift_check_time = Some(Time(when)),
        (Op::Apply, Outcome::Blocked | Outcome::PlanChanged) => {
            let summary = result.and_then(|r| r.summary).unwrap_or_default();
            st.pending_plan = Some(PendingPlan {
                hash: result.and_then(|r| r.plan_hash.clone()).unwrap_or_default(),
                add: summary.add,
                change: summary.change,
                destroy: summary.destroy,
                replace: summary.replace,
                job: rec.name.clone(),
            });
        }
        _ => {}
    }
}

/// A machine pool's instances from its outputs (PURE): the `instances` output
/// (`[{"name", "provider_id", "addresses", "ready"}]`, `ready` defaulting to true), else one
/// instance per entry of `provider_id_list`, named by the provider ID's last path segment and
/// ready (it exists after a successful apply). At most [`MAX_INSTANCES`]; `None` when neither
/// output is there or has its shape.
pub fn instances_from_outputs(outputs: &BTreeMap<String, Value>) -> Option<Vec<MachinePoolInstance>> {
    let named = |id: &str| id.rsplit('/').find(|s| !s.is_empty()).unwrap_or(id).to_string();
    if let Some(items) = outputs.get(OUTPUT_INSTANCES).and_then(Value::as_array) {
        let instances: Option<Vec<MachinePoolInstance>> = items
            .iter()
            .take(MAX_INSTANCES)
            .map(|i| {
                let provider_id = i.get("provider_id").and_then(Value::as_str).map(str::to_string);
                let instance_name = i
                    .get("name")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .or_else(|| provider_id.as_deref().map(named))?;
                Some(MachinePoolInstance {
                    instance_name,
                    provider_id,
                    addresses: i
                        .get("addresses")
                        .and_then(|a| serde_json::from_value::<Vec<MachineAddress>>(a.clone()).ok()),
                    ready: i.get("ready").and_then(Value::as_bool).unwrap_or(true),
                })
            })
            .collect();
        if instances.is_some() {
            return instances;
        }
    }
    let ids = outputs.get(OUTPUT_PROVIDER_ID_LIST)?.as_array()?;
    ids.iter()
        .take(MAX_INSTANCES)
        .map(|id| {
            let id = id.as_str()?;
            Some(MachinePoolInstance {
                instance_name: named(id),
                provider_id: Some(id.to_string()),
                addresses: None,
                ready: true,
            })
        })
        .collect()
}

/// The status fields Cluster API reads that come from the outputs (PURE): a machine's
/// `addresses` and a cluster's `failureDomains`, from the `addresses` and `failure_domains`
/// outputs. An output that is absent or has the wrong shape leaves its field as it was.
pub fn publish_outputs_to_cluster_api(st: &mut TerraformStatus) {
    if let Some(addrs) = st.outputs.as_ref().and_then(|o| o.get(OUTPUT_ADDRESSES)).cloned()
        && let Ok(addrs) = serde_json::from_value::<Vec<MachineAddress>>(addrs)
    {
        st.addresses = Some(addrs);
    }
    if let Some(domains) = st
        .outputs
        .as_ref()
        .and_then(|o| o.get(OUTPUT_FAILURE_DOMAINS))
        .and_then(failure_domains_from_output)
    {
        st.failure_domains = Some(domains);
    }
}

/// The durable annotations booking one Job writes on the inputs Secret (PURE). `applied_hash`
/// is the hash of the inputs now in the inputs Secret; it is recorded only when it is the one
/// the Job ran with (its `captf.io/inputs-hash` label is a prefix of it, or it has no label), so
/// a replay after a newer Job rewrote the Secret never marks inputs applied that were not.
pub fn durable_changes(
    kind: Kind,
    namespace: &str,
    name: &str,
    rec: &JobRecord,
    outcome: Outcome,
    applied_hash: Option<&str>,
    recorded_interrupted: Option<&str>,
) -> BTreeMap<&'static str, Option<String>> {
    let mut out = BTreeMap::new();
    let when = rec.finished.or(rec.created);
    match (rec.op, outcome) {
        (Op::Apply, Outcome::Succeeded) => {
            if let Some(h) = applied_hash
                && rec.inputs_hash.as_deref().is_none_or(|ran| h.starts_with(ran))
            {
                out.insert(keys::ANNOTATION_APPLIED_INPUTS_HASH, Some(h.to_string()));
            }
            let recorded_seq = recorded_interrupted
                .filter(|j| !j.is_empty())
                .map(|j| names::parse_job_name(kind, namespace, name, j).map_or(0, |(_, s)| s));
            if recorded_seq.is_some_and(|s| rec.seq > s) {
                out.insert(keys::ANNOTATION_INTERRUPTED_APPLY, None);
            }
        }
        (Op::Drift, Outcome::Succeeded) => {
            if let Some(t) = when {
                out.insert(keys::ANNOTATION_LAST_DRIFT_CHECK, Some(t.to_string()));
            }
        }
        _ => {}
    }
    out
}

/// The Cluster API fields of the spec a successful apply fills from outputs, when unset (PURE).
pub fn capi_spec_patch(object: &CaptfObject, outputs: &BTreeMap<String, Value>) -> Option<Value> {
    match object {
        CaptfObject::Cluster(c) => {
            if c.spec
                .control_plane_endpoint
                .as_ref()
                .is_some_and(|e| !e.host.is_empty())
            {
                return None;
            }
            let (host, port) = endpoint_from_outputs(outputs)?;
            Some(json!({"spec": {"controlPlaneEndpoint": {"host": host, "port": port}}}))
        }
        CaptfObject::Machine(m) => {
            if m.spec.provider_id.as_deref().is_some_and(|p| !p.is_empty()) {
                return None;
            }
            let id = outputs.get(OUTPUT_PROVIDER_ID)?.as_str()?;
            Some(json!({"spec": {"providerID": id}}))
        }
        CaptfObject::MachinePool(p) => {
            let list: Vec<String> = outputs
                .get(OUTPUT_PROVIDER_ID_LIST)?
                .as_array()?
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            (p.spec.provider_id_list.as_ref() != Some(&list)).then(|| json!({"spec": {"providerIDList": list}}))
        }
        CaptfObject::MachineTemplate(_) | CaptfObject::ClusterTemplate(_) | CaptfObject::MachinePoolTemplate(_) => None,
    }
}

fn endpoint_from_outputs(o: &BTreeMap<String, Value>) -> Option<(String, i64)> {
    fn port_of(v: &Value) -> Option<i64> {
        v.as_i64().or_else(|| v.as_str()?.parse().ok())
    }
    match o.get(OUTPUT_CONTROL_PLANE_ENDPOINT) {
        Some(Value::Object(m)) => Some((m.get("host")?.as_str()?.to_string(), port_of(m.get("port")?)?)),
        Some(Value::String(s)) => {
            let (h, p) = s.rsplit_once(':')?;
            Some((h.to_string(), p.parse().ok()?))
        }
        _ => Some((o.get(OUTPUT_HOST)?.as_str()?.to_string(), port_of(o.get(OUTPUT_PORT)?)?)),
    }
}

/// The retry number of a Job: its `captf.io/attempt` label.
pub fn attempt_of(job: &Job) -> u32 {
    job.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::LABEL_ATTEMPT))
        .and_then(|a| a.parse().ok())
        .unwrap_or(1)
}

/// The Event booking a finished Job emits, once per Job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BookingEvent {
    pub reason: &'static str,
    pub warning: bool,
    pub note: String,
}

/// ` (2 to add, 1 to change, 0 to destroy, 0 to replace)` of a plan, or nothing.
fn plan_counts(rec: &JobRecord) -> String {
    rec.result
        .as_ref()
        .and_then(|r| r.summary.as_ref())
        .map(|s| {
            format!(
                " ({} to add, {} to change, {} to destroy, {} to replace)",
                s.add, s.change, s.destroy, s.replace
            )
        })
        .unwrap_or_default()
}

/// The note of the `PlanApproved` Event of an apply Job that starts with an approved plan: which
/// plan, by whom (`None` for any other Job).
pub fn approval_note(start: &crate::decide::Start, job: &str) -> Option<String> {
    let hash = start.approved_plan.as_deref()?;
    let by = start.approved_by.as_deref().unwrap_or("an unrecorded user");
    Some(format!("Job {job} applies the plan {hash} approved by {by}"))
}

/// The note of the `BackoffSkipped` Event of a Job that starts before its backoff ended because
/// a person asked (`captf.io/reconcile-now`): until when it would have waited, who asked, why;
/// or because it applies a plan a person approved after the failures (`decide::approval_skips_backoff`).
pub fn backoff_skipped_note(start: &crate::decide::Start, s: &crate::snapshot::Snapshot, job: &str) -> Option<String> {
    let until = start.skipped_backoff?;
    let asked = s.reconcile_requested.is_some_and(|asked| {
        crate::decide::backoff_of(s, start.op)
            .newest_failure
            .is_some_and(|failed| asked >= failed)
    });
    if !asked && let Some(plan) = start.approved_plan.as_deref() {
        let by = start.approved_by.as_deref().unwrap_or("an unrecorded user");
        return Some(format!(
            "Job {job} starts now instead of at {until}, the end of its backoff: it applies the plan {plan}, which {by} approved after those failures"
        ));
    }
    let by = s.reconcile_by.as_deref().unwrap_or("an unrecorded user");
    let why = s
        .reconcile_reason
        .as_deref()
        .map(|w| format!(": {w}"))
        .unwrap_or_default();
    let asked = s.reconcile_requested.map(|t| format!(" at {t}")).unwrap_or_default();
    Some(format!(
        "Job {job} starts now instead of at {until}, the end of its backoff: {by} asked{asked}{why}"
    ))
}

/// The Event of a booked Job (docs/operating.md): every outcome a person may want to know of,
/// a success included; `None` for a drift check that found nothing (no transition).
pub fn booking_event(rec: &JobRecord, outcome: Outcome) -> Option<BookingEvent> {
    use captf_shared::events::reason;
    let job = &rec.name;
    let (reason, warning, note) = match outcome {
        Outcome::Failed | Outcome::Deadline | Outcome::Interrupted | Outcome::Blocked | Outcome::PolicyDenied => {
            let r = outcome.event_reason()?;
            (r.as_str(), outcome != Outcome::Interrupted, event_note(rec, outcome))
        }
        Outcome::PlanChanged => (
            reason::PLAN_CHANGED,
            true,
            format!(
                "Job {job} applied nothing: its plan is not the approved plan {}; approve the new plan",
                rec.approved_plan.as_deref().unwrap_or("")
            ),
        ),
        Outcome::Succeeded => match rec.op {
            Op::Apply if rec.drift_remediation => (
                reason::DRIFT_REMEDIATED,
                false,
                format!("Job {job} remediated the drift{}", plan_counts(rec)),
            ),
            Op::Apply => {
                let by = rec
                    .approved_by
                    .as_deref()
                    .map(|u| format!(" (approved by {u})"))
                    .unwrap_or_default();
                let approved = rec
                    .approved_plan
                    .as_deref()
                    .map(|h| format!(", the approved plan {h}{by}"))
                    .unwrap_or_default();
                (
                    reason::APPLIED,
                    false,
                    format!("Job {job} applied the inputs{}{approved}", plan_counts(rec)),
                )
            }
            Op::Drift if rec.result.as_ref().and_then(|r| r.drift) == Some(true) => (
                reason::DRIFT_FOUND,
                true,
                format!("Job {job} found drift{}", plan_counts(rec)),
            ),
            Op::Drift => return None,
            Op::Refresh => (
                reason::REFRESHED,
                false,
                format!("Job {job} refreshed the state and outputs"),
            ),
            Op::Destroy => (
                reason::DESTROYED,
                false,
                format!("Job {job} destroyed the infrastructure"),
            ),
        },
    };
    let warnings = rec
        .result
        .as_ref()
        .map(|r| r.policy_warnings.as_slice())
        .unwrap_or_default();
    let note = if warnings.is_empty() {
        note
    } else {
        format!("{note}; the plan's policies warned: {}", warnings.join("; "))
    };
    Some(BookingEvent { reason, warning, note })
}

/// The event of an outcome, with a one-line note.
pub fn event_note(rec: &JobRecord, outcome: Outcome) -> String {
    let result = rec.result.as_ref();
    let phase = result.map(|r| r.phase.as_str()).unwrap_or("unknown");
    let msg = result.map(|r| r.message.as_str()).unwrap_or("");
    match outcome {
        Outcome::Deadline => format!("Job {} exceeded its activeDeadlineSeconds (phase {phase})", rec.name),
        Outcome::Interrupted => format!(
            "Job {} was interrupted (phase {phase}); not counted as a failure",
            rec.name
        ),
        Outcome::Blocked => format!(
            "Job {}: the plan waits for approval ({msg}); approve plan {} with captf.io/approve-plan",
            rec.name,
            result.and_then(|r| r.plan_hash.as_deref()).unwrap_or("")
        ),
        Outcome::PolicyDenied => format!("Job {} applied nothing: {msg}", rec.name),
        _ => format!("Job {} failed in phase {phase}: {msg}", rec.name),
    }
}

/// Whether the interrupted-apply record is still pending after this history (for the status).
pub fn interrupted_pending(id: &Ident, recorded: Option<&str>, records: &[JobRecord]) -> bool {
    interrupted::interrupted_apply_pending(id.kind, &id.namespace, &id.name, recorded, records)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::record::{self, Accounting};
    use captf_shared::protocol::{Phase, PlanSummary, RunResult, RunnerResult};
    use captf_shared::types::{ApiEndpoint, TerraformCluster, TerraformClusterSpec};

    fn rec(op: Op, seq: u32, result: Option<RunnerResult>) -> JobRecord {
        JobRecord {
            name: names::job_name(Kind::TerraformCluster, "default", "prod-eu", op, seq),
            op,
            seq,
            created: Some(Timestamp::from_second(1_000).unwrap()),
            started: None,
            active_deadline_seconds: None,
            finished: Some(Timestamp::from_second(1_060).unwrap()),
            outcome: None,
            booked: false,
            accounted: false,
            drift_remediation: false,
            approved_plan: None,
            approved_by: None,
            force_unlock_id: None,
            inputs_hash: None,
            deleting: false,
            result,
        }
    }

    #[test]
    fn failures_count_up_and_one_success_resets_the_op() {
        let mut st = TerraformStatus::default();
        let now = Timestamp::from_second(2_000).unwrap();
        apply_to_status(&mut st, &rec(Op::Apply, 1, None), Outcome::Failed, now);
        apply_to_status(&mut st, &rec(Op::Apply, 2, None), Outcome::Deadline, now);
        apply_to_status(&mut st, &rec(Op::Drift, 3, None), Outcome::Failed, now);
        apply_to_status(&mut st, &rec(Op::Apply, 4, None), Outcome::Interrupted, now);
        let c = st.consecutive_failures.unwrap();
        assert_eq!((c.apply, c.drift), (2, 1));
        apply_to_status(&mut st, &rec(Op::Apply, 5, None), Outcome::Succeeded, now);
        let c = st.consecutive_failures.unwrap();
        assert_eq!((c.apply, c.drift), (0, 1));
        assert_eq!(
            st.last_success_time.unwrap()["apply"].0,
            Timestamp::from_second(1_060).unwrap()
        );
    }

    #[test]
    fn every_booked_transition_has_its_event_and_a_check_that_found_nothing_has_none() {
        use captf_shared::events::reason;
        let summary = PlanSummary {
            add: 2,
            change: 1,
            destroy: 0,
            replace: 0,
        };
        let ok = |op, drift: Option<bool>| {
            let mut r = RunnerResult::new(RunResult::Succeeded, Phase::Apply, "");
            r.summary = Some(summary);
            r.drift = drift;
            rec(op, 3, Some(r))
        };
        let of = |rec: &JobRecord, o| booking_event(rec, o).map(|e| (e.reason, e.warning));
        assert_eq!(
            of(&ok(Op::Apply, None), Outcome::Succeeded),
            Some((reason::APPLIED, false))
        );
        let e = booking_event(&ok(Op::Apply, None), Outcome::Succeeded).unwrap();
        assert!(
            e.note
                .ends_with("applied the inputs (2 to add, 1 to change, 0 to destroy, 0 to replace)"),
            "{}",
            e.note
        );
        let mut remedy = ok(Op::Apply, None);
        remedy.drift_remediation = true;
        assert_eq!(of(&remedy, Outcome::Succeeded), Some((reason::DRIFT_REMEDIATED, false)));
        let mut approved = ok(Op::Apply, None);
        approved.approved_plan = Some("h1".into());
        let e = booking_event(&approved, Outcome::Succeeded).unwrap();
        assert!(e.note.ends_with(", the approved plan h1"), "{}", e.note);
        approved.approved_by = Some("alice@example.com".into());
        let e = booking_event(&approved, Outcome::Succeeded).unwrap();
        assert!(
            e.note
                .ends_with(", the approved plan h1 (approved by alice@example.com)"),
            "{}",
            e.note
        );
        assert_eq!(
            of(&ok(Op::Drift, Some(true)), Outcome::Succeeded),
            Some((reason::DRIFT_FOUND, true))
        );
        assert_eq!(of(&ok(Op::Drift, Some(false)), Outcome::Succeeded), None);
        assert_eq!(
            of(&ok(Op::Refresh, None), Outcome::Succeeded),
            Some((reason::REFRESHED, false))
        );
        assert_eq!(
            of(&ok(Op::Destroy, None), Outcome::Succeeded),
            Some((reason::DESTROYED, false))
        );
        let failed = rec(
            Op::Apply,
            4,
            Some(RunnerResult::new(RunResult::Failed, Phase::Apply, "boom")),
        );
        assert_eq!(of(&failed, Outcome::Failed), Some((reason::JOB_FAILED, true)));
        assert_eq!(
            of(&failed, Outcome::Deadline),
            Some((reason::JOB_DEADLINE_EXCEEDED, true))
        );
        assert_eq!(
            of(&failed, Outcome::Interrupted),
            Some((reason::JOB_INTERRUPTED, false))
        );
        assert_eq!(
            of(&failed, Outcome::Blocked),
            Some((reason::DESTRUCTIVE_PLAN_BLOCKED, true))
        );
        assert_eq!(of(&approved, Outcome::PlanChanged), Some((reason::PLAN_CHANGED, true)));
    }

    #[test]
    fn a_blocked_apply_sets_the_pending_plan_and_a_success_clears_it() {
        let mut r = RunnerResult::new(RunResult::Blocked, Phase::Guard, "");
        r.plan_hash = Some("h1".into());
        r.summary = Some(PlanSummary {
            add: 1,
            change: 0,
            destroy: 2,
            replace: 1,
        });
        let mut st = TerraformStatus::default();
        let now = Timestamp::from_second(2_000).unwrap();
        apply_to_status(&mut st, &rec(Op::Apply, 1, Some(r)), Outcome::Blocked, now);
        let p = st.pending_plan.clone().unwrap();
        assert_eq!((p.hash.as_str(), p.destroy, p.replace), ("h1", 2, 1));
        assert_eq!(st.consecutive_failures.unwrap().apply, 0);
        apply_to_status(&mut st, &rec(Op::Apply, 2, None), Outcome::Succeeded, now);
        assert_eq!(st.pending_plan, None);
    }

    #[test]
    fn a_successful_apply_records_the_hash_and_clears_an_older_interrupted_apply() {
        let r = rec(Op::Apply, 5, None);
        let old = names::job_name(Kind::TerraformCluster, "default", "prod-eu", Op::Apply, 4);
        let d = durable_changes(
            Kind::TerraformCluster,
            "default",
            "prod-eu",
            &r,
            Outcome::Succeeded,
            Some("abc"),
            Some(&old),
        );
        assert_eq!(d[keys::ANNOTATION_APPLIED_INPUTS_HASH].as_deref(), Some("abc"));
        assert_eq!(d[keys::ANNOTATION_INTERRUPTED_APPLY], None);
        let newer = names::job_name(Kind::TerraformCluster, "default", "prod-eu", Op::Apply, 6);
        let d = durable_changes(
            Kind::TerraformCluster,
            "default",
            "prod-eu",
            &r,
            Outcome::Succeeded,
            Some("abc"),
            Some(&newer),
        );
        assert!(!d.contains_key(keys::ANNOTATION_INTERRUPTED_APPLY));
        let d = durable_changes(
            Kind::TerraformCluster,
            "default",
            "prod-eu",
            &rec(Op::Drift, 7, None),
            Outcome::Succeeded,
            None,
            None,
        );
        assert_eq!(
            d[keys::ANNOTATION_LAST_DRIFT_CHECK].as_deref(),
            Some("1970-01-01T00:17:40Z")
        );
    }

    #[test]
    fn a_replayed_apply_never_records_inputs_it_did_not_run_with() {
        let mut r = rec(Op::Apply, 5, None);
        r.inputs_hash = Some("abcdef0123456789".into());
        let changes = |applied: &str| {
            durable_changes(
                Kind::TerraformCluster,
                "default",
                "prod-eu",
                &r,
                Outcome::Succeeded,
                Some(applied),
                None,
            )
        };
        let ran = format!("abcdef0123456789{}", "0".repeat(48));
        assert_eq!(
            changes(&ran)[keys::ANNOTATION_APPLIED_INPUTS_HASH].as_deref(),
            Some(ran.as_str())
        );
        // A newer Job rewrote the inputs Secret with other inputs before the replay.
        let newer = format!("fedcba9876543210{}", "0".repeat(48));
        assert!(!changes(&newer).contains_key(keys::ANNOTATION_APPLIED_INPUTS_HASH));
    }

    /// One bookkeeping pass over `records` as `book_all` runs it, without the API: Book steps
    /// count one event each; the status is kept only when `write_lands`.
    fn model_pass(status: &mut TerraformStatus, records: &mut [JobRecord], events: &mut u32, write_lands: bool) {
        let now = Timestamp::from_second(9_000).unwrap();
        let mut st = status.clone();
        let baseline = record::watermark_baseline(records, record::status_watermark(&st));
        record::mark_accounted(records, baseline);
        let mut watermark = baseline;
        for (i, step) in record::accounting_plan(records, baseline) {
            let outcome = records[i].outcome.unwrap();
            if step == Accounting::Book {
                *events += 1;
            }
            apply_to_status(&mut st, &records[i], outcome, now);
            records[i].booked = true;
            watermark = record::watermark_after(watermark, [records[i].seq]);
        }
        st.last_booked_job_seq = Some(watermark);
        if write_lands {
            *status = st;
        }
    }

    proptest::proptest! {
        #[test]
        fn lost_status_writes_are_replayed_to_the_same_counts_with_each_event_once(
            jobs in proptest::collection::vec((0usize..6, 0usize..4, proptest::bool::ANY), 1..15),
        ) {
            // Jobs finish one at a time; after each a pass runs, and its status write is lost
            // when the flag says so. A last pass lands. The reference loses nothing.
            let mut lossy = (TerraformStatus::default(), Vec::<JobRecord>::new(), 0u32);
            let mut reference = (TerraformStatus::default(), Vec::<JobRecord>::new(), 0u32);
            model_pass(&mut lossy.0, &mut lossy.1, &mut lossy.2, true);
            model_pass(&mut reference.0, &mut reference.1, &mut reference.2, true);
            for (k, (o, op, lost)) in jobs.iter().enumerate() {
                let mut r = rec(Op::ALL[*op], k as u32 + 1, None);
                r.outcome = Some(Outcome::ALL[*o]);
                r.finished = Some(Timestamp::from_second(1_000 + k as i64 * 60).unwrap());
                for side in [&mut lossy, &mut reference] {
                    side.1.insert(0, r.clone());
                }
                model_pass(&mut lossy.0, &mut lossy.1, &mut lossy.2, !lost);
                model_pass(&mut reference.0, &mut reference.1, &mut reference.2, true);
            }
            model_pass(&mut lossy.0, &mut lossy.1, &mut lossy.2, true);
            proptest::prop_assert_eq!(&lossy.0, &reference.0);
            proptest::prop_assert_eq!(lossy.2, jobs.len() as u32, "one event per Job");
            proptest::prop_assert_eq!(lossy.0.last_booked_job_seq, Some(jobs.len() as u32));
        }
    }

    #[test]
    fn outputs_from_the_secret_keep_only_non_sensitive_values_that_fit() {
        let doc = json!({
            "host": {"sensitive": false, "type": "string", "value": "10.0.0.1"},
            "kubeconfig": {"sensitive": true, "type": "string", "value": "secret!"},
            "unflagged": {"type": "string", "value": "x"},
            "huge": {"sensitive": false, "type": "string", "value": "y".repeat(MAX_STATUS_OUTPUTS_BYTES)},
        });
        let o = outputs_from_doc(&doc, &[]);
        assert_eq!(o, BTreeMap::from([("host".to_string(), json!("10.0.0.1"))]));
    }

    #[test]
    fn a_public_output_built_from_a_sensitive_one_reaches_the_status_masked() {
        let doc = json!({
            "db_password": {"sensitive": true, "type": "string", "value": "Tr0ub4dor&3-horse"},
            "db_url": {"sensitive": false, "type": "string",
                "value": "postgres://app:Tr0ub4dor&3-horse@db.internal:5432/app"},
            "key": {"sensitive": true, "type": "string", "value": "-----BEGIN KEY-----\nAAAAB3NzaC1yc2EAAAADAQAB\n-----END KEY-----\n"},
            "banner": {"sensitive": false, "type": ["list", "string"], "value": ["  AAAAB3NzaC1yc2EAAAADAQAB", "ok"]},
        });
        let o = outputs_from_doc(&doc, &[]);
        assert_eq!(o["db_url"], json!("postgres://app:***@db.internal:5432/app"));
        assert_eq!(o["banner"], json!(["  ***", "ok"]));
        assert!(!o.contains_key("db_password") && !o.contains_key("key"));
    }

    #[test]
    fn the_runners_masked_copy_is_what_reaches_the_status_and_the_raw_document_only_without_it() {
        use k8s_openapi::ByteString;
        let raw = json!({
            "password": {"sensitive": true, "type": "string", "value": "hunter2-hunter2"},
            "url": {"sensitive": false, "type": "string", "value": "https://u:from-a-secret-var@h/"},
            "echo": {"sensitive": false, "type": "string", "value": "pw=hunter2-hunter2"},
        });
        // The runner masked the value it knew from a Secret; the raw document still holds it.
        let public = json!({"url": "https://u:***@h/", "echo": "pw=hunter2-hunter2"});
        let data = BTreeMap::from([
            (OUTPUTS_SECRET_KEY.to_string(), ByteString(raw.to_string().into_bytes())),
            (
                PUBLIC_OUTPUTS_KEY.to_string(),
                ByteString(public.to_string().into_bytes()),
            ),
        ]);
        let o = status_outputs(&data, &[]).unwrap();
        assert_eq!(o["url"], json!("https://u:***@h/"));
        assert_eq!(
            o["echo"],
            json!("pw=***"),
            "sensitive outputs are masked in the copy too"
        );
        // An older runner wrote no copy: the raw document, sensitive outputs' values masked.
        let old = BTreeMap::from([(OUTPUTS_SECRET_KEY.to_string(), ByteString(raw.to_string().into_bytes()))]);
        let o = status_outputs(&old, &[]).unwrap();
        assert_eq!(o["echo"], json!("pw=***"));
        assert_eq!(status_outputs(&BTreeMap::new(), &[]), None);
    }

    #[test]
    fn a_secret_input_echoed_by_an_output_is_masked_without_public_outputs() {
        use captf_shared::inputs::{Inputs, ModuleRef};
        use captf_shared::types::TerraformSpec;
        use k8s_openapi::ByteString;
        // `password` came from a Secret (it is not in spec.variables); `region` is written in
        // the spec. A module echoes both in non-sensitive outputs, one of them base64-encoded.
        let spec = TerraformSpec {
            variables: Some(BTreeMap::from([("region".to_string(), json!("eu-west-1"))])),
            ..TerraformSpec::default()
        };
        let inputs = Inputs {
            state_encryption: None,
            public_variables: Default::default(),
            policies: Vec::new(),
            module: ModuleRef::default(),
            variables: BTreeMap::from([
                ("region".to_string(), json!("eu-west-1")),
                ("password".to_string(), json!("from-a-secret-var")),
            ]),
        };
        let from_secrets = crate::inputs::secret_input_values(&spec, &inputs);
        let raw = json!({
            "url": {"sensitive": false, "type": "string", "value": "https://u:from-a-secret-var@h/"},
            "whole": {"sensitive": false, "type": "string", "value": "from-a-secret-var"},
            "encoded": {"sensitive": false, "type": "string", "value": "ZnJvbS1hLXNlY3JldC12YXI="},
            "region": {"sensitive": false, "type": "string", "value": "eu-west-1"},
        });
        // A runner that wrote no masked copy: only the raw document is there.
        let data = BTreeMap::from([(OUTPUTS_SECRET_KEY.to_string(), ByteString(raw.to_string().into_bytes()))]);
        let o = status_outputs(&data, &from_secrets).unwrap();
        assert_eq!(o["url"], json!("https://u:***@h/"));
        assert_eq!(o["whole"], json!("***"));
        assert!(!o["encoded"].to_string().contains("ZnJvbS1hLXNlY3JldC12YXI"), "{o:?}");
        assert_eq!(o["region"], json!("eu-west-1"), "a value written in the spec stays");
    }

    proptest::proptest! {
        /// Whatever a public output wraps a value from a Secret in, the value never reaches the
        /// status through the raw document.
        #[test]
        fn no_secret_input_reaches_the_status_through_the_raw_document(
            secret in "[A-Za-z0-9:/@._-]{4,40}",
            before in "[ -~]{0,20}",
            after in "[ -~]{0,20}",
        ) {
            use k8s_openapi::ByteString;
            let raw = json!({"echo": {"sensitive": false, "type": "string", "value": format!("{before}{secret}{after}")}});
            let data = BTreeMap::from([(OUTPUTS_SECRET_KEY.to_string(), ByteString(raw.to_string().into_bytes()))]);
            let o = status_outputs(&data, std::slice::from_ref(&secret)).unwrap();
            let text = o["echo"].as_str().unwrap_or_default().to_string();
            proptest::prop_assert!(!text.contains(&secret), "{} left in {}", secret, text);
        }
    }

    #[test]
    fn failure_domains_come_from_the_output_as_the_v1beta2_list_in_either_shape() {
        let list = json!([
            {"name": "eu-west-1b", "control_plane": true, "attributes": {"zone": "b"}},
            {"name": "eu-west-1a", "controlPlane": false},
        ]);
        let map = json!({
            "eu-west-1a": {},
            "eu-west-1b": {"controlPlane": true, "attributes": {"zone": "b"}},
        });
        let want = vec![
            NamedFailureDomain {
                name: "eu-west-1a".into(),
                control_plane: false,
                attributes: None,
            },
            NamedFailureDomain {
                name: "eu-west-1b".into(),
                control_plane: true,
                attributes: Some([("zone".to_string(), "b".to_string())].into()),
            },
        ];
        assert_eq!(failure_domains_from_output(&list), Some(want.clone()));
        assert_eq!(failure_domains_from_output(&map), Some(want.clone()));
        // Published under the field the v1beta2 contract reads.
        let st = TerraformStatus {
            failure_domains: Some(want),
            ..Default::default()
        };
        let v = serde_json::to_value(&st).unwrap();
        assert_eq!(v["failureDomains"][1]["name"], "eu-west-1b");
        assert_eq!(v["failureDomains"][1]["controlPlane"], true);
        // Anything else is ignored rather than half-published.
        for bad in [
            json!("a,b"),
            json!([{"control_plane": true}]),
            json!({"a": {"controlPlane": "yes"}}),
            json!([{"name": ""}]),
        ] {
            assert_eq!(failure_domains_from_output(&bad), None, "{bad}");
        }
    }

    #[test]
    fn a_successful_apply_publishes_the_failure_domains_output() {
        let mut st = TerraformStatus {
            outputs: Some([(OUTPUT_FAILURE_DOMAINS.to_string(), json!({"a": {"controlPlane": true}}))].into()),
            ..Default::default()
        };
        apply_to_status(
            &mut st,
            &rec(Op::Apply, 1, None),
            Outcome::Succeeded,
            Timestamp::UNIX_EPOCH,
        );
        let domains = st.failure_domains.unwrap();
        assert_eq!(domains.len(), 1);
        assert!(domains[0].control_plane);
    }

    #[test]
    fn a_successful_refresh_rebuilds_the_cluster_api_fields_a_move_left_empty() {
        // What a move leaves in the target: no status. The refresh's outputs come back, and with
        // them the failure domains and the addresses.
        let outputs: BTreeMap<String, Value> = [
            (
                OUTPUT_FAILURE_DOMAINS.to_string(),
                json!({"eu-west-1a": {"controlPlane": true}}),
            ),
            (
                OUTPUT_ADDRESSES.to_string(),
                json!([{"type": "InternalIP", "address": "10.0.0.7"}]),
            ),
        ]
        .into();
        let mut result = RunnerResult::new(RunResult::Succeeded, Phase::Refresh, "");
        result.outputs = Some(outputs);
        let r = rec(Op::Refresh, 1, Some(result));
        let mut st = TerraformStatus::default();
        apply_to_status(&mut st, &r, Outcome::Succeeded, Timestamp::UNIX_EPOCH);
        let domains = st.failure_domains.expect("failure domains from the refresh");
        assert_eq!(domains[0].name, "eu-west-1a");
        assert!(domains[0].control_plane);
        let addrs = st.addresses.expect("addresses from the refresh");
        assert_eq!(addrs[0].address, "10.0.0.7");
        // A failed refresh touches none of them.
        let mut failed = TerraformStatus::default();
        apply_to_status(&mut failed, &r, Outcome::Failed, Timestamp::UNIX_EPOCH);
        assert_eq!((failed.failure_domains, failed.addresses), (None, None));
    }

    #[test]
    fn control_plane_endpoint_comes_from_outputs_only_when_unset() {
        let mut c = TerraformCluster::new("prod-eu", TerraformClusterSpec::default());
        let outputs: BTreeMap<String, Value> = [(
            "control_plane_endpoint".to_string(),
            json!({"host": "10.0.0.1", "port": 6443}),
        )]
        .into();
        let obj = CaptfObject::Cluster(c.clone());
        assert_eq!(
            capi_spec_patch(&obj, &outputs),
            Some(json!({"spec": {"controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443}}}))
        );
        let split: BTreeMap<String, Value> = [
            ("host".to_string(), json!("api.example")),
            ("port".to_string(), json!("443")),
        ]
        .into();
        assert_eq!(
            capi_spec_patch(&obj, &split),
            Some(json!({"spec": {"controlPlaneEndpoint": {"host": "api.example", "port": 443}}}))
        );
        c.spec.control_plane_endpoint = Some(ApiEndpoint {
            host: "x".into(),
            port: 1,
        });
        assert_eq!(capi_spec_patch(&CaptfObject::Cluster(c), &outputs), None);
    }

    #[test]
    fn an_apply_that_carries_an_approval_announces_the_plan_and_who_approved_it() {
        use crate::decide::Start;
        use crate::reason::Reason;
        let mut start = Start {
            op: Op::Apply,
            reason: Reason::InputsChanged,
            attempt: 1,
            drift_remediation: false,
            force_unlock_id: None,
            approved_plan: Some("h1".into()),
            approved_by: Some("alice@example.com".into()),
            skipped_backoff: None,
        };
        assert_eq!(
            approval_note(&start, "j-apply-2").as_deref(),
            Some("Job j-apply-2 applies the plan h1 approved by alice@example.com")
        );
        start.approved_by = None;
        assert!(
            approval_note(&start, "j")
                .unwrap_or_default()
                .ends_with("approved by an unrecorded user")
        );
        start.approved_plan = None;
        assert_eq!(approval_note(&start, "j"), None, "no approval, no event");
    }

    #[test]
    fn a_job_that_skips_its_backoff_says_until_when_it_would_have_waited_who_asked_and_why() {
        use crate::decide::Start;
        use crate::reason::Reason;
        let mut start = Start {
            op: Op::Apply,
            reason: Reason::InputsChanged,
            attempt: 4,
            drift_remediation: false,
            force_unlock_id: None,
            approved_plan: None,
            approved_by: None,
            skipped_backoff: Some("2026-01-01T00:10:00Z".parse().unwrap_or_else(|e| panic!("{e}"))),
        };
        let mut s = crate::requests::tests::base();
        s.reconcile_requested = Some("2026-01-01T00:01:00Z".parse().unwrap_or_else(|e| panic!("{e}")));
        s.reconcile_by = Some("alice@example.com".into());
        s.reconcile_reason = Some("quota raised".into());
        assert_eq!(
            backoff_skipped_note(&start, &s, "j-apply-4").as_deref(),
            Some(
                "Job j-apply-4 starts now instead of at 2026-01-01T00:10:00Z, the end of its backoff: alice@example.com asked at 2026-01-01T00:01:00Z: quota raised"
            )
        );
        // Skipped for an approval given after the failures, nobody asking to reconcile.
        s.reconcile_requested = None;
        start.approved_plan = Some("h1".into());
        start.approved_by = Some("bob@example.com".into());
        assert_eq!(
            backoff_skipped_note(&start, &s, "j-apply-4").as_deref(),
            Some(
                "Job j-apply-4 starts now instead of at 2026-01-01T00:10:00Z, the end of its backoff: it applies the plan h1, which bob@example.com approved after those failures"
            )
        );
        start.skipped_backoff = None;
        assert_eq!(backoff_skipped_note(&start, &s, "j"), None);
    }

    #[test]
    fn a_machine_pools_instances_come_from_its_instances_output_else_from_its_provider_ids() {
        let from_ids = BTreeMap::from([(
            OUTPUT_PROVIDER_ID_LIST.to_string(),
            json!(["captftest:///thing-pool-0", "aws:///eu-west-1a/i-0abc"]),
        )]);
        let got = instances_from_outputs(&from_ids).unwrap();
        assert_eq!(
            got.iter()
                .map(|i| (i.instance_name.as_str(), i.provider_id.as_deref(), i.ready))
                .collect::<Vec<_>>(),
            [
                ("thing-pool-0", Some("captftest:///thing-pool-0"), true),
                ("i-0abc", Some("aws:///eu-west-1a/i-0abc"), true),
            ]
        );
        let mut richer = from_ids.clone();
        richer.insert(
            OUTPUT_INSTANCES.to_string(),
            json!([{"name": "w-0", "provider_id": "p:///w-0", "ready": false,
                    "addresses": [{"type": "InternalIP", "address": "10.0.0.9"}]}]),
        );
        let got = instances_from_outputs(&richer).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].instance_name, "w-0");
        assert!(!got[0].ready);
        assert_eq!(got[0].addresses.as_ref().unwrap()[0].address, "10.0.0.9");
        // A malformed instances output falls back to the provider IDs; neither: none.
        let mut bad = from_ids.clone();
        bad.insert(OUTPUT_INSTANCES.to_string(), json!([{"ready": true}]));
        assert_eq!(instances_from_outputs(&bad).unwrap().len(), 2);
        assert_eq!(instances_from_outputs(&BTreeMap::new()), None);
        // Bounded.
        let many: Vec<String> = (0..MAX_INSTANCES + 5).map(|i| format!("p:///m-{i}")).collect();
        let big = BTreeMap::from([(OUTPUT_PROVIDER_ID_LIST.to_string(), json!(many))]);
        assert_eq!(instances_from_outputs(&big).unwrap().len(), MAX_INSTANCES);
    }
}

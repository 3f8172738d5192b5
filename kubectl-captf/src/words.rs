//! The controller's decisions in words (PURE): what happens next, when, and why.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use captf_core::decide::Decision;
use captf_core::explain::{Explanation, RunningJob, human, last_failure, running_job};
use captf_core::outcome::DEADLINE_EXCEEDED;
use captf_shared::keys;
use captf_shared::types::CaptfObject;

use crate::suspend::Pauses;
use captf_core::lock::LockState;
use captf_core::{Reason, Snapshot};
use captf_shared::Op;

/// Why, in a sentence, for each reason `decide` gives.
pub fn reason_words(r: Reason) -> &'static str {
    match r {
        Reason::InvalidSpec => "the spec is invalid; fix it as the Ready condition's message says",
        Reason::PolicyViolation => {
            "the spec chooses a runner image, service account or Secret read the controller's tenant policy does not allow"
        }
        Reason::ForbiddenReference => {
            "the spec names a Secret that is CAPTF's own (another object's state, inputs or outputs), which no spec may read"
        }
        Reason::NameConflict => {
            "an object under this object's names (its runner account, Secrets, Leases or a Job) belongs to another object and is never adopted"
        }
        Reason::ReleasedStateNotAdopted => {
            "state a deleted object of this name released (with what it kept) is under this object's names; it is used only when the object's captf.io/adopt-state annotation names that object's UID"
        }
        Reason::RunnerConfigUnavailable => {
            "the ConfigMap holding the runner's Terraform CLI configuration, or its key, is missing from the namespace"
        }
        Reason::Paused => "the object, or its Cluster API Cluster, is paused",
        Reason::JobActive => "a Job of the object is running; the next step is decided when it finishes",
        Reason::Deleting => "the object is being deleted and its infrastructure must be destroyed first",
        Reason::StateUnreadable => "the deletion is held: the Terraform state cannot be read",
        Reason::MembersExist => "the deletion is held: machine pools or machines of this cluster still exist",
        Reason::AwaitingApproval => {
            "the newest apply stopped on a plan the guard holds (one that deletes or replaces resources; under approval Always, any change), and waits for a person to approve it (or for new inputs)"
        }
        Reason::PolicyDenied => {
            "a policy on the plan denied the newest apply's plan (the condition names the rule, the resource and the message); it waits for new inputs, or for `kubectl captf reconcile` once the policy changed"
        }
        Reason::PlanChanged => {
            "the approved plan is not the plan the newest apply found; the new plan waits for approval (or for new inputs)"
        }
        Reason::InterruptedApply => "an apply Job disappeared while it ran; an apply of the current inputs is due",
        Reason::InputsChanged => "the inputs differ from the ones last applied",
        Reason::DriftRemediation => "the last drift check found drift and remediation is Auto",
        Reason::RemediationLimit => {
            "drift remediation failed as often as the failure limit allows; nothing more runs until a drift check succeeds"
        }
        Reason::RefreshRequested => "a refresh was requested (captf.io/refresh), or outputs are missing after an apply",
        Reason::DriftCheckDue => "a drift check is due",
        Reason::Idle => "nothing to do: the inputs are applied and no drift is pending",
        Reason::InputsUnresolved => {
            "the inputs cannot be resolved (a referenced Secret or ConfigMap is missing, or a TerraformMachine's Machine or bootstrap data is not there yet)"
        }
        Reason::ClusterInfrastructurePending => {
            "the first apply waits until the Cluster API Cluster says its infrastructure is provisioned"
        }
        Reason::ClusterBusy => "a Job of the owning TerraformCluster holds the cluster lease",
        Reason::MemberJobActive => "a machine pool or machine of this cluster has a Job running",
        Reason::Queued => {
            "the controller runs as many runner Jobs as its limits allow; the object waits for a runner slot in turn (the Ready message gives its place)"
        }
        Reason::DeletingBackoff
        | Reason::InterruptedApplyBackoff
        | Reason::InputsChangedBackoff
        | Reason::DriftRemediationBackoff
        | Reason::RefreshRequestedBackoff
        | Reason::DriftCheckDueBackoff => {
            "the op failed and waits out its backoff (1m, doubling with each failure in a row, at most 10m, and 10m once the failures in a row reach failedJobsHistoryLimit; once the cause is fixed, `kubectl captf reconcile` starts it now)"
        }
    }
}

/// What holds a Job back, naming the holder.
pub fn hold_words(r: Reason, s: &Snapshot) -> String {
    match r {
        Reason::ClusterBusy => format!(
            "the cluster's Job {} releases the cluster lease",
            s.holds.cluster_lease_holder.as_deref().unwrap_or("?")
        ),
        Reason::MemberJobActive => format!(
            "the member's Job {} finishes",
            s.holds.member_job_active.as_deref().unwrap_or("?")
        ),
        other => reason_words(other).to_string(),
    }
}

fn until(now: Timestamp, t: Timestamp) -> Duration {
    Duration::try_from(t.duration_since(now)).unwrap_or_default()
}

/// The time of the next step, for sorting: now for a start, the backoff's end, or the next look.
pub fn next_time(d: &Decision, now: Timestamp) -> Option<Timestamp> {
    match d {
        Decision::Start(_) | Decision::Finalize => Some(now),
        Decision::Wait(w) => w.not_before.or_else(|| {
            w.requeue_after
                .and_then(|r| k8s_openapi::jiff::SignedDuration::try_from(r).ok())
                .and_then(|r| now.checked_add(r).ok())
        }),
    }
}

/// When, in words: `now`, `at <t> (in 2m)`, `in 30s (looked at again)`, `on a change`.
pub fn when_words(d: &Decision, now: Timestamp) -> String {
    match d {
        Decision::Start(_) | Decision::Finalize => "now (the controller's next pass)".to_string(),
        Decision::Wait(w) => match (w.not_before, w.requeue_after) {
            (Some(nb), _) => format!("at {nb} (in {})", human(until(now, nb))),
            (None, Some(after)) if w.reason == Reason::Idle => {
                format!("next drift check in {}", human(after))
            }
            (None, Some(after)) => format!("looked at again in {}", human(after)),
            (None, None) if matches!(w.reason, Reason::AwaitingApproval | Reason::PlanChanged) => {
                "when a person approves the plan or the inputs change".to_string()
            }
            (None, None) if w.reason == Reason::JobActive => "when the running Job finishes".to_string(),
            (None, None) => "when the object changes".to_string(),
        },
    }
}

/// The next step, short: `start apply`, `apply after backoff`, `wait`, `finalize`.
pub fn next_short(d: &Decision) -> String {
    match d {
        Decision::Start(st) => format!("start {} ({})", st.op, st.reason),
        Decision::Wait(w) => match w.op {
            // The running Job's op is in the JOBS column and `kubectl get`'s OP column.
            _ if w.reason == Reason::JobActive => format!("wait ({})", w.reason),
            Some(op) if w.not_before.is_some() => format!("{op} after backoff ({})", w.reason),
            Some(op) => format!("{op} held ({})", w.reason),
            None => format!("wait ({})", w.reason),
        },
        Decision::Finalize => "remove the finalizer".to_string(),
    }
}

/// The next step in one sentence: what, when and why.
pub fn next_sentence(d: &Decision, s: &Snapshot, now: Timestamp) -> String {
    let why = match d {
        Decision::Start(st) => reason_words(st.reason).to_string(),
        Decision::Wait(w) if matches!(w.reason, Reason::ClusterBusy | Reason::MemberJobActive) => {
            format!("it waits until {}", hold_words(w.reason, s))
        }
        Decision::Wait(w) => reason_words(w.reason).to_string(),
        Decision::Finalize => "the destroy is done (or the deletion policy is Orphan)".to_string(),
    };
    format!("the controller will {}, {}: {why}.", next_short(d), when_words(d, now))
}

fn plural(n: u32, one: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

/// How long ago, in words.
pub fn age(now: Timestamp, t: Timestamp) -> String {
    format!("{} ago", human(until(t, now)))
}

/// Consecutive failures per op, `apply:2,drift:1`, or `0`.
pub fn failures(s: &Snapshot) -> String {
    let counts = s.status.consecutive_failures.unwrap_or_default();
    let parts: Vec<String> = Op::ALL
        .iter()
        .filter(|op| counts.get(**op) > 0)
        .map(|op| format!("{op}:{}", counts.get(*op)))
        .collect();
    if parts.is_empty() {
        "0".to_string()
    } else {
        parts.join(",")
    }
}

/// The newest success of any op.
pub fn last_success(s: &Snapshot) -> Option<(Op, Timestamp)> {
    Op::ALL
        .iter()
        .filter_map(|op| s.last_success(*op).map(|t| (*op, t)))
        .max_by_key(|(_, t)| *t)
}

/// The lock line: who holds it and what that means. `waited_on`: a lock someone else holds
/// while a Job of the object runs (read for a person; see `LiveRead::waited_on`).
pub fn lock_words(s: &Snapshot, waited_on: Option<&LockState>) -> String {
    if let Some(job) = s.active_job() {
        return match waited_on {
            Some(LockState::Foreign {
                holder,
                id,
                operation,
                created,
            }) => format!(
                "held by {holder} (lock ID {id}, operation {operation}, since {created}): Job {job} waits up to lockTimeoutSeconds for it and is never the one to unlock it. If that holder is gone, release the lock where it was taken: `tofu force-unlock {id}` (or `terraform force-unlock {id}`) in its working directory"
            ),
            Some(other) => format!("Job {job} waits for it: {}", other.why()),
            None => format!("not checked while Job {job} runs (it holds the lock itself)"),
        };
    }
    match &s.lock {
        LockState::Free => "free".to_string(),
        LockState::Foreign { .. } => format!(
            "{}. Jobs still start and wait lockTimeoutSeconds for it; release it from where it was taken (terraform force-unlock)",
            s.lock.why()
        ),
        LockState::Stale { holder, id, .. } => {
            format!("stale: held by {holder}, a runner pod that is gone; the next Job force-unlocks {id} first")
        }
        other => other.why(),
    }
}

/// The object's place while it waits for a runner slot (the controller's limits on running
/// Jobs): the `UpToDate` message the controller wrote with `nextAction.reason: Queued`.
pub fn queued_place(s: &Snapshot) -> Option<String> {
    let next = s.status.next_action.as_ref()?;
    if next.reason != Reason::Queued.as_str() {
        return None;
    }
    let up = captf_shared::conditions::find(s.status.conditions.as_deref()?, captf_shared::conditions::UP_TO_DATE)?;
    (!up.message.is_empty()).then(|| up.message.clone())
}

/// The Job that runs now, when it started and when its deadline stops it: `apply Job X running
/// since T (5m ago); its deadline is T+1h0m, at D (in 55m): ...`.
pub fn running_words(r: &RunningJob, now: Timestamp) -> String {
    let what = match r.op {
        Some(op) => format!("{op} Job {}", r.name),
        None => format!("Job {}", r.name),
    };
    let Some(since) = r.since else {
        return format!("{what}, not started yet");
    };
    let deadline = match (
        r.active_deadline_seconds.and_then(|s| u64::try_from(s).ok()),
        r.deadline,
    ) {
        (Some(secs), Some(d)) if d > now => format!(
            "its deadline is {since}+{}, at {d} (in {}): Kubernetes then stops it ({DEADLINE_EXCEEDED}) and it counts as a failure",
            human(Duration::from_secs(secs)),
            human(until(now, d))
        ),
        (Some(secs), Some(d)) => format!(
            "its deadline, {since}+{}, passed at {d} ({}): Kubernetes stops it ({DEADLINE_EXCEEDED}); while its pod does not end, it holds the object and the state lock",
            human(Duration::from_secs(secs)),
            age(now, d)
        ),
        _ => "it has no deadline (activeDeadlineSeconds)".to_string(),
    };
    format!("{what} running since {since} ({}); {deadline}", age(now, since))
}

/// Why an object is paused, naming each pause.
fn pause_words(p: Pauses) -> Option<String> {
    let mut why = Vec::new();
    if p.spec {
        why.push("the object is suspended (spec.paused: true)".to_string());
    }
    if p.annotation {
        why.push(format!(
            "the object carries the {} annotation",
            keys::ANNOTATION_CAPI_PAUSED
        ));
    }
    if p.cluster {
        why.push("its Cluster API Cluster is paused (spec.paused)".to_string());
    }
    (!why.is_empty()).then(|| {
        format!(
            "{}: a running Job finishes and is booked, no new Job starts, and a deletion waits",
            why.join("; ")
        )
    })
}

/// The explanation in words, most important first. `object`: the object as read.
pub fn explain_text(
    e: &Explanation,
    object: &CaptfObject,
    waited_on: Option<&LockState>,
    command_target: &str,
    now: Timestamp,
) -> String {
    let s = &e.plan.booked;
    let d = &e.decision;
    let pauses = crate::suspend::pauses(object, s.holds.cluster_paused);
    let mut out = format!("{} {}/{}\n", s.kind, s.namespace, s.name);
    let mut line = |label: &str, text: String| out.push_str(&format!("{label:<14}{text}\n"));
    let next = match d {
        Decision::Start(st) => {
            let mut n = format!("start {} (attempt {})", st.op, st.attempt);
            if st.drift_remediation {
                n.push_str(", remediating drift");
            }
            if let Some(id) = &st.force_unlock_id {
                n.push_str(&format!(", force-unlocking the stale lock {id} first"));
            }
            if let Some(p) = &st.approved_plan {
                n.push_str(&format!(", carrying the approval of plan {p}"));
            }
            n
        }
        other => next_short(other),
    };
    line("Next:", next);
    line("When:", when_words(d, now));
    let why = match d {
        Decision::Wait(w) if matches!(w.reason, Reason::ClusterBusy | Reason::MemberJobActive) => {
            format!("{} ({})", reason_words(w.reason), hold_words(w.reason, s))
        }
        Decision::Wait(w) if w.reason.as_str().ends_with("Backoff") => {
            let op = w.op.unwrap_or(Op::Apply);
            let b = captf_core::decide::backoff_of(s, op);
            format!(
                "{op} failed {} in a row; the next attempt ({}) waits {} after the newest failure ({}; `kubectl captf reconcile` starts it now once the cause is fixed)",
                plural(b.n, "time"),
                b.attempt,
                human(b.delay),
                b.rule()
            )
        }
        // What is missing, as the resolution says (a Secret, a Machine, ...).
        Decision::Wait(w) if w.reason == Reason::InputsUnresolved => match &s.inputs_hash {
            captf_core::snapshot::InputsHash::Unresolved(why) => format!("the inputs cannot be resolved: {why}"),
            _ => reason_words(w.reason).to_string(),
        },
        Decision::Wait(w) if w.reason == Reason::Paused => {
            pause_words(pauses).unwrap_or_else(|| reason_words(w.reason).to_string())
        }
        Decision::Wait(w) if w.reason == Reason::InvalidSpec => {
            format!("the spec is invalid: {}", s.invalid.as_deref().unwrap_or("?"))
        }
        Decision::Wait(w) if w.reason == Reason::PolicyViolation => format!(
            "{}: {}",
            reason_words(w.reason),
            s.policy_violation.as_deref().unwrap_or("?")
        ),
        Decision::Wait(w) if w.reason == Reason::ForbiddenReference => format!(
            "{}: {}",
            reason_words(w.reason),
            s.forbidden_reference.as_deref().unwrap_or("?")
        ),
        Decision::Wait(w) if w.reason == Reason::NameConflict => format!(
            "{}: {}",
            reason_words(w.reason),
            s.name_conflict.as_deref().unwrap_or("?")
        ),
        Decision::Wait(w) if w.reason == Reason::ReleasedStateNotAdopted => format!(
            "{}: {}",
            reason_words(w.reason),
            s.unadopted_state.as_deref().unwrap_or("?")
        ),
        Decision::Wait(w) if w.reason == Reason::RunnerConfigUnavailable => format!(
            "{}: {}",
            reason_words(w.reason),
            s.runner_config_unavailable.as_deref().unwrap_or("?")
        ),
        Decision::Start(st) => reason_words(st.reason).to_string(),
        Decision::Wait(w) => reason_words(w.reason).to_string(),
        Decision::Finalize => "the destroy is done (or the deletion policy is Orphan)".to_string(),
    };
    line("Why:", why);
    if let (Decision::Start(_), Some(place)) = (d, queued_place(s)) {
        line(
            "Runner slot:",
            format!("{place}, as of the controller's last look: the Job starts in turn when a slot frees"),
        );
    }
    let suffix = captf_shared::names::suffix(s.kind, &s.namespace, &s.name);
    line(
        "State:",
        format!(
            "Secret {} (labels tfstate=true,tfstateSecretSuffix={suffix})",
            captf_shared::names::state_secret_name(&suffix)
        ),
    );
    line("State lock:", lock_words(s, waited_on));
    if let Some(r) = running_job(s) {
        line("Running:", running_words(&r, now));
    }
    if let Some(p) = &s.status.pending_plan {
        let approved = match s.approve_plan.as_deref() {
            Some(a) if a == p.hash => " (approved)",
            _ => "",
        };
        line(
            "Pending plan:",
            format!(
                "{}{approved}: {} to add, {} to change, {} to destroy, {} to replace (Job {})",
                p.hash, p.add, p.change, p.destroy, p.replace, p.job
            ),
        );
    }
    line("Failures:", failures(s));
    if let Some(f) = last_failure(s) {
        line("Last failure:", f.why);
    }
    let successes: Vec<String> = Op::ALL
        .iter()
        .filter_map(|op| s.last_success(*op).map(|t| format!("{op} {}", age(now, t))))
        .collect();
    line(
        "Last success:",
        if successes.is_empty() {
            "never".to_string()
        } else {
            successes.join(", ")
        },
    );
    if !e.plan.prune.is_empty() {
        line("Prunes:", e.plan.prune.join(", "));
    }
    match d {
        Decision::Wait(w) if matches!(w.reason, Reason::AwaitingApproval | Reason::PlanChanged) => {
            if let Some(a) = approvals_words(&e.plan.booked).filter(|_| e.plan.booked.approvals_required.is_some()) {
                out.push_str(&format!("\nApprovals: {a}."));
            }
            out.push_str(&format!(
                "\nReview the plan with `kubectl captf plan {command_target}`, then approve it with `kubectl captf approve {command_target} --hash <hash>`.\n"
            ));
        }
        Decision::Wait(w) if w.reason == Reason::Paused => {
            if pauses.spec {
                out.push_str(&format!("\nResume it with `kubectl captf resume {command_target}`.\n"));
            }
            if pauses.annotation {
                out.push_str(&format!(
                    "\nIt stays paused while it carries the {} annotation: remove it to resume it.\n",
                    keys::ANNOTATION_CAPI_PAUSED
                ));
            }
            if pauses.cluster {
                out.push_str(
                    "\nIts Cluster API Cluster is paused: it resumes when the Cluster's spec.paused is false again (Cluster API pauses a cluster while it moves it, for instance).\n",
                );
            }
        }
        _ => {}
    }
    out.push_str(&format!("\ncontroller: {}\n", e.summary));
    out
}

/// A plain table: columns padded to the widest cell, three spaces apart, as kubectl prints.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        let mut l = String::new();
        for (i, c) in cells.into_iter().enumerate() {
            if i == last {
                l.push_str(&c);
            } else {
                let pad = widths[i] - c.chars().count() + 3;
                l.push_str(&c);
                l.push_str(&" ".repeat(pad));
            }
        }
        l.trim_end().to_string() + "\n"
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        out.push_str(&line(r.clone()));
    }
    out
}

/// What flows between a cluster and its members (docs/api.md, "Cluster exports"), in words
/// (PURE): a TerraformCluster's `spec.exports` and the variables its members get from them; or,
/// for a member, the `cluster_<output>` variables its stored inputs hold, each public or sensitive
/// as the cluster's output is. `None` when nothing flows.
pub fn exports_words(object: &CaptfObject, stored: Option<&captf_shared::inputs::Inputs>) -> Option<String> {
    let exports = object.exports();
    if !exports.is_empty() {
        let vars: Vec<String> = exports
            .iter()
            .map(|e| captf_core::exports::export_variable(e))
            .collect();
        return Some(format!(
            "exports {} to its members, as {}",
            exports.join(", "),
            vars.join(", ")
        ));
    }
    let stored = stored?;
    let received: Vec<String> = stored
        .variables
        .keys()
        .filter(|k| {
            k.starts_with(captf_core::exports::EXPORT_VAR_PREFIX) && k.as_str() != captf_core::inputs::CLUSTER_NAME_VAR
        })
        .map(|k| {
            let kind = if stored.public_variables.contains(k) {
                "public"
            } else {
                "sensitive"
            };
            format!("{k} ({kind})")
        })
        .collect();
    (!received.is_empty()).then(|| {
        format!(
            "receives from its cluster (as last applied or planned): {}",
            received.join(", ")
        )
    })
}

/// Who approved the plan `captf.io/approve-plan` names, and what is missing, in words: `approved
/// by alice`, `1 of 2 approvals (bob); 1 more needed, from someone other than alice, who last
/// changed the spec`. `None` without an approval.
pub fn approvals_words(s: &Snapshot) -> Option<String> {
    s.approve_plan.as_ref()?;
    let t = captf_core::decide::approvals(s);
    let by = if t.counted.is_empty() {
        "nobody it counts".to_string()
    } else {
        t.counted.join(", ")
    };
    let Some(required) = t.required else {
        return Some(match &s.approved_by {
            Some(b) => format!("approved by {b}"),
            None => "approved (by an unrecorded user)".to_string(),
        });
    };
    let mut w = format!(
        "{} of {required} approvals ({by})",
        t.counted.len().min(required as usize)
    );
    if t.missing() > 0 {
        w.push_str(&format!("; {} more needed", t.missing()));
        if let Some(author) = s.spec_changed_by.as_deref() {
            w.push_str(&format!(
                ", from someone other than {author}, who last changed the spec"
            ));
        }
    }
    Some(w)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use captf_core::decide::Wait;

    fn now() -> Timestamp {
        "2026-03-01T10:00:00Z".parse().unwrap()
    }

    #[test]
    fn runner_slots_the_place_of_a_queued_object_is_the_ready_message_the_controller_wrote() {
        use captf_core::lock::LockState;
        use captf_core::snapshot::{DurableRecord, Holds, InputsHash};
        use captf_shared::conditions::{self, Status};
        use captf_shared::types::{
            CaptfObject, ModuleSpec, NextAction, TerraformCluster, TerraformClusterSpec, TerraformSpec,
        };
        let mut tc = TerraformCluster::new(
            "net",
            TerraformClusterSpec {
                terraform: TerraformSpec {
                    module: ModuleSpec {
                        source: "git::https://example.com/m.git".into(),
                        ..Default::default()
                    },
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        tc.metadata.namespace = Some("team-a".into());
        let mut s = Snapshot::new(
            &CaptfObject::Cluster(tc),
            vec![],
            DurableRecord::default(),
            InputsHash::Known("a".repeat(64)),
            LockState::Free,
            Holds::default(),
        )
        .unwrap();
        let place = "waiting for a runner slot: 3 of 7 queued in namespace team-a (10 of 10 running)";
        let mut cs = vec![];
        conditions::set_condition(
            &mut cs,
            conditions::UP_TO_DATE,
            Status::False,
            "Queued",
            place,
            None,
            now(),
        );
        s.status.conditions = Some(cs);
        assert_eq!(queued_place(&s), None, "no nextAction: not queued");
        s.status.next_action = Some(NextAction {
            op: Some(Op::Apply),
            reason: "Queued".into(),
            not_before: None,
        });
        assert_eq!(queued_place(&s).as_deref(), Some(place));
        s.status.next_action = Some(NextAction {
            op: Some(Op::Apply),
            reason: "InputsChanged".into(),
            not_before: None,
        });
        assert_eq!(queued_place(&s), None);
        assert!(reason_words(Reason::Queued).contains("runner slot"));
    }

    #[test]
    fn every_reason_has_words() {
        for r in Reason::ALL {
            assert!(!reason_words(*r).is_empty(), "{r}");
        }
    }

    #[test]
    fn a_backoff_says_when_the_op_may_start_and_in_how_long() {
        let d = Decision::Wait(Wait {
            reason: Reason::InputsChangedBackoff,
            op: Some(Op::Apply),
            requeue_after: Some(Duration::from_secs(150)),
            not_before: Some("2026-03-01T10:02:30Z".parse().unwrap()),
            attempt: Some(3),
        });
        assert_eq!(when_words(&d, now()), "at 2026-03-01T10:02:30Z (in 2m30s)");
        assert_eq!(next_short(&d), "apply after backoff (InputsChangedBackoff)");
        assert_eq!(next_time(&d, now()), Some("2026-03-01T10:02:30Z".parse().unwrap()));
    }

    #[test]
    fn a_wait_for_approval_has_no_timer_and_says_who_ends_it() {
        let d = Decision::Wait(Wait {
            reason: Reason::AwaitingApproval,
            op: None,
            requeue_after: None,
            not_before: None,
            attempt: None,
        });
        assert_eq!(
            when_words(&d, now()),
            "when a person approves the plan or the inputs change"
        );
        assert_eq!(next_time(&d, now()), None);
    }

    #[test]
    fn a_table_pads_columns_three_spaces_apart_and_trims_the_last() {
        let t = table(
            &["KIND", "NAME", "NEXT"],
            &[
                vec!["TerraformCluster".into(), "a".into(), "wait (Idle)".into()],
                vec!["TerraformMachine".into(), "longer-name".into(), "".into()],
            ],
        );
        assert_eq!(
            t,
            "KIND               NAME          NEXT\n\
             TerraformCluster   a             wait (Idle)\n\
             TerraformMachine   longer-name\n"
        );
    }

    #[test]
    fn a_running_job_past_its_deadline_says_kubernetes_stops_it_and_one_without_has_none() {
        let since: Timestamp = "2026-03-01T08:00:00Z".parse().unwrap();
        let mut r = RunningJob {
            name: "tc-a-1-apply-3".into(),
            op: Some(Op::Apply),
            since: Some(since),
            active_deadline_seconds: Some(3600),
            deadline: Some("2026-03-01T09:00:00Z".parse().unwrap()),
        };
        assert_eq!(
            running_words(&r, now()),
            "apply Job tc-a-1-apply-3 running since 2026-03-01T08:00:00Z (2h0m ago); its deadline, 2026-03-01T08:00:00Z+1h0m, passed at 2026-03-01T09:00:00Z (1h0m ago): Kubernetes stops it (DeadlineExceeded); while its pod does not end, it holds the object and the state lock"
        );
        r.active_deadline_seconds = None;
        r.deadline = None;
        assert!(running_words(&r, now()).ends_with("; it has no deadline (activeDeadlineSeconds)"));
        r.since = None;
        assert_eq!(running_words(&r, now()), "apply Job tc-a-1-apply-3, not started yet");
    }

    #[test]
    fn an_age_is_how_long_ago_in_words() {
        assert_eq!(age(now(), "2026-03-01T09:55:00Z".parse().unwrap()), "5m ago");
        assert_eq!(age(now(), "2026-03-01T07:00:00Z".parse().unwrap()), "3h0m ago");
    }

    #[test]
    fn explain_says_what_a_cluster_exports_and_what_a_member_received() {
        use captf_shared::types::{TerraformCluster, TerraformClusterSpec, TerraformMachinePool};
        let cluster = CaptfObject::Cluster(TerraformCluster::new(
            "net",
            TerraformClusterSpec {
                exports: Some(vec!["vpc_id".into(), "db_password".into()]),
                ..Default::default()
            },
        ));
        assert_eq!(
            exports_words(&cluster, None).as_deref(),
            Some("exports vpc_id, db_password to its members, as cluster_vpc_id, cluster_db_password")
        );
        let pool = CaptfObject::MachinePool(TerraformMachinePool::new("workers", Default::default()));
        assert_eq!(exports_words(&pool, None), None);
        let stored = captf_shared::inputs::Inputs {
            variables: [
                ("cluster_name".to_string(), serde_json::json!("net")),
                ("cluster_vpc_id".to_string(), serde_json::json!("vpc-1")),
                ("cluster_db_password".to_string(), serde_json::json!("pw")),
                ("region".to_string(), serde_json::json!("eu")),
            ]
            .into(),
            public_variables: ["cluster_vpc_id".to_string()].into(),
            ..Default::default()
        };
        assert_eq!(
            exports_words(&pool, Some(&stored)).as_deref(),
            Some(
                "receives from its cluster (as last applied or planned): cluster_db_password (sensitive), cluster_vpc_id (public)"
            )
        );
    }
}

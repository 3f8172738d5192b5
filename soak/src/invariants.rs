//! What must hold over the whole recorded history, however the faults fell (docs/soak.md).
//! Each check is a pure function of the [`History`]; each rule is recomputed here from what
//! the simulator saw, never read from the controller's own bookkeeping.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::history::{End, History, JobFact};

/// A broken invariant: which, when (simulated time), about which object, and what was seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub at: Timestamp,
    pub object: String,
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} at {} on {}: {}",
            self.invariant, self.at, self.object, self.detail
        )
    }
}

fn v(invariant: &'static str, at: Timestamp, object: &str, detail: String) -> Violation {
    Violation {
        invariant,
        at,
        object: object.to_string(),
        detail,
    }
}

/// Checks that hold at every moment of the history.
pub fn always(h: &History) -> Vec<Violation> {
    let mut out = one_active_job_per_object(h);
    out.extend(no_member_job_while_its_cluster_job_runs(h));
    out.extend(force_unlock_only_of_the_objects_own_dead_runner(h));
    out.extend(no_job_before_the_backoff_allows(h));
    out.extend(an_outcome_once_written_never_changes(h));
    out
}

/// The controller's limits on running runner Jobs (`--max-running-jobs`,
/// `--max-running-jobs-per-namespace`; 0: none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunnerLimits {
    pub total: u32,
    pub per_namespace: u32,
}

/// Never more Jobs running at once than the limits allow: at each Job's creation, the Jobs
/// running then (created before it, not finished, not deleted) and itself, in its namespace and
/// in all, are within the limits.
///
/// `instances` controller instances (shards, each with its own leader) enforce the limits each
/// on its own, counting every runner Job it sees: two can start a Job at the same moment, each
/// on the last free slot, so with `n` instances a limit `l` allows `l + n - 1` at once (the
/// exact limit with one instance).
pub fn never_more_running_jobs_than_the_limits(h: &History, limits: RunnerLimits, instances: usize) -> Vec<Violation> {
    let mut out = Vec::new();
    if limits.total == 0 && limits.per_namespace == 0 {
        return out;
    }
    let slack = instances.saturating_sub(1);
    let allowed = |limit: u32| limit as usize + slack;
    for j in &h.jobs {
        let running: Vec<&JobFact> = h
            .jobs
            .iter()
            .filter(|k| k.uid != j.uid && k.active_at(j.created_rv))
            .collect();
        let total = running.len() + 1;
        let in_ns = running.iter().filter(|k| k.ns == j.ns).count() + 1;
        let over_ns = limits.per_namespace > 0 && in_ns > allowed(limits.per_namespace);
        let over_total = limits.total > 0 && total > allowed(limits.total);
        if over_ns || over_total {
            let mut names: Vec<&str> = running.iter().map(|k| k.name.as_str()).collect();
            names.sort_unstable();
            out.push(v(
                "never_more_running_jobs_than_the_limits",
                j.created,
                &j.object,
                format!(
                    "Job {} was created with {in_ns} running in namespace {} (limit {}) and {total} in all (limit {}){}: {}",
                    j.name,
                    j.ns,
                    limits.per_namespace,
                    limits.total,
                    if slack > 0 {
                        format!(", {slack} more allowed with {instances} instances")
                    } else {
                        String::new()
                    },
                    names.join(", ")
                ),
            ));
        }
    }
    out
}

/// Checks that hold once the faults stopped and everything settled (`end`: that moment).
pub fn at_rest(h: &History, end: Timestamp) -> Vec<Violation> {
    let mut out = every_finished_job_booked_exactly_once(h, end);
    out.extend(an_interrupted_apply_is_applied_again(h, end));
    out.extend(every_deleted_object_is_destroyed_and_released(h, end));
    out.extend(pruning_leaves_no_job_behind(h, end));
    out.extend(status_failure_counts_match_the_history(h, end));
    out
}

/// Each live object's `status.consecutiveFailures` per op equals the failures of that op since
/// its last success, recounted from the Jobs' ends.
pub fn status_failure_counts_match_the_history(h: &History, end: Timestamp) -> Vec<Violation> {
    let mut out = Vec::new();
    for o in h
        .objects
        .iter()
        .filter(|o| o.removed.is_none() && o.deletion_requested.is_none())
    {
        let mut jobs: Vec<&JobFact> = h.jobs.iter().filter(|j| j.owner_uid == o.uid).collect();
        jobs.sort_by_key(|j| j.created_rv);
        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        for j in &jobs {
            match j.end() {
                Some(End::Success) => {
                    counts.insert(&j.op, 0);
                }
                Some(End::Failure) => *counts.entry(&j.op).or_default() += 1,
                _ => {}
            }
        }
        for (op, n) in counts {
            let booked = o
                .status
                .pointer(&format!("/consecutiveFailures/{op}"))
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            if booked != n {
                out.push(v(
                    "status_failure_counts_match_the_history",
                    end,
                    &format!("{}/{}/{}", o.kind, o.ns, o.name),
                    format!("status.consecutiveFailures.{op} is {booked}, the Jobs say {n}"),
                ));
            }
        }
    }
    out
}

/// Never two Jobs of one object running at once (the run lease's promise).
pub fn one_active_job_per_object(h: &History) -> Vec<Violation> {
    let mut by_object: HashMap<(&str, &str), Vec<&JobFact>> = HashMap::new();
    for j in &h.jobs {
        by_object.entry((&j.ns, &j.object)).or_default().push(j);
    }
    let mut out = Vec::new();
    for jobs in by_object.values() {
        for j in jobs {
            if let Some(other) = jobs.iter().find(|k| k.uid != j.uid && k.active_at(j.created_rv)) {
                out.push(v(
                    "one_active_job_per_object",
                    j.created,
                    &j.object,
                    format!("Job {} was created while Job {} still ran", j.name, other.name),
                ));
            }
        }
    }
    out
}

const CLUSTER: &str = "TerraformCluster";

/// A machine pool's or machine's Job never starts while a Job of its cluster runs, and the
/// cluster's apply or destroy never starts while a member's Job runs (the cluster lease). Every
/// object labelled with the cluster waits for the cluster's Jobs; the cluster waits only for a
/// verified member's, as the controller's rule says: one owned by that cluster object (its UID).
/// A labelled object that is not, such as one created while its cluster was gone, holds nothing.
/// One whose object was never seen counts.
pub fn no_member_job_while_its_cluster_job_runs(h: &History) -> Vec<Violation> {
    // Whether the member Job `m`'s object is owned by the cluster object of Job `c`.
    let member_of = |m: &JobFact, c: &JobFact| {
        h.object_by_uid(&m.owner_uid)
            .is_none_or(|o| o.owners.contains(&c.owner_uid))
    };
    let mut by_cluster: HashMap<(&str, &str), Vec<&JobFact>> = HashMap::new();
    for j in &h.jobs {
        if let Some(c) = &j.cluster {
            by_cluster.entry((&j.ns, c)).or_default().push(j);
        }
    }
    let mut out = Vec::new();
    for jobs in by_cluster.values() {
        for j in jobs {
            let member = j.kind != CLUSTER;
            let guarded = member || matches!(j.op.as_str(), "apply" | "destroy");
            if !guarded {
                continue;
            }
            let clash = jobs
                .iter()
                .find(|k| (k.kind == CLUSTER) == member && k.active_at(j.created_rv) && (member || member_of(k, j)));
            if let Some(k) = clash {
                out.push(v(
                    "no_member_job_while_its_cluster_job_runs",
                    j.created,
                    &j.object,
                    format!(
                        "{} Job {} was created while {} Job {} ran",
                        j.kind, j.name, k.kind, k.name
                    ),
                ));
            }
        }
    }
    out
}

/// A lock ID handed to a Job for `force-unlock` was taken by a runner pod of the same object,
/// and that pod had stopped running before the Job was created. A workstation's lock, or a lock
/// of a pod still running, is never handed over.
pub fn force_unlock_only_of_the_objects_own_dead_runner(h: &History) -> Vec<Violation> {
    let mut out = Vec::new();
    for j in &h.jobs {
        let Some(id) = &j.force_unlock else { continue };
        let taken = h
            .locks
            .iter()
            .rfind(|l| l.ns == j.ns && &l.id == id && l.rv < j.created_rv);
        let why = match taken {
            None => Some(format!("lock ID {id} was never taken before Job {}", j.name)),
            Some(l) => {
                let host = l.who.rsplit('@').next().unwrap_or_default();
                match h.pods.get(&(j.ns.clone(), host.to_string())) {
                    None => Some(format!("lock ID {id} is held by {:?}, not by a runner pod", l.who)),
                    Some(p) if p.object != j.object => Some(format!(
                        "lock ID {id} is held by a runner of another object ({})",
                        p.object
                    )),
                    Some(p) if p.ended_rv.is_none_or(|e| e > j.created_rv) => Some(format!(
                        "lock ID {id} is held by runner pod {host}, still running when Job {} was created",
                        j.name
                    )),
                    Some(_) => None,
                }
            }
        };
        if let Some(why) = why {
            out.push(v(
                "force_unlock_only_of_the_objects_own_dead_runner",
                j.created,
                &j.object,
                why,
            ));
        }
    }
    out
}

/// The retry delay after `n` consecutive failures: `min(1m × 2^(n-1), 10m)`, and 10m once `n`
/// reaches the failed-Jobs history limit (0 counts as 1). Written out again here, on purpose:
/// the soak checks the controller against the rule, not against the controller's own code.
pub fn retry_delay(n: u32, failed_limit: u32) -> Duration {
    const CAP: u64 = 600;
    if n == 0 {
        return Duration::ZERO;
    }
    if n >= failed_limit.max(1) {
        return Duration::from_secs(CAP);
    }
    let mut secs = 60u64;
    for _ in 1..n {
        secs = (secs * 2).min(CAP);
    }
    Duration::from_secs(secs)
}

/// No Job of an op starts before its newest failure's finish plus `retry_delay(n)`, where `n`
/// counts the op's failures since its last success (per object incarnation).
pub fn no_job_before_the_backoff_allows(h: &History) -> Vec<Violation> {
    let limits: HashMap<&str, u32> = h.objects.iter().map(|o| (o.uid.as_str(), o.failed_limit)).collect();
    let mut by_op: BTreeMap<(&str, &str), Vec<&JobFact>> = BTreeMap::new();
    for j in &h.jobs {
        by_op.entry((&j.owner_uid, &j.op)).or_default().push(j);
    }
    let mut out = Vec::new();
    for ((owner, _), mut jobs) in by_op {
        jobs.sort_by_key(|j| j.created_rv);
        let limit = limits.get(owner).copied().unwrap_or(3);
        let (mut n, mut newest_failure) = (0u32, None::<Timestamp>);
        for j in jobs {
            if let Some(f) = newest_failure {
                let delay = retry_delay(n, limit);
                let allowed = f + SignedDuration::try_from(delay).unwrap_or(SignedDuration::MAX);
                if j.created < allowed {
                    out.push(v(
                        "no_job_before_the_backoff_allows",
                        j.created,
                        &j.object,
                        format!(
                            "{} Job {} started {}s after the newest of {n} failure(s), before the {}s the backoff allows",
                            j.op,
                            j.name,
                            j.created.duration_since(f).as_secs(),
                            delay.as_secs()
                        ),
                    ));
                }
            }
            match j.end() {
                Some(End::Success) => (n, newest_failure) = (0, None),
                Some(End::Failure) => {
                    n += 1;
                    newest_failure = j.finished.map(|(t, _)| t);
                }
                _ => {}
            }
        }
    }
    out
}

/// `captf.io/outcome`, once written, is never changed or removed.
pub fn an_outcome_once_written_never_changes(h: &History) -> Vec<Violation> {
    h.jobs
        .iter()
        .filter(|j| j.outcomes.len() > 1)
        .map(|j| {
            v(
                "an_outcome_once_written_never_changes",
                j.created,
                &j.object,
                format!("Job {}'s outcome went {:?}", j.name, j.outcomes),
            )
        })
        .collect()
}

/// Each replica's `captf_jobs_finished_total` counts the bookings it made, each once. `bookers`
/// holds, per booking, the leaders that can have made it ([`History::bookers`]); `counts` the
/// metric of each replica that has one. The bookings must be shared out so that each counted
/// replica gets exactly its count, a booking going to one of its possible bookers (one not
/// counted, such as a replica that died, takes any number). With one possible booker per
/// booking (one instance) that is: each count equals the bookings only it can have made.
pub fn finished_counts_match_the_bookings(
    bookers: &[BTreeSet<String>],
    counts: &BTreeMap<String, u64>,
    at: Timestamp,
) -> Vec<Violation> {
    const NAME: &str = "every_finished_job_booked_exactly_once";
    let names: Vec<&str> = counts.keys().map(String::as_str).collect();
    let index: HashMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let (mut only, mut maybe) = (vec![0usize; names.len()], vec![0usize; names.len()]);
    // The bookings more than one leader can have made, by the counted ones among them, and
    // whether one not counted can take it.
    let mut shared: Vec<(Vec<usize>, bool)> = Vec::new();
    for b in bookers {
        let counted: Vec<usize> = b.iter().filter_map(|l| index.get(l.as_str()).copied()).collect();
        if b.len() == 1 {
            if let Some(&i) = counted.first() {
                only[i] += 1;
            }
            continue;
        }
        for &i in &counted {
            maybe[i] += 1;
        }
        if !counted.is_empty() {
            shared.push((counted.clone(), counted.len() < b.len()));
        }
    }
    let mut out = Vec::new();
    let mut need = vec![0usize; names.len()];
    for (i, name) in names.iter().enumerate() {
        let count = usize::try_from(counts[*name]).unwrap_or(usize::MAX);
        if count < only[i] || count > only[i] + maybe[i] {
            let also = if maybe[i] > 0 {
                format!(" (and {} it or another instance's leader made)", maybe[i])
            } else {
                String::new()
            };
            out.push(v(
                NAME,
                at,
                &format!("replica {name}"),
                format!(
                    "captf_jobs_finished_total is {count}, yet it booked {} Jobs while it led{also}",
                    only[i]
                ),
            ));
        }
        need[i] = count.saturating_sub(only[i]);
    }
    if !out.is_empty() || shared.is_empty() {
        return out;
    }
    // Every counted replica gets its count from the shared bookings, and every shared booking
    // no uncounted leader can take goes to a counted one within its count: each is a bipartite
    // matching, and when both exist one assignment does both (Mendelsohn-Dulmage).
    let all: Vec<&[usize]> = shared.iter().map(|(c, _)| c.as_slice()).collect();
    let forced: Vec<&[usize]> = shared
        .iter()
        .filter(|(_, flexible)| !flexible)
        .map(|(c, _)| c.as_slice())
        .collect();
    let wanted: usize = need.iter().sum();
    if max_b_matching(&all, &need) < wanted || max_b_matching(&forced, &need) < forced.len() {
        let each: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{n} {} ({} only it, {} shared)", counts[*n], only[i], maybe[i]))
            .collect();
        out.push(v(
            NAME,
            at,
            "replicas",
            format!(
                "the replicas' captf_jobs_finished_total ({}) cannot be the {} bookings more than one leader can have made",
                each.join(", "),
                shared.len()
            ),
        ));
    }
    out
}

/// The most of `edges` (each a list of replicas it may go to) given out with replica `r`
/// taking at most `caps[r]`.
fn max_b_matching(edges: &[&[usize]], caps: &[usize]) -> usize {
    fn augment(b: usize, edges: &[&[usize]], caps: &[usize], held: &mut [Vec<usize>], seen: &mut [bool]) -> bool {
        for &r in edges[b] {
            if seen[r] {
                continue;
            }
            seen[r] = true;
            if held[r].len() < caps[r] {
                held[r].push(b);
                return true;
            }
            for k in 0..held[r].len() {
                if augment(held[r][k], edges, caps, held, seen) {
                    held[r][k] = b;
                    return true;
                }
            }
        }
        false
    }
    let mut held = vec![Vec::new(); caps.len()];
    (0..edges.len())
        .filter(|&b| augment(b, edges, caps, &mut held, &mut vec![false; caps.len()]))
        .count()
}

/// What the rules' classification says an outcome must be.
fn outcome_matches(end: End, outcome: &str) -> bool {
    match end {
        End::Success => outcome == "succeeded",
        End::Failure => matches!(outcome, "failed" | "deadline"),
        End::Neutral => matches!(outcome, "interrupted" | "blocked" | "plan-changed"),
    }
}

/// The Event a booking emits for an outcome, if any.
fn event_reason(outcome: &str) -> Option<&'static str> {
    match outcome {
        "failed" => Some("JobFailed"),
        "deadline" => Some("JobDeadlineExceeded"),
        "interrupted" => Some("JobInterrupted"),
        "blocked" => Some("DestructivePlanBlocked"),
        _ => None,
    }
}

/// Every finished Job is booked before it goes: one outcome, matching how it ended, and the
/// outcome's Event exactly once.
pub fn every_finished_job_booked_exactly_once(h: &History, end: Timestamp) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut expected: HashMap<(&str, &str, &str), i64> = HashMap::new();
    for j in &h.jobs {
        let Some(how) = j.end() else { continue };
        match j.outcome() {
            None => out.push(v(
                "every_finished_job_booked_exactly_once",
                end,
                &j.object,
                format!("Job {} finished ({how:?}) but was never booked", j.name),
            )),
            Some(o) if !outcome_matches(how, o) => out.push(v(
                "every_finished_job_booked_exactly_once",
                end,
                &j.object,
                format!("Job {} ended {how:?} but was booked {o:?}", j.name),
            )),
            Some(o) => {
                if let Some(r) = event_reason(o) {
                    *expected.entry((&j.ns, &j.name, r)).or_default() += 1;
                }
            }
        }
    }
    let mut seen: HashMap<(&str, &str, &str), i64> = HashMap::new();
    for e in &h.events {
        if [
            "JobFailed",
            "JobDeadlineExceeded",
            "JobInterrupted",
            "DestructivePlanBlocked",
        ]
        .contains(&e.reason.as_str())
        {
            *seen.entry((&e.ns, &e.job, &e.reason)).or_default() += e.count;
        }
    }
    let mut keys: Vec<_> = expected.keys().chain(seen.keys()).copied().collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        let (want, got) = (
            expected.get(&k).copied().unwrap_or(0),
            seen.get(&k).copied().unwrap_or(0),
        );
        if want != got {
            out.push(v(
                "every_finished_job_booked_exactly_once",
                end,
                k.1,
                format!(
                    "{want} booking(s) of Job {} call for {want} {} Event(s), {got} were emitted",
                    k.1, k.2
                ),
            ));
        }
    }
    out
}

/// An apply that was interrupted (or whose Job vanished while it ran) is followed by another
/// apply of the same object, unless the object was deleted.
pub fn an_interrupted_apply_is_applied_again(h: &History, end: Timestamp) -> Vec<Violation> {
    let removed: HashMap<&str, bool> = h
        .objects
        .iter()
        .map(|o| (o.uid.as_str(), o.deletion_requested.is_some()))
        .collect();
    let mut out = Vec::new();
    for j in h
        .jobs
        .iter()
        .filter(|j| j.op == "apply" && j.kind != "TerraformMachine")
    {
        let interrupted = j.end() == Some(End::Neutral) && (j.disrupted || j.exit_code == Some(5))
            || (j.finished.is_none() && j.deleted_rv.is_some());
        if !interrupted || removed.get(j.owner_uid.as_str()).copied().unwrap_or(true) {
            continue;
        }
        let again = h
            .jobs
            .iter()
            .any(|k| k.owner_uid == j.owner_uid && k.op == "apply" && k.created_rv > j.created_rv);
        if !again {
            out.push(v(
                "an_interrupted_apply_is_applied_again",
                end,
                &j.object,
                format!("apply Job {} was interrupted and no apply followed", j.name),
            ));
        }
    }
    out
}

/// What an object's last status says it waits for: its next action and UpToDate condition, to
/// read a stuck object from the report alone.
fn waits_for(status: &serde_json::Value) -> String {
    let text = |p: &str| status.pointer(p).and_then(serde_json::Value::as_str).unwrap_or("-");
    let ready = crate::history::condition(status, "UpToDate");
    let field = |c: Option<&serde_json::Value>, f: &str| c.and_then(|c| c[f].as_str()).unwrap_or("-").to_string();
    format!(
        "next action {} {}, activeJob {}, UpToDate {} {}: {}",
        text("/nextAction/op"),
        text("/nextAction/reason"),
        text("/activeJob"),
        field(ready, "status"),
        field(ready, "reason"),
        field(ready, "message"),
    )
}

/// Every object whose deletion was asked for is gone; with `deletionPolicy: Delete` a destroy
/// of that very object succeeded first, with `Orphan` none ran.
pub fn every_deleted_object_is_destroyed_and_released(h: &History, end: Timestamp) -> Vec<Violation> {
    let mut out = Vec::new();
    for o in h.objects.iter().filter(|o| o.deletion_requested.is_some()) {
        let id = format!("{}/{}/{}", o.kind, o.ns, o.name);
        let Some(removed) = o.removed else {
            out.push(v(
                "every_deleted_object_is_destroyed_and_released",
                end,
                &id,
                format!(
                    "deletion asked at {:?}, the object is still there (shard {:?}; {})",
                    o.deletion_requested,
                    o.shards.last().and_then(|(_, _, s)| s.as_deref()),
                    waits_for(&o.status)
                ),
            ));
            continue;
        };
        let destroyed = h.jobs.iter().any(|j| {
            j.owner_uid == o.uid
                && j.op == "destroy"
                && j.end() == Some(End::Success)
                && j.finished.is_some_and(|(t, _)| t <= removed)
        });
        let any_destroy = h.jobs.iter().any(|j| j.owner_uid == o.uid && j.op == "destroy");
        if o.orphan && any_destroy {
            out.push(v(
                "every_deleted_object_is_destroyed_and_released",
                removed,
                &id,
                "deletionPolicy Orphan, yet a destroy Job ran".into(),
            ));
        }
        if !o.orphan && !destroyed {
            out.push(v(
                "every_deleted_object_is_destroyed_and_released",
                removed,
                &id,
                "removed without a successful destroy".into(),
            ));
        }
    }
    out
}

/// After booking, no more Jobs are kept than the history limits allow, and no Job outlives its
/// object.
pub fn pruning_leaves_no_job_behind(h: &History, end: Timestamp) -> Vec<Violation> {
    let objects: HashMap<&str, _> = h.objects.iter().map(|o| (o.uid.as_str(), o)).collect();
    let mut kept: BTreeMap<(&str, &str, &str), usize> = BTreeMap::new();
    let mut out = Vec::new();
    for j in h.jobs.iter().filter(|j| j.deleted_rv.is_none()) {
        let Some(o) = objects.get(j.owner_uid.as_str()) else {
            continue;
        };
        if o.removed.is_some() {
            out.push(v(
                "pruning_leaves_no_job_behind",
                end,
                &j.object,
                format!("Job {} outlived its object", j.name),
            ));
            continue;
        }
        if let Some(outcome) = j.outcome() {
            let class = match outcome {
                "failed" | "deadline" => "failure",
                other => other,
            };
            *kept.entry((&j.owner_uid, &j.op, class)).or_default() += 1;
        }
    }
    for ((owner, op, class), n) in kept {
        let Some(o) = objects.get(owner) else { continue };
        let limit = if class == "succeeded" {
            o.successful_limit as usize
        } else {
            o.failed_limit.max(1) as usize
        };
        if n > limit {
            out.push(v(
                "pruning_leaves_no_job_behind",
                end,
                &format!("{}/{}/{}", o.kind, o.ns, o.name),
                format!("{n} {class} {op} Jobs kept, the limit is {limit}"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::history::{LockTaken, ObjectFact, PodFact};
    use serde_json::Value;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn job(name: &str, op: &str, created: (i64, u64), finished: Option<(i64, u64)>, end: Option<End>) -> JobFact {
        JobFact {
            ns: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            object: "TerraformCluster.default.c".into(),
            owner_uid: "o1".into(),
            kind: "TerraformCluster".into(),
            op: op.into(),
            cluster: Some("c".into()),
            force_unlock: None,
            created: t(created.0),
            created_rv: created.1,
            finished: finished.map(|(s, rv)| (t(s), rv)),
            complete: end == Some(End::Success),
            deadline: false,
            exit_code: match end {
                Some(End::Success) => Some(0),
                Some(End::Failure) => Some(1),
                Some(End::Neutral) => Some(5),
                None => None,
            },
            disrupted: false,
            booked_rv: end.map(|_| finished.map_or(0, |f| f.1)),
            booked_wall: end.map(|_| std::time::Instant::now()),
            outcomes: match end {
                Some(End::Success) => vec![Some("succeeded".into())],
                Some(End::Failure) => vec![Some("failed".into())],
                Some(End::Neutral) => vec![Some("interrupted".into())],
                None => vec![],
            },
            deleted_rv: None,
        }
    }

    #[test]
    fn never_more_running_jobs_than_the_limits_fails_a_history_that_broke_them() {
        let in_ns = |ns: &str, mut j: JobFact| {
            j.ns = ns.into();
            j.object = format!("TerraformCluster.{ns}.{}", j.name);
            j
        };
        // a1 and a2 run together in "a"; b1 starts in "b" while both still run.
        let jobs = vec![
            in_ns("a", job("a1", "apply", (0, 10), Some((60, 40)), Some(End::Success))),
            in_ns("a", job("a2", "apply", (1, 11), Some((61, 41)), Some(End::Success))),
            in_ns("b", job("b1", "apply", (2, 12), Some((62, 42)), Some(End::Success))),
            // After a1 and a2 finished: nothing else runs.
            in_ns("a", job("a3", "apply", (70, 50), None, None)),
        ];
        let h = history(jobs);
        let limits = |total, per_namespace| RunnerLimits { total, per_namespace };
        assert!(never_more_running_jobs_than_the_limits(&h, limits(0, 0), 1).is_empty());
        assert!(never_more_running_jobs_than_the_limits(&h, limits(3, 2), 1).is_empty());
        // One per namespace: a2 broke it, b1 did not (its namespace ran nothing else).
        let found = never_more_running_jobs_than_the_limits(&h, limits(0, 1), 1);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .detail
                .starts_with("Job a2 was created with 2 running in namespace a"),
            "{}",
            found[0]
        );
        // Two in all: b1 was the third.
        let found = never_more_running_jobs_than_the_limits(&h, limits(2, 0), 1);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].detail.contains("Job b1") && found[0].detail.contains("3 in all (limit 2): a1, a2"),
            "{}",
            found[0]
        );
        // A Job deleted while it ran stops counting when it is deleted: only a2 broke the limit.
        let mut jobs = h.jobs.clone();
        jobs[0].finished = None;
        jobs[0].deleted_rv = Some(45);
        let found = never_more_running_jobs_than_the_limits(&history(jobs.clone()), limits(0, 1), 1);
        assert_eq!(
            found
                .iter()
                .map(|v| v.detail.split(' ').nth(1).unwrap())
                .collect::<Vec<_>>(),
            ["a2"]
        );
        // Never finished nor deleted, a1 still ran when a3 was created.
        jobs[0].deleted_rv = None;
        let found = never_more_running_jobs_than_the_limits(&history(jobs), limits(0, 1), 1);
        assert_eq!(
            found
                .iter()
                .map(|v| v.detail.split(' ').nth(1).unwrap())
                .collect::<Vec<_>>(),
            ["a2", "a3"]
        );
    }

    #[test]
    fn with_several_instances_the_limits_allow_one_more_job_per_further_instance_and_no_more() {
        let limits = RunnerLimits {
            total: 0,
            per_namespace: 2,
        };
        // Two Jobs ran when two instances (shards) each took the last slot at once: three in
        // all, the limit plus one.
        let mut jobs = vec![
            job("j1", "apply", (0, 10), None, None),
            job("j2", "apply", (1, 11), None, None),
            job("j3", "apply", (1, 12), None, None),
        ];
        for j in &mut jobs {
            j.object = format!("TerraformCluster.default.{}", j.name);
        }
        assert_eq!(
            never_more_running_jobs_than_the_limits(&history(jobs.clone()), limits, 2),
            vec![]
        );
        // With one instance the limit is exact.
        let found = never_more_running_jobs_than_the_limits(&history(jobs.clone()), limits, 1);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].detail.starts_with("Job j3 was created with 3 running"),
            "{}",
            found[0]
        );
        // A fourth is more than two instances starting at once explains.
        let mut j4 = job("j4", "apply", (2, 13), None, None);
        j4.object = "TerraformCluster.default.j4".into();
        jobs.push(j4);
        let found = never_more_running_jobs_than_the_limits(&history(jobs.clone()), limits, 2);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .detail
                .starts_with("Job j4 was created with 4 running in namespace default (limit 2) and 4 in all (limit 0), 1 more allowed with 2 instances"),
            "{}",
            found[0]
        );
        // Four instances allow the four; the total limit gets the same slack.
        assert_eq!(
            never_more_running_jobs_than_the_limits(&history(jobs.clone()), limits, 4),
            vec![]
        );
        let total = RunnerLimits {
            total: 2,
            per_namespace: 0,
        };
        assert_eq!(
            never_more_running_jobs_than_the_limits(&history(jobs.clone()), total, 3),
            vec![]
        );
        assert_eq!(
            never_more_running_jobs_than_the_limits(&history(jobs), total, 2).len(),
            1
        );
    }

    fn history(jobs: Vec<JobFact>) -> History {
        let mut h = History::default();
        h.objects.push(ObjectFact {
            kind: "TerraformCluster".into(),
            ns: "default".into(),
            name: "c".into(),
            uid: "o1".into(),
            failed_limit: 3,
            successful_limit: 1,
            orphan: false,
            shards: Vec::new(),
            deletion_requested: None,
            removed: None,
            status: Value::Null,
            owners: Vec::new(),
        });
        h.jobs = jobs;
        h
    }

    #[test]
    fn retry_delay_is_one_minute_doubling_capped_at_ten_and_at_the_limit() {
        let m = |n| retry_delay(n, 3).as_secs() / 60;
        assert_eq!([m(0), m(1), m(2), m(3), m(4)], [0, 1, 2, 10, 10]);
        let m5 = |n| retry_delay(n, 5).as_secs() / 60;
        assert_eq!([m5(1), m5(2), m5(3), m5(4), m5(5)], [1, 2, 4, 8, 10]);
        assert_eq!(retry_delay(1, 0).as_secs(), 600);
        assert_eq!(retry_delay(40, 100).as_secs(), 600);
    }

    #[test]
    fn one_active_job_per_object_flags_a_job_created_while_another_runs() {
        let ok = history(vec![
            job("a1", "apply", (0, 10), Some((30, 20)), Some(End::Success)),
            job("a2", "apply", (60, 30), Some((90, 40)), Some(End::Success)),
        ]);
        assert_eq!(one_active_job_per_object(&ok), vec![]);
        let bad = history(vec![
            job("a1", "apply", (0, 10), Some((30, 20)), Some(End::Success)),
            job("d1", "drift", (10, 15), None, None),
        ]);
        let found = one_active_job_per_object(&bad);
        assert_eq!(found.len(), 1);
        assert!(found[0].detail.contains("Job d1 was created while Job a1 still ran"));
    }

    #[test]
    fn no_member_job_while_its_cluster_job_runs_in_either_direction_but_a_cluster_drift_may_overlap() {
        let mut pool = job("p1", "apply", (10, 15), Some((40, 25)), Some(End::Success));
        pool.kind = "TerraformMachinePool".into();
        pool.object = "TerraformMachinePool.default.p".into();
        pool.owner_uid = "o2".into();
        let cluster = job("a1", "apply", (0, 10), Some((30, 20)), Some(End::Success));
        assert_eq!(
            no_member_job_while_its_cluster_job_runs(&history(vec![cluster, pool.clone()])).len(),
            1
        );
        // The cluster's drift check started while the pool's apply ran: allowed.
        let drift = job("d1", "drift", (20, 18), Some((50, 30)), Some(End::Success));
        assert_eq!(
            no_member_job_while_its_cluster_job_runs(&history(vec![pool.clone(), drift])),
            vec![]
        );
        // The cluster's apply started while the pool's ran: not allowed.
        let apply = job("a2", "apply", (20, 18), Some((50, 30)), Some(End::Success));
        assert_eq!(
            no_member_job_while_its_cluster_job_runs(&history(vec![pool.clone(), apply.clone()])).len(),
            1
        );
        // The same, with the pool seen: owned by the cluster (o1), a clash; owned by nothing (made
        // while its cluster was gone) or by an earlier cluster of that name, none. The other way
        // round (the pool's Job started while the cluster's ran) is a clash whatever its owners.
        for (owners, clashes) in [(vec!["o1"], 1), (vec![], 0), (vec!["o0"], 0)] {
            let mut h = history(vec![pool.clone(), apply.clone()]);
            let mut p = h.objects[0].clone();
            (p.kind, p.name, p.uid) = ("TerraformMachinePool".into(), "p".into(), "o2".into());
            p.owners = owners.iter().map(|u| u.to_string()).collect();
            h.insert_object(p);
            assert_eq!(
                no_member_job_while_its_cluster_job_runs(&h).len(),
                clashes,
                "pool owned by {owners:?}"
            );
            let mut late = pool.clone();
            (late.created, late.created_rv) = (t(25), 19);
            let mut h = history(vec![apply.clone(), late]);
            let mut p = h.objects[0].clone();
            (p.kind, p.name, p.uid) = ("TerraformMachinePool".into(), "p".into(), "o2".into());
            p.owners = owners.iter().map(|u| u.to_string()).collect();
            h.insert_object(p);
            assert_eq!(no_member_job_while_its_cluster_job_runs(&h).len(), 1, "{owners:?}");
        }
    }

    #[test]
    fn no_job_before_the_backoff_allows_counts_failures_since_the_last_success() {
        // Failures at 100 s and (after 1 min) 190 s: the third try may start at 190 + 120.
        let jobs = vec![
            job("a1", "apply", (0, 10), Some((100, 11)), Some(End::Failure)),
            job("a2", "apply", (160, 12), Some((190, 13)), Some(End::Failure)),
            job("a3", "apply", (310, 14), Some((320, 15)), Some(End::Success)),
            job("a4", "apply", (330, 16), Some((340, 17)), Some(End::Failure)),
        ];
        assert_eq!(no_job_before_the_backoff_allows(&history(jobs.clone())), vec![]);
        let mut early = jobs;
        early[2].created = t(309);
        let found = no_job_before_the_backoff_allows(&history(early));
        assert_eq!(found.len(), 1);
        assert!(found[0].detail.contains("before the 120s"), "{}", found[0].detail);
        // An interruption is no failure: the next try may start at once, yet the delay from
        // the newest failure still holds.
        let jobs = vec![
            job("a1", "apply", (0, 10), Some((100, 11)), Some(End::Failure)),
            job("a2", "apply", (160, 12), Some((170, 13)), Some(End::Neutral)),
            job("a3", "apply", (171, 14), None, None),
        ];
        assert_eq!(no_job_before_the_backoff_allows(&history(jobs)), vec![]);
        // Other ops' failures don't count.
        let jobs = vec![
            job("d1", "drift", (0, 10), Some((100, 11)), Some(End::Failure)),
            job("a1", "apply", (101, 12), None, None),
        ];
        assert_eq!(no_job_before_the_backoff_allows(&history(jobs)), vec![]);
    }

    #[test]
    fn force_unlock_only_of_the_objects_own_dead_runner_refuses_workstations_and_live_pods() {
        let mut h = history(vec![]);
        h.pods.insert(
            ("default".into(), "tc-x-apply-1-abcde".into()),
            PodFact {
                job_uid: "uid-a1".into(),
                object: "TerraformCluster.default.c".into(),
                ended_rv: Some(20),
            },
        );
        let lock = |id: &str, who: &str, rv| LockTaken {
            ns: "default".into(),
            lease: "lock-tfstate-default-x".into(),
            id: id.into(),
            who: who.into(),
            rv,
        };
        h.locks = vec![
            lock("L1", "root@tc-x-apply-1-abcde", 12),
            lock("W1", "alice@workstation", 40),
        ];
        let mut a2 = job("a2", "apply", (60, 30), None, None);
        a2.force_unlock = Some("L1".into());
        h.jobs = vec![a2.clone()];
        assert_eq!(force_unlock_only_of_the_objects_own_dead_runner(&h), vec![]);
        // The pod still ran when the Job was made.
        a2.created_rv = 19;
        h.jobs = vec![a2.clone()];
        assert_eq!(force_unlock_only_of_the_objects_own_dead_runner(&h).len(), 1);
        // A workstation's lock.
        a2.created_rv = 50;
        a2.force_unlock = Some("W1".into());
        h.jobs = vec![a2];
        let found = force_unlock_only_of_the_objects_own_dead_runner(&h);
        assert!(found[0].detail.contains("alice@workstation"), "{found:?}");
    }

    #[test]
    fn every_finished_job_booked_exactly_once_wants_one_matching_outcome_and_one_event() {
        use crate::history::EventFact;
        let mut h = history(vec![job("a1", "apply", (0, 10), Some((30, 20)), Some(End::Failure))]);
        let ev = |count| EventFact {
            ns: "default".into(),
            name: "e1".into(),
            reason: "JobFailed".into(),
            job: "a1".into(),
            count,
            rv: 21,
        };
        h.events = vec![ev(1)];
        assert_eq!(every_finished_job_booked_exactly_once(&h, t(100)), vec![]);
        h.events = vec![ev(2)];
        assert_eq!(every_finished_job_booked_exactly_once(&h, t(100)).len(), 1);
        h.events = vec![ev(1)];
        h.jobs[0].outcomes = vec![Some("interrupted".into())];
        assert!(
            every_finished_job_booked_exactly_once(&h, t(100))
                .iter()
                .any(|v| v.detail.contains("booked \"interrupted\""))
        );
        h.jobs[0].outcomes = vec![];
        assert!(
            every_finished_job_booked_exactly_once(&h, t(100))
                .iter()
                .any(|v| v.detail.contains("never booked"))
        );
    }

    #[test]
    fn finished_counts_match_the_bookings_shares_out_the_bookings_two_leaders_can_have_made() {
        let set = |ls: &[&str]| ls.iter().map(|l| l.to_string()).collect::<BTreeSet<String>>();
        let counts = |cs: &[(&str, u64)]| cs.iter().map(|(n, c)| (n.to_string(), *c)).collect::<BTreeMap<_, _>>();
        let check = |b: &[BTreeSet<String>], c: &[(&str, u64)]| finished_counts_match_the_bookings(b, &counts(c), t(0));
        // One booker each (one instance): the counts are exact.
        let single = vec![set(&["a"]), set(&["a"]), set(&["b"]), set(&["dead"])];
        assert_eq!(check(&single, &[("a", 2), ("b", 1)]), vec![]);
        let found = check(&single, &[("a", 3), ("b", 1)]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].detail,
            "captf_jobs_finished_total is 3, yet it booked 2 Jobs while it led"
        );
        // Two bookings right after a relabel, each either a's or b's.
        let shared = vec![set(&["a", "b"]), set(&["a", "b"])];
        for ok in [[("a", 1), ("b", 1)], [("a", 2), ("b", 0)], [("a", 0), ("b", 2)]] {
            assert_eq!(check(&shared, &ok), vec![], "{ok:?}");
        }
        // Each within its range, yet three counted for two bookings: one was counted twice.
        let found = check(&shared, &[("a", 2), ("b", 1)]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("cannot be the 2 bookings"), "{}", found[0]);
        // A booking only a or b can have made is in neither count.
        assert_eq!(check(&shared, &[("a", 1), ("b", 0)]).len(), 1);
        // Unless a leader that is not counted (it died) can have made it.
        let with_dead = vec![set(&["a", "b"]), set(&["a", "dead"])];
        assert_eq!(check(&with_dead, &[("a", 1), ("b", 0)]), vec![]);
        assert_eq!(check(&with_dead, &[("a", 0), ("b", 0)]).len(), 1);
        assert_eq!(check(&with_dead, &[("a", 2), ("b", 0)]), vec![]);
    }

    #[test]
    fn an_outcome_once_written_never_changes_flags_a_rewrite() {
        let mut j = job("a1", "apply", (0, 10), Some((30, 20)), Some(End::Success));
        assert_eq!(an_outcome_once_written_never_changes(&history(vec![j.clone()])), vec![]);
        j.outcomes.push(None);
        assert_eq!(an_outcome_once_written_never_changes(&history(vec![j])).len(), 1);
    }

    #[test]
    fn every_deleted_object_is_destroyed_and_released_wants_a_successful_destroy_first() {
        let mut h = history(vec![job("x1", "destroy", (0, 10), Some((30, 20)), Some(End::Failure))]);
        h.objects[0].deletion_requested = Some(t(0));
        h.objects[0].status = serde_json::json!({
            "nextAction": {"op": "destroy", "reason": "MembersExist"},
            "conditions": [{"type": "UpToDate", "status": "False", "reason": "MembersExist", "message": "m1 exists"}],
        });
        let stuck = every_deleted_object_is_destroyed_and_released(&h, t(100));
        assert_eq!(stuck.len(), 1);
        // What it waits for is in the report.
        assert!(
            stuck[0]
                .detail
                .contains("next action destroy MembersExist, activeJob -, UpToDate False MembersExist: m1 exists"),
            "{}",
            stuck[0]
        );
        h.objects[0].removed = Some(t(40));
        assert_eq!(every_deleted_object_is_destroyed_and_released(&h, t(100)).len(), 1);
        h.jobs
            .push(job("x2", "destroy", (35, 21), Some((38, 22)), Some(End::Success)));
        assert_eq!(every_deleted_object_is_destroyed_and_released(&h, t(100)), vec![]);
        h.objects[0].orphan = true;
        assert_eq!(every_deleted_object_is_destroyed_and_released(&h, t(100)).len(), 1);
    }

    #[test]
    fn pruning_leaves_no_job_behind_counts_kept_jobs_per_op_and_outcome() {
        let jobs = vec![
            job("a1", "apply", (0, 10), Some((30, 20)), Some(End::Success)),
            job("a2", "apply", (40, 21), Some((50, 22)), Some(End::Success)),
        ];
        assert_eq!(pruning_leaves_no_job_behind(&history(jobs.clone()), t(100)).len(), 1);
        let mut pruned = jobs;
        pruned[0].deleted_rv = Some(23);
        assert_eq!(pruning_leaves_no_job_behind(&history(pruned), t(100)), vec![]);
    }

    #[test]
    fn an_interrupted_apply_is_applied_again_unless_the_object_went() {
        let mut h = history(vec![job("a1", "apply", (0, 10), Some((30, 20)), Some(End::Neutral))]);
        assert_eq!(an_interrupted_apply_is_applied_again(&h, t(100)).len(), 1);
        h.jobs
            .push(job("a2", "apply", (31, 21), Some((60, 30)), Some(End::Success)));
        assert_eq!(an_interrupted_apply_is_applied_again(&h, t(100)), vec![]);
        h.jobs.pop();
        h.objects[0].deletion_requested = Some(t(50));
        assert_eq!(an_interrupted_apply_is_applied_again(&h, t(100)), vec![]);
    }
}

//! The soak's record of what happened: every change the simulator made, reduced as it happens
//! to the few facts the invariants need (Jobs, their pods, the state locks, the Events about
//! Jobs, the objects' deletion and status), so days of simulated time fit in memory.
//!
//! [`History::record`] is fed by the simulator's lossless observer ([`captf_sim::Sim::observe`])
//! in resourceVersion order; it reads nothing else, so a test can feed it hand-made changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use captf_core::sharding::{LEADER_LEASE, SHARD_LABEL};
use captf_shared::keys;
use captf_shared::protocol::RunResult;
use jiff::Timestamp;
use serde_json::Value;

use captf_sim::store::{EventType, WatchEvent};

/// How a Job ended, classified from the Job and its pod alone (not from the controller's
/// outcome annotation): what the backoff rule counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// `Complete`.
    Success,
    /// Killed at its deadline, or failed with no result the rules exempt.
    Failure,
    /// Failed, but not a failure: interrupted (eviction, SIGTERM before the deadline), blocked,
    /// plan-changed.
    Neutral,
}

/// One Job, from its creation to its removal.
#[derive(Clone, Debug, PartialEq)]
pub struct JobFact {
    pub ns: String,
    pub name: String,
    pub uid: String,
    /// `captf.io/object`.
    pub object: String,
    /// The uid of the owning CAPTF object (the object's incarnation).
    pub owner_uid: String,
    pub kind: String,
    pub op: String,
    /// `cluster.x-k8s.io/cluster-name`.
    pub cluster: Option<String>,
    /// `captf.io/force-unlock`: the lock ID handed to this Job.
    pub force_unlock: Option<String>,
    pub created: Timestamp,
    pub created_rv: u64,
    /// When `Complete` or `Failed` became True (simulated time, resourceVersion).
    pub finished: Option<(Timestamp, u64)>,
    /// `Complete` (not `Failed`).
    pub complete: bool,
    /// `Failed` with reason `DeadlineExceeded`.
    pub deadline: bool,
    /// The pod's runner exit code, when it ended.
    pub exit_code: Option<i32>,
    /// The pod had `DisruptionTarget`.
    pub disrupted: bool,
    /// Every value `captf.io/outcome` took, in order (None: removed).
    pub outcomes: Vec<Option<String>>,
    /// The resourceVersion of the first outcome write (the booking).
    pub booked_rv: Option<u64>,
    /// The wall-clock instant of the booking.
    pub booked_wall: Option<Instant>,
    pub deleted_rv: Option<u64>,
}

impl JobFact {
    /// Was the Job running (created, not finished, not deleted) at resourceVersion `rv`?
    pub fn active_at(&self, rv: u64) -> bool {
        self.created_rv < rv && self.finished.is_none_or(|(_, f)| f > rv) && self.deleted_rv.is_none_or(|d| d > rv)
    }

    /// How it ended, if it did.
    pub fn end(&self) -> Option<End> {
        self.finished?;
        Some(classify(self.deadline, self.exit_code, self.disrupted, self.complete))
    }

    /// The outcome annotation it ended with.
    pub fn outcome(&self) -> Option<&str> {
        self.outcomes.last().and_then(|o| o.as_deref())
    }
}

/// The rules' classification of a finished Job, from the Job's `Failed` reason and the pod.
pub fn classify(deadline: bool, exit_code: Option<i32>, disrupted: bool, complete: bool) -> End {
    if complete {
        return End::Success;
    }
    if deadline {
        return End::Failure;
    }
    let neutral = [RunResult::Interrupted, RunResult::Blocked, RunResult::PlanChanged].map(RunResult::exit_code);
    if disrupted || exit_code.is_some_and(|c| neutral.contains(&c)) {
        End::Neutral
    } else {
        End::Failure
    }
}

impl ObjectFact {
    /// Its shard label at resourceVersion `rv` (as created, before its first change).
    pub fn shard_at(&self, rv: u64) -> Option<&str> {
        self.shards
            .iter()
            .take_while(|(at, _, _)| *at <= rv)
            .last()
            .or(self.shards.first())
            .and_then(|(_, _, s)| s.as_deref())
    }

    /// Every shard label it had from the wall-clock instant `from` up to resourceVersion `to`.
    pub fn shards_since(&self, from: Instant, to: u64) -> Vec<Option<&str>> {
        let before = self
            .shards
            .iter()
            .take_while(|(_, wall, _)| *wall <= from)
            .last()
            .or(self.shards.first());
        let mut out: Vec<Option<&str>> = before
            .into_iter()
            .chain(self.shards.iter().filter(|(rv, wall, _)| *wall > from && *rv <= to))
            .map(|(_, _, s)| s.as_deref())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// A runner pod: which Job's, and when it stopped running.
#[derive(Clone, Debug, PartialEq)]
pub struct PodFact {
    pub job_uid: String,
    pub object: String,
    /// The resourceVersion at which it stopped running (terminated or removed).
    pub ended_rv: Option<u64>,
}

/// One taking of a Terraform state lock.
#[derive(Clone, Debug, PartialEq)]
pub struct LockTaken {
    pub ns: String,
    pub lease: String,
    pub id: String,
    /// `Who` of the lock info.
    pub who: String,
    pub rv: u64,
}

/// An Event about a Job.
#[derive(Clone, Debug, PartialEq)]
pub struct EventFact {
    pub ns: String,
    pub name: String,
    pub reason: String,
    pub job: String,
    pub count: i64,
    pub rv: u64,
}

/// One CAPTF object incarnation (by uid).
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectFact {
    pub kind: String,
    pub ns: String,
    pub name: String,
    pub uid: String,
    /// `spec.jobs.failedJobsHistoryLimit` (default 3) and `successfulJobsHistoryLimit` (1).
    pub failed_limit: u32,
    pub successful_limit: u32,
    pub orphan: bool,
    /// Its shard label (`sharding.captf.io/key`) from each change of it (resourceVersion and
    /// wall-clock instant; None: no shard), first as created.
    pub shards: Vec<(u64, Instant, Option<String>)>,
    pub deletion_requested: Option<Timestamp>,
    pub removed: Option<Timestamp>,
    /// The last status seen.
    pub status: Value,
    /// The UIDs its owner references named, as last seen (a member owned by its cluster names the
    /// cluster's UID: a verified member).
    pub owners: Vec<String>,
}

/// Everything recorded.
#[derive(Debug, Default)]
pub struct History {
    pub jobs: Vec<JobFact>,
    job_index: HashMap<String, usize>,
    /// By (namespace, pod name).
    pub pods: HashMap<(String, String), PodFact>,
    pub locks: Vec<LockTaken>,
    pub events: Vec<EventFact>,
    pub objects: Vec<ObjectFact>,
    object_index: HashMap<String, usize>,
    /// Per leader Lease (`captf-controller-leader`, and `captf-controller-leader-<hash>` of
    /// each shard's selector): its holder identities in order of change, each with the
    /// resourceVersion it took over at.
    pub leaders: BTreeMap<String, Vec<(u64, String)>>,
    /// Per state Secret name (`tfstate-…`): how its binding changed and when objects of its
    /// name came and went (at most [`BINDING_TRACE`] lines each), for the report of an object
    /// held with `NameConflict`.
    pub bindings: HashMap<String, std::collections::VecDeque<String>>,
    /// Times an object began to wait for a runner slot (`status.nextAction.reason: Queued`).
    pub queued: usize,
    /// Changes seen.
    pub changes: u64,
    pub first: Option<Timestamp>,
    pub last: Option<Timestamp>,
}

const CAPTF_KINDS: [&str; 3] = ["TerraformCluster", "TerraformMachinePool", "TerraformMachine"];

/// How long (wall time) an instance may still act on an object after it was relabelled out of
/// its selection: kube's watcher backs off up to 30 s before it lists again after an error
/// (an expired watch's 410 among them), plus a reconcile that began on the stale copy.
pub const STALE_STORE: Duration = Duration::from_secs(60);

/// Lines kept per state Secret in [`History::bindings`].
pub const BINDING_TRACE: usize = 40;

/// A controller's leader Lease: the one of every object, or a shard's.
fn is_leader_lease(name: &str) -> bool {
    name.strip_prefix(LEADER_LEASE)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
}

/// The uid of the CAPTF object that owns `v` (a Job, a run Lease).
fn captf_owner(v: &Value) -> Option<&str> {
    v.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| CAPTF_KINDS.contains(&r["kind"].as_str().unwrap_or_default()))?["uid"]
        .as_str()
}

fn s<'a>(v: &'a Value, p: &str) -> Option<&'a str> {
    v.pointer(p).and_then(Value::as_str)
}

fn label<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

fn annotation<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.pointer("/metadata/annotations")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

/// The condition of this type in an object's status, if any.
pub(crate) fn condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// The condition `type_` of `v` when it is `True`, with its reason.
pub(crate) fn condition_true(v: &Value, type_: &str) -> Option<Option<String>> {
    v.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_ && c["status"] == "True")
        .map(|c| c["reason"].as_str().map(String::from))
}

impl History {
    /// Take one change in.
    pub fn record(&mut self, now: Timestamp, ev: &WatchEvent) {
        self.changes += 1;
        self.first.get_or_insert(now);
        self.last = Some(now);
        match ev.res.as_str() {
            "batch/jobs" => self.job(now, ev),
            "/pods" => self.pod(ev),
            "coordination.k8s.io/leases" => self.lease(ev),
            "/events" => self.event(ev),
            "/secrets" => self.state_secret(now, ev),
            r if r.starts_with(keys::GROUP) => self.object(now, ev),
            _ => {}
        }
    }

    fn job(&mut self, now: Timestamp, ev: &WatchEvent) {
        let o = &ev.object;
        let Some(uid) = s(o, "/metadata/uid") else { return };
        let Some(object) = label(o, keys::LABEL_OBJECT) else {
            return;
        };
        let i = match self.job_index.get(uid) {
            Some(&i) => i,
            None => {
                let owner_uid = captf_owner(o).unwrap_or_default();
                self.jobs.push(JobFact {
                    ns: ev.ns.clone(),
                    name: s(o, "/metadata/name").unwrap_or_default().into(),
                    uid: uid.into(),
                    object: object.into(),
                    owner_uid: owner_uid.into(),
                    kind: label(o, keys::LABEL_KIND).unwrap_or_default().into(),
                    op: label(o, keys::LABEL_OP).unwrap_or_default().into(),
                    cluster: label(o, keys::LABEL_CLUSTER_NAME).map(String::from),
                    force_unlock: annotation(o, keys::ANNOTATION_FORCE_UNLOCK).map(String::from),
                    created: now,
                    created_rv: ev.rv,
                    finished: None,
                    complete: false,
                    deadline: false,
                    exit_code: None,
                    disrupted: false,
                    outcomes: Vec::new(),
                    booked_rv: None,
                    booked_wall: None,
                    deleted_rv: None,
                });
                self.job_index.insert(uid.into(), self.jobs.len() - 1);
                self.jobs.len() - 1
            }
        };
        let j = &mut self.jobs[i];
        if j.finished.is_none() {
            let complete = condition_true(o, "Complete").is_some();
            let failed = condition_true(o, "Failed");
            if complete || failed.is_some() {
                j.finished = Some((now, ev.rv));
                j.complete = complete;
                j.deadline = failed.flatten().as_deref() == Some("DeadlineExceeded");
            }
        }
        let outcome = annotation(o, keys::ANNOTATION_OUTCOME).map(String::from);
        if (outcome.is_some() || !j.outcomes.is_empty()) && j.outcomes.last() != Some(&outcome) {
            j.outcomes.push(outcome);
            j.booked_rv.get_or_insert(ev.rv);
            j.booked_wall.get_or_insert(ev.wall);
        }
        if ev.kind == EventType::Deleted {
            j.deleted_rv.get_or_insert(ev.rv);
        }
    }

    fn pod(&mut self, ev: &WatchEvent) {
        let o = &ev.object;
        let Some(job_uid) = label(o, "batch.kubernetes.io/controller-uid") else {
            return;
        };
        let Some(object) = label(o, keys::LABEL_OBJECT) else {
            return;
        };
        let key = (ev.ns.clone(), s(o, "/metadata/name").unwrap_or_default().to_string());
        let pod = self.pods.entry(key).or_insert_with(|| PodFact {
            job_uid: job_uid.into(),
            object: object.into(),
            ended_rv: None,
        });
        let terminated = o.pointer("/status/containerStatuses/0/state/terminated");
        if pod.ended_rv.is_none() && (terminated.is_some() || ev.kind == EventType::Deleted) {
            pod.ended_rv = Some(ev.rv);
        }
        let Some(&i) = self.job_index.get(job_uid) else { return };
        let j = &mut self.jobs[i];
        if let Some(code) = terminated.and_then(|t| t["exitCode"].as_i64()) {
            j.exit_code = i32::try_from(code).ok();
        }
        if condition_true(o, "DisruptionTarget").is_some() {
            j.disrupted = true;
        }
    }

    fn lease(&mut self, ev: &WatchEvent) {
        let o = &ev.object;
        let name = s(o, "/metadata/name").unwrap_or_default();
        let holder = s(o, "/spec/holderIdentity").filter(|h| !h.is_empty());
        if is_leader_lease(name) {
            let leaders = self.leaders.entry(name.into()).or_default();
            if let Some(h) = holder
                && leaders.last().map(|(_, l)| l.as_str()) != Some(h)
            {
                leaders.push((ev.rv, h.into()));
            }
            return;
        }
        if !name.starts_with("lock-tfstate-") {
            return;
        }
        let Some(id) = holder else { return };
        let was = ev.old.as_ref().and_then(|old| s(old, "/spec/holderIdentity"));
        if was == Some(id) {
            return;
        }
        let who = annotation(o, keys::ANNOTATION_TF_LOCK_INFO)
            .and_then(|i| serde_json::from_str::<Value>(i).ok())
            .and_then(|i| i["Who"].as_str().map(String::from))
            .unwrap_or_default();
        self.locks.push(LockTaken {
            ns: ev.ns.clone(),
            lease: name.into(),
            id: id.into(),
            who,
            rv: ev.rv,
        });
    }

    fn event(&mut self, ev: &WatchEvent) {
        let o = &ev.object;
        if s(o, "/related/kind") != Some("Job") || ev.kind == EventType::Deleted {
            return;
        }
        let name = s(o, "/metadata/name").unwrap_or_default();
        let fact = EventFact {
            ns: ev.ns.clone(),
            name: name.into(),
            reason: s(o, "/reason").unwrap_or_default().into(),
            job: s(o, "/related/name").unwrap_or_default().into(),
            count: o.pointer("/count").and_then(Value::as_i64).unwrap_or(1),
            rv: ev.rv,
        };
        match self
            .events
            .iter_mut()
            .rev()
            .find(|e| e.ns == fact.ns && e.name == fact.name)
        {
            Some(e) => *e = fact,
            None => self.events.push(fact),
        }
    }

    fn trace(&mut self, state: String, line: String) {
        let t = self.bindings.entry(state).or_default();
        if t.len() == BINDING_TRACE {
            t.pop_front();
        }
        t.push_back(line);
    }

    /// A state Secret's binding annotations, when they changed.
    fn state_secret(&mut self, now: Timestamp, ev: &WatchEvent) {
        let o = &ev.object;
        let Some(name) = s(o, "/metadata/name").filter(|n| n.starts_with("tfstate-")) else {
            return;
        };
        let binding = |v: &Value| {
            (
                annotation(v, keys::ANNOTATION_OWNER_UID).map(String::from),
                annotation(v, keys::ANNOTATION_RELEASED_BY).map(String::from),
            )
        };
        let new = binding(o);
        if ev.kind != EventType::Deleted && ev.old.as_ref().map(binding) == Some(new.clone()) {
            return;
        }
        let line = format!(
            "{now} rv {}: Secret {name} {:?}: owner-uid {:?}, released-by {:?}",
            ev.rv, ev.kind, new.0, new.1
        );
        self.trace(format!("{}/{name}", ev.ns), line);
    }

    fn object(&mut self, now: Timestamp, ev: &WatchEvent) {
        let o = &ev.object;
        let kind = s(o, "/kind").unwrap_or_default();
        if !CAPTF_KINDS.contains(&kind) {
            return;
        }
        let Some(uid) = s(o, "/metadata/uid") else { return };
        let deleting = o.pointer("/metadata/deletionTimestamp").is_some();
        let was_deleting = ev
            .old
            .as_ref()
            .is_some_and(|v| v.pointer("/metadata/deletionTimestamp").is_some());
        let came = ev.kind == EventType::Added && !self.object_index.contains_key(uid);
        if (came || ev.kind == EventType::Deleted || deleting != was_deleting)
            && let (Ok(k), Some(name)) = (kind.parse::<captf_shared::Kind>(), s(o, "/metadata/name"))
        {
            let what = match (came, ev.kind == EventType::Deleted) {
                (true, _) => "created",
                (_, true) => "removed",
                _ => "deletion requested",
            };
            let state = captf_shared::names::state_secret_name(&captf_shared::names::suffix(k, &ev.ns, name));
            let line = format!("{now} rv {}: {kind} {name} (uid {uid}) {what}", ev.rv);
            self.trace(format!("{}/{state}", ev.ns), line);
        }
        let i = match self.object_index.get(uid) {
            Some(&i) => i,
            None => {
                let limit = |p: &str, d: u32| {
                    o.pointer(p)
                        .and_then(Value::as_u64)
                        .and_then(|v| u32::try_from(v).ok())
                        .unwrap_or(d)
                };
                self.objects.push(ObjectFact {
                    kind: kind.into(),
                    ns: ev.ns.clone(),
                    name: s(o, "/metadata/name").unwrap_or_default().into(),
                    uid: uid.into(),
                    failed_limit: limit("/spec/jobs/failedJobsHistoryLimit", 3),
                    successful_limit: limit("/spec/jobs/successfulJobsHistoryLimit", 1),
                    orphan: s(o, "/spec/deletionPolicy") == Some("Orphan"),
                    shards: Vec::new(),
                    deletion_requested: None,
                    removed: None,
                    status: Value::Null,
                    owners: Vec::new(),
                });
                self.object_index.insert(uid.into(), self.objects.len() - 1);
                self.objects.len() - 1
            }
        };
        let f = &mut self.objects[i];
        let shard = label(o, SHARD_LABEL).map(String::from);
        if f.shards.last().is_none_or(|(_, _, s)| *s != shard) {
            f.shards.push((ev.rv, ev.wall, shard));
        }
        if o.pointer("/metadata/deletionTimestamp").is_some() {
            f.deletion_requested.get_or_insert(now);
        }
        f.owners = o
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| r["uid"].as_str().map(String::from))
            .collect();
        if let Some(st) = o.get("status") {
            let queued = |st: &Value| st.pointer("/nextAction/reason").and_then(Value::as_str) == Some("Queued");
            if queued(st) && !queued(&f.status) {
                self.queued += 1;
            }
            f.status = st.clone();
        }
        if ev.kind == EventType::Deleted {
            f.removed.get_or_insert(now);
        }
    }

    /// Who held leader Lease `lease` at resourceVersion `rv`.
    pub fn leader_at(&self, lease: &str, rv: u64) -> Option<&str> {
        self.leaders
            .get(lease)?
            .iter()
            .take_while(|(at, _)| *at <= rv)
            .last()
            .map(|(_, l)| l.as_str())
    }

    /// Who holds leader Lease `lease` now.
    pub fn leader(&self, lease: &str) -> Option<&str> {
        self.leaders.get(lease)?.last().map(|(_, l)| l.as_str())
    }

    /// Changes of holder over every leader Lease.
    pub fn leader_changes(&self) -> usize {
        self.leaders.values().map(|l| l.len().saturating_sub(1)).sum()
    }

    /// The object incarnation with this uid.
    /// Records an object as if it had been seen (a test's hand-made history).
    #[cfg(test)]
    pub(crate) fn insert_object(&mut self, o: ObjectFact) {
        self.object_index.insert(o.uid.clone(), self.objects.len());
        self.objects.push(o);
    }

    pub fn object_by_uid(&self, uid: &str) -> Option<&ObjectFact> {
        self.object_index.get(uid).map(|&i| &self.objects[i])
    }

    /// The shard label, at resourceVersion `rv`, of the CAPTF object owning `v` (a Job, a run
    /// Lease): `None` when the owner is unknown, `Some(None)` when it had no shard.
    pub fn owner_shard_at(&self, v: &Value, rv: u64) -> Option<Option<&str>> {
        Some(self.object_by_uid(captf_owner(v)?)?.shard_at(rv))
    }

    /// Who can have made each booking (first outcome write): the leaders that can have
    /// written it, one set per booked Job.
    ///
    /// A booking is made by the leader of the instance serving the Job's object (`lease_of`
    /// names the leader Lease of the instance serving a shard label). After a relabel the old
    /// instance still acts on the object until its watch has reported the change: at once
    /// usually, but a watch that expired (410 Gone) is listed again only after the watcher's
    /// backoff, and meanwhile the simulator looks quiet. So a booking counts for the leaders of
    /// every instance that served its object in the [`STALE_STORE`] of wall time before it;
    /// with one instance it is always exactly one leader.
    pub fn bookers(&self, lease_of: impl Fn(Option<&str>) -> String) -> Vec<BTreeSet<String>> {
        let mut out = Vec::new();
        for j in &self.jobs {
            let (Some(rv), Some(wall)) = (j.booked_rv, j.booked_wall) else {
                continue;
            };
            let labels = match self.object_by_uid(&j.owner_uid) {
                Some(o) => match wall.checked_sub(STALE_STORE) {
                    Some(since) => o.shards_since(since, rv),
                    None => o.shards.iter().map(|(_, _, s)| s.as_deref()).collect(),
                },
                None => vec![None],
            };
            out.push(
                labels
                    .into_iter()
                    .filter_map(|l| self.leader_at(&lease_of(l), rv).map(String::from))
                    .collect(),
            );
        }
        out
    }

    /// The Job with this uid.
    pub fn job_by_uid(&self, uid: &str) -> Option<&JobFact> {
        self.job_index.get(uid).map(|&i| &self.jobs[i])
    }

    /// Jobs that finished, by the rules' classification.
    pub fn ends(&self) -> BTreeMap<&'static str, usize> {
        let mut m = BTreeMap::new();
        for j in &self.jobs {
            let k = match j.end() {
                Some(End::Success) => "succeeded",
                Some(End::Failure) => "failed",
                Some(End::Neutral) => "neither",
                None => continue,
            };
            *m.entry(k).or_default() += 1;
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_booking_soon_after_a_relabel_may_be_either_instances_later_only_the_new_ones() {
        let t0 = Instant::now();
        let mut h = History::default();
        h.objects.push(ObjectFact {
            kind: "TerraformCluster".into(),
            ns: "soak".into(),
            name: "g0".into(),
            uid: "o1".into(),
            failed_limit: 3,
            successful_limit: 1,
            orphan: false,
            shards: vec![
                (10, t0, Some("shard-0".into())),
                (20, t0 + Duration::from_secs(5), None),
            ],
            deletion_requested: None,
            removed: None,
            status: Value::Null,
            owners: Vec::new(),
        });
        h.object_index.insert("o1".into(), 0);
        h.leaders.insert("lease-0".into(), vec![(1, "a".into())]);
        h.leaders
            .insert("lease-rest".into(), vec![(1, "b".into()), (28, "c".into())]);
        let booked = |name: &str, rv: u64, after: u64| JobFact {
            ns: "soak".into(),
            name: name.into(),
            uid: name.into(),
            object: "TerraformCluster.soak.g0".into(),
            owner_uid: "o1".into(),
            kind: "TerraformCluster".into(),
            op: "apply".into(),
            cluster: Some("g0".into()),
            force_unlock: None,
            created: Timestamp::UNIX_EPOCH,
            created_rv: rv - 1,
            finished: None,
            complete: false,
            deadline: false,
            exit_code: None,
            disrupted: false,
            outcomes: vec![Some("succeeded".into())],
            booked_rv: Some(rv),
            booked_wall: Some(t0 + Duration::from_secs(after)),
            deleted_rv: None,
        };
        h.jobs = vec![
            booked("before", 15, 2),
            booked("just-after", 25, 10),
            booked("long-after", 30, 5 + STALE_STORE.as_secs() + 1),
        ];
        let lease_of = |l: Option<&str>| if l == Some("shard-0") { "lease-0" } else { "lease-rest" }.to_string();
        let names = |ls: &[&str]| ls.iter().map(|l| l.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(
            h.bookers(lease_of),
            vec![names(&["a"]), names(&["a", "b"]), names(&["c"])]
        );
    }

    #[test]
    fn a_job_is_classified_from_its_deadline_exit_code_and_disruption_alone() {
        assert_eq!(classify(false, Some(0), false, true), End::Success);
        assert_eq!(classify(true, Some(5), false, false), End::Failure);
        assert_eq!(classify(false, Some(1), false, false), End::Failure);
        assert_eq!(classify(false, Some(137), false, false), End::Failure);
        assert_eq!(classify(false, None, false, false), End::Failure);
        for neutral in [3, 4, 5] {
            assert_eq!(classify(false, Some(neutral), false, false), End::Neutral);
        }
        assert_eq!(classify(false, None, true, false), End::Neutral);
    }
}

//! Runner slots (docs/rules.md, "Runner slots"): the one place where a pass asks whether it may
//! create a runner Job, under `--max-running-jobs` and `--max-running-jobs-per-namespace`.
//!
//! What runs is counted from the Jobs themselves, never from a counter of our own: the Jobs
//! stores' running index ([`RunningJobs`], kept from the same watch events as the stores: a
//! CAPTF Job without a `Complete` or `Failed` condition), so a new leader or a restarted
//! controller counts what its predecessor started. To that it adds the Jobs this process has
//! admitted and not yet seen in a store (a reservation, taken under the same lock as the
//! decision): two passes that ask at once are answered one after the other, and the second sees
//! the first's Job as running whether or not it exists yet. A reservation ends when the store
//! shows its Job (that Job: the UID the create answered with, since a re-created object's Jobs
//! take the names its earlier incarnation's had), when the pass gives up the start (the
//! [`Permit`] dropped uncommitted), or, as a last resort after a watch lost the Job's whole
//! life, after [`RESERVATION_TTL`]; until then it counts, so the count errs towards fewer Jobs,
//! never more.
//!
//! The objects that were refused wait in a queue with their class and the time they began to
//! wait; the order and everyone's place is `captf_core::queue::admit`'s. When a Job finishes or
//! goes, or a reservation is given up, the objects that may now start are woken at once
//! ([`Slots::freed`], [`Slots::due`]); the others look again every `QUEUE_LOOK`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher;
use tokio::sync::watch;

use captf_core::queue::{self, Candidate, Class, Key, Limits, Load, Place};
use captf_shared::Kind;

use super::locking::lock;
use super::retry::ObjectKey;
use super::stored::StoredJob;

/// How long a created Job that no store has shown counts as running (a watch that lost the
/// Job's whole life: created, finished and deleted while it was down).
pub const RESERVATION_TTL: Duration = Duration::from_secs(600);
/// A queued object that has not asked again for this long (controller clock; three of its
/// looks) is passed over: it was deleted, or its passes fail, and an object first in line that
/// never comes would hold the others back. It keeps its place if it asks again.
const STALE: Duration = Duration::from_secs(90);
/// A queued object that has not asked again for this long is forgotten.
const FORGET: Duration = Duration::from_secs(3600);
/// Jobs that left a store (name and UID), remembered so a reservation sees its Job's short
/// life.
const GONE_MEMORY: usize = 4096;

/// The position of a kind in per-kind arrays.
fn slot(kind: Kind) -> usize {
    match kind {
        Kind::TerraformCluster => 0,
        Kind::TerraformMachinePool => 1,
        Kind::TerraformMachine => 2,
    }
}

/// The UID of the object of a kind, namespace and name in the kinds' stores, if they hold it.
pub type OwnerUid = Arc<dyn Fn(Kind, &str, &str) -> Option<String> + Send + Sync>;

/// The CAPTF Jobs the stores hold and whether each runs, with the running ones and the object
/// each claims to run for, kept from the Jobs feeds' events (cheap to clone; one per set of
/// stores). A running Job counts against the slots only when it is the controller's: its
/// controller owner reference names one of CAPTF's objects whose Jobs carry its name
/// (`captf_core::membership::job_owner`), and that object is in the kinds' stores with that UID.
/// Labels are a claim anyone who may create Jobs can make, so a Job with CAPTF's labels and no
/// such owner takes no slot. When the stores hold only some objects (a shard's label selector),
/// a Job whose owner they do not hold is another shard's and counts (docs/operating.md,
/// "Sharding": every instance counts every runner Job it sees).
#[derive(Clone)]
pub struct RunningJobs {
    state: Arc<RwLock<RunningState>>,
    /// Bumped whenever a running Job finishes or leaves a store.
    freed: Arc<watch::Sender<u64>>,
    owner_uid: OwnerUid,
    /// The kinds' stores hold only the objects of a label selector.
    partial: bool,
}

impl std::fmt::Debug for RunningJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningJobs")
            .field("state", &self.state)
            .field("partial", &self.partial)
            .finish_non_exhaustive()
    }
}

/// The object a running Job claims to run for (its controller owner reference).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Claim {
    kind: Kind,
    name: String,
    uid: String,
}

#[derive(Debug, Default)]
struct RunningState {
    /// Per kind: (namespace, name) → running.
    jobs: [HashMap<(String, String), bool>; 3],
    /// The running Jobs that claim an owner, every kind.
    running: HashMap<(String, String), Claim>,
    /// The newest creation time of a Job seen per namespace (whose turn it was last).
    last_start: HashMap<String, Timestamp>,
    /// The UID of each Job the stores hold.
    uids: HashMap<(String, String), String>,
    gone: VecDeque<GoneJob>,
    gone_set: HashSet<GoneJob>,
}

/// A Job that left a store: its namespace and name, and its UID.
type GoneJob = ((String, String), String);

impl RunningState {
    /// Set (or, with `None`, remove) one Job: whether it runs, the owner it claims and its UID;
    /// true when a running Job stopped running.
    fn set(&mut self, kind: usize, key: (String, String), running: Option<JobState>) -> bool {
        let Some(jobs) = self.jobs.get_mut(kind) else {
            return false;
        };
        let (flag, claim, uid) = match running {
            Some((r, c, uid)) => (Some(r), c.filter(|_| r), uid),
            None => (None, None, None),
        };
        let old = match flag {
            Some(r) => jobs.insert(key.clone(), r),
            None => jobs.remove(&key),
        };
        let was = old == Some(true);
        let is = flag == Some(true);
        match claim {
            Some(c) => {
                self.running.insert(key.clone(), c);
            }
            None => {
                self.running.remove(&key);
            }
        }
        let old_uid = match (flag, uid) {
            (Some(_), Some(uid)) => self.uids.insert(key.clone(), uid),
            _ => self.uids.remove(&key),
        };
        if flag.is_none()
            && old.is_some()
            && let Some(uid) = old_uid
        {
            let gone = (key, uid);
            if self.gone_set.insert(gone.clone()) {
                self.gone.push_back(gone);
                while self.gone.len() > GONE_MEMORY {
                    if let Some(k) = self.gone.pop_front() {
                        self.gone_set.remove(&k);
                    }
                }
            }
        }
        was && !is
    }

    /// Whether the stores have shown the Job `key` with UID `uid` (running, finished, or gone
    /// since). Without a UID, any Job of that name the stores hold now.
    fn seen(&self, key: &(String, String), uid: Option<&str>) -> bool {
        match uid {
            Some(uid) => {
                self.uids.get(key).is_some_and(|u| u == uid) || self.gone_set.contains(&(key.clone(), uid.to_string()))
            }
            None => self.jobs.iter().any(|m| m.contains_key(key)),
        }
    }

    fn started(&mut self, j: &StoredJob) {
        if let (Some(ns), Some(t)) = (&j.metadata.namespace, &j.metadata.creation_timestamp) {
            let e = self.last_start.entry(ns.clone()).or_insert(t.0);
            *e = (*e).max(t.0);
        }
    }
}

fn is_running(j: &StoredJob) -> bool {
    captf_core::outcome::terminal_status(j.status.as_ref()).is_none()
}

/// Whether a Job runs, the CAPTF object its controller owner reference claims, and its UID.
type JobState = (bool, Option<Claim>, Option<String>);

/// Whether `j` runs, the CAPTF object its controller owner reference claims, and its UID.
fn state_of(j: &StoredJob) -> JobState {
    let kinds = [
        Kind::TerraformCluster,
        Kind::TerraformMachinePool,
        Kind::TerraformMachine,
    ];
    let claim = captf_core::membership::job_owner(&j.metadata, &kinds).map(|(kind, r)| Claim {
        kind,
        name: r.name.clone(),
        uid: r.uid.clone(),
    });
    (is_running(j), claim, j.metadata.uid.clone())
}

fn key_of(j: &StoredJob) -> (String, String) {
    (
        j.metadata.namespace.clone().unwrap_or_default(),
        j.metadata.name.clone().unwrap_or_default(),
    )
}

impl RunningJobs {
    /// An empty index over the Jobs of the kinds' stores `owner_uid` looks into; `partial`:
    /// those stores hold only some objects (a label selector).
    pub fn new(owner_uid: OwnerUid, partial: bool) -> RunningJobs {
        RunningJobs {
            state: Arc::default(),
            freed: Arc::new(watch::channel(0).0),
            owner_uid,
            partial,
        }
    }

    /// Whether a running Job that claims `c` in `ns` is the controller's (see the type's doc).
    fn counts(&self, ns: &str, c: &Claim) -> bool {
        match (self.owner_uid)(c.kind, ns, &c.name) {
            Some(uid) => uid == c.uid,
            None => self.partial,
        }
    }

    /// The writer fed by one kind's Jobs stream.
    pub fn writer(&self, kind: Kind) -> RunningWriter {
        RunningWriter {
            index: self.clone(),
            kind: slot(kind),
            relist: None,
        }
    }

    /// Per namespace: the running Jobs and the newest Job's creation.
    pub fn by_namespace(&self) -> BTreeMap<String, Load> {
        let st = self.state.read().unwrap_or_else(|p| p.into_inner());
        let mut out: BTreeMap<String, Load> = BTreeMap::new();
        for (ns, t) in &st.last_start {
            out.entry(ns.clone()).or_default().last_start = Some(*t);
        }
        for ((ns, _), c) in &st.running {
            if self.counts(ns, c) {
                out.entry(ns.clone()).or_default().running += 1;
            }
        }
        out
    }

    /// Whether the stores have shown this Job (running, finished, or gone since).
    fn seen(&self, key: &(String, String), uid: Option<&str>) -> bool {
        self.state.read().unwrap_or_else(|p| p.into_inner()).seen(key, uid)
    }

    fn freed(&self) {
        self.freed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// The write side of [`RunningJobs`] for one kind's Jobs stream, with the store's re-list
/// semantics (the listed Jobs replace the kind's at the end of the list).
pub struct RunningWriter {
    index: RunningJobs,
    kind: usize,
    relist: Option<HashMap<(String, String), JobState>>,
}

impl RunningWriter {
    pub fn apply(&mut self, ev: &watcher::Event<StoredJob>) {
        let freed = match ev {
            watcher::Event::Apply(j) => {
                let mut st = self.index.state.write().unwrap_or_else(|p| p.into_inner());
                st.started(j);
                st.set(self.kind, key_of(j), Some(state_of(j)))
            }
            watcher::Event::Delete(j) => {
                let mut st = self.index.state.write().unwrap_or_else(|p| p.into_inner());
                st.set(self.kind, key_of(j), None)
            }
            watcher::Event::Init => {
                self.relist = Some(HashMap::new());
                false
            }
            watcher::Event::InitApply(j) => {
                self.index.state.write().unwrap_or_else(|p| p.into_inner()).started(j);
                self.relist
                    .get_or_insert_with(HashMap::new)
                    .insert(key_of(j), state_of(j));
                false
            }
            watcher::Event::InitDone => {
                let fresh = self.relist.take().unwrap_or_default();
                let mut st = self.index.state.write().unwrap_or_else(|p| p.into_inner());
                let old: Vec<(String, String)> = st
                    .jobs
                    .get(self.kind)
                    .map(|m| m.keys().filter(|k| !fresh.contains_key(*k)).cloned().collect())
                    .unwrap_or_default();
                let mut freed = false;
                for k in old {
                    freed |= st.set(self.kind, k, None);
                }
                for (k, r) in fresh {
                    freed |= st.set(self.kind, k, Some(r));
                }
                freed
            }
        };
        if freed {
            self.index.freed();
        }
    }
}

/// A queued object.
#[derive(Clone, Debug)]
struct Entry {
    class: Class,
    since: Timestamp,
    seen: Timestamp,
}

/// A Job admitted and not yet shown by a store.
#[derive(Clone, Debug)]
struct Reservation {
    /// When it was admitted (controller clock): the namespace's turn was then.
    at: Timestamp,
    /// Set once the Job was created: then it ends when a store shows it, or at the TTL.
    created: Option<Instant>,
    /// The created Job's UID: a store that shows a Job of that name with another UID (an
    /// earlier incarnation's) has not shown this one.
    uid: Option<String>,
}

#[derive(Debug, Default)]
struct Inner {
    queue: HashMap<ObjectKey, Entry>,
    reserved: HashMap<(String, String), Reservation>,
    /// Bumped whenever the queue's members, classes or waiting times change (not when a
    /// member only asks again).
    version: u64,
    /// The last admission and what it was computed from: a queued object that asks again while
    /// nothing changed reads its place from it instead of ordering the whole queue again.
    cached: Option<Cached>,
}

#[derive(Debug)]
struct Cached {
    version: u64,
    stale: usize,
    running: BTreeMap<String, Load>,
    admission: queue::Admission,
}

/// The admission point every pass of this process asks before it creates a Job (one for all
/// watched namespaces).
#[derive(Debug)]
pub struct Slots {
    limits: Limits,
    running: Mutex<Vec<RunningJobs>>,
    inner: Mutex<Inner>,
    /// Bumped when a reservation is given up.
    released: Arc<watch::Sender<u64>>,
}

/// The answer to [`Slots::ask`].
#[derive(Debug)]
pub enum Ask {
    /// Create the Job; commit the permit once it exists.
    Start(Permit),
    /// Wait: the object's place.
    Queued(Place),
}

/// A slot taken for one Job. Dropped without [`Permit::commit`] (the start was given up, the
/// pass failed or was cancelled), the slot is free again at once.
#[derive(Debug)]
pub struct Permit {
    slots: Option<Arc<Slots>>,
    job: (String, String),
}

impl Permit {
    /// The Job was created, with this UID (the create's answer): it counts until a store shows
    /// it.
    pub fn commit(mut self, uid: Option<String>) {
        if let Some(s) = self.slots.take() {
            let mut inner = lock(&s.inner);
            if let Some(r) = inner.reserved.get_mut(&self.job) {
                r.created = Some(Instant::now());
                r.uid = uid;
            }
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(s) = self.slots.take() {
            // The object does not get its place back: one whose start keeps failing (a name
            // conflict, a lease held) would otherwise stay first in line and hold the others
            // back while it never runs. It asks again as a newcomer.
            lock(&s.inner).reserved.remove(&self.job);
            s.released.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

fn queue_key(k: &ObjectKey) -> Key {
    Key::new(k.namespace.clone(), format!("{}/{}", k.kind, k.name))
}

fn age(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(then)).unwrap_or_default()
}

impl Slots {
    pub fn new(limits: Limits) -> Slots {
        Slots {
            limits,
            running: Mutex::default(),
            inner: Mutex::default(),
            released: Arc::new(watch::channel(0).0),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Count the Jobs of these stores too (each watched namespace's).
    pub fn register(&self, running: RunningJobs) {
        lock(&self.running).push(running);
    }

    /// What runs per namespace: the stores' Jobs and the reservations no store shows yet (ends
    /// the reservations a store shows, or that outlived [`RESERVATION_TTL`]).
    fn running(&self, inner: &mut Inner) -> BTreeMap<String, Load> {
        let indexes = lock(&self.running).clone();
        let mut out: BTreeMap<String, Load> = BTreeMap::new();
        for i in &indexes {
            for (ns, l) in i.by_namespace() {
                let e = out.entry(ns).or_default();
                e.running += l.running;
                e.last_start = e.last_start.max(l.last_start);
            }
        }
        inner.reserved.retain(|job, r| {
            let Some(created) = r.created else { return true };
            !indexes.iter().any(|i| i.seen(job, r.uid.as_deref())) && created.elapsed() < RESERVATION_TTL
        });
        for ((ns, _), r) in &inner.reserved {
            let e = out.entry(ns.clone()).or_default();
            e.running += 1;
            e.last_start = e.last_start.max(Some(r.at));
        }
        out
    }

    /// The admission of the queue as it is now: the waiting objects that count (not stale;
    /// the long-gone ones forgotten) ordered by `captf_core::queue::admit` over what runs, or
    /// the last one when none of that changed.
    fn admission<'a>(&self, inner: &'a mut Inner, now: Timestamp) -> &'a queue::Admission {
        let before = inner.queue.len();
        inner.queue.retain(|_, e| age(now, e.seen) < FORGET);
        if inner.queue.len() != before {
            inner.version += 1;
        }
        let running = self.running(inner);
        let stale = inner.queue.values().filter(|e| age(now, e.seen) >= STALE).count();
        let fresh = inner
            .cached
            .as_ref()
            .is_some_and(|c| c.version == inner.version && c.stale == stale && c.running == running);
        if !fresh {
            let waiting: Vec<Candidate> = inner
                .queue
                .iter()
                .filter(|(_, e)| age(now, e.seen) < STALE)
                .map(|(k, e)| Candidate {
                    key: queue_key(k),
                    class: e.class,
                    since: e.since,
                })
                .collect();
            let admission = queue::admit(&running, &waiting, self.limits);
            inner.cached = Some(Cached {
                version: inner.version,
                stale,
                running,
                admission,
            });
        }
        // Set just above when it was not fresh.
        static EMPTY: std::sync::OnceLock<queue::Admission> = std::sync::OnceLock::new();
        inner
            .cached
            .as_ref()
            .map_or_else(|| EMPTY.get_or_init(queue::Admission::default), |c| &c.admission)
    }

    /// May `key` create its Job `job` (in its namespace) now? Asked under one lock with the
    /// count, so two passes never both take the last slot.
    pub fn ask(self: &Arc<Self>, key: &ObjectKey, class: Class, job: &str, now: Timestamp) -> Ask {
        let job = (key.namespace.clone(), job.to_string());
        if !self.limits.any() {
            return Ask::Start(Permit { slots: None, job });
        }
        let mut inner = lock(&self.inner);
        let changed = match inner.queue.get_mut(key) {
            Some(e) => {
                // Asking again after being passed over changes who counts.
                let changed = e.class != class || age(now, e.seen) >= STALE;
                e.class = class;
                e.seen = now;
                changed
            }
            None => {
                inner.queue.insert(
                    key.clone(),
                    Entry {
                        class,
                        since: now,
                        seen: now,
                    },
                );
                true
            }
        };
        if changed {
            inner.version += 1;
        }
        let me = queue_key(key);
        let admission = self.admission(&mut inner, now);
        let (admitted, place) = (admission.start.contains(&me), admission.places.get(&me).cloned());
        if admitted {
            inner.queue.remove(key);
            inner.version += 1;
            inner.reserved.insert(
                job.clone(),
                Reservation {
                    at: now,
                    created: None,
                    uid: None,
                },
            );
            return Ask::Start(Permit {
                slots: Some(self.clone()),
                job,
            });
        }
        match place {
            Some(place) => Ask::Queued(place),
            // Not reached: every candidate starts or has a place.
            None => Ask::Start(Permit { slots: None, job }),
        }
    }

    /// The object no longer waits (it decided something else, or is gone).
    pub fn forget(&self, key: &ObjectKey) {
        if self.limits.any() {
            let mut inner = lock(&self.inner);
            if inner.queue.remove(key).is_some() {
                inner.version += 1;
            }
        }
    }

    /// The queued objects of `kind` (in `namespace`, or any) that may start now: the ones to
    /// wake when a slot frees.
    pub fn due(&self, kind: Kind, namespace: Option<&str>, now: Timestamp) -> Vec<ObjectKey> {
        if !self.limits.any() {
            return vec![];
        }
        let mut inner = lock(&self.inner);
        if inner.queue.is_empty() {
            return vec![];
        }
        let start: HashSet<Key> = self.admission(&mut inner, now).start.iter().cloned().collect();
        inner
            .queue
            .keys()
            .filter(|k| k.kind == kind && namespace.is_none_or(|n| n == k.namespace) && start.contains(&queue_key(k)))
            .cloned()
            .collect()
    }

    /// Objects queued now (for the metrics).
    pub fn queued(&self) -> usize {
        lock(&self.inner).queue.len()
    }

    /// A stream that yields whenever a slot may have freed: a running Job of any registered
    /// store finished or went, or a reservation was given up.
    pub fn freed(&self) -> impl Stream<Item = ()> + Send + 'static + use<> {
        let mut rx: Vec<watch::Receiver<u64>> = lock(&self.running).iter().map(|r| r.freed.subscribe()).collect();
        rx.push(self.released.subscribe());
        futures::stream::select_all(rx.into_iter().map(|r| {
            futures::stream::unfold(r, |mut r| async move {
                r.changed().await.ok()?;
                Some(((), r))
            })
            .boxed()
        }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::batch::v1::{Job, JobStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn key(ns: &str, name: &str) -> ObjectKey {
        ObjectKey {
            kind: Kind::TerraformCluster,
            namespace: ns.into(),
            name: name.into(),
        }
    }

    /// The name of the Job `seq` of the TerraformCluster `object`.
    fn jn(ns: &str, object: &str, seq: u32) -> String {
        captf_shared::names::job_name(Kind::TerraformCluster, ns, object, captf_shared::Op::Apply, seq)
    }

    /// The Job `seq` of the TerraformCluster `object` (UID `uid-<object>`), as the controller
    /// creates it.
    fn job(ns: &str, object: &str, seq: u32, finished: bool) -> StoredJob {
        owned_job(ns, object, seq, finished, Some(&format!("uid-{object}")))
    }

    fn owned_job(ns: &str, object: &str, seq: u32, finished: bool, owner_uid: Option<&str>) -> StoredJob {
        Job {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(jn(ns, object, seq)),
                owner_references: owner_uid
                    .map(|u| vec![captf_core::job::owner_reference(Kind::TerraformCluster, object, u)]),
                uid: Some(format!("{}-{seq}", owner_uid.unwrap_or("unowned"))),
                ..Default::default()
            },
            status: finished.then(|| JobStatus {
                conditions: Some(vec![k8s_openapi::api::batch::v1::JobCondition {
                    type_: "Complete".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
        .into()
    }

    /// Stores that hold every TerraformCluster except those named `gone-*`, each with the UID
    /// `uid-<name>`.
    fn stores() -> OwnerUid {
        Arc::new(|kind: Kind, _ns: &str, name: &str| {
            (kind == Kind::TerraformCluster && !name.starts_with("gone-")).then(|| format!("uid-{name}"))
        })
    }

    fn slots(total: u32, per_ns: u32) -> (Arc<Slots>, RunningJobs) {
        let s = Arc::new(Slots::new(Limits::from_flags(total, per_ns)));
        let r = RunningJobs::new(stores(), false);
        s.register(r.clone());
        (s, r)
    }

    /// The UID of the Job `seq` of `object` (as [`job`] makes it).
    fn uid(object: &str, seq: u32) -> Option<String> {
        Some(format!("uid-{object}-{seq}"))
    }

    fn started(a: Ask) -> Permit {
        match a {
            Ask::Start(p) => p,
            Ask::Queued(p) => panic!("queued: {p}"),
        }
    }

    fn queued(a: Ask) -> Place {
        match a {
            Ask::Queued(p) => p,
            Ask::Start(_) => panic!("started"),
        }
    }

    #[test]
    fn runner_slots_two_asks_at_once_never_both_take_the_last_slot() {
        let (s, _) = slots(0, 2);
        let a = started(s.ask(&key("a", "x"), Class::Other, "x-apply-1", ts(0)));
        let b = started(s.ask(&key("a", "y"), Class::Other, "y-apply-1", ts(0)));
        // Both admitted, neither Job is in a store yet: the third waits.
        let p = queued(s.ask(&key("a", "z"), Class::Other, "z-apply-1", ts(0)));
        assert_eq!(
            p.to_string(),
            "waiting for a runner slot: 1 of 1 queued in namespace a (2 of 2 running)"
        );
        a.commit(None);
        // A start given up frees its slot at once.
        drop(b);
        let _z = started(s.ask(&key("a", "z"), Class::Other, "z-apply-1", ts(1)));
    }

    #[test]
    fn runner_slots_a_start_given_up_does_not_keep_its_place_so_it_cannot_hold_the_others_back() {
        let (s, _) = slots(0, 1);
        let run = started(s.ask(&key("a", "run"), Class::Other, "run-1", ts(0)));
        queued(s.ask(&key("a", "stuck"), Class::Other, "stuck-1", ts(0)));
        queued(s.ask(&key("a", "late"), Class::Other, "late-1", ts(5)));
        drop(run);
        // "stuck" is admitted, but its start is given up (a name conflict, say).
        drop(started(s.ask(&key("a", "stuck"), Class::Other, "stuck-1", ts(6))));
        // The free slot goes to "late", which is due and woken.
        assert_eq!(s.due(Kind::TerraformCluster, None, ts(6)), [key("a", "late")]);
        let _late = started(s.ask(&key("a", "late"), Class::Other, "late-1", ts(6)));
        assert_eq!(
            queued(s.ask(&key("a", "stuck"), Class::Other, "stuck-1", ts(7))).position,
            1
        );
    }

    #[test]
    fn runner_slots_count_the_jobs_in_the_stores_not_a_counter_of_their_own() {
        // A restarted controller: the store shows two running Jobs another process created.
        let (s, r) = slots(0, 2);
        let mut w = r.writer(Kind::TerraformCluster);
        w.apply(&watcher::Event::Init);
        w.apply(&watcher::Event::InitApply(job("a", "old", 1, false)));
        w.apply(&watcher::Event::InitApply(job("a", "old", 2, false)));
        w.apply(&watcher::Event::InitApply(job("a", "done", 1, true)));
        w.apply(&watcher::Event::InitDone);
        queued(s.ask(&key("a", "x"), Class::Other, &jn("a", "x", 1), ts(0)));
        let freed = r.freed.subscribe();
        // One finishes: the slot frees, the waiting object is due and woken.
        w.apply(&watcher::Event::Apply(job("a", "old", 1, true)));
        assert!(freed.has_changed().unwrap());
        assert_eq!(s.due(Kind::TerraformCluster, None, ts(1)), [key("a", "x")]);
        assert!(s.due(Kind::TerraformMachine, None, ts(1)).is_empty());
        let p = started(s.ask(&key("a", "x"), Class::Other, &jn("a", "x", 1), ts(1)));
        p.commit(uid("x", 1));
        // Its Job appears in the store: counted once, not twice.
        w.apply(&watcher::Event::Apply(job("a", "x", 1, false)));
        let mut inner = lock(&s.inner);
        assert_eq!(s.running(&mut inner).get("a").map(|l| l.running), Some(2));
        assert!(inner.reserved.is_empty());
    }

    #[test]
    fn runner_slots_a_created_job_whose_life_the_store_missed_stops_counting_once_seen_gone() {
        let (s, r) = slots(1, 0);
        started(s.ask(&key("a", "x"), Class::Other, &jn("a", "x", 1), ts(0))).commit(uid("x", 1));
        queued(s.ask(&key("b", "y"), Class::Other, &jn("b", "y", 1), ts(0)));
        let mut w = r.writer(Kind::TerraformCluster);
        w.apply(&watcher::Event::Apply(job("a", "x", 1, true)));
        w.apply(&watcher::Event::Delete(job("a", "x", 1, true)));
        started(s.ask(&key("b", "y"), Class::Other, &jn("b", "y", 1), ts(1)));
    }

    #[test]
    fn runner_slots_a_reused_job_name_of_an_earlier_incarnation_does_not_end_the_new_jobs_reservation() {
        // An object deleted and created again under its name: its Jobs take the names the
        // earlier incarnation's had. The store saw the earlier `x-apply-1` run and go.
        let (s, r) = slots(0, 1);
        let mut w = r.writer(Kind::TerraformCluster);
        let earlier = owned_job("a", "x", 1, false, Some("uid-x-before"));
        w.apply(&watcher::Event::Apply(earlier.clone()));
        w.apply(&watcher::Event::Delete(earlier));
        // The new incarnation's `x-apply-1` is created; its watch event has not come yet.
        started(s.ask(&key("a", "x"), Class::Other, &jn("a", "x", 1), ts(0))).commit(uid("x", 1));
        // It still takes the namespace's one slot.
        let p = queued(s.ask(&key("a", "y"), Class::Other, &jn("a", "y", 1), ts(1)));
        assert_eq!(p.running, 1);
        // Once the store shows it, it counts from there, once; once it finishes, the slot frees.
        w.apply(&watcher::Event::Apply(job("a", "x", 1, false)));
        assert_eq!(
            queued(s.ask(&key("a", "y"), Class::Other, &jn("a", "y", 1), ts(2))).running,
            1
        );
        assert!(lock(&s.inner).reserved.is_empty());
        w.apply(&watcher::Event::Apply(job("a", "x", 1, true)));
        started(s.ask(&key("a", "y"), Class::Other, &jn("a", "y", 1), ts(3)));
    }

    #[test]
    fn runner_slots_fake_jobs_with_captf_labels_take_no_slot() {
        // A tenant who may create Jobs makes running ones with CAPTF's labels: without an owner,
        // owned by an object's name with another UID, or by an object that does not exist.
        let (s, r) = slots(2, 0);
        let mut w = r.writer(Kind::TerraformCluster);
        w.apply(&watcher::Event::Init);
        w.apply(&watcher::Event::InitApply(owned_job("a", "x", 1, false, None)));
        w.apply(&watcher::Event::InitApply(owned_job(
            "a",
            "y",
            1,
            false,
            Some("forged"),
        )));
        w.apply(&watcher::Event::InitApply(job("a", "gone-z", 1, false)));
        w.apply(&watcher::Event::InitDone);
        // Every slot is still free for the controller's own Jobs, in any namespace.
        started(s.ask(&key("b", "p"), Class::Other, &jn("b", "p", 1), ts(0))).commit(uid("p", 1));
        started(s.ask(&key("c", "q"), Class::Other, &jn("c", "q", 1), ts(0))).commit(uid("q", 1));
        // And the controller's own running Jobs do count.
        w.apply(&watcher::Event::Apply(job("b", "p", 1, false)));
        w.apply(&watcher::Event::Apply(job("c", "q", 1, false)));
        let p = queued(s.ask(&key("d", "r"), Class::Other, &jn("d", "r", 1), ts(1)));
        assert_eq!(p.running, 2);
    }

    #[test]
    fn runner_slots_a_shard_counts_the_jobs_of_objects_it_does_not_hold() {
        // Stores of a shard's label selector: a Job whose owner they do not hold is another
        // shard's, and every instance counts every runner Job it sees; a wrong UID for an object
        // it holds is still not counted.
        let s = Arc::new(Slots::new(Limits::from_flags(2, 0)));
        let r = RunningJobs::new(stores(), true);
        s.register(r.clone());
        let mut w = r.writer(Kind::TerraformCluster);
        w.apply(&watcher::Event::Apply(job("a", "gone-other-shard", 1, false)));
        w.apply(&watcher::Event::Apply(owned_job("a", "y", 1, false, Some("forged"))));
        started(s.ask(&key("b", "p"), Class::Other, &jn("b", "p", 1), ts(0))).commit(uid("p", 1));
        w.apply(&watcher::Event::Apply(job("b", "p", 1, false)));
        assert_eq!(
            queued(s.ask(&key("c", "q"), Class::Other, &jn("c", "q", 1), ts(1))).running,
            2
        );
    }

    #[test]
    fn runner_slots_a_waiting_object_keeps_its_place_and_one_that_stops_asking_is_passed_over() {
        let (s, _) = slots(0, 1);
        let _a = started(s.ask(&key("a", "run"), Class::Other, "run-1", ts(0)));
        queued(s.ask(&key("a", "first"), Class::Other, "first-1", ts(0)));
        let p = queued(s.ask(&key("a", "second"), Class::Other, "second-1", ts(10)));
        assert_eq!(p.position, 2);
        // Asking again keeps the time it began to wait.
        let p = queued(s.ask(&key("a", "first"), Class::Other, "first-1", ts(20)));
        assert_eq!(p.position, 1);
        // "first" stops asking (deleted): after a while "second" is first.
        let p = queued(s.ask(&key("a", "second"), Class::Other, "second-1", ts(20 + 91)));
        assert_eq!(p.position, 1);
        s.forget(&key("a", "first"));
        assert_eq!(s.queued(), 1);
    }

    #[test]
    fn runner_slots_without_limits_everyone_starts_and_nothing_is_kept() {
        let (s, _) = slots(0, 0);
        for i in 0..100 {
            started(s.ask(&key("a", &format!("o{i}")), Class::Other, "j", ts(0))).commit(None);
        }
        assert_eq!(s.queued(), 0);
        assert!(lock(&s.inner).reserved.is_empty());
    }
}

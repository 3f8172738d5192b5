//! Read what one reconcile pass needs (docs/rules.md): the object's Jobs and their pods,
//! the inputs Secret, the state lock Lease and its holder pod (read LIVE), the referenced
//! Secrets and ConfigMaps, and the cluster holds.
//!
//! # Caches and live reads (docs/architecture.md)
//!
//! The object's Jobs and pods, and a TerraformCluster's member objects and their Jobs, come from
//! reflector stores ([`Caches`]) fed by label-selected watches (`captf.io/kind=<Kind>` for Jobs,
//! `captf.io/kind` for pods, the three kinds themselves), so a pass costs no list of the API
//! server and memory grows with CAPTF's objects, not the cluster's. The Job watches are also the
//! controllers' triggers, and a reflector writes its store before it passes an event on: a
//! reconcile triggered by a Job change sees that change.
//!
//! Everything else a decision hinges on stays LIVE: the object itself (re-read at the start of
//! every reconcile), the inputs Secret, the lock Lease and its holder pod (docs/rules.md), the
//! docs/rules.md checks (Job NotFound and the object's status, `interrupted.rs`), the lease takes
//! (`leases.rs`, resourceVersion preconditions), the cluster lease and its holder Job.
//!
//! Why a cached Job list is safe:
//! - **Never two active Jobs for one object.** A Job is created only after its run lease
//!   `captf-run-<suffix>` is taken (holderIdentity = the Job's name) with a create or a
//!   resourceVersion-checked update, and a holder is replaced only when its Job is NotFound or
//!   finished in a LIVE read and is not the live `status.activeJob` (`leases::take`). The lease
//!   is released when the Job is booked (the outcome annotation written) or confirmed gone
//!   (`interrupted`).
//!   A Job this controller created that is not yet in the store is still the lease's live holder,
//!   so no second Job can take the lease, whatever the store says.
//! - **Deterministic names.** The next Job's name is `<object>-<op>-<seq>` with `seq` one above
//!   the larger of the cached Jobs' sequence numbers and the LIVE `status.lastJobSeq`; creating
//!   an existing name is a 409 (requeue). And when the store lags the live status (it has no Job
//!   with sequence `status.lastJobSeq`), [`jobs_and_pods`] does not decide from it: when that
//!   Job is the live `status.activeJob` one GET tells whether it exists (then the pass waits for
//!   its watch event) or is gone (deleted while it ran: the cached history is current and the
//!   docs/rules.md live reads take over); otherwise the pass lists the Jobs and pods live.
//! - **Booking exactly once.** The `captf.io/outcome` annotation is written with the cached
//!   Job's resourceVersion: a stale Job gets 409 and the pass requeues; events and metrics follow
//!   only the write that set it (`book.rs`).
//! - **Results from pods.** A finished Job whose cached pod is not terminated has that pod read
//!   live, and one with no cached pod that is not booked yet has the object's pods listed live,
//!   so a pod watch that lags the Job watch never turns a runner result into "no result".
//! - **Not synced, no decision.** Until every store has listed once ([`Caches::synced`]) a pass
//!   requeues without deciding. After a dropped watch the stores keep their last full state and a
//!   re-list swaps in the new one at once (kube's `Writer`), so a store is never half empty.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::{WatchStreamExt, reflector::store::Writer};

use captf_shared::types::{TerraformCluster, TerraformMachine, TerraformMachinePool};
use captf_shared::{Kind, binding, keys, names};

use captf_core::ident::Ident;
use captf_core::outcome;
use captf_core::snapshot::{self, Holds};
use captf_read::api::{
    cluster_lease_holder, is_member_job, job, live_jobs_and_pods, live_pods, own_pods, verified_members,
};
use captf_read::errors::{ApiAction, Error};

use super::slots::RunningJobs;
use super::stored::{StoredJob, StoredPod, stored};

/// An object's metadata (what the kinds' stores keep).
pub type Meta<K> = PartialObjectMeta<K>;

/// The position of a kind in per-kind arrays.
fn slot(kind: Kind) -> usize {
    match kind {
        Kind::TerraformCluster => 0,
        Kind::TerraformMachinePool => 1,
        Kind::TerraformMachine => 2,
    }
}

/// The feeds, in the order of [`Synced`]'s flags.
const FEEDS: usize = 7;
const FEED_JOBS: usize = 3;
const FEED_PODS: usize = 6;

/// One flag per store: set when its watch has listed once.
#[derive(Debug, Default)]
struct Synced([AtomicBool; FEEDS]);

/// The names of a store's objects by (namespace, value of one label). kube's stores have no
/// index, and a scan of the store in every pass makes N objects' passes cost N² (at 10,000
/// objects the scans were most of the controller's CPU). Kept from the very events that feed
/// the store, right after the store applies them, with the `Writer`'s re-list semantics (the
/// listed objects are buffered and swapped in at the end of the list). A name the index gives
/// whose object the store no longer has is skipped; one it does not give yet is like an object
/// the store does not have yet (see [`jobs_and_pods`]).
#[derive(Clone, Debug)]
struct LabelIndex {
    label: &'static str,
    state: Arc<RwLock<IndexState>>,
}

#[derive(Debug, Default)]
struct IndexState {
    /// (namespace, label value) → names, sorted. A vector: most sets hold one or two names, and
    /// a `BTreeSet`'s first node alone takes about 300 bytes.
    names: HashMap<(String, String), Vec<String>>,
    /// (namespace, name) → label value.
    value: HashMap<(String, String), String>,
}

impl IndexState {
    fn remove(&mut self, ns: &str, name: &str) {
        let key = (ns.to_string(), name.to_string());
        if let Some(v) = self.value.remove(&key) {
            let slot = (key.0, v);
            if let Some(set) = self.names.get_mut(&slot) {
                if let Ok(i) = set.binary_search_by(|n| n.as_str().cmp(name)) {
                    set.remove(i);
                }
                if set.is_empty() {
                    self.names.remove(&slot);
                }
            }
        }
    }

    fn insert(&mut self, ns: &str, name: &str, value: Option<&str>) {
        self.remove(ns, name);
        if let Some(v) = value {
            self.value.insert((ns.to_string(), name.to_string()), v.to_string());
            let set = self.names.entry((ns.to_string(), v.to_string())).or_default();
            if let Err(i) = set.binary_search_by(|n| n.as_str().cmp(name)) {
                set.insert(i, name.to_string());
            }
        }
    }
}

/// The write side of a [`LabelIndex`], owned by the one stream that feeds it.
struct IndexWriter {
    index: LabelIndex,
    relist: Option<IndexState>,
}

impl LabelIndex {
    fn new(label: &'static str) -> LabelIndex {
        LabelIndex {
            label,
            state: Arc::default(),
        }
    }

    fn writer(&self) -> IndexWriter {
        IndexWriter {
            index: self.clone(),
            relist: None,
        }
    }

    /// The names of the objects in `ns` whose label is `value`.
    fn names(&self, ns: &str, value: &str) -> Vec<String> {
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        state
            .names
            .get(&(ns.to_string(), value.to_string()))
            .cloned()
            .unwrap_or_default()
    }
}

impl IndexWriter {
    fn apply<K: kube::Resource>(&mut self, ev: &watcher::Event<K>) {
        let parts = |o: &K| {
            let m = o.meta();
            (
                m.namespace.clone().unwrap_or_default(),
                m.name.clone().unwrap_or_default(),
                label(&m.labels, self.index.label).map(String::from),
            )
        };
        match ev {
            watcher::Event::Apply(o) => {
                let (ns, name, v) = parts(o);
                let mut state = self.index.state.write().unwrap_or_else(|p| p.into_inner());
                state.insert(&ns, &name, v.as_deref());
            }
            watcher::Event::Delete(o) => {
                let (ns, name, _) = parts(o);
                let mut state = self.index.state.write().unwrap_or_else(|p| p.into_inner());
                state.remove(&ns, &name);
            }
            watcher::Event::Init => self.relist = Some(IndexState::default()),
            watcher::Event::InitApply(o) => {
                let (ns, name, v) = parts(o);
                self.relist
                    .get_or_insert_with(IndexState::default)
                    .insert(&ns, &name, v.as_deref());
            }
            watcher::Event::InitDone => {
                let fresh = self.relist.take().unwrap_or_default();
                *self.index.state.write().unwrap_or_else(|p| p.into_inner()) = fresh;
            }
        }
    }
}

/// The indexes of the stores (see [`LabelIndex`]).
#[derive(Clone, Debug)]
struct Indexes {
    /// Per kind: its Jobs by `captf.io/object`.
    jobs_by_object: [LabelIndex; 3],
    /// Per kind: its Jobs by `cluster.x-k8s.io/cluster-name`.
    jobs_by_cluster: [LabelIndex; 3],
    /// Pods by `captf.io/object`.
    pods_by_object: LabelIndex,
    /// Per kind: the objects by `cluster.x-k8s.io/cluster-name`.
    objects_by_cluster: [LabelIndex; 3],
    /// Every kind's Jobs that run, per namespace (the runner slots count them).
    running: RunningJobs,
}

impl Indexes {
    fn new(running: RunningJobs) -> Indexes {
        let by = |label| [LabelIndex::new(label), LabelIndex::new(label), LabelIndex::new(label)];
        Indexes {
            jobs_by_object: by(keys::LABEL_OBJECT),
            jobs_by_cluster: by(keys::LABEL_CLUSTER_NAME),
            pods_by_object: LabelIndex::new(keys::LABEL_OBJECT),
            objects_by_cluster: by(keys::LABEL_CLUSTER_NAME),
            running,
        }
    }
}

/// The read side of the reflector stores (cheap to clone).
#[derive(Clone)]
pub struct Caches {
    /// The kinds' objects, metadata only: a pass re-reads its object live, and the holds need
    /// only the members' labels.
    pub clusters: Store<Meta<TerraformCluster>>,
    pub pools: Store<Meta<TerraformMachinePool>>,
    pub machines: Store<Meta<TerraformMachine>>,
    /// The Jobs labelled `captf.io/kind=<Kind>`, one store per kind.
    jobs: [Store<StoredJob>; 3],
    /// The pods labelled `captf.io/kind` (the Jobs' pod template carries the Job's labels).
    pods: Store<StoredPod>,
    idx: Indexes,
    synced: Arc<Synced>,
}

/// The write side of [`Caches`]: each writer goes into the watch stream that feeds it.
pub struct Feeds {
    pub clusters: Writer<Meta<TerraformCluster>>,
    pub pools: Writer<Meta<TerraformMachinePool>>,
    pub machines: Writer<Meta<TerraformMachine>>,
    pub jobs: [Writer<StoredJob>; 3],
    pub pods: Writer<StoredPod>,
    pub streams: FeedStreams,
}

/// Builds the watch streams that feed the stores (each marks its store synced).
#[derive(Clone)]
pub struct FeedStreams {
    synced: Arc<Synced>,
    idx: Indexes,
}

/// New, empty stores and their writers; `partial`: the kinds' stores are fed by a label
/// selector, so they hold only some of the objects.
pub fn caches(partial: bool) -> (Caches, Feeds) {
    let (clusters, cw) = reflector::store::<Meta<TerraformCluster>>();
    let (pools, pw) = reflector::store::<Meta<TerraformMachinePool>>();
    let (machines, mw) = reflector::store::<Meta<TerraformMachine>>();
    let (j0, jw0) = reflector::store();
    let (j1, jw1) = reflector::store();
    let (j2, jw2) = reflector::store();
    let (pods, podw) = reflector::store();
    let synced = Arc::new(Synced::default());
    let owner_uid: super::slots::OwnerUid = {
        let (c, p, m) = (clusters.clone(), pools.clone(), machines.clone());
        Arc::new(move |kind: Kind, ns: &str, name: &str| match kind {
            Kind::TerraformCluster => c
                .get(&ObjectRef::new(name).within(ns))
                .and_then(|o| o.metadata.uid.clone()),
            Kind::TerraformMachinePool => p
                .get(&ObjectRef::new(name).within(ns))
                .and_then(|o| o.metadata.uid.clone()),
            Kind::TerraformMachine => m
                .get(&ObjectRef::new(name).within(ns))
                .and_then(|o| o.metadata.uid.clone()),
        })
    };
    let idx = Indexes::new(RunningJobs::new(owner_uid, partial));
    (
        Caches {
            clusters,
            pools,
            machines,
            jobs: [j0, j1, j2],
            pods,
            idx: idx.clone(),
            synced: synced.clone(),
        },
        Feeds {
            clusters: cw,
            pools: pw,
            machines: mw,
            jobs: [jw0, jw1, jw2],
            pods: podw,
            streams: FeedStreams { synced, idx },
        },
    )
}

impl FeedStreams {
    /// The flag of feed `i` ([`FEEDS`]) as a stream adapter: set at the end of the first list
    /// (the reflector has swapped the listed objects into its store by then).
    fn mark<K>(&self, i: usize) -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) + Send + 'static + use<K> {
        let synced = self.synced.clone();
        move |ev| {
            if let Ok(watcher::Event::InitDone) = ev
                && let Some(f) = synced.0.get(i)
            {
                f.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Feed of a kind `K`'s store (metadata only): applied objects, for `Controller::for_stream`.
    pub fn kind_stream<K: captf_read::kinds::CaptfKind>(
        &self,
        writer: Writer<Meta<K>>,
        api: Api<Meta<K>>,
        selector: Option<&str>,
    ) -> impl Stream<Item = Result<Meta<K>, watcher::Error>> + Send + 'static {
        // With a selector, an object relabelled out of it leaves the store (the API server sends
        // its watch a deletion) and one relabelled into it arrives.
        let wc = match selector {
            Some(s) => watcher::Config::default().labels(s),
            None => watcher::Config::default(),
        };
        let mut mark = self.mark::<Meta<K>>(slot(K::KIND));
        let mut by_cluster = self.idx.objects_by_cluster[slot(K::KIND)].writer();
        watcher(api, wc)
            .modify(|o: &mut Meta<K>| o.metadata.managed_fields = None)
            .reflect(writer)
            .inspect(move |ev| {
                if let Ok(e) = ev {
                    by_cluster.apply(e);
                }
                mark(ev);
            })
            // The controller's own status writes come back as events that change nothing a
            // pass reads (`captf_core::wake::acted_on`): no pass for them.
            .scan(ChangedOnly::default(), |changed, ev| {
                futures::future::ready(Some(match ev {
                    Ok(e) => changed.pass(e).map(Ok),
                    Err(e) => Some(Err(e)),
                }))
            })
            .filter_map(futures::future::ready)
    }

    /// Feed of the Jobs store of `kind` (label `captf.io/kind=<Kind>`): touched objects
    /// (deletions too), for `Controller::owns_stream`.
    pub fn jobs_stream(
        &self,
        kind: Kind,
        writer: Writer<StoredJob>,
        api: Api<Job>,
    ) -> impl Stream<Item = Result<StoredJob, watcher::Error>> + Send + 'static {
        let mut mark = self.mark::<StoredJob>(FEED_JOBS + slot(kind));
        let mut by_object = self.idx.jobs_by_object[slot(kind)].writer();
        let mut by_cluster = self.idx.jobs_by_cluster[slot(kind)].writer();
        let mut running = self.idx.running.writer(kind);
        let wc = watcher::Config::default().labels(&format!("{}={}", keys::LABEL_KIND, kind.as_str()));
        watcher(api, wc)
            .map_ok(stored::<Job, StoredJob>)
            .reflect(writer)
            .inspect(move |ev| {
                if let Ok(e) = ev {
                    by_object.apply(e);
                    by_cluster.apply(e);
                    running.apply(e);
                }
                mark(ev);
            })
            .touched_objects()
    }

    /// Feed of the pods store (label `captf.io/kind`). Pods trigger nothing (their Jobs do), so
    /// this stream must be driven on its own; it backs off on errors.
    pub fn pods_stream(&self, writer: Writer<StoredPod>, api: Api<Pod>) -> impl Stream<Item = ()> + Send + 'static {
        let mut mark = self.mark::<StoredPod>(FEED_PODS);
        let mut by_object = self.idx.pods_by_object.writer();
        watcher(api, watcher::Config::default().labels(keys::LABEL_KIND))
            .default_backoff()
            .map_ok(stored::<Pod, StoredPod>)
            .reflect(writer)
            .inspect(move |ev| {
                if let Ok(e) = ev {
                    by_object.apply(e);
                }
                mark(ev);
            })
            .map(|ev| {
                if let Err(e) = ev {
                    tracing::debug!("pod watch: {e}");
                }
            })
    }
}

impl Caches {
    /// The Jobs of these stores that run, per namespace ([`RunningJobs`]).
    pub fn running(&self) -> RunningJobs {
        self.idx.running.clone()
    }

    /// Every store has listed once.
    pub fn synced(&self) -> bool {
        self.synced.0.iter().all(|f| f.load(Ordering::SeqCst))
    }

    /// The cached Jobs of one object: only names this object can produce, and only under its
    /// controller owner reference (a Job with its labels and name owned by another UID is not
    /// its own).
    pub fn jobs_of(&self, id: &Ident) -> Vec<Job> {
        let store = &self.jobs[slot(id.kind)];
        self.idx.jobs_by_object[slot(id.kind)]
            .names(&id.namespace, &id.object_id)
            .into_iter()
            .filter(|n| names::parse_job_name(id.kind, &id.namespace, &id.name, n).is_some())
            .filter_map(|n| store.get(&ObjectRef::new(&n).within(&id.namespace)))
            .filter(|j| label(&j.metadata.labels, keys::LABEL_OBJECT) == Some(id.object_id.as_str()))
            .filter(|j| binding::owned_by(&j.metadata, &id.uid))
            .map(|j| j.to_job())
            .collect()
    }

    /// The cached pods of one object.
    pub fn pods_of(&self, id: &Ident) -> Vec<Pod> {
        self.idx
            .pods_by_object
            .names(&id.namespace, &id.object_id)
            .into_iter()
            .filter_map(|n| self.pods.get(&ObjectRef::new(&n).within(&id.namespace)))
            .filter(|p| {
                label(&p.metadata.labels, keys::LABEL_KIND) == Some(id.kind.as_str())
                    && label(&p.metadata.labels, keys::LABEL_OBJECT) == Some(id.object_id.as_str())
            })
            .map(|p| p.to_pod())
            .collect()
    }

    /// The machine pools and machines labelled with a TerraformCluster's cluster name, from the
    /// kinds' stores: the candidates for its members ([`verified_members`]).
    fn labelled_members(&self, ns: &str, cluster: &str) -> Vec<(Kind, kube::core::ObjectMeta)> {
        let member = |m: &kube::core::ObjectMeta| label(&m.labels, keys::LABEL_CLUSTER_NAME) == Some(cluster);
        let pools = self.idx.objects_by_cluster[slot(Kind::TerraformMachinePool)]
            .names(ns, cluster)
            .into_iter()
            .filter_map(|n| self.pools.get(&ObjectRef::new(&n).within(ns)))
            .filter(|o| member(&o.metadata))
            .map(|o| (Kind::TerraformMachinePool, o.metadata.clone()));
        let machines = self.idx.objects_by_cluster[slot(Kind::TerraformMachine)]
            .names(ns, cluster)
            .into_iter()
            .filter_map(|n| self.machines.get(&ObjectRef::new(&n).within(ns)))
            .filter(|o| member(&o.metadata))
            .map(|o| (Kind::TerraformMachine, o.metadata.clone()));
        pools.chain(machines).collect()
    }

    /// The active (not finished) Jobs labelled with the cluster, from the members' Jobs stores,
    /// each with the object its controller owner reference names as the kinds' stores hold it
    /// (`None`: not there, or another UID): the claims of `MemberJobActive`, which hold the
    /// cluster only once verified ([`is_member_job`]).
    fn member_jobs_active(&self, ns: &str, cluster: &str) -> Vec<(StoredJob, Option<kube::core::ObjectMeta>)> {
        [Kind::TerraformMachinePool, Kind::TerraformMachine]
            .into_iter()
            .flat_map(|k| {
                let store = &self.jobs[slot(k)];
                self.idx.jobs_by_cluster[slot(k)]
                    .names(ns, cluster)
                    .into_iter()
                    .filter_map(move |n| store.get(&ObjectRef::new(&n).within(ns)))
            })
            .filter(|j| {
                label(&j.metadata.labels, keys::LABEL_CLUSTER_NAME) == Some(cluster)
                    && outcome::terminal_status(j.status.as_ref()).is_none()
            })
            .map(|j| {
                let owner = captf_core::membership::job_owner(
                    &j.metadata,
                    &[Kind::TerraformMachinePool, Kind::TerraformMachine],
                )
                .and_then(|(kind, r)| {
                    let meta = match kind {
                        Kind::TerraformMachinePool => self
                            .pools
                            .get(&ObjectRef::new(&r.name).within(ns))
                            .map(|o| o.metadata.clone()),
                        _ => self
                            .machines
                            .get(&ObjectRef::new(&r.name).within(ns))
                            .map(|o| o.metadata.clone()),
                    };
                    meta.filter(|m| m.uid.as_deref() == Some(r.uid.as_str()))
                });
                ((*j).clone(), owner)
            })
            .collect()
    }
}

fn label<'a>(labels: &'a Option<BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    labels.as_ref()?.get(key).map(String::as_str)
}

/// Whether a pod has finished (its termination message, if any, is final).
fn pod_settled(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The object's Jobs (only names this object can produce) and their pods, from the caches
/// (see the module doc). `None`: decide nothing now, requeue (the stores have not listed yet,
/// or the Job the live status names is not in the store yet: its watch event follows).
/// `last_job_seq` and `active_job` are the live `status.lastJobSeq` and `status.activeJob`.
pub async fn jobs_and_pods(
    client: &kube::Client,
    caches: &Caches,
    id: &Ident,
    last_job_seq: Option<u32>,
    active_job: Option<&str>,
) -> Result<Option<(Vec<Job>, Vec<Pod>)>, Error> {
    if !caches.synced() {
        return Ok(None);
    }
    let jobs = caches.jobs_of(id);
    let newest = jobs
        .iter()
        .filter_map(|j| names::parse_job_name(id.kind, &id.namespace, &id.name, j.metadata.name.as_deref()?))
        .map(|(_, seq)| seq)
        .max();
    if let Some(want) = last_job_seq.filter(|want| newest.is_none_or(|have| have < *want)) {
        // The store has no Job with the live status's newest sequence number.
        let active = active_job
            .filter(|a| names::parse_job_name(id.kind, &id.namespace, &id.name, a).is_some_and(|(_, seq)| seq == want));
        match active {
            // Usually the Job our own last pass created: one GET tells lag from loss.
            Some(a) => {
                if job(client, &id.namespace, a).await?.is_some() {
                    tracing::debug!(object = %id.what(), job = a, "Job store lags the status: waiting for its event");
                    return Ok(None);
                }
                // Gone (deleted while it ran): the cached history is current; docs/rules.md takes over.
            }
            None => {
                tracing::debug!(object = %id.what(), ?last_job_seq, ?newest, "Job store lags the status: reading live");
                return live_jobs_and_pods(client, id).await.map(Some);
            }
        }
    }
    let mut pods = own_pods(&jobs, caches.pods_of(id));
    // A finished Job whose pod the store shows unfinished: that pod read live. One the store
    // does not show while the Job is not booked: the object's pods listed live.
    let (mut stale, mut missing) = (Vec::new(), false);
    {
        let by_job = snapshot::pods_by_job(&pods);
        for j in jobs.iter().filter(|j| outcome::terminal(j).is_some()) {
            let Some(name) = j.metadata.name.as_deref() else {
                continue;
            };
            match by_job.get(name) {
                Some(p) if !pod_settled(p) => stale.extend(p.metadata.name.clone()),
                Some(_) => {}
                None => {
                    missing |= !j
                        .metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(keys::ANNOTATION_OUTCOME));
                }
            }
        }
    }
    if missing {
        tracing::debug!(object = %id.what(), "a finished, unbooked Job has no pod in the store: reading pods live");
        pods = own_pods(&jobs, live_pods(client, id).await?);
    } else if !stale.is_empty() {
        tracing::debug!(object = %id.what(), pods = ?stale, "a finished Job's pod is not settled in the store: reading it live");
        let api: Api<Pod> = Api::namespaced(client.clone(), &id.namespace);
        for name in stale {
            let live = api
                .get_opt(&name)
                .await
                .map_err(|e| Error::api(ApiAction::GetPod, format!("{}/{name}", id.namespace), e))?;
            pods.retain(|p| p.metadata.name.as_deref() != Some(name.as_str()));
            pods.extend(own_pods(&jobs, live.into_iter().collect()));
        }
    }
    Ok(Some((jobs, pods)))
}

/// Which watch events of an object bring a pass: an object it has not handed on yet, or one
/// whose [`captf_core::wake::acted_on`] changed since. It forgets an object that leaves the watch
/// (deleted, or relabelled out of the selector), so one that comes back always brings a pass,
/// and a list after the watch restarts keeps only the objects it lists.
#[derive(Debug, Default)]
pub struct ChangedOnly {
    seen: HashMap<(String, String), u64>,
    /// While a list is in progress: what it has handed on so far.
    listing: Option<HashMap<(String, String), u64>>,
}

impl ChangedOnly {
    /// The object this event brings a pass for, if any.
    pub fn pass<K: kube::Resource>(&mut self, ev: watcher::Event<K>) -> Option<K> {
        let key = |o: &K| {
            (
                o.meta().namespace.clone().unwrap_or_default(),
                o.meta().name.clone().unwrap_or_default(),
            )
        };
        match ev {
            watcher::Event::Apply(o) => {
                let h = captf_core::wake::acted_on(o.meta());
                (self.seen.insert(key(&o), h) != Some(h)).then_some(o)
            }
            watcher::Event::Delete(o) => {
                self.seen.remove(&key(&o));
                None
            }
            watcher::Event::Init => {
                self.listing = Some(HashMap::new());
                None
            }
            watcher::Event::InitApply(o) => {
                let (k, h) = (key(&o), captf_core::wake::acted_on(o.meta()));
                let changed = self.seen.get(&k) != Some(&h);
                self.listing.get_or_insert_with(HashMap::new).insert(k, h);
                changed.then_some(o)
            }
            watcher::Event::InitDone => {
                if let Some(listed) = self.listing.take() {
                    self.seen = listed;
                }
                None
            }
        }
    }
}

/// The holds of docs/rules.md: a TerraformCluster's members and their active Jobs (from the
/// caches; the cluster lease the cluster's own Jobs take is what serialises it against its
/// members, see docs/rules.md); for a member, the cluster lease held by a live Job of its cluster (both
/// read live).
pub async fn holds(client: &kube::Client, caches: &Caches, id: &Ident, deleting: bool) -> Result<Holds, Error> {
    let mut holds = Holds::default();
    let Some(cluster) = id.cluster_name.as_deref() else {
        return Ok(holds);
    };
    match id.kind {
        Kind::TerraformCluster => {
            if deleting {
                let candidates = caches.labelled_members(&id.namespace, cluster);
                let m = verified_members(client, id, cluster, candidates).await?;
                (holds.members, holds.unverified_members) = (m.members, m.unverified);
            }
            holds.member_job_active =
                verified_member_job(client, id, cluster, caches.member_jobs_active(&id.namespace, cluster)).await?;
        }
        Kind::TerraformMachinePool | Kind::TerraformMachine => {
            holds.cluster_lease_holder = cluster_lease_holder(client, &id.namespace, cluster).await?;
        }
    }
    Ok(holds)
}

/// The first of the `candidates` (active Jobs labelled with the cluster, with their owners from
/// the caches) that is a verified member's Job; the others are claims and hold nothing.
async fn verified_member_job(
    client: &kube::Client,
    id: &Ident,
    cluster: &str,
    candidates: Vec<(StoredJob, Option<kube::core::ObjectMeta>)>,
) -> Result<Option<String>, Error> {
    for (job, owner) in candidates {
        // Not in the store with the UID it names: not a member's Job (a member's store entry
        // always precedes its Jobs).
        let Some(owner) = owner else {
            tracing::debug!(job = ?job.metadata.name, "a Job labelled with cluster {cluster} is not owned by a machine pool or machine the controller knows: it does not hold {}", id.what());
            continue;
        };
        if is_member_job(client, id, cluster, &job.metadata, Some(owner)).await? {
            return Ok(job.metadata.name.clone());
        }
        tracing::info!(job = ?job.metadata.name, "a Job labelled with cluster {cluster} is not the Job of a verified member: it does not hold {}", id.what());
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use captf_shared::Op;
    use k8s_openapi::api::batch::v1::{JobCondition, JobSpec, JobStatus};
    use k8s_openapi::api::core::v1::{ConfigMap, PodSpec, PodStatus};
    use kube::core::ObjectMeta;
    use serde_json::json;

    fn ident(kind: Kind, ns: &str, name: &str, cluster: Option<&str>) -> Ident {
        Ident {
            kind,
            namespace: ns.into(),
            name: name.into(),
            uid: format!("uid-of-{ns}-{name}"),
            suffix: names::suffix(kind, ns, name),
            object_id: names::object_id(kind, ns, name),
            cluster_name: cluster.map(String::from),
        }
    }

    fn meta(ns: &str, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        }
    }

    /// A Job of `id` as the controller labels it, finished or not.
    fn job_of(id: &Ident, op: Op, seq: u32, finished: bool) -> Job {
        let name = names::job_name(id.kind, &id.namespace, &id.name, op, seq);
        let mut labels = vec![
            (keys::LABEL_KIND, id.kind.as_str()),
            (keys::LABEL_OBJECT, id.object_id.as_str()),
        ];
        if let Some(c) = &id.cluster_name {
            labels.push((keys::LABEL_CLUSTER_NAME, c.as_str()));
        }
        let mut metadata = meta(&id.namespace, &name, &labels);
        metadata.uid = Some(format!("job-uid-of-{name}"));
        metadata.owner_references = Some(vec![captf_core::job::owner_reference(id.kind, &id.name, &id.uid)]);
        Job {
            metadata,
            spec: Some(JobSpec::default()),
            status: Some(JobStatus {
                conditions: finished.then(|| {
                    vec![JobCondition {
                        type_: "Complete".into(),
                        status: "True".into(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
        }
    }

    /// A list as a watch delivers it, into a store and its indexes.
    fn fill<K, T>(w: &mut Writer<K>, indexes: &[&LabelIndex], objects: Vec<T>)
    where
        K: kube::Resource<DynamicType = ()> + Clone + 'static,
        T: Into<K>,
    {
        let mut events = vec![watcher::Event::Init];
        events.extend(objects.into_iter().map(|o| watcher::Event::InitApply(o.into())));
        events.push(watcher::Event::InitDone);
        let mut writers: Vec<IndexWriter> = indexes.iter().map(|i| i.writer()).collect();
        for e in &events {
            w.apply_watcher_event(e);
            writers.iter_mut().for_each(|x| x.apply(e));
        }
    }

    fn job_indexes(feeds: &Feeds, kind: Kind) -> [LabelIndex; 2] {
        let idx = &feeds.streams.idx;
        [
            idx.jobs_by_object[slot(kind)].clone(),
            idx.jobs_by_cluster[slot(kind)].clone(),
        ]
    }

    #[test]
    fn the_cached_history_of_an_object_holds_only_its_own_jobs() {
        let (caches, mut feeds) = caches(false);
        let me = ident(Kind::TerraformCluster, "default", "prod-eu", None);
        let other = ident(Kind::TerraformCluster, "default", "prod-us", None);
        let elsewhere = ident(Kind::TerraformCluster, "team-b", "prod-eu", None);
        let mut foreign = job_of(&me, Op::Apply, 9, false);
        foreign.metadata.name = Some("not-a-captf-name".into());
        let ix = job_indexes(&feeds, Kind::TerraformCluster);
        fill(
            &mut feeds.jobs[0],
            &[&ix[0], &ix[1]],
            vec![
                job_of(&me, Op::Apply, 1, true),
                job_of(&me, Op::Drift, 2, false),
                job_of(&other, Op::Apply, 1, true),
                job_of(&elsewhere, Op::Apply, 1, true),
                foreign,
            ],
        );
        let mut names: Vec<String> = caches
            .jobs_of(&me)
            .into_iter()
            .filter_map(|j| j.metadata.name)
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![
                names::job_name(me.kind, "default", "prod-eu", Op::Apply, 1),
                names::job_name(me.kind, "default", "prod-eu", Op::Drift, 2),
            ]
        );
    }

    /// A pod of `job`, owned by it.
    fn pod_of(job: &Job, name: &str) -> Pod {
        let mut metadata = meta("default", name, &[]);
        metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: job.metadata.name.clone().unwrap(),
            uid: job.metadata.uid.clone().unwrap(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        Pod {
            metadata,
            ..Pod::default()
        }
    }

    #[test]
    fn a_job_with_the_objects_name_and_labels_owned_by_another_uid_is_not_its_own() {
        let (caches, mut feeds) = caches(false);
        let me = ident(Kind::TerraformCluster, "default", "prod-eu", None);
        let mut planted = job_of(&me, Op::Apply, 7, true);
        planted.metadata.owner_references = Some(vec![captf_core::job::owner_reference(
            me.kind,
            "attacker",
            "uid-of-the-attacker",
        )]);
        let mut unowned = job_of(&me, Op::Apply, 8, true);
        unowned.metadata.owner_references = None;
        let ix = job_indexes(&feeds, Kind::TerraformCluster);
        fill(
            &mut feeds.jobs[0],
            &[&ix[0], &ix[1]],
            vec![job_of(&me, Op::Apply, 1, true), planted, unowned],
        );
        let names: Vec<String> = caches
            .jobs_of(&me)
            .into_iter()
            .filter_map(|j| j.metadata.name)
            .collect();
        assert_eq!(
            names,
            vec![names::job_name(me.kind, "default", "prod-eu", Op::Apply, 1)]
        );
    }

    #[test]
    fn a_pod_counts_only_under_one_of_the_objects_own_jobs() {
        let me = ident(Kind::TerraformCluster, "default", "prod-eu", None);
        let mine = job_of(&me, Op::Apply, 1, true);
        let mut theirs = job_of(&me, Op::Apply, 2, true);
        theirs.metadata.uid = Some("uid-of-a-planted-job".into());
        let mut orphan = pod_of(&mine, "orphan");
        orphan.metadata.owner_references = None;
        let pods = vec![pod_of(&mine, "mine"), pod_of(&theirs, "theirs"), orphan];
        let kept: Vec<String> = own_pods(std::slice::from_ref(&mine), pods)
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        assert_eq!(kept, vec!["mine".to_string()]);
    }

    #[test]
    fn a_clusters_members_and_their_active_jobs_come_from_the_stores() {
        let (caches, mut feeds) = caches(false);
        let pool = |ns: &str, name: &str, cluster: &str| Meta::<TerraformMachinePool> {
            types: None,
            metadata: ObjectMeta {
                uid: Some(format!("uid-of-{ns}-{name}")),
                ..meta(ns, name, &[(keys::LABEL_CLUSTER_NAME, cluster)])
            },
            _phantom: std::marker::PhantomData,
        };
        let pools_ix = feeds.streams.idx.objects_by_cluster[slot(Kind::TerraformMachinePool)].clone();
        fill(
            &mut feeds.pools,
            &[&pools_ix],
            vec![
                pool("default", "workers", "prod-eu"),
                pool("default", "x", "prod-us"),
                pool("b", "y", "prod-eu"),
            ],
        );
        let workers = ident(Kind::TerraformMachinePool, "default", "workers", Some("prod-eu"));
        let done = ident(Kind::TerraformMachine, "default", "m1", Some("prod-eu"));
        let (ix1, ix2) = (job_indexes(&feeds, workers.kind), job_indexes(&feeds, done.kind));
        fill(
            &mut feeds.jobs[1],
            &[&ix1[0], &ix1[1]],
            vec![job_of(&workers, Op::Apply, 3, false), {
                // A co-tenant's Job with the member's labels and a name it could produce, owned
                // by another UID: a claim, with no owner the stores know.
                let mut forged = job_of(&workers, Op::Apply, 4, false);
                forged.metadata.owner_references = Some(vec![captf_core::job::owner_reference(
                    workers.kind,
                    &workers.name,
                    "forged",
                )]);
                forged
            }],
        );
        fill(
            &mut feeds.jobs[2],
            &[&ix2[0], &ix2[1]],
            vec![job_of(&done, Op::Apply, 1, true)],
        );
        fill::<_, Meta<TerraformMachine>>(&mut feeds.machines, &[], vec![]);
        let labelled: Vec<(Kind, Option<String>)> = caches
            .labelled_members("default", "prod-eu")
            .into_iter()
            .map(|(k, m)| (k, m.name))
            .collect();
        assert_eq!(
            labelled,
            vec![(Kind::TerraformMachinePool, Some("workers".to_string()))]
        );
        let active: Vec<(Option<String>, Option<Option<String>>)> = caches
            .member_jobs_active("default", "prod-eu")
            .into_iter()
            .map(|(j, owner)| (j.metadata.name, owner.map(|m| m.name)))
            .collect();
        let owned = Some(Some("workers".to_string()));
        let mut active = active;
        active.sort();
        assert_eq!(
            active,
            vec![
                (
                    Some(names::job_name(workers.kind, "default", "workers", Op::Apply, 3)),
                    owned
                ),
                (
                    Some(names::job_name(workers.kind, "default", "workers", Op::Apply, 4)),
                    None
                ),
            ]
        );
        assert!(caches.member_jobs_active("default", "prod-us").is_empty());
    }

    #[test]
    fn the_stores_keep_no_job_or_pod_spec_and_no_managed_fields() {
        let me = ident(Kind::TerraformCluster, "default", "prod-eu", None);
        let mut full = job_of(&me, Op::Apply, 1, true);
        full.metadata.managed_fields = Some(vec![Default::default()]);
        let j = StoredJob::from(full.clone()).to_job();
        assert_eq!((j.spec.is_none(), j.metadata.managed_fields.is_none()), (true, true));
        assert_eq!(
            (&j.metadata.name, &j.metadata.labels),
            (&full.metadata.name, &full.metadata.labels)
        );
        assert!(outcome::terminal(&j).is_some(), "the status stays");
        let p = Pod {
            metadata: ObjectMeta {
                annotations: Some([("a".to_string(), "b".to_string())].into()),
                ..meta("default", "p", &[("batch.kubernetes.io/job-name", "j")])
            },
            spec: Some(PodSpec::default()),
            status: Some(serde_json::from_value(json!({
                "phase": "Failed", "podIP": "10.0.1.1", "hostIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "False"}, {"type": "DisruptionTarget", "status": "True"}],
                "containerStatuses": [
                    {"name": "runner", "image": "runner:1", "imageID": "sha", "ready": false, "restartCount": 0,
                     "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": "{\"result\":\"failed\"}",
                                              "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:01:00Z"}}},
                    {"name": "sidecar", "image": "s", "imageID": "", "ready": true, "restartCount": 0,
                     "state": {"running": {}}},
                ],
            }))
            .unwrap()),
        };
        let p = StoredPod::from(p).to_pod();
        assert_eq!((p.spec.is_none(), p.metadata.annotations.is_none()), (true, true));
        assert_eq!(snapshot::pod_job_name(&p), Some("j"));
        assert!(pod_settled(&p));
        assert!(outcome::disrupted(&p), "DisruptionTarget stays");
        let st = p.status.as_ref().unwrap();
        assert_eq!(
            (st.pod_ip.as_deref(), st.conditions.as_ref().map(Vec::len)),
            (None, Some(1))
        );
        let cs = st.container_statuses.as_ref().unwrap();
        assert_eq!(cs.len(), 1, "only terminated containers stay");
        let t = cs[0].state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!(
            (t.exit_code, t.message.as_deref()),
            (1, Some("{\"result\":\"failed\"}"))
        );
    }

    #[test]
    fn no_decision_until_every_store_has_listed_once() {
        let (caches, feeds) = caches(false);
        assert!(!caches.synced());
        for i in 0..FEEDS {
            let mut mark = feeds.streams.mark::<StoredJob>(i);
            mark(&Ok(watcher::Event::Init));
            assert!(!caches.synced(), "a list that has not ended marks nothing");
            mark(&Ok(watcher::Event::InitDone));
            assert_eq!(caches.synced(), i == FEEDS - 1);
        }
    }

    #[test]
    fn the_label_index_follows_applies_deletes_and_a_relist() {
        let ix = LabelIndex::new(keys::LABEL_OBJECT);
        let mut w = ix.writer();
        let cm = |name: &str, obj: &str| ConfigMap {
            metadata: meta("default", name, &[(keys::LABEL_OBJECT, obj)]),
            ..Default::default()
        };
        w.apply(&watcher::Event::Apply(cm("a", "o1")));
        w.apply(&watcher::Event::Apply(cm("b", "o1")));
        assert_eq!(ix.names("default", "o1"), vec!["a", "b"]);
        assert!(ix.names("other", "o1").is_empty());
        // A label that changes moves the name.
        w.apply(&watcher::Event::Apply(cm("b", "o2")));
        assert_eq!(
            (ix.names("default", "o1"), ix.names("default", "o2")),
            (vec!["a".into()], vec!["b".into()])
        );
        w.apply(&watcher::Event::Delete(cm("a", "o1")));
        assert!(ix.names("default", "o1").is_empty());
        // A re-list keeps the old names until it ends, then holds exactly what it listed.
        w.apply::<ConfigMap>(&watcher::Event::Init);
        w.apply(&watcher::Event::InitApply(cm("c", "o1")));
        assert_eq!(ix.names("default", "o2"), vec!["b"]);
        w.apply::<ConfigMap>(&watcher::Event::InitDone);
        assert_eq!(
            (ix.names("default", "o1"), ix.names("default", "o2")),
            (vec!["c".into()], vec![])
        );
    }

    #[test]
    fn a_running_pod_is_not_settled() {
        let p = |phase: &str| Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(!pod_settled(&p("Running")));
        assert!(!pod_settled(&p("Pending")));
        assert!(pod_settled(&p("Succeeded")));
    }
}

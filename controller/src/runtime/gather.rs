//! Read what one reconcile pass needs (DESIGN.md §5.2, §4): the object's Jobs and their pods,
//! the inputs Secret, the state lock Lease and its holder pod (read LIVE), the referenced
//! Secrets and ConfigMaps, and the cluster holds.
//!
//! # Caches and live reads (DESIGN.md §13)
//!
//! The object's Jobs and pods, and a TerraformCluster's member objects and their Jobs, come from
//! reflector stores ([`Caches`]) fed by label-selected watches (`captf.io/kind=<Kind>` for Jobs,
//! `captf.io/kind` for pods, the three kinds themselves), so a pass costs no list of the API
//! server and memory grows with CAPTF's objects, not the cluster's. The Job watches are also the
//! controllers' triggers, and a reflector writes its store before it passes an event on: a
//! reconcile triggered by a Job change sees that change.
//!
//! Everything else a decision hinges on stays LIVE: the object itself (re-read at the start of
//! every reconcile), the inputs Secret, the lock Lease and its holder pod (seed 003), the
//! §5.6 checks (Job NotFound and the object's status, `interrupted.rs`), the lease takes
//! (`leases.rs`, resourceVersion preconditions), the cluster lease and its holder Job.
//!
//! Why a cached Job list is safe:
//! - **Never two active Jobs for one object.** A Job is created only after its run lease
//!   `captf-run-<suffix>` is taken (holderIdentity = the Job's name) with a create or a
//!   resourceVersion-checked update, and a holder is replaced only when its Job is NotFound in a
//!   LIVE read and is not the live `status.activeJob` (`leases::take`). The lease is released only
//!   when the Job is booked (the outcome annotation written) or confirmed gone (`interrupted`).
//!   A Job this controller created that is not yet in the store is still the lease's live holder,
//!   so no second Job can take the lease, whatever the store says.
//! - **Deterministic names.** The next Job's name is `<object>-<op>-<seq>` with `seq` one above
//!   the larger of the cached Jobs' sequence numbers and the LIVE `status.lastJobSeq`; creating
//!   an existing name is a 409 (requeue). And when the store lags the live status (it has no Job
//!   with sequence `status.lastJobSeq`), [`jobs_and_pods`] does not decide from it: that pass
//!   reads the Jobs and pods live, as before caching (a Job our own pass just created, or one
//!   deleted while it ran, which the §5.6 live reads then handle).
//! - **Booking exactly once.** The `captf.io/outcome` annotation is written with the cached
//!   Job's resourceVersion: a stale Job gets 409 and the pass requeues; events and metrics follow
//!   only the write that set it (`book.rs`).
//! - **Results from pods.** A finished Job whose cached pod is missing (and the Job not yet
//!   booked) or not yet terminated has its pods read live, so a pod watch that lags the Job watch
//!   never turns a runner result into "no result".
//! - **Not synced, no decision.** Until every store has listed once ([`Caches::synced`]) a pass
//!   requeues without deciding. After a dropped watch the stores keep their last full state and a
//!   re-list swaps in the new one at once (kube's `Writer`), so a store is never half empty.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::{WatchStreamExt, reflector::store::Writer};

use captf_shared::inputs::Inputs;
use captf_shared::types::{CaptfObject, TerraformCluster, TerraformMachine, TerraformMachinePool};
use captf_shared::{Kind, keys, names};

use super::errors::{ApiAction, Error};
use crate::core::inputs::{self as core_inputs, ResolveError, SourceData, SourceKind};
use crate::core::lock::{self, HolderPod, LockLease, LockState};
use crate::core::outcome;
use crate::core::snapshot::{self, Holds};

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

/// The read side of the reflector stores (cheap to clone).
#[derive(Clone)]
pub struct Caches {
    pub clusters: Store<TerraformCluster>,
    pub pools: Store<TerraformMachinePool>,
    pub machines: Store<TerraformMachine>,
    /// The Jobs labelled `captf.io/kind=<Kind>`, one store per kind.
    jobs: [Store<Job>; 3],
    /// The pods labelled `captf.io/kind` (the Jobs' pod template carries the Job's labels).
    pods: Store<Pod>,
    synced: Arc<Synced>,
}

/// The write side of [`Caches`]: each writer goes into the watch stream that feeds it.
pub struct Feeds {
    pub clusters: Writer<TerraformCluster>,
    pub pools: Writer<TerraformMachinePool>,
    pub machines: Writer<TerraformMachine>,
    pub jobs: [Writer<Job>; 3],
    pub pods: Writer<Pod>,
    pub streams: FeedStreams,
}

/// Builds the watch streams that feed the stores (each marks its store synced).
#[derive(Clone)]
pub struct FeedStreams {
    synced: Arc<Synced>,
}

/// New, empty stores and their writers.
pub fn caches() -> (Caches, Feeds) {
    let (clusters, cw) = reflector::store();
    let (pools, pw) = reflector::store();
    let (machines, mw) = reflector::store();
    let (j0, jw0) = reflector::store();
    let (j1, jw1) = reflector::store();
    let (j2, jw2) = reflector::store();
    let (pods, podw) = reflector::store();
    let synced = Arc::new(Synced::default());
    (
        Caches {
            clusters,
            pools,
            machines,
            jobs: [j0, j1, j2],
            pods,
            synced: synced.clone(),
        },
        Feeds {
            clusters: cw,
            pools: pw,
            machines: mw,
            jobs: [jw0, jw1, jw2],
            pods: podw,
            streams: FeedStreams { synced },
        },
    )
}

/// What the store keeps of a Job: metadata (without managedFields) and status. The spec (the
/// pod template with its env and volumes, most of a Job's size) is never read from the store.
pub fn strip_job(j: &mut Job) {
    j.metadata.managed_fields = None;
    j.spec = None;
}

/// What the store keeps of a pod: labels, owner, timestamps and status (the termination message).
pub fn strip_pod(p: &mut Pod) {
    p.metadata.managed_fields = None;
    p.metadata.annotations = None;
    p.spec = None;
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

    /// Feed of a kind `K`'s store: applied objects, for `Controller::for_stream`.
    pub fn kind_stream<K: super::kinds::CaptfKind>(
        &self,
        writer: Writer<K>,
        api: Api<K>,
    ) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        let mark = self.mark::<K>(slot(K::KIND));
        watcher(api, watcher::Config::default())
            .modify(|o: &mut K| o.meta_mut().managed_fields = None)
            .reflect(writer)
            .inspect(mark)
            .applied_objects()
    }

    /// Feed of the Jobs store of `kind` (label `captf.io/kind=<Kind>`): touched objects
    /// (deletions too), for `Controller::owns_stream`.
    pub fn jobs_stream(
        &self,
        kind: Kind,
        writer: Writer<Job>,
        api: Api<Job>,
    ) -> impl Stream<Item = Result<Job, watcher::Error>> + Send + 'static {
        let mark = self.mark::<Job>(FEED_JOBS + slot(kind));
        let wc = watcher::Config::default().labels(&format!("{}={}", keys::LABEL_KIND, kind.as_str()));
        watcher(api, wc)
            .modify(strip_job)
            .reflect(writer)
            .inspect(mark)
            .touched_objects()
    }

    /// Feed of the pods store (label `captf.io/kind`). Pods trigger nothing (their Jobs do), so
    /// this stream must be driven on its own; it backs off on errors.
    pub fn pods_stream(&self, writer: Writer<Pod>, api: Api<Pod>) -> impl Stream<Item = ()> + Send + 'static {
        let mark = self.mark::<Pod>(FEED_PODS);
        watcher(api, watcher::Config::default().labels(keys::LABEL_KIND))
            .default_backoff()
            .modify(strip_pod)
            .reflect(writer)
            .inspect(mark)
            .map(|ev| {
                if let Err(e) = ev {
                    tracing::debug!("pod watch: {e}");
                }
            })
    }
}

impl Caches {
    /// Every store has listed once.
    pub fn synced(&self) -> bool {
        self.synced.0.iter().all(|f| f.load(Ordering::SeqCst))
    }

    /// The cached Jobs of one object (only names this object can produce).
    pub fn jobs_of(&self, id: &Ident) -> Vec<Job> {
        self.jobs[slot(id.kind)]
            .state_filter(|j| {
                j.metadata.namespace.as_deref() == Some(id.namespace.as_str())
                    && label(&j.metadata.labels, keys::LABEL_OBJECT) == Some(id.object_id.as_str())
                    && j.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| names::parse_job_name(id.kind, &id.namespace, &id.name, n).is_some())
            })
            .into_iter()
            .map(|j| (*j).clone())
            .collect()
    }

    /// The cached pods of one object.
    pub fn pods_of(&self, id: &Ident) -> Vec<Pod> {
        self.pods
            .state_filter(|p| {
                p.metadata.namespace.as_deref() == Some(id.namespace.as_str())
                    && label(&p.metadata.labels, keys::LABEL_KIND) == Some(id.kind.as_str())
                    && label(&p.metadata.labels, keys::LABEL_OBJECT) == Some(id.object_id.as_str())
            })
            .into_iter()
            .map(|p| (*p).clone())
            .collect()
    }

    /// A TerraformCluster's member machine pools and machines (`<Kind>/<name>`), from the
    /// kinds' stores.
    fn members(&self, ns: &str, cluster: &str) -> Vec<String> {
        let member = |m: &kube::core::ObjectMeta| {
            m.namespace.as_deref() == Some(ns) && label(&m.labels, keys::LABEL_CLUSTER_NAME) == Some(cluster)
        };
        let pools = self.pools.state_filter(|o| member(&o.metadata));
        let machines = self.machines.state_filter(|o| member(&o.metadata));
        let mut out: Vec<String> = pools
            .iter()
            .filter_map(|o| {
                o.metadata
                    .name
                    .as_ref()
                    .map(|n| format!("{}/{n}", Kind::TerraformMachinePool))
            })
            .chain(machines.iter().filter_map(|o| {
                o.metadata
                    .name
                    .as_ref()
                    .map(|n| format!("{}/{n}", Kind::TerraformMachine))
            }))
            .collect();
        out.sort();
        out
    }

    /// An active (not finished) Job of a member of the cluster, from the members' Jobs stores.
    fn member_job_active(&self, ns: &str, cluster: &str) -> Option<String> {
        [Kind::TerraformMachinePool, Kind::TerraformMachine]
            .into_iter()
            .find_map(|k| {
                self.jobs[slot(k)].find(|j| {
                    j.metadata.namespace.as_deref() == Some(ns)
                        && label(&j.metadata.labels, keys::LABEL_CLUSTER_NAME) == Some(cluster)
                        && outcome::terminal(j).is_none()
                })
            })
            .and_then(|j| j.metadata.name.clone())
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

/// Who the object is.
#[derive(Clone, Debug)]
pub struct Ident {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub suffix: String,
    pub object_id: String,
    pub cluster_name: Option<String>,
}

impl Ident {
    pub fn of(object: &CaptfObject, kind: Kind) -> Result<Ident, Error> {
        let meta = object.metadata();
        let name = meta.name.clone().ok_or(Error::MissingMeta { kind, field: "name" })?;
        let namespace = meta.namespace.clone().ok_or(Error::MissingMeta {
            kind,
            field: "namespace",
        })?;
        Ok(Ident {
            suffix: names::suffix(kind, &namespace, &name),
            object_id: names::object_id(kind, &namespace, &name),
            cluster_name: core_inputs::cluster_name(kind, meta),
            uid: meta.uid.clone().unwrap_or_default(),
            kind,
            namespace,
            name,
        })
    }

    /// `captf.io/kind=<Kind>,captf.io/object=<id>`: this object's Jobs and pods.
    pub fn selector(&self) -> String {
        format!(
            "{}={},{}={}",
            keys::LABEL_KIND,
            self.kind.as_str(),
            keys::LABEL_OBJECT,
            self.object_id
        )
    }

    pub fn what(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// The object's Jobs (only names this object can produce) and their pods, from the caches
/// (see the module doc). `None`: the caches have not listed yet, decide nothing (requeue).
/// `last_job_seq` is the live `status.lastJobSeq`: when no cached Job has it, the store lags
/// and this pass reads live.
pub async fn jobs_and_pods(
    client: &kube::Client,
    caches: &Caches,
    id: &Ident,
    last_job_seq: Option<u32>,
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
    if last_job_seq.is_some_and(|want| newest.is_none_or(|have| have < want)) {
        tracing::debug!(object = %id.what(), ?last_job_seq, ?newest, "Job cache lags the status: reading live");
        return live_jobs_and_pods(client, id).await.map(Some);
    }
    let mut pods = caches.pods_of(id);
    let by_job = snapshot::pods_by_job(&pods);
    let unsettled = jobs.iter().any(|j| {
        let Some(name) = j.metadata.name.as_deref() else {
            return false;
        };
        if outcome::terminal(j).is_none() {
            return false;
        }
        match by_job.get(name) {
            Some(p) => !pod_settled(p),
            None => !j
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(keys::ANNOTATION_OUTCOME)),
        }
    });
    if unsettled {
        tracing::debug!(object = %id.what(), "a finished Job's pod is not settled in the cache: reading pods live");
        pods = live_pods(client, id).await?;
    }
    Ok(Some((jobs, pods)))
}

/// The object's Jobs and pods listed live (label-selected).
pub async fn live_jobs_and_pods(client: &kube::Client, id: &Ident) -> Result<(Vec<Job>, Vec<Pod>), Error> {
    let lp = ListParams::default().labels(&id.selector());
    let jobs: Api<Job> = Api::namespaced(client.clone(), &id.namespace);
    let jobs = jobs
        .list(&lp)
        .await
        .map_err(|e| Error::api(ApiAction::ListJobs, format!("of {}", id.what()), e))?
        .items
        .into_iter()
        .filter(|j| {
            j.metadata
                .name
                .as_deref()
                .is_some_and(|n| names::parse_job_name(id.kind, &id.namespace, &id.name, n).is_some())
        })
        .collect();
    Ok((jobs, live_pods(client, id).await?))
}

async fn live_pods(client: &kube::Client, id: &Ident) -> Result<Vec<Pod>, Error> {
    let lp = ListParams::default().labels(&id.selector());
    Api::<Pod>::namespaced(client.clone(), &id.namespace)
        .list(&lp)
        .await
        .map(|l| l.items)
        .map_err(|e| Error::api(ApiAction::ListPods, format!("of {}", id.what()), e))
}

/// A Secret by name, `None` when it does not exist.
pub async fn secret(client: &kube::Client, ns: &str, name: &str) -> Result<Option<Secret>, Error> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| Error::api(ApiAction::GetSecret, format!("{ns}/{name}"), e))
}

/// A Lease by name, `None` when it does not exist.
pub async fn lease(client: &kube::Client, ns: &str, name: &str) -> Result<Option<Lease>, Error> {
    Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| Error::api(ApiAction::GetLease, format!("{ns}/{name}"), e))
}

/// A Job read live, `None` when it does not exist.
pub async fn job(client: &kube::Client, ns: &str, name: &str) -> Result<Option<Job>, Error> {
    Api::<Job>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| Error::api(ApiAction::GetJob, format!("{ns}/{name}"), e))
}

/// The state lock check (seed 003): the lock Lease and, when its holder looks like one of this
/// object's runner pods, that pod read live from the API server.
pub async fn lock_state(client: &kube::Client, id: &Ident) -> Result<LockState, Error> {
    let lease = lease(client, &id.namespace, &names::lock_lease_name(&id.suffix)).await?;
    let lock_lease: Option<LockLease> = lease.as_ref().map(snapshot::lock_lease);
    let pattern = names::RunnerPattern::new(id.kind, &id.namespace, &id.name);
    let pod = match lock::holder_hostname(lock_lease.as_ref()) {
        Some(host) if pattern.matches(&host) => {
            let live = Api::<Pod>::namespaced(client.clone(), &id.namespace)
                .get_opt(&host)
                .await
                .map_err(|e| Error::api(ApiAction::GetPod, format!("{}/{host}", id.namespace), e))?;
            snapshot::holder_pod(live.as_ref())
        }
        _ => HolderPod::Unknown,
    };
    Ok(lock::check_lock(lock_lease.as_ref(), &pattern, &pod))
}

fn secret_data(s: &Secret) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect();
    out.extend(s.string_data.clone().unwrap_or_default());
    out
}

/// The Cluster API Machine that owns a TerraformMachine, and its bootstrap data Secret name
/// (`spec.bootstrap.dataSecretName`). `None` while it is not set or cannot be read.
pub async fn bootstrap_data_secret(client: &kube::Client, object: &CaptfObject, ns: &str) -> Option<String> {
    let owner = object
        .metadata()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "Machine" && o.api_version.starts_with("cluster.x-k8s.io/"))?;
    let (group, version) = owner.api_version.split_once('/')?;
    let ar = ApiResource {
        group: group.to_string(),
        version: version.to_string(),
        api_version: owner.api_version.clone(),
        kind: "Machine".to_string(),
        plural: "machines".to_string(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    match api.get_opt(&owner.name).await {
        Ok(Some(m)) => m
            .data
            .pointer("/spec/bootstrap/dataSecretName")
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string),
        Ok(None) => None,
        Err(e) => {
            tracing::debug!(error = %e, "failed to read the Cluster API Machine {}", owner.name);
            None
        }
    }
}

/// Resolve the inputs (§2.3) with the referenced Secrets and ConfigMaps read live.
pub async fn resolve_inputs(
    client: &kube::Client,
    object: &CaptfObject,
    id: &Ident,
) -> Result<Result<Inputs, ResolveError>, Error> {
    let spec = object.terraform_spec();
    let mut fetched: BTreeMap<(SourceKind, String), SourceData> = BTreeMap::new();
    for entry in spec.variables_from.iter().flatten() {
        if let Some(r) = &entry.secret_ref {
            let s = secret(client, &id.namespace, &r.name).await?;
            fetched.insert((SourceKind::Secret, r.name.clone()), s.as_ref().map(secret_data));
        }
        if let Some(r) = &entry.config_map_ref {
            let cm = Api::<ConfigMap>::namespaced(client.clone(), &id.namespace)
                .get_opt(&r.name)
                .await
                .map_err(|e| Error::api(ApiAction::GetConfigMap, format!("{}/{}", id.namespace, r.name), e))?;
            fetched.insert(
                (SourceKind::ConfigMap, r.name.clone()),
                cm.map(|c| c.data.unwrap_or_default()),
            );
        }
    }
    let bootstrap = if id.kind == Kind::TerraformMachine {
        bootstrap_data_secret(client, object, &id.namespace).await
    } else {
        None
    };
    Ok(core_inputs::resolve_inputs(
        id.kind,
        object.metadata(),
        spec,
        bootstrap.as_deref(),
        |kind, name| Ok(fetched.get(&(kind, name.to_string())).cloned().flatten()),
    ))
}

/// The holds of §4 and §8: a TerraformCluster's members and their active Jobs (from the
/// caches; the cluster lease the cluster's own Jobs take is what serialises it against its
/// members, see §4); for a member, the cluster lease held by a live Job of its cluster (both
/// read live).
pub async fn holds(client: &kube::Client, caches: &Caches, id: &Ident) -> Result<Holds, Error> {
    let mut holds = Holds::default();
    let Some(cluster) = id.cluster_name.as_deref() else {
        return Ok(holds);
    };
    match id.kind {
        Kind::TerraformCluster => {
            holds.members = caches.members(&id.namespace, cluster);
            holds.member_job_active = caches.member_job_active(&id.namespace, cluster);
        }
        Kind::TerraformMachinePool | Kind::TerraformMachine => {
            let lease = lease(
                client,
                &id.namespace,
                &names::cluster_lease_name(&id.namespace, cluster),
            )
            .await?;
            if let Some(holder) = lease.and_then(|l| l.spec?.holder_identity).filter(|h| !h.is_empty()) {
                let live = job(client, &id.namespace, &holder).await?;
                if live.as_ref().is_some_and(|j| outcome::terminal(j).is_none()) {
                    holds.cluster_lease_holder = Some(holder);
                }
            }
        }
    }
    Ok(holds)
}

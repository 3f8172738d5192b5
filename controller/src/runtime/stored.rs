//! What the controller's reflector stores keep of a Job and of a pod: [`Stored`], the object's
//! metadata and the part of its status a pass reads, turned back into the full type for a pass.

use std::borrow::Cow;
use std::marker::PhantomData;

use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodCondition, PodStatus,
};
use kube::core::ObjectMeta;
use kube::runtime::watcher;

use captf_core::outcome;
use captf_shared::keys;

/// What a store keeps of an object of kind `K`: its metadata without `managedFields`, and `S`,
/// the part of its status a pass reads. The rest (a Job's pod template, a pod's spec) is never
/// read from a store. `k8s-openapi` keeps nested structs inline, so even an empty `JobSpec` takes
/// 2 KiB and an empty `PodSpec` 1.4 KiB: in the full types, specs that were `None` were a quarter
/// of the controller's heap at 10,000 objects. A pass gets the full type back
/// ([`StoredJob::to_job`], [`StoredPod::to_pod`]).
#[derive(Clone, Debug)]
pub struct Stored<K, S> {
    pub metadata: ObjectMeta,
    pub status: Option<S>,
    kind: PhantomData<fn() -> K>,
}

/// What the Jobs stores keep of a Job: metadata and status.
pub type StoredJob = Stored<Job, JobStatus>;

/// What the pods store keeps of a pod (see [`PodSummary`]).
pub type StoredPod = Stored<Pod, PodSummary>;

impl<K: kube::Resource<DynamicType = ()>, S> kube::Resource for Stored<K, S> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<K, S> Stored<K, S> {
    fn new(mut metadata: ObjectMeta, status: Option<S>) -> Self {
        metadata.managed_fields = None;
        Stored {
            metadata,
            status,
            kind: PhantomData,
        }
    }
}

impl From<Job> for StoredJob {
    fn from(j: Job) -> Self {
        Stored::new(j.metadata, j.status)
    }
}

impl StoredJob {
    /// The Job as a pass reads it: no spec.
    pub fn to_job(&self) -> Job {
        Job {
            metadata: self.metadata.clone(),
            spec: None,
            status: self.status.clone(),
        }
    }
}

/// The part of a pod's status a pass reads: the phase, a `DisruptionTarget` condition and the
/// terminated containers' exit code, reason and message (the runner's result). A `PodStatus`
/// with one `ContainerStatus` takes 1.1 KiB before any of its strings; this about a tenth of
/// that. With the labels a pass reads, the owner and the timestamps, it is all the pods store
/// keeps of a pod.
#[derive(Clone, Debug, Default)]
pub struct PodSummary {
    phase: Option<String>,
    disruption: Vec<PodCondition>,
    terminated: Vec<(String, ContainerStateTerminated)>,
}

impl From<Pod> for StoredPod {
    fn from(p: Pod) -> Self {
        let mut metadata = p.metadata;
        metadata.annotations = None;
        metadata.generate_name = None;
        if let Some(l) = metadata.labels.as_mut() {
            l.retain(|k, _| {
                [
                    keys::LABEL_KIND,
                    keys::LABEL_OBJECT,
                    "batch.kubernetes.io/job-name",
                    "job-name",
                ]
                .contains(&k.as_str())
            });
        }
        let status = p.status.map(|st| PodSummary {
            phase: st.phase,
            disruption: st
                .conditions
                .unwrap_or_default()
                .into_iter()
                .filter(|c| c.type_ == outcome::DISRUPTION_TARGET)
                .collect(),
            terminated: st
                .container_statuses
                .unwrap_or_default()
                .into_iter()
                .filter_map(|c| {
                    let t = c.state?.terminated?;
                    Some((
                        c.name,
                        ContainerStateTerminated {
                            exit_code: t.exit_code,
                            reason: t.reason,
                            message: t.message,
                            ..Default::default()
                        },
                    ))
                })
                .collect(),
        });
        Stored::new(metadata, status)
    }
}

impl StoredPod {
    /// The pod as a pass reads it: no spec, and of the status what [`PodSummary`] keeps.
    pub fn to_pod(&self) -> Pod {
        let status = self.status.as_ref().map(|s| PodStatus {
            phase: s.phase.clone(),
            conditions: (!s.disruption.is_empty()).then(|| s.disruption.clone()),
            container_statuses: (!s.terminated.is_empty()).then(|| {
                s.terminated
                    .iter()
                    .map(|(name, t)| ContainerStatus {
                        name: name.clone(),
                        state: Some(ContainerState {
                            terminated: Some(t.clone()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        });
        Pod {
            metadata: self.metadata.clone(),
            spec: None,
            status,
        }
    }
}

/// A watch event with its object turned into what a store keeps.
pub fn stored<A, B: From<A>>(ev: watcher::Event<A>) -> watcher::Event<B> {
    match ev {
        watcher::Event::Apply(o) => watcher::Event::Apply(o.into()),
        watcher::Event::Delete(o) => watcher::Event::Delete(o.into()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(o.into()),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

//! Read what one reconcile pass needs (DESIGN.md §5.2, §4): the object's Jobs and their pods,
//! the inputs Secret, the state lock Lease and its holder pod (read LIVE), the referenced
//! Secrets and ConfigMaps, and the cluster holds. All reads go to the API server, not a cache,
//! so a restarted controller and a dropped watch never see a stale history.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject};

use captf_shared::inputs::Inputs;
use captf_shared::types::CaptfObject;
use captf_shared::{Kind, keys, names};

use super::errors::{ApiAction, Error};
use super::kinds::api_resource;
use crate::core::inputs::{self as core_inputs, ResolveError, SourceData, SourceKind};
use crate::core::lock::{self, HolderPod, LockLease, LockState};
use crate::core::outcome;
use crate::core::snapshot::{self, Holds};

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

/// The object's Jobs (only names this object can produce) and their pods.
pub async fn jobs_and_pods(client: &kube::Client, id: &Ident) -> Result<(Vec<Job>, Vec<Pod>), Error> {
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
    let pods: Api<Pod> = Api::namespaced(client.clone(), &id.namespace);
    let pods = pods
        .list(&lp)
        .await
        .map_err(|e| Error::api(ApiAction::ListPods, format!("of {}", id.what()), e))?
        .items;
    Ok((jobs, pods))
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

/// The holds of §4 and §8: a TerraformCluster's members and their active Jobs; for a member,
/// the cluster lease held by a live Job of its cluster.
pub async fn holds(client: &kube::Client, id: &Ident) -> Result<Holds, Error> {
    let mut holds = Holds::default();
    let Some(cluster) = id.cluster_name.as_deref() else {
        return Ok(holds);
    };
    match id.kind {
        Kind::TerraformCluster => {
            let lp = ListParams::default().labels(&format!("{}={cluster}", keys::LABEL_CLUSTER_NAME));
            for kind in [Kind::TerraformMachinePool, Kind::TerraformMachine] {
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &id.namespace, &api_resource(kind));
                let list = api
                    .list(&lp)
                    .await
                    .map_err(|e| Error::api(ApiAction::ListMembers, id.what(), e))?;
                holds.members.extend(
                    list.items
                        .iter()
                        .filter_map(|o| o.metadata.name.as_ref().map(|n| format!("{kind}/{n}"))),
                );
            }
            let jobs = Api::<Job>::namespaced(client.clone(), &id.namespace)
                .list(&lp)
                .await
                .map_err(|e| Error::api(ApiAction::ListJobs, format!("of the cluster {cluster}"), e))?;
            holds.member_job_active = jobs
                .items
                .iter()
                .filter(|j| {
                    j.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(keys::LABEL_KIND))
                        .map(String::as_str)
                        != Some(Kind::TerraformCluster.as_str())
                })
                .find(|j| outcome::terminal(j).is_none())
                .and_then(|j| j.metadata.name.clone());
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

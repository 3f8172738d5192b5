//! The reads every reader of an object makes live from the API server: Secrets, ConfigMaps,
//! Leases, Jobs, pods, the state lock and its holder pod, the inputs with what they reference,
//! the Cluster API owners and the members of a cluster. The controller's pass and a person's
//! live read ([`crate::live`]) both use them; the pass takes the object's Jobs and pods and a
//! cluster's members from its caches instead (`runtime/gather.rs`).

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::Value;

use captf_shared::inputs::Inputs;
use captf_shared::types::{CaptfObject, CliConfigRef, JobsSpec};
use captf_shared::{Kind, binding, names, references};

use crate::errors::{ApiAction, Error};
use captf_core::exports::ClusterExports;
use captf_core::ident::Ident;
use captf_core::inputs::{self as core_inputs, ResolveError, SourceData, SourceKind};
use captf_core::lock::{self, HolderPod, LockLease, LockState};
use captf_core::membership::Unverified;
use captf_core::outcome;
use captf_core::snapshot;

/// The pods of `jobs` among `pods` (PURE): a pod counts only under the controller owner
/// reference of one of the object's own Jobs, whatever its labels say.
pub fn own_pods(jobs: &[Job], pods: Vec<Pod>) -> Vec<Pod> {
    let uids: Vec<&str> = jobs.iter().filter_map(|j| j.metadata.uid.as_deref()).collect();
    pods.into_iter()
        .filter(|p| uids.iter().any(|u| binding::owned_by(&p.metadata, u)))
        .collect()
}

/// The object's Jobs and pods listed live (label-selected, then only those owned by the object
/// and by its Jobs).
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
                && binding::owned_by(&j.metadata, &id.uid)
        })
        .collect::<Vec<Job>>();
    let pods = own_pods(&jobs, live_pods(client, id).await?);
    Ok((jobs, pods))
}

pub async fn live_pods(client: &kube::Client, id: &Ident) -> Result<Vec<Pod>, Error> {
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

/// The env names a Job's `envFrom` entries bring from Secrets: each Secret's keys after the
/// entry's prefix. A Secret that does not exist brings none (its pod cannot start unless the
/// entry is optional). Read when the Job is made, so the runner can mask their values.
pub async fn env_from_secret_names(
    client: &kube::Client,
    ns: &str,
    jobs: Option<&JobsSpec>,
) -> Result<Vec<String>, Error> {
    let mut names = Vec::new();
    for entry in jobs.and_then(|j| j.env_from.as_deref()).unwrap_or_default() {
        let Some(r) = &entry.secret_ref else { continue };
        let Some(s) = secret(client, ns, &r.name).await? else {
            continue;
        };
        let prefix = entry.prefix.as_deref().unwrap_or_default();
        let keys = s
            .data
            .iter()
            .flat_map(|d| d.keys())
            .chain(s.string_data.iter().flat_map(|d| d.keys()));
        names.extend(keys.map(|k| format!("{prefix}{k}")));
    }
    Ok(names)
}

/// A Lease by name, `None` when it does not exist.
pub async fn lease(client: &kube::Client, ns: &str, name: &str) -> Result<Option<Lease>, Error> {
    Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| Error::api(ApiAction::GetLease, format!("{ns}/{name}"), e))
}

/// The object `id` names, read live, `None` when it does not exist.
pub async fn object(client: &kube::Client, id: &Ident) -> Result<Option<DynamicObject>, Error> {
    Api::<DynamicObject>::namespaced_with(client.clone(), &id.namespace, &crate::kinds::api_resource(id.kind))
        .get_opt(&id.name)
        .await
        .map_err(|e| Error::api(ApiAction::GetObject, id.what(), e))
}

/// A Job read live, `None` when it does not exist.
pub async fn job(client: &kube::Client, ns: &str, name: &str) -> Result<Option<Job>, Error> {
    Api::<Job>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| Error::api(ApiAction::GetJob, format!("{ns}/{name}"), e))
}

/// The state lock check (docs/rules.md): the lock Lease and, when its holder looks like one of this
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

/// The API resource an owner reference to a Cluster API `Machine` or `MachinePool` names (its
/// plural is the kind in lower case with an `s`); `None` when its apiVersion has no version.
fn capi_owner_resource(owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference) -> Option<ApiResource> {
    let (group, version) = owner.api_version.split_once('/')?;
    Some(ApiResource {
        group: group.to_string(),
        version: version.to_string(),
        api_version: owner.api_version.clone(),
        kind: owner.kind.clone(),
        plural: format!("{}s", owner.kind.to_ascii_lowercase()),
    })
}

/// The Cluster API object of `kind` (`Machine`, `MachinePool`) that owns `object`, read live.
/// `None` while there is none or it cannot be read.
async fn capi_owner(client: &kube::Client, object: &CaptfObject, ns: &str, kind: &str) -> Option<Value> {
    let owner = core_inputs::capi_owner_ref(object.metadata(), kind)?;
    let ar = capi_owner_resource(owner)?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    match api.get_opt(&owner.name).await {
        Ok(Some(m)) => Some(m.data),
        Ok(None) => None,
        Err(e) => {
            tracing::debug!(error = %e, "failed to read the Cluster API {kind} {}", owner.name);
            None
        }
    }
}

fn non_empty_str(v: &Value, pointer: &str) -> Option<String> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// What the owning Machine or MachinePool gives the module (`failure_domain`, `replicas`), from
/// one read of the owner; empty when there is no owner. Also the bootstrap data Secret's name (a
/// Machine's `spec.bootstrap.dataSecretName`, a MachinePool's
/// `spec.template.spec.bootstrap.dataSecretName`), `None` while it is not set or cannot be read.
pub async fn owner_inputs(
    client: &kube::Client,
    object: &CaptfObject,
    id: &Ident,
) -> (core_inputs::OwnerInputs, Option<String>) {
    let mut out = core_inputs::OwnerInputs::default();
    let mut bootstrap = None;
    match id.kind {
        Kind::TerraformMachine => {
            if let Some(m) = capi_owner(client, object, &id.namespace, "Machine").await {
                out.failure_domain = non_empty_str(&m, "/spec/failureDomain");
                bootstrap = non_empty_str(&m, "/spec/bootstrap/dataSecretName");
            }
        }
        Kind::TerraformMachinePool => {
            if let Some(p) = capi_owner(client, object, &id.namespace, "MachinePool").await {
                out.replicas = p.pointer("/spec/replicas").and_then(Value::as_i64);
                bootstrap = non_empty_str(&p, "/spec/template/spec/bootstrap/dataSecretName");
            }
        }
        Kind::TerraformCluster => {}
    }
    (out, bootstrap)
}

/// Why the runner pods of `object` cannot mount their Terraform CLI configuration (its
/// ConfigMap, read live, or its key is missing), naming the field that chose it.
pub async fn runner_config_problem(
    client: &kube::Client,
    object: &CaptfObject,
    id: &Ident,
    platform: Option<&CliConfigRef>,
) -> Result<Option<String>, Error> {
    let spec = object.terraform_spec();
    let Some(source) = captf_shared::pod::cli_config(spec.jobs.as_ref(), platform, object.spec_path()) else {
        return Ok(None);
    };
    let name = &source.config.name;
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &id.namespace)
        .get_opt(name)
        .await
        .map_err(|e| Error::api(ApiAction::GetConfigMap, format!("{}/{name}", id.namespace), e))?;
    let keys = cm.map(|c| {
        c.data
            .unwrap_or_default()
            .into_keys()
            .chain(c.binary_data.unwrap_or_default().into_keys())
            .collect::<Vec<_>>()
    });
    Ok(captf_shared::pod::cli_config_problem(
        &source,
        &id.namespace,
        keys.as_deref(),
    ))
}

/// The spec's references to CAPTF's own Secrets (`captf_shared::references`), as one message:
/// by name, and by what each named Secret carries, read live (a Secret can be created or
/// relabelled after admission). `None`: there are none.
pub async fn forbidden_references(
    client: &kube::Client,
    object: &CaptfObject,
    id: &Ident,
) -> Result<Option<String>, Error> {
    let spec = object.terraform_spec();
    let mut marks: BTreeMap<String, Option<String>> = BTreeMap::new();
    for r in references::secret_references(spec, object.spec_path()) {
        if references::reserved_secret_prefix(&r.name).is_some() || marks.contains_key(&r.name) {
            continue;
        }
        let s = secret(client, &id.namespace, &r.name).await?;
        let mark = s.and_then(|s| references::captf_mark(&s.metadata, s.type_.as_deref()));
        marks.insert(r.name, mark);
    }
    let forbidden =
        references::forbidden_references(spec, object.spec_path(), |name| marks.get(name).cloned().flatten());
    Ok((!forbidden.is_empty()).then(|| references::message(&forbidden)))
}

/// A Secret whose values become inputs, read live: its data (`None` when it does not exist), or
/// `Forbidden` naming `field` when it carries CAPTF's marks (a Secret of CAPTF's never reaches the
/// inputs, whatever its name).
async fn input_secret(
    client: &kube::Client,
    ns: &str,
    name: &str,
    field: String,
) -> Result<Result<SourceData, ResolveError>, Error> {
    let s = secret(client, ns, name).await?;
    if let Some(why) = s
        .as_ref()
        .and_then(|s| references::captf_mark(&s.metadata, s.type_.as_deref()))
    {
        return Ok(Err(ResolveError::Forbidden {
            field,
            name: name.to_string(),
            why,
        }));
    }
    Ok(Ok(s.as_ref().map(secret_data)))
}

/// The `output -json` document in the outputs Secret of the object of `suffix` and UID `uid`,
/// read live; `None` when there is none yet, or the Secret is not that object's (one somebody
/// else made under its name holds nothing).
pub async fn outputs_document(
    client: &kube::Client,
    ns: &str,
    suffix: &str,
    uid: &str,
) -> Result<Option<Value>, Error> {
    Ok(secret(client, ns, &names::outputs_secret_name(suffix))
        .await?
        .filter(|s| binding::owned_by(&s.metadata, uid))
        .and_then(|s| s.data)
        .and_then(|d| d.get(captf_shared::protocol::OUTPUTS_KEY).cloned())
        .and_then(|b| serde_json::from_slice::<Value>(&b.0).ok()))
}

/// What a member receives from its TerraformCluster (`captf_core::exports`), read live: the
/// cluster it is owned by (its UID), else the one its Cluster API `Cluster` names as its
/// infrastructure (`cluster`, read once a pass), else the one named like its cluster; and only
/// when the member is verified as that cluster's. `None` for a TerraformCluster, a member without such a cluster, or a cluster that
/// exports nothing (then nothing more is read); `Err(NotAMember)` for a member that is labelled
/// with an exporting cluster but not verified as its.
pub async fn cluster_exports(
    client: &kube::Client,
    object: &CaptfObject,
    id: &Ident,
    cluster: &crate::pause::ClusterView,
) -> Result<Result<Option<ClusterExports>, ResolveError>, Error> {
    if id.kind == Kind::TerraformCluster {
        return Ok(Ok(None));
    }
    let meta = object.metadata();
    let Some(cluster_name) = core_inputs::cluster_name(id.kind, meta) else {
        return Ok(Ok(None));
    };
    // The cluster it receives from: its owner, else its Cluster API Cluster's infrastructure,
    // else the TerraformCluster of its cluster's name (a cluster without Cluster API).
    let owner = captf_core::exports::owning_cluster(meta);
    let name = owner
        .map(|o| o.name.clone())
        .or_else(|| cluster.infrastructure.clone())
        .unwrap_or_else(|| cluster_name.clone());
    let tc = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &id.namespace,
        &crate::kinds::api_resource(Kind::TerraformCluster),
    )
    .get_opt(&name)
    .await
    .map_err(|e| {
        Error::api(
            ApiAction::GetObject,
            format!("TerraformCluster {}/{name}", id.namespace),
            e,
        )
    })?;
    let Some(tc) = tc else {
        return Ok(Ok(None));
    };
    let exports: Vec<String> = tc
        .data
        .pointer("/spec/exports")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|e| e.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    if exports.is_empty() {
        return Ok(Ok(None));
    }
    let tc_uid = tc.metadata.uid.clone().unwrap_or_default();
    let same_cluster =
        core_inputs::cluster_name(Kind::TerraformCluster, &tc.metadata).as_deref() == Some(&cluster_name);
    let verified = same_cluster
        && match owner {
            Some(o) => o.uid == tc_uid,
            None => {
                let capi = match captf_core::membership::capi_controller(meta) {
                    Some(r) => capi_owner_meta(client, &id.namespace, r).await?,
                    None => None,
                };
                captf_core::membership::belongs(meta, &tc_uid, &cluster_name, capi.as_ref())
            }
        };
    if !verified {
        return Ok(Err(ResolveError::Exports(
            captf_core::exports::ExportsError::NotAMember {
                cluster: name,
                why: format!(
                    "it is neither owned by that TerraformCluster (its UID) nor controlled by a Cluster API Machine or MachinePool of cluster {cluster_name} whose Cluster names it as its infrastructure"
                ),
            },
        )));
    }
    let suffix = names::suffix(Kind::TerraformCluster, &id.namespace, &name);
    let outputs = outputs_document(client, &id.namespace, &suffix, &tc_uid).await?;
    Ok(Ok(Some(ClusterExports {
        cluster: name,
        exports,
        outputs,
    })))
}

/// A ConfigMap's data, as the inputs read it (`None`: it does not exist).
async fn config_map_data(client: &kube::Client, namespace: &str, name: &str) -> Result<SourceData, Error> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| Error::api(ApiAction::GetConfigMap, format!("{namespace}/{name}"), e))?;
    Ok(cm.map(|c| c.data.unwrap_or_default()))
}

/// Resolve the inputs (docs/api.md) with the referenced Secrets and ConfigMaps read live;
/// `cluster` is the object's Cluster API `Cluster` as this pass read it.
pub async fn resolve_inputs(
    client: &kube::Client,
    object: &CaptfObject,
    id: &Ident,
    cluster: &crate::pause::ClusterView,
) -> Result<Result<Inputs, ResolveError>, Error> {
    let spec = object.terraform_spec();
    let mut fetched: BTreeMap<(SourceKind, String), SourceData> = BTreeMap::new();
    for (i, entry) in spec.variables_from.iter().flatten().enumerate() {
        // CAPTF's own Secrets are refused by name without being read (`core_inputs`).
        if let Some(r) = entry
            .secret_ref
            .as_ref()
            .filter(|r| references::reserved_secret_prefix(&r.name).is_none())
        {
            let field = format!("spec.variablesFrom[{i}].secretRef");
            match input_secret(client, &id.namespace, &r.name, field).await? {
                Ok(data) => fetched.insert((SourceKind::Secret, r.name.clone()), data),
                Err(forbidden) => return Ok(Err(forbidden)),
            };
        }
        if let Some(r) = &entry.config_map_ref {
            let data = config_map_data(client, &id.namespace, &r.name).await?;
            fetched.insert((SourceKind::ConfigMap, r.name.clone()), data);
        }
    }
    // The ConfigMaps of policies the plan is checked against (`spec.guard.policyRefs`).
    for r in spec.guard.iter().flat_map(|g| g.policy_refs.iter().flatten()) {
        if let std::collections::btree_map::Entry::Vacant(e) = fetched.entry((SourceKind::ConfigMap, r.name.clone())) {
            e.insert(config_map_data(client, &id.namespace, &r.name).await?);
        }
    }
    if let Some(c) = spec
        .module
        .credentials
        .as_ref()
        .filter(|c| references::reserved_secret_prefix(&c.secret_ref.name).is_none())
    {
        let s = secret(client, &id.namespace, &c.secret_ref.name).await?;
        fetched.insert(
            (SourceKind::Secret, c.secret_ref.name.clone()),
            s.as_ref().map(secret_data),
        );
    }
    let mut passphrases: Vec<String> = vec![];
    if let Some(e) = &spec.state_encryption {
        passphrases.push(e.passphrase_secret_ref.name.clone());
        passphrases.extend(e.previous_passphrase_secret_ref.as_ref().map(|r| r.name.clone()));
    }
    passphrases.retain(|name| references::reserved_secret_prefix(name).is_none());
    for name in passphrases {
        let s = secret(client, &id.namespace, &name).await?;
        fetched.insert((SourceKind::Secret, name), s.as_ref().map(secret_data));
    }
    let (owner, bootstrap) = owner_inputs(client, object, id).await;
    // The bootstrap data Secret, read by value (`core_inputs::resolve_inputs` names its problems).
    if let Some(name) = bootstrap
        .as_ref()
        .filter(|n| references::reserved_secret_prefix(n).is_none())
    {
        match input_secret(client, &id.namespace, name, core_inputs::BOOTSTRAP_DATA_VAR.to_string()).await? {
            Ok(data) => fetched.insert((SourceKind::Secret, name.clone()), data),
            Err(forbidden) => return Ok(Err(forbidden)),
        };
    }
    let exports = match cluster_exports(client, object, id, cluster).await? {
        Ok(e) => e,
        Err(not_a_member) => return Ok(Err(not_a_member)),
    };
    Ok(core_inputs::resolve_inputs(
        id.kind,
        object.metadata(),
        spec,
        bootstrap.as_deref(),
        exports.as_ref(),
        |kind, name| Ok(fetched.get(&(kind, name.to_string())).cloned().flatten()),
    )
    .map(|mut inputs| {
        core_inputs::add_owner_variables(id.kind, &mut inputs, &owner);
        inputs
    }))
}

/// The machine pools and machines labelled with a TerraformCluster's cluster name, sorted out
/// by [`verified_members`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Membership {
    /// The members that hold the cluster's deletion, as `<Kind>/<name>`, sorted.
    pub members: Vec<String>,
    /// The others: labelled, not verified; they hold nothing.
    pub unverified: Vec<Unverified>,
}

/// The members that hold a TerraformCluster's deletion (`captf_core::membership`): of the
/// `candidates` labelled with its cluster name, those owned by it or controlled by a Cluster API
/// Machine or MachinePool of that cluster (read live); and the unverified claims, each logged.
pub async fn verified_members(
    client: &kube::Client,
    id: &Ident,
    cluster: &str,
    candidates: Vec<(Kind, kube::core::ObjectMeta)>,
) -> Result<Membership, Error> {
    let mut out = Membership::default();
    for (kind, meta) in candidates {
        let name = meta.name.clone().unwrap_or_default();
        if is_member(client, id, cluster, &meta).await? {
            out.members.push(format!("{kind}/{name}"));
        } else {
            tracing::info!(
                "{kind} {}/{name} is labelled with cluster {cluster} but neither owned by {} nor controlled by a Cluster API Machine or MachinePool of that cluster: it does not hold the deletion",
                id.namespace,
                id.what()
            );
            out.unverified.push(Unverified {
                kind,
                name,
                uid: meta.uid.clone().unwrap_or_default(),
            });
        }
    }
    out.members.sort();
    out.unverified.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    Ok(out)
}

/// Whether `member`, a machine pool or machine, belongs to the TerraformCluster `id` of the
/// cluster `cluster` (`captf_core::membership::belongs`; its Cluster API owner read live).
pub async fn is_member(
    client: &kube::Client,
    id: &Ident,
    cluster: &str,
    member: &kube::core::ObjectMeta,
) -> Result<bool, Error> {
    let owner = match captf_core::membership::capi_controller(member) {
        Some(r) => capi_owner_meta(client, &id.namespace, r).await?,
        None => None,
    };
    Ok(captf_core::membership::belongs(
        member,
        &id.uid,
        cluster,
        owner.as_ref(),
    ))
}

/// Whether the Job `job` is the Job of a verified member of the TerraformCluster `id`: its
/// controller owner reference names a machine pool or machine (`captf_core::membership::job_owner`)
/// that exists with that UID (`owner`: its metadata as a cache holds it; `None`: read live) and
/// belongs to the cluster ([`is_member`]). Labels and names are never enough.
pub async fn is_member_job(
    client: &kube::Client,
    id: &Ident,
    cluster: &str,
    job: &kube::core::ObjectMeta,
    owner: Option<kube::core::ObjectMeta>,
) -> Result<bool, Error> {
    let Some((kind, r)) = captf_core::membership::job_owner(job, &[Kind::TerraformMachinePool, Kind::TerraformMachine])
    else {
        return Ok(false);
    };
    let owner = match owner {
        Some(m) => Some(m),
        None => object_meta(client, kind, &id.namespace, &r.name).await?,
    };
    match owner {
        Some(m) if m.uid.as_deref() == Some(r.uid.as_str()) => is_member(client, id, cluster, &m).await,
        _ => Ok(false),
    }
}

/// The metadata of one of CAPTF's objects, read live; `None` when it does not exist.
pub async fn object_meta(
    client: &kube::Client,
    kind: Kind,
    ns: &str,
    name: &str,
) -> Result<Option<kube::core::ObjectMeta>, Error> {
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, &crate::kinds::api_resource(kind))
        .get_metadata_opt(name)
        .await
        .map(|m| m.map(|m| m.metadata))
        .map_err(|e| Error::api(ApiAction::GetObject, format!("{kind} {ns}/{name}"), e))
}

/// The metadata of a member's Cluster API owner (`Machine` or `MachinePool`), read live; `None`
/// when it does not exist or Cluster API is not served.
async fn capi_owner_meta(
    client: &kube::Client,
    ns: &str,
    r: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
) -> Result<Option<kube::core::ObjectMeta>, Error> {
    let Some(ar) = capi_owner_resource(r) else {
        return Ok(None);
    };
    match Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar)
        .get_metadata_opt(&r.name)
        .await
    {
        Ok(m) => Ok(m.map(|m| m.metadata)),
        // Cluster API's kinds not served: no such owner.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(Error::api(
            ApiAction::GetObject,
            format!("{} {ns}/{}", r.kind, r.name),
            e,
        )),
    }
}

/// The live Job holding the cluster lease of `cluster`, if any (both read live): a Job that has
/// not finished, controlled by a TerraformCluster of that cluster name whose UID its owner
/// reference names (`captf_core::membership::job_owner`). A Job of that name made by anyone
/// else holds nothing.
pub async fn cluster_lease_holder(client: &kube::Client, ns: &str, cluster: &str) -> Result<Option<String>, Error> {
    let lease = lease(client, ns, &names::cluster_lease_name(ns, cluster)).await?;
    if let Some(holder) = lease.and_then(|l| l.spec?.holder_identity).filter(|h| !h.is_empty()) {
        let live = job(client, ns, &holder).await?;
        if let Some(j) = live.filter(|j| outcome::terminal(j).is_none())
            && is_cluster_job(client, cluster, &j.metadata).await?
        {
            return Ok(Some(holder));
        }
    }
    Ok(None)
}

/// Whether `job` is the Job of a TerraformCluster of the cluster `cluster`: its controller owner
/// reference names one that exists with that UID and that cluster name.
pub async fn is_cluster_job(client: &kube::Client, cluster: &str, job: &kube::core::ObjectMeta) -> Result<bool, Error> {
    let Some((kind, r)) = captf_core::membership::job_owner(job, &[Kind::TerraformCluster]) else {
        return Ok(false);
    };
    let ns = job.namespace.as_deref().unwrap_or_default();
    Ok(object_meta(client, kind, ns, &r.name).await?.is_some_and(|m| {
        m.uid.as_deref() == Some(r.uid.as_str()) && core_inputs::cluster_name(kind, &m).as_deref() == Some(cluster)
    }))
}

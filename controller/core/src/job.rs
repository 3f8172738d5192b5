//! The PURE builder of a runner Job from a `Start` decision (docs/api.md, docs/rules.md, docs/runner.md).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, KeyToPath, PodSecurityContext,
    PodSpec, PodTemplateSpec, ProjectedVolumeSource, ResourceRequirements, SeccompProfile, SecretProjection,
    SecretVolumeSource, SecurityContext, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use captf_shared::defaults::Effective;
use captf_shared::names;
use captf_shared::protocol::env;
use captf_shared::types::{CliConfigRef, JobsSpec, SecretKeyRef, StateEncryption};
use captf_shared::{Kind, Op};
use captf_shared::{keys, module_credentials, state_encryption};

use crate::Start;

use captf_shared::pod::{
    self as own, CLI_CONFIG_DIR, CLI_CONFIG_FILE_NAME, TF_CLI_CONFIG_FILE, TMP_DIR, VOLUME_CLI_CONFIG, VOLUME_INPUTS,
    VOLUME_MODULE_CREDENTIALS, VOLUME_STATE_ENCRYPTION, VOLUME_TMP, VOLUME_WORK,
};
pub use captf_shared::pod::{INPUTS_DIR, WORK_DIR};

/// The runner container's name.
pub const CONTAINER: &str = "runner";
/// Non-root user the runner runs as.
pub const RUNNER_UID: i64 = 65532;
/// Time the runner gets after SIGTERM to let Terraform stop and release its lock.
pub const TERMINATION_GRACE_SECONDS: i64 = 120;

/// Everything the builder needs.
#[derive(Clone, Debug)]
pub struct JobParams<'a> {
    pub kind: Kind,
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub seq: u32,
    pub start: &'a Start,
    pub effective: &'a Effective,
    pub jobs: Option<&'a JobsSpec>,
    pub inputs_hash: &'a str,
    pub cluster_name: Option<&'a str>,
    /// `--runner-image`, used when `spec.jobs.image` is unset.
    pub runner_image: &'a str,
    /// `--runner-service-account`, used when `spec.jobs.serviceAccountName` is unset.
    pub runner_service_account: Option<&'a str>,
    /// Variables of the inputs the runner must keep out of what it reports
    /// (`core::inputs::sensitive_variables`).
    pub sensitive_variables: &'a [String],
    /// The platform's defaults for runner pods (resources, emptyDir size limits).
    pub pod_defaults: &'a RunnerPodDefaults,
    /// `spec.module.credentials.secretRef.name`: mounted for the runner's `init`.
    pub module_credentials: Option<&'a str>,
    /// `spec.stateEncryption`: its passphrases are mounted for the runner.
    pub state_encryption: Option<&'a StateEncryption>,
    /// The env names `spec.jobs.envFrom` brings from Secrets (each entry's prefix and its
    /// Secret's keys, read when the Job is made), so the runner masks their values too.
    pub env_from_secret_names: &'a [String],
}

/// Whether an `envFrom` entry with this prefix could bring a name of the runner's own
/// (`CAPTF_...`): with no prefix, or one that `CAPTF_` starts with (`CAP`), a key could complete
/// it. A prefix such as `TF_VAR_` cannot, and then the runner's optional variables are left
/// alone, so values the runner image sets for them still apply.
pub fn may_name_runner_variables(prefix: Option<&str>) -> bool {
    let prefix = prefix.unwrap_or_default();
    env::PREFIX.starts_with(prefix) || prefix.starts_with(env::PREFIX)
}

/// The env names whose values come from Secrets, for the runner to mask in what it logs and
/// reports: `spec.jobs.env` entries with `valueFrom.secretKeyRef`, and the names `envFrom`
/// brings from Secrets unless `env` sets that name itself (`env` wins over `envFrom`). Never the
/// runner's own `CAPTF_` names, which the controller sets. Sorted, each once.
pub fn sensitive_env(jobs: Option<&JobsSpec>, env_from_secret_names: &[String]) -> Vec<String> {
    let env = jobs.and_then(|j| j.env.as_deref()).unwrap_or_default();
    let from_secret = |v: &EnvVar| v.value_from.as_ref().is_some_and(|f| f.secret_key_ref.is_some());
    let set_by_env: BTreeSet<&str> = env
        .iter()
        .filter(|v| !from_secret(v))
        .map(|v| v.name.as_str())
        .collect();
    let names: BTreeSet<&str> = env
        .iter()
        .filter(|v| from_secret(v))
        .map(|v| v.name.as_str())
        .chain(
            env_from_secret_names
                .iter()
                .map(String::as_str)
                .filter(|n| !set_by_env.contains(n)),
        )
        .filter(|n| !n.is_empty() && !n.starts_with(env::PREFIX))
        .collect();
    names.into_iter().map(String::from).collect()
}

/// What every runner pod gets unless its spec says otherwise (`--runner-requests`,
/// `--runner-limits`, `--runner-work-size-limit`, `--runner-tmp-size-limit`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunnerPodDefaults {
    pub requests: BTreeMap<String, Quantity>,
    pub limits: BTreeMap<String, Quantity>,
    /// `sizeLimit` of the `work` emptyDir (providers, modules, plans).
    pub work_size_limit: Option<Quantity>,
    /// `sizeLimit` of the `tmp` emptyDir.
    pub tmp_size_limit: Option<Quantity>,
    /// The Terraform CLI configuration of runner pods whose spec names none
    /// (`--runner-terraform-cli-config`, `--runner-terraform-cli-config-key`).
    pub terraform_cli_config: Option<CliConfigRef>,
}

/// The runner container's resources: the defaults, except that a resource (`cpu`, `memory`, ...)
/// the spec names in its requests or limits takes both its request and its limit from the spec
/// alone (a default request above the spec's limit would make the pod invalid).
pub fn runner_resources(
    defaults: &RunnerPodDefaults,
    spec: Option<&ResourceRequirements>,
) -> Option<ResourceRequirements> {
    let spec_requests = spec.and_then(|s| s.requests.clone()).unwrap_or_default();
    let spec_limits = spec.and_then(|s| s.limits.clone()).unwrap_or_default();
    let named = |k: &String| spec_requests.contains_key(k) || spec_limits.contains_key(k);
    let mut requests: BTreeMap<String, Quantity> = defaults
        .requests
        .iter()
        .filter(|(k, _)| !named(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut limits: BTreeMap<String, Quantity> = defaults
        .limits
        .iter()
        .filter(|(k, _)| !named(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    requests.extend(spec_requests);
    limits.extend(spec_limits);
    if requests.is_empty() && limits.is_empty() && spec.and_then(|s| s.claims.as_ref()).is_none() {
        return None;
    }
    Some(ResourceRequirements {
        requests: (!requests.is_empty()).then_some(requests),
        limits: (!limits.is_empty()).then_some(limits),
        claims: spec.and_then(|s| s.claims.clone()),
    })
}

/// The ServiceAccount runner pods run as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerAccount {
    pub name: String,
    /// The object's own account `captf-runner-<suffix>`, which the controller makes (with its
    /// Role and RoleBinding) before each Job; false: an account the platform team or the tenant
    /// provides, with the rights they gave it.
    pub own: bool,
}

/// `spec.jobs.serviceAccountName`, else `--runner-service-account`, else the object's own.
pub fn runner_account(jobs: Option<&JobsSpec>, flag: Option<&str>, suffix: &str) -> RunnerAccount {
    match jobs
        .and_then(|j| j.service_account_name.as_deref())
        .or(flag)
        .filter(|s| !s.is_empty())
    {
        Some(name) => RunnerAccount {
            name: name.to_string(),
            own: false,
        },
        None => RunnerAccount {
            name: names::runner_service_account_name(suffix),
            own: true,
        },
    }
}

/// The ownerReference every Job and Secret of the object carries.
pub fn owner_reference(kind: Kind, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: keys::API_VERSION.to_string(),
        kind: kind.as_str().to_string(),
        name: name.to_string(),
        uid: uid.to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The name of the object of `kind` that owns something (a Job, a Secret) by its owner
/// references, whatever API version a reference names (PURE). A Job created by an earlier release
/// names its owner at that release's version (`…/v1alpha1`), and it is still that object's: the
/// group and kind identify the owner, as Kubernetes' garbage collector takes them.
pub fn owner_name(owners: &[OwnerReference], kind: Kind) -> Option<&str> {
    owners
        .iter()
        .find(|o| o.kind == kind.as_str() && o.api_version.split('/').next() == Some(keys::GROUP))
        .map(|o| o.name.as_str())
}

/// The labels every Job of an object carries plus the per-Job ones.
pub fn job_labels(p: &JobParams<'_>) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(keys::LABEL_KIND.to_string(), p.kind.as_str().to_string());
    l.insert(
        keys::LABEL_OBJECT.to_string(),
        names::object_id(p.kind, p.namespace, p.name),
    );
    l.insert(keys::LABEL_OP.to_string(), p.start.op.as_str().to_string());
    l.insert(keys::LABEL_ATTEMPT.to_string(), p.start.attempt.to_string());
    l.insert(
        keys::LABEL_INPUTS_HASH.to_string(),
        p.inputs_hash.chars().take(16).collect(),
    );
    if let Some(c) = p.cluster_name.filter(|c| !c.is_empty()) {
        l.insert(keys::LABEL_CLUSTER_NAME.to_string(), c.to_string());
    }
    l
}

fn job_annotations(s: &Start) -> BTreeMap<String, String> {
    let mut a = BTreeMap::new();
    a.insert(keys::ANNOTATION_REASON.to_string(), s.reason.as_str().to_string());
    if s.drift_remediation {
        a.insert(keys::ANNOTATION_DRIFT_REMEDIATION.to_string(), "true".to_string());
    }
    if let Some(id) = &s.force_unlock_id {
        a.insert(keys::ANNOTATION_FORCE_UNLOCK.to_string(), id.clone());
    }
    if let Some(h) = &s.approved_plan {
        a.insert(keys::ANNOTATION_APPROVED_PLAN.to_string(), h.clone());
        if let Some(by) = &s.approved_by {
            a.insert(keys::ANNOTATION_APPROVED_BY.to_string(), by.clone());
        }
    }
    a
}

fn var(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// The runner's environment (docs/runner.md) followed by `spec.jobs.env`.
pub fn runner_env(p: &JobParams<'_>) -> Vec<EnvVar> {
    let suffix = names::suffix(p.kind, p.namespace, p.name);
    let mut e = vec![
        var(env::OP, p.start.op.as_str()),
        var(env::STATE_SUFFIX, suffix),
        var(env::NAMESPACE, p.namespace),
        var(
            env::LOCK_TIMEOUT,
            captf_shared::duration::seconds_flag(p.effective.lock_timeout_seconds.max(0)),
        ),
        var(env::GUARD, p.effective.guard.runner_value()),
        var(env::INPUTS_DIR, INPUTS_DIR),
        var(env::WORK_DIR, WORK_DIR),
        var(env::OWNER_UID, p.uid),
    ];
    if let Some(id) = &p.start.force_unlock_id {
        e.push(var(env::FORCE_UNLOCK_ID, id.clone()));
    }
    if !p.sensitive_variables.is_empty() {
        e.push(var(env::SENSITIVE_VARIABLES, p.sensitive_variables.join(",")));
    }
    let from_secrets = sensitive_env(p.jobs, p.env_from_secret_names);
    if !from_secrets.is_empty() {
        e.push(var(env::SENSITIVE_ENV, from_secrets.join(",")));
    }
    if p.module_credentials.is_some() {
        e.push(var(env::MODULE_CREDENTIALS_DIR, module_credentials::MOUNT_PATH));
    }
    if p.state_encryption.is_some() {
        e.push(var(env::STATE_ENCRYPTION_DIR, state_encryption::MOUNT_PATH));
    }
    if let Some(b) = p.jobs.and_then(|j| j.binary) {
        e.push(var(env::TF_BINARY, b.command()));
    }
    if p.start.op == Op::Apply
        && let Some(h) = &p.start.approved_plan
    {
        e.push(var(env::APPROVED_PLAN, h.clone()));
    }
    if p.jobs
        .and_then(|j| j.env_from.as_ref())
        .is_some_and(|f| f.iter().any(|e| may_name_runner_variables(e.prefix.as_deref())))
    {
        // `envFrom` brings names nobody checked (a ConfigMap's keys): set every variable the
        // runner reads, empty meaning unset, so none of them can come from there (`env` wins
        // over `envFrom`).
        for name in env::OPTIONAL {
            if !e.iter().any(|v| v.name == name) {
                e.push(var(name, ""));
            }
        }
    }
    // The webhook rejects CAPTF_ names in spec.jobs.env; drop them here too, so a spec that
    // skipped admission cannot override the runner's contract.
    e.extend(
        p.jobs
            .and_then(|j| j.env.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|v| !v.name.starts_with(env::PREFIX)),
    );
    if cli_config(p).is_some() {
        // Last, so it wins over the same name in spec.jobs.env.
        e.retain(|v| v.name != TF_CLI_CONFIG_FILE);
        e.push(var(
            TF_CLI_CONFIG_FILE,
            format!("{CLI_CONFIG_DIR}/{CLI_CONFIG_FILE_NAME}"),
        ));
    }
    e
}

/// The Terraform CLI configuration the runner gets: `spec.jobs.terraformCliConfig`, else the
/// platform's (`captf_shared::pod::cli_config`).
fn cli_config<'a>(p: &JobParams<'a>) -> Option<&'a CliConfigRef> {
    own::cli_config(p.jobs, p.pod_defaults.terraform_cli_config.as_ref(), "spec").map(|s| s.config)
}

/// The runner pod's labels: `spec.jobs.podLabels`, then the Job's own labels over them (the
/// webhook refuses the controller's keys; a spec that skipped admission cannot override them).
fn pod_labels(p: &JobParams<'_>, own_labels: BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut l: BTreeMap<String, String> = p
        .jobs
        .and_then(|j| j.pod_labels.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !own::is_reserved_label(k))
        .collect();
    l.extend(own_labels);
    l
}

/// The runner pod's annotations: `spec.jobs.podAnnotations` without the controller's keys.
fn pod_annotations(p: &JobParams<'_>) -> Option<BTreeMap<String, String>> {
    let a: BTreeMap<String, String> = p
        .jobs
        .and_then(|j| j.pod_annotations.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !own::is_reserved_annotation(k) && !own::is_security_annotation(k))
        .collect();
    (!a.is_empty()).then_some(a)
}

/// CAPTF's mounts, then `spec.jobs.volumeMounts` (the webhook refuses those that collide with
/// CAPTF's; here they are dropped, so a spec that skipped admission cannot shadow them).
fn volume_mounts(p: &JobParams<'_>) -> Vec<VolumeMount> {
    let mut m = vec![
        VolumeMount {
            name: VOLUME_INPUTS.into(),
            mount_path: INPUTS_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        },
        VolumeMount {
            name: VOLUME_WORK.into(),
            mount_path: WORK_DIR.into(),
            ..Default::default()
        },
        VolumeMount {
            name: VOLUME_TMP.into(),
            mount_path: TMP_DIR.into(),
            ..Default::default()
        },
    ];
    if cli_config(p).is_some() {
        m.push(VolumeMount {
            name: VOLUME_CLI_CONFIG.into(),
            mount_path: CLI_CONFIG_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    if p.module_credentials.is_some() {
        m.push(VolumeMount {
            name: VOLUME_MODULE_CREDENTIALS.into(),
            mount_path: module_credentials::MOUNT_PATH.into(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    if p.state_encryption.is_some() {
        m.push(VolumeMount {
            name: VOLUME_STATE_ENCRYPTION.into(),
            mount_path: state_encryption::MOUNT_PATH.into(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    m.extend(
        p.jobs
            .and_then(|j| j.volume_mounts.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|v| {
                !own::RESERVED_VOLUME_NAMES.contains(&v.name.as_str())
                    && own::reserved_mount_collision(&v.mount_path).is_none()
            }),
    );
    m
}

/// The passphrases of `spec.stateEncryption` as one projected volume: each Secret key at its
/// fixed file name (`state_encryption::PASSPHRASE_FILE`, `PREVIOUS_PASSPHRASE_FILE`), owner-only.
/// Optional, as the module credentials are: the controller checked the Secrets before the Job, and
/// if one is deleted since, the pod still starts and the runner refuses to run OpenTofu without
/// the passphrase the inputs name, rather than the pod waiting for a volume until the deadline.
fn passphrase_volume(e: &StateEncryption) -> Volume {
    let source = |r: &SecretKeyRef, file: &str| VolumeProjection {
        secret: Some(SecretProjection {
            name: r.name.clone(),
            items: Some(vec![KeyToPath {
                key: r.key_or_default().to_string(),
                path: file.to_string(),
                mode: None,
            }]),
            optional: Some(true),
        }),
        ..Default::default()
    };
    let mut sources = vec![source(&e.passphrase_secret_ref, state_encryption::PASSPHRASE_FILE)];
    if let Some(r) = &e.previous_passphrase_secret_ref {
        sources.push(source(r, state_encryption::PREVIOUS_PASSPHRASE_FILE));
    }
    Volume {
        name: VOLUME_STATE_ENCRYPTION.into(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o400),
            sources: Some(sources),
        }),
        ..Default::default()
    }
}

/// CAPTF's volumes, then `spec.jobs.volumes` (without sources outside the restricted profile's
/// volume types or CAPTF's names, which the webhook and the controller's own validation refuse).
fn volumes(p: &JobParams<'_>, suffix: &str) -> Vec<Volume> {
    let mut v = vec![
        Volume {
            name: VOLUME_INPUTS.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(names::inputs_secret_name(suffix)),
                default_mode: Some(0o440),
                ..Default::default()
            }),
            ..Default::default()
        },
        Volume {
            name: VOLUME_WORK.into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: p.pod_defaults.work_size_limit.clone(),
                ..Default::default()
            }),
            ..Default::default()
        },
        Volume {
            name: VOLUME_TMP.into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: p.pod_defaults.tmp_size_limit.clone(),
                ..Default::default()
            }),
            ..Default::default()
        },
    ];
    if let Some(c) = cli_config(p) {
        v.push(Volume {
            name: VOLUME_CLI_CONFIG.into(),
            config_map: Some(ConfigMapVolumeSource {
                name: c.name.clone(),
                items: Some(vec![KeyToPath {
                    key: c.key_or_default().to_string(),
                    path: CLI_CONFIG_FILE_NAME.into(),
                    mode: None,
                }]),
                default_mode: Some(0o444),
                optional: Some(false),
            }),
            ..Default::default()
        });
    }
    if let Some(secret) = p.module_credentials {
        v.push(Volume {
            name: VOLUME_MODULE_CREDENTIALS.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.to_string()),
                // Owner-only; the kubelet adds group read for the pod's fsGroup, the runner's.
                default_mode: Some(0o400),
                // The controller checked it exists before the Job; if it is deleted since, the
                // pod still starts and the runner says which Secret is missing, rather than the
                // pod waiting for a volume until the deadline.
                optional: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    if let Some(e) = p.state_encryption {
        v.push(passphrase_volume(e));
    }
    v.extend(
        p.jobs
            .and_then(|j| j.volumes.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|v| {
                own::disallowed_volume_sources(v).is_empty() && !own::RESERVED_VOLUME_NAMES.contains(&v.name.as_str())
            }),
    );
    v
}

/// Build the Job.
pub fn build_job(p: &JobParams<'_>) -> Job {
    let name = names::job_name(p.kind, p.namespace, p.name, p.start.op, p.seq);
    let suffix = names::suffix(p.kind, p.namespace, p.name);
    let labels = job_labels(p);
    let image = p
        .jobs
        .and_then(|j| j.image.clone())
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| p.runner_image.to_string());
    let container = Container {
        name: CONTAINER.to_string(),
        image: Some(image),
        env: Some(runner_env(p)),
        resources: runner_resources(p.pod_defaults, p.jobs.and_then(|j| j.resources.as_ref())),
        env_from: p.jobs.and_then(|j| j.env_from.clone()).filter(|f| !f.is_empty()),
        termination_message_policy: Some("File".to_string()),
        volume_mounts: Some(volume_mounts(p)),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUNNER_UID),
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            privileged: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let pod = PodSpec {
        containers: vec![container],
        restart_policy: Some("Never".into()),
        service_account_name: Some(runner_account(p.jobs, p.runner_service_account, &suffix).name),
        node_selector: p.jobs.and_then(|j| j.node_selector.clone()),
        tolerations: p.jobs.and_then(|j| j.tolerations.clone()),
        affinity: p.jobs.and_then(|j| j.affinity.clone()),
        topology_spread_constraints: p.jobs.and_then(|j| j.topology_spread_constraints.clone()),
        priority_class_name: p.jobs.and_then(|j| j.priority_class_name.clone()),
        image_pull_secrets: p.jobs.and_then(|j| j.image_pull_secrets.clone()),
        termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUNNER_UID),
            fs_group: Some(RUNNER_UID),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        volumes: Some(volumes(p, &suffix)),
        ..Default::default()
    };
    Job {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(p.namespace.to_string()),
            labels: Some(labels.clone()),
            annotations: Some(job_annotations(p.start)),
            owner_references: Some(vec![owner_reference(p.kind, p.name, p.uid)]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: Some(p.effective.active_deadline_seconds),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels(p, labels)),
                    annotations: pod_annotations(p),
                    ..Default::default()
                }),
                spec: Some(pod),
            },
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {

    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Reason;
    use captf_shared::defaults;
    use captf_shared::types::{TerraformSpec, TfBinary};

    #[test]
    fn a_job_owned_through_an_older_api_version_is_still_its_objects() {
        let owner = |api_version: &str, kind: &str, name: &str| OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: "u".into(),
            ..Default::default()
        };
        let now = owner_reference(Kind::TerraformCluster, "prod", "u");
        assert_eq!(owner_name(&[now], Kind::TerraformCluster), Some("prod"));
        let earlier = owner("infrastructure.cluster.x-k8s.io/v1alpha1", "TerraformCluster", "prod");
        assert_eq!(
            owner_name(std::slice::from_ref(&earlier), Kind::TerraformCluster),
            Some("prod")
        );
        // Another kind, another group: not this kind's.
        assert_eq!(owner_name(&[earlier], Kind::TerraformMachine), None);
        let foreign = owner("other.example.com/v1", "TerraformCluster", "prod");
        assert_eq!(owner_name(&[foreign], Kind::TerraformCluster), None);
        assert_eq!(owner_name(&[], Kind::TerraformCluster), None);
    }

    fn start(op: Op) -> Start {
        Start {
            op,
            reason: Reason::InputsChanged,
            attempt: 2,
            drift_remediation: true,
            force_unlock_id: Some("0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55".into()),
            approved_plan: Some("abc".into()),
            approved_by: Some("alice@example.com".into()),
            skipped_backoff: None,
        }
    }

    /// The parameters every test Job starts from; a test overrides what it is about.
    fn params<'a>(s: &'a Start, eff: &'a Effective, d: &'a RunnerPodDefaults) -> JobParams<'a> {
        JobParams {
            kind: Kind::TerraformCluster,
            namespace: "default",
            name: "prod-eu",
            uid: "uid-1",
            seq: 7,
            start: s,
            effective: eff,
            jobs: None,
            inputs_hash: "0123456789abcdef0123456789abcdef",
            cluster_name: Some("prod-eu"),
            runner_image: "ghcr.io/captf/runner:1",
            runner_service_account: Some("captf-runner"),
            sensitive_variables: &[],
            module_credentials: None,
            state_encryption: None,
            env_from_secret_names: &[],
            pod_defaults: d,
        }
    }

    fn build(op: Op, jobs: Option<JobsSpec>) -> Job {
        let spec = TerraformSpec {
            jobs: jobs.clone(),
            ..Default::default()
        };
        let eff = defaults::effective(&spec);
        let s = start(op);
        build_job(&JobParams {
            jobs: jobs.as_ref(),
            ..params(&s, &eff, &RunnerPodDefaults::default())
        })
    }

    #[test]
    fn module_credentials_are_mounted_read_only_owner_only_and_named_to_the_runner_never_as_env_values() {
        let spec = TerraformSpec::default();
        let eff = defaults::effective(&spec);
        let s = start(Op::Apply);
        let d = RunnerPodDefaults::default();
        let with_creds = |creds| JobParams {
            runner_service_account: None,
            module_credentials: creds,
            state_encryption: None,
            ..params(&s, &eff, &d)
        };
        let pod = build_job(&with_creds(Some("git-ssh")))
            .spec
            .unwrap()
            .template
            .spec
            .unwrap();
        let vol = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == VOLUME_MODULE_CREDENTIALS)
            .unwrap();
        let sec = vol.secret.as_ref().unwrap();
        assert_eq!(sec.secret_name.as_deref(), Some("git-ssh"));
        assert_eq!(sec.default_mode, Some(0o400));
        assert_eq!(sec.optional, Some(true));
        let c = &pod.containers[0];
        let m = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == VOLUME_MODULE_CREDENTIALS)
            .unwrap();
        assert_eq!(
            (m.mount_path.as_str(), m.read_only),
            (module_credentials::MOUNT_PATH, Some(true))
        );
        let env = c.env.as_ref().unwrap();
        assert!(env.iter().any(
            |e| e.name == env::MODULE_CREDENTIALS_DIR && e.value.as_deref() == Some(module_credentials::MOUNT_PATH)
        ));
        assert!(
            env.iter().all(|e| e.value_from.is_none()),
            "the Secret reaches the runner as files only"
        );
        let plain = build_job(&with_creds(None)).spec.unwrap().template.spec.unwrap();
        assert!(
            plain
                .volumes
                .iter()
                .flatten()
                .all(|v| v.name != VOLUME_MODULE_CREDENTIALS)
        );
        assert!(
            plain.containers[0]
                .env
                .iter()
                .flatten()
                .all(|e| e.name != env::MODULE_CREDENTIALS_DIR)
        );
    }

    #[test]
    fn state_encryption_passphrases_are_one_owner_only_projected_volume_at_fixed_file_names() {
        let spec = TerraformSpec::default();
        let eff = defaults::effective(&spec);
        let s = start(Op::Apply);
        let d = RunnerPodDefaults::default();
        let enc: StateEncryption = serde_json::from_value(serde_json::json!({
            "passphraseSecretRef": {"name": "state-key"},
            "previousPassphraseSecretRef": {"name": "old-key", "key": "k"},
        }))
        .unwrap();
        let job = build_job(&JobParams {
            state_encryption: Some(&enc),
            ..params(&s, &eff, &d)
        });
        let pod = job.spec.unwrap().template.spec.unwrap();
        let vol = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == VOLUME_STATE_ENCRYPTION)
            .unwrap();
        let projected = vol.projected.as_ref().unwrap();
        assert_eq!(projected.default_mode, Some(0o400));
        let items: Vec<(String, String, String)> = projected
            .sources
            .iter()
            .flatten()
            .map(|src| {
                let sec = src.secret.as_ref().unwrap();
                let item = &sec.items.as_ref().unwrap()[0];
                (sec.name.clone(), item.key.clone(), item.path.clone())
            })
            .collect();
        assert_eq!(
            items,
            [
                ("state-key".into(), "passphrase".into(), "passphrase".into()),
                ("old-key".into(), "k".into(), "previous-passphrase".into()),
            ]
        );
        let c = &pod.containers[0];
        let m = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == VOLUME_STATE_ENCRYPTION)
            .unwrap();
        assert_eq!(
            (m.mount_path.as_str(), m.read_only),
            (state_encryption::MOUNT_PATH, Some(true))
        );
        let env = c.env.as_ref().unwrap();
        assert!(
            env.iter().any(
                |e| e.name == env::STATE_ENCRYPTION_DIR && e.value.as_deref() == Some(state_encryption::MOUNT_PATH)
            )
        );
        assert!(
            env.iter().all(|e| e.value_from.is_none()),
            "the passphrases reach the runner as files only"
        );
    }

    #[test]
    fn jobs_binary_sets_captf_tf_binary_and_unset_leaves_the_images_own() {
        for (binary, want) in [(TfBinary::Tofu, "tofu"), (TfBinary::Terraform, "terraform")] {
            let e = env_of(&build(
                Op::Apply,
                Some(JobsSpec {
                    binary: Some(binary),
                    ..Default::default()
                }),
            ));
            assert_eq!(e["CAPTF_TF_BINARY"], want);
        }
        assert!(!env_of(&build(Op::Apply, None)).contains_key("CAPTF_TF_BINARY"));
    }

    fn q(s: &str) -> Quantity {
        Quantity(s.into())
    }

    fn platform() -> RunnerPodDefaults {
        RunnerPodDefaults {
            requests: BTreeMap::from([("cpu".into(), q("100m")), ("memory".into(), q("256Mi"))]),
            limits: BTreeMap::from([("memory".into(), q("2Gi"))]),
            work_size_limit: Some(q("4Gi")),
            tmp_size_limit: Some(q("1Gi")),
            terraform_cli_config: None,
        }
    }

    #[test]
    fn runner_pods_get_the_default_resources_and_sized_empty_dirs() {
        let r = runner_resources(&platform(), None).unwrap();
        assert_eq!(r.requests.unwrap()["memory"], q("256Mi"));
        assert_eq!(r.limits.unwrap()["memory"], q("2Gi"));
        let spec = TerraformSpec::default();
        let eff = defaults::effective(&spec);
        let s = start(Op::Apply);
        let d = platform();
        let job = build_job(&params(&s, &eff, &d));
        let pod = job.spec.unwrap().template.spec.unwrap();
        let limits: BTreeMap<_, _> = pod
            .volumes
            .unwrap()
            .into_iter()
            .filter_map(|v| Some((v.name, v.empty_dir?.size_limit?)))
            .collect();
        assert_eq!(limits["work"], q("4Gi"));
        assert_eq!(limits["tmp"], q("1Gi"));
        assert!(pod.containers[0].resources.is_some());
    }

    #[test]
    fn spec_resources_replace_the_defaults_per_resource() {
        let spec = ResourceRequirements {
            limits: Some(BTreeMap::from([("memory".into(), q("128Mi"))])),
            ..Default::default()
        };
        let r = runner_resources(&platform(), Some(&spec)).unwrap();
        let requests = r.requests.unwrap();
        // The spec named memory: neither the default memory request nor limit is kept.
        assert_eq!(requests.get("memory"), None);
        assert_eq!(requests["cpu"], q("100m"));
        assert_eq!(r.limits.unwrap()["memory"], q("128Mi"));
        assert_eq!(runner_resources(&RunnerPodDefaults::default(), None), None);
    }

    #[test]
    fn the_runner_is_told_which_variables_and_env_values_are_sensitive() {
        use k8s_openapi::api::core::v1::{EnvVarSource, SecretKeySelector};
        let jobs = JobsSpec {
            env: Some(vec![
                var("PLAIN", "x"),
                EnvVar {
                    name: "TOKEN".into(),
                    value_from: Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "creds".into(),
                            key: "t".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let spec = TerraformSpec {
            jobs: Some(jobs.clone()),
            ..Default::default()
        };
        let eff = defaults::effective(&spec);
        let s = start(Op::Apply);
        let sensitive = vec!["password".to_string(), "token".to_string()];
        let build_with = |env_from_secret_names: &[String]| {
            build_job(&JobParams {
                jobs: Some(&jobs),
                sensitive_variables: &sensitive,
                env_from_secret_names,
                ..params(&s, &eff, &RunnerPodDefaults::default())
            })
        };
        let job = build_with(&[]);
        let e = env_of(&job);
        assert_eq!(e["CAPTF_SENSITIVE_VARIABLES"], "password,token");
        assert_eq!(e["CAPTF_SENSITIVE_ENV"], "TOKEN");
        let plain = env_of(&build(Op::Apply, None));
        assert!(!plain.contains_key("CAPTF_SENSITIVE_VARIABLES"));
        assert!(!plain.contains_key("CAPTF_SENSITIVE_ENV"));
        // The names envFrom brings from Secrets are masked too, unless env sets the name itself
        // (env wins); never a CAPTF_ name.
        let from = [
            "AWS_SECRET_ACCESS_KEY".to_string(),
            "PLAIN".into(),
            "CAPTF_OP".into(),
            "AWS_ACCESS_KEY_ID".into(),
            "TOKEN".into(),
        ];
        assert_eq!(
            sensitive_env(Some(&jobs), &from),
            ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "TOKEN"]
        );
        let job = build_with(&from);
        assert_eq!(
            env_of(&job)["CAPTF_SENSITIVE_ENV"],
            "AWS_ACCESS_KEY_ID,AWS_SECRET_ACCESS_KEY,TOKEN"
        );
    }

    fn env_of(job: &Job) -> BTreeMap<String, String> {
        job.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0]
            .env
            .clone()
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect()
    }

    #[test]
    fn job_is_named_labelled_annotated_and_owned_by_its_object() {
        let job = build(Op::Apply, None);
        let m = &job.metadata;
        assert_eq!(m.name.as_deref(), Some("tc-prod-eu-225654031b7f-apply-7"));
        let l = m.labels.as_ref().unwrap();
        assert_eq!(l["captf.io/kind"], "TerraformCluster");
        assert_eq!(l["captf.io/object"], "225654031b7f");
        assert_eq!(l["captf.io/op"], "apply");
        assert_eq!(l["captf.io/attempt"], "2");
        assert_eq!(l["captf.io/inputs-hash"], "0123456789abcdef");
        assert_eq!(l["cluster.x-k8s.io/cluster-name"], "prod-eu");
        let a = m.annotations.as_ref().unwrap();
        assert_eq!(a["captf.io/reason"], "InputsChanged");
        assert_eq!(a["captf.io/drift-remediation"], "true");
        assert_eq!(a["captf.io/force-unlock"], "0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55");
        assert_eq!(a["captf.io/approved-plan"], "abc");
        assert_eq!(a["captf.io/approved-by"], "alice@example.com");
        let o = &m.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (o.kind.as_str(), o.name.as_str(), o.controller),
            ("TerraformCluster", "prod-eu", Some(true))
        );
        let pod_labels = job
            .spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap();
        assert_eq!(pod_labels, l);
    }

    #[test]
    fn job_never_retries_in_place_and_carries_the_deadline() {
        let job = build(Op::Apply, None);
        let spec = job.spec.as_ref().unwrap();
        assert_eq!(spec.backoff_limit, Some(0));
        assert_eq!(spec.active_deadline_seconds, Some(3600));
        let pod = spec.template.spec.as_ref().unwrap();
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        assert_eq!(pod.containers[0].image.as_deref(), Some("ghcr.io/captf/runner:1"));
    }

    #[test]
    fn runner_env_is_the_protocols_then_spec_env_without_captf_names() {
        let jobs = JobsSpec {
            env: Some(vec![var("TF_LOG", "INFO"), var("CAPTF_OP", "destroy")]),
            ..Default::default()
        };
        let e = env_of(&build(Op::Apply, Some(jobs)));
        assert_eq!(e["CAPTF_OP"], "apply");
        assert_eq!(e["CAPTF_STATE_SUFFIX"], "prod-eu-tc");
        assert_eq!(e["CAPTF_NAMESPACE"], "default");
        assert_eq!(e["CAPTF_LOCK_TIMEOUT"], "300s");
        assert_eq!(e["CAPTF_FORCE_UNLOCK_ID"], "0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55");
        assert_eq!(e["CAPTF_APPROVED_PLAN"], "abc");
        assert_eq!(e["CAPTF_GUARD"], "Block");
        assert_eq!(e["CAPTF_INPUTS_DIR"], INPUTS_DIR);
        assert_eq!(e["CAPTF_OWNER_UID"], "uid-1");
        assert_eq!(e["TF_LOG"], "INFO");
        let drift = env_of(&build(Op::Drift, None));
        assert!(!drift.contains_key("CAPTF_APPROVED_PLAN"));
    }

    #[test]
    fn spec_jobs_image_and_service_account_win_over_the_flags() {
        let jobs = JobsSpec {
            image: Some("example.com/runner:2".into()),
            service_account_name: Some("tf".into()),
            active_deadline_seconds: Some(600),
            ..Default::default()
        };
        let job = build(Op::Refresh, Some(jobs));
        let spec = job.spec.as_ref().unwrap();
        assert_eq!(spec.active_deadline_seconds, Some(600));
        let pod = spec.template.spec.as_ref().unwrap();
        assert_eq!(pod.containers[0].image.as_deref(), Some("example.com/runner:2"));
        assert_eq!(pod.service_account_name.as_deref(), Some("tf"));
        assert_eq!(env_of(&job)["CAPTF_LOCK_TIMEOUT"], "300s");
    }

    #[test]
    fn the_flags_give_image_and_service_account_when_the_spec_does_not() {
        let job = build(Op::Apply, None);
        let pod = job.spec.as_ref().unwrap().template.spec.clone().unwrap();
        assert_eq!(pod.containers[0].image.as_deref(), Some("ghcr.io/captf/runner:1"));
        assert_eq!(pod.service_account_name.as_deref(), Some("captf-runner"));
    }

    #[test]
    fn without_a_spec_or_flag_account_runner_pods_run_as_the_objects_own_account() {
        let own = runner_account(None, None, "prod-eu-tc");
        assert_eq!(
            own,
            RunnerAccount {
                name: "captf-runner-prod-eu-tc".into(),
                own: true
            }
        );
        assert_eq!(
            runner_account(None, Some(""), "prod-eu-tc"),
            own,
            "an empty flag is unset"
        );
        let flag = runner_account(None, Some("platform-runner"), "prod-eu-tc");
        assert_eq!((flag.name.as_str(), flag.own), ("platform-runner", false));
        let jobs = JobsSpec {
            service_account_name: Some("tf".into()),
            ..Default::default()
        };
        let spec = runner_account(Some(&jobs), Some("platform-runner"), "prod-eu-tc");
        assert_eq!((spec.name.as_str(), spec.own), ("tf", false));
    }

    #[test]
    fn runner_is_non_root_read_only_without_privilege_and_mounts_inputs_read_only() {
        let job = build(Op::Apply, None);
        let pod = job.spec.as_ref().unwrap().template.spec.clone().unwrap();
        let sc = pod.containers[0].security_context.clone().unwrap();
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.capabilities.unwrap().drop, Some(vec!["ALL".to_string()]));
        assert_eq!(sc.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let mounts = pod.containers[0].volume_mounts.clone().unwrap();
        assert!(
            mounts
                .iter()
                .any(|m| m.mount_path == INPUTS_DIR && m.read_only == Some(true))
        );
        assert!(mounts.iter().any(|m| m.mount_path == "/tmp"));
        let vols = pod.volumes.unwrap();
        assert_eq!(
            vols[0].secret.as_ref().unwrap().secret_name.as_deref(),
            Some("captf-inputs-prod-eu-tc")
        );
        assert!(vols[1].empty_dir.is_some());
    }

    fn pod_of(job: &Job) -> PodSpec {
        job.spec.as_ref().unwrap().template.spec.clone().unwrap()
    }

    #[test]
    fn pod_labels_and_annotations_reach_the_pod_but_never_replace_the_controllers() {
        let jobs = JobsSpec {
            pod_labels: Some(BTreeMap::from([
                ("team".into(), "net".into()),
                ("azure.workload.identity/use".into(), "true".into()),
                ("captf.io/op".into(), "destroy".into()),
                ("captf.io/forged".into(), "x".into()),
                ("cluster.x-k8s.io/cluster-name".into(), "other".into()),
            ])),
            pod_annotations: Some(BTreeMap::from([
                ("cluster-autoscaler.kubernetes.io/safe-to-evict".into(), "false".into()),
                ("captf.io/reason".into(), "forged".into()),
            ])),
            ..Default::default()
        };
        let job = build(Op::Apply, Some(jobs));
        let meta = job.spec.as_ref().unwrap().template.metadata.clone().unwrap();
        let labels = meta.labels.unwrap();
        assert_eq!(labels["team"], "net");
        assert_eq!(labels["azure.workload.identity/use"], "true");
        assert_eq!(labels["captf.io/op"], "apply");
        assert_eq!(labels["cluster.x-k8s.io/cluster-name"], "prod-eu");
        assert!(
            !labels.contains_key("captf.io/forged"),
            "no captf.io/ key but the controller's"
        );
        let ann = meta.annotations.unwrap();
        assert_eq!(ann["cluster-autoscaler.kubernetes.io/safe-to-evict"], "false");
        assert!(!ann.contains_key("captf.io/reason"));
        assert_eq!(
            job.metadata.labels.unwrap().get("team"),
            None,
            "pod labels are the pod's, not the Job's"
        );
        let plain = build(Op::Apply, None);
        assert_eq!(plain.spec.unwrap().template.metadata.unwrap().annotations, None);
    }

    #[test]
    fn spec_volumes_and_mounts_follow_captfs_own_without_host_paths_or_collisions() {
        use k8s_openapi::api::core::v1::{ConfigMapVolumeSource, HostPathVolumeSource};
        let cm = |name: &str| Volume {
            name: name.into(),
            config_map: Some(ConfigMapVolumeSource {
                name: "ca-bundle".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mount = |name: &str, path: &str| VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            read_only: Some(true),
            ..Default::default()
        };
        let jobs = JobsSpec {
            volumes: Some(vec![
                cm("ca"),
                cm("work"),
                Volume {
                    name: "node".into(),
                    host_path: Some(HostPathVolumeSource {
                        path: "/".into(),
                        type_: None,
                    }),
                    ..Default::default()
                },
            ]),
            volume_mounts: Some(vec![
                mount("ca", "/etc/ssl/custom"),
                mount("ca", "/work/.terraform"),
                mount("inputs", "/elsewhere"),
            ]),
            ..Default::default()
        };
        let pod = pod_of(&build(Op::Apply, Some(jobs)));
        let volumes: Vec<_> = pod.volumes.unwrap().into_iter().map(|v| v.name).collect();
        assert_eq!(volumes, ["inputs", "work", "tmp", "ca"]);
        let mounts: Vec<_> = pod.containers[0]
            .volume_mounts
            .clone()
            .unwrap()
            .into_iter()
            .map(|m| (m.name, m.mount_path))
            .collect();
        assert_eq!(
            mounts,
            [
                ("inputs".to_string(), INPUTS_DIR.to_string()),
                ("work".into(), WORK_DIR.into()),
                ("tmp".into(), "/tmp".into()),
                ("ca".into(), "/etc/ssl/custom".into()),
            ]
        );
    }

    #[test]
    fn affinity_spread_priority_and_pull_secrets_reach_the_pod_spec() {
        use k8s_openapi::api::core::v1::{
            Affinity, LocalObjectReference, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
            TopologySpreadConstraint,
        };
        let affinity = Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "topology.kubernetes.io/zone".into(),
                            operator: "In".into(),
                            values: Some(vec!["eu-west-1a".into()]),
                        }]),
                        ..Default::default()
                    }],
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let spread = TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "kubernetes.io/hostname".into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            ..Default::default()
        };
        let jobs = JobsSpec {
            affinity: Some(affinity.clone()),
            topology_spread_constraints: Some(vec![spread.clone()]),
            priority_class_name: Some("platform-batch".into()),
            image_pull_secrets: Some(vec![LocalObjectReference {
                name: "registry-creds".into(),
            }]),
            ..Default::default()
        };
        let pod = pod_of(&build(Op::Apply, Some(jobs)));
        assert_eq!(pod.affinity, Some(affinity));
        assert_eq!(pod.topology_spread_constraints, Some(vec![spread]));
        assert_eq!(pod.priority_class_name.as_deref(), Some("platform-batch"));
        assert_eq!(pod.image_pull_secrets.unwrap()[0].name, "registry-creds");
        let plain = pod_of(&build(Op::Apply, None));
        assert_eq!(
            (plain.affinity, plain.priority_class_name, plain.image_pull_secrets),
            (None, None, None)
        );
    }

    #[test]
    fn env_from_reaches_the_container_and_cannot_supply_the_runners_variables() {
        use k8s_openapi::api::core::v1::{ConfigMapEnvSource, EnvFromSource};
        let jobs = JobsSpec {
            env_from: Some(vec![EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource {
                    name: "aws-settings".into(),
                    optional: None,
                }),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let job = build(Op::Drift, Some(jobs));
        let c = &pod_of(&job).containers[0];
        assert_eq!(
            c.env_from.as_ref().unwrap()[0].config_map_ref.as_ref().unwrap().name,
            "aws-settings"
        );
        let e = env_of(&job);
        for name in env::OPTIONAL {
            assert!(e.contains_key(name), "{name} is set so envFrom cannot set it");
        }
        assert_eq!(e["CAPTF_APPROVED_PLAN"], "", "unset, so empty");
        assert_eq!(e["CAPTF_LOCK_TIMEOUT"], "300s", "set values are kept");
        let plain = build(Op::Drift, None);
        assert!(!env_of(&plain).contains_key("CAPTF_APPROVED_PLAN"));
        assert_eq!(pod_of(&plain).containers[0].env_from, None);
        // A prefix no key can turn into a CAPTF_ name leaves the runner's variables alone, so
        // the image's own values of them (CAPTF_TF_BINARY) still apply.
        let prefixed = JobsSpec {
            env_from: Some(vec![EnvFromSource {
                prefix: Some("TF_VAR_".into()),
                config_map_ref: Some(ConfigMapEnvSource {
                    name: "aws-settings".into(),
                    optional: None,
                }),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let e = env_of(&build(Op::Drift, Some(prefixed)));
        assert!(!e.contains_key("CAPTF_TF_BINARY") && !e.contains_key("CAPTF_APPROVED_PLAN"));
    }

    #[test]
    fn an_env_from_prefix_may_name_runner_variables_unless_it_rules_captf_out() {
        for (prefix, may) in [
            (None, true),
            (Some(""), true),
            (Some("C"), true),
            (Some("CAPTF"), true),
            (Some("CAPTF_"), true),
            (Some("CAPTF_X_"), true),
            (Some("TF_VAR_"), false),
            (Some("AWS_"), false),
            (Some("CAPTG"), false),
            (Some("captf_"), false),
        ] {
            assert_eq!(may_name_runner_variables(prefix), may, "{prefix:?}");
        }
    }

    #[test]
    fn the_terraform_cli_config_is_mounted_read_only_and_named_by_tf_cli_config_file() {
        let platform = RunnerPodDefaults {
            terraform_cli_config: Some(CliConfigRef {
                name: "terraform-mirror".into(),
                key: None,
            }),
            ..RunnerPodDefaults::default()
        };
        let jobs = JobsSpec {
            env: Some(vec![var("TF_CLI_CONFIG_FILE", "/elsewhere")]),
            ..Default::default()
        };
        let spec = TerraformSpec {
            jobs: Some(jobs.clone()),
            ..Default::default()
        };
        let eff = defaults::effective(&spec);
        let s = start(Op::Apply);
        let build_with = |jobs: Option<&JobsSpec>, d: &RunnerPodDefaults| {
            build_job(&JobParams {
                jobs,
                ..params(&s, &eff, d)
            })
        };
        let job = build_with(Some(&jobs), &platform);
        assert_eq!(env_of(&job)["TF_CLI_CONFIG_FILE"], "/captf/terraform/terraform.rc");
        let pod = pod_of(&job);
        let v = pod
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "terraform-cli-config")
            .unwrap();
        let cm = v.config_map.unwrap();
        assert_eq!(cm.name, "terraform-mirror");
        assert_eq!(cm.items.unwrap()[0].key, "terraform.rc");
        let m = pod.containers[0]
            .volume_mounts
            .clone()
            .unwrap()
            .into_iter()
            .find(|m| m.name == "terraform-cli-config")
            .unwrap();
        assert_eq!((m.mount_path.as_str(), m.read_only), ("/captf/terraform", Some(true)));

        // The spec's own wins over the platform's.
        let own = JobsSpec {
            terraform_cli_config: Some(CliConfigRef {
                name: "team-mirror".into(),
                key: Some("cli.tfrc".into()),
            }),
            ..Default::default()
        };
        let pod = pod_of(&build_with(Some(&own), &platform));
        let cm = pod.volumes.unwrap().into_iter().find_map(|v| v.config_map).unwrap();
        assert_eq!(
            (cm.name.as_str(), cm.items.unwrap()[0].key.as_str()),
            ("team-mirror", "cli.tfrc")
        );

        // Neither: no volume, no variable; the spec's env stays as written.
        let job = build_with(Some(&jobs), &RunnerPodDefaults::default());
        assert_eq!(env_of(&job)["TF_CLI_CONFIG_FILE"], "/elsewhere");
        assert!(pod_of(&job).volumes.unwrap().iter().all(|v| v.config_map.is_none()));
    }
}

//! The spec common to all three kinds (docs/api.md).
//!
//! Every field with a default is optional here, so the webhook can tell "unset" from
//! "set to the default" and `apply_defaults` can fill it in as a JSON patch.
//!
//! The schemars attributes put the table's numeric, length and pattern rules into the generated
//! CRDs as a first line of defence beside the webhook, and bound every string and list a CEL rule
//! reads (the API server refuses a CRD whose CEL cost estimate is unbounded). The constants come
//! from [`crate::limits`], which validation checks too, so the two cannot disagree.

use k8s_openapi::api::core::v1::{
    Affinity, EnvFromSource, EnvVar, LocalObjectReference, ResourceRequirements, Toleration, TopologySpreadConstraint,
    Volume, VolumeMount,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::limits::{
    DATA_KEY_PATTERN, DNS1123_SUBDOMAIN_PATTERN, MAX_ACTIVE_DEADLINE_SECONDS, MAX_DATA_KEY_LEN,
    MAX_DNS1123_SUBDOMAIN_LEN, MAX_DRIFT_INTERVAL_CHARS, MAX_ENV, MAX_ENV_FROM, MAX_MODULE_SOURCE_CHARS,
    MAX_POLICY_REFS, MAX_VARIABLES_FROM, MAX_VOLUMES, MIN_ACTIVE_DEADLINE_SECONDS, MODULE_SOURCE_PATTERN,
};

/// CEL on `jobs`: env names starting with `CAPTF_` are the runner's own.
pub const CEL_NO_RESERVED_ENV: &str = "!has(self.env) || self.env.all(e, !e.name.startsWith('CAPTF_'))";

/// A map of Terraform variables: names to arbitrary JSON values.
pub type Variables = BTreeMap<String, serde_json::Value>;

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformSpec {
    /// The Terraform module to run.
    pub module: ModuleSpec,
    /// Terraform variables (any JSON values). Default `{}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::types::schema::any_object")]
    pub variables: Option<Variables>,
    /// More variables from Secrets or ConfigMaps, merged in order (later entries win). At most 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_VARIABLES_FROM))]
    pub variables_from: Option<Vec<VariablesFrom>>,
    /// How the Jobs that run Terraform are built.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<JobsSpec>,
    /// Drift detection and remediation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftSpec>,
    /// Which plans wait for a person's approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<GuardSpec>,
    /// What deletion does to the infrastructure: `Destroy` (default) or `Orphan`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<DeletionPolicy>,
    /// Stop starting Jobs while true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// Client-side encryption of the state (OpenTofu only): the state Secret then holds
    /// ciphertext. Unset: the state is stored as the binary writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_encryption: Option<StateEncryption>,
}

/// Client-side state encryption with OpenTofu (AES-GCM, its key derived with PBKDF2 from a
/// passphrase). See docs/state-encryption.md for turning it on, rotating the passphrase and
/// turning it off.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StateEncryption {
    /// The Secret key holding the passphrase (at least 16 characters). Mounted read-only into
    /// the runner; it never reaches the log, the result, status or events.
    pub passphrase_secret_ref: SecretKeyRef,
    /// The passphrase before a rotation: a state still encrypted with it is read with it and
    /// written with `passphraseSecretRef`. Remove it once an apply has run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_passphrase_secret_ref: Option<SecretKeyRef>,
    /// `Encrypt` (default) writes the state encrypted; `Decrypt` reads it with the passphrase and
    /// writes it in plaintext, the one way to turn encryption off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<EncryptionMode>,
}

impl StateEncryption {
    pub fn mode_or_default(&self) -> EncryptionMode {
        self.mode.unwrap_or_default()
    }
}

/// A key of a Secret in the object's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret's name (a DNS-1123 subdomain).
    #[schemars(length(min = 1, max = MAX_DNS1123_SUBDOMAIN_LEN), regex(pattern = DNS1123_SUBDOMAIN_PATTERN))]
    pub name: String,
    /// The key. Default `passphrase`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_DATA_KEY_LEN), regex(pattern = DATA_KEY_PATTERN))]
    pub key: Option<String>,
}

/// The key read when a `SecretKeyRef` names none (`state_encryption::DEFAULT_KEY`). The types
/// hold the defaults of their own fields, so they import no module that imports them.
pub const DEFAULT_SECRET_KEY: &str = "passphrase";

impl SecretKeyRef {
    /// The key, `passphrase` when unset.
    pub fn key_or_default(&self) -> &str {
        self.key.as_deref().unwrap_or(DEFAULT_SECRET_KEY)
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum EncryptionMode {
    #[default]
    Encrypt,
    Decrypt,
}

/// The program a runner image runs.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TfBinary {
    /// OpenTofu (`tofu`).
    Tofu,
    /// Terraform (`terraform`).
    Terraform,
}

impl TfBinary {
    /// The command name, as `CAPTF_TF_BINARY` takes it.
    pub fn command(self) -> &'static str {
        match self {
            TfBinary::Tofu => "tofu",
            TfBinary::Terraform => "terraform",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModuleSpec {
    /// A module address `tofu init -from-module` accepts (not a local path): a registry address
    /// (`namespace/name/provider`), `git::`, `hg::`, `s3::`, `gcs::`, `http(s)://`, `oci://`,
    /// `github.com/…`, `bitbucket.org/…` or `git@host:path`. At most 2048 characters, no whitespace.
    #[schemars(length(min = 1, max = MAX_MODULE_SOURCE_CHARS), regex(pattern = MODULE_SOURCE_PATTERN))]
    pub source: String,
    /// Credentials for fetching the module: a Secret in the object's namespace holding
    /// `ssh-privatekey` with `known_hosts`, `.git-credentials`, `.netrc` or `TF_TOKEN_<host>`
    /// keys. Mounted read-only into the runner and used only by `init`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<ModuleCredentials>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModuleCredentials {
    pub secret_ref: SecretName,
}

/// A Secret in the object's namespace, by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretName {
    /// The Secret's name (a DNS-1123 subdomain).
    #[schemars(length(min = 1, max = MAX_DNS1123_SUBDOMAIN_LEN), regex(pattern = DNS1123_SUBDOMAIN_PATTERN))]
    pub name: String,
}

/// One source of variables: exactly one of `secretRef` or `configMapRef`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VariablesFrom {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<VariablesRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<VariablesRef>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VariablesRef {
    /// Name of the Secret or ConfigMap in the object's namespace (a DNS-1123 subdomain).
    #[schemars(length(min = 1, max = MAX_DNS1123_SUBDOMAIN_LEN), regex(pattern = DNS1123_SUBDOMAIN_PATTERN))]
    pub name: String,
    /// With a key, that value is a JSON object of variables; without, every key is one string variable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_DATA_KEY_LEN), regex(pattern = DATA_KEY_PATTERN))]
    pub key: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": CEL_NO_RESERVED_ENV,
    "message": "env names must not start with CAPTF_ (reserved for the runner)",
}]))]
pub struct JobsSpec {
    /// The Job's deadline in seconds. Default 3600; 60 to 604800.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_ACTIVE_DEADLINE_SECONDS, max = MAX_ACTIVE_DEADLINE_SECONDS))]
    pub active_deadline_seconds: Option<i64>,
    /// How long a step waits for the state lock. Default min(300, activeDeadlineSeconds / 2); below the deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_ACTIVE_DEADLINE_SECONDS - 1))]
    pub lock_timeout_seconds: Option<i64>,
    /// Failed Jobs kept per outcome; also the backoff and remediation limit. Default 3; 0 counts like 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub failed_jobs_history_limit: Option<i32>,
    /// Succeeded Jobs kept. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub successful_jobs_history_limit: Option<i32>,
    /// Runner image. Unset: the controller's `--runner-image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The program the runner image runs: `tofu` or `terraform`, found on the image's `PATH`; the
    /// runner fails `init` when the image's binary is another program. Unset: the image's own
    /// choice (CAPTF's image: `tofu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<TfBinary>,
    /// Service account of the runner pods (a DNS-1123 subdomain). Unset: the chart's runner account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_DNS1123_SUBDOMAIN_LEN), regex(pattern = DNS1123_SUBDOMAIN_PATTERN))]
    pub service_account_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Extra environment for the runner; names must not start with `CAPTF_`. At most 256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_ENV))]
    pub env: Option<Vec<EnvVar>>,
    /// More environment for the runner from whole ConfigMaps or Secrets (a `secretRef` is a
    /// Secret read the tenant policy may forbid); `prefix` must not start with `CAPTF_`. The
    /// runner's own variables and `env` win over them. At most 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_ENV_FROM))]
    pub env_from: Option<Vec<EnvFromSource>>,
    /// Labels of the runner pods. Keys under `captf.io/` and `cluster.x-k8s.io/cluster-name` are
    /// the controller's and refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_labels: Option<BTreeMap<String, String>>,
    /// Annotations of the runner pods. Keys under `captf.io/` are the controller's and refused,
    /// and so are those that set a container's security profile (AppArmor, seccomp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_annotations: Option<BTreeMap<String, String>>,
    /// Extra volumes of the runner pods. Only the sources Pod Security's `restricted` profile
    /// allows (configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim,
    /// projected, secret); names must not be CAPTF's own (`inputs`,
    /// `work`, `tmp`, `terraform-cli-config`); a `secret` volume (or a projected
    /// Secret) is a Secret read the tenant policy may forbid. At most 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_VOLUMES))]
    pub volumes: Option<Vec<Volume>>,
    /// Mounts of `volumes` into the runner container. Each names one of `volumes`; its mountPath
    /// must not be, contain or lie inside CAPTF's own mounts (`/captf`, `/work`, `/tmp`). At most 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_VOLUMES))]
    pub volume_mounts: Option<Vec<VolumeMount>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    /// PriorityClass of the runner pods (a DNS-1123 subdomain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_DNS1123_SUBDOMAIN_LEN), regex(pattern = DNS1123_SUBDOMAIN_PATTERN))]
    pub priority_class_name: Option<String>,
    /// Secrets in the object's namespace the kubelet uses to pull the runner image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
    /// The Terraform CLI configuration (provider mirrors, `provider_installation`) from a
    /// ConfigMap in the object's namespace, mounted read-only and named by `TF_CLI_CONFIG_FILE`.
    /// Unset: the controller's `--runner-terraform-cli-config`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terraform_cli_config: Option<CliConfigRef>,
}

/// A ConfigMap key holding a Terraform CLI configuration.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CliConfigRef {
    /// Name of the ConfigMap in the object's namespace (a DNS-1123 subdomain).
    #[schemars(length(min = 1, max = MAX_DNS1123_SUBDOMAIN_LEN), regex(pattern = DNS1123_SUBDOMAIN_PATTERN))]
    pub name: String,
    /// The key holding the configuration. Default `terraform.rc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_DATA_KEY_LEN), regex(pattern = DATA_KEY_PATTERN))]
    pub key: Option<String>,
}

/// The ConfigMap key of the Terraform CLI configuration when a reference names none
/// (`pod::DEFAULT_CLI_CONFIG_KEY`).
pub const DEFAULT_CLI_CONFIG_MAP_KEY: &str = "terraform.rc";

impl CliConfigRef {
    /// The key, `terraform.rc` when unset.
    pub fn key_or_default(&self) -> &str {
        self.key.as_deref().unwrap_or(DEFAULT_CLI_CONFIG_MAP_KEY)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftSpec {
    /// How often to check for drift (`30m`, `1h30m`); `0` disables. Default `30m`; 1m to 168h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_DRIFT_INTERVAL_CHARS))]
    pub interval: Option<String>,
    /// `Auto` (default) applies to remediate drift; `Manual` only reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<Remediation>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GuardSpec {
    /// `Block` (default) stops any plan that deletes or replaces a resource until approved.
    /// `Allow` is the older spelling of `approval: Never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<DestructiveGuard>,
    /// Which plans wait for a person: `Destructive` (a plan that deletes or replaces), `Always`
    /// (every plan with changes) or `Never` (only if the platform's policy allows it). Unset:
    /// what `destructive` says (`Block`: `Destructive`, `Allow`: `Never`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalMode>,
    /// ConfigMaps of the object's namespace whose `.rego` keys are policies every plan is
    /// checked against before it is applied (beside the platform's own). At most 8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_POLICY_REFS))]
    pub policy_refs: Option<Vec<PolicyRef>>,
}

/// A ConfigMap of policies.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRef {
    /// Name of the ConfigMap in the object's namespace (a DNS-1123 subdomain).
    #[schemars(length(min = 1, max = MAX_DNS1123_SUBDOMAIN_LEN), regex(pattern = DNS1123_SUBDOMAIN_PATTERN))]
    pub name: String,
}

impl GuardSpec {
    /// The mode the guard runs in: `approval` when set, else the mode `destructive` spells.
    pub fn mode(&self) -> ApprovalMode {
        match (self.approval, self.destructive) {
            (Some(mode), _) => mode,
            (None, Some(DestructiveGuard::Allow)) => ApprovalMode::Never,
            (None, _) => ApprovalMode::Destructive,
        }
    }
}

/// Which plans wait for a person's approval before they are applied.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ApprovalMode {
    /// A plan that deletes or replaces a resource.
    #[default]
    Destructive,
    /// Every plan that changes anything.
    Always,
    /// None.
    Never,
}

impl ApprovalMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalMode::Destructive => "Destructive",
            ApprovalMode::Always => "Always",
            ApprovalMode::Never => "Never",
        }
    }

    /// The value of the runner's `CAPTF_GUARD`: `Destructive` and `Never` keep the spellings
    /// every runner release reads (`Block`, `Allow`), so a pinned older runner image still runs
    /// the objects it could run before; only `Always` needs a runner that knows it.
    pub fn runner_value(self) -> &'static str {
        match self {
            ApprovalMode::Destructive => DestructiveGuard::Block.as_str(),
            ApprovalMode::Always => "Always",
            ApprovalMode::Never => DestructiveGuard::Allow.as_str(),
        }
    }

    /// Read a runner's `CAPTF_GUARD` value (both spellings).
    pub fn from_runner_value(v: &str) -> Option<Self> {
        match v {
            "Block" | "Destructive" => Some(ApprovalMode::Destructive),
            "Always" => Some(ApprovalMode::Always),
            "Allow" | "Never" => Some(ApprovalMode::Never),
            _ => None,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Remediation {
    #[default]
    Auto,
    Manual,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DestructiveGuard {
    #[default]
    Block,
    Allow,
}

impl DestructiveGuard {
    pub fn as_str(self) -> &'static str {
        match self {
            DestructiveGuard::Block => "Block",
            DestructiveGuard::Allow => "Allow",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DeletionPolicy {
    #[default]
    Destroy,
    Orphan,
}

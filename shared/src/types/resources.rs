//! The four custom resources.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::spec::TerraformSpec;
use super::status::TerraformStatus;
use crate::limits::{MAX_EXPORT_NAME_LEN, MAX_EXPORTS, VARIABLE_NAME_PATTERN};

/// CEL: a lock wait alone must not consume the Job's deadline (defaults included). The default
/// deadline comes from the same literal as `defaults::DEFAULT_ACTIVE_DEADLINE_SECONDS`.
pub const CEL_LOCK_TIMEOUT_BELOW_DEADLINE: &str = concat!(
    "!has(self.spec.jobs) || !has(self.spec.jobs.lockTimeoutSeconds) || self.spec.jobs.lockTimeoutSeconds < (has(self.spec.jobs.activeDeadlineSeconds) ? self.spec.jobs.activeDeadlineSeconds : ",
    crate::default_active_deadline_seconds!(),
    ")"
);
/// CEL: exactly one ref per `variablesFrom` entry.
pub const CEL_ONE_REF_PER_ENTRY: &str =
    "!has(self.spec.variablesFrom) || self.spec.variablesFrom.all(e, has(e.secretRef) != has(e.configMapRef))";
/// CEL: the drift interval is `0` or a duration.
pub const CEL_DRIFT_INTERVAL: &str = "!has(self.spec.drift) || !has(self.spec.drift.interval) || self.spec.drift.interval == '0' || (duration(self.spec.drift.interval) >= duration('1m') && duration(self.spec.drift.interval) <= duration('168h'))";
/// CEL (update): `spec.controlPlaneEndpoint` is immutable once set.
pub const CEL_ENDPOINT_IMMUTABLE: &str = "!has(oldSelf.spec.controlPlaneEndpoint) || oldSelf.spec.controlPlaneEndpoint.host == '' || (has(self.spec.controlPlaneEndpoint) && self.spec.controlPlaneEndpoint == oldSelf.spec.controlPlaneEndpoint)";
/// CEL (update): `spec.providerID` is immutable once set.
pub const CEL_PROVIDER_ID_IMMUTABLE: &str = "!has(oldSelf.spec.providerID) || oldSelf.spec.providerID == '' || (has(self.spec.providerID) && self.spec.providerID == oldSelf.spec.providerID)";

/// A Cluster API cluster's infrastructure, provisioned by a Terraform module.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "TerraformCluster",
    doc = "A Cluster API cluster's infrastructure, provisioned by a Terraform or OpenTofu module.",
    namespaced,
    derive = "PartialEq",
    status = "TerraformStatus",
    shortname = "tfc",
    category = "cluster-api",
    label("clusterctl.cluster.x-k8s.io", ""),
    label("cluster.x-k8s.io/v1beta2", "v1alpha1_v1beta1"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Op", type_ = "string", json_path = ".status.nextAction.op"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"UpToDate\")].reason"),
    printcolumn(name = "Endpoint", type_ = "string", json_path = ".spec.controlPlaneEndpoint.host", priority = "1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = kube::core::Rule::new(CEL_LOCK_TIMEOUT_BELOW_DEADLINE).message("spec.jobs.lockTimeoutSeconds must be less than spec.jobs.activeDeadlineSeconds"),
    validation = kube::core::Rule::new(CEL_ONE_REF_PER_ENTRY).message("each spec.variablesFrom entry needs exactly one of secretRef or configMapRef"),
    validation = kube::core::Rule::new(CEL_DRIFT_INTERVAL).message("spec.drift.interval must be 0 or between 1m and 168h"),
    validation = kube::core::Rule::new(CEL_ENDPOINT_IMMUTABLE).message("spec.controlPlaneEndpoint is immutable once set"),
)]
#[serde(rename_all = "camelCase")]
pub struct TerraformClusterSpec {
    #[serde(flatten)]
    pub terraform: TerraformSpec,
    /// The control plane's endpoint; set by the controller from the module's outputs when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_endpoint: Option<ApiEndpoint>,
    /// Outputs of the cluster's module its machine pools and machines receive, each as the
    /// variable `cluster_<output>` (a sensitive output stays sensitive). At most 64 distinct
    /// output names; `name` is refused (`cluster_name` is the cluster's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_EXPORTS), inner(length(min = 1, max = MAX_EXPORT_NAME_LEN), regex(pattern = VARIABLE_NAME_PATTERN)))]
    pub exports: Option<Vec<String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiEndpoint {
    pub host: String,
    pub port: i32,
}

/// A Cluster API machine pool's infrastructure.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "TerraformMachinePool",
    doc = "A Cluster API machine pool's infrastructure, provisioned by a Terraform or OpenTofu module.",
    namespaced,
    derive = "PartialEq",
    status = "TerraformStatus",
    shortname = "tfmp",
    category = "cluster-api",
    label("clusterctl.cluster.x-k8s.io", ""),
    label("cluster.x-k8s.io/v1beta2", "v1alpha1_v1beta1"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Op", type_ = "string", json_path = ".status.nextAction.op"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"UpToDate\")].reason"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas", priority = "1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = kube::core::Rule::new(CEL_LOCK_TIMEOUT_BELOW_DEADLINE).message("spec.jobs.lockTimeoutSeconds must be less than spec.jobs.activeDeadlineSeconds"),
    validation = kube::core::Rule::new(CEL_ONE_REF_PER_ENTRY).message("each spec.variablesFrom entry needs exactly one of secretRef or configMapRef"),
    validation = kube::core::Rule::new(CEL_DRIFT_INTERVAL).message("spec.drift.interval must be 0 or between 1m and 168h"),
)]
#[serde(rename_all = "camelCase")]
pub struct TerraformMachinePoolSpec {
    #[serde(flatten)]
    pub terraform: TerraformSpec,
    /// Provider IDs of the pool's machines; set by the controller from outputs.
    #[serde(default, rename = "providerIDList", skip_serializing_if = "Option::is_none")]
    pub provider_id_list: Option<Vec<String>>,
}

/// A Cluster API machine's infrastructure.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "TerraformMachine",
    doc = "A Cluster API machine's infrastructure, provisioned by a Terraform or OpenTofu module.",
    namespaced,
    derive = "PartialEq",
    status = "TerraformStatus",
    shortname = "tfm",
    category = "cluster-api",
    label("clusterctl.cluster.x-k8s.io", ""),
    label("cluster.x-k8s.io/v1beta2", "v1alpha1_v1beta1"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Op", type_ = "string", json_path = ".status.nextAction.op"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"UpToDate\")].reason"),
    printcolumn(name = "ProviderID", type_ = "string", json_path = ".spec.providerID", priority = "1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = kube::core::Rule::new(CEL_LOCK_TIMEOUT_BELOW_DEADLINE).message("spec.jobs.lockTimeoutSeconds must be less than spec.jobs.activeDeadlineSeconds"),
    validation = kube::core::Rule::new(CEL_ONE_REF_PER_ENTRY).message("each spec.variablesFrom entry needs exactly one of secretRef or configMapRef"),
    validation = kube::core::Rule::new(CEL_DRIFT_INTERVAL).message("spec.drift.interval must be 0 or between 1m and 168h"),
    validation = kube::core::Rule::new(CEL_PROVIDER_ID_IMMUTABLE).message("spec.providerID is immutable once set"),
)]
#[serde(rename_all = "camelCase")]
pub struct TerraformMachineSpec {
    #[serde(flatten)]
    pub terraform: TerraformSpec,
    /// The machine's provider ID; set by the controller from outputs.
    #[serde(default, rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
}

/// A template of TerraformMachines, for Cluster API's MachineDeployments and MachineSets.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "TerraformMachineTemplate",
    doc = "A template of TerraformMachines for Cluster API MachineDeployments and MachineSets.",
    namespaced,
    derive = "PartialEq",
    shortname = "tfmt",
    category = "cluster-api",
    label("clusterctl.cluster.x-k8s.io", ""),
    label("cluster.x-k8s.io/v1beta2", "v1alpha1_v1beta1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct TerraformMachineTemplateSpec {
    pub template: TerraformMachineTemplateResource,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformMachineTemplateResource {
    /// Labels and annotations of the TerraformMachines made from the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    pub spec: TerraformMachineSpec,
}

/// The metadata a template gives the objects made from it (Cluster API's `ObjectMeta`: labels and
/// annotations only).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<std::collections::BTreeMap<String, String>>,
}

/// A template of TerraformClusters, for Cluster API's ClusterClass (`spec.infrastructure`).
/// Immutable: the webhook rejects spec changes.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "TerraformClusterTemplate",
    doc = "A template of TerraformClusters for Cluster API ClusterClasses.",
    namespaced,
    derive = "PartialEq",
    shortname = "tfct",
    category = "cluster-api",
    label("clusterctl.cluster.x-k8s.io", ""),
    label("cluster.x-k8s.io/v1beta2", "v1alpha1_v1beta1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct TerraformClusterTemplateSpec {
    pub template: TerraformClusterTemplateResource,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformClusterTemplateResource {
    /// Labels and annotations of the TerraformClusters made from the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    pub spec: TerraformClusterSpec,
}

/// A template of TerraformMachinePools, for Cluster API's ClusterClass (`spec.workers.machinePools`).
/// Immutable: the webhook rejects spec changes.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "TerraformMachinePoolTemplate",
    doc = "A template of TerraformMachinePools for Cluster API ClusterClasses.",
    namespaced,
    derive = "PartialEq",
    shortname = "tfmpt",
    category = "cluster-api",
    label("clusterctl.cluster.x-k8s.io", ""),
    label("cluster.x-k8s.io/v1beta2", "v1alpha1_v1beta1"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct TerraformMachinePoolTemplateSpec {
    pub template: TerraformMachinePoolTemplateResource,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformMachinePoolTemplateResource {
    /// Labels and annotations of the TerraformMachinePools made from the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    pub spec: TerraformMachinePoolSpec,
}

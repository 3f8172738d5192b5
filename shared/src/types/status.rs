//! The status common to all three kinds (docs/api.md).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::Op;

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Cluster API v1beta1 contract: the infrastructure is provisioned. Cluster API 1.14's
    /// MachinePool controller still reads only this field of an InfraMachinePool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Cluster API v1beta2 contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization: Option<Initialization>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Name of the running Job, or empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_job: Option<String>,
    /// The highest Job sequence number used so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_job_seq: Option<u32>,
    /// The highest Job sequence number whose booking effects (counts, last success, outputs,
    /// durable annotations, Cluster API fields, lease releases) are recorded in this status.
    /// A Job with `captf.io/outcome` above it is replayed without events or once-only metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_booked_job_seq: Option<u32>,
    /// What the controller decided to do next and, during backoff, when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_action: Option<NextAction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_inputs_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drift_check_time: Option<Time>,
    /// Consecutive failures per op (never capped by pruning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_failures: Option<OpCounts>,
    /// Time of the newest success per op (`apply`, `refresh`, `drift`, `destroy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_time: Option<BTreeMap<String, Time>>,
    /// A destructive plan waiting for approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_plan: Option<PendingPlan>,
    /// Non-sensitive Terraform outputs (≤ 64 KiB; larger ones are in `captf-outputs-<suffix>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::types::schema::any_object")]
    pub outputs: Option<BTreeMap<String, serde_json::Value>>,
    /// TerraformCluster: failure domains, from the module's `failure_domains` output, in the
    /// v1beta2 contract's list form (`status.failureDomains`, which Cluster API copies to the
    /// Cluster's `status.failureDomains`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100))]
    pub failure_domains: Option<Vec<NamedFailureDomain>>,
    /// TerraformMachine: the machine's addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<MachineAddress>>,
    /// TerraformMachinePool: the number of machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// TerraformMachinePool: each machine of the pool (Cluster API's informational
    /// `status.instances`), from the module's `instances` output, else one per entry of
    /// `provider_id_list`. At most 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000))]
    pub instances: Option<Vec<MachinePoolInstance>>,
}

/// One machine of a TerraformMachinePool, as Cluster API's InfraMachinePool contract describes
/// an instance.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachinePoolInstance {
    /// The machine's name within the pool.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instance_name: String,
    /// Its provider ID (as in `spec.providerIDList`).
    #[serde(default, rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<MachineAddress>>,
    /// The module says the machine is ready (true for an entry of `provider_id_list`: it exists
    /// after a successful apply).
    pub ready: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Initialization {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NextAction {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<Op>,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<Time>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpCounts {
    #[serde(default)]
    pub apply: u32,
    #[serde(default)]
    pub refresh: u32,
    #[serde(default)]
    pub drift: u32,
    #[serde(default)]
    pub destroy: u32,
}

impl OpCounts {
    pub fn get(&self, op: Op) -> u32 {
        match op {
            Op::Apply => self.apply,
            Op::Refresh => self.refresh,
            Op::Drift => self.drift,
            Op::Destroy => self.destroy,
        }
    }

    pub fn get_mut(&mut self, op: Op) -> &mut u32 {
        match op {
            Op::Apply => &mut self.apply,
            Op::Refresh => &mut self.refresh,
            Op::Drift => &mut self.drift,
            Op::Destroy => &mut self.destroy,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingPlan {
    /// The plan hash to approve with `captf.io/approve-plan`.
    pub hash: String,
    /// Resources the plan adds, changes, destroys and replaces (Terraform's words; v1alpha1
    /// said `adds`, `changes`, `destroys`, `replaces`).
    pub add: u32,
    pub change: u32,
    pub destroy: u32,
    pub replace: u32,
    /// The Job that produced the plan.
    pub job: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamedFailureDomain {
    /// Unique among the failure domains.
    pub name: String,
    /// Whether control plane machines may be placed there.
    #[serde(default)]
    pub control_plane: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<BTreeMap<String, String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineAddress {
    /// `Hostname`, `ExternalIP`, `InternalIP`, `ExternalDNS` or `InternalDNS`.
    #[serde(rename = "type")]
    pub type_: String,
    pub address: String,
}

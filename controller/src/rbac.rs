//! Every Kubernetes API call the controller makes, in one place. The chart's ClusterRole is
//! checked against this list (and nothing more), so keep it true when the controller changes.

/// One resource and the verbs the controller uses on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiCall {
    /// API group (`""` for core).
    pub group: &'static str,
    /// Resource (plural, with `/subresource` where it applies).
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
}

/// The controller's API calls (DESIGN.md §10, §11).
pub const CONTROLLER_API_CALLS: &[ApiCall] = &[
    ApiCall {
        group: "infrastructure.cluster.x-k8s.io",
        resource: "terraformclusters",
        verbs: &["get", "list", "watch", "patch", "update"],
    },
    ApiCall {
        group: "infrastructure.cluster.x-k8s.io",
        resource: "terraformclusters/status",
        verbs: &["get", "patch", "update"],
    },
    ApiCall {
        group: "infrastructure.cluster.x-k8s.io",
        resource: "terraformmachinepools",
        verbs: &["get", "list", "watch", "patch", "update"],
    },
    ApiCall {
        group: "infrastructure.cluster.x-k8s.io",
        resource: "terraformmachinepools/status",
        verbs: &["get", "patch", "update"],
    },
    ApiCall {
        group: "infrastructure.cluster.x-k8s.io",
        resource: "terraformmachines",
        verbs: &["get", "list", "watch", "patch", "update"],
    },
    ApiCall {
        group: "infrastructure.cluster.x-k8s.io",
        resource: "terraformmachines/status",
        verbs: &["get", "patch", "update"],
    },
    ApiCall {
        group: "batch",
        resource: "jobs",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
    },
    ApiCall {
        group: "",
        resource: "pods",
        verbs: &["get", "list", "watch"],
    },
    ApiCall {
        group: "",
        resource: "secrets",
        verbs: &["get", "list", "watch", "create", "patch", "update"],
    },
    ApiCall {
        group: "",
        resource: "configmaps",
        verbs: &["get", "list", "watch"],
    },
    ApiCall {
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "create", "update", "patch", "delete"],
    },
    ApiCall {
        group: "events.k8s.io",
        resource: "events",
        verbs: &["create"],
    },
    // A TerraformMachine's `bootstrap_data_secret` and `failure_domain` inputs: its owner
    // Machine's `spec.bootstrap.dataSecretName` and `spec.failureDomain` (runtime/gather.rs).
    ApiCall {
        group: "cluster.x-k8s.io",
        resource: "machines",
        verbs: &["get"],
    },
    // A TerraformMachinePool's `replicas` and `bootstrap_data_secret` inputs: its owner
    // MachinePool's `spec.replicas` and `spec.template.spec.bootstrap.dataSecretName`.
    ApiCall {
        group: "cluster.x-k8s.io",
        resource: "machinepools",
        verbs: &["get"],
    },
    // Cluster API pause: the owning Cluster's `spec.paused` (runtime/pause.rs).
    ApiCall {
        group: "cluster.x-k8s.io",
        resource: "clusters",
        verbs: &["get"],
    },
];

/// What a runner Job's service account may touch: its state Secrets, lock Lease and outputs
/// Secret (Terraform's kubernetes backend creates them, so the verbs cannot be name-scoped
/// for `create`).
pub const RUNNER_API_CALLS: &[ApiCall] = &[
    ApiCall {
        group: "",
        resource: "secrets",
        verbs: &["get", "list", "create", "update", "patch", "delete"],
    },
    ApiCall {
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "list", "create", "update", "patch", "delete"],
    },
];

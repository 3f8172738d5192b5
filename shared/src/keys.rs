//! Every label, annotation, finalizer and data key CAPTF owns, in one place.

/// The API group of CAPTF's kinds.
pub const GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// The served version.
pub const VERSION: &str = "v1beta1";
/// `apiVersion` of CAPTF's objects.
pub const API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta1";

/// The finalizer that makes deletion run a destroy first.
pub const FINALIZER: &str = "captf.io/destroy";

// Job labels.
pub const LABEL_KIND: &str = "captf.io/kind";
pub const LABEL_OBJECT: &str = "captf.io/object";
pub const LABEL_OP: &str = "captf.io/op";
pub const LABEL_ATTEMPT: &str = "captf.io/attempt";
pub const LABEL_INPUTS_HASH: &str = "captf.io/inputs-hash";
/// Cluster API's cluster-name label (on members and on CAPTF's Jobs).
pub const LABEL_CLUSTER_NAME: &str = "cluster.x-k8s.io/cluster-name";
/// clusterctl move waits while an object it moves carries this annotation (any value).
pub const ANNOTATION_BLOCK_MOVE: &str = "clusterctl.cluster.x-k8s.io/block-move";
/// Cluster API's topology controller marks the copy of a template it sends in a dry-run
/// server-side apply, to learn whether a ClusterClass change would alter it, with this annotation.
/// Such a request must pass template immutability (nothing is stored), or a ClusterClass change
/// never rolls out.
pub const ANNOTATION_TOPOLOGY_DRY_RUN: &str = "topology.cluster.x-k8s.io/dry-run";
/// clusterctl move takes objects with this label (any value) along with the Cluster's own.
pub const LABEL_CLUSTERCTL_MOVE: &str = "clusterctl.cluster.x-k8s.io/move";
/// Cluster API: objects with this label are managed by someone else and left alone.
pub const LABEL_MANAGED_BY: &str = "cluster.x-k8s.io/managed-by";
/// Cluster API pause annotation.
pub const ANNOTATION_CAPI_PAUSED: &str = "cluster.x-k8s.io/paused";

// Job annotations.
pub const ANNOTATION_REASON: &str = "captf.io/reason";
pub const ANNOTATION_DRIFT_REMEDIATION: &str = "captf.io/drift-remediation";
pub const ANNOTATION_FORCE_UNLOCK: &str = "captf.io/force-unlock";
pub const ANNOTATION_OUTCOME: &str = "captf.io/outcome";
pub const ANNOTATION_DELETED_BY: &str = "captf.io/deleted-by";
/// The approved plan hash carried by an apply Job.
pub const ANNOTATION_APPROVED_PLAN: &str = "captf.io/approved-plan";

/// The UID of the object a state Secret or lock Lease belongs to (they have no owner: they
/// outlive the object); also recorded on the inputs Secret (`crate::binding`).
pub const ANNOTATION_OWNER_UID: &str = "captf.io/owner-uid";
/// On a state Secret and lock Lease whose object went through its finalizer (the UID it had):
/// no object is bound to them. After a destroy the state Secret is emptied as well, and a new
/// object of the same name takes both over; after an orphaning the state describes the kept
/// infrastructure and is taken over only by an object that names this UID in
/// [`ANNOTATION_ADOPT_STATE`].
pub const ANNOTATION_RELEASED_BY: &str = "captf.io/released-by";

// Cluster lease annotations.
/// The member Jobs (machine pools', machines') that joined the cluster lease, as a JSON object
/// `{"<job>": "<its run lease>"}`.
pub const ANNOTATION_CLUSTER_MEMBERS: &str = "captf.io/member-jobs";
/// The run lease of the cluster Job holding the cluster lease.
pub const ANNOTATION_HOLDER_RUN_LEASE: &str = "captf.io/holder-run-lease";

// Run lease annotations.
/// The controller instance (its leader Lease name) whose pass claimed the run lease.
pub const ANNOTATION_CLAIMED_BY: &str = "captf.io/claimed-by";

// Object annotations set by people.
/// `kubectl annotate … captf.io/approve-plan=<hash>` approves a destructive plan.
pub const ANNOTATION_APPROVE_PLAN: &str = "captf.io/approve-plan";
/// `captf.io/adopt-state=<uid>` on an object: take over the state Secret and lock Lease released
/// under its names by the object of that UID (their `captf.io/released-by`). Without it (or
/// naming another UID) released state that still holds something is never used.
pub const ANNOTATION_ADOPT_STATE: &str = "captf.io/adopt-state";
/// Who set `captf.io/approve-plan`: written by the admission webhook from the request's user
/// (a value a person wrote is replaced), else by `kubectl captf approve` with its own user;
/// copied onto the apply Job that carries the approval.
pub const ANNOTATION_APPROVED_BY: &str = "captf.io/approved-by";
/// `captf.io/approvals-required=<N>`: a plan the guard holds is applied only once N distinct
/// people approved its hash, none of them the one who last changed the spec
/// ([`ANNOTATION_SPEC_CHANGED_BY`]). At most the policy's `--max-approvals-required`.
pub const ANNOTATION_APPROVALS_REQUIRED: &str = "captf.io/approvals-required";
/// Everyone who approved the plan `captf.io/approve-plan` names, in order, as a JSON list of
/// user names: written by the admission webhook alone (a value a person wrote is replaced).
pub const ANNOTATION_APPROVERS: &str = "captf.io/approvers";
/// The user whose request last changed the spec (or created the object): written by the
/// admission webhook alone. With `captf.io/approvals-required`, that user's approval does not
/// count.
pub const ANNOTATION_SPEC_CHANGED_BY: &str = "captf.io/spec-changed-by";
/// The most approvers any policy lets `captf.io/approvals-required` ask for.
pub const MAX_APPROVALS_REQUIRED: u32 = 10;
/// `captf.io/reconcile-now=<RFC 3339 time>` (`kubectl captf reconcile`): the next Job starts now
/// instead of waiting out the backoff of failures that finished before that time; used once.
pub const ANNOTATION_RECONCILE_NOW: &str = "captf.io/reconcile-now";
/// Who asked for `captf.io/reconcile-now` (written like `captf.io/approved-by`).
pub const ANNOTATION_RECONCILE_NOW_BY: &str = "captf.io/reconcile-now-by";
/// Why, in the requester's words (`kubectl captf reconcile --reason`).
pub const ANNOTATION_RECONCILE_NOW_REASON: &str = "captf.io/reconcile-now-reason";
/// `kubectl annotate … captf.io/refresh=<RFC 3339 time>` requests a refresh.
pub const ANNOTATION_REFRESH: &str = "captf.io/refresh";

// Durable record on the inputs Secret.
pub const ANNOTATION_APPLIED_INPUTS_HASH: &str = "captf.io/applied-inputs-hash";
pub const ANNOTATION_INTERRUPTED_APPLY: &str = "captf.io/interrupted-apply";
pub const ANNOTATION_LAST_DRIFT_CHECK: &str = "captf.io/last-drift-check";
/// Data key of the inputs Secret.
pub const INPUTS_DATA_KEY: &str = "inputs.json";

/// Terraform's lock info annotation on the lock Lease.
pub const ANNOTATION_TF_LOCK_INFO: &str = "app.terraform.io/lock-info";

/// The labels on the CRDs that Cluster API and clusterctl read: the contract CAPTF implements
/// (v1beta2 only: `failureDomains` has its list shape, not v1beta1's map) with the API versions
/// that implement it (Cluster API uses the newest, v1beta1), and clusterctl's own label, without
/// which `clusterctl move` does not find the kinds of a CAPTF installed by Helm.
pub const CAPI_CONTRACT_LABELS: [(&str, &str); 2] = [
    ("cluster.x-k8s.io/v1beta2", "v1alpha1_v1beta1"),
    ("clusterctl.cluster.x-k8s.io", ""),
];

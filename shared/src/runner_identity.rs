//! Each object's runner identity and the state objects its runners work on.
//!
//! Every runner pod runs arbitrary module code (providers, `external` data sources,
//! `local-exec`) with the pod's token. So that the runner of one object can neither read nor
//! change anything of another, even in the same namespace, each object gets its own
//! ServiceAccount `captf-runner-<suffix>`, bound to a Role that names the object's own state
//! Secret, outputs Secret and lock Lease (`resourceNames`) and nothing else:
//!
//! - Secrets `tfstate-default-<suffix>` and `captf-outputs-<suffix>`: `get`, `update`, `patch`,
//!   and `list`, which RBAC allows by name only when the request selects that name with a
//!   `metadata.name=` field selector; the runner's state proxy adds it to the backend's workspace
//!   listing.
//! - Lease `lock-tfstate-default-<suffix>`: `get` and `update` (take, release, force-unlock).
//!
//! No `create`: RBAC cannot limit `create` by name, and a runner that could create Secrets could
//! plant another object's state before its first run. The controller creates the state Secret,
//! the lock Lease and the outputs Secret (empty) before the object's first Job instead; the
//! backend finds them and updates them. No `delete` and no `watch`: nothing of the runner needs
//! them. The inputs Secret is mounted into the pod by the kubelet; the token cannot read it.
//!
//! The ServiceAccount, Role and RoleBinding are owned by the object (garbage-collected with
//! it). The state Secret is not: state outlives its object unless a person deletes it.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::{keys, names};

/// The prefix of each object's own runner ServiceAccount (`captf-runner-<suffix>`), which no
/// spec may name (the tenant policy refuses it, and a Secret holding its token is CAPTF's own).
pub const OWN_RUNNER_ACCOUNT_PREFIX: &str = "captf-runner-";

/// The labels Terraform's kubernetes backend puts on the state Secret it creates; the
/// controller's pre-created Secret carries the same, so the backend's workspace listing (by
/// `tfstate` and `tfstateSecretSuffix`) finds it.
pub fn state_secret_labels(suffix: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/managed-by".to_string(), "terraform".to_string()),
        ("tfstate".to_string(), "true".to_string()),
        ("tfstateSecretSuffix".to_string(), suffix.to_string()),
        ("tfstateWorkspace".to_string(), "default".to_string()),
    ])
}

/// The rules of the object's runner Role.
pub fn runner_rules(suffix: &str) -> Vec<PolicyRule> {
    vec![
        PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["secrets".into()]),
            resource_names: Some(vec![
                names::state_secret_name(suffix),
                names::outputs_secret_name(suffix),
            ]),
            verbs: vec!["get".into(), "list".into(), "update".into(), "patch".into()],
            ..PolicyRule::default()
        },
        PolicyRule {
            api_groups: Some(vec!["coordination.k8s.io".into()]),
            resources: Some(vec!["leases".into()]),
            resource_names: Some(vec![names::lock_lease_name(suffix)]),
            verbs: vec!["get".into(), "update".into()],
            ..PolicyRule::default()
        },
    ]
}

/// The object's runner ServiceAccount, Role and RoleBinding, all named
/// `captf-runner-<suffix>`.
#[derive(Clone, Debug, PartialEq)]
pub struct RunnerIdentity {
    pub service_account: ServiceAccount,
    pub role: Role,
    pub role_binding: RoleBinding,
}

fn meta(name: &str, namespace: &str, labels: &BTreeMap<String, String>, owner: Option<&OwnerReference>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        labels: Some(labels.clone()),
        owner_references: owner.map(|o| vec![o.clone()]),
        ..ObjectMeta::default()
    }
}

/// The identity of the object whose names end in `suffix`, owned by `owner` (None: unowned, for
/// tests and hand-made set-ups).
pub fn runner_identity(
    namespace: &str,
    suffix: &str,
    labels: &BTreeMap<String, String>,
    owner: Option<&OwnerReference>,
) -> RunnerIdentity {
    let name = names::runner_service_account_name(suffix);
    RunnerIdentity {
        service_account: ServiceAccount {
            metadata: meta(&name, namespace, labels, owner),
            ..ServiceAccount::default()
        },
        role: Role {
            metadata: meta(&name, namespace, labels, owner),
            rules: Some(runner_rules(suffix)),
        },
        role_binding: RoleBinding {
            metadata: meta(&name, namespace, labels, owner),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: name.clone(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name,
                namespace: Some(namespace.to_string()),
                ..Subject::default()
            }]),
        },
    }
}

/// The state objects the controller creates before an object's first Job, when absent: the
/// state Secret (empty: the backend reads it as "no state yet"), the lock Lease (no holder: the
/// lock is free) and the outputs Secret (empty). `extra_labels` go on the two Secrets (the
/// clusterctl move label, so the state travels with the object). With an `owner`, the outputs
/// Secret is owned by it and the state Secret and lock Lease, which must outlive it, carry its
/// UID in `captf.io/owner-uid` (`crate::binding`).
#[derive(Clone, Debug, PartialEq)]
pub struct StateObjects {
    pub state_secret: Secret,
    pub lock_lease: Lease,
    pub outputs_secret: Secret,
}

pub fn state_objects(
    namespace: &str,
    suffix: &str,
    extra_labels: &BTreeMap<String, String>,
    owner: Option<&OwnerReference>,
) -> StateObjects {
    let mut state_labels = state_secret_labels(suffix);
    state_labels.extend(extra_labels.clone());
    let bound = |mut m: ObjectMeta| {
        if let Some(o) = owner {
            m.annotations = Some(BTreeMap::from([(
                keys::ANNOTATION_OWNER_UID.to_string(),
                o.uid.clone(),
            )]));
        }
        m
    };
    let secret = |metadata: ObjectMeta| Secret {
        metadata,
        type_: Some("Opaque".into()),
        ..Secret::default()
    };
    StateObjects {
        // Never owned: garbage collection must not delete state.
        state_secret: secret(bound(meta(
            &names::state_secret_name(suffix),
            namespace,
            &state_labels,
            None,
        ))),
        lock_lease: Lease {
            metadata: bound(meta(
                &names::lock_lease_name(suffix),
                namespace,
                &BTreeMap::from([("app.kubernetes.io/managed-by".to_string(), "terraform".to_string())]),
                None,
            )),
            spec: None,
        },
        outputs_secret: secret(meta(
            &names::outputs_secret_name(suffix),
            namespace,
            extra_labels,
            owner,
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_runner_role_names_only_the_objects_own_state_outputs_and_lock() {
        let rules = runner_rules("prod-eu-tc");
        let names: Vec<&String> = rules.iter().flat_map(|r| r.resource_names.as_ref().unwrap()).collect();
        assert_eq!(
            names,
            [
                "tfstate-default-prod-eu-tc",
                "captf-outputs-prod-eu-tc",
                "lock-tfstate-default-prod-eu-tc"
            ]
        );
        for r in &rules {
            assert!(
                !r.verbs
                    .iter()
                    .any(|v| ["create", "delete", "deletecollection", "watch", "*"].contains(&v.as_str())),
                "{r:?}"
            );
        }
    }

    #[test]
    fn the_identity_binds_the_objects_service_account_to_its_role_in_its_namespace() {
        let id = runner_identity("team-a", "prod-eu-tc", &BTreeMap::new(), None);
        let name = "captf-runner-prod-eu-tc";
        assert_eq!(id.service_account.metadata.name.as_deref(), Some(name));
        assert_eq!(id.role.metadata.name.as_deref(), Some(name));
        assert_eq!(id.role_binding.role_ref.name, name);
        let s = &id.role_binding.subjects.as_ref().unwrap()[0];
        assert_eq!(
            (s.kind.as_str(), s.name.as_str(), s.namespace.as_deref()),
            ("ServiceAccount", name, Some("team-a"))
        );
        for m in [
            &id.service_account.metadata,
            &id.role.metadata,
            &id.role_binding.metadata,
        ] {
            assert_eq!(m.namespace.as_deref(), Some("team-a"));
        }
    }

    #[test]
    fn the_state_secret_is_never_owned_and_carries_the_backends_labels() {
        let owner = OwnerReference {
            name: "x".into(),
            uid: "u".into(),
            ..OwnerReference::default()
        };
        let extra = BTreeMap::from([("clusterctl.cluster.x-k8s.io/move".to_string(), String::new())]);
        let s = state_objects("team-a", "prod-eu-tc", &extra, Some(&owner));
        assert_eq!(s.state_secret.metadata.owner_references, None);
        let l = s.state_secret.metadata.labels.as_ref().unwrap();
        assert_eq!(l["tfstate"], "true");
        assert_eq!(l["tfstateSecretSuffix"], "prod-eu-tc");
        assert!(l.contains_key("clusterctl.cluster.x-k8s.io/move"));
        assert_eq!(s.state_secret.data, None);
        assert_eq!(s.lock_lease.spec, None);
        assert_eq!(
            s.lock_lease.metadata.name.as_deref(),
            Some("lock-tfstate-default-prod-eu-tc")
        );
        assert_eq!(s.outputs_secret.metadata.owner_references.as_ref().unwrap()[0].uid, "u");
    }

    #[test]
    fn the_state_secret_and_lock_lease_carry_the_owners_uid_in_an_annotation() {
        let owner = OwnerReference {
            name: "x".into(),
            uid: "u".into(),
            ..OwnerReference::default()
        };
        let s = state_objects("team-a", "prod-eu-tc", &BTreeMap::new(), Some(&owner));
        for m in [&s.state_secret.metadata, &s.lock_lease.metadata] {
            assert_eq!(m.annotations.as_ref().unwrap()[keys::ANNOTATION_OWNER_UID], "u");
            assert_eq!(m.owner_references, None);
        }
        assert_eq!(s.outputs_secret.metadata.annotations, None);
        let unowned = state_objects("team-a", "prod-eu-tc", &BTreeMap::new(), None);
        assert_eq!(unowned.state_secret.metadata.annotations, None);
    }
}

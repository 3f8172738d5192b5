//! What a control plane needs for nodes to join it with bootstrap tokens, as `kubeadm init`'s
//! bootstrap-token phase sets it up: the `cluster-info` ConfigMap in `kube-public` (the API
//! server's URL and CA, which the bootstrap signer then signs with every signing token) readable
//! by anyone, and the RBAC that lets a token of the group [`NODE_TOKEN_GROUP`] create a
//! CertificateSigningRequest for a kubelet client certificate and have it approved, and a node
//! renew its own certificate. The objects are built by pure functions and applied (server-side,
//! so applying again changes nothing) by [`prepare`].

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// The group Cluster API's and kubeadm's node bootstrap tokens put their users in
/// (`auth-extra-groups`).
pub const NODE_TOKEN_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// The namespace of `cluster-info`.
pub const CLUSTER_INFO_NAMESPACE: &str = "kube-public";
/// The ConfigMap token discovery reads.
pub const CLUSTER_INFO: &str = "cluster-info";
/// The field manager of the applied objects.
const MANAGER: &str = "captf-kubetest";

/// The `kubeconfig` of `cluster-info`: one cluster, nameless as kubeadm writes it, no users.
pub fn cluster_info_kubeconfig(server: &str, ca_pem: &str) -> Result<String, serde_yaml_ng::Error> {
    serde_yaml_ng::to_string(&json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "", "cluster": {
            "server": server, "certificate-authority-data": STANDARD.encode(ca_pem) } }],
        "contexts": [],
        "users": [],
        "current-context": "",
        "preferences": {},
    }))
}

/// The `cluster-info` ConfigMap.
pub fn cluster_info(server: &str, ca_pem: &str) -> Result<Value, serde_yaml_ng::Error> {
    Ok(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": CLUSTER_INFO, "namespace": CLUSTER_INFO_NAMESPACE },
        "data": { "kubeconfig": cluster_info_kubeconfig(server, ca_pem)? },
    }))
}

/// The Role and RoleBinding that let anyone (`system:anonymous`, before it has any credentials)
/// get `cluster-info`, and nothing else.
pub fn cluster_info_access() -> (Value, Value) {
    let name = "kubeadm:bootstrap-signer-clusterinfo";
    let metadata = json!({ "name": name, "namespace": CLUSTER_INFO_NAMESPACE });
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": metadata,
        "rules": [{ "apiGroups": [""], "resources": ["configmaps"], "resourceNames": [CLUSTER_INFO],
                    "verbs": ["get"] }],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": metadata,
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:anonymous" }],
    });
    (role, binding)
}

/// The ClusterRoleBindings (to the API server's own bootstrap roles): the node tokens' group may
/// create CSRs (`system:node-bootstrapper`) and have a node client certificate's CSR approved by
/// the approver (`...:nodeclient`); nodes may have the CSR renewing their own approved
/// (`...:selfnodeclient`).
pub fn csr_bindings() -> Vec<Value> {
    [
        (
            "kubeadm:kubelet-bootstrap",
            "system:node-bootstrapper",
            NODE_TOKEN_GROUP,
        ),
        (
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            NODE_TOKEN_GROUP,
        ),
        (
            "kubeadm:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "system:nodes",
        ),
    ]
    .into_iter()
    .map(|(name, role, group)| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": name },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
            "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group }],
        })
    })
    .collect()
}

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error("failed to render the cluster-info kubeconfig: {0}")]
    Render(#[from] serde_yaml_ng::Error),
    #[error("failed to apply {what}: {source}")]
    Apply {
        what: String,
        #[source]
        source: kube::Error,
    },
}

async fn apply<K>(api: Api<K>, object: &Value) -> Result<(), PrepareError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    api.patch(name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(object))
        .await
        .map(|_| ())
        .map_err(|source| PrepareError::Apply {
            what: format!("{} {name}", object["kind"].as_str().unwrap_or_default()),
            source,
        })
}

/// Applies, as `admin`, `cluster-info` for the API server at `server` with CA `ca_pem`, who may
/// read it, and the CSR bindings.
pub async fn prepare(admin: &kube::Client, server: &str, ca_pem: &str) -> Result<(), PrepareError> {
    apply(
        Api::<ConfigMap>::namespaced(admin.clone(), CLUSTER_INFO_NAMESPACE),
        &cluster_info(server, ca_pem)?,
    )
    .await?;
    let (role, binding) = cluster_info_access();
    apply(Api::<Role>::namespaced(admin.clone(), CLUSTER_INFO_NAMESPACE), &role).await?;
    apply(
        Api::<RoleBinding>::namespaced(admin.clone(), CLUSTER_INFO_NAMESPACE),
        &binding,
    )
    .await?;
    for b in csr_bindings() {
        apply(Api::<ClusterRoleBinding>::all(admin.clone()), &b).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn cluster_info_names_the_server_and_embeds_the_ca_and_nothing_else() {
        let cm = cluster_info("https://127.0.0.1:6443", "CA PEM").unwrap();
        assert_eq!(cm["metadata"]["namespace"], "kube-public");
        let kc = kube::config::Kubeconfig::from_yaml(cm["data"]["kubeconfig"].as_str().unwrap()).unwrap();
        assert_eq!(kc.clusters.len(), 1);
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(
            cluster.certificate_authority_data.as_deref(),
            Some(STANDARD.encode("CA PEM").as_str())
        );
        assert!(kc.auth_infos.is_empty());
    }

    #[test]
    fn anonymous_may_only_get_cluster_info() {
        let (role, binding) = cluster_info_access();
        let role: Role = serde_json::from_value(role).unwrap();
        let rules = role.rules.unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].verbs, vec!["get"]);
        assert_eq!(
            rules[0].resource_names.as_deref(),
            Some(&["cluster-info".to_string()][..])
        );
        let binding: RoleBinding = serde_json::from_value(binding).unwrap();
        assert_eq!(binding.subjects.unwrap()[0].name, "system:anonymous");
    }

    #[test]
    fn node_tokens_may_request_and_get_approved_node_client_certificates_and_nodes_renew_theirs() {
        let bindings: Vec<ClusterRoleBinding> = csr_bindings()
            .into_iter()
            .map(|b| serde_json::from_value(b).unwrap())
            .collect();
        let grants: Vec<(String, String)> = bindings
            .iter()
            .map(|b| (b.role_ref.name.clone(), b.subjects.as_ref().unwrap()[0].name.clone()))
            .collect();
        let has = |role: &str, group: &str| grants.iter().any(|(r, g)| r.ends_with(role) && g == group);
        assert!(has("system:node-bootstrapper", NODE_TOKEN_GROUP), "{grants:?}");
        assert!(has(":nodeclient", NODE_TOKEN_GROUP), "{grants:?}");
        assert!(has(":selfnodeclient", "system:nodes"), "{grants:?}");
    }
}

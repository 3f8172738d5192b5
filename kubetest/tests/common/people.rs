//! People on the real control plane: a ServiceAccount per person, with an editor's Role in a
//! namespace (and, for approvers, a binding to the approver ClusterRole), signed in through a
//! kubeconfig of its own. The API server authenticates each as
//! `system:serviceaccount:<namespace>:<name>`, the user the webhook records.

use std::path::PathBuf;

use captf_kubetest::ControlPlane;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, PostParams};
use serde_json::json;

/// The user name the API server gives the person `name` of namespace `ns`.
pub fn user(ns: &str, name: &str) -> String {
    format!("system:serviceaccount:{ns}:{name}")
}

/// A person `name` in `ns` who may edit CAPTF's objects there and read what the plugin reads;
/// bound to the ClusterRole `approver_role` too when given. Returns their kubeconfig.
pub async fn person(
    cp: &ControlPlane,
    admin: &kube::Client,
    ns: &str,
    name: &str,
    approver_role: Option<&str>,
) -> PathBuf {
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": ["infrastructure.cluster.x-k8s.io"], "resources": ["*"], "verbs": ["get", "list", "watch", "create", "update", "patch"]},
            {"apiGroups": [""], "resources": ["pods", "pods/log", "secrets", "configmaps"], "verbs": ["get", "list"]},
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["list"]},
        ],
    }))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let mut bindings = vec![
        json!({"metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}}),
    ];
    if let Some(approver_role) = approver_role {
        bindings.push(json!({
            "metadata": {"name": format!("{name}-approves")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": approver_role},
        }));
    }
    for mut binding in bindings {
        binding["subjects"] = json!([{"kind": "ServiceAccount", "name": name, "namespace": ns}]);
        let binding: RoleBinding = serde_json::from_value(binding).unwrap();
        Api::<RoleBinding>::namespaced(admin.clone(), ns)
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }
    cp.service_account_kubeconfig(ns, name).await.unwrap()
}

/// A client signed in as the person of `kubeconfig`.
pub async fn client(kubeconfig: &std::path::Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

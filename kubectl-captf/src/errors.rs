//! Errors that say what to do: a 403 names the verb, the resource and the RBAC rule that would
//! allow it; a 404 names the object and the namespace it was looked for in.

use captf_read::errors::{ApiAction, Error as RuntimeError};

/// What went wrong, in words a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("{0}")]
    Usage(String),
    #[error("cannot read the kubeconfig: {0}; pass --kubeconfig FILE or set KUBECONFIG")]
    Kubeconfig(String),
    #[error(
        "{kind} {name:?} not found in namespace {namespace:?}; pass -n NAMESPACE, or list what exists with `kubectl captf status -A`"
    )]
    NotFound {
        kind: String,
        name: String,
        namespace: String,
    },
    /// A 403, with the verb, the resource and the rule that would allow it.
    #[error("{0}")]
    Forbidden(String),
    #[error(
        "the API server rejected the credentials of this context (401): log in again, or choose another with --context"
    )]
    Unauthorized,
    #[error("cannot reach the API server: {0}; check the context (--context) and that the cluster is up")]
    Unreachable(String),
    #[error("{0}")]
    Api(String),
    /// A refusal that is the answer (approve or retry would do the wrong thing).
    #[error("{0}")]
    Refused(String),
}

impl PluginError {
    /// The process exit code: 2 for usage, 1 for the rest.
    pub fn exit_code(&self) -> u8 {
        match self {
            PluginError::Usage(_) => 2,
            _ => 1,
        }
    }
}

/// The verb and `resource[/subresource]` and group of a kube-apiserver 403 message: `… cannot
/// get resource "pods/log" in API group "" in the namespace "default"`.
pub fn parse_forbidden(message: &str) -> Option<(String, String, String)> {
    let rest = message.split(" cannot ").nth(1)?;
    let (verb, rest) = rest.split_once(" resource \"")?;
    let (resource, rest) = rest.split_once('"')?;
    let group = rest
        .split_once("in API group \"")
        .and_then(|(_, g)| g.split_once('"'))
        .map(|(g, _)| g.to_string())
        .unwrap_or_default();
    Some((verb.to_string(), resource.to_string(), group))
}

/// Whether a message is the API server's report of an admission webhook's denial.
fn is_webhook_denial(message: &str) -> bool {
    message.contains("admission webhook \"") && message.contains("denied the request")
}

/// The verb, resource and group of the runtime's API actions, for a 403 whose message does not
/// say (a table, so an action added to the runtime falls back to its own words).
const ACTION_RBAC: &[(ApiAction, (&str, &str, &str))] = &[
    (ApiAction::ListJobs, ("list", "jobs", "batch")),
    (ApiAction::GetJob, ("get", "jobs", "batch")),
    (ApiAction::PatchJob, ("patch", "jobs", "batch")),
    (ApiAction::CreateJob, ("create", "jobs", "batch")),
    (ApiAction::DeleteJob, ("delete", "jobs", "batch")),
    (ApiAction::ListPods, ("list", "pods", "")),
    (ApiAction::GetPod, ("get", "pods", "")),
    (ApiAction::GetSecret, ("get", "secrets", "")),
    (ApiAction::WriteSecret, ("patch", "secrets", "")),
    (ApiAction::GetConfigMap, ("get", "configmaps", "")),
    (ApiAction::GetLease, ("get", "leases", "coordination.k8s.io")),
    (ApiAction::WriteLease, ("update", "leases", "coordination.k8s.io")),
    (
        ApiAction::GetObject,
        ("get", "terraformclusters", captf_shared::keys::GROUP),
    ),
    (
        ApiAction::PatchObject,
        ("patch", "terraformclusters", captf_shared::keys::GROUP),
    ),
    (
        ApiAction::PatchStatus,
        ("patch", "terraformclusters/status", captf_shared::keys::GROUP),
    ),
    (
        ApiAction::ListMembers,
        ("list", "terraformmachinepools", captf_shared::keys::GROUP),
    ),
    (ApiAction::GetMachine, ("get", "machines", "cluster.x-k8s.io")),
    (
        ApiAction::WriteIdentity,
        ("create", "roles", "rbac.authorization.k8s.io"),
    ),
];

fn action_rbac(action: ApiAction) -> (&'static str, &'static str, &'static str) {
    ACTION_RBAC
        .iter()
        .find(|(a, _)| *a == action)
        .map_or((action.as_str(), "the resource it names", ""), |(_, r)| *r)
}

/// A 403 as a [`PluginError::Forbidden`]: from the API server's message when it has the usual
/// shape, else from what was being done. A refusal by an admission webhook is printed as it
/// came: the webhook says what is missing (CAPTF's names the `approve` verb and the role that
/// grants it), and the write itself was allowed, so no patch rule is suggested.
pub fn forbidden(message: &str, fallback: (&str, &str, &str), namespace: Option<&str>) -> PluginError {
    if parse_forbidden(message).is_none() && is_webhook_denial(message) {
        return PluginError::Forbidden(message.to_string());
    }
    let (verb, resource, group) = parse_forbidden(message)
        .unwrap_or_else(|| (fallback.0.to_string(), fallback.1.to_string(), fallback.2.to_string()));
    let can_i = match (resource.split_once('/'), group.is_empty()) {
        (Some((r, sub)), true) => format!("{r} --subresource={sub}"),
        (Some((r, sub)), false) => format!("{r}.{group} --subresource={sub}"),
        (None, true) => resource.clone(),
        (None, false) => format!("{resource}.{group}"),
    };
    let scope = namespace.map_or("any namespace".to_string(), |n| format!("namespace {n:?}"));
    let ns_flag = namespace.map_or(" -A".to_string(), |n| format!(" -n {n}"));
    PluginError::Forbidden(format!(
        "forbidden: you may not {verb} {resource} in {scope}.\n  {message}\n  Ask for a Role (or ClusterRole) rule \
         {{apiGroups: [\"{group}\"], resources: [\"{resource}\"], verbs: [\"{verb}\"]}}; check with `kubectl auth can-i {verb} {can_i}{ns_flag}`"
    ))
}

/// A kube error of a call the plugin made itself (`fallback`: its verb, resource and group).
pub fn from_kube(e: kube::Error, doing: &str, fallback: (&str, &str, &str), namespace: Option<&str>) -> PluginError {
    match &e {
        kube::Error::Api(s) if s.code == 403 => forbidden(&s.message, fallback, namespace),
        kube::Error::Api(s) if s.code == 401 => PluginError::Unauthorized,
        kube::Error::Api(s) => PluginError::Api(format!("failed to {doing}: {} ({})", s.message, s.code)),
        kube::Error::HyperError(_) | kube::Error::Service(_) => PluginError::Unreachable(e.to_string()),
        _ => PluginError::Api(format!("failed to {doing}: {e}")),
    }
}

/// An error of the controller's reads.
pub fn from_runtime(e: RuntimeError, namespace: Option<&str>) -> PluginError {
    match e {
        RuntimeError::Api { action, what, source } => {
            let fallback = action_rbac(action);
            from_kube(*source, &format!("{} {what}", action.as_str()), fallback, namespace)
        }
        other => PluginError::Api(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_forbidden_read_names_the_verb_the_resource_and_the_rule_that_allows_it() {
        let msg = "secrets \"captf-inputs-x\" is forbidden: User \"system:serviceaccount:t:oncall\" cannot get resource \"secrets\" in API group \"\" in the namespace \"team-a\"";
        let e = forbidden(msg, ("list", "jobs", "batch"), Some("team-a")).to_string();
        assert!(
            e.starts_with("forbidden: you may not get secrets in namespace \"team-a\"."),
            "{e}"
        );
        assert!(
            e.contains("{apiGroups: [\"\"], resources: [\"secrets\"], verbs: [\"get\"]}"),
            "{e}"
        );
        assert!(e.contains("kubectl auth can-i get secrets -n team-a"), "{e}");
    }

    #[test]
    fn a_webhooks_refusal_to_approve_is_printed_as_it_came() {
        let msg = "admission webhook \"validate.infrastructure.cluster.x-k8s.io\" denied the request: user \"eve\" may not approve plan \"h1\" (captf.io/approve-plan): that needs the \"approve\" verb on terraformclusters.infrastructure.cluster.x-k8s.io \"c\" in namespace \"team-a\"";
        let e = forbidden(
            msg,
            ("patch", "terraformclusters", captf_shared::keys::GROUP),
            Some("team-a"),
        )
        .to_string();
        assert_eq!(e, msg);
    }

    #[test]
    fn a_forbidden_subresource_is_checked_with_its_subresource_flag() {
        let msg = "pods \"p\" is forbidden: User \"u\" cannot get resource \"pods/log\" in API group \"\" in the namespace \"default\"";
        let e = forbidden(msg, ("get", "pods", ""), Some("default")).to_string();
        assert!(
            e.contains("kubectl auth can-i get pods --subresource=log -n default"),
            "{e}"
        );
        assert!(e.contains("resources: [\"pods/log\"]"), "{e}");
    }

    #[test]
    fn a_forbidden_message_of_another_shape_falls_back_to_what_was_being_done() {
        let e = forbidden(
            "denied",
            ("patch", "terraformclusters", "infrastructure.cluster.x-k8s.io"),
            None,
        )
        .to_string();
        assert!(
            e.contains("you may not patch terraformclusters in any namespace"),
            "{e}"
        );
        assert!(
            e.contains("kubectl auth can-i patch terraformclusters.infrastructure.cluster.x-k8s.io -A"),
            "{e}"
        );
    }

    #[test]
    fn not_found_says_which_namespace_was_searched_and_how_to_look_elsewhere() {
        let e = PluginError::NotFound {
            kind: "TerraformCluster".into(),
            name: "prod".into(),
            namespace: "team-a".into(),
        }
        .to_string();
        assert!(
            e.contains("TerraformCluster \"prod\" not found in namespace \"team-a\""),
            "{e}"
        );
        assert!(e.contains("-n NAMESPACE"), "{e}");
    }
}

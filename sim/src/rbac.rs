//! Authorization as kube-apiserver's RBAC authorizer does it: Roles, ClusterRoles, RoleBindings
//! and ClusterRoleBindings decide whether a user may make a request. Pure: the policy is the
//! objects the store holds, the request is what the server parsed.
//!
//! What it follows from Kubernetes (`plugin/pkg/auth/authorizer/rbac`):
//! - a rule matches on `apiGroups`, `resources` (`pods`, `pods/log`, `*`, `*/status`) and
//!   `verbs` (`*` matches every verb), or on `nonResourceURLs` (exact, or a prefix ending in `*`);
//! - `resourceNames` only match a request that names one object: never `create` (the name is in
//!   the body), never `list`/`watch` without a `metadata.name=` field selector, never
//!   `deletecollection`;
//! - a RoleBinding grants its role's rules in its own namespace only (it may reference a
//!   ClusterRole); a ClusterRoleBinding grants them everywhere, and is the only grant for
//!   cluster-scoped resources, requests across all namespaces and non-resource URLs;
//! - subjects are Users, Groups and ServiceAccounts; a ServiceAccount's user is
//!   `system:serviceaccount:<ns>:<name>` in the groups `system:serviceaccounts`,
//!   `system:serviceaccounts:<ns>` and `system:authenticated`.
//!
//! - escalation prevention on writes of RBAC objects ([`escalation_refusal`]): a Role only with
//!   rules the writer holds, a binding only to a role whose rules it holds, unless it may
//!   `escalate` or `bind`.
//!
//! Not simulated: aggregated ClusterRoles (`aggregationRule`), impersonation.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject};
use serde_json::Value;

/// Who makes a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
}

impl UserInfo {
    /// The user of a ServiceAccount's token.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        UserInfo {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }

    /// `(namespace, name)` when the user is a ServiceAccount.
    pub fn as_service_account(&self) -> Option<(&str, &str)> {
        let rest = self.name.strip_prefix("system:serviceaccount:")?;
        rest.split_once(':')
    }
}

/// What a request asks to do (kube-apiserver's `authorizer.Attributes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// A request on an API resource.
    Resource {
        /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
        verb: String,
        /// `""` for the core group.
        group: String,
        /// The plural (`secrets`).
        resource: String,
        /// `status`, `log`, `eviction`, `token`, ...
        subresource: Option<String>,
        /// `None`: cluster-scoped, or across all namespaces.
        namespace: Option<String>,
        /// The object's name: from the path, or from a `metadata.name=` field selector of a
        /// list or watch. Never set for `create` (Kubernetes takes no name from the body).
        name: Option<String>,
    },
    /// A request on a path that is not a resource (`/version`, `/healthz`).
    NonResource { verb: String, path: String },
}

impl Request {
    /// A resource request.
    pub fn resource(verb: &str, group: &str, resource: &str) -> Self {
        Request::Resource {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: None,
            namespace: None,
            name: None,
        }
    }

    /// The same request in a namespace.
    pub fn in_namespace(mut self, ns: &str) -> Self {
        if let Request::Resource { namespace, .. } = &mut self {
            *namespace = Some(ns.into());
        }
        self
    }

    /// The same request naming an object.
    pub fn named(mut self, n: &str) -> Self {
        if let Request::Resource { name, .. } = &mut self {
            *name = Some(n.into());
        }
        self
    }

    /// The same request on a subresource.
    pub fn subresource(mut self, s: &str) -> Self {
        if let Request::Resource { subresource, .. } = &mut self {
            *subresource = Some(s.into());
        }
        self
    }
}

/// The RBAC objects that decide.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    pub roles: Vec<Role>,
    pub cluster_roles: Vec<ClusterRole>,
    pub role_bindings: Vec<RoleBinding>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
}

impl Policy {
    /// From stored objects (anything that does not parse as its kind is ignored, as an invalid
    /// object could not have been stored in Kubernetes).
    pub fn from_values(
        roles: &[Value],
        cluster_roles: &[Value],
        role_bindings: &[Value],
        cluster_role_bindings: &[Value],
    ) -> Self {
        fn parse<T: serde::de::DeserializeOwned>(v: &[Value]) -> Vec<T> {
            v.iter()
                .filter_map(|o| serde_json::from_value(o.clone()).ok())
                .collect()
        }
        Policy {
            roles: parse(roles),
            cluster_roles: parse(cluster_roles),
            role_bindings: parse(role_bindings),
            cluster_role_bindings: parse(cluster_role_bindings),
        }
    }

    fn cluster_role(&self, name: &str) -> Option<&ClusterRole> {
        self.cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name))
    }

    fn role(&self, namespace: &str, name: &str) -> Option<&Role> {
        self.roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name) && r.metadata.namespace.as_deref() == Some(namespace))
    }

    /// Every rule that applies to `user` for a request in `namespace` (`None`: cluster scope).
    pub fn rules_for<'a>(&'a self, user: &UserInfo, namespace: Option<&str>) -> Vec<&'a PolicyRule> {
        let mut out = vec![];
        for b in &self.cluster_role_bindings {
            if b.role_ref.kind == "ClusterRole"
                && applies_to(b.subjects.as_deref(), user, "")
                && let Some(r) = self.cluster_role(&b.role_ref.name)
            {
                out.extend(r.rules.iter().flatten());
            }
        }
        let Some(ns) = namespace else { return out };
        for b in &self.role_bindings {
            if b.metadata.namespace.as_deref() != Some(ns) || !applies_to(b.subjects.as_deref(), user, ns) {
                continue;
            }
            match b.role_ref.kind.as_str() {
                "ClusterRole" => {
                    if let Some(r) = self.cluster_role(&b.role_ref.name) {
                        out.extend(r.rules.iter().flatten());
                    }
                }
                "Role" => {
                    if let Some(r) = self.role(ns, &b.role_ref.name) {
                        out.extend(r.rules.iter().flatten());
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// Whether `user` may make `req`.
    pub fn allows(&self, user: &UserInfo, req: &Request) -> bool {
        let ns = match req {
            Request::Resource { namespace, .. } => namespace.as_deref(),
            Request::NonResource { .. } => None,
        };
        self.rules_for(user, ns).into_iter().any(|r| rule_allows(r, req))
    }
}

/// Whether a binding's subjects include the user. A ServiceAccount subject without a
/// namespace means the binding's own (`binding_ns`; `""` for a ClusterRoleBinding, where
/// Kubernetes requires one).
fn applies_to(subjects: Option<&[Subject]>, user: &UserInfo, binding_ns: &str) -> bool {
    subjects.unwrap_or_default().iter().any(|s| match s.kind.as_str() {
        "User" => s.name == user.name,
        "Group" => user.groups.contains(&s.name),
        "ServiceAccount" => {
            let ns = s.namespace.as_deref().filter(|n| !n.is_empty()).unwrap_or(binding_ns);
            !ns.is_empty() && user.name == format!("system:serviceaccount:{ns}:{}", s.name)
        }
        _ => false,
    })
}

fn has(list: Option<&[String]>, want: &str) -> bool {
    list.unwrap_or_default().iter().any(|x| x == "*" || x == want)
}

/// Whether one rule allows a request (`RuleAllows` in Kubernetes).
pub fn rule_allows(rule: &PolicyRule, req: &Request) -> bool {
    match req {
        Request::Resource {
            verb,
            group,
            resource,
            subresource,
            name,
            ..
        } => {
            let combined = match subresource {
                Some(s) => format!("{resource}/{s}"),
                None => resource.clone(),
            };
            has(Some(&rule.verbs), verb)
                && has(rule.api_groups.as_deref(), group)
                && resource_matches(rule.resources.as_deref(), &combined, subresource.as_deref())
                && resource_name_matches(rule.resource_names.as_deref(), name.as_deref())
        }
        Request::NonResource { verb, path } => {
            has(Some(&rule.verbs), verb) && non_resource_url_matches(rule.non_resource_urls.as_deref(), path)
        }
    }
}

fn resource_matches(resources: Option<&[String]>, combined: &str, subresource: Option<&str>) -> bool {
    resources.unwrap_or_default().iter().any(|r| {
        r == "*" || r == combined || subresource.is_some_and(|s| r.strip_prefix("*/").is_some_and(|rs| rs == s))
    })
}

/// An empty `resourceNames` matches every request; otherwise only a request that names one of
/// them (so never a create, an unfiltered list or watch, or a deletecollection).
fn resource_name_matches(names: Option<&[String]>, name: Option<&str>) -> bool {
    match names {
        None | Some([]) => true,
        Some(ns) => name.is_some_and(|n| ns.iter().any(|x| x == n)),
    }
}

fn non_resource_url_matches(urls: Option<&[String]>, path: &str) -> bool {
    urls.unwrap_or_default()
        .iter()
        .any(|u| u == "*" || u == path || u.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix)))
}

/// kube-apiserver's 403 message for a denied request, e.g. `secrets "s" is forbidden: User
/// "system:serviceaccount:ns:sa" cannot get resource "secrets" in API group "" in the
/// namespace "ns"`.
pub fn forbidden_message(user: &UserInfo, req: &Request) -> String {
    match req {
        Request::Resource {
            verb,
            group,
            resource,
            subresource,
            namespace,
            name,
        } => {
            let qualified = if group.is_empty() {
                resource.clone()
            } else {
                format!("{resource}.{group}")
            };
            let subject = match name {
                Some(n) => format!("{qualified} \"{n}\""),
                None => qualified,
            };
            let combined = match subresource {
                Some(s) => format!("{resource}/{s}"),
                None => resource.clone(),
            };
            let scope = match namespace {
                Some(ns) => format!("in the namespace \"{ns}\""),
                None => "at the cluster scope".to_string(),
            };
            format!(
                "{subject} is forbidden: User \"{}\" cannot {verb} resource \"{combined}\" in API group \"{group}\" {scope}",
                user.name
            )
        }
        Request::NonResource { verb, path } => {
            format!("forbidden: User \"{}\" cannot {verb} path \"{path}\"", user.name)
        }
    }
}

/// Kubernetes' escalation prevention on writes of RBAC objects: a user may write a Role or
/// ClusterRole only with rules it holds itself (where the role applies), unless it may
/// `escalate` it; and a RoleBinding or ClusterRoleBinding only to a role whose rules it holds
/// where the binding applies, unless it may `bind` that role. `resource` is the plural of what
/// is written, `namespace` its namespace (`None` for cluster-scoped kinds), `obj` the object as
/// it would be stored. `None`: allowed; `Some(message)`: 403, in Kubernetes' words.
pub fn escalation_refusal(
    policy: &Policy,
    user: &UserInfo,
    resource: &str,
    namespace: Option<&str>,
    obj: &Value,
) -> Option<String> {
    const GROUP: &str = "rbac.authorization.k8s.io";
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let may = |verb: &str, res: &str, n: &str| {
        let mut req = Request::resource(verb, GROUP, res).named(n);
        if let Some(ns) = namespace {
            req = req.in_namespace(ns);
        }
        policy.allows(user, &req)
    };
    let rules: Vec<PolicyRule> = match resource {
        "roles" | "clusterroles" => {
            if may("escalate", resource, name) {
                return None;
            }
            serde_json::from_value(obj.get("rules").cloned().unwrap_or(Value::Null)).unwrap_or_default()
        }
        "rolebindings" | "clusterrolebindings" => {
            let kind = obj.pointer("/roleRef/kind").and_then(Value::as_str).unwrap_or_default();
            let role = obj.pointer("/roleRef/name").and_then(Value::as_str).unwrap_or_default();
            let role_resource = if kind == "Role" { "roles" } else { "clusterroles" };
            if may("bind", role_resource, role) {
                return None;
            }
            let found = match (kind, namespace) {
                ("Role", Some(ns)) => policy.role(ns, role).map(|r| r.rules.clone().unwrap_or_default()),
                ("ClusterRole", _) => policy.cluster_role(role).map(|r| r.rules.clone().unwrap_or_default()),
                _ => None,
            };
            match found {
                Some(r) => r,
                None => {
                    return Some(format!(
                        "{resource}.{GROUP} \"{name}\" is forbidden: {kind} \"{role}\" not found"
                    ));
                }
            }
        }
        _ => return None,
    };
    let missing: Vec<String> = rules
        .iter()
        .filter(|rule| !held(policy, user, namespace, rule))
        .map(|r| {
            format!(
                "{{APIGroups:{:?}, Resources:{:?}, ResourceNames:{:?}, NonResourceURLs:{:?}, Verbs:{:?}}}",
                r.api_groups.clone().unwrap_or_default(),
                r.resources.clone().unwrap_or_default(),
                r.resource_names.clone().unwrap_or_default(),
                r.non_resource_urls.clone().unwrap_or_default(),
                r.verbs
            )
        })
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "{resource}.{GROUP} \"{name}\" is forbidden: user \"{}\" (groups={:?}) is attempting to grant RBAC permissions not currently held:\n{}",
            user.name,
            user.groups,
            missing.join("\n")
        )
    })
}

/// Whether `user` holds every permission `rule` grants, in `namespace` (`None`: cluster-wide).
/// A wildcard in the rule is held only through the same wildcard.
fn held(policy: &Policy, user: &UserInfo, namespace: Option<&str>, rule: &PolicyRule) -> bool {
    let urls = rule.non_resource_urls.clone().unwrap_or_default();
    let url_ok = urls.iter().all(|path| {
        rule.verbs.iter().all(|verb| {
            policy.allows(
                user,
                &Request::NonResource {
                    verb: verb.clone(),
                    path: path.clone(),
                },
            )
        })
    });
    let names: Vec<Option<&str>> = match rule.resource_names.as_deref() {
        Some(n) if !n.is_empty() => n.iter().map(|x| Some(x.as_str())).collect(),
        _ => vec![None],
    };
    let groups = rule.api_groups.clone().unwrap_or_default();
    let resources = rule.resources.clone().unwrap_or_default();
    url_ok
        && groups.iter().all(|group| {
            resources.iter().all(|res| {
                let (resource, sub) = match res.split_once('/') {
                    Some((r, s)) => (r, Some(s)),
                    None => (res.as_str(), None),
                };
                rule.verbs.iter().all(|verb| {
                    names.iter().all(|name| {
                        let mut req = Request::resource(verb, group, resource);
                        if let Some(ns) = namespace {
                            req = req.in_namespace(ns);
                        }
                        if let Some(s) = sub {
                            req = req.subresource(s);
                        }
                        if let Some(n) = name {
                            req = req.named(n);
                        }
                        policy.allows(user, &req)
                    })
                })
            })
        })
}

/// The name a list or watch is limited to by its field selector (`metadata.name=x` or
/// `metadata.name==x`, alone or among other terms), as kube-apiserver's RequestInfo takes it.
pub fn name_from_field_selector(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        let term = term.trim();
        let value = term
            .strip_prefix("metadata.name==")
            .or_else(|| term.strip_prefix("metadata.name="))?;
        (!value.is_empty()).then(|| value.to_string())
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn sa() -> UserInfo {
        UserInfo::service_account("tenant-a", "runner")
    }

    fn role(ns: &str, name: &str, rules: Value) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": name, "namespace": ns}, "rules": rules})
    }

    fn cluster_role(name: &str, rules: Value) -> Value {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": name}, "rules": rules})
    }

    fn binding(kind: &str, ns: Option<&str>, role_kind: &str, role: &str, subjects: Value) -> Value {
        let mut m = json!({"name": format!("{role}-binding")});
        if let Some(ns) = ns {
            m["namespace"] = json!(ns);
        }
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": m,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
               "subjects": subjects})
    }

    fn sa_subject() -> Value {
        json!([{"kind": "ServiceAccount", "name": "runner", "namespace": "tenant-a"}])
    }

    /// A policy where the runner account has `rules` through a Role in tenant-a.
    fn in_tenant_a(rules: Value) -> Policy {
        Policy::from_values(
            &[role("tenant-a", "r", rules)],
            &[],
            &[binding("RoleBinding", Some("tenant-a"), "Role", "r", sa_subject())],
            &[],
        )
    }

    fn secrets(verb: &str) -> Request {
        Request::resource(verb, "", "secrets").in_namespace("tenant-a")
    }

    #[test]
    fn a_role_may_grant_only_what_its_writer_holds_there() {
        let p = in_tenant_a(json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "update"]}]));
        let narrower = role(
            "tenant-a",
            "x",
            json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s"], "verbs": ["get"]}]),
        );
        assert_eq!(
            escalation_refusal(&p, &sa(), "roles", Some("tenant-a"), &narrower),
            None
        );
        let wider = role(
            "tenant-a",
            "x",
            json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["delete"]}]),
        );
        let refused = escalation_refusal(&p, &sa(), "roles", Some("tenant-a"), &wider).unwrap();
        assert!(
            refused.contains("attempting to grant RBAC permissions not currently held"),
            "{refused}"
        );
        assert!(refused.contains("delete"), "{refused}");
        // Held in tenant-a only: the same role elsewhere grants what the writer does not hold.
        assert!(escalation_refusal(&p, &sa(), "roles", Some("tenant-b"), &narrower).is_some());
        // A wildcard is held only through a wildcard.
        let star = role(
            "tenant-a",
            "x",
            json!([{"apiGroups": [""], "resources": ["*"], "verbs": ["get"]}]),
        );
        assert!(escalation_refusal(&p, &sa(), "roles", Some("tenant-a"), &star).is_some());
    }

    #[test]
    fn escalate_on_roles_allows_any_role() {
        let p = in_tenant_a(
            json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"]}]),
        );
        let any = role(
            "tenant-a",
            "x",
            json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
        );
        assert_eq!(escalation_refusal(&p, &sa(), "roles", Some("tenant-a"), &any), None);
    }

    #[test]
    fn a_binding_needs_the_roles_rules_or_bind_on_it() {
        let get = json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]);
        let delete = json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["delete"]}]);
        let mut p = in_tenant_a(get.clone());
        p.roles
            .push(serde_json::from_value(role("tenant-a", "readers", get)).unwrap());
        p.roles
            .push(serde_json::from_value(role("tenant-a", "deleters", delete)).unwrap());
        let to = |r: &str| binding("RoleBinding", Some("tenant-a"), "Role", r, sa_subject());
        assert_eq!(
            escalation_refusal(&p, &sa(), "rolebindings", Some("tenant-a"), &to("readers")),
            None
        );
        assert!(escalation_refusal(&p, &sa(), "rolebindings", Some("tenant-a"), &to("deleters")).is_some());
        let missing = escalation_refusal(&p, &sa(), "rolebindings", Some("tenant-a"), &to("nope")).unwrap();
        assert!(missing.contains("not found"), "{missing}");
        p.roles[0].rules.as_mut().unwrap().push(
            serde_json::from_value(
                json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"],
                "resourceNames": ["deleters"], "verbs": ["bind"]}),
            )
            .unwrap(),
        );
        assert_eq!(
            escalation_refusal(&p, &sa(), "rolebindings", Some("tenant-a"), &to("deleters")),
            None
        );
    }

    #[test]
    fn a_rule_matches_group_resource_and_verb() {
        let p = in_tenant_a(json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]));
        assert!(p.allows(&sa(), &secrets("get").named("s")));
        assert!(!p.allows(&sa(), &secrets("update").named("s")));
        assert!(!p.allows(
            &sa(),
            &Request::resource("get", "", "configmaps").in_namespace("tenant-a")
        ));
        assert!(!p.allows(
            &sa(),
            &Request::resource("get", "apps", "secrets").in_namespace("tenant-a")
        ));
    }

    #[test]
    fn list_does_not_grant_watch_nor_watch_list() {
        let p = in_tenant_a(json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]));
        assert!(p.allows(&sa(), &secrets("list")));
        assert!(!p.allows(&sa(), &secrets("watch")));
        let p = in_tenant_a(json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["watch"]}]));
        assert!(!p.allows(&sa(), &secrets("list")));
    }

    #[test]
    fn delete_does_not_grant_deletecollection() {
        let p = in_tenant_a(json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["delete"]}]));
        assert!(p.allows(&sa(), &secrets("delete").named("s")));
        assert!(!p.allows(&sa(), &secrets("deletecollection")));
    }

    #[test]
    fn a_subresource_needs_its_own_rule() {
        let p = in_tenant_a(json!([{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "update"]}]));
        let status = Request::resource("update", "batch", "jobs")
            .in_namespace("tenant-a")
            .named("j")
            .subresource("status");
        assert!(!p.allows(&sa(), &status));
        let logs = Request::resource("get", "", "pods")
            .in_namespace("tenant-a")
            .named("p")
            .subresource("log");
        let p2 = in_tenant_a(json!([{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]));
        assert!(p2.allows(&sa(), &logs));
        assert!(!p2.allows(
            &sa(),
            &Request::resource("get", "", "pods").in_namespace("tenant-a").named("p")
        ));
    }

    #[test]
    fn star_slash_subresource_matches_that_subresource_of_every_resource() {
        let p = in_tenant_a(json!([{"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["get"]}]));
        let status = Request::resource("get", "batch", "jobs")
            .in_namespace("tenant-a")
            .named("j")
            .subresource("status");
        assert!(p.allows(&sa(), &status));
        assert!(
            !p.allows(
                &sa(),
                &Request::resource("get", "batch", "jobs")
                    .in_namespace("tenant-a")
                    .named("j")
            )
        );
    }

    #[test]
    fn wildcards_match_every_group_resource_and_verb() {
        let p = in_tenant_a(json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]));
        assert!(p.allows(&sa(), &secrets("deletecollection")));
        assert!(
            p.allows(
                &sa(),
                &Request::resource("create", "", "pods")
                    .in_namespace("tenant-a")
                    .named("p")
                    .subresource("eviction")
            )
        );
    }

    #[test]
    fn resource_names_restrict_get_update_and_delete_to_those_names() {
        let p = in_tenant_a(json!([{"apiGroups": [""], "resources": ["secrets"],
                                     "resourceNames": ["mine"], "verbs": ["get", "update", "delete"]}]));
        for verb in ["get", "update", "delete"] {
            assert!(p.allows(&sa(), &secrets(verb).named("mine")), "{verb}");
            assert!(!p.allows(&sa(), &secrets(verb).named("theirs")), "{verb}");
        }
    }

    #[test]
    fn resource_names_cannot_restrict_create() {
        let p = in_tenant_a(json!([{"apiGroups": [""], "resources": ["secrets"],
                                     "resourceNames": ["mine"], "verbs": ["create"]}]));
        assert!(!p.allows(&sa(), &secrets("create")));
    }

    #[test]
    fn resource_names_cannot_restrict_list_without_a_name_field_selector() {
        let p = in_tenant_a(json!([{"apiGroups": [""], "resources": ["secrets"],
                                     "resourceNames": ["mine"], "verbs": ["list", "watch"]}]));
        for verb in ["list", "watch"] {
            assert!(!p.allows(&sa(), &secrets(verb)), "{verb}");
            assert!(p.allows(&sa(), &secrets(verb).named("mine")), "{verb}");
            assert!(!p.allows(&sa(), &secrets(verb).named("theirs")), "{verb}");
        }
    }

    #[test]
    fn resource_names_cannot_restrict_deletecollection() {
        let p = in_tenant_a(json!([{"apiGroups": [""], "resources": ["secrets"],
                                     "resourceNames": ["mine"], "verbs": ["deletecollection"]}]));
        assert!(!p.allows(&sa(), &secrets("deletecollection")));
    }

    #[test]
    fn the_name_of_a_list_comes_from_a_metadata_name_field_selector() {
        assert_eq!(name_from_field_selector("metadata.name=a"), Some("a".into()));
        assert_eq!(
            name_from_field_selector("status.phase=Running,metadata.name==b"),
            Some("b".into())
        );
        assert_eq!(name_from_field_selector("metadata.name!=a"), None);
        assert_eq!(name_from_field_selector("metadata.namespace=a"), None);
        assert_eq!(name_from_field_selector(""), None);
    }

    #[test]
    fn a_role_binding_grants_in_its_namespace_only() {
        let p = in_tenant_a(json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]));
        assert!(!p.allows(
            &sa(),
            &Request::resource("list", "", "secrets").in_namespace("tenant-b")
        ));
        assert!(
            !p.allows(&sa(), &Request::resource("list", "", "secrets")),
            "not across all namespaces"
        );
    }

    #[test]
    fn a_role_binding_to_a_cluster_role_grants_its_rules_in_the_binding_namespace() {
        let p = Policy::from_values(
            &[],
            &[cluster_role(
                "c",
                json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
            )],
            &[binding(
                "RoleBinding",
                Some("tenant-a"),
                "ClusterRole",
                "c",
                sa_subject(),
            )],
            &[],
        );
        assert!(p.allows(&sa(), &secrets("get").named("s")));
        assert!(
            !p.allows(
                &sa(),
                &Request::resource("get", "", "secrets")
                    .in_namespace("tenant-b")
                    .named("s")
            )
        );
    }

    #[test]
    fn a_role_binding_to_a_role_of_another_namespace_grants_nothing() {
        let p = Policy::from_values(
            &[role(
                "tenant-b",
                "r",
                json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
            )],
            &[],
            &[binding("RoleBinding", Some("tenant-a"), "Role", "r", sa_subject())],
            &[],
        );
        assert!(!p.allows(&sa(), &secrets("get").named("s")));
    }

    #[test]
    fn a_cluster_role_binding_grants_everywhere_and_at_cluster_scope() {
        let p = Policy::from_values(
            &[],
            &[cluster_role(
                "c",
                json!([{"apiGroups": [""], "resources": ["secrets", "namespaces"], "verbs": ["list"]}]),
            )],
            &[],
            &[binding("ClusterRoleBinding", None, "ClusterRole", "c", sa_subject())],
        );
        assert!(p.allows(
            &sa(),
            &Request::resource("list", "", "secrets").in_namespace("tenant-b")
        ));
        assert!(p.allows(&sa(), &Request::resource("list", "", "secrets")));
        assert!(p.allows(&sa(), &Request::resource("list", "", "namespaces")));
    }

    #[test]
    fn subjects_match_by_service_account_user_and_group() {
        let rules = json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]);
        let with = |subjects: Value| {
            Policy::from_values(
                &[role("tenant-a", "r", rules.clone())],
                &[],
                &[binding("RoleBinding", Some("tenant-a"), "Role", "r", subjects)],
                &[],
            )
        };
        let get = secrets("get").named("s");
        assert!(with(json!([{"kind": "User", "name": "system:serviceaccount:tenant-a:runner"}])).allows(&sa(), &get));
        assert!(with(json!([{"kind": "Group", "name": "system:serviceaccounts:tenant-a"}])).allows(&sa(), &get));
        assert!(with(json!([{"kind": "ServiceAccount", "name": "runner"}])).allows(&sa(), &get));
        assert!(
            !with(json!([{"kind": "ServiceAccount", "name": "runner", "namespace": "tenant-b"}])).allows(&sa(), &get)
        );
        assert!(!with(json!([{"kind": "Group", "name": "system:serviceaccounts:tenant-b"}])).allows(&sa(), &get));
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_a_star_prefix() {
        let p = Policy::from_values(
            &[],
            &[cluster_role(
                "c",
                json!([{"nonResourceURLs": ["/version", "/apis/*"], "verbs": ["get"]}]),
            )],
            &[],
            &[binding("ClusterRoleBinding", None, "ClusterRole", "c", sa_subject())],
        );
        let get = |path: &str| Request::NonResource {
            verb: "get".into(),
            path: path.into(),
        };
        assert!(p.allows(&sa(), &get("/version")));
        assert!(p.allows(&sa(), &get("/apis/batch")));
        assert!(!p.allows(&sa(), &get("/version/x")));
        assert!(!p.allows(&sa(), &get("/healthz")));
        assert!(!p.allows(
            &sa(),
            &Request::NonResource {
                verb: "post".into(),
                path: "/version".into()
            }
        ));
    }

    #[test]
    fn non_resource_urls_are_granted_by_cluster_role_bindings_only() {
        let p = Policy::from_values(
            &[],
            &[cluster_role("c", json!([{"nonResourceURLs": ["*"], "verbs": ["get"]}]))],
            &[binding(
                "RoleBinding",
                Some("tenant-a"),
                "ClusterRole",
                "c",
                sa_subject(),
            )],
            &[],
        );
        let req = Request::NonResource {
            verb: "get".into(),
            path: "/version".into(),
        };
        assert!(!p.allows(&sa(), &req));
    }

    #[test]
    fn forbidden_messages_have_kubernetes_shape() {
        let u = sa();
        assert_eq!(
            forbidden_message(&u, &secrets("get").named("tfstate-default-b")),
            "secrets \"tfstate-default-b\" is forbidden: User \"system:serviceaccount:tenant-a:runner\" cannot get resource \"secrets\" in API group \"\" in the namespace \"tenant-a\""
        );
        assert_eq!(
            forbidden_message(&u, &Request::resource("list", "coordination.k8s.io", "leases")),
            "leases.coordination.k8s.io is forbidden: User \"system:serviceaccount:tenant-a:runner\" cannot list resource \"leases\" in API group \"coordination.k8s.io\" at the cluster scope"
        );
        assert_eq!(
            forbidden_message(
                &u,
                &Request::resource("patch", "batch", "jobs")
                    .in_namespace("n")
                    .named("j")
                    .subresource("status")
            ),
            "jobs.batch \"j\" is forbidden: User \"system:serviceaccount:tenant-a:runner\" cannot patch resource \"jobs/status\" in API group \"batch\" in the namespace \"n\""
        );
        assert_eq!(
            forbidden_message(
                &u,
                &Request::NonResource {
                    verb: "get".into(),
                    path: "/metrics".into()
                }
            ),
            "forbidden: User \"system:serviceaccount:tenant-a:runner\" cannot get path \"/metrics\""
        );
    }

    #[test]
    fn no_binding_means_no_access() {
        let p = Policy::default();
        assert!(!p.allows(&sa(), &secrets("get").named("s")));
    }

    const VERBS: [&str; 8] = [
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
    ];

    fn arb_request() -> impl Strategy<Value = Request> {
        (
            prop::sample::select(VERBS.to_vec()),
            prop::sample::select(vec!["", "batch", "coordination.k8s.io"]),
            prop::sample::select(vec!["secrets", "jobs", "leases"]),
            prop::option::of(prop::sample::select(vec!["status", "log"])),
            prop::option::of(prop::sample::select(vec!["tenant-a", "tenant-b"])),
            prop::option::of(prop::sample::select(vec!["mine", "theirs"])),
        )
            .prop_map(|(verb, group, resource, sub, ns, name)| Request::Resource {
                verb: verb.into(),
                group: group.into(),
                resource: resource.into(),
                subresource: sub.map(String::from),
                namespace: ns.map(String::from),
                name: if verb == "create" || verb == "deletecollection" {
                    None
                } else {
                    name.map(String::from)
                },
            })
    }

    fn arb_rule() -> impl Strategy<Value = Value> {
        (
            prop::collection::vec(prop::sample::select(VERBS.to_vec()), 1..4),
            prop::collection::vec(
                prop::sample::select(vec!["", "batch", "coordination.k8s.io", "*"]),
                1..3,
            ),
            prop::collection::vec(
                prop::sample::select(vec!["secrets", "jobs", "leases", "jobs/status", "*", "*/log"]),
                1..3,
            ),
            prop::option::of(prop::collection::vec(prop::sample::select(vec!["mine", "other"]), 1..2)),
        )
            .prop_map(|(verbs, groups, resources, names)| {
                let mut r = json!({"apiGroups": groups, "resources": resources, "verbs": verbs});
                if let Some(n) = names {
                    r["resourceNames"] = json!(n);
                }
                r
            })
    }

    proptest! {
        /// RBAC only adds: a policy with one more rule allows everything the smaller one did.
        #[test]
        fn adding_a_rule_never_takes_access_away(
            rules in prop::collection::vec(arb_rule(), 0..4),
            extra in arb_rule(),
            req in arb_request(),
        ) {
            let before = in_tenant_a(json!(rules));
            let mut more = rules.clone();
            more.push(extra);
            let after = in_tenant_a(json!(more));
            prop_assert!(!before.allows(&sa(), &req) || after.allows(&sa(), &req));
        }

        /// A grant through a RoleBinding in tenant-a never reaches another namespace or the
        /// cluster scope.
        #[test]
        fn a_namespaced_grant_never_reaches_another_namespace(
            rules in prop::collection::vec(arb_rule(), 0..4),
            req in arb_request(),
        ) {
            let p = in_tenant_a(json!(rules));
            if let Request::Resource { namespace, .. } = &req && namespace.as_deref() != Some("tenant-a") {
                prop_assert!(!p.allows(&sa(), &req));
            }
        }

        /// A rule with resourceNames never allows a request without a name (create,
        /// deletecollection, unfiltered list or watch).
        #[test]
        fn resource_names_never_allow_an_unnamed_request(
            rule in arb_rule(),
            req in arb_request(),
        ) {
            let named_rule = rule.get("resourceNames").is_some();
            let unnamed = matches!(&req, Request::Resource { name: None, .. });
            let p = in_tenant_a(json!([rule]));
            if named_rule && unnamed {
                prop_assert!(!p.allows(&sa(), &req));
            }
        }
    }
}

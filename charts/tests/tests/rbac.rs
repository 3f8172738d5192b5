//! The shape of the chart's RBAC: no wildcards, no shared runner account, the controller's rules
//! the same whether it watches one namespace or all. That the rules are enough, and what
//! they allow is used, is shown by running the controller under them in the simulator (the
//! scenario tests and the demo load `charts/tests/rendered/rbac.yaml`, which the first test here
//! keeps equal to what helm renders).

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use captf_chart_tests::features::{ALL_NAMESPACES, ONE_NAMESPACE};
use captf_chart_tests::{
    NAMESPACE, RENDERED_RBAC_VALUES, Rendered, helm_template, rbac_documents, rendered_rbac_path, strings,
};
use serde_json::Value;

type Grants = BTreeMap<(String, String), BTreeSet<String>>;

#[test]
fn rendered_rbac_fixture_is_what_helm_renders() {
    let want = rbac_documents(&helm_template(RENDERED_RBAC_VALUES).unwrap());
    let path = rendered_rbac_path();
    if std::env::var_os("CAPTF_BLESS").is_some() {
        let mut text = format!(
            "# Generated: the RBAC documents of `helm template captf charts/captf -n captf-system {}`.\n# The scenario tests, the demo and the soak run the controller under them in the simulator\n# (RoleBindings in the namespaces they use; no rights anywhere else).\n# Regenerate: CAPTF_BLESS=1 cargo test -p captf-chart-tests --test rbac\n",
            RENDERED_RBAC_VALUES.join(" ")
        );
        for d in &want {
            text.push_str("---\n");
            text.push_str(&serde_yaml_ng::to_string(d).unwrap());
        }
        std::fs::write(&path, text).unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let have = captf_chart_tests::parse_documents("rbac.yaml", &text).unwrap();
    assert!(
        have == want,
        "{} is stale: regenerate it with CAPTF_BLESS=1 cargo test -p captf-chart-tests --test rbac",
        path.display()
    );
}

fn from_rules(roles: &[&Value]) -> Grants {
    let mut g = Grants::new();
    for role in roles {
        for rule in role["rules"].as_array().unwrap() {
            assert!(rule.get("resourceNames").is_none() || rule["resourceNames"].is_array());
            let verbs = strings(&rule["verbs"]);
            assert!(!verbs.contains(&"*".to_string()), "no wildcard verbs: {rule}");
            for group in strings(&rule["apiGroups"]) {
                assert_ne!(group, "*", "no wildcard groups: {rule}");
                for resource in strings(&rule["resources"]) {
                    assert_ne!(resource, "*", "no wildcard resources: {rule}");
                    g.entry((group.clone(), resource))
                        .or_default()
                        .extend(verbs.iter().cloned());
                }
            }
        }
    }
    g
}

/// Every Role and ClusterRole bound to a ServiceAccount name.
fn roles_of<'a>(r: &'a Rendered, account: &str) -> Vec<&'a Value> {
    let mut roles = vec![];
    for binding in r
        .of_kind("ClusterRoleBinding")
        .into_iter()
        .chain(r.of_kind("RoleBinding"))
    {
        let bound = binding["subjects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["kind"] == "ServiceAccount" && s["name"] == account);
        if !bound {
            continue;
        }
        let kind = binding["roleRef"]["kind"].as_str().unwrap();
        let name = binding["roleRef"]["name"].as_str().unwrap();
        let role = r
            .of_kind(kind)
            .into_iter()
            .find(|role| {
                role["metadata"]["name"] == name
                    && (kind == "ClusterRole" || role["metadata"]["namespace"] == binding["metadata"]["namespace"])
            })
            .unwrap_or_else(|| panic!("{} binds a missing {kind} {name}", binding["metadata"]["name"]));
        roles.push(role);
    }
    roles
}

/// The controller's grants, whichever way the chart binds them.
fn controller_grants(r: &Rendered) -> Grants {
    from_rules(&roles_of(r, "captf-controller"))
}

#[test]
fn controller_rbac_for_one_namespace_is_the_same_rules_bound_there() {
    let all = controller_grants(&helm_template(ALL_NAMESPACES).unwrap());
    assert!(!all.is_empty());
    let r = helm_template(ONE_NAMESPACE).unwrap();
    let mut one = controller_grants(&r);
    // Leader election in the release namespace: a Role of its own.
    one.remove(&("coordination.k8s.io".to_string(), "leases".to_string()));
    let mut all_but_leases = all.clone();
    all_but_leases.remove(&("coordination.k8s.io".to_string(), "leases".to_string()));
    assert_eq!(one, all_but_leases);
    let r = helm_template(&["--set", "controller.watchNamespaces={captf-system}"]).unwrap();
    assert_eq!(controller_grants(&r), all);
    // The default watches the release namespace, the same way.
    assert_eq!(controller_grants(&helm_template(&[]).unwrap()), all);
    assert!(
        r.get("Role", "captf-controller-leader-election").is_none(),
        "the binding there covers leases"
    );
}

#[test]
fn the_chart_grants_runners_nothing_each_object_gets_its_own_account_from_the_controller() {
    for extra in [&[][..], &["--set", "runner.serviceAccount.name=platform-runner"][..]] {
        let r = helm_template(extra).unwrap();
        for kind in [
            "ServiceAccount",
            "Role",
            "ClusterRole",
            "RoleBinding",
            "ClusterRoleBinding",
        ] {
            for o in r.of_kind(kind) {
                assert_ne!(
                    o["metadata"]["labels"]["app.kubernetes.io/component"], "runner",
                    "{kind} {} renders runner rights",
                    o["metadata"]["name"]
                );
            }
        }
    }
    // What the controller needs to make each object's identity: its ServiceAccount, Role and
    // RoleBinding, and every right it grants in that Role (Kubernetes refuses a Role granting
    // more than its writer holds).
    let g = controller_grants(&helm_template(&[]).unwrap());
    let has = |group: &str, res: &str, verbs: &[&str]| {
        let held = g
            .get(&(group.to_string(), res.to_string()))
            .cloned()
            .unwrap_or_default();
        verbs.iter().all(|v| held.contains(*v))
    };
    assert!(has("", "serviceaccounts", &["create"]));
    assert!(has("rbac.authorization.k8s.io", "roles", &["create", "patch"]));
    assert!(has("rbac.authorization.k8s.io", "rolebindings", &["create"]));
    for rule in captf_shared::runner_identity::runner_rules("x-tc") {
        let group = rule.api_groups.unwrap()[0].clone();
        for res in rule.resources.unwrap() {
            let verbs: Vec<&str> = rule.verbs.iter().map(String::as_str).collect();
            assert!(
                has(&group, &res, &verbs),
                "the controller cannot grant {verbs:?} on {group}/{res}"
            );
        }
    }
}

#[test]
fn the_controller_account_lives_in_the_release_namespace() {
    let r = helm_template(&[]).unwrap();
    let sa = r.get("ServiceAccount", "captf-controller").unwrap();
    assert_eq!(sa["metadata"]["namespace"], NAMESPACE);
    let d = r.get("Deployment", "captf-controller").unwrap();
    assert_eq!(d["spec"]["template"]["spec"]["serviceAccountName"], "captf-controller");
}

//! The rendered RBAC rules are exactly the API calls the controller and the runner make
//! (`captf_controller::rbac`): every call covered, nothing more.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use captf_chart_tests::features::ONE_NAMESPACE;
use captf_chart_tests::{NAMESPACE, Rendered, helm_template, strings};
use captf_controller::rbac::{ApiCall, CONTROLLER_API_CALLS, RUNNER_API_CALLS};
use serde_json::Value;

type Grants = BTreeMap<(String, String), BTreeSet<String>>;

fn from_calls(calls: &[ApiCall]) -> Grants {
    let mut g = Grants::new();
    for c in calls {
        g.entry((c.group.to_string(), c.resource.to_string()))
            .or_default()
            .extend(c.verbs.iter().map(|v| v.to_string()));
    }
    g
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

fn diff(have: &Grants, want: &Grants) -> String {
    let mut out = beyond("missing", want, have);
    out.extend(beyond("extra", have, want));
    out.join("; ")
}

/// What `a` grants that `b` does not: `<label> (group, resource): [verbs]` per resource.
fn beyond(label: &str, a: &Grants, b: &Grants) -> Vec<String> {
    let none = BTreeSet::new();
    a.iter()
        .filter_map(|(k, verbs)| {
            let more: Vec<_> = verbs.difference(b.get(k).unwrap_or(&none)).cloned().collect();
            (!more.is_empty()).then(|| format!("{label} {k:?}: {more:?}"))
        })
        .collect()
}

fn assert_controller_rbac(r: &Rendered) {
    let have = from_rules(&roles_of(r, "captf-controller"));
    let want = from_calls(CONTROLLER_API_CALLS);
    assert_eq!(have, want, "{}", diff(&have, &want));
}

#[test]
fn controller_rbac_covers_every_api_call_it_makes_and_nothing_more() {
    assert_controller_rbac(&helm_template(&[]).unwrap());
}

#[test]
fn controller_rbac_for_one_namespace_is_the_same_list_bound_there() {
    let r = helm_template(ONE_NAMESPACE).unwrap();
    assert_controller_rbac(&r);
    let r = helm_template(&["--set", "controller.watchNamespace=captf-system"]).unwrap();
    assert_controller_rbac(&r);
    assert!(
        r.get("Role", "captf-controller-leader-election").is_none(),
        "the binding there covers leases"
    );
}

#[test]
fn runner_rbac_covers_its_state_secrets_and_lock_leases_and_nothing_more() {
    let r = helm_template(&["--set", "runner.namespaces={tenant-a,tenant-b}"]).unwrap();
    let roles = roles_of(&r, "captf-runner");
    assert_eq!(roles.len(), 2, "one binding per runner namespace");
    let have = from_rules(&roles);
    let want = from_calls(RUNNER_API_CALLS);
    assert_eq!(have, want, "{}", diff(&have, &want));
    let mut namespaces = BTreeSet::new();
    for sa in r
        .of_kind("ServiceAccount")
        .into_iter()
        .filter(|s| s["metadata"]["name"] == "captf-runner")
    {
        namespaces.insert(sa["metadata"]["namespace"].as_str().unwrap().to_string());
    }
    assert_eq!(
        namespaces,
        BTreeSet::from(["tenant-a".to_string(), "tenant-b".to_string()])
    );
    // Bound per namespace with RoleBindings only: never cluster-wide.
    for b in r.of_kind("ClusterRoleBinding") {
        assert_ne!(b["roleRef"]["name"], "captf-runner", "runner bound cluster-wide");
    }
    for b in r
        .of_kind("RoleBinding")
        .into_iter()
        .filter(|b| b["roleRef"]["name"] == "captf-runner")
    {
        assert_eq!(b["subjects"][0]["namespace"], b["metadata"]["namespace"]);
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

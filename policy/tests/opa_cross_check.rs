//! The crate's decisions against the real OPA's: every policy of a corpus is evaluated on every
//! plan of a corpus both by `captf-policy` and by `opa eval` (OPA 1.22.4, built from
//! `realparts/opa` by `scripts/setup-tools.sh`), and the two decisions must be the same, finding
//! for finding.
//!
//! The plans are made here, each run, by the pinned OpenTofu with the test provider
//! (`captf_testprovider::harness`: the provider through a filesystem mirror, a world in a
//! temporary folder): a plan of creates, then, from that applied state, a plan of updates,
//! replacements, a delete and a create, and a plan that destroys everything. Making them takes
//! seconds, and a plan OpenTofu makes now cannot go stale the way a committed fixture could when
//! the pinned OpenTofu moves.
//!
//! `opa`, OpenTofu and the provider binary come from where the other real-binary tests find
//! them; a missing one skips this test outside CI and fails it under `CI`
//! (`captf_testsupport::cannot_run`).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use captf_policy::{Decision, Evaluator, Finding, Policy};
use captf_testprovider::harness::{DEFAULT_TOFU, HarnessError, Sandbox};
use serde_json::Value;

const PROVIDER: &str = r#"terraform {
  required_providers {
    captftest = { source = "captf.io/test/captftest" }
  }
}
"#;

/// The first configuration: planned from nothing (all creates), then applied.
const FIRST: &str = r##"
resource "captftest_thing" "ssh" {
  name    = "ssh"
  content = "ingress tcp/22 from 0.0.0.0/0"
}

resource "captftest_thing" "api" {
  name    = "api"
  content = "ingress tcp/6443 from 10.0.0.0/8"
}

resource "captftest_thing" "web" {
  name    = "prod-web"
  content = "ingress tcp/443 from 0.0.0.0/0"
}

resource "captftest_thing" "db" {
  name    = "prod-db"
  content = "ingress tcp/5432 from 10.1.0.0/16"
}

resource "captftest_thing" "legacy" {
  name    = "legacy"
  content = "allow everything"
}

resource "captftest_machine" "worker" {
  name      = "worker-0"
  user_data = "#cloud-config\npassword: hunter2\n"
}
"##;

/// The second configuration, planned against the first's state: `ssh` and `api` update in place
/// (`api` opens to the world), `web` and `worker` are replaced (a new name, new user data), `db`
/// is deleted, `cache` is created, `legacy` stays.
const SECOND: &str = r##"
resource "captftest_thing" "ssh" {
  name    = "ssh"
  content = "ingress tcp/22 from 192.168.0.0/16"
}

resource "captftest_thing" "api" {
  name    = "api"
  content = "ingress tcp/6443 from 0.0.0.0/0"
}

resource "captftest_thing" "web" {
  name    = "prod-web-2"
  content = "ingress tcp/443 from 0.0.0.0/0"
}

resource "captftest_thing" "legacy" {
  name    = "legacy"
  content = "allow everything"
}

resource "captftest_thing" "cache" {
  name    = "cache"
  content = "ingress tcp/6379 from ::/0"
}

resource "captftest_machine" "worker" {
  name      = "worker-0"
  user_data = "#cloud-config\nssh_authorized_keys: [ssh-ed25519 AAAA]\n"
}
"##;

/// The policies, each in the form a platform team would write it for conftest.
const POLICIES: &[(&str, &str)] = &[
    (
        "open-ingress",
        r#"package main

# A thing created or updated to let the whole internet in.
deny contains msg if {
  some rc in input.resource_changes
  rc.type == "captftest_thing"
  some action in rc.change.actions
  action in {"create", "update"}
  contains(rc.change.after.content, "0.0.0.0/0")
  msg := sprintf("%s opens %q to the world", [rc.address, rc.change.after.content])
}
"#,
    ),
    (
        "protect-prod",
        r#"package main

violation contains {"msg": msg, "resource": rc.address, "name": rc.change.before.name} if {
  some rc in input.resource_changes
  "delete" in rc.change.actions
  startswith(rc.change.before.name, "prod-")
  msg := sprintf("%s would delete the production thing %s", [rc.address, rc.change.before.name])
}
"#,
    ),
    (
        "replacements",
        r#"package main

replaced(actions) if actions == ["delete", "create"]
replaced(actions) if actions == ["create", "delete"]

warn contains msg if {
  some rc in input.resource_changes
  replaced(rc.change.actions)
  msg := sprintf("%s is replaced (%v)", [rc.address, rc.change.actions])
}
"#,
    ),
    (
        "change-budget",
        r#"package main

changes := [rc | some rc in input.resource_changes; rc.change.actions != ["no-op"]]

deny_too_many_changes contains msg if {
  count(changes) > 4
  msg := sprintf("%d resources change in one plan; at most 4 may", [count(changes)])
}

warn_any_delete contains msg if {
  some rc in changes
  "delete" in rc.change.actions
  msg := sprintf("%s is deleted", [rc.address])
}
"#,
    ),
    (
        "content-format",
        r#"package main.format

# Content is empty or one ingress rule: "ingress <proto>/<port> from <cidr>".
deny contains msg if {
  some rc in input.resource_changes
  rc.type == "captftest_thing"
  content := object.get(rc.change, ["after", "content"], "")
  content != ""
  not regex.match(`^ingress (tcp|udp)/[0-9]+ from [0-9a-f.:]+/[0-9]+$`, content)
  msg := sprintf("%s: %q is not an ingress rule", [rc.address, content])
}
"#,
    ),
    (
        "user-data-secrets",
        r#"package main

warn contains {"msg": "user data holds a password", "address": rc.address} if {
  some rc in input.resource_changes
  rc.type == "captftest_machine"
  user_data := object.get(rc.change.after, "user_data", "")
  contains(lower(user_data), "password")
}
"#,
    ),
    (
        "world-cidrs",
        r#"package main

world_cidr(s) if contains(s, "0.0.0.0/0")
world_cidr(s) if contains(s, "::/0")

violation contains {"msg": msg, "address": rc.address, "details": {"content": content}} if {
  some rc in input.resource_changes
  content := rc.change.after.content
  world_cidr(content)
  not startswith(rc.change.after.name, "prod-")
  msg := sprintf("%s is open to the world outside production", [rc.change.after.name])
}

warn contains sprintf("%s has no content", [rc.address]) if {
  some rc in input.resource_changes
  rc.change.after.content == ""
}
"#,
    ),
    (
        "allows-everything",
        r#"package main

deny contains msg if {
  some rc in input.resource_changes
  rc.type == "aws_instance"
  msg := sprintf("%s: no AWS here", [rc.address])
}
"#,
    ),
    (
        "summary",
        r#"package main

count_of(action) := count([rc | some rc in input.resource_changes; action in rc.change.actions])

warn contains msg if {
  msg := sprintf("plan: %d to create, %d to update, %d to delete", [count_of("create"), count_of("update"), count_of("delete")])
}
"#,
    ),
    (
        "names",
        r#"package main

every_thing_is_ours if {
  every rc in input.resource_changes {
    startswith(rc.type, "captftest_")
  }
}

deny contains "a change to a resource of another provider" if not every_thing_is_ours

warn contains msg if {
  created := [rc.change.after.name | some rc in input.resource_changes; rc.change.actions == ["create"]]
  count(created) > 0
  msg := concat(", ", ["creates", concat(" ", sort(created))])
}
"#,
    ),
    (
        "delete-share",
        r#"package main

share := (100 * count([rc | some rc in input.resource_changes; "delete" in rc.change.actions])) / count(input.resource_changes)

warn contains msg if {
  share > 0
  msg := sprintf("%v%% of the resources are deleted", [share])
}

# `%v`, not `%.1f`: on a share that is a whole number (100), OPA's `%.1f` prints Go's
# "%!f(int64=100)" where regorus prints 100 (docs/policy.md, "Checked against the real OPA").
deny contains msg if {
  share > 50
  msg := sprintf("%v%% of the resources are deleted; at most half may be", [share])
}
"#,
    ),
    (
        "planned-machines",
        r#"package main.machines

violation contains {"msg": msg, "address": r.address} if {
  some r in input.planned_values.root_module.resources
  r.type == "captftest_machine"
  not endswith(r.values.name, "-0")
  msg := sprintf("machine %s: only the first worker may be planned", [r.values.name])
}

warn contains msg if {
  some r in input.planned_values.root_module.resources
  r.type == "captftest_machine"
  msg := sprintf("machine %s (%s) is in the plan", [r.values.name, r.mode])
}
"#,
    ),
];

/// `opa`, or why it cannot be had.
fn opa() -> Result<PathBuf, String> {
    captf_testsupport::installed_tool("opa")
}

/// The test provider binary, built into this test's target folder when it is not there yet:
/// `cargo test --workspace` builds it, `cargo test -p captf-policy` does not.
fn provider() -> Result<(), String> {
    let path = match captf_testprovider::harness::provider() {
        Ok(_) => return Ok(()),
        Err(HarnessError::NoWorkspaceBinary { path, .. }) => path,
        Err(e) => return Err(e.to_string()),
    };
    let profile_dir = path.parent().unwrap_or(Path::new("."));
    let target_dir = profile_dir.parent().unwrap_or(Path::new("."));
    let mut cmd = Command::new(env!("CARGO"));
    captf_testsupport::without_test_cargo_env(&mut cmd);
    cmd.args([
        "build",
        "--quiet",
        "-p",
        "captf-testprovider",
        "--bin",
        "terraform-provider-captftest",
    ])
    .env("CARGO_TARGET_DIR", target_dir)
    .current_dir(env!("CARGO_MANIFEST_DIR"));
    if profile_dir.file_name().is_some_and(|p| p == "release") {
        cmd.arg("--release");
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cargo build of the test provider: {e}"))?;
    if !out.status.success() || !path.is_file() {
        return Err(format!(
            "the test provider {} is not built and `cargo build -p captf-testprovider` failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// Runs OpenTofu in `dir` with the sandbox's environment; its stdout.
fn tofu(sb: &Sandbox, dir: &Path, args: &[&str]) -> String {
    let out = Command::new(&sb.terraform)
        .args(args)
        .envs(sb.env())
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tofu {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The three plans, as `tofu show -json` prints them: creates, changes, destroy.
fn plans(sb: &Sandbox) -> Vec<(&'static str, String)> {
    let dir = sb.module("corpus", &format!("{PROVIDER}{FIRST}")).unwrap();
    tofu(sb, &dir, &["init", "-input=false", "-no-color"]);
    let plan = |file: &str, extra: &[&str]| {
        let mut args = vec!["plan", "-input=false", "-no-color", "-out", file];
        args.extend_from_slice(extra);
        tofu(sb, &dir, &args);
        tofu(sb, &dir, &["show", "-json", file])
    };
    let create = plan("create.tfplan", &[]);
    tofu(sb, &dir, &["apply", "-input=false", "-no-color", "create.tfplan"]);
    std::fs::write(dir.join("main.tf"), format!("{PROVIDER}{SECOND}")).unwrap();
    let change = plan("change.tfplan", &[]);
    let destroy = plan("destroy.tfplan", &["-destroy"]);
    vec![("create", create), ("change", change), ("destroy", destroy)]
}

/// Every action list of a plan's resource changes.
fn actions(plan: &str) -> BTreeSet<Vec<String>> {
    let doc: Value = serde_json::from_str(plan).unwrap();
    doc["resource_changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|rc| {
            rc["change"]["actions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

/// The decision in `opa eval`'s value of `data.main`, read on its own terms: every key named as
/// conftest names its rules, at any depth (the sub-packages), is a rule; every other object is a
/// sub-package or a helper's value and is looked into.
fn opa_decision(document: &Value) -> Decision {
    fn is_rule(name: &str, kind: &str) -> bool {
        name == kind
            || name
                .strip_prefix(kind)
                .and_then(|r| r.strip_prefix('_'))
                .is_some_and(|r| {
                    r.split('_')
                        .all(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric()))
                })
    }
    fn walk(path: &str, doc: &Value, d: &mut Decision) {
        let Some(fields) = doc.as_object() else { return };
        for (name, value) in fields {
            let rule = format!("{path}.{name}");
            let deny = is_rule(name, "deny") || is_rule(name, "violation");
            let warn = is_rule(name, "warn");
            if !deny && !warn {
                walk(&rule, value, d);
                continue;
            }
            for item in value
                .as_array()
                .unwrap_or_else(|| panic!("{rule} is not a set: {value}"))
            {
                let finding = match item {
                    Value::String(s) => Finding {
                        rule: rule.clone(),
                        message: s.clone(),
                        address: None,
                    },
                    Value::Object(o) => Finding {
                        rule: rule.clone(),
                        message: o["msg"].as_str().unwrap().to_string(),
                        address: o
                            .get("resource")
                            .and_then(Value::as_str)
                            .or_else(|| o.get("address").and_then(Value::as_str))
                            .map(str::to_string),
                    },
                    other => panic!("{rule} yielded {other}"),
                };
                if deny {
                    d.denials.push(finding);
                } else {
                    d.warnings.push(finding);
                }
            }
        }
    }
    let mut d = Decision::default();
    walk("data.main", document, &mut d);
    d.denials.sort();
    d.warnings.sort();
    d
}

/// What `opa eval` decides for one policy and one plan.
fn opa_eval(opa: &Path, dir: &Path, name: &str, policy: &str, plan_file: &Path) -> Decision {
    let policy_file = dir.join(format!("{name}.rego"));
    std::fs::write(&policy_file, policy).unwrap();
    let out = Command::new(opa)
        .args(["eval", "--format", "json", "--data"])
        .arg(&policy_file)
        .arg("--input")
        .arg(plan_file)
        .arg("data.main")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "opa eval of {name} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    // No `result` at all: `data.main` is undefined (no rule has a value).
    let document = &result["result"][0]["expressions"][0]["value"];
    opa_decision(document)
}

#[test]
fn captf_policy_decides_as_opa_on_real_opentofu_plans() {
    let opa = match opa() {
        Ok(opa) => opa,
        Err(why) => {
            captf_testsupport::cannot_run(format!("{why}; the cross-check needs the real OPA"));
            return;
        }
    };
    if let Err(why) = DEFAULT_TOFU.path() {
        captf_testsupport::cannot_run(format!("{why}; the cross-check's plans come from OpenTofu"));
        return;
    }
    if let Err(why) = provider() {
        captf_testsupport::cannot_run(why);
        return;
    }
    let sb = Sandbox::with(DEFAULT_TOFU).unwrap();
    let plans = plans(&sb);

    // The plans cover what a policy must see: creates, updates, replacements and deletes.
    let all: BTreeSet<Vec<String>> = plans.iter().flat_map(|(_, p)| actions(p)).collect();
    for expected in [
        vec!["create"],
        vec!["update"],
        vec!["delete"],
        vec!["delete", "create"],
        vec!["no-op"],
    ] {
        let expected: Vec<String> = expected.into_iter().map(str::to_string).collect();
        assert!(all.contains(&expected), "no plan has a change {expected:?}: {all:?}");
    }

    let work = tempfile::tempdir().unwrap();
    let mut pairs = 0;
    let mut blocked = 0;
    let mut warned = 0;
    let mut mismatches = vec![];
    for (plan_name, plan) in &plans {
        let plan_file = work.path().join(format!("{plan_name}.json"));
        std::fs::write(&plan_file, plan).unwrap();
        for (policy_name, source) in POLICIES {
            let ours = Evaluator::new(&[Policy::new(*policy_name, *source)])
                .and_then(|e| e.evaluate(plan))
                .unwrap_or_else(|e| panic!("{policy_name} on the {plan_name} plan: {e}"));
            let theirs = opa_eval(&opa, work.path(), policy_name, source, &plan_file);
            pairs += 1;
            blocked += usize::from(ours.blocks());
            warned += usize::from(!ours.warnings.is_empty());
            if ours != theirs {
                mismatches.push(format!(
                    "{policy_name} on the {plan_name} plan:\n  captf-policy: {ours:#?}\n  opa:          {theirs:#?}"
                ));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {pairs} decisions differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    assert!(pairs >= 30, "{pairs} pairs");
    // A corpus where nothing fires would agree trivially.
    assert!(blocked >= 5 && pairs - blocked >= 5, "{blocked} of {pairs} pairs block");
    assert!(warned >= 5, "{warned} of {pairs} pairs warn");
    eprintln!("{pairs} policy and plan pairs: the same decisions ({blocked} block, {warned} warn)");
}

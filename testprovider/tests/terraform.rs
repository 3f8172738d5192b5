//! The test provider under the pinned real Terraform, with the local backend: what the runner's
//! real-Terraform tests rely on.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};

use captf_testprovider::harness::{Sandbox, THING_MODULE};
use captf_testprovider::world::{Thing, World};

fn tf(sb: &Sandbox, dir: &Path, args: &[&str]) -> Output {
    let out = Command::new(&sb.terraform)
        .args(args)
        .current_dir(dir)
        .envs(sb.env())
        .output()
        .unwrap();
    eprintln!(
        "terraform {args:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn init(sb: &Sandbox) -> std::path::PathBuf {
    let module = sb.module("thing", THING_MODULE).unwrap();
    let work = sb.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let from = format!("-from-module={}", module.display());
    assert!(
        tf(sb, &work, &["init", "-input=false", "-no-color", &from])
            .status
            .success()
    );
    work
}

#[test]
fn terraform_installs_the_provider_from_the_mirror_and_applies_a_thing() {
    let sb = Sandbox::new().unwrap();
    let work = init(&sb);
    let out = tf(
        &sb,
        &work,
        &[
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
            "-var",
            "name=a",
            "-var",
            "content=one",
        ],
    );
    assert!(out.status.success());
    assert_eq!(
        sb.thing("a"),
        Some(Thing {
            name: "a".into(),
            content: "one".into()
        })
    );
    let out = tf(&sb, &work, &["output", "-json", "-no-color"]);
    let outputs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outputs["endpoint"]["value"], "thing-a.example:6443");
    assert_eq!(outputs["secret"]["sensitive"], true);
}

#[test]
fn a_world_edit_is_drift_and_an_unchanged_world_is_not() {
    let sb = Sandbox::new().unwrap();
    let work = init(&sb);
    let vars = ["-var", "name=a", "-var", "content=one"];
    let apply = [&["apply", "-auto-approve", "-input=false", "-no-color"][..], &vars[..]].concat();
    assert!(tf(&sb, &work, &apply).status.success());
    let plan = [
        &["plan", "-detailed-exitcode", "-input=false", "-no-color"][..],
        &vars[..],
    ]
    .concat();
    assert_eq!(tf(&sb, &work, &plan).status.code(), Some(0), "no change: no drift");
    World::new(&sb.world)
        .write(&Thing {
            name: "a".into(),
            content: "edited behind terraform's back".into(),
        })
        .unwrap();
    let out = tf(&sb, &work, &plan);
    assert_eq!(out.status.code(), Some(2), "an edited thing is drift");
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 to change"));
}

#[test]
fn a_new_name_replaces_the_thing_and_destroy_removes_it() {
    let sb = Sandbox::new().unwrap();
    let work = init(&sb);
    assert!(
        tf(
            &sb,
            &work,
            &["apply", "-auto-approve", "-input=false", "-no-color", "-var", "name=a"]
        )
        .status
        .success()
    );
    let out = tf(&sb, &work, &["plan", "-input=false", "-no-color", "-var", "name=b"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("must be replaced") && text.contains("1 to destroy"),
        "{text}"
    );
    assert!(
        tf(
            &sb,
            &work,
            &["apply", "-auto-approve", "-input=false", "-no-color", "-var", "name=b"]
        )
        .status
        .success()
    );
    assert_eq!(sb.thing("a"), None);
    assert!(sb.thing("b").is_some());
    assert!(
        tf(
            &sb,
            &work,
            &[
                "destroy",
                "-auto-approve",
                "-input=false",
                "-no-color",
                "-var",
                "name=b"
            ]
        )
        .status
        .success()
    );
    assert_eq!(sb.thing("b"), None);
}

/// A module that boots one machine from its user data, as a machine module of a cluster does.
const MACHINE_MODULE: &str = r#"terraform {
  required_providers {
    captftest = { source = "captf.io/test/captftest" }
  }
}

variable "name" {
  type = string
}

variable "user_data" {
  type      = string
  sensitive = true
}

resource "captftest_machine" "vm" {
  name      = var.name
  user_data = var.user_data
}

output "provider_id" {
  value = captftest_machine.vm.provider_id
}
"#;

#[test]
fn a_machine_is_a_record_the_hypervisor_boots_new_user_data_replaces_it_and_destroy_removes_it() {
    let sb = Sandbox::new().unwrap();
    let module = sb.module("machine", MACHINE_MODULE).unwrap();
    let work = sb.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let from = format!("-from-module={}", module.display());
    assert!(
        tf(&sb, &work, &["init", "-input=false", "-no-color", &from])
            .status
            .success()
    );
    let world = World::new(&sb.world);
    let vars = |user_data: &str| {
        [
            "-var".to_string(),
            "name=m-1".into(),
            "-var".into(),
            format!("user_data={user_data}"),
        ]
    };
    let run = |cmd: &[&str], user_data: &str| {
        let args: Vec<String> = cmd.iter().map(|s| s.to_string()).chain(vars(user_data)).collect();
        tf(&sb, &work, &args.iter().map(String::as_str).collect::<Vec<_>>())
    };

    assert!(
        run(&["apply", "-auto-approve", "-input=false", "-no-color"], "boot-one")
            .status
            .success()
    );
    let m = world.read_machine("m-1").unwrap().unwrap();
    assert_eq!(m.user_data, "boot-one");
    assert_eq!(m.provider_id, "captftest:///machine-m-1");
    let out = tf(&sb, &work, &["output", "-json", "-no-color"]);
    let outputs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outputs["provider_id"]["value"], "captftest:///machine-m-1");

    let out = run(&["plan", "-input=false", "-no-color"], "boot-two");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("must be replaced") && text.contains("1 to destroy"),
        "{text}"
    );
    assert!(
        !text.contains("boot-one") && !text.contains("boot-two"),
        "user data shown: {text}"
    );
    assert!(
        run(&["apply", "-auto-approve", "-input=false", "-no-color"], "boot-two")
            .status
            .success()
    );
    assert_eq!(world.read_machine("m-1").unwrap().unwrap().user_data, "boot-two");

    assert!(
        run(&["destroy", "-auto-approve", "-input=false", "-no-color"], "boot-two")
            .status
            .success()
    );
    assert_eq!(world.read_machine("m-1").unwrap(), None);
}

//! The runner's environment table in `docs/runner.md` is its one description: it names every
//! variable of `captf_shared::protocol::env` exactly once, nothing else, and the defaults it
//! states are the ones the runner applies.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;

use captf_runner::config;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Every `CAPTF_*` name the protocol declares (`pub const X: &str = "CAPTF_..."` in its `env`
/// module), the prefix itself left out.
fn declared() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("shared/src/protocol.rs")).unwrap();
    let module = text.split("pub mod env {").nth(1).unwrap();
    let module = module.split("\n}\n").next().unwrap();
    let mut names: Vec<String> = module
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .filter_map(|l| l.split('"').nth(1))
        .filter(|v| v.starts_with("CAPTF_") && *v != "CAPTF_")
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

/// The rows of the table under "## In: the environment": each variable named in its first
/// cell, with the row's meaning.
fn documented() -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(root().join("docs/runner.md")).unwrap();
    let section = text.split("## In: the environment").nth(1).unwrap();
    let section = section.split("\n## ").next().unwrap();
    let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `CAPTF_")) {
        let mut cells = line.split('|').skip(1);
        let names = cells.next().unwrap();
        let meaning = cells.next().unwrap_or_default().trim().to_string();
        for name in names.split('`').filter(|n| n.starts_with("CAPTF_")) {
            rows.entry(name.to_string()).or_default().push(meaning.clone());
        }
    }
    rows
}

#[test]
fn the_environment_table_names_every_variable_of_the_protocol_once_and_nothing_else() {
    let declared = declared();
    assert!(
        declared.len() > 15,
        "the protocol's variables were not found: {declared:?}"
    );
    let documented = documented();
    let twice: Vec<_> = documented.iter().filter(|(_, m)| m.len() > 1).map(|(n, _)| n).collect();
    assert!(twice.is_empty(), "named more than once in docs/runner.md: {twice:?}");
    let names: Vec<String> = documented.keys().cloned().collect();
    assert_eq!(names, declared, "docs/runner.md's table against shared/src/protocol.rs");
}

#[test]
fn the_defaults_the_table_states_are_the_runners() {
    let documented = documented();
    let meaning = |name: &str| {
        documented
            .get(name)
            .and_then(|m| m.first())
            .cloned()
            .unwrap_or_default()
    };
    let lock = meaning("CAPTF_LOCK_TIMEOUT");
    assert!(
        lock.contains(&format!("Unset (a run by hand): `{}`", config::default_lock_timeout())),
        "{lock}"
    );
    let binary = meaning("CAPTF_TF_BINARY");
    assert!(
        binary.contains(&format!("`{}` (default)", config::DEFAULT_TF_BINARY)),
        "{binary}"
    );
    let log = meaning("CAPTF_WORK_DIR");
    assert!(log.contains(&format!("`{}`", config::DEFAULT_TERMINATION_LOG)), "{log}");
}

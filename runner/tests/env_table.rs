//! The table under "In: the environment" in `docs/runner.md` is the one description of the
//! variables the runner reads. These tests hold it to the code:
//!
//! - its rows name every variable [`Config::from_lookup`] reads, each once, and nothing else; and
//!   those are the variables `captf_shared::protocol::env` declares;
//! - a row says "required" exactly when the runner fails without the variable;
//! - a row's default (the backticked value its "when unset" cell starts with) is
//!   [`config::default_value`], and the runner given that value does what it does without one;
//! - an empty value counts as unset, as the text under the table says;
//! - a variable the controller may leave unset is in `env::OPTIONAL`, so that `spec.jobs.envFrom`
//!   cannot supply it.
#![allow(clippy::unwrap_used)]

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use captf_runner::config::{self, Config, ConfigError};
use captf_shared::protocol::env;

const HEADING: &str = "## In: the environment";

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What a row's "when unset" cell says.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Unset {
    /// `required`: the run fails without the variable.
    Required,
    /// Starts with a backticked value: the value the runner takes.
    Value(String),
    /// Anything else: what the runner does without it, no value in its place.
    Nothing,
}

#[derive(Clone, Debug)]
struct Row {
    /// 1-based line in docs/runner.md.
    line: usize,
    name: String,
    controller: String,
    unset: Unset,
}

fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_start_matches('|')
        .trim_end_matches('|')
        .replace("\\|", "\u{0}")
        .split('|')
        .map(|c| c.trim().replace('\u{0}', "|"))
        .collect()
}

/// The table's rows, in order. Panics naming the line when a row is not one variable.
fn table() -> Vec<Row> {
    let doc = read("docs/runner.md");
    let lines: Vec<&str> = doc.lines().collect();
    let heading = lines
        .iter()
        .position(|l| l.trim() == HEADING)
        .unwrap_or_else(|| panic!("docs/runner.md has no {HEADING:?}"));
    let start = heading
        + lines[heading..]
            .iter()
            .position(|l| l.starts_with('|'))
            .unwrap_or_else(|| panic!("docs/runner.md: no table under {HEADING:?}"));
    let header = cells(lines[start]);
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("docs/runner.md:{}: no column {name:?} in {header:?}", start + 1))
    };
    let (variable, controller, unset) = (
        column("variable"),
        column("set by the controller"),
        column("when unset"),
    );
    lines[start + 2..]
        .iter()
        .enumerate()
        .take_while(|(_, l)| l.starts_with('|'))
        .map(|(i, l)| {
            let line = start + 3 + i;
            let c = cells(l);
            assert_eq!(
                c.len(),
                header.len(),
                "docs/runner.md:{line}: {} cells, the header has {}",
                c.len(),
                header.len()
            );
            let name = c[variable]
                .strip_prefix('`')
                .and_then(|n| n.strip_suffix('`'))
                .filter(|n| !n.contains('`') && !n.contains(','))
                .unwrap_or_else(|| {
                    panic!(
                        "docs/runner.md:{line}: the first cell must be one `CAPTF_...` name, got {:?}",
                        c[variable]
                    )
                });
            let when = &c[unset];
            let unset = if when.starts_with("required") {
                Unset::Required
            } else if let Some(rest) = when.strip_prefix('`') {
                Unset::Value(rest.split('`').next().unwrap_or_default().to_string())
            } else {
                Unset::Nothing
            };
            Row {
                line,
                name: name.to_string(),
                controller: c[controller].clone(),
                unset,
            }
        })
        .collect()
}

/// A value for every variable the runner reads, none of them its default.
fn full() -> BTreeMap<String, String> {
    [
        (env::OP, "drift"),
        (env::STATE_SUFFIX, "prod-eu-tc"),
        (env::NAMESPACE, "team-a"),
        (env::LOCK_TIMEOUT, "77s"),
        (env::FORCE_UNLOCK_ID, "0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55"),
        (env::APPROVED_PLAN, "abc123"),
        (env::GUARD, "Allow"),
        (env::INPUTS_DIR, "/captf/inputs"),
        (env::TF_BINARY, "terraform"),
        (env::WORK_DIR, "/work"),
        (env::TERMINATION_LOG, "/tmp/termination-log"),
        (env::OWNER_UID, "uid-1"),
        (env::SENSITIVE_VARIABLES, "password,token"),
        (env::SENSITIVE_ENV, "MY_TOKEN"),
        (env::MODULE_CREDENTIALS_DIR, "/captf/module-credentials"),
        (env::STATE_ENCRYPTION_DIR, "/captf/state-encryption"),
        (env::OUTPUTS_FILE, "/tmp/outputs.json"),
        (env::KEEP_WORK_DIR, "true"),
        ("MY_TOKEN", "s3cr3t-value"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn parse(vars: &BTreeMap<String, String>) -> Result<Config, ConfigError> {
    Config::from_lookup(&|name: &str| vars.get(name).cloned())
}

/// Every `CAPTF_` name the runner's configuration looks up, from the full environment.
fn read_by_the_runner() -> BTreeSet<String> {
    let vars = full();
    let asked = RefCell::new(BTreeSet::new());
    let lookup = |name: &str| {
        asked.borrow_mut().insert(name.to_string());
        vars.get(name).cloned()
    };
    Config::from_lookup(&lookup).unwrap_or_else(|e| panic!("the tests' full environment is refused: {e}"));
    config::termination_log(&lookup);
    asked
        .into_inner()
        .into_iter()
        .filter(|n| n.starts_with(env::PREFIX))
        .collect()
}

/// The names `shared/src/protocol.rs` declares in its `env` module (`pub const X: &str =
/// "CAPTF_..."`), the prefix itself left out.
fn declared() -> BTreeSet<String> {
    let text = read("shared/src/protocol.rs");
    let module = text
        .split("pub mod env {")
        .nth(1)
        .and_then(|m| m.split("\n}\n").next())
        .unwrap_or_else(|| panic!("shared/src/protocol.rs has no `pub mod env {{ ... }}`"));
    module
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .filter(|l| l.contains(": &str"))
        .filter_map(|l| l.split('"').nth(1))
        .filter(|v| *v != env::PREFIX)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_table_names_every_variable_the_runner_reads_once_and_no_other() {
    let read = read_by_the_runner();
    assert!(read.len() >= 4, "the runner read almost nothing: {read:?}");
    let declared = declared();
    let undeclared: Vec<&String> = read.difference(&declared).collect();
    let unread: Vec<&String> = declared.difference(&read).collect();
    assert!(
        undeclared.is_empty() && unread.is_empty(),
        "Config::from_lookup reads {undeclared:?}, which shared/src/protocol.rs's env module does not declare, \
         and does not read {unread:?}, which it declares"
    );
    let rows = table();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for row in &rows {
        if let Some(first) = seen.insert(&row.name, row.line) {
            panic!(
                "docs/runner.md:{}: {} has a row already, at line {first}",
                row.line, row.name
            );
        }
        assert!(
            read.contains(&row.name),
            "docs/runner.md:{}: the runner does not read {}",
            row.line,
            row.name
        );
    }
    let missing: Vec<&String> = read.iter().filter(|n| !seen.contains_key(n.as_str())).collect();
    assert!(missing.is_empty(), "docs/runner.md has no row for {missing:?}");
}

#[test]
fn a_row_says_required_exactly_when_the_runner_fails_without_the_variable() {
    for row in table() {
        let mut vars = full();
        vars.remove(&row.name);
        let required = match parse(&vars) {
            Ok(_) => false,
            Err(ConfigError::Missing(name)) if name == row.name => true,
            Err(e) => panic!("without {}: {e}", row.name),
        };
        assert_eq!(
            row.unset == Unset::Required,
            required,
            "docs/runner.md:{}: {} is {}required in the runner, the table says {:?}",
            row.line,
            row.name,
            if required { "" } else { "not " },
            row.unset
        );
        assert!(
            !required || !env::OPTIONAL.contains(&row.name.as_str()),
            "{} is required, yet env::OPTIONAL says the controller may leave it unset",
            row.name
        );
    }
}

#[test]
fn each_default_in_the_table_is_the_one_the_runner_applies() {
    let rows = table();
    assert!(
        rows.iter().any(|r| matches!(r.unset, Unset::Value(_))),
        "no row states a default"
    );
    for row in rows {
        let code = config::default_value(&row.name);
        let documented = match &row.unset {
            Unset::Value(v) => Some(v.clone()),
            Unset::Required | Unset::Nothing => None,
        };
        assert_eq!(
            documented, code,
            "docs/runner.md:{}: the default of {} (the table against config::default_value)",
            row.line, row.name
        );
        // And the runner really takes it: the value stated gives what no value gives.
        if let Some(value) = code {
            let mut unset = full();
            unset.remove(&row.name);
            let mut given = unset.clone();
            given.insert(row.name.clone(), value.clone());
            assert_eq!(
                parse(&given),
                parse(&unset),
                "{}={value:?} is not what the runner does with {} unset",
                row.name,
                row.name
            );
        }
    }
}

#[test]
fn an_empty_or_blank_value_counts_as_unset() {
    for row in table() {
        let mut unset = full();
        unset.remove(&row.name);
        for blank in ["", "  "] {
            let mut given = unset.clone();
            given.insert(row.name.clone(), blank.to_string());
            assert_eq!(parse(&given), parse(&unset), "{}={blank:?}", row.name);
        }
    }
}

/// With `spec.jobs.envFrom` the controller sets every variable of `env::OPTIONAL` it would leave
/// unset, empty; any other variable it must always set, or a tenant's ConfigMap could.
#[test]
fn a_variable_the_controller_does_not_always_set_is_optional() {
    for row in table() {
        assert!(
            row.controller.starts_with("always") || env::OPTIONAL.contains(&row.name.as_str()),
            "docs/runner.md:{}: the controller does not always set {} ({:?}), and it is not in env::OPTIONAL",
            row.line,
            row.name,
            row.controller
        );
    }
}

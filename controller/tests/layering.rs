//! The layering the compiler cannot see: no module of `captf-core` or of the controller's
//! `runtime` imports a module that imports it back (directly or around a longer loop), and
//! `captf-core` never depends on `kube` or `tokio` (docs/architecture.md, "Layout").
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each module of `dir` (one file per module) and the sibling modules its non-test code names
/// through one of `prefixes` (`crate::`, `super::`, …), comments left out.
fn imports(dir: &Path, prefixes: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    let modules: BTreeSet<String> = files
        .iter()
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    let mut graph = BTreeMap::new();
    for path in &files {
        let me = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut deps = BTreeSet::new();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for prefix in prefixes {
                for (at, _) in line.match_indices(prefix) {
                    let rest = &line[at + prefix.len()..];
                    let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
                        let group = group.split('}').next().unwrap_or_default();
                        group
                            .split(',')
                            .map(|n| n.trim().split("::").next().unwrap_or_default())
                            .collect()
                    } else {
                        vec![
                            rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                                .next()
                                .unwrap_or_default(),
                        ]
                    };
                    for n in names {
                        if n != me && modules.contains(n) {
                            deps.insert(n.to_string());
                        }
                    }
                }
            }
        }
        graph.insert(me, deps);
    }
    graph
}

/// A loop of imports, if there is one: a path that comes back to where it started.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(graph, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|n| visit(graph, n, &mut Vec::new(), &mut done))
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn no_module_of_the_core_imports_one_that_imports_it_back() {
    let graph = imports(&root().join("core/src"), &["crate::"]);
    assert!(graph.len() > 20, "the core's modules were not found: {graph:?}");
    assert_eq!(find_cycle(&graph), None);
}

#[test]
fn no_module_of_the_runtime_imports_one_that_imports_it_back() {
    let graph = imports(&root().join("src/runtime"), &["super::", "crate::runtime::"]);
    assert!(graph.len() > 15, "the runtime's modules were not found: {graph:?}");
    assert_eq!(find_cycle(&graph), None);
}

#[test]
fn no_module_of_the_reader_imports_one_that_imports_it_back() {
    let graph = imports(&root().join("read/src"), &["crate::"]);
    assert!(graph.len() > 7, "the reader's modules were not found: {graph:?}");
    assert_eq!(find_cycle(&graph), None);
}

#[test]
fn the_cycle_finder_finds_a_loop_of_three() {
    let g: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), BTreeSet::from([v.to_string()])))
        .collect();
    let c = find_cycle(&g).unwrap();
    assert_eq!(c.first(), c.last());
    assert_eq!(c.len(), 4);
}

#[test]
fn the_core_depends_on_neither_kube_nor_tokio() {
    let manifest = std::fs::read_to_string(root().join("core/Cargo.toml")).unwrap();
    let deps = manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|d| d.split("\n[").next())
        .unwrap();
    let names: Vec<&str> = deps
        .lines()
        .filter_map(|l| l.split(['=', '.']).next())
        .map(str::trim)
        .filter(|n| !n.is_empty() && !n.starts_with('#'))
        .collect();
    assert!(names.contains(&"captf-shared"), "{names:?}");
    for banned in ["kube", "tokio", "kube-runtime", "kube-client"] {
        assert!(!names.contains(&banned), "captf-core depends on {banned}");
    }
}

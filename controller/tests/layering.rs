//! The layering the compiler cannot see: in no crate of the workspace does a module import a
//! module that imports it back (directly or around a longer loop), and `captf-core` never
//! depends on `kube` or `tokio` (docs/architecture.md, "Pure core, thin edges").
//!
//! A crate's modules are read from its `src/` tree (`lib.rs`, else `main.rs`, is the root;
//! `main.rs` beside a `lib.rs` and `src/bin/` are crates of their own that declare no modules).
//! An import is a path in non-test code (comments and everything from the first `#[cfg(test)]`
//! on left out) that starts with `crate::`, `super::`, `self::`, or, in a file that declares
//! modules, with one of them. Modules are compared with their siblings: an import from anywhere
//! below module `a` of something in its sibling `b` is an edge `a → b`. The file that declares
//! the siblings (`lib.rs`, `mod.rs`, or `a.rs` beside `a/`) is not one of them: it names its
//! modules (`mod`, `pub use`) and they may use its items (`super::`), as Rust's module tree has it.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path from the crate root (`[]` is the root).
type ModPath = Vec<String>;

/// The import graphs of one crate: for each module that has modules, the edges among them and
/// its own file (`self`).
type Graphs = BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>>;

/// The node of the module's own file in the graph of its modules.
const SELF: &str = "self";

/// The code of a file that counts: comments and test code left out.
fn code_of(text: &str) -> String {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut out = String::new();
    for line in code.lines() {
        let line = match line.find("//") {
            // A `//` in a string (a URL) cuts the line short; nothing imports after one.
            Some(at) => &line[..at],
            None => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths named from `at` on: `a::b::C`, or `a::{b, c::D}` (one path per member).
fn paths_at(text: &str) -> Vec<Vec<String>> {
    let mut segments = vec![];
    let mut rest = text.trim_start();
    loop {
        let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        segments.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(more) => rest = more.trim_start(),
            None => return vec![segments],
        }
    }
    let Some(group) = rest.strip_prefix('{') else {
        return vec![segments];
    };
    // The members of the group, split at its top-level commas.
    let mut members = vec![];
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                members.push(&group[start..i]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                members.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    let mut out = vec![];
    for m in members.into_iter().filter(|m| !m.trim().is_empty()) {
        for tail in paths_at(m) {
            let mut p = segments.clone();
            p.extend(tail.into_iter().filter(|s| s != "self"));
            out.push(p);
        }
    }
    if out.is_empty() {
        out.push(segments);
    }
    out
}

/// Every module path a file at `me` imports: absolute, and cut to the module (an item's name
/// dropped), by the paths its code names.
fn imports_of(me: &ModPath, code: &str, modules: &BTreeSet<ModPath>) -> BTreeSet<ModPath> {
    let children: BTreeSet<&str> = modules
        .iter()
        .filter(|m| m.len() == me.len() + 1 && m.starts_with(me))
        .map(|m| m[me.len()].as_str())
        .collect();
    let mut out = BTreeSet::new();
    let text = code;
    let mut at = 0;
    while at < text.len() {
        let Some(next) = text[at..].find(|c: char| is_ident(c)) else {
            break;
        };
        let start = at + next;
        let end = text[start..]
            .find(|c: char| !is_ident(c))
            .map_or(text.len(), |e| start + e);
        at = end;
        let word = &text[start..end];
        if !text[end..].starts_with("::") {
            continue;
        }
        let before = text[..start].chars().next_back();
        if before == Some(':') || before.is_some_and(is_ident) {
            continue;
        }
        let mut base: ModPath = match word {
            "crate" => vec![],
            "self" => me.clone(),
            "super" => me[..me.len().saturating_sub(1)].to_vec(),
            w if children.contains(w) => {
                let mut p = me.clone();
                p.push(w.to_string());
                p
            }
            _ => continue,
        };
        let mut rest = &text[end + 2..];
        if word == "super" {
            while let Some(more) = rest.trim_start().strip_prefix("super::") {
                base.pop();
                rest = more;
            }
        }
        if !matches!(word, "crate" | "self" | "super") {
            // A child named bare: the rest names something inside it.
            out.insert(base.clone());
        }
        for tail in paths_at(rest) {
            let mut target = base.clone();
            target.extend(tail);
            while !modules.contains(&target) {
                target.pop();
            }
            out.insert(target);
        }
    }
    out
}

/// The import graphs of a crate from its files, each given by its module path and its text.
fn graphs(files: &[(ModPath, String)]) -> Graphs {
    let modules: BTreeSet<ModPath> = files
        .iter()
        .flat_map(|(m, _)| (0..=m.len()).map(|n| m[..n].to_vec()))
        .collect();
    let mut out = Graphs::new();
    for m in modules
        .iter()
        .filter(|m| modules.iter().any(|c| c.len() == m.len() + 1 && c.starts_with(m)))
    {
        let nodes = out.entry(m.clone()).or_default();
        for c in modules.iter().filter(|c| c.len() == m.len() + 1 && c.starts_with(m)) {
            nodes.entry(c[m.len()].clone()).or_default();
        }
    }
    for (me, text) in files {
        for target in imports_of(me, &code_of(text), &modules) {
            if target == *me {
                continue;
            }
            let common = me.iter().zip(&target).take_while(|(a, b)| a == b).count();
            let node = |p: &ModPath| p.get(common).cloned().unwrap_or_else(|| SELF.to_string());
            let (from, to) = (node(me), node(&target));
            // A module and the file that declares it are one unit: the file names its modules
            // (`mod`, and `pub use` to re-export), a module uses the file's items (`super::`).
            if from != to && from != SELF && to != SELF {
                let level = out.entry(me[..common].to_vec()).or_default();
                level.entry(from).or_default().insert(to);
            }
        }
    }
    out
}

/// The `.rs` files of a crate's `src/`, each with its module path.
fn crate_files(src: &Path) -> Vec<(ModPath, String)> {
    fn walk(dir: &Path, at: &ModPath, out: &mut Vec<(ModPath, String)>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if at.is_empty() && name == "bin" {
                    continue;
                }
                let mut child = at.clone();
                child.push(name);
                walk(&path, &child, out);
            } else if let Some(stem) = name.strip_suffix(".rs") {
                let module = match stem {
                    "lib" if at.is_empty() => at.clone(),
                    "main" if at.is_empty() => {
                        if dir.join("lib.rs").exists() {
                            continue;
                        }
                        at.clone()
                    }
                    "mod" => at.clone(),
                    _ => {
                        let mut m = at.clone();
                        m.push(stem.to_string());
                        m
                    }
                };
                out.push((module, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let mut out = vec![];
    walk(src, &vec![], &mut out);
    out
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

/// Every loop of imports of a crate, named by the module whose modules it goes around.
fn cycles(graphs: &Graphs) -> Vec<String> {
    graphs
        .iter()
        .filter_map(|(at, g)| {
            let at = std::iter::once("crate")
                .chain(at.iter().map(String::as_str))
                .collect::<Vec<_>>();
            find_cycle(g).map(|c| format!("in {}: {}", at.join("::"), c.join(" → ")))
        })
        .collect()
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace's crates (the members of its `Cargo.toml`), as folders.
fn members() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("../Cargo.toml")).unwrap();
    let list = manifest.split("members = [").nth(1).unwrap().split(']').next().unwrap();
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// The import circles the simulator still has, by the imports that close them: the store owns
/// the kubelet (`store → kubelet`) and compiles the RBAC policy itself (`store → auth`), while the
/// kubelet and the policy import the store; the process kubelet takes the API server's shared
/// state (`process_kubelet → server`) while the server reads the kubelet's pod logs. Giving the
/// store its kubelet and its policy at construction, and the process kubelet what it needs of
/// the server, removes them; until then these edges are the one known exception, and no other
/// circle may appear (a circle through any other import fails the test).
const SIM_KNOWN_CIRCLE_EDGES: [(&str, &str); 3] =
    [("store", "kubelet"), ("store", "auth"), ("process_kubelet", "server")];

#[test]
fn no_crate_of_the_workspace_has_a_module_that_imports_one_that_imports_it_back() {
    let members = members();
    assert!(
        members.len() >= 15,
        "the workspace's members were not found: {members:?}"
    );
    for member in &members {
        let files = crate_files(&root().join("..").join(member).join("src"));
        assert!(!files.is_empty(), "{member}: no sources found");
        let mut g = graphs(&files);
        if member == "sim" {
            let top = g.get_mut(&vec![]).unwrap();
            for (from, to) in SIM_KNOWN_CIRCLE_EDGES {
                assert!(
                    top.get_mut(from).unwrap().remove(to),
                    "the simulator's {from} no longer imports {to}: take the edge out of SIM_KNOWN_CIRCLE_EDGES"
                );
            }
        }
        assert_eq!(cycles(&g), Vec::<String>::new(), "{member}");
    }
}

#[test]
fn every_crate_the_plugin_and_the_simulator_included_is_read_module_by_module() {
    let count = |member: &str| {
        let g = graphs(&crate_files(&root().join("..").join(member).join("src")));
        g.get(&vec![]).map_or(0, BTreeMap::len)
    };
    assert!(count("controller/core") > 20, "the core's modules were not found");
    assert!(count("controller/read") > 7, "the reader's modules were not found");
    assert!(count("kubectl-captf") > 20, "the plugin's modules were not found");
    assert!(count("sim") >= 20, "the simulator's modules were not found");
    let controller = graphs(&crate_files(&root().join("src")));
    let runtime = controller.get(&vec!["runtime".to_string()]).unwrap();
    assert!(runtime.len() > 15, "the runtime's modules were not found: {runtime:?}");
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

fn synthetic(files: &[(&str, &str)]) -> Graphs {
    let files: Vec<(ModPath, String)> = files
        .iter()
        .map(|(p, text)| {
            let path = p.split("::").filter(|s| !s.is_empty()).map(str::to_string).collect();
            (path, text.to_string())
        })
        .collect();
    graphs(&files)
}

#[test]
fn a_circle_through_use_crate_is_found_and_one_way_imports_are_not() {
    let one_way = synthetic(&[
        ("", "pub mod a;\npub mod b;\npub mod c;\n"),
        ("a", "use crate::b::Thing;\n"),
        ("b", "use crate::{c::Other, c};\n"),
        (
            "c",
            "pub struct Other;\n// use crate::a; (a comment)\n#[cfg(test)]\nmod tests { use crate::a::X; }\n",
        ),
    ]);
    assert_eq!(cycles(&one_way), Vec::<String>::new(), "{one_way:?}");
    let circle = synthetic(&[
        ("", "pub mod a;\npub mod b;\npub mod c;\n"),
        ("a", "use crate::b::Thing;\n"),
        ("b", "use crate::{\n    c::Other,\n};\n"),
        ("c", "fn f() { crate::a::g() }\n"),
    ]);
    assert_eq!(cycles(&circle), ["in crate: a → b → c → a"], "{circle:?}");
}

#[test]
fn a_circle_through_super_or_a_nested_module_is_found_and_the_declaring_file_is_no_sibling() {
    let through_super = synthetic(&[
        ("", "pub mod rt;\n"),
        ("rt", "pub mod x;\npub mod y;\n"),
        ("rt::x", "use super::y::Y;\n"),
        ("rt::y", "use crate::rt::x::X;\n"),
    ]);
    assert_eq!(cycles(&through_super), ["in crate::rt: x → y → x"]);
    // A module below `a` that imports `b` counts as `a` importing it.
    let from_below = synthetic(&[
        ("", "pub mod a;\npub mod b;\n"),
        ("a", "pub mod inner;\n"),
        ("a::inner", "use crate::b::B;\n"),
        ("b", "use crate::a::inner::I;\n"),
    ]);
    assert_eq!(cycles(&from_below), ["in crate: a → b → a"]);
    // Around the root: `a` uses an item of the root, which re-exports `b`, which uses `a`.
    let around_the_root = synthetic(&[
        ("", "pub mod a;\npub mod b;\npub use b::B;\npub fn get() {}\n"),
        ("a", "use crate::get;\n"),
        ("b", "use crate::a::A;\n"),
    ]);
    assert_eq!(
        cycles(&around_the_root),
        Vec::<String>::new(),
        "the root declares its modules"
    );
    let but_not_past_it = synthetic(&[
        ("", "pub mod a;\npub mod b;\n"),
        ("a", "use crate::b::B;\n"),
        ("b", "fn f() { crate::a::g() }\n"),
    ]);
    assert_eq!(cycles(&but_not_past_it), ["in crate: a → b → a"]);
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

//! Every relative link in the repository's Markdown resolves: the file it names exists, and a
//! `#fragment` names a heading of that file as GitHub renders it. The README points into `docs/`
//! for everything but the quick start, so a page moved or a heading renamed must not leave a
//! reader at a dead end.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use pulldown_cmark::{Event, HeadingLevel, Parser, Tag, TagEnd};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Markdown files under version control, relative to the root; the files on disk when the
/// tree is not a git checkout (a source archive).
fn markdown_files() -> Vec<PathBuf> {
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
            "--",
            "*.md",
        ])
        .current_dir(root())
        .output()
        .ok()
        .filter(|o| o.status.success());
    match listed {
        Some(o) => o
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
            .filter(|p| root().join(p).is_file())
            .collect(),
        None => {
            let mut found = vec![PathBuf::from("README.md")];
            for dir in [
                "docs",
                "examples",
                "certs",
                "kubetest",
                "realparts",
                "runner",
                "sim",
                "webhook",
            ] {
                let Ok(entries) = std::fs::read_dir(root().join(dir)) else {
                    continue;
                };
                for e in entries.flatten() {
                    if e.path().extension().is_some_and(|x| x == "md") {
                        found.push(Path::new(dir).join(e.file_name()));
                    }
                }
            }
            found
        }
    }
}

/// The anchor GitHub gives a heading: lower case, punctuation other than `-` and `_` dropped,
/// each space a `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The link targets (outside code) and the heading anchors of one Markdown text. A heading
/// that repeats gets `-1`, `-2`, … as on GitHub.
fn links_and_anchors(text: &str) -> (Vec<String>, BTreeSet<String>) {
    let mut links = Vec::new();
    let mut anchors = BTreeSet::new();
    let mut heading: Option<String> = None;
    for event in Parser::new(text) {
        match event {
            Event::Start(Tag::Link { dest_url, .. }) | Event::Start(Tag::Image { dest_url, .. }) => {
                links.push(dest_url.to_string());
            }
            Event::Start(Tag::Heading { level, .. }) if level != HeadingLevel::H1 || heading.is_none() => {
                heading = Some(String::new());
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(h) = heading.take() {
                    let base = slug(&h);
                    let mut anchor = base.clone();
                    let mut n = 0;
                    while !anchors.insert(anchor.clone()) {
                        n += 1;
                        anchor = format!("{base}-{n}");
                    }
                }
            }
            Event::Html(h) | Event::InlineHtml(h) => {
                // `<a id="…">` anchors, as a few pages set by hand.
                for part in h.split("id=\"").skip(1) {
                    if let Some(id) = part.split('"').next() {
                        anchors.insert(id.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    (links, anchors)
}

/// Every broken relative link of the files (relative to `base`), as `file: target (why)`.
fn broken_links(base: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut broken = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(base.join(file)).unwrap_or_default();
        let (links, own_anchors) = links_and_anchors(&text);
        for link in links {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match link.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (link.as_str(), None),
            };
            let target = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap_or(Path::new("")).join(path)
            };
            let on_disk = base.join(&target);
            if !on_disk.exists() {
                broken.push(format!("{}: {link} (no {})", file.display(), target.display()));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            let anchors = if path.is_empty() {
                own_anchors.clone()
            } else if on_disk.extension().is_some_and(|x| x == "md") {
                links_and_anchors(&std::fs::read_to_string(&on_disk).unwrap_or_default()).1
            } else {
                continue;
            };
            if !anchors.contains(fragment) {
                broken.push(format!(
                    "{}: {link} (no heading with the anchor #{fragment} in {})",
                    file.display(),
                    target.display()
                ));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_markdown_names_a_file_and_heading_that_exist() {
    let files = markdown_files();
    assert!(
        files.iter().any(|f| f == Path::new("README.md")) && files.iter().any(|f| f.starts_with("docs")),
        "the README and docs/ are checked: {files:?}"
    );
    let broken = broken_links(&root(), &files);
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_check_finds_a_missing_file_and_a_missing_heading() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.md");
    std::fs::write(
        &page,
        "# Page\n\n## Runner slots\n\n[ok](#runner-slots) [bad](#nowhere) [gone](missing.md) `[code](missing.md)`\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("other.md"),
        "# Other\n\n[back](page.md#runner-slots) [off](page.md#gone)\n",
    )
    .unwrap();
    let (links, _) = links_and_anchors(&std::fs::read_to_string(&page).unwrap());
    assert_eq!(
        links,
        ["#runner-slots", "#nowhere", "missing.md"],
        "code spans hold no links"
    );
    let broken = broken_links(dir.path(), &[PathBuf::from("page.md"), PathBuf::from("other.md")]);
    assert_eq!(
        broken,
        [
            "page.md: #nowhere (no heading with the anchor #nowhere in page.md)",
            "page.md: missing.md (no missing.md)",
            "other.md: page.md#gone (no heading with the anchor #gone in page.md)",
        ]
    );
    assert_eq!(
        slug("`kubectl captf`: the plugin for the person on call"),
        "kubectl-captf-the-plugin-for-the-person-on-call"
    );
    assert_eq!(slug("Who may read `/metrics`"), "who-may-read-metrics");
}

#[test]
fn the_readme_stays_a_short_entry_point() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines: keep it to what a newcomer needs first and move the rest into docs/"
    );
    for page in std::fs::read_dir(root().join("docs")).unwrap().flatten() {
        let name = page.file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") && name != "README.md" {
            let index = std::fs::read_to_string(root().join("docs/README.md")).unwrap();
            assert!(
                index.contains(&format!("]({name})")),
                "docs/README.md, the table of contents, does not list {name}"
            );
        }
    }
}

/// The README's machine module is, byte for byte, the file the Cluster API test boots
/// (`kubetest/tests/cluster_api.rs` includes `examples/modules/machine/main.tf`), shown in one
/// `hcl` block: what a reader copies is what was tested.
#[test]
fn the_readmes_machine_module_is_the_file_the_cluster_api_test_boots() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let module = std::fs::read_to_string(root().join("examples/modules/machine/main.tf")).unwrap();
    assert!(
        readme.contains(&format!("```hcl\n{module}```\n")),
        "README.md does not show examples/modules/machine/main.tf exactly, in one hcl block"
    );
    let test = std::fs::read_to_string(root().join("kubetest/tests/cluster_api.rs")).unwrap();
    assert!(
        test.contains("include_str!(\"../../examples/modules/machine/main.tf\")"),
        "the Cluster API test no longer boots examples/modules/machine/main.tf"
    );
}

#[test]
fn the_policy_pages_example_is_the_policy_the_real_path_test_checks_plans_with() {
    let page = std::fs::read_to_string(root().join("docs/policy.md")).unwrap();
    let policy = std::fs::read_to_string(root().join("examples/policies/world.rego")).unwrap();
    assert!(
        page.contains(&format!("```rego\n{policy}```\n")),
        "docs/policy.md does not show examples/policies/world.rego exactly, in one rego block"
    );
    let test = std::fs::read_to_string(root().join("kubetest/tests/full_path.rs")).unwrap();
    assert!(
        test.contains("include_str!(\"../../examples/policies/world.rego\")"),
        "the real-path test no longer checks plans with examples/policies/world.rego"
    );
}

/// The sections the code cites as `(<file>.md, "<heading>")` in comments: `(file, heading, where)`.
fn cited_sections() -> Vec<(String, String, String)> {
    let listed = Command::new("git")
        .args(["ls-files", "-z", "--", "*.rs", "*.sh", "*.py"])
        .current_dir(root())
        .output()
        .expect("git ls-files");
    let mut cited = Vec::new();
    for file in listed.stdout.split(|b| *b == 0).filter(|p| !p.is_empty()) {
        let file = String::from_utf8_lossy(file).into_owned();
        let Ok(text) = std::fs::read_to_string(root().join(&file)) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            let mut rest = line;
            while let Some(at) = rest.find(".md, \"") {
                let start = rest[..at]
                    .rfind(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)))
                    .map_or(0, |i| i + 1);
                let md = format!("{}.md", &rest[start..at]);
                let quoted = &rest[at + ".md, \"".len()..];
                if start < at
                    && let Some(end) = quoted.find('"')
                {
                    cited.push((md, quoted[..end].to_string(), format!("{file}:{}", n + 1)));
                }
                rest = &rest[at + 1..];
            }
        }
    }
    cited
}

/// Every section a comment cites by file and heading exists: a heading of that file, or a
/// paragraph's lead (`**Defaults on update.**`, or its first words), is the cited text or begins
/// with it. A renamed heading must not leave a maintainer at a dead end.
#[test]
fn every_section_the_code_cites_by_heading_exists() {
    let cited = cited_sections();
    assert!(!cited.is_empty(), "no citation found: the scan is broken");
    let mut missing = Vec::new();
    for (md, heading, at) in cited {
        let Ok(text) = std::fs::read_to_string(root().join(&md)) else {
            missing.push(format!("{at}: {md} does not exist"));
            continue;
        };
        let found = text
            .lines()
            .any(|l| l.trim_start_matches(['#', ' ', '*']).starts_with(heading.as_str()));
        if !found {
            missing.push(format!("{at}: {md} has no heading \"{heading}\""));
        }
    }
    assert!(
        missing.is_empty(),
        "cited sections that do not exist:\n{}",
        missing.join("\n")
    );
}

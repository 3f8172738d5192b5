//! One state backend: CAPTF keeps every state in the kubernetes backend it configures itself
//! (`backend.tf`, [`crate::workdir`]), because the stale-lock and foreign-lock rules read and
//! release the lock through that backend's lock Lease. A module that declares its own `backend`
//! block, or a `cloud` block (HCP Terraform / Terraform Cloud), anywhere in its root module is
//! refused before `init` configures any backend, with the file and line named.
//!
//! The check reads the root module's configuration files as Terraform and OpenTofu load them
//! (`*.tf`, `*.tf.json`, and OpenTofu's `*.tofu`, `*.tofu.json`, override files included). For
//! native syntax it is a small lexer, not a parser: it skips comments, quoted strings (with their
//! `${ … }` interpolations), heredocs, and tracks brace depth, so only a `backend "<type>" {` or
//! `cloud {` directly inside a top-level `terraform {` block counts; the same words in a comment,
//! a string, a heredoc or another block do not. JSON files are parsed.

use std::path::{Path, PathBuf};

/// Largest configuration file read; bigger ones are refused rather than read into memory.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// A backend-like block a module declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Declared {
    /// `backend "<type>" { … }`.
    Backend(String),
    /// `cloud { … }`.
    Cloud,
}

impl std::fmt::Display for Declared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Declared::Backend(kind) => write!(f, "backend \"{kind}\" block"),
            Declared::Cloud => write!(f, "cloud block"),
        }
    }
}

/// Where a module declares one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub what: Declared,
    /// 1-based; 0 for JSON files (the parser keeps no positions).
    pub line: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum BackendCheckError {
    #[error(
        "the module declares its own {what} in {file}{at}; CAPTF keeps every state in the kubernetes backend it configures itself (its stale-lock and foreign-lock handling depend on that backend's lock Lease), so remove the block from the module",
        file = file.display(),
        at = if *line > 0 { format!(" line {line}") } else { String::new() }
    )]
    OwnBackend { what: Declared, file: PathBuf, line: usize },
    #[error("failed to read {path} to check it for a backend block: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is larger than {MAX_FILE_BYTES} bytes; refusing to read it to check it for a backend block")]
    TooLarge { path: PathBuf },
    #[error("failed to parse {path} as JSON to check it for a backend block: {source}")]
    Json { path: PathBuf, source: serde_json::Error },
}

/// Is `name` a configuration file of a root module, for Terraform or OpenTofu?
pub fn is_config_file(name: &str) -> bool {
    [".tf", ".tf.json", ".tofu", ".tofu.json"]
        .iter()
        .any(|ext| name.len() > ext.len() && name.ends_with(ext))
}

/// Refuse the root module in `dir` if any of its configuration files (other than `skip`, the
/// runner's own `backend.tf` when it is already written) declares a backend or cloud block.
/// Files are checked in name order, so the message names the same file every time.
pub fn check_dir(dir: &Path, skip: Option<&str>) -> Result<(), BackendCheckError> {
    let read = |source| BackendCheckError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(read)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| is_config_file(n) && Some(n.as_str()) != skip)
        .collect();
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let text = read_bounded(&path)?;
        let found = if name.ends_with(".json") {
            let doc: serde_json::Value = serde_json::from_slice(&text).map_err(|source| BackendCheckError::Json {
                path: PathBuf::from(&name),
                source,
            })?;
            declared_in_json(&doc)
        } else {
            declared_in_hcl(&String::from_utf8_lossy(&text))
        };
        if let Some(f) = found.into_iter().next() {
            return Err(BackendCheckError::OwnBackend {
                what: f.what,
                file: PathBuf::from(name),
                line: f.line,
            });
        }
    }
    Ok(())
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, BackendCheckError> {
    use std::io::Read;
    let err = |source| BackendCheckError::Read {
        path: path.to_path_buf(),
        source,
    };
    let f = std::fs::File::open(path).map_err(err)?;
    let mut v = Vec::new();
    f.take(MAX_FILE_BYTES + 1).read_to_end(&mut v).map_err(err)?;
    if u64::try_from(v.len()).unwrap_or(u64::MAX) > MAX_FILE_BYTES {
        return Err(BackendCheckError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(v)
}

/// The backend and cloud blocks of a JSON configuration file: `"terraform"` is an object, or an
/// array of objects, whose `"backend"` maps a type to its settings and whose `"cloud"` is there.
pub fn declared_in_json(doc: &serde_json::Value) -> Vec<Found> {
    let blocks: Vec<&serde_json::Value> = match doc.get("terraform") {
        Some(serde_json::Value::Array(a)) => a.iter().collect(),
        Some(v) => vec![v],
        None => vec![],
    };
    let mut found = Vec::new();
    for block in blocks {
        if let Some(backend) = block.get("backend") {
            let kinds: Vec<String> = match backend {
                serde_json::Value::Object(m) => m.keys().cloned().collect(),
                serde_json::Value::Array(a) => a
                    .iter()
                    .filter_map(|x| x.as_object())
                    .flat_map(|m| m.keys().cloned())
                    .collect(),
                _ => vec![],
            };
            if kinds.is_empty() {
                found.push(Found {
                    what: Declared::Backend(String::new()),
                    line: 0,
                });
            }
            found.extend(kinds.into_iter().map(|k| Found {
                what: Declared::Backend(k),
                line: 0,
            }));
        }
        if block.get("cloud").is_some() {
            found.push(Found {
                what: Declared::Cloud,
                line: 0,
            });
        }
    }
    found
}

/// A token of native syntax, as far as block structure goes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// A quoted string with no interpolation (a block label).
    Label(String),
    Open,
    Close,
    Other,
}

/// The backend and cloud blocks directly inside a top-level `terraform` block of a native
/// syntax file. Never panics; linear in the text's length.
pub fn declared_in_hcl(text: &str) -> Vec<Found> {
    let toks = lex(text);
    let mut found = Vec::new();
    let mut depth = 0usize;
    // The depth at which the current top-level terraform block's body is, while inside one.
    let mut in_terraform = false;
    let mut i = 0;
    while i < toks.len() {
        let (line, tok) = &toks[i];
        match tok {
            Tok::Open => depth += 1,
            Tok::Close => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    in_terraform = false;
                }
            }
            Tok::Ident(name) if depth == 0 && name == "terraform" => {
                if matches!(toks.get(i + 1), Some((_, Tok::Open))) {
                    in_terraform = true;
                }
            }
            Tok::Ident(name) if depth == 1 && in_terraform && name == "backend" => {
                if let (Some((_, Tok::Label(kind))), Some((_, Tok::Open))) = (toks.get(i + 1), toks.get(i + 2)) {
                    found.push(Found {
                        what: Declared::Backend(kind.clone()),
                        line: *line,
                    });
                }
            }
            Tok::Ident(name) if depth == 1 && in_terraform && name == "cloud" => {
                if matches!(toks.get(i + 1), Some((_, Tok::Open))) {
                    found.push(Found {
                        what: Declared::Cloud,
                        line: *line,
                    });
                }
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// The structural tokens of `text`, each with its 1-based line.
fn lex(text: &str) -> Vec<(usize, Tok)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut line = 1usize;
    let mut i = 0usize;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b' ' | b'\t' | b'\r' => i += 1,
            b'#' => i = skip_line(b, i),
            b'/' if b.get(i + 1) == Some(&b'/') => i = skip_line(b, i),
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = find(b, i + 2, b"*/").map_or(b.len(), |e| e + 2);
                line += count_newlines(&b[i..end]);
                i = end;
            }
            b'{' => {
                out.push((line, Tok::Open));
                i += 1;
            }
            b'}' => {
                out.push((line, Tok::Close));
                i += 1;
            }
            b'"' => {
                let start = line;
                let (end, plain) = skip_string(b, i + 1);
                line += count_newlines(&b[i..end]);
                let tok = if plain {
                    Tok::Label(String::from_utf8_lossy(&b[i + 1..end.saturating_sub(1).max(i + 1)]).into_owned())
                } else {
                    Tok::Other
                };
                out.push((start, tok));
                i = end;
            }
            b'<' if b.get(i + 1) == Some(&b'<') => match heredoc_end(b, i + 2) {
                Some(end) => {
                    line += count_newlines(&b[i..end]);
                    out.push((line, Tok::Other));
                    i = end;
                }
                None => {
                    out.push((line, Tok::Other));
                    i += 2;
                }
            },
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'-') {
                    i += 1;
                }
                out.push((line, Tok::Ident(String::from_utf8_lossy(&b[start..i]).into_owned())));
            }
            _ => {
                out.push((line, Tok::Other));
                i += 1;
            }
        }
    }
    out
}

fn skip_line(b: &[u8], i: usize) -> usize {
    b[i..].iter().position(|c| *c == b'\n').map_or(b.len(), |p| i + p)
}

fn find(b: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    if from > b.len() {
        return None;
    }
    b[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| from + p)
}

fn count_newlines(b: &[u8]) -> usize {
    b.iter().filter(|c| **c == b'\n').count()
}

/// From just after an opening quote: the index just after the closing quote (or the end of the
/// text), and whether the string was plain (no interpolation or directive).
fn skip_string(b: &[u8], mut i: usize) -> (usize, bool) {
    let mut plain = true;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return (i + 1, plain),
            // A quoted string cannot span lines: an unterminated one ends at the newline.
            b'\n' => return (i, plain),
            b'$' | b'%' if b.get(i + 1) == Some(&b[i]) && b.get(i + 2) == Some(&b'{') => i += 3,
            b'$' | b'%' if b.get(i + 1) == Some(&b'{') => {
                plain = false;
                i = skip_template(b, i + 2);
            }
            _ => i += 1,
        }
    }
    (b.len(), plain)
}

/// From just after `${` or `%{`: the index just after its closing `}`, skipping nested braces
/// and strings.
fn skip_template(b: &[u8], mut i: usize) -> usize {
    let mut depth = 1usize;
    while i < b.len() {
        match b[i] {
            b'{' => {
                depth += 1;
                i += 1;
            }
            b'}' => {
                depth -= 1;
                i += 1;
                if depth == 0 {
                    return i;
                }
            }
            b'"' => i = skip_string(b, i + 1).0,
            _ => i += 1,
        }
    }
    b.len()
}

/// From just after `<<`: the index just after the heredoc's closing marker line, or None when
/// this is not a heredoc opening (`<<` followed by an identifier and a newline).
fn heredoc_end(b: &[u8], mut i: usize) -> Option<usize> {
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    let start = i;
    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'-') {
        i += 1;
    }
    let marker = &b[start..i];
    if marker.is_empty() {
        return None;
    }
    while i < b.len() && (b[i] == b' ' || b[i] == b'\t' || b[i] == b'\r') {
        i += 1;
    }
    if b.get(i) != Some(&b'\n') {
        return None;
    }
    i += 1;
    // Each following line: is it the marker alone (indentation allowed)?
    while i < b.len() {
        let end = skip_line(b, i);
        let l = &b[i..end];
        let trimmed: &[u8] = {
            let s = l.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(l.len());
            let e = l.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(s, |p| p + 1);
            &l[s..e.max(s)]
        };
        if trimmed == marker {
            return Some(end);
        }
        i = end + 1;
    }
    Some(b.len())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn kinds(text: &str) -> Vec<(Declared, usize)> {
        declared_in_hcl(text).into_iter().map(|f| (f.what, f.line)).collect()
    }

    #[test]
    fn a_backend_block_in_the_terraform_block_is_found_with_its_line() {
        let text = "variable \"x\" {}\n\nterraform {\n  required_version = \">= 1.0\"\n  backend \"s3\" {\n    bucket = \"b\"\n  }\n}\n";
        assert_eq!(kinds(text), [(Declared::Backend("s3".into()), 5)]);
    }

    #[test]
    fn a_cloud_block_is_found() {
        let text = "terraform {\n  cloud {\n    organization = \"o\"\n    workspaces { name = \"w\" }\n  }\n}\n";
        assert_eq!(kinds(text), [(Declared::Cloud, 2)]);
    }

    #[test]
    fn the_words_in_comments_strings_heredocs_and_other_blocks_do_not_count() {
        let text = r#"
# terraform { backend "s3" {} }
// terraform { cloud {} }
/* terraform {
  backend "gcs" {}
} */
locals {
  a = "terraform { backend \"s3\" {} }"
  b = <<-EOT
    terraform {
      backend "http" {}
    }
    EOT
  c = "${jsonencode({ backend = "x" })}"
}
resource "x" "y" {
  backend "z" {}
  cloud {}
}
terraform {
  required_providers {
    backend = { source = "a/b" }
  }
  backend = "not a block"
}
"#;
        assert_eq!(kinds(text), []);
    }

    #[test]
    fn a_terraform_block_after_tricky_strings_is_still_seen() {
        let text =
            "locals {\n  s = \"}}}${\"{\"}\\\"\"\n  t = <<EOF\n}}\nEOF\n}\nterraform {\n  backend \"local\" {}\n}\n";
        assert_eq!(kinds(text), [(Declared::Backend("local".into()), 8)]);
    }

    #[test]
    fn json_backend_and_cloud_are_found_in_an_object_or_an_array() {
        let doc = serde_json::json!({"terraform": {"backend": {"s3": {"bucket": "b"}}}});
        assert_eq!(declared_in_json(&doc)[0].what, Declared::Backend("s3".into()));
        let doc = serde_json::json!({"terraform": [{"required_version": ">= 1"}, {"cloud": {"organization": "o"}}]});
        assert_eq!(declared_in_json(&doc)[0].what, Declared::Cloud);
        let doc = serde_json::json!({"locals": {"backend": "x"}, "terraform": {"required_version": ">= 1"}});
        assert!(declared_in_json(&doc).is_empty());
    }

    #[test]
    fn config_files_are_tf_tofu_and_their_json_forms() {
        for n in ["main.tf", "x_override.tf", "a.tf.json", "main.tofu", "a.tofu.json"] {
            assert!(is_config_file(n), "{n}");
        }
        for n in [
            ".tf",
            "main.tf.bak",
            "terraform.tfvars",
            "terraform.tfvars.json",
            "README.md",
            "x.json",
        ] {
            assert!(!is_config_file(n), "{n}");
        }
    }

    #[test]
    fn a_module_file_with_a_backend_is_refused_naming_the_file_and_line() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("main.tf"), "resource \"a\" \"b\" {}\n").unwrap();
        std::fs::write(d.path().join("versions.tofu"), "terraform {\n  backend \"pg\" {}\n}\n").unwrap();
        let err = check_dir(d.path(), None).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, BackendCheckError::OwnBackend { .. }));
        assert!(
            msg.starts_with("the module declares its own backend \"pg\" block in versions.tofu line 2; "),
            "{msg}"
        );
        assert!(msg.contains("kubernetes backend"), "{msg}");
    }

    #[test]
    fn the_runners_own_backend_file_is_skipped_and_a_clean_module_passes() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("main.tf"), "resource \"a\" \"b\" {}\n").unwrap();
        std::fs::write(
            d.path().join("backend.tf"),
            "terraform {\n  backend \"kubernetes\" {}\n}\n",
        )
        .unwrap();
        check_dir(d.path(), Some("backend.tf")).unwrap();
        assert!(check_dir(d.path(), None).is_err());
    }

    #[test]
    fn bad_json_and_oversized_files_are_clear_errors() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.tf.json"), "{not json").unwrap();
        let err = check_dir(d.path(), None).unwrap_err().to_string();
        assert!(err.starts_with("failed to parse a.tf.json as JSON"), "{err}");
        let d = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(d.path().join("big.tf")).unwrap();
        f.set_len(MAX_FILE_BYTES + 1).unwrap();
        let err = check_dir(d.path(), None).unwrap_err();
        assert!(matches!(err, BackendCheckError::TooLarge { .. }), "{err}");
    }

    proptest! {
        /// Whatever the bytes, the lexer ends without panicking.
        #[test]
        fn any_text_is_checked_without_panicking(text in "(?s).{0,400}") {
            let _ = declared_in_hcl(&text);
        }

        /// A backend block is found after any top-level blocks of attributes holding arbitrary
        /// strings, comments and braces-in-strings, and never inside them.
        #[test]
        fn a_backend_after_arbitrary_blocks_is_found_exactly_once(
            values in proptest::collection::vec("[ -~]{0,20}", 0..6),
            kind in "[a-z][a-z0-9]{0,8}",
        ) {
            let mut text = String::new();
            for (n, v) in values.iter().enumerate() {
                let escaped = v.replace('\\', "\\\\").replace('"', "\\\"").replace("${", "$${").replace("%{", "%%{");
                text.push_str(&format!("# {v}\nlocals {{\n  v{n} = \"{escaped}\" // {v}\n}}\n"));
            }
            let line = text.lines().count() + 2;
            text.push_str(&format!("terraform {{\n  backend \"{kind}\" {{}}\n}}\n"));
            prop_assert_eq!(kinds(&text), vec![(Declared::Backend(kind), line)]);
        }
    }
}

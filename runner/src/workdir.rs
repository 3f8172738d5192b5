//! The working directory: the inputs read from the mounted Secret, the kubernetes backend
//! configuration and the variables file (docs/runner.md).
//!
//! Order matters: `init -from-module` refuses a directory that holds anything (even a dotfile),
//! so the runner creates an empty directory, lets `init -from-module` copy the module into it,
//! and only then writes `backend.tf` and `terraform.tfvars.json`.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use captf_shared::inputs::Inputs;
use captf_shared::keys::INPUTS_DATA_KEY;

/// The backend configuration file the runner writes.
pub const BACKEND_FILE: &str = "backend.tf";
/// The variables file Terraform loads automatically.
pub const VARIABLES_FILE: &str = "terraform.tfvars.json";
/// The saved plan of an apply.
pub const PLAN_FILE: &str = "captf.tfplan";

#[derive(Debug, thiserror::Error)]
pub enum WorkdirError {
    #[error("failed to read inputs {path}: {source}")]
    ReadInputs { path: PathBuf, source: std::io::Error },
    #[error("failed to parse inputs {path}: {source}")]
    ParseInputs { path: PathBuf, source: serde_json::Error },
    #[error("inputs {path} have an empty module.source")]
    EmptySource { path: PathBuf },
    #[error("failed to create work dir {path}: {source}")]
    Create { path: PathBuf, source: std::io::Error },
    #[error("work dir {path} is not empty; init -from-module needs an empty directory")]
    NotEmpty { path: PathBuf },
    #[error("the module already has {path}; CAPTF configures the backend itself and will not overwrite it")]
    BackendExists { path: PathBuf },
    #[error("failed to write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// Read `inputs.json` from the mounted inputs Secret.
pub fn read_inputs(inputs_dir: &Path) -> Result<Inputs, WorkdirError> {
    let path = inputs_dir.join(INPUTS_DATA_KEY);
    let text = fs::read(&path).map_err(|source| WorkdirError::ReadInputs {
        path: path.clone(),
        source,
    })?;
    parse_inputs(&path, &text)
}

/// Parse the text of `inputs.json` (read from `path`, named in errors).
pub fn parse_inputs(path: &Path, text: &[u8]) -> Result<Inputs, WorkdirError> {
    let inputs: Inputs = serde_json::from_slice(text).map_err(|source| WorkdirError::ParseInputs {
        path: path.to_path_buf(),
        source,
    })?;
    if inputs.module.source.trim().is_empty() {
        return Err(WorkdirError::EmptySource {
            path: path.to_path_buf(),
        });
    }
    Ok(inputs)
}

/// Remove what a run left: the directory's contents when it was given (a mount point, which
/// stays), else the directory itself.
pub fn remove(dir: &Path, given: bool) -> std::io::Result<()> {
    if !given {
        return fs::remove_dir_all(dir);
    }
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() && !path.is_symlink() {
            fs::remove_dir_all(&path)?;
        } else {
            fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// Create the (empty) working directory: the given one, or a fresh one under the temp dir.
pub fn prepare(work_dir: Option<&Path>) -> Result<PathBuf, WorkdirError> {
    match work_dir {
        Some(dir) => {
            fs::create_dir_all(dir).map_err(|source| WorkdirError::Create {
                path: dir.to_path_buf(),
                source,
            })?;
            let mut entries = fs::read_dir(dir).map_err(|source| WorkdirError::Create {
                path: dir.to_path_buf(),
                source,
            })?;
            if entries.next().is_some() {
                return Err(WorkdirError::NotEmpty {
                    path: dir.to_path_buf(),
                });
            }
            Ok(dir.to_path_buf())
        }
        None => fresh_dir(&std::env::temp_dir()),
    }
}

fn fresh_dir(base: &Path) -> Result<PathBuf, WorkdirError> {
    let pid = std::process::id();
    let mut n = 0u32;
    loop {
        let path = base.join(format!("captf-run-{pid}-{n}"));
        match fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(source) => return Err(WorkdirError::Create { path, source }),
        }
    }
}

/// The kubernetes backend block. The suffix and namespace are DNS labels (checked by
/// [`crate::config`]) and `host` is the runner's own loopback URL, so none needs escaping inside
/// HCL strings. The backend reaches the API server through the runner's state proxy at `host`
/// ([`crate::state_proxy`]), not with in-cluster configuration of its own.
pub fn backend_tf(state_suffix: &str, namespace: &str, host: &str) -> String {
    format!(
        "# Written by captf-runner: the state lives in the Secret tfstate-default-{state_suffix}.\n\
         terraform {{\n  backend \"kubernetes\" {{\n    secret_suffix     = \"{state_suffix}\"\n    \
         namespace         = \"{namespace}\"\n    host              = \"{host}\"\n    \
         in_cluster_config = false\n  }}\n}}\n"
    )
}

/// Write `backend.tf` (refusing to overwrite one the module ships) and the variables file
/// (mode 0600, replacing any the module ships: the resolved inputs win). The variables are
/// never echoed anywhere.
pub fn write_config(
    dir: &Path,
    state_suffix: &str,
    namespace: &str,
    host: &str,
    inputs: &Inputs,
) -> Result<(), WorkdirError> {
    let backend = dir.join(BACKEND_FILE);
    let mut f = match fs::OpenOptions::new().write(true).create_new(true).open(&backend) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(WorkdirError::BackendExists { path: backend });
        }
        Err(source) => return Err(WorkdirError::Write { path: backend, source }),
    };
    f.write_all(backend_tf(state_suffix, namespace, host).as_bytes())
        .map_err(|source| WorkdirError::Write {
            path: backend.clone(),
            source,
        })?;

    let vars_path = dir.join(VARIABLES_FILE);
    // Remove a file the module shipped so create_new applies our mode.
    match fs::remove_file(&vars_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(WorkdirError::Write {
                path: vars_path,
                source,
            });
        }
    }
    let body = serde_json::to_vec_pretty(&inputs.variables).map_err(|e| WorkdirError::Write {
        path: vars_path.clone(),
        source: std::io::Error::other(e),
    })?;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&vars_path)
        .map_err(|source| WorkdirError::Write {
            path: vars_path.clone(),
            source,
        })?;
    f.write_all(&body).map_err(|source| WorkdirError::Write {
        path: vars_path.clone(),
        source,
    })?;
    // The umask can only remove bits; make the mode exact anyway.
    fs::set_permissions(&vars_path, fs::Permissions::from_mode(0o600)).map_err(|source| WorkdirError::Write {
        path: vars_path,
        source,
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn inputs(vars: serde_json::Value) -> Inputs {
        serde_json::from_value(json!({"module": {"source": "git::https://example.com/m.git"}, "variables": vars}))
            .unwrap()
    }

    #[test]
    fn backend_reaches_the_api_server_through_the_runners_state_proxy() {
        let b = backend_tf("prod-eu-tc", "team-a", "http://127.0.0.1:4000");
        assert!(b.contains("backend \"kubernetes\""), "{b}");
        assert!(b.contains("secret_suffix     = \"prod-eu-tc\""), "{b}");
        assert!(b.contains("namespace         = \"team-a\""), "{b}");
        assert!(b.contains("host              = \"http://127.0.0.1:4000\""), "{b}");
        assert!(b.contains("in_cluster_config = false"), "{b}");
        assert_eq!(b.matches('{').count(), b.matches('}').count());
    }

    #[test]
    fn variables_file_is_0600_and_holds_the_variables() {
        let d = tempfile::tempdir().unwrap();
        write_config(
            d.path(),
            "x-tc",
            "default",
            "http://127.0.0.1:1",
            &inputs(json!({"token": "s3cr3t", "n": 3})),
        )
        .unwrap();
        let path = d.path().join(VARIABLES_FILE);
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let back: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        assert_eq!(back, json!({"token": "s3cr3t", "n": 3}));
        assert!(d.path().join(BACKEND_FILE).exists());
    }

    #[test]
    fn a_module_variables_file_is_replaced_with_mode_0600() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(VARIABLES_FILE);
        fs::write(&path, "{\"old\": 1}").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        write_config(
            d.path(),
            "x-tc",
            "default",
            "http://127.0.0.1:1",
            &inputs(json!({"new": 2})),
        )
        .unwrap();
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(!fs::read_to_string(&path).unwrap().contains("old"));
    }

    #[test]
    fn a_module_backend_file_is_never_overwritten() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join(BACKEND_FILE), "terraform {}").unwrap();
        let err = write_config(d.path(), "x-tc", "default", "http://127.0.0.1:1", &inputs(json!({}))).unwrap_err();
        assert!(matches!(err, WorkdirError::BackendExists { .. }), "{err}");
        assert_eq!(fs::read_to_string(d.path().join(BACKEND_FILE)).unwrap(), "terraform {}");
    }

    #[test]
    fn a_given_work_dir_must_be_empty() {
        let d = tempfile::tempdir().unwrap();
        let wd = d.path().join("w");
        assert_eq!(prepare(Some(&wd)).unwrap(), wd);
        fs::write(wd.join(".hidden"), "").unwrap();
        assert!(matches!(prepare(Some(&wd)), Err(WorkdirError::NotEmpty { .. })));
    }

    #[test]
    fn a_fresh_work_dir_is_removed_and_a_given_one_emptied() {
        let base = tempfile::tempdir().unwrap();
        let given = base.path().join("mount");
        fs::create_dir_all(given.join(".terraform/providers")).unwrap();
        fs::write(given.join("terraform.tfvars.json"), "{}").unwrap();
        remove(&given, true).unwrap();
        assert!(given.is_dir(), "the mount point stays");
        assert_eq!(fs::read_dir(&given).unwrap().count(), 0);
        let fresh = fresh_dir(base.path()).unwrap();
        fs::write(fresh.join("plan"), "x").unwrap();
        remove(&fresh, false).unwrap();
        assert!(!fresh.exists());
    }

    #[test]
    fn fresh_work_dirs_are_distinct() {
        let d = tempfile::tempdir().unwrap();
        let a = fresh_dir(d.path()).unwrap();
        let b = fresh_dir(d.path()).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn inputs_are_read_from_inputs_json() {
        let d = tempfile::tempdir().unwrap();
        fs::write(
            d.path().join("inputs.json"),
            r#"{"module":{"source":"registry.example.com/a/b/c"},"variables":{"x":1}}"#,
        )
        .unwrap();
        let i = read_inputs(d.path()).unwrap();
        assert_eq!(i.module.source, "registry.example.com/a/b/c");
        assert_eq!(i.variables.get("x"), Some(&json!(1)));
    }

    #[test]
    fn unreadable_or_bad_inputs_name_the_file() {
        let d = tempfile::tempdir().unwrap();
        let err = read_inputs(&d.path().join("missing")).unwrap_err().to_string();
        assert!(err.starts_with("failed to read inputs "), "{err}");
        assert!(err.contains("missing/inputs.json"), "{err}");
        fs::write(d.path().join("inputs.json"), "not json").unwrap();
        let err = read_inputs(d.path()).unwrap_err().to_string();
        assert!(err.starts_with("failed to parse inputs "), "{err}");
        fs::write(
            d.path().join("inputs.json"),
            r#"{"module":{"source":" "},"variables":{}}"#,
        )
        .unwrap();
        assert!(matches!(read_inputs(d.path()), Err(WorkdirError::EmptySource { .. })));
    }
}

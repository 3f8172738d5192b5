//! The platform's policies on plans (docs/policy.md): the `.rego` files of one directory (the
//! chart mounts the ConfigMaps `planPolicies.configMaps` names there), read again before every
//! apply Job, so a changed ConfigMap reaches the next plan without a restart and without an API
//! request. They go to the runner beside the object's own (`spec.guard.policyRefs`).

use std::path::Path;

use captf_shared::limits::MAX_PLAN_POLICY_BYTES;
use captf_shared::protocol::PlanPolicy;

/// The most files the directory may hold (a directory of thousands is a mistake, not policy).
const MAX_FILES: usize = 256;

/// The policies in `dir`: every regular file (or link to one, as a mounted ConfigMap's keys are)
/// whose name ends in `.rego`, sorted by name, named `platform:<file>`. Names starting with `..`
/// are the kubelet's own (`..data`). An error names the directory and why: the caller starts no
/// apply without the platform's policies.
pub fn load(dir: &Path) -> Result<Vec<PlanPolicy>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut names: Vec<String> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") || !name.ends_with(".rego") {
            continue;
        }
        if names.len() == MAX_FILES {
            return Err(format!("{}: more than {MAX_FILES} .rego files", dir.display()));
        }
        names.push(name);
    }
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    let mut size = 0usize;
    for name in names {
        let path = dir.join(&name);
        let meta = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if !meta.is_file() {
            continue;
        }
        size = size.saturating_add(usize::try_from(meta.len()).unwrap_or(usize::MAX));
        if size > MAX_PLAN_POLICY_BYTES {
            return Err(format!(
                "{}: the policies are more than {MAX_PLAN_POLICY_BYTES} bytes together",
                dir.display()
            ));
        }
        let source = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        out.push(PlanPolicy {
            name: format!("platform:{name}"),
            source,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_platforms_policies_are_the_rego_files_of_the_directory_by_name() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("b.rego"), "package main").unwrap();
        std::fs::write(d.path().join("a.rego"), "package main.a").unwrap();
        std::fs::write(d.path().join("README"), "not a policy").unwrap();
        std::fs::create_dir(d.path().join("..data")).unwrap();
        let got = load(d.path()).unwrap();
        let names: Vec<&str> = got.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["platform:a.rego", "platform:b.rego"]);
        assert_eq!(got[0].source, "package main.a");
    }

    #[test]
    fn a_directory_that_cannot_be_read_or_holds_too_much_is_an_error() {
        assert!(
            load(Path::new("/nonexistent/captf"))
                .unwrap_err()
                .contains("/nonexistent/captf")
        );
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("big.rego"), "#".repeat(MAX_PLAN_POLICY_BYTES + 1)).unwrap();
        assert!(load(d.path()).unwrap_err().contains("bytes together"));
    }
}

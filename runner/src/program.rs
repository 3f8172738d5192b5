//! Which program `CAPTF_TF_BINARY` runs, asked before anything else (`<binary> version`): a
//! runner image without the binary, or with another program under its name, fails `init` with a
//! message naming `CAPTF_TF_BINARY` instead of a confusing error later, and never hangs.
//!
//! What is expected follows from the binary's file name (`tofu…` is OpenTofu, `terraform…` is
//! Terraform, anything else either), and `spec.stateEncryption` needs OpenTofu whatever the name.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// How long `version` may take. It reads no state and reaches no network
/// (`CHECKPOINT_DISABLE`), so a program that does not answer in this time is not the one asked for.
pub const VERSION_TIMEOUT: Duration = Duration::from_secs(30);
/// The most of `version`'s output read.
const MAX_OUTPUT: usize = 4096;

/// What `<binary> version` said it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Program {
    OpenTofu {
        major: u64,
        minor: u64,
    },
    Terraform,
    /// Neither: the first line it printed (cut).
    Other(String),
}

impl std::fmt::Display for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Program::OpenTofu { major, minor } => write!(f, "OpenTofu {major}.{minor}"),
            Program::Terraform => write!(f, "Terraform"),
            Program::Other(first) if first.is_empty() => write!(f, "a program that prints nothing for version"),
            Program::Other(first) => write!(f, "a program that prints {first:?} for version"),
        }
    }
}

/// The program from `version`'s output: its line `OpenTofu v1.12.6` or `Terraform v1.0.3`.
/// OpenTofu prints its CLI configuration warnings before that line (a `TF_CLI_CONFIG_FILE` that
/// does not exist), so every line is looked at; a program that prints neither is named by its
/// first non-empty line.
pub fn parse(version_output: &str) -> Program {
    for line in version_output.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix("OpenTofu v") {
            let mut parts = v.split(['.', '-']).map(|n| n.parse::<u64>().ok());
            if let (Some(Some(major)), Some(Some(minor))) = (parts.next(), parts.next()) {
                return Program::OpenTofu { major, minor };
            }
        }
        if line.starts_with("Terraform v") {
            return Program::Terraform;
        }
    }
    let first = version_output
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    Program::Other(first.chars().take(80).collect())
}

/// What the binary's name promises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    OpenTofu,
    Terraform,
    /// A name that is neither (`/opt/bin/tf`): either program will do.
    Either,
}

/// The program a binary of this name is expected to be.
pub fn expected(binary: &str) -> Expected {
    let name = Path::new(binary)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name == "tofu" || name.starts_with("tofu-") || name.starts_with("tofu_") {
        Expected::OpenTofu
    } else if name == "terraform" || name.starts_with("terraform-") || name.starts_with("terraform_") {
        Expected::Terraform
    } else {
        Expected::Either
    }
}

/// Why the found program is not what the binary's name promises, or `None` (PURE).
pub fn mismatch(binary: &str, found: &Program) -> Option<String> {
    let ok = match (expected(binary), found) {
        (_, Program::Other(_)) => false,
        (Expected::Either, _) => true,
        (Expected::OpenTofu, Program::OpenTofu { .. }) => true,
        (Expected::Terraform, Program::Terraform) => true,
        _ => false,
    };
    (!ok).then(|| {
        let want = match expected(binary) {
            Expected::OpenTofu => "OpenTofu",
            Expected::Terraform => "Terraform",
            Expected::Either => "OpenTofu or Terraform",
        };
        format!(
            "CAPTF_TF_BINARY is {binary}, which runs {found}, not {want}; the runner image must have the program the object's spec.jobs.binary (or the image's own CAPTF_TF_BINARY) names"
        )
    })
}

/// Run `<binary> version` and tell which program it is; every way it can fail says so, naming
/// `CAPTF_TF_BINARY`.
pub async fn probe(binary: &str, dir: &Path) -> Result<Program, String> {
    probe_within(binary, dir, VERSION_TIMEOUT).await
}

/// [`probe`] with its patience as a parameter.
pub async fn probe_within(binary: &str, dir: &Path, patience: Duration) -> Result<Program, String> {
    let child = tokio::process::Command::new(binary)
        .arg("version")
        .current_dir(dir)
        .env("CHECKPOINT_DISABLE", "1")
        .env("TF_IN_AUTOMATION", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!("CAPTF_TF_BINARY is {binary}, which is not found (is it installed in the runner image, and on its PATH?)")
            } else {
                format!("CAPTF_TF_BINARY is {binary}, which cannot be started: {e}")
            }
        })?;
    let out = tokio::time::timeout(patience, child.wait_with_output())
        .await
        .map_err(|_| {
            format!(
                "CAPTF_TF_BINARY is {binary}, which did not answer `version` within {:?}; it is not OpenTofu or Terraform",
                patience
            )
        })?
        .map_err(|e| format!("CAPTF_TF_BINARY is {binary}: reading its `version` failed: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout[..out.stdout.len().min(MAX_OUTPUT)]).into_owned();
    Ok(parse(&text))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, body: &str) -> String {
        let path = dir.join("tofu");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    #[tokio::test]
    async fn a_binary_that_never_answers_version_is_given_up_on() {
        let d = tempfile::tempdir().unwrap();
        let bin = script(d.path(), "exec sleep 30");
        let why = probe_within(&bin, d.path(), Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(
            why.starts_with(&format!(
                "CAPTF_TF_BINARY is {bin}, which did not answer `version` within"
            )),
            "{why}"
        );
    }

    #[tokio::test]
    async fn a_missing_binary_is_named_with_captf_tf_binary() {
        let d = tempfile::tempdir().unwrap();
        let why = probe("/nonexistent/bin/tofu", d.path()).await.unwrap_err();
        assert!(
            why.starts_with("CAPTF_TF_BINARY is /nonexistent/bin/tofu, which is not found"),
            "{why}"
        );
    }

    #[tokio::test]
    async fn the_answer_of_version_is_parsed() {
        let d = tempfile::tempdir().unwrap();
        let bin = script(d.path(), "echo 'OpenTofu v1.12.6'; echo 'on linux_amd64'");
        assert_eq!(
            probe(&bin, d.path()).await.unwrap(),
            Program::OpenTofu { major: 1, minor: 12 }
        );
    }

    #[test]
    fn the_program_is_told_from_its_version_line_after_any_warnings() {
        assert_eq!(
            parse("OpenTofu v1.12.6\non linux_amd64\n"),
            Program::OpenTofu { major: 1, minor: 12 }
        );
        assert_eq!(
            parse("OpenTofu v1.10.0-beta1\n"),
            Program::OpenTofu { major: 1, minor: 10 }
        );
        assert_eq!(parse("Terraform v1.0.3\non linux_amd64\n"), Program::Terraform);
        assert_eq!(
            parse(
                "\nWarning: Unable to open CLI configuration file\n\nThe CLI configuration file at \"/root/.terraformrc\" does not exist.\nOpenTofu v1.12.6\non linux_amd64"
            ),
            Program::OpenTofu { major: 1, minor: 12 }
        );
        assert_eq!(parse("\nhello\nworld\n"), Program::Other("hello".into()));
        assert_eq!(parse(""), Program::Other(String::new()));
    }

    #[test]
    fn the_binarys_name_says_which_program_is_expected() {
        assert_eq!(expected("tofu"), Expected::OpenTofu);
        assert_eq!(expected("/work/main/.tools/bin/tofu-1.12"), Expected::OpenTofu);
        assert_eq!(expected("terraform"), Expected::Terraform);
        assert_eq!(expected("/image/bin/terraform"), Expected::Terraform);
        assert_eq!(expected("/opt/bin/tf"), Expected::Either);
    }

    #[test]
    fn a_binary_running_another_program_than_its_name_promises_is_refused_naming_captf_tf_binary() {
        let tofu = Program::OpenTofu { major: 1, minor: 12 };
        assert_eq!(mismatch("tofu", &tofu), None);
        assert_eq!(mismatch("terraform", &Program::Terraform), None);
        assert_eq!(mismatch("/opt/bin/tf", &Program::Terraform), None);
        assert_eq!(mismatch("/opt/bin/tf", &tofu), None);
        for (binary, found) in [
            ("tofu", Program::Terraform),
            ("terraform", tofu.clone()),
            ("/opt/bin/tf", Program::Other("hello".into())),
            ("tofu", Program::Other(String::new())),
        ] {
            let why = mismatch(binary, &found).expect("refused");
            assert!(
                why.starts_with(&format!("CAPTF_TF_BINARY is {binary}, which runs ")),
                "{why}"
            );
        }
    }
}

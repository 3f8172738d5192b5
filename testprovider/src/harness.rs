//! Running real Terraform and OpenTofu in tests: the pinned binaries, the test provider
//! installed through a filesystem mirror (the mechanism air-gapped users rely on), and a module
//! using it.
//!
//! The binaries come from `$CAPTF_TOOLS_BIN`, else `<workspace>/.tools/bin`, where
//! `scripts/setup-tools.sh` installs Terraform [`TERRAFORM_VERSION`] as `terraform` and builds
//! each pinned OpenTofu as `tofu-<minor>` (from the wrapper module `realparts/opentofu-<minor>`,
//! whose `go.mod` holds the pin). `PATH` is never searched, so a different binary on the machine
//! cannot stand in for a pinned one.

use std::path::{Path, PathBuf};

/// The Terraform version `scripts/setup-tools.sh` installs and the tests run.
pub const TERRAFORM_VERSION: &str = "1.0.3";

/// The module path of OpenTofu, as the wrappers' `go.mod` files require it.
pub const OPENTOFU_MODULE: &str = "github.com/opentofu/opentofu";

/// One Terraform-compatible binary the real-binary tests run: Terraform 1.0.3, or one pinned
/// OpenTofu minor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binary {
    /// Terraform [`TERRAFORM_VERSION`], `.tools/bin/terraform`.
    Terraform,
    /// OpenTofu of this minor (`"1.12"`): `.tools/bin/tofu-<minor>`, built from
    /// `realparts/opentofu-<minor>`.
    Tofu(&'static str),
}

/// The binaries every real-binary test runs on, oldest first; `tofu` (the runner's default) is
/// the newest OpenTofu.
pub const MATRIX: [Binary; 3] = [Binary::Terraform, Binary::Tofu("1.10"), Binary::Tofu("1.12")];

/// The OpenTofu the runner runs by default (`.tools/bin/tofu` links to it).
pub const DEFAULT_TOFU: Binary = Binary::Tofu("1.12");

impl Binary {
    /// The file name in the tools folder (`terraform`, `tofu-1.12`).
    pub fn file_name(self) -> String {
        match self {
            Binary::Terraform => "terraform".to_string(),
            Binary::Tofu(minor) => format!("tofu-{minor}"),
        }
    }

    /// Is it OpenTofu?
    pub fn is_tofu(self) -> bool {
        matches!(self, Binary::Tofu(_))
    }

    /// Where the binary is (it may not exist: [`Binary::path`] checks).
    pub fn location(self) -> PathBuf {
        tools_bin().join(self.file_name())
    }

    /// The installed binary, or an error saying how to get it.
    pub fn path(self) -> Result<PathBuf, HarnessError> {
        let path = self.location();
        if path.is_file() {
            Ok(path)
        } else {
            Err(HarnessError::NoBinary {
                binary: self.to_string(),
                path,
            })
        }
    }

    /// The wrapper module an OpenTofu is built from (`realparts/opentofu-<minor>`).
    pub fn wrapper(self) -> Option<PathBuf> {
        match self {
            Binary::Terraform => None,
            Binary::Tofu(minor) => Some(workspace_root().join(format!("realparts/opentofu-{minor}"))),
        }
    }

    /// The version the binary must report (and write into its lock info): Terraform's pin, or
    /// the OpenTofu version its wrapper's `go.mod` requires, without the `v`.
    pub fn version(self) -> Result<String, HarnessError> {
        let Some(wrapper) = self.wrapper() else {
            return Ok(TERRAFORM_VERSION.to_string());
        };
        let go_mod = wrapper.join("go.mod");
        let text = std::fs::read_to_string(&go_mod).map_err(io(&go_mod))?;
        required_version(&text, OPENTOFU_MODULE)
            .map(|v| v.trim_start_matches('v').to_string())
            .ok_or(HarnessError::NoPin {
                module: OPENTOFU_MODULE,
                go_mod,
            })
    }
}

impl std::fmt::Display for Binary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Binary::Terraform => write!(f, "Terraform {TERRAFORM_VERSION}"),
            Binary::Tofu(minor) => write!(f, "OpenTofu {minor}"),
        }
    }
}

/// The version of `module` a `go.mod` requires (`v1.12.6`), in a `require` line or block.
pub fn required_version(go_mod: &str, module: &str) -> Option<String> {
    let mut in_block = false;
    for line in go_mod.lines() {
        let line = line.split("//").next().unwrap_or("").trim();
        let entry = if in_block {
            if line == ")" {
                in_block = false;
                continue;
            }
            line
        } else if line == "require (" {
            in_block = true;
            continue;
        } else if let Some(rest) = line.strip_prefix("require ") {
            rest.trim()
        } else {
            continue;
        };
        let mut parts = entry.split_whitespace();
        if parts.next() == Some(module) {
            return parts.next().map(str::to_string);
        }
    }
    None
}

/// Where the pinned binaries are: `$CAPTF_TOOLS_BIN`, else `<workspace>/.tools/bin`.
pub fn tools_bin() -> PathBuf {
    std::env::var_os("CAPTF_TOOLS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".tools/bin"))
}
/// The provider's source address in modules.
pub const PROVIDER_SOURCE: &str = "captf.io/test/captftest";
/// The version the mirror offers.
pub const PROVIDER_VERSION: &str = "0.1.0";
/// The provider binary's name.
pub const PROVIDER_BINARY: &str = "terraform-provider-captftest";

/// A module with one thing: `name` replaces it, `content` changes it in place; its outputs are
/// an `endpoint` built from the thing's id and a `secret` marked sensitive.
pub const THING_MODULE: &str = r#"terraform {
  required_providers {
    captftest = { source = "captf.io/test/captftest" }
  }
}

variable "name" {
  type = string
}

variable "content" {
  type    = string
  default = ""
}

resource "captftest_thing" "main" {
  name    = var.name
  content = var.content
}

output "endpoint" {
  value = "${captftest_thing.main.id}.example:6443"
}

output "secret" {
  value     = "s3cr3t-${var.name}"
  sensitive = true
}
"#;

#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("{binary} not found at {path}: run `bash scripts/setup-tools.sh` (or set CAPTF_TOOLS_BIN)")]
    NoBinary { binary: String, path: PathBuf },
    #[error("{go_mod} does not require {module}")]
    NoPin { module: &'static str, go_mod: PathBuf },
    #[error("{name} not found at {path}: build it with `cargo build -p {package}` (cargo test --workspace does)")]
    NoWorkspaceBinary {
        name: String,
        package: String,
        path: PathBuf,
    },
    #[error("failed to find the running program's own executable: {0}")]
    CurrentExe(std::io::Error),
    #[error("tar failed to pack {path}: {stderr}")]
    Tar { path: PathBuf, stderr: String },
    #[error("failed to prepare {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{what} does not exist: {how}")]
    Missing { what: String, how: String },
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HarnessError + '_ {
    move |source| HarnessError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The pinned Terraform binary.
pub fn terraform() -> Result<PathBuf, HarnessError> {
    Binary::Terraform.path()
}

/// The provider binary, built into the same target directory as the running program
/// (`target/<profile>/deps/<test>` or `target/<profile>/<bin>` →
/// `target/<profile>/terraform-provider-captftest`).
pub fn provider() -> Result<PathBuf, HarnessError> {
    workspace_binary(PROVIDER_BINARY, "captf-testprovider")
}

/// The test provider built as a static binary for `x86_64-unknown-linux-musl` (`cargo build -p
/// captf-testprovider --bin terraform-provider-captftest --target x86_64-unknown-linux-musl`), for
/// a root filesystem that holds only its own programs' libraries (a released image), as a real
/// provider, a static Go binary, needs none.
pub fn static_provider() -> Result<PathBuf, HarnessError> {
    let host = workspace_binary(PROVIDER_BINARY, "captf-testprovider").or_else(|e| match e {
        // Only its folder matters here.
        HarnessError::NoWorkspaceBinary { path, .. } => Ok(path),
        other => Err(other),
    })?;
    let profile = host
        .parent()
        .and_then(Path::file_name)
        .map(PathBuf::from)
        .unwrap_or_default();
    let target_dir = host.parent().and_then(Path::parent).unwrap_or(Path::new("target"));
    let path = target_dir
        .join("x86_64-unknown-linux-musl")
        .join(profile)
        .join(PROVIDER_BINARY);
    if path.is_file() {
        Ok(path)
    } else {
        Err(HarnessError::Missing {
            what: format!("the static test provider {}", path.display()),
            how: "cargo build -p captf-testprovider --bin terraform-provider-captftest --target x86_64-unknown-linux-musl".into(),
        })
    }
}

/// A binary of this workspace (`name`, of the package `package`), built into the same target
/// directory as the running test or program.
pub fn workspace_binary(name: &str, package: &str) -> Result<PathBuf, HarnessError> {
    let exe = std::env::current_exe().map_err(HarnessError::CurrentExe)?;
    let profile_dir = exe
        .parent()
        .and_then(|deps| {
            if deps.ends_with("deps") {
                deps.parent()
            } else {
                Some(deps)
            }
        })
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let path = profile_dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(HarnessError::NoWorkspaceBinary {
            name: name.to_string(),
            package: package.to_string(),
            path,
        })
    }
}

/// A folder for one test: the provider mirror, the CLI configuration, the world and modules.
pub struct Sandbox {
    root: tempfile::TempDir,
    /// Which binary [`Sandbox::terraform`] is.
    pub binary: Binary,
    /// The binary's path (Terraform or OpenTofu).
    pub terraform: PathBuf,
    pub world: PathBuf,
    pub cli_config: PathBuf,
}

impl Sandbox {
    /// A sandbox for Terraform [`TERRAFORM_VERSION`].
    pub fn new() -> Result<Sandbox, HarnessError> {
        Sandbox::with(Binary::Terraform)
    }

    /// A sandbox for `binary`.
    pub fn with(binary: Binary) -> Result<Sandbox, HarnessError> {
        let terraform = binary.path()?;
        let provider = provider()?;
        let root = tempfile::tempdir().map_err(io(Path::new("<temp dir>")))?;
        let base = root.path().to_path_buf();
        let target = base.join(format!(
            "mirror/{PROVIDER_SOURCE}/{PROVIDER_VERSION}/linux_amd64/{PROVIDER_BINARY}_v{PROVIDER_VERSION}"
        ));
        let target_dir = target.parent().unwrap_or(&base).to_path_buf();
        std::fs::create_dir_all(&target_dir).map_err(io(&target_dir))?;
        // A copy, not a link: a `cargo build` elsewhere (the demo's) may replace the built
        // provider while this sandbox's Terraform has its checksum in a lock file, and a changed
        // package fails every later init of the sandbox.
        std::fs::copy(&provider, &target).map_err(io(&target))?;
        let cli_config = base.join("terraform.tfrc");
        let mirror = base.join("mirror");
        let text = format!(
            "# Providers come only from this mirror: no network.\nprovider_installation {{\n  filesystem_mirror {{\n    path    = \"{}\"\n    include = [\"captf.io/*/*\"]\n  }}\n}}\n",
            mirror.display()
        );
        std::fs::write(&cli_config, text).map_err(io(&cli_config))?;
        let world = base.join("world");
        std::fs::create_dir_all(&world).map_err(io(&world))?;
        Ok(Sandbox {
            root,
            binary,
            terraform,
            world,
            cli_config,
        })
    }

    pub fn path(&self) -> &Path {
        self.root.path()
    }

    /// Write a module (`main.tf`) into `modules/<name>` and return its folder.
    pub fn module(&self, name: &str, main_tf: &str) -> Result<PathBuf, HarnessError> {
        let dir = self.path().join("modules").join(name);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let file = dir.join("main.tf");
        std::fs::write(&file, main_tf).map_err(io(&file))?;
        Ok(dir)
    }

    /// The environment Terraform (and so the provider) needs: the CLI configuration with the
    /// mirror, no update check, and the world.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("TF_CLI_CONFIG_FILE".into(), self.cli_config.display().to_string()),
            ("CHECKPOINT_DISABLE".into(), "1".into()),
            ("TF_IN_AUTOMATION".into(), "1".into()),
            (crate::world::WORLD_ENV.into(), self.world.display().to_string()),
        ]
    }

    /// The thing `name` as the world holds it.
    pub fn thing(&self, name: &str) -> Option<crate::world::Thing> {
        crate::world::World::new(&self.world).read(name).ok().flatten()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn required_version_reads_a_require_line_or_block_and_ignores_other_modules() {
        let block = "module x\n\ngo 1.26\n\nrequire (\n\tgithub.com/a/b v0.1.0 // indirect\n\tgithub.com/opentofu/opentofu v1.12.6 // indirect\n)\n";
        assert_eq!(required_version(block, OPENTOFU_MODULE).as_deref(), Some("v1.12.6"));
        let line = "module x\nrequire github.com/opentofu/opentofu v1.10.10\n";
        assert_eq!(required_version(line, OPENTOFU_MODULE).as_deref(), Some("v1.10.10"));
        let other = "module x\nrequire github.com/opentofu/opentofu-extra v9.9.9\nreplace github.com/opentofu/opentofu v1.0.0 => ../x\n";
        assert_eq!(required_version(other, OPENTOFU_MODULE), None);
    }

    /// The runner image ships the OpenTofu the tests run by default, so what users pull is what
    /// was tested.
    #[test]
    fn the_runner_images_dockerfile_pins_the_default_opentofu() {
        let path = workspace_root().join("runner/Dockerfile");
        let text = std::fs::read_to_string(&path).unwrap();
        let pinned: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("ARG TOFU_VERSION="))
            .collect();
        assert_eq!(pinned, [DEFAULT_TOFU.version().unwrap().as_str()], "{}", path.display());
    }

    /// Every wrapper under `realparts/opentofu-*` is in [`MATRIX`] and the other way round, so a
    /// newly pinned OpenTofu cannot go untested and a test cannot name a binary nobody builds.
    #[test]
    fn the_matrix_has_exactly_the_pinned_opentofu_wrappers_and_the_default_is_the_newest() {
        let mut wrappers: Vec<String> = std::fs::read_dir(workspace_root().join("realparts"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix("opentofu-"))
                    .map(str::to_string)
            })
            .collect();
        let key = |m: &String| -> Vec<u32> { m.split('.').map(|p| p.parse().unwrap()).collect() };
        wrappers.sort_by_key(key);
        let in_matrix: Vec<String> = MATRIX
            .iter()
            .filter_map(|b| match b {
                Binary::Tofu(minor) => Some(minor.to_string()),
                Binary::Terraform => None,
            })
            .collect();
        assert_eq!(in_matrix, wrappers);
        assert_eq!(
            MATRIX.last(),
            Some(&DEFAULT_TOFU),
            "the default is the newest pinned OpenTofu"
        );
        for b in MATRIX.iter().filter(|b| b.is_tofu()) {
            let v = b.version().unwrap();
            let Binary::Tofu(minor) = b else { unreachable!() };
            assert!(v.starts_with(&format!("{minor}.")), "{b}: wrapper pins {v}");
        }
    }
}

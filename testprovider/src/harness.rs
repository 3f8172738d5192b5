//! Running real Terraform in tests: the pinned binary, the test provider installed through a
//! filesystem mirror (the mechanism air-gapped users rely on), and a module using it.
//!
//! Terraform comes from `$CAPTF_TOOLS_BIN/terraform`, else `<workspace>/.tools/bin/terraform`,
//! where `scripts/setup-tools.sh` installs version [`TERRAFORM_VERSION`]. `PATH` is never
//! searched, so a different Terraform on the machine cannot stand in for the pinned one.

use std::path::{Path, PathBuf};

/// The Terraform version `scripts/setup-tools.sh` installs and the tests run.
pub const TERRAFORM_VERSION: &str = "1.0.3";
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
    #[error(
        "Terraform {TERRAFORM_VERSION} not found at {0}: run `bash scripts/setup-tools.sh` (or set CAPTF_TOOLS_BIN)"
    )]
    NoTerraform(PathBuf),
    #[error("{name} not found at {path}: build it with `cargo build -p {package}` (cargo test --workspace does)")]
    NoBinary {
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
    let dir = std::env::var_os("CAPTF_TOOLS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".tools/bin"));
    let path = dir.join("terraform");
    if path.is_file() {
        Ok(path)
    } else {
        Err(HarnessError::NoTerraform(path))
    }
}

/// The provider binary, built into the same target directory as the running program
/// (`target/<profile>/deps/<test>` or `target/<profile>/<bin>` →
/// `target/<profile>/terraform-provider-captftest`).
pub fn provider() -> Result<PathBuf, HarnessError> {
    workspace_binary(PROVIDER_BINARY, "captf-testprovider")
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
        Err(HarnessError::NoBinary {
            name: name.to_string(),
            package: package.to_string(),
            path,
        })
    }
}

/// A folder for one test: the provider mirror, the CLI configuration, the world and modules.
pub struct Sandbox {
    root: tempfile::TempDir,
    pub terraform: PathBuf,
    pub world: PathBuf,
    pub cli_config: PathBuf,
}

impl Sandbox {
    pub fn new() -> Result<Sandbox, HarnessError> {
        let terraform = terraform()?;
        let provider = provider()?;
        let root = tempfile::tempdir().map_err(io(Path::new("<temp dir>")))?;
        let base = root.path().to_path_buf();
        let target = base.join(format!(
            "mirror/{PROVIDER_SOURCE}/{PROVIDER_VERSION}/linux_amd64/{PROVIDER_BINARY}_v{PROVIDER_VERSION}"
        ));
        let target_dir = target.parent().unwrap_or(&base).to_path_buf();
        std::fs::create_dir_all(&target_dir).map_err(io(&target_dir))?;
        std::os::unix::fs::symlink(&provider, &target).map_err(io(&target))?;
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

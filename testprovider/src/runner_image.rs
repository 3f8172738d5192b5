//! The runner's image for the simulator's process kubelet, and the modules it fetches: what the
//! real-runner scenarios and the demo share to run real Terraform in a runner pod.
//!
//! [`runner_image`] assembles a [`ProcessImage`] the way `runner/Dockerfile` builds the real
//! one: the `captf-runner` binary as the entrypoint, the default OpenTofu
//! ([`harness::DEFAULT_TOFU`], the one the real image ships; [`runner_image_with`] takes another
//! binary, Terraform 1.0.3 included), the test provider in a filesystem mirror (no network), a
//! `terraform.tfrc` naming that mirror, and the non-root user [`RUNNER_USER`]. A "world" folder
//! for the test provider is shared with every runner at [`WORLD_INSIDE`]: the caller reads and
//! edits it from outside ([`crate::world::World`]) to see what Terraform did or to make drift.
//!
//! [`ModuleServer`] serves `.tar.gz` archives ([`tar_gz`]) over HTTP on 127.0.0.1: OpenTofu and
//! Terraform 1.0.3 fetch `http://…/x.tar.gz` with `init -from-module` and unpack it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use captf_sim::ProcessImage;

use crate::harness::{self, Binary, HarnessError, PROVIDER_BINARY, PROVIDER_SOURCE, PROVIDER_VERSION, io};

/// The runner image's user and group (as `runner/Dockerfile` sets them).
pub const RUNNER_USER: (u32, u32) = (65532, 65532);
/// Where the runner finds its own binary inside the container (the image's entrypoint).
pub const RUNNER_INSIDE: &str = "/image/bin/captf-runner";
/// Where the world folder is inside the container.
pub const WORLD_INSIDE: &str = "/world";

/// A module with one thing of the test provider: `name` replaces it, `content` changes it in
/// place; its `control_plane_endpoint` output is built from the thing's id.
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

output "control_plane_endpoint" {
  value = { host = "${captftest_thing.main.id}.example", port = 6443 }
}
"#;

/// The runner's image and the folder its test provider manages.
pub struct RunnerImage {
    /// Add `.env(…)` to it for more (e.g. [`crate::world::HOLD_ENV`]).
    pub image: ProcessImage,
    /// The world folder on this machine (seen at [`WORLD_INSIDE`] by every runner).
    pub world: PathBuf,
    /// The binary the image runs, and its version (`OpenTofu 1.12.6`).
    pub binary: Binary,
    pub version: String,
}

impl RunnerImage {
    /// `OpenTofu 1.12.6`, `Terraform 1.0.3`: what the image's real Jobs run.
    pub fn describe(&self) -> String {
        match self.binary {
            Binary::Terraform => format!("Terraform {}", self.version),
            Binary::Tofu(_) => format!("OpenTofu {}", self.version),
        }
    }
}

/// The runner's image with the default OpenTofu, as the real image ships it.
pub fn runner_image(dir: &Path) -> Result<RunnerImage, HarnessError> {
    runner_image_with(dir, harness::DEFAULT_TOFU)
}

/// The runner's image with `binary`, with its `terraform.tfrc` and world folder made under
/// `dir`. The runner binary and the provider come from the running program's target folder
/// ([`harness::workspace_binary`]), the binary from `.tools/bin` ([`Binary::path`]); each error
/// says which one is missing and how to get it.
pub fn runner_image_with(dir: &Path, binary: Binary) -> Result<RunnerImage, HarnessError> {
    let runner = harness::workspace_binary("captf-runner", "captf-runner")?;
    let program = binary.path()?;
    let version = binary.version()?;
    let inside = match binary {
        Binary::Terraform => "/image/bin/terraform",
        Binary::Tofu(_) => "/image/bin/tofu",
    };
    let additions = TestAdditions::make(dir, harness::provider()?)?;
    let image = additions.add_to(
        ProcessImage::new(RUNNER_INSIDE)
            .file(RUNNER_INSIDE, runner)
            .file(inside, program)
            .env("CAPTF_TF_BINARY", inside)
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_IN_AUTOMATION", "1")
            .user(RUNNER_USER.0, RUNNER_USER.1)
            .working_dir("/tmp")
            .env("HOME", "/tmp")
            .env("TMPDIR", "/tmp"),
    );
    Ok(RunnerImage {
        image,
        world: additions.world,
        binary,
        version,
    })
}

/// The released runner image itself: `reference` (the version) of the OCI archive `archive`
/// (`dist/images/runner.oci.tar` of `scripts/release.sh`), its own runner, OpenTofu, user and
/// environment, with only the test provider's mirror (its static build,
/// [`harness::static_provider`]: the image has no other program's libraries), its
/// `terraform.tfrc` and the world folder added (bound read-only under `/image` and at [`WORLD_INSIDE`]), as a cluster would add a
/// provider mirror through a volume. The image ships the default OpenTofu
/// ([`harness::DEFAULT_TOFU`]), whose version this reports.
pub fn released_runner_image(dir: &Path, archive: &Path, reference: &str) -> Result<RunnerImage, HarnessError> {
    if !archive.is_file() {
        return Err(HarnessError::Missing {
            what: format!("the runner image archive {}", archive.display()),
            how: "build a release first: scripts/release.sh <version> (it writes dist/images/runner.oci.tar)".into(),
        });
    }
    let binary = harness::DEFAULT_TOFU;
    let version = binary.version()?;
    let additions = TestAdditions::make(dir, harness::static_provider()?)?;
    let image = additions.add_to(ProcessImage::oci(archive, reference));
    Ok(RunnerImage {
        image,
        world: additions.world,
        binary,
        version,
    })
}

/// What a test adds to a runner image: the test provider in a filesystem mirror, a
/// `terraform.tfrc` that names it, and the world folder.
struct TestAdditions {
    provider: PathBuf,
    tfrc: PathBuf,
    world: PathBuf,
}

impl TestAdditions {
    fn make(dir: &Path, provider: PathBuf) -> Result<TestAdditions, HarnessError> {
        let world = dir.join("world");
        std::fs::create_dir_all(&world).map_err(io(&world))?;
        // The runner runs as its non-root user; the world is shared with it.
        std::fs::set_permissions(&world, std::fs::Permissions::from_mode(0o777)).map_err(io(&world))?;
        let tfrc = dir.join("terraform.tfrc");
        std::fs::write(
            &tfrc,
            "provider_installation {\n  filesystem_mirror {\n    path    = \"/image/mirror\"\n    include = [\"captf.io/*/*\"]\n  }\n}\n",
        )
        .map_err(io(&tfrc))?;
        Ok(TestAdditions { provider, tfrc, world })
    }

    fn add_to(&self, image: ProcessImage) -> ProcessImage {
        let mirror_file = format!(
            "/image/mirror/{PROVIDER_SOURCE}/{PROVIDER_VERSION}/linux_amd64/{PROVIDER_BINARY}_v{PROVIDER_VERSION}"
        );
        image
            .file(mirror_file, &self.provider)
            .file("/image/terraform.tfrc", &self.tfrc)
            .file(WORLD_INSIDE, &self.world)
            .env("TF_CLI_CONFIG_FILE", "/image/terraform.tfrc")
            .env(crate::world::WORLD_ENV, WORLD_INSIDE)
    }
}

/// `tar czf` of a folder holding `main.tf` (written into `dir`, which is created).
pub fn tar_gz(dir: &Path, main_tf: &str) -> Result<Vec<u8>, HarnessError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let file = dir.join("main.tf");
    std::fs::write(&file, main_tf).map_err(io(&file))?;
    let out = std::process::Command::new("tar")
        .args(["czf", "-", "-C"])
        .arg(dir)
        .arg("main.tf")
        .output()
        .map_err(io(dir))?;
    if !out.status.success() {
        return Err(HarnessError::Tar {
            path: dir.to_path_buf(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(out.stdout)
}

/// A tiny HTTP server of `.tar.gz` module archives on 127.0.0.1; it stops when dropped.
pub struct ModuleServer {
    addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl ModuleServer {
    /// Serve `(name, archive)` pairs at `http://<addr>/<name>` (`GET` and `HEAD`; anything else
    /// is a 404). Call within a Tokio runtime.
    pub async fn start(archives: Vec<(String, Vec<u8>)>) -> std::io::Result<ModuleServer> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let archives = Arc::new(archives);
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let archives = archives.clone();
                tokio::spawn(async move {
                    let mut req = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&buf[..n]),
                        }
                    }
                    let line = String::from_utf8_lossy(&req)
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .to_string();
                    let path = line.split_whitespace().nth(1).unwrap_or_default();
                    let path = path.split('?').next().unwrap_or_default().trim_start_matches('/');
                    let found = archives.iter().find(|(n, _)| n == path);
                    let head_only = line.starts_with("HEAD ");
                    let (status, body): (&str, &[u8]) = match found {
                        Some((_, b)) => ("200 OK", b),
                        None => ("404 Not Found", b"not found"),
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: application/gzip\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = s.write_all(head.as_bytes()).await;
                    if !head_only {
                        let _ = s.write_all(body).await;
                    }
                    let _ = s.shutdown().await;
                });
            }
        });
        Ok(ModuleServer { addr, task })
    }

    /// The port it listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The URL of an archive (a module source Terraform accepts).
    pub fn url(&self, archive: &str) -> String {
        format!("http://{}/{archive}", self.addr)
    }
}

impl Drop for ModuleServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn the_server_serves_an_archive_by_name_and_404s_anything_else() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let d = tempfile::tempdir().unwrap();
        let archive = tar_gz(&d.path().join("m"), "# empty\n").unwrap();
        assert_eq!(&archive[..2], &[0x1f, 0x8b], "gzip magic");
        let server = ModuleServer::start(vec![("m.tar.gz".into(), archive.clone())])
            .await
            .unwrap();
        let get = |path: String| async move {
            let url = server_addr(&path);
            let mut s = tokio::net::TcpStream::connect(url.0).await.unwrap();
            s.write_all(format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", url.1).as_bytes())
                .await
                .unwrap();
            let mut out = Vec::new();
            s.read_to_end(&mut out).await.unwrap();
            out
        };
        let ok = get(server.url("m.tar.gz?archive=tgz")).await;
        assert!(ok.starts_with(b"HTTP/1.1 200 OK"));
        assert!(ok.ends_with(&archive));
        let missing = get(server.url("other.tar.gz")).await;
        assert!(missing.starts_with(b"HTTP/1.1 404"));
    }

    /// `http://127.0.0.1:port/path` → (address, path).
    fn server_addr(url: &str) -> (String, String) {
        let rest = url.trim_start_matches("http://");
        let (addr, path) = rest.split_once('/').unwrap();
        (addr.to_string(), path.to_string())
    }
}

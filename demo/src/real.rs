//! Real OpenTofu for the runner pods: where the machine allows it, the simulator's process
//! kubelet runs the runner image ([`RUNNER_IMAGE`]) as the real `captf-runner` with the
//! OpenTofu the real image ships and the test provider (`captf_testprovider::runner_image`), and the modules the
//! demo's objects name are served from 127.0.0.1. The test provider keeps its "things" as files
//! in a world folder the demo reads (to show what Terraform did) and edits (to make real drift).
//!
//! Where that is not possible ([`runner_image_here`]: no private namespaces without root, or a
//! missing binary), every runner is scripted and the demo says why.
//!
//! With `--runner-image dist/images/runner.oci.tar` the runner pods run the released runner image
//! itself instead ([`released_runner_image_here`]): its own `captf-runner`, OpenTofu, user and
//! environment, unpacked from the archive, with only the test provider's mirror added.

use std::path::{Path, PathBuf};

use captf_testprovider::runner_image::{ModuleServer, RunnerImage, released_runner_image, runner_image, tar_gz};
use captf_testprovider::world::{Thing, World, WorldError};

/// The image the demo's controller puts in its Jobs.
pub const RUNNER_IMAGE: &str = "ghcr.io/captf/runner:demo";
/// Every tag of the runner's repository (an image policy prefix): the examples name the
/// released tag.
pub const RUNNER_REPOSITORY_TAGS: &str = "ghcr.io/captf/runner:";

/// The cluster's module: a load balancer (its id makes the control-plane endpoint) and a
/// control plane whose instance type is in its name (a new type replaces it: a destructive
/// plan) and whose Kubernetes version is its content (changed in place).
pub const CLUSTER_MODULE: &str = r#"terraform {
  required_providers {
    captftest = { source = "captf.io/test/captftest" }
  }
}

variable "control_plane_instance_type" {
  type    = string
  default = "m6i.large"
}

variable "kubernetes_version" {
  type    = string
  default = "1.32"
}

resource "captftest_thing" "load_balancer" {
  name    = "demo-lb"
  content = "port 6443"
}

resource "captftest_thing" "control_plane" {
  name    = "demo-cp-${replace(var.control_plane_instance_type, ".", "-")}"
  content = "kubernetes ${var.kubernetes_version}"
}

output "control_plane_endpoint" {
  value = { host = "${captftest_thing.load_balancer.id}.example", port = 6443 }
}
"#;

/// The machine pool's module: one thing holding the pool's size and instance type.
pub const POOL_MODULE: &str = r#"terraform {
  required_providers {
    captftest = { source = "captf.io/test/captftest" }
  }
}

variable "replicas" {
  type = number
}

variable "instance_type" {
  type = string
}

resource "captftest_thing" "workers" {
  name    = "demo-workers"
  content = "${var.replicas} x ${var.instance_type}"
}

output "node_group" {
  value = captftest_thing.workers.id
}
"#;

/// The cluster's load balancer thing.
pub const LOAD_BALANCER: &str = "demo-lb";
/// The control-plane endpoint host the cluster module's outputs give.
pub const ENDPOINT_HOST: &str = "thing-demo-lb.example";
/// The control plane's thing before and after the instance type changes.
pub const CONTROL_PLANE: &str = "demo-cp-m6i-large";
pub const CONTROL_PLANE_XLARGE: &str = "demo-cp-m6i-xlarge";
/// The machine pool's thing.
pub const WORKERS: &str = "demo-workers";

/// The runner image (its files made under `dir`) when the runner pods can run real Terraform
/// here; else why they cannot.
pub fn runner_image_here(dir: &Path) -> Result<RunnerImage, String> {
    if let Some(why) = captf_sim::process_kubelet::namespaces_unavailable() {
        return Err(format!("{why} (the process kubelet needs root)"));
    }
    runner_image(dir).map_err(|e| e.to_string())
}

/// The released runner image (`--runner-image`: an OCI archive of `scripts/release.sh`, image
/// `version` inside) with the test provider's mirror added, when the runner pods can run it
/// here; else why not.
pub fn released_runner_image_here(dir: &Path, archive: &Path, version: &str) -> Result<RunnerImage, String> {
    if let Some(why) = captf_sim::process_kubelet::namespaces_unavailable() {
        return Err(format!("{why} (running an image needs root for its mounts)"));
    }
    released_runner_image(dir, archive, version).map_err(|e| e.to_string())
}

/// What the demo needs to play its steps on real Terraform.
pub struct RealTerraform {
    modules: ModuleServer,
    world: World,
}

impl RealTerraform {
    /// Serve the cluster's and the pool's modules; `world` is the runner image's world folder.
    pub async fn start(dir: &Path, world: PathBuf) -> std::io::Result<RealTerraform> {
        let archive = |name: &str, text: &str| {
            tar_gz(&dir.join(name), text)
                .map(|a| (format!("{name}.tar.gz"), a))
                .map_err(std::io::Error::other)
        };
        let modules =
            ModuleServer::start(vec![archive("cluster", CLUSTER_MODULE)?, archive("pool", POOL_MODULE)?]).await?;
        Ok(RealTerraform {
            modules,
            world: World::new(world),
        })
    }

    /// The module source of the demo's cluster.
    pub fn cluster_source(&self) -> String {
        self.modules.url("cluster.tar.gz")
    }

    /// The module source of the demo's machine pool.
    pub fn pool_source(&self) -> String {
        self.modules.url("pool.tar.gz")
    }

    /// A thing as the test provider's world holds it (None: it does not exist).
    pub fn thing(&self, name: &str) -> Option<Thing> {
        self.world.read(name).ok().flatten()
    }

    /// Change a thing behind Terraform's back.
    pub fn edit(&self, name: &str, content: &str) -> Result<(), WorldError> {
        self.world.write(&Thing {
            name: name.to_string(),
            content: content.to_string(),
        })
    }
}

//! CAPTF's Terraform test kit: the test provider's world ([`world`]), what a test needs to run
//! the pinned real Terraform with that provider and no network ([`harness`]), the world's
//! compute that boots its machines ([`hypervisor`]), and the runner's
//! image for the simulator's process kubelet with a server of module archives
//! ([`runner_image`]), shared by the real-runner scenarios and the demo.
//!
//! The provider itself is the binary `terraform-provider-captftest` (`src/main.rs`).

pub mod harness;
pub mod hypervisor;
pub mod runner_image;
pub mod world;

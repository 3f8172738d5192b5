//! CAPTF's Terraform test kit: the test provider's world ([`world`]) and what a test needs to
//! run the pinned real Terraform with that provider and no network ([`harness`]).
//!
//! The provider itself is the binary `terraform-provider-captftest` (`src/main.rs`).

pub mod harness;
pub mod world;

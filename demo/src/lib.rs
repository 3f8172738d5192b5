//! `captf-demo`: CAPTF's main job on the embedded simulator (docs/architecture.md; the lifecycle is listed in README.md).
//!
//! | module | what |
//! | --- | --- |
//! | [`setup`] | start the simulator, the webhook (certificates on the fly) and the controller |
//! | [`procs`] | the child processes (the real binaries) and their logs |
//! | [`certs`] | a CA and serving certificate (the webhook's `dev-certs` code) |
//! | [`lifecycle`] | the lifecycle, step by step |
//! | [`playground`] | what `--serve` leaves to play with, and what it prints |
//! | [`real`] | real Terraform in the runner pods, where the machine allows it |
//! | [`timeline`] | the readable timeline of what changed (pure) |
//! | [`summary`] | the final table (pure) |

pub mod certs;
pub mod lifecycle;
pub mod playground;
pub mod procs;
pub mod real;
pub mod setup;
pub mod summary;
pub mod timeline;

//! `captf-controller`: the kube-rs controller (docs/rules.md, docs/operating.md). The rules are
//! `captf-core`'s; this crate reads the world, carries out what the core decides and serves the
//! controller's endpoints.

pub mod fuzzing;
pub mod runtime;

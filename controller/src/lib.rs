//! `captf-controller`: the kube-rs controller (docs/rules.md, docs/operating.md).

pub mod core;
pub mod explain;
pub mod fuzzing;
pub mod plan;
pub mod runtime;

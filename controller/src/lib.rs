//! `captf-controller`: the kube-rs controller (DESIGN.md §4–§6, §8, §10).

pub mod core;
pub mod explain;
pub mod fuzzing;
pub mod rbac;
pub mod runtime;

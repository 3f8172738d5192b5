//! Scenario tests: the real runtime (real kube-rs client and controllers) against captf-sim,
//! with the simulator's clock. Time moves only when a test advances it; each wait polls the
//! API for at most a few seconds of wall time. One test binary, one module per area.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod booking;
mod errors;
mod exports;
mod holds;
mod lifecycle;
mod moving;
mod names;
mod namespaces;
mod notifications;
mod real_runner;
mod references;
mod scale;
mod sharding;
mod slots;

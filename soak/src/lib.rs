//! `captf-soak`: the chaos soak (docs/soak.md). The real controller, two replicas with leader
//! election (or, with shards, an instance per shard and one for the rest, each with its own
//! leader), runs against the simulator with the real webhook for days of simulated time while
//! seeded faults fall; every change is recorded and every invariant checked over the whole
//! history.
//!
//! | module | what |
//! | --- | --- |
//! | [`chaos`] | the seeded choices: runner behaviours, faults per stretch of time (pure) |
//! | [`history`] | the record of every change, reduced to the facts the checks need |
//! | [`invariants`] | what must hold over the history (pure) |
//! | [`harness`] | the driver: processes, faults, the clock, the report |

pub mod chaos;
pub mod harness;
pub mod history;
pub mod invariants;

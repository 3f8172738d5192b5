//! The pure decision core (DESIGN.md §4–§6): plain data and a time in, plain data out. No API
//! calls, no async. The reconciler reads the world, calls these, and carries out the result;
//! `captf-controller explain` runs exactly the same code offline.
//!
//! | module | rule |
//! | --- | --- |
//! | [`outcome`] | `classify` a finished Job (§5.2) |
//! | [`record`] | the booked record of one Job |
//! | [`backoff`] | failure counting, delay, retry number (§5.3) |
//! | [`remediation`] | the drift-remediation cap (§6 rule 7) |
//! | [`lock`] | the stale-lock check (§4, seed 003) |
//! | [`interrupted`] | an apply Job deleted while it ran (§5.6) |
//! | [`prune`] | which Jobs to delete (§5.5) |
//! | [`inputs`] | resolving the inputs and `cluster_name` (§2.3) |
//! | [`state`] | whether the state can be read (a deletion hold, §8) |
//! | [`pause`] | Cluster API pause of the owning Cluster (§2.2) |
//! | [`snapshot`] | the view of an object `decide` takes |
//! | [`reason`] | why a decision was made |
//! | [`decide`](mod@decide) | the ordered rules (§6) |

pub mod backoff;
pub mod decide;
pub mod inputs;
pub mod interrupted;
pub mod lock;
pub mod outcome;
pub mod pause;
pub mod prune;
pub mod reason;
pub mod record;
pub mod remediation;
pub mod snapshot;
pub mod state;

pub use decide::{Decision, Start, Wait, decide};
pub use outcome::{Outcome, classify};
pub use reason::Reason;
pub use snapshot::Snapshot;

//! The pure decision core (docs/rules.md): plain data and a time in, plain data out. No API
//! calls, no async. The reconciler reads the world, calls these, and carries out the result;
//! `captf-controller explain` runs exactly the same code offline.
//!
//! | module | rule |
//! | --- | --- |
//! | [`outcome`] | `classify` a finished Job (docs/rules.md) |
//! | [`record`] | the booked record of one Job |
//! | [`backoff`] | failure counting, delay, retry number (docs/rules.md) |
//! | [`remediation`] | the drift-remediation cap (docs/rules.md) |
//! | [`lock`] | the stale-lock check (docs/rules.md) |
//! | [`interrupted`] | an apply Job deleted while it ran (docs/rules.md) |
//! | [`prune`] | which Jobs to delete (docs/rules.md) |
//! | [`inputs`] | resolving the inputs and `cluster_name` (docs/api.md) |
//! | [`state`] | whether the state can be read (a deletion hold, docs/rules.md) |
//! | [`pause`] | Cluster API pause of the owning Cluster (docs/api.md) |
//! | [`membership`] | which labelled pools and machines hold a cluster's deletion (docs/rules.md) |
//! | [`moving`] | `clusterctl move`: block-move, no finalizer while paused (docs/api.md) |
//! | [`snapshot`] | the view of an object `decide` takes |
//! | [`reason`] | why a decision was made |
//! | [`decide`](mod@decide) | the ordered rules (docs/rules.md) |
//! | [`wake`] | when a waiting object is looked at again (docs/architecture.md) |

pub mod backoff;
pub mod decide;
pub mod inputs;
pub mod interrupted;
pub mod lock;
pub mod membership;
pub mod moving;
pub mod outcome;
pub mod pause;
pub mod prune;
pub mod reason;
pub mod record;
pub mod remediation;
pub mod snapshot;
pub mod state;
pub mod wake;

pub use decide::{Decision, Start, Wait, decide};
pub use outcome::{Outcome, classify};
pub use reason::Reason;
pub use snapshot::Snapshot;

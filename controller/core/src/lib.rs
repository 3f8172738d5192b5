//! `captf-core`: every rule of the controller, pure (docs/rules.md). Plain data and a time in,
//! plain data out: no API calls, no async. The crate does not depend on `kube` or `tokio`, so
//! the compiler keeps it that way. The controller reads the world, calls these and carries out
//! the result; `captf-controller explain` and `kubectl captf` run exactly the same code.
//!
//! | module | rule |
//! | --- | --- |
//! | [`outcome`] | `classify` a finished Job (docs/rules.md) |
//! | [`record`] | the booked record of one Job |
//! | [`backoff`] | failure counting, delay, retry number (docs/rules.md) |
//! | [`remediation`] | the drift-remediation cap (docs/rules.md) |
//! | [`requests`] | when a person's approval or refresh request is used up (docs/api.md) |
//! | [`lock`] | the stale-lock check (docs/rules.md) |
//! | [`interrupted`] | an apply Job deleted while it ran (docs/rules.md) |
//! | [`prune`] | which Jobs to delete (docs/rules.md) |
//! | [`inputs`] | resolving the inputs and `cluster_name` (docs/api.md) |
//! | [`exports`] | the cluster outputs a member receives (docs/api.md) |
//! | [`state`] | whether the state can be read (a deletion hold, docs/rules.md) |
//! | [`pause`] | Cluster API pause of the owning Cluster (docs/api.md) |
//! | [`membership`] | which labelled pools and machines hold a cluster's deletion (docs/rules.md) |
//! | [`moving`] | `clusterctl move`: block-move, no finalizer while paused (docs/api.md) |
//! | [`snapshot`] | the view of an object `decide` takes |
//! | [`reason`] | why a decision was made |
//! | [`decide`](mod@decide) | the ordered rules (docs/rules.md) |
//! | [`wake`] | when a waiting object is looked at again (docs/architecture.md) |
//! | [`queue`] | runner slots: the limits on running Jobs, who starts next, everyone's place (docs/rules.md) |
//! | [`sharding`] | which objects an instance serves, and its leader Lease (docs/operating.md) |
//! | [`finalizer`] | CAPTF's finalizer on an object, added and removed |
//! | [`ident`] | who an object is, and the names derived from it |
//! | [`assemble`] | the snapshot built from what a reader read |
//! | [`book`] | what booking a finished Job changes in the status and the durable record |
//! | [`plan`] | one whole pass: book, decide, prune, the status to write (docs/architecture.md) |
//! | [`status`] | the status and its conditions after a pass (docs/api.md) |
//! | [`job`] | the runner Job a `Start` creates (docs/runner.md) |
//! | [`adoption`] | whose state an object may use: bound to it, or released and adopted (docs/trust.md) |
//! | [`fence`] | the last look at the object before its Job is created (docs/rules.md) |
//! | [`inputs_secret`] | the durable inputs Secret |
//! | [`lease`] | who may take CAPTF's run and cluster leases |
//! | [`explain`](mod@explain) | a pass planned from files, and its rendering |

pub mod adoption;
pub mod assemble;
pub mod backoff;
pub mod book;
pub mod decide;
pub mod explain;
pub mod exports;
pub mod fence;
pub mod finalizer;
pub mod ident;
pub mod inputs;
pub mod inputs_secret;
pub mod interrupted;
pub mod job;
pub mod lease;
pub mod lock;
pub mod membership;
pub mod moving;
pub mod outcome;
pub mod pause;
pub mod plan;
pub mod prune;
pub mod queue;
pub mod reason;
pub mod record;
pub mod remediation;
pub mod requests;
pub mod sharding;
pub mod snapshot;
pub mod state;
pub mod status;
pub mod wake;

pub use decide::{Decision, Start, Wait, decide};
pub use outcome::{Outcome, classify};
pub use reason::Reason;
pub use snapshot::Snapshot;

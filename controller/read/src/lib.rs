//! `captf-read`: how CAPTF reads one object (docs/architecture.md, "Reading an object").
//!
//! | module | what |
//! | --- | --- |
//! | [`source`] | the one read of a pass, over a [`source::Source`]: the controller's caches or live reads |
//! | [`live`] | the live source: what a person's tool (`kubectl captf`) reads, writing nothing |
//! | [`api`] | the reads made live from the API server whoever reads |
//! | [`pause`] | the owning Cluster API `Cluster`, read live |
//! | [`state`] | the state Secret of a deletion hold, read live |
//! | [`kinds`] | what a read needs of each kind |
//! | [`errors`] | a failed API call, named |
//! | [`sim_clock`] | the simulator's clock |
//!
//! The rules that turn what was read into a decision are `captf-core`'s; this crate depends on
//! kube's client only, so a tool that reads objects does not carry the controller.

pub mod api;
pub mod errors;
pub mod kinds;
pub mod live;
pub mod pause;
pub mod sim_clock;
pub mod source;
pub mod state;

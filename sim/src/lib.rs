//! `captf-sim`: a Kubernetes API server and Job/Pod simulator (docs/architecture.md). A test double,
//! not a product: see `sim/README.md` for what it does not simulate.
//!
//! ```no_run
//! # async fn demo() -> Result<(), captf_sim::SimError> {
//! use captf_sim::{JobMatch, RunnerScript, Sim};
//! use std::time::Duration;
//! let sim = Sim::start().await?;
//! let client = sim.client()?; // a kube::Client over HTTP
//! sim.script(JobMatch::any(), RunnerScript::fail("boom").after(Duration::from_secs(60)));
//! // ... create objects through `client`, then:
//! sim.advance(Duration::from_secs(60));
//! # Ok(()) }
//! ```
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`sim`] | [`Sim`]: start, clients, kubeconfig, clock, scripts, faults, direct reads |
//! | [`clock`] | reading the simulated clock from another process |
//! | [`server`] | the REST paths, discovery, watch streams, `/sim/v1/clock` |
//! | [`store`] | objects, resourceVersions, status subresource, finalizers, GC, watch history |
//! | [`kubelet`] | the simulated Job controller and kubelet |
//! | [`runner`] | runner scripts and how they are chosen |
//! | [`process_kubelet`] | the process kubelet: images that run as real processes |
//! | [`admission`] | calling admission webhooks over TLS |
//! | [`events`] | the events.k8s.io/v1 view of core/v1 Events |
//! | [`faults`] | injected errors, dropped watches, latency |
//! | [`https`] | the HTTPS port and in-cluster configuration for child processes |
//! | [`rbac`] | RBAC authorization (Roles, ClusterRoles and their bindings) |
//! | [`auth`] | ServiceAccount tokens and who a request comes from |
//! | [`resources`] | built-in resources and CRDs |
//! | [`paging`] | paged lists (`limit` and `continue`) from one snapshot |
//! | [`pruning`] | unknown fields of custom resources: pruning, `fieldValidation`, apply's check |
//! | [`selectors`] | label and field selectors |
//! | [`table`] | Table responses for `kubectl get` (printer columns) |
//! | [`error`] | Kubernetes `Status` errors |

pub mod activity;
pub mod admission;
pub mod auth;
pub mod clock;
pub mod error;
pub mod events;
pub mod faults;
pub mod https;
pub mod kubelet;
pub mod paging;
pub mod process_kubelet;
pub mod protobuf;
pub mod pruning;
pub mod rbac;
pub mod resources;
pub mod runner;
pub mod selectors;
pub mod server;
pub mod sim;
pub mod store;
pub mod table;

pub use error::ApiError;
pub use faults::{FaultRule, Faults, Hold, Verb};
pub use process_kubelet::ProcessImage;
pub use runner::{JobMatch, RunnerAction, RunnerScript};
pub use sim::{Sim, SimBuilder, SimError};

//! Notifications: a blocked plan, drift, a failure, sent to the receivers platform teams
//! watch, so nobody has to watch Kubernetes Events.
//!
//! The controller resolves each [`TargetSpec`] with its Secrets' values into a [`Target`],
//! calls [`start`] once, and calls [`Notifier::notify`] where it records what happened.
//! `notify` only queues; delivery, retries and deduplication run in the background and are
//! counted in [`Metrics`]. docs/notifications.md describes the payloads and the bounds.
//!
//! ```no_run
//! # async fn example(url: String) -> Result<(), Box<dyn std::error::Error>> {
//! use captf_notify::{Event, Metrics, ObjectRef, Options, PlanCounts, Target, parse_targets};
//! use captf_shared::Kind;
//!
//! let specs = parse_targets("- {name: slack, kind: Slack, urlSecret: {name: captf-notify, key: url}}")
//!     .map_err(|e| format!("{e:?}"))?;
//! let targets = vec![Target::resolve(&specs[0], &url, None)?];
//! let mut registry = prometheus_client::registry::Registry::default();
//! let metrics = captf_notify::register(&mut registry);
//! let (notifier, _delivery) = captf_notify::start(targets, Options::default(), metrics)?;
//! let object = ObjectRef::new(Kind::TerraformCluster, "team-a", "prod-eu");
//! notifier.notify(Event::awaiting_approval(object, "3f2a9c", PlanCounts { destroy: 1, ..Default::default() }));
//! # Ok(())
//! # }
//! ```

mod backoff;
mod config;
mod dedup;
mod deliver;
mod event;
mod metrics;
pub mod payload;

pub use backoff::RetryPolicy;
pub use config::{
    ConfigError, MAX_TARGET_NAME, MAX_TARGETS, Masked, SecretKeyRef, Target, TargetKind, TargetSpec, WebhookUrl,
    parse_targets, validate_targets,
};
pub use deliver::{Delivery, Notifier, Options, Queued, StartError, start};
pub use event::{DedupKey, Event, EventKind, ObjectRef, PlanCounts, approve_command};
pub use metrics::{METRIC_NAME, Metrics, Outcome, register};

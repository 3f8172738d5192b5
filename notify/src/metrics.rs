//! What delivery counts: one counter family, by target, event and outcome.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::event::EventKind;

/// What became of a notification for one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The receiver answered 2xx.
    Delivered,
    /// One attempt failed (timeout, connection, non-2xx); another may follow.
    FailedAttempt,
    /// No attempt is left, or the receiver refused it for good (4xx other than 408 and 429).
    GivenUp,
    /// A queue was full: the caller's or this target's.
    DroppedQueueFull,
    /// The same news was sent within the deduplication window.
    SuppressedDuplicate,
}

impl Outcome {
    pub const ALL: [Outcome; 5] = [
        Outcome::Delivered,
        Outcome::FailedAttempt,
        Outcome::GivenUp,
        Outcome::DroppedQueueFull,
        Outcome::SuppressedDuplicate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::FailedAttempt => "failed_attempt",
            Outcome::GivenUp => "given_up",
            Outcome::DroppedQueueFull => "dropped_queue_full",
            Outcome::SuppressedDuplicate => "suppressed_duplicate",
        }
    }
}

impl EncodeLabelValue for Outcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.as_str(), encoder)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Labels {
    target: String,
    event: &'static str,
    outcome: Outcome,
}

/// The notification counters. Cheap to clone: clones count into the same series.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    notifications: Family<Labels, Counter>,
}

/// The metric's name in the registry (exposed as `captf_notifications_total`).
pub const METRIC_NAME: &str = "captf_notifications";

impl Metrics {
    pub fn new() -> Self {
        Metrics::default()
    }

    /// Add the counters to `registry`. The `target` label is a configured target name (a
    /// DNS-1123 label), never its URL.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            METRIC_NAME,
            "Notifications by target, event and what became of them",
            self.notifications.clone(),
        );
    }

    pub(crate) fn inc(&self, target: &str, event: EventKind, outcome: Outcome) {
        self.notifications
            .get_or_create(&Labels {
                target: target.to_string(),
                event: event.as_str(),
                outcome,
            })
            .inc();
    }

    /// The count for one target and outcome over all events.
    pub fn count(&self, target: &str, outcome: Outcome) -> u64 {
        EventKind::ALL
            .into_iter()
            .map(|event| {
                self.notifications
                    .get(&Labels {
                        target: target.to_string(),
                        event: event.as_str(),
                        outcome,
                    })
                    .map_or(0, |c| c.get())
            })
            .sum()
    }
}

/// A new set of counters, registered in `registry`.
pub fn register(registry: &mut Registry) -> Metrics {
    let m = Metrics::new();
    m.register(registry);
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn the_counters_are_exposed_with_target_event_and_outcome_labels() {
        let mut registry = Registry::default();
        let m = register(&mut registry);
        m.inc("slack", EventKind::AwaitingApproval, Outcome::Delivered);
        m.inc("slack", EventKind::ApplyFailed, Outcome::Delivered);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                r#"captf_notifications_total{target="slack",event="awaiting-approval",outcome="delivered"} 1"#
            ),
            "{text}"
        );
        assert_eq!(m.count("slack", Outcome::Delivered), 2);
        assert_eq!(m.count("slack", Outcome::GivenUp), 0);
    }
}

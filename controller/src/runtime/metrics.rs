//! The controller's Prometheus metrics (docs/operating.md), in one prometheus-client `Registry`.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use captf_shared::{Kind, Op};

use captf_core::Outcome;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindOp {
    pub kind: String,
    pub op: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Finished {
    pub kind: String,
    pub op: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectOp {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub op: String,
}

/// A notification target left out: where it was configured and which part was wrong.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetProblem {
    /// `cluster` (the chart's targets) or `namespace` (a namespace's captf-notifications).
    pub scope: String,
    /// `config` (the list does not parse or breaks a rule), `read` (the ConfigMap could not be
    /// read), `urlSecret` or `tokenSecret` (missing, unreadable or not a usable value).
    pub field: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Category {
    pub category: String,
}

fn attempts_histogram() -> Histogram {
    Histogram::new([1.0, 2.0, 3.0, 4.0, 5.0, 8.0, 13.0, 21.0])
}

fn duration_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.001, 2.0, 14,
    ))
}

/// Every metric family of the controller.
pub struct Metrics {
    /// Reconcile passes running now.
    pub reconciles_in_flight: Gauge,
    /// 1 while this replica is the leader (or runs without leader election), else 0.
    pub leader: Gauge,
    /// Objects waiting for a runner slot (`Queued`).
    pub queued: Gauge,
    pub registry: Registry,
    pub job_attempts: Family<KindOp, Histogram, fn() -> Histogram>,
    pub jobs_finished: Family<Finished, Counter>,
    pub force_unlocks: Family<KindLabel, Counter>,
    pub consecutive_failures: Family<ObjectOp, Gauge>,
    pub last_success: Family<ObjectOp, Gauge<f64, AtomicU64>>,
    pub reconcile_duration: Family<KindLabel, Histogram, fn() -> Histogram>,
    pub reconcile_errors: Family<Category, Counter>,
    /// The delays chosen after failed passes.
    pub reconcile_error_backoff: Histogram,
    /// What became of each notification, per target (`captf_notify`).
    pub notifications: captf_notify::Metrics,
    /// Notification targets or configurations left out because something about them is wrong.
    pub notification_target_errors: Family<TargetProblem, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let job_attempts =
            Family::<KindOp, Histogram, fn() -> Histogram>::new_with_constructor(attempts_histogram as _);
        let jobs_finished = Family::<Finished, Counter>::default();
        let force_unlocks = Family::<KindLabel, Counter>::default();
        let consecutive_failures = Family::<ObjectOp, Gauge>::default();
        let last_success = Family::<ObjectOp, Gauge<f64, AtomicU64>>::default();
        let reconcile_duration =
            Family::<KindLabel, Histogram, fn() -> Histogram>::new_with_constructor(duration_histogram as _);
        let reconcile_errors = Family::<Category, Counter>::default();
        let reconciles_in_flight = Gauge::default();
        let leader = Gauge::default();
        let queued = Gauge::default();
        let reconcile_error_backoff =
            Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(1.0, 2.0, 10));
        registry.register(
            "captf_job_attempts",
            "Retry number of each finished Job (1 + earlier failed Jobs of its op since its last success)",
            job_attempts.clone(),
        );
        registry.register("captf_jobs_finished", "Finished Jobs by outcome", jobs_finished.clone());
        registry.register(
            "captf_force_unlocks",
            "Jobs started with a stale state lock to force-unlock",
            force_unlocks.clone(),
        );
        registry.register(
            "captf_consecutive_failures",
            "Consecutive failed Jobs of an op (a series exists only while above 0)",
            consecutive_failures.clone(),
        );
        registry.register(
            "captf_last_success_timestamp_seconds",
            "When an op last succeeded",
            last_success.clone(),
        );
        registry.register(
            "captf_reconcile_duration_seconds",
            "Time of one reconcile pass",
            reconcile_duration.clone(),
        );
        registry.register(
            "captf_reconciles_in_flight",
            "Reconcile passes running now (0 when the controller has nothing left to do at this moment)",
            reconciles_in_flight.clone(),
        );
        registry.register(
            "captf_leader",
            "1 while this replica is the leader and writes (always 1 without leader election)",
            leader.clone(),
        );
        registry.register(
            "captf_queued_objects",
            "Objects due to start a runner Job that wait for a runner slot (--max-running-jobs, --max-running-jobs-per-namespace)",
            queued.clone(),
        );
        registry.register(
            "captf_reconcile_errors",
            "Failed reconcile passes by category",
            reconcile_errors.clone(),
        );
        registry.register(
            "captf_reconcile_error_backoff_seconds",
            "Delay before retrying an object whose reconcile pass failed",
            reconcile_error_backoff.clone(),
        );
        let notifications = captf_notify::register(&mut registry);
        let notification_target_errors = Family::<TargetProblem, Counter>::default();
        registry.register(
            "captf_notification_target_errors",
            "Notification targets (or whole configurations) left out: a missing Secret, a URL that is not http(s), a list that does not parse",
            notification_target_errors.clone(),
        );
        Metrics {
            registry,
            notifications,
            notification_target_errors,
            reconciles_in_flight,
            leader,
            queued,
            job_attempts,
            jobs_finished,
            force_unlocks,
            consecutive_failures,
            last_success,
            reconcile_duration,
            reconcile_errors,
            reconcile_error_backoff,
        }
    }

    /// One finished Job was booked.
    pub fn job_finished(&self, kind: Kind, op: Op, outcome: Outcome, attempt: u32) {
        self.jobs_finished
            .get_or_create(&Finished {
                kind: kind.as_str().into(),
                op: op.as_str().into(),
                outcome: outcome.as_str().into(),
            })
            .inc();
        self.job_attempts
            .get_or_create(&KindOp {
                kind: kind.as_str().into(),
                op: op.as_str().into(),
            })
            .observe(f64::from(attempt));
    }

    /// A notification target (or a whole configuration) of `scope` was left out over `field`.
    pub fn notification_target_error(&self, scope: &str, field: &str) {
        self.notification_target_errors
            .get_or_create(&TargetProblem {
                scope: scope.into(),
                field: field.into(),
            })
            .inc();
    }

    /// Set the failing-object gauge; a count of 0 removes the series.
    pub fn set_consecutive_failures(&self, kind: Kind, namespace: &str, name: &str, op: Op, n: u32) {
        let labels = object_op(kind, namespace, name, op);
        if n == 0 {
            self.consecutive_failures.remove(&labels);
        } else {
            self.consecutive_failures.get_or_create(&labels).set(i64::from(n));
        }
    }

    pub fn set_last_success(&self, kind: Kind, namespace: &str, name: &str, op: Op, seconds: f64) {
        self.last_success
            .get_or_create(&object_op(kind, namespace, name, op))
            .set(seconds);
    }

    /// Forget every series of a deleted object.
    pub fn forget_object(&self, kind: Kind, namespace: &str, name: &str) {
        for op in Op::ALL {
            let labels = object_op(kind, namespace, name, op);
            self.consecutive_failures.remove(&labels);
            self.last_success.remove(&labels);
        }
    }

    pub fn force_unlock(&self, kind: Kind) {
        self.force_unlocks
            .get_or_create(&KindLabel {
                kind: kind.as_str().into(),
            })
            .inc();
    }

    /// A failed pass of `category`, retried after `delay`.
    pub fn reconcile_error(&self, category: &str, delay: std::time::Duration) {
        self.reconcile_errors
            .get_or_create(&Category {
                category: category.into(),
            })
            .inc();
        self.reconcile_error_backoff.observe(delay.as_secs_f64());
    }

    pub fn observe_reconcile(&self, kind: Kind, seconds: f64) {
        self.reconcile_duration
            .get_or_create(&KindLabel {
                kind: kind.as_str().into(),
            })
            .observe(seconds);
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

fn object_op(kind: Kind, namespace: &str, name: &str, op: Op) -> ObjectOp {
    ObjectOp {
        kind: kind.as_str().into(),
        namespace: namespace.into(),
        name: name.into(),
        op: op.as_str().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_failures_series_exists_only_while_failing() {
        let m = Metrics::new();
        m.set_consecutive_failures(Kind::TerraformCluster, "default", "prod-eu", Op::Apply, 2);
        assert!(m.encode().contains(
            "captf_consecutive_failures{kind=\"TerraformCluster\",namespace=\"default\",name=\"prod-eu\",op=\"apply\"} 2"
        ));
        m.set_consecutive_failures(Kind::TerraformCluster, "default", "prod-eu", Op::Apply, 0);
        assert!(!m.encode().contains("captf_consecutive_failures{"));
    }

    #[test]
    fn a_finished_job_counts_once_with_its_outcome_and_attempt() {
        let m = Metrics::new();
        m.job_finished(Kind::TerraformCluster, Op::Apply, Outcome::Deadline, 2);
        let text = m.encode();
        assert!(
            text.contains("captf_jobs_finished_total{kind=\"TerraformCluster\",op=\"apply\",outcome=\"deadline\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("captf_job_attempts_count{kind=\"TerraformCluster\",op=\"apply\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("captf_job_attempts_sum{kind=\"TerraformCluster\",op=\"apply\"} 2.0"),
            "{text}"
        );
    }
}

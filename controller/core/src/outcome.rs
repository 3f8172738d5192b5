//! Booking a finished Job (docs/rules.md): `classify` a Job and its pod into an [`Outcome`].

use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

use captf_shared::events;
use captf_shared::protocol::{RunResult, RunnerResult};

/// The Job condition reason the Job controller sets when `activeDeadlineSeconds` is reached.
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
/// The pod condition set on an eviction, preemption, drain or node shutdown.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// What a finished Job came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Succeeded,
    Failed,
    Deadline,
    Interrupted,
    Blocked,
    PlanChanged,
    /// A policy on the plan denied it; nothing was applied.
    PolicyDenied,
}

/// The Warning/Normal event a booked outcome emits, once per Job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventReason {
    JobFailed,
    JobDeadlineExceeded,
    JobInterrupted,
    DestructivePlanBlocked,
    PolicyDenied,
}

impl EventReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EventReason::JobFailed => events::reason::JOB_FAILED,
            EventReason::JobDeadlineExceeded => events::reason::JOB_DEADLINE_EXCEEDED,
            EventReason::JobInterrupted => events::reason::JOB_INTERRUPTED,
            EventReason::DestructivePlanBlocked => events::reason::DESTRUCTIVE_PLAN_BLOCKED,
            EventReason::PolicyDenied => events::reason::POLICY_DENIED,
        }
    }
}

impl Outcome {
    pub const ALL: [Outcome; 7] = [
        Outcome::Succeeded,
        Outcome::Failed,
        Outcome::Deadline,
        Outcome::Interrupted,
        Outcome::Blocked,
        Outcome::PlanChanged,
        Outcome::PolicyDenied,
    ];

    /// The value of the `captf.io/outcome` annotation and the metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Deadline => "deadline",
            Outcome::Interrupted => "interrupted",
            Outcome::Blocked => "blocked",
            Outcome::PlanChanged => "plan-changed",
            Outcome::PolicyDenied => "policy-denied",
        }
    }

    /// Does it count toward backoff and the retry number? (`failed` and `deadline` only.)
    pub fn counts_as_failure(self) -> bool {
        matches!(self, Outcome::Failed | Outcome::Deadline)
    }

    /// The event booking emits for it, if any.
    pub fn event_reason(self) -> Option<EventReason> {
        match self {
            Outcome::Failed => Some(EventReason::JobFailed),
            Outcome::Deadline => Some(EventReason::JobDeadlineExceeded),
            Outcome::Interrupted => Some(EventReason::JobInterrupted),
            Outcome::Blocked => Some(EventReason::DestructivePlanBlocked),
            Outcome::PolicyDenied => Some(EventReason::PolicyDenied),
            Outcome::Succeeded | Outcome::PlanChanged => None,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "unknown outcome {0:?}: expected succeeded, failed, deadline, interrupted, blocked, plan-changed or policy-denied"
)]
pub struct UnknownOutcome(pub String);

impl FromStr for Outcome {
    type Err = UnknownOutcome;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Outcome::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| UnknownOutcome(s.to_string()))
    }
}

/// The Job's terminal state, from its conditions alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Terminal {
    Complete,
    Failed { deadline: bool },
}

fn condition_true<'a>(
    status: Option<&'a JobStatus>,
    type_: &str,
) -> Option<&'a k8s_openapi::api::batch::v1::JobCondition> {
    status?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// `Complete` or `Failed` True; `FailureTarget` alone is not finished (its pods still terminate).
pub fn terminal(job: &Job) -> Option<Terminal> {
    terminal_status(job.status.as_ref())
}

/// [`terminal`] from a Job's status alone (what the controller's Jobs stores keep of a Job).
pub fn terminal_status(status: Option<&JobStatus>) -> Option<Terminal> {
    if let Some(c) = condition_true(status, "Failed") {
        return Some(Terminal::Failed {
            deadline: c.reason.as_deref() == Some(DEADLINE_EXCEEDED),
        });
    }
    condition_true(status, "Complete").map(|_| Terminal::Complete)
}

/// When the Job finished: its terminal condition's transition time, else `completionTime`.
pub fn finished_at(job: &Job) -> Option<Timestamp> {
    let status = job.status.as_ref();
    let cond = condition_true(status, "Failed").or_else(|| condition_true(status, "Complete"));
    cond.and_then(|c| c.last_transition_time.as_ref().map(|t| t.0))
        .or_else(|| job.status.as_ref()?.completion_time.as_ref().map(|t| t.0))
}

/// The runner's result from the pod's terminated containers, if one parses.
pub fn runner_result(pod: &Pod) -> Option<RunnerResult> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .filter_map(|cs| cs.state.as_ref()?.terminated.as_ref()?.message.as_deref())
        .find_map(|m| RunnerResult::parse(m).ok())
}

/// Was the pod disrupted (evicted, preempted, drained, node shutdown)?
pub fn disrupted(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == DISRUPTION_TARGET && c.status == "True"))
}

/// Classify a finished Job; `None` while it is not finished.
pub fn classify(job: &Job, pod: Option<&Pod>) -> Option<Outcome> {
    let terminal = terminal(job)?;
    // A deadline kill counts whatever the runner said: no need to parse its message.
    let result = match terminal {
        Terminal::Failed { deadline: true } => None,
        _ => pod.and_then(runner_result),
    };
    Some(classify_terminal(
        terminal,
        result.as_ref().map(|r| r.result),
        pod.is_some_and(disrupted),
    ))
}

/// The table of docs/rules.md over the Job's terminal state, the runner's result and the pod's disruption.
pub fn classify_terminal(terminal: Terminal, result: Option<RunResult>, disrupted: bool) -> Outcome {
    match terminal {
        // A deadline kill counts whatever the runner reported: a step that always hangs must reach the cap.
        Terminal::Failed { deadline: true } => Outcome::Deadline,
        Terminal::Complete => match result {
            None | Some(RunResult::Succeeded) => Outcome::Succeeded,
            Some(RunResult::Failed) => Outcome::Failed,
            Some(RunResult::Blocked) => Outcome::Blocked,
            Some(RunResult::PlanChanged) => Outcome::PlanChanged,
            Some(RunResult::Interrupted) => Outcome::Interrupted,
            Some(RunResult::PolicyDenied) => Outcome::PolicyDenied,
        },
        Terminal::Failed { deadline: false } => match result {
            Some(RunResult::Interrupted) => Outcome::Interrupted,
            Some(RunResult::Blocked) => Outcome::Blocked,
            Some(RunResult::PlanChanged) => Outcome::PlanChanged,
            Some(RunResult::PolicyDenied) => Outcome::PolicyDenied,
            // Evicted before the runner could write its result: an interruption, not a failure.
            None if disrupted => Outcome::Interrupted,
            None | Some(RunResult::Failed) | Some(RunResult::Succeeded) => Outcome::Failed,
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use captf_shared::protocol::Phase;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodCondition, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    pub fn job_with(conditions: &[(&str, Option<&str>)], at: i64) -> Job {
        Job {
            status: Some(JobStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, reason)| JobCondition {
                            type_: (*t).to_string(),
                            status: "True".into(),
                            reason: reason.map(str::to_string),
                            last_transition_time: Some(Time(Timestamp::from_second(at).unwrap())),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub fn pod_with(result: Option<RunResult>, disrupted: bool) -> Pod {
        let message = result.map(|r| RunnerResult::new(r, Phase::Apply, "m").to_termination_message());
        Pod {
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: "runner".into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            message,
                            exit_code: result.map_or(137, RunResult::exit_code),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                conditions: disrupted.then(|| {
                    vec![PodCondition {
                        type_: DISRUPTION_TARGET.into(),
                        status: "True".into(),
                        ..Default::default()
                    }]
                }),
                phase: Some("Failed".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn deadline_kill_counts_even_when_runner_reports_interrupted() {
        let job = job_with(
            &[
                ("FailureTarget", Some("DeadlineExceeded")),
                ("Failed", Some("DeadlineExceeded")),
            ],
            10,
        );
        let pod = pod_with(Some(RunResult::Interrupted), false);
        let o = classify(&job, Some(&pod)).unwrap();
        assert_eq!(o, Outcome::Deadline);
        assert!(o.counts_as_failure());
        assert_eq!(o.event_reason(), Some(EventReason::JobDeadlineExceeded));
    }

    #[test]
    fn an_interruption_that_is_not_a_deadline_kill_is_free() {
        let job = job_with(&[("Failed", Some("BackoffLimitExceeded"))], 10);
        let o = classify(&job, Some(&pod_with(Some(RunResult::Interrupted), true))).unwrap();
        assert_eq!(o, Outcome::Interrupted);
        assert!(!o.counts_as_failure());
        assert_eq!(o.event_reason(), Some(EventReason::JobInterrupted));
        // Evicted before the runner wrote anything: still an interruption.
        assert_eq!(classify(&job, Some(&pod_with(None, true))), Some(Outcome::Interrupted));
    }

    #[test]
    fn failure_target_without_failed_is_not_finished() {
        let job = job_with(&[("FailureTarget", Some("DeadlineExceeded"))], 10);
        assert_eq!(
            classify(&job, Some(&pod_with(Some(RunResult::Interrupted), false))),
            None
        );
        assert_eq!(classify(&Job::default(), None), None);
    }

    #[test]
    fn blocked_and_plan_changed_count_toward_nothing() {
        let job = job_with(&[("Failed", Some("BackoffLimitExceeded"))], 10);
        let blocked = classify(&job, Some(&pod_with(Some(RunResult::Blocked), false))).unwrap();
        let changed = classify(&job, Some(&pod_with(Some(RunResult::PlanChanged), false))).unwrap();
        assert_eq!((blocked, changed), (Outcome::Blocked, Outcome::PlanChanged));
        assert!(!blocked.counts_as_failure() && !changed.counts_as_failure());
        assert_eq!(blocked.event_reason(), Some(EventReason::DestructivePlanBlocked));
        assert_eq!(changed.event_reason(), None);
    }

    #[test]
    fn a_failed_job_without_a_result_is_failed() {
        let job = job_with(&[("Failed", Some("BackoffLimitExceeded"))], 10);
        assert_eq!(classify(&job, None), Some(Outcome::Failed));
        assert_eq!(
            classify(&job, Some(&pod_with(Some(RunResult::Failed), false))),
            Some(Outcome::Failed)
        );
        assert_eq!(Outcome::Failed.event_reason(), Some(EventReason::JobFailed));
    }

    #[test]
    fn a_complete_job_succeeded_even_when_its_pod_is_gone() {
        let job = job_with(&[("Complete", None)], 10);
        assert_eq!(classify(&job, None), Some(Outcome::Succeeded));
        assert_eq!(
            classify(&job, Some(&pod_with(Some(RunResult::Succeeded), false))),
            Some(Outcome::Succeeded)
        );
        assert_eq!(finished_at(&job), Some(Timestamp::from_second(10).unwrap()));
    }

    fn arb_result() -> impl proptest::strategy::Strategy<Value = Option<RunResult>> {
        use proptest::prelude::*;
        prop::option::of(prop::sample::select(vec![
            RunResult::Succeeded,
            RunResult::Failed,
            RunResult::Blocked,
            RunResult::PlanChanged,
            RunResult::Interrupted,
        ]))
    }

    proptest::proptest! {
        #[test]
        fn a_deadline_kill_always_counts_whatever_the_runner_or_pod_says(result in arb_result(), disrupted: bool) {
            let o = classify_terminal(Terminal::Failed { deadline: true }, result, disrupted);
            proptest::prop_assert_eq!(o, Outcome::Deadline);
            proptest::prop_assert!(o.counts_as_failure());
        }

        #[test]
        fn classify_never_panics_on_any_termination_message(message in ".{0,300}", reason in "[A-Za-z]{0,20}", failed: bool) {
            let job = job_with(&[(if failed { "Failed" } else { "Complete" }, Some(reason.as_str()))], 1);
            let mut pod = pod_with(None, false);
            if let Some(t) = pod
                .status
                .as_mut()
                .and_then(|s| s.container_statuses.as_mut())
                .and_then(|cs| cs[0].state.as_mut())
                .and_then(|s| s.terminated.as_mut())
            {
                t.message = Some(message.clone());
            }
            proptest::prop_assert!(classify(&job, Some(&pod)).is_some());
        }
    }

    #[test]
    fn outcomes_round_trip_through_their_names() {
        for o in Outcome::ALL {
            assert_eq!(o.as_str().parse::<Outcome>(), Ok(o));
        }
        assert!("Deadline".parse::<Outcome>().is_err());
    }
}

//! Why `decide` chose what it chose (docs/rules.md): the `captf.io/reason` annotation,
//! `status.nextAction.reason`, and the explain output.

use std::fmt;

macro_rules! reasons {
    ($($v:ident),+ $(,)?) => {
        /// A decision's reason.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Reason { $($v),+ }

        impl Reason {
            pub const ALL: &'static [Reason] = &[$(Reason::$v),+];

            pub fn as_str(self) -> &'static str {
                match self { $(Reason::$v => stringify!($v)),+ }
            }
        }
    };
}

reasons!(
    InvalidSpec,
    PolicyViolation,
    ForbiddenReference,
    NameConflict,
    ReleasedStateNotAdopted,
    RunnerConfigUnavailable,
    Paused,
    JobActive,
    Deleting,
    StateUnreadable,
    MembersExist,
    AwaitingApproval,
    PlanChanged,
    PolicyDenied,
    InterruptedApply,
    InputsChanged,
    DriftRemediation,
    RemediationLimit,
    RefreshRequested,
    DriftCheckDue,
    Idle,
    InputsUnresolved,
    ClusterInfrastructurePending,
    ClusterBusy,
    MemberJobActive,
    Queued,
    DeletingBackoff,
    InterruptedApplyBackoff,
    InputsChangedBackoff,
    DriftRemediationBackoff,
    RefreshRequestedBackoff,
    DriftCheckDueBackoff,
);

impl Reason {
    /// `<Reason>Backoff` for a reason that starts a Job; `None` for the others.
    pub fn backoff(self) -> Option<Reason> {
        Some(match self {
            Reason::Deleting => Reason::DeletingBackoff,
            Reason::InterruptedApply => Reason::InterruptedApplyBackoff,
            Reason::InputsChanged => Reason::InputsChangedBackoff,
            Reason::DriftRemediation => Reason::DriftRemediationBackoff,
            Reason::RefreshRequested => Reason::RefreshRequestedBackoff,
            Reason::DriftCheckDue => Reason::DriftCheckDueBackoff,
            _ => return None,
        })
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backoff_reason_is_its_start_reason_with_backoff_appended() {
        for r in Reason::ALL {
            if let Some(b) = r.backoff() {
                assert_eq!(b.as_str(), format!("{}Backoff", r.as_str()));
            }
        }
        assert_eq!(Reason::InputsChanged.backoff(), Some(Reason::InputsChangedBackoff));
        assert_eq!(Reason::Idle.backoff(), None);
    }
}

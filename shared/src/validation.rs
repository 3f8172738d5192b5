//! Validation (DESIGN.md §2.1): every violation with its field path, the rule and the
//! offending value, plus warnings for legal but doubtful values.

use std::fmt;

use crate::types::CaptfObject;

/// One broken rule: `<field>: <rule> (got <value>)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The field path, e.g. `spec.jobs.lockTimeoutSeconds`.
    pub field: String,
    /// What is wrong, e.g. `must be less than spec.jobs.activeDeadlineSeconds (3600)`.
    pub rule: String,
    /// The offending value, rendered as JSON.
    pub value: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} (got {})", self.field, self.rule, self.value)
    }
}

/// What validation found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub violations: Vec<Violation>,
    pub warnings: Vec<String>,
}

impl Report {
    pub fn is_valid(&self) -> bool {
        self.violations.is_empty()
    }

    /// Every violation in one message, `; `-separated.
    pub fn message(&self) -> String {
        self.violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Validate an object being created.
pub fn validate_create(obj: &CaptfObject) -> Report {
    let _ = obj;
    Report::default()
}

/// Validate an update: everything `validate_create` checks, plus immutability.
pub fn validate_update(old: &CaptfObject, new: &CaptfObject) -> Report {
    let _ = old;
    validate_create(new)
}

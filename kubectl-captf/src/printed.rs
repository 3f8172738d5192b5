//! What a command prints, and the JSON every `-o json` answer is printed as.

use serde_json::Value;

/// What a command prints: `stdout` is the answer, `stderr` notes around it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Printed {
    pub stdout: String,
    pub stderr: String,
    /// Part of the answer is missing (`stderr` says which and why): exit 1.
    pub partial: bool,
}

impl Printed {
    pub(crate) fn out(stdout: String) -> Printed {
        Printed {
            stdout,
            ..Default::default()
        }
    }
}

pub(crate) fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default() + "\n"
}

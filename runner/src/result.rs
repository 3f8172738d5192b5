//! Reporting the one result: the termination log (≤ 4096 bytes, always valid JSON); the summary
//! line in the Job's log is `RunnerResult::summary_line` (docs/runner.md).

use std::path::{Path, PathBuf};

use captf_shared::protocol::RunnerResult;

#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    #[error("failed to write the result to {path}: {source}")]
    WriteTerminationLog { path: PathBuf, source: std::io::Error },
}

/// Write the result to the termination log, trimmed to the kubelet's limit.
pub fn write_termination_log(path: &Path, result: &RunnerResult) -> Result<(), ResultError> {
    std::fs::write(path, result.to_termination_message()).map_err(|source| ResultError::WriteTerminationLog {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use captf_shared::protocol::{Phase, RunResult, TERMINATION_MESSAGE_LIMIT};

    #[test]
    fn a_message_longer_than_4096_bytes_is_written_as_valid_trimmed_json() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("termination-log");
        let r = RunnerResult::new(
            RunResult::Failed,
            Phase::Apply,
            "Error: ".to_string() + &"x".repeat(10_000),
        );
        write_termination_log(&path, &r).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.len() <= TERMINATION_MESSAGE_LIMIT);
        let back = RunnerResult::parse(&text).unwrap();
        assert_eq!(back.result, RunResult::Failed);
        assert_eq!(back.phase, Phase::Apply);
        assert!(back.message.starts_with("Error: xxx"));
    }

    #[test]
    fn an_unwritable_termination_log_names_the_path() {
        let r = RunnerResult::new(RunResult::Succeeded, Phase::Drift, "ok");
        let err = write_termination_log(Path::new("/nonexistent/dir/log"), &r).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("failed to write the result to /nonexistent/dir/log: ")
        );
    }
}

//! Force-unlock of a stale lock handed over by the controller (docs/rules.md, docs/runner.md).
//!
//! `force-unlock -force <id>` exits 0 when it released the lock. Two failures are expected and
//! harmless: the lock is already gone (`state is already unlocked`), or somebody else holds the
//! lock now (`lock id "<id>" does not match existing lock`); both follow `Failed to unlock
//! state:` with exit code 1. Any other failure fails the run in phase `unlock`.

/// What `force-unlock` came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnlockOutcome {
    Unlocked,
    AlreadyUnlocked,
    HeldByOther,
    Failed,
}

impl UnlockOutcome {
    /// May the run go on?
    pub fn tolerated(self) -> bool {
        !matches!(self, UnlockOutcome::Failed)
    }

    pub fn describe(self) -> &'static str {
        match self {
            UnlockOutcome::Unlocked => "the stale state lock was released",
            UnlockOutcome::AlreadyUnlocked => "the stale state lock was already released",
            UnlockOutcome::HeldByOther => "the state lock is now held by another holder; not touched",
            UnlockOutcome::Failed => "force-unlock failed",
        }
    }
}

/// The arguments: flags before the ID, as Terraform's CLI requires.
pub fn args(lock_id: &str) -> Vec<String> {
    vec![
        "force-unlock".to_string(),
        "-force".to_string(),
        "-no-color".to_string(),
        lock_id.to_string(),
    ]
}

/// Classify a finished `force-unlock` by its exit code and what it printed.
pub fn classify(exit_code: Option<i32>, output: &str) -> UnlockOutcome {
    if exit_code == Some(0) {
        return UnlockOutcome::Unlocked;
    }
    if exit_code != Some(1) {
        return UnlockOutcome::Failed;
    }
    if output.contains("state is already unlocked") {
        UnlockOutcome::AlreadyUnlocked
    } else if output.contains("does not match existing lock") {
        UnlockOutcome::HeldByOther
    } else {
        UnlockOutcome::Failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn success_is_unlocked() {
        assert_eq!(
            classify(Some(0), "Terraform state has been successfully unlocked!"),
            UnlockOutcome::Unlocked
        );
    }

    #[test]
    fn already_unlocked_is_tolerated() {
        let o = classify(Some(1), "Failed to unlock state: state is already unlocked\n");
        assert_eq!(o, UnlockOutcome::AlreadyUnlocked);
        assert!(o.tolerated());
    }

    #[test]
    fn a_lock_taken_by_another_holder_is_tolerated() {
        let text = "Failed to unlock state: lock id \"0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55\" does not match existing lock\n\
                    Lock Info:\n  ID:        11111111-2222-3333-4444-555555555555\n  Who:       alice@laptop\n";
        let o = classify(Some(1), text);
        assert_eq!(o, UnlockOutcome::HeldByOther);
        assert!(o.tolerated());
    }

    #[test]
    fn any_other_unlock_failure_fails_the_run() {
        let o = classify(Some(1), "Failed to unlock state: Unauthorized");
        assert_eq!(o, UnlockOutcome::Failed);
        assert!(!o.tolerated());
        // A tolerated message with an unexpected exit code (or a signal) is still a failure.
        assert_eq!(classify(Some(2), "state is already unlocked"), UnlockOutcome::Failed);
        assert_eq!(classify(None, "state is already unlocked"), UnlockOutcome::Failed);
    }

    #[test]
    fn flags_come_before_the_lock_id() {
        assert_eq!(args("abc"), vec!["force-unlock", "-force", "-no-color", "abc"]);
    }

    proptest! {
        #[test]
        fn output_without_the_two_phrases_never_passes_on_exit_1(text in "[a-zA-Z :\"\\n]{0,200}") {
            prop_assume!(!text.contains("state is already unlocked") && !text.contains("does not match existing lock"));
            prop_assert_eq!(classify(Some(1), &text), UnlockOutcome::Failed);
        }
    }
}

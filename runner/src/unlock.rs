//! Force-unlock of a stale lock handed over by the controller (docs/rules.md, docs/runner.md).
//!
//! `force-unlock -force <id>` exits 0 when it released the lock. Two failures are expected and
//! harmless: the lock is already gone (`state is already unlocked`), or somebody else holds the
//! lock now (`lock id "<id>" does not match existing lock`); both follow `Failed to unlock
//! state:` with exit code 1. Any other failure fails the run in phase `unlock`.
//!
//! `force-unlock` needs `init` to have succeeded, and `init` itself needs the lock when the state
//! was never written: the kubernetes backend locks the state to write its first, empty version.
//! A runner killed in that window leaves a lock that stops every later `init`. For that case
//! [`release_lease`] does what `force-unlock` does, on the lock Lease through the API, when the
//! handed-over ID holds it.

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

/// What a lock Lease comes to when `lock_id` is to be released: the holder cleared and the lock
/// info removed when `lock_id` holds it (as the kubernetes backend's unlock leaves it); else the
/// outcome, and the Lease untouched.
pub fn release(lease: &mut k8s_openapi::api::coordination::v1::Lease, lock_id: &str) -> UnlockOutcome {
    let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
    match holder {
        None | Some("") => return UnlockOutcome::AlreadyUnlocked,
        Some(h) if h != lock_id => return UnlockOutcome::HeldByOther,
        Some(_) => {}
    }
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = None;
    }
    if let Some(a) = lease.metadata.annotations.as_mut() {
        a.remove(captf_shared::keys::ANNOTATION_TF_LOCK_INFO);
    }
    UnlockOutcome::Unlocked
}

/// Release the lock Lease `namespace/name` if `lock_id` holds it, with the pod's own
/// credentials; the update carries the read's resourceVersion, so a lock taken in between is
/// never cleared.
pub async fn release_lease(namespace: &str, name: &str, lock_id: &str) -> Result<UnlockOutcome, String> {
    use k8s_openapi::api::coordination::v1::Lease;
    let config = kube::Config::infer().await.map_err(|e| e.to_string())?;
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    let api: kube::Api<Lease> = kube::Api::namespaced(client, namespace);
    let mut lease = api
        .get(name)
        .await
        .map_err(|e| format!("get lease {namespace}/{name}: {e}"))?;
    let outcome = release(&mut lease, lock_id);
    if outcome == UnlockOutcome::Unlocked {
        api.replace(name, &Default::default(), &lease)
            .await
            .map_err(|e| format!("update lease {namespace}/{name}: {e}"))?;
    }
    Ok(outcome)
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

    fn lease(holder: Option<&str>) -> k8s_openapi::api::coordination::v1::Lease {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "lock-tfstate-default-x", "resourceVersion": "7",
                         "annotations": {"app.terraform.io/lock-info": "{}", "other": "kept"}},
            "spec": {"holderIdentity": holder},
        }))
        .unwrap()
    }

    #[test]
    fn a_lease_held_by_the_handed_over_id_is_released_like_the_backend_does() {
        let mut l = lease(Some("dead"));
        assert_eq!(release(&mut l, "dead"), UnlockOutcome::Unlocked);
        assert_eq!(l.spec.as_ref().unwrap().holder_identity, None);
        let a = l.metadata.annotations.as_ref().unwrap();
        assert!(!a.contains_key("app.terraform.io/lock-info"));
        assert_eq!(a.get("other").map(String::as_str), Some("kept"));
        assert_eq!(
            l.metadata.resource_version.as_deref(),
            Some("7"),
            "the update is conditional"
        );
    }

    #[test]
    fn a_lease_held_by_anyone_else_or_by_nobody_is_left_alone() {
        for (holder, want) in [
            (Some("alice"), UnlockOutcome::HeldByOther),
            (None, UnlockOutcome::AlreadyUnlocked),
            (Some(""), UnlockOutcome::AlreadyUnlocked),
        ] {
            let mut l = lease(holder);
            let before = l.clone();
            assert_eq!(release(&mut l, "dead"), want);
            assert_eq!(l, before);
        }
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

//! Whether Terraform's state can be read (docs/rules.md, "Deletion"): a
//! deletion is held while it cannot, because a destroy that cannot read the state would either
//! fail forever or, worse, destroy nothing and let the finalizer go.
//!
//! The state lives in the Secret `tfstate-default-<suffix>` under the data key `tfstate`, gzip
//! compressed (docs/runner.md; Terraform ≥ 1.6 continues a large state in `…-part-<N>` Secrets,
//! so only the first part is here and only its gzip header can be checked). What Terraform itself
//! treats as "no state yet" is readable: no Secret, or a Secret without the key or with an empty
//! value.

/// The first two bytes of every gzip stream (RFC 1952 §2.3.1).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// What a read of the state Secret returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateRead<'a> {
    /// The Secret does not exist: no state yet.
    Missing,
    /// The API refused to let the controller read it (401/403).
    Forbidden,
    /// The Secret's `tfstate` value (`None`: no such key).
    Data(Option<&'a [u8]>),
}

/// Why the state cannot be read, or `None` when it can (PURE). `secret` names the Secret.
pub fn unreadable(secret: &str, read: StateRead<'_>) -> Option<String> {
    match read {
        StateRead::Missing | StateRead::Data(None) => None,
        StateRead::Data(Some([])) => None,
        StateRead::Data(Some(d)) if d.starts_with(&GZIP_MAGIC) => None,
        StateRead::Data(Some(_)) => Some(format!(
            "the state Secret {secret} holds data under tfstate that is not gzip, so Terraform cannot read it; restore the state or remove the Secret"
        )),
        StateRead::Forbidden => Some(format!(
            "the controller is not allowed to read the state Secret {secret}; check its RBAC"
        )),
    }
}

/// Whether a read found no state at all: no Secret, or no (or an empty) `tfstate` value.
pub fn empty(read: StateRead<'_>) -> bool {
    matches!(
        read,
        StateRead::Missing | StateRead::Data(None) | StateRead::Data(Some([]))
    )
}

/// Why a deletion is held when the state is empty although inputs were applied (the durable
/// record on the inputs Secret says so), or `None`. A destroy then plans nothing, succeeds, and
/// the finalizer goes while the infrastructure stays, without a word: what happens when an object
/// moved without its state Secret (`clusterctl move` takes only Secrets with its move label) or
/// the Secret was deleted. Nothing is destroyed until a person restores the state or gives up.
pub fn missing_after_apply(secret: &str, state_empty: bool, applied_inputs_hash: Option<&str>) -> Option<String> {
    let applied = applied_inputs_hash.filter(|h| !h.is_empty())?;
    state_empty.then(|| {
        format!(
            "the state Secret {secret} holds no state although inputs {} were applied, so a destroy would delete nothing and leave the infrastructure behind; \
             restore the state into {secret} (after a move, copy it from the source cluster), or remove the finalizer captf.io/destroy to let the object go without a destroy",
            applied.get(..12).unwrap_or(applied)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: &str = "tfstate-default-tc-prod-eu-225654031b7f";

    #[test]
    fn no_state_secret_yet_is_readable() {
        assert_eq!(unreadable(S, StateRead::Missing), None);
    }

    #[test]
    fn a_secret_without_the_tfstate_key_or_with_an_empty_value_is_no_state_and_readable() {
        assert_eq!(unreadable(S, StateRead::Data(None)), None);
        assert_eq!(unreadable(S, StateRead::Data(Some(b""))), None);
    }

    #[test]
    fn gzip_state_is_readable() {
        assert_eq!(unreadable(S, StateRead::Data(Some(&[0x1f, 0x8b, 0x08, 0x00]))), None);
    }

    #[test]
    fn plain_json_where_gzip_belongs_is_unreadable_and_named() {
        let why = unreadable(S, StateRead::Data(Some(br#"{"version":4}"#))).expect("unreadable");
        assert!(why.contains(S) && why.contains("not gzip"), "{why}");
    }

    #[test]
    fn a_state_secret_the_controller_may_not_read_is_unreadable() {
        let why = unreadable(S, StateRead::Forbidden).expect("unreadable");
        assert!(why.contains("not allowed"), "{why}");
    }

    #[test]
    fn an_empty_state_after_an_apply_holds_the_deletion_and_says_how_to_go_on() {
        let why = missing_after_apply(S, true, Some("3f9a0c1d2e4b5a6978")).expect("held");
        assert!(
            why.contains(S) && why.contains("3f9a0c1d2e4b") && why.contains("restore"),
            "{why}"
        );
        assert!(!why.contains("3f9a0c1d2e4b5a6978"), "the hash is cut: {why}");
        // Nothing was ever applied: an empty state is the truth, and the destroy may run.
        assert_eq!(missing_after_apply(S, true, None), None);
        assert_eq!(missing_after_apply(S, true, Some("")), None);
        // A state that is there is destroyed against as usual.
        assert_eq!(missing_after_apply(S, false, Some("3f9a0c1d2e4b5a6978")), None);
    }

    #[test]
    fn a_state_is_empty_when_there_is_no_secret_no_key_or_no_bytes() {
        assert!(empty(StateRead::Missing));
        assert!(empty(StateRead::Data(None)));
        assert!(empty(StateRead::Data(Some(b""))));
        assert!(!empty(StateRead::Data(Some(&[0x1f, 0x8b]))));
        assert!(!empty(StateRead::Forbidden), "unknown is not empty");
    }

    proptest! {
        /// The verdict depends only on the gzip header: any gzip stream reads, anything else that
        /// is not empty does not.
        #[test]
        fn readable_exactly_when_empty_or_gzip(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let readable = unreadable(S, StateRead::Data(Some(&data))).is_none();
            prop_assert_eq!(readable, data.is_empty() || data.starts_with(&GZIP_MAGIC));
        }
    }
}

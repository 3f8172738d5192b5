//! Client-side state encryption (`spec.stateEncryption`, OpenTofu only): where the runner finds
//! the passphrases, what makes one usable, and what of the setting goes into the inputs (so a
//! change of it is applied, which is what rewrites the state in its new form).
//!
//! The passphrases themselves are never inputs: they reach the runner only as files the kubelet
//! mounts from the named Secrets, and OpenTofu only through `TF_ENCRYPTION` in its environment.

use serde::{Deserialize, Serialize};

use crate::types::{EncryptionMode, SecretKeyRef, StateEncryption};

/// The key read when a `SecretKeyRef` names none.
pub const DEFAULT_KEY: &str = crate::types::DEFAULT_SECRET_KEY;
/// Where the runner pod mounts the passphrases (read-only, mode 0400): under CAPTF's own
/// `/captf`, which no tenant mount may touch.
pub const MOUNT_PATH: &str = "/captf/state-encryption";
/// The runner pod's volume of the passphrases.
pub const VOLUME: &str = "state-encryption";
/// The file of `passphraseSecretRef` in the mount.
pub const PASSPHRASE_FILE: &str = "passphrase";
/// The file of `previousPassphraseSecretRef` in the mount.
pub const PREVIOUS_PASSPHRASE_FILE: &str = "previous-passphrase";
/// OpenTofu's PBKDF2 key provider refuses shorter passphrases.
pub const MIN_PASSPHRASE_CHARS: usize = 16;
/// The first OpenTofu release with state encryption.
pub const MIN_OPENTOFU: (u64, u64) = (1, 7);

/// Why a passphrase cannot be used, or `None` when it can.
pub fn passphrase_problem(value: &str) -> Option<String> {
    let n = value.chars().count();
    if n < MIN_PASSPHRASE_CHARS {
        return Some(format!(
            "holds a passphrase of {n} characters; OpenTofu needs at least {MIN_PASSPHRASE_CHARS}"
        ));
    }
    None
}

/// What of `spec.stateEncryption` the inputs carry: the mode and which Secret keys hold the
/// passphrases, never their values.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EncryptionInputs {
    pub mode: EncryptionMode,
    /// `<secret>/<key>` of the passphrase.
    pub passphrase: String,
    /// `<secret>/<key>` of the previous passphrase, during a rotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_passphrase: Option<String>,
}

fn describe(r: &SecretKeyRef) -> String {
    format!("{}/{}", r.name, r.key_or_default())
}

impl EncryptionInputs {
    pub fn of(spec: &StateEncryption) -> EncryptionInputs {
        EncryptionInputs {
            mode: spec.mode_or_default(),
            passphrase: describe(&spec.passphrase_secret_ref),
            previous_passphrase: spec.previous_passphrase_secret_ref.as_ref().map(describe),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passphrase_needs_at_least_16_characters() {
        assert!(passphrase_problem("0123456789abcdef").is_none());
        assert!(
            passphrase_problem("ünïcödé-pässwörd").is_none(),
            "characters, not bytes"
        );
        let why = passphrase_problem("0123456789abcde").expect("15 characters");
        assert!(why.contains("15 characters") && why.contains("16"), "{why}");
        assert!(passphrase_problem("").is_some());
    }

    #[test]
    fn the_inputs_name_the_secret_keys_and_never_hold_a_passphrase() {
        let spec = StateEncryption {
            passphrase_secret_ref: SecretKeyRef {
                name: "state-key".into(),
                key: None,
            },
            previous_passphrase_secret_ref: Some(SecretKeyRef {
                name: "old-key".into(),
                key: Some("k".into()),
            }),
            mode: None,
        };
        let i = EncryptionInputs::of(&spec);
        assert_eq!(i.mode, EncryptionMode::Encrypt);
        assert_eq!(i.passphrase, "state-key/passphrase");
        assert_eq!(i.previous_passphrase.as_deref(), Some("old-key/k"));
    }
}

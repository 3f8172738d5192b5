//! Credentials embedded in a module source never reach the log or the result.
//!
//! Module addresses may carry credentials: `git::https://oauth2:TOKEN@host/repo.git`,
//! `git::ssh://git@host/repo.git?sshkey=<base64 key>`, `s3::…?aws_access_key_secret=…`, or a
//! presigned URL's `X-Amz-Signature`. Terraform echoes the source ("Copying configuration from
//! …") and error messages may quote it, so the runner removes these values from every line it
//! logs and from the result message.

use captf_shared::mask::MIN_SECRET_LEN;

/// Query parameter names whose values are credentials (matched case-insensitively, as parts).
const SECRET_PARAM_PARTS: [&str; 7] = ["key", "token", "secret", "password", "signature", "credential", "auth"];

/// The credential values found in a module source: the userinfo of a URL and the values of
/// credential-like query parameters.
pub fn source_secrets(source: &str) -> Vec<String> {
    let mut found = Vec::new();
    // Userinfo: between "://" and the first "@" before the path.
    if let Some(i) = source.find("://") {
        let rest = &source[i + 3..];
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            let userinfo = &rest[..at];
            found.push(userinfo.to_string());
            if let Some((_, password)) = userinfo.split_once(':') {
                found.push(password.to_string());
            }
        }
    }
    if let Some(q) = source.find('?') {
        for pair in source[q + 1..].split(['&', '#']) {
            if let Some((name, value)) = pair.split_once('=') {
                let lower = name.to_ascii_lowercase();
                if SECRET_PARAM_PARTS.iter().any(|p| lower.contains(p)) {
                    found.push(value.to_string());
                }
            }
        }
    }
    found.retain(|s| s.len() >= MIN_SECRET_LEN && s != "git");
    // Longest first, so a secret containing another is masked whole.
    found.sort_by_key(|s| std::cmp::Reverse(s.len()));
    found.dedup();
    found
}

/// Sensitive values read from the environment: compared, never printed (`Debug` shows the
/// count only).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Sensitive(pub Vec<String>);

impl std::fmt::Debug for Sensitive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sensitive({} values)", self.0.len())
    }
}

// The forms a value is masked in and the masking itself are the shared rule (one home for the
// runner's log and result and the controller's read-back of outputs).
pub use captf_shared::mask::{MASK, forms, mask_list, redact, redact_bytes, redact_json, value_strings};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn userinfo_of_a_url_source_is_a_secret() {
        assert_eq!(
            source_secrets("git::https://oauth2:glpat-abcdef123456@gitlab.com/team/mod.git?ref=v1"),
            vec!["oauth2:glpat-abcdef123456", "glpat-abcdef123456"]
        );
        assert_eq!(
            source_secrets("git::https://ghp_abcdefgh1234@github.com/o/r.git"),
            vec!["ghp_abcdefgh1234"]
        );
    }

    #[test]
    fn ssh_user_git_is_not_a_secret_but_an_sshkey_is() {
        assert_eq!(
            source_secrets("git::ssh://git@github.com/o/r.git?ref=v1&sshkey=LS0tLS1CRUdJTiBPUEVOU1NI"),
            vec!["LS0tLS1CRUdJTiBPUEVOU1NI"]
        );
    }

    #[test]
    fn credential_query_parameters_are_secrets() {
        let s = source_secrets(
            "s3::https://s3.amazonaws.com/b/m.zip?aws_access_key_id=AKIA1234&aws_access_key_secret=wJalrXUtnFEMI&X-Amz-Signature=deadbeef99",
        );
        assert!(s.contains(&"AKIA1234".to_string()));
        assert!(s.contains(&"wJalrXUtnFEMI".to_string()));
        assert!(s.contains(&"deadbeef99".to_string()));
    }

    #[test]
    fn plain_sources_have_no_secrets() {
        assert!(source_secrets("registry.terraform.io/hashicorp/consul/aws").is_empty());
        assert!(source_secrets("git::https://example.com/m.git?ref=v1.2.0").is_empty());
        assert!(source_secrets("github.com/hashicorp/example?ref=main").is_empty());
    }

    #[test]
    fn redaction_masks_every_occurrence() {
        let secrets = source_secrets("git::https://user:hunter2pw@example.com/m.git");
        let line = "Copying configuration from \"git::https://user:hunter2pw@example.com/m.git\"... user:hunter2pw";
        let r = redact(line, &secrets);
        assert!(!r.contains("hunter2pw"), "{r}");
        assert_eq!(r.matches(MASK).count(), 2);
        assert_eq!(redact_bytes(line.as_bytes(), &secrets), r.as_bytes());
    }

    proptest! {
        #[test]
        fn a_redacted_text_never_contains_the_secret(
            pre in "[a-z :/\"]{0,20}", secret in "[A-Za-z0-9]{8,20}", post in "[a-z :/\"]{0,20}"
        ) {
            let source = format!("git::https://x:{secret}@example.com/m.git");
            let secrets = source_secrets(&source);
            let text = format!("{pre}{source}{post}{secret}");
            prop_assert!(!redact(&text, &secrets).contains(&secret));
            prop_assert!(!String::from_utf8_lossy(&redact_bytes(text.as_bytes(), &secrets)).contains(&secret));
        }
    }

    #[test]
    fn sensitive_debug_shows_no_value() {
        assert_eq!(
            format!("{:?}", Sensitive(vec!["hunter2pw".into()])),
            "Sensitive(1 values)"
        );
    }
}

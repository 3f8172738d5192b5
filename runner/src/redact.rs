//! Credentials embedded in a module source never reach the log or the result.
//!
//! Module addresses may carry credentials: `git::https://oauth2:TOKEN@host/repo.git`,
//! `git::ssh://git@host/repo.git?sshkey=<base64 key>`, `s3::…?aws_access_key_secret=…`, or a
//! presigned URL's `X-Amz-Signature`. Terraform echoes the source ("Copying configuration from
//! …") and error messages may quote it, so the runner removes these values from every line it
//! logs and from the result message.

/// Query parameter names whose values are credentials (matched case-insensitively, as parts).
const SECRET_PARAM_PARTS: [&str; 7] = ["key", "token", "secret", "password", "signature", "credential", "auth"];
/// Shorter values are not redacted (they would mangle unrelated text and protect nothing).
const MIN_SECRET_LEN: usize = 4;
/// What a redacted value becomes.
pub const MASK: &str = "***";

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

/// Replace every occurrence of every secret in `text`.
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for s in secrets {
        if !s.is_empty() && out.contains(s.as_str()) {
            out = out.replace(s.as_str(), MASK);
        }
    }
    out
}

/// As [`redact`], on bytes that may not be UTF-8.
pub fn redact_bytes(bytes: &[u8], secrets: &[String]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for s in secrets {
        let needle = s.as_bytes();
        if needle.is_empty() {
            continue;
        }
        let mut result = Vec::with_capacity(out.len());
        let mut i = 0;
        while i < out.len() {
            if out[i..].starts_with(needle) {
                result.extend_from_slice(MASK.as_bytes());
                i += needle.len();
            } else {
                result.push(out[i]);
                i += 1;
            }
        }
        out = result;
    }
    out
}

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
}

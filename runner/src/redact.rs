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

/// Sensitive values read from the environment: compared, never printed (`Debug` shows the
/// count only).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Sensitive(pub Vec<String>);

impl std::fmt::Debug for Sensitive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sensitive({} values)", self.0.len())
    }
}

/// The strings a sensitive value may show up as in what the runner writes: itself, JSON-escaped
/// (inside a JSON document), and base64 (standard and URL-safe; unpadded, so the padded form is
/// masked too). Values shorter than 4 characters are not masked.
pub fn forms(value: &str) -> Vec<String> {
    use base64::Engine as _;
    if value.len() < MIN_SECRET_LEN {
        return vec![];
    }
    let json = serde_json::to_string(value).unwrap_or_default();
    let escaped = json
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(value)
        .to_string();
    vec![
        value.to_string(),
        escaped,
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(value),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value),
    ]
}

/// The strings of a variable's value to mask: every string in it (at any depth), and for a
/// value that is not a string its compact JSON text too.
pub fn value_strings(v: &serde_json::Value) -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            serde_json::Value::Object(m) => m.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = vec![];
    walk(v, &mut out);
    if !v.is_string() {
        out.push(v.to_string());
    }
    out
}

/// Every form of every value, longest first (so a secret containing another is masked whole),
/// without duplicates.
pub fn mask_list(values: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = values.into_iter().flat_map(|v| forms(&v)).collect();
    out.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out.dedup();
    out
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

    #[test]
    fn a_sensitive_value_is_masked_raw_json_escaped_and_base64() {
        let secret = "pa\"ss\\word-1234";
        let masks = mask_list([secret.to_string()]);
        let json = serde_json::to_string(&serde_json::json!({"m": format!("error: {secret}")})).unwrap();
        assert!(
            !redact(&json, &masks).contains("ss\\\\word"),
            "{}",
            redact(&json, &masks)
        );
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
        let out = redact(&format!("token {b64}"), &masks);
        assert!(out.starts_with("token ***"), "{out}");
        assert!(!out.contains(b64.trim_end_matches('=')), "{out}");
        assert_eq!(redact(&format!("x {secret} y"), &masks), "x *** y");
    }

    #[test]
    fn short_values_are_not_masked() {
        assert!(mask_list(["abc".to_string()]).is_empty());
    }

    #[test]
    fn every_string_inside_a_structured_variable_is_sensitive() {
        let v = serde_json::json!({"user": "admin", "keys": ["k1-secret", "k2-secret"], "n": 1234});
        let s = value_strings(&v);
        for want in ["admin", "k1-secret", "k2-secret"] {
            assert!(s.contains(&want.to_string()), "{s:?}");
        }
        assert!(s.contains(&v.to_string()), "the JSON text too");
    }

    #[test]
    fn sensitive_debug_shows_no_value() {
        assert_eq!(
            format!("{:?}", Sensitive(vec!["hunter2pw".into()])),
            "Sensitive(1 values)"
        );
    }

    proptest! {
        /// After masking, a value of at least 4 characters appears in no text, JSON document or
        /// base64 encoding of it.
        #[test]
        fn no_form_of_a_masked_value_survives(
            value in "[a-m\"\\\\]{4,24}",
            before in "[n-z ]{0,20}",
            after in "[n-z ]{0,20}",
        ) {
            use base64::Engine as _;
            let masks = mask_list([value.clone()]);
            let text = format!("{before}{value}{after}");
            prop_assert!(!redact(&text, &masks).contains(&value));
            let json = serde_json::to_string(&text).unwrap();
            let escaped = serde_json::to_string(&value).unwrap();
            let escaped = &escaped[1..escaped.len() - 1];
            prop_assert!(!redact(&json, &masks).contains(escaped));
            let b64 = base64::engine::general_purpose::STANDARD.encode(&value);
            prop_assert!(!redact(&b64, &masks).contains(&b64[..b64.trim_end_matches('=').len()]));
        }
    }
}

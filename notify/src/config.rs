//! Targets: how they are configured (YAML from a ConfigMap key or a chart value), the rules a
//! configuration must follow, and a target resolved with its URL and token.
//!
//! URLs and tokens come from Secrets and are secrets themselves (a Slack incoming-webhook URL
//! is its own credential). They never appear in `Debug`, `Display`, errors or metric labels:
//! a token prints as `***`, a URL as its scheme, host and port followed by `/***`
//! (`https://hooks.slack.com/***`), which says where notifications go without saying how to
//! post there.

use std::collections::BTreeSet;
use std::fmt;

use hyper::Uri;
use hyper::header::HeaderValue;
use serde::{Deserialize, Serialize};

use crate::event::EventKind;

/// The longest target name: a DNS-1123 label, as it is a metric label value and a log field.
pub const MAX_TARGET_NAME: usize = 63;
/// The most targets a configuration may list.
pub const MAX_TARGETS: usize = 32;

/// A key of a Secret in the controller's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretKeyRef {
    pub name: String,
    pub key: String,
}

/// The receiver's protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TargetKind {
    /// POST of CAPTF's own JSON document.
    Generic,
    /// A Slack-compatible incoming webhook: POST `{"text": …}` in mrkdwn.
    Slack,
    /// CloudEvents 1.0 over HTTP, structured mode.
    CloudEvents,
}

impl TargetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Generic => "Generic",
            TargetKind::Slack => "Slack",
            TargetKind::CloudEvents => "CloudEvents",
        }
    }
}

/// One target as configured. The YAML form:
///
/// ```yaml
/// - name: platform-slack
///   kind: Slack
///   urlSecret: {name: captf-notify, key: slack-url}
///   events: [awaiting-approval, apply-failed]
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TargetSpec {
    pub name: String,
    pub kind: TargetKind,
    pub url_secret: SecretKeyRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret: Option<SecretKeyRef>,
    /// The events sent to this target; empty (or left out) means all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<EventKind>,
}

/// A configuration that breaks a rule, naming the field (`targets[1].urlSecret.key`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ConfigError {
    pub field: String,
    pub reason: String,
}

impl ConfigError {
    fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// Read a YAML list of targets and check it with [`validate_targets`]. A field of the wrong
/// type or an unknown event name is reported at its path (`targets[0].events[1]`).
pub fn parse_targets(yaml: &str) -> Result<Vec<TargetSpec>, Vec<ConfigError>> {
    let de = serde_yaml_ng::Deserializer::from_str(yaml);
    let specs: Vec<TargetSpec> = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." {
            "targets".to_string()
        } else if path.starts_with('[') {
            format!("targets{path}")
        } else {
            format!("targets.{path}")
        };
        vec![ConfigError::new(field, e.into_inner().to_string())]
    })?;
    validate_targets(&specs)?;
    Ok(specs)
}

/// The rules a list of targets follows: at most [`MAX_TARGETS`], unique DNS-1123 label names,
/// Secret references that Kubernetes could resolve, no token for Slack (its URL is the
/// credential), no event listed twice.
pub fn validate_targets(specs: &[TargetSpec]) -> Result<(), Vec<ConfigError>> {
    let mut errors = Vec::new();
    if specs.len() > MAX_TARGETS {
        errors.push(ConfigError::new(
            "targets",
            format!("{} targets; at most {MAX_TARGETS}", specs.len()),
        ));
    }
    let mut names = BTreeSet::new();
    for (i, t) in specs.iter().enumerate() {
        let at = |f: &str| format!("targets[{i}].{f}");
        if !captf_shared::names::is_dns1123_label(&t.name) {
            errors.push(ConfigError::new(
                at("name"),
                format!(
                    "{:?} is not a DNS-1123 label (lowercase letters, digits and '-', at most {MAX_TARGET_NAME})",
                    shorten(&t.name)
                ),
            ));
        } else if !names.insert(t.name.as_str()) {
            errors.push(ConfigError::new(at("name"), format!("{:?} names two targets", t.name)));
        }
        check_secret_ref(&t.url_secret, &at("urlSecret"), &mut errors);
        if let Some(r) = &t.token_secret {
            if t.kind == TargetKind::Slack {
                errors.push(ConfigError::new(
                    at("tokenSecret"),
                    "a Slack incoming webhook takes no token (its URL is the credential)",
                ));
            }
            check_secret_ref(r, &at("tokenSecret"), &mut errors);
        }
        let mut seen = BTreeSet::new();
        for (j, e) in t.events.iter().enumerate() {
            if !seen.insert(*e) {
                errors.push(ConfigError::new(
                    format!("targets[{i}].events[{j}]"),
                    format!("{e} is listed twice"),
                ));
            }
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

fn check_secret_ref(r: &SecretKeyRef, field: &str, errors: &mut Vec<ConfigError>) {
    if !captf_shared::names::is_dns1123_subdomain(&r.name) {
        errors.push(ConfigError::new(
            format!("{field}.name"),
            format!("{:?} is not a Secret name", shorten(&r.name)),
        ));
    }
    // A Secret's data keys: alphanumerics, '-', '_' and '.', at most 253.
    let key_ok = !r.key.is_empty()
        && r.key.len() <= 253
        && r.key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !key_ok {
        errors.push(ConfigError::new(
            format!("{field}.key"),
            format!("{:?} is not a Secret key", shorten(&r.key)),
        ));
    }
}

/// A configured name as an error quotes it: a very long one is cut, so an error stays readable.
fn shorten(s: &str) -> String {
    const MAX: usize = 80;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(MAX).collect::<String>())
    }
}

/// A secret string (a token) that prints as `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Masked(String);

impl Masked {
    pub fn new(value: impl Into<String>) -> Self {
        Masked(value.into())
    }

    /// The value itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Masked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(captf_shared::mask::MASK)
    }
}

impl fmt::Display for Masked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(captf_shared::mask::MASK)
    }
}

/// A receiver's URL: http or https, with a host, without credentials in it. Prints as
/// `scheme://host[:port]/***`.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookUrl(Uri);

impl WebhookUrl {
    /// Check a URL read from a Secret. The reasons never quote the URL.
    pub fn parse(s: &str) -> Result<Self, String> {
        let uri: Uri = s.parse().map_err(|_| "is not a URL".to_string())?;
        match uri.scheme_str() {
            Some("http") | Some("https") => {}
            Some(_) => return Err("the URL must be http or https".into()),
            None => return Err("the URL must start with http:// or https://".into()),
        }
        let Some(auth) = uri.authority() else {
            return Err("the URL has no host".into());
        };
        if auth.as_str().contains('@') {
            return Err("the URL must not carry credentials; put a token in tokenSecret".into());
        }
        if auth.host().is_empty() {
            return Err("the URL has no host".into());
        }
        Ok(WebhookUrl(uri))
    }

    pub(crate) fn uri(&self) -> &Uri {
        &self.0
    }

    fn origin(&self) -> String {
        let scheme = self.0.scheme_str().unwrap_or("");
        let host = self.0.host().unwrap_or("");
        match self.0.port_u16() {
            Some(p) => format!("{scheme}://{host}:{p}"),
            None => format!("{scheme}://{host}"),
        }
    }
}

impl fmt::Debug for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.origin(), captf_shared::mask::MASK)
    }
}

impl fmt::Display for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A target with its Secrets' values: what [`crate::start`] delivers to.
#[derive(Clone, Debug)]
pub struct Target {
    pub(crate) name: String,
    pub(crate) kind: TargetKind,
    pub(crate) url: WebhookUrl,
    /// The whole `Authorization` header, marked sensitive; checked once here.
    pub(crate) authorization: Option<(Masked, HeaderValue)>,
    /// Empty: every event.
    pub(crate) events: Vec<EventKind>,
}

impl Target {
    /// A target from its spec and the values its Secrets hold. Surrounding whitespace is
    /// trimmed (a value written with `echo` ends in a newline). Errors name the Secret
    /// reference (`targets[slack].urlSecret`), never the value.
    pub fn resolve(spec: &TargetSpec, url: &str, token: Option<&str>) -> Result<Target, ConfigError> {
        let field = |f: &str| format!("targets[{}].{f}", spec.name);
        let url = WebhookUrl::parse(url.trim()).map_err(|why| {
            ConfigError::new(
                field("urlSecret"),
                format!("Secret {} key {}: {why}", spec.url_secret.name, spec.url_secret.key),
            )
        })?;
        let authorization = match (token.map(str::trim), &spec.token_secret) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(ConfigError::new(
                    field("tokenSecret"),
                    "a token was given but none is configured",
                ));
            }
            (None, Some(r)) => {
                return Err(ConfigError::new(
                    field("tokenSecret"),
                    format!("Secret {} key {}: no token was given", r.name, r.key),
                ));
            }
            (Some(t), Some(r)) => {
                let bad = || {
                    ConfigError::new(
                        field("tokenSecret"),
                        format!(
                            "Secret {} key {}: the token must be non-empty visible ASCII",
                            r.name, r.key
                        ),
                    )
                };
                if t.is_empty() || !t.bytes().all(|b| b.is_ascii_graphic()) {
                    return Err(bad());
                }
                let mut value = HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| bad())?;
                value.set_sensitive(true);
                Some((Masked::new(t), value))
            }
        };
        Ok(Target {
            name: spec.name.clone(),
            kind: spec.kind,
            url,
            authorization,
            events: spec.events.clone(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn kind(&self) -> TargetKind {
        self.kind
    }

    pub fn wants(&self, event: EventKind) -> bool {
        self.events.is_empty() || self.events.contains(&event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: TargetKind, token: bool) -> TargetSpec {
        TargetSpec {
            name: "hook".into(),
            kind,
            url_secret: SecretKeyRef {
                name: "captf-notify".into(),
                key: "url".into(),
            },
            token_secret: token.then(|| SecretKeyRef {
                name: "captf-notify".into(),
                key: "token".into(),
            }),
            events: vec![],
        }
    }

    #[test]
    fn a_target_list_reads_from_yaml() {
        let yaml = r"
- name: platform-slack
  kind: Slack
  urlSecret: {name: captf-notify, key: slack-url}
  events: [awaiting-approval, apply-failed]
- name: audit
  kind: CloudEvents
  urlSecret: {name: captf-notify, key: ce-url}
  tokenSecret: {name: captf-notify, key: ce-token}
";
        let specs = parse_targets(yaml).unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(
            specs[0].events,
            vec![EventKind::AwaitingApproval, EventKind::ApplyFailed]
        );
        assert!(specs[1].events.is_empty());
        assert_eq!(specs[1].kind, TargetKind::CloudEvents);
    }

    #[test]
    fn an_unknown_event_name_is_refused_at_its_path() {
        let yaml = "- name: a\n  kind: Generic\n  urlSecret: {name: s, key: k}\n  events: [destroyed, exploded]\n";
        let errs = parse_targets(yaml).unwrap_err();
        assert_eq!(errs[0].field, "targets[0].events[1]", "{errs:?}");
        assert!(errs[0].reason.contains("exploded"), "{errs:?}");
    }

    #[test]
    fn an_unknown_field_is_refused_at_its_path() {
        let yaml = "- name: a\n  kind: Generic\n  urlSecret: {name: s, key: k}\n  url: https://x\n";
        let errs = parse_targets(yaml).unwrap_err();
        assert_eq!(errs[0].field, "targets[0].url", "{errs:?}");
        assert!(errs[0].reason.contains("url"), "{errs:?}");
    }

    #[test]
    fn names_are_bounded_labels_and_unique() {
        let mut a = spec(TargetKind::Generic, false);
        a.name = "x".repeat(MAX_TARGET_NAME + 1);
        let mut b = spec(TargetKind::Generic, false);
        b.name = "Hook".into();
        let c = spec(TargetKind::Generic, false);
        let d = spec(TargetKind::Slack, false);
        let errs = validate_targets(&[a, b, c, d]).unwrap_err();
        let fields: Vec<_> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            ["targets[0].name", "targets[1].name", "targets[3].name"],
            "{errs:?}"
        );
        let mut ok = spec(TargetKind::Generic, false);
        ok.name = "x".repeat(MAX_TARGET_NAME);
        assert_eq!(validate_targets(&[ok]), Ok(()));
    }

    #[test]
    fn a_slack_target_takes_no_token() {
        let errs = validate_targets(&[spec(TargetKind::Slack, true)]).unwrap_err();
        assert_eq!(errs[0].field, "targets[0].tokenSecret");
    }

    #[test]
    fn secret_references_must_be_resolvable() {
        let mut s = spec(TargetKind::Generic, false);
        s.url_secret.name = "Not_A_Name".into();
        s.url_secret.key = "a/b".into();
        let errs = validate_targets(&[s]).unwrap_err();
        let fields: Vec<_> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["targets[0].urlSecret.name", "targets[0].urlSecret.key"]);
    }

    #[test]
    fn too_many_targets_are_refused() {
        let specs: Vec<_> = (0..=MAX_TARGETS)
            .map(|i| {
                let mut s = spec(TargetKind::Generic, false);
                s.name = format!("t{i}");
                s
            })
            .collect();
        let errs = validate_targets(&specs).unwrap_err();
        assert_eq!(errs[0].field, "targets");
    }

    #[test]
    fn a_url_that_is_not_http_is_refused_naming_the_secret_not_the_url() {
        for bad in [
            "ftp://files.example.com/s3cr3tpath",
            "file:///s3cr3tpath",
            "hooks.example.com/s3cr3tpath",
            "https://user:s3cr3tpath@example.com/x",
            "",
            "http://",
        ] {
            let e = Target::resolve(&spec(TargetKind::Generic, false), bad, None).unwrap_err();
            assert_eq!(e.field, "targets[hook].urlSecret", "{bad:?}: {e}");
            assert!(!e.to_string().contains("s3cr3tpath"), "{e}");
        }
        assert!(Target::resolve(&spec(TargetKind::Generic, false), "http://127.0.0.1:80/x\n", None).is_ok());
    }

    #[test]
    fn debug_shows_where_a_target_posts_but_not_its_secrets() {
        let t = Target::resolve(
            &spec(TargetKind::Generic, true),
            "https://hooks.example.com:8443/services/s3cr3tpath?sig=s3cr3tsig",
            Some("s3cr3ttoken"),
        )
        .unwrap();
        let debug = format!("{t:?}");
        assert!(debug.contains("https://hooks.example.com:8443/***"), "{debug}");
        for secret in ["s3cr3tpath", "s3cr3tsig", "s3cr3ttoken"] {
            assert!(!debug.contains(secret), "{debug}");
        }
        assert_eq!(format!("{}", Masked::new("s3cr3t")), "***");
    }

    #[test]
    fn a_token_with_a_line_break_is_refused_without_quoting_it() {
        let e = Target::resolve(
            &spec(TargetKind::Generic, true),
            "https://h.example.com/",
            Some("s3cr3t\r\nX-Evil: 1"),
        )
        .unwrap_err();
        assert_eq!(e.field, "targets[hook].tokenSecret");
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
    }
}

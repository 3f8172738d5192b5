//! The limits of a spec: the bounds and patterns the CRD schemas carry (the types name them in
//! their schema attributes) and validation checks, in one place both read, so the two cannot
//! disagree. [`crate::validation`] re-exports them.

use std::borrow::Cow;
use std::time::Duration;

/// `module.source` is at most this many characters.
pub const MAX_MODULE_SOURCE_CHARS: usize = 2048;
/// `variables`, serialized as JSON, is at most this many bytes (512 KiB).
pub const MAX_VARIABLES_BYTES: usize = 512 * 1024;
/// `jobs.activeDeadlineSeconds` bounds.
pub const MIN_ACTIVE_DEADLINE_SECONDS: i64 = 60;
pub const MAX_ACTIVE_DEADLINE_SECONDS: i64 = 604_800;
/// `drift.interval` bounds (when not `0`).
pub const MIN_DRIFT_INTERVAL: Duration = Duration::from_secs(60);
pub const MAX_DRIFT_INTERVAL: Duration = Duration::from_secs(168 * 3600);
/// A drift interval below this (and not `0`) draws a warning.
pub const WARN_DRIFT_INTERVAL_BELOW: Duration = Duration::from_secs(5 * 60);
/// Env names with this prefix are the runner's own.
pub const RESERVED_ENV_PREFIX: &str = "CAPTF_";
/// At most this many `variablesFrom` entries (bounds the CRD's CEL rule over them).
pub const MAX_VARIABLES_FROM: usize = 32;
/// Most entries in `spec.guard.policyRefs`.
pub const MAX_POLICY_REFS: usize = 8;
/// The most policy text (all modules together, the platform's and the object's) a plan is
/// checked against, in bytes: it travels in the inputs Secret beside the inputs.
pub const MAX_PLAN_POLICY_BYTES: usize = 512 * 1024;
/// Terraform variable (and output) names as CAPTF accepts them (docs/api.md).
pub const VARIABLE_NAME_PATTERN: &str = "^[A-Za-z_][A-Za-z0-9_-]*$";
/// At most this many `exports` of a TerraformCluster: each becomes a variable of every member,
/// so the list stays short enough to read in a `kubectl get -o yaml`.
pub const MAX_EXPORTS: usize = 64;
/// An export name is at most this long (a Terraform output name; the member's variable adds
/// the `cluster_` prefix).
pub const MAX_EXPORT_NAME_LEN: usize = 128;
/// At most this many `jobs.env` entries (bounds the CRD's CEL rule over them).
pub const MAX_ENV: usize = 256;
/// At most this many `jobs.envFrom` entries.
pub const MAX_ENV_FROM: usize = 32;
/// At most this many `jobs.volumes` and `jobs.volumeMounts` entries.
pub const MAX_VOLUMES: usize = 32;
/// `drift.interval` is at most this many characters (bounds the CRD's CEL `duration()`).
pub const MAX_DRIFT_INTERVAL_CHARS: usize = 64;
/// DNS-1123 subdomains (object names) are at most this long.
pub const MAX_DNS1123_SUBDOMAIN_LEN: usize = 253;
/// Secret and ConfigMap data keys are at most this long.
pub const MAX_DATA_KEY_LEN: usize = 253;
/// The CRD pattern of a DNS-1123 subdomain (Kubernetes' own expression).
pub const DNS1123_SUBDOMAIN_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// The CRD pattern of a data key (Kubernetes' `IsConfigMapKey` expression; `.` and `..` are left
/// to the webhook).
pub const DATA_KEY_PATTERN: &str = r"^[-._a-zA-Z0-9]+$";
/// The CRD pattern of `module.source`: no whitespace, not starting like a local path (`./`,
/// `../`, `/`). The address forms are left to the webhook.
pub const MODULE_SOURCE_PATTERN: &str = r"^[^\s./]\S*$";

/// Every message, warning or quoted input that must stay bounded goes through this one cutter:
/// `s` cut to at most `max` bytes at a character boundary, with `…` when cut.
pub fn cut_to_bytes(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}…", &s[..end]))
}

//! `spec.jobs` fields that shape the runner pod: labels, annotations, volumes and mounts,
//! `envFrom`, the priority class and image pull Secrets. What is the controller's own
//! ([`crate::pod`]) may not be overridden; what the tenant policy restricts is checked in
//! [`crate::policy`].

use std::collections::BTreeSet;

use super::{FieldPath, MAX_ENV_FROM, MAX_VOLUMES, RESERVED_ENV_PREFIX, Report};
use crate::names::{is_dns1123_label, is_dns1123_subdomain};
use crate::pod;
use crate::types::JobsSpec;

const DNS1123_SUBDOMAIN: &str =
    "must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)";

pub(super) fn check_pod_fields(report: &mut Report, path: &FieldPath, jobs: &JobsSpec) {
    check_env_from(report, path, jobs);
    for (key, value) in jobs.pod_labels.iter().flatten() {
        let at = path.child("podLabels").key(key);
        if pod::is_reserved_label(key) {
            report.violation(
                &at,
                "is the controller's: keys under captf.io/ and cluster.x-k8s.io/cluster-name may not be set",
                key,
            );
        } else if !is_qualified_name(key) {
            report.violation(&at, QUALIFIED_NAME, key);
        }
        if !is_label_value(value) {
            report.violation(
                &at,
                "value must be at most 63 characters: letters, digits, '-', '_' and '.', starting and ending with a letter or digit",
                value,
            );
        }
    }
    for key in jobs.pod_annotations.iter().flatten().map(|(k, _)| k) {
        let at = path.child("podAnnotations").key(key);
        if pod::is_reserved_annotation(key) {
            report.violation(&at, "is the controller's: keys under captf.io/ may not be set", key);
        } else if pod::is_security_annotation(key) {
            report.violation(
                &at,
                format!(
                    "sets the runner's security profile, which is CAPTF's: keys under {} may not be set",
                    pod::SECURITY_ANNOTATION_PREFIXES.join(", ")
                ),
                key,
            );
        } else if !is_qualified_name(key) {
            report.violation(&at, QUALIFIED_NAME, key);
        }
    }
    check_volumes(report, path, jobs);
    if let Some(p) = &jobs.priority_class_name
        && !is_dns1123_subdomain(p)
    {
        report.violation(&path.child("priorityClassName"), DNS1123_SUBDOMAIN, p);
    }
    if let Some(c) = &jobs.terraform_cli_config {
        let at = path.child("terraformCliConfig");
        if !is_dns1123_subdomain(&c.name) {
            report.violation(&at.child("name"), DNS1123_SUBDOMAIN, &c.name);
        }
        if let Some(key) = &c.key
            && !super::is_data_key(key)
        {
            report.violation(
                &at.child("key"),
                "must be a valid ConfigMap data key (letters, digits, '-', '_' and '.', at most 253 characters, not . or ..)",
                key,
            );
        }
    }
    for (i, s) in jobs.image_pull_secrets.iter().flatten().enumerate() {
        if !is_dns1123_subdomain(&s.name) {
            report.violation(
                &path.child("imagePullSecrets").index(i).child("name"),
                DNS1123_SUBDOMAIN,
                &s.name,
            );
        }
    }
}

fn check_env_from(report: &mut Report, path: &FieldPath, jobs: &JobsSpec) {
    let Some(from) = &jobs.env_from else { return };
    if from.len() > MAX_ENV_FROM {
        report.violation(
            &path.child("envFrom"),
            format!("must have at most {MAX_ENV_FROM} entries; the value is the count"),
            &from.len(),
        );
    }
    for (i, e) in from.iter().enumerate() {
        let at = path.child("envFrom").index(i);
        match (&e.config_map_ref, &e.secret_ref) {
            (Some(_), Some(_)) | (None, None) => {
                report.violation(&at, "must set exactly one of configMapRef or secretRef", e);
            }
            (Some(r), None) if !is_dns1123_subdomain(&r.name) => {
                report.violation(&at.child("configMapRef").child("name"), DNS1123_SUBDOMAIN, &r.name);
            }
            (None, Some(r)) if !is_dns1123_subdomain(&r.name) => {
                report.violation(&at.child("secretRef").child("name"), DNS1123_SUBDOMAIN, &r.name);
            }
            _ => {}
        }
        if let Some(prefix) = &e.prefix
            && prefix.starts_with(RESERVED_ENV_PREFIX)
        {
            report.violation(
                &at.child("prefix"),
                format!("must not start with {RESERVED_ENV_PREFIX} (reserved for the runner)"),
                prefix,
            );
        }
    }
}

fn check_volumes(report: &mut Report, path: &FieldPath, jobs: &JobsSpec) {
    let volumes = jobs.volumes.as_deref().unwrap_or_default();
    if volumes.len() > MAX_VOLUMES {
        report.violation(
            &path.child("volumes"),
            format!("must have at most {MAX_VOLUMES} entries; the value is the count"),
            &volumes.len(),
        );
    }
    let mut names = BTreeSet::new();
    for (i, v) in volumes.iter().enumerate() {
        let at = path.child("volumes").index(i);
        if pod::RESERVED_VOLUME_NAMES.contains(&v.name.as_str()) {
            report.violation(&at.child("name"), reserved_volume_rule(), &v.name);
        } else if !is_dns1123_label(&v.name) {
            report.violation(
                &at.child("name"),
                "must be a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters)",
                &v.name,
            );
        } else if !names.insert(v.name.as_str()) {
            report.violation(&at.child("name"), "must be unique among volumes", &v.name);
        }
        for (source, value) in pod::disallowed_volume_sources(v) {
            report.violation(&at.child(&source), disallowed_volume_rule(&source), &value);
        }
    }
    let mounts = jobs.volume_mounts.as_deref().unwrap_or_default();
    if mounts.len() > MAX_VOLUMES {
        report.violation(
            &path.child("volumeMounts"),
            format!("must have at most {MAX_VOLUMES} entries; the value is the count"),
            &mounts.len(),
        );
    }
    let mut paths = BTreeSet::new();
    for (i, m) in mounts.iter().enumerate() {
        let at = path.child("volumeMounts").index(i);
        if pod::RESERVED_VOLUME_NAMES.contains(&m.name.as_str()) {
            report.violation(&at.child("name"), reserved_volume_rule(), &m.name);
        } else if !volumes.iter().any(|v| v.name == m.name) {
            report.violation(
                &at.child("name"),
                format!("must name one of {}", path.child("volumes")),
                &m.name,
            );
        }
        let mount_path = at.child("mountPath");
        if !m.mount_path.starts_with('/') {
            report.violation(&mount_path, "must be an absolute path", &m.mount_path);
        } else if let Some(root) = pod::reserved_mount_collision(&m.mount_path) {
            report.violation(
                &mount_path,
                format!(
                    "must not be, contain or lie inside {root}: the runner's own mounts are under {}",
                    pod::RESERVED_MOUNT_ROOTS.join(", ")
                ),
                &m.mount_path,
            );
        } else if !paths.insert(m.mount_path.trim_end_matches('/')) {
            report.violation(&mount_path, "must be unique among volumeMounts", &m.mount_path);
        }
    }
}

/// Why a volume source is refused, naming the ones that are allowed.
fn disallowed_volume_rule(source: &str) -> String {
    let why = match source {
        "hostPath" => "a runner pod must not reach into its node's filesystem",
        "gitRepo" => {
            "the kubelet runs git for it on the node (CVE-2024-10220); clone in an init step or use the module source"
        }
        "flexVolume" => "it runs a driver binary on the node",
        _ => "it attaches storage or node resources outside the namespace's control",
    };
    format!(
        "is not allowed: {why}; runner pods may use only the volume types Pod Security's restricted profile allows ({})",
        pod::ALLOWED_VOLUME_SOURCES.join(", ")
    )
}

fn reserved_volume_rule() -> String {
    format!(
        "must not be one of the runner's own volumes ({})",
        pod::RESERVED_VOLUME_NAMES.join(", ")
    )
}

const QUALIFIED_NAME: &str = "key must be a qualified name: an optional DNS-1123 subdomain prefix and '/', then at most 63 \
     letters, digits, '-', '_' and '.', starting and ending with a letter or digit";

/// A label value: empty, or at most 63 of `[A-Za-z0-9_.-]`, alphanumeric at both ends.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_name_part(s)
}

fn is_name_part(s: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && alnum(s.chars().next())
        && alnum(s.chars().last())
}

/// A label or annotation key: `[prefix/]name`, the prefix a DNS-1123 subdomain.
pub fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => is_dns1123_subdomain(prefix) && is_name_part(name),
        None => is_name_part(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_and_values_follow_kubernetes_syntax() {
        assert!(is_qualified_name("team"));
        assert!(is_qualified_name("eks.amazonaws.com/role-arn"));
        assert!(is_qualified_name("azure.workload.identity/use"));
        assert!(!is_qualified_name("a/b/c"));
        assert!(!is_qualified_name("-bad"));
        assert!(!is_qualified_name("Upper.Case/x"));
        assert!(!is_qualified_name(&"x".repeat(64)));
        assert!(is_label_value(""));
        assert!(is_label_value("true"));
        assert!(!is_label_value("has space"));
        assert!(is_dns1123_label("aws-token"));
        assert!(!is_dns1123_label("a.b"));
    }
}

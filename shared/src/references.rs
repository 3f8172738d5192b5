//! The Secrets a spec names, and the rule that none of them is CAPTF's own (docs/trust.md).
//!
//! Each object's runner may read only its own state, outputs and lock, by RBAC. But what a spec
//! *names* is read for it by someone with more rights: the controller copies `variablesFrom`
//! Secrets into the object's inputs, and the kubelet mounts `secret` volumes and resolves
//! `env`/`envFrom` Secrets into the pod. Naming another object's `tfstate-default-<suffix>`,
//! `captf-inputs-<suffix>` or `captf-outputs-<suffix>` would hand its state or kubeconfig to the
//! namer without any RBAC right of its own. So no reference may name a Secret CAPTF (or Terraform's
//! kubernetes backend) keeps, whatever the tenant policy:
//!
//! - by name ([`reserved_secret_prefix`]): the webhook refuses it, and the controller again;
//! - by what the Secret carries ([`captf_mark`]): the controller reads each named Secret before
//!   a Job and refuses one with CAPTF's labels, annotations or owner, whatever its name, because
//!   a Secret can be created after the spec was admitted.
//!
//! The webhook and the controller both call [`forbidden_references`].

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::keys;
use crate::types::TerraformSpec;

/// Secret name prefixes that are CAPTF's or the state backend's: `captf-` (inputs, outputs, the
/// runner accounts' token Secrets `captf-runner-<suffix>-token-…`, and whatever CAPTF names
/// later) and `tfstate-` (the kubernetes backend's `tfstate-<workspace>-<suffix>`, every
/// workspace).
pub const RESERVED_SECRET_PREFIXES: [&str; 2] = ["captf-", "tfstate-"];

/// The backend's labels on a state Secret (`tfstate=true`, `tfstateSecretSuffix=<suffix>`).
const BACKEND_LABELS: [&str; 2] = ["tfstate", "tfstateSecretSuffix"];

/// One Secret a spec names, at its field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretReference {
    /// The JSON path of the reference (`spec.variablesFrom[0].secretRef`).
    pub field: String,
    /// The Secret's name.
    pub name: String,
    /// Who reads it.
    pub reader: Reader,
}

/// Who reads a Secret a spec names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// The controller, which copies its values into the object's inputs
    /// (`variablesFrom[].secretRef`).
    Controller,
    /// The runner pod: env, envFrom, volumes, module credentials, state passphrases.
    RunnerPod,
}

/// Every Secret `spec` names for its runner to read, directly or through the controller or
/// kubelet, in field order: `module.credentials.secretRef`, `variablesFrom[].secretRef`,
/// `jobs.env[].valueFrom.secretKeyRef`, `jobs.envFrom[].secretRef`, `jobs.volumes[].secret`,
/// `jobs.volumes[].projected.sources[].secret` and `jobs.volumes[].csi.nodePublishSecretRef`.
/// `jobs.imagePullSecrets` is left out: the kubelet reads those as registry credentials, and
/// nothing of them reaches the pod. The state encryption passphrases come last:
/// `stateEncryption.passphraseSecretRef` and `stateEncryption.previousPassphraseSecretRef`.
pub fn secret_references(spec: &TerraformSpec, prefix: &str) -> Vec<SecretReference> {
    let mut out = vec![];
    let mut push = |field: String, name: &str, reader: Reader| {
        out.push(SecretReference {
            field,
            name: name.to_string(),
            reader,
        })
    };
    if let Some(c) = &spec.module.credentials {
        push(
            format!("{prefix}.module.credentials.secretRef"),
            &c.secret_ref.name,
            Reader::RunnerPod,
        );
    }
    for (i, entry) in spec.variables_from.iter().flatten().enumerate() {
        if let Some(r) = &entry.secret_ref {
            push(
                format!("{prefix}.variablesFrom[{i}].secretRef"),
                &r.name,
                Reader::Controller,
            );
        }
    }
    if let Some(jobs) = &spec.jobs {
        job_secret_references(jobs, prefix, &mut |field, name| push(field, name, Reader::RunnerPod));
    }
    if let Some(e) = &spec.state_encryption {
        push(
            format!("{prefix}.stateEncryption.passphraseSecretRef"),
            &e.passphrase_secret_ref.name,
            Reader::RunnerPod,
        );
        if let Some(r) = &e.previous_passphrase_secret_ref {
            push(
                format!("{prefix}.stateEncryption.previousPassphraseSecretRef"),
                &r.name,
                Reader::RunnerPod,
            );
        }
    }
    out
}

fn job_secret_references(jobs: &crate::types::JobsSpec, prefix: &str, push: &mut impl FnMut(String, &str)) {
    for (i, e) in jobs.env.iter().flatten().enumerate() {
        if let Some(r) = e.value_from.as_ref().and_then(|v| v.secret_key_ref.as_ref()) {
            push(format!("{prefix}.jobs.env[{i}].valueFrom.secretKeyRef"), &r.name);
        }
    }
    for (i, e) in jobs.env_from.iter().flatten().enumerate() {
        if let Some(r) = &e.secret_ref {
            push(format!("{prefix}.jobs.envFrom[{i}].secretRef"), &r.name);
        }
    }
    for (i, v) in jobs.volumes.iter().flatten().enumerate() {
        if let Some(s) = &v.secret {
            push(
                format!("{prefix}.jobs.volumes[{i}].secret"),
                s.secret_name.as_deref().unwrap_or_default(),
            );
        }
        let sources = v
            .projected
            .as_ref()
            .and_then(|p| p.sources.as_deref())
            .unwrap_or_default();
        for (j, source) in sources.iter().enumerate() {
            if let Some(s) = &source.secret {
                push(
                    format!("{prefix}.jobs.volumes[{i}].projected.sources[{j}].secret"),
                    &s.name,
                );
            }
        }
        if let Some(r) = v.csi.as_ref().and_then(|c| c.node_publish_secret_ref.as_ref()) {
            push(format!("{prefix}.jobs.volumes[{i}].csi.nodePublishSecretRef"), &r.name);
        }
    }
}

/// The reserved prefix `name` starts with, if any ([`RESERVED_SECRET_PREFIXES`]).
pub fn reserved_secret_prefix(name: &str) -> Option<&'static str> {
    RESERVED_SECRET_PREFIXES.into_iter().find(|p| name.starts_with(p))
}

/// What marks a Secret as CAPTF's or the state backend's, whatever its name: a `captf.io/`
/// label or annotation, the backend's state labels, an owner that is one of CAPTF's kinds, or
/// being the token Secret of an object's runner account. `None`: nothing does. `type_` is the
/// Secret's `type`.
pub fn captf_mark(meta: &ObjectMeta, type_: Option<&str>) -> Option<String> {
    let prefix = crate::pod::RESERVED_KEY_PREFIX;
    if let Some(k) = meta
        .labels
        .iter()
        .flatten()
        .map(|(k, _)| k)
        .find(|k| k.starts_with(prefix))
    {
        return Some(format!("it carries CAPTF's label {k}"));
    }
    if let Some(k) = meta
        .annotations
        .iter()
        .flatten()
        .map(|(k, _)| k)
        .find(|k| k.starts_with(prefix))
    {
        return Some(format!("it carries CAPTF's annotation {k}"));
    }
    if let Some(k) = meta
        .labels
        .iter()
        .flatten()
        .map(|(k, _)| k)
        .find(|k| BACKEND_LABELS.contains(&k.as_str()))
    {
        return Some(format!("it carries the Terraform state label {k}: it holds a state"));
    }
    let group = |api_version: &str| api_version.split('/').next().unwrap_or_default().to_string();
    if let Some(o) = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| group(&o.api_version) == keys::GROUP && crate::Kind::ALL.iter().any(|k| k.as_str() == o.kind))
    {
        return Some(format!("it is owned by the {} {}", o.kind, o.name));
    }
    let account = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubernetes.io/service-account.name"));
    if type_ == Some("kubernetes.io/service-account-token")
        && let Some(sa) = account.filter(|sa| sa.starts_with(crate::runner_identity::OWN_RUNNER_ACCOUNT_PREFIX))
    {
        return Some(format!("it holds a token of the runner account {sa}"));
    }
    None
}

/// A reference to a Secret no spec may name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForbiddenReference {
    /// The field of the reference.
    pub field: String,
    /// The Secret it names.
    pub secret: String,
    /// Why the Secret is CAPTF's.
    pub why: String,
}

impl fmt::Display for ForbiddenReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: Secret {:?} is CAPTF's own ({}); no spec may read it, as it may hold another object's state, inputs or outputs",
            self.field, self.secret, self.why
        )
    }
}

/// Every reference of `spec` that names a CAPTF Secret: by its name, or by `mark_of(name)`, what
/// marks the Secret of that name as CAPTF's ([`captf_mark`] of the live Secret; the webhook,
/// which reads no Secrets, passes `|_| None`).
pub fn forbidden_references(
    spec: &TerraformSpec,
    prefix: &str,
    mut mark_of: impl FnMut(&str) -> Option<String>,
) -> Vec<ForbiddenReference> {
    secret_references(spec, prefix)
        .into_iter()
        .filter_map(|r| {
            let why = match reserved_secret_prefix(&r.name) {
                Some(p) => Some(format!("names starting with {p:?} are CAPTF's and the state backend's")),
                None => mark_of(&r.name),
            }?;
            Some(ForbiddenReference {
                field: r.field,
                secret: r.name,
                why,
            })
        })
        .collect()
}

/// Every forbidden reference, `; `-separated (a condition message or an admission denial).
pub fn message(forbidden: &[ForbiddenReference]) -> String {
    forbidden.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Kind, names};
    use proptest::prelude::*;

    fn spec(json: serde_json::Value) -> TerraformSpec {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn every_field_that_names_a_secret_for_the_runner_is_listed_and_image_pull_secrets_are_not() {
        let s = spec(serde_json::json!({
            "module": {"source": "git::https://example.com/m.git", "credentials": {"secretRef": {"name": "a"}}},
            "variablesFrom": [{"configMapRef": {"name": "cm"}}, {"secretRef": {"name": "b"}}],
            "jobs": {
                "env": [{"name": "X", "value": "1"}, {"name": "T", "valueFrom": {"secretKeyRef": {"name": "c", "key": "k"}}}],
                "envFrom": [{"secretRef": {"name": "d"}}],
                "volumes": [
                    {"name": "v0", "secret": {"secretName": "e"}},
                    {"name": "v1", "projected": {"sources": [{"configMap": {"name": "cm"}}, {"secret": {"name": "f"}}]}},
                    {"name": "v2", "csi": {"driver": "x", "nodePublishSecretRef": {"name": "g"}}},
                ],
                "imagePullSecrets": [{"name": "registry"}],
            },
            "stateEncryption": {"passphraseSecretRef": {"name": "h"}, "previousPassphraseSecretRef": {"name": "i", "key": "old"}},
        }));
        let refs: Vec<(String, String)> = secret_references(&s, "spec")
            .into_iter()
            .map(|r| (r.field, r.name))
            .collect();
        let want = [
            ("spec.module.credentials.secretRef", "a"),
            ("spec.variablesFrom[1].secretRef", "b"),
            ("spec.jobs.env[1].valueFrom.secretKeyRef", "c"),
            ("spec.jobs.envFrom[0].secretRef", "d"),
            ("spec.jobs.volumes[0].secret", "e"),
            ("spec.jobs.volumes[1].projected.sources[1].secret", "f"),
            ("spec.jobs.volumes[2].csi.nodePublishSecretRef", "g"),
            ("spec.stateEncryption.passphraseSecretRef", "h"),
            ("spec.stateEncryption.previousPassphraseSecretRef", "i"),
        ];
        assert_eq!(
            refs,
            want.map(|(f, n)| (f.to_string(), n.to_string())),
            "the ConfigMaps and the image pull Secret are no Secret reads of the runner"
        );
    }

    #[test]
    fn another_objects_state_inputs_and_outputs_secrets_are_forbidden_by_name() {
        let victim = names::suffix(Kind::TerraformCluster, "team-a", "victim");
        for secret in [
            names::state_secret_name(&victim),
            names::inputs_secret_name(&victim),
            names::outputs_secret_name(&victim),
            format!("{}-token-x7k2p", names::runner_service_account_name(&victim)),
            "tfstate-staging-victim-tc".to_string(),
        ] {
            let s = spec(serde_json::json!({
                "module": {"source": "git::https://example.com/m.git"},
                "variablesFrom": [{"secretRef": {"name": secret}}],
            }));
            let f = forbidden_references(&s, "spec", |_| None);
            assert_eq!(f.len(), 1, "{secret}");
            assert_eq!(f[0].field, "spec.variablesFrom[0].secretRef");
            assert!(
                f[0].to_string().contains(&format!("Secret {secret:?} is CAPTF's own")),
                "{}",
                f[0]
            );
        }
    }

    #[test]
    fn a_secret_with_captfs_marks_is_forbidden_whatever_its_name() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let label = |k: &str, v: &str| ObjectMeta {
            labels: Some([(k.to_string(), v.to_string())].into()),
            ..ObjectMeta::default()
        };
        assert!(
            captf_mark(&label("captf.io/object", "abc123"), None)
                .unwrap()
                .contains("captf.io/object")
        );
        assert!(
            captf_mark(&label("tfstate", "true"), None)
                .unwrap()
                .contains("holds a state")
        );
        let annotated = ObjectMeta {
            annotations: Some([("captf.io/applied-inputs-hash".to_string(), "h".to_string())].into()),
            ..ObjectMeta::default()
        };
        assert!(captf_mark(&annotated, None).unwrap().contains("annotation"));
        let owned = ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                api_version: keys::API_VERSION.into(),
                kind: "TerraformCluster".into(),
                name: "victim".into(),
                uid: "u".into(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        };
        assert_eq!(
            captf_mark(&owned, None).unwrap(),
            "it is owned by the TerraformCluster victim"
        );
        let token = ObjectMeta {
            annotations: Some(
                [(
                    "kubernetes.io/service-account.name".to_string(),
                    "captf-runner-victim-tc".to_string(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        };
        assert!(captf_mark(&token, Some("kubernetes.io/service-account-token")).is_some());
        assert_eq!(captf_mark(&token, Some("Opaque")), None);
        // A team's own Secret, labelled and owned by something else, is not CAPTF's.
        let own = ObjectMeta {
            labels: Some([("app.kubernetes.io/managed-by".to_string(), "terraform".to_string())].into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "x".into(),
                uid: "u".into(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        };
        assert_eq!(captf_mark(&own, Some("Opaque")), None);

        let s = spec(serde_json::json!({
            "module": {"source": "git::https://example.com/m.git"},
            "jobs": {"volumes": [{"name": "loot", "secret": {"secretName": "innocent-looking"}}]},
        }));
        let f = forbidden_references(&s, "spec", |name| {
            (name == "innocent-looking")
                .then(|| "it carries the Terraform state label tfstate: it holds a state".into())
        });
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].field, "spec.jobs.volumes[0].secret");
        assert!(forbidden_references(&s, "spec", |_| None).is_empty());
    }

    proptest! {
        /// Every name CAPTF gives a Secret, for any object, is reserved.
        #[test]
        fn every_secret_name_captf_makes_is_reserved(
            kind in prop::sample::select(Kind::ALL.to_vec()),
            ns in "[a-z0-9]{1,20}",
            name in "[a-z0-9]([-a-z0-9.]{0,80}[a-z0-9])?",
        ) {
            let suffix = names::suffix(kind, &ns, &name);
            for secret in [
                names::state_secret_name(&suffix),
                names::inputs_secret_name(&suffix),
                names::outputs_secret_name(&suffix),
                names::runner_service_account_name(&suffix),
            ] {
                prop_assert!(reserved_secret_prefix(&secret).is_some(), "{} is not reserved", secret);
            }
        }

        /// A name outside the reserved prefixes, on a Secret without CAPTF's marks, is never refused.
        #[test]
        fn a_plain_secret_is_never_forbidden(name in "[a-bd-su-z0-9][-a-z0-9]{0,30}") {
            let s = spec(serde_json::json!({
                "module": {"source": "git::https://example.com/m.git"},
                "variablesFrom": [{"secretRef": {"name": name}}],
                "jobs": {"envFrom": [{"secretRef": {"name": name}}]},
            }));
            prop_assert!(forbidden_references(&s, "spec", |_| None).is_empty());
        }
    }
}

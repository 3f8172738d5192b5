//! The tenant policy at the webhook: a spec outside it is denied with a message naming the
//! field and the policy; an update that keeps the spec is never blocked by it.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use captf_shared::policy::TenantPolicy;
use captf_webhook::AppState;
use captf_webhook::metrics::Metrics;
use clap::Parser;
use common::fixture;
use serde_json::{Value, json};

fn policy() -> TenantPolicy {
    TenantPolicy {
        env_from_secrets: false,
        ..TenantPolicy::only_defaults("ghcr.io/captf/runner:0.1.0", "captf-runner")
    }
}

async fn validate(policy: TenantPolicy, review: &Value) -> Value {
    common::validate_review(AppState::new(Arc::new(Metrics::new())).with_policy(policy), review).await
}

fn create_with_jobs(jobs: Value) -> Value {
    let mut r = fixture("cluster-create-accepted");
    r["request"]["object"]["spec"]["jobs"] = jobs;
    r
}

#[tokio::test]
async fn image_outside_allowed_prefixes_is_rejected_naming_the_field() {
    let resp = validate(policy(), &create_with_jobs(json!({"image": "evil.example/miner:1"}))).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    assert_eq!(resp["response"]["status"]["code"], 403);
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.contains("spec.jobs.image"), "{msg}");
    assert!(msg.contains("runner image policy"), "{msg}");
    assert!(msg.contains("ghcr.io/captf/runner:0.1.0"), "{msg}");
}

#[tokio::test]
async fn service_account_and_env_secret_outside_the_policy_are_rejected_naming_each_field() {
    let jobs = json!({
        "serviceAccountName": "cluster-admin",
        "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "other", "key": "k"}}}],
    });
    let resp = validate(policy(), &create_with_jobs(jobs)).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.contains("spec.jobs.serviceAccountName"), "{msg}");
    assert!(msg.contains("spec.jobs.env[0].valueFrom.secretKeyRef"), "{msg}");
}

#[tokio::test]
async fn env_from_secret_refs_and_secret_volumes_outside_the_policy_are_rejected_naming_each_field() {
    let jobs = json!({
        "envFrom": [{"configMapRef": {"name": "settings"}}, {"secretRef": {"name": "other"}}],
        "volumes": [
            {"name": "creds", "secret": {"secretName": "other"}},
            {"name": "ca", "projected": {"sources": [{"secret": {"name": "other-ca"}}]}},
        ],
        "volumeMounts": [{"name": "creds", "mountPath": "/creds"}, {"name": "ca", "mountPath": "/ca"}],
    });
    let resp = validate(policy(), &create_with_jobs(jobs.clone())).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.contains("spec.jobs.envFrom[1].secretRef"), "{msg}");
    assert!(msg.contains("spec.jobs.volumes[0].secret"), "{msg}");
    assert!(
        msg.contains("spec.jobs.volumes[1].projected.sources[0].secret"),
        "{msg}"
    );
    assert!(!msg.contains("envFrom[0]"), "a ConfigMap is no Secret read: {msg}");
    let allowed = TenantPolicy {
        env_from_secrets: true,
        ..policy()
    };
    let resp = validate(allowed, &create_with_jobs(jobs)).await;
    assert_eq!(resp["response"]["allowed"], true, "{resp}");
}

#[tokio::test]
async fn pod_fields_that_collide_with_the_controllers_are_rejected_naming_each_field() {
    let jobs = json!({
        "podLabels": {"captf.io/op": "destroy"},
        "volumes": [{"name": "node", "hostPath": {"path": "/"}}],
        "volumeMounts": [{"name": "node", "mountPath": "/work/x"}],
    });
    let resp = validate(TenantPolicy::unrestricted(), &create_with_jobs(jobs)).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("spec.jobs.podLabels[captf.io/op]: is the controller's"),
        "{msg}"
    );
    assert!(msg.contains("spec.jobs.volumes[0].hostPath: is not allowed"), "{msg}");
    assert!(
        msg.contains("spec.jobs.volumeMounts[0].mountPath: must not be, contain or lie inside /work"),
        "{msg}"
    );
}

#[tokio::test]
async fn another_objects_own_runner_account_is_rejected_even_when_the_policy_allows_any() {
    let jobs = json!({"serviceAccountName": "captf-runner-prod-us-tc"});
    let resp = validate(TenantPolicy::unrestricted(), &create_with_jobs(jobs)).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.contains("spec.jobs.serviceAccountName"), "{msg}");
    assert!(msg.contains("reserved"), "{msg}");
}

#[tokio::test]
async fn a_spec_inside_the_policy_is_allowed() {
    let jobs = json!({"image": "ghcr.io/captf/runner:0.1.0", "serviceAccountName": "captf-runner"});
    let resp = validate(policy(), &create_with_jobs(jobs)).await;
    assert_eq!(resp["response"]["allowed"], true, "{resp}");
}

#[tokio::test]
async fn an_update_that_keeps_a_spec_from_before_the_policy_is_allowed() {
    let mut r = fixture("cluster-update-accepted");
    r["request"]["object"]["spec"]["jobs"]["image"] = json!("old.example/runner:1");
    r["request"]["oldObject"]["spec"] = r["request"]["object"]["spec"].clone();
    r["request"]["object"]["metadata"]["finalizers"] = json!([]);
    let resp = validate(policy(), &r).await;
    assert_eq!(resp["response"]["allowed"], true, "{resp}");
}

#[test]
fn the_policy_flags_default_to_nothing_but_the_defaults() {
    let cli = captf_webhook::cli::Cli::try_parse_from([
        "captf-webhook",
        "--tls-cert-file=c",
        "--tls-key-file=k",
        "--allowed-runner-image-prefixes=ghcr.io/captf/runner:0.1.0,registry.corp/",
        "--allow-env-from-secrets=false",
    ])
    .unwrap();
    let p = cli.serve.to_config().unwrap().policy;
    // The runner image (this release's, by default) may always be named; the listed prefixes
    // follow it.
    assert_eq!(
        p.runner_image_prefixes,
        [
            captf_shared::policy::DEFAULT_RUNNER_IMAGE,
            "ghcr.io/captf/runner:0.1.0",
            "registry.corp/"
        ]
    );
    assert!(p.runner_service_accounts.is_empty(), "no service account may be set");
    assert!(!p.env_from_secrets);
}

/// The webhook reads the runner image and service account flags as the controller does (one
/// flag struct, captf-shared's `TenantPolicyArgs`): a spec may name the controller's own runner
/// image and account even when no allow list names them, and nothing else.
#[tokio::test]
async fn the_runner_image_and_service_account_flags_are_allowed_without_any_list() {
    let cli = captf_webhook::cli::Cli::try_parse_from([
        "captf-webhook",
        "--tls-cert-file=c",
        "--tls-key-file=k",
        "--runner-image=registry.corp/runner:2",
        "--runner-service-account=runners",
    ])
    .unwrap();
    let p = cli.serve.to_config().unwrap().policy;
    assert_eq!(p.runner_image_prefixes, ["registry.corp/runner:2"]);
    assert_eq!(p.runner_service_accounts, ["runners"]);
    let own = json!({"image": "registry.corp/runner:2", "serviceAccountName": "runners"});
    let resp = validate(p.clone(), &create_with_jobs(own)).await;
    assert_eq!(resp["response"]["allowed"], true, "{resp}");
    let other = json!({"image": "registry.corp/runner:3", "serviceAccountName": "deployer"});
    let resp = validate(p, &create_with_jobs(other)).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.contains("spec.jobs.image"), "{msg}");
    assert!(msg.contains("spec.jobs.serviceAccountName"), "{msg}");
    // Without the flags, the release's runner image, as the controller's default.
    let cli =
        captf_webhook::cli::Cli::try_parse_from(["captf-webhook", "--tls-cert-file=c", "--tls-key-file=k"]).unwrap();
    assert_eq!(
        cli.serve.to_config().unwrap().policy.runner_image_prefixes,
        [captf_shared::policy::DEFAULT_RUNNER_IMAGE]
    );
}

/// The attack at the webhook: a spec naming another object's state, inputs or outputs Secret,
/// in any field that reads a Secret for the runner, is refused naming each field, even by a
/// policy that allows everything.
#[tokio::test]
async fn another_objects_state_inputs_and_outputs_secrets_are_refused_whatever_the_policy() {
    let mut review = create_with_jobs(json!({
        "envFrom": [{"secretRef": {"name": "captf-inputs-victim-tc"}}],
        "volumes": [{"name": "loot", "secret": {"secretName": "tfstate-default-victim-tc"}}],
        "volumeMounts": [{"name": "loot", "mountPath": "/loot"}],
    }));
    review["request"]["object"]["spec"]["variablesFrom"] = json!([{"secretRef": {"name": "captf-outputs-victim-tc"}}]);
    let resp = validate(TenantPolicy::unrestricted(), &review).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    assert_eq!(resp["response"]["status"]["code"], 403);
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.starts_with("names CAPTF's own Secrets: "), "{msg}");
    for (field, secret) in [
        ("spec.variablesFrom[0].secretRef", "captf-outputs-victim-tc"),
        ("spec.jobs.envFrom[0].secretRef", "captf-inputs-victim-tc"),
        ("spec.jobs.volumes[0].secret", "tfstate-default-victim-tc"),
    ] {
        assert!(
            msg.contains(&format!("{field}: Secret {secret:?} is CAPTF's own")),
            "{field}: {msg}"
        );
    }
}

/// `variablesFrom` Secrets have their own switch: refused when it is off (the env switch does
/// not cover them), allowed when it is on; a ConfigMap is never a Secret read.
#[tokio::test]
async fn variables_from_a_secret_is_refused_when_the_policy_forbids_it() {
    let mut review = fixture("cluster-create-accepted");
    review["request"]["object"]["spec"]["variablesFrom"] = json!([
        {"configMapRef": {"name": "settings"}},
        {"secretRef": {"name": "other-teams-secret"}},
    ]);
    let off = TenantPolicy {
        variables_from_secrets: false,
        ..policy()
    };
    let resp = validate(off, &review).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.contains("spec.variablesFrom[1].secretRef"), "{msg}");
    assert!(!msg.contains("variablesFrom[0]"), "{msg}");
    // policy() forbids env from Secrets but leaves variablesFrom on.
    let resp = validate(policy(), &review).await;
    assert_eq!(resp["response"]["allowed"], true, "{resp}");
}

/// The attack: with both Secret switches off, a spec names the namespace's `db-password` as its
/// previous state passphrase (or its module credentials), which the runner pod would mount where
/// the module's code can read it. Refused naming each field, like every other Secret read.
#[tokio::test]
async fn a_state_passphrase_or_module_credentials_naming_any_secret_are_refused_when_the_policy_allows_no_secret_reads()
{
    let mut review = fixture("cluster-create-accepted");
    let spec = &mut review["request"]["object"]["spec"];
    spec["stateEncryption"] = json!({
        "passphraseSecretRef": {"name": "state-key", "key": "passphrase"},
        "previousPassphraseSecretRef": {"name": "db-password", "key": "password"},
        "mode": "Encrypt",
    });
    spec["module"]["credentials"] = json!({"secretRef": {"name": "teammates-git-key"}});
    spec["jobs"] = json!({"binary": "tofu"});
    let closed = TenantPolicy {
        variables_from_secrets: false,
        ..policy()
    };
    let resp = validate(closed, &review).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    for (field, name) in [
        ("spec.stateEncryption.previousPassphraseSecretRef", "db-password"),
        ("spec.stateEncryption.passphraseSecretRef", "state-key"),
        ("spec.module.credentials.secretRef", "teammates-git-key"),
    ] {
        assert!(
            msg.contains(&format!("{field}: \"{name}\" is a Secret")),
            "{field}: {msg}"
        );
    }
    let resp = validate(TenantPolicy::unrestricted(), &review).await;
    assert_eq!(
        resp["response"]["allowed"], true,
        "allowed when runner pods may read Secrets: {resp}"
    );
}

/// Pod fields that would leave the namespace's reach or the policy: a `gitRepo` volume (the
/// kubelet runs git on the node), a `system-` priority class, a toleration of every taint and a
/// control-plane node selector are refused naming each field, the first two whatever the policy.
#[tokio::test]
async fn git_repo_volumes_system_priority_classes_and_tolerating_every_taint_are_refused() {
    let jobs = json!({
        "volumes": [{"name": "src", "gitRepo": {"repository": "https://example.com/evil.git"}}],
        "volumeMounts": [{"name": "src", "mountPath": "/src"}],
        "priorityClassName": "system-node-critical",
        "tolerations": [{"operator": "Exists"}],
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
    });
    let resp = validate(TenantPolicy::unrestricted(), &create_with_jobs(jobs.clone())).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.contains("spec.jobs.volumes[0].gitRepo: is not allowed"), "{msg}");
    let mut no_git = jobs.clone();
    no_git.as_object_mut().unwrap().remove("volumes");
    no_git.as_object_mut().unwrap().remove("volumeMounts");
    let resp = validate(TenantPolicy::unrestricted(), &create_with_jobs(no_git.clone())).await;
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("spec.jobs.priorityClassName: priority class \"system-node-critical\" is reserved"),
        "{msg}"
    );
    assert!(
        !msg.contains("tolerations"),
        "the unrestricted policy allows any toleration and node label: {msg}"
    );
    let resp = validate(policy(), &create_with_jobs(no_git)).await;
    assert_eq!(resp["response"]["allowed"], false, "{resp}");
    let msg = resp["response"]["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("spec.jobs.tolerations[0]: an empty key (with operator Exists) tolerates every taint"),
        "{msg}"
    );
    assert!(
        msg.contains("spec.jobs.nodeSelector[node-role.kubernetes.io/control-plane]"),
        "{msg}"
    );
}

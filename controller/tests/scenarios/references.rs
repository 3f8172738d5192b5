//! References that would reach another object's state (docs/trust.md): a spec that names
//! CAPTF's own Secrets, by name or by what the Secret carries, is held with
//! `Ready=False/ForbiddenReference` and starts no Job, even when it reached the API past the
//! webhook. Under the chart's RBAC.

use anyhow::Result;
use serde_json::{Value, json};

use captf_shared::types::TerraformCluster;
use captf_shared::{Kind, Op};

use super::support::*;

/// The held object's `Ready` message, once it is `ForbiddenReference`.
async fn forbidden(env: &Env, name: &str) -> Result<String> {
    let c = env.until_reason(name, "Ready", "ForbiddenReference").await?;
    let (status, _, message) = condition(&c, "Ready").unwrap();
    assert_eq!(status, "False");
    Ok(message)
}

/// The attack: a co-tenant who may create TerraformClusters but not read Secrets names the
/// victim's outputs Secret (its kubeconfig) in `variablesFrom`, so the controller would copy it
/// into the thief's inputs. It is held, no Job starts and nothing of the victim's is copied;
/// once the spec names a Secret of its own, it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variables_from_another_objects_outputs_secret_is_held_and_nothing_is_copied() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    let j1 = env.create_cluster("prod-eu", json!({})).await?;
    env.run_until_booked(&j1, "succeeded").await?;
    env.until_ready("prod-eu").await?;
    let victim_outputs = "captf-outputs-prod-eu-tc";
    assert!(env.sim.get("/secrets", NS, victim_outputs).is_some());

    env.sim.put(cluster_json(
        "thief",
        json!({"variablesFrom": [{"secretRef": {"name": victim_outputs}}]}),
    ))?;
    let message = forbidden(&env, "thief").await?;
    assert!(message.contains("spec.variablesFrom[0].secretRef"), "{message}");
    assert!(message.contains(victim_outputs), "{message}");
    env.until_idle().await?;
    assert!(env.job_names(Kind::TerraformCluster, "thief").is_empty());
    assert!(
        env.sim.get("/secrets", NS, "captf-inputs-thief-tc").is_none(),
        "no inputs were written for the thief"
    );

    env.sim.put(secret_json("thief-vars", "size", b"small")?)?;
    env.merge_patch::<TerraformCluster>(
        "thief",
        json!({"spec": {"variablesFrom": [{"secretRef": {"name": "thief-vars"}}]}}),
    )
    .await?;
    env.job(Kind::TerraformCluster, "thief", Op::Apply, 1).await?;
    env.no_denials()?;
    Ok(())
}

/// A `secret` volume naming another object's state Secret is held (with env from Secrets
/// allowed, so the policy is not what stops it); and a Secret that carries CAPTF's marks is held
/// whatever its name, read when the controller decides, so one created or relabelled after
/// admission is caught, and released when it no longer carries them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_volume_of_another_objects_state_or_a_secret_with_captfs_marks_is_held() -> Result<()> {
    let mut a = args();
    a.policy.allow_env_from_secrets = true;
    let env = Env::with_args(captf_sim::Sim::builder(), &a).await?;
    env.sim
        .set_default_script(captf_sim::RunnerScript::realistic_with_outputs(outputs()));
    let loot = |secret: &str| {
        json!({"jobs": {
            "volumes": [{"name": "loot", "secret": {"secretName": secret}}],
            "volumeMounts": [{"name": "loot", "mountPath": "/loot"}],
        }})
    };
    env.sim
        .put(cluster_json("mounter", loot("tfstate-default-prod-eu-tc")))?;
    let message = forbidden(&env, "mounter").await?;
    assert!(message.contains("spec.jobs.volumes[0].secret"), "{message}");
    assert!(message.contains("tfstate-default-prod-eu-tc"), "{message}");

    // A copy of a state Secret under a plain name, as the backend labels it.
    let mut copy = secret_json("innocent-looking", "tfstate", b"state")?;
    copy["metadata"]["labels"] = json!({"tfstate": "true", "tfstateSecretSuffix": "prod-eu-tc"});
    env.sim.put(copy.clone())?;
    env.sim.put(cluster_json(
        "peeker",
        json!({"jobs": {"envFrom": [{"secretRef": {"name": "innocent-looking"}}]}}),
    ))?;
    let message = forbidden(&env, "peeker").await?;
    assert!(message.contains("spec.jobs.envFrom[0].secretRef"), "{message}");
    assert!(message.contains("Terraform state label"), "{message}");
    env.until_idle().await?;
    assert!(env.job_names(Kind::TerraformCluster, "mounter").is_empty());
    assert!(env.job_names(Kind::TerraformCluster, "peeker").is_empty());

    // Without the marks it is a Secret like any other: looked at again, the hold lifts.
    copy["metadata"]["labels"] = Value::Null;
    env.sim.put(copy)?;
    env.advance(30);
    env.job(Kind::TerraformCluster, "peeker", Op::Apply, 1).await?;
    env.no_denials()?;
    Ok(())
}

/// Placement at the controller (the webhook can be bypassed): a runner that would preempt the
/// node's critical pods or run on the control plane gets `Ready=False/PolicyViolation` naming
/// each field, and no Job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_system_priority_class_or_control_plane_placement_gets_policy_violation_and_no_job() -> Result<()> {
    let env = Env::with_realistic_runners().await?;
    env.sim.put(cluster_json(
        "squatter",
        json!({"jobs": {
            "priorityClassName": "system-node-critical",
            "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
        }}),
    ))?;
    let c = env.until_reason("squatter", "Ready", "PolicyViolation").await?;
    let (_, _, message) = condition(&c, "Ready").unwrap();
    assert!(message.contains("spec.jobs.priorityClassName"), "{message}");
    assert!(message.contains("spec.jobs.tolerations[0]"), "{message}");
    env.until_idle().await?;
    assert!(env.job_names(Kind::TerraformCluster, "squatter").is_empty());
    Ok(())
}

//! End-to-end tests of the `captf-runner` binary against the fake `tofu` in `tests/fake/tofu`,
//! which behaves as docs/runner.md documents and records every invocation.
#![allow(clippy::unwrap_used)]

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;

use captf_shared::inputs::canonical_hash;
use captf_shared::protocol::{Phase, PlanSummary, RunResult, TERMINATION_MESSAGE_LIMIT};
use nix::sys::signal::{Signal, kill};
use serde_json::{Value, json};

use support::*;

#[test]
fn apply_runs_init_from_module_init_plan_show_apply_output_in_order() {
    let r = Case::new("apply").run();
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    assert_eq!(
        r.argv,
        vec![
            INIT_FROM_MODULE.to_string(),
            INIT.to_string(),
            with_flags("plan", " -out=captf.tfplan"),
            "show -json -no-color captf.tfplan".to_string(),
            with_flags("apply", " captf.tfplan"),
            "output -json -no-color".to_string(),
        ]
    );
    assert_eq!(r.result.result, RunResult::Succeeded);
    assert_eq!(r.result.phase, Phase::Apply);
    assert_eq!(r.result.plan_hash.as_deref(), Some(canonical_hash(&json!([])).as_str()));
    assert_eq!(r.result.summary, Some(PlanSummary::default()));
    assert!(r.stdout.contains("Apply complete!"), "output is streamed: {}", r.stdout);
    assert_no_secrets(&r);
}

#[test]
fn work_dir_gets_the_kubernetes_backend_and_a_0600_variables_file() {
    let mut c = Case::new("apply");
    c.set("CAPTF_KEEP_WORK_DIR", "true");
    let r = c.run();
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    let backend = fs::read_to_string(c.path("work/backend.tf")).unwrap();
    assert!(backend.contains("backend \"kubernetes\""), "{backend}");
    assert!(backend.contains("secret_suffix     = \"prod-eu-tc\""), "{backend}");
    assert!(backend.contains("namespace         = \"team-a\""), "{backend}");
    assert!(backend.contains("host              = \"http://127.0.0.1:"), "{backend}");
    assert!(backend.contains("in_cluster_config = false"), "{backend}");
    let vars = c.path("work/terraform.tfvars.json");
    assert_eq!(fs::metadata(&vars).unwrap().permissions().mode() & 0o777, 0o600);
    let v: Value = serde_json::from_str(&fs::read_to_string(&vars).unwrap()).unwrap();
    assert_eq!(v, json!({"password": SECRET_VAR, "replicas": 3}));
    assert_no_secrets(&r);
}

#[test]
fn refresh_runs_apply_refresh_only_then_output() {
    let r = Case::new("refresh").run();
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    assert_eq!(
        r.argv[2..],
        [
            "apply -refresh-only -auto-approve -lock-timeout=300s -input=false -no-color".to_string(),
            "output -json -no-color".to_string()
        ]
    );
    assert_eq!(r.result.result, RunResult::Succeeded);
    assert_eq!(r.result.phase, Phase::Refresh);
}

#[test]
fn drift_exit_code_2_is_success_with_drift_true() {
    let r = Case::new("drift").set("FAKE_DRIFT_EXIT", "2").run();
    assert_eq!(r.outcome(), (Some(0), RunResult::Succeeded, Phase::Drift));
    assert_eq!(
        r.argv[2..],
        ["plan -detailed-exitcode -lock-timeout=300s -input=false -no-color".to_string()]
    );
    assert_eq!(r.result.drift, Some(true));
}

#[test]
fn drift_exit_code_0_is_success_with_drift_false() {
    let r = Case::new("drift").run();
    assert_eq!(r.code, Some(0));
    assert_eq!(r.result.result, RunResult::Succeeded);
    assert_eq!(r.result.drift, Some(false));
}

#[test]
fn drift_exit_code_1_is_a_failure_in_phase_drift() {
    let r = Case::new("drift").set("FAKE_DRIFT_EXIT", "1").run();
    assert_eq!(r.outcome(), (Some(1), RunResult::Failed, Phase::Drift));
    assert_eq!(r.result.drift, None);
    assert!(
        r.result.message.contains("Error: fake plan error"),
        "{}",
        r.result.message
    );
}

#[test]
fn destroy_runs_destroy_auto_approve_without_plan_or_guard() {
    let r = Case::new("destroy").plan(&destructive_changes()).run();
    assert_eq!(
        r.outcome(),
        (Some(0), RunResult::Succeeded, Phase::Destroy),
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(
        r.argv,
        vec![
            INIT_FROM_MODULE.to_string(),
            INIT.to_string(),
            "destroy -auto-approve -lock-timeout=300s -input=false -no-color".to_string()
        ]
    );
}

#[test]
fn handed_over_lock_is_force_unlocked_after_init_and_before_the_op() {
    let mut c = Case::new("apply");
    c.locked_by(LOCK_ID).set("CAPTF_FORCE_UNLOCK_ID", LOCK_ID);
    let r = c.run();
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    assert_eq!(r.argv[1], INIT);
    assert_eq!(r.argv[2], format!("force-unlock -force -no-color {LOCK_ID}"));
    assert!(r.argv[3].starts_with("plan "), "{:?}", r.argv);
    assert!(!c.path("lock").exists(), "the lock was released");
    assert_eq!(r.result.result, RunResult::Succeeded);
}

#[test]
fn force_unlock_of_an_already_unlocked_state_is_not_an_error() {
    let r = Case::new("drift").set("CAPTF_FORCE_UNLOCK_ID", LOCK_ID).run();
    assert_eq!(
        r.outcome(),
        (Some(0), RunResult::Succeeded, Phase::Drift),
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert!(r.stderr.contains("state is already unlocked") || r.stdout.contains("state is already unlocked"));
    assert_eq!(r.argv.len(), 4);
}

#[test]
fn force_unlock_of_a_lock_now_held_by_another_is_not_an_error_and_the_op_waits_for_it() {
    let mut c = Case::new("apply");
    c.locked_by(OTHER_LOCK_ID).set("CAPTF_FORCE_UNLOCK_ID", LOCK_ID);
    let r = c.run();
    // Unlock passed (the other holder's lock is untouched); the plan then times out on it.
    assert!(c.path("lock").exists());
    assert_eq!(r.argv[2], format!("force-unlock -force -no-color {LOCK_ID}"));
    assert_eq!(r.outcome(), (Some(1), RunResult::Failed, Phase::Plan));
    assert!(
        r.result.message.contains("Error acquiring the state lock"),
        "{}",
        r.result.message
    );
}

#[test]
fn any_other_force_unlock_failure_fails_in_phase_unlock_before_the_op() {
    let r = Case::new("apply")
        .set("CAPTF_FORCE_UNLOCK_ID", LOCK_ID)
        .set(
            "FAKE_UNLOCK_ERROR",
            "leases.coordination.k8s.io \"lock-tfstate-default-prod-eu-tc\" is forbidden",
        )
        .run();
    assert_eq!(r.outcome(), (Some(1), RunResult::Failed, Phase::Unlock));
    assert!(r.result.message.contains("is forbidden"), "{}", r.result.message);
    assert_eq!(r.argv.len(), 3, "no op ran after the failed unlock: {:?}", r.argv);
}

#[test]
fn a_foreign_lock_without_a_handover_fails_the_plan_after_the_lock_timeout() {
    let r = Case::new("apply").locked_by(OTHER_LOCK_ID).run();
    assert_eq!(r.result.result, RunResult::Failed);
    assert_eq!(r.result.phase, Phase::Plan);
    assert!(!r.argv.iter().any(|a| a.starts_with("force-unlock")));
}

#[test]
fn destructive_plan_is_blocked_without_approval() {
    let r = Case::new("apply").plan(&destructive_changes()).run();
    assert_eq!(
        r.outcome(),
        (Some(3), RunResult::Blocked, Phase::Guard),
        "{}{}",
        r.stdout,
        r.stderr
    );
    let hash = canonical_hash(&Value::Array(destructive_changes()));
    assert_eq!(r.result.plan_hash.as_deref(), Some(hash.as_str()));
    assert_eq!(
        r.result.summary,
        Some(PlanSummary {
            add: 1,
            change: 0,
            destroy: 1,
            replace: 1
        })
    );
    assert!(!r.argv.iter().any(|a| a.starts_with("apply")), "{:?}", r.argv);
}

#[test]
fn a_blocked_plan_is_kept_with_its_changes_and_its_text_as_the_log_shows_it() {
    let r = Case::new("apply").plan(&destructive_changes()).run();
    let (record, text) = r
        .kept_plan
        .clone()
        .expect("the blocked plan is kept beside the outputs");
    let kept: captf_shared::protocol::KeptPlan = serde_json::from_str(&record).unwrap();
    assert_eq!(Some(kept.hash.as_str()), r.result.plan_hash.as_deref());
    assert_eq!(Some(kept.summary), r.result.summary);
    let changes: Vec<(&str, &str)> = kept.changes.iter().map(|c| (c.address.as_str(), c.action())).collect();
    assert_eq!(changes, [("keep", "create"), ("old", "destroy"), ("swap", "replace")]);
    assert!(text.contains("Saved the plan to:"), "the plan's own output: {text}");
    assert!(r.stdout.contains(&text), "the kept text is what the log shows");
    assert!(!kept.truncated);
    assert_no_secrets(&r);
}

#[test]
fn an_approved_plan_once_applied_is_no_longer_kept_and_a_plan_that_deletes_nothing_is_never_kept() {
    let mut blocked = Case::new("apply");
    blocked.plan(&destructive_changes());
    let first = blocked.run();
    assert!(first.kept_plan.is_some());
    let hash = first.result.plan_hash.clone().unwrap();
    let applied = blocked.set("CAPTF_APPROVED_PLAN", &hash).run();
    assert_eq!(applied.result.result, RunResult::Succeeded, "{}", applied.stdout);
    assert!(applied.kept_plan.is_none(), "the kept plan was removed once applied");
    let plain = Case::new("apply").plan(&[rc("new", &["create"])]).run();
    assert_eq!(plain.result.result, RunResult::Succeeded);
    assert!(plain.kept_plan.is_none());
}

#[test]
fn a_kept_plan_is_removed_once_a_later_plan_supersedes_it_without_approval() {
    // A blocked plan is kept; the spec then changes so the next plan deletes nothing and runs
    // without approval: the old plan is no longer what anyone approves, and it must not share
    // the outputs Secret's size with the outputs.
    let mut case = Case::new("apply");
    case.plan(&destructive_changes());
    assert!(case.run().kept_plan.is_some());
    case.plan(&[rc("new", &["create"])]);
    let applied = case.run();
    assert_eq!(applied.result.result, RunResult::Succeeded, "{}", applied.stdout);
    assert!(applied.kept_plan.is_none(), "the superseded plan is still kept");
}

#[test]
fn destructive_plan_is_applied_with_the_matching_approved_hash() {
    let hash = canonical_hash(&Value::Array(destructive_changes()));
    let r = Case::new("apply")
        .plan(&destructive_changes())
        .set("CAPTF_APPROVED_PLAN", &hash)
        .run();
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    assert_eq!(r.result.result, RunResult::Succeeded);
    assert_eq!(r.result.plan_hash.as_deref(), Some(hash.as_str()));
    assert!(r.argv.contains(&with_flags("apply", " captf.tfplan")));
}

#[test]
fn destructive_plan_with_a_different_approved_hash_is_plan_changed() {
    let approved = canonical_hash(&json!([rc("old", &["delete"])]));
    let r = Case::new("apply")
        .plan(&destructive_changes())
        .set("CAPTF_APPROVED_PLAN", &approved)
        .run();
    assert_eq!(r.outcome(), (Some(4), RunResult::PlanChanged, Phase::Guard));
    let hash = canonical_hash(&Value::Array(destructive_changes()));
    assert_eq!(r.result.plan_hash.as_deref(), Some(hash.as_str()));
    assert!(r.result.message.contains(&approved), "{}", r.result.message);
    assert!(!r.argv.iter().any(|a| a.starts_with("apply")));
}

#[test]
fn guard_allow_applies_a_destructive_plan_without_approval() {
    let r = Case::new("apply")
        .plan(&destructive_changes())
        .set("CAPTF_GUARD", "Allow")
        .run();
    assert_eq!(r.code, Some(0));
    assert_eq!(r.result.result, RunResult::Succeeded);
    assert_eq!(r.result.summary.map(|s| s.is_destructive()), Some(true));
}

#[test]
fn a_child_killed_by_a_signal_is_a_failure_with_its_phase() {
    let r = Case::new("apply").set("FAKE_KILL_ON", "apply").run();
    assert_eq!(r.outcome(), (Some(1), RunResult::Failed, Phase::Apply));
    assert!(r.result.message.contains("killed by SIGKILL"), "{}", r.result.message);
}

#[test]
fn a_child_killed_during_plan_reports_phase_plan() {
    let r = Case::new("apply").set("FAKE_KILL_ON", "plan").run();
    assert_eq!(r.result.result, RunResult::Failed);
    assert_eq!(r.result.phase, Phase::Plan);
}

#[test]
fn sigterm_during_apply_sends_one_sigint_and_reports_interrupted_with_exit_5() {
    let mut c = Case::new("apply");
    c.set("FAKE_HANG_ON", "apply");
    let (mut child, pid) = c.spawn_until_started();
    kill(pid, Signal::SIGTERM).unwrap();
    // A second SIGTERM (kubelet retries, a human) must not become a second SIGINT.
    wait_for(&c.path("signals"), &mut child);
    kill(pid, Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.signal(), None);
    let r = c.finish(out);
    assert_eq!(
        r.outcome(),
        (Some(5), RunResult::Interrupted, Phase::Apply),
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(fs::read_to_string(c.path("signals")).unwrap(), "INT\n");
    assert!(r.stderr.contains("execution halted") || r.stdout.contains("execution halted"));
    // Nothing ran after the interrupted apply.
    assert_eq!(r.argv.last().unwrap(), &with_flags("apply", " captf.tfplan"));
}

#[test]
fn sigterm_during_drift_reports_interrupted_in_phase_drift() {
    let mut c = Case::new("drift");
    c.set("FAKE_HANG_ON", "plan");
    let (child, pid) = c.spawn_until_started();
    kill(pid, Signal::SIGTERM).unwrap();
    let r = c.finish(child.wait_with_output().unwrap());
    assert_eq!(r.outcome(), (Some(5), RunResult::Interrupted, Phase::Drift));
    assert_eq!(r.result.drift, None);
}

#[test]
fn a_message_longer_than_4096_bytes_is_trimmed_to_a_valid_json_result() {
    let r = Case::new("apply")
        .set("FAKE_FAIL_ON", "apply")
        .set(
            "FAKE_FAIL_MESSAGE",
            "Error: creating instance: quota exceeded in region eu-west-1 ÄÖÜ",
        )
        .set("FAKE_FAIL_REPEAT", "400")
        .run();
    assert_eq!(r.code, Some(1));
    assert!(
        r.termination_log.len() <= TERMINATION_MESSAGE_LIMIT,
        "{}",
        r.termination_log.len()
    );
    assert_eq!(r.result.result, RunResult::Failed);
    assert_eq!(r.result.phase, Phase::Apply);
    assert!(
        r.result
            .message
            .starts_with("tofu apply failed (exit code 1): Error: creating instance")
    );
    assert!(r.result.message.ends_with('…'));
}

#[test]
fn a_sensitive_output_is_never_printed_and_goes_to_the_store() {
    let mut c = Case::new("apply");
    c.outputs(&json!({
        "endpoint": {"sensitive": false, "type": "string", "value": "10.0.0.1:6443"},
        "kubeconfig": {"sensitive": true, "type": "string", "value": SECRET_OUTPUT}
    }));
    let r = c.run();
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    assert_no_secrets(&r);
    assert_eq!(
        r.result.outputs,
        Some([("endpoint".to_string(), json!("10.0.0.1:6443"))].into_iter().collect())
    );
    assert!(!r.result.outputs_in_secret);
    let stored = fs::read_to_string(c.path("outputs.json")).unwrap();
    assert!(stored.contains(SECRET_OUTPUT));
    assert_eq!(
        fs::metadata(c.path("outputs.json")).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn outputs_too_large_for_the_result_are_flagged_as_in_the_secret() {
    let mut c = Case::new("refresh");
    c.outputs(&json!({"big": {"sensitive": false, "type": "string", "value": "x".repeat(6000)}}));
    let r = c.run();
    assert_eq!(r.code, Some(0));
    assert_eq!(r.result.outputs, None);
    assert!(r.result.outputs_in_secret);
    assert!(r.termination_log.len() <= TERMINATION_MESSAGE_LIMIT);
    assert!(
        fs::read_to_string(c.path("outputs.json"))
            .unwrap()
            .contains(&"x".repeat(6000))
    );
}

#[test]
fn a_missing_binary_is_a_failure_in_phase_init() {
    let r = Case::new("apply").set("CAPTF_TF_BINARY", "/nonexistent/bin/tofu").run();
    assert_eq!(r.outcome(), (Some(1), RunResult::Failed, Phase::Init));
    assert!(
        r.result
            .message
            .starts_with("CAPTF_TF_BINARY is /nonexistent/bin/tofu, which is not found"),
        "{}",
        r.result.message
    );
    assert!(r.argv.is_empty());
}

#[test]
fn a_binary_that_is_another_program_than_its_name_promises_fails_init_naming_captf_tf_binary() {
    for (version, what) in [
        (
            "hello from some other tool",
            "a program that prints \"hello from some other tool\" for version",
        ),
        ("Terraform v1.0.3", "Terraform"),
    ] {
        let r = Case::new("apply").set("FAKE_VERSION", version).run();
        assert_eq!(r.outcome(), (Some(1), RunResult::Failed, Phase::Init), "{}", r.stdout);
        assert!(
            r.result.message.starts_with("CAPTF_TF_BINARY is ")
                && r.result.message.contains(&format!("which runs {what}, not OpenTofu")),
            "{}",
            r.result.message
        );
        assert!(r.argv.is_empty(), "nothing ran: {:?}", r.argv);
    }
}

/// A passphrase as a Secret would hold it.
const PASSPHRASE: &str = "pass-phrase-0f3a9c2e-never-shown";

/// Inputs asking for state encryption, and its passphrase mounted, as the controller makes them.
fn encrypted(case: &mut Case, previous: bool) {
    let mode = "Encrypt";
    let mut enc = json!({"mode": mode, "passphrase": "state-key/passphrase"});
    let mount = case.path("state-encryption");
    std::fs::create_dir_all(&mount).unwrap();
    std::fs::write(mount.join("passphrase"), format!("{PASSPHRASE}\n")).unwrap();
    if previous {
        enc["previousPassphrase"] = json!("old-key/passphrase");
        std::fs::write(mount.join("previous-passphrase"), "the-old-passphrase-also-never-shown").unwrap();
    }
    std::fs::write(
        case.path("inputs/inputs.json"),
        json!({"module": {"source": SOURCE}, "variables": {}, "stateEncryption": enc}).to_string(),
    )
    .unwrap();
    case.set("CAPTF_STATE_ENCRYPTION_DIR", &mount.display().to_string());
}

#[test]
fn state_encryption_reaches_every_state_command_as_tf_encryption_and_never_the_log_or_the_result() {
    let mut case = Case::new("apply");
    encrypted(&mut case, true);
    let env_log = case.path("env-log");
    case.set("FAKE_ENV_LOG", &env_log.display().to_string());
    let r = case.run();
    assert_eq!(
        r.outcome(),
        (Some(0), RunResult::Succeeded, Phase::Apply),
        "{}",
        r.stdout
    );
    let seen = std::fs::read_to_string(&env_log).unwrap();
    let lines: Vec<&str> = seen.lines().collect();
    assert!(lines.len() >= 4, "{seen}");
    assert!(
        !lines[0].contains("TF_ENCRYPTION"),
        "the module fetch reads no state, so it derives no key: {seen}"
    );
    for line in &lines[1..] {
        assert!(line.contains("TF_ENCRYPTION"), "every other command gets it: {seen}");
    }
    let mut leaky = Case::new("apply");
    encrypted(&mut leaky, true);
    leaky.set("FAKE_LEAK_ON", "plan");
    let r = leaky.run();
    assert_eq!(r.outcome(), (Some(1), RunResult::Failed, Phase::Plan), "{}", r.stdout);
    let everything = format!("{}\n{}\n{}", r.stdout, r.stderr, r.termination_log);
    assert!(
        everything.contains("TF_ENCRYPTION="),
        "what plan printed is there: {everything}"
    );
    for secret in [PASSPHRASE, "the-old-passphrase-also-never-shown"] {
        assert!(!everything.contains(secret), "{secret} leaked:\n{everything}");
    }
}

#[test]
fn state_encryption_with_a_binary_that_is_not_opentofu_fails_init_before_anything_runs() {
    let mut case = Case::new("apply");
    encrypted(&mut case, false);
    // A binary whose name promises nothing, so only the encryption rule refuses it.
    let tf = case.path("tf");
    std::os::unix::fs::symlink(fake_tofu(), &tf).unwrap();
    case.set("CAPTF_TF_BINARY", &tf.display().to_string());
    case.set("FAKE_VERSION", "Terraform v1.0.3");
    let r = case.run();
    assert_eq!(r.outcome(), (Some(1), RunResult::Failed, Phase::Init), "{}", r.stdout);
    assert!(
        r.result
            .message
            .starts_with("spec.stateEncryption needs OpenTofu 1.7 or later, but CAPTF_TF_BINARY runs Terraform"),
        "{}",
        r.result.message
    );
    assert!(r.argv.is_empty(), "nothing ran: {:?}", r.argv);
}

#[test]
fn a_state_encryption_passphrase_gone_from_the_mount_fails_init_naming_the_secret_key() {
    let mut case = Case::new("apply");
    encrypted(&mut case, false);
    std::fs::remove_file(case.path("state-encryption/passphrase")).unwrap();
    let r = case.run();
    assert_eq!(r.outcome(), (Some(1), RunResult::Failed, Phase::Init), "{}", r.stdout);
    assert!(
        r.result
            .message
            .contains("passphraseSecretRef (Secret key state-key/passphrase) is not mounted"),
        "{}",
        r.result.message
    );
    assert!(r.argv.is_empty(), "nothing ran: {:?}", r.argv);
}

#[test]
fn an_unreadable_inputs_dir_is_a_failure_in_phase_init_before_tofu_runs() {
    let mut c = Case::new("apply");
    let missing = c.path("no-such-inputs").display().to_string();
    let r = c.set("CAPTF_INPUTS_DIR", &missing).run();
    assert_eq!(r.outcome(), (Some(1), RunResult::Failed, Phase::Init));
    assert!(
        r.result.message.starts_with("failed to read inputs "),
        "{}",
        r.result.message
    );
    assert!(r.argv.is_empty());
}

#[test]
fn a_broken_configuration_is_still_reported_as_a_failed_result() {
    let r = Case::new("apply").unset("CAPTF_OP").run();
    assert_eq!(r.outcome(), (Some(1), RunResult::Failed, Phase::Init));
    assert_eq!(r.result.message, "invalid configuration: CAPTF_OP is not set");
}

#[test]
fn a_failed_init_reports_phase_init_with_the_error() {
    let r = Case::new("apply")
        .set("FAKE_FAIL_ON", "init")
        .set("FAKE_FAIL_MESSAGE", "Error: Failed to download module")
        .run();
    assert_eq!(r.code, Some(1));
    assert_eq!(r.result.phase, Phase::Init);
    assert_eq!(
        r.result.message,
        "tofu init failed (exit code 1): Error: Failed to download module"
    );
}

#[test]
fn the_result_is_also_the_last_line_of_the_log() {
    let r = Case::new("drift").set("FAKE_DRIFT_EXIT", "2").run();
    let last = r.stdout.lines().last().unwrap();
    assert_eq!(
        last,
        "captf-runner: result succeeded in phase drift drift=true: drift found: the plan has changes"
    );
}

#[test]
fn without_an_outputs_file_outputs_go_to_the_outputs_secret_and_a_failed_write_fails_the_run() {
    let r = Case::new("apply")
        .outputs(&json!({"kubeconfig": {"sensitive": true, "type": "string", "value": SECRET_OUTPUT}}))
        .unset("CAPTF_OUTPUTS_FILE")
        // No cluster here: neither in-cluster configuration nor a kubeconfig.
        .run();
    assert_eq!(r.outcome(), (Some(1), RunResult::Failed, Phase::Apply));
    assert!(
        r.result
            .message
            .starts_with("failed to write outputs to Secret team-a/captf-outputs-prod-eu-tc: "),
        "{}",
        r.result.message
    );
    assert_no_secrets(&r);
}

#[test]
fn credentials_in_the_module_source_are_masked_in_the_log_and_the_result() {
    let token = "glpat-Zx9Yw8Vu7Ts6";
    let mut c = Case::new("apply");
    c.source(&format!(
        "git::https://oauth2:{token}@gitlab.example.com/team/mod.git?ref=v1"
    ));
    let r = c.run();
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("Copying configuration from \"git::https://***@gitlab.example.com"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains(token), "{}", r.stdout);
    // Terraform quoting the source in an error: masked in the result message too.
    c.set("FAKE_FAIL_ON", "init").set(
        "FAKE_FAIL_MESSAGE",
        &format!("Error: Failed to download module from git::https://oauth2:{token}@gitlab.example.com/team/mod.git"),
    );
    fs::remove_dir_all(c.path("work")).unwrap();
    let r = c.run();
    assert_eq!(r.result.phase, Phase::Init);
    assert!(!r.termination_log.contains(token), "{}", r.termination_log);
    assert!(!r.stdout.contains(token), "{}", r.stdout);
    assert!(
        r.result.message.contains("git::https://***@gitlab.example.com"),
        "{}",
        r.result.message
    );
}

/// Terraform echoes values in its errors (a validation failure quotes the variable). Every value
/// the controller marked sensitive (a variable from a Secret, an env value from a Secret) is
/// masked, raw, JSON-escaped and base64, in the termination message and in every log line.
#[test]
fn a_secret_printed_by_terraform_appears_in_no_termination_message_or_log_line() {
    use base64::Engine as _;
    const ENV_SECRET: &str = "env-secret-\"quoted\"-9876";
    let b64 = base64::engine::general_purpose::STANDARD.encode(SECRET_VAR);
    let escaped = serde_json::to_string(ENV_SECRET).unwrap();
    let escaped = escaped.trim_matches('"').to_string();
    let message = format!(
        "Error: Invalid value for variable: {SECRET_VAR} is not valid; token {ENV_SECRET} ({escaped}) base64 {b64}"
    );
    let mut c = Case::new("apply");
    c.set("FAKE_FAIL_ON", "plan")
        .set("FAKE_FAIL_MESSAGE", &message)
        .set("CAPTF_SENSITIVE_VARIABLES", "password")
        .set("CAPTF_SENSITIVE_ENV", "TF_VAR_token")
        .set("TF_VAR_token", ENV_SECRET);
    let r = c.run();
    assert_eq!(r.result.result, RunResult::Failed, "{}", r.termination_log);
    assert!(
        r.result.message.contains("Invalid value for variable"),
        "{}",
        r.result.message
    );
    for s in [SECRET_VAR, ENV_SECRET, escaped.as_str(), b64.trim_end_matches('=')] {
        for (what, text) in [
            ("termination message", &r.termination_log),
            ("stdout", &r.stdout),
            ("stderr", &r.stderr),
        ] {
            assert!(!text.contains(s), "{s} in the {what}:\n{text}");
        }
    }
}

/// The work directory (variables with their secrets, providers, plans) does not outlive the
/// run: a given directory (the pod's emptyDir mount) is emptied, whether the run succeeded or
/// failed.
#[test]
fn the_runner_removes_its_work_directory_when_it_exits() {
    let c = Case::new("apply");
    let r = c.run();
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    let left: Vec<_> = fs::read_dir(c.path("work")).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let mut failing = Case::new("apply");
    failing.set("FAKE_FAIL_ON", "plan");
    let r = failing.run();
    assert_eq!(r.result.result, RunResult::Failed);
    assert_eq!(fs::read_dir(failing.path("work")).unwrap().count(), 0);
}

/// A Secret volume as the kubelet writes it (`..data` → a timestamped directory, each key a
/// symlink through it), in the case directory; `CAPTF_MODULE_CREDENTIALS_DIR` points at it.
fn mount_credentials(case: &mut Case, keys: &[(&str, &str)]) {
    use std::os::unix::fs::symlink;
    let m = case.path("module-credentials");
    let ts = m.join("..2026_11_30_10_00_00.1");
    std::fs::create_dir_all(&ts).unwrap();
    for (k, v) in keys {
        std::fs::write(ts.join(k), v).unwrap();
        symlink(format!("..data/{k}"), m.join(k)).unwrap();
    }
    symlink("..2026_11_30_10_00_00.1", m.join("..data")).unwrap();
    case.set("CAPTF_MODULE_CREDENTIALS_DIR", &m.display().to_string());
}

const KEY_BODY: &str = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW";
const GIT_TOKEN: &str = "glpat-Zx8s3cr3tGitT0ken";
const NETRC_PASSWORD: &str = "n3trc-Passw0rd-Value";
const REGISTRY_TOKEN: &str = "atlasv1.R3gistryT0kenValue";

fn all_credentials(case: &mut Case) {
    let key = format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_BODY}\n-----END OPENSSH PRIVATE KEY-----\n");
    mount_credentials(
        case,
        &[
            ("ssh-privatekey", &key),
            (
                "known_hosts",
                "[git.example.com]:22 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJdD\n",
            ),
            (".git-credentials", &format!("https://ci:{GIT_TOKEN}@git.example.com\n")),
            (
                ".netrc",
                &format!("machine dl.example.com login ci password {NETRC_PASSWORD}\n"),
            ),
            ("TF_TOKEN_registry_example_com", REGISTRY_TOKEN),
        ],
    );
}

#[test]
fn module_credentials_reach_the_init_commands_only() {
    let mut case = Case::new("apply");
    all_credentials(&mut case);
    let log = case.path("env-log");
    case.set("FAKE_ENV_LOG", &log.display().to_string());
    let r = case.run();
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    let lines = std::fs::read_to_string(&log).unwrap();
    let all = "GIT_CONFIG_COUNT GIT_CONFIG_KEY_0 GIT_CONFIG_VALUE_0 GIT_SSH_COMMAND GIT_TERMINAL_PROMPT NETRC \
               TF_TOKEN_registry_example_com ";
    let expected: Vec<String> = ["init", "init", "plan", "show", "apply", "output"]
        .iter()
        .map(|c| format!("{c}: {}", if *c == "init" { all } else { "" }))
        .collect();
    assert_eq!(lines.lines().collect::<Vec<_>>(), expected);
    let leftovers: Vec<_> = std::fs::read_dir(case.path(""))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("captf-credentials-"))
        .collect();
    assert!(leftovers.is_empty(), "the private copies are removed after the run");
}

#[test]
fn module_credentials_never_leak_into_the_log_or_the_result_even_when_init_prints_them() {
    let mut case = Case::new("apply");
    all_credentials(&mut case);
    case.set("FAKE_LEAK_ON", "init");
    let r = case.run();
    assert_eq!(
        r.outcome(),
        (Some(1), RunResult::Failed, Phase::Init),
        "{}{}",
        r.stdout,
        r.stderr
    );
    let everything = format!("{}\n{}\n{}", r.stdout, r.stderr, r.termination_log);
    assert!(
        everything.contains("***"),
        "what init printed is there, masked: {everything}"
    );
    for secret in [KEY_BODY, GIT_TOKEN, NETRC_PASSWORD, REGISTRY_TOKEN] {
        assert!(!everything.contains(secret), "{secret} leaked:\n{everything}");
    }
}

#[test]
fn a_module_credentials_secret_gone_from_the_mount_fails_init_naming_the_field() {
    let mut case = Case::new("apply");
    let empty = case.path("empty-mount");
    std::fs::create_dir(&empty).unwrap();
    case.set("CAPTF_MODULE_CREDENTIALS_DIR", &empty.display().to_string());
    let r = case.run();
    assert_eq!(
        r.outcome(),
        (Some(1), RunResult::Failed, Phase::Init),
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert!(
        r.result.message.contains("spec.module.credentials.secretRef"),
        "{}",
        r.result.message
    );
    assert!(r.argv.is_empty(), "nothing ran: {:?}", r.argv);
}

/// An SSH key as a Secret holds it: several lines.
const SSH_KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
QyNTUxOQAAACDkY2FwdGYtdGVzdC1rZXktbm90LWEtcmVhbC1vbmUtYXQtYWxsAAAAmLk
-----END OPENSSH PRIVATE KEY-----
";

#[test]
fn every_line_of_a_multi_line_secret_is_masked_in_the_log_and_the_termination_message() {
    // Terraform quotes the value in an error box: each line of it after a "│ " prefix, so the
    // value never appears whole.
    let boxed: String = SSH_KEY.lines().map(|l| format!("│   {l}\n")).collect();
    let message = format!("│ Error: Invalid SSH key\n│\n{boxed}│\n");
    let mut c = Case::new("apply");
    c.set("FAKE_FAIL_ON", "plan")
        .set("FAKE_FAIL_MESSAGE", &message)
        .set("CAPTF_SENSITIVE_ENV", "TF_VAR_ssh_key")
        .set("TF_VAR_ssh_key", SSH_KEY);
    let r = c.run();
    assert_eq!(r.result.result, RunResult::Failed, "{}", r.termination_log);
    assert!(r.result.message.contains("Invalid SSH key"), "{}", r.result.message);
    for line in SSH_KEY.lines() {
        for (what, text) in [
            ("termination message", &r.termination_log),
            ("stdout", &r.stdout),
            ("stderr", &r.stderr),
        ] {
            assert!(!text.contains(line), "{line} in the {what}:\n{text}");
        }
    }
    assert!(r.result.message.contains("***"), "{}", r.result.message);
}

#[test]
fn outputs_too_large_for_the_result_leave_a_masked_public_copy_beside_the_raw_document() {
    use base64::Engine as _;
    let mut c = Case::new("apply");
    let url = format!("postgres://app:{SECRET_VAR}@db.internal:5432/app");
    c.outputs(&json!({
        "db_url": {"sensitive": false, "type": "string", "value": url},
        "motd": {"sensitive": false, "type": "string", "value": format!("key:\n{SSH_KEY}")},
        "encoded": {"sensitive": false, "type": "string",
            "value": base64::engine::general_purpose::STANDARD.encode(format!("app:{SECRET_VAR}"))},
        "big": {"sensitive": false, "type": "string", "value": "x".repeat(6000)},
    }))
    .set("CAPTF_SENSITIVE_VARIABLES", "password")
    .set("CAPTF_SENSITIVE_ENV", "TF_VAR_ssh_key")
    .set("TF_VAR_ssh_key", SSH_KEY);
    let r = c.run();
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    assert!(r.result.outputs_in_secret);
    assert_no_secrets(&r);
    // The raw document keeps what Terraform printed; the public copy is masked.
    let raw = fs::read_to_string(c.path("outputs.json")).unwrap();
    assert!(raw.contains(SECRET_VAR));
    let public: Value = serde_json::from_str(&fs::read_to_string(c.path("outputs.json.public")).unwrap()).unwrap();
    assert_eq!(public["db_url"], json!("postgres://app:***@db.internal:5432/app"));
    let text = public.to_string();
    assert!(!text.contains(SECRET_VAR), "{text}");
    for line in SSH_KEY.lines() {
        assert!(!text.contains(line), "{line} in {text}");
    }
    assert!(
        !public["encoded"]
            .as_str()
            .unwrap()
            .contains(&base64::engine::general_purpose::STANDARD.encode(format!("app:{SECRET_VAR}"))[4..20])
    );
    assert_eq!(public["big"], json!("x".repeat(6000)));
}

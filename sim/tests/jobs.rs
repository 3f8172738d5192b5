//! The simulated Job controller and kubelet, the clock and the runner scripts.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use captf_shared::names::{lock_lease_name, suffix};
use captf_shared::protocol::{Phase, PlanSummary, RunResult, RunnerResult};
use captf_shared::{Kind, Op};
use captf_sim::{JobMatch, RunnerScript, Sim};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use serde_json::{Value, json};

const START: &str = "2026-03-01T10:00:00Z";

async fn sim() -> Sim {
    Sim::builder().start_time(START.parse().unwrap()).start().await.unwrap()
}

/// A Job as the controller builds it (the parts the simulator reads).
fn job(name: &str, op: Op, deadline: i64, extra_env: &[(&str, &str)]) -> Job {
    let sfx = suffix(Kind::TerraformCluster, "default", "prod-eu");
    let mut env = vec![
        json!({"name": "CAPTF_OP", "value": op.as_str()}),
        json!({"name": "CAPTF_STATE_SUFFIX", "value": sfx}),
        json!({"name": "CAPTF_NAMESPACE", "value": "default"}),
        json!({"name": "CAPTF_LOCK_TIMEOUT", "value": "300s"}),
    ];
    env.extend(extra_env.iter().map(|(k, v)| json!({"name": k, "value": v})));
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "captf.io/kind": "TerraformCluster", "captf.io/op": op.as_str(),
            "captf.io/object": captf_shared::names::object_id(Kind::TerraformCluster, "default", "prod-eu")}},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": deadline, "template": {
            "metadata": {"labels": {"captf.io/op": op.as_str()}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "runner", "image": "captf-runner:dev", "env": env}]}}}
    }))
    .unwrap()
}

fn conditions(j: &Job) -> Vec<(String, String)> {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.type_, c.reason.unwrap_or_default()))
        .collect()
}

fn ctypes(j: &Job) -> Vec<String> {
    conditions(j).into_iter().map(|(t, _)| t).collect()
}

fn terminated(p: &Pod) -> k8s_openapi::api::core::v1::ContainerStateTerminated {
    p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0]
        .state
        .as_ref()
        .unwrap()
        .terminated
        .clone()
        .unwrap()
}

struct Env {
    sim: Sim,
    jobs: Api<Job>,
    pods: Api<Pod>,
    leases: Api<Lease>,
}

async fn env() -> Env {
    let sim = sim().await;
    let c = sim.client().unwrap();
    Env {
        jobs: Api::default_namespaced(c.clone()),
        pods: Api::default_namespaced(c.clone()),
        leases: Api::default_namespaced(c),
        sim,
    }
}

impl Env {
    async fn start(&self, j: &Job) -> Pod {
        let name = j.metadata.name.clone().unwrap();
        self.jobs.create(&PostParams::default(), j).await.unwrap();
        let pods = self.sim.pods_of_job("default", &name).unwrap();
        assert_eq!(pods.len(), 1);
        pods[0].clone()
    }
    async fn job(&self, name: &str) -> Job {
        self.jobs.get(name).await.unwrap()
    }
    async fn pod(&self, p: &Pod) -> Pod {
        self.pods.get(p.metadata.name.as_deref().unwrap()).await.unwrap()
    }
    async fn lock(&self) -> Lease {
        self.leases
            .get(&lock_lease_name(&suffix(Kind::TerraformCluster, "default", "prod-eu")))
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn a_job_gets_one_pod_named_job_dash_5_chars_with_that_hostname_owned_by_the_job() {
    let e = env().await;
    let pod = e
        .start(&job("tc-prod-eu-225654031b7f-apply-7", Op::Apply, 3600, &[]))
        .await;
    let name = pod.metadata.name.clone().unwrap();
    let pattern = captf_shared::names::RunnerPattern::new(Kind::TerraformCluster, "default", "prod-eu");
    assert!(pattern.matches(&name), "{name} does not match {}", pattern.as_str());
    assert!(
        name.starts_with("tc-prod-eu-225654031b7f-apply-7-")
            && name.len() == "tc-prod-eu-225654031b7f-apply-7-".len() + 5
    );
    assert_eq!(pod.spec.as_ref().unwrap().hostname.as_deref(), Some(name.as_str()));
    let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.controller), ("Job", Some(true)));
    assert_eq!(pod.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
    let j = e.job("tc-prod-eu-225654031b7f-apply-7").await;
    assert_eq!(j.status.as_ref().unwrap().active, Some(1));
    assert_eq!(
        j.status.as_ref().unwrap().start_time.as_ref().unwrap().0.to_string(),
        START
    );
}

#[tokio::test]
async fn a_succeeding_runner_stays_active_until_the_clock_passes_its_duration_then_completes_with_its_result() {
    let e = env().await;
    let outputs: BTreeMap<String, Value> = [("endpoint".to_string(), json!("https://k8s.example"))].into();
    e.sim.script(
        JobMatch::any(),
        RunnerScript::succeed_with_outputs(outputs.clone()).after(Duration::from_secs(120)),
    );
    let pod = e.start(&job("tc-a-apply-1", Op::Apply, 3600, &[])).await;
    e.sim.advance(Duration::from_secs(119));
    assert_eq!(ctypes(&e.job("tc-a-apply-1").await), Vec::<String>::new());
    e.sim.advance(Duration::from_secs(600));
    let j = e.job("tc-a-apply-1").await;
    assert_eq!(ctypes(&j), ["SuccessCriteriaMet", "Complete"]);
    let st = j.status.unwrap();
    assert_eq!((st.succeeded, st.active), (Some(1), Some(0)));
    assert_eq!(
        st.completion_time.unwrap().0.to_string(),
        "2026-03-01T10:02:00Z",
        "finishes at its own time"
    );
    let p = e.pod(&pod).await;
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Succeeded"));
    let t = terminated(&p);
    assert_eq!(t.exit_code, 0);
    let r = RunnerResult::parse(t.message.as_deref().unwrap()).unwrap();
    assert_eq!((r.result, r.phase), (RunResult::Succeeded, Phase::Apply));
    assert_eq!(r.outputs.unwrap(), outputs);
}

#[tokio::test]
async fn a_failing_runner_exits_1_and_the_job_fails_failure_target_first() {
    let e = env().await;
    e.sim.script(
        JobMatch::any(),
        RunnerScript::fail("Error: boom").after(Duration::from_secs(5)),
    );
    let pod = e.start(&job("tc-a-drift-2", Op::Drift, 3600, &[])).await;
    e.sim.advance(Duration::from_secs(5));
    let j = e.job("tc-a-drift-2").await;
    assert_eq!(
        conditions(&j),
        [
            ("FailureTarget".to_string(), "BackoffLimitExceeded".to_string()),
            ("Failed".to_string(), "BackoffLimitExceeded".to_string())
        ]
    );
    assert_eq!(j.status.unwrap().failed, Some(1));
    let t = terminated(&e.pod(&pod).await);
    assert_eq!(t.exit_code, 1);
    let r = RunnerResult::parse(t.message.as_deref().unwrap()).unwrap();
    assert_eq!(
        (r.result, r.phase, r.message.as_str()),
        (RunResult::Failed, Phase::Drift, "Error: boom")
    );
}

#[tokio::test]
async fn deadline_kill_fails_the_job_deadline_exceeded_and_the_runner_may_report_interrupted() {
    let e = env().await;
    e.sim.script(JobMatch::any(), RunnerScript::hang());
    e.sim.script(JobMatch::any(), RunnerScript::hang().silent_on_sigterm());
    let p1 = e.start(&job("tc-a-apply-1", Op::Apply, 3600, &[])).await;
    let p2 = e.start(&job("tc-a-apply-2", Op::Apply, 1800, &[])).await;
    e.sim.advance(Duration::from_secs(1799));
    assert!(ctypes(&e.job("tc-a-apply-2").await).is_empty());
    e.sim.advance(Duration::from_secs(1));
    let j2 = e.job("tc-a-apply-2").await;
    assert_eq!(ctypes(&j2), ["FailureTarget", "Failed"]);
    let failed = j2.status.unwrap().conditions.unwrap().pop().unwrap();
    assert_eq!(failed.reason.as_deref(), Some("DeadlineExceeded"));
    assert_eq!(
        failed.message.as_deref(),
        Some("Job was active longer than specified deadline")
    );
    assert_eq!(terminated(&e.pod(&p2).await).message, None, "silent on SIGTERM");
    e.sim.advance(Duration::from_secs(3600));
    let j1 = e.job("tc-a-apply-1").await;
    assert_eq!(
        conditions(&j1)[1],
        ("Failed".to_string(), "DeadlineExceeded".to_string())
    );
    let p1 = e.pod(&p1).await;
    assert_eq!(p1.status.as_ref().unwrap().phase.as_deref(), Some("Failed"));
    let t = terminated(&p1);
    assert_eq!(t.exit_code, 5);
    assert_eq!(
        RunnerResult::parse(t.message.as_deref().unwrap()).unwrap().result,
        RunResult::Interrupted
    );
}

#[tokio::test]
async fn an_evicted_runner_gets_disruption_target_reports_interrupted_and_the_job_fails() {
    let e = env().await;
    e.sim
        .script(JobMatch::any(), RunnerScript::evicted().after(Duration::from_secs(60)));
    let pod = e.start(&job("tc-a-refresh-3", Op::Refresh, 3600, &[])).await;
    e.sim.advance(Duration::from_secs(60));
    let p = e.pod(&pod).await;
    let conds = p.status.as_ref().unwrap().conditions.clone().unwrap();
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
    );
    let r = RunnerResult::parse(terminated(&p).message.as_deref().unwrap()).unwrap();
    assert_eq!((r.result, r.phase), (RunResult::Interrupted, Phase::Refresh));
    assert_eq!(conditions(&e.job("tc-a-refresh-3").await)[1].0, "Failed");
    // Eviction on demand, too.
    let pod = e.start(&job("tc-a-refresh-4", Op::Refresh, 3600, &[])).await;
    assert!(e.sim.evict("default", pod.metadata.name.as_deref().unwrap()));
    assert_eq!(ctypes(&e.job("tc-a-refresh-4").await), ["FailureTarget", "Failed"]);
}

#[tokio::test]
async fn blocked_and_plan_changed_results_carry_the_plan_hash_and_summary() {
    let e = env().await;
    let summary = PlanSummary {
        add: 1,
        change: 0,
        destroy: 2,
        replace: 0,
    };
    e.sim.script(JobMatch::any(), RunnerScript::blocked("abc123", summary));
    e.sim
        .script(JobMatch::any(), RunnerScript::plan_changed("def456", summary));
    for (name, want, code) in [
        ("tc-a-apply-1", RunResult::Blocked, 3),
        ("tc-a-apply-2", RunResult::PlanChanged, 4),
    ] {
        let pod = e.start(&job(name, Op::Apply, 3600, &[])).await;
        e.sim.advance(Duration::from_secs(30));
        let t = terminated(&e.pod(&pod).await);
        assert_eq!(t.exit_code, code);
        let r = RunnerResult::parse(t.message.as_deref().unwrap()).unwrap();
        assert_eq!(r.result, want);
        assert_eq!(r.summary, Some(summary));
        assert!(r.plan_hash.is_some());
        assert_eq!(ctypes(&e.job(name).await), ["FailureTarget", "Failed"]);
    }
}

/// A scripted drift check ends its log as the real runner does, with its summary line: one
/// that found drift says so (the controller's Event is `DriftFound`), one that found none says
/// that. The realistic runner's drift checks word it the same.
#[tokio::test]
async fn a_scripted_drift_checks_log_says_whether_it_found_drift_as_the_real_runner_does() {
    let e = env().await;
    e.sim.script(JobMatch::any(), RunnerScript::drift(true));
    e.sim.script(JobMatch::any(), RunnerScript::drift(false));
    let found = "captf-runner: result succeeded in phase drift drift=true: drift found: the plan has changes\n";
    let none = "captf-runner: result succeeded in phase drift drift=false: no drift: the infrastructure matches the configuration\n";
    for (name, last) in [("tc-a-drift-1", found), ("tc-a-drift-2", none), ("tc-a-drift-3", none)] {
        let pod = e.start(&job(name, Op::Drift, 3600, &[])).await;
        let pod_name = pod.metadata.name.clone().unwrap();
        e.sim.advance(Duration::from_secs(30));
        let log = e.pods.logs(&pod_name, &Default::default()).await.unwrap();
        assert!(
            log.starts_with(&format!("captf-runner: drift of Job {name} (simulated runner)\n")),
            "{log}"
        );
        assert!(log.ends_with(last), "{name}: {log}");
        assert!(!log.contains("result succeeded (phase"), "{log}");
        let r = RunnerResult::parse(terminated(&e.pod(&pod).await).message.as_deref().unwrap()).unwrap();
        assert_eq!(r.drift, Some(last == found), "{name}");
    }
}

#[tokio::test]
async fn a_pods_log_is_the_runners_notes_or_the_text_a_test_gave_it_and_previous_is_a_400() {
    let e = env().await;
    let summary = PlanSummary {
        add: 0,
        change: 1,
        destroy: 1,
        replace: 0,
    };
    e.sim.script(JobMatch::any(), RunnerScript::blocked("abc123", summary));
    let pod = e.start(&job("tc-a-apply-1", Op::Apply, 3600, &[])).await;
    let name = pod.metadata.name.clone().unwrap();
    e.sim.advance(Duration::from_secs(30));
    let log = e.pods.logs(&name, &Default::default()).await.unwrap();
    assert!(log.contains("captf-runner: apply of Job tc-a-apply-1"), "{log}");
    assert!(
        log.contains("captf-runner: plan abc123: 0 to add, 1 to change, 1 to destroy, 0 to replace"),
        "{log}"
    );
    assert!(
        log.ends_with(
            "captf-runner: result blocked in phase guard (plan abc123): the plan deletes or replaces resources\n"
        ),
        "{log}"
    );
    e.sim
        .set_pod_log("default", &name, "  # null_resource.a will be destroyed\n");
    let log = e.pods.logs(&name, &Default::default()).await.unwrap();
    assert_eq!(log, "  # null_resource.a will be destroyed\n");
    let previous = kube::api::LogParams {
        previous: true,
        ..Default::default()
    };
    let err = e.pods.logs(&name, &previous).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 400), "{err:?}");
    let err = e.pods.logs("no-such-pod", &Default::default()).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 404), "{err:?}");
}

/// `follow=true` streams the log so far at once, then what the runner adds, and ends when the
/// container has terminated.
#[tokio::test]
async fn a_followed_log_streams_what_the_runner_adds_and_ends_with_its_container() {
    use futures::{AsyncBufReadExt, TryStreamExt};
    let e = env().await;
    e.sim.script(
        JobMatch::any(),
        RunnerScript::fail("Error: boom").after(Duration::from_secs(30)),
    );
    let pod = e.start(&job("tc-a-apply-1", Op::Apply, 3600, &[])).await;
    let name = pod.metadata.name.clone().unwrap();
    let follow = kube::api::LogParams {
        follow: true,
        ..Default::default()
    };
    let mut lines = e.pods.log_stream(&name, &follow).await.unwrap().lines();
    let first = tokio::time::timeout(Duration::from_secs(10), lines.try_next())
        .await
        .expect("the log so far comes at once")
        .unwrap();
    assert_eq!(
        first.as_deref(),
        Some("captf-runner: apply of Job tc-a-apply-1 (simulated runner)")
    );
    e.sim.advance(Duration::from_secs(30));
    let rest: Vec<String> = tokio::time::timeout(Duration::from_secs(10), lines.try_collect())
        .await
        .expect("the stream ends once the container has terminated")
        .unwrap();
    assert!(rest.iter().any(|l| l.contains("Error: boom")), "{rest:?}");
    assert!(
        rest.last().is_some_and(|l| l.starts_with("captf-runner: result ")),
        "{rest:?}"
    );
    // A terminated container's log: all of it, and the stream ends.
    let all: Vec<String> = tokio::time::timeout(
        Duration::from_secs(10),
        e.pods.log_stream(&name, &follow).await.unwrap().lines().try_collect(),
    )
    .await
    .expect("ends at once")
    .unwrap();
    assert_eq!(all.len(), rest.len() + 1, "{all:?}");
}

#[tokio::test]
async fn a_runner_that_dies_holding_the_lock_leaves_a_lease_naming_its_pod() {
    let e = env().await;
    e.sim.script(
        JobMatch::any(),
        RunnerScript::die_holding_lock_id("0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55"),
    );
    let pod = e
        .start(&job("tc-prod-eu-225654031b7f-apply-7", Op::Apply, 3600, &[]))
        .await;
    e.sim.advance(Duration::from_secs(30));
    let lease = e.lock().await;
    assert_eq!(
        lease.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55")
    );
    let info: Value =
        serde_json::from_str(&lease.metadata.annotations.as_ref().unwrap()["app.terraform.io/lock-info"]).unwrap();
    assert_eq!(info["Who"], format!("root@{}", pod.metadata.name.as_deref().unwrap()));
    assert_eq!(info["ID"], "0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55");
    assert_eq!(info["Operation"], "OperationTypeApply");
    assert_eq!(lease.metadata.labels.as_ref().unwrap()["tfstate"], "true");
    let p = e.pod(&pod).await;
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Failed"));
    assert_eq!(terminated(&p).message, None, "no result");
    assert_eq!(terminated(&p).exit_code, 137);
}

#[tokio::test]
async fn the_realistic_runner_force_unlocks_a_matching_id_and_then_succeeds() {
    let e = env().await;
    e.sim
        .script(JobMatch::any(), RunnerScript::die_holding_lock_id("dead-lock-id"));
    e.start(&job("tc-a-apply-1", Op::Apply, 3600, &[])).await;
    e.sim.advance(Duration::from_secs(30));
    // The next Job is handed the stale lock's ID.
    let pod = e
        .start(&job(
            "tc-a-apply-2",
            Op::Apply,
            3600,
            &[("CAPTF_FORCE_UNLOCK_ID", "dead-lock-id")],
        ))
        .await;
    let during = e.lock().await;
    let info: Value =
        serde_json::from_str(&during.metadata.annotations.as_ref().unwrap()["app.terraform.io/lock-info"]).unwrap();
    assert_eq!(
        info["Who"],
        format!("root@{}", pod.metadata.name.as_deref().unwrap()),
        "it holds the lock while it runs"
    );
    e.sim.advance(Duration::from_secs(30));
    assert_eq!(ctypes(&e.job("tc-a-apply-2").await), ["SuccessCriteriaMet", "Complete"]);
    let after = e.lock().await;
    assert_eq!(
        after.spec.as_ref().unwrap().holder_identity,
        None,
        "unlocked: holder null, Lease kept"
    );
    assert!(
        !after
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("app.terraform.io/lock-info")
    );
}

#[tokio::test]
async fn the_realistic_runner_fails_with_error_acquiring_the_state_lock_after_the_lock_timeout_on_a_foreign_lock() {
    let e = env().await;
    let sfx = suffix(Kind::TerraformCluster, "default", "prod-eu");
    e.sim.hold_lock("default", &sfx, "workstation-lock", "alice@laptop");
    let pod = e
        .start(&job(
            "tc-a-apply-1",
            Op::Apply,
            3600,
            &[("CAPTF_FORCE_UNLOCK_ID", "other-id")],
        ))
        .await;
    e.sim.advance(Duration::from_secs(299));
    assert!(
        ctypes(&e.job("tc-a-apply-1").await).is_empty(),
        "waits lockTimeoutSeconds"
    );
    e.sim.advance(Duration::from_secs(1));
    assert_eq!(ctypes(&e.job("tc-a-apply-1").await), ["FailureTarget", "Failed"]);
    let r = RunnerResult::parse(terminated(&e.pod(&pod).await).message.as_deref().unwrap()).unwrap();
    assert_eq!(r.result, RunResult::Failed);
    assert!(r.message.contains("Error acquiring the state lock"), "{}", r.message);
    assert_eq!(
        e.lock().await.spec.unwrap().holder_identity.as_deref(),
        Some("workstation-lock"),
        "never unlocked"
    );
}

#[tokio::test]
async fn the_realistic_runner_takes_a_lock_released_while_it_waits_at_its_next_try_not_at_the_timeout() {
    let e = env().await;
    let sfx = suffix(Kind::TerraformCluster, "default", "prod-eu");
    e.sim.hold_lock("default", &sfx, "workstation-lock", "alice@laptop");
    e.start(&job("tc-a-apply-1", Op::Apply, 3600, &[])).await;
    // Terraform tries again after 1s, 2s, 4s, 8s, then every 16s: 15s in, it waits for 31s.
    e.sim.advance(Duration::from_secs(20));
    e.sim.release_lock("default", &sfx);
    e.sim.advance(Duration::from_secs(10));
    assert_eq!(
        e.lock().await.spec.and_then(|s| s.holder_identity).as_deref(),
        None,
        "not before the next try at 31s"
    );
    e.sim.advance(Duration::from_secs(1));
    let holder = e.lock().await.spec.and_then(|s| s.holder_identity);
    assert!(
        holder.as_deref().is_some_and(|h| h != "workstation-lock"),
        "taken by the runner at 31s: {holder:?}"
    );
    // It then runs its normal course and succeeds, long before the 300s lock timeout.
    e.sim.advance(Duration::from_secs(120));
    assert_eq!(ctypes(&e.job("tc-a-apply-1").await), ["SuccessCriteriaMet", "Complete"]);
}

#[tokio::test]
async fn deleting_a_job_in_the_background_deletes_its_pod_and_the_job_default_orphans_it() {
    let e = env().await;
    e.sim.set_default_script(RunnerScript::hang());
    let pod = e.start(&job("tc-a-apply-1", Op::Apply, 3600, &[])).await;
    e.jobs
        .delete(
            "tc-a-apply-1",
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(
        e.pods
            .get_opt(pod.metadata.name.as_deref().unwrap())
            .await
            .unwrap()
            .is_none()
    );
    let pod = e.start(&job("tc-a-apply-2", Op::Apply, 3600, &[])).await;
    e.jobs.delete("tc-a-apply-2", &DeleteParams::default()).await.unwrap();
    assert!(
        e.pods
            .get_opt(pod.metadata.name.as_deref().unwrap())
            .await
            .unwrap()
            .is_some(),
        "Jobs orphan by default"
    );
}

#[tokio::test]
async fn a_clock_jump_runs_each_step_at_its_own_time_and_script_rules_choose_by_job() {
    let e = env().await;
    e.sim.script_with(|j: &Job| {
        j.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.contains("drift"))
            .then(|| RunnerScript::drift(true).after(Duration::from_secs(10)))
    });
    e.start(&job("tc-a-drift-1", Op::Drift, 3600, &[])).await;
    e.start(&job("tc-a-apply-2", Op::Apply, 3600, &[])).await;
    e.sim.advance(Duration::from_secs(3600));
    let d = e.job("tc-a-drift-1").await;
    assert_eq!(
        d.status.unwrap().completion_time.unwrap().0.to_string(),
        "2026-03-01T10:00:10Z"
    );
    let a = e.job("tc-a-apply-2").await;
    assert_eq!(
        a.status.unwrap().completion_time.unwrap().0.to_string(),
        "2026-03-01T10:00:30Z"
    );
    assert_eq!(e.sim.now().to_string(), "2026-03-01T11:00:00Z");
}

#[tokio::test]
async fn during_the_shutdown_after_a_deadline_the_job_has_only_failure_target_and_the_runner_still_holds_the_lock() {
    let e = env().await;
    e.sim.script(
        JobMatch::any(),
        RunnerScript::realistic()
            .after(Duration::from_secs(7200))
            .shutdown_after(Duration::from_secs(20)),
    );
    let pod = e.start(&job("tc-a-apply-1", Op::Apply, 60, &[])).await;
    e.sim.advance(Duration::from_secs(60));
    let j = e.job("tc-a-apply-1").await;
    assert_eq!(
        conditions(&j),
        [("FailureTarget".to_string(), "DeadlineExceeded".to_string())]
    );
    assert_eq!(e.pod(&pod).await.status.unwrap().phase.as_deref(), Some("Running"));
    let info: Value =
        serde_json::from_str(&e.lock().await.metadata.annotations.unwrap()["app.terraform.io/lock-info"]).unwrap();
    assert_eq!(info["Who"], format!("root@{}", pod.metadata.name.as_deref().unwrap()));
    e.sim.advance(Duration::from_secs(20));
    assert_eq!(ctypes(&e.job("tc-a-apply-1").await), ["FailureTarget", "Failed"]);
    let t = terminated(&e.pod(&pod).await);
    assert_eq!(
        RunnerResult::parse(t.message.as_deref().unwrap()).unwrap().result,
        RunResult::Interrupted
    );
    assert_eq!(
        e.lock().await.spec.unwrap().holder_identity,
        None,
        "Terraform unlocks on interrupt"
    );
}

#[tokio::test]
async fn an_evicted_pod_is_marked_disruption_target_while_it_shuts_down() {
    let e = env().await;
    e.sim
        .set_default_script(RunnerScript::hang().shutdown_after(Duration::from_secs(10)));
    let pod = e.start(&job("tc-a-apply-1", Op::Apply, 3600, &[])).await;
    assert!(e.sim.evict("default", pod.metadata.name.as_deref().unwrap()));
    let p = e.pod(&pod).await;
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
    assert!(
        p.status
            .unwrap()
            .conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "DisruptionTarget")
    );
    assert!(ctypes(&e.job("tc-a-apply-1").await).is_empty());
    e.sim.advance(Duration::from_secs(10));
    assert_eq!(ctypes(&e.job("tc-a-apply-1").await), ["FailureTarget", "Failed"]);
}

#[tokio::test]
async fn an_observer_sees_every_change_in_order_with_the_simulated_time() {
    let sim = sim().await;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s2 = seen.clone();
    sim.observe(move |now, ev| {
        let name = ev.object["metadata"]["name"].as_str().unwrap_or_default().to_string();
        s2.lock()
            .unwrap()
            .push((now, ev.rv, ev.res.clone(), ev.kind.as_str(), name));
    });
    sim.set_default_script(RunnerScript::succeed().after(Duration::from_secs(30)));
    let jobs: Api<Job> = Api::namespaced(sim.client().unwrap(), "default");
    jobs.create(&PostParams::default(), &job("j1", Op::Apply, 600, &[]))
        .await
        .unwrap();
    sim.advance(Duration::from_secs(30));
    let seen = seen.lock().unwrap().clone();
    // Every change once, in resourceVersion order, each at the simulated time it was made.
    assert!(seen.windows(2).all(|w| w[0].1 < w[1].1), "{seen:?}");
    let start: jiff::Timestamp = START.parse().unwrap();
    let job_changes: Vec<_> = seen.iter().filter(|c| c.2 == "batch/jobs").collect();
    assert_eq!(job_changes[0].3, "ADDED");
    assert_eq!(job_changes[0].0, start);
    let done = job_changes.last().unwrap();
    assert_eq!(done.0, start + jiff::SignedDuration::from_secs(30));
    assert!(seen.iter().any(|c| c.2 == "/pods" && c.3 == "ADDED"));
}

#[tokio::test]
async fn an_objects_outcome_annotation_chooses_its_next_jobs_runner_once_turned_on() {
    let e = env().await;
    let tc: Api<kube::api::DynamicObject> = Api::default_namespaced_with(
        e.sim.client().unwrap(),
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("infrastructure.cluster.x-k8s.io", "v1beta1", "TerraformCluster"),
            "terraformclusters",
        ),
    );
    let cluster = |outcome: &str| {
        serde_json::from_value::<kube::api::DynamicObject>(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
            "metadata": {"name": "prod-eu", "annotations": {"sim.captf.io/outcome": outcome}},
            "spec": {"module": {"source": "git::https://example.com/m.git"}}}))
        .unwrap()
    };
    // Present before the feature is turned on: still honoured from then on.
    tc.create(&PostParams::default(), &cluster("fail")).await.unwrap();
    e.sim.honour_outcome_annotations();
    let result = |p: &Pod| -> RunnerResult { serde_json::from_str(&terminated(p).message.unwrap()).unwrap() };

    let pod = e.start(&job("tc-prod-eu-1-apply-1", Op::Apply, 3600, &[])).await;
    e.sim.advance(Duration::from_secs(30));
    assert_eq!(
        ctypes(&e.job("tc-prod-eu-1-apply-1").await),
        ["FailureTarget", "Failed"]
    );
    let r = result(&e.pod(&pod).await);
    assert_eq!(r.result, RunResult::Failed);
    assert!(r.message.contains("sim.captf.io/outcome: fail"), "{}", r.message);

    // Changed on the object: the next apply is blocked with the object's plan.
    tc.patch(
        "prod-eu",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"annotations": {"sim.captf.io/outcome": "block"}}})),
    )
    .await
    .unwrap();
    let pod = e.start(&job("tc-prod-eu-1-apply-2", Op::Apply, 3600, &[])).await;
    e.sim.advance(Duration::from_secs(30));
    let r = result(&e.pod(&pod).await);
    assert_eq!(r.result, RunResult::Blocked);
    let id = captf_shared::names::object_id(Kind::TerraformCluster, "default", "prod-eu");
    assert_eq!(r.plan_hash.as_deref(), Some(&id[..12]));

    // Deleted: the next object of that name plays the default again.
    tc.delete("prod-eu", &DeleteParams::default()).await.unwrap();
    let pod = e.start(&job("tc-prod-eu-1-apply-3", Op::Apply, 3600, &[])).await;
    e.sim.advance(Duration::from_secs(30));
    assert_eq!(result(&e.pod(&pod).await).result, RunResult::Succeeded);
}

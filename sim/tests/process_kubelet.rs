//! The process kubelet: pods of a mapped image run as real processes in their own mount, UTS
//! and PID namespaces. Where namespaces can't be made (no root), each test says so and skips,
//! except under `CI`, where that fails it (`captf_testsupport::cannot_run`).
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use captf_sim::process_kubelet::namespaces_unavailable;
use captf_sim::{ProcessImage, Sim};
use serde_json::{Value, json};

const START: &str = "2026-03-01T10:00:00Z";
const IMAGE: &str = "shell:test";
/// Upper bound on any one wait for a process; a test that hits it fails, it never passes by it.
const PATIENCE: Duration = Duration::from_secs(60);

macro_rules! require_namespaces {
    () => {
        if let Some(why) = namespaces_unavailable() {
            captf_testsupport::cannot_run(format!(
                "{why}; the process kubelet needs root for a private mount namespace"
            ));
            return;
        }
    };
}

/// An image whose program is the machine's `sh`.
fn shell_image() -> ProcessImage {
    ProcessImage::new("/image/sh")
        .file("/image/sh", "/bin/sh")
        .env("FROM_IMAGE", "image")
        .env("OVERRIDDEN", "by-image")
}

async fn sim(root: &Path, image: ProcessImage) -> Sim {
    Sim::builder()
        .start_time(START.parse().unwrap())
        .process_image(IMAGE, image)
        .process_root(root)
        .start()
        .await
        .unwrap()
}

/// A Job running `script` in `sh -c`, with a Secret volume, an emptyDir, env references and
/// `envFrom` sources (optional ones, one of them absent).
fn job(name: &str, script: &str, deadline: i64, grace: i64) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": deadline, "template": {"spec": {
            "restartPolicy": "Never", "serviceAccountName": "worker",
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "main", "image": IMAGE, "args": ["-c", script],
                "envFrom": [
                    {"prefix": "S_", "secretRef": {"name": "creds", "optional": true}},
                    {"configMapRef": {"name": "settings", "optional": true}},
                    {"secretRef": {"name": "absent", "optional": true}},
                ],
                "env": [
                    {"name": "LITERAL", "value": "plain"},
                    {"name": "OVERRIDDEN", "value": "by-container"},
                    {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                    {"name": "FROM_CONFIGMAP", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "region"}}},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ],
                "volumeMounts": [
                    {"name": "inputs", "mountPath": "/captf/inputs", "readOnly": true},
                    {"name": "scratch", "mountPath": "/work"},
                ]}],
            "volumes": [
                {"name": "inputs", "secret": {"secretName": "inputs", "defaultMode": 0o440}},
                {"name": "scratch", "emptyDir": {}},
            ]}}}
    })
}

fn seed(sim: &Sim) {
    let b64 = |s: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    sim.put(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "default"},
        "data": {"password": b64("hunter2")}}),
    )
    .unwrap();
    sim.put(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "inputs", "namespace": "default"},
        "data": {"inputs.json": b64("{\"a\":1}")}}),
    )
    .unwrap();
    sim.put(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "default"},
        "data": {"region": "eu-west-1", "OVERRIDDEN": "by-configmap"}}),
    )
    .unwrap();
    sim.put(
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "worker", "namespace": "default"}}),
    )
    .unwrap();
}

fn pod_of(sim: &Sim, job: &str) -> Value {
    let pods = sim.pods_of_job("default", job).unwrap();
    serde_json::to_value(&pods[0]).unwrap()
}

fn terminated(pod: &Value) -> Option<Value> {
    pod.pointer("/status/containerStatuses/0/state/terminated").cloned()
}

/// Wait (wall time, bounded) until the Job's pod has terminated.
async fn until_terminated(sim: &Sim, job: &str) -> Value {
    let start = Instant::now();
    loop {
        if let Some(t) = terminated(&pod_of(sim, job)) {
            return t;
        }
        assert!(start.elapsed() < PATIENCE, "the pod of {job} never terminated");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait until the pod's log contains `text`.
async fn until_log(sim: &Sim, job: &str, text: &str) {
    let start = Instant::now();
    let name = pod_of(sim, job)["metadata"]["name"].as_str().unwrap().to_string();
    loop {
        let log = pod_log(sim, &name).await;
        if log.contains(text) {
            return;
        }
        assert!(start.elapsed() < PATIENCE, "the log never showed {text:?}: {log}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn pod_log(sim: &Sim, pod: &str) -> String {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(sim.client().unwrap(), "default");
    pods.logs(pod, &Default::default()).await.unwrap()
}

fn job_conditions(sim: &Sim, job: &str) -> Vec<(String, String)> {
    let j = sim.get("batch/jobs", "default", job).unwrap();
    j.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["type"].as_str().unwrap().to_string(),
                c["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_pod_gets_its_env_volumes_token_and_reports_its_exit_and_termination_message() {
    require_namespaces!();
    let root = tempfile::tempdir().unwrap();
    let sim = sim(root.path(), shell_image()).await;
    seed(&sim);
    // The container reads what the kubelet gave it and answers through the API with its token.
    // (`$$$$` in a container's args is the shell's `$$`: a kubelet turns `$$` into `$`.)
    let script = r#"
        echo "env $LITERAL $OVERRIDDEN $FROM_IMAGE $FROM_SECRET $FROM_CONFIGMAP $POD_NAME host=$(hostname)"
        echo "envFrom $S_password $region"
        echo "inputs $(cat /captf/inputs/inputs.json) mode $(stat -c %a /captf/inputs/inputs.json)"
        touch /captf/inputs/x 2>/dev/null && echo "inputs writable" || echo "inputs read-only"
        echo scratch > /work/s && echo "work $(cat /work/s)"
        echo "namespace $(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)"
        echo "api $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"
        echo "pid $$$$"
        printf 'the end' > /dev/termination-log
        exit 3
    "#;
    sim.put(job("j1", script, 600, 30)).unwrap();
    let t = until_terminated(&sim, "j1").await;
    assert_eq!(t["exitCode"], 3);
    assert_eq!(t["reason"], "Error");
    assert_eq!(t["message"], "the end");
    let pod = pod_of(&sim, "j1");
    let name = pod["metadata"]["name"].as_str().unwrap();
    assert_eq!(pod["status"]["phase"], "Failed");
    let log = pod_log(&sim, name).await;
    let https = sim.https().unwrap().addr;
    for want in [
        format!("env plain by-container image hunter2 eu-west-1 {name} host={name}"),
        "envFrom hunter2 eu-west-1".to_string(),
        "inputs {\"a\":1} mode 440".to_string(),
        "inputs read-only".to_string(),
        "work scratch".to_string(),
        "namespace default".to_string(),
        format!("api {}:{}", https.ip(), https.port()),
        "pid 1".to_string(),
    ] {
        assert!(log.contains(&want), "{want:?} not in the log:\n{log}");
    }
    assert_eq!(
        job_conditions(&sim, "j1"),
        [
            ("FailureTarget".to_string(), "BackoffLimitExceeded".to_string()),
            ("Failed".to_string(), "BackoffLimitExceeded".to_string())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_termination_message_is_cut_at_4096_bytes_as_the_kubelet_does() {
    require_namespaces!();
    let root = tempfile::tempdir().unwrap();
    let sim = sim(root.path(), shell_image()).await;
    seed(&sim);
    sim.put(job(
        "j1",
        "head -c 5000 /dev/zero | tr '\\0' x > /dev/termination-log",
        600,
        30,
    ))
    .unwrap();
    let t = until_terminated(&sim, "j1").await;
    assert_eq!(t["exitCode"], 0);
    assert_eq!(t["reason"], "Completed");
    assert_eq!(t["message"].as_str().unwrap().len(), 4096);
    assert_eq!(job_conditions(&sim, "j1")[1].0, "Complete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_whose_program_is_missing_fails_its_pod_as_container_cannot_run() {
    require_namespaces!();
    let root = tempfile::tempdir().unwrap();
    let image = ProcessImage::new("/image/runner").file("/image/runner", root.path().join("no-such-binary"));
    let sim = sim(root.path(), image).await;
    seed(&sim);
    sim.put(job("j1", "true", 600, 30)).unwrap();
    // Nothing was started: the pod ended at once, with the reason.
    let t = terminated(&pod_of(&sim, "j1")).expect("the pod ended at once");
    assert_eq!(t["reason"], "ContainerCannotRun");
    assert_eq!(t["exitCode"], 128);
    let msg = t["message"].as_str().unwrap();
    assert!(
        msg.contains("no-such-binary") && msg.contains("does not exist"),
        "{msg}"
    );
    assert_eq!(job_conditions(&sim, "j1")[1].0, "Failed");
    assert!(sim.running_pods().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_referencing_a_missing_secret_key_fails_its_pod_naming_the_env_entry() {
    require_namespaces!();
    let root = tempfile::tempdir().unwrap();
    let sim = sim(root.path(), shell_image()).await;
    // No Secret `creds`.
    sim.put(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "inputs", "namespace": "default"},
        "data": {}}),
    )
    .unwrap();
    sim.put(job("j1", "true", 600, 30)).unwrap();
    let t = terminated(&pod_of(&sim, "j1")).expect("the pod ended at once");
    assert_eq!(t["reason"], "ContainerCannotRun");
    let msg = t["message"].as_str().unwrap();
    assert!(
        msg.contains("env[2] (FROM_SECRET)") && msg.contains("default/creds"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_sends_sigterm_and_sigkill_follows_after_the_grace_period_on_the_simulated_clock() {
    require_namespaces!();
    let root = tempfile::tempdir().unwrap();
    let sim = sim(root.path(), shell_image()).await;
    seed(&sim);
    // PID 1 ignores SIGTERM apart from saying so: only SIGKILL ends it.
    let script = "trap 'echo got-sigterm' TERM; echo ready; while :; do sleep 0.05; done";
    sim.put(job("j1", script, 100, 20)).unwrap();
    until_log(&sim, "j1", "ready").await;
    sim.advance(Duration::from_secs(100));
    until_log(&sim, "j1", "got-sigterm").await;
    assert_eq!(
        job_conditions(&sim, "j1"),
        [("FailureTarget".to_string(), "DeadlineExceeded".to_string())]
    );
    assert!(terminated(&pod_of(&sim, "j1")).is_none(), "still in its grace period");
    sim.advance(Duration::from_secs(19));
    assert!(terminated(&pod_of(&sim, "j1")).is_none(), "still in its grace period");
    sim.advance(Duration::from_secs(1));
    let t = until_terminated(&sim, "j1").await;
    assert_eq!(t["exitCode"], 137);
    assert_eq!(
        job_conditions(&sim, "j1"),
        [
            ("FailureTarget".to_string(), "DeadlineExceeded".to_string()),
            ("Failed".to_string(), "DeadlineExceeded".to_string())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_sends_sigterm_and_the_process_exit_ends_the_pod() {
    require_namespaces!();
    let root = tempfile::tempdir().unwrap();
    let sim = sim(root.path(), shell_image()).await;
    seed(&sim);
    let script = "trap 'echo bye > /dev/termination-log; exit 5' TERM; echo ready; while :; do sleep 0.05; done";
    sim.put(job("j1", script, 600, 30)).unwrap();
    until_log(&sim, "j1", "ready").await;
    let pod = pod_of(&sim, "j1")["metadata"]["name"].as_str().unwrap().to_string();
    assert!(sim.evict("default", &pod));
    let t = until_terminated(&sim, "j1").await;
    assert_eq!(
        (t["exitCode"].clone(), t["message"].clone()),
        (json!(5), json!("bye\n"))
    );
    let p = pod_of(&sim, "j1");
    let conds = p["status"]["conditions"].as_array().unwrap();
    assert!(conds.iter().any(|c| c["type"] == "DisruptionTarget"));
}

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_simulator_kills_and_reaps_every_container_process() {
    require_namespaces!();
    let root = tempfile::tempdir().unwrap();
    let sim = sim(root.path(), shell_image()).await;
    seed(&sim);
    // Containers with a child of their own, all ignoring SIGTERM; one as root, one as a user of
    // its own (changing the user must not let it outlive the simulator).
    let script = "trap '' TERM; (trap '' TERM; while :; do sleep 0.05; done) & echo ready; wait";
    sim.put(job("j1", script, 600, 30)).unwrap();
    sim.put(as_runner_user(job("j2", script, 600, 30))).unwrap();
    until_log(&sim, "j1", "ready").await;
    until_log(&sim, "j2", "ready").await;
    let outer = sim.process_pids();
    assert_eq!(outer.len(), 2);
    let mut all: Vec<i32> = outer.clone();
    for pid in &outer {
        let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
        all.extend(kids.split_whitespace().map(|k| k.parse::<i32>().unwrap()));
    }
    assert!(all.len() >= 4, "{all:?}");
    assert!(all.iter().all(|p| alive(*p)));
    drop(sim);
    // Reaped, not zombies: no /proc entry is left for the outer processes; the containers'
    // own processes die with their PID namespace (bounded wait for the kernel to finish).
    for pid in &outer {
        assert!(!alive(*pid), "{pid} was not reaped");
    }
    let start = Instant::now();
    while all.iter().any(|p| alive(*p)) {
        assert!(start.elapsed() < PATIENCE, "orphans left: {all:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The Job of `job` with the runner's securityContext (docs/runner.md): a non-root user, the
/// pod's fsGroup, a read-only root.
fn as_runner_user(mut j: Value) -> Value {
    let spec = j.pointer_mut("/spec/template/spec").unwrap();
    spec["securityContext"] = json!({"runAsNonRoot": true, "runAsUser": 65532, "fsGroup": 65532});
    spec["containers"][0]["securityContext"] = json!({"runAsUser": 65532, "runAsGroup": 65532,
        "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false});
    j
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_runs_as_its_security_context_user_with_a_read_only_root() {
    require_namespaces!();
    let root = tempfile::tempdir().unwrap();
    let sim = sim(root.path(), shell_image()).await;
    seed(&sim);
    let script = r#"
        echo "user $(id -u):$(id -g) groups $(id -G)"
        touch /x 2>/dev/null && echo "root writable" || echo "root read-only"
        touch /etc/captf-x 2>/dev/null && echo "machine writable" || echo "machine read-only"
        echo w > /work/w && echo "work writable"
        cat /captf/inputs/inputs.json >/dev/null && echo "inputs readable"
        cat /var/run/secrets/kubernetes.io/serviceaccount/token >/dev/null && echo "token readable"
        printf done > /dev/termination-log
    "#;
    sim.put(as_runner_user(job("j1", script, 600, 30))).unwrap();
    let t = until_terminated(&sim, "j1").await;
    assert_eq!((t["exitCode"].clone(), t["message"].clone()), (json!(0), json!("done")));
    let name = pod_of(&sim, "j1")["metadata"]["name"].as_str().unwrap().to_string();
    let log = pod_log(&sim, &name).await;
    for want in [
        "user 65532:65532 groups 65532",
        "root read-only",
        "machine read-only",
        "work writable",
        "inputs readable",
        "token readable",
    ] {
        assert!(log.contains(want), "{want:?} not in the log:\n{log}");
    }
    assert!(!Path::new("/etc/captf-x").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_non_root_with_a_root_user_cannot_run() {
    require_namespaces!();
    let root = tempfile::tempdir().unwrap();
    let sim = sim(root.path(), shell_image()).await;
    seed(&sim);
    let mut j = job("j1", "true", 600, 30);
    j["spec"]["template"]["spec"]["securityContext"] = json!({"runAsNonRoot": true});
    sim.put(j).unwrap();
    let t = terminated(&pod_of(&sim, "j1")).expect("the pod ended at once");
    assert_eq!(t["reason"], "ContainerCannotRun");
    assert!(t["message"].as_str().unwrap().contains("runAsNonRoot"), "{t}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_pod_sends_sigterm_and_fails_its_job() {
    require_namespaces!();
    let root = tempfile::tempdir().unwrap();
    let sim = sim(root.path(), shell_image()).await;
    seed(&sim);
    let script = "trap 'echo term > /work/seen; exit 0' TERM; echo ready; while :; do sleep 0.05; done";
    sim.put(job("j1", script, 600, 30)).unwrap();
    until_log(&sim, "j1", "ready").await;
    let pod = pod_of(&sim, "j1")["metadata"]["name"].as_str().unwrap().to_string();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(sim.client().unwrap(), "default");
    pods.delete(&pod, &Default::default()).await.unwrap();
    assert_eq!(
        job_conditions(&sim, "j1"),
        [
            ("FailureTarget".to_string(), "BackoffLimitExceeded".to_string()),
            ("Failed".to_string(), "BackoffLimitExceeded".to_string())
        ]
    );
    // The process got SIGTERM and ended by itself, well within its grace period.
    let start = Instant::now();
    while !sim.running_pods().is_empty() {
        assert!(start.elapsed() < PATIENCE, "the container never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = std::fs::read_dir(root.path().join("pods"))
        .unwrap()
        .filter_map(Result::ok)
        .any(|d| std::fs::read_to_string(d.path().join("volumes/scratch/seen")).is_ok_and(|s| s == "term\n"));
    assert!(seen, "the container did not see SIGTERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_queued_for_a_job_wins_over_the_process_image_and_rules_and_defaults_never_do() {
    // Which way a Job goes does not need root; running the real one does (checked only then).
    let root = tempfile::tempdir().unwrap();
    let sim = sim(root.path(), shell_image()).await;
    seed(&sim);
    // Neither the rule nor the default replaces a real process; the queued script names its Job.
    sim.set_default_script(captf_sim::RunnerScript::fail("the default"));
    sim.script_with(|_| Some(captf_sim::RunnerScript::fail("the rule")));
    sim.script(
        captf_sim::JobMatch::any().name_prefix("scripted"),
        captf_sim::RunnerScript::fail("queued for this Job"),
    );
    let running = "echo ready; while :; do sleep 0.05; done";
    sim.put(job("scripted-1", running, 600, 30)).unwrap();
    sim.put(job("real-1", "echo real > /dev/termination-log", 600, 30))
        .unwrap();
    assert!(!sim.job_ran_as_process("default", "scripted-1"));
    assert!(sim.job_ran_as_process("default", "real-1"));
    assert_eq!(sim.pending_scripts(), 0, "the queued script was used");
    match namespaces_unavailable() {
        None => {
            // The real one ends in wall time with its own termination message; the clock never
            // moved.
            let t = until_terminated(&sim, "real-1").await;
            assert_eq!(
                (t["exitCode"].clone(), t["message"].clone()),
                (json!(0), json!("real\n"))
            );
            assert!(sim.process_pods().is_empty());
        }
        // The rest of the test needs no root; only this part is skipped (under CI: failed).
        Some(why) => captf_testsupport::cannot_run(format!(
            "{why}; the part running the real Job as a process needs root for a private mount namespace"
        )),
    }
    // The scripted one plays its script on the simulated clock: still running until it moves.
    assert!(terminated(&pod_of(&sim, "scripted-1")).is_none());
    sim.advance(captf_sim::runner::DEFAULT_RUN_DURATION);
    let t = terminated(&pod_of(&sim, "scripted-1")).expect("the script ended its pod");
    let result = captf_shared::protocol::RunnerResult::parse(t["message"].as_str().unwrap()).unwrap();
    assert_eq!(result.message, "queued for this Job");
    // A later Job with no queued script left runs as a process again.
    sim.put(job("scripted-2", "true", 600, 30)).unwrap();
    assert!(sim.job_ran_as_process("default", "scripted-2"));
}

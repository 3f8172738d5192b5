//! The real `kubectl` (v1.30) against the simulator: apply, get, patch status-free edits, delete.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use captf_sim::Sim;

/// `kubectl` from `$CAPTF_TOOLS_BIN`, else `<workspace>/.tools/bin`.
fn kubectl_path() -> PathBuf {
    captf_testsupport::installed_tool("kubectl").unwrap_or_else(|e| panic!("{e}"))
}

async fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    use tokio::io::AsyncWriteExt;
    let mut cmd = tokio::process::Command::new(kubectl_path());
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env("HOME", kubeconfig.parent().unwrap())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).await.unwrap();
    }
    drop(input);
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("kubectl timed out")
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const TC: &str = r#"apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: TerraformCluster
metadata:
  name: prod-eu
  namespace: default
spec:
  module:
    source: git::https://example.com/modules/cluster.git
  variables:
    region: eu-west-1
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_gets_and_deletes_a_terraform_cluster() {
    let sim = Sim::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kc).unwrap();

    let (ok, out, err) = kubectl(&kc, &["apply", "-f", "-"], Some(TC)).await;
    assert!(ok, "apply failed: {out}{err}");
    assert!(
        out.contains("terraformcluster.infrastructure.cluster.x-k8s.io/prod-eu created"),
        "{out}"
    );

    let (ok, out, err) = kubectl(&kc, &["get", "terraformclusters", "-o", "name"], None).await;
    assert!(ok, "get failed: {err}");
    assert_eq!(out.trim(), "terraformcluster.infrastructure.cluster.x-k8s.io/prod-eu");

    let (ok, out, err) = kubectl(
        &kc,
        &[
            "get",
            "terraformcluster",
            "prod-eu",
            "-o",
            "jsonpath={.spec.variables.region}",
        ],
        None,
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out, "eu-west-1");

    // A second apply with a change patches it (client-side apply: three-way merge patch).
    let (ok, out, err) = kubectl(
        &kc,
        &["apply", "-f", "-"],
        Some(&TC.replace("eu-west-1", "eu-central-1")),
    )
    .await;
    assert!(ok, "re-apply failed: {out}{err}");
    assert!(out.contains("configured"), "{out}");
    let (_, out, _) = kubectl(
        &kc,
        &[
            "get",
            "terraformcluster",
            "prod-eu",
            "-o",
            "jsonpath={.spec.variables.region} {.metadata.generation}",
        ],
        None,
    )
    .await;
    assert_eq!(out, "eu-central-1 2");

    // `get -w` streams Table rows with the printer columns.
    let (_, out, _) = kubectl(&kc, &["get", "tfc", "-w", "--request-timeout=2s"], None).await;
    let first: Vec<&str> = out.lines().next().unwrap_or("").split_whitespace().collect();
    assert_eq!(first, ["NAME", "READY", "OP", "REASON", "AGE"], "{out}");

    let (ok, out, err) = kubectl(
        &kc,
        &["annotate", "terraformcluster", "prod-eu", "captf.io/approve-plan=abc"],
        None,
    )
    .await;
    assert!(ok, "annotate failed: {out}{err}");

    let (ok, out, err) = kubectl(&kc, &["delete", "terraformcluster", "prod-eu", "--timeout=20s"], None).await;
    assert!(ok, "delete failed: {out}{err}");
    assert!(out.contains("deleted"), "{out}");
    let (ok, _, err) = kubectl(&kc, &["get", "terraformcluster", "prod-eu"], None).await;
    assert!(!ok);
    assert!(err.contains("NotFound") || err.contains("not found"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_lists_jobs_and_pods_with_selectors() {
    let sim = Sim::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kc).unwrap();
    let job = r#"apiVersion: batch/v1
kind: Job
metadata:
  name: tc-demo-aaaaaa-apply-1
  labels: {captf.io/op: apply}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [{name: runner, image: captf-runner:dev}]
"#;
    let (ok, out, err) = kubectl(&kc, &["create", "-f", "-"], Some(job)).await;
    assert!(ok, "create failed: {out}{err}");
    let (ok, out, err) = kubectl(
        &kc,
        &["get", "pods", "-l", "job-name=tc-demo-aaaaaa-apply-1", "-o", "name"],
        None,
    )
    .await;
    assert!(ok, "{err}");
    assert!(out.trim().starts_with("pod/tc-demo-aaaaaa-apply-1-"), "{out}");
    let (ok, out, err) = kubectl(
        &kc,
        &["get", "pods", "--field-selector", "status.phase=Running", "-o", "name"],
        None,
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
}

#[tokio::test]
async fn kubectl_get_follows_continue_tokens_in_tables_and_in_json() {
    let sim = Sim::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kc).unwrap();
    let cms: String = (0..5)
        .map(|i| format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm{i}}}\n"))
        .collect();
    let (ok, out, err) = kubectl(&kc, &["create", "-f", "-"], Some(&cms)).await;
    assert!(ok, "create failed: {out}{err}");
    // The table kubectl prints, and `-o name`, from pages of two.
    let (ok, out, err) = kubectl(&kc, &["get", "configmaps", "--chunk-size=2", "-v=6"], None).await;
    assert!(ok, "{err}");
    // kubectl's request log shows it followed the tokens: three pages.
    assert_eq!(err.matches("limit=2").count(), 3, "{err}");
    assert_eq!(err.matches("continue=").count(), 2, "{err}");
    let rows: Vec<&str> = out
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(rows, ["cm0", "cm1", "cm2", "cm3", "cm4"], "{out}");
    let (ok, out, err) = kubectl(&kc, &["get", "configmaps", "--chunk-size=2", "-o", "name"], None).await;
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 5, "{out}");
}

/// `kubectl`, or None after `captf_testsupport::cannot_run` said why (under `CI` that fails).
fn kubectl_or_skip() -> Option<PathBuf> {
    captf_testsupport::installed_tool("kubectl")
        .map_err(captf_testsupport::cannot_run)
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_prints_the_crd_descriptions() {
    if kubectl_or_skip().is_none() {
        return;
    }
    let sim = Sim::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kc).unwrap();

    let (ok, out, err) = kubectl(&kc, &["explain", "terraformcluster.spec"], None).await;
    assert!(ok, "explain failed: {out}{err}");
    assert!(out.contains("GROUP:      infrastructure.cluster.x-k8s.io\n"), "{out}");
    assert!(out.contains("KIND:       TerraformCluster\n"), "{out}");
    assert!(out.contains("VERSION:    v1beta1\n"), "{out}");
    assert!(out.contains("FIELD: spec <Object>"), "{out}");
    assert!(
        out.contains("A Cluster API cluster's infrastructure, provisioned by a Terraform module."),
        "{out}"
    );
    // Its fields, each with its type, description and whether it is required.
    assert!(
        out.contains("module\t<Object> -required-\n    The Terraform module to run."),
        "{out}"
    );

    let (ok, out, err) = kubectl(&kc, &["explain", "tfc.spec.module.source"], None).await;
    assert!(ok, "explain failed: {out}{err}");
    assert!(out.contains("FIELD: source <string>"), "{out}");
    assert!(
        out.contains("A module address `tofu init -from-module` accepts"),
        "{out}"
    );

    // The whole kind: its own description, and apiVersion described as kube-apiserver does.
    let (ok, out, err) = kubectl(&kc, &["explain", "terraformmachinepools"], None).await;
    assert!(ok, "explain failed: {out}{err}");
    assert!(out.contains("KIND:       TerraformMachinePool"), "{out}");
    assert!(out.contains("APIVersion defines the versioned schema"), "{out}");
}

/// An events.k8s.io/v1 Event as the controller writes one: `eventTime` only (no deprecated
/// timestamps, no count), reported by the controller's instance, about a TerraformCluster.
fn controller_event(name: &str, uid: &str, reason: &str, note: &str, at: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": format!("prod-eu.{reason}"), "namespace": "default"},
        "eventTime": at, "type": "Warning", "reason": reason, "action": "Apply", "note": note,
        "regarding": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
                      "name": name, "namespace": "default", "uid": uid},
        "related": {"apiVersion": "batch/v1", "kind": "Job", "name": "tc-prod-eu-apply-1", "namespace": "default"},
        "reportingController": "captf.io/controller", "reportingInstance": "captf-controller-0",
    })
}

/// A simulator with the TerraformCluster `prod-eu` applied by kubectl, for the Events tests:
/// its kubeconfig, the object's UID and the events.k8s.io/v1 API the controller writes through.
struct EventsSim {
    sim: Sim,
    dir: tempfile::TempDir,
    kc: std::path::PathBuf,
    uid: String,
    api: kube::Api<kube::api::DynamicObject>,
}

/// `None` (skipped, or failed under CI) when kubectl is not installed.
async fn events_sim() -> Option<EventsSim> {
    kubectl_or_skip()?;
    let sim = Sim::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kc).unwrap();
    let (ok, out, err) = kubectl(&kc, &["apply", "-f", "-"], Some(TC)).await;
    assert!(ok, "apply failed: {out}{err}");
    let (_, uid, _) = kubectl(&kc, &["get", "tfc", "prod-eu", "-o", "jsonpath={.metadata.uid}"], None).await;
    let api = kube::Api::namespaced_with(
        sim.client().unwrap(),
        "default",
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("events.k8s.io", "v1", "Event"),
            "events",
        ),
    );
    Some(EventsSim { sim, dir, kc, uid, api })
}

/// Whether kubectl's age `shown` (`5m`, `5m3s`, `62s`) is `ago` seconds, give or take what the
/// machine's clock moved while the test ran (kubectl ages from it; at most 30 s, however loaded).
fn aged(shown: &str, ago: u64) -> bool {
    let (minutes, rest) = shown.split_once('m').unwrap_or(("0", shown));
    let seconds = rest.strip_suffix('s').unwrap_or(rest);
    let secs = |t: &str| if t.is_empty() { Some(0) } else { t.parse::<u64>().ok() };
    match (secs(minutes), secs(seconds)) {
        (Some(m), Some(s)) => (ago..=ago + 30).contains(&(m * 60 + s)),
        _ => false,
    }
}

#[test]
fn an_age_is_read_as_kubectl_prints_it() {
    assert!(aged("5m", 300) && aged("5m3s", 300) && aged("62s", 60) && aged("2m", 120));
    assert!(!aged("4m59s", 300) && !aged("6m", 300) && !aged("<invalid>", 60) && !aged("5h", 300));
}

/// Create one events.k8s.io/v1 Event, as the controller's recorder does.
async fn create_event(api: &kube::Api<kube::api::DynamicObject>, ev: serde_json::Value) {
    let ev: kube::api::DynamicObject = serde_json::from_value(ev).unwrap();
    api.create(&Default::default(), &ev).await.unwrap();
}

/// `kubectl describe terraformcluster/prod-eu`: all it printed, and its Events section.
async fn describe_events(kc: &Path) -> (String, String) {
    let (ok, out, err) = kubectl(kc, &["describe", "terraformcluster/prod-eu"], None).await;
    assert!(ok, "{err}");
    let events = out
        .split_once("Events:")
        .map(|(_, e)| e.to_string())
        .unwrap_or_else(|| panic!("{out}"));
    (out, events)
}

/// The simulator's time `ago` seconds back, as an Event's `eventTime` is written.
fn ago_stamp(sim: &Sim, ago: i64) -> String {
    (sim.now() - jiff::SignedDuration::from_secs(ago))
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_events_and_describe_read_the_controllers_events() {
    // The simulated clock starts at the wall clock here, so describe's ages (kubectl computes
    // them from this machine's clock) read as on a cluster.
    let Some(EventsSim {
        sim,
        dir: _dir,
        kc,
        uid,
        api,
    }) = events_sim().await
    else {
        return;
    };
    let at = |ago: i64| ago_stamp(&sim, ago);
    for ev in [
        controller_event("prod-eu", &uid, "JobFailed", "Error: the cloud API said no", &at(300)),
        controller_event("prod-eu", &uid, "JobStarted", "started Job tc-prod-eu-apply-1", &at(60)),
    ] {
        create_event(&api, ev).await;
    }

    // The core/v1 view carries what kube-apiserver maps, nothing it would not.
    let (ok, out, err) = kubectl(&kc, &["get", "events", "prod-eu.JobFailed", "-o", "json"], None).await;
    assert!(ok, "{err}");
    let core: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["involvedObject"]["uid"], uid.as_str());
    assert_eq!(core["message"], "Error: the cloud API said no");
    assert_eq!(core["reportingComponent"], "captf.io/controller");
    assert_eq!(core["reportingInstance"], "captf-controller-0");
    assert_eq!(core["related"]["kind"], "Job");
    assert_eq!(core["action"], "Apply");
    assert!(
        core.get("firstTimestamp").is_none() && core.get("count").is_none(),
        "{core}"
    );

    let (ok, out, err) = kubectl(&kc, &["get", "events"], None).await;
    assert!(ok, "{err}");
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        lines[0],
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{out}"
    );
    let failed = lines.iter().find(|l| l.get(2) == Some(&"JobFailed")).unwrap();
    assert_eq!(
        failed[..],
        [
            "5m0s",
            "Warning",
            "JobFailed",
            "terraformcluster/prod-eu",
            "Error:",
            "the",
            "cloud",
            "API",
            "said",
            "no"
        ],
        "{out}"
    );
    let (ok, out, err) = kubectl(&kc, &["get", "events", "-o", "wide"], None).await;
    assert!(ok, "{err}");
    assert!(out.contains("captf.io/controller, captf-controller-0"), "{out}");

    // describe finds them by the object's uid and prints them with ages and who reported them.
    let (out, events) = describe_events(&kc).await;
    let events = events.as_str();
    let rows: Vec<Vec<&str>> = events.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows[1], ["Type", "Reason", "Age", "From", "Message"], "{out}");
    let failed = rows
        .iter()
        .find(|r| r.get(1) == Some(&"JobFailed"))
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(failed[0], "Warning", "{out}");
    assert!(aged(failed[2], 300), "{out}");
    assert_eq!(failed[3], "captf.io/controller", "{out}");
    assert!(events.contains("Error: the cloud API said no"), "{out}");
}

/// A TerraformCluster with two typos, as a person writes one.
const TC_WITH_TYPOS: &str = r#"apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: TerraformCluster
metadata:
  name: typo
  namespace: default
spec:
  module:
    source: git::https://example.com/modules/cluster.git
    vesion: 1.2.0
  drfit:
    enabled: true
"#;

/// kubectl validates strictly unless told otherwise (it finds the `fieldValidation` parameter in
/// the simulator's OpenAPI), so a typo is refused with the server's message; `--validate=warn`
/// creates the object without the unknown fields and prints a warning each; server-side apply
/// refuses them whatever. The messages are kube-apiserver v1.36's for the same file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_refuses_unknown_fields_unless_told_to_warn_and_then_drops_them() {
    if kubectl_or_skip().is_none() {
        return;
    }
    let sim = Sim::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kc).unwrap();

    let (ok, out, err) = kubectl(&kc, &["apply", "-f", "-"], Some(TC_WITH_TYPOS)).await;
    assert!(!ok, "{out}");
    assert_eq!(
        err.trim(),
        "Error from server (BadRequest): error when creating \"STDIN\": TerraformCluster in version \"v1beta1\" cannot be handled as a TerraformCluster: strict decoding error: unknown field \"spec.drfit\", unknown field \"spec.module.vesion\""
    );
    assert!(
        sim.get("infrastructure.cluster.x-k8s.io/terraformclusters", "default", "typo")
            .is_none()
    );

    let (ok, out, err) = kubectl(&kc, &["apply", "--server-side", "-f", "-"], Some(TC_WITH_TYPOS)).await;
    assert!(!ok, "{out}");
    assert_eq!(
        err.trim(),
        "Error from server: failed to create typed patch object (default/typo; infrastructure.cluster.x-k8s.io/v1beta1, Kind=TerraformCluster): .spec.drfit: field not declared in schema"
    );

    let (ok, out, err) = kubectl(&kc, &["apply", "--validate=warn", "-f", "-"], Some(TC_WITH_TYPOS)).await;
    assert!(ok, "{out}{err}");
    assert_eq!(
        out.trim(),
        "terraformcluster.infrastructure.cluster.x-k8s.io/typo created"
    );
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        [
            "Warning: unknown field \"spec.drfit\"",
            "Warning: unknown field \"spec.module.vesion\""
        ]
    );
    let (ok, out, err) = kubectl(&kc, &["get", "tfc", "typo", "-o", "jsonpath={.spec}"], None).await;
    assert!(ok, "{err}");
    let spec: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        spec,
        serde_json::json!({"module": {"source": "git::https://example.com/modules/cluster.git"}})
    );
}

/// kubectl describe ages an Event by its `eventTime`, and a repeated one by its `series`, from
/// the machine's clock: an Event written through events.k8s.io/v1 as the controller and
/// kube-rs's recorder write them (`eventTime`, `series`, no deprecated timestamps) reads as on a
/// cluster while the simulated clock is at the wall clock. The core/v1 view has no
/// `firstTimestamp` or `count`, as kube-apiserver's has none (conformance suite,
/// `events_written_through_events_v1_have_no_deprecated_timestamps_in_core_v1`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_describe_ages_an_event_by_its_event_time_and_a_repeated_one_by_its_series() {
    let Some(EventsSim {
        sim,
        dir: _dir,
        kc,
        uid,
        api,
    }) = events_sim().await
    else {
        return;
    };
    let at = |ago: i64| ago_stamp(&sim, ago);
    let mut repeated = controller_event("prod-eu", &uid, "StateLocked", "the state is locked", &at(300));
    repeated["series"] = serde_json::json!({"count": 3, "lastObservedTime": at(60)});
    for ev in [
        controller_event(
            "prod-eu",
            &uid,
            "JobStarted",
            "started Job tc-prod-eu-apply-1",
            &at(120),
        ),
        repeated,
    ] {
        create_event(&api, ev).await;
    }

    let (out, events) = describe_events(&kc).await;
    let events = events.as_str();
    assert!(!events.contains("<invalid>") && !events.contains("<unknown>"), "{out}");
    let row = |reason: &str| -> Vec<String> {
        events
            .lines()
            .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
            .find(|r| r.get(1).map(String::as_str) == Some(reason))
            .unwrap_or_else(|| panic!("no {reason} in {out}"))
    };
    // kubectl's clock moves on while the test runs: a second or two more is as right.
    let started = row("JobStarted");
    assert!(aged(&started[2], 120), "{out}");
    let locked = row("StateLocked");
    assert!(aged(&locked[2], 60), "{out}");
    assert_eq!(locked[3..5], ["(x3", "over"], "{out}");
    assert!(aged(locked[5].trim_end_matches(')'), 300), "{out}");
}

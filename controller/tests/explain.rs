//! `captf-controller explain` end to end: the built binary over fixture files.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn fixture(rel: &str) -> String {
    let p: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "fixtures", rel].iter().collect();
    p.to_string_lossy().into_owned()
}

fn explain(args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_captf-controller"));
    cmd.arg("explain").args(args);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

/// Run explain, expect success, and return the decision JSON and the stderr summary.
fn decision(args: &[String], stdin: Option<&str>) -> (Value, String) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = explain(&args, stdin);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "explain failed: {stderr}");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stderr.lines().count(), 1, "one summary line: {stderr:?}");
    (json, stderr)
}

/// Run explain, expect exit 2, and return stderr.
fn failure(args: &[String]) -> String {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = explain(&args, None);
    assert_eq!(out.status.code(), Some(2), "expected exit 2");
    assert!(out.stdout.is_empty());
    String::from_utf8(out.stderr).unwrap()
}

fn args(pairs: &[(&str, &str)]) -> Vec<String> {
    pairs
        .iter()
        .flat_map(|(flag, v)| {
            let value = if *v == "-" || v.starts_with("20") {
                v.to_string()
            } else {
                fixture(v)
            };
            [flag.to_string(), value]
        })
        .collect()
}

#[test]
fn two_failed_applies_wait_two_minutes_with_inputs_changed_backoff() {
    let (d, summary) = decision(
        &args(&[
            ("-f", "backoff/object.yaml"),
            ("--jobs", "backoff/jobs.yaml"),
            ("--pods", "backoff/pods.yaml"),
            ("--secret", "backoff/secret.yaml"),
            ("--now", "2026-11-29T10:06:00Z"),
        ]),
        None,
    );
    assert_eq!(d["action"], "wait");
    assert_eq!(d["op"], "apply");
    assert_eq!(d["reason"], "InputsChangedBackoff");
    assert_eq!(d["notBefore"], "2026-11-29T10:07:00Z");
    assert_eq!(d["attempt"], 3);
    assert_eq!(d["backoff"]["n"], 2);
    assert_eq!(d["backoff"]["delaySeconds"], 120);
    assert_eq!(d["requeueAfterSeconds"], 60);
    assert!(
        summary.contains("InputsChangedBackoff") && summary.contains("2026-11-29T10:07:00Z"),
        "{summary}"
    );
    // Once the delay is over the apply starts, attempt 3.
    let (d, _) = decision(
        &args(&[
            ("-f", "backoff/object.yaml"),
            ("--jobs", "backoff/jobs.yaml"),
            ("--secret", "backoff/secret.yaml"),
            ("--now", "2026-11-29T10:07:00Z"),
        ]),
        None,
    );
    assert_eq!(
        (d["action"].as_str(), d["reason"].as_str(), d["attempt"].as_u64()),
        (Some("start"), Some("InputsChanged"), Some(3))
    );
}

#[test]
fn deadline_kills_reported_as_interrupted_count_and_reach_the_10m_cap_from_stdin_json() {
    let jobs = std::fs::read_to_string(fixture("deadline/jobs.json")).unwrap();
    let (d, _) = decision(
        &args(&[
            ("-f", "deadline/object.json"),
            ("--jobs", "-"),
            ("--pods", "deadline/pods.json"),
            ("--now", "2026-11-29T12:31:00Z"),
        ]),
        Some(&jobs),
    );
    // apply-7 was evicted (interrupted, free); apply-6, -5 deadline kills and apply-4 failed: n = 3 = limit.
    let outcomes: Vec<&str> = d["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["interrupted", "deadline", "deadline", "failed"]);
    assert_eq!(d["backoff"]["n"], 3);
    assert_eq!(d["backoff"]["delaySeconds"], 600);
    assert_eq!(d["backoff"]["notBefore"], "2026-11-29T12:10:00Z");
    assert_eq!((d["action"].as_str(), d["attempt"].as_u64()), (Some("start"), Some(4)));
    let (d, _) = decision(
        &args(&[
            ("-f", "deadline/object.json"),
            ("--jobs", "deadline/jobs.json"),
            ("--pods", "deadline/pods.json"),
            ("--now", "2026-11-29T12:09:59Z"),
        ]),
        None,
    );
    assert_eq!(d["reason"], "InputsChangedBackoff");
}

fn stale_lock_args(pods: &str, lease: &str) -> Vec<String> {
    args(&[
        ("-f", "stale-lock/object.yaml"),
        ("--jobs", "stale-lock/jobs.yaml"),
        ("--pods", pods),
        ("--lease", lease),
        ("--secret", "stale-lock/secret.yaml"),
        ("--now", "2026-11-29T10:00:00Z"),
    ])
}

#[test]
fn a_stale_lock_of_this_objects_failed_runner_rides_on_the_next_job() {
    let (d, summary) = decision(&stale_lock_args("stale-lock/pods.yaml", "stale-lock/lease.yaml"), None);
    assert_eq!((d["action"].as_str(), d["op"].as_str()), (Some("start"), Some("drift")));
    assert_eq!(d["reason"], "DriftCheckDue");
    assert_eq!(d["forceUnlockId"], "0c1e3a9d-6b1f-4c7e-9a0e-2f6f1b7a8c55");
    assert_eq!(d["stateLock"]["stale"], true);
    assert_eq!(d["stateLock"]["checked"], true);
    assert_eq!(d["stateLock"]["holder"], "tc-prod-eu-225654031b7f-apply-3-x2k9q");
    assert!(summary.contains("force-unlock 0c1e3a9d"), "{summary}");
}

#[test]
fn a_terminating_runner_pod_keeps_its_lock() {
    let (d, _) = decision(
        &stale_lock_args("stale-lock/pods-terminating.yaml", "stale-lock/lease.yaml"),
        None,
    );
    assert_eq!(d["action"], "start");
    assert_eq!(d["forceUnlockId"], Value::Null);
    assert_eq!(d["stateLock"]["stale"], false);
    assert!(d["stateLock"]["why"].as_str().unwrap().contains("terminating"));
}

#[test]
fn a_workstations_lock_is_reported_and_never_unlocked() {
    let (d, summary) = decision(
        &stale_lock_args("stale-lock/pods.yaml", "foreign-lock/lease.yaml"),
        None,
    );
    assert_eq!(d["action"], "start", "a foreign lock keeps Jobs starting");
    assert_eq!(d["forceUnlockId"], Value::Null);
    assert_eq!(d["stateLock"]["foreign"], true);
    assert_eq!(d["stateLock"]["holder"], "alice@alice-laptop");
    assert!(
        summary.contains("alice@alice-laptop") && summary.contains("OperationTypeApply"),
        "{summary}"
    );
}

#[test]
fn an_apply_job_that_disappeared_while_it_ran_makes_an_apply_due() {
    let (d, _) = decision(
        &args(&[
            ("-f", "interrupted/object.yaml"),
            ("--jobs", "interrupted/jobs.yaml"),
            ("--now", "2026-11-29T10:00:00Z"),
        ]),
        None,
    );
    assert_eq!(
        (d["action"].as_str(), d["reason"].as_str()),
        (Some("start"), Some("InterruptedApply"))
    );
    assert_eq!(d["interruptedApply"], "tc-prod-eu-225654031b7f-apply-9");
    assert!(
        d["activeJob"]["message"]
            .as_str()
            .unwrap()
            .contains("disappeared while it ran")
    );
}

#[test]
fn failure_target_without_failed_is_still_active() {
    let (d, summary) = decision(
        &args(&[
            ("-f", "stale-lock/object.yaml"),
            ("--jobs", "active/jobs.yaml"),
            ("--now", "2026-11-29T10:00:00Z"),
        ]),
        None,
    );
    assert_eq!(
        (d["action"].as_str(), d["reason"].as_str()),
        (Some("wait"), Some("JobActive"))
    );
    assert_eq!(d["jobs"][0]["outcome"], Value::Null);
    assert_eq!(
        d["stateLock"]["checked"], false,
        "the lock is checked only when no Job is active"
    );
    assert!(summary.contains("JobActive"));
}

#[test]
fn the_running_job_is_in_the_json_with_its_start_and_its_deadline() {
    let (d, _) = decision(
        &args(&[
            ("-f", "stale-lock/object.yaml"),
            ("--jobs", "active/jobs.yaml"),
            ("--now", "2026-11-29T10:20:00Z"),
        ]),
        None,
    );
    assert_eq!(
        d["activeJob"],
        serde_json::json!({
            "job": "tc-prod-eu-225654031b7f-apply-10", "found": true, "op": "apply",
            "since": "2026-11-29T10:00:05Z", "activeDeadlineSeconds": 3600,
            "deadline": "2026-11-29T11:00:05Z",
        })
    );
}

#[test]
fn a_job_killed_at_its_deadline_is_the_last_failure_with_deadline_exceeded_as_why() {
    let (d, _) = decision(
        &args(&[
            ("-f", "deadline/object.json"),
            ("--jobs", "deadline/jobs.json"),
            ("--pods", "deadline/pods.json"),
            ("--now", "2026-11-29T12:31:00Z"),
        ]),
        None,
    );
    // apply-7 was evicted (free): the failure is apply-6's, killed at its deadline.
    let f = &d["lastFailure"];
    assert_eq!(
        (f["job"].as_str(), f["outcome"].as_str(), f["reason"].as_str()),
        (
            Some("tc-prod-eu-225654031b7f-apply-6"),
            Some("deadline"),
            Some("DeadlineExceeded")
        ),
        "{f}"
    );
    assert!(
        f["why"]
            .as_str()
            .unwrap()
            .contains("was stopped at its deadline (DeadlineExceeded)"),
        "{f}"
    );
}

#[test]
fn the_inputs_hash_is_computed_from_spec_variables_and_cluster_name() {
    let (d, _) = decision(
        &args(&[
            ("-f", "stale-lock/object.yaml"),
            ("--jobs", "stale-lock/jobs.yaml"),
            ("--secret", "stale-lock/secret.yaml"),
            ("--now", "2026-11-29T09:10:00Z"),
        ]),
        None,
    );
    // sha256 of {"module":{"source":…},"variables":{"cluster_name":"prod-eu","nodes":3,"region":"eu-west-1"}}
    assert_eq!(
        d["inputsHash"]["current"],
        "99bbef273fbfc4fafec450d940de9d6fa0512d87a51da0798a7ec154ca9149d8"
    );
    assert_eq!(d["reason"], "Idle");
}

#[test]
fn a_job_field_of_the_wrong_type_is_named_with_its_file() {
    let err = failure(&args(&[
        ("-f", "stale-lock/object.yaml"),
        ("--jobs", "bad/jobs-bad-field.yaml"),
    ]));
    assert!(
        err.contains("bad/jobs-bad-field.yaml: items[0].status.conditions:"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn inconsistent_or_unreadable_input_exits_2_naming_file_and_field() {
    let cases: [(Vec<String>, &str); 6] = [
        (
            args(&[
                ("-f", "stale-lock/object.yaml"),
                ("--jobs", "active/jobs.yaml"),
                ("--lease", "bad/lease-wrong-name.yaml"),
            ]),
            "bad/lease-wrong-name.yaml: metadata.name: \"some-other-lease\" is not this object's lock Lease",
        ),
        (
            args(&[("-f", "bad/two-objects.yaml"), ("--jobs", "active/jobs.yaml")]),
            "expected exactly one object, got 2",
        ),
        (
            args(&[("-f", "bad/not-yaml.yaml"), ("--jobs", "active/jobs.yaml")]),
            "bad/not-yaml.yaml: not YAML or JSON",
        ),
        (
            args(&[("-f", "stale-lock/pods.yaml"), ("--jobs", "active/jobs.yaml")]),
            "stale-lock/pods.yaml: items[0]: kind: must be one of",
        ),
        (
            args(&[("-f", "stale-lock/object.yaml"), ("--jobs", "stale-lock/pods.yaml")]),
            "stale-lock/pods.yaml: items[0].kind: expected Job, got Pod",
        ),
        (
            args(&[("-f", "-"), ("--jobs", "-")]),
            "only one input can be read from stdin",
        ),
    ];
    for (a, expected) in cases {
        let err = failure(&a);
        assert!(err.contains(expected), "expected {expected:?} in {err:?}");
    }
    let err = failure(&[
        "-f".into(),
        "/nonexistent/object.yaml".into(),
        "--jobs".into(),
        fixture("active/jobs.yaml"),
    ]);
    assert!(err.contains("/nonexistent/object.yaml: cannot read"), "{err}");
    let mut a = args(&[("-f", "stale-lock/object.yaml"), ("--jobs", "active/jobs.yaml")]);
    a.extend(["--now".to_string(), "yesterday".to_string()]);
    assert!(failure(&a).contains("--now: \"yesterday\" is not an RFC 3339 time"));
}

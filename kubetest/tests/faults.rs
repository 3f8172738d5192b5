//! Faults at start: each fails the start within 60 s with an error naming the component and
//! the last lines of its log, and leaves no process behind. Without the binaries these tests
//! fail under `CI` and skip elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::{Ipv4Addr, TcpListener};
use std::time::{Duration, Instant};

use captf_kubetest::{ControlPlane, DEFAULT_READY_TIMEOUT, Options, StartError, tools_or_skip};

use common::{TEST_READY_TIMEOUT, processes_mentioning};

/// The bound the harness promises for a failed start.
const FAIL_WITHIN: Duration = Duration::from_secs(60);

/// Starts with `opts` under a fresh folder and returns the error, the time it took, and what
/// was still running under the folder afterwards.
async fn failed_start(mut opts: Options) -> (StartError, Duration, Vec<(u32, String)>) {
    let parent = tempfile::tempdir().unwrap();
    opts.work_parent = Some(parent.path().to_path_buf());
    let began = Instant::now();
    let err = ControlPlane::start(opts).await.expect_err("the start should fail");
    let took = began.elapsed();
    (err, took, processes_mentioning(parent.path()))
}

#[tokio::test]
async fn a_port_in_use_fails_the_start_naming_the_api_server_and_its_log() {
    let Some(tools) = tools_or_skip() else { return };
    let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let mut opts = Options::new(tools);
    opts.apiserver_port = Some(taken.local_addr().unwrap().port());
    opts.ready_timeout = TEST_READY_TIMEOUT;
    let (err, took, left) = failed_start(opts).await;
    let msg = err.to_string();
    assert_eq!(err.component(), Some("kube-apiserver"), "{msg}");
    assert!(matches!(err, StartError::Exited { .. }), "{msg}");
    assert!(msg.contains("address already in use"), "{msg}");
    assert!(took < FAIL_WITHIN, "took {took:?}");
    assert_eq!(left, Vec::new());
}

#[tokio::test]
async fn an_etcd_that_dies_at_start_fails_it_naming_etcd_and_its_log() {
    let Some(tools) = tools_or_skip() else { return };
    let scratch = tempfile::tempdir().unwrap();
    // A data directory that is a file: etcd cannot open its store and exits.
    let not_a_dir = scratch.path().join("not-a-directory");
    std::fs::write(&not_a_dir, "").unwrap();
    let mut opts = Options::new(tools);
    opts.extra_etcd_args = vec![format!("--data-dir={}", not_a_dir.display())];
    opts.ready_timeout = TEST_READY_TIMEOUT;
    let (err, took, left) = failed_start(opts).await;
    let msg = err.to_string();
    assert_eq!(err.component(), Some("etcd"), "{msg}");
    assert!(matches!(err, StartError::Exited { .. }), "{msg}");
    assert!(
        msg.contains("not-a-directory"),
        "the log tail should say what etcd could not use: {msg}"
    );
    assert!(took < FAIL_WITHIN, "took {took:?}");
    assert_eq!(left, Vec::new());
}

#[tokio::test]
async fn an_api_server_whose_etcd_is_dead_fails_the_start_within_sixty_seconds_naming_it() {
    let Some(tools) = tools_or_skip() else { return };
    // Nothing listens here once the listener is closed: the API server's etcd is dead.
    let dead = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut opts = Options::new(tools);
    opts.etcd_servers = Some(format!("http://127.0.0.1:{dead}"));
    assert_eq!(opts.ready_timeout, DEFAULT_READY_TIMEOUT);
    let (err, took, left) = failed_start(opts).await;
    let msg = err.to_string();
    assert_eq!(err.component(), Some("kube-apiserver"), "{msg}");
    // kube-apiserver v1.36 gives up on its storage after 20 s and exits; were it to wait
    // longer, the harness's default timeout would end the start instead.
    assert!(
        matches!(err, StartError::Exited { .. } | StartError::NotReady { .. }),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("127.0.0.1:{dead}")),
        "the log tail should name the etcd it could not reach: {msg}"
    );
    assert!(took < FAIL_WITHIN, "took {took:?}");
    assert_eq!(left, Vec::new());
}

#[tokio::test]
async fn an_api_server_that_runs_but_never_gets_ready_fails_the_start_at_the_timeout() {
    let Some(tools) = tools_or_skip() else { return };
    // An "etcd" that takes connections and never answers: the API server keeps waiting for its
    // storage, alive and not ready, until it gives up 20 s later; the timeout comes first.
    let silent = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = silent.local_addr().unwrap().port();
    let mut opts = Options::new(tools);
    opts.etcd_servers = Some(format!("http://127.0.0.1:{port}"));
    opts.ready_timeout = Duration::from_secs(8);
    let (err, took, left) = failed_start(opts).await;
    let msg = err.to_string();
    assert_eq!(err.component(), Some("kube-apiserver"), "{msg}");
    match &err {
        StartError::NotReady { waited, log_tail, .. } => {
            assert!(*waited >= Duration::from_secs(8), "{waited:?}");
            assert!(!log_tail.is_empty(), "{msg}");
        }
        other => panic!("expected NotReady: {other}"),
    }
    assert!(took < FAIL_WITHIN, "took {took:?}");
    assert_eq!(left, Vec::new());
    drop(silent);
}

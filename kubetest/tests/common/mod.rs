//! What the harness's tests share: finding the processes a start left behind.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, PostParams};

pub mod chart;
pub mod clusterctl;
pub mod people;
pub mod upgrade;
pub mod webhook;

/// The start timeout the tests give a control plane that should come up: wider than the
/// default, because the tests share two cores with everything else the suite runs.
pub const TEST_READY_TIMEOUT: Duration = Duration::from_secs(180);

/// A real control plane started with [`TEST_READY_TIMEOUT`], its admin client, and the
/// namespace `ns` made; `None` when the binaries are missing outside `CI` (`tools_or_skip`).
pub async fn control_plane_with_namespace(ns: &str) -> Option<(captf_kubetest::ControlPlane, kube::Client)> {
    let tools = captf_kubetest::tools_or_skip()?;
    let mut opts = captf_kubetest::Options::new(tools);
    opts.ready_timeout = TEST_READY_TIMEOUT;
    let cp = captf_kubetest::ControlPlane::start(opts).await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    namespace(&admin, ns).await;
    Some((cp, admin))
}

/// The live processes (not zombies, not this test) whose command line mentions `dir`: every
/// component's arguments name a file in its control plane's folder, so this is what a start
/// under `dir` left running.
pub fn processes_mentioning(dir: &Path) -> Vec<(u32, String)> {
    let needle = dir.display().to_string();
    let me = std::process::id();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) {
            found.push((pid, cmdline));
        }
    }
    found
}

/// Polls `probe` every 200 ms until it returns Some; fails the test after `patience`.
pub async fn wait_within<T, F, Fut>(what: &str, patience: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + patience;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {patience:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A TCP port free on every address of this machine now (the process kubelet's pods and the
/// managers the tests start listen on the host's network), never one given out before.
pub fn free_port() -> u16 {
    captf_kubetest::ports::free_port().unwrap()
}

/// The output (both streams) of a command that must succeed; fails the test with it otherwise.
pub fn run_ok(cmd: &mut std::process::Command) -> String {
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

/// Creates the Namespace `name` as `client`.
pub async fn namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(serde_json::json!({ "metadata": { "name": name } })).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// The workspace's `captf-controller` binary, built by `cargo test --workspace`, beside this
/// test's own executable.
pub fn controller_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let path = dir.join("captf-controller");
    assert!(
        path.is_file(),
        "captf-controller not found at {}: build it with `cargo build -p captf-controller` (cargo test --workspace does)",
        path.display()
    );
    path
}

/// The workspace's controller started as `captf-controller run <flags>` under `kubeconfig`, with
/// `env` set, stdout and stderr in the file `log`; killed when dropped.
pub fn spawn_controller(kubeconfig: &Path, log: &Path, flags: &[&str], env: &[(&str, &str)]) -> tokio::process::Child {
    let log = std::fs::File::create(log).unwrap();
    tokio::process::Command::new(controller_binary())
        .arg("run")
        .args(flags)
        .env("KUBECONFIG", kubeconfig)
        .envs(env.iter().copied())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// The TerraformCluster resource, as the types crate declares it.
pub fn terraform_clusters() -> ApiResource {
    ApiResource::erase::<captf_shared::types::TerraformCluster>(&())
}

//! Scale on the real control plane, a measurement that prints figures and asserts no timing:
//! N TerraformClusters created through the real webhook (registered as the chart registers it),
//! reconciled by the real `captf-controller` binary under the chart's RBAC and admission policy,
//! their apply Jobs run by the real Job controller and the process kubelet, until every one is
//! `Ready=True`. Printed beside the controller's CPU seconds and memory (VmRSS, VmHWM from
//! `/proc/<pid>/status`): kube-apiserver's, etcd's, kube-controller-manager's and the webhook's;
//! the time to all Ready; the API server's requests (`apiserver_request_total` from its
//! `/metrics`) per object, and the controller's own (its ServiceAccount's flow schema,
//! `service-accounts`, in `apiserver_flowcontrol_dispatched_requests_total`).
//!
//! ```text
//! scripts/bench-real-cp.sh 1000
//! ```
//! builds the controller and the webhook in release and runs [`measure`] (ignored by a plain
//! `cargo test`) from a release build of this test, so every binary found beside it is a release
//! build. The runner is a **stand-in** by default: an image the process kubelet maps to a
//! two-line shell script that writes a `succeeded` apply result with a `control_plane_endpoint`
//! output to the termination log (the runner protocol, docs/runner.md) and exits 0, so what is
//! measured is the control plane and the controller, not OpenTofu. `CAPTF_REAL_SCALE_RUNNER=tofu`
//! runs the real runner with real OpenTofu and the test provider instead (as `full_path.rs`
//! does; it needs `cargo build -p captf-runner -p captf-testprovider`), for a time per Job;
//! `terraform`, the same with Terraform 1.0.3.
//!
//! Knobs (env): `CAPTF_REAL_SCALE_OBJECTS` (N, 1000), `CAPTF_REAL_SCALE_NAMESPACES` (the objects
//! are spread over this many namespaces, 1), `CAPTF_REAL_SCALE_RUNNER` (`standin`, `tofu` or
//! `terraform`),
//! `CAPTF_REAL_SCALE_SLOTS` (the controller's `--max-running-jobs-per-namespace`, 0: no limit),
//! `CAPTF_REAL_SCALE_CONCURRENCY` (its `--concurrency`, 8), `CAPTF_REAL_SCALE_CREATORS` (creates
//! in flight, 16), `CAPTF_REAL_SCALE_KUBELET_SYNC_MS` (how often the process kubelet lists the
//! pods, 1000), `CAPTF_REAL_SCALE_TIMEOUT` (seconds to all Ready, 1800); `RUST_LOG` sets the
//! controller's log level (default warn).
//!
//! [`a_few_objects_reach_ready_on_the_real_control_plane_with_every_figure_sampled`] runs the same
//! code with 30 objects in two namespaces under `cargo test`, asserting that every object got
//! Ready through one Job and that each figure was sampled, so the measurement cannot rot.
//! Without the binaries or root it fails under `CI` and skips elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use captf_chart_tests::NAMESPACE;
use captf_kubetest::{ControlPlane, Options, tools_or_skip};
use captf_shared::Op;
use captf_shared::protocol::{Phase, RunResult, RunnerResult};
use captf_sim::ProcessImage;
use captf_testprovider::harness::{Binary, DEFAULT_TOFU};
use futures::StreamExt as _;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use common::chart::{CONTROLLER, crds, install_controller_rights};
use common::{TEST_READY_TIMEOUT, wait_within};

const NODE: &str = "scale";
/// The runner image the controller names, mapped by the kubelet to the stand-in or the runner.
const RUNNER_IMAGE: &str = "ghcr.io/captf/runner:scale";
/// Where the stand-in's script is inside its container.
const STANDIN_INSIDE: &str = "/image/bin/standin-runner";
/// The runner's user (the controller's pods run as it, read-only root).
const RUNNER_USER: (u32, u32) = (65532, 65532);
/// What a TerraformCluster's endpoint comes from.
const ENDPOINT_OUTPUT: &str = "control_plane_endpoint";
/// How long the figures are sampled again after all are Ready: the cost of an idle steady state.
const SETTLE: Duration = Duration::from_secs(10);
/// The API server's flow schema of every ServiceAccount outside kube-system: here the
/// controller's (the stand-in runner makes no request; the real runner's pods would count too).
const CONTROLLER_FLOW_SCHEMA: &str = "service-accounts";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Runner {
    /// A shell script that writes a succeeded apply result and exits 0.
    StandIn,
    /// The real runner with this binary (OpenTofu, or Terraform 1.0.3) and the test provider,
    /// with the smallest module.
    Real(Binary),
}

#[derive(Clone, Debug)]
struct Config {
    objects: usize,
    namespaces: usize,
    runner: Runner,
    /// `--max-running-jobs-per-namespace` (0: no limit).
    slots: u32,
    concurrency: u16,
    creators: usize,
    kubelet_sync: Duration,
    timeout: Duration,
}

impl Config {
    fn from_env(objects: usize, namespaces: usize) -> Config {
        let runner = match std::env::var("CAPTF_REAL_SCALE_RUNNER").as_deref() {
            Ok("tofu") => Runner::Real(DEFAULT_TOFU),
            Ok("terraform") => Runner::Real(Binary::Terraform),
            Ok("" | "standin") | Err(_) => Runner::StandIn,
            Ok(other) => panic!("CAPTF_REAL_SCALE_RUNNER={other}: standin, tofu or terraform"),
        };
        Config {
            objects: env_or("CAPTF_REAL_SCALE_OBJECTS", objects as u64) as usize,
            namespaces: (env_or("CAPTF_REAL_SCALE_NAMESPACES", namespaces as u64) as usize).max(1),
            runner,
            slots: env_or("CAPTF_REAL_SCALE_SLOTS", 0) as u32,
            concurrency: env_or("CAPTF_REAL_SCALE_CONCURRENCY", 8) as u16,
            creators: (env_or("CAPTF_REAL_SCALE_CREATORS", 16) as usize).max(1),
            kubelet_sync: Duration::from_millis(env_or("CAPTF_REAL_SCALE_KUBELET_SYNC_MS", 1000)),
            timeout: Duration::from_secs(env_or("CAPTF_REAL_SCALE_TIMEOUT", 1800)),
        }
    }
}

// ---- the processes' figures ----

use captf_testsupport::proc_stats::{cpu_seconds, memory_mib};

/// One process measured: its CPU seconds so far (its own and its reaped children's) and its
/// memory now.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    cpu: f64,
    children_cpu: f64,
    rss: f64,
    hwm: f64,
}

fn usage(pid: &str) -> Usage {
    let (cpu, children_cpu) = cpu_seconds(pid).unwrap_or_default();
    let (rss, hwm) = memory_mib(pid).unwrap_or_default();
    Usage {
        cpu,
        children_cpu,
        rss,
        hwm,
    }
}

/// The processes measured, by name, in print order.
struct Processes(Vec<(&'static str, String)>);

impl Processes {
    fn sample(&self) -> BTreeMap<&'static str, Usage> {
        self.0.iter().map(|(name, pid)| (*name, usage(pid))).collect()
    }
}

/// The harness itself: the process kubelet, the creates and the polls; its reaped children are
/// the runner containers (and their set-up).
const HARNESS: &str = "harness";
const COMPONENTS: [&str; 3] = ["kube-apiserver", "etcd", "kube-controller-manager"];

// ---- metrics ----

/// One sample of a Prometheus text exposition.
#[derive(Clone, Debug, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn parse_sample(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let split = line.find(['{', ' '])?;
    let name = line[..split].to_string();
    let mut labels = BTreeMap::new();
    let mut rest = &line[split..];
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices();
        let mut key = String::new();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '}' => break i,
                ',' | ' ' => {}
                '=' => {
                    if chars.next()?.1 != '"' {
                        return None;
                    }
                    let mut value = String::new();
                    loop {
                        match chars.next()?.1 {
                            '\\' => match chars.next()?.1 {
                                'n' => value.push('\n'),
                                c => value.push(c),
                            },
                            '"' => break,
                            c => value.push(c),
                        }
                    }
                    labels.insert(std::mem::take(&mut key), value);
                }
                c => key.push(c),
            }
        };
        rest = &body[end + 1..];
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample { name, labels, value })
}

#[derive(Clone, Debug, Default)]
struct Scrape(Vec<Sample>);

impl Scrape {
    fn parse(text: &str) -> Scrape {
        Scrape(text.lines().filter_map(parse_sample).collect())
    }

    /// The sum of `name`'s samples, grouped by the values of `keys` (a missing label is empty).
    fn by(&self, name: &str, keys: &[&str]) -> BTreeMap<Vec<String>, f64> {
        let mut out = BTreeMap::new();
        for s in self.0.iter().filter(|s| s.name == name) {
            let group = keys
                .iter()
                .map(|k| s.labels.get(*k).cloned().unwrap_or_default())
                .collect();
            *out.entry(group).or_insert(0.0) += s.value;
        }
        out
    }

    fn sum(&self, name: &str) -> f64 {
        self.by(name, &[]).values().sum()
    }

    fn value(&self, name: &str) -> Option<f64> {
        self.0.iter().find(|s| s.name == name).map(|s| s.value)
    }
}

/// `after - before` of each group, largest first, without the groups that did not grow.
fn grown(before: &BTreeMap<Vec<String>, f64>, after: &BTreeMap<Vec<String>, f64>) -> Vec<(Vec<String>, f64)> {
    let mut out: Vec<(Vec<String>, f64)> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// The API server's `/metrics`, as the admin.
async fn apiserver_metrics(admin: &kube::Client) -> Scrape {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    Scrape::parse(&admin.request_text(request).await.unwrap_or_default())
}

/// `GET path` over plain HTTP/1.0 from `host:port`: the status code and the body.
async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
        .await
        .ok()?
        .ok()?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

async fn plain_metrics(addr: &str) -> Scrape {
    match http_get(addr, "/metrics").await {
        Some((200, body)) => Scrape::parse(&body),
        _ => Scrape::default(),
    }
}

// ---- the objects ----

fn ready_condition(o: &Value) -> Option<&Value> {
    o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn is_ready(o: &Value) -> bool {
    ready_condition(o).is_some()
}

/// When the object turned Ready (whole seconds).
fn ready_since(o: &Value) -> Option<i64> {
    seconds(ready_condition(o)?["lastTransitionTime"].as_str()?)
}

fn seconds(t: &str) -> Option<i64> {
    t.parse::<k8s_openapi::jiff::Timestamp>().ok().map(|t| t.as_second())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The stand-in runner: a script that writes a succeeded apply result with the cluster's
/// endpoint to the termination log, as the runner does, and exits 0.
fn standin_image(dir: &Path) -> ProcessImage {
    let mut result = RunnerResult::new(RunResult::Succeeded, Phase::Apply, "stand-in runner: no OpenTofu ran");
    result.outputs = Some(BTreeMap::from([(
        ENDPOINT_OUTPUT.to_string(),
        json!({"host": "10.0.0.1", "port": 6443}),
    )]));
    let message = result.to_termination_message();
    assert!(!message.contains('\''), "{message}");
    let script = dir.join("standin-runner");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nprintf '%s' '{message}' > /dev/termination-log\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    ProcessImage::new(STANDIN_INSIDE)
        .file(STANDIN_INSIDE, script)
        .user(RUNNER_USER.0, RUNNER_USER.1)
        .working_dir("/tmp")
}

/// What a run measured, for the short test's assertions.
#[derive(Debug, Default)]
struct Figures {
    ready: usize,
    jobs: usize,
    /// Per process: CPU seconds from the first create to all Ready, and memory at the end.
    during: BTreeMap<&'static str, Usage>,
    requests: f64,
    controller_requests: f64,
    /// Objects whose way to Ready was timed through their Job, and pods through their stages.
    timed_objects: usize,
    timed_pods: usize,
}

fn print_table(rows: &[(&str, Usage, f64)], wall: f64) {
    println!(
        "  {:<26} {:>10} {:>9} {:>12} {:>10} {:>10}",
        "process", "CPU s run", "% of run", "CPU s idle", "VmRSS MiB", "VmHWM MiB"
    );
    for (name, u, idle) in rows {
        println!(
            "  {:<26} {:>10.1} {:>8.0}% {:>12.2} {:>10.1} {:>10.1}",
            name,
            u.cpu,
            100.0 * u.cpu / wall.max(0.001),
            idle,
            u.rss,
            u.hwm
        );
    }
}

/// The whole measurement; `None` when the machine cannot run it (skipped, or failed under CI).
async fn run(cfg: &Config) -> Option<Figures> {
    let tools = tools_or_skip()?;
    if let Some(why) = captf_sim::process_kubelet::namespaces_unavailable() {
        captf_testsupport::cannot_run(format!("{why}; the process kubelet needs root for its containers"));
        return None;
    }
    let controller_bin = common::controller_binary();
    let files = tempfile::tempdir().unwrap();
    // The runner: its image and the module the objects name (kept alive for the run).
    let mut keep: Vec<Box<dyn std::any::Any>> = Vec::new();
    let (image, module_source, runner_said) = match cfg.runner {
        Runner::StandIn => (
            standin_image(files.path()),
            "git::https://example.com/net.git".to_string(),
            "stand-in (a shell script writes a succeeded apply result with control_plane_endpoint to the termination log and exits 0; no OpenTofu)".to_string(),
        ),
        Runner::Real(binary) => {
            use captf_testprovider::runner_image::{ModuleServer, THING_MODULE, runner_image_with, tar_gz};
            let image = match runner_image_with(files.path(), binary) {
                Ok(image) => image,
                Err(e) => {
                    captf_testsupport::cannot_run(format!("the runner's image cannot be assembled: {e}"));
                    return None;
                }
            };
            let archive = tar_gz(&files.path().join("module"), THING_MODULE).unwrap();
            let modules = ModuleServer::start(vec![("cluster.tar.gz".into(), archive)])
                .await
                .unwrap();
            let source = modules.url("cluster.tar.gz");
            let process_image = image.image.clone();
            let said = format!(
                "real (captf-runner, {} and the test provider; a module of one resource)",
                image.describe()
            );
            keep.push(Box::new(modules));
            keep.push(Box::new(image));
            (process_image, source, said)
        }
    };

    let mut opts = Options::new(tools);
    opts.ready_timeout = TEST_READY_TIMEOUT;
    let cp = ControlPlane::start(opts).await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut kubelet_opts = cp.kubelet_options(NODE, root.path()).image(RUNNER_IMAGE, image);
    kubelet_opts.sync_every = cfg.kubelet_sync;
    let kubelet = cp.start_kubelet(kubelet_opts).await.unwrap();
    crds(&admin).await;
    install_controller_rights(&cp, &admin).await;
    let namespaces: Vec<String> = (0..cfg.namespaces).map(|i| format!("scale-{i}")).collect();
    for ns in &namespaces {
        common::namespace(&admin, ns).await;
    }
    let webhook = common::webhook::start_webhook(cp.work_dir());
    common::webhook::register(&admin, &webhook).await;
    let webhook_pid = webhook.pid();

    let kubeconfig = cp.service_account_kubeconfig(NAMESPACE, CONTROLLER).await.unwrap();
    let metrics_addr = format!("127.0.0.1:{}", common::free_port());
    let health_addr = format!("127.0.0.1:{}", common::free_port());
    let log_path = cp.work_dir().join("captf-controller.log");
    let flags = [
        format!("--namespace={}", namespaces.join(",")),
        format!("--runner-image={RUNNER_IMAGE}"),
        format!("--metrics-addr={metrics_addr}"),
        format!("--health-addr={health_addr}"),
        "--log-format=text".to_string(),
        format!("--concurrency={}", cfg.concurrency),
        format!("--max-running-jobs-per-namespace={}", cfg.slots),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let rust_log = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());
    let controller = common::spawn_controller(
        &kubeconfig,
        &log_path,
        &flags,
        &[("POD_NAMESPACE", NAMESPACE), ("RUST_LOG", rust_log.as_str())],
    );
    let controller_pid = controller.id().unwrap();
    wait_within("the controller ready", Duration::from_secs(120), || {
        let health = health_addr.clone();
        async move { matches!(http_get(&health, "/readyz").await, Some((200, _))).then_some(()) }
    })
    .await;

    let mut procs: Vec<(&'static str, String)> = Vec::new();
    for name in COMPONENTS {
        let pid = cp.pids().into_iter().find(|(n, _)| *n == name).unwrap().1;
        procs.push((name, pid.to_string()));
    }
    procs.push(("captf-controller", controller_pid.to_string()));
    procs.push(("captf-webhook", webhook_pid.to_string()));
    procs.push((HARNESS, "self".to_string()));
    let procs = Processes(procs);

    let profile = controller_bin
        .parent()
        .and_then(Path::file_name)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let harness_profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    println!(
        "real control plane scale: N={} TerraformClusters in {} namespace(s) ({}), {} CPUs, load average {}",
        cfg.objects,
        namespaces.len(),
        namespaces.join(", "),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    );
    println!("  runner: {runner_said}");
    println!(
        "  controller: {} ({profile} build), --concurrency {}, --max-running-jobs-per-namespace {}{}; harness and process kubelet: {harness_profile} build, the kubelet lists every pod each {} ms (a real kubelet watches)",
        controller_bin.display(),
        cfg.concurrency,
        cfg.slots,
        if cfg.slots == 0 { " (no limit)" } else { "" },
        cfg.kubelet_sync.as_millis()
    );

    // ---- create N objects, wait for every one Ready ----
    let before = procs.sample();
    let metrics_before = apiserver_metrics(&admin).await;
    let controller_before = plain_metrics(&metrics_addr).await;
    let started_wall = k8s_openapi::jiff::Timestamp::now().as_second();
    let t0 = Instant::now();
    let creates = futures::stream::iter(0..cfg.objects)
        .map(|i| {
            let ns = namespaces[i % namespaces.len()].clone();
            let admin = admin.clone();
            let module_source = module_source.clone();
            async move {
                let api: Api<DynamicObject> = Api::namespaced_with(admin, &ns, &common::terraform_clusters());
                let object: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
                    "metadata": { "name": format!("c{i}"), "namespace": ns },
                    "spec": {
                        "module": { "source": module_source },
                        "variables": { "name": format!("t{i}"), "content": "one" },
                        "drift": { "interval": "0" },
                    },
                }))
                .unwrap();
                api.create(&PostParams::default(), &object).await.map(drop)
            }
        })
        .buffer_unordered(cfg.creators)
        .collect::<Vec<_>>()
        .await;
    let created = t0.elapsed();
    let failed: Vec<String> = creates
        .iter()
        .filter_map(|r| r.as_ref().err().map(ToString::to_string))
        .collect();
    assert!(
        failed.is_empty(),
        "{} creates failed, the first: {}",
        failed.len(),
        failed[0]
    );

    let poll = if cfg.objects > 100 {
        Duration::from_secs(2)
    } else {
        Duration::from_millis(500)
    };
    let mut last: Vec<Value>;
    loop {
        last = list_all(&admin, &namespaces).await;
        let ready = last.iter().filter(|o| is_ready(o)).count();
        if ready >= cfg.objects {
            break;
        }
        if t0.elapsed() > cfg.timeout {
            let stuck = last.iter().find(|o| !is_ready(o));
            panic!(
                "{ready} of {} objects Ready after {:?}; one that is not: {}\ncontroller log (end):\n{}",
                cfg.objects,
                cfg.timeout,
                stuck.map(|o| o["status"].to_string()).unwrap_or_default(),
                captf_kubetest::process::log_tail(&log_path)
            );
        }
        tokio::time::sleep(poll).await;
    }
    let seen_ready = t0.elapsed();
    let after = procs.sample();
    let metrics_after = apiserver_metrics(&admin).await;
    let controller_after = plain_metrics(&metrics_addr).await;
    let wall = seen_ready.as_secs_f64();

    // Per object, creation → Ready (whole seconds, as the API stores them).
    let mut to_ready: Vec<f64> = last
        .iter()
        .filter_map(|o| {
            let created = seconds(o["metadata"]["creationTimestamp"].as_str()?)?;
            Some((ready_since(o)? - created) as f64)
        })
        .collect();
    to_ready.sort_by(f64::total_cmp);
    let last_ready = last.iter().filter_map(ready_since).max().unwrap_or(started_wall);
    let jobs = list_jobs(&admin, &namespaces).await;
    let mut job_seconds: Vec<f64> = jobs
        .iter()
        .filter_map(|j| {
            let s = j.status.as_ref()?;
            Some((s.completion_time.as_ref()?.0.as_second() - s.start_time.as_ref()?.0.as_second()) as f64)
        })
        .collect();
    job_seconds.sort_by(f64::total_cmp);
    // Where a Job's time went: its pod waiting to be bound, then to be started (the process
    // kubelet starts one pod at a time), then running.
    let pods = list_pods(&admin, &namespaces).await;
    let stages: Vec<[f64; 3]> = pods.iter().filter_map(pod_stages).collect();
    let stage = |i: usize| {
        let mut v: Vec<f64> = stages.iter().map(|s| s[i]).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    // And before and after it: the object created → its apply Job created (the controller's
    // set-up: finalizer, account, Role, inputs Secret), the Job complete → the object Ready.
    let job_by_name: BTreeMap<(String, String), &Job> = jobs
        .iter()
        .filter_map(|j| Some(((j.metadata.namespace.clone()?, j.metadata.name.clone()?), j)))
        .collect();
    let mut to_job = Vec::new();
    let mut job_to_ready = Vec::new();
    for o in &last {
        let (Some(ns), Some(name)) = (o["metadata"]["namespace"].as_str(), o["metadata"]["name"].as_str()) else {
            continue;
        };
        let job_name = captf_shared::names::job_name(captf_shared::Kind::TerraformCluster, ns, name, Op::Apply, 1);
        let Some(job) = job_by_name.get(&(ns.to_string(), job_name)) else {
            continue;
        };
        let created = o["metadata"]["creationTimestamp"].as_str().and_then(seconds);
        let job_created = job.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second());
        if let (Some(c), Some(j)) = (created, job_created) {
            to_job.push((j - c) as f64);
        }
        let completed = job
            .status
            .as_ref()
            .and_then(|s| s.completion_time.as_ref())
            .map(|t| t.0.as_second());
        if let (Some(done), Some(ready)) = (completed, ready_since(o)) {
            job_to_ready.push((ready - done) as f64);
        }
    }
    to_job.sort_by(f64::total_cmp);
    job_to_ready.sort_by(f64::total_cmp);
    let endpoints_set = last
        .iter()
        .filter(|o| o["spec"]["controlPlaneEndpoint"]["port"] == 6443)
        .count();

    // ---- idle: the same figures over a quiet moment ----
    tokio::time::sleep(SETTLE).await;
    let settled = procs.sample();
    let jobs_later = list_jobs(&admin, &namespaces).await.len();

    println!(
        "created {} objects in {:.1}s ({} creates in flight, as the admin, through the webhook); all Ready {:.1}s after the first create (the last Ready transition at +{}s; seen by a poll every {:.1}s)",
        cfg.objects,
        created.as_secs_f64(),
        cfg.creators,
        wall,
        last_ready - started_wall,
        poll.as_secs_f64()
    );
    println!(
        "  per object, creation → Ready: p50 {:.0}s, p90 {:.0}s, max {:.0}s; Job run time (start → completion): p50 {:.0}s, p90 {:.0}s, max {:.0}s; {} of {} objects with the endpoint from the outputs",
        percentile(&to_ready, 0.5),
        percentile(&to_ready, 0.9),
        to_ready.last().copied().unwrap_or_default(),
        percentile(&job_seconds, 0.5),
        percentile(&job_seconds, 0.9),
        job_seconds.last().copied().unwrap_or_default(),
        endpoints_set,
        cfg.objects
    );
    println!(
        "  object created → its apply Job created: p50 {:.0}s, p90 {:.0}s, max {:.0}s; Job complete → object Ready: p50 {:.0}s, p90 {:.0}s, max {:.0}s",
        percentile(&to_job, 0.5),
        percentile(&to_job, 0.9),
        to_job.last().copied().unwrap_or_default(),
        percentile(&job_to_ready, 0.5),
        percentile(&job_to_ready, 0.9),
        job_to_ready.last().copied().unwrap_or_default()
    );
    for (i, what) in [
        "created → bound to the node",
        "bound → container started",
        "container started → ended",
    ]
    .into_iter()
    .enumerate()
    {
        let v = stage(i);
        println!(
            "  runner pods ({} of them), {what}: p50 {:.0}s, p90 {:.0}s, max {:.0}s",
            v.len(),
            percentile(&v, 0.5),
            percentile(&v, 0.9),
            v.last().copied().unwrap_or_default()
        );
    }
    println!(
        "  Jobs: {} at all Ready, {} after {}s more (steady: {})",
        jobs.len(),
        jobs_later,
        SETTLE.as_secs(),
        jobs_later == jobs.len()
    );

    let mut during = BTreeMap::new();
    let mut rows = Vec::new();
    for (name, _) in &procs.0 {
        let (b, a, s) = (before[name], after[name], settled[name]);
        let u = Usage {
            cpu: a.cpu - b.cpu,
            children_cpu: a.children_cpu - b.children_cpu,
            rss: a.rss,
            hwm: a.hwm,
        };
        during.insert(*name, u);
        let label = if *name == HARNESS {
            "harness (kubelet, creates)"
        } else {
            name
        };
        rows.push((label, u, s.cpu - a.cpu));
        if *name == HARNESS {
            rows.push((
                "  its reaped children",
                Usage {
                    cpu: u.children_cpu,
                    ..Usage::default()
                },
                s.children_cpu - a.children_cpu,
            ));
        }
    }
    println!(
        "CPU seconds from the first create to all Ready ({wall:.1}s wall), then over {}s idle; memory at all Ready (VmHWM: the peak since the process started):",
        SETTLE.as_secs()
    );
    print_table(&rows, wall);

    // ---- requests ----
    let n = cfg.objects.max(1) as f64;
    let total = metrics_after.sum("apiserver_request_total") - metrics_before.sum("apiserver_request_total");
    let by_schema = grown(
        &metrics_before.by("apiserver_flowcontrol_dispatched_requests_total", &["flow_schema"]),
        &metrics_after.by("apiserver_flowcontrol_dispatched_requests_total", &["flow_schema"]),
    );
    let controller_requests = by_schema
        .iter()
        .find(|(k, _)| k[0] == CONTROLLER_FLOW_SCHEMA)
        .map_or(0.0, |(_, v)| *v);
    println!(
        "API server requests from the first create to all Ready (apiserver_request_total): {total:.0}, {:.1} per object",
        total / n
    );
    println!(
        "  by flow schema (apiserver_flowcontrol_dispatched_requests_total): {}",
        by_schema
            .iter()
            .map(|(k, v)| format!("{} {v:.0} ({:.1}/object)", k[0], v / n))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let whose = match cfg.runner {
        Runner::StandIn => "the controller's",
        Runner::Real(_) => "the controller's and the runner pods' (the state backend)",
    };
    println!(
        "  {whose} (flow schema {CONTROLLER_FLOW_SCHEMA}): {controller_requests:.0}, {:.1} per object; exempt is the admin (the harness's creates and polls, the process kubelet), kube-system-service-accounts and kube-controller-manager are kube-controller-manager's",
        controller_requests / n
    );
    let by_verb = grown(
        &metrics_before.by("apiserver_request_total", &["verb", "resource", "subresource"]),
        &metrics_after.by("apiserver_request_total", &["verb", "resource", "subresource"]),
    );
    println!(
        "  by verb and resource (top 12): {}",
        by_verb
            .iter()
            .take(12)
            .map(|(k, v)| {
                let resource = if k[2].is_empty() {
                    k[1].clone()
                } else {
                    format!("{}/{}", k[1], k[2])
                };
                format!("{} {resource} {v:.0}", k[0])
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    let reconciles = controller_after.sum("captf_reconcile_duration_seconds_count")
        - controller_before.sum("captf_reconcile_duration_seconds_count");
    let reconcile_errors =
        controller_after.sum("captf_reconcile_errors_total") - controller_before.sum("captf_reconcile_errors_total");
    println!(
        "controller: {reconciles:.0} reconcile passes ({:.1} per object), {reconcile_errors:.0} failed",
        reconciles / n
    );
    if let Some(url) = cp.etcd_client_url() {
        let etcd = plain_metrics(url.trim_start_matches("http://")).await;
        let mib = |name: &str| etcd.value(name).unwrap_or_default() / (1024.0 * 1024.0);
        println!(
            "etcd: database {:.1} MiB ({:.1} MiB in use), {:.0} keys",
            mib("etcd_mvcc_db_total_size_in_bytes"),
            mib("etcd_mvcc_db_total_size_in_use_in_bytes"),
            etcd.value("etcd_debugging_mvcc_keys_total").unwrap_or_default()
        );
    }
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    println!("controller log: {} WARN/ERROR lines", warnings.len());
    if let Some(first) = warnings.first() {
        println!("  first: {}", first.chars().take(300).collect::<String>());
    }
    println!("load average at the end: {}", loadavg());

    let figures = Figures {
        ready: last.iter().filter(|o| is_ready(o)).count(),
        jobs: jobs.len(),
        during,
        requests: total,
        controller_requests,
        timed_objects: job_to_ready.len().min(to_job.len()),
        timed_pods: stages.len(),
    };
    drop(controller);
    drop(webhook);
    drop(kubelet);
    drop(cp);
    drop(keep);
    Some(figures)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

async fn list_all(admin: &kube::Client, namespaces: &[String]) -> Vec<Value> {
    let mut out = Vec::new();
    for ns in namespaces {
        let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), ns, &common::terraform_clusters());
        if let Ok(list) = api.list(&ListParams::default()).await {
            out.extend(list.items.into_iter().map(|o| serde_json::to_value(o).unwrap()));
        }
    }
    out
}

async fn list_pods(admin: &kube::Client, namespaces: &[String]) -> Vec<Pod> {
    let mut out = Vec::new();
    for ns in namespaces {
        let api: Api<Pod> = Api::namespaced(admin.clone(), ns);
        out.extend(api.list(&ListParams::default()).await.unwrap().items);
    }
    out
}

/// A finished pod's seconds from creation to bound (`PodScheduled`), from bound to its
/// container's start, and from its start to its end.
fn pod_stages(pod: &Pod) -> Option<[f64; 3]> {
    let created = pod.metadata.creation_timestamp.as_ref()?.0.as_second();
    let status = pod.status.as_ref()?;
    let bound = status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "True")?
        .last_transition_time
        .as_ref()?
        .0
        .as_second();
    let ended = status
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .terminated
        .as_ref()?;
    let started = ended.started_at.as_ref()?.0.as_second();
    let finished = ended.finished_at.as_ref()?.0.as_second();
    Some([
        (bound - created) as f64,
        (started - bound) as f64,
        (finished - started) as f64,
    ])
}

async fn list_jobs(admin: &kube::Client, namespaces: &[String]) -> Vec<Job> {
    let mut out = Vec::new();
    for ns in namespaces {
        let api: Api<Job> = Api::namespaced(admin.clone(), ns);
        out.extend(api.list(&ListParams::default()).await.unwrap().items);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_few_objects_reach_ready_on_the_real_control_plane_with_every_figure_sampled() {
    let mut cfg = Config::from_env(30, 2);
    // The short run's own size, whatever the measurement's knobs say.
    cfg.objects = 30;
    cfg.namespaces = 2;
    cfg.runner = Runner::StandIn;
    cfg.kubelet_sync = Duration::from_millis(200);
    cfg.timeout = Duration::from_secs(90);
    let Some(f) = run(&cfg).await else { return };
    assert_eq!(f.ready, cfg.objects, "{f:?}");
    assert_eq!(f.jobs, cfg.objects, "one apply Job per object: {f:?}");
    for name in ["kube-apiserver", "etcd", "kube-controller-manager", "captf-controller"] {
        let u = f.during[name];
        assert!(u.rss > 0.0 && u.hwm >= u.rss, "{name}'s memory not sampled: {u:?}");
    }
    for name in ["kube-apiserver", "etcd", "captf-controller"] {
        assert!(
            f.during[name].cpu > 0.0,
            "{name}'s CPU not sampled: {:?}",
            f.during[name]
        );
    }
    assert!(f.requests >= cfg.objects as f64, "{f:?}");
    assert!(
        f.controller_requests > 0.0,
        "the controller's requests not counted: {f:?}"
    );
    assert_eq!((f.timed_objects, f.timed_pods), (cfg.objects, cfg.objects), "{f:?}");
}

/// The measurement: `scripts/bench-real-cp.sh [N]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement of minutes: scripts/bench-real-cp.sh [N]"]
async fn measure() {
    let cfg = Config::from_env(1000, 1);
    run(&cfg).await;
}

#[test]
fn a_metrics_line_parses_with_its_labels_and_value() {
    let s = parse_sample(r#"apiserver_request_total{code="201",resource="pods",subresource="binding",verb="POST"} 42"#)
        .unwrap();
    assert_eq!(s.name, "apiserver_request_total");
    assert_eq!(s.labels["subresource"], "binding");
    assert_eq!(s.value, 42.0);
    let s = parse_sample(r#"x{a="q\"u,o}te",b=""} 1.5e3"#).unwrap();
    assert_eq!(s.labels["a"], "q\"u,o}te");
    assert_eq!(s.labels["b"], "");
    assert_eq!(s.value, 1500.0);
    assert_eq!(
        parse_sample("etcd_mvcc_db_total_size_in_bytes 4.194304e+06")
            .unwrap()
            .value,
        4194304.0
    );
    assert_eq!(parse_sample("# HELP x y"), None);
    let scrape = Scrape::parse("m{k=\"a\"} 1\nm{k=\"b\"} 2\nm{k=\"a\"} 3\n");
    assert_eq!(scrape.by("m", &["k"])[&vec!["a".to_string()]], 4.0);
    assert_eq!(scrape.sum("m"), 6.0);
}

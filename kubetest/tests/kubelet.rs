//! The process kubelet on the real control plane: the real Job controller's pods are bound to
//! the kubelet's Node and run as real processes; their status, deletion with its grace period
//! and eviction are what a user of a real cluster sees. Without the binaries, or without root for
//! the containers' namespaces, these tests fail under `CI` and skip elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use captf_kubetest::{ControlPlane, Kubelet, Options, tools_or_skip};
use captf_sim::ProcessImage;
use futures::StreamExt as _;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

use common::{TEST_READY_TIMEOUT, wait_within};

const IMAGE: &str = "example.com/shell:1";
const NODE: &str = "kubetest-node";
/// Upper bound on any one wait; a test that reaches it fails.
const PATIENCE: Duration = Duration::from_secs(90);

/// The image: the machine's `sh` as its entrypoint.
fn shell_image() -> ProcessImage {
    ProcessImage::new("/image/sh").file("/image/sh", "/bin/sh")
}

struct Setup {
    kubelet: Option<Kubelet>,
    cp: Option<ControlPlane>,
    admin: kube::Client,
    root: tempfile::TempDir,
}

impl Setup {
    fn kubelet(&self) -> &Kubelet {
        self.kubelet.as_ref().unwrap()
    }
}

/// A control plane and a kubelet mapping [`IMAGE`] to `sh`, renewing its Lease every second.
async fn setup() -> Option<Setup> {
    let tools = tools_or_skip()?;
    if let Some(why) = captf_sim::process_kubelet::namespaces_unavailable() {
        captf_testsupport::cannot_run(format!("{why}; the process kubelet needs root for its containers"));
        return None;
    }
    let mut opts = Options::new(tools);
    opts.ready_timeout = TEST_READY_TIMEOUT;
    let cp = ControlPlane::start(opts).await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut k = cp.kubelet_options(NODE, root.path()).image(IMAGE, shell_image());
    k.renew_every = Duration::from_secs(1);
    let kubelet = cp.start_kubelet(k).await.unwrap();
    Some(Setup {
        kubelet: Some(kubelet),
        cp: Some(cp),
        admin,
        root,
    })
}

fn job(name: &str, script: &str) -> Job {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "backoffLimit": 0, "template": { "spec": {
            "restartPolicy": "Never",
            "containers": [{ "name": "main", "image": IMAGE, "args": ["-c", script] }],
        }}},
    }))
    .unwrap()
}

fn bare_pod(name: &str, script: &str, grace: i64) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "restartPolicy": "Never", "terminationGracePeriodSeconds": grace,
            "containers": [{ "name": "main", "image": IMAGE, "args": ["-c", script] }] },
    }))
    .unwrap()
}

async fn job_pod(pods: &Api<Pod>, job: &str) -> Value {
    let selector = ListParams::default().labels(&format!("job-name={job}"));
    wait_within(&format!("the pod of Job {job}"), PATIENCE, || {
        let pods = pods.clone();
        let selector = selector.clone();
        async move {
            let pod = pods.list(&selector).await.unwrap().items.into_iter().next()?;
            Some(serde_json::to_value(pod).unwrap())
        }
    })
    .await
}

async fn until_pod<F>(pods: &Api<Pod>, name: &str, what: &str, test: F) -> Value
where
    F: Fn(&Value) -> bool,
{
    let test = &test;
    wait_within(what, PATIENCE, || {
        let pods = pods.clone();
        async move {
            let pod = serde_json::to_value(pods.get_opt(name).await.ok()??).unwrap();
            test(&pod).then_some(pod)
        }
    })
    .await
}

fn terminated(pod: &Value) -> Option<&Value> {
    pod.pointer("/status/containerStatuses/0/state/terminated")
}

fn has_condition(v: &Value, type_: &str) -> bool {
    v.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == type_ && c["status"] == "True"))
}

async fn until_job_condition(jobs: &Api<Job>, name: &str, type_: &str) -> Value {
    wait_within(&format!("Job {name} {type_}"), PATIENCE, || {
        let jobs = jobs.clone();
        async move {
            let job = serde_json::to_value(jobs.get(name).await.unwrap()).unwrap();
            has_condition(&job, type_).then_some(job)
        }
    })
    .await
}

/// The projected token file of a pod under the kubelet's root.
fn token_file(root: &Path, pod: &Value) -> PathBuf {
    let dir = format!(
        "{}_{}_{}",
        pod["metadata"]["namespace"].as_str().unwrap(),
        pod["metadata"]["name"].as_str().unwrap(),
        pod["metadata"]["uid"].as_str().unwrap()
    );
    let volumes = root.join("pods").join(dir).join("volumes");
    let found = std::fs::read_dir(&volumes)
        .unwrap()
        .map(|e| e.unwrap().path().join("token"))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| panic!("no token file under {}", volumes.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_pods_run_as_processes_with_their_exit_code_termination_message_token_and_own_pod_ip() {
    let Some(s) = setup().await else { return };
    let cp = s.cp.as_ref().unwrap();
    let jobs: Api<Job> = Api::namespaced(s.admin.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), "default");
    jobs.create(
        &PostParams::default(),
        &job("fails", "echo hi > /dev/termination-log; exit 3"),
    )
    .await
    .unwrap();
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    let check = format!(
        "printf '%s:%s %s' \"$KUBERNETES_SERVICE_HOST\" \"$KUBERNETES_SERVICE_PORT\" \"$(cat {sa}/namespace)\" > /dev/termination-log; test -s {sa}/token && grep -q 'BEGIN CERTIFICATE' {sa}/ca.crt"
    );
    jobs.create(&PostParams::default(), &job("succeeds", &check))
        .await
        .unwrap();

    let failed = until_job_condition(&jobs, "fails", "Failed").await;
    assert_eq!(failed["status"]["failed"], 1, "{failed}");
    let pod = job_pod(&pods, "fails").await;
    let pod = until_pod(
        &pods,
        pod["metadata"]["name"].as_str().unwrap(),
        "the failed pod's status",
        |p| terminated(p).is_some(),
    )
    .await;
    assert_eq!(pod["spec"]["nodeName"], NODE);
    assert_eq!(pod["status"]["phase"], "Failed", "{pod}");
    let t = terminated(&pod).unwrap();
    assert_eq!(
        (t["exitCode"].as_i64(), t["reason"].as_str()),
        (Some(3), Some("Error")),
        "{t}"
    );
    assert_eq!(t["message"], "hi\n");
    assert!(has_condition(&pod, "PodScheduled"), "{pod}");
    assert!(pod["status"]["startTime"].is_string(), "{pod}");

    until_job_condition(&jobs, "succeeds", "Complete").await;
    let ok = job_pod(&pods, "succeeds").await;
    assert_eq!(ok["status"]["phase"], "Succeeded", "{ok}");
    let t = terminated(&ok).unwrap();
    assert_eq!(
        (t["exitCode"].as_i64(), t["reason"].as_str()),
        (Some(0), Some("Completed")),
        "{t}"
    );
    let port = cp.server_url().rsplit(':').next().unwrap().to_string();
    assert_eq!(t["message"], format!("127.0.0.1:{port} default"));

    // The token the pod was given is the pod's ServiceAccount's, bound to the pod.
    let token = std::fs::read_to_string(token_file(s.root.path(), &ok)).unwrap();
    let kubeconfig = s.root.path().join("pod-token.kubeconfig");
    let text = captf_kubetest::kubeconfig::render(
        &cp.server_url(),
        cp.ca_pem(),
        "pod",
        &captf_kubetest::Credentials::Token(token.trim()),
        "default",
    )
    .unwrap();
    std::fs::write(&kubeconfig, text).unwrap();
    let as_pod = captf_kubetest::client_from_kubeconfig(&kubeconfig).await.unwrap();
    let review: SelfSubjectReview =
        serde_json::from_value(json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview" }))
            .unwrap();
    let me = Api::<SelfSubjectReview>::all(as_pod)
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    let user = me.status.unwrap().user_info.unwrap();
    assert_eq!(user.username.as_deref(), Some("system:serviceaccount:default:default"));
    let extra = user.extra.unwrap_or_default();
    assert_eq!(
        extra.get("authentication.kubernetes.io/pod-name").map(Vec::as_slice),
        Some([ok["metadata"]["name"].as_str().unwrap().to_string()].as_slice()),
        "{extra:?}"
    );

    // Each pod has a loopback IP of its own; the host IP is the node's.
    let ips: Vec<&str> = [&pod, &ok]
        .iter()
        .map(|p| p["status"]["podIP"].as_str().unwrap())
        .collect();
    assert_ne!(ips[0], ips[1]);
    for (p, ip) in [&pod, &ok].iter().zip(&ips) {
        let addr: std::net::Ipv4Addr = ip.parse().unwrap();
        assert!(addr.is_loopback() && addr != std::net::Ipv4Addr::LOCALHOST, "{ip}");
        assert_eq!(p["status"]["podIPs"], json!([{ "ip": ip }]));
        assert_eq!(p["status"]["hostIP"], "127.0.0.1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_is_registered_ready_with_loopback_addresses_and_its_lease_is_renewed() {
    let Some(s) = setup().await else { return };
    let node = Api::<Node>::all(s.admin.clone()).get(NODE).await.unwrap();
    let node = serde_json::to_value(node).unwrap();
    let ready = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("True"), Some("KubeletReady"))
    );
    assert_eq!(
        node["status"]["addresses"],
        json!([{ "type": "InternalIP", "address": "127.0.0.1" }, { "type": "Hostname", "address": NODE }])
    );
    assert_eq!(node["status"]["capacity"]["pods"], "110");
    assert!(node["status"]["allocatable"]["cpu"].is_string(), "{node}");

    let leases: Api<Lease> = Api::namespaced(s.admin.clone(), "kube-node-lease");
    let renewed = |l: &Lease| l.spec.as_ref().and_then(|s| s.renew_time.clone()).map(|t| t.0);
    let first = leases.get(NODE).await.unwrap();
    let spec = first.spec.clone().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(NODE));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    let owner = &first.metadata.owner_references.clone().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Node", NODE));
    let first_renew = renewed(&first).unwrap();
    wait_within("the Lease renewed", PATIENCE, || {
        let leases = leases.clone();
        async move { (renewed(&leases.get(NODE).await.unwrap())? > first_renew).then_some(()) }
    })
    .await;
}

/// Watches `name` from now until it is deleted; every state it went through, with when.
async fn watch_until_deleted(pods: &Api<Pod>, name: &str, from: &str) -> Vec<(Instant, Value)> {
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(60);
    let mut states = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    let mut version = from.to_string();
    while Instant::now() < deadline {
        let mut stream = pods.watch(&params, &version).await.unwrap().boxed();
        while let Some(event) = stream.next().await {
            match event.unwrap() {
                WatchEvent::Modified(p) | WatchEvent::Added(p) => {
                    version = p.metadata.resource_version.clone().unwrap_or_default();
                    states.push((Instant::now(), serde_json::to_value(p).unwrap()));
                }
                WatchEvent::Deleted(p) => {
                    states.push((Instant::now(), serde_json::to_value(p).unwrap()));
                    return states;
                }
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(e) => panic!("{e:?}"),
            }
        }
    }
    panic!("{name} not deleted within {PATIENCE:?}");
}

fn log_of(kubelet: &Kubelet, pod: &str) -> String {
    std::fs::read_to_string(kubelet.log_path("default", pod)).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_pod_sends_sigterm_then_sigkill_when_its_grace_ends_then_removes_it() {
    let Some(s) = setup().await else { return };
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), "default");
    // SIGTERM is noted and ignored: only SIGKILL ends it.
    let script = "trap 'echo got-sigterm' TERM; echo started; while :; do sleep 0.1; done";
    pods.create(&PostParams::default(), &bare_pod("stubborn", script, 3))
        .await
        .unwrap();
    let running = until_pod(&pods, "stubborn", "the pod running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    wait_within("the container's first output", PATIENCE, || async {
        log_of(s.kubelet(), "stubborn").contains("started").then_some(())
    })
    .await;
    let version = running["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let watching = {
        let pods = pods.clone();
        tokio::spawn(async move { watch_until_deleted(&pods, "stubborn", &version).await })
    };
    let deleted_at = Instant::now();
    pods.delete("stubborn", &DeleteParams::default()).await.unwrap();
    wait_within("SIGTERM", PATIENCE, || async {
        log_of(s.kubelet(), "stubborn").contains("got-sigterm").then_some(())
    })
    .await;
    let states = watching.await.unwrap();
    let (gone_at, last) = states.last().unwrap();
    let waited = gone_at.duration_since(deleted_at);
    assert!(
        waited >= Duration::from_millis(2500) && waited < Duration::from_secs(20),
        "removed {waited:?} after the delete, the grace period is 3 s"
    );
    // The kubelet's last word: killed by SIGKILL, Failed.
    assert_eq!(last["status"]["phase"], "Failed", "{last}");
    let t = terminated(last).unwrap();
    assert_eq!(
        (t["exitCode"].as_i64(), t["reason"].as_str()),
        (Some(137), Some("Error")),
        "{t}"
    );
    assert!(s.kubelet().pids().is_empty(), "{:?}", s.kubelet().pids());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_jobs_pod_gets_disruption_target_sigterm_and_fails_its_job() {
    let Some(s) = setup().await else { return };
    let jobs: Api<Job> = Api::namespaced(s.admin.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), "default");
    let script =
        "trap 'echo interrupted > /dev/termination-log; exit 143' TERM; echo started; while :; do sleep 0.1; done";
    jobs.create(&PostParams::default(), &job("evicted", script))
        .await
        .unwrap();
    let pod = job_pod(&pods, "evicted").await;
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    let running = until_pod(&pods, &name, "the pod running", |p| p["status"]["phase"] == "Running").await;
    // Its SIGTERM handler is set (PID 1 ignores a signal it has no handler for).
    wait_within("the container's first output", PATIENCE, || async {
        log_of(s.kubelet(), &name).contains("started").then_some(())
    })
    .await;
    let version = running["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let watching = {
        let pods = pods.clone();
        let name = name.clone();
        tokio::spawn(async move { watch_until_deleted(&pods, &name, &version).await })
    };
    let eviction = json!({ "apiVersion": "policy/v1", "kind": "Eviction",
                           "metadata": { "name": name, "namespace": "default" } });
    pods.create_subresource::<Value, Value>("eviction", &name, &PostParams::default(), &eviction)
        .await
        .unwrap();
    let states = watching.await.unwrap();
    // What a user sees: the API server marks the pod DisruptionTarget and deletes it with its
    // grace period; the kubelet stops the container and reports its end; the pod goes.
    let disrupted = states
        .iter()
        .find_map(|(_, p)| {
            p["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "DisruptionTarget")
                .cloned()
        })
        .unwrap();
    assert_eq!(
        (disrupted["status"].as_str(), disrupted["reason"].as_str()),
        (Some("True"), Some("EvictionByEvictionAPI")),
        "{disrupted}"
    );
    let last = &states.last().unwrap().1;
    assert!(last["metadata"]["deletionTimestamp"].is_string(), "{last}");
    assert_eq!(last["status"]["phase"], "Failed", "{last}");
    let t = terminated(last).unwrap();
    assert_eq!(
        (t["exitCode"].as_i64(), t["message"].as_str()),
        (Some(143), Some("interrupted\n")),
        "{t}"
    );
    let failed = until_job_condition(&jobs, "evicted", "Failed").await;
    assert_eq!(failed["status"]["failed"], 1, "{failed}");
}

/// Every live (not zombie) descendant of `pid`, and `pid`.
fn process_tree(pid: i32) -> Vec<i32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        for task in std::fs::read_dir(format!("/proc/{p}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            out.extend(children.split_whitespace().filter_map(|c| c.parse::<i32>().ok()));
        }
        i += 1;
    }
    out
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_kubelet_and_the_control_plane_leaves_no_process_behind() {
    let Some(mut s) = setup().await else { return };
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), "default");
    pods.create(
        &PostParams::default(),
        &bare_pod("forever", "sleep 3600 & sleep 3600", 30),
    )
    .await
    .unwrap();
    until_pod(&pods, "forever", "the pod running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    let tree = wait_within("the container's processes", PATIENCE, || async {
        let pids = s.kubelet().pids();
        let tree: Vec<i32> = pids.iter().flat_map(|p| process_tree(*p)).collect();
        // unshare, its child, the container's shell and its two sleeps.
        (tree.iter().filter(|p| alive(**p)).count() >= 4).then_some(tree)
    })
    .await;
    drop(s.kubelet.take());
    // The kernel ends the rest of a PID namespace once its first process is gone.
    wait_within(
        "every process of the container gone",
        Duration::from_secs(10),
        || async { (!tree.iter().any(|p| alive(*p))).then_some(()) },
    )
    .await;
    let cp = s.cp.take().unwrap();
    let dir = cp.work_dir().to_path_buf();
    drop(cp);
    assert_eq!(common::processes_mentioning(&dir), Vec::new());
    assert_eq!(common::processes_mentioning(s.root.path()), Vec::new());
}

/// The image name the controller puts in its Jobs, mapped to the runner's image.
const RUNNER_IMAGE: &str = "ghcr.io/captf/runner:kubelet";

const MODULE: &str = r#"terraform {
  required_providers {
    captftest = { source = "captf.io/test/captftest" }
  }
}

resource "captftest_thing" "load_balancer" {
  name    = "kubelet-lb"
  content = "port 6443"
}

output "control_plane_endpoint" {
  value = { host = "${captftest_thing.load_balancer.id}.example", port = 6443 }
}
"#;

/// The whole chain on the real control plane: the real controller makes the Job with the
/// object's own ServiceAccount, the real Job controller its pod, the kubelet runs the real runner
/// (real OpenTofu, the test provider) in it, and the thing the module declares exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_runner_applies_a_terraformcluster_in_a_pod_under_the_objects_own_service_account() {
    use captf_testprovider::runner_image::{ModuleServer, runner_image, tar_gz};
    let Some(tools) = tools_or_skip() else { return };
    if let Some(why) = captf_sim::process_kubelet::namespaces_unavailable() {
        captf_testsupport::cannot_run(format!("{why}; the process kubelet needs root for its containers"));
        return;
    }
    let files = tempfile::tempdir().unwrap();
    let image = match runner_image(files.path()) {
        Ok(image) => image,
        Err(e) => {
            captf_testsupport::cannot_run(format!("the runner's image cannot be assembled: {e}"));
            return;
        }
    };
    let archive = tar_gz(&files.path().join("module"), MODULE).unwrap();
    let modules = ModuleServer::start(vec![("cluster.tar.gz".into(), archive)])
        .await
        .unwrap();

    let mut opts = Options::new(tools);
    opts.ready_timeout = TEST_READY_TIMEOUT;
    let cp = ControlPlane::start(opts).await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let root = tempfile::tempdir().unwrap();
    let kubelet = cp
        .start_kubelet(
            cp.kubelet_options(NODE, root.path())
                .image(RUNNER_IMAGE, image.image.clone()),
        )
        .await
        .unwrap();
    common::chart::crds(&admin).await;
    let log = cp.work_dir().join("captf-controller.log");
    let runner_flag = format!("--runner-image={RUNNER_IMAGE}");
    let _controller = common::spawn_controller(
        &cp.admin_kubeconfig(),
        &log,
        &[
            "--namespace=default",
            runner_flag.as_str(),
            "--metrics-addr=127.0.0.1:0",
            "--health-addr=127.0.0.1:0",
            "--log-format=text",
        ],
        &[("POD_NAMESPACE", "default"), ("RUST_LOG", "info")],
    );
    let cluster: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
        "metadata": { "name": "kubelet", "namespace": "default" },
        "spec": { "module": { "source": modules.url("cluster.tar.gz") }, "drift": { "interval": "0" } },
    }))
    .unwrap();
    let resource = kube::api::ApiResource {
        group: "infrastructure.cluster.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
        kind: "TerraformCluster".into(),
        plural: "terraformclusters".into(),
    };
    let clusters: Api<kube::api::DynamicObject> = Api::namespaced_with(admin.clone(), "default", &resource);
    clusters.create(&PostParams::default(), &cluster).await.unwrap();

    let world = captf_testprovider::world::World::new(image.world.clone());
    let thing = wait_within(
        "the module's thing made by the runner",
        Duration::from_secs(240),
        || async { world.read("kubelet-lb").ok().flatten() },
    )
    .await;
    assert_eq!(thing.content, "port 6443");

    // The runner's pod ran here to its end, as the object's own ServiceAccount (not `default`).
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let pod = wait_within("the runner's pod ended", PATIENCE, || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(|p| {
                let v = serde_json::to_value(p).unwrap();
                v["spec"]["nodeName"] == NODE && terminated(&v).is_some()
            })
        }
    })
    .await;
    let status = serde_json::to_value(&pod).unwrap();
    let end = terminated(&status).unwrap();
    assert_eq!(end["exitCode"], 0, "{end}");
    let result = captf_shared::protocol::RunnerResult::parse(end["message"].as_str().unwrap()).unwrap();
    assert_eq!(result.result, captf_shared::protocol::RunResult::Succeeded, "{end}");
    let spec = pod.spec.unwrap();
    let account = spec.service_account_name.unwrap_or_default();
    assert!(!account.is_empty() && account != "default", "{account}");
    let sa = Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(admin.clone(), "default")
        .get(&account)
        .await
        .unwrap();
    let owner = &sa.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("TerraformCluster", "kubelet")
    );
    let log_text =
        std::fs::read_to_string(kubelet.log_path("default", pod.metadata.name.as_deref().unwrap())).unwrap_or_default();
    assert!(log_text.contains("captf-runner"), "{log_text}");
}

fn waiting_reason(pod: &Value) -> Option<&str> {
    pod.pointer("/status/containerStatuses/0/state/waiting/reason")
        .and_then(Value::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_waits_for_an_unmapped_image_and_for_a_missing_secret_and_runs_once_the_secret_exists() {
    let Some(s) = setup().await else { return };
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), "default");
    let unmapped: Pod = serde_json::from_value(json!({
        "metadata": { "name": "unmapped" },
        "spec": { "restartPolicy": "Never",
            "containers": [{ "name": "main", "image": "example.com/other:1" }] },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &unmapped).await.unwrap();
    let needs: Pod = serde_json::from_value(json!({
        "metadata": { "name": "needs-secret" },
        "spec": { "restartPolicy": "Never",
            "containers": [{ "name": "main", "image": IMAGE,
                "args": ["-c", "printf '%s' \"$FROM_SECRET\" > /dev/termination-log"],
                "env": [{ "name": "FROM_SECRET",
                          "valueFrom": { "secretKeyRef": { "name": "later", "key": "k" } } }] }] },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &needs).await.unwrap();

    let waiting = until_pod(&pods, "unmapped", "the unmapped pod waiting", |p| {
        waiting_reason(p).is_some()
    })
    .await;
    assert_eq!(waiting_reason(&waiting), Some("ErrImagePull"));
    assert_eq!(waiting["status"]["phase"], "Pending");
    let message = waiting
        .pointer("/status/containerStatuses/0/state/waiting/message")
        .and_then(Value::as_str)
        .unwrap();
    assert!(message.contains("example.com/other:1"), "{message}");

    let waiting = until_pod(&pods, "needs-secret", "the pod waiting for its Secret", |p| {
        waiting_reason(p).is_some()
    })
    .await;
    assert_eq!(
        waiting_reason(&waiting),
        Some("CreateContainerConfigError"),
        "{waiting}"
    );
    assert_eq!(waiting["status"]["phase"], "Pending");
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(json!({ "metadata": { "name": "later" }, "stringData": { "k": "v" } })).unwrap();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(s.admin.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let done = until_pod(&pods, "needs-secret", "the pod run once its Secret exists", |p| {
        terminated(p).is_some()
    })
    .await;
    assert_eq!(done["status"]["phase"], "Succeeded", "{done}");
    assert_eq!(terminated(&done).unwrap()["message"], "v");
    // The same pod IP as while it waited.
    assert_eq!(done["status"]["podIP"], waiting["status"]["podIP"]);
}

/// A pod that checks it reaches the API server on its own loopback, then answers its name over
/// HTTP on port 8000.
fn listening_pod(name: &str) -> Pod {
    let script = r#"
import http.server, os, socket
socket.create_connection(("127.0.0.1", int(os.environ["KUBERNETES_SERVICE_PORT"])), timeout=10).close()
name = os.environ["POD_NAME"].encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(name)
http.server.HTTPServer(("0.0.0.0", 8000), H).serve_forever()
"#;
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "containers": [{ "name": "main", "image": "example.com/python:3", "args": ["-c", script],
                "env": [{ "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } }],
                "ports": [{ "name": "http", "containerPort": 8000 }],
                "readinessProbe": { "httpGet": { "path": "/", "port": "http" }, "periodSeconds": 1 } }] },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_in_networks_of_their_own_listen_on_one_port_at_their_own_addresses_and_reach_the_api_server() {
    let Some(tools) = tools_or_skip() else { return };
    if let Some(why) = captf_sim::process_kubelet::namespaces_unavailable() {
        captf_testsupport::cannot_run(format!("{why}; the process kubelet needs root for its containers"));
        return;
    }
    let Some(python) = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
    else {
        captf_testsupport::cannot_run("python3 is not installed: the pods' server is a Python script");
        return;
    };
    let mut opts = Options::new(tools);
    opts.ready_timeout = TEST_READY_TIMEOUT;
    let cp = ControlPlane::start(opts).await.unwrap();
    let admin = cp.admin_client().await.unwrap();
    let root = tempfile::tempdir().unwrap();
    let options = cp.kubelet_options(NODE, root.path()).pod_network([]).image(
        "example.com/python:3",
        ProcessImage::new("/image/python3").file("/image/python3", python),
    );
    let kubelet = cp.start_kubelet(options).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    for name in ["first", "second"] {
        pods.create(&PostParams::default(), &listening_pod(name)).await.unwrap();
    }
    let mut addresses = Vec::new();
    for name in ["first", "second"] {
        let pod = until_pod(&pods, name, &format!("{name} Ready through its probe"), |p| {
            p["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
                || terminated(p).is_some()
        })
        .await;
        assert!(
            terminated(&pod).is_none(),
            "{name} ended (it reaches the API server on its loopback before it listens): {pod}\n{}",
            log_of(&kubelet, name)
        );
        let ip: std::net::Ipv4Addr = pod["status"]["podIP"].as_str().unwrap().parse().unwrap();
        assert_eq!(&ip.octets()[..2], &captf_kubetest::podnet::PREFIX, "{ip}");
        addresses.push((name, ip));
    }
    assert_ne!(addresses[0].1, addresses[1].1, "each pod has an address of its own");
    // Both listen on port 8000; this machine reaches each at its own address.
    for (name, ip) in &addresses {
        let mut stream = tokio::net::TcpStream::connect((*ip, 8000)).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut stream, b"GET / HTTP/1.0\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut answer)
            .await
            .unwrap();
        assert!(answer.ends_with(name), "{ip} answers {name}: {answer:?}");
    }
    // Deleted, a pod's namespace goes with it.
    let [_, _, subnet, host] = addresses[0].1.octets();
    let netns = Path::new("/run/netns").join(format!("cptf{subnet}p{host}"));
    assert!(netns.exists(), "{} is the first pod's", netns.display());
    pods.delete("first", &DeleteParams::default()).await.unwrap();
    wait_within("the deleted pod's namespace removed", PATIENCE, || async {
        (pods.get_opt("first").await.unwrap().is_none() && !netns.exists()).then_some(())
    })
    .await;
}

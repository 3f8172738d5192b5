//! The whole path on the real control plane, in wall-clock time: the chart's CRDs, the real
//! webhook registered as the chart registers it, the shipped controller under the chart's RBAC
//! and admission policy, the real Job controller and garbage collector, and the process kubelet
//! running the real runner (real OpenTofu and the test provider) under each object's own
//! ServiceAccount. Spec values keep each scenario short in wall time: a one-minute drift interval,
//! a five-second lock timeout, the one-minute first backoff. What needs longer (deadlines, long
//! backoffs, evictions at a chosen moment) runs on the simulator with the same real runner, in
//! simulated time (`controller/tests/scenarios/real_runner.rs`). Without the binaries or root
//! these tests fail under `CI` and skip elsewhere.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use captf_chart_tests::NAMESPACE;
use captf_kubetest::{ControlPlane, Kubelet, Options, tools_or_skip};
use captf_testprovider::runner_image::WORLD_INSIDE;
use captf_testprovider::runner_image::{ModuleServer, RunnerImage, THING_MODULE, runner_image, tar_gz};
use captf_testprovider::world::{HOLD_ENV, Thing, World};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use common::chart::{CONTROLLER, crds, install_controller_rights};
use common::webhook::Webhook;
use common::{TEST_READY_TIMEOUT, wait_within};

/// Upper bound on a wait for real OpenTofu in a pod; a test that reaches it fails.
const PATIENCE: Duration = Duration::from_secs(240);
const NODE: &str = "full-path";
/// The runner image the controller names, mapped by the kubelet to the runner's files.
const RUNNER_IMAGE: &str = "ghcr.io/captf/runner:full-path";
/// The file in the world folder whose absence holds every change of the runners' OpenTofu.
const GATE: &str = "gate";
/// The platform's policy on every plan of these tests: nothing may be opened to the world (the
/// test provider's thing stands for a security group rule; its content for the CIDR).
const OPEN_TO_THE_WORLD: &str = include_str!("../../examples/policies/world.rego");

struct Full {
    // Dropped in this order: the controller and the kubelet before the control plane.
    controller: tokio::process::Child,
    _webhook: Webhook,
    kubelet: Kubelet,
    cp: ControlPlane,
    admin: kube::Client,
    world: World,
    modules: ModuleServer,
    _image: RunnerImage,
    _files: tempfile::TempDir,
    _root: tempfile::TempDir,
}

impl Full {
    async fn start() -> Option<Full> {
        let tools = tools_or_skip()?;
        if let Some(why) = captf_sim::process_kubelet::namespaces_unavailable() {
            captf_testsupport::cannot_run(format!("{why}; the process kubelet needs root for its containers"));
            return None;
        }
        let files = tempfile::tempdir().unwrap();
        let image = match runner_image(files.path()) {
            Ok(image) => image,
            Err(e) => {
                captf_testsupport::cannot_run(format!("the runner's image cannot be assembled: {e}"));
                return None;
            }
        };
        // Every change of the runners' OpenTofu waits for the gate, open unless a test closes it.
        let image = RunnerImage {
            image: image.image.clone().env(HOLD_ENV, format!("{WORLD_INSIDE}/{GATE}")),
            ..image
        };
        std::fs::write(image.world.join(GATE), "").unwrap();
        let archive = tar_gz(&files.path().join("module"), THING_MODULE).unwrap();
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
        crds(&admin).await;
        install_controller_rights(&cp, &admin).await;
        let webhook = common::webhook::start_webhook(cp.work_dir());
        common::webhook::register(&admin, &webhook).await;
        let kubeconfig = cp.service_account_kubeconfig(NAMESPACE, CONTROLLER).await.unwrap();
        let runner_flag = format!("--runner-image={RUNNER_IMAGE}");
        // The platform's policy on every plan, as the chart mounts it.
        let policies = files.path().join("plan-policies");
        std::fs::create_dir(&policies).unwrap();
        std::fs::write(policies.join("world.rego"), OPEN_TO_THE_WORLD).unwrap();
        let policies_flag = format!("--plan-policies-dir={}", policies.display());
        let controller = common::spawn_controller(
            &kubeconfig,
            &cp.work_dir().join("captf-controller.log"),
            &[
                "--namespace=default",
                runner_flag.as_str(),
                policies_flag.as_str(),
                "--metrics-addr=127.0.0.1:0",
                "--health-addr=127.0.0.1:0",
                "--log-format=text",
            ],
            &[("POD_NAMESPACE", NAMESPACE), ("RUST_LOG", "info")],
        );
        let world = World::new(image.world.clone());
        Some(Full {
            controller,
            _webhook: webhook,
            kubelet,
            cp,
            admin,
            world,
            modules,
            _image: image,
            _files: files,
            _root: root,
        })
    }

    fn clusters(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.admin.clone(), "default", &common::terraform_clusters())
    }

    /// Create a TerraformCluster of [`THING_MODULE`] (through the webhook, as a person would).
    async fn create(&self, name: &str, variables: Value) {
        self.create_with(name, variables, json!({ "interval": "0" })).await;
    }

    async fn create_with(&self, name: &str, variables: Value, drift: Value) {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
            "metadata": { "name": name, "namespace": "default" },
            "spec": {
                "module": { "source": self.modules.url("cluster.tar.gz") },
                "variables": variables,
                "drift": drift,
            },
        }))
        .unwrap();
        self.clusters().create(&PostParams::default(), &object).await.unwrap();
    }

    async fn patch(&self, name: &str, patch: Value) {
        self.clusters()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Wait (wall time) until the object satisfies `f`, failing with the controller's log.
    async fn until(&self, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
        let clusters = self.clusters();
        let log = self.cp.work_dir().join("captf-controller.log");
        let found = tokio::time::timeout(PATIENCE, async {
            loop {
                if let Ok(o) = clusters.get(name).await {
                    let v = serde_json::to_value(&o).unwrap();
                    if f(&v) {
                        return v;
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
        .await;
        match found {
            Ok(v) => v,
            Err(_) => {
                let last = clusters.get(name).await.map(|o| serde_json::to_value(o).unwrap());
                panic!(
                    "{name}: {what} not within {PATIENCE:?}; the object: {last:?}\ncontroller log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            }
        }
    }

    /// The object's Job of `op` number `seq`, once the controller booked it with `outcome`.
    async fn booked(&self, name: &str, op: captf_shared::Op, seq: u32, outcome: &str) -> Job {
        let job = captf_shared::names::job_name(captf_shared::Kind::TerraformCluster, "default", name, op, seq);
        let jobs: Api<Job> = Api::namespaced(self.admin.clone(), "default");
        wait_within(&format!("Job {job} booked {outcome}"), PATIENCE, || {
            let (jobs, job) = (jobs.clone(), job.clone());
            async move {
                let j = jobs.get(&job).await.ok()?;
                let got = j.metadata.annotations.as_ref()?.get("captf.io/outcome")?.clone();
                assert_eq!(got, outcome, "Job {job} was booked {got}");
                Some(j)
            }
        })
        .await
    }

    /// The object's lock Lease: its holder and its lock info (`app.terraform.io/lock-info`).
    async fn lock(&self, suffix: &str) -> (Value, Option<Value>) {
        let leases: Api<DynamicObject> = Api::namespaced_with(
            self.admin.clone(),
            "default",
            &ApiResource {
                group: "coordination.k8s.io".into(),
                version: "v1".into(),
                api_version: "coordination.k8s.io/v1".into(),
                kind: "Lease".into(),
                plural: "leases".into(),
            },
        );
        let lease = leases.get(&format!("lock-tfstate-default-{suffix}")).await.unwrap();
        let holder = lease.data["spec"]["holderIdentity"].clone();
        let info = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("app.terraform.io/lock-info"))
            .and_then(|i| serde_json::from_str(i).ok());
        (holder, info)
    }

    fn world_dir(&self) -> std::path::PathBuf {
        self._image.world.clone()
    }

    fn content(&self, thing: &str) -> Option<String> {
        self.world.read(thing).ok().flatten().map(|t| t.content)
    }
}

/// Ready and up to date: `Ready` alone stays True from the first apply on, while a later change
/// waits; `UpToDate` says the newest inputs are applied.
fn ready(o: &Value) -> bool {
    o["status"]["conditions"].as_array().is_some_and(|c| {
        ["Ready", "UpToDate"]
            .iter()
            .all(|t| c.iter().any(|c| c["type"] == *t && c["status"] == "True"))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_applies_to_ready_with_the_endpoint_from_the_outputs_and_an_input_change_applies_again() {
    let Some(full) = Full::start().await else { return };
    full.create("prod-eu", json!({"name": "a", "content": "one"})).await;
    let o = full.until("prod-eu", "Ready", ready).await;
    // The endpoint came from OpenTofu's real outputs (the thing's id is `thing-<name>`).
    assert_eq!(
        o["spec"]["controlPlaneEndpoint"],
        json!({"host": "thing-a.example", "port": 6443}),
        "{o}"
    );
    assert_eq!(o["status"]["initialization"]["provisioned"], true, "{o}");
    assert_eq!(full.content("a").as_deref(), Some("one"));

    // A new input: a new apply Job, the thing changed in place.
    full.patch(
        "prod-eu",
        json!({"spec": {"variables": {"name": "a", "content": "two"}}}),
    )
    .await;
    let j2 = full.booked("prod-eu", captf_shared::Op::Apply, 2, "succeeded").await;
    assert_eq!(j2.metadata.annotations.unwrap()["captf.io/reason"], "InputsChanged");
    assert_eq!(full.content("a").as_deref(), Some("two"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destructive_change_is_blocked_then_applied_once_approved_with_the_approver_recorded() {
    let Some(full) = Full::start().await else { return };
    full.create("guarded", json!({"name": "a", "content": "one"})).await;
    full.until("guarded", "Ready", ready).await;
    // A new name replaces the thing: the guard stops the plan, nothing is applied.
    full.patch(
        "guarded",
        json!({"spec": {"variables": {"name": "b", "content": "one"}}}),
    )
    .await;
    full.booked("guarded", captf_shared::Op::Apply, 2, "blocked").await;
    let o = full
        .until("guarded", "a pending plan", |o| {
            o["status"]["pendingPlan"]["hash"].is_string()
        })
        .await;
    let hash = o["status"]["pendingPlan"]["hash"].as_str().unwrap().to_string();
    assert!(
        full.content("b").is_none() && full.content("a").is_some(),
        "nothing applied unapproved"
    );

    // The plan the runner kept, read after the fact, through the plugin.
    let out = std::process::Command::new(common::webhook::binary("kubectl-captf"))
        .arg("--kubeconfig")
        .arg(full.cp.admin_kubeconfig())
        .args(["-n", "default", "plan", "tfc/guarded"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{plan}{}", String::from_utf8_lossy(&out.stderr));
    assert!(plan.contains("replace   captftest_thing.main"), "{plan}");
    assert!(
        plan.contains("must be replaced"),
        "the plan as OpenTofu printed it: {plan}"
    );

    full.patch(
        "guarded",
        json!({"metadata": {"annotations": {"captf.io/approve-plan": hash}}}),
    )
    .await;
    let a3 = full.booked("guarded", captf_shared::Op::Apply, 3, "succeeded").await;
    let annotations = a3.metadata.annotations.unwrap();
    assert_eq!(annotations["captf.io/approved-plan"], hash);
    // The webhook recorded the admin who approved, and the Job carried it.
    assert!(!annotations["captf.io/approved-by"].is_empty(), "{annotations:?}");
    assert!(full.content("a").is_none(), "the old thing was replaced");
    assert_eq!(full.content("b").as_deref(), Some("one"));
}

/// `kubectl captf <args>` as the person of `kubeconfig`: its exit status and what it printed.
fn plugin(kubeconfig: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(common::webhook::binary("kubectl-captf"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-n", "default"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A receiver on 127.0.0.1: every POST's JSON body is handed over.
async fn receiver() -> (std::net::SocketAddr, tokio::sync::mpsc::UnboundedReceiver<Value>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let app = axum::Router::new()
        .fallback(
            |axum::extract::State(tx): axum::extract::State<tokio::sync::mpsc::UnboundedSender<Value>>,
             body: String| async move {
                let _ = tx.send(serde_json::from_str(&body).unwrap_or(Value::String(body)));
                "ok"
            },
        )
        .with_state(tx);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, rx)
}

/// The first notification the receiver got whose JSON satisfies `f` (others are dropped),
/// within [`PATIENCE`].
async fn notified(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Value>,
    what: &str,
    f: impl Fn(&Value) -> bool,
) -> Value {
    tokio::time::timeout(PATIENCE, async {
        loop {
            let got = rx.recv().await.expect("the receiver stopped");
            if f(&got) {
                return got;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no notification {what} within {PATIENCE:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_governed_change_is_checked_by_policy_announced_and_applied_only_after_two_approvers_other_than_its_author() {
    let Some(full) = Full::start().await else { return };
    let alice = common::people::person(&full.cp, &full.admin, "default", "alice", None).await;
    let bob = common::people::person(&full.cp, &full.admin, "default", "bob", None).await;
    let carol = common::people::person(&full.cp, &full.admin, "default", "carol", None).await;
    // The namespace's team hears about its objects at a receiver of its own.
    let (addr, mut inbox) = receiver().await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "team-hook"},
        "stringData": {"url": format!("http://{addr}/team")},
    }))
    .unwrap();
    Api::<Secret>::namespaced(full.admin.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let targets: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "captf-notifications"},
        "data": {"targets": "- name: team\n  kind: Generic\n  urlSecret: {name: team-hook, key: url}\n"},
    }))
    .unwrap();
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(full.admin.clone(), "default")
        .create(&PostParams::default(), &targets)
        .await
        .unwrap();

    // alice writes the object: every change waits for two people other than her. Her first
    // version opens the thing to the world.
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
        "metadata": {
            "name": "governed", "namespace": "default",
            "annotations": {"captf.io/approvals-required": "2"},
        },
        "spec": {
            "module": { "source": full.modules.url("cluster.tar.gz") },
            "variables": {"name": "g", "content": "allow 0.0.0.0/0"},
            "drift": {"interval": "0"},
            "guard": {"approval": "Always"},
        },
    }))
    .unwrap();
    let as_alice = common::people::client(&alice).await;
    let hers = Api::<DynamicObject>::namespaced_with(as_alice, "default", &common::terraform_clusters());
    hers.create(&PostParams::default(), &object).await.unwrap();

    // The platform's policy denies it: nothing planned is kept for approval, nothing applied.
    full.booked("governed", captf_shared::Op::Apply, 1, "policy-denied")
        .await;
    let o = full
        .until("governed", "UpToDate False/PolicyDenied", |o| {
            o["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "UpToDate" && c["reason"] == "PolicyDenied")
            })
        })
        .await;
    let up = o["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "UpToDate")
        .unwrap()
        .clone();
    let why = up["message"].as_str().unwrap();
    assert!(
        why.contains("data.main.deny: captftest_thing.main: opens it to the whole internet"),
        "{why}"
    );
    assert!(o["status"]["pendingPlan"].is_null(), "{o}");
    assert!(full.content("g").is_none(), "nothing applied");
    let denied = notified(&mut inbox, "of the denial", |n| n["event"] == "policy-denied").await;
    assert!(denied.to_string().contains("captftest_thing.main"), "{denied}");

    // alice narrows it: the plan only creates, and still waits (approval Always).
    hers.patch(
        "governed",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"variables": {"name": "g", "content": "allow 10.0.0.0/8"}}})),
    )
    .await
    .unwrap();
    full.booked("governed", captf_shared::Op::Apply, 2, "blocked").await;
    let o = full
        .until("governed", "a pending plan", |o| {
            o["status"]["pendingPlan"]["hash"].is_string()
        })
        .await;
    let hash = o["status"]["pendingPlan"]["hash"].as_str().unwrap().to_string();
    assert_eq!(o["status"]["pendingPlan"]["add"], 1, "{o}");
    assert_eq!(o["status"]["pendingPlan"]["destroy"], 0, "{o}");
    assert!(full.content("g").is_none(), "nothing applied unapproved");
    assert_eq!(
        o["metadata"]["annotations"]["captf.io/spec-changed-by"],
        common::people::user("default", "alice")
    );
    // The team hears of it, with the line that approves exactly this plan.
    let waiting = notified(&mut inbox, "of the plan awaiting approval", |n| {
        n["event"] == "awaiting-approval"
    })
    .await;
    let line = format!("kubectl captf approve terraformcluster/governed -n default --hash {hash}");
    assert!(waiting.to_string().contains(&line), "{waiting}");

    // alice's own approval is refused; bob's counts, and one more is needed.
    let (ok, out) = plugin(&alice, &["approve", "tfc/governed", "--hash", &hash]);
    assert!(!ok, "{out}");
    assert!(out.contains("last changed this object's spec"), "{out}");
    let (ok, out) = plugin(&bob, &["approve", "tfc/governed", "--hash", &hash]);
    assert!(ok, "{out}");
    assert!(out.contains("1 of 2 approvals"), "{out}");
    let (ok, out) = plugin(&bob, &["plan", "tfc/governed"]);
    assert!(ok && out.contains("waits for more approvals"), "{out}");
    assert!(out.contains("1 more needed"), "{out}");
    // The policy's warning is shown with the plan it was about.
    assert!(
        out.contains("data.main.warn: captftest_thing.main is new: give it an owner"),
        "{out}"
    );

    // carol's is the second: the apply carries both, and creates the thing.
    let (ok, out) = plugin(&carol, &["approve", "tfc/governed", "--hash", &hash]);
    assert!(ok, "{out}");
    let a3 = full.booked("governed", captf_shared::Op::Apply, 3, "succeeded").await;
    let annotations = a3.metadata.annotations.unwrap();
    assert_eq!(annotations["captf.io/approved-plan"], hash);
    assert_eq!(
        annotations["captf.io/approved-by"],
        format!(
            "{}, {}",
            common::people::user("default", "bob"),
            common::people::user("default", "carol")
        ),
        "the apply started only once both had approved"
    );
    assert_eq!(full.content("g").as_deref(), Some("allow 10.0.0.0/8"));
    full.until("governed", "Ready", ready).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_destroys_removes_the_finalizer_and_the_garbage_collector_takes_what_the_object_owned_but_the_state() {
    let Some(full) = Full::start().await else { return };
    full.create("doomed", json!({"name": "gone", "content": "one"})).await;
    full.until("doomed", "Ready", ready).await;
    assert!(full.content("gone").is_some());
    let sas: Api<ServiceAccount> = Api::namespaced(full.admin.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(full.admin.clone(), "default");
    let account = "captf-runner-doomed-tc";
    sas.get(account).await.unwrap();
    secrets.get("captf-inputs-doomed-tc").await.unwrap();

    full.clusters().delete("doomed", &Default::default()).await.unwrap();
    let clusters = full.clusters();
    wait_within("the object gone", PATIENCE, || {
        let clusters = clusters.clone();
        async move { clusters.get_opt("doomed").await.unwrap().is_none().then_some(()) }
    })
    .await;
    assert!(full.content("gone").is_none(), "destroyed by real OpenTofu");
    // The real garbage collector takes what the object owned; the state is no one's.
    wait_within("the owned objects collected", PATIENCE, || {
        let (sas, secrets) = (sas.clone(), secrets.clone());
        async move {
            let sa = sas.get_opt(account).await.unwrap();
            let inputs = secrets.get_opt("captf-inputs-doomed-tc").await.unwrap();
            let jobs: Api<Job> = Api::namespaced(secrets.clone().into_client(), "default");
            let id = captf_shared::names::object_id(captf_shared::Kind::TerraformCluster, "default", "doomed");
            let left = jobs
                .list(&ListParams::default().labels(&format!("captf.io/object={id}")))
                .await
                .unwrap()
                .items
                .len();
            (sa.is_none() && inputs.is_none() && left == 0).then_some(())
        }
    })
    .await;
    // The state Secret stays, released by the object, and its data went with the destroy: the
    // next object of the name takes over nothing a destroy Job's module may have written.
    let state = secrets.get("tfstate-default-doomed-tc").await.unwrap();
    let released_by = state
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("captf.io/released-by"))
        .cloned();
    assert!(released_by.is_some_and(|u| !u.is_empty()), "{:?}", state.metadata);
    assert!(
        state.data.as_ref().is_none_or(|d| d.is_empty()),
        "the destroyed state's data is dropped as it is released"
    );
    let mut controller = full.controller;
    assert!(controller.try_wait().unwrap().is_none(), "the controller exited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_drift_is_found_and_remediated() {
    let Some(full) = Full::start().await else { return };
    // The shortest drift interval the webhook allows: the check comes a minute after the apply.
    full.create_with(
        "drifty",
        json!({"name": "d", "content": "one"}),
        json!({"interval": "1m", "remediation": "Auto"}),
    )
    .await;
    full.until("drifty", "Ready", ready).await;
    // Someone changes the thing behind OpenTofu's back.
    full.world
        .write(&Thing {
            name: "d".into(),
            content: "tampered".into(),
        })
        .unwrap();
    full.booked("drifty", captf_shared::Op::Drift, 2, "succeeded").await;
    let a3 = full.booked("drifty", captf_shared::Op::Apply, 3, "succeeded").await;
    assert_eq!(a3.metadata.annotations.unwrap()["captf.io/reason"], "DriftRemediation");
    assert_eq!(full.content("d").as_deref(), Some("one"), "the drift was remediated");
}

/// The pids below `pid`, itself included.
fn process_tree(pid: i32) -> Vec<i32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        if let Ok(children) = std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")) {
            out.extend(children.split_whitespace().filter_map(|c| c.parse::<i32>().ok()));
        }
        i += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_mid_apply_leaves_its_lock_and_the_next_job_force_unlocks_it() {
    let Some(full) = Full::start().await else { return };
    std::fs::remove_file(full.world_dir().join(GATE)).unwrap();
    full.create("killed", json!({"name": "k", "content": "one"})).await;
    let busy = full.world.busy_marker("k").unwrap();
    wait_within("the apply holding in the middle of its change", PATIENCE, || {
        let busy = busy.clone();
        async move { busy.exists().then_some(()) }
    })
    .await;
    let (holder, info) = full.lock("killed-tc").await;
    let info = info.expect("the runner holds the lock");
    let id = info["ID"].as_str().unwrap().to_string();
    assert_eq!(holder, json!(id));
    // kill -9 of the whole container: OpenTofu never gets to unlock.
    for outer in full.kubelet.pids() {
        for pid in process_tree(outer).into_iter().rev() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
    full.booked("killed", captf_shared::Op::Apply, 1, "failed").await;
    assert_eq!(
        full.lock("killed-tc").await.0,
        json!(id),
        "left held by the dead runner"
    );
    std::fs::write(full.world_dir().join(GATE), "").unwrap();
    // After the backoff (a minute, in wall time) the next apply force-unlocks the dead runner's lock.
    let a2 = full.booked("killed", captf_shared::Op::Apply, 2, "succeeded").await;
    assert_eq!(a2.metadata.annotations.unwrap()["captf.io/force-unlock"], id);
    assert!(full.lock("killed-tc").await.0.is_null(), "released");
    assert_eq!(full.content("k").as_deref(), Some("one"));
}

/// A workstation's Terraform 1.0.3 on an object's state, outside any pod, through the admin's
/// kubeconfig: it holds the lock while its apply waits on its own gate.
struct Workstation {
    child: tokio::process::Child,
    gate: std::path::PathBuf,
    _sandbox: captf_testprovider::harness::Sandbox,
}

impl Workstation {
    async fn hold_lock(full: &Full, suffix: &str) -> Workstation {
        let sb = captf_testprovider::harness::Sandbox::new().unwrap();
        let dir = sb.path().join("workstation");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("main.tf"), THING_MODULE).unwrap();
        std::fs::write(
            dir.join("backend.tf"),
            format!(
                "terraform {{\n  backend \"kubernetes\" {{\n    secret_suffix = \"{suffix}\"\n    namespace = \"default\"\n    config_path = \"{}\"\n  }}\n}}\n",
                full.cp.admin_kubeconfig().display()
            ),
        )
        .unwrap();
        let gate = sb.path().join("gate");
        let tf = |args: &[&str]| {
            let mut c = tokio::process::Command::new(&sb.terraform);
            c.args(args)
                .current_dir(&dir)
                .envs(sb.env())
                .env(HOLD_ENV, &gate)
                .stdin(std::process::Stdio::null())
                .kill_on_drop(true);
            c
        };
        let init = tf(&["init", "-input=false", "-no-color"]).output().await.unwrap();
        assert!(
            init.status.success(),
            "workstation init: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let child = tf(&["apply", "-auto-approve", "-input=false", "-no-color", "-var", "name=w"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let busy = World::new(sb.world.clone()).busy_marker("w").unwrap();
        wait_within("the workstation holding the lock", PATIENCE, || {
            let busy = busy.clone();
            async move { busy.exists().then_some(()) }
        })
        .await;
        Workstation {
            child,
            gate,
            _sandbox: sb,
        }
    }

    async fn release(mut self) {
        std::fs::write(&self.gate, "").unwrap();
        let status = tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "the workstation's apply failed: {status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workstation_holding_the_lock_is_reported_as_state_locked_and_never_unlocked() {
    let Some(full) = Full::start().await else { return };
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
        "metadata": { "name": "shared", "namespace": "default" },
        "spec": {
            "module": { "source": full.modules.url("cluster.tar.gz") },
            "variables": { "name": "s", "content": "one" },
            "drift": { "interval": "0" },
            "jobs": { "lockTimeoutSeconds": 5 },
        },
    }))
    .unwrap();
    full.clusters().create(&PostParams::default(), &object).await.unwrap();
    full.until("shared", "Ready", ready).await;

    let ws = Workstation::hold_lock(&full, "shared-tc").await;
    let (holder, info) = full.lock("shared-tc").await;
    let info = info.expect("the workstation holds the lock");
    let id = info["ID"].as_str().unwrap().to_string();
    let who = info["Who"].as_str().unwrap().to_string();
    assert_eq!(holder, json!(id));
    // New inputs: the apply waits its lock timeout and fails; the controller names the holder.
    full.patch(
        "shared",
        json!({"spec": {"variables": {"name": "s", "content": "two"}}}),
    )
    .await;
    let a2 = full.booked("shared", captf_shared::Op::Apply, 2, "failed").await;
    assert!(!a2.metadata.annotations.unwrap().contains_key("captf.io/force-unlock"));
    let o = full
        .until("shared", "StateLocked naming the holder", |o| {
            o["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "StateReadable" && c["reason"] == "StateLocked")
            })
        })
        .await;
    let message = o["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "StateReadable")
        .unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains(&who), "{message} does not name {who}");
    assert_eq!(full.lock("shared-tc").await.0, json!(id), "never unlocked");
    // Once the workstation is done, the next apply proceeds without any force-unlock.
    ws.release().await;
    let a3 = full.booked("shared", captf_shared::Op::Apply, 3, "succeeded").await;
    assert!(!a3.metadata.annotations.unwrap().contains_key("captf.io/force-unlock"));
    assert_eq!(full.content("s").as_deref(), Some("two"));
}

//! The simulated Job controller and kubelet: a created Job gets one pod `<job>-<5 chars>` whose
//! runner plays its [`RunnerScript`] in simulated time; Job conditions follow Kubernetes'
//! Job controller (FailureTarget then Failed; SuccessCriteriaMet then Complete).

use std::collections::BTreeMap;

use captf_shared::keys::ANNOTATION_TF_LOCK_INFO;
use captf_shared::protocol::{Phase, RunResult, RunnerResult, env};
use captf_shared::{Op, names};
use jiff::Timestamp;
use serde_json::{Value, json};

use crate::resources::ResourceDef;
use crate::runner::{RunnerAction, RunnerScript, job_env, job_op, phase_of};
use crate::store::{Sub, World, child, fmt_micro, fmt_time, later, set};

const JOBS: &str = "batch/jobs";
const PODS: &str = "/pods";
const LEASES: &str = "coordination.k8s.io/leases";

/// One running runner pod.
#[derive(Clone, Debug)]
struct Runner {
    ns: String,
    job: String,
    job_uid: String,
    pod: String,
    script: RunnerScript,
    op: Option<Op>,
    env: BTreeMap<String, String>,
    /// When the script's action ends (None: never, it hangs).
    finish_at: Option<Timestamp>,
    deadline: Option<Timestamp>,
    /// Waiting for a foreign lock: trying again at `finish_at`, giving up at `lock_wait_end`.
    waiting_for_lock: bool,
    /// When `-lock-timeout` runs out.
    lock_wait_end: Option<Timestamp>,
    /// The delay before the next try (Terraform's `LockWithContext`: 1s, doubling to 16s).
    lock_poll: std::time::Duration,
    /// The lock ID this runner holds.
    holds_lock: Option<String>,
    /// SIGTERM received (and why); the runner ends at `finish_at`.
    sigterm: Option<Sigterm>,
}

/// Why a runner got SIGTERM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sigterm {
    Deadline,
    Evicted,
}

/// Terraform's lock retry (`statemgr.LockWithContext`): the first retry after 1s, each delay
/// doubling, at most 16s apart, until `-lock-timeout` runs out.
const LOCK_POLL_FIRST: std::time::Duration = std::time::Duration::from_secs(1);
const LOCK_POLL_MAX: std::time::Duration = std::time::Duration::from_secs(16);

/// The next lock try: `now + poll`, but not after the lock timeout ends.
fn next_lock_try(now: Timestamp, poll: std::time::Duration, end: Option<Timestamp>) -> Option<Timestamp> {
    match (later(now, poll), end) {
        (Some(t), Some(e)) => Some(t.min(e)),
        (t, e) => t.or(e),
    }
}

/// A pod whose container runs as a real process (`crate::process`).
#[derive(Clone, Debug)]
struct ProcPod {
    /// The pod's Job and deadline (its script is unused).
    runner: Runner,
    /// The pod's `terminationGracePeriodSeconds`.
    grace: std::time::Duration,
    /// SIGKILL at this time (set by SIGTERM).
    kill_at: Option<Timestamp>,
    /// SIGTERM sent, and why.
    sigterm: Option<Sigterm>,
}

/// The runners of the simulated kubelet.
#[derive(Clone, Debug, Default)]
pub struct Kubelet {
    runners: BTreeMap<(String, String), Runner>,
    /// Pods whose container runs as a process, by (namespace, pod).
    processes: BTreeMap<(String, String), ProcPod>,
    /// The process kubelet, when the simulator runs some images as processes.
    pub process: Option<std::sync::Arc<crate::process_kubelet::ProcessKubelet>>,
    /// Logs a test gave pods (`Sim::set_pod_log`), by (namespace, pod).
    pub logs: BTreeMap<(String, String), String>,
    /// The Jobs whose pod was started as a process, by (namespace, Job).
    pub process_jobs: std::collections::BTreeSet<(String, String)>,
}

impl Kubelet {
    /// Pods whose container runs as a process and has not ended yet.
    pub fn process_pods(&self) -> Vec<(String, String)> {
        self.processes.keys().cloned().collect()
    }

    /// Pods whose runner is still running (scripted or a process).
    pub fn running(&self) -> Vec<(String, String)> {
        let mut all: Vec<_> = self.runners.keys().chain(self.processes.keys()).cloned().collect();
        all.sort();
        all
    }
}

/// How a pod ends.
struct PodEnd {
    exit_code: i32,
    reason: &'static str,
    message: Option<String>,
    /// `None`: the Job succeeds. Else the Job's failure reason and message.
    job_failure: Option<(&'static str, &'static str)>,
}

const DEADLINE: (&str, &str) = ("DeadlineExceeded", "Job was active longer than specified deadline");
const BACKOFF: (&str, &str) = ("BackoffLimitExceeded", "Job has reached the specified backoff limit");
/// What a scripted runner's successful apply leaves in an empty state Secret, as Terraform's
/// kubernetes backend would: a gzip-compressed state (version 4, no resources), base64 as in a
/// Secret's `data`.
const SCRIPTED_STATE_B64: &str = "H4sIAAAAAAACAw3HPQqAMAwG0Lt8cxwEp1xFHEqJEugfSetSend925t4xVxrAR8EF9OQwDshaZHwCBgxtH5vrhmEOnob3cFzEUy8Dovy97zWB9OC0QFKAAAA";

/// The string at a JSON pointer, or `""` when it is absent or not a string.
fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

fn condition(type_: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": type_, "status": "True", "reason": reason, "message": message,
           "lastProbeTime": now, "lastTransitionTime": now})
}

fn lock_info_json(id: &str, operation: &str, who: &str, created: Timestamp) -> String {
    json!({"ID": id, "Operation": operation, "Info": "", "Who": who, "Version": "1.9.5",
           "Created": fmt_micro(created), "Path": ""})
    .to_string()
}

impl World {
    /// Hook: an object was created.
    pub(crate) fn after_create(&mut self, def: &ResourceDef, obj: &Value) {
        if def.id() == JOBS {
            self.start_job(obj);
        }
    }

    /// Hook: an object was removed for good.
    pub(crate) fn after_remove(&mut self, def: &ResourceDef, obj: &Value) {
        if def.id() != PODS {
            return;
        }
        let ns = str_at(obj, "/metadata/namespace");
        let name = str_at(obj, "/metadata/name");
        let key = (ns.to_string(), name.to_string());
        if let Some(mut p) = self.kubelet.processes.get(&key).cloned() {
            // A running container's pod deleted: SIGTERM, SIGKILL after the grace period; the
            // Job counts the pod as failed.
            if p.sigterm.is_none() {
                p.sigterm = Some(Sigterm::Evicted);
                p.runner.deadline = None;
                p.kill_at = later(self.now(), p.grace);
                if let Some(pk) = &self.kubelet.process {
                    pk.terminate(&key);
                }
                self.kubelet.processes.insert(key, p.clone());
            }
            self.fail_job(&p.runner, BACKOFF);
            return;
        }
        let Some(r) = self.kubelet.runners.remove(&key) else {
            return;
        };
        // A running pod deleted: SIGTERM (the real runner unlocks on interrupt) and the Job
        // counts the pod as failed (backoffLimit 0 → Failed).
        if !matches!(r.script.action, RunnerAction::DieHoldingLock { .. }) {
            self.release_lock(&r);
        }
        self.fail_job(&r, BACKOFF);
    }

    fn start_job(&mut self, job: &Value) {
        if job.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true) {
            return;
        }
        let now = self.now();
        let ns = str_at(job, "/metadata/namespace").to_string();
        let name = str_at(job, "/metadata/name").to_string();
        let uid = str_at(job, "/metadata/uid").to_string();
        let process = self.kubelet.process.clone().filter(|pk| {
            pk.image_of(&json!({"spec": job.pointer("/spec/template/spec").cloned().unwrap_or_default()}))
                .is_some()
        });
        // A script queued for this Job wins over the process image; the rule and the default
        // script never replace a real process (see `crate::runner`).
        let (process, script) = match (process, self.scripts.take_queued(job)) {
            (_, Some(queued)) => (None, queued),
            (Some(pk), None) => (Some(pk), RunnerScript::hang()),
            (None, None) => (None, self.scripts.choose(job)),
        };
        let mut pod_name = format!("{name}-{}", self.rng.name_suffix(names::POD_SUFFIX_LEN));
        while self.try_get(PODS, &ns, &pod_name).is_some() {
            pod_name = format!("{name}-{}", self.rng.name_suffix(names::POD_SUFFIX_LEN));
        }
        let template = job.pointer("/spec/template").cloned().unwrap_or_else(|| json!({}));
        let mut labels = template
            .pointer("/metadata/labels")
            .cloned()
            .unwrap_or_else(|| json!({}));
        for (k, v) in [
            ("batch.kubernetes.io/controller-uid", &uid),
            ("batch.kubernetes.io/job-name", &name),
            ("controller-uid", &uid),
            ("job-name", &name),
        ] {
            set(&mut labels, k, json!(v));
        }
        let mut spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
        set(&mut spec, "hostname", json!(pod_name));
        set(&mut spec, "nodeName", json!("sim-node"));
        let container = spec
            .pointer("/containers/0/name")
            .and_then(Value::as_str)
            .unwrap_or("runner")
            .to_string();
        let image = str_at(&spec, "/containers/0/image").to_string();
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": pod_name, "namespace": ns, "generateName": format!("{name}-"), "labels": labels,
                "annotations": template.pointer("/metadata/annotations").cloned().unwrap_or_else(|| json!({})),
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
                                     "controller": true, "blockOwnerDeletion": true}],
            },
            "spec": spec,
            "status": {"phase": "Pending", "qosClass": "BestEffort"},
        });
        if self.put(PODS, pod).is_err() {
            return;
        }
        let t = fmt_time(now);
        let mut job_now = job.clone();
        job_now["status"] = json!({"startTime": t, "active": 1, "ready": 0, "terminating": 0,
                                   "uncountedTerminatedPods": {}});
        let _ = self.write_status(JOBS, &ns, &name, job_now["status"].clone());
        if let Some(mut p) = self.try_get(PODS, &ns, &pod_name).cloned() {
            let conds: Vec<Value> = ["PodScheduled", "Initialized", "ContainersReady", "Ready"]
                .iter()
                .map(|c| json!({"type": c, "status": "True", "lastProbeTime": null, "lastTransitionTime": t}))
                .collect();
            p["status"] = json!({
                "phase": "Running", "startTime": t, "hostIP": "10.0.0.1", "podIP": "10.0.1.1", "qosClass": "BestEffort",
                "conditions": conds,
                "containerStatuses": [{"name": container, "image": image, "imageID": "", "ready": true,
                    "restartCount": 0, "started": true, "state": {"running": {"startedAt": t}}}],
            });
            let _ = self.write_status(PODS, &ns, &pod_name, p["status"].clone());
        }
        let mut st = job_now["status"].clone();
        st["ready"] = json!(1);
        let _ = self.write_status(JOBS, &ns, &name, st);
        let deadline = job
            .pointer("/spec/activeDeadlineSeconds")
            .and_then(Value::as_i64)
            .and_then(|s| later(now, std::time::Duration::from_secs(s.max(0) as u64)));
        let mut r = Runner {
            ns: ns.clone(),
            job: name,
            job_uid: uid,
            pod: pod_name.clone(),
            op: job_op(job),
            env: job_env(job),
            finish_at: None,
            deadline,
            waiting_for_lock: false,
            lock_wait_end: None,
            lock_poll: LOCK_POLL_FIRST,
            holds_lock: None,
            sigterm: None,
            script,
        };
        if let Some(pk) = process {
            self.start_process(&pk, r, job);
            return;
        }
        // init, then force-unlock of a handed-over lock ID.
        if r.script.force_unlock
            && let Some(id) = r.env.get(env::FORCE_UNLOCK_ID).filter(|s| !s.is_empty()).cloned()
        {
            self.force_unlock(&r, &id);
        }
        let run = r.script.duration;
        match r.script.action.clone() {
            RunnerAction::Hang => {}
            RunnerAction::Realistic { .. } => {
                if self.lock_holder(&r).is_some() {
                    r.waiting_for_lock = true;
                    r.lock_wait_end = later(now, self.lock_timeout(&r));
                    r.finish_at = next_lock_try(now, r.lock_poll, r.lock_wait_end);
                } else {
                    self.take_lock(&mut r, None);
                    r.finish_at = later(now, run);
                }
            }
            RunnerAction::DieHoldingLock { lock_id } => {
                // Terraform cannot take a lock somebody else holds.
                if self.lock_holder(&r).is_none() {
                    self.take_lock(&mut r, lock_id);
                }
                r.finish_at = later(now, run);
            }
            _ => r.finish_at = later(now, run),
        }
        self.kubelet.runners.insert((ns, pod_name), r);
        self.process_due();
    }

    fn write_status(&mut self, def_id: &str, ns: &str, name: &str, status: Value) -> Option<Value> {
        let def = self.def(def_id).ok()?;
        let mut o = self.try_get(def_id, ns, name).cloned()?;
        o["status"] = status;
        if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        self.update(&def, ns, name, o, Sub::Status).ok()
    }

    fn lock_lease_name(&self, r: &Runner) -> Option<(String, String)> {
        let suffix = r.env.get(env::STATE_SUFFIX).filter(|s| !s.is_empty())?;
        let ns = r
            .env
            .get(env::NAMESPACE)
            .filter(|s| !s.is_empty())
            .unwrap_or(&r.ns)
            .clone();
        Some((ns, names::lock_lease_name(suffix)))
    }

    fn lock_holder(&self, r: &Runner) -> Option<String> {
        let (ns, name) = self.lock_lease_name(r)?;
        self.try_get(LEASES, &ns, &name)?
            .pointer("/spec/holderIdentity")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(String::from)
    }

    fn lock_timeout(&self, r: &Runner) -> std::time::Duration {
        r.env
            .get(env::LOCK_TIMEOUT)
            .and_then(|s| captf_shared::duration::parse(s).ok())
            .unwrap_or_default()
    }

    fn force_unlock(&mut self, r: &Runner, id: &str) {
        if let Some((ns, name)) = self.lock_lease_name(r)
            && self.lock_holder(r).as_deref() == Some(id)
        {
            self.unlock_lease(&ns, &name);
        }
    }

    /// Terraform's unlock: holderIdentity null, lock-info annotation removed, Lease kept.
    pub fn unlock_lease(&mut self, ns: &str, name: &str) {
        let Some(mut lease) = self.try_get(LEASES, ns, name).cloned() else {
            return;
        };
        if let Some(s) = lease.get_mut("spec").and_then(Value::as_object_mut) {
            s.remove("holderIdentity");
        }
        if let Some(a) = lease
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            a.remove(ANNOTATION_TF_LOCK_INFO);
        }
        if let Some(m) = lease.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        let _ = self.put(LEASES, lease);
    }

    /// Write Terraform's lock Lease `lock-tfstate-default-<suffix>` held by `lock_id` with `who`.
    pub fn hold_lock(&mut self, ns: &str, suffix: &str, lock_id: &str, who: &str, operation: &str) {
        let name = names::lock_lease_name(suffix);
        let info = lock_info_json(lock_id, operation, who, self.now());
        let labels = json!({"tfstate": "true", "tfstateSecretSuffix": suffix, "tfstateWorkspace": "default",
                            "app.kubernetes.io/managed-by": "terraform"});
        let lease = match self.try_get(LEASES, ns, &name).cloned() {
            Some(mut l) => {
                set(child(&mut l, "spec"), "holderIdentity", json!(lock_id));
                let annotations = child(child(&mut l, "metadata"), "annotations");
                set(annotations, ANNOTATION_TF_LOCK_INFO, json!(info));
                if let Some(m) = l.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("resourceVersion");
                }
                l
            }
            None => json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": ns, "labels": labels,
                             "annotations": {ANNOTATION_TF_LOCK_INFO: info}},
                "spec": {"holderIdentity": lock_id}}),
        };
        let _ = self.put(LEASES, lease);
    }

    fn take_lock(&mut self, r: &mut Runner, lock_id: Option<String>) {
        let Some((ns, _)) = self.lock_lease_name(r) else { return };
        let suffix = r.env.get(env::STATE_SUFFIX).cloned().unwrap_or_default();
        let id = lock_id.unwrap_or_else(|| self.rng.uuid());
        let operation = if r.op == Some(Op::Drift) {
            "OperationTypePlan"
        } else {
            "OperationTypeApply"
        };
        self.hold_lock(&ns, &suffix, &id, &format!("root@{}", r.pod), operation);
        r.holds_lock = Some(id);
    }

    fn release_lock(&mut self, r: &Runner) {
        if let (Some(id), Some((ns, name))) = (&r.holds_lock, self.lock_lease_name(r))
            && self.lock_holder(r).as_deref() == Some(id.as_str())
        {
            self.unlock_lease(&ns, &name);
        }
    }

    /// The earliest time a runner has something to do.
    pub fn next_due(&self) -> Option<Timestamp> {
        let processes = self
            .kubelet
            .processes
            .values()
            .flat_map(|p| [p.runner.deadline.filter(|_| p.sigterm.is_none()), p.kill_at]);
        self.kubelet
            .runners
            .values()
            .flat_map(|r| [r.finish_at, r.deadline])
            .chain(processes)
            .flatten()
            .min()
    }

    /// Run every runner step due at the current time.
    pub fn process_due(&mut self) {
        self.signal_due_processes();
        loop {
            let now = self.now();
            let due: Vec<(String, String)> = self
                .kubelet
                .runners
                .iter()
                .filter(|(_, r)| r.finish_at.is_some_and(|t| t <= now) || r.deadline.is_some_and(|t| t <= now))
                .map(|(k, _)| k.clone())
                .collect();
            if due.is_empty() {
                return;
            }
            for key in due {
                self.step(&key);
            }
        }
    }

    /// Move the clock to `target`, stopping at every runner step on the way.
    pub fn advance_to(&mut self, target: Timestamp) {
        self.process_due();
        while let Some(t) = self.next_due().filter(|t| *t <= target) {
            if t > self.now() {
                self.set_now(t);
            }
            self.process_due();
        }
        if target > self.now() {
            self.set_now(target);
        }
    }

    fn step(&mut self, key: &(String, String)) {
        let Some(mut r) = self.kubelet.runners.get(key).cloned() else {
            return;
        };
        let now = self.now();
        let phase = phase_of(r.op);
        if let Some(why) = r.sigterm {
            // The runner's shutdown after SIGTERM is over.
            self.end_after_sigterm(&r, why);
            return;
        }
        if r.deadline.is_some_and(|d| d <= now) {
            // The Job controller kills the pod: SIGTERM to the runner.
            self.sigterm(key, r, Sigterm::Deadline);
            return;
        }
        let end = match r.script.action.clone() {
            RunnerAction::Hang => return,
            RunnerAction::Finish(mut result) => {
                if result.phase == Phase::Apply && matches!(result.result, RunResult::Succeeded | RunResult::Failed) {
                    result.phase = phase;
                }
                let code = result.exit_code();
                PodEnd {
                    exit_code: code,
                    reason: if code == 0 { "Completed" } else { "Error" },
                    message: Some(result.to_termination_message()),
                    job_failure: (code != 0).then_some(BACKOFF),
                }
            }
            RunnerAction::Exit { code, message } => PodEnd {
                exit_code: code,
                reason: if code == 0 { "Completed" } else { "Error" },
                message,
                job_failure: (code != 0).then_some(BACKOFF),
            },
            RunnerAction::Evicted => {
                self.sigterm(key, r, Sigterm::Evicted);
                return;
            }
            RunnerAction::DieHoldingLock { .. } => PodEnd {
                exit_code: 137,
                reason: "OOMKilled",
                message: None,
                job_failure: Some(BACKOFF),
            },
            RunnerAction::Realistic {
                outputs,
                sensitive,
                drift,
            } => {
                if r.waiting_for_lock {
                    let held = self.lock_holder(&r).is_some();
                    if held && r.lock_wait_end.is_some_and(|end| now < end) {
                        // Still held and time left: try again later, like Terraform does.
                        r.lock_poll = (r.lock_poll * 2).min(LOCK_POLL_MAX);
                        r.finish_at = next_lock_try(now, r.lock_poll, r.lock_wait_end);
                        self.kubelet.runners.insert(key.clone(), r);
                        return;
                    }
                    if held {
                        let lock_phase = if r.op == Some(Op::Apply) || r.op == Some(Op::Drift) {
                            Phase::Plan
                        } else {
                            phase
                        };
                        let msg = "Error acquiring the state lock: lock is held by another client";
                        let result = RunnerResult::new(RunResult::Failed, lock_phase, msg);
                        PodEnd {
                            exit_code: 1,
                            reason: "Error",
                            message: Some(result.to_termination_message()),
                            job_failure: Some(BACKOFF),
                        }
                    } else {
                        // The lock was released while it waited: take it and run.
                        r.waiting_for_lock = false;
                        self.take_lock(&mut r, None);
                        r.finish_at = later(now, r.script.duration);
                        self.kubelet.runners.insert(key.clone(), r);
                        return;
                    }
                } else {
                    self.release_lock(&r);
                    let mut result = match r.op {
                        Some(Op::Drift) => crate::runner::drift_result(drift),
                        _ => RunnerResult::new(RunResult::Succeeded, phase, ""),
                    };
                    if !outputs.is_empty() && matches!(r.op, Some(Op::Apply) | Some(Op::Refresh) | None) {
                        self.write_outputs(&r, &outputs, &sensitive);
                        let public: BTreeMap<String, Value> =
                            outputs.into_iter().filter(|(k, _)| !sensitive.contains(k)).collect();
                        result.outputs = Some(public);
                    }
                    PodEnd {
                        exit_code: 0,
                        reason: "Completed",
                        message: Some(result.to_termination_message()),
                        job_failure: None,
                    }
                }
            }
        };
        if end.exit_code == 0 && r.op == Some(Op::Apply) {
            self.write_state_if_empty(&r);
        }
        self.end(&r, end);
    }

    /// After a successful apply, Terraform has written the state: a scripted runner puts a small
    /// one in the object's state Secret when it holds none (a state a test put there is kept).
    /// The Secret is never created here: the controller makes it before the first Job.
    fn write_state_if_empty(&mut self, r: &Runner) {
        let Some(suffix) = r.env.get(env::STATE_SUFFIX).cloned() else {
            return;
        };
        let name = names::state_secret_name(&suffix);
        let Some(mut secret) = self.try_get("/secrets", &r.ns, &name).cloned() else {
            return;
        };
        let has_state = secret
            .pointer("/data/tfstate")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
        if has_state {
            return;
        }
        set(child(&mut secret, "data"), "tfstate", json!(SCRIPTED_STATE_B64));
        if let Some(m) = secret.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        let _ = self.put("/secrets", secret);
    }

    /// After a successful apply or refresh the real runner writes `output -json` (every output,
    /// with its `sensitive` flag) and the public outputs into the object's outputs Secret; so
    /// does a realistic script. Like the state, the Secret is never created here.
    fn write_outputs(
        &mut self,
        r: &Runner,
        outputs: &BTreeMap<String, Value>,
        sensitive: &std::collections::BTreeSet<String>,
    ) {
        use base64::Engine as _;
        let Some(suffix) = r.env.get(env::STATE_SUFFIX).cloned() else {
            return;
        };
        let name = names::outputs_secret_name(&suffix);
        let Some(mut secret) = self.try_get("/secrets", &r.ns, &name).cloned() else {
            return;
        };
        let doc: serde_json::Map<String, Value> = outputs
            .iter()
            .map(|(k, v)| (k.clone(), json!({"sensitive": sensitive.contains(k), "value": v})))
            .collect();
        let public: serde_json::Map<String, Value> = outputs
            .iter()
            .filter(|(k, _)| !sensitive.contains(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let b64 = |v: &serde_json::Map<String, Value>| {
            base64::engine::general_purpose::STANDARD.encode(Value::Object(v.clone()).to_string())
        };
        let data = child(&mut secret, "data");
        set(data, captf_shared::protocol::OUTPUTS_KEY, json!(b64(&doc)));
        set(data, captf_shared::protocol::PUBLIC_OUTPUTS_KEY, json!(b64(&public)));
        if let Some(m) = secret.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        let _ = self.put("/secrets", secret);
    }

    /// SIGTERM: the Job controller marks a deadline kill (`FailureTarget`), an eviction marks
    /// the pod (`DisruptionTarget`); the runner ends after its shutdown time.
    fn sigterm(&mut self, key: &(String, String), mut r: Runner, why: Sigterm) {
        let t = fmt_time(self.now());
        match why {
            Sigterm::Deadline => {
                let (reason, message) = DEADLINE;
                self.add_job_condition(
                    &r,
                    condition("FailureTarget", reason, message, &t),
                    &[("active", json!(0)), ("ready", json!(0)), ("terminating", json!(1))],
                );
            }
            Sigterm::Evicted => self.add_disruption_target(&r),
        }
        if r.script.shutdown.is_zero() {
            self.end_after_sigterm(&r, why);
            return;
        }
        r.sigterm = Some(why);
        r.deadline = None;
        r.finish_at = later(self.now(), r.script.shutdown);
        self.kubelet.runners.insert(key.clone(), r);
    }

    fn add_disruption_target(&mut self, r: &Runner) {
        let t = fmt_time(self.now());
        let Some(pod) = self.try_get(PODS, &r.ns, &r.pod).cloned() else {
            return;
        };
        let mut st = pod.get("status").cloned().unwrap_or_else(|| json!({}));
        let mut conds: Vec<Value> = st
            .get("conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if conds.iter().any(|c| c["type"] == "DisruptionTarget") {
            return;
        }
        conds.push(
            json!({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                          "message": "Eviction API: evicting", "lastProbeTime": null, "lastTransitionTime": t}),
        );
        set(&mut st, "conditions", json!(conds));
        let _ = self.write_status(PODS, &r.ns, &r.pod, st);
    }

    fn end_after_sigterm(&mut self, r: &Runner, why: Sigterm) {
        // Terraform unlocks when it is interrupted; a runner that died holding the lock does not.
        if !matches!(r.script.action, RunnerAction::DieHoldingLock { .. }) {
            self.release_lock(r);
        }
        let (code, message) = self.sigterm_result(r, phase_of(r.op));
        let job_failure = match why {
            Sigterm::Deadline => DEADLINE,
            Sigterm::Evicted => BACKOFF,
        };
        self.end(
            r,
            PodEnd {
                exit_code: code,
                reason: "Error",
                message,
                job_failure: Some(job_failure),
            },
        );
    }

    fn sigterm_result(&self, r: &Runner, phase: Phase) -> (i32, Option<String>) {
        if r.script.interrupted_on_sigterm {
            let res = RunnerResult::new(RunResult::Interrupted, phase, "interrupted by SIGTERM");
            (res.exit_code(), Some(res.to_termination_message()))
        } else {
            (143, None)
        }
    }

    fn job_alive(&self, r: &Runner) -> Option<Value> {
        self.try_get(JOBS, &r.ns, &r.job)
            .filter(|j| j.pointer("/metadata/uid").and_then(Value::as_str) == Some(r.job_uid.as_str()))
            .cloned()
    }

    fn add_job_condition(&mut self, r: &Runner, cond: Value, patch: &[(&str, Value)]) {
        let Some(job) = self.job_alive(r) else { return };
        let mut st = job.get("status").cloned().unwrap_or_else(|| json!({}));
        let mut conds = st
            .get("conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        conds.push(cond);
        set(&mut st, "conditions", json!(conds));
        for (k, v) in patch {
            set(&mut st, k, v.clone());
        }
        let _ = self.write_status(JOBS, &r.ns, &r.job, st);
    }

    fn fail_job(&mut self, r: &Runner, (reason, message): (&str, &str)) {
        let t = fmt_time(self.now());
        let failed_already = self.job_alive(r).is_some_and(|j| {
            j.pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Failed" || c["type"] == "Complete"))
        });
        if failed_already {
            return;
        }
        let has_target = self.job_alive(r).is_some_and(|j| {
            j.pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|c| c.iter().any(|c| c["type"] == "FailureTarget"))
        });
        if !has_target {
            self.add_job_condition(
                r,
                condition("FailureTarget", reason, message, &t),
                &[("active", json!(0)), ("ready", json!(0)), ("terminating", json!(0))],
            );
        }
        self.add_job_condition(
            r,
            condition("Failed", reason, message, &t),
            &[
                ("failed", json!(1)),
                ("active", json!(0)),
                ("ready", json!(0)),
                ("terminating", json!(0)),
            ],
        );
    }

    fn end(&mut self, r: &Runner, end: PodEnd) {
        self.kubelet.runners.remove(&(r.ns.clone(), r.pod.clone()));
        let t = fmt_time(self.now());
        if let Some(pod) = self.try_get(PODS, &r.ns, &r.pod).cloned() {
            let mut st = pod.get("status").cloned().unwrap_or_else(|| json!({}));
            let mut conds: Vec<Value> = st
                .get("conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for c in conds.iter_mut() {
                if c["type"] == "Ready" || c["type"] == "ContainersReady" {
                    set(c, "status", json!("False"));
                    set(c, "reason", json!("PodCompleted"));
                    set(c, "lastTransitionTime", json!(t));
                }
            }
            set(&mut st, "conditions", json!(conds));
            set(
                &mut st,
                "phase",
                json!(if end.exit_code == 0 { "Succeeded" } else { "Failed" }),
            );
            let started = pod.pointer("/status/startTime").cloned().unwrap_or_else(|| json!(t));
            let mut term = json!({"exitCode": end.exit_code, "reason": end.reason, "startedAt": started,
                                  "finishedAt": t, "containerID": format!("sim://{}", r.pod)});
            if let Some(m) = &end.message {
                term["message"] = json!(m);
            }
            if let Some(cs) = st.pointer_mut("/containerStatuses/0") {
                set(cs, "state", json!({"terminated": term}));
                set(cs, "ready", json!(false));
                set(cs, "started", json!(false));
            }
            let _ = self.write_status(PODS, &r.ns, &r.pod, st);
        }
        match end.job_failure {
            None => {
                self.add_job_condition(
                    r,
                    condition(
                        "SuccessCriteriaMet",
                        "CompletionsReached",
                        "Reached expected number of succeeded pods",
                        &t,
                    ),
                    &[],
                );
                self.add_job_condition(
                    r,
                    condition(
                        "Complete",
                        "CompletionsReached",
                        "Reached expected number of succeeded pods",
                        &t,
                    ),
                    &[
                        ("succeeded", json!(1)),
                        ("active", json!(0)),
                        ("ready", json!(0)),
                        ("terminating", json!(0)),
                        ("completionTime", json!(t)),
                    ],
                );
            }
            Some(f) => self.fail_job(r, f),
        }
    }

    /// Evict a running pod now (as the Eviction API would): DisruptionTarget, result
    /// interrupted, Job Failed. Returns false when no runner runs in that pod.
    pub fn evict(&mut self, ns: &str, pod: &str) -> bool {
        let key = (ns.to_string(), pod.to_string());
        if let Some(p) = self.kubelet.processes.get(&key).cloned() {
            if p.sigterm.is_none() {
                self.add_disruption_target(&p.runner);
                self.sigterm_process(&key, p, Sigterm::Evicted);
            }
            return true;
        }
        let Some(r) = self.kubelet.runners.get_mut(&key) else {
            return false;
        };
        r.script.action = RunnerAction::Evicted;
        r.finish_at = Some(self.clock.borrow().to_owned());
        self.step(&key);
        true
    }
}

impl World {
    /// Start the container of a process pod, or end the pod as `ContainerCannotRun`.
    fn start_process(&mut self, pk: &crate::process_kubelet::ProcessKubelet, r: Runner, _job: &Value) {
        let key = (r.ns.clone(), r.pod.clone());
        let Some(pod) = self.try_get(PODS, &r.ns, &r.pod).cloned() else {
            return;
        };
        let grace = pod
            .pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(crate::process_kubelet::DEFAULT_GRACE_SECONDS)
            .max(0) as u64;
        let p = ProcPod {
            runner: r.clone(),
            grace: std::time::Duration::from_secs(grace),
            kill_at: None,
            sigterm: None,
        };
        self.kubelet.processes.insert(key.clone(), p);
        self.kubelet.process_jobs.insert((r.ns.clone(), r.job.clone()));
        let Some(image) = pk.image_of(&pod).cloned() else {
            return;
        };
        let started = pk
            .prepare(self, &pod, &image)
            .and_then(|prep| pk.spawn(key.clone(), prep));
        if let Err(why) = started {
            self.cannot_run(&key, &why);
        }
        self.process_due();
    }

    fn cannot_run(&mut self, key: &(String, String), why: &str) {
        let Some(p) = self.kubelet.processes.remove(key) else {
            return;
        };
        self.end(
            &p.runner,
            PodEnd {
                exit_code: crate::process_kubelet::CANNOT_RUN_EXIT_CODE,
                reason: "ContainerCannotRun",
                message: Some(format!("the container could not be started: {why}")),
                job_failure: Some(BACKOFF),
            },
        );
    }

    /// A container process ended: its pod ends with the real exit code and termination message.
    pub(crate) fn process_exited(&mut self, key: &(String, String), exit: crate::process_kubelet::Exit) {
        if let Some(pk) = &self.kubelet.process {
            pk.forget(key);
        }
        if !exit.started {
            let why = format!(
                "its set-up failed with exit code {}: {}",
                exit.code,
                exit.output_tail.trim()
            );
            self.cannot_run(key, &why);
            return;
        }
        let Some(p) = self.kubelet.processes.remove(key) else {
            return;
        };
        let job_failure = match p.sigterm {
            Some(Sigterm::Deadline) => Some(DEADLINE),
            Some(Sigterm::Evicted) => Some(BACKOFF),
            None => (exit.code != 0).then_some(BACKOFF),
        };
        self.end(
            &p.runner,
            PodEnd {
                exit_code: exit.code,
                reason: if exit.code == 0 { "Completed" } else { "Error" },
                message: exit.message,
                job_failure,
            },
        );
    }

    /// SIGKILL to a running container now, as when it dies (out of memory, the node lost):
    /// nothing of it gets to clean up. False when no container process runs in that pod.
    pub fn kill_container(&mut self, ns: &str, pod: &str) -> bool {
        let key = (ns.to_string(), pod.to_string());
        match (self.kubelet.processes.contains_key(&key), &self.kubelet.process) {
            (true, Some(pk)) => {
                pk.kill(&key);
                true
            }
            _ => false,
        }
    }

    /// SIGTERM to a container, SIGKILL after its grace period on the simulated clock.
    fn sigterm_process(&mut self, key: &(String, String), mut p: ProcPod, why: Sigterm) {
        p.sigterm = Some(why);
        p.kill_at = later(self.now(), p.grace);
        p.runner.deadline = None;
        self.kubelet.processes.insert(key.clone(), p);
        if let Some(pk) = &self.kubelet.process {
            pk.terminate(key);
        }
    }

    /// Deadlines and grace periods of container processes that are due.
    fn signal_due_processes(&mut self) {
        let now = self.now();
        let due: Vec<_> = self
            .kubelet
            .processes
            .iter()
            .filter(|(_, p)| {
                (p.sigterm.is_none() && p.runner.deadline.is_some_and(|d| d <= now))
                    || p.kill_at.is_some_and(|k| k <= now)
            })
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect();
        for (key, mut p) in due {
            if p.kill_at.is_some_and(|k| k <= now) {
                p.kill_at = None;
                self.kubelet.processes.insert(key.clone(), p);
                if let Some(pk) = &self.kubelet.process {
                    pk.kill(&key);
                }
                continue;
            }
            // The Job controller kills the pod at its deadline.
            let t = fmt_time(now);
            let (reason, message) = DEADLINE;
            self.add_job_condition(
                &p.runner,
                condition("FailureTarget", reason, message, &t),
                &[("active", json!(0)), ("ready", json!(0)), ("terminating", json!(1))],
            );
            self.sigterm_process(&key, p, Sigterm::Deadline);
        }
    }
}

/// The log of a runner pod as `GET pods/<name>/log` serves it: the text a test gave the pod, or
/// else lines made from the pod itself (its Job and op, and once it ended the plan and the
/// runner's result), in the shape of the real runner's `captf-runner:` notes: the last line is
/// the real runner's own summary of its result (`RunnerResult::summary_line`), so a drift check
/// that found drift says so.
pub fn pod_log(given: Option<&str>, pod: &Value) -> String {
    if let Some(text) = given {
        return text.to_string();
    }
    let label = |k: &str| {
        pod.pointer("/metadata/labels")
            .and_then(|l| l.get(k))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let mut out = format!(
        "captf-runner: {} of Job {} (simulated runner)\n",
        label(captf_shared::keys::LABEL_OP),
        label("job-name")
    );
    let term = pod.pointer("/status/containerStatuses/0/state/terminated");
    if let Some(msg) = term.and_then(|t| t.get("message")).and_then(Value::as_str)
        && let Ok(r) = captf_shared::protocol::RunnerResult::parse(msg)
    {
        if let (Some(h), Some(s)) = (&r.plan_hash, &r.summary) {
            out.push_str(&simulated_plan_lines(s));
            out.push_str(&format!(
                "captf-runner: plan {h}: {} to add, {} to change, {} to destroy, {} to replace\n",
                s.add, s.change, s.destroy, s.replace
            ));
        }
        out.push_str(&format!("captf-runner: {}\n", r.summary_line()));
    }
    out
}

/// The resource lines a plan with these counts prints, as OpenTofu words them, with made-up
/// addresses (`sim_thing.created_1`, …; at most 20 of each kind), so a scripted plan reads like a
/// real one in the runner's log.
pub fn simulated_plan_lines(s: &captf_shared::protocol::PlanSummary) -> String {
    let mut out = String::new();
    for (n, what, ending) in [
        (s.add, "created", "will be created"),
        (s.change, "updated", "will be updated in-place"),
        (s.destroy, "destroyed", "will be destroyed"),
        (s.replace, "replaced", "must be replaced"),
    ] {
        for i in 1..=n.min(20) {
            out.push_str(&format!("  # sim_thing.{what}_{i} {ending}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::resources::Registry;
    use crate::runner::JobMatch;
    use captf_shared::protocol::PlanSummary;
    use jiff::SignedDuration;
    use proptest::prelude::*;
    use std::time::Duration;

    fn script() -> impl Strategy<Value = RunnerScript> {
        let base = prop_oneof![
            Just(RunnerScript::succeed()),
            Just(RunnerScript::fail("boom")),
            Just(RunnerScript::hang()),
            Just(RunnerScript::hang().silent_on_sigterm()),
            Just(RunnerScript::evicted()),
            Just(RunnerScript::blocked("h", PlanSummary::default())),
            Just(RunnerScript::die_holding_lock()),
            Just(RunnerScript::realistic()),
            Just(RunnerScript::exit(2, None)),
        ];
        (base, 0u64..200, 0u64..30)
            .prop_map(|(s, d, g)| s.after(Duration::from_secs(d)).shutdown_after(Duration::from_secs(g)))
    }

    fn types(job: &Value) -> Vec<String> {
        job.pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| c["type"].as_str().unwrap().to_string())
            .collect()
    }

    proptest! {
        #[test]
        fn every_job_ends_complete_or_failed_once_with_conditions_in_kubernetes_order(
            s in script(), deadline in 1i64..300, steps in proptest::collection::vec(1u64..120, 1..8), hold in any::<bool>(),
        ) {
            let start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
            let mut w = World::new(Registry::builtin(), start, 3, 10_000);
            if hold {
                w.hold_lock("default", "x-tc", "foreign", "alice@laptop", "OperationTypeApply");
            }
            w.scripts.push(JobMatch::any(), s);
            let def = w.def(JOBS).unwrap();
            let job = json!({"metadata": {"name": "tc-x-apply-1", "namespace": "default"},
                "spec": {"backoffLimit": 0, "activeDeadlineSeconds": deadline, "template": {"spec": {
                    "restartPolicy": "Never", "containers": [{"name": "runner", "image": "r", "env": [
                        {"name": "CAPTF_STATE_SUFFIX", "value": "x-tc"}, {"name": "CAPTF_LOCK_TIMEOUT", "value": "100s"}]}]}}}});
            w.create(&def, "default", job).unwrap();
            let mut last = w.now();
            for secs in steps {
                let target = w.now() + SignedDuration::from_secs(secs as i64);
                w.advance_to(target);
                prop_assert!(w.now() >= last);
                last = w.now();
            }
            // Past any deadline and shutdown, every Job has ended.
            let target = w.now() + SignedDuration::from_secs(400);
            w.advance_to(target);
            let j = w.try_get(JOBS, "default", "tc-x-apply-1").unwrap().clone();
            let t = types(&j);
            let ok = t == ["SuccessCriteriaMet", "Complete"] || t == ["FailureTarget", "Failed"];
            prop_assert!(ok, "conditions {:?}", t);
            let st = &j["status"];
            prop_assert_eq!(st["active"].as_i64(), Some(0));
            prop_assert_eq!(st.get("completionTime").is_some(), t[1] == "Complete");
            prop_assert_eq!(st["succeeded"].as_i64().unwrap_or(0) + st["failed"].as_i64().unwrap_or(0), 1);
            if let Some(done) = st.get("completionTime").and_then(Value::as_str) {
                let start_s = st["startTime"].as_str().unwrap();
                prop_assert!(done.parse::<Timestamp>().unwrap() >= start_s.parse::<Timestamp>().unwrap());
            }
            prop_assert!(w.kubelet.running().is_empty());
            // The foreign lock is never released by a runner.
            if hold {
                let lease = w.try_get(LEASES, "default", "lock-tfstate-default-x-tc").unwrap();
                prop_assert_eq!(lease.pointer("/spec/holderIdentity").and_then(Value::as_str), Some("foreign"));
            }
        }
    }

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-z0-9/.-]{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("spec".to_string()),
                        Just("template".to_string()),
                        Just("metadata".to_string()),
                        Just("labels".to_string()),
                        Just("containers".to_string()),
                        Just("env".to_string()),
                        Just("status".to_string()),
                        Just("activeDeadlineSeconds".to_string()),
                        Just("conditions".to_string()),
                        Just("name".to_string()),
                        "[a-z]{1,4}",
                    ],
                    inner,
                    0..5,
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn arbitrary_job_specs_and_metadata_never_panic_the_simulator(spec in any_json(), meta in any_json(), status in any_json()) {
            let start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
            let mut w = World::new(Registry::builtin(), start, 5, 1_000);
            let def = w.def(JOBS).unwrap();
            let _ = w.create(&def, "default", json!({"metadata": meta, "spec": spec.clone()}));
            let _ = w.create(&def, "default", json!({"metadata": {"name": "j"}, "spec": spec}));
            if let Some(p) = w.list(&w.def(PODS).unwrap(), Some("default")).first() {
                let name = p["metadata"]["name"].as_str().unwrap_or_default().to_string();
                let _ = w.update(&w.def(PODS).unwrap(), "default", &name, json!({"status": status.clone()}), Sub::Status);
            }
            let _ = w.update(&def, "default", "j", json!({"status": status}), Sub::Status);
            let target = w.now() + SignedDuration::from_secs(100_000);
            w.advance_to(target);
            let _ = w.delete(&def, "default", "j", &crate::store::DeleteOpts::default());
        }
    }

    #[test]
    fn a_scripted_plan_names_its_resource_changes_in_the_log_as_opentofu_words_them() {
        let s = PlanSummary {
            add: 1,
            change: 0,
            destroy: 1,
            replace: 1,
        };
        assert_eq!(
            simulated_plan_lines(&s),
            "  # sim_thing.created_1 will be created\n  # sim_thing.destroyed_1 will be destroyed\n  # sim_thing.replaced_1 must be replaced\n"
        );
        let many = PlanSummary {
            add: 1000,
            ..Default::default()
        };
        assert_eq!(simulated_plan_lines(&many).lines().count(), 20, "bounded");
    }
}

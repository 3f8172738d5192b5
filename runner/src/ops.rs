//! The run: prepare the working directory, init, force-unlock, then the op (docs/runner.md).
//!
//! Every step returns `Result<_, RunnerResult>`: the error side is the run's final result
//! (failed or interrupted, with the phase it was in), so the sequence reads top to bottom.

use captf_shared::Op;
use captf_shared::inputs::Inputs;
use captf_shared::protocol::{DRIFT_FOUND_MESSAGE, NO_DRIFT_MESSAGE, PLAN_TEXT_LIMIT, Phase, RunResult, RunnerResult};
use captf_shared::types::ApprovalMode;
use captf_shared::{keys, names};

use crate::config::Config;
use crate::guard::{self, Verdict};
use crate::outputs::{self, OutputsStore};
use crate::plan_policy;
use crate::state_proxy;
use crate::tf::{Finished, Interrupt, Log, Stdout, Tf, TfError};
use crate::unlock;
use crate::workdir::{self, PLAN_FILE};
use crate::{backend_check, credentials, encryption, program, redact};

/// The command lines of every step, built in one place so tests can state them exactly.
#[derive(Clone, Debug)]
pub struct Commands {
    lock_timeout: String,
}

fn strings(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

impl Commands {
    pub fn new(lock_timeout: &str) -> Commands {
        Commands {
            lock_timeout: format!("-lock-timeout={lock_timeout}"),
        }
    }

    /// The flags every state-touching command gets.
    fn state_flags(&self) -> [&str; 3] {
        [self.lock_timeout.as_str(), "-input=false", "-no-color"]
    }

    fn with_state_flags(&self, head: &[&str], tail: &[&str]) -> Vec<String> {
        let mut v = strings(head);
        v.extend(strings(&self.state_flags()));
        v.extend(strings(tail));
        v
    }

    /// `-backend=false`: the module is only fetched here; no backend is configured or reached
    /// before the runner has checked the module for a backend of its own and written its own.
    pub fn init_from_module(&self, source: &str) -> Vec<String> {
        let mut v = strings(&["init", "-input=false", "-no-color", "-backend=false"]);
        v.push(format!("-from-module={source}"));
        v
    }
    pub fn init(&self) -> Vec<String> {
        strings(&["init", "-input=false", "-no-color"])
    }
    pub fn plan_to_file(&self) -> Vec<String> {
        let out = format!("-out={PLAN_FILE}");
        self.with_state_flags(&["plan"], &[&out])
    }
    pub fn show_plan(&self) -> Vec<String> {
        strings(&["show", "-json", "-no-color", PLAN_FILE])
    }
    pub fn apply_plan(&self) -> Vec<String> {
        self.with_state_flags(&["apply"], &[PLAN_FILE])
    }
    pub fn refresh(&self) -> Vec<String> {
        self.with_state_flags(&["apply", "-refresh-only", "-auto-approve"], &[])
    }
    pub fn drift(&self) -> Vec<String> {
        self.with_state_flags(&["plan", "-detailed-exitcode"], &[])
    }
    pub fn destroy(&self) -> Vec<String> {
        self.with_state_flags(&["destroy", "-auto-approve"], &[])
    }
    pub fn output(&self) -> Vec<String> {
        strings(&["output", "-json", "-no-color"])
    }
}

fn failed(phase: Phase, message: impl Into<String>) -> RunnerResult {
    RunnerResult::new(RunResult::Failed, phase, message)
}

struct Steps<'a, S> {
    cfg: &'a Config,
    tf: Tf,
    cmd: Commands,
    store: &'a S,
    /// For the `init` commands only: what fetching the module needs (module credentials).
    init_env: &'a [(String, String)],
    /// For every command: the state encryption configuration (`TF_ENCRYPTION`), if any.
    env: &'a [(String, String)],
}

impl<S: OutputsStore> Steps<'_, S> {
    fn log(&self) -> &Log {
        self.tf.log()
    }

    /// Run a command; a start failure, an interruption or a death by signal ends the run.
    async fn exec(&self, phase: Phase, args: Vec<String>, stdout: Stdout) -> Result<Finished, RunnerResult> {
        // The module fetch (`init -backend=false`) reads no state, so it gets no encryption:
        // each OpenTofu process that has it derives the key anew (PBKDF2, about a second here).
        let fetch_only = args.iter().any(|a| a == "-backend=false");
        let mut env = if fetch_only { vec![] } else { self.env.to_vec() };
        if args.first().is_some_and(|a| a == "init") {
            env.extend_from_slice(self.init_env);
        }
        let finished = self.tf.run_with_env(&args, stdout, &env).await.map_err(|e| match e {
            TfError::Interrupted { .. } | TfError::InterruptedBeforeStart { .. } => {
                RunnerResult::new(RunResult::Interrupted, phase, e.to_string())
            }
            TfError::Spawn { .. } => failed(
                phase,
                format!("{e} (is {} installed? set CAPTF_TF_BINARY)", self.cfg.tf_binary),
            ),
            other => failed(phase, other.to_string()),
        })?;
        if let Some(sig) = finished.killed_by() {
            let verb = args.first().map(String::as_str).unwrap_or("");
            let words = finished.last_words();
            let mut message = format!("{} {verb} was killed by {sig}", self.tf.program());
            if !words.is_empty() {
                message.push_str(&format!("; its last output: {words}"));
            }
            return Err(failed(phase, message));
        }
        Ok(finished)
    }

    /// Run a command that must exit 0.
    async fn ok(&self, phase: Phase, args: Vec<String>, stdout: Stdout) -> Result<Finished, RunnerResult> {
        let verb = args.first().cloned().unwrap_or_default();
        let f = self.exec(phase, args, stdout).await?;
        if f.code() == Some(0) {
            Ok(f)
        } else {
            Err(self.command_failed(phase, &verb, &f))
        }
    }

    /// The JSON document of a captured command; what the binary printed before it (OpenTofu's
    /// CLI configuration warnings) goes to the log, where a person can see it.
    fn json<'f>(&self, f: &'f Finished) -> &'f [u8] {
        let (before, doc) = crate::tf::json_document(&f.stdout);
        if !before.iter().all(u8::is_ascii_whitespace) {
            self.log()
                .note(&format!("{} printed this before its JSON output:", self.tf.program()));
            for line in before.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                self.log().line(line);
            }
        }
        doc
    }

    fn command_failed(&self, phase: Phase, verb: &str, f: &Finished) -> RunnerResult {
        let status = crate::tf::describe_status(&f.status);
        let words = f.last_words();
        let message = if words.is_empty() {
            format!("{} {verb} failed ({status})", self.tf.program())
        } else {
            format!("{} {verb} failed ({status}): {words}", self.tf.program())
        };
        failed(phase, message)
    }

    async fn unlock(&self, id: &str) -> Result<(), RunnerResult> {
        let f = self.exec(Phase::Unlock, unlock::args(id), Stdout::Stream).await?;
        let outcome = unlock::classify(f.code(), &f.all_text());
        if outcome.tolerated() {
            self.log().note(&format!("force-unlock {id}: {}", outcome.describe()));
            Ok(())
        } else {
            Err(self.command_failed(Phase::Unlock, "force-unlock", &f))
        }
    }

    /// Read the outputs, store the full document, put the public ones in the result.
    async fn outputs(&self, phase: Phase, result: &mut RunnerResult) -> Result<(), RunnerResult> {
        let f = self.ok(phase, self.cmd.output(), Stdout::Capture).await?;
        let mut outs = outputs::parse(self.json(&f)).map_err(|e| failed(phase, e.to_string()))?;
        // Masked before anything is stored: the public copy in the store is what reaches the
        // object's status when the outputs do not fit the result.
        outs.mask_public(self.log().secrets());
        if !outs.is_empty() {
            self.store
                .store(&outs.document, &outs.public_document())
                .await
                .map_err(|e| failed(phase, e.to_string()))?;
            self.log().note(&format!(
                "outputs: {} public, {} sensitive; full document written to {}",
                outs.public.len(),
                outs.sensitive.len(),
                self.store.describe()
            ));
        }
        outputs::attach(result, &outs);
        Ok(())
    }

    /// Keep the plan a person must approve next to the object. The run's result does not depend
    /// on it: a plan that cannot be kept is still in this Job's log, and the log says so.
    async fn keep_plan(&self, facts: &guard::PlanFacts, planned: &Finished, policy_warnings: &[String]) {
        // Masked as the log is: the addresses come from `plan.json`, unmasked.
        let kept = facts.kept(planned.cut, self.log().secrets(), policy_warnings);
        match self.store.store_plan(&kept, &planned.stdout).await {
            Ok(()) => self.log().note(&format!(
                "plan {} kept in {} for review",
                facts.hash,
                self.store.describe()
            )),
            Err(e) => self.log().note(&format!(
                "the plan could not be kept for review ({e}); it is in this log only"
            )),
        }
    }

    async fn apply(&self) -> Result<RunnerResult, RunnerResult> {
        let planned = self
            .ok(
                Phase::Plan,
                self.cmd.plan_to_file(),
                Stdout::StreamAndKeep(PLAN_TEXT_LIMIT),
            )
            .await?;
        let show = self.ok(Phase::Plan, self.cmd.show_plan(), Stdout::Capture).await?;
        let plan_json = self.json(&show);
        let facts = guard::plan_facts_from_text(plan_json).map_err(|e| failed(Phase::Plan, e.to_string()))?;
        let approved = self.cfg.approved_plan.as_deref();
        let what = guard::describe(&facts.summary);
        self.log().note(&format!("plan {}: {what}", facts.hash));
        // The policies first: a plan they deny is never kept for approval, nor applied.
        let policies = plan_policy::read(&self.cfg.inputs_dir);
        let policy = match &policies {
            Err(why) => plan_policy::Verdict::Denied {
                message: format!(
                    "the policies on plan {} cannot be read, so it is not applied: {why}",
                    facts.hash
                ),
            },
            Ok(p) => plan_policy::check(p, &String::from_utf8_lossy(plan_json), &facts.hash),
        };
        let policy_warnings = match policy {
            plan_policy::Verdict::Denied { message } => {
                self.log().note(&message);
                let mut r = RunnerResult::new(RunResult::PolicyDenied, Phase::Guard, message);
                r.plan_hash = Some(facts.hash.clone());
                r.summary = Some(facts.summary);
                return Err(r);
            }
            plan_policy::Verdict::Pass { warnings } => {
                if let Ok(p) = &policies
                    && !p.is_empty()
                {
                    self.log()
                        .note(&format!("{} policies checked the plan: no denial", p.len()));
                }
                for w in &warnings {
                    self.log().note(&format!("policy warning: {w}"));
                }
                warnings
            }
        };
        let verdict = guard::verdict(self.cfg.guard, &facts, approved);
        if verdict != Verdict::Apply {
            self.keep_plan(&facts, &planned, &policy_warnings).await;
        } else if let Err(e) = self.store.clear_plan().await {
            // Whatever an earlier run kept for review (approved, or superseded by this plan) is
            // not what runs now, and it would share the Secret's size with the outputs.
            self.log()
                .note(&format!("the plan kept for review earlier could not be removed: {e}"));
        }
        let stop = |result: RunResult, message: String| {
            let mut r = RunnerResult::new(result, Phase::Guard, message);
            r.plan_hash = Some(facts.hash.clone());
            r.summary = Some(facts.summary);
            r.policy_warnings = policy_warnings.clone();
            r
        };
        match verdict {
            Verdict::Blocked => {
                let held = match self.cfg.guard {
                    ApprovalMode::Always => "plan changes resources and approval is Always",
                    _ => "plan deletes or replaces resources",
                };
                return Err(stop(
                    RunResult::Blocked,
                    format!(
                        "{held} ({what}); to apply it, annotate the object with {}={}",
                        keys::ANNOTATION_APPROVE_PLAN,
                        facts.hash
                    ),
                ));
            }
            Verdict::PlanChanged => {
                return Err(stop(
                    RunResult::PlanChanged,
                    format!(
                        "the approved plan {} is not the new plan {} ({what}); to apply it, annotate the object with {}={}",
                        approved.unwrap_or_default(),
                        facts.hash,
                        keys::ANNOTATION_APPROVE_PLAN,
                        facts.hash
                    ),
                ));
            }
            Verdict::Apply => {}
        }
        self.ok(Phase::Apply, self.cmd.apply_plan(), Stdout::Stream).await?;
        let mut r = RunnerResult::new(RunResult::Succeeded, Phase::Apply, format!("applied: {what}"));
        r.plan_hash = Some(facts.hash.clone());
        r.summary = Some(facts.summary);
        r.policy_warnings = policy_warnings;
        self.outputs(Phase::Apply, &mut r).await?;
        Ok(r)
    }

    async fn refresh(&self) -> Result<RunnerResult, RunnerResult> {
        self.ok(Phase::Refresh, self.cmd.refresh(), Stdout::Stream).await?;
        let mut r = RunnerResult::new(RunResult::Succeeded, Phase::Refresh, "refreshed");
        self.outputs(Phase::Refresh, &mut r).await?;
        Ok(r)
    }

    async fn drift(&self) -> Result<RunnerResult, RunnerResult> {
        let f = self.exec(Phase::Drift, self.cmd.drift(), Stdout::Stream).await?;
        let (drift, message) = match f.code() {
            Some(0) => (false, NO_DRIFT_MESSAGE),
            Some(2) => (true, DRIFT_FOUND_MESSAGE),
            _ => return Err(self.command_failed(Phase::Drift, "plan", &f)),
        };
        let mut r = RunnerResult::new(RunResult::Succeeded, Phase::Drift, message);
        r.drift = Some(drift);
        Ok(r)
    }

    async fn destroy(&self) -> Result<RunnerResult, RunnerResult> {
        self.ok(Phase::Destroy, self.cmd.destroy(), Stdout::Stream).await?;
        Ok(RunnerResult::new(RunResult::Succeeded, Phase::Destroy, "destroyed"))
    }
}

/// Run the whole op and return its one result. Never panics, never returns `succeeded` once a
/// termination request has arrived.
pub async fn run<S: OutputsStore>(cfg: &Config, interrupt: Interrupt, log: Log, store: &S) -> RunnerResult {
    let result = match pipeline(cfg, interrupt.clone(), log, store).await {
        Ok(r) | Err(r) => r,
    };
    if result.result == RunResult::Succeeded && *interrupt.borrow() {
        let mut r = RunnerResult::new(
            RunResult::Interrupted,
            result.phase,
            format!(
                "termination requested after the {} step finished; reported as interrupted",
                result.phase
            ),
        );
        r.plan_hash = result.plan_hash;
        r.summary = result.summary;
        return r;
    }
    result
}

async fn pipeline<S: OutputsStore>(
    cfg: &Config,
    interrupt: Interrupt,
    log: Log,
    store: &S,
) -> Result<RunnerResult, RunnerResult> {
    let inputs = workdir::read_inputs(&cfg.inputs_dir).map_err(|e| failed(Phase::Init, e.to_string()))?;
    // Credentials in the module source, and every value from a Secret (the variables and env
    // the controller named) in each form it may take: masked in the log and the result.
    let mut values = cfg.sensitive_env.0.clone();
    for name in &cfg.sensitive_variables {
        if let Some(v) = inputs.variables.get(name) {
            values.extend(redact::value_strings(v));
        }
    }
    // Module credentials, prepared before anything is logged so their values are masked too;
    // the private copies are removed when `credentials` drops, at the end of the run.
    let credentials = match &cfg.module_credentials_dir {
        Some(dir) => {
            Some(credentials::prepare(dir, &std::env::temp_dir()).map_err(|e| failed(Phase::Init, e.to_string()))?)
        }
        None => None,
    };
    if let Some(c) = &credentials {
        values.extend(c.secrets.iter().cloned());
    }
    // The state encryption passphrases, read (and masked) before anything runs: OpenTofu never
    // runs without the encryption the inputs ask for.
    let passphrases = encryption::read(inputs.state_encryption.as_ref(), cfg.state_encryption_dir.as_deref())
        .map_err(|e| failed(Phase::Init, e.to_string()))?;
    if let Some(p) = &passphrases {
        values.extend(p.secrets());
    }
    let tf_env = match &passphrases {
        Some(p) => {
            let secret = names::state_secret_name(&cfg.state_suffix);
            let (stored, why) = encryption::stored(&cfg.namespace, &secret).await;
            if let Some(why) = why {
                log.note(&format!(
                    "could not tell whether the state is encrypted ({why}); reading it with the passphrases only"
                ));
            }
            if stored == encryption::Stored::Plaintext && p.mode == captf_shared::types::EncryptionMode::Encrypt {
                log.note("the state is plaintext: this run reads it as such and writes it encrypted");
            }
            p.env(stored)
        }
        None => vec![],
    };
    let init_env = credentials.as_ref().map(|c| c.env.clone()).unwrap_or_default();
    let mut secrets = redact::source_secrets(&inputs.module.source);
    secrets.extend(redact::mask_list(values));
    secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    secrets.dedup();
    let log = log.with_secrets(secrets.clone());
    let mask = |mut r: RunnerResult| {
        r.message = redact::redact(&r.message, &secrets);
        if let Some(outputs) = r.outputs.as_mut() {
            for v in outputs.values_mut() {
                redact::redact_json(v, &secrets);
            }
        }
        r
    };
    let env = Env {
        init: &init_env,
        all: &tf_env,
        encrypting: passphrases.is_some(),
    };
    run_steps(cfg, &inputs, interrupt, log, store, &env)
        .await
        .map(mask)
        .map_err(mask)
}

/// What the binary's environment gets beyond the process's own.
struct Env<'a> {
    /// For the `init` commands (module credentials).
    init: &'a [(String, String)],
    /// For every command (`TF_ENCRYPTION`).
    all: &'a [(String, String)],
    /// Whether the run encrypts the state (so the binary must be OpenTofu).
    encrypting: bool,
}

async fn run_steps<S: OutputsStore>(
    cfg: &Config,
    inputs: &Inputs,
    interrupt: Interrupt,
    log: Log,
    store: &S,
    env: &Env<'_>,
) -> Result<RunnerResult, RunnerResult> {
    let dir = workdir::prepare(cfg.work_dir.as_deref()).map_err(|e| failed(Phase::Init, e.to_string()))?;
    let result = run_in(cfg, inputs, &dir, interrupt, log.clone(), store, env).await;
    // The work directory holds the variables (secrets included), providers and plans: nothing of
    // it outlives the run (a given directory, an emptyDir mount, is emptied; a fresh one removed).
    if !cfg.keep_work_dir
        && let Err(e) = workdir::remove(&dir, cfg.work_dir.is_some())
    {
        log.note(&format!("could not remove the work dir {}: {e}", dir.display()));
    }
    result
}

async fn run_in<S: OutputsStore>(
    cfg: &Config,
    inputs: &Inputs,
    dir: &std::path::Path,
    interrupt: Interrupt,
    log: Log,
    store: &S,
    env: &Env<'_>,
) -> Result<RunnerResult, RunnerResult> {
    let dir = dir.to_path_buf();
    if *interrupt.borrow() {
        return Err(RunnerResult::new(
            RunResult::Interrupted,
            Phase::Init,
            "termination requested before the first step",
        ));
    }
    // Which program the binary is, before it touches anything: a missing binary, another program
    // under its name, or one that cannot encrypt a state the spec wants encrypted stops here.
    let found = program::probe(&cfg.tf_binary, &dir)
        .await
        .map_err(|e| failed(Phase::Init, e))?;
    if let Some(why) = program::mismatch(&cfg.tf_binary, &found) {
        return Err(failed(Phase::Init, why));
    }
    if env.encrypting {
        encryption::check_program(&found).map_err(|e| failed(Phase::Init, e.to_string()))?;
    }
    log.note(&format!("{} runs {found}", cfg.tf_binary));
    log.note(&format!(
        "{} of state {} in namespace {} (work dir {})",
        cfg.op,
        cfg.state_suffix,
        cfg.namespace,
        dir.display()
    ));
    let steps = Steps {
        cfg,
        tf: Tf::new(&cfg.tf_binary, &dir, interrupt, log),
        cmd: Commands::new(&cfg.lock_timeout),
        store,
        init_env: env.init,
        env: env.all,
    };
    let fetched = steps
        .exec(
            Phase::Init,
            steps.cmd.init_from_module(&inputs.module.source),
            Stdout::Stream,
        )
        .await?;
    // One state backend: a module's own backend or cloud block is refused, naming the file,
    // whether or not the first init got past it (Terraform 1.0 fails on a cloud block, and a
    // backend it cannot reach fails init too): the module is copied before either happens.
    backend_check::check_dir(&dir, None).map_err(|e| failed(Phase::Init, e.to_string()))?;
    if fetched.code() != Some(0) {
        return Err(steps.command_failed(Phase::Init, "init", &fetched));
    }
    // Lives until the run ends (dropping it stops it): every Terraform step reaches its state
    // through it.
    let proxy = state_proxy::start(state_proxy::Narrowing {
        namespace: cfg.namespace.clone(),
        state_secret: names::state_secret_name(&cfg.state_suffix),
        lock_lease: names::lock_lease_name(&cfg.state_suffix),
        owner_uid: cfg.owner_uid.clone(),
    })
    .await
    .map_err(|e| failed(Phase::Init, format!("could not start the state proxy: {e}")))?;
    workdir::write_config(&dir, &cfg.state_suffix, &cfg.namespace, &proxy.url(), inputs)
        .map_err(|e| failed(Phase::Init, e.to_string()))?;
    let init = steps.exec(Phase::Init, steps.cmd.init(), Stdout::Stream).await?;
    if init.code() != Some(0) {
        // A lock on a state never written stops init itself (see `unlock`): when it is the
        // handed-over one, release it as force-unlock would, then init again.
        let handed = cfg.force_unlock_id.as_deref().filter(|id| init.all_text().contains(id));
        let Some(id) = handed else {
            return Err(steps.command_failed(Phase::Init, "init", &init));
        };
        let lease = names::lock_lease_name(&cfg.state_suffix);
        let outcome = unlock::release_lease(&cfg.namespace, &lease, id).await.map_err(|e| {
            failed(
                Phase::Unlock,
                format!("force-unlock {id} of a state never written: {e}"),
            )
        })?;
        steps.log().note(&format!(
            "init found the state locked by {id}, a state never written: {}",
            outcome.describe()
        ));
        steps.ok(Phase::Init, steps.cmd.init(), Stdout::Stream).await?;
    }
    if let Some(id) = &cfg.force_unlock_id {
        steps.unlock(id).await?;
    }
    match cfg.op {
        Op::Apply => steps.apply().await,
        Op::Refresh => steps.refresh().await,
        Op::Drift => steps.drift().await,
        Op::Destroy => steps.destroy().await,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::outputs::OutputsError;
    use captf_shared::protocol::KeptPlan;
    use captf_shared::types::ApprovalMode;
    use std::path::{Path, PathBuf};
    use tokio::sync::watch;

    /// A store that records nothing but raises the interrupt flag when called, i.e. a SIGTERM
    /// that arrives after `apply` finished but before the run reported.
    struct InterruptingStore(watch::Sender<bool>);

    impl OutputsStore for InterruptingStore {
        async fn store(&self, _document: &[u8], _public: &[u8]) -> Result<(), OutputsError> {
            self.0.send_replace(true);
            Ok(())
        }
        async fn store_plan(&self, _plan: &KeptPlan, _text: &[u8]) -> Result<(), OutputsError> {
            Ok(())
        }
        async fn clear_plan(&self) -> Result<(), OutputsError> {
            Ok(())
        }
        fn describe(&self) -> String {
            "interrupting test store".to_string()
        }
    }

    fn config(dir: &Path) -> Config {
        let inputs = dir.join("inputs");
        std::fs::create_dir_all(&inputs).unwrap();
        std::fs::write(
            inputs.join("inputs.json"),
            r#"{"module":{"source":"git::https://example.com/m.git"},"variables":{}}"#,
        )
        .unwrap();
        Config {
            op: Op::Apply,
            state_suffix: "x-tc".to_string(),
            namespace: "default".to_string(),
            lock_timeout: "1s".to_string(),
            force_unlock_id: None,
            approved_plan: None,
            guard: ApprovalMode::Destructive,
            inputs_dir: inputs,
            tf_binary: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fake/tofu")
                .display()
                .to_string(),
            work_dir: Some(dir.join("work")),
            termination_log: dir.join("termination-log"),
            outputs_file: None,
            sensitive_variables: vec![],
            sensitive_env: Default::default(),
            keep_work_dir: false,
            module_credentials_dir: None,
            state_encryption_dir: None,
            owner_uid: None,
        }
    }

    #[tokio::test]
    async fn a_termination_request_before_the_first_step_runs_nothing_and_reports_interrupted_in_init() {
        let d = tempfile::tempdir().unwrap();
        let (tx, rx) = watch::channel(true);
        let (log, buf) = Log::memory();
        let r = run(&config(d.path()), rx, log, &InterruptingStore(tx)).await;
        assert_eq!(r.result, RunResult::Interrupted);
        assert_eq!(r.phase, Phase::Init);
        assert_eq!(r.exit_code(), 5);
        assert!(!String::from_utf8_lossy(&buf.lock().unwrap()).contains("$ tofu"));
    }

    #[tokio::test]
    async fn a_termination_request_after_apply_finished_is_never_reported_as_succeeded() {
        let d = tempfile::tempdir().unwrap();
        let outputs = d.path().join("outputs.json");
        std::fs::write(&outputs, r#"{"a":{"sensitive":false,"type":"string","value":"1"}}"#).unwrap();
        // The fake reads its steering from the environment of the child; set it for this
        // process's children only through the config's binary: a wrapper script.
        let wrapper = d.path().join("tofu");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nFAKE_OUTPUTS_JSON={} exec {} \"$@\"\n",
                outputs.display(),
                config(d.path()).tf_binary
            ),
        )
        .unwrap();
        std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let mut cfg = config(d.path());
        cfg.tf_binary = wrapper.display().to_string();
        let (tx, rx) = watch::channel(false);
        let (log, _) = Log::memory();
        let r = run(&cfg, rx, log, &InterruptingStore(tx)).await;
        assert_eq!(r.result, RunResult::Interrupted);
        assert_eq!(r.phase, Phase::Apply);
        assert!(r.message.contains("after the apply step finished"), "{}", r.message);
    }

    #[test]
    fn every_state_touching_command_gets_lock_timeout_input_and_no_color() {
        let c = Commands::new("300s");
        for args in [c.plan_to_file(), c.apply_plan(), c.refresh(), c.drift(), c.destroy()] {
            for flag in ["-lock-timeout=300s", "-input=false", "-no-color"] {
                assert!(args.iter().any(|a| a == flag), "{args:?} lacks {flag}");
            }
        }
    }

    #[test]
    fn command_lines_of_each_step() {
        let c = Commands::new("300s");
        assert_eq!(
            c.init_from_module("git::https://example.com/m.git?ref=v1"),
            [
                "init",
                "-input=false",
                "-no-color",
                "-backend=false",
                "-from-module=git::https://example.com/m.git?ref=v1"
            ]
        );
        assert_eq!(c.init(), ["init", "-input=false", "-no-color"]);
        assert_eq!(
            c.plan_to_file(),
            [
                "plan",
                "-lock-timeout=300s",
                "-input=false",
                "-no-color",
                "-out=captf.tfplan"
            ]
        );
        assert_eq!(c.show_plan(), ["show", "-json", "-no-color", "captf.tfplan"]);
        assert_eq!(
            c.apply_plan(),
            [
                "apply",
                "-lock-timeout=300s",
                "-input=false",
                "-no-color",
                "captf.tfplan"
            ]
        );
        assert_eq!(
            c.refresh(),
            [
                "apply",
                "-refresh-only",
                "-auto-approve",
                "-lock-timeout=300s",
                "-input=false",
                "-no-color"
            ]
        );
        assert_eq!(
            c.drift(),
            [
                "plan",
                "-detailed-exitcode",
                "-lock-timeout=300s",
                "-input=false",
                "-no-color"
            ]
        );
        assert_eq!(
            c.destroy(),
            [
                "destroy",
                "-auto-approve",
                "-lock-timeout=300s",
                "-input=false",
                "-no-color"
            ]
        );
        assert_eq!(c.output(), ["output", "-json", "-no-color"]);
    }
}

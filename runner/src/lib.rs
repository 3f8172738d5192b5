//! `captf-runner`: the program every CAPTF Job runs (docs/runner.md). It wraps `tofu` or
//! `terraform`, runs one op, and reports one honest result in the termination log.
//!
//! | module | what it holds |
//! | --- | --- |
//! | [`backend_check`] | one state backend: a module's own `backend` or `cloud` block refused |
//! | [`config`] | the `CAPTF_*` environment, parsed and checked |
//! | [`credentials`] | the module credentials Secret, copied private and handed to `init` only |
//! | [`encryption`] | `spec.stateEncryption`: the mounted passphrases as OpenTofu's `TF_ENCRYPTION` |
//! | [`program`] | which program `CAPTF_TF_BINARY` runs, asked with `version` before anything else |
//! | [`workdir`] | inputs, `backend.tf`, `terraform.tfvars.json` (0600) |
//! | [`tf`] | the child process: streaming, tails, SIGTERM → exactly one SIGINT |
//! | [`unlock`] | force-unlock of a handed-over stale lock, tolerated failures |
//! | [`guard`] | plan summary, plan hash, the destructive guard's verdict |
//! | [`outputs`] | `output -json`: public outputs in the result, the rest in the store |
//! | [`redact`] | credentials in a module source, masked in the log and the result |
//! | [`ops`] | the sequence of steps per op |
//! | [`result`] | the termination log and the summary line |
//! | [`secret`] | the outputs Secret, written with server-side apply |
//! | [`state_proxy`] | the backend's way to the API server, its Secret listing narrowed by name |

pub mod backend_check;
pub mod config;
pub mod credentials;
pub mod encryption;
pub mod fuzzing;
pub mod guard;
pub mod ops;
pub mod outputs;
pub mod plan_policy;
pub mod program;
pub mod redact;
pub mod result;
pub mod secret;
pub mod state_proxy;
pub mod tf;
pub mod unlock;
pub mod workdir;

use std::sync::Arc;

use captf_shared::protocol::{Phase, RunResult, RunnerResult};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::config::Config;
use crate::outputs::{FileStore, OutputsError, OutputsStore};
use crate::secret::SecretStore;
use crate::tf::Log;

/// Turn SIGTERM (and SIGINT, for local runs) into the interrupt flag. Only the flag is set
/// here; [`tf::Tf::run`] forwards one SIGINT to the running child.
fn install_signal_handlers(log: &Log) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    let tx = Arc::new(tx);
    for (kind, name) in [
        (SignalKind::terminate(), "SIGTERM"),
        (SignalKind::interrupt(), "SIGINT"),
    ] {
        match signal(kind) {
            Ok(mut s) => {
                let tx = tx.clone();
                let log = log.clone();
                tokio::spawn(async move {
                    while s.recv().await.is_some() {
                        log.note(&format!("received {name}"));
                        tx.send_replace(true);
                    }
                });
            }
            Err(e) => log.note(&format!("failed to install the {name} handler: {e}")),
        }
    }
    rx
}

/// Where the outputs go in this process.
enum Store {
    File(FileStore),
    Secret(Box<SecretStore>),
}

impl OutputsStore for Store {
    async fn store(&self, document: &[u8], public: &[u8]) -> Result<(), OutputsError> {
        match self {
            Store::File(f) => f.store(document, public).await,
            Store::Secret(s) => s.store(document, public).await,
        }
    }

    async fn store_plan(&self, plan: &captf_shared::protocol::KeptPlan, text: &[u8]) -> Result<(), OutputsError> {
        match self {
            Store::File(f) => f.store_plan(plan, text).await,
            Store::Secret(s) => s.store_plan(plan, text).await,
        }
    }

    async fn clear_plan(&self) -> Result<(), OutputsError> {
        match self {
            Store::File(f) => f.clear_plan().await,
            Store::Secret(s) => s.clear_plan().await,
        }
    }

    fn describe(&self) -> String {
        match self {
            Store::File(f) => f.describe(),
            Store::Secret(s) => s.describe(),
        }
    }
}

/// The whole program: returns the exit code (0 succeeded, 1 failed, 3 blocked,
/// 4 plan-changed, 5 interrupted).
pub async fn main_entry() -> i32 {
    let log = Log::stdout();
    let interrupt = install_signal_handlers(&log);
    let lookup = |name: &str| std::env::var(name).ok();
    let termination_log = config::termination_log(&lookup);
    let result = match Config::from_lookup(&lookup) {
        Err(e) => RunnerResult::new(RunResult::Failed, Phase::Init, format!("invalid configuration: {e}")),
        Ok(cfg) => {
            let store = match &cfg.outputs_file {
                Some(path) => Store::File(FileStore { path: path.clone() }),
                None => Store::Secret(Box::new(SecretStore::inferred(
                    &cfg.namespace,
                    &cfg.outputs_secret_name(),
                ))),
            };
            ops::run(&cfg, interrupt, log.clone(), &store).await
        }
    };
    log.note(&result.summary_line());
    if let Err(e) = result::write_termination_log(&termination_log, &result) {
        log.note(&e.to_string());
    }
    result.exit_code()
}

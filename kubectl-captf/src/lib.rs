//! `kubectl captf`: CAPTF's objects for the person on call.
//!
//! Every answer is the controller's own: an object is read live with
//! [`captf_read::live::read`] (the reads of a reconcile pass, without caches and
//! without writing) and planned with [`captf_core::explain::explain_snapshot`] (the
//! [`captf_core::plan::plan`] the controller executes). `approve`, `refresh` and `reconcile` write only
//! what the controller honours, and only when its rules say it would act on it
//! ([`rules`]).

pub mod annotate;
pub mod approve;
pub mod cli;
pub mod clock;
pub mod complete;
pub mod completion_script;
pub mod conn;
pub mod errors;
pub mod events;
pub mod explain;
pub mod kept;
pub mod live_read;
pub mod logs;
pub mod plan;
pub mod printed;
pub mod refresh_reconcile;
pub mod rules;
pub mod status;
pub mod storage;
pub mod suspend;
pub mod target;
pub mod tree;
pub mod watch;
pub mod words;
pub mod yaml;

pub use approve::approval_question;
pub use conn::{Confirm, Conn, connect};
pub use events::{EventLine, event_lines, events_table};
pub use live_read::explanation;
pub use logs::LogPod;
pub use plan::{Change, plan_changes};
pub use printed::Printed;
pub use status::{NOT_OBSERVED, Row, observed, ready_condition, row, sort_rows, status_table};

use cli::{Cli, Command, Output};
use errors::PluginError;
use target::parse_target;

/// Run one command (not `completion`) against a connection.
pub async fn run(cli: &Cli, conn: &Conn) -> Result<Printed, PluginError> {
    let now = now(cli, conn).await?;
    let json = Output::is_document(cli.output);
    let printed = match &cli.command {
        Command::Explain { target } => explain::explain(conn, &parse_target(target)?, target, json, now).await,
        Command::Plan { target } => plan::plan(conn, &parse_target(target)?, target, json, now).await,
        Command::Events { target, .. } => events::events(conn, &parse_target(target)?, json, now).await,
        Command::Approve { target, hash, yes } => {
            approve::approve(conn, &parse_target(target)?, target, hash.as_deref(), *yes, json, now).await
        }
        Command::Logs {
            target, op, previous, ..
        } => logs::logs(conn, &parse_target(target)?, op.map(cli::OpArg::op), *previous).await,
        Command::Status {
            all_namespaces,
            sort_by,
            ..
        } => status::status(conn, *all_namespaces, *sort_by, cli.output, now).await,
        Command::Tree { target, .. } => Ok(tree::print_tree(&tree::read_tree(conn, target, now).await?, cli.output)),
        Command::Suspend { target } => suspend::set_paused(conn, &parse_target(target)?, true, json).await,
        Command::Resume { target } => suspend::set_paused(conn, &parse_target(target)?, false, json).await,
        Command::Refresh { target } => refresh_reconcile::refresh(conn, &parse_target(target)?, json, now).await,
        Command::Reconcile { target, reason } => {
            refresh_reconcile::reconcile(conn, &parse_target(target)?, reason.as_deref(), json, now).await
        }
        Command::MigrateStorage { to } => {
            storage::migrate(conn, to.unwrap_or(captf_shared::conversion::Version::STORED), json).await
        }
        Command::Retry { target } => Err(PluginError::Usage(format!(
            "`retry` is now two commands: `kubectl captf refresh {target}` reads the state and outputs again; `kubectl captf reconcile {target} --reason <why>` starts the retry of a failure now instead of after its backoff"
        ))),
        Command::Completion { .. } | Command::Complete { .. } => Err(PluginError::Usage(
            "completion needs no cluster; run `kubectl-captf completion <shell>`".into(),
        )),
    }?;
    as_output(printed, cli.output)
}

/// The time to decide at: `--now`, else the server's (the simulator's clock, or the wall clock).
pub(crate) async fn now(cli: &Cli, conn: &Conn) -> Result<k8s_openapi::jiff::Timestamp, PluginError> {
    match cli.now {
        Some(now) => Ok(now),
        None => clock::server_now(&conn.client).await,
    }
}

/// An answer in the output asked for: `-o yaml` is the JSON document as YAML.
pub(crate) fn as_output(mut printed: Printed, output: Option<Output>) -> Result<Printed, PluginError> {
    if output == Some(Output::Yaml) {
        printed.stdout = yaml::to_yaml(&printed.stdout)?;
    }
    Ok(printed)
}

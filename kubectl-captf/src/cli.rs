//! The command line: kubectl's connection flags, one subcommand per question.

use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use k8s_openapi::jiff::Timestamp;

const EXAMPLES: &str = "\
Examples:
  # Why is this cluster not applying? What happens next, when, and why
  kubectl captf explain terraformcluster/prod-eu -n team-a

  # The destructive plan waiting for approval, and approving exactly it
  kubectl captf plan tfc/prod-eu
  kubectl captf approve tfc/prod-eu --hash 3f2a…

  # The runner's log of the newest apply Job, or of the one before
  kubectl captf logs tfc/prod-eu --op apply
  kubectl captf logs tfc/prod-eu --previous

  # Every object at a glance, oldest success first
  kubectl captf status -A --sort-by last-success -o wide

  # Ask for a refresh now (never skips an approval, a backoff or a foreign lock)
  kubectl captf retry tfmp/workers

  # Shell completion
  source <(kubectl-captf completion bash)";

/// CAPTF's objects for the person on call: the controller's own decision read live, the plan
/// waiting for approval, the runner's logs, and an overview.
#[derive(Parser, Debug, Clone)]
#[command(name = "kubectl-captf", version, after_help = EXAMPLES)]
pub struct Cli {
    /// The kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: the current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The namespace (default: the context's, else "default").
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Output format: json for machines; wide adds columns to `status`.
    #[arg(short = 'o', long, global = true, value_enum)]
    pub output: Option<Output>,
    /// Decide as of this time (RFC 3339) instead of the clock's now.
    #[arg(long, global = true)]
    pub now: Option<Timestamp>,
    /// Demo and tests only: decide at the simulator's time (`GET /sim/v1/clock` of the server).
    #[arg(long, global = true, hide = true)]
    pub sim_clock: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Json,
    Wide,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpArg {
    Apply,
    Refresh,
    Drift,
    Destroy,
}

impl OpArg {
    pub fn op(self) -> captf_shared::Op {
        match self {
            OpArg::Apply => captf_shared::Op::Apply,
            OpArg::Refresh => captf_shared::Op::Refresh,
            OpArg::Drift => captf_shared::Op::Drift,
            OpArg::Destroy => captf_shared::Op::Destroy,
        }
    }
}

/// The order of `status` rows.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SortKey {
    /// Namespace, then name.
    #[default]
    Name,
    /// Kind, then namespace and name.
    Kind,
    /// The soonest next step first.
    Next,
    /// The most consecutive failures first.
    Failures,
    /// The oldest last success first (never succeeded first).
    LastSuccess,
}

#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// What the controller does next with an object, when, and why (read live; the same
    /// decision the controller takes now). `-o json`: the decision's JSON, as
    /// `captf-controller explain -f` prints it from files.
    Explain {
        /// <kind>/<name>, e.g. terraformcluster/prod-eu or tfmp/workers.
        target: String,
    },
    /// The destructive plan waiting for approval: its counts, the resource addresses in the
    /// runner's log, and how to read the full plan.
    Plan {
        /// <kind>/<name>.
        target: String,
    },
    /// Approve exactly the plan waiting for approval (captf.io/approve-plan). Refuses when no
    /// plan waits, or when --hash is not its hash.
    Approve {
        /// <kind>/<name>.
        target: String,
        /// The plan hash you reviewed (from `kubectl captf plan`); recommended.
        #[arg(long)]
        hash: Option<String>,
    },
    /// The runner's log of the object's newest Job (of one op with --op).
    Logs {
        /// <kind>/<name>.
        target: String,
        /// Only Jobs of this op.
        #[arg(long, value_enum)]
        op: Option<OpArg>,
        /// The Job before the newest one.
        #[arg(long)]
        previous: bool,
    },
    /// The Events about one object, oldest first: every Job started and booked (applied, drift
    /// found, failed, blocked, ...), a stale lock force-unlocked, a lock held by someone else.
    Events {
        /// <kind>/<name>.
        target: String,
    },
    /// One line per object: ready, what's next and when, failures, last success, foreign lock.
    Status {
        /// Every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Row order.
        #[arg(long, value_enum, default_value_t = SortKey::Name)]
        sort_by: SortKey,
    },
    /// Ask for a refresh now (captf.io/refresh), the run-now path the controller honours. It
    /// never skips a wait for approval, a backoff or a foreign state lock; it says which blocks.
    Retry {
        /// <kind>/<name>.
        target: String,
    },
    /// Print a shell completion script.
    Completion { shell: clap_complete::Shell },
}

impl Cli {
    /// Parse the process's arguments, with usage lines written as a person types the command
    /// (`kubectl captf …`).
    pub fn parse_args() -> Cli {
        let matches = Cli::command().bin_name("kubectl captf").get_matches();
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

/// Write the completion script of `kubectl-captf` for `shell`, made for the binary's own name
/// (clap's scripts break on a two-word name such as `kubectl captf`). clap_complete's bash
/// script names a subcommand's case `kubectl__subcmd__captf__…` where its dispatch looks for
/// `kubectl__captf__…` (the `-` of the name); the script is written with one spelling.
pub fn completion(shell: clap_complete::Shell, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "kubectl-captf", &mut buf);
    let script = String::from_utf8_lossy(&buf);
    let script = match shell {
        clap_complete::Shell::Bash => script.replace("kubectl__subcmd__captf", "kubectl__captf"),
        _ => script.into_owned(),
    };
    out.write_all(script.as_bytes())
}

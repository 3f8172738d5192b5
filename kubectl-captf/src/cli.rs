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

  # Every object at a glance, oldest success first; again on every change
  kubectl captf status -A --sort-by last-success -o wide
  kubectl captf status -w

  # A Cluster API cluster as a tree: each object's Ready, next step and runner Jobs
  kubectl captf tree cluster/prod-eu
  kubectl captf tree tfc/prod-eu -o yaml

  # Follow the running runner's log until it ends
  kubectl captf logs tfc/prod-eu -f

  # Stop starting Jobs (the running one finishes), and start again
  kubectl captf suspend tfc/prod-eu
  kubectl captf resume tfc/prod-eu

  # Ask for a refresh now (never skips an approval, a backoff or a foreign lock)
  kubectl captf refresh tfmp/workers

  # The cause of the failures is fixed: retry now instead of waiting out the backoff
  kubectl captf reconcile tfc/prod-eu --reason \"quota raised\"

  # Shell completion; for `kubectl captf <TAB>` with object names, put the script
  # kubectl_complete-captf (next to this binary's sources) on PATH
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
    /// Output format: json or yaml for machines (the same document); wide adds columns to
    /// `status` and `tree`.
    #[arg(short = 'o', long, global = true, value_enum)]
    pub output: Option<Output>,
    /// Decide as of this time (RFC 3339) instead of now (the wall clock; the CAPTF simulator's
    /// clock when the server is the simulator).
    #[arg(long, global = true)]
    pub now: Option<Timestamp>,
    /// Accepted for scripts written for earlier releases and ignored: without --now the plugin
    /// asks the server for the simulator's clock itself (a real API server answers 404, and the
    /// wall clock is used).
    #[arg(long, global = true, hide = true)]
    pub sim_clock: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Json,
    Yaml,
    Wide,
}

impl Output {
    /// Whether the answer is a document (JSON, or the same as YAML) rather than text.
    pub fn is_document(output: Option<Output>) -> bool {
        matches!(output, Some(Output::Json | Output::Yaml))
    }
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
    /// Approve exactly the plan waiting for approval (captf.io/approve-plan), recording who
    /// approved it (captf.io/approved-by). Without --hash or --yes it shows the plan and asks.
    /// Refuses when no plan waits, or when --hash is not its hash.
    Approve {
        /// <kind>/<name>.
        target: String,
        /// The plan hash you reviewed (from `kubectl captf plan`): approve without asking.
        #[arg(long)]
        hash: Option<String>,
        /// Approve the plan waiting now without asking (scripts that reviewed it otherwise).
        #[arg(short = 'y', long)]
        yes: bool,
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
        /// Follow the log until the runner's container ends.
        #[arg(short = 'f', long, conflicts_with = "previous")]
        follow: bool,
    },
    /// The Events about one object, oldest first: every Job started and booked (applied, drift
    /// found, failed, blocked, ...), a stale lock force-unlocked, a lock held by someone else.
    Events {
        /// <kind>/<name>.
        target: String,
        /// Then print each Event about the object as it comes (or is seen again), and only those.
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// One line per object: ready, what's next and when, failures, last success, foreign lock.
    Status {
        /// Every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Row order.
        #[arg(long, value_enum, default_value_t = SortKey::Name)]
        sort_by: SortKey,
        /// Print again whenever an object or one of its Jobs changes what is shown (ages and
        /// times counted from now, which move with the clock alone, are no change).
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// The object tree of a cluster, as `clusterctl describe cluster` draws it: the Cluster API
    /// Cluster, its TerraformCluster, the cluster's TerraformMachinePools and TerraformMachines
    /// (the verified members, which hold its deletion), each with its Ready condition, what the
    /// controller does next, and its runner Jobs. Objects that only carry the cluster's label are
    /// listed apart: they do not hold its deletion.
    Tree {
        /// cluster/<name> (a Cluster API Cluster) or terraformcluster/<name> (tfc/<name>).
        target: String,
        /// Print again whenever an object or one of its Jobs changes what is shown (ages and
        /// times counted from now, which move with the clock alone, are no change).
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// Suspend an object (spec.paused: true): its running Job finishes and is booked, no new
    /// Job starts (no apply, drift check, refresh or retry), and a deletion waits, its destroy
    /// included, until it is resumed.
    Suspend {
        /// <kind>/<name>.
        target: String,
    },
    /// Resume a suspended object (spec.paused: false): the controller decides again at once.
    Resume {
        /// <kind>/<name>.
        target: String,
    },
    /// Ask for a refresh now (captf.io/refresh): the state and outputs read again. It never
    /// skips a wait for approval, a backoff or a foreign state lock; it says which blocks.
    Refresh {
        /// <kind>/<name>.
        target: String,
    },
    /// Once the cause of failures is fixed, start the retry now instead of waiting out the
    /// backoff (captf.io/reconcile-now, with who and why); once: if it fails, it backs off again.
    /// Never skips an approval, a foreign lock or a pause.
    Reconcile {
        /// <kind>/<name>.
        target: String,
        /// Why, for the record (captf.io/reconcile-now-reason and the BackoffSkipped Event).
        #[arg(long)]
        reason: Option<String>,
    },
    /// After an upgrade that changed the API version objects are stored at: write every object
    /// of CAPTF's kinds again, in every namespace, so etcd holds it at the new version, and set
    /// each CRD's status.storedVersions to that version alone (what lets a later release drop
    /// the old one). For an administrator: it lists and updates the kinds cluster-wide and
    /// updates customresourcedefinitions/status. Idempotent.
    ///
    /// With `--to v1alpha1`, the step before going back to a release that knows only v1alpha1
    /// (`helm rollback` to 0.1): each CRD stores v1alpha1 again, every object is written again
    /// at it, and the newer versions stop being served, so the older release's clients and
    /// webhook never need a conversion it cannot do.
    MigrateStorage {
        /// The version to store objects at: the release's (v1beta1, the default) or an older
        /// served one to go back to.
        #[arg(long, value_parser = parse_version)]
        to: Option<captf_shared::conversion::Version>,
    },
    /// Replaced by `refresh` (read the state again) and `reconcile` (skip a backoff).
    #[command(hide = true)]
    Retry {
        /// <kind>/<name>.
        target: String,
    },
    /// Print a shell completion script.
    Completion { shell: clap_complete::Shell },
    /// Completion candidates for the words typed after `kubectl captf`, in cobra's `__complete`
    /// format (one candidate a line, then `:<directive>`): what `kubectl_complete-captf` runs
    /// for kubectl's completion of plugin arguments.
    #[command(name = "__complete", hide = true)]
    Complete {
        /// The words typed so far; the last one is the word being completed (may be empty).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        words: Vec<String>,
    },
}

/// `--to`: one of the versions CAPTF serves.
fn parse_version(s: &str) -> Result<captf_shared::conversion::Version, String> {
    let all = captf_shared::conversion::Version::ALL.map(|v| v.as_str()).join(", ");
    captf_shared::conversion::Version::parse(s).map_err(|_| format!("{s:?} is not a version CAPTF serves ({all})"))
}

impl Cli {
    /// Parse the process's arguments, with usage lines written as a person types the command
    /// (`kubectl captf …`).
    pub fn parse_args() -> Cli {
        let matches = Cli::command().bin_name("kubectl captf").get_matches();
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

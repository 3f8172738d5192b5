//! The connection to the API server, made as kubectl makes it, and how `approve` asks.

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::cli::Cli;
use crate::errors::PluginError;

/// A client for the chosen kubeconfig and context, and the namespace to use.
pub struct Conn {
    pub client: kube::Client,
    pub namespace: String,
    /// The kubeconfig's user entry, for `approved-by` when the API server cannot say who this
    /// is (no SelfSubjectReview).
    pub user: Option<String>,
    /// How `approve` asks before it writes: the terminal (stdin and stderr), or a given answer
    /// (a program embedding this library, and the tests).
    pub confirm: Confirm,
}

/// How `approve` asks a person to confirm.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Confirm {
    /// Ask on the terminal; without one, refuse and say to pass `--hash`.
    #[default]
    Terminal,
    /// Answer yes or no without asking.
    Answer(bool),
}

/// Connect as kubectl would: `--kubeconfig` (else `$KUBECONFIG`, else `~/.kube/config`),
/// `--context` (else the current one), `-n` (else the context's namespace).
pub async fn connect(cli: &Cli) -> Result<Conn, PluginError> {
    let kubeconfig = match &cli.kubeconfig {
        Some(path) => {
            Kubeconfig::read_from(path).map_err(|e| PluginError::Kubeconfig(format!("{}: {e}", path.display())))?
        }
        None => Kubeconfig::read().map_err(|e| PluginError::Kubeconfig(e.to_string()))?,
    };
    let options = KubeConfigOptions {
        context: cli.context.clone(),
        cluster: None,
        user: None,
    };
    let context = cli.context.clone().or_else(|| kubeconfig.current_context.clone());
    let user = kubeconfig
        .contexts
        .iter()
        .find(|c| Some(&c.name) == context.as_ref())
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.user.clone());
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| PluginError::Kubeconfig(e.to_string()))?;
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).map_err(|e| PluginError::Kubeconfig(e.to_string()))?;
    Ok(Conn {
        client,
        namespace,
        user,
        confirm: Confirm::Terminal,
    })
}

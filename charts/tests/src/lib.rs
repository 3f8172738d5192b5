//! `captf-chart-tests`: shared helpers for the tests of `charts/captf/` and `examples/`.
//!
//! The tests run the real tools: `helm` (lint, template) and `kubernetes-validate` (the
//! Kubernetes 1.30 JSON schemas it ships, no network). They are found through
//! `CAPTF_TOOLS_BIN` (set by `scripts/test.sh`), else `<workspace>/.tools/bin`, else `PATH`; a
//! missing tool is an error with the command that installs it, never a skipped test.

pub mod clusterctl;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The Kubernetes version the rendered manifests are validated against (`kubernetes-validate -k`).
pub const KUBERNETES_VERSION: &str = "1.30.0";
/// The release name and namespace the tests render with.
pub const RELEASE: &str = "captf";
pub const NAMESPACE: &str = "captf-system";

/// Kinds `kubernetes-validate` has no schema for (they come from cert-manager and the Prometheus
/// Operator CRDs); the tests check their fields themselves.
pub const KINDS_WITHOUT_OFFLINE_SCHEMA: [&str; 4] = ["Issuer", "Certificate", "ServiceMonitor", "PrometheusRule"];

/// The `helm template` arguments of the chart's optional features, shared by the tests that
/// render, lint and check them.
pub mod features {
    /// A ServiceMonitor for the metrics Services.
    pub const SERVICE_MONITOR: &[&str] = &["--set", "metrics.serviceMonitor.enabled=true"];
    /// The PrometheusRule with the alerts.
    pub const PROMETHEUS_RULE: &[&str] = &["--set", "metrics.prometheusRule.enabled=true"];
    /// Both monitoring objects at once.
    pub const MONITORING: &[&str] = &[
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.prometheusRule.enabled=true",
    ];
    /// Your own certificate Secret and CA bundle instead of cert-manager.
    pub const OWN_CERTIFICATE: &[&str] = &[
        "--set",
        "webhook.tls.certManager.enabled=false",
        "--set",
        "webhook.tls.existingSecret=my-webhook-tls",
        "--set",
        "webhook.tls.caBundle=Q0E=",
    ];
    /// An issuer the user runs (a ClusterIssuer) signs the serving certificate.
    pub const OWN_ISSUER: &[&str] = &[
        "--set",
        "webhook.tls.certManager.issuerRef.name=corp-ca",
        "--set",
        "webhook.tls.certManager.issuerRef.kind=ClusterIssuer",
    ];
    /// The controller watches one namespace other than the release namespace.
    pub const ONE_NAMESPACE: &[&str] = &["--set", "controller.watchNamespaces={tenant-a}"];
    /// The controller watches two namespaces.
    pub const TWO_NAMESPACES: &[&str] = &["--set", "controller.watchNamespaces={tenant-a,tenant-b}"];
    /// The controller watches every namespace (a ClusterRoleBinding).
    pub const ALL_NAMESPACES: &[&str] = &["--set", "controller.watchAllNamespaces=true"];
    /// Two controller shards besides the main controller.
    pub const SHARDS: &[&str] = &["--set", "controller.shards={blue,green}"];
    /// Only the API server reaches the webhook: a NetworkPolicy and client certificates.
    pub const WEBHOOK_LOCKDOWN: &[&str] = &[
        "--set",
        "webhook.networkPolicy.enabled=true",
        "--set",
        "webhook.networkPolicy.apiServerPeers[0].ipBlock.cidr=10.0.0.0/24",
        "--set",
        "webhook.networkPolicy.metricsPeers[0].namespaceSelector.matchLabels.name=monitoring",
        "--set",
        "webhook.clientAuth.enabled=true",
        "--set",
        "webhook.clientAuth.caSecret=apiserver-webhook-client-ca",
    ];
}

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error(
        "{tool} not found (looked in $CAPTF_TOOLS_BIN, {local} and $PATH): run `bash scripts/setup-tools.sh` to install it"
    )]
    NotFound { tool: String, local: String },
    #[error("failed to run {tool}: {source}")]
    Spawn {
        tool: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to write a temporary file for {tool}: {source}")]
    TempFile {
        tool: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{tool} {args} failed ({status}): {stderr}")]
    Failed {
        tool: String,
        args: String,
        status: String,
        stderr: String,
    },
    #[error("failed to parse the output of {tool} as YAML: {source}")]
    Yaml {
        tool: String,
        #[source]
        source: serde_yaml_ng::Error,
    },
}

/// The workspace root (`/work/main`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `charts/captf`.
pub fn chart_dir() -> PathBuf {
    workspace_root().join("charts/captf")
}

/// The image reference the chart's defaults name for `component` (`webhook`, `controller` or
/// `runner`), as its `captf.image` template renders it: `repository@digest` once a release has
/// pinned the digest into `values.yaml` (`scripts/release/pin.sh`), else `repository:tag`.
pub fn default_image(component: &str) -> Result<String, String> {
    default_image_of(&chart_dir(), component)
}

/// [`default_image`] of the chart at `chart` (a scratch copy).
pub fn default_image_of(chart: &Path, component: &str) -> Result<String, String> {
    let path = chart.join("values.yaml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let values: Value = serde_yaml_ng::from_str(&text).map_err(|e| format!("{} is not YAML: {e}", path.display()))?;
    let image = &values[component]["image"];
    let field = |name: &str| image[name].as_str().unwrap_or_default();
    let repository = field("repository");
    if repository.is_empty() {
        return Err(format!("{} has no {component}.image.repository", path.display()));
    }
    Ok(match (field("digest"), field("tag")) {
        ("", "") => {
            return Err(format!(
                "{} has neither {component}.image.digest nor tag",
                path.display()
            ));
        }
        ("", tag) => format!("{repository}:{tag}"),
        (digest, _) => format!("{repository}@{digest}"),
    })
}

/// `examples/`.
pub fn examples_dir() -> PathBuf {
    workspace_root().join("examples")
}

/// Where a tool is: `$CAPTF_TOOLS_BIN/<name>`, else `<workspace>/.tools/bin/<name>`, else on `PATH`.
pub fn tool(name: &str) -> Result<PathBuf, ToolError> {
    let local = workspace_root().join(".tools/bin");
    let mut dirs: Vec<PathBuf> = vec![];
    if let Some(bin) = std::env::var_os("CAPTF_TOOLS_BIN") {
        dirs.push(PathBuf::from(bin));
    }
    dirs.push(local.clone());
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| ToolError::NotFound {
            tool: name.to_string(),
            local: local.display().to_string(),
        })
}

/// One of Cluster API's own CRDs, parsed: `$CAPTF_CAPI_CRDS/<file>`, else
/// `<workspace>/.tools/capi/crds/<file>`, where `scripts/setup-tools.sh` copies them from the
/// Cluster API module pinned in `realparts/cluster-api/go.mod`.
pub fn capi_crd(file: &str) -> Result<Value, String> {
    let dir = std::env::var_os("CAPTF_CAPI_CRDS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".tools/capi/crds"));
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "cannot read Cluster API's CRD {}: {e} (scripts/setup-tools.sh copies them there; \
             CAPTF_CAPI_CRDS names another folder)",
            path.display()
        )
    })?;
    serde_yaml_ng::from_str(&text).map_err(|e| format!("{} is not YAML: {e}", path.display()))
}

/// Run a tool and return its output whatever its exit status.
pub fn run<I, S>(name: &str, args: I) -> Result<Output, ToolError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let path = tool(name)?;
    let scratch = std::env::temp_dir().join("captf-chart-tests-helm");
    Command::new(&path)
        .args(args)
        // Keep helm away from the user's config and cache; the tests need no repositories.
        .env("HELM_CACHE_HOME", scratch.join("cache"))
        .env("HELM_CONFIG_HOME", scratch.join("config"))
        .env("HELM_DATA_HOME", scratch.join("data"))
        .output()
        .map_err(|source| ToolError::Spawn {
            tool: name.to_string(),
            source,
        })
}

/// Run a tool and fail unless it exits 0; returns its stdout.
pub fn run_ok<I, S>(name: &str, args: I) -> Result<String, ToolError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let out = run(name, &args)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(ToolError::Failed {
            tool: name.to_string(),
            args: args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" "),
            status: out.status.to_string(),
            stderr: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            ),
        })
    }
}

/// Parse a multi-document YAML stream into JSON values, dropping empty documents.
pub fn parse_documents(tool: &str, yaml: &str) -> Result<Vec<Value>, ToolError> {
    let mut docs = vec![];
    for de in serde_yaml_ng::Deserializer::from_str(yaml) {
        let v = <Value as serde::Deserialize>::deserialize(de).map_err(|source| ToolError::Yaml {
            tool: tool.to_string(),
            source,
        })?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

/// `helm template` output: the YAML text and its documents.
#[derive(Clone, Debug)]
pub struct Rendered {
    pub yaml: String,
    pub docs: Vec<Value>,
}

impl Rendered {
    /// Every document of a kind.
    pub fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.docs.iter().filter(|d| d["kind"] == kind).collect()
    }

    /// The one document of a kind and name.
    pub fn get(&self, kind: &str, name: &str) -> Option<&Value> {
        self.docs
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
    }

    /// `kind/namespace/name` of every document, for messages.
    pub fn summary(&self) -> Vec<String> {
        self.docs
            .iter()
            .map(|d| {
                format!(
                    "{}/{}/{}",
                    d["kind"].as_str().unwrap_or("?"),
                    d["metadata"]["namespace"].as_str().unwrap_or("-"),
                    d["metadata"]["name"].as_str().unwrap_or("?")
                )
            })
            .collect()
    }

    /// Every pod template spec (Deployments), with the owner's name.
    pub fn pod_specs(&self) -> Vec<(String, &Value)> {
        self.docs
            .iter()
            .filter(|d| d["kind"] == "Deployment")
            .map(|d| {
                (
                    d["metadata"]["name"].as_str().unwrap_or("?").to_string(),
                    &d["spec"]["template"]["spec"],
                )
            })
            .collect()
    }
}

/// `helm template captf charts/captf -n captf-system --kube-version 1.30.0 <extra>`.
pub fn helm_template(extra: &[&str]) -> Result<Rendered, ToolError> {
    helm_template_release(RELEASE, extra)
}

/// `helm template <release> charts/captf -n captf-system --kube-version 1.30.0 <extra>`.
pub fn helm_template_release(release: &str, extra: &[&str]) -> Result<Rendered, ToolError> {
    helm_template_chart(release, &chart_dir(), extra)
}

/// `helm template <release> <chart> -n captf-system --kube-version 1.30.0 <extra>`, for a chart
/// at another path (a scratch copy).
pub fn helm_template_chart(release: &str, chart: &Path, extra: &[&str]) -> Result<Rendered, ToolError> {
    let mut args: Vec<std::ffi::OsString> = vec![
        "template".into(),
        release.into(),
        chart.as_os_str().to_owned(),
        "--namespace".into(),
        NAMESPACE.into(),
        "--kube-version".into(),
        KUBERNETES_VERSION.into(),
    ];
    args.extend(extra.iter().map(Into::into));
    let yaml = run_ok("helm", &args)?;
    let docs = parse_documents("helm", &yaml)?;
    Ok(Rendered { yaml, docs })
}

/// The kinds of the chart's RBAC (what the simulator loads to authorize requests).
pub const RBAC_KINDS: [&str; 5] = [
    "ServiceAccount",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
];

/// The RBAC documents of a rendering, in order.
pub fn rbac_documents(r: &Rendered) -> Vec<Value> {
    r.docs
        .iter()
        .filter(|d| RBAC_KINDS.iter().any(|k| d["kind"] == *k))
        .cloned()
        .collect()
}

/// The values `charts/tests/rendered/rbac.yaml` is rendered with: the controller watches the
/// namespaces the simulator's users run it in (the scenario tests and the demo in `default`, the
/// soak in `soak`, multi-namespace scenarios in `default` and `team-a`), each bound by a
/// RoleBinding as the chart's default binds the release namespace; anywhere else it has no rights.
pub const RENDERED_RBAC_VALUES: &[&str] = &["--set", "controller.watchNamespaces={default,soak,team-a}"];

/// `charts/tests/rendered/rbac.yaml`: the chart's RBAC rendered with [`RENDERED_RBAC_VALUES`],
/// for tests that run without helm.
pub fn rendered_rbac_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("rendered/rbac.yaml")
}

/// `helm template` that is expected to fail: returns its stderr, or `None` when it succeeded.
pub fn helm_template_error(extra: &[&str]) -> Result<Option<String>, ToolError> {
    match helm_template(extra) {
        Ok(_) => Ok(None),
        Err(ToolError::Failed { stderr, .. }) => Ok(Some(stderr)),
        Err(e) => Err(e),
    }
}

/// What `kubernetes-validate` said about each document.
#[derive(Clone, Debug, Default)]
pub struct Validation {
    /// `kind/name` of every document that passed its schema.
    pub passed: Vec<String>,
    /// Kinds it has no schema for.
    pub no_schema: Vec<String>,
    /// Every ERROR or FATAL line.
    pub errors: Vec<String>,
    pub exit_ok: bool,
    pub output: String,
}

/// Validate a YAML stream against the Kubernetes schemas (strict: unknown fields are errors).
pub fn kubernetes_validate(yaml: &str) -> Result<Validation, ToolError> {
    let tool_name = "kubernetes-validate";
    let mut file = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .map_err(|source| ToolError::TempFile {
            tool: tool_name.to_string(),
            source,
        })?;
    std::io::Write::write_all(&mut file, yaml.as_bytes()).map_err(|source| ToolError::TempFile {
        tool: tool_name.to_string(),
        source,
    })?;
    let out = run(
        tool_name,
        [
            OsStr::new("--strict"),
            OsStr::new("-k"),
            OsStr::new(KUBERNETES_VERSION),
            file.path().as_os_str(),
        ],
    )?;
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v = Validation {
        exit_ok: out.status.success(),
        output: output.clone(),
        ..Validation::default()
    };
    for line in output.lines() {
        if let Some(rest) = line.split(" passed for resource ").nth(1) {
            v.passed
                .push(rest.split(" against ").next().unwrap_or(rest).to_string());
        } else if let Some(rest) = line.split("Couldn't find schema for kind ").nth(1) {
            v.no_schema.push(rest.split(' ').next().unwrap_or(rest).to_string());
        } else if line.starts_with("ERROR") || line.starts_with("FATAL") {
            v.errors.push(line.to_string());
        }
    }
    Ok(v)
}

/// The documents of every YAML file in `examples/`, with the file name.
pub fn example_documents() -> Result<Vec<(String, Value)>, ExampleError> {
    let dir = examples_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|source| ExampleError::ReadDir {
            dir: dir.display().to_string(),
            source,
        })?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    let mut out = vec![];
    for path in files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = std::fs::read_to_string(&path).map_err(|source| ExampleError::Read {
            file: name.clone(),
            source,
        })?;
        let docs = parse_documents(&name, &text).map_err(|source| ExampleError::Parse {
            file: name.clone(),
            source,
        })?;
        out.extend(docs.into_iter().map(|d| (name.clone(), d)));
    }
    Ok(out)
}

#[derive(Debug, thiserror::Error)]
pub enum ExampleError {
    #[error("failed to list {dir}: {source}")]
    ReadDir {
        dir: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read examples/{file}: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("examples/{file} is not YAML: {source}")]
    Parse {
        file: String,
        #[source]
        source: ToolError,
    },
}

/// A JSON value as a list of strings (`["a", "b"]`); anything else is empty.
pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parse_documents_drops_empty_documents_and_keeps_order() {
        let docs = parse_documents("t", "---\n# only a comment\n---\nkind: A\n---\nkind: B\n").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["kind"], "A");
        assert_eq!(docs[1]["kind"], "B");
    }

    #[test]
    fn a_missing_tool_is_an_error_that_names_the_install_script() {
        let err = tool("captf-no-such-tool").unwrap_err().to_string();
        assert!(err.contains("captf-no-such-tool not found"), "{err}");
        assert!(err.contains("scripts/setup-tools.sh"), "{err}");
    }

    #[test]
    fn strings_reads_a_list_of_strings_and_nothing_else() {
        assert_eq!(strings(&serde_json::json!(["a", "b"])), ["a", "b"]);
        assert!(strings(&serde_json::json!("a")).is_empty());
    }
}

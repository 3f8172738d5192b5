//! The clusterctl provider repository: `clusterctl/infrastructure-terraform/<version>/` holds
//! `infrastructure-components.yaml`, generated from the chart, and a copy of `metadata.yaml`.
//! Regenerate with `cargo run -p captf-chart-tests --bin captf-components`; a test fails when the
//! committed files are stale.
//!
//! The components file is `helm template --include-crds` with the chart's defaults, except that
//! the controller is bound in every namespace (`controller.watchAllNamespaces=true`: a
//! ClusterRoleBinding, clusterctl's convention for providers), then:
//! - one Namespace object (`captf-system`, clusterctl's default target namespace);
//! - `cluster.x-k8s.io/provider: infrastructure-terraform` on every object, and
//!   `app.kubernetes.io/managed-by: clusterctl` instead of Helm's labels;
//! - clusterctl variables (`${VAR:=default}`) for what a user sets at install: see [`VARIABLES`].
//!
//! Nothing per tenant namespace is needed: the controller makes each object's runner
//! ServiceAccount and Role itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::{Rendered, ToolError, helm_template_chart, parse_documents, workspace_root};

/// The provider's clusterctl name (`infrastructure-<name>`), as the provider label's value and
/// the repository folder.
pub const PROVIDER_LABEL: &str = "cluster.x-k8s.io/provider";
pub const PROVIDER: &str = "infrastructure-terraform";
/// The target namespace the components file declares (clusterctl `--target-namespace` renames it).
pub const TARGET_NAMESPACE: &str = "captf-system";
/// The release name rendered (object names start with it: `captf-controller`, ...).
pub const RELEASE: &str = "captf";
/// The components file's name, as the clusterctl contract recommends for infrastructure providers.
pub const COMPONENTS_FILE: &str = "infrastructure-components.yaml";
pub const METADATA_FILE: &str = "metadata.yaml";

/// A clusterctl variable: its name, its default, and what it sets. clusterctl refuses a
/// variable whose default is empty (it takes it for a required one and stops `clusterctl init`
/// until it is set), so one that may be left empty defaults to `""`: the binaries read a flag
/// given as `""` as empty.
#[derive(Clone, Copy, Debug)]
pub struct Variable {
    pub name: &'static str,
    pub default: DefaultValue,
    pub doc: &'static str,
}

/// A variable's default.
#[derive(Clone, Copy, Debug)]
pub enum DefaultValue {
    /// This text.
    Text(&'static str),
    /// The image the chart's defaults name for this component ([`crate::default_image`]): by tag,
    /// or by digest once a release has pinned it, so the components file and the chart always
    /// name the same images.
    ChartImage(&'static str),
}

impl Variable {
    /// The default's text, for the chart at `chart`.
    pub fn default_value(&self, chart: &Path) -> Result<String, GenerateError> {
        match self.default {
            DefaultValue::Text(text) => Ok(text.to_string()),
            DefaultValue::ChartImage(component) => {
                crate::default_image_of(chart, component).map_err(GenerateError::Values)
            }
        }
    }

    /// `${NAME:=default}`, for the chart at `chart`.
    pub fn reference(&self, chart: &Path) -> Result<String, GenerateError> {
        Ok(format!("${{{}:={}}}", self.name, self.default_value(chart)?))
    }
}

/// The variables of the components file (the README lists them).
pub const VARIABLES: [Variable; 10] = [
    Variable {
        name: "CAPTF_CONTROLLER_IMAGE",
        default: DefaultValue::ChartImage("controller"),
        doc: "the controller image",
    },
    Variable {
        name: "CAPTF_WEBHOOK_IMAGE",
        default: DefaultValue::ChartImage("webhook"),
        doc: "the webhook image",
    },
    Variable {
        name: "CAPTF_RUNNER_IMAGE",
        default: DefaultValue::ChartImage("runner"),
        doc: "the runner image of Jobs, which a spec may always name (--runner-image of the controller and the webhook)",
    },
    Variable {
        name: "CAPTF_WATCH_NAMESPACE",
        default: DefaultValue::Text("\"\""),
        doc: "the namespaces the controller watches, comma-separated (--namespace); empty: all. Its RBAC is cluster-wide either way",
    },
    Variable {
        name: "CAPTF_WATCH_FILTER",
        default: DefaultValue::Text("\"\""),
        doc: "Cluster API's watch filter (--watch-filter): serve only the objects labelled cluster.x-k8s.io/watch-filter=<value>; empty: every object",
    },
    Variable {
        name: "CAPTF_LOG_LEVEL",
        default: DefaultValue::Text("info"),
        doc: "RUST_LOG of the controller and the webhook (e.g. debug, or info,captf_controller=debug)",
    },
    Variable {
        name: "CAPTF_RUNNER_SERVICE_ACCOUNT",
        default: DefaultValue::Text("\"\""),
        doc: "the runner pods' ServiceAccount, which a spec may always name (--runner-service-account of the controller and the webhook); empty: each object's own",
    },
    Variable {
        name: "CAPTF_RUNNER_SERVICE_ACCOUNT_ANNOTATIONS",
        default: DefaultValue::Text("\"\""),
        doc: "annotations of every object's own runner ServiceAccount, key=value,... (--runner-service-account-annotations)",
    },
    Variable {
        name: "CAPTF_MAX_RUNNING_JOBS",
        default: DefaultValue::Text("0"),
        doc: "runner Jobs running at once in all namespaces together (--max-running-jobs); 0: no limit",
    },
    Variable {
        name: "CAPTF_MAX_RUNNING_JOBS_PER_NAMESPACE",
        default: DefaultValue::Text("10"),
        doc: "runner Jobs running at once in each namespace (--max-running-jobs-per-namespace); 0: no limit",
    },
];

/// Every variable's `${NAME:=default}`, by name, for the chart at `chart`.
fn references(chart: &Path) -> Result<BTreeMap<&'static str, String>, GenerateError> {
    VARIABLES.iter().map(|v| Ok((v.name, v.reference(chart)?))).collect()
}

/// `clusterctl/infrastructure-terraform/v<chart version>/`.
pub fn repository_dir(version: &str) -> PathBuf {
    workspace_root()
        .join("clusterctl")
        .join(PROVIDER)
        .join(format!("v{version}"))
}

/// The chart's version (`version:` in Chart.yaml), which names the release folder.
pub fn chart_version() -> Result<String, GenerateError> {
    let path = crate::chart_dir().join("Chart.yaml");
    let text = std::fs::read_to_string(&path).map_err(|source| GenerateError::Read {
        file: path.display().to_string(),
        source,
    })?;
    let chart: Value = serde_yaml_ng::from_str(&text).map_err(|source| GenerateError::Yaml {
        file: "charts/captf/Chart.yaml".into(),
        source,
    })?;
    chart["version"]
        .as_str()
        .map(str::to_string)
        .ok_or(GenerateError::Field {
            file: "charts/captf/Chart.yaml",
            field: "version",
        })
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Tool(#[from] ToolError),
    #[error("failed to read {file}: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file} is not YAML: {source}")]
    Yaml {
        file: String,
        #[source]
        source: serde_yaml_ng::Error,
    },
    #[error("{file} has no string field {field}")]
    Field { file: &'static str, field: &'static str },
    #[error("{0}")]
    Values(String),
    #[error("the chart rendered no {what}")]
    Missing { what: String },
}

/// The generated files: `(path relative to the workspace, content)`.
pub fn generate() -> Result<Vec<(PathBuf, String)>, GenerateError> {
    let version = chart_version()?;
    let dir = repository_dir(&version);
    let metadata_path = workspace_root().join(METADATA_FILE);
    let metadata = std::fs::read_to_string(&metadata_path).map_err(|source| GenerateError::Read {
        file: metadata_path.display().to_string(),
        source,
    })?;
    Ok(vec![
        (dir.join(COMPONENTS_FILE), components_yaml()?),
        (dir.join(METADATA_FILE), metadata),
    ])
}

/// The components file's text.
pub fn components_yaml() -> Result<String, GenerateError> {
    components_yaml_of(&crate::chart_dir())
}

/// The components file's text, of the chart at `chart` (a scratch copy).
pub fn components_yaml_of(chart: &Path) -> Result<String, GenerateError> {
    let rendered = helm_template_chart(
        RELEASE,
        chart,
        &["--include-crds", "--set", "controller.watchAllNamespaces=true"],
    )?;
    let docs = components(&rendered, chart)?;
    let mut out = String::from(
        "# Generated from charts/captf by `cargo run -p captf-chart-tests --bin captf-components`. Do not edit.\n",
    );
    // No variable syntax in comments: clusterctl lists every reference in the raw text.
    out.push_str("# clusterctl variables:\n");
    for v in VARIABLES {
        out.push_str(&format!(
            "#   {}: {} (default: {})\n",
            v.name,
            v.doc,
            v.default_value(chart)?
        ));
    }
    for doc in docs {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&doc).map_err(|source| GenerateError::Yaml {
            file: COMPONENTS_FILE.into(),
            source,
        })?);
    }
    Ok(out)
}

/// The components' documents, from the chart at `chart` rendered with `--include-crds` and the
/// controller bound in every namespace.
pub fn components(rendered: &Rendered, chart: &Path) -> Result<Vec<Value>, GenerateError> {
    let namespace = json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": TARGET_NAMESPACE},
    });
    let mut docs: Vec<Value> = vec![namespace];
    // CRDs first (clusterctl applies in its own order, but a reader wants the API first).
    let (crds, rest): (Vec<&Value>, Vec<&Value>) = rendered
        .docs
        .iter()
        .partition(|d| d["kind"] == "CustomResourceDefinition");
    if crds.is_empty() {
        return Err(GenerateError::Missing {
            what: "CustomResourceDefinition (is --include-crds set?)".into(),
        });
    }
    docs.extend(crds.into_iter().cloned());
    docs.extend(rest.into_iter().cloned());
    let vars = references(chart)?;
    let mut found_manager = false;
    for doc in &mut docs {
        relabel(&mut doc["metadata"]);
        if doc["kind"] == "Deployment" {
            relabel(&mut doc["spec"]["template"]["metadata"]);
            if let Some(volumes) = doc.pointer_mut("/spec/template/spec/volumes") {
                octal_modes(volumes);
            }
            if let Some(containers) = doc["spec"]["template"]["spec"]["containers"].as_array_mut() {
                for c in containers {
                    found_manager |= c["name"] == "manager";
                    set_variables(c, &vars);
                }
            }
        }
    }
    if !found_manager {
        return Err(GenerateError::Missing {
            what: "Deployment with a container named manager".into(),
        });
    }
    Ok(docs)
}

/// Helm writes file modes in YAML 1.1 octal (`0440`), which YAML 1.2 reads as a string: write
/// them back as the integer Kubernetes reads.
fn octal_modes(volumes: &mut Value) {
    let Some(volumes) = volumes.as_array_mut() else { return };
    for volume in volumes {
        let Some(volume) = volume.as_object_mut() else { continue };
        for source in volume.values_mut().filter_map(Value::as_object_mut) {
            let Some(mode) = source.get_mut("defaultMode") else {
                continue;
            };
            if let Some(n) = mode
                .as_str()
                .filter(|s| s.starts_with('0'))
                .and_then(|s| u32::from_str_radix(s, 8).ok())
            {
                *mode = json!(n);
            }
        }
    }
}

/// Helm's labels and annotations out, clusterctl's in.
fn relabel(metadata: &mut Value) {
    if let Some(annotations) = metadata.get_mut("annotations").and_then(Value::as_object_mut) {
        annotations.remove("helm.sh/resource-policy");
        if annotations.is_empty()
            && let Some(m) = metadata.as_object_mut()
        {
            m.remove("annotations");
        }
    }
    let labels = &mut metadata["labels"];
    if !labels.is_object() {
        *labels = json!({});
    }
    if let Some(map) = labels.as_object_mut() {
        map.remove("helm.sh/chart");
        if map.contains_key("app.kubernetes.io/managed-by") {
            map.insert("app.kubernetes.io/managed-by".into(), json!("clusterctl"));
        }
        map.insert(PROVIDER_LABEL.into(), json!(PROVIDER));
    }
}

/// Images, the watch namespace and filter, the runner's image and service account, the runner Job
/// limits and the log level become clusterctl variables.
fn set_variables(container: &mut Value, vars: &BTreeMap<&'static str, String>) {
    let variable = |name: &str| vars.get(name).cloned().unwrap_or_default();
    let image = match container["name"].as_str() {
        Some("manager") => Some(variable("CAPTF_CONTROLLER_IMAGE")),
        Some("webhook") => Some(variable("CAPTF_WEBHOOK_IMAGE")),
        _ => None,
    };
    let Some(image) = image else { return };
    let is_manager = container["name"] == "manager";
    container["image"] = json!(image);
    // Both binaries take the runner image and service account (the webhook to allow them as the
    // controller does): the same variables in both.
    if let Some(args) = container["args"].as_array_mut() {
        for a in args.iter_mut() {
            if a.as_str().is_some_and(|s| s.starts_with("--runner-image=")) {
                *a = json!(format!("--runner-image={}", variable("CAPTF_RUNNER_IMAGE")));
            } else if a.as_str().is_some_and(|s| s.starts_with("--runner-service-account=")) {
                *a = json!(format!(
                    "--runner-service-account={}",
                    variable("CAPTF_RUNNER_SERVICE_ACCOUNT")
                ));
            } else if a
                .as_str()
                .is_some_and(|s| s.starts_with("--runner-service-account-annotations="))
            {
                *a = json!(format!(
                    "--runner-service-account-annotations={}",
                    variable("CAPTF_RUNNER_SERVICE_ACCOUNT_ANNOTATIONS")
                ));
            }
        }
    }
    if is_manager && let Some(args) = container["args"].as_array_mut() {
        // The runner Job limits (the chart's controller.maxRunningJobs).
        for a in args.iter_mut() {
            for (flag, var) in [
                ("--max-running-jobs=", "CAPTF_MAX_RUNNING_JOBS"),
                (
                    "--max-running-jobs-per-namespace=",
                    "CAPTF_MAX_RUNNING_JOBS_PER_NAMESPACE",
                ),
            ] {
                if a.as_str().is_some_and(|s| s.starts_with(flag)) {
                    *a = json!(format!("{flag}{}", variable(var)));
                }
            }
        }
        args.retain(|a| !a.as_str().is_some_and(|s| s.starts_with("--namespace=")));
        args.retain(|a| !a.as_str().is_some_and(|s| s.starts_with("--watch-filter=")));
        // After `run`: clusterctl installs watching all namespaces (`--namespace=""`) and every
        // object (`--watch-filter=""`) unless the variables say otherwise.
        let at = usize::from(!args.is_empty());
        args.insert(at, json!(format!("--namespace={}", variable("CAPTF_WATCH_NAMESPACE"))));
        args.insert(
            at + 1,
            json!(format!("--watch-filter={}", variable("CAPTF_WATCH_FILTER"))),
        );
    }
    if !is_manager && let Some(args) = container["args"].as_array_mut() {
        // The webhook warns about objects created outside the namespaces the controller
        // watches: the same variable.
        args.retain(|a| !a.as_str().is_some_and(|s| s.starts_with("--watched-namespaces=")));
        args.push(json!(format!(
            "--watched-namespaces={}",
            variable("CAPTF_WATCH_NAMESPACE")
        )));
    }
    let env = &mut container["env"];
    if !env.is_array() {
        *env = json!([]);
    }
    if let Some(env) = env.as_array_mut() {
        env.retain(|e| e["name"] != "RUST_LOG");
        env.push(json!({"name": "RUST_LOG", "value": variable("CAPTF_LOG_LEVEL")}));
    }
}

/// Replace every `${NAME:=default}` (and `${NAME}`) by the value in `values`, else its default,
/// as clusterctl's envsubst does; for checking the file as clusterctl would install it. As
/// clusterctl does, a variable with no value and an empty (or no) default is an error: the names
/// of all such, sorted.
pub fn substitute(text: &str, values: &BTreeMap<&str, &str>) -> Result<String, Vec<String>> {
    let mut out = String::with_capacity(text.len());
    let mut missing = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let body = &after[..end];
        let (name, default) = body.split_once(":=").unwrap_or((body, ""));
        match values.get(name).copied() {
            Some(v) => out.push_str(v),
            None if default.is_empty() => {
                missing.insert(name.to_string());
            }
            None => out.push_str(default),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(missing.into_iter().collect())
    }
}

/// The variable references (`${...}` bodies) in a text.
pub fn variable_references(text: &str) -> Vec<String> {
    let mut out = vec![];
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        match after.find('}') {
            Some(end) => {
                out.push(after[..end].to_string());
                rest = &after[end + 1..];
            }
            None => break,
        }
    }
    out
}

/// The committed components file's documents.
pub fn parse_components(text: &str) -> Result<Vec<Value>, ToolError> {
    parse_documents(COMPONENTS_FILE, text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn substitute_uses_the_given_value_else_the_default() {
        let values = BTreeMap::from([("A", "x"), ("C", "")]);
        assert_eq!(
            substitute("a=${A:=1} b=${B:=2} c=${C:=}.", &values).unwrap(),
            "a=x b=2 c=."
        );
    }

    #[test]
    fn substitute_refuses_a_variable_with_no_value_and_an_empty_default_as_clusterctl_does() {
        let values = BTreeMap::from([("A", "x")]);
        assert_eq!(
            substitute("${C:=} ${B} ${A} ${D:=\"\"}", &values).unwrap_err(),
            ["B", "C"]
        );
    }

    #[test]
    fn variable_references_lists_every_reference_in_order() {
        assert_eq!(variable_references("${A:=1}-${B}"), ["A:=1", "B"]);
    }
}

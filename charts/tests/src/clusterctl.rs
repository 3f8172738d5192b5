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
/// The chart values the components are rendered with, besides its defaults: the controller
/// bound in every namespace (a ClusterRoleBinding), clusterctl's convention for providers.
pub const COMPONENTS_VALUES: [&str; 2] = ["--set", "controller.watchAllNamespaces=true"];

/// A clusterctl variable: its name, its default, what it sets, and what it means. clusterctl
/// refuses a variable whose default is empty (it takes it for a required one and stops
/// `clusterctl init` until it is set), so one that may be left empty defaults to `""`: the
/// binaries read a flag given as `""` as empty.
#[derive(Clone, Copy, Debug)]
pub struct Variable {
    pub name: &'static str,
    pub default: DefaultValue,
    pub sets: Sets,
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
    /// What the chart, rendered as the components are, passes the controller for the variable's
    /// flag; `""` when it passes it empty or not at all.
    ChartFlag,
}

/// What a variable sets in the components.
#[derive(Clone, Copy, Debug)]
pub enum Sets {
    /// The image of the container of this name (`manager`, `webhook`).
    Image(&'static str),
    /// This environment variable of the controller and the webhook.
    Env(&'static str),
    /// A flag of `captf-controller run` (its long name), passed as `--<flag>=${NAME:=default}`;
    /// `chart`: the chart value that sets the same flag; `webhook`: the webhook's flag that is
    /// given the same value, if the webhook takes it (a tenant policy flag both binaries read).
    Flag {
        flag: &'static str,
        chart: &'static str,
        webhook: Option<&'static str>,
    },
}

/// A `run` flag of the controller, set in the controller only.
const fn controller(flag: &'static str, chart: &'static str) -> Sets {
    Sets::Flag {
        flag,
        chart,
        webhook: None,
    }
}

/// A tenant policy flag, which the controller and the webhook both take: the same value in both.
const fn policy(flag: &'static str, chart: &'static str) -> Sets {
    Sets::Flag {
        flag,
        chart,
        webhook: Some(flag),
    }
}

/// The variables of the components file (docs/install.md lists them). `clusterctl upgrade`
/// renders the components again from these alone, so every flag of `captf-controller run` a user
/// may set is one of them, and every other flag is in [`FIXED_CONTROLLER_FLAGS`].
pub const VARIABLES: [Variable; 32] = [
    Variable {
        name: "CAPTF_CONTROLLER_IMAGE",
        default: DefaultValue::ChartImage("controller"),
        sets: Sets::Image("manager"),
        doc: "the controller image",
    },
    Variable {
        name: "CAPTF_WEBHOOK_IMAGE",
        default: DefaultValue::ChartImage("webhook"),
        sets: Sets::Image("webhook"),
        doc: "the webhook image",
    },
    Variable {
        name: "CAPTF_RUNNER_IMAGE",
        default: DefaultValue::ChartImage("runner"),
        sets: policy("runner-image", "runner.image"),
        doc: "the runner image of Jobs, which a spec may always name (--runner-image of the controller and the webhook)",
    },
    Variable {
        name: "CAPTF_WATCH_NAMESPACE",
        default: DefaultValue::ChartFlag,
        sets: Sets::Flag {
            flag: "namespace",
            chart: "controller.watchNamespaces",
            webhook: Some("watched-namespaces"),
        },
        doc: "the namespaces the controller watches, comma-separated (--namespace); empty: all. Its RBAC is cluster-wide either way",
    },
    Variable {
        name: "CAPTF_WATCH_FILTER",
        default: DefaultValue::ChartFlag,
        sets: controller("watch-filter", "controller.watchFilter"),
        doc: "Cluster API's watch filter (--watch-filter): serve only the objects labelled cluster.x-k8s.io/watch-filter=<value>; empty: every object",
    },
    Variable {
        name: "CAPTF_LOG_LEVEL",
        default: DefaultValue::Text("info"),
        sets: Sets::Env("RUST_LOG"),
        doc: "RUST_LOG of the controller and the webhook (e.g. debug, or info,captf_controller=debug)",
    },
    Variable {
        name: "CAPTF_RUNNER_SERVICE_ACCOUNT",
        default: DefaultValue::ChartFlag,
        sets: policy("runner-service-account", "runner.serviceAccount.name"),
        doc: "the runner pods' ServiceAccount, which a spec may always name (--runner-service-account of the controller and the webhook); empty: each object's own",
    },
    Variable {
        name: "CAPTF_RUNNER_SERVICE_ACCOUNT_ANNOTATIONS",
        default: DefaultValue::ChartFlag,
        sets: controller(
            "runner-service-account-annotations",
            "runner.serviceAccount.annotations",
        ),
        doc: "annotations of every object's own runner ServiceAccount, key=value,... (--runner-service-account-annotations)",
    },
    Variable {
        name: "CAPTF_MAX_RUNNING_JOBS",
        default: DefaultValue::ChartFlag,
        sets: controller("max-running-jobs", "controller.maxRunningJobs.total"),
        doc: "runner Jobs running at once in all namespaces together (--max-running-jobs); 0: no limit",
    },
    Variable {
        name: "CAPTF_MAX_RUNNING_JOBS_PER_NAMESPACE",
        default: DefaultValue::ChartFlag,
        sets: controller(
            "max-running-jobs-per-namespace",
            "controller.maxRunningJobs.perNamespace",
        ),
        doc: "runner Jobs running at once in each namespace (--max-running-jobs-per-namespace); 0: no limit",
    },
    Variable {
        name: "CAPTF_WATCH_LABEL_SELECTOR",
        default: DefaultValue::ChartFlag,
        sets: controller("watch-label-selector", "controller.watchLabelSelector"),
        doc: "serve only the objects whose labels match this label selector (--watch-label-selector), with a leader Lease of its own; empty: every object",
    },
    Variable {
        name: "CAPTF_CONCURRENCY",
        default: DefaultValue::ChartFlag,
        sets: controller("concurrency", "controller.concurrency"),
        doc: "objects reconciled at the same time, per kind (--concurrency)",
    },
    Variable {
        name: "CAPTF_METRICS_AUTH",
        default: DefaultValue::ChartFlag,
        sets: controller("metrics-auth", "controller.metrics.auth"),
        doc: "who may read the controller's /metrics (--metrics-auth): kubernetes, a bearer token the API server authorizes for /metrics; none, anyone who reaches the port",
    },
    Variable {
        name: "CAPTF_ALLOWED_RUNNER_IMAGE_PREFIXES",
        default: DefaultValue::ChartFlag,
        sets: policy("allowed-runner-image-prefixes", "runner.policy.allowedImagePrefixes"),
        doc: "image prefixes spec.jobs.image may start with besides the runner image, comma-separated, * for any (--allowed-runner-image-prefixes of the controller and the webhook)",
    },
    Variable {
        name: "CAPTF_ALLOWED_RUNNER_SERVICE_ACCOUNTS",
        default: DefaultValue::ChartFlag,
        sets: policy(
            "allowed-runner-service-accounts",
            "runner.policy.allowedServiceAccounts",
        ),
        doc: "names spec.jobs.serviceAccountName may be besides CAPTF_RUNNER_SERVICE_ACCOUNT, comma-separated, * for any (--allowed-runner-service-accounts of both)",
    },
    Variable {
        name: "CAPTF_ALLOW_ENV_FROM_SECRETS",
        default: DefaultValue::ChartFlag,
        sets: policy("allow-env-from-secrets", "runner.policy.allowEnvFromSecrets"),
        doc: "whether runner pods may read Secrets the spec names: env, envFrom, volumes, module credentials, state encryption passphrases (--allow-env-from-secrets of both)",
    },
    Variable {
        name: "CAPTF_ALLOW_VARIABLES_FROM_SECRETS",
        default: DefaultValue::ChartFlag,
        sets: policy(
            "allow-variables-from-secrets",
            "runner.policy.allowVariablesFromSecrets",
        ),
        doc: "whether spec.variablesFrom may name Secrets (--allow-variables-from-secrets of both)",
    },
    Variable {
        name: "CAPTF_ALLOWED_RUNNER_PRIORITY_CLASSES",
        default: DefaultValue::ChartFlag,
        sets: policy(
            "allowed-runner-priority-classes",
            "runner.policy.allowedPriorityClasses",
        ),
        doc: "names spec.jobs.priorityClassName may be, comma-separated, * for any; empty: none (--allowed-runner-priority-classes of both)",
    },
    Variable {
        name: "CAPTF_ALLOWED_RUNNER_NODE_LABEL_KEYS",
        default: DefaultValue::ChartFlag,
        sets: policy("allowed-runner-node-label-keys", "runner.policy.allowedNodeLabelKeys"),
        doc: "node label keys spec.jobs.nodeSelector and node affinity may name, comma-separated, * for any (--allowed-runner-node-label-keys of both)",
    },
    Variable {
        name: "CAPTF_ALLOW_RUNNER_NODE_MATCH_FIELDS",
        default: DefaultValue::ChartFlag,
        sets: policy("allow-runner-node-match-fields", "runner.policy.allowNodeMatchFields"),
        doc: "whether node affinity terms may use matchFields, which choose nodes by name (--allow-runner-node-match-fields of both)",
    },
    Variable {
        name: "CAPTF_ALLOWED_RUNNER_TOLERATION_KEYS",
        default: DefaultValue::ChartFlag,
        sets: policy("allowed-runner-toleration-keys", "runner.policy.allowedTolerationKeys"),
        doc: "taint keys spec.jobs.tolerations may name, comma-separated, * for any (--allowed-runner-toleration-keys of both)",
    },
    Variable {
        name: "CAPTF_ALLOW_RUNNER_CROSS_NAMESPACE_POD_AFFINITY",
        default: DefaultValue::ChartFlag,
        sets: policy(
            "allow-runner-cross-namespace-pod-affinity",
            "runner.policy.allowCrossNamespacePodAffinity",
        ),
        doc: "whether pod affinity terms may reach pods of other namespaces (--allow-runner-cross-namespace-pod-affinity of both)",
    },
    Variable {
        name: "CAPTF_ALLOW_APPROVAL_NEVER",
        default: DefaultValue::ChartFlag,
        sets: policy("allow-approval-never", "approvals.allowNever"),
        doc: "whether a spec may let every plan through without approval (--allow-approval-never of both)",
    },
    Variable {
        name: "CAPTF_MAX_APPROVALS_REQUIRED",
        default: DefaultValue::ChartFlag,
        sets: policy("max-approvals-required", "approvals.maxRequired"),
        doc: "the most approvers captf.io/approvals-required may ask for, 1 to 10 (--max-approvals-required of both)",
    },
    Variable {
        name: "CAPTF_RUNNER_REQUESTS",
        default: DefaultValue::ChartFlag,
        sets: controller("runner-requests", "runner.resources.requests"),
        doc: "resource requests of runner pods, name=quantity,... (--runner-requests)",
    },
    Variable {
        name: "CAPTF_RUNNER_LIMITS",
        default: DefaultValue::ChartFlag,
        sets: controller("runner-limits", "runner.resources.limits"),
        doc: "resource limits of runner pods, name=quantity,... (--runner-limits)",
    },
    Variable {
        name: "CAPTF_RUNNER_WORK_SIZE_LIMIT",
        default: DefaultValue::ChartFlag,
        sets: controller("runner-work-size-limit", "runner.workSizeLimit"),
        doc: "sizeLimit of the runner's work emptyDir: providers, modules, plans (--runner-work-size-limit)",
    },
    Variable {
        name: "CAPTF_RUNNER_TMP_SIZE_LIMIT",
        default: DefaultValue::ChartFlag,
        sets: controller("runner-tmp-size-limit", "runner.tmpSizeLimit"),
        doc: "sizeLimit of the runner's /tmp emptyDir (--runner-tmp-size-limit)",
    },
    Variable {
        name: "CAPTF_RUNNER_TERRAFORM_CLI_CONFIG",
        default: DefaultValue::ChartFlag,
        sets: controller("runner-terraform-cli-config", "runner.terraformCliConfig.configMapName"),
        doc: "a ConfigMap, in each object's namespace, holding the Terraform CLI configuration of runner pods, e.g. provider mirrors (--runner-terraform-cli-config); empty: none",
    },
    Variable {
        name: "CAPTF_RUNNER_TERRAFORM_CLI_CONFIG_KEY",
        default: DefaultValue::ChartFlag,
        sets: controller("runner-terraform-cli-config-key", "runner.terraformCliConfig.key"),
        doc: "the key of that ConfigMap holding the configuration (--runner-terraform-cli-config-key)",
    },
    Variable {
        name: "CAPTF_NAMESPACE_NOTIFICATION_TARGETS",
        default: DefaultValue::ChartFlag,
        sets: controller("namespace-notification-targets", "notifications.namespaceTargets"),
        doc: "whether a namespace's ConfigMap captf-notifications adds notification targets for its objects (--namespace-notification-targets)",
    },
    Variable {
        name: "CAPTF_NOTIFY_AFTER_FAILURES",
        default: DefaultValue::ChartFlag,
        sets: controller("notify-after-failures", "notifications.afterFailures"),
        doc: "applies failing this many times in a row send one apply-failed notification (--notify-after-failures)",
    },
];

/// The flags of `captf-controller run` that no variable sets, each with why it is not a user's
/// to set: the components pass what the chart renders for them (or nothing), always.
pub const FIXED_CONTROLLER_FLAGS: [(&str, &str); 10] = [
    (
        "metrics-addr",
        "the metrics port, which the controller's metrics Service targets",
    ),
    (
        "health-addr",
        "the health port, which the liveness and readiness probes target",
    ),
    (
        "leader-elect",
        "always on: a rolling update (clusterctl upgrade) runs the old and the new pod at once, and only the leader may write",
    ),
    (
        "leader-namespace",
        "the Lease stays in the controller's own namespace (POD_NAMESPACE): moved by an upgrade, the old and the new pod would each lead",
    ),
    (
        "leader-lease-seconds",
        "hidden: for the soak harness and tests; 15 s in a cluster",
    ),
    (
        "leader-identity",
        "hidden: the pod's name (POD_NAME), unique among the replicas",
    ),
    (
        "log-format",
        "json, which log collectors parse; the level is CAPTF_LOG_LEVEL",
    ),
    (
        "plan-policies-dir",
        "a directory of the container, where only the chart mounts policy ConfigMaps (planPolicies.configMaps)",
    ),
    (
        "notification-targets-file",
        "a file of the container, where only the chart mounts the targets' ConfigMap (notifications.targets)",
    ),
    (
        "notification-secrets-namespace",
        "read from POD_NAMESPACE: the cluster-wide targets' Secrets live in the controller's own namespace",
    ),
];

/// Every variable's `${NAME:=default}`, in [`VARIABLES`]' order.
fn references(rendered: &Rendered, chart: &Path) -> Result<Vec<(Variable, String)>, GenerateError> {
    let defaults = defaults(rendered, chart)?;
    Ok(VARIABLES
        .iter()
        .zip(defaults)
        .map(|(v, (_, default))| (*v, format!("${{{}:={default}}}", v.name)))
        .collect())
}

/// Every variable's default, in [`VARIABLES`]' order, for the chart at `chart` rendered as the
/// components are (`rendered`).
pub fn defaults(rendered: &Rendered, chart: &Path) -> Result<Vec<(&'static str, String)>, GenerateError> {
    let manager = rendered
        .docs
        .iter()
        .filter(|d| d["kind"] == "Deployment")
        .filter_map(|d| d["spec"]["template"]["spec"]["containers"].as_array())
        .flatten()
        .find(|c| c["name"] == "manager")
        .ok_or_else(|| GenerateError::Missing {
            what: "Deployment with a container named manager".into(),
        })?;
    let args = crate::strings(&manager["args"]);
    VARIABLES
        .iter()
        .map(|v| {
            let default = match (v.default, v.sets) {
                (DefaultValue::Text(text), _) => text.to_string(),
                (DefaultValue::ChartImage(component), _) => {
                    crate::default_image_of(chart, component).map_err(GenerateError::Values)?
                }
                (DefaultValue::ChartFlag, Sets::Flag { flag, .. }) => {
                    let given = format!("--{flag}=");
                    let value = args.iter().find_map(|a| a.strip_prefix(&given)).unwrap_or("");
                    if value.is_empty() {
                        "\"\"".to_string()
                    } else {
                        value.to_string()
                    }
                }
                (DefaultValue::ChartFlag, _) => {
                    return Err(GenerateError::Values(format!(
                        "{} sets no flag to take a default from",
                        v.name
                    )));
                }
            };
            if default.is_empty() || default.contains(['$', '}']) {
                return Err(GenerateError::Values(format!(
                    "{}'s default {default:?} is empty or holds $ or }}, which clusterctl cannot take",
                    v.name
                )));
            }
            Ok((v.name, default))
        })
        .collect()
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
    let mut args = vec!["--include-crds"];
    args.extend(COMPONENTS_VALUES);
    let rendered = helm_template_chart(RELEASE, chart, &args)?;
    let docs = components(&rendered, chart)?;
    let mut out = String::from(
        "# Generated from charts/captf by `cargo run -p captf-chart-tests --bin captf-components`. Do not edit.\n",
    );
    // No variable syntax in comments: clusterctl lists every reference in the raw text.
    out.push_str("# clusterctl variables:\n");
    for (v, (_, default)) in VARIABLES.iter().zip(defaults(&rendered, chart)?) {
        out.push_str(&format!("#   {}: {} (default: {default})\n", v.name, v.doc));
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
    let vars = references(rendered, chart)?;
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

/// Each variable's `${NAME:=default}` in place of what the chart rendered for what it sets: the
/// images, `RUST_LOG`, and the flags of the controller and, for the tenant policy and the watched
/// namespaces, of the webhook. A flag the chart left out (empty) is added at the end.
fn set_variables(container: &mut Value, vars: &[(Variable, String)]) {
    let Some(name) = container["name"].as_str().map(str::to_string) else {
        return;
    };
    if name != "manager" && name != "webhook" {
        return;
    }
    for (v, reference) in vars {
        match v.sets {
            Sets::Image(of) if of == name => container["image"] = json!(reference),
            Sets::Image(_) => {}
            Sets::Env(env) => {
                if !container["env"].is_array() {
                    container["env"] = json!([]);
                }
                if let Some(list) = container["env"].as_array_mut() {
                    list.retain(|e| e["name"] != env);
                    list.push(json!({"name": env, "value": reference}));
                }
            }
            Sets::Flag { flag, webhook, .. } => {
                let flag = if name == "manager" { Some(flag) } else { webhook };
                if let Some(flag) = flag {
                    if !container["args"].is_array() {
                        container["args"] = json!([]);
                    }
                    if let Some(args) = container["args"].as_array_mut() {
                        set_flag(args, flag, reference);
                    }
                }
            }
        }
    }
}

/// `--<flag>=<value>` in place of the first `--<flag>=...` (or bare `--<flag>`) of `args`, the
/// others dropped; at the end when there is none.
fn set_flag(args: &mut Vec<Value>, flag: &str, value: &str) {
    let (bare, given) = (format!("--{flag}"), format!("--{flag}="));
    let is_flag = |a: &Value| a.as_str().is_some_and(|s| s == bare || s.starts_with(&given));
    let arg = json!(format!("{given}{value}"));
    match args.iter().position(is_flag) {
        Some(at) => {
            args[at] = arg;
            let mut i = 0;
            args.retain(|a| {
                i += 1;
                i - 1 == at || !is_flag(a)
            });
        }
        None => args.push(arg),
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

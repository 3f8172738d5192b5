//! Resolving the inputs document (docs/api.md) and `cluster_name`, as pure functions over
//! what was read: the runtime and `explain` use the same ones.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

use crate::exports::{ClusterExports, exported_variables};
use captf_shared::Kind;
use captf_shared::inputs::{Inputs, ModuleRef};
use captf_shared::limits::MAX_PLAN_POLICY_BYTES;
use captf_shared::protocol::PlanPolicy;
use captf_shared::state_encryption::{self, EncryptionInputs};
use captf_shared::types::{SecretKeyRef, TerraformSpec, Variables};
use captf_shared::validation::{MAX_SPEC_VALUES, count_json_values, count_serialized_values, spec_has_too_many_values};
use captf_shared::{keys, module_credentials, references};

/// The variable CAPTF adds with the Cluster API cluster's name.
pub const CLUSTER_NAME_VAR: &str = "cluster_name";
/// The variable CAPTF adds for a TerraformMachine (and a TerraformMachinePool whose MachinePool
/// names one): the bootstrap data Secret's name.
pub const BOOTSTRAP_DATA_SECRET_VAR: &str = "bootstrap_data_secret";
/// The variable CAPTF adds beside [`BOOTSTRAP_DATA_SECRET_VAR`]: the bootstrap data itself (the
/// Secret's `value`, the machine's cloud-init or Ignition), always sensitive.
pub const BOOTSTRAP_DATA_VAR: &str = "bootstrap_data";
/// The variable CAPTF adds beside [`BOOTSTRAP_DATA_VAR`]: its format (the Secret's `format`,
/// `cloud-config` when the Secret has none, as Cluster API's providers assume).
pub const BOOTSTRAP_FORMAT_VAR: &str = "bootstrap_format";
/// The keys of Cluster API's bootstrap data Secret.
pub const BOOTSTRAP_VALUE_KEY: &str = "value";
pub const BOOTSTRAP_FORMAT_KEY: &str = "format";
/// The format a bootstrap data Secret without a `format` key has.
pub const DEFAULT_BOOTSTRAP_FORMAT: &str = "cloud-config";
/// The largest bootstrap data CAPTF passes to a module, in bytes: 256 KiB, the largest user data
/// of the common clouds (GCE's metadata value; EC2 takes 16 KiB, Azure's custom data 64 KiB). More
/// would crowd the inputs Secret (1 MiB with every other variable) and no machine could boot
/// from it anyway.
pub const MAX_BOOTSTRAP_DATA_BYTES: usize = 256 * 1024;

/// The variable CAPTF adds for a TerraformMachine whose Machine names a failure domain
/// (`Machine.spec.failureDomain`).
pub const FAILURE_DOMAIN_VAR: &str = "failure_domain";
/// The variable CAPTF adds for a TerraformMachinePool: its MachinePool's `spec.replicas`.
pub const REPLICAS_VAR: &str = "replicas";

/// What CAPTF reads from the Cluster API object that owns a machine or a machine pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerInputs {
    /// `Machine.spec.failureDomain`.
    pub failure_domain: Option<String>,
    /// `MachinePool.spec.replicas`.
    pub replicas: Option<i64>,
}

/// Add the owner's values to resolved inputs as documented variables (PURE): a TerraformMachine's
/// `failure_domain`, a TerraformMachinePool's `replicas` (the bootstrap data comes through
/// [`resolve_inputs`], which reads its Secret). A value the owner does not set is not added (the
/// module's default applies); a change of any of them changes the inputs, and so starts an apply.
pub fn add_owner_variables(kind: Kind, inputs: &mut Inputs, owner: &OwnerInputs) {
    let vars = &mut inputs.variables;
    match kind {
        Kind::TerraformMachine => {
            if let Some(fd) = owner.failure_domain.as_ref().filter(|f| !f.is_empty()) {
                vars.insert(FAILURE_DOMAIN_VAR.to_string(), Value::String(fd.clone()));
            }
        }
        Kind::TerraformMachinePool => {
            if let Some(r) = owner.replicas {
                vars.insert(REPLICAS_VAR.to_string(), Value::from(r));
            }
        }
        Kind::TerraformCluster => {}
    }
}

/// The cluster name: the label `cluster.x-k8s.io/cluster-name`, else a TerraformCluster's own name.
/// `None` for a member object without the label.
pub fn cluster_name(kind: Kind, meta: &ObjectMeta) -> Option<String> {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(keys::LABEL_CLUSTER_NAME))
        .filter(|v| !v.is_empty())
        .cloned()
        .or_else(|| match kind {
            Kind::TerraformCluster => meta.name.clone(),
            _ => None,
        })
}

/// Which kind of object a `variablesFrom` entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceKind {
    Secret,
    ConfigMap,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Secret => "Secret",
            SourceKind::ConfigMap => "ConfigMap",
        }
    }
}

/// What a lookup of one Secret or ConfigMap returned: its data as text, or absent.
pub type SourceData = Option<BTreeMap<String, String>>;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResolveError {
    #[error("{field}: needs exactly one of secretRef or configMapRef")]
    BadEntry { field: String },
    #[error("{field}: {kind} {name} does not exist (yet)")]
    Missing {
        field: String,
        kind: &'static str,
        name: String,
    },
    #[error("{field}: {kind} {name} has no key {key:?}")]
    MissingKey {
        field: String,
        kind: &'static str,
        name: String,
        key: String,
    },
    #[error("{field}: key {key:?} of {kind} {name} is not a JSON object of variables: {why}")]
    NotVariables {
        field: String,
        kind: &'static str,
        name: String,
        key: String,
        why: String,
    },
    #[error("{field}: cannot be read here (it needs the live {kind} {name})")]
    Offline {
        field: String,
        kind: &'static str,
        name: String,
    },
    #[error("metadata.labels.{label}: a {kind} needs it to name its cluster")]
    NoClusterName { kind: &'static str, label: &'static str },
    #[error(
        "no Machine owns it yet: Cluster API creates the Machine and its bootstrap Secret (a TerraformMachine gets {var} from the Cluster API Machine that names it as its infrastructure; metadata.ownerReferences names none)"
    )]
    NoMachine { var: &'static str },
    #[error(
        "{var}: Machine {machine} names no bootstrap data Secret yet (spec.bootstrap.dataSecretName; its bootstrap provider creates the Secret), or it cannot be read"
    )]
    NoBootstrapData { var: &'static str, machine: String },
    #[error("{field}: Secret {name} {why}")]
    ModuleCredentials { field: String, name: String, why: String },
    #[error("{field}: Secret {name} {why}")]
    StateEncryption { field: String, name: String, why: String },
    #[error(
        "{var}: Secret {name} holds {size} bytes of bootstrap data under {key:?}, more than the {max} CAPTF passes to a module"
    )]
    BootstrapDataTooLarge {
        var: &'static str,
        name: String,
        key: &'static str,
        size: usize,
        max: usize,
    },
    #[error("{field}: Secret {name} is CAPTF's own ({why}); no spec may read it")]
    Forbidden { field: String, name: String, why: String },
    #[error(transparent)]
    Exports(#[from] crate::exports::ExportsError),
    #[error("{field}: ConfigMap {name} holds no policy (no key ending in .rego)")]
    NoPolicies { field: String, name: String },
    #[error("{field}: the policies on the plan would be more than {max} bytes with ConfigMap {name}")]
    PoliciesTooLarge { field: String, name: String, max: usize },
    #[error("spec: holds more than {max} JSON values, so no inputs are built from it")]
    SpecTooLarge { max: usize },
    #[error("{field}: the inputs would hold more than {max} JSON values with {kind} {name}")]
    InputsTooLarge {
        field: String,
        kind: &'static str,
        name: String,
        max: usize,
    },
}

/// The object's owner reference to a Cluster API object of `kind` (`Machine`, `MachinePool`), in
/// any version of Cluster API's group (PURE): the owner whose fields a machine or pool's inputs
/// come from.
pub fn capi_owner_ref<'a>(meta: &'a ObjectMeta, kind: &str) -> Option<&'a OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == kind && o.api_version.starts_with("cluster.x-k8s.io/"))
}

/// Resolve the inputs: `variables` merged with `variablesFrom` in order (later entries win),
/// then `cluster_name` and, for a TerraformMachine (required) or a TerraformMachinePool (when its
/// MachinePool names one), the bootstrap data: `bootstrap_data_secret` (the Secret's name) and,
/// read from that Secret, `bootstrap_data` and `bootstrap_format` ([`bootstrap_data`]).
///
/// Nothing is built from a spec past [`MAX_SPEC_VALUES`] JSON values (an object can reach the
/// controller without the webhook), and the variables and the `variablesFrom` documents share
/// that budget: each document is counted before it is parsed.
///
/// `lookup` returns a Secret's (decoded) or ConfigMap's data, or `None` when it does not exist;
/// `Err(())` means it cannot be read at all (offline), which is reported as such.
pub fn resolve_inputs<F>(
    kind: Kind,
    meta: &ObjectMeta,
    spec: &TerraformSpec,
    bootstrap_data_secret: Option<&str>,
    cluster_exports: Option<&ClusterExports>,
    mut lookup: F,
) -> Result<Inputs, ResolveError>
where
    F: FnMut(SourceKind, &str) -> Result<SourceData, ()>,
{
    if spec_has_too_many_values(spec) {
        return Err(ResolveError::SpecTooLarge { max: MAX_SPEC_VALUES });
    }
    let mut budget = MAX_SPEC_VALUES.saturating_sub(
        spec.variables
            .as_ref()
            .and_then(|v| count_serialized_values(v, MAX_SPEC_VALUES))
            .unwrap_or(0),
    );
    let mut variables: Variables = spec.variables.clone().unwrap_or_default();
    for (i, entry) in spec.variables_from.iter().flatten().enumerate() {
        let (source, r, field) = match (&entry.secret_ref, &entry.config_map_ref) {
            (Some(r), None) => (SourceKind::Secret, r, format!("spec.variablesFrom[{i}].secretRef")),
            (None, Some(r)) => (
                SourceKind::ConfigMap,
                r,
                format!("spec.variablesFrom[{i}].configMapRef"),
            ),
            _ => {
                return Err(ResolveError::BadEntry {
                    field: format!("spec.variablesFrom[{i}]"),
                });
            }
        };
        if source == SourceKind::Secret
            && let Some(p) = references::reserved_secret_prefix(&r.name)
        {
            // Never read, whatever the lookup would return: it may be another object's state,
            // inputs or outputs.
            return Err(forbidden(&field, &r.name, p));
        }
        let data = fetch(&mut lookup, source, &r.name, &field)?;
        let too_large = || ResolveError::InputsTooLarge {
            field: field.clone(),
            kind: source.as_str(),
            name: r.name.clone(),
            max: MAX_SPEC_VALUES,
        };
        match &r.key {
            Some(key) => {
                let text = data.get(key).ok_or_else(|| ResolveError::MissingKey {
                    field: field.clone(),
                    kind: source.as_str(),
                    name: r.name.clone(),
                    key: key.clone(),
                })?;
                let not_vars = |why: String| ResolveError::NotVariables {
                    field: field.clone(),
                    kind: source.as_str(),
                    name: r.name.clone(),
                    key: key.clone(),
                    why,
                };
                let n = count_json_values(text, budget).ok_or_else(too_large)?;
                budget -= n;
                match serde_json::from_str::<Value>(text).map_err(|e| not_vars(e.to_string()))? {
                    Value::Object(map) => variables.extend(map),
                    other => return Err(not_vars(format!("got a JSON {}", json_type(&other)))),
                }
            }
            None => {
                // Each key becomes a variable: a name and a string.
                budget = budget.checked_sub(2 * data.len()).ok_or_else(too_large)?;
                variables.extend(data.into_iter().map(|(k, v)| (k, Value::String(v))));
            }
        }
    }
    if let Some(c) = &spec.module.credentials {
        if let Some(p) = references::reserved_secret_prefix(&c.secret_ref.name) {
            return Err(forbidden("spec.module.credentials.secretRef", &c.secret_ref.name, p));
        }
        check_module_credentials(&c.secret_ref.name, &mut lookup)?;
    }
    if let Some(e) = &spec.state_encryption {
        check_passphrase(
            "spec.stateEncryption.passphraseSecretRef",
            &e.passphrase_secret_ref,
            &mut lookup,
        )?;
        if let Some(previous) = &e.previous_passphrase_secret_ref {
            check_passphrase(
                "spec.stateEncryption.previousPassphraseSecretRef",
                previous,
                &mut lookup,
            )?;
        }
    }
    let cluster = cluster_name(kind, meta).ok_or(ResolveError::NoClusterName {
        kind: kind.as_str(),
        label: keys::LABEL_CLUSTER_NAME,
    })?;
    variables.insert(CLUSTER_NAME_VAR.to_string(), Value::String(cluster));
    let mut public_variables = BTreeSet::new();
    if let Some(c) = cluster_exports.filter(|_| kind != Kind::TerraformCluster) {
        for e in exported_variables(c)? {
            let n = count_serialized_values(&e.value, budget).ok_or_else(|| ResolveError::InputsTooLarge {
                field: e.variable.clone(),
                kind: "TerraformCluster",
                name: c.cluster.clone(),
                max: MAX_SPEC_VALUES,
            })?;
            budget -= n;
            if !e.sensitive {
                public_variables.insert(e.variable.clone());
            }
            variables.insert(e.variable, e.value);
        }
    }
    if kind == Kind::TerraformMachine {
        let var = BOOTSTRAP_DATA_SECRET_VAR;
        let secret = bootstrap_data_secret.ok_or_else(|| match capi_owner_ref(meta, "Machine") {
            Some(m) => ResolveError::NoBootstrapData {
                var,
                machine: m.name.clone(),
            },
            None => ResolveError::NoMachine { var },
        })?;
        bootstrap_data(&mut variables, secret, &mut lookup)?;
    } else if let (Kind::TerraformMachinePool, Some(secret)) = (kind, bootstrap_data_secret) {
        bootstrap_data(&mut variables, secret, &mut lookup)?;
    }
    let policies = plan_policies(meta, spec, &mut lookup)?;
    Ok(Inputs {
        module: ModuleRef {
            source: spec.module.source.clone(),
        },
        variables,
        state_encryption: spec.state_encryption.as_ref().map(EncryptionInputs::of),
        public_variables,
        policies,
    })
}

/// The policies of `spec.guard.policyRefs`: every key ending in `.rego` of each ConfigMap, in
/// order of the list and of the keys, named `<namespace>/<configmap>:<key>`. A ConfigMap that
/// does not exist is waited for like any other reference; one without a policy, or policies
/// past [`MAX_PLAN_POLICY_BYTES`] together, is an error naming the field.
fn plan_policies<F>(meta: &ObjectMeta, spec: &TerraformSpec, lookup: &mut F) -> Result<Vec<PlanPolicy>, ResolveError>
where
    F: FnMut(SourceKind, &str) -> Result<SourceData, ()>,
{
    let ns = meta.namespace.as_deref().unwrap_or_default();
    let mut out = Vec::new();
    let mut size = 0usize;
    let refs = spec.guard.as_ref().and_then(|g| g.policy_refs.as_ref());
    for (i, r) in refs.into_iter().flatten().enumerate() {
        let field = format!("spec.guard.policyRefs[{i}]");
        let data = fetch(lookup, SourceKind::ConfigMap, &r.name, &field)?;
        let before = out.len();
        for (key, source) in data.into_iter().filter(|(k, _)| k.ends_with(".rego")) {
            size += source.len();
            if size > MAX_PLAN_POLICY_BYTES {
                return Err(ResolveError::PoliciesTooLarge {
                    field,
                    name: r.name.clone(),
                    max: MAX_PLAN_POLICY_BYTES,
                });
            }
            out.push(PlanPolicy {
                name: format!("{ns}/{}:{key}", r.name),
                source,
            });
        }
        if out.len() == before {
            return Err(ResolveError::NoPolicies {
                field,
                name: r.name.clone(),
            });
        }
    }
    Ok(out)
}

/// The bootstrap data of a machine or a pool, by name and by value: `bootstrap_data_secret`, and
/// from that Secret (Cluster API's bootstrap provider writes it) `bootstrap_data` (its `value`,
/// at most [`MAX_BOOTSTRAP_DATA_BYTES`]) and `bootstrap_format` (its `format`, else
/// `cloud-config`). A Secret that does not exist yet is waited for, as Cluster API providers do;
/// one without `value`, or with too much, is an error naming it. A Secret named like CAPTF's own
/// is never read.
fn bootstrap_data<F>(variables: &mut Variables, secret: &str, lookup: &mut F) -> Result<(), ResolveError>
where
    F: FnMut(SourceKind, &str) -> Result<SourceData, ()>,
{
    let var = BOOTSTRAP_DATA_VAR;
    if let Some(p) = references::reserved_secret_prefix(secret) {
        return Err(forbidden(var, secret, p));
    }
    let data = fetch(lookup, SourceKind::Secret, secret, var)?;
    let value = data.get(BOOTSTRAP_VALUE_KEY).ok_or_else(|| ResolveError::MissingKey {
        field: var.to_string(),
        kind: SourceKind::Secret.as_str(),
        name: secret.to_string(),
        key: BOOTSTRAP_VALUE_KEY.to_string(),
    })?;
    if value.len() > MAX_BOOTSTRAP_DATA_BYTES {
        return Err(ResolveError::BootstrapDataTooLarge {
            var,
            name: secret.to_string(),
            key: BOOTSTRAP_VALUE_KEY,
            size: value.len(),
            max: MAX_BOOTSTRAP_DATA_BYTES,
        });
    }
    let format = data
        .get(BOOTSTRAP_FORMAT_KEY)
        .filter(|f| !f.is_empty())
        .map_or(DEFAULT_BOOTSTRAP_FORMAT, String::as_str);
    variables.insert(BOOTSTRAP_DATA_SECRET_VAR.to_string(), Value::String(secret.to_string()));
    variables.insert(BOOTSTRAP_DATA_VAR.to_string(), Value::String(value.clone()));
    variables.insert(BOOTSTRAP_FORMAT_VAR.to_string(), Value::String(format.to_string()));
    Ok(())
}

fn forbidden(field: &str, name: &str, prefix: &str) -> ResolveError {
    ResolveError::Forbidden {
        field: field.to_string(),
        name: name.to_string(),
        why: format!("names starting with {prefix:?} are CAPTF's and the state backend's"),
    }
}

/// A referenced Secret's or ConfigMap's data, or why there is none: it cannot be read here
/// (offline), or it does not exist.
fn fetch<F>(
    lookup: &mut F,
    source: SourceKind,
    name: &str,
    field: &str,
) -> Result<BTreeMap<String, String>, ResolveError>
where
    F: FnMut(SourceKind, &str) -> Result<SourceData, ()>,
{
    lookup(source, name)
        .map_err(|()| ResolveError::Offline {
            field: field.to_string(),
            kind: source.as_str(),
            name: name.to_string(),
        })?
        .ok_or_else(|| ResolveError::Missing {
            field: field.to_string(),
            kind: source.as_str(),
            name: name.to_string(),
        })
}

/// The module credentials Secret must exist and be usable before a Job mounts it: otherwise
/// the pod would wait for a volume that never comes, or `init` would fail on authentication
/// far from the cause. Its content is no input: rotating a key starts no apply.
fn check_module_credentials<F>(name: &str, lookup: &mut F) -> Result<(), ResolveError>
where
    F: FnMut(SourceKind, &str) -> Result<SourceData, ()>,
{
    const FIELD: &str = "spec.module.credentials.secretRef";
    let data = fetch(lookup, SourceKind::Secret, name, FIELD)?;
    module_credentials::check(data.iter().map(|(k, v)| (k.as_str(), v.is_empty())))
        .map(|_| ())
        .map_err(|why| ResolveError::ModuleCredentials {
            field: FIELD.to_string(),
            name: name.to_string(),
            why: why.to_string(),
        })
}

/// A passphrase Secret must exist and hold a usable passphrase under its key before a Job mounts
/// it: otherwise the pod would wait for a volume that never comes, or OpenTofu would fail far
/// from the cause. Only its presence and length are looked at; the value is no input.
fn check_passphrase<F>(field: &str, r: &SecretKeyRef, lookup: &mut F) -> Result<(), ResolveError>
where
    F: FnMut(SourceKind, &str) -> Result<SourceData, ()>,
{
    if let Some(p) = references::reserved_secret_prefix(&r.name) {
        return Err(forbidden(field, &r.name, p));
    }
    let data = fetch(lookup, SourceKind::Secret, &r.name, field)?;
    let key = r.key_or_default();
    let value = data.get(key).ok_or_else(|| ResolveError::MissingKey {
        field: field.to_string(),
        kind: SourceKind::Secret.as_str(),
        name: r.name.clone(),
        key: key.to_string(),
    })?;
    match state_encryption::passphrase_problem(value) {
        Some(why) => Err(ResolveError::StateEncryption {
            field: field.to_string(),
            name: r.name.clone(),
            why: format!("{why} (key {key})"),
        }),
        None => Ok(()),
    }
}

/// The variables the runner must treat as sensitive: `bootstrap_data` always, and every other
/// one whose value is not what `spec.variables` says (so it came from `variablesFrom`: a Secret,
/// or a ConfigMap, treated the same; or from a sensitive export of the cluster), except the names
/// and words CAPTF sets itself (`cluster_name`, `bootstrap_data_secret`, `bootstrap_format`) and
/// the cluster's public exports (`inputs.public_variables`). Sorted.
pub fn sensitive_variables(spec: &TerraformSpec, inputs: &Inputs) -> Vec<String> {
    let literal = spec.variables.clone().unwrap_or_default();
    inputs
        .variables
        .iter()
        .filter(|(k, v)| {
            k.as_str() == BOOTSTRAP_DATA_VAR
                || (![CLUSTER_NAME_VAR, BOOTSTRAP_DATA_SECRET_VAR, BOOTSTRAP_FORMAT_VAR].contains(&k.as_str())
                    && !inputs.public_variables.contains(*k)
                    && literal.get(*k) != Some(*v))
        })
        .map(|(k, _)| k.clone())
        .collect()
}

/// The values the runner masks because they came from `variablesFrom` (PURE): every string in
/// the value of each of the [`sensitive_variables`] (and, for a structured value, its JSON text),
/// as [`captf_shared::mask::value_strings`] gives them.
pub fn secret_input_values(spec: &TerraformSpec, inputs: &Inputs) -> Vec<String> {
    sensitive_variables(spec, inputs)
        .iter()
        .filter_map(|name| inputs.variables.get(name))
        .flat_map(captf_shared::mask::value_strings)
        .collect()
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::exports::ExportsError;
    use captf_shared::types::{ModuleSpec, VariablesFrom, VariablesRef};

    #[test]
    fn variables_not_written_in_the_spec_are_sensitive() {
        let s = TerraformSpec {
            variables: Some(BTreeMap::from([
                ("region".to_string(), serde_json::json!("eu")),
                ("size".to_string(), serde_json::json!("small")),
            ])),
            ..TerraformSpec::default()
        };
        let inputs = Inputs {
            state_encryption: None,
            public_variables: Default::default(),
            policies: Vec::new(),
            module: ModuleRef::default(),
            variables: BTreeMap::from([
                ("region".to_string(), serde_json::json!("eu")),
                // Overridden by a variablesFrom entry: its value is not the spec's.
                ("size".to_string(), serde_json::json!("large")),
                ("token".to_string(), serde_json::json!("s3cr3t")),
                (CLUSTER_NAME_VAR.to_string(), serde_json::json!("c")),
                (BOOTSTRAP_DATA_SECRET_VAR.to_string(), serde_json::json!("m-bootstrap")),
            ]),
        };
        assert_eq!(sensitive_variables(&s, &inputs), ["size", "token"]);
    }
    use serde_json::json;

    fn meta(name: &str, label: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            labels: label.map(|l| [(keys::LABEL_CLUSTER_NAME.to_string(), l.to_string())].into()),
            ..Default::default()
        }
    }

    fn spec() -> TerraformSpec {
        TerraformSpec {
            module: ModuleSpec {
                source: "git::https://example.com/m.git".into(),
                ..Default::default()
            },
            variables: Some([("region".to_string(), json!("eu-west-1")), ("n".to_string(), json!(3))].into()),
            ..Default::default()
        }
    }

    #[test]
    fn cluster_name_is_the_label_or_a_clusters_own_name() {
        assert_eq!(
            cluster_name(Kind::TerraformCluster, &meta("prod-eu", None)).as_deref(),
            Some("prod-eu")
        );
        assert_eq!(
            cluster_name(Kind::TerraformCluster, &meta("x", Some("prod"))).as_deref(),
            Some("prod")
        );
        assert_eq!(
            cluster_name(Kind::TerraformMachinePool, &meta("w", Some("prod"))).as_deref(),
            Some("prod")
        );
        assert_eq!(cluster_name(Kind::TerraformMachinePool, &meta("w", None)), None);
    }

    #[test]
    fn variables_merge_in_order_and_captf_adds_cluster_name() {
        let mut s = spec();
        s.variables_from = Some(vec![
            VariablesFrom {
                secret_ref: Some(VariablesRef {
                    name: "a".into(),
                    key: Some("vars.json".into()),
                }),
                config_map_ref: None,
            },
            VariablesFrom {
                secret_ref: None,
                config_map_ref: Some(VariablesRef {
                    name: "b".into(),
                    key: None,
                }),
            },
        ]);
        let inputs = resolve_inputs(
            Kind::TerraformCluster,
            &meta("prod-eu", None),
            &s,
            None,
            None,
            |k, name| {
                Ok(match (k, name) {
                    (SourceKind::Secret, "a") => Some([("vars.json".into(), r#"{"n": 5, "size": "m"}"#.into())].into()),
                    (SourceKind::ConfigMap, "b") => Some([("size".into(), "l".into())].into()),
                    _ => None,
                })
            },
        )
        .unwrap();
        assert_eq!(
            serde_json::to_value(&inputs.variables).unwrap(),
            json!({"region": "eu-west-1", "n": 5, "size": "l", "cluster_name": "prod-eu"})
        );
    }

    #[test]
    fn another_objects_outputs_or_state_secret_is_never_read_into_the_inputs() {
        for (name, credentials) in [
            ("captf-outputs-victim-tc", false),
            ("tfstate-default-victim-tc", false),
            ("captf-inputs-victim-tc", true),
        ] {
            let mut s = spec();
            if credentials {
                s.module.credentials = Some(captf_shared::types::ModuleCredentials {
                    secret_ref: captf_shared::types::SecretName { name: name.into() },
                });
            } else {
                s.variables_from = Some(vec![VariablesFrom {
                    secret_ref: Some(VariablesRef {
                        name: name.into(),
                        key: None,
                    }),
                    config_map_ref: None,
                }]);
            }
            let looked_up = std::cell::Cell::new(false);
            let e = resolve_inputs(Kind::TerraformCluster, &meta("thief", None), &s, None, None, |_, _| {
                looked_up.set(true);
                Ok(Some([("kubeconfig".to_string(), "secret".to_string())].into()))
            })
            .unwrap_err();
            assert!(matches!(e, ResolveError::Forbidden { .. }), "{e:?}");
            assert!(e.to_string().contains(&format!("Secret {name} is CAPTF's own")), "{e}");
            assert!(!looked_up.get(), "{name} was read");
        }
    }

    #[test]
    fn a_missing_or_offline_reference_is_named() {
        let mut s = spec();
        s.variables_from = Some(vec![VariablesFrom {
            secret_ref: Some(VariablesRef {
                name: "creds".into(),
                key: None,
            }),
            config_map_ref: None,
        }]);
        let e = resolve_inputs(Kind::TerraformCluster, &meta("p", None), &s, None, None, |_, _| {
            Ok(None)
        })
        .unwrap_err();
        assert!(matches!(e, ResolveError::Missing { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "spec.variablesFrom[0].secretRef: Secret creds does not exist (yet)"
        );
        let e = resolve_inputs(Kind::TerraformCluster, &meta("p", None), &s, None, None, |_, _| Err(())).unwrap_err();
        assert!(matches!(e, ResolveError::Offline { .. }), "{e:?}");
        assert!(e.to_string().contains("cannot be read here"));
    }

    #[test]
    fn the_policies_of_policy_refs_are_their_rego_keys_and_no_input() {
        let mut s = spec();
        s.guard = Some(captf_shared::types::GuardSpec {
            policy_refs: Some(vec![
                captf_shared::types::PolicyRef { name: "team".into() },
                captf_shared::types::PolicyRef { name: "extra".into() },
            ]),
            ..Default::default()
        });
        let lookup = |with_extra: Option<BTreeMap<String, String>>| {
            move |k: SourceKind, name: &str| {
                Ok(match (k, name) {
                    (SourceKind::ConfigMap, "team") => Some(
                        [
                            ("b.rego".to_string(), "package main.b".to_string()),
                            ("a.rego".to_string(), "package main.a".to_string()),
                            ("README".to_string(), "not a policy".to_string()),
                        ]
                        .into(),
                    ),
                    (SourceKind::ConfigMap, "extra") => with_extra.clone(),
                    _ => None,
                })
            }
        };
        let extra = Some([("x.rego".to_string(), "package main.x".to_string())].into());
        let inputs = resolve_inputs(Kind::TerraformCluster, &meta("p", None), &s, None, None, lookup(extra)).unwrap();
        let names: Vec<&str> = inputs.policies.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            ["default/team:a.rego", "default/team:b.rego", "default/extra:x.rego"]
        );
        // Not an input: the hash is the one without them.
        let mut without = inputs.clone();
        without.policies.clear();
        assert_eq!(inputs.hash(), without.hash());
        // A ConfigMap that does not exist is waited for, one without a policy refused, by field.
        let e = resolve_inputs(Kind::TerraformCluster, &meta("p", None), &s, None, None, lookup(None)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.guard.policyRefs[1]: ConfigMap extra does not exist (yet)"
        );
        let empty = Some([("notes".to_string(), "x".to_string())].into());
        let e = resolve_inputs(Kind::TerraformCluster, &meta("p", None), &s, None, None, lookup(empty)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.guard.policyRefs[1]: ConfigMap extra holds no policy (no key ending in .rego)"
        );
        let big = Some([("big.rego".to_string(), "#".repeat(MAX_PLAN_POLICY_BYTES))].into());
        let e = resolve_inputs(Kind::TerraformCluster, &meta("p", None), &s, None, None, lookup(big)).unwrap_err();
        assert!(matches!(e, ResolveError::PoliciesTooLarge { .. }), "{e:?}");
    }

    #[test]
    fn no_inputs_are_built_from_a_spec_past_max_spec_values_json_values() {
        let mut s = spec();
        s.variables = Some([("x".to_string(), json!(vec![0; MAX_SPEC_VALUES]))].into());
        let looked_up = std::cell::Cell::new(false);
        let e = resolve_inputs(Kind::TerraformCluster, &meta("p", None), &s, None, None, |_, _| {
            looked_up.set(true);
            Ok(None)
        })
        .unwrap_err();
        assert_eq!(e, ResolveError::SpecTooLarge { max: MAX_SPEC_VALUES });
        assert_eq!(
            e.to_string(),
            format!("spec: holds more than {MAX_SPEC_VALUES} JSON values, so no inputs are built from it")
        );
        assert!(!looked_up.get());
    }

    #[test]
    fn variables_from_documents_share_the_json_value_limit_with_the_spec_and_are_counted_before_parsing() {
        let mut s = spec();
        let entry = |name: &str, key: Option<&str>| VariablesFrom {
            secret_ref: Some(VariablesRef {
                name: name.into(),
                key: key.map(Into::into),
            }),
            config_map_ref: None,
        };
        // Each document alone is within the limit; together with the spec's variables they are not.
        let half = format!(r#"{{"big": [{}0]}}"#, "0,".repeat(MAX_SPEC_VALUES / 2));
        s.variables_from = Some(vec![entry("a", Some("vars.json")), entry("b", Some("vars.json"))]);
        let lookup = |_: SourceKind, _: &str| Ok(Some([("vars.json".to_string(), half.clone())].into()));
        let e = resolve_inputs(Kind::TerraformCluster, &meta("p", None), &s, None, None, lookup).unwrap_err();
        assert_eq!(
            e,
            ResolveError::InputsTooLarge {
                field: "spec.variablesFrom[1].secretRef".into(),
                kind: "Secret",
                name: "b".into(),
                max: MAX_SPEC_VALUES,
            }
        );
        // One of them fits.
        s.variables_from = Some(vec![entry("a", Some("vars.json"))]);
        assert!(resolve_inputs(Kind::TerraformCluster, &meta("p", None), &s, None, None, lookup).is_ok());
        // A whole Secret's keys count as a name and a string each.
        s.variables_from = Some(vec![entry("a", None)]);
        let many: BTreeMap<String, String> = (0..MAX_SPEC_VALUES / 2)
            .map(|i| (format!("v{i}"), String::new()))
            .collect();
        let e = resolve_inputs(Kind::TerraformCluster, &meta("p", None), &s, None, None, |_, _| {
            Ok(Some(many.clone()))
        })
        .unwrap_err();
        assert!(matches!(e, ResolveError::InputsTooLarge { .. }), "{e:?}");
    }

    #[test]
    fn owner_values_become_the_documented_variables_of_their_kind_only() {
        let owner = OwnerInputs {
            failure_domain: Some("eu-west-1a".into()),
            replicas: Some(3),
        };
        let base = resolve_inputs(
            Kind::TerraformMachinePool,
            &meta("p", Some("c")),
            &spec(),
            None,
            None,
            |_, _| Ok(None),
        )
        .unwrap();
        let mut pool = base.clone();
        add_owner_variables(Kind::TerraformMachinePool, &mut pool, &owner);
        assert_eq!(pool.variables[REPLICAS_VAR], json!(3));
        assert!(!pool.variables.contains_key(FAILURE_DOMAIN_VAR));
        let mut machine = base.clone();
        add_owner_variables(Kind::TerraformMachine, &mut machine, &owner);
        assert_eq!(machine.variables[FAILURE_DOMAIN_VAR], json!("eu-west-1a"));
        assert!(!machine.variables.contains_key(REPLICAS_VAR));
        let mut cluster = base.clone();
        add_owner_variables(Kind::TerraformCluster, &mut cluster, &owner);
        assert_eq!(cluster, base);
        // Unset values add nothing; a changed value changes the inputs (and so starts an apply).
        let mut unset = base.clone();
        add_owner_variables(Kind::TerraformMachinePool, &mut unset, &OwnerInputs::default());
        assert_eq!(unset, base);
        let mut scaled = base.clone();
        add_owner_variables(
            Kind::TerraformMachinePool,
            &mut scaled,
            &OwnerInputs {
                replicas: Some(5),
                ..owner.clone()
            },
        );
        assert_ne!(scaled, pool);
    }

    #[test]
    fn a_machine_needs_its_bootstrap_data_secret() {
        let mut m = meta("m-1", Some("prod"));
        // No Machine owns it: that is what is missing, not a Secret.
        let e = resolve_inputs(Kind::TerraformMachine, &m, &spec(), None, None, |_, _| Ok(None)).unwrap_err();
        assert!(matches!(e, ResolveError::NoMachine { .. }), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("no Machine owns it yet: Cluster API creates the Machine and its bootstrap Secret"),
            "{e}"
        );
        // A Machine owns it and names no Secret yet.
        m.owner_references = Some(vec![OwnerReference {
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: "Machine".into(),
            name: "m-1-abcde".into(),
            uid: "u".into(),
            controller: Some(true),
            ..OwnerReference::default()
        }]);
        let e = resolve_inputs(Kind::TerraformMachine, &m, &spec(), None, None, |_, _| Ok(None)).unwrap_err();
        assert_eq!(
            e,
            ResolveError::NoBootstrapData {
                var: BOOTSTRAP_DATA_SECRET_VAR,
                machine: "m-1-abcde".into()
            }
        );
        let i = resolve_inputs(
            Kind::TerraformMachine,
            &m,
            &spec(),
            Some("m-1-bootstrap"),
            None,
            |_, _| Ok(Some(bootstrap_secret("#cloud-config\n", Some("cloud-config")))),
        )
        .unwrap();
        assert_eq!(i.variables[BOOTSTRAP_DATA_SECRET_VAR], json!("m-1-bootstrap"));
    }

    /// Cluster API's bootstrap data Secret: `value` and, when given, `format`.
    fn bootstrap_secret(value: &str, format: Option<&str>) -> BTreeMap<String, String> {
        let mut data = BTreeMap::from([(BOOTSTRAP_VALUE_KEY.to_string(), value.to_string())]);
        data.extend(format.map(|f| (BOOTSTRAP_FORMAT_KEY.to_string(), f.to_string())));
        data
    }

    fn owned_by(kind: &str, name: &str) -> ObjectMeta {
        let mut m = meta(name, Some("prod"));
        m.owner_references = Some(vec![OwnerReference {
            api_version: "cluster.x-k8s.io/v1beta2".into(),
            kind: kind.into(),
            name: name.into(),
            uid: "u".into(),
            controller: Some(true),
            ..OwnerReference::default()
        }]);
        m
    }

    #[test]
    fn a_machine_gets_its_bootstrap_data_by_value_with_its_format() {
        let m = owned_by("Machine", "m-1");
        for (format, passed) in [
            (Some("cloud-config"), "cloud-config"),
            (Some("ignition"), "ignition"),
            // A Secret without a format, or an empty one: Cluster API's default.
            (None, "cloud-config"),
            (Some(""), "cloud-config"),
        ] {
            let i = resolve_inputs(
                Kind::TerraformMachine,
                &m,
                &spec(),
                Some("m-1-bootstrap"),
                None,
                |kind, name| {
                    assert_eq!((kind, name), (SourceKind::Secret, "m-1-bootstrap"));
                    Ok(Some(bootstrap_secret(
                        "#cloud-config\nruncmd: [kubeadm join]\n",
                        format,
                    )))
                },
            )
            .unwrap();
            assert_eq!(i.variables[BOOTSTRAP_DATA_SECRET_VAR], json!("m-1-bootstrap"));
            assert_eq!(
                i.variables[BOOTSTRAP_DATA_VAR],
                json!("#cloud-config\nruncmd: [kubeadm join]\n")
            );
            assert_eq!(i.variables[BOOTSTRAP_FORMAT_VAR], json!(passed), "{format:?}");
        }
        // New bootstrap data (a rotated join token) is a new input, so a new plan.
        let with = |value: &str| {
            resolve_inputs(Kind::TerraformMachine, &m, &spec(), Some("b"), None, |_, _| {
                Ok(Some(bootstrap_secret(value, None)))
            })
            .unwrap()
        };
        assert_ne!(with("token a").hash(), with("token b").hash());
    }

    #[test]
    fn a_machine_pool_gets_bootstrap_data_only_when_its_machine_pool_names_a_secret() {
        let p = owned_by("MachinePool", "pool");
        let none = resolve_inputs(Kind::TerraformMachinePool, &p, &spec(), None, None, |_, _| Ok(None)).unwrap();
        for var in [BOOTSTRAP_DATA_SECRET_VAR, BOOTSTRAP_DATA_VAR, BOOTSTRAP_FORMAT_VAR] {
            assert!(!none.variables.contains_key(var), "{var}");
        }
        let named = resolve_inputs(
            Kind::TerraformMachinePool,
            &p,
            &spec(),
            Some("pool-bootstrap"),
            None,
            |_, _| Ok(Some(bootstrap_secret("{\"ignition\":{}}", Some("ignition")))),
        )
        .unwrap();
        assert_eq!(named.variables[BOOTSTRAP_DATA_SECRET_VAR], json!("pool-bootstrap"));
        assert_eq!(named.variables[BOOTSTRAP_DATA_VAR], json!("{\"ignition\":{}}"));
        assert_eq!(named.variables[BOOTSTRAP_FORMAT_VAR], json!("ignition"));
        // A cluster has no bootstrap data, whatever is passed.
        let c = resolve_inputs(
            Kind::TerraformCluster,
            &meta("c", None),
            &spec(),
            Some("x"),
            None,
            |_, _| panic!("a cluster reads no bootstrap Secret"),
        )
        .unwrap();
        assert!(!c.variables.contains_key(BOOTSTRAP_DATA_VAR));
    }

    #[test]
    fn bootstrap_data_waits_for_its_secret_and_refuses_one_without_value_or_past_256_kib() {
        let m = owned_by("Machine", "m-1");
        let resolve = |data: SourceData| {
            resolve_inputs(
                Kind::TerraformMachine,
                &m,
                &spec(),
                Some("m-1-bootstrap"),
                None,
                move |_, _| Ok(data.clone()),
            )
        };
        // Not there yet: waited for, named.
        assert_eq!(
            resolve(None).unwrap_err().to_string(),
            "bootstrap_data: Secret m-1-bootstrap does not exist (yet)"
        );
        // No value.
        let e = resolve(Some(BTreeMap::from([(
            "format".to_string(),
            "cloud-config".to_string(),
        )])))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "bootstrap_data: Secret m-1-bootstrap has no key \"value\""
        );
        // 256 KiB passes; one byte more is refused with the sizes.
        assert_eq!(MAX_BOOTSTRAP_DATA_BYTES, 262_144);
        let at_limit = "x".repeat(262_144);
        let i = resolve(Some(bootstrap_secret(&at_limit, None))).unwrap();
        assert_eq!(i.variables[BOOTSTRAP_DATA_VAR].as_str().map(str::len), Some(262_144));
        let e = resolve(Some(bootstrap_secret(&"x".repeat(262_145), None))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "bootstrap_data: Secret m-1-bootstrap holds 262145 bytes of bootstrap data under \"value\", more than the 262144 CAPTF passes to a module"
        );
        // A name of CAPTF's own is never read.
        let e = resolve_inputs(
            Kind::TerraformMachine,
            &m,
            &spec(),
            Some("captf-inputs-x"),
            None,
            |_, _| panic!("a reserved name is not read"),
        )
        .unwrap_err();
        assert!(
            matches!(e, ResolveError::Forbidden { ref field, .. } if field == BOOTSTRAP_DATA_VAR),
            "{e:?}"
        );
    }

    #[test]
    fn bootstrap_data_is_always_sensitive_and_its_name_and_format_never() {
        let m = owned_by("Machine", "m-1");
        let mut s = spec();
        // Even a spec that writes the same value (it is overridden) does not make it literal.
        s.variables
            .get_or_insert_default()
            .insert(BOOTSTRAP_DATA_VAR.to_string(), json!("#cloud-config"));
        let i = resolve_inputs(Kind::TerraformMachine, &m, &s, Some("m-1-bootstrap"), None, |_, _| {
            Ok(Some(bootstrap_secret("#cloud-config", Some("cloud-config"))))
        })
        .unwrap();
        assert_eq!(sensitive_variables(&s, &i), vec![BOOTSTRAP_DATA_VAR.to_string()]);
        assert_eq!(secret_input_values(&s, &i), vec!["#cloud-config".to_string()]);
    }
    #[test]
    fn module_credentials_must_name_a_usable_secret_and_are_no_input() {
        use captf_shared::types::{ModuleCredentials, SecretName};
        let mut s = spec();
        let plain = resolve_inputs(Kind::TerraformCluster, &meta("p", None), &s, None, None, |_, _| {
            Ok(None)
        })
        .unwrap();
        s.module.credentials = Some(ModuleCredentials {
            secret_ref: SecretName { name: "git-ssh".into() },
        });
        let with = |data: Option<&[(&str, &str)]>| {
            resolve_inputs(
                Kind::TerraformCluster,
                &meta("p", None),
                &s,
                None,
                None,
                |kind, name| {
                    assert_eq!((kind, name), (SourceKind::Secret, "git-ssh"));
                    Ok(data.map(|d| d.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()))
                },
            )
        };
        let e = with(None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.module.credentials.secretRef: Secret git-ssh does not exist (yet)"
        );
        let e = with(Some(&[("ssh-privatekey", "-----BEGIN OPENSSH PRIVATE KEY-----")])).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "spec.module.credentials.secretRef: Secret git-ssh has ssh-privatekey without \"known_hosts\""
            ),
            "{e}"
        );
        let ok = with(Some(&[("ssh-privatekey", "k"), ("known_hosts", "h")])).unwrap();
        assert_eq!(
            ok, plain,
            "the credentials change nothing in the inputs (nor their hash)"
        );
    }

    #[test]
    fn a_state_encryption_passphrase_must_exist_with_16_characters_and_only_its_reference_is_an_input() {
        use captf_shared::types::{SecretKeyRef, StateEncryption};
        let mut s = spec();
        let plain = resolve_inputs(Kind::TerraformCluster, &meta("p", None), &s, None, None, |_, _| {
            Ok(None)
        })
        .unwrap();
        s.state_encryption = Some(StateEncryption {
            passphrase_secret_ref: SecretKeyRef {
                name: "state-key".into(),
                key: None,
            },
            previous_passphrase_secret_ref: None,
            mode: None,
        });
        let with = |data: Option<&[(&str, &str)]>| {
            resolve_inputs(
                Kind::TerraformCluster,
                &meta("p", None),
                &s,
                None,
                None,
                |kind, name| {
                    assert_eq!((kind, name), (SourceKind::Secret, "state-key"));
                    Ok(data.map(|d| d.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()))
                },
            )
        };
        assert_eq!(
            with(None).unwrap_err().to_string(),
            "spec.stateEncryption.passphraseSecretRef: Secret state-key does not exist (yet)"
        );
        let e = with(Some(&[("other", "x")])).unwrap_err().to_string();
        assert!(
            e.starts_with("spec.stateEncryption.passphraseSecretRef: Secret state-key has no key"),
            "{e}"
        );
        let e = with(Some(&[("passphrase", "short-secret")])).unwrap_err().to_string();
        assert_eq!(
            e,
            "spec.stateEncryption.passphraseSecretRef: Secret state-key holds a passphrase of 12 characters; OpenTofu needs at least 16 (key passphrase)"
        );
        assert!(!e.contains("short-secret"), "the value is never shown");
        let a = with(Some(&[("passphrase", "a-long-enough-passphrase")])).unwrap();
        let b = with(Some(&[("passphrase", "another-long-enough-passphrase")])).unwrap();
        assert_eq!(a, b, "the passphrase's value is no input");
        assert_ne!(
            a.hash(),
            plain.hash(),
            "turning encryption on changes the inputs, so it is applied"
        );
        assert_eq!(
            a.state_encryption.as_ref().map(|e| e.passphrase.as_str()),
            Some("state-key/passphrase")
        );
        s.state_encryption.as_mut().unwrap().passphrase_secret_ref.name = "tfstate-default-x".into();
        let e = resolve_inputs(Kind::TerraformCluster, &meta("p", None), &s, None, None, |_, _| {
            Ok(None)
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("is CAPTF's own"), "{e}");
    }

    #[test]
    fn an_object_without_state_encryption_keeps_the_inputs_hash_it_had_before_the_field_existed() {
        let s = spec();
        let i = resolve_inputs(Kind::TerraformCluster, &meta("p", None), &s, None, None, |_, _| {
            Ok(None)
        })
        .unwrap();
        assert!(
            !i.canonical_json().contains("stateEncryption"),
            "{}",
            i.canonical_json()
        );
    }

    fn exports_of_prod() -> ClusterExports {
        ClusterExports {
            cluster: "prod".into(),
            exports: vec!["vpc_id".into(), "db_password".into()],
            outputs: Some(json!({
                "vpc_id": {"sensitive": false, "value": "vpc-0a1b"},
                "db_password": {"sensitive": true, "value": "s3cr3t-pw"}
            })),
        }
    }

    #[test]
    fn a_member_receives_its_clusters_exports_after_its_own_variables_with_their_sensitivity() {
        let mut s = spec();
        // A member's own value of an exported name gives way to the cluster's, as cluster_name does.
        s.variables
            .get_or_insert_default()
            .insert("cluster_vpc_id".into(), json!("mine"));
        let c = exports_of_prod();
        let i = resolve_inputs(
            Kind::TerraformMachinePool,
            &meta("p", Some("prod")),
            &s,
            None,
            Some(&c),
            |_, _| Ok(None),
        )
        .unwrap();
        assert_eq!(i.variables["cluster_vpc_id"], json!("vpc-0a1b"));
        assert_eq!(i.variables["cluster_db_password"], json!("s3cr3t-pw"));
        assert_eq!(i.public_variables, BTreeSet::from(["cluster_vpc_id".to_string()]));
        assert_eq!(sensitive_variables(&s, &i), ["cluster_db_password"]);
        assert_eq!(secret_input_values(&s, &i), ["s3cr3t-pw"]);
        // Counted in the hash: a changed export is a change of the member's inputs.
        let mut changed = c.clone();
        changed.outputs = Some(json!({
            "vpc_id": {"sensitive": false, "value": "vpc-9z"},
            "db_password": {"sensitive": true, "value": "s3cr3t-pw"}
        }));
        let j = resolve_inputs(
            Kind::TerraformMachinePool,
            &meta("p", Some("prod")),
            &s,
            None,
            Some(&changed),
            |_, _| Ok(None),
        )
        .unwrap();
        assert_ne!(i.hash(), j.hash());
        // An object without exports keeps the hash it had before exports existed.
        let plain = resolve_inputs(
            Kind::TerraformMachinePool,
            &meta("p", Some("prod")),
            &spec(),
            None,
            None,
            |_, _| Ok(None),
        )
        .unwrap();
        assert!(!plain.canonical_json().contains("publicVariables"));
        assert!(i.canonical_json().contains(r#""publicVariables":["cluster_vpc_id"]"#));
    }

    #[test]
    fn a_cluster_receives_no_exports_of_its_own_and_a_member_waits_for_them() {
        let c = exports_of_prod();
        let own = resolve_inputs(
            Kind::TerraformCluster,
            &meta("prod", None),
            &spec(),
            None,
            Some(&c),
            |_, _| Ok(None),
        )
        .unwrap();
        assert!(
            own.variables
                .keys()
                .all(|k| !k.starts_with("cluster_") || k == CLUSTER_NAME_VAR)
        );
        let waiting = ClusterExports { outputs: None, ..c };
        let e = resolve_inputs(
            Kind::TerraformMachinePool,
            &meta("p", Some("prod")),
            &spec(),
            None,
            Some(&waiting),
            |_, _| Ok(None),
        )
        .unwrap_err();
        assert!(matches!(e, ResolveError::Exports(ExportsError::NotYet { .. })), "{e}");
    }

    #[test]
    fn exports_share_the_inputs_value_budget() {
        let big: Vec<Value> = (0..MAX_SPEC_VALUES).map(|i| json!(i)).collect();
        let c = ClusterExports {
            cluster: "prod".into(),
            exports: vec!["many".into()],
            outputs: Some(json!({"many": {"sensitive": false, "value": big}})),
        };
        let e = resolve_inputs(
            Kind::TerraformMachinePool,
            &meta("p", Some("prod")),
            &spec(),
            None,
            Some(&c),
            |_, _| Ok(None),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cluster_many: the inputs would hold more than {MAX_SPEC_VALUES} JSON values with TerraformCluster prod"
            )
        );
    }
}

//! Validation (docs/api.md): every violation with its field path, the rule and the
//! offending value, plus warnings for legal but doubtful values.
//!
//! The webhook calls [`parse_object`], [`validate_create`] and [`validate_update`]; the controller
//! re-checks with [`validate_spec`] and sets `Ready=False/InvalidSpec` on a violation.

mod formats;
mod parse;
mod path;
mod pod;
mod values;

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::defaults::DEFAULT_ACTIVE_DEADLINE_SECONDS;
use crate::keys;
use crate::types::{
    ApprovalMode, CaptfObject, DestructiveGuard, EncryptionMode, GuardSpec, JobsSpec, Remediation, SecretKeyRef,
    StateEncryption, TerraformSpec, TfBinary, VariablesFrom, VariablesRef,
};

pub use formats::{
    VARIABLE_NAME_PATTERN, is_data_key, is_image_reference, is_local_path, is_module_address, is_registry_address,
    is_variable_name,
};
pub use parse::parse_object;
pub use path::FieldPath;
pub use values::{MAX_SPEC_VALUES, count_json_values, count_serialized_values, too_many_values};

pub use crate::limits::*;

/// Offending values longer than this are cut in messages.
const MAX_RENDERED_VALUE_CHARS: usize = 200;

/// One broken rule: `<field>: <rule> (got <value>)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The field path, e.g. `spec.jobs.lockTimeoutSeconds`.
    pub field: String,
    /// What is wrong, e.g. `must be less than spec.jobs.activeDeadlineSeconds (3600)`.
    pub rule: String,
    /// The offending value, rendered as JSON.
    pub value: String,
}

impl Violation {
    /// A violation of `rule` at `field` by `value` (rendered as JSON, long values cut).
    pub fn new(field: &FieldPath, rule: impl Into<String>, value: &impl Serialize) -> Self {
        Violation {
            field: field.to_string(),
            rule: rule.into(),
            value: render_value(value),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} (got {})", self.field, self.rule, self.value)
    }
}

/// JSON of a value, cut to a readable length with `…` when long.
pub fn render_value(value: &impl Serialize) -> String {
    let json = serde_json::to_string(value).unwrap_or_else(|e| format!("<unserializable: {e}>"));
    if json.chars().count() <= MAX_RENDERED_VALUE_CHARS {
        json
    } else {
        let cut: String = json.chars().take(MAX_RENDERED_VALUE_CHARS).collect();
        format!("{cut}…")
    }
}

/// A report keeps at most this many violations and this many warnings; past that it only counts
/// them ([`Report::omitted_violations`]), so a spec with a hundred thousand bad variable names costs
/// a counter, not a hundred thousand formatted messages.
pub const MAX_KEPT_VIOLATIONS: usize = 256;
/// See [`MAX_KEPT_VIOLATIONS`].
pub const MAX_KEPT_WARNINGS: usize = 64;

/// What validation found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The first [`MAX_KEPT_VIOLATIONS`] violations found.
    pub violations: Vec<Violation>,
    /// The first [`MAX_KEPT_WARNINGS`] warnings found.
    pub warnings: Vec<String>,
    /// Violations found past [`MAX_KEPT_VIOLATIONS`]: counted, not kept.
    pub omitted_violations: usize,
    /// Warnings found past [`MAX_KEPT_WARNINGS`]: counted, not kept.
    pub omitted_warnings: usize,
}

impl Report {
    pub fn is_valid(&self) -> bool {
        self.violations.is_empty() && self.omitted_violations == 0
    }

    /// How many violations were found, kept or not.
    pub fn violation_count(&self) -> usize {
        self.violations.len() + self.omitted_violations
    }

    /// A message of bounded size: at most `max_listed` violations, the first ones by field path
    /// (each cut to a quarter of `max_bytes`), `; `-separated, then `; and K more` for the rest.
    /// The whole message is at most `max_bytes` bytes (plus the `and K more` tail); violations
    /// that would not fit are counted with the rest.
    pub fn bounded_message(&self, max_listed: usize, max_bytes: usize) -> String {
        let mut sorted: Vec<&Violation> = self.violations.iter().collect();
        sorted.sort_by(|a, b| a.field.cmp(&b.field));
        let per_violation = (max_bytes / 4).max(16);
        let mut out = String::new();
        let mut listed = 0;
        for v in sorted.into_iter().take(max_listed) {
            let full = v.to_string();
            let text = cut_to_bytes(&full, per_violation);
            let sep = if out.is_empty() { 0 } else { 2 };
            if out.len() + sep + text.len() > max_bytes {
                break;
            }
            if sep > 0 {
                out.push_str("; ");
            }
            out.push_str(&text);
            listed += 1;
        }
        let more = self.violation_count() - listed;
        if more > 0 {
            if !out.is_empty() {
                out.push_str("; ");
            }
            out.push_str(&format!("and {more} more"));
        }
        out
    }

    /// Every violation in one message, `; `-separated.
    pub fn message(&self) -> String {
        self.violations
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Record a violation.
    pub fn violation(&mut self, field: &FieldPath, rule: impl Into<String>, value: &impl Serialize) {
        if self.violations.len() < MAX_KEPT_VIOLATIONS {
            self.violations.push(Violation::new(field, rule, value));
        } else {
            self.omitted_violations += 1;
        }
    }

    /// Record a warning, rendered like a violation: `<field>: <what is doubtful> (got <value>)`.
    pub fn warning(&mut self, field: &FieldPath, what: &str, value: &impl Serialize) {
        if self.warnings.len() < MAX_KEPT_WARNINGS {
            self.warnings
                .push(format!("{field}: {what} (got {})", render_value(value)));
        } else {
            self.omitted_warnings += 1;
        }
    }

    /// Append everything another report found (within the same bounds).
    pub fn merge(&mut self, other: Report) {
        let room = MAX_KEPT_VIOLATIONS.saturating_sub(self.violations.len());
        let dropped = other.violations.len().saturating_sub(room);
        self.violations.extend(other.violations.into_iter().take(room));
        self.omitted_violations += other.omitted_violations + dropped;
        let room = MAX_KEPT_WARNINGS.saturating_sub(self.warnings.len());
        let dropped = other.warnings.len().saturating_sub(room);
        self.warnings.extend(other.warnings.into_iter().take(room));
        self.omitted_warnings += other.omitted_warnings + dropped;
    }

    /// The violation at `field`, if any (handy for callers and tests).
    pub fn violation_at(&self, field: &str) -> Option<&Violation> {
        self.violations.iter().find(|v| v.field == field)
    }
}

/// Validate an object being created: its Terraform spec (a template's `spec.template.spec`).
pub fn validate_create(obj: &CaptfObject) -> Report {
    let mut report = validate_spec(obj.terraform_spec(), obj.spec_path());
    report.merge(exports_are_distinct_output_names(obj.exports(), obj.spec_path()));
    report
}

/// The name a cluster's export may not have: its variable would be `cluster_name`, which is
/// the cluster's name.
pub const EXPORT_NAME_TAKEN: &str = "name";

/// `spec.exports` of a TerraformCluster (or its template): at most [`MAX_EXPORTS`] distinct output
/// names ([`VARIABLE_NAME_PATTERN`], at most [`MAX_EXPORT_NAME_LEN`] characters), none of them
/// [`EXPORT_NAME_TAKEN`]. Each becomes the variable `cluster_<name>` of every member, so a name
/// that is not an output name, or one listed twice, could only fail later and far away.
pub fn exports_are_distinct_output_names(exports: &[String], path_prefix: &str) -> Report {
    let mut report = Report::default();
    let path = FieldPath::new(path_prefix).child("exports");
    if exports.len() > MAX_EXPORTS {
        report.violation(
            &path,
            format!("must have at most {MAX_EXPORTS} entries; the value is the count"),
            &exports.len(),
        );
        return report;
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, name) in exports.iter().enumerate() {
        let at = path.index(i);
        if name.len() > MAX_EXPORT_NAME_LEN || !is_variable_name(name) {
            report.violation(
                &at,
                format!("must be an output name: {VARIABLE_NAME_PATTERN}, at most {MAX_EXPORT_NAME_LEN} characters"),
                &cut_to_bytes(name, MAX_EXPORT_NAME_LEN + 1),
            );
        } else if name == EXPORT_NAME_TAKEN {
            report.violation(
                &at,
                "must not be \"name\": members receive the cluster's name as cluster_name already",
                name,
            );
        } else if !seen.insert(name.as_str()) {
            report.violation(&at, "must not repeat an earlier entry", name);
        }
    }
    report
}

/// Validate an update: everything [`validate_create`] checks, plus immutability of
/// `spec.controlPlaneEndpoint` (TerraformCluster) and `spec.providerID` (TerraformMachine) once set,
/// and of a template's whole `spec` ([`template_spec_is_immutable`]).
///
/// When the Terraform spec is unchanged, its rules are not re-checked: an update that only touches
/// metadata (removing the finalizer, approving a plan) must never be refused because of a spec
/// the object already had. The controller still re-checks such a spec and reports `InvalidSpec`.
pub fn validate_update(old: &CaptfObject, new: &CaptfObject) -> Report {
    validate_update_request(old, new, false)
}

/// [`validate_update`] for an update request that may be a dry run (`request.dryRun`): Cluster
/// API's topology dry run of a template ([`is_topology_dry_run`]) is not held to template
/// immutability; every other rule applies as to a real update.
pub fn validate_update_request(old: &CaptfObject, new: &CaptfObject, dry_run: bool) -> Report {
    let mut report = if old.terraform_spec() == new.terraform_spec() && old.spec_path() == new.spec_path() {
        // Exports are checked on their own: a change of them alone is a spec change too.
        if old.exports() == new.exports() {
            Report::default()
        } else {
            exports_are_distinct_output_names(new.exports(), new.spec_path())
        }
    } else {
        validate_create(new)
    };
    if !is_topology_dry_run(new, dry_run) {
        report.merge(template_spec_is_immutable(old, new));
    }
    report.merge(state_encryption_is_turned_off_only_after_a_decrypt(old, new));
    report.merge(a_new_passphrase_names_the_previous_one(old, new));
    report.merge(set_once_fields_are_immutable(old, |field| new_spec_field(new, field)));
    report
}

/// The field of `new`'s spec that [`set_once_fields_are_immutable`] compares, typed.
fn new_spec_field(new: &CaptfObject, field: &str) -> Option<Value> {
    match (new, field) {
        (CaptfObject::Cluster(n), "controlPlaneEndpoint") => serde_json::to_value(&n.spec.control_plane_endpoint).ok(),
        (CaptfObject::Machine(n), "providerID") => serde_json::to_value(&n.spec.provider_id).ok(),
        _ => None,
    }
}

/// The spec fields that may be set once and never changed: a TerraformCluster's
/// `controlPlaneEndpoint` (a host set) and a TerraformMachine's `providerID` (Cluster API's
/// contracts). `new_field` gives the new spec's value of a field (`null` when absent), so the rule
/// reads a typed spec and a spec that did not parse alike.
fn set_once_fields_are_immutable(old: &CaptfObject, new_field: impl Fn(&str) -> Option<Value>) -> Report {
    let mut report = Report::default();
    let spec = FieldPath::new("spec");
    let was = match old {
        CaptfObject::Cluster(o) => o
            .spec
            .control_plane_endpoint
            .as_ref()
            .filter(|e| !e.host.is_empty())
            .and_then(|e| serde_json::to_value(e).ok())
            .map(|v| ("controlPlaneEndpoint", v)),
        CaptfObject::Machine(o) => o
            .spec
            .provider_id
            .as_ref()
            .filter(|p| !p.is_empty())
            .map(|p| ("providerID", Value::String(p.clone()))),
        _ => None,
    };
    if let Some((field, was)) = was {
        let now = new_field(field).unwrap_or(Value::Null);
        if now != was {
            report.violation(
                &spec.child(field),
                format!("is immutable once set (was {})", render_value(&was)),
                &now,
            );
        }
    }
    report
}

/// The update rules that need no parsed new object, for an update whose new spec does not parse
/// (PURE): beside its type errors, the request hears which fields it may not change. `old` is the
/// stored object, `new_spec` the request's spec as JSON; a template's spec, which did parse
/// before, has changed.
pub fn update_rules_of_an_unparsed_spec(old: &CaptfObject, new_spec: &Value, topology_dry_run: bool) -> Report {
    let mut report = Report::default();
    if old.is_template() && !topology_dry_run {
        report.violation(&FieldPath::new("spec"), TEMPLATE_IMMUTABLE, new_spec);
    }
    report.merge(set_once_fields_are_immutable(old, |field| new_spec.get(field).cloned()));
    report
}

/// Why a template's spec may not change, as the Cluster API contract has it: objects made from a
/// template (by a ClusterClass, a MachineDeployment or a MachinePool) are rolled out by pointing
/// at a new template, never by editing one in place.
pub const TEMPLATE_IMMUTABLE: &str = "is immutable: a template cannot be changed in place; create a new template and point the ClusterClass, MachineDeployment or MachinePool at it";

/// Whether an update is Cluster API's topology dry run: a dry-run request (nothing is stored)
/// whose object carries [`keys::ANNOTATION_TOPOLOGY_DRY_RUN`]. The topology controller sends one
/// with the changed template to see whether a ClusterClass change alters it, and rolls out by
/// creating a new template when it does; refusing it would stop every such rollout. The
/// annotation alone (on a stored update) is not enough.
pub fn is_topology_dry_run(new: &CaptfObject, dry_run: bool) -> bool {
    dry_run
        && new
            .metadata()
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(keys::ANNOTATION_TOPOLOGY_DRY_RUN))
}

/// Templates (`TerraformMachineTemplate`, `TerraformClusterTemplate`,
/// `TerraformMachinePoolTemplate`) are immutable: any change of `spec` is a violation at `spec`;
/// `metadata` (labels, annotations, finalizers, owner references) stays editable.
pub fn template_spec_is_immutable(old: &CaptfObject, new: &CaptfObject) -> Report {
    let mut report = Report::default();
    if !new.is_template() {
        return report;
    }
    let now = new.template_spec_value();
    if old.kind_name() != new.kind_name() || old.template_spec_value() != now {
        report.violation(&FieldPath::new("spec"), TEMPLATE_IMMUTABLE, &now);
    }
    report
}

/// `stateEncryption` is OpenTofu's: Terraform has no client-side state encryption, so an object
/// that asks for both is refused rather than stored in plaintext against its spec. Its Secret
/// references must be Secret names and keys.
fn state_encryption_needs_opentofu(report: &mut Report, root: &FieldPath, spec: &TerraformSpec, e: &StateEncryption) {
    let field = root.child("stateEncryption");
    if spec.jobs.as_ref().and_then(|j| j.binary) == Some(TfBinary::Terraform) {
        report.violation(
            &field,
            format!(
                "needs OpenTofu, but {} is terraform: Terraform has no client-side state encryption; use tofu (an OpenTofu runner image) or remove stateEncryption",
                root.child("jobs").child("binary")
            ),
            &"terraform",
        );
    }
    let refs = std::iter::once(("passphraseSecretRef", &e.passphrase_secret_ref)).chain(
        e.previous_passphrase_secret_ref
            .as_ref()
            .map(|r| ("previousPassphraseSecretRef", r)),
    );
    for (name, r) in refs {
        let at = field.child(name);
        if !crate::names::is_dns1123_subdomain(&r.name) {
            report.violation(
                &at.child("name"),
                "must be a Secret name: a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)",
                &r.name,
            );
        }
        if let Some(key) = r.key.as_ref().filter(|k| !is_data_key(k)) {
            report.violation(
                &at.child("key"),
                "must be a valid Secret data key (letters, digits, '-', '_' and '.', at most 253 characters, not . or ..)",
                key,
            );
        }
    }
}

/// Turning encryption off loses the way to read the state unless it was first written in
/// plaintext: removing `stateEncryption` is refused until an apply with `mode: Decrypt` has
/// succeeded (the object was Ready at that generation).
pub fn state_encryption_is_turned_off_only_after_a_decrypt(old: &CaptfObject, new: &CaptfObject) -> Report {
    let mut report = Report::default();
    let Some(was) = &old.terraform_spec().state_encryption else {
        return report;
    };
    if new.terraform_spec().state_encryption.is_some() || old.is_template() {
        return report;
    }
    let field = FieldPath::new(new.spec_path()).child("stateEncryption");
    if was.mode_or_default() == EncryptionMode::Encrypt {
        report.violation(
            &field,
            "cannot be removed while the state is encrypted: nothing could read it without the passphrase; set stateEncryption.mode to Decrypt, wait until the object is Ready, then remove stateEncryption",
            &Option::<StateEncryption>::None,
        );
        return report;
    }
    let generation = old.metadata().generation;
    let decrypted = old
        .terraform_status()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == crate::conditions::READY))
        .is_some_and(|c| c.status == "True" && generation.is_some() && c.observed_generation == generation);
    if !decrypted {
        report.violation(
            &field,
            format!(
                "cannot be removed yet: the state is written in plaintext only once the object is Ready with mode Decrypt (generation {}); wait for Ready, then remove stateEncryption",
                generation.unwrap_or_default()
            ),
            &Option::<StateEncryption>::None,
        );
    }
    report
}

/// A state encrypted with one passphrase is read only with it: pointing `passphraseSecretRef`
/// elsewhere must keep the one before as `previousPassphraseSecretRef` for the apply that
/// re-encrypts the state (docs/state-encryption.md, "Rotating the passphrase").
pub fn a_new_passphrase_names_the_previous_one(old: &CaptfObject, new: &CaptfObject) -> Report {
    let mut report = Report::default();
    let (Some(was), Some(now)) = (
        &old.terraform_spec().state_encryption,
        &new.terraform_spec().state_encryption,
    ) else {
        return report;
    };
    let same = |a: &SecretKeyRef, b: &SecretKeyRef| a.name == b.name && a.key_or_default() == b.key_or_default();
    if old.is_template() || same(&was.passphrase_secret_ref, &now.passphrase_secret_ref) {
        return report;
    }
    let keeps = |r: &SecretKeyRef| now.previous_passphrase_secret_ref.as_ref().is_some_and(|p| same(p, r));
    let readable = keeps(&was.passphrase_secret_ref) || was.previous_passphrase_secret_ref.as_ref().is_some_and(keeps);
    if !readable {
        report.violation(
            &FieldPath::new(new.spec_path()).child("stateEncryption").child("previousPassphraseSecretRef"),
            format!(
                "must name the passphrase before ({}/{}) when passphraseSecretRef changes, so the state encrypted with it can still be read",
                was.passphrase_secret_ref.name,
                was.passphrase_secret_ref.key_or_default()
            ),
            &now.previous_passphrase_secret_ref,
        );
    }
    report
}

/// Validate a Terraform spec whose fields live under `path_prefix` (`spec`, or
/// `spec.template.spec` for a template). Reports every violation and the warnings.
pub fn validate_spec(spec: &TerraformSpec, path_prefix: &str) -> Report {
    let mut report = Report::default();
    let root = FieldPath::new(path_prefix);
    if spec_has_too_many_values(spec) {
        // Refused for that alone: the other rules serialize and walk what is too large to build.
        too_many_values(&mut report, &root);
        return report;
    }
    check_module_source(&mut report, &root.child("module").child("source"), &spec.module.source);
    if let Some(c) = &spec.module.credentials
        && !crate::names::is_dns1123_subdomain(&c.secret_ref.name)
    {
        report.violation(
            &root.child("module").child("credentials").child("secretRef").child("name"),
            "must be a Secret name: a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)",
            &c.secret_ref.name,
        );
    }
    if let Some(vars) = &spec.variables {
        check_variables(&mut report, &root.child("variables"), vars);
    }
    if let Some(from) = &spec.variables_from
        && from.len() > MAX_VARIABLES_FROM
    {
        report.violation(
            &root.child("variablesFrom"),
            format!("must have at most {MAX_VARIABLES_FROM} entries; the value is the count"),
            &from.len(),
        );
    }
    for (i, entry) in spec.variables_from.iter().flatten().enumerate() {
        check_variables_from(&mut report, &root.child("variablesFrom").index(i), entry);
    }
    if let Some(jobs) = &spec.jobs {
        check_jobs(&mut report, &root.child("jobs"), jobs);
    }
    if let Some(e) = &spec.state_encryption {
        state_encryption_needs_opentofu(&mut report, &root, spec, e);
    }
    if let Some(interval) = spec.drift.as_ref().and_then(|d| d.interval.as_deref()) {
        check_drift_interval(&mut report, &root.child("drift").child("interval"), interval);
    }
    if let Some(g) = &spec.guard {
        an_approval_mode_that_holds_plans_is_not_contradicted_by_destructive_allow(&mut report, &root, g);
        policy_refs_name_at_most_eight_configmaps(&mut report, &root.child("guard").child("policyRefs"), g);
    }
    // Effective values (defaults applied), read without cloning the spec.
    let guard = spec.guard.as_ref().map(GuardSpec::mode).unwrap_or_default();
    let remediation = spec.drift.as_ref().and_then(|d| d.remediation).unwrap_or_default();
    if guard == ApprovalMode::Never && remediation == Remediation::Auto {
        let (at, value) = match spec.guard.as_ref().and_then(|g| g.approval) {
            Some(mode) => (root.child("guard").child("approval"), mode.as_str()),
            None => (
                root.child("guard").child("destructive"),
                DestructiveGuard::Allow.as_str(),
            ),
        };
        report.warning(
            &at,
            &format!(
                "{value} together with {} Auto lets drift remediation delete or replace resources without approval",
                root.child("drift").child("remediation")
            ),
            &value,
        );
    }
    report
}

/// `guard.destructive: Allow` is the older spelling of `guard.approval: Never`: beside an
/// `approval` that holds plans (`Destructive`, `Always`) it says the opposite, and which one a
/// person meant cannot be known, so neither is taken.
fn an_approval_mode_that_holds_plans_is_not_contradicted_by_destructive_allow(
    report: &mut Report,
    root: &FieldPath,
    g: &GuardSpec,
) {
    if let (Some(mode @ (ApprovalMode::Destructive | ApprovalMode::Always)), Some(DestructiveGuard::Allow)) =
        (g.approval, g.destructive)
    {
        report.violation(
            &root.child("guard").child("destructive"),
            format!(
                "Allow lets every plan through, but {} {} holds plans for approval: remove destructive (approval decides) or set approval to Never",
                root.child("guard").child("approval"),
                mode.as_str()
            ),
            &DestructiveGuard::Allow,
        );
    }
}

/// Does the spec hold more than [`MAX_SPEC_VALUES`] JSON values? Counted without building
/// anything; whoever reads a spec that may not have gone through the webhook asks this before
/// copying or serializing it.
pub fn spec_has_too_many_values(spec: &TerraformSpec) -> bool {
    count_serialized_values(spec, MAX_SPEC_VALUES).is_none()
}

fn check_module_source(report: &mut Report, path: &FieldPath, source: &str) {
    if source.is_empty() {
        report.violation(path, "is required and must not be empty", &source);
        return;
    }
    if source.chars().count() > MAX_MODULE_SOURCE_CHARS {
        report.violation(
            path,
            format!("must be at most {MAX_MODULE_SOURCE_CHARS} characters"),
            &source,
        );
    }
    if source.chars().any(|c| c.is_whitespace() || c.is_control()) {
        report.violation(path, "must not contain whitespace or control characters", &source);
        return;
    }
    if is_local_path(source) {
        report.violation(
            path,
            "must not be a local path (./, ../, / or file:): the runner has only the module it downloads",
            &source,
        );
    } else if !is_module_address(source) {
        report.violation(
            path,
            "must be a module address tofu init -from-module accepts: a registry address namespace/name/provider \
             (optionally host/ first), git::, hg::, s3::, gcs::, http(s)://, oci://, github.com/owner/repo, \
             bitbucket.org/owner/repo or git@host:path",
            &source,
        );
    }
}

fn check_variables(report: &mut Report, path: &FieldPath, vars: &crate::types::Variables) {
    for key in vars.keys() {
        if !is_variable_name(key) {
            report.violation(&path.key(key), format!("name must match {VARIABLE_NAME_PATTERN}"), key);
        }
    }
    let size = serde_json::to_vec(vars).map(|v| v.len()).unwrap_or(usize::MAX);
    if size > MAX_VARIABLES_BYTES {
        report.violation(
            path,
            format!("must serialize to at most {MAX_VARIABLES_BYTES} bytes (512 KiB) of JSON; the value is its size"),
            &size,
        );
    }
}

/// `spec.guard.policyRefs`: at most [`crate::limits::MAX_POLICY_REFS`] ConfigMap names, each a
/// DNS-1123 subdomain, each once.
fn policy_refs_name_at_most_eight_configmaps(report: &mut Report, path: &FieldPath, g: &GuardSpec) {
    let refs = g.policy_refs.as_deref().unwrap_or_default();
    if refs.len() > crate::limits::MAX_POLICY_REFS {
        report.violation(
            path,
            format!("must name at most {} ConfigMaps", crate::limits::MAX_POLICY_REFS),
            &refs.len(),
        );
    }
    for (i, r) in refs.iter().enumerate() {
        let at = path.index(i).child("name");
        if !crate::names::is_dns1123_subdomain(&r.name) {
            report.violation(
                &at,
                "must be a ConfigMap name: a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)",
                &r.name,
            );
        } else if refs[..i].iter().any(|earlier| earlier.name == r.name) {
            report.violation(&at, "must not repeat an earlier entry", &r.name);
        }
    }
}

fn check_variables_from(report: &mut Report, path: &FieldPath, entry: &VariablesFrom) {
    match (&entry.secret_ref, &entry.config_map_ref) {
        (Some(_), Some(_)) => report.violation(
            path,
            "must set exactly one of secretRef or configMapRef, not both",
            entry,
        ),
        (None, None) => report.violation(path, "must set exactly one of secretRef or configMapRef", entry),
        _ => {}
    }
    if let Some(r) = &entry.secret_ref {
        check_variables_ref(report, &path.child("secretRef"), r, "Secret");
    }
    if let Some(r) = &entry.config_map_ref {
        check_variables_ref(report, &path.child("configMapRef"), r, "ConfigMap");
    }
}

fn check_variables_ref(report: &mut Report, path: &FieldPath, r: &VariablesRef, what: &str) {
    if !crate::names::is_dns1123_subdomain(&r.name) {
        report.violation(
            &path.child("name"),
            format!("must be a {what} name: a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)"),
            &r.name,
        );
    }
    if let Some(key) = &r.key
        && !is_data_key(key)
    {
        report.violation(
            &path.child("key"),
            format!("must be a valid {what} data key (letters, digits, '-', '_' and '.', at most 253 characters, not . or ..)"),
            key,
        );
    }
}

fn check_jobs(report: &mut Report, path: &FieldPath, jobs: &JobsSpec) {
    let deadline_path = path.child("activeDeadlineSeconds");
    if let Some(d) = jobs.active_deadline_seconds
        && !(MIN_ACTIVE_DEADLINE_SECONDS..=MAX_ACTIVE_DEADLINE_SECONDS).contains(&d)
    {
        report.violation(
            &deadline_path,
            format!("must be between {MIN_ACTIVE_DEADLINE_SECONDS} and {MAX_ACTIVE_DEADLINE_SECONDS} seconds"),
            &d,
        );
    }
    if let Some(lock) = jobs.lock_timeout_seconds {
        let lock_path = path.child("lockTimeoutSeconds");
        // The effective deadline: the default applies when it is unset.
        let deadline = jobs.active_deadline_seconds.unwrap_or(DEFAULT_ACTIVE_DEADLINE_SECONDS);
        if lock < 0 {
            report.violation(&lock_path, "must be at least 0", &lock);
        } else if lock >= deadline {
            report.violation(
                &lock_path,
                format!("must be less than {deadline_path} ({deadline})"),
                &lock,
            );
        }
    }
    if let Some(n) = jobs.failed_jobs_history_limit
        && n < 0
    {
        report.violation(&path.child("failedJobsHistoryLimit"), "must be at least 0", &n);
    }
    if let Some(n) = jobs.successful_jobs_history_limit
        && n < 0
    {
        report.violation(&path.child("successfulJobsHistoryLimit"), "must be at least 0", &n);
    }
    if let Some(image) = &jobs.image
        && !is_image_reference(image)
    {
        report.violation(
            &path.child("image"),
            "must be a valid image reference, like registry.example.com/captf/runner:1.0 or runner@sha256:<digest>",
            image,
        );
    }
    if let Some(sa) = &jobs.service_account_name
        && !crate::names::is_dns1123_subdomain(sa)
    {
        report.violation(
            &path.child("serviceAccountName"),
            "must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)",
            sa,
        );
    }
    if let Some(env) = &jobs.env
        && env.len() > MAX_ENV
    {
        report.violation(
            &path.child("env"),
            format!("must have at most {MAX_ENV} entries; the value is the count"),
            &env.len(),
        );
    }
    for (i, env) in jobs.env.iter().flatten().enumerate() {
        if env.name.starts_with(RESERVED_ENV_PREFIX) {
            report.violation(
                &path.child("env").index(i).child("name"),
                format!("must not start with {RESERVED_ENV_PREFIX} (reserved for the runner)"),
                &env.name,
            );
        }
    }
    pod::check_pod_fields(report, path, jobs);
}

fn check_drift_interval(report: &mut Report, path: &FieldPath, interval: &str) {
    if interval == "0" {
        return;
    }
    if interval.chars().count() > MAX_DRIFT_INTERVAL_CHARS {
        report.violation(
            path,
            format!("must be at most {MAX_DRIFT_INTERVAL_CHARS} characters"),
            &interval,
        );
        return;
    }
    match crate::duration::parse(interval) {
        Err(_) => report.violation(path, "must be 0 or a duration like 30m or 1h30m", &interval),
        Ok(d) if !(MIN_DRIFT_INTERVAL..=MAX_DRIFT_INTERVAL).contains(&d) => {
            report.violation(path, "must be 0 (off) or between 1m and 168h", &interval)
        }
        Ok(d) if d < WARN_DRIFT_INTERVAL_BELOW => report.warning(
            path,
            "under 5m: every drift check is a Terraform plan, so this runs one very often",
            &interval,
        ),
        Ok(_) => {}
    }
}

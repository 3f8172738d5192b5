//! Cluster exports (docs/api.md, "Cluster exports"): the outputs of a TerraformCluster's module
//! that its machine pools and machines receive as variables.
//!
//! A cluster names the outputs it shares in `spec.exports`; each member receives every one of
//! them as the variable `cluster_<output>`, set after its own `variables` and `variablesFrom`
//! (so the cluster's value wins, as `cluster_name` does). The values come from the cluster's
//! outputs Secret, the `output -json` document its last apply or refresh wrote, with each
//! output's `sensitive` flag: a sensitive output stays sensitive in the member (masked wherever
//! the member's values are), a public one is not masked.
//!
//! Which cluster a member receives from is never its own claim: the TerraformCluster that owns
//! it (by UID), or the one its Cluster API `Cluster` names as its infrastructure, and then only
//! when the member is verified as that cluster's ([`crate::membership`]). Reading is the
//! reader's; what the values are, and why there are none yet, is here.
//!
//! The values count in the member's inputs hash, so a changed export re-plans the member through
//! its own guard, as any change of its inputs does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

use captf_shared::keys;
use captf_shared::validation::exports_are_distinct_output_names;

/// Why a member receives no exports (yet). [`crate::inputs::ResolveError`] carries it as is.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExportsError {
    #[error(
        "cluster exports: TerraformCluster {cluster} has no outputs yet (it exports {exports}): waiting for its apply"
    )]
    NotYet { cluster: String, exports: String },
    #[error(
        "{var}: TerraformCluster {cluster} exports the output {output:?} (spec.exports[{index}]), which its outputs do not have: waiting for an apply of the cluster whose module has it"
    )]
    Missing {
        var: String,
        cluster: String,
        index: usize,
        output: String,
    },
    #[error("cluster exports: TerraformCluster {cluster}: {why}")]
    Bad { cluster: String, why: String },
    #[error(
        "cluster exports: not a verified member of TerraformCluster {cluster}, so it receives none of its exports: {why}"
    )]
    NotAMember { cluster: String, why: String },
}

/// The prefix of the variable a member receives an export as.
pub const EXPORT_VAR_PREFIX: &str = "cluster_";

/// The variable a member receives the export `output` as: `cluster_<output>`.
pub fn export_variable(output: &str) -> String {
    format!("{EXPORT_VAR_PREFIX}{output}")
}

/// The member's owner reference to a TerraformCluster (any version of CAPTF's group), which names
/// the cluster it receives from by UID (PURE).
pub fn owning_cluster(member: &ObjectMeta) -> Option<&OwnerReference> {
    member.owner_references.iter().flatten().find(|o| {
        o.kind == captf_shared::Kind::TerraformCluster.as_str() && o.api_version.split('/').next() == Some(keys::GROUP)
    })
}

/// The TerraformCluster a Cluster API `Cluster` (as JSON, either version) names as its
/// infrastructure: v1beta2's `spec.infrastructureRef` `{apiGroup, kind, name}` or v1beta1's
/// `{apiVersion, kind, name}` (PURE). `None` when it names another provider's kind.
pub fn infrastructure_cluster(cluster: &Value) -> Option<String> {
    let r = cluster.pointer("/spec/infrastructureRef")?;
    let group = r.get("apiGroup").and_then(Value::as_str).or_else(|| {
        r.get("apiVersion")
            .and_then(Value::as_str)
            .and_then(|v| v.split('/').next())
    })?;
    let name = r.get("name")?.as_str().filter(|n| !n.is_empty())?;
    (group == keys::GROUP && r.get("kind")?.as_str()? == captf_shared::Kind::TerraformCluster.as_str())
        .then(|| name.to_string())
}

/// Whether a pass of a TerraformCluster that exports outputs may have changed them (PURE): it
/// booked a successful apply or refresh (the two operations that write the outputs Secret), so
/// its members are looked at now rather than at their next look. `old` and `new` are the
/// `status.lastSuccessTime` before and after the pass.
pub fn outputs_may_have_changed(
    exports: &[String],
    old: Option<&std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>>,
    new: Option<&std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>>,
) -> bool {
    let at = |m: Option<&std::collections::BTreeMap<String, _>>, op: captf_shared::Op| {
        m.and_then(|m| m.get(op.as_str())).cloned()
    };
    !exports.is_empty()
        && [captf_shared::Op::Apply, captf_shared::Op::Refresh]
            .into_iter()
            .any(|op| at(old, op) != at(new, op))
}

/// The exports a cluster's outputs document (`output -json`) lacks, as `(index, output)` in
/// `spec.exports` order (PURE): its members wait for them, so the cluster says so after the
/// apply that wrote the document.
pub fn missing_exports<'a>(exports: &'a [String], outputs: &Value) -> Vec<(usize, &'a str)> {
    exports
        .iter()
        .enumerate()
        .filter(|(_, e)| outputs.get(e.as_str()).is_none())
        .map(|(i, e)| (i, e.as_str()))
        .collect()
}

/// The Warning about [`missing_exports`] after the apply `job` (PURE).
pub fn missing_exports_note(job: &str, missing: &[(usize, &str)]) -> String {
    let listed: Vec<String> = missing
        .iter()
        .map(|(i, e)| format!("spec.exports[{i}] {e:?}"))
        .collect();
    format!(
        "the outputs of Job {job} lack {}: the members wait for them (add the outputs to the module, or remove them from spec.exports)",
        listed.join(", ")
    )
}

/// What the reader found of a member's TerraformCluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterExports {
    /// The TerraformCluster's name.
    pub cluster: String,
    /// Its `spec.exports`.
    pub exports: Vec<String>,
    /// The `output -json` document of its outputs Secret; `None` while it has none (no apply
    /// has written one yet, or the Secret is not the cluster's).
    pub outputs: Option<Value>,
}

/// One export as a member receives it.
#[derive(Clone, Debug, PartialEq)]
pub struct Exported {
    /// `cluster_<output>`.
    pub variable: String,
    pub value: Value,
    /// The output is sensitive (or does not say it is not, as the runner reads it).
    pub sensitive: bool,
}

/// The variables a member receives from its cluster (PURE), in `spec.exports` order; or why it
/// must wait: the cluster has no outputs yet, or its module lacks an exported output (both
/// change only with an apply of the cluster). Exports that break the webhook's rules (an object
/// written past it) are refused here too, naming the cluster's field.
pub fn exported_variables(c: &ClusterExports) -> Result<Vec<Exported>, ExportsError> {
    if c.exports.is_empty() {
        return Ok(vec![]);
    }
    let report = exports_are_distinct_output_names(&c.exports, "spec");
    if !report.is_valid() {
        return Err(ExportsError::Bad {
            cluster: c.cluster.clone(),
            why: report.message(),
        });
    }
    let doc = c
        .outputs
        .as_ref()
        .and_then(Value::as_object)
        .ok_or_else(|| ExportsError::NotYet {
            cluster: c.cluster.clone(),
            exports: c.exports.join(", "),
        })?;
    c.exports
        .iter()
        .enumerate()
        .map(|(index, output)| {
            let entry = doc.get(output).ok_or_else(|| ExportsError::Missing {
                var: export_variable(output),
                cluster: c.cluster.clone(),
                index,
                output: output.clone(),
            })?;
            Ok(Exported {
                variable: export_variable(output),
                value: entry.get("value").cloned().unwrap_or(Value::Null),
                sensitive: entry.get("sensitive").and_then(Value::as_bool).unwrap_or(true),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn exporting(exports: &[&str], outputs: Option<Value>) -> ClusterExports {
        ClusterExports {
            cluster: "prod".into(),
            exports: exports.iter().map(|e| e.to_string()).collect(),
            outputs,
        }
    }

    fn doc() -> Value {
        json!({
            "vpc_id": {"sensitive": false, "type": "string", "value": "vpc-0a1b"},
            "subnet_ids": {"sensitive": false, "type": ["list", "string"], "value": ["subnet-1", "subnet-2"]},
            "db_password": {"sensitive": true, "type": "string", "value": "s3cr3t"},
            "unflagged": {"value": "x"},
            "not_exported": {"sensitive": false, "value": "y"}
        })
    }

    #[test]
    fn a_member_receives_each_export_as_cluster_output_with_its_sensitivity() {
        let got = exported_variables(&exporting(
            &["vpc_id", "subnet_ids", "db_password", "unflagged"],
            Some(doc()),
        ))
        .unwrap();
        let names: Vec<(&str, bool)> = got.iter().map(|e| (e.variable.as_str(), e.sensitive)).collect();
        assert_eq!(
            names,
            [
                ("cluster_vpc_id", false),
                ("cluster_subnet_ids", false),
                ("cluster_db_password", true),
                // No flag: sensitive, as the runner reads it.
                ("cluster_unflagged", true),
            ]
        );
        assert_eq!(got[1].value, json!(["subnet-1", "subnet-2"]));
        assert!(got.iter().all(|e| e.variable != "cluster_not_exported"));
    }

    #[test]
    fn the_cluster_a_member_receives_from_is_its_owner_or_the_infrastructure_of_its_cluster_api_cluster() {
        let v1beta2 = json!({"spec": {"infrastructureRef": {
            "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformCluster", "name": "prod-infra"}}});
        assert_eq!(infrastructure_cluster(&v1beta2).as_deref(), Some("prod-infra"));
        let v1beta1 = json!({"spec": {"infrastructureRef": {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster", "name": "p"}}});
        assert_eq!(infrastructure_cluster(&v1beta1).as_deref(), Some("p"));
        for other in [
            json!({"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerCluster", "name": "p"}}}),
            json!({"spec": {"infrastructureRef": {"apiGroup": "example.com", "kind": "TerraformCluster", "name": "p"}}}),
            json!({"spec": {"infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformCluster", "name": ""}}}),
            json!({"spec": {}}),
        ] {
            assert_eq!(infrastructure_cluster(&other), None, "{other}");
        }
        let owned = ObjectMeta {
            owner_references: Some(vec![
                OwnerReference {
                    api_version: "cluster.x-k8s.io/v1beta2".into(),
                    kind: "Machine".into(),
                    name: "m".into(),
                    uid: "m-uid".into(),
                    ..Default::default()
                },
                OwnerReference {
                    api_version: "infrastructure.cluster.x-k8s.io/v1beta1".into(),
                    kind: "TerraformCluster".into(),
                    name: "prod".into(),
                    uid: "tc-uid".into(),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        assert_eq!(owning_cluster(&owned).map(|o| o.uid.as_str()), Some("tc-uid"));
        assert_eq!(owning_cluster(&ObjectMeta::default()), None);
    }

    #[test]
    fn members_are_looked_at_when_an_exporting_cluster_booked_an_apply_or_a_refresh() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        use std::collections::BTreeMap;
        let t = |s: i64| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
        let before = BTreeMap::from([("apply".to_string(), t(100)), ("drift".to_string(), t(50))]);
        let exports = vec!["vpc_id".to_string()];
        let mut applied = before.clone();
        applied.insert("apply".into(), t(200));
        let mut refreshed = before.clone();
        refreshed.insert("refresh".into(), t(200));
        let mut drift_only = before.clone();
        drift_only.insert("drift".into(), t(200));
        assert!(outputs_may_have_changed(&exports, Some(&before), Some(&applied)));
        assert!(outputs_may_have_changed(&exports, Some(&before), Some(&refreshed)));
        assert!(outputs_may_have_changed(&exports, None, Some(&applied)));
        assert!(!outputs_may_have_changed(&exports, Some(&before), Some(&drift_only)));
        assert!(!outputs_may_have_changed(&exports, Some(&before), Some(&before)));
        assert!(!outputs_may_have_changed(&[], Some(&before), Some(&applied)));
    }

    #[test]
    fn an_export_the_cluster_module_lacks_is_named_on_the_cluster_after_its_apply() {
        let exports = vec!["vpc_id".to_string(), "subnet".to_string(), "db_password".to_string()];
        let missing = missing_exports(&exports, &doc());
        assert_eq!(missing, [(1, "subnet")]);
        assert_eq!(
            missing_exports_note("tc-net-apply-2", &missing),
            "the outputs of Job tc-net-apply-2 lack spec.exports[1] \"subnet\": the members wait for them (add the outputs to the module, or remove them from spec.exports)"
        );
        assert!(missing_exports(&exports[..1], &doc()).is_empty());
    }

    #[test]
    fn a_cluster_that_exports_nothing_gives_nothing_and_needs_no_outputs() {
        assert_eq!(exported_variables(&exporting(&[], None)).unwrap(), vec![]);
    }

    #[test]
    fn a_member_waits_while_its_cluster_has_no_outputs_yet() {
        for outputs in [None, Some(json!("not an object"))] {
            let e = exported_variables(&exporting(&["vpc_id", "subnet_ids"], outputs)).unwrap_err();
            assert_eq!(
                e.to_string(),
                "cluster exports: TerraformCluster prod has no outputs yet (it exports vpc_id, subnet_ids): waiting for its apply"
            );
        }
    }

    #[test]
    fn an_export_the_cluster_module_lacks_names_the_clusters_field() {
        let e = exported_variables(&exporting(&["vpc_id", "subnet"], Some(doc()))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cluster_subnet: TerraformCluster prod exports the output \"subnet\" (spec.exports[1]), which its outputs do not have: waiting for an apply of the cluster whose module has it"
        );
    }

    #[test]
    fn exports_written_past_the_webhook_are_refused_naming_the_field() {
        let e = exported_variables(&exporting(&["vpc_id", "name"], Some(doc()))).unwrap_err();
        let m = e.to_string();
        assert!(
            m.starts_with("cluster exports: TerraformCluster prod: spec.exports[1]"),
            "{m}"
        );
    }
}

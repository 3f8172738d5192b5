//! Every sample in `examples/` parses as a CAPTF object and passes the shared validation
//! (as the webhook would see it, before and after defaulting); the other manifests there
//! validate against the Kubernetes 1.30 schemas.

#![allow(clippy::unwrap_used)]

use captf_chart_tests::{example_documents, kubernetes_validate};
use captf_shared::types::{CaptfObject, SERVED_KINDS};
use serde_json::Value;

fn captf_objects() -> Vec<(String, CaptfObject)> {
    example_documents()
        .unwrap()
        .into_iter()
        .filter(|(_, d)| d["apiVersion"] == captf_shared::keys::API_VERSION)
        .map(|(file, d)| {
            let obj = CaptfObject::from_value(d).unwrap_or_else(|e| panic!("examples/{file}: {e}"));
            (file, obj)
        })
        .collect()
}

#[test]
fn examples_cover_a_minimal_and_a_full_cluster_a_pool_and_a_template_with_a_machine() {
    let objects = captf_objects();
    let have: Vec<(String, String)> = objects
        .iter()
        .map(|(f, o)| (f.clone(), o.kind_name().to_string()))
        .collect();
    for want in [
        ("terraformcluster-minimal.yaml", "TerraformCluster"),
        ("terraformcluster-full.yaml", "TerraformCluster"),
        ("terraformmachinepool.yaml", "TerraformMachinePool"),
        ("terraformmachinetemplate.yaml", "TerraformMachineTemplate"),
        ("terraformmachinetemplate.yaml", "TerraformMachine"),
    ] {
        assert!(
            have.iter().any(|(f, k)| f == want.0 && k == want.1),
            "{want:?} missing from {have:?}"
        );
    }
    for kind in SERVED_KINDS {
        assert!(have.iter().any(|(_, k)| k == kind), "no example of {kind}");
    }
}

#[test]
fn every_example_passes_validate_create_as_written_and_after_defaulting() {
    for (file, obj) in captf_objects() {
        let report = captf_shared::validation::validate_create(&obj);
        assert!(report.is_valid(), "examples/{file}: {}", report.message());
        let mut defaulted = obj.clone();
        captf_shared::defaults::apply_defaults(&mut defaulted);
        let report = captf_shared::validation::validate_create(&defaulted);
        assert!(
            report.is_valid(),
            "examples/{file} after defaults: {}",
            report.message()
        );
    }
}

#[test]
fn the_full_cluster_example_sets_every_field_of_the_spec() {
    let (_, obj) = captf_objects()
        .into_iter()
        .find(|(f, _)| f == "terraformcluster-full.yaml")
        .unwrap();
    let spec = obj.terraform_spec();
    let jobs = spec.jobs.as_ref().unwrap();
    assert!(spec.variables.as_ref().is_some_and(|v| !v.is_empty()));
    let from = spec.variables_from.as_ref().unwrap();
    assert!(
        from.iter()
            .any(|e| e.secret_ref.as_ref().is_some_and(|r| r.key.is_some()))
    );
    assert!(from.iter().any(|e| e.config_map_ref.is_some()));
    assert!(jobs.active_deadline_seconds.is_some() && jobs.lock_timeout_seconds.is_some());
    assert!(jobs.failed_jobs_history_limit.is_some() && jobs.successful_jobs_history_limit.is_some());
    assert!(jobs.image.is_some() && jobs.service_account_name.is_some());
    assert!(jobs.resources.is_some() && jobs.node_selector.is_some());
    assert!(jobs.tolerations.is_some() && jobs.env.is_some());
    let drift = spec.drift.as_ref().unwrap();
    assert!(drift.interval.is_some() && drift.remediation.is_some());
    assert!(spec.guard.as_ref().unwrap().destructive.is_some());
    assert!(spec.deletion_policy.is_some() && spec.paused.is_some());
    // What the defaults would change: nothing, every field is set.
    let mut defaulted = obj.clone();
    captf_shared::defaults::apply_defaults(&mut defaulted);
    assert_eq!(defaulted.terraform_spec(), obj.terraform_spec());
}

#[test]
fn the_minimal_cluster_example_sets_only_the_module() {
    let (_, obj) = captf_objects()
        .into_iter()
        .find(|(f, _)| f == "terraformcluster-minimal.yaml")
        .unwrap();
    let spec = serde_json::to_value(obj.terraform_spec()).unwrap();
    let keys: Vec<&String> = spec.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["module"]);
}

#[test]
fn the_other_manifests_in_examples_validate_against_kubernetes_1_30() {
    let others: Vec<Value> = example_documents()
        .unwrap()
        .into_iter()
        .map(|(_, d)| d)
        .filter(|d| d["apiVersion"] != captf_shared::keys::API_VERSION)
        .collect();
    assert!(!others.is_empty(), "the full example carries its ConfigMap and Secret");
    let yaml: String = others
        .iter()
        .map(|d| format!("---\n{}", serde_yaml_ng::to_string(d).unwrap()))
        .collect();
    let v = kubernetes_validate(&yaml).unwrap();
    assert!(
        v.exit_ok && v.errors.is_empty() && v.no_schema.is_empty(),
        "{}",
        v.output
    );
    assert_eq!(v.passed.len(), others.len(), "{}", v.output);
}

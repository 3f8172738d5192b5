//! Raw JSON to a CaptfObject: a type error names its field path instead of a bare serde message.
#![allow(clippy::unwrap_used)]

use captf_shared::types::CaptfObject;
use captf_shared::validation::parse_object;
use serde_json::{Value, json};

fn object(kind: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": kind,
        "metadata": {"name": "prod-eu", "namespace": "default"},
        "spec": spec,
    })
}

/// The violations' `field: rule (got value)` lines.
fn errors(kind: &str, value: &Value) -> Vec<String> {
    parse_object(kind, value)
        .unwrap_err()
        .violations
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn a_well_formed_object_of_each_kind_parses() {
    let spec = json!({"module": {"source": "hashicorp/consul/aws"}, "jobs": {"activeDeadlineSeconds": 600}});
    for kind in ["TerraformCluster", "TerraformMachinePool", "TerraformMachine"] {
        let obj = parse_object(kind, &object(kind, spec.clone())).unwrap();
        assert_eq!(obj.kind_name(), kind);
        assert_eq!(obj.terraform_spec().module.source, "hashicorp/consul/aws");
    }
    let t = parse_object(
        "TerraformMachineTemplate",
        &object("TerraformMachineTemplate", json!({"template": {"spec": spec}})),
    )
    .unwrap();
    assert!(matches!(t, CaptfObject::MachineTemplate(_)));
}

#[test]
fn a_wrong_type_names_the_field_inside_the_flattened_spec() {
    let v = object(
        "TerraformCluster",
        json!({"module": {"source": "a/b/c"}, "jobs": {"activeDeadlineSeconds": "1h"}}),
    );
    assert_eq!(
        errors("TerraformCluster", &v),
        ["spec.jobs.activeDeadlineSeconds: must be a 64-bit integer (got \"1h\")"]
    );
}

#[test]
fn every_wrong_type_is_reported_together() {
    let v = object(
        "TerraformMachine",
        json!({
            "module": {"source": 42},
            "variablesFrom": [{"secretRef": {"name": "ok"}}, {"configMapRef": {"name": 7}}],
            "jobs": {"failedJobsHistoryLimit": 3.5, "successfulJobsHistoryLimit": 4294967296_i64, "env": {"A": "b"}},
            "drift": {"remediation": "auto"},
            "paused": "yes",
            "providerID": ["x"],
        }),
    );
    assert_eq!(
        errors("TerraformMachine", &v),
        [
            "spec.drift.remediation: must be one of Auto, Manual (got \"auto\")",
            "spec.jobs.env: must be a list (got {\"A\":\"b\"})",
            "spec.jobs.failedJobsHistoryLimit: must be a 32-bit integer (got 3.5)",
            "spec.jobs.successfulJobsHistoryLimit: must be a 32-bit integer (got 4294967296)",
            "spec.module.source: must be a string (got 42)",
            "spec.paused: must be true or false (got \"yes\")",
            "spec.providerID: must be a string (got [\"x\"])",
            "spec.variablesFrom[1].configMapRef.name: must be a string (got 7)",
        ]
    );
}

#[test]
fn missing_required_fields_are_named() {
    let v = object("TerraformCluster", json!({"jobs": {}}));
    assert_eq!(errors("TerraformCluster", &v), ["spec.module: is required (got null)"]);
    let v = object("TerraformCluster", json!({"module": {}}));
    assert_eq!(
        errors("TerraformCluster", &v),
        ["spec.module.source: is required (got null)"]
    );
    let v = object("TerraformCluster", json!({"module": {"source": null}}));
    assert_eq!(
        errors("TerraformCluster", &v),
        ["spec.module.source: is required (got null)"]
    );
    let mut v = object("TerraformCluster", json!({}));
    v.as_object_mut().unwrap().remove("spec");
    assert_eq!(errors("TerraformCluster", &v), ["spec: is required (got null)"]);
}

#[test]
fn template_errors_name_the_template_path() {
    let v = object(
        "TerraformMachineTemplate",
        json!({"template": {"spec": {"module": {"source": "a/b/c"}, "guard": {"destructive": "Never"}}}}),
    );
    assert_eq!(
        errors("TerraformMachineTemplate", &v),
        ["spec.template.spec.guard.destructive: must be one of Block, Allow (got \"Never\")"]
    );
}

#[test]
fn optional_fields_may_be_null() {
    let v = object(
        "TerraformCluster",
        json!({"module": {"source": "a/b/c"}, "jobs": null, "drift": {"interval": null}, "controlPlaneEndpoint": null}),
    );
    assert!(parse_object("TerraformCluster", &v).is_ok());
}

#[test]
fn quantities_take_numbers_and_strings() {
    let v = object(
        "TerraformCluster",
        json!({"module": {"source": "a/b/c"}, "jobs": {"resources": {"limits": {"cpu": 1, "memory": "512Mi"}}}}),
    );
    assert!(parse_object("TerraformCluster", &v).is_ok());
    let v = object(
        "TerraformCluster",
        json!({"module": {"source": "a/b/c"}, "jobs": {"resources": {"limits": {"cpu": true}}}}),
    );
    assert_eq!(
        errors("TerraformCluster", &v),
        ["spec.jobs.resources.limits[cpu]: must be an integer or a string (got true)"]
    );
}

#[test]
fn bad_metadata_and_status_are_named() {
    let mut v = object("TerraformCluster", json!({"module": {"source": "a/b/c"}}));
    v["metadata"]["labels"] = json!({"a": 1});
    let errs = errors("TerraformCluster", &v);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("metadata: is not valid object metadata: "),
        "{errs:?}"
    );

    let mut v = object("TerraformCluster", json!({"module": {"source": "a/b/c"}}));
    v["status"] = json!({"lastDriftCheckTime": "yesterday", "lastJobSeq": -1});
    assert_eq!(
        errors("TerraformCluster", &v),
        [
            "status.lastDriftCheckTime: must be an RFC 3339 time like 2024-06-01T10:20:30Z (got \"yesterday\")",
            "status.lastJobSeq: must be a non-negative 32-bit integer (got -1)",
        ]
    );
}

#[test]
fn an_unknown_kind_or_a_non_object_is_a_violation() {
    assert_eq!(
        errors("ConfigMap", &json!({})),
        [
            "kind: must be one of TerraformCluster, TerraformMachinePool, TerraformMachine, TerraformMachineTemplate, TerraformClusterTemplate, TerraformMachinePoolTemplate (got \"ConfigMap\")"
        ]
    );
    assert_eq!(
        errors("TerraformCluster", &json!([1])),
        ["object: must be a JSON object (TerraformCluster) (got [1])"]
    );
}

#[test]
fn a_parsed_object_round_trips_through_to_value() {
    let v = object(
        "TerraformCluster",
        json!({"module": {"source": "a/b/c"}, "variables": {"n": [1, {"x": null}]}, "controlPlaneEndpoint": {"host": "h", "port": 6443}}),
    );
    let obj = parse_object("TerraformCluster", &v).unwrap();
    assert_eq!(parse_object("TerraformCluster", &obj.to_value()).unwrap(), obj);
}

#[test]
fn every_enum_of_the_table_names_its_values() {
    for (spec, want) in [
        (
            json!({"module": {"source": "a/b/c"}, "deletionPolicy": "Delete"}),
            "spec.deletionPolicy: must be one of Destroy, Orphan (got \"Delete\")",
        ),
        (
            json!({"module": {"source": "a/b/c"}, "drift": {"remediation": "Off"}}),
            "spec.drift.remediation: must be one of Auto, Manual (got \"Off\")",
        ),
        (
            json!({"module": {"source": "a/b/c"}, "guard": {"destructive": "block"}}),
            "spec.guard.destructive: must be one of Block, Allow (got \"block\")",
        ),
    ] {
        assert_eq!(
            errors("TerraformMachinePool", &object("TerraformMachinePool", spec)),
            [want]
        );
    }
}

/// The user report: a history limit of -1, a lock timeout not below the Job deadline and an
/// unknown `deletionPolicy` got only the enum error. All three are one answer, by field path.
#[test]
fn every_violation_is_reported_in_one_answer_type_and_enum_errors_included() {
    let spec = json!({
        "module": {"source": "hashicorp/consul/aws"},
        "jobs": {"failedJobsHistoryLimit": -1, "activeDeadlineSeconds": 3600, "lockTimeoutSeconds": 3600},
        "deletionPolicy": "Sometimes",
    });
    assert_eq!(
        errors("TerraformCluster", &object("TerraformCluster", spec.clone())),
        [
            "spec.deletionPolicy: must be one of Destroy, Orphan (got \"Sometimes\")",
            "spec.jobs.failedJobsHistoryLimit: must be at least 0 (got -1)",
            "spec.jobs.lockTimeoutSeconds: must be less than spec.jobs.activeDeadlineSeconds (3600) (got 3600)",
        ]
    );
    // The same under a template's spec, next to a type error.
    let mut spec = spec;
    spec["paused"] = json!("yes");
    assert_eq!(
        errors(
            "TerraformMachineTemplate",
            &object("TerraformMachineTemplate", json!({"template": {"spec": spec}}))
        ),
        [
            "spec.template.spec.deletionPolicy: must be one of Destroy, Orphan (got \"Sometimes\")",
            "spec.template.spec.jobs.failedJobsHistoryLimit: must be at least 0 (got -1)",
            "spec.template.spec.jobs.lockTimeoutSeconds: must be less than spec.template.spec.jobs.activeDeadlineSeconds (3600) (got 3600)",
            "spec.template.spec.paused: must be true or false (got \"yes\")",
        ]
    );
}

/// A field with a type error gets its type error only: no rule is judged against the placeholder
/// or default that stood in for it, neither at the field nor in a rule that names it.
#[test]
fn a_field_with_a_type_error_is_reported_once_and_no_rule_judges_what_stood_in_for_it() {
    let spec = json!({
        "module": {"source": 42},
        "jobs": {"activeDeadlineSeconds": "1h", "lockTimeoutSeconds": 4000, "successfulJobsHistoryLimit": -2},
        "variablesFrom": [{"configMapRef": {"name": 7}}, "not an entry"],
        "drift": {"interval": "1s"},
    });
    assert_eq!(
        errors("TerraformCluster", &object("TerraformCluster", spec)),
        [
            "spec.drift.interval: must be 0 (off) or between 1m and 168h (got \"1s\")",
            "spec.jobs.activeDeadlineSeconds: must be a 64-bit integer (got \"1h\")",
            "spec.jobs.successfulJobsHistoryLimit: must be at least 0 (got -2)",
            "spec.module.source: must be a string (got 42)",
            "spec.variablesFrom[0].configMapRef.name: must be a string (got 7)",
            "spec.variablesFrom[1]: must be an object (got \"not an entry\")",
        ]
    );
    // A missing required field stands in as a placeholder the same way.
    assert_eq!(
        errors(
            "TerraformCluster",
            &object("TerraformCluster", json!({"jobs": {"failedJobsHistoryLimit": -1}}))
        ),
        [
            "spec.jobs.failedJobsHistoryLimit: must be at least 0 (got -1)",
            "spec.module: is required (got null)",
        ]
    );
}

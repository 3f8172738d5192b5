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

/// The (first) CAPTF object of one example file.
fn captf_object(file: &str) -> CaptfObject {
    captf_objects()
        .into_iter()
        .find(|(f, _)| f == file)
        .map(|(_, obj)| obj)
        .unwrap_or_else(|| panic!("no CAPTF object in examples/{file}"))
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
        ("clusterclass.yaml", "TerraformClusterTemplate"),
        ("clusterclass.yaml", "TerraformMachineTemplate"),
        ("clusterclass.yaml", "TerraformMachinePoolTemplate"),
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

/// The tenant policy the webhook gets from the chart's default values: its Deployment's args as
/// `helm template` renders them, parsed as the binary parses them.
fn chart_default_policy() -> captf_shared::policy::TenantPolicy {
    let rendered = captf_chart_tests::helm_template(&[]).unwrap();
    let d = rendered.get("Deployment", "captf-webhook").unwrap();
    let args = captf_chart_tests::strings(&d["spec"]["template"]["spec"]["containers"][0]["args"]);
    let argv = std::iter::once("captf-webhook".to_string()).chain(args.iter().cloned());
    let cli = <captf_webhook::cli::Cli as clap::Parser>::try_parse_from(argv)
        .unwrap_or_else(|e| panic!("captf-webhook rejects the chart's args {args:?}: {e}"));
    cli.serve.to_config().unwrap().policy
}

/// One CREATE AdmissionReview of `object` (in namespace `default`), as kube-apiserver sends it.
fn create_review(object: &Value) -> Vec<u8> {
    let kind = object["kind"].as_str().unwrap_or_default();
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "example", "operation": "CREATE", "namespace": "default",
            "name": object["metadata"]["name"],
            "kind": {"group": captf_shared::keys::GROUP, "version": "v1beta1", "kind": kind},
            "resource": {"group": captf_shared::keys::GROUP, "version": "v1beta1",
                         "resource": format!("{}s", kind.to_lowercase())},
            "userInfo": {"username": "tenant"},
            "object": object,
        },
    }))
    .unwrap()
}

/// What the webhook answers to creating `object`: the object its mutation gives (its JSON patch
/// applied), and the validation's denial message, if any.
fn admit(object: &Value, policy: &captf_shared::policy::TenantPolicy) -> Result<Value, String> {
    use base64::Engine as _;
    use captf_webhook::admission::{Route, review_with};
    let answer = |route, obj: &Value| -> Result<Value, String> {
        let reviewed = review_with(route, &create_review(obj), policy).map_err(|e| e.to_string())?;
        Ok(serde_json::from_slice::<Value>(&reviewed.body).unwrap()["response"].clone())
    };
    let mutated = answer(Route::Mutate, object)?;
    let mut defaulted = object.clone();
    if let Some(patch) = mutated["patch"].as_str() {
        let bytes = base64::engine::general_purpose::STANDARD.decode(patch).unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut defaulted, &patch).map_err(|e| format!("the mutation's patch does not apply: {e}"))?;
    }
    if mutated["allowed"] != true {
        return Err(format!("mutate: {}", mutated["status"]["message"]));
    }
    let validated = answer(Route::Validate, &defaulted)?;
    if validated["allowed"] != true {
        return Err(validated["status"]["message"].as_str().unwrap_or_default().to_string());
    }
    Ok(defaulted)
}

#[test]
fn every_example_is_admitted_by_the_webhook_with_the_charts_default_policy() {
    let policy = chart_default_policy();
    let mut refused = Vec::new();
    for (file, doc) in example_documents().unwrap() {
        if doc["apiVersion"] != captf_shared::keys::API_VERSION {
            continue;
        }
        if let Err(message) = admit(&doc, &policy) {
            let name = doc["metadata"]["name"].as_str().unwrap_or_default();
            refused.push(format!(
                "examples/{file} ({} {name}): {message}",
                doc["kind"].as_str().unwrap_or_default()
            ));
        }
    }
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
}

#[test]
fn the_webhook_check_of_the_examples_names_a_refused_field() {
    // The same path refuses what the default policy forbids, with the webhook's message.
    let policy = chart_default_policy();
    let mut obj = example_documents()
        .unwrap()
        .into_iter()
        .map(|(_, d)| d)
        .find(|d| d["kind"] == "TerraformCluster")
        .unwrap();
    obj["spec"]["jobs"] = serde_json::json!({"serviceAccountName": "deployer"});
    let message = admit(&obj, &policy).unwrap_err();
    assert!(message.contains("spec.jobs.serviceAccountName"), "{message}");
}

#[test]
fn examples_that_share_a_kind_have_distinct_names() {
    let mut seen: Vec<(String, String, String)> = Vec::new();
    for (file, doc) in example_documents().unwrap() {
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_string();
        if let Some((other, _, _)) = seen.iter().find(|(f, k, n)| *k == kind && *n == name && *f != file) {
            panic!("examples/{file} and examples/{other} both define {kind} {name}: applying one replaces the other");
        }
        seen.push((file, kind, name));
    }
}

#[test]
fn the_full_cluster_example_sets_every_field_of_the_spec() {
    let obj = captf_object("terraformcluster-full.yaml");
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
    assert!(jobs.image.is_some() && jobs.binary.is_some());
    // The chart's default policy lets no spec name a service account: the example shows it in a
    // comment only.
    assert!(jobs.service_account_name.is_none());
    assert!(spec.state_encryption.is_some());
    assert!(jobs.resources.is_some() && jobs.node_selector.is_some());
    assert!(jobs.tolerations.is_some() && jobs.env.is_some() && jobs.env_from.is_some());
    assert!(jobs.pod_labels.is_some() && jobs.pod_annotations.is_some());
    assert!(jobs.volumes.is_some() && jobs.volume_mounts.is_some());
    assert!(jobs.affinity.is_some() && jobs.topology_spread_constraints.is_some());
    // Nor a priority class: in a comment only.
    assert!(jobs.priority_class_name.is_none() && jobs.image_pull_secrets.is_some());
    assert!(jobs.terraform_cli_config.is_some());
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
    let obj = captf_object("terraformcluster-minimal.yaml");
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
        .filter(|d| d["apiVersion"] != captf_shared::keys::API_VERSION && !is_cluster_api(d))
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

/// Check a value against a CRD's structural schema as the API server's strict field validation
/// does: unknown fields, wrong types, enums and required fields. (CEL rules are the webhook's
/// and `validate_create`'s job, checked above.)
fn schema_errors(path: &str, v: &Value, schema: &Value, out: &mut Vec<String>) {
    if schema["x-kubernetes-preserve-unknown-fields"] == true && schema.get("properties").is_none() {
        return;
    }
    if schema["x-kubernetes-int-or-string"] == true {
        if !(v.is_i64() || v.is_u64() || v.is_string()) {
            out.push(format!("{path}: must be an integer or a string (got {v})"));
        }
        return;
    }
    let ok = match schema["type"].as_str() {
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        _ => true,
    };
    if !ok {
        out.push(format!("{path}: must be of type {} (got {v})", schema["type"]));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(v)
    {
        out.push(format!("{path}: must be one of {allowed:?} (got {v})"));
    }
    if let Some(items) = v.as_array() {
        for (i, item) in items.iter().enumerate() {
            schema_errors(&format!("{path}[{i}]"), item, &schema["items"], out);
        }
    }
    if let Some(map) = v.as_object() {
        for req in captf_chart_tests::strings(&schema["required"]) {
            if !map.contains_key(&req) {
                out.push(format!("{path}.{req}: required"));
            }
        }
        for (k, child) in map {
            let sub = if let Some(p) = schema["properties"].get(k) {
                p
            } else if schema["additionalProperties"].is_object() {
                &schema["additionalProperties"]
            } else if schema["x-kubernetes-preserve-unknown-fields"] == true
                || (path.is_empty() && ["apiVersion", "kind", "metadata"].contains(&k.as_str()))
            {
                // The API server checks the root's apiVersion, kind and metadata itself.
                continue;
            } else {
                out.push(format!("{path}.{k}: unknown field"));
                continue;
            };
            schema_errors(&format!("{path}.{k}"), child, sub, out);
        }
    }
}

#[test]
fn every_example_fits_its_crd_schema_with_no_unknown_fields() {
    let crds = captf_shared::crd::crds();
    let mut checked = 0;
    for (file, doc) in example_documents().unwrap() {
        if doc["apiVersion"] != captf_shared::keys::API_VERSION {
            continue;
        }
        let kind = doc["kind"].as_str().unwrap();
        let crd = crds.iter().find(|c| c.spec.names.kind == kind).unwrap();
        let version = crd
            .spec
            .versions
            .iter()
            .find(|v| v.name == captf_shared::keys::VERSION)
            .unwrap();
        let schema = serde_json::to_value(&version.schema.as_ref().unwrap().open_api_v3_schema).unwrap();
        let mut errors = vec![];
        schema_errors("", &doc, &schema, &mut errors);
        assert!(
            errors.is_empty(),
            "examples/{file} ({kind}) does not fit its CRD: {errors:#?}"
        );
        checked += 1;
    }
    assert_eq!(checked, captf_objects().len(), "every CAPTF object of examples/");
    assert!(checked >= 8);
}

#[test]
fn the_air_gapped_and_workload_identity_examples_carry_what_their_recipes_need() {
    let jobs_of = |file: &str| -> Vec<captf_shared::types::JobsSpec> {
        captf_objects()
            .into_iter()
            .filter(|(f, _)| f == file)
            .filter_map(|(_, o)| o.terraform_spec().jobs.clone())
            .collect()
    };
    let mirrors = jobs_of("air-gapped.yaml");
    assert_eq!(mirrors.len(), 2);
    assert!(mirrors.iter().all(|j| j.terraform_cli_config.is_some()));
    assert!(
        mirrors
            .iter()
            .any(|j| j.volumes.as_ref().is_some_and(|v| v.iter().any(|v| v
                .persistent_volume_claim
                .as_ref()
                .is_some_and(|c| c.read_only == Some(true)))))
    );
    let eks = jobs_of("workload-identity-eks.yaml");
    assert!(eks.iter().any(|j| {
        j.volumes
            .as_ref()
            .is_some_and(|v| v.iter().any(|v| v.projected.is_some()))
    }));
    let gke = jobs_of("workload-identity-gke.yaml");
    assert!(gke.iter().any(|j| {
        j.node_selector
            .as_ref()
            .is_some_and(|n| n.contains_key("iam.gke.io/gke-metadata-server-enabled"))
    }));
    let azure = jobs_of("workload-identity-azure.yaml");
    assert!(azure.iter().any(|j| {
        j.pod_labels
            .as_ref()
            .is_some_and(|l| l.get("azure.workload.identity/use").map(String::as_str) == Some("true"))
    }));
}

/// A Cluster API core object (`cluster.x-k8s.io/...`): kubernetes-validate has no schema for it.
fn is_cluster_api(doc: &Value) -> bool {
    doc["apiVersion"]
        .as_str()
        .is_some_and(|a| a.starts_with("cluster.x-k8s.io/"))
}

#[test]
fn the_clusterclass_example_uses_the_three_template_kinds_defined_beside_it() {
    let docs: Vec<Value> = example_documents()
        .unwrap()
        .into_iter()
        .filter(|(f, _)| f == "clusterclass.yaml")
        .map(|(_, d)| d)
        .collect();
    let class = docs.iter().find(|d| d["kind"] == "ClusterClass").unwrap();
    let spec = &class["spec"];
    let refs = [
        &spec["infrastructure"]["templateRef"],
        &spec["workers"]["machineDeployments"][0]["infrastructure"]["templateRef"],
        &spec["workers"]["machinePools"][0]["infrastructure"]["templateRef"],
    ];
    let kinds: Vec<&str> = refs.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "TerraformClusterTemplate",
            "TerraformMachineTemplate",
            "TerraformMachinePoolTemplate"
        ]
    );
    for r in refs {
        assert_eq!(r["apiVersion"], captf_shared::keys::API_VERSION);
        assert!(
            docs.iter()
                .any(|d| d["kind"] == r["kind"] && d["metadata"]["name"] == r["name"]),
            "{r} is not defined in examples/clusterclass.yaml"
        );
    }
    // The template metadata Cluster API copies onto the objects it makes.
    let cluster_template = docs.iter().find(|d| d["kind"] == "TerraformClusterTemplate").unwrap();
    assert!(cluster_template["spec"]["template"]["metadata"]["labels"].is_object());
}

#[test]
fn the_clusterclass_example_fits_the_real_v1beta2_clusterclass_crd() {
    let crd = captf_chart_tests::capi_crd("cluster.x-k8s.io_clusterclasses.yaml").unwrap_or_else(|e| panic!("{e}"));
    let version = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "v1beta2")
        .unwrap();
    let schema = &version["schema"]["openAPIV3Schema"];
    let mut checked = 0;
    for (file, doc) in example_documents().unwrap() {
        if doc["kind"] != "ClusterClass" {
            continue;
        }
        assert_eq!(doc["apiVersion"], "cluster.x-k8s.io/v1beta2", "examples/{file}");
        // The API server checks metadata itself (the CRD declares it as a bare object).
        let mut doc = doc;
        if let Some(map) = doc.as_object_mut() {
            map.remove("metadata");
        }
        let mut errors = vec![];
        schema_errors("", &doc, schema, &mut errors);
        assert!(
            errors.is_empty(),
            "examples/{file} does not fit ClusterClass v1beta2: {errors:#?}"
        );
        checked += 1;
    }
    assert_eq!(checked, 1);
}

#[test]
fn the_crd_schema_check_catches_a_misspelt_field() {
    let crd = captf_shared::crd::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == "TerraformCluster")
        .unwrap();
    let schema = serde_json::to_value(&crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema).unwrap();
    let doc = serde_json::json!({
        "apiVersion": captf_shared::keys::API_VERSION,
        "kind": "TerraformCluster",
        "metadata": {"name": "x"},
        "spec": {"module": {"source": "git::https://x/y"}, "jobs": {"activeDeadlineSecond": 60}, "deletionPolicy": "Keep"}
    });
    let mut errors = vec![];
    schema_errors("", &doc, &schema, &mut errors);
    assert!(
        errors
            .iter()
            .any(|e| e.contains(".spec.jobs.activeDeadlineSecond: unknown field")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains(".spec.deletionPolicy: must be one of")),
        "{errors:?}"
    );
}

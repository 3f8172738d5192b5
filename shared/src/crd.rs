//! CRD generation: each CRD serves v1alpha1 and v1beta1 (stored), with conversion by the
//! webhook (`crate::conversion`). Two forms are generated from the types here:
//! - [`crds`]: the CRDs as an install in `captf-system` with the release name `captf` has them
//!   (the webhook Service `captf-webhook`, its CA injected by cert-manager from the Certificate
//!   `captf-system/captf-webhook`): what clusterctl's components carry, and what tests load;
//! - [`chart_files`]: the same CRDs as Helm templates under `charts/captf/templates/crds/`, where
//!   the Service, namespace, port and CA come from the release. A test fails when the committed
//!   files are stale. Regenerate with `cargo run -p captf-shared --bin captf-crdgen`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, CustomResourceDefinitionVersion, ServiceReference,
    WebhookClientConfig, WebhookConversion,
};
use kube::CustomResourceExt;

use crate::conversion::{self, Version};
use crate::types::{
    TerraformCluster, TerraformClusterTemplate, TerraformMachine, TerraformMachinePool, TerraformMachinePoolTemplate,
    TerraformMachineTemplate,
};

/// The webhook Service the standalone CRDs name (release `captf` in `captf-system`).
pub const WEBHOOK_SERVICE: &str = "captf-webhook";
pub const WEBHOOK_NAMESPACE: &str = "captf-system";
/// The path the webhook serves conversion on.
pub const CONVERT_PATH: &str = "/convert";
/// cert-manager's CA injector copies the CA of the Certificate this annotation names into the
/// CRD's `spec.conversion.webhook.clientConfig.caBundle`.
pub const INJECT_CA_FROM: &str = "cert-manager.io/inject-ca-from";

/// Every CRD CAPTF serves, standalone (see the module's doc).
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        TerraformCluster::crd(),
        TerraformMachinePool::crd(),
        TerraformMachine::crd(),
        TerraformMachineTemplate::crd(),
        TerraformClusterTemplate::crd(),
        TerraformMachinePoolTemplate::crd(),
    ]
    .into_iter()
    .map(with_kubernetes_formats)
    .map(|crd| with_schema(crd, without_kubernetes_descriptions))
    .map(with_both_versions)
    .collect()
}

/// The fields of `spec.jobs` whose schema is a Kubernetes type of the pod (`Volume`, `Affinity`,
/// ...). Their descriptions, Kubernetes' own (`kubectl explain pod.spec.volumes` has them), are
/// left out of the CRDs: they were four fifths of each schema, and Helm keeps a release's
/// manifests and chart, CRDs included, in one Secret of at most 1 MiB. Each field keeps its own
/// description.
pub const EMBEDDED_KUBERNETES_FIELDS: [&str; 9] = [
    "affinity",
    "env",
    "envFrom",
    "imagePullSecrets",
    "resources",
    "tolerations",
    "topologySpreadConstraints",
    "volumeMounts",
    "volumes",
];

/// The CRD with `f` applied to each version's `openAPIV3Schema` (as JSON).
fn with_schema(mut crd: CustomResourceDefinition, f: fn(&mut serde_json::Value)) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let Some(validation) = version.schema.as_mut() else {
            continue;
        };
        let Some(schema) = validation.open_api_v3_schema.take() else {
            continue;
        };
        let mut value = serde_json::to_value(&schema).unwrap_or_default();
        f(&mut value);
        validation.open_api_v3_schema = Some(serde_json::from_value(value).unwrap_or(schema));
    }
    crd
}

/// Removes the descriptions inside [`EMBEDDED_KUBERNETES_FIELDS`], wherever a `jobs` object is
/// (a kind's `spec.jobs`, a template's `spec.template.spec.jobs`).
fn without_kubernetes_descriptions(v: &mut serde_json::Value) {
    let Some(map) = v.as_object_mut() else { return };
    if let Some(jobs) = map
        .get_mut("properties")
        .and_then(|p| p.get_mut("jobs"))
        .and_then(|j| j.get_mut("properties"))
        .and_then(serde_json::Value::as_object_mut)
    {
        for field in EMBEDDED_KUBERNETES_FIELDS {
            if let Some(f) = jobs.get_mut(field).and_then(serde_json::Value::as_object_mut) {
                f.values_mut().for_each(without_descriptions);
            }
        }
    }
    for child in map.values_mut() {
        match child {
            serde_json::Value::Object(_) => without_kubernetes_descriptions(child),
            serde_json::Value::Array(items) => items.iter_mut().for_each(without_kubernetes_descriptions),
            _ => {}
        }
    }
}

/// Removes every `description` of a schema.
fn without_descriptions(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            if map.get("description").is_some_and(serde_json::Value::is_string) {
                map.remove("description");
            }
            map.values_mut().for_each(without_descriptions);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(without_descriptions),
        _ => {}
    }
}

/// The CRD (v1beta1 as derived) serving v1alpha1 too, deprecated and converted by the webhook.
fn with_both_versions(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let kind = crd.spec.names.kind.clone();
    let hub = crd.spec.versions.first().cloned().unwrap_or_default();
    let old = CustomResourceDefinitionVersion {
        name: Version::V1alpha1.as_str().into(),
        storage: false,
        deprecated: Some(true),
        deprecation_warning: Some(format!(
            "infrastructure.cluster.x-k8s.io/v1alpha1 {kind} is deprecated; use infrastructure.cluster.x-k8s.io/v1beta1 {kind}"
        )),
        ..hub.clone()
    };
    crd.spec.versions = vec![old];
    // The deprecated version's schema has no descriptions: `kubectl explain` reads the preferred
    // version's, and each description would be stored twice.
    let mut crd = with_schema(crd, |v| {
        conversion::v1alpha1_schema(v);
        without_descriptions(v);
    });
    crd.spec.versions.push(hub);
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion {
            conversion_review_versions: vec!["v1".into()],
            client_config: Some(WebhookClientConfig {
                service: Some(ServiceReference {
                    name: WEBHOOK_SERVICE.into(),
                    namespace: WEBHOOK_NAMESPACE.into(),
                    path: Some(CONVERT_PATH.into()),
                    port: Some(443),
                }),
                ..Default::default()
            }),
        }),
    });
    crd.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(INJECT_CA_FROM.into(), format!("{WEBHOOK_NAMESPACE}/{WEBHOOK_SERVICE}"));
    crd
}

/// The CRD with the integer formats of Rust's unsigned types (`uint32`, ...), which the schema
/// generator writes and the API server does not know (it warns `unrecognized format "uint32"` on
/// every apply), written as the signed format that holds them and a `maximum`.
fn with_kubernetes_formats(crd: CustomResourceDefinition) -> CustomResourceDefinition {
    with_schema(crd, kubernetes_formats)
}

/// Rewrites every integer `format` the API server does not recognise, throughout a schema.
fn kubernetes_formats(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            let known = match map.get("format").and_then(serde_json::Value::as_str) {
                Some("uint8") => Some(("int32", Some(u64::from(u8::MAX)))),
                Some("uint16") => Some(("int32", Some(u64::from(u16::MAX)))),
                Some("uint32") => Some(("int64", Some(u64::from(u32::MAX)))),
                Some("uint64" | "uint") => Some(("int64", None)),
                Some("int8" | "int16") => Some(("int32", None)),
                _ => None,
            };
            if let Some((format, maximum)) = known {
                map.insert("format".into(), format.into());
                if let Some(max) = maximum
                    && !map.contains_key("maximum")
                {
                    map.insert("maximum".into(), max.into());
                }
            }
            map.values_mut().for_each(kubernetes_formats);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(kubernetes_formats),
        _ => {}
    }
}

/// `(file name, YAML)` for each standalone CRD.
pub fn crd_files() -> Vec<(String, String)> {
    crds()
        .into_iter()
        .map(|crd| {
            let file = format!("{}.yaml", crd.metadata.name.clone().unwrap_or_default());
            (file, serde_yaml_ng::to_string(&crd).unwrap_or_default())
        })
        .collect()
}

/// The standalone YAML's parts the chart sets from the release, and the template text for each.
const CHART_SUBSTITUTIONS: [(&str, &str); 2] = [
    (
        "    cert-manager.io/inject-ca-from: captf-system/captf-webhook\n",
        "    helm.sh/resource-policy: keep\n    {{- if .Values.webhook.tls.certManager.enabled }}\n    cert-manager.io/inject-ca-from: {{ printf \"%s/%s\" .Release.Namespace (include \"captf.webhook.certificate\" .) }}\n    {{- end }}\n",
    ),
    (
        "      clientConfig:\n        service:\n          name: captf-webhook\n          namespace: captf-system\n          path: /convert\n          port: 443\n",
        "      {{- include \"captf.webhook.clientConfig\" (dict \"ctx\" $ \"path\" \"/convert\") | trim | nindent 6 }}\n",
    ),
];

/// Why the chart's form cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error("{file}: the generated YAML has {{{{, which Helm would read as a template")]
    Braces { file: String },
    #[error("{file}: expected exactly one {what:?} to template")]
    Missing { file: String, what: String },
}

/// `(file name, Helm template)` for each CRD, as committed under `charts/captf/templates/crds/`:
/// the standalone YAML with the webhook's Service and CA taken from the release, and
/// `helm.sh/resource-policy: keep` (uninstalling the chart leaves the CRDs, and so every object).
pub fn chart_files() -> Result<Vec<(String, String)>, ChartError> {
    crd_files()
        .into_iter()
        .map(|(file, yaml)| {
            if yaml.contains("{{") {
                return Err(ChartError::Braces { file });
            }
            let mut text = yaml;
            for (from, to) in CHART_SUBSTITUTIONS {
                if text.matches(from).count() != 1 {
                    return Err(ChartError::Missing {
                        file,
                        what: from.to_string(),
                    });
                }
                text = text.replacen(from, to, 1);
            }
            Ok((
                file,
                format!("# Generated by `cargo run -p captf-shared --bin captf-crdgen`. Do not edit.\n{text}"),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn every_served_kind_has_the_plural_and_crd_name_its_crd_declares() {
        for crd in crds() {
            let kind = crd.spec.names.kind.as_str();
            assert_eq!(
                crate::types::plural(kind).as_deref(),
                Some(crd.spec.names.plural.as_str())
            );
            assert_eq!(crate::types::crd_name(kind), crd.metadata.name, "{kind}");
        }
        assert_eq!(crds().len(), crate::types::SERVED_KINDS.len());
        assert_eq!(crate::types::plural("Cluster"), None);
    }

    fn schema(crd: &CustomResourceDefinition) -> Value {
        let stored = crd.spec.versions.iter().find(|v| v.storage).unwrap();
        serde_json::to_value(&stored.schema).unwrap()
    }

    /// Every `format` in the schemas, with the path to it.
    fn formats(v: &Value, at: &str, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(map) => {
                if let Some(f) = map.get("format").and_then(Value::as_str) {
                    out.push((at.to_string(), f.to_string()));
                }
                for (k, v) in map {
                    formats(v, &format!("{at}/{k}"), out);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| formats(v, at, out)),
            _ => {}
        }
    }

    #[test]
    fn crds_use_only_formats_the_api_server_recognises() {
        // The API server's list for schemas (k8s.io/kube-openapi's strfmt default registry and the
        // integer and number formats); anything else draws a warning on every apply.
        const KNOWN: &str = "int32 int64 float double byte binary date date-time password duration uri \
                             email hostname ipv4 ipv6 cidr mac uuid uuid3 uuid4 uuid5 isbn creditcard ssn";
        let mut seen = 0;
        for crd in crds() {
            let mut found = vec![];
            formats(&schema(&crd), "", &mut found);
            for (at, f) in &found {
                assert!(
                    KNOWN.split_whitespace().any(|k| k == f),
                    "{}: {at} has format {f}",
                    crd.spec.names.kind
                );
            }
            seen += found.len();
        }
        assert!(seen > 0, "the schemas have formats to check");
    }

    #[test]
    fn unsigned_formats_become_the_signed_format_that_holds_them_with_a_maximum() {
        let mut v = serde_json::json!({
            "properties": {
                "a": {"type": "integer", "format": "uint32", "minimum": 0.0},
                "b": {"type": "integer", "format": "uint16", "maximum": 10},
                "c": {"items": {"type": "integer", "format": "uint64"}},
                "d": {"type": "integer", "format": "int32"},
            }
        });
        kubernetes_formats(&mut v);
        let p = &v["properties"];
        assert_eq!(p["a"]["format"], "int64");
        assert_eq!(p["a"]["maximum"], u64::from(u32::MAX));
        assert_eq!(p["b"]["format"], "int32");
        assert_eq!(p["b"]["maximum"], 10, "a tighter maximum is kept");
        assert_eq!(p["c"]["items"]["format"], "int64");
        assert_eq!(p["d"], serde_json::json!({"type": "integer", "format": "int32"}));
    }

    #[test]
    fn crds_carry_the_cluster_api_contract_labels_and_a_status_subresource() {
        for crd in crds() {
            let labels = crd.metadata.labels.clone().unwrap_or_default();
            for (k, v) in crate::keys::CAPI_CONTRACT_LABELS {
                assert_eq!(labels.get(k).map(String::as_str), Some(v), "{k}");
            }
            assert_eq!(
                labels.get("cluster.x-k8s.io/v1beta2").map(String::as_str),
                Some("v1alpha1_v1beta1")
            );
        }
    }

    #[test]
    fn crds_claim_only_the_v1beta2_contract_whose_failure_domains_shape_they_have() {
        for crd in crds() {
            let labels = crd.metadata.labels.clone().unwrap_or_default();
            assert_eq!(labels.get("cluster.x-k8s.io/v1beta1"), None, "{:?}", crd.metadata.name);
        }
        // The v1beta2 shape: a list of {name, controlPlane, attributes}, not v1beta1's map.
        let cluster = crds()
            .into_iter()
            .find(|c| c.spec.names.kind == "TerraformCluster")
            .unwrap();
        let fd = &schema(&cluster)["openAPIV3Schema"]["properties"]["status"]["properties"]["failureDomains"];
        assert_eq!(fd["type"], "array", "{fd}");
    }

    #[test]
    fn crds_carry_the_clusterctl_label_so_a_move_finds_a_helm_installed_captf() {
        // clusterctl move discovers the kinds to move from the CRDs labelled
        // `clusterctl.cluster.x-k8s.io`; only `clusterctl init` would add it otherwise.
        for crd in crds() {
            let labels = crd.metadata.labels.clone().unwrap_or_default();
            assert_eq!(
                labels.get("clusterctl.cluster.x-k8s.io").map(String::as_str),
                Some(""),
                "{:?}",
                crd.metadata.name
            );
        }
    }

    #[test]
    fn crds_have_a_status_subresource_and_printer_columns() {
        for crd in crds() {
            assert_eq!(crd.spec.group, "infrastructure.cluster.x-k8s.io");
            assert_eq!(crd.spec.scope, "Namespaced");
            let names: Vec<_> = crd.spec.versions.iter().map(|v| (v.name.as_str(), v.storage)).collect();
            assert_eq!(names, [("v1alpha1", false), ("v1beta1", true)]);
            assert_eq!(crd.spec.versions[0].deprecated, Some(true));
            let v = &crd.spec.versions[1];
            if !crd.spec.names.kind.ends_with("Template") {
                assert!(
                    v.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some(),
                    "{}",
                    crd.spec.names.kind
                );
                let cols: Vec<_> = v
                    .additional_printer_columns
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| c.name)
                    .collect();
                for want in ["Ready", "Op", "Reason", "Age"] {
                    assert!(
                        cols.contains(&want.to_string()),
                        "{} lacks column {want}",
                        crd.spec.names.kind
                    );
                }
            }
        }
    }

    #[test]
    fn crd_schema_has_the_contract_fields_and_cel_rules() {
        let crd = crds().remove(0);
        let s = schema(&crd);
        let root = &s["openAPIV3Schema"];
        let status = &root["properties"]["status"]["properties"];
        assert_eq!(status["ready"]["type"], "boolean");
        assert_eq!(status["initialization"]["properties"]["provisioned"]["type"], "boolean");
        assert!(status["pendingPlan"]["properties"].get("destroy").is_some());
        let old = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        let old_status = &old["openAPIV3Schema"]["properties"]["status"]["properties"];
        assert!(
            old_status["pendingPlan"]["properties"].get("destroys").is_some(),
            "v1alpha1 keeps its names"
        );
        let spec = &root["properties"]["spec"]["properties"];
        assert!(spec["module"].is_object(), "flattened common spec is inline: {spec}");
        assert!(spec["controlPlaneEndpoint"].is_object());
        assert_eq!(spec["variables"]["x-kubernetes-preserve-unknown-fields"], true);
        let rules = root["x-kubernetes-validations"].to_string();
        assert!(rules.contains("lockTimeoutSeconds < "), "{rules}");
        assert!(rules.contains("oldSelf.spec.controlPlaneEndpoint"), "{rules}");
    }

    #[test]
    fn crd_files_are_yaml_named_after_the_crd() {
        let files = crd_files();
        let names: Vec<_> = files.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            names,
            [
                "terraformclusters.infrastructure.cluster.x-k8s.io.yaml",
                "terraformmachinepools.infrastructure.cluster.x-k8s.io.yaml",
                "terraformmachines.infrastructure.cluster.x-k8s.io.yaml",
                "terraformmachinetemplates.infrastructure.cluster.x-k8s.io.yaml",
                "terraformclustertemplates.infrastructure.cluster.x-k8s.io.yaml",
                "terraformmachinepooltemplates.infrastructure.cluster.x-k8s.io.yaml",
            ]
        );
        for (_, yaml) in files {
            let back: CustomResourceDefinition = serde_yaml_ng::from_str(&yaml).unwrap();
            assert_eq!(back.spec.group, "infrastructure.cluster.x-k8s.io");
        }
    }

    #[test]
    fn crds_are_converted_by_the_webhook_whose_ca_cert_manager_injects() {
        for crd in crds() {
            let conversion = crd.spec.conversion.clone().unwrap();
            assert_eq!(conversion.strategy, "Webhook");
            let webhook = conversion.webhook.unwrap();
            assert_eq!(webhook.conversion_review_versions, ["v1"]);
            let service = webhook.client_config.unwrap().service.unwrap();
            assert_eq!(
                (
                    service.namespace.as_str(),
                    service.name.as_str(),
                    service.path.as_deref()
                ),
                ("captf-system", "captf-webhook", Some("/convert"))
            );
            let annotations = crd.metadata.annotations.clone().unwrap_or_default();
            assert_eq!(
                annotations.get(INJECT_CA_FROM).map(String::as_str),
                Some("captf-system/captf-webhook")
            );
        }
    }

    #[test]
    fn chart_files_take_the_webhook_service_and_ca_from_the_release() {
        for (file, text) in chart_files().unwrap() {
            assert!(!text.contains("captf-system"), "{file} still names captf-system");
            assert!(text.contains("helm.sh/resource-policy: keep"), "{file}");
            assert!(
                text.contains(r#"include "captf.webhook.clientConfig" (dict "ctx" $ "path" "/convert")"#),
                "{file}"
            );
            assert!(text.contains("captf.webhook.certificate"), "{file}");
        }
    }
}

//! The generated CRDs carry the table's rules a schema can express, bound what CEL reads, and
//! agree with the webhook's validation on the values they both judge.
#![allow(clippy::unwrap_used)]

use captf_shared::crd::crds;
use captf_shared::names::is_dns1123_subdomain;
use captf_shared::validation::{
    DATA_KEY_PATTERN, DNS1123_SUBDOMAIN_PATTERN, MODULE_SOURCE_PATTERN, is_data_key, is_local_path, is_module_address,
};
use proptest::prelude::*;
use regex::Regex;
use serde_json::Value;

/// The common spec's properties of each CRD (a template's under `template.spec`).
fn spec_schemas() -> Vec<(String, Value)> {
    crds()
        .into_iter()
        .map(|crd| {
            let kind = crd.spec.names.kind.clone();
            let root = serde_json::to_value(
                crd.spec.versions[0]
                    .schema
                    .as_ref()
                    .unwrap()
                    .open_api_v3_schema
                    .as_ref(),
            )
            .unwrap();
            let mut spec = root["properties"]["spec"].clone();
            if kind.ends_with("Template") {
                spec = spec["properties"]["template"]["properties"]["spec"].clone();
            }
            (kind, spec)
        })
        .collect()
}

#[test]
fn numeric_rules_are_in_the_schema() {
    for (kind, spec) in spec_schemas() {
        let jobs = &spec["properties"]["jobs"]["properties"];
        assert_eq!(jobs["activeDeadlineSeconds"]["minimum"], 60.0, "{kind}");
        assert_eq!(jobs["activeDeadlineSeconds"]["maximum"], 604_800.0, "{kind}");
        assert_eq!(jobs["lockTimeoutSeconds"]["minimum"], 0.0, "{kind}");
        assert_eq!(jobs["lockTimeoutSeconds"]["maximum"], 604_799.0, "{kind}");
        assert_eq!(jobs["failedJobsHistoryLimit"]["minimum"], 0.0, "{kind}");
        assert_eq!(jobs["successfulJobsHistoryLimit"]["minimum"], 0.0, "{kind}");
    }
}

#[test]
fn strings_and_lists_that_cel_reads_are_bounded() {
    for (kind, spec) in spec_schemas() {
        let p = &spec["properties"];
        assert_eq!(p["variablesFrom"]["maxItems"], 32, "{kind}");
        assert_eq!(p["drift"]["properties"]["interval"]["maxLength"], 64, "{kind}");
        assert_eq!(p["jobs"]["properties"]["env"]["maxItems"], 256, "{kind}");
        assert_eq!(p["module"]["properties"]["source"]["maxLength"], 2048, "{kind}");
        let rules = p["jobs"]["x-kubernetes-validations"].to_string();
        assert!(rules.contains("startsWith('CAPTF_')"), "{kind}: {rules}");
        for r in ["secretRef", "configMapRef"] {
            let r = &p["variablesFrom"]["items"]["properties"][r]["properties"];
            assert_eq!(r["name"]["maxLength"], 253, "{kind}");
            assert_eq!(r["name"]["pattern"], DNS1123_SUBDOMAIN_PATTERN, "{kind}");
            assert_eq!(r["key"]["pattern"], DATA_KEY_PATTERN, "{kind}");
        }
        assert_eq!(
            p["jobs"]["properties"]["serviceAccountName"]["pattern"], DNS1123_SUBDOMAIN_PATTERN,
            "{kind}"
        );
    }
}

fn anchored(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Where the schema's DNS-1123 pattern (with its length bound) accepts a name, so does the
    /// webhook, and the other way round.
    #[test]
    fn schema_and_webhook_agree_on_dns1123_subdomains(s in "[a-z0-9.-]{0,12}|[a-zA-Z0-9_. -]{0,6}") {
        let schema = anchored(DNS1123_SUBDOMAIN_PATTERN).is_match(&s) && s.len() <= 253;
        // Kubernetes' pattern does not bound each label to 63; the webhook does.
        let labels_short = s.split('.').all(|l| l.len() <= 63);
        prop_assert_eq!(schema && labels_short, is_dns1123_subdomain(&s), "{:?}", s);
    }

    /// The schema's data-key pattern accepts every key the webhook accepts.
    #[test]
    fn schema_data_key_pattern_admits_every_valid_key(s in "[-._a-zA-Z0-9 /]{0,10}") {
        if is_data_key(&s) {
            prop_assert!(anchored(DATA_KEY_PATTERN).is_match(&s), "{:?}", s);
        }
    }

    /// The schema's module-source pattern admits every address the webhook accepts and refuses
    /// every local path.
    #[test]
    fn schema_module_source_pattern_admits_every_valid_address(s in "[a-z./:@ -]{0,14}(/[a-z0-9]{1,4}){0,4}") {
        let schema = anchored(MODULE_SOURCE_PATTERN).is_match(&s);
        if is_module_address(&s) {
            prop_assert!(schema, "{:?}", s);
        }
        if s.starts_with("./") || s.starts_with("../") || s.starts_with('/') {
            prop_assert!(is_local_path(&s) && !schema, "{:?}", s);
        }
    }
}

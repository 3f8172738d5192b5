//! `helm lint --strict` with the defaults and with every optional feature on.

use captf_chart_tests::features::{
    ALL_NAMESPACES, MONITORING, ONE_NAMESPACE, OWN_CERTIFICATE, OWN_ISSUER, SHARDS, TWO_NAMESPACES, WEBHOOK_LOCKDOWN,
};
use captf_chart_tests::{chart_dir, run_ok};

const FEATURES: &[&[&str]] = &[
    &[],
    MONITORING,
    OWN_CERTIFICATE,
    OWN_ISSUER,
    ONE_NAMESPACE,
    TWO_NAMESPACES,
    ALL_NAMESPACES,
    WEBHOOK_LOCKDOWN,
    SHARDS,
];

#[test]
fn helm_lint_strict_passes_with_defaults_and_every_optional_feature() {
    let chart = chart_dir();
    for extra in FEATURES {
        let mut args = vec!["lint", "--strict", "--namespace", "captf-system"];
        let chart = chart.to_string_lossy();
        args.push(&chart);
        args.extend_from_slice(extra);
        match run_ok("helm", &args) {
            Ok(out) => assert!(out.contains("0 chart(s) failed"), "helm lint {extra:?}: {out}"),
            Err(e) => panic!("helm lint --strict {extra:?}: {e}"),
        }
    }
}

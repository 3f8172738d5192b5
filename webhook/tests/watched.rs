//! An object the controller acts on, created in a namespace no controller watches
//! (`--watched-namespaces`), is admitted with a warning, once (by the validating route only);
//! updates, templates and watched namespaces get none.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use captf_webhook::AppState;
use captf_webhook::metrics::Metrics;
use captf_webhook::watched::Watched;
use clap::Parser;
use common::fixture;
use serde_json::Value;

/// The state the binary builds from `--watched-namespaces=default,team-a`.
fn state() -> AppState {
    let cli = captf_webhook::cli::Cli::try_parse_from([
        "captf-webhook",
        "--tls-cert-file=/c",
        "--tls-key-file=/k",
        "--watched-namespaces=default,team-a",
    ])
    .unwrap();
    let config = cli.serve.to_config().unwrap();
    assert_eq!(config.watched, Watched::only(["default", "team-a"]));
    AppState::new(Arc::new(Metrics::new())).with_watched(config.watched)
}

fn in_namespace(fixture_name: &str, namespace: &str) -> Value {
    let mut r = fixture(fixture_name);
    r["request"]["namespace"] = namespace.into();
    r["request"]["object"]["metadata"]["namespace"] = namespace.into();
    if r["request"]["oldObject"].is_object() {
        r["request"]["oldObject"]["metadata"]["namespace"] = namespace.into();
    }
    r
}

fn warnings(resp: &Value) -> Vec<String> {
    resp["response"]["warnings"]
        .as_array()
        .map(|w| w.iter().map(|w| w.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn the_namespaces_as_clusterctl_and_the_chart_pass_them() {
    let watched = |arg: &str| {
        captf_webhook::cli::Cli::try_parse_from(["captf-webhook", "--tls-cert-file=/c", "--tls-key-file=/k", arg])
            .map(|cli| cli.serve.to_config().unwrap().watched)
    };
    // clusterctl's unset variable: `--watched-namespaces=""`, every namespace.
    assert_eq!(watched("--watched-namespaces=\"\"").unwrap(), Watched::all());
    assert_eq!(watched("--watched-namespaces=").unwrap(), Watched::all());
    assert_eq!(watched("--watched-namespaces=a,b").unwrap(), Watched::only(["a", "b"]));
    let refused = watched("--watched-namespaces=Not_A_Namespace").unwrap_err().to_string();
    assert!(refused.contains("is not a namespace name"), "{refused}");
}

#[tokio::test]
async fn a_create_where_no_controller_watches_is_admitted_with_a_warning_naming_the_namespace() {
    for f in [
        "cluster-create-accepted",
        "machinepool-create-accepted",
        "machine-create-accepted",
    ] {
        let resp = common::validate_review(state(), &in_namespace(f, "team-z")).await;
        assert_eq!(resp["response"]["allowed"], true, "{f}: {resp}");
        let w = warnings(&resp);
        assert_eq!(w.len(), 1, "{f}: {w:?}");
        assert!(
            w[0].contains("no CAPTF controller watches namespace \"team-z\" (it watches default, team-a)"),
            "{f}: {}",
            w[0]
        );
        // In a watched namespace: none.
        let resp = common::validate_review(state(), &in_namespace(f, "team-a")).await;
        assert!(warnings(&resp).is_empty(), "{f}: {resp}");
    }
}

#[tokio::test]
async fn updates_templates_and_refused_creates_get_no_unwatched_warning() {
    for f in ["cluster-update-accepted", "machinetemplate-create-accepted"] {
        let resp = common::validate_review(state(), &in_namespace(f, "team-z")).await;
        assert_eq!(resp["response"]["allowed"], true, "{f}: {resp}");
        assert!(
            !warnings(&resp).iter().any(|w| w.contains("watches namespace")),
            "{f}: {resp}"
        );
    }
    let resp = common::validate_review(state(), &in_namespace("cluster-create-rejected", "team-z")).await;
    assert_eq!(resp["response"]["allowed"], false);
    assert!(
        !warnings(&resp).iter().any(|w| w.contains("watches namespace")),
        "{resp}"
    );
}

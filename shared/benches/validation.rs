//! How long validation takes per AdmissionReview-sized object: `cargo bench -p captf-shared --bench validation`.
//! Figures only; nothing here is asserted.

use captf_shared::defaults::apply_defaults;
use captf_shared::validation::{parse_object, validate_create, validate_update};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use std::hint::black_box;

fn object() -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "TerraformCluster",
        "metadata": {"name": "prod-eu", "namespace": "default", "labels": {"cluster.x-k8s.io/cluster-name": "prod-eu"}},
        "spec": {
            "module": {"source": "git::https://git.example.com/infra/modules/cluster.git?ref=v1.4.2"},
            "variables": {"region": "eu-west-1", "node_count": 3, "tags": {"team": "platform", "env": "prod"}},
            "variablesFrom": [{"secretRef": {"name": "cloud-creds"}}, {"configMapRef": {"name": "vpc", "key": "vars.json"}}],
            "jobs": {"activeDeadlineSeconds": 1800, "lockTimeoutSeconds": 120, "image": "ghcr.io/captf/runner:0.1.0",
                     "env": [{"name": "TF_LOG", "value": "INFO"}]},
            "drift": {"interval": "1h", "remediation": "Manual"},
        },
    })
}

fn bench(c: &mut Criterion) {
    let value = object();
    let obj = parse_object("TerraformCluster", &value).unwrap_or_else(|r| panic!("{}", r.message()));
    let mut defaulted = obj.clone();
    apply_defaults(&mut defaulted);
    c.bench_function("validate_create", |b| b.iter(|| validate_create(black_box(&obj))));
    c.bench_function("validate_update", |b| {
        b.iter(|| validate_update(black_box(&obj), black_box(&defaulted)))
    });
    c.bench_function("parse_object (valid)", |b| {
        b.iter(|| parse_object("TerraformCluster", black_box(&value)))
    });
    let mut bad = value.clone();
    bad["spec"]["jobs"]["activeDeadlineSeconds"] = json!("1h");
    c.bench_function("parse_object (type error, schema walk)", |b| {
        b.iter(|| parse_object("TerraformCluster", black_box(&bad)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! How long converting objects between the API versions takes: one object each way, and a
//! ConversionReview's worth (a page of 500, what `kubectl get` asks for at a time).
//! `cargo bench -p captf-shared --bench conversion`. Figures only; nothing here is asserted.

use captf_shared::conversion::convert;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use std::hint::black_box;

/// A TerraformCluster as the API server stores it at v1beta1 after a few applies: spec, status
/// with conditions, outputs and a pending plan (the field conversion renames).
fn stored(i: usize) -> Value {
    json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "TerraformCluster",
        "metadata": {"name": format!("prod-{i}"), "namespace": "team-a", "uid": "6f1c0e8a-3f7e-4a8e-9a52-0c4c2d9e8f10",
                     "resourceVersion": "123456", "generation": 4,
                     "labels": {"cluster.x-k8s.io/cluster-name": format!("prod-{i}")},
                     "annotations": {"captf.io/applied-inputs-hash": "0123456789abcdef"},
                     "finalizers": ["captf.io/destroy"]},
        "spec": {
            "module": {"source": "git::https://git.example.com/infra/modules/cluster.git?ref=v1.4.2"},
            "variables": {"region": "eu-west-1", "node_count": 3, "tags": {"team": "platform", "env": "prod"}},
            "jobs": {"activeDeadlineSeconds": 1800, "lockTimeoutSeconds": 120},
            "drift": {"interval": "1h", "remediation": "Manual"},
            "controlPlaneEndpoint": {"host": "api.prod.example.com", "port": 6443},
        },
        "status": {
            "ready": true, "initialization": {"provisioned": true}, "observedGeneration": 4,
            "lastJobSeq": 7, "lastBookedJobSeq": 7,
            "conditions": (0..6).map(|c| json!({"type": format!("Condition{c}"), "status": "True",
                "reason": "Applied", "message": "", "lastTransitionTime": "2026-12-01T10:00:00Z"})).collect::<Vec<_>>(),
            "outputs": {"vpc_id": "vpc-0a1b2c3d", "subnets": ["subnet-1", "subnet-2", "subnet-3"]},
            "pendingPlan": {"hash": "f259ff3340901771f506f0a76973bc31893629e9c5f6ba9155bee221202178ef",
                            "add": 1, "change": 2, "destroy": 1, "replace": 0, "job": "tc-prod-apply-8"},
        },
    })
}

fn bench(c: &mut Criterion) {
    let beta = stored(0);
    let alpha = convert(beta.clone(), "infrastructure.cluster.x-k8s.io/v1alpha1").expect("converts");
    let mut one = c.benchmark_group("convert one object");
    one.bench_function("v1beta1 -> v1alpha1", |b| {
        b.iter_batched(
            || beta.clone(),
            |o| convert(black_box(o), "infrastructure.cluster.x-k8s.io/v1alpha1"),
            BatchSize::SmallInput,
        )
    });
    one.bench_function("v1alpha1 -> v1beta1", |b| {
        b.iter_batched(
            || alpha.clone(),
            |o| convert(black_box(o), "infrastructure.cluster.x-k8s.io/v1beta1"),
            BatchSize::SmallInput,
        )
    });
    one.finish();

    let page: Vec<Value> = (0..500).map(stored).collect();
    let mut review = c.benchmark_group("convert a page of 500");
    review.throughput(Throughput::Elements(page.len() as u64));
    review.bench_function("v1beta1 -> v1alpha1", |b| {
        b.iter_batched(
            || page.clone(),
            |objects| {
                objects
                    .into_iter()
                    .map(|o| convert(o, "infrastructure.cluster.x-k8s.io/v1alpha1"))
                    .collect::<Result<Vec<_>, _>>()
            },
            BatchSize::LargeInput,
        )
    });
    review.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

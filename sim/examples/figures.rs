//! Prints the simulator's figures: start-up time, request rates over HTTP through kube-rs, and
//! the cost of simulating many Jobs. `cargo run -p captf-sim --example figures [-- <jobs>]`.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use captf_sim::{RunnerScript, Sim};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

#[tokio::main]
async fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1000);

    let mut starts = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        let sim = Sim::start().await.unwrap();
        starts.push(t.elapsed());
        drop(sim);
    }
    starts.sort();
    println!("start-up (50 runs): median {:?}, max {:?}", starts[25], starts[49]);

    let sim = Sim::start().await.unwrap();
    let client = sim.client().unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let t = Instant::now();
    for i in 0..n {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": format!("cm-{i}")}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let took = t.elapsed();
    println!(
        "{n} sequential creates over HTTP: {took:?} ({:.0}/s)",
        n as f64 / took.as_secs_f64()
    );
    let t = Instant::now();
    for i in 0..n {
        cms.get(&format!("cm-{i}")).await.unwrap();
    }
    let took = t.elapsed();
    println!(
        "{n} sequential gets over HTTP: {took:?} ({:.0}/s)",
        n as f64 / took.as_secs_f64()
    );

    sim.set_default_script(RunnerScript::succeed().after(Duration::from_secs(60)));
    let jobs: Api<Job> = Api::default_namespaced(client);
    let t = Instant::now();
    for i in 0..n {
        let j: Job = serde_json::from_value(json!({"metadata": {"name": format!("tc-x-apply-{i}")},
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": 3600, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "runner", "image": "x"}]}}}}))
        .unwrap();
        jobs.create(&PostParams::default(), &j).await.unwrap();
    }
    println!("{n} Job creates (each with its pod): {:?}", t.elapsed());
    let t = Instant::now();
    sim.advance(Duration::from_secs(60));
    println!("advance finishing {n} Jobs: {:?}", t.elapsed());
    let t = Instant::now();
    let l = jobs.list(&ListParams::default()).await.unwrap();
    println!("list of {} Jobs: {:?}", l.items.len(), t.elapsed());
}

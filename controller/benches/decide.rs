//! `classify` + `decide` over an object with a 10-Job history (docs/architecture.md: < 5 µs per object).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use captf_core::lock::LockState;
use captf_core::record::JobRecord;
use captf_core::snapshot::{DurableRecord, Holds, InputsHash, Snapshot};
use captf_core::{classify, decide};
use captf_shared::names;
use captf_shared::protocol::{Phase, RunResult, RunnerResult};
use captf_shared::types::{CaptfObject, ModuleSpec, TerraformCluster, TerraformClusterSpec, TerraformSpec};
use captf_shared::{Kind, Op};

const NS: &str = "default";
const NAME: &str = "prod-eu";

fn ts(s: i64) -> Timestamp {
    Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// Ten finished Jobs: drift checks, a few failed applies, successes, a deadline kill.
fn history() -> Vec<(Job, Pod)> {
    let plan: [(Op, RunResult, Option<&str>); 10] = [
        (Op::Apply, RunResult::Succeeded, None),
        (Op::Drift, RunResult::Succeeded, None),
        (Op::Drift, RunResult::Failed, None),
        (Op::Apply, RunResult::Failed, None),
        (Op::Apply, RunResult::Interrupted, Some("DeadlineExceeded")),
        (Op::Apply, RunResult::Blocked, None),
        (Op::Apply, RunResult::Succeeded, None),
        (Op::Drift, RunResult::Succeeded, None),
        (Op::Apply, RunResult::Failed, None),
        (Op::Apply, RunResult::Failed, None),
    ];
    plan.iter()
        .enumerate()
        .map(|(i, (op, result, reason))| {
            let seq = i as u32 + 1;
            let at = ts(1_800_000_000 + i64::from(seq) * 600);
            let ok = *result == RunResult::Succeeded;
            let job = Job {
                metadata: ObjectMeta {
                    name: Some(names::job_name(Kind::TerraformCluster, NS, NAME, *op, seq)),
                    creation_timestamp: Some(Time(at)),
                    ..Default::default()
                },
                status: Some(JobStatus {
                    conditions: Some(vec![JobCondition {
                        type_: if ok { "Complete" } else { "Failed" }.into(),
                        status: "True".into(),
                        reason: reason.map(str::to_string),
                        last_transition_time: Some(Time(at)),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let pod = Pod {
                status: Some(PodStatus {
                    container_statuses: Some(vec![ContainerStatus {
                        name: "runner".into(),
                        state: Some(ContainerState {
                            terminated: Some(ContainerStateTerminated {
                                exit_code: result.exit_code(),
                                message: Some(
                                    RunnerResult::new(*result, Phase::Apply, "bench").to_termination_message(),
                                ),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            };
            (job, pod)
        })
        .collect()
}

fn object() -> CaptfObject {
    let mut tc = TerraformCluster::new(
        NAME,
        TerraformClusterSpec {
            terraform: TerraformSpec {
                module: ModuleSpec {
                    source: "git::https://example.com/infra/cluster.git?ref=v1".into(),
                    ..Default::default()
                },
                ..Default::default()
            },
            control_plane_endpoint: None,
            exports: None,
        },
    );
    tc.metadata.namespace = Some(NS.into());
    CaptfObject::Cluster(tc)
}

fn bench(c: &mut Criterion) {
    let jobs = history();
    let obj = object();
    let records: Vec<JobRecord> = jobs
        .iter()
        .filter_map(|(j, p)| JobRecord::from_job(Kind::TerraformCluster, NS, NAME, j, Some(p)).ok())
        .collect();
    let snap = Snapshot::new(
        &obj,
        records,
        DurableRecord {
            applied_inputs_hash: Some("a".repeat(64)),
            ..Default::default()
        },
        InputsHash::Known("b".repeat(64)),
        LockState::Free,
        Holds::default(),
    );
    let Ok(snap) = snap else {
        eprintln!("bench setup failed");
        return;
    };
    let now = ts(1_800_010_000);
    println!("decision over the 10-Job history: {:?}", decide(&snap, now));

    c.bench_function("classify 10 Jobs (with pods)", |b| {
        b.iter(|| {
            for (j, p) in &jobs {
                black_box(classify(black_box(j), Some(black_box(p))));
            }
        })
    });
    c.bench_function("decide (10-Job history)", |b| {
        b.iter(|| black_box(decide(black_box(&snap), now)))
    });
    c.bench_function("classify 10 Jobs + decide", |b| {
        b.iter(|| {
            for (j, p) in &jobs {
                black_box(classify(black_box(j), Some(black_box(p))));
            }
            black_box(decide(black_box(&snap), now))
        })
    });
    c.bench_function("book 10 Jobs (JobRecord::from_job)", |b| {
        b.iter(|| {
            for (j, p) in &jobs {
                black_box(JobRecord::from_job(Kind::TerraformCluster, NS, NAME, black_box(j), Some(p)).ok());
            }
        })
    });
    let records: Vec<JobRecord> = snap.jobs.clone();
    c.bench_function("Snapshot::new (effective spec, validation, sort)", |b| {
        b.iter(|| {
            black_box(Snapshot::new(
                &obj,
                records.clone(),
                DurableRecord::default(),
                InputsHash::Known("b".repeat(64)),
                LockState::Free,
                Holds::default(),
            ))
        })
    });
    c.bench_function("book 10 Jobs (records) + Snapshot + decide", |b| {
        b.iter(|| {
            let records: Vec<JobRecord> = jobs
                .iter()
                .filter_map(|(j, p)| JobRecord::from_job(Kind::TerraformCluster, NS, NAME, j, Some(p)).ok())
                .collect();
            let s = Snapshot::new(
                &obj,
                records,
                DurableRecord::default(),
                InputsHash::Known("b".repeat(64)),
                LockState::Free,
                Holds::default(),
            );
            black_box(s.map(|s| decide(&s, now)).ok())
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);

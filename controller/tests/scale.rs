//! The short version of the scale bench (`controller/benches/scale/`), so its runs can't rot:
//! the same code on a few hundred objects, checking that every run does what it measures. It
//! checks no timing; `scripts/bench-scale.sh` prints the figures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../benches/scale/measure.rs"]
mod measure;

use std::time::Duration;

use measure::{LatencyPhase, Options};

fn options() -> Options {
    Options {
        controller_bin: measure::controller_bin(),
        concurrency: 8,
        timeout: Duration::from_secs(120),
        logs: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_run_brings_every_object_to_ready_and_times_the_next_job_of_every_eviction() {
    let phase = LatencyPhase {
        running: 30,
        evictions: 20,
        rate: 20,
    };
    let r = measure::size_run(&options(), 150, &phase).await.unwrap();
    // Every object got its apply Job and nothing more was due once all were Ready.
    assert_eq!(r.jobs, 150, "one apply Job per object");
    assert_eq!(r.jobs_after_ready, 0, "no Job once every object was Ready");
    assert!(
        r.requests_per_object >= 1.0,
        "requests counted: {}",
        r.requests_per_object
    );
    // Every resource request is counted by its kind too, and each object's pass reads it live.
    let by_kind: f64 = r.requests_by_kind.iter().map(|(_, x)| x).sum();
    assert!(
        by_kind > 0.0 && by_kind <= r.requests_per_object + 1e-9,
        "{:?} against {}",
        r.requests_by_kind,
        r.requests_per_object
    );
    assert!(
        r.requests_by_kind
            .iter()
            .any(|(k, x)| k == "GET terraformclusters" && *x >= 1.0),
        "{:?}",
        r.requests_by_kind
    );
    println!("requests per object by kind: {:?}", r.requests_by_kind);
    assert!(
        r.rss_ready_mib > 0.0 && r.hwm_mib >= r.rss_ready_mib,
        "memory sampled: {r:?}"
    );
    assert!(
        r.cpu_to_ready > 0.0 && r.cpu_total >= r.cpu_to_ready,
        "CPU sampled: {r:?}"
    );
    let l = &r.latency;
    assert_eq!(l.evictions, 20, "every eviction happened: {l:?}");
    assert_eq!(l.missing, 0, "every evicted object got its next Job: {l:?}");
    assert!(l.p50 <= l.p99 && l.p99 <= l.max && l.max > Duration::ZERO, "{l:?}");
    assert_eq!(r.warnings, 0, "the controller logged no warning: {:?}", r.first_warning);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_scale_run_has_each_shard_serve_only_its_own_objects() {
    let r = measure::shard_run(&options(), 120, 3).await.unwrap();
    // Only shard controllers run, each selecting its own label: every object Ready means each
    // shard's controller served its own objects.
    assert_eq!(r.per_shard.len(), 3);
    for (i, s) in r.per_shard.iter().enumerate() {
        assert_eq!(s.objects, 40, "shard-{i}");
        assert_eq!(s.jobs, 40, "shard-{i}: one apply Job per object");
        assert!(s.cpu > 0.0 && s.hwm_mib > 0.0, "shard-{i} sampled: {s:?}");
        assert_eq!(s.warnings, 0, "shard-{i} logged no warning");
    }
    assert!(r.applies_per_minute > 0.0);
}

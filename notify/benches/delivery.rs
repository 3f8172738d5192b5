//! Delivery latency to a receiver on 127.0.0.1, a measurement that prints figures and asserts
//! no timing (docs/notifications.md, "Cost"):
//!
//! ```text
//! cargo bench -p captf-notify --bench delivery
//! CAPTF_NOTIFY_BENCH_N=5000 cargo bench -p captf-notify --bench delivery
//! ```
//!
//! Printed: the cost of one `notify` call; the time from `notify` to the receiver's handler,
//! one notification at a time (`CAPTF_NOTIFY_BENCH_N`, 2,000), alone and with a second target
//! that never answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use captf_notify::{Event, Metrics, ObjectRef, Options, SecretKeyRef, Target, TargetKind, TargetSpec};
use captf_shared::Kind;
use tokio::sync::mpsc;

fn target(name: &str, url: &str) -> Target {
    let spec = TargetSpec {
        name: name.into(),
        kind: TargetKind::Generic,
        url_secret: SecretKeyRef {
            name: "bench".into(),
            key: "url".into(),
        },
        token_secret: None,
        events: vec![],
    };
    Target::resolve(&spec, url, None).unwrap()
}

fn event(i: u32) -> Event {
    Event::ApplyFailed {
        object: ObjectRef::new(Kind::TerraformCluster, "bench", "c"),
        failures: i,
        reason: "Error: creating EC2 instance: UnauthorizedOperation".into(),
    }
}

/// A receiver that reports each request's arrival; `hang` never answers.
async fn receiver(hang: bool) -> (String, mpsc::UnboundedReceiver<Instant>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = Router::new().route(
        "/",
        post(move || {
            let _ = tx.send(Instant::now());
            async move {
                if hang {
                    std::future::pending::<()>().await;
                }
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/"), rx)
}

fn percentiles(mut v: Vec<Duration>) -> String {
    v.sort();
    let at = |p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize];
    format!(
        "p50 {:?}, p90 {:?}, p99 {:?}, max {:?}",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    )
}

async fn latency(n: u32, with_hung_target: bool) -> String {
    let (url, mut arrivals) = receiver(false).await;
    let mut targets = vec![target("healthy", &url)];
    let _hung = if with_hung_target {
        let (hung_url, rx) = receiver(true).await;
        targets.push(target("hung", &hung_url));
        Some(rx)
    } else {
        None
    };
    let options = Options {
        request_timeout: Duration::from_secs(3600),
        ..Options::default()
    };
    let (notifier, delivery) = captf_notify::start(targets, options, Metrics::new()).unwrap();
    let mut samples = Vec::with_capacity(n as usize);
    for i in 0..n {
        let sent = Instant::now();
        notifier.notify(event(i));
        let arrived = arrivals.recv().await.expect("receiver stopped");
        samples.push(arrived - sent);
    }
    delivery.abort();
    percentiles(samples)
}

fn main() {
    let n: u32 = std::env::var("CAPTF_NOTIFY_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // The cost the controller pays: a queue slot, nothing more.
        let (url, _arrivals) = receiver(true).await;
        let options = Options {
            queue_capacity: 200_000,
            ..Options::default()
        };
        let (notifier, delivery) = captf_notify::start(vec![target("t", &url)], options, Metrics::new()).unwrap();
        let calls = 100_000u32;
        let events: Vec<Event> = (0..calls).map(event).collect();
        let t = Instant::now();
        for e in events {
            notifier.notify(e);
        }
        let per_call = t.elapsed() / calls;
        delivery.abort();
        println!("notify: {per_call:?} per call ({calls} calls)");
        println!(
            "notify → receiver, alone: {} ({n} notifications)",
            latency(n, false).await
        );
        println!(
            "notify → receiver, beside a target that never answers: {} ({n} notifications)",
            latency(n, true).await
        );
    });
}

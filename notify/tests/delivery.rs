//! Delivery against receivers started here on 127.0.0.1: what each target kind receives, and
//! how retries, timeouts, full queues and duplicates are handled.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use captf_notify::{
    Delivery, Event, Metrics, Notifier, ObjectRef, Options, Outcome, PlanCounts, Queued, RetryPolicy, SecretKeyRef,
    Target, TargetKind, TargetSpec, parse_targets,
};
use captf_shared::Kind;
use serde_json::Value;
use tokio::sync::mpsc;

/// What a receiver does with each request, after reporting it.
#[derive(Clone, Copy)]
enum Behaviour {
    Ok,
    /// 500 for the first `n` requests, then 200.
    FailFirst(u32),
    Status(u16),
    /// Answers only after this long.
    Slow(Duration),
    /// Never answers.
    Hang,
}

struct Received {
    headers: HeaderMap,
    body: Value,
}

struct Shared {
    behaviour: Behaviour,
    hits: AtomicU32,
    tx: mpsc::UnboundedSender<Received>,
}

struct Receiver {
    url: String,
    rx: mpsc::UnboundedReceiver<Received>,
    shared: Arc<Shared>,
}

impl Receiver {
    async fn start(behaviour: Behaviour) -> Receiver {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            behaviour,
            hits: AtomicU32::new(0),
            tx,
        });
        let app = Router::new()
            .route("/hook/secret-path", post(receive))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver {
            url: format!("http://{addr}/hook/secret-path"),
            rx,
            shared,
        }
    }

    /// The next request; a guard against a hung test, not a measure of anything.
    async fn next(&mut self) -> Received {
        tokio::time::timeout(Duration::from_secs(20), self.rx.recv())
            .await
            .expect("no request within 20 s")
            .unwrap()
    }

    fn hits(&self) -> u32 {
        self.shared.hits.load(Ordering::SeqCst)
    }
}

async fn receive(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let n = s.hits.fetch_add(1, Ordering::SeqCst);
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let _ = s.tx.send(Received { headers, body });
    match s.behaviour {
        Behaviour::Ok => StatusCode::OK,
        Behaviour::FailFirst(k) if n < k => StatusCode::INTERNAL_SERVER_ERROR,
        Behaviour::FailFirst(_) => StatusCode::NO_CONTENT,
        Behaviour::Status(c) => StatusCode::from_u16(c).unwrap(),
        Behaviour::Slow(d) => {
            tokio::time::sleep(d).await;
            StatusCode::OK
        }
        Behaviour::Hang => std::future::pending().await,
    }
}

fn spec(name: &str, kind: TargetKind, token: bool) -> TargetSpec {
    TargetSpec {
        name: name.into(),
        kind,
        url_secret: SecretKeyRef {
            name: "captf-notify".into(),
            key: format!("{name}-url"),
        },
        token_secret: token.then(|| SecretKeyRef {
            name: "captf-notify".into(),
            key: format!("{name}-token"),
        }),
        events: vec![],
    }
}

fn target(name: &str, kind: TargetKind, r: &Receiver) -> Target {
    Target::resolve(&spec(name, kind, false), &r.url, None).unwrap()
}

/// Retries a few milliseconds apart, so a test of five attempts takes no time to speak of.
fn fast() -> Options {
    Options {
        retry: RetryPolicy {
            first: Duration::from_millis(5),
            cap: Duration::from_millis(20),
            max_attempts: 5,
        },
        request_timeout: Duration::from_secs(10),
        ..Options::default()
    }
}

fn obj() -> ObjectRef {
    ObjectRef::new(Kind::TerraformCluster, "team-a", "prod-eu")
}

fn approval(hash: &str) -> Event {
    Event::awaiting_approval(
        obj(),
        hash,
        PlanCounts {
            add: 1,
            change: 2,
            destroy: 3,
            replace: 1,
        },
    )
}

fn failure(n: u32) -> Event {
    Event::ApplyFailed {
        object: obj(),
        failures: n,
        reason: "Error: creating EC2 instance: UnauthorizedOperation".into(),
    }
}

fn start(targets: Vec<Target>, options: Options) -> (Notifier, Delivery, Metrics) {
    let metrics = Metrics::new();
    let (n, d) = captf_notify::start(targets, options, metrics.clone()).unwrap();
    (n, d, metrics)
}

/// Wait until `done` holds (it follows a receipt the test already saw, so this is short); a
/// guard fails the test rather than hanging it.
async fn wait_for(done: impl Fn() -> bool) {
    tokio::time::timeout(Duration::from_secs(20), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("not within 20 s");
}

/// Drop the handle and wait until everything queued is delivered or given up.
async fn drain(notifier: Notifier, delivery: Delivery) {
    drop(notifier);
    tokio::time::timeout(Duration::from_secs(30), delivery.finished())
        .await
        .expect("delivery did not finish within 30 s");
}

#[tokio::test]
async fn a_generic_target_receives_the_documented_json_fields() {
    let mut r = Receiver::start(Behaviour::Ok).await;
    let (n, d, m) = start(vec![target("audit", TargetKind::Generic, &r)], fast());
    assert_eq!(n.notify(approval("3f2a")), Queued::Queued);
    let got = r.next().await;
    drain(n, d).await;
    assert_eq!(got.headers["content-type"], "application/json");
    assert!(got.headers.get("authorization").is_none());
    let b = &got.body;
    assert_eq!(b["version"], "captf.io/notification/v1");
    assert_eq!(b["type"], "io.captf.plan.awaiting-approval");
    assert_eq!(b["event"], "awaiting-approval");
    assert_eq!(b["source"], "/namespaces/team-a/terraformclusters/prod-eu");
    assert!(b["id"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(b["time"].as_str().unwrap().parse::<jiff::Timestamp>().is_ok());
    assert!(b["summary"].as_str().unwrap().contains("prod-eu"));
    let data = &b["data"];
    assert_eq!(data["object"]["kind"], "TerraformCluster");
    assert_eq!(data["object"]["namespace"], "team-a");
    assert_eq!(data["object"]["name"], "prod-eu");
    assert_eq!(data["planHash"], "3f2a");
    assert_eq!(data["counts"]["destroy"], 3);
    assert_eq!(
        data["approveCommand"],
        "kubectl captf approve terraformcluster/prod-eu -n team-a --hash 3f2a"
    );
    assert_eq!(m.count("audit", Outcome::Delivered), 1);
}

#[tokio::test]
async fn a_slack_target_receives_text_with_the_approve_line_in_a_code_span() {
    let mut r = Receiver::start(Behaviour::Ok).await;
    let (n, d, m) = start(vec![target("slack", TargetKind::Slack, &r)], fast());
    n.notify(approval("3f2a"));
    let got = r.next().await;
    drain(n, d).await;
    let obj = got.body.as_object().unwrap();
    assert_eq!(obj.keys().collect::<Vec<_>>(), ["text"], "Slack takes only text");
    let text = obj["text"].as_str().unwrap();
    assert!(
        text.contains("`kubectl captf approve terraformcluster/prod-eu -n team-a --hash 3f2a`"),
        "{text}"
    );
    assert!(text.starts_with("*Plan waiting for approval*"), "{text}");
    assert_eq!(m.count("slack", Outcome::Delivered), 1);
}

#[tokio::test]
async fn a_cloudevents_target_receives_a_structured_event_with_the_required_attributes() {
    let mut r = Receiver::start(Behaviour::Ok).await;
    let (n, d, _) = start(vec![target("ce", TargetKind::CloudEvents, &r)], fast());
    n.notify(failure(3));
    let got = r.next().await;
    drain(n, d).await;
    assert_eq!(
        got.headers["content-type"],
        "application/cloudevents+json; charset=utf-8"
    );
    let b = &got.body;
    assert_eq!(b["specversion"], "1.0");
    assert_eq!(b["type"], "io.captf.apply.failed");
    assert_eq!(b["source"], "/namespaces/team-a/terraformclusters/prod-eu");
    assert!(b["id"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(b["time"].as_str().unwrap().parse::<jiff::Timestamp>().is_ok());
    assert_eq!(b["datacontenttype"], "application/json");
    assert_eq!(b["data"]["failures"], 3);
    assert_eq!(b["data"]["object"]["name"], "prod-eu");
}

#[tokio::test]
async fn a_receiver_that_fails_then_recovers_gets_the_notification_once_with_the_retries_counted() {
    let mut r = Receiver::start(Behaviour::FailFirst(2)).await;
    let (n, d, m) = start(vec![target("flaky", TargetKind::Generic, &r)], fast());
    n.notify(approval("h"));
    drain(n, d).await;
    assert_eq!(r.hits(), 3);
    assert_eq!(m.count("flaky", Outcome::FailedAttempt), 2);
    assert_eq!(m.count("flaky", Outcome::Delivered), 1);
    assert_eq!(m.count("flaky", Outcome::GivenUp), 0);
    let ids: Vec<Value> = [r.next().await, r.next().await, r.next().await]
        .into_iter()
        .map(|g| g.body["id"].clone())
        .collect();
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "a retry carries the same id: {ids:?}"
    );
}

#[tokio::test]
async fn a_receiver_that_keeps_failing_is_given_up_after_the_last_attempt() {
    let r = Receiver::start(Behaviour::Status(503)).await;
    let mut o = fast();
    o.retry.max_attempts = 3;
    let (n, d, m) = start(vec![target("down", TargetKind::Generic, &r)], o);
    n.notify(approval("h"));
    drain(n, d).await;
    assert_eq!(r.hits(), 3);
    assert_eq!(m.count("down", Outcome::FailedAttempt), 3);
    assert_eq!(m.count("down", Outcome::GivenUp), 1);
    assert_eq!(m.count("down", Outcome::Delivered), 0);
}

#[tokio::test]
async fn a_receiver_that_refuses_the_request_is_not_retried() {
    let r = Receiver::start(Behaviour::Status(404)).await;
    let (n, d, m) = start(vec![target("gone", TargetKind::Generic, &r)], fast());
    n.notify(approval("h"));
    drain(n, d).await;
    assert_eq!(r.hits(), 1);
    assert_eq!(m.count("gone", Outcome::GivenUp), 1);
}

#[tokio::test]
async fn a_target_that_hangs_never_delays_another_target() {
    let mut hang = Receiver::start(Behaviour::Hang).await;
    let mut healthy = Receiver::start(Behaviour::Ok).await;
    let mut o = fast();
    // Far longer than the test: the hung attempt is still open when the other target is done.
    o.request_timeout = Duration::from_secs(600);
    let targets = vec![
        target("hang", TargetKind::Generic, &hang),
        target("healthy", TargetKind::Generic, &healthy),
    ];
    let (n, d, m) = start(targets, o);
    n.notify(approval("h1"));
    n.notify(failure(1));
    hang.next().await;
    healthy.next().await;
    healthy.next().await;
    // Both of the healthy target's notifications arrived while the hung target's requests are
    // still unanswered.
    wait_for(|| m.count("healthy", Outcome::Delivered) == 2).await;
    assert_eq!(m.count("hang", Outcome::FailedAttempt), 0);
    assert_eq!(m.count("hang", Outcome::Delivered), 0);
    assert_eq!(n.notify(failure(2)), Queued::Queued, "the caller is not held up either");
    healthy.next().await;
    d.abort();
}

#[tokio::test]
async fn an_attempt_that_hangs_times_out_and_counts_as_failed() {
    let r = Receiver::start(Behaviour::Hang).await;
    let mut o = fast();
    o.request_timeout = Duration::from_millis(200);
    o.retry.max_attempts = 2;
    let (n, d, m) = start(vec![target("hang", TargetKind::Generic, &r)], o);
    n.notify(approval("h"));
    drain(n, d).await;
    assert_eq!(r.hits(), 2);
    assert_eq!(m.count("hang", Outcome::FailedAttempt), 2);
    assert_eq!(m.count("hang", Outcome::GivenUp), 1);
}

#[tokio::test]
async fn a_slow_receiver_within_the_timeout_gets_the_notification_once() {
    let r = Receiver::start(Behaviour::Slow(Duration::from_millis(300))).await;
    let (n, d, m) = start(vec![target("slow", TargetKind::Generic, &r)], fast());
    n.notify(approval("h"));
    drain(n, d).await;
    assert_eq!(r.hits(), 1);
    assert_eq!(m.count("slow", Outcome::Delivered), 1);
    assert_eq!(m.count("slow", Outcome::FailedAttempt), 0);
}

// One thread: the dispatcher cannot run between these `notify` calls, so the queue of one
// fills after the first.
#[tokio::test(flavor = "current_thread")]
async fn notify_never_waits_and_counts_what_a_full_queue_drops() {
    let r = Receiver::start(Behaviour::Hang).await;
    let o = Options {
        queue_capacity: 1,
        ..fast()
    };
    let (n, d, m) = start(vec![target("t", TargetKind::Generic, &r)], o);
    let answers: Vec<Queued> = (1..=3).map(|i| n.notify(failure(i))).collect();
    assert_eq!(
        answers,
        [Queued::Queued, Queued::DroppedQueueFull, Queued::DroppedQueueFull]
    );
    assert_eq!(m.count("t", Outcome::DroppedQueueFull), 2);
    d.abort();
}

#[tokio::test]
async fn a_target_whose_queue_is_full_drops_only_its_own_notifications() {
    let hang = Receiver::start(Behaviour::Hang).await;
    let mut healthy = Receiver::start(Behaviour::Ok).await;
    let o = Options {
        target_queue_capacity: 1,
        target_concurrency: 1,
        request_timeout: Duration::from_secs(600),
        ..fast()
    };
    let targets = vec![
        target("hang", TargetKind::Generic, &hang),
        target("healthy", TargetKind::Generic, &healthy),
    ];
    let (n, d, m) = start(targets, o);
    // One at a time, so the healthy target (with the same small bounds) is never behind.
    for i in 1..=4 {
        assert_eq!(n.notify(failure(i)), Queued::Queued);
        healthy.next().await;
        wait_for(|| m.count("healthy", Outcome::Delivered) == u64::from(i)).await;
    }
    // One in flight, one taken from its queue waiting for the slot, one queued: at most three.
    assert!(m.count("hang", Outcome::DroppedQueueFull) >= 1);
    assert_eq!(m.count("healthy", Outcome::DroppedQueueFull), 0);
    d.abort();
}

#[tokio::test]
async fn the_same_news_within_the_window_is_sent_once() {
    let r = Receiver::start(Behaviour::Ok).await;
    let (n, d, m) = start(vec![target("t", TargetKind::Generic, &r)], fast());
    n.notify(approval("h1"));
    n.notify(approval("h1"));
    n.notify(approval("h2"));
    n.notify(approval("h1"));
    drain(n, d).await;
    assert_eq!(r.hits(), 2);
    assert_eq!(m.count("t", Outcome::Delivered), 2);
    assert_eq!(m.count("t", Outcome::SuppressedDuplicate), 2);
}

#[tokio::test]
async fn a_target_gets_only_the_events_it_lists() {
    let mut r = Receiver::start(Behaviour::Ok).await;
    let yaml = "- {name: approvals, kind: Generic, urlSecret: {name: s, key: k}, events: [awaiting-approval]}";
    let specs = parse_targets(yaml).unwrap();
    let t = Target::resolve(&specs[0], &r.url, None).unwrap();
    let (n, d, m) = start(vec![t], fast());
    assert_eq!(n.notify(failure(1)), Queued::NoTarget);
    assert_eq!(n.notify(approval("h")), Queued::Queued);
    let got = r.next().await;
    drain(n, d).await;
    assert_eq!(got.body["event"], "awaiting-approval");
    assert_eq!(r.hits(), 1);
    assert_eq!(m.count("approvals", Outcome::Delivered), 1);
}

#[tokio::test]
async fn the_token_is_sent_as_a_bearer_header_and_never_printed() {
    let mut r = Receiver::start(Behaviour::Ok).await;
    let token = "tok-s3cr3t-value";
    let t = Target::resolve(&spec("ce", TargetKind::CloudEvents, true), &r.url, Some(token)).unwrap();
    let printed = format!("{t:?}");
    assert!(
        !printed.contains(token) && !printed.contains("secret-path"),
        "{printed}"
    );
    let (n, d, _) = start(vec![t], fast());
    let printed = format!("{n:?} {d:?}");
    assert!(
        !printed.contains(token) && !printed.contains("secret-path"),
        "{printed}"
    );
    n.notify(approval("h"));
    let got = r.next().await;
    drain(n, d).await;
    assert_eq!(got.headers["authorization"], format!("Bearer {token}"));

    let wrong = Target::resolve(
        &spec("ce", TargetKind::CloudEvents, true),
        "ftp://x/secret-path",
        Some(token),
    )
    .unwrap_err();
    assert!(!wrong.to_string().contains(token) && !wrong.to_string().contains("secret-path"));
}

#[tokio::test]
async fn a_url_that_is_not_http_is_refused_naming_the_field() {
    let s = spec("audit", TargetKind::Generic, false);
    let e = Target::resolve(&s, "gopher://example.com/1", None).unwrap_err();
    assert_eq!(e.field, "targets[audit].urlSecret");
    assert!(e.to_string().contains("http or https"), "{e}");
}

#[tokio::test]
async fn a_receiver_that_is_not_listening_costs_failed_attempts_not_a_panic() {
    // Bind, then close: nothing listens on the port.
    let addr = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let s = spec("nobody", TargetKind::Slack, false);
    let t = Target::resolve(&s, &format!("http://{addr}/x"), None).unwrap();
    let mut o = fast();
    o.retry.max_attempts = 2;
    let (n, d, m) = start(vec![t], o);
    n.notify(Event::Destroyed { object: obj() });
    drain(n, d).await;
    assert_eq!(m.count("nobody", Outcome::FailedAttempt), 2);
    assert_eq!(m.count("nobody", Outcome::GivenUp), 1);
}

//! Notifications (docs/notifications.md): a plan blocked for approval reaches a cluster-wide
//! target (the chart's file) and the target of the object's namespace (its ConfigMap
//! captf-notifications), each with the line that approves that plan; a target whose Secret is
//! missing is left out and counted, and the controller goes on.
//!
//! The simulator's clock is simulated but delivery uses real sockets and real timers: the test
//! waits on the receiver with a bounded wall-clock timeout.

use std::time::Duration;

use anyhow::{Context, Result};
use axum::extract::{OriginalUri, State};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use captf_controller::runtime::RunArgs;
use captf_shared::protocol::PlanSummary;
use captf_shared::{Kind, Op};
use captf_sim::{JobMatch, RunnerScript, Sim};

use super::support::*;

/// A receiver on 127.0.0.1: every POST is answered 200 and handed over as (path, JSON body).
async fn receiver() -> Result<(std::net::SocketAddr, mpsc::UnboundedReceiver<(String, Value)>)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let app =
        axum::Router::new()
            .fallback(
                |State(tx): State<mpsc::UnboundedSender<(String, Value)>>,
                 OriginalUri(uri): OriginalUri,
                 body: String| async move {
                    let v = serde_json::from_str(&body).unwrap_or(Value::String(body));
                    let _ = tx.send((uri.path().to_string(), v));
                    "ok"
                },
            )
            .with_state(tx);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((addr, rx))
}

/// The next notification sent to `path` (others are kept aside), waiting at most 15 s of wall
/// time: delivery runs on real sockets whatever the simulator's clock says.
async fn next_at(
    rx: &mut mpsc::UnboundedReceiver<(String, Value)>,
    seen: &mut Vec<(String, Value)>,
    path: &str,
) -> Result<Value> {
    if let Some(i) = seen.iter().position(|(p, _)| p == path) {
        return Ok(seen.remove(i).1);
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let got = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .with_context(|| format!("no notification reached {path} within 15 s"))?
            .context("the receiver stopped")?;
        if got.0 == path {
            return Ok(got.1);
        }
        seen.push(got);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_plan_reaches_the_cluster_and_namespace_targets_with_its_approve_line() -> Result<()> {
    let (addr, mut rx) = receiver().await?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("targets.yaml");
    // `missing` names a Secret that does not exist: left out, counted, and no obstacle.
    std::fs::write(
        &file,
        "- {name: platform, kind: Generic, urlSecret: {name: captf-notify, key: url}, events: [awaiting-approval]}\n\
         - {name: missing, kind: Slack, urlSecret: {name: nowhere, key: url}}\n",
    )?;
    let sim = Sim::builder().start_time(T0.parse()?).start().await?;
    sim.create_namespace(NS);
    sim.load_rbac(CHART_RBAC)?;
    // The cluster-wide targets' Secrets are read at start, in the controller's namespace (here
    // the watched one, whose Secrets the chart's RBAC lets it read).
    sim.put(secret_json(
        "captf-notify",
        "url",
        format!("http://{addr}/cluster\n").as_bytes(),
    )?)?;
    let mut hook = secret_json("team-hook", "url", format!("http://{addr}/team").as_bytes())?;
    // A second key the team got wrong: not an http(s) URL.
    hook["data"]["ftp"] = serde_json::to_value(k8s_openapi::ByteString(b"ftp://files.example.com/hook".to_vec()))?;
    sim.put(hook)?;
    sim.put(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "captf-notifications", "namespace": NS},
        "data": {"targets": "- {name: team, kind: CloudEvents, urlSecret: {name: team-hook, key: url}}\n\
                             - {name: chat, kind: Slack, urlSecret: {name: team-hook, key: ftp}}\n"},
    }))?;
    let mut flags = flags();
    flags.push(format!("--notification-targets-file={}", file.display()));
    flags.push(format!("--notification-secrets-namespace={NS}"));
    let args = RunArgs::from_flags(&flags)?;
    let mut env = Env { sim, handle: None };
    env.start_controller_with(&args).await?;

    let s = PlanSummary {
        add: 1,
        change: 0,
        destroy: 2,
        replace: 0,
    };
    let m = JobMatch::object(Kind::TerraformCluster, NS, "guarded").op(Op::Apply);
    env.sim.script(m, RunnerScript::blocked("hash-1", s));
    let j1 = env.create_cluster("guarded", json!({})).await?;
    env.run_until_booked(&j1, "blocked").await?;

    let line = "kubectl captf approve terraformcluster/guarded -n default --hash hash-1";
    let mut seen = vec![];
    let cluster = next_at(&mut rx, &mut seen, "/cluster").await?;
    assert_eq!(cluster["event"], "awaiting-approval", "{cluster}");
    assert_eq!(cluster["data"]["planHash"], "hash-1");
    assert_eq!(
        cluster["data"]["counts"],
        json!({"add": 1, "change": 0, "destroy": 2, "replace": 0})
    );
    assert_eq!(cluster["data"]["approveCommand"], line);
    let team = next_at(&mut rx, &mut seen, "/team").await?;
    assert_eq!(team["specversion"], "1.0", "{team}");
    assert_eq!(team["type"], "io.captf.plan.awaiting-approval");
    assert_eq!(team["data"]["approveCommand"], line);

    // The receiver has the body before its answer reaches the notifier, which counts the
    // delivery only then: wait for the count.
    let delivered = [
        r#"captf_notifications_total{target="platform",event="awaiting-approval",outcome="delivered"} 1"#,
        r#"captf_notifications_total{target="default/team",event="awaiting-approval",outcome="delivered"} 1"#,
    ];
    let metrics = env
        .until("both deliveries to be counted", |e| {
            let m = e.metrics();
            delivered.iter().all(|d| m.contains(d)).then_some(m)
        })
        .await?;
    assert!(
        metrics.contains(r#"captf_notification_target_errors_total{scope="cluster",field="urlSecret"} 1"#),
        "{metrics}"
    );
    // The team's unusable target is told where the team looks: on its ConfigMap, naming the
    // target and the field, never the value.
    let told = env
        .until("an Event on the namespace's targets", |e| {
            e.events("NotificationTargetsInvalid").into_iter().next()
        })
        .await?;
    assert_eq!(told["regarding"]["kind"], "ConfigMap", "{told}");
    assert_eq!(told["regarding"]["name"], "captf-notifications", "{told}");
    let note = told["note"].as_str().unwrap_or_default();
    assert!(note.contains("default/chat: urlSecret"), "{note}");
    assert!(!note.contains("files.example.com"), "{note}");
    // No URL ever reaches a metric (the namespace's target is labelled `default/team`, its
    // namespace and name; its URL's host and port never appear).
    let metrics = env.metrics();
    assert!(!metrics.contains(&addr.to_string()), "{metrics}");
    env.no_denials()?;
    Ok(())
}

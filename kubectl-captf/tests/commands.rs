//! The commands Flux and Cluster API users expect, against the simulator with the real controller
//! runtime: `tree`, `--watch`, `-o yaml`, `logs -f`, `suspend`/`resume`, completion, and the
//! simulator's clock found by the plugin itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use anyhow::Result;
use serde_json::{Value, json};

use captf_shared::{Kind, Op, names};
use captf_sim::RunnerScript;
use common::{Env, NS};

/// The Cluster API `Cluster` CRD, as much of it as the simulator needs to serve the kind.
fn capi_cluster_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "clusters.cluster.x-k8s.io"},
        "spec": {
            "group": "cluster.x-k8s.io",
            "scope": "Namespaced",
            "names": {"kind": "Cluster", "listKind": "ClusterList", "plural": "clusters", "singular": "cluster"},
            "versions": [{
                "name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
            }],
        },
    })
}

/// A cluster `c`: the Cluster (infrastructure provisioned) naming the TerraformCluster `c`,
/// applied; its members, labelled with the cluster and owned by the TerraformCluster, a pool `p`
/// and a machine `m` also owned by the pool; the pool's apply running. And a squatter: a pool
/// `s` that carries the cluster's label and nothing else, which is no member.
async fn cluster_with_members(env: &Env) -> Result<()> {
    env.sim
        .set_default_script(RunnerScript::realistic_with_outputs(common::outputs()));
    env.sim.put(capi_cluster_crd())?;
    env.sim.put(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": NS},
        "spec": {"infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                                       "kind": "TerraformCluster", "name": "c"}},
        "status": {"infrastructureReady": true,
                   "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": common::T0}]},
    }))?;
    env.applied_cluster("c").await?;
    let label = json!({"cluster.x-k8s.io/cluster-name": "c"});
    let owner = |kind: Kind, v: &Value| {
        json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": kind.as_str(),
               "name": v["metadata"]["name"], "uid": v["metadata"]["uid"]})
    };
    let tfc = owner(Kind::TerraformCluster, &env.cluster("c"));
    let pool = env.put_kind(Kind::TerraformMachinePool, "p", label.clone(), json!([tfc]))?;
    let by_pool = owner(Kind::TerraformMachinePool, &pool);
    env.put_kind(Kind::TerraformMachine, "m", label.clone(), json!([tfc, by_pool]))?;
    env.put_kind(Kind::TerraformMachinePool, "s", label, json!([]))?;
    env.until_job(Kind::TerraformMachinePool, "p", Op::Apply, 1).await?;
    Ok(())
}

/// `tree` draws the members the controller counts when it decides on the cluster's deletion, and
/// the objects that only carry the cluster's label apart, saying they do not hold it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_draws_only_verified_members_and_lists_labelled_pools_apart() -> Result<()> {
    let env = Env::new(true).await?;
    cluster_with_members(&env).await?;
    let text = env.captf(&["tree", "tfc/c"]).await?.stdout;
    let (members, apart) = text
        .split_once(&format!("{}:\n", kubectl_captf::tree::UNVERIFIED))
        .unwrap_or_else(|| panic!("no unverified section in\n{text}"));
    assert!(members.contains("└─TerraformMachinePool/p "), "{text}");
    assert!(!members.contains("TerraformMachinePool/s "), "{text}");
    let lines: Vec<&str> = apart.lines().collect();
    assert!(lines[0].starts_with("NAME"), "{text}");
    assert!(lines[1].starts_with("TerraformMachinePool/s "), "{text}");
    assert_eq!(lines.len(), 2, "{text}");
    let json: Value = serde_json::from_str(&env.captf(&["tree", "tfc/c", "-o", "json"]).await?.stdout)?;
    let names = |v: &Value| {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|n| n["name"].as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&json["children"]), ["p"], "{json}");
    assert_eq!(names(&json["unverified"]), ["s"], "{json}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_shows_the_cluster_its_terraformcluster_pools_and_machines_with_their_next_step_and_jobs() -> Result<()> {
    let env = Env::new(true).await?;
    cluster_with_members(&env).await?;

    let text = env.captf(&["tree", "cluster/c"]).await?.stdout;
    // The members; the squatter is drawn apart, after a blank line.
    let lines: Vec<&str> = text.lines().take_while(|l| !l.is_empty()).collect();
    assert_eq!(lines[0], "Namespace: default", "{text}");
    assert!(lines[1].starts_with("NAME"), "{text}");
    let starts = [
        "Cluster/c ",
        "└─TerraformCluster/c ",
        "  └─TerraformMachinePool/p ",
        "    └─TerraformMachine/m ",
    ];
    assert_eq!(lines.len(), 2 + starts.len(), "{text}");
    for (line, start) in lines[2..].iter().zip(starts) {
        assert!(line.starts_with(start), "{start:?} in\n{text}");
    }
    assert!(
        lines[3].contains("wait (Idle)") && lines[3].contains("apply #1 succeeded"),
        "{text}"
    );
    assert!(lines[4].contains("apply #1 running"), "{text}");
    // The same decision `explain` takes for the pool.
    let explained: Value = serde_json::from_str(&env.captf(&["explain", "tfmp/p", "-o", "json"]).await?.stdout)?;
    assert_eq!(explained["reason"], json!("JobActive"), "{explained}");
    assert!(lines[4].contains("wait (JobActive)"), "{text}");

    // From the TerraformCluster: the same tree without the Cluster API Cluster.
    let from_tfc = env.captf(&["tree", "tfc/c", "-o", "wide"]).await?.stdout;
    assert!(
        from_tfc.lines().nth(2).unwrap().starts_with("TerraformCluster/c "),
        "{from_tfc}"
    );
    let pool_job = names::job_name(Kind::TerraformMachinePool, NS, "p", Op::Apply, 1);
    assert!(from_tfc.contains(&pool_job), "wide names the active Job: {from_tfc}");

    // A member names its cluster.
    let e = env.captf(&["tree", "tfmp/p"]).await.unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("kubectl captf tree cluster/c"), "{e}");

    // -o json is the same tree; -o yaml the same document.
    let json: Value = serde_json::from_str(&env.captf(&["tree", "cluster/c", "-o", "json"]).await?.stdout)?;
    assert_eq!(json["kind"], json!("Cluster"));
    assert_eq!(json["ready"], json!("True"));
    let tfc = &json["children"][0];
    assert_eq!((&tfc["kind"], &tfc["name"]), (&json!("TerraformCluster"), &json!("c")));
    assert_eq!(tfc["jobs"][0]["outcome"], json!("succeeded"));
    let pool = &tfc["children"][0];
    assert_eq!(pool["name"], json!("p"));
    assert_eq!(
        pool["jobs"][0],
        json!({"name": pool_job, "op": "apply", "seq": 1, "outcome": "running", "active": true})
    );
    assert_eq!(pool["children"][0]["name"], json!("m"));
    let yaml = env.captf(&["tree", "cluster/c", "-o", "yaml"]).await?.stdout;
    let from_yaml: Value = serde_yaml_ng::from_str(&yaml)?;
    assert_eq!(from_yaml, json, "{yaml}");

    let missing = env.captf(&["tree", "cluster/nope"]).await.unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("\"nope\" not found in namespace \"default\""),
        "{missing}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_is_the_same_document_as_json_for_every_command() -> Result<()> {
    let env = Env::new(true).await?;
    env.sim
        .set_default_script(RunnerScript::realistic_with_outputs(common::outputs()));
    env.applied_cluster("a").await?;
    for args in [
        &["status"][..],
        &["explain", "tfc/a"],
        &["events", "tfc/a"],
        &["plan", "tfc/a"],
    ] {
        let json: Value = serde_json::from_str(&env.captf(&[args, &["-o", "json"]].concat()).await?.stdout)?;
        let yaml = env.captf(&[args, &["-o", "yaml"]].concat()).await?.stdout;
        let from_yaml: Value = serde_yaml_ng::from_str(&yaml)?;
        assert_eq!(from_yaml, json, "{args:?}:\n{yaml}");
        assert!(!yaml.trim_start().starts_with('{'), "{args:?}: YAML, not JSON:\n{yaml}");
    }
    Ok(())
}

/// `status -w`: printed once, then again when what it shows changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn status_watch_prints_again_when_an_object_or_its_job_changes() -> Result<()> {
    let env = Env::new(true).await?;
    env.sim
        .set_default_script(RunnerScript::realistic_with_outputs(common::outputs()));
    env.applied_cluster("a").await?;
    let mut plugin = env.spawn(&["status", "--watch"])?;
    plugin.until_line("the first rendering", |l| l.contains("a ") && l.contains("wait (Idle)"))?;
    env.create_cluster("b")?;
    plugin.until_line("a rendering with b's Job", |l| {
        l.starts_with("TerraformCluster   b ") && l.contains("wait (JobActive)")
    })?;
    env.sim.advance(Duration::from_secs(30));
    plugin.until_line("b idle", |l| {
        l.starts_with("TerraformCluster   b ") && l.contains("wait (Idle)")
    })?;
    // Each rendering is set apart and starts with the header.
    let renderings = plugin.stdout.matches("KIND ").count();
    assert!(renderings >= 3, "{}", plugin.stdout);
    assert!(plugin.stdout.contains("\n\nKIND "), "{}", plugin.stdout);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tree_watch_prints_again_when_a_member_comes_and_its_job_ends() -> Result<()> {
    let env = Env::new(true).await?;
    env.sim
        .set_default_script(RunnerScript::realistic_with_outputs(common::outputs()));
    env.applied_cluster("c").await?;
    let mut plugin = env.spawn(&["tree", "tfc/c", "-w", "-o", "yaml"])?;
    plugin.until_line("the first rendering", |l| l.starts_with("kind: TerraformCluster"))?;
    env.put_kind(
        Kind::TerraformMachinePool,
        "p",
        json!({"cluster.x-k8s.io/cluster-name": "c"}),
        json!([]),
    )?;
    let second = plugin.until_line("the pool", |l| l.trim() == "name: p")?;
    assert!(plugin.stdout.starts_with("---\n"), "YAML documents: {}", plugin.stdout);
    assert!(second.contains("---"), "{second}");
    env.until_job(Kind::TerraformMachinePool, "p", Op::Apply, 1).await?;
    // The pool's Job in a new rendering, running or, on a loaded machine, already ended (a
    // realistic runner may finish between two renderings, so "running" alone can be missed).
    let job = names::job_name(Kind::TerraformMachinePool, NS, "p", Op::Apply, 1);
    plugin.until_line("the pool's Job", |l| l.contains(&job))?;
    Ok(())
}

/// `events -w`: the history once, then only the Events that come.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_watch_prints_the_history_once_then_only_the_events_that_come() -> Result<()> {
    let env = Env::new(true).await?;
    env.sim
        .set_default_script(RunnerScript::realistic_with_outputs(common::outputs()));
    env.applied_cluster("a").await?;
    let mut plugin = env.spawn(&["events", "tfc/a", "-w"])?;
    let first = plugin.until_line("the first rendering", |l| l.contains("Applied"))?;
    let job2 = names::job_name(Kind::TerraformCluster, NS, "a", Op::Apply, 2);
    assert!(!first.contains(&job2), "{first}");
    // New inputs: a second apply starts, and its Event comes.
    let api: kube::Api<captf_shared::types::TerraformCluster> = kube::Api::namespaced(env.sim.client()?, NS);
    api.patch(
        "a",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"spec": {"variables": {"region": "eu-central-1"}}})),
    )
    .await?;
    plugin.until_line("the second apply's Event", |l| l.contains(&job2))?;
    let headers = plugin.stdout.lines().filter(|l| l.starts_with("AGE ")).count();
    let applied = plugin.stdout.lines().filter(|l| l.contains(" Applied ")).count();
    assert_eq!(
        (headers, applied),
        (1, 1),
        "the history is not printed again:\n{}",
        plugin.stdout
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn logs_follow_streams_the_running_runners_log_until_its_container_ends() -> Result<()> {
    let env = Env::new(true).await?;
    env.sim
        .set_default_script(RunnerScript::realistic_with_outputs(common::outputs()));
    env.create_cluster("a")?;
    let job = names::job_name(Kind::TerraformCluster, NS, "a", Op::Apply, 1);
    env.until_job(Kind::TerraformCluster, "a", Op::Apply, 1).await?;
    env.until("the Job's pod", |e| {
        e.sim.pods_of_job(NS, &job).ok().filter(|p| !p.is_empty())
    })
    .await?;
    let mut plugin = env.spawn(&["logs", "tfc/a", "--follow"])?;
    plugin.until_line("the log so far", |l| l.contains(&format!("apply of Job {job}")))?;
    env.sim.advance(Duration::from_secs(30));
    let status = plugin.until_exit()?;
    assert!(status.success(), "{status:?}: {}", plugin.stderr());
    assert!(
        plugin.stdout.contains("captf-runner: result succeeded in phase apply"),
        "{}",
        plugin.stdout
    );
    assert!(
        plugin.stderr().contains(&format!("==> Job {job} (apply, #1)")),
        "{}",
        plugin.stderr()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_object_finishes_its_running_job_starts_no_other_and_starts_again_on_resume() -> Result<()> {
    let env = Env::new(true).await?;
    env.sim
        .set_default_script(RunnerScript::realistic_with_outputs(common::outputs()));
    env.create_cluster("a")?;
    env.until_job(Kind::TerraformCluster, "a", Op::Apply, 1).await?;
    // Once the controller has written what it started (a write meanwhile is a 409: run it again).
    env.until_next_action(Kind::TerraformCluster, "a", "JobActive").await?;

    let said = env.captf(&["suspend", "tfc/a"]).await?.stdout;
    assert!(
        said.starts_with("Suspended TerraformCluster default/a (spec.paused: true)."),
        "{said}"
    );
    assert!(said.contains("running Job, if any, finishes and is booked"), "{said}");
    assert_eq!(env.cluster("a").pointer("/spec/paused"), Some(&json!(true)));
    // The running apply finishes and is booked.
    env.sim.advance(Duration::from_secs(30));
    let job1 = names::job_name(Kind::TerraformCluster, NS, "a", Op::Apply, 1);
    env.until("the apply booked", |e| {
        let j = e.sim.get("batch/jobs", NS, &job1)?;
        (j.pointer("/metadata/annotations/captf.io~1outcome") == Some(&json!("succeeded"))).then_some(())
    })
    .await?;
    // New inputs start nothing while suspended: the controller says so in the status.
    let api: kube::Api<captf_shared::types::TerraformCluster> = kube::Api::namespaced(env.sim.client()?, NS);
    let patched = api
        .patch(
            "a",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"variables": {"region": "eu-central-1"}}})),
        )
        .await?;
    let generation = patched.metadata.generation;
    env.until("the controller's pass over the new inputs", |e| {
        let c = e.cluster("a");
        (c.pointer("/status/observedGeneration").and_then(Value::as_i64) == generation
            && c.pointer("/status/nextAction/reason") == Some(&json!("Paused")))
        .then_some(())
    })
    .await?;
    let job2 = names::job_name(Kind::TerraformCluster, NS, "a", Op::Apply, 2);
    assert!(env.sim.get("batch/jobs", NS, &job2).is_none(), "no Job while suspended");
    let again = env.captf(&["suspend", "tfc/a"]).await?.stdout;
    assert!(again.contains("already suspended"), "{again}");

    let resumed = env.captf(&["resume", "tfc/a", "-o", "json"]).await?.stdout;
    let resumed: Value = serde_json::from_str(&resumed)?;
    assert_eq!(
        (&resumed["paused"], &resumed["written"]),
        (&json!(false), &json!(true)),
        "{resumed}"
    );
    env.until_job(Kind::TerraformCluster, "a", Op::Apply, 2).await?;
    Ok(())
}

/// Without `--now`, the plugin decides at the simulator's time (the simulator answers
/// `/sim/v1/clock`), not at the wall clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_now_the_plugin_decides_at_the_simulators_clock() -> Result<()> {
    let env = Env::new(false).await?;
    env.create_cluster("a")?;
    env.sim.advance(Duration::from_secs(90));
    let e: Value = serde_json::from_str(&env.captf(&["explain", "tfc/a", "-o", "json"]).await?.stdout)?;
    assert_eq!(e["now"], json!(env.sim.now().to_string()));
    // The hidden flag of earlier releases is still accepted and changes nothing.
    let again: Value = serde_json::from_str(
        &env.captf(&["--sim-clock", "explain", "tfc/a", "-o", "json"])
            .await?
            .stdout,
    )?;
    assert_eq!(again["now"], e["now"]);
    Ok(())
}

/// A server that answers every request with `code` and a Kubernetes Status, as a real API server
/// answers a path it does not serve.
async fn status_server(code: u16) -> Result<kube::Client> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                  "message": "the server could not find the requested resource",
                                  "reason": "NotFound", "code": code})
                .to_string();
                let _ = sock
                    .write_all(
                        format!(
                            "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            });
        }
    });
    let config = kube::Config::new(format!("http://{addr}").parse()?);
    Ok(kube::Client::try_from(config)?)
}

#[tokio::test]
async fn a_real_api_servers_404_or_403_for_the_simulators_clock_means_the_wall_clock() -> Result<()> {
    for code in [404, 403] {
        let client = status_server(code).await?;
        let before = k8s_openapi::jiff::Timestamp::now();
        let now = kubectl_captf::clock::server_now(&client).await?;
        let after = k8s_openapi::jiff::Timestamp::now();
        assert!(
            before <= now && now <= after,
            "{code}: {now} not in [{before}, {after}]"
        );
    }
    let broken = status_server(500).await?;
    let e = kubectl_captf::clock::server_now(&broken).await.unwrap_err();
    assert!(e.to_string().contains("clock"), "{e}");
    Ok(())
}

/// Run the built plugin's hidden `__complete` with this kubeconfig.
fn complete(env: &Env, words: &[&str]) -> Result<(Vec<String>, String)> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-captf"))
        .arg("__complete")
        .args(words)
        .env("KUBECONFIG", &env.kubeconfig)
        .output()?;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout)?;
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let directive = lines.pop().unwrap_or_default();
    Ok((lines, directive))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn completion_lists_subcommands_kinds_and_object_names_live_in_cobras_format() -> Result<()> {
    let env = Env::new(false).await?;
    env.create_cluster("prod-eu")?;
    env.create_cluster("prod-us")?;
    env.put_kind(Kind::TerraformMachinePool, "workers", json!({}), json!([]))?;
    env.sim.put(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
        "metadata": {"name": "other-team", "namespace": "team-b"},
        "spec": {"module": {"source": "git::https://example.com/net.git"}},
    }))?;
    let (words, directive) = complete(&env, &[""])?;
    assert_eq!(directive, ":4", "{words:?}");
    assert!(words.iter().any(|w| w.starts_with("tree\t")), "{words:?}");
    assert!(!words.iter().any(|w| w.starts_with("__complete")), "{words:?}");

    let (kinds, d) = complete(&env, &["explain", "tfm"])?;
    assert_eq!(
        (kinds, d.as_str()),
        (vec!["tfmp/".to_string(), "tfm/".to_string()], ":6")
    );
    let (names, d) = complete(&env, &["explain", "tfc/prod"])?;
    assert_eq!(
        (names, d.as_str()),
        (vec!["tfc/prod-eu".to_string(), "tfc/prod-us".to_string()], ":4")
    );
    let (names, _) = complete(&env, &["logs", "terraformmachinepool/"])?;
    assert_eq!(names, ["terraformmachinepool/workers"]);
    let (names, _) = complete(&env, &["-n", "team-b", "suspend", "tfc/"])?;
    assert_eq!(names, ["tfc/other-team"], "the namespace of -n");
    let (names, _) = complete(&env, &["--context", "elsewhere", "tree", "tfc/"])?;
    assert_eq!(names, ["tfc/other-team"], "the namespace of the context");
    let (nss, _) = complete(&env, &["status", "-n", "team"])?;
    assert_eq!(nss, ["team-b"]);
    let (values, _) = complete(&env, &["-o", ""])?;
    assert_eq!(values, ["json", "yaml", "wide"]);

    // Connection flags before the hidden command count as typed.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-captf"))
        .arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .args(["-n", "team-b", "__complete", "explain", "tfc/"])
        .env_remove("KUBECONFIG")
        .output()?;
    assert_eq!(String::from_utf8(out.stdout)?, "tfc/other-team\n:4\n");

    // A server that cannot be reached: cobra's error directive, no candidates.
    let broken = env.dir.path().join("broken");
    std::fs::write(
        &broken,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: x\n  cluster:\n    server: http://127.0.0.1:1\n\
         users:\n- name: me\n  user: {}\ncontexts:\n- name: x\n  context:\n    cluster: x\n    user: me\ncurrent-context: x\n",
    )?;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-captf"))
        .args(["__complete", "explain", "tfc/"])
        .env("KUBECONFIG", &broken)
        .output()?;
    assert_eq!(String::from_utf8(out.stdout)?, ":1\n");
    Ok(())
}

/// kubectl itself runs `kubectl_complete-captf` for `kubectl captf <TAB>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_completes_the_plugins_arguments_through_kubectl_complete_captf() -> Result<()> {
    let tools = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/bin");
    let kubectl = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([tools.clone()])
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file());
    let Some(kubectl) = kubectl else {
        captf_testsupport::cannot_run("kubectl is not installed (scripts/setup-tools.sh installs it into .tools/bin)");
        return Ok(());
    };
    let env = Env::new(false).await?;
    env.create_cluster("prod-eu")?;
    // PATH: the shipped script, the built plugin, and nothing else of the plugin's.
    let script_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_kubectl-captf"))
        .parent()
        .unwrap();
    let path = std::env::join_paths([
        script_dir,
        bin_dir,
        std::path::Path::new("/usr/bin"),
        std::path::Path::new("/bin"),
    ])?;
    let run = |words: &[&str]| -> Result<String> {
        let out = std::process::Command::new(&kubectl)
            .arg("__complete")
            .args(words)
            .env("PATH", &path)
            .env("KUBECONFIG", &env.kubeconfig)
            .output()?;
        Ok(String::from_utf8(out.stdout)?)
    };
    let subcommands = run(&["captf", ""])?;
    assert!(subcommands.lines().any(|l| l.starts_with("tree")), "{subcommands}");
    assert!(subcommands.trim_end().ends_with(":4"), "{subcommands}");
    let names = run(&["captf", "explain", "tfc/"])?;
    assert!(names.lines().any(|l| l == "tfc/prod-eu"), "{names}");
    Ok(())
}

/// `kubectl-captf completion bash` completes object names through the same hidden command.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_bash_completion_script_completes_object_names_through_the_hidden_command() -> Result<()> {
    let Some(bash) = ["/bin/bash", "/usr/bin/bash"]
        .into_iter()
        .find(|b| std::path::Path::new(b).is_file())
    else {
        captf_testsupport::cannot_run("bash is not installed");
        return Ok(());
    };
    let env = Env::new(false).await?;
    env.create_cluster("prod-eu")?;
    env.create_cluster("staging")?;
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_kubectl-captf"));
    let script = env.dir.path().join("completion.bash");
    let out = std::process::Command::new(bin).args(["completion", "bash"]).output()?;
    std::fs::write(&script, &out.stdout)?;
    let path = std::env::join_paths([
        bin.parent().unwrap(),
        std::path::Path::new("/usr/bin"),
        std::path::Path::new("/bin"),
    ])?;
    let complete = |line: &str| -> Result<Vec<String>> {
        let out = std::process::Command::new(bash)
            .arg("-c")
            .arg(format!(
                "source {}; COMP_WORDS=({line}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
                 _kubectl_captf_dynamic; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                script.display()
            ))
            .env("PATH", &path)
            .env("KUBECONFIG", &env.kubeconfig)
            .output()?;
        assert!(out.status.success(), "{out:?}");
        Ok(String::from_utf8(out.stdout)?
            .lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect())
    };
    assert_eq!(complete("kubectl-captf explain tfc/pr")?, ["tfc/prod-eu"]);
    assert_eq!(complete("kubectl-captf explain tfc/")?, ["tfc/prod-eu", "tfc/staging"]);
    assert_eq!(complete("kubectl-captf sus")?, ["suspend"], "descriptions are dropped");
    Ok(())
}

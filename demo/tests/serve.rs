//! `./scripts/demo.sh --serve --no-script`, as the README states it: it writes the kubeconfig,
//! prints the kubectl and `kubectl captf` commands (both work against it), serves the API with the webhook and the controller behind it,
//! and Ctrl-C (SIGINT) stops everything with exit 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use captf_testsupport::without_test_cargo_env;
use clap::Parser;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;

fn wait_line(rx: &mpsc::Receiver<String>, prefix: &str, all: &mut Vec<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no line starting {prefix:?} in:\n{}", all.join("\n")));
        all.push(line.clone());
        if line.trim_start().starts_with(prefix) {
            return line;
        }
    }
}

/// The quick start, as the README's block marked `quick-start` holds it: one command a line.
fn quick_start(root: &Path) -> Vec<String> {
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let after = readme
        .split_once("<!-- quick-start")
        .expect("README.md marks its quick start with <!-- quick-start ... -->")
        .1;
    let block = after.split_once("```sh\n").expect("a ```sh block follows the marker").1;
    let block = block.split_once("```").expect("the block ends").0;
    block
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_plays_the_readmes_quick_start_prints_working_commands_and_ctrl_c_stops_everything() {
    let root = std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap();
    // The README's five lines, played in order from the checkout as a reader would (a second
    // terminal for lines 2-5): the test holds the README to exactly these.
    let lines = quick_start(&root);
    assert_eq!(
        lines,
        [
            "./scripts/demo.sh --serve --no-script",
            "cargo install --path kubectl-captf",
            "export KUBECONFIG=$PWD/captf-demo.kubeconfig",
            "kubectl apply -f examples/terraformcluster-minimal.yaml",
            "kubectl captf status",
        ],
        "the README's quick start changed: play the new lines here"
    );
    // Line 3's kubeconfig is the one line 1 writes in the checkout (ignored by git).
    let kc = root.join(lines[2].trim_start_matches("export KUBECONFIG=$PWD/"));
    let _ = std::fs::remove_file(&kc);
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<&str> = lines[0].split_whitespace().collect();
    let mut child = without_test_cargo_env(&mut Command::new(words[0]))
        .args(&words[1..])
        .current_dir(&root)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run ./scripts/demo.sh --serve --no-script");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut all = Vec::new();
    let webhook = wait_line(&rx, "captf-webhook listening on https://", &mut all);
    let webhook: SocketAddr = webhook
        .trim()
        .trim_start_matches("captf-webhook listening on https://")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let cmd = wait_line(&rx, "kubectl --kubeconfig", &mut all);
    assert_eq!(
        cmd.trim(),
        format!(
            "kubectl --kubeconfig {} get terraformclusters",
            std::fs::canonicalize(&kc).unwrap().display()
        )
    );

    let captf = wait_line(&rx, "kubectl captf --kubeconfig", &mut all);
    // It names the namespace the controller watches and the logs, which exist.
    assert!(
        all.iter().any(|l| l
            .trim()
            .starts_with("the controller watches namespaces default, team-a")),
        "{}",
        all.join("\n")
    );
    for prefix in ["controller log:", "webhook log:"] {
        let line = all
            .iter()
            .find(|l| l.trim().starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} line in:\n{}", all.join("\n")));
        let path = line.trim().trim_start_matches(prefix).trim();
        assert!(Path::new(path).is_file(), "{line}");
    }
    let outcome_line = wait_line(&rx, "choose what an object's next Jobs do", &mut all);
    assert!(outcome_line.contains("sim.captf.io/outcome"), "{outcome_line}");

    // The kubeconfig points at the simulator; a TerraformCluster created through it passes the
    // webhook (defaulted) and the controller starts its Job.
    let text = std::fs::read_to_string(&kc).unwrap();
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .to_string();
    let client = kube::Client::try_from(kube::Config::new(server.parse().unwrap())).unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("infrastructure.cluster.x-k8s.io", "v1beta1", "TerraformCluster"),
        "terraformclusters",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
    // Line 2: the plugin. `cargo install` would build it again in release mode, minutes on a
    // small machine; the workspace's own build of the same binary stands in for it, on a PATH
    // of its own as `cargo install` would put it.
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["cargo", "install", "--path", "kubectl-captf"]
    );
    let built = without_test_cargo_env(&mut Command::new(env!("CARGO")))
        .args(["build", "--quiet", "-p", "kubectl-captf", "--bin", "kubectl-captf"])
        .current_dir(&root)
        .status()
        .unwrap();
    assert!(built.success(), "cargo build -p kubectl-captf");
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), std::path::PathBuf::from);
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(target.join("debug/kubectl-captf"), bin.join("kubectl-captf")).unwrap();
    let kubectl_dir = kubectl_path().parent().unwrap().to_path_buf();
    let path = std::env::join_paths([bin.clone(), kubectl_dir]).unwrap();
    // Lines 4 and 5, with line 3's KUBECONFIG.
    let play = |line: &str| {
        let words: Vec<&str> = line.split_whitespace().collect();
        let out = Command::new(kubectl_path())
            .args(&words[1..])
            .current_dir(&root)
            .env("KUBECONFIG", &kc)
            .env("PATH", &path)
            .env("HOME", dir.path())
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert!(out.status.success(), "{line}: {stderr}");
        stdout
    };
    let applied = play(&lines[3]);
    assert!(
        applied.contains("terraformcluster.infrastructure.cluster.x-k8s.io/demo created"),
        "{applied}"
    );
    let created = api.get("demo").await.unwrap();
    assert_eq!(
        created.data["spec"]["drift"]["interval"], "30m",
        "defaulted by the webhook"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = api.get("demo").await.unwrap();
        if o.data["status"]["activeJob"]
            .as_str()
            .is_some_and(|j| j.starts_with("tc-demo-"))
            || o.data["status"]["conditions"].is_array()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the controller never acted on demo: {:?}",
            o.data
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Line 5: the plugin, run by kubectl, answers with the controller's decision for it.
    let status = play(&lines[4]);
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("TerraformCluster") && l.split_whitespace().nth(1) == Some("demo")),
        "{status}"
    );

    // The samples play their outcomes: `outcome-fail` gets a failed Job, `outcome-block` a
    // destructive plan that waits for approval.
    let tc = Api::<DynamicObject>::namespaced_with(
        kube::Client::try_from(kube::Config::new(server.parse().unwrap())).unwrap(),
        "default",
        &ar,
    );
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(
        kube::Client::try_from(kube::Config::new(server.parse().unwrap())).unwrap(),
        "default",
    );
    let fail_id = captf_shared::names::object_id(captf_shared::Kind::TerraformCluster, "default", "outcome-fail");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let listed = jobs
            .list(&kube::api::ListParams::default().labels(&format!("captf.io/object={fail_id}")))
            .await
            .unwrap();
        let failed = listed.items.iter().any(|j| {
            j.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Failed" && c.status == "True"))
        });
        if failed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "outcome-fail never got a failed Job: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let o = tc.get("outcome-block").await.unwrap();
        if o.data["status"]["nextAction"]["reason"] == "AwaitingApproval" {
            assert!(
                o.data["status"]["pendingPlan"]["hash"]
                    .as_str()
                    .is_some_and(|h| !h.is_empty()),
                "{:?}",
                o.data
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "outcome-block never waited for approval: {:?}",
            o.data["status"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Every example applied with the real kubectl, as the README invites: each CAPTF object in
    // it is admitted and acted on, as its comment says.
    let client = kube::Client::try_from(kube::Config::new(server.parse().unwrap())).unwrap();
    every_example_is_admitted_and_acted_on(&kc, dir.path(), &client).await;
    // An object where no controller watches is stored with a warning kubectl prints.
    let kubectl = |args: &[&str], stdin: Option<&str>| {
        let mut child = Command::new(kubectl_path())
            .arg("--kubeconfig")
            .arg(&kc)
            .args(args)
            .env("HOME", dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        std::io::Write::write_all(&mut input, stdin.unwrap_or_default().as_bytes()).unwrap();
        drop(input);
        child.wait_with_output().unwrap()
    };
    assert!(kubectl(&["create", "namespace", "team-z"], None).status.success());
    let applied = kubectl(
        &["apply", "-f", "-"],
        Some(
            "apiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: TerraformCluster\nmetadata: {name: elsewhere, namespace: team-z}\nspec: {module: {source: \"git::https://example.com/m.git\"}}\n",
        ),
    );
    let stderr = String::from_utf8_lossy(&applied.stderr);
    assert!(applied.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: no CAPTF controller watches namespace \"team-z\" (it watches default, team-a)"),
        "{stderr}"
    );

    // The webhook and the controller read one runner policy: the controller's default image is
    // admitted and run, and an image outside the policy is refused by the webhook at once
    // (before, the webhook allowed only the released tag and the controller only the demo's).
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let with_image = |name: &str, image: &str| -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "TerraformCluster",
            "metadata": { "name": name },
            "spec": { "module": { "source": "git::https://example.com/m.git" }, "jobs": { "image": image } },
        }))
        .unwrap()
    };
    api.create(
        &PostParams::default(),
        &with_image("image-demo", "ghcr.io/captf/runner:demo"),
    )
    .await
    .unwrap();
    let refused = api
        .create(
            &PostParams::default(),
            &with_image("image-other", "example.com/runner:1"),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("outside the runner image policy"), "{refused}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = serde_json::to_value(api.get("image-demo").await.unwrap()).unwrap();
        match acted_on("TerraformCluster", &o) {
            Some(Ok(())) => break,
            Some(Err(why)) => panic!("image-demo: {why}"),
            None => assert!(Instant::now() < deadline, "image-demo never applied: {}", o["status"]),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The printed `kubectl captf` command works against it: the plugin's status shows the object.
    let words: Vec<&str> = captf.split("   (").next().unwrap().split_whitespace().skip(2).collect();
    let cli = kubectl_captf::cli::Cli::try_parse_from(std::iter::once("kubectl-captf").chain(words)).unwrap();
    let conn = kubectl_captf::connect(&cli).await.unwrap();
    let status = kubectl_captf::run(&cli, &conn).await.unwrap();
    assert!(
        status
            .stdout
            .lines()
            .any(|l| l.contains("TerraformCluster") && l.contains(" demo ")),
        "{}",
        status.stdout
    );

    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let signalled = Instant::now();
    let deadline = signalled + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= deadline {
            // What it printed since, to say where the stop hangs.
            while let Ok(l) = rx.try_recv() {
                all.push(l);
            }
            let _ = child.kill();
            panic!(
                "captf-demo did not stop within 30 s of SIGINT; it printed:\n{}",
                all.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    println!("captf-demo stopped {:?} after SIGINT", signalled.elapsed());
    assert!(status.success(), "{status:?}");
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(2)) {
        all.push(l);
    }
    assert!(all.iter().any(|l| l.contains("== stopping")), "{}", all.join("\n"));
    assert!(
        TcpStream::connect_timeout(&webhook, Duration::from_millis(500)).is_err(),
        "the webhook child still listens after Ctrl-C"
    );
}

/// `kubectl` from `$CAPTF_TOOLS_BIN`, else `<workspace>/.tools/bin`.
fn kubectl_path() -> std::path::PathBuf {
    captf_testsupport::installed_tool("kubectl").unwrap_or_else(|e| panic!("{e}"))
}

/// Kinds the playground serves no API for (it has no Cluster API): `kubectl apply` creates the
/// rest of the file and fails on them, as the example's comment says.
const UNSERVED_KINDS: [&str; 1] = ["ClusterClass"];

/// What the controller does with an example's object in the playground, from its Ready
/// condition: `Some(true)` once it is applied; a TerraformMachine outside Cluster API waits for
/// its Machine's bootstrap data, which the example's comment says; `None` not yet decided.
fn acted_on(kind: &str, o: &serde_json::Value) -> Option<Result<(), String>> {
    let conditions = o["status"]["conditions"].as_array()?;
    let ready = conditions.iter().find(|c| c["type"] == "Ready")?;
    let (status, reason) = (ready["status"].as_str()?, ready["reason"].as_str()?);
    let message = ready["message"].as_str().unwrap_or_default();
    match (kind, status, reason) {
        (_, _, "PolicyViolation") => Some(Err(format!("held by the policy: {message}"))),
        ("TerraformMachine", "False", "InputsUnresolved") if message.contains("Cluster API Machine") => Some(Ok(())),
        (_, "True", _) => Some(Ok(())),
        _ => None,
    }
}

async fn every_example_is_admitted_and_acted_on(kubeconfig: &Path, home: &Path, client: &kube::Client) {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files: Vec<_> = std::fs::read_dir(&examples)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 9, "{files:?}");
    let mut waiting = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let mut docs: Vec<serde_json::Value> = Vec::new();
        let mut doc = String::new();
        for line in text.lines().chain(std::iter::once("---")) {
            if line == "---" {
                let v: serde_json::Value = serde_yaml_ng::from_str(&doc).unwrap();
                if !v.is_null() {
                    docs.push(v);
                }
                doc.clear();
            } else {
                doc.push_str(line);
                doc.push('\n');
            }
        }
        let unserved: Vec<&serde_json::Value> = docs
            .iter()
            .filter(|d| UNSERVED_KINDS.contains(&d["kind"].as_str().unwrap_or_default()))
            .collect();
        let out = Command::new(kubectl_path())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["apply", "-f"])
            .arg(file)
            .env("HOME", home)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.success(),
            unserved.is_empty(),
            "kubectl apply -f {}: {stderr}",
            file.display()
        );
        assert!(
            !stderr.contains("denied the request"),
            "{}: the webhook refused: {stderr}",
            file.display()
        );
        if !unserved.is_empty() {
            let comment: String = text.lines().take_while(|l| l.starts_with('#')).collect();
            assert!(
                comment.contains("playground") && comment.contains("ClusterClass"),
                "{}'s comment says the playground refuses its ClusterClass",
                file.display()
            );
        }
        for d in &docs {
            let (Some(kind), Some(name)) = (d["kind"].as_str(), d["metadata"]["name"].as_str()) else {
                continue;
            };
            if !d["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("infrastructure.cluster.x-k8s.io/"))
            {
                continue;
            }
            let namespace = d["metadata"]["namespace"].as_str().unwrap_or("default");
            let ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("infrastructure.cluster.x-k8s.io", "v1beta1", kind),
                &format!("{}s", kind.to_lowercase()),
            );
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
            let created = api.get_opt(name).await.unwrap();
            assert!(
                created.is_some(),
                "{kind} {namespace}/{name} of {} exists",
                file.display()
            );
            if !kind.ends_with("Template") {
                waiting.push((file.clone(), kind.to_string(), api, name.to_string()));
            }
        }
    }
    // The controller acts on every object (templates are only admitted).
    let deadline = Instant::now() + Duration::from_secs(180);
    for (file, kind, api, name) in waiting {
        loop {
            let o = api.get(&name).await.unwrap();
            let data = serde_json::to_value(&o).unwrap();
            match acted_on(&kind, &data) {
                Some(Ok(())) => break,
                Some(Err(why)) => panic!("{kind} {name} of {}: {why}", file.display()),
                None => {}
            }
            assert!(
                Instant::now() < deadline,
                "the controller never acted on {kind} {name} of {}: {}",
                file.display(),
                data["status"]
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

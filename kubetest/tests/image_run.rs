//! The process kubelet's image mode: a pod whose image is an OCI archive of the release
//! (`scripts/release.sh`, built once by `captf_release_tests::release_dist`) runs the image's own
//! entrypoint inside its unpacked root filesystem, as the image's user, read-only but for its
//! volumes; an image that cannot start its program fails the pod with the reason.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use captf_sim::process_kubelet::namespaces_unavailable;
use captf_sim::{ProcessImage, Sim};
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(120);

fn job(name: &str, image: &str, command: Option<&[&str]>) -> Value {
    let mut container = json!({"name": "main", "image": image,
        "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "readOnlyRootFilesystem": true,
            "allowPrivilegeEscalation": false},
        "volumeMounts": [{"name": "work", "mountPath": "/work"}, {"name": "tmp", "mountPath": "/tmp"}]});
    if let Some(c) = command {
        container["command"] = json!(c);
    }
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never", "serviceAccountName": "worker", "automountServiceAccountToken": false,
            "containers": [container],
            "volumes": [{"name": "work", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}]}}}
    })
}

fn pod_of(sim: &Sim, job: &str) -> Value {
    serde_json::to_value(&sim.pods_of_job("default", job).unwrap()[0]).unwrap()
}

async fn until_terminated(sim: &Sim, job: &str) -> (Value, String) {
    let start = Instant::now();
    loop {
        let pod = pod_of(sim, job);
        if let Some(t) = pod.pointer("/status/containerStatuses/0/state/terminated") {
            let name = pod["metadata"]["name"].as_str().unwrap().to_string();
            let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
                kube::Api::namespaced(sim.client().unwrap(), "default");
            let log = pods.logs(&name, &Default::default()).await.unwrap_or_default();
            return (t.clone(), log);
        }
        assert!(start.elapsed() < PATIENCE, "the pod of {job} never terminated");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_image_runs_inside_its_own_root_and_a_broken_image_fails_its_pod() {
    if let Some(why) = namespaces_unavailable() {
        captf_testsupport::cannot_run(format!("{why}; the image mode needs root for mounts"));
        return;
    }
    let (dist, built) = match captf_release_tests::release_dist() {
        Ok(d) => d,
        Err(why) => {
            captf_testsupport::cannot_run(why);
            return;
        }
    };
    eprintln!("release at {} (built now: {built})", dist.display());
    let version = captf_release_tests::workspace_version();
    let root = tempfile::tempdir().unwrap();
    let sim = Sim::builder()
        .start_time("2026-03-01T10:00:00Z".parse().unwrap())
        .process_image(
            "runner:release",
            ProcessImage::oci(dist.join("images/runner.oci.tar"), &version),
        )
        .process_image(
            "webhook:release",
            ProcessImage::oci(dist.join("images/webhook.oci.tar"), &version),
        )
        .process_root(root.path())
        .start()
        .await
        .unwrap();
    sim.put(
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "worker", "namespace": "default"}}),
    )
    .unwrap();

    // tofu of the image, in its root, as 65532, with the image's environment.
    sim.put(job("tofu", "runner:release", Some(&["tofu", "version"])))
        .unwrap();
    let (t, log) = until_terminated(&sim, "tofu").await;
    assert_eq!(t["exitCode"], 0, "{t}\n{log}");
    assert!(log.contains("OpenTofu v"), "{log}");
    sim.put(job("who", "runner:release", Some(&["git", "--version"])))
        .unwrap();
    let (t, log) = until_terminated(&sim, "who").await;
    assert_eq!(t["exitCode"], 0, "{t}\n{log}");
    assert!(log.contains("git version"), "{log}");

    // The image's own entrypoint: the runner, which reports that it was given no operation.
    sim.put(job("entry", "runner:release", None)).unwrap();
    let (t, log) = until_terminated(&sim, "entry").await;
    assert_ne!(t["exitCode"], 0, "{t}\n{log}");
    let said = format!("{} {log}", t["message"]);
    assert!(said.contains("CAPTF_OP is not set"), "{said}");

    // An image whose program is not in it: the pod fails with the reason.
    sim.put(job("broken", "webhook:release", Some(&["/usr/local/bin/tofu"])))
        .unwrap();
    let (t, _) = until_terminated(&sim, "broken").await;
    assert_eq!(t["reason"], "ContainerCannotRun", "{t}");
    assert!(
        t["message"]
            .as_str()
            .unwrap_or_default()
            .contains("/usr/local/bin/tofu is not an executable file in image"),
        "{t}"
    );
}

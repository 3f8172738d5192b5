//! The `captf-sim` binary: serves the API, writes a kubeconfig, and moves its clock on request.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};

#[tokio::test]
async fn the_binary_serves_the_api_through_the_kubeconfig_it_writes() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_captf-sim"))
        .args(["--speed", "0", "--kubeconfig"])
        .arg(&kc)
        .kill_on_drop(true)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut waited = 0;
    while !kc.exists() {
        assert!(waited < 200, "the simulator wrote no kubeconfig");
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += 1;
    }
    let kubeconfig = kube::config::Kubeconfig::read_from(&kc).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| n.metadata.name.unwrap())
        .collect();
    assert!(names.contains(&"default".to_string()), "{names:?}");
    let before = captf_sim::clock::remote_now(&client).await.unwrap();
    let req = http::Request::post("/sim/v1/clock/advance?by=5m")
        .body(Vec::new())
        .unwrap();
    client.request_text(req).await.unwrap();
    let after = captf_sim::clock::remote_now(&client).await.unwrap();
    assert_eq!(after.as_second() - before.as_second(), 300);
    child.kill().await.unwrap();
}

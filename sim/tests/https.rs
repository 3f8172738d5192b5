//! The HTTPS port: the same API behind TLS with the simulator's own CA.

#![allow(clippy::unwrap_used)]

use captf_sim::Sim;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

fn client_trusting(url: &str, ca_pem: &str) -> kube::Client {
    let mut config = kube::Config::new(url.parse().unwrap());
    config.root_cert = Some(
        CertificateDer::pem_slice_iter(ca_pem.as_bytes())
            .map(|c| c.unwrap().to_vec())
            .collect(),
    );
    config.auth_info.token = Some("captf-sim".to_string().into());
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn https_port_serves_the_api_to_a_client_that_trusts_only_its_ca() {
    let sim = Sim::builder().https().start().await.unwrap();
    let https = sim.https().unwrap();
    assert_ne!(https.addr, sim.addr());
    let client = client_trusting(&https.url(), &https.ca_pem);
    let names: Vec<String> = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(names.contains(&"default".to_string()), "{names:?}");
}

#[tokio::test]
async fn https_port_is_refused_by_a_client_that_trusts_another_ca() {
    let sim = Sim::builder().https().start().await.unwrap();
    let other = Sim::builder().https().start().await.unwrap();
    let client = client_trusting(&sim.https().unwrap().url(), &other.https().unwrap().ca_pem);
    let err = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(format!("{err:?}").to_lowercase().contains("certificate"), "{err:?}");
}

#[tokio::test]
async fn service_account_files_hold_the_token_ca_and_namespace() {
    let sim = Sim::builder().https().start().await.unwrap();
    let https = sim.https().unwrap();
    let dir = tempfile::tempdir().unwrap();
    https.write_service_account_files(dir.path(), "team-a", "tok").unwrap();
    assert_eq!(std::fs::read_to_string(dir.path().join("token")).unwrap(), "tok");
    assert_eq!(std::fs::read_to_string(dir.path().join("namespace")).unwrap(), "team-a");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ca.crt")).unwrap(),
        https.ca_pem
    );
    let env = https.service_env();
    assert_eq!(env[0], ("KUBERNETES_SERVICE_HOST", "127.0.0.1".to_string()));
    assert_eq!(env[1].1, https.addr.port().to_string());
}

#[tokio::test]
async fn a_simulator_without_https_has_no_https_port() {
    let sim = Sim::start().await.unwrap();
    assert!(sim.https().is_none());
}

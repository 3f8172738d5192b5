//! The outputs Secret `captf-outputs-<suffix>` (docs/api.md, docs/runner.md), written with server-side
//! apply by field manager [`FIELD_MANAGER`]. The document goes under the key
//! [`crate::outputs::OUTPUTS_KEY`]; sensitive values are in it with their `sensitive` flags.
//!
//! The client is built on first use, so a run without outputs never needs the API server
//! (nor RBAC for this Secret).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use captf_shared::protocol::{KeptPlan, PLAN_KEY, PLAN_TEXT_KEY};

use crate::outputs::{OUTPUTS_KEY, OutputsError, OutputsStore, PUBLIC_OUTPUTS_KEY};

/// The field manager of the runner's server-side apply.
pub const FIELD_MANAGER: &str = "captf-runner";

/// Writes the outputs document to a Secret through the Kubernetes API.
#[derive(Clone)]
pub struct SecretStore {
    namespace: String,
    name: String,
    /// None: infer (in-cluster service account, else kubeconfig) on first use.
    config: Option<kube::Config>,
}

impl SecretStore {
    /// The store a Job uses: configuration from the pod's service account.
    pub fn inferred(namespace: &str, name: &str) -> SecretStore {
        SecretStore {
            namespace: namespace.to_string(),
            name: name.to_string(),
            config: None,
        }
    }

    /// A store with an explicit client configuration (tests, local runs).
    pub fn with_config(namespace: &str, name: &str, config: kube::Config) -> SecretStore {
        SecretStore {
            namespace: namespace.to_string(),
            name: name.to_string(),
            config: Some(config),
        }
    }

    /// The Secret as applied: only the fields the runner owns.
    pub fn desired(&self, document: &[u8], public: &[u8]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".to_string()),
            data: Some(BTreeMap::from([
                (OUTPUTS_KEY.to_string(), ByteString(document.to_vec())),
                (PUBLIC_OUTPUTS_KEY.to_string(), ByteString(public.to_vec())),
            ])),
            ..Secret::default()
        }
    }

    fn error(&self, why: impl std::fmt::Display) -> OutputsError {
        OutputsError::Write {
            target: self.describe(),
            why: why.to_string(),
        }
    }
}

impl OutputsStore for SecretStore {
    async fn store(&self, document: &[u8], public: &[u8]) -> Result<(), OutputsError> {
        let api = self.api().await?;
        let params = PatchParams::apply(FIELD_MANAGER).force();
        api.patch(&self.name, &params, &Patch::Apply(&self.desired(document, public)))
            .await
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    async fn store_plan(&self, plan: &KeptPlan, text: &[u8]) -> Result<(), OutputsError> {
        let record = serde_json::to_vec(plan).map_err(|e| self.error(e))?;
        self.merge_data(serde_json::json!({
            PLAN_KEY: ByteString(record),
            PLAN_TEXT_KEY: ByteString(text.to_vec()),
        }))
        .await
    }

    async fn clear_plan(&self) -> Result<(), OutputsError> {
        let api = self.api().await?;
        let patch = serde_json::json!({"data": {PLAN_KEY: null, PLAN_TEXT_KEY: null}});
        match api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            // No outputs Secret yet (a first apply): nothing was kept.
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(self.error(e)),
        }
    }

    fn describe(&self) -> String {
        format!("Secret {}/{}", self.namespace, self.name)
    }
}

impl SecretStore {
    async fn api(&self) -> Result<Api<Secret>, OutputsError> {
        let config = match &self.config {
            Some(c) => c.clone(),
            None => kube::Config::infer().await.map_err(|e| self.error(e))?,
        };
        let client = Client::try_from(config).map_err(|e| self.error(e))?;
        Ok(Api::namespaced(client, &self.namespace))
    }

    /// A JSON merge patch of `data` (base64 values; `null` removes a key): the plan keys are
    /// set and removed beside the outputs, which are the server-side apply's.
    async fn merge_data(&self, data: serde_json::Value) -> Result<(), OutputsError> {
        let api = self.api().await?;
        let patch = serde_json::json!({"data": data});
        api.patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| self.error(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// What the fake API server saw.
    struct Seen {
        head: String,
        body: Vec<u8>,
    }

    /// Serve exactly one HTTP/1.1 request with the given status and JSON body.
    async fn one_request_server(status: &'static str, reply: String) -> (String, tokio::task::JoinHandle<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let head_end = loop {
                let n = sock.read(&mut chunk).await.unwrap();
                assert!(n > 0, "connection closed before the request head");
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            while buf.len() < head_end + len {
                let n = sock.read(&mut chunk).await.unwrap();
                assert!(n > 0);
                buf.extend_from_slice(&chunk[..n]);
            }
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                reply.len()
            );
            sock.write_all(response.as_bytes()).await.unwrap();
            sock.shutdown().await.unwrap();
            Seen {
                head,
                body: buf[head_end..head_end + len].to_vec(),
            }
        });
        (url, task)
    }

    fn store_for(url: &str) -> SecretStore {
        let config = kube::Config::new(url.parse().unwrap());
        SecretStore::with_config("team-a", "captf-outputs-prod-eu-tc", config)
    }

    #[tokio::test]
    async fn outputs_are_server_side_applied_to_the_outputs_secret() {
        let store = store_for("http://127.0.0.1:1");
        let reply = serde_json::to_string(&store.desired(b"{}", b"{}")).unwrap();
        let (url, server) = one_request_server("200 OK", reply).await;
        let store = store_for(&url);
        let doc = br#"{"token":{"sensitive":true,"type":"string","value":"s3cr3t"}}"#;
        store.store(doc, br#"{"endpoint":"10.0.0.1"}"#).await.unwrap();
        let seen = server.await.unwrap();
        let request_line = seen.head.lines().next().unwrap();
        assert!(
            request_line.starts_with("PATCH /api/v1/namespaces/team-a/secrets/captf-outputs-prod-eu-tc?"),
            "{request_line}"
        );
        assert!(request_line.contains("fieldManager=captf-runner"), "{request_line}");
        assert!(request_line.contains("force=true"), "{request_line}");
        assert!(
            seen.head
                .to_ascii_lowercase()
                .contains("content-type: application/apply-patch+yaml"),
            "{}",
            seen.head
        );
        let body: Secret = serde_json::from_slice(&seen.body).unwrap();
        assert_eq!(body.metadata.name.as_deref(), Some("captf-outputs-prod-eu-tc"));
        let data = body.data.unwrap();
        assert_eq!(data[OUTPUTS_KEY].0, doc.to_vec());
        assert_eq!(data[PUBLIC_OUTPUTS_KEY].0, br#"{"endpoint":"10.0.0.1"}"#.to_vec());
        // On the wire the value is base64, as Secret data is.
        assert!(!String::from_utf8_lossy(&seen.body).contains("s3cr3t"));
    }

    #[tokio::test]
    async fn a_kept_plan_is_merged_beside_the_outputs_and_removed_by_null() {
        let store = store_for("http://127.0.0.1:1");
        let reply = serde_json::to_string(&store.desired(b"{}", b"{}")).unwrap();
        let plan = KeptPlan {
            hash: "3f2a".into(),
            summary: captf_shared::protocol::PlanSummary {
                destroy: 1,
                ..Default::default()
            },
            changes: vec![captf_shared::protocol::PlannedChange {
                address: "null_resource.a".into(),
                actions: vec!["delete".into()],
            }],
            more: 0,
            truncated: false,
            policy_warnings: vec![],
        };
        let (url, server) = one_request_server("200 OK", reply.clone()).await;
        store_for(&url)
            .store_plan(&plan, b"# null_resource.a will be destroyed\n")
            .await
            .unwrap();
        let seen = server.await.unwrap();
        assert!(
            seen.head
                .starts_with("PATCH /api/v1/namespaces/team-a/secrets/captf-outputs-prod-eu-tc"),
            "{}",
            seen.head
        );
        assert!(
            seen.head
                .to_ascii_lowercase()
                .contains("content-type: application/merge-patch+json"),
            "{}",
            seen.head
        );
        let body: serde_json::Value = serde_json::from_slice(&seen.body).unwrap();
        let data = body["data"].as_object().unwrap();
        assert_eq!(data.len(), 2, "only the plan's keys: the outputs stay as they are");
        let record: ByteString = serde_json::from_value(data[PLAN_KEY].clone()).unwrap();
        assert_eq!(serde_json::from_slice::<KeptPlan>(&record.0).unwrap(), plan);
        let text: ByteString = serde_json::from_value(data[PLAN_TEXT_KEY].clone()).unwrap();
        assert_eq!(text.0, b"# null_resource.a will be destroyed\n");

        let (url, server) = one_request_server("200 OK", reply).await;
        store_for(&url).clear_plan().await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&server.await.unwrap().body).unwrap();
        assert_eq!(body, serde_json::json!({"data": {PLAN_KEY: null, PLAN_TEXT_KEY: null}}));
    }

    #[tokio::test]
    async fn removing_a_kept_plan_before_any_outputs_secret_exists_is_not_an_error() {
        let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "secrets \"captf-outputs-prod-eu-tc\" not found", "reason": "NotFound", "code": 404});
        let (url, server) = one_request_server("404 Not Found", status.to_string()).await;
        store_for(&url).clear_plan().await.unwrap();
        server.await.unwrap();
        // Any other refusal still is one.
        let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "forbidden", "reason": "Forbidden", "code": 403});
        let (url, server) = one_request_server("403 Forbidden", status.to_string()).await;
        assert!(store_for(&url).clear_plan().await.is_err());
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_refused_write_names_the_secret_and_the_reason() {
        let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "secrets \"captf-outputs-prod-eu-tc\" is forbidden: User \"system:serviceaccount:team-a:captf-runner\" cannot patch resource \"secrets\"",
            "reason": "Forbidden", "code": 403});
        let (url, server) = one_request_server("403 Forbidden", status.to_string()).await;
        let err = store_for(&url).store(b"{}", b"{}").await.unwrap_err().to_string();
        server.await.unwrap();
        assert!(
            err.starts_with("failed to write outputs to Secret team-a/captf-outputs-prod-eu-tc: "),
            "{err}"
        );
        assert!(err.contains("forbidden"), "{err}");
    }
}

//! The real webhook for tests on either backend: the workspace's `captf-webhook` on a free
//! loopback port, with a certificate for 127.0.0.1, registered as the chart registers it.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::BufRead;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::json;

/// A workspace binary beside this test's executable (`cargo test --workspace` builds them).
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe.parent().and_then(Path::parent).unwrap().join(name);
    assert!(
        path.is_file(),
        "{name} not found at {}: build it with `cargo build -p {name}` (cargo test --workspace does)",
        path.display()
    );
    path
}

/// The real webhook on a free loopback port with a certificate for 127.0.0.1; its CA (PEM).
/// Killed when dropped.
pub struct Webhook {
    child: std::process::Child,
    pub url: String,
    pub ca: Vec<u8>,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start_webhook(dir: &Path) -> Webhook {
    start_webhook_with(dir, &[], &[])
}

/// [`start_webhook`] with more flags and environment (e.g. `--authorize-approvals=true` and the
/// `KUBECONFIG` of the account it asks the API server with).
pub fn start_webhook_with(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> Webhook {
    let certs = dir.join("webhook-certs");
    let made = std::process::Command::new(binary("captf-webhook"))
        .args(["dev-certs", "--ip", "127.0.0.1", "--out-dir"])
        .arg(&certs)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let mut child = std::process::Command::new(binary("captf-webhook"))
        .args([
            "--addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
            "--tls-cert-file",
        ])
        .arg(certs.join("tls.crt"))
        .arg("--tls-key-file")
        .arg(certs.join("tls.key"))
        .args(args)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(dir.join("webhook.log")).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().trim_start_matches("listening on https://").to_string();
    assert!(addr.starts_with("127.0.0.1:"), "the webhook said {line:?}");
    Webhook {
        child,
        url: format!("https://{addr}"),
        ca: std::fs::read(certs.join("ca.crt")).unwrap(),
    }
}

/// The chart's two webhook configurations, calling `url` directly instead of the Service.
pub async fn register(client: &kube::Client, hook: &Webhook) {
    let rules = json!([{
        "apiGroups": ["infrastructure.cluster.x-k8s.io"],
        "apiVersions": ["*"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["terraformclusters", "terraformmachinepools", "terraformmachines",
                      "terraformclustertemplates", "terraformmachinepooltemplates", "terraformmachinetemplates"],
    }]);
    let ca = base64::engine::general_purpose::STANDARD.encode(&hook.ca);
    let hook_of = |name: &str, path: &str| {
        json!({
            "name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "matchPolicy": "Equivalent", "timeoutSeconds": 5,
            "clientConfig": {"url": format!("{}{path}", hook.url), "caBundle": ca},
            "rules": rules,
        })
    };
    for (kind, plural, name, path) in [
        (
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
            "default.infrastructure.cluster.x-k8s.io",
            "/mutate",
        ),
        (
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
            "validate.infrastructure.cluster.x-k8s.io",
            "/validate",
        ),
    ] {
        let ar = ApiResource {
            group: "admissionregistration.k8s.io".into(),
            version: "v1".into(),
            api_version: "admissionregistration.k8s.io/v1".into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": "captf"}, "webhooks": [hook_of(name, path)],
        }))
        .unwrap();
        Api::<DynamicObject>::all_with(client.clone(), &ar)
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
    }
}

impl Webhook {
    /// The webhook process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stop it now (a webhook that is registered but unreachable).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

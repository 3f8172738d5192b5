//! Kubeconfig files: one cluster, one user, one context, everything embedded.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

/// How the kubeconfig's user authenticates.
#[derive(Clone, Debug)]
pub enum Credentials<'a> {
    ClientCert { cert_pem: &'a str, key_pem: &'a str },
    Token(&'a str),
}

/// A kubeconfig (YAML) for `user` at `server`, trusting `ca_pem`, in `namespace`.
pub fn render(
    server: &str,
    ca_pem: &str,
    user: &str,
    credentials: &Credentials<'_>,
    namespace: &str,
) -> Result<String, serde_yaml_ng::Error> {
    let user_entry: Value = match credentials {
        Credentials::ClientCert { cert_pem, key_pem } => json!({
            "client-certificate-data": STANDARD.encode(cert_pem),
            "client-key-data": STANDARD.encode(key_pem),
        }),
        Credentials::Token(token) => json!({ "token": token }),
    };
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "kubetest",
            "cluster": { "server": server, "certificate-authority-data": STANDARD.encode(ca_pem) },
        }],
        "users": [{ "name": user, "user": user_entry }],
        "contexts": [{
            "name": user,
            "context": { "cluster": "kubetest", "user": user, "namespace": namespace },
        }],
        "current-context": user,
    });
    serde_yaml_ng::to_string(&doc)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_token_kubeconfig_reads_back_with_its_server_token_and_namespace() {
        let text = render(
            "https://127.0.0.1:6443",
            "CA",
            "system:serviceaccount:ns:sa",
            &Credentials::Token("tok"),
            "ns",
        )
        .unwrap();
        let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(
            cluster.certificate_authority_data.as_deref(),
            Some(STANDARD.encode("CA").as_str())
        );
        let ctx = kc.contexts[0].context.as_ref().unwrap();
        assert_eq!(ctx.namespace.as_deref(), Some("ns"));
        assert_eq!(kc.current_context.as_deref(), Some("system:serviceaccount:ns:sa"));
        assert!(text.contains("token: tok"), "{text}");
    }

    #[test]
    fn a_client_certificate_kubeconfig_embeds_the_certificate_and_key() {
        let text = render(
            "https://127.0.0.1:1",
            "CA",
            "admin",
            &Credentials::ClientCert {
                cert_pem: "CERT",
                key_pem: "KEY",
            },
            "default",
        )
        .unwrap();
        let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(
            user.client_certificate_data.as_deref(),
            Some(STANDARD.encode("CERT").as_str())
        );
        assert!(user.client_key_data.is_some());
        assert!(user.token.is_none());
    }
}

//! The annotations `approve`, `refresh` and `reconcile` write, and who writes them.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use captf_read::kinds::api_resource;
use captf_read::live::LiveRead;
use captf_shared::keys;

use crate::conn::Conn;
use crate::errors::{PluginError, from_kube};

/// Write annotations on the object, only if it is still the version that was read (a 409: it
/// changed meanwhile, and what was shown may be out of date).
pub(crate) async fn annotate_all(
    conn: &Conn,
    r: &LiveRead,
    pairs: &[(&str, &str)],
) -> Result<DynamicObject, PluginError> {
    let ns = r.id.namespace.as_str();
    let api: Api<DynamicObject> = Api::namespaced_with(conn.client.clone(), ns, &api_resource(r.id.kind));
    let annotations: serde_json::Map<String, Value> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect();
    let patch = json!({"metadata": {
        "resourceVersion": r.object.metadata().resource_version,
        "annotations": annotations,
    }});
    match api
        .patch(&r.id.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(written) => Ok(written),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(PluginError::Refused(format!(
            "{} changed while this command ran; nothing was written. Run it again to see the current state.",
            r.id.what()
        ))),
        Err(err) => Err(from_kube(
            err,
            &format!("annotate {}", r.id.what()),
            ("patch", r.id.kind.plural(), keys::GROUP),
            Some(ns),
        )),
    }
}

/// Write one annotation (see [`annotate_all`]).
pub(crate) async fn annotate(conn: &Conn, r: &LiveRead, key: &str, value: &str) -> Result<(), PluginError> {
    annotate_all(conn, r, &[(key, value)]).await.map(drop)
}

/// The value of `key` the API server stored (an admission webhook may have replaced the one
/// written), else what was written.
pub(crate) fn stored(written: &DynamicObject, key: &str, sent: String) -> String {
    written
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
        .unwrap_or(sent)
}

/// Who this user is, as the API server authenticates it (SelfSubjectReview); else the
/// kubeconfig's user entry, marked as such.
pub(crate) async fn whoami(conn: &Conn) -> String {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api: Api<SelfSubjectReview> = Api::all(conn.client.clone());
    let review = SelfSubjectReview::default();
    if let Ok(r) = api.create(&kube::api::PostParams::default(), &review).await
        && let Some(name) = r.status.and_then(|s| s.user_info).and_then(|u| u.username)
        && !name.is_empty()
    {
        return name;
    }
    match &conn.user {
        Some(u) => format!("{u} (kubeconfig user)"),
        None => "unknown (kubeconfig user)".to_string(),
    }
}

//! The durable inputs Secret `captf-inputs-<suffix>` (docs/api.md): written before every
//! Job, mounted read-only by it, and carrying CAPTF's durable annotations.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};

use captf_shared::inputs::Inputs;
use captf_shared::{binding, names};

use captf_core::ident::Ident;
use captf_core::inputs_secret::inputs_secret;
use captf_read::errors::{self, ApiAction, Error};

/// Write the inputs Secret (create, or replace its data keeping its annotations).
pub async fn write(client: &kube::Client, id: &Ident, inputs: &Inputs, existing: Option<&Secret>) -> Result<(), Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &id.namespace);
    let desired = inputs_secret(id, inputs);
    let name = names::inputs_secret_name(&id.suffix);
    let what = format!("{}/{name}", id.namespace);
    match existing {
        None => match api.create(&PostParams::default(), &desired).await {
            Ok(_) => Ok(()),
            Err(e) if errors::is_conflict(&e) => Err(Error::api(ApiAction::WriteSecret, what, e)),
            Err(e) => Err(Error::api(ApiAction::WriteSecret, what, e)),
        },
        Some(s) if s.data == desired.data && binding::annotation(&s.metadata) == Some(id.uid.as_str()) => Ok(()),
        Some(_) => {
            let patch = serde_json::json!({"data": desired.data, "metadata": {
                "labels": desired.metadata.labels,
                "annotations": desired.metadata.annotations,
            }});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| Error::api(ApiAction::WriteSecret, what, e))
        }
    }
}

/// Set (Some) or remove (None) durable annotations on the inputs Secret. A missing Secret is
/// created empty first, so a record is never lost. An inputs Secret of another object is never
/// written to: the record is dropped (the object is held with NameConflict meanwhile).
pub async fn annotate(
    client: &kube::Client,
    id: &Ident,
    annotations: &BTreeMap<&'static str, Option<String>>,
) -> Result<(), Error> {
    if annotations.is_empty() {
        return Ok(());
    }
    let api: Api<Secret> = Api::namespaced(client.clone(), &id.namespace);
    let name = names::inputs_secret_name(&id.suffix);
    let what = format!("{}/{name}", id.namespace);
    let existing = api
        .get_opt(&name)
        .await
        .map_err(|e| Error::api(ApiAction::GetSecret, what.clone(), e))?;
    if let Some(s) = existing.as_ref().filter(|s| !binding::owned_by(&s.metadata, &id.uid)) {
        tracing::warn!(
            "not writing the durable record of {} to {what}: it is not owned by the object (owners {:?})",
            id.what(),
            s.metadata
                .owner_references
                .as_ref()
                .map(|o| o.iter().map(|o| o.uid.clone()).collect::<Vec<_>>())
        );
        return Ok(());
    }
    let ann: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .map(|(k, v)| {
            (
                (*k).to_string(),
                v.clone().map_or(serde_json::Value::Null, serde_json::Value::String),
            )
        })
        .collect();
    // The read resourceVersion: a Secret replaced since it was judged is not written.
    let mut patch = serde_json::json!({"metadata": {"annotations": ann}});
    if let Some(rv) = existing.as_ref().and_then(|s| s.metadata.resource_version.clone()) {
        patch["metadata"]["resourceVersion"] = serde_json::Value::String(rv);
    }
    match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(e) if errors::is_not_found(&e) => {
            let mut s = inputs_secret(id, &Inputs::default());
            s.data = None;
            s.metadata.annotations.get_or_insert_with(BTreeMap::new).extend(
                annotations
                    .iter()
                    .filter_map(|(k, v)| Some(((*k).to_string(), v.clone()?))),
            );
            api.create(&PostParams::default(), &s)
                .await
                .map(|_| ())
                .map_err(|e| Error::api(ApiAction::WriteSecret, what, e))
        }
        Err(e) => Err(Error::api(ApiAction::WriteSecret, what, e)),
    }
}

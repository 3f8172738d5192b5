//! The durable inputs Secret `captf-inputs-<suffix>` (docs/api.md): written before every
//! Job, mounted read-only by it, and carrying CAPTF's durable annotations.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};

use captf_shared::inputs::Inputs;
use captf_shared::{binding, keys, names};

use super::errors::{self, ApiAction, Error};
use super::gather::Ident;
use super::job::owner_reference;

/// The inputs Secret for these inputs (PURE): owned by the object, and recording its UID
/// (`captf.io/owner-uid`), which a `clusterctl move` keeps while it gives the object a new one.
pub fn inputs_secret(id: &Ident, inputs: &Inputs) -> Secret {
    let mut labels = BTreeMap::new();
    labels.insert(keys::LABEL_KIND.to_string(), id.kind.as_str().to_string());
    labels.insert(keys::LABEL_OBJECT.to_string(), id.object_id.clone());
    Secret {
        metadata: ObjectMeta {
            name: Some(names::inputs_secret_name(&id.suffix)),
            namespace: Some(id.namespace.clone()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                keys::ANNOTATION_OWNER_UID.to_string(),
                id.uid.clone(),
            )])),
            owner_references: Some(vec![owner_reference(id.kind, &id.name, &id.uid)]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            keys::INPUTS_DATA_KEY.to_string(),
            ByteString(inputs.canonical_json().into_bytes()),
        )])),
        type_: Some("Opaque".to_string()),
        ..Default::default()
    }
}

/// The inputs stored in an inputs Secret, if it parses.
pub fn stored_inputs(secret: &Secret) -> Option<Inputs> {
    let bytes = secret.data.as_ref()?.get(keys::INPUTS_DATA_KEY)?;
    serde_json::from_slice(&bytes.0).ok()
}

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use captf_shared::Kind;
    use captf_shared::inputs::ModuleRef;

    #[test]
    fn the_inputs_secret_holds_canonical_inputs_json_and_is_owned_by_the_object() {
        let id = Ident {
            kind: Kind::TerraformCluster,
            namespace: "default".into(),
            name: "prod-eu".into(),
            uid: "u1".into(),
            suffix: "prod-eu-tc".into(),
            object_id: "225654031b7f".into(),
            cluster_name: Some("prod-eu".into()),
        };
        let inputs = Inputs {
            state_encryption: None,
            module: ModuleRef {
                source: "git::https://example.com/m.git".into(),
            },
            variables: [
                ("b".to_string(), serde_json::json!(1)),
                ("a".to_string(), serde_json::json!("x")),
            ]
            .into(),
        };
        let s = inputs_secret(&id, &inputs);
        assert_eq!(s.metadata.name.as_deref(), Some("captf-inputs-prod-eu-tc"));
        assert_eq!(s.metadata.owner_references.as_ref().unwrap()[0].uid, "u1");
        assert_eq!(captf_shared::binding::annotation(&s.metadata), Some("u1"));
        let text = String::from_utf8(s.data.as_ref().unwrap()["inputs.json"].0.clone()).unwrap();
        assert_eq!(text, inputs.canonical_json());
        assert_eq!(stored_inputs(&s).unwrap().hash(), inputs.hash());
    }
}

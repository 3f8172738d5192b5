//! The durable inputs Secret `captf-inputs-<suffix>` as data (docs/api.md): what the controller
//! writes before every Job and what it reads back. Writing it is `runtime/inputs.rs`.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use captf_shared::inputs::Inputs;
use captf_shared::{keys, names};

use crate::ident::Ident;
use crate::job::owner_reference;

/// The inputs Secret for these inputs : owned by the object, and recording its UID
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
        data: Some(data(inputs)),
        type_: Some("Opaque".to_string()),
        ..Default::default()
    }
}

/// The Secret's data: the inputs document, and the policies on the plan when there are any.
fn data(inputs: &Inputs) -> BTreeMap<String, ByteString> {
    let mut data = BTreeMap::from([(
        keys::INPUTS_DATA_KEY.to_string(),
        ByteString(inputs.canonical_json().into_bytes()),
    )]);
    if !inputs.policies.is_empty() {
        data.insert(
            captf_shared::protocol::POLICIES_KEY.to_string(),
            ByteString(serde_json::to_vec(&inputs.policies).unwrap_or_default()),
        );
    }
    data
}

/// The inputs stored in an inputs Secret, if it parses.
pub fn stored_inputs(secret: &Secret) -> Option<Inputs> {
    let bytes = secret.data.as_ref()?.get(keys::INPUTS_DATA_KEY)?;
    serde_json::from_slice(&bytes.0).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use captf_shared::Kind;
    use captf_shared::inputs::ModuleRef;

    fn ident() -> Ident {
        Ident {
            kind: Kind::TerraformCluster,
            namespace: "default".into(),
            name: "prod-eu".into(),
            uid: "u1".into(),
            suffix: "prod-eu-tc".into(),
            object_id: "225654031b7f".into(),
            cluster_name: Some("prod-eu".into()),
        }
    }

    #[test]
    fn the_inputs_secret_holds_canonical_inputs_json_and_is_owned_by_the_object() {
        let id = ident();
        let inputs = Inputs {
            state_encryption: None,
            public_variables: Default::default(),
            policies: Vec::new(),
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

    #[test]
    fn the_policies_ride_beside_the_inputs_and_only_when_there_are_any() {
        let id = ident();
        let mut inputs = Inputs::default();
        let data = inputs_secret(&id, &inputs).data.unwrap();
        assert!(!data.contains_key(captf_shared::protocol::POLICIES_KEY));
        inputs.policies = vec![captf_shared::protocol::PlanPolicy {
            name: "platform:world.rego".into(),
            source: "package main".into(),
        }];
        let data = inputs_secret(&id, &inputs).data.unwrap();
        let policies: Vec<captf_shared::protocol::PlanPolicy> =
            serde_json::from_slice(&data[captf_shared::protocol::POLICIES_KEY].0).unwrap();
        assert_eq!(policies, inputs.policies);
        // The inputs document itself does not carry them.
        assert!(!String::from_utf8_lossy(&data[keys::INPUTS_DATA_KEY].0).contains("world.rego"));
    }
}

//! Who an object is: its kind, namespace, name and UID, and the names derived from them
//! (the hashed suffix of everything made for it, the object ID its Jobs are labelled with, the
//! Cluster API cluster it belongs to).

use captf_shared::types::CaptfObject;
use captf_shared::{Kind, keys, names};

use crate::inputs;

/// An object without the metadata every object has.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} has no metadata.{field}")]
pub struct MissingMeta {
    pub kind: Kind,
    pub field: &'static str,
}

/// Who the object is.
#[derive(Clone, Debug)]
pub struct Ident {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub suffix: String,
    pub object_id: String,
    pub cluster_name: Option<String>,
}

impl Ident {
    pub fn of(object: &CaptfObject, kind: Kind) -> Result<Ident, MissingMeta> {
        let meta = object.metadata();
        let name = meta.name.clone().ok_or(MissingMeta { kind, field: "name" })?;
        let namespace = meta.namespace.clone().ok_or(MissingMeta {
            kind,
            field: "namespace",
        })?;
        Ok(Ident::new(
            kind,
            namespace,
            name,
            meta.uid.clone().unwrap_or_default(),
            inputs::cluster_name(kind, meta),
        ))
    }

    /// Who the object of `kind` named `namespace`/`name` with UID `uid` is.
    pub fn new(kind: Kind, namespace: String, name: String, uid: String, cluster_name: Option<String>) -> Ident {
        Ident {
            suffix: names::suffix(kind, &namespace, &name),
            object_id: names::object_id(kind, &namespace, &name),
            cluster_name,
            uid,
            kind,
            namespace,
            name,
        }
    }

    /// `captf.io/kind=<Kind>,captf.io/object=<id>`: this object's Jobs and pods.
    pub fn selector(&self) -> String {
        format!(
            "{}={},{}={}",
            keys::LABEL_KIND,
            self.kind.as_str(),
            keys::LABEL_OBJECT,
            self.object_id
        )
    }

    pub fn what(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }
}

//! CAPTF's API (docs/api.md): the CRD types and [`CaptfObject`], any one of them.

mod resources;
pub(crate) mod schema;
mod spec;
mod status;

pub use resources::*;
pub use spec::*;
pub use status::*;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::Kind;

/// Any of CAPTF's kinds, parsed.
#[derive(Clone, Debug, PartialEq)]
pub enum CaptfObject {
    Cluster(TerraformCluster),
    MachinePool(TerraformMachinePool),
    Machine(TerraformMachine),
    MachineTemplate(TerraformMachineTemplate),
    ClusterTemplate(TerraformClusterTemplate),
    MachinePoolTemplate(TerraformMachinePoolTemplate),
}

/// The kinds CAPTF serves, as they appear in `kind`.
pub const SERVED_KINDS: [&str; 6] = [
    "TerraformCluster",
    "TerraformMachinePool",
    "TerraformMachine",
    "TerraformMachineTemplate",
    "TerraformClusterTemplate",
    "TerraformMachinePoolTemplate",
];

/// The plural of a served kind (`terraformclusters`: the resource its CRD, RBAC and URLs name),
/// `None` for any other kind.
pub fn plural(kind: &str) -> Option<String> {
    use kube::Resource;
    let p = match kind {
        "TerraformCluster" => TerraformCluster::plural(&()),
        "TerraformMachinePool" => TerraformMachinePool::plural(&()),
        "TerraformMachine" => TerraformMachine::plural(&()),
        "TerraformClusterTemplate" => TerraformClusterTemplate::plural(&()),
        "TerraformMachinePoolTemplate" => TerraformMachinePoolTemplate::plural(&()),
        "TerraformMachineTemplate" => TerraformMachineTemplate::plural(&()),
        _ => return None,
    };
    Some(p.into_owned())
}

/// The name of a served kind's CRD (`terraformclusters.infrastructure.cluster.x-k8s.io`), `None`
/// for any other kind.
pub fn crd_name(kind: &str) -> Option<String> {
    Some(format!("{}.{}", plural(kind)?, crate::keys::GROUP))
}

#[derive(Debug, thiserror::Error)]
pub enum ParseObjectError {
    #[error(
        "unknown kind {0:?}: expected one of TerraformCluster, TerraformMachinePool, TerraformMachine, TerraformMachineTemplate, TerraformClusterTemplate, TerraformMachinePoolTemplate"
    )]
    UnknownKind(String),
    #[error("object has no kind")]
    NoKind,
    #[error("{kind} does not parse: {source}")]
    Invalid {
        kind: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

impl CaptfObject {
    /// Parse an object of the given kind (as in an AdmissionReview's `request.kind.kind`).
    pub fn from_kind_value(kind: &str, value: Value) -> Result<Self, ParseObjectError> {
        fn parse<T: serde::de::DeserializeOwned>(kind: &'static str, value: Value) -> Result<T, ParseObjectError> {
            serde_json::from_value(value).map_err(|source| ParseObjectError::Invalid { kind, source })
        }
        Ok(match kind {
            "TerraformCluster" => CaptfObject::Cluster(parse("TerraformCluster", value)?),
            "TerraformMachinePool" => CaptfObject::MachinePool(parse("TerraformMachinePool", value)?),
            "TerraformMachine" => CaptfObject::Machine(parse("TerraformMachine", value)?),
            "TerraformMachineTemplate" => CaptfObject::MachineTemplate(parse("TerraformMachineTemplate", value)?),
            "TerraformClusterTemplate" => CaptfObject::ClusterTemplate(parse("TerraformClusterTemplate", value)?),
            "TerraformMachinePoolTemplate" => {
                CaptfObject::MachinePoolTemplate(parse("TerraformMachinePoolTemplate", value)?)
            }
            other => return Err(ParseObjectError::UnknownKind(other.to_string())),
        })
    }

    /// Parse an object by its own `kind` field.
    pub fn from_value(value: Value) -> Result<Self, ParseObjectError> {
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .ok_or(ParseObjectError::NoKind)?
            .to_string();
        Self::from_kind_value(&kind, value)
    }

    pub fn kind_name(&self) -> &'static str {
        match self {
            CaptfObject::Cluster(_) => "TerraformCluster",
            CaptfObject::MachinePool(_) => "TerraformMachinePool",
            CaptfObject::Machine(_) => "TerraformMachine",
            CaptfObject::MachineTemplate(_) => "TerraformMachineTemplate",
            CaptfObject::ClusterTemplate(_) => "TerraformClusterTemplate",
            CaptfObject::MachinePoolTemplate(_) => "TerraformMachinePoolTemplate",
        }
    }

    /// The kind as one that runs Jobs; `None` for a template.
    pub fn job_kind(&self) -> Option<Kind> {
        match self {
            CaptfObject::Cluster(_) => Some(Kind::TerraformCluster),
            CaptfObject::MachinePool(_) => Some(Kind::TerraformMachinePool),
            CaptfObject::Machine(_) => Some(Kind::TerraformMachine),
            CaptfObject::MachineTemplate(_) | CaptfObject::ClusterTemplate(_) | CaptfObject::MachinePoolTemplate(_) => {
                None
            }
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            CaptfObject::Cluster(o) => &o.metadata,
            CaptfObject::MachinePool(o) => &o.metadata,
            CaptfObject::Machine(o) => &o.metadata,
            CaptfObject::MachineTemplate(o) => &o.metadata,
            CaptfObject::ClusterTemplate(o) => &o.metadata,
            CaptfObject::MachinePoolTemplate(o) => &o.metadata,
        }
    }

    /// The Terraform spec: the object's own, or a template's `spec.template.spec`.
    pub fn terraform_spec(&self) -> &TerraformSpec {
        match self {
            CaptfObject::Cluster(o) => &o.spec.terraform,
            CaptfObject::MachinePool(o) => &o.spec.terraform,
            CaptfObject::Machine(o) => &o.spec.terraform,
            CaptfObject::MachineTemplate(o) => &o.spec.template.spec.terraform,
            CaptfObject::ClusterTemplate(o) => &o.spec.template.spec.terraform,
            CaptfObject::MachinePoolTemplate(o) => &o.spec.template.spec.terraform,
        }
    }

    /// The outputs a TerraformCluster (or the TerraformClusters of a template) passes to its
    /// members (`spec.exports`); empty for the other kinds.
    pub fn exports(&self) -> &[String] {
        match self {
            CaptfObject::Cluster(o) => o.spec.exports.as_deref().unwrap_or_default(),
            CaptfObject::ClusterTemplate(o) => o.spec.template.spec.exports.as_deref().unwrap_or_default(),
            _ => &[],
        }
    }

    /// The status of a kind that runs Jobs (`None` for a template or an object without one).
    pub fn terraform_status(&self) -> Option<&TerraformStatus> {
        match self {
            CaptfObject::Cluster(o) => o.status.as_ref(),
            CaptfObject::MachinePool(o) => o.status.as_ref(),
            CaptfObject::Machine(o) => o.status.as_ref(),
            _ => None,
        }
    }

    pub fn terraform_spec_mut(&mut self) -> &mut TerraformSpec {
        match self {
            CaptfObject::Cluster(o) => &mut o.spec.terraform,
            CaptfObject::MachinePool(o) => &mut o.spec.terraform,
            CaptfObject::Machine(o) => &mut o.spec.terraform,
            CaptfObject::MachineTemplate(o) => &mut o.spec.template.spec.terraform,
            CaptfObject::ClusterTemplate(o) => &mut o.spec.template.spec.terraform,
            CaptfObject::MachinePoolTemplate(o) => &mut o.spec.template.spec.terraform,
        }
    }

    /// JSON path prefix of the Terraform spec, for field paths in messages.
    pub fn spec_path(&self) -> &'static str {
        match self {
            CaptfObject::MachineTemplate(_) | CaptfObject::ClusterTemplate(_) | CaptfObject::MachinePoolTemplate(_) => {
                "spec.template.spec"
            }
            _ => "spec",
        }
    }

    /// Whether the object is a template (immutable once created).
    pub fn is_template(&self) -> bool {
        matches!(
            self,
            CaptfObject::MachineTemplate(_) | CaptfObject::ClusterTemplate(_) | CaptfObject::MachinePoolTemplate(_)
        )
    }

    /// A template's `spec` as JSON (`None` for the kinds that run Jobs).
    pub fn template_spec_value(&self) -> Option<Value> {
        let v = match self {
            CaptfObject::MachineTemplate(o) => serde_json::to_value(&o.spec),
            CaptfObject::ClusterTemplate(o) => serde_json::to_value(&o.spec),
            CaptfObject::MachinePoolTemplate(o) => serde_json::to_value(&o.spec),
            _ => return None,
        };
        v.ok()
    }

    pub fn to_value(&self) -> Value {
        let v = match self {
            CaptfObject::Cluster(o) => serde_json::to_value(o),
            CaptfObject::MachinePool(o) => serde_json::to_value(o),
            CaptfObject::Machine(o) => serde_json::to_value(o),
            CaptfObject::MachineTemplate(o) => serde_json::to_value(o),
            CaptfObject::ClusterTemplate(o) => serde_json::to_value(o),
            CaptfObject::MachinePoolTemplate(o) => serde_json::to_value(o),
        };
        // Serializing plain data structs with string keys cannot fail.
        v.unwrap_or(Value::Null)
    }
}

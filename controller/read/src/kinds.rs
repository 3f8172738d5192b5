//! One reconciler for the three kinds: what the runtime needs of each.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use captf_shared::Kind;
use captf_shared::types::{CaptfObject, TerraformCluster, TerraformMachine, TerraformMachinePool, TerraformStatus};

/// A CAPTF kind that runs Jobs.
pub trait CaptfKind:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    const KIND: Kind;
    /// The object as the core sees it.
    fn to_object(&self) -> CaptfObject;
    fn status(&self) -> Option<&TerraformStatus>;
}

impl CaptfKind for TerraformCluster {
    const KIND: Kind = Kind::TerraformCluster;
    fn to_object(&self) -> CaptfObject {
        CaptfObject::Cluster(self.clone())
    }
    fn status(&self) -> Option<&TerraformStatus> {
        self.status.as_ref()
    }
}

impl CaptfKind for TerraformMachinePool {
    const KIND: Kind = Kind::TerraformMachinePool;
    fn to_object(&self) -> CaptfObject {
        CaptfObject::MachinePool(self.clone())
    }
    fn status(&self) -> Option<&TerraformStatus> {
        self.status.as_ref()
    }
}

impl CaptfKind for TerraformMachine {
    const KIND: Kind = Kind::TerraformMachine;
    fn to_object(&self) -> CaptfObject {
        CaptfObject::Machine(self.clone())
    }
    fn status(&self) -> Option<&TerraformStatus> {
        self.status.as_ref()
    }
}

/// The API resource (plural) of a kind, for dynamic calls.
pub fn api_resource(kind: Kind) -> kube::discovery::ApiResource {
    kube::discovery::ApiResource {
        group: captf_shared::keys::GROUP.to_string(),
        version: captf_shared::keys::VERSION.to_string(),
        api_version: captf_shared::keys::API_VERSION.to_string(),
        kind: kind.as_str().to_string(),
        plural: kind.plural().to_string(),
    }
}

//! Cluster API pause (docs/api.md): the owning Cluster API `Cluster`, read live. The rule is
//! pure, in [`captf_core::pause`].

use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};

use captf_shared::types::CaptfObject;

use captf_core::ident::Ident;
use captf_core::pause;

/// The holds read live on every pass, whoever reads (the reconcile pass, or a live read for a
/// person): the Cluster's pause and infrastructure, and, for an object being deleted, whether its
/// state can be read.
pub async fn live_holds(
    client: &kube::Client,
    object: &CaptfObject,
    id: &Ident,
    cluster: &ClusterView,
    holds: &mut captf_core::snapshot::Holds,
) -> Result<(), crate::errors::Error> {
    holds.cluster_paused = cluster.paused;
    holds.cluster_infrastructure_pending = cluster.infrastructure_pending;
    if object.metadata().deletion_timestamp.is_some() {
        // Only a deletion is held by an unreadable state (docs/rules.md); other ops find out themselves.
        let facts = crate::state::read(client, id).await?;
        holds.state_unreadable = facts.unreadable;
        holds.state_empty = facts.empty;
    }
    Ok(())
}

/// What the controller reads of the object's Cluster API `Cluster` (one read a pass).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterView {
    pub paused: bool,
    /// The Cluster exists and says its infrastructure is not provisioned yet.
    pub infrastructure_pending: bool,
    /// The TerraformCluster the Cluster names as its infrastructure (`spec.infrastructureRef`).
    pub infrastructure: Option<String>,
}

/// Whether the object's Cluster API `Cluster` is paused.
pub async fn cluster_paused(client: &kube::Client, object: &CaptfObject, id: &Ident) -> bool {
    cluster_view(client, object, id).await.paused
}

/// The object's Cluster API `Cluster` (read only for objects Cluster API manages, so a standalone
/// object costs no extra call). A Cluster that does not exist (or a cluster without Cluster API
/// installed) pauses and holds nothing; a failed read is logged and does neither, since pause is
/// a brake a person applies and Cluster API may be absent.
pub async fn cluster_view(client: &kube::Client, object: &CaptfObject, id: &Ident) -> ClusterView {
    let Some(cluster) = id.cluster_name.as_deref() else {
        return ClusterView::default();
    };
    if !pause::under_cluster_api(object.metadata()) {
        return ClusterView::default();
    }
    // A version not served answers 404 like a missing Cluster: the next version is tried.
    for api_version in pause::cluster_api_versions(object.metadata()) {
        let Some((group, version)) = api_version.split_once('/') else {
            continue;
        };
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, "Cluster"), "clusters");
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &id.namespace, &ar);
        match api.get_opt(cluster).await {
            Ok(Some(c)) => {
                return ClusterView {
                    paused: pause::cluster_paused(&c.data),
                    infrastructure_pending: !pause::cluster_infrastructure_provisioned(&c.data),
                    infrastructure: captf_core::exports::infrastructure_cluster(&c.data),
                };
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(error = %e, "failed to read the Cluster API Cluster {cluster} of {} as {api_version}", id.what());
            }
        }
    }
    ClusterView::default()
}

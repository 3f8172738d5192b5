//! Watches of the Cluster API owners, metadata only, that wake the objects they own: a change
//! of a `Cluster` (its pause, its infrastructure becoming provisioned) wakes the TerraformCluster,
//! machine pools and machines labelled with its name; a change of a `Machine` (failure domain,
//! bootstrap data) wakes the TerraformMachine it owns, and a `MachinePool` (replicas, bootstrap
//! data) the TerraformMachinePool. The reconcile then reads the owner live, as before: the
//! watch only says when.
//!
//! Each owner kind is found by discovery (the newest of `v1beta2`, `v1beta1` that is served),
//! asked again with a growing pause (1 s doubling to a minute) until Cluster API serves it, so a
//! Cluster API installed after CAPTF is watched within a minute, without a restart. Until then an
//! owner read still happens every 30 s while an object is held by one.

use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};

use captf_shared::{Kind, keys};

use captf_core::pause::CAPI_GROUP;

/// A Cluster API kind the controller watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerKind {
    Cluster,
    Machine,
    MachinePool,
}

impl OwnerKind {
    pub const ALL: [OwnerKind; 3] = [OwnerKind::Cluster, OwnerKind::Machine, OwnerKind::MachinePool];

    pub fn kind(self) -> &'static str {
        match self {
            OwnerKind::Cluster => "Cluster",
            OwnerKind::Machine => "Machine",
            OwnerKind::MachinePool => "MachinePool",
        }
    }

    pub fn plural(self) -> &'static str {
        match self {
            OwnerKind::Cluster => "clusters",
            OwnerKind::Machine => "machines",
            OwnerKind::MachinePool => "machinepools",
        }
    }

    /// Whether a change of this owner kind can matter to objects of `kind`.
    pub fn concerns(self, kind: Kind) -> bool {
        match self {
            OwnerKind::Cluster => true,
            OwnerKind::Machine => kind == Kind::TerraformMachine,
            OwnerKind::MachinePool => kind == Kind::TerraformMachinePool,
        }
    }
}

/// Whether a change of the owner `owner_kind` `owner_namespace/owner_name` wakes the object with
/// metadata `meta` (PURE): a Cluster wakes the objects of its namespace labelled with its name;
/// a Machine or MachinePool wakes the objects of its namespace it owns.
pub fn wakes(owner_kind: OwnerKind, owner_namespace: &str, owner_name: &str, meta: &ObjectMeta) -> bool {
    if meta.namespace.as_deref() != Some(owner_namespace) {
        return false;
    }
    match owner_kind {
        OwnerKind::Cluster => meta
            .labels
            .as_ref()
            .and_then(|l| l.get(keys::LABEL_CLUSTER_NAME))
            .is_some_and(|c| c == owner_name),
        OwnerKind::Machine | OwnerKind::MachinePool => meta.owner_references.iter().flatten().any(|o| {
            o.kind == owner_kind.kind()
                && o.name == owner_name
                && o.api_version.split_once('/').is_some_and(|(g, _)| g == CAPI_GROUP)
        }),
    }
}

/// The versions of Cluster API's kinds CAPTF reads, newest first.
const VERSIONS: [&str; 2] = ["v1beta2", "v1beta1"];
/// The longest pause between two discoveries of an owner kind Cluster API does not serve yet.
const REDISCOVER_MAX: Duration = Duration::from_secs(60);

/// The API of `owner` at `version`.
pub fn owner_api(owner: OwnerKind, version: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk(CAPI_GROUP, version, owner.kind());
    ApiResource::from_gvk_with_plural(&gvk, owner.plural())
}

/// The newest served version of `owner`, by discovery; `None` when Cluster API does not serve it
/// (not installed, or a failed discovery).
pub async fn discover(client: &kube::Client, owner: OwnerKind) -> Option<ApiResource> {
    for version in VERSIONS {
        if let Ok(list) = client
            .list_api_group_resources(&format!("{CAPI_GROUP}/{version}"))
            .await
            && list.resources.iter().any(|r| r.name == owner.plural())
        {
            return Some(owner_api(owner, version));
        }
    }
    None
}

/// The pause before the discovery after `pause` (PURE): doubling, at most [`REDISCOVER_MAX`].
pub fn next_pause(pause: Duration) -> Duration {
    (pause * 2).min(REDISCOVER_MAX)
}

/// The changes of `owner`'s objects (metadata only, in `namespace` or everywhere): nothing until
/// discovery finds the kind served (asked again after 1 s, then doubling to a minute), then its
/// watch.
pub fn owner_changes(
    client: kube::Client,
    namespace: Option<String>,
    owner: OwnerKind,
) -> impl Stream<Item = Result<PartialObjectMeta<DynamicObject>, watcher::Error>> + Send + 'static {
    let found = futures::stream::once(async move {
        let mut pause = Duration::from_secs(1);
        let mut told = false;
        loop {
            if let Some(ar) = discover(&client, owner).await {
                tracing::info!("watching Cluster API's {} ({})", owner.plural(), ar.api_version);
                return (client, ar);
            }
            if !told {
                tracing::info!(
                    "Cluster API's {} are not served: not watched until they are (asked again every minute at most)",
                    owner.plural()
                );
                told = true;
            }
            tokio::time::sleep(pause).await;
            pause = next_pause(pause);
        }
    });
    found.flat_map(move |(client, ar)| {
        let api: Api<PartialObjectMeta<DynamicObject>> = match &namespace {
            Some(n) => Api::namespaced_with(client, n, &ar),
            None => Api::all_with(client, &ar),
        };
        watcher(api, watcher::Config::default())
            .default_backoff()
            .touched_objects()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::collections::BTreeMap;

    fn meta(ns: &str, cluster: Option<&str>, owner: Option<(&str, &str, &str)>) -> ObjectMeta {
        ObjectMeta {
            namespace: Some(ns.into()),
            labels: cluster.map(|c| BTreeMap::from([(keys::LABEL_CLUSTER_NAME.to_string(), c.to_string())])),
            owner_references: owner.map(|(api_version, kind, name)| {
                vec![OwnerReference {
                    api_version: api_version.into(),
                    kind: kind.into(),
                    name: name.into(),
                    uid: "u".into(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }
    }

    #[test]
    fn an_owner_kind_not_served_is_looked_for_again_after_1s_doubling_to_a_minute() {
        let mut pause = Duration::from_secs(1);
        let mut seen = vec![];
        for _ in 0..9 {
            pause = next_pause(pause);
            seen.push(pause.as_secs());
        }
        assert_eq!(seen, [2, 4, 8, 16, 32, 60, 60, 60, 60]);
    }

    #[test]
    fn a_cluster_wakes_the_objects_labelled_with_its_name_in_its_namespace() {
        let m = meta("team-a", Some("prod"), None);
        assert!(wakes(OwnerKind::Cluster, "team-a", "prod", &m));
        assert!(!wakes(OwnerKind::Cluster, "team-b", "prod", &m), "another namespace");
        assert!(!wakes(OwnerKind::Cluster, "team-a", "staging", &m));
        assert!(!wakes(
            OwnerKind::Cluster,
            "team-a",
            "prod",
            &meta("team-a", None, None)
        ));
    }

    #[test]
    fn a_machine_or_pool_wakes_the_objects_it_owns() {
        let m = meta(
            "team-a",
            Some("prod"),
            Some(("cluster.x-k8s.io/v1beta2", "Machine", "m1")),
        );
        assert!(wakes(OwnerKind::Machine, "team-a", "m1", &m));
        assert!(!wakes(OwnerKind::Machine, "team-a", "m2", &m));
        assert!(!wakes(OwnerKind::MachinePool, "team-a", "m1", &m), "kind must match");
        let foreign = meta("team-a", None, Some(("example.com/v1", "Machine", "m1")));
        assert!(
            !wakes(OwnerKind::Machine, "team-a", "m1", &foreign),
            "not Cluster API's Machine"
        );
    }

    #[test]
    fn machines_and_pools_concern_only_their_own_kind() {
        for k in [
            Kind::TerraformCluster,
            Kind::TerraformMachinePool,
            Kind::TerraformMachine,
        ] {
            assert!(OwnerKind::Cluster.concerns(k));
        }
        assert!(OwnerKind::Machine.concerns(Kind::TerraformMachine));
        assert!(!OwnerKind::Machine.concerns(Kind::TerraformCluster));
        assert!(OwnerKind::MachinePool.concerns(Kind::TerraformMachinePool));
        assert!(!OwnerKind::MachinePool.concerns(Kind::TerraformMachine));
    }
}

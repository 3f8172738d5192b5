//! The CRDs embed Kubernetes' own pod types (`Volume`, `Affinity`, ...), which are large, and
//! serve two versions with a schema each. They are applied by Helm, by clusterctl or with
//! `kubectl apply --server-side`, none of which copies the object into the 256 KiB
//! last-applied annotation of a client-side apply; what bounds them is etcd's limit on one
//! stored value (1.5 MiB by default), which must leave room for a third version during a later
//! migration.
#![allow(clippy::unwrap_used)]

/// Two thirds of etcd's default limit on one value.
const STORED_BUDGET: usize = 1024 * 1024;

#[test]
fn every_crd_fits_in_one_etcd_value_with_room_for_another_version() {
    for crd in captf_shared::crd::crds() {
        let name = crd.metadata.name.clone().unwrap();
        let size = serde_json::to_vec(&crd).unwrap().len();
        let versions = crd.spec.versions.len();
        assert!(
            size / versions * (versions + 1) <= STORED_BUDGET,
            "{name} is {size} bytes of JSON with {versions} versions; one more would not fit in \
             {STORED_BUDGET} bytes"
        );
    }
}

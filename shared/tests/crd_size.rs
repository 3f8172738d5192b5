//! The CRDs embed Kubernetes' own pod types (`Volume`, `Affinity`, ...), which are large. Each
//! must stay applicable with client-side `kubectl apply`, which copies the whole object as JSON
//! into the `kubectl.kubernetes.io/last-applied-configuration` annotation, and annotations are
//! limited to 256 KiB in total (the API server's limit for the object itself is about 1.5 MiB).
#![allow(clippy::unwrap_used)]

/// The annotation limit, with room left for the rest of the annotations.
const LAST_APPLIED_BUDGET: usize = 256 * 1024 - 4 * 1024;

#[test]
fn every_crd_fits_in_a_client_side_apply_annotation() {
    for crd in captf_shared::crd::crds() {
        let name = crd.metadata.name.clone().unwrap();
        let size = serde_json::to_vec(&crd).unwrap().len();
        assert!(
            size <= LAST_APPLIED_BUDGET,
            "{name} is {size} bytes of JSON; kubectl apply (client side) cannot store it in the \
             last-applied annotation (budget {LAST_APPLIED_BUDGET})"
        );
    }
}

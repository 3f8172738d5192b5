//! The committed CRDs in `charts/captf/crds/` must be exactly what the types generate.

use std::path::Path;

#[test]
fn committed_crds_match_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/captf/crds");
    let mut stale = vec![];
    for (file, want) in captf_shared::crd::crd_files() {
        match std::fs::read_to_string(dir.join(&file)) {
            Ok(have) if have == want => {}
            Ok(_) => stale.push(format!("{file} differs")),
            Err(e) => stale.push(format!("{file}: {e}")),
        }
    }
    assert!(
        stale.is_empty(),
        "charts/captf/crds is stale ({}); run `cargo run -p captf-shared --bin captf-crdgen` and commit",
        stale.join(", ")
    );
}

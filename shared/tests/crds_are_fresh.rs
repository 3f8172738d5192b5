//! The committed CRD templates in `charts/captf/templates/crds/` must be exactly what the types
//! generate.

use std::path::Path;

#[test]
fn committed_crds_match_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/captf/templates/crds");
    let mut stale = vec![];
    for (file, want) in captf_shared::crd::chart_files().unwrap() {
        match std::fs::read_to_string(dir.join(&file)) {
            Ok(have) if have == want => {}
            Ok(_) => stale.push(format!("{file} differs")),
            Err(e) => stale.push(format!("{file}: {e}")),
        }
    }
    let extra: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    let known: Vec<String> = captf_shared::crd::chart_files()
        .unwrap()
        .into_iter()
        .map(|(f, _)| f)
        .collect();
    stale.extend(
        extra
            .into_iter()
            .filter(|f| !known.contains(f))
            .map(|f| format!("{f} is not generated")),
    );
    assert!(
        stale.is_empty(),
        "charts/captf/templates/crds is stale ({}); run `cargo run -p captf-shared --bin captf-crdgen` and commit",
        stale.join(", ")
    );
}

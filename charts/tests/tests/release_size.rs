//! Helm keeps each release (the chart, its templates and files, and the rendered manifest) as
//! gzip'd, base64'd JSON in one Secret, whose data may hold at most 1 MiB; a chart over it cannot
//! be installed at all ("Secret sh.helm.release.v1... is invalid: data: Too long"). The CRDs are
//! templates of the chart, so they count twice: as templates and as rendered manifests.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

/// Three quarters of Helm's limit: room for the chart to grow and for values set at install.
const BUDGET: usize = 768 * 1024;

/// Every file of the chart, as `(path, bytes)`.
fn files(dir: &Path, base: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, base, out);
        } else {
            let name = p.strip_prefix(base).unwrap().display().to_string();
            out.push((name, std::fs::read(&p).unwrap()));
        }
    }
}

#[test]
fn the_release_helm_stores_fits_in_its_secret_with_room_to_grow() {
    let chart = captf_chart_tests::chart_dir();
    let mut all = vec![];
    files(&chart, &chart, &mut all);
    // As Helm's release JSON carries them: each file's bytes in base64, and the manifest.
    let entries: Vec<Value> = all
        .iter()
        .map(|(name, data)| json!({"name": name, "data": STANDARD.encode(data)}))
        .collect();
    let manifest = captf_chart_tests::helm_template(&[]).unwrap().yaml;
    let release = json!({"chart": {"templates": entries}, "manifest": manifest});
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(release.to_string().as_bytes()).unwrap();
    let stored = STANDARD.encode(gz.finish().unwrap()).len();
    eprintln!("the release Helm stores: about {} KiB", stored / 1024);
    assert!(
        stored <= BUDGET,
        "the release Helm would store is about {stored} bytes, over {BUDGET} (Helm refuses 1 MiB)"
    );
}

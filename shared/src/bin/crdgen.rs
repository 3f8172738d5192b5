//! Writes CAPTF's CRDs, as Helm templates, to `charts/captf/templates/crds/` (or the directory
//! given as the only argument).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/captf/templates/crds")));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("failed to create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let files = match captf_shared::crd::chart_files() {
        Ok(files) => files,
        Err(e) => {
            eprintln!("captf-crdgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    for (file, yaml) in files {
        let path = dir.join(&file);
        if let Err(e) = std::fs::write(&path, yaml) {
            eprintln!("failed to write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}

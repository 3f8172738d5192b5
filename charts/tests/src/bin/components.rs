//! `captf-components`: writes the clusterctl provider repository
//! (`clusterctl/infrastructure-terraform/v<version>/`: `infrastructure-components.yaml` generated
//! from the chart, and `metadata.yaml` copied from the workspace root). Needs `helm`
//! (`bash scripts/setup-tools.sh`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let files = match captf_chart_tests::clusterctl::generate() {
        Ok(files) => files,
        Err(e) => {
            eprintln!("captf-components: {e}");
            return ExitCode::FAILURE;
        }
    };
    for (path, text) in files {
        if let Some(dir) = path.parent()
            && let Err(e) = std::fs::create_dir_all(dir)
        {
            eprintln!("captf-components: failed to create {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("captf-components: failed to write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}

//! `scripts/release.sh` (docs/release.md): two builds give the same bytes, also when the second
//! is of a commit that pins the first's images, and the script refuses what it must, saying why.
//! Every build runs in a clean clone (`captf_release_tests::clean_clone`); the slow part (a second
//! build, compared with the release the other tests use) is one test.

use std::path::Path;
use std::process::Command;

use captf_release_tests::{
    clean_clone, commit_all, git_out, images, release_command, release_prerequisites, run, workspace_version,
};

/// Runs release.sh, which must fail; returns its stderr.
fn refused(dir: &Path, version: &str, env: &[(&str, &str)]) -> String {
    let mut c = release_command(dir, version);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("bash");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "release.sh {version} succeeded, but must refuse:\n{stderr}"
    );
    assert!(!dir.join("dist").exists(), "a refused release wrote dist/");
    stderr
}

fn assert_says(stderr: &str, what: &str) {
    assert!(stderr.contains(what), "expected {what:?} in:\n{stderr}");
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).expect("read");
    assert!(text.contains(from), "{} has no {from:?}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).expect("write");
}

#[test]
fn release_refuses_a_dirty_tree_a_version_mismatch_and_a_missing_tool() {
    if Command::new("git").arg("--version").output().is_err() {
        captf_testsupport::cannot_run("git is not installed; the release tests clone the workspace");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let clone = tmp.path().join("captf");
    clean_clone(&clone);
    let version = workspace_version();

    // A VERSION other than the workspace's.
    let err = refused(&clone, "9.9.9", &[]);
    assert_says(
        &err,
        &format!("VERSION 9.9.9 disagrees with the workspace Cargo.toml version ({version})"),
    );
    let err = refused(&clone, "latest", &[]);
    assert_says(&err, "VERSION must be MAJOR.MINOR.PATCH");

    // A dirty tree: an untracked file, then a change to a tracked one.
    std::fs::write(clone.join("stray.txt"), "x").expect("write");
    let err = refused(&clone, &version, &[]);
    assert_says(&err, "the git tree is dirty");
    assert_says(&err, "stray.txt");
    std::fs::remove_file(clone.join("stray.txt")).expect("rm");
    edit(&clone.join("README.md"), "CAPTF", "CAPTF (edited)");
    assert_says(&refused(&clone, &version, &[]), "the git tree is dirty");
    run(Command::new("git")
        .current_dir(&clone)
        .args(["checkout", "--quiet", "README.md"]));

    // The chart's appVersion, then the clusterctl release series, disagreeing (committed).
    let chart = clone.join("charts/captf/Chart.yaml");
    edit(&chart, &format!("appVersion: \"{version}\""), "appVersion: \"0.0.9\"");
    commit_all(&clone, "a chart of another version");
    let err = refused(&clone, &version, &[]);
    assert_says(
        &err,
        &format!("VERSION {version} disagrees with charts/captf/Chart.yaml appVersion (0.0.9)"),
    );
    edit(&chart, "appVersion: \"0.0.9\"", &format!("appVersion: \"{version}\""));
    let (major, rest) = version.split_once('.').expect("a version");
    let minor = rest.split('.').next().expect("a minor");
    let metadata = clone.join(format!("clusterctl/infrastructure-terraform/v{version}/metadata.yaml"));
    edit(&metadata, &format!("minor: {minor}\n"), "minor: 99\n");
    commit_all(&clone, "a clusterctl release series of another version");
    let err = refused(&clone, &version, &[]);
    assert_says(
        &err,
        &format!(
            "VERSION {version} disagrees with clusterctl/infrastructure-terraform/v{version}/metadata.yaml: \
             its releaseSeries has no major: {major}, minor: {minor}"
        ),
    );
    edit(&metadata, "minor: 99\n", &format!("minor: {minor}\n"));
    commit_all(&clone, "back to the release's versions");

    // A missing pinned tool.
    let empty = tmp.path().join("no-tools");
    std::fs::create_dir(&empty).expect("mkdir");
    let err = refused(&clone, &version, &[("CAPTF_TOOLS_BIN", empty.to_str().expect("utf-8"))]);
    assert_says(&err, &format!("missing pinned tool tofu ({}/tofu)", empty.display()));
}

/// Two builds in two clones at different paths: of this tree, and of a commit on it that pins the
/// first build's images (`scripts/release/pin.sh`, as a release commit does). Every file of
/// `dist/` is the same (so are the image digests): a build is reproducible, and pinning a
/// release changes no byte of it, so the pinning commit's chart defaults are the digests its own
/// release produces. Then what the release holds is what docs/release.md says.
#[test]
fn a_release_is_reproducible_and_its_pinning_commit_builds_the_same_release() {
    if let Some(why) = release_prerequisites() {
        captf_testsupport::cannot_run(why);
        return;
    }
    let version = workspace_version();
    // Build 1: the release of this tree the other tests use (built now from a clean clone, or
    // kept from earlier in this run); build 2: another clean clone, at another path, pinned to
    // build 1 and committed, built now.
    let (first, built) = captf_release_tests::release_dist().unwrap_or_else(|why| panic!("{why}"));
    eprintln!("build 1 at {} (built now: {built})", first.display());
    let tmp = tempfile::tempdir().expect("tempdir");
    let b = tmp.path().join("b/captf");
    clean_clone(&b);
    let pin = |check: bool, dist: &Path| {
        let mut c = Command::new("bash");
        c.current_dir(&b).arg("scripts/release/pin.sh");
        if check {
            c.arg("--check");
        }
        c.arg(dist).output().expect("bash")
    };
    // On a release commit the tree is pinned to build 1 already: then build 2 is of the same commit.
    if pin(true, &first).status.success() {
        eprintln!("this tree is pinned to its own release already");
    } else {
        let pinned = pin(false, &first);
        assert!(
            pinned.status.success(),
            "pin.sh: {}",
            String::from_utf8_lossy(&pinned.stderr)
        );
        let changed = git_out(&b, &["status", "--porcelain"]);
        for file in ["charts/captf/values.yaml", "infrastructure-components.yaml"] {
            assert!(changed.contains(file), "pin.sh did not change {file}: {changed}");
        }
        commit_all(&b, "Pin the release's images");
    }
    let t = std::time::Instant::now();
    let out = run(&mut release_command(&b, &version));
    eprintln!("release.sh in {} took {:?}", b.display(), t.elapsed());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("the committed chart and clusterctl defaults are these images"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sums = |d: &Path| std::fs::read_to_string(d.join("SHA256SUMS")).expect("SHA256SUMS");
    let (sa, sb) = (sums(&first), sums(&b.join("dist")));
    let (ia, ib) = (images(&first), images(&b.join("dist")));
    eprintln!("images of build 1: {ia:#?}\nimages of build 2: {ib:#?}");
    assert_eq!(ia, ib, "the two builds gave different images");
    assert_eq!(sa, sb, "the two builds gave different dist/ files");
    // Every file, not only the listed sums: the same bytes.
    let diff = Command::new("diff")
        .args(["-r", "--brief"])
        .arg(&first)
        .arg(b.join("dist"))
        .output()
        .expect("diff");
    assert!(
        diff.status.success(),
        "the two dist/ differ:\n{}",
        String::from_utf8_lossy(&diff.stdout)
    );
    // The pinning commit's own chart defaults are its release's: the packaged values.yaml is the
    // committed one, and pinning again changes nothing.
    let packaged = Command::new("tar")
        .current_dir(b.join("dist"))
        .args(["-xzOf", &format!("chart/captf-{version}.tgz"), "captf/values.yaml"])
        .output()
        .expect("tar");
    let committed = std::fs::read_to_string(b.join("charts/captf/values.yaml")).expect("values.yaml");
    assert_eq!(String::from_utf8_lossy(&packaged.stdout), committed);
    let check = pin(true, &b.join("dist"));
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));

    // What the release holds.
    let dist = first.clone();
    run(Command::new("sha256sum")
        .current_dir(&dist)
        .args(["--check", "--strict", "--quiet", "SHA256SUMS"]));
    let names: Vec<&str> = ia.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["controller", "webhook", "runner"]);
    for image in &ia {
        assert!(
            image
                .reference
                .starts_with(&format!("ghcr.io/captf/{}@sha256:", image.name))
                && image.digest().len() == 71,
            "{image:?}"
        );
        for file in [
            format!("images/{}.oci.tar", image.name),
            format!("sbom/{}.cdx.json", image.name),
        ] {
            assert!(sa.contains(&format!("  {file}\n")), "SHA256SUMS lists no {file}");
        }
    }
    let clusterctl = format!("clusterctl/infrastructure-terraform/v{version}");
    for file in [
        format!("chart/captf-{version}.tgz"),
        format!("{clusterctl}/metadata.yaml"),
        format!("{clusterctl}/infrastructure-components.yaml"),
        format!("{clusterctl}/cluster-template.yaml"),
        format!("{clusterctl}/cluster-template-topology.yaml"),
        format!("{clusterctl}/clusterclass-terraform.yaml"),
    ] {
        assert!(sa.contains(&format!("  {file}\n")), "SHA256SUMS lists no {file}");
    }
    // The components file and the chart pin every image by digest, and no tag is left.
    let components =
        std::fs::read_to_string(dist.join(format!("{clusterctl}/infrastructure-components.yaml"))).expect("components");
    let values = Command::new("tar")
        .current_dir(&dist)
        .args(["-xzOf", &format!("chart/captf-{version}.tgz"), "captf/values.yaml"])
        .output()
        .expect("tar");
    let values = String::from_utf8_lossy(&values.stdout);
    for image in &ia {
        assert!(
            components.contains(&image.reference),
            "the components file does not pin {}",
            image.reference
        );
        assert!(!components.contains(&format!("ghcr.io/captf/{}:{version}", image.name)));
        assert!(
            values.contains(&format!("digest: \"{}\"", image.digest())),
            "values.yaml lacks {image:?}"
        );
    }
    // The runner's SBOM names OpenTofu, git, ssh and the runner, with versions.
    let sbom: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dist.join("sbom/runner.cdx.json")).expect("runner SBOM"))
            .expect("JSON");
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    let components = sbom["components"].as_array().expect("components");
    let version_of = |name: &str| {
        components
            .iter()
            .find(|c| c["name"] == name)
            .and_then(|c| c["version"].as_str())
            .unwrap_or_else(|| panic!("the runner SBOM lists no {name}"))
            .to_string()
    };
    assert!(version_of("github.com/opentofu/opentofu").starts_with('v'));
    assert!(!version_of("git").is_empty());
    assert!(!version_of("openssh-client").is_empty());
    assert!(!version_of("libc6").is_empty());
    assert_eq!(version_of("captf-runner"), version);
}

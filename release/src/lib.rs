//! Helpers of the release tests (docs/release.md): a clean git clone of the workspace to run
//! `scripts/release.sh` in, what the script needs on this machine, and one release built for
//! every test that needs its images, kept in a per-user cache outside the clone ([`cache_dir`])
//! by the commit it was built from, so every clone of that commit on the machine shares it.
//!
//! The clone is of `HEAD`, with the working tree's release machinery (`.gitignore`, `scripts/release.sh`,
//! `scripts/release/`) laid over it and committed when it differs, so the script under test is the
//! one being edited while everything it builds is committed. That commit is made with `HEAD`'s
//! author and times: the same tree gives the same commit, hence the same `SOURCE_DATE_EPOCH`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The files of the working tree laid over the clone.
pub const RELEASE_MACHINERY: [&str; 4] = [
    ".gitignore",
    "scripts/release.sh",
    "scripts/release/imagetool.py",
    "scripts/release/pin.sh",
];

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate is inside the workspace")
        .to_path_buf()
}

/// The per-user cache the release tests share between clones: `$CAPTF_CACHE`, else
/// `$XDG_CACHE_HOME/captf`, else `$HOME/.cache/captf` (the same root as the Go-built parts of
/// `scripts/build-go-part.sh`); the workspace's `target/` if none of them is set.
pub fn cache_dir() -> PathBuf {
    let var = |v: &str| std::env::var_os(v).filter(|d| !d.is_empty()).map(PathBuf::from);
    var("CAPTF_CACHE")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("captf")))
        .or_else(|| var("HOME").map(|d| d.join(".cache/captf")))
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// `$CAPTF_TOOLS_BIN`, else the workspace's `.tools/bin`, as an absolute path.
pub fn tools_bin() -> PathBuf {
    std::env::var_os("CAPTF_TOOLS_BIN")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".tools/bin"))
}

/// Whether `name` runs from PATH.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

/// Why `scripts/release.sh` cannot build here (None: it can): the tools it needs, named.
pub fn release_prerequisites() -> Option<String> {
    let tools = tools_bin();
    let mut missing: Vec<String> = ["tofu", "helm"]
        .into_iter()
        .filter(|t| !tools.join(t).is_file())
        .map(|t| format!("{t} (in {})", tools.display()))
        .collect();
    for t in [
        "git", "cargo", "rustup", "go", "python3", "umoci", "musl-gcc", "apt-get", "dpkg-deb", "readelf",
    ] {
        if !on_path(t) {
            missing.push(t.to_string());
        }
    }
    let musl = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l == "x86_64-unknown-linux-musl")
        });
    if !musl {
        missing.push("the Rust target x86_64-unknown-linux-musl".into());
    }
    (!missing.is_empty()).then(|| {
        format!(
            "scripts/release.sh needs {} (run `bash scripts/setup-tools.sh` as root on Debian 12)",
            missing.join(", ")
        )
    })
}

/// Runs a command, panicking with its output if it fails.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0");
    c
}

/// The output of `git <args>` in `dir`, trimmed.
pub fn git_out(dir: &Path, args: &[&str]) -> String {
    let out = run(git(dir).args(args));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Commits everything in `dir` with `HEAD`'s author, committer and times (so the same tree on the
/// same parent is the same commit).
pub fn commit_all(dir: &Path, message: &str) {
    run(git(dir).args(["add", "-A"]));
    let fmt = |f: &str| git_out(dir, &["log", "-1", &format!("--format={f}")]);
    let (an, ae, ad) = (fmt("%an"), fmt("%ae"), fmt("%ad"));
    let (cn, ce, cd) = (fmt("%cn"), fmt("%ce"), fmt("%cd"));
    run(git(dir)
        .args(["commit", "--quiet", "--no-verify", "-m", message])
        .env("GIT_AUTHOR_NAME", an)
        .env("GIT_AUTHOR_EMAIL", ae)
        .env("GIT_AUTHOR_DATE", ad)
        .env("GIT_COMMITTER_NAME", cn)
        .env("GIT_COMMITTER_EMAIL", ce)
        .env("GIT_COMMITTER_DATE", cd));
}

/// A clean clone of the workspace's `HEAD` at `dest`, with the working tree's release machinery
/// committed over it (see the crate's documentation).
pub fn clean_clone(dest: &Path) {
    let root = workspace_root();
    run(git(&root).args(["clone", "--quiet"]).arg(&root).arg(dest));
    for f in RELEASE_MACHINERY {
        let to = dest.join(f);
        std::fs::create_dir_all(to.parent().expect("a file in a folder")).expect("mkdir");
        std::fs::copy(root.join(f), &to).unwrap_or_else(|e| panic!("copy {f}: {e}"));
    }
    if !git_out(dest, &["status", "--porcelain"]).is_empty() {
        commit_all(dest, "release machinery of the working tree");
    }
}

/// `scripts/release.sh VERSION` in `dir`, with the tests' tools and, in the per-user cache shared
/// by every clone, a cargo build directory (warm from one run to the next; the script maps its
/// path out of the binaries, and cargo locks it while a build uses it) and the downloaded Debian
/// packages (kept by their SHA-256).
pub fn release_command(dir: &Path, version: &str) -> Command {
    let mut c = Command::new("bash");
    captf_testsupport::without_test_cargo_env(&mut c);
    c.current_dir(dir)
        .arg("scripts/release.sh")
        .arg(version)
        .env("CAPTF_TOOLS_BIN", tools_bin())
        .env("CARGO_TARGET_DIR", cache_dir().join("release-target"))
        .env("CAPTF_RELEASE_CACHE", cache_dir().join("release-downloads"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("SOURCE_DATE_EPOCH")
        .env_remove("CAPTF_IMAGE_REPOSITORY")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS");
    c
}

/// The workspace version (the release's VERSION).
pub fn workspace_version() -> String {
    let toml = std::fs::read_to_string(workspace_root().join("Cargo.toml")).expect("Cargo.toml");
    let after = toml.split("[workspace.package]").nth(1).expect("[workspace.package]");
    after
        .lines()
        .find_map(|l| l.strip_prefix("version = \"").and_then(|v| v.strip_suffix('"')))
        .expect("a workspace version")
        .to_string()
}

/// One image of a release: `dist/images/images.txt`'s line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub name: String,
    /// `repository@sha256:...`
    pub reference: String,
    pub compressed: u64,
    pub uncompressed: u64,
}

impl Image {
    pub fn digest(&self) -> &str {
        self.reference.split_once('@').map(|(_, d)| d).unwrap_or_default()
    }
}

/// The images of a `dist/`.
pub fn images(dist: &Path) -> Vec<Image> {
    let text = std::fs::read_to_string(dist.join("images/images.txt")).expect("dist/images/images.txt");
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 4, "images.txt line {l:?}");
            Image {
                name: f[0].into(),
                reference: f[1].into(),
                compressed: f[2].parse().expect("a size"),
                uncompressed: f[3].parse().expect("a size"),
            }
        })
        .collect()
}

/// How many releases the cache keeps: the newest by the time they were last used.
const KEPT_RELEASES: usize = 3;

/// Where the release built from a commit is kept for the tests of this and other crates, and of
/// other clones. Keyed by the commit, not only its tree: the images' revision label and times
/// come from the commit.
fn kept_dist(commit: &str) -> PathBuf {
    cache_dir().join("releases").join(format!("dist-{}", &commit[..16]))
}

/// The `dist/` of a release of a clean clone (built by `release.sh` unless one from the same tree
/// is kept), and whether it was built now. `Err`: why it cannot be built here. One build at a
/// time on the machine: test binaries run side by side (scripts/run-tests.py), so the second to
/// ask waits on a lock file in the cache and then finds the first one's release kept.
pub fn release_dist() -> Result<(PathBuf, bool), String> {
    if let Some(why) = release_prerequisites() {
        return Err(why);
    }
    let releases = cache_dir().join("releases");
    std::fs::create_dir_all(&releases).expect("the releases cache");
    let lock = std::fs::File::create(releases.join(".build.lock")).expect("the build lock file");
    // Released when `lock` is dropped (or the process ends).
    lock.lock().expect("lock the release build");
    let tmp = tempfile::tempdir().expect("tempdir");
    let clone = tmp.path().join("captf");
    clean_clone(&clone);
    let kept = kept_dist(&git_out(&clone, &["rev-parse", "HEAD"]));
    if kept.join("SHA256SUMS").is_file() {
        // Marks it used, for the pruning below.
        run(Command::new("touch").arg(&kept));
        return Ok((kept, false));
    }
    run(&mut release_command(&clone, &workspace_version()));
    keep(&clone.join("dist"), &kept);
    Ok((kept, true))
}

/// Copies `dist` to `kept` whole or not at all (another clone may read the cache meanwhile), then
/// drops all but the newest [`KEPT_RELEASES`] releases.
fn keep(dist: &Path, kept: &Path) {
    let parent = kept.parent().expect("a parent");
    std::fs::create_dir_all(parent).expect("mkdir");
    let partial = parent.join(format!(".partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    run(Command::new("cp").arg("-a").arg(dist).arg(&partial));
    let _ = std::fs::remove_dir_all(kept);
    std::fs::rename(&partial, kept).unwrap_or_else(|e| panic!("keep {}: {e}", kept.display()));
    let mut releases: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(parent)
        .expect("the releases cache")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("dist-"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    releases.sort_by_key(|r| std::cmp::Reverse(r.0));
    for (_, old) in releases.into_iter().skip(KEPT_RELEASES) {
        let _ = std::fs::remove_dir_all(old);
    }
}

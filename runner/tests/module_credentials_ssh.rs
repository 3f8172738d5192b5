//! Module credentials against a real `git` server over SSH: an `sshd` on loopback started by the
//! test, a bare repository holding a module, and the environment `credentials::prepare` builds
//! from a mounted Secret. `git` must reach it with the key, and must refuse a host whose key is
//! not in `known_hosts`; the real Terraform (`.tools/bin/terraform`, from
//! `scripts/setup-tools.sh`) must fetch the module with `init -from-module=git::ssh://…`.
//!
//! The server needs `sshd`, `ssh-keygen`, `git` and root (sshd's privilege separation); where
//! one is missing, each test says so and skips, except under `CI`, where that fails it
//! (`captf_testsupport::cannot_run`, the workspace's one rule).

#![allow(clippy::unwrap_used)]

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use captf_runner::credentials;

const SSHD: &str = "/usr/sbin/sshd";

fn missing_tools() -> Option<String> {
    if !Path::new(SSHD).exists() {
        return Some(format!("{SSHD} is not installed (Debian: openssh-server)"));
    }
    for tool in ["ssh", "ssh-keygen", "git"] {
        if Command::new(tool).arg("-V").output().is_err() && Command::new(tool).arg("--version").output().is_err() {
            return Some(format!("{tool} is not installed"));
        }
    }
    if !nix_is_root() {
        return Some("sshd on loopback needs root here (privilege separation)".into());
    }
    None
}

fn nix_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn keygen(path: &Path) -> String {
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "captf-test", "-f"])
        .arg(path));
    fs::read_to_string(path.with_extension("pub")).unwrap()
}

/// An sshd on 127.0.0.1 that lets the client key in; killed on drop.
struct Server {
    child: Child,
    port: u16,
    host_public_key: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_sshd(dir: &Path, client_public_key: &str) -> Server {
    let host_key = dir.join("host_key");
    let host_public_key = keygen(&host_key);
    let authorized = dir.join("authorized_keys");
    fs::write(&authorized, client_public_key).unwrap();
    // sshd's privilege separation directory (absent on a machine where sshd never ran).
    fs::create_dir_all("/run/sshd").unwrap();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = dir.join("sshd_config");
    fs::write(
        &config,
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nAuthorizedKeysFile {}\nStrictModes no\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
             UsePAM no\nPidFile {}\n",
            host_key.display(),
            authorized.display(),
            dir.join("sshd.pid").display()
        ),
    )
    .unwrap();
    let child = Command::new(SSHD)
        .args(["-D", "-e", "-f"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Ready when it accepts connections (bounded; a server that never listens fails the test).
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "sshd never listened on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Server {
        child,
        port,
        host_public_key,
    }
}

/// A bare repository holding a one-file module.
fn module_repo(dir: &Path) -> PathBuf {
    let bare = dir.join("module.git");
    run(Command::new("git")
        .args(["init", "-q", "--bare", "-b", "main"])
        .arg(&bare));
    let work = dir.join("module-work");
    run(Command::new("git").args(["init", "-q", "-b", "main"]).arg(&work));
    fs::write(
        work.join("main.tf"),
        "output \"fetched\" {\n  value = \"over ssh\"\n}\n",
    )
    .unwrap();
    let git = |args: &[&str]| {
        run(Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(&work));
    };
    git(&["add", "main.tf"]);
    git(&["commit", "-q", "-m", "module"]);
    git(&["push", "-q", bare.to_str().unwrap(), "main"]);
    bare
}

/// The Secret as the kubelet mounts it, holding the client key and `known_hosts`.
fn mount(dir: &Path, key: &str, known_hosts: &str) -> PathBuf {
    let m = dir.join("mounted");
    fs::create_dir_all(&m).unwrap();
    fs::write(m.join("ssh-privatekey"), key).unwrap();
    fs::write(m.join("known_hosts"), known_hosts).unwrap();
    m
}

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    server: Server,
    repo: PathBuf,
    client_key: String,
}

fn fixture() -> Option<Fixture> {
    if let Some(why) = missing_tools() {
        captf_testsupport::cannot_run(why);
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let client = root.join("client_key");
    let client_public = keygen(&client);
    let server = start_sshd(&root, &client_public);
    let repo = module_repo(&root);
    Some(Fixture {
        client_key: fs::read_to_string(&client).unwrap(),
        _dir: dir,
        root,
        server,
        repo,
    })
}

impl Fixture {
    fn known_hosts(&self) -> String {
        format!("[127.0.0.1]:{} {}", self.server.port, self.server.host_public_key)
    }

    fn url(&self) -> String {
        format!("ssh://root@127.0.0.1:{}{}", self.server.port, self.repo.display())
    }

    fn git_ls_remote(&self, known_hosts: &str, sub: &str) -> std::process::Output {
        let private = self.root.join(sub);
        fs::create_dir_all(&private).unwrap();
        let m = mount(&private, &self.client_key, known_hosts);
        let prepared = credentials::prepare(&m, &private).unwrap();
        Command::new("git")
            .args(["ls-remote", &self.url()])
            .env_remove("SSH_AUTH_SOCK")
            .envs(prepared.env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap()
    }
}

#[test]
fn git_over_ssh_reaches_the_module_with_the_mounted_key() {
    let Some(f) = fixture() else { return };
    let out = f.git_ls_remote(&f.known_hosts(), "ok");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("refs/heads/main"));
}

#[test]
fn git_over_ssh_refuses_a_host_whose_key_is_not_in_known_hosts() {
    let Some(f) = fixture() else { return };
    let stranger = keygen(&f.root.join("stranger_key"));
    let out = f.git_ls_remote(&format!("[127.0.0.1]:{} {stranger}", f.server.port), "stranger");
    assert!(!out.status.success(), "a host with another key must be refused");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Host key verification failed"), "{err}");
}

#[test]
fn real_terraform_init_from_module_fetches_git_over_ssh_with_the_mounted_key() {
    let Some(f) = fixture() else { return };
    let terraform = std::env::var("CAPTF_TOOLS_BIN")
        .map(|b| PathBuf::from(b).join("terraform"))
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/bin/terraform"));
    if !terraform.exists() {
        captf_testsupport::cannot_run(format!(
            "no Terraform at {} (scripts/setup-tools.sh installs it)",
            terraform.display()
        ));
        return;
    }
    let private = f.root.join("tf");
    fs::create_dir_all(&private).unwrap();
    let m = mount(&private, &f.client_key, &f.known_hosts());
    let prepared = credentials::prepare(&m, &private).unwrap();
    let work = f.root.join("work");
    fs::create_dir_all(&work).unwrap();
    let out = Command::new(&terraform)
        .args(["init", "-input=false", "-no-color"])
        .arg(format!("-from-module=git::{}", f.url()))
        .current_dir(&work)
        .env_remove("SSH_AUTH_SOCK")
        .env("TF_IN_AUTOMATION", "1")
        .envs(prepared.env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let main = fs::read_to_string(work.join("main.tf")).unwrap();
    assert!(main.contains("over ssh"), "{main}");
}

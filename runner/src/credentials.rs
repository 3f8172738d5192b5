//! Module credentials: the Secret the controller mounts (`spec.module.credentials`) turned into
//! what `git` and Terraform read while `init` fetches the module, and nothing more.
//!
//! The mounted files are copied into a private directory (mode 0700, files 0600: `ssh` refuses
//! a key others may read, and the kubelet's mount is group-readable), which is removed when the
//! run ends. Only the `init` commands get the environment that points at them; the values are
//! masked in everything the runner writes. What each key is for: `captf_shared::module_credentials`.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use captf_shared::module_credentials::{self as mc, Provided};

/// The most a credentials file may hold (a Secret holds at most 1 MiB in all).
const MAX_FILE: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error(
        "the module credentials Secret is not mounted at {path} (deleted after the Job was created?); \
         spec.module.credentials.secretRef names a Secret that must exist"
    )]
    NotMounted { path: String },
    #[error("the module credentials Secret {0}")]
    Unusable(mc::Unusable),
    #[error("could not read the module credentials at {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("could not prepare the module credentials in {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The credentials, ready for `init`. Dropping it removes the private copies.
#[derive(Debug)]
pub struct Prepared {
    /// Set for the `init` commands only.
    pub env: Vec<(String, String)>,
    /// Values to mask in the log and the result.
    pub secrets: Vec<String>,
    dir: PathBuf,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The Secret's keys as the kubelet mounts them: regular files (through its `..data` symlinks),
/// skipping the kubelet's own `..`-prefixed entries.
fn read_mounted(mounted: &Path) -> Result<Vec<(String, Vec<u8>)>, CredentialsError> {
    let read_err = |source| CredentialsError::Read {
        path: mounted.display().to_string(),
        source,
    };
    let entries = match fs::read_dir(mounted) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CredentialsError::NotMounted {
                path: mounted.display().to_string(),
            });
        }
        Err(e) => return Err(read_err(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(read_err)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") {
            continue;
        }
        let path = entry.path();
        let meta = fs::metadata(&path).map_err(read_err)?;
        if !meta.is_file() {
            continue;
        }
        if meta.len() > MAX_FILE {
            return Err(read_err(std::io::Error::other(format!("{name} is larger than 1 MiB"))));
        }
        out.push((name, fs::read(&path).map_err(read_err)?));
    }
    if out.is_empty() {
        // An optional Secret volume whose Secret is gone mounts as an empty directory.
        return Err(CredentialsError::NotMounted {
            path: mounted.display().to_string(),
        });
    }
    out.sort();
    Ok(out)
}

fn write_private(dir: &Path, name: &str, data: &[u8]) -> Result<PathBuf, CredentialsError> {
    let path = dir.join(name);
    let write = || -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        f.write_all(data)
    };
    write().map_err(|source| CredentialsError::Write {
        path: path.display().to_string(),
        source,
    })?;
    Ok(path)
}

/// Single-quote for the shell git runs `GIT_SSH_COMMAND` with.
fn shell_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

/// The passwords and tokens in `.git-credentials` (`https://user:token@host` lines) and
/// `.netrc` (`password <value>`).
fn file_secrets(name: &str, text: &str) -> Vec<String> {
    match name {
        mc::GIT_CREDENTIALS => text.lines().flat_map(crate::redact::source_secrets).collect(),
        mc::NETRC => {
            let words: Vec<&str> = text.split_whitespace().collect();
            words
                .windows(2)
                .filter(|w| w[0] == "password")
                .map(|w| w[1].to_string())
                .collect()
        }
        _ => Vec::new(),
    }
}

/// Read the mounted Secret at `mounted`, check it, and copy what `init` needs into a fresh
/// private directory under `private_root`.
pub fn prepare(mounted: &Path, private_root: &Path) -> Result<Prepared, CredentialsError> {
    let files = read_mounted(mounted)?;
    let provided: Provided =
        mc::check(files.iter().map(|(k, v)| (k.as_str(), v.is_empty()))).map_err(CredentialsError::Unusable)?;
    let dir = private_root.join(format!("captf-credentials-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|source| CredentialsError::Write {
            path: dir.display().to_string(),
            source,
        })?;
    // From here on, dropping `prepared` removes the directory whatever fails next.
    let mut prepared = Prepared {
        // Never wait for a password prompt nobody can answer.
        env: vec![("GIT_TERMINAL_PROMPT".into(), "0".into())],
        secrets: Vec::new(),
        dir,
    };
    let get = |key: &str| files.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_slice());
    if provided.ssh
        && let (Some(key), Some(hosts)) = (get(mc::SSH_PRIVATE_KEY), get(mc::KNOWN_HOSTS))
    {
        // The key's base64 body lines, should anything print the file.
        prepared.secrets.extend(
            String::from_utf8_lossy(key)
                .lines()
                .map(str::trim)
                .filter(|l| !l.starts_with("-----") && l.len() >= 16)
                .map(String::from),
        );
        let key = write_private(&prepared.dir, "id", key)?;
        let hosts = write_private(&prepared.dir, "known_hosts", hosts)?;
        prepared.env.push((
            "GIT_SSH_COMMAND".into(),
            format!(
                "ssh -i {} -o IdentitiesOnly=yes -o UserKnownHostsFile={} -o StrictHostKeyChecking=yes \
                 -o BatchMode=yes",
                shell_quote(&key),
                shell_quote(&hosts)
            ),
        ));
    }
    if provided.git_credentials
        && let Some(data) = get(mc::GIT_CREDENTIALS)
    {
        let path = write_private(&prepared.dir, "git-credentials", data)?;
        prepared.env.extend([
            ("GIT_CONFIG_COUNT".into(), "1".into()),
            ("GIT_CONFIG_KEY_0".into(), "credential.helper".into()),
            ("GIT_CONFIG_VALUE_0".into(), format!("store --file={}", path.display())),
        ]);
        prepared
            .secrets
            .extend(file_secrets(mc::GIT_CREDENTIALS, &String::from_utf8_lossy(data)));
    }
    if provided.netrc
        && let Some(data) = get(mc::NETRC)
    {
        let path = write_private(&prepared.dir, "netrc", data)?;
        prepared.env.push(("NETRC".into(), path.display().to_string()));
        prepared
            .secrets
            .extend(file_secrets(mc::NETRC, &String::from_utf8_lossy(data)));
    }
    for (_, key) in &provided.registry_tokens {
        if let Some(data) = get(key) {
            let token = String::from_utf8_lossy(data).trim().to_string();
            prepared.secrets.push(token.clone());
            prepared.env.push((key.clone(), token));
        }
    }
    Ok(prepared)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    /// A Secret volume as the kubelet writes it: `..data` → a timestamped directory, and each
    /// key a symlink through `..data`.
    fn mount(root: &Path, keys: &[(&str, &str)]) -> PathBuf {
        let m = root.join("mounted");
        let ts = m.join("..2026_11_30_10_00_00.123");
        fs::create_dir_all(&ts).unwrap();
        for (k, v) in keys {
            fs::write(ts.join(k), v).unwrap();
            symlink(format!("..data/{k}"), m.join(k)).unwrap();
        }
        symlink("..2026_11_30_10_00_00.123", m.join("..data")).unwrap();
        m
    }

    fn env<'a>(p: &'a Prepared, name: &str) -> Option<&'a str> {
        p.env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn an_ssh_key_is_copied_owner_only_and_host_keys_are_always_checked() {
        let t = tempfile::tempdir().unwrap();
        let m = mount(t.path(), &[("ssh-privatekey", "KEY"), ("known_hosts", "HOSTS")]);
        let p = prepare(&m, t.path()).unwrap();
        let cmd = env(&p, "GIT_SSH_COMMAND").unwrap();
        assert!(cmd.contains("StrictHostKeyChecking=yes"), "{cmd}");
        assert!(
            cmd.contains("IdentitiesOnly=yes") && cmd.contains("BatchMode=yes"),
            "{cmd}"
        );
        let dir = p.dir.clone();
        assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        for f in ["id", "known_hosts"] {
            assert_eq!(fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o777, 0o600);
        }
        assert_eq!(fs::read_to_string(dir.join("id")).unwrap(), "KEY");
        assert_eq!(env(&p, "GIT_TERMINAL_PROMPT"), Some("0"));
        drop(p);
        assert!(!dir.exists(), "the private copies go with the run");
    }

    #[test]
    fn git_credentials_netrc_and_tokens_become_init_env_and_their_secrets_are_masked() {
        let t = tempfile::tempdir().unwrap();
        let m = mount(
            t.path(),
            &[
                (".git-credentials", "https://ci:glpat-s3cr3tT0ken@gitlab.example.com\n"),
                (".netrc", "machine dl.example.com login ci password n3trcPassw0rd\n"),
                ("TF_TOKEN_app_terraform_io", "atlasv1.t0ken\n"),
            ],
        );
        let p = prepare(&m, t.path()).unwrap();
        assert_eq!(env(&p, "GIT_CONFIG_KEY_0"), Some("credential.helper"));
        assert!(env(&p, "GIT_CONFIG_VALUE_0").unwrap().starts_with("store --file="));
        assert!(env(&p, "NETRC").unwrap().ends_with("/netrc"));
        assert_eq!(env(&p, "TF_TOKEN_app_terraform_io"), Some("atlasv1.t0ken"));
        for s in ["glpat-s3cr3tT0ken", "n3trcPassw0rd", "atlasv1.t0ken"] {
            assert!(p.secrets.iter().any(|x| x == s), "{s} is masked: {:?}", p.secrets.len());
        }
    }

    #[test]
    fn a_missing_or_emptied_mount_or_an_unusable_secret_is_a_clear_error() {
        let t = tempfile::tempdir().unwrap();
        let e = prepare(&t.path().join("nowhere"), t.path()).unwrap_err();
        assert!(e.to_string().contains("is not mounted"), "{e}");
        fs::create_dir(t.path().join("empty")).unwrap();
        let e = prepare(&t.path().join("empty"), t.path()).unwrap_err();
        assert!(e.to_string().contains("is not mounted"), "{e}");
        let m = mount(t.path(), &[("ssh-privatekey", "KEY")]);
        let e = prepare(&m, t.path()).unwrap_err();
        assert!(e.to_string().contains("host keys are always checked"), "{e}");
        assert!(
            fs::read_dir(t.path()).unwrap().all(|e| !e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("captf-credentials-")),
            "nothing is left behind"
        );
    }
}

//! The module credentials Secret (`spec.module.credentials.secretRef`): which keys it may hold,
//! what each is for, and when it is usable. The controller checks it before a Job starts (an
//! unusable Secret holds the object with a message naming the field); the runner checks it again
//! on the files the kubelet mounted, and turns it into what `git` and Terraform read during
//! `init`.
//!
//! | key | what it is | used for |
//! | --- | --- | --- |
//! | `ssh-privatekey` + `known_hosts` | an SSH private key and the hosts it may talk to | `git::ssh://…`, `git@host:…` |
//! | `.git-credentials` | `https://user:token@host` lines (git's credential store) | `git::https://…` |
//! | `.netrc` | `machine host login … password …` | `http(s)://…` archives |
//! | `TF_TOKEN_<host>` | a registry API token (host: `.` as `_`, `-` as `__`) | registry modules |
//!
//! Host keys are always checked: a private key without `known_hosts` is refused.

use std::collections::BTreeSet;
use std::fmt;

/// Where the runner pod mounts the Secret (read-only, mode 0400): under CAPTF's own `/captf`,
/// which no tenant mount may touch.
pub const MOUNT_PATH: &str = "/captf/module-credentials";
/// The runner pod's volume of the Secret.
pub const VOLUME: &str = "module-credentials";
/// The SSH private key (the key name of a `kubernetes.io/ssh-auth` Secret).
pub const SSH_PRIVATE_KEY: &str = "ssh-privatekey";
/// OpenSSH `known_hosts` lines for the hosts the key may reach.
pub const KNOWN_HOSTS: &str = "known_hosts";
/// git's credential store file.
pub const GIT_CREDENTIALS: &str = ".git-credentials";
/// A netrc file for HTTP(S) downloads.
pub const NETRC: &str = ".netrc";
/// Prefix of registry token keys.
pub const TOKEN_PREFIX: &str = "TF_TOKEN_";

/// What a usable Secret provides.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Provided {
    pub ssh: bool,
    pub git_credentials: bool,
    pub netrc: bool,
    /// Registry hosts with a token (decoded from the key names), and the key of each.
    pub registry_tokens: Vec<(String, String)>,
}

/// Why a Secret can't be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unusable {
    /// No key CAPTF knows.
    NothingUsable,
    /// A key CAPTF doesn't know (a typo would otherwise be silently ignored).
    UnknownKey(String),
    /// A key whose value is empty.
    Empty(String),
    /// An SSH key without `known_hosts`, or `known_hosts` without a key.
    SshIncomplete { missing: &'static str },
    /// A `TF_TOKEN_` key whose host part is not a host name.
    BadTokenHost(String),
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unusable::NothingUsable => write!(
                f,
                "holds none of the keys {SSH_PRIVATE_KEY} (with {KNOWN_HOSTS}), {GIT_CREDENTIALS}, {NETRC} or \
                 {TOKEN_PREFIX}<host>"
            ),
            Unusable::UnknownKey(k) => write!(
                f,
                "has key {k:?}, which is none of {SSH_PRIVATE_KEY}, {KNOWN_HOSTS}, {GIT_CREDENTIALS}, {NETRC} or \
                 {TOKEN_PREFIX}<host>"
            ),
            Unusable::Empty(k) => write!(f, "has an empty {k:?}"),
            Unusable::SshIncomplete { missing } => write!(
                f,
                "has {} without {missing:?}: host keys are always checked, so an SSH key needs known_hosts",
                if *missing == KNOWN_HOSTS {
                    SSH_PRIVATE_KEY
                } else {
                    KNOWN_HOSTS
                }
            ),
            Unusable::BadTokenHost(k) => write!(
                f,
                "has key {k:?}, whose host part is not a host name (write `.` as `_` and `-` as `__`, e.g. \
                 TF_TOKEN_app_terraform_io)"
            ),
        }
    }
}

/// The registry host a `TF_TOKEN_` key names: `_` is `.`, `__` is `-` (Terraform's own
/// convention). None when the rest is not a host name.
pub fn token_host(key: &str) -> Option<String> {
    let rest = key.strip_prefix(TOKEN_PREFIX)?;
    let host = rest.replace("__", "\u{0}").replace('_', ".").replace('\u{0}', "-");
    let ok = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    ok.then_some(host)
}

/// Check a Secret by its keys and whether each value is empty.
pub fn check<'a>(entries: impl IntoIterator<Item = (&'a str, bool)>) -> Result<Provided, Unusable> {
    let mut keys = BTreeSet::new();
    for (k, empty) in entries {
        if empty {
            return Err(Unusable::Empty(k.to_string()));
        }
        keys.insert(k);
    }
    let mut p = Provided::default();
    for k in &keys {
        match *k {
            SSH_PRIVATE_KEY | KNOWN_HOSTS => {}
            GIT_CREDENTIALS => p.git_credentials = true,
            NETRC => p.netrc = true,
            k if k.starts_with(TOKEN_PREFIX) => match token_host(k) {
                Some(host) => p.registry_tokens.push((host, k.to_string())),
                None => return Err(Unusable::BadTokenHost(k.to_string())),
            },
            k => return Err(Unusable::UnknownKey(k.to_string())),
        }
    }
    match (keys.contains(SSH_PRIVATE_KEY), keys.contains(KNOWN_HOSTS)) {
        (true, true) => p.ssh = true,
        (true, false) => return Err(Unusable::SshIncomplete { missing: KNOWN_HOSTS }),
        (false, true) => {
            return Err(Unusable::SshIncomplete {
                missing: SSH_PRIVATE_KEY,
            });
        }
        (false, false) => {}
    }
    if p == Provided::default() {
        return Err(Unusable::NothingUsable);
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn keys(ks: &[&'static str]) -> Result<Provided, Unusable> {
        check(ks.iter().map(|k| (*k, false)))
    }

    #[test]
    fn an_ssh_key_is_usable_only_with_known_hosts() {
        assert!(keys(&["ssh-privatekey", "known_hosts"]).unwrap().ssh);
        assert_eq!(
            keys(&["ssh-privatekey"]),
            Err(Unusable::SshIncomplete { missing: KNOWN_HOSTS })
        );
        assert_eq!(
            keys(&["known_hosts"]),
            Err(Unusable::SshIncomplete {
                missing: SSH_PRIVATE_KEY
            })
        );
        let msg = Unusable::SshIncomplete { missing: KNOWN_HOSTS }.to_string();
        assert!(msg.contains("host keys are always checked"), "{msg}");
    }

    #[test]
    fn git_credentials_netrc_and_tokens_are_each_usable_alone() {
        assert!(keys(&[".git-credentials"]).unwrap().git_credentials);
        assert!(keys(&[".netrc"]).unwrap().netrc);
        assert_eq!(
            keys(&["TF_TOKEN_app_terraform_io"]).unwrap().registry_tokens,
            vec![("app.terraform.io".to_string(), "TF_TOKEN_app_terraform_io".to_string())]
        );
    }

    #[test]
    fn a_secret_with_no_known_key_or_an_unknown_key_or_an_empty_value_is_unusable() {
        assert_eq!(keys(&[]), Err(Unusable::NothingUsable));
        assert_eq!(
            keys(&[".git-credentials", "id_rsa"]),
            Err(Unusable::UnknownKey("id_rsa".into()))
        );
        assert_eq!(check([(".netrc", true)]), Err(Unusable::Empty(".netrc".into())));
    }

    #[test]
    fn token_keys_name_their_host_with_underscores_for_dots_and_double_underscores_for_dashes() {
        assert_eq!(
            token_host("TF_TOKEN_app_terraform_io").as_deref(),
            Some("app.terraform.io")
        );
        assert_eq!(
            token_host("TF_TOKEN_my__registry_example_com").as_deref(),
            Some("my-registry.example.com")
        );
        for bad in [
            "TF_TOKEN_",
            "TF_TOKEN__x",
            "TF_TOKEN_a__",
            "TF_TOKEN_a b",
            "TF_TOKEN_a.._b",
        ] {
            assert_eq!(token_host(bad), None, "{bad}");
        }
        assert_eq!(keys(&["TF_TOKEN_"]), Err(Unusable::BadTokenHost("TF_TOKEN_".into())));
    }
}

//! Client-side state encryption (`spec.stateEncryption`): the passphrases the kubelet mounted,
//! turned into the configuration OpenTofu reads from `TF_ENCRYPTION` (docs/state-encryption.md).
//!
//! The configuration is modelled as JSON ([`config`]) and rendered as HCL's native syntax
//! ([`hcl`]), with every passphrase written as one quoted HCL string (quotes, backslashes,
//! control characters and HCL's template sequences `${`, `%{` escaped), so none can break out
//! of it. (HCL's JSON form would need no renderer, but OpenTofu 1.10 crashes on it: it does not
//! read a method's `keys` reference from a JSON string.) It goes to the child's environment only,
//! never to a file of the work directory, and the passphrases are masked in everything the
//! runner writes.
//!
//! | mode | the state now | writes | reads |
//! | --- | --- | --- | --- |
//! | `Encrypt` | encrypted, or none yet | AES-GCM with the passphrase, enforced (OpenTofu refuses plaintext) | with the passphrase, else the previous one when given |
//! | `Encrypt` | plaintext | AES-GCM with the passphrase | plaintext: the migration of a state written before encryption was turned on |
//! | `Decrypt` | any | plaintext | with the passphrase, or plaintext |
//!
//! Which form the state has now is read from the state Secret before OpenTofu runs ([`stored`]):
//! OpenTofu refuses an `unencrypted` fallback together with `enforced`, and warns about one in
//! every run, so the plaintext fallback is configured only for the run that migrates.

use std::path::Path;

use captf_shared::state_encryption::{
    EncryptionInputs, MIN_OPENTOFU, PASSPHRASE_FILE, PREVIOUS_PASSPHRASE_FILE, passphrase_problem,
};
use captf_shared::types::EncryptionMode;
use serde_json::{Value, json};

use crate::program::Program;

/// The environment variable OpenTofu reads its encryption configuration from.
pub const TF_ENCRYPTION: &str = "TF_ENCRYPTION";
/// The most a passphrase file may hold.
const MAX_FILE: u64 = 64 * 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EncryptionError {
    #[error(
        "spec.stateEncryption is set but CAPTF_STATE_ENCRYPTION_DIR is not: the passphrases are not mounted, so the state is not touched"
    )]
    NotMounted,
    #[error(
        "the state encryption passphrase {which} (Secret key {secret}) is not mounted at {path} (deleted after the Job was created?); the state is not touched"
    )]
    Missing {
        which: &'static str,
        secret: String,
        path: String,
    },
    #[error("the state encryption passphrase {which} (Secret key {secret}) {why}")]
    Unusable {
        which: &'static str,
        secret: String,
        why: String,
    },
    #[error("could not read the state encryption passphrase at {path}: {why}")]
    Read { path: String, why: String },
    #[error(
        "spec.stateEncryption needs OpenTofu {}.{} or later, but CAPTF_TF_BINARY runs {found}; the state is not touched",
        MIN_OPENTOFU.0, MIN_OPENTOFU.1
    )]
    NeedsOpenTofu { found: String },
}

/// What one run encrypts with.
#[derive(Clone, PartialEq, Eq)]
pub struct Passphrases {
    pub mode: EncryptionMode,
    pub current: String,
    pub previous: Option<String>,
    /// The key provider's name of each: OpenTofu keeps a key provider's salt in the state under
    /// its name, so a name follows its Secret key (a rotation's previous passphrase must be found
    /// under the name it was written with).
    pub current_name: String,
    pub previous_name: Option<String>,
}

/// The key provider's name for a passphrase at `secret_key` (`<secret>/<key>`): an HCL
/// identifier, the same for the same Secret key in every run.
pub fn provider_name(secret_key: &str) -> String {
    let hash = captf_shared::inputs::sha256_hex(secret_key.as_bytes());
    format!("captf_{}", &hash[..16])
}

impl std::fmt::Debug for Passphrases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Passphrases")
            .field("mode", &self.mode)
            .field("current", &"<masked>")
            .field("previous", &self.previous.as_ref().map(|_| "<masked>"))
            .finish()
    }
}

impl Passphrases {
    /// The values to mask in the log and the result.
    pub fn secrets(&self) -> Vec<String> {
        std::iter::once(self.current.clone())
            .chain(self.previous.clone())
            .collect()
    }

    /// The environment OpenTofu gets for every command of the run.
    pub fn env(&self, stored: Stored) -> Vec<(String, String)> {
        vec![(TF_ENCRYPTION.to_string(), hcl(&config(self, stored)))]
    }
}

fn read_one(dir: &Path, file: &str, which: &'static str, secret: &str) -> Result<String, EncryptionError> {
    let path = dir.join(file);
    let shown = path.display().to_string();
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(EncryptionError::Missing {
                which,
                secret: secret.to_string(),
                path: shown,
            });
        }
        Err(e) => {
            return Err(EncryptionError::Read {
                path: shown,
                why: e.to_string(),
            });
        }
    };
    if meta.len() > MAX_FILE {
        return Err(EncryptionError::Unusable {
            which,
            secret: secret.to_string(),
            why: format!("holds {} bytes; a passphrase is at most {MAX_FILE}", meta.len()),
        });
    }
    let bytes = std::fs::read(&path).map_err(|e| EncryptionError::Read {
        path: shown,
        why: e.to_string(),
    })?;
    let text = String::from_utf8(bytes).map_err(|_| EncryptionError::Unusable {
        which,
        secret: secret.to_string(),
        why: "is not UTF-8 text".to_string(),
    })?;
    // A trailing newline (a Secret made with `--from-file` of an edited file) is no part of it.
    let text = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if let Some(why) = passphrase_problem(text) {
        return Err(EncryptionError::Unusable {
            which,
            secret: secret.to_string(),
            why,
        });
    }
    Ok(text.to_string())
}

/// The passphrases the inputs ask for, read from the mount `dir` (`CAPTF_STATE_ENCRYPTION_DIR`).
/// `None` when the inputs ask for no encryption.
pub fn read(inputs: Option<&EncryptionInputs>, dir: Option<&Path>) -> Result<Option<Passphrases>, EncryptionError> {
    let Some(want) = inputs else { return Ok(None) };
    let dir = dir.ok_or(EncryptionError::NotMounted)?;
    let current = read_one(dir, PASSPHRASE_FILE, "passphraseSecretRef", &want.passphrase)?;
    // The same Secret key as the current one is the same passphrase: nothing to fall back to.
    let previous_ref = want.previous_passphrase.as_ref().filter(|p| **p != want.passphrase);
    let previous = match previous_ref {
        Some(secret) => Some(read_one(
            dir,
            PREVIOUS_PASSPHRASE_FILE,
            "previousPassphraseSecretRef",
            secret,
        )?),
        None => None,
    };
    Ok(Some(Passphrases {
        mode: want.mode,
        current,
        previous,
        current_name: provider_name(&want.passphrase),
        previous_name: previous_ref.map(|p| provider_name(p)),
    }))
}

/// A string as a quoted HCL string that yields exactly it.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '$' | '%' if chars.peek() == Some(&'{') => {
                out.push(c);
                out.push(c);
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The HCL text of a [`config`] model.
pub fn hcl(model: &Value) -> String {
    let mut out = String::new();
    let entries = |v: &Value| v.as_object().cloned().unwrap_or_default();
    for (name, p) in entries(&model["key_provider"]["pbkdf2"]) {
        let passphrase = p["passphrase"].as_str().unwrap_or_default();
        out.push_str(&format!(
            "key_provider \"pbkdf2\" \"{name}\" {{\n  passphrase = {}\n}}\n",
            quoted(passphrase)
        ));
    }
    for (name, m) in entries(&model["method"]["aes_gcm"]) {
        let keys = m["keys"].as_str().unwrap_or_default();
        out.push_str(&format!("method \"aes_gcm\" \"{name}\" {{\n  keys = {keys}\n}}\n"));
    }
    for (name, _) in entries(&model["method"]["unencrypted"]) {
        out.push_str(&format!("method \"unencrypted\" \"{name}\" {{}}\n"));
    }
    for block in ["state", "plan"] {
        let t = &model[block];
        out.push_str(&format!(
            "{block} {{\n  method = {}\n",
            t["method"].as_str().unwrap_or_default()
        ));
        if t["enforced"] == Value::Bool(true) {
            out.push_str("  enforced = true\n");
        }
        if let Some(f) = t["fallback"]["method"].as_str() {
            out.push_str(&format!("  fallback {{\n    method = {f}\n  }}\n"));
        }
        out.push_str("}\n");
    }
    out
}

/// What the state Secret holds now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// No state yet, or it could not be read (then OpenTofu reads it with the passphrases only,
    /// and a plaintext state fails with its own message rather than being taken).
    NoneOrUnknown,
    /// A state OpenTofu wrote without encryption.
    Plaintext,
    /// An encrypted state.
    Encrypted,
}

/// The most of the decompressed state looked at: the form shows in its first key.
const STORED_PREFIX: u64 = 4096;

/// The form of a state from its gzip-compressed bytes (the backend's `tfstate` value, or its
/// first part): a plaintext state's first key is `"version"`, an encrypted one's is not, and it
/// has `"encrypted_data"` (PURE).
pub fn stored_form(gzipped: &[u8]) -> Stored {
    use std::io::Read;
    if gzipped.is_empty() {
        return Stored::NoneOrUnknown;
    }
    let mut prefix = Vec::new();
    let mut d = flate2::read::GzDecoder::new(gzipped).take(STORED_PREFIX);
    // A stream cut short (a later part holds the rest) still yields its start.
    let _ = d.read_to_end(&mut prefix);
    let text = String::from_utf8_lossy(&prefix);
    let first_key = text
        .trim_start()
        .strip_prefix('{')
        .map(str::trim_start)
        .and_then(|t| t.strip_prefix('"'))
        .and_then(|t| t.split('"').next());
    match first_key {
        Some("version") => Stored::Plaintext,
        Some(_) if text.contains("\"encrypted_data\"") => Stored::Encrypted,
        _ => Stored::NoneOrUnknown,
    }
}

/// Read the state Secret's form through the API (the runner's Role may `get` it). A failure is
/// [`Stored::NoneOrUnknown`], with the reason, for the log.
pub async fn stored(namespace: &str, secret: &str) -> (Stored, Option<String>) {
    use k8s_openapi::api::core::v1::Secret;
    let client = match kube::Config::infer().await.map(kube::Client::try_from) {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return (Stored::NoneOrUnknown, Some(e.to_string())),
        Err(e) => return (Stored::NoneOrUnknown, Some(e.to_string())),
    };
    let api: kube::Api<Secret> = kube::Api::namespaced(client, namespace);
    match api.get_opt(secret).await {
        Ok(Some(s)) => {
            let data = s.data.unwrap_or_default();
            let bytes = data.get("tfstate").map(|b| b.0.as_slice()).unwrap_or_default();
            (stored_form(bytes), None)
        }
        Ok(None) => (Stored::NoneOrUnknown, None),
        Err(e) => (
            Stored::NoneOrUnknown,
            Some(format!("get secret {namespace}/{secret}: {e}")),
        ),
    }
}

/// The `TF_ENCRYPTION` configuration for a state now in the form `stored`, as a JSON model of
/// its blocks (PURE); [`hcl`] renders it.
pub fn config(p: &Passphrases, stored: Stored) -> Value {
    let current = &p.current_name;
    let mut pbkdf2 = serde_json::Map::new();
    pbkdf2.insert(current.clone(), json!({ "passphrase": p.current }));
    let mut aes_gcm = serde_json::Map::new();
    aes_gcm.insert(
        current.clone(),
        json!({ "keys": format!("key_provider.pbkdf2.{current}") }),
    );
    let previous = match (&p.previous, &p.previous_name) {
        (Some(value), Some(name)) => {
            pbkdf2.insert(name.clone(), json!({ "passphrase": value }));
            aes_gcm.insert(name.clone(), json!({ "keys": format!("key_provider.pbkdf2.{name}") }));
            Some(name)
        }
        _ => None,
    };
    let method = format!("method.aes_gcm.{current}");
    let plaintext = p.mode == EncryptionMode::Decrypt || stored == Stored::Plaintext;
    let target = match (p.mode, previous) {
        (EncryptionMode::Encrypt, _) if stored == Stored::Plaintext => json!({
            "method": method,
            "fallback": { "method": "method.unencrypted.captf_plaintext" },
        }),
        (EncryptionMode::Encrypt, Some(name)) => json!({
            "method": method,
            "enforced": true,
            "fallback": { "method": format!("method.aes_gcm.{name}") },
        }),
        (EncryptionMode::Encrypt, None) => json!({
            "method": method,
            "enforced": true,
        }),
        (EncryptionMode::Decrypt, _) => json!({
            "method": "method.unencrypted.captf_plaintext",
            "fallback": { "method": method },
        }),
    };
    let mut methods = serde_json::Map::new();
    methods.insert("aes_gcm".into(), Value::Object(aes_gcm));
    if plaintext {
        methods.insert("unencrypted".into(), json!({ "captf_plaintext": {} }));
    }
    json!({
        "key_provider": { "pbkdf2": pbkdf2 },
        "method": methods,
        "state": target,
        "plan": target,
    })
}

/// Whether this program can encrypt the state.
pub fn check_program(p: &Program) -> Result<(), EncryptionError> {
    match p {
        Program::OpenTofu { major, minor } if (*major, *minor) >= MIN_OPENTOFU => Ok(()),
        Program::OpenTofu { major, minor } => Err(EncryptionError::NeedsOpenTofu {
            found: format!("OpenTofu {major}.{minor}"),
        }),
        Program::Terraform => Err(EncryptionError::NeedsOpenTofu {
            found: "Terraform".to_string(),
        }),
        Program::Other(first) => Err(EncryptionError::NeedsOpenTofu {
            found: format!("a program that says {first:?}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const CUR: &str = "captf_cur";
    const PREV: &str = "captf_prev";

    fn p(mode: EncryptionMode, previous: Option<&str>) -> Passphrases {
        Passphrases {
            mode,
            current: "correct horse battery staple".into(),
            previous: previous.map(String::from),
            current_name: CUR.into(),
            previous_name: previous.map(|_| PREV.into()),
        }
    }

    #[test]
    fn a_key_providers_name_follows_its_secret_key_so_a_rotation_finds_the_old_salt() {
        let a = provider_name("state-key/passphrase");
        assert_eq!(a, provider_name("state-key/passphrase"), "stable");
        assert_ne!(a, provider_name("state-key-2/passphrase"));
        assert!(a.starts_with("captf_") && a.len() == 22, "{a}");
        assert!(
            a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "an HCL identifier: {a}"
        );
    }

    #[test]
    fn encrypt_writes_aes_gcm_enforced_with_no_plaintext_method_once_the_state_is_encrypted() {
        for stored in [Stored::Encrypted, Stored::NoneOrUnknown] {
            let c = config(&p(EncryptionMode::Encrypt, None), stored);
            assert_eq!(c["state"]["method"], "method.aes_gcm.captf_cur");
            assert_eq!(c["state"]["enforced"], true);
            assert!(c["state"].get("fallback").is_none());
            assert!(c["method"].get("unencrypted").is_none(), "{stored:?}");
            assert_eq!(c["plan"], c["state"], "plans are encrypted the same way");
            assert_eq!(
                c["key_provider"]["pbkdf2"][CUR]["passphrase"],
                "correct horse battery staple"
            );
        }
    }

    #[test]
    fn encrypt_reads_a_plaintext_state_once_to_migrate_it() {
        for previous in [None, Some("the passphrase before this one")] {
            let c = config(&p(EncryptionMode::Encrypt, previous), Stored::Plaintext);
            assert_eq!(c["state"]["method"], "method.aes_gcm.captf_cur");
            assert_eq!(c["state"]["fallback"]["method"], "method.unencrypted.captf_plaintext");
            assert!(
                c["state"].get("enforced").is_none(),
                "OpenTofu refuses enforced with an unencrypted method"
            );
            assert_eq!(c["method"]["unencrypted"]["captf_plaintext"], json!({}));
        }
    }

    #[test]
    fn a_rotation_reads_with_the_previous_passphrase_and_writes_with_the_new_one() {
        let c = config(
            &p(EncryptionMode::Encrypt, Some("the passphrase before this one")),
            Stored::Encrypted,
        );
        assert_eq!(c["state"]["method"], "method.aes_gcm.captf_cur");
        assert_eq!(c["state"]["enforced"], true);
        assert_eq!(c["state"]["fallback"]["method"], "method.aes_gcm.captf_prev");
        assert_eq!(
            c["key_provider"]["pbkdf2"][PREV]["passphrase"],
            "the passphrase before this one"
        );
    }

    #[test]
    fn decrypt_writes_plaintext_and_reads_the_encrypted_state() {
        for stored in [Stored::Encrypted, Stored::Plaintext, Stored::NoneOrUnknown] {
            let c = config(&p(EncryptionMode::Decrypt, None), stored);
            assert_eq!(c["state"]["method"], "method.unencrypted.captf_plaintext");
            assert_eq!(c["state"]["fallback"]["method"], "method.aes_gcm.captf_cur");
            assert!(c["state"].get("enforced").is_none());
        }
    }

    fn gz(text: &str) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(text.as_bytes()).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn the_states_form_is_told_from_its_first_key() {
        assert_eq!(
            stored_form(&gz("{\n  \"version\": 4,\n  \"terraform_version\": \"1.12.6\"}")),
            Stored::Plaintext
        );
        assert_eq!(
            stored_form(&gz(
                "{\n  \"serial\": 1,\n  \"lineage\": \"x\",\n  \"meta\": {},\n  \"encrypted_data\": \"AAAA\"}"
            )),
            Stored::Encrypted
        );
        assert_eq!(stored_form(b""), Stored::NoneOrUnknown);
        assert_eq!(stored_form(b"not gzip"), Stored::NoneOrUnknown);
        assert_eq!(stored_form(&gz("{\"serial\": 1}")), Stored::NoneOrUnknown);
        // Only the start of a long state is read, and a cut stream still tells its form.
        let long = format!("{{\"version\": 4, \"pad\": \"{}\"}}", "x".repeat(1 << 20));
        let bytes = gz(&long);
        assert_eq!(stored_form(&bytes[..bytes.len() / 2]), Stored::Plaintext);
    }

    #[test]
    fn a_passphrase_with_quotes_escapes_or_template_sequences_stays_one_literal_hcl_string() {
        assert_eq!(quoted(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(quoted("${var.x}%{if}$x%y"), r#""$${var.x}%%{if}$x%y""#);
        assert_eq!(quoted("line\nnext\ttab\u{7}"), r#""line\nnext\ttab\u0007""#);
        assert_eq!(quoted("ünï"), "\"ünï\"");
    }

    #[test]
    fn the_configuration_renders_as_hcl_blocks() {
        let text = hcl(&config(
            &p(EncryptionMode::Encrypt, Some("the passphrase before this one")),
            Stored::Encrypted,
        ));
        assert_eq!(
            text,
            "key_provider \"pbkdf2\" \"captf_cur\" {\n  passphrase = \"correct horse battery staple\"\n}\n\
             key_provider \"pbkdf2\" \"captf_prev\" {\n  passphrase = \"the passphrase before this one\"\n}\n\
             method \"aes_gcm\" \"captf_cur\" {\n  keys = key_provider.pbkdf2.captf_cur\n}\n\
             method \"aes_gcm\" \"captf_prev\" {\n  keys = key_provider.pbkdf2.captf_prev\n}\n\
             state {\n  method = method.aes_gcm.captf_cur\n  enforced = true\n  fallback {\n    method = method.aes_gcm.captf_prev\n  }\n}\n\
             plan {\n  method = method.aes_gcm.captf_cur\n  enforced = true\n  fallback {\n    method = method.aes_gcm.captf_prev\n  }\n}\n"
        );
        let migrate = hcl(&config(&p(EncryptionMode::Encrypt, None), Stored::Plaintext));
        assert!(
            migrate.contains("method \"unencrypted\" \"captf_plaintext\" {}\n"),
            "{migrate}"
        );
        assert!(!migrate.contains("enforced"), "{migrate}");
    }

    #[test]
    fn the_passphrases_never_show_in_debug_output() {
        let x = p(EncryptionMode::Encrypt, Some("the passphrase before this one"));
        let shown = format!("{x:?}");
        assert!(!shown.contains("horse") && !shown.contains("before"), "{shown}");
    }

    #[test]
    fn passphrases_are_read_from_the_mount_without_a_trailing_newline_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let want = EncryptionInputs {
            mode: EncryptionMode::Encrypt,
            passphrase: "state-key/passphrase".into(),
            previous_passphrase: Some("old-key/passphrase".into()),
        };
        assert_eq!(read(None, Some(dir.path())), Ok(None));
        assert_eq!(read(Some(&want), None), Err(EncryptionError::NotMounted));
        let missing = read(Some(&want), Some(dir.path())).unwrap_err().to_string();
        assert!(
            missing.contains("passphraseSecretRef") && missing.contains("state-key/passphrase"),
            "{missing}"
        );
        std::fs::write(dir.path().join(PASSPHRASE_FILE), "correct horse battery staple\n").unwrap();
        std::fs::write(dir.path().join(PREVIOUS_PASSPHRASE_FILE), "too short").unwrap();
        let short = read(Some(&want), Some(dir.path())).unwrap_err().to_string();
        assert!(
            short.contains("previousPassphraseSecretRef") && short.contains("at least 16"),
            "{short}"
        );
        assert!(!short.contains("too short"), "the value is never shown: {short}");
        std::fs::write(
            dir.path().join(PREVIOUS_PASSPHRASE_FILE),
            "the passphrase before this one",
        )
        .unwrap();
        let got = read(Some(&want), Some(dir.path())).unwrap().unwrap();
        assert_eq!(got.current, "correct horse battery staple");
        assert_eq!(got.previous.as_deref(), Some("the passphrase before this one"));
        assert_eq!(got.current_name, provider_name("state-key/passphrase"));
        assert_eq!(got.previous_name, Some(provider_name("old-key/passphrase")));
        // A previous reference naming the current Secret key is the same passphrase.
        let same = EncryptionInputs {
            previous_passphrase: Some("state-key/passphrase".into()),
            ..want.clone()
        };
        let got = read(Some(&same), Some(dir.path())).unwrap().unwrap();
        assert_eq!((got.previous, got.previous_name), (None, None));
    }

    #[test]
    fn only_opentofu_1_7_or_later_encrypts_the_state() {
        assert!(check_program(&Program::OpenTofu { major: 1, minor: 7 }).is_ok());
        assert!(check_program(&Program::OpenTofu { major: 1, minor: 12 }).is_ok());
        for p in [
            Program::OpenTofu { major: 1, minor: 6 },
            Program::Terraform,
            Program::Other("hello".into()),
        ] {
            let why = check_program(&p).unwrap_err().to_string();
            assert!(
                why.contains("needs OpenTofu 1.7") && why.contains("CAPTF_TF_BINARY"),
                "{why}"
            );
        }
    }
}

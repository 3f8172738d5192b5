//! Terraform outputs after a successful apply or refresh (docs/api.md, docs/runner.md).
//!
//! `output -json` prints `{"name": {"sensitive": bool, "type": …, "value": …}}` with sensitive
//! values in clear, so its stdout is captured and never logged. Non-sensitive values go into the
//! result when they fit; the whole document (sensitive ones included, with their `sensitive`
//! flags, so a reader can tell them apart) goes to the outputs store: the Secret
//! `captf-outputs-<suffix>` under the key [`OUTPUTS_KEY`], or a file in tests. Beside it the store
//! keeps the non-sensitive outputs masked as the result is masked (every value from a Secret, in
//! each form: [`captf_shared::mask`]) under [`PUBLIC_OUTPUTS_KEY`]: that copy, never the raw
//! document, is what the controller puts in `status.outputs` when they did not fit the result.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

use captf_shared::protocol::{KeptPlan, RunnerResult, TERMINATION_MESSAGE_LIMIT};
pub use captf_shared::protocol::{OUTPUTS_KEY, PUBLIC_OUTPUTS_KEY};
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum OutputsError {
    #[error("failed to parse output -json: {0}")]
    Parse(String),
    #[error("failed to write outputs to {target}: {why}")]
    Write { target: String, why: String },
}

/// The outputs, split by sensitivity.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outputs {
    /// Non-sensitive outputs: name → value.
    pub public: BTreeMap<String, Value>,
    /// Names of sensitive outputs (their values stay out of results and logs).
    pub sensitive: Vec<String>,
    /// The `output -json` document as printed, for the outputs store.
    pub document: Vec<u8>,
}

/// Parse the stdout of `output -json`. An output without a `sensitive` flag counts as sensitive:
/// when in doubt, keep a value out of the log.
pub fn parse(stdout: &[u8]) -> Result<Outputs, OutputsError> {
    let v: Value = serde_json::from_slice(stdout).map_err(|e| OutputsError::Parse(e.to_string()))?;
    let map = v
        .as_object()
        .ok_or_else(|| OutputsError::Parse("expected a JSON object".to_string()))?;
    let mut out = Outputs {
        document: stdout.to_vec(),
        ..Outputs::default()
    };
    for (name, entry) in map {
        let sensitive = entry.get("sensitive").and_then(Value::as_bool).unwrap_or(true);
        if sensitive {
            out.sensitive.push(name.clone());
        } else {
            out.public
                .insert(name.clone(), entry.get("value").cloned().unwrap_or(Value::Null));
        }
    }
    Ok(out)
}

impl Outputs {
    pub fn is_empty(&self) -> bool {
        self.public.is_empty() && self.sensitive.is_empty()
    }

    /// Mask `secrets` (see [`captf_shared::mask::mask_list`]) in every string of the public
    /// outputs.
    pub fn mask_public(&mut self, secrets: &[String]) {
        for v in self.public.values_mut() {
            captf_shared::mask::redact_json(v, secrets);
        }
    }

    /// The public outputs as the JSON object stored under [`PUBLIC_OUTPUTS_KEY`].
    pub fn public_document(&self) -> Vec<u8> {
        serde_json::to_vec(&self.public).unwrap_or_else(|_| b"{}".to_vec())
    }
}

/// Put the non-sensitive outputs into the result when the whole result still fits the
/// termination log; otherwise leave them out and flag `outputsInSecret`.
pub fn attach(result: &mut RunnerResult, outputs: &Outputs) {
    if outputs.public.is_empty() {
        return;
    }
    let mut with = result.clone();
    with.outputs = Some(outputs.public.clone());
    let fits = serde_json::to_string(&with)
        .map(|s| s.len() <= TERMINATION_MESSAGE_LIMIT)
        .unwrap_or(false);
    if fits {
        *result = with;
    } else {
        result.outputs = None;
        result.outputs_in_secret = true;
    }
}

/// Where the full outputs document goes.
pub trait OutputsStore {
    /// Store the `output -json` document (sensitive values included) and the masked public
    /// outputs ([`Outputs::public_document`]).
    fn store(
        &self,
        document: &[u8],
        public: &[u8],
    ) -> impl std::future::Future<Output = Result<(), OutputsError>> + Send;
    /// Keep the plan that waits for approval: its record and its text (already masked).
    fn store_plan(
        &self,
        plan: &KeptPlan,
        text: &[u8],
    ) -> impl std::future::Future<Output = Result<(), OutputsError>> + Send;
    /// Forget the kept plan (once a plan was applied, the one kept is history).
    fn clear_plan(&self) -> impl std::future::Future<Output = Result<(), OutputsError>> + Send;
    /// What it writes to, for messages (`Secret default/captf-outputs-x-tc`).
    fn describe(&self) -> String;
}

/// Writes the document to a file with mode 0600, and the public outputs beside it (tests and
/// local runs).
#[derive(Clone, Debug)]
pub struct FileStore {
    pub path: PathBuf,
}

impl FileStore {
    fn beside(&self, suffix: &str) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(suffix);
        PathBuf::from(p)
    }

    /// Where the masked public outputs go: `<path>.public`.
    pub fn public_path(&self) -> PathBuf {
        self.beside(".public")
    }

    /// Where a kept plan's record and text go: `<path>.plan.json`, `<path>.plan.txt`.
    pub fn plan_paths(&self) -> (PathBuf, PathBuf) {
        (self.beside(".plan.json"), self.beside(".plan.txt"))
    }

    fn write(&self, path: &std::path::Path, bytes: &[u8]) -> Result<(), OutputsError> {
        let err = |e: std::io::Error| OutputsError::Write {
            target: self.describe(),
            why: e.to_string(),
        };
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .map_err(err)?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).map_err(err)?;
        f.write_all(bytes).map_err(err)
    }
}

impl OutputsStore for FileStore {
    async fn store(&self, document: &[u8], public: &[u8]) -> Result<(), OutputsError> {
        self.write(&self.path, document)?;
        self.write(&self.public_path(), public)
    }

    async fn store_plan(&self, plan: &KeptPlan, text: &[u8]) -> Result<(), OutputsError> {
        let (record, words) = self.plan_paths();
        let json = serde_json::to_vec(plan).map_err(|e| OutputsError::Write {
            target: self.describe(),
            why: e.to_string(),
        })?;
        self.write(&record, &json)?;
        self.write(&words, text)
    }

    async fn clear_plan(&self) -> Result<(), OutputsError> {
        let (record, words) = self.plan_paths();
        for p in [record, words] {
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(OutputsError::Write {
                        target: self.describe(),
                        why: e.to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!("file {}", self.path.display())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use captf_shared::protocol::{Phase, RunResult};
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn sensitive_outputs_are_kept_out_of_the_public_map() {
        let doc = json!({
            "endpoint": {"sensitive": false, "type": "string", "value": "10.0.0.1"},
            "token": {"sensitive": true, "type": "string", "value": "s3cr3t"},
            "unknown_flag": {"type": "string", "value": "maybe-secret"}
        });
        let o = parse(doc.to_string().as_bytes()).unwrap();
        assert_eq!(o.public.len(), 1);
        assert_eq!(o.public["endpoint"], json!("10.0.0.1"));
        assert_eq!(o.sensitive, vec!["token", "unknown_flag"]);
        let mut r = RunnerResult::new(RunResult::Succeeded, Phase::Apply, "applied");
        attach(&mut r, &o);
        let text = r.to_termination_message();
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(!text.contains("maybe-secret"), "{text}");
        assert!(text.contains("10.0.0.1"), "{text}");
        assert!(!r.outputs_in_secret);
    }

    #[test]
    fn outputs_that_do_not_fit_are_flagged_for_the_secret() {
        let doc = json!({"big": {"sensitive": false, "type": "string", "value": "x".repeat(5000)}});
        let o = parse(doc.to_string().as_bytes()).unwrap();
        let mut r = RunnerResult::new(RunResult::Succeeded, Phase::Apply, "applied");
        attach(&mut r, &o);
        assert_eq!(r.outputs, None);
        assert!(r.outputs_in_secret);
    }

    #[test]
    fn not_an_object_is_a_parse_error() {
        assert!(parse(b"[1]").is_err());
        assert!(parse(b"").is_err());
    }

    #[tokio::test]
    async fn file_store_writes_the_document_with_mode_0600() {
        let d = tempfile::tempdir().unwrap();
        let s = FileStore {
            path: d.path().join("outputs.json"),
        };
        s.store(b"{\"a\":1}", b"{}").await.unwrap();
        assert_eq!(fs::read(&s.path).unwrap(), b"{\"a\":1}");
        assert_eq!(fs::metadata(&s.path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read(s.public_path()).unwrap(), b"{}");
        assert_eq!(
            fs::metadata(s.public_path()).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    proptest! {
        #[test]
        fn no_sensitive_value_ever_reaches_the_result(
            values in prop::collection::btree_map("[a-z]{1,8}", ("[A-Za-z0-9]{12,40}", any::<bool>()), 0..20)
        ) {
            let doc: serde_json::Map<String, Value> = values.iter().map(|(k, (v, s))| {
                (k.clone(), json!({"sensitive": s, "type": "string", "value": format!("V{v}")}))
            }).collect();
            let o = parse(Value::Object(doc).to_string().as_bytes()).unwrap();
            let mut r = RunnerResult::new(RunResult::Succeeded, Phase::Refresh, "ok");
            attach(&mut r, &o);
            let text = r.to_termination_message();
            prop_assert!(text.len() <= TERMINATION_MESSAGE_LIMIT);
            for (v, s) in values.values() {
                if *s {
                    let needle = format!("V{}", v);
                    prop_assert!(!text.contains(&needle));
                }
            }
        }
    }
}

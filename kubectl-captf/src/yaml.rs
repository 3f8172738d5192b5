//! `-o yaml`: the document `-o json` prints, as YAML.

use serde_json::Value;

use crate::errors::PluginError;

/// The YAML of a JSON answer: the same document (PURE). No answer stays no answer.
pub fn to_yaml(json: &str) -> Result<String, PluginError> {
    if json.trim().is_empty() {
        return Ok(String::new());
    }
    let why =
        |e: &dyn std::fmt::Display| PluginError::Api(format!("cannot write the answer as YAML: {e}; use -o json"));
    let v: Value = serde_json::from_str(json).map_err(|e| why(&e))?;
    serde_yaml_ng::to_string(&v).map_err(|e| why(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_is_the_json_document_as_yaml() {
        let json = r#"{"object": "TerraformCluster default/a", "ready": "True", "n": 1, "jobs": [{"op": "apply"}], "none": null}"#;
        let yaml = to_yaml(json).unwrap_or_default();
        let back: Value = serde_yaml_ng::from_str(&yaml).unwrap_or_default();
        let original: Value = serde_json::from_str(json).unwrap_or_default();
        assert_eq!(back, original, "{yaml}");
        assert!(
            yaml.contains("ready: 'True'"),
            "a string that looks like a boolean stays a string: {yaml}"
        );
        assert_eq!(to_yaml("").unwrap_or_default(), "");
        assert!(to_yaml("not json").is_err());
    }
}

//! Field paths for validation messages, built rather than concatenated by hand.
//!
//! Rendered the way Kubernetes renders them: `spec.jobs.env[2].name`, `spec.variables[region]`.

use std::fmt;

/// A field path such as `spec.template.spec.jobs.lockTimeoutSeconds`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldPath(String);

impl FieldPath {
    /// A path starting at `root`, which may itself be dotted (`spec.template.spec`).
    pub fn new(root: &str) -> Self {
        FieldPath(root.to_string())
    }

    /// The path of a named field below this one.
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            FieldPath(name.to_string())
        } else {
            FieldPath(format!("{}.{name}", self.0))
        }
    }

    /// The path of a list element.
    pub fn index(&self, i: usize) -> Self {
        FieldPath(format!("{}[{i}]", self.0))
    }

    /// The path of a map entry. Plain keys render bare (`[region]`); any other key is JSON-quoted
    /// (`["a b"]`) so the path stays unambiguous and printable.
    pub fn key(&self, key: &str) -> Self {
        let plain = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/'));
        if plain {
            FieldPath(format!("{}[{key}]", self.0))
        } else {
            let quoted = serde_json::to_string(key).unwrap_or_else(|_| format!("{key:?}"));
            FieldPath(format!("{}[{quoted}]", self.0))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<FieldPath> for String {
    fn from(p: FieldPath) -> String {
        p.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_render_like_kubernetes_field_paths() {
        let spec = FieldPath::new("spec.template.spec");
        assert_eq!(
            spec.child("jobs").child("lockTimeoutSeconds").as_str(),
            "spec.template.spec.jobs.lockTimeoutSeconds"
        );
        assert_eq!(
            spec.child("jobs").child("env").index(2).child("name").to_string(),
            "spec.template.spec.jobs.env[2].name"
        );
        assert_eq!(
            FieldPath::new("spec").child("variables").key("region").as_str(),
            "spec.variables[region]"
        );
        assert_eq!(
            FieldPath::new("spec").child("variables").key("a b").as_str(),
            "spec.variables[\"a b\"]"
        );
        assert_eq!(
            FieldPath::new("spec").child("variables").key("").as_str(),
            "spec.variables[\"\"]"
        );
        assert_eq!(FieldPath::new("").child("kind").as_str(), "kind");
    }
}

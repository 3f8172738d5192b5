//! CAPTF's finalizer `captf.io/destroy` (docs/rules.md, "Deletion"): whether an object carries
//! it, and the finalizer list after adding or removing it. The controller writes the lists
//! (`runtime/deletion.rs`); `kubectl captf` reads the first to tell whether a controller has
//! looked at an object.

use captf_shared::keys;
use captf_shared::types::CaptfObject;

/// The finalizers after adding ours, or `None` when it is there.
pub fn with_finalizer(finalizers: &[String]) -> Option<Vec<String>> {
    if finalizers.iter().any(|f| f == keys::FINALIZER) {
        return None;
    }
    let mut f = finalizers.to_vec();
    f.push(keys::FINALIZER.to_string());
    Some(f)
}

/// The finalizers after removing ours, or `None` when it is not there.
pub fn without_finalizer(finalizers: &[String]) -> Option<Vec<String>> {
    finalizers
        .iter()
        .any(|f| f == keys::FINALIZER)
        .then(|| finalizers.iter().filter(|f| *f != keys::FINALIZER).cloned().collect())
}

/// Whether the object carries the finalizer.
pub fn has_finalizer(object: &CaptfObject) -> bool {
    with_finalizer(object.metadata().finalizers.as_deref().unwrap_or_default()).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_finalizer_is_added_once_and_removed_alone() {
        let other = vec!["example.com/x".to_string()];
        let added = with_finalizer(&other).unwrap_or_default();
        assert_eq!(added, vec!["example.com/x".to_string(), "captf.io/destroy".to_string()]);
        assert_eq!(with_finalizer(&added), None);
        assert_eq!(without_finalizer(&added), Some(other.clone()));
        assert_eq!(without_finalizer(&other), None);
    }
}

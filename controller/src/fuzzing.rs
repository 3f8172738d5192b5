//! Fuzz entry point for `explain`'s file parsing: arbitrary text in, no panic out. The
//! coverage-guided target under `fuzz/` and the corpus replay test (`tests/fuzz_corpus.rs`) both
//! call it.

use captf_core::explain::parse_items;

/// Parse `data` as an explain input file (YAML or JSON). When there are several items, each has
/// a path that names it in messages.
pub fn explain_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(items) = parse_items("fuzz.yaml", text)
        && items.len() > 1
    {
        assert!(items.iter().all(|i| !i.at.is_empty()), "every item of several is named");
    }
}

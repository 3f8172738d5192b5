//! Fuzz entry point: arbitrary bytes in, no panic out, plus the invariants it asserts. The
//! coverage-guided target under `fuzz/` and the corpus replay test (`tests/fuzz_corpus.rs`) both
//! call it.

use std::path::Path;

use captf_shared::inputs::canonical_json;
use serde_json::Value;

use crate::{guard, outputs, workdir};

/// The first byte picks what the rest is read as: the inputs document, `output -json`, `show
/// -json` of a plan, or a termination message.
pub fn runner(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    match pick % 4 {
        0 => inputs(rest),
        1 => {
            if let Ok(out) = outputs::parse(rest) {
                let names = serde_json::from_slice::<Value>(rest)
                    .ok()
                    .and_then(|v| v.as_object().map(serde_json::Map::len))
                    .unwrap_or_default();
                assert_eq!(
                    out.public.len() + out.sensitive.len(),
                    names,
                    "every output is public or sensitive"
                );
            }
        }
        2 => {
            let _ = guard::plan_facts_from_text(rest);
        }
        _ => captf_shared::fuzzing::runner_result(rest),
    }
}

/// The inputs document: parsed as the runner parses it, its canonical JSON parses back to the same
/// inputs with the same hash, and the variables file can be written.
fn inputs(data: &[u8]) {
    let Ok(inputs) = workdir::parse_inputs(Path::new("inputs.json"), data) else {
        return;
    };
    let canonical = inputs.canonical_json();
    match serde_json::from_str::<captf_shared::inputs::Inputs>(&canonical) {
        Ok(back) => {
            assert_eq!(back.hash(), inputs.hash(), "the hash is stable across a round trip");
            assert_eq!(canonical_json(&back.to_value()), canonical);
        }
        Err(e) => panic!("canonical JSON does not parse back: {e}"),
    }
    assert!(serde_json::to_vec_pretty(&inputs.variables).is_ok());
}

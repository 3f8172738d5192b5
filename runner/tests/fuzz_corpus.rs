//! Replays the committed fuzz corpus (fuzz/corpus/runner) through the function the fuzz target
//! calls, without libFuzzer: inputs that once crashed stay fixed.
#![allow(clippy::unwrap_used)]

#[test]
fn every_input_of_the_runner_fuzz_corpus_is_handled_without_a_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/runner");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        captf_runner::fuzzing::runner(&std::fs::read(&path).unwrap());
        n += 1;
    }
    assert!(n >= 4, "{n} inputs in {}", dir.display());
}

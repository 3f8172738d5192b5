//! Replays the committed fuzz corpora (fuzz/corpus/review, fuzz/corpus/convert) through the function the fuzz target
//! calls, without libFuzzer: inputs that once crashed stay fixed.
#![allow(clippy::unwrap_used)]

#[test]
fn every_input_of_the_review_fuzz_corpus_is_handled_without_a_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/review");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        captf_webhook::fuzzing::review_body(&std::fs::read(&path).unwrap());
        n += 1;
    }
    assert!(n >= 16, "{n} inputs in {}", dir.display());
}

#[test]
fn every_input_of_the_convert_fuzz_corpus_is_handled_without_a_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/convert");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        captf_webhook::fuzzing::convert_body(&std::fs::read(&path).unwrap());
        n += 1;
    }
    assert!(n >= 6, "{n} inputs in {}", dir.display());
}

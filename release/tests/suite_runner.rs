//! `scripts/run-tests.py`, which runs the suite and prints its time table, checked by the
//! examples in its own docstrings (`python3 -m doctest`): how it writes a duration, for one.

use std::process::Command;

use captf_release_tests::workspace_root;

#[test]
fn the_suite_runners_examples_hold() {
    let out = Command::new("python3")
        .current_dir(workspace_root())
        .args(["-m", "doctest", "-v", "scripts/run-tests.py"])
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    // It ran examples: a docstring without any would pass as well.
    assert!(stdout.contains(" passed and 0 failed."), "{stdout}");
    assert!(!stdout.contains("\n0 passed"), "{stdout}");
}

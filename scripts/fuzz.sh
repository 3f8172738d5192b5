#!/usr/bin/env bash
# Run one coverage-guided fuzz target for a bounded time.
#
#   scripts/fuzz.sh <review|convert|validation|runner|explain> <seconds> [extra libFuzzer flags]
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). cargo-fuzz passes nightly-only compiler flags;
# on the stable toolchain RUSTC_BOOTSTRAP=1 allows them (set here), a nightly toolchain works too.
# The starting inputs in fuzz/corpus/<target> are read, not written: what the fuzzer finds goes to
# fuzz/work/<target> (ignored by git). Copy an input worth keeping, e.g. a fixed crash from
# fuzz/artifacts/<target>, into fuzz/corpus/<target> so `cargo test` replays it.
set -euo pipefail
target=${1:?usage: scripts/fuzz.sh <target> <seconds> [libFuzzer flags]}
seconds=${2:?usage: scripts/fuzz.sh <target> <seconds> [libFuzzer flags]}
shift 2
cd "$(dirname "$0")/../fuzz"
mkdir -p "work/$target"
export RUSTC_BOOTSTRAP=1
# No sanitizer: the code is safe Rust (unsafe is forbidden), and ASan would halve the speed.
exec cargo fuzz run --sanitizer none "$target" "work/$target" "corpus/$target" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=1048576 "$@"

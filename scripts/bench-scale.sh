#!/usr/bin/env bash
# Controller scale measurement (docs/architecture.md, "Targets"; figures in docs/performance.md): N objects to Ready on one
# controller for each N in the sizes, finish → next-Job latency with 1,000 Jobs running, how
# each figure grows with N, and applies per minute with 1, 2 and 4 shards. Release builds.
# Prints figures; asserts nothing. controller/benches/scale/main.rs lists the knobs.
#   scripts/bench-scale.sh                    # sizes 1000,10000,100000; shards 1,2,4 on 10000
#   scripts/bench-scale.sh 1000,10000 1,2     # sizes, then shard counts ("" for none)
set -euo pipefail
cd "$(dirname "$0")/.."
export CAPTF_SCALE_SIZES="${1:-${CAPTF_SCALE_SIZES:-1000,10000,100000}}"
export CAPTF_SCALE_SHARDS="${2-${CAPTF_SCALE_SHARDS:-1,2,4}}"
# The controller follows the simulator's clock: the demo's captf-controller-sim (the controller's
# runtime with that clock; the shipped captf-controller has no way to take it).
cargo build --quiet --release -p captf-demo --bin captf-controller-sim
exec cargo bench --quiet -p captf-controller --bench scale

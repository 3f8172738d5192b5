#!/usr/bin/env bash
# The chaos soak (docs/soak.md): builds captf-soak, captf-controller-sim (the controller on the
# simulator's clock) and captf-webhook with optimisations, then runs captf-soak, which starts the simulator in-process, the real webhook
# and two real controller replicas (with --shards N, an instance per shard and one for the
# rest), plays seeded faults over simulated time and checks every invariant over the whole
# history. Arguments go to captf-soak (`--help` lists them). Exit status 1 means a violation
# (each printed with its seed, simulated time and object).
#   scripts/soak.sh --seed 7 --hours 168 --objects 201 --progress
#   scripts/soak.sh --seed 7 --hours 24 --objects 60 --shards 3
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release -p captf-soak -p captf-demo -p captf-webhook
exec "${CARGO_TARGET_DIR:-target}/release/captf-soak" "$@"

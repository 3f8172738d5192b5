#!/usr/bin/env bash
# CAPTF's main job on the embedded simulator, from a fresh machine: builds the webhook, the
# controller and the demo with cargo, then runs target/debug/captf-demo, which starts captf-sim
# in-process, the real captf-webhook and captf-controller binaries as child processes, plays the
# lifecycle and prints a timeline and a summary. Arguments go to captf-demo (e.g. --serve).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet -p captf-webhook -p captf-controller -p captf-demo
exec "${CARGO_TARGET_DIR:-target}/debug/captf-demo" "$@"

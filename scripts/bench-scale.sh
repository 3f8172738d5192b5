#!/usr/bin/env bash
# Controller scale measurement (docs/architecture.md): N objects to Ready, the controller's own memory
# (VmRSS/VmHWM of the captf-controller process), and eviction → next-Job latency with R Jobs
# running. Prints figures; asserts nothing. See controller/benches/scale.rs for the knobs.
#   scripts/bench-scale.sh            # N=1000
#   scripts/bench-scale.sh 10000      # N=10000 (R stays 1000)
set -euo pipefail
cd "$(dirname "$0")/.."
export CAPTF_SCALE_OBJECTS="${1:-${CAPTF_SCALE_OBJECTS:-1000}}"
exec cargo bench --quiet -p captf-controller --bench scale

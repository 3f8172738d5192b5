#!/usr/bin/env bash
# Scale on the real control plane (etcd, kube-apiserver, kube-controller-manager from .tools/bin):
# N TerraformClusters to Ready through the real webhook, controller, Job controller and the
# process kubelet, with a stand-in runner (no OpenTofu) unless CAPTF_REAL_SCALE_RUNNER=tofu.
# Prints the time to all Ready, the CPU seconds and memory (VmRSS/VmHWM) of kube-apiserver,
# etcd, kube-controller-manager, the controller and the webhook, and the API server's requests
# per object; asserts nothing. Needs root (the process kubelet's containers) and the tools of
# scripts/setup-tools.sh. Every binary is a release build. Knobs: kubetest/tests/real_scale.rs.
#   scripts/bench-real-cp.sh          # N=1000
#   scripts/bench-real-cp.sh 200      # N=200
set -euo pipefail
cd "$(dirname "$0")/.."
export CAPTF_REAL_SCALE_OBJECTS="${1:-${CAPTF_REAL_SCALE_OBJECTS:-1000}}"
export CAPTF_TOOLS_BIN="${CAPTF_TOOLS_BIN:-$PWD/.tools/bin}"
packages=(-p captf-controller -p captf-webhook)
if [[ "${CAPTF_REAL_SCALE_RUNNER:-standin}" != standin ]]; then
  packages+=(-p captf-runner -p captf-testprovider)
fi
# The test finds the binaries beside itself: build both in the same (release) profile.
cargo build --quiet --release "${packages[@]}"
echo "machine: $(nproc) CPUs; uptime:$(uptime)"
cargo test --quiet --release -p captf-kubetest --test real_scale -- --ignored --exact measure --nocapture
echo "uptime after:$(uptime)"

#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs the tools the tests need (helm,
# kubectl, kubernetes-validate, Terraform; etcd, kube-apiserver and kube-controller-manager
# built from their Go modules) into .tools/, then checks formatting and lints, and runs
# every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$(bash scripts/setup-tools.sh)"
export PATH="$bin:$PATH"
export CAPTF_TOOLS_BIN="$bin"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked

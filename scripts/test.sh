#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs the tools the tests need (helm,
# kubectl, kubernetes-validate, Terraform; etcd, kube-apiserver and kube-controller-manager
# built from their Go modules) into .tools/, then checks formatting and lints, and runs
# every test of the workspace. The releases release/released.txt names are built first, for the
# tests that upgrade from them (scripts/build-release.sh).
#
# The test binaries run a few at a time ($CAPTF_TEST_JOBS, default the CPU count), slowest first
# by the last run's times, each one's output printed whole when it ends (scripts/run-tests.py).
# At the end it prints where the time went: each set-up step's wall time (tools, fmt, clippy,
# build) and each test binary's, slowest first (also kept in target/test-times.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
# Cargo's build directory: unless CARGO_TARGET_DIR says otherwise, a per-user one outside the
# clone, shared by every clone on the machine, so a fresh clone compiles only the workspace's own
# crates, not its dependencies again (a fresh machine builds everything, as before). Run one suite
# at a time on a machine: two at once share the built binaries.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/captf/target}"
mkdir -p target
steps="target/test-steps.tsv"
: >"$steps"
# timed NAME CMD...: runs CMD and records its wall time under NAME.
timed() {
  local name="$1" t0 rc=0
  shift
  t0="$(date +%s.%N)"
  "$@" || rc=$?
  printf '%s\t%s\n' "$name" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')" >>"$steps"
  return "$rc"
}

bin="$(timed "tools (scripts/setup-tools.sh)" bash scripts/setup-tools.sh)"
export PATH="$bin:$PATH"
export CAPTF_TOOLS_BIN="$bin"

echo "== cargo fmt --check"
timed "cargo fmt --check" cargo fmt --all -- --check
echo "== cargo clippy --all-targets -- -D warnings"
timed "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
# The releases the upgrade tests start from, built once per machine (before the workspace's own
# build, which puts the workspace's binaries back where the release's build left its own).
echo "== the releases to upgrade from (scripts/build-release.sh)"
for version in $(awk '!/^#/ && NF { print $1 }' release/released.txt); do
  timed "release $version (scripts/build-release.sh)" bash scripts/build-release.sh "$version" >/dev/null
done
echo "== cargo test --no-run (the build)"
timed "build (cargo test --no-run)" \
  cargo test --workspace --locked --no-run --message-format=json-render-diagnostics >target/test-artifacts.json
echo "== the test binaries, and the doc-tests"
exec python3 scripts/run-tests.py --steps "$steps" --artifacts target/test-artifacts.json \
  --out target/test-times.txt -- cargo test --workspace --locked --doc

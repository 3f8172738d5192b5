#!/usr/bin/env bash
# CAPTF's main job on the embedded simulator, from a fresh machine: builds the webhook, the
# controller and the demo with cargo, then runs target/debug/captf-demo, which starts captf-sim
# in-process, the real captf-webhook and captf-controller binaries as child processes, plays the
# lifecycle and prints a timeline and a summary. Arguments go to captf-demo (e.g. --serve,
# --scripted, --runner-image dist/images/runner.oci.tar).
#
# The runner pods run the real captf-runner with real OpenTofu where the machine allows it
# (root, for the private namespaces a pod gets): this script installs the newest OpenTofu (built
# from its Go module) and the protoc the test provider's build needs with
# `scripts/setup-tools.sh --demo`, and builds captf-runner and the test provider. If either fails, the demo still runs, with scripted runners, and says why.
# --serve and --scripted run only scripted runners, so they build and install none of that.
set -euo pipefail
cd "$(dirname "$0")/.."

# Say first what this run builds and roughly how long it takes, so a first run that takes
# minutes is not a surprise.
case " $* " in
  *" --serve "* | *" --scripted "*)
    runners="scripted runners: nothing else to build" ;;
  *" --runner-image"*)
    runners="then, for the released runner image: umoci, protoc and a static test provider" ;;
  *)
    if [ -x .tools/bin/tofu ]; then
      runners="then, for real runners: captf-runner and the test provider (OpenTofu is already in .tools/bin)"
    else
      runners="then, for real runners: OpenTofu from its Go module (about 10 min the first time on 2 cores; cached per user after), protoc, captf-runner and the test provider (--scripted or --serve skip these)"
    fi ;;
esac
echo "demo.sh: building captf-webhook, captf-controller and captf-demo with cargo (several minutes the first time, seconds after); $runners" >&2
cargo build --quiet -p captf-webhook -p captf-controller -p captf-demo
demo="${CARGO_TARGET_DIR:-target}/debug/captf-demo"

# The runner image's archive, if one is named: when it is not there, the demo refuses at once with
# the reason (exit 2), so there is nothing to install or build for it.
image=""
prev=""
for arg in "$@"; do
  case "$arg" in --runner-image=*) image="${arg#--runner-image=}" ;; esac
  if [ "$prev" = "--runner-image" ]; then image="$arg"; fi
  prev="$arg"
done
if [ -n "$image" ] && [ ! -f "$image" ]; then
  exec "$demo" "$@"
fi

case " $* " in
  *" --serve "* | *" --scripted "*)
    exec "$demo" "$@" ;;
  *" --runner-image"*)
    # The released image is unpacked with umoci and gets a static (musl) test provider: the
    # release's tools, without the real control plane.
    tools_args=() tools_env=(CAPTF_NO_CONTROL_PLANE=1) ;;
  *)
    # Only protoc and the newest OpenTofu.
    tools_args=(--demo) tools_env=() ;;
esac

echo "demo.sh: checking the tools for real OpenTofu (scripts/setup-tools.sh)" >&2
tools_log="$(mktemp)"
if bin="$(env "${tools_env[@]}" bash scripts/setup-tools.sh "${tools_args[@]}" 2>"$tools_log")"; then
  export CAPTF_TOOLS_BIN="$bin"
  if ! cargo build --quiet -p captf-runner -p captf-testprovider --bins; then
    echo "demo.sh: building captf-runner and the test provider failed; the runners will be scripted" >&2
  fi
else
  cat "$tools_log" >&2
  echo "demo.sh: scripts/setup-tools.sh failed (above); the runners will be scripted" >&2
fi
rm -f "$tools_log"
# With --runner-image the runner pods run the released image, whose root has only the libraries
# its own programs need: give it the test provider as a static (musl) binary, as real providers
# are static Go binaries.
case " $* " in
  *" --runner-image"*)
    cargo build --quiet -p captf-testprovider --bin terraform-provider-captftest --target x86_64-unknown-linux-musl ;;
esac

exec "$demo" "$@"

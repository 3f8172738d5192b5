#!/usr/bin/env bash
# Builds one real component from its Go module through a wrapper module under realparts/, and
# caches the binary outside the clone, in a per-user cache, by a key of everything that decides
# it (the wrapper's go.mod, go.sum and Go files, the package, the ldflags and the Go version): it
# is rebuilt only when a pin changes, and a fresh clone on a machine that built it before pays
# nothing. Links it as .tools/bin/<name>.
#
#   build-go-part.sh NAME WRAPPER_DIR PACKAGE [LDFLAGS]
#
# NAME         the binary's name in .tools/bin (e.g. kube-apiserver, tofu-1.11)
# WRAPPER_DIR  the wrapper module, relative to the repository (e.g. realparts/kubernetes)
# PACKAGE      the main package to build, as `go build` takes it (e.g. k8s.io/kubernetes/cmd/kube-apiserver)
# LDFLAGS      extra -ldflags (version stamps); -s -w are always added
#
# Environment: CAPTF_TOOLS_CACHE is the cache (default ${XDG_CACHE_HOME:-$HOME/.cache}/captf/tools;
# a build lives in <cache>/<name>-<key>/). GOTOOLCHAIN is passed through (a wrapper whose go.mod needs a newer Go than the
# machine's names it in the README). CGO is always off: the binaries are static.
# If the module proxy refuses a module or the build fails, this stops with the module named.
set -euo pipefail
if [ "$#" -lt 3 ]; then
  echo "usage: build-go-part.sh NAME WRAPPER_DIR PACKAGE [LDFLAGS]" >&2
  exit 2
fi
name="$1" wrapper="$2" package="$3" ldflags="${4:-}"
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="$root/.tools"
dir="$root/$wrapper"
if [ ! -f "$dir/go.mod" ]; then
  echo "build-go-part: $wrapper/go.mod does not exist" >&2
  exit 1
fi
if ! command -v go >/dev/null 2>&1; then
  echo "build-go-part: $name needs Go (the go command is not on PATH)" >&2
  exit 1
fi
go_version="$(cd "$dir" && go env GOVERSION)"
key="$(
  {
    echo "$package"
    echo "$ldflags"
    echo "$go_version"
    (cd "$dir" && find . -maxdepth 2 \( -name go.mod -o -name go.sum -o -name '*.go' \) -print0 | sort -z | xargs -0 sha256sum)
  } | sha256sum | cut -c1-16
)"
cache="${CAPTF_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/captf/tools}"
out="$cache/$name-$key/$name"
mkdir -p "$tools/bin"
if [ ! -x "$out" ]; then
  echo "setup-tools: building $name ($package, $go_version) from $wrapper" >&2
  mkdir -p "$(dirname "$out")"
  log="$(mktemp)"
  # A partial file of this process's own: two clones may build the same part at once.
  partial="$out.partial.$$"
  if ! (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$partial" "$package" >"$log" 2>&1); then
    # A module the proxy refuses shows as "reading …: 404/410" or "not found": name it.
    if grep -qE "reading https?://|: not found|unknown revision|invalid version" "$log"; then
      echo "setup-tools: the Go module proxy did not serve a module $wrapper needs:" >&2
      grep -E "reading https?://|: not found|unknown revision|invalid version" "$log" | head -n 5 >&2
    else
      echo "setup-tools: building $name from $package failed:" >&2
      tail -n 20 "$log" >&2
    fi
    rm -f "$log" "$partial"
    exit 1
  fi
  rm -f "$log"
  mv "$partial" "$out"
fi
# The cache is shared by every clone and branch on the machine, so an older pin may still be in
# use elsewhere: a build is dropped only when no clone has linked it for 30 days (each link
# touches its folder).
touch "$cache/$name-$key"
find "$cache" -mindepth 1 -maxdepth 1 -name "$name-*" ! -name "$name-$key" -mtime +30 -exec rm -rf {} +
ln -sfn "$out" "$tools/bin/$name"

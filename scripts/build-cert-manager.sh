#!/usr/bin/env bash
# Builds cert-manager's controller, webhook and cainjector from its released source tree, and
# renders its Helm chart as its release does, into a per-user cache keyed by the tree's content
# and the Go version: rebuilt only when the pin (the tree) changes; a fresh clone on a machine that
# built it before pays nothing. Links .tools/bin/cert-manager-{controller,webhook,cainjector} and
# .tools/cert-manager/chart (the rendered chart; its CRDs are templates inside it).
#
# cert-manager's commands live in nested Go modules whose paths no module proxy serves, so the
# source tree is needed. It is looked for, in order:
#   1. ../shared/upstream/cert-manager-v<version> beside the repository (this project's CI);
#   2. the folder in CAPTF_CERT_MANAGER_SRC;
#   3. else the tag is cloned from GitHub (a machine with network).
# The tree is never written to (CI's copy is read-only): the build works on a copy.
#
# Environment: CAPTF_TOOLS_CACHE (as build-go-part.sh), GOTOOLCHAIN passed through.
set -euo pipefail
version="v1.20.3"
# The commit of the tag, stamped into the binaries as upstream's release does.
commit="1e1d16d1744e6d9c80e464e58e8d9ab1caed222b"
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="$root/.tools"
mkdir -p "$tools/bin" "$tools/cert-manager"
tools="$(cd "$tools" && pwd -P)"

src=""
for candidate in "$root/../shared/upstream/cert-manager-$version" "${CAPTF_CERT_MANAGER_SRC:-}"; do
  if [ -n "$candidate" ] && [ -f "$candidate/cmd/controller/go.mod" ]; then
    src="$(cd "$candidate" && pwd -P)"
    break
  fi
done
clone=""
if [ -z "$src" ]; then
  clone="$(mktemp -d)"
  echo "setup-tools: cloning cert-manager $version (no tree in ../shared/upstream or CAPTF_CERT_MANAGER_SRC)" >&2
  git clone --quiet --depth 1 --branch "$version" https://github.com/cert-manager/cert-manager "$clone/src" || {
    echo "setup-tools: could not clone cert-manager $version; set CAPTF_CERT_MANAGER_SRC to its source tree" >&2
    exit 1
  }
  src="$clone/src"
fi
if ! command -v go >/dev/null 2>&1; then
  echo "setup-tools: cert-manager needs Go (the go command is not on PATH)" >&2
  exit 1
fi
go_version="$(go env GOVERSION)"
# The key: every file of the tree that a build or the chart reads (not .git), the stamps and Go.
key="$(
  {
    echo "$version $commit $go_version"
    (cd "$src" && find cmd pkg internal deploy go.mod go.sum -type f -print0 | sort -z | xargs -0 sha256sum)
  } | sha256sum | cut -c1-16
)"
cache="${CAPTF_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/captf/tools}"
out="$cache/cert-manager-$key"
if [ ! -f "$out/done" ]; then
  echo "setup-tools: building cert-manager $version (controller, webhook, cainjector; $go_version) from $src" >&2
  work="$(mktemp -d)"
  # A copy with write bits, since the tree may be read-only; .git is not needed.
  (cd "$src" && tar --exclude=.git -cf - .) | (mkdir -p "$work/src" && cd "$work/src" && tar -xf -)
  chmod -R u+w "$work/src"
  mkdir -p "$work/out/bin"
  ldflags="-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$version -X github.com/cert-manager/cert-manager/pkg/util.AppGitCommit=$commit"
  for cmd in controller webhook cainjector; do
    log="$work/$cmd.log"
    if ! (cd "$work/src/cmd/$cmd" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" \
      -o "$work/out/bin/cert-manager-$cmd" . >"$log" 2>&1); then
      if grep -qE "reading https?://|: not found|unknown revision|invalid version" "$log"; then
        echo "setup-tools: the Go module proxy did not serve a module cert-manager's $cmd needs:" >&2
        grep -E "reading https?://|: not found|unknown revision|invalid version" "$log" | head -n 5 >&2
      else
        echo "setup-tools: building cert-manager's $cmd failed:" >&2
        tail -n 20 "$log" >&2
      fi
      rm -rf "$work" "$clone"
      exit 1
    fi
  done
  # The chart as upstream's release renders it: Chart.yaml from its template with the version,
  # README.md from its template (helm does not need it, but the chart is whole).
  chart="$work/out/chart"
  cp -R "$work/src/deploy/charts/cert-manager" "$chart"
  sed -e "s/^version: .*/version: $version/" -e "s/^appVersion: .*/appVersion: $version/" \
    -e 's/{{IS_PRERELEASE}}/false/' "$chart/Chart.template.yaml" >"$chart/Chart.yaml"
  rm "$chart/Chart.template.yaml"
  if [ -f "$chart/README.template.md" ]; then
    mv "$chart/README.template.md" "$chart/README.md"
  fi
  mkdir -p "$cache"
  rm -rf "$out.partial.$$"
  mv "$work/out" "$out.partial.$$"
  touch "$out.partial.$$/done"
  # Two clones may build at once: the first to finish wins, the other drops its copy.
  mv -T "$out.partial.$$" "$out" 2>/dev/null || rm -rf "$out.partial.$$"
  rm -rf "$work"
fi
rm -rf "$clone"
touch "$out"
find "$cache" -mindepth 1 -maxdepth 1 -name "cert-manager-*" ! -name "cert-manager-$key" -mtime +30 -exec rm -rf {} +
for cmd in controller webhook cainjector; do
  ln -sfn "$out/bin/cert-manager-$cmd" "$tools/bin/cert-manager-$cmd"
done
ln -sfn "$out/chart" "$tools/cert-manager/chart"
echo "$version" >"$tools/cert-manager/version"

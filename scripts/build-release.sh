#!/usr/bin/env bash
# Builds the webhook, controller and runner of an earlier release from the commit
# release/released.txt names for it, for the tests that upgrade from that release.
#
#   scripts/build-release.sh VERSION      (VERSION as in released.txt, e.g. 0.1.0)
#
# The release's source tree (`git archive` of its commit, so the clone must have that commit) and
# its binaries go to $CAPTF_RELEASES_DIR/VERSION (default: captf/releases under the user's cache
# directory, beside the shared Cargo build directory scripts/test.sh uses), outside the clone, so
# every clone on the machine shares one build: a second run is a no-op. The build uses the shared
# Cargo directory: the release's crates carry the release's version, so their artifacts sit beside
# the workspace's own instead of replacing them, and the dependencies both lock to the same version
# are compiled once. Prints the folder of the binaries.
set -euo pipefail
die() { echo "build-release: $*" >&2; exit 1; }
[ "$#" -eq 1 ] || die "usage: scripts/build-release.sh VERSION (one of release/released.txt)"
version="${1#v}"
root="$(cd "$(dirname "$0")/.." && pwd)"
commit="$(awk -v v="$version" '$1 == v { print $2 }' "$root/release/released.txt")"
[ -n "$commit" ] || die "release/released.txt names no commit for $version"
releases="${CAPTF_RELEASES_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/captf/releases}"
dir="$releases/$version"
bins=(captf-webhook captf-controller captf-runner)
stamp="$dir/bin/.commit"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$commit" ]; then
  for b in "${bins[@]}"; do [ -x "$dir/bin/$b" ] || rm -f "$stamp"; done
fi
if [ ! -f "$stamp" ]; then
  # A shallow clone lacks the release's commit: deepen it from its origin first.
  if ! git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null \
    && [ "$(git -C "$root" rev-parse --is-shallow-repository)" = true ]; then
    echo "build-release: the clone is shallow; fetching its history for $commit" >&2
    git -C "$root" fetch --quiet --unshallow || true
  fi
  git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null \
    || die "the clone lacks $commit, the commit of $version (a shallow clone whose origin cannot be reached?)"
  src="$dir/src"
  # The tree is unpacked once per commit: unpacking again would give every file a new time and
  # Cargo would compile the release's crates again.
  if [ "$(cat "$dir/src.commit" 2>/dev/null)" != "$commit" ]; then
    rm -rf "$src" "$dir/src.commit"
    mkdir -p "$src"
    git -C "$root" archive "$commit" | tar -x -C "$src"
    echo "$commit" >"$dir/src.commit"
  fi
  target="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/captf/target}"
  echo "build-release: building $version ($commit) in $src" >&2
  (cd "$src" && CARGO_TARGET_DIR="$target" cargo build --locked --quiet \
    -p captf-webhook -p captf-controller -p captf-runner --bins)
  mkdir -p "$dir/bin"
  # Copied at once: the workspace's next build puts its own binaries back under the same names.
  for b in "${bins[@]}"; do cp "$target/debug/$b" "$dir/bin/$b.tmp" && mv "$dir/bin/$b.tmp" "$dir/bin/$b"; done
  echo "$commit" >"$stamp"
fi
echo "$dir/bin"

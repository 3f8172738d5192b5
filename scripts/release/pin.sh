#!/usr/bin/env bash
# Points the chart's default images and the clusterctl components at a release's images, by
# digest (docs/release.md, "Pinning the defaults"):
#
#   scripts/release/pin.sh [--check] [DIST]     (DIST: dist, the output of scripts/release.sh)
#   scripts/release/pin.sh --files               the files it writes, one per line
#
# Writes charts/captf/values.yaml (each image's repository, tag and digest) and the references to
# the images it named before in clusterctl/infrastructure-terraform/vVERSION/*.yaml and
# examples/*.yaml (whose runner image the chart's default policy must allow). Committed
# alone, that change is the release commit: release.sh gives the same bytes for it as for the
# commit before it, so the tag's chart defaults are the digests its release pushes. --check
# writes nothing and fails when the tree is not pinned to DIST (the release workflow's check).
set -euo pipefail

die() {
  echo "pin: $*" >&2
  exit 1
}

root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
version="$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)"
[ -n "$version" ] || die "no version in the workspace Cargo.toml"
clusterctl_dir="clusterctl/infrastructure-terraform/v$version"
files=("$clusterctl_dir"/*.yaml examples/*.yaml)
if [ "${1:-}" = "--files" ]; then
  printf '%s\n' charts/captf/values.yaml "${files[@]}"
  exit 0
fi
check=()
if [ "${1:-}" = "--check" ]; then
  check=(--check)
  shift
fi
[ "$#" -le 1 ] || die "usage: scripts/release/pin.sh [--check] [DIST]"
dist="${1:-dist}"
[ -f "$dist/images/images.txt" ] || die "$dist/images/images.txt does not exist: build the release first (scripts/release.sh $version)"
[ -f "$dist/chart/captf-$version.tgz" ] ||
  die "$dist holds no chart captf-$version.tgz: it is not a release of the workspace's version $version"
[ -f "$clusterctl_dir/infrastructure-components.yaml" ] || die "$clusterctl_dir/infrastructure-components.yaml does not exist"
python3 scripts/release/imagetool.py pin "${check[@]}" --values charts/captf/values.yaml \
  --images "$dist/images/images.txt" --tag "$version" "${files[@]}"

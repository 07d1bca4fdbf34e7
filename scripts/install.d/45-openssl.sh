#!/usr/bin/env bash
# Installs the openssl command line tool, which bins/tests/webhook.rs uses to make a throw-away
# CA and serving certificate for the admission/conversion webhook, when missing.
set -euo pipefail

log() { printf '45-openssl: %s\n' "$*" >&2; }

if command -v openssl >/dev/null 2>&1; then
  log "openssl already installed ($(openssl version))"
  exit 0
fi
log "installing openssl from Debian"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends openssl ca-certificates
command -v openssl >/dev/null

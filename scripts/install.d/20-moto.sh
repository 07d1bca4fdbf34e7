#!/usr/bin/env bash
# Installs moto_server (moto's EC2-compatible API server, from PyPI) for nodemgr-cloud's tests
# and the cloud_scale_up benchmark, when missing.
#
# The tests start their own `moto_server -H 127.0.0.1 -p <free port>` (nodemgr-cloud's
# `testing::MotoServer`) and stop it; nothing here starts a daemon. A moto_server already on
# PATH (or at $NODEMGR_MOTO_SERVER) is left alone, whatever its version.
set -euo pipefail

log() { printf '20-moto: %s\n' "$*" >&2; }
MOTO_VERSION=5.2.5

if command -v "${NODEMGR_MOTO_SERVER:-moto_server}" >/dev/null 2>&1; then
  log "moto_server already installed ($(command -v "${NODEMGR_MOTO_SERVER:-moto_server}"))"
  exit 0
fi

# moto goes into a venv of its own (Debian 12's system Python is externally managed, PEP 668).
# Debian's python3 has the venv module but not ensurepip (python3-venv), without which creating
# a venv fails: check for both.
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    log "python3 with venv is missing: run as root, or install python3-venv and then 'pip install moto[server]==${MOTO_VERSION}'"
    exit 1
  fi
  log "installing python3 and python3-venv with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null
fi

VENV="${MOTO_VENV:-/opt/nodemgr-moto}"
BIN_DIR="${MOTO_BIN_DIR:-/usr/local/bin}"
log "installing moto[server]==${MOTO_VERSION} into ${VENV}"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-input "moto[server]==${MOTO_VERSION}"
mkdir -p "$BIN_DIR"
ln -sf "$VENV/bin/moto_server" "$BIN_DIR/moto_server"
hash -r
"$BIN_DIR/moto_server" --help >/dev/null
log "installed moto ${MOTO_VERSION}: $BIN_DIR/moto_server"

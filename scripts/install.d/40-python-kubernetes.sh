#!/usr/bin/env bash
# Installs Debian's python3-kubernetes (the official Kubernetes Python client) for
# nodemgr-testkit's Python client test, when /usr/bin/python3 cannot import it yet. The test runs
# /usr/bin/python3 ($NODEMGR_PYTHON overrides), where Debian installs the module.
set -euo pipefail

log() { printf '40-python-kubernetes: %s\n' "$*" >&2; }

PYTHON="${NODEMGR_PYTHON:-/usr/bin/python3}"
if [ -x "$PYTHON" ] && "$PYTHON" -c 'import kubernetes' >/dev/null 2>&1; then
  log "the kubernetes module is already importable by $PYTHON"
  exit 0
fi

log "installing python3-kubernetes with apt-get"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends python3-kubernetes >/dev/null
"$PYTHON" -c 'import kubernetes; print(kubernetes.__version__)' >/dev/null
log "installed python3-kubernetes $("$PYTHON" -c 'import kubernetes; print(kubernetes.__version__)')"

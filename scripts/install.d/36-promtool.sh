#!/usr/bin/env bash
# Installs promtool for the alert-rule and metrics-format tests (`bins/tests/alerts.rs`), when
# missing: Debian's `prometheus` package ships it (/usr/bin/promtool). Only the package's files
# are wanted; its Prometheus service is not started by the tests.
set -euo pipefail

log() { printf '36-promtool: %s\n' "$*" >&2; }

if command -v promtool >/dev/null 2>&1; then
  log "promtool already installed ($(command -v promtool))"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
log "installing the prometheus package (for promtool) with apt-get"
apt-get update -qq
# The package would start a Prometheus server; a temporary policy-rc.d (exit 101: "action
# forbidden") keeps invoke-rc.d from starting it. An existing policy-rc.d is left alone.
made_policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  made_policy=1
fi
trap 'if [ -n "$made_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi' EXIT
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v promtool >/dev/null
log "installed $(promtool --version 2>&1 | head -n1)"

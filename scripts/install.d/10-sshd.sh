#!/usr/bin/env bash
# Installs what nodemgr-ssh's tests need, when missing: OpenSSH server and client and sudo from
# Debian's packages, and a test login `nodemgr-test` that may use sudo with a password.
#
# The tests start their own sshd (nodemgr-ssh's `testing::Sshd`) on loopback with throw-away
# host and user keys; nothing here starts a daemon or opens a port. The test user's sudo
# password is random per machine, kept in /etc/nodemgr-test/sudo-password (root only), where
# the harness reads it.
set -euo pipefail

log() { printf '10-sshd: %s\n' "$*" >&2; }
user=nodemgr-test
password_file=/etc/nodemgr-test/sudo-password

if [ "$(id -u)" != 0 ]; then
  log "run as root (the tests need a system user and sudo rules); or install openssh-server, openssh-client and sudo and create user $user by hand"
  exit 1
fi

missing=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
command -v ssh-keygen >/dev/null 2>&1 || missing+=(openssh-client)
command -v sudo >/dev/null 2>&1 || missing+=(sudo)
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Do not let the package start the system sshd: the tests start their own.
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod 0755 /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "openssh-server, openssh-client and sudo already installed"
fi
mkdir -p /run/sshd
chmod 0755 /run/sshd

if ! id "$user" >/dev/null 2>&1; then
  log "creating user $user"
  useradd --create-home --shell /bin/bash "$user"
fi
if [ ! -s "$password_file" ]; then
  mkdir -p "$(dirname "$password_file")"
  chmod 0700 "$(dirname "$password_file")"
  (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$password_file")
fi
printf '%s:%s\n' "$user" "$(cat "$password_file")" | chpasswd
sudoers=/etc/sudoers.d/nodemgr-test
cat >"$sudoers.tmp" <<SUDOERS
# nodemgr-ssh tests: $user may run anything as root with its password (never cached).
Defaults:$user timestamp_timeout=0, !lecture, !requiretty
$user ALL=(ALL:ALL) ALL
SUDOERS
chmod 0440 "$sudoers.tmp"
visudo -cf "$sudoers.tmp" >/dev/null
mv "$sudoers.tmp" "$sudoers"
log "user $user ready (sudo password in $password_file)"

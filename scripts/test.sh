#!/usr/bin/env bash
# The README's test command: installs what the tests need on a fresh machine, then runs
# formatting, lint and the whole test suite. Safe to run again; installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> %s\n' "$*" >&2; }

# --- toolchain components -------------------------------------------------------------
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  log "installing rustfmt and clippy"
  rustup component add rustfmt clippy
fi

# --- checks ---------------------------------------------------------------------------
log "cargo fmt --check"
cargo fmt --all -- --check

log "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

log "cargo test"
cargo test --workspace --locked

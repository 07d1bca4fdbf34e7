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

# --- real components the tests start (sshd, moto, kubectl, ...) ---------------------------
# Each file in scripts/install.d installs one component when it is missing; they run in order.
for installer in scripts/install.d/*.sh; do
  [ -e "$installer" ] || continue
  log "running $installer"
  bash "$installer"
done

# --- checks ---------------------------------------------------------------------------
log "cargo fmt --check"
cargo fmt --all -- --check

log "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

log "cargo doc (every crate, broken or private links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

log "cargo test"
cargo test --workspace --locked

# Every embedding example runs (cargo test above has built them); each checks its own result.
for example in examples/examples/*.rs; do
  name="$(basename "$example" .rs)"
  log "example $name"
  cargo run --locked --quiet -p nodemgr-examples --example "$name" >/dev/null
done

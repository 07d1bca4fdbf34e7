#!/usr/bin/env bash
# Reruns every benchmark listed in benches/README.md and prints their results:
#   1. the criterion benchmarks of benches/benches/*.rs (cargo bench -p nodemgr-benches; their
#      reports also land in target/criterion/);
#   2. node-manager at scale through kube (bins/benches/node_manager_scale.rs: the API emulator
#      loaded with 5,000 nodes and 150,000 pods, the real node-manager against it; about ten
#      minutes, most of it loading the emulator).
# Everything is built with the bench profile (optimized). ssh_bootstrap needs root and sshd,
# cloud_scale_up needs moto_server (scripts/install.d/); without them they say so and measure
# nothing. Extra arguments go to the criterion benchmarks, e.g.
#   scripts/bench.sh --warm-up-time 1 --measurement-time 3
# Usage: scripts/bench.sh [CRITERION_ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf 'bench: %s\n' "$*" >&2; }

log "criterion benchmarks (benches/benches/*.rs)"
cargo bench --locked -p nodemgr-benches -- "$@"

log "node-manager at 5,000 nodes and 150,000 pods (bins/benches/node_manager_scale.rs)"
cargo bench --locked -p nodemgr-bins --bench node_manager_scale

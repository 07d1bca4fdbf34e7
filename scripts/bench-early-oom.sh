#!/usr/bin/env bash
# early-oom beside Debian's earlyoom (the side-by-side of docs/peers.md §5). Installs earlyoom with apt when
# missing, builds early-oom in release, and measures:
#   1. idle CPU of each over 60 s (utime+stime from /proc/PID/stat), both in dry-run mode
#      watching this machine's real memory;
#   2. early-oom's reaction time from a PSI breach to its kill decision: its PSI file (a
#      fixture copy) switches from idle to a `full avg10` breach and the script times the
#      decision line in the log; 5 runs, default sample interval (5 s) and with 1 s.
#   3. earlyoom's reaction to its own trigger (it does not read PSI: it polls MemAvailable and
#      SwapFree): its limit is set just under the current MemAvailable share and a hog
#      allocates 6 % of RAM; time from the allocation to earlyoom's dry-run kill line.
# Usage: scripts/bench-early-oom.sh   (root, Debian; about 3 minutes after the build)
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf 'bench-early-oom: %s\n' "$*" >&2; }

if ! command -v earlyoom >/dev/null 2>&1; then
  log "installing earlyoom with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q earlyoom >/dev/null
fi
T="${CARGO_TARGET_DIR:-target}"
cargo build -q --release -p nodemgr-bins --bin early-oom -p nodemgr-testkit --bin nodemgr-api-emulator
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

"$T/release/nodemgr-api-emulator" --kubeconfig-dir "$tmp" >"$tmp/emulator.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -s "$tmp/kubeconfig" ] && break; sleep 0.1; done

ticks=$(getconf CLK_TCK)
cpu_ms() { awk -v t="$ticks" '{print ($14+$15)*1000/t}' "/proc/$1/stat"; }

log "idle CPU over 60 s (both in dry-run mode)"
RUST_LOG=info "$T/release/early-oom" --node-name bench --kubeconfig "$tmp/kubeconfig" --dry-run \
  --psi-file /proc/pressure/memory --cgroup-root /sys/fs/cgroup >"$tmp/eo-idle.log" 2>&1 &
eo=$!; pids+=($eo)
earlyoom --dryrun >"$tmp/earlyoom.log" 2>&1 &
e=$!; pids+=($e)
sleep 2
eo0=$(cpu_ms $eo); e0=$(cpu_ms $e)
sleep 60
eo1=$(cpu_ms $eo); e1=$(cpu_ms $e)
mode=$(grep -o 'mode="[a-z]*"\|mode=[a-z]*' "$tmp/eo-idle.log" | head -1 || true)
echo "idle CPU over 60 s: early-oom $(awk -v a=$eo0 -v b=$eo1 'BEGIN{print b-a}') ms (${mode:-mode unknown}), earlyoom $(awk -v a=$e0 -v b=$e1 'BEGIN{print b-a}') ms"
kill $eo $e 2>/dev/null || true

react() {
  local interval=$1 runs=() i
  for i in 1 2 3 4 5; do
    cp nodemgr-core/tests/fixtures/psi/idle.txt "$tmp/psi"
    RUST_LOG=warn "$T/release/early-oom" --node-name bench --kubeconfig "$tmp/kubeconfig" --dry-run \
      --no-trigger --sample-interval "$interval" --psi-file "$tmp/psi" --cgroup-root "$tmp" >"$tmp/eo.log" 2>&1 &
    local p=$!
    pids+=($p)
    sleep $((1 + i % 3)).$((i * 17 % 10))
    local t0; t0=$(date +%s.%N)
    cp nodemgr-core/tests/fixtures/psi/full-avg10-breach.txt "$tmp/psi"
    while ! grep -q 'no pod may be killed\|kill pod' "$tmp/eo.log"; do sleep 0.005; done
    local t1; t1=$(date +%s.%N)
    runs+=("$(awk -v a=$t0 -v b=$t1 'BEGIN{printf "%.3f", b-a}')")
    kill $p 2>/dev/null || true
    wait $p 2>/dev/null || true
  done
  printf '%s\n' "${runs[@]}" | sort -n | awk -v iv="$interval" '{a[NR]=$1} END {printf "early-oom reaction, PSI breach to decision, sample interval %s: median %s s (runs: ", iv, a[3]; for(i=1;i<=NR;i++) printf "%s ", a[i]; print ")"}'
}
react 5s
react 1s

# earlyoom's reaction to its own condition: MemAvailable at or below -m percent. Its limit is
# set 3 points under the current MemAvailable share, then a hog allocates and touches 6 % of
# RAM; the time from the hog's allocation done to earlyoom's dry-run kill line is measured.
# (early-oom's analogue above is the time from a PSI breach to its decision.)
earlyoom_react() {
  local runs=() i
  for i in 1 2 3; do
    local avail total pct limit
    avail=$(awk '/^MemAvailable:/{print $2}' /proc/meminfo)
    total=$(awk '/^MemTotal:/{print $2}' /proc/meminfo)
    pct=$(awk -v a=$avail -v t=$total 'BEGIN{printf "%d", a*100/t}')
    limit=$((pct - 3))
    earlyoom --dryrun -m "$limit" -s 100 -r 0 >"$tmp/earlyoom-react.log" 2>&1 &
    local e=$!
    pids+=($e)
    sleep 1
    python3 - "$tmp/hog-ready" <<'PY' &
import sys, time
n = int(open('/proc/meminfo').read().split('MemTotal:')[1].split()[0]) * 1024 * 6 // 100
b = bytearray(n)
for i in range(0, n, 4096):
    b[i] = 1
open(sys.argv[1], 'w').write(repr(time.time()))
time.sleep(20)
PY
    local hog=$!
    pids+=($hog)
    while [ ! -s "$tmp/hog-ready" ]; do sleep 0.005; done
    local t0; t0=$(cat "$tmp/hog-ready")
    local found=""
    for _ in $(seq 2000); do
      if grep -qi 'sending SIGTERM\|dry run\|dryrun' "$tmp/earlyoom-react.log"; then found=1; break; fi
      sleep 0.005
    done
    local t1; t1=$(date +%s.%N)
    kill $hog $e 2>/dev/null || true
    wait $hog $e 2>/dev/null || true
    rm -f "$tmp/hog-ready"
    if [ -n "$found" ]; then
      runs+=("$(awk -v a=$t0 -v b=$t1 'BEGIN{printf "%.3f", b-a}')")
    else
      log "earlyoom did not report within 10 s (limit ${limit} %); log: $(tail -3 "$tmp/earlyoom-react.log" | tr '\n' ' ')"
    fi
  done
  if [ "${#runs[@]}" -gt 0 ]; then
    printf '%s\n' "${runs[@]}" | sort -n | awk '{a[NR]=$1} END {m=a[int((NR+1)/2)]; printf "earlyoom reaction, MemAvailable under its limit to its kill decision: median %s s (runs: ", m; for(i=1;i<=NR;i++) printf "%s ", a[i]; print ")"}'
  fi
}
earlyoom_react

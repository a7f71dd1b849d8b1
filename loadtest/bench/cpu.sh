#!/usr/bin/env bash
# One read-path point with every process's CPU per request (docs/performance.md, "The edge's
# handler futures"): a local 3-node cluster with 2 edges (deploy/local-cluster.sh, release
# binaries), a 5 s warm-up, then CPU_SECONDS of `writ-loadtest` at CPU_CONNECTIONS on the first
# edge; each process's user+system time (/proc) over the middle 10 s, divided by the requests
# answered in that time at the run's rate.
#
# Knobs: CPU_MIX (read=1: tools/call greet; discover=1: tools/list), CPU_CONNECTIONS (64),
# CPU_SECONDS (16, at least 12), CPU_BIN (a directory holding `writ` and `writ-loadtest`, for
# alternating builds; default the release build), CPU_PERF_PID_INDEX (record `perf` with DWARF
# stacks of one process for the 10 s into /tmp/writ-cpu.perf: 1–3 a node, 4–5 an edge; at
# CPU_PERF_HZ samples per second, 250 by default), CPU_WAIT_S (set with CPU_MIX=execute=1: P1w's
# operation — each execute waits up to that many seconds for its effect, no camera frame — per
# operation answered).
#
# The load's executor (`writ executor run`, started by `writ-loadtest`) is counted after the
# generator.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=loadtest/bench/lib.sh
source loadtest/bench/lib.sh
BIN=${CPU_BIN:-$BIN}
MIX=${CPU_MIX:-read=1}
CONNECTIONS=${CPU_CONNECTIONS:-64}
SECONDS_LOADED=${CPU_SECONDS:-16}
WORK=$(mktemp -d /tmp/writ-cpu.XXXXXX)
log() { echo "== [cpu] $*" >&2; }
BENCH_BUILD=0 bench_cluster
EDGE=${WRIT_MCP_URLS%% *}
args=(writ --work-dir "$WORK/executors" --quiet --prefix cpu --edges "$EDGE" --concurrency "$CONNECTIONS" --mix "$MIX")
[ -n "${CPU_WAIT_S:-}" ] && args+=(--wait-s "$CPU_WAIT_S" --no-camera)
# ticks PIDS: each process's user+system clock ticks.
ticks() { for p in "$@"; do awk '{printf "%s ", $14+$15}' "/proc/$p/stat"; done; }
"$BIN/writ-loadtest" "${args[@]}" --duration 5 >/dev/null
# exec: $! is then the generator itself, whose CPU is counted.
(exec "$BIN/writ-loadtest" "${args[@]}" --duration "$SECONDS_LOADED" --label cpu --json "$WORK/run.json" >/dev/null) &
gen=$!
sleep 5
pids=($WRIT_NODE_PIDS $WRIT_EDGE_PIDS $gen $(pgrep -f "executor run --config $WORK/executors" | head -1 || true))
if [ -n "${CPU_PERF_PID_INDEX:-}" ]; then
  perf record -F "${CPU_PERF_HZ:-250}" --call-graph dwarf,32768 -p "${pids[$((CPU_PERF_PID_INDEX - 1))]}" \
    -o /tmp/writ-cpu.perf -- sleep 10 2>/dev/null &
fi
before=$(ticks "${pids[@]}")
t0=$(date +%s.%N)
sleep 10
after=$(ticks "${pids[@]}")
t1=$(date +%s.%N)
wait "$gen"
wait
python3 - "$WORK/run.json" "$before" "$after" "$t0" "$t1" "$(getconf CLK_TCK)" <<'PY'
import json, sys
run, before, after, t0, t1, hz = sys.argv[1:]
r = json.load(open(run))
rate, seconds = r["throughput_per_s"], float(t1) - float(t0)
names = ["node1", "node2", "node3", "edge1", "edge2", "generator", "executor"]
cpu = [(int(b) - int(a)) / int(hz) for a, b in zip(before.split(), after.split())]
print(f"{r['ok']} requests, {sum(r['errors'].values())} errors, {rate}/s, p99 {r['latency_ms']['p99']} ms")
print("µs of CPU per request: " + ", ".join(f"{n} {c / seconds / rate * 1e6:.1f}" for n, c in zip(names, cpu)))
PY

#!/usr/bin/env bash
# Memory per operation within the retention window (docs/performance.md, "Memory per
# operation"): a local 3-node cluster with 2 edges (deploy/local-cluster.sh, release build),
# `writ-loadtest` executes at GROWTH_CLIENTS clients for GROWTH_WARMUP_S (not counted), then
# for GROWTH_SECONDS; the RSS of every node and edge before and after, and the growth per
# million operations acknowledged in between. Every operation stays within retention (24 h
# by default), so what grows is what the processes keep per operation.
#
# Knobs: GROWTH_CLIENTS (64), GROWTH_WARMUP_S (20), GROWTH_SECONDS (120), BENCH_BUILD=0 (use
# the release binaries already built), GROWTH_LABEL (what the binaries are; default: HEAD),
# BENCH_OUT (loadtest/bench/results). Writes
# $BENCH_OUT/growth.json and growth.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=loadtest/bench/lib.sh
source loadtest/bench/lib.sh
CLIENTS=${GROWTH_CLIENTS:-64}
WARMUP=${GROWTH_WARMUP_S:-20}
SECONDS_LOADED=${GROWTH_SECONDS:-120}
WORK=$(mktemp -d /tmp/writ-growth.XXXXXX)
mkdir -p "$OUT"

log() { echo "== [growth] $*" >&2; }

bench_cluster

# rss PIDS: "pid:kB …" of each process.
rss() { for p in $1; do echo -n "$p:$(awk '/^VmRSS/ {print $2}' "/proc/$p/status") "; done; }

load() { # load SECONDS LABEL
  "$BIN/writ-loadtest" writ --work-dir "$WORK/executors" --prefix growth --concurrency "$CLIENTS" \
    --mix execute=1 --duration "$1" --quiet --label "$2" --json "$WORK/$2.json"
}

log "warm-up: $WARMUP s at $CLIENTS clients"
load "$WARMUP" warmup
nodes_before=$(rss "$WRIT_NODE_PIDS")
edges_before=$(rss "$WRIT_EDGE_PIDS")
log "measured: $SECONDS_LOADED s at $CLIENTS clients"
load "$SECONDS_LOADED" loaded
nodes_after=$(rss "$WRIT_NODE_PIDS")
edges_after=$(rss "$WRIT_EDGE_PIDS")
# What the ledger holds by kind (a node's `writ_ledger_records`): what could grow in memory.
ledger_records >"$WORK/records" || true

python3 - "$WORK/loaded.json" "$nodes_before" "$nodes_after" "$edges_before" "$edges_after" \
  "${GROWTH_LABEL:-$(git rev-parse --short HEAD)}" "$CLIENTS" "$SECONDS_LOADED" "$OUT/growth.json" \
  "$WORK/records" >"$OUT/growth.md" <<'PY'
import json, os, re, sys
run, nb, na, eb, ea, commit, clients, seconds, out, records_file = sys.argv[1:]
records = {}
if os.path.exists(records_file):
    for line in open(records_file):
        m = re.match(r'writ_ledger_records\{kind="([a-z_]+)"\} ([0-9.e+]+)', line)
        if m:
            records[m.group(1)] = int(float(m.group(2)))
r = json.load(open(run))
ops = sum(v.get("ok", 0) for k, v in r.get("kinds", {}).items() if k.startswith("execute"))
def parse(s): return {p.split(":")[0]: int(p.split(":")[1]) for p in s.split()}
rows = []
for role, before, after in (("node", parse(nb), parse(na)), ("edge", parse(eb), parse(ea))):
    for i, pid in enumerate(before, 1):
        grew_mb = (after[pid] - before[pid]) / 1024
        rows.append({"process": f"{role} {i}", "rss_before_mb": before[pid] / 1024, "rss_after_mb": after[pid] / 1024,
                     "grew_mb": grew_mb, "mb_per_million_operations": grew_mb / ops * 1e6 if ops else None})
json.dump({"commit": commit, "clients": int(clients), "seconds": int(seconds), "operations": ops, "rows": rows,
           "ledger_records": records}, open(out, "w"), indent=1)
print(f"# Memory per operation (at {commit}): {ops:,} operations in {seconds} s at {clients} clients\n")
print("| process | RSS before MB | RSS after MB | grew MB | MB per million operations |\n|---|---:|---:|---:|---:|")
for x in rows:
    per = "-" if x["mb_per_million_operations"] is None else f"{x['mb_per_million_operations']:,.0f}"
    print(f"| {x['process']} | {x['rss_before_mb']:.0f} | {x['rss_after_mb']:.0f} | {x['grew_mb']:.0f} | {per} |")
if records:
    print("\nWhat the ledger holds at the end (`writ_ledger_records`): " + ", ".join(f"{k} {v:,}" for k, v in sorted(records.items())))
PY
cat "$OUT/growth.md"

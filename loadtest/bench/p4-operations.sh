#!/usr/bin/env bash
# P4's row of finished operations (docs/performance.md, "A day of finished operations"): a
# local 3-node cluster with 2 edges (deploy/local-cluster.sh, release build), P1's point of
# executes at P4_CLIENTS clients before and after the ledger grows by P4_OPERATIONS finished
# operations within retention. They are seeded in bulk by `writ node seed` (each operation's
# submission, dispatch, start and effect report applied by the state machine's own apply on
# the stopped node 1, nodes 2 and 3 given the same store as hard links), since the write path
# would take hours to fill them; the seeder waits for the store's compactions before the
# members restart, as a ledger grown over a day would have compacted as it grew. Both points
# run on members just restarted (the seed needs them stopped), each after the edges resynced;
# a first short load creates the load's tenant, so both snapshots hold it.
#
# Reports, base and grown: throughput and p99 (and their ratios), every node's and edge's RSS
# after the point, the size of the snapshot the members restarted from, edge 1's resync time
# (restarted alone, until ready) and the nodes' disk; and how long the seeding took.
#
# Knobs: P4_OPERATIONS (10000000), P4_CLIENTS (64), P4_SECONDS (20: two points of one each),
# BENCH_BUILD=0 (use the release binaries already built), BENCH_OUT (loadtest/bench/results).
# Writes $BENCH_OUT/p4-operations.json and .md. Needs free disk for the seeded ledger (about
# 3 GB per million operations here, held once: the members share its tables).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=loadtest/bench/lib.sh
source loadtest/bench/lib.sh
OPERATIONS=${P4_OPERATIONS:-10000000}
CLIENTS=${P4_CLIENTS:-64}
SECONDS_LOADED=${P4_SECONDS:-20}
WORK=$(mktemp -d /tmp/writ-p4o.XXXXXX)
mkdir -p "$OUT"
log() { echo "== [p4-operations] $*" >&2; }

bench_cluster
N="$WRIT_CLUSTER_DIR"

# snapshot_bytes: the size of node 1's newest snapshot.
snapshot_bytes() {
  find "$N/n1/data/snapshots" -maxdepth 1 -name '*.snap' -printf '%s %p\n' | sort -k2 | tail -1 | cut -d' ' -f1
}

# grow OPERATIONS LABEL: stops the cluster, seeds node 1's store and links it into nodes 2 and
# 3, restarts it; writes LABEL's seeding time, the snapshot before and after (a growth by 0
# first: the state the load left, as a snapshot), disk and edge 1's resync time.
grow() {
  deploy/local-cluster.sh down >/dev/null
  "$BIN/writ" node seed --data-dir "$N/n1/data" --operations 0 >&2
  local before t0 seeded
  before=$(snapshot_bytes)
  t0=$(date +%s.%N)
  "$BIN/writ" node seed --data-dir "$N/n1/data" --operations "$1" \
    --copy-to "$N/n2/data" --copy-to "$N/n3/data" >&2
  seeded=$(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$t0" "$(date +%s.%N)")
  writ_up
  local resync snapshot disk
  resync=$(edge_resync)
  writ_up
  for e in $WRIT_MCP_URLS; do
    for _ in $(seq 1 600); do curl -sf "${e%/mcp}/readyz" >/dev/null && break; sleep 0.05; done
  done
  snapshot=$(snapshot_bytes)
  # Each member's own bytes (`du` counts a file linked into several members once, in the first).
  disk=$(du -sb "$N/n1/data" "$N/n2/data" "$N/n3/data" | awk '{printf "%s%s", (NR > 1 ? "," : ""), $1}')
  echo "{\"seed_s\": $seeded, \"edge_resync_s\": $resync, \"snapshot_bytes_before\": ${before:-0}, \"snapshot_bytes\": ${snapshot:-0}, \"disk_bytes\": [$disk]}" \
    >"$WORK/$2.grow.json"
}

# point LABEL [SECONDS]: P1's point, then each node's and edge's RSS (kB).
point() {
  "$BIN/writ-loadtest" writ --work-dir "$WORK/executors" --quiet --prefix p4o --concurrency "$CLIENTS" \
    --mix execute=1 --duration "${2:-$SECONDS_LOADED}" --verify --drain 60 \
    --watch-pids "$WRIT_NODE_PIDS $WRIT_EDGE_PIDS" --label "$1" --json "$WORK/$1.json" >&2
  for p in $WRIT_NODE_PIDS $WRIT_EDGE_PIDS; do awk '/^VmRSS/ {printf "%s ", $2}' "/proc/$p/status"; done >"$WORK/$1.rss"
}

log "warm-up: the load's tenant, principals and executors"
point warmup 3
log "base: restarted with the seed tenant and no operations in it"
grow 0 base
point base
log "grown: $OPERATIONS finished operations seeded"
grow "$OPERATIONS" grown
point grown
log "disk after: $(df -h "$N" | tail -1)"

python3 - "$WORK" "$OPERATIONS" "$CLIENTS" "$(git rev-parse --short HEAD)" "$OUT/p4-operations.json" \
  >"$OUT/p4-operations.md" <<'PY'
import json, sys
work, operations, clients, commit, out = sys.argv[1:]
def load(label):
    run = json.load(open(f"{work}/{label}.json"))
    grow = json.load(open(f"{work}/{label}.grow.json"))
    rss = [int(k) // 1024 for k in open(f"{work}/{label}.rss").read().split()]
    verify = run.get("verify") or {}
    return {"ops_per_s": run["throughput_per_s"], "p99_ms": run["latency_ms"]["p99"],
            "errors": sum(run["errors"].values()) if isinstance(run["errors"], dict) else run["errors"],
            "verify_passed": all(c["ok"] for c in verify.get("checks", [])) if verify else None,
            "rss_mb": dict(zip(["node1", "node2", "node3", "edge1", "edge2"], rss)), **grow}
b, g = load("base"), load("grown")
ratio = lambda x, y: round(x / y, 3) if x and y else None
res = {"commit": commit, "operations": int(operations), "clients": int(clients), "base": b, "grown": g,
       "ratio_throughput": ratio(g["ops_per_s"], b["ops_per_s"]), "ratio_p99": ratio(g["p99_ms"], b["p99_ms"]),
       "ratio_rss": {k: ratio(g["rss_mb"][k], b["rss_mb"][k]) for k in b["rss_mb"]},
       "ratio_snapshot": ratio(g["snapshot_bytes"], b["snapshot_bytes"]),
       "ratio_snapshot_seeded": ratio(g["snapshot_bytes"], g["snapshot_bytes_before"]),
       "ratio_edge_resync": ratio(g["edge_resync_s"], b["edge_resync_s"])}
json.dump(res, open(out, "w"), indent=2)
print(f"# P4: 0 → {int(operations):,} finished operations within retention ({commit}, {clients} clients)\n")
print("| | ops/s | p99 ms | errors | verify | RSS MB node 1 · 2 · 3 · edge 1 · 2 | snapshot bytes before → after seeding | edge 1 resync s | disk MB per node (own) |")
print("|---|---:|---:|---:|:---|---|---:|---:|---|")
for name, p in (("base", b), ("grown", g)):
    rss = " · ".join(str(v) for v in p["rss_mb"].values())
    disk = " · ".join(str(d // 2**20) for d in p["disk_bytes"])
    print(f"| {name} | {p['ops_per_s']:.1f} | {p['p99_ms']:.1f} | {p['errors']} | {'passed' if p['verify_passed'] else 'FAILED'} | "
          f"{rss} | {p['snapshot_bytes_before']:,} → {p['snapshot_bytes']:,} | {p['edge_resync_s']} | {disk} |")
rr = " · ".join(str(v) for v in res["ratio_rss"].values())
print(f"\nGrown/base: throughput {res['ratio_throughput']}, p99 {res['ratio_p99']}, RSS {rr}, snapshot "
      f"{res['ratio_snapshot']} (after/before the seeding alone: {res['ratio_snapshot_seeded']}), edge resync "
      f"{res['ratio_edge_resync']}. Seeding took {g['seed_s']} s.")
PY
cat "$OUT/p4-operations.md"

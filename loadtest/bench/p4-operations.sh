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
# Reports, base and grown: throughput and p99 (and their ratios); every node's and edge's RSS at
# the point's end and its peak over the point (sampled every half second), and the peaks by
# role, since which node leads changes with each restart and a leader holds more than a
# follower; the size of the snapshot the members restarted from and edge 1's resync time
# (restarted alone, until ready; the median of three), each both before and after the seeding,
# so that the seeded operations are the only difference between the two; the nodes' disk; and
# how long the seeding took.
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

# resyncs: edge 1's resync time (edge_resync), three times, space-separated.
resyncs() {
  local r=()
  for _ in 1 2 3; do r+=("$(edge_resync)"); done
  echo "${r[*]}"
}

# grow OPERATIONS LABEL: stops the cluster and snapshots the state the load left (a growth by
# 0), restarts it to time edge 1's resync on that state, then stops it again, seeds node 1's
# store with OPERATIONS, links it into nodes 2 and 3 and restarts it. Writes LABEL's seeding
# time, the snapshot and edge 1's resyncs before and after the seeding (the same load history:
# only the seeded operations differ), and the disk.
grow() {
  deploy/local-cluster.sh down >/dev/null
  "$BIN/writ" node seed --data-dir "$N/n1/data" --operations 0 >&2
  local before resync_before t0 seeded
  before=$(snapshot_bytes)
  writ_up
  resync_before=$(resyncs)
  deploy/local-cluster.sh down >/dev/null
  t0=$(date +%s.%N)
  "$BIN/writ" node seed --data-dir "$N/n1/data" --operations "$1" \
    --copy-to "$N/n2/data" --copy-to "$N/n3/data" >&2
  seeded=$(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$t0" "$(date +%s.%N)")
  writ_up
  local resync snapshot disk
  resync=$(resyncs)
  writ_up
  for e in $WRIT_MCP_URLS; do
    for _ in $(seq 1 600); do curl -sf "${e%/mcp}/readyz" >/dev/null && break; sleep 0.05; done
  done
  snapshot=$(snapshot_bytes)
  # Each member's own bytes (`du` counts a file linked into several members once, in the first).
  disk=$(du -sb "$N/n1/data" "$N/n2/data" "$N/n3/data" | awk '{printf "%s%s", (NR > 1 ? "," : ""), $1}')
  echo "{\"seed_s\": $seeded, \"edge_resync_s\": [${resync// /, }], \"edge_resync_s_before\": [${resync_before// /, }], \"snapshot_bytes_before\": ${before:-0}, \"snapshot_bytes\": ${snapshot:-0}, \"disk_bytes\": [$disk]}" \
    >"$WORK/$2.grow.json"
}

# rss: every node's and edge's RSS (kB), on one line.
rss() {
  for p in $WRIT_NODE_PIDS $WRIT_EDGE_PIDS; do awk '/^VmRSS/ {printf "%s ", $2}' "/proc/$p/status"; done
  echo
}

# rss_samples: `rss` every half second, until killed.
rss_samples() {
  while true; do
    rss
    sleep 0.5
  done
}

# leader: the id of the node the members follow (1, 2 or 3: nodes n1, n2, n3).
leader() {
  curl -sf --cacert "$WRIT_CA_FILE" -H "Authorization: Bearer $WRIT_ADMIN_TOKEN" "$WRIT_ADMIN_URL/v1/cluster/status" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["leader"])'
}

# point LABEL [SECONDS]: P1's point; each node's and edge's RSS (kB) sampled through it and at
# its end, and which node led.
point() {
  rss_samples >"$WORK/$1.rss_samples" &
  local sampler=$!
  "$BIN/writ-loadtest" writ --work-dir "$WORK/executors" --quiet --prefix p4o --concurrency "$CLIENTS" \
    --mix execute=1 --duration "${2:-$SECONDS_LOADED}" --verify --drain 60 \
    --watch-pids "$WRIT_NODE_PIDS $WRIT_EDGE_PIDS" --label "$1" --json "$WORK/$1.json" >&2
  kill "$sampler"
  wait "$sampler" 2>/dev/null || true
  rss >"$WORK/$1.rss"
  leader >"$WORK/$1.leader"
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
import json, statistics, sys
work, operations, clients, commit, out = sys.argv[1:]
NAMES = ["node1", "node2", "node3", "edge1", "edge2"]
def rss(label):
    """Each process's RSS in MB at the point's end, and its peak over the point's samples."""
    end = [int(k) // 1024 for k in open(f"{work}/{label}.rss").read().split()]
    rows = [[int(k) // 1024 for k in line.split()] for line in open(f"{work}/{label}.rss_samples")]
    rows = [r for r in rows if len(r) == len(NAMES)] + [end]
    return dict(zip(NAMES, end)), {n: max(r[i] for r in rows) for i, n in enumerate(NAMES)}
def by_role(peak, leader):
    """The leader's peak, the larger follower's, and each edge's."""
    followers = [peak[f"node{i}"] for i in (1, 2, 3) if i != leader]
    return {"leader": peak[f"node{leader}"], "follower": max(followers), "edge1": peak["edge1"], "edge2": peak["edge2"]}
def load(label):
    run = json.load(open(f"{work}/{label}.json"))
    grow = json.load(open(f"{work}/{label}.grow.json"))
    verify = run.get("verify") or {}
    leader = int(open(f"{work}/{label}.leader").read())
    end, peak = rss(label)
    return {"ops_per_s": run["throughput_per_s"], "p99_ms": run["latency_ms"]["p99"],
            "errors": sum(run["errors"].values()) if isinstance(run["errors"], dict) else run["errors"],
            "verify_passed": all(c["ok"] for c in verify.get("checks", [])) if verify else None,
            "leader": leader, "rss_mb": end, "rss_peak_mb": peak, "rss_peak_by_role_mb": by_role(peak, leader),
            "edge_resync_median_s": statistics.median(grow["edge_resync_s"]),
            "edge_resync_median_s_before": statistics.median(grow["edge_resync_s_before"]), **grow}
b, g = load("base"), load("grown")
ratio = lambda x, y: round(x / y, 3) if x and y else None
ratios = lambda key: {k: ratio(g[key][k], b[key][k]) for k in b[key]}
res = {"commit": commit, "operations": int(operations), "clients": int(clients), "base": b, "grown": g,
       "ratio_throughput": ratio(g["ops_per_s"], b["ops_per_s"]), "ratio_p99": ratio(g["p99_ms"], b["p99_ms"]),
       "ratio_rss": ratios("rss_mb"), "ratio_rss_peak": ratios("rss_peak_mb"),
       "ratio_rss_peak_by_role": ratios("rss_peak_by_role_mb"),
       "ratio_snapshot": ratio(g["snapshot_bytes"], b["snapshot_bytes"]),
       "ratio_snapshot_seeded": ratio(g["snapshot_bytes"], g["snapshot_bytes_before"]),
       "ratio_edge_resync": ratio(g["edge_resync_median_s"], b["edge_resync_median_s"]),
       "ratio_edge_resync_seeded": ratio(g["edge_resync_median_s"], g["edge_resync_median_s_before"])}
json.dump(res, open(out, "w"), indent=2)
dots = lambda d: " · ".join(str(v) for v in d.values())
print(f"# P4: 0 → {int(operations):,} finished operations within retention ({commit}, {clients} clients)\n")
print("| | ops/s | p99 ms | errors | verify | leader | RSS MB at the end, node 1 · 2 · 3 · edge 1 · 2 | peak | peak by role: leader · follower · edge 1 · 2 | snapshot bytes before → after seeding | edge 1 resync s before → after seeding (medians of 3) | disk MB per node (own) |")
print("|---|---:|---:|---:|:---|---:|---|---|---|---:|---|---|")
for name, p in (("base", b), ("grown", g)):
    disk = " · ".join(str(d // 2**20) for d in p["disk_bytes"])
    print(f"| {name} | {p['ops_per_s']:.1f} | {p['p99_ms']:.1f} | {p['errors']} | {'passed' if p['verify_passed'] else 'FAILED'} | "
          f"node {p['leader']} | {dots(p['rss_mb'])} | {dots(p['rss_peak_mb'])} | {dots(p['rss_peak_by_role_mb'])} | "
          f"{p['snapshot_bytes_before']:,} → {p['snapshot_bytes']:,} | {p['edge_resync_median_s_before']} → {p['edge_resync_median_s']} | {disk} |")
print(f"\nGrown/base: throughput {res['ratio_throughput']}, p99 {res['ratio_p99']}; RSS at the end "
      f"{dots(res['ratio_rss'])}, peak {dots(res['ratio_rss_peak'])}, peak by role (leader · follower · edge 1 · 2) "
      f"{dots(res['ratio_rss_peak_by_role'])}; snapshot {res['ratio_snapshot']} (the seeding alone: "
      f"{res['ratio_snapshot_seeded']}); edge resync {res['ratio_edge_resync']} (the seeding alone: "
      f"{res['ratio_edge_resync_seeded']}). Seeding took {g['seed_s']} s.")
PY
cat "$OUT/p4-operations.md"

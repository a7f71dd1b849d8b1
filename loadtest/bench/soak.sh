#!/usr/bin/env bash
# The soak (docs/performance.md, "Soak"): a local 3-node cluster with 2 edges (release build)
# takes `writ-loadtest` executes at a fixed rate — half of the last committed P1 rate at 64
# clients — for SOAK_SECONDS, then `--verify`. Every SOAK_SAMPLE_S a sampler records, per
# process (nodes, edges and the load's executor), RSS, PSS and anonymous memory and what the
# system allocator has handed out, each node's bytes on disk and what its RocksDB holds in
# memory, and the operations the ledger holds. The report fits memory against operations
# after SOAK_WARMUP_S (MB per million operations, over the whole window and over each half: a
# fill flattens, a leak does not) and disk likewise.
#
# Then the reclaim phase: the nodes restart with their clocks SOAK_CLOCK_AHEAD_S ahead (past
# two retention horizons and the event log's seven days), so retention compacts and releases
# what the load left and the event log its week-old events, and the sampler goes on through
# the phase. A third of the way in, and again two thirds in, a write and then a snapshot
# on every node (what the log's growth triggers in a cluster in service: the versions retention
# replaced are dropped at a snapshot once the older of the two a node keeps is past them), and
# two more rounds as soon as no operation is left to retire, after which the phase goes on for
# at least SOAK_RECLAIM_AFTER_S (while retention is still retiring, the phase runs on up to
# twice SOAK_RECLAIM_S): the disk curve shows what retention gives back. The report
# counts elections in each phase and reads each node's apply and WAL sync times at its end (the
# nodes restart for the reclaim, so the reclaim's are its own).
#
# Knobs: SOAK_SECONDS (3600), SOAK_RATE (ops/s; default half of P1's 64-client rate in
# results/latest.json), SOAK_WARMUP_S (600), SOAK_SAMPLE_S (30), SOAK_RECLAIM_S (900),
# SOAK_RECLAIM_AFTER_S (300),
# SOAK_CLOCK_AHEAD_S (8 days), SOAK_LABEL (what the binaries are; default: HEAD), BENCH_BUILD=0
# (use the release binaries already built),
# BENCH_OUT (loadtest/bench/results). Writes $BENCH_OUT/soak.{csv,json,md}.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=loadtest/bench/lib.sh
source loadtest/bench/lib.sh
SECONDS_LOADED=${SOAK_SECONDS:-3600}
WARMUP=${SOAK_WARMUP_S:-600}
SAMPLE=${SOAK_SAMPLE_S:-30}
RECLAIM=${SOAK_RECLAIM_S:-900}
AFTER=${SOAK_RECLAIM_AFTER_S:-300}
AHEAD=${SOAK_CLOCK_AHEAD_S:-$((8 * 86400))}
RATE=${SOAK_RATE:-$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(round(next(p["writ"]["ops_per_s"] for p in d["p1"] if p["clients"] == 64) / 2, 1))' loadtest/bench/results/latest.json)}
# What the binaries are (the commit they were built from).
LABEL=${SOAK_LABEL:-$(git rev-parse --short HEAD)}
WORK=$(mktemp -d /tmp/writ-soak.XXXXXX)
mkdir -p "$OUT"
started=$(date +%s)

log() { echo "== [soak $(( $(date +%s) - started ))s] $*" >&2; }

on_exit() { [ -z "${SAMPLER:-}" ] || kill "$SAMPLER" 2>/dev/null; }
bench_cluster

CSV=$WORK/soak.csv
echo "t_s,phase,process,rss_kb,pss_kb,anon_kb,disk_bytes,operations,snapshot_bytes,rocksdb_kb,term,heap_kb" >"$CSV"
# memory_kb PID: its RSS, PSS and anonymous memory in kB ("rss,pss,anon"); fails once it is gone.
memory_kb() {
  [ -r "/proc/$1/smaps_rollup" ] &&
    awk '/^Rss:/ {r=$2} /^Pss:/ {p=$2} /^Anonymous:/ {a=$2} END {print r "," p "," a}' "/proc/$1/smaps_rollup"
}
# sample PHASE: one row per process (its pid files name what runs now: restarts change pids).
sample() {
  local t ops p name role i kb term
  t=$(( $(date +%s) - started ))
  ops=$(operations_held) || true
  # The Raft term: when in a phase its elections fell.
  term=$(writ_raft term 2>/dev/null) || true
  for role in n e; do
    for i in 1 2 3; do
      p=$(cat "$WRIT_CLUSTER_DIR/$role$i/pid" 2>/dev/null) || continue
      kb=$(memory_kb "$p") || continue
      name=$([ $role = n ] && echo "node $i" || echo "edge $i")
      local disk=0 snap=0 rocks= metrics heap
      if [ $role = n ]; then
        metrics=$(curl -sf --cacert "$WRIT_CA_FILE" "$(echo "$WRIT_NODE_URLS" | cut -d' ' -f"$i")/metrics") || true
      else
        metrics=$(curl -sf "$(echo "$WRIT_MCP_URLS" | cut -d' ' -f"$i" | sed 's|/mcp$||')/metrics") || true
      fi
      # What the system allocator has handed to the process (none with mimalloc): beside the
      # RSS, memory the process keeps apart from memory the allocator keeps.
      heap=$(echo "$metrics" | awk '/^writ_allocator_bytes\{part="in_use"\}/ {printf "%d", $2 / 1024}')
      # (A file compaction deletes while du walks is not counted.)
      if [ $role = n ]; then
        disk=$(du -sb "$WRIT_CLUSTER_DIR/n$i/data" 2>/dev/null | cut -f1) || true
        # The newest snapshot: the state a node keeps and sends (its own holds no cold row).
        snap=$(find "$WRIT_CLUSTER_DIR/n$i/data/snapshots" -name '*.snap' -printf '%T@ %s\n' 2>/dev/null |
          sort -n | tail -1 | cut -d' ' -f2) || true
        # What its RocksDB holds in memory (memtables, table readers, block cache).
        rocks=$(echo "$metrics" |
          awk '/^writ_rocksdb_memory_bytes\{part="(memtables|table_readers|block_cache)"\}/ {s += $2}
               END {if (NR) printf "%d", s / 1024}') || true
      fi
      echo "$t,$1,$name,$kb,$disk,${ops:-},${snap:-0},$rocks,${term:-},${heap:-}" >>"$CSV"
    done
  done
  # The load's executors (writ-loadtest starts them; in pid order): processes of Writ too.
  i=0
  for p in $(pgrep -f "executor run --config $WORK/executors/" || true); do
    i=$((i + 1))
    kb=$(memory_kb "$p") || continue
    echo "$t,$1,executor $i,$kb,0,${ops:-},0,,${term:-}," >>"$CSV"
  done
}
sampler() { while :; do sample "$1"; sleep "$SAMPLE"; done; }

RESYNC_BEFORE=$(edge_resync)
writ_up
log "edge 1 resynced in $RESYNC_BEFORE s with an empty ledger"

log "load: $RATE operations/s for $SECONDS_LOADED s, sampled every $SAMPLE s"
TERM_LOAD=$(writ_raft term)
sampler load &
SAMPLER=$!
"$BIN/writ-loadtest" writ --work-dir "$WORK/executors" --prefix soak --rate "$RATE" --mix execute=1 \
  --duration "$SECONDS_LOADED" --quiet --verify --drain 300 --label soak --json "$WORK/soak.json" \
  --watch-pids "$WRIT_NODE_PIDS $WRIT_EDGE_PIDS" || log "the load run failed (see the report)"
kill "$SAMPLER"; wait "$SAMPLER" 2>/dev/null || true
sample load
ledger_records >"$WORK/records-after-load" || true
state_sections >"$WORK/sections-after-load"
TERM_LOADED=$(writ_raft term)
node_timings >"$WORK/timings-load"
RESYNC_AFTER=$(edge_resync)
writ_up
log "edge 1 resynced in $RESYNC_AFTER s after the load"
echo "{\"before_s\": $RESYNC_BEFORE, \"after_s\": $RESYNC_AFTER}" >"$WORK/resync.json"

log "reclaim: nodes restart $AHEAD s ahead; retention runs for $RECLAIM s"
deploy/local-cluster.sh down >/dev/null
WRIT_CLUSTER_RAFT="ledger_clock_ahead_s = $AHEAD" writ_up
TERM_RECLAIM=$(writ_raft term)
WRITES_FAILED=0
sampler reclaim &
SAMPLER=$!
reclaim_from=$(date +%s)
in_phase() { echo $(( $(date +%s) - reclaim_from )); }
# Rounds at a third and two thirds of the phase; then, once no operation is left to retire,
# two more: a snapshot drops what retention replaced once the older of the two a node keeps is
# past it. The phase lasts until SOAK_RECLAIM_AFTER_S after those, at least SOAK_RECLAIM_S; while
# retention is still retiring, up to twice SOAK_RECLAIM_S.
round=0 end=$((2 * RECLAIM))
while [ "$(in_phase)" -lt "$end" ]; do
  if [ "$round" -lt 2 ] && [ "$(in_phase)" -ge $(((round + 1) * (RECLAIM / 3))) ]; then
    round=$((round + 1))
    # A write first: a node builds no snapshot at the revision it already has one of.
    snapshot_round "$round"
  elif [ "$round" = 2 ] && [ "$(operations_held)" = 0 ]; then
    log "reclaim: no operation left to retire at $(in_phase) s"
    snapshot_round 3
    snapshot_round 4
    round=4
    end=$(( $(in_phase) + AFTER > RECLAIM ? $(in_phase) + AFTER : RECLAIM ))
    end=$(( end < 2 * RECLAIM ? end : 2 * RECLAIM ))
  fi
  sleep 5
done
kill "$SAMPLER"; wait "$SAMPLER" 2>/dev/null || true
sample reclaim
ledger_records >"$WORK/records-after-reclaim" || true
node_timings >"$WORK/timings-reclaim"
# Elections (Raft term increases) in each phase, from a settled leader to the phase's end.
echo "{\"load\": {\"term_from\": $TERM_LOAD, \"term_to\": $TERM_LOADED}," \
  "\"reclaim\": {\"term_from\": $TERM_RECLAIM, \"term_to\": $(writ_raft term), \"writes_failed\": $WRITES_FAILED, \"rounds\": $round}}" \
  >"$WORK/raft.json"

cp "$CSV" "$OUT/soak.csv"
if ! python3 loadtest/bench/soak_report.py "$OUT/soak.csv" "$WORK/soak.json" "$WARMUP" "$RATE" \
  "$LABEL" "$WORK/records-after-load" "$WORK/records-after-reclaim" \
  "$OUT/soak.json" "$WORK/resync.json" "$WORK/raft.json" "$WORK/timings-load" "$WORK/timings-reclaim" \
  "$WORK/sections-after-load" >"$OUT/soak.md"; then
  # An hour's run is not lost to the report: what it read outlives $WORK.
  mkdir -p "$OUT/soak-inputs"
  cp "$WORK"/*.json "$WORK"/records-after-* "$WORK"/timings-* "$WORK"/sections-after-load "$OUT/soak-inputs/"
  log "the report failed; its inputs are in $OUT/soak-inputs"
  exit 1
fi
cat "$OUT/soak.md"

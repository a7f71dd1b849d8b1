#!/usr/bin/env bash
# Retention of a day of operations without the day (docs/performance.md, "The reclaim phase
# alone"): the soak's
# reclaim phase on its own. A local 3-node cluster (release build), stopped, gets
# RECLAIM_OPERATIONS finished operations in bulk (`writ node seed`: each operation's
# submission, dispatch, start and report applied by the state machine's own apply; node 1's
# store linked into nodes 2 and 3), then the nodes restart with their clocks
# RECLAIM_CLOCK_AHEAD_S ahead — past two retention horizons and the event log's seven days — so
# retention retires every operation and idempotency key and the event log drops every event
# (writing out whole the records the tenant still keeps: ten million, as the soak's tenant), on
# the same cores, while the cluster must keep its leader.
#
# At RECLAIM_SNAPSHOTS_AT seconds, a write and a snapshot on every node, as in the soak's reclaim
# phase: a snapshot is when a node drops the versions of cold rows retention replaced.
#
# Every RECLAIM_SAMPLE_S, each node's Raft term, operations held, events dropped, CPU time,
# disk, and what its work waited on: the async runtime's stalls, its applies and their RocksDB
# writes, the event log's retention steps, RocksDB's compaction backlog. Ends once nothing is
# left to retire, the event log has stopped dropping and the snapshots are built, or after
# RECLAIM_S. Writes $BENCH_OUT/reclaim.{csv,md}.
#
# Knobs: RECLAIM_OPERATIONS (1000000: an hour of the soak's load is 1,028,160),
# RECLAIM_AUDIT_MAX_EVENTS (10000000), RECLAIM_SNAPSHOTS_AT ("300 600"), RECLAIM_S (1200),
# RECLAIM_SAMPLE_S (5), RECLAIM_CLOCK_AHEAD_S (8 days), RECLAIM_LABEL (what the binaries are;
# default: HEAD), BENCH_BUILD=0 (use the release binaries already built), BENCH_OUT
# (loadtest/bench/results).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=loadtest/bench/lib.sh
source loadtest/bench/lib.sh
OPERATIONS=${RECLAIM_OPERATIONS:-1000000}
LIMIT=${RECLAIM_S:-1200}
SAMPLE=${RECLAIM_SAMPLE_S:-5}
AHEAD=${RECLAIM_CLOCK_AHEAD_S:-$((8 * 86400))}
# The audit records the tenant keeps: the soak's load tenant's (`writ-loadtest --audit-max-events`).
AUDIT_KEPT=${RECLAIM_AUDIT_MAX_EVENTS:-10000000}
SNAPSHOTS_AT=${RECLAIM_SNAPSHOTS_AT:-300 600}
LABEL=${RECLAIM_LABEL:-$(git rev-parse --short HEAD)}
WORK=$(mktemp -d /tmp/writ-reclaim.XXXXXX)
mkdir -p "$OUT"
started=$(date +%s)
log() { echo "== [reclaim $(( $(date +%s) - started ))s] $*" >&2; }

bench_cluster
N="$WRIT_CLUSTER_DIR"
writ_version_in_force
deploy/local-cluster.sh down >/dev/null
log "seeding $OPERATIONS finished operations"
t0=$(date +%s)
"$BIN/writ" node seed --data-dir "$N/n1/data" --operations "$OPERATIONS" --audit-max-events "$AUDIT_KEPT" \
  --copy-to "$N/n2/data" --copy-to "$N/n3/data" >&2
SEED_S=$(( $(date +%s) - t0 ))
log "restarting $AHEAD s ahead"
WRIT_CLUSTER_RAFT="ledger_clock_ahead_s = $AHEAD" writ_up
TERM_FROM=$(writ_raft term)

# The metrics each sample reads, in the CSV's order after its fixed columns.
METRICS=(
  'writ_raft_term' 'writ_raft_is_leader' 'writ_ledger_records{kind="operations"}' 'writ_events_trimmed_total'
  'writ_audit_records_written_out_total' 'writ_node_failure_detector_prevotes_total'
  'writ_runtime_stall_seconds_count' 'writ_runtime_stall_seconds_bucket{le="0.1"}'
  'writ_state_apply_seconds_count' 'writ_state_apply_seconds_sum' 'writ_state_apply_seconds_bucket{le="0.1"}'
  'writ_state_write_seconds_sum' 'writ_event_log_retention_step_seconds_count'
  'writ_event_log_retention_step_seconds_sum' 'writ_log_sync_seconds_count' 'writ_log_sync_seconds_sum'
  'writ_rocksdb_compaction{part="l0_files_max"}' 'writ_rocksdb_compaction{part="pending_bytes"}'
  'writ_rocksdb_compaction{part="delayed_write_rate"}' 'writ_rocksdb_compaction{part="write_stopped"}'
  'writ_log_write_seconds_count' 'writ_log_write_seconds_sum' 'writ_log_write_seconds_bucket{le="0.1"}'
)
CSV=$WORK/reclaim.csv
echo "t_s,node,cpu_s,disk_bytes,term,leader,operations,events_trimmed,written_out,prevotes,stalls,stalls_le_100ms,applies,apply_s,applies_le_100ms,write_s,trim_steps,trim_s,syncs,sync_s,l0_files_max,pending_bytes,delayed_write_rate,write_stopped,log_writes,log_write_s,log_writes_le_100ms" >"$CSV"

# sample: one row per node; prints the operations held and events dropped, summed over nodes.
sample() {
  local t i u p m row cpu disk ops=0 trimmed=
  t=$(( $(date +%s) - started ))
  for i in 1 2 3; do
    u=$(echo "$WRIT_NODE_URLS" | cut -d' ' -f"$i")
    p=$(cat "$N/n$i/pid")
    m=$(curl -sf --max-time 5 --cacert "$WRIT_CA_FILE" "$u/metrics") || m=
    # CPU seconds (user and system, clock ticks of 1/100 s) and bytes on disk.
    cpu=$(awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$p/stat" 2>/dev/null) || cpu=
    disk=$(du -sb "$N/n$i/data" 2>/dev/null | cut -f1) || disk=
    row="$t,node $i,$cpu,$disk"
    for k in "${METRICS[@]}"; do
      # (awk reads to the end: an early exit would fail the pipe's writer.)
      row="$row,$(echo "$m" | awk -v k="$k" '!found && index($0, k " ") == 1 {print $2; found = 1}')"
    done
    echo "$row" >>"$CSV"
    # (A node that did not answer counts as holding an operation: not done.)
    ops=$((ops + $(echo "$row" | cut -d, -f7 | cut -d. -f1 | sed 's/^$/1/')))
    trimmed="$trimmed $(echo "$row" | cut -d, -f8)"
  done
  echo "$ops$trimmed"
}

log "sampling every $SAMPLE s for at most $LIMIT s; snapshots at ${SNAPSHOTS_AT// /, } s"
reclaim_from=$(date +%s)
last_trimmed= still=0 round=0 WRITES_FAILED=0
read -r -a rounds <<<"$SNAPSHOTS_AT"
while [ $(( $(date +%s) - reclaim_from )) -lt "$LIMIT" ]; do
  if [ "$round" -lt "${#rounds[@]}" ] && [ $(( $(date +%s) - reclaim_from )) -ge "${rounds[$round]}" ]; then
    round=$((round + 1))
    snapshot_round "$round"
  fi
  read -r ops trimmed < <(sample)
  # Done once no node holds an operation and no node's event log dropped anything for a minute.
  if [ "$ops" = 0 ] && [ "$trimmed" = "$last_trimmed" ] && [ "$round" -ge "${#rounds[@]}" ]; then
    still=$((still + SAMPLE))
    [ "$still" -ge 60 ] && break
  else
    still=0
  fi
  last_trimmed=$trimmed
  sleep "$SAMPLE"
done
RECLAIM_ELAPSED=$(( $(date +%s) - reclaim_from ))
TERM_TO=$(writ_raft term)
# A write once it is over: the cluster serves.
"$WRIT_BIN" admin tenant create "after-reclaim" >/dev/null || WRITES_FAILED=$((WRITES_FAILED + 1))
cp "$CSV" "$OUT/reclaim.csv"
python3 loadtest/bench/reclaim_report.py "$OUT/reclaim.csv" "$LABEL" "$OPERATIONS" "$SEED_S" "$RECLAIM_ELAPSED" \
  "$TERM_FROM" "$TERM_TO" "$WRITES_FAILED" "$reclaim_from" "$started" >"$OUT/reclaim.md"
cat "$OUT/reclaim.md"

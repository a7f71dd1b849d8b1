# Shared by the bench scripts (run.sh, growth.sh, soak.sh); sourced from the repository's root,
# not run. writ_up and ledger_records expect WRIT_BIN and WRIT_CLUSTER_DIR to be exported
# (bench_cluster does).

# Where the release binaries are, and where results go (BENCH_OUT).
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=$TARGET/release
OUT=${BENCH_OUT:-$ROOT/loadtest/bench/results}

# bench_cluster: builds the release binaries (unless BENCH_BUILD=0), starts the local cluster
# under $WORK/writ with the binaries in $BIN, and on exit runs the caller's `on_exit` (if it
# defines one), stops the cluster and removes $WORK. The caller defines `log`.
bench_cluster() {
  trap bench_cleanup EXIT
  if [ "${BENCH_BUILD:-1}" = 1 ]; then
    log "release build"
    cargo build --release --workspace --bins
  fi
  export WRIT_BIN=$BIN/writ WRIT_CLUSTER_DIR=$WORK/writ
  writ_up
}

bench_cleanup() {
  set +e
  if declare -F on_exit >/dev/null; then on_exit; fi
  WRIT_BIN=$BIN/writ WRIT_CLUSTER_DIR=$WORK/writ deploy/local-cluster.sh down >/dev/null 2>&1
  wait 2>/dev/null
  rm -rf "$WORK"
}

# writ_up: starts what of the local cluster (deploy/local-cluster.sh) is not running — a
# stopped node restarts from its data and catches up — and waits until every member follows
# one leader. WRIT_CLUSTER_RAFT (optional) goes into the nodes' [raft] sections.
writ_up() {
  deploy/local-cluster.sh up >/dev/null
  # shellcheck disable=SC1091
  source "$WRIT_CLUSTER_DIR/env"
  for _ in $(seq 1 150); do
    [ "$(curl -sf --cacert "$WRIT_CA_FILE" -H "Authorization: Bearer $WRIT_ADMIN_TOKEN" "$WRIT_ADMIN_URL/v1/cluster/status" |
      python3 -c 'import json,sys; s=json.load(sys.stdin); print(sum(1 for m in s["members"] if s["leader"] and (m["status"] or {}).get("leader") == s["leader"]))' 2>/dev/null)" = 3 ] && return
    sleep 0.2
  done
  echo "writ cluster did not settle on a leader" >&2
  return 1
}

# writ_raft FIELD: the highest FIELD (term: each election raises it; last_log_index: Raft
# entries written) over the Writ cluster's members.
writ_raft() {
  curl -sf --cacert "$WRIT_CA_FILE" -H "Authorization: Bearer $WRIT_ADMIN_TOKEN" "$WRIT_ADMIN_URL/v1/cluster/status" |
    python3 -c 'import json,sys; s=json.load(sys.stdin); print(max((m["status"] or {}).get(sys.argv[1]) or 0 for m in s["members"]))' "$1"
}

# writ_version_in_force: waits (at most a minute) until every member has the newest ledger version
# they all run in force: a fresh cluster's leader raises it within seconds of starting, and what is
# seeded into a store stopped before that would be recorded in an older version's form.
writ_version_in_force() {
  for _ in $(seq 1 300); do
    curl -sf --cacert "$WRIT_CA_FILE" -H "Authorization: Bearer $WRIT_ADMIN_TOKEN" "$WRIT_ADMIN_URL/v1/cluster/status" |
      python3 -c 'import json,sys; m=[x["status"] for x in json.load(sys.stdin)["members"]]; sys.exit(0 if m and all(x and x["ledger_version_in_force"] == min(y["ledger_version"] for y in m) for x in m) else 1)' &&
      return
    sleep 0.2
  done
  echo "the cluster's newest ledger version did not come into force" >&2
  return 1
}

# snapshot_round N: a write, then a snapshot on every node — what the log's growth triggers in a
# cluster in service, and what lets a node drop the versions of cold rows retention replaced.
# Counts a refused write in WRITES_FAILED; the caller defines `log`.
snapshot_round() {
  local u
  "$WRIT_BIN" admin tenant create "reclaim-$1" >/dev/null ||
    { log "the write before round $1 failed"; WRITES_FAILED=$((WRITES_FAILED + 1)); }
  for u in $WRIT_NODE_URLS; do
    "$WRIT_BIN" admin --url "$u" cluster snapshot >/dev/null || log "snapshot on $u failed"
  done
  log "round $1: every node built a snapshot"
}

# node_timings: every node's histograms of apply and WAL sync times, its pre-vote count and what
# the event log's retention did (events dropped, records written out) — its /metrics lines, each
# prefixed with the node's URL.
node_timings() {
  local u
  for u in $WRIT_NODE_URLS; do
    curl -sf --cacert "$WRIT_CA_FILE" "$u/metrics" |
      grep -E '^writ_(state_apply_seconds|state_write_seconds|state_read_wait_seconds|log_sync_seconds|runtime_stall_seconds|event_log_retention_step_seconds|node_failure_detector_prevotes_total|events_trimmed_total|audit_records_written_out_total)' |
      sed "s|^|$u |" || true
  done
}

# ledger_records: a node's `writ_ledger_records` lines (what the ledger holds, by kind).
ledger_records() {
  local u
  for u in $WRIT_NODE_URLS; do
    curl -sf --cacert "$WRIT_CA_FILE" "$u/metrics" | grep '^writ_ledger_records' && return
  done
}

# operations_held: the operations the ledger holds (`writ_ledger_records`, the first node that answers).
operations_held() {
  ledger_records | awk '/kind="operations"/ {printf "%d", $2}'
}

# state_sections: node 1's `writ_state_section_bytes` lines (each section of its last snapshot).
state_sections() {
  curl -sf --cacert "$WRIT_CA_FILE" "${WRIT_NODE_URLS%% *}/metrics" | grep '^writ_state_section_bytes' || true
}

# edge_resync: seconds for edge 1, restarted, to load the ledger's projection and be ready.
edge_resync() {
  local pid ready
  pid=$(cat "$WRIT_CLUSTER_DIR/e1/pid")
  kill "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  rm -f "$WRIT_CLUSTER_DIR/e1/pid"
  ready=${WRIT_MCP_URLS%% *}
  ready=${ready%/mcp}/readyz
  local t0
  t0=$(date +%s.%N)
  deploy/local-cluster.sh up >/dev/null
  for _ in $(seq 1 3000); do curl -sf "$ready" >/dev/null && break; sleep 0.01; done
  python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$t0" "$(date +%s.%N)"
}

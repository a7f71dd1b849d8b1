# Shared by the bench scripts (run.sh, growth.sh, soak.sh); sourced, not run. Expects WRIT_BIN
# and WRIT_CLUSTER_DIR to be exported.

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

# ledger_records: a node's `writ_ledger_records` lines (what the ledger holds, by kind).
ledger_records() {
  local u
  for u in $WRIT_NODE_URLS; do
    curl -sf --cacert "$WRIT_CA_FILE" "$u/metrics" | grep '^writ_ledger_records' && return
  done
}

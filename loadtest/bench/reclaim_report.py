"""The report of loadtest/bench/reclaim.sh: from its samples (reclaim.csv), how long retention
took, the elections it cost, and what each node's work waited on."""
import csv
import sys


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def fmt(v, digits=0):
    return "–" if v is None else f"{v:,.{digits}f}"


def main():
    path, label, operations, seed_s, elapsed, term_from, term_to, writes_failed, reclaim_from, started = sys.argv[1:11]
    offset = int(reclaim_from) - int(started)
    rows = [{k: (v if k == "node" else num(v)) for k, v in r.items()} for r in csv.DictReader(open(path))]
    by_node = {}
    for r in rows:
        by_node.setdefault(r["node"], []).append(r)
    times = sorted({r["t_s"] for r in rows})
    ops_at = {t: sum(r["operations"] or 0 for r in rows if r["t_s"] == t) for t in times}
    retired_at = next((t - offset for t in times if ops_at[t] == 0), None)
    trimmed_last = {}
    for n, rs in by_node.items():
        last = rs[-1]["events_trimmed"]
        trimmed_last[n] = next((r["t_s"] - offset for r in rs if r["events_trimmed"] == last), None)
    print(f"# Reclaim (at {label}): {int(operations):,} finished operations seeded in {seed_s} s, "
          f"clocks 8 days ahead\n")
    print(f"- Sampled for {elapsed} s; every operation retired after "
          f"{fmt(retired_at)} s; the event log's retention stopped dropping after "
          + ", ".join(f"{fmt(t)} s ({n})" for n, t in sorted(trimmed_last.items())) + ".")
    print(f"- **Elections: {int(term_to) - int(term_from)}** (term {term_from} → {term_to}); writes refused "
          f"(one before each round of snapshots, one at the end): {writes_failed}.\n")
    print("Each node over the whole run (counters since its restart): CPU seconds; the async runtime's stalls "
          "over 100 ms (`writ_runtime_stall_seconds`); applies, their mean ms and those over 100 ms, and the mean "
          "ms of their RocksDB write; the event log's retention steps and their mean ms; the log writer's "
          "RocksDB writes (`writ_log_write_seconds`): mean ms and those over 100 ms; WAL syncs' mean ms; "
          "RocksDB's compaction backlog (most level-0 files, most pending GB, seconds of slowed and of stopped "
          "writes); pre-votes; disk MB at the start → peak → end.\n")
    print("| node | CPU s | stalls > 100 ms | applies | mean ms | > 100 ms | write ms | retention steps | mean ms "
          "| log write ms | > 100 ms | sync ms | L0 files max | pending GB max | slowed s | stopped s | pre-votes "
          "| disk MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    sample_s = (times[1] - times[0]) if len(times) > 1 else 0
    for n, rs in sorted(by_node.items()):
        last, first = rs[-1], rs[0]
        g = lambda k: last.get(k) or 0
        applies, log_writes = g("applies"), g("log_writes")
        steps = g("trim_steps")
        disk = [r["disk_bytes"] for r in rs if r["disk_bytes"]]
        cells = [
            fmt(g("cpu_s") - (first["cpu_s"] or 0)),
            fmt(g("stalls") - g("stalls_le_100ms")),
            fmt(applies), fmt(1000 * g("apply_s") / applies if applies else None, 1),
            fmt(applies - g("applies_le_100ms")), fmt(1000 * g("write_s") / applies if applies else None, 2),
            fmt(steps), fmt(1000 * g("trim_s") / steps if steps else None, 1),
            fmt(1000 * g("log_write_s") / log_writes if log_writes else None, 2),
            fmt(log_writes - g("log_writes_le_100ms") if log_writes else None),
            fmt(1000 * g("sync_s") / g("syncs") if g("syncs") else None, 2),
            fmt(max((r["l0_files_max"] or 0) for r in rs)),
            fmt(max((r["pending_bytes"] or 0) for r in rs) / 1e9, 2),
            fmt(sample_s * sum(1 for r in rs if (r["delayed_write_rate"] or 0) > 0)),
            fmt(sample_s * sum(1 for r in rs if (r["write_stopped"] or 0) > 0)),
            fmt(g("prevotes")),
            (f"{disk[0] / 1e6:,.0f} → {max(disk) / 1e6:,.0f} → {disk[-1] / 1e6:,.0f}" if disk else "–"),
        ]
        print(f"| {n} | " + " | ".join(cells) + " |")
    print("\nOver time (s since the restart; per interval since the row before: the nodes' CPU seconds and "
          "stalls over 100 ms, summed; then the term, operations held and events dropped by node 1, and the "
          "most level-0 files and pending GB of any node):\n")
    print("| s | term | operations | events dropped | CPU s | stalls > 100 ms | L0 files | pending GB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    step = max(1, len(times) // 40)
    picked = times[::step] + ([times[-1]] if (len(times) - 1) % step else [])
    prev = None
    for t in picked:
        at = [r for r in rows if r["t_s"] == t]
        n1 = next((r for r in at if r["node"] == "node 1"), {})
        total = lambda k: sum((r[k] or 0) for r in at)
        stalls = total("stalls") - total("stalls_le_100ms")
        cpu = total("cpu_s")
        d_cpu, d_stalls = (cpu - prev[0], stalls - prev[1]) if prev else (None, None)
        prev = (cpu, stalls)
        print(f"| {fmt(t - offset)} | {fmt(n1.get('term'))} | {fmt(n1.get('operations'))} | "
              f"{fmt(n1.get('events_trimmed'))} | {fmt(d_cpu)} | {fmt(d_stalls)} | "
              f"{fmt(max((r['l0_files_max'] or 0) for r in at))} | "
              f"{fmt(max((r['pending_bytes'] or 0) for r in at) / 1e9, 2)} |")


main()

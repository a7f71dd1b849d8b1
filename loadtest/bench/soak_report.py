"""The soak's report (loadtest/bench/soak.sh): memory and disk against operations, fitted by
least squares after the warm-up, and the disk curve while retention reclaims.

Arguments: samples CSV, the load run's JSON, warm-up seconds, target rate, commit, the ledger
records after the load and after the reclaim phase, the JSON to write, and (optional) the edge
resync times, the Raft terms of each phase, each node's timings at the end of each phase
(`node_timings` in lib.sh) and node 1's snapshot sections after the load (`state_sections`).
Prints markdown."""

import csv
import json
import os
import re
import sys


def slope(points):
    """Least-squares slope of y over x; None with fewer than 3 points or no spread in x."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def records(path):
    out = {}
    if os.path.exists(path):
        for line in open(path):
            m = re.match(r'writ_ledger_records\{kind="([a-z_]+)"\} ([0-9.e+]+)', line)
            if m:
                out[m.group(1)] = int(float(m.group(2)))
    return out


def state_sections(path):
    """The bytes of each section of a node's last snapshot, from its `writ_state_section_bytes`."""
    out = {}
    if path and os.path.exists(path):
        for line in open(path):
            m = re.match(r'writ_state_section_bytes\{section="([a-z_]+)"\} ([0-9.e+]+)', line)
            if m:
                out[m.group(1)] = int(float(m.group(2)))
    return out


def timings(path):
    """Per node, per histogram (apply, WAL sync): count, mean and the bucket holding the 99th
    percentile, in ms, and how many took over 100 ms; and the node's pre-votes."""
    nodes = {}
    if not path or not os.path.exists(path):
        return nodes
    for line in open(path):
        # A histogram's series with labels (besides `le`) are added together.
        m = re.match(r'(\S+) (writ_\w+?)(_bucket|_sum|_count|_total)?(\{[^}]*\})? ([0-9.e+]+)$', line.strip())
        if not m:
            continue
        url, name, part, value = m.group(1), m.group(2), m.group(3) or "", float(m.group(5))
        le = re.search(r'le="([^"]+)"', m.group(4) or "")
        le = le.group(1) if le else None
        node = nodes.setdefault(url, {})
        counters = {"writ_node_failure_detector_prevotes": "prevotes", "writ_events_trimmed": "events_trimmed",
                    "writ_audit_records_written_out": "written_out"}
        if name in counters:
            node[counters[name]] = int(value)
            continue
        h = node.setdefault(name.removeprefix("writ_").removesuffix("_seconds"), {"by_le": {}})
        if le is not None:
            h["by_le"][float(le)] = h["by_le"].get(float(le), 0) + value
        elif part == "_sum":
            h["sum"] = h.get("sum", 0) + value
        elif part == "_count":
            h["count"] = h.get("count", 0) + value
    for node in nodes.values():
        for key, h in list(node.items()):
            if not isinstance(h, dict):
                continue
            n, buckets = h.get("count", 0), sorted(h.pop("by_le").items())
            h["mean_ms"] = 1000 * h.pop("sum", 0) / n if n else None
            h["p99_le_ms"] = next((1000 * le for le, c in buckets if c >= 0.99 * n), None) if n else None
            h["over_100ms"] = n - next((c for le, c in buckets if le == 0.1), n)
            # The smallest bucket every sample fits in.
            h["max_le_ms"] = next((1000 * le for le, c in buckets if c >= n), None) if n else None
    return nodes


def fmt(v, digits=0):
    return "-" if v is None else f"{v:,.{digits}f}"


def main():
    samples_csv, run_json, warmup, rate, commit, after_load, after_reclaim, out = sys.argv[1:9]
    resync_json = sys.argv[9] if len(sys.argv) > 9 else ""
    resync = json.load(open(resync_json)) if resync_json and os.path.exists(resync_json) else {}
    raft_json = sys.argv[10] if len(sys.argv) > 10 else ""
    raft = json.load(open(raft_json)) if raft_json and os.path.exists(raft_json) else {}
    phase_timings = {"load": timings(sys.argv[11] if len(sys.argv) > 11 else ""),
                     "reclaim": timings(sys.argv[12] if len(sys.argv) > 12 else "")}
    sections = state_sections(sys.argv[13] if len(sys.argv) > 13 else "")
    rows = list(csv.DictReader(open(samples_csv)))
    run = json.load(open(run_json)) if os.path.exists(run_json) else {}
    load = [r for r in rows if r["phase"] == "load" and r["operations"]]
    start = min(int(r["t_s"]) for r in load)
    measured = [r for r in load if int(r["t_s"]) >= start + int(warmup)]
    processes = sorted({r["process"] for r in rows})

    def fit(proc, field, scale, part=None):
        pts = [(int(r["operations"]) / 1e6, int(r[field]) / scale) for r in measured
               if r["process"] == proc and r.get(field)]
        if part is not None:
            half = len(pts) // 2
            pts = pts[:half] if part == 0 else pts[half:]
        return slope(pts)

    memory = []
    for p in processes:
        mine = [r for r in measured if r["process"] == p]
        if not mine:
            continue
        memory.append({
            "process": p,
            "rss_mb_start": int(mine[0]["rss_kb"]) / 1024,
            "rss_mb_end": int(mine[-1]["rss_kb"]) / 1024,
            "rss_mb_per_m": fit(p, "rss_kb", 1024),
            "rss_mb_per_m_first_half": fit(p, "rss_kb", 1024, 0),
            "rss_mb_per_m_second_half": fit(p, "rss_kb", 1024, 1),
            "pss_mb_per_m": fit(p, "pss_kb", 1024),
            "anon_mb_per_m": fit(p, "anon_kb", 1024),
            # Of the RSS, what the system allocator has handed to the process (none with
            # mimalloc): where RSS grows and this does not, the allocator keeps the growth.
            "heap_mb_start": int(mine[0]["heap_kb"]) / 1024 if mine[0].get("heap_kb") else None,
            "heap_mb_end": int(mine[-1]["heap_kb"]) / 1024 if mine[-1].get("heap_kb") else None,
            "heap_mb_per_m": fit(p, "heap_kb", 1024),
            "disk_mb_per_m": fit(p, "disk_bytes", 1 << 20) if p.startswith("node") else None,
            # Of the RSS, what the node's RocksDB holds (memtables, table readers, block cache).
            "rocksdb_mb_start": int(mine[0]["rocksdb_kb"]) / 1024 if mine[0].get("rocksdb_kb") else None,
            "rocksdb_mb_end": int(mine[-1]["rocksdb_kb"]) / 1024 if mine[-1].get("rocksdb_kb") else None,
            "rocksdb_mb_per_m": fit(p, "rocksdb_kb", 1024) if p.startswith("node") else None,
        })
    ops_measured = int(measured[-1]["operations"]) - int(measured[0]["operations"]) if measured else 0

    # The disk curve: node 1's bytes and the operations held, each sample of both phases.
    curve = [(int(r["t_s"]), r["phase"], int(r["disk_bytes"]) / (1 << 20), r["operations"],
              int(r["rss_kb"]) / 1024, int(r["rocksdb_kb"]) / 1024 if r.get("rocksdb_kb") else None,
              int(r["term"]) if r.get("term") else None)
             for r in rows if r["process"] == "node 1"]
    nodes = [p for p in processes if p.startswith("node")]
    disk = {}
    for p in nodes:
        mine = [r for r in rows if r["process"] == p]
        at_load_end = [int(r["disk_bytes"]) for r in mine if r["phase"] == "load"][-1]
        in_reclaim = [int(r["disk_bytes"]) for r in mine if r["phase"] == "reclaim"]
        # The newest snapshot's size at the end of the warm-up and of the load.
        snaps = [int(r.get("snapshot_bytes") or 0) for r in mine if r in measured]
        disk[p] = {"mb_at_load_end": at_load_end / (1 << 20),
                   "mb_at_reclaim_end": in_reclaim[-1] / (1 << 20) if in_reclaim else None,
                   "mb_reclaim_peak": max(in_reclaim) / (1 << 20) if in_reclaim else None,
                   "snapshot_mb_after_warmup": snaps[0] / (1 << 20) if snaps else None,
                   "snapshot_mb_at_load_end": snaps[-1] / (1 << 20) if snaps else None}

    v = run.get("verify") or {}
    summary = {
        "commit": commit, "target_rate": float(rate), "warmup_s": int(warmup),
        "throughput_per_s": run.get("throughput_per_s"), "ok": run.get("ok"), "errors": run.get("errors"),
        "latency_ms": run.get("latency_ms"), "verify_passed": bool(v) and all(c["ok"] for c in v.get("checks", [])),
        "acknowledged_lost": v.get("acknowledged_lost"), "operations_measured": ops_measured,
        "memory": memory, "disk": disk, "records_after_load": records(after_load),
        "records_after_reclaim": records(after_reclaim), "state_sections_after_load": sections,
        "curve": curve, "edge_resync": resync,
        "raft": raft, "timings": phase_timings,
    }
    json.dump(summary, open(out, "w"), indent=1)

    lat = run.get("latency_ms") or {}
    print(f"# Soak (at {commit}): {fmt(run.get('ok'))} operations at {rate}/s target "
          f"({fmt(run.get('throughput_per_s'), 1)}/s reached), p99 {fmt(lat.get('p99'), 1)} ms, "
          f"errors {sum((run.get('errors') or {}).values())}, verify "
          f"{'passed' if summary['verify_passed'] else 'FAILED'}, acknowledged lost {fmt(v.get('acknowledged_lost'))}\n")
    print(f"Fitted over {ops_measured:,} operations after a {warmup} s warm-up (least squares, "
          "MB per million operations; halves: the first and second half of the samples).\n")
    print("| process | RSS start MB | RSS end MB | RSS MB/M | first half | second half | PSS MB/M | anon MB/M | "
          "heap in use MB start → end | heap MB/M | RocksDB MB start → end | RocksDB MB/M | disk MB/M |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in memory:
        print(f"| {m['process']} | {m['rss_mb_start']:.0f} | {m['rss_mb_end']:.0f} | {fmt(m['rss_mb_per_m'])} | "
              f"{fmt(m['rss_mb_per_m_first_half'])} | {fmt(m['rss_mb_per_m_second_half'])} | "
              f"{fmt(m['pss_mb_per_m'])} | {fmt(m['anon_mb_per_m'])} | "
              f"{fmt(m['heap_mb_start'])} → {fmt(m['heap_mb_end'])} | {fmt(m['heap_mb_per_m'])} | "
              f"{fmt(m['rocksdb_mb_start'])} → {fmt(m['rocksdb_mb_end'])} | {fmt(m['rocksdb_mb_per_m'])} | "
              f"{fmt(m['disk_mb_per_m'])} |")
    if resync:
        print(f"\nEdge 1 restarted and ready (its projection loaded): {resync['before_s']} s before the load, "
              f"{resync['after_s']} s after it.")
    print("\n## Disk while retention reclaims (nodes restarted past two retention horizons)\n")
    print("| node | MB at the end of the load | peak MB in the reclaim phase | MB at the end of the reclaim phase | snapshot MB after warm-up → at the end of the load |")
    print("|---|---:|---:|---:|---:|")
    for p, d in disk.items():
        print(f"| {p} | {d['mb_at_load_end']:.0f} | {fmt(d.get('mb_reclaim_peak'))} | {fmt(d['mb_at_reclaim_end'])} | "
              f"{fmt(d['snapshot_mb_after_warmup'], 1)} → {fmt(d['snapshot_mb_at_load_end'], 1)} |")
    if sections:
        print("\nNode 1's last snapshot of the load by section (`writ_state_section_bytes`), bytes: " +
              ", ".join(f"{k} {v:,}" for k, v in sorted(sections.items(), key=lambda kv: -kv[1])))
    ra, rr = summary["records_after_load"], summary["records_after_reclaim"]
    if ra:
        print("\nRecords (`writ_ledger_records`), after the load → after the reclaim phase: " +
              ", ".join(f"{k} {ra[k]:,} → {fmt(rr.get(k))}" for k in sorted(ra)))
    if raft:
        lo, re_ = raft["load"], raft["reclaim"]
        print(f"\nElections (Raft term increases from a settled leader): {lo['term_to'] - lo['term_from']} during "
              f"the load, {re_['term_to'] - re_['term_from']} during the reclaim phase; writes refused in the "
              f"reclaim phase: {re_['writes_failed']} of {re_.get('rounds', 2)}.")
    for phase, nodes in phase_timings.items():
        if not nodes:
            continue
        print(f"\nEach node at the end of the {phase} phase: applies (`writ_state_apply_seconds`) and WAL syncs "
              "(`writ_log_sync_seconds`) — count, mean ms, the bucket of the 99th percentile (ms, ≤), count over "
              "100 ms — failure-detector pre-votes, and what the event log's retention did (events dropped, "
              "audit records written out whole).\n")
        print("| node | applies | mean | p99 ≤ | > 100 ms | syncs | mean | p99 ≤ | > 100 ms | pre-votes "
              "| events dropped | records written out |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for url, t in sorted(nodes.items()):
            a, w = t.get("state_apply", {}), t.get("log_sync", {})
            cells = [fmt(h.get(k), d) for h in (a, w) for k, d in
                     (("count", 0), ("mean_ms", 2), ("p99_le_ms", 1), ("over_100ms", 0))]
            print(f"| {url} | " + " | ".join(cells) + f" | {fmt(t.get('prevotes', 0))} "
                  f"| {fmt(t.get('events_trimmed', 0))} | {fmt(t.get('written_out', 0))} |")
        print(f"\nWhat each node's work waited on in the {phase} phase: the async runtime's stalls "
              "(`writ_runtime_stall_seconds`: a task woken late; over 100 ms, and the bucket of the largest), "
              "the RocksDB write of each apply (`writ_state_write_seconds`), the event log's retention steps "
              "(`writ_event_log_retention_step_seconds`) and the reads of the state that waited for an apply "
              "(`writ_state_read_wait_seconds`) — count, mean ms, p99 bucket, count over 100 ms.\n")
        print("| node | stalls > 100 ms | largest ≤ ms | writes | mean | p99 ≤ | > 100 ms "
              "| retention steps | mean | p99 ≤ | > 100 ms | read waits | mean | p99 ≤ | > 100 ms |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for url, t in sorted(nodes.items()):
            s_, w, r = t.get("runtime_stall", {}), t.get("state_write", {}), t.get("event_log_retention_step", {})
            cells = [fmt(s_.get("over_100ms")), fmt(s_.get("max_le_ms"), 1)]
            cells += [fmt(h.get(k), d) for h in (w, r, t.get("state_read_wait", {})) for k, d in
                      (("count", 0), ("mean_ms", 2), ("p99_le_ms", 1), ("over_100ms", 0))]
            print(f"| {url} | " + " | ".join(cells) + " |")
    print("\nNode 1 over time (s since start, phase, MB on disk, operations held, RSS and its RocksDB part, "
          "the cluster's Raft term):\n")
    print("| s | phase | disk MB | operations | RSS MB | RocksDB MB | term |\n|---:|---|---:|---:|---:|---:|---:|")
    step = max(1, len(curve) // 40)
    for c in curve[::step] + ([curve[-1]] if curve and (len(curve) - 1) % step else []):
        print(f"| {c[0]} | {c[1]} | {c[2]:.0f} | {c[3]} | {c[4]:.0f} | {fmt(c[5])} | {fmt(c[6])} |")
    reclaim_curve(rows, [p for p in processes if p.startswith("node")])


def reclaim_curve(rows, nodes):
    """Every node's disk through the reclaim phase, at most a row a minute, beside the
    operations still held: what retention, the snapshots' purges and the compactions give back,
    against the load's last sample (the first row)."""
    at = {}
    for r in rows:
        if r["process"] in nodes:
            at.setdefault((r["phase"], int(r["t_s"])), {})[r["process"]] = r
    load = [t for ph, t in at if ph == "load"]
    reclaim = sorted(t for ph, t in at if ph == "reclaim")
    if not load or not reclaim:
        return
    picked, last = [("load", max(load))], None
    for t in reclaim:
        if last is None or t - last >= 60 or t == reclaim[-1]:
            picked.append(("reclaim", t))
            last = t
    print("\nDisk through the reclaim phase, every node (s into the phase; the first row is the load's "
          "last sample), MB:\n")
    print("| s | operations held | " + " | ".join(nodes) + " |\n|---:|---:|" + "---:|" * len(nodes))
    for ph, t in picked:
        sample = at[(ph, t)]
        ops = next(iter(sample.values()))["operations"]
        disk = " | ".join(fmt(int(sample[n]["disk_bytes"]) / (1 << 20)) if n in sample else "–" for n in nodes)
        print(f"| {'load end' if ph == 'load' else t - reclaim[0]} | {ops} | {disk} |")


main()

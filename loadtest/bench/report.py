#!/usr/bin/env python3
"""Combines writ-loadtest's per-point JSON files (loadtest/bench/run.sh) into latest.json
(every figure, with each run's full summary under "runs") and latest.md (tables with ratios)."""
import argparse, datetime, glob, json, os, platform

ap = argparse.ArgumentParser()
ap.add_argument("raw"); ap.add_argument("out")
ap.add_argument("--build-s", type=int, default=0); ap.add_argument("--run-s", type=int, default=0)
a = ap.parse_args()
runs = {}
for f in sorted(glob.glob(os.path.join(a.raw, "*.json"))):
    with open(f) as fh:
        s = json.load(fh)
    runs[s["label"]] = s

def ratio(x, y):
    return round(x / y, 3) if x and y else None

def point(s):
    if not s:
        return None
    v = s.get("verify")
    return {"ops_per_s": s["throughput_per_s"], "p50_ms": s["latency_ms"]["p50"], "p99_ms": s["latency_ms"]["p99"],
            "p999_ms": s["latency_ms"]["p999"], "errors": s["errors"],
            "cpu_s_per_1000": (s.get("servers") or {}).get("cpu_s_per_1000_requests"),
            "rss_mb": (s.get("servers") or {}).get("rss_mb"),
            "pss_mb": (s.get("servers") or {}).get("pss_mb"),
            # Bytes written to storage per operation: by the process that wrote the most (a
            # ledger node or etcd member), and by all the servers together.
            "disk_bytes_per_op_busiest": (s.get("servers") or {}).get("written_bytes_per_request_busiest"),
            "disk_bytes_per_op": (s.get("servers") or {}).get("written_bytes_per_request"),
            "cpu_ms_per_op": (s.get("servers") or {}).get("cpu_s_per_1000_requests"),
            "loadgen_cpu_ms_per_op": ratio(s["machine"].get("loadtest_cpu_s", 0) * 1000, s["requests"]),
            "verify_passed": None if v is None else all(c["ok"] for c in v["checks"]),
            "acknowledged_lost": None if v is None else v["acknowledged_lost"]}

def levels(prefix):
    return sorted({int(l.rsplit("-c", 1)[1]) for l in runs if l.startswith(prefix)})

out = {"generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
       "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                   "loadavg_at_end": next(iter(runs.values()))["machine"]["loadavg"] if runs else None},
       "build_s": a.build_s, "run_s": a.run_s, "p1": [], "p1w": [], "p2": [], "p3": {}, "p4": {}, "p5": []}
# Consensus commands one Writ operation of a run takes: submission, dispatch (the executor's
# start), effect report, and the camera frame's evidence upload when the simulated device has
# its camera on (the default). The per-command column compares them with etcd's one
# put-if-absent.
def commands_per_operation(s):
    return 3 + (1 if (s or {}).get("setup", {}).get("camera", True) else 0)
# P1's anchor is etcd over its native gRPC API (`etcd_grpc`); the HTTP/JSON gateway (`etcd`)
# stays as a second column.
for c in levels("p1-writ-c"):
    w, g, e = (point(runs.get(f"p1-{s}-c{c}")) for s in ("writ", "etcdgrpc", "etcd"))
    out["p1"].append({"clients": c, "writ": w, "etcd_grpc": g, "etcd": e,
                      "ratio_throughput": ratio(w and w["ops_per_s"], g and g["ops_per_s"]),
                      "ratio_p99": ratio(w and w["p99_ms"], g and g["p99_ms"]),
                      "ratio_throughput_gateway": ratio(w and w["ops_per_s"], e and e["ops_per_s"]),
                      "ratio_p99_gateway": ratio(w and w["p99_ms"], e and e["p99_ms"]),
                      "commands_per_operation": commands_per_operation(runs.get(f"p1-writ-c{c}")),
                      "ratio_per_command": ratio(w and w["ops_per_s"] * commands_per_operation(runs.get(f"p1-writ-c{c}")),
                                                 g and g["ops_per_s"])})
# The whole operation, both sides waiting for the effect report: Writ with `wait_s` (executor's
# CPU counted) against the same workflow on etcd over TLS with client certificates.
def all_cpu(p):
    return None if not p or p["cpu_ms_per_op"] is None else round(p["cpu_ms_per_op"] + (p["loadgen_cpu_ms_per_op"] or 0), 3)
for c in levels("p1w-writ-c"):
    w, e = point(runs.get(f"p1w-writ-c{c}")), point(runs.get(f"p1w-etcdwf-c{c}"))
    out["p1w"].append({"clients": c, "writ": w, "etcd_workflow": e,
                       "ratio_throughput": ratio(w and w["ops_per_s"], e and e["ops_per_s"]),
                       "ratio_p99": ratio(w and w["p99_ms"], e and e["p99_ms"]),
                       "ratio_cpu_per_op": ratio(w and w["cpu_ms_per_op"], e and e["cpu_ms_per_op"]),
                       "ratio_pss": ratio(w and w["pss_mb"], e and e["pss_mb"]),
                       "cpu_ms_per_op_with_generator": {"writ": all_cpu(w), "etcd_workflow": all_cpu(e)}})
for kind in ("discover", "read"):
    for c in levels(f"p2-writ-{kind}-c"):
        w, m = point(runs.get(f"p2-writ-{kind}-c{c}")), point(runs.get(f"p2-mcp-{kind}-c{c}"))
        # tools/list also against an rmcp server listing as many tools as the edge does.
        wide = point(runs.get(f"p2-mcpwide-{kind}-c{c}"))
        tools = (runs.get(f"p2-writ-{kind}-c{c}") or {}).get("setup", {}).get("tools_listed")
        legacy = point(runs.get(f"p2-writ25-{kind}-c{c}"))
        traced = point(runs.get(f"p2-writtraced-{kind}-c{c}"))
        out["p2"].append({"request": "tools/list" if kind == "discover" else "tools/call greet", "connections": c,
                          "writ": w, "rmcp": m, "rmcp_same_tools": wide, "tools_listed": tools,
                          "writ_2025_session": legacy, "writ_traced": traced,
                          "ratio_throughput_traced": ratio(traced and traced["ops_per_s"], w and w["ops_per_s"]),
                          "ratio_p99_traced": ratio(traced and traced["p99_ms"], w and w["p99_ms"]),
                          "ratio_cpu_traced": ratio(traced and traced["cpu_s_per_1000"], w and w["cpu_s_per_1000"]),
                          "ratio_throughput_2025_vs_2026": ratio(legacy and legacy["ops_per_s"], w and w["ops_per_s"]),
                          "ratio_p99_2025_vs_2026": ratio(legacy and legacy["p99_ms"], w and w["p99_ms"]),
                          "ratio_throughput_same_tools": ratio(w and w["ops_per_s"], wide and wide["ops_per_s"]),
                          "ratio_cpu_per_request_same_tools": ratio(w and w["cpu_s_per_1000"], wide and wide["cpu_s_per_1000"]),
                          "ratio_throughput": ratio(w and w["ops_per_s"], m and m["ops_per_s"]),
                          "ratio_p99": ratio(w and w["p99_ms"], m and m["p99_ms"]),
                          "ratio_cpu_per_request": ratio(w and w["cpu_s_per_1000"], m and m["cpu_s_per_1000"])})
for c in levels("p5-writ-upstream-c"):
    w, d = point(runs.get(f"p5-writ-upstream-c{c}")), point(runs.get(f"p5-mcp-direct-c{c}"))
    diff = lambda k: round(w[k] - d[k], 3) if w and d and w[k] is not None and d[k] is not None else None
    out["p5"].append({"connections": c, "through_writ": w, "direct": d,
                      "added_p50_ms": diff("p50_ms"), "added_p99_ms": diff("p99_ms"),
                      "edge_cpu_ms_per_call": w and w["cpu_s_per_1000"]})
for system in ("writ", "etcd"):
    s = runs.get(f"p3-{system}")
    if s:
        f = s.get("failover") or {}
        out["p3"][system] = {"first_success_after_kill_ms": f.get("first_success_after_kill_ms"),
                             "longest_gap_ms": f.get("longest_gap_ms"),
                             "errors_after_kill": f.get("errors_after_kill"),
                             "errors_after_recovery": f.get("errors_after_recovery"),
                             "acknowledged_then_lost": (s.get("verify") or {}).get("acknowledged_lost"),
                             "verify_passed": point(s)["verify_passed"], "ops_per_s": s["throughput_per_s"],
                             "errors": s["errors"]}
def grown(kind, base_label, grown_prefix):
    base = runs.get(base_label)
    g = next((s for l, s in runs.items() if l.startswith(grown_prefix) and l not in (base_label, "p4-audit-seed")),
             None)
    if not (base and g):
        return None
    b, gp = point(base), point(g)
    return {"base": dict(b, label=base_label), "grown": dict(gp, label=g["label"]),
            "ratio_throughput": ratio(gp["ops_per_s"], b["ops_per_s"]), "ratio_p99": ratio(gp["p99_ms"], b["p99_ms"]),
            "setup_s": g["setup"].get("setup_s")}
out["p4"]["tenants"] = grown("tenants", "p4-tenants-1", "p4-tenants-")
out["p4"]["audit"] = grown("audit", "p4-audit-0", "p4-audit-")
seed = runs.get("p4-audit-seed")
if seed:
    out["p4"]["audit_seed"] = {"requests": seed["ok"], "seconds": seed["duration_s"], "per_s": seed["throughput_per_s"],
                               "errors": seed["errors"]}
terms = os.path.join(a.raw, "p1-terms.txt")
if os.path.exists(terms):
    with open(terms) as fh:
        t = json.load(fh)
    out["p1_leader_elections"] = t["term_after"] - t["term_before"]
    writ_ops = sum(s["ok"] for l, s in runs.items() if l.startswith("p1-writ-"))
    if "log_after" in t and writ_ops:
        out["p1_raft_entries_per_op"] = (t["log_after"] - t["log_before"]) / writ_ops
otlp = os.path.join(a.raw, "p2-otlp.txt")
if os.path.exists(otlp):
    with open(otlp) as fh:
        out["p2_otlp_sink"] = json.load(fh)
out["runs"] = runs
os.makedirs(a.out, exist_ok=True)
with open(os.path.join(a.out, "latest.json"), "w") as fh:
    json.dump(out, fh, indent=1)

def f(x, d=1):
    return "–" if x is None else (f"{x:.{d}f}" if isinstance(x, float) else str(x))
md = [f"# writ bench — {out['generated_at']}", "",
      f"{out['machine']['cpus']} CPUs ({out['machine']['platform']}); everything on this one machine; "
      f"scenarios took {a.run_s} s (release build before them: {a.build_s} s).", "",
      "## P1 durable writes: Writ `operation.execute` (3 nodes + 2 edges) vs etcd txn put-if-absent (3 members)", "",
      "etcd over its native gRPC API (the anchor) and over its HTTP/JSON gateway; CPU is the servers' "
      "(all Writ processes, all etcd members) per operation; RSS at the end of the point.", "",
      "| clients | Writ ops/s | Writ p99 ms | etcd gRPC ops/s | etcd gRPC p99 ms | ops/s Writ/etcd gRPC | p99 Writ/etcd gRPC | "
      "etcd gateway ops/s | ops/s Writ/gateway | CPU ms/op Writ / etcd gRPC | RSS MB Writ / etcd | load generator CPU ms/op Writ / etcd gRPC | Writ verify |",
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---|"]
for p in out["p1"]:
    w, g, e = p["writ"] or {}, p["etcd_grpc"] or {}, p["etcd"] or {}
    md.append(f"| {p['clients']} | {f(w.get('ops_per_s'))} | {f(w.get('p99_ms'),2)} | "
              f"{f(g.get('ops_per_s'))} | {f(g.get('p99_ms'),2)} | {f(p['ratio_throughput'],3)} | {f(p['ratio_p99'],3)} | "
              f"{f(e.get('ops_per_s'))} | {f(p['ratio_throughput_gateway'],3)} | "
              f"{f(w.get('cpu_ms_per_op'),2)} / {f(g.get('cpu_ms_per_op'),2)} | {f(w.get('rss_mb'),0)} / {f(g.get('rss_mb'),0)} | "
              f"{f(w.get('loadgen_cpu_ms_per_op'),2)} / {f(g.get('loadgen_cpu_ms_per_op'),2)} | "
              f"{'passed' if w.get('verify_passed') else 'FAILED'} |")
md += ["", "Per consensus command, Writ/etcd gRPC: a Writ operation here takes "
       + "/".join(sorted({str(p["commands_per_operation"]) for p in out["p1"]}))
       + " (submission, dispatch, report, and the simulated camera's evidence upload), etcd's put-if-absent one: "
       + ", ".join(f"{p['clients']} clients {f(p['ratio_per_command'],3)}×" for p in out["p1"]) + "."]
if out["p1w"]:
    md += ["", "## P1 workflow: one whole operation, the client waiting for the effect report", "",
           "Writ `operation.execute` with `wait_s` (submission, dispatch to the executor, report; the simulated "
           "device uploads no camera frame) vs the same "
           "on etcd as a user would build it (`loadtest/baselines/etcd-grpc`, `--workflow`: put-if-absent of key and "
           "record, a watching worker's claim txn and report txn, the client watching for the report), over TLS with "
           "client certificates. Server CPU: all Writ processes with the executor, all etcd members (its worker runs "
           "in its load generator, so the last column adds each generator's CPU); PSS and RSS at the end. Disk: bytes "
           "written to storage per operation (`/proc/PID/io` `write_bytes`: WAL, flushes, compactions) by the process "
           "that wrote the most (a ledger node, an etcd member), and by all the servers.", "",
           "| clients | Writ ops/s | Writ p99 ms | etcd workflow ops/s | etcd p99 ms | ops/s Writ/etcd | p99 Writ/etcd | "
           "server CPU ms/op Writ / etcd | with generators Writ / etcd | PSS MB Writ / etcd | RSS MB Writ / etcd | "
           "disk KB/op busiest Writ / etcd | disk KB/op all Writ / etcd | verify Writ / etcd |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---|"]
    kb = lambda x: None if x is None else x / 1024
    for p in out["p1w"]:
        w, e = p["writ"] or {}, p["etcd_workflow"] or {}
        both = p["cpu_ms_per_op_with_generator"]
        ok = lambda x: "passed" if x.get("verify_passed") else "FAILED"
        md.append(f"| {p['clients']} | {f(w.get('ops_per_s'))} | {f(w.get('p99_ms'),2)} | {f(e.get('ops_per_s'))} | "
                  f"{f(e.get('p99_ms'),2)} | {f(p['ratio_throughput'],3)} | {f(p['ratio_p99'],3)} | "
                  f"{f(w.get('cpu_ms_per_op'),2)} / {f(e.get('cpu_ms_per_op'),2)} | {f(both['writ'],2)} / {f(both['etcd_workflow'],2)} | "
                  f"{f(w.get('pss_mb'),0)} / {f(e.get('pss_mb'),0)} | {f(w.get('rss_mb'),0)} / {f(e.get('rss_mb'),0)} | "
                  f"{f(kb(w.get('disk_bytes_per_op_busiest')),2)} / {f(kb(e.get('disk_bytes_per_op_busiest')),2)} | "
                  f"{f(kb(w.get('disk_bytes_per_op')),2)} / {f(kb(e.get('disk_bytes_per_op')),2)} | {ok(w)} / {ok(e)} |")
if "p1_leader_elections" in out:
    md += ["", f"Writ leader elections while P1 ran (Raft term increase): {out['p1_leader_elections']}."]
if "p1_raft_entries_per_op" in out:
    md += ["", f"Writ Raft log entries per operation while P1 ran (everything included: quota leases, audit "
               f"flushes, verification): {out['p1_raft_entries_per_op']:.2f}."]
md += ["", "## P2 read path: one Writ edge (bearer token, audited) vs the bare rmcp server (no auth)", "",
       "The ratios are against rmcp serving the one `greet` tool; for `tools/list`, the last two columns are "
       "against rmcp serving as many tools as the Writ edge lists (the fair comparison; the goal uses the first).", "",
       "| request | connections | Writ req/s | Writ p99 ms | Writ edge CPU s/1000 | rmcp req/s | rmcp p99 ms | rmcp CPU s/1000 | req/s Writ/rmcp | p99 Writ/rmcp | CPU/req Writ/rmcp | req/s Writ/rmcp same tools | CPU/req Writ/rmcp same tools |",
       "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for p in out["p2"]:
    w, m = p["writ"] or {}, p["rmcp"] or {}
    md.append(f"| {p['request']} | {p['connections']} | {f(w.get('ops_per_s'))} | {f(w.get('p99_ms'),2)} | "
              f"{f(w.get('cpu_s_per_1000'),3)} | {f(m.get('ops_per_s'))} | {f(m.get('p99_ms'),2)} | "
              f"{f(m.get('cpu_s_per_1000'),3)} | {f(p['ratio_throughput'],3)} | {f(p['ratio_p99'],3)} | "
              f"{f(p['ratio_cpu_per_request'],3)} | {f(p.get('ratio_throughput_same_tools'),3)} | "
              f"{f(p.get('ratio_cpu_per_request_same_tools'),3)} |")
md += ["", "### P2 through a session of the 2025 wire (same edge, same run)", "",
       "| request | connections | 2025 req/s | 2025 p99 ms | 2025 edge CPU s/1000 | req/s 2025/2026 | p99 2025/2026 |",
       "|---|---:|---:|---:|---:|---:|---:|"]
for p in out["p2"]:
    l = p.get("writ_2025_session") or {}
    md.append(f"| {p['request']} | {p['connections']} | {f(l.get('ops_per_s'))} | {f(l.get('p99_ms'),2)} | "
              f"{f(l.get('cpu_s_per_1000'),3)} | {f(p.get('ratio_throughput_2025_vs_2026'),3)} | "
              f"{f(p.get('ratio_p99_2025_vs_2026'),3)} |")
md += ["", "### P2 with OpenTelemetry tracing on (same edge restarted with OTLP export, sampling 1.0, same run)", "",
       "Each traced point follows its untraced one; the sink on the same machine takes every export and decodes nothing.", "",
       "| request | connections | traced req/s | traced p99 ms | traced edge CPU s/1000 | req/s on/off | p99 on/off | CPU/req on/off |",
       "|---|---:|---:|---:|---:|---:|---:|---:|"]
for p in out["p2"]:
    t = p.get("writ_traced") or {}
    md.append(f"| {p['request']} | {p['connections']} | {f(t.get('ops_per_s'))} | {f(t.get('p99_ms'),2)} | "
              f"{f(t.get('cpu_s_per_1000'),3)} | {f(p.get('ratio_throughput_traced'),3)} | "
              f"{f(p.get('ratio_p99_traced'),3)} | {f(p.get('ratio_cpu_traced'),3)} |")
if "p2_otlp_sink" in out:
    md += ["", f"The sink took {out['p2_otlp_sink']['exports']} OTLP exports ({out['p2_otlp_sink']['bytes']} bytes) "
               "from the traced points."]
md += ["", "## P5 federation: `greet` through a Writ edge to its upstream (the bare rmcp server) vs on the upstream directly", "",
       "Added latency = Writ's percentile minus the direct one (same load generator, same upstream). "
       "Edge CPU is the edge process's per proxied call (the upstream's own CPU is not in it).", "",
       "| connections | through Writ req/s | p50 ms | p99 ms | direct req/s | p50 ms | p99 ms | added p50 ms | added p99 ms | edge CPU ms/call |",
       "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for p in out["p5"]:
    w, d = p["through_writ"] or {}, p["direct"] or {}
    md.append(f"| {p['connections']} | {f(w.get('ops_per_s'))} | {f(w.get('p50_ms'),3)} | {f(w.get('p99_ms'),3)} | "
              f"{f(d.get('ops_per_s'))} | {f(d.get('p50_ms'),3)} | {f(d.get('p99_ms'),3)} | "
              f"{f(p['added_p50_ms'],3)} | {f(p['added_p99_ms'],3)} | {f(p['edge_cpu_ms_per_call'],3)} |")
md += ["", "## P3 failover: `kill -9` of the leader under 16 clients of writes", "",
       "| system | first success of a write sent after the kill | longest gap without a success | errors after the kill (after recovery) | acknowledged then lost | verify |",
       "|---|---:|---:|---:|---:|:---|"]
for system, p in out["p3"].items():
    md.append(f"| {system} | {f(p['first_success_after_kill_ms'])} ms | {f(p['longest_gap_ms'])} ms | "
              f"{f(p['errors_after_kill'])} ({f(p['errors_after_recovery'])}) | {f(p['acknowledged_then_lost'])} | {'passed' if p['verify_passed'] else 'FAILED'} |")
md += ["", "## P4 growth: P1 at 64 clients", "",
       "| growth | base ops/s | base p99 ms | grown ops/s | grown p99 ms | ops/s grown/base | p99 grown/base | nodes+edges RSS MB base → grown |",
       "|---|---:|---:|---:|---:|---:|---:|---:|"]
for name, p in out["p4"].items():
    if not p or name == "audit_seed":
        continue
    b, g = p["base"], p["grown"]
    md.append(f"| {b['label']} → {g['label']} | {f(b['ops_per_s'])} | {f(b['p99_ms'],2)} | {f(g['ops_per_s'])} | "
              f"{f(g['p99_ms'],2)} | {f(p['ratio_throughput'],3)} | {f(p['ratio_p99'],3)} | {f(b['rss_mb'],0)} → {f(g['rss_mb'],0)} |")
if seed:
    s = out["p4"]["audit_seed"]
    md.append(f"\nAudit seeding: {s['requests']} audited reads through the edges in {s['seconds']} s ({s['per_s']}/s).")

def without_empty_tables(lines):
    # A scenario left out (BENCH_SCENARIOS) leaves a heading and a table head with no rows.
    out, section = [], []
    for line in lines + ["## end"]:
        if line.startswith(("## ", "### ")):
            rows = [l for l in section if l.startswith("|")]
            if not rows or len(rows) > 2:
                out += section
            section = []
        section.append(line)
    return out

md = without_empty_tables(md)
with open(os.path.join(a.out, "latest.md"), "w") as fh:
    fh.write("\n".join(md) + "\n")
print("\n".join(md))

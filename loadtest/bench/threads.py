#!/usr/bin/env python3
"""Which threads hold the cores when a local cluster's leader loses its followers.

  threads.py sample LOG OUT TRIGGER CLUSTER_GLOB
      Waits until the bench log LOG holds TRIGGER (e.g. the soak's "reclaim: nodes restart"),
      takes the newest directory matching CLUSTER_GLOB (a `deploy/local-cluster.sh` root, e.g.
      "/tmp/writ-soak.*/writ"), and then, until its nodes are gone (at most 50 minutes):
      - every 250 ms, each thread of every `writ node`/`writ edge`/`writ executor` process: its
        time on a CPU and its time runnable but waiting for one since the last sample
        (`/proc/PID/task/TID/schedstat`), into OUT/threads.tsv, beside the host's CPU line
        (`/proc/stat`: busy, idle, iowait, steal);
      - every second, each node's Raft term, whether it leads, and its runtime stalls (its
        `/metrics`), into OUT/raft.tsv.
      Its own cost: about 3 % of one core.
  threads.py report OUT
      Per 10 s, each process's CPU and waiting seconds and the host's; every election (the
      first poll that saw a higher term); for the 4 s before each, what every process's threads
      ran and waited, and the threads that ran most.
"""
import collections
import glob
import os
import re
import ssl
import sys
import time
import urllib.request

SAMPLE_S = 0.25
LIMIT_S = 3000
RAFT_LINES = ("writ_raft_term ", "writ_raft_is_leader ", "writ_runtime_stall_seconds_count")


def writ_processes():
    """pid -> role ("node:n1", "edge:e2", "executor") of the running writ processes."""
    procs = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if len(cmd) < 2 or not cmd[0].endswith(b"/writ"):
            continue
        if cmd[1] in (b"node", b"edge") and len(cmd) > 3:
            procs[p] = cmd[1].decode() + ":" + os.path.basename(os.path.dirname(cmd[3].decode()))
        elif cmd[1] == b"executor":
            procs[p] = "executor"
    return procs


def cluster_env(root):
    env = {}
    for line in open(os.path.join(root, "env")):
        m = re.match(r"export (\w+)=(.*)", line.strip())
        if m:
            env[m.group(1)] = m.group(2).strip("'\"")
    return env


def raft_endpoints(root):
    """The nodes' URLs and a TLS context trusting the cluster's CA, or None before it is up."""
    try:
        env = cluster_env(root)
        return env["WRIT_NODE_URLS"].split(), ssl.create_default_context(cafile=env["WRIT_CA_FILE"])
    except (OSError, KeyError, ssl.SSLError):
        return None


def poll_raft(endpoints, now, out):
    urls, ctx = endpoints
    for i, url in enumerate(urls, 1):
        try:
            body = urllib.request.urlopen(url + "/metrics", context=ctx, timeout=0.5).read().decode()
        except Exception:
            out.write(f"{int(now * 1000)} n{i} unreachable\n")
            continue
        lines = [l for l in body.splitlines() if l.startswith(RAFT_LINES)]
        out.write(f"{int(now * 1000)} n{i} " + " | ".join(lines) + "\n")
    out.flush()


def sample(log, out_dir, trigger, cluster_glob):
    os.makedirs(out_dir, exist_ok=True)
    while True:
        try:
            if trigger in open(log).read():
                break
        except FileNotFoundError:
            pass
        time.sleep(2)
    root = max(glob.glob(cluster_glob), key=os.path.getmtime)
    threads = open(os.path.join(out_dir, "threads.tsv"), "w")
    raft = open(os.path.join(out_dir, "raft.tsv"), "w")
    prev, procs, started, endpoints = {}, {}, time.time(), None
    last_scan = last_poll = 0
    gone_since = None
    while time.time() - started < LIMIT_S:
        now = time.time()
        if now - last_scan >= 2:
            last_scan, procs = now, writ_processes()
            if any(r.startswith("node") for r in procs.values()):
                gone_since = None
            else:
                gone_since = gone_since or now
                if now - gone_since > 30:
                    break
        if now - last_poll >= 1:
            last_poll = now
            endpoints = endpoints or raft_endpoints(root)
            if endpoints:
                poll_raft(endpoints, now, raft)
        t = int(now * 1000)
        cpu = open("/proc/stat").readline().split()[1:9]
        threads.write(f"{t} host 0 0 cpu:" + ",".join(cpu) + " 0 0\n")
        for pid, role in procs.items():
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                try:
                    run, wait, _ = open(f"/proc/{pid}/task/{tid}/schedstat").read().split()
                    comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip().replace(" ", "_")
                except (OSError, ValueError):
                    continue
                run, wait = int(run), int(wait)
                if (pid, tid) in prev:
                    d_run, d_wait = run - prev[pid, tid][0], wait - prev[pid, tid][1]
                    if d_run or d_wait:
                        threads.write(f"{t} {role} {pid} {tid} {comm} {d_run // 1000} {d_wait // 1000}\n")
                prev[pid, tid] = (run, wait)
        threads.flush()
        time.sleep(max(0.0, SAMPLE_S - (time.time() - now)))


def load(out_dir):
    rows, host = [], []
    for line in open(os.path.join(out_dir, "threads.tsv")):
        t, role, _pid, tid, comm, run, wait = line.split()
        if role == "host":
            host.append((int(t), [int(x) for x in comm[4:].split(",")]))
        else:
            rows.append((int(t), role, int(tid), comm, int(run), int(wait)))
    terms = []
    for line in open(os.path.join(out_dir, "raft.tsv")):
        t, node, rest = (line.rstrip("\n").split(" ", 2) + [""])[:3]
        term = re.search(r"writ_raft_term (\d+)", rest)
        lead = re.search(r"writ_raft_is_leader (\d+)", rest)
        if term:
            terms.append((int(t), node, int(term.group(1)), bool(lead and lead.group(1) == "1")))
    return rows, host, sorted(terms)


def elections(terms):
    """(when, node that saw it, term before, term after) for each rise of the highest term seen."""
    out, current = [], None
    for t, node, term, _ in terms:
        if current is not None and term > current:
            out.append((t, node, current, term))
        current = term if current is None else max(current, term)
    return out


def busy_s(h):
    # user, nice, system, irq, softirq (USER_HZ = 100)
    return (h[0] + h[1] + h[2] + h[5] + h[6]) / 100


def report(out_dir):
    rows, host, terms = load(out_dir)
    t0 = host[0][0]
    roles = sorted({r[1] for r in rows})
    per_bin = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0]))
    for t, role, _tid, _comm, run, wait in rows:
        cell = per_bin[(t - t0) // 10000][role]
        cell[0] += run
        cell[1] += wait
    host_bin = collections.defaultdict(lambda: [0] * 8)
    for (_, a), (tb, b) in zip(host, host[1:]):
        acc = host_bin[(tb - t0) // 10000]
        for i in range(8):
            acc[i] += b[i] - a[i]
    print("Per 10 s since sampling began: each process's CPU s (and s runnable, waiting for a CPU);")
    print("all of them; the host's busy / idle / iowait / steal s (two cores: 20 s per row).\n")
    print("| s | " + " | ".join(roles) + " | all | host |")
    print("|---:|" + "---:|" * len(roles) + "---:|---|")
    for b in sorted(per_bin):
        cells = [f"{per_bin[b][r][0] / 1e6:.1f} ({per_bin[b][r][1] / 1e6:.1f})" for r in roles]
        h = host_bin[b]
        total = sum(v[0] for v in per_bin[b].values()) / 1e6
        print(f"| {b * 10} | " + " | ".join(cells) + f" | {total:.1f} | {busy_s(h):.1f} / {h[3] / 100:.1f} / {h[4] / 100:.1f} / {h[7] / 100:.1f} |")
    leaders = {}
    for _t, node, term, lead in terms:
        if lead:
            leaders.setdefault(term, node)
    for t, node, before, after in elections(terms):
        lo = t - 4000
        print(f"\n### Election at {(t - t0) / 1000:.1f} s: term {before} → {after} "
              f"(leader {leaders.get(before, '?')} → {leaders.get(after, '?')}), the 4 s before it\n")
        hs = [h for tt, h in host if lo <= tt <= t]
        if len(hs) > 1:
            d = [b - a for a, b in zip(hs[0], hs[-1])]
            print(f"Host: busy {busy_s(d):.2f} s, idle {d[3] / 100:.2f} s, steal {d[7] / 100:.2f} s; "
                  f"longest gap between samples {max(b - a for (a, _), (b, _) in zip(host, host[1:]) if lo <= a <= t)} ms.\n")
        by_group = collections.defaultdict(lambda: [0, 0])
        by_thread = collections.defaultdict(lambda: [0, 0, ""])
        for tt, role, tid, comm, run, wait in rows:
            if lo <= tt <= t:
                for acc in (by_group[role, comm], by_thread[role, tid]):
                    acc[0] += run
                    acc[1] += wait
                by_thread[role, tid][2] = comm
        print("| process | threads | ran ms | waited ms |\n|---|---|---:|---:|")
        for (role, comm), (run, wait) in sorted(by_group.items(), key=lambda kv: -kv[1][0])[:9]:
            print(f"| {role} | {comm} | {run / 1000:.0f} | {wait / 1000:.0f} |")
        print("\nThe threads that ran most: " + "; ".join(
            f"{role} {comm} {tid} ran {run / 1000:.0f} ms, waited {wait / 1000:.0f}"
            for (role, tid), (run, wait, comm) in sorted(by_thread.items(), key=lambda kv: -kv[1][0])[:6]) + ".")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "sample":
        sample(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "report":
        report(sys.argv[2])
    else:
        sys.exit(__doc__)

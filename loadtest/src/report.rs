//! The run's summary: a table on the terminal and the same figures as JSON (`--json FILE`),
//! with the machine's load and, for watched server processes, their CPU time and memory.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::engine::{recovery, Recorded};
use crate::verify::Verification;

#[derive(Debug, Clone, Serialize)]
pub struct Quantiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Quantiles {
    fn of(h: &Histogram<u64>) -> Quantiles {
        let ms = |us: u64| (us as f64 / 10.0).round() / 100.0;
        Quantiles {
            p50: ms(h.value_at_quantile(0.5)),
            p90: ms(h.value_at_quantile(0.9)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
            mean: ms(h.mean() as u64),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct KindSummary {
    pub ok: u64,
    pub errors: u64,
    pub throughput_per_s: f64,
    pub latency_ms: Quantiles,
}

/// CPU time and resident memory of the processes named by `--watch-pid`, over the run.
#[derive(Debug, Clone, Serialize)]
pub struct Servers {
    pub pids: Vec<u32>,
    pub cpu_s: f64,
    pub cpu_s_per_1000_requests: f64,
    pub rss_mb: f64,
    /// Proportional set size: shared pages split among the processes sharing them.
    pub pss_mb: f64,
    /// Bytes the processes had written to storage per request (`/proc/PID/io` `write_bytes`:
    /// WAL, memtable flushes, compactions, journals), all of them together.
    /// `None` when a process's counters could not be read (no figure rather than a wrong one).
    pub written_bytes_per_request: Option<f64>,
    /// The same of the process that wrote the most (a ledger node: bytes per operation per node).
    pub written_bytes_per_request_busiest: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpus: usize,
    /// 1, 5 and 15 minute load averages at the end of the run.
    pub loadavg: [f64; 3],
    /// CPU seconds the load generator itself used.
    pub loadtest_cpu_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Failover {
    /// When the fault command started and when it returned (a partition command may heal
    /// before it returns).
    pub fault_started_at_ms: Option<u64>,
    pub killed_at_ms: u64,
    /// From the kill to the first success of a request sent after it.
    pub first_success_after_kill_ms: Option<u64>,
    /// Longest stretch after the kill in which no request succeeded.
    pub longest_gap_ms: u64,
    /// Requests that failed after the kill, and after the first success following it.
    pub errors_after_kill: u64,
    pub errors_after_recovery: u64,
    /// Longest stretch, from the fault's start on, in which requests failed (last success
    /// before to first success after).
    pub longest_error_window_ms: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub label: String,
    pub system: String,
    pub mode: &'static str,
    pub concurrency: Option<usize>,
    pub target_rate: Option<f64>,
    pub duration_s: f64,
    pub requests: u64,
    pub ok: u64,
    pub errors: BTreeMap<String, u64>,
    pub throughput_per_s: f64,
    pub latency_ms: Quantiles,
    pub kinds: BTreeMap<String, KindSummary>,
    pub machine: Machine,
    pub servers: Option<Servers>,
    pub failover: Option<Failover>,
    pub setup: serde_json::Value,
    pub verify: Option<Verification>,
}

impl Summary {
    pub fn new(label: String, system: &str, plan: &crate::engine::Plan, rec: &Recorded) -> Summary {
        let secs = rec.elapsed.as_secs_f64().max(1e-9);
        let per_s = |n: u64| (n as f64 / secs * 10.0).round() / 10.0;
        let errors: u64 = rec.errors.values().sum();
        Summary {
            label,
            system: system.to_string(),
            mode: if plan.rate.is_some() { "open" } else { "closed" },
            concurrency: plan.rate.is_none().then_some(plan.concurrency),
            target_rate: plan.rate,
            duration_s: (secs * 100.0).round() / 100.0,
            requests: rec.ok + errors,
            ok: rec.ok,
            errors: rec.errors.clone(),
            throughput_per_s: per_s(rec.ok),
            latency_ms: Quantiles::of(&rec.latency),
            kinds: rec
                .kinds
                .iter()
                .map(|(k, s)| {
                    let ks = KindSummary {
                        ok: s.ok,
                        errors: s.errors,
                        throughput_per_s: per_s(s.ok),
                        latency_ms: Quantiles::of(&s.latency),
                    };
                    (k.to_string(), ks)
                })
                .collect(),
            machine: Machine { cpus: cpus(), loadavg: loadavg(), loadtest_cpu_s: cpu_seconds(None).unwrap_or(0.0) },
            servers: None,
            failover: recovery(rec).map(|r| Failover {
                fault_started_at_ms: rec.fault_started_ms,
                longest_error_window_ms: r.longest_error_window_ms,
                killed_at_ms: rec.killed_at_ms.unwrap_or_default(),
                first_success_after_kill_ms: r.first_success_ms,
                longest_gap_ms: r.longest_gap_ms,
                errors_after_kill: r.errors_after_fault,
                errors_after_recovery: r.errors_after_recovery,
            }),
            setup: serde_json::Value::Null,
            verify: None,
        }
    }

    /// The human-readable summary.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let load = match (self.concurrency, self.target_rate) {
            (Some(c), _) => format!("{c} concurrent clients"),
            (_, Some(r)) => format!("open loop at {r}/s"),
            _ => String::new(),
        };
        out += &format!("{} [{}] — {load}, {:.1} s\n", self.label, self.system, self.duration_s);
        out += &format!(
            "  {:<16} {:>8} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9}\n",
            "kind", "ok", "errors", "ok/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms"
        );
        let mut row = |name: &str, ok: u64, errors: u64, rate: f64, q: &Quantiles| {
            out += &format!(
                "  {name:<16} {ok:>8} {errors:>7} {rate:>10.1} {:>9.2} {:>9.2} {:>9.2} {:>9.2}\n",
                q.p50, q.p90, q.p99, q.p999
            );
        };
        for (k, s) in &self.kinds {
            row(k, s.ok, s.errors, s.throughput_per_s, &s.latency_ms);
        }
        row("all", self.ok, self.requests - self.ok, self.throughput_per_s, &self.latency_ms);
        if !self.errors.is_empty() {
            out += &format!("  errors by reason: {:?}\n", self.errors);
        }
        if let Some(s) = &self.servers {
            out += &format!(
                "  servers {:?}: {:.2} CPU s ({:.3} per 1000 requests), {:.0} MB resident, {:.0} MB PSS, \
                 {} bytes written per request ({} by the busiest)\n",
                s.pids,
                s.cpu_s,
                s.cpu_s_per_1000_requests,
                s.rss_mb,
                s.pss_mb,
                s.written_bytes_per_request.map_or("–".into(), |b| format!("{b:.0}")),
                s.written_bytes_per_request_busiest.map_or("–".into(), |b| format!("{b:.0}"))
            );
        }
        if let Some(f) = &self.failover {
            out += &format!(
                "  failover: fault from {} ms to {} ms; longest error window {} ms; first success of a request sent \
                 after it {}; longest gap {} ms; {} errors after the kill, {} after that first success\n",
                f.fault_started_at_ms.unwrap_or(f.killed_at_ms),
                f.killed_at_ms,
                f.longest_error_window_ms,
                f.first_success_after_kill_ms.map_or("never".into(), |m| format!("after {m} ms")),
                f.longest_gap_ms,
                f.errors_after_kill,
                f.errors_after_recovery
            );
        }
        let m = &self.machine;
        out += &format!(
            "  machine: {} CPUs, load average {:.2} {:.2} {:.2}; load generator used {:.2} CPU s\n",
            m.cpus, m.loadavg[0], m.loadavg[1], m.loadavg[2], m.loadtest_cpu_s
        );
        if let Some(v) = &self.verify {
            out += &format!("  verify: {}\n", if v.passed() { "PASSED" } else { "FAILED" });
            for c in &v.checks {
                out += &format!("    [{}] {}: {}\n", if c.ok { "ok" } else { "FAIL" }, c.name, c.detail);
            }
        }
        out
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn loadavg() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut f = text.split_whitespace().map(|x| x.parse().unwrap_or(0.0));
    [f.next().unwrap_or(0.0), f.next().unwrap_or(0.0), f.next().unwrap_or(0.0)]
}

/// User + system CPU seconds of a process (`None`: this one), from `/proc/<pid>/stat`
/// (clock ticks of 1/100 s, Linux's USER_HZ).
pub fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let path = pid.map_or("/proc/self/stat".to_string(), |p| format!("/proc/{p}/stat"));
    let text = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which may contain spaces) start at field 3 (state).
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// Resident memory of a process in MB.
pub fn rss_mb(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = text.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Proportional set size of a process (`/proc/PID/smaps_rollup`), in MB.
pub fn pss_mb(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let kb: f64 = text.lines().find(|l| l.starts_with("Pss:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Bytes a process caused to be written to storage so far (`write_bytes` of `/proc/<pid>/io`;
/// `None`: this one).
pub fn written_bytes(pid: Option<u32>) -> Option<u64> {
    let path = pid.map_or("/proc/self/io".to_string(), |p| format!("/proc/{p}/io"));
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| l.strip_prefix("write_bytes:"))?.trim().parse().ok()
}

/// CPU seconds and bytes written of a process at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub cpu_s: f64,
    pub written: Option<u64>,
}

/// The usage of each watched process at one moment.
pub fn snapshot(pids: &[u32]) -> BTreeMap<u32, Usage> {
    let usage = |p: u32| Some(Usage { cpu_s: cpu_seconds(Some(p))?, written: written_bytes(Some(p)) });
    pids.iter().filter_map(|p| usage(*p).map(|u| (*p, u))).collect()
}

/// What the watched processes used between `before` and now (a process that died meanwhile
/// counts with nothing).
pub fn servers(pids: &[u32], before: &BTreeMap<u32, Usage>, requests: u64) -> Option<Servers> {
    if pids.is_empty() {
        return None;
    }
    let used: Vec<Usage> = snapshot(pids)
        .iter()
        .map(|(p, now)| {
            let was = before.get(p).copied().unwrap_or(*now);
            Usage {
                cpu_s: now.cpu_s - was.cpu_s,
                written: now.written.zip(was.written).map(|(n, w)| n.saturating_sub(w)),
            }
        })
        .collect();
    let cpu_s: f64 = used.iter().map(|u| u.cpu_s).sum();
    let written: Option<Vec<u64>> = used.iter().map(|u| u.written).collect();
    let per_request = |bytes: u64| if requests == 0 { 0.0 } else { (bytes as f64 / requests as f64).round() };
    let rss: f64 = pids.iter().filter_map(|p| rss_mb(*p)).sum();
    let pss: f64 = pids.iter().filter_map(|p| pss_mb(*p)).sum();
    Some(Servers {
        pids: pids.to_vec(),
        cpu_s: (cpu_s * 100.0).round() / 100.0,
        cpu_s_per_1000_requests: if requests == 0 {
            0.0
        } else {
            (cpu_s * 1000.0 / requests as f64 * 1e4).round() / 1e4
        },
        rss_mb: rss.round(),
        pss_mb: pss.round(),
        written_bytes_per_request: written.as_ref().map(|w| per_request(w.iter().sum())),
        written_bytes_per_request_busiest: written.as_ref().map(|w| per_request(w.iter().copied().max().unwrap_or(0))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let spin: u64 = (0..5_000_000u64).map(|x| x ^ (x >> 3)).sum();
        assert!(spin > 0);
        assert!(cpu_seconds(None).is_some());
        assert!(rss_mb(std::process::id()).unwrap() > 1.0);
        assert!(pss_mb(std::process::id()).unwrap() > 0.5);
        let file = std::env::temp_dir().join(format!("writ-loadtest-io-{}", std::process::id()));
        let before = written_bytes(None).expect("this process's io counters");
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&file).unwrap();
            f.write_all(&vec![7u8; 1 << 20]).unwrap();
            f.sync_all().unwrap();
        }
        std::fs::remove_file(&file).unwrap();
        assert!(written_bytes(None).unwrap() >= before + (1 << 20), "a synced megabyte counts");
        assert!(cpu_seconds(Some(u32::MAX)).is_none(), "no such process");
    }
}

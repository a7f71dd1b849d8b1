//! The load generator: closed-loop concurrency or an open-loop target rate, for any
//! [`Workload`]. Latency goes into HDR histograms; in open-loop mode it is measured from each
//! request's *intended* start, so a stalled system is charged for every request it delayed
//! (no coordinated omission).

use std::collections::BTreeMap;
use std::future::Future;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// What one request did: its kind (`execute`, `discover`, …) and `Err(reason code)` when it
/// failed.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub kind: &'static str,
    pub result: Result<(), String>,
}

impl Outcome {
    pub fn ok(kind: &'static str) -> Outcome {
        Outcome { kind, result: Ok(()) }
    }

    pub fn err(kind: &'static str, reason: impl Into<String>) -> Outcome {
        Outcome { kind, result: Err(reason.into()) }
    }
}

/// A system under load: request number `n` (0, 1, …) is one call.
pub trait Workload: Send + Sync + 'static {
    fn call(&self, n: u64) -> impl Future<Output = Outcome> + Send;
}

/// How requests are issued.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Closed loop: this many clients, each sending its next request when the last answered.
    pub concurrency: usize,
    /// Open loop: requests per second regardless of answers (`concurrency` is ignored).
    pub rate: Option<f64>,
    pub duration: Duration,
    /// Stop after this many requests (whichever of this and `duration` comes first).
    pub requests: Option<u64>,
    /// Open loop: most requests in flight; beyond it issuing waits (and latency shows it).
    pub max_in_flight: usize,
    /// Print a progress line (rate, errors, p99 so far) every second.
    pub progress: bool,
}

/// Latency of one kind of request, in microseconds.
pub struct KindStats {
    pub ok: u64,
    pub errors: u64,
    pub latency: Histogram<u64>,
}

/// Everything recorded during a run.
pub struct Recorded {
    pub elapsed: Duration,
    pub ok: u64,
    pub errors: BTreeMap<String, u64>,
    pub latency: Histogram<u64>,
    pub kinds: BTreeMap<&'static str, KindStats>,
    /// (start, end) of every successful request, in ms since the run started.
    pub successes: Vec<(u64, u64)>,
    /// End of every failed request, in ms since the run started.
    pub failures: Vec<u64>,
    /// When the `--kill-after` command returned, in ms since the run started.
    pub killed_at_ms: Option<u64>,
    /// When it started (a partition-and-heal or rolling-restart command runs for a while).
    pub fault_started_ms: Option<u64>,
}

fn histogram() -> Histogram<u64> {
    // 1 µs .. 10 min at 3 significant digits.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

struct Inner {
    rec: Recorded,
    /// Latency since the last progress line.
    window: Histogram<u64>,
    window_ok: u64,
    window_err: u64,
}

/// Shared by every in-flight request.
pub struct Recorder {
    start: Instant,
    inner: Mutex<Inner>,
}

impl Recorder {
    fn new(start: Instant) -> Recorder {
        Recorder {
            start,
            inner: Mutex::new(Inner {
                rec: Recorded {
                    elapsed: Duration::ZERO,
                    ok: 0,
                    errors: BTreeMap::new(),
                    latency: histogram(),
                    kinds: BTreeMap::new(),
                    successes: Vec::new(),
                    failures: Vec::new(),
                    killed_at_ms: None,
                    fault_started_ms: None,
                },
                window: histogram(),
                window_ok: 0,
                window_err: 0,
            }),
        }
    }

    fn ms(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.start).as_millis() as u64
    }

    fn record(&self, began: Instant, out: Outcome) {
        let ended = Instant::now();
        let us = ended.saturating_duration_since(began).as_micros().max(1) as u64;
        let mut g = self.inner.lock().expect("recorder lock");
        let Inner { rec, window, window_ok, window_err } = &mut *g;
        let kind = rec.kinds.entry(out.kind).or_insert_with(|| KindStats { ok: 0, errors: 0, latency: histogram() });
        match out.result {
            Ok(()) => {
                rec.ok += 1;
                kind.ok += 1;
                *window_ok += 1;
                let _ = rec.latency.record(us);
                let _ = kind.latency.record(us);
                let _ = window.record(us);
                rec.successes.push((self.ms(began), self.ms(ended)));
            }
            Err(reason) => {
                kind.errors += 1;
                *window_err += 1;
                *rec.errors.entry(reason).or_default() += 1;
                rec.failures.push(self.ms(ended));
            }
        }
    }

    fn progress_line(&self) -> String {
        let mut g = self.inner.lock().expect("recorder lock");
        let secs = self.start.elapsed().as_secs_f64();
        let line = format!(
            "[{secs:6.1}s] {} ok ({:.0}/s now), {} errors ({} now), p99 now {:.1} ms, p99 so far {:.1} ms",
            g.rec.ok,
            g.window_ok as f64,
            g.rec.errors.values().sum::<u64>(),
            g.window_err,
            g.window.value_at_quantile(0.99) as f64 / 1000.0,
            g.rec.latency.value_at_quantile(0.99) as f64 / 1000.0,
        );
        g.window.reset();
        g.window_ok = 0;
        g.window_err = 0;
        line
    }
}

/// A command run once, `after` into the run (P3: `kill -9` of a leader).
#[derive(Debug, Clone)]
pub struct Fault {
    pub after: Duration,
    pub command: String,
}

/// Runs `plan` against `workload` and returns what was recorded.
pub async fn run<W: Workload>(plan: &Plan, workload: Arc<W>, fault: Option<Fault>) -> Recorded {
    let start = Instant::now();
    let deadline = start + plan.duration;
    let rec = Arc::new(Recorder::new(start));
    let done = Arc::new(AtomicBool::new(false));
    let progress = plan.progress.then(|| tokio::spawn(progress_task(rec.clone(), done.clone())));
    let fault_task = fault.map(|f| {
        let rec = rec.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until((start + f.after).into()).await;
            rec.inner.lock().expect("recorder lock").rec.fault_started_ms = Some(rec.ms(Instant::now()));
            let status = tokio::process::Command::new("sh").arg("-c").arg(&f.command).status().await;
            // The fault counts from when its command returned (`kill -9` has then been delivered):
            // a request sent while the shell was still starting is not "after" it.
            rec.inner.lock().expect("recorder lock").rec.killed_at_ms = Some(rec.ms(Instant::now()));
            match status {
                Ok(s) if s.success() => eprintln!("fault command ran: {}", f.command),
                Ok(s) => eprintln!("fault command `{}` exited with {s}", f.command),
                Err(e) => eprintln!("fault command `{}` failed: {e}", f.command),
            }
        })
    });
    let limit = plan.requests.unwrap_or(u64::MAX);
    match plan.rate {
        None => {
            let next = Arc::new(AtomicU64::new(0));
            let clients: Vec<_> = (0..plan.concurrency.max(1))
                .map(|_| {
                    let (w, rec, next) = (workload.clone(), rec.clone(), next.clone());
                    tokio::spawn(async move {
                        while Instant::now() < deadline {
                            let n = next.fetch_add(1, Ordering::Relaxed);
                            if n >= limit {
                                break;
                            }
                            let began = Instant::now();
                            let out = w.call(n).await;
                            rec.record(began, out);
                        }
                    })
                })
                .collect();
            for c in clients {
                let _ = c.await;
            }
        }
        Some(rate) => {
            let interval = Duration::from_secs_f64(1.0 / rate.max(0.001));
            let slots = Arc::new(tokio::sync::Semaphore::new(plan.max_in_flight.max(1)));
            let mut in_flight = Vec::new();
            let mut n = 0u64;
            while n < limit {
                let intended = start + interval.mul_f64(n as f64);
                if intended >= deadline {
                    break;
                }
                tokio::time::sleep_until(intended.into()).await;
                let permit = slots.clone().acquire_owned().await.expect("semaphore open");
                let (w, rec) = (workload.clone(), rec.clone());
                in_flight.push(tokio::spawn(async move {
                    let out = w.call(n).await;
                    rec.record(intended, out);
                    drop(permit);
                }));
                n += 1;
                in_flight.retain(|h| !h.is_finished());
            }
            for h in in_flight {
                let _ = h.await;
            }
        }
    }
    done.store(true, Ordering::Relaxed);
    if let Some(p) = progress {
        let _ = p.await;
    }
    if let Some(f) = fault_task {
        // A fault scheduled after the last request still runs (it may be what is measured).
        let _ = f.await;
    }
    let rec = Arc::try_unwrap(rec).ok().expect("every request finished");
    let mut out = rec.inner.into_inner().expect("recorder lock").rec;
    out.elapsed = start.elapsed();
    out.successes.sort_unstable();
    out.failures.sort_unstable();
    out
}

async fn progress_task(rec: Arc<Recorder>, done: Arc<AtomicBool>) {
    let tty = std::io::stderr().is_terminal();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut n = 0u64;
    while !done.load(Ordering::Relaxed) {
        tick.tick().await;
        n += 1;
        let line = rec.progress_line();
        if tty {
            eprint!("\r{line}\x1b[K");
        } else if n.is_multiple_of(5) {
            eprintln!("{line}");
        }
    }
    if tty {
        eprintln!();
    }
}

/// After the fault: how the system recovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// From the fault to the end of the first success of a request *sent* after it.
    pub first_success_ms: Option<u64>,
    /// Longest stretch after the fault in which no request succeeded.
    pub longest_gap_ms: u64,
    /// Failures that ended after the fault, and after that first success.
    pub errors_after_fault: u64,
    pub errors_after_recovery: u64,
    /// Longest error window from the fault's start on: from the last success before a run of
    /// failures (or the fault's start) to the first success after it (or the run's end).
    pub longest_error_window_ms: u64,
}

/// The longest error window at or after `from` ms (see [`Recovery::longest_error_window_ms`]).
pub fn longest_error_window(rec: &Recorded, from: u64) -> u64 {
    // Request ends in time order: true = success.
    let mut ends: Vec<(u64, bool)> =
        rec.successes.iter().map(|(_, e)| (*e, true)).filter(|(e, _)| *e >= from).collect();
    ends.extend(rec.failures.iter().filter(|e| **e >= from).map(|e| (*e, false)));
    ends.sort_unstable();
    let run_end = rec.elapsed.as_millis() as u64;
    let (mut longest, mut last_success, mut failing) = (0, from, false);
    for (t, ok) in ends {
        if ok {
            if failing {
                longest = longest.max(t - last_success);
                failing = false;
            }
            last_success = t;
        } else {
            failing = true;
        }
    }
    if failing {
        longest = longest.max(run_end.saturating_sub(last_success));
    }
    longest
}

/// How the run recovered from its `--kill-after` fault, if it had one.
pub fn recovery(rec: &Recorded) -> Option<Recovery> {
    let killed = rec.killed_at_ms?;
    let first = rec.successes.iter().filter(|(s, _)| *s >= killed).map(|(_, e)| e - killed).min();
    let after = |t: u64| rec.failures.iter().filter(|e| **e >= t).count() as u64;
    let mut ends: Vec<u64> = rec.successes.iter().map(|(_, e)| *e).filter(|e| *e >= killed).collect();
    ends.sort_unstable();
    let mut gap = 0;
    let mut last = killed;
    for e in ends {
        gap = gap.max(e - last);
        last = e;
    }
    Some(Recovery {
        first_success_ms: first,
        longest_gap_ms: gap,
        errors_after_fault: after(killed),
        errors_after_recovery: first.map_or(0, |f| after(killed + f)),
        longest_error_window_ms: longest_error_window(rec, rec.fault_started_ms.unwrap_or(killed)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;

    impl Workload for Fixed {
        async fn call(&self, n: u64) -> Outcome {
            tokio::time::sleep(Duration::from_millis(2)).await;
            if n % 10 == 9 {
                Outcome::err("x", "BROKEN")
            } else {
                Outcome::ok("x")
            }
        }
    }

    fn plan(rate: Option<f64>) -> Plan {
        Plan {
            concurrency: 4,
            rate,
            duration: Duration::from_secs(30),
            requests: Some(200),
            max_in_flight: 16,
            progress: false,
        }
    }

    #[tokio::test]
    async fn closed_loop_counts_every_request_and_error_reason() {
        let rec = run(&plan(None), Arc::new(Fixed), None).await;
        assert_eq!(rec.ok + rec.errors.values().sum::<u64>(), 200);
        assert_eq!(rec.errors.get("BROKEN"), Some(&20));
        assert_eq!(rec.kinds["x"].ok, 180);
        assert!(rec.latency.value_at_quantile(0.5) >= 2_000, "latency includes the call");
    }

    #[tokio::test]
    async fn open_loop_issues_at_the_rate_and_charges_delays_from_the_intended_start() {
        struct Stalls;
        impl Workload for Stalls {
            async fn call(&self, _: u64) -> Outcome {
                // Slower than the rate allows with one request in flight: the backlog must show.
                tokio::time::sleep(Duration::from_millis(20)).await;
                Outcome::ok("x")
            }
        }
        let p = Plan { max_in_flight: 1, requests: Some(20), ..plan(Some(200.0)) };
        let rec = run(&p, Arc::new(Stalls), None).await;
        assert_eq!(rec.ok, 20);
        // The 20th request was meant to start at 95 ms but could start only after 19 × 20 ms.
        assert!(rec.latency.max() >= 200_000, "max {} µs hides the queueing", rec.latency.max());
    }

    #[test]
    fn recovery_is_measured_from_the_fault() {
        let rec = Recorded {
            elapsed: Duration::from_secs(10),
            ok: 4,
            errors: BTreeMap::new(),
            latency: histogram(),
            kinds: BTreeMap::new(),
            successes: vec![(0, 10), (900, 1_010), (1_200, 3_500), (3_600, 3_700)],
            failures: vec![500, 1_100, 2_000, 3_600],
            killed_at_ms: Some(1_000),
            fault_started_ms: Some(800),
        };
        // Sent before the kill but answered after it does not count as recovered.
        let r = recovery(&rec).unwrap();
        assert_eq!((r.first_success_ms, r.longest_gap_ms), (Some(2_500), 2_490));
        assert_eq!((r.errors_after_fault, r.errors_after_recovery), (3, 1));
        // From the fault's start (800): failures at 1,100 and 2,000 lie between the successes
        // ending at 1,010 and 3,500; the failure at 3,600 is followed by the success at 3,700.
        assert_eq!(r.longest_error_window_ms, 3_500 - 1_010);
        assert_eq!(longest_error_window(&rec, 3_550), 3_700 - 3_550);
        let never = Recorded { successes: vec![(0, 10)], failures: vec![20, 30], ..rec };
        assert_eq!(longest_error_window(&never, 0), 10_000 - 10, "failing until the end of the run");
    }
}

//! What every Writ process (node, edge, executor) sets up once: its Prometheus recorder, the
//! `writ_build_info` gauge, and span export over OTLP when a collector is named.

use metrics_exporter_prometheus::PrometheusHandle;

/// Buckets of every `*_seconds` histogram: 0.5 ms to 10 s.
pub const SECONDS_BUCKETS: &[f64] =
    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
/// Buckets of every other histogram (counts, e.g. a group commit's appends): 1 to 1,024.
pub const COUNT_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0];

/// How often the recorder's histogram samples are folded into their buckets.
pub const UPKEEP_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);
/// The name of the thread that does it.
pub const UPKEEP_THREAD: &str = "writ-metrics-up";

/// Installs the Prometheus recorder once per process and returns its handle. Histograms are
/// exported as Prometheus histograms (buckets), never as summaries: bucket counts add up across
/// replicas, quantiles do not.
///
/// The recorder keeps every histogram sample until something folds it into its buckets: a
/// scrape, or the upkeep thread started here every [`UPKEEP_PERIOD`]. Without it, a process
/// nobody scrapes would grow by each sample it ever recorded (a few per request).
pub fn install_metrics() -> Option<PrometheusHandle> {
    static HANDLE: std::sync::OnceLock<Option<PrometheusHandle>> = std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
            let handle = PrometheusBuilder::new()
                .set_buckets(COUNT_BUCKETS)
                .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS))
                .ok()?
                .install_recorder()
                .ok()?;
            let upkept = handle.clone();
            let started = std::thread::Builder::new().name(UPKEEP_THREAD.into()).spawn(move || loop {
                std::thread::sleep(UPKEEP_PERIOD);
                upkept.run_upkeep();
            });
            if let Err(e) = started {
                tracing::error!(error = %e, "metrics upkeep not started: histogram samples wait for a scrape");
            }
            Some(handle)
        })
        .clone()
}

/// `writ_build_info{role, version} 1`: which build each process runs (set when its metrics are
/// rendered).
pub fn build_info(role: &'static str) {
    metrics::gauge!("writ_build_info", "role" => role, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
}

/// How often the runtime's stall probe asks to be woken.
pub const STALL_PROBE_PERIOD: std::time::Duration = std::time::Duration::from_millis(10);

/// Measures how late the async runtime runs a task that is ready: every [`STALL_PROBE_PERIOD`]
/// a task sleeps and records how much later than asked it woke (`writ_runtime_stall_seconds`).
/// A runtime whose worker threads are all held (a blocking call, a lock held long) or denied
/// the CPU shows here before it shows as a missed heartbeat or a slow answer. Stops with the
/// runtime.
pub fn spawn_stall_probe() {
    tokio::spawn(async {
        loop {
            let asked = std::time::Instant::now();
            tokio::time::sleep(STALL_PROBE_PERIOD).await;
            let late = asked.elapsed().saturating_sub(STALL_PROBE_PERIOD);
            metrics::histogram!("writ_runtime_stall_seconds").record(late.as_secs_f64());
        }
    });
}

/// Starts exporting spans when `endpoint` (the role's `otlp_endpoint`) or the `OTEL_*`
/// environment names a collector; a collector that cannot be used is logged, never fatal.
pub fn start_telemetry(endpoint: Option<&str>, role: &str, instance: &str) {
    let settings = crate::Settings {
        endpoint: endpoint.map(str::to_string),
        service: format!("writ-{role}"),
        role: role.to_string(),
        instance: instance.to_string(),
    };
    if let Err(e) = crate::init(&settings) {
        tracing::error!(error = %e, "spans are not exported");
    }
}

/// Longest OTLP endpoint URL accepted.
pub const OTLP_ENDPOINT_BYTES_MAX: usize = 2048;

/// An `otlp_endpoint` setting: an `http://` or `https://` base URL (blank: none).
pub fn otlp_endpoint(raw: Option<String>) -> Result<Option<String>, String> {
    let Some(url) = raw.map(|u| u.trim().to_string()).filter(|u| !u.is_empty()) else { return Ok(None) };
    let ok = (url.starts_with("http://") || url.starts_with("https://")) && url.len() <= OTLP_ENDPOINT_BYTES_MAX;
    if !ok {
        return Err(format!("an http:// or https:// URL of at most {OTLP_ENDPOINT_BYTES_MAX} bytes"));
    }
    Ok(Some(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread names of this process (`/proc/self/task/*/comm`).
    fn threads() -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .expect("tasks")
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|name| name.trim().to_string())
            .collect()
    }

    /// The samples of `writ_runtime_stall_seconds` over 100 ms, as `handle` renders them.
    fn stalls_over_100_ms(handle: &PrometheusHandle) -> u64 {
        let text = handle.render();
        let read = |prefix: &str| {
            text.lines().find_map(|l| l.strip_prefix(prefix)).and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(0)
        };
        read("writ_runtime_stall_seconds_count ") - read("writ_runtime_stall_seconds_bucket{le=\"0.1\"} ")
    }

    #[test]
    fn the_stall_probe_sees_a_runtime_held_by_a_blocking_call() {
        let handle = install_metrics().expect("installed");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            spawn_stall_probe();
            // Once the probe waits on its timer, hold the only thread past its wake-up.
            tokio::time::sleep(STALL_PROBE_PERIOD * 3).await;
            std::thread::sleep(std::time::Duration::from_millis(150));
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while stalls_over_100_ms(&handle) == 0 && std::time::Instant::now() < deadline {
                tokio::time::sleep(STALL_PROBE_PERIOD).await;
            }
            assert!(stalls_over_100_ms(&handle) >= 1, "{}", handle.render());
        });
    }

    #[test]
    fn installing_the_recorder_starts_its_upkeep_once() {
        let handle = install_metrics().expect("installed");
        install_metrics().expect("the same recorder");
        // The thread names itself once it runs: wait for that, boundedly.
        let upkeep = || threads().iter().filter(|t| *t == UPKEEP_THREAD).count();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while upkeep() == 0 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert_eq!(upkeep(), 1, "{:?}", threads());
        metrics::histogram!("upkeep_test_seconds").record(0.002);
        assert!(handle.render().contains("upkeep_test_seconds_bucket{le=\"0.0025\"} 1"), "{}", handle.render());
    }
}

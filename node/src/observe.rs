//! Metrics for every `writ` process (node, edge, executor): one Prometheus recorder per process.

use metrics_exporter_prometheus::PrometheusHandle;

/// Buckets of every `*_seconds` histogram: 0.5 ms to 10 s.
pub const SECONDS_BUCKETS: &[f64] =
    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
/// Buckets of every other histogram (counts, e.g. a group commit's appends): 1 to 1,024.
pub const COUNT_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0];

/// Installs the Prometheus recorder once per process and returns its handle. Histograms are
/// exported as Prometheus histograms (buckets), never as summaries: bucket counts add up across
/// replicas, quantiles do not.
pub fn install_metrics() -> Option<PrometheusHandle> {
    static HANDLE: std::sync::OnceLock<Option<PrometheusHandle>> = std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
            PrometheusBuilder::new()
                .set_buckets(COUNT_BUCKETS)
                .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS))
                .ok()?
                .install_recorder()
                .ok()
        })
        .clone()
}

/// `writ_build_info{role, version} 1`: which build each process runs (set when its metrics are
/// rendered).
pub fn build_info(role: &'static str) {
    metrics::gauge!("writ_build_info", "role" => role, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
}

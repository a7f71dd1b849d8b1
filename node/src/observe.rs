//! Metrics and spans of the `writ` processes: the process-wide setup lives in
//! `writ_telemetry::process` (shared with the executor); what is the node's own is here.

pub use writ_telemetry::process::{build_info, install_metrics, otlp_endpoint, start_telemetry};

/// A server's metrics (node, edge): the process's recorder, and the probe of its async
/// runtime's stalls (`writ_telemetry::process::spawn_stall_probe`). Called on the runtime.
pub fn start_server_metrics() -> Option<metrics_exporter_prometheus::PrometheusHandle> {
    let handle = install_metrics();
    writ_telemetry::process::spawn_stall_probe();
    handle
}

/// What a traced submission came to, on its span: the Raft index it committed at and the
/// revision it reached as events, a refusal as the span's `error.type`.
pub fn submitted(span: &mut writ_telemetry::Span, result: &Result<writ_api::dto::SubmitResponse, writ_api::Rejection>) {
    use opentelemetry::KeyValue;
    use writ_api::ledger::Outcome;
    let answer = match result {
        Ok(answer) => answer,
        Err(e) => return span.fail(e.reason.as_str()),
    };
    let index = answer.log_index as i64;
    span.set("writ.raft.log_index", index);
    span.event("committed", vec![KeyValue::new("writ.raft.log_index", index)]);
    match &answer.outcome {
        Outcome::Applied { events, .. } => {
            // An answer without its events (a batch of decisions) names no revision.
            let revision = events.last().map(|e| KeyValue::new("writ.revision", e.revision as i64));
            span.event("applied", revision.into_iter().collect());
        }
        Outcome::Rejected { reason, revision, .. } => {
            span.event("applied", vec![KeyValue::new("writ.revision", *revision as i64)]);
            span.fail(reason.as_str());
        }
        Outcome::Internal | Outcome::Batch(_) => {}
    }
}

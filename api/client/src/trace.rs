//! The trace a task works for: set by whoever starts handling a request (the edge, a node, an
//! executor's attempt) around the work it does, and read where the work crosses a process —
//! the ledger client sends it as `traceparent`, answers carry its trace id — so one W3C trace
//! covers the request everywhere without threading it through every signature.

use std::future::Future;

/// What the current task continues: its trace id (32 hex digits) and the `traceparent` a
/// callee continues under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    pub trace_id: String,
    pub traceparent: String,
}

tokio::task_local! {
    static CURRENT: Current;
}

/// Runs `work` as part of `trace`'s span (as seen by what it calls); its log lines carry the
/// trace id.
pub async fn within<F: Future>(trace: &writ_api::trace::TraceContext, work: F) -> F::Output {
    use tracing::Instrument;
    let current = Current { trace_id: trace.trace_hex(), traceparent: trace.traceparent() };
    let logged = tracing::info_span!("trace", trace_id = %current.trace_id);
    CURRENT.scope(current, work.instrument(logged)).await
}

/// The current task's trace, when it works for one.
pub fn current() -> Option<Current> {
    CURRENT.try_with(Clone::clone).ok()
}

/// The `traceparent` header of the current task's span, when there is one.
pub fn traceparent() -> Option<String> {
    CURRENT.try_with(|c| c.traceparent.clone()).ok()
}

/// A span `span_id` under the current task's span, when the task works for a trace.
pub fn child(span_id: [u8; 8]) -> Option<writ_api::trace::TraceContext> {
    let current = current()?;
    let parent = writ_api::trace::Parent::parse(&current.traceparent)?;
    Some(writ_api::trace::TraceContext::child_of(Some(parent), None, || ([0; 16], span_id)))
}

/// Runs `work` under the span of an operation's submission (`writ_api::trace::operation_span_id`)
/// when the operation was recorded with a W3C trace id; else as it is.
pub async fn within_operation<F: Future>(trace_id: &str, operation_id: &str, work: F) -> F::Output {
    let parent = writ_api::trace::operation_traceparent(trace_id, operation_id);
    match parent.as_deref().and_then(writ_api::trace::Parent::parse) {
        Some(p) => within(&p.as_current(None), work).await,
        None => work.await,
    }
}

/// The caller's span as the request's `traceparent` (and `tracestate`) headers name it, each
/// sent once; `None` when absent or malformed.
pub fn caller(headers: &reqwest::header::HeaderMap) -> Option<writ_api::trace::TraceContext> {
    let one = |name: &str| {
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (Some(v), None) => v.to_str().ok(),
            _ => None,
        }
    };
    let parent = writ_api::trace::Parent::parse(one(crate::TRACEPARENT_HEADER)?)?;
    Some(parent.as_current(one(crate::TRACESTATE_HEADER)))
}

/// Runs `work` for `current` (what [`current`] returned where the work was made), so a task
/// spawned for a request keeps working for its trace.
pub async fn resume<F: Future>(current: Option<Current>, work: F) -> F::Output {
    match current {
        Some(c) => CURRENT.scope(c, work).await,
        None => work.await,
    }
}

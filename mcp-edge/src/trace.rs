//! The trace of an MCP request at the edge: the W3C context the client sent — in the request's
//! `params._meta` (`traceparent`, `tracestate`; both protocol eras), else in the HTTP headers —
//! continued by the edge's server span, named and attributed after the OpenTelemetry MCP
//! conventions (`{mcp.method.name} {target}`, `mcp.*`, `gen_ai.tool.name`). A malformed,
//! oversized or repeated context is ignored: the request starts its own trace.

use axum::http::HeaderMap;
use opentelemetry::trace::SpanKind;
use serde_json::Value;
use writ_api::trace::{Parent, TraceContext};
use writ_telemetry::Span;

/// The context a request continues, or a new trace.
pub fn incoming(headers: &HeaderMap, body: &[u8]) -> TraceContext {
    let caller = match meta_context(body) {
        Some((parent, state)) => Parent::parse(&parent).map(|p| p.as_current(state.as_deref())),
        None => writ_client::trace::caller(headers),
    };
    match caller {
        Some(caller) => caller.child(writ_telemetry::span_id()),
        None => TraceContext::child_of(None, None, writ_telemetry::fresh_ids),
    }
}

/// `params._meta.traceparent` and `.tracestate` of a request that names them (the body is
/// parsed for them only when it holds the word).
fn meta_context(body: &[u8]) -> Option<(String, Option<String>)> {
    const WORD: &[u8] = b"traceparent";
    if !body.windows(WORD.len()).any(|w| w == WORD) {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Request {
        params: Option<Params>,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        #[serde(rename = "_meta")]
        meta: Option<serde_json::Map<String, Value>>,
    }
    let meta = serde_json::from_slice::<Request>(body).ok()?.params?.meta?;
    let text = |key: &str| meta.get(key).and_then(Value::as_str).map(str::to_string);
    Some((text("traceparent")?, text("tracestate")))
}

/// The edge's span of one request.
pub fn server_span(cx: TraceContext) -> Span {
    Span::start(cx, SpanKind::Server, || "mcp".into())
}

/// What the request turned out to be, on its span: method, target, id, who, the outcome.
pub fn finish(span: &mut Span, how: Finished<'_>) {
    if !writ_telemetry::enabled() {
        return;
    }
    let tool = how.method == "tools/call" || how.method == "prompts/get";
    let target = how.target.filter(|_| tool);
    span.rename(|| target.map_or_else(|| how.method.to_string(), |t| format!("{} {t}", how.method)));
    span.set("mcp.method.name", how.method.to_string());
    span.set("network.transport", "tcp");
    span.set("network.protocol.name", "http");
    if let Some(version) = how.protocol {
        span.set("mcp.protocol.version", version.to_string());
    }
    if let Some(id) = how.id {
        span.set("jsonrpc.request.id", id.to_string().trim_matches('"').to_string());
    }
    if let Some(t) = target {
        let key = if how.method == "tools/call" { "gen_ai.tool.name" } else { "gen_ai.prompt.name" };
        span.set(key, t.to_string());
        if how.method == "tools/call" {
            span.set("gen_ai.operation.name", "execute_tool");
        }
    }
    span.set("writ.tenant.id", how.tenant.to_string());
    span.set("writ.principal.id", how.principal.to_string());
    if let Some(reason) = how.denied {
        span.fail(reason.as_str());
    }
}

/// What [`finish`] records.
pub struct Finished<'a> {
    pub method: &'a str,
    pub target: Option<&'a str>,
    pub id: Option<&'a Value>,
    pub protocol: Option<&'a str>,
    pub tenant: &'a str,
    pub principal: &'a str,
    pub denied: Option<writ_api::ReasonCode>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn meta_comes_before_headers_and_anything_odd_is_a_new_trace() {
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", "00-11111111111111111111111111111111-2222222222222222-01".parse().unwrap());
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"_meta":{{"traceparent":"{PARENT}"}}}}}}"#
        );
        assert_eq!(incoming(&headers, body.as_bytes()).trace_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(incoming(&headers, b"{}").trace_hex(), "11111111111111111111111111111111");
        headers.append("traceparent", PARENT.parse().unwrap());
        let twice = incoming(&headers, b"{}");
        assert_eq!(twice.parent_span_id, None, "two traceparent headers: a new trace");
        let odd = r#"{"params":{"_meta":{"traceparent":"00-zz"}}}"#;
        assert_eq!(incoming(&HeaderMap::new(), odd.as_bytes()).parent_span_id, None);
        let number = r#"{"params":{"_meta":{"traceparent":7}}}"#;
        assert_eq!(incoming(&HeaderMap::new(), number.as_bytes()).parent_span_id, None);
    }
}

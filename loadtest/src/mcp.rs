//! MCP 2026-07-28 over stateless Streamable HTTP, as an agent host speaks it: one POST per
//! request with the transport headers, answered with JSON. Failures become reason codes.

use std::time::Duration;

use serde_json::{json, Value};

use crate::engine::{Outcome, Workload};

/// The protocol version every request declares.
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// An HTTP client for load (connection pool per host sized for the run); `tls`: trust only that
/// CA (edges serving HTTPS with a cluster certificate).
pub fn http_client(timeout: Duration, pool: usize, tls: Option<&writ_client::ClientTls>) -> reqwest::Client {
    let builder = reqwest::Client::builder();
    let builder = match tls {
        Some(t) => t.apply(builder),
        None => builder,
    };
    builder
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(pool.max(1))
        .tcp_nodelay(true)
        .build()
        .expect("HTTP client builds")
}

/// Sends one request and returns the JSON-RPC `result`, or the reason it failed: the Writ
/// reason code (`error.data.reason`, or a tool result's `_meta["writ/reason"]`), else a
/// transport-level name (`TIMEOUT`, `CONNECT`, `HTTP_503`, `RPC_-32601`, …).
pub async fn call(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    method: &str,
    mut params: Value,
) -> Result<Value, String> {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let mut rb = http
        .post(url)
        .header("MCP-Protocol-Version", PROTOCOL_VERSION)
        .header("Mcp-Method", method)
        .header("Accept", "application/json, text/event-stream");
    if let Some(name) = params.get("name").and_then(Value::as_str) {
        rb = rb.header("Mcp-Name", name);
    }
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let r = rb.json(&body).send().await.map_err(transport)?;
    let status = r.status();
    let sse = r.headers().get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|c| c.contains("event-stream"));
    let bytes = r.bytes().await.map_err(transport)?;
    let reply: Value = if sse { last_sse_message(&bytes) } else { serde_json::from_slice(&bytes).ok() }
        .ok_or_else(|| format!("HTTP_{}", status.as_u16()))?;
    if let Some(e) = reply.get("error") {
        return Err(match e.pointer("/data/reason").and_then(Value::as_str) {
            Some(reason) => reason.to_string(),
            None => format!("RPC_{}", e["code"]),
        });
    }
    let result = reply.get("result").cloned().ok_or_else(|| format!("HTTP_{}", status.as_u16()))?;
    if result["isError"] == json!(true) {
        return Err(result
            .pointer("/_meta/writ~1reason")
            .and_then(Value::as_str)
            .map_or_else(|| "TOOL_ERROR".to_string(), str::to_string));
    }
    Ok(result)
}

/// A transport failure as a reason: `TIMEOUT`, `CONNECT` or `TRANSPORT`.
pub(crate) fn transport(e: reqwest::Error) -> String {
    if e.is_timeout() {
        "TIMEOUT".into()
    } else if e.is_connect() {
        "CONNECT".into()
    } else {
        "TRANSPORT".into()
    }
}

/// The last JSON-RPC message of an SSE body (the response follows any notifications).
fn last_sse_message(body: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(body).ok()?;
    text.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim_start).collect();
            serde_json::from_str::<Value>(&data.join("\n")).ok()
        })
        .filter(|m| m.get("result").is_some() || m.get("error").is_some())
        .last()
}

/// A bare MCP server (the rmcp baseline) under the same read load: `tools/list` and a
/// `tools/call` of its `greet` tool, unauthenticated.
pub struct BareMcpLoad {
    pub http: reqwest::Client,
    pub url: String,
    pub mix: crate::writ::Mix,
}

impl Workload for BareMcpLoad {
    async fn call(&self, _n: u64) -> Outcome {
        use crate::writ::Kind;
        let x = rand::random::<f64>();
        match self.mix.pick(x) {
            Kind::Discover => match call(&self.http, &self.url, None, "tools/list", json!({})).await {
                Ok(r) if r["tools"].as_array().is_some_and(|t| !t.is_empty()) => Outcome::ok("discover"),
                Ok(_) => Outcome::err("discover", "NO_TOOLS"),
                Err(reason) => Outcome::err("discover", reason),
            },
            _ => {
                let params = json!({"name": "greet", "arguments": {"name": "load"}});
                match call(&self.http, &self.url, None, "tools/call", params).await {
                    Ok(_) => Outcome::ok("read"),
                    Err(reason) => Outcome::err("read", reason),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_response_is_found_after_notifications_in_an_sse_body() {
        let body = b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n\
                     event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ok\":1}}\n\n";
        assert_eq!(last_sse_message(body).unwrap()["result"]["ok"], 1);
        assert!(last_sse_message(b"data: not json\n\n").is_none());
    }
}

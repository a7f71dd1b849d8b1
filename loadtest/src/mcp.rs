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
    params: Value,
) -> Result<Value, String> {
    call_as(http, url, token, method, params).await
}

/// [`call`], with the result read as `T`: only what the generator checks is parsed (a
/// `tools/list` page as a count of tools, a tool result as its error flag), so the
/// generator's own CPU per request does not grow with the size of the answer it measures.
pub async fn call_as<T: Answer>(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    method: &str,
    params: Value,
) -> Result<T, String> {
    call_in(http, url, token, None, method, params).await
}

/// The protocol version of the 2025 wire a session is opened with.
pub const SESSION_PROTOCOL_VERSION: &str = "2025-11-25";

/// Opens a session of the 2025 wire (`initialize`): its `Mcp-Session-Id`.
pub async fn initialize(http: &reqwest::Client, url: &str, token: Option<&str>) -> Result<String, String> {
    let params = json!({"protocolVersion": SESSION_PROTOCOL_VERSION, "capabilities": {},
                        "clientInfo": {"name": "writ-loadtest", "version": env!("CARGO_PKG_VERSION")}});
    let mut rb = http.post(url).header("Accept", "application/json, text/event-stream");
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    let r = rb.json(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})).send().await;
    let r = r.map_err(transport)?;
    let status = r.status();
    match r.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
        Some(sid) if status.is_success() => Ok(sid.to_string()),
        _ => Err(format!("HTTP_{}", status.as_u16())),
    }
}

/// [`call_as`] on the 2026-07-28 wire (`session` `None`: `_meta` and the transport headers), or
/// in a session of the 2025 wire.
pub async fn call_in<T: Answer>(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    session: Option<&str>,
    method: &str,
    mut params: Value,
) -> Result<T, String> {
    let mut rb = http.post(url).header("Accept", "application/json, text/event-stream");
    match session {
        Some(sid) => {
            rb = rb.header("MCP-Protocol-Version", SESSION_PROTOCOL_VERSION).header("Mcp-Session-Id", sid);
        }
        None => {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
            });
            rb = rb.header("MCP-Protocol-Version", PROTOCOL_VERSION).header("Mcp-Method", method);
            if let Some(name) = params.get("name").and_then(Value::as_str) {
                rb = rb.header("Mcp-Name", name);
            }
        }
    }
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let r = rb.json(&body).send().await.map_err(transport)?;
    let status = r.status();
    let sse = r.headers().get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|c| c.contains("event-stream"));
    let bytes = r.bytes().await.map_err(transport)?;
    let reply: Reply<T> = if sse { last_sse_reply(&bytes) } else { serde_json::from_slice(&bytes).ok() }
        .ok_or_else(|| format!("HTTP_{}", status.as_u16()))?;
    if let Some(e) = reply.error {
        return Err(match e.data.and_then(|d| d.reason) {
            Some(reason) => reason,
            None => format!("RPC_{}", e.code),
        });
    }
    let result = reply.result.ok_or_else(|| format!("HTTP_{}", status.as_u16()))?;
    match result.refusal() {
        Some(reason) => Err(reason),
        None => Ok(result),
    }
}

/// A JSON-RPC result as the generator reads it.
pub trait Answer: serde::de::DeserializeOwned {
    /// The refusal a successful JSON-RPC result still carries: a tool result with `isError`,
    /// as its Writ reason (`_meta["writ/reason"]`) or `TOOL_ERROR`.
    fn refusal(&self) -> Option<String>;
}

impl Answer for Value {
    fn refusal(&self) -> Option<String> {
        (self["isError"] == json!(true))
            .then(|| self.pointer("/_meta/writ~1reason").and_then(Value::as_str).unwrap_or("TOOL_ERROR").to_string())
    }
}

/// A `tools/list` page, its tools unread.
#[derive(serde::Deserialize)]
pub struct Listed {
    pub tools: Vec<serde::de::IgnoredAny>,
}

impl Answer for Listed {
    fn refusal(&self) -> Option<String> {
        None
    }
}

/// A tool result, its content unread.
#[derive(serde::Deserialize)]
pub struct Called {
    #[serde(rename = "isError", default)]
    is_error: bool,
    #[serde(rename = "_meta", default)]
    meta: Option<CalledMeta>,
}

#[derive(serde::Deserialize)]
struct CalledMeta {
    #[serde(rename = "writ/reason")]
    reason: Option<String>,
}

impl Answer for Called {
    fn refusal(&self) -> Option<String> {
        self.is_error.then(|| self.meta.as_ref().and_then(|m| m.reason.clone()).unwrap_or_else(|| "TOOL_ERROR".into()))
    }
}

/// A JSON-RPC response (or a notification: neither field).
#[derive(serde::Deserialize)]
#[serde(bound = "T: serde::de::DeserializeOwned")]
struct Reply<T> {
    result: Option<T>,
    error: Option<RpcError>,
}

#[derive(serde::Deserialize)]
struct RpcError {
    #[serde(default)]
    code: Value,
    data: Option<RpcErrorData>,
}

#[derive(serde::Deserialize)]
struct RpcErrorData {
    reason: Option<String>,
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

/// The last JSON-RPC response of an SSE body (the response follows any notifications).
fn last_sse_reply<T: Answer>(body: &[u8]) -> Option<Reply<T>> {
    let text = std::str::from_utf8(body).ok()?;
    text.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim_start).collect();
            serde_json::from_str::<Reply<T>>(&data.join("\n")).ok()
        })
        .filter(|m| m.result.is_some() || m.error.is_some())
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
            Kind::Discover => match call_as::<Listed>(&self.http, &self.url, None, "tools/list", json!({})).await {
                Ok(r) if !r.tools.is_empty() => Outcome::ok("discover"),
                Ok(_) => Outcome::err("discover", "NO_TOOLS"),
                Err(reason) => Outcome::err("discover", reason),
            },
            _ => {
                let params = json!({"name": "greet", "arguments": {"name": "load"}});
                match call_as::<Called>(&self.http, &self.url, None, "tools/call", params).await {
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
        assert_eq!(last_sse_reply::<Value>(body).unwrap().result.unwrap()["ok"], 1);
        assert!(last_sse_reply::<Value>(b"data: not json\n\n").is_none());
    }

    #[test]
    fn answers_are_read_without_their_bodies() {
        let listed: Reply<Listed> =
            serde_json::from_str(r#"{"id":1,"result":{"tools":[{"name":"a","inputSchema":{}},{"name":"b"}]}}"#)
                .unwrap();
        assert_eq!(listed.result.unwrap().tools.len(), 2);
        let refused: Reply<Called> = serde_json::from_str(
            r#"{"id":1,"result":{"isError":true,"content":[],"_meta":{"writ/reason":"QUOTA_EXCEEDED"}}}"#,
        )
        .unwrap();
        assert_eq!(refused.result.unwrap().refusal().as_deref(), Some("QUOTA_EXCEEDED"));
        let ok: Reply<Called> = serde_json::from_str(r#"{"id":1,"result":{"content":[{"type":"text"}]}}"#).unwrap();
        assert_eq!(ok.result.unwrap().refusal(), None);
        let error: Reply<Called> =
            serde_json::from_str(r#"{"id":1,"error":{"code":-32602,"data":{"reason":"INPUT_INVALID"}}}"#).unwrap();
        assert_eq!(error.error.unwrap().data.unwrap().reason.as_deref(), Some("INPUT_INVALID"));
    }
}

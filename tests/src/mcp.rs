//! A minimal MCP 2026-07-28 client for tests that check the edge at the wire level, a session of
//! the 2025 wire, and the tenants those tests serve.

use serde_json::{json, Value};

/// The `_meta` every 2026-07-28 request carries (no client capabilities).
pub fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}})
}

/// One JSON-answered MCP request to `url` with the transport headers the body implies (plus
/// `_meta`); returns the HTTP status, the `WWW-Authenticate` challenge and the body.
pub async fn rpc(url: &str, token: Option<&str>, method: &str, params: Value) -> (u16, String, Value) {
    try_rpc(url, token, method, params, std::time::Duration::from_secs(60)).await.expect("edge reachable")
}

/// [`rpc`] that gives up after `timeout` and reports transport failures (a killed edge, a
/// client-side timeout) instead of panicking.
pub async fn try_rpc(
    url: &str,
    token: Option<&str>,
    method: &str,
    mut params: Value,
    timeout: std::time::Duration,
) -> Result<(u16, String, Value), String> {
    // `_meta` given by the caller (capabilities, extensions) wins over the defaults.
    let mut m = meta();
    if let Some(Value::Object(given)) = params.get("_meta") {
        for (k, v) in given {
            m[k] = v.clone();
        }
    }
    params["_meta"] = m;
    let mut rb = reqwest::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .build()
        .map_err(|e| e.to_string())?
        .post(url)
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method)
        .header("Accept", "application/json")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
    let named = params.get("name").or_else(|| params.get("uri")).or_else(|| params.get("taskId"));
    if let Some(name) = named.and_then(Value::as_str) {
        rb = rb.header("Mcp-Name", name);
    }
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    let r = rb.send().await.map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    let challenge = r.headers().get("www-authenticate").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let body = r.bytes().await.map_err(|e| e.to_string())?;
    Ok((status, challenge, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

/// Creates tenant `name` with a catalog of `actions`, a principal `agent` (preset `full`), a
/// site `<name>-site` and a `press.v1` device `<name>-press` there.
pub async fn tenant(admin: &crate::procs::Admin, url: &str, name: &str, actions: Vec<Value>) {
    admin.post_ok(url, "/v1/tenants", json!({"name": name})).await;
    admin.post_ok(url, &format!("/v1/tenants/{name}/catalogs"), json!({"actions": actions})).await;
    let agent = json!({"name": "agent", "kind": "agent", "preset": "full"});
    admin.post_ok(url, &format!("/v1/tenants/{name}/principals"), agent).await;
    admin.post_ok(url, &format!("/v1/tenants/{name}/sites"), json!({"name": format!("{name}-site")})).await;
    let device = json!({"name": format!("{name}-press"), "site": format!("{name}-site"), "device_class": "press.v1"});
    admin.post_ok(url, &format!("/v1/tenants/{name}/devices"), device).await;
}

/// A catalog action answered by the edge's built-in `handler`, needing `scope` when given.
pub fn builtin(id: &str, handler: &str, scope: Option<&str>) -> Value {
    json!({"id": id, "title": id, "input_schema": {"type": "object"}, "risk": "low",
           "execution": {"builtin": handler}, "scope": scope})
}

/// A session of the 2025 wire, opened by `initialize` (version 2025-11-25): every request it
/// sends carries the session id and the protocol version.
pub struct LegacySession {
    http: reqwest::Client,
    url: String,
    token: String,
    pub id: String,
}

impl LegacySession {
    pub async fn open(url: &str, token: &str) -> LegacySession {
        let http = reqwest::Client::builder().no_proxy().build().expect("client");
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                          "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        let opened = http
            .post(url)
            .bearer_auth(token)
            .header("Accept", "application/json, text/event-stream")
            .json(&init)
            .send()
            .await
            .expect("edge reachable");
        let id = opened.headers()["mcp-session-id"].to_str().expect("a session id").to_string();
        LegacySession { http, url: url.into(), token: token.into(), id }
    }

    /// POSTs `body` in the session.
    pub async fn send(&self, body: Value) -> reqwest::Response {
        self.http
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", &self.id)
            .header("MCP-Protocol-Version", "2025-11-25")
            .json(&body)
            .send()
            .await
            .expect("edge reachable")
    }

    /// [`LegacySession::send`], and the JSON-RPC answer (a JSON body, or the event stream's
    /// last message).
    pub async fn call(&self, body: Value) -> Value {
        let text = self.send(body).await.text().await.expect("body");
        let last = text.lines().rev().find_map(|l| l.strip_prefix("data: ")).unwrap_or(&text);
        serde_json::from_str(last).unwrap_or_else(|_| panic!("not JSON-RPC: {text}"))
    }

    /// The session's GET stream of server notifications.
    pub async fn stream(&self) -> reqwest::Response {
        self.http
            .get(&self.url)
            .bearer_auth(&self.token)
            .header("Mcp-Session-Id", &self.id)
            .header("Accept", "text/event-stream")
            .send()
            .await
            .expect("edge reachable")
    }
}

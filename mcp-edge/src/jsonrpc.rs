//! JSON-RPC 2.0 as MCP 2026-07-28 uses it: requests, results with `resultType`, and errors
//! that carry the HTTP status the transport must answer with.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};

pub const PROTOCOL_VERSION: &str = "2026-07-28";
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const HEADER_MISMATCH: i64 = -32020;
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
pub const INTERNAL_ERROR: i64 = -32603;
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// A decoded request (`id` absent means a notification).
#[derive(Debug, Deserialize)]
pub struct Request {
    pub jsonrpc: String,
    #[serde(default)]
    pub id: Option<Value>,
    pub method: String,
    #[serde(default)]
    pub params: Option<Value>,
    /// The protocol version a 2025 session negotiated, for a request the edge translated from
    /// it (its `_meta` names the version the request path serves); never read from the wire.
    #[serde(skip)]
    pub session_version: Option<String>,
}

impl Request {
    pub fn params(&self) -> &Value {
        static EMPTY: Value = Value::Null;
        self.params.as_ref().unwrap_or(&EMPTY)
    }

    pub fn meta(&self, key: &str) -> Option<&Value> {
        self.params().get("_meta").and_then(|m| m.get(key))
    }
}

/// An error answer: JSON-RPC code, message, optional data, and the HTTP status.
#[derive(Debug)]
pub struct RpcError {
    pub status: StatusCode,
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
    pub id: Value,
}

impl RpcError {
    pub fn new(status: StatusCode, code: i64, message: impl Into<String>) -> RpcError {
        RpcError { status, code, message: message.into(), data: None, id: Value::Null }
    }

    /// A Writ rejection: its reason's HTTP status and JSON-RPC code, the reason in `data`.
    pub fn rejected(r: &writ_api::Rejection) -> RpcError {
        RpcError::reason(r.reason, r.message.clone())
    }

    pub fn reason(reason: writ_api::ReasonCode, message: impl Into<String>) -> RpcError {
        RpcError::new(writ_client::http_status(reason), reason.jsonrpc_code() as i64, message)
            .with_data(json!({"reason": reason}))
    }

    /// Answer with HTTP 200 (a JSON-RPC error inside a successful exchange), for errors about
    /// the request's content rather than its transport.
    pub fn in_band(mut self) -> RpcError {
        self.status = StatusCode::OK;
        self
    }

    /// Adds `key: value` to the error's data object.
    pub fn with_detail(mut self, key: &str, value: Value) -> RpcError {
        let mut data = self.data.take().unwrap_or_else(|| json!({}));
        data[key] = value;
        self.data = Some(data);
        self
    }

    pub fn with_data(mut self, data: Value) -> RpcError {
        self.data = Some(data);
        self
    }

    pub fn with_id(mut self, id: &Option<Value>) -> RpcError {
        self.id = id.clone().unwrap_or(Value::Null);
        self
    }
}

impl IntoResponse for RpcError {
    fn into_response(self) -> Response {
        let body = response(&Some(self.id.clone()), Err(&self));
        (self.status, axum::Json(body)).into_response()
    }
}

/// A success answer for request `id`.
pub fn result(id: &Option<Value>, result: Value) -> Response {
    axum::Json(response(id, Ok(result))).into_response()
}

/// A success answer for request `id` whose result is already JSON text (rendered once, served
/// many times: `tools/list`).
pub fn raw_result(id: &Option<Value>, result_json: &str) -> Response {
    let id = serde_json::to_string(id.as_ref().unwrap_or(&Value::Null)).unwrap_or_else(|_| "null".into());
    let body = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{result_json}}}");
    ([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// The key of a result's `_meta` that names the request's trace (32 hex digits, W3C).
pub const META_TRACE_ID: &str = "writ/trace_id";

/// The JSON-RPC response message for `id`; a result names the trace it was made in (an empty
/// one, such as `ping`'s, stays empty as the protocol asks).
pub fn response(id: &Option<Value>, outcome: Result<Value, &RpcError>) -> Value {
    let id = id.clone().unwrap_or(Value::Null);
    match outcome {
        Ok(mut result) => {
            let fields = result.as_object_mut().filter(|f| !f.is_empty());
            if let (Some(current), Some(fields)) = (writ_client::trace::current(), fields) {
                let meta = fields.entry("_meta").or_insert_with(|| json!({}));
                if let Some(meta) = meta.as_object_mut() {
                    meta.insert(META_TRACE_ID.into(), Value::String(current.trace_id));
                }
            }
            json!({"jsonrpc": "2.0", "id": id, "result": result})
        }
        Err(e) => {
            let mut error = json!({"code": e.code, "message": e.message});
            if let Some(d) = &e.data {
                error["data"] = d.clone();
            }
            json!({"jsonrpc": "2.0", "id": id, "error": error})
        }
    }
}

/// A notification message.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

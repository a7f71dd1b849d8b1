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
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// A decoded request (`id` absent means a notification).
#[derive(Debug, Deserialize)]
pub struct Request {
    pub jsonrpc: String,
    #[serde(default)]
    pub id: Option<Value>,
    pub method: String,
    #[serde(default)]
    pub params: Option<Value>,
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
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(d) = self.data {
            error["data"] = d;
        }
        (self.status, axum::Json(json!({"jsonrpc": "2.0", "id": self.id, "error": error}))).into_response()
    }
}

/// A success answer for request `id`.
pub fn result(id: &Option<Value>, result: Value) -> Response {
    axum::Json(json!({"jsonrpc": "2.0", "id": id.clone().unwrap_or(Value::Null), "result": result})).into_response()
}

//! `rmcp-greet [ADDR] [TOOLS]`: serves `greet` ("Hello, {name}!") at `http://ADDR/mcp`,
//! statelessly, answering JSON, and — with TOOLS > 1 — `greet_2` … `greet_TOOLS`, the same tool
//! under other names (so `tools/list` is as long as a Writ edge's). Prints the URL once it
//! listens.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};
use serde_json::json;

#[derive(Clone)]
struct Greet {
    tools: usize,
}

impl ServerHandler for Greet {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        let schema = schema.as_object().cloned().unwrap_or_default();
        let names = std::iter::once("greet".to_string()).chain((2..=self.tools).map(|i| format!("greet_{i}")));
        let tools = names.map(|n| Tool::new(n, "Read-only: returns Hello, {name}!", schema.clone())).collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "greet" && !request.name.starts_with("greet_") {
            return Err(ErrorData::invalid_params(format!("unknown tool '{}'", request.name), None));
        }
        let name = request.arguments.as_ref().and_then(|a| a.get("name")).and_then(|n| n.as_str()).unwrap_or("World");
        Ok(CallToolResult::success(vec![ContentBlock::text(format!("Hello, {name}!"))]).into())
    }
}

#[tokio::main]
async fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:0".into());
    let tools = std::env::args().nth(2).and_then(|n| n.parse().ok()).unwrap_or(1usize).max(1);
    let mut config = StreamableHttpServerConfig::default().with_sse_keep_alive(None);
    config.legacy_session_mode = false;
    config.json_response = true;
    let service =
        StreamableHttpService::new(move || Ok(Greet { tools }), Arc::new(LocalSessionManager::default()), config);
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(&addr).await.expect("bind");
    println!("http://{}/mcp", listener.local_addr().expect("local address"));
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .expect("serve");
}

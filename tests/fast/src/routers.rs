//! The edge's and the admin API's routers on one [`MemoryLedger`], driven with
//! `tower::ServiceExt::oneshot`: request-path tests without processes, sockets or RocksDB.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Request};
use serde_json::{json, Value};
use tower::ServiceExt;
use writ_client::{Ledger, MemoryLedger, Verifier};
use writ_mcp_edge::audit::AuditSink;
use writ_mcp_edge::EdgeConfig;

use crate::TEST_OPERATOR_TOKEN;

/// The canonical URL of the edge under test (the token audience); requests carry its host.
pub const EDGE_URL: &str = "http://127.0.0.1:8080/mcp";
const EDGE_HOST: &str = "127.0.0.1:8080";
/// Largest response body a test reads.
const RESPONSE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// A ledger, the admin router and an edge router following it.
pub struct Routers {
    pub ledger: Arc<MemoryLedger>,
    pub audit: AuditSink,
    pub verifier: Verifier,
    admin: axum::Router,
    edge: axum::Router,
}

/// An answer: status, headers and the body as JSON (`Null` when it is not JSON).
pub type Answer = (u16, HeaderMap, Value);

impl Routers {
    pub fn new() -> Routers {
        Self::with_config(|_| {})
    }

    /// [`Routers::new`] with the edge's configuration adjusted by `adjust`.
    pub fn with_config(adjust: impl FnOnce(&mut EdgeConfig)) -> Routers {
        crate::init_test_log();
        let ledger = Arc::new(MemoryLedger::new());
        let admin = writ_tenant_admin::router(
            ledger.clone() as Arc<dyn Ledger>,
            writ_tenant_admin::AdminConfig {
                operator_token: TEST_OPERATOR_TOKEN.into(),
                signing_keys: writ_tenant_admin::signing::SigningKeys::ephemeral().expect("signing key"),
                token_audience: EDGE_URL.into(),
                ca_secret: [7; 32],
                executor_cert_ttl_s: writ_tenant_admin::enroll::EXECUTOR_CERT_TTL_S,
                edge_ca_pins: Vec::new(),
                state: None,
                backup: None,
            },
        );
        let mut config = EdgeConfig::for_url(EDGE_URL, writ_mcp_edge::seal::SealKey::random());
        adjust(&mut config);
        let verifier = Verifier::follow(ledger.clone(), EDGE_URL);
        let audit = AuditSink::start(ledger.clone());
        let edge = writ_mcp_edge::router(ledger.clone(), verifier.clone(), audit.clone(), config).expect("edge");
        Routers { ledger, audit, verifier, admin, edge }
    }

    /// An admin API request with the operator token.
    pub async fn admin(&self, method: &str, path: &str, body: Option<Value>) -> Answer {
        self.admin_as(TEST_OPERATOR_TOKEN, method, path, body).await
    }

    /// An admin API request with `credential` (a named operator's session, or any bearer).
    pub async fn admin_as(&self, credential: &str, method: &str, path: &str, body: Option<Value>) -> Answer {
        let mut rb =
            Request::builder().method(method).uri(path).header("authorization", format!("Bearer {credential}"));
        let body = match body {
            Some(b) => {
                rb = rb.header("content-type", "application/json");
                Body::from(b.to_string())
            }
            None => Body::empty(),
        };
        send(&self.admin, rb.body(body).expect("request")).await
    }

    /// An admin request that must succeed; its body.
    /// Waits until the edge's replica has every event the ledger holds now.
    pub async fn caught_up(&self) {
        let revision = self.ledger.with_state(|s| s.revision);
        assert!(self.verifier.wait_for(revision, std::time::Duration::from_secs(10)).await, "replica at {revision}");
    }

    pub async fn admin_ok(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, _, answer) = self.admin(method, path, body).await;
        assert!((200..300).contains(&status), "{method} {path}: {status} {answer}");
        answer
    }

    /// A tenant with `catalog`, and a token for each `(principal, preset, scopes)`.
    pub async fn tenant(
        &self,
        name: &str,
        catalog: Value,
        principals: &[(&str, Option<&str>, &[&str])],
    ) -> Vec<String> {
        self.admin_ok("POST", "/v1/tenants", Some(json!({"name": name}))).await;
        self.admin_ok("POST", &format!("/v1/tenants/{name}/catalogs"), Some(catalog)).await;
        let mut tokens = Vec::new();
        for (principal, preset, scopes) in principals {
            let spec = json!({"name": principal, "kind": "agent", "preset": preset, "scopes": scopes});
            self.admin_ok("POST", &format!("/v1/tenants/{name}/principals"), Some(spec)).await;
            let issued = self
                .admin_ok("POST", &format!("/v1/tenants/{name}/tokens"), Some(json!({"principal": principal})))
                .await;
            tokens.push(issued["token"].as_str().expect("token").to_string());
        }
        // The edge decides on its replica: wait until it has what was just written.
        let revision = self.ledger.with_state(|s| s.revision);
        assert!(self.verifier.wait_for(revision, std::time::Duration::from_secs(10)).await, "the edge's replica");
        tokens
    }

    /// A POST to `/mcp` with these headers and body (and the edge's host).
    pub async fn mcp(&self, token: Option<&str>, headers: &[(&str, &str)], body: Body) -> Answer {
        let mut rb = Request::builder()
            .method("POST")
            .uri("/mcp")
            .header("host", EDGE_HOST)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(t) = token {
            rb = rb.header("authorization", format!("Bearer {t}"));
        }
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        send(&self.edge, rb.body(body).expect("request")).await
    }

    /// A well-formed 2026-07-28 request for `method` with `params` (plus `_meta`).
    pub async fn call(&self, token: Option<&str>, method: &str, mut params: Value) -> Answer {
        params["_meta"] = meta("2026-07-28");
        let name = params.get("name").and_then(Value::as_str).map(str::to_string);
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
        let mut headers = vec![("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", method)];
        if let Some(n) = name.as_deref() {
            headers.push(("Mcp-Name", n));
        }
        self.mcp(token, &headers, Body::from(body.to_string())).await
    }

    /// Any request to the edge router, as it is (no host or token added).
    pub async fn edge_raw(&self, request: Request<Body>) -> Answer {
        send(&self.edge, request).await
    }

    /// Any request to the admin router, as it is (no operator token added).
    pub async fn admin_raw(&self, request: Request<Body>) -> Answer {
        send(&self.admin, request).await
    }

    /// A GET of `path` on the edge.
    pub async fn edge_get(&self, path: &str) -> Answer {
        let request = Request::builder().uri(path).header("host", EDGE_HOST).body(Body::empty()).expect("request");
        send(&self.edge, request).await
    }
}

impl Default for Routers {
    fn default() -> Self {
        Self::new()
    }
}

/// The `_meta` of a request at `version`.
pub fn meta(version: &str) -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {}})
}

async fn send(router: &axum::Router, request: Request<Body>) -> Answer {
    let response = router.clone().oneshot(request).await.expect("routers are infallible");
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    let bytes = axum::body::to_bytes(response.into_body(), RESPONSE_BYTES_MAX).await.expect("body");
    (status, headers, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

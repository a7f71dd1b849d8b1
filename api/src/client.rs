//! The typed client of the ledger's client API, and the [`Ledger`] trait that the admin
//! service and (later) the edge are written against. A node implements [`Ledger`] in-process;
//! [`HttpLedger`] implements it over HTTP for processes that are not nodes.

use std::time::Duration;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::dto::{
    ClusterChange, ClusterStatus, ErrorBody, NodeStatus, QueryRequest, QueryResult, SubmitRequest, SubmitResponse,
};
use crate::ledger::Rejection;
use crate::reason::ReasonCode;

/// Deadline of one client-API call (covers a leader forward and the commit).
pub const LEDGER_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Header set on a request a node forwarded, so that it is never forwarded twice.
pub const FORWARDED_HEADER: &str = "x-writ-forwarded";
/// Header carrying the trace id from the edge or admin request to the ledger.
pub const TRACE_HEADER: &str = "x-writ-trace-id";

/// The ledger as its clients see it. Every error is a [`Rejection`] with a reason code.
pub trait Ledger: Send + Sync + 'static {
    fn submit(&self, req: SubmitRequest) -> BoxFuture<'_, Result<SubmitResponse, Rejection>>;
    fn query(&self, req: QueryRequest) -> BoxFuture<'_, Result<QueryResult, Rejection>>;
    fn node_status(&self) -> BoxFuture<'_, Result<NodeStatus, Rejection>>;
    fn cluster_status(&self) -> BoxFuture<'_, Result<ClusterStatus, Rejection>>;
    fn cluster_change(&self, change: ClusterChange) -> BoxFuture<'_, Result<NodeStatus, Rejection>>;
}

/// A rejection meaning "the ledger could not be reached or the outcome is unknown".
pub fn unavailable(message: impl Into<String>) -> Rejection {
    Rejection::new(ReasonCode::LEDGER_UNAVAILABLE, message)
}

/// Minimal JSON-over-HTTP client for the client API of one node at a time.
#[derive(Clone)]
pub struct NodeHttp {
    http: reqwest::Client,
}

impl Default for NodeHttp {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeHttp {
    pub fn new() -> Self {
        Self::with_client(
            reqwest::Client::builder().no_proxy().timeout(LEDGER_CALL_TIMEOUT).build().unwrap_or_default(),
        )
    }

    pub fn with_client(http: reqwest::Client) -> Self {
        NodeHttp { http }
    }

    /// `POST {base}{path}` with a JSON body; maps transport failures to LEDGER_UNAVAILABLE and
    /// error bodies to their rejection.
    pub async fn post<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        base: &str,
        path: &str,
        body: &Req,
        forwarded: bool,
    ) -> Result<Resp, Rejection> {
        let mut rb = self.http.post(format!("{}{}", base.trim_end_matches('/'), path)).json(body);
        if forwarded {
            rb = rb.header(FORWARDED_HEADER, "1");
        }
        decode(rb.send().await).await
    }

    /// `GET {base}{path}`.
    pub async fn get<Resp: DeserializeOwned>(&self, base: &str, path: &str) -> Result<Resp, Rejection> {
        decode(self.http.get(format!("{}{}", base.trim_end_matches('/'), path)).send().await).await
    }
}

async fn decode<Resp: DeserializeOwned>(sent: reqwest::Result<reqwest::Response>) -> Result<Resp, Rejection> {
    let resp = sent.map_err(|e| unavailable(format!("ledger unreachable: {e}")))?;
    let status = resp.status();
    let bytes = resp.bytes().await.map_err(|e| unavailable(format!("ledger response lost: {e}")))?;
    if status.is_success() {
        return serde_json::from_slice(&bytes)
            .map_err(|e| Rejection::new(ReasonCode::INTERNAL, format!("undecodable ledger response: {e}")));
    }
    match serde_json::from_slice::<ErrorBody>(&bytes) {
        Ok(err) => Err(Rejection::new(err.reason, err.message)),
        Err(_) => Err(unavailable(format!("ledger answered HTTP {status}"))),
    }
}

/// [`Ledger`] over HTTP against a set of node base URLs; tries them in turn.
pub struct HttpLedger {
    nodes: Vec<String>,
    http: NodeHttp,
}

impl HttpLedger {
    pub fn new(nodes: Vec<String>) -> Self {
        HttpLedger { nodes, http: NodeHttp::new() }
    }

    async fn first_ok<T, F, Fut>(&self, call: F) -> Result<T, Rejection>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<T, Rejection>>,
    {
        let mut last = unavailable("no ledger node configured");
        for node in &self.nodes {
            match call(node.clone()).await {
                Err(e) if e.reason == ReasonCode::LEDGER_UNAVAILABLE => last = e,
                other => return other,
            }
        }
        Err(last)
    }
}

impl Ledger for HttpLedger {
    fn submit(&self, req: SubmitRequest) -> BoxFuture<'_, Result<SubmitResponse, Rejection>> {
        // A submit is not retried on another node: its outcome may be uncertain (fail-close).
        Box::pin(async move {
            let node = self.nodes.first().ok_or_else(|| unavailable("no ledger node configured"))?;
            self.http.post(node, "/client/submit", &req, false).await
        })
    }

    fn query(&self, req: QueryRequest) -> BoxFuture<'_, Result<QueryResult, Rejection>> {
        Box::pin(async move {
            self.first_ok(|n| {
                let req = req.clone();
                async move { self.http.post(&n, "/client/query", &req, false).await }
            })
            .await
        })
    }

    fn node_status(&self) -> BoxFuture<'_, Result<NodeStatus, Rejection>> {
        Box::pin(self.first_ok(move |n| async move { self.http.get(&n, "/client/status").await }))
    }

    fn cluster_status(&self) -> BoxFuture<'_, Result<ClusterStatus, Rejection>> {
        Box::pin(self.first_ok(move |n| async move { self.http.get(&n, "/client/cluster").await }))
    }

    fn cluster_change(&self, change: ClusterChange) -> BoxFuture<'_, Result<NodeStatus, Rejection>> {
        Box::pin(async move {
            let node = self.nodes.first().ok_or_else(|| unavailable("no ledger node configured"))?;
            self.http.post(node, "/client/cluster", &change, false).await
        })
    }
}

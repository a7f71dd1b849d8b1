//! The typed client of the ledger's client API, and the [`Ledger`] trait that the admin
//! service and the edge are written against. A node implements [`Ledger`] in-process;
//! [`HttpLedger`] implements it over HTTP for processes that are not nodes.
//!
//! Every call to one node ends in a [`CallError`] when it fails, which says whether the request
//! may have executed: only a request that was [`CallError::NotSent`] may be retried on another
//! node without an idempotency key.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde::Serialize;

use writ_api::dto::{
    ClusterChange, ClusterStatus, ErrorBody, NodeStatus, QueryRequest, QueryResult, SubmitRequest, SubmitResponse,
    WatchFilter, WatchLine, BINARY_MEDIA_TYPE,
};
use writ_api::frames::StreamedSubmit;
use writ_api::reason::ReasonCode;
use writ_api::state::LedgerState;
use writ_api::Rejection;

/// A live feed of watch lines; it ends when the connection does.
pub type WatchStream = BoxStream<'static, WatchLine>;

/// Deadline of one client-API call (covers a leader forward and the commit).
pub const LEDGER_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Header set on a request a node forwarded, so that it is never forwarded twice.
pub const FORWARDED_HEADER: &str = "x-writ-forwarded";
/// Header carrying the trace id from the edge or admin request to the ledger.
pub const TRACE_HEADER: &str = "x-writ-trace-id";
/// The W3C trace context header: the span a request continues.
pub const TRACEPARENT_HEADER: &str = "traceparent";
/// The W3C vendor trace state that travels with it.
pub const TRACESTATE_HEADER: &str = "tracestate";

/// The ledger as its clients see it. Every error is a [`Rejection`] with a reason code.
pub trait Ledger: Send + Sync + 'static {
    fn submit(&self, req: SubmitRequest) -> BoxFuture<'_, Result<SubmitResponse, Rejection>>;
    fn query(&self, req: QueryRequest) -> BoxFuture<'_, Result<QueryResult, Rejection>>;
    fn node_status(&self) -> BoxFuture<'_, Result<NodeStatus, Rejection>>;
    fn cluster_status(&self) -> BoxFuture<'_, Result<ClusterStatus, Rejection>>;
    fn cluster_change(&self, change: ClusterChange) -> BoxFuture<'_, Result<NodeStatus, Rejection>>;
    /// The whole ledger state at a linearizable point (its `revision` says which); followers
    /// such as token verifiers start from it and then [`Ledger::watch`] from `revision + 1`.
    fn snapshot(&self) -> BoxFuture<'_, Result<LedgerState, Rejection>>;
    /// Events in revision order from `filter.from`, stored ones first and then live, with
    /// heartbeats while idle. REVISION_COMPACTED when `from` is below what is retained.
    fn watch(&self, filter: WatchFilter) -> BoxFuture<'_, Result<WatchStream, Rejection>>;
    /// Asks the ledger to fetch a discovered issuer's keys again (a token named a key it does
    /// not hold): the revision that recorded new keys, if any.
    fn refresh_issuer(&self, issuer: &str) -> BoxFuture<'_, Result<Option<u64>, Rejection>> {
        let message = format!("this ledger cannot refresh issuer '{issuer}'");
        Box::pin(async move { Err(unavailable(message)) })
    }
}

/// Runs `query` and takes out the answer of the type the caller expects; another shape is an
/// INTERNAL rejection (the ledger answered a different query).
pub async fn query_as<T: writ_api::dto::Answer>(
    ledger: &dyn Ledger,
    query: writ_api::dto::Query,
    consistency: writ_api::dto::Consistency,
) -> Result<T, Rejection> {
    let result = ledger.query(QueryRequest { query, consistency }).await?;
    T::from_result(result).ok_or_else(|| Rejection::new(ReasonCode::INTERNAL, "the ledger answered another query"))
}

/// A rejection meaning "the ledger could not be reached or the outcome is unknown".
pub fn unavailable(message: impl Into<String>) -> Rejection {
    Rejection::new(ReasonCode::LEDGER_UNAVAILABLE, message)
}

/// How one call to one node failed, and so whether the request may have executed there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// No connection was made: the node cannot have executed the request, so another node may
    /// be asked.
    NotSent(String),
    /// The request may have reached the node but its outcome is unknown (timeout, connection
    /// lost mid-exchange, an error page that is not Writ's): it may have executed.
    Uncertain(String),
    /// The node answered with a rejection (its reason says what happened).
    Rejected(Rejection),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::NotSent(m) | CallError::Uncertain(m) => f.write_str(m),
            CallError::Rejected(r) => write!(f, "{}: {}", r.reason, r.message),
        }
    }
}

impl CallError {
    /// Whether the node may have executed the request (fail-close: only `NotSent` is "no").
    pub fn may_have_executed(&self) -> bool {
        !matches!(self, CallError::NotSent(_))
    }

    /// A transport failure: `NotSent` when no connection was made, else `Uncertain`.
    pub fn from_transport(e: reqwest::Error) -> CallError {
        if e.is_connect() {
            CallError::NotSent(format!("ledger node not reached: {e}"))
        } else {
            CallError::Uncertain(format!("ledger unreachable: {e}"))
        }
    }
}

impl From<CallError> for Rejection {
    fn from(e: CallError) -> Rejection {
        match e {
            CallError::NotSent(message) | CallError::Uncertain(message) => unavailable(message),
            CallError::Rejected(rejection) => rejection,
        }
    }
}

/// Submit streams to nodes: a submit is bounded as a submit's body is.
fn submit_streams() -> std::sync::Arc<crate::numbered::Exchanges<SubmitResponse>> {
    std::sync::Arc::new(crate::numbered::Exchanges::new(crate::numbered::Bounds {
        path: writ_api::frames::SUBMIT_STREAM_PATH,
        payload_max: writ_api::frames::SUBMIT_PAYLOAD_BYTES_MAX,
        deadline: LEDGER_CALL_TIMEOUT,
    }))
}

/// Minimal JSON-over-HTTP client for the client API of one node at a time.
#[derive(Clone)]
pub struct NodeHttp {
    http: reqwest::Client,
    /// For long-lived streams: a connect deadline but no overall one.
    watch_http: reqwest::Client,
    /// The submit stream to each node (shared by clones).
    streams: std::sync::Arc<crate::numbered::Exchanges<SubmitResponse>>,
}

impl Default for NodeHttp {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeHttp {
    pub fn new() -> Self {
        Self::with_tls(None)
    }

    /// Over HTTPS when `tls` is given: trusting its CA and presenting its credential (an edge's
    /// or a node's: the client API refuses callers without one).
    pub fn with_tls(tls: Option<&crate::ClientTls>) -> Self {
        let base = || match tls {
            Some(t) => t.apply(reqwest::Client::builder().no_proxy()),
            None => reqwest::Client::builder().no_proxy(),
        };
        let http = base().timeout(LEDGER_CALL_TIMEOUT).build().unwrap_or_default();
        let watch_http = base().connect_timeout(LEDGER_CALL_TIMEOUT).build().unwrap_or_default();
        NodeHttp { http, watch_http, streams: submit_streams() }
    }

    /// Over a configured client (a node's, with its TLS); watches are not made through it.
    pub fn with_client(http: reqwest::Client) -> Self {
        NodeHttp { watch_http: http.clone(), http, streams: submit_streams() }
    }

    /// `POST {base}{path}` with a JSON body; error bodies become their rejection.
    pub async fn post<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        base: &str,
        path: &str,
        body: &Req,
        forwarded: bool,
    ) -> Result<Resp, CallError> {
        let mut rb = self.http.post(format!("{}{}", base.trim_end_matches('/'), path)).json(body);
        if forwarded {
            rb = rb.header(FORWARDED_HEADER, "1");
        }
        decode(rb.send().await).await
    }

    /// `POST {base}/client/submit` in the binary encoding (`BINARY_MEDIA_TYPE`): no JSON on
    /// the write path between edges and nodes. An answer in JSON (a node that does not speak
    /// it) is read too; error bodies are JSON.
    pub async fn submit(&self, base: &str, req: &SubmitRequest, forwarded: bool) -> Result<SubmitResponse, CallError> {
        let body = writ_api::encode(req).map_err(|e| {
            CallError::Rejected(Rejection::new(ReasonCode::INTERNAL, format!("unencodable submit: {e}")))
        })?;
        let mut rb = self
            .http
            .post(format!("{}/client/submit", base.trim_end_matches('/')))
            .header(reqwest::header::CONTENT_TYPE, BINARY_MEDIA_TYPE)
            .header(reqwest::header::ACCEPT, BINARY_MEDIA_TYPE)
            .body(body);
        if forwarded {
            rb = rb.header(FORWARDED_HEADER, "1");
        }
        if let Some(parent) = crate::trace::traceparent() {
            rb = rb.header(TRACEPARENT_HEADER, parent);
        }
        let resp = ok(rb.send().await).await?;
        let binary = is_binary(&resp);
        let bytes = resp.bytes().await.map_err(lost)?;
        let undecodable = |e: String| {
            CallError::Rejected(Rejection::new(ReasonCode::INTERNAL, format!("undecodable ledger response: {e}")))
        };
        if binary {
            writ_api::decode(&bytes).map_err(|e| undecodable(e.to_string()))
        } else {
            serde_json::from_slice(&bytes).map_err(|e| undecodable(e.to_string()))
        }
    }

    /// Submits over the node's submit stream ([`crate::numbered`]), or in a request of its own
    /// to a node that serves none; the outcome rules are the same either way.
    pub async fn submit_streamed(&self, base: &str, req: &SubmitRequest) -> Result<SubmitResponse, CallError> {
        match self.streams.route(&self.watch_http, base).await? {
            crate::numbered::Route::Exchange(stream) => {
                let traceparent = crate::trace::traceparent();
                stream.call(&StreamedSubmit { traceparent, request: std::borrow::Cow::Borrowed(req) }).await
            }
            crate::numbered::Route::Request => self.submit(base, req, false).await,
        }
    }

    /// `GET {base}{path}`.
    pub async fn get<Resp: DeserializeOwned>(&self, base: &str, path: &str) -> Result<Resp, CallError> {
        decode(self.http.get(format!("{}{}", base.trim_end_matches('/'), path)).send().await).await
    }

    /// `GET {base}/client/snapshot`: the bincode-encoded ledger state, bounded only by its size
    /// (a node's answer over mutual TLS; a state outgrows the 64 MiB message bound with its
    /// operations, and an edge bounded at 64 MiB could no longer start).
    pub async fn snapshot(&self, base: &str) -> Result<LedgerState, CallError> {
        let resp = ok(self.http.get(format!("{}/client/snapshot", base.trim_end_matches('/'))).send().await).await?;
        let bytes = resp.bytes().await.map_err(lost)?;
        LedgerState::decode_versioned_unbounded(&bytes)
            .map_err(|e| CallError::Rejected(Rejection::new(ReasonCode::INTERNAL, e)))
    }

    /// `GET {base}/client/watch`: its lines as a stream — binary frames
    /// ([`WatchLine::unframe`]) when the node answers in `BINARY_MEDIA_TYPE`, which this asks
    /// for, else NDJSON. The stream has no overall deadline (only the connect is bounded); it
    /// ends when the connection does.
    pub async fn watch(&self, base: &str, filter: &WatchFilter) -> Result<WatchStream, CallError> {
        let mut query = Vec::new();
        if let Some(from) = filter.from {
            query.push(("from", from.to_string()));
        }
        if let Some(stream) = &filter.stream {
            query.push(("stream", stream.clone()));
        }
        if let Some(kind) = &filter.kind {
            query.push(("kind", kind.clone()));
        }
        let url = reqwest::Url::parse_with_params(&format!("{}/client/watch", base.trim_end_matches('/')), &query)
            .map_err(|e| {
                CallError::Rejected(Rejection::new(ReasonCode::INPUT_INVALID, format!("bad node URL '{base}': {e}")))
            })?;
        let resp = ok(self.watch_http.get(url).header(reqwest::header::ACCEPT, BINARY_MEDIA_TYPE).send().await).await?;
        let binary = is_binary(&resp);
        let mut body = resp.bytes_stream();
        let lines = lines_from(move |tx| async move {
            let mut buf: Vec<u8> = Vec::new();
            while let Some(Ok(chunk)) = body.next().await {
                buf.extend_from_slice(&chunk);
                if binary {
                    loop {
                        match WatchLine::unframe(&mut buf) {
                            Ok(Some(l)) => {
                                if tx.send(l).await.is_err() {
                                    return;
                                }
                            }
                            Ok(None) => break,
                            Err(e) => {
                                tracing::warn!(error = %e, "undecodable watch frame; ending the stream");
                                return;
                            }
                        }
                    }
                    continue;
                }
                while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=nl).collect();
                    match serde_json::from_slice::<WatchLine>(&line) {
                        Ok(l) => {
                            if tx.send(l).await.is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "undecodable watch line; ending the stream");
                            return;
                        }
                    }
                }
            }
        });
        Ok(lines)
    }
}

/// Whether a node answered in the binary encoding (`BINARY_MEDIA_TYPE`).
fn is_binary(resp: &reqwest::Response) -> bool {
    let content_type = resp.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    content_type.is_some_and(|v| v.contains(BINARY_MEDIA_TYPE))
}

/// Runs `produce` on its own task and exposes what it sends as a stream; dropping the stream
/// stops the producer at its next send.
pub(crate) fn lines_from<F, Fut>(produce: F) -> WatchStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<WatchLine>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(produce(tx));
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|l| (l, rx)) }).boxed()
}

/// Passes a success response through; maps transport errors and error bodies.
async fn ok(sent: reqwest::Result<reqwest::Response>) -> Result<reqwest::Response, CallError> {
    let resp = sent.map_err(CallError::from_transport)?;
    if resp.status().is_success() {
        return Ok(resp);
    }
    let status = resp.status();
    let bytes = resp.bytes().await.map_err(lost)?;
    match serde_json::from_slice::<ErrorBody>(&bytes) {
        Ok(err) => Err(CallError::Rejected(Rejection::new(err.reason, err.message))),
        Err(_) => Err(CallError::Uncertain(format!("ledger answered HTTP {status}"))),
    }
}

fn lost(e: reqwest::Error) -> CallError {
    CallError::Uncertain(format!("ledger response lost: {e}"))
}

async fn decode<Resp: DeserializeOwned>(sent: reqwest::Result<reqwest::Response>) -> Result<Resp, CallError> {
    let bytes = ok(sent).await?.bytes().await.map_err(lost)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        CallError::Rejected(Rejection::new(ReasonCode::INTERNAL, format!("undecodable ledger response: {e}")))
    })
}

/// [`Ledger`] over HTTP against a set of node base URLs; tries them in turn.
pub struct HttpLedger {
    nodes: Vec<String>,
    http: NodeHttp,
    /// Index of the node that last took a submit (tried first next time).
    preferred: std::sync::atomic::AtomicUsize,
}

impl HttpLedger {
    pub fn new(nodes: Vec<String>) -> Self {
        Self::with_http(nodes, NodeHttp::new())
    }

    /// Over `http` (e.g. [`NodeHttp::with_tls`] with the caller's role credential).
    pub fn with_http(nodes: Vec<String>, http: NodeHttp) -> Self {
        HttpLedger { nodes, http, preferred: Default::default() }
    }

    /// A read (or an idempotent call) on the first node that answers it: one that was not
    /// reached, lost the exchange or has no leader is passed over.
    async fn first_ok<T, F, Fut>(&self, call: F) -> Result<T, Rejection>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<T, CallError>>,
    {
        let mut last = unavailable("no ledger node configured");
        for node in &self.nodes {
            match call(node.clone()).await {
                Err(CallError::Rejected(r)) if r.reason != ReasonCode::LEDGER_UNAVAILABLE => return Err(r),
                Err(e) => last = e.into(),
                Ok(v) => return Ok(v),
            }
        }
        Err(last)
    }
}

impl Ledger for HttpLedger {
    fn submit(&self, req: SubmitRequest) -> BoxFuture<'_, Result<SubmitResponse, Rejection>> {
        // A submit goes to another node only when the previous one was not reached at all (no
        // connection, so nothing can have been executed); any other failure may hide a commit,
        // so it is reported as uncertain (fail-close) and the caller decides (e.g. retries with
        // the same idempotency key).
        Box::pin(async move {
            use std::sync::atomic::Ordering;
            let n = self.nodes.len();
            let start = self.preferred.load(Ordering::Relaxed);
            let mut last = unavailable("no ledger node configured");
            for i in 0..n {
                let at = (start + i) % n;
                match self.http.submit_streamed(&self.nodes[at], &req).await {
                    Err(e) if !e.may_have_executed() => last = e.into(),
                    other => {
                        // Leader-aware routing: a node that had to forward is not preferred
                        // next time, so submits settle on the leader (and move on after an
                        // election) without knowing node ids.
                        let forwarded = other.as_ref().is_ok_and(|r: &SubmitResponse| r.forwarded);
                        self.preferred.store(if forwarded { (at + 1) % n } else { at }, Ordering::Relaxed);
                        return other.map_err(Rejection::from);
                    }
                }
            }
            Err(last)
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
            Ok(self.http.post(node, "/client/cluster", &change, false).await?)
        })
    }

    fn snapshot(&self) -> BoxFuture<'_, Result<LedgerState, Rejection>> {
        Box::pin(self.first_ok(move |n| async move { self.http.snapshot(&n).await }))
    }

    fn watch(&self, filter: WatchFilter) -> BoxFuture<'_, Result<WatchStream, Rejection>> {
        Box::pin(async move {
            self.first_ok(|n| {
                let filter = filter.clone();
                async move { self.http.watch(&n, &filter).await }
            })
            .await
        })
    }

    fn refresh_issuer(&self, issuer: &str) -> BoxFuture<'_, Result<Option<u64>, Rejection>> {
        let req = writ_api::dto::IssuerRefreshRequest { issuer: issuer.to_string() };
        Box::pin(async move {
            let answer: writ_api::dto::IssuerRefreshed = self
                .first_ok(|n| {
                    let req = req.clone();
                    async move { self.http.post(&n, "/client/issuer-refresh", &req, false).await }
                })
                .await?;
            Ok(answer.revision)
        })
    }
}

//! The node's HTTP surface: Raft RPCs (`/raft/*`, bincode), the ledger client API
//! (`/client/*`, JSON), the watch stream, health, readiness and Prometheus metrics.

use std::io::Cursor;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use openraft::async_runtime::WatchReceiver;
use openraft::errors::RaftError;
use openraft::Snapshot;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use writ_api::client::FORWARDED_HEADER;
use writ_api::dto::{ClusterChange, QueryRequest, SubmitRequest};
use writ_api::ledger::EventEnvelope;
use writ_api::ReasonCode;
use writ_raft_store::TypeConfig;
use writ_tenant_admin::error::{ApiError, ValidJson, ValidQuery};

use crate::ledger::LedgerNode;

/// Largest Raft RPC body (a snapshot travels in one request).
pub const RAFT_BODY_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Largest client-API body.
pub const CLIENT_BODY_BYTES_MAX: usize = 1024 * 1024;
/// Events read from the store per catch-up page of a watch.
const WATCH_PAGE_EVENTS: usize = 1000;
/// Lines buffered per watcher before backpressure.
const WATCH_CHANNEL_LINES: usize = 256;

#[derive(Clone)]
struct NodeState {
    node: Arc<LedgerNode>,
    metrics: Option<PrometheusHandle>,
}

/// The whole node router; `extra` (e.g. the admin API) is merged in.
pub fn router(node: Arc<LedgerNode>, metrics: Option<PrometheusHandle>, extra: Router) -> Router {
    let st = NodeState { node, metrics };
    let raft = Router::new()
        .route("/raft/append", post(raft_append))
        .route("/raft/vote", post(raft_vote))
        .route("/raft/snapshot", post(raft_snapshot))
        .route("/raft/transfer-leader", post(raft_transfer_leader))
        .layer(DefaultBodyLimit::max(RAFT_BODY_BYTES_MAX));
    let client = Router::new()
        .route("/client/submit", post(client_submit))
        .route("/client/query", post(client_query))
        .route("/client/read-index", get(client_read_index))
        .route("/client/status", get(client_status))
        .route("/client/cluster", get(client_cluster).post(client_cluster_change))
        .route("/client/watch", get(client_watch))
        .layer(DefaultBodyLimit::max(CLIENT_BODY_BYTES_MAX));
    Router::new()
        .merge(raft)
        .merge(client)
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(st)
        .merge(extra)
}

fn bincode_response<T: Serialize>(value: &T) -> Response {
    match writ_api::encode(value) {
        Ok(bytes) => ([(axum::http::header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Decodes a bincode Raft RPC, runs it, and encodes its result.
async fn raft_call<Req, Resp, F, Fut>(body: Bytes, call: F) -> Response
where
    Req: DeserializeOwned,
    Resp: Serialize,
    F: FnOnce(Req) -> Fut,
    Fut: std::future::Future<Output = Resp>,
{
    match writ_api::decode::<Req>(&body) {
        Ok(req) => bincode_response(&call(req).await),
        Err(e) => (StatusCode::BAD_REQUEST, format!("undecodable raft rpc: {e}")).into_response(),
    }
}

async fn raft_append(State(st): State<NodeState>, body: Bytes) -> Response {
    raft_call(body, |req| async move { st.node.raft.append_entries(req).await }).await
}

async fn raft_vote(State(st): State<NodeState>, body: Bytes) -> Response {
    raft_call(body, |req| async move { st.node.raft.vote(req).await }).await
}

type SnapshotRpc = (openraft::alias::VoteOf<TypeConfig>, openraft::alias::SnapshotMetaOf<TypeConfig>, Vec<u8>);

async fn raft_snapshot(State(st): State<NodeState>, body: Bytes) -> Response {
    raft_call(body, |(vote, meta, data): SnapshotRpc| async move {
        let snapshot = Snapshot { meta, snapshot: Cursor::new(data) };
        st.node.raft.install_full_snapshot(vote, snapshot).await.map_err(RaftError::<TypeConfig>::Fatal)
    })
    .await
}

async fn raft_transfer_leader(State(st): State<NodeState>, body: Bytes) -> Response {
    raft_call(body, |req| async move {
        st.node.raft.handle_transfer_leader(req).await.map_err(RaftError::<TypeConfig>::Fatal)
    })
    .await
}

fn forwarded(headers: &HeaderMap) -> bool {
    headers.contains_key(FORWARDED_HEADER)
}

async fn client_submit(
    State(st): State<NodeState>,
    headers: HeaderMap,
    ValidJson(req): ValidJson<SubmitRequest>,
) -> Result<Response, ApiError> {
    Ok(Json(st.node.submit_request(req, forwarded(&headers)).await?).into_response())
}

async fn client_query(
    State(st): State<NodeState>,
    ValidJson(req): ValidJson<QueryRequest>,
) -> Result<Response, ApiError> {
    Ok(Json(st.node.query_request(req).await?).into_response())
}

async fn client_read_index(State(st): State<NodeState>) -> Result<Response, ApiError> {
    Ok(Json(st.node.read_index().await?).into_response())
}

async fn client_status(State(st): State<NodeState>) -> Response {
    Json(st.node.status()).into_response()
}

async fn client_cluster(State(st): State<NodeState>) -> Response {
    Json(st.node.cluster_status().await).into_response()
}

async fn client_cluster_change(
    State(st): State<NodeState>,
    headers: HeaderMap,
    ValidJson(change): ValidJson<ClusterChange>,
) -> Result<Response, ApiError> {
    Ok(Json(st.node.change(change, forwarded(&headers)).await?).into_response())
}

/// Watch filter: all given fields must match.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WatchParams {
    /// First revision to deliver; default: only events after now.
    from: Option<u64>,
    /// Event stream (tenant id) to follow.
    stream: Option<String>,
    /// Event kind (e.g. `tenant_created`).
    kind: Option<String>,
}

impl WatchParams {
    fn matches(&self, e: &EventEnvelope) -> bool {
        self.stream.as_ref().is_none_or(|s| *s == e.stream) && self.kind.as_ref().is_none_or(|k| k == e.event.kind())
    }
}

/// A watch line: an event, or the reason the stream ended (the client resumes from `next`).
#[derive(Serialize)]
#[serde(untagged)]
enum WatchLine<'a> {
    Event(&'a EventEnvelope),
    End { end: ReasonCode, message: &'a str, next: u64 },
}

/// `GET /client/watch?from=REV&stream=T&kind=K`: NDJSON of events in revision order, from the
/// store first and then live. A watcher that falls too far behind gets an end line with the
/// revision to resume from instead of silently missing events.
async fn client_watch(
    State(st): State<NodeState>,
    ValidQuery(params): ValidQuery<WatchParams>,
) -> Result<Response, ApiError> {
    // Subscribe before reading the store so that no event falls between the two.
    let mut live = st.node.sm.subscribe();
    let (floor, current) = {
        let a = st.node.sm.read();
        (a.event_floor, a.state.revision)
    };
    let from = params.from.unwrap_or(current + 1);
    if from < floor {
        return Err(ApiError::new(
            ReasonCode::REVISION_COMPACTED,
            format!("revision {from} is not retained on this node; the oldest is {floor}"),
        ));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(WATCH_CHANNEL_LINES);
    let node = st.node.clone();
    tokio::spawn(async move {
        let line = |l: &WatchLine| -> Bytes {
            let mut v = serde_json::to_vec(l).unwrap_or_default();
            v.push(b'\n');
            Bytes::from(v)
        };
        let mut next = from;
        loop {
            // Catch up from the store until it has nothing at or after `next`.
            loop {
                let page = match node.sm.events_from(next, WATCH_PAGE_EVENTS) {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::error!(error = %e, "watch store read failed");
                        let _ = tx
                            .send(Ok(line(&WatchLine::End {
                                end: ReasonCode::INTERNAL,
                                message: "store read failed",
                                next,
                            })))
                            .await;
                        return;
                    }
                };
                if page.is_empty() {
                    break;
                }
                for e in &page {
                    next = e.revision + 1;
                    if params.matches(e) && tx.send(Ok(line(&WatchLine::Event(e)))).await.is_err() {
                        return;
                    }
                }
            }
            // Follow live events; a gap sends us back to the store.
            loop {
                // Stop as soon as the watcher goes away, even when no event arrives.
                let received = tokio::select! {
                    r = live.recv() => r,
                    _ = tx.closed() => return,
                };
                match received {
                    Ok(e) if e.revision < next => continue,
                    Ok(e) if e.revision > next => break,
                    Ok(e) => {
                        next = e.revision + 1;
                        if params.matches(&e) && tx.send(Ok(line(&WatchLine::Event(&e)))).await.is_err() {
                            return;
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        live = node.sm.subscribe();
                        break;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    });
    let body =
        Body::from_stream(futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) }));
    Ok(([(axum::http::header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready when the node is part of a cluster with a known leader and applied state.
async fn readyz(State(st): State<NodeState>) -> Response {
    let m = st.node.raft.metrics().borrow_watched().clone();
    if m.current_leader.is_some() && m.last_applied.is_some() && m.running_state.is_ok() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready: no leader or nothing applied yet\n").into_response()
    }
}

async fn metrics_text(State(st): State<NodeState>) -> Response {
    let m = st.node.raft.metrics().borrow_watched().clone();
    metrics::gauge!("writ_raft_term").set(m.current_term as f64);
    metrics::gauge!("writ_raft_last_log_index").set(m.last_log_index.unwrap_or(0) as f64);
    metrics::gauge!("writ_raft_last_applied_index").set(m.last_applied.as_ref().map_or(0, |l| l.index()) as f64);
    metrics::gauge!("writ_raft_is_leader").set(if m.state == openraft::ServerState::Leader { 1.0 } else { 0.0 });
    match &st.metrics {
        Some(h) => h.render().into_response(),
        None => (StatusCode::NOT_FOUND, "metrics recorder not installed\n").into_response(),
    }
}

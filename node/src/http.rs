//! The node's HTTP surface: Raft RPCs (`/raft/*`, bincode), the ledger client API
//! (`/client/*`, JSON; submits and the watch stream also in bincode for a caller that asks
//! with [`BINARY_MEDIA_TYPE`]), the watch stream, health, readiness and Prometheus metrics.
//!
//! Who may call what (SPEC S2), decided from the connection's [`PeerIdentity`] before any body
//! is read, by the rules of [`writ_api::role::Role`]:
//! - `/raft/*`: node identities only;
//! - `/client/*`: node and edge identities; an edge only the commands and queries edges need,
//!   and never a membership change (`POST /client/cluster`: nodes only; operators change
//!   membership through the admin API);
//! - `/healthz`, `/readyz`, `/metrics`: anyone (read-only);
//! - the admin API: its operator token.
//!
//! Which listener serves which routes is decided in `start_node` (peer, admin, probes).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use metrics_exporter_prometheus::PrometheusHandle;
use openraft::async_runtime::WatchReceiver;
use openraft::errors::RaftError;
use openraft::Snapshot;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use writ_api::dto::{ClusterChange, QueryRequest, SubmitRequest, WatchFilter, BINARY_MEDIA_TYPE};
use writ_api::frames::StreamedSubmit;
use writ_api::operation::OperationState;
use writ_api::role::{Identity, Role};
use writ_api::settings::AuditMode;
use writ_api::{ReasonCode, Rejection};
use writ_client::FORWARDED_HEADER;
use writ_raft_store::TypeConfig;
use writ_tenant_admin::error::{ApiError, ValidJson, ValidQuery};

use crate::ledger::LedgerNode;
use crate::tls::PeerIdentity;

/// Largest Raft RPC body by default (`[raft] rpc_body_bytes_max`): an append batch or a
/// snapshot chunk — snapshots travel in chunks, so this no longer caps their size.
pub const RAFT_BODY_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Largest client-API body.
pub const CLIENT_BODY_BYTES_MAX: usize = 1024 * 1024;

#[derive(Clone)]
struct NodeState {
    node: Arc<LedgerNode>,
    metrics: Option<PrometheusHandle>,
    /// Watch streams end when the node drains (their followers resume at another node).
    drain: crate::tls::Drain,
}

/// The peer listener's routes: Raft RPCs and the ledger client API, each admitted by role.
pub fn peer_router(node: Arc<LedgerNode>, drain: crate::tls::Drain) -> Router {
    let st = NodeState { node: node.clone(), metrics: None, drain };
    let raft = Router::new()
        .route("/raft/append", post(raft_append))
        .route("/raft/vote", post(raft_vote))
        .route("/raft/pre-vote", post(raft_pre_vote))
        .route("/raft/snapshot", post(raft_snapshot))
        .route("/raft/snapshot-chunk", post(raft_snapshot_chunk))
        .route("/raft/transfer-leader", post(raft_transfer_leader))
        .layer(DefaultBodyLimit::max(node.rpc_body_bytes_max))
        .layer(axum::middleware::from_fn_with_state(node.clone(), |State(n), req, next| {
            admit(n, req, next, "raft", Role::may_replicate)
        }));
    let client = Router::new()
        .route("/client/submit", post(client_submit))
        .route(writ_api::frames::SUBMIT_STREAM_PATH, post(client_submit_stream))
        .route("/client/query", post(client_query))
        .route("/client/read-index", get(client_read_index))
        .route("/client/status", get(client_status))
        .route("/client/cluster", get(client_cluster))
        .route("/client/watch", get(client_watch))
        .route("/client/snapshot", get(client_snapshot))
        .route("/client/issuer-refresh", post(client_issuer_refresh))
        .layer(DefaultBodyLimit::max(CLIENT_BODY_BYTES_MAX))
        .layer(axum::middleware::from_fn_with_state(node.clone(), |State(n), req, next| {
            admit(n, req, next, "client", Role::may_follow)
        }));
    let membership = Router::new()
        .route("/client/cluster", post(client_cluster_change))
        .layer(DefaultBodyLimit::max(CLIENT_BODY_BYTES_MAX))
        .layer(axum::middleware::from_fn_with_state(node.clone(), |State(n), req, next| {
            admit(n, req, next, "membership", Role::may_change_membership)
        }));
    Router::new().merge(raft).merge(client).merge(membership).with_state(st)
}

/// The probe routes: `/healthz`, `/readyz`, `/metrics` — read-only, for anyone.
pub fn probe_router(node: Arc<LedgerNode>, metrics: Option<PrometheusHandle>, drain: crate::tls::Drain) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(NodeState { node, metrics, drain })
}

/// A refusal of the caller's identity, counted by route class and reason (never audited per
/// request: an unauthenticated party cannot write to any tenant's trail).
fn refused(class: &'static str, reason: ReasonCode, message: String) -> ApiError {
    metrics::counter!("writ_node_peer_refused_total", "route" => class, "reason" => reason.as_str()).increment(1);
    ApiError(Rejection::new(reason, message))
}

/// The admin API on a listener that requires client certificates
/// (`admin_require_client_certificate`): each route admitted by [`Role::may_administer`].
pub fn with_operator_certificates(admin: Router, node: Arc<LedgerNode>) -> Router {
    admin.layer(axum::middleware::from_fn_with_state(
        node,
        |State(n): State<Arc<LedgerNode>>, req: Request, next: Next| {
            let path = req.uri().path().to_string();
            admit(n, req, next, "admin", move |role| role.may_administer(&path))
        },
    ))
}

/// Middleware: only callers whose certificate is not revoked and whose role passes `allowed`
/// reach the route (nothing is read first). Revocation is checked on every request, so a
/// connection opened before its certificate was revoked is refused too.
async fn admit(
    node: Arc<LedgerNode>,
    mut req: Request,
    next: Next,
    class: &'static str,
    allowed: impl Fn(Role) -> bool,
) -> Response {
    let Some((identity, serial)) = req.extensions().get::<PeerIdentity>().and_then(|p| p.0.clone()) else {
        let message = format!("{} needs a client certificate from the cluster CA", req.uri().path());
        return refused(class, ReasonCode::PEER_UNAUTHENTICATED, message).into_response();
    };
    if node.role_certificate_revoked(&serial) {
        let message = format!("the certificate {serial} of {identity} was revoked");
        return refused(class, ReasonCode::CREDENTIAL_RETIRED, message).into_response();
    }
    if !allowed(identity.role) {
        let message = format!("{identity} may not call {} {}", req.method(), req.uri().path());
        return refused(class, ReasonCode::PEER_FORBIDDEN, message).into_response();
    }
    req.extensions_mut().insert(identity);
    req.extensions_mut().insert(CertificateSerial(serial));
    next.run(req).await
}

/// The serial of the certificate [`admit`] admitted the caller by, for a long-lived exchange
/// that checks its revocation again.
#[derive(Clone)]
struct CertificateSerial(String);

/// The caller admitted by [`admit`] (an extension it set).
fn admitted(identity: Option<axum::Extension<Identity>>) -> Result<Identity, ApiError> {
    identity
        .map(|axum::Extension(i)| i)
        .ok_or_else(|| ApiError::new(ReasonCode::PEER_UNAUTHENTICATED, "no admitted caller"))
}

fn forbidden(identity: &Identity, what: String) -> ApiError {
    refused("client", ReasonCode::PEER_FORBIDDEN, format!("{identity} may not {what}"))
}

fn bincode_response<T: Serialize>(value: &T) -> Response {
    match writ_api::encode(value) {
        Ok(bytes) => ([(axum::http::header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Decodes a bincode Raft RPC, runs it, and encodes its result — only when the node the RPC
/// speaks for (`sender`: the leader appending, the candidate asking for a vote) is the node
/// the caller's certificate names: one node's certificate cannot act as another member.
async fn raft_call<Req, Resp, F, Fut>(
    identity: Option<axum::Extension<Identity>>,
    body: Bytes,
    sender: fn(&Req) -> u64,
    call: F,
) -> Response
where
    Req: DeserializeOwned,
    Resp: Serialize,
    F: FnOnce(Req) -> Fut,
    Fut: std::future::Future<Output = Resp>,
{
    // The body is capped at `rpc_body_bytes_max`, which may exceed the 64 MiB message bound.
    let req = match writ_api::decode_unbounded::<Req>(&body) {
        Ok(req) => req,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("undecodable raft rpc: {e}")).into_response(),
    };
    if let Err(refusal) = speaks_for(identity, sender(&req)) {
        return refusal.into_response();
    }
    bincode_response(&call(req).await)
}

/// Whether the admitted caller is the node `claimed` (a Raft RPC speaks for a node).
fn speaks_for(identity: Option<axum::Extension<Identity>>, claimed: u64) -> Result<(), ApiError> {
    let caller = admitted(identity)?;
    if caller.id == claimed.to_string() {
        return Ok(());
    }
    Err(refused("raft", ReasonCode::PEER_FORBIDDEN, format!("{caller} may not speak for node {claimed} in Raft")))
}

/// The node a vote is of (the leader or candidate it names).
fn vote_node(vote: &openraft::alias::VoteOf<TypeConfig>) -> u64 {
    use openraft::vote::RaftLeaderId;
    *vote.leader_id().node_id()
}

async fn raft_append(
    State(st): State<NodeState>,
    identity: Option<axum::Extension<Identity>>,
    body: Bytes,
) -> Response {
    let sender = |r: &openraft::raft::AppendEntriesRequest<TypeConfig>| vote_node(&r.vote);
    raft_call(identity, body, sender, |req| async move { st.node.append_entries(req).await }).await
}

async fn raft_vote(State(st): State<NodeState>, identity: Option<axum::Extension<Identity>>, body: Bytes) -> Response {
    let sender = |r: &openraft::raft::VoteRequest<TypeConfig>| vote_node(&r.vote);
    raft_call(identity, body, sender, |req| async move { st.node.raft.vote(req).await }).await
}

/// Whether this node would grant a vote, changing nothing (openraft's pre-vote).
async fn raft_pre_vote(
    State(st): State<NodeState>,
    identity: Option<axum::Extension<Identity>>,
    body: Bytes,
) -> Response {
    let sender = |r: &openraft::raft::VoteRequest<TypeConfig>| vote_node(&r.vote);
    raft_call(identity, body, sender, |req| async move { st.node.raft.pre_vote(req).await }).await
}

type SnapshotRpc = (openraft::alias::VoteOf<TypeConfig>, openraft::alias::SnapshotMetaOf<TypeConfig>, Vec<u8>);

/// A whole snapshot in one request, as nodes before streamed snapshots send it: written to a
/// file, then installed like a received one.
async fn raft_snapshot(
    State(st): State<NodeState>,
    identity: Option<axum::Extension<Identity>>,
    body: Bytes,
) -> Response {
    let (vote, meta, data): SnapshotRpc = match writ_api::decode_unbounded(&body) {
        Ok(req) => req,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("undecodable raft rpc: {e}")).into_response(),
    };
    if let Err(refusal) = speaks_for(identity, vote_node(&vote)) {
        return refusal.into_response();
    }
    let path = match older_snapshot_file(&st.node, &meta, data).await {
        Ok(p) => p,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, format!("snapshot not stored: {e}")).into_response(),
    };
    let snapshot = Snapshot { meta, snapshot: writ_raft_store::SnapshotHandle::file(path) };
    bincode_response(&st.node.raft.install_full_snapshot(vote, snapshot).await.map_err(RaftError::<TypeConfig>::Fatal))
}

/// Writes a snapshot payload of the format before streaming as a snapshot file.
async fn older_snapshot_file(
    node: &LedgerNode,
    meta: &openraft::alias::SnapshotMetaOf<TypeConfig>,
    data: Vec<u8>,
) -> std::io::Result<std::path::PathBuf> {
    let dir = node.sm.incoming_dir()?;
    let (sm, meta) = (node.sm.clone(), meta.clone());
    tokio::task::spawn_blocking(move || sm.write_older_payload(&dir, &meta, &data))
        .await
        .map_err(std::io::Error::other)?
}

/// `POST /raft/snapshot-chunk` (`crate::network::SnapshotChunk`): appends a chunk of a snapshot
/// file at the offset it names (or says where to resume), and with the last one checks the
/// whole file's length and sha256 and hands it to Raft. The file is assembled in the snapshot
/// directory's `incoming/`, so installing it is a rename.
async fn raft_snapshot_chunk(
    State(st): State<NodeState>,
    identity: Option<axum::Extension<Identity>>,
    body: Bytes,
) -> Response {
    let chunk: crate::network::SnapshotChunk = match writ_api::decode_unbounded(&body) {
        Ok(c) => c,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("undecodable snapshot chunk: {e}")).into_response(),
    };
    if let Err(refusal) = speaks_for(identity, vote_node(&chunk.vote)) {
        return refusal.into_response();
    }
    let failed = |e: std::io::Error| {
        tracing::warn!(error = %e, "snapshot chunk not stored");
        (StatusCode::INTERNAL_SERVER_ERROR, format!("snapshot chunk not stored: {e}")).into_response()
    };
    let dir = match st.node.sm.incoming_dir() {
        Ok(d) => d,
        Err(e) => return failed(e),
    };
    let index = chunk.meta.last_log_id.as_ref().map_or(0, |l| l.index());
    let path = dir.join(format!("snapshot-{index:020}.part"));
    let (offset, data, done) = (chunk.offset, chunk.data, chunk.done);
    let part = path.clone();
    let stored = tokio::task::spawn_blocking(move || -> std::io::Result<(u64, bool)> {
        use std::io::Write;
        let held = std::fs::metadata(&part).map_or(0, |m| m.len());
        match offset {
            None => {
                // A new transfer: parts of other snapshots are dropped.
                for other in std::fs::read_dir(part.parent().expect("a directory"))?.flatten() {
                    if other.path() != part {
                        let _ = std::fs::remove_file(other.path());
                    }
                }
                Ok((held, false))
            }
            Some(at) if at != held => Ok((held, false)),
            Some(_) => {
                let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&part)?;
                f.write_all(&data)?;
                let held = held + data.len() as u64;
                let Some((total, sha256)) = done else { return Ok((held, false)) };
                f.sync_all()?;
                if held != total || crate::network::file_sha256(&part)? != sha256 {
                    // Damaged on the way: start over.
                    std::fs::remove_file(&part)?;
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "the snapshot's digest does not match",
                    ));
                }
                Ok((held, true))
            }
        }
    })
    .await
    .map_err(std::io::Error::other)
    .and_then(|r| r);
    let (held, whole) = match stored {
        Ok(s) => s,
        Err(e) => return failed(e),
    };
    if !whole {
        if offset.is_some() {
            metrics::counter!("writ_snapshot_chunks_received_total").increment(1);
        }
        let reply: Result<crate::network::ChunkReply, RaftError<TypeConfig>> =
            Ok(crate::network::ChunkReply::Resume { offset: held });
        return bincode_response(&reply);
    }
    metrics::counter!("writ_snapshot_chunks_received_total").increment(1);
    let snapshot = Snapshot { meta: chunk.meta, snapshot: writ_raft_store::SnapshotHandle::file(path.clone()) };
    let installed = st.node.raft.install_full_snapshot(chunk.vote, snapshot).await;
    // Installed, it was moved into place; refused (a stale vote, an older snapshot), it goes.
    let _ = std::fs::remove_file(&path);
    let reply = installed.map(crate::network::ChunkReply::Installed).map_err(RaftError::<TypeConfig>::Fatal);
    bincode_response(&reply)
}

async fn raft_transfer_leader(
    State(st): State<NodeState>,
    identity: Option<axum::Extension<Identity>>,
    body: Bytes,
) -> Response {
    let sender = |r: &openraft::raft::TransferLeaderRequest<TypeConfig>| vote_node(r.from_leader());
    raft_call(identity, body, sender, |req| async move {
        st.node.raft.handle_transfer_leader(req).await.map_err(RaftError::<TypeConfig>::Fatal)
    })
    .await
}

fn forwarded(headers: &HeaderMap) -> bool {
    headers.contains_key(FORWARDED_HEADER)
}

/// Whether `headers` name [`BINARY_MEDIA_TYPE`] under `name` (`Content-Type`, `Accept`).
fn binary(headers: &HeaderMap, name: axum::http::header::HeaderName) -> bool {
    headers.get(name).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains(BINARY_MEDIA_TYPE))
}

/// A client-API body: bincode when its `Content-Type` says so, else JSON; a body that does not
/// decode is INPUT_INVALID.
fn wire_body<T: DeserializeOwned>(headers: &HeaderMap, body: &[u8]) -> Result<T, ApiError> {
    let invalid = |e: String| ApiError::new(ReasonCode::INPUT_INVALID, e);
    if binary(headers, axum::http::header::CONTENT_TYPE) {
        writ_api::decode(body).map_err(|e| invalid(format!("undecodable binary body: {e}")))
    } else {
        serde_json::from_slice(body).map_err(|e| invalid(format!("invalid JSON body: {e}")))
    }
}

/// `value` in the encoding the caller's `Accept` asks for: bincode, else JSON.
fn wire_answer<T: Serialize>(headers: &HeaderMap, value: &T) -> Result<Response, ApiError> {
    if !binary(headers, axum::http::header::ACCEPT) {
        return Ok(Json(value).into_response());
    }
    let bytes = writ_api::encode(value).map_err(|e| ApiError::new(ReasonCode::INTERNAL, e.to_string()))?;
    Ok(([(axum::http::header::CONTENT_TYPE, BINARY_MEDIA_TYPE)], bytes).into_response())
}

async fn client_submit(
    State(st): State<NodeState>,
    identity: Option<axum::Extension<Identity>>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let identity = admitted(identity)?;
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::new(ReasonCode::PAYLOAD_TOO_LARGE, "request body exceeds the size limit")
        }
        _ => ApiError::new(ReasonCode::INPUT_INVALID, e.body_text()),
    })?;
    let req: SubmitRequest = wire_body(&headers, &body)?;
    metrics::counter!("writ_node_submits_total", "transport" => "request").increment(1);
    let answer = submit_as(&st, &identity, req, forwarded(&headers), writ_client::trace::caller(&headers)).await?;
    wire_answer(&headers, &answer)
}

/// Submits `req` for `identity` once its role may: the one path of a submit, alone or on a
/// submit stream.
async fn submit_as(
    st: &NodeState,
    identity: &Identity,
    req: SubmitRequest,
    forwarded: bool,
    caller: Option<writ_api::trace::TraceContext>,
) -> Result<writ_api::dto::SubmitResponse, ApiError> {
    if !identity.role.may_submit(&req.command) {
        return Err(forbidden(identity, format!("submit {}", req.command.kind())));
    }
    // An edge records its own upstream fuses and executor connections only, under the id its
    // certificate names.
    let edge_id = match req.command.innermost() {
        writ_api::ledger::Command::SetUpstreamFuse { edge_id, .. }
        | writ_api::ledger::Command::SetExecutorPresence { edge_id, .. } => Some(edge_id),
        _ => None,
    };
    if let (Role::Edge, Some(edge_id)) = (identity.role, edge_id) {
        if *edge_id != identity.id {
            return Err(forbidden(identity, format!("record '{}' for edge '{edge_id}'", req.command.kind())));
        }
    }
    // An edge performs upstream operations under its own certificate's id only.
    if let (Role::Edge, Some(claimant)) = (identity.role, req.command.claimant()) {
        let edge = claimant.strip_prefix(writ_api::ledger::EDGE_PERFORMER_PREFIX);
        if edge.is_some_and(|e| e != identity.id) {
            return Err(forbidden(identity, format!("claim an operation as '{claimant}'")));
        }
    }
    // An edge's principal acts reach the log only with the credential this node verified.
    let req = match identity.role {
        Role::Edge => st.node.admit_edge(&identity.id, req).await?,
        _ => req,
    };
    let submit = st.node.submit_request(req, forwarded);
    // The submission continues the caller's trace, when it names one (`traceparent`).
    Ok(match caller {
        Some(cx) => writ_client::trace::within(&cx, submit).await?,
        None => submit.await?,
    })
}

/// Most submits one submit stream has in flight: beyond, the node reads no more of it until
/// one is answered (and the stream's HTTP/2 window holds the caller back).
pub const SUBMIT_STREAM_IN_FLIGHT_MAX: usize = 1024;

/// `POST /client/submit-stream`: many submits over one exchange, as numbered frames
/// ([`writ_client::numbered`]) in both directions. Each is checked as a submit of its own (the
/// caller's role and, since the exchange outlives the check at its start, its certificate's
/// revocation) and answered under its number once decided; answers ready together go out in
/// one write. The stream ends when the caller's side does or the node drains, after every
/// submit read has been answered.
async fn client_submit_stream(
    State(st): State<NodeState>,
    identity: Option<axum::Extension<Identity>>,
    serial: Option<axum::Extension<CertificateSerial>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let identity = admitted(identity)?;
    let Some(axum::Extension(serial)) = serial else {
        return Err(ApiError::new(ReasonCode::PEER_UNAUTHENTICATED, "no admitted certificate"));
    };
    if !binary(&headers, axum::http::header::CONTENT_TYPE) {
        return Err(ApiError::new(ReasonCode::INPUT_INVALID, format!("a submit stream is {BINARY_MEDIA_TYPE}")));
    }
    let open = OpenStream::count();
    let frames = body.into_data_stream().take_until(st.drain.started());
    let answers = writ_client::numbered::serve(
        frames,
        writ_api::frames::SUBMIT_PAYLOAD_BYTES_MAX,
        SUBMIT_STREAM_IN_FLIGHT_MAX,
        move |payload: &[u8]| {
            let submit = writ_api::decode::<StreamedSubmit>(payload).map_err(|e| e.to_string());
            let (st, identity, serial) = (st.clone(), identity.clone(), serial.clone());
            async move { streamed_submit(&st, &identity, &serial, submit).await }
        },
    );
    let chunks = answers.map(move |chunk| {
        let _counted = &open;
        Ok::<_, std::convert::Infallible>(Bytes::from(chunk))
    });
    Ok(([(axum::http::header::CONTENT_TYPE, BINARY_MEDIA_TYPE)], Body::from_stream(chunks)).into_response())
}

/// One submit of a stream, as [`submit_as`] decides it.
async fn streamed_submit(
    st: &NodeState,
    identity: &Identity,
    serial: &CertificateSerial,
    submit: Result<StreamedSubmit<'static>, String>,
) -> Result<writ_api::dto::SubmitResponse, Rejection> {
    metrics::counter!("writ_node_submits_total", "transport" => "stream").increment(1);
    if st.node.role_certificate_revoked(&serial.0) {
        let message = format!("the certificate {} of {identity} was revoked", serial.0);
        return Err(refused("client", ReasonCode::CREDENTIAL_RETIRED, message).0);
    }
    let submit = submit.map_err(|e| Rejection::new(ReasonCode::INPUT_INVALID, format!("undecodable submit: {e}")))?;
    let caller = submit.traceparent.as_deref().and_then(writ_api::trace::Parent::parse).map(|p| p.as_current(None));
    submit_as(st, identity, submit.request.into_owned(), false, caller).await.map_err(|e| e.0)
}

/// Counts a submit stream in `writ_node_submit_streams` while it is open.
struct OpenStream;

impl OpenStream {
    fn count() -> OpenStream {
        metrics::gauge!("writ_node_submit_streams").increment(1.0);
        OpenStream
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        metrics::gauge!("writ_node_submit_streams").decrement(1.0);
    }
}

async fn client_query(
    State(st): State<NodeState>,
    identity: Option<axum::Extension<Identity>>,
    ValidJson(req): ValidJson<QueryRequest>,
) -> Result<Response, ApiError> {
    let identity = admitted(identity)?;
    if !identity.role.may_query(&req.query) {
        return Err(forbidden(&identity, "run this query".into()));
    }
    Ok(Json(st.node.query_request(req).await?).into_response())
}

/// An edge met a token of a discovered issuer signed by a key the ledger does not hold: this
/// node fetches the issuer's keys again (at most once per `ISSUER_FETCH_INTERVAL_MIN`).
async fn client_issuer_refresh(
    State(st): State<NodeState>,
    ValidJson(req): ValidJson<writ_api::dto::IssuerRefreshRequest>,
) -> Result<Response, ApiError> {
    let revision = st.node.refresh_issuer(&req.issuer).await?;
    Ok(Json(writ_api::dto::IssuerRefreshed { revision }).into_response())
}

async fn client_read_index(State(st): State<NodeState>) -> Result<Response, ApiError> {
    Ok(Json(st.node.read_index().await?).into_response())
}

/// `?digest=false`: without the state digest (what the leader's version watch asks for).
#[derive(Deserialize)]
struct StatusQuery {
    digest: Option<bool>,
}

async fn client_status(State(st): State<NodeState>, Query(q): Query<StatusQuery>) -> Response {
    Json(st.node.status_view(q.digest.unwrap_or(true)).await).into_response()
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

/// `GET /client/watch?from=REV&stream=T&kind=K`: the watch stream ([`LedgerNode::watch`]) as
/// NDJSON, one [`WatchLine`](writ_api::dto::WatchLine) per line — or, for a caller that accepts
/// [`BINARY_MEDIA_TYPE`], as binary frames ([`WatchLine::frame`](writ_api::dto::WatchLine::frame)).
async fn client_watch(
    State(st): State<NodeState>,
    headers: HeaderMap,
    ValidQuery(filter): ValidQuery<WatchFilter>,
) -> Result<Response, ApiError> {
    if binary(&headers, axum::http::header::ACCEPT) {
        let frames = st.node.watch_frames(filter)?.take_until(st.drain.started());
        let body = Body::from_stream(frames.map(|f| f.map(Bytes::from).map_err(std::io::Error::other)));
        return Ok(([(axum::http::header::CONTENT_TYPE, BINARY_MEDIA_TYPE)], body).into_response());
    }
    let lines = st.node.watch(filter)?.take_until(st.drain.started());
    let body = Body::from_stream(lines.map(|l| {
        let mut v = serde_json::to_vec(&l).unwrap_or_default();
        v.push(b'\n');
        Ok::<_, std::io::Error>(Bytes::from(v))
    }));
    Ok(([(axum::http::header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

/// `GET /client/snapshot`: the projection followers load (`LedgerState::project`: no audit
/// index, so it does not grow with audit retention, and no inputs of operations that are no
/// longer live) at a linearizable point, versioned and bincode-encoded
/// ([`LedgerState::encode_versioned`](writ_api::state::LedgerState::encode_versioned)).
async fn client_snapshot(State(st): State<NodeState>) -> Result<Response, ApiError> {
    let mut state = st.node.linearized_state().await?;
    state.project();
    Ok(([(axum::http::header::CONTENT_TYPE, "application/octet-stream")], state.encode_versioned()).into_response())
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Most committed entries a node may still have to apply and call itself ready: a follower
/// that restarted (or a new one) reports "catching up" until it is within this many entries of
/// the commit index its leader last reported, so a rolling update waits for it before taking
/// the next node down. Under steady load a caught-up follower trails by a few in-flight entries.
pub const READY_APPLY_LAG_MAX: u64 = 64;

/// Whether a node serves (`/readyz`): healthy, not draining for a shutdown, a known leader, and
/// its state applied up to within [`READY_APPLY_LAG_MAX`] of the cluster's commit index. `Err`
/// says why not.
pub fn readiness(
    healthy: bool,
    draining: bool,
    leader: Option<u64>,
    applied: Option<u64>,
    committed: Option<u64>,
) -> Result<(), String> {
    if !healthy {
        return Err("the node stopped on a fatal storage error".into());
    }
    if draining {
        return Err("draining for a shutdown".into());
    }
    let (Some(_), Some(applied)) = (leader, applied) else {
        return Err("no leader or nothing applied yet".into());
    };
    let behind = committed.unwrap_or(0).saturating_sub(applied);
    if behind > READY_APPLY_LAG_MAX {
        return Err(format!("catching up: {behind} committed entries not applied yet"));
    }
    Ok(())
}

/// The commit index this node knows the cluster reached (the leader's report), else its own.
fn cluster_committed(m: &openraft::RaftMetrics<writ_raft_store::TypeConfig>) -> Option<u64> {
    m.cluster_committed.as_ref().or(m.local_committed.as_ref()).map(|l| l.index())
}

async fn readyz(State(st): State<NodeState>) -> Response {
    let m = st.node.raft.metrics().borrow_watched().clone();
    let applied = m.last_applied.as_ref().map(|l| l.index());
    match readiness(st.node.is_healthy(), st.drain.is_started(), m.current_leader, applied, cluster_committed(&m)) {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")).into_response(),
    }
}

async fn metrics_text(State(st): State<NodeState>) -> Response {
    let m = st.node.raft.metrics().borrow_watched().clone();
    metrics::gauge!("writ_raft_term").set(m.current_term as f64);
    metrics::gauge!("writ_raft_last_log_index").set(m.last_log_index.unwrap_or(0) as f64);
    let applied = m.last_applied.as_ref().map_or(0, |l| l.index());
    metrics::gauge!("writ_raft_last_applied_index").set(applied as f64);
    let lag = cluster_committed(&m).unwrap_or(0).saturating_sub(applied);
    metrics::gauge!("writ_raft_apply_lag_entries").set(lag as f64);
    metrics::gauge!("writ_raft_is_leader").set(if m.state == openraft::ServerState::Leader { 1.0 } else { 0.0 });
    for (part, bytes) in st.node.sm.rocksdb_memory() {
        metrics::gauge!("writ_rocksdb_memory_bytes", "part" => part).set(bytes as f64);
    }
    for (part, value) in st.node.sm.rocksdb_compaction() {
        metrics::gauge!("writ_rocksdb_compaction", "part" => part).set(value as f64);
    }
    // By tenant class: the tenant's audit mode, a bounded label (tenant ids are not).
    let mut counts = std::collections::BTreeMap::<(&str, OperationState), u64>::new();
    {
        let a = st.node.sm.read_async().await;
        // What the ledger holds, by kind: what retention keeps bounded (SPEC L9).
        for (kind, n) in writ_api::retention::record_counts(&a.state) {
            metrics::gauge!("writ_ledger_records", "kind" => kind).set(n as f64);
        }
        for (state, n) in writ_api::health::tools_by_health(&a.state, writ_client::now_ms()) {
            metrics::gauge!("writ_tools_by_health", "state" => state.as_str()).set(n as f64);
        }
        for (tenant, by_state) in &a.state.operations_by_state() {
            let class = a.state.tenants.get(tenant).map_or(AuditMode::Standard, |t| t.settings.audit_mode).as_str();
            for (state, n) in by_state {
                *counts.entry((class, *state)).or_default() += n;
            }
        }
    }
    for class in AuditMode::ALL.map(AuditMode::as_str) {
        for state in OperationState::ALL {
            let n = counts.get(&(class, state)).copied().unwrap_or(0);
            metrics::gauge!("writ_operations_by_state", "state" => state.as_str(), "tenant_class" => class)
                .set(n as f64);
        }
    }
    crate::observe::build_info("node");
    match &st.metrics {
        Some(h) => h.render().into_response(),
        None => (StatusCode::NOT_FOUND, "metrics recorder not installed\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_ready_only_once_caught_up_with_the_clusters_commits() {
        assert!(readiness(true, false, Some(1), Some(1_000), Some(1_000)).is_ok());
        assert!(
            readiness(true, false, Some(1), Some(1_000), Some(1_000 + READY_APPLY_LAG_MAX)).is_ok(),
            "in-flight entries"
        );
        let behind = readiness(true, false, Some(1), Some(10), Some(5_000)).expect_err("a restarted follower");
        assert!(behind.contains("catching up: 4990"), "{behind}");
        assert!(readiness(true, false, None, Some(10), Some(10)).is_err(), "no leader");
        assert!(readiness(true, false, Some(1), None, None).is_err(), "nothing applied");
        assert!(readiness(false, false, Some(1), Some(10), Some(10)).is_err(), "stopped on a fatal error");
        assert!(readiness(true, false, Some(1), Some(10), None).is_ok(), "no commit reported yet: its own");
        let draining = readiness(true, true, Some(1), Some(10), Some(10)).expect_err("a node shutting down");
        assert!(draining.contains("draining"), "{draining}");
    }
}

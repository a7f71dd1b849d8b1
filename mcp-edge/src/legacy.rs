//! The 2025 wire (protocol 2025-11-25, and 2025-06-18 / 2025-03-26, which differ from it only
//! in what the edge does not use) on the same `/mcp` as 2026-07-28: `initialize` opens a
//! session (`crate::session`), `Mcp-Session-Id` carries it, and every other request is turned
//! into the 2026-07-28 request it means — the session's version, capabilities, client info and
//! log level in `_meta` — and answered by the one request path (`crate::serve`). Governance is
//! therefore the same in both eras; only the framing differs:
//!
//! - what 2026-07-28 answers with input requests (MRTR) is asked as server requests
//!   (`elicitation/create`, `sampling/createMessage`, `roots/list`) on the call's event stream;
//!   the client's responses, POSTed with the session id, resume the call;
//! - `ping`, `logging/setLevel` and `resources/subscribe|unsubscribe` are answered here;
//! - the GET stream carries list changes (the 2026 listen stream, untagged) and updates of the
//!   session's subscribed resources; DELETE ends the session;
//! - JSON-RPC errors travel with HTTP 200 (the 2025 transport's framing), except the
//!   authentication and admission answers, which keep their status and challenge.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};
use writ_api::auth::Authority;
use writ_api::{ReasonCode, Rejection};
use writ_client::now_ms;

use crate::jsonrpc::{self, Request, RpcError};
use crate::serve::{self, Handled};
use crate::session::{self, Session, LEGACY_VERSIONS};
use crate::Edge;
use writ_api::session::McpSessionV1;

/// The session header of the 2025 wire.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// Methods only the 2026-07-28 wire has.
const MODERN_ONLY: &[&str] = &["server/discover", "subscriptions/listen", "tasks/get", "tasks/update", "tasks/cancel"];
/// Rounds of client input one call may ask for.
const INPUT_ROUNDS_MAX: usize = 8;
/// How long a call waits for the client's response to one of its requests.
pub const INPUT_WAIT: Duration = Duration::from_secs(300);
/// Server requests waiting for a client response on one replica.
pub const PENDING_MAX: usize = 4096;
/// Largest answer of the request path the adapter reads back (bytes).
const ANSWER_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Whether a POST speaks the 2025 wire: it carries a session, or it is an `initialize`
/// without the 2026 `_meta` (a 2026 `initialize` is an unknown method there).
pub fn is_legacy_post(headers: &HeaderMap, body: &[u8]) -> bool {
    if headers.contains_key(SESSION_HEADER) {
        return true;
    }
    // Only a body naming `initialize` can open a session: the 2026 path parses nothing twice.
    if !body.windows(10).any(|w| w == b"initialize") {
        return false;
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else { return false };
    v["method"] == "initialize" && v["params"]["_meta"].get(jsonrpc::META_PROTOCOL_VERSION).is_none()
}

/// One exchange of the 2025 wire, after authentication and admission.
pub(crate) struct Exchange<'a> {
    pub edge: &'a Arc<Edge>,
    pub headers: &'a HeaderMap,
    pub authority: &'a Authority,
    pub trace_id: &'a str,
    pub recorded: &'a AtomicBool,
}

/// What a POST was, for the audit and metrics: its method and id when it had them.
pub(crate) struct Posted {
    pub handled: Handled,
    pub method: Option<String>,
    pub id: Option<Value>,
    /// A notification or a client response, accepted: like a 2026 notification it is no
    /// request decision (a refused one is).
    pub quiet: bool,
    /// The client it came from, for its request decision.
    pub client: writ_api::audit::AuthorityChainV1,
}

fn refusal(status: StatusCode, reason: ReasonCode, message: &str, id: &Option<Value>) -> Handled {
    let r = Rejection::new(reason, message.to_string());
    let mut e = RpcError::rejected(&r).with_id(id);
    e.status = status;
    Handled::refused(e.into_response(), None, r)
}

fn session_not_found(id: &Option<Value>) -> Handled {
    refusal(
        StatusCode::NOT_FOUND,
        ReasonCode::SESSION_NOT_FOUND,
        "no such session for this caller (unknown, ended, expired, or opened with another credential): initialize again",
        id,
    )
}

/// Answers one POST of the 2025 wire.
pub(crate) async fn post(x: &Exchange<'_>, body: &[u8]) -> Posted {
    let decoded = match serde_json::from_slice::<Value>(body) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(RpcError::new(StatusCode::BAD_REQUEST, jsonrpc::INVALID_REQUEST, "batches are not supported")),
        Err(e) => Err(RpcError::new(StatusCode::BAD_REQUEST, jsonrpc::PARSE_ERROR, format!("invalid JSON: {e}"))),
    };
    let msg = match decoded {
        Ok(msg) => msg,
        Err(e) => {
            let r = Rejection::new(ReasonCode::INPUT_INVALID, e.message.clone());
            let handled = Handled::refused(e.into_response(), None, r);
            let client = crate::audit::client_of_headers(x.headers);
            return Posted { handled, method: None, id: None, quiet: false, client };
        }
    };
    let id = msg.get("id").filter(|v| !v.is_null()).cloned();
    let method = msg.get("method").and_then(Value::as_str).map(str::to_string);
    // The client it came from: what its `initialize` says, or its session's.
    let (handled, client) = match crate::header_value(x.headers, SESSION_HEADER) {
        None if method.as_deref() == Some("initialize") => {
            let params = &msg["params"];
            (initialize(x, &msg, &id), crate::audit::client(&params["clientInfo"], params["protocolVersion"].as_str()))
        }
        None => {
            let message = "Mcp-Session-Id is required: send initialize first";
            (refusal(StatusCode::BAD_REQUEST, ReasonCode::SESSION_INVALID, message, &id), Default::default())
        }
        Some(sid) => match session_of(x.edge, x.authority, x.headers, &sid) {
            None => (session_not_found(&id), Default::default()),
            Some((session, record)) => {
                let client = crate::audit::client(&session.client_info, Some(&session.version));
                (in_session(x, &session, &record, &msg, &id, method.as_deref()).await, client)
            }
        },
    };
    let quiet = (method.is_none() || id.is_none()) && handled.denied.is_none();
    Posted { handled, method, id, quiet, client }
}

/// The client of the session a request names (`initialize`'s `clientInfo` and the version it
/// negotiated); nothing when it names none of this caller's.
pub(crate) fn session_client(
    edge: &Edge,
    authority: &Authority,
    headers: &HeaderMap,
) -> writ_api::audit::AuthorityChainV1 {
    let session =
        crate::header_value(headers, SESSION_HEADER).and_then(|sid| session_of(edge, authority, headers, &sid));
    session.map(|(s, _)| crate::audit::client(&s.client_info, Some(&s.version))).unwrap_or_default()
}

/// The session a request names, if this caller opened it and it has not ended, with its record.
fn session_of(edge: &Edge, authority: &Authority, headers: &HeaderMap, sid: &str) -> Option<(Session, McpSessionV1)> {
    let s = session::open(&edge.config.seal_key, authority, crate::bearer(headers), sid, now_ms())?;
    let record = session::record(&edge.verifier, authority, &s);
    (!record.ended).then_some((s, record))
}

/// How long a change waits for this replica to follow the ledger past it (the next request
/// may come here).
const FOLLOW_WAIT: Duration = Duration::from_secs(5);

/// Records what the client changed of its session (`Command::SetSessionState`, the
/// principal's act under the request's credential), unless nothing changed; then waits for
/// this replica to hold it.
async fn change(
    edge: &Edge,
    authority: &Authority,
    headers: &HeaderMap,
    trace_id: &str,
    session: &Session,
    f: impl FnOnce(&mut McpSessionV1),
) -> Result<(), Rejection> {
    use writ_api::ledger::{Command, Outcome};
    let current = session::record(&edge.verifier, authority, session);
    let mut next = current.clone();
    f(&mut next);
    if next == current {
        return Ok(());
    }
    let set = Command::SetSessionState {
        tenant_id: authority.tenant_id.clone(),
        session_id: session.nonce.clone(),
        session: next,
    };
    let command = Command::OnBehalfOf { authority_ref: authority.reference(), command: Box::new(set) };
    let request = writ_api::dto::SubmitRequest::acting(trace_id, command, crate::credential(headers));
    let submitted = edge.ledger.submit(request).await?;
    match submitted.outcome {
        Outcome::Applied { events, .. } => {
            let revision = events.iter().map(|e| e.revision).max().unwrap_or(0);
            let mut revisions = edge.verifier.revisions();
            let _ = tokio::time::timeout(FOLLOW_WAIT, revisions.wait_for(|r| *r >= revision)).await;
            Ok(())
        }
        Outcome::Rejected { reason, message, .. } => Err(Rejection::new(reason, message)),
        _ => Err(Rejection::new(ReasonCode::INTERNAL, "unexpected ledger outcome")),
    }
}

/// A refused change: its reason's answer, in band.
fn change_refused(r: Rejection, id: &Option<Value>, name: Option<String>) -> Handled {
    let e = RpcError::rejected(&r).in_band().with_id(id);
    Handled::refused(e.into_response(), name, r)
}

async fn in_session(
    x: &Exchange<'_>,
    session: &Session,
    record: &McpSessionV1,
    msg: &Value,
    id: &Option<Value>,
    method: Option<&str>,
) -> Handled {
    if crate::header_value(x.headers, "mcp-protocol-version").is_some_and(|v| v != session.version) {
        let message = format!("MCP-Protocol-Version must be the session's version {}", session.version);
        return refusal(StatusCode::BAD_REQUEST, ReasonCode::PROTOCOL_VERSION_UNSUPPORTED, &message, id);
    }
    let ok = |result: Value| Handled::allowed(jsonrpc::result(id, result), None);
    match (method, id) {
        // The client's response to one of this session's server requests.
        (None, Some(answered)) => answer(x, session, answered, msg).await,
        (None, None) => refusal(StatusCode::BAD_REQUEST, ReasonCode::INPUT_INVALID, "not a JSON-RPC message", &None),
        // Notifications (`initialized`, `cancelled`, `roots/list_changed`) need no answer.
        (Some(_), None) => Handled::allowed(StatusCode::ACCEPTED.into_response(), None),
        (Some("initialize"), _) => {
            refusal(StatusCode::BAD_REQUEST, ReasonCode::SESSION_INVALID, "the session is already initialized", id)
        }
        (Some("ping"), _) => ok(json!({})),
        (Some("logging/setLevel"), _) => set_level(x, session, msg, id).await,
        (Some(m @ ("resources/subscribe" | "resources/unsubscribe")), _) => subscribe(x, session, msg, id, m).await,
        (Some(m), _) if MODERN_ONLY.contains(&m) || !crate::served(&x.edge.config, m) => {
            let e = RpcError::new(StatusCode::OK, jsonrpc::METHOD_NOT_FOUND, format!("method {m} is not served"));
            Handled::allowed(e.with_id(id).into_response(), None)
        }
        (Some(_), _) => bridge(x, session, record.log_level.as_deref(), msg).await,
    }
}

/// Header marking a client response one replica forwarded to another (never forwarded again).
const FORWARDED_HEADER: &str = "x-writ-forwarded";

/// What a server request's id is bound to: the session it was sent in.
fn request_binding(authority: &Authority, nonce: &str) -> crate::seal::Binding {
    crate::seal::Binding {
        tenant_id: authority.tenant_id.clone(),
        principal_id: authority.principal_id.clone(),
        purpose: format!("server request {nonce}"),
    }
}

/// A server request's id: sealed, naming the replica whose call waits for the response, so
/// that the replica the response lands on can hand it over (and no client can make a replica
/// call an address of its choosing).
fn request_id(edge: &Edge, authority: &Authority, nonce: &str) -> String {
    let data = json!({"r": uuid::Uuid::new_v4().to_string(), "p": edge.config.peer_url});
    crate::seal::seal(
        &edge.config.seal_key,
        &request_binding(authority, nonce),
        now_ms() + INPUT_WAIT.as_millis() as u64,
        data,
    )
}

/// A client response: to the call on this replica waiting for it, else forwarded to the
/// replica its id names.
async fn answer(x: &Exchange<'_>, session: &Session, answered: &Value, msg: &Value) -> Handled {
    if x.edge.pending.deliver(&session.nonce, answered, msg.clone()) {
        return Handled::allowed(StatusCode::ACCEPTED.into_response(), None);
    }
    let unknown = || {
        refusal(
            StatusCode::BAD_REQUEST,
            ReasonCode::SESSION_INVALID,
            "no request of this session waits for this response",
            &None,
        )
    };
    let key = &x.edge.config.seal_key;
    let Some(peer) = answered
        .as_str()
        .and_then(|id| crate::seal::open(key, &request_binding(x.authority, &session.nonce), now_ms(), id).ok())
        .and_then(|data| data["p"].as_str().map(str::to_string))
    else {
        return unknown();
    };
    if x.headers.contains_key(FORWARDED_HEADER) || Some(&peer) == x.edge.config.peer_url.as_ref() {
        return unknown();
    }
    let mut forward = x.edge.peers.post(&peer).header(FORWARDED_HEADER, "1").json(msg);
    for name in [header::AUTHORIZATION, header::HOST, header::ORIGIN] {
        if let Some(v) = x.headers.get(&name) {
            forward = forward.header(name, v.clone());
        }
    }
    for name in [SESSION_HEADER, "mcp-protocol-version"] {
        if let Some(v) = x.headers.get(name) {
            forward = forward.header(name, v.clone());
        }
    }
    match forward.send().await {
        Ok(r) if r.status() == StatusCode::ACCEPTED => Handled::allowed(StatusCode::ACCEPTED.into_response(), None),
        Ok(_) => unknown(),
        Err(e) => {
            tracing::info!(%peer, error = %e, "a client response could not be forwarded");
            let r = Rejection::new(
                ReasonCode::SESSION_PEER_UNREACHABLE,
                "the replica waiting for this response is unreachable",
            );
            let e = RpcError::rejected(&r);
            Handled::refused(e.into_response(), None, r)
        }
    }
}

/// The version an `initialize` asking for `requested` gets: the same one when served, the newest
/// 2025 version for an older dated one (the client then decides), none for anything else.
fn negotiate(requested: &str) -> Option<&'static str> {
    if let Some(v) = LEGACY_VERSIONS.iter().find(|v| **v == requested) {
        return Some(v);
    }
    let dated = requested.len() == 10
        && requested.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        });
    (dated && requested < LEGACY_VERSIONS[LEGACY_VERSIONS.len() - 1]).then_some(LEGACY_VERSIONS[0])
}

/// Every version `/mcp` serves, newest first.
pub fn supported_versions() -> Vec<&'static str> {
    std::iter::once(jsonrpc::PROTOCOL_VERSION).chain(LEGACY_VERSIONS.iter().copied()).collect()
}

fn initialize(x: &Exchange<'_>, msg: &Value, id: &Option<Value>) -> Handled {
    let params = &msg["params"];
    let requested = params["protocolVersion"].as_str().unwrap_or_default();
    let Some(version) = negotiate(requested) else {
        let r = Rejection::new(ReasonCode::PROTOCOL_VERSION_UNSUPPORTED, "Unsupported protocol version");
        let e = RpcError::new(StatusCode::BAD_REQUEST, jsonrpc::INVALID_PARAMS, "Unsupported protocol version")
            .with_data(json!({"supported": supported_versions(), "requested": requested,
                              "reason": ReasonCode::PROTOCOL_VERSION_UNSUPPORTED}));
        return Handled::refused(e.with_id(id).into_response(), None, r);
    };
    let key = &x.edge.config.seal_key;
    let bearer = crate::bearer(x.headers);
    let opened =
        session::open_new(key, x.authority, bearer, version, &params["capabilities"], &params["clientInfo"], now_ms());
    let (sid, _) = match opened {
        Ok(s) => s,
        Err(session::Refused::Oversized(what)) => {
            let message = format!("{what} must be an object of at most the documented size");
            return refusal(StatusCode::BAD_REQUEST, ReasonCode::SESSION_INVALID, &message, id);
        }
    };
    let mut capabilities = json!({"tools": {"listChanged": true}, "resources": {"subscribe": true},
                                  "logging": {}});
    if x.edge.config.fixtures_tenant.is_some() {
        capabilities["prompts"] = json!({"listChanged": true});
        capabilities["completions"] = json!({});
    }
    let result = json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": crate::surfaces::server_info(),
        "instructions": "Writ: tools are your tenant's catalog actions your token's scopes allow.",
    });
    let mut response = jsonrpc::result(id, result);
    if let Ok(v) = HeaderValue::from_str(&sid) {
        response.headers_mut().insert(SESSION_HEADER, v);
    }
    Handled::allowed(response, None)
}

async fn set_level(x: &Exchange<'_>, session: &Session, msg: &Value, id: &Option<Value>) -> Handled {
    let level = msg["params"]["level"].as_str().unwrap_or_default();
    if !crate::reply::LEVELS.contains(&level) {
        let e = RpcError::reason(ReasonCode::INPUT_INVALID, format!("level must be one of {:?}", crate::reply::LEVELS));
        return Handled::allowed(e.in_band().with_id(id).into_response(), None);
    }
    let set = |r: &mut McpSessionV1| r.log_level = Some(level.to_string());
    match change(x.edge, x.authority, x.headers, x.trace_id, session, set).await {
        Ok(()) => Handled::allowed(jsonrpc::result(id, json!({})), None),
        Err(r) => change_refused(r, id, None),
    }
}

async fn subscribe(x: &Exchange<'_>, session: &Session, msg: &Value, id: &Option<Value>, method: &str) -> Handled {
    let uri = msg["params"]["uri"].as_str().unwrap_or_default().to_string();
    if let Err(e) = x.authority.require(serve::RESOURCES_SCOPE) {
        let r = crate::challenge(
            &x.edge.config,
            x.headers,
            StatusCode::FORBIDDEN,
            e.reason,
            &e.message,
            serve::RESOURCES_SCOPE,
        );
        return Handled::refused(r, Some(uri), e);
    }
    let subscribing = method == "resources/subscribe";
    let edit = |r: &mut McpSessionV1| match (r.subscriptions.binary_search(&uri), subscribing) {
        (Err(at), true) => r.subscriptions.insert(at, uri.clone()),
        (Ok(at), false) => {
            r.subscriptions.remove(at);
        }
        _ => {}
    };
    // The ledger checks the bounds (URI length, subscriptions per session).
    match change(x.edge, x.authority, x.headers, x.trace_id, session, edit).await {
        Ok(()) => Handled::allowed(jsonrpc::result(id, json!({})), Some(uri)),
        Err(r) => change_refused(r, id, Some(uri)),
    }
}

/// The 2026-07-28 request a 2025 request means: the session's context in `_meta`.
fn modern(session: &Session, log_level: Option<&str>, msg: &Value) -> Request {
    let mut params = msg.get("params").filter(|p| p.is_object()).cloned().unwrap_or_else(|| json!({}));
    let mut meta = params.get("_meta").and_then(Value::as_object).cloned().unwrap_or_default();
    meta.insert(jsonrpc::META_PROTOCOL_VERSION.into(), json!(jsonrpc::PROTOCOL_VERSION));
    meta.insert(jsonrpc::META_CLIENT_CAPABILITIES.into(), session.capabilities.clone());
    if session.client_info.is_object() {
        meta.insert("io.modelcontextprotocol/clientInfo".into(), session.client_info.clone());
    }
    if let Some(level) = log_level {
        meta.insert(jsonrpc::META_LOG_LEVEL.into(), json!(level));
    }
    params["_meta"] = Value::Object(meta);
    Request {
        jsonrpc: "2.0".into(),
        id: msg.get("id").cloned(),
        method: msg["method"].as_str().unwrap_or_default().to_string(),
        params: Some(params),
        session_version: Some(session.version.clone()),
    }
}

/// Runs one 2026-07-28 request through the request path.
async fn round(x: &Exchange<'_>, req: &Request) -> Handled {
    let call = serve::Call {
        edge: x.edge,
        req,
        headers: x.headers,
        authority: x.authority,
        trace_id: x.trace_id,
        recorded: x.recorded,
    };
    serve::handle(call).await
}

fn is_json(r: &Response) -> bool {
    r.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"))
}

/// `{requests, state}` of an input-required result message.
fn input_required(msg: &Value) -> Option<(Map<String, Value>, Value)> {
    let result = msg.get("result")?;
    (result["resultType"] == "input_required").then(|| {
        let requests = result["inputRequests"].as_object().cloned().unwrap_or_default();
        (requests, result.get("requestState").cloned().unwrap_or(Value::Null))
    })
}

/// A JSON-RPC error of the request path with the 2025 framing: in a 200 answer, except the
/// authentication and admission answers (401, 403, 413, 429, 431, 503 …), which keep theirs.
fn framed(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    if matches!(parts.status, StatusCode::BAD_REQUEST | StatusCode::NOT_FOUND | StatusCode::CONFLICT) {
        parts.status = StatusCode::OK;
    }
    Response::from_parts(parts, body)
}

/// A request the request path answers: JSON when it needed nothing from the client, else an
/// event stream carrying its notifications, the client requests it needs answered, and its
/// final response.
async fn bridge(x: &Exchange<'_>, session: &Session, log_level: Option<&str>, msg: &Value) -> Handled {
    let req = modern(session, log_level, msg);
    let handled = round(x, &req).await;
    let Handled { response, name, denied, effectful } = handled;
    // Only these methods ask for input (MRTR); every other JSON answer passes unread.
    let may_ask = matches!(req.method.as_str(), "tools/call" | "prompts/get" | "resources/read");
    if is_json(&response) && !(may_ask && response.status() == StatusCode::OK) {
        return Handled { response: framed(response), name, denied, effectful };
    }
    if is_json(&response) {
        let (parts, body) = response.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, ANSWER_BYTES_MAX).await else {
            let e = RpcError::reason(ReasonCode::INTERNAL, "the answer could not be read").with_id(&req.id);
            return Handled { response: e.into_response(), name, denied, effectful };
        };
        let asks = bytes.windows(16).any(|w| w == b"\"input_required\"");
        let parsed = if asks { serde_json::from_slice(&bytes).unwrap_or(Value::Null) } else { Value::Null };
        if input_required(&parsed).is_none() {
            return Handled { response: Response::from_parts(parts, Body::from(bytes)), name, denied, effectful };
        }
        let response = stream(x, session, req, First::Message(parsed));
        return Handled { response, name, denied, effectful };
    }
    let response = stream(x, session, req, First::Stream(response));
    Handled { response, name, denied, effectful }
}

enum First {
    Message(Value),
    Stream(Response),
}

/// The event stream of a call: the first answer's messages, then for each round of input the
/// server requests, the client's responses (through [`Pending`]), and the next round's answer.
fn stream(x: &Exchange<'_>, session: &Session, req: Request, first: First) -> Response {
    if !crate::reply::accepts_sse(x.headers) {
        let e = RpcError::reason(
            ReasonCode::CLIENT_CAPABILITY_MISSING,
            "this call streams (notifications or client input): the client must accept text/event-stream",
        );
        return e.in_band().with_id(&req.id).into_response();
    }
    let (tx, rx) = mpsc::channel::<Value>(64);
    let owned = Owned {
        edge: x.edge.clone(),
        headers: x.headers.clone(),
        authority: x.authority.clone(),
        trace_id: x.trace_id.to_string(),
    };
    let nonce = session.nonce.clone();
    tokio::spawn(async move {
        let outcome = converse(&owned, &nonce, req, first, &tx).await;
        if let Some(last) = outcome {
            let _ = tx.send(last).await;
        }
    });
    let events = futures::stream::unfold(rx, |mut rx| async move {
        let msg = rx.recv().await?;
        Some((Ok::<_, std::convert::Infallible>(Event::default().event("message").data(msg.to_string())), rx))
    });
    let mut response = Sse::new(events).into_response();
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// What a streaming call keeps of its exchange.
struct Owned {
    edge: Arc<Edge>,
    headers: HeaderMap,
    authority: Authority,
    trace_id: String,
}

/// Drives a call through its rounds; the final response message (or `None` when the client
/// went away).
async fn converse(o: &Owned, nonce: &str, mut req: Request, first: First, tx: &mpsc::Sender<Value>) -> Option<Value> {
    let mut answer = first;
    for rounds in 0.. {
        let last = match answer {
            First::Message(m) => m,
            First::Stream(r) => forward(r, tx).await?,
        };
        let Some((requests, state)) = input_required(&last) else { return Some(last) };
        if rounds == INPUT_ROUNDS_MAX {
            let e = RpcError::reason(ReasonCode::INPUT_INVALID, "the call asked for input too many times");
            return Some(jsonrpc::response(&req.id, Err(&e)));
        }
        let responses = match ask(&o.edge, &o.authority, nonce, &requests, tx).await {
            Ok(r) => r,
            Err(Asked::Gone) => return None,
            Err(Asked::Failed(e)) => return Some(jsonrpc::response(&req.id, Err(&e))),
        };
        let params = req.params.get_or_insert_with(|| json!({}));
        params["inputResponses"] = Value::Object(responses);
        params["requestState"] = state;
        let recorded = AtomicBool::new(false);
        let x = Exchange {
            edge: &o.edge,
            headers: &o.headers,
            authority: &o.authority,
            trace_id: &o.trace_id,
            recorded: &recorded,
        };
        let handled = round(&x, &req).await;
        let verdict = handled.verdict(crate::audit::client_of(&req, &o.headers));
        if let Err(e) =
            crate::record(&o.edge, &o.authority, &o.headers, &o.trace_id, &req.method, &verdict, &recorded).await
        {
            return Some(jsonrpc::response(&req.id, Err(&RpcError::rejected(&e))));
        }
        answer = First::Stream(handled.response);
    }
    None
}

/// Sends every message of an answer but the last (its notifications) to the client; the last.
async fn forward(response: Response, tx: &mpsc::Sender<Value>) -> Option<Value> {
    if is_json(&response) {
        let bytes = axum::body::to_bytes(response.into_body(), ANSWER_BYTES_MAX).await.ok()?;
        return serde_json::from_slice(&bytes).ok();
    }
    let mut messages = Box::pin(sse_messages(response));
    while let Some(msg) = messages.next().await {
        if msg.get("method").is_none() {
            return Some(msg);
        }
        tx.send(msg).await.ok()?;
    }
    None
}

enum Asked {
    /// The client closed the stream.
    Gone,
    Failed(RpcError),
}

/// Sends `requests` as server requests and waits for each response: the results by key.
async fn ask(
    edge: &Edge,
    authority: &Authority,
    nonce: &str,
    requests: &Map<String, Value>,
    tx: &mpsc::Sender<Value>,
) -> Result<Map<String, Value>, Asked> {
    let mut waiting = Vec::new();
    for (key, ask) in requests {
        let id = request_id(edge, authority, nonce);
        let Some(wait) = edge.pending.register(nonce, &id) else {
            let e = RpcError::reason(ReasonCode::QUOTA_EXCEEDED, "too many calls wait for client input on this edge");
            return Err(Asked::Failed(e));
        };
        let request = json!({"jsonrpc": "2.0", "id": id, "method": ask["method"], "params": ask["params"]});
        tx.send(request).await.map_err(|_| Asked::Gone)?;
        waiting.push((key.clone(), wait));
    }
    let mut out = Map::new();
    for (key, wait) in waiting {
        let answered = tokio::select! {
            _ = tx.closed() => return Err(Asked::Gone),
            r = tokio::time::timeout(INPUT_WAIT, wait.rx) => r,
        };
        let msg = match answered {
            Ok(Ok(msg)) => msg,
            _ => {
                let e = RpcError::reason(ReasonCode::INPUT_INVALID, "the client did not answer the server's request");
                return Err(Asked::Failed(e));
            }
        };
        match msg.get("result") {
            Some(result) => {
                out.insert(key, result.clone());
            }
            None => {
                let message = msg["error"]["message"].as_str().unwrap_or("the client refused the request");
                let e = RpcError::reason(ReasonCode::INPUT_INVALID, format!("the client refused: {message}"));
                return Err(Asked::Failed(e));
            }
        }
    }
    Ok(out)
}

/// Server requests of this replica waiting for the client's response, by session nonce and
/// request id (bounded by [`PENDING_MAX`]).
#[derive(Default, Clone)]
pub(crate) struct Pending(Arc<Mutex<Waiters>>);

/// Senders of the waiting calls, by (session nonce, request id).
type Waiters = HashMap<(String, String), oneshot::Sender<Value>>;

/// One waiting server request; dropping it forgets the request.
struct Waiting {
    rx: oneshot::Receiver<Value>,
    _guard: PendingGuard,
}

struct PendingGuard {
    pending: Pending,
    key: (String, String),
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.pending.lock().remove(&self.key);
    }
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, Waiters> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn register(&self, nonce: &str, id: &str) -> Option<Waiting> {
        let mut map = self.lock();
        if map.len() >= PENDING_MAX {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        let key = (nonce.to_string(), id.to_string());
        map.insert(key.clone(), tx);
        Some(Waiting { rx, _guard: PendingGuard { pending: self.clone(), key } })
    }

    /// Hands the client's response to the request waiting for it; false when none waits.
    fn deliver(&self, nonce: &str, id: &Value, msg: Value) -> bool {
        let Some(id) = id.as_str() else { return false };
        match self.lock().remove(&(nonce.to_string(), id.to_string())) {
            Some(tx) => tx.send(msg).is_ok(),
            None => false,
        }
    }
}

/// GET with a session: the session's stream of list changes (the 2026 listen stream, without
/// its acknowledgment and subscription tags). Without a session: 405, as on the 2026 wire.
pub(crate) async fn get_stream(
    edge: &Arc<Edge>,
    headers: &HeaderMap,
    authority: &Authority,
    trace_id: &str,
) -> Handled {
    let Some(sid) = crate::header_value(headers, SESSION_HEADER) else {
        return Handled::allowed(crate::not_allowed_response(), None);
    };
    let Some((session, record)) = session_of(edge, authority, headers, &sid) else {
        return session_not_found(&None);
    };
    if !crate::reply::accepts_sse(headers) {
        return Handled::allowed(StatusCode::NOT_ACCEPTABLE.into_response(), None);
    }
    let listen = json!({"jsonrpc": "2.0", "id": format!("session-{}", &session.nonce[..8]), "method": "subscriptions/listen",
                        "params": {"notifications": {"toolsListChanged": true, "promptsListChanged": true}}});
    let recorded = AtomicBool::new(false);
    let x = Exchange { edge, headers, authority, trace_id, recorded: &recorded };
    let req = modern(&session, record.log_level.as_deref(), &listen);
    let handled = round(&x, &req).await;
    if is_json(&handled.response) {
        return handled; // refused (scope or the stream cap)
    }
    let Handled { response, name, denied, effectful } = handled;
    let changes = sse_messages(response).filter_map(|mut msg| async move {
        if msg["method"] == "notifications/subscriptions/acknowledged" {
            return None;
        }
        if let Some(params) = msg.get_mut("params").and_then(Value::as_object_mut) {
            params.remove("_meta");
        }
        Some(msg)
    });
    // The stream lasts as long as the listen stream does (its cap, deadline, authority).
    let lasting = changes.map(Some).chain(futures::stream::once(async { None }));
    let updates = resource_updates(edge.clone(), authority.clone(), session).map(Some);
    let frames = futures::stream::select(lasting, updates)
        .take_while(|m| std::future::ready(m.is_some()))
        .filter_map(|m| async move { m })
        .map(|msg| Ok::<_, std::convert::Infallible>(Event::default().event("message").data(msg.to_string())));
    let response = Sse::new(frames).keep_alive(KeepAlive::default()).into_response();
    Handled { response, name, denied, effectful }
}

/// Where a subscribed resource is: the ledger revision of an operation's last change, or the
/// ledger time of a work item's — for the resources that change and that the caller may read.
fn resource_mark(state: &writ_api::state::LedgerState, a: &Authority, uri: &str) -> Option<Mark> {
    if serve::resource_scope(uri).is_some_and(|scope| a.require(scope).is_err()) {
        return None;
    }
    if let Some(id) = uri.strip_prefix(serve::OPERATIONS_URI).filter(|id| !id.contains('/')) {
        return state.operations.get(&a.tenant_id)?.get(id).map(|op| Mark::Revision(op.revision));
    }
    let id = uri.strip_prefix(serve::WORK_URI)?;
    state.work(&a.tenant_id, id).map(|w| Mark::Time(w.updated_at_ms))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    Revision(u64),
    Time(u64),
}

impl Mark {
    /// Whether a resource first seen at this mark changed since a look at ledger `revision`
    /// and time `clock_ms` (a change in the look's millisecond counts: at least once).
    fn after(self, (revision, clock_ms): (u64, u64)) -> bool {
        match self {
            Mark::Revision(r) => r > revision,
            Mark::Time(t) => t >= clock_ms,
        }
    }
}

/// `notifications/resources/updated` for the session's subscribed resources as the ledger
/// moves (the subscriptions read from the session's record each time); ends with the session.
/// A resource is announced when its mark moves; one subscribed since the previous look, when
/// it changed since that look ([`Mark::after`]).
fn resource_updates(edge: Arc<Edge>, authority: Authority, session: Session) -> impl futures::Stream<Item = Value> {
    type Seen = std::collections::BTreeMap<String, Option<Mark>>;
    let marks = |s: &writ_api::state::LedgerState, a: &Authority, subs: &[String]| -> Seen {
        subs.iter().map(|u| (u.clone(), resource_mark(s, a, u))).collect()
    };
    // Changes from the moment the stream opens are announced.
    let record = session::record(&edge.verifier, &authority, &session);
    let start = edge.verifier.with_state(|s| ((s.revision, s.clock_ms), marks(s, &authority, &record.subscriptions)));
    let revisions = edge.verifier.revisions();
    let state = (start, revisions, Vec::<Value>::new());
    futures::stream::unfold(state, move |((mut looked, mut seen), mut revisions, mut queued)| {
        let (edge, authority, session) = (edge.clone(), authority.clone(), session.clone());
        async move {
            loop {
                if let Some(msg) = queued.pop() {
                    return Some((msg, ((looked, seen), revisions, queued)));
                }
                revisions.changed().await.ok()?;
                let record = session::record(&edge.verifier, &authority, &session);
                if record.ended {
                    return None;
                }
                let (now, current) = edge
                    .verifier
                    .with_state(|s| ((s.revision, s.clock_ms), marks(s, &authority, &record.subscriptions)));
                for (uri, mark) in &current {
                    let moved = match seen.get(uri) {
                        Some(before) => before != mark,
                        None => mark.is_some_and(|m| m.after(looked)),
                    };
                    if moved {
                        queued.push(jsonrpc::notification("notifications/resources/updated", json!({"uri": uri})));
                    }
                }
                (looked, seen) = (now, current);
            }
        }
    })
}

/// The JSON-RPC messages of an event-stream answer.
fn sse_messages(response: Response) -> impl futures::Stream<Item = Value> {
    let body = response.into_body().into_data_stream();
    futures::stream::unfold((body, String::new()), |(mut body, mut buf)| async move {
        loop {
            if let Some(end) = buf.find("\n\n") {
                let event: String = buf.drain(..end + 2).collect();
                let data: String = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect::<Vec<_>>()
                    .join("\n");
                if let Ok(msg) = serde_json::from_str::<Value>(&data) {
                    return Some((msg, (body, buf)));
                }
                continue;
            }
            let chunk = body.next().await?.ok()?;
            buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
}

/// DELETE with a session: ends it on every replica for every later request. Without a
/// session: 405.
pub(crate) async fn delete(edge: &Edge, headers: &HeaderMap, authority: &Authority, trace_id: &str) -> Handled {
    let Some(sid) = crate::header_value(headers, SESSION_HEADER) else {
        return Handled::allowed(crate::not_allowed_response(), None);
    };
    let Some((session, _)) = session_of(edge, authority, headers, &sid) else { return session_not_found(&None) };
    match change(edge, authority, headers, trace_id, &session, |r| r.ended = true).await {
        Ok(()) => Handled::allowed(StatusCode::NO_CONTENT.into_response(), None),
        Err(r) => {
            let e = RpcError::rejected(&r);
            Handled::refused(e.into_response(), None, r)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_negotiate_to_a_served_one_or_none() {
        assert_eq!(negotiate("2025-11-25"), Some("2025-11-25"));
        assert_eq!(negotiate("2025-06-18"), Some("2025-06-18"));
        assert_eq!(negotiate("2025-03-26"), Some("2025-03-26"));
        assert_eq!(negotiate("2024-11-05"), Some("2025-11-25"), "an older client is offered the newest");
        assert_eq!(negotiate("2026-07-28"), None, "the 2026 wire has no initialize");
        assert_eq!(negotiate("v999.0.0"), None);
        assert_eq!(negotiate(""), None);
    }

    #[test]
    fn only_sessions_and_2025_initialize_are_the_2025_wire() {
        let h = HeaderMap::new();
        assert!(is_legacy_post(&h, br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#));
        let modern = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert!(!is_legacy_post(&h, modern));
        assert!(!is_legacy_post(&h, br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#));
        let mut s = HeaderMap::new();
        s.insert(SESSION_HEADER, HeaderValue::from_static("x"));
        assert!(is_legacy_post(&s, br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#));
    }
}

//! The executor endpoint (SPEC E7, X2): site executors connect over mutual TLS with the
//! certificate they received at enrollment. The TLS layer (in `node`) accepts only certificates
//! chaining to a tenant's executor CA ([`ExecutorGate::roots`]) and hands the leaf certificate
//! to this router as an [`ExecutorPeer`]; here the certificate's fingerprint maps it to
//! (tenant, site, executor) through the edge's replica of the ledger — unknown, revoked or
//! expired certificates are refused, and every refusal is audited to the tenant concerned.
//! An executor renews its certificate here too (`/executor/v1/renew`): the gate checks who it
//! is and forwards the request to a node's admin API, which checks the proof of the current key
//! and issues (the edge is trusted with nothing in that exchange).
//!
//! Any edge replica serves any executor: the dispatch stream is fed by the replica (it offers
//! the operations reserved for the executor's devices), the executor's start claims the
//! operation (the ledger gives it to the first eligible executor that starts it: no separate
//! dispatch entry), and the attempt calls are ledger commands carrying the fencing token and the
//! call's audit decision, answered with the operation as the command left it (no read after the
//! write).

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use tokio::sync::broadcast::error::RecvError;
use writ_api::audit::{RequestDecisionV1, RequestDecisionV2};
use writ_api::dto::{ErrorBody, SubmitRequest};
use writ_api::executor::{
    AttemptCall, AttemptRequest, AttemptVerb, Dispatch, DispatchFrame, EvidenceUpload, ForwardedRenewal,
    OperationStatus, RefuseRequest, RenewRequest, ReportRequest, ADMIN_RENEW_PATH, CALLS_PATH, CALL_PAYLOAD_BYTES_MAX,
    DISPATCH_PATH, HEARTBEAT_MS, OPERATIONS_PATH, RENEW_PATH,
};
use writ_api::ledger::{Command, DispatchChange, Outcome};
use writ_api::operation::{Operation, OperationState};
use writ_api::state::LedgerState;
use writ_api::{ReasonCode, Rejection};
use writ_client::Ledger;
use writ_client::{now_ms, Verifier};

use crate::audit::AuditSink;

/// After how long an operation still waiting in `reserved` is offered again on a stream that
/// offered it (the executor may have dropped it: a start that could not reach the ledger).
const REOFFER_AFTER: Duration = Duration::from_millis(writ_api::operation::DISPATCH_START_MS);

/// The client certificate (DER) of the TLS connection a request arrived on.
#[derive(Debug, Clone)]
pub struct ExecutorPeer(pub Arc<Vec<u8>>);

/// An executor as its certificate identifies it.
#[derive(Debug, Clone)]
struct Identity {
    tenant_id: String,
    executor_id: String,
    site_id: String,
    device_ids: BTreeSet<String>,
}

/// Forwards a request to a node's admin API: `(path, JSON body)` → the node's answer (or a
/// reason-coded refusal when no node answers).
pub type AdminForward = Arc<dyn Fn(&'static str, Bytes) -> futures::future::BoxFuture<'static, Response> + Send + Sync>;

struct Gate {
    ledger: Arc<dyn Ledger>,
    verifier: Verifier,
    audit: AuditSink,
    /// Handshakes refused at the TLS layer in the current window, by the (existing) tenant the
    /// certificate claimed.
    tls_refusals: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
    /// Open dispatch streams per executor.
    streams: crate::caps::StreamCaps,
    /// Where certificate renewals go (none: this edge does not renew).
    admin: Option<AdminForward>,
    /// This edge's id, under which it records executors' connections.
    edge_id: String,
    /// What this edge says of executors' connections, submitted in order by one task.
    presence: tokio::sync::mpsc::Sender<Command>,
}

/// Connection records waiting to be submitted; beyond, one is dropped (logged): the next
/// confirmation says it again.
const PRESENCE_QUEUED_MAX: usize = 1024;

impl Gate {
    /// The tenant's operation as the ledger holds it (linearizable): what an executor's status
    /// ask and its act on a finished operation are checked against.
    async fn ledger_operation(&self, tenant_id: &str, operation_id: &str) -> Result<Operation, Rejection> {
        let q = writ_api::dto::Query::GetOperation {
            tenant_id: tenant_id.to_string(),
            operation_id: operation_id.to_string(),
        };
        writ_client::query_as::<Operation>(self.ledger.as_ref(), q, Default::default()).await
    }

    /// Says that `who` is (still) connected to this edge, or no longer.
    fn say_presence(&self, who: &Identity, connected: bool) {
        let command = Command::SetExecutorPresence {
            tenant_id: who.tenant_id.clone(),
            executor_id: who.executor_id.clone(),
            edge_id: self.edge_id.clone(),
            connected,
        };
        if self.presence.try_send(command).is_err() {
            tracing::warn!(executor = %who.executor_id, connected, "connection record dropped: the queue is full");
        }
    }
}

/// Submits connection records in order, each retried a few times (logged when it gives up).
async fn submit_presence(ledger: Arc<dyn Ledger>, mut records: tokio::sync::mpsc::Receiver<Command>) {
    while let Some(command) = records.recv().await {
        for attempt in 0..5u32 {
            let req = SubmitRequest::new(uuid::Uuid::new_v4().to_string(), command.clone());
            match ledger.submit(req).await {
                Ok(_) => break,
                Err(e) if attempt == 4 => tracing::warn!(error = %e.message, "recording a connection failed"),
                Err(_) => tokio::time::sleep(Duration::from_millis(200 << attempt)).await,
            }
        }
    }
}

/// Default window over which handshakes refused at the TLS layer are audited: one aggregate
/// record per claimed tenant and window, never one per handshake (SPEC S4: an unauthenticated
/// party cannot flood a tenant's trail; each refusal is still counted in
/// `writ_edge_executor_refused_total{stage="tls"}`).
pub const TLS_REFUSAL_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

/// Every `window` ([`TLS_REFUSAL_WINDOW`] by default), records each claimed tenant's refused
/// handshakes as one aggregate decision; ends with the gate.
async fn aggregate_tls_refusals(gate: std::sync::Weak<Gate>, window: std::time::Duration) {
    let mut tick = tokio::time::interval(window);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(gate) = gate.upgrade() else { return };
        let counts = std::mem::take(&mut *gate.tls_refusals.lock().unwrap_or_else(|e| e.into_inner()));
        for (tenant_id, n) in counts {
            let what = Some(format!("{n} handshakes refused at TLS in {} s", window.as_secs()));
            let d =
                decision("unauthenticated".into(), "executor/connect", what, Some(ReasonCode::EXECUTOR_CERT_REFUSED));
            gate.audit.buffer(&tenant_id, d, None).await;
        }
    }
}

/// The executor endpoint of one edge.
#[derive(Clone)]
pub struct ExecutorGate {
    inner: Arc<Gate>,
}

/// A refusal with the tenant it concerns (when one is known).
struct Refusal {
    tenant_id: Option<String>,
    rejection: Rejection,
}

/// `response` with the trace id of its audit record, so an executor's operator can find it.
fn traced(mut response: Response, trace_id: &str) -> Response {
    if let Ok(v) = axum::http::HeaderValue::from_str(trace_id) {
        response.headers_mut().insert(writ_client::TRACE_HEADER, v);
    }
    response
}

/// Serves a request as part of the executor's trace when it names one (`traceparent`): what
/// the edge then submits for it continues the attempt's span.
async fn continue_trace(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    match writ_client::trace::caller(req.headers()) {
        Some(cx) => writ_client::trace::within(&cx, next.run(req)).await,
        None => next.run(req).await,
    }
}

fn error_response(r: &Rejection) -> Response {
    let (status, body) = writ_client::http_answer(r);
    (status, Json(body)).into_response()
}

/// The tenant a certificate claims in its `urn:writ:executor:<tenant>:…` SAN. Used only to
/// route the audit record of a refused certificate to the tenant it pretends to belong to;
/// never for authority (a refused certificate proves nothing).
pub fn claimed_tenant(cert_der: &[u8]) -> Option<String> {
    const PREFIX: &[u8] = b"urn:writ:executor:";
    let at = cert_der.windows(PREFIX.len()).position(|w| w == PREFIX)? + PREFIX.len();
    let rest = &cert_der[at..];
    let end = rest.iter().position(|b| *b == b':')?;
    let tenant = std::str::from_utf8(&rest[..end]).ok()?;
    (!tenant.is_empty() && tenant.len() <= 64).then(|| tenant.to_string())
}

fn identify(state: &LedgerState, cert_der: &[u8], now: u64) -> Result<Identity, Refusal> {
    let fingerprint = writ_api::sha256_hex(cert_der);
    let refused = |tenant_id: Option<String>, reason, message: &str| Refusal {
        tenant_id,
        rejection: Rejection::new(reason, message.to_string()),
    };
    let Some((tenant_id, executor_id)) = state.executor_certs.get(&fingerprint) else {
        return Err(refused(
            claimed_tenant(cert_der).filter(|t| state.tenants.contains_key(t)),
            ReasonCode::EXECUTOR_CERT_REFUSED,
            "this certificate was not issued by a Writ enrollment",
        ));
    };
    let executor = state.executors.get(tenant_id).and_then(|m| m.get(executor_id));
    let Some(executor) = executor else {
        return Err(refused(Some(tenant_id.clone()), ReasonCode::EXECUTOR_CERT_REFUSED, "unknown executor"));
    };
    // Revocation ends every certificate of the executor: the current one and a replaced one.
    if executor.revoked_at_ms.is_some() {
        return Err(refused(Some(tenant_id.clone()), ReasonCode::EXECUTOR_REVOKED, "this executor was revoked"));
    }
    // A replaced certificate (renewal keeps it mapped) is good until it expires.
    let not_after_ms = if executor.cert.fingerprint == fingerprint {
        executor.cert.not_after_ms
    } else {
        certificate_not_after_ms(cert_der).unwrap_or(0)
    };
    if not_after_ms <= now {
        return Err(refused(Some(tenant_id.clone()), ReasonCode::EXECUTOR_CERT_REFUSED, "the certificate has expired"));
    }
    if let Some(closed) = state.tenants.get(tenant_id).and_then(|t| t.closed()) {
        return Err(refused(Some(tenant_id.clone()), closed.reason, &closed.message));
    }
    Ok(Identity {
        tenant_id: tenant_id.clone(),
        executor_id: executor_id.clone(),
        site_id: executor.site_id.clone(),
        device_ids: executor.device_ids.clone(),
    })
}

/// The `notAfter` of a DER certificate, in ms since the epoch.
fn certificate_not_after_ms(cert_der: &[u8]) -> Option<u64> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert_der).ok()?;
    u64::try_from(cert.validity().not_after.timestamp()).ok().map(|s| s.saturating_mul(1000))
}

/// The trace id an operation was submitted under (a fresh one for an unknown operation). Every
/// command about the operation carries it — its claim, start and report, and their audit
/// records and answers — so one id follows it from the agent's call to the executor's report.
fn operation_trace(s: &LedgerState, tenant_id: &str, operation_id: &str) -> String {
    s.operations
        .get(tenant_id)
        .and_then(|m| m.get(operation_id))
        .map(|op| op.spec.trace_id.clone())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

/// An executor's request decision: no MCP client to name (the ledger fills the executor's kind,
/// and the operation and attempt a command with it is about).
fn decision(principal_id: String, method: &str, name: Option<String>, reason: Option<ReasonCode>) -> RequestDecisionV2 {
    let decision = RequestDecisionV1 {
        trace_id: uuid::Uuid::new_v4().to_string(),
        principal_id,
        token_id: None,
        parent_token_id: None,
        method: method.to_string(),
        name,
        outcome: if reason.is_some() { "denied" } else { "allowed" }.to_string(),
        reason,
    };
    RequestDecisionV2 { decision, authority: Default::default() }
}

/// Whether `op` is the executor's to act on: dispatched to it, or waiting in `reserved` for one
/// of its devices (any executor of the tenant, when it drives none) — its start claims it.
fn offered_to(op: &Operation, who: &Identity) -> bool {
    op.executor_id.as_deref() == Some(who.executor_id.as_str())
        || (op.state == OperationState::Reserved
            && op.spec.device_id.as_ref().is_none_or(|d| who.device_ids.contains(d)))
}

/// Whether `op` waits for the executor: reserved for one of its devices, or dispatched to it
/// (a log written before starts claimed) and not started.
fn waits_for(op: &Operation, who: &Identity) -> bool {
    matches!(op.state, OperationState::Reserved | OperationState::Dispatched) && offered_to(op, who)
}

/// Everything that waits for `who` ([`waits_for`]), from the state's indexes (reserved
/// operations of the tenant, operations dispatched to this executor), never from a scan of
/// every live operation.
fn offers<'a>(state: &'a LedgerState, who: &Identity) -> Vec<&'a Operation> {
    let Some(ops) = state.operations.get(&who.tenant_id) else { return Vec::new() };
    let reserved = state.index.reserved.get(&who.tenant_id).into_iter().flatten();
    let dispatched = state.index.dispatched.get(&who.tenant_id).and_then(|m| m.get(&who.executor_id));
    reserved
        .chain(dispatched.into_iter().flatten())
        .filter_map(|id| ops.get(id))
        .filter(|op| waits_for(op, who))
        .collect()
}

impl ExecutorGate {
    /// A gate of edge `edge_id` whose TLS refusals are audited once per claimed tenant and
    /// `refusal_window`, and which forwards certificate renewals through `admin` (none: it does
    /// not renew).
    pub fn new(
        ledger: Arc<dyn Ledger>,
        verifier: Verifier,
        audit: AuditSink,
        (edge_id, refusal_window): (String, std::time::Duration),
        admin: Option<AdminForward>,
    ) -> ExecutorGate {
        let (presence, records) = tokio::sync::mpsc::channel(PRESENCE_QUEUED_MAX);
        tokio::spawn(submit_presence(ledger.clone(), records));
        let inner = Arc::new(Gate {
            ledger,
            verifier,
            audit,
            tls_refusals: Default::default(),
            streams: Default::default(),
            admin,
            edge_id,
            presence,
        });
        let window = refusal_window.max(std::time::Duration::from_secs(1));
        tokio::spawn(aggregate_tls_refusals(Arc::downgrade(&inner), window));
        ExecutorGate { inner }
    }

    /// DER certificates of every tenant's executor CAs: the roots client certificates must
    /// chain to (the mapping then requires the certificate's recorded fingerprint).
    pub fn roots(&self) -> Vec<Vec<u8>> {
        self.inner
            .verifier
            .with_state(|s| s.executor_cas.values().flat_map(|m| m.values()).map(|ca| ca.cert_der.clone()).collect())
    }

    /// A client certificate refused by the TLS layer (`error` says why): counted, and audited
    /// to the tenant it claims (when that tenant exists) only as that window's aggregate.
    pub fn refused_at_tls(&self, cert_der: &[u8], error: &str) {
        let tenant = claimed_tenant(cert_der).filter(|t| self.inner.verifier.with_state(|s| s.tenants.contains_key(t)));
        tracing::debug!(tenant = ?tenant, %error, "executor certificate refused at the TLS layer");
        metrics::counter!("writ_edge_executor_refused_total", "stage" => "tls").increment(1);
        if let Some(tenant_id) = tenant {
            *self.inner.tls_refusals.lock().unwrap_or_else(|e| e.into_inner()).entry(tenant_id).or_default() += 1;
        }
    }

    /// The executor API (requests carry an [`ExecutorPeer`] extension).
    pub fn router(&self) -> Router {
        Router::new()
            .route(RENEW_PATH, post(renew_certificate))
            .route(DISPATCH_PATH, get(dispatch_stream))
            .route(&format!("{OPERATIONS_PATH}/{{id}}"), get(status))
            .route(&format!("{OPERATIONS_PATH}/{{id}}/{{verb}}"), post(attempt))
            .route(CALLS_PATH, post(call_stream))
            .with_state(self.clone())
            .layer(axum::middleware::from_fn(continue_trace))
    }

    /// Maps the peer to an executor, the refusal answered as an HTTP error.
    async fn identify(&self, peer: &ExecutorPeer, method: &str) -> Result<Identity, Response> {
        self.identified(peer, method).map_err(|r| error_response(&r))
    }

    /// Maps the peer to an executor; a refusal is audited (once per denial window).
    fn identified(&self, peer: &ExecutorPeer, method: &str) -> Result<Identity, Rejection> {
        if !self.inner.verifier.is_current() {
            return Err(writ_client::unavailable("the edge's ledger replica is not current"));
        }
        let found = self.inner.verifier.with_state(|s| identify(s, &peer.0, now_ms()));
        found.map_err(|refusal| {
            metrics::counter!("writ_edge_executor_refused_total", "stage" => "mapping").increment(1);
            let r = refusal.rejection;
            if let Some(tenant_id) = refusal.tenant_id {
                let who = format!("executor-cert:{}", &writ_api::sha256_hex(&peer.0)[..16]);
                let d = decision(who, method, None, Some(r.reason));
                let audit = self.inner.audit.clone();
                // Repeats of one refusal within the denial window are counted, not committed.
                tokio::spawn(async move {
                    if let Err(e) = audit.commit_denial(&tenant_id, d, None).await {
                        tracing::warn!(error = %e, "executor refusal not audited");
                    }
                });
            }
            r
        })
    }

    /// Submits an attempt command of `who` for `operation_id` (offered to it) with the call's
    /// audit decision: the operation's status as the command left it, or the refusal (audited
    /// too), and the trace the call was audited under.
    async fn act(
        &self,
        who: &Identity,
        operation_id: &str,
        method: &str,
        command: Command,
    ) -> (Result<OperationStatus, Rejection>, String) {
        let (offered, trace_id) = self.offered(who, operation_id).await;
        let principal = format!("executor:{}", who.executor_id);
        let mut d = decision(principal, method, Some(operation_id.to_string()), None);
        d.decision.trace_id = trace_id.clone();
        let submitted = if offered {
            self.submit(crate::audit::with_decision(d.clone(), command), &trace_id).await
        } else {
            // Another tenant's operation, or one not offered to this executor, does not exist
            // for it.
            Err(Rejection::new(ReasonCode::OPERATION_NOT_FOUND, "no such operation for you"))
        };
        let answer = match submitted {
            // The ledger recorded the decision with the command, allowed or refused.
            Ok(Ok(op)) => Ok(OperationStatus::from(&op)),
            Ok(Err(refused)) => Err(refused),
            Err(e) => {
                d.decision.outcome = "denied".into();
                d.decision.reason = Some(e.reason);
                match self.inner.audit.commit_denial(&who.tenant_id, d, None).await {
                    Ok(()) => Err(e),
                    Err(fail) => Err(fail),
                }
            }
        };
        (answer, trace_id)
    }

    /// One attempt call of the executor `peer`, checked as a request of its own would be: who
    /// the certificate is now, then the call's command.
    async fn call(
        &self,
        peer: &ExecutorPeer,
        verb: AttemptVerb,
        id: &str,
        body: &[u8],
    ) -> (Result<OperationStatus, Rejection>, String) {
        let who = match self.identified(peer, verb.method()) {
            Ok(who) => who,
            Err(r) => return (Err(r), String::new()),
        };
        match attempt_command(verb, &who, id.to_string(), body) {
            Ok(command) => self.act(&who, id, verb.method(), command).await,
            Err(r) => (Err(r), String::new()),
        }
    }

    /// Whether `operation_id` was offered to `who`, and the trace it was submitted under: from
    /// the replica while the operation is live; once it finished (a replica holds live
    /// operations only: a late or repeated report), from the ledger, which decides the act.
    async fn offered(&self, who: &Identity, operation_id: &str) -> (bool, String) {
        let held = self.inner.verifier.with_state(|s| {
            let op = s.operations.get(&who.tenant_id).and_then(|m| m.get(operation_id))?;
            Some((offered_to(op, who), operation_trace(s, &who.tenant_id, operation_id)))
        });
        if let Some(held) = held {
            return held;
        }
        let fresh = || uuid::Uuid::new_v4().to_string();
        match self.inner.ledger_operation(&who.tenant_id, operation_id).await {
            Ok(op) => (offered_to(&op, who), Some(op.spec.trace_id).filter(|t| !t.is_empty()).unwrap_or_else(fresh)),
            Err(_) => (false, fresh()),
        }
    }

    /// Submits `command`: the ledger's answer (the operation, or its refusal), or why there is
    /// none.
    async fn submit(&self, command: Command, trace_id: &str) -> Result<Result<Operation, Rejection>, Rejection> {
        let submitted = self.inner.ledger.submit(SubmitRequest::new(trace_id.to_string(), command)).await?;
        Ok(match submitted.outcome {
            Outcome::Rejected { reason, message, .. } => Err(Rejection::new(reason, message)),
            Outcome::Applied { operation: Some(op), .. } => Ok(*op),
            _ => Err(Rejection::new(ReasonCode::INTERNAL, "the ledger answered without the operation")),
        })
    }
}

async fn status(
    State(g): State<ExecutorGate>,
    Extension(peer): Extension<ExecutorPeer>,
    Path(id): Path<String>,
) -> Response {
    let who = match g.identify(&peer, "executor/status").await {
        Ok(w) => w,
        Err(r) => return r,
    };
    // Read from the ledger (linearizable), not the replica: an executor asks after an uncertain
    // start, and a replica that has not yet seen the start would answer "not started" — the
    // executor would then never attempt (nor report) what the ledger recorded as started. (A
    // replica holds live operations only, so a finished one is not there to check either.)
    let not_found = || error_response(&Rejection::new(ReasonCode::OPERATION_NOT_FOUND, "no such operation for you"));
    match g.inner.ledger_operation(&who.tenant_id, &id).await {
        Ok(op) if offered_to(&op, &who) => Json(OperationStatus::from(&op)).into_response(),
        Ok(_) => not_found(),
        Err(e) => error_response(&e),
    }
}

/// `POST …/operations/{id}/{verb}`: one attempt call (an unknown verb is not found).
async fn attempt(
    State(g): State<ExecutorGate>,
    Extension(peer): Extension<ExecutorPeer>,
    Path((id, verb)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let Some(verb) = AttemptVerb::from_segment(&verb) else { return StatusCode::NOT_FOUND.into_response() };
    metrics::counter!("writ_edge_executor_calls_total", "transport" => "request").increment(1);
    let (answer, trace_id) = g.call(&peer, verb, &id, &body).await;
    let response = match answer {
        Ok(status) => Json(status).into_response(),
        Err(r) => error_response(&r),
    };
    traced(response, &trace_id)
}

/// Most calls of one call stream in flight: beyond, the edge reads no more of it until one is
/// answered.
const CALLS_IN_FLIGHT_MAX: usize = 256;

/// `POST /executor/v1/calls`: the executor's attempt calls as numbered frames over one
/// exchange, each checked and answered as a request of its own would be (the certificate is
/// identified again for each: the exchange outlives a revocation), answers ready together in
/// one write.
async fn call_stream(State(g): State<ExecutorGate>, Extension(peer): Extension<ExecutorPeer>, body: Body) -> Response {
    if let Err(r) = g.identify(&peer, "executor/calls").await {
        return r;
    }
    let answers = writ_client::numbered::serve(
        body.into_data_stream(),
        CALL_PAYLOAD_BYTES_MAX,
        CALLS_IN_FLIGHT_MAX,
        move |payload: &[u8]| {
            let call = writ_api::decode::<AttemptCall>(payload);
            let (g, peer) = (g.clone(), peer.clone());
            async move {
                metrics::counter!("writ_edge_executor_calls_total", "transport" => "stream").increment(1);
                let call =
                    call.map_err(|e| Rejection::new(ReasonCode::INPUT_INVALID, format!("undecodable call: {e}")))?;
                let work = g.call(&peer, call.verb, &call.operation_id, &call.body);
                let parent = call.traceparent.as_deref().and_then(writ_api::trace::Parent::parse);
                match parent {
                    Some(p) => writ_client::trace::within(&p.as_current(None), work).await.0,
                    None => work.await.0,
                }
            }
        },
    );
    let chunks = answers.map(|c| Ok::<_, Infallible>(Bytes::from(c)));
    ([(header::CONTENT_TYPE, writ_api::dto::BINARY_MEDIA_TYPE)], Body::from_stream(chunks)).into_response()
}

/// The command an attempt call makes from its JSON body; a blob travels on as its bytes
/// (decoded here, once, not on every replica).
fn attempt_command(verb: AttemptVerb, who: &Identity, operation_id: String, body: &[u8]) -> Result<Command, Rejection> {
    fn parsed<B: DeserializeOwned>(body: &[u8]) -> Result<B, Rejection> {
        serde_json::from_slice(body).map_err(|e| Rejection::new(ReasonCode::INPUT_INVALID, e.to_string()))
    }
    let (tenant_id, executor_id) = (who.tenant_id.clone(), who.executor_id.clone());
    let command = match verb {
        AttemptVerb::Start => {
            let b: AttemptRequest = parsed(body)?;
            let (fencing_token, lease_ms) = (b.fencing_token, b.lease_ms);
            Command::StartAttempt { tenant_id, operation_id, executor_id, fencing_token, lease_ms }
        }
        AttemptVerb::Renew => {
            let b: AttemptRequest = parsed(body)?;
            let (fencing_token, lease_ms) = (b.fencing_token, b.lease_ms);
            Command::RenewAttemptLease { tenant_id, operation_id, fencing_token, lease_ms }
        }
        AttemptVerb::Report => {
            let b: ReportRequest = parsed(body)?;
            let (fencing_token, outcome) = (b.fencing_token, b.outcome);
            match (b.content, b.evidence) {
                (Some(content), Some(evidence)) => {
                    Command::ReportAttemptV2 { tenant_id, operation_id, fencing_token, outcome, evidence, content }
                }
                (_, evidence) => Command::ReportAttempt { tenant_id, operation_id, fencing_token, outcome, evidence },
            }
        }
        AttemptVerb::Refuse => {
            let b: RefuseRequest = parsed(body)?;
            let fencing_token = b.fencing_token;
            match b.code {
                Some(reason) => Command::RefuseDispatchV2 {
                    tenant_id,
                    operation_id,
                    executor_id,
                    fencing_token,
                    reason,
                    message: b.reason,
                },
                None => {
                    Command::RefuseDispatch { tenant_id, operation_id, executor_id, fencing_token, reason: b.reason }
                }
            }
        }
        AttemptVerb::Evidence => {
            let b: EvidenceUpload = parsed(body)?;
            Command::StoreEvidence {
                tenant_id,
                operation_id,
                mime_type: b.mime_type,
                content_hash: b.content_hash,
                content_base64: b.content_base64,
                by: writ_api::evidence::Uploader::Executor { executor_id },
            }
        }
    };
    command.with_blob_bytes()
}

/// `POST /executor/v1/renew`: the executor's current certificate (this connection's) and its
/// request go to a node's admin API, which checks the proof and issues; the answer comes back
/// as the node gave it, and the decision is audited.
async fn renew_certificate(
    State(g): State<ExecutorGate>,
    Extension(peer): Extension<ExecutorPeer>,
    body: Bytes,
) -> Response {
    const METHOD: &str = "executor/renew_certificate";
    let who = match g.identify(&peer, METHOD).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let principal = format!("executor:{}", who.executor_id);
    // A CSR, a time and a signature: the node bounds the PEM, the edge the whole body.
    let bound = 2 * writ_api::executor::RENEW_PEM_MAX_BYTES;
    let parsed = if body.len() > bound {
        Err(format!("a renewal is at most {bound} bytes"))
    } else {
        serde_json::from_slice::<RenewRequest>(&body).map_err(|e| e.to_string())
    };
    let forwarded = match parsed {
        Err(e) => Err(Rejection::new(ReasonCode::INPUT_INVALID, e)),
        Ok(renewal) => match &g.inner.admin {
            None => Err(Rejection::new(ReasonCode::EXECUTOR_UNAVAILABLE, "this edge does not renew certificates")),
            Some(admin) => {
                let request = ForwardedRenewal { certificate: writ_api::pem::encode("CERTIFICATE", &peer.0), renewal };
                match serde_json::to_vec(&request) {
                    Ok(bytes) => Ok(admin(ADMIN_RENEW_PATH, Bytes::from(bytes)).await),
                    Err(e) => Err(Rejection::new(ReasonCode::INTERNAL, e.to_string())),
                }
            }
        },
    };
    let (response, reason) = match forwarded {
        Err(r) => (error_response(&r), Some(r.reason)),
        Ok(r) if r.status().is_success() => (r, None),
        Ok(r) => {
            // The node's refusal goes back as it is; its reason is audited.
            let status = r.status();
            let bytes = axum::body::to_bytes(r.into_body(), 64 * 1024).await.unwrap_or_default();
            let reason = serde_json::from_slice::<ErrorBody>(&bytes).map(|b| b.reason).unwrap_or(ReasonCode::INTERNAL);
            ((status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(), Some(reason))
        }
    };
    let d = decision(principal, METHOD, None, reason);
    match g.inner.audit.commit(&who.tenant_id, d, None).await {
        Ok(()) => response,
        Err(e) => error_response(&e),
    }
}

/// `GET /executor/v1/dispatch`: NDJSON frames until the executor leaves, its authority lapses
/// or the edge loses the ledger.
async fn dispatch_stream(State(g): State<ExecutorGate>, Extension(peer): Extension<ExecutorPeer>) -> Response {
    let who = match g.identify(&peer, "executor/dispatch").await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let key = format!("{}/{}", who.tenant_id, who.executor_id);
    let max = crate::caps::DISPATCH_STREAMS_PER_EXECUTOR;
    let Some(permit) = g.inner.streams.try_acquire(key, max) else {
        let r = Rejection::new(ReasonCode::QUOTA_EXCEEDED, format!("at most {max} open dispatch streams per executor"));
        let d = decision(format!("executor:{}", who.executor_id), "executor/dispatch", None, Some(r.reason));
        g.inner.audit.buffer(&who.tenant_id, d, None).await;
        return error_response(&r);
    };
    let d = decision(format!("executor:{}", who.executor_id), "executor/dispatch", None, None);
    g.inner.audit.buffer(&who.tenant_id, d, None).await;
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        // The executor's slot is held as long as the stream is fed.
        metrics::gauge!("writ_edge_dispatch_streams_open").increment(1.0);
        let key = format!("{}/{}", who.tenant_id, who.executor_id);
        feed(g.clone(), peer, &who, tx).await;
        drop(permit);
        if g.inner.streams.open(&key) == 0 {
            g.inner.say_presence(&who, false);
        }
        metrics::gauge!("writ_edge_dispatch_streams_open").decrement(1.0);
    });
    let body =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx)) });
    Response::builder()
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .header(header::CACHE_CONTROL, "no-store")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn line(frame: &DispatchFrame) -> Bytes {
    let mut text = serde_json::to_vec(frame).unwrap_or_default();
    text.push(b'\n');
    Bytes::from(text)
}

/// The dispatch loop of one stream: offer what the executor can take (once per stream, again
/// after [`REOFFER_AFTER`] while it still waits; a reconnect offers everything still waiting),
/// heartbeat, and end when the executor's certificate stops being accepted or the replica goes
/// stale. Offering writes nothing: the executor's start claims. Driven by the replica's
/// dispatch changes: an event about one operation looks at that operation only; everything is
/// looked at when the stream opens, on each heartbeat, after a change to the tenant's executors
/// or a snapshot, and when the stream fell behind the changes.
async fn feed(g: ExecutorGate, peer: ExecutorPeer, who: &Identity, tx: tokio::sync::mpsc::Sender<Bytes>) {
    let verifier = &g.inner.verifier;
    // Subscribed before the first look, so no change falls between the two.
    let mut changes = verifier.dispatch_changes();
    let hello = DispatchFrame::Hello {
        executor_id: who.executor_id.clone(),
        tenant_id: who.tenant_id.clone(),
        site_id: who.site_id.clone(),
        now_ms: now_ms(),
    };
    if tx.send(line(&hello)).await.is_err() {
        return;
    }
    g.inner.say_presence(who, true);
    let confirm_every = Duration::from_millis(writ_api::device::PRESENCE_CONFIRM_MS);
    let mut confirmed = Instant::now();
    // Offered on this stream, and when.
    let mut offered: BTreeMap<String, Instant> = BTreeMap::new();
    let mut look = Look { everything: true, touched: BTreeSet::new() };
    let mut tick = tokio::time::interval(Duration::from_millis(HEARTBEAT_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is now
    loop {
        if look.everything || !look.touched.is_empty() {
            let checked = verifier.with_state(|s| {
                identify(s, &peer.0, now_ms())?;
                Ok::<_, Refusal>(look.offers(s, who, &mut offered))
            });
            look = Look { everything: false, touched: BTreeSet::new() };
            let end = match (&checked, verifier.is_current()) {
                (_, false) => Some(writ_client::unavailable("the edge lost the ledger; reconnect")),
                (Err(refusal), _) => Some(refusal.rejection.clone()),
                (Ok(_), true) => None,
            };
            if let Some(r) = end {
                let _ = tx.send(line(&DispatchFrame::End { reason: r.reason.to_string(), message: r.message })).await;
                return;
            }
            let Ok(due) = checked else { return };
            for dispatch in due {
                let frame = DispatchFrame::Dispatch { dispatch, now_ms: now_ms() };
                if tx.send(line(&frame)).await.is_err() {
                    return;
                }
            }
        }
        tokio::select! {
            change = changes.recv() => if !look.take(who, change) { return },
            _ = tick.tick() => {
                look.everything = true;
                if confirmed.elapsed() >= confirm_every {
                    g.inner.say_presence(who, true);
                    confirmed = Instant::now();
                }
                if tx.send(line(&DispatchFrame::Heartbeat { now_ms: now_ms() })).await.is_err() {
                    return;
                }
            }
            _ = tx.closed() => return,
        }
        // A burst of changes is one look.
        loop {
            match changes.try_recv() {
                Err(tokio::sync::broadcast::error::TryRecvError::Empty) => break,
                Err(tokio::sync::broadcast::error::TryRecvError::Closed) => return,
                Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => look.everything = true,
                Ok(change) => {
                    look.take(who, Ok(change));
                }
            }
        }
    }
}

/// What a dispatch feed looks at next.
struct Look {
    everything: bool,
    /// Operations of the executor's tenant that folded events touched.
    touched: BTreeSet<String>,
}

impl Look {
    /// Notes a dispatch change; false when the changes ended (the replica is gone).
    fn take(&mut self, who: &Identity, change: Result<DispatchChange, RecvError>) -> bool {
        match change {
            Ok(DispatchChange::Operation { tenant_id, operation_id }) => {
                if tenant_id == who.tenant_id {
                    self.touched.insert(operation_id);
                }
            }
            Ok(DispatchChange::Tenant { tenant_id }) => self.everything |= tenant_id == who.tenant_id,
            Ok(DispatchChange::All) | Err(RecvError::Lagged(_)) => self.everything = true,
            Err(RecvError::Closed) => return false,
        }
        true
    }

    /// What to offer now, and what `offered` forgets: everything that waits for the executor,
    /// or only the touched operations.
    fn offers(&self, s: &LedgerState, who: &Identity, offered: &mut BTreeMap<String, Instant>) -> Vec<Dispatch> {
        let now = Instant::now();
        if self.everything {
            let ops = offers(s, who);
            let live: BTreeSet<&str> = ops.iter().map(|op| op.spec.operation_id.as_str()).collect();
            offered.retain(|id, _| live.contains(id.as_str()));
            return ops.into_iter().filter_map(|op| offer(s, who, op, offered, now)).collect();
        }
        let ops = s.operations.get(&who.tenant_id);
        let mut due = Vec::new();
        for id in &self.touched {
            match ops.and_then(|m| m.get(id)).filter(|op| waits_for(op, who)) {
                Some(op) => due.extend(offer(s, who, op, offered, now)),
                None => {
                    offered.remove(id);
                }
            }
        }
        due
    }
}

/// `op`'s dispatch frame, unless this stream offered it less than [`REOFFER_AFTER`] ago.
fn offer(
    s: &LedgerState,
    who: &Identity,
    op: &Operation,
    offered: &mut BTreeMap<String, Instant>,
    now: Instant,
) -> Option<Dispatch> {
    let id = &op.spec.operation_id;
    if offered.get(id).is_some_and(|at| now.duration_since(*at) < REOFFER_AFTER) {
        return None;
    }
    if s.upstream_operation(&who.tenant_id, id).is_some() {
        return None; // an edge's to perform by calling its upstream (executors' claims are refused)
    }
    if offered.insert(id.clone(), now).is_none() {
        // First offered on this stream: how long it waited since it became offerable.
        let waited_ms = now_ms().saturating_sub(op.updated_at_ms);
        metrics::histogram!("writ_edge_dispatch_lag_seconds").record(waited_ms as f64 / 1000.0);
    }
    let name = op.spec.device_id.as_ref().and_then(|d| s.device(&who.tenant_id, d)).map(|d| d.name.clone());
    let action =
        s.catalog(&who.tenant_id, None).and_then(|c| c.catalog.actions.iter().find(|a| a.id == op.spec.action));
    let read = action.is_some_and(|a| a.execution == writ_api::catalog::Execution::Read);
    Some(Dispatch::of(op, name, read))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claimed_tenant_comes_from_the_san_uri() {
        let mut der = b"\x30\x82junk".to_vec();
        der.extend_from_slice(b"urn:writ:executor:t-abc:s-1:x-9\x30");
        assert_eq!(claimed_tenant(&der).as_deref(), Some("t-abc"));
        assert_eq!(claimed_tenant(b"no san here"), None);
        assert_eq!(claimed_tenant(b"urn:writ:executor::s:x"), None);
    }

    fn op(id: &str, state: OperationState, device: Option<&str>, executor: Option<&str>) -> Operation {
        Operation {
            tenant_id: "t".into(),
            spec: writ_api::operation::OperationSpecV1 {
                operation_id: id.into(),
                principal_id: "p".into(),
                authority_ref: "j".into(),
                action: "move".into(),
                payload_hash: "00".repeat(32),
                input: "{}".into(),
                idempotency_key: id.into(),
                deadline_ms: 10_000,
                cost_units: 1,
                cost_ceiling: None,
                device_id: device.map(str::to_string),
                work_ref: None,
                preconditions: Default::default(),
                trace_id: "tr".into(),
                input_requests: Default::default(),
            },
            state,
            executor_id: executor.map(str::to_string),
            fencing_token: device.map(|_| 1),
            attempts: 0,
            lease_expires_at_ms: None,
            evidence: Vec::new(),
            observations: Vec::new(),
            answers: Default::default(),
            cancel_requested: false,
            cause: String::new(),
            created_at_ms: 0,
            updated_at_ms: 0,
            revision: 1,
        }
    }

    fn state_of(ops: Vec<Operation>) -> LedgerState {
        let mut s = LedgerState::default();
        for o in ops {
            s.operations.entry("t".into()).or_default().insert(o.spec.operation_id.clone(), o);
        }
        s.rebuild_index();
        s
    }

    fn ids(d: Vec<Dispatch>) -> Vec<String> {
        d.into_iter().map(|d| d.operation_id).collect()
    }

    /// A dispatch feed's look (issue 17, the incremental feeds): everything offers exactly what
    /// waits for the executor, from the indexes; a touched operation is offered when it waits
    /// and forgotten when it stops waiting; nothing is offered twice within `REOFFER_AFTER`;
    /// other tenants' changes are ignored, and a tenant change, a snapshot or a lag looks at
    /// everything again.
    #[test]
    fn a_feed_offers_what_waits_for_its_executor_and_only_that() {
        use OperationState::*;
        let who = Identity {
            tenant_id: "t".into(),
            executor_id: "x".into(),
            site_id: "s".into(),
            device_ids: ["press".to_string()].into(),
        };
        let mut s = state_of(vec![
            op("mine", Reserved, Some("press"), None),
            op("deviceless", Reserved, None, None),
            op("other-device", Reserved, Some("arm"), None),
            op("dispatched-to-me", Dispatched, None, Some("x")),
            op("dispatched-elsewhere", Dispatched, None, Some("y")),
            op("running", Attempting, None, Some("x")),
            op("for-an-edge", Reserved, None, None),
        ]);
        // An upstream operation waits for the edge that performs it, never for an executor.
        s.upstream_operations.entry("t".into()).or_default().insert("for-an-edge".into(), "shop/order".into());
        let mut offered = BTreeMap::new();
        let everything = Look { everything: true, touched: BTreeSet::new() };
        assert_eq!(ids(everything.offers(&s, &who, &mut offered)), ["deviceless", "mine", "dispatched-to-me"]);
        assert!(everything.offers(&s, &who, &mut offered).is_empty(), "not offered again within REOFFER_AFTER");

        // Incremental: only what was touched; one that stopped waiting is forgotten.
        s.operations.get_mut("t").unwrap().get_mut("mine").unwrap().state = Attempting;
        s.operations.get_mut("t").unwrap().insert("new".into(), op("new", Reserved, Some("press"), None));
        s.rebuild_index();
        let mut look = Look { everything: false, touched: BTreeSet::new() };
        for id in ["mine", "new", "other-device"] {
            let change = DispatchChange::Operation { tenant_id: "t".into(), operation_id: id.into() };
            assert!(look.take(&who, Ok(change)));
        }
        let other_tenant = DispatchChange::Operation { tenant_id: "u".into(), operation_id: "theirs".into() };
        assert!(look.take(&who, Ok(other_tenant)));
        assert!(!look.touched.contains("theirs") && !look.everything, "another tenant's change is not ours");
        assert_eq!(ids(look.offers(&s, &who, &mut offered)), ["new"]);
        assert!(!offered.contains_key("mine"), "a started operation is forgotten");

        // What makes a feed look at everything again; a closed feed ends.
        for change in
            [Ok(DispatchChange::Tenant { tenant_id: "t".into() }), Ok(DispatchChange::All), Err(RecvError::Lagged(3))]
        {
            let mut look = Look { everything: false, touched: BTreeSet::new() };
            assert!(look.take(&who, change) && look.everything);
        }
        let mut look = Look { everything: false, touched: BTreeSet::new() };
        assert!(!look.take(&who, Err(RecvError::Closed)));
        let mut look = Look { everything: false, touched: BTreeSet::new() };
        assert!(look.take(&who, Ok(DispatchChange::Tenant { tenant_id: "u".into() })) && !look.everything);
    }
}

//! Calls to tenants' upstream MCP servers (`writ_api::upstream`): a catalog action whose
//! execution is `{"upstream": "<upstream>/<tool>"}` is answered by that upstream tool, called
//! only while it is pinned. Its arguments passed the action's schema in `serve` and pass the
//! pinned tool's input schema here; its result must fit `UPSTREAM_RESULT_BYTES_MAX` and the
//! pinned and declared output schemas.
//!
//! Each (edge, tenant, upstream) has a fuse: [`FUSE_FAILURES`] consecutive failures open it;
//! while open, calls fail fast with UPSTREAM_UNAVAILABLE; after a jittered, doubling backoff
//! one call goes through as a half-open probe, and its success closes the fuse; a new
//! configuration of the upstream closes it at once. Opening and closing are recorded in the
//! ledger (`Command::SetUpstreamFuse`), so `writ admin upstream show` lists every edge's fuse.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use writ_api::catalog::CatalogActionV1;
use writ_api::dto::SubmitRequest;
use writ_api::ledger::{Command, Outcome, EDGE_PERFORMER_PREFIX};
use writ_api::operation::{AttemptOutcome, EvidenceV1, Operation, OperationState};
use writ_api::upstream::{
    parse_target, FuseV1, UpstreamSpecV1, UpstreamToolV1, FUSE_BACKOFF_MAX_MS, FUSE_BACKOFF_MIN_MS, FUSE_FAILURES,
};
use writ_api::{ReasonCode, Rejection};
use writ_client::upstream::{Connection, UpstreamError};

/// Compiled pinned schemas kept at most (then the cache starts over).
const SCHEMAS_MAX: usize = 1024;
/// Attempts of a call to a tool its upstream marks read-only and idempotent (one retry).
const RETRY_SAFE_ATTEMPTS: u32 = 2;

/// The fuse and the connection of one (tenant, upstream) on this edge.
#[derive(Default)]
struct Slot {
    /// The configuration this slot is about; a newer one resets it.
    config_version: u64,
    connection: Option<Arc<Connection>>,
    failures: u32,
    open: bool,
    /// While open: when the next half-open probe may go.
    probe_at: Option<Instant>,
    backoff_ms: u64,
    probing: bool,
}

/// Fuse changes waiting to be recorded in the ledger, at most (then new ones are dropped,
/// logged: the edge's own fuse works regardless).
const RECORDS_QUEUED_MAX: usize = 256;

/// Every slot of this edge, the compiled pinned schemas, and the queue of fuse changes to
/// record (one task records them in order, so the ledger never shows an older state last).
#[derive(Default)]
pub struct Upstreams {
    slots: Mutex<HashMap<(String, String), Slot>>,
    schemas: Mutex<HashMap<(String, String, bool), Arc<jsonschema::Validator>>>,
    records: std::sync::OnceLock<tokio::sync::mpsc::Sender<Command>>,
}

/// What the ledger says about the target, read from the edge's replica.
pub(crate) struct Target {
    tenant_id: String,
    upstream: String,
    spec: UpstreamSpecV1,
    config_version: u64,
    digest: String,
    tool: UpstreamToolV1,
}

/// Whether a call may go, and as what.
pub(crate) enum Gate {
    Closed,
    Probe,
}

fn refuse(reason: ReasonCode, message: impl Into<String>) -> Rejection {
    Rejection::new(reason, message)
}

/// A call that passed the checks before the upstream: its target and how the fuse lets it go.
pub struct Prepared {
    target: Target,
    gate: Gate,
}

impl Upstreams {
    /// The checks before the upstream is called, for the upstream tool `action` names with
    /// `args` (already checked against the action's input schema): the upstream and its pinned
    /// tool, the pinned input schema, and the fuse.
    pub fn prepare(
        &self,
        edge: &crate::Edge,
        tenant_id: &str,
        action: &CatalogActionV1,
        args: &Value,
    ) -> Result<Prepared, Rejection> {
        let Some(target) = action.execution.upstream_target() else {
            return Err(refuse(ReasonCode::INTERNAL, "not an upstream action"));
        };
        let target = match self.target(edge, tenant_id, target) {
            Ok(t) => t,
            Err(r) => {
                if r.reason == ReasonCode::UPSTREAM_NOT_FOUND {
                    // Removed: its slot (and the connection in it) goes too.
                    let name = parse_target(target).map(|(u, _)| u.to_string()).unwrap_or_default();
                    self.slots.lock().expect("upstream slots").remove(&(tenant_id.to_string(), name));
                }
                return Err(r);
            }
        };
        self.check(&target, false, args)?;
        let gate = self.gate(edge, &target)?;
        Ok(Prepared { target, gate })
    }

    /// Calls the upstream (one retry for a tool it marks read-only and idempotent) and checks
    /// the result; the upstream's progress notifications are relayed through `notify`.
    pub async fn call(
        &self,
        edge: &crate::Edge,
        prepared: Prepared,
        action: &CatalogActionV1,
        args: Value,
        notify: crate::reply::Notifier,
    ) -> Result<Value, Rejection> {
        let Prepared { target, gate } = prepared;
        let Value::Object(arguments) = args else { return Err(refuse(ReasonCode::INPUT_INVALID, "arguments")) };
        let attempts = if target.tool.retry_safe() { RETRY_SAFE_ATTEMPTS } else { 1 };
        let mut last = None;
        for attempt in 0..attempts {
            if attempt > 0 {
                // Jittered pause before the retry of a read the upstream says is idempotent.
                tokio::time::sleep(Duration::from_millis(rand::random_range(50..=200))).await;
            }
            match self.attempt(&target, arguments.clone(), None, Some(&notify)).await {
                Ok(result) => {
                    self.succeeded(edge, &target, &gate);
                    return self.checked_result(&target, action, result);
                }
                Err(e) if !e.counts => {
                    self.succeeded(edge, &target, &gate);
                    return Err(e.rejection);
                }
                Err(e) => {
                    let opened = self.failed(edge, &target, &gate, &e.rejection);
                    last = Some(e.rejection);
                    if opened || matches!(gate, Gate::Probe) {
                        break;
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| refuse(ReasonCode::UPSTREAM_FAILED, "no attempt was made")))
    }

    /// Performs the upstream operation `op` (its action's execution is `upstream_operation`),
    /// just recorded (or replayed) in `reserved`: the edge claims its one attempt as
    /// `edge:<id>` and calls the tool with the operation's idempotency key and id in `_meta`
    /// (`io.writ/idempotencyKey`, `io.writ/operationId`), then reports what came of it —
    /// the effect, with the upstream's result as the attempt's evidence; no effect when the
    /// upstream answered with an error; and when it may have acted without answering (a
    /// timeout, a lost connection) it gives up the attempt's lease so the ledger marks the
    /// effect unknown at once. What cannot be called (no such upstream or pinned tool, an open
    /// fuse, arguments the pinned schema refuses) is refused before any attempt. An operation
    /// in any other state is answered as it is: it is never attempted twice.
    pub async fn perform(
        &self,
        edge: &crate::Edge,
        trace_id: &str,
        action: &CatalogActionV1,
        op: Operation,
        notify: Option<crate::reply::Notifier>,
    ) -> Performed {
        if op.state != OperationState::Reserved {
            return Performed { op, result: None, refusal: None };
        }
        let me = format!("{EDGE_PERFORMER_PREFIX}{}", edge.config.edge_id);
        let (tenant_id, id) = (op.tenant_id.clone(), op.spec.operation_id.clone());
        let fencing_token = op.fencing_token.unwrap_or(0);
        let input: Value = serde_json::from_str(&op.spec.input).unwrap_or(Value::Null);
        let (target, gate) = match self.prepare(edge, &tenant_id, action, &input) {
            Ok(Prepared { target, gate }) => (target, gate),
            Err(r) => return refused_before(edge, trace_id, op, me, r).await,
        };
        let Value::Object(arguments) = input else {
            return Performed { op, result: None, refusal: Some(refuse(ReasonCode::INPUT_INVALID, "arguments")) };
        };
        // Reached before the attempt starts: an upstream that cannot be reached is a refusal
        // (nothing was sent), never an attempt.
        if let Err(e) = self.connection(&target).await {
            if e.counts {
                self.failed(edge, &target, &gate, &e.rejection);
            }
            return refused_before(edge, trace_id, op, me, e.rejection).await;
        }
        // The lease outlasts the longest call (handshake included), so the report lands in it.
        let lease_ms = (2 * target.spec.connect_timeout_ms + target.spec.call_timeout_ms + PERFORM_LEASE_MARGIN_MS)
            .min(writ_api::operation::LEASE_MS_MAX);
        let start = Command::StartAttempt {
            tenant_id: tenant_id.clone(),
            operation_id: id.clone(),
            executor_id: me,
            fencing_token,
            lease_ms,
        };
        let op = match step(edge, trace_id, start).await {
            Ok(op) => op,
            // A call with the same key (here or on another edge) claimed it first: that call
            // performs it; this one answers the operation as the replica now shows it.
            Err(r) if r.reason == ReasonCode::OPERATION_STATE_CONFLICT => {
                return Performed { op: settled(edge, op, Duration::ZERO).await, result: None, refusal: None }
            }
            // Expired, or no ledger: nothing is called.
            Err(r) => return Performed { op, result: None, refusal: Some(r) },
        };
        let mut meta = serde_json::Map::new();
        meta.insert(crate::operations::META_IDEMPOTENCY_KEY.into(), json!(op.spec.idempotency_key));
        meta.insert(META_OPERATION_ID.into(), json!(id));
        let called = self.attempt(&target, arguments, Some(meta), notify.as_ref()).await;
        match called {
            Ok(result) => {
                self.succeeded(edge, &target, &gate);
                let is_error = result.get("isError") == Some(&Value::Bool(true));
                let checked = self.checked_result(&target, action, result.clone());
                let outcome = if is_error { AttemptOutcome::NoEffect } else { AttemptOutcome::Effect };
                let op = step(edge, trace_id, report(&op, outcome, Some(&result))).await.unwrap_or(op);
                match checked {
                    Ok(result) => Performed { op, result: Some(result), refusal: None },
                    Err(r) => Performed { op, result: None, refusal: Some(r) },
                }
            }
            Err(e) => {
                if e.counts {
                    self.failed(edge, &target, &gate, &e.rejection);
                } else {
                    self.succeeded(edge, &target, &gate);
                }
                if !e.unanswered {
                    let op = step(edge, trace_id, report(&op, AttemptOutcome::NoEffect, None)).await.unwrap_or(op);
                    return Performed { op, result: None, refusal: Some(e.rejection) };
                }
                // It may have acted: the lease ends now, and the ledger's next look marks the
                // effect unknown (the reaper's, within a fraction of a second).
                let give_up = Command::RenewAttemptLease {
                    tenant_id: tenant_id.clone(),
                    operation_id: id.clone(),
                    fencing_token,
                    lease_ms: 1,
                };
                let op = step(edge, trace_id, give_up).await.unwrap_or(op);
                let op = settled(edge, op, UNKNOWN_EFFECT_WAIT).await;
                let message = format!(
                    "{}; the upstream may have acted: operation '{id}' is {} until its effect is resolved",
                    e.rejection.message,
                    serde_json::to_value(op.state)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                );
                Performed { op, result: None, refusal: Some(refuse(e.rejection.reason, message)) }
            }
        }
    }

    fn target(&self, edge: &crate::Edge, tenant_id: &str, target: &str) -> Result<Target, Rejection> {
        let (name, tool) = parse_target(target)?;
        edge.verifier.with_state(|s| {
            let u = s
                .upstream(tenant_id, name)
                .ok_or_else(|| refuse(ReasonCode::UPSTREAM_NOT_FOUND, format!("no upstream '{name}'")))?;
            let pinned = u.pinned.as_ref().ok_or_else(|| {
                refuse(ReasonCode::UPSTREAM_TOOL_NOT_PINNED, format!("upstream '{name}' has no approved tools yet"))
            })?;
            let t = pinned.tool(tool).ok_or_else(|| {
                refuse(
                    ReasonCode::UPSTREAM_TOOL_NOT_PINNED,
                    format!("tool '{tool}' is not in the approved tools of upstream '{name}'"),
                )
            })?;
            Ok(Target {
                tenant_id: tenant_id.to_string(),
                upstream: name.to_string(),
                spec: u.spec.clone(),
                config_version: u.config_version,
                digest: pinned.digest.clone(),
                tool: t.clone(),
            })
        })
    }

    /// Validates `value` against the pinned input (or output) schema.
    fn check(&self, t: &Target, output: bool, value: &Value) -> Result<(), Rejection> {
        let text = if output { t.tool.output_schema.as_deref() } else { Some(t.tool.input_schema.as_str()) };
        let Some(text) = text else { return Ok(()) };
        let key = (t.digest.clone(), t.tool.name.clone(), output);
        let cached = self.schemas.lock().expect("schemas").get(&key).cloned();
        let validator = match cached {
            Some(v) => v,
            None => {
                let schema: Value = serde_json::from_str(text)
                    .map_err(|_| refuse(ReasonCode::INTERNAL, "a pinned schema is not JSON"))?;
                let v = Arc::new(writ_api::catalog::validator(&schema)?);
                let mut cache = self.schemas.lock().expect("schemas");
                if cache.len() >= SCHEMAS_MAX {
                    cache.clear();
                }
                cache.insert(key, v.clone());
                v
            }
        };
        let errors = crate::operations::schema_errors(&validator, value);
        if errors.is_empty() {
            return Ok(());
        }
        let (reason, what) = if output {
            (ReasonCode::OUTPUT_INVALID, "the upstream's result does not match the pinned output schema")
        } else {
            (ReasonCode::INPUT_INVALID, "the arguments do not match the upstream tool's pinned input schema")
        };
        Err(refuse(reason, format!("{what}: {}", errors.join("; "))))
    }

    /// Whether a call may go now: the fuse is closed, or open and due a probe that nobody else
    /// is making. A newer configuration resets the slot (closing an open fuse).
    fn gate(&self, edge: &crate::Edge, t: &Target) -> Result<Gate, Rejection> {
        let mut slots = self.slots.lock().expect("upstream slots");
        let slot = slots.entry((t.tenant_id.clone(), t.upstream.clone())).or_default();
        if slot.config_version != t.config_version {
            let was_open = slot.open && slot.config_version != 0;
            if slot.open {
                metrics::gauge!("writ_upstream_fuses_open").decrement(1.0);
            }
            *slot = Slot { config_version: t.config_version, ..Slot::default() };
            if was_open {
                self.record(edge, t, fuse(false, 0, "the upstream's configuration changed", t.config_version));
            }
        }
        if !slot.open {
            return Ok(Gate::Closed);
        }
        let now = Instant::now();
        let due = slot.probe_at.is_none_or(|at| now >= at);
        // A probe whose caller went away never reports: after its longest wait it is stale.
        let longest = Duration::from_millis(t.spec.call_timeout_ms + 2 * t.spec.connect_timeout_ms);
        let stale = slot.probe_at.is_some_and(|at| now >= at + longest);
        if due && (!slot.probing || stale) {
            slot.probing = true;
            return Ok(Gate::Probe);
        }
        metrics::counter!("writ_upstream_calls_total", "outcome" => "fuse_open").increment(1);
        Err(refuse(
            ReasonCode::UPSTREAM_UNAVAILABLE,
            format!(
                "upstream '{}' failed {} times in a row: its fuse is open until a probe succeeds or its configuration changes",
                t.upstream, slot.failures
            ),
        ))
    }

    /// One call of the upstream's tool, as a client span of the current trace (when the call is
    /// made for one) whose context the upstream continues (`_meta.traceparent`).
    async fn attempt(
        &self,
        t: &Target,
        arguments: serde_json::Map<String, Value>,
        meta: Option<serde_json::Map<String, Value>>,
        notify: Option<&crate::reply::Notifier>,
    ) -> Result<Value, UpstreamError> {
        let Some(cx) = writ_client::trace::child(writ_telemetry::span_id()) else {
            return self.attempt_untraced(t, arguments, meta, notify).await;
        };
        let client = opentelemetry::trace::SpanKind::Client;
        let mut span = writ_telemetry::Span::start(cx, client, || format!("tools/call {}", t.tool.name));
        span.set("mcp.method.name", "tools/call");
        span.set("gen_ai.tool.name", t.tool.name.clone());
        span.set("gen_ai.operation.name", "execute_tool");
        span.set("writ.upstream", t.upstream.clone());
        let mut meta = meta.unwrap_or_default();
        meta.insert("traceparent".into(), Value::String(span.context().traceparent()));
        if let Some(state) = &span.context().tracestate {
            meta.insert("tracestate".into(), Value::String(state.clone()));
        }
        let result = self.attempt_untraced(t, arguments, Some(meta), notify).await;
        if result.is_err() {
            span.fail("upstream_failed");
        }
        span.end();
        result
    }

    async fn attempt_untraced(
        &self,
        t: &Target,
        arguments: serde_json::Map<String, Value>,
        meta: Option<serde_json::Map<String, Value>>,
        notify: Option<&crate::reply::Notifier>,
    ) -> Result<Value, UpstreamError> {
        // A call whose client asked for log messages gets a connection of its own: MCP ties a
        // log message to no request, so only that tells whose the upstream's messages are.
        let (connection, mut logs) = match notify.and_then(|n| n.log_level()) {
            Some(level) => {
                let (c, logs) = writ_client::upstream::connect_for_logs(&t.spec, level).await?;
                (Arc::new(c), Some(logs))
            }
            None => (self.connection(t).await?, None),
        };
        let logger = format!("upstream:{}", t.upstream);
        let relay_log = |m: writ_client::upstream::LogMessage| {
            let logger = match &m.logger {
                Some(l) => format!("{logger}/{l}"),
                None => logger.clone(),
            };
            async move {
                if let Some(n) = notify {
                    n.log_as(&m.level, &logger, m.data).await
                }
            }
        };
        let started = Instant::now();
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let result = {
            let call = connection.call(&t.tool.name, arguments, meta, None, notify.map(|_| tx));
            tokio::pin!(call);
            loop {
                let next_log = async {
                    match logs.as_mut() {
                        Some(l) => l.recv().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    result = &mut call => break result,
                    Some(p) = rx.recv() => {
                        if let Some(n) = notify {
                            n.progress(p.progress, p.total, p.message.as_deref().unwrap_or("")).await
                        }
                    }
                    Some(m) = next_log => relay_log(m).await,
                }
            }
        };
        metrics::histogram!("writ_upstream_call_seconds").record(started.elapsed().as_secs_f64());
        if let Some(mut logs) = logs {
            // The call's own connection ends; the messages its transport queued before the
            // answer and not relayed yet go first (the queue ends with the transport).
            let drain = async {
                if let Ok(c) = Arc::try_unwrap(connection) {
                    c.close().await;
                }
                while let Some(m) = logs.recv().await {
                    relay_log(m).await;
                }
            };
            let _ = tokio::time::timeout(LOGS_DRAIN_MAX, drain).await;
        }
        result
    }

    /// The slot's open connection to the upstream, or a new one (kept in the slot while its
    /// configuration is current).
    async fn connection(&self, t: &Target) -> Result<Arc<Connection>, UpstreamError> {
        let key = (t.tenant_id.clone(), t.upstream.clone());
        let existing = self
            .slots
            .lock()
            .expect("upstream slots")
            .get(&key)
            .and_then(|s| s.connection.clone())
            .filter(|c| !c.is_closed());
        if let Some(c) = existing {
            return Ok(c);
        }
        let c = Arc::new(writ_client::upstream::connect(&t.spec).await?);
        let mut slots = self.slots.lock().expect("upstream slots");
        if let Some(slot) = slots.get_mut(&key).filter(|s| s.config_version == t.config_version) {
            slot.connection = Some(c.clone());
        }
        Ok(c)
    }

    /// The call reached the upstream and it answered: the failure count starts over; a probe's
    /// success closes the fuse.
    fn succeeded(&self, edge: &crate::Edge, t: &Target, gate: &Gate) {
        metrics::counter!("writ_upstream_calls_total", "outcome" => "ok").increment(1);
        let mut slots = self.slots.lock().expect("upstream slots");
        let Some(slot) = slots.get_mut(&(t.tenant_id.clone(), t.upstream.clone())) else { return };
        if slot.config_version != t.config_version {
            return;
        }
        let closing = slot.open && matches!(gate, Gate::Probe);
        slot.failures = 0;
        if closing {
            metrics::gauge!("writ_upstream_fuses_open").decrement(1.0);
            *slot = Slot { config_version: t.config_version, connection: slot.connection.take(), ..Slot::default() };
            self.record(edge, t, fuse(false, 0, "a half-open probe succeeded", t.config_version));
        }
    }

    /// The call failed in a way that counts: drop the connection, count, and open the fuse at
    /// [`FUSE_FAILURES`] (or, after a failed probe, wait twice as long). Whether it opened now.
    fn failed(&self, edge: &crate::Edge, t: &Target, gate: &Gate, why: &Rejection) -> bool {
        metrics::counter!("writ_upstream_calls_total", "outcome" => "failed").increment(1);
        let mut slots = self.slots.lock().expect("upstream slots");
        let Some(slot) = slots.get_mut(&(t.tenant_id.clone(), t.upstream.clone())) else { return false };
        if slot.config_version != t.config_version {
            return false;
        }
        slot.connection = None;
        slot.failures += 1;
        if matches!(gate, Gate::Probe) {
            slot.probing = false;
            slot.backoff_ms = (slot.backoff_ms * 2).clamp(FUSE_BACKOFF_MIN_MS, FUSE_BACKOFF_MAX_MS);
            slot.probe_at = Some(Instant::now() + jittered(slot.backoff_ms));
            return false;
        }
        if slot.open || slot.failures < FUSE_FAILURES {
            return false;
        }
        slot.open = true;
        slot.backoff_ms = FUSE_BACKOFF_MIN_MS;
        slot.probe_at = Some(Instant::now() + jittered(slot.backoff_ms));
        metrics::counter!("writ_upstream_fuse_opened_total").increment(1);
        metrics::gauge!("writ_upstream_fuses_open").increment(1.0);
        tracing::warn!(upstream = %t.upstream, tenant = %t.tenant_id, failures = slot.failures, "upstream fuse opened");
        self.record(edge, t, fuse(true, slot.failures, &why.message, t.config_version));
        true
    }

    /// Queues a fuse change for the ledger (the call does not wait). One task submits them in
    /// order, retrying each a few times before it gives up on it (logged).
    fn record(&self, edge: &crate::Edge, t: &Target, fuse: FuseV1) {
        let command = Command::SetUpstreamFuse {
            tenant_id: t.tenant_id.clone(),
            name: t.upstream.clone(),
            edge_id: edge.config.edge_id.clone(),
            fuse,
        };
        let queue = self.records.get_or_init(|| {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<Command>(RECORDS_QUEUED_MAX);
            let ledger = edge.ledger.clone();
            tokio::spawn(async move {
                while let Some(command) = rx.recv().await {
                    for attempt in 0..5u32 {
                        let req = SubmitRequest::new(uuid::Uuid::new_v4().to_string(), command.clone());
                        match ledger.submit(req).await {
                            Ok(_) => break,
                            Err(e) if attempt == 4 => {
                                tracing::warn!(error = %e.message, "recording an upstream fuse failed")
                            }
                            Err(_) => tokio::time::sleep(Duration::from_millis(200 << attempt)).await,
                        }
                    }
                }
            });
            tx
        });
        if queue.try_send(command).is_err() {
            tracing::warn!(upstream = %t.upstream, "the queue of fuse records is full: this change is not recorded");
        }
    }

    /// The result checked against the pinned and the action's output schemas (its size was
    /// bounded by `UPSTREAM_RESULT_BYTES_MAX` as it was read: `writ_client::upstream`).
    fn checked_result(&self, t: &Target, action: &CatalogActionV1, result: Value) -> Result<Value, Rejection> {
        let is_error = result.get("isError") == Some(&Value::Bool(true));
        if !is_error && (t.tool.output_schema.is_some() || action.output_schema.is_some()) {
            let structured = result.get("structuredContent").ok_or_else(|| {
                refuse(
                    ReasonCode::OUTPUT_INVALID,
                    "the upstream's result has no structuredContent for its output schema",
                )
            })?;
            self.check(t, true, structured)?;
        }
        Ok(result)
    }
}

/// How long a call that asked for logs waits, after the upstream answered, for the log
/// messages still on their way and its connection's end.
const LOGS_DRAIN_MAX: Duration = Duration::from_secs(2);
/// Lease an edge's attempt keeps beyond the longest its call can take.
const PERFORM_LEASE_MARGIN_MS: u64 = 5_000;
/// How long an answer waits for the ledger to mark an unanswered call's effect unknown.
const UNKNOWN_EFFECT_WAIT: Duration = Duration::from_secs(5);
/// The `_meta` key under which an upstream operation's call carries the operation's id.
pub const META_OPERATION_ID: &str = "io.writ/operationId";

/// What performing an upstream operation came to.
pub struct Performed {
    /// The operation as the ledger left it.
    pub op: Operation,
    /// The upstream's result (checked against the pinned and the action's output schemas).
    pub result: Option<Value>,
    /// Why there is no result: refused before the attempt, failed, or of unknown effect.
    pub refusal: Option<Rejection>,
}

/// Submits one step of an edge's attempt (resubmitted while the outcome is uncertain) and
/// answers the operation as it left it, or the ledger's refusal.
async fn step(edge: &crate::Edge, trace_id: &str, command: Command) -> Result<Operation, Rejection> {
    let req = SubmitRequest::new(trace_id.to_string(), command);
    match crate::operations::submit_replayable(edge.ledger.as_ref(), req).await?.outcome {
        Outcome::Applied { operation: Some(op), .. } => Ok(*op),
        Outcome::Rejected { reason, message, .. } => Err(refuse(reason, message)),
        _ => Err(refuse(ReasonCode::INTERNAL, "unexpected ledger outcome")),
    }
}

/// `op` refused by its performing edge `me` before any attempt (`EXECUTOR_UNAVAILABLE`, with
/// why): it fails, never attempted, and frees what it held.
async fn refused_before(edge: &crate::Edge, trace_id: &str, op: Operation, me: String, why: Rejection) -> Performed {
    let refusal = Command::RefuseDispatchV2 {
        tenant_id: op.tenant_id.clone(),
        operation_id: op.spec.operation_id.clone(),
        executor_id: me,
        fencing_token: op.fencing_token.unwrap_or(0),
        reason: ReasonCode::EXECUTOR_UNAVAILABLE,
        message: bounded(&format!("{}: {}", why.reason, why.message), writ_api::operation::KEY_BYTES_MAX),
    };
    let op = step(edge, trace_id, refusal).await.unwrap_or(op);
    Performed { op, result: None, refusal: Some(why) }
}

/// The attempt's report: its outcome, with the upstream's result as evidence (stored when it
/// fits a blob; else named by its hash only).
fn report(op: &Operation, outcome: AttemptOutcome, result: Option<&Value>) -> Command {
    let (tenant_id, operation_id) = (op.tenant_id.clone(), op.spec.operation_id.clone());
    let fencing_token = op.fencing_token.unwrap_or(0);
    let Some(result) = result else {
        return Command::ReportAttempt { tenant_id, operation_id, fencing_token, outcome, evidence: None };
    };
    let bytes = serde_json::to_vec(result).unwrap_or_default();
    let content_hash = writ_api::sha256_hex(&bytes);
    let summary = if outcome == AttemptOutcome::Effect { "the upstream's result" } else { "the upstream's error" };
    let mut evidence = EvidenceV1 {
        content_hash: content_hash.clone(),
        evidence_return_ref: writ_api::evidence::evidence_uri(&operation_id, &content_hash),
        summary: summary.into(),
    };
    if bytes.len() > writ_api::evidence::EVIDENCE_BYTES_MAX {
        evidence.evidence_return_ref = format!("not stored: over {} bytes", writ_api::evidence::EVIDENCE_BYTES_MAX);
        return Command::ReportAttempt { tenant_id, operation_id, fencing_token, outcome, evidence: Some(evidence) };
    }
    // The bytes themselves: a leader proposes them as base64 while a member reads no other form.
    let content = writ_api::evidence::EvidenceBytesV1 { mime_type: "application/json".into(), bytes };
    Command::ReportAttemptV3 { tenant_id, operation_id, fencing_token, outcome, evidence, content }
}

/// `op` once the edge knows it past `attempting` (or as it is after `wait`;
/// [`crate::operations::latest`]).
async fn settled(edge: &crate::Edge, op: Operation, wait: Duration) -> Operation {
    let until = tokio::time::Instant::now() + wait;
    let mut revisions = edge.verifier.revisions();
    let watch = edge.verifier.watch_operation(&op.tenant_id, &op.spec.operation_id);
    let mut current = op;
    loop {
        if let Some((newer, _)) = crate::operations::latest(&watch, edge.ledger.as_ref(), &current).await {
            current = newer;
        }
        if current.state != OperationState::Attempting {
            return current;
        }
        match tokio::time::timeout_at(until, revisions.changed()).await {
            Ok(Ok(())) => {}
            _ => return current,
        }
    }
}

/// `text` cut to at most `max` bytes (on a character boundary).
fn bounded(text: &str, max: usize) -> String {
    let mut cut = text.len().min(max);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text[..cut].to_string()
}

fn jittered(ms: u64) -> Duration {
    Duration::from_millis(ms + rand::random_range(0..=ms / 5))
}

fn fuse(open: bool, failures: u32, reason: &str, config_version: u64) -> FuseV1 {
    let reason = bounded(reason, writ_api::upstream::FUSE_REASON_BYTES_MAX);
    FuseV1 { open, failures, reason, config_version, changed_at_ms: 0 }
}

/// The `isError` result an agent sees for a refused upstream call.
pub fn refusal_result(r: &Rejection) -> Value {
    json!({"resultType": "complete", "isError": true,
           "content": [{"type": "text", "text": format!("{}: {}", r.reason, r.message)}],
           "_meta": {"writ/reason": r.reason}})
}

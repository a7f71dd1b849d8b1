//! Operations (SPEC D6–D8): the unit of durable, effectful work, decided and applied by the
//! ledger like every other state. One place holds the whole contract:
//!
//! - **Idempotency (D7)**: `(tenant, principal, idempotency_key)` binds to one operation and its
//!   payload hash when the operation is submitted — before any attempt. The same key and hash
//!   replays the operation (whatever its state, `unknown_effect` included: no new attempt); the
//!   same key with another hash is IDEMPOTENCY_KEY_REUSED.
//! - **Reservations (D8)**: a device is held by at most one operation; each reservation takes the
//!   device's next fencing token, which an executor must present. The reservation lasts until the
//!   operation's deadline while it waits, and for a renewable lease while it is attempted.
//! - **Time** is ledger time: a deadline passing before the attempt starts makes the operation
//!   `expired` (never dispatched or attempted afterwards); a lease expiring during an attempt makes
//!   it `unknown_effect`, and the device stays held until someone reconciles it.
//! - **Acceptance (X3)**: evidence from the executor is not acceptance; `accepted` needs an
//!   observation by another principal than the one that asked for the operation.
//!
//! - **Input before commitment**: an operation may be submitted with input requests (e.g. a
//!   confirmation of a high-risk action asked through an MCP task); it stays `proposed` — no
//!   reservation, no dispatch — until its requester answers them all (`AnswerInputs`): every
//!   answer accepted → `verified` and reserved; one declined → `cancelled`.
//! - **Cancellation**: before the attempt, at once; during it, the request is recorded and the
//!   executor (told on its lease renewals) stops if it can — its report of no effect then ends
//!   the operation `cancelled`, an effect it reports still counts.
//!
//! Every transition is an `OperationTransitionedV1` event with its cause.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ledger::{Command, Event, EventEnvelope, TenantState};
use crate::principal::PrincipalState;
use crate::reason::ReasonCode;
use crate::rejection::Rejection;
use crate::state::{idempotency_slot, CorruptEvent, LedgerState};

/// Longest idempotency key, operation id and free-text fields (bytes).
pub const KEY_BYTES_MAX: usize = 200;
/// Largest action input (canonical JSON bytes).
pub const INPUT_BYTES_MAX: usize = 64 * 1024;
/// Longest attempt lease an executor may ask for.
pub const LEASE_MS_MAX: u64 = 10 * 60 * 1000;
/// How long (ledger time) an executor has between a dispatch and the start of its attempt;
/// after that the operation is offered again (its executor went away before starting: a
/// start it still sends is refused, so nothing runs twice).
pub const DISPATCH_START_MS: u64 = 30_000;
/// Most input requests an operation may wait for, and the largest request or answer (bytes).
pub const INPUT_REQUESTS_MAX: usize = 8;
pub const INPUT_REQUEST_BYTES_MAX: usize = 8 * 1024;

/// Where an operation is in its life (SPEC D6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationState {
    Proposed,
    Verified,
    Reserved,
    Dispatched,
    Attempting,
    EffectReported,
    Accepted,
    Rejected,
    Expired,
    Failed,
    Cancelled,
    UnknownEffect,
}

impl OperationState {
    /// No transition leaves these.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Accepted | Self::Rejected | Self::Expired | Self::Failed | Self::Cancelled)
    }

    /// Not yet attempted: the deadline still gates it and it may be cancelled.
    pub fn is_waiting(self) -> bool {
        matches!(self, Self::Proposed | Self::Verified | Self::Reserved | Self::Dispatched)
    }

    /// Whether the state machine allows `self → next`.
    pub fn allows(self, next: OperationState) -> bool {
        use OperationState::*;
        match (self, next) {
            (Proposed, Verified) | (Verified, Reserved) | (Reserved, Dispatched) | (Dispatched, Attempting) => true,
            // Its executor did not start in time: offered again.
            (Dispatched, Reserved) => true,
            (from, Expired | Cancelled) if from.is_waiting() => true,
            (Attempting, EffectReported | Failed | UnknownEffect) => true,
            // A cancellation asked for during the attempt, which ended without effect.
            (Attempting, Cancelled) => true,
            // The executor refused the dispatch before any attempt (stale, precondition).
            (Dispatched, Failed) => true,
            (UnknownEffect, EffectReported | Failed) => true,
            (EffectReported, Accepted | Rejected) => true,
            _ => false,
        }
    }
}

/// A work item an operation was proposed against, at a revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkRef {
    pub id: String,
    pub revision: u64,
}

/// What a principal asked for, as the ledger records it at submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationSpecV1 {
    pub operation_id: String,
    pub principal_id: String,
    /// The token (`jti`) or grant that authorized it.
    pub authority_ref: String,
    /// The catalog action.
    pub action: String,
    /// sha256 (hex) of the canonical JSON payload ([`payload_hash`]): action, input, device,
    /// work_ref and preconditions.
    pub payload_hash: String,
    /// The action's input as canonical JSON text (what the executor performs).
    pub input: String,
    pub idempotency_key: String,
    /// Ledger time after which no attempt may start.
    pub deadline_ms: u64,
    pub cost_units: u64,
    pub cost_ceiling: Option<u64>,
    /// Device id, when the action drives one.
    pub device_id: Option<String>,
    pub work_ref: Option<WorkRef>,
    /// Local-state preconditions the executor checks before attempting (name → expected).
    pub preconditions: BTreeMap<String, String>,
    pub trace_id: String,
    /// What the requester must answer before the operation is verified (id → the request as
    /// JSON text, e.g. an `elicitation/create`); empty for most operations.
    pub input_requests: BTreeMap<String, String>,
}

/// Evidence of an effect: a content hash and where the content can be fetched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceV1 {
    pub content_hash: String,
    pub evidence_return_ref: String,
    pub summary: String,
}

/// An observation of an operation's effect by a principal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservationV1 {
    pub observer_id: String,
    pub evidence: EvidenceV1,
    pub at_ms: u64,
}

/// How an executor's attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The effect happened (as the executor saw it).
    Effect,
    /// The attempt failed without effect.
    NoEffect,
}

/// The acceptance owner's verdict on a reported effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Accept,
    Reject,
}

/// The operation as the ledger holds it (derived from its events).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    pub tenant_id: String,
    pub spec: OperationSpecV1,
    pub state: OperationState,
    pub executor_id: Option<String>,
    /// Fencing token of the device reservation this operation holds or held.
    pub fencing_token: Option<u64>,
    pub attempts: u32,
    /// Ledger time at which the running attempt's lease runs out (while attempting).
    pub lease_expires_at_ms: Option<u64>,
    pub evidence: Vec<EvidenceV1>,
    pub observations: Vec<ObservationV1>,
    /// The requester's answers to `spec.input_requests` (id → JSON text).
    pub answers: BTreeMap<String, String>,
    /// Someone asked to cancel it during its attempt.
    pub cancel_requested: bool,
    /// The cause of its last transition.
    pub cause: String,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub revision: u64,
}

/// A device held by an operation until `expires_at_ms` (ledger time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceLease {
    pub operation_id: String,
    pub fencing_token: u64,
    pub expires_at_ms: u64,
}

/// A JSON value as canonical text: object keys sorted, no whitespace.
pub fn canonical_json(v: &Value) -> String {
    fn canonical(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let sorted: BTreeMap<&String, Value> = m.iter().map(|(k, v)| (k, canonical(v))).collect();
                Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
            other => other.clone(),
        }
    }
    canonical(v).to_string()
}

/// sha256 (hex) of a JSON value in canonical form ([`canonical_json`]).
pub fn payload_hash(payload: &Value) -> String {
    crate::sha256_hex(canonical_json(payload).as_bytes())
}

fn invalid(message: impl Into<String>) -> Rejection {
    Rejection::new(ReasonCode::INPUT_INVALID, message)
}

impl OperationSpecV1 {
    /// Field rules (the ledger's business checks come on top).
    pub fn validate(&self) -> Result<(), Rejection> {
        for (name, v) in [
            ("operation_id", &self.operation_id),
            ("idempotency_key", &self.idempotency_key),
            ("action", &self.action),
            ("principal_id", &self.principal_id),
        ] {
            if v.is_empty() || v.len() > KEY_BYTES_MAX {
                return Err(invalid(format!("{name} must be 1..={KEY_BYTES_MAX} bytes")));
            }
        }
        if self.payload_hash.len() != 64 || !self.payload_hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid("payload_hash must be a sha256 hex digest"));
        }
        if self.input.len() > INPUT_BYTES_MAX || serde_json::from_str::<Value>(&self.input).is_err() {
            return Err(invalid(format!("input must be JSON of at most {INPUT_BYTES_MAX} bytes")));
        }
        if self.input_requests.len() > INPUT_REQUESTS_MAX {
            return Err(invalid(format!("at most {INPUT_REQUESTS_MAX} input requests")));
        }
        for (id, request) in &self.input_requests {
            json_text_ok("an input request", id, request)?;
        }
        Ok(())
    }
}

/// An operation transition event.
pub fn transition(op: &Operation, to: OperationState, cause: impl Into<String>) -> Event {
    Event::OperationTransitionedV1 {
        tenant_id: op.tenant_id.clone(),
        operation_id: op.spec.operation_id.clone(),
        from: op.state,
        to,
        cause: cause.into(),
    }
}

/// The release of the device `op` holds (if it holds one).
pub fn release(op: &Operation) -> Option<Event> {
    op.spec.device_id.as_ref().map(|d| Event::DeviceReleasedV1 {
        tenant_id: op.tenant_id.clone(),
        device_id: d.clone(),
        operation_id: op.spec.operation_id.clone(),
    })
}

/// The events that bring the operations of a tenant up to ledger time `now`: waiting ones past
/// their deadline expire (and free their device); attempted ones whose lease ran out become
/// `unknown_effect` (their device stays held until reconciled). Only the tenant's live
/// operations (waiting or attempting, [`LedgerState::live_operations`]) are looked at.
pub fn due(state: &LedgerState, tenant_id: &str, now: u64) -> Vec<Event> {
    let mut events = Vec::new();
    let (Some(ops), Some(live)) = (state.operations.get(tenant_id), state.live_operations.get(tenant_id)) else {
        return events;
    };
    for op in live.iter().filter_map(|id| ops.get(id)) {
        if op.state.is_waiting() && op.spec.deadline_ms <= now {
            events.push(transition(op, OperationState::Expired, "the deadline passed before an attempt started"));
            events.extend(release(op));
        } else if op.state == OperationState::Dispatched && op.lease_expires_at_ms.is_some_and(|at| at <= now) {
            let to = op.executor_id.as_deref().unwrap_or("?");
            events.push(transition(
                op,
                OperationState::Reserved,
                format!("executor '{to}' did not start an attempt within {DISPATCH_START_MS} ms: offered again"),
            ));
        } else if op.state == OperationState::Attempting && op.lease_expires_at_ms.is_some_and(|at| at <= now) {
            events.push(transition(
                op,
                OperationState::UnknownEffect,
                "the attempt's lease expired without an outcome",
            ));
        }
    }
    events
}

fn not_found(operation_id: &str) -> Rejection {
    Rejection::new(ReasonCode::OPERATION_NOT_FOUND, format!("no operation '{operation_id}'"))
}

fn conflict(op: &Operation, what: &str) -> Rejection {
    Rejection::new(
        ReasonCode::OPERATION_STATE_CONFLICT,
        format!("operation '{}' is {:?}: {what}", op.spec.operation_id, op.state).replace('"', ""),
    )
}

fn stale(op: &Operation, presented: u64) -> Rejection {
    Rejection::new(
        ReasonCode::FENCING_TOKEN_STALE,
        format!(
            "fencing token {presented} is not operation '{}''s current token {:?}",
            op.spec.operation_id, op.fencing_token
        ),
    )
}

fn find<'a>(state: &'a LedgerState, tenant_id: &str, operation_id: &str) -> Result<&'a Operation, Rejection> {
    state.operations.get(tenant_id).and_then(|m| m.get(operation_id)).ok_or_else(|| not_found(operation_id))
}

/// The operation quotas (SPEC D9) of the tenant, then of the principal, consumed by the
/// submission itself: operations per minute and cost units per day (ledger time), and
/// operations waiting or attempting at once.
fn quotas_allow(
    state: &LedgerState,
    tenant: &crate::ledger::Tenant,
    spec: &OperationSpecV1,
    now: u64,
) -> Result<(), Rejection> {
    let q = &tenant.settings.quotas;
    let usage = state.operation_windows.get(&tenant.id).map_or((0, 0), |w| w.usage(now));
    let live = state.live_operations.get(&tenant.id).map_or(0, |l| l.len() as u64);
    let limits = (q.operations_per_minute, q.cost_units_per_day, q.concurrent_operations);
    within("the tenant's", limits, usage, live, spec.cost_units, now)?;
    let Some(own) = state.principal_quotas.get(&tenant.id).and_then(|m| m.get(&spec.principal_id)) else {
        return Ok(());
    };
    let usage = state
        .principal_operation_windows
        .get(&tenant.id)
        .and_then(|m| m.get(&spec.principal_id))
        .map_or((0, 0), |w| w.usage(now));
    let ops = state.operations.get(&tenant.id);
    let live = state.live_operations.get(&tenant.id).map_or(0, |l| {
        l.iter().filter_map(|id| ops?.get(id)).filter(|o| o.spec.principal_id == spec.principal_id).count() as u64
    });
    let limits = (own.operations_per_minute, own.cost_units_per_day, own.concurrent_operations);
    within("the principal's", limits, usage, live, spec.cost_units, now)
}

/// One set of operation limits (per minute, cost per day, concurrent) against its usage.
fn within(
    whose: &str,
    (per_minute, cost_per_day, concurrent): (Option<u64>, Option<u64>, Option<u64>),
    (ops, cost): (u64, u64),
    live: u64,
    asked: u64,
    now: u64,
) -> Result<(), Rejection> {
    let exceeded = |what: String| Rejection::new(ReasonCode::QUOTA_EXCEEDED, format!("{whose} {what}"));
    if let Some(limit) = per_minute.filter(|l| ops >= *l) {
        let retry = crate::quota::WINDOW_MS - now % crate::quota::WINDOW_MS;
        return Err(exceeded(format!("operations_per_minute ({limit}) reached; retry after {retry} ms")));
    }
    if let Some(limit) = cost_per_day.filter(|l| cost + asked > *l) {
        let retry = crate::quota::DAY_MS - now % crate::quota::DAY_MS;
        return Err(exceeded(format!(
            "cost_units_per_day ({limit}) would be exceeded ({cost} used, {asked} asked); retry after {retry} ms"
        )));
    }
    if let Some(limit) = concurrent.filter(|l| live >= *l) {
        return Err(exceeded(format!(
            "concurrent_operations ({limit}) reached: {live} operations are waiting or attempting; retry when one ends"
        )));
    }
    Ok(())
}

/// An input request or answer: a short id and a JSON object of bounded size.
fn json_text_ok(what: &str, id: &str, text: &str) -> Result<(), Rejection> {
    if id.is_empty() || id.len() > 64 {
        return Err(invalid(format!("{what} id must be 1..=64 bytes")));
    }
    if text.len() > INPUT_REQUEST_BYTES_MAX || !serde_json::from_str::<Value>(text).is_ok_and(|v| v.is_object()) {
        return Err(invalid(format!("{what} '{id}' must be a JSON object of at most {INPUT_REQUEST_BYTES_MAX} bytes")));
    }
    Ok(())
}

/// The reservation that verifies `spec` for an attempt: its device's next fencing token (the
/// device must be free), or straight to `reserved` when it drives none.
fn reserve(state: &LedgerState, tenant_id: &str, spec: &OperationSpecV1) -> Result<Event, Rejection> {
    let t = tenant_id.to_string();
    Ok(match &spec.device_id {
        Some(device_id) => {
            if state.devices.get(tenant_id).is_none_or(|m| !m.contains_key(device_id)) {
                return Err(Rejection::new(ReasonCode::DEVICE_NOT_FOUND, format!("no device '{device_id}'")));
            }
            if let Some(held) = state.device_leases.get(tenant_id).and_then(|m| m.get(device_id)) {
                return Err(Rejection::new(
                    ReasonCode::DEVICE_RESERVED,
                    format!(
                        "device '{device_id}' is held by operation '{}'; retry after {} (ledger ms)",
                        held.operation_id, held.expires_at_ms
                    ),
                ));
            }
            let last = state.fencing.get(tenant_id).and_then(|m| m.get(device_id)).copied().unwrap_or(0);
            Event::DeviceReservedV1 {
                tenant_id: t,
                device_id: device_id.clone(),
                operation_id: spec.operation_id.clone(),
                fencing_token: last + 1,
                expires_at_ms: spec.deadline_ms,
            }
        }
        None => Event::OperationTransitionedV1 {
            tenant_id: t,
            operation_id: spec.operation_id.clone(),
            from: OperationState::Verified,
            to: OperationState::Reserved,
            cause: "no device to reserve".into(),
        },
    })
}

fn validate_reason(reason: &str) -> Result<(), Rejection> {
    if reason.is_empty() || reason.len() > KEY_BYTES_MAX {
        return Err(invalid(format!("reason must be 1..={KEY_BYTES_MAX} bytes")));
    }
    Ok(())
}

fn lease_ms_ok(lease_ms: u64) -> Result<(), Rejection> {
    if (1..=LEASE_MS_MAX).contains(&lease_ms) {
        Ok(())
    } else {
        Err(invalid(format!("lease_ms must be 1..={LEASE_MS_MAX}")))
    }
}

/// Decides an operation command at ledger time `now` (the tenant's due transitions were
/// applied just before, see `LedgerState::execute_audited`).
pub fn decide(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    use OperationState::*;
    let tenant_id = cmd.stream();
    let tenant = crate::state::existing(state, tenant_id)?;
    let t = tenant_id.to_string();
    match cmd {
        Command::SubmitOperation { spec, .. } => {
            if tenant.state == TenantState::Suspended {
                return Err(Rejection::new(
                    ReasonCode::TENANT_SUSPENDED,
                    format!("tenant '{}' is suspended", tenant.name),
                ));
            }
            spec.validate()?;
            let principal = state
                .principals
                .get(tenant_id)
                .and_then(|m| m.get(&spec.principal_id))
                .ok_or_else(|| Rejection::new(ReasonCode::PRINCIPAL_NOT_FOUND, "no such principal"))?;
            if principal.state != PrincipalState::Active {
                return Err(Rejection::new(
                    ReasonCode::AUTH_TOKEN_REVOKED,
                    format!("principal '{}' was revoked", principal.name),
                ));
            }
            let slot = idempotency_slot(&spec.principal_id, &spec.idempotency_key);
            if let Some(prior) = state.idempotency.get(tenant_id).and_then(|m| m.get(&slot)) {
                let prior = find(state, tenant_id, prior)?;
                if prior.spec.payload_hash == spec.payload_hash {
                    return Ok(vec![]); // a replay: the prior operation stands, whatever its state
                }
                return Err(Rejection::new(
                    ReasonCode::IDEMPOTENCY_KEY_REUSED,
                    format!("idempotency key '{}' was used for another payload", spec.idempotency_key),
                ));
            }
            if state.operations.get(tenant_id).is_some_and(|m| m.contains_key(&spec.operation_id)) {
                return Err(invalid(format!("operation id '{}' is taken", spec.operation_id)));
            }
            if spec.deadline_ms <= now {
                return Err(Rejection::new(ReasonCode::DEADLINE_EXCEEDED, "the deadline has already passed"));
            }
            quotas_allow(state, tenant, spec, now)?;
            if let Some(ceiling) = spec.cost_ceiling.filter(|c| spec.cost_units > *c) {
                return Err(Rejection::new(
                    ReasonCode::COST_CEILING_EXCEEDED,
                    format!("the action costs {} units, over the ceiling of {ceiling}", spec.cost_units),
                ));
            }
            let mut events = vec![Event::OperationSubmittedV1 { tenant_id: t.clone(), spec: spec.clone() }];
            // Waiting for its requester's input: neither verified nor reserved yet.
            if spec.input_requests.is_empty() {
                events.push(reserve(state, tenant_id, spec)?);
            } else if let Some(d) =
                spec.device_id.as_ref().filter(|d| state.devices.get(tenant_id).is_none_or(|m| !m.contains_key(*d)))
            {
                return Err(Rejection::new(ReasonCode::DEVICE_NOT_FOUND, format!("no device '{d}'")));
            }
            Ok(events)
        }
        Command::AnswerInputs { operation_id, by_principal_id, answers, .. } => {
            let op = find(state, tenant_id, operation_id)?;
            if &op.spec.principal_id != by_principal_id {
                return Err(not_found(operation_id)); // only its requester answers
            }
            if op.state != Proposed {
                return Err(conflict(op, "only an operation waiting for input takes answers"));
            }
            let mut fresh: BTreeMap<String, String> = BTreeMap::new();
            for (id, answer) in answers {
                if op.spec.input_requests.contains_key(id) && !op.answers.contains_key(id) {
                    json_text_ok("an answer", id, answer)?;
                    fresh.insert(id.clone(), answer.clone());
                }
            }
            if fresh.is_empty() {
                return Ok(vec![]);
            }
            let all: BTreeMap<&String, &String> = op.answers.iter().chain(fresh.iter()).collect();
            let complete = all.len() == op.spec.input_requests.len();
            let accepted = |a: &str| serde_json::from_str::<Value>(a).is_ok_and(|v| v["action"] == "accept");
            let declined = all.iter().find(|(_, a)| !accepted(a)).map(|(id, _)| id.to_string());
            let mut events = vec![Event::OperationInputsAnsweredV1 {
                tenant_id: t.clone(),
                operation_id: operation_id.clone(),
                answers: fresh.clone(),
            }];
            match (complete, declined) {
                (false, _) => {}
                (true, Some(id)) => events.push(transition(op, Cancelled, format!("input '{id}' was declined"))),
                (true, None) => {
                    events.push(transition(op, Verified, "every input was answered"));
                    events.push(reserve(state, tenant_id, &op.spec)?);
                }
            }
            Ok(events)
        }
        Command::DispatchOperation { operation_id, executor_id, .. } => {
            let op = find(state, tenant_id, operation_id)?;
            match (op.state, &op.executor_id) {
                (Dispatched, Some(e)) if e == executor_id => Ok(vec![]),
                (Reserved, _) => Ok(vec![Event::OperationDispatchedV1 {
                    tenant_id: t,
                    operation_id: operation_id.clone(),
                    executor_id: executor_id.clone(),
                }]),
                _ => Err(conflict(op, "only a reserved operation is dispatched")),
            }
        }
        Command::StartAttempt { operation_id, executor_id, fencing_token, lease_ms, .. } => {
            lease_ms_ok(*lease_ms)?;
            let op = find(state, tenant_id, operation_id)?;
            if op.state != Dispatched || op.executor_id.as_deref() != Some(executor_id.as_str()) {
                return Err(conflict(op, "an attempt starts only on a dispatched operation, by its executor"));
            }
            if op.fencing_token.is_some_and(|f| f != *fencing_token) {
                return Err(stale(op, *fencing_token));
            }
            let mut events = vec![transition(
                op,
                Attempting,
                format!("attempt {} started by executor '{executor_id}'", op.attempts + 1),
            )];
            events.push(Event::AttemptLeaseExtendedV1 {
                tenant_id: t,
                device_id: op.spec.device_id.clone(),
                operation_id: operation_id.clone(),
                expires_at_ms: now + lease_ms,
            });
            Ok(events)
        }
        Command::RefuseDispatch { operation_id, executor_id, fencing_token, reason, .. } => {
            let op = find(state, tenant_id, operation_id)?;
            if op.state != Dispatched || op.executor_id.as_deref() != Some(executor_id.as_str()) {
                return Err(conflict(op, "only the executor a dispatch went to refuses it, before attempting"));
            }
            if op.fencing_token.is_some_and(|f| f != *fencing_token) {
                return Err(stale(op, *fencing_token));
            }
            validate_reason(reason)?;
            let mut events = vec![transition(
                op,
                Failed,
                format!("refused by executor '{executor_id}' before any attempt: {reason}"),
            )];
            events.extend(release(op));
            Ok(events)
        }
        Command::RenewAttemptLease { operation_id, fencing_token, lease_ms, .. } => {
            lease_ms_ok(*lease_ms)?;
            let op = find(state, tenant_id, operation_id)?;
            if op.state != Attempting {
                return Err(conflict(op, "only an attempt's lease is renewed"));
            }
            if op.fencing_token.is_some_and(|f| f != *fencing_token) {
                return Err(stale(op, *fencing_token));
            }
            Ok(vec![Event::AttemptLeaseExtendedV1 {
                tenant_id: t,
                device_id: op.spec.device_id.clone(),
                operation_id: operation_id.clone(),
                expires_at_ms: now + lease_ms,
            }])
        }
        Command::ReportAttempt { operation_id, fencing_token, outcome, evidence, .. } => {
            let op = find(state, tenant_id, operation_id)?;
            if !matches!(op.state, Attempting | UnknownEffect) {
                return Err(conflict(op, "only an attempted operation reports an outcome"));
            }
            if op.fencing_token.is_some_and(|f| f != *fencing_token) {
                return Err(stale(op, *fencing_token));
            }
            let late = if op.state == UnknownEffect { " (late: after the lease expired)" } else { "" };
            let mut events: Vec<Event> = evidence
                .iter()
                .map(|e| Event::EvidenceReportedV1 {
                    tenant_id: t.clone(),
                    operation_id: operation_id.clone(),
                    evidence: e.clone(),
                })
                .collect();
            events.push(match outcome {
                AttemptOutcome::Effect => {
                    transition(op, EffectReported, format!("the executor reported the effect{late}"))
                }
                AttemptOutcome::NoEffect if op.cancel_requested => transition(
                    op,
                    Cancelled,
                    format!("cancelled during the attempt; the executor reported no effect{late}"),
                ),
                AttemptOutcome::NoEffect => transition(op, Failed, format!("the executor reported no effect{late}")),
            });
            events.extend(release(op));
            Ok(events)
        }
        Command::RecordObservation { operation_id, observer_id, evidence, .. } => {
            let op = find(state, tenant_id, operation_id)?;
            if !matches!(op.state, Attempting | EffectReported | UnknownEffect) {
                return Err(conflict(op, "observations are recorded for attempted operations"));
            }
            if observer_id == &op.spec.principal_id {
                return Err(invalid(
                    "the observer must be another principal than the one that asked for the operation",
                ));
            }
            if state.principals.get(tenant_id).is_none_or(|m| !m.contains_key(observer_id)) {
                return Err(Rejection::new(ReasonCode::PRINCIPAL_NOT_FOUND, "no such observer"));
            }
            let observation =
                ObservationV1 { observer_id: observer_id.clone(), evidence: evidence.clone(), at_ms: now };
            Ok(vec![Event::ObservationRecordedV1 { tenant_id: t, operation_id: operation_id.clone(), observation }])
        }
        Command::DecideOperation { operation_id, by_principal_id, verdict, note, .. } => {
            let op = find(state, tenant_id, operation_id)?;
            if op.state != EffectReported {
                return Err(conflict(op, "only a reported effect is accepted or rejected"));
            }
            match verdict {
                Verdict::Accept if op.observations.is_empty() => Err(Rejection::new(
                    ReasonCode::OBSERVATION_REQUIRED,
                    "no independent observation is linked to this operation; the executor's evidence alone cannot accept it",
                )),
                Verdict::Accept => Ok(vec![transition(op, Accepted, format!("accepted by '{by_principal_id}': {note}"))]),
                Verdict::Reject => Ok(vec![transition(op, Rejected, format!("rejected by '{by_principal_id}': {note}"))]),
            }
        }
        Command::ResolveUnknownEffect { operation_id, by_principal_id, outcome, note, .. } => {
            let op = find(state, tenant_id, operation_id)?;
            if op.state != UnknownEffect {
                return Err(conflict(op, "only an unknown effect is resolved"));
            }
            let mut events = vec![match outcome {
                AttemptOutcome::Effect => {
                    transition(op, EffectReported, format!("resolved by '{by_principal_id}': effect happened: {note}"))
                }
                AttemptOutcome::NoEffect => {
                    transition(op, Failed, format!("resolved by '{by_principal_id}': no effect: {note}"))
                }
            }];
            events.extend(release(op));
            Ok(events)
        }
        Command::CancelOperation { operation_id, by_principal_id, .. } => {
            let op = find(state, tenant_id, operation_id)?;
            if op.state == Attempting {
                // The executor is told (lease renewals) and reports the true outcome.
                return Ok(if op.cancel_requested {
                    vec![]
                } else {
                    vec![Event::OperationCancelRequestedV1 {
                        tenant_id: t,
                        operation_id: operation_id.clone(),
                        by_principal_id: by_principal_id.clone(),
                    }]
                });
            }
            if !op.state.is_waiting() {
                return Err(conflict(op, "an operation is cancelled only before or during its attempt"));
            }
            let mut events = vec![transition(op, Cancelled, format!("cancelled by '{by_principal_id}'"))];
            events.extend(release(op));
            Ok(events)
        }
        Command::ExpireDue { .. } => Ok(vec![]),
        other => Err(Rejection::new(ReasonCode::INTERNAL, format!("{} is not an operation command", other.kind()))),
    }
}

/// Folds an operation event into the state; an event naming an operation the state does not
/// hold is [`CorruptEvent`].
pub fn apply(state: &mut LedgerState, env: &EventEnvelope) -> Result<(), CorruptEvent> {
    let op_mut = |state: &mut LedgerState, tenant_id: &str, operation_id: &str| -> Result<Operation, CorruptEvent> {
        state
            .operations
            .get(tenant_id)
            .and_then(|m| m.get(operation_id))
            .cloned()
            .ok_or_else(|| CorruptEvent::new(env, format!("unknown operation '{operation_id}'")))
    };
    let store = |state: &mut LedgerState, mut op: Operation| {
        op.updated_at_ms = env.at_ms;
        op.revision = env.revision;
        let live = state.live_operations.entry(op.tenant_id.clone()).or_default();
        if op.state.is_waiting() || op.state == OperationState::Attempting {
            live.insert(op.spec.operation_id.clone());
        } else {
            live.remove(&op.spec.operation_id);
        }
        state.operations.entry(op.tenant_id.clone()).or_default().insert(op.spec.operation_id.clone(), op);
    };
    match &env.event {
        Event::OperationSubmittedV1 { tenant_id, spec } => {
            state.operation_windows.entry(tenant_id.clone()).or_default().record(env.at_ms, spec.cost_units);
            state
                .principal_operation_windows
                .entry(tenant_id.clone())
                .or_default()
                .entry(spec.principal_id.clone())
                .or_default()
                .record(env.at_ms, spec.cost_units);
            state
                .idempotency
                .entry(tenant_id.clone())
                .or_default()
                .insert(idempotency_slot(&spec.principal_id, &spec.idempotency_key), spec.operation_id.clone());
            let waiting = !spec.input_requests.is_empty();
            let op = Operation {
                tenant_id: tenant_id.clone(),
                spec: spec.clone(),
                state: if waiting { OperationState::Proposed } else { OperationState::Verified },
                executor_id: None,
                fencing_token: None,
                attempts: 0,
                lease_expires_at_ms: None,
                evidence: Vec::new(),
                observations: Vec::new(),
                answers: BTreeMap::new(),
                cancel_requested: false,
                cause: if waiting { "waiting for the requester's input" } else { "recorded" }.into(),
                created_at_ms: env.at_ms,
                updated_at_ms: env.at_ms,
                revision: env.revision,
            };
            store(state, op);
        }
        Event::DeviceReservedV1 { tenant_id, device_id, operation_id, fencing_token, expires_at_ms } => {
            state.fencing.entry(tenant_id.clone()).or_default().insert(device_id.clone(), *fencing_token);
            let lease = DeviceLease {
                operation_id: operation_id.clone(),
                fencing_token: *fencing_token,
                expires_at_ms: *expires_at_ms,
            };
            state.device_leases.entry(tenant_id.clone()).or_default().insert(device_id.clone(), lease);
            let mut op = op_mut(state, tenant_id, operation_id)?;
            op.state = OperationState::Reserved;
            op.fencing_token = Some(*fencing_token);
            store(state, op);
        }
        Event::DeviceReleasedV1 { tenant_id, device_id, operation_id } => {
            if let Some(leases) = state.device_leases.get_mut(tenant_id) {
                if leases.get(device_id).is_some_and(|l| &l.operation_id == operation_id) {
                    leases.remove(device_id);
                }
            }
        }
        Event::OperationDispatchedV1 { tenant_id, operation_id, executor_id } => {
            let mut op = op_mut(state, tenant_id, operation_id)?;
            op.state = OperationState::Dispatched;
            op.executor_id = Some(executor_id.clone());
            op.lease_expires_at_ms = Some(env.at_ms + DISPATCH_START_MS);
            store(state, op);
        }
        Event::OperationTransitionedV1 { tenant_id, operation_id, to, cause, .. } => {
            let mut op = op_mut(state, tenant_id, operation_id)?;
            if *to == OperationState::Attempting {
                op.attempts += 1;
            }
            op.state = *to;
            op.cause = cause.clone();
            if *to == OperationState::Reserved {
                // Offered again: no executor holds it.
                op.executor_id = None;
                op.lease_expires_at_ms = None;
            }
            store(state, op);
        }
        Event::OperationInputsAnsweredV1 { tenant_id, operation_id, answers } => {
            let mut op = op_mut(state, tenant_id, operation_id)?;
            op.answers.extend(answers.iter().map(|(k, v)| (k.clone(), v.clone())));
            store(state, op);
        }
        Event::OperationCancelRequestedV1 { tenant_id, operation_id, by_principal_id } => {
            let mut op = op_mut(state, tenant_id, operation_id)?;
            op.cancel_requested = true;
            op.cause = format!("cancellation requested by '{by_principal_id}' during the attempt");
            store(state, op);
        }
        Event::AttemptLeaseExtendedV1 { tenant_id, device_id, operation_id, expires_at_ms } => {
            if let Some(l) = device_id.as_ref().and_then(|d| state.device_leases.get_mut(tenant_id)?.get_mut(d)) {
                if &l.operation_id == operation_id {
                    l.expires_at_ms = *expires_at_ms;
                }
            }
            let mut op = op_mut(state, tenant_id, operation_id)?;
            op.lease_expires_at_ms = Some(*expires_at_ms);
            store(state, op);
        }
        Event::EvidenceReportedV1 { tenant_id, operation_id, evidence } => {
            let mut op = op_mut(state, tenant_id, operation_id)?;
            op.evidence.push(evidence.clone());
            store(state, op);
        }
        Event::ObservationRecordedV1 { tenant_id, operation_id, observation } => {
            let mut op = op_mut(state, tenant_id, operation_id)?;
            op.observations.push(observation.clone());
            store(state, op);
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_transition_table_is_the_spec() {
        use OperationState::*;
        let all = [
            Proposed,
            Verified,
            Reserved,
            Dispatched,
            Attempting,
            EffectReported,
            Accepted,
            Rejected,
            Expired,
            Failed,
            Cancelled,
            UnknownEffect,
        ];
        for from in all {
            for to in all {
                if from.is_terminal() {
                    assert!(!from.allows(to), "{from:?} is terminal");
                }
            }
        }
        assert!(Dispatched.allows(Expired) && !Attempting.allows(Expired), "only a waiting operation expires");
        assert!(Dispatched.allows(Failed) && !Reserved.allows(Failed), "only a dispatch is refused");
        assert!(Reserved.allows(Cancelled) && Proposed.allows(Cancelled), "cancel before the attempt");
        assert!(
            Attempting.allows(Cancelled) && !UnknownEffect.allows(Cancelled),
            "an attempt ends cancelled only itself"
        );
        assert!(!EffectReported.allows(Attempting) && !UnknownEffect.allows(Attempting), "never attempted twice");
        assert!(UnknownEffect.allows(EffectReported) && UnknownEffect.allows(Failed));
        assert!(EffectReported.allows(Accepted) && !Attempting.allows(Accepted));
    }

    #[test]
    fn payload_hash_ignores_key_order_and_spacing() {
        let a = payload_hash(&json!({"b": 1, "a": {"y": [1, 2], "x": "s"}}));
        let b = payload_hash(&serde_json::from_str(r#"{ "a": {"x":"s","y":[1,2]}, "b":1 }"#).unwrap());
        assert_eq!(a, b);
        assert_ne!(a, payload_hash(&json!({"b": 2, "a": {"y": [1, 2], "x": "s"}})));
        assert_ne!(a, payload_hash(&json!({"b": 1, "a": {"y": [2, 1], "x": "s"}})), "array order matters");
    }
}

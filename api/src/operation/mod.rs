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
//!
//! This module holds the types and pure helpers; the rules are `crate::operation::decide`
//! (what a command does) and the operation part of `LedgerState::fold_event` (what an event
//! changes).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::reason::ReasonCode;
use crate::rejection::Rejection;

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
/// The input request of an operation whose action is [`crate::catalog::Risk::Critical`]: only
/// another principal holding [`APPROVE_SCOPE`] answers it, for the operation's payload digest.
pub const APPROVAL_REQUEST: &str = "approval";
/// The scope a principal needs to approve another principal's critical operation.
pub const APPROVE_SCOPE: &str = "ops:approve";
/// The scopes of a principal's acts on operations, checked by the edge and again by the ledger
/// (`Command::OnBehalfOf`): submit one and answer its inputs, cancel one, observe an effect,
/// accept or reject a reported effect, read operations.
pub const EXECUTE_SCOPE: &str = "ops:execute";
pub const CANCEL_SCOPE: &str = "ops:cancel";
pub const OBSERVE_SCOPE: &str = "observe:capture";
pub const DECIDE_SCOPE: &str = "ops:accept";
pub const READ_SCOPE: &str = "ops:read";

/// The approval request (JSON text) the ledger adds to a critical operation.
pub fn approval_request(payload_hash: &str) -> String {
    serde_json::json!({"method": "writ/approval", "params": {
        "message": "Another principal holding ops:approve must approve this call.",
        "scope": APPROVE_SCOPE, "payload_hash": payload_hash}})
    .to_string()
}

/// The input request of an operation whose action demands verification
/// ([`crate::catalog::CatalogActionV1::demands_verification`]) submitted without a proposal:
/// only its requester answers it, and the operation is reserved only once it is accepted.
pub const CONFIRM_REQUEST: &str = "confirm";
/// How long (ledger time) a recorded proposal may be executed.
pub const PROPOSAL_TTL_MS: u64 = 5 * 60 * 1000;
/// Live (unexpired, unused) proposals a principal may hold, and a tenant: each is a Raft entry
/// and a state entry until it is used or expires (QUOTA_EXCEEDED beyond).
pub const PROPOSALS_PER_PRINCIPAL_MAX: usize = 32;
pub const PROPOSALS_PER_TENANT_MAX: usize = 10_000;

/// A dry run a principal recorded (`operation.propose`, or the first round of a confirmed
/// direct call): it lets exactly this call — same principal, action and [`OperationSpecV1::call_digest`]
/// — be executed once before `expires_at_ms` (SPEC E5, S3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProposalV1 {
    pub proposal_id: String,
    pub principal_id: String,
    pub action: String,
    pub call_digest: String,
    pub payload_hash: String,
    /// Ledger time after which it is PROPOSAL_EXPIRED.
    pub expires_at_ms: u64,
}

/// Most local-state preconditions one operation may carry, and the longest name or expected
/// value (bytes): they are stored in the ledger state until the operation is purged.
pub const PRECONDITIONS_MAX: usize = 16;
pub const PRECONDITION_BYTES_MAX: usize = 256;

/// Preconditions within [`PRECONDITIONS_MAX`] and [`PRECONDITION_BYTES_MAX`] (INPUT_INVALID
/// otherwise); the edge checks before anything else, the ledger again.
pub fn validate_preconditions(preconditions: &BTreeMap<String, String>) -> Result<(), Rejection> {
    if preconditions.len() > PRECONDITIONS_MAX {
        return Err(invalid(format!("at most {PRECONDITIONS_MAX} preconditions")));
    }
    if preconditions
        .iter()
        .any(|(k, v)| k.is_empty() || k.len() > PRECONDITION_BYTES_MAX || v.len() > PRECONDITION_BYTES_MAX)
    {
        return Err(invalid(format!("a precondition's name must be 1..={PRECONDITION_BYTES_MAX} bytes and its value at most {PRECONDITION_BYTES_MAX}")));
    }
    Ok(())
}

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
    /// The state's name as it travels in JSON (`unknown_effect`): metric labels, query
    /// parameters, tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proposed => "proposed",
            Self::Verified => "verified",
            Self::Reserved => "reserved",
            Self::Dispatched => "dispatched",
            Self::Attempting => "attempting",
            Self::EffectReported => "effect_reported",
            Self::Accepted => "accepted",
            Self::Rejected => "rejected",
            Self::Expired => "expired",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::UnknownEffect => "unknown_effect",
        }
    }

    /// Every state, in order.
    pub const ALL: [OperationState; 12] = [
        Self::Proposed,
        Self::Verified,
        Self::Reserved,
        Self::Dispatched,
        Self::Attempting,
        Self::EffectReported,
        Self::Accepted,
        Self::Rejected,
        Self::Expired,
        Self::Failed,
        Self::Cancelled,
        Self::UnknownEffect,
    ];

    /// No transition leaves these.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Accepted | Self::Rejected | Self::Expired | Self::Failed | Self::Cancelled)
    }

    /// Waits for a human: an effect nobody knows (reconcile it) or one reported and not yet
    /// accepted or rejected.
    pub fn needs_attention(self) -> bool {
        matches!(self, Self::UnknownEffect | Self::EffectReported)
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

/// One step of an operation's life as its history keeps it (`writ://operations/{id}`,
/// `operation.readback`): from what state (none: the submission) to what, why, with the
/// reason code of a refusal, at what ledger time and revision, under which trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionV1 {
    pub from: Option<OperationState>,
    pub to: OperationState,
    pub cause: String,
    pub reason: Option<crate::reason::ReasonCode>,
    pub at_ms: u64,
    pub revision: u64,
    pub trace_id: String,
}

/// The reasons an executor may give for refusing a dispatch before attempting it: a local
/// precondition that does not hold, a deadline too close or passed, a fencing token older
/// than one it has seen, or a handler that cannot run.
pub const EXECUTOR_REFUSALS: &[crate::reason::ReasonCode] = &[
    crate::reason::ReasonCode::PRECONDITION_FAILED,
    crate::reason::ReasonCode::DEADLINE_EXCEEDED,
    crate::reason::ReasonCode::FENCING_TOKEN_STALE,
    crate::reason::ReasonCode::EXECUTOR_UNAVAILABLE,
];

/// Transitions an operation's history keeps: the first (its submission) and the newest
/// others (an operation offered again and again — each dispatch that times out — would grow
/// it without bound).
pub const HISTORY_KEPT: usize = 32;

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

/// An operation as a projection held it when it stopped being live, with its history
/// ([`crate::state::LedgerState::departed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departed {
    pub op: Operation,
    pub history: Vec<TransitionV1>,
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

impl Operation {
    /// Waiting or attempting: it holds a place in its tenant's (and principal's) concurrency.
    pub fn is_live(&self) -> bool {
        self.state.is_waiting() || self.state == OperationState::Attempting
    }

    /// Its binding: what retention keeps once its record's time is up (`crate::retention`) —
    /// the record without its input, input requests, preconditions, answers and observations,
    /// enough to answer a replay with its outcome and refuse its key for another payload.
    pub fn binding(&self) -> Operation {
        let mut kept = self.clone();
        kept.spec.input = String::new();
        kept.spec.input_requests.clear();
        kept.spec.preconditions.clear();
        kept.answers.clear();
        kept.observations.clear();
        kept
    }

    /// The ledger time at which time alone changes it (`operation::decide::due`): its deadline
    /// while waiting, its attempt lease while dispatched or attempting, whichever comes first.
    pub fn due_at(&self) -> Option<u64> {
        let deadline = self.state.is_waiting().then_some(self.spec.deadline_ms);
        let lease = matches!(self.state, OperationState::Dispatched | OperationState::Attempting)
            .then_some(self.lease_expires_at_ms)
            .flatten();
        match (deadline, lease) {
            (Some(d), Some(l)) => Some(d.min(l)),
            (d, l) => d.or(l),
        }
    }
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

pub(crate) fn invalid(message: impl Into<String>) -> Rejection {
    Rejection::new(ReasonCode::INPUT_INVALID, message)
}

impl OperationSpecV1 {
    /// sha256 (hex) of what the call does — action, input, device, work reference and
    /// preconditions — computed by the ledger itself (unlike [`OperationSpecV1::payload_hash`],
    /// which the edge computes): what a proposal binds.
    pub fn call_digest(&self) -> String {
        let call = (&self.action, &self.input, &self.device_id, &self.work_ref, &self.preconditions);
        crate::sha256_hex(&crate::encode(&call).expect("a call is always encodable"))
    }

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
        validate_preconditions(&self.preconditions)?;
        if self.authority_ref.is_empty() || self.authority_ref.len() > crate::token::ISSUER_BYTES_MAX {
            let max = crate::token::ISSUER_BYTES_MAX;
            return Err(invalid(format!("authority_ref must be 1..={max} bytes (a token id or an issuer)")));
        }
        let free_text = [Some(&self.trace_id), self.device_id.as_ref()];
        if free_text.into_iter().flatten().any(|t| t.len() > KEY_BYTES_MAX)
            || self.work_ref.as_ref().is_some_and(|w| w.id.is_empty() || w.id.len() > KEY_BYTES_MAX)
        {
            return Err(invalid(format!("trace_id, device_id and work_ref.id are at most {KEY_BYTES_MAX} bytes")));
        }
        for (id, request) in &self.input_requests {
            json_text_ok("an input request", id, request)?;
        }
        Ok(())
    }
}

/// An input request or answer: a short id and a JSON object of bounded size.
pub(crate) fn json_text_ok(what: &str, id: &str, text: &str) -> Result<(), Rejection> {
    if id.is_empty() || id.len() > 64 {
        return Err(invalid(format!("{what} id must be 1..=64 bytes")));
    }
    if text.len() > INPUT_REQUEST_BYTES_MAX || !serde_json::from_str::<Value>(text).is_ok_and(|v| v.is_object()) {
        return Err(invalid(format!("{what} '{id}' must be a JSON object of at most {INPUT_REQUEST_BYTES_MAX} bytes")));
    }
    Ok(())
}

/// Which operations a list shows; every field given must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationFilter {
    pub state: Option<OperationState>,
    pub device_id: Option<String>,
    pub principal_id: Option<String>,
    /// The work item the operation names (`work_ref.id`).
    pub work_id: Option<String>,
    /// Recorded at or after this ledger time (ms).
    pub since_ms: Option<u64>,
    /// Recorded before this ledger time (ms).
    pub until_ms: Option<u64>,
    /// Only what waits for a human: an unknown effect to reconcile, or a reported effect to
    /// accept or reject.
    #[serde(default)]
    pub needs_attention: bool,
}

impl OperationFilter {
    pub fn matches(&self, op: &Operation) -> bool {
        use OperationState::{EffectReported, UnknownEffect};
        self.state.is_none_or(|s| op.state == s)
            && self.device_id.as_ref().is_none_or(|d| op.spec.device_id.as_ref() == Some(d))
            && self.principal_id.as_ref().is_none_or(|p| op.spec.principal_id == *p)
            && self.work_id.as_ref().is_none_or(|w| op.spec.work_ref.as_ref().is_some_and(|r| r.id == *w))
            && self.since_ms.is_none_or(|t| op.created_at_ms >= t)
            && self.until_ms.is_none_or(|t| op.created_at_ms < t)
            && (!self.needs_attention || matches!(op.state, UnknownEffect | EffectReported))
    }
}

/// Operations scanned per list call at most (a filtered page may come back short; the cursor
/// still moves on, as for audit pages).
pub const OPERATIONS_SCAN_MAX: usize = 10_000;

pub mod decide;
pub(crate) mod fold;
mod query;

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
    fn state_names_are_their_json_names() {
        for state in OperationState::ALL {
            assert_eq!(serde_json::to_value(state).unwrap(), json!(state.as_str()));
        }
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

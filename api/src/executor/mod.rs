//! The executor wire (SPEC E7, X2): what a site executor and an edge's executor endpoint say to
//! each other over mutual TLS. The executor's certificate is its identity; nothing in these
//! bodies names a tenant or an executor.
//!
//! - `GET  /executor/v1/dispatch` — a long-lived NDJSON stream of [`DispatchFrame`]s.
//! - `POST /executor/v1/operations/{id}/start|renew|report|refuse` — [`AttemptRequest`],
//!   [`ReportRequest`], [`RefuseRequest`]; answers an [`OperationStatus`] or an `ErrorBody`.
//! - `GET  /executor/v1/operations/{id}` — the operation's [`OperationStatus`].
//! - `POST /executor/v1/enroll` (on the MCP listener, no client certificate) — `EnrollRequest`
//!   → [`ExecutorEnrollment`].
//! - `POST /executor/v1/renew` — [`RenewRequest`] → `EnrollResponse`: a new certificate for a
//!   new key, proven with the current one (see [`renewal_message`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::dto::EnrollResponse;
use crate::operation::{AttemptOutcome, EvidenceV1, Operation, OperationState};

pub const DISPATCH_PATH: &str = "/executor/v1/dispatch";
pub const OPERATIONS_PATH: &str = "/executor/v1/operations";
pub const ENROLL_PATH: &str = "/executor/v1/enroll";
pub const RENEW_PATH: &str = "/executor/v1/renew";
/// Where an edge serves an executor's call stream: its attempt calls as numbered frames
/// ([`crate::frames`]) of [`AttemptCall`]s, each answered as `OPERATIONS_PATH/{id}/{verb}`
/// answers it alone (`Result<OperationStatus, Rejection>`).
pub const CALLS_PATH: &str = "/executor/v1/calls";
/// Longest attempt call: the bound of such a call's own body.
pub const CALL_PAYLOAD_BYTES_MAX: usize = 2 * 1024 * 1024;

/// What an executor asks of an operation it was offered (`OPERATIONS_PATH/{id}/{verb}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AttemptVerb {
    Start,
    Renew,
    Report,
    Refuse,
    Evidence,
}

impl AttemptVerb {
    pub const ALL: [AttemptVerb; 5] =
        [AttemptVerb::Start, AttemptVerb::Renew, AttemptVerb::Report, AttemptVerb::Refuse, AttemptVerb::Evidence];

    /// The last segment of its path.
    pub fn segment(self) -> &'static str {
        match self {
            AttemptVerb::Start => "start",
            AttemptVerb::Renew => "renew",
            AttemptVerb::Report => "report",
            AttemptVerb::Refuse => "refuse",
            AttemptVerb::Evidence => "evidence",
        }
    }

    /// The method its audit decision names.
    pub fn method(self) -> &'static str {
        match self {
            AttemptVerb::Start => "executor/start",
            AttemptVerb::Renew => "executor/renew",
            AttemptVerb::Report => "executor/report",
            AttemptVerb::Refuse => "executor/refuse",
            AttemptVerb::Evidence => "executor/evidence",
        }
    }

    pub fn from_segment(segment: &str) -> Option<AttemptVerb> {
        AttemptVerb::ALL.into_iter().find(|v| v.segment() == segment)
    }
}

/// One attempt call on a call stream: what the request `OPERATIONS_PATH/{id}/{verb}` carries
/// (its JSON body, its `traceparent`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttemptCall {
    pub verb: AttemptVerb,
    pub operation_id: String,
    pub traceparent: Option<String>,
    pub body: Vec<u8>,
}
/// The admin API routes edges forward enrollments and renewals to (self-authenticating: by the
/// enrollment token, by the proof of the current key).
pub const ADMIN_ENROLL_PATH: &str = "/v1/enroll";
pub const ADMIN_RENEW_PATH: &str = "/v1/renew";
/// How far a renewal's `issued_at_ms` may be from the issuing node's clock.
pub const RENEW_PROOF_SKEW_MS: u64 = 5 * 60 * 1000;
/// How far before its issue an executor certificate's `notBefore` lies (clock skew between the
/// issuing node and the edges); its lifetime is counted from the issue.
pub const CERT_BACKDATE_MS: u64 = 5 * 60 * 1000;
/// Longest PEM CSR (or certificate) a renewal carries.
pub const RENEW_PEM_MAX_BYTES: usize = 8 * 1024;
/// Longest renewal proof (base64 of a signature: 684 characters for RSA-4096).
pub const RENEW_PROOF_MAX_BYTES: usize = 1024;
/// A dispatch stream sends a heartbeat at least this often.
pub const HEARTBEAT_MS: u64 = 2_000;

/// One line of the dispatch stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DispatchFrame {
    /// The stream is open for this executor.
    Hello {
        executor_id: String,
        tenant_id: String,
        site_id: String,
        now_ms: u64,
    },
    /// An operation for this executor to attempt (once).
    Dispatch {
        dispatch: Dispatch,
        now_ms: u64,
    },
    Heartbeat {
        now_ms: u64,
    },
    /// The stream ends (the executor reconnects, to this or another edge).
    End {
        reason: String,
        message: String,
    },
}

/// What an executor needs to decide whether and how to attempt an operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dispatch {
    pub operation_id: String,
    pub action: String,
    pub input: Value,
    pub device_id: Option<String>,
    pub device_name: Option<String>,
    /// The reservation's fencing token; echo it on every call for this operation.
    pub fencing_token: u64,
    /// Ledger time after which the executor must not start the attempt.
    pub deadline_ms: u64,
    pub preconditions: BTreeMap<String, String>,
    pub payload_hash: String,
    pub trace_id: String,
    /// The requester's answers to the operation's input requests (id → answer), if it had any.
    #[serde(default)]
    pub answers: BTreeMap<String, Value>,
    /// The action is a catalog `read`: the handler reports what it reads and effects nothing.
    #[serde(default)]
    pub read: bool,
}

impl Dispatch {
    /// The dispatch of `op` (device name, and whether its action is a `read`, looked up by the
    /// caller).
    pub fn of(op: &Operation, device_name: Option<String>, read: bool) -> Dispatch {
        Dispatch {
            operation_id: op.spec.operation_id.clone(),
            action: op.spec.action.clone(),
            input: serde_json::from_str(&op.spec.input).unwrap_or(Value::Null),
            device_id: op.spec.device_id.clone(),
            device_name,
            fencing_token: op.fencing_token.unwrap_or(0),
            deadline_ms: op.spec.deadline_ms,
            preconditions: op.spec.preconditions.clone(),
            payload_hash: op.spec.payload_hash.clone(),
            trace_id: op.spec.trace_id.clone(),
            answers: op
                .answers
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::from_str(v).unwrap_or(Value::Null)))
                .collect(),
            read,
        }
    }
}

/// `start` and `renew`: the fencing token and the lease asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptRequest {
    pub fencing_token: u64,
    pub lease_ms: u64,
}

/// `evidence`: a blob the executor captured of its attempt, stored by the ledger (see
/// [`crate::evidence`]); it is read back at [`crate::evidence::evidence_uri`], which the
/// executor then names as its report's `evidence_return_ref`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceUpload {
    pub mime_type: String,
    pub content_hash: String,
    pub content_base64: String,
}

/// `report`: how the attempt ended, with the executor's evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportRequest {
    pub fencing_token: u64,
    pub outcome: AttemptOutcome,
    #[serde(default)]
    pub evidence: Option<EvidenceV1>,
    /// The bytes of `evidence.content_hash`, stored with the report in one entry; the
    /// evidence's `evidence_return_ref` is then `crate::evidence::evidence_uri`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<crate::evidence::EvidenceContentV1>,
}

/// `refuse`: the executor will not attempt this dispatch (stale, precondition not met).
/// `code`, when given, is the refusal's reason code (one of
/// [`crate::operation::EXECUTOR_REFUSALS`], e.g. `PRECONDITION_FAILED`): the operation's
/// history and the agent's answer carry it. Without it the refusal is recorded as before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefuseRequest {
    pub fencing_token: u64,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<crate::reason::ReasonCode>,
}

/// An operation as its executor sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationStatus {
    pub operation_id: String,
    pub state: OperationState,
    pub fencing_token: Option<u64>,
    pub attempts: u32,
    /// Someone asked to cancel the running attempt: stop if the device can, and report the
    /// true outcome (no effect → the operation ends `cancelled`).
    #[serde(default)]
    pub cancel_requested: bool,
}

impl From<&Operation> for OperationStatus {
    fn from(op: &Operation) -> Self {
        OperationStatus {
            operation_id: op.spec.operation_id.clone(),
            state: op.state,
            fencing_token: op.fencing_token,
            attempts: op.attempts,
            cancel_requested: op.cancel_requested,
        }
    }
}

/// The edge's answer to an enrollment: the ledger's certificate, plus where the executor
/// endpoint is and the CA its TLS certificate chains to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecutorEnrollment {
    #[serde(flatten)]
    pub enrolled: EnrollResponse,
    /// `https://…` URL(s) of executor endpoints (any edge serves any executor).
    pub executor_urls: Vec<String>,
    /// PEM CA certificate of the edges' executor endpoints.
    pub edge_ca_certificate: String,
}

/// Edge CAs an enrollment token pins, at most.
pub const ENROLLMENT_PINS_MAX: usize = 4;

/// An enrollment token: `wen2.<tenant>.<enrollment>.<secret>.<pins>`, where `pins` are the
/// sha256 (hex) of the edge CAs an executor may trust, joined by `_`. The token is a secret
/// the operator hands over out of band, so the CA it pins cannot be swapped by whoever answers
/// the enrollment; the node keeps only its hash, so the pins cannot be changed either. Tokens
/// without pins (`wen1.…`, from an earlier build) still parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollmentToken<'a> {
    pub tenant_id: &'a str,
    pub enrollment_id: &'a str,
    pub pins: Vec<&'a str>,
}

impl<'a> EnrollmentToken<'a> {
    /// The token for `secret` pinning `pins` (none: the unpinned form).
    pub fn format(tenant_id: &str, enrollment_id: &str, secret: &str, pins: &[String]) -> String {
        if pins.is_empty() {
            format!("wen1.{tenant_id}.{enrollment_id}.{secret}")
        } else {
            format!("wen2.{tenant_id}.{enrollment_id}.{secret}.{}", pins.join("_"))
        }
    }

    /// The parts of `token`, or `None` when it is no enrollment token.
    pub fn parse(token: &'a str) -> Option<EnrollmentToken<'a>> {
        let parts: Vec<&str> = token.split('.').collect();
        let (tenant_id, enrollment_id, pins) = match parts[..] {
            ["wen1", tenant_id, enrollment_id, _secret] => (tenant_id, enrollment_id, Vec::new()),
            ["wen2", tenant_id, enrollment_id, _secret, pins] => (tenant_id, enrollment_id, pins.split('_').collect()),
            _ => return None,
        };
        let pin_ok = |p: &&str| p.len() == 64 && p.bytes().all(|b| b.is_ascii_hexdigit());
        if pins.len() > ENROLLMENT_PINS_MAX || !pins.iter().all(pin_ok) {
            return None;
        }
        Some(EnrollmentToken { tenant_id, enrollment_id, pins })
    }

    /// Whether `ca_pem` (an edge's CA certificate) is one the token pins; a token without pins
    /// pins nothing and accepts any.
    pub fn pins_ca(&self, ca_pem: &str) -> bool {
        let Some(der) = crate::pem::first(ca_pem, "CERTIFICATE") else { return false };
        self.pins.is_empty() || self.pins.iter().any(|p| p.eq_ignore_ascii_case(&crate::sha256_hex(&der)))
    }
}

/// `renew`: a CSR for the executor's new key, and `proof`, the signature (base64) of the
/// executor's *current* key over [`renewal_message`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    /// PEM `CERTIFICATE REQUEST` of the new key.
    pub csr: String,
    /// When the executor signed (ms since the epoch): a proof is good for
    /// [`RENEW_PROOF_SKEW_MS`] either way.
    pub issued_at_ms: u64,
    pub proof: String,
}

/// What the current key signs to renew: the domain, the current certificate's fingerprint, the
/// time and the new CSR's hash — so a proof renews only that certificate, for that key, once
/// in a while (a replayed proof yields a certificate for a key the replayer does not hold).
pub fn renewal_message(current_fingerprint: &str, issued_at_ms: u64, csr_der: &[u8]) -> Vec<u8> {
    format!("writ/executor-renew/v1\0{current_fingerprint}\0{issued_at_ms}\0{}", crate::sha256_hex(csr_der))
        .into_bytes()
}

/// `POST /v1/renew` on a node's admin API, as an edge forwards a renewal: the certificate the
/// executor presented (PEM) and its request. The node trusts neither the edge nor the
/// certificate's claims: it checks the certificate is an executor's current one in the ledger
/// and the proof against its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardedRenewal {
    pub certificate: String,
    pub renewal: RenewRequest,
}

pub mod decide;
mod fold;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enrollment_tokens_carry_their_edge_ca_pins() {
        let ca = "-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n";
        let pin = crate::sha256_hex(&[0, 1, 2]);
        let token = EnrollmentToken::format("t-1", "e-1", "s3cret", std::slice::from_ref(&pin));
        let parsed = EnrollmentToken::parse(&token).expect("parses");
        assert_eq!((parsed.tenant_id, parsed.enrollment_id, parsed.pins.clone()), ("t-1", "e-1", vec![pin.as_str()]));
        assert!(parsed.pins_ca(ca));
        assert!(!parsed.pins_ca(&ca.replace("AAEC", "AAED")), "another CA");
        assert!(!parsed.pins_ca("not pem"));
        let old = EnrollmentToken::parse("wen1.t-1.e-1.s3cret").expect("the unpinned form");
        assert!(old.pins.is_empty() && old.pins_ca(ca));
        for bad in ["wen2.t.e.s", "wen2.t.e.s.zz", "wen3.t.e.s", &format!("wen2.t.e.s.{}", [pin.as_str(); 5].join("_"))]
        {
            assert_eq!(EnrollmentToken::parse(bad), None, "{bad}");
        }
    }
}

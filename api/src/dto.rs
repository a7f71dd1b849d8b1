//! Wire DTOs of the ledger client API (node ↔ edge/admin) and the admin API (`/v1`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::audit::{AuditFilter, AuditRecord};
use crate::catalog::{CatalogSummary, CatalogVersion};
use crate::device::{Device, Enrollment, Executor, ExecutorCaV1, Site};
use crate::ledger::{Command, EventEnvelope, Outcome, Tenant};
use crate::principal::{Principal, PrincipalKind, RolePreset};
use crate::reason::ReasonCode;
use crate::token::{TenantIssuer, Token};

/// Default page size of list endpoints.
pub const PAGE_LIMIT_DEFAULT: u32 = 100;
/// Largest page size a list endpoint serves.
pub const PAGE_LIMIT_MAX: u32 = 1000;

/// Error body of every HTTP rejection: `{"reason":"…","code":N,"message":"…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub reason: ReasonCode,
    pub code: u16,
    pub message: String,
    /// Where to send the request instead (e.g. the current leader), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_hint: Option<String>,
}

/// `GET /client/watch` query: which events to deliver.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchFilter {
    /// First revision to deliver; default: only events after now.
    pub from: Option<u64>,
    /// Event stream (tenant id) to follow.
    pub stream: Option<String>,
    /// Event kind (e.g. `tenant_created`).
    pub kind: Option<String>,
}

impl WatchFilter {
    pub fn matches(&self, e: &EventEnvelope) -> bool {
        self.stream.as_ref().is_none_or(|s| *s == e.stream) && self.kind.as_ref().is_none_or(|k| k == e.event.kind())
    }
}

/// One line of the watch stream (NDJSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WatchLine {
    Event(Box<EventEnvelope>),
    /// Sent after [`WATCH_HEARTBEAT`] without an event: the feed is alive and every event up to
    /// revision `heartbeat` has been delivered (or filtered out).
    Heartbeat {
        heartbeat: u64,
    },
    /// The stream ended; a client resumes from `next`.
    End {
        end: ReasonCode,
        message: String,
        next: u64,
    },
}

/// Media type of the client API's binary encoding (`crate::encode`, bincode): a submit's
/// request and answer, and the watch stream's frames ([`WatchLine::frame`]). Asked for with
/// `Accept` (and, for a request body, `Content-Type`); without it the API speaks JSON.
pub const BINARY_MEDIA_TYPE: &str = "application/x-writ-bincode";

/// Largest binary watch frame a reader accepts (the bound of [`crate::decode`]).
pub const WATCH_FRAME_BYTES_MAX: usize = 64 * 1024 * 1024;

impl WatchLine {
    /// The line as one binary frame: its length (u32, little-endian, of what follows), a kind
    /// byte (0 event, 1 heartbeat, 2 end) and the bincode payload.
    pub fn frame(&self) -> Result<Vec<u8>, String> {
        let (kind, payload) = match self {
            WatchLine::Event(e) => (0u8, crate::encode(e.as_ref())),
            WatchLine::Heartbeat { heartbeat } => (1, crate::encode(heartbeat)),
            WatchLine::End { end, message, next } => (2, crate::encode(&(end, message, next))),
        };
        framed(kind, &payload.map_err(|e| e.to_string())?)
    }

    /// The frame of `WatchLine::Event(e)` from `crate::encode(&e)`, for a sender that holds the
    /// event's bytes already (a node sends the bytes it stored, not a second encoding).
    pub fn event_frame(encoded_event: &[u8]) -> Result<Vec<u8>, String> {
        framed(0, encoded_event)
    }

    /// Takes the first complete frame off `buf`: `Ok(None)` until one is complete; an error for
    /// a frame that is too long, of an unknown kind or undecodable (the stream is then broken).
    pub fn unframe(buf: &mut Vec<u8>) -> Result<Option<WatchLine>, String> {
        let Some(head) = buf.get(..4) else { return Ok(None) };
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len == 0 || len > WATCH_FRAME_BYTES_MAX {
            return Err(format!("a watch frame of {len} bytes (1..={WATCH_FRAME_BYTES_MAX})"));
        }
        if buf.len() < 4 + len {
            return Ok(None);
        }
        // Decoded where it lies; then the frame leaves the buffer in one move of what follows.
        let line = Self::decode_frame(buf[4], &buf[5..4 + len]);
        buf.drain(..4 + len);
        line.map(Some)
    }

    fn decode_frame(kind: u8, payload: &[u8]) -> Result<WatchLine, String> {
        let bad = |e: bincode::error::DecodeError| format!("an undecodable watch frame: {e}");
        Ok(match kind {
            0 => WatchLine::Event(Box::new(crate::decode(payload).map_err(bad)?)),
            1 => WatchLine::Heartbeat { heartbeat: crate::decode(payload).map_err(bad)? },
            2 => {
                let (end, message, next) = crate::decode(payload).map_err(bad)?;
                WatchLine::End { end, message, next }
            }
            other => return Err(format!("a watch frame of unknown kind {other}")),
        })
    }
}

fn framed(kind: u8, payload: &[u8]) -> Result<Vec<u8>, String> {
    let len = u32::try_from(payload.len() + 1).map_err(|_| "a watch frame over 4 GiB".to_string())?;
    let mut out = Vec::with_capacity(5 + payload.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(payload);
    Ok(out)
}

/// How often an idle watch stream proves it is alive.
pub const WATCH_HEARTBEAT: std::time::Duration = std::time::Duration::from_millis(500);

/// `POST /client/submit`: propose a command (forwarded to the leader if needed).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    pub trace_id: String,
    pub command: Command,
    /// The credential a principal's act was admitted under (an edge's acts need one: the node
    /// verifies it before proposing, see `crate::grant`); never stored.
    #[serde(default)]
    pub credential: Option<crate::credential::Credential>,
    /// Credentials of the principals the request decisions it carries name, at most one each
    /// (`crate::grant::vouched`): an edge records decisions only about principals whose
    /// requests it served. Never stored.
    #[serde(default)]
    pub vouchers: Vec<crate::credential::Credential>,
}

/// Longest trace id a submit may carry (a UUID is 36 bytes; W3C trace ids 32).
pub use crate::trace::TRACE_ID_BYTES_MAX;
/// Most vouchers one submit carries.
pub const VOUCHERS_MAX: usize = 64;

impl SubmitRequest {
    /// A submit of `command` that carries no principal's credential.
    pub fn new(trace_id: impl Into<String>, command: Command) -> SubmitRequest {
        SubmitRequest { trace_id: trace_id.into(), command, credential: None, vouchers: Vec::new() }
    }

    /// A submit of `command` with the credential of the principal whose act it is.
    pub fn acting(
        trace_id: impl Into<String>,
        command: Command,
        credential: crate::credential::Credential,
    ) -> SubmitRequest {
        SubmitRequest { credential: Some(credential), ..SubmitRequest::new(trace_id, command) }
    }

    /// What a node checks before proposing, whoever submits: what may be submitted at all, a
    /// trace id and an operation id within their bounds (refused, never echoed).
    pub fn check(&self) -> Result<(), crate::rejection::Rejection> {
        self.command.submittable()?;
        let invalid = |m: String| crate::rejection::Rejection::new(crate::ReasonCode::INPUT_INVALID, m);
        if self.trace_id.len() > TRACE_ID_BYTES_MAX {
            return Err(invalid(format!("a trace id is at most {TRACE_ID_BYTES_MAX} bytes")));
        }
        let max = crate::operation::KEY_BYTES_MAX;
        if self.command.operation_id().is_some_and(|id| id.len() > max) {
            return Err(invalid(format!("an operation id is at most {max} bytes")));
        }
        if self.vouchers.len() > VOUCHERS_MAX {
            return Err(invalid(format!("a submit carries at most {VOUCHERS_MAX} vouchers")));
        }
        let too_long = |c: &crate::credential::Credential| matches!(c, crate::credential::Credential::Bearer(t) if t.len() > crate::auth::BEARER_BYTES_MAX);
        if self.credential.iter().chain(&self.vouchers).any(too_long) {
            return Err(invalid(format!("a credential is at most {} bytes", crate::auth::BEARER_BYTES_MAX)));
        }
        Ok(())
    }
}

/// The committed result of a submit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubmitResponse {
    /// Raft log index the command was committed at.
    pub log_index: u64,
    pub outcome: Outcome,
    /// The node that answered was not the leader and forwarded the submit to it: a client
    /// sends its next submit to another node, and so finds the leader (no forward hop).
    #[serde(default)]
    pub forwarded: bool,
}

/// How fresh a read must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Consistency {
    /// Read-index through the leader: sees every write acknowledged before the read started.
    #[default]
    Linearizable,
    /// The serving node's applied state, possibly behind; only for explicitly marked hot paths.
    Stale,
}

/// Read-only questions to the ledger.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case", tag = "query")]
pub enum Query {
    ListTenants {
        after: Option<String>,
        limit: u32,
    },
    /// Looks a tenant up by id or by name.
    GetTenant {
        tenant: String,
    },
    /// Principals of a tenant (by tenant id), ordered by name.
    ListPrincipals {
        tenant_id: String,
        after: Option<String>,
        limit: u32,
    },
    /// A principal of a tenant by id or name.
    GetPrincipal {
        tenant_id: String,
        principal: String,
    },
    /// Sites of a tenant ordered by name.
    ListSites {
        tenant_id: String,
        after: Option<String>,
        limit: u32,
    },
    /// A site of a tenant by id or name.
    GetSite {
        tenant_id: String,
        site: String,
    },
    /// Devices of a tenant (optionally of one site, by id) ordered by name.
    ListDevices {
        tenant_id: String,
        site_id: Option<String>,
        after: Option<String>,
        limit: u32,
    },
    /// A device of a tenant by id or name.
    GetDevice {
        tenant_id: String,
        device: String,
    },
    /// A token record by `jti`.
    GetToken {
        tenant_id: String,
        jti: String,
    },
    /// A tenant's own token issuers, ordered by issuer.
    ListIssuers {
        tenant_id: String,
    },
    /// The catalog versions a tenant keeps, newest first.
    ListCatalogs {
        tenant_id: String,
    },
    /// One catalog version; the newest when `version` is `None`.
    GetCatalog {
        tenant_id: String,
        version: Option<u64>,
    },
    /// A tenant's executors, by id.
    ListExecutors {
        tenant_id: String,
    },
    /// An enrollment by id.
    GetEnrollment {
        tenant_id: String,
        enrollment_id: String,
    },
    /// The CA certificates a tenant's executor certificates may chain to.
    ListExecutorCas {
        tenant_id: String,
    },
    /// The cluster's signing keys and revocations, and with a tenant its executor CAs and
    /// revoked issuer token ids.
    Credentials {
        tenant_id: Option<String>,
    },
    /// An operation by id.
    GetOperation {
        tenant_id: String,
        operation_id: String,
    },
    /// The operation bound to a principal's idempotency key.
    GetOperationByKey {
        tenant_id: String,
        principal_id: String,
        idempotency_key: String,
    },
    /// A principal's own quotas (id or name).
    GetPrincipalQuotas {
        tenant_id: String,
        principal: String,
    },
    /// A tenant's audit records after sequence `after`, oldest first.
    ListAudit {
        tenant_id: String,
        after: Option<u64>,
        limit: u32,
        filter: AuditFilter,
    },
    /// A tenant's newest `limit` audit records, oldest first (the `writ://audit/recent`
    /// resource: edges keep no audit index of their own).
    RecentAudit {
        tenant_id: String,
        limit: u32,
    },
    /// A tenant's token records (of one principal, if given), by `jti` after `after`.
    ListTokens {
        tenant_id: String,
        principal_id: Option<String>,
        after: Option<String>,
        limit: u32,
    },
    /// A tenant's operations matching `filter`, by operation id (shorter ids first, then by
    /// bytes) after the cursor `after` (the operator's queue).
    ListOperations {
        tenant_id: String,
        filter: OperationFilter,
        after: Option<String>,
        limit: u32,
    },
    /// A work item by id.
    GetWork {
        tenant_id: String,
        work_id: String,
    },
    /// A tenant's work items (in one state, if given), by id after `after`.
    ListWork {
        tenant_id: String,
        state: Option<crate::work::WorkState>,
        after: Option<String>,
        limit: u32,
    },
    /// A tenant's storage figures (`crate::retention::storage`).
    GetTenantStorage {
        tenant_id: String,
    },
    /// An operation with its transitions.
    GetOperationHistory {
        tenant_id: String,
        operation_id: String,
    },
    /// An evidence blob of an operation, with its record (the bytes are read from the
    /// answering node's store).
    GetEvidence {
        tenant_id: String,
        operation_id: String,
        content_hash: String,
    },
    /// A tenant's upstream MCP servers, by name.
    ListUpstreams {
        tenant_id: String,
    },
    /// One upstream with its pinned and pending tool sets and its fuses.
    GetUpstream {
        tenant_id: String,
        name: String,
    },
}

/// [`Query::GetEvidence`]'s answer: the record and the bytes, base64.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvidenceContent {
    pub blob: crate::evidence::EvidenceBlobV1,
    pub content_base64: String,
}

pub use crate::operation::{OperationFilter, OPERATIONS_SCAN_MAX};

/// `GET /v1/tenants/{tenant}/work`: work items by id after `next_cursor`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkList {
    pub work: Vec<crate::work::WorkItem>,
    pub next_cursor: Option<String>,
}

/// `POST /v1/tenants/{tenant}/work`: devices by id or name.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateWorkRequest {
    pub id: String,
    pub title: String,
    pub owner: String,
    pub scope: crate::work::WorkScopeV1,
}

/// `PATCH /v1/tenants/{tenant}/work/{id}`: the fields given change (devices of a scope by id
/// or name); with `expected_revision`, refused with `STALE_REVISION` unless the item is still
/// there; `state: completed|cancelled` closes it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviseWorkRequest {
    #[serde(default)]
    pub expected_revision: Option<u64>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub owner: Option<String>,
    #[serde(default)]
    pub scope: Option<crate::work::WorkScopeV1>,
    #[serde(default)]
    pub state: Option<crate::work::WorkState>,
    #[serde(default)]
    pub note: Option<String>,
}

/// `GET /v1/tenants/{tenant}/operations/{id}/history`: the operation and its transitions,
/// oldest first (what `writ://operations/{id}` and `operation.readback` show agents).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OperationHistory {
    pub operation: crate::operation::Operation,
    pub transitions: Vec<crate::operation::TransitionV1>,
}

/// `POST /client/query`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    pub query: Query,
    #[serde(default)]
    pub consistency: Consistency,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "result")]
pub enum QueryResult {
    Tenants { tenants: Vec<Tenant>, next_cursor: Option<String> },
    Tenant { tenant: Tenant },
    Principals { principals: Vec<Principal>, next_cursor: Option<String> },
    Principal { principal: Principal },
    Sites { sites: Vec<Site>, next_cursor: Option<String> },
    Site { site: Site },
    Devices { devices: Vec<Device>, next_cursor: Option<String> },
    Device { device: Device },
    Token { token: Token },
    Issuers { issuers: Vec<TenantIssuer> },
    Catalogs { catalogs: Vec<CatalogSummary> },
    Catalog { catalog: CatalogVersion },
    Audit { records: Vec<AuditRecord>, next_cursor: Option<u64> },
    Executors { executors: Vec<Executor> },
    Enrollment { enrollment: Enrollment },
    ExecutorCas { cas: Vec<ExecutorCaV1> },
    PrincipalQuotas(PrincipalQuotasView),
    Operation(Box<crate::operation::Operation>),
    Credentials(Box<CredentialsView>),
    Operations { operations: Vec<crate::operation::Operation>, next_cursor: Option<String> },
    Tokens { tokens: Vec<Token>, next_cursor: Option<String> },
    Work(Box<crate::work::WorkItem>),
    Works { work: Vec<crate::work::WorkItem>, next_cursor: Option<String> },
    History(Box<OperationHistory>),
    Evidence(Box<EvidenceContent>),
    Storage(Box<crate::retention::TenantStorageV1>),
    Upstreams { upstreams: Vec<crate::upstream::UpstreamSummary> },
    Upstream(Box<crate::upstream::UpstreamV1>),
}

/// A typed answer taken out of a [`QueryResult`]: each query has one answer shape, so a caller
/// asks for the type it expects and a different shape is one error in one place
/// (`writ_client::query_as`), not a fallback arm at every call.
pub trait Answer: Sized {
    fn from_result(result: QueryResult) -> Option<Self>;
}

macro_rules! answer {
    ($($ty:ty: $pattern:pat => $value:expr;)*) => {$(
        impl Answer for $ty {
            fn from_result(result: QueryResult) -> Option<Self> {
                match result {
                    $pattern => Some($value),
                    _ => None,
                }
            }
        }
    )*};
}

answer! {
    TenantList: QueryResult::Tenants { tenants, next_cursor } => TenantList { tenants, next_cursor };
    Tenant: QueryResult::Tenant { tenant } => tenant;
    PrincipalList: QueryResult::Principals { principals, next_cursor } => PrincipalList { principals, next_cursor };
    Principal: QueryResult::Principal { principal } => principal;
    SiteList: QueryResult::Sites { sites, next_cursor } => SiteList { sites, next_cursor };
    Site: QueryResult::Site { site } => site;
    DeviceList: QueryResult::Devices { devices, next_cursor } => DeviceList { devices, next_cursor };
    Device: QueryResult::Device { device } => device;
    Token: QueryResult::Token { token } => token;
    IssuerList: QueryResult::Issuers { issuers } => IssuerList { issuers };
    CatalogList: QueryResult::Catalogs { catalogs } => CatalogList { catalogs };
    CatalogVersion: QueryResult::Catalog { catalog } => catalog;
    AuditPage: QueryResult::Audit { records, next_cursor } => AuditPage { records, next_cursor };
    ExecutorList: QueryResult::Executors { executors } => ExecutorList { executors };
    Enrollment: QueryResult::Enrollment { enrollment } => enrollment;
    Vec<ExecutorCaV1>: QueryResult::ExecutorCas { cas } => cas;
    PrincipalQuotasView: QueryResult::PrincipalQuotas(view) => view;
    crate::operation::Operation: QueryResult::Operation(op) => *op;
    CredentialsView: QueryResult::Credentials(view) => *view;
    OperationList: QueryResult::Operations { operations, next_cursor } => OperationList { operations, next_cursor };
    TokenList: QueryResult::Tokens { tokens, next_cursor } => TokenList { tokens, next_cursor };
    crate::work::WorkItem: QueryResult::Work(work) => *work;
    WorkList: QueryResult::Works { work, next_cursor } => WorkList { work, next_cursor };
    OperationHistory: QueryResult::History(history) => *history;
    EvidenceContent: QueryResult::Evidence(content) => *content;
    crate::retention::TenantStorageV1: QueryResult::Storage(storage) => *storage;
    Vec<crate::upstream::UpstreamSummary>: QueryResult::Upstreams { upstreams } => upstreams;
    crate::upstream::UpstreamV1: QueryResult::Upstream(upstream) => *upstream;
}

/// `GET /v1/cluster/credentials[?tenant=T]`: what signs and what is revoked or retired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialsView {
    /// `kid`s of the registered (not retired) token-signing keys.
    pub signing_keys: Vec<String>,
    /// Retired signing keys: `kid` → ledger time of retirement.
    pub retired_signing_keys: BTreeMap<String, u64>,
    /// Revoked role certificates (each kept until its `notAfter`).
    pub revoked_certificates: Vec<crate::revocation::RevokedRoleCertificateV1>,
    /// With `?tenant=`: that tenant's executor CAs and issuer revocations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<TenantCredentials>,
}

/// A tenant's part of [`CredentialsView`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantCredentials {
    pub tenant_id: String,
    /// Fingerprints of the executor CAs certificates may chain to.
    pub executor_cas: Vec<String>,
    /// Retired executor CAs: fingerprint → ledger time of retirement.
    pub retired_executor_cas: BTreeMap<String, u64>,
    /// Revoked token ids of the tenant's issuers: issuer → `jti` → kept until (ledger ms).
    pub revoked_issuer_tokens: BTreeMap<String, BTreeMap<String, u64>>,
    /// Edges that may act without a token: edge id → the principal id each acts as.
    pub anonymous: BTreeMap<String, String>,
}

/// `PUT /v1/tenants/{tenant}/anonymous/{edge}`: the principal (name or id) the edge may act as
/// without a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnonymousAccessRequest {
    pub principal: String,
}

/// `POST /v1/cluster/certificates/revoke`: a role certificate by serial (any hex spelling), the
/// identity it names and its `notAfter` (`writ admin credential revoke-cert --cert FILE` reads
/// them from the certificate).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokeCertificateRequest {
    pub serial: String,
    pub identity: String,
    pub not_after_ms: u64,
}

/// `POST /v1/tenants/{tenant}/issuers/revoke-token`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokeIssuerTokenRequest {
    pub issuer: String,
    pub jti: String,
}

/// The answer to [`RevokeIssuerTokenRequest`]: tokens with the id are refused until `until_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuerTokenRevocation {
    pub issuer: String,
    pub jti: String,
    pub until_ms: u64,
}

/// A principal's own quotas (its tenant's limits apply on top).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrincipalQuotasView {
    pub principal_id: String,
    pub quotas: crate::quota::PrincipalQuotasV2,
}

/// Raft role of a node as reported in status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Leader,
    Follower,
    Candidate,
    Learner,
    Shutdown,
}

/// What one node says about itself (`GET /client/status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub node_id: u64,
    pub addr: String,
    pub role: Role,
    pub term: u64,
    pub leader: Option<u64>,
    pub last_log_index: Option<u64>,
    pub last_applied_index: Option<u64>,
    pub snapshot_index: Option<u64>,
    pub purged_index: Option<u64>,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    /// Node id → address for every member.
    pub members: BTreeMap<u64, String>,
    /// Last event revision applied on this node.
    pub revision: u64,
    /// sha256 (hex) over the canonical state machine state at `last_applied_index`; empty when
    /// the caller did not ask for it (`/client/status?digest=false`: the digest encodes the
    /// whole state, seconds for a large one, so the nodes' own version watch never asks).
    #[serde(default)]
    pub state_digest: String,
    /// The newest ledger version the node understands (`writ_api::ledger::LEDGER_VERSION`, or
    /// lower where capped); a node that does not say runs version 1.
    #[serde(default = "first_ledger_version")]
    pub ledger_version: u32,
    /// The ledger version in force in the node's applied state (`LedgerState::ledger_version`,
    /// raised by the leader once every member understands it); 0 before any was.
    #[serde(default)]
    pub ledger_version_in_force: u32,
    /// The oldest event revision this node can replay (below it: REVISION_COMPACTED, reload a
    /// snapshot): raised by installed snapshots and by the event log's retention
    /// (`writ_api::retention::EVENT_LOG_KEPT_MS`).
    #[serde(default)]
    pub event_floor: u64,
    /// The node's data directory is short of space: while it is, the cluster refuses writes
    /// with STORAGE_FULL (`writ_node::storage`).
    #[serde(default)]
    pub storage_alarm: bool,
    /// The other members whose storage alarm was on when they last said (each member asks the
    /// others every few seconds): the leader refuses writes while this is not empty either.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub short_members: Vec<u64>,
}

fn first_ledger_version() -> u32 {
    1
}

/// One row of the cluster status: a member and what it answered (or why it did not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    pub node_id: u64,
    pub addr: String,
    pub status: Option<NodeStatus>,
    pub error: Option<String>,
}

/// `GET /v1/cluster/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    pub leader: Option<u64>,
    pub members: Vec<MemberStatus>,
}

/// Membership and maintenance actions (`POST /v1/cluster/...`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case", tag = "action")]
pub enum ClusterChange {
    /// Adds (or re-adds) a non-voting member and waits until it has caught up.
    AddLearner { node_id: u64, addr: String },
    /// Sets the voter set; members not listed are removed.
    ChangeMembership { voters: Vec<u64> },
    /// Builds a snapshot on the serving node now.
    Snapshot,
    /// Purges the serving node's log up to its last snapshot.
    PurgeLog,
}

/// `POST /v1/tenants`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTenantRequest {
    pub name: String,
    #[serde(default)]
    pub display_name: Option<String>,
    /// Settings other than the defaults; without `quotas`, the tenant gets
    /// [`crate::settings::QuotasV1::fresh_tenant`] (`"quotas": {}`: no limits).
    #[serde(default)]
    pub settings: Option<crate::settings::TenantSettingsPatch>,
}

/// `POST /v1/tenants/{tenant}/suspend`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuspendTenantRequest {
    #[serde(default)]
    pub note: Option<String>,
}

/// `GET /v1/tenants`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TenantList {
    pub tenants: Vec<Tenant>,
    pub next_cursor: Option<String>,
}

/// `POST /v1/tenants/{tenant}/principals`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreatePrincipalRequest {
    pub name: String,
    pub kind: PrincipalKind,
    #[serde(default)]
    pub preset: Option<RolePreset>,
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// The principal's own limits; without them it gets
    /// [`crate::quota::PrincipalQuotasV2::fresh_principal`] (`{}`: none of its own).
    #[serde(default)]
    pub quotas: Option<crate::quota::PrincipalQuotasV2>,
}

/// `POST /v1/tenants/{tenant}/principals/{principal}/revoke`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokePrincipalRequest {
    #[serde(default)]
    pub note: Option<String>,
}

/// `POST /v1/tenants/{tenant}/principals/{principal}/scopes/revoke`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokeScopeRequest {
    pub scope: String,
}

/// `GET /v1/tenants/{tenant}/principals`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PrincipalList {
    pub principals: Vec<Principal>,
    pub next_cursor: Option<String>,
}

/// `POST /v1/tenants/{tenant}/sites`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSiteRequest {
    pub name: String,
    #[serde(default)]
    pub display_name: Option<String>,
}

/// `POST /v1/tenants/{tenant}/devices`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateDeviceRequest {
    pub name: String,
    /// Site id or name.
    pub site: String,
    pub device_class: String,
}

/// `GET /v1/tenants/{tenant}/sites`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SiteList {
    pub sites: Vec<Site>,
    pub next_cursor: Option<String>,
}

/// `GET /v1/tenants/{tenant}/devices`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceList {
    pub devices: Vec<Device>,
    pub next_cursor: Option<String>,
}

/// `GET /v1/tenants/{tenant}/operations`: the operator's queue. `next_cursor` continues after
/// the last operation scanned (a filtered page may be short and still have more after it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OperationList {
    pub operations: Vec<crate::operation::Operation>,
    pub next_cursor: Option<String>,
}

/// `GET /v1/tenants/{tenant}/tokens`: token records (never the tokens themselves: Writ does not
/// keep them). `next_cursor` continues after the last record scanned.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenList {
    pub tokens: Vec<Token>,
    pub next_cursor: Option<String>,
}

/// `POST /v1/tenants/{tenant}/tokens`: issue a Writ token to a principal.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssueTokenRequest {
    /// Principal id or name.
    pub principal: String,
    /// Requested scopes; empty or absent means all of the principal's.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Requested lifetime; clamped to the tenant's token TTL bounds.
    #[serde(default)]
    pub ttl_s: Option<u64>,
    /// Audience (`aud`); default: the cluster's configured token audience.
    #[serde(default)]
    pub audience: Option<String>,
}

/// The admin route an edge forwards a token exchange to (RFC 8693 at `/t/{tenant}/oauth/token`):
/// authenticated by the subject token itself, not the operator token.
pub const ADMIN_TOKEN_EXCHANGE_PATH: &str = "/v1/token-exchange";

/// `POST /v1/token-exchange`: the holder of a Writ token with `tokens:delegate` asks for a
/// narrower child of it (same principal and audience, scopes within it, expiry no later).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenExchangeRequest {
    /// The tenant (name or id) whose token endpoint was called.
    pub tenant: String,
    /// The token exchanged: a Writ token of that tenant.
    pub subject_token: String,
    /// Scopes of the child (a subset of the subject token's); empty means all of them.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Requested lifetime (clamped by the tenant's limits and the subject token's expiry).
    #[serde(default)]
    pub ttl_s: Option<u64>,
}

/// `POST /v1/tenants/{tenant}/tokens/{jti}/delegate`: mint a child token of `jti`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelegateTokenRequest {
    /// Principal (id or name) the child is for; default: the parent's principal.
    #[serde(default)]
    pub principal: Option<String>,
    /// Must be a subset of the parent's scopes; empty means all of them.
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default)]
    pub ttl_s: Option<u64>,
    #[serde(default)]
    pub audience: Option<String>,
}

/// A freshly signed token. The bearer value is shown once and never stored by Writ.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IssuedToken {
    pub token: String,
    pub jti: String,
    pub tenant_id: String,
    pub principal_id: String,
    pub scopes: Vec<String>,
    pub audience: String,
    pub expires_at_ms: u64,
    pub parent_jti: Option<String>,
    pub depth: u32,
    /// Ledger revision of the issuance.
    pub revision: u64,
}

/// `POST /v1/tenants/{tenant}/tokens/{jti}/revoke`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RevokedToken {
    pub jti: String,
    /// Descendants revoked with it.
    pub cascade: Vec<String>,
    pub revision: u64,
}

/// `POST /v1/tokens/inspect`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InspectTokenRequest {
    pub token: String,
    /// Audience to verify against; default: the cluster's configured token audience.
    #[serde(default)]
    pub audience: Option<String>,
}

/// The verdict on a bearer token and, when it verifies, what it may do.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenInspection {
    pub valid: bool,
    pub reason: Option<ReasonCode>,
    pub message: Option<String>,
    pub authority: Option<crate::auth::Authority>,
    /// The token's header and claims as presented (unverified; secrets are not part of a JWT).
    pub header: Option<serde_json::Value>,
    pub claims: Option<serde_json::Value>,
}

/// `GET /v1/tenants/{tenant}/issuers`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IssuerList {
    pub issuers: Vec<TenantIssuer>,
}

/// `POST /client/issuer-refresh`: an edge met a token of a discovered issuer signed by a key
/// the ledger does not hold; the node fetches the issuer's keys again (rate-limited).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerRefreshRequest {
    pub issuer: String,
}

/// The answer: the revision that recorded new keys, none when nothing changed (or the node
/// fetched them too recently to fetch again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuerRefreshed {
    pub revision: Option<u64>,
}

/// `POST /v1/tenants/{tenant}/issuers/remove`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoveIssuerRequest {
    pub issuer: String,
}

/// `GET /v1/tenants/{tenant}/catalogs`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CatalogList {
    pub catalogs: Vec<CatalogSummary>,
}

/// `GET /v1/tenants/{tenant}/audit`: a page of records, oldest first; pass `next_cursor` as
/// `after` for the next page (absent at the end).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuditPage {
    pub records: Vec<AuditRecord>,
    pub next_cursor: Option<u64>,
}

/// `POST /v1/tenants/{tenant}/executors/enrollments`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateEnrollmentRequest {
    /// Site id or name.
    pub site: String,
    /// Device ids or names at that site the executor will serve.
    #[serde(default)]
    pub devices: Vec<String>,
    /// Lifetime of the token (default 1 h, at most 7 days).
    #[serde(default)]
    pub ttl_s: Option<u64>,
}

/// The one-time enrollment token, shown once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreatedEnrollment {
    pub token: String,
    pub enrollment: Enrollment,
}

/// `POST /v1/enroll`: an executor presents its token and a CSR (its private key stays with it).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrollRequest {
    pub token: String,
    /// PEM `CERTIFICATE REQUEST`.
    pub csr: String,
}

/// The issued certificate and the CA chain to trust.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EnrollResponse {
    pub executor_id: String,
    pub tenant_id: String,
    pub site_id: String,
    pub device_ids: Vec<String>,
    /// PEM certificate of the executor.
    pub certificate: String,
    /// PEM CA certificate that signed it.
    pub ca_certificate: String,
    pub fingerprint: String,
    pub serial: String,
    pub not_after_ms: u64,
}

/// `GET /v1/tenants/{tenant}/executors`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecutorList {
    pub executors: Vec<Executor>,
}

/// `POST /v1/cluster/learners`: add (or re-add) a non-voting member and wait for its catch-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddLearnerRequest {
    pub node_id: u64,
    pub addr: String,
}

/// `POST /v1/cluster/membership`: the new voter set (members not listed are removed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MembershipRequest {
    pub voters: Vec<u64>,
}

/// `POST …/operations/{id}/accept|reject`: the operator's verdict and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    #[serde(default)]
    pub note: String,
}

/// `POST …/operations/{id}/resolve`: how the operator reconciled an unknown effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolveRequest {
    pub outcome: crate::operation::AttemptOutcome,
    #[serde(default)]
    pub note: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event_of(line: &WatchLine) -> EventEnvelope {
        match line {
            WatchLine::Event(e) => e.as_ref().clone(),
            other => panic!("not an event: {other:?}"),
        }
    }

    /// Binary watch frames round-trip, split anywhere across reads, and a broken frame ends
    /// the stream with a reason instead of being misread.
    #[test]
    fn watch_frames_round_trip_across_any_split() {
        let event = EventEnvelope {
            revision: 7,
            stream: "t-1".into(),
            seq: 3,
            at_ms: 1_000,
            trace_id: "tr".into(),
            event: crate::ledger::Event::TenantResumedV1 { tenant_id: "t-1".into() },
        };
        let lines = vec![
            WatchLine::Event(Box::new(event)),
            WatchLine::Heartbeat { heartbeat: 7 },
            WatchLine::End { end: ReasonCode::LEDGER_UNAVAILABLE, message: "draining".into(), next: 8 },
        ];
        let bytes: Vec<u8> = lines.iter().flat_map(|l| l.frame().expect("frame")).collect();
        let stored = crate::encode(&event_of(&lines[0])).expect("encode");
        assert_eq!(
            WatchLine::event_frame(&stored).unwrap(),
            lines[0].frame().unwrap(),
            "an event's stored bytes frame it"
        );
        for split in 0..=bytes.len() {
            let (mut buf, mut out) = (bytes[..split].to_vec(), Vec::new());
            while let Some(l) = WatchLine::unframe(&mut buf).expect("frames") {
                out.push(l);
            }
            buf.extend_from_slice(&bytes[split..]);
            while let Some(l) = WatchLine::unframe(&mut buf).expect("frames") {
                out.push(l);
            }
            assert_eq!(out, lines, "split at {split}");
            assert!(buf.is_empty());
        }
        let mut unknown = vec![1, 0, 0, 0, 9];
        assert!(WatchLine::unframe(&mut unknown).unwrap_err().contains("unknown kind 9"));
        let mut huge = (u32::MAX).to_le_bytes().to_vec();
        assert!(WatchLine::unframe(&mut huge).is_err(), "a frame over the bound is refused before it is read");
        let mut garbage = vec![3, 0, 0, 0, 0, 0xff, 0xff];
        assert!(WatchLine::unframe(&mut garbage).unwrap_err().contains("undecodable"));
    }
}

/// The route an edge forwards the steps of a tenant's own authorization server to: its
/// authorization endpoint, the browser collecting its code, its token endpoint.
pub const ADMIN_OAUTH_GRANT_PATH: &str = "/v1/oauth/grant";

/// `PUT /v1/tenants/{tenant}/oauth/clients`: registers a client of the tenant's authorization
/// server as `principal`. A client id that is an `https://` URL with neither redirect URIs nor
/// keys given is a client ID metadata document: it is fetched (bounded, no redirects, public
/// addresses unless allowed) and must name that URL as its `client_id`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthClientRequest {
    pub client_id: String,
    /// The principal (name or id) the client acts as.
    pub principal: String,
    /// The most it may be given (empty: the principal's scopes).
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default)]
    pub redirect_uris: Option<Vec<String>>,
    /// Public keys (JWKS JSON text) for `private_key_jwt`.
    #[serde(default)]
    pub jwks: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// Let the metadata document live at a loopback or private address.
    #[serde(default)]
    pub allow_private_network: bool,
}

/// `GET /v1/tenants/{tenant}/oauth/clients`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OAuthClientList {
    pub clients: Vec<crate::oauth::OAuthClientV1>,
}

/// `POST /v1/tenants/{tenant}/oauth/clients/remove`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoveOAuthClientRequest {
    pub client_id: String,
}

/// An open authorization request as an operator sees it before deciding.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuthRequestView {
    pub request_id: String,
    pub client_id: String,
    pub client_name: Option<String>,
    pub principal_id: String,
    pub redirect_uri: String,
    pub scopes: Vec<String>,
    pub audience: String,
    /// `pending`, `approved`, `denied` or `code_issued`.
    pub status: String,
    pub decided_by: Option<String>,
    pub requested_at_ms: u64,
    pub expires_at_ms: u64,
}

/// `GET /v1/tenants/{tenant}/oauth/requests`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AuthRequestList {
    pub requests: Vec<AuthRequestView>,
}

/// A step of a tenant's authorization server, forwarded by an edge (`POST /v1/oauth/grant`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case", deny_unknown_fields)]
pub enum OAuthGrantRequest {
    /// A browser's authorization request (already checked for form by the edge).
    Authorize {
        tenant: String,
        client_id: String,
        redirect_uri: String,
        code_challenge: String,
        scopes: Vec<String>,
        /// The tenant's MCP URL the token is for.
        resource: String,
        state: Option<String>,
        browser_digest: String,
    },
    /// The browser that asked collects the code of its approved request (the node makes it,
    /// once its replica holds `revision`: the edge's, which saw the approval).
    Code { tenant: String, request_id: String, browser_digest: String, revision: u64 },
    /// A step the edge refused before forwarding it (the form, PKCE, the resource): recorded in
    /// the tenant's audit trail like the node's own refusals.
    Refused { tenant: String, client_id: Option<String>, method: String, reason: crate::reason::ReasonCode },
    /// The revocation endpoint (RFC 7009): a client revokes one of its refresh tokens.
    Revoke { tenant: String, client_id: String, token: String },
    /// The token endpoint.
    Token {
        tenant: String,
        grant: TokenGrant,
        #[serde(default)]
        scopes: Vec<String>,
        /// What a client assertion's `aud` may name: the tenant's issuer and token endpoint.
        #[serde(default)]
        assertion_audiences: Vec<String>,
        /// The resource asked for: must be the tenant's MCP URL (it always is for a client
        /// assertion's token).
        #[serde(default)]
        resource: Option<String>,
    },
}

/// The grant presented at a tenant's token endpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "grant_type", rename_all = "snake_case", deny_unknown_fields)]
pub enum TokenGrant {
    AuthorizationCode { client_id: String, code: String, code_verifier: String, redirect_uri: String },
    RefreshToken { client_id: String, refresh_token: String },
    ClientCredentials { client_assertion: String },
}

/// What a grant step answers: the request's id, its code, or a token (and its refresh token).
/// Codes and refresh tokens start with the ledger revision that recorded them (`<rev>.…`), so
/// whichever node they reach next waits until it holds them. `revision` is the one that
/// recorded a new request, so the edge shows its waiting page only once it holds the request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OAuthGrantAnswer {
    #[serde(default)]
    pub request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub token: Option<IssuedToken>,
    #[serde(default)]
    pub refresh_token: Option<String>,
}

/// `PUT /v1/operators`: creates or changes a named operator.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetOperatorRequest {
    pub name: String,
    pub role: crate::operator::OperatorRole,
    /// The one tenant (id or name) the operator works on; absent: the whole cluster.
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default)]
    pub display_name: Option<String>,
    /// How the operator signs in through an OpenID provider.
    #[serde(default)]
    pub sign_in: Option<crate::operator::SignInV1>,
}

/// `GET /v1/operators`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OperatorList {
    pub operators: Vec<crate::operator::OperatorV1>,
}

/// `POST /v1/operators/{name}/sessions`: a session for the operator (handed out once).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenOperatorSessionRequest {
    /// Lifetime in seconds (default 8 h, at most 12 h).
    #[serde(default)]
    pub ttl_s: Option<u64>,
    /// How long it may go unused, in seconds (default: no idle limit).
    #[serde(default)]
    pub idle_s: Option<u64>,
}

/// A session just opened: its credential is shown this once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OperatorSessionAnswer {
    pub operator: String,
    pub session_id: String,
    /// `wos_…`: the bearer credential of the admin API for this session.
    pub credential: String,
    pub expires_at_ms: u64,
}

/// `POST /v1/operators/{name}/sessions/close`: one session, or all (sign out everywhere).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloseOperatorSessionsRequest {
    #[serde(default)]
    pub session_id: Option<String>,
}

/// `GET /v1/operators/me`: who the caller is.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OperatorWhoAmI {
    /// What acts are recorded under: `operator:<name>`, or `break-glass`.
    pub actor: String,
    pub role: crate::operator::OperatorRole,
    pub tenant_id: Option<String>,
    pub session_id: Option<String>,
}

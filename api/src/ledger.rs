//! Ledger commands, events and their envelopes: what goes into the Raft log and what comes out.
//!
//! These types are persisted (log entries, snapshots, the event store), so their encoding is a
//! compatibility promise: variants are only ever appended, and a changed shape is a new `V2`
//! variant. `api/tests/golden.rs` pins the bytes.

pub use crate::tenant::{Tenant, TenantState};
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::audit::RequestDecisionV1;
use crate::catalog::CatalogV1;
use crate::device::{EnrollmentV1, ExecutorCaV1, ExecutorCertV1};
use crate::operation::{AttemptOutcome, EvidenceV1, ObservationV1, OperationSpecV1, OperationState, Verdict};
use crate::principal::PrincipalSpecV1;
use crate::quota::{PrincipalQuotasV1, PrincipalQuotasV2};
use crate::reason::ReasonCode;
use crate::revocation::RevokedRoleCertificateV1;
use crate::settings::{TenantSettingsPatch, TenantSettingsV1};
use crate::token::{IssuerKeysV1, IssuerSourceV1, SigningKeyV1, TenantIssuerV1, TokenRecordV1, TokenRequestV1};

/// Stream that holds events not owned by any tenant (e.g. rejections of unknown tenants).
pub const CLUSTER_STREAM: &str = "_cluster";

/// A command as proposed to Raft. The leader stamps `stamp_ms`; `apply` never reads a clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerRequest {
    /// Leader wall-clock stamp in milliseconds; apply uses `max(stamp, last applied time)`.
    pub stamp_ms: u64,
    pub trace_id: String,
    /// Shared, not copied: the leader's log cache hands the entry to the state machine and to
    /// every follower's replication stream (serialized as the command itself).
    pub command: std::sync::Arc<Command>,
}

/// Everything that can change ledger state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    CreateTenant {
        tenant_id: String,
        name: String,
        display_name: Option<String>,
    },
    SuspendTenant {
        tenant_id: String,
        note: Option<String>,
    },
    ResumeTenant {
        tenant_id: String,
    },
    SetTenantSettings {
        tenant_id: String,
        patch: TenantSettingsPatch,
    },
    CreatePrincipal {
        tenant_id: String,
        spec: PrincipalSpecV1,
    },
    /// Revokes a principal; every credential it holds stops working.
    RevokePrincipal {
        tenant_id: String,
        principal_id: String,
        note: Option<String>,
    },
    /// Takes one scope away from a principal (calls needing it get APP_SCOPE_REVOKED).
    RevokeScope {
        tenant_id: String,
        principal_id: String,
        scope: String,
    },
    /// Records a new token (for a principal, or delegated from a parent token).
    IssueToken {
        tenant_id: String,
        request: TokenRequestV1,
    },
    /// Revokes a token and, transitively, every token delegated from it.
    RevokeToken {
        tenant_id: String,
        jti: String,
    },
    CreateSite {
        tenant_id: String,
        site_id: String,
        name: String,
        display_name: Option<String>,
    },
    CreateDevice {
        tenant_id: String,
        device_id: String,
        site_id: String,
        name: String,
        device_class: String,
    },
    /// Publish a node's token-signing public key (cluster stream). Registering the same key
    /// again is a no-op; a different key under a taken `kid` is SIGNING_KEY_CONFLICT.
    RegisterSigningKey {
        key: SigningKeyV1,
    },
    /// Register (or replace) a tenant's own token issuer.
    SetTenantIssuer {
        tenant_id: String,
        issuer: TenantIssuerV1,
    },
    RemoveTenantIssuer {
        tenant_id: String,
        issuer: String,
    },
    /// Publish a checked catalog as the tenant's next version (a no-op when its digest equals
    /// the current version's).
    PublishCatalog {
        tenant_id: String,
        catalog: CatalogV1,
    },
    /// Create a one-time executor enrollment (only the token's hash is recorded).
    CreateEnrollment {
        tenant_id: String,
        enrollment: EnrollmentV1,
    },
    /// Use an enrollment: records the certificate issued for the executor. Refused when the
    /// token hash does not match, the enrollment expired, or it was used before.
    CompleteEnrollment {
        tenant_id: String,
        enrollment_id: String,
        token_sha256: String,
        cert: ExecutorCertV1,
    },
    RevokeExecutor {
        tenant_id: String,
        executor_id: String,
    },
    /// Record a CA certificate of the tenant's executors (a no-op when already recorded).
    RegisterExecutorCa {
        tenant_id: String,
        ca: ExecutorCaV1,
    },
    /// Record edge request decisions (each becomes an audit record), also for a suspended
    /// tenant: its denials are audited too.
    RecordDecisions {
        tenant_id: String,
        decisions: Vec<RequestDecisionV1>,
    },
    /// Set (or, with no limit, clear) a principal's own quotas.
    SetPrincipalQuotas {
        tenant_id: String,
        /// Principal id or name.
        principal: String,
        quotas: PrincipalQuotasV1,
    },
    /// An edge leases up to `wanted` requests of a principal's current quota window.
    LeaseRequestQuota {
        tenant_id: String,
        principal_id: String,
        wanted: u64,
    },
    /// Record an operation (idempotency binding, checks, device reservation) — before any
    /// attempt. Same key and payload: a replay, no event.
    SubmitOperation {
        tenant_id: String,
        spec: OperationSpecV1,
    },
    /// Hand a reserved operation to an executor.
    DispatchOperation {
        tenant_id: String,
        operation_id: String,
        executor_id: String,
    },
    /// The executor starts its (one) attempt, presenting the reservation's fencing token.
    StartAttempt {
        tenant_id: String,
        operation_id: String,
        executor_id: String,
        fencing_token: u64,
        lease_ms: u64,
    },
    /// The executor extends its attempt lease.
    RenewAttemptLease {
        tenant_id: String,
        operation_id: String,
        fencing_token: u64,
        lease_ms: u64,
    },
    /// How the attempt ended, with the executor's evidence.
    ReportAttempt {
        tenant_id: String,
        operation_id: String,
        fencing_token: u64,
        outcome: AttemptOutcome,
        evidence: Option<EvidenceV1>,
    },
    /// An observation of the effect by a principal other than the requester.
    RecordObservation {
        tenant_id: String,
        operation_id: String,
        observer_id: String,
        evidence: EvidenceV1,
    },
    /// The acceptance owner accepts or rejects a reported effect.
    DecideOperation {
        tenant_id: String,
        operation_id: String,
        by_principal_id: String,
        verdict: Verdict,
        note: String,
    },
    /// An operator or observer reconciles an `unknown_effect`.
    ResolveUnknownEffect {
        tenant_id: String,
        operation_id: String,
        by_principal_id: String,
        outcome: AttemptOutcome,
        note: String,
    },
    /// Cancel an operation no attempt has started for.
    CancelOperation {
        tenant_id: String,
        operation_id: String,
        by_principal_id: String,
    },
    /// Apply the time-driven transitions due by ledger time (deadlines, attempt leases).
    ExpireDue {
        tenant_id: String,
    },
    /// The executor a dispatch went to refuses it before attempting (stale deadline or fencing
    /// token, unmet local precondition): the operation fails without an attempt.
    RefuseDispatch {
        tenant_id: String,
        operation_id: String,
        executor_id: String,
        fencing_token: u64,
        reason: String,
    },
    /// The requester answers input requests of its operation waiting in `proposed`.
    AnswerInputs {
        tenant_id: String,
        operation_id: String,
        by_principal_id: String,
        /// Request id → the answer as JSON text (`{"action": "accept"|"decline"|"cancel", "content": …}`).
        answers: BTreeMap<String, String>,
    },
    /// Set (or, with no limit, clear) a principal's own request and operation quotas.
    SetPrincipalQuotasV2 {
        tenant_id: String,
        /// Principal id or name.
        principal: String,
        quotas: PrincipalQuotasV2,
    },
    /// A principal's act on an operation (answer, cancel, observe, decide) submitted by an edge
    /// on the principal's behalf: `authority_ref` names the token (or tenant issuer) the edge
    /// admitted the request under, and the ledger re-derives that authority and checks the
    /// scope the act needs before deciding `command` (SPEC S3; see
    /// `operation::decide::on_behalf_of`). Edges may submit those acts only this way.
    OnBehalfOf {
        authority_ref: String,
        command: Box<Command>,
    },
    /// Make `cert` an executor's current certificate: issued for a new key the executor proved
    /// with the key of its certificate `from_fingerprint` (SPEC X1; the admin API checks the
    /// proof and that certificate's validity). `from_fingerprint` must be one of the executor's
    /// certificates (current, or the one a renewal whose answer was lost replaced); refused for
    /// a revoked executor.
    RenewExecutorCertificate {
        tenant_id: String,
        executor_id: String,
        from_fingerprint: String,
        cert: ExecutorCertV1,
    },
    /// `command` together with the decision of the request that made it (SPEC D10): one log
    /// entry records both, so an effectful call costs no separate audit commit. The ledger
    /// writes the decision's outcome: `allowed` when `command` applies, `denied` with the
    /// rejection's reason when it is refused (the decision is recorded either way, after the
    /// command's events). `command` is neither `Audited` nor `RecordDecisions`.
    Audited {
        decision: RequestDecisionV1,
        command: Box<Command>,
    },
    /// Revoke the token id `jti` of the tenant's issuer `issuer` (SPEC S1): its tokens are
    /// refused until the tenant's longest token lifetime has passed (any token carrying it has
    /// expired by then).
    RevokeIssuerToken {
        tenant_id: String,
        issuer: String,
        jti: String,
    },
    /// Retire the Writ token-signing key `kid` (cluster stream): every token it signed is
    /// refused, and the key id can never be registered again (its node signs with a new key).
    RetireSigningKey {
        kid: String,
    },
    /// Retire the tenant's executor CA `fingerprint`: certificates it signed are refused at once
    /// and the nodes issue from the next CA they derive; it can never be registered again.
    RetireExecutorCa {
        tenant_id: String,
        fingerprint: String,
    },
    /// Revoke a role certificate of the cluster PKI (cluster stream): every node refuses it
    /// from the moment its state holds the revocation.
    RevokeRoleCertificate {
        certificate: RevokedRoleCertificateV1,
    },
    /// Record a principal's dry run of a call (SPEC E5): the same checks as a submission, no
    /// operation, no reservation; the proposal lets exactly this call be submitted once
    /// ([`Command::SubmitProposed`]) within [`crate::operation::PROPOSAL_TTL_MS`]. `spec` is the
    /// call as it would be submitted: its `operation_id` is the proposal id; its idempotency
    /// key, deadline and input requests are not used.
    ProposeOperation {
        tenant_id: String,
        spec: OperationSpecV1,
    },
    /// [`Command::SubmitOperation`] of a call its principal proposed: the proposal must be the
    /// principal's own, unexpired, unused and for exactly this call; it is used up.
    SubmitProposed {
        tenant_id: String,
        proposal_id: String,
        spec: OperationSpecV1,
    },
    /// Create a work item (revision 1, open) with its approved scope.
    CreateWork {
        tenant_id: String,
        work_id: String,
        title: String,
        owner: String,
        scope: crate::work::WorkScopeV1,
        by: String,
    },
    /// Change an open work item (its next revision), or close it. With `expected_revision`,
    /// refused with `STALE_REVISION` unless the item is still at that revision.
    ReviseWork {
        tenant_id: String,
        work_id: String,
        expected_revision: Option<u64>,
        change: crate::work::WorkChangeV1,
        by: String,
    },
    /// [`Command::RefuseDispatch`] with the refusal's reason code (`PRECONDITION_FAILED`, …),
    /// which the operation's history and the agent's answer carry.
    RefuseDispatchV2 {
        tenant_id: String,
        operation_id: String,
        executor_id: String,
        fencing_token: u64,
        reason: ReasonCode,
        message: String,
    },
    /// Grant one more scope to an existing principal (its tokens carry what they were issued
    /// with; new tokens may carry it). A grant of a scope revoked before lifts that revocation.
    GrantScope {
        tenant_id: String,
        principal_id: String,
        scope: String,
    },
    /// Delete a tenant (a tombstone, final): from the entry that applies it, its tokens,
    /// executors and every change are refused with `TENANT_DELETED`.
    DeleteTenant {
        tenant_id: String,
        note: Option<String>,
    },
    /// Store an evidence blob of an operation (see `crate::evidence`): the ledger keeps its
    /// record, each node its bytes.
    StoreEvidence {
        tenant_id: String,
        operation_id: String,
        mime_type: String,
        content_hash: String,
        content_base64: String,
        by: crate::evidence::Uploader,
    },
    /// Purge a deleted tenant's data once [`TENANT_PURGE_AFTER_MS`] of ledger time has passed
    /// since its deletion: every view of it, its audit trail and evidence go, and its name is
    /// free again (recorded in the cluster stream).
    PurgeTenant {
        tenant_id: String,
    },
    /// [`Command::ReportAttempt`] with its evidence's bytes: the report and the blob in one
    /// entry (the executor's common path keeps three commands per operation). The report
    /// always stands; a blob the store refuses (quota) is recorded as not stored.
    ReportAttemptV2 {
        tenant_id: String,
        operation_id: String,
        fencing_token: u64,
        outcome: AttemptOutcome,
        evidence: EvidenceV1,
        content: crate::evidence::EvidenceContentV1,
    },
    /// Apply the tenant's retention by ledger time (SPEC L9, D7; `crate::retention`): finished
    /// operations past the tenant's idempotency retention are compacted to their bindings,
    /// bindings past twice that are released, token records long expired and used or expired
    /// enrollments are dropped. The leader's reaper submits it when something is due.
    ApplyRetention {
        tenant_id: String,
    },
    /// Configure an upstream MCP server of the tenant (`crate::upstream`): create it
    /// (`create`, refused if the name is taken) or replace its configuration (refused if it
    /// does not exist). Raises its `config_version`, which closes every edge's fuse of it.
    PutUpstream {
        tenant_id: String,
        name: String,
        spec: crate::upstream::UpstreamSpecV1,
        create: bool,
    },
    RemoveUpstream {
        tenant_id: String,
        name: String,
    },
    /// Record the tool set just listed from the upstream: the pending diff when it differs
    /// from the pinned set (nothing pending when it equals it).
    ObserveUpstreamTools {
        tenant_id: String,
        name: String,
        tools: crate::upstream::UpstreamToolsV1,
    },
    /// Pin the pending tool set whose digest the operator saw.
    ApproveUpstreamTools {
        tenant_id: String,
        name: String,
        digest: String,
    },
    /// An edge's fuse of an upstream opened or closed (submitted by that edge).
    SetUpstreamFuse {
        tenant_id: String,
        name: String,
        edge_id: String,
        fuse: crate::upstream::FuseV1,
    },
    /// Commands the leader proposed together in one log entry (issue 17: one Raft entry,
    /// one append and one apply for many concurrent proposals). Each is executed in order as
    /// if it were an entry of its own, under its own trace id, with its own outcome and its own
    /// idempotency; the entry's outcome is [`Outcome::Batch`], one per command. Formed only by
    /// a leader (a submitted batch is refused), never nested, and never holding a command that
    /// carries evidence bytes.
    Batch {
        commands: Vec<BatchedCommand>,
    },
    /// A principal's act an edge submitted (`OnBehalfOf`, a submission or proposal, bare or
    /// `Audited`) with the credential the node that received it verified: `grant` is what every
    /// replica re-checks at ledger time (`crate::grant::check`) before deciding `command` — the
    /// token's id, principal and scopes, never the token. Formed by a node, never submitted by
    /// an edge.
    Verified {
        grant: crate::credential::GrantV1,
        command: Box<Command>,
    },
    /// Creates a tenant with its first settings in one entry (a fresh tenant never exists
    /// without the limits it was created with): `TenantCreatedV1`, then
    /// `TenantSettingsChangedV1` with the defaults patched by `settings`.
    CreateTenantWith {
        tenant_id: String,
        name: String,
        display_name: Option<String>,
        settings: TenantSettingsPatch,
    },
    /// Lets the edge `edge_id` (its certificate's id) act without a token as one principal of
    /// the tenant — the anonymous mode of a loopback edge — or, with `principal_id` `None`,
    /// takes that away. Only what this records is granted to an anonymous credential.
    SetAnonymousAccess {
        tenant_id: String,
        edge_id: String,
        principal_id: Option<String>,
    },
    /// Creates a principal with its first quotas in one entry: `PrincipalCreatedV1`, then
    /// `PrincipalQuotasSetV2`.
    CreatePrincipalWith {
        tenant_id: String,
        spec: PrincipalSpecV1,
        quotas: PrincipalQuotasV2,
    },
    /// Records what an MCP session of the 2025 wire changed (its log level, subscriptions, or
    /// its end): a principal's act, submitted by the edge that served the change.
    SetSessionState {
        tenant_id: String,
        session_id: String,
        session: crate::session::McpSessionV1,
    },
    /// Register (or replace) a tenant issuer known by its URL, with the keys the admin server
    /// just fetched from its discovery document's `jwks_uri`.
    SetIssuerSource {
        tenant_id: String,
        source: IssuerSourceV1,
        keys: IssuerKeysV1,
    },
    /// The keys a node fetched again from a discovered issuer (nodes only; a no-op when they
    /// equal the recorded ones).
    ObserveIssuerKeys {
        tenant_id: String,
        issuer: String,
        keys: IssuerKeysV1,
    },
    /// Registers (or replaces) a client of the tenant's own authorization server.
    SetOAuthClient {
        tenant_id: String,
        client: crate::oauth::OAuthClientV1,
    },
    /// Removes a client with its pending requests and refresh tokens.
    RemoveOAuthClient {
        tenant_id: String,
        client_id: String,
    },
    /// One step of a grant of the tenant's authorization server (nodes only: the admin server
    /// checks what its caller presented first).
    OAuthGrant {
        tenant_id: String,
        step: crate::oauth::GrantStepV1,
    },
    /// Sets a tenant's authorization settings (delegation depth, principal claim).
    SetOAuthSettings {
        tenant_id: String,
        settings: crate::oauth::OAuthSettingsV1,
    },
    /// Creates or changes a named operator (`crate::operator`).
    SetOperator {
        operator: crate::operator::OperatorV1,
    },
    /// Removes an operator and closes its sessions.
    RemoveOperator {
        name: String,
    },
    /// Opens a session of an operator; the admin API made its secret and keeps only its digest.
    OpenOperatorSession {
        session: crate::operator::OperatorSessionV1,
    },
    /// Closes one session of an operator, or all of them (signing out everywhere).
    CloseOperatorSessions {
        operator: String,
        session_id: Option<String>,
    },
    /// `command` made by the operator of session `session_id` through the admin API: every
    /// replica checks that the session stands and that its role and scope allow the act
    /// (`crate::operator::decide::check`), and records `OperatorActedV1` before the command's events.
    /// Formed by a node's admin API only (an edge may not submit it).
    ByOperator {
        session_id: String,
        command: Box<Command>,
    },
    /// Sets (or clears) the OpenID provider operators sign in to the console with.
    SetConsoleSignIn {
        sign_in: Option<crate::operator::ConsoleSignInV1>,
    },
    /// Records that a session was used (its idle limit counts from here); the admin API submits
    /// it at most every `crate::operator::USE_RECORDED_EVERY_MS` per session.
    UseOperatorSession {
        session_id: String,
    },
    /// An edge says an executor's dispatch stream opened (or is still open) or closed
    /// (`crate::device::ExecutorPresenceV1`); submitted by that edge under its own id.
    SetExecutorPresence {
        tenant_id: String,
        executor_id: String,
        edge_id: String,
        connected: bool,
    },
    /// [`Command::RecordDecisions`] with each decision's authority chain: the client fields as
    /// the edge saw them; the ledger fills the rest when it records them.
    RecordDecisionsV2 {
        tenant_id: String,
        decisions: Vec<crate::audit::RequestDecisionV2>,
    },
    /// [`Command::Audited`] with the decision's authority chain.
    AuditedV2 {
        decision: crate::audit::RequestDecisionV2,
        command: Box<Command>,
    },
    /// [`Command::ApplyRetention`], which also compacts operations whose reported effect nobody
    /// accepted or rejected within the tenant's idempotency retention (`crate::retention`).
    ApplyRetentionV2 {
        tenant_id: String,
    },
    /// Put ledger version `version` in force (cluster stream): what every replica applies from
    /// this entry on where the rules of two versions differ (`LedgerState::ledger_version`).
    /// A leader proposes it once every member runs a build of that version; the gate is the
    /// command's own version, so no member that cannot apply it ever sees it.
    RaiseLedgerVersion {
        version: u32,
    },
    /// [`Command::StoreEvidence`] with the blob's bytes instead of base64 (ledger version 20):
    /// a quarter smaller in the log, and no replica decodes it.
    StoreEvidenceV2 {
        tenant_id: String,
        operation_id: String,
        mime_type: String,
        content_hash: String,
        #[serde(with = "serde_bytes")]
        content: Vec<u8>,
        by: crate::evidence::Uploader,
    },
    /// [`Command::ReportAttemptV2`] with the blob's bytes instead of base64 (ledger version 20).
    ReportAttemptV3 {
        tenant_id: String,
        operation_id: String,
        fencing_token: u64,
        outcome: AttemptOutcome,
        evidence: EvidenceV1,
        content: crate::evidence::EvidenceBytesV1,
    },
}

/// One command of a [`Command::Batch`], with the trace id of the request that made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchedCommand {
    pub trace_id: String,
    pub command: Command,
}

/// The newest ledger version this build understands: what a node advertises
/// (`NodeStatus::ledger_version`). A leader proposes a command only when every member
/// understands its [`Command::ledger_version`] (an older node would stop at an entry it cannot
/// decode), so a rolling upgrade adds commands safely: new ones are refused with
/// `LEDGER_VERSION_GATED` until the last member runs the new build.
/// 1: everything before the gate existed. 2: work items, coded refusals, scope grants, tenant
/// delete and purge, evidence. 3: retention (`Command::ApplyRetention`). 4: upstream MCP servers.
/// 5: upstream operations (`Execution::UpstreamOperation`, `Event::OperationUpstreamBoundV1`)
/// and OAuth client credentials for upstreams. 6: command batches (`Command::Batch`).
/// 7: principal acts under a node-verified credential (`Command::Verified`).
/// 8: tenants and principals created with their settings and quotas
/// (`Command::CreateTenantWith`, `Command::CreatePrincipalWith`), anonymous access recorded in
/// the ledger (`Command::SetAnonymousAccess`). 9: MCP session records (`Command::SetSessionState`).
/// 10: tenant issuers known by their URL (`Command::SetIssuerSource`,
/// `Command::ObserveIssuerKeys`), a principal's own delegation (`Command::IssueToken` inside
/// `Command::OnBehalfOf`), operations of catalog `read` actions (`LedgerState::ledger_version_of`).
/// 11: the tenants' own authorization servers (`Command::SetOAuthClient`,
/// `Command::RemoveOAuthClient`, `Command::OAuthGrant`) and their settings
/// (`Command::SetOAuthSettings`). 12: named operators, their sessions and acts
/// (`Command::SetOperator`, `Command::ByOperator`, …). 13: executor presence
/// (`Command::SetExecutorPresence`). 14: request decisions with their authority chain
/// (`Command::RecordDecisionsV2`, `Command::AuditedV2`). 15: retention of reported effects
/// nobody decided (`Command::ApplyRetentionV2`). 16: the ledger version in force
/// (`Command::RaiseLedgerVersion`), and from 16 on, each tenant's audit hash chain over the
/// bytes of the events its records come from (`audit::AuditIndex::push_event`). 17: a record's
/// time in its tenant's audit index rounded up to the whole second (`state::audit_time`). 18: at
/// most a quarter as many records retired per retention entry (`retention::retired_per_entry`).
/// 19: closed work items retired one horizon after they closed (`Event::WorksRetiredV1`,
/// `retention::retires_works`). 20: evidence blobs carried as bytes (`Command::StoreEvidenceV2`,
/// `Command::ReportAttemptV3`; a leader proposes them as base64 while a member is older).
pub const LEDGER_VERSION: u32 = 20;

/// How long a deleted tenant's data is kept before it may be purged (30 days of ledger time):
/// the window in which an operator can still read what the tenant did.
pub const TENANT_PURGE_AFTER_MS: u64 = 30 * 24 * 3600 * 1000;

/// The domain whose rules decide a command (`crate::decide` dispatches on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Domain {
    Tenant,
    Principal,
    Token,
    Site,
    Catalog,
    Executor,
    Audit,
    Quota,
    Operation,
    Work,
    Retention,
    Upstream,
    OAuth,
    Operator,
    /// [`Command::Batch`]: executed command by command, never decided as one.
    Batch,
    /// The ledger version in force ([`Command::RaiseLedgerVersion`]).
    Ledger,
}

impl Command {
    /// The domain of this command: an exhaustive match, so a new command forces a decision
    /// about where its rules live.
    pub fn domain(&self) -> Domain {
        match self {
            Command::CreateTenant { .. }
            | Command::CreateTenantWith { .. }
            | Command::SuspendTenant { .. }
            | Command::ResumeTenant { .. }
            | Command::SetTenantSettings { .. }
            | Command::DeleteTenant { .. }
            | Command::PurgeTenant { .. } => Domain::Tenant,
            Command::CreatePrincipal { .. }
            | Command::CreatePrincipalWith { .. }
            | Command::RevokePrincipal { .. }
            | Command::RevokeScope { .. }
            | Command::GrantScope { .. } => Domain::Principal,
            Command::IssueToken { .. }
            | Command::RevokeToken { .. }
            | Command::RegisterSigningKey { .. }
            | Command::SetTenantIssuer { .. }
            | Command::RemoveTenantIssuer { .. }
            | Command::RevokeIssuerToken { .. }
            | Command::RetireSigningKey { .. }
            | Command::RevokeRoleCertificate { .. }
            | Command::SetAnonymousAccess { .. }
            | Command::SetSessionState { .. }
            | Command::SetIssuerSource { .. }
            | Command::ObserveIssuerKeys { .. } => Domain::Token,
            Command::CreateSite { .. } | Command::CreateDevice { .. } => Domain::Site,
            Command::PublishCatalog { .. } => Domain::Catalog,
            Command::CreateEnrollment { .. }
            | Command::CompleteEnrollment { .. }
            | Command::RevokeExecutor { .. }
            | Command::RegisterExecutorCa { .. }
            | Command::RenewExecutorCertificate { .. }
            | Command::RetireExecutorCa { .. }
            | Command::SetExecutorPresence { .. } => Domain::Executor,
            Command::RecordDecisions { .. } | Command::RecordDecisionsV2 { .. } => Domain::Audit,
            Command::SetPrincipalQuotas { .. }
            | Command::SetPrincipalQuotasV2 { .. }
            | Command::LeaseRequestQuota { .. } => Domain::Quota,
            Command::SubmitOperation { .. }
            | Command::ProposeOperation { .. }
            | Command::SubmitProposed { .. }
            | Command::DispatchOperation { .. }
            | Command::StartAttempt { .. }
            | Command::RenewAttemptLease { .. }
            | Command::ReportAttempt { .. }
            | Command::ReportAttemptV2 { .. }
            | Command::ReportAttemptV3 { .. }
            | Command::RecordObservation { .. }
            | Command::DecideOperation { .. }
            | Command::ResolveUnknownEffect { .. }
            | Command::CancelOperation { .. }
            | Command::ExpireDue { .. }
            | Command::RefuseDispatch { .. }
            | Command::RefuseDispatchV2 { .. }
            | Command::StoreEvidence { .. }
            | Command::StoreEvidenceV2 { .. }
            | Command::AnswerInputs { .. } => Domain::Operation,
            Command::CreateWork { .. } | Command::ReviseWork { .. } => Domain::Work,
            Command::ApplyRetention { .. } | Command::ApplyRetentionV2 { .. } => Domain::Retention,
            Command::PutUpstream { .. }
            | Command::RemoveUpstream { .. }
            | Command::ObserveUpstreamTools { .. }
            | Command::ApproveUpstreamTools { .. }
            | Command::SetUpstreamFuse { .. } => Domain::Upstream,
            Command::SetOAuthClient { .. }
            | Command::RemoveOAuthClient { .. }
            | Command::OAuthGrant { .. }
            | Command::SetOAuthSettings { .. } => Domain::OAuth,
            Command::SetOperator { .. }
            | Command::RemoveOperator { .. }
            | Command::OpenOperatorSession { .. }
            | Command::CloseOperatorSessions { .. }
            | Command::SetConsoleSignIn { .. }
            | Command::UseOperatorSession { .. } => Domain::Operator,
            Command::OnBehalfOf { command, .. }
            | Command::Audited { command, .. }
            | Command::AuditedV2 { command, .. }
            | Command::Verified { command, .. }
            | Command::ByOperator { command, .. } => command.domain(),
            Command::Batch { .. } => Domain::Batch,
            Command::RaiseLedgerVersion { .. } => Domain::Ledger,
        }
    }

    /// The command a wrapper (`Audited`, `OnBehalfOf`, `Verified`, `ByOperator`) carries; `None`
    /// for a plain command (a batch is no wrapper: its commands are entries of their own).
    pub fn wrapped(&self) -> Option<&Command> {
        match self {
            Command::OnBehalfOf { command, .. }
            | Command::Audited { command, .. }
            | Command::AuditedV2 { command, .. }
            | Command::Verified { command, .. }
            | Command::ByOperator { command, .. } => Some(command),
            _ => None,
        }
    }

    /// This command and every command its wrappers carry, outermost first: what a check of
    /// "the command as what it wraps" walks.
    pub fn layers(&self) -> impl Iterator<Item = &Command> {
        std::iter::successors(Some(self), |c| c.wrapped())
    }

    /// The plain command inside every wrapper.
    pub fn innermost(&self) -> &Command {
        self.layers().last().unwrap_or(self)
    }

    /// The executor (or performing edge, `edge:<id>`) a start or a refusal before the attempt
    /// claims an operation for, inside any wrapper: the node lets an edge claim only as itself.
    pub fn claimant(&self) -> Option<&str> {
        match self {
            Command::StartAttempt { executor_id, .. }
            | Command::RefuseDispatch { executor_id, .. }
            | Command::RefuseDispatchV2 { executor_id, .. } => Some(executor_id),
            Command::OnBehalfOf { command, .. }
            | Command::Audited { command, .. }
            | Command::AuditedV2 { command, .. }
            | Command::Verified { command, .. }
            | Command::ByOperator { command, .. } => command.claimant(),
            _ => None,
        }
    }

    /// A principal's act — answer, cancel, observe, decide, store evidence, create or revise work: the principal it
    /// is by and the scope it needs. Edges submit these only inside [`Command::OnBehalfOf`].
    pub fn principal_act(&self) -> Option<(&str, &'static str)> {
        use crate::operation::{
            APPROVAL_REQUEST, APPROVE_SCOPE, CANCEL_SCOPE, DECIDE_SCOPE, EXECUTE_SCOPE, OBSERVE_SCOPE,
        };
        match self {
            Command::AnswerInputs { by_principal_id, answers, .. } if answers.contains_key(APPROVAL_REQUEST) => {
                Some((by_principal_id, APPROVE_SCOPE))
            }
            Command::AnswerInputs { by_principal_id, .. } => Some((by_principal_id, EXECUTE_SCOPE)),
            Command::CancelOperation { by_principal_id, .. } => Some((by_principal_id, CANCEL_SCOPE)),
            Command::RecordObservation { observer_id, .. } => Some((observer_id, OBSERVE_SCOPE)),
            Command::StoreEvidence { by: crate::evidence::Uploader::Principal { principal_id }, .. }
            | Command::StoreEvidenceV2 { by: crate::evidence::Uploader::Principal { principal_id }, .. } => {
                Some((principal_id, OBSERVE_SCOPE))
            }
            Command::CreateWork { by, .. } | Command::ReviseWork { by, .. } => {
                Some((by, crate::work::WORK_WRITE_SCOPE))
            }
            Command::DecideOperation { by_principal_id, .. } => Some((by_principal_id, DECIDE_SCOPE)),
            Command::SetSessionState { session, .. } => {
                Some((session.principal_id.as_str(), crate::session::SESSION_SCOPE))
            }
            // A principal narrowing its own token into a child (token exchange).
            Command::IssueToken { request, .. } if request.parent_jti.is_some() => {
                Some((request.principal_id.as_str(), crate::principal::DELEGATE_SCOPE))
            }
            _ => None,
        }
    }

    /// The operation a command is about (by id; a submission names the one it would create).
    pub fn operation_id(&self) -> Option<&str> {
        match self {
            Command::SubmitOperation { spec, .. } | Command::SubmitProposed { spec, .. } => Some(&spec.operation_id),
            Command::DispatchOperation { operation_id, .. }
            | Command::StartAttempt { operation_id, .. }
            | Command::RenewAttemptLease { operation_id, .. }
            | Command::ReportAttempt { operation_id, .. }
            | Command::ReportAttemptV2 { operation_id, .. }
            | Command::ReportAttemptV3 { operation_id, .. }
            | Command::RecordObservation { operation_id, .. }
            | Command::DecideOperation { operation_id, .. }
            | Command::ResolveUnknownEffect { operation_id, .. }
            | Command::CancelOperation { operation_id, .. }
            | Command::RefuseDispatch { operation_id, .. }
            | Command::RefuseDispatchV2 { operation_id, .. }
            | Command::StoreEvidence { operation_id, .. }
            | Command::StoreEvidenceV2 { operation_id, .. }
            | Command::AnswerInputs { operation_id, .. } => Some(operation_id),
            Command::OnBehalfOf { command, .. }
            | Command::Audited { command, .. }
            | Command::AuditedV2 { command, .. }
            | Command::Verified { command, .. }
            | Command::ByOperator { command, .. } => command.operation_id(),
            _ => None,
        }
    }

    /// The same change as commands of older ledger versions, in several entries, for a cluster
    /// a member of which cannot read this command yet; `None` when there is no such form.
    pub fn older_form(&self) -> Option<Vec<Command>> {
        match self {
            Command::CreateTenantWith { tenant_id, name, display_name, settings } => Some(vec![
                Command::CreateTenant {
                    tenant_id: tenant_id.clone(),
                    name: name.clone(),
                    display_name: display_name.clone(),
                },
                Command::SetTenantSettings { tenant_id: tenant_id.clone(), patch: settings.clone() },
            ]),
            Command::CreatePrincipalWith { tenant_id, spec, quotas } => Some(vec![
                Command::CreatePrincipal { tenant_id: tenant_id.clone(), spec: spec.clone() },
                Command::SetPrincipalQuotasV2 {
                    tenant_id: tenant_id.clone(),
                    principal: spec.principal_id.clone(),
                    quotas: quotas.clone(),
                },
            ]),
            _ => None,
        }
    }

    /// This command with its request decisions recorded without their authority chains
    /// (`RecordDecisionsV2` as `RecordDecisions`, `AuditedV2` as `Audited`), through every
    /// wrapper: what a leader proposes while a member cannot read chains yet, so decisions are
    /// never held back by a rolling upgrade.
    pub fn without_authority_chains(&self) -> Command {
        match self {
            Command::RecordDecisionsV2 { tenant_id, decisions } => Command::RecordDecisions {
                tenant_id: tenant_id.clone(),
                decisions: decisions.iter().map(|d| d.decision.clone()).collect(),
            },
            Command::AuditedV2 { decision, command } => Command::Audited {
                decision: decision.decision.clone(),
                command: Box::new(command.without_authority_chains()),
            },
            other => other.map_inner(&Command::without_authority_chains),
        }
    }

    /// This command with the blobs it carries as base64 (`StoreEvidenceV2` as `StoreEvidence`,
    /// `ReportAttemptV3` as `ReportAttemptV2`), through every wrapper: what a leader proposes
    /// while a member cannot read blobs as bytes yet.
    pub fn with_blobs_as_base64(&self) -> Command {
        use crate::evidence::{to_base64, EvidenceContentV1};
        match self {
            Command::StoreEvidenceV2 { tenant_id, operation_id, mime_type, content_hash, content, by } => {
                Command::StoreEvidence {
                    tenant_id: tenant_id.clone(),
                    operation_id: operation_id.clone(),
                    mime_type: mime_type.clone(),
                    content_hash: content_hash.clone(),
                    content_base64: to_base64(content),
                    by: by.clone(),
                }
            }
            Command::ReportAttemptV3 { tenant_id, operation_id, fencing_token, outcome, evidence, content } => {
                Command::ReportAttemptV2 {
                    tenant_id: tenant_id.clone(),
                    operation_id: operation_id.clone(),
                    fencing_token: *fencing_token,
                    outcome: *outcome,
                    evidence: evidence.clone(),
                    content: EvidenceContentV1 {
                        mime_type: content.mime_type.clone(),
                        content_base64: to_base64(&content.bytes),
                    },
                }
            }
            other => other.map_inner(&Command::with_blobs_as_base64),
        }
    }

    /// This command with the base64 blob it carries as its bytes (`StoreEvidence` as
    /// `StoreEvidenceV2`, `ReportAttemptV2` as `ReportAttemptV3`), decoded once where it
    /// arrives; refused with `INPUT_INVALID` when the text is not standard base64.
    pub fn with_blob_bytes(self) -> Result<Command, crate::rejection::Rejection> {
        use crate::evidence::{from_base64, not_base64, EvidenceBytesV1};
        Ok(match self {
            Command::StoreEvidence { tenant_id, operation_id, mime_type, content_hash, content_base64, by } => {
                let content = from_base64(&content_base64).ok_or_else(not_base64)?;
                Command::StoreEvidenceV2 { tenant_id, operation_id, mime_type, content_hash, content, by }
            }
            Command::ReportAttemptV2 { tenant_id, operation_id, fencing_token, outcome, evidence, content } => {
                let bytes = from_base64(&content.content_base64).ok_or_else(not_base64)?;
                let content = EvidenceBytesV1 { mime_type: content.mime_type, bytes };
                Command::ReportAttemptV3 { tenant_id, operation_id, fencing_token, outcome, evidence, content }
            }
            other => other,
        })
    }

    /// This command with `f` applied to the commands it wraps (a wrapper's, a batch's), or a
    /// copy of it when it wraps none.
    fn map_inner(&self, f: &dyn Fn(&Command) -> Command) -> Command {
        let inner = |c: &Command| Box::new(f(c));
        match self {
            Command::Audited { decision, command } => {
                Command::Audited { decision: decision.clone(), command: inner(command) }
            }
            Command::AuditedV2 { decision, command } => {
                Command::AuditedV2 { decision: decision.clone(), command: inner(command) }
            }
            Command::Verified { grant, command } => Command::Verified { grant: grant.clone(), command: inner(command) },
            Command::ByOperator { session_id, command } => {
                Command::ByOperator { session_id: session_id.clone(), command: inner(command) }
            }
            Command::OnBehalfOf { authority_ref, command } => {
                Command::OnBehalfOf { authority_ref: authority_ref.clone(), command: inner(command) }
            }
            Command::Batch { commands } => Command::Batch {
                commands: commands
                    .iter()
                    .map(|b| BatchedCommand { trace_id: b.trace_id.clone(), command: f(&b.command) })
                    .collect(),
            },
            other => other.clone(),
        }
    }

    /// The oldest ledger version ([`LEDGER_VERSION`]) that decodes and decides this command: an
    /// exhaustive match, so a new command forces the decision.
    pub fn ledger_version(&self) -> u32 {
        match self {
            // A principal's own delegation (token exchange) came with version 10.
            Command::OnBehalfOf { command, .. } if matches!(**command, Command::IssueToken { .. }) => 10,
            Command::OnBehalfOf { command, .. } | Command::Audited { command, .. } => command.ledger_version(),
            Command::AuditedV2 { command, .. } => command.ledger_version().max(14),
            Command::RecordDecisionsV2 { .. } => 14,
            Command::Verified { command, .. } => command.ledger_version().max(7),
            Command::ByOperator { command, .. } => command.ledger_version().max(12),
            Command::SetOperator { .. }
            | Command::RemoveOperator { .. }
            | Command::OpenOperatorSession { .. }
            | Command::CloseOperatorSessions { .. }
            | Command::SetConsoleSignIn { .. }
            | Command::UseOperatorSession { .. } => 12,
            Command::SetExecutorPresence { .. } => 13,
            Command::CreateTenantWith { .. }
            | Command::SetAnonymousAccess { .. }
            | Command::CreatePrincipalWith { .. } => 8,
            Command::SetSessionState { .. } => 9,
            Command::SetIssuerSource { .. } | Command::ObserveIssuerKeys { .. } => 10,
            Command::SetOAuthClient { .. }
            | Command::RemoveOAuthClient { .. }
            | Command::OAuthGrant { .. }
            | Command::SetOAuthSettings { .. } => 11,
            Command::Batch { commands } => commands.iter().map(|c| c.command.ledger_version()).fold(6, u32::max),
            // A catalog is read by every member: one naming an upstream needs members that know
            // that execution (and its operations the event that binds them to it).
            Command::PublishCatalog { catalog, .. } => catalog
                .actions
                .iter()
                .map(|a| match a.execution {
                    crate::catalog::Execution::UpstreamOperation(_) => 5,
                    crate::catalog::Execution::Upstream(_) => 4,
                    _ => 1,
                })
                .max()
                .unwrap_or(1),
            // OAuth client credentials came with version 5.
            Command::PutUpstream { spec, .. }
                if matches!(spec.auth, crate::upstream::UpstreamAuthV1::OauthClientCredentials { .. }) =>
            {
                5
            }
            Command::PutUpstream { .. }
            | Command::RemoveUpstream { .. }
            | Command::ObserveUpstreamTools { .. }
            | Command::ApproveUpstreamTools { .. }
            | Command::SetUpstreamFuse { .. } => 4,
            Command::ApplyRetention { .. } => 3,
            Command::ApplyRetentionV2 { .. } => 15,
            Command::RaiseLedgerVersion { version } => (*version).max(16),
            Command::StoreEvidenceV2 { .. } | Command::ReportAttemptV3 { .. } => crate::evidence::BLOBS_AS_BYTES_FROM,
            Command::CreateWork { .. }
            | Command::ReviseWork { .. }
            | Command::RefuseDispatchV2 { .. }
            | Command::GrantScope { .. }
            | Command::DeleteTenant { .. }
            | Command::StoreEvidence { .. }
            | Command::PurgeTenant { .. }
            | Command::ReportAttemptV2 { .. } => 2,
            Command::CreateTenant { .. }
            | Command::SuspendTenant { .. }
            | Command::ResumeTenant { .. }
            | Command::SetTenantSettings { .. }
            | Command::CreatePrincipal { .. }
            | Command::RevokePrincipal { .. }
            | Command::RevokeScope { .. }
            | Command::IssueToken { .. }
            | Command::RevokeToken { .. }
            | Command::CreateSite { .. }
            | Command::CreateDevice { .. }
            | Command::RegisterSigningKey { .. }
            | Command::SetTenantIssuer { .. }
            | Command::RemoveTenantIssuer { .. }
            | Command::CreateEnrollment { .. }
            | Command::CompleteEnrollment { .. }
            | Command::RevokeExecutor { .. }
            | Command::RegisterExecutorCa { .. }
            | Command::RecordDecisions { .. }
            | Command::SetPrincipalQuotas { .. }
            | Command::LeaseRequestQuota { .. }
            | Command::SubmitOperation { .. }
            | Command::DispatchOperation { .. }
            | Command::StartAttempt { .. }
            | Command::RenewAttemptLease { .. }
            | Command::ReportAttempt { .. }
            | Command::RecordObservation { .. }
            | Command::DecideOperation { .. }
            | Command::ResolveUnknownEffect { .. }
            | Command::CancelOperation { .. }
            | Command::ExpireDue { .. }
            | Command::RefuseDispatch { .. }
            | Command::AnswerInputs { .. }
            | Command::SetPrincipalQuotasV2 { .. }
            | Command::RenewExecutorCertificate { .. }
            | Command::RevokeIssuerToken { .. }
            | Command::RetireSigningKey { .. }
            | Command::RetireExecutorCa { .. }
            | Command::RevokeRoleCertificate { .. }
            | Command::ProposeOperation { .. }
            | Command::SubmitProposed { .. } => 1,
        }
    }

    /// Whether the proposer of this (plain) command is answered with the events it appended.
    /// A batch of request decisions is not: its recorder (an edge, the admin API) reads only
    /// that it applied, and its one event holds up to a thousand decisions that every replica
    /// would copy into an answer only the leader sends. No stored evidence comes of it
    /// ([`Command::stored_blobs`] reads the answer's events).
    pub fn answered_with_events(&self) -> bool {
        !matches!(self, Command::RecordDecisions { .. } | Command::RecordDecisionsV2 { .. })
    }

    /// What this command stores once `outcome` applied it — a `StoreEvidence`, bare or on a
    /// principal's behalf, with its request's decision — keyed by
    /// [`crate::evidence::blob_key`]: what a node writes beside the state (its content was
    /// checked by `decide`; a retried upload writes the same bytes again). A [`Command::Batch`] stores what its commands would as entries of their own (a leader
    /// never batches a command that carries bytes, but a batch that did loses none).
    pub fn stored_blobs(&self, outcome: &Outcome) -> Vec<(Vec<u8>, Vec<u8>)> {
        match (self, outcome) {
            (Command::Batch { commands }, Outcome::Batch(outcomes)) => {
                commands.iter().zip(outcomes).flat_map(|(c, o)| c.command.stored_blobs(o)).collect()
            }
            _ => self.stored_blob(outcome).into_iter().collect(),
        }
    }

    /// [`Self::stored_blobs`] of one command that is not a batch.
    pub fn stored_blob(&self, outcome: &Outcome) -> Option<(Vec<u8>, Vec<u8>)> {
        let Outcome::Applied { events, .. } = outcome else { return None };
        // Only what the ledger recorded as stored (a report's blob may have been refused).
        let (tenant_id, blob) = events.iter().find_map(|e| match &e.event {
            Event::EvidenceStoredV1 { tenant_id, blob } => Some((tenant_id, blob)),
            _ => None,
        })?;
        let bytes = self.blob_content()?.bytes()?.into_owned();
        Some((crate::evidence::blob_key(tenant_id, &blob.operation_id, &blob.content_hash), bytes))
    }

    /// Refuses what no caller may submit: a batch (a leader forms one, from commands it took
    /// one by one, each checked on its own).
    pub fn submittable(&self) -> Result<(), crate::rejection::Rejection> {
        match self {
            Command::Batch { .. } => Err(crate::rejection::Rejection::new(
                ReasonCode::INPUT_INVALID,
                "a batch is formed by the leader, not submitted: submit its commands one by one",
            )),
            _ => Ok(()),
        }
    }

    /// Whether this command carries bytes for the evidence store (a leader proposes it in an
    /// entry of its own: one such command may be as large as an entry should be).
    pub fn carries_blob(&self) -> bool {
        self.blob_content().is_some()
    }

    /// The blob a command carries for the evidence store.
    pub fn blob_content(&self) -> Option<crate::evidence::Blob<'_>> {
        use crate::evidence::Blob;
        match self {
            Command::OnBehalfOf { command, .. }
            | Command::Audited { command, .. }
            | Command::AuditedV2 { command, .. }
            | Command::Verified { command, .. }
            | Command::ByOperator { command, .. } => command.blob_content(),
            Command::StoreEvidence { content_base64, .. } => Some(Blob::Base64(content_base64)),
            Command::ReportAttemptV2 { content, .. } => Some(Blob::Base64(&content.content_base64)),
            Command::StoreEvidenceV2 { content, .. } => Some(Blob::Bytes(content)),
            Command::ReportAttemptV3 { content, .. } => Some(Blob::Bytes(&content.bytes)),
            _ => None,
        }
    }

    /// Operation commands first apply their tenant's due transitions (see `operation::due`).
    pub fn is_operation(&self) -> bool {
        self.domain() == Domain::Operation
    }
}

/// Who a rejected command was about, as far as the command says.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectionSubject {
    pub principal_id: Option<String>,
    pub token_id: Option<String>,
    pub parent_token_id: Option<String>,
}

impl RejectionSubject {
    /// Each id within [`crate::operation::KEY_BYTES_MAX`]: a rejection records no unbounded text.
    pub fn bounded(self) -> RejectionSubject {
        let cut = |t: Option<String>| t.map(|t| crate::rejection::truncated(&t, crate::operation::KEY_BYTES_MAX));
        RejectionSubject {
            principal_id: cut(self.principal_id),
            token_id: cut(self.token_id),
            parent_token_id: cut(self.parent_token_id),
        }
    }
}

impl Command {
    /// Who the command is about, for the audit record of its rejection.
    pub fn subject(&self) -> RejectionSubject {
        let principal = |p: &str| RejectionSubject { principal_id: Some(p.to_string()), ..Default::default() };
        match self {
            Command::IssueToken { request, .. } => RejectionSubject {
                principal_id: Some(request.principal_id.clone()),
                token_id: Some(request.jti.clone()),
                parent_token_id: request.parent_jti.clone(),
            },
            Command::RevokeToken { jti, .. } => RejectionSubject { token_id: Some(jti.clone()), ..Default::default() },
            Command::CreatePrincipal { spec, .. } | Command::CreatePrincipalWith { spec, .. } => {
                principal(&spec.principal_id)
            }
            Command::RevokePrincipal { principal_id, .. }
            | Command::RevokeScope { principal_id, .. }
            | Command::GrantScope { principal_id, .. }
            | Command::LeaseRequestQuota { principal_id, .. } => principal(principal_id),
            Command::AnswerInputs { by_principal_id, .. } => principal(by_principal_id),
            Command::SetPrincipalQuotas { principal: p, .. } | Command::SetPrincipalQuotasV2 { principal: p, .. } => {
                principal(p)
            }
            Command::SubmitOperation { spec, .. }
            | Command::ProposeOperation { spec, .. }
            | Command::SubmitProposed { spec, .. } => RejectionSubject {
                principal_id: Some(spec.principal_id.clone()),
                token_id: Some(spec.authority_ref.clone()),
                parent_token_id: None,
            },
            Command::OnBehalfOf { authority_ref, command } => RejectionSubject {
                principal_id: command.principal_act().map(|(p, _)| p.to_string()),
                token_id: Some(authority_ref.clone()),
                parent_token_id: None,
            },
            Command::Audited { command, .. }
            | Command::AuditedV2 { command, .. }
            | Command::Verified { command, .. }
            | Command::ByOperator { command, .. } => command.subject(),
            Command::StoreEvidence { by: crate::evidence::Uploader::Principal { principal_id }, .. }
            | Command::StoreEvidenceV2 { by: crate::evidence::Uploader::Principal { principal_id }, .. } => {
                principal(principal_id)
            }
            _ => RejectionSubject::default(),
        }
    }

    /// Short kind name used in rejection events, logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::CreateTenant { .. } | Command::CreateTenantWith { .. } => "create_tenant",
            Command::SetAnonymousAccess { .. } => "set_anonymous_access",
            Command::SetSessionState { .. } => "set_session_state",
            Command::SetIssuerSource { .. } => "set_issuer_source",
            Command::ObserveIssuerKeys { .. } => "observe_issuer_keys",
            Command::SetOAuthClient { .. } => "set_oauth_client",
            Command::RemoveOAuthClient { .. } => "remove_oauth_client",
            Command::OAuthGrant { .. } => "oauth_grant",
            Command::SetOAuthSettings { .. } => "set_oauth_settings",
            Command::SuspendTenant { .. } => "suspend_tenant",
            Command::ResumeTenant { .. } => "resume_tenant",
            Command::SetTenantSettings { .. } => "set_tenant_settings",
            Command::CreatePrincipal { .. } | Command::CreatePrincipalWith { .. } => "create_principal",
            Command::RevokePrincipal { .. } => "revoke_principal",
            Command::RevokeScope { .. } => "revoke_scope",
            Command::IssueToken { .. } => "issue_token",
            Command::RevokeToken { .. } => "revoke_token",
            Command::CreateSite { .. } => "create_site",
            Command::CreateDevice { .. } => "create_device",
            Command::RegisterSigningKey { .. } => "register_signing_key",
            Command::SetTenantIssuer { .. } => "set_tenant_issuer",
            Command::RemoveTenantIssuer { .. } => "remove_tenant_issuer",
            Command::PublishCatalog { .. } => "publish_catalog",
            Command::CreateEnrollment { .. } => "create_enrollment",
            Command::CompleteEnrollment { .. } => "complete_enrollment",
            Command::RevokeExecutor { .. } => "revoke_executor",
            Command::RegisterExecutorCa { .. } => "register_executor_ca",
            Command::RecordDecisions { .. } | Command::RecordDecisionsV2 { .. } => "record_decisions",
            Command::SetPrincipalQuotas { .. } => "set_principal_quotas",
            Command::LeaseRequestQuota { .. } => "lease_request_quota",
            Command::SubmitOperation { .. } => "submit_operation",
            Command::DispatchOperation { .. } => "dispatch_operation",
            Command::StartAttempt { .. } => "start_attempt",
            Command::RenewAttemptLease { .. } => "renew_attempt_lease",
            Command::ReportAttempt { .. } => "report_attempt",
            Command::RecordObservation { .. } => "record_observation",
            Command::DecideOperation { .. } => "decide_operation",
            Command::ResolveUnknownEffect { .. } => "resolve_unknown_effect",
            Command::CancelOperation { .. } => "cancel_operation",
            Command::ExpireDue { .. } => "expire_due",
            Command::ApplyRetention { .. } | Command::ApplyRetentionV2 { .. } => "apply_retention",
            Command::RefuseDispatch { .. } => "refuse_dispatch",
            Command::AnswerInputs { .. } => "answer_inputs",
            Command::SetPrincipalQuotasV2 { .. } => "set_principal_quotas",
            Command::OnBehalfOf { command, .. }
            | Command::Audited { command, .. }
            | Command::AuditedV2 { command, .. }
            | Command::Verified { command, .. }
            | Command::ByOperator { command, .. } => command.kind(),
            Command::RenewExecutorCertificate { .. } => "renew_executor_certificate",
            Command::RevokeIssuerToken { .. } => "revoke_issuer_token",
            Command::RetireSigningKey { .. } => "retire_signing_key",
            Command::RetireExecutorCa { .. } => "retire_executor_ca",
            Command::RevokeRoleCertificate { .. } => "revoke_role_certificate",
            Command::RaiseLedgerVersion { .. } => "raise_ledger_version",
            Command::ProposeOperation { .. } => "propose_operation",
            Command::SubmitProposed { .. } => "submit_operation",
            Command::SetOperator { .. } => "set_operator",
            Command::RemoveOperator { .. } => "remove_operator",
            Command::OpenOperatorSession { .. } => "open_operator_session",
            Command::CloseOperatorSessions { .. } => "close_operator_sessions",
            Command::SetConsoleSignIn { .. } => "set_console_sign_in",
            Command::UseOperatorSession { .. } => "use_operator_session",
            Command::SetExecutorPresence { .. } => "set_executor_presence",
            Command::CreateWork { .. } => "create_work",
            Command::GrantScope { .. } => "grant_scope",
            Command::DeleteTenant { .. } => "delete_tenant",
            Command::StoreEvidence { .. } | Command::StoreEvidenceV2 { .. } => "store_evidence",
            Command::PurgeTenant { .. } => "purge_tenant",
            Command::ReportAttemptV2 { .. } | Command::ReportAttemptV3 { .. } => "report_attempt",
            Command::ReviseWork { .. } => "revise_work",
            Command::RefuseDispatchV2 { .. } => "refuse_dispatch",
            Command::PutUpstream { create: true, .. } => "add_upstream",
            Command::PutUpstream { create: false, .. } => "set_upstream",
            Command::RemoveUpstream { .. } => "remove_upstream",
            Command::ObserveUpstreamTools { .. } => "observe_upstream_tools",
            Command::ApproveUpstreamTools { .. } => "approve_upstream_tools",
            Command::SetUpstreamFuse { .. } => "set_upstream_fuse",
            Command::Batch { .. } => "batch",
        }
    }

    /// The event stream a command's events (or its rejection) belong to.
    pub fn stream(&self) -> &str {
        match self {
            Command::CreateTenant { tenant_id, .. }
            | Command::CreateTenantWith { tenant_id, .. }
            | Command::SetAnonymousAccess { tenant_id, .. }
            | Command::SetSessionState { tenant_id, .. }
            | Command::SetIssuerSource { tenant_id, .. }
            | Command::ObserveIssuerKeys { tenant_id, .. }
            | Command::SetOAuthClient { tenant_id, .. }
            | Command::RemoveOAuthClient { tenant_id, .. }
            | Command::OAuthGrant { tenant_id, .. }
            | Command::SetOAuthSettings { tenant_id, .. }
            | Command::SuspendTenant { tenant_id, .. }
            | Command::ResumeTenant { tenant_id }
            | Command::SetTenantSettings { tenant_id, .. }
            | Command::CreatePrincipal { tenant_id, .. }
            | Command::CreatePrincipalWith { tenant_id, .. }
            | Command::RevokePrincipal { tenant_id, .. }
            | Command::RevokeScope { tenant_id, .. }
            | Command::IssueToken { tenant_id, .. }
            | Command::RevokeToken { tenant_id, .. }
            | Command::CreateSite { tenant_id, .. }
            | Command::CreateDevice { tenant_id, .. }
            | Command::SetTenantIssuer { tenant_id, .. }
            | Command::RemoveTenantIssuer { tenant_id, .. }
            | Command::PublishCatalog { tenant_id, .. }
            | Command::CreateEnrollment { tenant_id, .. }
            | Command::CompleteEnrollment { tenant_id, .. }
            | Command::RevokeExecutor { tenant_id, .. }
            | Command::RegisterExecutorCa { tenant_id, .. }
            | Command::RecordDecisions { tenant_id, .. }
            | Command::RecordDecisionsV2 { tenant_id, .. }
            | Command::SetPrincipalQuotas { tenant_id, .. }
            | Command::LeaseRequestQuota { tenant_id, .. }
            | Command::SubmitOperation { tenant_id, .. }
            | Command::ProposeOperation { tenant_id, .. }
            | Command::SubmitProposed { tenant_id, .. }
            | Command::DispatchOperation { tenant_id, .. }
            | Command::StartAttempt { tenant_id, .. }
            | Command::RenewAttemptLease { tenant_id, .. }
            | Command::ReportAttempt { tenant_id, .. }
            | Command::ReportAttemptV2 { tenant_id, .. }
            | Command::ReportAttemptV3 { tenant_id, .. }
            | Command::RecordObservation { tenant_id, .. }
            | Command::DecideOperation { tenant_id, .. }
            | Command::ResolveUnknownEffect { tenant_id, .. }
            | Command::CancelOperation { tenant_id, .. }
            | Command::ExpireDue { tenant_id }
            | Command::ApplyRetention { tenant_id }
            | Command::ApplyRetentionV2 { tenant_id }
            | Command::RefuseDispatch { tenant_id, .. }
            | Command::AnswerInputs { tenant_id, .. }
            | Command::SetPrincipalQuotasV2 { tenant_id, .. }
            | Command::RenewExecutorCertificate { tenant_id, .. }
            | Command::RevokeIssuerToken { tenant_id, .. }
            | Command::RetireExecutorCa { tenant_id, .. }
            | Command::CreateWork { tenant_id, .. }
            | Command::GrantScope { tenant_id, .. }
            | Command::DeleteTenant { tenant_id, .. }
            | Command::StoreEvidence { tenant_id, .. }
            | Command::StoreEvidenceV2 { tenant_id, .. }
            | Command::ReviseWork { tenant_id, .. }
            | Command::RefuseDispatchV2 { tenant_id, .. }
            | Command::PutUpstream { tenant_id, .. }
            | Command::RemoveUpstream { tenant_id, .. }
            | Command::ObserveUpstreamTools { tenant_id, .. }
            | Command::ApproveUpstreamTools { tenant_id, .. }
            | Command::SetUpstreamFuse { tenant_id, .. }
            | Command::SetExecutorPresence { tenant_id, .. } => tenant_id,
            Command::RegisterSigningKey { .. }
            | Command::RetireSigningKey { .. }
            | Command::RevokeRoleCertificate { .. }
            | Command::PurgeTenant { .. }
            | Command::SetOperator { .. }
            | Command::RemoveOperator { .. }
            | Command::OpenOperatorSession { .. }
            | Command::CloseOperatorSessions { .. }
            | Command::SetConsoleSignIn { .. }
            | Command::UseOperatorSession { .. }
            | Command::RaiseLedgerVersion { .. }
            | Command::Batch { .. } => CLUSTER_STREAM,
            Command::OnBehalfOf { command, .. }
            | Command::Audited { command, .. }
            | Command::AuditedV2 { command, .. }
            | Command::Verified { command, .. }
            | Command::ByOperator { command, .. } => command.stream(),
        }
    }
}

/// What an event changes for executors' dispatch streams ([`Event::dispatch_change`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DispatchChange {
    /// This operation may have entered or left what some executor is offered.
    Operation { tenant_id: String, operation_id: String },
    /// The tenant's executors may have been accepted or refused anew: look at everything.
    Tenant { tenant_id: String },
    /// The whole replica was replaced (a snapshot): look at everything.
    All,
}

/// A domain event. Versioned forever: never edit a variant, add `...V2`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    TenantCreatedV1 {
        tenant_id: String,
        name: String,
        display_name: Option<String>,
    },
    TenantSuspendedV1 {
        tenant_id: String,
        note: Option<String>,
    },
    TenantResumedV1 {
        tenant_id: String,
    },
    /// A business-rule failure: recorded, never a panic (SPEC L4).
    CommandRejectedV1 {
        command: String,
        reason: ReasonCode,
        message: String,
    },
    /// The tenant's settings after a change (the whole value, so replay needs no patch logic).
    TenantSettingsChangedV1 {
        tenant_id: String,
        settings: TenantSettingsV1,
    },
    PrincipalCreatedV1 {
        tenant_id: String,
        spec: PrincipalSpecV1,
    },
    PrincipalRevokedV1 {
        tenant_id: String,
        principal_id: String,
        note: Option<String>,
    },
    ScopeRevokedV1 {
        tenant_id: String,
        principal_id: String,
        scope: String,
    },
    TokenIssuedV1 {
        tenant_id: String,
        token: TokenRecordV1,
    },
    /// `jti` was revoked; `cascade` lists every descendant revoked with it (sorted).
    TokenRevokedV1 {
        tenant_id: String,
        jti: String,
        cascade: Vec<String>,
    },
    SiteCreatedV1 {
        tenant_id: String,
        site_id: String,
        name: String,
        display_name: Option<String>,
    },
    DeviceCreatedV1 {
        tenant_id: String,
        device_id: String,
        site_id: String,
        name: String,
        device_class: String,
    },
    SigningKeyRegisteredV1 {
        key: SigningKeyV1,
    },
    TenantIssuerSetV1 {
        tenant_id: String,
        issuer: TenantIssuerV1,
    },
    TenantIssuerRemovedV1 {
        tenant_id: String,
        issuer: String,
    },
    CatalogPublishedV1 {
        tenant_id: String,
        version: u64,
        catalog: CatalogV1,
    },
    EnrollmentCreatedV1 {
        tenant_id: String,
        enrollment: EnrollmentV1,
    },
    ExecutorEnrolledV1 {
        tenant_id: String,
        enrollment_id: String,
        cert: ExecutorCertV1,
    },
    ExecutorRevokedV1 {
        tenant_id: String,
        executor_id: String,
    },
    ExecutorCaRegisteredV1 {
        tenant_id: String,
        ca: ExecutorCaV1,
    },
    RequestDecidedV1 {
        tenant_id: String,
        decision: RequestDecisionV1,
    },
    PrincipalQuotasSetV1 {
        tenant_id: String,
        principal_id: String,
        quotas: PrincipalQuotasV1,
    },
    /// `granted` requests of window `window` (ledger ms / 60,000), usable until
    /// `window_ends_at_ms` (ledger time); `granted` is 0 when the window's quota is spent.
    RequestQuotaLeasedV1 {
        tenant_id: String,
        principal_id: String,
        window: u64,
        granted: u64,
        window_ends_at_ms: u64,
    },
    /// The operation and its idempotency binding are recorded (state `verified`).
    OperationSubmittedV1 {
        tenant_id: String,
        spec: OperationSpecV1,
    },
    /// A device is held for an operation with the device's next fencing token (state
    /// `reserved`) until `expires_at_ms`.
    DeviceReservedV1 {
        tenant_id: String,
        device_id: String,
        operation_id: String,
        fencing_token: u64,
        expires_at_ms: u64,
    },
    DeviceReleasedV1 {
        tenant_id: String,
        device_id: String,
        operation_id: String,
    },
    /// `reserved → dispatched` to an executor.
    OperationDispatchedV1 {
        tenant_id: String,
        operation_id: String,
        executor_id: String,
    },
    /// Any other transition, with its cause.
    OperationTransitionedV1 {
        tenant_id: String,
        operation_id: String,
        from: OperationState,
        to: OperationState,
        cause: String,
    },
    /// The attempt's hold on its device now lasts until `expires_at_ms`.
    /// The attempt's lease (and the device's hold, when it drives one) runs until
    /// `expires_at_ms`.
    AttemptLeaseExtendedV1 {
        tenant_id: String,
        device_id: Option<String>,
        operation_id: String,
        expires_at_ms: u64,
    },
    EvidenceReportedV1 {
        tenant_id: String,
        operation_id: String,
        evidence: EvidenceV1,
    },
    ObservationRecordedV1 {
        tenant_id: String,
        operation_id: String,
        observation: ObservationV1,
    },
    /// A business-rule failure with the subject it concerns (the principal, the token and its
    /// parent), so a refused delegation or issue is traceable along its chain. Replaces
    /// `CommandRejectedV1` for new rejections.
    CommandRejectedV2 {
        command: String,
        reason: ReasonCode,
        message: String,
        subject: RejectionSubject,
    },
    /// Answers to an operation's input requests.
    OperationInputsAnsweredV1 {
        tenant_id: String,
        operation_id: String,
        answers: BTreeMap<String, String>,
    },
    /// A cancellation asked for while the operation is attempted (the executor decides).
    OperationCancelRequestedV1 {
        tenant_id: String,
        operation_id: String,
        by_principal_id: String,
    },
    /// A principal's own quotas after a change (the whole value).
    PrincipalQuotasSetV2 {
        tenant_id: String,
        principal_id: String,
        quotas: PrincipalQuotasV2,
    },
    /// An executor's new current certificate. The certificate it was renewed from stays
    /// accepted until it expires; any other certificate of the executor is forgotten (at most
    /// two per executor).
    ExecutorCertRenewedV1 {
        tenant_id: String,
        executor_id: String,
        from_fingerprint: String,
        cert: ExecutorCertV1,
    },
    /// Tokens of `issuer` with id `jti` are refused until ledger time `until_ms`.
    IssuerTokenRevokedV1 {
        tenant_id: String,
        issuer: String,
        jti: String,
        until_ms: u64,
    },
    SigningKeyRetiredV1 {
        kid: String,
    },
    /// The CA is no longer one of the tenant's executor CAs; executors it certified are
    /// forgotten (they enroll again).
    ExecutorCaRetiredV1 {
        tenant_id: String,
        fingerprint: String,
    },
    RoleCertificateRevokedV1 {
        certificate: RevokedRoleCertificateV1,
    },
    /// A principal recorded a dry run ([`Command::ProposeOperation`]).
    OperationProposedV1 {
        tenant_id: String,
        proposal: crate::operation::ProposalV1,
    },
    /// A proposal was used by the operation it let in: gone.
    ProposalUsedV1 {
        tenant_id: String,
        proposal_id: String,
        operation_id: String,
    },
    /// A batch of request decisions ([`Command::RecordDecisions`]): one event, one audit record
    /// per decision (in order). Replaces one `RequestDecidedV1` per decision, so a group commit
    /// of allowed reads costs the log, the event store and every watcher one event.
    RequestsDecidedV1 {
        tenant_id: String,
        decisions: Vec<RequestDecisionV1>,
    },
    /// A work item was created at revision 1, open.
    WorkCreatedV1 {
        tenant_id: String,
        work_id: String,
        title: String,
        owner: String,
        scope: crate::work::WorkScopeV1,
        by: String,
    },
    /// A work item moved to `revision` with `change`; when it closes, `operations` lists its
    /// operations as they stood.
    WorkRevisedV1 {
        tenant_id: String,
        work_id: String,
        revision: u64,
        change: crate::work::WorkChangeV1,
        by: String,
        operations: Vec<crate::work::WorkOperationV1>,
    },
    /// The executor a dispatch went to refused it before attempting, for `reason`: the
    /// operation fails (`dispatched → failed`) with that reason in its history.
    OperationRefusedV1 {
        tenant_id: String,
        operation_id: String,
        executor_id: String,
        reason: ReasonCode,
        cause: String,
    },
    /// A principal holds one more scope (and no longer has it revoked).
    ScopeGrantedV1 {
        tenant_id: String,
        principal_id: String,
        scope: String,
    },
    /// The tenant is a tombstone from here on.
    TenantDeletedV1 {
        tenant_id: String,
        note: Option<String>,
    },
    /// An evidence blob is stored (its bytes travelled in the command, not here).
    EvidenceStoredV1 {
        tenant_id: String,
        blob: crate::evidence::EvidenceBlobV1,
    },
    /// A deleted tenant's data is gone; its name is free.
    TenantPurgedV1 {
        tenant_id: String,
        name: String,
    },
    /// Evidence blobs older than the tenant's audit retention are gone (records and bytes).
    EvidenceExpiredV1 {
        tenant_id: String,
        blobs: Vec<crate::evidence::EvidenceRefV1>,
    },
    /// Finished operations past the idempotency retention keep only their compact bindings
    /// (`crate::retention`): their inputs, answers, observations and histories are gone.
    OperationsCompactedV1 {
        tenant_id: String,
        operation_ids: Vec<String>,
    },
    /// Compacted operations' bindings are released: their idempotency keys are free again.
    BindingsReleasedV1 {
        tenant_id: String,
        operation_ids: Vec<String>,
    },
    /// Token records expired longer ago than the tenant's longest token lifetime, and used or
    /// expired enrollments, are dropped.
    CredentialsRetiredV1 {
        tenant_id: String,
        jtis: Vec<String>,
        enrollments: Vec<String>,
    },
    /// An upstream was created or reconfigured: its whole record after the change (tool sets
    /// and fuses kept; `config_version` raised).
    UpstreamSetV1 {
        tenant_id: String,
        upstream: crate::upstream::UpstreamV1,
    },
    UpstreamRemovedV1 {
        tenant_id: String,
        name: String,
    },
    /// A listed tool set that differs from the pinned one (`None`: it equals the pinned set,
    /// nothing is pending any more).
    UpstreamToolsObservedV1 {
        tenant_id: String,
        name: String,
        pending: Option<crate::upstream::UpstreamToolsV1>,
    },
    UpstreamToolsApprovedV1 {
        tenant_id: String,
        name: String,
        digest: String,
    },
    UpstreamFuseChangedV1 {
        tenant_id: String,
        name: String,
        edge_id: String,
        fuse: crate::upstream::FuseV1,
    },
    /// The operation just submitted is performed by an edge calling the upstream tool `target`
    /// (`<upstream>/<tool>`, its action's `upstream_operation`): no executor is offered it, and
    /// only an edge ([`EDGE_PERFORMER_PREFIX`]) claims its attempt.
    OperationUpstreamBoundV1 {
        tenant_id: String,
        operation_id: String,
        target: String,
    },
    /// The edge `edge_id` may act without a token as `principal_id` (`None`: no longer).
    AnonymousAccessSetV1 {
        tenant_id: String,
        edge_id: String,
        principal_id: Option<String>,
    },
    /// An MCP session's record (`Command::SetSessionState`).
    SessionStateSetV1 {
        tenant_id: String,
        session_id: String,
        session: crate::session::McpSessionV1,
    },
    /// A tenant issuer known by its URL: where its keys come from (its keys themselves are a
    /// `TenantIssuerSetV1`).
    IssuerSourceSetV1 {
        tenant_id: String,
        source: IssuerSourceV1,
        jwks_uri: String,
    },
    /// A client of the tenant's authorization server registered or replaced.
    OAuthClientSetV1 {
        tenant_id: String,
        client: crate::oauth::OAuthClientV1,
    },
    /// A client removed, with its requests and refresh tokens.
    OAuthClientRemovedV1 {
        tenant_id: String,
        client_id: String,
    },
    /// A grant step of the tenant's authorization server, at ledger time `at_ms` (what
    /// expired by then leaves as it is folded).
    OAuthGrantV1 {
        tenant_id: String,
        change: crate::oauth::GrantChangeV1,
        at_ms: u64,
    },
    /// A tenant's authorization settings changed.
    OAuthSettingsSetV1 {
        tenant_id: String,
        settings: crate::oauth::OAuthSettingsV1,
    },
    /// An operator created or changed (cluster stream).
    OperatorSetV1 {
        operator: crate::operator::OperatorV1,
    },
    /// An operator removed with its sessions (cluster stream).
    OperatorRemovedV1 {
        name: String,
    },
    /// An operator signed in (cluster stream).
    OperatorSessionOpenedV1 {
        session: crate::operator::OperatorSessionV1,
    },
    /// One session of an operator, or all of them, closed (cluster stream).
    OperatorSessionsClosedV1 {
        operator: String,
        session_id: Option<String>,
    },
    /// Who made the command whose events follow in the same entry: a named operator with its
    /// role, on the stream the command changes (a tenant's audit names the person).
    OperatorActedV1 {
        tenant_id: String,
        operator: String,
        role: crate::operator::OperatorRole,
        command: String,
    },
    /// The console's sign-in provider set or cleared (cluster stream).
    ConsoleSignInSetV1 {
        sign_in: Option<crate::operator::ConsoleSignInV1>,
    },
    /// A session was used at ledger time `at_ms` (cluster stream).
    OperatorSessionUsedV1 {
        session_id: String,
        at_ms: u64,
    },
    /// An executor's connection as its edge said at `at_ms`; `changed`: it connected,
    /// disconnected or moved to another edge (audited), else a confirmation (not audited).
    ExecutorPresenceV1 {
        tenant_id: String,
        executor_id: String,
        edge_id: String,
        connected: bool,
        changed: bool,
        at_ms: u64,
    },
    /// Request decisions with the authority chain each was decided under, completed by the
    /// ledger ([`Command::RecordDecisionsV2`], [`Command::AuditedV2`]): one audit record each.
    RequestsDecidedV2 {
        tenant_id: String,
        decisions: Vec<crate::audit::RequestDecisionV2>,
    },
    /// Ledger version `version` is in force from this event on ([`Command::RaiseLedgerVersion`]).
    LedgerVersionRaisedV1 {
        version: u32,
    },
    /// Work items closed longer ago than the tenant's retention horizon are dropped (from ledger
    /// version 19 on, `crate::retention::retires_works`): their ids are free again.
    WorksRetiredV1 {
        tenant_id: String,
        work_ids: Vec<String>,
    },
}

/// How an edge names itself where an executor id goes when it performs an upstream operation:
/// `edge:<its certificate's id>` (executor ids are `x-<uuid>`, so the two never meet).
pub const EDGE_PERFORMER_PREFIX: &str = "edge:";

impl Event {
    /// Whether folding this event may make a bearer token verified before it verify
    /// differently now (a revocation, a suspension, a key or issuer change): caches of verified
    /// tokens (`writ_client::verifier`) forget everything when one is folded. An exhaustive
    /// match, so a new event forces the decision. Events that only make tokens verify that
    /// failed before (a token issued) need not, since failures are never cached; a principal
    /// created (it may make an issuer's `sub` ambiguous) or a tenant resumed count anyway.
    pub fn affects_authentication(&self) -> bool {
        match self {
            Event::TenantSuspendedV1 { .. }
            | Event::TenantResumedV1 { .. }
            | Event::TenantSettingsChangedV1 { .. }
            | Event::PrincipalCreatedV1 { .. }
            | Event::PrincipalRevokedV1 { .. }
            | Event::ScopeRevokedV1 { .. }
            | Event::TokenRevokedV1 { .. }
            | Event::SigningKeyRegisteredV1 { .. }
            | Event::SigningKeyRetiredV1 { .. }
            | Event::TenantIssuerSetV1 { .. }
            | Event::TenantIssuerRemovedV1 { .. }
            | Event::IssuerTokenRevokedV1 { .. }
            | Event::ScopeGrantedV1 { .. }
            | Event::TenantDeletedV1 { .. }
            | Event::TenantPurgedV1 { .. }
            | Event::AnonymousAccessSetV1 { .. }
            | Event::IssuerSourceSetV1 { .. }
            | Event::OAuthSettingsSetV1 { .. } => true,
            Event::TenantCreatedV1 { .. }
            | Event::OperatorSetV1 { .. }
            | Event::OperatorRemovedV1 { .. }
            | Event::OperatorSessionOpenedV1 { .. }
            | Event::OperatorSessionsClosedV1 { .. }
            | Event::ConsoleSignInSetV1 { .. }
            | Event::OperatorSessionUsedV1 { .. }
            | Event::OperatorActedV1 { .. }
            | Event::OAuthClientSetV1 { .. }
            | Event::OAuthClientRemovedV1 { .. }
            | Event::OAuthGrantV1 { .. }
            | Event::SessionStateSetV1 { .. }
            | Event::CommandRejectedV1 { .. }
            | Event::CommandRejectedV2 { .. }
            | Event::TokenIssuedV1 { .. }
            | Event::SiteCreatedV1 { .. }
            | Event::DeviceCreatedV1 { .. }
            | Event::CatalogPublishedV1 { .. }
            | Event::EnrollmentCreatedV1 { .. }
            | Event::ExecutorEnrolledV1 { .. }
            | Event::ExecutorRevokedV1 { .. }
            | Event::ExecutorCaRegisteredV1 { .. }
            | Event::ExecutorCertRenewedV1 { .. }
            | Event::ExecutorCaRetiredV1 { .. }
            | Event::ExecutorPresenceV1 { .. }
            | Event::RoleCertificateRevokedV1 { .. }
            | Event::LedgerVersionRaisedV1 { .. }
            | Event::RequestDecidedV1 { .. }
            | Event::RequestsDecidedV1 { .. }
            | Event::RequestsDecidedV2 { .. }
            | Event::PrincipalQuotasSetV1 { .. }
            | Event::PrincipalQuotasSetV2 { .. }
            | Event::RequestQuotaLeasedV1 { .. }
            | Event::OperationSubmittedV1 { .. }
            | Event::DeviceReservedV1 { .. }
            | Event::DeviceReleasedV1 { .. }
            | Event::OperationDispatchedV1 { .. }
            | Event::OperationTransitionedV1 { .. }
            | Event::AttemptLeaseExtendedV1 { .. }
            | Event::EvidenceReportedV1 { .. }
            | Event::ObservationRecordedV1 { .. }
            | Event::OperationInputsAnsweredV1 { .. }
            | Event::OperationCancelRequestedV1 { .. }
            | Event::OperationProposedV1 { .. }
            | Event::ProposalUsedV1 { .. }
            | Event::WorkCreatedV1 { .. }
            | Event::WorkRevisedV1 { .. }
            | Event::OperationRefusedV1 { .. }
            | Event::EvidenceStoredV1 { .. }
            | Event::EvidenceExpiredV1 { .. }
            | Event::OperationsCompactedV1 { .. }
            | Event::BindingsReleasedV1 { .. }
            | Event::CredentialsRetiredV1 { .. }
            | Event::WorksRetiredV1 { .. }
            | Event::UpstreamSetV1 { .. }
            | Event::UpstreamRemovedV1 { .. }
            | Event::UpstreamToolsObservedV1 { .. }
            | Event::UpstreamToolsApprovedV1 { .. }
            | Event::UpstreamFuseChangedV1 { .. }
            | Event::OperationUpstreamBoundV1 { .. } => false,
        }
    }

    /// What folding this event may change for executors' dispatch streams: one operation's
    /// place in them (it enters or leaves `reserved`, is dispatched or started), or — an
    /// enrollment, renewal or revocation, a tenant suspended or resumed — whether an executor is
    /// still accepted at all. Edges feed their dispatch streams from this, not from rescans.
    pub fn dispatch_change(&self) -> Option<DispatchChange> {
        let one = |tenant_id: &String, operation_id: &String| {
            Some(DispatchChange::Operation { tenant_id: tenant_id.clone(), operation_id: operation_id.clone() })
        };
        match self {
            Event::OperationTransitionedV1 { tenant_id, operation_id, .. }
            | Event::DeviceReservedV1 { tenant_id, operation_id, .. }
            | Event::OperationDispatchedV1 { tenant_id, operation_id, .. }
            | Event::OperationRefusedV1 { tenant_id, operation_id, .. } => one(tenant_id, operation_id),
            Event::ExecutorEnrolledV1 { tenant_id, .. }
            | Event::ExecutorRevokedV1 { tenant_id, .. }
            | Event::ExecutorCertRenewedV1 { tenant_id, .. }
            | Event::ExecutorCaRetiredV1 { tenant_id, .. }
            | Event::TenantSuspendedV1 { tenant_id, .. }
            | Event::TenantDeletedV1 { tenant_id, .. }
            | Event::TenantPurgedV1 { tenant_id, .. }
            | Event::TenantResumedV1 { tenant_id } => Some(DispatchChange::Tenant { tenant_id: tenant_id.clone() }),
            _ => None,
        }
    }

    /// Kind name used by watch filters.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::TenantCreatedV1 { .. } => "tenant_created",
            Event::TenantSuspendedV1 { .. } => "tenant_suspended",
            Event::TenantResumedV1 { .. } => "tenant_resumed",
            Event::CommandRejectedV1 { .. } | Event::CommandRejectedV2 { .. } => "command_rejected",
            Event::TenantSettingsChangedV1 { .. } => "tenant_settings_changed",
            Event::PrincipalCreatedV1 { .. } => "principal_created",
            Event::PrincipalRevokedV1 { .. } => "principal_revoked",
            Event::ScopeRevokedV1 { .. } => "scope_revoked",
            Event::TokenIssuedV1 { .. } => "token_issued",
            Event::TokenRevokedV1 { .. } => "token_revoked",
            Event::SiteCreatedV1 { .. } => "site_created",
            Event::DeviceCreatedV1 { .. } => "device_created",
            Event::SigningKeyRegisteredV1 { .. } => "signing_key_registered",
            Event::TenantIssuerSetV1 { .. } => "tenant_issuer_set",
            Event::TenantIssuerRemovedV1 { .. } => "tenant_issuer_removed",
            Event::CatalogPublishedV1 { .. } => "catalog_published",
            Event::EnrollmentCreatedV1 { .. } => "enrollment_created",
            Event::ExecutorEnrolledV1 { .. } => "executor_enrolled",
            Event::ExecutorRevokedV1 { .. } => "executor_revoked",
            Event::ExecutorCaRegisteredV1 { .. } => "executor_ca_registered",
            Event::RequestDecidedV1 { .. } => "request_decided",
            Event::RequestsDecidedV1 { .. } | Event::RequestsDecidedV2 { .. } => "requests_decided",
            Event::PrincipalQuotasSetV1 { .. } => "principal_quotas_set",
            Event::RequestQuotaLeasedV1 { .. } => "request_quota_leased",
            Event::OperationSubmittedV1 { .. } => "operation_submitted",
            Event::DeviceReservedV1 { .. } => "device_reserved",
            Event::DeviceReleasedV1 { .. } => "device_released",
            Event::OperationDispatchedV1 { .. } => "operation_dispatched",
            Event::OperationTransitionedV1 { .. } => "operation_transitioned",
            Event::AttemptLeaseExtendedV1 { .. } => "attempt_lease_extended",
            Event::EvidenceReportedV1 { .. } => "evidence_reported",
            Event::ObservationRecordedV1 { .. } => "observation_recorded",
            Event::OperationInputsAnsweredV1 { .. } => "operation_inputs_answered",
            Event::OperationCancelRequestedV1 { .. } => "operation_cancel_requested",
            Event::PrincipalQuotasSetV2 { .. } => "principal_quotas_set",
            Event::ExecutorCertRenewedV1 { .. } => "executor_cert_renewed",
            Event::IssuerTokenRevokedV1 { .. } => "issuer_token_revoked",
            Event::SigningKeyRetiredV1 { .. } => "signing_key_retired",
            Event::ExecutorCaRetiredV1 { .. } => "executor_ca_retired",
            Event::RoleCertificateRevokedV1 { .. } => "role_certificate_revoked",
            Event::OperationProposedV1 { .. } => "operation_proposed",
            Event::ProposalUsedV1 { .. } => "proposal_used",
            Event::WorkCreatedV1 { .. } => "work_created",
            Event::ScopeGrantedV1 { .. } => "scope_granted",
            Event::TenantDeletedV1 { .. } => "tenant_deleted",
            Event::EvidenceStoredV1 { .. } => "evidence_stored",
            Event::TenantPurgedV1 { .. } => "tenant_purged",
            Event::EvidenceExpiredV1 { .. } => "evidence_expired",
            Event::WorkRevisedV1 { .. } => "work_revised",
            Event::OperationRefusedV1 { .. } => "operation_refused",
            Event::OperationsCompactedV1 { .. } => "operations_compacted",
            Event::BindingsReleasedV1 { .. } => "bindings_released",
            Event::CredentialsRetiredV1 { .. } => "credentials_retired",
            Event::WorksRetiredV1 { .. } => "works_retired",
            Event::UpstreamSetV1 { .. } => "upstream_set",
            Event::UpstreamRemovedV1 { .. } => "upstream_removed",
            Event::UpstreamToolsObservedV1 { .. } => "upstream_tools_observed",
            Event::UpstreamToolsApprovedV1 { .. } => "upstream_tools_approved",
            Event::UpstreamFuseChangedV1 { .. } => "upstream_fuse_changed",
            Event::OperationUpstreamBoundV1 { .. } => "operation_upstream_bound",
            Event::AnonymousAccessSetV1 { .. } => "anonymous_access_set",
            Event::SessionStateSetV1 { .. } => "session_state_set",
            Event::IssuerSourceSetV1 { .. } => "issuer_source_set",
            Event::OAuthClientSetV1 { .. } => "oauth_client_set",
            Event::OAuthClientRemovedV1 { .. } => "oauth_client_removed",
            Event::OAuthGrantV1 { .. } => "oauth_grant",
            Event::OAuthSettingsSetV1 { .. } => "oauth_settings_set",
            Event::OperatorSetV1 { .. } => "operator_set",
            Event::OperatorRemovedV1 { .. } => "operator_removed",
            Event::OperatorSessionOpenedV1 { .. } => "operator_session_opened",
            Event::OperatorSessionsClosedV1 { .. } => "operator_sessions_closed",
            Event::ConsoleSignInSetV1 { .. } => "console_sign_in_set",
            Event::OperatorSessionUsedV1 { .. } => "operator_session_used",
            Event::ExecutorPresenceV1 { .. } => "executor_presence",
            Event::OperatorActedV1 { .. } => "operator_acted",
            Event::LedgerVersionRaisedV1 { .. } => "ledger_version_raised",
        }
    }
}

/// An applied event with its position: `revision` is global and gap-free across the ledger,
/// `seq` is gap-free within its `stream` (a tenant id, or [`CLUSTER_STREAM`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventEnvelope {
    pub revision: u64,
    pub stream: String,
    pub seq: u64,
    pub at_ms: u64,
    pub trace_id: String,
    pub event: Event,
}

/// What applying one log entry produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The command was accepted; these events were appended (none listed for a command whose
    /// proposer reads only that it applied: [`Command::answered_with_events`]). For a command
    /// about one operation, `operation` is that operation as the command left it (for a
    /// submission that was a replay, the prior operation), so the proposer needs no read after
    /// the write. Not persisted: the answer to one proposal.
    Applied {
        events: Vec<EventEnvelope>,
        #[serde(default)]
        operation: Option<Box<crate::operation::Operation>>,
    },
    /// The command broke a business rule; a rejection event was appended.
    Rejected { reason: ReasonCode, message: String, revision: u64 },
    /// A Raft-internal entry (blank or membership) with no domain effect.
    Internal,
    /// A [`Command::Batch`]'s outcomes, one per command in its order (the leader answers each
    /// proposer with its own).
    Batch(Vec<Outcome>),
}

impl std::fmt::Display for LedgerRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{} trace={}", self.command.kind(), self.stamp_ms, self.trace_id)
    }
}

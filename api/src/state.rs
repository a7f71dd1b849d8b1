//! The ledger's state: `LedgerState` holds every view, derived only from events, and
//! `fold_event` folds one event into it — [`LedgerState::fold_views`] checks the event's place
//! in the log and hands it to its domain's fold (`crate::operation`'s `fold.rs`, …;
//! `crate::decide` says which events a command appends). No IO, no clock, no randomness, no
//! hash-map iteration: the same log yields byte-identical state (and digest) on every replica.

use std::collections::{BTreeMap, BTreeSet};

use crate::audit::{AuditIndex, AuditedEvent};
use crate::catalog::CatalogVersion;
use crate::device::{Device, Enrollment, Executor, ExecutorCaV1, Site};
use crate::ledger::{Command, Event, EventEnvelope, Tenant};
use crate::principal::Principal;
use crate::token::{SigningKeyV1, TenantIssuer, Token};
use crate::trail::records_for;
use serde::{Deserialize, Serialize};

use crate::operation::{DeviceLease, Operation, OperationState};
use crate::quota::{PrincipalQuotasV2, QuotaWindow};

/// Every view of the ledger, derived only from events. Snapshots are this struct, encoded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerState {
    /// Ledger time: the largest leader stamp applied so far (monotonic by construction).
    pub clock_ms: u64,
    /// Global revision of the last event; gap-free from 1.
    pub revision: u64,
    /// Last sequence number per event stream; each stream is gap-free from 1.
    pub stream_seq: BTreeMap<String, u64>,
    /// Tenants by id.
    pub tenants: BTreeMap<String, Tenant>,
    /// Tenant id by name (names are unique).
    pub tenant_names: BTreeMap<String, String>,
    /// Principals by tenant id, then principal id.
    pub principals: BTreeMap<String, BTreeMap<String, Principal>>,
    /// Principal id by tenant id, then name (names are unique within a tenant).
    pub principal_names: BTreeMap<String, BTreeMap<String, String>>,
    /// Tokens by tenant id, then `jti`, as states before format 20 held them (with their
    /// delegated children by parent `jti`, below); decoding moves them to cold rows
    /// ([`LedgerState::cold`]), so they are empty.
    pub tokens: BTreeMap<String, BTreeMap<String, Token>>,
    pub token_children: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// Sites by tenant id, then site id; and site id by tenant id, then name.
    pub sites: BTreeMap<String, BTreeMap<String, Site>>,
    pub site_names: BTreeMap<String, BTreeMap<String, String>>,
    /// Devices by tenant id, then device id; and device id by tenant id, then name.
    pub devices: BTreeMap<String, BTreeMap<String, Device>>,
    pub device_names: BTreeMap<String, BTreeMap<String, String>>,
    /// Token-signing public keys by `kid`.
    pub signing_keys: BTreeMap<String, SigningKeyV1>,
    /// Tenant token issuers by `iss` (an issuer belongs to one tenant).
    pub issuers: BTreeMap<String, TenantIssuer>,
    /// The newest [`CATALOG_VERSIONS_KEPT`] catalog versions by tenant id, then version.
    pub catalogs: BTreeMap<String, BTreeMap<u64, CatalogVersion>>,
    /// Retained audit range, timestamps and chain head by tenant id (record bodies are stored
    /// by the node, keyed by [`crate::audit::record_key`]).
    pub audit: BTreeMap<String, AuditIndex>,
    /// Executor enrollments by tenant id, then enrollment id.
    pub enrollments: BTreeMap<String, BTreeMap<String, Enrollment>>,
    /// Enrolled executors by tenant id, then executor id.
    pub executors: BTreeMap<String, BTreeMap<String, Executor>>,
    /// (tenant id, executor id) by certificate fingerprint: how mTLS finds an executor.
    pub executor_certs: BTreeMap<String, (String, String)>,
    /// Executor CA certificates by tenant id, then CA fingerprint.
    pub executor_cas: BTreeMap<String, BTreeMap<String, ExecutorCaV1>>,
    /// Principals' own quotas by tenant id, then principal id (absent: none).
    pub principal_quotas: BTreeMap<String, BTreeMap<String, PrincipalQuotasV2>>,
    /// Request-quota grants of the current window, by tenant id.
    pub quota_windows: BTreeMap<String, QuotaWindow>,
    /// Live operations by tenant id, then operation id (one no longer live is a cold row,
    /// [`LedgerState::cold`]; states of formats before 16 held them all here).
    pub operations: BTreeMap<String, BTreeMap<String, Operation>>,
    /// Operation id by tenant id, then [`idempotency_slot`], as states before format 16 held
    /// the keys; decoding moves them to cold rows, so it is empty.
    pub idempotency: BTreeMap<String, BTreeMap<String, String>>,
    /// Held devices by tenant id, then device id.
    pub device_leases: BTreeMap<String, BTreeMap<String, DeviceLease>>,
    /// The last fencing token issued per device, by tenant id, then device id.
    pub fencing: BTreeMap<String, BTreeMap<String, u64>>,
    /// Ids of the operations that are waiting or attempting, by tenant id: what the deadline
    /// and lease checks and the dispatchers look at (finished operations drop out).
    pub live_operations: BTreeMap<String, BTreeSet<String>>,
    /// Operations and cost units of the current minute and day, by tenant id.
    pub operation_windows: BTreeMap<String, crate::quota::OperationWindow>,
    /// The same per principal (tenant id → principal id), for principals' own quotas.
    pub principal_operation_windows: BTreeMap<String, BTreeMap<String, crate::quota::OperationWindow>>,
    /// Indexes over the live operations, derived from the views above: never encoded (so not
    /// in snapshots, the digest or the state format), kept by every fold and rebuilt by
    /// [`LedgerState::rebuild_index`] after a decode.
    #[serde(skip)]
    pub index: OperationIndex,
    /// Revoked and retired credentials. Encoded after the fields above by
    /// [`LedgerState::encode`] (state format 2): the serde layout of this struct stays format
    /// 1's, so format-1 bytes still decode (with no revocations).
    #[serde(skip)]
    pub revocations: crate::revocation::Revocations,
    /// Live proposals (recorded dry runs) by tenant id, then proposal id. Encoded after the
    /// revocations (state format 3); used ones leave at once, expired ones when the tenant
    /// records its next proposal (by ledger time, so on every replica alike).
    #[serde(skip)]
    pub proposals: BTreeMap<String, BTreeMap<String, crate::operation::ProposalV1>>,
    /// Open work items by tenant id, then work id. Encoded after the proposals (state format 4);
    /// a closed one is a cold row from format 21 on (earlier formats held every item here, and
    /// decoding them moves the closed ones).
    #[serde(skip)]
    pub works: BTreeMap<String, BTreeMap<String, crate::work::WorkItem>>,
    /// How many closed work items each tenant holds as cold rows, by tenant id (what counts
    /// toward its cap with the open ones). In the `work` section from its version 2 (format 21).
    #[serde(skip)]
    pub works_closed: BTreeMap<String, u64>,
    /// Each operation's transitions (at most [`crate::operation::HISTORY_KEPT`]), by tenant
    /// id, then operation id. Encoded after the work items (state format 4); operations
    /// recorded under an older format have the history since the upgrade.
    #[serde(skip)]
    pub history: BTreeMap<String, BTreeMap<String, Vec<crate::operation::TransitionV1>>>,
    /// Stored evidence records by tenant id, then [`evidence_slot`], as states of formats 5 to
    /// 15 held them; decoding moves them to cold rows ([`LedgerState::cold`]), so it is empty.
    #[serde(skip)]
    pub evidence: BTreeMap<String, BTreeMap<String, crate::evidence::EvidenceBlobV1>>,
    /// Compacted operations (retention's bindings) by tenant id, then operation id, as states
    /// of formats 6 to 15 held them; decoding moves them to cold rows, so it is empty.
    #[serde(skip)]
    pub compacted: BTreeMap<String, BTreeMap<String, Operation>>,
    /// Upstream MCP servers by tenant id, then name ([`crate::upstream`]). Encoded after the
    /// compacted operations (state format 7).
    #[serde(skip)]
    pub upstreams: BTreeMap<String, BTreeMap<String, crate::upstream::UpstreamV1>>,
    /// Operations an edge performs by calling an upstream tool, by tenant id, then operation id:
    /// the tool (`<upstream>/<tool>`), kept while the operation waits for its attempt
    /// (`Event::OperationUpstreamBoundV1`; it leaves when the attempt starts or the operation
    /// ends). Encoded after the upstreams (state format 8).
    #[serde(skip)]
    pub upstream_operations: BTreeMap<String, BTreeMap<String, String>>,
    /// The edges each tenant lets act without a token, by tenant id then edge id: the
    /// principal each acts as (`Command::SetAnonymousAccess`). Encoded after the upstream
    /// operations (state format 10).
    #[serde(skip)]
    pub anonymous: BTreeMap<String, BTreeMap<String, String>>,
    /// Records of MCP sessions of the 2025 wire, by tenant id then session id
    /// (`Command::SetSessionState`; expired ones are dropped as the tenant's next is folded).
    /// Encoded after the anonymous access (state format 11).
    #[serde(skip)]
    pub sessions: BTreeMap<String, BTreeMap<String, crate::session::McpSessionV1>>,
    /// Tenant issuers known by their URL, by `iss`: where their keys (in
    /// [`LedgerState::issuers`]) are fetched from. Encoded after the session records (state
    /// format 12).
    #[serde(skip)]
    pub issuer_sources: BTreeMap<String, crate::token::IssuerSource>,
    /// Each tenant's own authorization server, by tenant id: its clients, open requests,
    /// refresh tokens and used assertions ([`crate::oauth`]). Encoded after the issuer sources
    /// (state format 13).
    #[serde(skip)]
    pub oauth: BTreeMap<String, crate::oauth::TenantOAuth>,
    /// The named operators and their sessions ([`crate::operator`]): a section of its own
    /// after the format-13 body (state format 14).
    #[serde(skip)]
    pub operators: crate::operator::Operators,
    /// Tenant id → executor id → its connection as the edges last said
    /// ([`crate::device::ExecutorPresenceV1`]): a section of its own (state format 15).
    #[serde(skip)]
    pub executor_presence: BTreeMap<String, BTreeMap<String, crate::device::ExecutorPresenceV1>>,
    /// This state is a projection ([`LedgerState::project`]): it keeps no audit index and, of
    /// operations, only the live ones; its fold drops an operation (and its history) when it
    /// stops being live. Never encoded: a node's state is never a projection.
    #[serde(skip)]
    pub projection: bool,
    /// Operations that stopped being live in this projection's folds, each with its history,
    /// until the follower takes them ([`LedgerState::take_departed`]); kept only once it asked
    /// ([`LedgerState::keep_departed`]), so a fold without a taker holds nothing. An edge hands
    /// them to the callers waiting on them, who would otherwise read them from the ledger.
    /// Never encoded.
    #[serde(skip)]
    pub departed: Option<Vec<crate::operation::Departed>>,
    /// The rows that grow with traffic ([`crate::cold`]): operations no longer live, with their
    /// histories and bindings, idempotency keys, and retention's time rows. A section of its
    /// own (state format 16); a node keeps the rows in its store.
    #[serde(skip)]
    pub cold: crate::cold::ColdTier,
    /// The ledger version in force ([`crate::ledger::Command::RaiseLedgerVersion`]; 0 before
    /// any was raised): where two versions' rules differ, every replica applies this one's.
    /// In the `ledger` section from its version 2 (state format 19).
    #[serde(skip)]
    pub ledger_version: u32,
}

/// The key of an operation's blob in [`LedgerState::evidence`]: operation id, NUL, hash (so a
/// tenant's blobs of one operation are one range).
pub fn evidence_slot(operation_id: &str, content_hash: &str) -> String {
    format!("{operation_id}\u{0}{content_hash}")
}

/// Indexes that let operation commands, the reaper and dispatchers find their work without
/// scanning a tenant's live operations (so a command costs the same with 10 or 100,000 of them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperationIndex {
    /// (ledger time it falls due, operation id) by tenant: deadlines of waiting operations and
    /// attempt leases of dispatched and attempting ones ([`Operation::due_at`]).
    pub due: BTreeMap<String, BTreeSet<(u64, String)>>,
    /// Live operations per principal, by tenant (a principal's `concurrent_operations`).
    pub live_by_principal: BTreeMap<String, BTreeMap<String, u64>>,
    /// Reserved operations (offered to executors), by tenant.
    pub reserved: BTreeMap<String, BTreeSet<String>>,
    /// Operations dispatched to an executor and not yet started, by tenant, then executor id.
    pub dispatched: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// How many operations of each tenant are in each state (metrics by tenant class: the
    /// `unknown_effect` backlog, what waits for acceptance, what is in flight).
    pub by_state: BTreeMap<String, BTreeMap<OperationState, u64>>,
    /// (ledger time of expiry, enrollment id) of enrollments, by tenant.
    pub enrollment_expiry: BTreeMap<String, BTreeSet<(u64, String)>>,
}

impl OperationIndex {
    /// Moves `operation_id` of `tenant_id` from what `old` indexed to what `new` does.
    pub(crate) fn update(&mut self, old: Option<&Operation>, new: Option<&Operation>) {
        let Some(any) = new.or(old) else { return };
        let (tenant, id) = (&any.tenant_id, &any.spec.operation_id);
        if let Some(old) = old {
            if let Some(counts) = self.by_state.get_mut(tenant) {
                if let Some(n) = counts.get_mut(&old.state) {
                    *n -= 1;
                    if *n == 0 {
                        counts.remove(&old.state);
                    }
                }
                if counts.is_empty() {
                    self.by_state.remove(tenant);
                }
            }
            if let Some(at) = old.due_at() {
                remove_from(&mut self.due, tenant, &(at, id.clone()));
            }
            if old.is_live() {
                if let Some(by_principal) = self.live_by_principal.get_mut(tenant) {
                    let principal = &old.spec.principal_id;
                    match by_principal.get_mut(principal) {
                        Some(n) if *n > 1 => *n -= 1,
                        _ => {
                            by_principal.remove(principal);
                        }
                    }
                    if by_principal.is_empty() {
                        self.live_by_principal.remove(tenant);
                    }
                }
            }
            match (old.state, &old.executor_id) {
                (OperationState::Reserved, _) => remove_from(&mut self.reserved, tenant, id),
                (OperationState::Dispatched, Some(x)) => {
                    if let Some(by_executor) = self.dispatched.get_mut(tenant) {
                        remove_from(by_executor, x, id);
                        if by_executor.is_empty() {
                            self.dispatched.remove(tenant);
                        }
                    }
                }
                _ => {}
            }
        }
        if let Some(new) = new {
            *self.by_state.entry(tenant.clone()).or_default().entry(new.state).or_default() += 1;
            if let Some(at) = new.due_at() {
                self.due.entry(tenant.clone()).or_default().insert((at, id.clone()));
            }
            if new.is_live() {
                *self
                    .live_by_principal
                    .entry(tenant.clone())
                    .or_default()
                    .entry(new.spec.principal_id.clone())
                    .or_default() += 1;
            }
            match (new.state, &new.executor_id) {
                (OperationState::Reserved, _) => {
                    self.reserved.entry(tenant.clone()).or_default().insert(id.clone());
                }
                (OperationState::Dispatched, Some(x)) => {
                    self.dispatched.entry(tenant.clone()).or_default().entry(x.clone()).or_default().insert(id.clone());
                }
                _ => {}
            }
        }
    }

    /// The earliest time an operation of `tenant_id` falls due.
    pub fn next_due(&self, tenant_id: &str) -> Option<u64> {
        self.due.get(tenant_id)?.first().map(|(at, _)| *at)
    }
}

/// Removes `item` from the set of `key`, dropping the set when it empties.
pub(crate) fn remove_from<K: Ord, T: Ord>(map: &mut BTreeMap<K, BTreeSet<T>>, key: &K, item: &T) {
    if let Some(set) = map.get_mut(key) {
        set.remove(item);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

/// The idempotency map's key for `(principal, key)`.
pub fn idempotency_slot(principal_id: &str, key: &str) -> String {
    format!("{principal_id}\u{0}{key}")
}

/// An event that does not fit the state it is folded into: the event log (or the feed that
/// carried it) is corrupt. Never a business-rule failure: those are rejection events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptEvent {
    pub revision: u64,
    pub stream: String,
    pub kind: &'static str,
    pub why: String,
}

impl CorruptEvent {
    pub fn new(env: &EventEnvelope, why: impl Into<String>) -> CorruptEvent {
        CorruptEvent { revision: env.revision, stream: env.stream.clone(), kind: env.event.kind(), why: why.into() }
    }
}

impl std::fmt::Display for CorruptEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "corrupt event log: event {} ({}) of stream '{}' does not fit the state: {}",
            self.revision, self.kind, self.stream, self.why
        )
    }
}

impl std::error::Error for CorruptEvent {}

pub(crate) fn unknown(env: &EventEnvelope, what: &str, id: &str) -> CorruptEvent {
    CorruptEvent::new(env, format!("unknown {what} '{id}'"))
}

impl LedgerState {
    /// A principal's own quotas (all unset: none of its own).
    pub(crate) fn set_principal_quotas(&mut self, tenant_id: &str, principal_id: &str, quotas: PrincipalQuotasV2) {
        let by_tenant = self.principal_quotas.entry(tenant_id.to_string()).or_default();
        if quotas == PrincipalQuotasV2::default() {
            by_tenant.remove(principal_id);
        } else {
            by_tenant.insert(principal_id.to_string(), quotas);
        }
    }

    /// Positions an event (next revision, next stream sequence), applies it, and returns it.
    pub(crate) fn append(
        &mut self,
        stream: &str,
        trace_id: &str,
        event: Event,
        audit: &mut Vec<AuditedEvent>,
    ) -> EventEnvelope {
        let seq = self.stream_seq.get(stream).copied().unwrap_or(0) + 1;
        let env = EventEnvelope {
            revision: self.revision + 1,
            stream: stream.to_string(),
            seq,
            at_ms: self.clock_ms,
            trace_id: trace_id.to_string(),
            event,
        };
        audit.extend(self.apply_event(&env));
        env
    }

    /// Folds one event into the views on a node (live, or rebuilding from its event log).
    /// Returns where the audit records the event produced lie (events of a tenant's stream
    /// produce one, or one per decision of a batch).
    ///
    /// Events were validated by `decide` before they were appended; an event that does not fit
    /// the state means the node's event log is corrupt, which must stop the node, not be
    /// papered over: this panics (the node's fatal path, see `raft-store`).
    pub fn apply_event(&mut self, env: &EventEnvelope) -> Option<AuditedEvent> {
        match self.fold_event(env) {
            Ok(records) => records,
            Err(corrupt) => panic!("{corrupt}"),
        }
    }

    /// Folds one event into the views, or says why it does not fit ([`CorruptEvent`]). A
    /// follower of the ledger (an edge's replica) uses this and fails closed on an error; the
    /// state is then partly folded and must be replaced by a fresh snapshot.
    pub fn fold_event(&mut self, env: &EventEnvelope) -> Result<Option<AuditedEvent>, CorruptEvent> {
        self.fold_views(env)?;
        Ok(self.audit_event(env))
    }

    /// [`Self::fold_event`] for a replica that keeps no audit trail (an edge's: the nodes keep
    /// it and answer its pages): the views only, so a batch of request decisions costs a
    /// replica its revision and nothing more. Its `audit` index stays as loaded (empty, for
    /// an edge), and a [projection](LedgerState::project) stays one.
    pub fn fold_views(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        if env.revision != self.revision + 1 {
            return Err(CorruptEvent::new(env, format!("revision gap after {}", self.revision)));
        }
        let seq = self.stream_seq.get(&env.stream).copied().unwrap_or(0);
        if env.seq != seq + 1 {
            return Err(CorruptEvent::new(env, format!("sequence gap in stream '{}' after {seq}", env.stream)));
        }
        self.stream_seq.insert(env.stream.clone(), env.seq);
        self.revision = env.revision;
        self.clock_ms = self.clock_ms.max(env.at_ms);
        // The fold reads cold rows as they were before this event (a replay reads the same).
        self.cold.at = env.revision - 1;
        let folded = self.fold_domain(env);
        self.cold.at = env.revision;
        folded
    }

    /// Hands `env` to its domain's fold.
    fn fold_domain(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::TenantCreatedV1 { .. }
            | Event::TenantSettingsChangedV1 { .. }
            | Event::TenantSuspendedV1 { .. }
            | Event::TenantResumedV1 { .. }
            | Event::TenantDeletedV1 { .. }
            | Event::TenantPurgedV1 { .. } => self.fold_tenant(env),
            Event::PrincipalCreatedV1 { .. }
            | Event::PrincipalRevokedV1 { .. }
            | Event::ScopeGrantedV1 { .. }
            | Event::ScopeRevokedV1 { .. }
            | Event::AnonymousAccessSetV1 { .. }
            | Event::SessionStateSetV1 { .. } => self.fold_principal(env),
            Event::TokenIssuedV1 { .. }
            | Event::TokenRevokedV1 { .. }
            | Event::SigningKeyRegisteredV1 { .. }
            | Event::TenantIssuerSetV1 { .. }
            | Event::TenantIssuerRemovedV1 { .. }
            | Event::IssuerSourceSetV1 { .. }
            | Event::IssuerTokenRevokedV1 { .. }
            | Event::SigningKeyRetiredV1 { .. }
            | Event::RoleCertificateRevokedV1 { .. } => self.fold_credential(env),
            Event::OAuthClientSetV1 { .. }
            | Event::OAuthClientRemovedV1 { .. }
            | Event::OAuthSettingsSetV1 { .. }
            | Event::OAuthGrantV1 { .. } => self.fold_oauth(env),
            Event::OperatorSetV1 { .. }
            | Event::OperatorRemovedV1 { .. }
            | Event::OperatorSessionOpenedV1 { .. }
            | Event::OperatorSessionsClosedV1 { .. }
            | Event::ConsoleSignInSetV1 { .. }
            | Event::OperatorSessionUsedV1 { .. }
            | Event::OperatorActedV1 { .. } => self.fold_operator(env),
            Event::SiteCreatedV1 { .. } | Event::DeviceCreatedV1 { .. } => self.fold_site(env),
            Event::CatalogPublishedV1 { .. } => self.fold_catalog(env),
            Event::EnrollmentCreatedV1 { .. }
            | Event::ExecutorEnrolledV1 { .. }
            | Event::ExecutorRevokedV1 { .. }
            | Event::ExecutorCertRenewedV1 { .. }
            | Event::ExecutorCaRegisteredV1 { .. }
            | Event::ExecutorCaRetiredV1 { .. }
            | Event::ExecutorPresenceV1 { .. } => self.fold_executor(env),
            Event::OperationProposedV1 { .. }
            | Event::ProposalUsedV1 { .. }
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
            | Event::OperationRefusedV1 { .. }
            | Event::EvidenceStoredV1 { .. }
            | Event::EvidenceExpiredV1 { .. } => self.fold_operation(env),
            Event::PrincipalQuotasSetV1 { .. }
            | Event::PrincipalQuotasSetV2 { .. }
            | Event::RequestQuotaLeasedV1 { .. } => self.fold_quota(env),
            Event::UpstreamSetV1 { .. }
            | Event::UpstreamRemovedV1 { .. }
            | Event::UpstreamToolsObservedV1 { .. }
            | Event::UpstreamToolsApprovedV1 { .. }
            | Event::UpstreamFuseChangedV1 { .. }
            | Event::OperationUpstreamBoundV1 { .. } => self.fold_upstream(env),
            Event::WorkCreatedV1 { .. } | Event::WorkRevisedV1 { .. } => self.fold_work(env),
            Event::LedgerVersionRaisedV1 { version } => {
                let before = self.ledger_version;
                self.ledger_version = self.ledger_version.max(*version);
                self.ledger_version_raised(before, env.revision);
                Ok(())
            }
            Event::OperationsCompactedV1 { .. }
            | Event::BindingsReleasedV1 { .. }
            | Event::CredentialsRetiredV1 { .. }
            | Event::WorksRetiredV1 { .. } => self.fold_retention(env),
            // Only audit records.
            Event::CommandRejectedV1 { .. }
            | Event::CommandRejectedV2 { .. }
            | Event::RequestDecidedV1 { .. }
            | Event::RequestsDecidedV1 { .. }
            | Event::RequestsDecidedV2 { .. } => Ok(()),
        }
    }

    /// Records an event of a tenant stream in the tenant's audit index and applies retention;
    /// returns where its records lie, if it produces any. Before ledger version 16 each record
    /// is built and its stored bytes chained; from 16 on the event's bytes are chained once and
    /// no record is built (a node renders them when they are read).
    fn audit_event(&mut self, env: &EventEnvelope) -> Option<AuditedEvent> {
        let tenant = self.tenants.get(&env.stream)?;
        let (max_events, max_age_s) = (tenant.settings.audit_max_events, tenant.settings.audit_max_age_s);
        let chain_events = self.ledger_version >= 16;
        let at_ms = audit_time(self.ledger_version, env.at_ms);
        let index = self.audit.entry(env.stream.clone()).or_default();
        let first_seq = index.next_seq.max(1);
        let (count, event_bytes) = if chain_events {
            let count = crate::trail::record_count(env);
            let bytes = (count > 0).then(|| crate::encode(env).expect("events encode"));
            if let Some(bytes) = &bytes {
                index.push_event(at_ms, count as u64, bytes);
            }
            (count, bytes)
        } else {
            let records = records_for(env, &env.stream, first_seq);
            records.iter().for_each(|r| index.push(at_ms, &r.stored()));
            (records.len(), None)
        };
        index.retain(max_events, max_age_s, env.at_ms);
        let count = u32::try_from(count).expect("an event's records are bounded");
        let (tenant_id, revision) = (env.stream.clone(), env.revision);
        (count > 0).then_some(AuditedEvent { tenant_id, revision, first_seq, count, event_bytes })
    }

    /// [`Command::ledger_version`], and what this state adds to it: a submission of a catalog
    /// `read` action needs version 10 (older members refuse it as no operation). What a
    /// leader's version gate checks before it proposes `command` on this state.
    pub fn ledger_version_of(&self, command: &Command) -> u32 {
        let reads = command.layers().any(|c| match c {
            Command::SubmitOperation { tenant_id, spec }
            | Command::ProposeOperation { tenant_id, spec }
            | Command::SubmitProposed { tenant_id, spec, .. } => self
                .catalog(tenant_id, None)
                .and_then(|v| v.catalog.actions.iter().find(|a| a.id == spec.action))
                .is_some_and(|a| a.execution == crate::catalog::Execution::Read),
            _ => false,
        });
        if reads {
            command.ledger_version().max(10)
        } else {
            command.ledger_version()
        }
    }

    /// Canonical encoding of the whole state (the body of the versioned encodings in
    /// [`crate::format`]): tagged sections, one per domain, each with its own version
    /// ([`crate::schema`]). Older formats are read by [`LedgerState::decode_body`].
    pub fn encode(&self) -> Vec<u8> {
        self.encode_schema(true)
    }

    /// Reads the body of state format `version`, bounded like a message ([`crate::decode`]):
    /// tagged sections from 18 on ([`crate::schema`]); untagged sections from 14 to 17 (format
    /// 13's body, then the operators, the executors' presence from 15, the cold sums and rows
    /// from 16); up to 13, format 1's struct with each later view appended
    /// ([`LedgerState::decode_base`]). Each older format's upgrade follows (moving what is now
    /// a cold row out of memory, [`LedgerState::cool`]); the indexes are rebuilt.
    pub fn decode_body(version: u32, body: &[u8]) -> Result<LedgerState, String> {
        LedgerState::decode_body_bounded(version, body, true)
    }

    /// [`LedgerState::decode_body`], bounded like a message (`bounded`: [`crate::decode`]) or
    /// only by the input ([`crate::decode_unbounded`]: a state that outgrew 64 MiB, read from a
    /// source that vouches for it — a checksummed snapshot or backup, a node's answer).
    fn decode_body_bounded(version: u32, body: &[u8], bounded: bool) -> Result<LedgerState, String> {
        if version >= 18 {
            let mut state = LedgerState::decode_schema(body, bounded)?;
            state.rebuild_index();
            state.cool();
            return Ok(state);
        }
        if version < 14 {
            let mut state = LedgerState::decode_base(version, body, bounded)?;
            state.cool();
            return Ok(state);
        }
        let undecodable = |what: &str| format!("undecodable ledger state (format {version}): {what}");
        let mut rest = body;
        let mut section = |last: bool| -> Result<&[u8], String> {
            if last {
                return Ok(std::mem::take(&mut rest));
            }
            let (len, after) = rest.split_at_checked(8).ok_or_else(|| undecodable("no section length"))?;
            let len = usize::try_from(u64::from_le_bytes(len.try_into().expect("8 bytes"))).unwrap_or(usize::MAX);
            let (bytes, after) = after.split_at_checked(len).ok_or_else(|| undecodable("a section is truncated"))?;
            rest = after;
            Ok(bytes)
        };
        fn dec<T: serde::de::DeserializeOwned>(bytes: &[u8], bounded: bool) -> Result<T, String> {
            let decoded = if bounded { crate::decode(bytes) } else { crate::decode_unbounded(bytes) };
            decoded.map_err(|e| e.to_string())
        }
        let mut state = LedgerState::decode_base(13, section(false)?, bounded)?;
        state.operators = dec(section(version == 14)?, bounded).map_err(|e| undecodable(&e))?;
        if version >= 15 {
            state.executor_presence = dec(section(false)?, bounded).map_err(|e| undecodable(&e))?;
        }
        if version >= 16 {
            let tenants = dec(section(false)?, bounded).map_err(|e| undecodable(&e))?;
            state.cold.tenants = crate::cold::sums_from_v1(tenants);
            state.cold.restore_pending(dec(section(false)?, bounded).map_err(|e| undecodable(&e))?);
        }
        state.cool();
        if version == 16 {
            state.upgrade_v16_to_v17();
        }
        Ok(state)
    }

    /// Format 16 to 17: operations whose reported effect waits for a decision get their time
    /// rows — now among the rows the state holds without a store, and in the store it is
    /// attached to next (a node's snapshot of format 16 keeps its rows there). (Older formats
    /// move their operations to rows through the folds' own code, which writes them.)
    fn upgrade_v16_to_v17(&mut self) {
        self.cold.index_reports();
        self.cold.reports_unindexed = true;
    }

    /// This state as a build of format 16 wrote it (untagged sections behind their lengths:
    /// format 13's body, the operators, the executors' presence, the cold sums, the rows not
    /// in a store): the twin of the reader above, kept so that an upgrade from format 16 — of a
    /// snapshot, an edge's state, a backup — is tested from that format's own bytes.
    pub fn encode_format_16(&self) -> Vec<u8> {
        fn enc<T: serde::Serialize>(v: &T) -> Vec<u8> {
            crate::encode(v).expect("a state encodes")
        }
        // That format kept the token records and closed work items in memory.
        let mut warm = self.clone();
        warm.warm_tokens();
        warm.warm_works();
        let this = &warm;
        let tenants: BTreeMap<&String, crate::cold::ColdTenantV1> =
            this.cold.tenants.iter().map(|(id, t)| (id, t.clone().into())).collect();
        let tail = (&this.evidence, &this.compacted, &this.upstreams, &this.upstream_operations, &this.anonymous);
        let tail = (tail, &this.sessions, &this.issuer_sources, &this.oauth);
        let base = (this, &this.revocations, &this.proposals, &this.works, &this.history, tail);
        let sections = [
            enc(&base),
            enc(&this.operators),
            enc(&this.executor_presence),
            enc(&tenants),
            enc(this.cold.pending_rows()),
        ];
        let mut out = crate::format::STATE_MAGIC.to_vec();
        out.extend_from_slice(&16u32.to_le_bytes());
        for section in sections {
            out.extend_from_slice(&(section.len() as u64).to_le_bytes());
            out.extend_from_slice(&section);
        }
        out
    }

    /// Reads the body of state format `version` up to 13: the state in format 1's layout, then
    /// each view a later format appended after its predecessor's, in order (the body is one
    /// tuple, whose encoding is its elements' encodings one after another).
    fn decode_base(version: u32, body: &[u8], bounded: bool) -> Result<LedgerState, String> {
        let undecodable = |e: bincode::error::DecodeError| format!("undecodable ledger state (format {version}): {e}");
        // The format that appended each view: 2 the revocations, 3 the proposals, 4 the work
        // items and histories, 5 the evidence, 6 the compacted operations, 7 the upstreams, 8
        // their waiting operations (9 changed no layout), 10 the anonymous access, 11 the MCP
        // sessions, 12 the issuer sources, 13 OAuth.
        let mut r = crate::Sequence::new(body, bounded);
        let mut s: LedgerState = r.next().map_err(undecodable)?;
        let read = |since: u32| version >= since;
        if read(2) {
            s.revocations = r.next().map_err(undecodable)?;
        }
        if read(3) {
            s.proposals = r.next().map_err(undecodable)?;
        }
        if read(4) {
            (s.works, s.history) = (r.next().map_err(undecodable)?, r.next().map_err(undecodable)?);
        }
        if read(5) {
            s.evidence = r.next().map_err(undecodable)?;
        }
        if read(6) {
            s.compacted = r.next().map_err(undecodable)?;
        }
        if read(7) {
            s.upstreams = r.next().map_err(undecodable)?;
        }
        if read(8) {
            s.upstream_operations = r.next().map_err(undecodable)?;
        }
        if read(10) {
            s.anonymous = r.next().map_err(undecodable)?;
        }
        if read(11) {
            s.sessions = r.next().map_err(undecodable)?;
        }
        if read(12) {
            s.issuer_sources = r.next().map_err(undecodable)?;
        }
        if read(13) {
            s.oauth = r.next().map_err(undecodable)?;
        }
        r.finish().map_err(undecodable)?;
        s.rebuild_index();
        Ok(s)
    }

    /// Turns this state into the projection that followers of the ledger load and fold (an
    /// edge's replica, `GET /client/snapshot`): what authentication, admission, dispatch and
    /// the MCP surfaces read. It keeps no audit index and, of operations, only the live ones
    /// (waiting or attempting: what dispatch, admission and a caller's wait need) with their
    /// histories — no finished operation, binding, idempotency key or evidence record: an edge
    /// reads those from the ledger (one read), which answers every replay. Of the cold rows it
    /// keeps the token records (it verifies tokens) and the closed work items (its MCP
    /// resources list and read them), in memory. So the projection does
    /// not grow with audit retention nor with the operations retention keeps.
    /// [`LedgerState::fold_views`] keeps it so ([`LedgerState::projection`]).
    pub fn project(&mut self) {
        self.projection = true;
        self.audit.clear();
        for ops in self.operations.values_mut() {
            ops.retain(|_, op| op.is_live());
        }
        self.operations.retain(|_, ops| !ops.is_empty());
        for (tenant, steps) in self.history.iter_mut() {
            let live = self.operations.get(tenant);
            steps.retain(|id, _| live.is_some_and(|m| m.contains_key(id)));
        }
        self.history.retain(|_, steps| !steps.is_empty());
        self.compacted.clear();
        self.idempotency.clear();
        self.evidence.clear();
        self.cold = self.projected_tier();
        self.rebuild_index();
    }

    /// Keeps each operation this projection lets go ([`LedgerState::departed`]) until
    /// [`LedgerState::take_departed`]: for a follower that takes them after every fold.
    pub fn keep_departed(&mut self) {
        self.departed.get_or_insert_with(Vec::new);
    }

    /// The operations let go since the last take, oldest first (none unless
    /// [`LedgerState::keep_departed`] was asked).
    pub fn take_departed(&mut self) -> Vec<crate::operation::Departed> {
        self.departed.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The token records and closed work items of every tenant as rows of a new tier (each
    /// tenant opened under its incarnation): what a projection keeps of the cold rows.
    fn projected_tier(&self) -> crate::cold::ColdTier {
        let mut tier = crate::cold::ColdTier::default();
        for (tenant_id, sums) in &self.cold.tenants {
            tier.open(tenant_id, sums.incarnation);
            self.project_tokens(tenant_id, &mut tier);
            self.project_works(tenant_id, &mut tier);
        }
        tier
    }

    /// Rebuilds [`LedgerState::index`] from the operations (after a decode: it is not encoded).
    pub fn rebuild_index(&mut self) {
        let mut index = OperationIndex::default();
        for op in self.operations.values().flat_map(|m| m.values()) {
            index.update(None, Some(op));
        }
        for (tenant, enrollments) in &self.enrollments {
            index
                .enrollment_expiry
                .insert(tenant.clone(), enrollments.values().map(|e| (e.expires_at_ms, e.id.clone())).collect());
        }
        self.index = index;
    }

    /// The state as a node serves it to followers: versioned (see [`crate::format`]).
    pub fn encode_versioned(&self) -> Vec<u8> {
        crate::format::wrap(crate::format::STATE_MAGIC, &self.encode())
    }

    /// Reads [`LedgerState::encode_versioned`] (or the headerless pre-version layout), bounded
    /// like a message ([`crate::decode`]).
    pub fn decode_versioned(bytes: &[u8]) -> Result<LedgerState, String> {
        let (version, body) = crate::format::unwrap(crate::format::STATE_MAGIC, bytes).map_err(|e| e.to_string())?;
        LedgerState::decode_body(version, body)
    }

    /// [`LedgerState::decode_versioned`] bounded only by the input: for a state that outgrew
    /// the 64 MiB message bound, read from what vouches for it (a snapshot or backup whose
    /// digest is checked, a node's answer over mutual TLS). A state has no size cap: it holds
    /// every operation its tenants keep.
    pub fn decode_versioned_unbounded(bytes: &[u8]) -> Result<LedgerState, String> {
        let (version, body) = crate::format::unwrap(crate::format::STATE_MAGIC, bytes).map_err(|e| e.to_string())?;
        LedgerState::decode_body_bounded(version, body, false)
    }

    /// sha256 over the canonical encoding, the cold rows by their per-tenant sums: equal on
    /// every replica at the same applied index, wherever it keeps the rows.
    pub fn digest(&self) -> String {
        crate::sha256_hex(&self.encode_schema(false))
    }
}

/// A record's time in its tenant's audit index ([`crate::audit::AuditTimes`]): its event's
/// time, and from ledger version 17 on that time rounded up to the whole second. Retention by
/// age counts whole seconds (`audit_max_age_s`), so a record is still kept at least that long,
/// at most a second more; and the index holds a run per second in which records were written
/// instead of one per ledger entry, so under load it no longer grows with the entries a tenant's
/// retained records span.
fn audit_time(ledger_version: u32, at_ms: u64) -> u64 {
    if ledger_version >= 17 {
        at_ms.div_ceil(1000).saturating_mul(1000)
    } else {
        at_ms
    }
}

/// Looks an entity of a tenant up by id, then through the tenant's name index.
pub(crate) fn by_id_or_name<'a, T>(
    by_id: &'a BTreeMap<String, BTreeMap<String, T>>,
    names: &BTreeMap<String, BTreeMap<String, String>>,
    tenant_id: &str,
    id_or_name: &str,
) -> Option<&'a T> {
    let of_tenant = by_id.get(tenant_id)?;
    of_tenant.get(id_or_name).or_else(|| of_tenant.get(names.get(tenant_id)?.get(id_or_name)?))
}

/// How many rows a page of at most `limit` reads at most, for a view scanned at most `max` a
/// page: 64 per value asked (a filter may skip most), never fewer than `limit`, and one more
/// to see whether more follow.
pub(crate) fn rows_to_scan(limit: usize, max: usize) -> usize {
    max.min(limit.saturating_mul(64)).max(limit) + 1
}

/// One page of `entries`, in their order: at most `limit` values that `matches`, scanning at
/// most `scan_max` entries, and the last key scanned when more may follow (a filtered page may
/// be short and still have more after it).
pub(crate) fn page_of<'a, K: 'a, T: Clone + 'a>(
    entries: impl Iterator<Item = (&'a K, &'a T)>,
    limit: usize,
    scan_max: usize,
    matches: impl Fn(&T) -> bool,
) -> (Vec<T>, Option<&'a K>) {
    let mut page = Vec::new();
    let mut last = None;
    for (scanned, (key, value)) in entries.enumerate() {
        if page.len() == limit || scanned == scan_max {
            return (page, last);
        }
        last = Some(key);
        if matches(value) {
            page.push(value.clone());
        }
    }
    (page, None)
}

/// A page of in-memory entries `hot` (id → value) merged with `cold`, the rows read after the
/// cursor `after` (at most `scan` of them, in the rows' order), in the rows' order of ids
/// ([`RowOrder`]) and up to where both sources were read (a source cut short bounds the merge):
/// at most `limit` values that `matches`, scanning at most `scan_max`, and the cursor of the
/// next page when more may follow.
#[allow(clippy::too_many_arguments)]
pub(crate) fn merged_page<'a, T: Clone + 'a>(
    hot: impl Iterator<Item = (&'a String, &'a T)>,
    cold: Vec<(String, T)>,
    after: Option<&str>,
    limit: usize,
    scan: usize,
    scan_max: usize,
    matches: impl Fn(&T) -> bool,
) -> (Vec<T>, Option<String>) {
    use std::borrow::Cow;
    let cursor = after.map(RowOrder::of);
    let mut live: Vec<(RowOrder, &T)> =
        hot.map(|(id, v)| (RowOrder::of(id), v)).filter(|(id, _)| cursor.as_ref().is_none_or(|c| id > c)).collect();
    live.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    live.truncate(scan);
    let mut merged: BTreeMap<RowOrder, Cow<'a, T>> = live.into_iter().map(|(k, v)| (k, Cow::Borrowed(v))).collect();
    let mut bound = (merged.len() == scan).then(|| merged.keys().next_back().cloned()).flatten();
    if cold.len() == scan {
        bound = bound.into_iter().chain(cold.last().map(|(id, _)| RowOrder::of(id))).min();
    }
    for (id, value) in cold {
        merged.insert(RowOrder::of(&id), Cow::Owned(value));
    }
    if let Some(b) = &bound {
        merged.retain(|k, _| k <= b);
    }
    let (page, next) = page_of(merged.iter(), limit, scan_max, |v| matches(v));
    let next = next.or_else(|| bound.as_ref().and_then(|_| merged.keys().next_back())).cloned();
    (page.into_iter().map(Cow::into_owned).collect(), next.map(RowOrder::id))
}

/// An id in the order cold rows keep ids in (by length, then bytes: a row key's id is
/// length-prefixed). A page that merges in-memory views with cold rows orders both so, so that
/// its cursor means the same in both and no row falls between two pages.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct RowOrder(usize, String);

impl RowOrder {
    pub(crate) fn of(id: &str) -> RowOrder {
        RowOrder(id.len(), id.to_string())
    }

    pub(crate) fn id(self) -> String {
        self.1
    }
}

/// One page of a name index (`name → id`) after the cursor `after` (a name), resolved through
/// `lookup`; the cursor of the next page is the last name returned, if more follow.
pub(crate) fn page_by_name<T>(
    names: &BTreeMap<String, String>,
    lookup: impl Fn(&str) -> Option<T>,
    after: Option<&str>,
    limit: usize,
) -> (Vec<T>, Option<String>) {
    use std::ops::Bound::{Excluded, Unbounded};
    let lower = after.map_or(Unbounded, |a| Excluded(a.to_string()));
    let mut rows: Vec<(&String, T)> = names
        .range((lower, Unbounded))
        .take(limit + 1)
        .filter_map(|(name, id)| lookup(id).map(|v| (name, v)))
        .collect();
    let next = if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(|(name, _)| (*name).clone())
    } else {
        None
    };
    (rows.into_iter().map(|(_, v)| v).collect(), next)
}

/// Drops `key`'s map when it is empty (so a tenant's emptied views leave no trace).
pub(crate) fn drop_empty<K: Ord, V>(map: &mut BTreeMap<String, BTreeMap<K, V>>, key: &str) {
    if map.get(key).is_some_and(|m| m.is_empty()) {
        map.remove(key);
    }
}

//! The ledger's pure state machine: `decide` turns a command into events or a rejection,
//! `apply_event` folds an event into the views. No IO, no clock, no randomness, no hash-map
//! iteration: the same log yields byte-identical state (and digest) on every replica.

use std::collections::{BTreeMap, BTreeSet};

use crate::audit::{record_for, AuditIndex, AuditRecordV1};
use crate::catalog::{check_stored, CatalogVersion, CATALOG_VERSIONS_KEPT};
use crate::device::{
    validate_device, validate_site, Device, Enrollment, Executor, ExecutorCaV1, Site, ENROLLMENT_TTL_MAX_S,
};
use crate::ledger::{Command, Event, EventEnvelope, LedgerRequest, Outcome, Tenant, TenantState, CLUSTER_STREAM};
use crate::principal::{scope_covers, validate_scope, Principal, PrincipalState};
use crate::rejection::{validate_tenant_name, validate_text, DISPLAY_NAME_BYTES_MAX, NOTE_BYTES_MAX};
use crate::settings::TenantSettingsV1;
use crate::token::{SigningKeyV1, TenantIssuer, Token, TokenRecordV1, TokenRequestV1, DELEGATION_DEPTH_MAX_DEFAULT};
use crate::{ReasonCode, Rejection};
use serde::{Deserialize, Serialize};

use crate::operation::{DeviceLease, Operation};
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
    /// Tokens by tenant id, then `jti`.
    pub tokens: BTreeMap<String, BTreeMap<String, Token>>,
    /// Delegated children by tenant id, then parent `jti`.
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
    /// Operations by tenant id, then operation id.
    pub operations: BTreeMap<String, BTreeMap<String, Operation>>,
    /// Operation id by tenant id, then [`idempotency_slot`] (principal id and key).
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
}

/// The id of the principal (id or name) whose quotas are set.
fn quotas_subject(state: &LedgerState, tenant_id: &str, principal: &str) -> Result<String, Rejection> {
    state.principal(tenant_id, principal).map(|p| p.id.clone()).ok_or_else(|| {
        Rejection::new(ReasonCode::PRINCIPAL_NOT_FOUND, format!("no principal '{principal}' in this tenant"))
    })
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

fn unknown(env: &EventEnvelope, what: &str, id: &str) -> CorruptEvent {
    CorruptEvent::new(env, format!("unknown {what} '{id}'"))
}

impl LedgerState {
    /// Executes one log entry's request: advance the clock, decide, and apply what was decided.
    /// A rejection is itself an event, so every command leaves a trace. Returns the outcome
    /// for the proposer and every event appended (to store and publish).
    pub fn execute(&mut self, req: &LedgerRequest) -> (Outcome, Vec<EventEnvelope>) {
        let (outcome, events, _) = self.execute_audited(req);
        (outcome, events)
    }

    /// [`LedgerState::execute`], also returning the audit records the events produced (for
    /// the node to store).
    pub fn execute_audited(&mut self, req: &LedgerRequest) -> (Outcome, Vec<EventEnvelope>, Vec<AuditRecordV1>) {
        self.clock_ms = self.clock_ms.max(req.stamp_ms);
        let now = self.clock_ms;
        let mut audit = Vec::new();
        // Time-driven transitions of the tenant come first, so the command is decided on a
        // state that is current at ledger time `now` (they stand even if the command fails).
        let mut due = Vec::new();
        if req.command.is_operation() && self.tenants.contains_key(req.command.stream()) {
            let tenant = req.command.stream().to_string();
            for event in crate::operation::due(self, &tenant, now) {
                due.push(self.append(&tenant, &req.trace_id, event, &mut audit));
            }
        }
        match decide(self, &req.command, now) {
            Ok(events) => {
                let stream = req.command.stream().to_string();
                let mut envelopes = due;
                envelopes
                    .extend(events.into_iter().map(|event| self.append(&stream, &req.trace_id, event, &mut audit)));
                (Outcome::Applied { events: envelopes.clone() }, envelopes, audit)
            }
            Err(rejection) => {
                // Rejections of commands for tenants that do not exist go to the cluster
                // stream, so bad input never creates a tenant stream.
                let stream = if self.tenants.contains_key(req.command.stream()) {
                    req.command.stream().to_string()
                } else {
                    CLUSTER_STREAM.to_string()
                };
                let event = Event::CommandRejectedV2 {
                    command: req.command.kind().to_string(),
                    reason: rejection.reason,
                    message: rejection.message.clone(),
                    subject: req.command.subject(),
                };
                let env = self.append(&stream, &req.trace_id, event, &mut audit);
                let outcome =
                    Outcome::Rejected { reason: rejection.reason, message: rejection.message, revision: env.revision };
                due.push(env);
                (outcome, due, audit)
            }
        }
    }

    /// A principal's own quotas (all unset: none of its own).
    fn set_principal_quotas(&mut self, tenant_id: &str, principal_id: &str, quotas: PrincipalQuotasV2) {
        let by_tenant = self.principal_quotas.entry(tenant_id.to_string()).or_default();
        if quotas == PrincipalQuotasV2::default() {
            by_tenant.remove(principal_id);
        } else {
            by_tenant.insert(principal_id.to_string(), quotas);
        }
    }

    /// Positions an event (next revision, next stream sequence), applies it, and returns it.
    fn append(&mut self, stream: &str, trace_id: &str, event: Event, audit: &mut Vec<AuditRecordV1>) -> EventEnvelope {
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
    /// Returns the audit record the event produced (events of a tenant's stream do).
    ///
    /// Events were validated by `decide` before they were appended; an event that does not fit
    /// the state means the node's event log is corrupt, which must stop the node, not be
    /// papered over: this panics (the node's fatal path, see `raft-store`).
    pub fn apply_event(&mut self, env: &EventEnvelope) -> Option<AuditRecordV1> {
        match self.fold_event(env) {
            Ok(record) => record,
            Err(corrupt) => panic!("{corrupt}"),
        }
    }

    /// Folds one event into the views, or says why it does not fit ([`CorruptEvent`]). A
    /// follower of the ledger (an edge's replica) uses this and fails closed on an error; the
    /// state is then partly folded and must be replaced by a fresh snapshot.
    pub fn fold_event(&mut self, env: &EventEnvelope) -> Result<Option<AuditRecordV1>, CorruptEvent> {
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
        match &env.event {
            Event::TenantCreatedV1 { tenant_id, name, display_name } => {
                self.tenant_names.insert(name.clone(), tenant_id.clone());
                self.tenants.insert(
                    tenant_id.clone(),
                    Tenant {
                        id: tenant_id.clone(),
                        name: name.clone(),
                        display_name: display_name.clone(),
                        state: TenantState::Active,
                        created_at_ms: env.at_ms,
                        updated_at_ms: env.at_ms,
                        revision: env.revision,
                        settings: TenantSettingsV1::default(),
                    },
                );
            }
            Event::TenantSettingsChangedV1 { tenant_id, settings } => {
                let tenant = self.tenants.get_mut(tenant_id).ok_or_else(|| unknown(env, "tenant", tenant_id))?;
                tenant.settings = settings.clone();
                tenant.updated_at_ms = env.at_ms;
                tenant.revision = env.revision;
            }
            Event::TenantSuspendedV1 { tenant_id, .. } => {
                self.set_tenant_state(tenant_id, TenantState::Suspended, env)?
            }
            Event::TenantResumedV1 { tenant_id } => self.set_tenant_state(tenant_id, TenantState::Active, env)?,
            Event::CommandRejectedV1 { .. } | Event::CommandRejectedV2 { .. } => {}
            Event::PrincipalCreatedV1 { tenant_id, spec } => {
                let p = Principal::from_spec(tenant_id, spec, env.at_ms, env.revision);
                self.principal_names.entry(tenant_id.clone()).or_default().insert(p.name.clone(), p.id.clone());
                self.principals.entry(tenant_id.clone()).or_default().insert(p.id.clone(), p);
            }
            Event::PrincipalRevokedV1 { tenant_id, principal_id, .. } => {
                let p = self.principal_mut(tenant_id, principal_id, env)?;
                p.state = PrincipalState::Revoked;
                p.updated_at_ms = env.at_ms;
                p.revision = env.revision;
            }
            Event::SiteCreatedV1 { tenant_id, site_id, name, display_name } => {
                self.site_names.entry(tenant_id.clone()).or_default().insert(name.clone(), site_id.clone());
                let site = Site {
                    id: site_id.clone(),
                    tenant_id: tenant_id.clone(),
                    name: name.clone(),
                    display_name: display_name.clone(),
                    created_at_ms: env.at_ms,
                    revision: env.revision,
                };
                self.sites.entry(tenant_id.clone()).or_default().insert(site_id.clone(), site);
            }
            Event::DeviceCreatedV1 { tenant_id, device_id, site_id, name, device_class } => {
                self.device_names.entry(tenant_id.clone()).or_default().insert(name.clone(), device_id.clone());
                let device = Device {
                    id: device_id.clone(),
                    tenant_id: tenant_id.clone(),
                    site_id: site_id.clone(),
                    name: name.clone(),
                    device_class: device_class.clone(),
                    created_at_ms: env.at_ms,
                    revision: env.revision,
                };
                self.devices.entry(tenant_id.clone()).or_default().insert(device_id.clone(), device);
            }
            Event::TokenIssuedV1 { tenant_id, token } => {
                if let Some(parent) = &token.parent_jti {
                    self.token_children
                        .entry(tenant_id.clone())
                        .or_default()
                        .entry(parent.clone())
                        .or_default()
                        .insert(token.jti.clone());
                }
                let view = Token {
                    tenant_id: tenant_id.clone(),
                    record: token.clone(),
                    revoked_at_ms: None,
                    revoked_via: None,
                };
                self.tokens.entry(tenant_id.clone()).or_default().insert(token.jti.clone(), view);
            }
            Event::TokenRevokedV1 { tenant_id, jti, cascade } => {
                let tokens = self.tokens.get_mut(tenant_id).ok_or_else(|| unknown(env, "token", jti))?;
                for id in std::iter::once(jti).chain(cascade) {
                    let t = tokens.get_mut(id).ok_or_else(|| unknown(env, "token", id))?;
                    t.revoked_at_ms = Some(env.at_ms);
                    t.revoked_via = Some(jti.clone());
                }
            }
            Event::SigningKeyRegisteredV1 { key } => {
                self.signing_keys.insert(key.kid.clone(), key.clone());
            }
            Event::TenantIssuerSetV1 { tenant_id, issuer } => {
                let view = TenantIssuer { tenant_id: tenant_id.clone(), spec: issuer.clone(), revision: env.revision };
                self.issuers.insert(issuer.issuer.clone(), view);
            }
            Event::TenantIssuerRemovedV1 { issuer, .. } => {
                self.issuers.remove(issuer);
            }
            Event::CatalogPublishedV1 { tenant_id, version, catalog } => {
                let versions = self.catalogs.entry(tenant_id.clone()).or_default();
                versions.insert(
                    *version,
                    CatalogVersion {
                        tenant_id: tenant_id.clone(),
                        version: *version,
                        published_at_ms: env.at_ms,
                        revision: env.revision,
                        catalog: catalog.clone(),
                    },
                );
                while versions.len() > CATALOG_VERSIONS_KEPT {
                    versions.pop_first();
                }
            }
            Event::EnrollmentCreatedV1 { tenant_id, enrollment: e } => {
                let view = Enrollment {
                    id: e.enrollment_id.clone(),
                    tenant_id: tenant_id.clone(),
                    site_id: e.site_id.clone(),
                    device_ids: e.device_ids.clone(),
                    token_sha256: e.token_sha256.clone(),
                    created_at_ms: env.at_ms,
                    expires_at_ms: env.at_ms.saturating_add(e.ttl_s.saturating_mul(1000)),
                    used_at_ms: None,
                    executor_id: None,
                };
                self.enrollments.entry(tenant_id.clone()).or_default().insert(e.enrollment_id.clone(), view);
            }
            Event::ExecutorEnrolledV1 { tenant_id, enrollment_id, cert } => {
                let e = self
                    .enrollments
                    .get_mut(tenant_id)
                    .and_then(|m| m.get_mut(enrollment_id))
                    .ok_or_else(|| unknown(env, "enrollment", enrollment_id))?;
                e.used_at_ms = Some(env.at_ms);
                e.executor_id = Some(cert.executor_id.clone());
                let executor = Executor {
                    id: cert.executor_id.clone(),
                    tenant_id: tenant_id.clone(),
                    site_id: e.site_id.clone(),
                    device_ids: e.device_ids.clone(),
                    enrollment_id: enrollment_id.clone(),
                    cert: cert.clone(),
                    enrolled_at_ms: env.at_ms,
                    revoked_at_ms: None,
                    revision: env.revision,
                };
                self.executor_certs.insert(cert.fingerprint.clone(), (tenant_id.clone(), cert.executor_id.clone()));
                self.executors.entry(tenant_id.clone()).or_default().insert(cert.executor_id.clone(), executor);
            }
            Event::ExecutorRevokedV1 { tenant_id, executor_id } => {
                let x = self
                    .executors
                    .get_mut(tenant_id)
                    .and_then(|m| m.get_mut(executor_id))
                    .ok_or_else(|| unknown(env, "executor", executor_id))?;
                x.revoked_at_ms = Some(env.at_ms);
                x.revision = env.revision;
            }
            Event::ExecutorCaRegisteredV1 { tenant_id, ca } => {
                self.executor_cas.entry(tenant_id.clone()).or_default().insert(ca.fingerprint.clone(), ca.clone());
            }
            // Only an audit record (below).
            Event::RequestDecidedV1 { .. } => {}
            Event::PrincipalQuotasSetV1 { tenant_id, principal_id, quotas } => {
                self.set_principal_quotas(tenant_id, principal_id, quotas.clone().into())
            }
            Event::PrincipalQuotasSetV2 { tenant_id, principal_id, quotas } => {
                self.set_principal_quotas(tenant_id, principal_id, quotas.clone())
            }
            Event::OperationSubmittedV1 { .. }
            | Event::DeviceReservedV1 { .. }
            | Event::DeviceReleasedV1 { .. }
            | Event::OperationDispatchedV1 { .. }
            | Event::OperationTransitionedV1 { .. }
            | Event::AttemptLeaseExtendedV1 { .. }
            | Event::EvidenceReportedV1 { .. }
            | Event::ObservationRecordedV1 { .. }
            | Event::OperationInputsAnsweredV1 { .. }
            | Event::OperationCancelRequestedV1 { .. } => crate::operation::apply(self, env)?,
            Event::RequestQuotaLeasedV1 { tenant_id, principal_id, window, granted, .. } => {
                let w = self.quota_windows.entry(tenant_id.clone()).or_default();
                if w.window != *window {
                    *w = QuotaWindow { window: *window, ..Default::default() };
                }
                w.tenant_granted += granted;
                *w.principal_granted.entry(principal_id.clone()).or_default() += granted;
            }
            Event::ScopeRevokedV1 { tenant_id, principal_id, scope } => {
                let p = self.principal_mut(tenant_id, principal_id, env)?;
                p.scopes.remove(scope);
                p.revoked_scopes.insert(scope.clone());
                p.updated_at_ms = env.at_ms;
                p.revision = env.revision;
            }
        }
        Ok(self.audit_event(env))
    }

    /// Records an event of a tenant stream in the tenant's audit index and applies retention.
    fn audit_event(&mut self, env: &EventEnvelope) -> Option<AuditRecordV1> {
        let settings = &self.tenants.get(&env.stream)?.settings;
        let (max_events, max_age_s) = (settings.audit_max_events, settings.audit_max_age_s);
        let index = self.audit.entry(env.stream.clone()).or_default();
        let record = record_for(env, &env.stream, index.next_seq.max(1));
        index.push(env.at_ms, &crate::encode(&record).expect("audit records encode"));
        index.retain(max_events, max_age_s, env.at_ms);
        Some(record)
    }

    fn set_tenant_state(
        &mut self,
        tenant_id: &str,
        state: TenantState,
        env: &EventEnvelope,
    ) -> Result<(), CorruptEvent> {
        let tenant = self.tenants.get_mut(tenant_id).ok_or_else(|| unknown(env, "tenant", tenant_id))?;
        tenant.state = state;
        tenant.updated_at_ms = env.at_ms;
        tenant.revision = env.revision;
        Ok(())
    }

    fn principal_mut(
        &mut self,
        tenant_id: &str,
        principal_id: &str,
        env: &EventEnvelope,
    ) -> Result<&mut Principal, CorruptEvent> {
        self.principals
            .get_mut(tenant_id)
            .and_then(|m| m.get_mut(principal_id))
            .ok_or_else(|| unknown(env, "principal", principal_id))
    }

    /// Looks a principal of a tenant up by id, then by name.
    pub fn principal(&self, tenant_id: &str, id_or_name: &str) -> Option<&Principal> {
        let by_tenant = self.principals.get(tenant_id)?;
        by_tenant.get(id_or_name).or_else(|| {
            let id = self.principal_names.get(tenant_id)?.get(id_or_name)?;
            by_tenant.get(id)
        })
    }

    /// A tenant's principals ordered by name, after the cursor (a name), at most `limit`.
    pub fn list_principals(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<Principal>, Option<String>) {
        let (Some(names), Some(by_id)) = (self.principal_names.get(tenant_id), self.principals.get(tenant_id)) else {
            return (Vec::new(), None);
        };
        page_by_name(names, |id| by_id.get(id).cloned(), after, limit)
    }

    /// A site of a tenant by id, then by name.
    pub fn site(&self, tenant_id: &str, id_or_name: &str) -> Option<&Site> {
        by_id_or_name(&self.sites, &self.site_names, tenant_id, id_or_name)
    }

    /// A device of a tenant by id, then by name.
    pub fn device(&self, tenant_id: &str, id_or_name: &str) -> Option<&Device> {
        by_id_or_name(&self.devices, &self.device_names, tenant_id, id_or_name)
    }

    /// A tenant's sites ordered by name.
    pub fn list_sites(&self, tenant_id: &str, after: Option<&str>, limit: usize) -> (Vec<Site>, Option<String>) {
        let (Some(names), Some(by_id)) = (self.site_names.get(tenant_id), self.sites.get(tenant_id)) else {
            return (Vec::new(), None);
        };
        page_by_name(names, |id| by_id.get(id).cloned(), after, limit)
    }

    /// A tenant's devices (optionally of one site) ordered by name.
    pub fn list_devices(
        &self,
        tenant_id: &str,
        site_id: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<Device>, Option<String>) {
        let (Some(names), Some(by_id)) = (self.device_names.get(tenant_id), self.devices.get(tenant_id)) else {
            return (Vec::new(), None);
        };
        let in_site = |d: &Device| site_id.is_none_or(|s| d.site_id == s);
        page_by_name(names, |id| by_id.get(id).filter(|d| in_site(d)).cloned(), after, limit)
    }

    /// A tenant's catalog: `version`, or the newest when `None`.
    pub fn catalog(&self, tenant_id: &str, version: Option<u64>) -> Option<&CatalogVersion> {
        let versions = self.catalogs.get(tenant_id)?;
        match version {
            Some(v) => versions.get(&v),
            None => versions.values().next_back(),
        }
    }

    /// A token of a tenant by `jti`.
    pub fn token(&self, tenant_id: &str, jti: &str) -> Option<&Token> {
        self.tokens.get(tenant_id)?.get(jti)
    }

    /// Every live (unrevoked) descendant of `jti`, sorted.
    fn live_descendants(&self, tenant_id: &str, jti: &str) -> Vec<String> {
        let Some(children) = self.token_children.get(tenant_id) else { return Vec::new() };
        let mut out = BTreeSet::new();
        let mut stack = vec![jti.to_string()];
        while let Some(id) = stack.pop() {
            for child in children.get(&id).into_iter().flatten() {
                if out.insert(child.clone()) {
                    stack.push(child.clone());
                }
            }
        }
        out.into_iter().filter(|id| self.token(tenant_id, id).is_some_and(|t| t.revoked_at_ms.is_none())).collect()
    }

    /// Looks a tenant up by id, then by name.
    pub fn tenant(&self, id_or_name: &str) -> Option<&Tenant> {
        self.tenants.get(id_or_name).or_else(|| self.tenant_names.get(id_or_name).and_then(|id| self.tenants.get(id)))
    }

    /// Tenants ordered by name, after the cursor (a name), at most `limit`.
    pub fn list_tenants(&self, after: Option<&str>, limit: usize) -> (Vec<Tenant>, Option<String>) {
        page_by_name(&self.tenant_names, |id| self.tenants.get(id).cloned(), after, limit)
    }

    /// Canonical encoding of the whole state (the digest's input; the body of the versioned
    /// encodings in [`crate::format`]).
    pub fn encode(&self) -> Vec<u8> {
        crate::encode(self).expect("ledger state is always encodable")
    }

    /// The state as a node serves it to followers: versioned (see [`crate::format`]).
    pub fn encode_versioned(&self) -> Vec<u8> {
        crate::format::wrap(crate::format::STATE_MAGIC, &self.encode())
    }

    /// Reads [`LedgerState::encode_versioned`] (or the headerless pre-version layout), bounded
    /// like a message ([`crate::decode`]).
    pub fn decode_versioned(bytes: &[u8]) -> Result<LedgerState, String> {
        let body = crate::format::unwrap(crate::format::STATE_MAGIC, bytes).map_err(|e| e.to_string())?;
        crate::decode(body).map_err(|e| format!("undecodable ledger state: {e}"))
    }

    /// sha256 over the canonical encoding: equal on every replica at the same applied index.
    pub fn digest(&self) -> String {
        crate::sha256_hex(&self.encode())
    }
}

/// Looks an entity of a tenant up by id, then through the tenant's name index.
fn by_id_or_name<'a, T>(
    by_id: &'a BTreeMap<String, BTreeMap<String, T>>,
    names: &BTreeMap<String, BTreeMap<String, String>>,
    tenant_id: &str,
    id_or_name: &str,
) -> Option<&'a T> {
    let of_tenant = by_id.get(tenant_id)?;
    of_tenant.get(id_or_name).or_else(|| of_tenant.get(names.get(tenant_id)?.get(id_or_name)?))
}

/// One page of a name index (`name → id`) after the cursor `after` (a name), resolved through
/// `lookup`; the cursor of the next page is the last name returned, if more follow.
fn page_by_name<T>(
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

/// Decides what a command does to the state at ledger time `now`, without changing it.
pub fn decide(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    let _ = now; // Tenants have no time rules yet; deadlines and leases will use it.
    match cmd {
        Command::CreateTenant { tenant_id, name, display_name } => {
            validate_tenant_name(name)?;
            validate_text("display_name", display_name.as_deref(), DISPLAY_NAME_BYTES_MAX)?;
            if tenant_id.is_empty() || tenant_id == CLUSTER_STREAM || tenant_id.len() > 64 {
                return Err(Rejection::new(ReasonCode::INPUT_INVALID, "tenant id must be 1..=64 bytes"));
            }
            if state.tenant_names.contains_key(name) {
                return Err(Rejection::new(
                    ReasonCode::TENANT_ALREADY_EXISTS,
                    format!("a tenant named '{name}' already exists"),
                ));
            }
            if state.tenants.contains_key(tenant_id) {
                return Err(Rejection::new(
                    ReasonCode::TENANT_ALREADY_EXISTS,
                    format!("tenant id '{tenant_id}' is taken"),
                ));
            }
            Ok(vec![Event::TenantCreatedV1 {
                tenant_id: tenant_id.clone(),
                name: name.clone(),
                display_name: display_name.clone(),
            }])
        }
        Command::SuspendTenant { tenant_id, note } => {
            validate_text("note", note.as_deref(), NOTE_BYTES_MAX)?;
            match existing(state, tenant_id)?.state {
                TenantState::Active => {
                    Ok(vec![Event::TenantSuspendedV1 { tenant_id: tenant_id.clone(), note: note.clone() }])
                }
                TenantState::Suspended => Err(Rejection::new(
                    ReasonCode::TENANT_STATE_CONFLICT,
                    format!("tenant '{tenant_id}' is already suspended"),
                )),
            }
        }
        Command::SetTenantSettings { tenant_id, patch } => {
            let settings = existing(state, tenant_id)?.settings.patched(patch)?;
            Ok(vec![Event::TenantSettingsChangedV1 { tenant_id: tenant_id.clone(), settings }])
        }
        Command::CreatePrincipal { tenant_id, spec } => {
            existing(state, tenant_id)?;
            spec.validate()?;
            if state.principal(tenant_id, &spec.name).is_some() {
                return Err(Rejection::new(
                    ReasonCode::PRINCIPAL_ALREADY_EXISTS,
                    format!("a principal named '{}' already exists in this tenant", spec.name),
                ));
            }
            if state.principal(tenant_id, &spec.principal_id).is_some() {
                return Err(Rejection::new(ReasonCode::PRINCIPAL_ALREADY_EXISTS, "principal id is taken"));
            }
            Ok(vec![Event::PrincipalCreatedV1 { tenant_id: tenant_id.clone(), spec: spec.clone() }])
        }
        Command::RevokePrincipal { tenant_id, principal_id, note } => {
            validate_text("note", note.as_deref(), NOTE_BYTES_MAX)?;
            active_principal(state, tenant_id, principal_id)?;
            Ok(vec![Event::PrincipalRevokedV1 {
                tenant_id: tenant_id.clone(),
                principal_id: principal_id.clone(),
                note: note.clone(),
            }])
        }
        Command::RevokeScope { tenant_id, principal_id, scope } => {
            let p = active_principal(state, tenant_id, principal_id)?;
            if !p.scopes.contains(scope) {
                return Err(Rejection::new(
                    ReasonCode::INPUT_INVALID,
                    format!("principal '{}' does not hold scope '{scope}'", p.name),
                ));
            }
            Ok(vec![Event::ScopeRevokedV1 {
                tenant_id: tenant_id.clone(),
                principal_id: principal_id.clone(),
                scope: scope.clone(),
            }])
        }
        Command::CreateSite { tenant_id, site_id, name, display_name } => {
            existing(state, tenant_id)?;
            validate_site(site_id, name, display_name.as_deref())?;
            if state.site(tenant_id, name).is_some() || state.site(tenant_id, site_id).is_some() {
                return Err(Rejection::new(
                    ReasonCode::SITE_ALREADY_EXISTS,
                    format!("a site named '{name}' (or with this id) already exists in this tenant"),
                ));
            }
            Ok(vec![Event::SiteCreatedV1 {
                tenant_id: tenant_id.clone(),
                site_id: site_id.clone(),
                name: name.clone(),
                display_name: display_name.clone(),
            }])
        }
        Command::CreateDevice { tenant_id, device_id, site_id, name, device_class } => {
            existing(state, tenant_id)?;
            validate_device(device_id, name, device_class)?;
            if state.sites.get(tenant_id).and_then(|s| s.get(site_id)).is_none() {
                return Err(Rejection::new(ReasonCode::SITE_NOT_FOUND, format!("no site '{site_id}' in this tenant")));
            }
            if state.device(tenant_id, name).is_some() || state.device(tenant_id, device_id).is_some() {
                return Err(Rejection::new(
                    ReasonCode::DEVICE_ALREADY_EXISTS,
                    format!("a device named '{name}' (or with this id) already exists in this tenant"),
                ));
            }
            Ok(vec![Event::DeviceCreatedV1 {
                tenant_id: tenant_id.clone(),
                device_id: device_id.clone(),
                site_id: site_id.clone(),
                name: name.clone(),
                device_class: device_class.clone(),
            }])
        }
        Command::IssueToken { tenant_id, request } => Ok(vec![Event::TokenIssuedV1 {
            tenant_id: tenant_id.clone(),
            token: decide_token(state, tenant_id, request, now)?,
        }]),
        Command::RevokeToken { tenant_id, jti } => {
            existing(state, tenant_id)?;
            let token = state
                .token(tenant_id, jti)
                .ok_or_else(|| Rejection::new(ReasonCode::TOKEN_NOT_FOUND, format!("no token '{jti}'")))?;
            if token.revoked_at_ms.is_some() {
                return Err(Rejection::new(
                    ReasonCode::TOKEN_ALREADY_REVOKED,
                    format!("token '{jti}' is already revoked"),
                ));
            }
            let cascade = state.live_descendants(tenant_id, jti);
            Ok(vec![Event::TokenRevokedV1 { tenant_id: tenant_id.clone(), jti: jti.clone(), cascade }])
        }
        Command::RegisterSigningKey { key } => {
            key.validate()?;
            match state.signing_keys.get(&key.kid) {
                Some(known) if known == key => Ok(vec![]),
                Some(_) => Err(Rejection::new(
                    ReasonCode::SIGNING_KEY_CONFLICT,
                    format!("key id '{}' is registered with a different key", key.kid),
                )),
                None => Ok(vec![Event::SigningKeyRegisteredV1 { key: key.clone() }]),
            }
        }
        Command::SetTenantIssuer { tenant_id, issuer } => {
            existing(state, tenant_id)?;
            issuer.validate()?;
            if let Some(owner) = state.issuers.get(&issuer.issuer).filter(|i| i.tenant_id != *tenant_id) {
                return Err(Rejection::new(
                    ReasonCode::ISSUER_CONFLICT,
                    format!("issuer '{}' is registered for another tenant ({})", issuer.issuer, owner.tenant_id),
                ));
            }
            Ok(vec![Event::TenantIssuerSetV1 { tenant_id: tenant_id.clone(), issuer: issuer.clone() }])
        }
        Command::RemoveTenantIssuer { tenant_id, issuer } => {
            existing(state, tenant_id)?;
            match state.issuers.get(issuer) {
                Some(i) if i.tenant_id == *tenant_id => {
                    Ok(vec![Event::TenantIssuerRemovedV1 { tenant_id: tenant_id.clone(), issuer: issuer.clone() }])
                }
                _ => Err(Rejection::new(ReasonCode::ISSUER_NOT_FOUND, format!("no issuer '{issuer}' in this tenant"))),
            }
        }
        Command::PublishCatalog { tenant_id, catalog } => {
            existing(state, tenant_id)?;
            check_stored(catalog)?;
            let current = state.catalog(tenant_id, None);
            if current.is_some_and(|c| c.catalog.digest == catalog.digest) {
                return Ok(vec![]);
            }
            let version = current.map_or(1, |c| c.version + 1);
            Ok(vec![Event::CatalogPublishedV1 { tenant_id: tenant_id.clone(), version, catalog: catalog.clone() }])
        }
        Command::CreateEnrollment { tenant_id, enrollment: e } => {
            active(state, tenant_id)?;
            let site = state
                .site(tenant_id, &e.site_id)
                .ok_or_else(|| Rejection::new(ReasonCode::SITE_NOT_FOUND, format!("no site '{}'", e.site_id)))?;
            for d in &e.device_ids {
                match state.devices.get(tenant_id).and_then(|m| m.get(d)) {
                    Some(dev) if dev.site_id == site.id => {}
                    Some(_) => {
                        return Err(Rejection::new(
                            ReasonCode::INPUT_INVALID,
                            format!("device '{d}' is not at site '{}'", site.name),
                        ))
                    }
                    None => return Err(Rejection::new(ReasonCode::DEVICE_NOT_FOUND, format!("no device '{d}'"))),
                }
            }
            let taken = state.enrollments.get(tenant_id).is_some_and(|m| m.contains_key(&e.enrollment_id));
            if e.enrollment_id.is_empty() || e.enrollment_id.len() > 64 || taken || e.token_sha256.len() != 64 {
                return Err(Rejection::new(
                    ReasonCode::INPUT_INVALID,
                    "enrollment id must be new and 1..=64 bytes, token hash sha256 hex",
                ));
            }
            if e.ttl_s == 0 || e.ttl_s > ENROLLMENT_TTL_MAX_S {
                return Err(Rejection::new(
                    ReasonCode::INPUT_INVALID,
                    format!("enrollment ttl must be 1..={ENROLLMENT_TTL_MAX_S} s"),
                ));
            }
            Ok(vec![Event::EnrollmentCreatedV1 { tenant_id: tenant_id.clone(), enrollment: e.clone() }])
        }
        Command::CompleteEnrollment { tenant_id, enrollment_id, token_sha256, cert } => {
            active(state, tenant_id)?;
            let e = state
                .enrollments
                .get(tenant_id)
                .and_then(|m| m.get(enrollment_id))
                .filter(|e| e.token_sha256 == *token_sha256)
                .ok_or_else(|| Rejection::new(ReasonCode::ENROLLMENT_TOKEN_INVALID, "unknown enrollment token"))?;
            if e.used_at_ms.is_some() {
                return Err(Rejection::new(
                    ReasonCode::ENROLLMENT_TOKEN_USED,
                    "this enrollment token was already used",
                ));
            }
            if e.expires_at_ms <= now {
                return Err(Rejection::new(ReasonCode::ENROLLMENT_TOKEN_EXPIRED, "this enrollment token has expired"));
            }
            let known_ca = state.executor_cas.get(tenant_id).is_some_and(|m| m.contains_key(&cert.ca_fingerprint));
            let fresh = !state.executor_certs.contains_key(&cert.fingerprint)
                && !state.executors.get(tenant_id).is_some_and(|m| m.contains_key(&cert.executor_id));
            if !known_ca || !fresh || cert.fingerprint.len() != 64 {
                return Err(Rejection::new(
                    ReasonCode::INPUT_INVALID,
                    "certificate record is not new or names an unknown CA",
                ));
            }
            Ok(vec![Event::ExecutorEnrolledV1 {
                tenant_id: tenant_id.clone(),
                enrollment_id: enrollment_id.clone(),
                cert: cert.clone(),
            }])
        }
        Command::RevokeExecutor { tenant_id, executor_id } => {
            existing(state, tenant_id)?;
            match state.executors.get(tenant_id).and_then(|m| m.get(executor_id)) {
                None => Err(Rejection::new(ReasonCode::EXECUTOR_NOT_FOUND, format!("no executor '{executor_id}'"))),
                Some(x) if x.revoked_at_ms.is_some() => {
                    Err(Rejection::new(ReasonCode::EXECUTOR_STATE_CONFLICT, "the executor is already revoked"))
                }
                Some(_) => Ok(vec![Event::ExecutorRevokedV1 {
                    tenant_id: tenant_id.clone(),
                    executor_id: executor_id.clone(),
                }]),
            }
        }
        Command::RegisterExecutorCa { tenant_id, ca } => {
            existing(state, tenant_id)?;
            if ca.fingerprint != crate::sha256_hex(&ca.cert_der) {
                return Err(Rejection::new(ReasonCode::INPUT_INVALID, "CA fingerprint does not match its certificate"));
            }
            if state.executor_cas.get(tenant_id).is_some_and(|m| m.contains_key(&ca.fingerprint)) {
                return Ok(vec![]);
            }
            Ok(vec![Event::ExecutorCaRegisteredV1 { tenant_id: tenant_id.clone(), ca: ca.clone() }])
        }
        Command::RecordDecisions { tenant_id, decisions } => {
            existing(state, tenant_id)?;
            if decisions.is_empty() || decisions.len() > crate::audit::DECISIONS_PER_COMMAND_MAX {
                return Err(Rejection::new(ReasonCode::INPUT_INVALID, "1..=1000 decisions per command"));
            }
            if decisions.iter().any(|d| !matches!(d.outcome.as_str(), "allowed" | "denied")) {
                return Err(Rejection::new(ReasonCode::INPUT_INVALID, "a decision's outcome is allowed or denied"));
            }
            Ok(decisions
                .iter()
                .map(|d| Event::RequestDecidedV1 { tenant_id: tenant_id.clone(), decision: d.clone() })
                .collect())
        }
        Command::SubmitOperation { .. }
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
        | Command::AnswerInputs { .. } => crate::operation::decide(state, cmd, now),
        Command::SetPrincipalQuotas { tenant_id, principal, quotas } => {
            existing(state, tenant_id)?;
            quotas.validate()?;
            let principal_id = quotas_subject(state, tenant_id, principal)?;
            Ok(vec![Event::PrincipalQuotasSetV1 { tenant_id: tenant_id.clone(), principal_id, quotas: quotas.clone() }])
        }
        Command::SetPrincipalQuotasV2 { tenant_id, principal, quotas } => {
            existing(state, tenant_id)?;
            quotas.validate()?;
            let principal_id = quotas_subject(state, tenant_id, principal)?;
            Ok(vec![Event::PrincipalQuotasSetV2 { tenant_id: tenant_id.clone(), principal_id, quotas: quotas.clone() }])
        }
        Command::LeaseRequestQuota { tenant_id, principal_id, wanted } => {
            let tenant = existing(state, tenant_id)?;
            if !(1..=crate::quota::SLICE_MAX).contains(wanted) {
                return Err(Rejection::new(ReasonCode::INPUT_INVALID, "a lease asks for 1..=100 requests"));
            }
            if state.principals.get(tenant_id).and_then(|m| m.get(principal_id)).is_none() {
                return Err(Rejection::new(ReasonCode::PRINCIPAL_NOT_FOUND, format!("no principal '{principal_id}'")));
            }
            let window = now / crate::quota::WINDOW_MS;
            let principal_limit = state
                .principal_quotas
                .get(tenant_id)
                .and_then(|m| m.get(principal_id))
                .and_then(|q| q.requests_per_minute);
            let granted = crate::quota::grantable(
                state.quota_windows.get(tenant_id),
                window,
                principal_id,
                tenant.settings.quotas.requests_per_minute,
                principal_limit,
                *wanted,
            );
            Ok(vec![Event::RequestQuotaLeasedV1 {
                tenant_id: tenant_id.clone(),
                principal_id: principal_id.clone(),
                window,
                granted,
                window_ends_at_ms: (window + 1) * crate::quota::WINDOW_MS,
            }])
        }
        Command::ResumeTenant { tenant_id } => match existing(state, tenant_id)?.state {
            TenantState::Suspended => Ok(vec![Event::TenantResumedV1 { tenant_id: tenant_id.clone() }]),
            TenantState::Active => {
                Err(Rejection::new(ReasonCode::TENANT_STATE_CONFLICT, format!("tenant '{tenant_id}' is not suspended")))
            }
        },
    }
}

/// The rules of issuing a token: domain gate (tenant active) before scope gate; lifetime clamped
/// to the tenant's bounds and, for a delegated token, to its parent's; a delegated token's scopes
/// are a subset of its parent's, which must hold `tokens:delegate`, within the depth limit.
fn decide_token(
    state: &LedgerState,
    tenant_id: &str,
    req: &TokenRequestV1,
    now: u64,
) -> Result<TokenRecordV1, Rejection> {
    let tenant = existing(state, tenant_id)?;
    if tenant.state == TenantState::Suspended {
        return Err(Rejection::new(ReasonCode::TENANT_SUSPENDED, format!("tenant '{}' is suspended", tenant.name)));
    }
    if req.jti.is_empty() || req.jti.len() > 64 || state.token(tenant_id, &req.jti).is_some() {
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, "token id must be 1..=64 bytes and unused"));
    }
    let principal = active_principal(state, tenant_id, &req.principal_id)?;
    for scope in &req.scopes {
        validate_scope(scope)?;
    }
    let ttl_ms = req.ttl_s.clamp(tenant.settings.token_ttl_min_s, tenant.settings.token_ttl_max_s).saturating_mul(1000);
    let mut expires_at_ms = now.saturating_add(ttl_ms);
    let (granting, depth) = match &req.parent_jti {
        None => (&principal.scopes, 0),
        Some(parent_jti) => {
            let parent = state.token(tenant_id, parent_jti).ok_or_else(|| {
                Rejection::new(ReasonCode::AUTH_TOKEN_INVALID, format!("no parent token '{parent_jti}'"))
            })?;
            if parent.revoked_at_ms.is_some() {
                return Err(Rejection::new(ReasonCode::AUTH_TOKEN_REVOKED, "the parent token is revoked"));
            }
            if parent.record.expires_at_ms <= now {
                return Err(Rejection::new(ReasonCode::AUTH_TOKEN_EXPIRED, "the parent token has expired"));
            }
            let depth = parent.record.depth + 1;
            if depth > DELEGATION_DEPTH_MAX_DEFAULT {
                return Err(Rejection::new(
                    ReasonCode::DELEGATION_DEPTH_EXCEEDED,
                    format!("delegation depth {depth} exceeds the limit of {DELEGATION_DEPTH_MAX_DEFAULT}"),
                ));
            }
            // The depth limit is structural and answered first; then the right to delegate.
            if !parent.record.scopes.contains("tokens:delegate") {
                return Err(Rejection::new(
                    ReasonCode::APP_SCOPE_FORBIDDEN,
                    "the parent token lacks scope tokens:delegate",
                ));
            }
            expires_at_ms = expires_at_ms.min(parent.record.expires_at_ms);
            (&parent.record.scopes, depth)
        }
    };
    for scope in &req.scopes {
        if !granting.iter().any(|g| scope_covers(g, scope)) {
            let reason = if principal.revoked_scopes.iter().any(|r| scope_covers(r, scope)) {
                ReasonCode::APP_SCOPE_REVOKED
            } else {
                ReasonCode::APP_SCOPE_FORBIDDEN
            };
            let from = if req.parent_jti.is_some() { "the parent token" } else { "the principal" };
            return Err(Rejection::new(reason, format!("scope '{scope}' is not held by {from}")));
        }
    }
    let scopes = if req.scopes.is_empty() { granting.clone() } else { req.scopes.clone() };
    Ok(TokenRecordV1 {
        jti: req.jti.clone(),
        principal_id: principal.id.clone(),
        scopes,
        issued_at_ms: now,
        expires_at_ms,
        parent_jti: req.parent_jti.clone(),
        depth,
    })
}

fn active_principal<'a>(
    state: &'a LedgerState,
    tenant_id: &str,
    principal_id: &str,
) -> Result<&'a Principal, Rejection> {
    existing(state, tenant_id)?;
    let p = state
        .principals
        .get(tenant_id)
        .and_then(|m| m.get(principal_id))
        .ok_or_else(|| Rejection::new(ReasonCode::PRINCIPAL_NOT_FOUND, format!("no principal '{principal_id}'")))?;
    match p.state {
        PrincipalState::Active => Ok(p),
        PrincipalState::Revoked => Err(Rejection::new(
            ReasonCode::PRINCIPAL_STATE_CONFLICT,
            format!("principal '{}' is already revoked", p.name),
        )),
    }
}

/// The tenant, which must not be suspended.
fn active<'a>(state: &'a LedgerState, tenant_id: &str) -> Result<&'a Tenant, Rejection> {
    let tenant = existing(state, tenant_id)?;
    if tenant.state == TenantState::Suspended {
        return Err(Rejection::new(ReasonCode::TENANT_SUSPENDED, format!("tenant '{}' is suspended", tenant.name)));
    }
    Ok(tenant)
}

pub(crate) fn existing<'a>(state: &'a LedgerState, tenant_id: &str) -> Result<&'a Tenant, Rejection> {
    state
        .tenants
        .get(tenant_id)
        .ok_or_else(|| Rejection::new(ReasonCode::TENANT_NOT_FOUND, format!("no tenant '{tenant_id}'")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::principal::{PrincipalKind, PrincipalSpecV1, RolePreset};
    use crate::settings::TenantSettingsPatch;
    use crate::token::TokenRequestV1;

    fn req(stamp_ms: u64, command: Command) -> LedgerRequest {
        LedgerRequest { stamp_ms, trace_id: "t".into(), command }
    }

    fn create(id: &str, name: &str) -> Command {
        Command::CreateTenant { tenant_id: id.into(), name: name.into(), display_name: None }
    }

    #[test]
    fn decide_table() {
        let mut st = LedgerState::default();
        assert!(matches!(st.execute(&req(10, create("a", "acme"))).0, Outcome::Applied { .. }));
        let cases: Vec<(Command, Option<ReasonCode>)> = vec![
            (create("b", "acme"), Some(ReasonCode::TENANT_ALREADY_EXISTS)),
            (create("a", "other"), Some(ReasonCode::TENANT_ALREADY_EXISTS)),
            (create("c", "Bad Name"), Some(ReasonCode::INPUT_INVALID)),
            (create("c", ""), Some(ReasonCode::INPUT_INVALID)),
            (create("c", "-x"), Some(ReasonCode::INPUT_INVALID)),
            (create(CLUSTER_STREAM, "x"), Some(ReasonCode::INPUT_INVALID)),
            (Command::ResumeTenant { tenant_id: "a".into() }, Some(ReasonCode::TENANT_STATE_CONFLICT)),
            (Command::SuspendTenant { tenant_id: "zz".into(), note: None }, Some(ReasonCode::TENANT_NOT_FOUND)),
            (
                Command::SuspendTenant { tenant_id: "a".into(), note: Some("x".repeat(501)) },
                Some(ReasonCode::INPUT_INVALID),
            ),
            (Command::SuspendTenant { tenant_id: "a".into(), note: None }, None),
            (Command::SuspendTenant { tenant_id: "a".into(), note: None }, Some(ReasonCode::TENANT_STATE_CONFLICT)),
            (Command::ResumeTenant { tenant_id: "a".into() }, None),
            (
                Command::SetTenantSettings {
                    tenant_id: "a".into(),
                    patch: TenantSettingsPatch { idempotency_retention_s: Some(60), ..Default::default() },
                },
                Some(ReasonCode::INPUT_INVALID),
            ),
            (
                Command::SetTenantSettings { tenant_id: "zz".into(), patch: TenantSettingsPatch::default() },
                Some(ReasonCode::TENANT_NOT_FOUND),
            ),
            (
                Command::SetTenantSettings {
                    tenant_id: "a".into(),
                    patch: TenantSettingsPatch { audit_max_events: Some(500), ..Default::default() },
                },
                None,
            ),
        ];
        for (cmd, want) in cases {
            let got = decide(&st, &cmd, 0).err().map(|r| r.reason);
            assert_eq!(got, want, "{cmd:?}");
            st.execute(&req(11, cmd));
        }
    }

    fn spec(id: &str, name: &str, scopes: &[&str]) -> PrincipalSpecV1 {
        PrincipalSpecV1 {
            principal_id: id.into(),
            name: name.into(),
            kind: PrincipalKind::Agent,
            preset: Some(RolePreset::ReadOnly),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            metadata: Default::default(),
        }
    }

    #[test]
    fn principal_rules() {
        let mut st = LedgerState::default();
        st.execute(&req(1, create("a", "acme")));
        let cp = |tenant: &str, s: PrincipalSpecV1| Command::CreatePrincipal { tenant_id: tenant.into(), spec: s };
        let cases: Vec<(Command, Option<ReasonCode>)> = vec![
            (cp("zz", spec("p1", "bot", &[])), Some(ReasonCode::TENANT_NOT_FOUND)),
            (cp("a", spec("p1", "bot", &["admin:everything"])), Some(ReasonCode::INPUT_INVALID)),
            (cp("a", spec("p1", "Bad Name", &[])), Some(ReasonCode::INPUT_INVALID)),
            (cp("a", spec("p1", "bot", &["tools:call:move_arm"])), None),
            (cp("a", spec("p2", "bot", &[])), Some(ReasonCode::PRINCIPAL_ALREADY_EXISTS)),
            (cp("a", spec("p1", "other", &[])), Some(ReasonCode::PRINCIPAL_ALREADY_EXISTS)),
            (
                Command::RevokeScope { tenant_id: "a".into(), principal_id: "p1".into(), scope: "ops:execute".into() },
                Some(ReasonCode::INPUT_INVALID),
            ),
            (
                Command::RevokeScope {
                    tenant_id: "a".into(),
                    principal_id: "p1".into(),
                    scope: "tools:call:move_arm".into(),
                },
                None,
            ),
            (
                Command::RevokePrincipal { tenant_id: "a".into(), principal_id: "nope".into(), note: None },
                Some(ReasonCode::PRINCIPAL_NOT_FOUND),
            ),
            (Command::RevokePrincipal { tenant_id: "a".into(), principal_id: "p1".into(), note: None }, None),
            (
                Command::RevokePrincipal { tenant_id: "a".into(), principal_id: "p1".into(), note: None },
                Some(ReasonCode::PRINCIPAL_STATE_CONFLICT),
            ),
        ];
        for (cmd, want) in cases {
            assert_eq!(decide(&st, &cmd, 0).err().map(|r| r.reason), want, "{cmd:?}");
            st.execute(&req(2, cmd));
        }
        let p = st.principal("a", "bot").expect("principal by name");
        assert_eq!(p.state, PrincipalState::Revoked);
        assert!(p.scopes.contains("ops:read"), "preset scopes are granted");
        assert!(!p.scopes.contains("tools:call:move_arm") && p.revoked_scopes.contains("tools:call:move_arm"));
        assert!(st.principal("zz", "bot").is_none(), "principals never leak across tenants");
    }

    fn issue(jti: &str, principal: &str, scopes: &[&str], ttl_s: u64, parent: Option<&str>) -> Command {
        Command::IssueToken {
            tenant_id: "a".into(),
            request: TokenRequestV1 {
                jti: jti.into(),
                principal_id: principal.into(),
                scopes: scopes.iter().map(|s| s.to_string()).collect(),
                ttl_s,
                parent_jti: parent.map(str::to_string),
            },
        }
    }

    /// The Nimi authority cases that live in the ledger: TTL clamping, scope subsets, revoked
    /// scopes, delegation depth, cascade revocation, and the domain gate before the scope gate.
    #[test]
    fn token_rules() {
        let mut st = LedgerState::default();
        let t0 = 1_000_000;
        st.execute(&req(t0, create("a", "acme")));
        let mut delegate = spec("p-del", "planner", &[]);
        delegate.preset = Some(RolePreset::Delegate);
        st.execute(&req(t0, Command::CreatePrincipal { tenant_id: "a".into(), spec: delegate }));
        st.execute(&req(
            t0,
            Command::CreatePrincipal { tenant_id: "a".into(), spec: spec("p-ro", "viewer", &["tools:call:scan"]) },
        ));
        st.execute(&req(
            t0,
            Command::RevokeScope {
                tenant_id: "a".into(),
                principal_id: "p-ro".into(),
                scope: "tools:call:scan".into(),
            },
        ));
        let revoke = |jti: &str| Command::RevokeToken { tenant_id: "a".into(), jti: jti.into() };
        let cases: Vec<(Command, Option<ReasonCode>)> = vec![
            (issue("root", "p-del", &[], 10, None), None),
            (issue("root", "p-del", &[], 600, None), Some(ReasonCode::INPUT_INVALID)),
            (issue("x1", "p-ro", &["ops:execute"], 600, None), Some(ReasonCode::APP_SCOPE_FORBIDDEN)),
            (issue("x2", "p-ro", &["tools:call:scan"], 600, None), Some(ReasonCode::APP_SCOPE_REVOKED)),
            (issue("x3", "p-ro", &["nope:x"], 600, None), Some(ReasonCode::INPUT_INVALID)),
            (issue("x4", "ghost", &[], 600, None), Some(ReasonCode::PRINCIPAL_NOT_FOUND)),
            (issue("ro", "p-ro", &[], 600, None), None),
            (issue("child", "p-ro", &["ops:read", "tools:call:move"], 600, Some("root")), None),
            (
                issue("grandchild", "p-ro", &["ops:read"], 600, Some("child")),
                Some(ReasonCode::DELEGATION_DEPTH_EXCEEDED),
            ),
            (issue("c2", "p-ro", &["audit:read"], 600, Some("root")), Some(ReasonCode::APP_SCOPE_FORBIDDEN)),
            (issue("c3", "p-ro", &["ops:read"], 600, Some("ro")), Some(ReasonCode::APP_SCOPE_FORBIDDEN)),
            (issue("c4", "p-ro", &["ops:read"], 600, Some("missing")), Some(ReasonCode::AUTH_TOKEN_INVALID)),
            (revoke("root"), None),
            (revoke("child"), Some(ReasonCode::TOKEN_ALREADY_REVOKED)),
            (revoke("nope"), Some(ReasonCode::TOKEN_NOT_FOUND)),
            (issue("c5", "p-ro", &["ops:read"], 600, Some("root")), Some(ReasonCode::AUTH_TOKEN_REVOKED)),
        ];
        for (cmd, want) in cases {
            assert_eq!(decide(&st, &cmd, t0).err().map(|r| r.reason), want, "{cmd:?}");
            st.execute(&req(t0, cmd));
        }
        // TTL clamped up to the tenant minimum (60 s); the child never outlives its parent.
        let root = st.token("a", "root").expect("root");
        assert_eq!(root.record.expires_at_ms, t0 + 60_000);
        let child = st.token("a", "child").expect("child");
        assert_eq!(child.record.depth, 1);
        assert_eq!(child.record.expires_at_ms, root.record.expires_at_ms);
        // Revoking the parent revoked the child with it.
        assert_eq!(child.revoked_via.as_deref(), Some("root"));
        assert!(st.token("a", "ro").is_some_and(|t| t.revoked_at_ms.is_none()));
        // A depth violation left a rejection event in the tenant's stream (audit evidence).
        let (outcome, events) = st.execute(&req(t0, issue("g2", "p-ro", &["ops:read"], 600, Some("child"))));
        assert!(matches!(outcome, Outcome::Rejected { .. }));
        assert_eq!(events[0].stream, "a");

        // Expired parent: ledger time has passed its expiry.
        st.execute(&req(t0, issue("short", "p-del", &[], 60, None)));
        let later = t0 + 61_000;
        let cmd = issue("late", "p-ro", &["ops:read"], 600, Some("short"));
        assert_eq!(decide(&st, &cmd, later).err().map(|r| r.reason), Some(ReasonCode::AUTH_TOKEN_EXPIRED));

        // Domain gate first: a suspended tenant answers TENANT_SUSPENDED even for a bad request.
        st.execute(&req(later, Command::SuspendTenant { tenant_id: "a".into(), note: None }));
        let bad = issue("s1", "ghost", &["nope:x"], 600, None);
        assert_eq!(decide(&st, &bad, later).err().map(|r| r.reason), Some(ReasonCode::TENANT_SUSPENDED));
    }

    #[test]
    fn site_and_device_rules() {
        let mut st = LedgerState::default();
        st.execute(&req(1, create("a", "acme")));
        st.execute(&req(1, create("b", "beta")));
        let site = |t: &str, id: &str, name: &str| Command::CreateSite {
            tenant_id: t.into(),
            site_id: id.into(),
            name: name.into(),
            display_name: None,
        };
        let device = |t: &str, id: &str, site: &str, name: &str, class: &str| Command::CreateDevice {
            tenant_id: t.into(),
            device_id: id.into(),
            site_id: site.into(),
            name: name.into(),
            device_class: class.into(),
        };
        let cases: Vec<(Command, Option<ReasonCode>)> = vec![
            (site("zz", "s1", "plant"), Some(ReasonCode::TENANT_NOT_FOUND)),
            (site("a", "s1", "Plant 1"), Some(ReasonCode::INPUT_INVALID)),
            (site("a", "s1", "plant"), None),
            (site("a", "s2", "plant"), Some(ReasonCode::SITE_ALREADY_EXISTS)),
            (site("b", "s9", "plant"), None),
            (device("a", "d1", "s9", "press", "press.v1"), Some(ReasonCode::SITE_NOT_FOUND)),
            (device("a", "d1", "s1", "press", "bad class!"), Some(ReasonCode::INPUT_INVALID)),
            (device("a", "d1", "s1", "press", "press.v1"), None),
            (device("a", "d2", "s1", "press", "press.v1"), Some(ReasonCode::DEVICE_ALREADY_EXISTS)),
            (device("a", "d3", "s1", "arm", "robot-arm.v2"), None),
        ];
        for (cmd, want) in cases {
            assert_eq!(decide(&st, &cmd, 0).err().map(|r| r.reason), want, "{cmd:?}");
            st.execute(&req(2, cmd));
        }
        assert_eq!(st.device("a", "press").map(|d| d.site_id.as_str()), Some("s1"));
        let (devices, _) = st.list_devices("a", Some("s1"), None, 10);
        assert_eq!(devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["arm", "press"]);
        assert!(st.list_devices("a", Some("s9"), None, 10).0.is_empty(), "another tenant's site shows nothing");
        assert!(st.site("b", "s1").is_none(), "sites never leak across tenants");
    }

    #[test]
    fn settings_change_is_applied() {
        let mut st = LedgerState::default();
        st.execute(&req(1, create("a", "acme")));
        assert_eq!(st.tenant("a").map(|t| t.settings.audit_max_events), Some(20_000));
        let patch = TenantSettingsPatch { audit_max_events: Some(7), ..Default::default() };
        st.execute(&req(2, Command::SetTenantSettings { tenant_id: "a".into(), patch }));
        assert_eq!(st.tenant("a").map(|t| t.settings.audit_max_events), Some(7));
    }

    #[test]
    fn clock_is_monotonic_and_streams_are_gap_free() {
        let mut st = LedgerState::default();
        st.execute(&req(100, create("a", "acme")));
        // A leader with a slower clock cannot move ledger time backwards.
        st.execute(&req(50, Command::SuspendTenant { tenant_id: "a".into(), note: None }));
        assert_eq!(st.clock_ms, 100);
        st.execute(&req(200, Command::ResumeTenant { tenant_id: "zz".into() }));
        assert_eq!(st.revision, 3);
        assert_eq!(st.stream_seq.get("a"), Some(&2));
        assert_eq!(st.stream_seq.get(CLUSTER_STREAM), Some(&1));
        assert_eq!(st.tenant("acme").map(|t| t.state), Some(TenantState::Suspended));
        assert_eq!(st.tenant("acme").map(|t| t.updated_at_ms), Some(100));
    }

    #[test]
    fn list_pages_by_name() {
        let mut st = LedgerState::default();
        for (i, n) in ["c", "a", "b", "d"].iter().enumerate() {
            st.execute(&req(1, create(&i.to_string(), n)));
        }
        let (p1, next) = st.list_tenants(None, 3);
        assert_eq!(p1.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
        let (p2, next2) = st.list_tenants(next.as_deref(), 3);
        assert_eq!(p2.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["d"]);
        assert_eq!(next2, None);
    }
}

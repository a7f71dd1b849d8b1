//! `writ node seed`: a stopped cluster's ledger grown by finished operations in bulk, for the
//! benchmark of a ledger holding a day of them (`loadtest/bench/p4-operations.sh`).
//!
//! The operations are what the write path records for an agent's deviceless operation that an
//! executor performed: the submission under the agent's token as its node admits it (a
//! verified grant around the edge's audited request), the dispatch, and the executor's audited
//! start and effect report with its evidence — each applied by the state machine's own apply
//! (`writ_raft_store::bulk`). They go to a tenant of their own, created the first time with the
//! principal, token and catalog they need; a later run adds more.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use writ_api::audit::{AuthorityChainV1, RequestDecisionV1, RequestDecisionV2};
use writ_api::credential::GrantV1;
use writ_api::ledger::{Command, LedgerRequest};
use writ_api::operation::{payload_hash, AttemptOutcome, EvidenceV1, OperationSpecV1};
use writ_api::principal::{PrincipalKind, PrincipalSpecV1, RolePreset};
use writ_api::settings::TenantSettingsPatch;
use writ_api::state::LedgerState;
use writ_api::token::TokenRequestV1;
use writ_raft_store::bulk::{self, Grown};

/// Operations whose commands are applied together (one RocksDB batch per step of theirs).
const GROUP: u64 = 500;
const PRINCIPAL: &str = "seed-agent";
const TOKEN: &str = "seed-agent-token";
const EXECUTOR: &str = "x-seed";
const ACTION: &str = "seed_note";
/// The token's lifetime: longer than the idempotency retention, so every seeded operation
/// stays within what it may still be read under.
const TOKEN_TTL_S: u64 = 3 * 24 * 3600;
const CATALOG: &str = r#"{"actions": [
  {"id": "seed_note", "title": "Note", "description": "Writes a note.", "input_schema": {"type": "object"},
   "risk": "low", "execution": "operation", "cost_units": 1}
]}"#;

/// Adds `operations` finished operations to tenant `tenant` of the stopped member's data
/// directory `dir` (first setting how many audit records the tenant keeps, when
/// `audit_max_events` says), then gives each directory of `copies` (the other stopped members)
/// the same store ([`bulk::link_copy`]).
pub async fn seed(
    dir: &Path,
    tenant: &str,
    operations: u64,
    audit_max_events: Option<u64>,
    copies: &[PathBuf],
) -> io::Result<Grown> {
    let mut plan =
        Plan { tenant: tenant.to_string(), left: operations, audit_max_events, step: Step::Setup, group: Vec::new() };
    let grown = bulk::grow(dir, |state| plan.next(state)).await?;
    for to in copies {
        bulk::link_copy(dir, to)?;
    }
    Ok(grown)
}

enum Step {
    Setup,
    Submit,
    Start,
    Report,
}

struct Plan {
    tenant: String,
    left: u64,
    /// The tenant's audit retention by count, set before the operations when given.
    audit_max_events: Option<u64>,
    step: Step,
    /// The operation ids of the group in flight.
    group: Vec<String>,
}

impl Plan {
    /// The next chunk of requests, given what is applied so far.
    fn next(&mut self, state: &LedgerState) -> Option<Vec<LedgerRequest>> {
        let now = writ_client::now_ms().max(state.clock_ms);
        let commands = match self.step {
            Step::Setup => {
                self.step = Step::Submit;
                let created = state.tenants.contains_key(&self.tenant);
                let setup = if created { Vec::new() } else { self.setup() };
                let settings = self.audit_max_events.map(|n| Command::SetTenantSettings {
                    tenant_id: self.tenant.clone(),
                    patch: TenantSettingsPatch { audit_max_events: Some(n), ..Default::default() },
                });
                let commands: Vec<Command> = setup.into_iter().chain(settings).collect();
                if commands.is_empty() {
                    return self.next(state);
                }
                commands.into_iter().map(|c| ("seed-setup".to_string(), c)).collect()
            }
            Step::Submit if self.left == 0 => return None,
            Step::Submit => {
                let count = self.left.min(GROUP);
                self.left -= count;
                // Ids unique across runs: the revision only grows.
                self.group = (0..count).map(|i| format!("seed-{}-{i}", state.revision)).collect();
                self.step = Step::Start;
                let grant = grant(state, &self.tenant, now);
                let submits = self.group.iter().map(|id| (id.clone(), self.submit(id, &grant, now)));
                let dispatches = self.group.iter().map(|id| {
                    let dispatch = Command::DispatchOperation {
                        tenant_id: self.tenant.clone(),
                        operation_id: id.clone(),
                        executor_id: EXECUTOR.into(),
                    };
                    (id.clone(), dispatch)
                });
                submits.chain(dispatches).collect()
            }
            Step::Start => {
                self.step = Step::Report;
                self.group.iter().map(|id| (id.clone(), self.start(state, id))).collect()
            }
            Step::Report => {
                self.step = Step::Submit;
                self.group.iter().map(|id| (id.clone(), self.report(state, id))).collect()
            }
        };
        // Each under its operation's trace, as the write path records them.
        let commands: Vec<(String, Command)> = commands;
        let requests = commands
            .into_iter()
            .map(|(trace_id, command)| LedgerRequest { stamp_ms: now, trace_id, command: command.into() })
            .collect();
        Some(requests)
    }

    fn setup(&self) -> Vec<Command> {
        let tenant_id = self.tenant.clone();
        let agent = PrincipalSpecV1 {
            principal_id: PRINCIPAL.into(),
            name: PRINCIPAL.into(),
            kind: PrincipalKind::Agent,
            preset: Some(RolePreset::Full),
            scopes: Default::default(),
            metadata: Default::default(),
        };
        let token = TokenRequestV1 {
            jti: TOKEN.into(),
            principal_id: PRINCIPAL.into(),
            scopes: Default::default(),
            ttl_s: TOKEN_TTL_S,
            parent_jti: None,
        };
        let catalog = writ_api::catalog::compile(CATALOG.as_bytes()).expect("the seed catalog compiles");
        vec![
            Command::CreateTenant { tenant_id: tenant_id.clone(), name: tenant_id.clone(), display_name: None },
            Command::CreatePrincipal { tenant_id: tenant_id.clone(), spec: agent },
            Command::IssueToken { tenant_id: tenant_id.clone(), request: token },
            Command::PublishCatalog { tenant_id, catalog },
        ]
    }

    /// The agent's submission as its node admits it: the edge's audited request, verified.
    fn submit(&self, id: &str, grant: &GrantV1, now: u64) -> Command {
        let input = serde_json::json!({ "note": format!("{id}: {}", "x".repeat(96)) });
        let spec = OperationSpecV1 {
            operation_id: id.into(),
            principal_id: PRINCIPAL.into(),
            authority_ref: TOKEN.into(),
            action: ACTION.into(),
            payload_hash: payload_hash(&input),
            input: input.to_string(),
            idempotency_key: id.into(),
            deadline_ms: now + 3_600_000,
            cost_units: 1,
            cost_ceiling: None,
            device_id: None,
            work_ref: None,
            preconditions: BTreeMap::new(),
            trace_id: id.into(),
            input_requests: BTreeMap::new(),
        };
        let decision = decision(PRINCIPAL, Some(TOKEN), "tools/call", Some(ACTION), id);
        let audited = Command::AuditedV2 {
            decision,
            command: Box::new(Command::SubmitOperation { tenant_id: self.tenant.clone(), spec }),
        };
        Command::Verified { grant: grant.clone(), command: Box::new(audited) }
    }

    fn start(&self, state: &LedgerState, id: &str) -> Command {
        let start = Command::StartAttempt {
            tenant_id: self.tenant.clone(),
            operation_id: id.into(),
            executor_id: EXECUTOR.into(),
            fencing_token: fencing_token(state, &self.tenant, id),
            lease_ms: 60_000,
        };
        let decision = decision(&format!("executor:{EXECUTOR}"), None, "executor/start", None, id);
        Command::AuditedV2 { decision, command: Box::new(start) }
    }

    fn report(&self, state: &LedgerState, id: &str) -> Command {
        let frame = format!("{id}: done");
        let report = Command::ReportAttemptV2 {
            tenant_id: self.tenant.clone(),
            operation_id: id.into(),
            fencing_token: fencing_token(state, &self.tenant, id),
            outcome: AttemptOutcome::Effect,
            evidence: EvidenceV1 {
                content_hash: writ_api::sha256_hex(frame.as_bytes()),
                evidence_return_ref: String::new(),
                summary: "done".into(),
            },
            content: writ_api::evidence::EvidenceContentV1 {
                mime_type: "text/plain".into(),
                content_base64: writ_api::evidence::to_base64(frame.as_bytes()),
            },
        };
        let decision = decision(&format!("executor:{EXECUTOR}"), None, "executor/report", None, id);
        Command::AuditedV2 { decision, command: Box::new(report) }
    }
}

/// The grant a node records for the agent's token (`writ_api::grant::admit`).
fn grant(state: &LedgerState, tenant: &str, now: u64) -> GrantV1 {
    let authority = writ_api::auth::recorded_authority(state, tenant, TOKEN, PRINCIPAL, now)
        .expect("the seed tenant's token is recorded");
    GrantV1 {
        tenant_id: authority.tenant_id,
        principal_id: authority.principal_id,
        issuer: authority.issuer,
        token_id: authority.token_id,
        scopes: authority.scopes,
        expires_at_ms: authority.expires_at_ms,
        verified_by: "node:seed".into(),
        edge_id: "seed".into(),
    }
}

/// An allowed request's decision as an edge records it.
fn decision(principal: &str, token: Option<&str>, method: &str, name: Option<&str>, trace: &str) -> RequestDecisionV2 {
    RequestDecisionV2 {
        decision: RequestDecisionV1 {
            trace_id: trace.into(),
            principal_id: principal.into(),
            token_id: token.map(str::to_string),
            parent_token_id: None,
            method: method.into(),
            name: name.map(str::to_string),
            outcome: "allowed".into(),
            reason: None,
        },
        authority: AuthorityChainV1 {
            client_name: Some("writ-seed".into()),
            client_version: Some(env!("CARGO_PKG_VERSION").into()),
            protocol_version: Some("2026-07-28".into()),
            ..Default::default()
        },
    }
}

fn fencing_token(state: &LedgerState, tenant: &str, id: &str) -> u64 {
    state.operation(tenant, id).and_then(|op| op.fencing_token).unwrap_or_default()
}

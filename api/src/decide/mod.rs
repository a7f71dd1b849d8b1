//! `decide`: what a command does to the state at ledger time `now`, without changing it —
//! events to append, or a [`Rejection`] (which becomes a rejection event; a business-rule
//! failure never panics). One function per domain, chosen by `Command::domain` (an exhaustive
//! match, so a new command forces a decision about where its rules live); each lives in its
//! domain's folder beside the domain's types and fold (`crate::operation::decide`, …).
//!
//! Also `LedgerState::execute`, which runs one log entry: advance ledger time, append the
//! transitions that time made due, decide, and fold the events (`state.rs`).

// Each domain's rules live in its own folder beside its types (`crate::operation::decide`, …).
use crate::audit::decide as audit;
use crate::catalog::decide as catalog;
use crate::device::decide as site;
use crate::executor::decide as executor;
use crate::oauth::decide as oauth;
pub use crate::operation::decide as operation;
pub use crate::operator::decide as operator;
use crate::principal::decide as principal;
use crate::quota::decide as quota;
use crate::retention::decide as retention;
use crate::tenant::decide as tenant;
use crate::token::decide as token;
pub use crate::upstream::decide as upstream;
pub(crate) use crate::work::decide as work;

#[cfg(test)]
mod tests;

use crate::audit::{AuditedEvent, RequestDecisionV1, RequestDecisionV2};
use crate::ledger::{
    Command, Domain, Event, EventEnvelope, LedgerRequest, Outcome, Tenant, TenantState, CLUSTER_STREAM,
};
use crate::principal::{Principal, PrincipalState};
use crate::reason::ReasonCode;
use crate::rejection::Rejection;
use crate::state::LedgerState;

/// What every domain's rules use.
pub(crate) mod prelude {
    pub(crate) use super::{active, active_principal, existing, misrouted};
    pub(crate) use crate::catalog::check_stored;
    pub(crate) use crate::device::{validate_device, validate_site, ENROLLMENT_TTL_MAX_S};
    pub(crate) use crate::ledger::{Command, Event, TenantState, CLUSTER_STREAM};
    pub(crate) use crate::principal::{scope_covers, validate_scope};
    pub(crate) use crate::reason::ReasonCode;
    pub(crate) use crate::rejection::{
        validate_tenant_name, validate_text, Rejection, DISPLAY_NAME_BYTES_MAX, NOTE_BYTES_MAX,
    };
    pub(crate) use crate::state::LedgerState;
    pub(crate) use crate::token::{TokenRecordV1, TokenRequestV1, DELEGATION_DEPTH_MAX_DEFAULT};
}

/// Decides what `cmd` does to `state` at ledger time `now`.
pub fn decide(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    match cmd.domain() {
        Domain::Tenant => tenant::decide(state, cmd, now),
        Domain::Principal => principal::decide(state, cmd, now),
        Domain::Token => token::decide(state, cmd, now),
        Domain::Site => site::decide(state, cmd, now),
        Domain::Catalog => catalog::decide(state, cmd, now),
        Domain::Executor => executor::decide(state, cmd, now),
        Domain::Audit => audit::decide(state, cmd, now),
        Domain::Quota => quota::decide(state, cmd, now),
        Domain::Operation => operation::decide(state, cmd, now),
        Domain::Work => work::decide(state, cmd, now),
        Domain::Retention => retention::decide(state, cmd, now),
        Domain::Upstream => upstream::decide(state, cmd, now),
        Domain::OAuth => oauth::decide(state, cmd, now),
        Domain::Operator => operator::decide(state, cmd, now),
        Domain::Ledger => raise_ledger_version(state, cmd),
        // Reached only by a batch inside a batch: a leader never forms one.
        Domain::Batch => Err(Rejection::new(ReasonCode::INPUT_INVALID, "a batch may hold single commands only")),
    }
}

/// [`Command::RaiseLedgerVersion`]: only ever upwards.
fn raise_ledger_version(state: &LedgerState, cmd: &Command) -> Result<Vec<Event>, Rejection> {
    let Command::RaiseLedgerVersion { version } = cmd else { return Err(misrouted(cmd)) };
    if *version <= state.ledger_version {
        let message = format!("ledger version {} is in force; {version} is not newer", state.ledger_version);
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, message));
    }
    Ok(vec![Event::LedgerVersionRaisedV1 { version: *version }])
}

/// `OnBehalfOf` (SPEC S3): the ledger re-derives the authority the edge admitted the act
/// under — a live token (or tenant issuer) of this tenant, for the very principal the act
/// names — and checks that it grants the act's scope, then decides the act itself. A
/// compromised edge can act only through tokens it has seen, within their scopes.
pub(crate) fn on_behalf_of(
    state: &LedgerState,
    authority_ref: &str,
    act: &Command,
    now: u64,
) -> Result<Vec<Event>, Rejection> {
    let (principal_id, scope) = act.principal_act().ok_or_else(|| {
        Rejection::new(
            ReasonCode::INPUT_INVALID,
            format!("{} is not an act a principal makes through an edge", act.kind()),
        )
    })?;
    let authority = crate::auth::authority_of_ref(state, act.stream(), principal_id, authority_ref, now)?;
    authority.require(scope)?;
    decide(state, act, now)
}

/// A command routed to a domain that does not decide it (a bug in [`decide`], not bad input).
pub(crate) fn misrouted(cmd: &Command) -> Rejection {
    Rejection::new(ReasonCode::INTERNAL, format!("{} is not decided by this domain", cmd.kind()))
}

/// The decision travelling with a command (`Command::Audited`, `Command::AuditedV2`).
#[derive(Clone, Copy)]
pub(crate) enum Decision<'a> {
    V1(&'a RequestDecisionV1),
    V2(&'a RequestDecisionV2),
}

impl<'a> Decision<'a> {
    pub(crate) fn plain(self) -> &'a RequestDecisionV1 {
        match self {
            Decision::V1(d) => d,
            Decision::V2(d) => &d.decision,
        }
    }

    pub(crate) fn authority(self) -> Option<&'a crate::audit::AuthorityChainV1> {
        match self {
            Decision::V1(_) => None,
            Decision::V2(d) => Some(&d.authority),
        }
    }
}

impl LedgerState {
    /// Executes one log entry's request: advance the clock, decide, and apply what was decided.
    /// A rejection is itself an event, so every command leaves a trace. Returns the outcome
    /// for the proposer and every event appended (to store and publish).
    pub fn execute(&mut self, req: &LedgerRequest) -> (Outcome, Vec<EventEnvelope>) {
        let (outcome, events, _) = self.execute_audited(req);
        (outcome, events)
    }

    /// [`LedgerState::execute`], also returning where the audit records the events produced
    /// lie (for the node to store as positions in the events).
    pub fn execute_audited(&mut self, req: &LedgerRequest) -> (Outcome, Vec<EventEnvelope>, Vec<AuditedEvent>) {
        self.execute_entry(req, true)
    }

    /// [`LedgerState::execute_audited`] for an entry no one waits on (a follower applying what
    /// its leader proposed): the same state, events and records, but an applied outcome
    /// carries neither the events nor the operation a caller would read — only the events of
    /// a command that stores a blob, which say what the node writes beside the state
    /// ([`Command::stored_blobs`]).
    pub fn execute_unanswered(&mut self, req: &LedgerRequest) -> (Outcome, Vec<EventEnvelope>, Vec<AuditedEvent>) {
        self.execute_entry(req, false)
    }

    fn execute_entry(
        &mut self,
        req: &LedgerRequest,
        answered: bool,
    ) -> (Outcome, Vec<EventEnvelope>, Vec<AuditedEvent>) {
        self.clock_ms = self.clock_ms.max(req.stamp_ms);
        let mut audit = Vec::new();
        let mut envelopes = Vec::new();
        let outcome = match req.command.as_ref() {
            // Each command of a batch as if it were an entry of its own, at the entry's time.
            Command::Batch { commands } => Outcome::Batch(
                commands
                    .iter()
                    .map(|c| self.execute_one(&c.trace_id, &c.command, answered, &mut envelopes, &mut audit))
                    .collect(),
            ),
            command => self.execute_one(&req.trace_id, command, answered, &mut envelopes, &mut audit),
        };
        (outcome, envelopes, audit)
    }

    /// Executes one command at the current ledger time: appends its events (or its rejection)
    /// to `all` and their audit records to `audit`, and returns its outcome (what a caller
    /// reads of it only when `answered`).
    fn execute_one(
        &mut self,
        trace_id: &str,
        command: &Command,
        answered: bool,
        all: &mut Vec<EventEnvelope>,
        audit: &mut Vec<AuditedEvent>,
    ) -> Outcome {
        let now = self.clock_ms;
        // An edge's act comes with the grant of the credential a node verified for it.
        let (command, grant) = match command {
            Command::Verified { grant, command } => (command.as_ref(), Some(grant)),
            other => (other, None),
        };
        // A named operator's act: recorded as theirs once their session and role allow it.
        let (command, session) = match command {
            Command::ByOperator { session_id, command } => (command.as_ref(), Some(session_id)),
            other => (other, None),
        };
        // A request's decision travelling with the command it made is recorded after it.
        let (command, decision) = match command {
            Command::Audited { decision, command } => (command.as_ref(), Some(Decision::V1(decision))),
            Command::AuditedV2 { decision, command } => (command.as_ref(), Some(Decision::V2(decision))),
            other => (other, None),
        };
        // Time-driven transitions of the tenant come first, so the command is decided on a
        // state that is current at ledger time `now` (they stand even if the command fails).
        let mut envelopes = Vec::new();
        if command.is_operation() && self.tenants.contains_key(command.stream()) {
            let tenant = command.stream().to_string();
            for event in operation::due(self, &tenant, now) {
                envelopes.push(self.append(&tenant, trace_id, event, audit));
            }
        }
        let granted =
            grant.map_or(Ok(()), |g| crate::grant::check(self, g, command, now, |c| operation::scopes_needed(self, c)));
        let acted = granted.and_then(|()| match session {
            Some(s) => self.operator_acted(s, command, now).map(Some),
            None => operator::unattributed(command).map(|()| None),
        });
        let decided = acted.and_then(|acted| {
            let events = match decision {
                Some(d) => audit::audited(d.plain(), d.authority(), command).and_then(|()| decide(self, command, now)),
                None => decide(self, command, now),
            }?;
            Ok(acted.into_iter().chain(events).collect::<Vec<Event>>())
        });
        let stream = command.stream().to_string();
        let (outcome, refusal) = match decided {
            Ok(events) => {
                for event in events {
                    envelopes.push(self.append(&stream, trace_id, event, audit));
                }
                (None, None)
            }
            Err(rejection) => {
                let rejection = rejection.bounded();
                // Rejections of commands for tenants that do not exist go to the cluster
                // stream, so bad input never creates a tenant stream.
                let to = if self.tenants.contains_key(&stream) { stream.as_str() } else { CLUSTER_STREAM };
                let event = Event::CommandRejectedV2 {
                    command: command.kind().to_string(),
                    reason: rejection.reason,
                    message: rejection.message.clone(),
                    subject: command.subject().bounded(),
                };
                let env = self.append(to, trace_id, event, audit);
                let outcome =
                    Outcome::Rejected { reason: rejection.reason, message: rejection.message, revision: env.revision };
                envelopes.push(env);
                (Some(outcome), Some(rejection.reason))
            }
        };
        if let Some(d) = decision.filter(|_| self.tenants.contains_key(&stream)) {
            let tenant_id = stream.clone();
            let event = match d {
                Decision::V1(d) => Event::RequestDecidedV1 { tenant_id, decision: audit::decided(d, refusal) },
                Decision::V2(d) => {
                    let decided = RequestDecisionV2 { decision: audit::decided(&d.decision, refusal), ..d.clone() };
                    let decisions = vec![audit::completed(self, &stream, &decided, Some(command))];
                    Event::RequestsDecidedV2 { tenant_id, decisions }
                }
            };
            envelopes.push(self.append(&stream, trace_id, event, audit));
        }
        // A blob's events say what the node stores beside the state, answered or not.
        let events = (answered && command.answered_with_events()) || command.carries_blob();
        let outcome = outcome.unwrap_or_else(|| Outcome::Applied {
            events: if events { envelopes.clone() } else { Vec::new() },
            operation: answered.then(|| self.operation_view(command)).flatten().map(Box::new),
        });
        all.append(&mut envelopes);
        outcome
    }

    /// Who acts, when an operator's session stands and allows `command`
    /// ([`operator::check`]): the event naming them before the command's own.
    fn operator_acted(&self, session_id: &str, command: &Command, now: u64) -> Result<Event, Rejection> {
        let operator = operator::check(&self.operators, session_id, command, now)?;
        Ok(Event::OperatorActedV1 {
            tenant_id: command.stream().to_string(),
            operator: operator.name.clone(),
            role: operator.role,
            command: command.kind().to_string(),
        })
    }

    /// The operation `command` is about, as it stands now (a submission that was a replay:
    /// the prior operation its idempotency key is bound to).
    fn operation_view(&self, command: &Command) -> Option<crate::operation::Operation> {
        let tenant_id = command.stream();
        let id = match command {
            Command::SubmitOperation { spec, .. } | Command::SubmitProposed { spec, .. } => {
                let id = self.bound_operation(tenant_id, &spec.principal_id, &spec.idempotency_key)?;
                return self.operation(tenant_id, &id).map(std::borrow::Cow::into_owned);
            }
            Command::OnBehalfOf { command, .. }
            | Command::Audited { command, .. }
            | Command::AuditedV2 { command, .. }
            | Command::ByOperator { command, .. } => {
                return self.operation_view(command);
            }
            other => other.operation_id()?,
        };
        self.operation(tenant_id, id).map(std::borrow::Cow::into_owned)
    }
}

pub(crate) fn active_principal<'a>(
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
pub(crate) fn active<'a>(state: &'a LedgerState, tenant_id: &str) -> Result<&'a Tenant, Rejection> {
    let tenant = existing(state, tenant_id)?;
    tenant.closed().map_or(Ok(tenant), Err)
}

/// The tenant, which must exist and not be deleted (a deleted tenant takes no change at all; a
/// suspended one takes its operator's).
pub(crate) fn existing<'a>(state: &'a LedgerState, tenant_id: &str) -> Result<&'a Tenant, Rejection> {
    let tenant = state
        .tenants
        .get(tenant_id)
        .ok_or_else(|| Rejection::new(ReasonCode::TENANT_NOT_FOUND, format!("no tenant '{tenant_id}'")))?;
    match tenant.state {
        TenantState::Deleted => Err(tenant.closed().expect("a deleted tenant is closed")),
        _ => Ok(tenant),
    }
}

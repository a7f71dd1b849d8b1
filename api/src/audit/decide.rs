//! Request decisions (SPEC D10) recorded by edges, in bounded batches.

use crate::audit::{AuthorityChainV1, RequestDecisionV1, RequestDecisionV2, DELEGATION_RECORDED_MAX};
use crate::decide::prelude::*;

pub(crate) fn decide(state: &LedgerState, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    match cmd {
        Command::RecordDecisions { tenant_id, decisions } => {
            check_decisions(state, tenant_id, decisions.iter())?;
            Ok(vec![Event::RequestsDecidedV1 { tenant_id: tenant_id.clone(), decisions: decisions.clone() }])
        }
        Command::RecordDecisionsV2 { tenant_id, decisions } => {
            check_decisions(state, tenant_id, decisions.iter().map(|d| &d.decision))?;
            if !decisions.iter().all(|d| d.authority.is_bounded()) {
                return Err(unbounded());
            }
            let decisions = decisions.iter().map(|d| completed(state, tenant_id, d, None)).collect();
            Ok(vec![Event::RequestsDecidedV2 { tenant_id: tenant_id.clone(), decisions }])
        }
        other => Err(misrouted(other)),
    }
}

fn unbounded() -> Rejection {
    let max = crate::audit::DECISION_FIELD_BYTES_MAX;
    Rejection::new(ReasonCode::INPUT_INVALID, format!("a decision's text field exceeds {max} bytes"))
}

/// A batch of decisions an edge may record: 1..=1000, each bounded, allowed or denied, about a
/// subject the tenant knows.
fn check_decisions<'a>(
    state: &LedgerState,
    tenant_id: &str,
    mut decisions: impl ExactSizeIterator<Item = &'a RequestDecisionV1>,
) -> Result<(), Rejection> {
    existing(state, tenant_id)?;
    if decisions.len() == 0 || decisions.len() > crate::audit::DECISIONS_PER_COMMAND_MAX {
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, "1..=1000 decisions per command"));
    }
    decisions.try_for_each(|d| check_decision(state, tenant_id, d))
}

fn check_decision(state: &LedgerState, tenant_id: &str, d: &RequestDecisionV1) -> Result<(), Rejection> {
    if !matches!(d.outcome.as_str(), "allowed" | "denied") {
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, "a decision's outcome is allowed or denied"));
    }
    if !d.is_bounded() {
        return Err(unbounded());
    }
    if !known_subject(state, tenant_id, &d.principal_id) {
        let who = crate::audit::truncated(&d.principal_id, 64);
        return Err(Rejection::new(
            ReasonCode::PRINCIPAL_NOT_FOUND,
            format!("a decision names '{who}', no principal or executor of this tenant"),
        ));
    }
    Ok(())
}

/// A decision's authority chain as the ledger records it: the client fields as the edge
/// reported them, everything else from the ledger's own state — the principal's kind, the
/// token's delegation, the tenant's catalog (its version and digest) and the upstream the
/// named tool runs on — and, for a decision travelling with its command, the operation and
/// attempt the command is about.
pub(crate) fn completed(
    state: &LedgerState,
    tenant_id: &str,
    d: &RequestDecisionV2,
    command: Option<&Command>,
) -> RequestDecisionV2 {
    let reported = &d.authority;
    let catalog = state.catalog(tenant_id, None);
    let (upstream, upstream_tool) = upstream_of(catalog, &d.decision).unzip();
    let operation_id = command.and_then(Command::operation_id).map(str::to_string);
    let attempt_id = operation_id
        .as_ref()
        .zip(command.and_then(|c| fencing_token(c.innermost())))
        .map(|(op, f)| format!("{op}/{f}"));
    let authority = AuthorityChainV1 {
        client_name: reported.client_name.clone(),
        client_version: reported.client_version.clone(),
        protocol_version: reported.protocol_version.clone(),
        principal_kind: principal_kind(state, tenant_id, &d.decision.principal_id),
        delegation: delegation(state, tenant_id, d.decision.token_id.as_deref()),
        catalog_version: catalog.map(|c| c.version),
        policy_digest: catalog.map(|c| c.catalog.digest.clone()),
        upstream,
        upstream_tool,
        operation_id,
        attempt_id,
    };
    RequestDecisionV2 { decision: d.decision.clone(), authority }
}

/// `human`, `agent`, `device` or `service` for a principal; `executor` or `operator` for those
/// subjects; nothing for a caller that never authenticated.
fn principal_kind(state: &LedgerState, tenant_id: &str, subject: &str) -> Option<String> {
    if subject.starts_with("executor:") || subject.starts_with("executor-cert:") {
        return Some("executor".into());
    }
    if subject.starts_with("operator:") {
        return Some("operator".into());
    }
    let principal = state.principals.get(tenant_id)?.get(subject)?;
    Some(principal.kind.as_str().to_string())
}

/// The token ids from the root of `jti`'s delegation down to it (its newest
/// [`DELEGATION_RECORDED_MAX`] links); a token the ledger has no record of (a tenant issuer's)
/// is a chain of itself.
fn delegation(state: &LedgerState, tenant_id: &str, jti: Option<&str>) -> Vec<String> {
    let mut chain = Vec::new();
    let mut next = jti.map(str::to_string);
    while let Some(id) = next.take().filter(|_| chain.len() < DELEGATION_RECORDED_MAX) {
        next = state.token(tenant_id, &id).and_then(|t| t.record.parent_jti.clone());
        chain.push(id);
    }
    chain.reverse();
    chain
}

/// The upstream and its tool a `tools/call` decision's tool runs on, per the catalog.
fn upstream_of(catalog: Option<&crate::catalog::CatalogVersion>, d: &RequestDecisionV1) -> Option<(String, String)> {
    let name = d.name.as_deref().filter(|_| d.method == "tools/call")?;
    let action = catalog?.catalog.actions.iter().find(|a| a.id == name)?;
    match &action.execution {
        crate::catalog::Execution::Upstream(target) | crate::catalog::Execution::UpstreamOperation(target) => {
            // Published targets were checked; both parts are within the chain's text bound.
            let (upstream, tool) = crate::catalog::parse_upstream_target(target).ok()?;
            Some((upstream.to_string(), tool.to_string()))
        }
        _ => None,
    }
}

/// The fencing token an executor's command presents (what names its attempt).
fn fencing_token(command: &Command) -> Option<u64> {
    match command {
        Command::StartAttempt { fencing_token, .. }
        | Command::RenewAttemptLease { fencing_token, .. }
        | Command::ReportAttempt { fencing_token, .. }
        | Command::RefuseDispatch { fencing_token, .. }
        | Command::RefuseDispatchV2 { fencing_token, .. }
        | Command::ReportAttemptV2 { fencing_token, .. }
        | Command::ReportAttemptV3 { fencing_token, .. } => Some(*fencing_token),
        _ => None,
    }
}

/// Who a decision may be about: a principal of the tenant, one of its executors
/// (`executor:<id>`), a certificate an executor endpoint refused (`executor-cert:<16 hex>`), an
/// operator of the tenant (`operator:<name>`, refused by the admin API), or a caller that
/// never authenticated (`unauthenticated`) — never a name an edge made up.
fn known_subject(state: &LedgerState, tenant_id: &str, subject: &str) -> bool {
    if subject == "unauthenticated" || state.principals.get(tenant_id).is_some_and(|m| m.contains_key(subject)) {
        return true;
    }
    if let Some(name) = subject.strip_prefix("operator:") {
        let operator = state.operators.operators.get(name);
        return operator.is_some_and(|o| o.tenant_id.as_deref() == Some(tenant_id));
    }
    if let Some(id) = subject.strip_prefix("executor:") {
        return state.executors.get(tenant_id).is_some_and(|m| m.contains_key(id));
    }
    subject.strip_prefix("executor-cert:").is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Whether `decision` may travel with `command` (`Command::Audited`): a bounded decision, with
/// a command that is neither another audited command nor a batch of decisions.
pub(crate) fn audited(
    decision: &RequestDecisionV1,
    authority: Option<&AuthorityChainV1>,
    command: &Command,
) -> Result<(), Rejection> {
    if matches!(
        command,
        Command::Audited { .. }
            | Command::AuditedV2 { .. }
            | Command::Verified { .. }
            | Command::RecordDecisions { .. }
            | Command::RecordDecisionsV2 { .. }
    ) {
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, "a decision travels with one plain command"));
    }
    if !decision.is_bounded() || !authority.is_none_or(AuthorityChainV1::is_bounded) {
        return Err(unbounded());
    }
    Ok(())
}

/// The decision as the ledger records it: allowed when its command applied, else denied with
/// the command's rejection reason.
pub(crate) fn decided(decision: &RequestDecisionV1, refusal: Option<ReasonCode>) -> RequestDecisionV1 {
    RequestDecisionV1 {
        outcome: if refusal.is_some() { "denied" } else { "allowed" }.into(),
        reason: refusal,
        ..decision.clone()
    }
}

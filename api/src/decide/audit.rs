//! Request decisions (SPEC D10) recorded by edges, in bounded batches.

use super::prelude::*;
use crate::audit::RequestDecisionV1;

pub(super) fn decide(state: &LedgerState, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    match cmd {
        Command::RecordDecisions { tenant_id, decisions } => {
            existing(state, tenant_id)?;
            if decisions.is_empty() || decisions.len() > crate::audit::DECISIONS_PER_COMMAND_MAX {
                return Err(Rejection::new(ReasonCode::INPUT_INVALID, "1..=1000 decisions per command"));
            }
            if decisions.iter().any(|d| !matches!(d.outcome.as_str(), "allowed" | "denied")) {
                return Err(Rejection::new(ReasonCode::INPUT_INVALID, "a decision's outcome is allowed or denied"));
            }
            if !decisions.iter().all(crate::audit::RequestDecisionV1::is_bounded) {
                let max = crate::audit::DECISION_FIELD_BYTES_MAX;
                return Err(Rejection::new(
                    ReasonCode::INPUT_INVALID,
                    format!("a decision's text field exceeds {max} bytes"),
                ));
            }
            if let Some(d) = decisions.iter().find(|d| !known_subject(state, tenant_id, &d.principal_id)) {
                let who = crate::audit::truncated(&d.principal_id, 64);
                return Err(Rejection::new(
                    ReasonCode::PRINCIPAL_NOT_FOUND,
                    format!("a decision names '{who}', no principal or executor of this tenant"),
                ));
            }
            Ok(vec![Event::RequestsDecidedV1 { tenant_id: tenant_id.clone(), decisions: decisions.clone() }])
        }
        other => Err(misrouted(other)),
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
pub(super) fn audited(decision: &RequestDecisionV1, command: &Command) -> Result<(), Rejection> {
    if matches!(command, Command::Audited { .. } | Command::Verified { .. } | Command::RecordDecisions { .. }) {
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, "a decision travels with one plain command"));
    }
    if !decision.is_bounded() {
        let max = crate::audit::DECISION_FIELD_BYTES_MAX;
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, format!("a decision's text field exceeds {max} bytes")));
    }
    Ok(())
}

/// The decision as the ledger records it: allowed when its command applied, else denied with
/// the command's rejection reason.
pub(super) fn decided(decision: &RequestDecisionV1, refusal: Option<ReasonCode>) -> RequestDecisionV1 {
    RequestDecisionV1 {
        outcome: if refusal.is_some() { "denied" } else { "allowed" }.into(),
        reason: refusal,
        ..decision.clone()
    }
}

//! Request decisions (SPEC D10) recorded by edges, in bounded batches.

use super::prelude::*;

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
            Ok(decisions
                .iter()
                .map(|d| Event::RequestDecidedV1 { tenant_id: tenant_id.clone(), decision: d.clone() })
                .collect())
        }
        other => Err(misrouted(other)),
    }
}

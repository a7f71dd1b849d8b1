//! How operators' events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use crate::ledger::{Event, EventEnvelope};
use crate::state::{CorruptEvent, LedgerState};

impl LedgerState {
    /// Named operators and their sessions.
    pub(crate) fn fold_operator(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::OperatorSetV1 { operator } => {
                self.operators.operators.insert(operator.name.clone(), operator.clone());
            }
            Event::OperatorRemovedV1 { name } => self.operators.remove(name),
            Event::OperatorSessionOpenedV1 { session } => self.operators.open(session.clone()),
            Event::OperatorSessionsClosedV1 { operator, session_id } => {
                self.operators.close(operator, session_id.as_deref());
            }
            Event::ConsoleSignInSetV1 { sign_in } => self.operators.console_sign_in = sign_in.clone(),
            Event::OperatorSessionUsedV1 { session_id, at_ms } => self.operators.used(session_id, *at_ms),
            Event::OperatorActedV1 { .. } => {}
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }
}

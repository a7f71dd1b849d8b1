//! How principals' events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use crate::ledger::{Event, EventEnvelope};
use crate::principal::{Principal, PrincipalState};
use crate::state::{unknown, CorruptEvent, LedgerState};

impl LedgerState {
    /// Principals: created, revoked, their scopes, the edges that act as one without a token, their MCP sessions.
    pub(crate) fn fold_principal(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
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
            Event::ScopeGrantedV1 { tenant_id, principal_id, scope } => {
                let p = self.principal_mut(tenant_id, principal_id, env)?;
                p.scopes.insert(scope.clone());
                p.revoked_scopes.remove(scope);
                p.updated_at_ms = env.at_ms;
                p.revision = env.revision;
            }
            Event::ScopeRevokedV1 { tenant_id, principal_id, scope } => {
                let p = self.principal_mut(tenant_id, principal_id, env)?;
                p.scopes.remove(scope);
                p.revoked_scopes.insert(scope.clone());
                p.updated_at_ms = env.at_ms;
                p.revision = env.revision;
            }
            Event::AnonymousAccessSetV1 { tenant_id, edge_id, principal_id } => {
                let edges = self.anonymous.entry(tenant_id.clone()).or_default();
                match principal_id {
                    Some(p) => edges.insert(edge_id.clone(), p.clone()),
                    None => edges.remove(edge_id),
                };
                if edges.is_empty() {
                    self.anonymous.remove(tenant_id);
                }
            }
            Event::SessionStateSetV1 { tenant_id, session_id, session } => {
                let sessions = self.sessions.entry(tenant_id.clone()).or_default();
                sessions.retain(|_, s| s.expires_at_ms > env.at_ms);
                sessions.insert(session_id.clone(), session.clone());
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }
}

/// What this domain's fold (and others') change it through.
impl LedgerState {
    pub(crate) fn principal_mut(
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
}

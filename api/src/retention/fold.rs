//! How retention's events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use crate::ledger::{Event, EventEnvelope};
use crate::state::{drop_empty, idempotency_slot, remove_from, unknown, CorruptEvent, LedgerState};

impl LedgerState {
    /// Folds the retention events ([`crate::retention`]): compacts finished operations to their
    /// bindings, releases bindings (and their keys), drops retired token records and enrollments.
    pub(crate) fn fold_retention(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::OperationsCompactedV1 { tenant_id, operation_ids } => {
                // A projection holds neither finished operations nor bindings.
                if self.projection {
                    return Ok(());
                }
                for id in operation_ids {
                    let op = self.operations.get_mut(tenant_id).and_then(|m| m.remove(id));
                    let op = op.ok_or_else(|| unknown(env, "operation", id))?;
                    self.index.update(Some(&op), None);
                    if let Some(h) = self.history.get_mut(tenant_id) {
                        h.remove(id);
                    }
                    let at = (op.updated_at_ms, id.clone());
                    self.index.compacted.entry(tenant_id.clone()).or_default().insert(at);
                    self.compacted.entry(tenant_id.clone()).or_default().insert(id.clone(), op.binding());
                }
                drop_empty(&mut self.operations, tenant_id);
                drop_empty(&mut self.history, tenant_id);
            }
            Event::BindingsReleasedV1 { tenant_id, operation_ids } => {
                if self.projection {
                    return Ok(());
                }
                for id in operation_ids {
                    let op = self.compacted.get_mut(tenant_id).and_then(|m| m.remove(id));
                    let op = op.ok_or_else(|| unknown(env, "compacted operation", id))?;
                    remove_from(&mut self.index.compacted, tenant_id, &(op.updated_at_ms, id.clone()));
                    if let Some(keys) = self.idempotency.get_mut(tenant_id) {
                        keys.remove(&idempotency_slot(&op.spec.principal_id, &op.spec.idempotency_key));
                    }
                }
                drop_empty(&mut self.compacted, tenant_id);
                drop_empty(&mut self.idempotency, tenant_id);
            }
            Event::CredentialsRetiredV1 { tenant_id, jtis, enrollments } => {
                for jti in jtis {
                    let token = self.tokens.get_mut(tenant_id).and_then(|m| m.remove(jti));
                    let token = token.ok_or_else(|| unknown(env, "token", jti))?;
                    remove_from(&mut self.index.token_expiry, tenant_id, &(token.record.expires_at_ms, jti.clone()));
                    if let Some(children) = self.token_children.get_mut(tenant_id) {
                        children.remove(jti);
                        if let Some(parent) = &token.record.parent_jti {
                            remove_from(children, parent, jti);
                        }
                    }
                }
                for id in enrollments {
                    let e = self.enrollments.get_mut(tenant_id).and_then(|m| m.remove(id));
                    let e = e.ok_or_else(|| unknown(env, "enrollment", id))?;
                    remove_from(&mut self.index.enrollment_expiry, tenant_id, &(e.expires_at_ms, id.clone()));
                }
                drop_empty(&mut self.tokens, tenant_id);
                drop_empty(&mut self.token_children, tenant_id);
                drop_empty(&mut self.enrollments, tenant_id);
            }
            _ => {}
        }
        Ok(())
    }
}

//! How retention's events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use crate::cold::{ColdOperation, Row};
use crate::ledger::{Event, EventEnvelope};
use crate::operation::fold::{count, store_cold, Before, Shape};
use crate::state::{drop_empty, idempotency_slot, remove_from, unknown, CorruptEvent, LedgerState};

impl LedgerState {
    /// Folds the retention events ([`crate::retention`]): compacts finished operations to their
    /// bindings, releases bindings (and their keys), drops retired token records, enrollments and
    /// closed work items.
    pub(crate) fn fold_retention(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::OperationsCompactedV1 { tenant_id, operation_ids } => {
                // A projection holds neither finished operations nor bindings.
                if self.projection {
                    return Ok(());
                }
                for id in operation_ids {
                    let (row, bytes) = self.cold_row(tenant_id, id).ok_or_else(|| unknown(env, "operation", id))?;
                    let before = Before { bytes, shape: Shape::of(&row) };
                    let binding = ColdOperation { op: row.op.binding(), history: Vec::new(), compacted: true };
                    store_cold(&mut self.cold, binding, Some(before), env.revision);
                }
            }
            Event::BindingsReleasedV1 { tenant_id, operation_ids } => {
                if self.projection {
                    return Ok(());
                }
                for id in operation_ids {
                    let (row, old) =
                        self.cold_row(tenant_id, id).ok_or_else(|| unknown(env, "compacted operation", id))?;
                    count(&mut self.cold, tenant_id, Shape::of(&row), true);
                    let slot = idempotency_slot(&row.op.spec.principal_id, &row.op.spec.idempotency_key);
                    let key = self.cold.get(tenant_id, Row::Key(&slot));
                    let cold = &mut self.cold;
                    if key.is_some() {
                        cold.put(tenant_id, Row::Key(&slot), env.revision, key.as_deref(), None);
                        cold.counts(tenant_id, |c| c.keys -= 1);
                    }
                    cold.put(tenant_id, Row::Compacted(row.op.updated_at_ms, id), env.revision, Some(&[]), None);
                    cold.put(tenant_id, Row::Operation(id), env.revision, Some(&old), None);
                }
            }
            Event::CredentialsRetiredV1 { tenant_id, jtis, enrollments } => {
                for jti in jtis {
                    crate::token::fold::retire_token(&mut self.cold, tenant_id, jti, env.revision)
                        .ok_or_else(|| unknown(env, "token", jti))?;
                }
                for id in enrollments {
                    let e = self.enrollments.get_mut(tenant_id).and_then(|m| m.remove(id));
                    let e = e.ok_or_else(|| unknown(env, "enrollment", id))?;
                    remove_from(&mut self.index.enrollment_expiry, tenant_id, &(e.expires_at_ms, id.clone()));
                }
                drop_empty(&mut self.enrollments, tenant_id);
            }
            Event::WorksRetiredV1 { tenant_id, work_ids } => {
                for id in work_ids {
                    self.retire_work(tenant_id, id, env.revision)
                        .ok_or_else(|| unknown(env, "closed work item", id))?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

//! How upstreams' events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use crate::ledger::{Event, EventEnvelope};
use crate::state::{CorruptEvent, LedgerState};

impl LedgerState {
    /// Upstream MCP servers, their tools and fuses, and operations bound to one.
    pub(crate) fn fold_upstream(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::UpstreamSetV1 { tenant_id, upstream } => {
                self.upstreams.entry(tenant_id.clone()).or_default().insert(upstream.name.clone(), upstream.clone());
            }
            Event::UpstreamRemovedV1 { tenant_id, name } => {
                let gone = self.upstreams.get_mut(tenant_id).and_then(|m| m.remove(name));
                gone.ok_or_else(|| CorruptEvent::new(env, format!("unknown upstream '{name}'")))?;
                if self.upstreams.get(tenant_id).is_some_and(|m| m.is_empty()) {
                    self.upstreams.remove(tenant_id);
                }
            }
            Event::UpstreamToolsObservedV1 { tenant_id, name, pending } => {
                self.upstream_mut(tenant_id, name, env)?.pending = pending.clone();
            }
            Event::UpstreamToolsApprovedV1 { tenant_id, name, digest } => {
                let u = self.upstream_mut(tenant_id, name, env)?;
                let pending = u.pending.take().filter(|p| &p.digest == digest);
                u.pinned = Some(pending.ok_or_else(|| CorruptEvent::new(env, format!("no pending tools {digest}")))?);
                u.updated_at_ms = env.at_ms;
            }
            Event::UpstreamFuseChangedV1 { tenant_id, name, edge_id, fuse } => {
                let fuses = &mut self.upstream_mut(tenant_id, name, env)?.fuses;
                fuses.insert(edge_id.clone(), fuse.clone());
                // Bounded: an edge that went away leaves its closed fuse until newer ones need room.
                if fuses.len() > crate::upstream::FUSES_KEPT {
                    let oldest = fuses
                        .iter()
                        .filter(|(_, f)| !f.open)
                        .min_by_key(|(id, f)| (f.changed_at_ms, (*id).clone()))
                        .map(|(id, _)| id.clone());
                    if let Some(id) = oldest {
                        fuses.remove(&id);
                    }
                }
            }
            Event::OperationUpstreamBoundV1 { tenant_id, operation_id, target } => {
                if !self.operations.get(tenant_id).is_some_and(|m| m.contains_key(operation_id)) {
                    return Err(CorruptEvent::new(env, format!("unknown operation '{operation_id}'")));
                }
                self.upstream_operations
                    .entry(tenant_id.clone())
                    .or_default()
                    .insert(operation_id.clone(), target.clone());
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }
}

/// What this domain's fold (and others') change it through.
impl LedgerState {
    pub(crate) fn upstream_mut(
        &mut self,
        tenant_id: &str,
        name: &str,
        env: &EventEnvelope,
    ) -> Result<&mut crate::upstream::UpstreamV1, CorruptEvent> {
        self.upstreams
            .get_mut(tenant_id)
            .and_then(|m| m.get_mut(name))
            .ok_or_else(|| CorruptEvent::new(env, format!("unknown upstream '{name}'")))
    }
}

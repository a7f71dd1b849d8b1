//! How work items' events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use crate::ledger::{Event, EventEnvelope};
use crate::state::{CorruptEvent, LedgerState};

impl LedgerState {
    /// Folds [`Event::WorkCreatedV1`] and [`Event::WorkRevisedV1`].
    pub(crate) fn fold_work(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        use crate::work::{WorkItem, WorkState};
        match &env.event {
            Event::WorkCreatedV1 { tenant_id, work_id, title, owner, scope, by } => {
                let item = WorkItem {
                    id: work_id.clone(),
                    tenant_id: tenant_id.clone(),
                    title: title.clone(),
                    owner: owner.clone(),
                    state: WorkState::Open,
                    revision: 1,
                    scope: scope.clone(),
                    cost_used: 0,
                    operations: Vec::new(),
                    note: String::new(),
                    updated_by: by.clone(),
                    created_at_ms: env.at_ms,
                    updated_at_ms: env.at_ms,
                };
                self.works.entry(tenant_id.clone()).or_default().insert(work_id.clone(), item);
            }
            Event::WorkRevisedV1 { tenant_id, work_id, revision, change, by, .. } => {
                let item = self
                    .works
                    .get_mut(tenant_id)
                    .and_then(|m| m.get_mut(work_id))
                    .ok_or_else(|| CorruptEvent::new(env, format!("unknown work item '{work_id}'")))?;
                if *revision != item.revision + 1 {
                    return Err(CorruptEvent::new(env, format!("work revision gap after {}", item.revision)));
                }
                let change = change.clone();
                item.title = change.title.unwrap_or(std::mem::take(&mut item.title));
                item.owner = change.owner.unwrap_or(std::mem::take(&mut item.owner));
                item.scope = change.scope.unwrap_or(std::mem::take(&mut item.scope));
                item.state = change.state.unwrap_or(item.state);
                item.note = change.note.unwrap_or_default();
                item.revision = *revision;
                item.updated_by = by.clone();
                item.updated_at_ms = env.at_ms;
            }
            _ => {}
        }
        Ok(())
    }
}

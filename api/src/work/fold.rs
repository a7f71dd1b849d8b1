//! How work items' events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use crate::cold::Row;
use crate::ledger::{Event, EventEnvelope};
use crate::retention::retires_works;
use crate::state::{drop_empty, CorruptEvent, LedgerState};
use crate::work::{WorkItem, WorkState, WORK_ITEMS_PER_TENANT_MAX};

impl LedgerState {
    /// Folds [`Event::WorkCreatedV1`] and [`Event::WorkRevisedV1`]; an item that closes becomes
    /// a cold row.
    pub(crate) fn fold_work(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
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
                if item.state != WorkState::Open {
                    self.close_work(tenant_id, work_id, env.revision);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Moves the closed work item `work_id` of `tenant_id` from memory to its cold row, written
    /// at `revision`: no rule reads it on a command any more, only queries and the count of a
    /// tenant's items. Where retention retires closed items, it gets its time row too.
    fn close_work(&mut self, tenant_id: &str, work_id: &str, revision: u64) {
        let Some(item) = self.works.get_mut(tenant_id).and_then(|m| m.remove(work_id)) else { return };
        let bytes = crate::encode(&item).expect("a work item encodes");
        self.cold.put(tenant_id, Row::Work(work_id), revision, None, Some(bytes));
        if retires_works(self.ledger_version) {
            self.cold.put(tenant_id, closed_row(&item), revision, None, Some(Vec::new()));
        }
        *self.works_closed.entry(tenant_id.to_string()).or_default() += 1;
        drop_empty(&mut self.works, tenant_id);
    }

    /// What a raised ledger version (from `before`) changes for work items: once retention
    /// retires closed items, each item closed before gets its time row, at `revision`, by when
    /// it closed — on every replica alike, since every replica holds the same rows.
    pub(crate) fn ledger_version_raised(&mut self, before: u32, revision: u64) {
        if retires_works(before) || !retires_works(self.ledger_version) {
            return;
        }
        let tenants: Vec<String> = self.works_closed.keys().cloned().collect();
        for tenant_id in tenants {
            // A tenant holds at most that many items, open and closed.
            for item in self.cold.works(&tenant_id, None, WORK_ITEMS_PER_TENANT_MAX) {
                self.cold.put(&tenant_id, closed_row(&item), revision, None, Some(Vec::new()));
            }
        }
    }

    /// Drops the closed work item `work_id` of `tenant_id` (retention), at `revision`: its row,
    /// its time row, and its place in the tenant's count. `None` when it has no row.
    pub(crate) fn retire_work(&mut self, tenant_id: &str, work_id: &str, revision: u64) -> Option<()> {
        let old = self.cold.get(tenant_id, Row::Work(work_id))?;
        let item: WorkItem = crate::decode_unbounded(&old).expect("a work row decodes");
        self.cold.put(tenant_id, Row::Work(work_id), revision, Some(&old), None);
        let time = closed_row(&item);
        // A projection's rows carry no time rows of the items closed before it was made.
        if let Some(old_time) = self.cold.get(tenant_id, time) {
            self.cold.put(tenant_id, time, revision, Some(&old_time), None);
        }
        let closed = self.works_closed.get_mut(tenant_id)?;
        *closed -= 1;
        if *closed == 0 {
            self.works_closed.remove(tenant_id);
        }
        Some(())
    }

    /// Moves the closed work items formats before 21 kept in memory to cold rows, at the
    /// state's revision: what decoding such a format does.
    pub(crate) fn cool_works(&mut self) {
        let closed: Vec<(String, String)> = (self.works.iter())
            .flat_map(|(t, m)| {
                m.values().filter(|w| w.state != WorkState::Open).map(move |w| (t.clone(), w.id.clone()))
            })
            .collect();
        for (tenant_id, work_id) in closed {
            let created = self.tenants.get(&tenant_id).map_or(0, |t| t.created_at_ms);
            self.cold.open(&tenant_id, created);
            self.close_work(&tenant_id, &work_id, self.revision);
        }
    }

    /// `tenant_id`'s closed work items written into `tier` at the state's revision (a
    /// projection's rows).
    pub(crate) fn project_works(&self, tenant_id: &str, tier: &mut crate::cold::ColdTier) {
        for item in self.cold.works(tenant_id, None, usize::MAX) {
            let bytes = crate::encode(&item).expect("a work item encodes");
            tier.put(tenant_id, Row::Work(&item.id), self.revision, None, Some(bytes));
        }
    }

    /// The inverse of [`LedgerState::cool_works`]: every closed work item back in
    /// [`LedgerState::works`], out of the rows, their sums and the pending writes (to write a
    /// format that kept them in memory).
    pub fn warm_works(&mut self) {
        let tenants: Vec<String> = self.cold.tenants.keys().cloned().collect();
        for tenant_id in tenants {
            for item in self.cold.works(&tenant_id, None, usize::MAX) {
                let old = crate::encode(&item).expect("a work item encodes");
                self.cold.put(&tenant_id, Row::Work(&item.id), self.revision, Some(&old), None);
                self.works.entry(tenant_id.clone()).or_default().insert(item.id.clone(), item);
            }
        }
        self.works_closed.clear();
        self.cold.forget_pending(&[Row::Work("")]);
    }
}

/// The time row of closed work item `item` (by when it closed: its last change), what retention
/// walks.
fn closed_row(item: &WorkItem) -> Row<'_> {
    Row::WorkClosed(item.updated_at_ms, &item.id)
}

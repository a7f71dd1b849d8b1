//! What the state answers about this domain (lookups by id or name, pages), for queries and
//! for the rules.

use std::borrow::Cow;

use crate::cold::Row;
use crate::state::{merged_page, rows_to_scan, LedgerState};
use crate::work::{WorkItem, WorkState, WORK_ITEMS_PER_TENANT_MAX};

impl LedgerState {
    /// A tenant's work item by id: an open one from memory, a closed one from its cold row.
    pub fn work(&self, tenant_id: &str, work_id: &str) -> Option<Cow<'_, WorkItem>> {
        if let Some(item) = self.works.get(tenant_id).and_then(|m| m.get(work_id)) {
            return Some(Cow::Borrowed(item));
        }
        let bytes = self.cold.get(tenant_id, Row::Work(work_id))?;
        Some(Cow::Owned(crate::decode_unbounded(&bytes).expect("a work row decodes")))
    }

    /// How many work items a tenant holds, open and closed (what its cap counts).
    pub fn work_count(&self, tenant_id: &str) -> u64 {
        let open = self.works.get(tenant_id).map_or(0, |m| m.len() as u64);
        open + self.works_closed.get(tenant_id).copied().unwrap_or(0)
    }

    /// A page of a tenant's work items (in `state`, if given), open and closed, after the id
    /// `after` in the rows' order of ids (by length, then bytes), scanning at most
    /// [`WORK_ITEMS_PER_TENANT_MAX`] (all of them).
    pub fn list_work(
        &self,
        tenant_id: &str,
        state: Option<WorkState>,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<WorkItem>, Option<String>) {
        let scan = rows_to_scan(limit, WORK_ITEMS_PER_TENANT_MAX);
        let cold = self.cold.works(tenant_id, after, scan).into_iter().map(|w| (w.id.clone(), w)).collect();
        let hot = self.works.get(tenant_id).into_iter().flatten();
        let in_state = |w: &WorkItem| state.is_none_or(|s| w.state == s);
        merged_page(hot, cold, after, limit, scan, WORK_ITEMS_PER_TENANT_MAX, in_state)
    }
}

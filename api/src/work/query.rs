//! What the state answers about this domain (lookups by id or name, pages), for queries and
//! for the rules.

use crate::state::{scan_page, LedgerState};

impl LedgerState {
    /// A page of a tenant's work items (in `state`, if given), by id after `after`, scanning at
    /// most [`crate::work::WORK_ITEMS_PER_TENANT_MAX`] (all of them).
    pub fn list_work(
        &self,
        tenant_id: &str,
        state: Option<crate::work::WorkState>,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<crate::work::WorkItem>, Option<String>) {
        let Some(works) = self.works.get(tenant_id) else { return (Vec::new(), None) };
        let in_state = |w: &crate::work::WorkItem| state.is_none_or(|s| w.state == s);
        scan_page(works, after, limit, crate::work::WORK_ITEMS_PER_TENANT_MAX, in_state)
    }
}

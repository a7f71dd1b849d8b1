//! What the state answers about this domain (lookups by id or name, pages), for queries and
//! for the rules.

use crate::ledger::Tenant;
use crate::state::{page_by_name, LedgerState};

impl LedgerState {
    /// Looks a tenant up by id, then by name.
    pub fn tenant(&self, id_or_name: &str) -> Option<&Tenant> {
        self.tenants.get(id_or_name).or_else(|| self.tenant_names.get(id_or_name).and_then(|id| self.tenants.get(id)))
    }

    /// Tenants ordered by name, after the cursor (a name), at most `limit`.
    pub fn list_tenants(&self, after: Option<&str>, limit: usize) -> (Vec<Tenant>, Option<String>) {
        page_by_name(&self.tenant_names, |id| self.tenants.get(id).cloned(), after, limit)
    }
}

//! What the state answers about this domain (lookups by id or name, pages), for queries and
//! for the rules.

use crate::principal::Principal;
use crate::state::{page_by_name, LedgerState};

impl LedgerState {
    /// Looks a principal of a tenant up by id, then by name.
    pub fn principal(&self, tenant_id: &str, id_or_name: &str) -> Option<&Principal> {
        let by_tenant = self.principals.get(tenant_id)?;
        by_tenant.get(id_or_name).or_else(|| {
            let id = self.principal_names.get(tenant_id)?.get(id_or_name)?;
            by_tenant.get(id)
        })
    }

    /// A tenant's principals ordered by name, after the cursor (a name), at most `limit`.
    pub fn list_principals(
        &self,
        tenant_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<Principal>, Option<String>) {
        let (Some(names), Some(by_id)) = (self.principal_names.get(tenant_id), self.principals.get(tenant_id)) else {
            return (Vec::new(), None);
        };
        page_by_name(names, |id| by_id.get(id).cloned(), after, limit)
    }
}

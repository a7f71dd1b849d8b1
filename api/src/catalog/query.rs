//! What the state answers about this domain (lookups by id or name, pages), for queries and
//! for the rules.

use crate::catalog::CatalogVersion;
use crate::state::LedgerState;

impl LedgerState {
    /// A tenant's catalog: `version`, or the newest when `None`.
    pub fn catalog(&self, tenant_id: &str, version: Option<u64>) -> Option<&CatalogVersion> {
        let versions = self.catalogs.get(tenant_id)?;
        match version {
            Some(v) => versions.get(&v),
            None => versions.values().next_back(),
        }
    }
}

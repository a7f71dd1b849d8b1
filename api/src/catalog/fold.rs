//! How catalogs' events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use crate::catalog::{CatalogVersion, CATALOG_VERSIONS_KEPT};
use crate::ledger::{Event, EventEnvelope};
use crate::state::{CorruptEvent, LedgerState};

impl LedgerState {
    /// Catalog versions (the newest `CATALOG_VERSIONS_KEPT`).
    pub(crate) fn fold_catalog(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::CatalogPublishedV1 { tenant_id, version, catalog } => {
                let versions = self.catalogs.entry(tenant_id.clone()).or_default();
                versions.insert(
                    *version,
                    CatalogVersion {
                        tenant_id: tenant_id.clone(),
                        version: *version,
                        published_at_ms: env.at_ms,
                        revision: env.revision,
                        catalog: catalog.clone(),
                    },
                );
                while versions.len() > CATALOG_VERSIONS_KEPT {
                    versions.pop_first();
                }
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }
}

//! Catalogs (SPEC D4): a checked catalog becomes the next version unless its digest equals the newest one.

use crate::decide::prelude::*;

pub(crate) fn decide(state: &LedgerState, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    match cmd {
        Command::PublishCatalog { tenant_id, catalog } => {
            existing(state, tenant_id)?;
            check_stored(catalog)?;
            let current = state.catalog(tenant_id, None);
            if current.is_some_and(|c| c.catalog.digest == catalog.digest) {
                return Ok(vec![]);
            }
            let version = current.map_or(1, |c| c.version + 1);
            Ok(vec![Event::CatalogPublishedV1 { tenant_id: tenant_id.clone(), version, catalog: catalog.clone() }])
        }
        other => Err(misrouted(other)),
    }
}

//! What the state answers about this domain (lookups by id or name, pages), for queries and
//! for the rules.

use crate::device::{Device, Site};
use crate::state::{by_id_or_name, page_by_name, LedgerState};

impl LedgerState {
    /// A site of a tenant by id, then by name.
    pub fn site(&self, tenant_id: &str, id_or_name: &str) -> Option<&Site> {
        by_id_or_name(&self.sites, &self.site_names, tenant_id, id_or_name)
    }

    /// A device of a tenant by id, then by name.
    pub fn device(&self, tenant_id: &str, id_or_name: &str) -> Option<&Device> {
        by_id_or_name(&self.devices, &self.device_names, tenant_id, id_or_name)
    }

    /// A tenant's sites ordered by name.
    pub fn list_sites(&self, tenant_id: &str, after: Option<&str>, limit: usize) -> (Vec<Site>, Option<String>) {
        let (Some(names), Some(by_id)) = (self.site_names.get(tenant_id), self.sites.get(tenant_id)) else {
            return (Vec::new(), None);
        };
        page_by_name(names, |id| by_id.get(id).cloned(), after, limit)
    }

    /// A tenant's devices (optionally of one site) ordered by name.
    pub fn list_devices(
        &self,
        tenant_id: &str,
        site_id: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<Device>, Option<String>) {
        let (Some(names), Some(by_id)) = (self.device_names.get(tenant_id), self.devices.get(tenant_id)) else {
            return (Vec::new(), None);
        };
        let in_site = |d: &Device| site_id.is_none_or(|s| d.site_id == s);
        page_by_name(names, |id| by_id.get(id).filter(|d| in_site(d)).cloned(), after, limit)
    }
}

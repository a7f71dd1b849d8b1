//! How sites' and devices' events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use crate::device::{Device, Site};
use crate::ledger::{Event, EventEnvelope};
use crate::state::{CorruptEvent, LedgerState};

impl LedgerState {
    /// Sites and devices.
    pub(crate) fn fold_site(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::SiteCreatedV1 { tenant_id, site_id, name, display_name } => {
                self.site_names.entry(tenant_id.clone()).or_default().insert(name.clone(), site_id.clone());
                let site = Site {
                    id: site_id.clone(),
                    tenant_id: tenant_id.clone(),
                    name: name.clone(),
                    display_name: display_name.clone(),
                    created_at_ms: env.at_ms,
                    revision: env.revision,
                };
                self.sites.entry(tenant_id.clone()).or_default().insert(site_id.clone(), site);
            }
            Event::DeviceCreatedV1 { tenant_id, device_id, site_id, name, device_class } => {
                self.device_names.entry(tenant_id.clone()).or_default().insert(name.clone(), device_id.clone());
                let device = Device {
                    id: device_id.clone(),
                    tenant_id: tenant_id.clone(),
                    site_id: site_id.clone(),
                    name: name.clone(),
                    device_class: device_class.clone(),
                    created_at_ms: env.at_ms,
                    revision: env.revision,
                };
                self.devices.entry(tenant_id.clone()).or_default().insert(device_id.clone(), device);
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }
}

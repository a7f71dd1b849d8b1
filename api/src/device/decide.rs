//! Sites and devices (SPEC D5): tenant-unique names; a device belongs to a site of its tenant.

use crate::decide::prelude::*;

pub(crate) fn decide(state: &LedgerState, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    match cmd {
        Command::CreateSite { tenant_id, site_id, name, display_name } => {
            existing(state, tenant_id)?;
            validate_site(site_id, name, display_name.as_deref())?;
            if state.site(tenant_id, name).is_some() || state.site(tenant_id, site_id).is_some() {
                return Err(Rejection::new(
                    ReasonCode::SITE_ALREADY_EXISTS,
                    format!("a site named '{name}' (or with this id) already exists in this tenant"),
                ));
            }
            Ok(vec![Event::SiteCreatedV1 {
                tenant_id: tenant_id.clone(),
                site_id: site_id.clone(),
                name: name.clone(),
                display_name: display_name.clone(),
            }])
        }
        Command::CreateDevice { tenant_id, device_id, site_id, name, device_class } => {
            existing(state, tenant_id)?;
            validate_device(device_id, name, device_class)?;
            if state.sites.get(tenant_id).and_then(|s| s.get(site_id)).is_none() {
                return Err(Rejection::new(ReasonCode::SITE_NOT_FOUND, format!("no site '{site_id}' in this tenant")));
            }
            if state.device(tenant_id, name).is_some() || state.device(tenant_id, device_id).is_some() {
                return Err(Rejection::new(
                    ReasonCode::DEVICE_ALREADY_EXISTS,
                    format!("a device named '{name}' (or with this id) already exists in this tenant"),
                ));
            }
            Ok(vec![Event::DeviceCreatedV1 {
                tenant_id: tenant_id.clone(),
                device_id: device_id.clone(),
                site_id: site_id.clone(),
                name: name.clone(),
                device_class: device_class.clone(),
            }])
        }
        other => Err(misrouted(other)),
    }
}

//! How a tenant's events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use crate::ledger::{Event, EventEnvelope, Tenant, TenantState};
use crate::settings::TenantSettingsV1;
use crate::state::{unknown, CorruptEvent, LedgerState};

impl LedgerState {
    /// Tenants: created, their settings, suspended, resumed, deleted, purged.
    pub(crate) fn fold_tenant(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::TenantCreatedV1 { tenant_id, name, display_name } => {
                self.tenant_names.insert(name.clone(), tenant_id.clone());
                self.tenants.insert(
                    tenant_id.clone(),
                    Tenant {
                        id: tenant_id.clone(),
                        name: name.clone(),
                        display_name: display_name.clone(),
                        state: TenantState::Active,
                        created_at_ms: env.at_ms,
                        updated_at_ms: env.at_ms,
                        revision: env.revision,
                        settings: TenantSettingsV1::default(),
                    },
                );
            }
            Event::TenantSettingsChangedV1 { tenant_id, settings } => {
                let tenant = self.tenants.get_mut(tenant_id).ok_or_else(|| unknown(env, "tenant", tenant_id))?;
                tenant.settings = settings.clone();
                tenant.updated_at_ms = env.at_ms;
                tenant.revision = env.revision;
            }
            Event::TenantSuspendedV1 { tenant_id, .. } => {
                self.set_tenant_state(tenant_id, TenantState::Suspended, env)?
            }
            Event::TenantResumedV1 { tenant_id } => self.set_tenant_state(tenant_id, TenantState::Active, env)?,
            Event::TenantDeletedV1 { tenant_id, .. } => self.set_tenant_state(tenant_id, TenantState::Deleted, env)?,
            Event::TenantPurgedV1 { tenant_id, name } => self.purge_tenant(tenant_id, name),
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }
}

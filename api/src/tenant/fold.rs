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
                self.cold.open(tenant_id, env.at_ms);
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

/// What this domain's fold (and others') change it through.
impl LedgerState {
    /// Forgets everything of a purged tenant (its stream's sequence stays: ids are never
    /// reused); the node drops its audit records and evidence blobs (`Event::TenantPurgedV1`).
    pub(crate) fn purge_tenant(&mut self, tenant_id: &str, name: &str) {
        self.tenants.remove(tenant_id);
        self.tenant_names.remove(name);
        self.principals.remove(tenant_id);
        self.principal_names.remove(tenant_id);
        self.tokens.remove(tenant_id);
        self.token_children.remove(tenant_id);
        self.sites.remove(tenant_id);
        self.site_names.remove(tenant_id);
        self.devices.remove(tenant_id);
        self.device_names.remove(tenant_id);
        self.catalogs.remove(tenant_id);
        self.audit.remove(tenant_id);
        self.enrollments.remove(tenant_id);
        self.executors.remove(tenant_id);
        self.executor_cas.remove(tenant_id);
        self.principal_quotas.remove(tenant_id);
        self.quota_windows.remove(tenant_id);
        self.operations.remove(tenant_id);
        self.idempotency.remove(tenant_id);
        self.device_leases.remove(tenant_id);
        self.fencing.remove(tenant_id);
        self.live_operations.remove(tenant_id);
        self.operation_windows.remove(tenant_id);
        self.principal_operation_windows.remove(tenant_id);
        self.proposals.remove(tenant_id);
        self.works.remove(tenant_id);
        self.works_closed.remove(tenant_id);
        self.history.remove(tenant_id);
        self.evidence.remove(tenant_id);
        self.compacted.remove(tenant_id);
        self.upstreams.remove(tenant_id);
        self.upstream_operations.remove(tenant_id);
        self.anonymous.remove(tenant_id);
        self.sessions.remove(tenant_id);
        self.oauth.remove(tenant_id);
        self.executor_presence.remove(tenant_id);
        self.cold.drop_tenant(tenant_id, self.revision);
        self.revocations.executor_cas.remove(tenant_id);
        self.executor_certs.retain(|_, (t, _)| t != tenant_id);
        let issuers: Vec<String> =
            self.issuers.iter().filter(|(_, i)| i.tenant_id == tenant_id).map(|(iss, _)| iss.clone()).collect();
        for iss in issuers {
            self.issuers.remove(&iss);
            self.issuer_sources.remove(&iss);
            self.revocations.issuer_tokens.remove(&iss);
        }
        self.rebuild_index();
    }

    pub(crate) fn set_tenant_state(
        &mut self,
        tenant_id: &str,
        state: TenantState,
        env: &EventEnvelope,
    ) -> Result<(), CorruptEvent> {
        let tenant = self.tenants.get_mut(tenant_id).ok_or_else(|| unknown(env, "tenant", tenant_id))?;
        tenant.state = state;
        tenant.updated_at_ms = env.at_ms;
        tenant.revision = env.revision;
        Ok(())
    }
}

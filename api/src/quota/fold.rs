//! How quotas' events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use crate::ledger::{Event, EventEnvelope};
use crate::quota::QuotaWindow;
use crate::state::{CorruptEvent, LedgerState};

impl LedgerState {
    /// Quotas: principals' own, and the request-quota grants of the current window.
    pub(crate) fn fold_quota(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::PrincipalQuotasSetV1 { tenant_id, principal_id, quotas } => {
                self.set_principal_quotas(tenant_id, principal_id, quotas.clone().into())
            }
            Event::PrincipalQuotasSetV2 { tenant_id, principal_id, quotas } => {
                self.set_principal_quotas(tenant_id, principal_id, quotas.clone())
            }
            Event::RequestQuotaLeasedV1 { tenant_id, principal_id, window, granted, .. } => {
                let w = self.quota_windows.entry(tenant_id.clone()).or_default();
                if w.window != *window {
                    *w = QuotaWindow { window: *window, ..Default::default() };
                }
                w.tenant_granted += granted;
                *w.principal_granted.entry(principal_id.clone()).or_default() += granted;
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }
}

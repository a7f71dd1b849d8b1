//! Quotas (SPEC D9): principals' own limits and request-quota slices leased to edges.

use crate::decide::prelude::*;

pub(crate) fn decide(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    match cmd {
        Command::SetPrincipalQuotas { tenant_id, principal, quotas } => {
            existing(state, tenant_id)?;
            quotas.validate()?;
            let principal_id = quotas_subject(state, tenant_id, principal)?;
            Ok(vec![Event::PrincipalQuotasSetV1 { tenant_id: tenant_id.clone(), principal_id, quotas: quotas.clone() }])
        }
        Command::SetPrincipalQuotasV2 { tenant_id, principal, quotas } => {
            existing(state, tenant_id)?;
            quotas.validate()?;
            let principal_id = quotas_subject(state, tenant_id, principal)?;
            Ok(vec![Event::PrincipalQuotasSetV2 { tenant_id: tenant_id.clone(), principal_id, quotas: quotas.clone() }])
        }
        Command::LeaseRequestQuota { tenant_id, principal_id, wanted } => {
            let tenant = existing(state, tenant_id)?;
            if !(1..=crate::quota::SLICE_MAX).contains(wanted) {
                return Err(Rejection::new(ReasonCode::INPUT_INVALID, "a lease asks for 1..=100 requests"));
            }
            if state.principals.get(tenant_id).and_then(|m| m.get(principal_id)).is_none() {
                return Err(Rejection::new(ReasonCode::PRINCIPAL_NOT_FOUND, format!("no principal '{principal_id}'")));
            }
            let window = now / crate::quota::WINDOW_MS;
            let principal_limit = state
                .principal_quotas
                .get(tenant_id)
                .and_then(|m| m.get(principal_id))
                .and_then(|q| q.requests_per_minute);
            let granted = crate::quota::grantable(
                state.quota_windows.get(tenant_id),
                window,
                principal_id,
                tenant.settings.quotas.requests_per_minute,
                principal_limit,
                *wanted,
            );
            Ok(vec![Event::RequestQuotaLeasedV1 {
                tenant_id: tenant_id.clone(),
                principal_id: principal_id.clone(),
                window,
                granted,
                window_ends_at_ms: (window + 1) * crate::quota::WINDOW_MS,
            }])
        }
        other => Err(misrouted(other)),
    }
}

/// The id of the principal (id or name) whose quotas are set.
fn quotas_subject(state: &LedgerState, tenant_id: &str, principal: &str) -> Result<String, Rejection> {
    state.principal(tenant_id, principal).map(|p| p.id.clone()).ok_or_else(|| {
        Rejection::new(ReasonCode::PRINCIPAL_NOT_FOUND, format!("no principal '{principal}' in this tenant"))
    })
}

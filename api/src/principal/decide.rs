//! Principals (SPEC D2): creation with a name unique in the tenant, revocation, and taking one
//! scope away or granting one more.

use crate::decide::prelude::*;

pub(crate) fn decide(state: &LedgerState, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    match cmd {
        Command::CreatePrincipal { tenant_id, spec } => created(state, tenant_id, spec),
        Command::CreatePrincipalWith { tenant_id, spec, quotas } => {
            let mut events = created(state, tenant_id, spec)?;
            quotas.validate()?;
            let principal_id = spec.principal_id.clone();
            events.push(Event::PrincipalQuotasSetV2 {
                tenant_id: tenant_id.clone(),
                principal_id,
                quotas: quotas.clone(),
            });
            Ok(events)
        }
        Command::RevokePrincipal { tenant_id, principal_id, note } => {
            validate_text("note", note.as_deref(), NOTE_BYTES_MAX)?;
            active_principal(state, tenant_id, principal_id)?;
            Ok(vec![Event::PrincipalRevokedV1 {
                tenant_id: tenant_id.clone(),
                principal_id: principal_id.clone(),
                note: note.clone(),
            }])
        }
        Command::RevokeScope { tenant_id, principal_id, scope } => {
            let p = active_principal(state, tenant_id, principal_id)?;
            if !p.scopes.contains(scope) {
                return Err(Rejection::new(
                    ReasonCode::INPUT_INVALID,
                    format!("principal '{}' does not hold scope '{scope}'", p.name),
                ));
            }
            Ok(vec![Event::ScopeRevokedV1 {
                tenant_id: tenant_id.clone(),
                principal_id: principal_id.clone(),
                scope: scope.clone(),
            }])
        }
        Command::GrantScope { tenant_id, principal_id, scope } => {
            let p = active_principal(state, tenant_id, principal_id)?;
            validate_scope(scope)?;
            if p.scopes.contains(scope) && !p.revoked_scopes.contains(scope) {
                return Ok(vec![]); // held already: nothing changes
            }
            // A broader revocation stays: lifting it would grant more than was asked.
            if let Some(broader) = p.revoked_scopes.iter().find(|r| *r != scope && scope_covers(r, scope)) {
                return Err(Rejection::new(
                    ReasonCode::PRINCIPAL_STATE_CONFLICT,
                    format!("scope '{broader}' was revoked from principal '{}' and covers '{scope}'", p.name),
                ));
            }
            Ok(vec![Event::ScopeGrantedV1 {
                tenant_id: tenant_id.clone(),
                principal_id: principal_id.clone(),
                scope: scope.clone(),
            }])
        }
        other => Err(misrouted(other)),
    }
}

/// A new principal's creation, checked: a name and an id unique in the tenant.
fn created(
    state: &LedgerState,
    tenant_id: &str,
    spec: &crate::principal::PrincipalSpecV1,
) -> Result<Vec<Event>, Rejection> {
    existing(state, tenant_id)?;
    spec.validate()?;
    if state.principal(tenant_id, &spec.name).is_some() {
        return Err(Rejection::new(
            ReasonCode::PRINCIPAL_ALREADY_EXISTS,
            format!("a principal named '{}' already exists in this tenant", spec.name),
        ));
    }
    if state.principal(tenant_id, &spec.principal_id).is_some() {
        return Err(Rejection::new(ReasonCode::PRINCIPAL_ALREADY_EXISTS, "principal id is taken"));
    }
    Ok(vec![Event::PrincipalCreatedV1 { tenant_id: tenant_id.to_string(), spec: spec.clone() }])
}

//! Tenants (SPEC D1): creation with a unique name, suspension and resumption, settings patched and validated as a whole (the event carries the complete result).

use crate::decide::prelude::*;
use crate::settings::TenantSettingsV1;

pub(crate) fn decide(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    match cmd {
        Command::CreateTenant { tenant_id, name, display_name } => created(state, tenant_id, name, display_name),
        Command::CreateTenantWith { tenant_id, name, display_name, settings } => {
            let mut events = created(state, tenant_id, name, display_name)?;
            let settings = TenantSettingsV1::default().patched(settings)?;
            events.push(Event::TenantSettingsChangedV1 { tenant_id: tenant_id.clone(), settings });
            Ok(events)
        }
        Command::SuspendTenant { tenant_id, note } => {
            validate_text("note", note.as_deref(), NOTE_BYTES_MAX)?;
            match existing(state, tenant_id)?.state {
                TenantState::Active => {
                    Ok(vec![Event::TenantSuspendedV1 { tenant_id: tenant_id.clone(), note: note.clone() }])
                }
                TenantState::Suspended | TenantState::Deleted => Err(Rejection::new(
                    ReasonCode::TENANT_STATE_CONFLICT,
                    format!("tenant '{tenant_id}' is already suspended"),
                )),
            }
        }
        Command::PurgeTenant { tenant_id } => {
            let tenant = state
                .tenants
                .get(tenant_id)
                .ok_or_else(|| Rejection::new(ReasonCode::TENANT_NOT_FOUND, format!("no tenant '{tenant_id}'")))?;
            if tenant.state != TenantState::Deleted {
                let msg = format!("tenant '{}' is not deleted: delete it first", tenant.name);
                return Err(Rejection::new(ReasonCode::TENANT_STATE_CONFLICT, msg));
            }
            let after = tenant.updated_at_ms.saturating_add(crate::ledger::TENANT_PURGE_AFTER_MS);
            if now < after {
                let msg = format!(
                    "tenant '{}' was deleted at {} (ledger ms): its data is kept until {after}",
                    tenant.name, tenant.updated_at_ms
                );
                return Err(Rejection::new(ReasonCode::TENANT_STATE_CONFLICT, msg));
            }
            Ok(vec![Event::TenantPurgedV1 { tenant_id: tenant_id.clone(), name: tenant.name.clone() }])
        }
        Command::DeleteTenant { tenant_id, note } => {
            validate_text("note", note.as_deref(), NOTE_BYTES_MAX)?;
            existing(state, tenant_id)?; // a deleted tenant is TENANT_DELETED
            Ok(vec![Event::TenantDeletedV1 { tenant_id: tenant_id.clone(), note: note.clone() }])
        }
        Command::ResumeTenant { tenant_id } => match existing(state, tenant_id)?.state {
            TenantState::Suspended => Ok(vec![Event::TenantResumedV1 { tenant_id: tenant_id.clone() }]),
            TenantState::Active | TenantState::Deleted => {
                Err(Rejection::new(ReasonCode::TENANT_STATE_CONFLICT, format!("tenant '{tenant_id}' is not suspended")))
            }
        },
        Command::SetTenantSettings { tenant_id, patch } => {
            let settings = existing(state, tenant_id)?.settings.patched(patch)?;
            Ok(vec![Event::TenantSettingsChangedV1 { tenant_id: tenant_id.clone(), settings }])
        }
        other => Err(misrouted(other)),
    }
}

/// A new tenant's creation, checked.
fn created(
    state: &LedgerState,
    tenant_id: &str,
    name: &str,
    display_name: &Option<String>,
) -> Result<Vec<Event>, Rejection> {
    validate_tenant_name(name)?;
    validate_text("display_name", display_name.as_deref(), DISPLAY_NAME_BYTES_MAX)?;
    if tenant_id.is_empty() || tenant_id == CLUSTER_STREAM || tenant_id.len() > 64 {
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, "tenant id must be 1..=64 bytes"));
    }
    if state.tenant_names.contains_key(name) {
        return Err(Rejection::new(
            ReasonCode::TENANT_ALREADY_EXISTS,
            format!("a tenant named '{name}' already exists"),
        ));
    }
    if state.tenants.contains_key(tenant_id) {
        return Err(Rejection::new(ReasonCode::TENANT_ALREADY_EXISTS, format!("tenant id '{tenant_id}' is taken")));
    }
    Ok(vec![Event::TenantCreatedV1 {
        tenant_id: tenant_id.to_string(),
        name: name.to_string(),
        display_name: display_name.clone(),
    }])
}

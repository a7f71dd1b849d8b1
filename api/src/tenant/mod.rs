//! The tenant domain: a tenant's lifecycle (active, suspended, deleted, purged) and settings —
//! its view ([`Tenant`]), its rules (`decide`) and how its events fold into the state (`fold`).

use serde::{Deserialize, Serialize};

use crate::reason::ReasonCode;
use crate::settings::TenantSettingsV1;

/// Lifecycle state of a tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TenantState {
    Active,
    Suspended,
    /// A tombstone: final; nothing of the tenant is served or changed any more.
    Deleted,
}

/// The tenant view, derived from tenant events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    pub id: String,
    pub name: String,
    pub display_name: Option<String>,
    pub state: TenantState,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    /// Revision of the last event that changed this tenant.
    pub revision: u64,
    pub settings: TenantSettingsV1,
}

impl Tenant {
    /// Why the tenant takes no request now — suspended or deleted — if it takes none: the one
    /// domain gate every path (tokens, commands, executors) asks.
    pub fn closed(&self) -> Option<crate::rejection::Rejection> {
        use crate::rejection::Rejection;
        match self.state {
            TenantState::Active => None,
            TenantState::Suspended => {
                Some(Rejection::new(ReasonCode::TENANT_SUSPENDED, format!("tenant '{}' is suspended", self.name)))
            }
            TenantState::Deleted => {
                Some(Rejection::new(ReasonCode::TENANT_DELETED, format!("tenant '{}' was deleted", self.name)))
            }
        }
    }
}

pub mod decide;
mod fold;
mod query;

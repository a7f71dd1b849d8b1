//! Work items (SPEC D12, seed "Work: work_ref + revision + operation_id"): durable business
//! state an operation is made against. Each item has a gap-free revision (every change is the
//! next one), a state, an accountable owner and an approved scope — which actions, devices
//! and how many cost units its operations may use. An operation naming `work_ref` is refused
//! with `STALE_REVISION` when the item has moved past the revision it names, and with
//! `WORK_SCOPE_EXCEEDED` / `COST_CEILING_EXCEEDED` outside the approved scope
//! (`work::decide::admits`). Closing an item (completed or cancelled) records its operations;
//! retention retires a closed item one horizon after it closed (`crate::retention`).

use serde::{Deserialize, Serialize};

use crate::reason::ReasonCode;
use crate::rejection::{validate_text, Rejection, DISPLAY_NAME_BYTES_MAX, NOTE_BYTES_MAX};

/// Longest work id (`work_ref.id`).
pub const WORK_ID_BYTES_MAX: usize = 64;
/// Work items a tenant holds at once: open ones, and closed ones until retention retires them
/// (`crate::retention`; before ledger version 19, until the tenant is purged).
pub const WORK_ITEMS_PER_TENANT_MAX: usize = 10_000;
/// Operations one work item may carry (its record lists them); beyond, create another item.
pub const WORK_OPERATIONS_MAX: usize = 1_000;
/// Actions and devices one approved scope may name.
pub const WORK_SCOPE_ENTRIES_MAX: usize = 64;
/// The scope a principal needs to read work items through MCP.
pub const WORK_READ_SCOPE: &str = "work:read";
/// The scope a principal needs to create and change work items through MCP (`work.create`,
/// `work.update`; the ledger re-checks it on the principal's behalf).
pub const WORK_WRITE_SCOPE: &str = "work:write";

/// Where a work item stands. Only an open item takes operations or changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkState {
    Open,
    Completed,
    Cancelled,
}

impl WorkState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkState::Open => "open",
            WorkState::Completed => "completed",
            WorkState::Cancelled => "cancelled",
        }
    }
}

/// What a work item allows its operations: these catalog actions, these devices (by id; an
/// operation that drives a device must name one of them), and at most `cost_ceiling` cost
/// units over all its operations (none: no ceiling of its own).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkScopeV1 {
    pub actions: Vec<String>,
    #[serde(default)]
    pub devices: Vec<String>,
    #[serde(default)]
    pub cost_ceiling: Option<u64>,
}

impl WorkScopeV1 {
    /// At least one action, at most [`WORK_SCOPE_ENTRIES_MAX`] actions and devices, no empty
    /// or overlong entry; sorted and without duplicates afterwards.
    pub fn validated(mut self) -> Result<WorkScopeV1, Rejection> {
        if self.actions.is_empty() {
            return Err(invalid("an approved scope names at least one action"));
        }
        for list in [&mut self.actions, &mut self.devices] {
            if list.len() > WORK_SCOPE_ENTRIES_MAX {
                return Err(invalid(format!("at most {WORK_SCOPE_ENTRIES_MAX} actions and devices in a scope")));
            }
            if list.iter().any(|a| a.is_empty() || a.len() > WORK_ID_BYTES_MAX * 2) {
                return Err(invalid("scope entries are 1..=128 bytes"));
            }
            list.sort();
            list.dedup();
        }
        Ok(self)
    }
}

/// One operation of a work item, as the item's record lists it when it closes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkOperationV1 {
    pub operation_id: String,
    pub state: crate::operation::OperationState,
}

/// A work item as the ledger holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkItem {
    pub id: String,
    pub tenant_id: String,
    pub title: String,
    /// Who answers for it (a person or team; free text).
    pub owner: String,
    pub state: WorkState,
    /// Gap-free from 1: every change is the next revision.
    pub revision: u64,
    pub scope: WorkScopeV1,
    /// Cost units of the operations made against it so far.
    pub cost_used: u64,
    /// Its operations, in submission order (at most [`WORK_OPERATIONS_MAX`]).
    pub operations: Vec<String>,
    /// Why it was last changed or closed.
    pub note: String,
    /// Who made the last change (`operator`, or a principal id).
    pub updated_by: String,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
}

/// A change to a work item: the fields given replace the item's, and the revision moves on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkChangeV1 {
    pub title: Option<String>,
    pub owner: Option<String>,
    pub scope: Option<WorkScopeV1>,
    /// `completed` or `cancelled` closes it (final).
    pub state: Option<WorkState>,
    pub note: Option<String>,
}

fn invalid(message: impl Into<String>) -> Rejection {
    Rejection::new(ReasonCode::INPUT_INVALID, message)
}

/// A work id: 1..=[`WORK_ID_BYTES_MAX`] bytes of `[A-Za-z0-9._:-]` (it appears in URIs).
pub fn validate_work_id(id: &str) -> Result<(), Rejection> {
    let ok = !id.is_empty()
        && id.len() <= WORK_ID_BYTES_MAX
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(invalid(format!("a work id is 1..={WORK_ID_BYTES_MAX} characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'")))
    }
}

/// Title and owner: 1..=[`DISPLAY_NAME_BYTES_MAX`] bytes; a note at most [`NOTE_BYTES_MAX`].
pub fn validate_texts(title: Option<&str>, owner: Option<&str>, note: Option<&str>) -> Result<(), Rejection> {
    for (field, value) in [("title", title), ("owner", owner)] {
        if value.is_some_and(|v| v.trim().is_empty()) {
            return Err(invalid(format!("{field} must not be empty")));
        }
        validate_text(field, value, DISPLAY_NAME_BYTES_MAX)?;
    }
    validate_text("note", note, NOTE_BYTES_MAX)
}

pub mod decide;
mod fold;
mod query;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_and_ids_are_bounded_and_normalized() {
        let scope = WorkScopeV1 { actions: vec!["b".into(), "a".into(), "b".into()], ..Default::default() };
        assert_eq!(scope.validated().unwrap().actions, ["a", "b"]);
        assert!(WorkScopeV1::default().validated().is_err(), "an empty scope allows nothing: refused");
        let many = WorkScopeV1 { actions: (0..65).map(|i| i.to_string()).collect(), ..Default::default() };
        assert!(many.validated().is_err());
        assert!(validate_work_id("wo-1042").is_ok());
        for bad in ["", "a/b", "x y", &"w".repeat(65)] {
            assert!(validate_work_id(bad).is_err(), "{bad:?}");
        }
        assert!(validate_texts(Some(" "), None, None).is_err());
    }
}

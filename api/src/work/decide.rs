//! Work items (SPEC D12): operators (and principals through the admin surfaces) create and
//! revise them; every change is the item's next revision; an operation naming one is admitted
//! only at its current revision and within its approved scope ([`admits`]).

use crate::decide::prelude::*;
use crate::operation::OperationSpecV1;
use crate::work::*;

pub(crate) fn decide(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    match cmd {
        Command::CreateWork { tenant_id, work_id, title, owner, scope, by } => {
            active(state, tenant_id)?;
            validate_work_id(work_id)?;
            validate_texts(Some(title), Some(owner), None)?;
            let scope = scope.clone().validated()?;
            devices_exist(state, tenant_id, &scope)?;
            if state.work(tenant_id, work_id).is_some() {
                return Err(Rejection::new(ReasonCode::WORK_ALREADY_EXISTS, format!("work item '{work_id}' exists")));
            }
            if state.work_count(tenant_id) >= WORK_ITEMS_PER_TENANT_MAX as u64 {
                let msg = format!("a tenant holds at most {WORK_ITEMS_PER_TENANT_MAX} work items");
                return Err(Rejection::new(ReasonCode::QUOTA_EXCEEDED, msg));
            }
            Ok(vec![Event::WorkCreatedV1 {
                tenant_id: tenant_id.clone(),
                work_id: work_id.clone(),
                title: title.clone(),
                owner: owner.clone(),
                scope,
                by: by.clone(),
            }])
        }
        Command::ReviseWork { tenant_id, work_id, expected_revision, change, by } => {
            active(state, tenant_id)?;
            let item = find(state, tenant_id, work_id)?;
            open(&item)?;
            if let Some(expected) = expected_revision.filter(|r| *r != item.revision) {
                return Err(stale(&item, expected));
            }
            validate_texts(change.title.as_deref(), change.owner.as_deref(), change.note.as_deref())?;
            let mut change = change.clone();
            if let Some(scope) = change.scope.take() {
                let scope = scope.validated()?;
                devices_exist(state, tenant_id, &scope)?;
                change.scope = Some(scope);
            }
            if change.state == Some(WorkState::Open) {
                change.state = None; // it is open: no change
            }
            if change.title.is_none() && change.owner.is_none() && change.scope.is_none() && change.state.is_none() {
                return Err(Rejection::new(
                    ReasonCode::INPUT_INVALID,
                    "nothing to change: give a title, owner, scope or a closing state",
                ));
            }
            // Closing records the item's operations as they stand.
            let operations = match change.state {
                Some(_) => item
                    .operations
                    .iter()
                    .filter_map(|id| state.operation(tenant_id, id))
                    .map(|op| WorkOperationV1 { operation_id: op.spec.operation_id.clone(), state: op.state })
                    .collect(),
                None => Vec::new(),
            };
            Ok(vec![Event::WorkRevisedV1 {
                tenant_id: tenant_id.clone(),
                work_id: work_id.clone(),
                revision: item.revision + 1,
                change,
                by: by.clone(),
                operations,
            }])
        }
        Command::OnBehalfOf { authority_ref, command } => {
            crate::decide::on_behalf_of(state, authority_ref, command, now)
        }
        _ => Err(misrouted(cmd)),
    }
}

fn find<'a>(
    state: &'a LedgerState,
    tenant_id: &str,
    work_id: &str,
) -> Result<std::borrow::Cow<'a, WorkItem>, Rejection> {
    state
        .work(tenant_id, work_id)
        .ok_or_else(|| Rejection::new(ReasonCode::WORK_NOT_FOUND, format!("no work item '{work_id}'")))
}

fn open(item: &WorkItem) -> Result<(), Rejection> {
    if item.state == WorkState::Open {
        return Ok(());
    }
    let msg = format!("work item '{}' is {} (revision {})", item.id, item.state.as_str(), item.revision);
    Err(Rejection::new(ReasonCode::WORK_STATE_CONFLICT, msg))
}

fn stale(item: &WorkItem, presented: u64) -> Rejection {
    Rejection::new(
        ReasonCode::STALE_REVISION,
        format!(
            "work item '{}' is at revision {}, not {presented}: read it again and decide on the current revision",
            item.id, item.revision
        ),
    )
}

fn devices_exist(state: &LedgerState, tenant_id: &str, scope: &WorkScopeV1) -> Result<(), Rejection> {
    let devices = state.devices.get(tenant_id);
    match scope.devices.iter().find(|d| devices.is_none_or(|m| !m.contains_key(*d))) {
        Some(d) => Err(Rejection::new(ReasonCode::DEVICE_NOT_FOUND, format!("no device '{d}' for the scope"))),
        None => Ok(()),
    }
}

/// An operation `spec` (its cost already the catalog's) naming a work item is admitted only
/// while the item is open, at the item's current revision, for an action and device its
/// approved scope names, within its cost ceiling and its operation bound.
pub(crate) fn admits(state: &LedgerState, tenant_id: &str, spec: &OperationSpecV1) -> Result<(), Rejection> {
    let Some(work_ref) = &spec.work_ref else { return Ok(()) };
    let item = find(state, tenant_id, &work_ref.id)?;
    open(&item)?;
    if work_ref.revision != item.revision {
        return Err(stale(&item, work_ref.revision));
    }
    let outside = |what: String| {
        Rejection::new(
            ReasonCode::WORK_SCOPE_EXCEEDED,
            format!("{what} is outside the approved scope of work item '{}' (revision {})", item.id, item.revision),
        )
    };
    if !item.scope.actions.contains(&spec.action) {
        return Err(outside(format!("action '{}'", spec.action)));
    }
    if let Some(device) = spec.device_id.as_ref().filter(|d| !item.scope.devices.contains(d)) {
        let name = state.devices.get(tenant_id).and_then(|m| m.get(device)).map_or(device.as_str(), |d| &d.name);
        return Err(outside(format!("device '{name}'")));
    }
    if let Some(ceiling) = item.scope.cost_ceiling.filter(|c| item.cost_used + spec.cost_units > *c) {
        return Err(Rejection::new(
            ReasonCode::COST_CEILING_EXCEEDED,
            format!(
                "work item '{}' allows {ceiling} cost units: {} are used and this action costs {}",
                item.id, item.cost_used, spec.cost_units
            ),
        ));
    }
    if item.operations.len() >= WORK_OPERATIONS_MAX {
        let msg = format!("work item '{}' carries {WORK_OPERATIONS_MAX} operations, its most", item.id);
        return Err(Rejection::new(ReasonCode::QUOTA_EXCEEDED, msg));
    }
    Ok(())
}

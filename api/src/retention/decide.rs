//! `Command::ApplyRetention` and `Command::ApplyRetentionV2`: the records of a tenant whose
//! retention ran out by ledger time `now` (see `crate::retention` for the rules), oldest first,
//! at most [`retired_per_entry`] of each kind per entry.

use crate::cold::Aging;
use crate::decide::prelude::*;
use crate::retention::{horizon_ms, retired_per_entry, retires_works};

/// The ids whose time (plus `after_ms`) has come, oldest first, at most `limit`.
fn due_ids(
    index: &std::collections::BTreeMap<String, std::collections::BTreeSet<(u64, String)>>,
    tenant_id: &str,
    after_ms: u64,
    now: u64,
    limit: usize,
) -> Vec<String> {
    index.get(tenant_id).map_or_else(Vec::new, |set| {
        set.iter()
            .take_while(|(at, _)| at.saturating_add(after_ms) <= now)
            .take(limit)
            .map(|(_, id)| id.clone())
            .collect()
    })
}

pub fn decide(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    let tenant_id = cmd.stream();
    let tenant = existing(state, tenant_id)?;
    let h = horizon_ms(state, &tenant.id).unwrap_or(u64::MAX);
    let ix = &state.index;
    let t = tenant_id.to_string();
    let mut events = Vec::new();
    let limit = retired_per_entry(state.ledger_version);
    let mut compacted = state.cold.due(tenant_id, Aging::Finished, h, now, limit);
    // Reported effects nobody decided within a horizon: only from ledger version 15 on.
    if matches!(cmd, Command::ApplyRetentionV2 { .. }) {
        compacted.extend(state.cold.due(tenant_id, Aging::Reported, h, now, limit));
    }
    if !compacted.is_empty() {
        events.push(Event::OperationsCompactedV1 { tenant_id: t.clone(), operation_ids: compacted });
    }
    let released = state.cold.due(tenant_id, Aging::Compacted, h.saturating_mul(2), now, limit);
    if !released.is_empty() {
        events.push(Event::BindingsReleasedV1 { tenant_id: t.clone(), operation_ids: released });
    }
    let jtis = state.cold.due_in_id_order(tenant_id, Aging::Tokens, h, now, limit);
    let enrollments = due_ids(&ix.enrollment_expiry, tenant_id, h, now, limit);
    if !jtis.is_empty() || !enrollments.is_empty() {
        events.push(Event::CredentialsRetiredV1 { tenant_id: t.clone(), jtis, enrollments });
    }
    if retires_works(state.ledger_version) {
        let work_ids = state.cold.due(tenant_id, Aging::Works, h, now, limit);
        if !work_ids.is_empty() {
            events.push(Event::WorksRetiredV1 { tenant_id: t, work_ids });
        }
    }
    Ok(events)
}

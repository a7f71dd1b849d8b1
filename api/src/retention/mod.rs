//! Retention by ledger time (SPEC L9, D7): what the ledger keeps of a tenant, and for how long,
//! decided by `Command::ApplyRetention` at an entry's stamp, so every replica drops the same
//! records at the same index. The horizon is the tenant's `idempotency_retention_s` (at least
//! 24 h):
//!
//! - a **finished operation** (accepted, rejected, expired, failed, cancelled) keeps its whole
//!   record for one horizon after it finished; then it is **compacted** to its binding — the
//!   record without its input, input requests, answers, preconditions, observations and
//!   transition history (`Operation::binding`) — which still answers a replay with the original outcome
//!   and refuses the key for another payload (`IDEMPOTENCY_KEY_REUSED`);
//! - an operation whose **effect was reported** and that nobody accepted or rejected within one
//!   horizon of the report is compacted the same way (`Command::ApplyRetentionV2`, ledger
//!   version 15): its binding answers a replay with `effect_reported`, it leaves the operator's
//!   queue, and it can no longer be decided. One whose **effect is unknown** is kept whole until
//!   someone resolves it: it holds its device, and it is a human's to reconcile;
//! - the **binding** is released one more horizon later: the key is free again;
//! - a **token record** goes one horizon after it expired (an expired token is refused by its
//!   `exp` alone; the record served revocation and listing while it mattered);
//! - an **enrollment** goes one horizon after it expired (used or not: a used one always
//!   expires later than it was used);
//! - a **closed work item** (completed or cancelled) goes one horizon after it closed, from
//!   ledger version 19 on ([`retires_works`]): its changes stay in the tenant's audit trail, and
//!   its id is free again. An item is its own record, not a fence: an operation that names a
//!   retired item is refused with `WORK_NOT_FOUND`, and one that names a new item of the same id
//!   is admitted only at that item's revision and within its approved scope.
//!
//! Each `ApplyRetention` entry drops at most [`retired_per_entry`] records of each kind; the
//! leader's reaper submits another while more are due. Evidence has its own rule (the tenant's
//! audit retention, `crate::evidence`), audit records theirs (`crate::audit`), the raw event log
//! [`EVENT_LOG_KEPT_MS`].

use serde::{Deserialize, Serialize};

use crate::cold::Aging;
use crate::state::LedgerState;

/// Most records of each kind one `ApplyRetention` entry drops, from ledger version 18 in force:
/// every replica applies an entry while it holds the state, so every write and read that needs
/// the state waits behind it; a thousand operations compacted and a thousand bindings released
/// held a node's state for 160–230 ms over an hour's million operations on two shared cores
/// (docs/performance.md). A quarter of that is still far more per entry than operations finish
/// per second.
pub const RETIRED_PER_ENTRY: usize = 250;

/// [`RETIRED_PER_ENTRY`] before ledger version 18.
pub const RETIRED_PER_ENTRY_BEFORE_18: usize = 1_000;

/// Most records of each kind one retention entry drops under `ledger_version` in force.
pub fn retired_per_entry(ledger_version: u32) -> usize {
    if ledger_version >= 18 {
        RETIRED_PER_ENTRY
    } else {
        RETIRED_PER_ENTRY_BEFORE_18
    }
}

/// Whether retention retires closed work items under `ledger_version` in force: from 19 on, a
/// work item that closes gets its time row ([`crate::cold::Row::WorkClosed`]), and the items
/// closed before get theirs when version 19 comes into force
/// (`LedgerState::ledger_version_raised`), so every replica retires the same items.
pub fn retires_works(ledger_version: u32) -> bool {
    ledger_version >= 19
}

/// How long the raw event log (each node's `events` column family, what watchers replay) keeps an
/// event, in ms of ledger time: every node drops older ones as it applies, so a watcher further
/// behind than this reloads a snapshot (REVISION_COMPACTED). The state, the audit trail and the
/// evidence keep their own retention; this log is only the feed.
pub const EVENT_LOG_KEPT_MS: u64 = 7 * 24 * 3600 * 1000;

/// The tenant's retention horizon in ms of ledger time.
pub fn horizon_ms(state: &LedgerState, tenant_id: &str) -> Option<u64> {
    Some(state.tenants.get(tenant_id)?.settings.idempotency_retention_s.saturating_mul(1000))
}

/// The earliest ledger time at which something of `tenant_id` is due for retention
/// (`reported`: counting reported effects nobody decided, which `ApplyRetentionV2` compacts).
pub fn next_due(state: &LedgerState, tenant_id: &str, reported: bool) -> Option<u64> {
    let h = horizon_ms(state, tenant_id)?;
    let first = |m: &std::collections::BTreeMap<String, std::collections::BTreeSet<(u64, String)>>| {
        m.get(tenant_id).and_then(|s| s.first()).map(|(at, _)| *at)
    };
    let ix = &state.index;
    [
        state.cold.oldest(tenant_id, Aging::Finished).map(|at| at.saturating_add(h)),
        state.cold.oldest(tenant_id, Aging::Reported).filter(|_| reported).map(|at| at.saturating_add(h)),
        state.cold.oldest(tenant_id, Aging::Compacted).map(|at| at.saturating_add(h.saturating_mul(2))),
        state.cold.oldest(tenant_id, Aging::Tokens).map(|at| at.saturating_add(h)),
        first(&ix.enrollment_expiry).map(|at| at.saturating_add(h)),
        state.cold.oldest(tenant_id, Aging::Works).map(|at| at.saturating_add(h)),
    ]
    .into_iter()
    .flatten()
    .min()
}

/// What a tenant's ledger state holds (`GET /v1/tenants/{t}/storage`, `writ admin tenant
/// storage`): record counts and the bytes the node keeps beside the state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantStorageV1 {
    /// Whole operation records (live and finished within the retention horizon).
    pub operations: u64,
    /// Of those, waiting or attempting.
    pub operations_live: u64,
    /// Compacted operations: bindings that still answer replays.
    pub bindings: u64,
    /// Idempotency keys bound (operations plus bindings).
    pub idempotency_keys: u64,
    /// Transitions kept in operation histories.
    pub transitions: u64,
    pub tokens: u64,
    pub enrollments: u64,
    pub work_items: u64,
    pub proposals: u64,
    /// Retained audit records (their bodies are the node's).
    pub audit_records: u64,
    pub evidence_blobs: u64,
    pub evidence_bytes: u64,
    /// Bytes of the tenant's operations, bindings, histories, idempotency keys, tokens and
    /// enrollments: in memory (live operations, enrollments) or as cold rows.
    pub state_bytes: u64,
    /// The tenant's retention horizon (its idempotency retention).
    pub retention_horizon_s: u64,
    /// Ledger time at which retention next drops something (none: nothing is due).
    pub next_retention_ms: Option<u64>,
}

/// The storage figures of `tenant_id`.
pub fn storage(state: &LedgerState, tenant_id: &str) -> TenantStorageV1 {
    fn len<K: Ord, V>(m: &std::collections::BTreeMap<String, std::collections::BTreeMap<K, V>>, t: &str) -> u64 {
        m.get(t).map_or(0, |m| m.len() as u64)
    }
    fn bytes<T: Serialize>(v: &T) -> u64 {
        crate::encode(v).map_or(0, |b| b.len() as u64)
    }
    let empty_ops = std::collections::BTreeMap::new();
    let ops = state.operations.get(tenant_id).unwrap_or(&empty_ops);
    let cold = state.cold.tenants.get(tenant_id).cloned().unwrap_or_default();
    let history = state.history.get(tenant_id);
    let state_bytes = bytes(&ops)
        + cold.bytes
        + history.map_or(0, |h| bytes(&h))
        + state.enrollments.get(tenant_id).map_or(0, |e| bytes(&e));
    TenantStorageV1 {
        operations: ops.len() as u64 + cold.operations,
        operations_live: state.live_operations.get(tenant_id).map_or(0, |l| l.len() as u64),
        bindings: cold.bindings,
        idempotency_keys: cold.keys,
        transitions: history.map_or(0, |h| h.values().map(|t| t.len() as u64).sum::<u64>()) + cold.transitions,
        tokens: cold.tokens,
        enrollments: len(&state.enrollments, tenant_id),
        work_items: state.work_count(tenant_id),
        proposals: len(&state.proposals, tenant_id),
        audit_records: state.audit.get(tenant_id).map_or(0, |a| a.len()),
        evidence_blobs: cold.evidence,
        evidence_bytes: cold.evidence_bytes,
        state_bytes,
        retention_horizon_s: horizon_ms(state, tenant_id).unwrap_or(0) / 1000,
        next_retention_ms: next_due(state, tenant_id, true),
    }
}

/// Records the ledger holds across all tenants, by kind (the node's `writ_ledger_records`
/// gauge; per tenant they are in [`storage`], since tenant ids are not a bounded label).
pub fn record_counts(state: &LedgerState) -> [(&'static str, u64); 8] {
    fn total<K, V>(m: &std::collections::BTreeMap<String, std::collections::BTreeMap<K, V>>) -> u64 {
        m.values().map(|m| m.len() as u64).sum()
    }
    let cold = |f: fn(&crate::cold::ColdTenant) -> u64| state.cold.tenants.values().map(f).sum::<u64>();
    [
        ("operations", total(&state.operations) + cold(|c| c.operations)),
        ("bindings", cold(|c| c.bindings)),
        ("idempotency_keys", cold(|c| c.keys)),
        ("tokens", cold(|c| c.tokens)),
        ("enrollments", total(&state.enrollments)),
        ("work_items", total(&state.works) + state.works_closed.values().sum::<u64>()),
        ("evidence_blobs", cold(|c| c.evidence)),
        ("audit_records", state.audit.values().map(|a| a.len()).sum()),
    ]
}

pub mod decide;
mod fold;

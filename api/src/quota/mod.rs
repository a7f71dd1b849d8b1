//! Request admission quotas (SPEC D9), enforced across every edge replica without a ledger
//! write per request: an edge leases a *slice* of a principal's per-minute allowance from the
//! ledger (`LeaseRequestQuota`), spends it locally, and leases again when it runs out. The
//! ledger grants at most what is left in the current window of both the tenant's limit
//! (`settings.quotas.requests_per_minute`) and the principal's (`PrincipalQuotasV1`), so the
//! sum of all slices of a window never exceeds either limit. Windows are fixed minutes of ledger
//! time; a slice dies with its window.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::reason::ReasonCode;
use crate::rejection::Rejection;

/// Length of a quota window (ledger time).
pub const WINDOW_MS: u64 = 60_000;
/// Largest slice one lease asks for.
pub const SLICE_MAX: u64 = 100;

/// Limits of one principal (on top of its tenant's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalQuotasV1 {
    /// Requests per minute across all edges; `None`: only the tenant's limit applies.
    #[serde(default)]
    pub requests_per_minute: Option<u64>,
}

impl PrincipalQuotasV1 {
    pub fn validate(&self) -> Result<(), Rejection> {
        if self.requests_per_minute == Some(0) {
            return Err(Rejection::new(
                ReasonCode::INPUT_INVALID,
                "requests_per_minute must be at least 1 (omit it for no limit)",
            ));
        }
        Ok(())
    }
}

/// Limits of one principal (on top of its tenant's), request and operation quotas (SPEC D9).
/// Replaces [`PrincipalQuotasV1`] (requests only), which still replays as this.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalQuotasV2 {
    /// Requests per minute across all edges; `None`: only the tenant's limit applies (same for
    /// each field).
    #[serde(default)]
    pub requests_per_minute: Option<u64>,
    /// Operations recorded per minute (ledger time).
    #[serde(default)]
    pub operations_per_minute: Option<u64>,
    /// Cost units of recorded operations per day (ledger time).
    #[serde(default)]
    pub cost_units_per_day: Option<u64>,
    /// Operations waiting or attempting at once.
    #[serde(default)]
    pub concurrent_operations: Option<u64>,
}

impl PrincipalQuotasV2 {
    /// The limits a principal gets when its creation names none: a fifth of a fresh tenant's
    /// requests and half its operations (`crate::settings::QuotasV1::fresh_tenant`), so one
    /// principal cannot use up its tenant alone. `{}` at creation means none of its own.
    pub fn fresh_principal() -> PrincipalQuotasV2 {
        PrincipalQuotasV2 {
            requests_per_minute: Some(12_000),
            operations_per_minute: Some(3_000),
            cost_units_per_day: None,
            concurrent_operations: Some(256),
        }
    }

    pub fn validate(&self) -> Result<(), Rejection> {
        for (name, v) in [
            ("requests_per_minute", self.requests_per_minute),
            ("operations_per_minute", self.operations_per_minute),
            ("cost_units_per_day", self.cost_units_per_day),
            ("concurrent_operations", self.concurrent_operations),
        ] {
            if v == Some(0) {
                return Err(Rejection::new(
                    ReasonCode::INPUT_INVALID,
                    format!("{name} must be at least 1 (omit it for no limit)"),
                ));
            }
        }
        Ok(())
    }
}

impl From<PrincipalQuotasV1> for PrincipalQuotasV2 {
    fn from(q: PrincipalQuotasV1) -> Self {
        PrincipalQuotasV2 { requests_per_minute: q.requests_per_minute, ..Default::default() }
    }
}

/// What the ledger granted in the current window of one tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaWindow {
    /// Window number (ledger ms / [`WINDOW_MS`]).
    pub window: u64,
    pub tenant_granted: u64,
    pub principal_granted: BTreeMap<String, u64>,
}

/// Length of the cost-units window (ledger time).
pub const DAY_MS: u64 = 24 * 3600 * 1000;

/// What one tenant's recorded operations used of the current minute and day (ledger time),
/// counted by `SubmitOperation` events (a replay records nothing and costs nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationWindow {
    pub minute: u64,
    pub operations: u64,
    pub day: u64,
    pub cost_units: u64,
}

impl OperationWindow {
    /// (operations this minute, cost units today) at ledger time `now`.
    pub fn usage(&self, now: u64) -> (u64, u64) {
        let ops = if self.minute == now / WINDOW_MS { self.operations } else { 0 };
        let cost = if self.day == now / DAY_MS { self.cost_units } else { 0 };
        (ops, cost)
    }

    /// Counts one operation of `cost_units` recorded at `at_ms`.
    pub fn record(&mut self, at_ms: u64, cost_units: u64) {
        let (ops, cost) = self.usage(at_ms);
        *self = OperationWindow {
            minute: at_ms / WINDOW_MS,
            operations: ops + 1,
            day: at_ms / DAY_MS,
            cost_units: cost + cost_units,
        };
    }
}

/// The slice an edge asks for under `limit`: a tenth, between 1 and [`SLICE_MAX`].
pub fn slice_size(limit: u64) -> u64 {
    (limit / 10).clamp(1, SLICE_MAX)
}

/// How many of `wanted` can be granted in `window` given the limits and what was granted.
pub fn grantable(
    granted: Option<&QuotaWindow>,
    window: u64,
    principal_id: &str,
    tenant_limit: Option<u64>,
    principal_limit: Option<u64>,
    wanted: u64,
) -> u64 {
    let current = granted.filter(|g| g.window == window);
    let tenant_used = current.map_or(0, |g| g.tenant_granted);
    let principal_used = current.and_then(|g| g.principal_granted.get(principal_id)).copied().unwrap_or(0);
    let mut n = wanted;
    if let Some(l) = tenant_limit {
        n = n.min(l.saturating_sub(tenant_used));
    }
    if let Some(l) = principal_limit {
        n = n.min(l.saturating_sub(principal_used));
    }
    n
}

pub mod decide;
mod fold;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_never_exceed_either_limit_in_a_window() {
        let mut w = QuotaWindow { window: 7, ..Default::default() };
        let mut total = 0;
        for _ in 0..50 {
            let g = grantable(Some(&w), 7, "p", Some(25), Some(40), 3);
            w.tenant_granted += g;
            *w.principal_granted.entry("p".into()).or_default() += g;
            total += g;
        }
        assert_eq!(total, 25);
        assert_eq!(grantable(Some(&w), 7, "q", Some(25), None, 3), 0, "the tenant limit binds every principal");
        assert_eq!(grantable(Some(&w), 8, "p", Some(25), Some(40), 3), 3, "a new window starts afresh");
        assert_eq!(grantable(None, 8, "p", None, Some(2), 3), 2);
        assert_eq!(slice_size(5), 1);
        assert_eq!(slice_size(600), 60);
        assert_eq!(slice_size(1_000_000), SLICE_MAX);
    }
}

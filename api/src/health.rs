//! The health of a tenant's tools as states, derived from what the ledger holds: for a tool an
//! executor performs, whether an executor that can reach a device of its class is connected
//! (as its edges said, `crate::device::ExecutorPresenceV1`); for an upstream's tool, whether it
//! is pinned, whether edges' fuses of its upstream are open, and whether its tools drifted. The
//! same answer on every replica at the same revision (time is the caller's).

use serde::{Deserialize, Serialize};

use crate::catalog::{CatalogActionV1, Execution};
use crate::device::PRESENCE_STALE_MS;
use crate::state::LedgerState;

/// A tool's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolState {
    /// What serves it is there: the edge itself, a connected executor, a pinned upstream.
    Connected,
    /// It is served, but not as it should be: an executor whose edge stopped confirming it, an
    /// upstream whose tools changed and wait for review.
    Degraded,
    /// Edges refuse it until a probe succeeds: an open fuse of its upstream.
    Fused,
    /// Nothing can serve it now: no executor of its devices is connected, its upstream or its
    /// pinned tool is missing.
    Unreachable,
}

impl ToolState {
    /// Every state, in declaration order (`state as usize` is its index).
    pub const ALL: [ToolState; 4] =
        [ToolState::Connected, ToolState::Degraded, ToolState::Fused, ToolState::Unreachable];

    pub fn as_str(self) -> &'static str {
        match self {
            ToolState::Connected => "connected",
            ToolState::Degraded => "degraded",
            ToolState::Fused => "fused",
            ToolState::Unreachable => "unreachable",
        }
    }
}

/// One tool of the tenant's current catalog, with its state and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolHealthV1 {
    pub tool: String,
    pub state: ToolState,
    pub why: String,
}

/// `GET /v1/tenants/{t}/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantHealth {
    pub catalog_version: Option<u64>,
    pub tools: Vec<ToolHealthV1>,
}

/// The health of every tool of `tenant_id`'s current catalog at time `now_ms`.
pub fn tenant_health(s: &LedgerState, tenant_id: &str, now_ms: u64) -> TenantHealth {
    let Some(catalog) = s.catalog(tenant_id, None) else {
        return TenantHealth { catalog_version: None, tools: Vec::new() };
    };
    let tools = catalog.catalog.actions.iter().map(|a| tool_health(s, tenant_id, a, now_ms)).collect();
    TenantHealth { catalog_version: Some(catalog.version), tools }
}

fn tool_health(s: &LedgerState, tenant_id: &str, action: &CatalogActionV1, now_ms: u64) -> ToolHealthV1 {
    let (state, why) = match &action.execution {
        Execution::Builtin(_) => (ToolState::Connected, "served by the edge itself".to_string()),
        Execution::Upstream(target) | Execution::UpstreamOperation(target) => upstream_health(s, tenant_id, target),
        Execution::Read | Execution::Operation | Execution::Task => {
            executor_health(s, tenant_id, action.device_class.as_deref(), now_ms)
        }
    };
    ToolHealthV1 { tool: action.id.clone(), state, why }
}

/// An executor-performed tool: the executors that serve a device of `class` (any of the
/// tenant's, for a tool without a device class), by what their edges last said.
fn executor_health(s: &LedgerState, tenant_id: &str, class: Option<&str>, now_ms: u64) -> (ToolState, String) {
    let devices = s.devices.get(tenant_id);
    let serves = |x: &crate::device::Executor| {
        class.is_none()
            || x.device_ids
                .iter()
                .any(|d| devices.and_then(|m| m.get(d)).is_some_and(|d| Some(d.device_class.as_str()) == class))
    };
    let presence = s.executor_presence.get(tenant_id);
    let (mut fresh, mut stale, mut enrolled) = (0, 0, 0);
    for x in s.executors.get(tenant_id).into_iter().flat_map(|m| m.values()) {
        if x.revoked_at_ms.is_some() || !serves(x) {
            continue;
        }
        enrolled += 1;
        match presence.and_then(|m| m.get(&x.id)).filter(|p| p.connected) {
            Some(p) if now_ms.saturating_sub(p.confirmed_at_ms) <= PRESENCE_STALE_MS => fresh += 1,
            Some(_) => stale += 1,
            None => {}
        }
    }
    match (fresh, stale) {
        (0, 0) => (ToolState::Unreachable, format!("none of its {enrolled} executors is connected")),
        (0, _) => (ToolState::Degraded, format!("{stale} executors' edges stopped confirming them")),
        _ => (ToolState::Connected, format!("{fresh} of its {enrolled} executors connected")),
    }
}

/// An upstream's tool (`<upstream>/<tool>`): pinned, fused, drifted or missing.
fn upstream_health(s: &LedgerState, tenant_id: &str, target: &str) -> (ToolState, String) {
    let Ok((name, tool)) = crate::catalog::parse_upstream_target(target) else {
        return (ToolState::Unreachable, format!("'{target}' names no upstream tool"));
    };
    let Some(u) = s.upstreams.get(tenant_id).and_then(|m| m.get(name)) else {
        return (ToolState::Unreachable, format!("no upstream '{name}'"));
    };
    let open = u.fuses.values().filter(|f| f.open).count();
    if open > 0 {
        return (ToolState::Fused, format!("open on {open} edges"));
    }
    if u.pinned.as_ref().and_then(|p| p.tool(tool)).is_none() {
        return (ToolState::Unreachable, format!("'{tool}' is not among {name}'s approved tools"));
    }
    match &u.pending {
        Some(_) => (ToolState::Degraded, format!("{name}'s tools changed and wait for review")),
        None => (ToolState::Connected, format!("pinned on {name}")),
    }
}

/// How many tools of active tenants are in each state at `now_ms` (the bounded aggregate a
/// metric can carry; a tool's own state is in [`tenant_health`]).
pub fn tools_by_health(s: &LedgerState, now_ms: u64) -> [(ToolState, u64); 4] {
    let mut counts = ToolState::ALL.map(|state| (state, 0u64));
    let active = s.tenants.values().filter(|t| t.state == crate::ledger::TenantState::Active);
    for tenant in active {
        for tool in tenant_health(s, &tenant.id, now_ms).tools {
            counts[tool.state as usize].1 += 1;
        }
    }
    counts
}

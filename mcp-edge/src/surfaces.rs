//! What the edge serves: `server/discover` and the tenant's catalog as tools, filtered by the
//! principal's effective scopes (an action the principal may not call is not listed at all).

use serde_json::{json, Value};
use writ_api::auth::Authority;
use writ_api::catalog::{Execution, Risk};
use writ_api::state::LedgerState;

use crate::jsonrpc::META_SERVER_INFO;
use crate::EdgeConfig;

/// How long clients may cache a tools list (private: it depends on the principal's scopes).
pub const TOOLS_TTL_MS: u64 = 5_000;

pub(crate) fn server_info() -> Value {
    json!({"name": "writ-edge", "version": env!("CARGO_PKG_VERSION")})
}

/// `server/discover`: the versions and capabilities this edge really serves.
pub fn discover(config: &EdgeConfig) -> Value {
    // Tool lists change when the tenant publishes a catalog: `subscriptions/listen` says so.
    let mut capabilities = json!({"tools": {"listChanged": true}, "resources": {},
                                  "extensions": {crate::tasks::EXTENSION: {}}});
    if config.fixtures_tenant.is_some() {
        capabilities["prompts"] = json!({"listChanged": true});
        capabilities["completions"] = json!({});
    }
    json!({
        "resultType": "complete",
        "supportedVersions": crate::legacy::supported_versions(),
        "capabilities": capabilities,
        "instructions": "Writ: tools are your tenant's catalog actions your token's scopes allow.",
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": {META_SERVER_INFO: server_info()},
    })
}

/// The pinned upstream tool an upstream action's `<upstream>/<tool>` names, if approved.
fn pinned_tool<'a>(
    state: &'a LedgerState,
    tenant_id: &str,
    target: &str,
) -> Option<&'a writ_api::upstream::UpstreamToolV1> {
    let (upstream, tool) = writ_api::upstream::parse_target(target).ok()?;
    state.upstream(tenant_id, upstream)?.pinned.as_ref()?.tool(tool)
}

/// The tools of `authority`: the newest catalog of its tenant, in id order, only the actions
/// whose scope it holds.
pub fn tools_for(state: &LedgerState, authority: &Authority) -> Vec<Value> {
    state
        .catalog(&authority.tenant_id, None)
        .map(|c| {
            c.catalog
                .actions
                .iter()
                .filter(|a| authority.require(&a.scope).is_ok())
                .map(|a| {
                    // An upstream action without a description of its own shows its pinned tool's.
                    let pinned =
                        a.execution.upstream_target().and_then(|target| pinned_tool(state, &authority.tenant_id, target));
                    let description = match (&pinned, a.description.is_empty()) {
                        (_, false) => a.description.clone(),
                        (Some(t), true) if !t.description.is_empty() => t.description.clone(),
                        _ => a.title.clone(),
                    };
                    let mut tool = json!({
                        "name": a.id,
                        "title": a.title,
                        "description": description,
                        "inputSchema": serde_json::from_str::<Value>(&a.input_schema).unwrap_or(json!({"type": "object"})),
                        "annotations": {
                            "readOnlyHint": !a.execution.is_operation(),
                            "destructiveHint": a.risk >= Risk::High,
                            "idempotentHint": a.idempotent,
                        },
                    });
                    // Operations may run as MCP tasks; `task` actions only as tasks.
                    match a.execution {
                        Execution::Task => tool["execution"] = json!({"taskSupport": "required"}),
                        Execution::Operation => tool["execution"] = json!({"taskSupport": "optional"}),
                        _ => {}
                    }
                    if let Some(out) = a.output_schema.as_deref().and_then(|s| serde_json::from_str::<Value>(s).ok()) {
                        tool["outputSchema"] = out;
                    }
                    tool
                })
                .collect()
        })
        .unwrap_or_default()
}

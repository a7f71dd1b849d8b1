//! What the state answers about this domain (lookups by id or name, pages), for queries and
//! for the rules.

use crate::state::LedgerState;

impl LedgerState {
    /// The upstream tool an edge performs operation `operation_id` with, while it waits for its
    /// attempt (`Execution::UpstreamOperation`).
    pub fn upstream_operation(&self, tenant_id: &str, operation_id: &str) -> Option<&str> {
        self.upstream_operations.get(tenant_id)?.get(operation_id).map(String::as_str)
    }

    /// A tenant's upstream by name.
    pub fn upstream(&self, tenant_id: &str, name: &str) -> Option<&crate::upstream::UpstreamV1> {
        self.upstreams.get(tenant_id)?.get(name)
    }
}

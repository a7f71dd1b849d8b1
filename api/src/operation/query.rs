//! What the state answers about this domain (lookups by id or name, pages), for queries and
//! for the rules.

use crate::operation::Operation;
use crate::state::{evidence_slot, scan_page, LedgerState};

impl LedgerState {
    /// A page of a tenant's operations matching `filter`, by id after `after`: at most `limit`,
    /// scanning at most [`crate::operation::OPERATIONS_SCAN_MAX`]; the cursor is the last id scanned
    /// when more may follow.
    pub fn list_operations(
        &self,
        tenant_id: &str,
        filter: &crate::operation::OperationFilter,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<Operation>, Option<String>) {
        let Some(ops) = self.operations.get(tenant_id) else { return (Vec::new(), None) };
        scan_page(ops, after, limit, crate::operation::OPERATIONS_SCAN_MAX, |op| filter.matches(op))
    }

    /// When the tenant's oldest evidence falls out of its audit retention (none without one).
    pub fn next_evidence_expiry(&self, tenant_id: &str) -> Option<u64> {
        let age_s = self.tenants.get(tenant_id)?.settings.audit_max_age_s?;
        let (oldest, _) = self.index.evidence_by_time.get(tenant_id)?.first()?;
        Some(oldest.saturating_add(age_s.saturating_mul(1000)))
    }

    /// An operation's evidence record by content hash ([`crate::dto::Query::GetEvidence`]).
    pub fn evidence_record(
        &self,
        tenant_id: &str,
        operation_id: &str,
        content_hash: &str,
    ) -> Result<&crate::evidence::EvidenceBlobV1, crate::Rejection> {
        self.evidence.get(tenant_id).and_then(|m| m.get(&evidence_slot(operation_id, content_hash))).ok_or_else(|| {
            let msg = format!("no evidence {content_hash} of operation '{operation_id}'");
            crate::Rejection::new(crate::ReasonCode::EVIDENCE_NOT_FOUND, msg)
        })
    }

    /// An operation by id: its whole record, or its binding once compacted
    /// ([`crate::retention`]).
    pub fn operation(&self, tenant_id: &str, operation_id: &str) -> Option<&Operation> {
        let whole = self.operations.get(tenant_id).and_then(|m| m.get(operation_id));
        whole.or_else(|| self.compacted.get(tenant_id)?.get(operation_id))
    }

    /// An operation's transitions, oldest first (empty for one recorded before histories were).
    pub fn operation_history(&self, tenant_id: &str, operation_id: &str) -> &[crate::operation::TransitionV1] {
        self.history.get(tenant_id).and_then(|m| m.get(operation_id)).map_or(&[], Vec::as_slice)
    }
}

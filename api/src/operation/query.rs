//! What the state answers about this domain (lookups by id or name, pages), for queries and
//! for the rules.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::cold::{ColdOperation, Row};
use crate::operation::{Operation, OperationState};
use crate::state::{merged_page, page_of, rows_to_scan, LedgerState, RowOrder};

impl LedgerState {
    /// A page of a tenant's operations matching `filter`, after the id `after` in the order cold
    /// rows keep ids ([`RowOrder`]: by length, then bytes): at most `limit`, scanning at most
    /// [`crate::operation::OPERATIONS_SCAN_MAX`]; the cursor is the last id scanned when more may
    /// follow.
    pub fn list_operations(
        &self,
        tenant_id: &str,
        filter: &crate::operation::OperationFilter,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<Operation>, Option<String>) {
        let scan = rows_to_scan(limit, crate::operation::OPERATIONS_SCAN_MAX);
        if filter.needs_attention {
            return self.attention_page(tenant_id, filter, after, limit, scan);
        }
        let cold = self.cold.operations(tenant_id, after, scan);
        let cold = cold.into_iter().map(|r| (r.op.spec.operation_id.clone(), r.op)).collect();
        let hot = self.operations.get(tenant_id).into_iter().flatten();
        let max = crate::operation::OPERATIONS_SCAN_MAX;
        merged_page(hot, cold, after, limit, scan, max, |op| filter.matches(op))
    }

    /// [`LedgerState::list_operations`] of what waits for a human, through its index (such an
    /// operation is never live), in the order of its rows.
    fn attention_page(
        &self,
        tenant_id: &str,
        filter: &crate::operation::OperationFilter,
        after: Option<&str>,
        limit: usize,
        scan: usize,
    ) -> (Vec<Operation>, Option<String>) {
        let ids = self.cold.attention(tenant_id, after, scan);
        let more = (ids.len() == scan).then(|| ids.last().cloned()).flatten();
        let ops: BTreeMap<RowOrder, Cow<'_, Operation>> =
            ids.into_iter().filter_map(|id| Some((RowOrder::of(&id), self.operation(tenant_id, &id)?))).collect();
        let max = crate::operation::OPERATIONS_SCAN_MAX;
        let (page, next) = page_of(ops.iter(), limit, max, |op| filter.matches(op));
        (page.into_iter().map(Cow::into_owned).collect(), next.cloned().map(RowOrder::id).or(more))
    }

    /// An operation no longer live, as its cold row, with the row's bytes.
    pub(crate) fn cold_row(&self, tenant_id: &str, operation_id: &str) -> Option<(ColdOperation, Vec<u8>)> {
        let bytes = self.cold.get(tenant_id, Row::Operation(operation_id))?;
        Some((crate::decode_unbounded(&bytes).expect("a cold operation row decodes"), bytes))
    }

    /// The id of the operation `principal_id`'s idempotency key is bound to.
    pub fn bound_operation(&self, tenant_id: &str, principal_id: &str, key: &str) -> Option<String> {
        let id = self.cold.get(tenant_id, Row::Key(&crate::state::idempotency_slot(principal_id, key)))?;
        String::from_utf8(id).ok()
    }

    /// Operations by state, live and not, by tenant (metrics).
    pub fn operations_by_state(&self) -> BTreeMap<String, BTreeMap<OperationState, u64>> {
        let mut all = self.index.by_state.clone();
        for (tenant, c) in self.cold.tenants.iter().filter(|(_, c)| !c.by_state.is_empty()) {
            let counts = all.entry(tenant.clone()).or_default();
            for (s, n) in &c.by_state {
                *counts.entry(*s).or_default() += n;
            }
        }
        all
    }

    /// When the tenant's oldest evidence falls out of its audit retention (none without one).
    pub fn next_evidence_expiry(&self, tenant_id: &str) -> Option<u64> {
        let age_s = self.tenants.get(tenant_id)?.settings.audit_max_age_s?;
        let (oldest, ..) = self.cold.evidence_by_time(tenant_id, 1).into_iter().next()?;
        Some(oldest.saturating_add(age_s.saturating_mul(1000)))
    }

    /// An operation's evidence record by content hash ([`crate::dto::Query::GetEvidence`]).
    pub fn evidence_record(
        &self,
        tenant_id: &str,
        operation_id: &str,
        content_hash: &str,
    ) -> Result<crate::evidence::EvidenceBlobV1, crate::Rejection> {
        let row = self.cold.get(tenant_id, Row::Evidence(operation_id, content_hash));
        row.map(|bytes| crate::decode_unbounded(&bytes).expect("an evidence row decodes")).ok_or_else(|| {
            let msg = format!("no evidence {content_hash} of operation '{operation_id}'");
            crate::Rejection::new(crate::ReasonCode::EVIDENCE_NOT_FOUND, msg)
        })
    }

    /// An operation by id: its whole record, or its binding once compacted
    /// ([`crate::retention`]).
    pub fn operation(&self, tenant_id: &str, operation_id: &str) -> Option<Cow<'_, Operation>> {
        match self.operations.get(tenant_id).and_then(|m| m.get(operation_id)) {
            Some(live) => Some(Cow::Borrowed(live)),
            None => self.cold_row(tenant_id, operation_id).map(|(row, _)| Cow::Owned(row.op)),
        }
    }

    /// An operation's whole record (live, or no longer live), not its binding: what commands
    /// about an operation act on.
    pub(crate) fn whole_operation(&self, tenant_id: &str, operation_id: &str) -> Option<Cow<'_, Operation>> {
        match self.operations.get(tenant_id).and_then(|m| m.get(operation_id)) {
            Some(live) => Some(Cow::Borrowed(live)),
            None => self
                .cold_row(tenant_id, operation_id)
                .filter(|(row, _)| !row.compacted)
                .map(|(row, _)| Cow::Owned(row.op)),
        }
    }

    /// An operation's transitions, oldest first (empty for one recorded before histories were,
    /// and for a compacted one).
    pub fn operation_history(&self, tenant_id: &str, operation_id: &str) -> Vec<crate::operation::TransitionV1> {
        match self.history.get(tenant_id).and_then(|m| m.get(operation_id)) {
            Some(steps) => steps.clone(),
            None => self.cold_row(tenant_id, operation_id).map(|(row, _)| row.history).unwrap_or_default(),
        }
    }
}

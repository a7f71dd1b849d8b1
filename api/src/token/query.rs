//! What the state answers about this domain (lookups by id or name, pages), for queries and
//! for the rules.

use std::collections::BTreeSet;

use crate::cold::Row;
use crate::state::{page_of, rows_to_scan, LedgerState};
use crate::token::Token;

impl LedgerState {
    /// A page of a tenant's token records (of one principal, if given), after the `jti`
    /// `after`, in the order of their rows, scanning at most [`crate::token::TOKENS_SCAN_MAX`];
    /// the cursor of the next page, when more may follow. Records hold no secret.
    pub fn list_tokens(
        &self,
        tenant_id: &str,
        principal_id: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<Token>, Option<String>) {
        let scan = rows_to_scan(limit, crate::token::TOKENS_SCAN_MAX);
        let rows: Vec<(String, Token)> =
            self.cold.tokens(tenant_id, after, scan).into_iter().map(|t| (t.record.jti.clone(), t)).collect();
        let of_principal = |t: &Token| principal_id.is_none_or(|p| t.record.principal_id == p);
        let (page, last) = page_of(rows.iter().map(|(jti, t)| (jti, t)), limit, scan - 1, of_principal);
        (page, last.cloned())
    }

    /// A token of a tenant by `jti`.
    pub fn token(&self, tenant_id: &str, jti: &str) -> Option<Token> {
        let bytes = self.cold.get(tenant_id, Row::Token(jti))?;
        Some(crate::decode_unbounded(&bytes).expect("a token row decodes"))
    }

    /// Every live (unrevoked) descendant of `jti`, sorted.
    pub(crate) fn live_descendants(&self, tenant_id: &str, jti: &str) -> Vec<String> {
        let mut out = BTreeSet::new();
        let mut stack = vec![jti.to_string()];
        while let Some(id) = stack.pop() {
            for child in self.cold.token_children(tenant_id, &id, usize::MAX) {
                if out.insert(child.clone()) {
                    stack.push(child);
                }
            }
        }
        out.into_iter().filter(|id| self.token(tenant_id, id).is_some_and(|t| t.revoked_at_ms.is_none())).collect()
    }
}

//! What the state answers about this domain (lookups by id or name, pages), for queries and
//! for the rules.

use std::collections::BTreeSet;

use crate::state::{scan_page, LedgerState};
use crate::token::Token;

impl LedgerState {
    /// A page of a tenant's token records (of one principal, if given), by `jti` after `after`,
    /// scanning at most [`crate::token::TOKENS_SCAN_MAX`]. Records hold no secret.
    pub fn list_tokens(
        &self,
        tenant_id: &str,
        principal_id: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> (Vec<Token>, Option<String>) {
        let Some(tokens) = self.tokens.get(tenant_id) else { return (Vec::new(), None) };
        let of_principal = |t: &Token| principal_id.is_none_or(|p| t.record.principal_id == p);
        scan_page(tokens, after, limit, crate::token::TOKENS_SCAN_MAX, of_principal)
    }

    /// A token of a tenant by `jti`.
    pub fn token(&self, tenant_id: &str, jti: &str) -> Option<&Token> {
        self.tokens.get(tenant_id)?.get(jti)
    }

    /// Every live (unrevoked) descendant of `jti`, sorted.
    pub(crate) fn live_descendants(&self, tenant_id: &str, jti: &str) -> Vec<String> {
        let Some(children) = self.token_children.get(tenant_id) else { return Vec::new() };
        let mut out = BTreeSet::new();
        let mut stack = vec![jti.to_string()];
        while let Some(id) = stack.pop() {
            for child in children.get(&id).into_iter().flatten() {
                if out.insert(child.clone()) {
                    stack.push(child.clone());
                }
            }
        }
        out.into_iter().filter(|id| self.token(tenant_id, id).is_some_and(|t| t.revoked_at_ms.is_none())).collect()
    }
}

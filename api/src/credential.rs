//! What an edge presents with a principal's act ([`Credential`]), what a node records of it
//! once verified ([`GrantV1`], the payload of `Command::Verified`), and the anonymous access an
//! operator allows an edge (recorded by `Command::SetAnonymousAccess`): plain data, checked by
//! `crate::grant`.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Largest bearer token accepted (bytes); anything longer is refused unparsed.
pub const CREDENTIAL_BYTES_MAX: usize = 16 * 1024;

/// What an edge presents with a principal's act.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Credential {
    /// The bearer token the request carried (at most [`CREDENTIAL_BYTES_MAX`] bytes).
    Bearer(String),
    /// A request without a token on an anonymous-mode edge: the node grants it only to an
    /// edge its operator allowed for that tenant and principal.
    Anonymous,
}

impl std::fmt::Debug for Credential {
    /// Never the token: a credential may be logged with the request that carried it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Bearer(_) => f.write_str("Bearer([REDACTED])"),
            Credential::Anonymous => f.write_str("Anonymous"),
        }
    }
}

/// What a node verified of the credential an edge presented, as the log records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantV1 {
    pub tenant_id: String,
    pub principal_id: String,
    /// `crate::token::WRIT_ISSUER`, the tenant issuer's URL, or `crate::auth::ANONYMOUS_ISSUER`.
    pub issuer: String,
    /// The token's `jti` (Writ tokens always; tenant tokens when they carry one).
    pub token_id: Option<String>,
    /// The credential's effective scopes when the node verified it (a tenant token: its scope
    /// claim, narrowed to what the principal holds).
    pub scopes: BTreeSet<String>,
    pub expires_at_ms: u64,
    /// The node that verified the credential (`node:<id>`).
    pub verified_by: String,
    /// The edge that presented it (the id its certificate names).
    pub edge_id: String,
}

/// Edges a tenant lets act without a token, at most (`Command::SetAnonymousAccess`).
pub const ANONYMOUS_EDGES_PER_TENANT_MAX: usize = 16;
/// Longest edge id anonymous access is recorded for.
pub const ANONYMOUS_EDGE_ID_BYTES_MAX: usize = 128;

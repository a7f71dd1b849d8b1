//! Credential records kept by the ledger (SPEC D2, D3): every Writ-issued token's `jti`, owner,
//! scopes, lifetime and delegation parent. Signing and verification of the bearer JWTs build on
//! these records; revocation is a ledger event that cascades to every descendant.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// How many delegation hops a token chain may have by default (parent → child).
pub const DELEGATION_DEPTH_MAX_DEFAULT: u32 = 1;

/// What the issuer asks for. The ledger clamps the lifetime and checks every rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRequestV1 {
    pub jti: String,
    pub principal_id: String,
    /// Requested scopes; empty means "all of the principal's (or the parent's) scopes".
    pub scopes: BTreeSet<String>,
    pub ttl_s: u64,
    /// For a delegated (child) token: the parent token's `jti`.
    pub parent_jti: Option<String>,
}

/// A token as the ledger recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecordV1 {
    pub jti: String,
    pub principal_id: String,
    pub scopes: BTreeSet<String>,
    pub issued_at_ms: u64,
    pub expires_at_ms: u64,
    pub parent_jti: Option<String>,
    /// 0 for a token issued to a principal, parent depth + 1 for a delegated one.
    pub depth: u32,
}

/// The token view: the record plus whether (and why) it was revoked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    pub tenant_id: String,
    pub record: TokenRecordV1,
    pub revoked_at_ms: Option<u64>,
    /// The token whose revocation revoked this one (itself when revoked directly).
    pub revoked_via: Option<String>,
}

//! Credential records kept by the ledger (SPEC D2, D3): every Writ-issued token's `jti`, owner,
//! scopes, lifetime and delegation parent. Signing and verification of the bearer JWTs build on
//! these records; revocation is a ledger event that cascades to every descendant.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::reason::ReasonCode;
use crate::rejection::Rejection;

/// The `iss` of every Writ-issued token; reserved, so no tenant issuer can claim it.
pub const WRIT_ISSUER: &str = "urn:writ:ledger";
/// The only signature algorithm Writ signs with (Ed25519).
pub const WRIT_SIGNING_ALG: &str = "EdDSA";
/// Largest inline JWKS of a tenant issuer.
pub const JWKS_BYTES_MAX: usize = 64 * 1024;
/// Longest issuer or audience string.
pub const ISSUER_BYTES_MAX: usize = 512;

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

/// Token records scanned per list call at most (a principal's page may come back short; the
/// cursor still moves on).
pub const TOKENS_SCAN_MAX: usize = 10_000;

/// The token view: the record plus whether (and why) it was revoked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    pub tenant_id: String,
    pub record: TokenRecordV1,
    pub revoked_at_ms: Option<u64>,
    /// The token whose revocation revoked this one (itself when revoked directly).
    pub revoked_via: Option<String>,
}

/// A node's token-signing public key, published in the ledger so that every verifier (on any
/// node or edge) can check tokens that any node signed. Rotation: a node started with a new key
/// registers it under a new `kid`; tokens signed by the old key stay valid until they expire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SigningKeyV1 {
    pub kid: String,
    /// Always [`WRIT_SIGNING_ALG`] today.
    pub alg: String,
    /// The raw 32-byte Ed25519 public key.
    pub public_key: Vec<u8>,
}

impl SigningKeyV1 {
    pub fn validate(&self) -> Result<(), Rejection> {
        if self.kid.is_empty() || self.kid.len() > 64 || !self.kid.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Rejection::new(ReasonCode::INPUT_INVALID, "key id must be 1..=64 printable ASCII bytes"));
        }
        if self.alg != WRIT_SIGNING_ALG || self.public_key.len() != 32 {
            return Err(Rejection::new(
                ReasonCode::INPUT_INVALID,
                "signing keys are Ed25519 (EdDSA, 32-byte public key)",
            ));
        }
        Ok(())
    }
}

/// A tenant's own token issuer (SPEC D2): tokens with this `iss` and `aud`, signed by a key of
/// the inline JWKS, authenticate the tenant's principals (`sub` = principal id or name). The
/// keys are registered through the admin API; nothing is fetched in the request path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantIssuerV1 {
    pub issuer: String,
    pub audience: String,
    /// The JWKS document, as JSON text (`{"keys":[...]}`), every key with a `kid`.
    pub jwks: String,
}

impl TenantIssuerV1 {
    /// Checks the shape, and that the JWKS parses and each key is usable for verification.
    pub fn validate(&self) -> Result<(), Rejection> {
        let invalid = |m: String| Rejection::new(ReasonCode::INPUT_INVALID, m);
        if self.issuer.is_empty() || self.issuer.len() > ISSUER_BYTES_MAX {
            return Err(invalid(format!("issuer must be 1..={ISSUER_BYTES_MAX} bytes")));
        }
        if self.issuer == WRIT_ISSUER {
            return Err(Rejection::new(ReasonCode::ISSUER_CONFLICT, format!("issuer '{WRIT_ISSUER}' is Writ's own")));
        }
        if self.audience.is_empty() || self.audience.len() > ISSUER_BYTES_MAX {
            return Err(invalid(format!("audience must be 1..={ISSUER_BYTES_MAX} bytes")));
        }
        if self.jwks.len() > JWKS_BYTES_MAX {
            return Err(invalid(format!("jwks exceeds {JWKS_BYTES_MAX} bytes")));
        }
        let set: jsonwebtoken::jwk::JwkSet =
            serde_json::from_str(&self.jwks).map_err(|e| invalid(format!("jwks is not a JWK set: {e}")))?;
        if set.keys.is_empty() {
            return Err(invalid("jwks has no keys".into()));
        }
        for (i, key) in set.keys.iter().enumerate() {
            if key.common.key_id.as_deref().is_none_or(str::is_empty) {
                return Err(invalid(format!("jwks key {i} has no kid")));
            }
            jsonwebtoken::DecodingKey::from_jwk(key)
                .map_err(|e| invalid(format!("jwks key {i} cannot verify signatures: {e}")))?;
        }
        Ok(())
    }
}

/// A tenant issuer known by its URL (SPEC E9): its keys come from the `jwks_uri` of its
/// discovery document (OpenID Connect discovery, or RFC 8414 metadata), fetched by the admin
/// server when it is registered and again by the leader while it leads; tokens are verified
/// against the keys the ledger recorded, never against a fetch in the request path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerSourceV1 {
    /// The issuer's URL: `https://…`, or `http://` to a loopback address when
    /// `allow_private_network` is set.
    pub issuer: String,
    /// The audience its tokens carry for this tenant: the tenant's MCP URL.
    pub audience: String,
    /// Whether the issuer, its `jwks_uri` and the names they use may resolve to loopback or
    /// private addresses (an IdP inside the operator's network); off, only public addresses.
    #[serde(default)]
    pub allow_private_network: bool,
}

/// The key set a discovered issuer's `jwks_uri` answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerKeysV1 {
    pub jwks_uri: String,
    /// The JWKS document as fetched (JSON text), checked like an inline one.
    pub jwks: String,
}

/// A discovered issuer as the ledger holds it (its keys live in [`TenantIssuer`] like an
/// inline issuer's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuerSource {
    pub tenant_id: String,
    pub spec: IssuerSourceV1,
    pub jwks_uri: String,
    /// The ledger revision that last changed its keys or source.
    pub revision: u64,
}

/// `scheme://authority` and the path (with what follows it) of `url`.
pub fn split_origin(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => url.split_at(after_scheme + i),
        None => (url, ""),
    }
}

/// The MCP URL of tenant `tenant` (by name) on the endpoint `canonical`:
/// `{origin}/t/{tenant}{path}` — where its agents connect, and the audience of the tokens of its
/// own authorization server and issuers.
pub fn tenant_url(canonical: &str, tenant: &str) -> String {
    let (origin, path) = split_origin(canonical);
    format!("{origin}/t/{tenant}{path}")
}

/// Whether `url` is an `http(s)` URL Writ may fetch an issuer's documents from: `https`, or
/// `http` to a literal loopback address when private networks are allowed. No credentials,
/// query or fragment; at most [`ISSUER_BYTES_MAX`] bytes.
pub fn check_issuer_url(url: &str, allow_private_network: bool) -> Result<(), Rejection> {
    let invalid = |m: String| Rejection::new(ReasonCode::INPUT_INVALID, m);
    if url.is_empty() || url.len() > ISSUER_BYTES_MAX || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(format!("'{url}' must be 1..={ISSUER_BYTES_MAX} bytes without spaces")));
    }
    let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid(format!("'{url}' is not a URL")))?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') || rest.contains(['?', '#']) {
        return Err(invalid(format!("'{url}' must name a host, without credentials, query or fragment")));
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    let loopback = host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    match scheme {
        "https" => Ok(()),
        "http" if loopback && allow_private_network => Ok(()),
        _ => {
            Err(invalid(format!("'{url}' must be https (http only to a loopback address with allow_private_network)")))
        }
    }
}

impl IssuerSourceV1 {
    pub fn validate(&self) -> Result<(), Rejection> {
        check_issuer_url(&self.issuer, self.allow_private_network)?;
        if self.audience.is_empty() || self.audience.len() > ISSUER_BYTES_MAX {
            return Err(Rejection::new(
                ReasonCode::INPUT_INVALID,
                format!("audience must be 1..={ISSUER_BYTES_MAX} bytes"),
            ));
        }
        Ok(())
    }

    /// The issuer view its fetched `keys` make (checked like an inline issuer).
    pub fn issuer_with(&self, keys: &IssuerKeysV1) -> Result<TenantIssuerV1, Rejection> {
        check_issuer_url(&keys.jwks_uri, self.allow_private_network)?;
        let issuer =
            TenantIssuerV1 { issuer: self.issuer.clone(), audience: self.audience.clone(), jwks: keys.jwks.clone() };
        issuer.validate()?;
        Ok(issuer)
    }
}

/// A tenant issuer as the ledger holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantIssuer {
    pub tenant_id: String,
    pub spec: TenantIssuerV1,
    pub revision: u64,
    /// `spec.jwks` parsed at its first use (never encoded).
    #[serde(skip)]
    pub parsed: ParsedJwks,
}

impl TenantIssuer {
    pub fn new(tenant_id: String, spec: TenantIssuerV1, revision: u64) -> TenantIssuer {
        TenantIssuer { tenant_id, spec, revision, parsed: ParsedJwks::default() }
    }

    /// The issuer's key set, parsed once per registration (a changed issuer is a new view), not
    /// per verification; `None` when it does not parse (the ledger checked it did).
    pub fn keys(&self) -> Option<&jsonwebtoken::jwk::JwkSet> {
        self.parsed.0.get_or_init(|| serde_json::from_str(&self.spec.jwks).ok()).as_ref()
    }
}

/// A cache derived from the view it sits in: shared by its clones, and every two are equal (it
/// holds nothing the view does not already say).
#[derive(Clone, Default)]
pub struct ParsedJwks(std::sync::Arc<std::sync::OnceLock<Option<jsonwebtoken::jwk::JwkSet>>>);

impl PartialEq for ParsedJwks {
    fn eq(&self, _: &ParsedJwks) -> bool {
        true
    }
}

impl Eq for ParsedJwks {}

impl std::fmt::Debug for ParsedJwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ParsedJwks")
    }
}

pub mod decide;
pub(crate) mod fold;
mod query;

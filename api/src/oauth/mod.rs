//! Writ's own authorization server of a tenant (OAuth 2.1, RFC 8414 metadata, served by every
//! edge at `/t/{tenant}/oauth/*`) as the ledger keeps it: the clients an operator registered,
//! each bound to one principal; the authorization requests browsers made and operators decided;
//! the codes, refresh tokens and client assertions they led to. No secret is recorded: codes,
//! refresh tokens and the browser that asked are kept as SHA-256 digests (hex); a PKCE
//! verifier reaches the ledger only with the code it redeems, once.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::reason::ReasonCode;
use crate::rejection::Rejection;
use crate::token::{check_issuer_url, TokenRequestV1, ISSUER_BYTES_MAX, JWKS_BYTES_MAX};

/// Most clients a tenant registers.
pub const CLIENTS_MAX: usize = 256;
/// Most redirect URIs of one client.
pub const REDIRECT_URIS_MAX: usize = 8;
/// Most authorization requests a tenant holds at once (pending, decided or holding a code).
pub const REQUESTS_MAX: usize = 64;
/// Most live refresh tokens of one tenant.
pub const REFRESH_TOKENS_MAX: usize = 4096;
/// Most client assertions a tenant remembers as used (each until it expires).
pub const ASSERTIONS_MAX: usize = 4096;
/// How long an authorization request waits for an operator (ledger time).
pub const REQUEST_TTL_MS: u64 = 10 * 60_000;
/// How long a code may be redeemed after it was handed to the browser.
pub const CODE_TTL_MS: u64 = 60_000;
/// How long a refresh token lives (each use replaces it with a new one).
pub const REFRESH_TTL_MS: u64 = 30 * 24 * 3_600_000;
/// The longest lifetime a client assertion may claim (`exp` − now).
pub const ASSERTION_LIFETIME_MAX_MS: u64 = 5 * 60_000;
/// Longest client name, `state` value or digest.
pub const TEXT_BYTES_MAX: usize = 512;

/// SHA-256 of `secret`, hex: how codes, refresh tokens and browser bindings are recorded.
pub fn digest(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The S256 code challenge of a PKCE `verifier` (RFC 7636 §4.2): base64url, no padding.
pub fn s256_challenge(verifier: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Whether `v` is a PKCE verifier or challenge: 43..=128 characters of the unreserved set.
pub fn is_pkce_value(v: &str) -> bool {
    (43..=128).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

fn invalid(m: impl Into<String>) -> Rejection {
    Rejection::new(ReasonCode::INPUT_INVALID, m)
}

/// A client of the tenant's authorization server, registered by an operator: the principal it
/// acts as and the most it may ask for. A client known by its metadata document has the URL
/// of that document as its id (its redirect URIs and keys were read from it when it was
/// registered); a headless agent has a name and its public keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthClientV1 {
    pub client_id: String,
    pub principal_id: String,
    /// The scopes it may be given (empty: the principal's own).
    #[serde(default)]
    pub scopes: BTreeSet<String>,
    /// Where codes are sent (authorization code flow): exact matches only.
    #[serde(default)]
    pub redirect_uris: Vec<String>,
    /// Its public keys (JWKS as JSON text) for `private_key_jwt` (client credentials flow).
    #[serde(default)]
    pub jwks: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

impl OAuthClientV1 {
    pub fn validate(&self) -> Result<(), Rejection> {
        let id = &self.client_id;
        if id.is_empty() || id.len() > ISSUER_BYTES_MAX || id.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(invalid(format!("client_id must be 1..={ISSUER_BYTES_MAX} bytes without spaces")));
        }
        if self.redirect_uris.is_empty() && self.jwks.is_none() {
            return Err(invalid("a client needs redirect URIs (code flow) or public keys (client credentials)"));
        }
        if self.redirect_uris.len() > REDIRECT_URIS_MAX {
            return Err(invalid(format!("a client has at most {REDIRECT_URIS_MAX} redirect URIs")));
        }
        for uri in &self.redirect_uris {
            check_redirect_uri(uri)?;
        }
        if self.name.as_ref().is_some_and(|n| n.len() > TEXT_BYTES_MAX) {
            return Err(invalid(format!("name exceeds {TEXT_BYTES_MAX} bytes")));
        }
        if let Some(jwks) = &self.jwks {
            check_client_jwks(jwks)?;
        }
        Ok(())
    }

    /// The client's public keys, if it has usable ones.
    pub fn keys(&self) -> Option<jsonwebtoken::jwk::JwkSet> {
        self.jwks.as_deref().and_then(|j| serde_json::from_str(j).ok())
    }
}

/// A redirect URI: https, or http to a loopback address (a native host's callback, RFC 8252
/// §7.3); no fragment.
pub fn check_redirect_uri(uri: &str) -> Result<(), Rejection> {
    let base = uri.split('?').next().unwrap_or_default();
    if uri.contains('#') || check_issuer_url(base, true).is_err() {
        return Err(invalid(format!(
            "redirect URI '{}' must be https (or http to a loopback address), without a fragment",
            crate::audit::truncated(uri, 128)
        )));
    }
    Ok(())
}

/// A client's JWKS: bounded, parsable, asymmetric keys that can verify.
fn check_client_jwks(jwks: &str) -> Result<(), Rejection> {
    if jwks.len() > JWKS_BYTES_MAX {
        return Err(invalid(format!("jwks exceeds {JWKS_BYTES_MAX} bytes")));
    }
    let set: jsonwebtoken::jwk::JwkSet =
        serde_json::from_str(jwks).map_err(|e| invalid(format!("jwks is not a JWK set: {e}")))?;
    if set.keys.is_empty() {
        return Err(invalid("jwks has no keys"));
    }
    for (i, key) in set.keys.iter().enumerate() {
        if matches!(key.algorithm, jsonwebtoken::jwk::AlgorithmParameters::OctetKey(_)) {
            return Err(invalid(format!("jwks key {i} is symmetric: only public keys are registered")));
        }
        jsonwebtoken::DecodingKey::from_jwk(key)
            .map_err(|e| invalid(format!("jwks key {i} cannot verify signatures: {e}")))?;
    }
    Ok(())
}

/// What a browser asked for at the authorization endpoint (already checked against the
/// client's registration by the node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthRequestV1 {
    pub request_id: String,
    pub client_id: String,
    pub redirect_uri: String,
    /// The S256 PKCE challenge (the only method accepted).
    pub code_challenge: String,
    pub scopes: BTreeSet<String>,
    /// The resource (RFC 8707) the token is for: the tenant's MCP URL.
    pub audience: String,
    /// The client's `state`, echoed in the redirect.
    pub state: Option<String>,
    /// Digest of the secret the browser that asked holds (only it collects the code).
    pub browser_digest: String,
}

impl AuthRequestV1 {
    pub fn validate(&self) -> Result<(), Rejection> {
        if self.request_id.is_empty() || self.request_id.len() > 64 {
            return Err(invalid("request_id must be 1..=64 bytes"));
        }
        check_redirect_uri(&self.redirect_uri)?;
        if !is_pkce_value(&self.code_challenge) {
            return Err(Rejection::new(ReasonCode::OAUTH_PKCE_INVALID, "code_challenge must be an S256 challenge"));
        }
        if self.audience.is_empty() || self.audience.len() > ISSUER_BYTES_MAX {
            return Err(invalid(format!("the resource must be 1..={ISSUER_BYTES_MAX} bytes")));
        }
        if self.state.as_ref().is_some_and(|s| s.len() > TEXT_BYTES_MAX) || self.browser_digest.len() != 64 {
            return Err(invalid(format!("state must be at most {TEXT_BYTES_MAX} bytes; the browser digest 64")));
        }
        Ok(())
    }
}

/// Where an authorization request stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthStatusV1 {
    /// Waiting for an operator.
    Pending,
    Approved {
        by: String,
    },
    Denied {
        by: String,
    },
    /// Its code was handed to the browser; redeemable until `expires_at_ms`.
    CodeIssued {
        by: String,
        code_digest: String,
        expires_at_ms: u64,
    },
}

/// An authorization request as the ledger holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthRequest {
    pub request: AuthRequestV1,
    pub status: AuthStatusV1,
    pub requested_at_ms: u64,
    pub expires_at_ms: u64,
}

/// A live refresh token: bound to its client, principal, scopes and audience.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefreshTokenV1 {
    pub refresh_id: String,
    pub secret_digest: String,
    pub client_id: String,
    pub principal_id: String,
    pub scopes: BTreeSet<String>,
    pub audience: String,
    pub expires_at_ms: u64,
}

/// What proves a token request at the token endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GrantProofV1 {
    /// A code, the PKCE verifier of its request's challenge and the redirect URI it was sent to.
    Code { code_digest: String, verifier: String, redirect_uri: String },
    /// A refresh token of the client (replaced by a new one).
    Refresh { refresh_id: String, secret_digest: String },
    /// A client assertion (`private_key_jwt`) the node verified against the client's keys:
    /// its `jti` is used once; the token is for `audience` (the tenant's MCP URL).
    Assertion { jti: String, expires_at_ms: u64, audience: String },
}

/// A new refresh token to record with the access token: its id and the digest of its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewRefreshV1 {
    pub refresh_id: String,
    pub secret_digest: String,
}

/// One step of the authorization server's grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GrantStepV1 {
    /// A browser asks (the authorization endpoint).
    Request(AuthRequestV1),
    /// An operator approves or denies a pending request.
    Decide { request_id: String, approve: bool, operator: String },
    /// The browser that asked collects the code of its approved request.
    Code { request_id: String, browser_digest: String, code_digest: String },
    /// A token for a code, a refresh token or a client assertion (the token endpoint). The
    /// token's scopes are the request's for a code; within the refresh token's or the client's
    /// (empty: all of them) otherwise.
    Redeem { client_id: String, proof: GrantProofV1, token: TokenRequestV1, refresh: Option<NewRefreshV1> },
    /// The client revokes one of its refresh tokens (RFC 7009).
    Revoke { client_id: String, refresh_id: String, secret_digest: String },
}

/// What a grant step changed (`Event::OAuthGrantV1`), at ledger time `at_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GrantChangeV1 {
    Requested(AuthRequest),
    Decided {
        request_id: String,
        status: AuthStatusV1,
    },
    /// The proof was used (a code's request or a refresh token leaves; an assertion is
    /// remembered until it expires) and `refresh`, if any, recorded; the token issued with it
    /// is for `audience`.
    Redeemed {
        client_id: String,
        used: UsedProofV1,
        refresh: Option<RefreshTokenV1>,
        audience: String,
    },
    /// A refresh token revoked by its client.
    Revoked {
        refresh_id: String,
    },
}

/// A proof used up by a redemption.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum UsedProofV1 {
    Code { request_id: String },
    Refresh { refresh_id: String },
    Assertion { jti: String, expires_at_ms: u64 },
}

/// Deepest delegation chain a tenant may allow (`OAuthSettingsV1::delegation_depth_max`).
pub const DELEGATION_DEPTH_LIMIT: u32 = 8;
/// Longest claim name a tenant maps principals from.
pub const CLAIM_BYTES_MAX: usize = 64;

/// A tenant's settings of its authorization: how deep its principals may delegate (token
/// exchange and operators' delegation alike), and which claim of its own issuers' tokens names
/// the principal (`sub` when unset).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthSettingsV1 {
    #[serde(default = "default_depth")]
    pub delegation_depth_max: u32,
    #[serde(default)]
    pub principal_claim: Option<String>,
}

fn default_depth() -> u32 {
    crate::token::DELEGATION_DEPTH_MAX_DEFAULT
}

impl Default for OAuthSettingsV1 {
    fn default() -> Self {
        OAuthSettingsV1 { delegation_depth_max: default_depth(), principal_claim: None }
    }
}

impl OAuthSettingsV1 {
    pub fn validate(&self) -> Result<(), Rejection> {
        if self.delegation_depth_max > DELEGATION_DEPTH_LIMIT {
            return Err(invalid(format!("delegation_depth_max is at most {DELEGATION_DEPTH_LIMIT}")));
        }
        let claim_ok = |c: &String| {
            (1..=CLAIM_BYTES_MAX).contains(&c.len())
                && c.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b))
        };
        if self.principal_claim.as_ref().is_some_and(|c| !claim_ok(c)) {
            return Err(invalid(format!("principal_claim must be 1..={CLAIM_BYTES_MAX} of [A-Za-z0-9_.:-]")));
        }
        Ok(())
    }
}

/// A tenant's authorization server state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantOAuth {
    pub settings: OAuthSettingsV1,
    pub clients: BTreeMap<String, OAuthClientV1>,
    pub requests: BTreeMap<String, AuthRequest>,
    pub refresh_tokens: BTreeMap<String, RefreshTokenV1>,
    /// Used client assertions, `client_id` NUL `jti` → when they expire.
    pub assertions: BTreeMap<String, u64>,
}

impl TenantOAuth {
    /// Drops what expired by ledger time `now` (every replica folds it alike).
    pub fn expire(&mut self, now: u64) {
        self.requests.retain(|_, r| match &r.status {
            AuthStatusV1::CodeIssued { expires_at_ms, .. } => *expires_at_ms > now,
            _ => r.expires_at_ms > now,
        });
        self.refresh_tokens.retain(|_, r| r.expires_at_ms > now);
        self.assertions.retain(|_, until| *until > now);
    }

    /// Folds one change at ledger time `at_ms`.
    pub fn apply(&mut self, change: &GrantChangeV1, at_ms: u64) {
        self.expire(at_ms);
        match change {
            GrantChangeV1::Requested(r) => {
                self.requests.insert(r.request.request_id.clone(), r.clone());
            }
            GrantChangeV1::Decided { request_id, status } => {
                if let Some(r) = self.requests.get_mut(request_id) {
                    r.status = status.clone();
                }
            }
            GrantChangeV1::Revoked { refresh_id } => {
                self.refresh_tokens.remove(refresh_id);
            }
            GrantChangeV1::Redeemed { client_id, used, refresh, .. } => {
                match used {
                    UsedProofV1::Code { request_id } => {
                        self.requests.remove(request_id);
                    }
                    UsedProofV1::Refresh { refresh_id } => {
                        self.refresh_tokens.remove(refresh_id);
                    }
                    UsedProofV1::Assertion { jti, expires_at_ms } => {
                        self.assertions.insert(assertion_key(client_id, jti), *expires_at_ms);
                    }
                }
                if let Some(r) = refresh {
                    self.refresh_tokens.insert(r.refresh_id.clone(), r.clone());
                }
            }
        }
    }

    /// Removes a client with every grant it holds.
    pub fn remove_client(&mut self, client_id: &str) {
        self.clients.remove(client_id);
        self.requests.retain(|_, r| r.request.client_id != client_id);
        self.refresh_tokens.retain(|_, r| r.client_id != client_id);
        let prefix = format!("{client_id}\u{0}");
        self.assertions.retain(|k, _| !k.starts_with(&prefix));
    }
}

/// The key of a used assertion in [`TenantOAuth::assertions`].
pub fn assertion_key(client_id: &str, jti: &str) -> String {
    format!("{client_id}\u{0}{jti}")
}

pub mod decide;
mod fold;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_s256_challenge_is_rfc_7636s() {
        // RFC 7636 Appendix B.
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
        assert_eq!(s256_challenge(verifier), "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
        assert!(is_pkce_value(verifier));
        assert!(!is_pkce_value("short"));
        assert!(!is_pkce_value(&format!("{verifier}!")));
    }

    #[test]
    fn clients_are_bounded_and_keys_public() {
        let client = OAuthClientV1 {
            client_id: "https://host.example/client.json".into(),
            principal_id: "p".into(),
            scopes: BTreeSet::new(),
            redirect_uris: vec!["http://127.0.0.1:9/callback".into()],
            jwks: None,
            name: None,
        };
        assert!(client.validate().is_ok());
        let bad = |f: &dyn Fn(&mut OAuthClientV1)| {
            let mut c = client.clone();
            f(&mut c);
            c.validate().is_err()
        };
        assert!(bad(&|c| c.redirect_uris = vec!["http://evil.example/cb".into()]), "http off loopback");
        assert!(bad(&|c| c.redirect_uris = vec!["https://a.example/cb#frag".into()]));
        assert!(bad(&|c| c.redirect_uris.clear()), "neither flow");
        assert!(bad(&|c| c.jwks = Some(r#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#.into())), "symmetric");
        assert!(bad(&|c| c.client_id = "a b".into()));
    }

    #[test]
    fn expiry_and_redemption_leave_nothing_behind() {
        let mut t = TenantOAuth::default();
        let request = AuthRequestV1 {
            request_id: "r".into(),
            client_id: "c".into(),
            redirect_uri: "http://127.0.0.1/cb".into(),
            code_challenge: "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM".into(),
            scopes: BTreeSet::new(),
            audience: "https://e/t/a/mcp".into(),
            state: None,
            browser_digest: digest("b"),
        };
        let r = AuthRequest { request, status: AuthStatusV1::Pending, requested_at_ms: 0, expires_at_ms: 10 };
        t.apply(&GrantChangeV1::Requested(r), 0);
        let used = UsedProofV1::Assertion { jti: "j".into(), expires_at_ms: 20 };
        let audience = "https://e/t/a/mcp".to_string();
        t.apply(&GrantChangeV1::Redeemed { client_id: "c".into(), used, refresh: None, audience }, 1);
        assert_eq!((t.requests.len(), t.assertions.len()), (1, 1));
        t.expire(10);
        assert_eq!((t.requests.len(), t.assertions.len()), (0, 1));
        t.remove_client("c");
        assert!(t.assertions.is_empty());
    }
}

/// The claims of a client assertion (RFC 7523 §3) Writ reads.
#[derive(Deserialize)]
struct AssertionClaims {
    jti: String,
    exp: u64,
}

/// The client a client assertion claims to be (its `sub`, unverified: the key to check it with).
pub fn assertion_client(assertion: &str) -> Option<String> {
    let claims = crate::auth::segment(assertion, 1)?;
    let (iss, sub) = (claims["iss"].as_str()?, claims["sub"].as_str()?);
    (iss == sub).then(|| sub.to_string())
}

/// Verifies a `private_key_jwt` client assertion of `client` (RFC 7523): signed by one of its
/// registered keys with an asymmetric algorithm, `iss` = `sub` = its id, `aud` one of
/// `audiences` (the tenant's issuer or token endpoint), unexpired at `now_ms`. Its `jti` and
/// expiry (ms) come back, for the ledger to use it once.
pub fn verify_assertion(
    client: &OAuthClientV1,
    assertion: &str,
    audiences: &[String],
    now_ms: u64,
) -> Result<(String, u64), Rejection> {
    use jsonwebtoken::Algorithm;
    let refused = |m: &str| Rejection::new(ReasonCode::OAUTH_CLIENT_UNKNOWN, m);
    let header = jsonwebtoken::decode_header(assertion).map_err(|_| refused("the client assertion is not a JWT"))?;
    if matches!(header.alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
        return Err(refused("client assertions are signed with the client's private key (private_key_jwt)"));
    }
    let keys = client.keys().ok_or_else(|| refused("the client has no registered keys"))?;
    let mut v = jsonwebtoken::Validation::new(header.alg);
    v.set_issuer(&[&client.client_id]);
    v.sub = Some(client.client_id.clone());
    v.set_audience(audiences);
    v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    v.leeway = 0;
    v.validate_exp = false;
    let candidates = keys.keys.iter().filter(|k| header.kid.is_none() || k.common.key_id == header.kid);
    let claims = candidates
        .filter_map(|jwk| jsonwebtoken::DecodingKey::from_jwk(jwk).ok())
        .find_map(|key| jsonwebtoken::decode::<AssertionClaims>(assertion, &key, &v).ok())
        .ok_or_else(|| refused("the client assertion does not verify against the client's keys, issuer and audience"))?
        .claims;
    let expires_at_ms = claims.exp.saturating_mul(1000);
    if expires_at_ms <= now_ms {
        return Err(refused("the client assertion has expired"));
    }
    Ok((claims.jti, expires_at_ms))
}

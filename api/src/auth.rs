//! Bearer tokens (SPEC D2, D3): Writ-issued JWTs signed with a node's Ed25519 key, tenant-issued
//! JWTs checked against the tenant's inline JWKS, and [`verify`], the one routine that turns a
//! bearer token into a bounded [`Authority`] — used by the admin API and by every edge through
//! `writ_client::Verifier`.
//!
//! Order of the checks (each failure has its own reason code): token shape → issuer and key →
//! signature, issuer, audience → expiry, not-before → tenant state (the domain gate, before any
//! principal or scope check) → revocation of the token and of every ancestor in its delegation
//! chain → principal state → effective scopes.

use std::collections::BTreeSet;

use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::principal::{scope_covers, PrincipalState};
use crate::reason::ReasonCode;
use crate::rejection::Rejection;
use crate::state::LedgerState;
use crate::token::{SigningKeyV1, Token, WRIT_ISSUER, WRIT_SIGNING_ALG};

/// Largest bearer token accepted (bytes); anything longer is rejected unparsed.
pub const BEARER_BYTES_MAX: usize = crate::credential::CREDENTIAL_BYTES_MAX;

/// Claims of a Writ-issued token. The ledger's token record is authoritative (scopes, expiry,
/// parent); the claims only name it and bind it to an audience.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WritClaims {
    pub iss: String,
    /// Principal id.
    pub sub: String,
    pub aud: String,
    /// Seconds since the epoch (rounded up from the ledger's milliseconds).
    pub exp: u64,
    pub nbf: u64,
    pub iat: u64,
    pub jti: String,
    /// Tenant id.
    pub tid: String,
    /// Space-separated scopes, informational.
    pub scope: String,
    /// Ledger revision at which the token was recorded: a verifier that has not seen it yet
    /// waits (bounded) instead of calling the token unknown.
    pub rev: u64,
}

/// What a verified token may do: the principal, the delegation chain, and the effective scopes
/// (the token's scopes still held by every principal along the chain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Authority {
    pub tenant_id: String,
    pub principal_id: String,
    pub principal_name: String,
    pub issuer: String,
    /// The token's `jti` (Writ tokens always; tenant tokens when they carry one).
    pub token_id: Option<String>,
    pub parent_token_id: Option<String>,
    /// `jti`s from the root token down to this one (Writ tokens).
    pub chain: Vec<String>,
    pub scopes: BTreeSet<String>,
    /// Scopes revoked from a principal of the chain: asking for one is APP_SCOPE_REVOKED.
    pub revoked_scopes: BTreeSet<String>,
    pub expires_at_ms: u64,
}

impl Authority {
    /// What the ledger re-derives this authority from (`authority_of_ref`): a Writ token's
    /// jti, else the tenant issuer (or anonymous mode) the request came through.
    pub fn reference(&self) -> String {
        match &self.token_id {
            Some(jti) if self.issuer == crate::token::WRIT_ISSUER => jti.clone(),
            _ => self.issuer.clone(),
        }
    }

    /// Whether the authority covers `scope`: APP_SCOPE_REVOKED when a revocation took it away,
    /// APP_SCOPE_FORBIDDEN when it was never granted.
    pub fn require(&self, scope: &str) -> Result<(), Rejection> {
        if self.scopes.iter().any(|g| scope_covers(g, scope)) {
            return Ok(());
        }
        if self.revoked_scopes.iter().any(|r| scope_covers(r, scope) || scope_covers(scope, r)) {
            return Err(Rejection::new(ReasonCode::APP_SCOPE_REVOKED, format!("scope '{scope}' was revoked")));
        }
        Err(Rejection::new(ReasonCode::APP_SCOPE_FORBIDDEN, format!("the token does not grant scope '{scope}'")))
    }
}

/// A node's signing key: the private half from its key file, the public half registered in the
/// ledger under `kid` (derived from the public key, so a new key is a new `kid`).
pub struct Signer {
    key: EncodingKey,
    public: SigningKeyV1,
}

impl Signer {
    /// `pkcs8_pem` is the Ed25519 private key; `public_key` its raw 32-byte public key. The
    /// pair is checked by signing and verifying a probe.
    pub fn new(pkcs8_pem: &[u8], public_key: Vec<u8>) -> Result<Signer, String> {
        let key = EncodingKey::from_ed_pem(pkcs8_pem).map_err(|e| format!("not an Ed25519 PKCS#8 PEM key: {e}"))?;
        let kid = crate::sha256_hex(&public_key)[..16].to_string();
        let signer = Signer { key, public: SigningKeyV1 { kid, alg: WRIT_SIGNING_ALG.into(), public_key } };
        let probe = signer.sign_raw(&serde_json::json!({"probe": true})).map_err(|r| r.message)?;
        let mut v = Validation::new(Algorithm::EdDSA);
        v.required_spec_claims.clear();
        v.validate_exp = false;
        jsonwebtoken::decode::<serde_json::Value>(&probe, &DecodingKey::from_ed_der(&signer.public.public_key), &v)
            .map_err(|e| format!("the public key does not match the private key: {e}"))?;
        Ok(signer)
    }

    pub fn public_key(&self) -> &SigningKeyV1 {
        &self.public
    }

    pub fn sign(&self, claims: &WritClaims) -> Result<String, Rejection> {
        self.sign_raw(claims)
    }

    fn sign_raw<T: Serialize>(&self, claims: &T) -> Result<String, Rejection> {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(self.public.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.key)
            .map_err(|e| Rejection::new(ReasonCode::INTERNAL, format!("token signing failed: {e}")))
    }
}

fn invalid(message: impl Into<String>) -> Rejection {
    Rejection::new(ReasonCode::AUTH_TOKEN_INVALID, message)
}

/// The claims every verification reads before choosing a key: issuer and (Writ) revision.
#[derive(Deserialize)]
struct Peek {
    iss: Option<String>,
    rev: Option<u64>,
}

fn peek(bearer: &str) -> Result<Peek, Rejection> {
    if bearer.len() > BEARER_BYTES_MAX {
        return Err(invalid(format!("the token exceeds {BEARER_BYTES_MAX} bytes")));
    }
    let payload = segment(bearer, 1).ok_or_else(|| invalid("the token payload is not a base64url JSON object"))?;
    serde_json::from_value(payload).map_err(|_| invalid("the token payload is not a JSON object"))
}

/// One JWT segment (0 header, 1 claims) decoded as JSON, unverified: for routing and display.
pub fn segment(token: &str, index: usize) -> Option<serde_json::Value> {
    let part = token.split('.').nth(index)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The ledger revision a Writ token was recorded at, if the token says so (unverified: only
/// used to decide how long to wait for the verifier's state to catch up).
pub fn recorded_revision(bearer: &str) -> Option<u64> {
    peek(bearer).ok().filter(|p| p.iss.as_deref() == Some(WRIT_ISSUER)).and_then(|p| p.rev)
}

/// Claims read from a tenant issuer's token.
#[derive(Deserialize)]
struct TenantClaims {
    sub: String,
    exp: u64,
    nbf: Option<u64>,
    iat: Option<u64>,
    jti: Option<String>,
    /// OAuth-style space-separated scopes.
    scope: Option<String>,
    /// Or an array (`scp`), as some issuers send.
    scp: Option<Vec<String>>,
    /// The other claims (one of them may name the principal: the tenant's `principal_claim`).
    #[serde(flatten)]
    other: serde_json::Map<String, serde_json::Value>,
}

fn map_jwt_error(e: jsonwebtoken::errors::Error) -> Rejection {
    use jsonwebtoken::errors::ErrorKind as K;
    match e.kind() {
        K::InvalidSignature => invalid("bad token signature"),
        K::InvalidAudience => invalid("the token is not for this audience"),
        K::InvalidIssuer => invalid("unexpected token issuer"),
        K::InvalidAlgorithm => invalid("the token's algorithm does not match its key"),
        K::MissingRequiredClaim(c) => invalid(format!("the token lacks claim '{c}'")),
        K::InvalidClaimFormat(c) => invalid(format!("the token's claim '{c}' is malformed")),
        _ => invalid(format!("the token is malformed: {e}")),
    }
}

fn validation(alg: Algorithm, issuer: &str, audiences: &[String]) -> Validation {
    let mut v = Validation::new(alg);
    // Times are checked against the caller's clock below, with their own reason codes.
    v.validate_exp = false;
    v.validate_nbf = false;
    v.leeway = 0;
    v.set_issuer(&[issuer]);
    v.set_audience(audiences);
    v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    v
}

/// Verifies `bearer` against the ledger `state` at `now_ms`. `audiences`: the audiences a Writ
/// token may carry (the edge's canonical URI, the cluster's audience); tenant tokens carry their
/// issuer's audience.
pub fn verify(state: &LedgerState, bearer: &str, audiences: &[String], now_ms: u64) -> Result<Authority, Rejection> {
    let header = jsonwebtoken::decode_header(bearer).map_err(|_| invalid("the token is not a JWT"))?;
    let iss = peek(bearer)?.iss.ok_or_else(|| invalid("the token lacks claim 'iss'"))?;
    let kid = header.kid.clone().ok_or_else(|| invalid("the token header lacks 'kid'"))?;
    if iss == WRIT_ISSUER {
        verify_writ(state, bearer, &header, &kid, audiences, now_ms)
    } else {
        verify_tenant_issued(state, bearer, &header, &iss, &kid, now_ms)
    }
}

/// How long after its expiry a token still vouches that its holder made a request
/// ([`holder`]): decisions reach the ledger up to a denial window, and retries, after it.
pub const VOUCHER_GRACE_MS: u64 = 10 * 60 * 1000;

/// The tenant and principal whose token `bearer` is, by its signature alone (a Writ signing
/// key the ledger holds, or the tenant issuer's key), for any audience, up to
/// [`VOUCHER_GRACE_MS`] past its expiry and whatever was revoked since: proof that whoever
/// presents it held the principal's token, which is what a recorded decision about a request
/// needs — not authority to act.
pub fn holder(state: &LedgerState, bearer: &str, now_ms: u64) -> Result<(String, String), Rejection> {
    let header = jsonwebtoken::decode_header(bearer).map_err(|_| invalid("the token is not a JWT"))?;
    let iss = peek(bearer)?.iss.ok_or_else(|| invalid("the token lacks claim 'iss'"))?;
    let kid = header.kid.as_deref().ok_or_else(|| invalid("the token header lacks 'kid'"))?;
    let mut v = Validation::new(header.alg);
    (v.validate_exp, v.validate_nbf, v.validate_aud) = (false, false, false);
    v.set_issuer(&[&iss]);
    v.set_required_spec_claims(&["exp", "iss", "sub"]);
    let (tenant_id, sub, exp) = if iss == WRIT_ISSUER {
        let key = state.signing_keys.get(kid).ok_or_else(|| invalid(format!("unknown signing key '{kid}'")))?;
        if header.alg != Algorithm::EdDSA {
            return Err(invalid("Writ tokens are EdDSA-signed"));
        }
        let c = jsonwebtoken::decode::<WritClaims>(bearer, &DecodingKey::from_ed_der(&key.public_key), &v)
            .map_err(map_jwt_error)?
            .claims;
        (c.tid, c.sub, c.exp)
    } else {
        let issuer = state.issuers.get(&iss).ok_or_else(|| invalid(format!("unknown token issuer '{iss}'")))?;
        if matches!(header.alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
            return Err(invalid("symmetric token algorithms are not accepted"));
        }
        let set = issuer.keys().ok_or_else(|| invalid("the issuer's JWKS is unusable"))?;
        let jwk = set.find(kid).ok_or_else(|| invalid(format!("issuer '{iss}' has no key '{kid}'")))?;
        let key = DecodingKey::from_jwk(jwk).map_err(|_| invalid(format!("issuer key '{kid}' is unusable")))?;
        let c = jsonwebtoken::decode::<TenantClaims>(bearer, &key, &v).map_err(map_jwt_error)?.claims;
        (issuer.tenant_id.clone(), c.sub, c.exp)
    };
    if exp.saturating_mul(1000).saturating_add(VOUCHER_GRACE_MS) <= now_ms {
        return Err(Rejection::new(ReasonCode::AUTH_TOKEN_EXPIRED, "the token expired too long ago to vouch"));
    }
    let principal = state.principal(&tenant_id, &sub).ok_or_else(|| invalid("the token's principal does not exist"))?;
    Ok((tenant_id, principal.id.clone()))
}

/// The issuer recorded for requests served without a token (loopback-only anonymous mode).
pub const ANONYMOUS_ISSUER: &str = "urn:writ:anonymous-loopback";

/// The authority of an unauthenticated request on a loopback-only edge (SPEC E3): the named
/// principal of the named tenant, with that principal's current scopes. The same gates apply as
/// for a token: the tenant must be active and the principal not revoked.
pub fn anonymous(state: &LedgerState, tenant: &str, principal: &str) -> Result<Authority, Rejection> {
    let t = state.tenant(tenant).ok_or_else(|| invalid(format!("the anonymous tenant '{tenant}' does not exist")))?;
    domain_gate(state, &t.id)?;
    let p = state
        .principal(&t.id, principal)
        .ok_or_else(|| invalid(format!("the anonymous principal '{principal}' does not exist")))?;
    principal_itself(p, ANONYMOUS_ISSUER)
}

/// The authority of an active principal acting as itself (no token the ledger holds): its
/// current scopes, recorded as coming through `issuer`.
fn principal_itself(p: &crate::principal::Principal, issuer: &str) -> Result<Authority, Rejection> {
    if p.state != PrincipalState::Active {
        return Err(Rejection::new(ReasonCode::AUTH_TOKEN_REVOKED, format!("principal '{}' was revoked", p.name)));
    }
    Ok(Authority {
        tenant_id: p.tenant_id.clone(),
        principal_id: p.id.clone(),
        principal_name: p.name.clone(),
        issuer: issuer.into(),
        token_id: None,
        parent_token_id: None,
        chain: Vec::new(),
        scopes: p.scopes.clone(),
        revoked_scopes: p.revoked_scopes.clone(),
        expires_at_ms: u64::MAX,
    })
}

fn domain_gate(state: &LedgerState, tenant_id: &str) -> Result<(), Rejection> {
    let tenant = state.tenants.get(tenant_id).ok_or_else(|| invalid("the token's tenant does not exist"))?;
    tenant.closed().map_or(Ok(()), Err)
}

fn verify_writ(
    state: &LedgerState,
    bearer: &str,
    header: &Header,
    kid: &str,
    audiences: &[String],
    now_ms: u64,
) -> Result<Authority, Rejection> {
    if header.alg != Algorithm::EdDSA {
        return Err(invalid("Writ tokens are EdDSA-signed"));
    }
    if state.revocations.signing_keys.contains_key(kid) {
        return Err(Rejection::new(
            ReasonCode::AUTH_TOKEN_REVOKED,
            format!("the token's signing key '{kid}' was retired"),
        ));
    }
    let key = state.signing_keys.get(kid).ok_or_else(|| invalid(format!("unknown signing key '{kid}'")))?;
    let audiences = with_tenant_urls(state, bearer, audiences);
    let claims = jsonwebtoken::decode::<WritClaims>(
        bearer,
        &DecodingKey::from_ed_der(&key.public_key),
        &validation(Algorithm::EdDSA, WRIT_ISSUER, &audiences),
    )
    .map_err(map_jwt_error)?
    .claims;
    if claims.nbf.saturating_mul(1000) > now_ms {
        return Err(Rejection::new(ReasonCode::AUTH_TOKEN_NOT_YET_VALID, "the token is not valid yet"));
    }
    recorded_authority(state, &claims.tid, &claims.jti, &claims.sub, now_ms)
}

/// `audiences` and, for each, the MCP URL of the tenant the token claims (its `tid`): a token a
/// tenant's own authorization server issued for that URL. The signature covers the claim, so a
/// token only ever matches its own tenant's URL.
fn with_tenant_urls(state: &LedgerState, bearer: &str, audiences: &[String]) -> Vec<String> {
    let claimed = segment(bearer, 1).and_then(|c| Some(state.tenants.get(c["tid"].as_str()?)?.name.clone()));
    let mut all = audiences.to_vec();
    if let Some(name) = claimed {
        all.extend(audiences.iter().map(|a| crate::token::tenant_url(a, &name)));
    }
    all
}

/// The authority of the Writ token `jti` of `tenant_id` held by `principal_id`, from the
/// ledger's records alone at `now_ms`: the record exists and names that principal, and every
/// link of its delegation chain is unrevoked, unexpired and held by an active principal.
pub fn recorded_authority(
    state: &LedgerState,
    tenant_id: &str,
    jti: &str,
    principal_id: &str,
    now_ms: u64,
) -> Result<Authority, Rejection> {
    let token = state.token(tenant_id, jti).ok_or_else(|| invalid("unknown token id"))?;
    authority_of_token(state, tenant_id, token, principal_id, now_ms)
}

/// [`recorded_authority`] of the record `token`, read.
fn authority_of_token(
    state: &LedgerState,
    tenant_id: &str,
    token: Token,
    principal_id: &str,
    now_ms: u64,
) -> Result<Authority, Rejection> {
    if token.record.principal_id != principal_id {
        return Err(invalid("the token's subject does not match its record"));
    }
    if token.record.expires_at_ms <= now_ms {
        return Err(Rejection::new(ReasonCode::AUTH_TOKEN_EXPIRED, "the token has expired"));
    }
    domain_gate(state, tenant_id)?;
    let (jti, parent_jti, expires_at_ms) =
        (token.record.jti.clone(), token.record.parent_jti.clone(), token.record.expires_at_ms);
    // Walk the chain up to the root: every link unrevoked, unexpired, its principal active;
    // the effective scopes narrow to what every link's principal still holds.
    let mut scopes = token.record.scopes.clone();
    let mut revoked_scopes = BTreeSet::new();
    let mut chain = Vec::new();
    let mut link = Some(token);
    while let Some(t) = link {
        if chain.len() > 64 {
            return Err(invalid("the delegation chain is too long"));
        }
        chain.push(t.record.jti.clone());
        if t.revoked_at_ms.is_some() {
            let via = t.revoked_via.as_deref().unwrap_or(&t.record.jti);
            let what = if via == jti {
                "the token was revoked".to_string()
            } else {
                format!("ancestor token '{via}' was revoked")
            };
            return Err(Rejection::new(ReasonCode::AUTH_TOKEN_REVOKED, what));
        }
        if t.record.expires_at_ms <= now_ms {
            return Err(Rejection::new(ReasonCode::AUTH_TOKEN_EXPIRED, "a token of the delegation chain has expired"));
        }
        let p = state
            .principals
            .get(tenant_id)
            .and_then(|m| m.get(&t.record.principal_id))
            .ok_or_else(|| invalid("the token's principal does not exist"))?;
        if p.state != PrincipalState::Active {
            return Err(Rejection::new(ReasonCode::AUTH_TOKEN_REVOKED, format!("principal '{}' was revoked", p.name)));
        }
        scopes.retain(|s| p.scopes.iter().any(|g| scope_covers(g, s)));
        scopes.retain(|s| t.record.scopes.iter().any(|g| scope_covers(g, s)));
        revoked_scopes.extend(p.revoked_scopes.iter().cloned());
        link = t.record.parent_jti.as_ref().and_then(|pj| state.token(tenant_id, pj));
        if link.is_none() && t.record.parent_jti.is_some() {
            return Err(invalid("a parent token of the chain is unknown"));
        }
    }
    chain.reverse();
    let principal = &state.principals[tenant_id][principal_id];
    Ok(Authority {
        tenant_id: tenant_id.to_string(),
        principal_id: principal.id.clone(),
        principal_name: principal.name.clone(),
        issuer: WRIT_ISSUER.into(),
        token_id: Some(jti),
        parent_token_id: parent_jti,
        chain,
        scopes,
        revoked_scopes,
        expires_at_ms,
    })
}

/// The authority an operation names (`authority_ref`), re-derived by the ledger (SPEC S3): a
/// Writ token's `jti` gets [`recorded_authority`]; a tenant issuer registered for this tenant,
/// or the loopback anonymous mode, stands for the principal itself (its current scopes).
/// Anything else names no authority of this tenant. This is the floor every act is decided
/// on; an act an edge submitted is in the log only inside `Command::Verified`, whose grant
/// (`crate::grant::check`) narrows it to the credential a node verified — a node refuses an
/// edge's bare reference (`crate::grant::admit`).
pub fn authority_of_ref(
    state: &LedgerState,
    tenant_id: &str,
    principal_id: &str,
    authority_ref: &str,
    now_ms: u64,
) -> Result<Authority, Rejection> {
    if let Some(token) = state.token(tenant_id, authority_ref) {
        return authority_of_token(state, tenant_id, token, principal_id, now_ms);
    }
    let grant =
        authority_ref == ANONYMOUS_ISSUER || state.issuers.get(authority_ref).is_some_and(|i| i.tenant_id == tenant_id);
    if !grant {
        return Err(invalid(format!("'{authority_ref}' is no token or issuer of this tenant")));
    }
    principal_authority(state, tenant_id, principal_id, authority_ref)
}

/// The authority of the active principal `principal_id` of the open tenant `tenant_id` acting
/// as itself (its current scopes), recorded as coming through `issuer`.
pub fn principal_authority(
    state: &LedgerState,
    tenant_id: &str,
    principal_id: &str,
    issuer: &str,
) -> Result<Authority, Rejection> {
    domain_gate(state, tenant_id)?;
    let p = state
        .principals
        .get(tenant_id)
        .and_then(|m| m.get(principal_id))
        .ok_or_else(|| Rejection::new(ReasonCode::PRINCIPAL_NOT_FOUND, "no such principal"))?;
    principal_itself(p, issuer)
}

/// How far in the future a tenant token's `iat` may lie (clock skew between its issuer and Writ).
pub const CLOCK_SKEW_MS: u64 = 60_000;

/// The principal (id or name) a tenant issuer's token names: its `sub`, or the claim the
/// tenant maps principals from.
fn principal_named<'a>(state: &LedgerState, tenant_id: &str, claims: &'a TenantClaims) -> Result<&'a str, Rejection> {
    let claim = state.oauth.get(tenant_id).and_then(|o| o.settings.principal_claim.as_deref());
    match claim {
        None | Some("sub") => Ok(&claims.sub),
        Some(c) => claims
            .other
            .get(c)
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| invalid(format!("the token lacks claim '{c}', which names this tenant's principals"))),
    }
}

fn verify_tenant_issued(
    state: &LedgerState,
    bearer: &str,
    header: &Header,
    iss: &str,
    kid: &str,
    now_ms: u64,
) -> Result<Authority, Rejection> {
    let issuer = state.issuers.get(iss).ok_or_else(|| invalid(format!("unknown token issuer '{iss}'")))?;
    // Symmetric algorithms would let anyone holding the JWKS forge tokens.
    if matches!(header.alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
        return Err(invalid("symmetric token algorithms are not accepted"));
    }
    let set = issuer.keys().ok_or_else(|| invalid("the issuer's JWKS is unusable"))?;
    let jwk = set.find(kid).ok_or_else(|| invalid(format!("issuer '{iss}' has no key '{kid}'")))?;
    let key = DecodingKey::from_jwk(jwk).map_err(|_| invalid(format!("issuer key '{kid}' is unusable")))?;
    let mut v = validation(header.alg, iss, std::slice::from_ref(&issuer.spec.audience));
    v.algorithms = vec![header.alg];
    let claims = jsonwebtoken::decode::<TenantClaims>(bearer, &key, &v).map_err(map_jwt_error)?.claims;
    if claims.exp.saturating_mul(1000) <= now_ms {
        return Err(Rejection::new(ReasonCode::AUTH_TOKEN_EXPIRED, "the token has expired"));
    }
    if claims.nbf.unwrap_or(0).saturating_mul(1000) > now_ms {
        return Err(Rejection::new(ReasonCode::AUTH_TOKEN_NOT_YET_VALID, "the token is not valid yet"));
    }
    if claims.iat.unwrap_or(0).saturating_mul(1000) > now_ms.saturating_add(CLOCK_SKEW_MS) {
        return Err(invalid("the token claims to be issued in the future"));
    }
    // A tenant's issuer mints tokens no longer-lived than the tenant allows its own.
    let ttl_max_ms =
        state.tenants.get(&issuer.tenant_id).map_or(0, |t| t.settings.token_ttl_max_s.saturating_mul(1000));
    let from_ms = claims.iat.or(claims.nbf).map_or(now_ms, |t| t.saturating_mul(1000).min(now_ms));
    if claims.exp.saturating_mul(1000).saturating_sub(from_ms) > ttl_max_ms {
        return Err(invalid(format!(
            "the token lives longer than the tenant's token_ttl_max_s ({} s)",
            ttl_max_ms / 1000
        )));
    }
    if claims.jti.as_deref().is_some_and(|jti| state.revocations.issuer_token_revoked(iss, jti)) {
        return Err(Rejection::new(ReasonCode::AUTH_TOKEN_REVOKED, "the issuer's token id was revoked"));
    }
    domain_gate(state, &issuer.tenant_id)?;
    let who = principal_named(state, &issuer.tenant_id, &claims)?;
    let p = state
        .principal(&issuer.tenant_id, who)
        .ok_or_else(|| invalid(format!("no principal '{who}' in the issuer's tenant")))?;
    if p.state != PrincipalState::Active {
        return Err(Rejection::new(ReasonCode::AUTH_TOKEN_REVOKED, format!("principal '{}' was revoked", p.name)));
    }
    let asked: Option<BTreeSet<String>> = match (&claims.scope, &claims.scp) {
        (Some(s), _) => Some(s.split_whitespace().map(str::to_string).collect()),
        (None, Some(list)) => Some(list.iter().cloned().collect()),
        (None, None) => None,
    };
    // No scope claim grants no scope (never "everything the principal holds").
    let mut scopes = asked.unwrap_or_default();
    scopes.retain(|s| p.scopes.iter().any(|g| scope_covers(g, s)));
    Ok(Authority {
        tenant_id: issuer.tenant_id.clone(),
        principal_id: p.id.clone(),
        principal_name: p.name.clone(),
        issuer: iss.to_string(),
        token_id: claims.jti,
        parent_token_id: None,
        chain: Vec::new(),
        scopes,
        revoked_scopes: p.revoked_scopes.clone(),
        expires_at_ms: claims.exp.saturating_mul(1000),
    })
}

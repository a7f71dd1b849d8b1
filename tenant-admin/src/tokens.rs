//! Admin routes for credentials: Writ token issue / delegate / revoke / show / inspect, and
//! tenant-owned token issuers. The ledger records and checks every token (scopes ⊆ grant, TTL
//! bounds, delegation depth); this module signs what the ledger accepted.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use writ_api::auth::Signer;
use writ_api::auth::WritClaims;
use writ_api::dto::{
    DelegateTokenRequest, InspectTokenRequest, IssueTokenRequest, IssuedToken, IssuerList, Query as LedgerQuery,
    RemoveIssuerRequest, RevokedToken, TokenExchangeRequest, TokenInspection, TokenList, PAGE_LIMIT_DEFAULT,
};
use writ_api::ledger::{Command, Event};
use writ_api::token::{IssuerSource, IssuerSourceV1, TenantIssuer, TenantIssuerV1, Token, TokenRequestV1, WRIT_ISSUER};
use writ_api::{ReasonCode, Rejection};
use writ_client::now_ms;

use crate::error::{ApiError, ValidJson, ValidQuery};
use crate::service::{find_principal, find_tenant, optional_json, query, submit, AdminState, Shared};

/// Lifetime asked for when a request names none (the tenant's bounds still apply).
pub const TOKEN_TTL_DEFAULT_S: u64 = 3600;

/// Routes that authenticate by what they carry (the subject token), not the operator token.
pub(crate) fn public_routes() -> Router<Shared> {
    Router::new().route(writ_api::dto::ADMIN_TOKEN_EXCHANGE_PATH, post(exchange_token))
}

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/v1/tenants/{tenant}/tokens", post(issue_token).get(list_tokens))
        .route("/v1/tenants/{tenant}/tokens/{jti}", get(show_token))
        .route("/v1/tenants/{tenant}/tokens/{jti}/delegate", post(delegate_token))
        .route("/v1/tenants/{tenant}/tokens/{jti}/revoke", post(revoke_token))
        .route("/v1/tokens/inspect", post(inspect_token))
        .route("/v1/tenants/{tenant}/issuers", get(list_issuers).put(set_issuer))
        .route("/v1/tenants/{tenant}/issuers/remove", post(remove_issuer))
        .route("/v1/tenants/{tenant}/issuers/discover", post(discover_issuer))
}

/// The signer to sign with: this node's key, registered in the ledger and not retired. A key
/// the ledger retired is replaced by a new one first, which is then registered. (A token signed
/// within the replica's lag after a retirement is refused by every verifier: ask again.)
pub(crate) async fn registered_signer(st: &AdminState) -> Result<Arc<Signer>, Rejection> {
    let mut signer = st.signing_keys.current();
    let replace = |signer: &Signer| {
        st.signing_keys
            .replace(signer)
            .map_err(|e| Rejection::new(ReasonCode::INTERNAL, format!("a new signing key could not be stored: {e}")))
    };
    for _ in 0..3 {
        let key = signer.public_key();
        let (registered, retired) = st.view.with_state(|s| {
            (s.signing_keys.get(&key.kid) == Some(key), s.revocations.signing_keys.contains_key(&key.kid))
        });
        if retired {
            signer = replace(&signer)?;
            continue;
        }
        if registered {
            return Ok(signer);
        }
        match submit(st, Command::RegisterSigningKey { key: key.clone() }).await {
            Ok(_) => return Ok(signer),
            Err(r) if r.reason == ReasonCode::CREDENTIAL_RETIRED => signer = replace(&signer)?,
            Err(r) => return Err(r),
        }
    }
    Err(Rejection::new(ReasonCode::INTERNAL, "no signing key of this node could be registered"))
}

/// Records the token in the ledger, then signs what the ledger recorded.
async fn issue(
    st: &AdminState,
    tenant_id: String,
    request: TokenRequestV1,
    audience: Option<String>,
) -> Result<IssuedToken, Rejection> {
    let command = Command::IssueToken { tenant_id: tenant_id.clone(), request };
    issue_signed(st, tenant_id, command, audience).await
}

/// Records `command` (an `IssueToken`, bare or as a principal's verified act) and signs the
/// token the ledger recorded for `audience`.
async fn issue_signed(
    st: &AdminState,
    tenant_id: String,
    command: Command,
    audience: Option<String>,
) -> Result<IssuedToken, Rejection> {
    let audience = audience.unwrap_or_else(|| st.token_audience.clone());
    check_audience(&audience)?;
    let signer = registered_signer(st).await?;
    let events = submit(st, command).await?;
    sign_recorded(&signer, tenant_id, &events, audience)
}

/// An audience a token may be signed for (checked before anything is recorded).
pub(crate) fn check_audience(audience: &str) -> Result<(), Rejection> {
    if audience.is_empty() || audience.len() > writ_api::token::ISSUER_BYTES_MAX {
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, "audience must be 1..=512 bytes"));
    }
    Ok(())
}

/// Signs the token the first of `events` recorded, for `audience`.
pub(crate) fn sign_recorded(
    signer: &Signer,
    tenant_id: String,
    events: &[writ_api::ledger::EventEnvelope],
    audience: String,
) -> Result<IssuedToken, Rejection> {
    let Some((revision, Event::TokenIssuedV1 { token, .. })) = events.first().map(|e| (e.revision, &e.event)) else {
        return Err(Rejection::new(ReasonCode::INTERNAL, "the ledger recorded no token"));
    };
    let scopes: Vec<String> = token.scopes.iter().cloned().collect();
    let claims = WritClaims {
        iss: WRIT_ISSUER.into(),
        sub: token.principal_id.clone(),
        aud: audience.clone(),
        exp: token.expires_at_ms.div_ceil(1000),
        nbf: token.issued_at_ms / 1000,
        iat: token.issued_at_ms / 1000,
        jti: token.jti.clone(),
        tid: tenant_id.clone(),
        scope: scopes.join(" "),
        rev: revision,
    };
    Ok(IssuedToken {
        token: signer.sign(&claims)?,
        jti: token.jti.clone(),
        tenant_id,
        principal_id: token.principal_id.clone(),
        scopes,
        audience,
        expires_at_ms: token.expires_at_ms,
        parent_jti: token.parent_jti.clone(),
        depth: token.depth,
        revision,
    })
}

pub(crate) fn new_jti() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

async fn issue_token(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidJson(b): ValidJson<IssueTokenRequest>,
) -> Result<(StatusCode, Json<IssuedToken>), ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let p = find_principal(&st, t.id.clone(), b.principal).await?;
    let request = TokenRequestV1 {
        jti: new_jti(),
        principal_id: p.id,
        scopes: b.scopes.into_iter().collect(),
        ttl_s: b.ttl_s.unwrap_or(TOKEN_TTL_DEFAULT_S),
        parent_jti: None,
    };
    Ok((StatusCode::CREATED, Json(issue(&st, t.id, request, b.audience).await?)))
}

async fn find_token(st: &AdminState, tenant_id: String, jti: String) -> Result<Token, ApiError> {
    Ok(query(st, LedgerQuery::GetToken { tenant_id, jti }, false).await?)
}

/// `GET /v1/tenants/{tenant}/tokens`: the principal by id or name.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenListParams {
    principal: Option<String>,
    after: Option<String>,
    limit: Option<u32>,
    #[serde(default)]
    stale: bool,
}

async fn list_tokens(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidQuery(p): ValidQuery<TokenListParams>,
) -> Result<Json<TokenList>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let principal_id = match p.principal {
        Some(name) => Some(find_principal(&st, t.id.clone(), name).await?.id),
        None => None,
    };
    let q = LedgerQuery::ListTokens {
        tenant_id: t.id,
        principal_id,
        after: p.after,
        limit: p.limit.unwrap_or(PAGE_LIMIT_DEFAULT),
    };
    Ok(Json(query(&st, q, p.stale).await?))
}

async fn show_token(
    State(st): State<Shared>,
    Path((tenant, jti)): Path<(String, String)>,
) -> Result<Json<Token>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(find_token(&st, t.id, jti).await?))
}

async fn delegate_token(
    State(st): State<Shared>,
    Path((tenant, jti)): Path<(String, String)>,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<(StatusCode, Json<IssuedToken>), ApiError> {
    let b: DelegateTokenRequest = optional_json(body)?;
    let t = find_tenant(&st, tenant).await?;
    let parent = find_token(&st, t.id.clone(), jti.clone()).await?;
    let principal_id = match b.principal {
        Some(p) => find_principal(&st, t.id.clone(), p).await?.id,
        None => parent.record.principal_id.clone(),
    };
    let request = TokenRequestV1 {
        jti: new_jti(),
        principal_id,
        scopes: b.scopes.into_iter().collect(),
        ttl_s: b.ttl_s.unwrap_or(TOKEN_TTL_DEFAULT_S),
        parent_jti: Some(jti),
    };
    Ok((StatusCode::CREATED, Json(issue(&st, t.id, request, b.audience).await?)))
}

/// RFC 8693 token exchange, forwarded by an edge: the subject token's holder gets a narrower
/// child of it — the principal's own act, verified here like an edge's (the child's audience is
/// the subject token's; the ledger checks `tokens:delegate`, the scopes, the expiry and the
/// depth).
async fn exchange_token(
    State(st): State<Shared>,
    ValidJson(b): ValidJson<TokenExchangeRequest>,
) -> Result<Json<IssuedToken>, ApiError> {
    let t = find_tenant(&st, b.tenant).await?;
    let audience = writ_api::auth::segment(&b.subject_token, 1)
        .and_then(|claims| claims["aud"].as_str().map(str::to_string))
        .ok_or_else(|| Rejection::new(ReasonCode::AUTH_TOKEN_INVALID, "the subject token lacks claim 'aud'"))?;
    let authority = st.view.verify(&b.subject_token, std::slice::from_ref(&audience), now_ms()).await?;
    if authority.tenant_id != t.id {
        let message = "the subject token belongs to another tenant than this token endpoint's";
        return Err(Rejection::new(ReasonCode::AUTH_TENANT_MISMATCH, message).into());
    }
    let Some(parent) = authority.token_id.clone().filter(|_| authority.issuer == WRIT_ISSUER) else {
        let message = "only a Writ-issued token is exchanged (the ledger's record of it is the child's parent)";
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, message).into());
    };
    let request = TokenRequestV1 {
        jti: new_jti(),
        principal_id: authority.principal_id.clone(),
        scopes: b.scopes.into_iter().collect(),
        ttl_s: b.ttl_s.unwrap_or(TOKEN_TTL_DEFAULT_S),
        parent_jti: Some(parent.clone()),
    };
    let act = Command::OnBehalfOf {
        authority_ref: parent,
        command: Box::new(Command::IssueToken { tenant_id: t.id.clone(), request }),
    };
    let credential = writ_api::grant::Credential::Bearer(b.subject_token);
    let presenter = writ_api::grant::Presenter { edge_id: "oauth-token-endpoint", node: "admin-api" };
    let verified = st.view.with_state(|s| writ_api::grant::admit(s, act, Some(&credential), &presenter, now_ms()))?;
    Ok(Json(issue_signed(&st, t.id, verified, Some(audience)).await?))
}

async fn revoke_token(
    State(st): State<Shared>,
    Path((tenant, jti)): Path<(String, String)>,
) -> Result<Json<RevokedToken>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let events = submit(&st, Command::RevokeToken { tenant_id: t.id, jti }).await?;
    match events.into_iter().next() {
        Some(e) => match e.event {
            Event::TokenRevokedV1 { jti, cascade, .. } => Ok(Json(RevokedToken { jti, cascade, revision: e.revision })),
            _ => Err(unexpected_events()),
        },
        None => Err(unexpected_events()),
    }
}

async fn inspect_token(
    State(st): State<Shared>,
    ValidJson(b): ValidJson<InspectTokenRequest>,
) -> Result<Json<TokenInspection>, ApiError> {
    let (token_max, audience_max) = (writ_api::auth::BEARER_BYTES_MAX, writ_api::token::ISSUER_BYTES_MAX);
    if b.token.len() > token_max || b.audience.as_ref().is_some_and(|a| a.len() > audience_max) {
        let message = format!("a token is at most {token_max} bytes, an audience at most {audience_max}");
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, message).into());
    }
    // Another audience than this node's: verify against the same state with that audience.
    let audience = b.audience.as_ref().unwrap_or(&st.token_audience);
    let verdict = st.view.verify(&b.token, std::slice::from_ref(audience), now_ms()).await;
    let (valid, reason, message, authority) = match verdict {
        Ok(a) => (true, None, None, Some(a)),
        Err(r) => (false, Some(r.reason), Some(r.message), None),
    };
    Ok(Json(TokenInspection {
        valid,
        reason,
        message,
        authority,
        header: writ_api::auth::segment(&b.token, 0),
        claims: writ_api::auth::segment(&b.token, 1),
    }))
}

async fn list_issuers(State(st): State<Shared>, Path(tenant): Path<String>) -> Result<Json<IssuerList>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(query(&st, LedgerQuery::ListIssuers { tenant_id: t.id }, false).await?))
}

async fn set_issuer(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidJson(b): ValidJson<TenantIssuerV1>,
) -> Result<Json<TenantIssuer>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    // Fail fast with the ledger's own rules (the ledger stays authoritative).
    b.validate()?;
    let events = submit(&st, Command::SetTenantIssuer { tenant_id: t.id.clone(), issuer: b.clone() }).await?;
    let revision = events.first().map(|e| e.revision).unwrap_or_default();
    Ok(Json(TenantIssuer::new(t.id, b, revision)))
}

/// Registers (or replaces) an issuer known by its URL: this server fetches its discovery
/// document and key set (bounded, no redirects, public addresses unless the body allows
/// private networks) and records both; the leader fetches the keys again while it leads.
async fn discover_issuer(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidJson(source): ValidJson<IssuerSourceV1>,
) -> Result<Json<IssuerSource>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let keys = writ_client::discovery::fetch_keys(&source).await?;
    let jwks_uri = keys.jwks_uri.clone();
    let command = Command::SetIssuerSource { tenant_id: t.id.clone(), source: source.clone(), keys };
    let events = submit(&st, command).await?;
    let revision = events.first().map(|e| e.revision).unwrap_or_default();
    Ok(Json(IssuerSource { tenant_id: t.id, spec: source, jwks_uri, revision }))
}

async fn remove_issuer(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidJson(b): ValidJson<RemoveIssuerRequest>,
) -> Result<StatusCode, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    submit(&st, Command::RemoveTenantIssuer { tenant_id: t.id, issuer: b.issuer }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The ledger applied the revocation but reported other events (a bug, not bad input).
fn unexpected_events() -> ApiError {
    ApiError::new(ReasonCode::INTERNAL, "the ledger reported unexpected events for a revocation")
}

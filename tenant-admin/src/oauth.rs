//! Admin routes of the tenants' own authorization servers. Operators register clients (each
//! bound to one principal; a client known by its metadata document is read from it) and decide
//! the authorization requests browsers made; edges forward each step of a grant
//! (`/v1/oauth/grant`): the request, the browser collecting its code, the token endpoint. The
//! ledger decides every step; this module verifies client assertions, makes the secrets it
//! hands out (refresh tokens) and signs the tokens the ledger recorded.

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;
use writ_api::dto::{
    AuthRequestList, AuthRequestView, OAuthClientList, OAuthClientRequest, OAuthGrantAnswer, OAuthGrantRequest,
    RemoveOAuthClientRequest, TokenGrant,
};
use writ_api::ledger::{Command, Event, EventEnvelope};
use writ_api::oauth::{
    digest, is_pkce_value, AuthRequestV1, AuthStatusV1, GrantChangeV1, GrantProofV1, GrantStepV1, NewRefreshV1,
    OAuthClientV1, OAuthSettingsV1, TEXT_BYTES_MAX,
};
use writ_api::token::TokenRequestV1;
use writ_api::{ReasonCode, Rejection};
use writ_client::now_ms;

use crate::error::{ApiError, ValidJson};
use crate::service::{find_principal, find_tenant, submit, AdminState, Shared};
use crate::tokens::{new_jti, registered_signer, sign_recorded, TOKEN_TTL_DEFAULT_S};

/// Operator routes.
pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/v1/tenants/{tenant}/oauth/clients", get(list_clients).put(set_client))
        .route("/v1/tenants/{tenant}/oauth/clients/remove", post(remove_client))
        .route("/v1/tenants/{tenant}/oauth/settings", get(get_settings).put(set_settings))
        .route("/v1/tenants/{tenant}/oauth/requests", get(list_requests))
        .route("/v1/tenants/{tenant}/oauth/requests/{request}/approve", post(approve))
        .route("/v1/tenants/{tenant}/oauth/requests/{request}/deny", post(deny))
}

/// The route edges forward grant steps to (each authenticated by what it carries).
pub(crate) fn public_routes() -> Router<Shared> {
    Router::new().route(writ_api::dto::ADMIN_OAUTH_GRANT_PATH, post(grant))
}

async fn set_client(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidJson(b): ValidJson<OAuthClientRequest>,
) -> Result<Json<OAuthClientV1>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let p = find_principal(&st, t.id.clone(), b.principal).await?;
    let mut client = OAuthClientV1 {
        client_id: b.client_id,
        principal_id: p.id,
        scopes: b.scopes.into_iter().collect(),
        redirect_uris: b.redirect_uris.clone().unwrap_or_default(),
        jwks: b.jwks,
        name: b.name,
    };
    if b.redirect_uris.is_none() && client.jwks.is_none() && client.client_id.starts_with("https://") {
        let document =
            writ_client::discovery::fetch_client_metadata(&client.client_id, b.allow_private_network).await?;
        from_metadata(&mut client, &document)?;
    }
    client.validate()?;
    submit(&st, Command::SetOAuthClient { tenant_id: t.id, client: client.clone() }).await?;
    Ok(Json(client))
}

/// Takes a client ID metadata document's redirect URIs, inline keys and name.
fn from_metadata(client: &mut OAuthClientV1, document: &Value) -> Result<(), Rejection> {
    let invalid = |m: &str| Rejection::new(ReasonCode::OAUTH_CLIENT_METADATA_FAILED, m);
    let uris = document["redirect_uris"].as_array().map(|a| a.iter().filter_map(Value::as_str).map(String::from));
    client.redirect_uris = uris.map(Iterator::collect).unwrap_or_default();
    if document["jwks"].is_object() {
        client.jwks = Some(document["jwks"].to_string());
    } else if document["jwks_uri"].is_string() {
        return Err(invalid("the document names a jwks_uri: register its keys inline (jwks) instead"));
    }
    if client.name.is_none() {
        client.name = document["client_name"].as_str().map(|n| writ_api::audit::truncated(n, TEXT_BYTES_MAX));
    }
    Ok(())
}

async fn get_settings(State(st): State<Shared>, Path(tenant): Path<String>) -> Result<Json<OAuthSettingsV1>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(tenant_oauth(&st, &t.id, |o| o.settings.clone())))
}

async fn set_settings(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidJson(settings): ValidJson<OAuthSettingsV1>,
) -> Result<Json<OAuthSettingsV1>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    settings.validate()?;
    submit(&st, Command::SetOAuthSettings { tenant_id: t.id, settings: settings.clone() }).await?;
    Ok(Json(settings))
}

fn tenant_oauth<T>(st: &AdminState, tenant_id: &str, f: impl FnOnce(&writ_api::oauth::TenantOAuth) -> T) -> T {
    st.view.with_state(|s| f(s.oauth.get(tenant_id).unwrap_or(&Default::default())))
}

async fn list_clients(State(st): State<Shared>, Path(tenant): Path<String>) -> Result<Json<OAuthClientList>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(OAuthClientList { clients: tenant_oauth(&st, &t.id, |o| o.clients.values().cloned().collect()) }))
}

async fn remove_client(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidJson(b): ValidJson<RemoveOAuthClientRequest>,
) -> Result<Json<Value>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let events = submit(&st, Command::RemoveOAuthClient { tenant_id: t.id, client_id: b.client_id.clone() }).await?;
    let revision = events.first().map(|e| e.revision).unwrap_or_default();
    Ok(Json(serde_json::json!({"client_id": b.client_id, "revision": revision})))
}

async fn list_requests(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
) -> Result<Json<AuthRequestList>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let now = now_ms();
    let requests = tenant_oauth(&st, &t.id, |o| {
        let live = o.requests.values().filter(|r| r.expires_at_ms > now);
        live.map(|r| {
            let client = o.clients.get(&r.request.client_id);
            let (status, by) = match &r.status {
                AuthStatusV1::Pending => ("pending", None),
                AuthStatusV1::Approved { by } => ("approved", Some(by.clone())),
                AuthStatusV1::Denied { by } => ("denied", Some(by.clone())),
                AuthStatusV1::CodeIssued { by, .. } => ("code_issued", Some(by.clone())),
            };
            AuthRequestView {
                request_id: r.request.request_id.clone(),
                client_id: r.request.client_id.clone(),
                client_name: client.and_then(|c| c.name.clone()),
                principal_id: client.map(|c| c.principal_id.clone()).unwrap_or_default(),
                redirect_uri: r.request.redirect_uri.clone(),
                scopes: r.request.scopes.iter().cloned().collect(),
                audience: r.request.audience.clone(),
                status: status.into(),
                decided_by: by,
                requested_at_ms: r.requested_at_ms,
                expires_at_ms: r.expires_at_ms,
            }
        })
        .collect()
    });
    Ok(Json(AuthRequestList { requests }))
}

pub(crate) async fn decide(
    st: &AdminState,
    tenant: String,
    request_id: String,
    approve: bool,
) -> Result<Json<Value>, ApiError> {
    let t = find_tenant(st, tenant).await?;
    let step =
        GrantStepV1::Decide { request_id: request_id.clone(), approve, operator: crate::service::actor().name() };
    let events = submit(st, Command::OAuthGrant { tenant_id: t.id, step }).await?;
    let revision = events.first().map(|e| e.revision).unwrap_or_default();
    let status = if approve { "approved" } else { "denied" };
    Ok(Json(serde_json::json!({"request_id": request_id, "status": status, "revision": revision})))
}

async fn approve(
    State(st): State<Shared>,
    Path((tenant, request)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    decide(&st, tenant, request, true).await
}

async fn deny(
    State(st): State<Shared>,
    Path((tenant, request)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    decide(&st, tenant, request, false).await
}

/// One step of a grant, forwarded by an edge. A refused step is recorded in the tenant's audit
/// trail without flooding it ([`record_refusal`]).
async fn grant(
    State(st): State<Shared>,
    ValidJson(b): ValidJson<OAuthGrantRequest>,
) -> Result<Json<OAuthGrantAnswer>, ApiError> {
    let (tenant, client_id, method) = match &b {
        OAuthGrantRequest::Authorize { tenant, client_id, .. } => (tenant, Some(client_id.clone()), AUTHORIZE_METHOD),
        OAuthGrantRequest::Code { tenant, .. } => (tenant, None, AUTHORIZE_METHOD),
        OAuthGrantRequest::Revoke { tenant, client_id, token } => {
            // RFC 7009 §2.2: an invalid token is no error; nothing is recorded for one.
            let t = find_tenant(&st, tenant.clone()).await?;
            if let Err(r) = revoke(&st, &t.id, client_id, token).await {
                metrics::counter!("writ_oauth_token_refused_total", "reason" => r.reason.as_str()).increment(1);
            }
            return Ok(Json(OAuthGrantAnswer::default()));
        }
        OAuthGrantRequest::Token { tenant, grant, .. } => (tenant, grant_client(grant), TOKEN_METHOD),
        OAuthGrantRequest::Refused { tenant, client_id, method, reason } => {
            let t = find_tenant(&st, tenant.clone()).await?;
            let method = if method == AUTHORIZE_METHOD { AUTHORIZE_METHOD } else { TOKEN_METHOD };
            record_refusal(&st, &t.id, client_id.as_deref(), method, *reason).await;
            return Ok(Json(OAuthGrantAnswer::default()));
        }
    };
    let t = find_tenant(&st, tenant.clone()).await?;
    match step(&st, &t.id, b).await {
        Ok(answer) => Ok(Json(answer)),
        Err(r) => {
            metrics::counter!("writ_oauth_token_refused_total", "reason" => r.reason.as_str()).increment(1);
            record_refusal(&st, &t.id, client_id.as_deref(), method, r.reason).await;
            Err(r.into())
        }
    }
}

/// Runs one grant step of tenant `tenant_id`.
async fn step(st: &AdminState, tenant_id: &str, b: OAuthGrantRequest) -> Result<OAuthGrantAnswer, Rejection> {
    match b {
        OAuthGrantRequest::Authorize {
            client_id,
            redirect_uri,
            code_challenge,
            scopes,
            resource,
            state,
            browser_digest,
            ..
        } => {
            let request_id = uuid::Uuid::new_v4().simple().to_string();
            let request = AuthRequestV1 {
                request_id: request_id.clone(),
                client_id,
                redirect_uri,
                code_challenge,
                scopes: scopes.into_iter().collect(),
                audience: resource,
                state,
                browser_digest,
            };
            let events = submit_grant(st, tenant_id, GrantStepV1::Request(request)).await?;
            let revision = events.last().map(|e| e.revision);
            Ok(OAuthGrantAnswer { request_id: Some(request_id), revision, ..Default::default() })
        }
        OAuthGrantRequest::Code { request_id, browser_digest, revision, .. } => {
            st.view.wait_for(revision, RECORDED_WAIT).await;
            let secret = new_secret();
            let step = GrantStepV1::Code { request_id, browser_digest, code_digest: digest(&secret) };
            let events = submit_grant(st, tenant_id, step).await?;
            let revision = events.first().map(|e| e.revision).unwrap_or_default();
            Ok(OAuthGrantAnswer { code: Some(format!("{revision}.{secret}")), ..Default::default() })
        }
        OAuthGrantRequest::Token { grant, scopes, assertion_audiences, resource, .. } => {
            let scopes = scopes.into_iter().collect();
            token(st, tenant_id.to_string(), grant, scopes, &assertion_audiences, resource).await
        }
        OAuthGrantRequest::Refused { .. } | OAuthGrantRequest::Revoke { .. } => Ok(OAuthGrantAnswer::default()),
    }
}

/// Revokes the client's refresh token `token` (`<rev>.<id>.<secret>`).
async fn revoke(st: &AdminState, tenant_id: &str, client_id: &str, token: &str) -> Result<(), Rejection> {
    let rest = recorded(st, token).await?;
    let refresh_id = rest.split('.').next().unwrap_or_default().to_string();
    let step = GrantStepV1::Revoke { client_id: client_id.to_string(), refresh_id, secret_digest: digest(rest) };
    submit_grant(st, tenant_id, step).await.map(|_| ())
}

/// Submits a grant step the ledger would decide to accept on this node's replica: one it would
/// refuse (an unknown, used or expired code or refresh token, a wrong verifier, a replayed
/// assertion, a full request queue) is refused here, so no refusal of an unauthenticated
/// caller becomes a ledger entry of its own.
async fn submit_grant(st: &AdminState, tenant_id: &str, step: GrantStepV1) -> Result<Vec<EventEnvelope>, Rejection> {
    let command = Command::OAuthGrant { tenant_id: tenant_id.to_string(), step };
    st.view.with_state(|s| writ_api::decide::decide(s, &command, now_ms().max(s.clock_ms)))?;
    submit(st, command).await
}

/// The method names refusals are recorded under.
const AUTHORIZE_METHOD: &str = "oauth/authorize";
const TOKEN_METHOD: &str = "oauth/token";
/// The client a token request names (for the audit of its refusal).
fn grant_client(grant: &TokenGrant) -> Option<String> {
    match grant {
        TokenGrant::AuthorizationCode { client_id, .. } | TokenGrant::RefreshToken { client_id, .. } => {
            Some(client_id.clone())
        }
        TokenGrant::ClientCredentials { client_assertion } => writ_api::oauth::assertion_client(client_assertion),
    }
}

/// Records a refused grant step in the tenant's audit trail as a denied decision — of the
/// client's principal when the client is registered (named by its id), else of
/// `unauthenticated` (no client-chosen text), without flooding it ([`crate::refusals`]).
async fn record_refusal(
    st: &AdminState,
    tenant_id: &str,
    client_id: Option<&str>,
    method: &'static str,
    reason: ReasonCode,
) {
    let principal =
        client_id.and_then(|c| tenant_oauth(st, tenant_id, |o| o.clients.get(c).map(|c| c.principal_id.clone())));
    let (who, name) = match principal {
        Some(p) => (p, client_id.map(str::to_string)),
        None => ("unauthenticated".to_string(), None),
    };
    crate::refusals::record(st, tenant_id, who, name, method, reason).await;
}

/// 256 random bits, hex.
fn new_secret() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// `<rev>.<rest>`: waits (briefly) until this node's view holds revision `rev`, and gives `rest`.
async fn recorded<'a>(st: &AdminState, value: &'a str) -> Result<&'a str, Rejection> {
    let invalid = || Rejection::new(ReasonCode::OAUTH_GRANT_INVALID, "the code or refresh token is malformed");
    let (revision, rest) = value.split_once('.').ok_or_else(invalid)?;
    let revision: u64 = revision.parse().map_err(|_| invalid())?;
    st.view.wait_for(revision, RECORDED_WAIT).await;
    Ok(rest)
}

/// How long a redemption waits for this node's view to hold the code or refresh token.
const RECORDED_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// What a token request proves, in the ledger's terms. Codes and refresh tokens are waited for
/// (their revision) so that this node's replica holds them when the step is checked.
async fn proof_of(
    st: &AdminState,
    tenant_id: &str,
    grant: TokenGrant,
    assertion_audiences: &[String],
    resource: Option<String>,
) -> Result<(String, GrantProofV1, bool), Rejection> {
    match grant {
        TokenGrant::AuthorizationCode { client_id, code, code_verifier, redirect_uri } => {
            if !is_pkce_value(&code_verifier) {
                return Err(Rejection::new(ReasonCode::OAUTH_PKCE_INVALID, "code_verifier is missing or malformed"));
            }
            let code_digest = digest(recorded(st, &code).await?);
            Ok((client_id, GrantProofV1::Code { code_digest, verifier: code_verifier, redirect_uri }, true))
        }
        TokenGrant::RefreshToken { client_id, refresh_token } => {
            let rest = recorded(st, &refresh_token).await?;
            let refresh_id = rest.split('.').next().unwrap_or_default().to_string();
            Ok((client_id, GrantProofV1::Refresh { refresh_id, secret_digest: digest(rest) }, true))
        }
        TokenGrant::ClientCredentials { client_assertion } => {
            let unknown = |m: String| Rejection::new(ReasonCode::OAUTH_CLIENT_UNKNOWN, m);
            let client_id = writ_api::oauth::assertion_client(&client_assertion)
                .ok_or_else(|| unknown("the client assertion names no client (iss = sub)".into()))?;
            let client = tenant_oauth(st, tenant_id, |o| o.clients.get(&client_id).cloned())
                .ok_or_else(|| unknown(format!("no client '{client_id}' is registered")))?;
            let (jti, expires_at_ms) =
                writ_api::oauth::verify_assertion(&client, &client_assertion, assertion_audiences, now_ms())?;
            let audience = resource.ok_or_else(|| {
                Rejection::new(ReasonCode::OAUTH_RESOURCE_INVALID, "the resource (the tenant's MCP URL) is required")
            })?;
            Ok((client_id, GrantProofV1::Assertion { jti, expires_at_ms, audience }, false))
        }
    }
}

/// The token endpoint's grants: the proof and client the ledger checks, then the signature.
async fn token(
    st: &AdminState,
    tenant_id: String,
    grant: TokenGrant,
    scopes: std::collections::BTreeSet<String>,
    assertion_audiences: &[String],
    resource: Option<String>,
) -> Result<OAuthGrantAnswer, Rejection> {
    let (client_id, proof, refreshes) = proof_of(st, &tenant_id, grant, assertion_audiences, resource).await?;
    let principal_id = tenant_oauth(st, &tenant_id, |o| o.clients.get(&client_id).map(|c| c.principal_id.clone()))
        .ok_or_else(|| {
            Rejection::new(ReasonCode::OAUTH_CLIENT_UNKNOWN, format!("no client '{client_id}' is registered"))
        })?;
    let request = TokenRequestV1 { jti: new_jti(), principal_id, scopes, ttl_s: TOKEN_TTL_DEFAULT_S, parent_jti: None };
    // A refresh token is `<rev>.<id>.<secret>`; the ledger keeps the id and the digest of `<id>.<secret>`.
    let (refresh_id, secret) = (uuid::Uuid::new_v4().simple().to_string(), new_secret());
    let refresh = refreshes.then(|| NewRefreshV1 {
        refresh_id: refresh_id.clone(),
        secret_digest: digest(&format!("{refresh_id}.{secret}")),
    });
    let has_refresh = refresh.is_some();
    let step = GrantStepV1::Redeem { client_id, proof, token: request, refresh };
    let signer = registered_signer(st).await?;
    let events = submit_grant(st, &tenant_id, step).await?;
    let audience = redeemed_audience(&events)?;
    let token = sign_recorded(&signer, tenant_id, &events, audience)?;
    let refresh_token = has_refresh.then(|| format!("{}.{refresh_id}.{secret}", token.revision));
    Ok(OAuthGrantAnswer { token: Some(token), refresh_token, ..Default::default() })
}

/// The audience the ledger recorded for a redemption's token.
fn redeemed_audience(events: &[EventEnvelope]) -> Result<String, Rejection> {
    events
        .iter()
        .find_map(|e| match &e.event {
            Event::OAuthGrantV1 { change: GrantChangeV1::Redeemed { audience, .. }, .. } => Some(audience.clone()),
            _ => None,
        })
        .ok_or_else(|| Rejection::new(ReasonCode::INTERNAL, "the ledger recorded no redemption"))
}

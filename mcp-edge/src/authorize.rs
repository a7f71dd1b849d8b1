//! A tenant's own authorization server, as the edge serves it to clients and browsers:
//! - RFC 8414 metadata at `/.well-known/oauth-authorization-server/t/{tenant}` (issuer
//!   `{origin}/t/{tenant}`);
//! - the authorization endpoint `GET /t/{tenant}/oauth/authorize` (authorization code, PKCE
//!   S256 only, the resource must be the tenant's MCP URL): the client and redirect URI are
//!   checked against the tenant's registered clients before anything is recorded; a valid
//!   request waits for an operator (`writ admin oauth approve`), the browser holding a cookie
//!   only it has;
//! - `GET /t/{tenant}/oauth/authorize/wait?request=…`: the page the browser reloads until the
//!   request is decided, then the redirect with the code (or `access_denied`).
//!
//! Every step is decided by the ledger through a node's admin API; an edge keeps no grant.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use serde_json::json;
use writ_api::dto::{OAuthGrantAnswer, OAuthGrantRequest, ADMIN_OAUTH_GRANT_PATH};
use writ_api::oauth::{digest, is_pkce_value, AuthStatusV1, REQUESTS_MAX, TEXT_BYTES_MAX};
use writ_api::{ReasonCode, Rejection};

use crate::Edge;

/// Where a tenant's authorization endpoint is.
pub const AUTHORIZE_PATH: &str = "/t/{tenant}/oauth/authorize";
/// The page a browser waits on for an operator.
pub const WAIT_PATH: &str = "/t/{tenant}/oauth/authorize/wait";
/// Where a tenant's authorization server metadata is (RFC 8414 §3, path insertion).
pub const METADATA_PATH: &str = "/.well-known/oauth-authorization-server/t/{tenant}";
/// Longest query string of an authorization request.
const QUERY_BYTES_MAX: usize = 8 * 1024;
/// How often the waiting page reloads (seconds).
const WAIT_RELOAD_S: u64 = 2;
/// How long a new authorization request waits for this edge's replica to hold it.
const REQUEST_FOLLOW_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The routes of the tenants' authorization servers.
pub(crate) fn routes() -> axum::Router<Arc<Edge>> {
    axum::Router::new()
        .route(METADATA_PATH, axum::routing::get(metadata))
        .route(AUTHORIZE_PATH, axum::routing::get(authorize))
        .route(WAIT_PATH, axum::routing::get(wait))
}

/// Whether this edge serves tenant `name`'s authorization server: the tenant is served and the
/// edge can forward to an admin API.
fn served(edge: &Edge, name: &str) -> bool {
    edge.admin.is_some() && edge.verifier.with_state(|s| crate::url_tenant_of(s, name).is_some())
}

async fn metadata(State(edge): State<Arc<Edge>>, Path(tenant): Path<String>, headers: HeaderMap) -> Response {
    if let Err(e) = crate::check_host_and_origin(&edge.config, &headers) {
        return e.into_response();
    }
    if !served(&edge, &tenant) {
        let e = Rejection::new(ReasonCode::TENANT_NOT_FOUND, format!("no tenant '{tenant}' is served here"));
        return crate::RpcError::rejected(&e).into_response();
    }
    let issuer = edge.config.tenant_issuer(&tenant);
    let scopes = edge.verifier.with_state(|s| crate::url_tenant_of(s, &tenant).map(|t| crate::scopes_of(s, t)));
    axum::Json(json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/oauth/authorize"),
        "token_endpoint": format!("{issuer}/oauth/token"),
        "revocation_endpoint": format!("{issuer}/oauth/revoke"),
        "revocation_endpoint_auth_methods_supported": ["none"],
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": [
            "authorization_code",
            "refresh_token",
            "client_credentials",
            crate::oauth::TOKEN_EXCHANGE_GRANT
        ],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none", "private_key_jwt"],
        "token_endpoint_auth_signing_alg_values_supported": ["ES256", "ES384", "RS256", "PS256", "EdDSA"],
        "client_id_metadata_document_supported": true,
        "authorization_response_iss_parameter_supported": true,
        "scopes_supported": scopes.unwrap_or_default(),
    }))
    .into_response()
}

/// An error page (nothing is redirected before the client and redirect URI are known good).
fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title></head>\
         <body><main><h1>{t}</h1><p>{b}</p></main></body></html>",
        t = escape(title),
        b = escape(body)
    );
    let mut r = (status, Html(html)).into_response();
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn refused_page(reason: ReasonCode, message: &str) -> Response {
    metrics::counter!("writ_edge_requests_refused_total", "reason" => reason.as_str()).increment(1);
    let status = StatusCode::from_u16(reason.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
    page(status, "Authorization refused", &format!("{message} ({reason})"))
}

/// A redirect to the client (RFC 6749 §4.1.2), with the issuer (RFC 9207).
fn back_to(redirect_uri: &str, params: &[(&str, &str)], issuer: &str) -> Response {
    let mut pairs: Vec<(&str, &str)> = params.to_vec();
    pairs.push(("iss", issuer));
    let query = serde_urlencoded::to_string(&pairs).unwrap_or_default();
    let sep = if redirect_uri.contains('?') { '&' } else { '?' };
    let mut r = StatusCode::FOUND.into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("{redirect_uri}{sep}{query}")) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// An OAuth error sent back to the client, with Writ's reason.
fn error_back(redirect_uri: &str, state: Option<&str>, error: &str, reason: ReasonCode, issuer: &str) -> Response {
    metrics::counter!("writ_edge_requests_refused_total", "reason" => reason.as_str()).increment(1);
    let mut params = vec![("error", error), ("error_description", reason.as_str())];
    if let Some(s) = state {
        params.push(("state", s));
    }
    back_to(redirect_uri, &params, issuer)
}

fn query_of(raw: Option<&str>) -> Result<HashMap<String, String>, &'static str> {
    let raw = raw.unwrap_or_default();
    if raw.len() > QUERY_BYTES_MAX {
        return Err("the authorization request is too long");
    }
    serde_urlencoded::from_str(raw).map_err(|_| "the authorization request is not a query string")
}

/// The method names the audit records refusals under.
pub(crate) const AUTHORIZE_METHOD: &str = "oauth/authorize";
pub(crate) const TOKEN_METHOD: &str = "oauth/token";

/// Has the node record a refusal this edge made in the tenant's audit trail (in the background:
/// the node records at most one per kind per window, so a flood of them costs no ledger entries).
pub(crate) fn note_refusal(edge: &Arc<Edge>, tenant: &str, client_id: Option<&str>, method: &str, reason: ReasonCode) {
    let step = OAuthGrantRequest::Refused {
        tenant: tenant.to_string(),
        client_id: client_id.map(|c| writ_api::audit::truncated(c, writ_api::token::ISSUER_BYTES_MAX)),
        method: method.to_string(),
        reason,
    };
    // At most NOTES_IN_FLIGHT at once: a flood of refusals costs no more (past it they are
    // counted by `writ_edge_requests_refused_total` only).
    let Ok(permit) = NOTES.try_acquire() else { return };
    let edge = edge.clone();
    tokio::spawn(async move {
        if let Err(e) = forward(&edge, &step).await {
            tracing::debug!(reason = %e.reason, "a refusal could not be recorded");
        }
        drop(permit);
    });
}

/// Most refusal notes on their way to a node at once.
const NOTES_IN_FLIGHT: usize = 16;
static NOTES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(NOTES_IN_FLIGHT);

/// Forwards a grant step to the admin API.
pub(crate) async fn forward(edge: &Edge, step: &OAuthGrantRequest) -> Result<OAuthGrantAnswer, Rejection> {
    let Some(forward) = edge.admin.clone() else {
        return Err(Rejection::new(ReasonCode::NOT_FOUND, "this edge serves no authorization server"));
    };
    let body = axum::body::Bytes::from(serde_json::to_vec(step).unwrap_or_default());
    let answer = forward(ADMIN_OAUTH_GRANT_PATH, body).await;
    let ok = answer.status().is_success();
    let bytes = axum::body::to_bytes(answer.into_body(), 64 * 1024).await.unwrap_or_default();
    if ok {
        return serde_json::from_slice(&bytes)
            .map_err(|e| Rejection::new(ReasonCode::INTERNAL, format!("unexpected answer: {e}")));
    }
    let refusal: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let reason = serde_json::from_value(refusal["reason"].clone()).unwrap_or(ReasonCode::INTERNAL);
    Err(Rejection::new(reason, refusal["message"].as_str().unwrap_or("refused")))
}

/// `GET /t/{tenant}/oauth/authorize`.
async fn authorize(
    State(edge): State<Arc<Edge>>,
    Path(tenant): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = crate::check_host_and_origin(&edge.config, &headers) {
        return e.into_response();
    }
    if !served(&edge, &tenant) {
        return refused_page(ReasonCode::TENANT_NOT_FOUND, &format!("no tenant '{tenant}' is served here"));
    }
    let q = match query_of(raw.as_deref()) {
        Ok(q) => q,
        Err(why) => return refused_page(ReasonCode::INPUT_INVALID, why),
    };
    let field = |name: &str| q.get(name).map(String::as_str);
    let (Some(client_id), Some(redirect_uri)) = (field("client_id"), field("redirect_uri")) else {
        return refused_page(ReasonCode::INPUT_INVALID, "client_id and redirect_uri are required");
    };
    // The client and its redirect URI first: until both are known good nothing is redirected.
    let registered = edge.verifier.with_state(|s| {
        let t = crate::url_tenant_of(s, &tenant)?;
        let oauth = s.oauth.get(&t.id)?;
        let client = oauth.clients.get(client_id)?;
        Some((client.redirect_uris.iter().any(|u| u == redirect_uri), oauth.requests.len()))
    });
    match registered {
        None => {
            note_refusal(&edge, &tenant, Some(client_id), AUTHORIZE_METHOD, ReasonCode::OAUTH_CLIENT_UNKNOWN);
            return refused_page(ReasonCode::OAUTH_CLIENT_UNKNOWN, "this client is not registered with the tenant: ask an operator to register it (writ admin oauth client set)");
        }
        Some((false, _)) => {
            note_refusal(&edge, &tenant, Some(client_id), AUTHORIZE_METHOD, ReasonCode::OAUTH_REDIRECT_INVALID);
            return refused_page(
                ReasonCode::OAUTH_REDIRECT_INVALID,
                "the redirect URI is not one the client registered",
            );
        }
        Some((true, open)) if open >= REQUESTS_MAX => {
            return refused_page(
                ReasonCode::QUOTA_EXCEEDED,
                "too many authorization requests are open: try again later",
            )
        }
        Some(_) => {}
    }
    let issuer = edge.config.tenant_issuer(&tenant);
    let state = field("state").filter(|s| s.len() <= TEXT_BYTES_MAX);
    let back = |error: &str, reason: ReasonCode| {
        note_refusal(&edge, &tenant, Some(client_id), AUTHORIZE_METHOD, reason);
        error_back(redirect_uri, state, error, reason, &issuer)
    };
    if field("state").is_some() && state.is_none() {
        return back("invalid_request", ReasonCode::INPUT_INVALID);
    }
    if field("response_type") != Some("code") {
        return back("unsupported_response_type", ReasonCode::INPUT_INVALID);
    }
    let challenge = field("code_challenge").filter(|c| is_pkce_value(c));
    let (Some(challenge), Some("S256")) = (challenge, field("code_challenge_method")) else {
        return back("invalid_request", ReasonCode::OAUTH_PKCE_INVALID);
    };
    let resource = edge.config.tenant_url(&tenant);
    if field("resource").is_some_and(|r| r != resource) {
        return back("invalid_target", ReasonCode::OAUTH_RESOURCE_INVALID);
    }
    let browser = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    let step = OAuthGrantRequest::Authorize {
        tenant: tenant.clone(),
        client_id: client_id.to_string(),
        redirect_uri: redirect_uri.to_string(),
        code_challenge: challenge.to_string(),
        scopes: field("scope").map(|s| s.split_whitespace().map(str::to_string).collect()).unwrap_or_default(),
        resource,
        state: state.map(str::to_string),
        browser_digest: digest(&browser),
    };
    match forward(&edge, &step).await {
        Ok(OAuthGrantAnswer { request_id: Some(id), revision, .. }) => {
            // The waiting page reads this edge's replica: it must hold the request first.
            if let Some(revision) = revision {
                edge.verifier.wait_for(revision, REQUEST_FOLLOW_WAIT).await;
            }
            waiting_redirect(&edge, &tenant, &id, &browser)
        }
        Ok(_) => back("server_error", ReasonCode::INTERNAL),
        Err(r) => back(oauth_error_of(r.reason), r.reason),
    }
}

/// The OAuth error (RFC 6749 §4.1.2.1) a refusal of an authorization request is.
fn oauth_error_of(reason: ReasonCode) -> &'static str {
    match reason {
        ReasonCode::APP_SCOPE_FORBIDDEN | ReasonCode::APP_SCOPE_REVOKED => "invalid_scope",
        ReasonCode::OAUTH_ACCESS_DENIED => "access_denied",
        r if r.http_status() >= 500 || r == ReasonCode::QUOTA_EXCEEDED => "temporarily_unavailable",
        _ => "invalid_request",
    }
}

/// The cookie that binds request `id` to the browser that made it.
fn cookie_name(id: &str) -> String {
    format!("writ_authz_{id}")
}

/// 303 to the waiting page, with the browser's cookie.
fn waiting_redirect(edge: &Edge, tenant: &str, id: &str, browser: &str) -> Response {
    let secure = if edge.config.canonical_url.starts_with("https://") { "; Secure" } else { "" };
    let cookie = format!(
        "{}={browser}; Path=/t/{tenant}/oauth; Max-Age={}; HttpOnly; SameSite=Lax{secure}",
        cookie_name(id),
        writ_api::oauth::REQUEST_TTL_MS / 1000
    );
    let mut r = StatusCode::SEE_OTHER.into_response();
    let location = format!("/t/{tenant}/oauth/authorize/wait?request={id}");
    for (name, value) in [(header::LOCATION, location), (header::SET_COOKIE, cookie)] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            r.headers_mut().insert(name, v);
        }
    }
    r
}

/// `GET /t/{tenant}/oauth/authorize/wait?request=…`.
async fn wait(
    State(edge): State<Arc<Edge>>,
    Path(tenant): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = crate::check_host_and_origin(&edge.config, &headers) {
        return e.into_response();
    }
    let q = match query_of(raw.as_deref()) {
        Ok(q) => q,
        Err(why) => return refused_page(ReasonCode::INPUT_INVALID, why),
    };
    let Some(id) = q.get("request").filter(|id| id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric())) else {
        return refused_page(ReasonCode::INPUT_INVALID, "which request?");
    };
    let request = edge.verifier.with_state(|s| {
        let t = crate::url_tenant_of(s, &tenant)?;
        s.oauth.get(&t.id)?.requests.get(id).cloned()
    });
    let Some(request) = request else {
        return refused_page(
            ReasonCode::OAUTH_GRANT_INVALID,
            "no such open authorization request (it may have expired)",
        );
    };
    let browser = writ_client::cookie(&headers, &cookie_name(id)).unwrap_or_default();
    if digest(browser) != request.request.browser_digest {
        return refused_page(ReasonCode::OAUTH_GRANT_INVALID, "this request was made from another browser");
    }
    let issuer = edge.config.tenant_issuer(&tenant);
    let (redirect_uri, state) = (request.request.redirect_uri.as_str(), request.request.state.as_deref());
    match request.status {
        AuthStatusV1::Pending => waiting_page(&tenant, id, &request.request.client_id),
        AuthStatusV1::Denied { .. } => {
            error_back(redirect_uri, state, "access_denied", ReasonCode::OAUTH_ACCESS_DENIED, &issuer)
        }
        AuthStatusV1::CodeIssued { .. } => {
            refused_page(ReasonCode::OAUTH_GRANT_INVALID, "the code of this request was handed out already")
        }
        AuthStatusV1::Approved { .. } => {
            let step = OAuthGrantRequest::Code {
                tenant: tenant.clone(),
                request_id: id.clone(),
                browser_digest: digest(browser),
                revision: edge.verifier.revision(),
            };
            match forward(&edge, &step).await {
                Ok(OAuthGrantAnswer { code: Some(code), .. }) => {
                    let mut params = vec![("code", code.as_str())];
                    if let Some(s) = state {
                        params.push(("state", s));
                    }
                    back_to(redirect_uri, &params, &issuer)
                }
                Ok(_) => error_back(redirect_uri, state, "server_error", ReasonCode::INTERNAL, &issuer),
                Err(r) => error_back(redirect_uri, state, oauth_error_of(r.reason), r.reason, &issuer),
            }
        }
    }
}

/// What the browser shows while an operator decides: it reloads itself.
fn waiting_page(tenant: &str, id: &str, client_id: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{WAIT_RELOAD_S}\"><title>Waiting for approval</title></head>\
         <body><main><h1>Waiting for an operator</h1>\
         <p>{client} asks to act for tenant {tenant}. An operator approves it with:</p>\
         <pre>writ admin oauth request approve --tenant {tenant} {id}</pre>\
         <p>This page reloads by itself.</p></main></body></html>",
        client = escape(client_id),
        tenant = escape(tenant),
    );
    let mut r = Html(html).into_response();
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

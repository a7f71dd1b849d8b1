//! A tenant's OAuth token endpoint, `POST /t/{tenant}/oauth/token`, with four grants:
//! - `authorization_code` (public clients, PKCE S256) and `refresh_token`, for the codes and
//!   refresh tokens of the tenant's own authorization server (`authorize`);
//! - `client_credentials` for a headless agent authenticating with `private_key_jwt` (RFC 7523)
//!   against the keys its registration holds;
//! - RFC 8693 token exchange: the holder of a Writ token of the tenant with `tokens:delegate`
//!   exchanges it for a narrower child — the same principal and audience, scopes within the
//!   token's, an expiry no later — without an operator. It is admitted against the subject
//!   principal's request quotas like any of its requests.
//!
//! The edge checks the form and the resource (RFC 8707: the tenant's MCP URL) and forwards the
//! grant to a node's admin API, which checks it against the ledger, records the token as a
//! ledger token record and signs it: no edge holds a signing key. Answers follow RFC 6749 §5,
//! never cached; a refusal is `{"error", "error_description", "reason"}` with the OAuth error
//! its reason code means.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use writ_api::dto::{
    IssuedToken, OAuthGrantAnswer, OAuthGrantRequest, TokenExchangeRequest, TokenGrant, ADMIN_TOKEN_EXCHANGE_PATH,
};
use writ_api::ReasonCode;

use crate::Edge;

/// The grant type of RFC 8693.
pub const TOKEN_EXCHANGE_GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// The token type of the subject token and of the token issued.
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
/// The client assertion type of `private_key_jwt` (RFC 7523 §2.2).
pub const JWT_BEARER_ASSERTION: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// The subject token may also be named a JWT (Writ tokens are JWTs).
const JWT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
/// Where a tenant's token endpoint is.
pub const TOKEN_PATH: &str = "/t/{tenant}/oauth/token";
/// Largest token request body read.
pub const TOKEN_REQUEST_BYTES_MAX: usize = 16 * 1024;
/// Largest answer read back from the admin API.
const ANSWER_BYTES_MAX: usize = 64 * 1024;

/// Where a tenant's revocation endpoint is (RFC 7009).
pub const REVOKE_PATH: &str = "/t/{tenant}/oauth/revoke";

/// `POST /t/{tenant}/oauth/token`.
pub(crate) fn token_route() -> axum::routing::MethodRouter<Arc<Edge>> {
    axum::routing::post(token).layer(axum::extract::DefaultBodyLimit::max(TOKEN_REQUEST_BYTES_MAX))
}

/// `POST /t/{tenant}/oauth/revoke`.
pub(crate) fn revoke_route() -> axum::routing::MethodRouter<Arc<Edge>> {
    axum::routing::post(revoke).layer(axum::extract::DefaultBodyLimit::max(TOKEN_REQUEST_BYTES_MAX))
}

/// RFC 7009: a client revokes one of its refresh tokens (`token`, `client_id`). An unknown or
/// another client's token is no error (§2.2); access tokens are short-lived and revoked by an
/// operator (`writ admin token revoke`), so they are `unsupported_token_type` here.
async fn revoke(
    State(edge): State<Arc<Edge>>,
    Path(tenant): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(e) = crate::check_host_and_origin(&edge.config, &headers) {
        return e.into_response();
    }
    let form = match form_of(&body) {
        Ok(f) => f,
        Err(refused) => return refused.into_response(),
    };
    let field = |name: &str| form.get(name).filter(|v| !v.is_empty()).cloned();
    let (Some(token), Some(client_id)) = (field("token"), field("client_id")) else {
        return invalid("token and client_id are required").into_response();
    };
    if token.split('.').count() == 3 && writ_api::auth::segment(&token, 1).is_some() {
        let m = "access tokens are revoked by an operator (writ admin token revoke)";
        return oauth_error(StatusCode::BAD_REQUEST, "unsupported_token_type", ReasonCode::INPUT_INVALID, m)
            .into_response();
    }
    let step = OAuthGrantRequest::Revoke { tenant, client_id, token };
    match crate::authorize::forward(&edge, &step).await {
        Ok(_) => no_store(StatusCode::OK.into_response()),
        Err(r) => refusal_of(r.reason, &r.message).into_response(),
    }
}

/// An OAuth error answer (RFC 6749 §5.2) with Writ's reason code.
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    error: &'static str,
    reason: ReasonCode,
    description: String,
}

fn oauth_error(status: StatusCode, error: &'static str, reason: ReasonCode, description: &str) -> Refusal {
    Refusal { status, error, reason, description: description.to_string() }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = json!({"error": self.error, "error_description": self.description, "reason": self.reason});
        no_store((self.status, axum::Json(body)).into_response())
    }
}

fn no_store(mut r: Response) -> Response {
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

type Form = HashMap<String, String>;

fn invalid(m: &str) -> Refusal {
    oauth_error(StatusCode::BAD_REQUEST, "invalid_request", ReasonCode::INPUT_INVALID, m)
}

fn form_of(body: &[u8]) -> Result<Form, Refusal> {
    serde_urlencoded::from_bytes(body).map_err(|_| invalid("the body is not an application/x-www-form-urlencoded form"))
}

/// The exchange the form asks for, or the OAuth error its fault is.
fn exchange_request(tenant: String, form: &Form) -> Result<TokenExchangeRequest, Refusal> {
    let field = |name: &str| form.get(name).map(String::as_str);
    let subject_token =
        field("subject_token").filter(|t| !t.is_empty()).ok_or_else(|| invalid("subject_token is required"))?;
    if !matches!(field("subject_token_type"), Some(ACCESS_TOKEN_TYPE | JWT_TOKEN_TYPE)) {
        return Err(invalid("subject_token_type must be an access token or a JWT"));
    }
    if field("requested_token_type").is_some_and(|t| t != ACCESS_TOKEN_TYPE) {
        return Err(invalid("only access tokens are issued"));
    }
    if field("actor_token").is_some() {
        return Err(invalid("impersonation only: actor tokens are not accepted"));
    }
    // The child keeps the subject token's audience: a resource or audience naming another is refused.
    let audience = writ_api::auth::segment(subject_token, 1).and_then(|c| c["aud"].as_str().map(str::to_string));
    for target in [field("resource"), field("audience")].into_iter().flatten() {
        if Some(target) != audience.as_deref() {
            let m = "the child token keeps the subject token's audience";
            return Err(oauth_error(StatusCode::BAD_REQUEST, "invalid_target", ReasonCode::INPUT_INVALID, m));
        }
    }
    Ok(TokenExchangeRequest { tenant, subject_token: subject_token.to_string(), scopes: scopes_of(form), ttl_s: None })
}

fn scopes_of(form: &Form) -> Vec<String> {
    form.get("scope").map(|s| s.split_whitespace().map(str::to_string).collect()).unwrap_or_default()
}

/// The grant of the tenant's own authorization server the form asks for.
fn grant_request(edge: &Edge, tenant: String, form: &Form) -> Result<OAuthGrantRequest, Refusal> {
    let field = |name: &str| form.get(name).map(String::as_str).filter(|v| !v.is_empty());
    let required = |name: &str| field(name).map(str::to_string).ok_or_else(|| invalid(&format!("{name} is required")));
    let resource = edge.config.tenant_url(&tenant);
    if field("resource").is_some_and(|r| r != resource) {
        let m = "the resource must be this tenant's MCP URL";
        return Err(oauth_error(StatusCode::BAD_REQUEST, "invalid_target", ReasonCode::OAUTH_RESOURCE_INVALID, m));
    }
    let grant = match field("grant_type") {
        Some("authorization_code") => {
            let Some(verifier) = field("code_verifier") else {
                let m = "code_verifier is required (PKCE)";
                return Err(oauth_error(StatusCode::BAD_REQUEST, "invalid_request", ReasonCode::OAUTH_PKCE_INVALID, m));
            };
            TokenGrant::AuthorizationCode {
                client_id: required("client_id")?,
                code: required("code")?,
                code_verifier: verifier.to_string(),
                redirect_uri: required("redirect_uri")?,
            }
        }
        Some("refresh_token") => {
            TokenGrant::RefreshToken { client_id: required("client_id")?, refresh_token: required("refresh_token")? }
        }
        _ => {
            if field("client_assertion_type") != Some(JWT_BEARER_ASSERTION) {
                let m = "client credentials authenticate with private_key_jwt (client_assertion)";
                return Err(oauth_error(
                    StatusCode::UNAUTHORIZED,
                    "invalid_client",
                    ReasonCode::OAUTH_CLIENT_UNKNOWN,
                    m,
                ));
            }
            TokenGrant::ClientCredentials { client_assertion: required("client_assertion")? }
        }
    };
    let issuer = edge.config.tenant_issuer(&tenant);
    let assertion_audiences = vec![format!("{issuer}/oauth/token"), issuer];
    Ok(OAuthGrantRequest::Token {
        tenant,
        grant,
        scopes: scopes_of(form),
        assertion_audiences,
        resource: Some(resource),
    })
}

async fn token(State(edge): State<Arc<Edge>>, Path(tenant): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(e) = crate::check_host_and_origin(&edge.config, &headers) {
        return e.into_response();
    }
    if edge.admin.is_none() {
        let m = "this edge serves no token endpoint (no admin API to forward to)";
        return oauth_error(StatusCode::NOT_FOUND, "invalid_request", ReasonCode::NOT_FOUND, m).into_response();
    }
    let form = match form_of(&body) {
        Ok(f) => f,
        Err(refused) => return refused.into_response(),
    };
    let answer = match form.get("grant_type").map(String::as_str) {
        Some(TOKEN_EXCHANGE_GRANT) => exchange(&edge, tenant, &form).await,
        Some("authorization_code" | "refresh_token" | "client_credentials") => granted(&edge, tenant, &form).await,
        _ => {
            let m = format!(
                "grant_type must be authorization_code, refresh_token, client_credentials or {TOKEN_EXCHANGE_GRANT}"
            );
            Err(oauth_error(StatusCode::BAD_REQUEST, "unsupported_grant_type", ReasonCode::INPUT_INVALID, &m))
        }
    };
    answer.unwrap_or_else(IntoResponse::into_response)
}

/// A grant of the tenant's own authorization server (a form this edge refuses is recorded in
/// the tenant's audit trail through the node, like the node's own refusals).
async fn granted(edge: &Arc<Edge>, tenant: String, form: &Form) -> Result<Response, Refusal> {
    let step = grant_request(edge, tenant.clone(), form).inspect_err(|r| {
        let client = form.get("client_id").map(String::as_str);
        crate::authorize::note_refusal(edge, &tenant, client, crate::authorize::TOKEN_METHOD, r.reason);
    })?;
    match crate::authorize::forward(edge, &step).await {
        Ok(OAuthGrantAnswer { token: Some(issued), refresh_token, .. }) => {
            let mut body = token_body(&issued);
            if let Some(r) = refresh_token {
                body["refresh_token"] = Value::String(r);
            }
            Ok(no_store(axum::Json(body).into_response()))
        }
        Ok(_) => Err(oauth_error(StatusCode::BAD_GATEWAY, "server_error", ReasonCode::INTERNAL, "no token came back")),
        Err(r) => Err(refusal_of(r.reason, &r.message)),
    }
}

/// An RFC 8693 exchange: admitted against the subject principal's request quotas, then forwarded.
async fn exchange(edge: &Edge, tenant: String, form: &Form) -> Result<Response, Refusal> {
    let request = exchange_request(tenant, form)?;
    // An exchange is one of the subject principal's requests (a subject token this edge cannot
    // verify goes on: the node refuses it with its reason).
    if let Ok(authority) = crate::verify_token(edge, &request.subject_token).await {
        let trace_id = uuid::Uuid::new_v4().to_string();
        if let Err(refused) = edge.admission.admit(&edge.verifier, &authority, &trace_id).await {
            let r = &refused.rejection;
            let status = match r.reason {
                ReasonCode::QUOTA_EXCEEDED => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            let mut answer = oauth_error(status, "temporarily_unavailable", r.reason, &r.message).into_response();
            if let Some(v) =
                refused.retry_after.and_then(|a| HeaderValue::from_str(&(a.as_secs() + 1).to_string()).ok())
            {
                answer.headers_mut().insert(header::RETRY_AFTER, v);
            }
            return Ok(answer);
        }
    }
    let Some(forward) = edge.admin.clone() else {
        return Err(oauth_error(StatusCode::NOT_FOUND, "invalid_request", ReasonCode::NOT_FOUND, "no admin API"));
    };
    let answer =
        forward(ADMIN_TOKEN_EXCHANGE_PATH, Bytes::from(serde_json::to_vec(&request).unwrap_or_default())).await;
    let status = answer.status();
    let bytes = axum::body::to_bytes(answer.into_body(), ANSWER_BYTES_MAX).await.unwrap_or_default();
    if status.is_success() {
        let issued: IssuedToken = serde_json::from_slice(&bytes).map_err(|e| {
            oauth_error(
                StatusCode::BAD_GATEWAY,
                "server_error",
                ReasonCode::INTERNAL,
                &format!("unexpected answer: {e}"),
            )
        })?;
        let mut body = token_body(&issued);
        body["issued_token_type"] = Value::String(ACCESS_TOKEN_TYPE.into());
        return Ok(no_store(axum::Json(body).into_response()));
    }
    let refusal: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let reason = serde_json::from_value(refusal["reason"].clone()).unwrap_or(ReasonCode::INTERNAL);
    Err(refusal_of(reason, refusal["message"].as_str().unwrap_or("refused")))
}

/// The OAuth error (RFC 6749 §5.2) a node's refusal of a token request is.
fn refusal_of(reason: ReasonCode, message: &str) -> Refusal {
    let (status, error) = match reason {
        ReasonCode::APP_SCOPE_FORBIDDEN | ReasonCode::APP_SCOPE_REVOKED => (StatusCode::BAD_REQUEST, "invalid_scope"),
        ReasonCode::INPUT_INVALID | ReasonCode::TENANT_NOT_FOUND => (StatusCode::BAD_REQUEST, "invalid_request"),
        ReasonCode::OAUTH_CLIENT_UNKNOWN => (StatusCode::UNAUTHORIZED, "invalid_client"),
        ReasonCode::OAUTH_RESOURCE_INVALID => (StatusCode::BAD_REQUEST, "invalid_target"),
        r if r.http_status() == 401 || r == ReasonCode::DELEGATION_DEPTH_EXCEEDED => {
            (StatusCode::BAD_REQUEST, "invalid_grant")
        }
        ReasonCode::QUOTA_EXCEEDED => (StatusCode::TOO_MANY_REQUESTS, "temporarily_unavailable"),
        r if r.http_status() >= 500 => (StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable"),
        _ => (StatusCode::BAD_REQUEST, "invalid_grant"),
    };
    oauth_error(status, error, reason, message)
}

/// RFC 6749 §5.1's answer for `issued`.
fn token_body(issued: &IssuedToken) -> Value {
    let expires_in = issued.expires_at_ms.saturating_sub(writ_client::now_ms()) / 1000;
    json!({
        "access_token": issued.token,
        "token_type": "Bearer",
        "expires_in": expires_in,
        "scope": issued.scopes.join(" "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
        serde_urlencoded::to_string(pairs).unwrap().into_bytes()
    }

    #[test]
    fn the_form_is_checked_before_anything_is_forwarded() {
        let refused = |body: Vec<u8>| {
            form_of(&body).and_then(|f| exchange_request("acme".into(), &f)).err().map(|r| r.status.as_u16())
        };
        assert_eq!(refused(b"%%%".to_vec()), Some(400));
        let base = [("grant_type", TOKEN_EXCHANGE_GRANT), ("subject_token_type", ACCESS_TOKEN_TYPE)];
        assert_eq!(refused(form(&base)), Some(400), "no subject token");
        fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
            let subject = [
                ("grant_type", TOKEN_EXCHANGE_GRANT),
                ("subject_token_type", ACCESS_TOKEN_TYPE),
                ("subject_token", "a.eyJhdWQiOiJodHRwczovL2UvbWNwIn0.c"),
            ];
            [&subject[..], extra].concat()
        }
        assert_eq!(refused(form(&with(&[("actor_token", "x")]))), Some(400));
        assert_eq!(refused(form(&with(&[("resource", "https://other/mcp")]))), Some(400), "another audience");
        let body = form(&with(&[("resource", "https://e/mcp"), ("scope", "ops:read tools:list")]));
        let ok = exchange_request("acme".into(), &form_of(&body).unwrap());
        let ok = ok.expect("a valid exchange");
        assert_eq!(ok.scopes, ["ops:read", "tools:list"]);
    }
}

//! A tenant's OAuth token endpoint, `POST /t/{tenant}/oauth/token`: RFC 8693 token exchange.
//! The holder of a Writ token of the tenant with `tokens:delegate` exchanges it for a narrower
//! child — the same principal and audience, scopes within the token's, an expiry no later —
//! without an operator. The edge checks the form, admits the exchange against the subject
//! principal's request quotas like any of its requests, and forwards it to a node's admin API
//! (`/v1/token-exchange`), which verifies the subject token, records the child as the
//! principal's own act and signs it: no edge holds a signing key. Revoking the parent revokes
//! the child, as for every delegated token.
//!
//! Answers follow RFC 6749 §5: `access_token`, `issued_token_type`, `token_type`, `expires_in`,
//! `scope`, never cached; a refusal is `{"error", "error_description", "reason"}` with the
//! OAuth error its reason code means.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use writ_api::dto::{IssuedToken, TokenExchangeRequest, ADMIN_TOKEN_EXCHANGE_PATH};
use writ_api::ReasonCode;

use crate::Edge;

/// The grant type of RFC 8693.
pub const TOKEN_EXCHANGE_GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// The token type of the subject token and of the token issued.
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
/// The subject token may also be named a JWT (Writ tokens are JWTs).
const JWT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
/// Where a tenant's token endpoint is.
pub const TOKEN_PATH: &str = "/t/{tenant}/oauth/token";
/// Largest token request body read.
pub const TOKEN_REQUEST_BYTES_MAX: usize = 16 * 1024;
/// Largest answer read back from the admin API.
const ANSWER_BYTES_MAX: usize = 64 * 1024;

/// `POST /t/{tenant}/oauth/token`.
pub(crate) fn token_route() -> axum::routing::MethodRouter<Arc<Edge>> {
    axum::routing::post(token).layer(axum::extract::DefaultBodyLimit::max(TOKEN_REQUEST_BYTES_MAX))
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

/// The exchange the form asks for, or the OAuth error its fault is.
fn exchange_request(tenant: String, body: &[u8]) -> Result<TokenExchangeRequest, Refusal> {
    let invalid = |m: &str| oauth_error(StatusCode::BAD_REQUEST, "invalid_request", ReasonCode::INPUT_INVALID, m);
    let form: HashMap<String, String> = serde_urlencoded::from_bytes(body)
        .map_err(|_| invalid("the body is not an application/x-www-form-urlencoded form"))?;
    let field = |name: &str| form.get(name).map(String::as_str);
    if field("grant_type") != Some(TOKEN_EXCHANGE_GRANT) {
        let m = format!("grant_type must be {TOKEN_EXCHANGE_GRANT}");
        return Err(oauth_error(StatusCode::BAD_REQUEST, "unsupported_grant_type", ReasonCode::INPUT_INVALID, &m));
    }
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
    let scopes = field("scope").map(|s| s.split_whitespace().map(str::to_string).collect()).unwrap_or_default();
    Ok(TokenExchangeRequest { tenant, subject_token: subject_token.to_string(), scopes, ttl_s: None })
}

async fn token(State(edge): State<Arc<Edge>>, Path(tenant): Path<String>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(e) = crate::check_host_and_origin(&edge.config, &headers) {
        return e.into_response();
    }
    let Some(forward) = edge.admin.clone() else {
        let m = "this edge serves no token endpoint (no admin API to forward to)";
        return oauth_error(StatusCode::NOT_FOUND, "invalid_request", ReasonCode::NOT_FOUND, m).into_response();
    };
    let request = match exchange_request(tenant, &body) {
        Ok(r) => r,
        Err(refused) => return refused.into_response(),
    };
    // An exchange is one of the subject principal's requests (a subject token this edge cannot
    // verify goes on: the node refuses it with its reason).
    if let Ok(authority) = crate::verify_token(&edge, &request.subject_token).await {
        let trace_id = uuid::Uuid::new_v4().to_string();
        if let Err(refused) = edge.admission.admit(&edge.verifier, &authority, &trace_id).await {
            let r = &refused.rejection;
            let (status, error) = match r.reason {
                ReasonCode::QUOTA_EXCEEDED => (StatusCode::TOO_MANY_REQUESTS, "temporarily_unavailable"),
                _ => (StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable"),
            };
            let mut answer = oauth_error(status, error, r.reason, &r.message).into_response();
            if let Some(v) =
                refused.retry_after.and_then(|a| HeaderValue::from_str(&(a.as_secs() + 1).to_string()).ok())
            {
                answer.headers_mut().insert(header::RETRY_AFTER, v);
            }
            return answer;
        }
    }
    let body = Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
    let answer = forward(ADMIN_TOKEN_EXCHANGE_PATH, body).await;
    let status = answer.status();
    let bytes = axum::body::to_bytes(answer.into_body(), ANSWER_BYTES_MAX).await.unwrap_or_default();
    if status.is_success() {
        return match serde_json::from_slice::<IssuedToken>(&bytes) {
            Ok(issued) => issued_answer(&issued),
            Err(e) => oauth_error(
                StatusCode::BAD_GATEWAY,
                "server_error",
                ReasonCode::INTERNAL,
                &format!("unexpected answer: {e}"),
            )
            .into_response(),
        };
    }
    let refusal: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let reason = serde_json::from_value(refusal["reason"].clone()).unwrap_or(ReasonCode::INTERNAL);
    let message = refusal["message"].as_str().unwrap_or("refused");
    let (status, error) = match reason {
        ReasonCode::APP_SCOPE_FORBIDDEN | ReasonCode::APP_SCOPE_REVOKED => (StatusCode::BAD_REQUEST, "invalid_scope"),
        ReasonCode::INPUT_INVALID | ReasonCode::TENANT_NOT_FOUND => (StatusCode::BAD_REQUEST, "invalid_request"),
        r if r.http_status() == 401 || r == ReasonCode::DELEGATION_DEPTH_EXCEEDED => {
            (StatusCode::BAD_REQUEST, "invalid_grant")
        }
        ReasonCode::QUOTA_EXCEEDED => (StatusCode::TOO_MANY_REQUESTS, "temporarily_unavailable"),
        r if r.http_status() >= 500 => (StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable"),
        _ => (StatusCode::BAD_REQUEST, "invalid_grant"),
    };
    oauth_error(status, error, reason, message).into_response()
}

fn issued_answer(issued: &IssuedToken) -> Response {
    let expires_in = issued.expires_at_ms.saturating_sub(writ_client::now_ms()) / 1000;
    let body = json!({
        "access_token": issued.token,
        "issued_token_type": ACCESS_TOKEN_TYPE,
        "token_type": "Bearer",
        "expires_in": expires_in,
        "scope": issued.scopes.join(" "),
    });
    no_store(axum::Json(body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
        serde_urlencoded::to_string(pairs).unwrap().into_bytes()
    }

    #[test]
    fn the_form_is_checked_before_anything_is_forwarded() {
        let refused = |body: Vec<u8>| exchange_request("acme".into(), &body).err().map(|r| r.status.as_u16());
        assert_eq!(refused(b"%%%".to_vec()), Some(400));
        assert_eq!(refused(form(&[("grant_type", "client_credentials")])), Some(400));
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
        let ok = exchange_request(
            "acme".into(),
            &form(&with(&[("resource", "https://e/mcp"), ("scope", "ops:read tools:list")])),
        );
        let ok = ok.expect("a valid exchange");
        assert_eq!(ok.scopes, ["ops:read", "tools:list"]);
    }
}

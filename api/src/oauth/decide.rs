//! The tenants' own authorization servers: registered clients, authorization requests an
//! operator decides, codes bound to the browser that asked and to a PKCE challenge, refresh
//! tokens bound to their client, client assertions used once — every token issued as a ledger
//! token record like any other.

use std::collections::BTreeSet;

use crate::decide::prelude::*;
use crate::oauth::{
    s256_challenge, AuthRequest, AuthStatusV1, GrantChangeV1, GrantProofV1, GrantStepV1, NewRefreshV1, OAuthClientV1,
    RefreshTokenV1, TenantOAuth, UsedProofV1, ASSERTIONS_MAX, ASSERTION_LIFETIME_MAX_MS, CLIENTS_MAX, CODE_TTL_MS,
    REFRESH_TOKENS_MAX, REFRESH_TTL_MS, REQUESTS_MAX, REQUEST_TTL_MS,
};

pub(crate) fn decide(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    match cmd {
        Command::SetOAuthClient { tenant_id, client } => set_client(state, tenant_id, client),
        Command::RemoveOAuthClient { tenant_id, client_id } => {
            existing(state, tenant_id)?;
            client_of(state, tenant_id, client_id)?;
            Ok(vec![Event::OAuthClientRemovedV1 { tenant_id: tenant_id.clone(), client_id: client_id.clone() }])
        }
        Command::SetOAuthSettings { tenant_id, settings } => {
            active(state, tenant_id)?;
            settings.validate()?;
            Ok(vec![Event::OAuthSettingsSetV1 { tenant_id: tenant_id.clone(), settings: settings.clone() }])
        }
        Command::OAuthGrant { tenant_id, step } => {
            active(state, tenant_id)?;
            grant(state, tenant_id, step, now)
        }
        _ => Err(misrouted(cmd)),
    }
}

fn unknown_client(client_id: &str) -> Rejection {
    Rejection::new(
        ReasonCode::OAUTH_CLIENT_UNKNOWN,
        format!("no client '{}' is registered", crate::audit::truncated(client_id, 128)),
    )
}

fn grant_invalid(m: &str) -> Rejection {
    Rejection::new(ReasonCode::OAUTH_GRANT_INVALID, m)
}

fn client_of<'a>(state: &'a LedgerState, tenant_id: &str, client_id: &str) -> Result<&'a OAuthClientV1, Rejection> {
    state.oauth.get(tenant_id).and_then(|o| o.clients.get(client_id)).ok_or_else(|| unknown_client(client_id))
}

/// The scopes `client` may be given: its registered ones, else its principal's.
fn allowed_scopes(state: &LedgerState, tenant_id: &str, client: &OAuthClientV1) -> Result<BTreeSet<String>, Rejection> {
    if !client.scopes.is_empty() {
        return Ok(client.scopes.clone());
    }
    Ok(active_principal(state, tenant_id, &client.principal_id)?.scopes.clone())
}

fn within(asked: &BTreeSet<String>, allowed: &BTreeSet<String>) -> Result<(), Rejection> {
    match asked.iter().find(|s| !allowed.iter().any(|g| scope_covers(g, s))) {
        Some(s) => Err(Rejection::new(ReasonCode::APP_SCOPE_FORBIDDEN, format!("scope '{s}' is not the client's"))),
        None => Ok(()),
    }
}

fn set_client(state: &LedgerState, tenant_id: &str, client: &OAuthClientV1) -> Result<Vec<Event>, Rejection> {
    active(state, tenant_id)?;
    client.validate()?;
    let principal = active_principal(state, tenant_id, &client.principal_id)?;
    within(&client.scopes, &principal.scopes)?;
    let clients = state.oauth.get(tenant_id).map(|o| &o.clients);
    if clients.is_some_and(|c| c.len() >= CLIENTS_MAX && !c.contains_key(&client.client_id)) {
        return Err(Rejection::new(
            ReasonCode::QUOTA_EXCEEDED,
            format!("a tenant registers at most {CLIENTS_MAX} clients"),
        ));
    }
    Ok(vec![Event::OAuthClientSetV1 { tenant_id: tenant_id.to_string(), client: client.clone() }])
}

/// The tenant's authorization state as of `now` (what expired dropped).
fn current(state: &LedgerState, tenant_id: &str, now: u64) -> TenantOAuth {
    let mut oauth = state.oauth.get(tenant_id).cloned().unwrap_or_default();
    oauth.expire(now);
    oauth
}

fn grant(state: &LedgerState, tenant_id: &str, step: &GrantStepV1, now: u64) -> Result<Vec<Event>, Rejection> {
    let oauth = current(state, tenant_id, now);
    let change = |change: GrantChangeV1| Event::OAuthGrantV1 { tenant_id: tenant_id.to_string(), change, at_ms: now };
    match step {
        GrantStepV1::Request(request) => {
            request.validate()?;
            let client = client_of(state, tenant_id, &request.client_id)?;
            if !client.redirect_uris.contains(&request.redirect_uri) {
                return Err(Rejection::new(
                    ReasonCode::OAUTH_REDIRECT_INVALID,
                    "the redirect URI is not one the client registered",
                ));
            }
            within(&request.scopes, &allowed_scopes(state, tenant_id, client)?)?;
            if oauth.requests.len() >= REQUESTS_MAX {
                let m = format!("the tenant has {REQUESTS_MAX} authorization requests open: try again later");
                return Err(Rejection::new(ReasonCode::QUOTA_EXCEEDED, m));
            }
            let record = AuthRequest {
                request: request.clone(),
                status: AuthStatusV1::Pending,
                requested_at_ms: now,
                expires_at_ms: now.saturating_add(REQUEST_TTL_MS),
            };
            Ok(vec![change(GrantChangeV1::Requested(record))])
        }
        GrantStepV1::Decide { request_id, approve, operator } => {
            let r = oauth.requests.get(request_id).ok_or_else(|| grant_invalid("no such open request"))?;
            if r.status != AuthStatusV1::Pending {
                return Err(grant_invalid("the request was decided already"));
            }
            validate_text("operator", Some(operator), NOTE_BYTES_MAX)?;
            let by = operator.clone();
            let status = if *approve { AuthStatusV1::Approved { by } } else { AuthStatusV1::Denied { by } };
            Ok(vec![change(GrantChangeV1::Decided { request_id: request_id.clone(), status })])
        }
        GrantStepV1::Code { request_id, browser_digest, code_digest } => {
            let r = oauth.requests.get(request_id).ok_or_else(|| grant_invalid("no such open request"))?;
            if r.request.browser_digest != *browser_digest || code_digest.len() != 64 {
                return Err(grant_invalid("the request was made by another browser"));
            }
            let AuthStatusV1::Approved { by } = &r.status else {
                return Err(Rejection::new(ReasonCode::OAUTH_ACCESS_DENIED, "the request is not approved"));
            };
            let status = AuthStatusV1::CodeIssued {
                by: by.clone(),
                code_digest: code_digest.clone(),
                expires_at_ms: now.saturating_add(CODE_TTL_MS),
            };
            Ok(vec![change(GrantChangeV1::Decided { request_id: request_id.clone(), status })])
        }
        GrantStepV1::Revoke { client_id, refresh_id, secret_digest } => {
            let own = oauth.refresh_tokens.get(refresh_id);
            if !own.is_some_and(|r| r.client_id == *client_id && r.secret_digest == *secret_digest) {
                return Err(grant_invalid("no such refresh token of this client"));
            }
            Ok(vec![change(GrantChangeV1::Revoked { refresh_id: refresh_id.clone() })])
        }
        GrantStepV1::Redeem { client_id, proof, token, refresh } => {
            let client = client_of(state, tenant_id, client_id)?;
            if token.principal_id != client.principal_id || token.parent_jti.is_some() {
                return Err(Rejection::new(ReasonCode::INPUT_INVALID, "a client's token is its principal's own"));
            }
            let allowed = allowed_scopes(state, tenant_id, client)?;
            let redeemed = redeem(&oauth, client, proof, refresh.as_ref(), &token.scopes, &allowed, now)?;
            let rotating = matches!(redeemed.used, UsedProofV1::Refresh { .. });
            if redeemed.refresh.is_some() && !rotating && oauth.refresh_tokens.len() >= REFRESH_TOKENS_MAX {
                let m = format!("the tenant holds {REFRESH_TOKENS_MAX} refresh tokens: remove unused clients first");
                return Err(Rejection::new(ReasonCode::QUOTA_EXCEEDED, m));
            }
            let request = TokenRequestV1 { scopes: redeemed.scopes, ..token.clone() };
            let issued = crate::token::decide::decide_token(state, tenant_id, &request, now)?;
            let change = change(GrantChangeV1::Redeemed {
                client_id: client_id.clone(),
                used: redeemed.used,
                refresh: redeemed.refresh,
                audience: redeemed.audience,
            });
            Ok(vec![Event::TokenIssuedV1 { tenant_id: tenant_id.to_string(), token: issued }, change])
        }
    }
}

/// What a redemption uses up and yields.
struct Redeemed {
    used: UsedProofV1,
    refresh: Option<RefreshTokenV1>,
    scopes: BTreeSet<String>,
    audience: String,
}

/// `asked` within `granted`; empty: all of `granted`.
fn narrowed(asked: &BTreeSet<String>, granted: &BTreeSet<String>) -> Result<BTreeSet<String>, Rejection> {
    within(asked, granted)?;
    Ok(if asked.is_empty() { granted.clone() } else { asked.clone() })
}

/// Checks `proof` for `client`: what it uses up, the token's scopes and audience, and the
/// refresh token to record.
fn redeem(
    oauth: &TenantOAuth,
    client: &OAuthClientV1,
    proof: &GrantProofV1,
    refresh: Option<&NewRefreshV1>,
    asked: &BTreeSet<String>,
    allowed: &BTreeSet<String>,
    now: u64,
) -> Result<Redeemed, Rejection> {
    let client_id = client.client_id.as_str();
    let new_refresh = |audience: &str, scopes: &BTreeSet<String>| {
        refresh.map(|r| RefreshTokenV1 {
            refresh_id: r.refresh_id.clone(),
            secret_digest: r.secret_digest.clone(),
            client_id: client_id.to_string(),
            principal_id: client.principal_id.clone(),
            scopes: scopes.clone(),
            audience: audience.to_string(),
            expires_at_ms: now.saturating_add(REFRESH_TTL_MS),
        })
    };
    match proof {
        GrantProofV1::Code { code_digest, verifier, redirect_uri } => {
            let r = oauth.requests.values().find(|r| {
                matches!(&r.status, AuthStatusV1::CodeIssued { code_digest: d, .. } if d == code_digest)
                    && r.request.client_id == client_id
                    && r.request.redirect_uri == *redirect_uri
            });
            let r = r.ok_or_else(|| grant_invalid("the code is unknown, expired, used, or another client's"))?;
            if s256_challenge(verifier) != r.request.code_challenge {
                return Err(Rejection::new(ReasonCode::OAUTH_PKCE_INVALID, "the code verifier does not match"));
            }
            let scopes = narrowed(&r.request.scopes, allowed)?;
            let used = UsedProofV1::Code { request_id: r.request.request_id.clone() };
            let refresh = new_refresh(&r.request.audience, &scopes);
            Ok(Redeemed { used, refresh, scopes, audience: r.request.audience.clone() })
        }
        GrantProofV1::Refresh { refresh_id, secret_digest } => {
            let r = oauth.refresh_tokens.get(refresh_id);
            let r = r
                .filter(|r| r.client_id == client_id && r.secret_digest == *secret_digest)
                .ok_or_else(|| grant_invalid("the refresh token is unknown, expired, used, or another client's"))?;
            let scopes = narrowed(asked, &narrowed(&r.scopes, allowed)?)?;
            let used = UsedProofV1::Refresh { refresh_id: refresh_id.clone() };
            // The replacement keeps the whole grant, whatever this token narrowed.
            let refresh = new_refresh(&r.audience, &r.scopes);
            Ok(Redeemed { used, refresh, scopes, audience: r.audience.clone() })
        }
        GrantProofV1::Assertion { jti, expires_at_ms, audience } => {
            if jti.is_empty() || jti.len() > 128 || refresh.is_some() {
                return Err(Rejection::new(ReasonCode::INPUT_INVALID, "an assertion names a jti of 1..=128 bytes"));
            }
            if *expires_at_ms <= now || *expires_at_ms > now.saturating_add(ASSERTION_LIFETIME_MAX_MS) {
                let m = format!("the assertion must expire within {} s", ASSERTION_LIFETIME_MAX_MS / 1000);
                return Err(Rejection::new(ReasonCode::OAUTH_CLIENT_UNKNOWN, m));
            }
            if oauth.assertions.contains_key(&crate::oauth::assertion_key(client_id, jti)) {
                return Err(Rejection::new(ReasonCode::OAUTH_CLIENT_UNKNOWN, "the assertion was used already"));
            }
            if oauth.assertions.len() >= ASSERTIONS_MAX {
                let m = format!("the tenant remembers {ASSERTIONS_MAX} unexpired assertions: try again later");
                return Err(Rejection::new(ReasonCode::QUOTA_EXCEEDED, m));
            }
            if audience.is_empty() || audience.len() > crate::token::ISSUER_BYTES_MAX {
                return Err(Rejection::new(ReasonCode::INPUT_INVALID, "the token's audience must be 1..=512 bytes"));
            }
            let used = UsedProofV1::Assertion { jti: jti.clone(), expires_at_ms: *expires_at_ms };
            Ok(Redeemed { used, refresh: None, scopes: narrowed(asked, allowed)?, audience: audience.clone() })
        }
    }
}

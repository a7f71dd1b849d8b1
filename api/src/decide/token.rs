//! Tokens and issuers (SPEC D2, D3): recording a token (domain gate, lifetime bounds, delegation subset and depth), cascading revocation, node signing keys and tenant issuers.

use super::prelude::*;

pub(super) fn decide(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    match cmd {
        Command::IssueToken { tenant_id, request } => Ok(vec![Event::TokenIssuedV1 {
            tenant_id: tenant_id.clone(),
            token: decide_token(state, tenant_id, request, now)?,
        }]),
        Command::RevokeToken { tenant_id, jti } => {
            existing(state, tenant_id)?;
            let token = state
                .token(tenant_id, jti)
                .ok_or_else(|| Rejection::new(ReasonCode::TOKEN_NOT_FOUND, format!("no token '{jti}'")))?;
            if token.revoked_at_ms.is_some() {
                return Err(Rejection::new(
                    ReasonCode::TOKEN_ALREADY_REVOKED,
                    format!("token '{jti}' is already revoked"),
                ));
            }
            let cascade = state.live_descendants(tenant_id, jti);
            Ok(vec![Event::TokenRevokedV1 { tenant_id: tenant_id.clone(), jti: jti.clone(), cascade }])
        }
        Command::RegisterSigningKey { key } => {
            key.validate()?;
            match state.signing_keys.get(&key.kid) {
                Some(known) if known == key => Ok(vec![]),
                Some(_) => Err(Rejection::new(
                    ReasonCode::SIGNING_KEY_CONFLICT,
                    format!("key id '{}' is registered with a different key", key.kid),
                )),
                None => Ok(vec![Event::SigningKeyRegisteredV1 { key: key.clone() }]),
            }
        }
        Command::SetTenantIssuer { tenant_id, issuer } => {
            existing(state, tenant_id)?;
            issuer.validate()?;
            if let Some(owner) = state.issuers.get(&issuer.issuer).filter(|i| i.tenant_id != *tenant_id) {
                return Err(Rejection::new(
                    ReasonCode::ISSUER_CONFLICT,
                    format!("issuer '{}' is registered for another tenant ({})", issuer.issuer, owner.tenant_id),
                ));
            }
            Ok(vec![Event::TenantIssuerSetV1 { tenant_id: tenant_id.clone(), issuer: issuer.clone() }])
        }
        Command::RemoveTenantIssuer { tenant_id, issuer } => {
            existing(state, tenant_id)?;
            match state.issuers.get(issuer) {
                Some(i) if i.tenant_id == *tenant_id => {
                    Ok(vec![Event::TenantIssuerRemovedV1 { tenant_id: tenant_id.clone(), issuer: issuer.clone() }])
                }
                _ => Err(Rejection::new(ReasonCode::ISSUER_NOT_FOUND, format!("no issuer '{issuer}' in this tenant"))),
            }
        }
        other => Err(misrouted(other)),
    }
}

/// The rules of issuing a token: domain gate (tenant active) before scope gate; lifetime clamped
/// to the tenant's bounds and, for a delegated token, to its parent's; a delegated token's scopes
/// are a subset of its parent's, which must hold `tokens:delegate`, within the depth limit.
fn decide_token(
    state: &LedgerState,
    tenant_id: &str,
    req: &TokenRequestV1,
    now: u64,
) -> Result<TokenRecordV1, Rejection> {
    let tenant = existing(state, tenant_id)?;
    if tenant.state == TenantState::Suspended {
        return Err(Rejection::new(ReasonCode::TENANT_SUSPENDED, format!("tenant '{}' is suspended", tenant.name)));
    }
    if req.jti.is_empty() || req.jti.len() > 64 || state.token(tenant_id, &req.jti).is_some() {
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, "token id must be 1..=64 bytes and unused"));
    }
    let principal = active_principal(state, tenant_id, &req.principal_id)?;
    for scope in &req.scopes {
        validate_scope(scope)?;
    }
    let ttl_ms = req.ttl_s.clamp(tenant.settings.token_ttl_min_s, tenant.settings.token_ttl_max_s).saturating_mul(1000);
    let mut expires_at_ms = now.saturating_add(ttl_ms);
    let (granting, depth) = match &req.parent_jti {
        None => (&principal.scopes, 0),
        Some(parent_jti) => {
            let parent = state.token(tenant_id, parent_jti).ok_or_else(|| {
                Rejection::new(ReasonCode::AUTH_TOKEN_INVALID, format!("no parent token '{parent_jti}'"))
            })?;
            if parent.revoked_at_ms.is_some() {
                return Err(Rejection::new(ReasonCode::AUTH_TOKEN_REVOKED, "the parent token is revoked"));
            }
            if parent.record.expires_at_ms <= now {
                return Err(Rejection::new(ReasonCode::AUTH_TOKEN_EXPIRED, "the parent token has expired"));
            }
            let depth = parent.record.depth + 1;
            if depth > DELEGATION_DEPTH_MAX_DEFAULT {
                return Err(Rejection::new(
                    ReasonCode::DELEGATION_DEPTH_EXCEEDED,
                    format!("delegation depth {depth} exceeds the limit of {DELEGATION_DEPTH_MAX_DEFAULT}"),
                ));
            }
            // The depth limit is structural and answered first; then the right to delegate.
            if !parent.record.scopes.contains("tokens:delegate") {
                return Err(Rejection::new(
                    ReasonCode::APP_SCOPE_FORBIDDEN,
                    "the parent token lacks scope tokens:delegate",
                ));
            }
            expires_at_ms = expires_at_ms.min(parent.record.expires_at_ms);
            (&parent.record.scopes, depth)
        }
    };
    for scope in &req.scopes {
        if !granting.iter().any(|g| scope_covers(g, scope)) {
            let reason = if principal.revoked_scopes.iter().any(|r| scope_covers(r, scope)) {
                ReasonCode::APP_SCOPE_REVOKED
            } else {
                ReasonCode::APP_SCOPE_FORBIDDEN
            };
            let from = if req.parent_jti.is_some() { "the parent token" } else { "the principal" };
            return Err(Rejection::new(reason, format!("scope '{scope}' is not held by {from}")));
        }
    }
    let scopes = if req.scopes.is_empty() { granting.clone() } else { req.scopes.clone() };
    Ok(TokenRecordV1 {
        jti: req.jti.clone(),
        principal_id: principal.id.clone(),
        scopes,
        issued_at_ms: now,
        expires_at_ms,
        parent_jti: req.parent_jti.clone(),
        depth,
    })
}

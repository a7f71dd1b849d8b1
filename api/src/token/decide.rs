//! Tokens and issuers (SPEC D2, D3): recording a token (domain gate, lifetime bounds, delegation subset and depth), cascading revocation, node signing keys and tenant issuers.

use crate::decide::prelude::*;
use crate::revocation::{
    normalize_serial, ISSUER_REVOCATIONS_MAX, JTI_BYTES_MAX, ROLE_REVOCATIONS_MAX, SERIAL_HEX_MAX,
};

pub(crate) fn decide(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    match cmd {
        Command::IssueToken { tenant_id, request } => Ok(vec![Event::TokenIssuedV1 {
            tenant_id: tenant_id.clone(),
            token: decide_token(state, tenant_id, request, now)?,
        }]),
        Command::RevokeToken { .. } => revoke_token(state, cmd, now),
        Command::RegisterSigningKey { .. } => register_signing_key(state, cmd, now),
        Command::SetAnonymousAccess { tenant_id, edge_id, principal_id } => {
            anonymous_access(state, tenant_id, edge_id, principal_id.as_deref())
        }
        Command::SetSessionState { tenant_id, session_id, session } => {
            session_state(state, tenant_id, session_id, session, now)
        }
        Command::OnBehalfOf { .. } => principal_act(state, cmd, now),
        Command::SetTenantIssuer { .. } => set_tenant_issuer(state, cmd, now),
        Command::SetIssuerSource { .. } => set_issuer_source(state, cmd, now),
        Command::ObserveIssuerKeys { tenant_id, issuer, keys } => observed_keys(state, tenant_id, issuer, keys),
        Command::RemoveTenantIssuer { tenant_id, issuer } => {
            existing(state, tenant_id)?;
            match state.issuers.get(issuer) {
                Some(i) if i.tenant_id == *tenant_id => {
                    Ok(vec![Event::TenantIssuerRemovedV1 { tenant_id: tenant_id.clone(), issuer: issuer.clone() }])
                }
                _ => Err(Rejection::new(ReasonCode::ISSUER_NOT_FOUND, format!("no issuer '{issuer}' in this tenant"))),
            }
        }
        Command::RevokeIssuerToken { .. } => revoke_issuer_token(state, cmd, now),
        Command::RetireSigningKey { kid } => {
            if state.revocations.signing_keys.contains_key(kid) {
                return Err(retired(format!("signing key '{kid}' is already retired")));
            }
            if !state.signing_keys.contains_key(kid) {
                return Err(Rejection::new(ReasonCode::NOT_FOUND, format!("no signing key '{kid}'")));
            }
            Ok(vec![Event::SigningKeyRetiredV1 { kid: kid.clone() }])
        }
        Command::RevokeRoleCertificate { certificate } => {
            let c = certificate;
            if normalize_serial(&c.serial).as_deref() != Some(c.serial.as_str()) {
                return Err(Rejection::new(
                    ReasonCode::INPUT_INVALID,
                    format!("serial must be 1..={SERIAL_HEX_MAX} lowercase hex digits without leading zero octets"),
                ));
            }
            if crate::role::Identity::parse(&c.identity).is_none() {
                return Err(Rejection::new(ReasonCode::INPUT_INVALID, "identity must be <role>:<id>, e.g. edge:a"));
            }
            if c.not_after_ms <= now {
                return Err(Rejection::new(ReasonCode::INPUT_INVALID, "the certificate has expired already"));
            }
            if state.revocations.role_certificate_revoked(&c.serial) {
                return Err(retired(format!("certificate {} is already revoked", c.serial)));
            }
            let live = state.revocations.role_certificates.values().filter(|r| r.not_after_ms > now).count();
            if live >= ROLE_REVOCATIONS_MAX {
                return Err(Rejection::new(
                    ReasonCode::QUOTA_EXCEEDED,
                    format!("{ROLE_REVOCATIONS_MAX} revoked certificates are retained; each until it expires"),
                ));
            }
            Ok(vec![Event::RoleCertificateRevokedV1 { certificate: c.clone() }])
        }
        other => Err(misrouted(other)),
    }
}

/// A token revoked, with every live descendant (the cascade).
fn revoke_token(state: &LedgerState, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    let Command::RevokeToken { tenant_id, jti } = cmd else { return Err(misrouted(cmd)) };
    existing(state, tenant_id)?;
    let token = state
        .token(tenant_id, jti)
        .ok_or_else(|| Rejection::new(ReasonCode::TOKEN_NOT_FOUND, format!("no token '{jti}'")))?;
    if token.revoked_at_ms.is_some() {
        return Err(Rejection::new(ReasonCode::TOKEN_ALREADY_REVOKED, format!("token '{jti}' is already revoked")));
    }
    let cascade = state.live_descendants(tenant_id, jti);
    Ok(vec![Event::TokenRevokedV1 { tenant_id: tenant_id.clone(), jti: jti.clone(), cascade }])
}

/// A node's token-signing key: registered once, never again once retired.
fn register_signing_key(state: &LedgerState, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    let Command::RegisterSigningKey { key } = cmd else { return Err(misrouted(cmd)) };
    key.validate()?;
    if state.revocations.signing_keys.contains_key(&key.kid) {
        return Err(retired(format!("signing key '{}' was retired", key.kid)));
    }
    match state.signing_keys.get(&key.kid) {
        Some(known) if known == key => Ok(vec![]),
        Some(_) => Err(Rejection::new(
            ReasonCode::SIGNING_KEY_CONFLICT,
            format!("key id '{}' is registered with a different key", key.kid),
        )),
        None => Ok(vec![Event::SigningKeyRegisteredV1 { key: key.clone() }]),
    }
}

/// A principal's own act under the authority it presents (its own delegation descends from that token).
fn principal_act(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    let Command::OnBehalfOf { authority_ref, command } = cmd else { return Err(misrouted(cmd)) };
    // A principal delegates only from the very token it presents.
    if let Command::IssueToken { request, .. } = &**command {
        if request.parent_jti.as_deref() != Some(authority_ref.as_str()) {
            return Err(Rejection::new(
                ReasonCode::INPUT_INVALID,
                "a principal's child token descends from the token that asks for it",
            ));
        }
    }
    crate::decide::on_behalf_of(state, authority_ref, command, now)
}

/// A tenant issuer with its inline keys (an issuer known by its URL keeps its own).
fn set_tenant_issuer(state: &LedgerState, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    let Command::SetTenantIssuer { tenant_id, issuer } = cmd else { return Err(misrouted(cmd)) };
    existing(state, tenant_id)?;
    issuer.validate()?;
    issuer_free(state, tenant_id, &issuer.issuer)?;
    if state.issuer_sources.contains_key(&issuer.issuer) {
        return Err(Rejection::new(
            ReasonCode::ISSUER_CONFLICT,
            format!("issuer '{}' is registered by its URL: its keys come from discovery", issuer.issuer),
        ));
    }
    Ok(vec![Event::TenantIssuerSetV1 { tenant_id: tenant_id.clone(), issuer: issuer.clone() }])
}

/// A tenant issuer known by its URL, with the keys just fetched from it.
fn set_issuer_source(state: &LedgerState, cmd: &Command, _now: u64) -> Result<Vec<Event>, Rejection> {
    let Command::SetIssuerSource { tenant_id, source, keys } = cmd else { return Err(misrouted(cmd)) };
    existing(state, tenant_id)?;
    source.validate()?;
    let issuer = source.issuer_with(keys)?;
    issuer_free(state, tenant_id, &issuer.issuer)?;
    let events = vec![
        Event::IssuerSourceSetV1 {
            tenant_id: tenant_id.clone(),
            source: source.clone(),
            jwks_uri: keys.jwks_uri.clone(),
        },
        Event::TenantIssuerSetV1 { tenant_id: tenant_id.clone(), issuer },
    ];
    Ok(events)
}

/// One token id of a tenant issuer revoked until every token that carried it has expired (bounded per issuer).
fn revoke_issuer_token(state: &LedgerState, cmd: &Command, now: u64) -> Result<Vec<Event>, Rejection> {
    let Command::RevokeIssuerToken { tenant_id, issuer, jti } = cmd else { return Err(misrouted(cmd)) };
    let tenant = existing(state, tenant_id)?;
    if state.issuers.get(issuer).is_none_or(|i| i.tenant_id != *tenant_id) {
        return Err(Rejection::new(ReasonCode::ISSUER_NOT_FOUND, format!("no issuer '{issuer}' in this tenant")));
    }
    if jti.is_empty() || jti.len() > JTI_BYTES_MAX {
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, format!("jti must be 1..={JTI_BYTES_MAX} bytes")));
    }
    let revoked = state.revocations.issuer_tokens.get(issuer);
    if revoked.and_then(|m| m.get(jti)).is_some_and(|until| *until > now) {
        return Err(Rejection::new(
            ReasonCode::TOKEN_ALREADY_REVOKED,
            format!("token id '{jti}' of '{issuer}' is already revoked"),
        ));
    }
    if revoked.map_or(0, |m| m.values().filter(|until| **until > now).count()) >= ISSUER_REVOCATIONS_MAX {
        return Err(Rejection::new(
            ReasonCode::QUOTA_EXCEEDED,
            format!(
                "issuer '{issuer}' holds {ISSUER_REVOCATIONS_MAX} revoked token ids; each is dropped when                          the tokens carrying it have expired"
            ),
        ));
    }
    // Kept until every token that carried the id has expired: the issuer's tokens live at
    // most the tenant's token_ttl_max_s from their iat, which may run ahead by the skew.
    let until_ms = now
        .saturating_add(tenant.settings.token_ttl_max_s.saturating_mul(1000))
        .saturating_add(crate::auth::CLOCK_SKEW_MS);
    Ok(vec![Event::IssuerTokenRevokedV1 {
        tenant_id: tenant_id.clone(),
        issuer: issuer.clone(),
        jti: jti.clone(),
        until_ms,
    }])
}

fn retired(message: String) -> Rejection {
    Rejection::new(ReasonCode::CREDENTIAL_RETIRED, message)
}

/// The rules of issuing a token: domain gate (tenant active) before scope gate; lifetime clamped
/// to the tenant's bounds and, for a delegated token, to its parent's; a delegated token's scopes
/// are a subset of its parent's, which must hold `tokens:delegate`, within the depth limit.
pub(crate) fn decide_token(
    state: &LedgerState,
    tenant_id: &str,
    req: &TokenRequestV1,
    now: u64,
) -> Result<TokenRecordV1, Rejection> {
    let tenant = active(state, tenant_id)?;
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
        None => (std::borrow::Cow::Borrowed(&principal.scopes), 0),
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
            let limit =
                state.oauth.get(tenant_id).map_or(DELEGATION_DEPTH_MAX_DEFAULT, |o| o.settings.delegation_depth_max);
            if depth > limit {
                return Err(Rejection::new(
                    ReasonCode::DELEGATION_DEPTH_EXCEEDED,
                    format!("delegation depth {depth} exceeds the tenant's limit of {limit}"),
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
            (std::borrow::Cow::Owned(parent.record.scopes), depth)
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
    let scopes = if req.scopes.is_empty() { granting.into_owned() } else { req.scopes.clone() };
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

/// Anonymous access of an edge to one active principal of an active tenant, or its removal:
/// bounded in edges per tenant and in the edge id's length; setting what is recorded is a no-op.
fn anonymous_access(
    state: &LedgerState,
    tenant_id: &str,
    edge_id: &str,
    principal_id: Option<&str>,
) -> Result<Vec<Event>, Rejection> {
    use crate::credential::{ANONYMOUS_EDGES_PER_TENANT_MAX, ANONYMOUS_EDGE_ID_BYTES_MAX};
    active(state, tenant_id)?;
    if edge_id.is_empty() || edge_id.len() > ANONYMOUS_EDGE_ID_BYTES_MAX || edge_id.chars().any(char::is_control) {
        let msg = format!("edge id must be 1..={ANONYMOUS_EDGE_ID_BYTES_MAX} bytes without control characters");
        return Err(Rejection::new(ReasonCode::INPUT_INVALID, msg));
    }
    let edges = state.anonymous.get(tenant_id);
    let current = edges.and_then(|m| m.get(edge_id)).map(String::as_str);
    if current == principal_id {
        return Ok(vec![]);
    }
    if let Some(p) = principal_id {
        let principal = state
            .principal(tenant_id, p)
            .filter(|x| x.id == p)
            .ok_or_else(|| Rejection::new(ReasonCode::PRINCIPAL_NOT_FOUND, format!("no principal '{p}'")))?;
        if principal.state != crate::principal::PrincipalState::Active {
            return Err(Rejection::new(ReasonCode::PRINCIPAL_STATE_CONFLICT, format!("principal '{p}' is revoked")));
        }
        if current.is_none() && edges.map_or(0, |m| m.len()) >= ANONYMOUS_EDGES_PER_TENANT_MAX {
            let msg = format!("a tenant lets at most {ANONYMOUS_EDGES_PER_TENANT_MAX} edges act without a token");
            return Err(Rejection::new(ReasonCode::INPUT_INVALID, msg));
        }
    }
    Ok(vec![Event::AnonymousAccessSetV1 {
        tenant_id: tenant_id.to_string(),
        edge_id: edge_id.to_string(),
        principal_id: principal_id.map(str::to_string),
    }])
}

/// An MCP session's record: the principal's own, active, in an active tenant; bounded
/// (`crate::session::validate`, and [`crate::session::SESSIONS_PER_TENANT_MAX`] live records per
/// tenant); an ended session takes no change; a repeat is a no-op.
fn session_state(
    state: &LedgerState,
    tenant_id: &str,
    session_id: &str,
    session: &crate::session::McpSessionV1,
    now: u64,
) -> Result<Vec<Event>, Rejection> {
    use crate::session::SESSIONS_PER_TENANT_MAX;
    active(state, tenant_id)?;
    active_principal(state, tenant_id, &session.principal_id)?;
    crate::session::validate(session_id, session, now)?;
    let sessions = state.sessions.get(tenant_id);
    let not_found = || Rejection::new(ReasonCode::SESSION_NOT_FOUND, "no such session for this principal");
    match sessions.and_then(|m| m.get(session_id)) {
        Some(known) if known.principal_id != session.principal_id || known.ended => return Err(not_found()),
        Some(known) if known == session => return Ok(vec![]),
        Some(_) => {}
        None => {
            let live = sessions.map_or(0, |m| m.values().filter(|s| s.expires_at_ms > now).count());
            if live >= SESSIONS_PER_TENANT_MAX {
                return Err(Rejection::new(
                    ReasonCode::QUOTA_EXCEEDED,
                    format!("at most {SESSIONS_PER_TENANT_MAX} MCP sessions with a record per tenant"),
                ));
            }
        }
    }
    Ok(vec![Event::SessionStateSetV1 {
        tenant_id: tenant_id.to_string(),
        session_id: session_id.to_string(),
        session: session.clone(),
    }])
}

/// Refuses an issuer registered for another tenant.
fn issuer_free(state: &LedgerState, tenant_id: &str, issuer: &str) -> Result<(), Rejection> {
    match state.issuers.get(issuer).filter(|i| i.tenant_id != tenant_id) {
        Some(owner) => Err(Rejection::new(
            ReasonCode::ISSUER_CONFLICT,
            format!("issuer '{issuer}' is registered for another tenant ({})", owner.tenant_id),
        )),
        None => Ok(()),
    }
}

/// A discovered issuer's keys fetched again: its new key set (and `jwks_uri`, when the
/// discovery document moved it), nothing when both are unchanged.
fn observed_keys(
    state: &LedgerState,
    tenant_id: &str,
    issuer: &str,
    keys: &crate::token::IssuerKeysV1,
) -> Result<Vec<Event>, Rejection> {
    existing(state, tenant_id)?;
    let source = state.issuer_sources.get(issuer).filter(|s| s.tenant_id == tenant_id).ok_or_else(|| {
        Rejection::new(ReasonCode::ISSUER_NOT_FOUND, format!("no issuer '{issuer}' known by its URL"))
    })?;
    let view = source.spec.issuer_with(keys)?;
    let mut events = Vec::new();
    if source.jwks_uri != keys.jwks_uri {
        events.push(Event::IssuerSourceSetV1 {
            tenant_id: tenant_id.to_string(),
            source: source.spec.clone(),
            jwks_uri: keys.jwks_uri.clone(),
        });
    }
    if state.issuers.get(issuer).is_none_or(|known| known.spec != view) {
        events.push(Event::TenantIssuerSetV1 { tenant_id: tenant_id.to_string(), issuer: view });
    }
    Ok(events)
}

//! How credentials' (tokens, signing keys, issuers, role certificates) events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use crate::cold::{ColdTier, Row};
use crate::ledger::{Event, EventEnvelope};
use crate::state::{unknown, CorruptEvent, LedgerState};
use crate::token::{TenantIssuer, Token};

fn encode(token: &Token) -> Vec<u8> {
    crate::encode(token).expect("a token record encodes")
}

/// Writes the rows of a new token record `token` at `revision`: the record, its time row and,
/// with `linked`, its link from its parent.
fn put_token(cold: &mut ColdTier, token: &Token, linked: bool, revision: u64) {
    let (tenant_id, record) = (token.tenant_id.as_str(), &token.record);
    let jti = record.jti.as_str();
    cold.put(tenant_id, Row::Token(jti), revision, None, Some(encode(token)));
    cold.put(tenant_id, Row::TokenExpiry(record.expires_at_ms, jti), revision, None, Some(Vec::new()));
    if let Some(parent) = record.parent_jti.as_deref().filter(|_| linked) {
        cold.put(tenant_id, Row::TokenChild(parent, jti), revision, None, Some(Vec::new()));
    }
    cold.counts(tenant_id, |c| c.tokens += 1);
}

/// `tokens` (of one tenant) written as new rows at `revision`, each linked from its parent
/// where the parent is among them (as a fold leaves them: retiring a parent drops its links).
fn put_tokens(cold: &mut ColdTier, tokens: &[Token], revision: u64) {
    let jtis: std::collections::BTreeSet<&str> = tokens.iter().map(|t| t.record.jti.as_str()).collect();
    for token in tokens {
        let linked = token.record.parent_jti.as_deref().is_some_and(|p| jtis.contains(p));
        put_token(cold, token, linked, revision);
    }
}

impl LedgerState {
    /// Moves the token records formats before 20 kept in memory ([`LedgerState::tokens`]) to
    /// cold rows, at the state's revision: what decoding such a format does.
    pub(crate) fn cool_tokens(&mut self) {
        for (tenant_id, tokens) in std::mem::take(&mut self.tokens) {
            let created = self.tenants.get(&tenant_id).map_or(0, |t| t.created_at_ms);
            self.cold.open(&tenant_id, created);
            let tokens: Vec<Token> = tokens.into_values().collect();
            put_tokens(&mut self.cold, &tokens, self.revision);
        }
        self.token_children.clear();
    }

    /// `tenant_id`'s token records written into `tier` at the state's revision (a projection's
    /// rows).
    pub(crate) fn project_tokens(&self, tenant_id: &str, tier: &mut ColdTier) {
        put_tokens(tier, &self.cold.tokens(tenant_id, None, usize::MAX), self.revision);
    }

    /// The inverse of [`LedgerState::cool_tokens`]: every token row back in
    /// [`LedgerState::tokens`] and [`LedgerState::token_children`], out of the rows, their sums
    /// and the pending writes (to write a format that kept them in memory).
    pub fn warm_tokens(&mut self) {
        let tenants: Vec<String> = self.cold.tenants.keys().cloned().collect();
        for tenant_id in tenants {
            for token in self.cold.tokens(&tenant_id, None, usize::MAX) {
                let jti = token.record.jti.clone();
                for child in self.cold.token_children(&tenant_id, &jti, usize::MAX) {
                    self.token_children
                        .entry(tenant_id.clone())
                        .or_default()
                        .entry(jti.clone())
                        .or_default()
                        .insert(child);
                }
                retire_token(&mut self.cold, &tenant_id, &jti, self.revision);
                self.tokens.entry(tenant_id.clone()).or_default().insert(jti, token);
            }
        }
        self.cold.forget_pending(&[Row::Token(""), Row::TokenExpiry(0, ""), Row::TokenChild("", "")]);
    }
}

/// Drops the rows of token `jti` of `tenant_id` at `revision` (retention retiring it): its
/// record, its time row, its link from its parent (unless the parent went first) and its links
/// to its children. `None` when it has no record.
pub(crate) fn retire_token(cold: &mut ColdTier, tenant_id: &str, jti: &str, revision: u64) -> Option<()> {
    let old = cold.get(tenant_id, Row::Token(jti))?;
    let token: Token = crate::decode_unbounded(&old).ok()?;
    cold.put(tenant_id, Row::Token(jti), revision, Some(&old), None);
    cold.put(tenant_id, Row::TokenExpiry(token.record.expires_at_ms, jti), revision, Some(&[]), None);
    if let Some(parent) = &token.record.parent_jti {
        if cold.get(tenant_id, Row::TokenChild(parent, jti)).is_some() {
            cold.put(tenant_id, Row::TokenChild(parent, jti), revision, Some(&[]), None);
        }
    }
    for child in cold.token_children(tenant_id, jti, usize::MAX) {
        cold.put(tenant_id, Row::TokenChild(jti, &child), revision, Some(&[]), None);
    }
    cold.counts(tenant_id, |c| c.tokens -= 1);
    Some(())
}

impl LedgerState {
    /// Credentials: token records and their revocation, signing keys, tenant issuers, revoked role certificates.
    pub(crate) fn fold_credential(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::TokenIssuedV1 { tenant_id, token } => {
                let view = Token {
                    tenant_id: tenant_id.clone(),
                    record: token.clone(),
                    revoked_at_ms: None,
                    revoked_via: None,
                };
                put_token(&mut self.cold, &view, true, env.revision);
            }
            Event::TokenRevokedV1 { tenant_id, jti, cascade } => {
                for id in std::iter::once(jti).chain(cascade) {
                    let old = self.cold.get(tenant_id, Row::Token(id)).ok_or_else(|| unknown(env, "token", id))?;
                    let mut t: Token =
                        crate::decode_unbounded(&old).map_err(|e| CorruptEvent::new(env, e.to_string()))?;
                    t.revoked_at_ms = Some(env.at_ms);
                    t.revoked_via = Some(jti.clone());
                    self.cold.put(tenant_id, Row::Token(id), env.revision, Some(&old), Some(encode(&t)));
                }
            }
            Event::SigningKeyRegisteredV1 { key } => {
                self.signing_keys.insert(key.kid.clone(), key.clone());
            }
            Event::TenantIssuerSetV1 { tenant_id, issuer } => {
                let view = TenantIssuer::new(tenant_id.clone(), issuer.clone(), env.revision);
                self.issuers.insert(issuer.issuer.clone(), view);
            }
            Event::TenantIssuerRemovedV1 { issuer, .. } => {
                self.issuers.remove(issuer);
                self.issuer_sources.remove(issuer);
            }
            Event::IssuerSourceSetV1 { tenant_id, source, jwks_uri } => {
                let view = crate::token::IssuerSource {
                    tenant_id: tenant_id.clone(),
                    spec: source.clone(),
                    jwks_uri: jwks_uri.clone(),
                    revision: env.revision,
                };
                self.issuer_sources.insert(source.issuer.clone(), view);
            }
            Event::IssuerTokenRevokedV1 { issuer, jti, until_ms, .. } => {
                let revoked = self.revocations.issuer_tokens.entry(issuer.clone()).or_default();
                revoked.retain(|_, until| *until > env.at_ms);
                revoked.insert(jti.clone(), *until_ms);
            }
            Event::SigningKeyRetiredV1 { kid } => {
                self.signing_keys.remove(kid);
                self.revocations.signing_keys.insert(kid.clone(), env.at_ms);
            }
            Event::RoleCertificateRevokedV1 { certificate } => {
                let revoked = &mut self.revocations.role_certificates;
                revoked.retain(|_, r| r.not_after_ms > env.at_ms);
                revoked.insert(certificate.serial.clone(), certificate.clone());
            }
            _ => return Err(CorruptEvent::new(env, "an event of another domain")),
        }
        Ok(())
    }
}

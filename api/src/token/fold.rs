//! How credentials' (tokens, signing keys, issuers, role certificates) events change the state: this domain's part of
//! [`LedgerState::fold_views`].

use crate::ledger::{Event, EventEnvelope};
use crate::state::{unknown, CorruptEvent, LedgerState};
use crate::token::{TenantIssuer, Token};

impl LedgerState {
    /// Credentials: token records and their revocation, signing keys, tenant issuers, revoked role certificates.
    pub(crate) fn fold_credential(&mut self, env: &EventEnvelope) -> Result<(), CorruptEvent> {
        match &env.event {
            Event::TokenIssuedV1 { tenant_id, token } => {
                if let Some(parent) = &token.parent_jti {
                    self.token_children
                        .entry(tenant_id.clone())
                        .or_default()
                        .entry(parent.clone())
                        .or_default()
                        .insert(token.jti.clone());
                }
                let view = Token {
                    tenant_id: tenant_id.clone(),
                    record: token.clone(),
                    revoked_at_ms: None,
                    revoked_via: None,
                };
                self.tokens.entry(tenant_id.clone()).or_default().insert(token.jti.clone(), view);
                let expiry = (token.expires_at_ms, token.jti.clone());
                self.index.token_expiry.entry(tenant_id.clone()).or_default().insert(expiry);
            }
            Event::TokenRevokedV1 { tenant_id, jti, cascade } => {
                let tokens = self.tokens.get_mut(tenant_id).ok_or_else(|| unknown(env, "token", jti))?;
                for id in std::iter::once(jti).chain(cascade) {
                    let t = tokens.get_mut(id).ok_or_else(|| unknown(env, "token", id))?;
                    t.revoked_at_ms = Some(env.at_ms);
                    t.revoked_via = Some(jti.clone());
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

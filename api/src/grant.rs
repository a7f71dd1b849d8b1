//! Principal authority only from a credential a node verified (SPEC S3).
//!
//! An edge sends the credential a request came with — the principal's bearer token, or the
//! anonymous credential of a loopback edge an operator allowed it for — with every principal's
//! act it submits. The node that receives it verifies it ([`admit`]: signature, expiry,
//! revocation, scope claim, the principal and tenant the act names) and proposes the act
//! wrapped in `Command::Verified` with a [`GrantV1`]: what every replica needs to re-check the
//! authority at ledger time ([`check`]) — token id, principal, granted scopes, which node
//! verified it — never the token itself, which must not sit in the log, a snapshot or a backup.
//! A bare reference from an edge (a token id, an issuer URL, the anonymous issuer) names no
//! authority: without a credential the node refuses the act before it reaches the log.

pub use crate::credential::{Credential, GrantV1};

use crate::auth::{Authority, ANONYMOUS_ISSUER};
use crate::ledger::Command;
use crate::principal::scope_covers;
use crate::reason::ReasonCode;
use crate::rejection::Rejection;
use crate::state::LedgerState;
use crate::token::WRIT_ISSUER;

/// Who presents a credential to whom: the edge (by its certificate) and the verifying node.
pub struct Presenter<'a> {
    pub edge_id: &'a str,
    pub node: &'a str,
}

/// One part of a command that acts under a principal's authority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Act<'a> {
    pub tenant_id: &'a str,
    pub principal_id: &'a str,
    /// The authority the act names (`OnBehalfOf`'s, or an operation spec's `authority_ref`).
    pub authority_ref: &'a str,
    /// The scope the act needs, when the command says (an operation's comes from the catalog).
    pub scope: Option<&'static str>,
}

/// Every principal act `command` carries, through its wrappers.
pub fn acts(command: &Command) -> Vec<Act<'_>> {
    command
        .layers()
        .filter_map(|layer| match layer {
            Command::OnBehalfOf { authority_ref, command } => {
                let (principal_id, scope) = command.principal_act()?;
                Some(Act { tenant_id: command.stream(), principal_id, authority_ref, scope: Some(scope) })
            }
            Command::SubmitOperation { tenant_id, spec }
            | Command::ProposeOperation { tenant_id, spec }
            | Command::SubmitProposed { tenant_id, spec, .. } => Some(Act {
                tenant_id,
                principal_id: &spec.principal_id,
                authority_ref: &spec.authority_ref,
                scope: None,
            }),
            _ => None,
        })
        .collect()
}

fn unverified(message: impl Into<String>) -> Rejection {
    Rejection::new(ReasonCode::AUTH_TOKEN_INVALID, message)
}

/// The node's side: verifies `credential` for every act of `command` against `state` at
/// `now_ms` and answers the command as the log is to record it — wrapped in
/// `Command::Verified` — or unchanged when it carries no act. An act without a credential, a
/// credential that does not verify, or one for another tenant, principal or authority than
/// the act names is refused.
pub fn admit(
    state: &LedgerState,
    command: Command,
    credential: Option<&Credential>,
    presenter: &Presenter<'_>,
    now_ms: u64,
) -> Result<Command, Rejection> {
    let acts = acts(&command);
    let Some(first) = acts.first() else { return Ok(command) };
    let credential = credential.ok_or_else(|| {
        Rejection::new(ReasonCode::AUTH_TOKEN_MISSING, "a principal's act needs the credential it was admitted under")
    })?;
    let authority = match credential {
        Credential::Bearer(token) => {
            let audience = crate::auth::segment(token, 1)
                .and_then(|claims| claims["aud"].as_str().map(str::to_string))
                .ok_or_else(|| unverified("the token lacks claim 'aud'"))?;
            crate::auth::verify(state, token, &[audience], now_ms)?
        }
        Credential::Anonymous => anonymous(state, first.tenant_id, first.principal_id, presenter.edge_id)?,
    };
    bind(&authority, &command)?;
    let grant = GrantV1 {
        tenant_id: authority.tenant_id.clone(),
        principal_id: authority.principal_id.clone(),
        issuer: authority.issuer.clone(),
        token_id: authority.token_id.clone(),
        scopes: authority.scopes.clone(),
        expires_at_ms: authority.expires_at_ms,
        verified_by: presenter.node.to_string(),
        edge_id: presenter.edge_id.to_string(),
    };
    Ok(Command::Verified { grant, command: Box::new(command) })
}

/// The decisions `command` records about requests (`RecordDecisions`, and an `Audited`
/// decision whose command carries no act — an act's own decision is bound to its credential),
/// as `(tenant, principal)` where they name a principal of the tenant.
fn decided_principals<'a>(state: &LedgerState, command: &'a Command) -> std::collections::BTreeSet<(&'a str, &'a str)> {
    let mut out = std::collections::BTreeSet::new();
    for layer in command.layers() {
        let (tenant_id, decisions) = match layer {
            Command::RecordDecisions { tenant_id, decisions } => (tenant_id.as_str(), decisions.iter().collect()),
            Command::RecordDecisionsV2 { tenant_id, decisions } => {
                (tenant_id.as_str(), decisions.iter().map(|d| &d.decision).collect())
            }
            Command::Audited { decision, command } if acts(command).is_empty() => (command.stream(), vec![decision]),
            Command::AuditedV2 { decision, command } if acts(command).is_empty() => {
                (command.stream(), vec![&decision.decision])
            }
            _ => continue,
        };
        for d in decisions {
            if state.principals.get(tenant_id).is_some_and(|m| m.contains_key(&d.principal_id)) {
                out.insert((tenant_id, d.principal_id.as_str()));
            }
        }
    }
    out
}

/// The node's side for request decisions an edge records: every principal they name is
/// vouched for by a credential among `vouchers` — a token of that principal by its signature
/// ([`crate::auth::holder`]), or the anonymous credential of an edge the tenant lets act as
/// that principal. An edge records decisions only about principals whose requests it served.
pub fn vouched(
    state: &LedgerState,
    command: &Command,
    vouchers: &[Credential],
    presenter: &Presenter<'_>,
    now_ms: u64,
) -> Result<(), Rejection> {
    let needed = decided_principals(state, command);
    if needed.is_empty() {
        return Ok(());
    }
    let holders: Vec<(String, String)> = vouchers
        .iter()
        .filter_map(|v| match v {
            Credential::Bearer(token) => crate::auth::holder(state, token, now_ms).ok(),
            Credential::Anonymous => None,
        })
        .collect();
    let anonymous = vouchers.iter().any(|v| matches!(v, Credential::Anonymous));
    for (tenant_id, principal_id) in needed {
        let by_token = holders.iter().any(|(t, p)| t == tenant_id && p == principal_id);
        let by_anonymous = anonymous
            && state.anonymous.get(tenant_id).and_then(|e| e.get(presenter.edge_id)).is_some_and(|p| p == principal_id);
        if !by_token && !by_anonymous {
            return Err(Rejection::new(
                ReasonCode::AUTH_TOKEN_MISSING,
                "a recorded decision names a principal no credential sent with it vouches for",
            ));
        }
    }
    Ok(())
}

/// The anonymous authority, for an edge the tenant lets act without a token
/// (`LedgerState::anonymous`): as the one principal recorded for it, in that tenant only.
fn anonymous(state: &LedgerState, tenant_id: &str, principal_id: &str, edge_id: &str) -> Result<Authority, Rejection> {
    let allowed = state.anonymous.get(tenant_id).and_then(|edges| edges.get(edge_id));
    if allowed.map(String::as_str) != Some(principal_id) {
        return Err(Rejection::new(
            ReasonCode::AUTH_TOKEN_MISSING,
            format!("edge '{edge_id}' has no anonymous access to this principal: a bearer token is required"),
        ));
    }
    crate::auth::anonymous(state, tenant_id, principal_id)
}

/// Every act of `command` is by the authority's principal, in its tenant, under the authority
/// it names, and within the scope the act states.
fn bind(authority: &Authority, command: &Command) -> Result<(), Rejection> {
    let decided_for_another = command.layers().any(|layer| match layer {
        Command::Audited { decision, .. } => decision.principal_id != authority.principal_id,
        Command::AuditedV2 { decision, .. } => decision.decision.principal_id != authority.principal_id,
        _ => false,
    });
    if decided_for_another {
        return Err(unverified("the request's decision names another principal than its credential"));
    }
    for act in acts(command) {
        if act.tenant_id != authority.tenant_id || act.principal_id != authority.principal_id {
            return Err(unverified("the act names another tenant or principal than its credential"));
        }
        if act.authority_ref != authority.reference() {
            return Err(unverified("the act names another authority than its credential"));
        }
        if let Some(scope) = act.scope {
            authority.require(scope)?;
        }
    }
    Ok(())
}

/// The ledger's side, on every replica at ledger time `now`: the authority `grant` still
/// stands for — a Writ token's record unrevoked and unexpired along its chain, a tenant
/// issuer still the tenant's with the token id unrevoked, an anonymous principal still active
/// and still recorded for the edge —
/// with the granted scopes narrowed to what the principal still holds.
pub fn granted(state: &LedgerState, grant: &GrantV1, now: u64) -> Result<Authority, Rejection> {
    let mut authority = match grant.issuer.as_str() {
        WRIT_ISSUER => {
            let jti = grant.token_id.as_deref().ok_or_else(|| unverified("a Writ grant names its token"))?;
            crate::auth::recorded_authority(state, &grant.tenant_id, jti, &grant.principal_id, now)?
        }
        // Still recorded for this edge, tenant and principal.
        ANONYMOUS_ISSUER if grant.expires_at_ms > now => {
            anonymous(state, &grant.tenant_id, &grant.principal_id, &grant.edge_id)?
        }
        ANONYMOUS_ISSUER => return Err(Rejection::new(ReasonCode::AUTH_TOKEN_EXPIRED, "the grant has expired")),
        issuer => {
            let tenant_issuer = state.issuers.get(issuer).is_some_and(|i| i.tenant_id == grant.tenant_id);
            if !tenant_issuer {
                return Err(unverified(format!("'{issuer}' is no longer an issuer of this tenant")));
            }
            let revoked = grant.token_id.as_deref().is_some_and(|j| state.revocations.issuer_token_revoked(issuer, j));
            if revoked {
                return Err(Rejection::new(ReasonCode::AUTH_TOKEN_REVOKED, "the issuer's token id was revoked"));
            }
            if grant.expires_at_ms <= now {
                return Err(Rejection::new(ReasonCode::AUTH_TOKEN_EXPIRED, "the token has expired"));
            }
            let mut a = crate::auth::principal_authority(state, &grant.tenant_id, &grant.principal_id, issuer)?;
            a.token_id = grant.token_id.clone();
            a.expires_at_ms = grant.expires_at_ms;
            // The token's own scope claim, as far as the principal still holds it.
            let held = std::mem::take(&mut a.scopes);
            a.scopes = grant.scopes.iter().filter(|s| held.iter().any(|h| scope_covers(h, s))).cloned().collect();
            a
        }
    };
    authority.scopes.retain(|s| grant.scopes.iter().any(|g| scope_covers(g, s)));
    Ok(authority)
}

/// What `Command::Verified` checks before its command is decided: the grant still stands
/// ([`granted`]) and binds every act of `command` (tenant, principal, authority, stated scope);
/// an operation's action and device scopes are checked against it too (`scopes` answers them).
pub fn check(
    state: &LedgerState,
    grant: &GrantV1,
    command: &Command,
    now: u64,
    scopes: impl Fn(&Command) -> Result<Vec<String>, Rejection>,
) -> Result<(), Rejection> {
    let authority = granted(state, grant, now)?;
    bind(&authority, command)?;
    for layer in command.layers() {
        for scope in scopes(layer)? {
            authority.require(&scope)?;
        }
    }
    Ok(())
}

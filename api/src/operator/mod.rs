//! Named operators: the people who run Writ, each an identity in the ledger with one role, over
//! the whole cluster or one tenant, and their sign-in sessions. The admin API authenticates a
//! session by its secret (kept here only as a SHA-256 digest) and submits the person's acts
//! inside `Command::ByOperator`; every replica then checks, at ledger time, that the session
//! still stands and that its role and scope allow the act (`crate::operator::decide::check`), and records who acted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::reason::ReasonCode;
use crate::rejection::Rejection;

/// Most operators a cluster keeps.
pub const OPERATORS_MAX: usize = 1024;
/// Most open sessions of one operator (opening one more closes the oldest).
pub const SESSIONS_PER_OPERATOR_MAX: usize = 16;
/// The longest a session lives, whatever its idle use (ledger time).
pub const SESSION_TTL_MAX_MS: u64 = 12 * 3_600_000;
/// Longest operator name (`alice`, `alice@acme.example`).
pub const NAME_BYTES_MAX: usize = 128;
/// Longest issuer URL or subject of an operator's sign-in binding.
pub const SIGN_IN_BYTES_MAX: usize = 512;
/// How an operator's session credential starts: `wos_<revision>.<session id>.<secret>`, the
/// revision the session was recorded at first (a node waits to hold it before looking it up).
pub const SESSION_PREFIX: &str = "wos_";

/// What an operator may do. Roles are sets, not a ladder: an approver decides operations but
/// does not change configuration, an operator changes configuration but approves nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperatorRole {
    /// Reads everything in scope.
    Viewer,
    /// Reads, changes the tenant's configuration, cancels operations.
    Operator,
    /// Reads, decides operations that need a human (approve, accept, reject, resolve, cancel)
    /// and authorization requests.
    Approver,
    /// Everything, the cluster and the operators included.
    Admin,
}

impl OperatorRole {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Operator => "operator",
            Self::Approver => "approver",
            Self::Admin => "admin",
        }
    }

    /// Whether this role may make `act`.
    pub fn may(self, act: OperatorAct) -> bool {
        use OperatorAct::*;
        match self {
            Self::Viewer => act == Read,
            Self::Operator => matches!(act, Read | Configure | Cancel),
            Self::Approver => matches!(act, Read | Decide | Cancel),
            Self::Admin => true,
        }
    }
}

impl std::str::FromStr for OperatorRole {
    type Err = Rejection;
    fn from_str(s: &str) -> Result<Self, Rejection> {
        [Self::Viewer, Self::Operator, Self::Approver, Self::Admin]
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| invalid(format!("role '{s}' is none of viewer, operator, approver, admin")))
    }
}

/// The kinds of act roles are made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperatorAct {
    Read,
    Configure,
    Cancel,
    Decide,
    Administer,
}

impl OperatorAct {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Configure => "configure",
            Self::Cancel => "cancel",
            Self::Decide => "decide",
            Self::Administer => "administer",
        }
    }
}

/// How an operator signs in through an OpenID provider: the provider's issuer URL and the
/// person's `sub` there.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignInV1 {
    pub issuer: String,
    pub subject: String,
}

/// A person who runs Writ.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorV1 {
    pub name: String,
    pub role: OperatorRole,
    /// The one tenant (id) this operator works on; `None`: the whole cluster.
    #[serde(default)]
    pub tenant_id: Option<String>,
    #[serde(default)]
    pub display_name: Option<String>,
    #[serde(default)]
    pub sign_in: Option<SignInV1>,
}

impl OperatorV1 {
    /// The name acts are recorded under (`operator:alice`), in operation histories and work.
    pub fn actor(&self) -> String {
        actor_name(&self.name)
    }
}

/// How the name an operator's acts are recorded under starts.
pub const ACTOR_PREFIX: &str = "operator:";

/// The name an operator's acts are recorded under.
pub fn actor_name(operator: &str) -> String {
    format!("{ACTOR_PREFIX}{operator}")
}

/// A signed-in session of an operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorSessionV1 {
    pub session_id: String,
    pub operator: String,
    /// SHA-256 (hex) of the session's secret: the admin API compares, the ledger never sees it.
    pub secret_sha256: String,
    pub opened_at_ms: u64,
    pub expires_at_ms: u64,
    /// How long the session may go unused (0: no idle limit, only its lifetime).
    #[serde(default)]
    pub idle_timeout_ms: u64,
    /// When it was last used, as the ledger recorded it (at most every [`USE_RECORDED_EVERY_MS`]).
    #[serde(default)]
    pub last_used_at_ms: u64,
}

impl OperatorSessionV1 {
    /// Whether the session still stands at `now_ms`: within its lifetime, and used recently
    /// enough (its idle limit counted from its last recorded use, or its opening).
    pub fn stands(&self, now_ms: u64) -> Result<(), Rejection> {
        if self.expires_at_ms <= now_ms {
            return Err(Rejection::new(ReasonCode::OPERATOR_SESSION_INVALID, "the operator session has expired"));
        }
        let used = self.last_used_at_ms.max(self.opened_at_ms);
        if self.idle_timeout_ms > 0 && used.saturating_add(self.idle_timeout_ms) <= now_ms {
            return Err(Rejection::new(
                ReasonCode::OPERATOR_SESSION_INVALID,
                "the operator session went unused too long",
            ));
        }
        Ok(())
    }

    /// Whether a use at `now_ms` is worth recording (the last one recorded is that old).
    pub fn use_worth_recording(&self, now_ms: u64) -> bool {
        self.idle_timeout_ms > 0 && self.last_used_at_ms.max(self.opened_at_ms) + USE_RECORDED_EVERY_MS <= now_ms
    }
}

/// How often a session's use is recorded in the ledger (its idle limit is counted from there).
pub const USE_RECORDED_EVERY_MS: u64 = 60_000;
/// The longest idle limit a session may have.
pub const IDLE_TIMEOUT_MAX_MS: u64 = SESSION_TTL_MAX_MS;

/// The OpenID provider operators sign in to the console with (authorization code + PKCE, a
/// public client: no secret to keep).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleSignInV1 {
    pub issuer: String,
    pub client_id: String,
    /// Let the provider live at a loopback or private address.
    #[serde(default)]
    pub allow_private_network: bool,
}

impl ConsoleSignInV1 {
    pub fn validate(&self) -> Result<(), Rejection> {
        crate::token::check_issuer_url(&self.issuer, self.allow_private_network)?;
        if self.client_id.is_empty() || self.client_id.len() > SIGN_IN_BYTES_MAX {
            return Err(invalid(format!("a client id is 1..={SIGN_IN_BYTES_MAX} bytes")));
        }
        Ok(())
    }
}

/// The operators, their open sessions and the console's sign-in provider, as every replica
/// keeps them (state format 14).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operators {
    pub operators: BTreeMap<String, OperatorV1>,
    pub sessions: BTreeMap<String, OperatorSessionV1>,
    pub console_sign_in: Option<ConsoleSignInV1>,
}

impl Operators {
    /// Opens `session`, closing what expired before it opened and, beyond
    /// [`SESSIONS_PER_OPERATOR_MAX`], the operator's oldest.
    pub fn open(&mut self, session: OperatorSessionV1) {
        let at = session.opened_at_ms;
        self.sessions.retain(|_, s| s.expires_at_ms > at);
        let mut own: Vec<(u64, String)> = self
            .sessions
            .values()
            .filter(|s| s.operator == session.operator)
            .map(|s| (s.opened_at_ms, s.session_id.clone()))
            .collect();
        own.sort();
        let excess = (own.len() + 1).saturating_sub(SESSIONS_PER_OPERATOR_MAX);
        for (_, id) in own.into_iter().take(excess) {
            self.sessions.remove(&id);
        }
        self.sessions.insert(session.session_id.clone(), session);
    }

    /// Records a use of `session_id` at ledger time `at_ms`.
    pub fn used(&mut self, session_id: &str, at_ms: u64) {
        if let Some(s) = self.sessions.get_mut(session_id) {
            s.last_used_at_ms = s.last_used_at_ms.max(at_ms);
        }
    }

    /// Closes one session of `operator`, or all of them.
    pub fn close(&mut self, operator: &str, session_id: Option<&str>) {
        self.sessions.retain(|id, s| s.operator != operator || session_id.is_some_and(|only| only != id));
    }

    /// Removes an operator with its sessions.
    pub fn remove(&mut self, operator: &str) {
        self.operators.remove(operator);
        self.close(operator, None);
    }

    /// The operator who signs in as `subject` of `issuer`.
    pub fn signing_in(&self, issuer: &str, subject: &str) -> Option<&OperatorV1> {
        self.operators.values().find(|o| o.sign_in.as_ref().is_some_and(|s| s.issuer == issuer && s.subject == subject))
    }

    /// The session `session_id` with its operator, if it stands at `now_ms`.
    pub fn session(&self, session_id: &str, now_ms: u64) -> Result<(&OperatorSessionV1, &OperatorV1), Rejection> {
        let session = self
            .sessions
            .get(session_id)
            .ok_or_else(|| Rejection::new(ReasonCode::OPERATOR_SESSION_INVALID, "no such operator session"))?;
        session.stands(now_ms)?;
        let operator = self
            .operators
            .get(&session.operator)
            .ok_or_else(|| Rejection::new(ReasonCode::OPERATOR_SESSION_INVALID, "the session's operator is gone"))?;
        Ok((session, operator))
    }
}

fn invalid(m: impl Into<String>) -> Rejection {
    Rejection::new(ReasonCode::INPUT_INVALID, m)
}

/// An operator name: 1..=[`NAME_BYTES_MAX`] bytes of lower-case letters, digits and `-._@`.
pub fn validate_name(name: &str) -> Result<(), Rejection> {
    let ok = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._@".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(invalid(format!("an operator name is 1..={NAME_BYTES_MAX} bytes of a-z, 0-9, '-', '.', '_', '@'")))
    }
}

/// An operator as an admin sets it: a valid name, display name and sign-in binding.
pub fn validate(operator: &OperatorV1) -> Result<(), Rejection> {
    validate_name(&operator.name)?;
    crate::rejection::validate_text(
        "display_name",
        operator.display_name.as_deref(),
        crate::rejection::DISPLAY_NAME_BYTES_MAX,
    )?;
    if let Some(s) = &operator.sign_in {
        // Only compared with what a provider says it is, never fetched here: loopback allowed.
        crate::token::check_issuer_url(&s.issuer, true)?;
        if s.subject.is_empty() || s.subject.len() > SIGN_IN_BYTES_MAX || s.issuer.len() > SIGN_IN_BYTES_MAX {
            return Err(invalid(format!("a sign-in's issuer and subject are 1..={SIGN_IN_BYTES_MAX} bytes")));
        }
    }
    Ok(())
}

/// A session as the admin API asks for it: an id and digest of the right shape, a lifetime
/// (`expires_at_ms − opened_at_ms`, counted again from ledger time) within
/// [`SESSION_TTL_MAX_MS`].
pub fn validate_session(session: &OperatorSessionV1) -> Result<(), Rejection> {
    let hexlike =
        |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !hexlike(&session.session_id, 32) || !hexlike(&session.secret_sha256, 64) {
        return Err(invalid("a session id is 32 and its secret's digest 64 lower-case hex digits"));
    }
    let lifetime = session.expires_at_ms.saturating_sub(session.opened_at_ms);
    if lifetime == 0 || lifetime > SESSION_TTL_MAX_MS {
        return Err(invalid(format!("a session lives up to {} h", SESSION_TTL_MAX_MS / 3_600_000)));
    }
    if session.idle_timeout_ms > IDLE_TIMEOUT_MAX_MS {
        return Err(invalid("a session's idle limit is at most its longest lifetime"));
    }
    Ok(())
}

/// A session credential as the admin API hands it out once.
pub fn credential(revision: u64, session_id: &str, secret: &str) -> String {
    format!("{SESSION_PREFIX}{revision}.{session_id}.{secret}")
}

/// Splits a session credential ([`credential`]) into revision, session id and secret.
pub fn parse_credential(credential: &str) -> Option<(u64, &str, &str)> {
    let mut parts = credential.strip_prefix(SESSION_PREFIX)?.splitn(3, '.');
    let revision = parts.next()?.parse().ok()?;
    let (id, secret) = (parts.next()?, parts.next()?);
    (id.len() == 32 && !secret.is_empty() && secret.len() <= 128).then_some((revision, id, secret))
}

#[derive(Deserialize)]
struct IdTokenClaims {
    sub: String,
    nonce: Option<String>,
}

/// Verifies an OpenID Connect ID token of the console's provider: signed with an asymmetric
/// algorithm by a key of `jwks` (JSON text), issued by `issuer` for `client_id`, unexpired at
/// `now_ms` (no leeway beyond 60 s), carrying `nonce`. Answers its subject.
pub fn verify_id_token(
    id_token: &str,
    jwks: &str,
    issuer: &str,
    client_id: &str,
    nonce: &str,
    now_ms: u64,
) -> Result<String, Rejection> {
    use jsonwebtoken::Algorithm;
    let refused = |m: &str| Rejection::new(ReasonCode::OPERATOR_SIGN_IN_FAILED, m);
    let header = jsonwebtoken::decode_header(id_token).map_err(|_| refused("the ID token is not a JWT"))?;
    if matches!(header.alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
        return Err(refused("the ID token must be signed with the provider's key"));
    }
    let keys: jsonwebtoken::jwk::JwkSet =
        serde_json::from_str(jwks).map_err(|_| refused("the provider's key set is not a JWKS"))?;
    let mut v = jsonwebtoken::Validation::new(header.alg);
    v.set_issuer(&[issuer]);
    v.set_audience(&[client_id]);
    v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    v.validate_exp = false;
    let claims = keys
        .keys
        .iter()
        .filter(|k| header.kid.is_none() || k.common.key_id == header.kid)
        .filter_map(|jwk| jsonwebtoken::DecodingKey::from_jwk(jwk).ok())
        .find_map(|key| jsonwebtoken::decode::<serde_json::Value>(id_token, &key, &v).ok())
        .ok_or_else(|| refused("the ID token does not verify against the provider's keys, issuer and client"))?
        .claims;
    let exp_ms = claims["exp"].as_u64().unwrap_or(0).saturating_mul(1000);
    if exp_ms.saturating_add(60_000) <= now_ms {
        return Err(refused("the ID token has expired"));
    }
    let claims: IdTokenClaims = serde_json::from_value(claims).map_err(|_| refused("the ID token lacks a subject"))?;
    if claims.nonce.as_deref() != Some(nonce) {
        return Err(refused("the ID token's nonce is not this sign-in's"));
    }
    Ok(claims.sub)
}

pub mod decide;
mod fold;

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: char, operator: &str, at: u64) -> OperatorSessionV1 {
        OperatorSessionV1 {
            session_id: id.to_string().repeat(32),
            operator: operator.into(),
            secret_sha256: "0".repeat(64),
            opened_at_ms: at,
            expires_at_ms: at + 1000,
            idle_timeout_ms: 0,
            last_used_at_ms: 0,
        }
    }

    #[test]
    fn roles_are_sets_of_acts() {
        use OperatorAct::*;
        assert!(OperatorRole::Viewer.may(Read) && !OperatorRole::Viewer.may(Cancel));
        assert!(OperatorRole::Operator.may(Configure) && !OperatorRole::Operator.may(Decide));
        assert!(OperatorRole::Approver.may(Decide) && !OperatorRole::Approver.may(Configure));
        assert!(!OperatorRole::Approver.may(Administer) && OperatorRole::Admin.may(Administer));
    }

    #[test]
    fn sessions_expire_close_and_stay_bounded() {
        let mut ops = Operators::default();
        ops.operators.insert(
            "alice".into(),
            OperatorV1 {
                name: "alice".into(),
                role: OperatorRole::Viewer,
                tenant_id: None,
                display_name: None,
                sign_in: None,
            },
        );
        ops.open(session('a', "alice", 0));
        assert!(ops.session(&"a".repeat(32), 999).is_ok());
        assert_eq!(ops.session(&"a".repeat(32), 1000).unwrap_err().reason, ReasonCode::OPERATOR_SESSION_INVALID);
        // Opening after it expired drops it; the cap closes the oldest.
        let ids = "bcdefghijklmnopqrs";
        for (i, c) in ids.chars().enumerate() {
            ops.open(session(c, "alice", 2000 + i as u64));
        }
        assert_eq!(ops.sessions.len(), SESSIONS_PER_OPERATOR_MAX);
        assert!(!ops.sessions.contains_key(&"a".repeat(32)) && !ops.sessions.contains_key(&"b".repeat(32)));
        ops.close("alice", Some(&"s".repeat(32)));
        assert_eq!(ops.sessions.len(), SESSIONS_PER_OPERATOR_MAX - 1);
        ops.remove("alice");
        assert!(ops.sessions.is_empty() && ops.operators.is_empty());
    }

    #[test]
    fn an_unused_session_ends_before_its_lifetime() {
        let mut s = session('a', "alice", 0);
        (s.expires_at_ms, s.idle_timeout_ms) = (10 * USE_RECORDED_EVERY_MS, 2 * USE_RECORDED_EVERY_MS);
        assert!(s.stands(2 * USE_RECORDED_EVERY_MS - 1).is_ok());
        assert!(s.stands(2 * USE_RECORDED_EVERY_MS).is_err(), "unused for its idle limit");
        assert!(!s.use_worth_recording(USE_RECORDED_EVERY_MS - 1) && s.use_worth_recording(USE_RECORDED_EVERY_MS));
        s.last_used_at_ms = USE_RECORDED_EVERY_MS;
        assert!(s.stands(3 * USE_RECORDED_EVERY_MS - 1).is_ok(), "a recorded use moves the limit");
        assert!(s.stands(10 * USE_RECORDED_EVERY_MS).is_err(), "never past its lifetime");
    }

    #[test]
    fn credentials_parse_only_in_shape() {
        let id = "0123456789abcdef0123456789abcdef";
        assert_eq!(parse_credential(&credential(7, id, "s3cret")), Some((7, id, "s3cret")));
        assert_eq!(parse_credential("wos_7.short.s3cret"), None);
        assert_eq!(parse_credential(&format!("wos_{id}.s3cret")), None);
        assert_eq!(parse_credential(&format!("7.{id}.s3cret")), None);
    }
}

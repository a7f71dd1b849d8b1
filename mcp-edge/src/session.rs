//! Sessions of the 2025 wire, kept by no replica. A session id is a sealed value (the edge
//! replicas' shared seal key, see `crate::seal`) bound to the tenant, the principal and a digest
//! of the credential that opened it, carrying the negotiated version, the client's declared
//! capabilities and info, a nonce and an expiry: any replica, or a restarted one, continues a
//! session from its id alone, and opening one costs no ledger write and no edge memory.
//!
//! What a session changes after `initialize` (its log level, its resource subscriptions, its
//! end) is a ledger record every replica follows ([`record`]; `writ_api::session`), written
//! only when the client changes it.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use writ_api::auth::Authority;
use writ_api::session::McpSessionV1;
use writ_client::verifier::Verifier;

use crate::seal::{self, Binding, SealKey};

/// Protocol versions of the 2025 wire this edge serves, newest first (they differ from each
/// other only in what the edge does not use).
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];
/// How long a session id stays valid after `initialize`.
pub const SESSION_TTL_MS: u64 = 24 * 60 * 60 * 1000;
/// Largest `clientInfo` an `initialize` may carry (bytes of JSON).
pub const CLIENT_INFO_BYTES_MAX: usize = 512;
/// Largest `capabilities` object an `initialize` may carry (bytes of JSON).
pub const CAPABILITIES_BYTES_MAX: usize = 2048;

/// What a session id carries besides its binding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// The negotiated protocol version (one of [`LEGACY_VERSIONS`]).
    #[serde(rename = "v")]
    pub version: String,
    /// The client's declared capabilities.
    #[serde(rename = "c")]
    pub capabilities: Value,
    /// The client's `clientInfo`, as sent (bounded).
    #[serde(rename = "i")]
    pub client_info: Value,
    /// Random, names the session's state.
    #[serde(rename = "n")]
    pub nonce: String,
    #[serde(rename = "x")]
    pub expires_at_ms: u64,
}

/// Why an `initialize` is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// `clientInfo` or `capabilities` is not an object or exceeds its bound.
    Oversized(&'static str),
}

/// The digest of the credential a request came with: a session continues only with the same
/// credential (a stolen id is useless without the token it was opened with).
pub fn credential_digest(bearer: Option<&str>) -> String {
    match bearer {
        Some(token) => writ_api::sha256_hex(token.as_bytes())[..32].to_string(),
        None => "anonymous".into(),
    }
}

fn binding(authority: &Authority, bearer: Option<&str>) -> Binding {
    Binding {
        tenant_id: authority.tenant_id.clone(),
        principal_id: authority.principal_id.clone(),
        purpose: format!("mcp session {}", credential_digest(bearer)),
    }
}

/// A new session for `initialize`: its id and what it carries.
pub fn open_new(
    key: &SealKey,
    authority: &Authority,
    bearer: Option<&str>,
    version: &str,
    capabilities: &Value,
    client_info: &Value,
    now_ms: u64,
) -> Result<(String, Session), Refused> {
    let bounded = |v: &Value, max: usize, what| {
        let ok = (v.is_object() || v.is_null()) && serde_json::to_vec(v).is_ok_and(|b| b.len() <= max);
        if ok {
            Ok(())
        } else {
            Err(Refused::Oversized(what))
        }
    };
    bounded(capabilities, CAPABILITIES_BYTES_MAX, "capabilities")?;
    bounded(client_info, CLIENT_INFO_BYTES_MAX, "clientInfo")?;
    let session = Session {
        version: version.to_string(),
        capabilities: if capabilities.is_object() { capabilities.clone() } else { Value::Object(Default::default()) },
        client_info: client_info.clone(),
        nonce: writ_api::hex(&rand::random::<[u8; 16]>()),
        expires_at_ms: now_ms + SESSION_TTL_MS,
    };
    let data = serde_json::to_value(&session).expect("serializes");
    Ok((seal::seal(key, &binding(authority, bearer), session.expires_at_ms, data), session))
}

/// The session `id` names, if it is intact, unexpired and was opened by this caller (tenant,
/// principal and credential).
pub fn open(key: &SealKey, authority: &Authority, bearer: Option<&str>, id: &str, now_ms: u64) -> Option<Session> {
    let data = seal::open(key, &binding(authority, bearer), now_ms, id).ok()?;
    serde_json::from_value(data).ok()
}

/// The record of what `session` changed after `initialize` (`Command::SetSessionState`), as the
/// replica holds it; a fresh one when there is none. One that names another principal counts
/// as ended (a session id is never reused).
pub fn record(verifier: &Verifier, authority: &Authority, session: &Session) -> McpSessionV1 {
    let fresh = || McpSessionV1 {
        principal_id: authority.principal_id.clone(),
        expires_at_ms: session.expires_at_ms,
        ..McpSessionV1::default()
    };
    let held = verifier.with_state(|s| s.sessions.get(&authority.tenant_id)?.get(&session.nonce).cloned());
    match held {
        Some(r) if r.principal_id == authority.principal_id => r,
        Some(_) => McpSessionV1 { ended: true, ..fresh() },
        None => fresh(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn authority(tenant: &str, principal: &str) -> Authority {
        Authority {
            tenant_id: tenant.into(),
            principal_id: principal.into(),
            principal_name: principal.into(),
            issuer: writ_api::token::WRIT_ISSUER.into(),
            token_id: None,
            parent_token_id: None,
            chain: Vec::new(),
            scopes: Default::default(),
            revoked_scopes: Default::default(),
            expires_at_ms: u64::MAX,
        }
    }

    #[test]
    fn a_session_opens_only_for_its_tenant_principal_and_credential() {
        let key = SealKey::random();
        let a = authority("t1", "p1");
        let (id, s) =
            open_new(&key, &a, Some("tok"), "2025-11-25", &json!({"elicitation": {}}), &json!({"name": "c"}), 1_000)
                .unwrap();
        assert!(id.bytes().all(|b| (0x21..=0x7e).contains(&b)), "visible ASCII: {id}");
        assert_eq!(open(&key, &a, Some("tok"), &id, 2_000), Some(s.clone()));
        assert_eq!(open(&key, &a, Some("other"), &id, 2_000), None, "another token");
        assert_eq!(open(&key, &authority("t1", "p2"), Some("tok"), &id, 2_000), None, "another principal");
        assert_eq!(open(&key, &authority("t2", "p1"), Some("tok"), &id, 2_000), None, "another tenant");
        assert_eq!(open(&key, &a, Some("tok"), &id, 1_000 + SESSION_TTL_MS), None, "expired");
        assert_eq!(open(&SealKey::random(), &a, Some("tok"), &id, 2_000), None, "another key");
        assert_eq!(open(&key, &a, Some("tok"), &format!("{id}x"), 2_000), None, "tampered");
        let big = json!({"name": "x".repeat(CLIENT_INFO_BYTES_MAX)});
        assert_eq!(open_new(&key, &a, None, "2025-11-25", &json!({}), &big, 0), Err(Refused::Oversized("clientInfo")));
        assert!(open_new(&key, &a, None, "2025-11-25", &json!([1]), &json!({}), 0).is_err());
    }
}

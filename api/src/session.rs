//! What an MCP session of the 2025 wire changed after `initialize` (SPEC E8): its log level,
//! its resource subscriptions, its end. The session itself is a sealed id no replica keeps;
//! these few facts are ledger records so that every edge replica, and a restarted one, sees
//! them (`Command::SetSessionState`). Opening a session writes nothing: only a client's own
//! change does, bounded per session and per tenant, and expired records are dropped when the
//! tenant's next one is folded.

use serde::{Deserialize, Serialize};

use crate::reason::ReasonCode;
use crate::rejection::Rejection;

/// A session id's nonce: 32 lowercase hex digits.
pub const SESSION_ID_HEX: usize = 32;
/// Sessions with a record a tenant may hold at once (expired ones do not count).
pub const SESSIONS_PER_TENANT_MAX: usize = 10_000;
/// Resource subscriptions one session holds at most.
pub const SUBSCRIPTIONS_MAX: usize = 64;
/// Longest subscribed URI (bytes).
pub const URI_BYTES_MAX: usize = 1024;
/// Longest a record may be kept ahead of ledger time (a session lives 24 hours).
pub const SESSION_TTL_MS_MAX: u64 = 48 * 3600 * 1000;
/// The scope a principal needs to change its session (the one it needs to use MCP at all).
pub const SESSION_SCOPE: &str = "tools:list";
/// Log levels of MCP (RFC 5424 names), least severe first.
pub const LOG_LEVELS: &[&str] = &["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

/// One session's record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpSessionV1 {
    /// The principal that opened it: only it changes the record.
    pub principal_id: String,
    /// When the session expires (the record goes with it).
    pub expires_at_ms: u64,
    /// The least severe `notifications/message` level the client asked for.
    pub log_level: Option<String>,
    /// Subscribed resource URIs, sorted and unique.
    pub subscriptions: Vec<String>,
    /// Ended (DELETE): final, every later request with the id is refused.
    pub ended: bool,
}

fn invalid(message: String) -> Rejection {
    Rejection::new(ReasonCode::INPUT_INVALID, message)
}

/// Checks a record's shape and bounds at ledger time `now`.
pub fn validate(session_id: &str, s: &McpSessionV1, now: u64) -> Result<(), Rejection> {
    if session_id.len() != SESSION_ID_HEX
        || !session_id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(invalid(format!("a session id is {SESSION_ID_HEX} lowercase hex digits")));
    }
    if s.expires_at_ms <= now || s.expires_at_ms > now.saturating_add(SESSION_TTL_MS_MAX) {
        return Err(Rejection::new(
            ReasonCode::SESSION_NOT_FOUND,
            "the session has expired (or expires implausibly late)",
        ));
    }
    if s.log_level.as_deref().is_some_and(|l| !LOG_LEVELS.contains(&l)) {
        return Err(invalid(format!("log_level must be one of {LOG_LEVELS:?}")));
    }
    if s.subscriptions.len() > SUBSCRIPTIONS_MAX {
        return Err(Rejection::new(
            ReasonCode::QUOTA_EXCEEDED,
            format!("at most {SUBSCRIPTIONS_MAX} subscriptions per session"),
        ));
    }
    if s.subscriptions.iter().any(|u| u.is_empty() || u.len() > URI_BYTES_MAX) {
        return Err(invalid(format!("a subscribed uri is 1..={URI_BYTES_MAX} bytes")));
    }
    if s.subscriptions.windows(2).any(|w| w[0] >= w[1]) {
        return Err(invalid("subscriptions must be sorted and unique".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_bounded() {
        let id = "0123456789abcdef0123456789abcdef";
        let ok = McpSessionV1 { principal_id: "p".into(), expires_at_ms: 2_000, ..Default::default() };
        assert!(validate(id, &ok, 1_000).is_ok());
        assert!(validate("XYZ", &ok, 1_000).is_err());
        assert_eq!(validate(id, &ok, 2_000).unwrap_err().reason, ReasonCode::SESSION_NOT_FOUND);
        let far = McpSessionV1 { expires_at_ms: 1_000 + SESSION_TTL_MS_MAX + 1, ..ok.clone() };
        assert!(validate(id, &far, 1_000).is_err());
        let loud = McpSessionV1 { log_level: Some("shout".into()), ..ok.clone() };
        assert!(validate(id, &loud, 1_000).is_err());
        let many =
            McpSessionV1 { subscriptions: (0..=SUBSCRIPTIONS_MAX).map(|i| format!("u{i:03}")).collect(), ..ok.clone() };
        assert_eq!(validate(id, &many, 1_000).unwrap_err().reason, ReasonCode::QUOTA_EXCEEDED);
        let unsorted = McpSessionV1 { subscriptions: vec!["b".into(), "a".into()], ..ok };
        assert!(validate(id, &unsorted, 1_000).is_err());
    }
}

//! [`Rejection`] (a reason code and a message: every refusal in Writ) and the input validators
//! every domain shares. A leaf: it imports nothing of the crate but the reason catalog, so the
//! domain modules and the ledger can all depend on it without depending on each other.

use serde::{Deserialize, Serialize};

use crate::reason::ReasonCode;

/// Longest tenant name accepted.
pub const TENANT_NAME_BYTES_MAX: usize = 63;
/// Longest display name accepted.
pub const DISPLAY_NAME_BYTES_MAX: usize = 200;
/// Longest free-text reason (e.g. for a suspension) accepted.
pub const NOTE_BYTES_MAX: usize = 500;

/// Longest message a recorded rejection keeps (its event, audit record and the outcome the
/// proposer hears): a refusal never echoes unbounded input into the log.
pub const REJECTION_MESSAGE_BYTES_MAX: usize = 512;

/// What ends a truncated text field.
pub const TRUNCATED: &str = "…[truncated]";

/// `text` cut (at a character boundary) so that, with the [`TRUNCATED`] marker, it fits in
/// `max` bytes; unchanged when it already fits.
pub fn truncated(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub(TRUNCATED.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{TRUNCATED}", &text[..end])
}

/// A rejection with its reason code and a human message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    pub reason: ReasonCode,
    pub message: String,
}

impl Rejection {
    pub fn new(reason: ReasonCode, message: impl Into<String>) -> Self {
        Rejection { reason, message: message.into() }
    }

    /// This rejection with its message within [`REJECTION_MESSAGE_BYTES_MAX`].
    pub fn bounded(self) -> Rejection {
        Rejection { message: truncated(&self.message, REJECTION_MESSAGE_BYTES_MAX), ..self }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)
    }
}

/// Checks a tenant name: 1..=63 bytes of `[a-z0-9-]`, starting with a letter or digit.
pub fn validate_tenant_name(name: &str) -> Result<(), Rejection> {
    let ok_len = !name.is_empty() && name.len() <= TENANT_NAME_BYTES_MAX;
    let ok_chars = name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ok_start = name.bytes().next().is_some_and(|b| b != b'-');
    if ok_len && ok_chars && ok_start {
        Ok(())
    } else {
        Err(Rejection::new(
            ReasonCode::INPUT_INVALID,
            format!(
                "tenant name must be 1..={TENANT_NAME_BYTES_MAX} characters of a-z, 0-9 and '-', not starting with '-'"
            ),
        ))
    }
}

/// Checks an optional free-text field against a byte ceiling.
pub fn validate_text(field: &str, value: Option<&str>, max_bytes: usize) -> Result<(), Rejection> {
    match value {
        Some(v) if v.len() > max_bytes => Err(Rejection::new(
            ReasonCode::INPUT_INVALID,
            format!("{field} is {} bytes; at most {max_bytes} are allowed", v.len()),
        )),
        _ => Ok(()),
    }
}

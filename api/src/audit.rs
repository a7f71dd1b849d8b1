//! Audit (SPEC D10): one record per event of a tenant's stream — every authority change and
//! every rejected command, and (with the edge) every request decision — with the minimum
//! fields, secrets redacted where the record is written, deterministic per-tenant retention by
//! count and age, and a hash chain over the retained history.
//!
//! Records are derived from events by [`crate::trail::records_for`] (a pure function), so every replica
//! writes byte-identical records. Bodies live outside the in-memory state (the node's `audit`
//! column family); the state keeps only each tenant's [`AuditIndex`]: the retained sequence
//! range, the timestamps retention needs, and the chain head, which the state digest covers.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::reason::ReasonCode;

/// Largest batch of request decisions in one ledger command.
pub const DECISIONS_PER_COMMAND_MAX: usize = 1000;

/// An authenticated request's decision at an edge (SPEC D10): who asked for what, and whether
/// it was allowed. Becomes one audit record of the tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestDecisionV1 {
    pub trace_id: String,
    pub principal_id: String,
    pub token_id: Option<String>,
    pub parent_token_id: Option<String>,
    /// The MCP method, e.g. `tools/list`.
    pub method: String,
    /// The tool, prompt or resource named by the request, if any.
    pub name: Option<String>,
    /// `allowed` or `denied`.
    pub outcome: String,
    pub reason: Option<ReasonCode>,
}

/// What replaces a redacted value.
pub const REDACTED: &str = "[REDACTED]";

/// Longest text field of a request decision (method, name, ids), bytes. An edge truncates
/// longer text with [`TRUNCATED`]; the ledger refuses a decision that is still longer.
pub const DECISION_FIELD_BYTES_MAX: usize = 256;
/// What ends a truncated audit text field.
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

impl RequestDecisionV1 {
    /// Every text field within [`DECISION_FIELD_BYTES_MAX`].
    pub fn is_bounded(&self) -> bool {
        let fields = [Some(&self.trace_id), Some(&self.principal_id), Some(&self.method), Some(&self.outcome)];
        let optional = [self.token_id.as_ref(), self.parent_token_id.as_ref(), self.name.as_ref()];
        fields.into_iter().chain(optional).flatten().all(|f| f.len() <= DECISION_FIELD_BYTES_MAX)
    }
}

/// One audit record. Every field is always present (null when it does not apply).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecordV1 {
    /// Per-tenant sequence, gap-free from 1 (retention removes the oldest).
    pub seq: u64,
    /// Ledger time of the event (ms since the epoch).
    pub at_ms: u64,
    /// Ledger revision of the event.
    pub revision: u64,
    pub trace_id: String,
    pub tenant_id: String,
    /// `tenant`, `principal`, `token`, `issuer`, `catalog`, `site`, `device`, (edge) `request`.
    pub domain: String,
    /// The event kind, or the rejected command's name.
    pub operation: String,
    /// `applied` or `rejected` for ledger commands; `allowed` or `denied` for requests.
    pub outcome: String,
    pub reason_code: Option<ReasonCode>,
    /// The principal the record is about (the subject of a principal or token change).
    pub principal_id: Option<String>,
    pub token_id: Option<String>,
    pub parent_token_id: Option<String>,
    /// The event's fields as JSON text, with secret-like fields redacted.
    pub detail: String,
}

/// A tenant's retained audit range. `at_ms[i]` is the time of record `first_seq + i`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditIndex {
    pub first_seq: u64,
    pub next_seq: u64,
    pub at_ms: VecDeque<u64>,
    /// sha256(previous head ‖ encoded record), over every record ever written.
    pub head: String,
}

impl AuditIndex {
    /// The cursor after which the newest `limit` retained records follow.
    pub fn recent_cursor(&self, limit: u64) -> u64 {
        self.next_seq.saturating_sub(limit.saturating_add(1)).max(self.first_seq.saturating_sub(1))
    }

    /// Records currently retained.
    pub fn len(&self) -> u64 {
        self.next_seq - self.first_seq
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends a record's position and chains its bytes.
    pub fn push(&mut self, at_ms: u64, encoded: &[u8]) {
        if self.next_seq == 0 {
            self.first_seq = 1;
            self.next_seq = 1;
        }
        let mut chained = self.head.as_bytes().to_vec();
        chained.extend_from_slice(encoded);
        self.head = crate::sha256_hex(&chained);
        self.at_ms.push_back(at_ms);
        self.next_seq += 1;
    }

    /// FIFO retention: drop the oldest records beyond `max_events`, and those older than
    /// `max_age_s` at ledger time `now_ms`. Deterministic: it depends only on the index, the
    /// settings and ledger time.
    pub fn retain(&mut self, max_events: u64, max_age_s: Option<u64>, now_ms: u64) {
        while self.len() > max_events {
            self.pop();
        }
        if let Some(age) = max_age_s {
            let cutoff = now_ms.saturating_sub(age.saturating_mul(1000));
            while self.at_ms.front().is_some_and(|t| *t < cutoff) {
                self.pop();
            }
        }
    }

    fn pop(&mut self) {
        self.at_ms.pop_front();
        self.first_seq += 1;
    }
}

/// The storage key of a record: tenant id, a zero byte, the big-endian sequence. Tenant ids
/// never contain a zero byte, so one tenant's records are one contiguous, ordered key range.
pub fn record_key(tenant_id: &str, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(tenant_id.len() + 9);
    k.extend_from_slice(tenant_id.as_bytes());
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// Whether a field name looks like it holds a secret (SPEC D10).
pub fn is_secret_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "secret",
        "token",
        "api_key",
        "apikey",
        "api-key",
        "authorization",
        "password",
        "passwd",
        "private_key",
        "credential",
    ]
    .iter()
    .any(|s| n.contains(s))
}

/// Replaces the value of every secret-like field, at any depth, with [`REDACTED`] — also inside
/// strings that hold JSON documents (an operation's input, input requests and answers are
/// stored as JSON text), which are written back as text only when something was redacted (so
/// records without secrets keep their exact bytes).
pub fn redact(value: &mut Value) {
    redacted(value);
}

/// [`redact`], saying whether anything was replaced.
fn redacted(value: &mut Value) -> bool {
    match value {
        Value::Object(map) => {
            let mut any = false;
            for (k, v) in map.iter_mut() {
                if is_secret_name(k) {
                    *v = Value::String(REDACTED.into());
                    any = true;
                } else {
                    any |= redacted(v);
                }
            }
            any
        }
        Value::Array(items) => items.iter_mut().fold(false, |any, v| redacted(v) | any),
        Value::String(text) if text.starts_with(['{', '[']) => {
            let Ok(mut inner) = serde_json::from_str::<Value>(text) else { return false };
            let any = redacted(&mut inner);
            if any {
                *text = inner.to_string();
            }
            any
        }
        _ => false,
    }
}

/// Records scanned per list call at most (a filtered page may come back short; the cursor
/// still moves on).
pub const AUDIT_SCAN_MAX: usize = 10_000;

/// One page of a tenant's audit list: from `records` (in sequence order, the first after the
/// cursor `after`), at most `limit` records matching `filter`, scanning at most
/// [`AUDIT_SCAN_MAX`]. Returns the page and the cursor to continue from (`None` at the end).
/// Cursors are sequences, so they stay valid while records are appended or retention drops
/// old ones.
pub fn page<E>(
    records: impl Iterator<Item = Result<AuditRecordV1, E>>,
    after: u64,
    limit: usize,
    filter: &AuditFilter,
) -> Result<(Vec<AuditRecordV1>, Option<u64>), E> {
    let mut out = Vec::new();
    let mut last = after;
    for (scanned, record) in records.enumerate() {
        if out.len() >= limit || scanned >= AUDIT_SCAN_MAX {
            return Ok((out, Some(last)));
        }
        let record = record?;
        last = record.seq;
        if filter.matches(&record) {
            out.push(record);
        }
    }
    Ok((out, None))
}

/// Filters of audit list and export; all given ones must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditFilter {
    pub domain: Option<String>,
    pub operation: Option<String>,
    pub outcome: Option<String>,
    pub principal_id: Option<String>,
    pub reason_code: Option<ReasonCode>,
    /// Only records at or after this ledger time (ms).
    pub since_ms: Option<u64>,
}

impl AuditFilter {
    pub fn matches(&self, r: &AuditRecordV1) -> bool {
        self.domain.as_ref().is_none_or(|d| *d == r.domain)
            && self.operation.as_ref().is_none_or(|o| *o == r.operation)
            && self.outcome.as_ref().is_none_or(|o| *o == r.outcome)
            && self.principal_id.as_ref().is_none_or(|p| r.principal_id.as_ref() == Some(p))
            && self.reason_code.is_none_or(|c| r.reason_code == Some(c))
            && self.since_ms.is_none_or(|t| r.at_ms >= t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn redaction_reaches_every_depth() {
        let mut v = json!({"metadata": {"api_key": "s3cr3t", "team": "ops", "nested": [{"Authorization": "Bearer x"}]},
            "client_secret": "y", "token": {"jti": "j"}, "refresh_token": "z", "name": "ok"});
        redact(&mut v);
        let text = v.to_string();
        for secret in ["s3cr3t", "Bearer x", "\"y\"", "\"j\"", "\"z\""] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
        assert!(text.contains("\"team\":\"ops\"") && text.contains("\"name\":\"ok\""), "{text}");
        // Inside JSON held as text (an operation's input, an elicitation answer).
        let mut op = json!({"input": "{\"position_mm\":1,\"password\":\"hunter2\"}",
            "answers": {"confirm": "{\"action\":\"accept\",\"content\":{\"api_key\":\"k-123\"}}"}});
        redact(&mut op);
        let text = op.to_string();
        assert!(!text.contains("hunter2") && !text.contains("k-123"), "{text}");
        assert!(text.contains("position_mm") && text.contains("accept"), "{text}");
    }

    #[test]
    fn retention_by_count_and_age_is_fifo() {
        let mut idx = AuditIndex::default();
        for t in 0..10u64 {
            idx.push(t * 1000, &[t as u8]);
        }
        assert_eq!((idx.first_seq, idx.next_seq), (1, 11));
        idx.retain(6, None, 9_000);
        assert_eq!((idx.first_seq, idx.len()), (5, 6));
        idx.retain(6, Some(3), 9_000); // keep at_ms >= 6000: records 7..=10
        assert_eq!((idx.first_seq, idx.len()), (7, 4));
        assert_eq!(idx.at_ms.front(), Some(&6000));
    }
}

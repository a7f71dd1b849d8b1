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
pub use crate::rejection::{truncated, TRUNCATED};

#[cfg(test)]
impl RequestDecisionV1 {
    /// An allowed request of `principal_id` without a token, as an edge records it.
    pub(crate) fn allowed(trace_id: &str, principal_id: &str, method: &str, name: Option<&str>) -> Self {
        RequestDecisionV1 {
            trace_id: trace_id.into(),
            principal_id: principal_id.into(),
            token_id: None,
            parent_token_id: None,
            method: method.into(),
            name: name.map(str::to_string),
            outcome: "allowed".into(),
            reason: None,
        }
    }
}

impl RequestDecisionV1 {
    /// Every text field within [`DECISION_FIELD_BYTES_MAX`].
    pub fn is_bounded(&self) -> bool {
        let fields = [Some(&self.trace_id), Some(&self.principal_id), Some(&self.method), Some(&self.outcome)];
        let optional = [self.token_id.as_ref(), self.parent_token_id.as_ref(), self.name.as_ref()];
        fields.into_iter().chain(optional).flatten().all(|f| f.len() <= DECISION_FIELD_BYTES_MAX)
    }
}

/// Who acted and through what (the authority chain): the agent host and protocol version the
/// request came over, what the ledger knows of the principal and its delegation, the catalog
/// and policy that allowed the call, the upstream connector it reached, and the operation and
/// attempt it made. An edge reports the client fields (what the client said of itself); the
/// ledger fills every other field from its own state when it records the decision, so an edge
/// cannot forge them. Every text field is within [`DECISION_FIELD_BYTES_MAX`] and the chain within
/// [`DELEGATION_RECORDED_MAX`] links.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthorityChainV1 {
    /// The MCP client's `clientInfo.name` and `.version`, as it sent them.
    pub client_name: Option<String>,
    pub client_version: Option<String>,
    /// The MCP protocol version the client spoke (`2025-11-25`, `2026-07-28`).
    pub protocol_version: Option<String>,
    /// `human`, `agent`, `device`, `service` (a principal), `executor` or `operator`.
    pub principal_kind: Option<String>,
    /// Token ids from the root of the delegation down to the token used.
    pub delegation: Vec<String>,
    /// The tenant's catalog version when the decision was recorded, and its digest (the policy
    /// every call was checked against).
    pub catalog_version: Option<u64>,
    pub policy_digest: Option<String>,
    /// The upstream MCP server (connector) the tool runs on, and its name there.
    pub upstream: Option<String>,
    pub upstream_tool: Option<String>,
    pub operation_id: Option<String>,
    /// The operation's attempt (`<operation id>/<fencing token>`).
    pub attempt_id: Option<String>,
}

/// Most delegation links an authority chain records (a chain is at most a few links deep; a
/// longer one keeps its newest links).
pub const DELEGATION_RECORDED_MAX: usize = 16;

impl AuthorityChainV1 {
    /// Every text field within [`DECISION_FIELD_BYTES_MAX`], the chain within its bound.
    pub fn is_bounded(&self) -> bool {
        let texts = [&self.client_name, &self.client_version, &self.protocol_version, &self.principal_kind];
        let more = [&self.policy_digest, &self.upstream, &self.upstream_tool, &self.operation_id, &self.attempt_id];
        texts.into_iter().chain(more).flatten().chain(&self.delegation).all(|f| f.len() <= DECISION_FIELD_BYTES_MAX)
            && self.delegation.len() <= DELEGATION_RECORDED_MAX
    }

    /// One line for a listing: `agent via claude-code 2.1.0 (2025-11-25) · tokens j0 > j1 ·
    /// catalog v3 ab12cd34 · upstream shop/place_order · operation op-1 · attempt op-1/7`,
    /// with only the parts the chain has.
    pub fn summary(&self) -> String {
        let mut who = self.principal_kind.clone().unwrap_or_default();
        if let Some(client) = &self.client_name {
            let version = self.client_version.as_deref().map(|v| format!(" {v}")).unwrap_or_default();
            who = format!("{who} via {client}{version}").trim_start().to_string();
        }
        if let Some(protocol) = &self.protocol_version {
            who = format!("{who} ({protocol})").trim_start().to_string();
        }
        let digest = self.policy_digest.as_deref().map(|d| format!(" {}", &d[..d.len().min(8)])).unwrap_or_default();
        let upstream = self.upstream.as_ref().map(|u| match &self.upstream_tool {
            Some(t) => format!("upstream {u}/{t}"),
            None => format!("upstream {u}"),
        });
        let parts = [
            (!who.is_empty()).then_some(who),
            (!self.delegation.is_empty()).then(|| format!("tokens {}", self.delegation.join(" > "))),
            self.catalog_version.map(|v| format!("catalog v{v}{digest}")),
            upstream,
            self.operation_id.as_ref().map(|o| format!("operation {o}")),
            self.attempt_id.as_ref().map(|a| format!("attempt {a}")),
        ];
        parts.into_iter().flatten().collect::<Vec<_>>().join(" · ")
    }

    /// What a stored record's fields name of the chain (operation, attempt, tool and upstream),
    /// for records written without one: read from the event's fields, never stored.
    pub fn of_detail(detail: &Value) -> Option<AuthorityChainV1> {
        let spec = &detail["spec"];
        let text = |v: &Value| v.as_str().map(|s| truncated(s, DECISION_FIELD_BYTES_MAX));
        let operation_id = text(&detail["operation_id"]).or_else(|| text(&spec["operation_id"]));
        let fencing = detail["fencing_token"].as_u64();
        let attempt_id = operation_id.as_ref().zip(fencing).map(|(op, f)| format!("{op}/{f}"));
        let (upstream, upstream_tool) = match text(&detail["upstream_id"]) {
            Some(u) => (Some(u), text(&detail["tool"])),
            None => (None, None),
        };
        let found = AuthorityChainV1 { operation_id, attempt_id, upstream, upstream_tool, ..Default::default() };
        (found != AuthorityChainV1::default()).then_some(found)
    }
}

/// A request's decision with the authority chain it was made under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestDecisionV2 {
    pub decision: RequestDecisionV1,
    pub authority: AuthorityChainV1,
}

impl RequestDecisionV2 {
    pub fn is_bounded(&self) -> bool {
        self.decision.is_bounded() && self.authority.is_bounded()
    }
}

/// One audit record, as the API lists it: every field is always present (null when it does
/// not apply). Records of request decisions carry the authority chain they were decided
/// under; a page fills the chain of other records from their event's fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    pub seq: u64,
    pub at_ms: u64,
    pub revision: u64,
    pub trace_id: String,
    pub tenant_id: String,
    pub domain: String,
    pub operation: String,
    pub outcome: String,
    pub reason_code: Option<ReasonCode>,
    pub principal_id: Option<String>,
    pub token_id: Option<String>,
    pub parent_token_id: Option<String>,
    pub detail: String,
    pub authority: Option<AuthorityChainV1>,
}

/// First eight bytes of a stored record that carries an authority chain: a sequence no
/// record reaches (a chain-less record is stored as its [`AuditRecordV1`] bytes, whose first
/// eight are its sequence).
const STORED_WITH_AUTHORITY: [u8; 8] = [0xff; 8];

impl AuditRecord {
    /// The record's stored bytes, which the tenant's hash chain covers: those of
    /// [`AuditRecordV1`] for a record without an authority chain (so every record written before
    /// chains existed keeps its bytes), else [`STORED_WITH_AUTHORITY`] and the whole record.
    pub fn stored(&self) -> Vec<u8> {
        let encoded = match &self.authority {
            // The fields of `AuditRecordV1` in its order (bincode writes a struct as its fields).
            None => crate::encode(&(
                self.seq,
                self.at_ms,
                self.revision,
                &self.trace_id,
                &self.tenant_id,
                &self.domain,
                &self.operation,
                &self.outcome,
                self.reason_code,
                &self.principal_id,
                &self.token_id,
                &self.parent_token_id,
                &self.detail,
            )),
            Some(_) => crate::encode(self).map(|body| [&STORED_WITH_AUTHORITY[..], &body].concat()),
        };
        encoded.expect("audit records encode")
    }

    /// What [`AuditRecord::stored`] wrote.
    pub fn from_stored(bytes: &[u8]) -> Result<AuditRecord, String> {
        match bytes.strip_prefix(&STORED_WITH_AUTHORITY[..]) {
            Some(body) => crate::decode_unbounded(body).map_err(|e| e.to_string()),
            None => crate::decode_unbounded::<AuditRecordV1>(bytes).map(AuditRecord::from).map_err(|e| e.to_string()),
        }
    }

    /// The record as a page shows it: with the chain its event's fields name, if it has none.
    pub fn presented(mut self) -> AuditRecord {
        if self.authority.is_none() {
            self.authority = serde_json::from_str(&self.detail).ok().and_then(|d| AuthorityChainV1::of_detail(&d));
        }
        self
    }
}

/// Where the records one event produced lie in its tenant's trail: sequences `first_seq` to
/// `first_seq + count - 1`, the `count` records [`crate::trail::records_for`] makes of the event
/// at `revision` (a node stores each as its position in the event, [`StoredRow::AtEvent`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditedEvent {
    pub tenant_id: String,
    pub revision: u64,
    pub first_seq: u64,
    pub count: u32,
    /// The event as [`crate::encode`] wrote it to extend the chain over it (ledger version 16
    /// on): the bytes a node stores for the event, so it is encoded once.
    pub event_bytes: Option<Vec<u8>>,
}

/// First eight bytes of a stored row that holds where its record comes from instead of the
/// record ([`StoredRow::AtEvent`]): a sequence no record reaches, like
/// [`STORED_WITH_AUTHORITY`].
const STORED_AT_EVENT: [u8; 8] = [0xfe; 8];

/// A row of the node's audit family: a record's stored bytes ([`AuditRecord::stored`]), or
/// while the record's event is in the node's event log, only where it lies — the event's
/// revision and the record's index among the records [`crate::trail::records_for`] makes of
/// it — from which a read renders the same record. Rows are node-local (the chain head, which
/// the state digest covers, is over the record's stored bytes either way), so a node may hold
/// a record in either form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredRow {
    Record(Box<AuditRecord>),
    AtEvent { revision: u64, index: u32 },
}

impl StoredRow {
    /// The bytes of [`StoredRow::AtEvent`]: the marker, the revision and the index, big-endian.
    pub fn at_event(revision: u64, index: u32) -> [u8; 20] {
        let mut row = [0u8; 20];
        row[..8].copy_from_slice(&STORED_AT_EVENT);
        row[8..16].copy_from_slice(&revision.to_be_bytes());
        row[16..].copy_from_slice(&index.to_be_bytes());
        row
    }

    /// What [`StoredRow::at_event`] or [`AuditRecord::stored`] wrote.
    pub fn parse(bytes: &[u8]) -> Result<StoredRow, String> {
        let Some(at) = bytes.strip_prefix(&STORED_AT_EVENT[..]) else {
            return AuditRecord::from_stored(bytes).map(|r| StoredRow::Record(Box::new(r)));
        };
        let (revision, index) = at.split_at_checked(8).ok_or("a short event position")?;
        let revision = u64::from_be_bytes(revision.try_into().expect("8 bytes"));
        let index = u32::from_be_bytes(index.try_into().map_err(|_| "a malformed event position")?);
        Ok(StoredRow::AtEvent { revision, index })
    }
}

impl From<AuditRecordV1> for AuditRecord {
    #[rustfmt::skip]
    fn from(r: AuditRecordV1) -> AuditRecord {
        let AuditRecordV1 { seq, at_ms, revision, trace_id, tenant_id, domain, operation, outcome, reason_code,
            principal_id, token_id, parent_token_id, detail } = r;
        AuditRecord { seq, at_ms, revision, trace_id, tenant_id, domain, operation, outcome, reason_code,
            principal_id, token_id, parent_token_id, detail, authority: None }
    }
}

/// One audit record as stored before records carried an authority chain: the stored form of a
/// chain-less record ([`AuditRecord::stored`]) and what older snapshot formats hold.
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

/// A tenant's retained audit range: records `first_seq..next_seq`, the time of each
/// ([`AuditTimes`], what retention by age reads) and the chain head.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditIndex {
    pub first_seq: u64,
    pub next_seq: u64,
    pub at_ms: AuditTimes,
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
        use sha2::Digest;
        // sha256(head ++ encoded), without building the concatenation.
        let digest = sha2::Sha256::new().chain_update(self.head.as_bytes()).chain_update(encoded).finalize();
        self.head = crate::hex(&digest);
        self.at_ms.push(at_ms);
        self.next_seq += 1;
    }

    /// Appends the `count` records of one event at `at_ms`, chained over the event's encoded
    /// bytes (`event`) once: how records are chained from ledger version 16 on, without building
    /// them (they are rendered from the stored event when read, `crate::trail::record_at`).
    pub fn push_event(&mut self, at_ms: u64, count: u64, event: &[u8]) {
        if self.next_seq == 0 {
            self.first_seq = 1;
            self.next_seq = 1;
        }
        use sha2::Digest;
        let digest = sha2::Sha256::new().chain_update(self.head.as_bytes()).chain_update(event).finalize();
        self.head = crate::hex(&digest);
        for _ in 0..count {
            self.at_ms.push(at_ms);
        }
        self.next_seq += count;
    }

    /// FIFO retention: drop the oldest records beyond `max_events`, and those older than
    /// `max_age_s` at ledger time `now_ms`. Deterministic: it depends only on the index, the
    /// settings and ledger time.
    pub fn retain(&mut self, max_events: u64, max_age_s: Option<u64>, now_ms: u64) {
        if self.len() > max_events {
            self.first_seq += self.at_ms.drop_oldest(self.len() - max_events);
        }
        if let Some(age) = max_age_s {
            let cutoff = now_ms.saturating_sub(age.saturating_mul(1000));
            while let Some(n) = self.at_ms.drop_oldest_time_before(cutoff) {
                self.first_seq += n;
            }
        }
    }
}

/// The times of a tenant's retained audit records, oldest first, as runs of one time: the
/// records of one ledger entry (a batch of commands, a batch of request decisions) share its
/// time, so under load a run holds many records. A run is 8 bytes in memory and encoded — the
/// milliseconds since the previous run and its records, u32 each — where a time per record was
/// 8 bytes of every node's memory and of every snapshot for each retained record (80 MB at
/// 10,000,000); so at one record per entry it costs what it did, and less with more. From ledger
/// version 17 on, the time kept is rounded up to the whole second (`state::audit_time`), so
/// under load a run holds a second's records, however many entries wrote them.
///
/// Encoded (state format 9) as a sequence of u64: empty, or [`AuditTimes::RUNS_MARKER`], the
/// oldest time, then a word per run (`gap << 32 | records`; a gap over `u32::MAX` ms is carried
/// by runs of no records). Formats 1–8 held one time per record, a sequence that never starts
/// with the marker (no ledger time is `u64::MAX`); it decodes into runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditTimes {
    /// The time of the oldest run and of the newest (0 when there is none).
    oldest_ms: u64,
    newest_ms: u64,
    /// (ms after the previous run — 0 for the oldest —, records), oldest first. The oldest has
    /// records; a run of none only carries a long gap.
    runs: VecDeque<(u32, u32)>,
}

impl AuditTimes {
    /// First value of the encoding of a non-empty index.
    pub const RUNS_MARKER: u64 = u64::MAX;

    /// Appends a record at `at_ms` (ledger time never goes back; an earlier time counts as the
    /// newest run's).
    pub fn push(&mut self, at_ms: u64) {
        if self.runs.is_empty() {
            (self.oldest_ms, self.newest_ms) = (at_ms, at_ms);
            self.runs.push_back((0, 1));
            return;
        }
        let mut gap = at_ms.saturating_sub(self.newest_ms);
        if let Some(newest) = self.runs.back_mut().filter(|r| gap == 0 && r.1 < u32::MAX) {
            newest.1 += 1;
            return;
        }
        while gap > u64::from(u32::MAX) {
            self.runs.push_back((u32::MAX, 0));
            gap -= u64::from(u32::MAX);
        }
        self.runs.push_back((gap as u32, 1));
        self.newest_ms = self.newest_ms.max(at_ms);
    }

    /// The time of the oldest record.
    pub fn oldest(&self) -> Option<u64> {
        (!self.runs.is_empty()).then_some(self.oldest_ms)
    }

    /// Records (the runs' added up).
    pub fn records(&self) -> u64 {
        self.runs.iter().map(|r| u64::from(r.1)).sum()
    }

    /// Runs: what the index holds, in memory and encoded.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Drops the `n` oldest records (all, when there are fewer); how many it dropped.
    pub fn drop_oldest(&mut self, n: u64) -> u64 {
        let mut left = n;
        while let Some(oldest) = self.runs.front_mut() {
            if u64::from(oldest.1) > left {
                oldest.1 -= left as u32;
                return n;
            }
            left -= u64::from(oldest.1);
            self.drop_oldest_run();
        }
        n - left
    }

    /// Drops the oldest run if its time is before `cutoff`; how many records it held.
    pub fn drop_oldest_time_before(&mut self, cutoff: u64) -> Option<u64> {
        let n = self.runs.front().filter(|_| self.oldest_ms < cutoff)?.1;
        self.drop_oldest_run();
        Some(u64::from(n))
    }

    /// The next run with records becomes the oldest (runs that only carry a gap go with it).
    fn drop_oldest_run(&mut self) {
        self.runs.pop_front();
        while let Some(next) = self.runs.front_mut() {
            self.oldest_ms += u64::from(next.0);
            next.0 = 0;
            if next.1 > 0 {
                return;
            }
            self.runs.pop_front();
        }
        (self.oldest_ms, self.newest_ms) = (0, 0);
    }
}

impl Serialize for AuditTimes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let len = if self.runs.is_empty() { 0 } else { 2 + self.runs.len() };
        let mut seq = s.serialize_seq(Some(len))?;
        if !self.runs.is_empty() {
            seq.serialize_element(&Self::RUNS_MARKER)?;
            seq.serialize_element(&self.oldest_ms)?;
        }
        for (gap, records) in &self.runs {
            seq.serialize_element(&(u64::from(*gap) << 32 | u64::from(*records)))?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for AuditTimes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let values = Vec::<u64>::deserialize(d)?;
        let mut times = AuditTimes::default();
        match values.split_first() {
            Some((&Self::RUNS_MARKER, rest)) => {
                let Some((&oldest_ms, words)) = rest.split_first() else {
                    return Err(D::Error::custom("audit times: runs without their oldest time"));
                };
                let runs: VecDeque<(u32, u32)> = words.iter().map(|w| ((w >> 32) as u32, *w as u32)).collect();
                if runs.front().is_none_or(|r| r.0 != 0 || r.1 == 0) || runs.back().is_some_and(|r| r.1 == 0) {
                    return Err(D::Error::custom("audit times: the oldest or the newest run holds no record"));
                }
                let span: u64 = runs.iter().map(|r| u64::from(r.0)).sum();
                let newest_ms =
                    oldest_ms.checked_add(span).ok_or_else(|| D::Error::custom("audit times: out of range"))?;
                times = AuditTimes { oldest_ms, newest_ms, runs };
            }
            // Formats 1–8: a time per record.
            _ => values.into_iter().for_each(|t| times.push(t)),
        }
        Ok(times)
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

/// Whether a field name looks like it holds a secret (SPEC D10), whatever its case and
/// separators: `privateKey`, `private-key`, `PRIVATE_KEY` and `private.key` alike.
pub fn is_secret_name(name: &str) -> bool {
    // Compared as bytes: every needle is ASCII, so a match in the UTF-8 bytes is a match in the
    // characters. Names of field length are folded on the stack (this runs for every field).
    let folded = || name.bytes().filter(|b| !matches!(b, b'_' | b'-' | b'.' | b' ')).map(|b| b.to_ascii_lowercase());
    let mut short = [0u8; 64];
    let long: Vec<u8>;
    let n: &[u8] = if name.len() <= short.len() {
        let len = short.iter_mut().zip(folded()).map(|(slot, b)| *slot = b).count();
        &short[..len]
    } else {
        long = folded().collect();
        &long
    };
    ["secret", "token", "apikey", "authorization", "password", "passwd", "privatekey", "credential"]
        .iter()
        .any(|s| n.windows(s.len()).any(|w| w == s.as_bytes()))
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
        Value::String(text) => match redact_str(text) {
            Some(clean) => {
                *text = clean;
                true
            }
            None => false,
        },
        _ => false,
    }
}

/// `text` with its secrets redacted, or `None` when it holds none: a JSON document by
/// [`redact`]; any other text line by line by [`redact_line`] (an executor's output, logs,
/// configuration files, query strings).
pub fn redact_str(text: &str) -> Option<String> {
    // Every rule needs a `name:` or `name=` (JSON included): most texts (a method, a tool's
    // name, a version) have neither and are left as they are without a scan per line.
    if !text.contains([':', '=']) {
        return None;
    }
    if text.trim_start().starts_with(['{', '[']) {
        if let Ok(mut inner) = serde_json::from_str::<Value>(text) {
            return redacted(&mut inner).then(|| inner.to_string());
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut any = false;
    for line in text.split_inclusive('\n') {
        match redact_line(line) {
            Some(clean) => {
                any = true;
                out.push_str(&clean);
            }
            None => out.push_str(line),
        }
    }
    any.then_some(out)
}

/// One line with its secrets redacted, or `None`: a line that starts `name: value` or
/// `name = value` (headers, YAML, env files) with a secret-like name loses its whole value;
/// elsewhere, each `name=value` pair (query strings, `key=value` logs) loses its value up to
/// the next space, `&`, `;`, `,` or quote.
fn redact_line(line: &str) -> Option<String> {
    let body = line.trim_end_matches(['\r', '\n']);
    let trimmed = body.trim_start();
    if let Some(i) = trimmed.find([':', '=']) {
        let name = trimmed[..i].trim().trim_matches(['"', '\'']);
        let value = trimmed[i + 1..].trim();
        if !name.is_empty() && !name.contains(char::is_whitespace) && is_secret_name(name) && !value.is_empty() {
            let head = &body[..body.len() - trimmed.len() + i + 1];
            return Some(format!("{head} {REDACTED}{}", &line[body.len()..]));
        }
    }
    let name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    let (mut out, mut rest, mut any) = (String::with_capacity(line.len()), line, false);
    while let Some(i) = rest.find('=') {
        let name_start = rest[..i].rfind(|c: char| !name_char(c)).map_or(0, |j| j + 1);
        let after = &rest[i + 1..];
        let end =
            after.find(|c: char| c.is_whitespace() || matches!(c, '&' | ';' | ',' | '"' | '\'')).unwrap_or(after.len());
        out.push_str(&rest[..=i]);
        if end > 0 && is_secret_name(&rest[name_start..i]) {
            out.push_str(REDACTED);
            any = true;
        } else {
            out.push_str(&after[..end]);
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    any.then_some(out)
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
    records: impl Iterator<Item = Result<AuditRecord, E>>,
    after: u64,
    limit: usize,
    filter: &AuditFilter,
) -> Result<(Vec<AuditRecord>, Option<u64>), E> {
    let mut out = Vec::new();
    let mut last = after;
    for (scanned, record) in records.enumerate() {
        if out.len() >= limit || scanned >= AUDIT_SCAN_MAX {
            return Ok((out, Some(last)));
        }
        let record = record?;
        last = record.seq;
        if filter.matches(&record) {
            out.push(record.presented());
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
    /// Only records of this trace (a request, and every command it submitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

impl AuditFilter {
    /// The filter's own bounds: a trace id is at most `TRACE_ID_BYTES_MAX` bytes.
    pub fn check(&self) -> Result<(), crate::Rejection> {
        let max = crate::trace::TRACE_ID_BYTES_MAX;
        if self.trace_id.as_ref().is_some_and(|t| t.len() > max) {
            let msg = format!("a trace id is at most {max} bytes");
            return Err(crate::Rejection::new(crate::ReasonCode::INPUT_INVALID, msg));
        }
        Ok(())
    }

    pub fn matches(&self, r: &AuditRecord) -> bool {
        self.domain.as_ref().is_none_or(|d| *d == r.domain)
            && self.operation.as_ref().is_none_or(|o| *o == r.operation)
            && self.outcome.as_ref().is_none_or(|o| *o == r.outcome)
            && self.principal_id.as_ref().is_none_or(|p| r.principal_id.as_ref() == Some(p))
            && self.reason_code.is_none_or(|c| r.reason_code == Some(c))
            && self.since_ms.is_none_or(|t| r.at_ms >= t)
            && self.trace_id.as_ref().is_none_or(|t| *t == r.trace_id)
    }
}

pub mod decide;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_chain_head_is_the_hash_of_the_previous_head_and_the_stored_record() {
        let record = AuditRecord {
            seq: 1,
            at_ms: 5,
            revision: 9,
            trace_id: "tr".into(),
            tenant_id: "t".into(),
            domain: "request".into(),
            operation: "tools/list".into(),
            outcome: "allowed".into(),
            reason_code: None,
            principal_id: Some("p".into()),
            token_id: None,
            parent_token_id: None,
            detail: "{}".into(),
            authority: None,
        };
        let stored = record.stored();
        let mut index = AuditIndex::default();
        index.push(5, &stored);
        index.push(5, &stored);
        let first = crate::sha256_hex(&stored);
        let second = crate::sha256_hex(&[first.as_bytes(), &stored[..]].concat());
        assert_eq!(index.head, second);
        assert_eq!((index.first_seq, index.next_seq), (1, 3));
        // From ledger version 16: once per event, over the event's bytes, for all its records.
        let mut by_event = AuditIndex::default();
        by_event.push_event(5, 2, b"event");
        assert_eq!(by_event.head, crate::sha256_hex(b"event"));
        assert_eq!((by_event.first_seq, by_event.next_seq, by_event.len()), (1, 3, 2));
    }

    #[test]
    fn a_chain_reads_as_one_line_and_records_without_one_show_what_their_event_names() {
        let chain = AuthorityChainV1 {
            client_name: Some("claude-code".into()),
            client_version: Some("2.1.0".into()),
            protocol_version: Some("2025-11-25".into()),
            principal_kind: Some("agent".into()),
            delegation: vec!["j0".into(), "j1".into()],
            catalog_version: Some(3),
            policy_digest: Some("ab12cd34ef".into()),
            upstream: Some("shop".into()),
            upstream_tool: Some("place_order".into()),
            operation_id: Some("op-1".into()),
            attempt_id: Some("op-1/7".into()),
        };
        assert_eq!(
            chain.summary(),
            "agent via claude-code 2.1.0 (2025-11-25) · tokens j0 > j1 · catalog v3 ab12cd34 · \
             upstream shop/place_order · operation op-1 · attempt op-1/7"
        );
        assert_eq!(AuthorityChainV1::default().summary(), "");
        let started = json!({"operation_id": "op-9", "fencing_token": 4, "executor_id": "x-1"});
        let named = AuthorityChainV1::of_detail(&started).expect("an operation");
        assert_eq!((named.operation_id.as_deref(), named.attempt_id.as_deref()), (Some("op-9"), Some("op-9/4")));
        let submitted = json!({"spec": {"operation_id": "op-2", "action": "move"}});
        assert_eq!(AuthorityChainV1::of_detail(&submitted).and_then(|c| c.operation_id).as_deref(), Some("op-2"));
        assert_eq!(AuthorityChainV1::of_detail(&json!({"name": "acme"})), None, "nothing to name");
    }

    #[test]
    fn secret_names_match_whatever_their_case_separators_and_length() {
        for secret in ["privateKey", "private-key", "PRIVATE_KEY", "private.key", "x-Auth-Token", "pass word"] {
            assert!(is_secret_name(secret), "{secret}");
        }
        for plain in ["team", "name", "topic", "pässword", "", "key"] {
            assert!(!is_secret_name(plain), "{plain}");
        }
        // Past the 64 bytes folded on the stack, and a needle across that boundary.
        let long = format!("{}_secret", "x".repeat(80));
        assert!(is_secret_name(&long));
        let across = format!("{}apikey", "y".repeat(61));
        assert!(is_secret_name(&across));
        assert!(!is_secret_name(&"z".repeat(200)));
    }

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
        // Any case and separator, and JSON text that starts with whitespace.
        let mut odd = json!({"privateKey": "pk-1", "Private-Key": "pk-2", "X_API.KEY": "pk-3",
            "input": "  \n {\"clientSecret\": \"pk-4\"}"});
        redact(&mut odd);
        let text = odd.to_string();
        for secret in ["pk-1", "pk-2", "pk-3", "pk-4"] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
    }

    /// An executor's output and other plain text: header- and env-style lines and `name=value`
    /// pairs lose their secret values; everything else keeps its exact bytes.
    #[test]
    fn redaction_of_plain_text() {
        let text = "moved 3 mm\nAuthorization: Bearer abc.def\n  API_KEY = k-1\r\n\
                    GET /x?user=ann&access_token=t-2;next=1 password=p-3 done\nkey=value token: \n";
        let clean = redact_str(text).expect("secrets found");
        for secret in ["abc.def", "k-1", "t-2", "p-3"] {
            assert!(!clean.contains(secret), "{secret} leaked: {clean}");
        }
        for kept in [
            "moved 3 mm\n",
            "Authorization: [REDACTED]\n",
            "  API_KEY = [REDACTED]\r\n",
            "user=ann&",
            ";next=1 ",
            " done\n",
            "key=value token: \n",
        ] {
            assert!(clean.contains(kept), "{kept:?} changed: {clean:?}");
        }
        for plain in ["urn:writ:anonymous-loopback", "state: reserved", "token: ", "base64 dG9rZW4==", "a=b"] {
            assert_eq!(redact_str(plain), None, "{plain}");
        }
        let mut audit = json!({"evidence": {"summary": "stdout: secret=s-4 ok"}});
        redact(&mut audit);
        assert_eq!(audit["evidence"]["summary"], "stdout: secret=[REDACTED] ok");
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
        assert_eq!(idx.at_ms.oldest(), Some(6000));
    }

    /// Records of one time share a run; retention by count cuts into a run, by age drops whole
    /// runs; the encoding is the runs, and a format-8 encoding (a time per record) decodes to
    /// the same runs.
    #[test]
    fn audit_times_are_runs_and_older_encodings_still_read() {
        let mut idx = AuditIndex::default();
        for (t, n) in [(1000u64, 3u64), (2000, 1), (3000, 4)] {
            for _ in 0..n {
                idx.push(t, b"r");
            }
        }
        assert_eq!((idx.len(), idx.at_ms.records(), idx.at_ms.runs()), (8, 8, 3));
        idx.retain(6, None, 3000); // two of the first run go
        assert_eq!((idx.first_seq, idx.at_ms.records(), idx.at_ms.runs(), idx.at_ms.oldest()), (3, 6, 3, Some(1000)));
        idx.retain(6, Some(1), 4000); // keep at_ms >= 3000
        assert_eq!((idx.first_seq, idx.len(), idx.at_ms.runs(), idx.at_ms.oldest()), (5, 4, 1, Some(3000)));

        let encoded = crate::encode(&idx.at_ms).unwrap();
        assert_eq!(crate::decode::<Vec<u64>>(&encoded).unwrap(), vec![AuditTimes::RUNS_MARKER, 3000, 4]);
        // A gap longer than a u32 of ms is carried by runs of no records, and drops with them.
        let late = 3000 + 2 * u64::from(u32::MAX) + 5;
        idx.push(late, b"r");
        idx.push(late + 1, b"r");
        assert_eq!((idx.len(), idx.at_ms.records(), idx.at_ms.runs()), (6, 6, 5));
        let round = crate::decode::<AuditTimes>(&crate::encode(&idx.at_ms).unwrap()).unwrap();
        assert_eq!(round, idx.at_ms);
        idx.retain(6, Some(1), late + 500); // keep at_ms >= late - 500
        assert_eq!((idx.first_seq, idx.len(), idx.at_ms.runs(), idx.at_ms.oldest()), (9, 2, 2, Some(late)));
        idx.retain(1, None, late + 500);
        assert_eq!((idx.len(), idx.at_ms.runs(), idx.at_ms.oldest()), (1, 1, Some(late + 1)));
        idx.retain(0, None, late + 500);
        assert_eq!((idx.at_ms.oldest(), idx.at_ms.clone()), (None, AuditTimes::default()));
        let mut idx = AuditIndex::default();
        for _ in 0..4 {
            idx.push(3000, b"r");
        }
        assert_eq!(crate::decode::<AuditTimes>(&encoded).unwrap(), idx.at_ms);
        let per_record = crate::encode(&VecDeque::from(vec![3000u64, 3000, 3000, 3000])).unwrap();
        assert_eq!(crate::decode::<AuditTimes>(&per_record).unwrap(), idx.at_ms, "format 8 decodes to runs");
        assert_eq!(crate::encode(&AuditTimes::default()).unwrap(), crate::encode(&Vec::<u64>::new()).unwrap());
        for damaged in [
            vec![AuditTimes::RUNS_MARKER],
            vec![AuditTimes::RUNS_MARKER, 3000],
            vec![AuditTimes::RUNS_MARKER, 3000, 1, 5 << 32],
        ] {
            let bytes = crate::encode(&damaged).unwrap();
            assert!(crate::decode::<AuditTimes>(&bytes).is_err(), "{damaged:?} is refused");
        }
    }
}

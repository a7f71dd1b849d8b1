//! The evidence store (SPEC D13, seed "Return: effect observations + evidence_return_ref"):
//! executors and observers upload what they captured of an operation's effect. A blob travels
//! once through the log ([`crate::ledger::Command::StoreEvidenceV2`], its bytes in the command;
//! base64 before ledger version 20, [`crate::ledger::Command::StoreEvidence`]); the
//! ledger checks its size, type, hash, the operation's state, who uploads and the tenant's
//! quota, and keeps only its record ([`EvidenceBlobV1`], a cold row: [`crate::cold::Row::Evidence`]); the
//! bytes are kept by each node beside the audit trail ([`blob_key`]), outside the state, and
//! read back by hash through `writ://operations/{id}/evidence/{hash}` with `ops:read`. A blob is
//! kept as long as the tenant keeps audit records of its age (`settings.audit_max_age_s`; none:
//! until the tenant is purged) and then expires with its bytes (`EvidenceExpiredV1`).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::reason::ReasonCode;
use crate::rejection::Rejection;

/// Largest blob (its base64 fits a client request of 1 MiB with room to spare).
pub const EVIDENCE_BYTES_MAX: usize = 512 * 1024;
/// Blobs one operation may carry.
pub const EVIDENCE_PER_OPERATION_MAX: usize = 16;
/// Bytes of evidence a tenant may keep (its quota; refused with QUOTA_EXCEEDED beyond).
pub const EVIDENCE_BYTES_PER_TENANT_MAX: u64 = 256 * 1024 * 1024;
/// The media types evidence may have: what a reader can be handed without sniffing.
pub const EVIDENCE_MIME_TYPES: &[&str] = &[
    "application/json",
    "text/plain",
    "text/csv",
    "image/png",
    "image/jpeg",
    "application/pdf",
    "application/octet-stream",
];

/// Who uploaded a blob: the executor the operation was dispatched to (through its edge's
/// mutual-TLS endpoint), or a principal observing the effect (`observe:capture`, through MCP,
/// re-checked by the ledger as an act on its behalf).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Uploader {
    Executor { executor_id: String },
    Principal { principal_id: String },
}

/// A stored blob's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceBlobV1 {
    /// sha256 of the bytes, lowercase hex: the blob's name.
    pub content_hash: String,
    pub operation_id: String,
    pub mime_type: String,
    pub size: u64,
    pub by: Uploader,
    pub at_ms: u64,
}

/// Where a stored blob is read (`evidence_return_ref`).
pub fn evidence_uri(operation_id: &str, content_hash: &str) -> String {
    format!("writ://operations/{operation_id}/evidence/{content_hash}")
}

/// The node's key of a blob's bytes: tenant id, NUL, operation id, NUL, content hash (one blob
/// per record, so a record's expiry deletes exactly its bytes).
pub fn blob_key(tenant_id: &str, operation_id: &str, content_hash: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(tenant_id.len() + operation_id.len() + 2 + content_hash.len());
    key.extend_from_slice(tenant_id.as_bytes());
    key.push(0);
    key.extend_from_slice(operation_id.as_bytes());
    key.push(0);
    key.extend_from_slice(content_hash.as_bytes());
    key
}

/// Records expired in one entry at most (the rest in the next).
pub const EVIDENCE_EXPIRED_PER_ENTRY: usize = 256;

/// A blob carried by an executor's report (`ReportAttemptV2`): the bytes of the reported
/// evidence's `content_hash`, stored with the report in one entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceContentV1 {
    pub mime_type: String,
    pub content_base64: String,
}

/// [`EvidenceContentV1`] with the bytes themselves (`ReportAttemptV3`): a quarter smaller than
/// base64 in the log, and no replica decodes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceBytesV1 {
    pub mime_type: String,
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
}

/// The ledger version that reads commands carrying a blob as its bytes (`StoreEvidenceV2`,
/// `ReportAttemptV3`): while a member is older, a leader proposes their base64 forms.
pub const BLOBS_AS_BYTES_FROM: u32 = 20;

/// A blob as a command carries it: base64 text, or its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blob<'a> {
    Base64(&'a str),
    Bytes(&'a [u8]),
}

impl<'a> Blob<'a> {
    /// Its bytes, borrowed when it carries them; `None` when its text is not standard base64.
    pub fn bytes(self) -> Option<Cow<'a, [u8]>> {
        match self {
            Blob::Base64(text) => from_base64(text).map(Cow::Owned),
            Blob::Bytes(bytes) => Some(Cow::Borrowed(bytes)),
        }
    }
}

/// A stored blob by operation and hash (what an expiry names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceRefV1 {
    pub operation_id: String,
    pub content_hash: String,
}

/// The key range `[start, end)` holding every key of `tenant_id` in a store keyed by tenant id
/// then NUL ([`blob_key`], `crate::audit::record_key`): what a purge deletes.
pub fn tenant_range(tenant_id: &str) -> (Vec<u8>, Vec<u8>) {
    let mut start = tenant_id.as_bytes().to_vec();
    start.push(0);
    let mut end = tenant_id.as_bytes().to_vec();
    end.push(1);
    (start, end)
}

/// Standard base64 of `bytes` (how blobs travel in commands and answers).
pub fn to_base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The bytes of [`to_base64`]'s text, if it is standard base64.
pub fn from_base64(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

fn invalid(message: impl Into<String>) -> Rejection {
    Rejection::new(ReasonCode::INPUT_INVALID, message)
}

/// What an upload whose text is not standard base64 is refused with.
pub fn not_base64() -> Rejection {
    invalid("content_base64 is not standard base64")
}

/// The bytes of an upload, checked: a known media type, at most [`EVIDENCE_BYTES_MAX`] bytes
/// (base64 that is standard), whose sha256 is `content_hash`.
pub fn checked_bytes<'a>(mime_type: &str, content: Blob<'a>, content_hash: &str) -> Result<Cow<'a, [u8]>, Rejection> {
    if !EVIDENCE_MIME_TYPES.contains(&mime_type) {
        return Err(invalid(format!("evidence is one of {}", EVIDENCE_MIME_TYPES.join(", "))));
    }
    if matches!(content, Blob::Base64(text) if text.len() > EVIDENCE_BYTES_MAX.div_ceil(3) * 4) {
        let msg = format!("evidence is at most {EVIDENCE_BYTES_MAX} bytes");
        return Err(Rejection::new(ReasonCode::PAYLOAD_TOO_LARGE, msg));
    }
    let bytes = content.bytes().ok_or_else(not_base64)?;
    if bytes.is_empty() || bytes.len() > EVIDENCE_BYTES_MAX {
        return Err(Rejection::new(
            ReasonCode::PAYLOAD_TOO_LARGE,
            format!("evidence is 1..={EVIDENCE_BYTES_MAX} bytes"),
        ));
    }
    if crate::sha256_hex(&bytes) != content_hash {
        return Err(invalid("content_hash is not the sha256 of the content"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    #[test]
    fn uploads_are_checked_against_their_hash_size_and_type() {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let hash = crate::sha256_hex(b"door closed");
        let text = b64(b"door closed");
        assert_eq!(&*checked_bytes("text/plain", Blob::Base64(&text), &hash).unwrap(), b"door closed");
        assert_eq!(&*checked_bytes("text/plain", Blob::Bytes(b"door closed"), &hash).unwrap(), b"door closed");
        let refused = |m: &str, c: &str, h: &str| checked_bytes(m, Blob::Base64(c), h).unwrap_err().reason;
        assert_eq!(refused("text/html", &b64(b"door closed"), &hash), ReasonCode::INPUT_INVALID);
        assert_eq!(refused("text/plain", &b64(b"door open"), &hash), ReasonCode::INPUT_INVALID);
        assert_eq!(refused("text/plain", "%%%", &hash), ReasonCode::INPUT_INVALID);
        let big = vec![7u8; EVIDENCE_BYTES_MAX + 1];
        assert_eq!(refused("text/plain", &b64(&big), &crate::sha256_hex(&big)), ReasonCode::PAYLOAD_TOO_LARGE);
        assert_eq!(refused("text/plain", "", &crate::sha256_hex(b"")), ReasonCode::PAYLOAD_TOO_LARGE);
        // Bytes are bounded and hashed the same way.
        let bytes = |c: &[u8], h: &str| checked_bytes("text/plain", Blob::Bytes(c), h).unwrap_err().reason;
        assert_eq!(bytes(&big, &crate::sha256_hex(&big)), ReasonCode::PAYLOAD_TOO_LARGE);
        assert_eq!(bytes(b"", &crate::sha256_hex(b"")), ReasonCode::PAYLOAD_TOO_LARGE);
        assert_eq!(bytes(b"door open", &hash), ReasonCode::INPUT_INVALID);
    }
}

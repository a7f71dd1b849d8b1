//! Checksummed record encoding for everything this crate writes to disk.
//!
//! A record is `sha256(payload)[..8] ++ payload`, where the payload is the canonical
//! `writ_api::encode` bytes. A mismatch on read is corruption: it surfaces as an
//! `InvalidData` error that stops the node instead of serving garbage.

use std::io;

pub(crate) const CHECKSUM_BYTES: usize = 8;

pub(crate) fn checksum(payload: &[u8]) -> [u8; CHECKSUM_BYTES] {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(payload);
    let mut out = [0u8; CHECKSUM_BYTES];
    out.copy_from_slice(&digest[..CHECKSUM_BYTES]);
    out
}

pub(crate) fn checked_encode<T: serde::Serialize>(value: &T) -> io::Result<Vec<u8>> {
    // Encoded behind room for the checksum, which is filled in once the payload is known.
    let mut out = vec![0u8; CHECKSUM_BYTES];
    writ_api::encode_into(value, &mut out).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let sum = checksum(&out[CHECKSUM_BYTES..]);
    out[..CHECKSUM_BYTES].copy_from_slice(&sum);
    Ok(out)
}

/// `payload` behind its checksum.
pub(crate) fn checked_bytes(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(CHECKSUM_BYTES + payload.len());
    out.extend_from_slice(&checksum(payload));
    out.extend_from_slice(payload);
    out
}

/// The payload `checked_bytes` wrote, once its checksum vouches for it.
pub(crate) fn checked_payload<'a>(bytes: &'a [u8], what: &str) -> io::Result<&'a [u8]> {
    let corrupt = |detail: &str| io::Error::new(io::ErrorKind::InvalidData, format!("corrupt {what}: {detail}"));
    if bytes.len() < CHECKSUM_BYTES {
        return Err(corrupt("record shorter than its checksum"));
    }
    let (sum, payload) = bytes.split_at(CHECKSUM_BYTES);
    if sum != checksum(payload) {
        return Err(corrupt("checksum mismatch"));
    }
    Ok(payload)
}

pub(crate) fn checked_decode<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> io::Result<T> {
    let payload = checked_payload(bytes, what)?;
    // The checksum vouches for the bytes, so no size bound: a snapshot carries every retained
    // audit record and outgrows any single message (a 64 MiB bound here once stopped every
    // node that had to read its snapshot back).
    writ_api::decode_unbounded(payload)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("corrupt {what}: {e}")))
}

/// A corrupt audit row, and why.
pub(crate) fn corrupt_record(detail: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("corrupt audit record: {detail}"))
}

/// A row of the audit family, once its checksum vouches for it: a whole record or a position
/// in an event (`crate::audit_rows`).
pub(crate) fn row_of(bytes: &[u8]) -> io::Result<writ_api::audit::StoredRow> {
    writ_api::audit::StoredRow::parse(checked_payload(bytes, "audit record")?).map_err(|e| corrupt_record(&e))
}

/// A whole audit record's row (`writ_api::audit::AuditRecord::stored` behind its checksum), as
/// snapshots and backups carry it: never a position in an event (`crate::audit_rows`), which
/// only the node that applied it can read.
pub(crate) fn record_of(bytes: &[u8]) -> io::Result<writ_api::audit::AuditRecord> {
    match row_of(bytes)? {
        writ_api::audit::StoredRow::Record(record) => Ok(*record),
        writ_api::audit::StoredRow::AtEvent { .. } => Err(corrupt_record("a position in an event, not a record")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_larger_than_a_message_round_trip() {
        let big = "a".repeat(65 * 1024 * 1024);
        let rec = checked_encode(&big).unwrap();
        assert!(writ_api::decode::<String>(&rec[CHECKSUM_BYTES..]).is_err(), "a message is bounded at 64 MiB");
        let back: String = checked_decode(&rec, "snapshot file").unwrap();
        assert_eq!(back.len(), big.len());
    }

    #[test]
    fn flipped_bit_is_detected() {
        let mut rec = checked_encode(&("tenant", 42u64)).unwrap();
        assert_eq!(checked_decode::<(String, u64)>(&rec, "x").unwrap(), ("tenant".to_string(), 42));
        let last = rec.len() - 1;
        rec[last] ^= 1;
        let err = checked_decode::<(String, u64)>(&rec, "x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}

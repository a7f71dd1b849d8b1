//! The rows of the audit family (`writ_api::audit::StoredRow`). A record applied while its
//! event is in the node's event log is stored as where it lies — the event's revision and the
//! record's index among the event's records, 20 bytes instead of the record's hundreds — and
//! rendered from the event when it is read (`writ_api::trail::record_at`). The `audit_at`
//! family maps each such event's revision to the tenant and sequences of its records, so that
//! when the event log's retention drops events, the records still retained are written out
//! whole first, in the same batch ([`write_out`]). Snapshot transfers and backups carry whole
//! records ([`whole`]), so a node that installs one needs none of the sender's events.

use std::io;

use rocksdb::{ReadOptions, WriteBatch, DB};
use serde::{Deserialize, Serialize};
use writ_api::audit::{record_key, AuditRecord, StoredRow};
use writ_api::ledger::EventEnvelope;
use writ_api::state::LedgerState;
use writ_api::trail::record_at;

use crate::codec::{checked_bytes, checked_decode, checked_encode, checked_payload};
use crate::{CF_AUDIT, CF_EVENTS};

/// Events whose records the audit family holds as positions, by revision
/// ([`EventRecords`]); trimmed with the event log.
pub(crate) const CF_AUDIT_AT: &str = "audit_at";

/// Where the records of one event lie in the audit family: sequences
/// `first_seq..first_seq + count` of the tenant.
#[derive(Debug, Serialize, Deserialize)]
struct EventRecords {
    tenant_id: String,
    first_seq: u64,
    count: u32,
}

/// Adds to `batch` the rows of the records one applied event produced, from sequence
/// `first_seq` on: each as its position, and the event's entry in `audit_at`.
pub(crate) fn put_positions(
    db: &DB,
    batch: &mut WriteBatch,
    env: &EventEnvelope,
    first_seq: u64,
    count: u32,
) -> io::Result<()> {
    let audit = db.cf_handle(CF_AUDIT).expect("column families are created at open");
    for index in 0..count {
        let key = record_key(&env.stream, first_seq + u64::from(index));
        batch.put_cf(audit, key, checked_bytes(&StoredRow::at_event(env.revision, index)));
    }
    let at = db.cf_handle(CF_AUDIT_AT).expect("column families are created at open");
    let entry = EventRecords { tenant_id: env.stream.clone(), first_seq, count };
    batch.put_cf(at, env.revision.to_be_bytes(), checked_encode(&entry)?);
    Ok(())
}

/// The tenant and sequence of an audit family key (`record_key`).
fn key_parts(key: &[u8]) -> io::Result<(&str, u64)> {
    let corrupt = || io::Error::new(io::ErrorKind::InvalidData, "corrupt audit key");
    let (tenant, rest) = key.split_at_checked(key.len().checked_sub(9).ok_or_else(corrupt)?).ok_or_else(corrupt)?;
    let tenant = std::str::from_utf8(tenant).map_err(|_| corrupt())?;
    let seq = u64::from_be_bytes(rest[1..].try_into().map_err(|_| corrupt())?);
    Ok((tenant, seq))
}

/// A stored row (`value`, under `key`) as its record, rendered from its event when the row
/// holds a position; `None` when that event is not in the event log (`read_event`).
pub(crate) fn record_of(
    key: &[u8],
    value: &[u8],
    read_event: impl FnOnce(u64) -> io::Result<Option<EventEnvelope>>,
) -> io::Result<Option<AuditRecord>> {
    let corrupt = |e: String| io::Error::new(io::ErrorKind::InvalidData, format!("corrupt audit record: {e}"));
    match StoredRow::parse(checked_payload(value, "audit record")?).map_err(corrupt)? {
        StoredRow::Record(record) => Ok(Some(*record)),
        StoredRow::AtEvent { revision, index } => {
            let Some(env) = read_event(revision)? else { return Ok(None) };
            let (tenant, seq) = key_parts(key)?;
            let record = record_at(&env, tenant, seq, index)
                .ok_or_else(|| corrupt(format!("event {revision} has no record {index}")))?;
            Ok(Some(record))
        }
    }
}

/// The event at `revision` in the event log, if it is there.
pub(crate) fn read_event(db: &DB, opts: ReadOptions, revision: u64) -> io::Result<Option<EventEnvelope>> {
    let cf = db.cf_handle(CF_EVENTS).expect("column families are created at open");
    let value = db.get_cf_opt(cf, revision.to_be_bytes(), &opts).map_err(io::Error::other)?;
    value.map(|v| checked_decode(&v, "event")).transpose()
}

/// A stored row as a whole record's row, as snapshot transfers and backups carry it: a
/// position is rendered from its event in the same RocksDB snapshot `view`, where the event
/// log's retention has not dropped it (it writes the record out first, in the same batch).
pub(crate) fn whole(db: &DB, view: &rocksdb::Snapshot, key: &[u8], value: Vec<u8>) -> io::Result<Vec<u8>> {
    let payload = checked_payload(&value, "audit record")?;
    if matches!(StoredRow::parse(payload), Ok(StoredRow::Record(_))) {
        return Ok(value);
    }
    let in_view = || {
        let mut opts = ReadOptions::default();
        opts.set_snapshot(view);
        opts
    };
    let record = record_of(key, &value, |revision| read_event(db, in_view(), revision))?.ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidData, "corrupt audit record: its event has left the event log")
    })?;
    Ok(checked_bytes(&record.stored()))
}

/// Before the event log's retention drops the events below revision `below` (`dropped`, all of
/// them, in revision order): adds to `batch` the whole rows of the records of those events
/// that `state` still retains and that are still held as positions, and the removal of the
/// events' `audit_at` entries. Returns how many records were written out.
pub(crate) fn write_out(
    db: &DB,
    batch: &mut WriteBatch,
    state: &LedgerState,
    dropped: &[&EventEnvelope],
    below: u64,
) -> io::Result<u64> {
    let at = db.cf_handle(CF_AUDIT_AT).expect("column families are created at open");
    let audit = db.cf_handle(CF_AUDIT).expect("column families are created at open");
    let mut opts = ReadOptions::default();
    opts.set_iterate_upper_bound(below.to_be_bytes());
    let mut written = 0;
    for item in db.iterator_cf_opt(at, opts, rocksdb::IteratorMode::Start) {
        let (key, value) = item.map_err(io::Error::other)?;
        let revision = u64::from_be_bytes(key.as_ref().try_into().map_err(|_| io::Error::other("audit_at key"))?);
        let entry: EventRecords = checked_decode(&value, "audit position")?;
        let Ok(at) = dropped.binary_search_by_key(&revision, |e| e.revision) else { continue };
        let env = dropped[at];
        let Some(index) = state.audit.get(&entry.tenant_id) else { continue };
        for i in 0..entry.count {
            let seq = entry.first_seq + u64::from(i);
            if seq < index.first_seq || seq >= index.next_seq {
                continue;
            }
            let key = record_key(&entry.tenant_id, seq);
            let Some(row) = db.get_cf(audit, &key).map_err(io::Error::other)? else { continue };
            // Only this event's position: the tenant may have been purged and created again.
            let at_this = StoredRow::at_event(revision, i);
            if checked_payload(&row, "audit record")? != at_this.as_slice() {
                continue;
            }
            if let Some(record) = record_at(env, &entry.tenant_id, seq, i) {
                batch.put_cf(audit, &key, checked_bytes(&record.stored()));
                written += 1;
            }
        }
    }
    batch.delete_range_cf(at, 0u64.to_be_bytes(), below.to_be_bytes());
    Ok(written)
}

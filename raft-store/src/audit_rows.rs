//! The rows of the audit family (`writ_api::audit::StoredRow`). A record applied while its
//! event is in the node's event log is stored as where it lies — the event's revision and the
//! record's index among the event's records, 20 bytes instead of the record's hundreds — and
//! rendered from the event when it is read (`writ_api::trail::record_at`). When the event log's
//! retention drops events, the records of theirs still retained are written out whole first,
//! in the same batch ([`write_out`]). Snapshot transfers and backups carry whole records
//! ([`whole`]), so a node that installs one needs none of the sender's events.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use rocksdb::{Direction, IteratorMode, ReadOptions, WriteBatch, DB};
use writ_api::audit::{record_key, AuditRecord, AuditedEvent, StoredRow};
use writ_api::ledger::EventEnvelope;
use writ_api::state::LedgerState;
use writ_api::trail::record_at;

use crate::codec::{checked_bytes, checked_decode, checksum, corrupt_record, row_of, CHECKSUM_BYTES};
use crate::{CF_AUDIT, CF_EVENTS};

/// Adds to `batch` the rows of the records one applied event produced (`audited`): each as
/// its position in the event (a batch of request decisions is a thousand rows, built in place).
pub(crate) fn put_positions(db: &DB, batch: &mut WriteBatch, audited: &AuditedEvent) {
    let audit = db.cf_handle(CF_AUDIT).expect("column families are created at open");
    let mut key = record_key(&audited.tenant_id, audited.first_seq);
    let seq_at = key.len() - 8;
    // `checked_bytes` of the position, in place.
    let mut row = [0u8; CHECKSUM_BYTES + 20];
    for index in 0..audited.count {
        key[seq_at..].copy_from_slice(&(audited.first_seq + u64::from(index)).to_be_bytes());
        let position = StoredRow::at_event(audited.revision, index);
        row[..CHECKSUM_BYTES].copy_from_slice(&checksum(&position));
        row[CHECKSUM_BYTES..].copy_from_slice(&position);
        batch.put_cf(audit, &key, row);
    }
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
/// holds a position; `None` when that event is not in the event log (`read_event`, usually
/// [`EventReader::read`]).
pub(crate) fn record_of(
    key: &[u8],
    value: &[u8],
    read_event: impl FnOnce(u64) -> io::Result<Option<Arc<EventEnvelope>>>,
) -> io::Result<Option<AuditRecord>> {
    render(key, row_of(value)?, read_event)
}

/// [`record_of`] for a row already read.
fn render(
    key: &[u8],
    row: StoredRow,
    read_event: impl FnOnce(u64) -> io::Result<Option<Arc<EventEnvelope>>>,
) -> io::Result<Option<AuditRecord>> {
    match row {
        StoredRow::Record(record) => Ok(Some(*record)),
        StoredRow::AtEvent { revision, index } => {
            let Some(env) = read_event(revision)? else { return Ok(None) };
            let (tenant, seq) = key_parts(key)?;
            let record = record_at(&env, tenant, seq, index)
                .ok_or_else(|| corrupt_record(&format!("event {revision} has no record {index}")))?;
            Ok(Some(record))
        }
    }
}

/// A position whose event is no longer where it must be.
pub(crate) fn event_gone() -> io::Error {
    corrupt_record("its event has left the event log")
}

/// Reads the events that audit rows point at, in one view of the store (a RocksDB snapshot, or
/// the latest), keeping the last one read: a tenant's records follow its events' order, and one
/// event (a batch of request decisions) holds up to a thousand of them, so a pass over records
/// reads and decodes each event once instead of once per record.
pub(crate) struct EventReader<'a> {
    db: &'a DB,
    view: Option<&'a rocksdb::Snapshot<'a>>,
    /// The last revision read, and its event (`None`: not in the event log).
    last: Option<(u64, Option<Arc<EventEnvelope>>)>,
}

impl<'a> EventReader<'a> {
    pub(crate) fn new(db: &'a DB, view: Option<&'a rocksdb::Snapshot<'a>>) -> Self {
        Self { db, view, last: None }
    }

    /// The event at `revision` in the event log, if it is there.
    pub(crate) fn read(&mut self, revision: u64) -> io::Result<Option<Arc<EventEnvelope>>> {
        if let Some((at, env)) = &self.last {
            if *at == revision {
                return Ok(env.clone());
            }
        }
        let cf = self.db.cf_handle(CF_EVENTS).expect("column families are created at open");
        let mut opts = ReadOptions::default();
        if let Some(view) = self.view {
            opts.set_snapshot(view);
        }
        let value = self.db.get_cf_opt(cf, revision.to_be_bytes(), &opts).map_err(io::Error::other)?;
        let env = value.map(|v| checked_decode(&v, "event").map(Arc::new)).transpose()?;
        self.last = Some((revision, env.clone()));
        Ok(env)
    }
}

/// A stored row as a whole record's row, as snapshot transfers and backups carry it: a
/// position is rendered from its event as `events` reads it in a RocksDB snapshot, where the
/// event log's retention has not dropped it (it writes the record out first, in the same batch).
pub(crate) fn whole(events: &mut EventReader, key: &[u8], value: Vec<u8>) -> io::Result<Vec<u8>> {
    let row = row_of(&value)?;
    if matches!(row, StoredRow::Record(_)) {
        return Ok(value);
    }
    let record = render(key, row, |revision| events.read(revision))?.ok_or_else(event_gone)?;
    Ok(checked_bytes(&record.stored()))
}

/// Before the event log's retention drops the events below revision `below` (`dropped`, all of
/// them, in revision order): adds to `batch` the whole rows of the records of those events
/// that `state` still retains and that are still held as positions. `from` holds, per tenant,
/// the sequence its first position is likely at (where the last call stopped; found again
/// when it is not). Returns how many records were written out.
pub(crate) fn write_out(
    db: &DB,
    batch: &mut WriteBatch,
    state: &LedgerState,
    dropped: &[&EventEnvelope],
    below: u64,
    from: &mut BTreeMap<String, u64>,
) -> io::Result<u64> {
    let audit = db.cf_handle(CF_AUDIT).expect("column families are created at open");
    // Each tenant with records among the dropped events, and its first such event's revision.
    let mut tenants: BTreeMap<&str, u64> = BTreeMap::new();
    for env in dropped.iter().filter(|e| state.audit.contains_key(&e.stream)) {
        tenants.entry(&env.stream).or_insert(env.revision);
    }
    let mut written = 0;
    for (tenant, first_revision) in tenants {
        let index = &state.audit[tenant];
        let rows = Rows { db, tenant };
        let start = rows.first_at(first_revision, index.first_seq, index.next_seq, from.get(tenant).copied())?;
        // The tenant's rows from there, in sequence order (one pass, not a read per record).
        let mut opts = ReadOptions::default();
        opts.set_iterate_upper_bound(record_key(tenant, index.next_seq));
        let from_key = record_key(tenant, start);
        let mut seq = start;
        for item in db.iterator_cf_opt(audit, opts, IteratorMode::From(&from_key, Direction::Forward)) {
            let (key, value) = item.map_err(io::Error::other)?;
            let row = row_of(&value)?;
            if revision_of(&row) >= below {
                break;
            }
            seq = key_parts(&key)?.1;
            if let StoredRow::AtEvent { revision, index: i } = row {
                let env = dropped.binary_search_by_key(&revision, |e| e.revision).ok().map(|at| dropped[at]);
                if let Some(record) = env.and_then(|env| record_at(env, tenant, seq, i)) {
                    batch.put_cf(audit, &key, checked_bytes(&record.stored()));
                    written += 1;
                }
            }
            seq += 1;
        }
        from.insert(tenant.to_string(), seq);
    }
    Ok(written)
}

/// The revision of a row's event.
fn revision_of(row: &StoredRow) -> u64 {
    match row {
        StoredRow::Record(record) => record.revision,
        StoredRow::AtEvent { revision, .. } => *revision,
    }
}

/// One tenant's retained rows, by sequence.
struct Rows<'a> {
    db: &'a DB,
    tenant: &'a str,
}

impl Rows<'_> {
    fn get(&self, seq: u64) -> io::Result<StoredRow> {
        let audit = self.db.cf_handle(CF_AUDIT).expect("column families are created at open");
        let row = self.db.get_cf(audit, record_key(self.tenant, seq)).map_err(io::Error::other)?;
        row_of(&row.ok_or_else(|| corrupt_record("a retained one is missing"))?)
    }

    /// The first sequence in `first..next` whose event is at or after `revision` (`next` if
    /// none): `hint` when the rows either side of it say so, else found by bisection (a
    /// tenant's records follow its events' order).
    fn first_at(&self, revision: u64, first: u64, next: u64, hint: Option<u64>) -> io::Result<u64> {
        let before = |seq: u64| -> io::Result<bool> { Ok(revision_of(&self.get(seq)?) < revision) };
        if let Some(hint) = hint.filter(|h| (first..=next).contains(h)) {
            let starts_here = hint == first || before(hint - 1)?;
            if starts_here && (hint == next || !before(hint)?) {
                return Ok(hint);
            }
        }
        let (mut lo, mut hi) = (first, next);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if before(mid)? {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where a tenant's first record of an event at or after a revision lies: found from a
    /// right hint, and by bisection from none, from a wrong one and from one out of range.
    #[test]
    fn the_first_position_of_a_revision_is_found_with_or_without_a_hint() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::open_db(dir.path()).unwrap();
        let audit = db.cf_handle(CF_AUDIT).unwrap();
        for (seq, revision) in (1..).zip([10, 10, 11, 12, 12, 13]) {
            db.put_cf(audit, record_key("t", seq), checked_bytes(&StoredRow::at_event(revision, 0))).unwrap();
        }
        let rows = Rows { db: &db, tenant: "t" };
        for hint in [None, Some(4), Some(2), Some(6), Some(99)] {
            assert_eq!(rows.first_at(12, 1, 7, hint).unwrap(), 4, "hint {hint:?}");
        }
        assert_eq!(rows.first_at(14, 1, 7, Some(3)).unwrap(), 7, "none at or after it");
        assert_eq!(rows.first_at(5, 1, 7, Some(5)).unwrap(), 1, "all at or after it");
        assert_eq!(rows.first_at(11, 3, 7, None).unwrap(), 3, "within the retained range");
    }

    /// The rows an applied event's records get, built in place, are each record's key and
    /// its position behind the checksum, as every reader of the family parses them.
    #[test]
    fn positions_are_the_records_keys_and_checked_rows() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::open_db(dir.path()).unwrap();
        let audited = AuditedEvent { tenant_id: "t".into(), revision: 7, first_seq: 255, count: 3, event_bytes: None };
        let mut batch = WriteBatch::default();
        put_positions(&db, &mut batch, &audited);
        db.write(batch).unwrap();
        let audit = db.cf_handle(CF_AUDIT).unwrap();
        let rows: Vec<_> = db.iterator_cf(audit, rocksdb::IteratorMode::Start).map(Result::unwrap).collect();
        let expected: Vec<_> = (0..3u32)
            .map(|i| (record_key("t", 255 + u64::from(i)), checked_bytes(&StoredRow::at_event(7, i))))
            .collect();
        let rows: Vec<_> = rows.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
        assert_eq!(rows, expected);
        assert_eq!(row_of(&rows[2].1).unwrap(), StoredRow::AtEvent { revision: 7, index: 2 });
    }
}

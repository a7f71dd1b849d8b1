//! The cold rows' store (`writ_api::cold`) on the `cold` column family.
//!
//! **Layout.** Each version of a row is stored under the row's key followed by the revision
//! that wrote it (u64, big-endian), so a read as of a revision is one reverse seek; the value
//! is a tag byte — 1 then the row's bytes, or 0 for a deletion. Row keys are prefix-free, so a
//! row's versions are adjacent.
//!
//! **Garbage.** A write that replaced or deleted a row also writes a garbage row under
//! [`GARBAGE`]: the revision, then 0 and the row's key (its older versions, and the deletion
//! itself, can go) or 1 and a tenant's prefix (a purge: every row under it can go). Versions
//! are dropped only once no replay can read them — when the revision is at or below the oldest
//! kept snapshot's, since a node replays its log from a snapshot and reads as of revisions at
//! or after it ([`purge`]).

use std::io;
use std::sync::Arc;

use rocksdb::{WriteBatch, DB};
use writ_api::cold::{ColdStore, ColdWrites};

/// The column family of the cold rows.
pub(crate) const CF_COLD: &str = "cold";

/// First byte of the garbage rows (a tenant prefix starts with its length's high byte, 0).
const GARBAGE: u8 = 0xff;
/// Garbage rows read per purge batch.
const PURGE_BATCH: usize = 4096;

/// Reads the cold rows from the node's RocksDB. A read that fails is corruption: the state
/// machine cannot go on deterministically without it, so it panics (the node's fatal path).
#[derive(Debug)]
pub struct RocksCold {
    db: Arc<DB>,
}

impl RocksCold {
    pub(crate) fn new(db: Arc<DB>) -> Self {
        RocksCold { db }
    }

    fn cf(&self) -> &rocksdb::ColumnFamily {
        self.db.cf_handle(CF_COLD).expect("column families are created at open")
    }
}

/// The column family's options: a row's versions share a prefix (the key without its
/// revision), with bloom filters over those prefixes, so reading a row that is not there (a new
/// idempotency key, a new operation id: every submission asks) skips every table without it;
/// and tables crowded with a purge's deletions are compacted soon.
pub(crate) fn tune(cf: &mut rocksdb::Options, table: &mut rocksdb::BlockBasedOptions) {
    fn row(key: &[u8]) -> &[u8] {
        &key[..key.len().saturating_sub(8)]
    }
    fn versioned(key: &[u8]) -> bool {
        key.len() >= 8
    }
    cf.set_prefix_extractor(rocksdb::SliceTransform::create("writ.cold.row", row, Some(versioned)));
    cf.set_memtable_prefix_bloom_ratio(0.1);
    table.set_bloom_filter(10.0, false);
    table.set_whole_key_filtering(false);
    // A purge deletes versions by the thousand: a table where they crowd is compacted soon,
    // so the disk retention frees comes back without waiting for the next write there.
    cf.add_compact_on_deletion_collector_factory(
        COMPACT_ON_DELETIONS.0,
        COMPACT_ON_DELETIONS.1,
        COMPACT_ON_DELETIONS.2,
    );
}

/// A table is compacted as soon as it holds this many deletions in any window of this many
/// entries, or this share of deletions overall (RocksDB's compact-on-deletion collector).
const COMPACT_ON_DELETIONS: (usize, usize, f64) = (16_384, 4_096, 0.3);

/// Options of an iterator over rows of many keys (prefix filters do not apply).
fn in_order() -> rocksdb::ReadOptions {
    let mut opts = rocksdb::ReadOptions::default();
    opts.set_total_order_seek(true);
    opts
}

fn versioned(key: &[u8], revision: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 8);
    out.extend_from_slice(key);
    out.extend_from_slice(&revision.to_be_bytes());
    out
}

/// A stored version's row: `None` for a deletion.
fn row_of(value: &[u8]) -> Option<Vec<u8>> {
    match value.split_first() {
        Some((1, row)) => Some(row.to_vec()),
        Some((0, [])) => None,
        _ => panic!("corrupt cold row: a version with tag {:?}", value.first()),
    }
}

fn revision_of(key: &[u8]) -> u64 {
    let at = key.len().checked_sub(8).expect("a cold row key ends in its revision");
    u64::from_be_bytes(key[at..].try_into().expect("8 bytes"))
}

impl ColdStore for RocksCold {
    fn get(&self, key: &[u8], at: u64) -> Option<Vec<u8>> {
        let mut opts = rocksdb::ReadOptions::default();
        opts.set_prefix_same_as_start(true);
        let mut it = self.db.raw_iterator_cf_opt(self.cf(), opts);
        it.seek_for_prev(versioned(key, at));
        let found = match (it.key(), it.value()) {
            (Some(k), Some(v)) if k.len() == key.len() + 8 && k.starts_with(key) => row_of(v),
            _ => None,
        };
        if let Err(e) = it.status() {
            panic!("the cold rows cannot be read: {e}");
        }
        found
    }

    fn scan(&self, prefix: &[u8], after: Option<&[u8]>, at: u64, limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        // Past every version of `after`: its key, eight 0xff, one more byte.
        let start = after.map_or_else(|| prefix.to_vec(), |a| [a, &[0xff; 9]].concat());
        let mut it = self.db.raw_iterator_cf_opt(self.cf(), in_order());
        it.seek(&start);
        let mut rows = Vec::new();
        // The row being read, and its newest version at or before `at` (versions ascend).
        let (mut row, mut value): (Option<Vec<u8>>, Option<Vec<u8>>) = (None, None);
        while let Some(k) = it.key().filter(|k| k.starts_with(prefix) && k.len() >= prefix.len() + 8) {
            let (key, rev) = (&k[..k.len() - 8], revision_of(k));
            if row.as_deref() != Some(key) {
                if let (Some(r), Some(v)) = (row.take(), value.take()) {
                    rows.push((r, v));
                    if rows.len() == limit {
                        break;
                    }
                }
                (row, value) = (Some(key.to_vec()), None);
            }
            if rev <= at {
                value = it.value().and_then(row_of);
            }
            it.next();
        }
        if let Err(e) = it.status() {
            panic!("the cold rows cannot be read: {e}");
        }
        if let (Some(r), Some(v), true) = (row, value, rows.len() < limit) {
            rows.push((r, v));
        }
        rows
    }
}

/// Adds the writes a state took (`ColdTier::take_writes`) to `batch`: each row's version, and
/// the garbage rows of replacements, deletions and dropped tenants.
pub(crate) fn write(db: &DB, batch: &mut WriteBatch, writes: ColdWrites) {
    let cf = db.cf_handle(CF_COLD).expect("column families are created at open");
    for (key, row) in writes.rows {
        let value = match &row.value {
            Some(v) => [&[1u8][..], v].concat(),
            None => vec![0],
        };
        batch.put_cf(cf, versioned(&key, row.revision), value);
        if row.replaces || row.value.is_none() {
            batch.put_cf(cf, garbage(row.revision, 0, &key), []);
        }
    }
    for (revision, prefix) in writes.dropped {
        batch.put_cf(cf, garbage(revision, 1, &prefix), []);
    }
}

fn garbage(revision: u64, kind: u8, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(10 + key.len());
    out.push(GARBAGE);
    out.extend_from_slice(&revision.to_be_bytes());
    out.push(kind);
    out.extend_from_slice(key);
    out
}

/// Drops the versions no replay from a snapshot at or after revision `horizon` can read: those
/// a garbage row at or below it names. Returns how many versions and prefixes went.
pub(crate) fn purge(db: &DB, horizon: u64) -> io::Result<u64> {
    let cf = db.cf_handle(CF_COLD).expect("column families are created at open");
    let end = garbage(horizon.saturating_add(1), 0, &[]);
    let mut dropped = 0u64;
    loop {
        let mut batch = WriteBatch::default();
        let mut it = db.raw_iterator_cf_opt(cf, in_order());
        it.seek([GARBAGE]);
        let mut seen = 0;
        while let Some(g) = it.key().filter(|g| *g < end.as_slice()).map(<[u8]>::to_vec) {
            if seen == PURGE_BATCH {
                break;
            }
            let (revision, kind, key) = (u64::from_be_bytes(g[1..9].try_into().expect("8 bytes")), g[9], &g[10..]);
            if kind == 1 {
                // Every row kind sorts below 0xff.
                batch.delete_range_cf(cf, key, [key, &[0xff][..]].concat().as_slice());
            } else {
                dropped += drop_versions(db, cf, &mut batch, key, revision);
            }
            batch.delete_cf(cf, &g);
            seen += 1;
            dropped += u64::from(kind == 1);
            it.next();
        }
        it.status().map_err(io::Error::other)?;
        if seen == 0 {
            return Ok(dropped);
        }
        db.write(batch).map_err(io::Error::other)?;
    }
}

/// Deletes `key`'s versions older than `revision`, and the one at it if it is a deletion.
fn drop_versions(db: &DB, cf: &rocksdb::ColumnFamily, batch: &mut WriteBatch, key: &[u8], revision: u64) -> u64 {
    let mut it = db.raw_iterator_cf_opt(cf, in_order());
    it.seek(versioned(key, 0));
    let mut n = 0;
    while let Some(k) = it.key().filter(|k| k.len() == key.len() + 8 && k.starts_with(key)) {
        let rev = revision_of(k);
        let deletion = it.value() == Some(&[0u8][..]);
        if rev < revision || (rev == revision && deletion) {
            batch.delete_cf(cf, k);
            n += 1;
        }
        if rev >= revision {
            break;
        }
        it.next();
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use writ_api::cold::PendingRow;

    fn row(revision: u64, value: Option<&[u8]>, replaces: bool) -> PendingRow {
        PendingRow { revision, value: value.map(<[u8]>::to_vec), replaces }
    }

    fn versions(db: &DB) -> usize {
        db.iterator_cf_opt(db.cf_handle(CF_COLD).unwrap(), in_order(), rocksdb::IteratorMode::Start).count()
    }

    /// Reads are as of a revision, whatever was written after it; garbage goes only up to the
    /// horizon purge is given; a dropped tenant's rows go with its garbage row.
    #[test]
    fn rows_read_as_of_a_revision_and_garbage_goes_only_below_the_horizon() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(crate::open_db(dir.path()).unwrap());
        let store = RocksCold::new(db.clone());
        let prefix = writ_api::cold::tenant_prefix("t", 1);
        let (a, b) = ([&prefix[..], b"o\x00\x01a"].concat(), [&prefix[..], b"o\x00\x01b"].concat());
        let put = |writes: Vec<(&Vec<u8>, PendingRow)>, dropped: Vec<(u64, Vec<u8>)>| {
            let mut batch = WriteBatch::default();
            let rows = writes.into_iter().map(|(k, r)| (k.clone(), r)).collect();
            write(&db, &mut batch, ColdWrites { rows, dropped });
            db.write(batch).unwrap();
        };
        put(vec![(&a, row(5, Some(b"a1"), false)), (&b, row(5, Some(b"b1"), false))], vec![]);
        // The first versions in a table on disk (its prefix filters), the second in memory.
        db.flush_cf(db.cf_handle(CF_COLD).unwrap()).unwrap();
        put(vec![(&a, row(9, Some(b"a2"), true)), (&b, row(9, None, true))], vec![]);
        let absent = [&prefix[..], b"o\x00\x01c"].concat();
        assert_eq!(store.get(&absent, 9), None, "a row never written");
        assert_eq!(store.get(&a, 4), None);
        assert_eq!(store.get(&a, 8).as_deref(), Some(&b"a1"[..]));
        assert_eq!(store.get(&a, 9).as_deref(), Some(&b"a2"[..]));
        assert_eq!((store.get(&b, 8).as_deref(), store.get(&b, 9)), (Some(&b"b1"[..]), None));
        let at8 = store.scan(&prefix, None, 8, 10);
        assert_eq!(at8, [(a.clone(), b"a1".to_vec()), (b.clone(), b"b1".to_vec())]);
        assert_eq!(store.scan(&prefix, None, 9, 10), [(a.clone(), b"a2".to_vec())]);
        assert_eq!(store.scan(&prefix, Some(&a), 8, 10), [(b.clone(), b"b1".to_vec())]);
        assert_eq!(store.scan(&prefix, None, 8, 1), [(a.clone(), b"a1".to_vec())]);

        // Below the replacement's revision nothing may go: a replay from 8 still reads a1, b1.
        assert_eq!(purge(&db, 8).unwrap(), 0);
        assert_eq!(store.get(&a, 8).as_deref(), Some(&b"a1"[..]));
        // At it, the older versions and the deletion go; what is read at 9 on stays.
        assert_eq!(purge(&db, 9).unwrap(), 3);
        assert_eq!((store.get(&a, 8), store.get(&a, 9).as_deref()), (None, Some(&b"a2"[..])));
        assert_eq!(versions(&db), 1, "a2 alone, no garbage row");

        put(vec![], vec![(12, prefix.clone())]);
        assert_eq!(purge(&db, 11).unwrap(), 0);
        assert_eq!(store.get(&a, 11).as_deref(), Some(&b"a2"[..]));
        purge(&db, 12).unwrap();
        assert_eq!(versions(&db), 0, "the dropped tenant's rows and the garbage row are gone");
    }
}

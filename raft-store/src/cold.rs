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
//! or after it ([`Purge`], run in the background after each snapshot).
//!
//! **Floors.** Retention deletes time rows oldest first, and their versions stay until a
//! snapshot lets them go: a scan from the start of a kind would step over every row retired
//! since, so each look would cost what all the earlier ones retired. A scan that stepped over
//! many dead rows leaves a floor for their kind — where the first row live as of its revision
//! is — and later scans as of that revision or after start there ([`Floors`]). A floor is
//! this node's knowledge of its own store, never replicated nor in the state: it moves where a
//! scan starts, never what it returns.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use rocksdb::{WriteBatch, DB};
use writ_api::cold::{ColdStore, ColdWrites};

/// The column family of the cold rows.
pub(crate) const CF_COLD: &str = "cold";

/// First byte of the garbage rows (a tenant prefix starts with its length's high byte, 0).
const GARBAGE: u8 = 0xff;
/// Garbage rows read per purge batch.
const PURGE_BATCH: usize = 4096;

/// Dead versions a scan steps over before it leaves a floor for the kind it scanned.
const FLOOR_AFTER: usize = 64;

/// Reads the cold rows from the node's RocksDB. A read that fails is corruption: the state
/// machine cannot go on deterministically without it, so it panics (the node's fatal path).
#[derive(Debug)]
pub struct RocksCold {
    db: Arc<DB>,
    floors: Mutex<Floors>,
    /// Dead versions a scan steps over before it leaves a floor ([`FLOOR_AFTER`]).
    floor_after: usize,
}

/// Where scans of each kind of a tenant's rows may start.
#[derive(Debug, Default)]
struct Floors {
    /// Moved when a write begins and when it ends: a scan leaves a floor only when no write
    /// began or ended while it read, and none was under way when it began, so what it read
    /// is all the store held up to its revision.
    generation: u64,
    /// Writes between [`RocksCold::write`] and their commit (the [`Writing`] guards alive).
    writing: u32,
    /// By the kind's prefix (`writ_api::cold::kind_prefix_of`).
    by_kind: HashMap<Vec<u8>, Floor>,
}

/// No row of the kind whose key sorts before `start` is live as of revision `at` or any after.
/// A write of a row below `start` moves `start` down to it before it commits.
#[derive(Debug, Clone)]
struct Floor {
    start: Vec<u8>,
    at: u64,
}

/// A write of the family under way: its rows are in a batch not yet committed. Dropped once
/// the batch is committed (or given up), it lets scans leave floors again.
#[must_use = "the write is under way until the guard drops after the batch's commit"]
pub(crate) struct Writing<'a>(&'a RocksCold);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        let mut floors = self.0.floors();
        floors.generation += 1;
        floors.writing -= 1;
    }
}

/// What a scan stepped over before its first live row: how many versions, and whether any
/// of them is newer than the scan's revision (a row that may be live later).
#[derive(Debug, Default)]
struct Skipped {
    versions: usize,
    newer: bool,
}

impl RocksCold {
    pub(crate) fn new(db: Arc<DB>) -> Self {
        RocksCold { db, floors: Mutex::default(), floor_after: FLOOR_AFTER }
    }

    /// The cold rows of a RocksDB at `dir` opened as a node opens its own, alone (benches and
    /// tools; a node's rows come with its state machine, `crate::open`). Without `floors`,
    /// every scan starts where it is asked to, as the store read before floors existed.
    pub fn open_alone(dir: &Path, floors: bool) -> io::Result<Self> {
        let db = Arc::new(crate::open_db(dir)?);
        Ok(RocksCold { floor_after: if floors { FLOOR_AFTER } else { usize::MAX }, ..RocksCold::new(db) })
    }

    /// Writes `writes` in a batch of their own, committed.
    pub fn commit(&self, writes: ColdWrites) -> io::Result<()> {
        let mut batch = WriteBatch::default();
        let writing = self.write(&mut batch, writes);
        self.db.write(batch).map_err(io::Error::other)?;
        drop(writing);
        Ok(())
    }

    fn cf(&self) -> &rocksdb::ColumnFamily {
        self.db.cf_handle(CF_COLD).expect("column families are created at open")
    }

    fn floors(&self) -> MutexGuard<'_, Floors> {
        self.floors.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks a write under way: floors left by scans that overlap it are not kept.
    fn begin_write(&self) -> (MutexGuard<'_, Floors>, Writing<'_>) {
        let mut floors = self.floors();
        floors.generation += 1;
        floors.writing += 1;
        (floors, Writing(self))
    }

    /// Adds the writes a state took (`ColdTier::take_writes`) to `batch`: each row's version,
    /// and the garbage rows of replacements, deletions and dropped tenants. Floors above a row
    /// written live move down to it now; the guard must live until `batch` is committed.
    pub(crate) fn write(&self, batch: &mut WriteBatch, writes: ColdWrites) -> Writing<'_> {
        let (mut floors, writing) = self.begin_write();
        let cf = self.cf();
        for (key, row) in writes.rows {
            let value = match &row.value {
                Some(v) => {
                    floors.lower(&key);
                    [&[1u8][..], v].concat()
                }
                None => vec![0],
            };
            batch.put_cf(cf, versioned(&key, row.revision), value);
            if row.replaces || row.value.is_none() {
                batch.put_cf(cf, garbage(row.revision, 0, &key), []);
            }
        }
        for (revision, prefix) in writes.dropped {
            floors.by_kind.retain(|kind, _| !kind.starts_with(&prefix));
            batch.put_cf(cf, garbage(revision, 1, &prefix), []);
        }
        writing
    }

    /// Marks the whole family being replaced (a snapshot's rows installed): every floor goes,
    /// and none is left until the guard drops after the last batch.
    pub(crate) fn replace_all(&self) -> Writing<'_> {
        let (mut floors, writing) = self.begin_write();
        floors.by_kind.clear();
        writing
    }

    /// Where a scan of `prefix` as of `at` may start (past `after`, when given), and the
    /// generation to leave a floor under: `None` when a write is under way, `prefix` is not
    /// one kind's, or the scan starts past `after`, above the rows a floor speaks of.
    fn start(&self, prefix: &[u8], after: Option<&[u8]>, at: u64) -> (Vec<u8>, Option<u64>) {
        // Past every version of `after`: its key, eight 0xff, one more byte.
        let past_after = after.map(|a| [a, &[0xff; 9]].concat());
        if writ_api::cold::kind_prefix_of(prefix) != Some(prefix) {
            return (past_after.unwrap_or_else(|| prefix.to_vec()), None);
        }
        let floors = self.floors();
        let floor = floors.by_kind.get(prefix).filter(|f| f.at <= at).map(|f| f.start.clone());
        let base = floor.unwrap_or_else(|| prefix.to_vec());
        match past_after {
            Some(past) if past > base => (past, None),
            _ => (base, (floors.writing == 0).then_some(floors.generation)),
        }
    }

    /// Leaves a floor for `kind` at `start` as of `at`, unless a write began or ended since
    /// `generation`.
    fn leave_floor(&self, kind: &[u8], start: Vec<u8>, at: u64, generation: u64) {
        let mut floors = self.floors();
        if floors.generation == generation {
            floors.by_kind.insert(kind.to_vec(), Floor { start, at });
        }
    }
}

impl Floors {
    /// A row written live at `key`: its kind's floor may not be above it.
    fn lower(&mut self, key: &[u8]) {
        let Some(floor) = writ_api::cold::kind_prefix_of(key).and_then(|kind| self.by_kind.get_mut(kind)) else {
            return;
        };
        if key < floor.start.as_slice() {
            floor.start = key.to_vec();
        }
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

/// Options of an iterator over rows of many keys (prefix filters do not apply) below `end`
/// (none: to the family's end). The bound matters once retention has deleted rows: an
/// iterator steps over every deletion between the last row it returns and the next live
/// key, wherever that is, and after a purge that was millions of them for each look at a
/// kind with nothing left.
fn in_order(end: Option<Vec<u8>>) -> rocksdb::ReadOptions {
    let mut opts = rocksdb::ReadOptions::default();
    opts.set_total_order_seek(true);
    if let Some(end) = end {
        opts.set_iterate_upper_bound(end);
    }
    opts
}

/// The first key above every key that starts with `prefix` (none: `prefix` is all 0xff).
fn past(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|b| *b != 0xff)?;
    let mut end = prefix[..=last].to_vec();
    end[last] += 1;
    Some(end)
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
        let (start, generation) = self.start(prefix, after, at);
        let mut it = self.db.raw_iterator_cf_opt(self.cf(), in_order(past(prefix)));
        it.seek(&start);
        let mut rows = Vec::new();
        // The dead rows stepped over before the first live one, and the last of them.
        let (mut skipped, mut last_dead) = (Skipped::default(), None);
        let mut row: Option<RowRead> = None;
        while rows.len() < limit {
            let key = it.key().filter(|k| k.starts_with(prefix) && k.len() >= prefix.len() + 8);
            if let Some(done) = row.take_if(|r| key.is_none_or(|k| k[..k.len() - 8] != r.key[..])) {
                match done.value {
                    Some(v) => rows.push((done.key, v)),
                    None if rows.is_empty() => {
                        skipped.add(&done.skipped);
                        last_dead = Some(done.key);
                    }
                    None => {}
                }
                continue;
            }
            let Some(k) = key else { break };
            let rev = revision_of(k);
            let r = row.get_or_insert_with(|| RowRead::new(&k[..k.len() - 8]));
            r.skipped.versions += 1;
            r.skipped.newer |= rev > at;
            if rev <= at {
                r.value = it.value().and_then(row_of);
            }
            it.next();
        }
        if let Err(e) = it.status() {
            panic!("the cold rows cannot be read: {e}");
        }
        // A floor where the first live row is, or past the last dead one when none is.
        let floor = rows.first().map(|(r, _)| r.clone()).or_else(|| last_dead.map(|r| [&r[..], &[0xff; 9]].concat()));
        if let (Some(floor), Some(generation)) = (floor, generation) {
            if !skipped.newer && skipped.versions >= self.floor_after {
                self.leave_floor(prefix, floor, at, generation);
            }
        }
        rows
    }
}

/// A row a scan is reading: its key, its newest version at or before the scan's revision
/// (versions ascend), and its versions.
struct RowRead {
    key: Vec<u8>,
    value: Option<Vec<u8>>,
    skipped: Skipped,
}

impl RowRead {
    fn new(key: &[u8]) -> Self {
        RowRead { key: key.to_vec(), value: None, skipped: Skipped::default() }
    }
}

impl Skipped {
    fn add(&mut self, row: &Skipped) {
        self.versions += row.versions;
        self.newer |= row.newer;
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
/// a garbage row at or below it names, all at once. Returns how many versions and prefixes went.
#[cfg(test)]
pub(crate) fn purge(db: &DB, horizon: u64) -> io::Result<u64> {
    let (mut purge, mut dropped) = (Purge::default(), 0);
    while let Some(n) = purge.step(db, horizon)? {
        dropped += n;
    }
    Ok(dropped)
}

/// A purge in steps ([`Purge::step`]), for a node to run in the background at its own pace: it
/// takes millions of garbage rows after retention, and run in one go inside a snapshot's build
/// it held a core for minutes, and the build with it.
///
/// The batches go without the WAL, and the family is flushed once a purge has nothing left:
/// a purge of millions of versions would fill the WAL many times over in a minute, and each
/// fill forces a flush of the families it holds, the log's among them. A batch lost to a crash
/// before that flush leaves its garbage rows, and the next purge drops their versions again.
/// The flush also brings the deletions to the tables now, not when the memtable next fills (a
/// quiet cluster may never fill it): tables they crowd are compacted ([`tune`]).
pub(crate) struct Purge {
    /// Where the next batch starts: just after the last garbage row read. Garbage rows sort by
    /// revision and a horizon only rises, so everything below it is done, also for a later
    /// purge to a higher horizon.
    from: Vec<u8>,
    /// Batches written since the last flush.
    unflushed: bool,
}

impl Default for Purge {
    fn default() -> Self {
        Purge { from: vec![GARBAGE], unflushed: false }
    }
}

impl Purge {
    /// One batch of at most [`PURGE_BATCH`] garbage rows at or below `horizon`: the versions
    /// and prefixes it dropped, or `None` once nothing is left below the horizon (the family
    /// flushed by then).
    pub(crate) fn step(&mut self, db: &DB, horizon: u64) -> io::Result<Option<u64>> {
        let cf = db.cf_handle(CF_COLD).expect("column families are created at open");
        let end = garbage(horizon.saturating_add(1), 0, &[]);
        let mut dropped = 0;
        let (batch, seen, next) = purge_batch(db, cf, &self.from, &end, &mut dropped)?;
        if seen == 0 {
            if self.unflushed {
                db.flush_cf(cf).map_err(io::Error::other)?;
                self.unflushed = false;
            }
            return Ok(None);
        }
        db.write_opt(batch, &crate::state_machine::unlogged()).map_err(io::Error::other)?;
        (self.from, self.unflushed) = (next, true);
        Ok(Some(dropped))
    }
}

/// One batch of [`Purge::step`]: the deletions for at most [`PURGE_BATCH`] garbage rows from `from`
/// below `end`, how many it read, and where the next batch starts — just after the last row
/// read, not at the first garbage row again: the rows a batch deleted stay in the family as
/// deletions until a compaction passes them, and a scan from the start would step over all of
/// them again, each batch more than the last.
fn purge_batch(
    db: &DB,
    cf: &rocksdb::ColumnFamily,
    from: &[u8],
    end: &[u8],
    dropped: &mut u64,
) -> io::Result<(WriteBatch, usize, Vec<u8>)> {
    let mut batch = WriteBatch::default();
    let mut it = db.raw_iterator_cf_opt(cf, in_order(Some(end.to_vec())));
    // Every row kind sorts below the garbage rows.
    let mut versions = db.raw_iterator_cf_opt(cf, in_order(Some(vec![GARBAGE])));
    it.seek(from);
    let (mut seen, mut next) = (0, from.to_vec());
    while let Some(g) = it.key().filter(|g| *g < end).map(<[u8]>::to_vec) {
        if seen == PURGE_BATCH {
            break;
        }
        let (revision, kind, key) = (u64::from_be_bytes(g[1..9].try_into().expect("8 bytes")), g[9], &g[10..]);
        if kind == 1 {
            // Every row kind sorts below 0xff.
            batch.delete_range_cf(cf, key, [key, &[0xff][..]].concat().as_slice());
            *dropped += 1;
        } else {
            *dropped += drop_versions(&mut versions, cf, &mut batch, key, revision);
        }
        batch.delete_cf(cf, &g);
        seen += 1;
        // The least key after `g`.
        next = [&g[..], &[0u8][..]].concat();
        it.next();
    }
    it.status().map_err(io::Error::other)?;
    Ok((batch, seen, next))
}

/// Deletes `key`'s versions older than `revision`, and the one at it if it is a deletion
/// (`versions`: an iterator over the cold family, moved here).
fn drop_versions(
    versions: &mut rocksdb::DBRawIterator<'_>,
    cf: &rocksdb::ColumnFamily,
    batch: &mut WriteBatch,
    key: &[u8],
    revision: u64,
) -> u64 {
    versions.seek(versioned(key, 0));
    let mut n = 0;
    while let Some(k) = versions.key().filter(|k| k.len() == key.len() + 8 && k.starts_with(key)) {
        let rev = revision_of(k);
        let deletion = versions.value() == Some(&[0u8][..]);
        if rev < revision || (rev == revision && deletion) {
            batch.delete_cf(cf, k);
            n += 1;
        }
        if rev >= revision {
            break;
        }
        versions.next();
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use writ_api::cold::PendingRow;

    fn row(revision: u64, value: Option<&[u8]>, replaces: bool) -> PendingRow {
        PendingRow { revision, value: value.map(<[u8]>::to_vec), replaces }
    }

    fn versions(db: &DB) -> usize {
        db.iterator_cf_opt(db.cf_handle(CF_COLD).unwrap(), in_order(None), rocksdb::IteratorMode::Start).count()
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
            let _writing = store.write(&mut batch, ColdWrites { rows, dropped });
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

        // One purge goes on through rising horizons, as a node's does from snapshot to snapshot.
        let mut purge = Purge::default();
        let mut purge_to = |horizon| {
            let mut dropped = 0;
            while let Some(n) = purge.step(&db, horizon).unwrap() {
                dropped += n;
            }
            dropped
        };
        // Below the replacement's revision nothing may go: a replay from 8 still reads a1, b1.
        assert_eq!(purge_to(8), 0);
        assert_eq!(store.get(&a, 8).as_deref(), Some(&b"a1"[..]));
        // At it, the older versions and the deletion go; what is read at 9 on stays.
        assert_eq!(purge_to(9), 3);
        assert_eq!((store.get(&a, 8), store.get(&a, 9).as_deref()), (None, Some(&b"a2"[..])));
        assert_eq!(versions(&db), 1, "a2 alone, no garbage row");

        put(vec![], vec![(12, prefix.clone())]);
        assert_eq!(purge_to(11), 0);
        assert_eq!(store.get(&a, 11).as_deref(), Some(&b"a2"[..]));
        purge_to(12);
        assert_eq!(versions(&db), 0, "the dropped tenant's rows and the garbage row are gone");
    }

    /// A token's record read through a state whose rows are in the store is the record as of
    /// the state: read (and kept as read) before it exists and before its revocation, read
    /// again after the apply that issued or revoked it wrote the row, it is the new record.
    #[test]
    fn a_token_record_read_again_after_its_row_is_written_is_the_new_one() {
        use writ_api::ledger::{Command, LedgerRequest};
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(crate::open_db(dir.path()).unwrap());
        let store = Arc::new(RocksCold::new(db.clone()));
        let mut state = writ_api::state::LedgerState::default();
        state.cold.attach(store.clone());
        // What a node's apply does with each entry, under the state's lock: execute, then write
        // the rows it took to the store.
        let apply = |state: &mut writ_api::state::LedgerState, command: Command| {
            let req = LedgerRequest { stamp_ms: 1_000, trace_id: "tr".into(), command: command.into() };
            let (outcome, _) = state.execute(&req);
            assert!(matches!(outcome, writ_api::ledger::Outcome::Applied { .. }), "{outcome:?}");
            let mut batch = WriteBatch::default();
            let _writing = store.write(&mut batch, state.cold.take_writes());
            db.write(batch).unwrap();
        };
        apply(&mut state, Command::CreateTenant { tenant_id: "t-1".into(), name: "acme".into(), display_name: None });
        let spec = writ_api::principal::PrincipalSpecV1 {
            principal_id: "p-1".into(),
            name: "agent".into(),
            kind: writ_api::principal::PrincipalKind::Agent,
            preset: None,
            scopes: ["ops:read".to_string()].into_iter().collect(),
            metadata: Default::default(),
        };
        apply(&mut state, Command::CreatePrincipal { tenant_id: "t-1".into(), spec });
        assert!(state.token("t-1", "j-1").is_none(), "read (and kept) before it exists");
        let request = writ_api::token::TokenRequestV1 {
            jti: "j-1".into(),
            principal_id: "p-1".into(),
            scopes: Default::default(),
            ttl_s: 600,
            parent_jti: None,
        };
        apply(&mut state, Command::IssueToken { tenant_id: "t-1".into(), request });
        let issued = state.token("t-1", "j-1").expect("issued");
        assert_eq!((issued.revoked_at_ms, state.token("t-1", "j-1").unwrap().revoked_at_ms), (None, None));
        apply(&mut state, Command::RevokeToken { tenant_id: "t-1".into(), jti: "j-1".into() });
        assert!(state.token("t-1", "j-1").is_some_and(|t| t.revoked_at_ms.is_some()), "the revocation is read");
    }

    /// A tenant's rows of one kind: keys `0..n` under it (big-endian, so they sort by number).
    fn kind_rows(n: u8) -> (Vec<u8>, Vec<Vec<u8>>) {
        many_rows(u64::from(n))
    }

    fn many_rows(n: u64) -> (Vec<u8>, Vec<Vec<u8>>) {
        let kind = [&writ_api::cold::tenant_prefix("t", 1)[..], b"f"].concat();
        let keys = (0..n).map(|i| [&kind[..], &i.to_be_bytes()[..], b"\x00\x01x"].concat()).collect();
        (kind, keys)
    }

    /// A purge reads each garbage row once: a batch starts after the rows the one before deleted
    /// (deletions until a compaction passes them), not at the first garbage row again, which
    /// stepped over every deletion of the batches before, each batch more.
    #[test]
    fn a_purge_steps_over_none_of_the_garbage_its_batches_deleted() {
        use rocksdb::perf::{set_perf_stats, PerfContext, PerfMetric, PerfStatsLevel};
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(crate::open_db(dir.path()).unwrap());
        let store = RocksCold::new(db.clone());
        let n = 3 * PURGE_BATCH as u64;
        let (_, keys) = many_rows(n);
        commit(&store, keys.iter().map(|k| (k.clone(), row(1, Some(b""), false))).collect());
        commit(&store, keys.iter().map(|k| (k.clone(), row(2, Some(b"2"), true))).collect());
        // Counted for this thread, which runs the purge.
        set_perf_stats(PerfStatsLevel::EnableCount);
        let mut perf = PerfContext::default();
        perf.reset();
        let dropped = purge(&db, 2).unwrap();
        let skipped = perf.metric(PerfMetric::InternalDeleteSkippedCount);
        set_perf_stats(PerfStatsLevel::Disable);
        assert_eq!(dropped, n, "every row's first version went");
        assert_eq!(skipped, 0, "deletions stepped over");
        assert_eq!(versions(&db), keys.len(), "the second versions alone, no garbage row");
    }

    /// A scan stops where its kind's rows end: a look at a kind with nothing left once stepped
    /// over every deletion a purge had left in the kinds after it (a leader's retention look,
    /// every five seconds, held a core for most of a second after a snapshot's purge).
    #[test]
    fn a_scan_steps_over_no_deletion_past_its_kind() {
        use rocksdb::perf::{set_perf_stats, PerfContext, PerfMetric, PerfStatsLevel};
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(crate::open_db(dir.path()).unwrap());
        let store = RocksCold::new(db.clone());
        let (_, keys) = many_rows(1000);
        commit(&store, keys.iter().map(|k| (k.clone(), row(1, Some(b""), false))).collect());
        // Every version deleted, as a purge deletes them.
        let mut batch = WriteBatch::default();
        for key in &keys {
            batch.delete_cf(store.cf(), versioned(key, 1));
        }
        db.write(batch).unwrap();
        // A kind that sorts before theirs, with no rows.
        let attention = [&writ_api::cold::tenant_prefix("t", 1)[..], b"a"].concat();
        set_perf_stats(PerfStatsLevel::EnableCount);
        let mut perf = PerfContext::default();
        perf.reset();
        let rows = store.scan(&attention, None, 2, 1);
        let skipped = perf.metric(PerfMetric::InternalDeleteSkippedCount);
        set_perf_stats(PerfStatsLevel::Disable);
        assert!(rows.is_empty());
        assert_eq!(skipped, 0, "deletions stepped over");
        assert_eq!(past(&[1, 0xff, 0xff]), Some(vec![2]));
        assert_eq!(past(&[0xff]), None);
    }

    /// A purge writes nothing to the WAL the log's appends sync (a purge of millions of versions
    /// would fill it many times over), and its deletions are in the tables when it returns.
    #[test]
    fn a_purge_leaves_the_wal_as_it_found_it_and_its_deletions_in_tables() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(crate::open_db(dir.path()).unwrap());
        let store = RocksCold::new(db.clone());
        let (_, keys) = many_rows(2 * PURGE_BATCH as u64);
        commit(&store, keys.iter().map(|k| (k.clone(), row(1, Some(b""), false))).collect());
        commit(&store, keys.iter().map(|k| (k.clone(), row(2, Some(b"2"), true))).collect());
        // A log entry not yet flushed keeps the current WAL file alive through the purge's flush.
        db.put_cf(db.cf_handle(crate::CF_LOGS).unwrap(), b"entry", b"x").unwrap();
        let wal = || -> u64 {
            let logs = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path());
            logs.filter(|p| p.extension().is_some_and(|x| x == "log")).map(|p| p.metadata().unwrap().len()).sum()
        };
        let before = wal();
        assert_eq!(purge(&db, 2).unwrap(), keys.len() as u64);
        assert_eq!(wal(), before, "WAL bytes written by the purge");
        let cf = db.cf_handle(CF_COLD).unwrap();
        assert_eq!(db.property_int_value_cf(cf, "rocksdb.num-entries-active-mem-table").unwrap(), Some(0));
        assert_eq!(versions(&db), keys.len(), "the second versions alone, no garbage row");
    }

    fn commit(store: &RocksCold, rows: Vec<(Vec<u8>, PendingRow)>) {
        store.commit(ColdWrites { rows: rows.into_iter().collect(), dropped: vec![] }).unwrap();
    }

    fn floor(store: &RocksCold, kind: &[u8]) -> Option<(Vec<u8>, u64)> {
        store.floors().by_kind.get(kind).map(|f| (f.start.clone(), f.at))
    }

    /// A store of 100 rows of one kind written at revision 1, the oldest 80 deleted at
    /// revision 2 (retention): 160 dead versions before row 80.
    fn retired() -> (tempfile::TempDir, RocksCold, Vec<u8>, Vec<Vec<u8>>) {
        let dir = tempfile::tempdir().unwrap();
        let store = RocksCold::new(Arc::new(crate::open_db(dir.path()).unwrap()));
        let (kind, keys) = kind_rows(100);
        commit(&store, keys.iter().map(|k| (k.clone(), row(1, Some(b""), false))).collect());
        commit(&store, keys[..80].iter().map(|k| (k.clone(), row(2, None, true))).collect());
        (dir, store, kind, keys)
    }

    /// A scan that stepped over many dead rows leaves a floor at the first live one; later
    /// scans start there and read what a store without floors reads, a row written below the
    /// floor moves it down, and a scan as of a revision before the floor's ignores it.
    #[test]
    fn a_scan_over_dead_rows_leaves_a_floor_that_later_writes_move_down() {
        let (_dir, store, kind, keys) = retired();
        assert_eq!(store.scan(&kind, None, 2, 1), [(keys[80].clone(), vec![])]);
        assert_eq!(floor(&store, &kind), Some((keys[80].clone(), 2)));
        // A replay as of revision 1 reads the deleted rows: the floor is not as old.
        assert_eq!(store.scan(&kind, None, 1, 1), [(keys[0].clone(), vec![])]);
        // A row written live below the floor: the floor moves down to it before it commits.
        commit(&store, vec![(keys[5].clone(), row(3, Some(b"again"), false))]);
        assert_eq!(floor(&store, &kind), Some((keys[5].clone(), 2)));
        assert_eq!(store.scan(&kind, None, 3, 2), [(keys[5].clone(), b"again".to_vec()), (keys[80].clone(), vec![])]);
        // Nothing to step over from the floor on: the floor stays where it is.
        assert_eq!(floor(&store, &kind), Some((keys[5].clone(), 2)));
        assert_eq!(store.scan(&kind, None, 3, 100), RocksCold::new(store.db.clone()).scan(&kind, None, 3, 100));
    }

    /// No floor is left by a scan that overlaps a write under way, nor over dead rows that
    /// have a version newer than the scan's revision (a row a later read may find live).
    #[test]
    fn no_floor_is_left_over_a_write_under_way_or_rows_newer_than_the_scan() {
        let (_dir, store, kind, keys) = retired();
        let mut batch = WriteBatch::default();
        let writing = store.write(&mut batch, ColdWrites::default());
        assert_eq!(store.scan(&kind, None, 2, 1), [(keys[80].clone(), vec![])]);
        assert_eq!(floor(&store, &kind), None, "a write was under way");
        drop(writing);
        // Row 3 live again at revision 4, read as of revision 2 (a replay with the store ahead).
        commit(&store, vec![(keys[3].clone(), row(4, Some(b"back"), true))]);
        assert_eq!(store.scan(&kind, None, 2, 1), [(keys[80].clone(), vec![])]);
        assert_eq!(floor(&store, &kind), None, "row 3 has a version after revision 2");
        assert_eq!(store.scan(&kind, None, 4, 1), [(keys[3].clone(), b"back".to_vec())]);
    }

    fn step() -> impl Strategy<Value = (u8, Option<u8>, u8, u8)> {
        // (row, value: None deletes, how far back a scan reads, its limit)
        (0u8..40, proptest::option::weighted(0.3, 0u8..3), 0u8..3, 1u8..6)
    }

    proptest! {
        /// Whatever rows are written, deleted and written again, a store that leaves floors
        /// reads, as of any revision still readable, what one without floors reads.
        #[test]
        fn floors_never_change_what_a_scan_reads(steps in proptest::collection::vec(step(), 1..120)) {
            let dir = tempfile::tempdir().unwrap();
            let db = Arc::new(crate::open_db(dir.path()).unwrap());
            let store = RocksCold { floor_after: 1, ..RocksCold::new(db.clone()) };
            // Never steps over enough to leave one: the store as it read before floors.
            let plain = RocksCold { floor_after: usize::MAX, ..RocksCold::new(db.clone()) };
            let (kind, keys) = kind_rows(40);
            for (revision, (i, value, back, limit)) in (1u64..).zip(steps) {
                let key = keys[usize::from(i)].clone();
                commit(&store, vec![(key, row(revision, value.map(|v| [v]).as_ref().map(|v| &v[..]), true))]);
                let at = revision.saturating_sub(u64::from(back));
                let limit = usize::from(limit);
                prop_assert_eq!(store.scan(&kind, None, at, limit), plain.scan(&kind, None, at, limit));
                let after = Some(&keys[usize::from(i) / 2][..]);
                prop_assert_eq!(store.scan(&kind, after, at, limit), plain.scan(&kind, after, at, limit));
            }
        }
    }
}

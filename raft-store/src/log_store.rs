//! Raft log storage on RocksDB with group commit, written off the Raft core.
//!
//! `append` only puts its entries in memory ([`EntryCache`]), where they are readable at once,
//! and queues them for one writer thread. The writer drains everything queued so far, writes it
//! to RocksDB in one batch, issues a single WAL sync (`flush_wal(true)`) that covers it, and only
//! then reports those appends flushed: an append is never acknowledged before it is durable, and
//! one fsync serves a whole batch. Openraft calls `append` (and `save_committed`) on its core
//! task, which also times elections and sends heartbeats: a RocksDB write there waits behind
//! whatever holds RocksDB's write path (a purge's batches, a memtable switch), and a core held
//! past the election timeout costs the cluster its leader. Entries leave the cache only once
//! written, so every entry is always in the cache, in RocksDB, or both; truncation and the log's
//! state wait for the writer to catch up first ([`LogStore::written`]). A purge is the writer's
//! own: queued behind the writes before it, written in their batch.
//!
//! The newest entries also stay in memory after they are written (at most
//! [`ENTRY_CACHE_BYTES`]): a leader reads each entry again for every follower's replication and
//! for its own apply, and those reads come from the cache instead of a RocksDB read, a checksum
//! and a decode each. The cache keeps each entry's stored bytes beside it, and the transport
//! copies them into its appends ([`LogBytes`]) instead of encoding every entry again for every
//! follower.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use openraft::alias::{EntryOf, LogIdOf, VoteOf};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::{LogState, OptionalSend, RaftLogReader};
use rocksdb::{Direction, IteratorMode, WriteBatch, WriteOptions, DB};

use crate::codec::{checked_decode, checked_encode, CHECKSUM_BYTES};
use crate::{TypeConfig, CF_LOGS, CF_META};

const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";

/// Memory the newest entries may take for re-reads (replication, apply): each counts twice its
/// encoded size, once decoded and once as its stored bytes.
pub const ENTRY_CACHE_BYTES: usize = 32 * 1024 * 1024;

/// The newest appended entries by index — a contiguous run ending at the last appended one —
/// each with its stored bytes ([`checked_encode`]), at most [`ENTRY_CACHE_BYTES`] in all of
/// those already written: entries not yet in RocksDB stay whatever their size.
struct EntryCache {
    entries: BTreeMap<u64, (EntryOf<TypeConfig>, Vec<u8>)>,
    bytes: usize,
    /// The entries at this index and after are not yet written to RocksDB (`u64::MAX`: none).
    unwritten_from: u64,
}

impl Default for EntryCache {
    fn default() -> Self {
        EntryCache { entries: BTreeMap::new(), bytes: 0, unwritten_from: u64::MAX }
    }
}

/// What the cache may hold, counted as for [`ENTRY_CACHE_BYTES`], before an append waits for the
/// writer: a bound on the entries not yet written.
const UNWRITTEN_BYTES_MAX: usize = 2 * ENTRY_CACHE_BYTES;

/// What an entry and its stored bytes count against [`ENTRY_CACHE_BYTES`].
fn cached_size(stored: &[u8]) -> usize {
    2 * stored.len()
}

impl EntryCache {
    fn insert(&mut self, entry: EntryOf<TypeConfig>, stored: Vec<u8>) {
        let index = entry.index();
        // An append follows the last entry, or replaces a truncated tail: keep it contiguous.
        if self.entries.last_key_value().is_some_and(|(last, _)| *last + 1 != index) {
            self.clear_from(index);
            if self.entries.last_key_value().is_some_and(|(last, _)| *last + 1 != index) {
                self.clear_from(0);
            }
        }
        self.bytes += cached_size(&stored);
        self.entries.insert(index, (entry, stored));
        self.unwritten_from = self.unwritten_from.min(index);
        self.evict();
    }

    /// Drops the oldest written entries while the cache is over its bound.
    fn evict(&mut self) {
        while self.bytes > ENTRY_CACHE_BYTES {
            match self.entries.first_entry() {
                Some(oldest) if *oldest.key() < self.unwritten_from => {
                    self.bytes -= cached_size(&oldest.remove().1);
                }
                _ => break,
            }
        }
    }

    /// Notes the entries up to `last` written (they may leave the cache from now on).
    fn written_upto(&mut self, last: u64) {
        if self.unwritten_from <= last {
            self.unwritten_from = last.saturating_add(1);
        }
        self.evict();
    }

    /// Forgets the entries at `from` and after.
    fn clear_from(&mut self, from: u64) {
        for (_, (_, stored)) in self.entries.split_off(&from) {
            self.bytes -= cached_size(&stored);
        }
    }

    /// Forgets the entries up to `upto`.
    fn clear_upto(&mut self, upto: u64) {
        let kept = self.entries.split_off(&upto.saturating_add(1));
        for (_, (_, stored)) in std::mem::replace(&mut self.entries, kept) {
            self.bytes -= cached_size(&stored);
        }
    }

    /// The cached part of `range` (which starts at `start`): its entries from the first cached
    /// index on, and that index — the entries of `range` below it are in RocksDB, since entries
    /// leave the cache only once written.
    fn cached_part(&self, start: u64, range: &impl RangeBounds<u64>) -> (Vec<EntryOf<TypeConfig>>, u64) {
        let Some(first) = self.entries.first_key_value().map(|(index, _)| *index) else {
            return (Vec::new(), u64::MAX);
        };
        let from = start.max(first);
        let part = self.entries.range(from..).take_while(|(i, _)| range.contains(i)).map(|(_, (e, _))| e.clone());
        (part.collect(), from)
    }

    /// `head`, the payload ([`writ_api::encode`]'s bytes) of each entry of `ids`, and `tail`,
    /// in one buffer of their exact size, when the cache holds every entry under that log id.
    fn encoded_between(&self, head: &[u8], ids: &[LogIdOf<TypeConfig>], tail: &[u8]) -> Option<Vec<u8>> {
        let mut payloads = Vec::with_capacity(ids.len());
        for id in ids {
            match self.entries.get(&id.index()) {
                Some((entry, stored)) if entry.log_id() == *id => payloads.push(&stored[CHECKSUM_BYTES..]),
                _ => return None,
            }
        }
        let mut out = Vec::with_capacity(head.len() + payloads.iter().map(|p| p.len()).sum::<usize>() + tail.len());
        out.extend_from_slice(head);
        payloads.into_iter().for_each(|p| out.extend_from_slice(p));
        out.extend_from_slice(tail);
        Some(out)
    }
}

/// The log's cached entry encodings, shared with the transport: an entry with a given log id is
/// the same on every member, so its bytes as appended here are its bytes in any append.
#[derive(Clone)]
pub struct LogBytes {
    cache: Arc<Mutex<EntryCache>>,
}

impl LogBytes {
    /// `head`, the encoding ([`writ_api::encode`]) of each entry of `ids` one after another,
    /// and `tail`, in one buffer, when the cache still holds all of those entries; `None` if not.
    pub fn encoded_between(&self, head: &[u8], ids: &[LogIdOf<TypeConfig>], tail: &[u8]) -> Option<Vec<u8>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).encoded_between(head, ids, tail)
    }
}

/// The log store handed to openraft. Cheap to clone; all clones share the DB and the writer.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<DB>,
    writer: Arc<Writer>,
    stats: Arc<FlushStats>,
    cache: Arc<Mutex<EntryCache>>,
}

/// What the writer thread does, in the order the store asked.
enum LogWrite {
    /// Write the cached entries `first..=last`, and report them flushed after the WAL sync.
    Entries { first: u64, last: u64, flushed: IOFlushed<TypeConfig> },
    /// Write the committed log id's stored bytes (it need not be durable).
    Committed(Vec<u8>),
    /// Purge the entries up to `upto`: record the purge point (`stored`: the purged log id's
    /// stored bytes; it need not be durable) and delete them, in the group's batch.
    Purge { upto: u64, stored: Vec<u8> },
    /// Answer once everything asked before is written.
    Written(mpsc::SyncSender<()>),
}

/// The writer thread's handle. When the last `LogStore` clone goes, the channel closes and the
/// thread is joined, so the thread's reference to the DB is released before anyone closes it
/// (RocksDB aborts the process if it is torn down while another thread still uses it).
struct Writer {
    tx: Option<mpsc::Sender<LogWrite>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Held by the writer while it writes a group: a test holds it to stand for a RocksDB write
    /// path that is slow to answer.
    #[cfg(test)]
    writing: Arc<Mutex<()>>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Counters of the group commit: how many appends were made durable by how many WAL syncs.
#[derive(Debug, Default)]
pub struct FlushStats {
    pub appends: AtomicU64,
    pub syncs: AtomicU64,
    /// Bytes of the entries appended since open (what the log-size snapshot trigger counts).
    pub bytes: AtomicU64,
}

impl LogStore {
    pub(crate) fn new(db: Arc<DB>) -> io::Result<Self> {
        let (tx, rx) = mpsc::channel::<LogWrite>();
        let stats = Arc::new(FlushStats::default());
        let cache: Arc<Mutex<EntryCache>> = Arc::default();
        let writing: Arc<Mutex<()>> = Arc::default();
        let thread = {
            let (db, stats, cache, writing) = (db.clone(), stats.clone(), cache.clone(), writing.clone());
            std::thread::Builder::new()
                .name("writ-log-writer".into())
                .spawn(move || write_loop(&db, &cache, &writing, rx, &stats))?
        };
        let writer = Writer {
            tx: Some(tx),
            thread: Some(thread),
            #[cfg(test)]
            writing,
        };
        Ok(LogStore { db, writer: Arc::new(writer), stats, cache })
    }

    /// The counters, shared: they stay readable after the store is handed to openraft.
    pub fn stats(&self) -> Arc<FlushStats> {
        self.stats.clone()
    }

    /// The cached entries' encodings, for the transport's appends.
    pub fn log_bytes(&self) -> LogBytes {
        LogBytes { cache: self.cache.clone() }
    }

    /// Group-commit counters since open.
    pub fn flush_stats(&self) -> (u64, u64) {
        (self.stats.appends.load(Ordering::Relaxed), self.stats.syncs.load(Ordering::Relaxed))
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, EntryCache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cf(&self, name: &str) -> &rocksdb::ColumnFamily {
        self.db.cf_handle(name).expect("column families are created at open")
    }

    fn get_meta<T: serde::de::DeserializeOwned>(&self, key: &[u8]) -> io::Result<Option<T>> {
        match self.db.get_cf(self.cf(CF_META), key).map_err(io::Error::other)? {
            None => Ok(None),
            Some(bytes) => checked_decode(&bytes, "log meta").map(Some),
        }
    }

    fn put_meta<T: serde::Serialize>(&self, key: &[u8], value: &T, sync: bool) -> io::Result<()> {
        let mut opts = WriteOptions::default();
        opts.set_sync(sync);
        self.db.put_cf_opt(self.cf(CF_META), key, checked_encode(value)?, &opts).map_err(io::Error::other)
    }

    fn ask(&self, write: LogWrite) -> io::Result<()> {
        let tx = self.writer.tx.as_ref().ok_or_else(|| io::Error::other("log writer is shut down"))?;
        tx.send(write).map_err(|_| io::Error::other("log writer thread is gone"))
    }

    /// Waits until everything asked of the writer so far is in RocksDB: what reads RocksDB for
    /// the log's end, or deletes from it, must not race the writes queued before it.
    pub(crate) fn written(&self) -> io::Result<()> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.ask(LogWrite::Written(tx))?;
        rx.recv().map_err(|_| io::Error::other("log writer thread is gone"))
    }
}

/// The writer thread: one RocksDB batch and one WAL sync for every write queued meanwhile.
fn write_loop(
    db: &DB,
    cache: &Mutex<EntryCache>,
    writing: &Mutex<()>,
    rx: mpsc::Receiver<LogWrite>,
    stats: &FlushStats,
) {
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        group.extend(rx.try_iter());
        let _writing = writing.lock().unwrap_or_else(|e| e.into_inner());
        let (batch, last, purged) = group_batch(db, cache, &group);
        let mut flushed = Vec::new();
        let mut answers = Vec::new();
        for write in group {
            match write {
                LogWrite::Entries { flushed: cb, .. } => flushed.push(cb),
                LogWrite::Written(tx) => answers.push(tx),
                LogWrite::Committed(_) | LogWrite::Purge { .. } => {}
            }
        }
        let result = write_group(db, batch, !flushed.is_empty());
        match &result {
            Ok(()) => {
                let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
                last.into_iter().for_each(|last| cache.written_upto(last));
                purged.into_iter().for_each(|upto| cache.clear_upto(upto));
            }
            // The appends in the group are answered with it; a purge has no one waiting.
            Err(e) => tracing::error!(error = %e, "the Raft log's write failed"),
        }
        if !flushed.is_empty() {
            metrics::histogram!("writ_log_group_commit_appends").record(flushed.len() as f64);
            stats.appends.fetch_add(flushed.len() as u64, Ordering::Relaxed);
            stats.syncs.fetch_add(1, Ordering::Relaxed);
        }
        for cb in flushed {
            cb.io_completed(result.as_ref().map(|_| ()).map_err(|e| io::Error::other(e.to_string())));
        }
        for answer in answers {
            let _ = answer.send(());
        }
    }
}

/// The RocksDB batch of a group of writes, the last entry index it writes, and the last it
/// purges.
fn group_batch(db: &DB, cache: &Mutex<EntryCache>, group: &[LogWrite]) -> (WriteBatch, Option<u64>, Option<u64>) {
    let (logs, meta) = (db.cf_handle(CF_LOGS), db.cf_handle(CF_META));
    let (logs, meta) = (logs.expect("column families are created at open"), meta.expect("created at open"));
    let mut batch = WriteBatch::default();
    let (mut last, mut purged) = (None, None);
    let cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    for write in group {
        match write {
            LogWrite::Entries { first, last: l, .. } => {
                // Still cached: unwritten entries never leave, and truncation waits for the writer.
                for (index, (_, stored)) in cache.entries.range(*first..=*l) {
                    batch.put_cf(logs, index_key(*index), stored);
                }
                last = last.max(Some(*l));
            }
            LogWrite::Committed(bytes) => batch.put_cf(meta, KEY_COMMITTED, bytes),
            LogWrite::Purge { upto, stored } => {
                // The purge point first: entries at or below it are ignored from then on.
                batch.put_cf(meta, KEY_LAST_PURGED, stored);
                batch.delete_range_cf(logs, index_key(0), index_key(upto + 1));
                purged = purged.max(Some(*upto));
            }
            LogWrite::Written(_) => {}
        }
    }
    (batch, last, purged)
}

/// Writes a group's batch, then syncs the WAL when appends wait to be durable.
fn write_group(db: &DB, batch: WriteBatch, sync: bool) -> Result<(), rocksdb::Error> {
    if !batch.is_empty() {
        let started = std::time::Instant::now();
        db.write(batch)?;
        metrics::histogram!("writ_log_write_seconds").record(started.elapsed().as_secs_f64());
    }
    if !sync {
        return Ok(());
    }
    let synced = std::time::Instant::now();
    let result = db.flush_wal(true);
    metrics::histogram!("writ_log_sync_seconds").record(synced.elapsed().as_secs_f64());
    result
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn key_index(key: &[u8]) -> io::Result<u64> {
    let bytes: [u8; 8] =
        key.try_into().map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "corrupt log key: not 8 bytes"))?;
    Ok(u64::from_be_bytes(bytes))
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<EntryOf<TypeConfig>>, io::Error> {
        let start = match range.start_bound() {
            Bound::Included(x) => *x,
            Bound::Excluded(x) => x.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let (cached, cached_from) = self.cache().cached_part(start, &range);
        if cached_from == start {
            return Ok(cached);
        }
        let mut out = Vec::new();
        let from = index_key(start);
        for item in self.db.iterator_cf(self.cf(CF_LOGS), IteratorMode::From(&from, Direction::Forward)) {
            let (key, value) = item.map_err(io::Error::other)?;
            let index = key_index(&key)?;
            if index >= cached_from || !range.contains(&index) {
                break;
            }
            let entry: EntryOf<TypeConfig> = checked_decode(&value, "log entry")?;
            if entry.index() != index {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("corrupt log: key {index} holds entry {}", entry.index()),
                ));
            }
            out.push(entry);
        }
        out.extend(cached);
        Ok(out)
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<TypeConfig>>, io::Error> {
        self.get_meta(KEY_VOTE)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        self.written()?;
        let last_purged: Option<LogIdOf<TypeConfig>> = self.get_meta(KEY_LAST_PURGED)?;
        let last = match self.db.iterator_cf(self.cf(CF_LOGS), IteratorMode::End).next() {
            None => None,
            Some(item) => {
                let (_, value) = item.map_err(io::Error::other)?;
                let entry: EntryOf<TypeConfig> = checked_decode(&value, "log entry")?;
                Some(entry.log_id())
            }
        };
        Ok(LogState { last_log_id: last.or(last_purged), last_purged_log_id: last_purged })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &VoteOf<TypeConfig>) -> Result<(), io::Error> {
        // A vote must be durable before it is acted on, or a restarted node could vote twice.
        self.put_meta(KEY_VOTE, vote, true)
    }

    async fn save_committed(&mut self, committed: Option<LogIdOf<TypeConfig>>) -> Result<(), io::Error> {
        // Need not be durable: it only lets a restarted node re-apply sooner.
        self.ask(LogWrite::Committed(checked_encode(&committed)?))
    }

    async fn read_committed(&mut self) -> Result<Option<LogIdOf<TypeConfig>>, io::Error> {
        self.written()?;
        Ok(self.get_meta::<Option<LogIdOf<TypeConfig>>>(KEY_COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, flushed: IOFlushed<TypeConfig>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = EntryOf<TypeConfig>> + OptionalSend,
    {
        let mut appended = Vec::new();
        for entry in entries {
            let bytes = checked_encode(&entry)?;
            appended.push((entry, bytes));
        }
        let (Some(first), Some(last)) = (appended.first(), appended.last()) else {
            flushed.io_completed(Ok(()));
            return Ok(());
        };
        let (first, last) = (first.0.index(), last.0.index());
        let bytes: usize = appended.iter().map(|(_, stored)| stored.len()).sum();
        self.stats.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        // Readable from here on; written and synced by the writer.
        let backlog = {
            let mut cache = self.cache();
            for (entry, stored) in appended {
                cache.insert(entry, stored);
            }
            cache.bytes > UNWRITTEN_BYTES_MAX
        };
        self.ask(LogWrite::Entries { first, last, flushed })?;
        if backlog {
            // The writer is that far behind: wait for it rather than grow the cache further.
            self.written()?;
        }
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogIdOf<TypeConfig>>) -> Result<(), io::Error> {
        let from = last_log_id.map_or(0, |id| id.index() + 1);
        self.written()?;
        self.cache().clear_from(from);
        self.db.delete_range_cf(self.cf(CF_LOGS), index_key(from), index_key(u64::MAX)).map_err(io::Error::other)
    }

    /// Queues the purge for the writer, behind the writes asked before it, and returns: a purge
    /// follows each snapshot, when flushes and compactions hold RocksDB's write path, and the core
    /// that called it must not wait for them.
    async fn purge(&mut self, log_id: LogIdOf<TypeConfig>) -> Result<(), io::Error> {
        self.ask(LogWrite::Purge { upto: log_id.index(), stored: checked_encode(&log_id)? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64) -> EntryOf<TypeConfig> {
        openraft::testing::blank_ent::<TypeConfig>(1, 1, index)
    }

    fn indexes(c: &EntryCache, start: u64, range: impl RangeBounds<u64>) -> (Vec<u64>, u64) {
        let (part, from) = c.cached_part(start, &range);
        (part.iter().map(|e| e.index()).collect(), from)
    }

    /// Written entries, so that they may leave the cache.
    fn written(c: &mut EntryCache) {
        let last = c.entries.last_key_value().map_or(0, |(i, _)| *i);
        c.written_upto(last);
    }

    #[test]
    fn the_cache_answers_the_part_of_a_range_it_holds_and_stays_bounded() {
        let mut c = EntryCache::default();
        assert_eq!(indexes(&c, 1, 1..=3), (vec![], u64::MAX), "empty: all of it from RocksDB");
        for i in 5..=9 {
            c.insert(entry(i), vec![0; 5]);
        }
        assert_eq!(indexes(&c, 6, 6..=8), (vec![6, 7, 8], 6));
        assert_eq!(indexes(&c, 7, 7..), (vec![7, 8, 9], 7), "an open range ends at the last entry");
        assert_eq!(indexes(&c, 4, 4..=6), (vec![5, 6], 5), "index 4 is not cached: read it from RocksDB");
        assert_eq!(indexes(&c, 8, 8..=10), (vec![8, 9], 8));
        assert_eq!(indexes(&c, 8, 8..8), (vec![], 8));
        // A truncated tail is replaced; a gap (a snapshot installed) starts over.
        c.clear_from(8);
        c.insert(entry(8), vec![0; 5]);
        assert_eq!(indexes(&c, 5, 5..), (vec![5, 6, 7, 8], 5));
        c.insert(entry(20), vec![0; 5]);
        assert_eq!(indexes(&c, 20, 20..), (vec![20], 20));
        assert_eq!(c.bytes, 10);
        c.clear_upto(20);
        assert_eq!((c.entries.len(), c.bytes), (0, 0));
        // Bounded by bytes once written: the oldest go first.
        for i in 1..=5 {
            c.insert(entry(i), vec![0; ENTRY_CACHE_BYTES / 4]);
        }
        written(&mut c);
        assert_eq!(c.entries.keys().copied().collect::<Vec<_>>(), vec![4, 5]);
        assert!(c.bytes <= ENTRY_CACHE_BYTES);
    }

    /// An entry not yet written stays in the cache whatever the bound: it is readable nowhere else.
    #[test]
    fn entries_not_yet_written_stay_cached_over_the_bound() {
        let mut c = EntryCache::default();
        for i in 1..=5 {
            c.insert(entry(i), vec![0; ENTRY_CACHE_BYTES / 4]);
        }
        assert_eq!(c.entries.len(), 5, "nothing written: nothing leaves");
        c.written_upto(2);
        assert_eq!(c.entries.keys().copied().collect::<Vec<_>>(), vec![3, 4, 5], "only written ones leave");
        assert_eq!(c.unwritten_from, 3);
        written(&mut c);
        assert_eq!(c.entries.keys().copied().collect::<Vec<_>>(), vec![4, 5]);
    }

    /// An append returns, and its entries read back, while RocksDB's write path is held; they
    /// reach RocksDB, and are reported flushed, only once it answers.
    #[test]
    // Held across the appends on purpose: only the writer thread (not a task) waits for it.
    #[allow(clippy::await_holding_lock)]
    fn an_append_waits_for_no_rocksdb_write() {
        use openraft::type_config::TypeConfigExt;
        TypeConfig::run(async {
            let dir = tempfile::tempdir().unwrap();
            let (mut log, _sm) = crate::open(dir.path()).unwrap();
            let writing = log.writer.writing.clone();
            let held = writing.lock().unwrap();
            let (tx, mut rx) = TypeConfig::oneshot();
            log.append((1..=3).map(entry), IOFlushed::signal(tx)).await.unwrap();
            let read = log.try_get_log_entries(1..=3).await.unwrap();
            assert_eq!(read.iter().map(|e| e.index()).collect::<Vec<_>>(), vec![1, 2, 3]);
            assert!(log.db.get_cf(log.cf(CF_LOGS), index_key(1)).unwrap().is_none(), "written by the append itself");
            assert!(rx.try_recv().is_err(), "reported flushed before it was written");
            drop(held);
            rx.await.unwrap().unwrap();
            assert!(log.db.get_cf(log.cf(CF_LOGS), index_key(3)).unwrap().is_some());
            assert_eq!(log.get_log_state().await.unwrap().last_log_id.map(|l| l.index()), Some(3));
        });
    }

    /// A purge returns while RocksDB's write path is held; the purged entries leave RocksDB and
    /// the cache, and the log's state shows the purge point, once the writer has written it.
    #[test]
    #[allow(clippy::await_holding_lock)]
    fn a_purge_waits_for_no_rocksdb_write() {
        use openraft::type_config::TypeConfigExt;
        TypeConfig::run(async {
            let dir = tempfile::tempdir().unwrap();
            let (mut log, _sm) = crate::open(dir.path()).unwrap();
            log.append((1..=5).map(entry), IOFlushed::noop()).await.unwrap();
            log.written().unwrap();
            let writing = log.writer.writing.clone();
            let held = writing.lock().unwrap();
            log.purge(entry(3).log_id()).await.unwrap();
            assert!(log.db.get_cf(log.cf(CF_LOGS), index_key(3)).unwrap().is_some(), "purged by the call itself");
            drop(held);
            let state = log.get_log_state().await.unwrap();
            assert_eq!(state.last_purged_log_id.map(|l| l.index()), Some(3));
            assert_eq!(state.last_log_id.map(|l| l.index()), Some(5));
            assert!((1..=3).all(|i| log.db.get_cf(log.cf(CF_LOGS), index_key(i)).unwrap().is_none()));
            assert!(log.db.get_cf(log.cf(CF_LOGS), index_key(4)).unwrap().is_some());
            assert!(log.cache().entries.keys().all(|i| *i > 3), "the cache keeps no purged entry");
            let read = log.try_get_log_entries(4..=5).await.unwrap();
            assert_eq!(read.iter().map(|e| e.index()).collect::<Vec<_>>(), vec![4, 5]);
        });
    }

    #[test]
    fn cached_encodings_are_the_entries_encodings_under_their_log_ids() {
        let mut c = EntryCache::default();
        for i in 1..=3 {
            let e = entry(i);
            c.insert(e.clone(), checked_encode(&e).expect("encode"));
        }
        let ids: Vec<_> = (2..=3).map(|i| entry(i).log_id()).collect();
        let mut expected = b"head".to_vec();
        for i in 2..=3 {
            expected.extend(writ_api::encode(&entry(i)).expect("encode"));
        }
        expected.extend(b"tail");
        let out = c.encoded_between(b"head", &ids, b"tail").expect("cached");
        assert_eq!((out.len(), out.capacity()), (expected.len(), expected.len()));
        assert_eq!(out, expected);
        // Another term's entry at a cached index, or an index not cached.
        let other_term = openraft::testing::blank_ent::<TypeConfig>(2, 1, 3).log_id();
        for ids in [vec![ids[0], other_term], vec![entry(4).log_id()]] {
            assert_eq!(c.encoded_between(b"head", &ids, b"tail"), None);
        }
    }
}

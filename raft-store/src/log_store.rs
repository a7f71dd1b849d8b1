//! Raft log storage on RocksDB with group commit.
//!
//! `append` writes its batch to RocksDB without syncing and hands the flush callback to one
//! flusher thread. The flusher drains every callback queued so far, issues a single WAL sync
//! (`flush_wal(true)`) that covers all of their writes, and only then reports them flushed:
//! an append is never acknowledged before it is durable, and one fsync serves a whole batch.
//!
//! The newest entries also stay in memory ([`EntryCache`], at most [`ENTRY_CACHE_BYTES`]): a
//! leader reads each entry again for every follower's replication and for its own apply, and
//! those reads come from the cache instead of a RocksDB read, a checksum and a decode each.
//! The cache keeps each entry's stored bytes beside it, and the transport copies them into
//! its appends ([`LogBytes`]) instead of encoding every entry again for every follower.

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
/// each with its stored bytes ([`checked_encode`]), at most [`ENTRY_CACHE_BYTES`] in all.
#[derive(Default)]
struct EntryCache {
    entries: BTreeMap<u64, (EntryOf<TypeConfig>, Vec<u8>)>,
    bytes: usize,
}

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
        while self.bytes > ENTRY_CACHE_BYTES {
            let Some((_, (_, stored))) = self.entries.pop_first() else { break };
            self.bytes -= cached_size(&stored);
        }
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

    /// The entries of `range` when the cache holds all of it up to its end (or to the last
    /// entry, for an open range), else `None`.
    fn get(&self, start: u64, range: &impl RangeBounds<u64>) -> Option<Vec<EntryOf<TypeConfig>>> {
        let (first, last) = (*self.entries.first_key_value()?.0, *self.entries.last_key_value()?.0);
        let end = match range.end_bound() {
            Bound::Included(x) => *x,
            Bound::Excluded(x) => x.checked_sub(1)?,
            Bound::Unbounded => last,
        };
        if start > end {
            return Some(Vec::new());
        }
        if start < first || end > last {
            return None;
        }
        Some(self.entries.range(start..=end).map(|(_, (e, _))| e.clone()).collect())
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

/// The log store handed to openraft. Cheap to clone; all clones share the DB and flusher.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<DB>,
    flusher: Arc<Flusher>,
    stats: Arc<FlushStats>,
    cache: Arc<Mutex<EntryCache>>,
}

/// The flusher thread's handle. When the last `LogStore` clone goes, the channel closes and the
/// thread is joined, so the thread's reference to the DB is released before anyone closes it
/// (RocksDB aborts the process if it is torn down while another thread still uses it).
struct Flusher {
    tx: Option<mpsc::Sender<IOFlushed<TypeConfig>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Flusher {
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
        let (tx, rx) = mpsc::channel::<IOFlushed<TypeConfig>>();
        let flush_db = db.clone();
        let stats = Arc::new(FlushStats::default());
        let flush_stats = stats.clone();
        let thread = std::thread::Builder::new()
            .name("writ-log-flusher".into())
            .spawn(move || group_commit_loop(&flush_db, rx, &flush_stats))?;
        Ok(LogStore {
            db,
            flusher: Arc::new(Flusher { tx: Some(tx), thread: Some(thread) }),
            stats,
            cache: Default::default(),
        })
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
}

/// One fsync per batch of queued appends.
fn group_commit_loop(db: &Arc<DB>, rx: mpsc::Receiver<IOFlushed<TypeConfig>>, stats: &FlushStats) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        metrics::histogram!("writ_log_group_commit_appends").record(batch.len() as f64);
        let synced = std::time::Instant::now();
        let result = db.flush_wal(true);
        metrics::histogram!("writ_log_sync_seconds").record(synced.elapsed().as_secs_f64());
        stats.appends.fetch_add(batch.len() as u64, Ordering::Relaxed);
        stats.syncs.fetch_add(1, Ordering::Relaxed);
        for cb in batch {
            cb.io_completed(result.as_ref().map(|_| ()).map_err(|e| io::Error::other(e.to_string())));
        }
    }
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
        if let Some(cached) = self.cache().get(start, &range) {
            return Ok(cached);
        }
        let mut out = Vec::new();
        let from = index_key(start);
        for item in self.db.iterator_cf(self.cf(CF_LOGS), IteratorMode::From(&from, Direction::Forward)) {
            let (key, value) = item.map_err(io::Error::other)?;
            let index = key_index(&key)?;
            if !range.contains(&index) {
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
        Ok(out)
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<TypeConfig>>, io::Error> {
        self.get_meta(KEY_VOTE)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
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
        self.put_meta(KEY_COMMITTED, &committed, false)
    }

    async fn read_committed(&mut self) -> Result<Option<LogIdOf<TypeConfig>>, io::Error> {
        Ok(self.get_meta::<Option<LogIdOf<TypeConfig>>>(KEY_COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = EntryOf<TypeConfig>> + OptionalSend,
    {
        let mut batch = WriteBatch::default();
        let mut appended = Vec::new();
        for entry in entries {
            let bytes = checked_encode(&entry)?;
            batch.put_cf(self.cf(CF_LOGS), index_key(entry.index()), &bytes);
            appended.push((entry, bytes));
        }
        // Written (readable) now, durable when the flusher's next WAL sync completes.
        self.db.write(batch).map_err(io::Error::other)?;
        let bytes: usize = appended.iter().map(|(_, stored)| stored.len()).sum();
        self.stats.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        let mut cache = self.cache();
        for (entry, stored) in appended {
            cache.insert(entry, stored);
        }
        drop(cache);
        let tx = self.flusher.tx.as_ref().ok_or_else(|| io::Error::other("log flusher is shut down"))?;
        tx.send(callback).map_err(|_| io::Error::other("log flusher thread is gone"))
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogIdOf<TypeConfig>>) -> Result<(), io::Error> {
        let from = last_log_id.map_or(0, |id| id.index() + 1);
        self.cache().clear_from(from);
        self.db.delete_range_cf(self.cf(CF_LOGS), index_key(from), index_key(u64::MAX)).map_err(io::Error::other)
    }

    async fn purge(&mut self, log_id: LogIdOf<TypeConfig>) -> Result<(), io::Error> {
        // Record the purge point first: entries at or below it are ignored from then on.
        self.put_meta(KEY_LAST_PURGED, &log_id, false)?;
        self.cache().clear_upto(log_id.index());
        self.db.delete_range_cf(self.cf(CF_LOGS), index_key(0), index_key(log_id.index() + 1)).map_err(io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64) -> EntryOf<TypeConfig> {
        openraft::testing::blank_ent::<TypeConfig>(1, 1, index)
    }

    fn indexes(v: Option<Vec<EntryOf<TypeConfig>>>) -> Option<Vec<u64>> {
        v.map(|v| v.iter().map(|e| e.index()).collect())
    }

    #[test]
    fn the_cache_answers_only_ranges_it_holds_whole_and_stays_bounded() {
        let mut c = EntryCache::default();
        for i in 5..=9 {
            c.insert(entry(i), vec![0; 5]);
        }
        assert_eq!(indexes(c.get(6, &(6..=8))), Some(vec![6, 7, 8]));
        assert_eq!(indexes(c.get(7, &(7..))), Some(vec![7, 8, 9]), "an open range ends at the last entry");
        assert_eq!(indexes(c.get(4, &(4..=6))), None, "index 4 is not cached: read it from RocksDB");
        assert_eq!(indexes(c.get(8, &(8..=10))), None);
        assert_eq!(indexes(c.get(8, &(8..8))), Some(vec![]));
        // A truncated tail is replaced; a gap (a snapshot installed) starts over.
        c.clear_from(8);
        c.insert(entry(8), vec![0; 5]);
        assert_eq!(indexes(c.get(5, &(5..))), Some(vec![5, 6, 7, 8]));
        c.insert(entry(20), vec![0; 5]);
        assert_eq!(indexes(c.get(20, &(20..))), Some(vec![20]));
        assert_eq!(c.bytes, 10);
        c.clear_upto(20);
        assert_eq!((c.entries.len(), c.bytes), (0, 0));
        // Bounded by bytes: the oldest go first.
        for i in 1..=5 {
            c.insert(entry(i), vec![0; ENTRY_CACHE_BYTES / 4]);
        }
        assert_eq!(c.entries.keys().copied().collect::<Vec<_>>(), vec![4, 5]);
        assert!(c.bytes <= ENTRY_CACHE_BYTES);
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

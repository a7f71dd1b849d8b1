//! openraft storage on RocksDB for the Writ ledger: a group-committed log store and the
//! event-sourced state machine, both in one RocksDB instance with separate column families.
//!
//! Architecture invariant: this crate does no networking and knows nothing of HTTP.

mod audit_rows;
pub mod backup;
pub mod bulk;
mod codec;
pub mod cold;
pub mod log_stats;
pub mod log_store;
pub mod snapshot;
pub mod state_machine;

use std::io;
use std::path::Path;
use std::sync::Arc;

use rocksdb::{BlockBasedOptions, Cache, ColumnFamilyDescriptor, Options, DB, DEFAULT_COLUMN_FAMILY_NAME};

pub use log_store::{LogBytes, LogStore};
pub use snapshot::SnapshotHandle;
pub use state_machine::StateMachine;

openraft::declare_raft_types!(
    /// Raft type configuration of the Writ ledger.
    pub TypeConfig:
        D = writ_api::ledger::LedgerRequest,
        R = writ_api::ledger::Outcome,
        Node = openraft::BasicNode,
);

/// The Raft handle type used by nodes.
pub type Raft = openraft::Raft<TypeConfig, StateMachine>;

pub(crate) const CF_LOGS: &str = "logs";
pub(crate) const CF_META: &str = "meta";
pub(crate) const CF_EVENTS: &str = "events";
pub(crate) const CF_AUDIT: &str = "audit";
/// Evidence blobs by `writ_api::evidence::blob_key` (their records are in the state).
pub(crate) const CF_EVIDENCE: &str = "evidence";

/// Opens (creating if missing) the node's RocksDB under `dir/db` and snapshots under
/// `dir/snapshots`, returning the log store and the state machine that share it. A directory
/// restored from a backup starts from its seed state (`backup`).
pub fn open(dir: &Path) -> io::Result<(LogStore, StateMachine)> {
    let db = Arc::new(open_db(&dir.join("db"))?);
    let seed = backup::read_seed(dir)?;
    Ok((LogStore::new(db.clone())?, StateMachine::new(db, dir.join("snapshots"), seed)?))
}

/// Memory of all column families' memtables together: past it, RocksDB flushes one. Without
/// it each column family may hold two 64 MiB memtables, so what a node holds in memory grew
/// with how much audit, log and events it had written lately (issue 18's P4).
pub const MEMTABLE_BUDGET_BYTES: usize = 48 << 20;
/// One memtable of one column family.
const MEMTABLE_BYTES: usize = 16 << 20;
/// WAL kept on disk: past it, the column families whose data the oldest WAL file holds are
/// flushed so it can go. Without it one rarely written column family (`meta`) kept every WAL
/// file alive (a gigabyte after a million audit records), and a restart replayed all of it.
pub const WAL_BYTES_MAX: u64 = 128 << 20;
/// The block cache, one for all column families (RocksDB gives each its own 32 MiB otherwise).
/// It also holds the tables' index and filter blocks, which RocksDB otherwise keeps outside any
/// bound, growing with the data on disk (the audit trail, the cold rows).
pub const BLOCK_CACHE_BYTES: usize = 64 << 20;

/// The column families, in the order they are opened.
const COLUMN_FAMILIES: [&str; 7] =
    [DEFAULT_COLUMN_FAMILY_NAME, CF_LOGS, CF_META, CF_EVENTS, CF_AUDIT, CF_EVIDENCE, cold::CF_COLD];

/// An integer property's value in each column family that reports it.
fn per_cf(db: &DB, property: &str) -> Vec<u64> {
    COLUMN_FAMILIES
        .iter()
        .filter_map(|name| db.cf_handle(name))
        .filter_map(|cf| db.property_int_value_cf(cf, property).ok().flatten())
        .collect()
}

/// An integer property of the whole database (0 when RocksDB reports none).
fn shared(db: &DB, property: &str) -> u64 {
    db.property_int_value(property).ok().flatten().unwrap_or(0)
}

/// What RocksDB holds in memory, in bytes, by part: the memtables and table readers of all
/// column families, and the shared block cache's use and its pinned share (index and filter
/// blocks held for the tables). What a node's RSS holds beyond these is its own heap.
pub(crate) fn memory_parts(db: &DB) -> [(&'static str, u64); 4] {
    let sum = |property: &str| per_cf(db, property).iter().sum();
    [
        ("memtables", sum("rocksdb.cur-size-all-mem-tables")),
        ("table_readers", sum("rocksdb.estimate-table-readers-mem")),
        ("block_cache", shared(db, "rocksdb.block-cache-usage")),
        ("block_cache_pinned", shared(db, "rocksdb.block-cache-pinned-usage")),
    ]
}

/// How far RocksDB's compactions are behind its writes, by part: the most files waiting in level
/// 0 of any column family (at 20 RocksDB slows every write down, at 36 it stops them), the
/// bytes all column families' compactions are estimated to be behind, the write rate RocksDB
/// imposes while it slows writes (bytes per second; 0: not slowed), whether it stops them
/// (1), and the compactions running.
pub(crate) fn compaction_parts(db: &DB) -> [(&'static str, u64); 5] {
    [
        ("l0_files_max", per_cf(db, "rocksdb.num-files-at-level0").into_iter().max().unwrap_or(0)),
        ("pending_bytes", per_cf(db, "rocksdb.estimate-pending-compaction-bytes").iter().sum()),
        ("delayed_write_rate", shared(db, "rocksdb.actual-delayed-write-rate")),
        ("write_stopped", shared(db, "rocksdb.is-write-stopped")),
        ("running", shared(db, "rocksdb.num-running-compactions")),
    ]
}

/// Lowers the calling thread to the lowest CPU priority (nice 19; on Linux the nice value is
/// the thread's own): for background work that must yield to Raft's timers and applies when
/// the cores are short. Failing that, `what` runs at the priority it has, with a warning.
pub(crate) fn lower_own_priority(what: &str) {
    if let Err(e) = rustix::process::setpriority_process(None, 19) {
        tracing::warn!(error = %e, "{what} runs at its parent's CPU priority");
    }
}

/// Opens (creating if missing) a RocksDB with the node's column families at `path`, within the
/// memory and WAL bounds above.
pub(crate) fn open_db(path: &Path) -> io::Result<DB> {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    // Corruption must stop the node rather than be skipped.
    opts.set_paranoid_checks(true);
    opts.set_db_write_buffer_size(MEMTABLE_BUDGET_BYTES);
    opts.set_max_total_wal_size(WAL_BYTES_MAX);
    // Compactions only give back space and read speed later: they take what CPU Raft's timers,
    // applies and flushes leave (flushes keep their priority: a memtable that cannot flush
    // stops writes).
    let mut env = rocksdb::Env::new().map_err(io::Error::other)?;
    env.lower_thread_pool_cpu_priority();
    opts.set_env(&env);
    let cache = Cache::new_lru_cache(BLOCK_CACHE_BYTES);
    // `default` (unused) too: left out, it would get 64 MiB memtables, and RocksDB preallocates
    // 1.1 times the largest memtable for each WAL file (a tmpfs-sized disk noticed).
    let cfs = COLUMN_FAMILIES.map(|name| {
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        // Index and filter blocks in the cache, partitioned, with their top levels pinned:
        // bounded memory without a lookup waiting on an evicted whole-table index.
        table.set_cache_index_and_filter_blocks(true);
        table.set_cache_index_and_filter_blocks_with_high_priority(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        table.set_index_type(rocksdb::BlockBasedIndexType::TwoLevelIndexSearch);
        table.set_partition_filters(true);
        table.set_pin_top_level_index_and_filter(true);
        let mut cf = Options::default();
        cf.set_write_buffer_size(MEMTABLE_BYTES);
        if name == cold::CF_COLD {
            cold::tune(&mut cf, &mut table);
        }
        cf.set_block_based_table_factory(&table);
        ColumnFamilyDescriptor::new(name, cf)
    });
    DB::open_cf_descriptors(&opts, path, cfs).map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nice values of this process's threads whose names start with `prefix`.
    fn nice_of_threads(prefix: &str) -> Vec<i64> {
        let tasks = std::fs::read_dir("/proc/self/task").unwrap().map(|t| t.unwrap().path());
        let named = tasks.filter(|t| std::fs::read_to_string(t.join("comm")).is_ok_and(|c| c.starts_with(prefix)));
        named
            .filter_map(|t| std::fs::read_to_string(t.join("stat")).ok())
            // The fields after the name: state is the third of stat(5)'s, nice the nineteenth.
            .map(|stat| stat.rsplit_once(')').unwrap().1.split_whitespace().nth(16).unwrap().parse().unwrap())
            .collect()
    }

    /// Waits (ten seconds at most) until every thread named `prefix`… runs at nice 19, and
    /// whether one did.
    fn all_lowered(prefix: &str) -> bool {
        for _ in 0..1000 {
            let nice = nice_of_threads(prefix);
            if !nice.is_empty() && nice.iter().all(|n| *n == 19) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    }

    /// The background work a node paces (the event log's retention, the cold rows' purge) runs
    /// on threads of its own at the lowest CPU priority, and so do RocksDB's compactions: when
    /// the cores are short, Raft's timers and applies go first.
    #[test]
    fn background_work_runs_at_the_lowest_cpu_priority() {
        let dir = tempfile::tempdir().unwrap();
        let (_log, sm) = open(dir.path()).unwrap();
        sm.spawn_event_log_retention().unwrap();
        sm.spawn_cold_purge().unwrap();
        assert!(all_lowered("writ-retention"), "{:?}", nice_of_threads("writ-retention"));
        assert!(all_lowered("writ-cold-purge"), "{:?}", nice_of_threads("writ-cold-purge"));
        // A compaction runs on RocksDB's low-priority pool, which lowers itself as it takes one.
        let db = open_db(&dir.path().join("compacted")).unwrap();
        let cf = db.cf_handle(CF_EVENTS).unwrap();
        for i in 0..2u8 {
            db.put_cf(cf, [i], [i]).unwrap();
            db.flush_cf(cf).unwrap();
        }
        db.compact_range_cf(cf, None::<&[u8]>, None::<&[u8]>);
        assert!(all_lowered("rocksdb:low"), "{:?}", nice_of_threads("rocksdb:low"));
    }
}

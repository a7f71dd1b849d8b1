//! Growing a stopped member's ledger in bulk, for benchmarks that need more history than the
//! write path fills in the time of a run (P4's millions of finished operations).
//!
//! [`grow`] applies requests as committed entries after the member's last applied one, through
//! the state machine's own apply — the rules, folds and rows every replica writes — and ends
//! with a snapshot at the last of them. Those entries are not in the log but the last, which
//! follows the log purged up to it: a member restarted on the result starts from that snapshot
//! with its log's last entry the snapshot's, so a leader's first append to a follower finds an
//! entry to probe with (a log purged to its end makes it send its whole store as a snapshot
//! instead, though the follower holds the same). [`link_copy`]
//! then gives every other stopped member the same store as a RocksDB checkpoint (hard links to
//! the same tables, which RocksDB never changes), so the members hold one ledger, and the disk
//! holds it once until compactions give each member tables of its own.

use std::io;
use std::path::Path;

use openraft::alias::{EntryOf, LogIdOf};
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage, RaftStateMachine};
use openraft::RaftLogReader;
use writ_api::ledger::{LedgerRequest, Outcome};
use writ_api::state::LedgerState;

use crate::{LogStore, StateMachine, TypeConfig};

/// What [`grow`] did.
#[derive(Debug)]
pub struct Grown {
    /// Requests applied, each as an entry of its own.
    pub requests: u64,
    /// The log index of the last of them (the snapshot's).
    pub last_index: u64,
}

/// Opens the stopped member's store in `dir`, installs its newest snapshot and applies what its
/// log holds past it, then each chunk of requests `next` makes from the state applied so
/// far, in turn, until it makes none; then builds the snapshot the member restarts from. A
/// refused request stops it with the refusal: the ledger would not be the one asked for.
pub async fn grow(dir: &Path, mut next: impl FnMut(&LedgerState) -> Option<Vec<LedgerRequest>>) -> io::Result<Grown> {
    let (mut log, mut sm) = crate::open(dir)?;
    // What a starting member does first: its newest snapshot installed, then its log replayed.
    if let Some(snapshot) = sm.get_current_snapshot().await? {
        sm.install_snapshot(&snapshot.meta, snapshot.snapshot).await?;
    }
    catch_up(&mut log, &sm).await?;
    let mut requests = 0u64;
    let mut last_entry = None;
    loop {
        let chunk = next(&sm.read().state);
        let Some(chunk) = chunk else { break };
        let described: Vec<String> = chunk.iter().map(ToString::to_string).collect();
        let (outcomes, last) = sm.apply_appended(chunk)?;
        last_entry = last.or(last_entry);
        for (outcome, request) in outcomes.into_iter().zip(described) {
            if let Outcome::Rejected { reason, message, .. } = outcome {
                return Err(io::Error::other(format!("{request} was refused: {reason}: {message}")));
            }
            requests += 1;
        }
    }
    sm.snapshot_now()?;
    if let Some(entry) = last_entry {
        end_log_at(&mut log, sm.db(), entry).await?;
    }
    settle(sm.db())?;
    let last_index = sm.read().last_applied.map_or(0, |id| id.index());
    Ok(Grown { requests, last_index })
}

/// Makes `entry` (the last one applied) the log's only entry, the log purged up to it, durably.
async fn end_log_at(log: &mut LogStore, db: &rocksdb::DB, entry: EntryOf<TypeConfig>) -> io::Result<()> {
    let id = entry.log_id();
    let before = LogIdOf::<TypeConfig>::new(*id.committed_leader_id(), id.index() - 1);
    log.purge(before).await?;
    log.append([entry], IOFlushed::noop()).await?;
    log.save_committed(Some(id)).await?;
    // The log's writer writes both; then they are made durable here.
    log.written()?;
    db.flush_wal(true).map_err(io::Error::other)
}

/// Longest wait for the store's compactions after a growth.
const SETTLE_MAX: std::time::Duration = std::time::Duration::from_secs(3600);

/// Waits until RocksDB has no compaction pending or running: a ledger that grew over a day
/// compacted as it grew, so the members start from a store in that shape, not with the
/// growth's compaction debt (which each member would otherwise pay again, at once).
fn settle(db: &rocksdb::DB) -> io::Result<()> {
    let started = std::time::Instant::now();
    let busy = |property: &str| db.property_int_value(property).map(|v| v.unwrap_or(0) > 0);
    while busy("rocksdb.compaction-pending").map_err(io::Error::other)?
        || busy("rocksdb.num-running-compactions").map_err(io::Error::other)?
    {
        if started.elapsed() > SETTLE_MAX {
            return Err(io::Error::other("compactions still pending after an hour"));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    Ok(())
}

/// Applies the log's entries past the snapshot, all of them: with every member stopped, what
/// this member's log holds becomes every member's ledger ([`link_copy`]), and the commit it
/// recorded may lag what its leader committed (a follower records it lazily).
async fn catch_up(log: &mut LogStore, sm: &StateMachine) -> io::Result<()> {
    let applied = sm.read().last_applied;
    let Some(last) = log.get_log_state().await?.last_log_id.filter(|l| Some(*l) > applied) else { return Ok(()) };
    let from = applied.map_or(0, |a| a.index() + 1);
    let entries = log.try_get_log_entries(from..=last.index()).await?;
    sm.apply_committed(entries.into_iter().map(|e| (e, None::<()>)).collect())?;
    Ok(())
}

/// Makes the stopped member's data directory `to` hold what the stopped member's `from` holds:
/// its RocksDB as a checkpoint and its snapshot files, both as hard links (same filesystem).
/// What `to` held before is removed.
pub fn link_copy(from: &Path, to: &Path) -> io::Result<()> {
    let db = crate::open_db(&from.join("db"))?;
    for old in ["db", "snapshots"] {
        match std::fs::remove_dir_all(to.join(old)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    std::fs::create_dir_all(to)?;
    let checkpoint = rocksdb::checkpoint::Checkpoint::new(&db).map_err(io::Error::other)?;
    checkpoint.create_checkpoint(to.join("db")).map_err(io::Error::other)?;
    let snapshots = to.join("snapshots");
    std::fs::create_dir_all(&snapshots)?;
    for entry in std::fs::read_dir(from.join("snapshots"))? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::hard_link(entry.path(), snapshots.join(entry.file_name()))?;
        }
    }
    Ok(())
}

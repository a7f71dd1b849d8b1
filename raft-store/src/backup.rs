//! Backup and restore on a node's store (SPEC L10), as `etcdctl snapshot save` / `etcdutl
//! snapshot restore`; the format is `writ_api::backup`'s.
//!
//! **Backup** ([`crate::StateMachine::write_backup`]): the state and a RocksDB snapshot taken
//! under one read lock, then the audit, evidence, event and cold-row column families streamed
//! from that snapshot without holding the lock.
//!
//! **Restore** ([`restore`]) writes the records into a new RocksDB and the state as the
//! directory's *seed* ([`SEED_FILE`] beside `db`): the state the node starts from before its
//! log's first entry. A node started on it with `bootstrap = true` initializes a new cluster
//! (membership from its own configuration: the backup's is not kept), then snapshots and purges
//! its log, so members that join receive the restored state as a snapshot
//! (`writ_node::LedgerNode::initialize`). A directory that already holds a node's data is
//! refused; a damaged backup leaves nothing behind.

use std::io::{self, Read, Write};
use std::path::Path;

use writ_api::backup::{
    read_backup, BackupSummary, BackupWriter, FRAME_AUDIT, FRAME_COLD, FRAME_EVENT, FRAME_EVIDENCE,
};
use writ_api::state::LedgerState;

use crate::codec::checked_decode;
use crate::cold::CF_COLD;
use crate::{CF_AUDIT, CF_EVENTS, CF_EVIDENCE};

/// The seed file of a restored data directory.
pub const SEED_FILE: &str = "seed";

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

impl crate::StateMachine {
    /// Writes a backup of what this node has applied to `out`. Blocking: run it off the async
    /// runtime.
    pub fn write_backup(&self, node_id: u64, out: impl Write) -> io::Result<BackupSummary> {
        let db = self.db();
        // Apply writes its records under the write lock: a RocksDB snapshot taken under the read
        // lock holds exactly the records of the state read with it.
        let (view, state, last_applied) = {
            let a = self.read();
            (db.snapshot(), a.state.clone(), a.last_applied.as_ref().map_or(0, |l| l.index()))
        };
        let mut w = BackupWriter::begin(out, node_id, last_applied, &state)?;
        drop(state);
        let kinds =
            [(FRAME_AUDIT, CF_AUDIT), (FRAME_EVIDENCE, CF_EVIDENCE), (FRAME_EVENT, CF_EVENTS), (FRAME_COLD, CF_COLD)];
        for record in crate::state_machine::stored_records(db, &view, &kinds) {
            let (kind, key, value) = record?;
            w.record(kind, &key, &value)?;
        }
        w.end()
    }
}

/// Whether `dir` holds a node's data (its RocksDB, snapshots or a seed).
fn holds_node_data(dir: &Path) -> bool {
    ["db", "snapshots", SEED_FILE].iter().any(|p| dir.join(p).exists())
}

/// Seeds the data directory `dir` from the backup `input` (see the module doc).
pub fn restore(dir: &Path, input: impl Read) -> io::Result<BackupSummary> {
    if holds_node_data(dir) {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} holds a node's data (a cluster's, running or not): restore into a new, empty directory",
                dir.display()
            ),
        ));
    }
    std::fs::create_dir_all(dir)?;
    let staging = dir.join("db.restoring");
    let _ = std::fs::remove_dir_all(&staging);
    match restore_into(&staging, input) {
        Ok((summary, state)) => {
            std::fs::rename(&staging, dir.join("db"))?;
            let seed_tmp = dir.join("seed.tmp");
            let mut file = std::fs::File::create(&seed_tmp)?;
            file.write_all(&state.encode_versioned())?;
            file.sync_all()?;
            std::fs::rename(&seed_tmp, dir.join(SEED_FILE))?;
            std::fs::File::open(dir)?.sync_all()?;
            Ok(summary)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            Err(e)
        }
    }
}

/// Reads and checks the backup, writing its records (each checked as the node stores it) into
/// a new RocksDB at `db_dir`.
fn restore_into(db_dir: &Path, input: impl Read) -> io::Result<(BackupSummary, LedgerState)> {
    let db = std::sync::Arc::new(crate::open_db(db_dir)?);
    let mut batch = rocksdb::WriteBatch::default();
    let read = read_backup(io::BufReader::new(input), |kind, key, value| {
        let cf = match kind {
            FRAME_AUDIT => {
                crate::codec::record_of(value)?;
                CF_AUDIT
            }
            FRAME_EVENT => {
                checked_decode::<writ_api::ledger::EventEnvelope>(value, "event")?;
                CF_EVENTS
            }
            FRAME_EVIDENCE => CF_EVIDENCE,
            FRAME_COLD => CF_COLD,
            other => return Err(invalid(format!("unknown record kind {other}"))),
        };
        batch.put_cf(db.cf_handle(cf).expect("column families are created at open"), key, value);
        if batch.len() >= 4096 {
            db.write(std::mem::take(&mut batch)).map_err(io::Error::other)?;
        }
        Ok(())
    })?;
    db.write(batch).map_err(io::Error::other)?;
    // The state over its rows, as a node starting from it holds it: an older format's upgrade
    // of its rows is written now, since the seed is written in this build's format.
    let (summary, mut state) = read;
    let cold = std::sync::Arc::new(crate::cold::RocksCold::new(db.clone()));
    crate::state_machine::adopt(&db, &cold, &mut state)?;
    db.flush_wal(true).map_err(io::Error::other)?;
    Ok((summary, state))
}

/// The seed state of the data directory `dir`, if it was restored from a backup.
pub(crate) fn read_seed(dir: &Path) -> io::Result<Option<LedgerState>> {
    match std::fs::read(dir.join(SEED_FILE)) {
        Ok(bytes) => LedgerState::decode_versioned_unbounded(&bytes).map(Some).map_err(invalid),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

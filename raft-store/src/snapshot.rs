//! Snapshot files (SPEC L9): what a node builds, keeps, sends and installs, streamed — never
//! whole in memory, with no size cap.
//!
//! A snapshot file is [`SNAPSHOT_FILE_MAGIC`], a u32 LE length and the checksummed
//! [`SnapshotHeader`] (its Raft position and membership), then a `writ_api::backup` stream:
//! the manifest, the **bounded state** (`LedgerState::encode_versioned`; audit bodies and
//! evidence bytes are never part of it) and then, as separate records, every retained audit
//! record and evidence blob, and last the sha256 of the stream. Building writes it record by
//! record from one RocksDB snapshot; installing reads it record by record into the column
//! families; the network sends it in resumable chunks (`writ_node::network`). Files written
//! before this format (`.bin`: the whole payload in one encoding) are rewritten in it when a
//! node starts on one.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use openraft::alias::{LogIdOf, StoredMembershipOf};
use serde::{Deserialize, Serialize};
use writ_api::backup::{read_backup, BackupManifestV1, BackupSummary, BackupWriter};
use writ_api::state::LedgerState;

use crate::codec::{checked_decode, checked_encode};
use crate::TypeConfig;

/// First bytes of a snapshot file.
pub const SNAPSHOT_FILE_MAGIC: [u8; 8] = *b"WRITSNP2";
/// Largest header a reader accepts.
const HEADER_BYTES_MAX: u32 = 1 << 20;
/// Write buffer of a snapshot file.
const BUFFER_BYTES: usize = 1 << 20;

/// A snapshot as openraft hands it around: a file in this format (this node's own, one received
/// from the leader, or another store's in tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotHandle {
    pub path: PathBuf,
}

/// Where a snapshot stands in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHeader {
    pub last_applied: Option<LogIdOf<TypeConfig>>,
    pub membership: StoredMembershipOf<TypeConfig>,
}

/// A stored record of a snapshot: its kind (`writ_api::backup::FRAME_AUDIT` or
/// `FRAME_EVIDENCE`), key and value as the column family holds them.
pub type Record = (u8, Vec<u8>, Vec<u8>);

/// Writes a snapshot file at `path` (then syncs it): the header, the state and `records`.
pub fn write(
    path: &Path,
    header: &SnapshotHeader,
    state: &LedgerState,
    records: impl Iterator<Item = io::Result<Record>>,
) -> io::Result<BackupSummary> {
    let file = File::create(path)?;
    let mut out = BufWriter::with_capacity(BUFFER_BYTES, file);
    let header_bytes = checked_encode(header)?;
    out.write_all(&SNAPSHOT_FILE_MAGIC)?;
    out.write_all(&(header_bytes.len() as u32).to_le_bytes())?;
    out.write_all(&header_bytes)?;
    let manifest = BackupManifestV1 {
        node_id: 0,
        last_applied_index: header.last_applied.as_ref().map_or(0, |l| l.index()),
        revision: state.revision,
        clock_ms: state.clock_ms,
        state_digest: state.digest(),
        ledger_version: writ_api::ledger::LEDGER_VERSION,
    };
    let mut w = BackupWriter::begin(&mut out, manifest, state)?;
    for record in records {
        let (kind, key, value) = record?;
        w.record(kind, &key, &value)?;
    }
    let summary = w.end()?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(summary)
}

/// Reads a snapshot file's header, leaving the reader at its stream.
pub fn open(path: &Path) -> io::Result<(SnapshotHeader, BufReader<File>)> {
    let mut r = BufReader::with_capacity(BUFFER_BYTES, File::open(path)?);
    let mut head = [0u8; 12];
    r.read_exact(&mut head).map_err(|e| invalid(format!("{}: no snapshot header: {e}", path.display())))?;
    if head[..8] != SNAPSHOT_FILE_MAGIC {
        return Err(invalid(format!("{} is not a snapshot file", path.display())));
    }
    let len = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
    if len > HEADER_BYTES_MAX {
        return Err(invalid(format!("{}: a snapshot header of {len} bytes", path.display())));
    }
    let mut bytes = vec![0u8; len as usize];
    r.read_exact(&mut bytes)?;
    Ok((checked_decode(&bytes, "snapshot header")?, r))
}

/// Reads the stream of an opened snapshot: every record to `on_record`, then checks the digest;
/// the state.
pub fn read_records(
    reader: BufReader<File>,
    on_record: impl FnMut(u8, &[u8], &[u8]) -> io::Result<()>,
) -> io::Result<LedgerState> {
    read_backup(reader, on_record).map(|(_, state)| state)
}

/// Whether `path` begins like a snapshot file of this format.
pub fn is_streamed(path: &Path) -> bool {
    let mut magic = [0u8; 8];
    File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && magic == SNAPSHOT_FILE_MAGIC
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

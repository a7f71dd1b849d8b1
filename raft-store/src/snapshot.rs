//! Snapshot files (SPEC L9): what a node builds, keeps, sends and installs, streamed — never
//! whole in memory, with no size cap.
//!
//! A snapshot file is a magic ([`Contents`]), a u32 LE length and the checksummed
//! [`SnapshotHeader`] (its Raft position and membership), then a `writ_api::backup` stream:
//! the manifest, the **bounded state** (`LedgerState::encode_versioned`; audit bodies and
//! evidence bytes are never part of it), the records, and last the sha256 of the stream.
//!
//! - A node's **own** snapshots are [`Contents::StateOnly`]: no records. The retained audit
//!   records and evidence blobs stay in its column families, so building one costs the bounded
//!   state, whatever the audit retention (issue 18).
//! - What **travels** to another node is [`Contents::WithRecords`]: the same state followed by
//!   every audit record and evidence blob of the sender's column families, as separate records
//!   ([`SnapshotHandle::transfer_file`], built once per snapshot when a peer first needs it).
//!   Installing it reads it record by record into the column families; the network sends it in
//!   resumable chunks (`writ_node::network`).
//!
//! Files written before streaming (`.bin`: the whole payload in one encoding) are rewritten as
//! [`Contents::WithRecords`] when a node starts on one.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use openraft::alias::{LogIdOf, StoredMembershipOf};
use serde::{Deserialize, Serialize};
use writ_api::backup::{read_backup, BackupSummary, BackupWriter};
use writ_api::state::LedgerState;

use crate::codec::{checked_decode, checked_encode};
use crate::{StateMachine, TypeConfig};

/// First bytes of a snapshot file that carries its records ([`Contents::WithRecords`]).
pub const SNAPSHOT_FILE_MAGIC: [u8; 8] = *b"WRITSNP2";
/// First bytes of a snapshot file of the state only ([`Contents::StateOnly`]).
pub const STATE_ONLY_FILE_MAGIC: [u8; 8] = *b"WRITSNS1";
/// Largest header a reader accepts.
const HEADER_BYTES_MAX: u32 = 1 << 20;
/// Write buffer of a snapshot file.
const BUFFER_BYTES: usize = 1 << 20;

/// What a snapshot file carries after the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contents {
    /// Every retained audit record and evidence blob, as records: what installs on another node.
    WithRecords,
    /// Nothing: the records are in the column families of the node that built it.
    StateOnly,
}

impl Contents {
    fn magic(self) -> [u8; 8] {
        match self {
            Contents::WithRecords => SNAPSHOT_FILE_MAGIC,
            Contents::StateOnly => STATE_ONLY_FILE_MAGIC,
        }
    }

    fn of_magic(magic: &[u8]) -> Option<Contents> {
        [Contents::WithRecords, Contents::StateOnly].into_iter().find(|c| c.magic() == magic)
    }
}

/// A snapshot as openraft hands it around: a file in this format (this node's own, one received
/// from the leader, or another store's in tests), and for a node's own snapshot the store that
/// built it, whose column families hold the records a peer needs with it.
#[derive(Clone)]
pub struct SnapshotHandle {
    pub path: PathBuf,
    pub(crate) origin: Option<StateMachine>,
}

impl std::fmt::Debug for SnapshotHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotHandle").field("path", &self.path).field("own", &self.origin.is_some()).finish()
    }
}

impl SnapshotHandle {
    /// A snapshot file received whole (it carries its records).
    pub fn file(path: PathBuf) -> Self {
        SnapshotHandle { path, origin: None }
    }

    /// The file to send to another node: this one when it carries its records; for a
    /// state-only snapshot, the state followed by the records of the store that built it
    /// (written once per snapshot, then reused by every peer and every resumed transfer).
    pub fn transfer_file(&self) -> io::Result<PathBuf> {
        match &self.origin {
            Some(store) => store.transfer_file(&self.path),
            None => Ok(self.path.clone()),
        }
    }
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

/// Writes a snapshot file at `path` (then syncs it): the header, the state and `records` (none
/// for [`Contents::StateOnly`]).
pub fn write(
    path: &Path,
    contents: Contents,
    header: &SnapshotHeader,
    state: &LedgerState,
    records: impl Iterator<Item = io::Result<Record>>,
) -> io::Result<BackupSummary> {
    let file = File::create(path)?;
    let mut out = BufWriter::with_capacity(BUFFER_BYTES, file);
    let header_bytes = checked_encode(header)?;
    out.write_all(&contents.magic())?;
    out.write_all(&(header_bytes.len() as u32).to_le_bytes())?;
    out.write_all(&header_bytes)?;
    let last_applied_index = header.last_applied.as_ref().map_or(0, |l| l.index());
    // Encoded once: written, and read for the size of each of its sections.
    let versioned = state.encode_versioned();
    record_section_sizes(&versioned);
    let frame = writ_api::backup::FRAME_BYTES_MAX as usize;
    let mut w = BackupWriter::begin_encoded(&mut out, 0, last_applied_index, state, &versioned, frame)?;
    for record in records {
        let (kind, key, value) = record?;
        if contents == Contents::StateOnly {
            return Err(invalid(format!("{}: a record in a state-only snapshot", path.display())));
        }
        w.record(kind, &key, &value)?;
    }
    let summary = w.end()?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(summary)
}

/// `writ_state_section_bytes{section}`: the bytes of each section of the state a snapshot holds.
fn record_section_sizes(versioned: &[u8]) {
    let sizes = writ_api::format::unwrap(writ_api::format::STATE_MAGIC, versioned)
        .map_err(|e| e.to_string())
        .and_then(|(_, body)| writ_api::schema::section_sizes(body));
    match sizes {
        Ok(sizes) => {
            for (section, bytes) in sizes {
                metrics::gauge!("writ_state_section_bytes", "section" => section).set(bytes as f64);
            }
        }
        Err(e) => tracing::warn!(error = %e, "a snapshot's state sections not measured"),
    }
}

/// Reads a snapshot file's header and what it carries, leaving the reader at its stream.
pub fn open(path: &Path) -> io::Result<(SnapshotHeader, Contents, BufReader<File>)> {
    let mut r = BufReader::with_capacity(BUFFER_BYTES, File::open(path)?);
    let mut head = [0u8; 12];
    r.read_exact(&mut head).map_err(|e| invalid(format!("{}: no snapshot header: {e}", path.display())))?;
    let contents =
        Contents::of_magic(&head[..8]).ok_or_else(|| invalid(format!("{} is not a snapshot file", path.display())))?;
    let len = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
    if len > HEADER_BYTES_MAX {
        return Err(invalid(format!("{}: a snapshot header of {len} bytes", path.display())));
    }
    let mut bytes = vec![0u8; len as usize];
    r.read_exact(&mut bytes)?;
    Ok((checked_decode(&bytes, "snapshot header")?, contents, r))
}

/// Reads the stream of an opened state-only snapshot: its state (a record in it is corruption).
pub fn read_state(reader: BufReader<File>) -> io::Result<LedgerState> {
    read_records(reader, |_, _, _| Err(invalid("a record in a state-only snapshot".to_string())))
}

/// What the snapshot file at `path` carries after its state.
pub fn contents(path: &Path) -> io::Result<Contents> {
    let mut magic = [0u8; 8];
    File::open(path)?.read_exact(&mut magic)?;
    Contents::of_magic(&magic).ok_or_else(|| invalid(format!("{} is not a snapshot file", path.display())))
}

/// Reads the stream of an opened snapshot: every record to `on_record`, then checks the digest;
/// the state.
pub fn read_records(
    reader: BufReader<File>,
    on_record: impl FnMut(u8, &[u8], &[u8]) -> io::Result<()>,
) -> io::Result<LedgerState> {
    read_backup(reader, on_record).map(|(_, state)| state)
}

/// Whether `path` begins like a snapshot file of this format (either contents).
pub fn is_streamed(path: &Path) -> bool {
    contents(path).is_ok()
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

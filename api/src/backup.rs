//! The backup format (SPEC L10): a consistent point-in-time copy of a node's ledger — the state,
//! every retained audit record, evidence blob and event — as a stream of frames, written by a
//! node (`writ_raft_store::backup`, `GET /v1/cluster/backup`, `writ admin backup`) and read back
//! by `writ node restore` and by the CLI's check.
//!
//! **Layout**: [`BACKUP_MAGIC`], the state format version (u32 LE), then frames: a kind byte, a
//! u32 LE length and that many bytes — [`FRAME_MANIFEST`] (the encoded [`BackupManifestV1`]),
//! [`FRAME_STATE`] (`LedgerState::encode_versioned`, in consecutive frames of at most
//! [`FRAME_BYTES_MAX`] each: the state has no size cap), one frame per stored record
//! ([`FRAME_AUDIT`], [`FRAME_EVIDENCE`], [`FRAME_EVENT`], [`FRAME_COLD`]: key length u32 LE, key,
//! the value as the node stores it), and last [`FRAME_END`] holding the sha256 of every byte before it. A
//! reader checks that digest and the state's digest against the manifest. Pure: the callers do
//! the IO through `std::io::{Read, Write}`.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::state::LedgerState;

/// First bytes of a backup.
pub const BACKUP_MAGIC: [u8; 8] = *b"WRITBKUP";
pub const FRAME_MANIFEST: u8 = 1;
pub const FRAME_STATE: u8 = 2;
pub const FRAME_AUDIT: u8 = 3;
pub const FRAME_EVIDENCE: u8 = 4;
pub const FRAME_EVENT: u8 = 5;
/// A cold row's version ([`crate::cold`]) as the node stores it.
pub const FRAME_COLD: u8 = 6;
pub const FRAME_END: u8 = 0xff;
/// Largest frame a reader accepts (an evidence blob is at most 512 KiB; the state is bounded
/// like every decode, 64 MiB).
pub const FRAME_BYTES_MAX: u32 = 64 << 20;

/// The point a backup was taken at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupManifestV1 {
    /// The node it was read from.
    pub node_id: u64,
    /// Raft log index of the last entry applied to the copied state.
    pub last_applied_index: u64,
    /// Last event revision, and ledger time, of the copied state.
    pub revision: u64,
    pub clock_ms: u64,
    /// sha256 of the copied state's encoding (`LedgerState::encode`, as the writing build
    /// encoded it).
    pub state_digest: String,
    /// The ledger version of the build that wrote it.
    pub ledger_version: u32,
}

/// What a backup holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupSummary {
    pub manifest: BackupManifestV1,
    pub audit_records: u64,
    pub evidence_blobs: u64,
    pub events: u64,
    /// Versions of cold rows (operations no longer live, idempotency keys, retention's rows).
    #[serde(default)]
    pub cold_rows: u64,
    /// Bytes of the whole backup, and its sha256 (hex): the end frame's content.
    pub bytes: u64,
    pub sha256: String,
}

/// A record kind's index in [`BackupSummary`]'s counts (audit, evidence, events, cold rows).
fn slot(kind: u8) -> Option<usize> {
    match kind {
        FRAME_AUDIT => Some(0),
        FRAME_EVIDENCE => Some(1),
        FRAME_EVENT => Some(2),
        FRAME_COLD => Some(3),
        _ => None,
    }
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Writes a backup: [`BackupWriter::begin`], a record per stored value, [`BackupWriter::end`].
pub struct BackupWriter<W: Write> {
    out: W,
    hash: Sha256,
    bytes: u64,
    manifest: BackupManifestV1,
    counts: [u64; 4],
}

impl<W: Write> BackupWriter<W> {
    /// The header, the manifest (of `state`, read by node `node_id` at Raft index
    /// `last_applied_index`) and the state.
    pub fn begin(out: W, node_id: u64, last_applied_index: u64, state: &LedgerState) -> io::Result<Self> {
        Self::begin_in_parts(out, node_id, last_applied_index, state, FRAME_BYTES_MAX as usize)
    }

    /// [`BackupWriter::begin`] with the state in frames of at most `part_bytes` (tests make it
    /// small to show a state split over several frames).
    pub fn begin_in_parts(
        out: W,
        node_id: u64,
        last_applied_index: u64,
        state: &LedgerState,
        part_bytes: usize,
    ) -> io::Result<Self> {
        // The state is encoded once: its digest (the manifest's) is over the bytes written.
        let versioned = state.encode_versioned();
        Self::begin_encoded(out, node_id, last_applied_index, state, &versioned, part_bytes)
    }

    /// [`BackupWriter::begin_in_parts`] with the state as `versioned` bytes already encoded
    /// ([`LedgerState::encode_versioned`], of this build's format or an older one: `state` is
    /// what they decode to).
    pub fn begin_encoded(
        out: W,
        node_id: u64,
        last_applied_index: u64,
        state: &LedgerState,
        versioned: &[u8],
        part_bytes: usize,
    ) -> io::Result<Self> {
        let (format, body) =
            crate::format::unwrap(crate::format::STATE_MAGIC, versioned).map_err(|e| invalid(e.to_string()))?;
        let manifest = BackupManifestV1 {
            node_id,
            last_applied_index,
            revision: state.revision,
            clock_ms: state.clock_ms,
            state_digest: crate::sha256_hex(body),
            ledger_version: crate::ledger::LEDGER_VERSION,
        };
        let mut w = BackupWriter { out, hash: Sha256::new(), bytes: 0, manifest, counts: [0; 4] };
        w.raw(&BACKUP_MAGIC)?;
        w.raw(&format.to_le_bytes())?;
        let manifest = crate::encode(&w.manifest).map_err(io::Error::other)?;
        w.frame(FRAME_MANIFEST, &[&manifest])?;
        // A state larger than one frame (it outgrew 64 MiB once, and a snapshot that failed on
        // it stopped every node) continues in the next frames of the same kind.
        for part in versioned.chunks(part_bytes.clamp(1, FRAME_BYTES_MAX as usize)) {
            w.frame(FRAME_STATE, &[part])?;
        }
        Ok(w)
    }

    /// One stored record of `kind` ([`FRAME_AUDIT`], [`FRAME_EVIDENCE`], [`FRAME_EVENT`]).
    pub fn record(&mut self, kind: u8, key: &[u8], value: &[u8]) -> io::Result<()> {
        let i = slot(kind).ok_or_else(|| invalid(format!("{kind} is not a record frame")))?;
        let key_len = u32::try_from(key.len()).map_err(|_| invalid("a key exceeds 4 GiB"))?;
        self.frame(kind, &[&key_len.to_le_bytes(), key, value])?;
        self.counts[i] += 1;
        Ok(())
    }

    /// The end frame (the digest of everything before it); the summary.
    pub fn end(mut self) -> io::Result<BackupSummary> {
        let digest: [u8; 32] = self.hash.clone().finalize().into();
        self.frame(FRAME_END, &[&digest])?;
        self.out.flush()?;
        Ok(BackupSummary {
            manifest: self.manifest,
            audit_records: self.counts[0],
            evidence_blobs: self.counts[1],
            events: self.counts[2],
            cold_rows: self.counts[3],
            bytes: self.bytes,
            sha256: crate::hex(&digest),
        })
    }

    fn raw(&mut self, b: &[u8]) -> io::Result<()> {
        self.hash.update(b);
        self.bytes += b.len() as u64;
        self.out.write_all(b)
    }

    fn frame(&mut self, kind: u8, parts: &[&[u8]]) -> io::Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let len = u32::try_from(len).ok().filter(|l| *l <= FRAME_BYTES_MAX);
        let len = len.ok_or_else(|| invalid(format!("a backup frame exceeds {FRAME_BYTES_MAX} bytes")))?;
        self.raw(&[kind])?;
        self.raw(&len.to_le_bytes())?;
        for p in parts {
            self.raw(p)?;
        }
        Ok(())
    }
}

/// A reader that hashes what it reads.
struct Unframer<R: Read> {
    input: R,
    hash: Sha256,
    bytes: u64,
}

impl<R: Read> Unframer<R> {
    fn exact(&mut self, n: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0; n];
        self.input.read_exact(&mut buf).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => invalid("the backup is truncated"),
            _ => e,
        })?;
        self.hash.update(&buf);
        self.bytes += n as u64;
        Ok(buf)
    }

    /// The next frame's kind and content (the end frame is left out of the digest).
    fn frame(&mut self) -> io::Result<(u8, Vec<u8>)> {
        let before = self.hash.clone();
        let head = self.exact(5)?;
        let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
        if len > FRAME_BYTES_MAX {
            return Err(invalid(format!("a backup frame of {len} bytes exceeds {FRAME_BYTES_MAX}")));
        }
        let content = self.exact(len as usize)?;
        if head[0] == FRAME_END {
            self.hash = before;
        }
        Ok((head[0], content))
    }
}

/// Reads and checks a backup: its header, manifest, state (against the manifest's digest) and
/// end digest, handing each record to `on_record(kind, key, value)` as it comes (so a damaged
/// backup is found only at its end: a caller that stores records must discard them on error).
/// Returns the summary and the state.
pub fn read_backup(
    input: impl Read,
    mut on_record: impl FnMut(u8, &[u8], &[u8]) -> io::Result<()>,
) -> io::Result<(BackupSummary, LedgerState)> {
    let mut r = Unframer { input, hash: Sha256::new(), bytes: 0 };
    if r.exact(8)? != BACKUP_MAGIC {
        return Err(invalid("not a Writ backup (wrong magic)"));
    }
    let version = r.exact(4)?;
    let version = u32::from_le_bytes([version[0], version[1], version[2], version[3]]);
    if version > crate::format::STATE_FORMAT_VERSION {
        return Err(invalid(format!(
            "the backup's state format {version} is newer than this build reads (at most {}): use a newer writ",
            crate::format::STATE_FORMAT_VERSION
        )));
    }
    let (kind, manifest) = r.frame()?;
    if kind != FRAME_MANIFEST {
        return Err(invalid("the backup does not start with its manifest"));
    }
    let manifest: BackupManifestV1 =
        crate::decode(&manifest).map_err(|e| invalid(format!("undecodable backup manifest: {e}")))?;
    let (kind, mut state) = r.frame()?;
    if kind != FRAME_STATE {
        return Err(invalid("the backup's state frame is missing"));
    }
    // The state's frames, then the records (the first frame of another kind is kept).
    let mut next = r.frame()?;
    while next.0 == FRAME_STATE {
        state.extend_from_slice(&next.1);
        next = r.frame()?;
    }
    // The manifest's digest is over the state's bytes as the writing build encoded them, so
    // it holds whichever build (and state format) reads them.
    let (_, body) = crate::format::unwrap(crate::format::STATE_MAGIC, &state).map_err(|e| invalid(e.to_string()))?;
    if crate::sha256_hex(body) != manifest.state_digest {
        return Err(invalid("the backup's state does not match its manifest's digest"));
    }
    let state = LedgerState::decode_versioned_unbounded(&state).map_err(invalid)?;
    let mut counts = [0u64; 4];
    let digest = loop {
        let (kind, content) = next;
        if kind == FRAME_END {
            break content;
        }
        let i = slot(kind).ok_or_else(|| invalid(format!("unknown backup frame kind {kind}")))?;
        let (len, rest) =
            content.split_at_checked(4).ok_or_else(|| invalid("a record frame without its key length"))?;
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let (key, value) = rest.split_at_checked(len).ok_or_else(|| invalid("a record frame shorter than its key"))?;
        on_record(kind, key, value)?;
        counts[i] += 1;
        next = r.frame()?;
    };
    let computed: [u8; 32] = r.hash.clone().finalize().into();
    if digest != computed {
        return Err(invalid("the backup's digest does not match its content: it is damaged"));
    }
    let summary = BackupSummary {
        manifest,
        audit_records: counts[0],
        evidence_blobs: counts[1],
        events: counts[2],
        cold_rows: counts[3],
        bytes: r.bytes,
        sha256: crate::hex(&computed),
    };
    Ok((summary, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Vec<u8>, BackupSummary) {
        let state = LedgerState { clock_ms: 5, ..Default::default() };
        let mut out = Vec::new();
        let mut w = BackupWriter::begin(&mut out, 1, 9, &state).unwrap();
        w.record(FRAME_AUDIT, b"k1", b"v1").unwrap();
        w.record(FRAME_EVENT, b"k2", b"v2").unwrap();
        let summary = w.end().unwrap();
        (out, summary)
    }

    #[test]
    fn a_backup_reads_back_and_a_damaged_one_is_refused() {
        let (bytes, written) = sample();
        let mut records = Vec::new();
        let (read, state) = read_backup(&bytes[..], |kind, k, v| {
            records.push((kind, k.to_vec(), v.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(read, written);
        assert_eq!((read.bytes as usize, read.audit_records, read.events), (bytes.len(), 1, 1));
        assert_eq!(state.clock_ms, 5);
        assert_eq!(records[1], (FRAME_EVENT, b"k2".to_vec(), b"v2".to_vec()));
        // One flipped byte in a record, a truncation, or a foreign file: refused.
        let mut flipped = bytes.clone();
        let at = bytes.len() - 40;
        flipped[at] ^= 1;
        let err = read_backup(&flipped[..], |_, _, _| Ok(())).unwrap_err();
        assert!(err.to_string().contains("damaged") || err.to_string().contains("frame"), "{err}");
        let err = read_backup(&bytes[..bytes.len() - 1], |_, _, _| Ok(())).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
        assert!(read_backup(&b"not a backup at all"[..], |_, _, _| Ok(())).is_err());
    }

    /// A state larger than a frame continues in the next frames of its kind, and the records
    /// after it still read: the writer once refused a state over 64 MiB, and since snapshots
    /// are written in this format, every node stopped at its next snapshot.
    #[test]
    fn a_state_larger_than_a_frame_travels_in_several() {
        let mut state = LedgerState { clock_ms: 5, ..Default::default() };
        for i in 0..50 {
            state.tenant_names.insert(format!("tenant-{i}"), format!("t-{i}"));
        }
        let encoded = state.encode_versioned().len();
        let mut out = Vec::new();
        let mut w = BackupWriter::begin_in_parts(&mut out, 1, 9, &state, 64).unwrap();
        w.record(FRAME_AUDIT, b"k1", b"v1").unwrap();
        w.end().unwrap();
        let state_frames = {
            // Walk the frames after the header: count those of the state's kind.
            let (mut at, mut n) = (12, 0);
            while at < out.len() {
                let len = u32::from_le_bytes(out[at + 1..at + 5].try_into().unwrap()) as usize;
                n += usize::from(out[at] == FRAME_STATE);
                at += 5 + len;
            }
            n
        };
        assert_eq!(state_frames, encoded.div_ceil(64), "{encoded} bytes of state in 64-byte frames");
        let mut records = Vec::new();
        let (summary, read) = read_backup(&out[..], |kind, k, v| {
            records.push((kind, k.to_vec(), v.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(read, state);
        assert_eq!((summary.audit_records, records), (1, vec![(FRAME_AUDIT, b"k1".to_vec(), b"v1".to_vec())]));
    }

    /// A state beyond the 64 MiB message bound is written and read back whole.
    #[test]
    fn a_state_beyond_the_message_bound_reads_back() {
        let mut state = LedgerState { clock_ms: 5, ..Default::default() };
        state.tenant_names.insert("x".repeat(65 << 20), "t-big".into());
        assert!(LedgerState::decode_versioned(&state.encode_versioned()).is_err(), "over the message bound");
        let mut out = Vec::new();
        BackupWriter::begin(&mut out, 1, 9, &state).unwrap().end().unwrap();
        let (_, read) = read_backup(&out[..], |_, _, _| Ok(())).unwrap();
        assert_eq!(read, state);
    }
}

//! The openraft state machine: a thin adapter that feeds committed entries to
//! [`LedgerState::execute`], stores the produced events, and builds/installs snapshots.
//!
//! The state itself lives in memory and is rebuilt on start from the newest snapshot file plus
//! the log (openraft re-applies `(snapshot, committed]`); the Raft log is the durable truth.
//! Events are also written to the `events` column family (keyed by revision) so that watchers
//! can resume from a revision; re-applying writes the same bytes under the same keys. Audit
//! records go to the `audit` column family (key: tenant, sequence); retention deletes the
//! range below each tenant's first retained sequence. Snapshots are files in the streamed
//! format of `crate::snapshot`. A node's own hold the bounded state only, so building one does
//! not grow with audit retention; the audit records, evidence blobs and cold rows
//! (`crate::cold`) stay in the column families, made durable (the WAL synced) before the
//! snapshot lets the log be purged. What a peer installs is the state followed by those
//! records, written from the column families when a peer first needs it, so a node that
//! installs one has the same audit history and rows without either side holding them whole
//! in memory.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use futures::{Stream, TryStreamExt};
use openraft::alias::{EntryOf, LogIdOf, SnapshotMetaOf, SnapshotOf, StoredMembershipOf};
use openraft::entry::RaftEntry;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use rocksdb::{Direction, IteratorMode, WriteBatch, WriteOptions, DB};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use writ_api::audit::{self, record_key, AuditFilter, AuditRecord, AuditRecordV1};
use writ_api::format;
use writ_api::ledger::{EventEnvelope, Outcome};
use writ_api::operation::ProposalV1;
use writ_api::revocation::Revocations;
use writ_api::state::LedgerState;

use crate::codec::{checked_bytes, checked_decode, checked_encode};
use crate::cold::CF_COLD;
pub use crate::snapshot::SnapshotHandle;
use crate::snapshot::{Contents, SnapshotHeader};
use crate::{TypeConfig, CF_AUDIT, CF_EVENTS, CF_EVIDENCE};
use writ_api::backup::{FRAME_AUDIT, FRAME_COLD, FRAME_EVIDENCE};
use writ_api::retention::EVENT_LOG_KEPT_MS;

/// How many live events a slow watcher may fall behind before it must resume from a revision.
pub const WATCH_BUFFER_EVENTS: usize = 4096;
/// Most stored events one step of the event log's retention reads (and drops): the state
/// stays readable but no apply runs while a step writes.
const TRIM_PAGE_EVENTS: usize = 1024;
/// How long the event log's retention rests after a step, per unit of time the step took: the
/// records it writes out are background work, so it takes at most a quarter of a core from
/// applies and Raft's messages however much has come due at once.
const TRIM_REST_PER_WORK: u32 = 3;
/// How long the purge of cold rows' dropped versions rests after a batch, per unit of time the
/// batch took: it gives back disk, which is never urgent, so it takes at most a quarter of a
/// core whatever retention left for it.
const PURGE_REST_PER_WORK: u32 = 3;

/// Records written per batch while a snapshot is installed.
const INSTALL_BATCH_RECORDS: usize = 4096;

/// Snapshot files kept on disk (the newest is the current one).
const SNAPSHOT_FILES_KEPT: usize = 2;
/// Extension of a snapshot's transfer file (`StateMachine::transfer_file`), and of one being
/// written.
const TRANSFER_EXTENSION: &str = "xfer";
const TRANSFER_PART_EXTENSION: &str = "xfer-part";

/// An applied event with the bytes it is stored as: encoded once, when it is applied (or read
/// back from the store), and shared by the store write, every live watcher and every watch
/// frame, which sends [`StoredEvent::encoded`] as it is instead of encoding the event again.
#[derive(Debug)]
pub struct StoredEvent {
    pub envelope: EventEnvelope,
    /// The checksummed record (`codec`): the checksum, then `writ_api::encode(&envelope)`.
    record: Vec<u8>,
}

impl StoredEvent {
    /// `writ_api::encode(&self.envelope)`, the payload of a binary watch frame.
    pub fn encoded(&self) -> &[u8] {
        &self.record[crate::codec::CHECKSUM_BYTES..]
    }
}

/// What has been applied, guarded together so readers see one consistent position.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    pub state: LedgerState,
    pub last_applied: Option<LogIdOf<TypeConfig>>,
    pub membership: StoredMembershipOf<TypeConfig>,
    /// Lowest revision this node can replay from its event store.
    pub event_floor: u64,
    /// No stored event is older than this ledger time (a lower bound; unknown after start):
    /// the event log's retention looks at the store only once it may hold something to drop.
    event_floor_at_ms: Option<u64>,
}

/// The state held for writing; dropped, it wakes the async readers waiting for it.
struct Applying<'a> {
    guard: Option<std::sync::RwLockWriteGuard<'a, Applied>>,
    released: &'a tokio::sync::Notify,
}

impl std::ops::Deref for Applying<'_> {
    type Target = Applied;
    fn deref(&self) -> &Applied {
        self.guard.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for Applying<'_> {
    fn deref_mut(&mut self) -> &mut Applied {
        self.guard.as_mut().expect("held until dropped")
    }
}

impl Drop for Applying<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.released.notify_waiters();
    }
}

struct Inner {
    db: Arc<DB>,
    /// The cold rows every state this machine applies reads and writes (`crate::cold`).
    cold: Arc<crate::cold::RocksCold>,
    snapshot_dir: PathBuf,
    /// Started from a restored backup's seed state (`crate::backup`).
    seeded: bool,
    applied: RwLock<Applied>,
    /// Woken each time a writer releases `applied`: async readers wait for it, not the lock.
    released: tokio::sync::Notify,
    events: broadcast::Sender<Arc<StoredEvent>>,
    /// Set once, with the cause, when a read outside openraft (watch, audit) finds a corrupt
    /// record. openraft's own reads stop its core instead (a `Fatal`); either way the node
    /// must stop serving (see `writ_node::LedgerNode::stopped`).
    corruption: tokio::sync::watch::Sender<Option<String>>,
    /// Serials of the revoked role certificates, copied out of the state whenever they change:
    /// every request to the node checks them, and must never wait for the state's lock (a
    /// snapshot build holds it long enough to delay Raft heartbeats into elections).
    role_revocations: RwLock<Arc<std::collections::BTreeSet<String>>>,
    /// Held while a snapshot's transfer file is written, so concurrent peers write it once.
    transfers: std::sync::Mutex<()>,
    /// State revisions of the snapshots built or installed since start, newest last (at most
    /// [`SNAPSHOT_FILES_KEPT`]): how far back a replay may read cold rows.
    snapshot_revisions: std::sync::Mutex<Vec<u64>>,
    /// The revision at or below which the cold rows' dropped versions may go (0: none yet),
    /// raised at each snapshot ([`StateMachine::spawn_cold_purge`] drops them).
    purge_horizon: std::sync::atomic::AtomicU64,
    /// Woken when `purge_horizon` rises, and when the store closes.
    purge_due: Arc<tokio::sync::Notify>,
    /// Where that purge stands; held through each of its batches and through a snapshot's
    /// install, which replaces the family it reads and starts it over.
    cold_purge: std::sync::Mutex<crate::cold::Purge>,
    /// Per tenant, the audit sequence below which this node has deleted the records retention
    /// dropped (since it started): an apply deletes only what retention dropped since.
    audit_deleted_below: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
    /// Per tenant, where the event log's retention last stopped writing its records out
    /// (`crate::audit_rows::write_out`): a hint, checked before it is used. Held through each
    /// step of that retention and through a snapshot's install, which replaces what it reads.
    positions_from: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
    /// Woken when an apply finds events past the event log's retention
    /// ([`StateMachine::spawn_event_log_retention`]), and when the store closes.
    trim_due: Arc<tokio::sync::Notify>,
}

impl Inner {
    /// One batch of the cold rows' purge up to the current horizon (`crate::cold::Purge::step`);
    /// a failed one starts the purge over, since it may have written part of itself.
    fn purge_step(&self) -> io::Result<Option<u64>> {
        let horizon = self.purge_horizon.load(std::sync::atomic::Ordering::Relaxed);
        let mut purge = self.cold_purge.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let step = purge.step(&self.db, horizon);
        if step.is_err() {
            *purge = Default::default();
        }
        step
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The background tasks hold the store weakly: they wake, find it gone and end.
        self.trim_due.notify_one();
        self.purge_due.notify_one();
    }
}

/// The state machine handed to openraft; clones share everything (it is also the builder).
#[derive(Clone)]
pub struct StateMachine {
    inner: Arc<Inner>,
}

/// On-disk snapshot: position, membership and the checksummed encoded payload.
#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    last_applied: Option<LogIdOf<TypeConfig>>,
    membership: StoredMembershipOf<TypeConfig>,
    /// `format::wrap(SNAPSHOT_MAGIC, checked_encode(SnapshotPayload))`; also the bytes streamed
    /// to followers (see `writ_api::format` for the version rules).
    state: Vec<u8>,
}

/// What a snapshot holds: the state and the audit records it retains, in key order. Format 2
/// appends the state's revocations, format 3 its proposals, format 4 its work items and
/// operation histories, format 5 its evidence records and the evidence blobs (key, bytes) the
/// node keeps beside them, format 6 its compacted operations (the state's own serde layout is
/// format 1's; see `LedgerState::encode`).
#[derive(Serialize, Deserialize)]
struct SnapshotPayload {
    state: LedgerState,
    audit: Vec<AuditRecordV1>,
    revocations: Revocations,
    proposals: Proposals,
    works: Works,
    history: History,
    evidence: Evidence,
    blobs: Vec<(Vec<u8>, Vec<u8>)>,
    compacted: Compacted,
}

/// A snapshot of state format 5 (no compacted operations).
#[derive(Deserialize)]
struct SnapshotPayloadV5 {
    state: LedgerState,
    audit: Vec<AuditRecordV1>,
    revocations: Revocations,
    proposals: Proposals,
    works: Works,
    history: History,
    evidence: Evidence,
    blobs: Vec<(Vec<u8>, Vec<u8>)>,
}

type Compacted = std::collections::BTreeMap<String, std::collections::BTreeMap<String, writ_api::operation::Operation>>;

type Evidence =
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, writ_api::evidence::EvidenceBlobV1>>;

/// A snapshot of state format 4 (no evidence).
#[derive(Deserialize)]
struct SnapshotPayloadV4 {
    state: LedgerState,
    audit: Vec<AuditRecordV1>,
    revocations: Revocations,
    proposals: Proposals,
    works: Works,
    history: History,
}

type Proposals = std::collections::BTreeMap<String, std::collections::BTreeMap<String, ProposalV1>>;
type Works = std::collections::BTreeMap<String, std::collections::BTreeMap<String, writ_api::work::WorkItem>>;
type History =
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, Vec<writ_api::operation::TransitionV1>>>;

impl SnapshotPayload {
    #[cfg(test)]
    fn of(state: LedgerState, audit: Vec<AuditRecordV1>, blobs: Vec<(Vec<u8>, Vec<u8>)>) -> SnapshotPayload {
        SnapshotPayload {
            revocations: state.revocations.clone(),
            proposals: state.proposals.clone(),
            works: state.works.clone(),
            history: state.history.clone(),
            evidence: state.evidence.clone(),
            compacted: state.compacted.clone(),
            state,
            audit,
            blobs,
        }
    }

    fn older(state: LedgerState, audit: Vec<AuditRecordV1>, revocations: Revocations, proposals: Proposals) -> Self {
        SnapshotPayload {
            state,
            audit,
            revocations,
            proposals,
            works: Works::default(),
            history: History::default(),
            evidence: Evidence::default(),
            blobs: Vec::new(),
            compacted: Compacted::default(),
        }
    }
}

/// A snapshot of state format 3 (no work items or histories).
#[derive(Deserialize)]
struct SnapshotPayloadV3 {
    state: LedgerState,
    audit: Vec<AuditRecordV1>,
    revocations: Revocations,
    proposals: Proposals,
}

/// A snapshot of state format 2 (no proposals).
#[derive(Deserialize)]
struct SnapshotPayloadV2 {
    state: LedgerState,
    audit: Vec<AuditRecordV1>,
    revocations: Revocations,
}

/// A snapshot of state format 1 (no revocations).
#[derive(Deserialize)]
struct SnapshotPayloadV1 {
    state: LedgerState,
    audit: Vec<AuditRecordV1>,
}

impl StateMachine {
    /// The state machine over `db`, starting from `seed` (a restored backup's state: what the
    /// node holds before its log's first entry) or the empty state.
    pub(crate) fn new(db: Arc<DB>, snapshot_dir: PathBuf, seed: Option<LedgerState>) -> io::Result<Self> {
        std::fs::create_dir_all(&snapshot_dir)?;
        let (events, _) = broadcast::channel(WATCH_BUFFER_EVENTS);
        let seeded = seed.is_some();
        let mut applied = Applied { state: seed.unwrap_or_default(), ..Default::default() };
        let cold = Arc::new(crate::cold::RocksCold::new(db.clone()));
        adopt(&db, &cold, &mut applied.state)?;
        let sm = StateMachine {
            inner: Arc::new(Inner {
                db,
                snapshot_dir,
                seeded,
                applied: RwLock::new(applied),
                released: tokio::sync::Notify::new(),
                events,
                corruption: tokio::sync::watch::channel(None).0,
                role_revocations: Default::default(),
                transfers: Default::default(),
                snapshot_revisions: Default::default(),
                purge_horizon: Default::default(),
                purge_due: Default::default(),
                cold_purge: Default::default(),
                audit_deleted_below: Default::default(),
                positions_from: Default::default(),
                trim_due: Default::default(),
                cold,
            }),
        };
        let floor = sm.first_stored_revision()?.unwrap_or(1);
        sm.write_applied().event_floor = floor;
        Ok(sm)
    }

    /// Whether this node's data directory was restored from a backup (its state before the
    /// log's first entry is the backup's).
    pub fn is_seeded(&self) -> bool {
        self.inner.seeded
    }

    pub(crate) fn db(&self) -> &DB {
        &self.inner.db
    }

    /// What the node's RocksDB holds in memory, by part (bytes).
    pub fn rocksdb_memory(&self) -> [(&'static str, u64); 4] {
        crate::memory_parts(&self.inner.db)
    }

    /// How far the node's RocksDB compactions are behind its writes, by part
    /// (`crate::compaction_parts`).
    pub fn rocksdb_compaction(&self) -> [(&'static str, u64); 5] {
        crate::compaction_parts(&self.inner.db)
    }

    /// A consistent read of the applied state. While an apply holds the state, the wait
    /// happens off the async runtime's worker (`off_runtime`): readers waiting out a long
    /// apply on every worker would otherwise stop the whole runtime, Raft's heartbeats with it.
    pub fn read(&self) -> RwLockReadGuard<'_, Applied> {
        if let Some(guard) = self.try_read() {
            return guard;
        }
        let started = std::time::Instant::now();
        let guard = off_runtime(|| self.inner.applied.read().expect("state machine lock poisoned"));
        metrics::histogram!("writ_state_read_wait_seconds", "reader" => "blocking")
            .record(started.elapsed().as_secs_f64());
        guard
    }

    /// The state for reading, unless a writer holds it or waits for it.
    fn try_read(&self) -> Option<RwLockReadGuard<'_, Applied>> {
        match self.inner.applied.try_read() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::WouldBlock) => None,
            // A poisoned lock means a panic while applying, which already is fatal for the node.
            Err(std::sync::TryLockError::Poisoned(_)) => panic!("state machine lock poisoned"),
        }
    }

    /// [`Self::read`] for async callers: while an apply holds the state, the task yields until
    /// the apply releases it, and its worker runs other tasks meanwhile.
    pub async fn read_async(&self) -> RwLockReadGuard<'_, Applied> {
        let mut waited: Option<std::time::Instant> = None;
        loop {
            let released = self.inner.released.notified();
            tokio::pin!(released);
            // Registered before the attempt, so a release between the two still wakes it.
            released.as_mut().enable();
            if let Some(guard) = self.try_read() {
                if let Some(started) = waited {
                    let waited = started.elapsed().as_secs_f64();
                    metrics::histogram!("writ_state_read_wait_seconds", "reader" => "async").record(waited);
                }
                return guard;
            }
            waited.get_or_insert_with(std::time::Instant::now);
            released.await;
        }
    }

    fn write_applied(&self) -> Applying<'_> {
        let guard = self.inner.applied.write().expect("state machine lock poisoned");
        Applying { guard: Some(guard), released: &self.inner.released }
    }

    /// Whether the role certificate with (normalized) serial `serial` is revoked, without
    /// taking the state's lock.
    pub fn role_certificate_revoked(&self, serial: &str) -> bool {
        self.inner.role_revocations.read().unwrap_or_else(|e| e.into_inner()).contains(serial)
    }

    fn refresh_role_revocations(&self, state: &LedgerState) {
        let serials = Arc::new(state.revocations.role_certificates.keys().cloned().collect());
        *self.inner.role_revocations.write().unwrap_or_else(|e| e.into_inner()) = serials;
    }

    /// Follows the corruption latch: `Some(cause)` once a read found a corrupt record.
    pub fn corruption(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.inner.corruption.subscribe()
    }

    /// Passes a read's result through, latching the cause when it is corruption
    /// (`InvalidData`, what `checked_decode` reports).
    fn latch<T>(&self, read: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &read {
            if e.kind() == io::ErrorKind::InvalidData {
                tracing::error!(error = %e, "corrupt record in the store: the node stops");
                self.inner.corruption.send_if_modified(|cause| {
                    let first = cause.is_none();
                    if first {
                        *cause = Some(e.to_string());
                    }
                    first
                });
            }
        }
        read
    }

    /// Live events, in revision order, from the moment of subscription.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<StoredEvent>> {
        self.inner.events.subscribe()
    }

    /// Stored events with `revision >= from`, at most `limit`.
    pub fn events_from(&self, from: u64, limit: usize) -> io::Result<Vec<Arc<StoredEvent>>> {
        self.latch(self.read_events_from(from, limit))
    }

    fn read_events_from(&self, from: u64, limit: usize) -> io::Result<Vec<Arc<StoredEvent>>> {
        let cf = self.inner.db.cf_handle(CF_EVENTS).expect("column families are created at open");
        let start = from.to_be_bytes();
        let mut out = Vec::new();
        for item in self.inner.db.iterator_cf(cf, IteratorMode::From(&start, Direction::Forward)).take(limit) {
            let (_, value) = item.map_err(io::Error::other)?;
            let envelope = checked_decode(&value, "event")?;
            out.push(Arc::new(StoredEvent { envelope, record: value.into_vec() }));
        }
        Ok(out)
    }

    /// A tenant's audit records after sequence `after`, matching `filter`: at most `limit`
    /// records, scanning at most [`audit::AUDIT_SCAN_MAX`]. Returns the records and the cursor to
    /// continue from (`None` at the end). Cursors are sequences, so they stay valid while
    /// records are appended or retention drops old ones.
    /// The bytes of an evidence blob (`writ_api::evidence::blob_key`), if this node keeps them.
    pub fn evidence_blob(&self, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        let cf = self.inner.db.cf_handle(CF_EVIDENCE).expect("column families are created at open");
        self.latch(self.inner.db.get_cf(cf, key).map_err(io::Error::other))
    }

    pub fn audit_page(
        &self,
        tenant_id: &str,
        after: u64,
        limit: usize,
        filter: &AuditFilter,
    ) -> io::Result<(Vec<AuditRecord>, Option<u64>)> {
        self.latch(self.read_audit_page(tenant_id, after, limit, filter))
    }

    fn read_audit_page(
        &self,
        tenant_id: &str,
        after: u64,
        limit: usize,
        filter: &AuditFilter,
    ) -> io::Result<(Vec<AuditRecord>, Option<u64>)> {
        let (first, next) = match self.read().state.audit.get(tenant_id) {
            Some(i) => (i.first_seq, i.next_seq),
            None => return Ok((Vec::new(), None)),
        };
        let cf = self.inner.db.cf_handle(CF_AUDIT).expect("column families are created at open");
        let mut opts = rocksdb::ReadOptions::default();
        opts.set_iterate_upper_bound(record_key(tenant_id, next));
        let start = record_key(tenant_id, after.saturating_add(1).max(first));
        let db = &self.inner.db;
        let mut events = crate::audit_rows::EventReader::new(db, None);
        let records = db.iterator_cf_opt(cf, opts, IteratorMode::From(&start, Direction::Forward)).map(
            |item| -> io::Result<AuditRecord> {
                let (key, value) = item.map_err(io::Error::other)?;
                if let Some(record) = crate::audit_rows::record_of(&key, &value, |r| events.read(r))? {
                    return Ok(record);
                }
                // The event left the log after this page began: its retention wrote the
                // record out whole first.
                let row = db.get_cf(cf, &key).map_err(io::Error::other)?.unwrap_or_default();
                crate::audit_rows::record_of(&key, &row, |_| Ok(None))?.ok_or_else(crate::audit_rows::event_gone)
            },
        );
        audit::page(records, after, limit, filter)
    }

    /// Runs the event log's retention in the background (SPEC L9): whenever an apply finds
    /// events past it, steps of [`Self::trim_events`] follow one another, each followed by a
    /// rest [`TRIM_REST_PER_WORK`] times as long as the step, until none is due.
    pub fn spawn_event_log_retention(&self) -> io::Result<()> {
        let due = self.inner.trim_due.clone();
        self.spawn_paced(due, TRIM_REST_PER_WORK, "writ-retention", "the event log's retention", |sm| {
            let started = std::time::Instant::now();
            let more = sm.trim_events();
            metrics::histogram!("writ_event_log_retention_step_seconds").record(started.elapsed().as_secs_f64());
            more
        })
    }

    /// Drops the cold rows' versions no replay from a kept snapshot can read, in the
    /// background: whenever a snapshot raises the horizon ([`Self::snapshot_taken`]), batches of
    /// `crate::cold::Purge` follow one another, each followed by a rest
    /// [`PURGE_REST_PER_WORK`] times as long as the batch, until none is left below it.
    pub fn spawn_cold_purge(&self) -> io::Result<()> {
        let due = self.inner.purge_due.clone();
        self.spawn_paced(due, PURGE_REST_PER_WORK, "writ-cold-purge", "the cold rows' purge", |sm| {
            let dropped = sm.inner.purge_step()?;
            if let Some(n) = dropped {
                metrics::counter!("writ_cold_versions_dropped_total").increment(n);
            }
            Ok(dropped.is_some())
        })
    }

    /// Background work at a bounded share of a core, and only of what the rest leaves: a
    /// thread of its own (`thread`) at the lowest CPU priority ([`crate::lower_own_priority`]),
    /// so Raft's timers and applies go first whenever the cores are short. Whenever `due` is
    /// woken, it runs `step` again and again, each run followed by a rest `rest_per_work` times
    /// as long as it took, until it returns that nothing more is due (or fails: logged, and it
    /// runs when next woken). Holds the store only while a step runs; ends once it is closed.
    /// Fails only when the thread cannot be started.
    fn spawn_paced(
        &self,
        due: Arc<tokio::sync::Notify>,
        rest_per_work: u32,
        thread: &str,
        what: &'static str,
        step: fn(&StateMachine) -> io::Result<bool>,
    ) -> io::Result<()> {
        let store = Arc::downgrade(&self.inner);
        let paced = move || {
            crate::lower_own_priority(what);
            loop {
                futures::executor::block_on(due.notified());
                loop {
                    let Some(inner) = store.upgrade() else { return };
                    let started = std::time::Instant::now();
                    let more = step(&StateMachine { inner }).unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "{what} failed; it runs again when next due");
                        false
                    });
                    std::thread::sleep(started.elapsed() * rest_per_work);
                    if !more {
                        break;
                    }
                }
            }
        };
        std::thread::Builder::new().name(thread.into()).spawn(paced).map(drop)
    }

    /// One step of the event log's retention: drops stored events older than
    /// [`EVENT_LOG_KEPT_MS`] before the ledger's time, at most [`TRIM_PAGE_EVENTS`], writing
    /// out whole the records of theirs the audit trail still retains, and raises the floor
    /// watchers are held to. Returns whether more is due. Every node drops the same events by
    /// the same rule; when is its own.
    pub(crate) fn trim_events(&self) -> io::Result<bool> {
        // Held throughout: a snapshot's install replaces what this reads.
        let mut from = self.inner.positions_from.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // The floor moves only here and at an install, both under `from`: it holds while the
        // due events are read, without the state (which applies wait for).
        let (floor, oldest_at, now) = {
            let a = self.read();
            (a.event_floor, a.event_floor_at_ms, a.state.clock_ms)
        };
        let cutoff = now.saturating_sub(EVENT_LOG_KEPT_MS);
        if oldest_at.is_some_and(|at| at > cutoff) {
            return Ok(false);
        }
        let (due, kept) = self.latch(self.events_due(floor, cutoff))?;
        let (new_floor, oldest_at) = match (kept, due.last()) {
            (Some((revision, at_ms)), _) => (revision, Some(at_ms)),
            // Everything read goes; a full page may be followed by more to drop.
            (None, Some(last)) if due.len() == TRIM_PAGE_EVENTS => (last.revision + 1, None),
            (None, Some(last)) => (last.revision + 1, Some(now)),
            (None, None) => (floor, Some(now)),
        };
        if new_floor > floor {
            // The records still retained of the events that go are written out whole first, in
            // the same batch (`crate::audit_rows`).
            let mut batch = WriteBatch::default();
            let dropped: Vec<&EventEnvelope> = due.iter().collect();
            // The state is read (not written) until the batch is written: no apply may retire
            // the records written out in between.
            let a = self.read();
            let written =
                crate::audit_rows::write_out(&self.inner.db, &mut batch, &a.state, &dropped, new_floor, &mut from)?;
            let cf = self.inner.db.cf_handle(CF_EVENTS).expect("column families are created at open");
            batch.delete_range_cf(cf, 0u64.to_be_bytes(), new_floor.to_be_bytes());
            self.inner.db.write(batch).map_err(io::Error::other)?;
            drop(a);
            metrics::counter!("writ_events_trimmed_total").increment(new_floor - floor);
            metrics::counter!("writ_audit_records_written_out_total").increment(written);
        }
        let mut a = self.write_applied();
        a.event_floor = a.event_floor.max(new_floor);
        a.event_floor_at_ms = oldest_at;
        Ok(oldest_at.is_none())
    }

    /// The stored events from revision `from` at or before ledger time `cutoff` (at most
    /// [`TRIM_PAGE_EVENTS`]), and the revision and time of the first event after it, when read.
    fn events_due(&self, from: u64, cutoff: u64) -> io::Result<EventsDue> {
        let cf = self.inner.db.cf_handle(CF_EVENTS).expect("column families are created at open");
        let start = from.to_be_bytes();
        let mut due = Vec::new();
        for item in self.inner.db.iterator_cf(cf, IteratorMode::From(&start, Direction::Forward)) {
            let (_, value) = item.map_err(io::Error::other)?;
            let envelope: EventEnvelope = checked_decode(&value, "event")?;
            if envelope.at_ms > cutoff {
                return Ok((due, Some((envelope.revision, envelope.at_ms))));
            }
            due.push(envelope);
            if due.len() == TRIM_PAGE_EVENTS {
                break;
            }
        }
        Ok((due, None))
    }

    fn first_stored_revision(&self) -> io::Result<Option<u64>> {
        Ok(self.events_from(0, 1)?.first().map(|e| e.envelope.revision))
    }

    fn last_stored_revision(&self) -> io::Result<Option<u64>> {
        let cf = self.inner.db.cf_handle(CF_EVENTS).expect("column families are created at open");
        match self.inner.db.iterator_cf(cf, IteratorMode::End).next() {
            None => Ok(None),
            Some(item) => {
                let (_, value) = item.map_err(io::Error::other)?;
                let env: EventEnvelope = checked_decode(&value, "event")?;
                Ok(Some(env.revision))
            }
        }
    }

    fn snapshot_path(&self, last: &Option<LogIdOf<TypeConfig>>) -> PathBuf {
        let index = last.as_ref().map_or(0, |l| l.index());
        self.inner.snapshot_dir.join(format!("snapshot-{index:020}.snap"))
    }

    /// Where the network layer assembles a snapshot being received (beside the snapshots, so
    /// installing it is a rename).
    pub fn incoming_dir(&self) -> io::Result<PathBuf> {
        let dir = self.inner.snapshot_dir.join("incoming");
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// Snapshot files by position, oldest first: this format's (`.snap`) and older ones (`.bin`).
    fn snapshot_files(&self) -> io::Result<Vec<PathBuf>> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.inner.snapshot_dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "bin" || x == "snap"))
            .collect();
        files.sort();
        Ok(files)
    }

    /// Keeps the newest [`SNAPSHOT_FILES_KEPT`] snapshot files, and the transfer files of those
    /// only (finished, or being written: a crash part-way leaves a partial one behind).
    fn prune_snapshots(&self) -> io::Result<()> {
        let files = self.snapshot_files()?;
        let dropped = files.len().saturating_sub(SNAPSHOT_FILES_KEPT);
        for old in &files[..dropped] {
            std::fs::remove_file(old)?;
        }
        let kept: Vec<PathBuf> = files[dropped..].iter().map(|f| f.with_extension(TRANSFER_EXTENSION)).collect();
        for entry in std::fs::read_dir(&self.inner.snapshot_dir)? {
            let path = entry?.path();
            let transfer = path.extension().is_some_and(|x| x == TRANSFER_EXTENSION || x == TRANSFER_PART_EXTENSION);
            if transfer && !kept.contains(&path.with_extension(TRANSFER_EXTENSION)) {
                std::fs::remove_file(&path)?;
            }
        }
        Ok(())
    }

    /// Builds a snapshot file of what is applied (`crate::snapshot`): the state only, copied
    /// under the read lock and written without it. Its events, audit records, evidence blobs
    /// and cold rows stay in the column families, which apply writes without the WAL
    /// ([`APPLIED_FAMILIES`]): they are flushed to their tables before the snapshot exists,
    /// since the log entries that wrote them may be purged behind it (everything applied up to
    /// the snapshot is in the memtables by then: apply writes under the write lock).
    fn build_snapshot_file(&self) -> io::Result<(SnapshotHeader, PathBuf)> {
        let (header, state) = {
            let a = self.read();
            let header = SnapshotHeader { last_applied: a.last_applied, membership: a.membership.clone() };
            (header, a.state.clone())
        };
        for name in APPLIED_FAMILIES {
            let cf = self.inner.db.cf_handle(name).expect("column families are created at open");
            self.inner.db.flush_cf(cf).map_err(io::Error::other)?;
        }
        let path = self.snapshot_path(&header.last_applied);
        let tmp = path.with_extension("tmp");
        crate::snapshot::write(&tmp, Contents::StateOnly, &header, &state, std::iter::empty())?;
        std::fs::rename(&tmp, &path)?;
        sync_dir(&self.inner.snapshot_dir)?;
        self.prune_snapshots()?;
        if let Some(horizon) = self.snapshot_taken(state.revision) {
            self.inner.purge_horizon.fetch_max(horizon, std::sync::atomic::Ordering::Relaxed);
            self.inner.purge_due.notify_one();
        }
        Ok((header, path))
    }

    /// Notes a snapshot at state revision `revision` as this node's newest; once every kept
    /// snapshot's revision is known, the oldest of them: how far back a replay may read cold
    /// rows, so what only older reads could see may go (`crate::cold::Purge`).
    fn snapshot_taken(&self, revision: u64) -> Option<u64> {
        let mut kept = self.inner.snapshot_revisions.lock().unwrap_or_else(|e| e.into_inner());
        kept.push(revision);
        if kept.len() > SNAPSHOT_FILES_KEPT {
            kept.remove(0);
        }
        (kept.len() == SNAPSHOT_FILES_KEPT).then(|| kept[0])
    }

    /// The file a peer installs for this node's snapshot `path`: the file itself when it carries
    /// its records (one this node received); for a state-only one, its state, then
    /// every audit record, evidence blob and cold row of one RocksDB snapshot of the column families.
    /// Those may be ahead of the state (taken later); a peer that installs it replays the log
    /// from the snapshot's position, which writes the same records under the same keys and
    /// applies the same retention, so it converges on the same records. Written once per
    /// snapshot (`.xfer` beside it), then reused: by every peer, and by a resumed transfer,
    /// which needs the same bytes.
    pub(crate) fn transfer_file(&self, path: &Path) -> io::Result<PathBuf> {
        let (header, contents, reader) = crate::snapshot::open(path)?;
        if contents == Contents::WithRecords {
            return Ok(path.to_path_buf());
        }
        let _one_at_a_time = self.inner.transfers.lock().unwrap_or_else(|e| e.into_inner());
        let out = path.with_extension(TRANSFER_EXTENSION);
        if out.exists() {
            return Ok(out);
        }
        let state = crate::snapshot::read_state(reader)?;
        let db = &self.inner.db;
        let view = db.snapshot();
        let kinds = [(FRAME_AUDIT, CF_AUDIT), (FRAME_EVIDENCE, CF_EVIDENCE), (FRAME_COLD, CF_COLD)];
        let records = stored_records(db, &view, &kinds);
        let tmp = out.with_extension(TRANSFER_PART_EXTENSION);
        let summary = crate::snapshot::write(&tmp, Contents::WithRecords, &header, &state, records)?;
        std::fs::rename(&tmp, &out)?;
        sync_dir(&self.inner.snapshot_dir)?;
        tracing::info!(file = %out.display(), audit = summary.audit_records, blobs = summary.evidence_blobs, bytes = summary.bytes, "snapshot transfer file written");
        Ok(out)
    }

    /// Installs `snapshot` at `meta` (`crate::snapshot`): the file becomes this node's newest
    /// snapshot first (so a crash part-way installs it again on restart), then the records it
    /// carries replace the audit and evidence column families, streamed, and its state the
    /// applied one. This node's own state-only snapshot (a restart) installs its state alone:
    /// its records are already in the column families. Another store's state-only snapshot
    /// (the in-process harness) is completed from that store first.
    fn install_snapshot_file(&self, meta: &SnapshotMetaOf<TypeConfig>, snapshot: &SnapshotHandle) -> io::Result<()> {
        // No step of the event log's retention runs while the audit family and events change,
        // nor a batch of the cold rows' purge while that family does; the purge starts over.
        let mut positions_from = self.inner.positions_from.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut cold_purge = self.inner.cold_purge.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *cold_purge = Default::default();
        let own = snapshot.origin.as_ref().is_some_and(|o| Arc::ptr_eq(&o.inner, &self.inner));
        let src = if own { snapshot.path.clone() } else { snapshot.transfer_file()? };
        let src = src.as_path();
        if !own && crate::snapshot::contents(src)? == Contents::StateOnly {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a state-only snapshot of another node, without its audit records",
            ));
        }
        let dest = self.snapshot_path(&meta.last_log_id);
        if src != dest {
            let tmp = dest.with_extension("tmp");
            if src.starts_with(&self.inner.snapshot_dir) {
                std::fs::rename(src, &tmp)?;
            } else {
                // Another store's file (tests, the in-process harness): copied, never moved.
                std::fs::copy(src, &tmp)?;
                std::fs::File::open(&tmp)?.sync_all()?;
            }
            std::fs::rename(&tmp, &dest)?;
            sync_dir(&self.inner.snapshot_dir)?;
        }
        let (header, contents, reader) = crate::snapshot::open(&dest)?;
        if header.last_applied != meta.last_log_id || header.membership != meta.last_membership {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the snapshot file is not at the position installed",
            ));
        }
        let (mut state, records) = match contents {
            Contents::WithRecords => self.install_records(reader)?,
            Contents::StateOnly => (crate::snapshot::read_state(reader)?, 0),
        };
        adopt(&self.inner.db, &self.inner.cold, &mut state)?;
        self.snapshot_taken(state.revision);
        // The audit family now holds the snapshot's records only.
        self.inner.audit_deleted_below.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        positions_from.clear();
        let db = &self.inner.db;
        // Stored events are committed history, so they agree with any snapshot. Keep them if
        // they reach the snapshot's revision (a restart); if they stop short (a lagging or wiped
        // node), the gap cannot be filled here: drop them and start after the snapshot.
        let stored_through = self.last_stored_revision()?;
        let keeps_history = stored_through.is_some_and(|last| last >= state.revision);
        if !keeps_history {
            let cf = db.cf_handle(CF_EVENTS).expect("column families are created at open");
            db.delete_range_cf(cf, 0u64.to_be_bytes(), u64::MAX.to_be_bytes()).map_err(io::Error::other)?;
        }
        let mut a = self.write_applied();
        if !keeps_history {
            a.event_floor = state.revision + 1;
            a.event_floor_at_ms = None;
        }
        a.state = state;
        self.refresh_role_revocations(&a.state);
        a.last_applied = meta.last_log_id;
        a.membership = meta.last_membership.clone();
        drop(a);
        tracing::info!(records, snapshot = %dest.display(), "snapshot installed");
        self.prune_snapshots()
    }

    /// Replaces the audit and evidence column families with the records of a snapshot stream,
    /// streamed in batches; returns its state and how many records it carried.
    fn install_records(&self, reader: std::io::BufReader<std::fs::File>) -> io::Result<(LedgerState, u64)> {
        let db = &self.inner.db;
        let audit_cf = db.cf_handle(CF_AUDIT).expect("column families are created at open");
        let evidence_cf = db.cf_handle(CF_EVIDENCE).expect("column families are created at open");
        let cold_cf = db.cf_handle(CF_COLD).expect("column families are created at open");
        // The audit, evidence and cold-row column families become exactly the snapshot's records.
        let _replacing = self.inner.cold.replace_all();
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(audit_cf, Vec::<u8>::new(), vec![0xff; 1]);
        batch.delete_range_cf(evidence_cf, Vec::<u8>::new(), vec![0xff; 1]);
        batch.delete_range_cf(cold_cf, Vec::<u8>::new(), vec![0xff; 10]);
        let mut records = 0u64;
        let state = crate::snapshot::read_records(reader, |kind, key, value| {
            let cf = match kind {
                FRAME_AUDIT => {
                    crate::codec::record_of(value)?;
                    audit_cf
                }
                FRAME_EVIDENCE => evidence_cf,
                FRAME_COLD => cold_cf,
                other => {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, format!("snapshot record kind {other}")))
                }
            };
            batch.put_cf(cf, key, value);
            records += 1;
            if batch.len() >= INSTALL_BATCH_RECORDS {
                db.write(std::mem::take(&mut batch)).map_err(io::Error::other)?;
            }
            Ok(())
        })?;
        db.write(batch).map_err(io::Error::other)?;
        Ok((state, records))
    }

    /// The newest snapshot file's position and path; a file of the older format (`.bin`, the
    /// whole payload in one encoding) is rewritten in this one first.
    fn current_snapshot(&self) -> io::Result<Option<(SnapshotHeader, PathBuf)>> {
        let Some(path) = self.snapshot_files()?.pop() else { return Ok(None) };
        let path = if crate::snapshot::is_streamed(&path) { path } else { self.rewrite_older_snapshot(&path)? };
        let (header, _, _) = crate::snapshot::open(&path)?;
        Ok(Some((header, path)))
    }

    /// Rewrites a snapshot file of the format before streaming in the streamed one.
    fn rewrite_older_snapshot(&self, old: &Path) -> io::Result<PathBuf> {
        let file: SnapshotFile = checked_decode(&std::fs::read(old)?, "snapshot file")?;
        let header = SnapshotHeader { last_applied: file.last_applied, membership: file.membership };
        let path = self.snapshot_path(&header.last_applied);
        let tmp = path.with_extension("tmp");
        write_payload_file(&tmp, &header, &file.state)?;
        std::fs::rename(&tmp, &path)?;
        std::fs::remove_file(old)?;
        sync_dir(&self.inner.snapshot_dir)?;
        tracing::info!(from = %old.display(), to = %path.display(), "snapshot rewritten in the streamed format");
        Ok(path)
    }
}

impl StateMachine {
    /// Writes a snapshot payload as a node before streamed snapshots sends it (`/raft/snapshot`:
    /// the whole payload in one request) as a snapshot file in `dir`, to be installed.
    pub fn write_older_payload(
        &self,
        dir: &Path,
        meta: &SnapshotMetaOf<TypeConfig>,
        payload: &[u8],
    ) -> io::Result<PathBuf> {
        let header = SnapshotHeader { last_applied: meta.last_log_id, membership: meta.last_membership.clone() };
        let index = header.last_applied.as_ref().map_or(0, |l| l.index());
        let path = dir.join(format!("older-{index:020}.snap"));
        write_payload_file(&path, &header, payload)?;
        Ok(path)
    }
}

/// A snapshot file at `path` from a payload of the format before streaming (versioned).
fn write_payload_file(path: &Path, header: &SnapshotHeader, payload: &[u8]) -> io::Result<()> {
    let SnapshotPayload { state, audit, blobs, .. } = decode_payload(payload)?;
    let audit = audit.into_iter().map(|r| Ok((FRAME_AUDIT, record_key(&r.tenant_id, r.seq), checked_encode(&r)?)));
    let blobs = blobs.into_iter().map(|(k, v)| Ok((FRAME_EVIDENCE, k, v)));
    crate::snapshot::write(path, Contents::WithRecords, header, &state, audit.chain(blobs)).map(|_| ())
}

/// The records of the column families `kinds` names, from one RocksDB snapshot, in key order.
pub(crate) fn stored_records<'a>(
    db: &'a DB,
    view: &'a rocksdb::Snapshot<'a>,
    kinds: &'a [(u8, &'static str)],
) -> impl Iterator<Item = io::Result<crate::snapshot::Record>> + 'a {
    kinds.iter().flat_map(move |(kind, cf)| {
        let handle = db.cf_handle(cf).expect("column families are created at open");
        let mut opts = rocksdb::ReadOptions::default();
        opts.set_snapshot(view);
        opts.set_total_order_seek(true);
        let mut events = crate::audit_rows::EventReader::new(db, Some(view));
        db.iterator_cf_opt(handle, opts, IteratorMode::Start).map(move |item| {
            let (key, value) = item.map_err(io::Error::other)?;
            let value = match *cf {
                CF_AUDIT => crate::audit_rows::whole(&mut events, &key, value.into_vec())?,
                _ => value.into_vec(),
            };
            Ok((*kind, key.to_vec(), value))
        })
    })
}

#[cfg(test)]
fn encode_payload(payload: &SnapshotPayload) -> io::Result<Vec<u8>> {
    Ok(format::wrap(format::SNAPSHOT_MAGIC, &checked_encode(payload)?))
}

/// Reads a snapshot payload of this version or the pre-version layout; a newer version is
/// refused (`InvalidData`, which stops the node: it cannot follow this cluster until upgraded).
/// The state's indexes are rebuilt (they are not encoded).
fn decode_payload(bytes: &[u8]) -> io::Result<SnapshotPayload> {
    let (version, body) = format::unwrap(format::SNAPSHOT_MAGIC, bytes)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("snapshot: {e}")))?;
    let mut payload = match version {
        1 => {
            let SnapshotPayloadV1 { state, audit } = checked_decode(body, "snapshot state")?;
            SnapshotPayload::older(state, audit, Revocations::default(), Proposals::default())
        }
        2 => {
            let SnapshotPayloadV2 { state, audit, revocations } = checked_decode(body, "snapshot state")?;
            SnapshotPayload::older(state, audit, revocations, Proposals::default())
        }
        3 => {
            let SnapshotPayloadV3 { state, audit, revocations, proposals } = checked_decode(body, "snapshot state")?;
            SnapshotPayload::older(state, audit, revocations, proposals)
        }
        4 => {
            let SnapshotPayloadV4 { state, audit, revocations, proposals, works, history } =
                checked_decode(body, "snapshot state")?;
            SnapshotPayload { works, history, ..SnapshotPayload::older(state, audit, revocations, proposals) }
        }
        5 => {
            let SnapshotPayloadV5 { state, audit, revocations, proposals, works, history, evidence, blobs } =
                checked_decode(body, "snapshot state")?;
            SnapshotPayload {
                works,
                history,
                evidence,
                blobs,
                ..SnapshotPayload::older(state, audit, revocations, proposals)
            }
        }
        _ => checked_decode::<SnapshotPayload>(body, "snapshot state")?,
    };
    payload.state.revocations = std::mem::take(&mut payload.revocations);
    payload.state.proposals = std::mem::take(&mut payload.proposals);
    payload.state.works = std::mem::take(&mut payload.works);
    payload.state.history = std::mem::take(&mut payload.history);
    payload.state.evidence = std::mem::take(&mut payload.evidence);
    payload.state.compacted = std::mem::take(&mut payload.compacted);
    payload.state.rebuild_index();
    payload.state.cool();
    Ok(payload)
}

/// Has `state` keep its cold rows in `cold`, writing the rows it holds (a state decoded from an
/// older format, or without a store) there first, with what an older format's upgrade adds to
/// the rows already there (`ColdTier::attach`).
pub(crate) fn adopt(db: &DB, cold: &Arc<crate::cold::RocksCold>, state: &mut LedgerState) -> io::Result<()> {
    state.cold.attach(cold.clone());
    let writes = state.cold.take_writes();
    if writes.is_empty() {
        return Ok(());
    }
    let mut batch = WriteBatch::default();
    let _writing = cold.write(&mut batch, writes);
    db.write(batch).map_err(io::Error::other)
}

/// The column families apply writes: derived from the log, so written without RocksDB's WAL
/// (each byte once to a memtable, not to the WAL as well) and flushed at every snapshot.
pub(crate) const APPLIED_FAMILIES: [&str; 4] = [CF_EVENTS, CF_AUDIT, CF_EVIDENCE, crate::cold::CF_COLD];

/// Write options of what is derived from the log or may be redone (apply's batch, a purge's):
/// no WAL, made durable by a flush of their families (at the next snapshot, or the purge's own).
pub(crate) fn unlogged() -> WriteOptions {
    let mut opts = WriteOptions::default();
    opts.disable_wal(true);
    opts
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Stored events past the event log's retention, and the revision and time of the first event
/// that is not (when read).
type EventsDue = (Vec<EventEnvelope>, Option<(u64, u64)>);

/// What an apply produced: the stored events, and the outcome of each entry someone waits on
/// (`R`: openraft's responder, or a bulk apply's `()`).
type AppliedBatch<R> = (Vec<Arc<StoredEvent>>, Vec<(R, Outcome)>);

/// Runs `work`, which blocks, where it keeps the runtime's other tasks moving: on a
/// multi-threaded runtime the worker hands its queued tasks to another thread first; on a
/// single-threaded one (tests, the simulation) it runs in place.
fn off_runtime<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

impl StateMachine {
    /// Applies committed entries: the rules, the folds and one RocksDB batch with the applied
    /// index, all under the state's lock (so a reader that sees the state also sees its audit
    /// records; snapshots rely on it).
    pub(crate) fn apply_committed<R>(
        &self,
        committed: Vec<(EntryOf<TypeConfig>, Option<R>)>,
    ) -> io::Result<AppliedBatch<R>> {
        let cf = self.inner.db.cf_handle(CF_EVENTS).expect("column families are created at open");
        let audit_cf = self.inner.db.cf_handle(CF_AUDIT).expect("column families are created at open");
        let evidence_cf = self.inner.db.cf_handle(CF_EVIDENCE).expect("column families are created at open");
        let mut batch = WriteBatch::default();
        let mut produced = Vec::new();
        let mut replies = Vec::new();
        let mut audited = std::collections::BTreeSet::new();
        let mut a = self.write_applied();
        let locked = std::time::Instant::now();
        for (entry, responder) in committed {
            let log_id = entry.log_id();
            let (outcome, envelopes, mut audit) = match entry.payload {
                EntryPayload::Blank => (Outcome::Internal, Vec::new(), Vec::new()),
                // A follower's entries have no one waiting: no answer is built for them.
                EntryPayload::Normal(ref req) if responder.is_none() => a.state.execute_unanswered(req),
                EntryPayload::Normal(ref req) => a.state.execute_audited(req),
                EntryPayload::Membership(ref m) => {
                    a.membership = StoredMembershipOf::<TypeConfig>::new(Some(log_id), m.clone());
                    (Outcome::Internal, Vec::new(), Vec::new())
                }
            };
            a.last_applied = Some(log_id);
            if let EntryPayload::Normal(ref req) = entry.payload {
                for (key, bytes) in req.command.stored_blobs(&outcome) {
                    batch.put_cf(evidence_cf, key, bytes);
                }
            }
            // The events the fold already encoded (to chain the audit trail over them).
            let mut encoded: std::collections::VecDeque<(u64, Vec<u8>)> =
                audit.iter_mut().filter_map(|at| Some((at.revision, at.event_bytes.take()?))).collect();
            for env in envelopes {
                // A purged tenant's audit trail and evidence go with it.
                if let writ_api::ledger::Event::EvidenceExpiredV1 { tenant_id, blobs } = &env.event {
                    for r in blobs {
                        batch.delete_cf(
                            evidence_cf,
                            writ_api::evidence::blob_key(tenant_id, &r.operation_id, &r.content_hash),
                        );
                    }
                }
                if let writ_api::ledger::Event::TenantPurgedV1 { tenant_id, .. } = &env.event {
                    let (start, end) = writ_api::evidence::tenant_range(tenant_id);
                    batch.delete_range_cf(audit_cf, &start, &end);
                    batch.delete_range_cf(evidence_cf, &start, &end);
                }
                let record = match encoded.front() {
                    Some((revision, _)) if *revision == env.revision => {
                        checked_bytes(&encoded.pop_front().expect("looked at").1)
                    }
                    _ => checked_encode(&env)?,
                };
                batch.put_cf(cf, env.revision.to_be_bytes(), &record);
                produced.push(Arc::new(StoredEvent { envelope: env, record }));
            }
            // Each event's records as positions in it (`crate::audit_rows`).
            for at in audit {
                crate::audit_rows::put_positions(&self.inner.db, &mut batch, &at);
                audited.insert(at.tenant_id);
            }
            if let Some(responder) = responder {
                replies.push((responder, outcome));
            }
        }
        let writing = self.inner.cold.write(&mut batch, a.state.cold.take_writes());
        // Retention: everything below each tenant's first retained sequence goes — one range
        // deletion when that moved, not one per apply (each stays in the family until a
        // compaction passes it, and every read of the audit trail steps over it).
        let mut deleted_below =
            self.inner.audit_deleted_below.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut moved = Vec::new();
        for tenant in &audited {
            let Some(first) = a.state.audit.get(tenant).map(|index| index.first_seq) else { continue };
            // (Below what was deleted: the tenant was purged and created again.)
            let from = deleted_below.get(tenant).copied().filter(|f| *f <= first).unwrap_or(0);
            if first > from {
                batch.delete_range_cf(audit_cf, record_key(tenant, from), record_key(tenant, first));
                moved.push((tenant.clone(), first));
            }
        }
        // Not in the WAL: the log is durable, a restart replays it from the newest snapshot
        // (which flushed what came before it), and the replay rewrites identical bytes.
        let writing_started = std::time::Instant::now();
        self.inner.db.write_opt(batch, &unlogged()).map_err(io::Error::other)?;
        metrics::histogram!("writ_state_write_seconds").record(writing_started.elapsed().as_secs_f64());
        drop(writing);
        deleted_below.extend(moved);
        drop(deleted_below);
        if produced.iter().any(|e| matches!(e.envelope.event, writ_api::ledger::Event::RoleCertificateRevokedV1 { .. }))
        {
            self.refresh_role_revocations(&a.state);
        }
        let cutoff = a.state.clock_ms.saturating_sub(EVENT_LOG_KEPT_MS);
        let trim_due = a.event_floor_at_ms.is_none_or(|at| at <= cutoff);
        drop(a);
        metrics::histogram!("writ_state_apply_seconds").record(locked.elapsed().as_secs_f64());
        if trim_due {
            self.inner.trim_due.notify_one();
        }
        Ok((produced, replies))
    }

    /// Applies `requests` as committed entries after the last applied one, in its term, as
    /// the leader applies what it proposed: each answered; also answers the last entry. Only
    /// for a stopped node's store (`crate::bulk`): the entries are not in its log, so a
    /// snapshot at the last of them must follow.
    pub(crate) fn apply_appended(
        &self,
        requests: Vec<writ_api::ledger::LedgerRequest>,
    ) -> io::Result<(Vec<Outcome>, Option<EntryOf<TypeConfig>>)> {
        let last =
            self.read().last_applied.ok_or_else(|| io::Error::other("nothing applied yet: start the cluster once"))?;
        let entries = requests
            .into_iter()
            .zip(last.index() + 1..)
            .map(|(req, index)| {
                let log_id = LogIdOf::<TypeConfig>::new(*last.committed_leader_id(), index);
                (EntryOf::<TypeConfig>::new_normal(log_id, req), Some(()))
            })
            .collect::<Vec<_>>();
        let last_entry = entries.last().map(|(entry, _)| entry.clone());
        let (_, replies) = self.apply_committed(entries)?;
        Ok((replies.into_iter().map(|((), outcome)| outcome).collect(), last_entry))
    }

    /// [`Self::build_snapshot_file`], for a stopped node's store.
    pub(crate) fn snapshot_now(&self) -> io::Result<PathBuf> {
        self.build_snapshot_file().map(|(_, path)| path)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    type SnapshotData = SnapshotHandle;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf<TypeConfig, SnapshotHandle>, io::Error> {
        let this = self.clone();
        let (header, path) =
            tokio::task::spawn_blocking(move || this.build_snapshot_file()).await.map_err(io::Error::other)??;
        metrics::counter!("writ_snapshots_built_total").increment(1);
        Ok(SnapshotOf::<TypeConfig, SnapshotHandle> {
            meta: SnapshotMetaOf::<TypeConfig> { last_log_id: header.last_applied, last_membership: header.membership },
            snapshot: SnapshotHandle { path, origin: Some(self.clone()) },
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = SnapshotHandle;
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogIdOf<TypeConfig>>, StoredMembershipOf<TypeConfig>), io::Error> {
        let a = self.read();
        Ok((a.last_applied, a.membership.clone()))
    }

    async fn apply<S>(&mut self, mut entries: S) -> Result<(), io::Error>
    where
        S: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        let mut committed = Vec::new();
        while let Some(item) = entries.try_next().await? {
            committed.push(item);
        }
        // Rules, folds and RocksDB writes run without yielding: off the runtime's other work, so
        // a large entry does not hold up the Raft messages (heartbeats) this node answers.
        let (produced, replies) = off_runtime(|| self.apply_committed(committed))?;
        metrics::counter!("writ_events_applied_total").increment(produced.len() as u64);
        for env in produced {
            // No receiver is fine: nobody is watching.
            let _ = self.inner.events.send(env);
        }
        for (responder, outcome) in replies {
            responder.send(outcome);
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<TypeConfig>,
        snapshot: Self::SnapshotData,
    ) -> Result<(), io::Error> {
        let (this, meta) = (self.clone(), meta.clone());
        tokio::task::spawn_blocking(move || this.install_snapshot_file(&meta, &snapshot))
            .await
            .map_err(io::Error::other)??;
        metrics::counter!("writ_snapshots_installed_total").increment(1);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<SnapshotOf<TypeConfig, Self::SnapshotData>>, io::Error> {
        let this = self.clone();
        let current =
            tokio::task::spawn_blocking(move || this.current_snapshot()).await.map_err(io::Error::other)??;
        Ok(current.map(|(header, path)| SnapshotOf::<TypeConfig, SnapshotHandle> {
            meta: SnapshotMetaOf::<TypeConfig> { last_log_id: header.last_applied, last_membership: header.membership },
            snapshot: SnapshotHandle { path, origin: Some(self.clone()) },
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Creates agent `p-<i>` in tenant `t`, with `metadata`.
    fn create_principal(i: usize, metadata: std::collections::BTreeMap<String, String>) -> writ_api::ledger::Command {
        let spec = writ_api::principal::PrincipalSpecV1 {
            principal_id: format!("p-{i}"),
            name: format!("agent-{i}"),
            kind: writ_api::principal::PrincipalKind::Agent,
            preset: None,
            scopes: Default::default(),
            metadata,
        };
        writ_api::ledger::Command::CreatePrincipal { tenant_id: "t".into(), spec }
    }

    /// Audit retention deletes the records it drops, one range each time a tenant's retained
    /// range moves: after applies that each move it, the family holds the retained records
    /// only, and a tenant purged and created again under its id has its new records kept and
    /// dropped the same way.
    #[tokio::test]
    async fn audit_retention_leaves_only_the_retained_records_in_the_family() {
        use openraft::alias::EntryOf;
        use openraft::entry::RaftEntry;
        use writ_api::ledger::{Command, LedgerRequest};
        let dir = tempfile::tempdir().unwrap();
        let (_log, mut sm) = crate::open(dir.path()).unwrap();
        let (mut index, mut stamp_ms) = (0, 1_700_000_000_000);
        let mut apply = |sm: &mut StateMachine, command: Command| {
            index += 1;
            stamp_ms += match command {
                // A deleted tenant is purged once its data's keeping time has passed.
                Command::PurgeTenant { .. } => writ_api::ledger::TENANT_PURGE_AFTER_MS,
                _ => 1,
            };
            let req = LedgerRequest { stamp_ms, trace_id: "tr".into(), command: command.into() };
            let entry = EntryOf::<TypeConfig>::new_normal(openraft::testing::log_id::<TypeConfig>(1, 1, index), req);
            let mut sm = sm.clone();
            async move { sm.apply(futures::stream::iter([Ok((entry, None))])).await.unwrap() }
        };
        let principal = |i: usize| create_principal(i, Default::default());
        let stored = |sm: &StateMachine| {
            let cf = sm.inner.db.cf_handle(CF_AUDIT).unwrap();
            sm.inner.db.iterator_cf(cf, IteratorMode::Start).count() as u64
        };
        for life in 0..2 {
            let create = Command::CreateTenant { tenant_id: "t".into(), name: "acme".into(), display_name: None };
            apply(&mut sm, create).await;
            let patch = writ_api::settings::TenantSettingsPatch { audit_max_events: Some(3), ..Default::default() };
            apply(&mut sm, Command::SetTenantSettings { tenant_id: "t".into(), patch }).await;
            for i in 0..8 {
                apply(&mut sm, principal(i)).await;
            }
            let kept = sm.read().state.audit["t"].len();
            assert!(sm.read().state.audit["t"].first_seq > 5, "life {life}: retention moved");
            assert_eq!(stored(&sm), kept, "life {life}: only the retained records are stored");
            apply(&mut sm, Command::DeleteTenant { tenant_id: "t".into(), note: None }).await;
            apply(&mut sm, Command::PurgeTenant { tenant_id: "t".into() }).await;
            assert_eq!(stored(&sm), 0, "life {life}: purged with its tenant");
        }
    }

    /// The event log's retention runs beside applies: an apply that finds events past it wakes
    /// the task, which drops them (writing out the records still retained) over as many steps
    /// as they take; the task holds the store only while a step runs, so it closes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_event_log_retention_runs_beside_applies_and_lets_the_store_close() {
        use openraft::alias::EntryOf;
        use writ_api::audit::StoredRow;
        use writ_api::ledger::{Command, LedgerRequest};
        let dir = tempfile::tempdir().unwrap();
        let (log, sm) = crate::open(dir.path()).unwrap();
        sm.spawn_event_log_retention().unwrap();
        let mut index = 0;
        let mut apply = |stamp_ms: u64, command: Command| {
            index += 1;
            let req = LedgerRequest { stamp_ms, trace_id: "tr".into(), command: command.into() };
            let entry = EntryOf::<TypeConfig>::new_normal(openraft::testing::log_id::<TypeConfig>(1, 1, index), req);
            let mut sm = sm.clone();
            async move { sm.apply(futures::stream::iter([Ok((entry, None))])).await.unwrap() }
        };
        let t0 = 1_700_000_000_000;
        apply(t0, Command::CreateTenant { tenant_id: "t".into(), name: "acme".into(), display_name: None }).await;
        // More events than one step drops, each with its record retained.
        let patch = writ_api::settings::TenantSettingsPatch { audit_max_events: Some(1_000_000), ..Default::default() };
        apply(t0 + 1, Command::SetTenantSettings { tenant_id: "t".into(), patch }).await;
        for i in 0..TRIM_PAGE_EVENTS + 10 {
            apply(t0 + 2, create_principal(i, Default::default())).await;
        }
        let revision = sm.read().state.revision;
        assert_eq!(sm.read().event_floor, 1, "nothing is a week old yet");
        apply(t0 + EVENT_LOG_KEPT_MS + 100, create_principal(0, Default::default())).await;
        for _ in 0..1000 {
            if sm.read().event_floor > revision {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(sm.read().event_floor, sm.read().state.revision, "only the newest event stays");
        let whole = {
            let cf = sm.inner.db.cf_handle(CF_AUDIT).unwrap();
            let rows = sm.inner.db.iterator_cf(cf, IteratorMode::Start).map(|kv| kv.unwrap().1.to_vec());
            rows.filter(|v| matches!(crate::codec::row_of(v).unwrap(), StoredRow::Record(_))).count()
        };
        assert!(whole > TRIM_PAGE_EVENTS, "the retained records were written out whole: {whole}");
        drop((log, sm));
        assert!(reopens(dir.path()).await, "the task still holds the store");
    }

    /// Whether the store at `dir` opens within ten seconds: once every task let go of it.
    async fn reopens(dir: &std::path::Path) -> bool {
        for _ in 0..1000 {
            if crate::open(dir).is_ok() {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        false
    }

    /// A snapshot that raises the purge horizon leaves the cold rows' dropped versions to the
    /// background purge: the build returns with them still stored, and the purge drops them
    /// (only those at or below the older kept snapshot's revision), then lets the store close.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_snapshot_leaves_the_cold_rows_purge_to_the_background() {
        use writ_api::cold::PendingRow;
        let dir = tempfile::tempdir().unwrap();
        let (log, sm) = crate::open(dir.path()).unwrap();
        let key = [&writ_api::cold::tenant_prefix("t", 1)[..], b"o\x00\x01a"].concat();
        let put = |revision, value: &[u8], replaces| {
            let row = PendingRow { revision, value: Some(value.to_vec()), replaces };
            let rows = [(key.clone(), row)].into_iter().collect();
            sm.inner.cold.commit(writ_api::cold::ColdWrites { rows, dropped: vec![] }).unwrap();
        };
        let stored = || {
            let cf = sm.inner.db.cf_handle(CF_COLD).unwrap();
            sm.inner.db.iterator_cf(cf, IteratorMode::Start).count()
        };
        let snapshot_at = |revision, index| {
            let mut a = sm.write_applied();
            (a.state.revision, a.last_applied) = (revision, Some(openraft::testing::log_id::<TypeConfig>(1, 1, index)));
            drop(a);
            sm.build_snapshot_file().unwrap();
        };
        put(1, b"v1", false);
        // Replaced at 5: v1 and the garbage row naming it may go once no replay reads before 5.
        put(5, b"v2", true);
        snapshot_at(3, 1);
        snapshot_at(6, 2);
        snapshot_at(7, 3);
        assert_eq!(stored(), 3, "the builds purge nothing themselves");
        sm.spawn_cold_purge().unwrap();
        for _ in 0..1000 {
            if stored() == 1 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(stored(), 1, "v2 alone, the horizon 6 past the replacement");
        drop((log, sm));
        assert!(reopens(dir.path()).await, "the purge still holds the store");
    }

    /// Apply stores each record as its position in its event, and a list renders it from the
    /// event as the record a pure state builds; a peer's transfer file carries whole records.
    /// When the event log's retention drops the events, the records still retained are written
    /// out whole first, and those audit retention dropped stay dropped.
    #[tokio::test]
    async fn records_are_stored_as_positions_until_their_events_leave_the_log() {
        use openraft::alias::EntryOf;
        use writ_api::audit::StoredRow;
        use writ_api::ledger::{Command, LedgerRequest};
        let dir = tempfile::tempdir().unwrap();
        let (_log, sm) = crate::open(dir.path()).unwrap();
        let mut pure = LedgerState::default();
        let expected = std::cell::RefCell::new(Vec::new());
        let mut index = 0;
        let mut apply = |stamp_ms: u64, command: Command| {
            index += 1;
            let req = LedgerRequest { stamp_ms, trace_id: "tr".into(), command: command.into() };
            let (_, events, audited) = pure.execute_audited(&req);
            expected.borrow_mut().extend(writ_api::trail::records_of(&events, &audited));
            let entry = EntryOf::<TypeConfig>::new_normal(openraft::testing::log_id::<TypeConfig>(1, 1, index), req);
            let mut sm = sm.clone();
            async move { sm.apply(futures::stream::iter([Ok((entry, None))])).await.unwrap() }
        };
        let principal = |i: usize| create_principal(i, [("api_key".to_string(), "s3cret".to_string())].into());
        let t0 = 1_700_000_000_000;
        apply(t0, Command::CreateTenant { tenant_id: "t".into(), name: "acme".into(), display_name: None }).await;
        let patch = writ_api::settings::TenantSettingsPatch { audit_max_events: Some(4), ..Default::default() };
        apply(t0 + 1, Command::SetTenantSettings { tenant_id: "t".into(), patch }).await;
        for i in 0..6 {
            apply(t0 + 2 + i as u64, principal(i)).await;
        }
        let rows = |sm: &StateMachine| -> Vec<StoredRow> {
            let cf = sm.inner.db.cf_handle(CF_AUDIT).unwrap();
            let payload = |v: &[u8]| crate::codec::checked_payload(v, "row").unwrap().to_vec();
            let rows = sm.inner.db.iterator_cf(cf, IteratorMode::Start);
            rows.map(|kv| StoredRow::parse(&payload(&kv.unwrap().1)).unwrap()).collect()
        };
        let page = |sm: &StateMachine| sm.audit_page("t", 0, 100, &AuditFilter::default()).unwrap().0;
        let retained = |expected: &[AuditRecord], first: u64| -> Vec<AuditRecord> {
            expected
                .iter()
                .filter(|r| r.tenant_id == "t" && r.seq >= first)
                .cloned()
                .map(AuditRecord::presented)
                .collect()
        };
        let first = sm.read().state.audit["t"].first_seq;
        assert!(first > 1, "audit retention dropped the oldest");
        assert!(rows(&sm).iter().all(|r| matches!(r, StoredRow::AtEvent { .. })), "positions only");
        assert_eq!(rows(&sm).len(), 4);
        assert!(page(&sm)[0].detail.contains("[REDACTED]"), "{:?}", page(&sm)[0]);
        assert_eq!(page(&sm), retained(&expected.borrow(), first));

        let (header, path) = sm.build_snapshot_file().unwrap();
        let meta =
            SnapshotMetaOf::<TypeConfig> { last_log_id: header.last_applied, last_membership: header.membership };
        let peer_dir = tempfile::tempdir().unwrap();
        let (_log, peer) = crate::open(peer_dir.path()).unwrap();
        peer.install_snapshot_file(&meta, &SnapshotHandle { path, origin: Some(sm.clone()) }).unwrap();
        assert!(rows(&peer).iter().all(|r| matches!(r, StoredRow::Record(_))), "whole records");
        assert_eq!(page(&peer), page(&sm));

        // A week on, every event before this one leaves the log; then twice more, the second
        // time without the hint of where the tenant's positions start (as after a restart).
        let mut at = t0;
        for round in 0..3 {
            at += EVENT_LOG_KEPT_MS + 100;
            if round == 2 {
                sm.inner.positions_from.lock().unwrap().clear();
            }
            apply(at, principal(10 + round)).await;
            while sm.trim_events().unwrap() {}
            assert_eq!(sm.read().event_floor, sm.read().state.revision, "only the newest event stays");
            let first = sm.read().state.audit["t"].first_seq;
            let rows = rows(&sm);
            assert_eq!(rows.len(), 4, "round {round}: what retention dropped stays dropped");
            let whole = rows.iter().filter(|r| matches!(r, StoredRow::Record(_))).count();
            assert_eq!(whole, 3, "round {round}: written out whole");
            assert!(matches!(rows[3], StoredRow::AtEvent { .. }), "the newest record's event is still in the log");
            assert_eq!(page(&sm), retained(&expected.borrow(), first));
            apply(at + 1, principal(20 + round)).await;
            apply(at + 2, principal(30 + round)).await;
        }
    }

    /// A snapshot written before revocations existed (state format 1: the payload is the state
    /// and its audit records) still reads, with no revocations; a format-2 snapshot keeps them,
    /// with no proposals; a format-3 snapshot keeps both; a format-4 one its work items and
    /// histories too; a format-5 one its evidence records and blobs; a format-6 one its
    /// compacted operations.
    #[test]
    fn snapshots_of_every_format_read() {
        let mut state = LedgerState { clock_ms: 7, ..Default::default() };
        #[derive(Serialize)]
        struct V1<'a> {
            state: &'a LedgerState,
            audit: Vec<AuditRecordV1>,
        }
        let mut v1 = format::SNAPSHOT_MAGIC.to_vec();
        v1.extend_from_slice(&1u32.to_le_bytes());
        v1.extend_from_slice(&checked_encode(&V1 { state: &state, audit: Vec::new() }).unwrap());
        assert_eq!(decode_payload(&v1).unwrap().state, state);

        state.revocations.signing_keys.insert("k".into(), 5);
        #[derive(Serialize)]
        struct V2<'a> {
            state: &'a LedgerState,
            audit: Vec<AuditRecordV1>,
            revocations: &'a Revocations,
        }
        let mut v2 = format::SNAPSHOT_MAGIC.to_vec();
        v2.extend_from_slice(&2u32.to_le_bytes());
        let body = V2 { state: &state, audit: Vec::new(), revocations: &state.revocations };
        v2.extend_from_slice(&checked_encode(&body).unwrap());
        assert_eq!(decode_payload(&v2).unwrap().state, state);

        let proposal = ProposalV1 {
            proposal_id: "prop-1".into(),
            principal_id: "p".into(),
            action: "a".into(),
            call_digest: "0".repeat(64),
            payload_hash: "1".repeat(64),
            expires_at_ms: 9,
        };
        state.proposals.entry("t".into()).or_default().insert("prop-1".into(), proposal);
        #[derive(Serialize)]
        struct V3<'a> {
            state: &'a LedgerState,
            audit: Vec<AuditRecordV1>,
            revocations: &'a Revocations,
            proposals: &'a Proposals,
        }
        let mut v3 = format::SNAPSHOT_MAGIC.to_vec();
        v3.extend_from_slice(&3u32.to_le_bytes());
        let body =
            V3 { state: &state, audit: Vec::new(), revocations: &state.revocations, proposals: &state.proposals };
        v3.extend_from_slice(&checked_encode(&body).unwrap());
        assert_eq!(decode_payload(&v3).unwrap().state, state);

        let step = writ_api::operation::TransitionV1 {
            from: None,
            to: writ_api::operation::OperationState::Verified,
            cause: "recorded".into(),
            reason: None,
            at_ms: 7,
            revision: 3,
            trace_id: "t".into(),
        };
        state.history.entry("t".into()).or_default().insert("op-1".into(), vec![step]);
        #[derive(Serialize)]
        struct V4<'a> {
            state: &'a LedgerState,
            audit: Vec<AuditRecordV1>,
            revocations: &'a Revocations,
            proposals: &'a Proposals,
            works: &'a Works,
            history: &'a History,
        }
        let mut v4 = format::SNAPSHOT_MAGIC.to_vec();
        v4.extend_from_slice(&4u32.to_le_bytes());
        let body = V4 {
            state: &state,
            audit: Vec::new(),
            revocations: &state.revocations,
            proposals: &state.proposals,
            works: &state.works,
            history: &state.history,
        };
        v4.extend_from_slice(&checked_encode(&body).unwrap());
        assert_eq!(decode_payload(&v4).unwrap().state, state);

        let blob = writ_api::evidence::EvidenceBlobV1 {
            content_hash: "ab".repeat(32),
            operation_id: "op-1".into(),
            mime_type: "text/plain".into(),
            size: 3,
            by: writ_api::evidence::Uploader::Executor { executor_id: "x".into() },
            at_ms: 7,
        };
        let slot = writ_api::state::evidence_slot("op-1", &blob.content_hash);
        state.evidence.entry("t".into()).or_default().insert(slot, blob);
        state.rebuild_index();
        let blobs = vec![(writ_api::evidence::blob_key("t", "op-1", &"ab".repeat(32)), b"abc".to_vec())];
        #[derive(Serialize)]
        struct V5<'a> {
            state: &'a LedgerState,
            audit: Vec<AuditRecordV1>,
            revocations: &'a Revocations,
            proposals: &'a Proposals,
            works: &'a Works,
            history: &'a History,
            evidence: &'a Evidence,
            blobs: &'a Vec<(Vec<u8>, Vec<u8>)>,
        }
        let mut v5 = format::SNAPSHOT_MAGIC.to_vec();
        v5.extend_from_slice(&5u32.to_le_bytes());
        let body = V5 {
            state: &state,
            audit: Vec::new(),
            revocations: &state.revocations,
            proposals: &state.proposals,
            works: &state.works,
            history: &state.history,
            evidence: &state.evidence,
            blobs: &blobs,
        };
        v5.extend_from_slice(&checked_encode(&body).unwrap());
        let read = decode_payload(&v5).unwrap();
        // Read, the evidence records are cold rows, as a decode of any older format makes them.
        let mut cooled = state.clone();
        cooled.cool();
        assert_eq!((&read.state, &read.blobs), (&cooled, &blobs));

        // Format 6 carries retention's bindings.
        let spec = writ_api::operation::OperationSpecV1 {
            operation_id: "op-2".into(),
            principal_id: "p".into(),
            authority_ref: "j".into(),
            action: "a".into(),
            payload_hash: "h".into(),
            input: String::new(),
            idempotency_key: "k".into(),
            deadline_ms: 9,
            cost_units: 1,
            cost_ceiling: None,
            device_id: None,
            work_ref: None,
            preconditions: Default::default(),
            trace_id: "t".into(),
            input_requests: Default::default(),
        };
        let op = writ_api::operation::Operation {
            tenant_id: "t".into(),
            spec,
            state: writ_api::operation::OperationState::Failed,
            executor_id: None,
            fencing_token: None,
            attempts: 0,
            lease_expires_at_ms: None,
            evidence: Vec::new(),
            observations: Vec::new(),
            answers: Default::default(),
            cancel_requested: false,
            cause: "c".into(),
            created_at_ms: 1,
            updated_at_ms: 2,
            revision: 3,
        };
        state.compacted.entry("t".into()).or_default().insert("op-2".into(), op);
        state.rebuild_index();
        let v6 = encode_payload(&SnapshotPayload::of(state.clone(), Vec::new(), blobs.clone())).unwrap();
        let read = decode_payload(&v6).unwrap();
        // Read, the binding is a cold row, as a decode of any older format makes it.
        state.cool();
        assert!(state.operation("t", "op-2").is_some() && state.compacted.is_empty());
        assert_eq!((read.state, read.blobs), (state, blobs));
        // Read as an older format, newer bytes are refused, never misread.
        for older in [1u32, 2, 3, 4, 5] {
            let mut as_older = v6.clone();
            as_older[8..12].copy_from_slice(&older.to_le_bytes());
            assert!(decode_payload(&as_older).is_err(), "format {older}");
        }
    }

    /// Apply writes what it derives without the WAL, and a snapshot flushes it first: a crash
    /// image of the database (its files copied while it is open) holds the events applied
    /// before the snapshot and none applied after it, which a restart replays from the log.
    #[tokio::test]
    async fn applied_rows_skip_the_wal_and_snapshots_flush_them() {
        use openraft::alias::EntryOf;
        use openraft::entry::RaftEntry;
        use writ_api::ledger::{Command, LedgerRequest};
        let dir = tempfile::tempdir().unwrap();
        let (_log, sm) = crate::open(dir.path()).unwrap();
        let apply = |index: u64, command: Command| {
            let req =
                LedgerRequest { stamp_ms: 1_700_000_000_000 + index, trace_id: "tr".into(), command: command.into() };
            let entry = EntryOf::<TypeConfig>::new_normal(openraft::testing::log_id::<TypeConfig>(1, 1, index), req);
            let mut sm = sm.clone();
            async move { sm.apply(futures::stream::iter([Ok((entry, None))])).await.unwrap() }
        };
        let tenant = |id: &str| Command::CreateTenant { tenant_id: id.into(), name: id.into(), display_name: None };
        apply(1, tenant("a")).await;
        sm.build_snapshot_file().unwrap();
        let flushed = sm.read().state.revision;
        apply(2, tenant("b")).await;
        assert!(sm.read().state.revision > flushed);
        let image = tempfile::tempdir().unwrap();
        for file in std::fs::read_dir(dir.path().join("db")).unwrap() {
            let file = file.unwrap();
            std::fs::copy(file.path(), image.path().join(file.file_name())).unwrap();
        }
        let db = crate::open_db(image.path()).unwrap();
        let cf = db.cf_handle(CF_EVENTS).unwrap();
        let revisions: Vec<u64> = db
            .iterator_cf(cf, IteratorMode::Start)
            .map(|kv| u64::from_be_bytes(kv.unwrap().0.as_ref().try_into().unwrap()))
            .collect();
        assert_eq!(revisions, (1..=flushed).collect::<Vec<_>>(), "the events up to the snapshot, no later one");
    }

    /// A store at log index 9 holding one audit record (installed from a snapshot file of the
    /// format before streaming); the record, and the file's position.
    fn store_with_a_record(dir: &Path) -> (StateMachine, AuditRecord, SnapshotMetaOf<TypeConfig>) {
        let seed = tempfile::tempdir().unwrap();
        let (_log, sm) = crate::open(seed.path()).unwrap();
        let (record, meta, path, _) = older_snapshot_with_a_record(&sm);
        let (_log, store) = crate::open(dir).unwrap();
        store.install_snapshot_file(&meta, &SnapshotHandle::file(path)).unwrap();
        (store, record.into(), meta)
    }

    /// A node's own snapshot holds its state only: the audit records stay in its column
    /// families, so a restart installing it keeps them, while a peer gets them in the transfer
    /// file written from those column families (once: a second peer reuses it); a state-only
    /// file without the store that built it is refused, and pruning drops a transfer file with
    /// its snapshot.
    #[test]
    fn own_snapshots_hold_the_state_only_and_peers_get_the_records() {
        let dir = tempfile::tempdir().unwrap();
        let (a, record, _) = store_with_a_record(dir.path());
        let (header, path) = a.build_snapshot_file().unwrap();
        let meta =
            SnapshotMetaOf::<TypeConfig> { last_log_id: header.last_applied, last_membership: header.membership };
        assert_eq!(crate::snapshot::contents(&path).unwrap(), Contents::StateOnly);
        let digest = a.read().state.digest();
        let own = SnapshotHandle { path: path.clone(), origin: Some(a.clone()) };

        let peer_dir = tempfile::tempdir().unwrap();
        let (_log, peer) = crate::open(peer_dir.path()).unwrap();
        peer.install_snapshot_file(&meta, &own).unwrap();
        assert_eq!(peer.read().state.digest(), digest);
        assert_eq!(peer.audit_page("t", 0, 10, &AuditFilter::default()).unwrap().0, vec![record.clone()]);
        let transfer = path.with_extension(TRANSFER_EXTENSION);
        assert_eq!(crate::snapshot::contents(&transfer).unwrap(), Contents::WithRecords);
        let written = std::fs::metadata(&transfer).unwrap().modified().unwrap();
        assert_eq!(own.transfer_file().unwrap(), transfer, "written once, then reused");
        assert_eq!(std::fs::metadata(&transfer).unwrap().modified().unwrap(), written);

        let stranger_dir = tempfile::tempdir().unwrap();
        let (_log, stranger) = crate::open(stranger_dir.path()).unwrap();
        let err = stranger.install_snapshot_file(&meta, &SnapshotHandle::file(path.clone())).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");

        // A restart: the state comes back from the state-only file, the records stay.
        drop((own, a));
        let (_log, a) = crate::open(dir.path()).unwrap();
        let (_, current) = a.current_snapshot().unwrap().expect("a snapshot");
        a.install_snapshot_file(&meta, &SnapshotHandle { path: current, origin: Some(a.clone()) }).unwrap();
        assert_eq!(a.read().state.digest(), digest);
        assert_eq!(a.audit_page("t", 0, 10, &AuditFilter::default()).unwrap().0, vec![record]);

        // Two newer snapshots: the first one's transfer file goes with it, and so does a partial
        // one a crash left behind.
        let partial = path.with_extension(TRANSFER_PART_EXTENSION);
        std::fs::write(&partial, b"cut short").unwrap();
        for index in [10, 11] {
            a.write_applied().last_applied = Some(openraft::testing::log_id::<TypeConfig>(1, 1, index));
            a.build_snapshot_file().unwrap();
        }
        assert!(!path.exists() && !transfer.exists() && !partial.exists(), "pruned with its snapshot");
    }

    /// Writes a snapshot file of the format before streaming (`.bin`) at index 9 into `sm`'s
    /// directory, holding one audit record; returns the record, the position and path of the
    /// streamed file it is rewritten as, and the digest of its state.
    fn older_snapshot_with_a_record(sm: &StateMachine) -> (AuditRecordV1, SnapshotMetaOf<TypeConfig>, PathBuf, String) {
        let mut state = LedgerState { clock_ms: 7, revision: 3, ..Default::default() };
        state.audit.entry("t".into()).or_default().push(7, b"r");
        let record = AuditRecordV1 {
            tenant_id: "t".into(),
            seq: 1,
            at_ms: 7,
            revision: 1,
            trace_id: "tr".into(),
            domain: "tenant".into(),
            operation: "tenant_created".into(),
            outcome: "applied".into(),
            reason_code: None,
            principal_id: None,
            token_id: None,
            parent_token_id: None,
            detail: String::new(),
        };
        let last = Some(openraft::testing::log_id::<TypeConfig>(1, 1, 9));
        let old = SnapshotFile {
            last_applied: last,
            membership: StoredMembershipOf::<TypeConfig>::default(),
            state: encode_payload(&SnapshotPayload::of(state.clone(), vec![record.clone()], Vec::new())).unwrap(),
        };
        let old_path = sm.inner.snapshot_dir.join(format!("snapshot-{:020}.bin", 9));
        std::fs::write(&old_path, checked_encode(&old).unwrap()).unwrap();
        let (header, path) = sm.current_snapshot().unwrap().expect("a snapshot");
        assert_eq!((header.last_applied, path.extension().unwrap().to_str()), (last, Some("snap")));
        assert!(!old_path.exists(), "the older file is replaced");
        let meta = SnapshotMetaOf::<TypeConfig> { last_log_id: last, last_membership: header.membership };
        (record, meta, path, decode_payload(&old.state).unwrap().state.digest())
    }

    /// A snapshot file of the format before streaming (`.bin`: the whole payload in one
    /// encoding) is rewritten in the streamed format when a node starts on it, and installs on
    /// another store with its audit records.
    #[test]
    fn an_older_snapshot_file_is_rewritten_streamed_and_installs() {
        let dir = tempfile::tempdir().unwrap();
        let (_log, sm) = crate::open(dir.path()).unwrap();
        let (record, meta, path, digest) = older_snapshot_with_a_record(&sm);
        let other = tempfile::tempdir().unwrap();
        let (_log2, sm2) = crate::open(other.path()).unwrap();
        sm2.install_snapshot_file(&meta, &SnapshotHandle::file(path.clone())).unwrap();
        assert!(path.exists(), "another store's file is copied, not moved");
        assert_eq!(sm2.read().state.digest(), digest);
        let (records, _) = sm2.audit_page("t", 0, 10, &AuditFilter::default()).unwrap();
        assert_eq!(records, vec![AuditRecord::from(record)]);
    }

    /// Work that blocks (an apply) leaves the runtime's other tasks running, even on a runtime
    /// with a single worker: a task spawned before it makes progress while it blocks.
    #[test]
    fn blocking_work_leaves_the_runtime_serving() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let served = rt.block_on(async {
            let (tx, rx) = std::sync::mpsc::channel();
            let other = tokio::spawn(async move {
                tokio::task::yield_now().await;
                let _ = tx.send(());
            });
            // Spawned onto the single worker, which the apply below would otherwise hold.
            let applied =
                tokio::spawn(
                    async move { off_runtime(|| rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok()) },
                );
            let served = applied.await.unwrap();
            other.await.unwrap();
            served
        });
        assert!(served, "the other task never ran while the work blocked");
    }

    /// Readers of the state on every worker of the runtime, waiting out an apply that holds
    /// it, leave the runtime serving: a task spawned after they wait runs before the apply
    /// ends (as Raft's heartbeats must).
    #[test]
    fn readers_waiting_on_an_apply_leave_the_runtime_serving() {
        let dir = tempfile::tempdir().unwrap();
        let (_log, sm) = crate::open(dir.path()).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let applying = sm.write_applied();
        let (waiting_tx, waiting) = std::sync::mpsc::channel();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (sm, waiting_tx) = (sm.clone(), waiting_tx.clone());
                rt.spawn(async move {
                    waiting_tx.send(()).unwrap();
                    sm.read().state.revision
                })
            })
            .collect();
        for _ in 0..2 {
            waiting.recv_timeout(std::time::Duration::from_secs(10)).expect("a reader started");
        }
        let (served_tx, served) = std::sync::mpsc::channel();
        rt.spawn(async move { served_tx.send(()).unwrap() });
        let ran = served.recv_timeout(std::time::Duration::from_secs(10)).is_ok();
        drop(applying);
        for reader in readers {
            rt.block_on(reader).unwrap();
        }
        assert!(ran, "no task ran while the readers waited on the apply");
    }

    /// An async reader waits for an apply by yielding: on a single-threaded runtime, another
    /// task runs while it waits, and the apply's release wakes it.
    #[test]
    fn an_async_reader_yields_while_an_apply_holds_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let (_log, sm) = crate::open(dir.path()).unwrap();
        let (done_tx, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let revision = rt.block_on(async {
                let mut applying = sm.write_applied();
                applying.state.revision = 7;
                let reader = tokio::spawn({
                    let sm = sm.clone();
                    async move { sm.read_async().await.state.revision }
                });
                // The reader runs first and waits; this task runs again only if it yielded.
                tokio::task::yield_now().await;
                assert!(!reader.is_finished());
                drop(applying);
                reader.await.unwrap()
            });
            done_tx.send(revision).unwrap();
        });
        let revision = done.recv_timeout(std::time::Duration::from_secs(10)).expect("the reader yielded and woke");
        assert_eq!(revision, 7);
    }

    /// On a single-threaded runtime (tests, the simulation) the work runs in place
    /// (`block_in_place` would panic there).
    #[tokio::test]
    async fn blocking_work_runs_in_place_without_other_workers() {
        assert_eq!(off_runtime(|| 7), 7);
    }
}

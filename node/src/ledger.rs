//! `LedgerNode`: one Raft member with its state machine, serving the ledger client API
//! (submit with leader forwarding and leader stamping, read-index linearizable queries, status,
//! membership). The clock and the peer transport are injected, so the same code runs in
//! production (system clock, HTTP) and in the seeded simulation harness.
//!
//! **Watch (SPEC L6).** `watch` streams events in revision order from a revision (optionally one
//! stream or kind): first from the `events` column family, then live from the state machine's
//! broadcast; a watcher that falls more than `WATCH_BUFFER_EVENTS` behind is re-read from the
//! store instead of skipping. A revision below the node's event floor (before an installed
//! snapshot, or older than the event log's retention, `writ_api::retention::EVENT_LOG_KEPT_MS`)
//! is REVISION_COMPACTED, at the start or when the store no longer holds the next one: the
//! follower reloads `GET /client/snapshot` and watches from its revision + 1. An idle stream
//! sends a heartbeat every 500 ms, and only while this node's Raft runs and knows a leader (a
//! heartbeat says "you are current"); otherwise it ends with LEDGER_UNAVAILABLE and the
//! follower reconnects elsewhere.
//!
//! **Ledger time.** The leader's reaper (`start_reaper`, every [`REAPER_PERIOD`]) submits
//! `ExpireDue` for each tenant with a deadline or attempt lease run out, so expiries and
//! unknown effects do not wait for the next command; the ledger decides at the entry's stamp.
//! Every [`RETENTION_PERIOD`] it also submits `ApplyRetention` for each tenant with records past
//! their retention (`writ_api::retention`), entry after entry until none is due.
//!
//! **Fatal path (SPEC L7).** [`LedgerNode::stopped`] resolves when the node must stop serving:
//! openraft's core stopped on a fatal error, or a store reader found a corrupt record.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::StreamExt;
use openraft::alias::LogIdOf;
use openraft::async_runtime::WatchReceiver;
use openraft::network::RaftNetworkFactory;
use openraft::raft::linearizable_read::{Linearizer, ReadLogId};
use openraft::{BasicNode, ReadPolicy, ServerState};
use serde::{Deserialize, Serialize};
use writ_api::dto::{
    ClusterChange, ClusterStatus, MemberStatus, NodeStatus, Query, QueryRequest, QueryResult, Role, SubmitRequest,
    SubmitResponse, WatchFilter, WatchLine, WATCH_HEARTBEAT,
};
use writ_api::ledger::{Command, LedgerRequest, Outcome};
use writ_api::state::LedgerState;
use writ_api::{ReasonCode, Rejection};
use writ_client::{unavailable, CallError, Ledger, WatchStream, LEDGER_CALL_TIMEOUT};
use writ_raft_store::state_machine::StoredEvent;
use writ_raft_store::{Raft, StateMachine, TypeConfig};

/// Events read from the store per catch-up page of a watch.
const WATCH_PAGE_EVENTS: usize = 1000;
/// Lines buffered per watcher before backpressure.
const WATCH_CHANNEL_LINES: usize = 256;

/// What a watch produces before it is rendered as lines or frames: an event as stored (its
/// bytes shared, not copied) or another line.
enum WatchItem {
    Event(Arc<StoredEvent>),
    Line(WatchLine),
}

/// Time source for leader stamps. Apply never reads it (SPEC L4).
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> u64;
}

/// Wall-clock time, `ahead_ms` ahead ([`RaftSettings::clock_ahead_ms`]; 0 but in dev).
pub struct SystemClock {
    pub ahead_ms: u64,
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        now.map_or(0, |d| d.as_millis() as u64).saturating_add(self.ahead_ms)
    }
}

/// What a leader hands a follower so that the follower can serve a linearizable read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReadIndex {
    pub leader_id: u64,
    pub read_log_id: ReadLogId<TypeConfig>,
    pub applied: Option<LogIdOf<TypeConfig>>,
}

/// Node-to-node client-API calls (not Raft RPCs): leader forwarding and read-index.
pub trait Peers: Send + Sync + 'static {
    /// A forwarded submit; [`CallError::NotSent`] when the peer was not reached at all (so
    /// the request may go to another leader).
    fn submit(&self, addr: &str, req: SubmitRequest) -> BoxFuture<'_, Result<SubmitResponse, CallError>>;
    fn read_index(&self, addr: &str) -> BoxFuture<'_, Result<ReadIndex, Rejection>>;
    /// The member's own status; `digest`: with its state digest (an encoding of its whole
    /// state: only operators and tests comparing replicas ask for it).
    fn status(&self, addr: &str, digest: bool) -> BoxFuture<'_, Result<NodeStatus, Rejection>>;
    fn cluster_change(&self, addr: &str, change: ClusterChange) -> BoxFuture<'_, Result<NodeStatus, Rejection>>;
}

/// Raft timing and snapshot settings of a node. The default timing fails a dead leader over in
/// a few hundred milliseconds: openraft's leader lease is `election_max_ms` (a follower that
/// heard a leader votes for no one else within it), so a new leader is elected about
/// `election_max_ms` after the last heartbeat; pre-vote keeps a node that cannot win (one that
/// was partitioned or restarted) from raising the term and deposing a healthy leader.
#[derive(Debug, Clone)]
pub struct RaftSettings {
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// Build a snapshot after this many applied entries since the last one (etcd's
    /// `--snapshot-count` default, 100,000: a snapshot serialized the whole state with its
    /// retained audit records then, so at 10,000 it was about 40 % of a follower's CPU under
    /// P1), [`staggered`] by the node's id.
    pub snapshot_every_entries: u64,
    /// Entries kept in the log behind a snapshot (to catch up slow followers without one).
    pub keep_entries_behind_snapshot: u64,
    /// Also build a snapshot once this many bytes of entries were appended since the last one
    /// (`LedgerNode::start_snapshot_by_log_size`), [`staggered`] by the node's id.
    pub snapshot_every_log_bytes: u64,
    /// Bytes per chunk of a snapshot sent to a peer, and the largest Raft RPC body accepted
    /// (`crate::network::SnapshotChunk`; the latter bounds a chunk, not a snapshot).
    pub snapshot_chunk_bytes: u64,
    pub rpc_body_bytes_max: usize,
    /// How far ahead of its wall clock this node stamps ledger time when it leads (`writ dev
    /// --ledger-clock-ahead-s`: time-driven rules — proposal expiry, retention, purge — seen
    /// without waiting). 0 in every deployment: ledger time is the leader's clock.
    pub clock_ahead_ms: u64,
    /// Advertise (and lead with) at most this ledger version: a node of the new build that
    /// behaves, for the version gate, like an older one (`[raft] ledger_version_max`; testing
    /// a mixed cluster). None: `LEDGER_VERSION`.
    pub ledger_version_max: Option<u32>,
    /// The free space the data directory's filesystem must keep, and the most the directory
    /// may use (`crate::storage`): below or beyond, the storage alarm refuses writes.
    pub min_free_disk_bytes: u64,
    pub data_quota_bytes: Option<u64>,
    /// How often the leader fetches the keys of every issuer known by its URL again
    /// (`LedgerNode::start_issuer_watch`; `[raft] issuer_watch_s`); 0: never.
    pub issuer_watch_ms: u64,
}

/// The default period of the issuer key watch (five minutes).
pub const ISSUER_WATCH_MS_DEFAULT: u64 = 5 * 60 * 1000;

impl Default for RaftSettings {
    fn default() -> Self {
        RaftSettings {
            heartbeat_ms: 40,
            election_min_ms: 120,
            election_max_ms: 240,
            snapshot_every_entries: 100_000,
            keep_entries_behind_snapshot: 1_000,
            snapshot_every_log_bytes: 256 << 20,
            snapshot_chunk_bytes: crate::network::SNAPSHOT_CHUNK_BYTES_DEFAULT,
            rpc_body_bytes_max: crate::http::RAFT_BODY_BYTES_MAX,
            clock_ahead_ms: 0,
            ledger_version_max: None,
            min_free_disk_bytes: crate::storage::MIN_FREE_DISK_BYTES_DEFAULT,
            data_quota_bytes: None,
            issuer_watch_ms: ISSUER_WATCH_MS_DEFAULT,
        }
    }
}

/// A snapshot trigger (`every` entries or bytes) as node `node_id` applies it: `every` times
/// 1.0, 1.1, … 1.4 by the node id, so the members of a cluster, which reach the same log index
/// together, seldom build (clone, encode, sync) at once: three builds at once compete for the
/// same cores and leave no quorum that is not building (the triggers of nodes 1, 2 and 3 meet
/// again only after 11 to 13 of their intervals).
pub fn staggered(every: u64, node_id: u64) -> u64 {
    every.saturating_add(every / 10 * (node_id % 5))
}

impl RaftSettings {
    fn to_openraft(&self, node_id: u64) -> Result<openraft::Config, String> {
        let cfg = openraft::Config {
            cluster_name: "writ".into(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_min_ms,
            election_timeout_max: self.election_max_ms,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(staggered(self.snapshot_every_entries, node_id)),
            max_in_snapshot_log_to_keep: self.keep_entries_behind_snapshot,
            enable_pre_vote: Some(true),
            ..Default::default()
        };
        cfg.validate().map_err(|e| e.to_string())
    }
}

/// One ledger node.
pub struct LedgerNode {
    pub id: u64,
    pub addr: String,
    pub raft: Raft,
    pub sm: StateMachine,
    clock: Arc<dyn Clock>,
    peers: Arc<dyn Peers>,
    /// [`LEADER_WAIT_ELECTIONS`] maximum election timeouts.
    leader_wait: Duration,
    /// When a leader's append (or heartbeat) last reached this node, in ms since `started`
    /// (0: never): what [`LedgerNode::start_failure_detector`] watches.
    leader_contact_ms: std::sync::atomic::AtomicU64,
    started: Instant,
    /// The Raft timings (the failure detector waits out the leader lease).
    election_max: Duration,
    /// The newest ledger version this node advertises and leads with.
    ledger_version: u32,
    /// Other members' ledger versions and storage alarms, and when they said so (the gates'
    /// memory).
    versions: std::sync::Mutex<BTreeMap<u64, (u32, bool, Instant)>>,
    /// This node's disk space (`crate::storage`).
    pub storage: Arc<crate::storage::StorageWatch>,
    /// The log store's counters (bytes appended: the log-size snapshot trigger).
    log_stats: Arc<writ_raft_store::log_store::FlushStats>,
    snapshot_every_log_bytes: u64,
    /// Largest Raft RPC body this node accepts (an append batch, a snapshot chunk).
    pub rpc_body_bytes_max: usize,
    /// Proposes this node's writes while it leads, many commands per entry under load.
    batcher: crate::batcher::Batcher,
    /// When this node last fetched each discovered issuer's keys (at most one fetch per
    /// [`ISSUER_FETCH_INTERVAL_MIN`]: an issuer whose key ids change on every token, or a flood
    /// of tokens with unknown key ids, costs one fetch per interval).
    issuer_fetches: std::sync::Mutex<HashMap<String, Instant>>,
}

/// The least time between two fetches of one issuer's keys by one node.
pub const ISSUER_FETCH_INTERVAL_MIN: Duration = Duration::from_secs(30);

/// What the batcher proposes through: this node's Raft, gated on every member's version.
struct RaftProposer {
    raft: Raft,
    node: std::sync::Weak<LedgerNode>,
}

impl crate::batcher::Propose for RaftProposer {
    fn propose(&self, request: LedgerRequest) -> BoxFuture<'static, crate::batcher::Proposed> {
        let raft = self.raft.clone();
        Box::pin(async move { write(&raft, request).await })
    }

    fn batches_understood(&self) -> BoxFuture<'static, bool> {
        let understood = self.node.upgrade().is_some_and(|node| {
            node.members_said_they_understand(Command::Batch { commands: Vec::new() }.ledger_version())
        });
        Box::pin(async move { understood })
    }
}

/// Proposes one entry through `raft` and waits for its outcome.
async fn write(raft: &Raft, request: LedgerRequest) -> crate::batcher::Proposed {
    use crate::batcher::ProposeError;
    match raft.client_write(request).await {
        Ok(resp) => Ok((resp.log_id.index(), resp.data)),
        // Nothing was appended: leadership was lost (then another node leads), or a new leader
        // has no quorum's ack yet (openraft's lease).
        Err(e) if e.forward_to_leader().is_some() => Err(ProposeError::NotLeader(e.to_string())),
        Err(e) => Err(ProposeError::Unknown(e.to_string())),
    }
}

/// How long a member's advertised ledger version is trusted before it is asked again (a node
/// restarted with a new build is seen within this; every node asks its peers this often).
const VERSION_RECHECK: Duration = Duration::from_secs(10);
/// How soon the version watch asks again while a member's version is not known.
const VERSION_UNKNOWN_RETRY: Duration = Duration::from_millis(500);
/// How long the gate waits for a member's status.
const VERSION_ASK_TIMEOUT: Duration = Duration::from_millis(500);

/// How often a follower's failure detector looks at the leader's silence.
const FAILURE_DETECTOR_TICK: Duration = Duration::from_millis(15);

/// How often the leader looks for operations whose deadline or attempt lease ran out.
pub const REAPER_PERIOD: Duration = Duration::from_millis(250);

/// How often the leader's reaper looks for records past their retention (a look visits every
/// tenant; retention is counted in days, so seconds late are nothing).
pub const RETENTION_PERIOD: Duration = Duration::from_secs(5);

/// Most `ApplyRetention` entries a look submits for one tenant (each retires at most
/// `writ_api::retention::RETIRED_PER_ENTRY` records of each kind): far more than any rate of
/// operations leaves due in one [`RETENTION_PERIOD`].
pub const RETENTION_ENTRIES_PER_LOOK: usize = 100;

/// How long the reaper rests between two retention entries, per unit of time the first took
/// to commit and apply here: every replica applies each entry (a thousand rows of each kind
/// retired), so a backlog retired back to back would take every core of a small host, and the
/// Raft heartbeats and client writes that share them would wait. At one, retention takes at
/// most half of the leader's time and still retires far faster than operations arrive.
const RETENTION_REST_PER_WORK: u32 = 1;

/// Whether `tenant_id` takes changes and has records past their retention at `now`
/// (`reported`: counting reported effects nobody decided, `Command::ApplyRetentionV2`'s).
fn retention_due(st: &writ_api::state::LedgerState, tenant_id: &str, now: u64, reported: bool) -> bool {
    st.tenants.get(tenant_id).is_some_and(|t| t.state != writ_api::ledger::TenantState::Deleted)
        && writ_api::retention::next_due(st, tenant_id, reported).is_some_and(|at| at <= now)
}

/// How often a node compares the bytes appended to its log with its snapshot threshold.
pub const SNAPSHOT_SIZE_CHECK: Duration = Duration::from_secs(1);

/// Bytes per chunk of a streamed backup.
pub const BACKUP_CHUNK_BYTES: usize = 256 * 1024;

/// A `Write` that sends each buffer it is given down a channel (the backup's body); fails once
/// the receiver is gone.
struct ChannelWriter(tokio::sync::mpsc::Sender<io::Result<Vec<u8>>>);

impl io::Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .blocking_send(Ok(buf.to_vec()))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the backup's reader went away"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl writ_tenant_admin::BackupSource for LedgerNode {
    fn backup(&self) -> BoxFuture<'_, Result<writ_tenant_admin::BackupChunks, Rejection>> {
        Box::pin(self.start_backup())
    }
}

/// Longest a submit waits for a leader it can reach (none known, the known one not reached, or
/// this node just lost leadership), in maximum election timeouts, before answering
/// LEDGER_UNAVAILABLE: a new leader is elected about one to two of them after the old one's
/// last heartbeat, so a submit made during a failover lands on the new leader instead of
/// failing (1.92 s with the default timings; the caller's own deadline still bounds it).
pub const LEADER_WAIT_ELECTIONS: u32 = 8;

/// Pause before a leader that could not take a write (see `submit_inner`) looks again.
const LEADER_RECHECK: Duration = Duration::from_millis(10);

/// How long a follower waits for its state machine to reach a read index.
const READ_INDEX_WAIT: Duration = Duration::from_secs(5);

impl LedgerNode {
    /// Opens storage under `dir` and starts the Raft member, with the transport `network` makes
    /// (given the opened log: a transport may copy its cached entries' bytes).
    pub async fn start<N>(
        id: u64,
        addr: String,
        dir: &Path,
        settings: &RaftSettings,
        network: impl FnOnce(&writ_raft_store::LogStore) -> N,
        clock: Arc<dyn Clock>,
        peers: Arc<dyn Peers>,
    ) -> io::Result<Arc<Self>>
    where
        N: RaftNetworkFactory<TypeConfig>,
        N::Network: openraft::network::NetSnapshot<TypeConfig, SnapshotData = writ_raft_store::SnapshotHandle>,
    {
        let config = Arc::new(settings.to_openraft(id).map_err(io::Error::other)?);
        let (log, sm) = writ_raft_store::open(dir)?;
        sm.spawn_event_log_retention()?;
        sm.spawn_cold_purge()?;
        let log_stats = log.stats();
        let network = network(&log);
        let raft = Raft::new(id, config, network, log, sm.clone()).await.map_err(io::Error::other)?;
        let election_max = Duration::from_millis(settings.election_max_ms);
        let leader_wait = election_max * LEADER_WAIT_ELECTIONS;
        Ok(Arc::new_cyclic(|node| LedgerNode {
            batcher: crate::batcher::Batcher::start(
                Arc::new(RaftProposer { raft: raft.clone(), node: node.clone() }),
                crate::batcher::PROPOSALS_IN_FLIGHT_MAX,
                crate::batcher::BATCH_BYTES_MAX.min(settings.rpc_body_bytes_max / 2),
            ),
            id,
            addr,
            raft,
            sm,
            clock,
            peers,
            leader_wait,
            leader_contact_ms: Default::default(),
            started: Instant::now(),
            election_max,
            ledger_version: settings
                .ledger_version_max
                .map_or(writ_api::ledger::LEDGER_VERSION, |cap| cap.min(writ_api::ledger::LEDGER_VERSION)),
            versions: Default::default(),
            issuer_fetches: Default::default(),
            storage: crate::storage::StorageWatch::new(dir, settings.min_free_disk_bytes, settings.data_quota_bytes),
            log_stats,
            snapshot_every_log_bytes: staggered(settings.snapshot_every_log_bytes, id),
            rpc_body_bytes_max: settings.rpc_body_bytes_max,
        }))
    }

    /// Resolves when this node must stop serving, with the cause: its Raft core stopped on a
    /// fatal error (a storage error, corruption found by openraft's reads, a panic in apply),
    /// or a read of the store found a corrupt record. Never resolves on a healthy node;
    /// resolves with "shut down" once the Raft core is shut down.
    pub async fn stopped(&self) -> String {
        let mut metrics = self.raft.metrics();
        let mut corruption = self.sm.corruption();
        loop {
            if let Err(fatal) = &metrics.borrow_watched().running_state {
                return format!("the Raft core stopped: {fatal}");
            }
            if let Some(cause) = corruption.borrow().clone() {
                return format!("storage is corrupt: {cause}");
            }
            tokio::select! {
                changed = metrics.changed() => if changed.is_err() { return "shut down".into() },
                changed = corruption.changed() => if changed.is_err() { return "shut down".into() },
            }
        }
    }

    /// On a leader: asks the voter with the most replicated log to take over at once and waits
    /// (up to `limit`) until another node leads, so a planned stop costs no election timeout.
    /// Anywhere else, or in a one-voter cluster, returns at once.
    pub async fn hand_off_leadership(&self, limit: std::time::Duration) {
        let m = self.raft.metrics().borrow_watched().clone();
        if m.current_leader != Some(self.id) {
            return;
        }
        let voters: Vec<u64> = m.membership_config.membership().voter_ids().filter(|v| *v != self.id).collect();
        let matched = |v: &u64| m.replication.as_ref().and_then(|r| r.get(v).cloned().flatten()).map(|l| l.index());
        let Some(successor) = voters.iter().max_by_key(|v| matched(v)).copied() else {
            return;
        };
        tracing::info!(successor, "handing leadership over before stopping");
        if self.raft.trigger().transfer_leader(successor).await.is_err() {
            return;
        }
        let waited = self
            .raft
            .wait(Some(limit))
            .metrics(|m| m.current_leader.is_some_and(|l| l != self.id), "another node leads")
            .await;
        if waited.is_err() {
            tracing::warn!(successor, "no successor took over in time; stopping anyway");
        }
    }

    /// Hands a leader's append (or heartbeat) to Raft, noting the contact for the failure
    /// detector when Raft took it. The contact is when the request *arrived*: the leader was
    /// alive then. Taking the time after Raft answered (after this node's log flush) made a
    /// follower whose disk fell behind under load see a live leader as silent and ask for
    /// pre-votes it did not need.
    pub async fn append_entries(
        &self,
        req: openraft::raft::AppendEntriesRequest<TypeConfig>,
    ) -> Result<openraft::raft::AppendEntriesResponse<TypeConfig>, openraft::errors::RaftError<TypeConfig>> {
        let arrived = self.started.elapsed().as_millis() as u64;
        let answer = self.raft.append_entries(req).await;
        // A stale leader's append (answered with a higher vote) is no contact with the leader.
        if answer.as_ref().is_ok_and(|a| !matches!(a, openraft::raft::AppendEntriesResponse::HigherVote(_))) {
            // Appends answered out of order never move the contact back.
            self.leader_contact_ms.fetch_max(arrived.max(1), std::sync::atomic::Ordering::Relaxed);
        }
        answer
    }

    /// A follower's failure detector (SPEC P3: a new leader as soon as the old one's lease is
    /// over). openraft's leader lease (the maximum election timeout) makes voters refuse any
    /// candidate while it lasts, so an election timer that fires earlier is wasted and the next
    /// one comes a whole timeout later: a new leader 2–4 minimum timeouts after the last
    /// heartbeat. Here a follower that has heard from a leader and then nothing for the lease
    /// asks for a pre-vote every [`FAILURE_DETECTOR_TICK`] until there is a leader again, so the
    /// election starts right after the lease. Pre-vote keeps it harmless: while this node's own
    /// lease lasts nothing is sent, and a leader a quorum still acknowledges refuses it without
    /// any term change. Stops with the node.
    pub fn start_failure_detector(self: &Arc<Self>) {
        let node = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(FAILURE_DETECTOR_TICK).await;
                let Some(node) = node.upgrade() else { return };
                // Read in place: no copy of the metrics every tick.
                let (stopped, voting_follower) = {
                    let m = node.raft.metrics();
                    let m = m.borrow_watched();
                    let voter = m.membership_config.membership().voter_ids().any(|v| v == node.id);
                    (m.running_state.is_err(), m.state == ServerState::Follower && voter)
                };
                if stopped {
                    return;
                }
                let contact = node.leader_contact_ms.load(std::sync::atomic::Ordering::Relaxed);
                let silent = node.started.elapsed().saturating_sub(Duration::from_millis(contact));
                if voting_follower && contact > 0 && silent > node.election_max {
                    tracing::debug!(silent_ms = silent.as_millis() as u64, "leader silent past its lease: pre-vote");
                    metrics::counter!("writ_node_failure_detector_prevotes_total").increment(1);
                    let _ = node.raft.trigger().elect(true).await;
                }
            }
        });
    }

    /// Builds a snapshot once [`RaftSettings::snapshot_every_log_bytes`] of entries were appended
    /// since the last one (looked at every [`SNAPSHOT_SIZE_CHECK`]): the log is then purged up
    /// to it as usual, so a burst of large entries (evidence, decision batches) cannot grow the
    /// log far beyond that between the entry-count snapshots.
    pub fn start_snapshot_by_log_size(self: &Arc<Self>) {
        let node = Arc::downgrade(self);
        tokio::spawn(async move {
            let (mut seen_snapshot, mut base) = (None, 0u64);
            loop {
                tokio::time::sleep(SNAPSHOT_SIZE_CHECK).await;
                let Some(n) = node.upgrade() else { return };
                let m = n.raft.metrics().borrow_watched().clone();
                if m.running_state.is_err() {
                    return;
                }
                let appended = n.log_stats.bytes.load(std::sync::atomic::Ordering::Relaxed);
                if m.snapshot != seen_snapshot {
                    (seen_snapshot, base) = (m.snapshot, appended);
                } else if appended.saturating_sub(base) >= n.snapshot_every_log_bytes {
                    tracing::info!(bytes = appended - base, "log size reached: building a snapshot");
                    metrics::counter!("writ_snapshots_by_log_size_total").increment(1);
                    base = appended;
                    if let Err(e) = n.raft.trigger().snapshot().await {
                        tracing::warn!(error = %e, "snapshot trigger failed");
                    }
                }
            }
        });
    }

    /// Measures the data directory every [`crate::storage::STORAGE_CHECK`] (the storage alarm)
    /// while the node runs.
    pub fn start_storage_watch(self: &Arc<Self>) {
        let node = Arc::downgrade(self);
        self.storage
            .start(move || node.upgrade().is_some_and(|n| n.raft.metrics().borrow_watched().running_state.is_ok()));
    }

    /// Keeps the members' ledger versions known on every node, leader or not, so that a newly
    /// elected leader gates with what it already heard (a member that died with the old leader
    /// keeps the version it last advertised) and a submit rarely waits to ask.
    pub fn start_version_watch(self: &Arc<Self>) {
        let node = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(n) = node.upgrade() else { return };
                if n.raft.metrics().borrow_watched().running_state.is_err() {
                    return;
                }
                let versions = n.member_versions().await;
                n.raise_ledger_version(&versions).await;
                let behind = n.sm.read_async().await.state.ledger_version < writ_api::ledger::LEDGER_VERSION;
                drop(n);
                // Members not known yet (this node has not learned the membership), or one not
                // heard from (starting, or unreachable when asked), are asked again soon: a
                // leader elected after a member died gates with what was heard before. So is a
                // cluster whose newest version is not in force yet (from cache: no member is
                // asked more often than every `VERSION_RECHECK`), so a new leader raises it at once.
                let all_known = !versions.is_empty() && versions.values().all(Option::is_some);
                tokio::time::sleep(if all_known && !behind { VERSION_RECHECK } else { VERSION_UNKNOWN_RETRY }).await;
            }
        });
    }

    /// Whether the node may serve: no fatal Raft error and no corruption found.
    pub fn is_healthy(&self) -> bool {
        self.raft.metrics().borrow_watched().running_state.is_ok() && self.sm.corruption().borrow().is_none()
    }

    /// Initializes a new cluster with these members (id → address) if this node's log is empty.
    /// A node restored from a backup (`writ node restore`) then seals its restored state into a
    /// snapshot and purges its log before it serves, so a member that joins receives that state
    /// as a snapshot: no log entry holds it.
    pub async fn initialize(&self, members: &BTreeMap<u64, String>) -> Result<(), Rejection> {
        if !self.raft.is_initialized().await.map_err(|e| internal(&e))? {
            let nodes: BTreeMap<u64, BasicNode> =
                members.iter().map(|(id, a)| (*id, BasicNode::new(a.clone()))).collect();
            match self.raft.initialize(nodes).await {
                Ok(()) => {}
                // Another member initialized first, or this node already has a log: both fine.
                Err(openraft::errors::RaftError::APIError(openraft::errors::InitializeError::NotAllowed(_))) => {}
                Err(e) => return Err(internal(&e)),
            }
        }
        if self.sm.is_seeded() && self.raft.metrics().borrow_watched().purged.is_none() {
            let mut rx = self.raft.metrics();
            let applied = tokio::time::timeout(LEDGER_CALL_TIMEOUT, async {
                while rx.borrow_watched().last_applied.is_none() {
                    if rx.changed().await.is_err() {
                        break;
                    }
                }
            })
            .await;
            applied.map_err(|_| unavailable("the restored node did not apply its first entry in time"))?;
            self.change(ClusterChange::Snapshot, false).await?;
            self.change(ClusterChange::PurgeLog, false).await?;
            let purged = self.raft.metrics().borrow_watched().purged.as_ref().map(|p| p.index());
            tracing::info!(purged_through = ?purged, revision = self.sm.read().state.revision, "restored state sealed into a snapshot");
        }
        Ok(())
    }

    /// Starts a backup (`writ_api::backup`) of this node's store, holding every write
    /// acknowledged before the call (a read index first): its bytes arrive in chunks of
    /// [`BACKUP_CHUNK_BYTES`] through a bounded channel as they are read.
    pub async fn start_backup(&self) -> Result<writ_tenant_admin::BackupChunks, Rejection> {
        self.linearize().await?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let (sm, node_id) = (self.sm.clone(), self.id);
        tokio::task::spawn_blocking(move || {
            let mut out = std::io::BufWriter::with_capacity(BACKUP_CHUNK_BYTES, ChannelWriter(tx.clone()));
            let written = sm.write_backup(node_id, &mut out).and_then(|s| {
                std::io::Write::flush(&mut out)?;
                Ok(s)
            });
            match written {
                Ok(s) => {
                    tracing::info!(revision = s.manifest.revision, bytes = s.bytes, sha256 = %s.sha256, "backup written")
                }
                Err(e) => {
                    tracing::warn!(error = %e, "backup failed");
                    let _ = tx.blocking_send(Err(e));
                }
            }
        });
        Ok(rx)
    }

    fn leader(&self) -> Option<(u64, String)> {
        let m = self.raft.metrics().borrow_watched().clone();
        let leader = m.current_leader?;
        let addr = m.membership_config.membership().get_node(&leader)?.addr.clone();
        Some((leader, addr))
    }

    fn is_leader(&self) -> bool {
        self.raft.metrics().borrow_watched().state == ServerState::Leader
    }

    /// Keeps ledger time moving for operations (SPEC D6, D8): while this node leads, every
    /// [`REAPER_PERIOD`] it submits `ExpireDue` for each tenant with a deadline or attempt lease
    /// that has run out, so expiries and unknown effects do not wait for the next command, and
    /// every [`RETENTION_PERIOD`] `ApplyRetention` for each tenant with records past their
    /// retention, until none is due. The ledger decides what is due at the entry's stamp; this
    /// only triggers it. Stops with the node.
    pub fn start_reaper(self: &Arc<Self>) {
        self.while_leading(REAPER_PERIOD, |node, tick| async move {
            let now = node.clock.now_ms();
            let look = tick % (RETENTION_PERIOD.as_millis() / REAPER_PERIOD.as_millis()) as u64 == 0;
            // What is due reads cold rows from RocksDB: on a blocking thread, never on a worker
            // that Raft's heartbeats share.
            let sm = node.sm.clone();
            let due = tokio::task::spawn_blocking(move || {
                let applied = sm.read();
                let st = &applied.state;
                // Operations past a deadline or lease, and evidence past its retention.
                let due = st.index.due.keys().filter(|t| st.index.next_due(t).is_some_and(|at| at <= now));
                let with_evidence = st.cold.tenants.iter().filter(|(_, c)| c.evidence > 0).map(|(t, _)| t);
                let expired = with_evidence.filter(|t| {
                    st.next_evidence_expiry(t).is_some_and(|at| at <= now)
                        && st.index.next_due(t).is_none_or(|at| at > now)
                });
                let expire: Vec<Command> =
                    due.chain(expired).map(|t| Command::ExpireDue { tenant_id: t.clone() }).collect();
                let retire: Vec<String> =
                    st.tenants.keys().filter(|t| look && retention_due(st, t, now, true)).cloned().collect();
                (expire, retire)
            });
            let Ok((expire, retire)) = due.await else { return };
            for command in expire {
                let _ = node.reap(command, now).await;
            }
            for tenant_id in retire {
                node.retire(&tenant_id, now).await;
            }
        });
    }

    /// Records of `tenant_id` past their retention (`writ_api::retention`): an entry retires a
    /// bounded number, so the tenant gets entries until none is due (within a bound per look),
    /// and retention keeps up with any rate of operations the ledger takes. While a member
    /// cannot read `ApplyRetentionV2` yet, `ApplyRetention` retires all but reported effects.
    async fn retire(&self, tenant_id: &str, now: u64) {
        let mut reported = true;
        for _ in 0..RETENTION_ENTRIES_PER_LOOK {
            let command = if reported {
                Command::ApplyRetentionV2 { tenant_id: tenant_id.to_string() }
            } else {
                Command::ApplyRetention { tenant_id: tenant_id.to_string() }
            };
            let started = Instant::now();
            match self.reap(command, now).await {
                Ok(()) => {}
                Err(ReasonCode::LEDGER_VERSION_GATED) if reported => reported = false,
                Err(_) => return,
            }
            let (sm, tenant) = (self.sm.clone(), tenant_id.to_string());
            let due = tokio::task::spawn_blocking(move || retention_due(&sm.read().state, &tenant, now, reported));
            if !due.await.unwrap_or(false) {
                return;
            }
            tokio::time::sleep(started.elapsed() * RETENTION_REST_PER_WORK).await;
        }
    }

    /// On the leader, once every member runs a build of a newer ledger version than the one in
    /// force (`versions`: all known), puts the newest they share in force
    /// (`Command::RaiseLedgerVersion`, from 16 on: older builds have no such command).
    async fn raise_ledger_version(&self, versions: &BTreeMap<u64, Option<u32>>) {
        let Some(shared) = versions.values().copied().collect::<Option<Vec<u32>>>().and_then(|v| v.into_iter().min())
        else {
            return;
        };
        if !self.is_leader() || shared < 16 || shared <= self.sm.read_async().await.state.ledger_version {
            return;
        }
        if self.reap(Command::RaiseLedgerVersion { version: shared }, self.clock.now_ms()).await.is_ok() {
            tracing::info!(version = shared, "ledger version put in force");
        }
    }

    /// Submits a command of the reaper: applied, or why not.
    async fn reap(&self, command: Command, now: u64) -> Result<(), ReasonCode> {
        let kind = command.kind();
        match self.submit_request(SubmitRequest::new(format!("reaper-{now}"), command), false).await {
            Ok(_) => Ok(()),
            // A mixed-version cluster takes a newer command once its last member is upgraded.
            Err(e) if e.reason == ReasonCode::LEDGER_VERSION_GATED => {
                tracing::debug!(command = kind, message = %e.message, "reaper command gated");
                Err(e.reason)
            }
            Err(e) => {
                tracing::warn!(command = kind, reason = %e.reason, message = %e.message, "reaper command failed");
                Err(e.reason)
            }
        }
    }

    /// Runs `work` every `period` while this node leads (with the count of periods so far),
    /// until the node stops or is dropped.
    fn while_leading<F, Fut>(self: &Arc<Self>, period: Duration, mut work: F)
    where
        F: FnMut(Arc<LedgerNode>, u64) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let node = Arc::downgrade(self);
        tokio::spawn(async move {
            for tick in 1u64.. {
                tokio::time::sleep(period).await;
                let Some(node) = node.upgrade() else { return };
                if node.raft.metrics().borrow_watched().running_state.is_err() {
                    return;
                }
                if node.is_leader() {
                    work(node, tick).await;
                }
            }
        });
    }

    /// Keeps discovered issuers' keys current without an operator: while this node leads, every
    /// `period` it fetches each one's keys again ([`LedgerNode::refresh_issuer`]);
    /// `writ_issuer_watch_total{outcome}` counts the looks. Stops with the node.
    pub fn start_issuer_watch(self: &Arc<Self>, period: Duration) {
        if period.is_zero() {
            return;
        }
        self.while_leading(period, |node, _| async move {
            let issuers: Vec<String> = {
                let applied = node.sm.read_async().await;
                let st = &applied.state;
                let active = |t: &str| st.tenants.get(t).is_some_and(|t| t.closed().is_none());
                st.issuer_sources.iter().filter(|(_, s)| active(&s.tenant_id)).map(|(iss, _)| iss.clone()).collect()
            };
            for issuer in issuers {
                let outcome = match node.refresh_issuer(&issuer).await {
                    Ok(Some(_)) => "changed",
                    Ok(None) => "unchanged",
                    Err(e) => {
                        tracing::warn!(%issuer, reason = %e.reason, message = %e.message, "issuer keys not refreshed");
                        "failed"
                    }
                };
                metrics::counter!("writ_issuer_watch_total", "outcome" => outcome).increment(1);
            }
        });
    }

    /// Fetches a discovered issuer's keys again and records them (`ObserveIssuerKeys`):
    /// `Some(revision)` when the ledger took new keys, `None` when they were unchanged or this
    /// node fetched them less than [`ISSUER_FETCH_INTERVAL_MIN`] ago.
    pub async fn refresh_issuer(&self, issuer: &str) -> Result<Option<u64>, Rejection> {
        let source = {
            let applied = self.sm.read_async().await;
            let sources = &applied.state.issuer_sources;
            let source = sources.get(issuer).cloned().ok_or_else(|| {
                Rejection::new(ReasonCode::ISSUER_NOT_FOUND, format!("no issuer '{issuer}' known by its URL"))
            })?;
            let mut fetched = self.issuer_fetches.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let now = Instant::now();
            if fetched.get(issuer).is_some_and(|at| now.duration_since(*at) < ISSUER_FETCH_INTERVAL_MIN) {
                return Ok(None);
            }
            fetched.retain(|iss, _| sources.contains_key(iss));
            fetched.insert(issuer.to_string(), now);
            source
        };
        let keys = writ_client::discovery::fetch_keys(&source.spec).await?;
        let command = Command::ObserveIssuerKeys { tenant_id: source.tenant_id, issuer: issuer.to_string(), keys };
        let req = SubmitRequest::new(format!("issuer-refresh-{}", self.clock.now_ms()), command);
        match self.submit_request(req, false).await?.outcome {
            Outcome::Applied { events, .. } => Ok(events.last().map(|e| e.revision)),
            Outcome::Rejected { reason, message, .. } => Err(Rejection::new(reason, message)),
            other => Err(internal(&format!("unexpected outcome {other:?}"))),
        }
    }

    /// An edge's submit as the log is to record it: the principals its decisions name vouched
    /// for (`writ_api::grant::vouched`), every principal's act verified against the
    /// credential sent with it on this node's applied state (caught up first when the token was
    /// recorded after it) and wrapped in its grant (`writ_api::grant::admit`). The credential
    /// itself goes no further.
    pub async fn admit_edge(&self, edge_id: &str, req: SubmitRequest) -> Result<SubmitRequest, Rejection> {
        let SubmitRequest { trace_id, command, credential, vouchers } = req;
        let recorded_at = credential
            .iter()
            .chain(&vouchers)
            .filter_map(|c| match c {
                writ_api::grant::Credential::Bearer(token) => writ_api::auth::recorded_revision(token),
                writ_api::grant::Credential::Anonymous => None,
            })
            .max();
        if let Some(rev) = recorded_at {
            if rev > self.sm.read_async().await.state.revision {
                self.linearize().await?;
            }
        }
        let node = format!("node:{}", self.id);
        let presenter = writ_api::grant::Presenter { edge_id, node: &node };
        let now = self.clock.now_ms();
        writ_api::grant::vouched(&self.sm.read_async().await.state, &command, &vouchers, &presenter, now)?;
        if writ_api::grant::acts(&command).is_empty() {
            return Ok(SubmitRequest::new(trace_id, command));
        }
        let command =
            writ_api::grant::admit(&self.sm.read_async().await.state, command, credential.as_ref(), &presenter, now)?;
        metrics::counter!("writ_ledger_acts_verified_total").increment(1);
        Ok(SubmitRequest::new(trace_id, command))
    }

    /// Proposes a command; a follower forwards it once to the leader. The leader stamps it.
    /// A submission made for a trace (the caller's, `writ_client::trace`) is a span of it.
    pub async fn submit_request(&self, req: SubmitRequest, forwarded: bool) -> Result<SubmitResponse, Rejection> {
        req.check()?;
        let started = Instant::now();
        let mut span = self.submit_span(&req);
        let submit = tokio::time::timeout(LEDGER_CALL_TIMEOUT, self.submit_inner(req, forwarded));
        let result = writ_client::trace::within(span.context(), submit)
            .await
            .unwrap_or_else(|_| Err(unavailable("commit outcome unknown: deadline passed")));
        metrics::histogram!("writ_ledger_submit_seconds").record(started.elapsed().as_secs_f64());
        metrics::counter!("writ_ledger_submits_total", "ok" => result.is_ok().to_string()).increment(1);
        crate::observe::submitted(&mut span, &result);
        span.end();
        result
    }

    /// The span of a submission made for the current task's trace (inert without one: the
    /// node's own commands, clients that do not trace).
    fn submit_span(&self, req: &SubmitRequest) -> writ_telemetry::Span {
        let kind = req.command.innermost().kind();
        let Some(cx) = writ_client::trace::child(writ_telemetry::span_id()) else {
            return writ_telemetry::Span::inert(writ_api::trace::TraceContext::child_of(None, None, || {
                ([1; 16], [1; 8])
            }));
        };
        let server = opentelemetry::trace::SpanKind::Server;
        let mut span = writ_telemetry::Span::start(cx, server, || format!("writ.ledger.submit {kind}"));
        span.set("writ.command", kind);
        span.set("writ.node.id", self.id as i64);
        span
    }

    /// The leader proposes; a follower forwards once to the leader. With no leader it can
    /// reach, it waits for one (up to [`LEADER_WAIT_ELECTIONS`] election timeouts: an election
    /// under way), and only a request that cannot have been appended anywhere is routed again:
    /// one this node could not append as leader, or one the leader it forwarded to never
    /// received.
    async fn submit_inner(&self, req: SubmitRequest, forwarded: bool) -> Result<SubmitResponse, Rejection> {
        let deadline = tokio::time::Instant::now() + self.leader_wait;
        let mut unreached = None;
        // Shared with the entry the leader proposes, not copied (a batch of decisions is large).
        let SubmitRequest { trace_id, command, credential, vouchers } = req;
        let command = Arc::new(command);
        loop {
            let (leader, addr) = self.await_leader(unreached, deadline).await?;
            if leader == self.id {
                if let Some(refused) = self.storage.refusal(&command, &self.short_members()) {
                    return Err(refused);
                }
                let request = LedgerRequest {
                    stamp_ms: self.clock.now_ms(),
                    trace_id: trace_id.clone(),
                    command: self.gate(&command).await?,
                };
                // A command with evidence bytes is an entry of its own; the rest are batched.
                let proposed = if request.command.carries_blob() {
                    write(&self.raft, request).await
                } else {
                    self.batcher.propose(request).await
                };
                match proposed {
                    Ok((log_index, outcome)) => return Ok(SubmitResponse { log_index, outcome, forwarded: false }),
                    // Nothing was appended: look again shortly, within the deadline.
                    Err(crate::batcher::ProposeError::NotLeader(e)) => {
                        if tokio::time::Instant::now() >= deadline {
                            return Err(unavailable(format!("this node cannot take writes yet: {e}")));
                        }
                        tokio::time::sleep(LEADER_RECHECK).await;
                    }
                    Err(crate::batcher::ProposeError::Unknown(e)) => {
                        return Err(unavailable(format!("commit outcome unknown: {e}")))
                    }
                }
                continue;
            }
            if forwarded {
                return Err(unavailable("this node is not the leader (forwarded request is not forwarded again)"));
            }
            metrics::counter!("writ_ledger_forwards_total").increment(1);
            let req = SubmitRequest {
                trace_id: trace_id.clone(),
                command: Command::clone(&command),
                credential: credential.clone(),
                vouchers: vouchers.clone(),
            };
            match self.peers.submit(&addr, req).await {
                Err(CallError::NotSent(why)) => {
                    tracing::debug!(leader, %why, "leader not reached; waiting for another");
                    unreached = Some(leader);
                }
                other => return other.map(|r| SubmitResponse { forwarded: true, ..r }).map_err(Rejection::from),
            }
        }
    }

    /// The leader (id, address), waiting until `deadline` for one other than `unreached`.
    async fn await_leader(
        &self,
        unreached: Option<u64>,
        deadline: tokio::time::Instant,
    ) -> Result<(u64, String), Rejection> {
        let mut metrics = self.raft.metrics();
        loop {
            if let Some(found) = self.leader().filter(|(id, _)| Some(*id) != unreached) {
                return Ok(found);
            }
            // Metrics change all the time (a ready change would win over an elapsed timeout).
            if tokio::time::Instant::now() >= deadline {
                return Err(unavailable("no leader is known; retry shortly"));
            }
            match tokio::time::timeout_at(deadline, metrics.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(unavailable("this node stopped")),
                Err(_) => return Err(unavailable("no leader is known; retry shortly")),
            }
        }
    }

    /// Leader side of read-index: confirms leadership with a quorum and returns the index a
    /// reader must wait for.
    pub async fn read_index(&self) -> Result<ReadIndex, Rejection> {
        let (read_log_id, applied) = self
            .raft
            .get_read_log_id(ReadPolicy::ReadIndex)
            .await
            .map_err(|e| unavailable(format!("read index unavailable: {e}")))?;
        Ok(ReadIndex { leader_id: self.id, read_log_id, applied })
    }

    /// Waits until this node's state machine reflects every write acknowledged before now.
    async fn linearize(&self) -> Result<(), Rejection> {
        let index = if self.is_leader() {
            self.read_index().await?
        } else {
            let (_, addr) = self.leader().ok_or_else(|| unavailable("no leader is known; retry shortly"))?;
            self.peers.read_index(&addr).await?
        };
        let linearizer = Linearizer::new(index.leader_id, index.read_log_id, index.applied);
        match tokio::time::timeout(READ_INDEX_WAIT, linearizer.await_ready(&self.raft)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(fatal)) => Err(unavailable(format!("node stopped: {fatal}"))),
            Err(_) => Err(unavailable("this node is too far behind to serve a linearizable read")),
        }
    }

    /// Answers a query from this node's state, after read-index unless marked stale.
    pub async fn query_request(&self, req: QueryRequest) -> Result<QueryResult, Rejection> {
        if req.consistency == writ_api::dto::Consistency::Linearizable {
            self.linearize().await?;
        }
        // Evidence and audit bodies are read from the store, not from the in-memory state.
        if let Query::GetEvidence { tenant_id, operation_id, content_hash } = &req.query {
            let blob = self.sm.read_async().await.state.evidence_record(tenant_id, operation_id, content_hash)?.clone();
            let key = writ_api::evidence::blob_key(tenant_id, operation_id, content_hash);
            let bytes = self.sm.evidence_blob(&key).map_err(|e| internal(&e))?;
            let bytes =
                bytes.ok_or_else(|| internal(&format!("evidence {content_hash} is recorded but not stored")))?;
            let content_base64 = writ_api::evidence::to_base64(&bytes);
            return Ok(QueryResult::Evidence(Box::new(writ_api::dto::EvidenceContent { blob, content_base64 })));
        }
        let page = match &req.query {
            Query::ListAudit { tenant_id, after, limit, filter } => {
                Some((tenant_id, after.unwrap_or(0), writ_api::query::page_limit(*limit)?, filter.clone()))
            }
            Query::RecentAudit { tenant_id, limit } => {
                let limit = writ_api::query::page_limit(*limit)?;
                let after =
                    self.sm.read_async().await.state.audit.get(tenant_id).map_or(0, |i| i.recent_cursor(limit as u64));
                Some((tenant_id, after, limit, Default::default()))
            }
            _ => None,
        };
        if let Some((tenant_id, after, limit, filter)) = page {
            let (records, next_cursor) =
                self.sm.audit_page(tenant_id, after, limit, &filter).map_err(|e| internal(&e))?;
            return Ok(QueryResult::Audit { records, next_cursor });
        }
        writ_api::query::answer(&self.sm.read_async().await.state, req.query)
    }

    /// The state after every write acknowledged before the call.
    pub async fn linearized_state(&self) -> Result<LedgerState, Rejection> {
        self.linearize().await?;
        Ok(self.sm.read_async().await.state.clone())
    }

    /// The watch stream: events from `filter.from` in revision order (the store first, then
    /// live), a heartbeat after [`WATCH_HEARTBEAT`] of silence, and an end line when the
    /// store fails. A watcher that falls behind the live buffer is sent back to the store, so
    /// it never misses an event.
    pub fn watch(&self, filter: WatchFilter) -> Result<WatchStream, Rejection> {
        let items = self.watch_items(filter)?;
        Ok(items
            .map(|item| match item {
                WatchItem::Event(e) => WatchLine::Event(Box::new(e.envelope.clone())),
                WatchItem::Line(line) => line,
            })
            .boxed())
    }

    /// [`LedgerNode::watch`] as binary frames ([`WatchLine::frame`]): an event's frame is built
    /// from the bytes it was stored as, so no watcher encodes an event again.
    pub fn watch_frames(&self, filter: WatchFilter) -> Result<BoxStream<'static, Result<Vec<u8>, String>>, Rejection> {
        let items = self.watch_items(filter)?;
        Ok(items
            .map(|item| match item {
                WatchItem::Event(e) => WatchLine::event_frame(e.encoded()),
                WatchItem::Line(line) => line.frame(),
            })
            .boxed())
    }

    fn watch_items(&self, filter: WatchFilter) -> Result<BoxStream<'static, WatchItem>, Rejection> {
        // Subscribe before reading the store so that no event falls between the two.
        let mut live = self.sm.subscribe();
        let (floor, current) = {
            let a = self.sm.read();
            (a.event_floor, a.state.revision)
        };
        let from = filter.from.unwrap_or(current + 1);
        if from < floor {
            return Err(Rejection::new(
                ReasonCode::REVISION_COMPACTED,
                format!("revision {from} is not retained on this node; the oldest is {floor}"),
            ));
        }
        let (tx, rx) = tokio::sync::mpsc::channel::<WatchItem>(WATCH_CHANNEL_LINES);
        let line = WatchItem::Line;
        let sm = self.sm.clone();
        let raft = self.raft.metrics();
        tokio::spawn(async move {
            let mut next = from;
            loop {
                // Catch up from the store until it has nothing at or after `next`.
                loop {
                    let page = match sm.events_from(next, WATCH_PAGE_EVENTS) {
                        Ok(p) => p,
                        Err(e) => {
                            tracing::error!(error = %e, "watch store read failed");
                            let end =
                                WatchLine::End { end: ReasonCode::INTERNAL, message: "store read failed".into(), next };
                            let _ = tx.send(line(end)).await;
                            return;
                        }
                    };
                    if page.is_empty() {
                        break;
                    }
                    if page[0].envelope.revision > next {
                        // The event log's retention dropped what this watcher had yet to read.
                        let message = format!("revisions from {next} are no longer retained; reload a snapshot");
                        let end = WatchLine::End { end: ReasonCode::REVISION_COMPACTED, message, next };
                        let _ = tx.send(line(end)).await;
                        return;
                    }
                    for e in page {
                        next = e.envelope.revision + 1;
                        if filter.matches(&e.envelope) && tx.send(WatchItem::Event(e)).await.is_err() {
                            return;
                        }
                    }
                }
                // Follow live events; a gap sends us back to the store.
                loop {
                    // Stop as soon as the watcher goes away, even when no event arrives.
                    let received = tokio::select! {
                        r = live.recv() => r,
                        _ = tx.closed() => return,
                        _ = tokio::time::sleep(WATCH_HEARTBEAT) => {
                            // A heartbeat tells followers they are current: only a node that
                            // runs and knows a leader may say so. Otherwise the stream ends
                            // and the watcher goes to another node (or fails closed).
                            let healthy = {
                                let m = raft.borrow_watched();
                                m.running_state.is_ok() && m.current_leader.is_some() && m.state != ServerState::Shutdown
                            };
                            if !healthy {
                                let message = "this node has no leader; watch another node".to_string();
                                let end = WatchLine::End { end: ReasonCode::LEDGER_UNAVAILABLE, message, next };
                                let _ = tx.send(line(end)).await;
                                return;
                            }
                            if tx.send(line(WatchLine::Heartbeat { heartbeat: next - 1 })).await.is_err() {
                                return;
                            }
                            continue;
                        }
                    };
                    match received {
                        Ok(e) if e.envelope.revision < next => continue,
                        Ok(e) if e.envelope.revision > next => break,
                        Ok(e) => {
                            next = e.envelope.revision + 1;
                            if filter.matches(&e.envelope) && tx.send(WatchItem::Event(e)).await.is_err() {
                                return;
                            }
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                            live = sm.subscribe();
                            break;
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    }
                }
            }
        });
        Ok(futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|l| (l, rx)) }).boxed())
    }

    /// Whether the role certificate with (normalized) serial `serial` is revoked in this
    /// node's applied state.
    pub fn role_certificate_revoked(&self, serial: &str) -> bool {
        self.sm.role_certificate_revoked(serial)
    }

    /// This node's own view: Raft position, membership and state digest.
    pub async fn status(&self) -> NodeStatus {
        self.status_view(true).await
    }

    /// This node's own view, with the state digest only when `digest` (it encodes the whole
    /// state under the state's read lock, which holds apply back: under P1 a follower asked for
    /// its status spent seconds per answer and fell behind; hashing is done after the lock).
    pub async fn status_view(&self, digest: bool) -> NodeStatus {
        let m = self.raft.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership();
        let role = match m.state {
            ServerState::Leader => Role::Leader,
            ServerState::Candidate => Role::Candidate,
            ServerState::Learner => Role::Learner,
            ServerState::Shutdown => Role::Shutdown,
            ServerState::Follower => Role::Follower,
        };
        let applied = self.sm.read_async().await;
        let encoded = digest.then(|| applied.state.encode());
        let status = NodeStatus {
            node_id: self.id,
            addr: self.addr.clone(),
            role,
            term: m.current_term,
            leader: m.current_leader,
            last_log_index: m.last_log_index,
            last_applied_index: applied.last_applied.as_ref().map(|l| l.index()),
            snapshot_index: m.snapshot.as_ref().map(|l| l.index()),
            purged_index: m.purged.as_ref().map(|l| l.index()),
            voters: membership.voter_ids().collect(),
            learners: membership.learner_ids().collect(),
            members: membership.nodes().map(|(id, n)| (*id, n.addr.clone())).collect(),
            revision: applied.state.revision,
            state_digest: String::new(),
            ledger_version: self.ledger_version,
            ledger_version_in_force: applied.state.ledger_version,
            event_floor: applied.event_floor,
            storage_alarm: self.storage.alarm(),
            short_members: self.short_members(),
        };
        drop(applied);
        NodeStatus { state_digest: encoded.map(|e| writ_api::sha256_hex(&e)).unwrap_or_default(), ..status }
    }

    /// The version gate: a command newer than some member's ledger version is refused before
    /// it is proposed (the member would stop at it), naming who holds the cluster back.
    /// Returns what to propose: the command, or (while a member cannot read them) the command
    /// with its request decisions recorded without authority chains and its blobs as base64.
    async fn gate(&self, command: &Arc<Command>) -> Result<Arc<Command>, Rejection> {
        let needs = self.sm.read_async().await.state.ledger_version_of(command);
        let behind = self.members_behind(needs).await;
        if behind.is_empty() {
            return Ok(command.clone());
        }
        let plain = command.without_authority_chains().with_blobs_as_base64();
        let plain_needs = self.sm.read_async().await.state.ledger_version_of(&plain);
        if plain != **command && self.members_behind(plain_needs).await.is_empty() {
            return Ok(Arc::new(plain));
        }
        metrics::counter!("writ_ledger_version_gated_total").increment(1);
        Err(Rejection::new(
            ReasonCode::LEDGER_VERSION_GATED,
            format!("{} needs ledger version {needs}; upgrade node(s) {} first", command.kind(), behind.join(", ")),
        ))
    }

    /// The members that do not (or may not) understand ledger version `needs`, as "id
    /// (version)".
    async fn members_behind(&self, needs: u32) -> Vec<String> {
        if needs <= 1 {
            return Vec::new(); // every version reads these
        }
        let versions = self.member_versions().await;
        versions
            .iter()
            .filter(|(_, v)| v.is_none_or(|v| v < needs))
            .map(|(id, v)| format!("{id} ({})", v.map_or("unknown".into(), |v| format!("version {v}"))))
            .collect()
    }

    /// Every member's ledger version as its own status last said (this node's own; others asked
    /// at most every [`VERSION_RECHECK`], the last answer kept while one is unreachable; `None`
    /// for a member never heard from).
    pub async fn member_versions(&self) -> BTreeMap<u64, Option<u32>> {
        let members: Vec<(u64, String)> = {
            let m = self.raft.metrics();
            let m = m.borrow_watched();
            m.membership_config.membership().nodes().map(|(id, n)| (*id, n.addr.clone())).collect()
        };
        let mut out = BTreeMap::new();
        for (id, addr) in members {
            if id == self.id {
                out.insert(id, Some(self.ledger_version));
                continue;
            }
            let known = self.versions.lock().expect("versions").get(&id).copied();
            let fresh = known.filter(|(_, _, at)| at.elapsed() < VERSION_RECHECK).map(|(v, _, _)| v);
            let version = match fresh {
                Some(v) => Some(v),
                None => match tokio::time::timeout(VERSION_ASK_TIMEOUT, self.peers.status(&addr, false)).await {
                    Ok(Ok(status)) => {
                        let (v, short) = (status.ledger_version, status.storage_alarm);
                        self.versions.lock().expect("versions").insert(id, (v, short, Instant::now()));
                        Some(v)
                    }
                    _ => known.map(|(v, _, _)| v),
                },
            };
            out.insert(id, version);
        }
        out
    }

    /// Whether every member last said (to the version watch, without asking now: this is on
    /// the write path) that it understands ledger version `needs`. A member never heard from
    /// has not.
    fn members_said_they_understand(&self, needs: u32) -> bool {
        let m = self.raft.metrics();
        let members: Vec<u64> = m.borrow_watched().membership_config.membership().nodes().map(|(id, _)| *id).collect();
        let versions = self.versions.lock().expect("versions");
        self.ledger_version >= needs
            && members.iter().all(|id| *id == self.id || versions.get(id).is_some_and(|(v, _, _)| *v >= needs))
    }

    /// Members whose storage alarm was on when they last said (asked every
    /// [`VERSION_RECHECK`] by the version watch).
    fn short_members(&self) -> Vec<u64> {
        self.versions.lock().expect("versions").iter().filter(|(_, (_, short, _))| *short).map(|(id, _)| *id).collect()
    }

    /// Every member's own status, asked of each member directly.
    pub async fn cluster_status(&self) -> ClusterStatus {
        let me = self.status().await;
        let mut members = Vec::new();
        for (id, addr) in &me.members {
            let (status, error) = if *id == self.id {
                (Some(me.clone()), None)
            } else {
                match self.peers.status(addr, true).await {
                    Ok(s) => (Some(s), None),
                    Err(e) => (None, Some(e.message)),
                }
            };
            members.push(MemberStatus { node_id: *id, addr: addr.clone(), status, error });
        }
        ClusterStatus { leader: me.leader, members }
    }

    /// Membership and maintenance. Membership changes run on the leader (forwarded once).
    pub async fn change(&self, change: ClusterChange, forwarded: bool) -> Result<NodeStatus, Rejection> {
        let membership_change =
            matches!(change, ClusterChange::AddLearner { .. } | ClusterChange::ChangeMembership { .. });
        if membership_change && !self.is_leader() {
            if forwarded {
                return Err(unavailable("this node is not the leader"));
            }
            let (_, addr) = self.leader().ok_or_else(|| unavailable("no leader is known; retry shortly"))?;
            return self.peers.cluster_change(&addr, change).await;
        }
        if membership_change {
            // A leader fresh from its election has not yet committed its first entry, so the
            // membership before it is not known committed and openraft refuses any change as
            // "already undergoing a configuration change". Waiting for read-index (which covers
            // that first entry) makes a change right after bootstrap or failover succeed.
            self.linearize().await?;
        }
        let invalid = |e: &dyn std::fmt::Display| Rejection::new(ReasonCode::CLUSTER_CHANGE_INVALID, e.to_string());
        match change {
            ClusterChange::AddLearner { node_id, addr } => {
                self.raft.add_learner(node_id, BasicNode::new(addr), true).await.map_err(|e| invalid(&e))?;
            }
            ClusterChange::ChangeMembership { voters } => {
                if voters.is_empty() {
                    return Err(Rejection::new(ReasonCode::CLUSTER_CHANGE_INVALID, "voters must not be empty"));
                }
                let voters: BTreeSet<u64> = voters.into_iter().collect();
                self.raft.change_membership(voters, false).await.map_err(|e| invalid(&e))?;
            }
            ClusterChange::Snapshot => {
                let (before, applied) = {
                    let m = self.raft.metrics().borrow_watched().clone();
                    (m.snapshot, m.last_applied)
                };
                // Already covering everything applied: nothing to build (and nothing to wait for).
                if before.as_ref().map(|s| s.index()) == applied.as_ref().map(|a| a.index()) {
                    return Ok(self.status().await);
                }
                self.raft.trigger().snapshot().await.map_err(|e| internal(&e))?;
                // Wait (bounded) for the snapshot to be built so the caller can rely on it.
                let mut rx = self.raft.metrics();
                let _ = tokio::time::timeout(LEDGER_CALL_TIMEOUT, async {
                    while rx.borrow_watched().snapshot == before {
                        if rx.changed().await.is_err() {
                            break;
                        }
                    }
                })
                .await;
            }
            ClusterChange::PurgeLog => {
                let upto = self.raft.metrics().borrow_watched().snapshot.as_ref().map(|s| s.index());
                let upto = upto.ok_or_else(|| {
                    Rejection::new(ReasonCode::CLUSTER_CHANGE_INVALID, "no snapshot yet: build one before purging")
                })?;
                self.raft.trigger().purge_log(upto).await.map_err(|e| internal(&e))?;
                let mut rx = self.raft.metrics();
                let _ = tokio::time::timeout(LEDGER_CALL_TIMEOUT, async {
                    while rx.borrow_watched().purged.as_ref().map(|p| p.index()) < Some(upto) {
                        if rx.changed().await.is_err() {
                            break;
                        }
                    }
                })
                .await;
            }
        }
        Ok(self.status().await)
    }
}

fn internal(e: &dyn std::fmt::Display) -> Rejection {
    tracing::error!(error = %e, "raft error");
    Rejection::new(ReasonCode::INTERNAL, "internal raft error; see the node log")
}

impl Ledger for LedgerNode {
    fn submit(&self, req: SubmitRequest) -> BoxFuture<'_, Result<SubmitResponse, Rejection>> {
        Box::pin(self.submit_request(req, false))
    }
    fn query(&self, req: QueryRequest) -> BoxFuture<'_, Result<QueryResult, Rejection>> {
        Box::pin(self.query_request(req))
    }
    fn node_status(&self) -> BoxFuture<'_, Result<NodeStatus, Rejection>> {
        Box::pin(async move { Ok(self.status().await) })
    }
    fn cluster_status(&self) -> BoxFuture<'_, Result<ClusterStatus, Rejection>> {
        Box::pin(async move { Ok(LedgerNode::cluster_status(self).await) })
    }
    fn cluster_change(&self, change: ClusterChange) -> BoxFuture<'_, Result<NodeStatus, Rejection>> {
        Box::pin(self.change(change, false))
    }
    fn snapshot(&self) -> BoxFuture<'_, Result<LedgerState, Rejection>> {
        Box::pin(self.linearized_state())
    }
    fn watch(&self, filter: WatchFilter) -> BoxFuture<'_, Result<WatchStream, Rejection>> {
        Box::pin(async move { LedgerNode::watch(self, filter) })
    }
    fn refresh_issuer(&self, issuer: &str) -> BoxFuture<'_, Result<Option<u64>, Rejection>> {
        let issuer = issuer.to_string();
        Box::pin(async move { LedgerNode::refresh_issuer(self, &issuer).await })
    }
}

/// The node's applied state is what its admin API decides on (token inspection, its signing
/// key, executor CAs): no second replica following the node's own watch.
impl writ_client::verifier::StateView for LedgerNode {
    fn read(&self, f: &mut dyn FnMut(&LedgerState)) {
        f(&self.sm.read().state)
    }

    fn is_current(&self) -> bool {
        self.is_healthy()
    }

    fn wait_for(&self, revision: u64, timeout: std::time::Duration) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                if self.sm.read_async().await.state.revision >= revision {
                    return true;
                }
                if tokio::time::Instant::now() >= deadline {
                    return false;
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
    }
}

//! In-process cluster harness with injected network, clock and randomness.
//!
//! Nodes are real `LedgerNode`s on real RocksDB (temp dirs); what is simulated is the wire
//! between them ([`SimNetwork`] for Raft RPCs, [`SimPeers`] for client-API forwarding, both
//! honouring partitions) and the leader clock ([`SimClock`]). One seed drives the workload
//! and the faults; a failure prints the command that replays that seed.
//!
//! Not simulated: openraft's own election-timeout jitter and tokio's scheduling, so a seed
//! replays the same scenario (commands, fault points, victims), not the same interleaving.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use openraft::alias::{SnapshotOf, VoteOf};
use openraft::async_runtime::WatchReceiver;
use openraft::errors::{RPCError, RaftError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse};
use openraft::{BasicNode, OptionalSend, Snapshot};
use serde::de::DeserializeOwned;
use serde::Serialize;
use writ_api::dto::{ClusterChange, NodeStatus, SubmitRequest, SubmitResponse};
use writ_api::Rejection;
use writ_client::{unavailable, CallError};
use writ_node::ledger::{Clock, LedgerNode, Peers, RaftSettings, ReadIndex};
use writ_raft_store::TypeConfig;

/// Shared switchboard: which nodes exist and which links are cut.
#[derive(Default)]
pub struct Switchboard {
    nodes: Mutex<HashMap<u64, Arc<LedgerNode>>>,
    /// Nodes cut off from everyone else.
    isolated: Mutex<BTreeSet<u64>>,
    pub messages: AtomicU64,
    pub dropped: AtomicU64,
    /// Pre-votes and votes asked for, by candidate.
    pub votes_asked: Mutex<BTreeMap<u64, u64>>,
    /// Append-entries (entries and heartbeats) are dropped on every link; votes still pass, so
    /// a leader is elected that can commit nothing.
    appends_cut: AtomicBool,
}

impl Switchboard {
    fn route(&self, from: u64, to: u64) -> Result<Arc<LedgerNode>, String> {
        self.messages.fetch_add(1, Ordering::Relaxed);
        let isolated = self.isolated.lock().expect("lock");
        if from != to && (isolated.contains(&from) || isolated.contains(&to)) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return Err(format!("link {from}->{to} is partitioned"));
        }
        drop(isolated);
        self.nodes.lock().expect("lock").get(&to).cloned().ok_or_else(|| format!("node {to} is down"))
    }

    pub fn isolate(&self, id: u64) {
        self.isolated.lock().expect("lock").insert(id);
    }

    pub fn heal(&self) {
        self.isolated.lock().expect("lock").clear();
        self.appends_cut.store(false, Ordering::Relaxed);
    }

    /// Drops every append-entries from now until [`Switchboard::heal`].
    pub fn cut_appends(&self) {
        self.appends_cut.store(true, Ordering::Relaxed);
    }

    /// How many pre-votes and votes `candidate` asked for (each peer asked counts once).
    pub fn votes_asked_by(&self, candidate: u64) -> u64 {
        self.votes_asked.lock().expect("lock").get(&candidate).copied().unwrap_or(0)
    }

    fn note_vote_asked(&self, candidate: u64) {
        *self.votes_asked.lock().expect("lock").entry(candidate).or_default() += 1;
    }
}

fn addr_id(addr: &str) -> u64 {
    addr.trim_start_matches("sim://n").parse().unwrap_or(0)
}

/// Round-trips a message through the production encoding, as the wire would.
fn wire<T: Serialize + DeserializeOwned>(v: &T) -> T {
    writ_api::decode(&writ_api::encode(v).expect("encode")).expect("decode")
}

/// Raft network over the switchboard.
#[derive(Clone)]
pub struct SimNetwork {
    pub from: u64,
    pub board: Arc<Switchboard>,
}

impl RaftNetworkFactory<TypeConfig> for SimNetwork {
    type Network = SimLink;
    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> SimLink {
        SimLink { from: self.from, to: target, board: self.board.clone() }
    }
}

pub struct SimLink {
    from: u64,
    to: u64,
    board: Arc<Switchboard>,
}

fn unreachable(msg: String) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(msg)))
}

impl SimLink {
    /// One Raft RPC: `rpc` crosses the link to the target node (through the production
    /// encoding), `call` runs it on the target's Raft, and the reply crosses the same link back.
    async fn exchange<Req, Resp, F, Fut>(&self, rpc: &Req, call: F) -> Result<Resp, RPCError<TypeConfig>>
    where
        Req: Serialize + DeserializeOwned,
        Resp: Serialize + DeserializeOwned,
        F: FnOnce(Arc<LedgerNode>, Req) -> Fut,
        Fut: Future<Output = Result<Resp, RaftError<TypeConfig>>>,
    {
        let target = self.board.route(self.from, self.to).map_err(unreachable)?;
        let resp = call(target, wire(rpc)).await;
        self.board.route(self.to, self.from).map_err(unreachable)?;
        resp.map(|r| wire(&r)).map_err(|e| unreachable(e.to_string()))
    }
}

impl RaftNetworkV2<TypeConfig> for SimLink {
    type SnapshotData = writ_raft_store::SnapshotHandle;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        if self.board.appends_cut.load(Ordering::Relaxed) {
            self.board.dropped.fetch_add(1, Ordering::Relaxed);
            return Err(unreachable(format!("appends {}->{} are cut", self.from, self.to)));
        }
        self.exchange(&rpc, |n, r| async move { n.raft.append_entries(r).await }).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.board.note_vote_asked(self.from);
        self.exchange(&rpc, |n, r| async move { n.raft.vote(r).await }).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.board.note_vote_asked(self.from);
        self.exchange(&rpc, |n, r| async move { n.raft.pre_vote(r).await }).await
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<TypeConfig>,
        snapshot: SnapshotOf<TypeConfig, Self::SnapshotData>,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let target = self.board.route(self.from, self.to).map_err(|e| StreamingError::from(unreachable(e)))?;
        // The receiver installs a copy of the sender's file (its own store keeps its own).
        let snap = Snapshot { meta: wire(&snapshot.meta), snapshot: snapshot.snapshot };
        let resp = target.raft.install_full_snapshot(wire(&vote), snap).await;
        resp.map_err(|e| StreamingError::from(unreachable(e.to_string())))
    }
}

/// Client-API forwarding over the switchboard.
pub struct SimPeers {
    pub from: u64,
    pub board: Arc<Switchboard>,
}

impl SimPeers {
    fn target(&self, addr: &str) -> Result<Arc<LedgerNode>, Rejection> {
        self.board.route(self.from, addr_id(addr)).map_err(unavailable)
    }
}

impl Peers for SimPeers {
    fn submit(&self, addr: &str, req: SubmitRequest) -> BoxFuture<'_, Result<SubmitResponse, CallError>> {
        // A cut link or a node that is down: the request never left (as a refused connection).
        let target = self.board.route(self.from, addr_id(addr)).map_err(CallError::NotSent);
        Box::pin(async move { target?.submit_request(req, true).await.map_err(CallError::Rejected) })
    }
    fn read_index(&self, addr: &str) -> BoxFuture<'_, Result<ReadIndex, Rejection>> {
        let target = self.target(addr);
        Box::pin(async move { target?.read_index().await })
    }
    fn status(&self, addr: &str, digest: bool) -> BoxFuture<'_, Result<NodeStatus, Rejection>> {
        let target = self.target(addr);
        Box::pin(async move { Ok(target?.status_view(digest).await) })
    }
    fn cluster_change(&self, addr: &str, change: ClusterChange) -> BoxFuture<'_, Result<NodeStatus, Rejection>> {
        let target = self.target(addr);
        Box::pin(async move { target?.change(change, true).await })
    }
}

/// A leader clock that starts at a seeded instant and advances one millisecond per reading.
pub struct SimClock(AtomicU64);

impl SimClock {
    pub fn new(start_ms: u64) -> Self {
        SimClock(AtomicU64::new(start_ms))
    }

    /// Moves the clock `ms` ahead (days of ledger time in a test that lasts seconds).
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::Relaxed);
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// An in-process cluster on the switchboard.
pub struct SimCluster {
    pub board: Arc<Switchboard>,
    pub nodes: BTreeMap<u64, Arc<LedgerNode>>,
    /// Each node's clock (what it stamps with when it leads).
    pub clocks: BTreeMap<u64, Arc<SimClock>>,
    _dirs: Vec<tempfile::TempDir>,
}

impl SimCluster {
    pub async fn start(n: u64, clock_start_ms: u64) -> SimCluster {
        SimCluster::start_on(Arc::new(Switchboard::default()), n, clock_start_ms).await
    }

    /// [`SimCluster::start`] on a switchboard the caller set up (links cut before the first
    /// election).
    pub async fn start_on(board: Arc<Switchboard>, n: u64, clock_start_ms: u64) -> SimCluster {
        SimCluster::start_with(board, n, clock_start_ms, |_| None).await
    }

    /// [`SimCluster::start_on`] with each node's `ledger_version_max` (a node not yet upgraded).
    pub async fn start_with(
        board: Arc<Switchboard>,
        n: u64,
        clock_start_ms: u64,
        ledger_version_max: impl Fn(u64) -> Option<u32>,
    ) -> SimCluster {
        let settings = RaftSettings {
            heartbeat_ms: 50,
            election_min_ms: 400,
            election_max_ms: 800,
            snapshot_every_entries: 10_000,
            keep_entries_behind_snapshot: 100,
            snapshot_every_log_bytes: u64::MAX,
            snapshot_chunk_bytes: 1 << 20,
            rpc_body_bytes_max: 1 << 30,
            clock_ahead_ms: 0,
            ledger_version_max: None,
            // The simulation is about the ledger, not the machine's disk.
            min_free_disk_bytes: 0,
            data_quota_bytes: None,
            issuer_watch_ms: 0,
        };
        let mut nodes = BTreeMap::new();
        let mut clocks = BTreeMap::new();
        let mut dirs = Vec::new();
        for id in 1..=n {
            let dir = tempfile::tempdir().expect("tempdir");
            let clock = Arc::new(SimClock::new(clock_start_ms));
            clocks.insert(id, clock.clone());
            let settings = RaftSettings { ledger_version_max: ledger_version_max(id), ..settings.clone() };
            let node = LedgerNode::start(
                id,
                format!("sim://n{id}"),
                dir.path(),
                &settings,
                |_: &_| SimNetwork { from: id, board: board.clone() },
                clock,
                Arc::new(SimPeers { from: id, board: board.clone() }),
            )
            .await
            .expect("start sim node");
            board.nodes.lock().expect("lock").insert(id, node.clone());
            nodes.insert(id, node);
            dirs.push(dir);
        }
        let members: BTreeMap<u64, String> = (1..=n).map(|id| (id, format!("sim://n{id}"))).collect();
        nodes[&1].initialize(&members).await.expect("initialize");
        SimCluster { board, nodes, clocks, _dirs: dirs }
    }

    /// The node that is leader in its own view and reachable by a majority, if any.
    pub fn leader(&self) -> Option<u64> {
        let isolated = self.board.isolated.lock().expect("lock").clone();
        self.nodes
            .values()
            .find(|n| {
                !isolated.contains(&n.id) && n.raft.metrics().borrow_watched().state == openraft::ServerState::Leader
            })
            .map(|n| n.id)
    }

    /// Moves every node's clock `ms` ahead.
    pub fn advance_clocks(&self, ms: u64) {
        for c in self.clocks.values() {
            c.advance(ms);
        }
    }

    pub async fn shutdown(self) {
        for n in self.nodes.values() {
            let _ = n.raft.shutdown().await;
        }
    }
}

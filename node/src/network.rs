//! Node-to-node transport over HTTP: Raft RPCs with bincode bodies (`/raft/*`) and the
//! client-API calls a node makes to its peers (`/client/*`, JSON). Every call has a deadline.

use std::future::Future;
use std::io::Cursor;
use std::time::Duration;

use futures::future::BoxFuture;
use openraft::alias::{SnapshotOf, VoteOf};
use openraft::errors::{NetworkError, RPCError, RaftError, ReplicationClosed, StreamingError, Timeout, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest, TransferLeaderResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, OptionalSend, RPCTypes};
use serde::de::DeserializeOwned;
use serde::Serialize;
use writ_api::dto::{ClusterChange, NodeStatus, SubmitRequest, SubmitResponse};
use writ_api::Rejection;
use writ_client::{CallError, NodeHttp};
use writ_raft_store::TypeConfig;

use crate::ledger::{Peers, ReadIndex};

/// Deadline for a snapshot transfer (the whole state in one request).
const SNAPSHOT_RPC_TIMEOUT: Duration = Duration::from_secs(60);

/// Creates HTTP Raft clients for peers. Cheap to clone (shares the connection pool).
#[derive(Clone)]
pub struct HttpRaftNetwork {
    node_id: u64,
    http: reqwest::Client,
}

impl HttpRaftNetwork {
    pub fn new(node_id: u64, http: reqwest::Client) -> Self {
        HttpRaftNetwork { node_id, http }
    }
}

impl RaftNetworkFactory<TypeConfig> for HttpRaftNetwork {
    type Network = HttpRaftPeer;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Self::Network {
        HttpRaftPeer {
            from: self.node_id,
            target,
            base: node.addr.trim_end_matches('/').to_string(),
            http: self.http.clone(),
        }
    }
}

/// Raft RPC client for one peer.
pub struct HttpRaftPeer {
    from: u64,
    target: u64,
    base: String,
    http: reqwest::Client,
}

impl HttpRaftPeer {
    async fn call<Req, Resp>(
        &self,
        action: RPCTypes,
        rpc: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
    {
        let body = writ_api::encode(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let url = format!("{}/raft/{rpc}", self.base);
        let sent = self
            .http
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .timeout(timeout)
            .body(body)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Err(RPCError::Timeout(Timeout { action, id: self.from, target: self.target, timeout }))
            }
            Err(e) => return Err(RPCError::Unreachable(Unreachable::new(&e))),
        };
        if !resp.status().is_success() {
            return Err(RPCError::Network(NetworkError::from_string(format!("HTTP {} from {url}", resp.status()))));
        }
        let bytes = resp.bytes().await.map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let res: Result<Resp, RaftError<TypeConfig>> =
            writ_api::decode(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        // The peer's Raft is shutting down or fatally stopped: treat it as unreachable.
        res.map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))
    }
}

impl RaftNetworkV2<TypeConfig> for HttpRaftPeer {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(RPCTypes::AppendEntries, "append", &rpc, option.soft_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(RPCTypes::Vote, "vote", &rpc, option.soft_ttl()).await
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<TypeConfig>,
        snapshot: SnapshotOf<TypeConfig, Self::SnapshotData>,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let req = (vote, snapshot.meta, snapshot.snapshot.into_inner());
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            res = self.call(RPCTypes::InstallSnapshot, "snapshot", &req, SNAPSHOT_RPC_TIMEOUT) => res.map_err(StreamingError::from),
        }
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(RPCTypes::TransferLeader, "transfer-leader", &req, option.soft_ttl()).await
    }
}

/// [`Peers`] over HTTP: forwarded submits, read-index, status and membership changes.
pub struct HttpPeers {
    http: NodeHttp,
}

impl HttpPeers {
    pub fn new(http: reqwest::Client) -> Self {
        HttpPeers { http: NodeHttp::with_client(http) }
    }
}

impl Peers for HttpPeers {
    fn submit(&self, addr: &str, req: SubmitRequest) -> BoxFuture<'_, Result<SubmitResponse, CallError>> {
        let addr = addr.to_string();
        Box::pin(async move { self.http.submit(&addr, &req, true).await })
    }

    fn read_index(&self, addr: &str) -> BoxFuture<'_, Result<ReadIndex, Rejection>> {
        let addr = addr.to_string();
        Box::pin(async move { self.http.get(&addr, "/client/read-index").await.map_err(Rejection::from) })
    }

    fn status(&self, addr: &str) -> BoxFuture<'_, Result<NodeStatus, Rejection>> {
        let addr = addr.to_string();
        Box::pin(async move { self.http.get(&addr, "/client/status").await.map_err(Rejection::from) })
    }

    fn cluster_change(&self, addr: &str, change: ClusterChange) -> BoxFuture<'_, Result<NodeStatus, Rejection>> {
        let addr = addr.to_string();
        Box::pin(async move { self.http.post(&addr, "/client/cluster", &change, true).await.map_err(Rejection::from) })
    }
}

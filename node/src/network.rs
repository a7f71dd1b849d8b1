//! Node-to-node transport over HTTP: Raft RPCs with bincode bodies (`/raft/*`) and the
//! client-API calls a node makes to its peers (`/client/*`, JSON). Every call has a deadline.

use std::future::Future;
use std::time::Duration;

use futures::future::BoxFuture;
use openraft::alias::{LogIdOf, SnapshotOf, VoteOf};
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
use writ_raft_store::{LogBytes, TypeConfig};

use crate::ledger::{Peers, ReadIndex};

/// Deadline for one snapshot chunk's request.
/// The least an append that carries entries is given (its follower's log flush included).
const APPEND_TIMEOUT_MIN: Duration = Duration::from_secs(1);
const SNAPSHOT_RPC_TIMEOUT: Duration = Duration::from_secs(60);
/// Deadline for the last chunk's request, which waits for the receiver to install the whole
/// snapshot (record by record: minutes for millions of audit records).
const SNAPSHOT_INSTALL_TIMEOUT: Duration = Duration::from_secs(1800);
/// Bytes per snapshot chunk by default (`[raft] snapshot_chunk_bytes`).
pub const SNAPSHOT_CHUNK_BYTES_DEFAULT: u64 = 4 << 20;

/// One request of a streamed snapshot transfer (`POST /raft/snapshot-chunk`): the snapshot file
/// (`writ_raft_store::snapshot`) in chunks appended at `offset` to what the receiver holds, so
/// a transfer resumes where it stopped, with no size cap and never whole in memory.
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct SnapshotChunk {
    pub vote: VoteOf<TypeConfig>,
    pub meta: openraft::alias::SnapshotMetaOf<TypeConfig>,
    /// Where `data` goes; `None` asks where to resume.
    pub offset: Option<u64>,
    pub data: Vec<u8>,
    /// With the last chunk: the file's length and sha256 (hex), checked before it is installed.
    pub done: Option<(u64, String)>,
}

/// The receiver's answer to a [`SnapshotChunk`].
#[derive(Debug, Serialize, serde::Deserialize)]
pub enum ChunkReply {
    /// Send from here on (what it holds of this snapshot).
    Resume { offset: u64 },
    /// The whole file arrived, checked, and was handed to Raft.
    Installed(SnapshotResponse<TypeConfig>),
}

/// Creates HTTP Raft clients for peers. Cheap to clone (shares the connection pool).
#[derive(Clone)]
pub struct HttpRaftNetwork {
    node_id: u64,
    http: reqwest::Client,
    chunk_bytes: u64,
    body_bytes_max: usize,
    log: Option<LogBytes>,
}

impl HttpRaftNetwork {
    /// Raft clients from `node_id`, sending snapshots in chunks of `chunk_bytes`, to peers that
    /// accept Raft bodies of [`crate::http::RAFT_BODY_BYTES_MAX`] (see [`Self::with_body_bytes_max`]).
    pub fn new(node_id: u64, http: reqwest::Client, chunk_bytes: u64) -> Self {
        HttpRaftNetwork {
            node_id,
            http,
            chunk_bytes: chunk_bytes.max(1),
            body_bytes_max: crate::http::RAFT_BODY_BYTES_MAX,
            log: None,
        }
    }

    /// Appends copy the entries' bytes from this node's log cache where it holds them.
    pub fn with_log_bytes(mut self, log: LogBytes) -> Self {
        self.log = Some(log);
        self
    }

    /// The largest Raft body the peers accept (`[raft] rpc_body_bytes_max`, the same on every
    /// member): an append that would exceed it carries fewer entries.
    pub fn with_body_bytes_max(mut self, bytes: usize) -> Self {
        self.body_bytes_max = bytes.max(1);
        self
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
            chunk_bytes: self.chunk_bytes,
            body_bytes_max: self.body_bytes_max,
            log: self.log.clone(),
        }
    }
}

/// Raft RPC client for one peer.
pub struct HttpRaftPeer {
    from: u64,
    target: u64,
    base: String,
    http: reqwest::Client,
    chunk_bytes: u64,
    body_bytes_max: usize,
    log: Option<LogBytes>,
}

impl HttpRaftPeer {
    /// Sends the snapshot's transfer file in chunks, resuming where the receiver stands (a probe first,
    /// then every chunk at the offset it last acknowledged).
    async fn send_snapshot(
        &self,
        vote: VoteOf<TypeConfig>,
        meta: openraft::alias::SnapshotMetaOf<TypeConfig>,
        snapshot: writ_raft_store::SnapshotHandle,
    ) -> Result<SnapshotResponse<TypeConfig>, RPCError<TypeConfig>> {
        let local = |e: std::io::Error| RPCError::Network(NetworkError::new(&e));
        // This node's own snapshots hold the state only: what the peer installs carries the
        // audit records and evidence blobs too (written once per snapshot, then reused).
        let path = tokio::task::spawn_blocking(move || snapshot.transfer_file())
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?
            .map_err(local)?;
        let total = std::fs::metadata(&path).map_err(local)?.len();
        let hash_path = path.clone();
        let sha256 = tokio::task::spawn_blocking(move || file_sha256(&hash_path))
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?
            .map_err(local)?;
        let chunk = |offset: Option<u64>, data: Vec<u8>, done: Option<(u64, String)>| SnapshotChunk {
            vote,
            meta: meta.clone(),
            offset,
            data,
            done,
        };
        let mut reply: ChunkReply = self
            .call(RPCTypes::InstallSnapshot, "snapshot-chunk", &chunk(None, Vec::new(), None), SNAPSHOT_RPC_TIMEOUT)
            .await?;
        // Each request moves the receiver forward by a chunk or tells it where it stands: more
        // than twice the chunks (plus a few) means it is not moving.
        let mut budget = 2 * total.div_ceil(self.chunk_bytes) + 8;
        loop {
            let offset = match reply {
                ChunkReply::Installed(resp) => {
                    metrics::counter!("writ_snapshot_bytes_sent_total").increment(total);
                    return Ok(resp);
                }
                ChunkReply::Resume { offset } => offset.min(total),
            };
            budget = budget.checked_sub(1).ok_or_else(|| {
                RPCError::Network(NetworkError::from_string("the snapshot receiver does not advance".to_string()))
            })?;
            let len = self.chunk_bytes.min(total - offset);
            let read_path = path.clone();
            let data = tokio::task::spawn_blocking(move || read_at(&read_path, offset, len))
                .await
                .map_err(|e| RPCError::Network(NetworkError::new(&e)))?
                .map_err(local)?;
            let done = (offset + len == total).then(|| (total, sha256.clone()));
            let timeout = if done.is_some() { SNAPSHOT_INSTALL_TIMEOUT } else { SNAPSHOT_RPC_TIMEOUT };
            metrics::counter!("writ_snapshot_chunks_sent_total").increment(1);
            reply = self
                .call(RPCTypes::InstallSnapshot, "snapshot-chunk", &chunk(Some(offset), data, done), timeout)
                .await?;
        }
    }

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
        self.call_body(action, rpc, body, timeout).await
    }

    /// [`Self::call`] with the request already encoded.
    async fn call_body<Resp>(
        &self,
        action: RPCTypes,
        rpc: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Resp: DeserializeOwned,
    {
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

/// The sha256 (hex) of a file, read in 1 MiB pieces.
pub fn file_sha256(path: &std::path::Path) -> std::io::Result<String> {
    use sha2::Digest;
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut hash = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(writ_api::hex(&hash.finalize()));
        }
        hash.update(&buf[..n]);
    }
}

/// `len` bytes of a file from `offset`.
fn read_at(path: &std::path::Path, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek};
    let mut f = std::fs::File::open(path)?;
    f.seek(std::io::SeekFrom::Start(offset))?;
    let mut data = vec![0u8; len as usize];
    f.read_exact(&mut data)?;
    Ok(data)
}

impl RaftNetworkV2<TypeConfig> for HttpRaftPeer {
    type SnapshotData = writ_raft_store::SnapshotHandle;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        // openraft asks for one heartbeat interval (40 ms) per append. A heartbeat keeps it; an
        // append that carries entries waits for the follower's log flush, which a loaded disk
        // can take longer than that — timing it out cancelled it and restarted replication.
        let timeout =
            if rpc.entries.is_empty() { option.soft_ttl() } else { option.soft_ttl().max(APPEND_TIMEOUT_MIN) };
        let encode = |rpc: &AppendEntriesRequest<TypeConfig>| {
            encode_append(rpc, self.log.as_ref()).map_err(|e| RPCError::Network(NetworkError::new(&e)))
        };
        let body = encode(&rpc)?;
        if body.len() <= self.body_bytes_max {
            return self.call_body(RPCTypes::AppendEntries, "append", body, timeout).await;
        }
        // Over the peer's body limit (openraft sends up to `max_payload_entries` entries, whatever
        // their size): send the longest prefix that fits and answer a partial success, after
        // which openraft sends the rest.
        let (part, last) =
            fitting_prefix(rpc, self.body_bytes_max).map_err(|e| RPCError::Network(NetworkError::from_string(e)))?;
        metrics::counter!("writ_raft_appends_split_total").increment(1);
        let body = encode(&part)?;
        match self.call_body(RPCTypes::AppendEntries, "append", body, timeout).await? {
            AppendEntriesResponse::Success => Ok(AppendEntriesResponse::PartialSuccess(Some(last))),
            other => Ok(other),
        }
    }

    /// Pre-vote (openraft's default grants every one without asking, which made pre-vote a
    /// no-op: a follower that had not heard its leader for a lease started a real election).
    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(RPCTypes::Vote, "pre-vote", &rpc, option.soft_ttl()).await
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
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            res = self.send_snapshot(vote, snapshot.meta, snapshot.snapshot) => res.map_err(StreamingError::from),
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

    fn status(&self, addr: &str, digest: bool) -> BoxFuture<'_, Result<NodeStatus, Rejection>> {
        let addr = addr.to_string();
        let path = if digest { "/client/status" } else { "/client/status?digest=false" };
        Box::pin(async move { self.http.get(&addr, path).await.map_err(Rejection::from) })
    }

    fn cluster_change(&self, addr: &str, change: ClusterChange) -> BoxFuture<'_, Result<NodeStatus, Rejection>> {
        let addr = addr.to_string();
        Box::pin(async move { self.http.post(&addr, "/client/cluster", &change, true).await.map_err(Rejection::from) })
    }
}

/// `rpc` as [`writ_api::encode`] writes it — its fields one after another, the entries as their
/// count and then each entry — with the entries' bytes copied from `log`'s cache when it holds
/// them all (the leader encoded each entry once, when it appended it), encoded here if not.
fn encode_append(
    rpc: &AppendEntriesRequest<TypeConfig>,
    log: Option<&LogBytes>,
) -> Result<Vec<u8>, writ_api::EncodeError> {
    let mut head = Vec::new();
    writ_api::encode_into(&rpc.vote, &mut head)?;
    writ_api::encode_into(&rpc.prev_log_id, &mut head)?;
    writ_api::encode_into(&(rpc.entries.len() as u64), &mut head)?;
    let tail = writ_api::encode(&rpc.leader_commit)?;
    let ids: Vec<_> = rpc.entries.iter().map(|e| e.log_id).collect();
    if let Some(body) = log.and_then(|log| log.encoded_between(&head, &ids, &tail)) {
        return Ok(body);
    }
    for entry in &rpc.entries {
        writ_api::encode_into(entry, &mut head)?;
    }
    head.extend_from_slice(&tail);
    Ok(head)
}

/// The longest prefix of `rpc`'s entries whose append encodes to at most `bytes_max`, and the
/// log id of its last entry; an error if not even the first entry fits (the peers' body limit
/// is below what one entry needs: a configuration to fix, see `[raft] rpc_body_bytes_max`).
fn fitting_prefix(
    mut rpc: AppendEntriesRequest<TypeConfig>,
    bytes_max: usize,
) -> Result<(AppendEntriesRequest<TypeConfig>, LogIdOf<TypeConfig>), String> {
    let entries = std::mem::take(&mut rpc.entries);
    let mut size = writ_api::encoded_len(&rpc).map_err(|e| e.to_string())?;
    let mut fit = 0usize;
    for entry in &entries {
        size += writ_api::encoded_len(entry).map_err(|e| e.to_string())?;
        if size > bytes_max {
            break;
        }
        fit += 1;
    }
    let Some(last) = fit.checked_sub(1).map(|i| entries[i].log_id) else {
        return Err(format!(
            "log entry {} does not fit in a Raft body of {bytes_max} bytes (raft.rpc_body_bytes_max)",
            entries.first().map_or_else(String::new, |e| e.log_id.to_string())
        ));
    };
    rpc.entries = entries;
    rpc.entries.truncate(fit);
    Ok((rpc, last))
}

#[cfg(test)]
mod tests {
    use openraft::storage::{IOFlushed, RaftLogStorage};
    use openraft::testing::blank_ent;

    use super::*;

    /// An append of `count` entries after entry `prev`.
    fn append(prev: u64, count: u64) -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: VoteOf::<TypeConfig>::new_committed(2, 1),
            prev_log_id: Some(blank_ent::<TypeConfig>(2, 1, prev).log_id),
            entries: (prev + 1..=prev + count).map(|i| blank_ent::<TypeConfig>(2, 1, i)).collect(),
            leader_commit: Some(blank_ent::<TypeConfig>(1, 1, 3).log_id),
        }
    }

    #[tokio::test]
    async fn an_append_from_the_log_cache_is_the_appends_encoding() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _sm) = writ_raft_store::open(dir.path()).expect("open");
        log.append((1..=6).map(|i| blank_ent::<TypeConfig>(2, 1, i)), IOFlushed::noop()).await.expect("append");
        let cached = log.log_bytes();
        let ids: Vec<_> = append(3, 3).entries.iter().map(|e| e.log_id).collect();
        assert!(cached.encoded_between(&[], &ids, &[]).is_some(), "the appended entries are cached");
        // Entries the cache holds, some it does not, and none (a heartbeat).
        for rpc in [append(3, 3), append(4, 4), append(6, 0)] {
            let expected = writ_api::encode(&rpc).expect("encode");
            assert_eq!(encode_append(&rpc, Some(&cached)).expect("encode"), expected);
            assert_eq!(encode_append(&rpc, None).expect("encode"), expected);
            let decoded: AppendEntriesRequest<TypeConfig> = writ_api::decode(&expected).expect("decode");
            assert_eq!(decoded.entries.len(), rpc.entries.len());
        }
    }
}

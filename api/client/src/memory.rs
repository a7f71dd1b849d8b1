//! [`MemoryLedger`]: the ledger in one process — the same `decide` and fold over one
//! `LedgerState` behind a lock, no Raft, no RocksDB. Anything written against [`Ledger`] (the
//! edge's router, the admin API's router) runs on it in a router test (`oneshot`) without
//! starting processes. It keeps what a node keeps: the event log for watchers (replayed from a
//! revision, then live, with heartbeats while idle) and the retained audit bodies.
//!
//! Not a production ledger: nothing is durable and there is one member.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use futures::future::BoxFuture;
use writ_api::audit::{self, AuditRecord};
use writ_api::dto::{
    ClusterChange, ClusterStatus, MemberStatus, NodeStatus, Query, QueryRequest, QueryResult, Role, SubmitRequest,
    SubmitResponse, WatchFilter, WatchLine, WATCH_HEARTBEAT,
};
use writ_api::ledger::{EventEnvelope, LedgerRequest};
use writ_api::reason::ReasonCode;
use writ_api::state::LedgerState;
use writ_api::Rejection;

use crate::ledger::{lines_from, Ledger, WatchStream};

/// Live events a slow watcher may fall behind before it is re-read from the log.
const LIVE_BUFFER_EVENTS: usize = 4096;

/// The address a [`MemoryLedger`] gives for its one member.
pub const MEMORY_ADDR: &str = "memory://ledger";

struct Inner {
    state: LedgerState,
    /// Every event, in revision order (index = revision - 1).
    events: Vec<EventEnvelope>,
    /// Retained audit bodies by (tenant, sequence).
    audit: BTreeMap<(String, u64), AuditRecord>,
    /// Evidence blobs by `writ_api::evidence::blob_key`.
    blobs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Commands executed (the "log index").
    entries: u64,
}

/// The ledger in one process (see the module docs).
pub struct MemoryLedger {
    inner: Mutex<Inner>,
    live: tokio::sync::broadcast::Sender<EventEnvelope>,
    /// Set by [`MemoryLedger::stop`]: the ledger is gone for its clients.
    stopped: tokio::sync::watch::Sender<bool>,
}

impl Default for MemoryLedger {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryLedger {
    pub fn new() -> MemoryLedger {
        MemoryLedger {
            inner: Mutex::new(Inner {
                state: LedgerState::default(),
                events: Vec::new(),
                audit: BTreeMap::new(),
                blobs: BTreeMap::new(),
                entries: 0,
            }),
            live: tokio::sync::broadcast::channel(LIVE_BUFFER_EVENTS).0,
            stopped: tokio::sync::watch::channel(false).0,
        }
    }

    /// Takes the ledger away from its clients, as a lost cluster would: every call answers
    /// LEDGER_UNAVAILABLE and every watch stream ends (tests of failing closed).
    pub fn stop(&self) {
        self.stopped.send_replace(true);
    }

    fn available(&self) -> Result<(), Rejection> {
        if *self.stopped.borrow() {
            return Err(crate::unavailable("the in-memory ledger was stopped"));
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing panics while the lock is held but `execute`, which would be a bug in the core.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the current state (tests inspect it).
    pub fn with_state<T>(&self, f: impl FnOnce(&LedgerState) -> T) -> T {
        f(&self.lock().state)
    }

    fn execute(&self, req: SubmitRequest) -> SubmitResponse {
        let mut inner = self.lock();
        let request = LedgerRequest { stamp_ms: crate::now_ms(), trace_id: req.trace_id, command: req.command.into() };
        let (outcome, events, audited) = inner.state.execute_audited(&request);
        let records = writ_api::trail::records_of(&events, &audited);
        for (key, bytes) in request.command.stored_blobs(&outcome) {
            inner.blobs.insert(key, bytes);
        }
        inner.entries += 1;
        let log_index = inner.entries;
        let mut tenants = Vec::new();
        for record in records {
            tenants.push(record.tenant_id.clone());
            inner.audit.insert((record.tenant_id.clone(), record.seq), record);
        }
        // Retention, as the node applies it: bodies below each tenant's first retained sequence go.
        for tenant in tenants {
            let first = inner.state.audit.get(&tenant).map_or(0, |index| index.first_seq);
            let dropped: Vec<(String, u64)> =
                inner.audit.range((tenant.clone(), 0)..(tenant, first)).map(|(k, _)| k.clone()).collect();
            for key in dropped {
                inner.audit.remove(&key);
            }
        }
        for env in &events {
            if let writ_api::ledger::Event::EvidenceExpiredV1 { tenant_id, blobs } = &env.event {
                for r in blobs {
                    inner.blobs.remove(&writ_api::evidence::blob_key(tenant_id, &r.operation_id, &r.content_hash));
                }
            }
            if let writ_api::ledger::Event::TenantPurgedV1 { tenant_id, .. } = &env.event {
                inner.audit.retain(|(t, _), _| t != tenant_id);
                let (start, end) = writ_api::evidence::tenant_range(tenant_id);
                inner.blobs.retain(|k, _| !(start.as_slice()..end.as_slice()).contains(&k.as_slice()));
            }
        }
        inner.events.extend(events.iter().cloned());
        // Published under the lock, so a watcher never sees revisions out of order.
        for env in events {
            let _ = self.live.send(env);
        }
        SubmitResponse { log_index, outcome, forwarded: false }
    }

    fn answer(&self, query: Query) -> Result<QueryResult, Rejection> {
        let inner = self.lock();
        if let Query::GetEvidence { tenant_id, operation_id, content_hash } = &query {
            let blob = inner.state.evidence_record(tenant_id, operation_id, content_hash)?.clone();
            let bytes = inner.blobs.get(&writ_api::evidence::blob_key(tenant_id, operation_id, content_hash));
            let bytes =
                bytes.ok_or_else(|| Rejection::new(ReasonCode::INTERNAL, "evidence recorded but not stored"))?;
            let content_base64 = writ_api::evidence::to_base64(bytes);
            return Ok(QueryResult::Evidence(Box::new(writ_api::dto::EvidenceContent { blob, content_base64 })));
        }
        let page = match &query {
            Query::ListAudit { tenant_id, after, limit, filter } => Some((tenant_id, *after, *limit, filter.clone())),
            Query::RecentAudit { tenant_id, limit } => {
                let index = inner.state.audit.get(tenant_id);
                Some((tenant_id, index.map(|i| i.recent_cursor(u64::from(*limit))), *limit, Default::default()))
            }
            _ => None,
        };
        if let Some((tenant_id, after, limit, filter)) = page {
            let filter = &filter;
            let limit = writ_api::query::page_limit(limit)?;
            let after = after.unwrap_or(0);
            let first = inner.state.audit.get(tenant_id).map_or(1, |index| index.first_seq);
            let from = (tenant_id.clone(), after.saturating_add(1).max(first));
            let records = inner
                .audit
                .range(from..)
                .take_while(|((tenant, _), _)| tenant == tenant_id)
                .map(|(_, record)| Ok::<_, Rejection>(record.clone()));
            let (records, next_cursor) = audit::page(records, after, limit, filter)?;
            return Ok(QueryResult::Audit { records, next_cursor });
        }
        writ_api::query::answer(&inner.state, query)
    }

    fn status(&self) -> NodeStatus {
        let inner = self.lock();
        NodeStatus {
            node_id: 1,
            addr: MEMORY_ADDR.into(),
            role: Role::Leader,
            term: 1,
            leader: Some(1),
            last_log_index: Some(inner.entries),
            last_applied_index: Some(inner.entries),
            snapshot_index: None,
            purged_index: None,
            voters: vec![1],
            learners: Vec::new(),
            members: BTreeMap::from([(1, MEMORY_ADDR.to_string())]),
            revision: inner.state.revision,
            state_digest: inner.state.digest(),
            ledger_version: writ_api::ledger::LEDGER_VERSION,
            ledger_version_in_force: inner.state.ledger_version,
            event_floor: 1,
            storage_alarm: false,
            short_members: Vec::new(),
        }
    }

    /// Stored events from `from` matching `filter`, then live ones, with heartbeats while idle.
    fn watch_from(&self, filter: WatchFilter) -> WatchStream {
        // Subscribed before the stored events are read: nothing falls between the two.
        let mut live = self.live.subscribe();
        let mut stopped = self.stopped.subscribe();
        let (stored, current) = {
            let inner = self.lock();
            let from = filter.from.unwrap_or(inner.state.revision + 1).max(1);
            let stored: Vec<EventEnvelope> = inner.events.iter().skip((from - 1) as usize).cloned().collect();
            (stored, inner.state.revision)
        };
        lines_from(move |tx| async move {
            let mut delivered = filter.from.map_or(current, |from| from.saturating_sub(1));
            for env in stored {
                delivered = env.revision;
                if filter.matches(&env) && tx.send(WatchLine::Event(Box::new(env))).await.is_err() {
                    return;
                }
            }
            loop {
                let next = tokio::select! {
                    _ = stopped.wait_for(|s| *s) => return,
                    next = tokio::time::timeout(WATCH_HEARTBEAT, live.recv()) => next,
                };
                let line = match next {
                    Err(_) => WatchLine::Heartbeat { heartbeat: delivered },
                    Ok(Ok(env)) if env.revision <= delivered => continue,
                    Ok(Ok(env)) => {
                        delivered = env.revision;
                        if !filter.matches(&env) {
                            continue;
                        }
                        WatchLine::Event(Box::new(env))
                    }
                    // Fell behind the live buffer (or the ledger is gone): the watcher resumes.
                    Ok(Err(_)) => WatchLine::End {
                        end: ReasonCode::LEDGER_UNAVAILABLE,
                        message: "the watcher fell behind; resume from the next revision".into(),
                        next: delivered + 1,
                    },
                };
                let ended = matches!(line, WatchLine::End { .. });
                if tx.send(line).await.is_err() || ended {
                    return;
                }
            }
        })
    }
}

impl Ledger for MemoryLedger {
    fn submit(&self, req: SubmitRequest) -> BoxFuture<'_, Result<SubmitResponse, Rejection>> {
        Box::pin(async move {
            self.available()?;
            req.check()?;
            Ok(self.execute(req))
        })
    }

    fn query(&self, req: QueryRequest) -> BoxFuture<'_, Result<QueryResult, Rejection>> {
        Box::pin(async move {
            self.available()?;
            self.answer(req.query)
        })
    }

    fn node_status(&self) -> BoxFuture<'_, Result<NodeStatus, Rejection>> {
        Box::pin(async move {
            self.available()?;
            Ok(self.status())
        })
    }

    fn cluster_status(&self) -> BoxFuture<'_, Result<ClusterStatus, Rejection>> {
        Box::pin(async move {
            let status = self.status();
            let member = MemberStatus { node_id: 1, addr: MEMORY_ADDR.into(), status: Some(status), error: None };
            Ok(ClusterStatus { leader: Some(1), members: vec![member] })
        })
    }

    fn cluster_change(&self, change: ClusterChange) -> BoxFuture<'_, Result<NodeStatus, Rejection>> {
        Box::pin(async move {
            match change {
                // Nothing to snapshot or purge: the state is the snapshot.
                ClusterChange::Snapshot | ClusterChange::PurgeLog => Ok(self.status()),
                ClusterChange::AddLearner { .. } | ClusterChange::ChangeMembership { .. } => Err(Rejection::new(
                    ReasonCode::INPUT_INVALID,
                    "an in-memory ledger has one member; membership cannot change",
                )),
            }
        })
    }

    fn snapshot(&self) -> BoxFuture<'_, Result<LedgerState, Rejection>> {
        Box::pin(async move {
            self.available()?;
            Ok(self.lock().state.clone())
        })
    }

    fn watch(&self, filter: WatchFilter) -> BoxFuture<'_, Result<WatchStream, Rejection>> {
        Box::pin(async move {
            self.available()?;
            Ok(self.watch_from(filter))
        })
    }
}

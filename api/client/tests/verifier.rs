//! The verifier's feed against a scripted [`Ledger`]: an event the replica cannot fold stops the
//! feed loudly, every verification then fails closed with LEDGER_UNAVAILABLE (no request task
//! panics on a poisoned lock), and the feed starts over from a fresh snapshot.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use writ_api::dto::{
    ClusterChange, ClusterStatus, NodeStatus, QueryRequest, QueryResult, SubmitRequest, SubmitResponse, WatchFilter,
    WatchLine,
};
use writ_api::ledger::{Event, EventEnvelope};
use writ_api::reason::ReasonCode;
use writ_api::settings::TenantSettingsV1;
use writ_api::state::LedgerState;
use writ_api::Rejection;
use writ_client::{unavailable, Ledger, Verifier, WatchStream};

/// Serves an empty snapshot once, then a watch whose first event changes the settings of a
/// tenant the snapshot does not hold; later snapshot requests are counted and never answered
/// (the ledger is "down"), so the replica stays in the state the corrupt event left it.
struct CorruptFeed {
    snapshots: AtomicUsize,
    reloaded: tokio::sync::Notify,
}

impl Ledger for CorruptFeed {
    fn submit(&self, _: SubmitRequest) -> BoxFuture<'_, Result<SubmitResponse, Rejection>> {
        Box::pin(async { Err(unavailable("not used")) })
    }
    fn query(&self, _: QueryRequest) -> BoxFuture<'_, Result<QueryResult, Rejection>> {
        Box::pin(async { Err(unavailable("not used")) })
    }
    fn node_status(&self) -> BoxFuture<'_, Result<NodeStatus, Rejection>> {
        Box::pin(async { Err(unavailable("not used")) })
    }
    fn cluster_status(&self) -> BoxFuture<'_, Result<ClusterStatus, Rejection>> {
        Box::pin(async { Err(unavailable("not used")) })
    }
    fn cluster_change(&self, _: ClusterChange) -> BoxFuture<'_, Result<NodeStatus, Rejection>> {
        Box::pin(async { Err(unavailable("not used")) })
    }
    fn snapshot(&self) -> BoxFuture<'_, Result<LedgerState, Rejection>> {
        Box::pin(async move {
            if self.snapshots.fetch_add(1, Ordering::SeqCst) == 0 {
                return Ok(LedgerState::default());
            }
            self.reloaded.notify_one();
            futures::future::pending().await
        })
    }
    fn watch(&self, filter: WatchFilter) -> BoxFuture<'_, Result<WatchStream, Rejection>> {
        Box::pin(async move {
            assert_eq!(filter.from, Some(1), "the watch resumes right after the snapshot");
            let corrupt = EventEnvelope {
                revision: 1,
                stream: "t-missing".into(),
                seq: 1,
                at_ms: 1,
                trace_id: "trace".into(),
                event: Event::TenantSettingsChangedV1 {
                    tenant_id: "t-missing".into(),
                    settings: TenantSettingsV1::default(),
                },
            };
            let lines = futures::stream::iter([WatchLine::Event(Box::new(corrupt))]).chain(futures::stream::pending());
            Ok(lines.boxed() as WatchStream)
        })
    }
}

#[tokio::test]
async fn an_unfoldable_event_fails_closed_and_restarts_the_feed() {
    let ledger = Arc::new(CorruptFeed { snapshots: AtomicUsize::new(0), reloaded: tokio::sync::Notify::new() });
    let verifier = Verifier::follow(ledger.clone(), "urn:writ:mcp");
    tokio::time::timeout(Duration::from_secs(30), ledger.reloaded.notified())
        .await
        .expect("after the corrupt event the feed asks for a fresh snapshot");
    assert!(!verifier.is_current(), "a replica that could not fold an event is not current");
    for _ in 0..2 {
        let refused = verifier.verify("a.b.c").await.expect_err("nothing is verified on a broken replica");
        assert_eq!(refused.reason, ReasonCode::LEDGER_UNAVAILABLE, "{refused:?}");
    }
    assert_eq!(verifier.revision(), 0, "the corrupt event is not announced as applied");
}

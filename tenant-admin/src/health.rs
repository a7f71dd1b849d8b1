//! A tenant's tools' health (`writ_api::health`): `GET /v1/tenants/{t}/health` once, and
//! `GET /v1/tenants/{t}/health/events` as server-sent events — the whole picture when the stream
//! opens and whenever the catalog changes (`health`), then each tool whose state changed
//! (`tool`), looked at whenever this node's replica moves and at least every [`RECHECK`] (an
//! executor's connection goes stale with time alone).

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use writ_api::health::{tenant_health, TenantHealth, ToolState};
use writ_api::{ReasonCode, Rejection};

use crate::error::ApiError;
use crate::service::{find_tenant, Shared};

/// The longest a stream waits for the replica to move before it looks again.
const RECHECK: Duration = Duration::from_secs(30);
/// Health streams a node serves at once.
const STREAMS_MAX: usize = 256;

static STREAMS: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/v1/tenants/{tenant}/health", get(health))
        .route("/v1/tenants/{tenant}/health/events", get(events))
}

/// Each tool of the tenant's catalog as a state, with why, from this node's replica.
async fn health(State(st): State<Shared>, Path(tenant): Path<String>) -> Result<Json<TenantHealth>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let now = writ_client::now_ms();
    Ok(Json(st.view.with_state(|s| tenant_health(s, &t.id, now))))
}

/// The stream of a tenant's tools' health changes.
async fn events(State(st): State<Shared>, Path(tenant): Path<String>) -> Result<Response, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    if STREAMS.fetch_add(1, Ordering::SeqCst) >= STREAMS_MAX {
        STREAMS.fetch_sub(1, Ordering::SeqCst);
        let busy = format!("at most {STREAMS_MAX} health streams are open on this node");
        return Err(Rejection::new(ReasonCode::QUOTA_EXCEEDED, busy).into());
    }
    let watch = Watch { st, tenant_id: t.id, seen: 0, catalog: None, last: BTreeMap::new(), queue: VecDeque::new() };
    let stream = futures::stream::unfold((watch, StreamSlot), |(mut w, slot)| async move {
        loop {
            if let Some(event) = w.queue.pop_front() {
                return Some((Ok::<_, Infallible>(event), (w, slot)));
            }
            w.look().await;
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

/// One stream's view: what it last said of each tool.
struct Watch {
    st: Shared,
    tenant_id: String,
    seen: u64,
    catalog: Option<Option<u64>>,
    last: BTreeMap<String, ToolState>,
    queue: VecDeque<SseEvent>,
}

impl Watch {
    /// Waits for the replica to move (or [`RECHECK`]) — not before the first look — and queues
    /// what changed.
    async fn look(&mut self) {
        if self.catalog.is_some() {
            self.st.view.wait_for(self.seen + 1, RECHECK).await;
        }
        let now = writ_client::now_ms();
        let (revision, health) = self.st.view.with_state(|s| (s.revision, tenant_health(s, &self.tenant_id, now)));
        self.seen = self.seen.max(revision);
        let event = |kind: &str, data: String| SseEvent::default().event(kind).data(data);
        if self.catalog != Some(health.catalog_version) {
            self.catalog = Some(health.catalog_version);
            self.last = health.tools.iter().map(|t| (t.tool.clone(), t.state)).collect();
            self.queue.push_back(event("health", json(&health)));
            return;
        }
        for tool in health.tools {
            if self.last.insert(tool.tool.clone(), tool.state) != Some(tool.state) {
                self.queue.push_back(event("tool", json(&tool)));
            }
        }
    }
}

/// The JSON text an event carries.
fn json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// One of the [`STREAMS_MAX`] streams, given back when its stream ends.
struct StreamSlot;

impl Drop for StreamSlot {
    fn drop(&mut self) {
        STREAMS.fetch_sub(1, Ordering::SeqCst);
    }
}

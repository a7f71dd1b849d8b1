//! Admin routes for a tenant's upstream MCP servers (`writ_api::upstream`): add, list, show,
//! set, remove; `sync` lists the upstream's tools from this node (resolving the credential
//! reference here) and records what differs from the pinned set as pending; `approve` pins the
//! pending set whose digest the operator saw.

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use writ_api::dto::Query as LedgerQuery;
use writ_api::ledger::Command;
use writ_api::upstream::{
    SyncReport, ToolsDiff, UpstreamBody, UpstreamSpecV1, UpstreamSummary, UpstreamV1, UpstreamView,
    UPSTREAM_CA_BYTES_MAX,
};
use writ_api::{ReasonCode, Rejection};

use crate::error::{ApiError, ValidJson};
use crate::service::{find_tenant, query, submit, AdminState, Shared};

/// An upstream body: a URL, a reference and at most a CA bundle (plus JSON overhead).
const UPSTREAM_BODY_BYTES_MAX: usize = UPSTREAM_CA_BYTES_MAX + 16 * 1024;

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route(
            "/v1/tenants/{tenant}/upstreams",
            get(list_upstreams).post(add_upstream).layer(DefaultBodyLimit::max(UPSTREAM_BODY_BYTES_MAX)),
        )
        .route(
            "/v1/tenants/{tenant}/upstreams/{name}",
            get(show_upstream)
                .patch(set_upstream)
                .delete(remove_upstream)
                .layer(DefaultBodyLimit::max(UPSTREAM_BODY_BYTES_MAX)),
        )
        .route("/v1/tenants/{tenant}/upstreams/{name}/sync", post(sync_upstream))
        .route("/v1/tenants/{tenant}/upstreams/{name}/approve", post(approve_upstream))
}

#[derive(Debug, Serialize, Deserialize)]
pub struct UpstreamList {
    pub upstreams: Vec<UpstreamSummary>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveBody {
    /// The pending set's digest, as `sync` or `show` reported it.
    pub digest: String,
}

async fn find_upstream(st: &AdminState, tenant_id: String, name: String) -> Result<UpstreamV1, Rejection> {
    query(st, LedgerQuery::GetUpstream { tenant_id, name }, false).await
}

async fn list_upstreams(State(st): State<Shared>, Path(tenant): Path<String>) -> Result<Json<UpstreamList>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let upstreams = query(&st, LedgerQuery::ListUpstreams { tenant_id: t.id }, false).await?;
    Ok(Json(UpstreamList { upstreams }))
}

async fn add_upstream(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidJson(body): ValidJson<UpstreamBody>,
) -> Result<(StatusCode, Json<UpstreamV1>), ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let name = body.name.clone().ok_or_else(|| Rejection::new(ReasonCode::UPSTREAM_INVALID, "name is required"))?;
    let url = body.url.as_deref().ok_or_else(|| Rejection::new(ReasonCode::UPSTREAM_INVALID, "url is required"))?;
    let spec = body.apply(UpstreamSpecV1::new(url))?;
    submit(&st, Command::PutUpstream { tenant_id: t.id.clone(), name: name.clone(), spec, create: true }).await?;
    Ok((StatusCode::CREATED, Json(find_upstream(&st, t.id, name).await?)))
}

async fn show_upstream(
    State(st): State<Shared>,
    Path((tenant, name)): Path<(String, String)>,
) -> Result<Json<UpstreamView>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(UpstreamView::of(find_upstream(&st, t.id, name).await?)))
}

async fn set_upstream(
    State(st): State<Shared>,
    Path((tenant, name)): Path<(String, String)>,
    ValidJson(body): ValidJson<UpstreamBody>,
) -> Result<Json<UpstreamV1>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    if body.name.as_ref().is_some_and(|n| n != &name) {
        return Err(Rejection::new(ReasonCode::UPSTREAM_INVALID, "an upstream cannot be renamed").into());
    }
    let old = find_upstream(&st, t.id.clone(), name.clone()).await?;
    let spec = body.apply(old.spec)?;
    submit(&st, Command::PutUpstream { tenant_id: t.id.clone(), name: name.clone(), spec, create: false }).await?;
    Ok(Json(find_upstream(&st, t.id, name).await?))
}

async fn remove_upstream(
    State(st): State<Shared>,
    Path((tenant, name)): Path<(String, String)>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    submit(&st, Command::RemoveUpstream { tenant_id: t.id, name: name.clone() }).await?;
    Ok(Json(serde_json::json!({"removed": name})))
}

async fn sync_upstream(
    State(st): State<Shared>,
    Path((tenant, name)): Path<(String, String)>,
) -> Result<Json<SyncReport>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let upstream = find_upstream(&st, t.id.clone(), name.clone()).await?;
    let (tools, protocol_version) = writ_client::upstream::observe(&upstream.spec).await?;
    let diff = ToolsDiff::between(upstream.pinned.as_ref(), &tools);
    let observed_digest = tools.digest.clone();
    let count = tools.tools.len();
    submit(&st, Command::ObserveUpstreamTools { tenant_id: t.id.clone(), name: name.clone(), tools }).await?;
    let now = find_upstream(&st, t.id, name).await?;
    let pending = now.pending.as_ref().is_some_and(|p| p.digest == observed_digest);
    Ok(Json(SyncReport { protocol_version, observed_digest, tools: count, diff, pending }))
}

async fn approve_upstream(
    State(st): State<Shared>,
    Path((tenant, name)): Path<(String, String)>,
    ValidJson(body): ValidJson<ApproveBody>,
) -> Result<Json<UpstreamV1>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let command = Command::ApproveUpstreamTools { tenant_id: t.id.clone(), name: name.clone(), digest: body.digest };
    submit(&st, command).await?;
    Ok(Json(find_upstream(&st, t.id, name).await?))
}

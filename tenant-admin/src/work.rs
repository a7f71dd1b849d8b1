//! Work items (SPEC D12): operators create, revise, close, show and list them; the ledger
//! holds their revisions and checks operations against them. Devices of a scope are named by
//! id or name here and stored by id.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use writ_api::dto::{CreateWorkRequest, Query as LedgerQuery, ReviseWorkRequest, WorkList, PAGE_LIMIT_DEFAULT};
use writ_api::ledger::Command;
use writ_api::work::{WorkChangeV1, WorkItem, WorkScopeV1, WorkState};

use crate::error::{ApiError, ValidJson, ValidQuery};
use crate::service::{find_device, find_tenant, query, submit, AdminState, Shared};

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/v1/tenants/{tenant}/work", post(create).get(list))
        .route("/v1/tenants/{tenant}/work/{work}", get(show).patch(revise))
}

async fn find(st: &AdminState, tenant_id: String, work_id: String) -> Result<WorkItem, ApiError> {
    Ok(query(st, LedgerQuery::GetWork { tenant_id, work_id }, false).await?)
}

/// The scope with its devices resolved to ids (each must be a device of the tenant).
async fn resolved(st: &AdminState, tenant_id: &str, mut scope: WorkScopeV1) -> Result<WorkScopeV1, ApiError> {
    if scope.devices.len() > writ_api::work::WORK_SCOPE_ENTRIES_MAX {
        return Err(writ_api::Rejection::new(
            writ_api::ReasonCode::INPUT_INVALID,
            format!("at most {} devices in a scope", writ_api::work::WORK_SCOPE_ENTRIES_MAX),
        )
        .into());
    }
    let mut ids = Vec::with_capacity(scope.devices.len());
    for device in std::mem::take(&mut scope.devices) {
        ids.push(find_device(st, tenant_id.to_string(), device).await?.id);
    }
    scope.devices = ids;
    Ok(scope)
}

async fn create(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidJson(b): ValidJson<CreateWorkRequest>,
) -> Result<(StatusCode, Json<WorkItem>), ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let scope = resolved(&st, &t.id, b.scope).await?;
    let cmd = Command::CreateWork {
        tenant_id: t.id.clone(),
        work_id: b.id.clone(),
        title: b.title,
        owner: b.owner,
        scope,
        by: crate::service::actor().name(),
    };
    submit(&st, cmd).await?;
    Ok((StatusCode::CREATED, Json(find(&st, t.id, b.id).await?)))
}

async fn revise(
    State(st): State<Shared>,
    Path((tenant, work)): Path<(String, String)>,
    ValidJson(b): ValidJson<ReviseWorkRequest>,
) -> Result<Json<WorkItem>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let scope = match b.scope {
        Some(scope) => Some(resolved(&st, &t.id, scope).await?),
        None => None,
    };
    let change = WorkChangeV1 { title: b.title, owner: b.owner, scope, state: b.state, note: b.note };
    let cmd = Command::ReviseWork {
        tenant_id: t.id.clone(),
        work_id: work.clone(),
        expected_revision: b.expected_revision,
        change,
        by: crate::service::actor().name(),
    };
    submit(&st, cmd).await?;
    Ok(Json(find(&st, t.id, work).await?))
}

async fn show(
    State(st): State<Shared>,
    Path((tenant, work)): Path<(String, String)>,
) -> Result<Json<WorkItem>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(find(&st, t.id, work).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    state: Option<WorkState>,
    after: Option<String>,
    limit: Option<u32>,
    #[serde(default)]
    stale: bool,
}

async fn list(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidQuery(p): ValidQuery<ListParams>,
) -> Result<Json<WorkList>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let q = LedgerQuery::ListWork {
        tenant_id: t.id,
        state: p.state,
        after: p.after,
        limit: p.limit.unwrap_or(PAGE_LIMIT_DEFAULT),
    };
    Ok(Json(query(&st, q, p.stale).await?))
}

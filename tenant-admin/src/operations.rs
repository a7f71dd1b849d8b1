//! Operator actions on operations (SPEC D6, D7, X3): the queue (a filtered list, with what needs
//! a human: unknown effects and reported effects awaiting a verdict), show one, cancel it before its attempt,
//! accept or reject a reported effect (acceptance still needs an independent observation, which
//! the ledger checks), and resolve an `unknown_effect` after reconciling it. The history names
//! the operator who acted (`operator:<name>`, or `break-glass` for the shared token).

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use writ_api::dto::{
    DecisionRequest, OperationFilter, OperationHistory, OperationList, Query as LedgerQuery, ResolveRequest,
};
use writ_api::ledger::Command;
use writ_api::operation::{Operation, OperationState, Verdict};

use crate::error::{ApiError, ValidJson, ValidQuery};
use crate::service::{actor, find_device, find_principal, find_tenant, query, submit, AdminState, Shared};

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/v1/tenants/{tenant}/operations", get(list))
        .route("/v1/tenants/{tenant}/operations/{operation}", get(show))
        .route("/v1/tenants/{tenant}/operations/{operation}/history", get(history))
        .route("/v1/tenants/{tenant}/operations/{operation}/cancel", post(cancel))
        .route("/v1/tenants/{tenant}/operations/{operation}/accept", post(accept))
        .route("/v1/tenants/{tenant}/operations/{operation}/reject", post(reject))
        .route("/v1/tenants/{tenant}/operations/{operation}/resolve", post(resolve))
}

async fn find(st: &AdminState, tenant_id: String, operation_id: String) -> Result<Operation, ApiError> {
    Ok(query(st, LedgerQuery::GetOperation { tenant_id, operation_id }, false).await?)
}

/// Runs `command` for the operation and answers with its new state.
async fn act(
    st: &AdminState,
    tenant: String,
    operation: String,
    command: impl FnOnce(String) -> Command,
) -> Result<Json<Operation>, ApiError> {
    let t = find_tenant(st, tenant).await?;
    let op = find(st, t.id.clone(), operation).await?;
    submit(st, command(t.id.clone())).await?;
    Ok(Json(find(st, t.id, op.spec.operation_id).await?))
}

/// `GET /v1/tenants/{tenant}/operations`: devices and principals by id or name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    state: Option<OperationState>,
    device: Option<String>,
    principal: Option<String>,
    work: Option<String>,
    since_ms: Option<u64>,
    until_ms: Option<u64>,
    #[serde(default)]
    needs_attention: bool,
    after: Option<String>,
    limit: Option<u32>,
    #[serde(default)]
    stale: bool,
}

async fn list(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidQuery(p): ValidQuery<ListParams>,
) -> Result<Json<OperationList>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    let device_id = match p.device {
        Some(d) => Some(find_device(&st, t.id.clone(), d).await?.id),
        None => None,
    };
    let principal_id = match p.principal {
        Some(name) => Some(find_principal(&st, t.id.clone(), name).await?.id),
        None => None,
    };
    let filter = OperationFilter {
        state: p.state,
        device_id,
        principal_id,
        work_id: p.work,
        since_ms: p.since_ms,
        until_ms: p.until_ms,
        needs_attention: p.needs_attention,
    };
    let q = LedgerQuery::ListOperations {
        tenant_id: t.id,
        filter,
        after: p.after,
        limit: p.limit.unwrap_or(writ_api::dto::PAGE_LIMIT_DEFAULT),
    };
    Ok(Json(query(&st, q, p.stale).await?))
}

async fn show(
    State(st): State<Shared>,
    Path((tenant, operation)): Path<(String, String)>,
) -> Result<Json<Operation>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(find(&st, t.id, operation).await?))
}

async fn history(
    State(st): State<Shared>,
    Path((tenant, operation)): Path<(String, String)>,
) -> Result<Json<OperationHistory>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(query(&st, LedgerQuery::GetOperationHistory { tenant_id: t.id, operation_id: operation }, false).await?))
}

async fn cancel(
    State(st): State<Shared>,
    Path((tenant, operation)): Path<(String, String)>,
) -> Result<Json<Operation>, ApiError> {
    let id = operation.clone();
    act(&st, tenant, operation, |tenant_id| Command::CancelOperation {
        tenant_id,
        operation_id: id,
        by_principal_id: actor().name(),
    })
    .await
}

async fn decide(
    st: Shared,
    tenant: String,
    operation: String,
    verdict: Verdict,
    note: String,
) -> Result<Json<Operation>, ApiError> {
    let id = operation.clone();
    act(&st, tenant, operation, |tenant_id| Command::DecideOperation {
        tenant_id,
        operation_id: id,
        by_principal_id: actor().name(),
        verdict,
        note,
    })
    .await
}

async fn accept(
    State(st): State<Shared>,
    Path((tenant, operation)): Path<(String, String)>,
    ValidJson(b): ValidJson<DecisionRequest>,
) -> Result<Json<Operation>, ApiError> {
    decide(st, tenant, operation, Verdict::Accept, b.note).await
}

async fn reject(
    State(st): State<Shared>,
    Path((tenant, operation)): Path<(String, String)>,
    ValidJson(b): ValidJson<DecisionRequest>,
) -> Result<Json<Operation>, ApiError> {
    decide(st, tenant, operation, Verdict::Reject, b.note).await
}

async fn resolve(
    State(st): State<Shared>,
    Path((tenant, operation)): Path<(String, String)>,
    ValidJson(b): ValidJson<ResolveRequest>,
) -> Result<Json<Operation>, ApiError> {
    let id = operation.clone();
    act(&st, tenant, operation, |tenant_id| Command::ResolveUnknownEffect {
        tenant_id,
        operation_id: id,
        by_principal_id: actor().name(),
        outcome: b.outcome,
        note: b.note,
    })
    .await
}

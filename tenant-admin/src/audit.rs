//! Admin routes for a tenant's audit trail (SPEC D10): a filtered list with stable cursors and
//! a streamed NDJSON export. Records are already redacted where they are written.

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use writ_api::audit::AuditFilter;
use writ_api::dto::{AuditPage, Query as LedgerQuery, PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
use writ_api::ReasonCode;

use crate::error::{ApiError, ValidQuery};
use crate::service::{find_tenant, query, AdminState, Shared};

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/v1/tenants/{tenant}/audit", get(list_audit))
        .route("/v1/tenants/{tenant}/audit/export", get(export_audit))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditParams {
    after: Option<u64>,
    limit: Option<u32>,
    domain: Option<String>,
    operation: Option<String>,
    outcome: Option<String>,
    /// Principal id.
    principal: Option<String>,
    reason: Option<ReasonCode>,
    since_ms: Option<u64>,
    trace: Option<String>,
}

impl AuditParams {
    fn filter(&self) -> Result<AuditFilter, ApiError> {
        let filter = AuditFilter {
            domain: self.domain.clone(),
            operation: self.operation.clone(),
            outcome: self.outcome.clone(),
            principal_id: self.principal.clone(),
            reason_code: self.reason,
            since_ms: self.since_ms,
            trace_id: self.trace.clone(),
        };
        filter.check()?;
        Ok(filter)
    }
}

async fn page(
    st: &AdminState,
    tenant_id: &str,
    after: Option<u64>,
    limit: u32,
    filter: &AuditFilter,
) -> Result<AuditPage, ApiError> {
    let q = LedgerQuery::ListAudit { tenant_id: tenant_id.to_string(), after, limit, filter: filter.clone() };
    Ok(query(st, q, false).await?)
}

async fn list_audit(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidQuery(p): ValidQuery<AuditParams>,
) -> Result<Json<AuditPage>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(page(&st, &t.id, p.after, p.limit.unwrap_or(PAGE_LIMIT_DEFAULT), &p.filter()?).await?))
}

/// Streams every matching record as NDJSON, page by page (each page a linearizable read), so
/// memory stays bounded however long the trail is. A failure mid-stream ends the body with an
/// error line carrying the reason and the cursor to resume from.
async fn export_audit(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    ValidQuery(p): ValidQuery<AuditParams>,
) -> Result<Response, ApiError> {
    if p.limit.is_some() {
        return Err(ApiError::new(ReasonCode::INPUT_INVALID, "export takes no limit; it streams every record"));
    }
    let filter = p.filter()?;
    let t = find_tenant(&st, tenant).await?;
    Ok(export_stream(st, t.id, filter, p.after))
}

/// Every record of `tenant_id`'s trail matching `filter` after `after`, as a streamed NDJSON
/// body (the admin API's export and the desk's).
pub(crate) fn export_stream(st: Shared, tenant_id: String, filter: AuditFilter, after: Option<u64>) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        let mut after = after;
        loop {
            let (lines, next) = match page(&st, &tenant_id, after, PAGE_LIMIT_MAX, &filter).await {
                Ok(pg) => {
                    let mut buf = Vec::new();
                    for r in &pg.records {
                        serde_json::to_writer(&mut buf, r).expect("records serialize");
                        buf.push(b'\n');
                    }
                    (buf, pg.next_cursor)
                }
                Err(ApiError(e)) => {
                    let line = serde_json::json!({"error": e.reason, "message": e.message, "resume_after": after});
                    (format!("{line}\n").into_bytes(), None)
                }
            };
            if !lines.is_empty() && tx.send(Ok(Bytes::from(lines))).await.is_err() {
                return;
            }
            match next {
                Some(n) => after = Some(n),
                None => return,
            }
        }
    });
    let body =
        Body::from_stream(futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) }));
    ([(axum::http::header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}

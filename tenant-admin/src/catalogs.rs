//! Admin routes for tenant catalogs (SPEC D4): publish a document (checked and compiled here,
//! recorded as the next version by the ledger), list versions, show one, diff two.

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use writ_api::catalog::{CatalogDiff, CatalogVersion, CATALOG_BYTES_MAX};
use writ_api::dto::{CatalogList, Query as LedgerQuery};
use writ_api::ledger::Command;
use writ_api::ReasonCode;

use crate::error::ApiError;
use crate::service::{find_tenant, query, submit, AdminState, Shared};

/// Bodies up to this size reach the catalog checks (which answer CATALOG_TOO_LARGE above the
/// ceiling); larger ones are cut off as PAYLOAD_TOO_LARGE.
const CATALOG_BODY_BYTES_MAX: usize = 4 * CATALOG_BYTES_MAX;

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route(
            "/v1/tenants/{tenant}/catalogs",
            get(list_catalogs).post(publish_catalog).layer(DefaultBodyLimit::max(CATALOG_BODY_BYTES_MAX)),
        )
        .route("/v1/tenants/{tenant}/catalogs/{version}", get(show_catalog))
        .route("/v1/tenants/{tenant}/catalogs/{version}/diff/{to}", get(diff_catalogs))
}

/// A version path segment: a number or `latest`.
fn version_of(v: &str) -> Result<Option<u64>, ApiError> {
    match v {
        "latest" => Ok(None),
        v => v.parse::<u64>().map(Some).map_err(|_| {
            ApiError::new(ReasonCode::INPUT_INVALID, format!("version '{v}' is not a number or 'latest'"))
        }),
    }
}

/// `GET …/catalogs/{version}/diff/{to}`: actions added, removed and changed (by field).
async fn diff_catalogs(
    State(st): State<Shared>,
    Path((tenant, from, to)): Path<(String, String, String)>,
) -> Result<Json<CatalogDiff>, ApiError> {
    let (from, to) = (version_of(&from)?, version_of(&to)?);
    let t = find_tenant(&st, tenant).await?;
    let from = find_catalog(&st, t.id.clone(), from).await?;
    let to = find_catalog(&st, t.id, to).await?;
    Ok(Json(CatalogDiff::between(&from, &to)))
}

async fn find_catalog(st: &AdminState, tenant_id: String, version: Option<u64>) -> Result<CatalogVersion, ApiError> {
    Ok(query(st, LedgerQuery::GetCatalog { tenant_id, version }, false).await?)
}

async fn publish_catalog(
    State(st): State<Shared>,
    Path(tenant): Path<String>,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<(StatusCode, Json<CatalogVersion>), ApiError> {
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(ReasonCode::CATALOG_TOO_LARGE, format!("catalog body exceeds {CATALOG_BODY_BYTES_MAX} bytes"))
        } else {
            ApiError::new(ReasonCode::INPUT_INVALID, e.body_text())
        }
    })?;
    let t = find_tenant(&st, tenant).await?;
    let catalog = writ_api::catalog::compile(&body)?;
    let events = submit(&st, Command::PublishCatalog { tenant_id: t.id.clone(), catalog }).await?;
    // No event: the same catalog is already the newest version.
    let status = if events.is_empty() { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(find_catalog(&st, t.id, None).await?)))
}

async fn list_catalogs(State(st): State<Shared>, Path(tenant): Path<String>) -> Result<Json<CatalogList>, ApiError> {
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(query(&st, LedgerQuery::ListCatalogs { tenant_id: t.id }, false).await?))
}

async fn show_catalog(
    State(st): State<Shared>,
    Path((tenant, version)): Path<(String, String)>,
) -> Result<Json<CatalogVersion>, ApiError> {
    let version = version_of(&version)?;
    let t = find_tenant(&st, tenant).await?;
    Ok(Json(find_catalog(&st, t.id, version).await?))
}
